//! Function libraries across nodes and regions (FUNCTION LOAD, DELETE,
//! FLUSH, RESTORE). The libraries are a lattice
//! (`elsa_lattice::libraries`), small and rarely changed, so they travel
//! whole, like the flush floors (`floors`):
//!
//! - at once: the node that changed them sends a [`wire::Body::Functions`]
//!   frame to every member of the ring, in every region (it may be lost:
//!   a cut link, a node down);
//! - in every anti-entropy round, both ways, as a digest (`AeGroups` and
//!   `AeBuckets` carry the sender's): a node that finds the peer's digest
//!   different from its own sends the peer its libraries. Each side does,
//!   so after the merges both hold the join.
//!
//! The server owns the libraries (it keeps them on disk and compiles
//! them): it registers a [`FunctionLibraries`] once at startup.

use super::*;
use elsa_lattice::libraries::Libraries;

/// The server's side: the node's libraries.
pub trait FunctionLibraries: Send + Sync {
    /// Their digest (`Libraries::digest`; 0: none).
    fn digest(&self) -> u64;
    /// Their state.
    fn state(&self) -> Libraries;
    /// A peer's state, merged in (and kept on disk when it changed
    /// anything).
    fn merge(&self, theirs: &Libraries);
}

impl Cluster {
    /// Registers the node's libraries (once, at startup).
    pub fn serve_functions(&self, libraries: Arc<dyn FunctionLibraries>) {
        let _ = self.functions.set(libraries);
    }

    /// The libraries changed here: every other node of every region gets
    /// them now; anti-entropy repairs those that miss the frame.
    pub fn functions_changed(self: &Arc<Self>) {
        let Some(libs) = self.functions.get() else {
            return;
        };
        let state = Bytes::from(libs.state().encode());
        for m in self.ring.load().members() {
            if m.node != self.settings.node {
                let frame = Frame::new(Body::Functions(wire::Functions {
                    state: state.clone(),
                }));
                self.send(m.node, frame, false);
            }
        }
    }

    /// This node's digest, for an anti-entropy frame.
    pub(super) fn functions_digest(&self) -> u64 {
        self.functions.get().map_or(0, |l| l.digest())
    }

    /// A peer's digest from an anti-entropy frame: if it differs, the peer
    /// gets this node's libraries (it sends its own when it sees this
    /// node's digest differ from its own).
    pub(super) fn on_functions_digest(self: &Arc<Self>, peer: NodeId, digest: u64) {
        let Some(libs) = self.functions.get() else {
            return;
        };
        let mine = libs.digest();
        if mine == digest || mine == 0 {
            return;
        }
        let state = libs.state();
        let frame = Frame::new(Body::Functions(wire::Functions {
            state: Bytes::from(state.encode()),
        }));
        self.send(peer, frame, false);
    }

    /// Libraries a peer sent (checked by `check_frame`): merged in.
    pub(super) fn on_functions(&self, f: &wire::Functions) {
        if let (Some(libs), Some(theirs)) = (self.functions.get(), Libraries::decode(&f.state)) {
            libs.merge(&theirs);
        }
    }
}

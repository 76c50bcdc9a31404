//! What this node knows about each peer, for `INFO replication`, the
//! metrics and the status page.

use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::time::Duration;

use elsa_lattice::NodeId;

use super::Cluster;

/// What this node knows about one peer, for INFO replication.
#[derive(Clone, Debug, Default)]
pub struct PeerStats {
    /// Commit-to-merge delay of the newest lattice received from it, ms.
    pub lag_ms: u64,
    /// Lattices received from it by gossip.
    pub received: u64,
    /// Up to when (HLC) an anti-entropy round found everything it held
    /// here: in sync, or, while this node caught up, at least its data.
    pub synced_ts: u64,
    /// Buckets that differed in the last round.
    pub last_ae_buckets: usize,
    /// Lattices shipped to it by anti-entropy.
    pub ae_shipped: u64,
    /// Wall time of the last anti-entropy round (ms since the epoch).
    pub last_ae_unix_ms: u64,
    /// Anti-entropy rounds with it that got its digests back.
    pub ae_rounds: u64,
    /// Anti-entropy rounds with it not started, or not answered, because
    /// a gossip stream of this node's to it was behind (see `streams`).
    pub ae_waited_for_stream: u64,
    /// Like `synced_ts`, for this node's own data: the peer had all of it
    /// committed before this (HLC; see `decommission`).
    pub handoff_ts: u64,
}

/// A peer as INFO shows it.
#[derive(Clone, Debug)]
pub struct PeerInfo {
    /// Its id.
    pub node: NodeId,
    /// Its region.
    pub region: String,
    /// Peer address.
    pub addr: SocketAddr,
    /// Client address.
    pub client: SocketAddr,
    /// Link up.
    pub connected: bool,
    /// Caught up since it started (may be primary).
    pub ready: bool,
    /// Frames queued on the link.
    pub queued: usize,
    /// Gossip frames dropped for a full queue or emulated loss.
    pub dropped: u64,
    /// Counters.
    pub stats: PeerStats,
    /// How long the oldest frame of this node's gossip streams to it (of
    /// another region) has waited for its acknowledgement, and whether a
    /// stream is stuck (see `streams`).
    pub stream: (Duration, bool),
}

impl Cluster {
    /// A round with `peer` waited for the stream to it (see
    /// [`PeerStats::ae_waited_for_stream`]).
    pub(super) fn note_ae_waited(&self, peer: NodeId) {
        let mut peers = self.peers.lock().unwrap_or_else(|e| e.into_inner());
        peers.entry(peer).or_default().ae_waited_for_stream += 1;
    }

    /// Every peer, for INFO replication.
    pub fn peer_info(&self) -> Vec<PeerInfo> {
        let ring = self.ring.load();
        let links = self.links.lock().unwrap_or_else(|e| e.into_inner());
        let peers = self.peers.lock().unwrap_or_else(|e| e.into_inner());
        ring.members()
            .iter()
            .filter(|m| m.node != self.settings.node)
            .map(|m| {
                let link = links.get(&m.node);
                PeerInfo {
                    node: m.node,
                    region: m.region.clone(),
                    addr: m.peer,
                    client: m.client,
                    connected: link.is_some_and(|l| l.connected.load(Ordering::Relaxed)),
                    ready: m.ready,
                    queued: link.map_or(0, |l| l.queued.load(Ordering::Relaxed)),
                    dropped: link.map_or(0, |l| l.dropped.load(Ordering::Relaxed)),
                    stats: peers.get(&m.node).cloned().unwrap_or_default(),
                    stream: self.stream_wait(m.node),
                }
            })
            .collect()
    }
}

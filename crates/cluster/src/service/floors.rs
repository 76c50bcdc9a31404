//! FLUSHALL and FLUSHDB across nodes and regions. A flush is a range
//! tombstone at the flushing shard's clock (`elsa_shard::db::Floors`):
//! whatever was committed before it is gone, on every node of every
//! region, and what was committed at or after it stays. The floors are a
//! lattice (the higher of each wins), so they travel like one:
//!
//! - at once: the node that flushed sends a [`wire::Body::Flush`] frame to
//!   every member of the ring, in every region (it may be lost: a cut
//!   link, a node down);
//! - in every anti-entropy round, both ways (`AeGroups` and `AeBuckets`
//!   carry the sender's floors): a lost frame is repaired by the next
//!   round, and a node that was down learns them from the first round of
//!   its catch-up, before it serves again.
//!
//! A receiver hands them to each of its shards, which logs the ones that
//! rise (so they outlive its restart), drops what lies below, and from
//! then on drops every lattice below them on arrival — from gossip,
//! replication, anti-entropy or a transaction — so a replica that had not
//! heard of the flush cannot bring a flushed key back. The floors are
//! handed to the shards before the digest of the same round is taken
//! (one inbox, in order), so the round compares what is left.

use super::*;
use elsa_shard::db::Floors;
use elsa_shard::AdminMsg;

impl Cluster {
    /// A FLUSHALL or FLUSHDB ran here (logged by every local shard),
    /// leaving `floors`: every other node of every region gets them now;
    /// anti-entropy repairs those that miss the frame.
    pub fn flushed(self: &Arc<Self>, floors: &Floors) {
        let Some(wire_floors) = wire::Floors::of(floors) else {
            return;
        };
        for m in self.ring.load().members() {
            if m.node != self.settings.node {
                let frame = Frame::new(Body::Flush(wire_floors.clone()));
                self.send(m.node, frame, false);
            }
        }
    }

    /// This node's floors: the highest of its shards' (which learn them
    /// together, so they differ only for a moment).
    pub(super) async fn node_floors(&self) -> Option<wire::Floors> {
        let mut floors = Floors::default();
        for inbox in &self.inboxes {
            let (tx, rx) = oneshot::channel();
            if inbox.send(ShardMsg::Admin(AdminMsg::Floors(tx))).is_ok() {
                if let Ok(f) = rx.await {
                    floors.merge(&f);
                }
            }
        }
        wire::Floors::of(&floors)
    }

    /// Floors a peer sent (checked by `check_frame`): each local shard
    /// takes those higher than its own.
    pub(super) fn on_floors(&self, floors: Option<&wire::Floors>) {
        let Some(floors) = floors.map(wire::Floors::floors) else {
            return;
        };
        if floors.is_empty() {
            return;
        }
        for inbox in &self.inboxes {
            let _ = inbox.send(ShardMsg::Admin(AdminMsg::RaiseFloors(floors.clone())));
        }
    }
}

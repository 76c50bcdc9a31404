//! In-region replication, both sides: each local shard's batches of
//! commits go to every other replica of their keys in the region
//! ([`wire::Replicate`]); each receiver merges a batch durably (logged)
//! before it answers ([`wire::ReplicateAck`]); the shard's replies at
//! acknowledgement level `region` wait for those answers (see
//! `elsa_shard::repl`). So with ack `region` (the default) an acknowledged
//! write is on every replica of its key in the region, and losing any one
//! node loses nothing acknowledged.
//!
//! A batch is held until every replica its keys have *in the current
//! view* has confirmed it: a replica that left the ring (declared dead by
//! the failure detector) is no longer waited for, one that took its place
//! is sent the batch too, and a frame lost with a broken connection is
//! sent again. A replica the node cannot connect to but that is still in
//! the view is waited for: nothing but the view says a node is gone. A batch not
//! confirmed within [`RETRY_FOR`] is given up: the writes in it answer
//! that they were not confirmed (they are applied here, and may be lost if
//! this node fails before anti-entropy spreads them).
//!
//! A receiver that saw the sender leave the live set (declared dead) and
//! has not seen it catch up since refuses the batch: a node the region
//! declared dead (paused, cut off) must not get writes acknowledged as
//! replicated while another node serves its keys; the refusal also tells
//! it to catch up again. A sender it has never seen (it just started) is
//! accepted.

use super::*;

use elsa_shard::repl::{Replicator, Waiter};
use elsa_txn::router::RETRY_FOR;

/// How long a replica that has not answered waits before the batch is sent
/// to it again (the connection may have broken and dropped the frame).
const RESEND: Duration = Duration::from_millis(500);
/// How often pending batches are checked against the current view.
const CHECK_EVERY: Duration = Duration::from_millis(100);

/// One batch on its way to the region's other replicas.
pub(super) struct Batch {
    /// Each lattice with its slot (which replicas it needs).
    items: Vec<(usize, Lattice)>,
    /// Replicas that have merged it durably.
    confirmed: HashSet<NodeId>,
    /// When it was last sent to each replica still awaited.
    sent: HashMap<NodeId, Instant>,
    started: Instant,
    done: Waiter,
}

/// The [`Replicator`] shards of a node in a cluster use.
pub struct RegionReplicator(pub Arc<Cluster>);

impl Replicator for RegionReplicator {
    fn replicate(&self, _shard: usize, entries: Vec<LogEntry>, done: Waiter) {
        self.0.replicate_batch(entries, done);
    }

    fn serving(&self) -> bool {
        self.0.is_serving()
    }

    fn unconfirmed(&self) {
        self.0.lost_batch();
    }

    fn may_evict(&self, key: &[u8]) -> bool {
        let hash = std::hash::BuildHasher::hash_one(&self.0.hasher, key);
        let ring = self.0.ring.load();
        self.0.is_serving()
            && ring
                .replicas(slot_of(hash), ring.own_region())
                .first()
                .is_some_and(|p| p.node == self.0.settings.node)
    }

    fn alone(&self) -> bool {
        let me = self.0.settings.node;
        let ring = self.0.ring.load();
        let own = &ring.regions()[ring.own_region()];
        let seen_alone = !ring
            .members()
            .iter()
            .any(|m| m.node != me && &m.region == own);
        // With leases, alone only if the region's group agrees too (a node
        // cut off from the rest sees nobody, yet they are there).
        seen_alone
            && self
                .0
                .agreed_ring()
                .is_none_or(|a| a.members().iter().all(|m| m.node == me))
    }
}

impl Cluster {
    /// Sets what happens when a batch of this node's commits is not
    /// confirmed by the region's replicas: the writes are in this node's
    /// memory and log and may be in no other replica while the region
    /// moves on without them, so the server restarts the process, whose
    /// recovery leaves them out (`DataDir::recover`).
    pub fn on_lost_batch(&self, f: Box<dyn Fn() + Send + Sync>) {
        *self.on_lost_batch.lock().unwrap_or_else(|e| e.into_inner()) = Some(f);
    }

    pub(crate) fn lost_batch(&self) {
        let hook = self.on_lost_batch.lock().unwrap_or_else(|e| e.into_inner());
        match &*hook {
            Some(f) => f(),
            None => tracing::error!(
                "a batch of this node's writes was not confirmed by the region's replicas"
            ),
        }
    }

    /// Whether a batch of this node's commits still waits for its
    /// region's replicas to confirm it.
    pub(super) fn batches_pending(&self) -> bool {
        !self
            .batches
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .is_empty()
    }

    fn replicate_batch(self: &Arc<Self>, entries: Vec<LogEntry>, done: Waiter) {
        self.fault_before_ship(&entries);
        let items = entries
            .iter()
            .map(|e| {
                let hash = std::hash::BuildHasher::hash_one(&self.hasher, &e.key[..]);
                (slot_of(hash), Lattice::from(e))
            })
            .collect();
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let mut batch = Batch {
            items,
            confirmed: HashSet::new(),
            sent: HashMap::new(),
            started: Instant::now(),
            done,
        };
        if self.push_batch(id, &mut batch) {
            return (batch.done)(true);
        }
        self.batches
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(id, batch);
    }

    /// With `ownership = leases`, the ring of the nodes the region's group
    /// has inside (None before it formed, or with gossip).
    pub(super) fn agreed_ring(&self) -> Option<Arc<Ring>> {
        self.region.get().and_then(|r| r.view().ring.clone())
    }

    /// Sends batch `id` to the replicas of its keys (in the current view,
    /// and with leases in the agreed one too) that have neither confirmed
    /// it nor been sent it lately; true when none is left to wait for.
    ///
    /// With leases a replica this node's failure detector dropped is still
    /// waited for while the group has it inside: a node cut off from the
    /// rest of its region drops them from its view within a second, yet
    /// holds its lease for up to three, and would otherwise acknowledge
    /// writes no replica has — lost once the others serve its slots (the
    /// nemesis of 2026-11-30: a `DEL` acknowledged there undone, a `SET`
    /// gone). The group takes a node out only once its lease has ended.
    fn push_batch(self: &Arc<Self>, id: u64, b: &mut Batch) -> bool {
        let ring = self.ring.load();
        let own = ring.own_region();
        let agreed = self.agreed_ring();
        let me = self.settings.node;
        let mut per_node: HashMap<NodeId, Vec<Lattice>> = HashMap::new();
        let only = self.ship_only_to(id, &b.items);
        for (slot, l) in &b.items {
            let seen = ring.replicas(*slot, own);
            let more = agreed.as_deref().map_or(&[][..], |a| a.replicas(*slot, 0));
            let more = more
                .iter()
                .filter(|a| !seen.iter().any(|s| s.node == a.node));
            for r in seen.iter().chain(more) {
                if r.node != me
                    && !b.confirmed.contains(&r.node)
                    && only.is_none_or(|o| o == r.node)
                {
                    per_node.entry(r.node).or_default().push(l.clone());
                }
            }
        }
        // A replica that left the view is not waited for any more.
        b.sent.retain(|n, _| per_node.contains_key(n));
        if per_node.is_empty() {
            return true;
        }
        let now = Instant::now();
        for (node, lattices) in per_node {
            if b.sent.get(&node).is_some_and(|t| now - *t < RESEND) {
                continue;
            }
            b.sent.insert(node, now);
            let frame = Frame::new(Body::Replicate(wire::Replicate { id, lattices }));
            self.send(node, frame, false);
        }
        false
    }

    /// True when the last attempt to connect to `node` failed. Only a
    /// hint (a slot's new primary does not ask it to teach what it
    /// holds): a failed attempt does not tell a dead process from a live
    /// one behind a network hiccup, so a batch still waits for it until
    /// the failure detector takes it out of the view. Counting it as
    /// confirmed lost acknowledged writes: a live replica missed them and
    /// the node that had them died (issue 41, defect 8).
    pub(super) fn unreachable(&self, node: NodeId) -> bool {
        self.links
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(&node)
            .is_some_and(|l| l.unreachable.load(Ordering::Relaxed))
    }

    /// A replica's answer to batch `ack.id`.
    pub(super) fn on_replicate_ack(self: &Arc<Self>, from: NodeId, ack: wire::ReplicateAck) {
        let finished = {
            let mut batches = self.batches.lock().unwrap_or_else(|e| e.into_inner());
            let Some(b) = batches.get_mut(&ack.id) else {
                return;
            };
            if ack.stranger {
                batches.remove(&ack.id).map(|b| (b, false))
            } else if !ack.ok {
                return; // not durable there yet: sent again after RESEND
            } else {
                b.confirmed.insert(from);
                self.fault_after_confirm(ack.id);
                if !self.push_batch(ack.id, b) {
                    return;
                }
                batches.remove(&ack.id).map(|b| (b, true))
            }
        };
        if let Some((b, ok)) = finished {
            if !ok {
                tracing::warn!(
                    "replica {from} refused a batch: it does not count this node as a live member; catching up again"
                );
                self.fenced_by(from);
            }
            (b.done)(ok);
        }
    }

    /// Every [`CHECK_EVERY`]: each pending batch against the current view
    /// (replicas gone, replicas new, frames to send again); gives up on
    /// those older than [`RETRY_FOR`].
    pub(super) async fn replication_loop(self: Arc<Self>) {
        let mut tick = tokio::time::interval(CHECK_EVERY);
        loop {
            tick.tick().await;
            let mut settled = Vec::new();
            {
                let mut batches = self.batches.lock().unwrap_or_else(|e| e.into_inner());
                let ids: Vec<u64> = batches.keys().copied().collect();
                for id in ids {
                    let Some(b) = batches.get_mut(&id) else {
                        continue;
                    };
                    let ok = self.push_batch(id, b);
                    if ok || b.started.elapsed() >= RETRY_FOR {
                        if let Some(b) = batches.remove(&id) {
                            if !ok {
                                tracing::warn!(
                                    "a batch of {} writes was not confirmed by the region's replicas in {RETRY_FOR:?}",
                                    b.items.len()
                                );
                            }
                            settled.push((b, ok));
                        }
                    }
                }
            }
            for (b, ok) in settled {
                (b.done)(ok);
            }
        }
    }

    /// Receiving side: merges a batch durably and answers, unless the
    /// sender is not a live member of this node's view.
    pub(super) fn on_replicate(
        self: &Arc<Self>,
        from: NodeId,
        r: wire::Replicate,
        tx: &mpsc::UnboundedSender<Out>,
    ) {
        let Some(done) = self.merge_from(from, r.lattices, Some(()), super::Arrival::Direct) else {
            let _ = tx.send(Out {
                frame: Frame::new(Body::ReplicateAck(wire::ReplicateAck {
                    id: r.id,
                    ok: false,
                    stranger: true,
                })),
                at: Instant::now(),
            });
            return;
        };
        let tx = tx.clone();
        let id = r.id;
        self.handle.spawn(async move {
            let mut ok = true;
            for rx in done {
                ok &= matches!(rx.await, Ok(Ok(_)));
            }
            let _ = tx.send(Out {
                frame: Frame::new(Body::ReplicateAck(wire::ReplicateAck {
                    id,
                    ok,
                    stranger: false,
                })),
                at: Instant::now(),
            });
        });
    }
}

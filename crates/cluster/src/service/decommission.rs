//! Decommissioning this node (`ELSA.DECOMMISSION`): it leaves the ring
//! gracefully — its slots drain to the remaining nodes before it goes.
//!
//! Built from the ring, catch-up and hand-back machinery (protocol in
//! `docs/regions.md`, "Decommissioning a node"):
//!
//! 1. *stopping*: the node marks itself leaving in its own view, so it is
//!    no slot's primary and puts no point on the ring; requests others
//!    still route to it are refused (Busy) and retried through their
//!    views. As in a hand-back, it waits until no transaction holds a key
//!    of a slot it gave up and every shard shipped two merge epochs, so
//!    what it committed as primary has reached the slots' other replicas.
//! 2. *draining*: it publishes `leaving` through membership. Every node
//!    then builds its ring without it (its slots go to the next nodes
//!    clockwise, each of which publishes that it excludes it) while
//!    anti-entropy still pairs it with the new replicas over the slots it
//!    held ([`crate::ring::Ring::holds`]). Once every live node excludes
//!    it, no write reaches it any more: from then (`drain_from`, plus a
//!    margin for clock skew) it needs, with every remaining node of its
//!    region it held slots with, one anti-entropy round whose cutoff is
//!    past `drain_from` and in which it shipped every differing lattice
//!    (or found none) and the peer merged them before answering — the
//!    new replicas then have all it had, so each of its slots has its
//!    replica count back.
//! 3. *done*: it stays up as a member that holds nothing until it is
//!    stopped; the failure detector then removes it, which moves nothing.
//!
//! Not persisted: a decommissioning node that restarts rejoins as a
//! normal member (decommission it again).

use super::*;
use std::sync::atomic::AtomicU8;

const NONE: u8 = 0;
const STOPPING: u8 = 1;
const DRAINING: u8 = 2;
const DONE: u8 = 3;

/// How far apart the hosts' clocks may be for the hand-over to count a
/// write another node replicated here just before it switched (NTP keeps
/// them within milliseconds; a second is generous and costs a second).
const SKEW_MARGIN: Duration = Duration::from_secs(1);

/// This node's decommission state.
#[derive(Default)]
pub(super) struct Decommission {
    phase: AtomicU8,
    /// HLC from which no write reaches this node (every live node
    /// excludes it); 0 until then.
    drain_from: AtomicU64,
}

/// Where a decommission stands, for INFO replication.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DecommissionStatus {
    /// `none`, `stopping`, `draining` or `done`.
    pub phase: &'static str,
    /// Slots this node held whose new replicas do not have its data yet.
    pub slots_remaining: usize,
}

impl Cluster {
    /// Starts decommissioning this node (idempotent). Refused while it
    /// is still catching up (its data may be behind) and when no other
    /// node of its region could take its slots.
    pub fn decommission(self: &Arc<Self>) -> Result<(), String> {
        if self.decommission.phase.load(Ordering::Relaxed) != NONE {
            return Ok(());
        }
        if !self.is_serving() {
            return Err("ERR this node is catching up: decommission it once it serves".into());
        }
        let ring = self.ring.load();
        let others = ring
            .members()
            .iter()
            .filter(|m| {
                m.node != self.settings.node
                    && m.region == self.settings.region
                    && m.ready
                    && !m.leaving
            })
            .count();
        if others == 0 {
            return Err(format!(
                "ERR this node is the last ready node of region {}: no node could take its slots",
                self.settings.region
            ));
        }
        if self
            .decommission
            .phase
            .compare_exchange(NONE, STOPPING, Ordering::SeqCst, Ordering::SeqCst)
            .is_err()
        {
            return Ok(());
        }
        tracing::warn!("decommission: this node gives up its slots");
        let me = self.clone();
        self.handle.spawn(async move {
            // Its own view drops it at the next membership tick; wait for
            // that before draining holds, which are judged by that view.
            while me
                .ring
                .load()
                .member(me.settings.node)
                .is_some_and(|m| !m.leaving)
            {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            me.drain_moved_holds(me.settings.node).await;
            me.two_flushes().await;
            me.decommission.phase.store(DRAINING, Ordering::SeqCst);
            tracing::warn!("decommission: primary of nothing; draining its slots to the others");
        });
        Ok(())
    }

    /// True once this node has started leaving: its own view places
    /// nothing on it.
    pub(crate) fn leaving(&self) -> bool {
        self.decommission.phase.load(Ordering::Relaxed) >= STOPPING
    }

    /// True once the others may drop it from their views.
    pub(crate) fn publishes_leaving(&self) -> bool {
        self.decommission.phase.load(Ordering::Relaxed) >= DRAINING
    }

    /// The membership tick: `excluded_by_all` says whether every other
    /// live node publishes that it excludes this one.
    pub(crate) fn decommission_tick(&self, excluded_by_all: bool) {
        if self.decommission.phase.load(Ordering::Relaxed) != DRAINING {
            return;
        }
        if self.decommission.drain_from.load(Ordering::Relaxed) == 0 {
            if !excluded_by_all {
                return;
            }
            // Plus a margin for clock skew between hosts: a write another
            // node replicated here just before it switched carries that
            // node's clock, which may run ahead of ours.
            let from = self.hlc.now() + ((SKEW_MARGIN.as_millis() as u64) << 16);
            self.decommission.drain_from.store(from, Ordering::Relaxed);
            tracing::info!("decommission: every node routes around this one; handing data over");
        }
        if self.handoff_pending().0.is_empty() {
            self.decommission.phase.store(DONE, Ordering::SeqCst);
            // With `ownership = leases`, the region's group forgets it.
            if let Some(region) = self.region().cloned() {
                self.handle.spawn(async move {
                    for _ in 0..60 {
                        match region.leave().await {
                            Ok(()) => {
                                tracing::info!(
                                    "decommission: the region's ownership group forgot this node"
                                );
                                return;
                            }
                            Err(e) => tracing::debug!("decommission: forgetting this node: {e}"),
                        }
                        tokio::time::sleep(Duration::from_secs(1)).await;
                    }
                    tracing::warn!(
                        "decommission: the region's ownership group could not forget this node (no majority for a minute); it still counts it as a voter"
                    );
                });
            }
            tracing::warn!(
                "decommission: done — every slot it held has its replicas back; stop this node"
            );
        }
    }

    /// The remaining nodes of this region still to receive its data, and
    /// the slots it shares with them.
    fn handoff_pending(&self) -> (Vec<NodeId>, usize) {
        let from = self.decommission.drain_from.load(Ordering::Relaxed);
        let ring = self.ring.load();
        let shared = self.shared.lock().unwrap_or_else(|e| e.into_inner());
        let peers = self.peers.lock().unwrap_or_else(|e| e.into_inner());
        let mut slots: HashSet<u16> = HashSet::new();
        let mut pending = Vec::new();
        for m in ring.members() {
            if m.node == self.settings.node || m.region != self.settings.region || m.leaving {
                continue;
            }
            let Some(list) = shared.get(&m.node).filter(|l| !l.is_empty()) else {
                continue;
            };
            let synced = peers.get(&m.node).map_or(0, |p| p.handoff_ts);
            if from == 0 || synced < from {
                pending.push(m.node);
                slots.extend(list.iter().copied());
            }
        }
        (pending, slots.len())
    }

    /// Where the decommission of this node stands.
    pub fn decommission_status(&self) -> DecommissionStatus {
        let phase = self.decommission.phase.load(Ordering::Relaxed);
        let slots_remaining = match phase {
            NONE => 0,
            DONE => 0,
            // Until it publishes, every slot it held is still to go.
            STOPPING => {
                let ring = self.ring.load();
                (0..elsa_shard::table::DIGEST_BUCKETS)
                    .filter(|&b| ring.holds(b, self.settings.node))
                    .count()
            }
            _ => self.handoff_pending().1,
        };
        DecommissionStatus {
            phase: match phase {
                NONE => "none",
                STOPPING => "stopping",
                DRAINING => "draining",
                _ => "done",
            },
            slots_remaining,
        }
    }
}

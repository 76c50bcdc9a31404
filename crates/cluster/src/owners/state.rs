//! What a region agrees on through Raft (see [`super`]): each node's
//! record — the member it announces and the end of its lease — whether
//! it is in the region's ring, and per slot the earliest time its current
//! owner may serve it. Pure: applying a command depends on the state and
//! the command only (no clock is read), so every node that applied the
//! same log holds the same owners.
//!
//! The rule that keeps one owner per slot (CockroachDB's epoch leases, in
//! the small): a node serves a slot only while it owns the slot in the
//! state it applied and its own lease has not run out by its clock. A
//! lease is extended only by a beat the node proposed and then applied
//! itself, so every change committed before the beat is applied before
//! the lease counts. When a slot passes from owner P to N, the state
//! records `start = P's lease end + drift`: whatever state P still holds,
//! its lease ran out by then (clocks closer than the drift), and N waits
//! for it. A node is taken out of the ring only once its lease ended plus
//! the drift, by the proposer's clock (the leader's).

use std::collections::BTreeMap;

use elsa_lattice::NodeId;
use elsa_shard::table::DIGEST_BUCKETS;
use serde::{Deserialize, Serialize};

use crate::ring::{Member, Ring};

/// Most shards a member may announce (a node runs at most 256 workers),
/// as membership checks them too.
const MAX_SHARDS: u16 = 256;

/// A command of the region's log.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum Command {
    /// A node announces itself and extends its lease to `expires_ms`
    /// (its clock). A node not yet in the ring is recorded outside it.
    Beat {
        member: Member,
        expires_ms: u64,
        drift_ms: u64,
    },
    /// The leader takes a node whose lease ended out of the ring (only if
    /// its lease is still the one the leader saw).
    Out {
        node: NodeId,
        seen_expires: u64,
        drift_ms: u64,
    },
    /// The leader puts a node that beats again into the ring.
    In {
        node: NodeId,
        seen_expires: u64,
        drift_ms: u64,
    },
    /// A node that left the region for good (decommissioned) is forgotten.
    Forget { node: NodeId, drift_ms: u64 },
    /// A node that applied `generation` (and so serves none of the slots
    /// it had lost by then) releases them: their new owners need not wait
    /// for its lease to end.
    Released { node: NodeId, generation: u64 },
}

/// When a slot's new owner may start, and which node's lease it waits for.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Fence {
    /// Unix ms (the waited-for node's lease end plus the drift).
    pub at: u64,
    /// The slot's previous owner.
    pub from: NodeId,
    /// The generation the slot changed hands in.
    pub generation: u64,
}

/// What applying a command answered.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Outcome {
    /// Whether the command changed anything.
    pub changed: bool,
}

/// One node's record.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Record {
    /// What it announced last.
    pub member: Member,
    /// The latest lease end it announced (its clock, unix ms).
    pub expires_ms: u64,
    /// Whether it is in the ring.
    pub inside: bool,
    /// How many times the leader took it out of the ring. A node that
    /// sees its own count rise may have missed writes the region
    /// acknowledged without it, and catches up again before it serves
    /// (`Region::taken_out`).
    #[serde(default)]
    pub outs: u64,
}

/// The agreed state of a region's ownership.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Owners {
    /// Per node.
    pub records: BTreeMap<NodeId, Record>,
    /// Per slot, run-length encoded: the last node that owned it (kept
    /// while it has no owner, so the next one waits for it).
    last: Vec<(u16, NodeId)>,
    /// Per slot that changed hands: when its owner starts.
    starts: BTreeMap<u16, Fence>,
    /// Bumped each time the owners change.
    generation: u64,
    /// Nodes that left the region for good (decommissioned): the leader
    /// takes them out of the group's voters, and does not make voters of
    /// them again until they beat again (started anew).
    #[serde(default)]
    pub forgotten: std::collections::BTreeSet<NodeId>,
    /// Ring parameters (set by the first command; the same everywhere).
    vnodes: u32,
    rf: usize,
    /// Per slot, the owner now (0: none). Derived, not stored.
    #[serde(skip)]
    owners: Vec<NodeId>,
}

impl Owners {
    /// An empty state for rings of `vnodes` points per shard and `rf`
    /// replicas.
    pub fn new(vnodes: u32, rf: usize) -> Owners {
        Owners {
            vnodes,
            rf,
            last: vec![(0, 0)],
            ..Owners::default()
        }
    }

    /// Rebuilds what is derived (after decoding).
    pub fn rebuilt(mut self) -> Owners {
        self.owners = self.compute();
        self
    }

    /// How many times the owners changed.
    pub fn generation(&self) -> u64 {
        self.generation
    }

    /// The owner of `slot` now (None: no ready node holds it).
    pub fn owner(&self, slot: usize) -> Option<NodeId> {
        self.owners.get(slot).copied().filter(|n| *n != 0)
    }

    /// The unix ms the owner of `slot` may start serving it at.
    pub fn start(&self, slot: usize) -> u64 {
        self.starts.get(&(slot as u16)).map_or(0, |f| f.at)
    }

    /// The members in the ring.
    pub fn inside(&self) -> Vec<Member> {
        self.records
            .values()
            .filter(|r| r.inside)
            .map(|r| r.member.clone())
            .collect()
    }

    /// Applies one command.
    pub fn apply(&mut self, cmd: &Command) -> Outcome {
        let (changed, drift) = match cmd {
            Command::Beat {
                member,
                expires_ms,
                drift_ms,
            } => {
                if member.shards == 0 || member.shards > MAX_SHARDS {
                    // Absurd (the ring is sized by it): the node stays out.
                    return Outcome::default();
                }
                let r = self.records.entry(member.node).or_insert_with(|| Record {
                    member: member.clone(),
                    expires_ms: 0,
                    inside: false,
                    outs: 0,
                });
                r.expires_ms = r.expires_ms.max(*expires_ms);
                self.forgotten.remove(&member.node);
                let moved = r.member != *member;
                r.member = member.clone();
                (moved && r.inside, *drift_ms)
            }
            Command::Out {
                node,
                seen_expires,
                drift_ms,
            } => match self.records.get_mut(node) {
                Some(r) if r.inside && r.expires_ms == *seen_expires => {
                    r.inside = false;
                    r.outs += 1;
                    (true, *drift_ms)
                }
                _ => (false, 0),
            },
            Command::In {
                node,
                seen_expires,
                drift_ms,
            } => match self.records.get_mut(node) {
                Some(r) if !r.inside && r.expires_ms == *seen_expires => {
                    r.inside = true;
                    (true, *drift_ms)
                }
                _ => (false, 0),
            },
            Command::Forget { node, drift_ms } => {
                self.forgotten.insert(*node);
                (
                    self.records.remove(node).is_some_and(|r| r.inside),
                    *drift_ms,
                )
            }
            Command::Released { node, generation } => {
                let before = self.starts.len();
                self.starts
                    .retain(|_, f| f.from != *node || f.generation > *generation);
                let changed = self.starts.len() != before;
                // Views of the owners' starts are made anew per generation.
                self.generation += u64::from(changed);
                return Outcome { changed };
            }
        };
        if changed {
            self.reassign(drift);
        }
        Outcome { changed }
    }

    /// Owners per slot for the members inside (the ring's primary, when
    /// it is ready).
    fn compute(&self) -> Vec<NodeId> {
        let members = self.inside();
        let Some(any) = members.first().map(|m| m.node) else {
            return vec![0; DIGEST_BUCKETS];
        };
        let ring = Ring::new(members.clone(), any, self.vnodes, self.rf);
        (0..DIGEST_BUCKETS)
            .map(|slot| {
                ring.replicas(slot, 0)
                    .first()
                    .filter(|id| members.iter().any(|m| m.node == id.node && m.ready))
                    .map_or(0, |id| id.node)
            })
            .collect()
    }

    /// After the ring changed: every slot whose owner is new starts once
    /// its last owner's lease ended plus the drift.
    fn reassign(&mut self, drift_ms: u64) {
        let owners = self.compute();
        let mut last = decode_runs(&self.last);
        for (slot, (&now, prev)) in owners.iter().zip(last.iter_mut()).enumerate() {
            if now == 0 || now == *prev {
                continue;
            }
            let fence = self
                .records
                .get(prev)
                .map_or(0, |r| r.expires_ms + drift_ms);
            if fence > 0 {
                let f = Fence {
                    at: fence,
                    from: *prev,
                    generation: self.generation + 1,
                };
                self.starts.insert(slot as u16, f);
            } else {
                self.starts.remove(&(slot as u16));
            }
            *prev = now;
        }
        self.last = encode_runs(&last);
        self.owners = owners;
        self.generation += 1;
    }
}

/// Expands run-length pairs (start slot, node) to one entry per slot.
fn decode_runs(runs: &[(u16, NodeId)]) -> Vec<NodeId> {
    let mut out = vec![0; DIGEST_BUCKETS];
    for (i, &(from, node)) in runs.iter().enumerate() {
        let to = runs.get(i + 1).map_or(DIGEST_BUCKETS, |r| usize::from(r.0));
        for x in &mut out[usize::from(from)..to.max(usize::from(from))] {
            *x = node;
        }
    }
    out
}

/// Run-length pairs of one entry per slot.
fn encode_runs(slots: &[NodeId]) -> Vec<(u16, NodeId)> {
    let mut runs: Vec<(u16, NodeId)> = Vec::new();
    for (slot, &node) in slots.iter().enumerate() {
        if runs.last().is_none_or(|r| r.1 != node) {
            runs.push((slot as u16, node));
        }
    }
    runs
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::SocketAddr;

    fn member(node: NodeId, ready: bool) -> Member {
        let addr = SocketAddr::from(([127, 0, 0, 1], 1000 + node as u16));
        Member {
            node,
            region: "a".into(),
            shards: 2,
            peer: addr,
            client: addr,
            ready,
            leaving: false,
        }
    }

    fn beat(s: &mut Owners, node: NodeId, expires_ms: u64) {
        s.apply(&Command::Beat {
            member: member(node, true),
            expires_ms,
            drift_ms: 500,
        });
    }

    fn admit(s: &mut Owners, node: NodeId) {
        let seen_expires = s.records[&node].expires_ms;
        assert!(
            s.apply(&Command::In {
                node,
                seen_expires,
                drift_ms: 500
            })
            .changed
        );
    }

    fn owned(s: &Owners, node: NodeId) -> usize {
        (0..DIGEST_BUCKETS)
            .filter(|&x| s.owner(x) == Some(node))
            .count()
    }

    #[test]
    fn runs_round_trip() {
        let mut slots = vec![0; DIGEST_BUCKETS];
        slots[5..900].fill(3);
        slots[900..].fill(7);
        assert_eq!(decode_runs(&encode_runs(&slots)), slots);
        assert_eq!(encode_runs(&slots).len(), 3);
    }

    #[test]
    fn a_node_taken_out_hands_its_slots_on_after_its_lease_and_the_drift() {
        let mut s = Owners::new(16, 3);
        for n in 1..=3 {
            beat(&mut s, n, 1_000);
            admit(&mut s, n);
        }
        assert_eq!(owned(&s, 1) + owned(&s, 2) + owned(&s, 3), DIGEST_BUCKETS);
        let of_1: Vec<usize> = (0..DIGEST_BUCKETS)
            .filter(|&x| s.owner(x) == Some(1))
            .collect();
        assert!(!of_1.is_empty());
        beat(&mut s, 1, 2_000);
        // A stale Out (the leader saw an older lease) changes nothing.
        let stale = Command::Out {
            node: 1,
            seen_expires: 1_000,
            drift_ms: 500,
        };
        assert!(!s.apply(&stale).changed);
        let out = Command::Out {
            node: 1,
            seen_expires: 2_000,
            drift_ms: 500,
        };
        assert!(s.apply(&out).changed);
        assert_eq!(owned(&s, 1), 0);
        for &slot in &of_1 {
            assert!(s.owner(slot).is_some());
            assert_eq!(s.start(slot), 2_500, "slot {slot}");
        }
        // Back in: its slots come back, each after the lease of the node
        // that held it meanwhile.
        beat(&mut s, 1, 9_000);
        beat(&mut s, 2, 3_000);
        beat(&mut s, 3, 4_000);
        admit(&mut s, 1);
        for &slot in &of_1 {
            assert_eq!(s.owner(slot), Some(1));
            assert!([3_500, 4_500].contains(&s.start(slot)), "slot {slot}");
        }
        // Decoding the stored form gives the same owners.
        let again: Owners = serde_json::from_slice::<Owners>(&serde_json::to_vec(&s).unwrap())
            .unwrap()
            .rebuilt();
        assert!((0..DIGEST_BUCKETS).all(|x| again.owner(x) == s.owner(x)));
    }

    #[test]
    fn a_release_lets_the_new_owners_start_at_once() {
        let mut s = Owners::new(16, 2);
        beat(&mut s, 1, 1_000);
        admit(&mut s, 1);
        let g1 = s.generation();
        beat(&mut s, 2, 1_000);
        admit(&mut s, 2);
        let moved: Vec<usize> = (0..DIGEST_BUCKETS)
            .filter(|&x| s.owner(x) == Some(2))
            .collect();
        assert!(moved.iter().all(|&x| s.start(x) == 1_500));
        // A release for an older generation than the move does nothing.
        let early = Command::Released {
            node: 1,
            generation: g1,
        };
        assert!(!s.apply(&early).changed);
        let now = Command::Released {
            node: 1,
            generation: s.generation(),
        };
        assert!(s.apply(&now).changed);
        assert!(moved.iter().all(|&x| s.start(x) == 0));
    }

    #[test]
    fn a_beat_announcing_absurd_shards_is_refused() {
        let mut s = Owners::new(16, 2);
        for shards in [0, 257, u16::MAX] {
            let member = Member {
                shards,
                ..member(1, true)
            };
            let cmd = Command::Beat {
                member,
                expires_ms: 1_000,
                drift_ms: 500,
            };
            assert!(!s.apply(&cmd).changed);
            assert!(s.records.is_empty(), "{shards} shards recorded");
        }
    }

    #[test]
    fn a_node_catching_up_owns_nothing() {
        let mut s = Owners::new(16, 2);
        beat(&mut s, 1, 1_000);
        admit(&mut s, 1);
        s.apply(&Command::Beat {
            member: member(2, false),
            expires_ms: 1_000,
            drift_ms: 500,
        });
        admit(&mut s, 2);
        assert_eq!(owned(&s, 1), DIGEST_BUCKETS);
        beat(&mut s, 2, 1_500);
        assert!(owned(&s, 2) > 0);
        assert_eq!(owned(&s, 1) + owned(&s, 2), DIGEST_BUCKETS);
    }
}

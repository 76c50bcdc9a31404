//! Placement: a consistent-hash ring with virtual nodes over shard actors.
//!
//! Every shard of every member puts `vnodes` points on a ring of
//! [`DIGEST_BUCKETS`] slots (16 bits of a key's hash: its Redis Cluster
//! slot times four, `elsa_shard::keyhash`, so all keys of a cluster slot
//! are in one bucket and never split between shards). A key's
//! replicas in a region are the shards met walking clockwise from its slot,
//! one per node, until `replication-factor` distinct nodes are found; the
//! first is the key's primary. Points sit on bucket boundaries, so a bucket
//! is never split between replica sets and two replicas can compare whole
//! buckets by digest. The table is precomputed per slot when membership
//! changes, so routing a key is one index, not a search.
//!
//! A member still catching up (not `ready`) keeps its replicas but yields
//! the primary role to the next ready replica of each slot, so a node back
//! from a crash never serves or validates from data older than what the
//! region acknowledged while it was away.

use std::collections::HashMap;
use std::net::SocketAddr;

use elsa_lattice::NodeId;
use elsa_shard::table::DIGEST_BUCKETS;
use elsa_txn::router::ShardId;

/// A node of the cluster, as membership reports it.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Member {
    /// Its id (unique in the cluster).
    pub node: NodeId,
    /// Its region.
    pub region: String,
    /// How many shards it runs.
    pub shards: u16,
    /// Where its peer transport listens.
    pub peer: SocketAddr,
    /// Where its clients connect.
    pub client: SocketAddr,
    /// False while it catches up after (re)joining: it is a replica of its
    /// slots but not their primary (see `Cluster::catch_up_done`).
    pub ready: bool,
    /// Being decommissioned: it holds no slot in this view, but its old
    /// slots are still shared with their new replicas until it has handed
    /// its data over (see `service/decommission.rs`).
    pub leaving: bool,
}

/// The placement of every slot, for one membership view.
pub struct Ring {
    members: Vec<Member>,
    regions: Vec<String>,
    own_node: NodeId,
    own_region: usize,
    rf: usize,
    /// `slot * regions * rf + region * rf + k` → k-th replica (NONE past the end).
    table: Vec<ShardId>,
    /// slot → this node's shard for it (the first of its points clockwise).
    own_shard: Vec<u16>,
    /// With a member leaving: the placement as if none were, which says
    /// which slots a leaving member held (what it hands over).
    before_leaving: Option<Box<Ring>>,
}

const NONE: ShardId = ShardId { node: 0, index: 0 };

/// Where one virtual node lands: a slot from a hash of (node, shard, i).
fn point(node: NodeId, shard: u16, i: u32) -> u16 {
    let x =
        (u64::from(node) << 32) ^ (u64::from(shard) << 16) ^ u64::from(i) ^ 0x9e37_79b9_7f4a_7c15;
    let x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    let x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    ((x ^ (x >> 31)) >> 48) as u16
}

/// The slot (= anti-entropy bucket) of a key hash.
pub fn slot_of(hash: u64) -> usize {
    elsa_shard::table::bucket_of(hash)
}

impl Ring {
    /// The ring of `members` (which must include this node, `own`), with
    /// `vnodes` points per shard and `rf` replicas per region.
    pub fn new(mut members: Vec<Member>, own: NodeId, vnodes: u32, rf: usize) -> Ring {
        members.sort_by_key(|m| m.node);
        members.dedup_by_key(|m| m.node);
        let before_leaving = members.iter().any(|m| m.leaving).then(|| {
            let all = members
                .iter()
                .map(|m| Member {
                    leaving: false,
                    ..m.clone()
                })
                .collect();
            Box::new(Ring::new(all, own, vnodes, rf))
        });
        let mut regions: Vec<String> = members.iter().map(|m| m.region.clone()).collect();
        regions.sort();
        regions.dedup();
        let own_region = members
            .iter()
            .find(|m| m.node == own)
            .and_then(|m| regions.iter().position(|r| *r == m.region))
            .unwrap_or(0);
        let rf = rf.max(1);
        let nr = regions.len().max(1);
        let ready: Vec<NodeId> = members.iter().filter(|m| m.ready).map(|m| m.node).collect();
        let mut table = vec![NONE; DIGEST_BUCKETS * nr * rf];
        let mut own_shard = vec![0u16; DIGEST_BUCKETS];
        for (r, region) in regions.iter().enumerate() {
            let mut points: Vec<(u16, ShardId)> = Vec::new();
            // A leaving member puts no point on the ring: its slots go to
            // the next nodes clockwise, as when a node dies.
            for m in members.iter().filter(|m| &m.region == region && !m.leaving) {
                for s in 0..m.shards {
                    for i in 0..vnodes {
                        let id = ShardId {
                            node: m.node,
                            index: s,
                        };
                        points.push((point(m.node, s, i), id));
                    }
                }
            }
            points.sort();
            let nodes = members
                .iter()
                .filter(|m| &m.region == region && !m.leaving)
                .count();
            let want = rf.min(nodes);
            // Replica list for each point: walk clockwise, one shard per node.
            let lists: Vec<Vec<ShardId>> = (0..points.len())
                .map(|j| {
                    let mut list: Vec<ShardId> = Vec::with_capacity(want);
                    for step in 0..points.len() {
                        let id = points[(j + step) % points.len()].1;
                        if !list.iter().any(|x| x.node == id.node) {
                            list.push(id);
                            if list.len() == want {
                                break;
                            }
                        }
                    }
                    // Ready replicas first (stable: when all or none are
                    // ready, the walk order decides).
                    list.sort_by_key(|id| !ready.contains(&id.node));
                    list
                })
                .collect();
            if points.is_empty() {
                continue;
            }
            let mut j = 0;
            for slot in 0..DIGEST_BUCKETS {
                while j < points.len() && usize::from(points[j].0) < slot {
                    j += 1;
                }
                let at = if j == points.len() { 0 } else { j };
                let base = slot * nr * rf + r * rf;
                for (k, id) in lists[at].iter().enumerate() {
                    table[base + k] = *id;
                }
            }
        }
        // This node's own shard per slot, whether or not it is a replica.
        if let Some(me) = members.iter().find(|m| m.node == own) {
            let mut points: Vec<(u16, u16)> = (0..me.shards)
                .flat_map(|s| (0..vnodes).map(move |i| (point(own, s, i), s)))
                .collect();
            points.sort();
            let mut j = 0;
            for (slot, out) in own_shard.iter_mut().enumerate() {
                while j < points.len() && usize::from(points[j].0) < slot {
                    j += 1;
                }
                *out = points.get(j).or(points.first()).map_or(0, |p| p.1);
            }
        }
        Ring {
            members,
            regions,
            own_node: own,
            own_region,
            rf,
            table,
            own_shard,
            before_leaving,
        }
    }

    /// The ring of a node alone (its own shards only): where it keeps each
    /// slot's keys, before or without membership.
    pub fn alone(node: NodeId, shards: u16, vnodes: u32) -> Ring {
        let addr = SocketAddr::from(([127, 0, 0, 1], 0));
        let me = Member {
            node,
            region: String::new(),
            shards,
            peer: addr,
            client: addr,
            ready: true,
            leaving: false,
        };
        Ring::new(vec![me], node, vnodes, 1)
    }

    /// The members of this view, by node id.
    pub fn members(&self) -> &[Member] {
        &self.members
    }

    /// A member by id.
    pub fn member(&self, node: NodeId) -> Option<&Member> {
        self.members.iter().find(|m| m.node == node)
    }

    /// The regions, sorted.
    pub fn regions(&self) -> &[String] {
        &self.regions
    }

    /// This node's region index.
    pub fn own_region(&self) -> usize {
        self.own_region
    }

    /// Replicas of `slot` in region `region` (index), primary first.
    pub fn replicas(&self, slot: usize, region: usize) -> &[ShardId] {
        let base = (slot * self.regions.len().max(1) + region) * self.rf;
        let list = &self.table[base..base + self.rf];
        let n = list.iter().take_while(|id| **id != NONE).count();
        &list[..n]
    }

    /// Replicas of `slot` in every region.
    pub fn all_replicas(&self, slot: usize) -> impl Iterator<Item = ShardId> + '_ {
        (0..self.regions.len()).flat_map(move |r| self.replicas(slot, r).iter().copied())
    }

    /// This node's shard for `slot` (where it keeps the slot's keys).
    pub fn own_shard(&self, slot: usize) -> u16 {
        self.own_shard[slot]
    }

    /// True when this node replicates `slot`.
    pub fn replicates(&self, slot: usize, node: NodeId) -> bool {
        self.all_replicas(slot).any(|id| id.node == node)
    }

    /// The buckets both this node and `peer` replicate — where one of
    /// them is leaving, the buckets it held before it left: the data it
    /// hands over travels by anti-entropy over these (see [`Ring::holds`]).
    pub fn shared_with(&self, peer: NodeId) -> Vec<u16> {
        (0..DIGEST_BUCKETS)
            .filter(|&b| self.holds(b, self.own_node) && self.holds(b, peer))
            .map(|b| b as u16)
            .collect()
    }

    /// Whether `node` has `slot`'s data to compare: it replicates it, or
    /// it is leaving and replicated it before. Symmetric on both sides of a
    /// pair with the same view, as anti-entropy needs.
    pub fn holds(&self, slot: usize, node: NodeId) -> bool {
        match &self.before_leaving {
            Some(before) if self.member(node).is_some_and(|m| m.leaving) => {
                before.replicates(slot, node)
            }
            _ => self.replicates(slot, node),
        }
    }

    /// The slots `node` is the primary of in its region.
    pub fn primary_slots(&self, node: NodeId) -> usize {
        let Some(r) = self
            .member(node)
            .and_then(|m| self.regions.iter().position(|x| *x == m.region))
        else {
            return 0;
        };
        (0..DIGEST_BUCKETS)
            .filter(|&s| {
                self.replicas(s, r)
                    .first()
                    .is_some_and(|id| id.node == node)
            })
            .count()
    }

    /// The slots `node` replicates (primary or not).
    pub fn replica_slots(&self, node: NodeId) -> usize {
        (0..DIGEST_BUCKETS)
            .filter(|&s| self.replicates(s, node))
            .count()
    }

    /// [`Ring::shared_with`] for every other member at once, in one pass
    /// over the slots (a view change must not stall the peer thread: one
    /// pass per peer took ~0.4 s for 8 nodes in a debug build).
    pub fn shared_lists(&self) -> HashMap<NodeId, Vec<u16>> {
        if self.before_leaving.is_some() {
            // Rare (a decommission under way): one pass per peer is fine.
            return self
                .members
                .iter()
                .filter(|m| m.node != self.own_node)
                .map(|m| (m.node, self.shared_with(m.node)))
                .collect();
        }
        let mut out: HashMap<NodeId, Vec<u16>> = self
            .members
            .iter()
            .filter(|m| m.node != self.own_node)
            .map(|m| (m.node, Vec::new()))
            .collect();
        let per_slot = self.regions.len().max(1) * self.rf;
        let mut peers: Vec<NodeId> = Vec::with_capacity(per_slot);
        for (slot, replicas) in self.table.chunks_exact(per_slot).enumerate() {
            let live = replicas.iter().filter(|id| **id != NONE);
            if !live.clone().any(|id| id.node == self.own_node) {
                continue;
            }
            peers.clear();
            peers.extend(live.map(|id| id.node).filter(|n| *n != self.own_node));
            peers.sort_unstable();
            peers.dedup();
            for n in &peers {
                if let Some(list) = out.get_mut(n) {
                    list.push(slot as u16);
                }
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn member(node: NodeId, region: &str, shards: u16) -> Member {
        let addr: SocketAddr = "127.0.0.1:1".parse().unwrap();
        Member {
            node,
            region: region.into(),
            shards,
            peer: addr,
            client: addr,
            ready: true,
            leaving: false,
        }
    }

    #[test]
    fn every_slot_has_rf_distinct_nodes_in_every_region() {
        let ms = vec![
            member(1, "a", 2),
            member(2, "a", 2),
            member(3, "a", 2),
            member(4, "b", 2),
            member(5, "b", 2),
        ];
        let ring = Ring::new(ms, 1, 64, 2);
        for slot in (0..DIGEST_BUCKETS).step_by(97) {
            for r in 0..2 {
                let reps = ring.replicas(slot, r);
                assert_eq!(reps.len(), 2);
                assert_ne!(reps[0].node, reps[1].node);
            }
        }
    }

    #[test]
    fn a_node_s_own_shard_is_its_replica_shard() {
        let ms = vec![member(1, "a", 4), member(2, "a", 4), member(3, "b", 4)];
        let ring = Ring::new(ms, 1, 128, 2);
        for slot in 0..DIGEST_BUCKETS {
            for id in ring.all_replicas(slot).filter(|id| id.node == 1) {
                assert_eq!(id.index, ring.own_shard(slot));
            }
        }
    }

    #[test]
    fn load_spreads_and_removal_moves_only_the_removed_node_s_slots() {
        let ms: Vec<Member> = (1..=4).map(|n| member(n, "a", 2)).collect();
        let ring = Ring::new(ms.clone(), 1, 256, 1);
        let mut per_node = [0usize; 5];
        for slot in 0..DIGEST_BUCKETS {
            per_node[ring.replicas(slot, 0)[0].node as usize] += 1;
        }
        for (n, owned) in per_node.iter().enumerate().skip(1) {
            let share = *owned as f64 / DIGEST_BUCKETS as f64;
            assert!((0.18..0.32).contains(&share), "node {n} owns {share}");
        }
        let smaller = Ring::new(ms[..3].to_vec(), 1, 256, 1);
        for slot in 0..DIGEST_BUCKETS {
            let before = ring.replicas(slot, 0)[0];
            if before.node != 4 {
                assert_eq!(smaller.replicas(slot, 0)[0], before, "slot {slot} moved");
            }
        }
    }

    #[test]
    fn shared_lists_are_shared_with_for_every_peer() {
        let ms = vec![
            member(1, "a", 2),
            member(2, "a", 1),
            member(3, "b", 2),
            member(4, "b", 2),
            member(5, "c", 1),
        ];
        let ring = Ring::new(ms, 1, 64, 2);
        let lists = ring.shared_lists();
        assert_eq!(lists.len(), 4);
        for (peer, list) in lists {
            assert_eq!(list, ring.shared_with(peer), "peer {peer}");
        }
    }

    #[test]
    fn a_catching_up_node_keeps_its_replicas_but_is_never_primary() {
        let mut ms: Vec<Member> = (1..=3).map(|n| member(n, "a", 2)).collect();
        let all_ready = Ring::new(ms.clone(), 1, 128, 2);
        ms[1].ready = false;
        let one_behind = Ring::new(ms, 1, 128, 2);
        let mut moved = 0;
        for slot in 0..DIGEST_BUCKETS {
            let (before, after) = (all_ready.replicas(slot, 0), one_behind.replicas(slot, 0));
            let mut b: Vec<ShardId> = before.to_vec();
            let mut a: Vec<ShardId> = after.to_vec();
            b.sort_by_key(|id| id.node);
            a.sort_by_key(|id| id.node);
            assert_eq!(a, b, "slot {slot}: readiness changed the replica set");
            assert_ne!(after[0].node, 2, "slot {slot}: node 2 is catching up");
            if before[0].node == 2 {
                moved += 1;
            } else {
                assert_eq!(after[0], before[0], "slot {slot}: primary moved needlessly");
            }
        }
        assert!(moved > 0, "node 2 was primary of no slot");
    }

    #[test]
    fn a_leaving_member_holds_no_slot_and_shares_its_old_ones_with_their_new_replicas() {
        let ms: Vec<Member> = (1..=3).map(|n| member(n, "a", 2)).collect();
        let before = Ring::new(ms.clone(), 1, 128, 2);
        let mut leaving = ms.clone();
        leaving[1].leaving = true;
        let without: Vec<Member> = vec![ms[0].clone(), ms[2].clone()];
        let after = Ring::new(leaving.clone(), 1, 128, 2);
        let gone = Ring::new(without, 1, 128, 2);
        assert_eq!(after.primary_slots(2), 0);
        assert_eq!(after.replica_slots(2), 0);
        assert_eq!(
            after.primary_slots(1) + after.primary_slots(3),
            DIGEST_BUCKETS
        );
        for slot in 0..DIGEST_BUCKETS {
            // Placed as if the node were gone: when it stops, nothing moves.
            assert_eq!(
                after.replicas(slot, 0),
                gone.replicas(slot, 0),
                "slot {slot}"
            );
            // A slot it did not hold keeps its primary.
            if !before.replicates(slot, 2) {
                assert_eq!(after.replicas(slot, 0)[0], before.replicas(slot, 0)[0]);
            }
        }
        // Node 1 and the leaving node 2 compare the slots 2 held that 1
        // holds now; node 3 (leaving, from its view) sees the same list.
        let from_2 = Ring::new(leaving, 2, 128, 2);
        let shared = after.shared_with(2);
        assert_eq!(shared, from_2.shared_with(1));
        assert!(!shared.is_empty());
        for &b in &shared {
            assert!(before.replicates(b as usize, 2) && after.replicates(b as usize, 1));
        }
        assert_eq!(after.shared_lists()[&2], shared);
    }
}

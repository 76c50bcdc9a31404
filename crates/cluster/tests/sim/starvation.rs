//! Regression test for a liveness bug found while building the simulation:
//! anti-entropy can stop making progress once the buckets that differ hold
//! more than `AE_BATCH` lattices.
//!
//! `Cluster::bucket_lattices` asks each shard for
//! `bucket_entries(wanted, AE_BATCH)`, which returns the *first* 20,000
//! lattices of the wanted buckets in table order (segment by segment) —
//! the same 20,000 every round, since merging a newer version replaces a
//! record in place. Buckets are spread over all segments, so when every
//! differing bucket has one stale key beyond that prefix, no bucket ever
//! becomes equal, the differing set never shrinks, and each round re-ships
//! the same prefix (already in sync after the first round) for ever. The
//! responder's pull has the same cut. It takes a large shard: here 400,000
//! keys of which two thirds changed while a replica missed them (gossip
//! lost in a partition, or the replica restarted from an old state).
//!
//! The test drives two real shards through the service's round (initiator
//! groups → responder buckets → initiator ships its lattices of the
//! differing buckets and pulls the responder's) with the production batch
//! limit and expects every round to repair something. Fixed first by
//! starting each scan at a random segment (which still let a round land on
//! a part already repaired, seen in CI), now by a cursor per shard: each
//! batch resumes where the last one stopped.

use std::sync::Arc;

use bytes::Bytes;
use elsa_cluster::antientropy as ae;
use elsa_cluster::ring::{Member, Ring};
use elsa_lattice::Hlc;
use elsa_shard::table::DIGEST_BUCKETS;
use elsa_shard::{Expiry, KeyHasher, KeyOp, Op, SetCond, SetReply, Shard};

use crate::node::{hash_of, AE_BATCH};

const KEYS: usize = 400_000;
const ROUNDS: usize = 8;

fn set_all(shard: &mut Shard, keys: impl Iterator<Item = usize>, tag: &str) {
    let ops: Vec<KeyOp> = keys
        .map(|i| {
            let key = Bytes::from(format!("key:{i}"));
            KeyOp {
                hash: hash_of(&key),
                key,
                op: Op::Set {
                    value: Bytes::from(format!("{tag}{i}")),
                    cond: SetCond::Always,
                    expiry: Expiry::Clear,
                    reply: SetReply::Ok,
                },
            }
        })
        .collect();
    for chunk in ops.chunks(10_000) {
        assert_eq!(shard.op_batch(chunk).len(), chunk.len());
    }
}

#[test]
fn ae_batch_limit_starves_anti_entropy_of_large_shards() {
    let addr = "127.0.0.1:1".parse().expect("address");
    let members: Vec<Member> = (1..=2)
        .map(|node| Member {
            node,
            region: "r".into(),
            shards: 1,
            peer: addr,
            client: addr,
            ready: true,
            leaving: false,
        })
        .collect();
    let ring_a = Ring::new(members.clone(), 1, 16, 2);
    let ring_b = Ring::new(members, 2, 16, 2);
    let shared = ring_a.shared_with(2);
    assert_eq!(
        shared.len(),
        DIGEST_BUCKETS,
        "rf 2 of 2 nodes: both keep everything"
    );
    let hlc = Arc::new(Hlc::default());
    let mut a = Shard::new(0, 1, KeyHasher::default(), hlc.clone());
    let mut b = Shard::new(0, 2, KeyHasher::default(), hlc);
    // Both replicas agree on every key…
    set_all(&mut a, 0..KEYS, "old");
    let all = vec![u64::MAX; DIGEST_BUCKETS / 64];
    b.op_merge(&a.bucket_entries(&all, usize::MAX), false)
        .expect("merge");
    // …then B misses two thirds of the keys' next writes.
    set_all(&mut a, (0..KEYS).filter(|i| i % 3 != 0), "new");
    let mut progress = Vec::new();
    for _ in 0..ROUNDS {
        // `anti_entropy_loop` on A, `on_peer_frame(AeGroups)` on B,
        // `ae_compare` on A, `on_peer_frame(AeEntries)` on B.
        let dig_a = ae::node_digest(&ring_a, &[a.digests()]);
        let dig_b = ae::node_digest(&ring_b, &[b.digests()]);
        let (ga, da) = ae::group_digests(&dig_a, &shared);
        let mine_b = ae::group_digests(&dig_b, &shared);
        let groups = ae::differing_groups(&mine_b, &ga, &da);
        let (bb, bd) = ae::bucket_digests(&dig_b, &shared, &groups);
        if bb.is_empty() {
            return; // in sync
        }
        let differ = ae::differing_buckets(&dig_a, &shared, &groups, &bb, &bd);
        let wanted = ae::bitmap(&differ);
        let changed_b = b
            .op_merge(&a.bucket_entries(&wanted, AE_BATCH), false)
            .expect("merge");
        let changed_a = a
            .op_merge(&b.bucket_entries(&wanted, AE_BATCH), false)
            .expect("merge");
        progress.push((differ.len(), changed_b + changed_a));
    }
    // Not converged within ROUNDS (the batch cap bounds each round), but
    // every round must still repair something: no stall.
    assert!(
        progress.iter().all(|(_, changed)| *changed > 0),
        "anti-entropy stalled: (differing buckets, lattices that changed a replica) per round: {progress:?}"
    );
}

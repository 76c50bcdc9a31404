//! Production bugs the simulation found, each kept as a regression test
//! named after it (ignored while open; all are fixed now). A seed of the
//! main sweep that fails for an open bug is listed in [`KNOWN`] and skipped
//! there meanwhile.

use std::sync::Arc;

use bytes::Bytes;
use elsa_cluster::antientropy as ae;
use elsa_cluster::ring::{Member, Ring};
use elsa_lattice::{Hlc, Version};
use elsa_shard::table::fingerprint;
use elsa_shard::wal::codec::{EntryState, LogEntry};
use elsa_shard::{Current, KeyHasher, Shard};

use crate::harness::{self, Scenario};
use crate::node::{hash_of, WatermarkCheck};

/// Seeds of the main sweep that fail because of a known production bug
/// (all of seeds 0..2805 were run; the others pass).
pub const KNOWN: &[(u64, &str)] = &[];

fn run(s: Scenario) {
    if let Err(e) = harness::run(&s) {
        panic!("seed {} failed: {e}", s.seed);
    }
}

/// `elsa_shard::table::fingerprint` mixes `commit_ts.rotate_left(17)` and
/// `origin << 40` with XOR before its finaliser, so bits 23.. of the commit
/// timestamp alias the origin: versions `(ts, o)` and
/// `(ts ^ (x << 23), o ^ x)` of the same key have the same fingerprint, the
/// same bucket digest, and anti-entropy takes the two replicas for equal
/// and never repairs them. In HLC terms: two writes of one key from nodes
/// `o1`, `o2`, with equal logical counters and physical milliseconds that
/// differ exactly by the bit pattern `(o1 ^ o2) << 7` (e.g. 384 ms apart in
/// the right place for nodes 1 and 2) — about one conflicting pair in a
/// thousand, and the pair a partition produces is exactly the one
/// anti-entropy must repair. The sweep hit it in 5 of 1,000 seeds under an
/// earlier parameter set (164, 434, 658, 691, 783) and in 2 of 2,805 with
/// today's (1894, 2013), each time a pair with
/// `ts1 ^ ts2 == (o1 ^ o2) << 23`: in old seed 164 n2 kept
/// `(…482989059, 2)` (a value) for good while every other replica had n4's
/// later delete `(…533320707, 4)` — the versions used below; in seed 1894
/// n2 keeps `(…430167042, 2)` while n4 has `(…446944258, 4)`. Fix: mix origin and
/// timestamp non-linearly (e.g. finalise `hash ^ commit_ts`, then XOR the
/// origin in and finalise again).
#[test]

fn fingerprint_collision_hides_a_differing_version_from_anti_entropy() {
    let key = Bytes::from("key:31");
    let hash = hash_of(&key);
    let older = Version::new(268_857_822_482_989_059, 2);
    let newer = Version::new(older.commit_ts ^ (6 << 23), 4);
    assert!(newer > older);
    // Two replicas, one with a value, one with the later delete.
    let hlc = Arc::new(Hlc::default());
    let mut a = Shard::new(0, 1, KeyHasher::default(), hlc.clone());
    let mut b = Shard::new(0, 2, KeyHasher::default(), hlc);
    a.op_merge(
        &[LogEntry {
            key: key.clone(),
            state: EntryState::Plain(Some(Current {
                value: Bytes::from("resurrected"),
                expire_ms: None,
                ttl_of: None,
            })),
            start_ts: older.commit_ts,
            version: older,
            unit: Default::default(),
        }],
        false,
    )
    .expect("merge");
    b.op_merge(
        &[LogEntry {
            key,
            state: EntryState::Plain(None),
            start_ts: newer.commit_ts,
            version: newer,
            unit: Default::default(),
        }],
        false,
    )
    .expect("merge");
    // The service's first step finds nothing to repair.
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
    let ring = Ring::new(members, 1, 16, 2);
    let shared = ring.shared_with(2);
    let (ga, da) = ae::group_digests(&ae::node_digest(&ring, &[a.digests()]), &shared);
    let mine_b = ae::group_digests(&ae::node_digest(&ring, &[b.digests()]), &shared);
    let differing = ae::differing_groups(&mine_b, &ga, &da);
    assert_eq!(
        fingerprint(hash, older) == fingerprint(hash, newer),
        differing.is_empty()
    );
    assert!(
        !differing.is_empty(),
        "a live value and a later tombstone of the same key look identical to anti-entropy \
         (fingerprint {:x} for both)",
        fingerprint(hash, older)
    );
}

/// Seed 1894 of the sweep: replicas of key 41 never converge.
#[test]

fn regression_seed_1894_fingerprint_collision() {
    run(Scenario::random(1894));
}

/// `Cluster::watermark` (what `WAITREGION` waits on) covers writes whose
/// gossip was never acknowledged when the node crashed. A node commits a
/// key (durable in its log) and crashes before a peer acknowledged the
/// frame carrying it (the merge epoch had not flushed yet, or the frame was
/// lost on the way); it restarts, and its new `Cluster` starts every gossip
/// stream empty and `Shard::restore` does not put recovered lattices back
/// in the gossip buffer. The first frames after the restart are
/// acknowledged, `Stream::through` moves to their flush times — above the
/// commit, which the peer does not have (until some anti-entropy round
/// carries it): `WAITREGION r <timeout> <commit-ts>` answers 1 too early.
/// Seed 1: n5 writes key 22 at 158 ms, crashes and restarts; at 1.1 s its
/// watermark towards r0 is past the write while n2 holds nothing of key 22. Fix: after
/// recovery start each stream with `unrecorded = hlc.now()`, so only an
/// anti-entropy round that finds the pair in sync moves the watermark past
/// what was recovered.
#[test]
fn regression_watermark_covers_writes_lost_in_a_crash() {
    let mut s = Scenario::random(1);
    s.knobs.watermarks = WatermarkCheck {
        earlier_boots: true,
        replaced: false,
    };
    run(s);
}

/// `Cluster::ae_finish` marks a pair in sync up to the round's cutoff when
/// neither side shipped a lattice older than the cutoff. That misses a
/// commit the initiator has since *replaced* by a younger version: in the
/// differing bucket the initiator holds only the young lattice (not
/// shipped: too young), the peer holds nothing or an older version
/// (nothing shipped back), and the watermark (`Stream::synced(cutoff)`)
/// moves past the replaced commit although the peer has neither it nor
/// anything newer — `WAITREGION` answers 1 for a write the region cannot
/// read. The sweep hit it with an earlier parameter set (seed 127: n2's
/// write of key 24 at `…497865731`, overwritten on n2 by n4's write at
/// `…521982979`; the round at 1.488 s shipped nothing older than its
/// cutoff `…509400069` either way, and n2's watermark towards r2 passed
/// the write while n5 held nothing); with today's parameters it is rare,
/// so this test shows the faulty inference on two real shards. Fixed: the
/// cutoff sync moves this node's streams only when no lattice younger than
/// the cutoff sat in the differing buckets here (`AeBatch::younger`).
#[test]
fn ae_finish_cutoff_sync_covers_replaced_writes() {
    use elsa_shard::{Expiry, KeyOp, Op, SetCond, SetReply};
    let addr = "127.0.0.1:1".parse().expect("address");
    let members: Vec<Member> = (1..=2)
        .map(|node| Member {
            node,
            region: format!("r{node}"),
            shards: 1,
            peer: addr,
            client: addr,
            ready: true,
            leaving: false,
        })
        .collect();
    let ring = Ring::new(members, 1, 16, 2);
    let shared = ring.shared_with(2);
    let hlc = Arc::new(Hlc::default());
    let mut a = Shard::new(0, 1, KeyHasher::default(), hlc.clone());
    let b = Shard::new(0, 2, KeyHasher::default(), hlc.clone());
    let key = Bytes::from("key:24");
    let hash = hash_of(&key);
    // A commits the key; its gossip to B is lost.
    a.op_batch(&[KeyOp {
        key: key.clone(),
        hash,
        op: Op::Set {
            value: Bytes::from("mine"),
            cond: SetCond::Always,
            expiry: Expiry::Clear,
            reply: SetReply::Ok,
        },
    }]);
    let mine = a
        .op_read(&elsa_shard::HashedKey {
            key: key.clone(),
            hash,
        })
        .expect("read")
        .version;
    // A third node's later write of the key reaches A (not B yet).
    let later = Version::new(mine.commit_ts + (1_000 << 16), 3);
    a.op_merge(
        &[LogEntry {
            key: key.clone(),
            state: EntryState::Plain(Some(Current {
                value: Bytes::from("later"),
                expire_ms: None,
                ttl_of: None,
            })),
            start_ts: later.commit_ts,
            version: later,
            unit: Default::default(),
        }],
        false,
    )
    .expect("merge");
    // A round whose cutoff lies between the two: A's own commit is older
    // than the cutoff, the version replacing it is younger.
    let cutoff = mine.commit_ts + (500 << 16);
    let (ga, da) = ae::group_digests(&ae::node_digest(&ring, &[a.digests()]), &shared);
    let dig_b = ae::node_digest(&ring, &[b.digests()]);
    let groups = ae::differing_groups(&ae::group_digests(&dig_b, &shared), &ga, &da);
    let (bb, bd) = ae::bucket_digests(&dig_b, &shared, &groups);
    let dig_a = ae::node_digest(&ring, &[a.digests()]);
    let differ = ae::differing_buckets(&dig_a, &shared, &groups, &bb, &bd);
    assert!(!differ.is_empty(), "the replicas differ");
    let wanted = ae::bitmap(&differ);
    let shipped = a.bucket_batch(&wanted, crate::node::AE_BATCH, cutoff);
    let received = b.bucket_entries_before(&wanted, crate::node::AE_BATCH, cutoff);
    // What `ae_finish` concludes from this round for A's own streams…
    let synced_through =
        (shipped.entries.is_empty() && !shipped.younger && received.is_empty()).then_some(cutoff);
    // …must hold: B has A's commit below it, or something newer.
    let on_b = b.bucket_entries(&wanted, usize::MAX);
    if let Some(through) = synced_through {
        assert!(
            mine.commit_ts >= through || on_b.iter().any(|e| e.version >= mine),
            "the round proves B in sync up to {through}, above A's commit {mine:?}, yet B holds {on_b:?}"
        );
    }
}

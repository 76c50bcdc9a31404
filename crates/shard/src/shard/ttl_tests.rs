//! A change of a string's TTL alone (EXPIRE, PERSIST, GETEX) against a
//! concurrent write of its value elsewhere (issue 41, defect 15): the
//! value write wins whatever the clocks say, in any order of arrival,
//! through the log and a restart.

use bytes::Bytes;

use super::tests::{durable_shard, entry, kop, recovered, shard, value};
use super::*;
use crate::ops::Op;
use crate::wal::codec::LogEntry;

/// `EXPIRE k` (far in the future) on a shard holding `a` as written at
/// (10, 1): the lattice it gossips. Its clock is far past 50.
fn expire_of_a() -> LogEntry {
    let mut s = shard();
    s.op_merge(&[entry("k", Some("a"), 10, 1)], false).unwrap();
    s.flush_gossip();
    s.op_batch(&[kop(&s, "k", Op::ExpireAt(u64::MAX / 4))]);
    let mut out = s.flush_gossip();
    assert_eq!(out.len(), 1);
    let e = out.remove(0);
    assert_eq!(
        e.state.plain().and_then(|c| c.ttl_of),
        Some(Version::new(10, 1)),
        "EXPIRE writes a change of the TTL of the value it saw"
    );
    assert!(e.version > Version::new(50, 2));
    e
}

fn ttl(s: &mut Shard, k: &str) -> Option<u64> {
    let k = super::tests::key(s, k);
    s.op_read(&k).unwrap().current.and_then(|c| c.expire_ms)
}

#[test]
fn an_expire_never_undoes_a_concurrent_set_in_either_order() {
    let expire = expire_of_a();
    let set_b = entry("k", Some("b"), 50, 2);
    for order in [[&expire, &set_b], [&set_b, &expire]] {
        let mut s = shard();
        s.op_merge(&[entry("k", Some("a"), 10, 1)], false).unwrap();
        for e in order {
            s.op_merge(&[(*e).clone()], false).unwrap();
        }
        assert_eq!(value(&mut s, "k").as_deref(), Some(&b"b"[..]));
        assert_eq!(ttl(&mut s, "k"), None, "b keeps its own TTL (none)");
    }
}

#[test]
fn an_expire_never_undoes_a_concurrent_delete() {
    let expire = expire_of_a();
    let del = entry("k", None, 50, 2);
    for order in [[&expire, &del], [&del, &expire]] {
        let mut s = shard();
        s.op_merge(&[entry("k", Some("a"), 10, 1)], false).unwrap();
        for e in order {
            s.op_merge(&[(*e).clone()], false).unwrap();
        }
        assert_eq!(value(&mut s, "k"), None);
    }
}

#[test]
fn of_two_ttl_changes_of_one_value_the_later_wins() {
    let expire = expire_of_a();
    let mut s = shard();
    s.op_merge(&[entry("k", Some("a"), 10, 1)], false).unwrap();
    s.op_merge(std::slice::from_ref(&expire), false).unwrap();
    assert_eq!(ttl(&mut s, "k"), Some(u64::MAX / 4));
    // PERSIST here, after the EXPIRE (its clock is later still).
    s.op_batch(&[kop(&s, "k", Op::Persist)]);
    let persist = s.flush_gossip().remove(0);
    assert_eq!(
        persist.state.plain().and_then(|c| c.ttl_of),
        Some(Version::new(10, 1))
    );
    let mut t = shard();
    t.op_merge(&[persist, entry("k", Some("a"), 10, 1), expire], false)
        .unwrap();
    assert_eq!(value(&mut t, "k").as_deref(), Some(&b"a"[..]));
    assert_eq!(ttl(&mut t, "k"), None);
}

#[test]
fn a_ttl_change_keeps_its_place_through_the_log() {
    let dir = std::env::temp_dir().join(format!("elsa-shard-ttlof-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let mut s = durable_shard(&dir);
    s.op_merge(&[entry("k", Some("a"), 10, 1), expire_of_a()], false)
        .unwrap();
    s.flush_wal();
    s.close_wal();
    let mut r = recovered(&dir);
    r.op_merge(&[entry("k", Some("b"), 50, 2)], false).unwrap();
    assert_eq!(value(&mut r, "k").as_deref(), Some(&b"b"[..]));
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn rename_of_a_ttl_change_is_a_write_of_the_new_key() {
    let mut s = shard();
    s.op_merge(&[entry("k", Some("a"), 10, 1), expire_of_a()], false)
        .unwrap();
    s.flush_gossip();
    s.op_batch(&[kop(
        &s,
        "k",
        Op::Rename {
            to: Bytes::from_static(b"k2"),
            nx: false,
        },
    )]);
    let out = s.flush_gossip();
    let k2 = out.iter().find(|e| &e.key[..] == b"k2").unwrap();
    assert_eq!(k2.state.plain().and_then(|c| c.ttl_of), None);
}

/// A counter (a string INCR'd, so a typed state): its value written as
/// `10` at (10, 1), INCR'd, then `EXPIRE k` here — the increment's and
/// the EXPIRE's lattices, as gossiped. Both clocks are far past 50.
fn expire_of_a_counter() -> (LogEntry, LogEntry) {
    let mut s = shard();
    s.op_merge(&[entry("k", Some("10"), 10, 1)], false).unwrap();
    s.flush_gossip();
    s.op_batch(&[kop(&s, "k", Op::IncrBy(1))]);
    let incr = s.flush_gossip().remove(0);
    s.op_batch(&[kop(&s, "k", Op::ExpireAt(u64::MAX / 4))]);
    let expire = s.flush_gossip().remove(0);
    assert!(expire.version > Version::new(50, 2));
    (incr, expire)
}

#[test]
fn an_expire_of_a_counter_never_undoes_a_concurrent_set_in_either_order() {
    let (incr, expire) = expire_of_a_counter();
    // `b` is not a number: it shows as itself. `20` is: the INCR it had
    // not seen counts on top of it.
    for (set, shown) in [("b", "b"), ("20", "21")] {
        let set = entry("k", Some(set), 50, 2);
        for order in [[&expire, &set], [&set, &expire]] {
            let mut s = shard();
            s.op_merge(&[entry("k", Some("10"), 10, 1), incr.clone()], false)
                .unwrap();
            for e in order {
                s.op_merge(&[(*e).clone()], false).unwrap();
            }
            assert_eq!(value(&mut s, "k").as_deref(), Some(shown.as_bytes()));
            assert_eq!(ttl(&mut s, "k"), None, "the SET keeps its own TTL (none)");
        }
    }
}

#[test]
fn an_expire_of_a_counter_keeps_a_concurrent_increment() {
    let (incr, expire) = expire_of_a_counter();
    // Another region's INCR (origin 8), not seen by the EXPIRE.
    let mut there = Shard::new(0, 8, KeyHasher::default(), Arc::new(Hlc::default()));
    there
        .op_merge(&[entry("k", Some("10"), 10, 1)], false)
        .unwrap();
    there.flush_gossip();
    there.op_batch(&[kop(&there, "k", Op::IncrBy(5))]);
    let incr2 = there.flush_gossip().remove(0);
    let mut s = shard();
    s.op_merge(&[entry("k", Some("10"), 10, 1), incr, expire], false)
        .unwrap();
    s.op_merge(&[incr2], false).unwrap();
    assert_eq!(value(&mut s, "k").as_deref(), Some(&b"16"[..]));
    assert_eq!(ttl(&mut s, "k"), Some(u64::MAX / 4));
}

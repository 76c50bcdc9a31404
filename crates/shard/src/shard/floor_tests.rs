//! The collection floor: a transaction delivered again — another region's
//! installed once more from its record, or a record's writes put back by
//! recovery, or a restarted node's last commits sent again — never brings
//! back what this shard collected (issue 41: the concurrent CRDT checker
//! found elements added by `MULTI`, `EVAL` and `BEGIN` blocks back on
//! every node after their removes were collected).
use super::tests::{install, key, shard, value};
use super::*;
use crate::wal::codec::{EntryState, LogEntry};
use elsa_lattice::{Collection, OrSet};

fn v(t: u64) -> Version {
    Version::new(t << 16, 3)
}

fn typed(k: &str, state: KeyState, unit: Unit) -> LogEntry {
    let version = state.newest();
    LogEntry {
        key: Bytes::from(k.to_string()),
        state: EntryState::Typed(Arc::new(state)),
        start_ts: version.commit_ts,
        version,
        unit,
    }
}

fn plain(k: &str, value: Option<&str>, version: Version, unit: Unit) -> LogEntry {
    LogEntry {
        key: Bytes::from(k.to_string()),
        state: EntryState::Plain(value.map(|v| Current {
            value: Bytes::from(v.to_string()),
            expire_ms: None,
            ttl_of: None,
        })),
        start_ts: version.commit_ts,
        version,
        unit,
    }
}

/// The members set `k` shows.
fn members(s: &Shard, k: &str) -> Vec<String> {
    let h = key(s, k);
    let Some(state) = s.table.get(h.hash, &h.key).and_then(|r| r.typed().cloned()) else {
        return Vec::new();
    };
    match state.visible_collection(unix_ms()) {
        Some(Collection::Set(set)) => set
            .iter()
            .map(|m| String::from_utf8_lossy(m).into_owned())
            .collect(),
        _ => Vec::new(),
    }
}

/// A transaction of region b: `SADD s e` and `SET k old` at 10; then
/// `SREM s e` and `DEL k` at 30, each alone. Answers the transaction's
/// writes.
fn added_then_removed(s: &mut Shard) -> Vec<LogEntry> {
    let add = OrSet::default().add("e".into(), v(10));
    let mut set = OrSet::default();
    set.merge(add.clone());
    let txn = vec![
        typed("s", KeyState::of(Collection::Set(add)), Unit::Shards),
        plain("k", Some("old"), v(10), Unit::Shards),
    ];
    install(s, 1, &txn);
    assert_eq!(members(s, "s"), ["e"]);
    let rm = set.remove(&b"e"[..], v(30)).expect("a member");
    s.op_merge(
        &[
            typed("s", KeyState::of(Collection::Set(rm)), Unit::None),
            plain("k", None, v(30), Unit::None),
        ],
        true,
    )
    .unwrap();
    assert_eq!(members(s, "s"), Vec::<String>::new());
    assert_eq!(value(s, "k"), None);
    txn
}

#[test]
fn a_transaction_installed_again_brings_back_nothing_collected() {
    let mut s = shard();
    let txn = added_then_removed(&mut s);
    // Every replica has the removes: collected, the keys gone whole.
    s.collect_garbage(unix_ms(), v(100).commit_ts);
    assert!(s.table.get(key(&s, "s").hash, b"s").is_none());
    assert!(s.table.get(key(&s, "k").hash, b"k").is_none());
    // Its record arrives again (anti-entropy ships it, a restarted peer
    // gossips it): installed once more, it must not undo the removes.
    install(&mut s, 2, &txn);
    assert_eq!(members(&s, "s"), Vec::<String>::new(), "the member is back");
    assert_eq!(value(&mut s, "k"), None, "the deleted string is back");
    // A newer transaction is of course taken.
    let again = OrSet::default().add("e".into(), v(200));
    install(
        &mut s,
        3,
        &[typed(
            "s",
            KeyState::of(Collection::Set(again)),
            Unit::Shards,
        )],
    );
    assert_eq!(members(&s, "s"), ["e"]);
}

#[test]
fn a_record_put_back_by_recovery_brings_back_nothing_collected_before_the_snapshot() {
    let mut s = shard();
    let txn = added_then_removed(&mut s);
    s.collect_garbage(unix_ms(), v(100).commit_ts);
    // Recovery of a snapshot taken then, and of a log written after it
    // that holds the record (it arrived again after the snapshot).
    let mut r = shard();
    r.set_collection_floor(s.collection_floor());
    for e in &txn {
        let h = key(&r, std::str::from_utf8(&e.key).unwrap());
        r.restore_replayed(h.hash, e);
    }
    assert_eq!(members(&r, "s"), Vec::<String>::new(), "the member is back");
    assert_eq!(value(&mut r, "k"), None, "the deleted string is back");
    // Without a floor (no snapshot: the whole log, removes included, is
    // replayed) the writes are put back as they were.
    let mut whole = shard();
    for e in &txn {
        let h = key(&whole, std::str::from_utf8(&e.key).unwrap());
        whole.restore_replayed(h.hash, e);
    }
    assert_eq!(members(&whole, "s"), ["e"]);
}

/// The concurrent CRDT checker (seed 17): an item `RPUSH`ed 1 s into the
/// run and removed at once came back on every node 29 s in, just after
/// the node that pushed it restarted from `kill -9`. Recovery's tail (its
/// own commits of the 30 s before it stopped) went to the other region
/// again as the first frame of each new stream, and the old push merged
/// into keys whose remove had been collected. A resent frame is a
/// delivery again like a record's: nothing in it from before the floor.
#[test]
fn a_lone_write_resent_after_a_restart_brings_back_nothing_collected() {
    let mut s = shard();
    let add = OrSet::default().add("e".into(), v(10));
    let push = vec![typed(
        "s",
        KeyState::of(Collection::Set(add.clone())),
        Unit::None,
    )];
    s.op_merge(&push, true).unwrap();
    let mut set = OrSet::default();
    set.merge(add);
    let rm = set.remove(&b"e"[..], v(30)).expect("a member");
    s.op_merge(
        &[typed("s", KeyState::of(Collection::Set(rm)), Unit::None)],
        true,
    )
    .unwrap();
    s.collect_garbage(unix_ms(), v(100).commit_ts);
    assert!(s.table.get(key(&s, "s").hash, b"s").is_none());
    s.op_merge_resent(&push).unwrap();
    assert_eq!(members(&s, "s"), Vec::<String>::new(), "the member is back");
    // What the sender committed after the floor is merged as it comes.
    let later = OrSet::default().add("f".into(), v(200));
    s.op_merge_resent(&[typed("s", KeyState::of(Collection::Set(later)), Unit::None)])
        .unwrap();
    assert_eq!(members(&s, "s"), ["f"]);
}

#[test]
fn a_part_waiting_for_its_transaction_holds_the_collection_back() {
    let mut s = shard();
    // Region b's transaction: its part waits here for the whole.
    let add = OrSet::default().add("e".into(), v(10));
    let txn = vec![typed("s", KeyState::of(Collection::Set(add)), Unit::Shards)];
    s.op_merge(&txn, true).unwrap();
    assert_eq!(members(&s, "s"), Vec::<String>::new(), "waiting");
    // The horizon passes it meanwhile: the floor must not, or the
    // install would be taken for a late copy and dropped.
    s.collect_garbage(unix_ms(), v(100).commit_ts);
    assert!(s.collection_floor() <= v(10).commit_ts);
    install(&mut s, 1, &txn);
    assert_eq!(members(&s, "s"), ["e"], "the install was dropped");
    // Installed, it holds nothing back any more.
    s.collect_garbage(unix_ms(), v(100).commit_ts);
    assert_eq!(s.collection_floor(), v(100).commit_ts);
}

#[test]
fn a_transaction_from_after_the_floor_is_installed_whole() {
    use elsa_lattice::Counter;
    let mut s = shard();
    // `INCRBY n 2` long ago, alone; every replica has it since.
    let (_, incr) = Counter::default().incr_by(2, 1, v(20), 0).unwrap();
    s.op_merge(
        &[typed("n", KeyState::of_string(incr.clone()), Unit::None)],
        false,
    )
    .unwrap();
    s.collect_garbage(unix_ms(), v(100).commit_ts);
    // Then a transaction of region b sets it to 7, having seen that
    // increment: its base observed the old tally. Trimmed part by part,
    // the observed tally would go and the increment count again (9).
    let mut seen = Counter::default();
    seen.merge(incr);
    let set = seen.set(Some(Bytes::from_static(b"7")), None, 200 << 16, v(200));
    install(
        &mut s,
        1,
        &[typed("n", KeyState::of_string(set), Unit::Shards)],
    );
    assert_eq!(value(&mut s, "n").as_deref(), Some(&b"7"[..]));
}

#[test]
fn a_deletion_collected_here_is_neither_parked_nor_counted_when_it_comes_again() {
    let mut s = shard();
    let _ = added_then_removed(&mut s);
    s.collect_garbage(unix_ms(), v(100).commit_ts);
    // A peer that kept the deletions over a restart ships them again,
    // this time as parts of another region's transaction: nothing to
    // park (nothing would ever install them), nothing changed here —
    // anti-entropy's "dominated".
    let mut set = OrSet::default();
    set.merge(OrSet::default().add("e".into(), v(10)));
    let rm = set.remove(&b"e"[..], v(30)).expect("a member");
    let again = [
        typed("s", KeyState::of(Collection::Set(rm)), Unit::Shards),
        plain("k", None, v(30), Unit::Shards),
    ];
    assert_eq!(s.op_merge(&again, true).unwrap(), 0);
    assert_eq!(s.stats().parts_waiting, 0);
    assert!(s.table.get(key(&s, "s").hash, b"s").is_none());
    assert!(s.table.get(key(&s, "k").hash, b"k").is_none());
    // A deletion of a key never seen here, newer than the floor, is not
    // parked either: shown at once, it shows nothing.
    let fresh = [plain("n", None, v(300), Unit::Shards)];
    assert_eq!(s.op_merge(&fresh, true).unwrap(), 1);
    assert_eq!(s.stats().parts_waiting, 0);
    // A part that shows something still waits for its transaction.
    let shows = [plain("m", Some("x"), v(300), Unit::Shards)];
    assert_eq!(s.op_merge(&shows, true).unwrap(), 1);
    assert_eq!(s.stats().parts_waiting, 1);
}

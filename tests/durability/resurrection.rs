//! Nothing comes back from the dead (issue 41, defect 1): a key deleted,
//! or a list element popped, stays gone after a restart once the
//! collector has dropped its tombstone. Recovery used to replay the
//! committed transaction records kept in the snapshot, and their writes
//! came back over keys whose deletes were no longer there to beat them.

use std::time::Duration;

use super::common::{Node, TestDir};

/// Time for the collector to sweep the whole table (once a second) with
/// no transaction open: the tombstones are gone from memory after it.
const COLLECTED: Duration = Duration::from_millis(2500);

#[test]
fn deleted_keys_stay_deleted_after_sigterm() {
    let dir = TestDir::new("dead-sigterm");
    let flags = ["--workers", "2"];
    let mut node = Node::start(&dir.data(), &dir.log(), &flags);
    let mut c = node.conn();
    let keys: Vec<String> = (1..=8).map(|i| format!("m{i}")).collect();
    let mut mset = redis::cmd("MSET");
    for k in &keys {
        mset.arg(k).arg(format!("v-{k}"));
    }
    let _: () = mset.query(&mut c).unwrap();
    for k in &keys {
        let n: i64 = redis::cmd("DEL").arg(k).query(&mut c).unwrap();
        assert_eq!(n, 1);
    }
    let _: () = redis::cmd("SET")
        .arg("alive")
        .arg("e")
        .query(&mut c)
        .unwrap();
    std::thread::sleep(COLLECTED);
    drop(c);
    node.terminate(Duration::from_secs(30));
    let node = Node::start(&dir.data(), &dir.log(), &flags);
    let mut c = node.conn();
    let got: Vec<Option<String>> = redis::cmd("MGET").arg(&keys).query(&mut c).unwrap();
    assert_eq!(got, vec![None; keys.len()], "deleted keys came back");
    let n: i64 = redis::cmd("DBSIZE").query(&mut c).unwrap();
    assert_eq!(n, 1);
}

#[test]
fn popped_elements_stay_popped_after_save_and_kill() {
    let dir = TestDir::new("dead-save-kill");
    let flags = ["--workers", "2", "--appendfsync", "always"];
    let mut node = Node::start(&dir.data(), &dir.log(), &flags);
    let mut c = node.conn();
    // Several lists written with another key in one MULTI, so some
    // transactions span both shards (and leave a record).
    for i in 0..6 {
        let mut tx = redis::pipe();
        tx.atomic()
            .cmd("RPUSH")
            .arg(format!("kl{i}"))
            .arg("x")
            .arg("y")
            .ignore()
            .cmd("SET")
            .arg(format!("other{i}"))
            .arg(1)
            .ignore();
        let _: () = tx.query(&mut c).unwrap();
        for want in ["x", "y"] {
            let got: Option<String> = redis::cmd("LPOP")
                .arg(format!("kl{i}"))
                .query(&mut c)
                .unwrap();
            assert_eq!(got.as_deref(), Some(want));
        }
    }
    std::thread::sleep(COLLECTED);
    let _: () = redis::cmd("SAVE").query(&mut c).unwrap();
    drop(c);
    node.kill9();
    let node = Node::start(&dir.data(), &dir.log(), &flags);
    let mut c = node.conn();
    for i in 0..6 {
        let got: Vec<String> = redis::cmd("LRANGE")
            .arg(format!("kl{i}"))
            .arg(0)
            .arg(-1)
            .query(&mut c)
            .unwrap();
        assert!(got.is_empty(), "kl{i} came back as {got:?}");
    }
    let n: i64 = redis::cmd("DBSIZE").query(&mut c).unwrap();
    assert_eq!(n, 6);
}

#[test]
fn a_collection_written_again_after_flushdb_keeps_only_its_new_elements() {
    // Found by tests/restart_differential.rs: replayed, the elements
    // written before the flush merged with those written after it, and
    // the flush (applied once everything was replayed) no longer dropped
    // the key, whose newest write was after it.
    let dir = TestDir::new("dead-flushdb");
    let flags = ["--workers", "2", "--appendfsync", "always"];
    let mut node = Node::start(&dir.data(), &dir.log(), &flags);
    let mut c = node.conn();
    let run = |c: &mut redis::Connection, args: &[&str]| {
        let mut cmd = redis::cmd(args[0]);
        for a in &args[1..] {
            cmd.arg(*a);
        }
        let _: redis::Value = cmd.query(c).unwrap();
    };
    run(&mut c, &["ZADD", "z1", "10", "c"]);
    run(&mut c, &["HSET", "h1", "g", "1"]);
    run(&mut c, &["SADD", "s1", "old"]);
    run(&mut c, &["FLUSHDB"]);
    run(&mut c, &["ZADD", "z1", "2", "b"]);
    run(&mut c, &["HSET", "h1", "n", "3"]);
    run(&mut c, &["SADD", "s1", "new"]);
    drop(c);
    node.kill9();
    let node = Node::start(&dir.data(), &dir.log(), &flags);
    let mut c = node.conn();
    let z: Vec<String> = redis::cmd("ZRANGE")
        .arg("z1")
        .arg(0)
        .arg(-1)
        .arg("WITHSCORES")
        .query(&mut c)
        .unwrap();
    assert_eq!(z, ["b", "2"]);
    let h: Vec<String> = redis::cmd("HGETALL").arg("h1").query(&mut c).unwrap();
    assert_eq!(h, ["n", "3"]);
    let s: Vec<String> = redis::cmd("SMEMBERS").arg("s1").query(&mut c).unwrap();
    assert_eq!(s, ["new"]);
}

/// An increment is not counted again after a restart (found by the
/// restart-differential checker, seed 2885): `INCR k`, then a script that
/// writes `k` with another key (a commit of two shards, so it leaves a
/// transaction record), kill -9. Recovery replays the record's write — a
/// plain value, which saw no increments — and the shard's own delta of
/// the same write, which saw the INCR; before the fix the first kept the
/// base and the INCR counted again: 3 in place of 2.
#[test]
fn an_increment_before_a_set_is_not_counted_again_after_kill9() {
    let dir = TestDir::new("incr-set-kill");
    let flags = ["--workers", "2", "--appendfsync", "always"];
    let mut node = Node::start(&dir.data(), &dir.log(), &flags);
    let mut c = node.conn();
    let keys: Vec<String> = (0..8).map(|i| format!("n{i}")).collect();
    for k in &keys {
        let _: i64 = redis::cmd("INCR").arg(k).query(&mut c).unwrap();
        // Some partner keys land on the other shard.
        for partner in ["l1", "l2", "l3"] {
            let _: () = redis::cmd("EVAL")
                .arg("redis.pcall('GET', KEYS[1]); redis.call('SET', KEYS[2], ARGV[1])")
                .arg(2)
                .arg(partner)
                .arg(k)
                .arg(2)
                .query(&mut c)
                .unwrap();
        }
    }
    drop(c);
    node.kill9();
    let node = Node::start(&dir.data(), &dir.log(), &flags);
    let mut c = node.conn();
    let got: Vec<Option<String>> = redis::cmd("MGET").arg(&keys).query(&mut c).unwrap();
    assert_eq!(got, vec![Some("2".to_string()); keys.len()]);
}

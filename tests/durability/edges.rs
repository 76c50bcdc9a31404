//! Recovery at the edges (issue 12): expiring values written by multi-shard
//! commits, and FLUSHALL, survive `kill -9` exactly as they were answered.

use std::time::Duration;

use super::common::{Node, TestDir};

fn get(node: &Node, key: &str) -> Option<String> {
    redis::cmd("GET").arg(key).query(&mut node.conn()).unwrap()
}

#[test]
fn an_expired_write_stays_expired_after_a_crash() {
    // SET x old; MULTI; EXPIRE x 1; SET y 1; EXEC — with x and y on
    // different shards, the EXPIRE lives in another shard's log than
    // "old". Replayed first, the expired value used to be dropped, and
    // "old" came back. Several x keys, so some sit on each shard.
    let dir = TestDir::new("expired-replay");
    let flags = ["--workers", "2", "--appendfsync", "always"];
    let mut node = Node::start(&dir.data(), &dir.log(), &flags);
    let xs: Vec<String> = (0..8).map(|i| format!("x{i}")).collect();
    let mut c = node.conn();
    for x in &xs {
        let _: () = redis::cmd("SET").arg(x).arg("old").query(&mut c).unwrap();
    }
    let mut tx = redis::pipe();
    tx.atomic();
    for x in &xs {
        tx.cmd("EXPIRE").arg(x).arg(1).ignore();
    }
    for i in 0..8 {
        tx.cmd("SET").arg(format!("y{i}")).arg(1).ignore();
    }
    let _: () = tx.query(&mut c).unwrap();
    std::thread::sleep(Duration::from_millis(2100));
    for x in &xs {
        assert_eq!(get(&node, x), None, "{x} expired");
    }
    node.kill9();
    let node = Node::start(&dir.data(), &dir.log(), &flags);
    for x in &xs {
        assert_eq!(get(&node, x), None, "{x} came back after the crash");
    }
    assert_eq!(get(&node, "y3").as_deref(), Some("1"));
}

#[test]
fn flushall_is_durable() {
    // FLUSHALL used not to be logged: the flushed data came back.
    let dir = TestDir::new("flushall");
    let flags = ["--workers", "2", "--appendfsync", "always"];
    let mut node = Node::start(&dir.data(), &dir.log(), &flags);
    let mut c = node.conn();
    for i in 0..20 {
        let _: () = redis::cmd("SET")
            .arg(format!("before{i}"))
            .arg(i)
            .query(&mut c)
            .unwrap();
    }
    let _: () = redis::cmd("FLUSHALL").query(&mut c).unwrap();
    let _: () = redis::cmd("SET").arg("after").arg(1).query(&mut c).unwrap();
    node.kill9();
    let mut node = Node::start(&dir.data(), &dir.log(), &flags);
    let n: i64 = redis::cmd("DBSIZE").query(&mut node.conn()).unwrap();
    assert_eq!(n, 1, "only the key written after FLUSHALL survives");
    assert_eq!(get(&node, "after").as_deref(), Some("1"));
    // Through a snapshot too: SAVE, then another FLUSHALL, then a crash.
    let mut c = node.conn();
    let _: () = redis::cmd("SAVE").query(&mut c).unwrap();
    let _: () = redis::cmd("FLUSHALL").query(&mut c).unwrap();
    node.kill9();
    let node = Node::start(&dir.data(), &dir.log(), &flags);
    let n: i64 = redis::cmd("DBSIZE").query(&mut node.conn()).unwrap();
    assert_eq!(n, 0, "the snapshot's keys were flushed after it");
}

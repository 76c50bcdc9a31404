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

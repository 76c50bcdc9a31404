//! Tombstone collection across restarts, in two regions of two nodes
//! (`--tombstone-ttl-sec 1`): a deletion goes from every node once every
//! replica has it, a node that kept one over a restart neither stays
//! behind nor holds anyone's collection back, and nothing deleted comes
//! back when the whole cluster restarts.
//!
//! Found by the cluster restart-differential test (seed 1): a replica
//! shut down within a second of a `MOVE` kept the source key's deletion
//! in its snapshot while the others collected it. Back, it shipped the
//! deletion in every anti-entropy round: its own region's nodes ignored
//! it (collected), so the round never came out "nothing to ship" and the
//! node stayed catching up — never primary, never collecting; the other
//! region's nodes parked it as part of a transaction whose install had
//! nothing left to do, so its bucket was never proven and every node's
//! collection stalled. Restarted whole, every node collected that
//! deletion before its view of the cluster formed, and the write it had
//! deleted came back from another node's log.
//!
//! Then by CI (a third of runs): the replica stopped was the keys'
//! primary, and went before its gossip of the `DEL` of two keys reached
//! the other region; its snapshot left no log tail to send it again
//! from, so that region got the two deletions by anti-entropy only, never
//! as one transaction, and kept them out of sight for the full
//! `PART_WAIT` (60 s). A clean stop now waits for the other regions to
//! acknowledge its frames (`Cluster::drain_streams`).

use std::time::Duration;

use super::one_at_a_time;
use crate::common::cluster::Cluster;

const FLAGS: &[&str] = &[
    "--tombstone-ttl-sec",
    "1",
    "--appendfsync",
    "always",
    "--snapshot-interval-sec",
    "0",
    "--databases",
    "16",
    "--replication-factor",
    "2",
];

/// `ELSA.DIGEST RECORDS` of node `i` without Elsa's own keys (transaction
/// records, kept for minutes).
fn records(c: &Cluster, i: usize) -> Vec<String> {
    let all: Vec<String> = c.query_retrying(i, redis::cmd("ELSA.DIGEST").arg("RECORDS"));
    all.into_iter()
        .filter(|r| !r.starts_with("\\xffELSA:"))
        .collect()
}

/// Whether a line of `ELSA.DIGEST RECORDS` (`key version kind content`)
/// is a tombstone's.
fn is_tombstone(line: &str) -> bool {
    line.rsplit(' ').nth(1) == Some("tombstone")
}

/// Waits until every node holds no tombstone or emptied collection
/// (collected everywhere), then checks they hold the same records. Within
/// 30 s: half of `PART_WAIT`, so a transaction part the other region kept
/// out of sight for want of the rest fails it.
fn wait_collected(c: &Cluster, nodes: &[usize]) {
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        let left: Vec<(usize, Vec<String>)> = nodes
            .iter()
            .map(|&i| (i, records(c, i)))
            .filter(|(_, r)| {
                // `key version kind content`: the kind, second from last.
                r.iter()
                    .any(|l| matches!(l.rsplit(' ').nth(1), Some("tombstone" | "None")))
            })
            .collect();
        if left.is_empty() {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "deletions not collected after 30 s: {left:?}\n{}\n{}",
            c.records_not_everywhere(nodes),
            c.collection_state(nodes)
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    c.wait_same_digest(nodes, Duration::from_secs(60));
}

#[test]
fn a_replica_restarted_right_after_a_delete_catches_up_and_every_node_collects() {
    let _one = one_at_a_time();
    let mut c = Cluster::start(&["a", "a", "b", "b"], FLAGS);
    let all = [0, 1, 2, 3];
    // Timing decides who collected what before the restart: a few rounds.
    for round in 0..3 {
        let mut con = c.conn(0);
        let (z, s) = (format!("z{round}"), format!("s{round}"));
        let _: () = redis::cmd("ZADD")
            .arg(&z)
            .arg(1)
            .arg("a")
            .arg(2)
            .arg("b")
            .query(&mut con)
            .unwrap();
        let _: () = redis::cmd("SET").arg(&s).arg("v").query(&mut con).unwrap();
        let _: () = redis::cmd("SET")
            .arg("kept")
            .arg(round)
            .query(&mut con)
            .unwrap();
        std::thread::sleep(Duration::from_millis(500));
        let n: i64 = redis::cmd("DEL").arg(&z).arg(&s).query(&mut con).unwrap();
        assert_eq!(n, 2);
        // At once: its snapshot holds the deletion; the others collect it
        // meanwhile.
        c.terminate(1);
        std::thread::sleep(Duration::from_millis(1000 + 1500 * round));
        c.restart(1);
        c.wait_caught_up(&all, Duration::from_secs(60));
        wait_collected(&c, &all);
        for i in all {
            let left: i64 = c.query_retrying(i, redis::cmd("EXISTS").arg(&z).arg(&s));
            assert_eq!(left, 0, "round {round}: deleted keys through node {i}");
        }
    }
}

#[test]
fn a_cluster_restarted_whole_brings_no_deletion_back() {
    let _one = one_at_a_time();
    let mut c = Cluster::start(&["a", "a", "b", "b"], FLAGS);
    let all = [0, 1, 2, 3];
    let mut con = c.conn(0);
    let _: () = redis::cmd("ZADD")
        .arg("moved")
        .arg(1)
        .arg("a")
        .query(&mut con)
        .unwrap();
    let _: () = redis::cmd("SADD")
        .arg("gone")
        .arg("x")
        .arg("y")
        .query(&mut con)
        .unwrap();
    let _: () = redis::cmd("SET")
        .arg("plain")
        .arg("v")
        .query(&mut con)
        .unwrap();
    let _: () = redis::cmd("SET")
        .arg("kept")
        .arg("v")
        .query(&mut con)
        .unwrap();
    std::thread::sleep(Duration::from_millis(500));
    // A transaction of two databases' keys, and one of two keys.
    let moved: i64 = redis::cmd("MOVE")
        .arg("moved")
        .arg(1)
        .query(&mut con)
        .unwrap();
    assert_eq!(moved, 1);
    let n: i64 = redis::cmd("DEL")
        .arg("gone")
        .arg("plain")
        .query(&mut con)
        .unwrap();
    assert_eq!(n, 2);
    drop(con);
    wait_collected(&c, &all);
    // Every node killed, its log only (no snapshot), and started again.
    for i in all {
        c.kill9(i);
    }
    for i in all {
        c.restart(i);
    }
    c.wait_caught_up(&all, Duration::from_secs(60));
    // Long enough for any collection at start-up and any resend.
    std::thread::sleep(Duration::from_secs(3));
    wait_collected(&c, &all);
    for i in all {
        let left: i64 = c.query_retrying(
            i,
            redis::cmd("EXISTS").arg("moved").arg("gone").arg("plain"),
        );
        assert_eq!(
            left,
            0,
            "deleted keys back through node {i}: {:?}",
            records(&c, i)
        );
        let mut con = c.conn(i);
        let _: () = redis::cmd("SELECT").arg(1).query(&mut con).unwrap();
        let there: i64 = redis::cmd("EXISTS").arg("moved").query(&mut con).unwrap();
        assert_eq!(there, 1, "the moved key in database 1 through node {i}");
    }
}

/// A deletion only the restarted node kept, while its peers *fence* it
/// (they took its slots over as it came back answering that it serves
/// nothing): a fenced node's shipments are merged nowhere, so no round
/// ever answered "changed nothing", and the node stayed catching up for
/// good (CI, 2026-12-01, the cluster restart-differential test: `PSETEX`
/// then `SIGTERM`, and `SAVE` + `kill -9` of the ownership leader).
/// Node 2 does not start anti-entropy rounds (`PAUSE-REPAIR`), so it
/// proves nothing and keeps the deletion while nodes 0 and 1 collect it.
#[test]
fn a_node_fenced_while_it_catches_up_with_a_deletion_only_it_kept_catches_up() {
    let _one = one_at_a_time();
    let mut flags = FLAGS.to_vec();
    *flags.last_mut().unwrap() = "3";
    let mut c = Cluster::start(&["a", "a", "a"], &flags);
    let all = [0, 1, 2];
    c.fault(2, "PAUSE-REPAIR");
    let mut con = c.conn(0);
    for k in 0..20 {
        let _: () = redis::cmd("SET")
            .arg(format!("gone{k}"))
            .arg("v")
            .query(&mut con)
            .unwrap();
        let _: () = redis::cmd("SET")
            .arg(format!("kept{k}"))
            .arg("v")
            .query(&mut con)
            .unwrap();
    }
    std::thread::sleep(Duration::from_millis(500));
    for k in 0..20 {
        let n: i64 = redis::cmd("DEL")
            .arg(format!("gone{k}"))
            .query(&mut con)
            .unwrap();
        assert_eq!(n, 1);
    }
    drop(con);
    // Nodes 0 and 1 collect the deletions; node 2 keeps them.
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while [0, 1]
        .iter()
        .any(|&i| records(&c, i).iter().any(|l| is_tombstone(l)))
    {
        assert!(
            std::time::Instant::now() < deadline,
            "nodes 0 and 1 did not collect: {}",
            c.collection_state(&all)
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let kept = records(&c, 2).iter().filter(|l| is_tombstone(l)).count();
    assert!(kept > 0, "node 2 collected too: the test proves nothing");
    // Back at once, before the failure detector declares it dead: its
    // peers take its slots over from it and fence it while it catches up.
    c.terminate(2);
    c.restart(2);
    c.wait_caught_up(&all, Duration::from_secs(30));
    wait_collected(&c, &all);
    for i in all {
        let left: i64 = c.query_retrying(i, redis::cmd("EXISTS").arg("gone0").arg("gone7"));
        assert_eq!(left, 0, "deleted keys through node {i}");
        let there: i64 = c.query_retrying(i, redis::cmd("EXISTS").arg("kept0").arg("kept7"));
        assert_eq!(there, 2, "kept keys through node {i}");
    }
}

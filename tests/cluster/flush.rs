//! FLUSHALL and FLUSHDB empty the database everywhere (issue 41, item
//! 10): on one region of two nodes (replication factor 2) and on two
//! regions of one node, a FLUSHDB on one node empties that database on
//! both and leaves the others; a FLUSHALL empties every database on both;
//! neither anti-entropy rounds nor restarts (`kill -9`, SIGTERM) bring a
//! flushed key back; a write made after the flush on the other node
//! survives it; a node that was down during a FLUSHALL learns it when
//! it comes back, its old keys coming back nowhere; and a flush whose
//! frame to the other region was lost (a cut) gets there once it heals. Before the fix a flush
//! was per node: the other node kept its keys, and anti-entropy brought
//! them back to the node that flushed.

use std::time::{Duration, Instant};

use redis::Value;

use crate::common::cluster::Cluster;
use crate::{one_at_a_time, text};

/// Runs `build(pipe)` as one pipeline after `SELECT db` on node `i`, on a
/// fresh connection; connection errors and refusals are retried for 30 s
/// (a node may be restarting, or its ring changing).
fn run_in<T: redis::FromRedisValue>(
    c: &Cluster,
    i: usize,
    db: u8,
    build: impl Fn(&mut redis::Pipeline),
) -> T {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let got = redis::Client::open(c.node(i).url())
            .and_then(|cl| cl.get_connection_with_timeout(Duration::from_secs(10)))
            .and_then(|mut con| {
                con.set_read_timeout(Some(Duration::from_secs(10)))?;
                let mut pipe = redis::pipe();
                pipe.cmd("SELECT").arg(db).ignore();
                build(&mut pipe);
                pipe.query::<T>(&mut con)
            });
        match got {
            Ok(v) => return v,
            Err(e) if Instant::now() < deadline => {
                let _ = e;
                std::thread::sleep(Duration::from_millis(100));
            }
            Err(e) => panic!("node {i}, db {db}: {e}"),
        }
    }
}

/// `SET key value` for every key, in database `db` of node `i`.
fn write(c: &Cluster, i: usize, db: u8, keys: &[String], value: &str) {
    let _: Vec<Value> = run_in(c, i, db, |p| {
        for k in keys {
            p.cmd("SET").arg(k).arg(value);
        }
    });
}

fn keys(prefix: &str, n: usize) -> Vec<String> {
    (0..n).map(|i| format!("{prefix}{i}")).collect()
}

fn dbsize(c: &Cluster, i: usize, db: u8) -> i64 {
    let (n,): (i64,) = run_in(c, i, db, |p| {
        p.cmd("DBSIZE");
    });
    n
}

/// Every node's DBSIZE of every database in `want`.
fn sizes(c: &Cluster, nodes: &[usize], want: &[(u8, i64)]) -> Vec<Vec<(u8, i64)>> {
    nodes
        .iter()
        .map(|&i| want.iter().map(|&(db, _)| (db, dbsize(c, i, db))).collect())
        .collect()
}

/// Polls until every node in `nodes` answers DBSIZE as `want` says for
/// each database; panics after `timeout` with what they answered.
fn wait_sizes(c: &Cluster, nodes: &[usize], want: &[(u8, i64)], what: &str) {
    let started = Instant::now();
    loop {
        let seen = sizes(c, nodes, want);
        if seen.iter().all(|s| s == want) {
            println!("[flush] {what}: {:.1?}", started.elapsed());
            return;
        }
        if started.elapsed() > Duration::from_secs(30) {
            panic!(
                "{what}: after 30 s the nodes {nodes:?} answer DBSIZE (db, keys) {seen:?}, \
                 expected {want:?} on each"
            );
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// Checks for `how_long` (several anti-entropy rounds) that the sizes
/// stay as `want` says: nothing flushed comes back.
fn hold_sizes(c: &Cluster, nodes: &[usize], want: &[(u8, i64)], what: &str, how_long: Duration) {
    let started = Instant::now();
    while started.elapsed() < how_long {
        let seen = sizes(c, nodes, want);
        assert!(
            seen.iter().all(|s| s == want),
            "{what}: {:.1?} later the nodes {nodes:?} answer DBSIZE (db, keys) {seen:?}, \
             expected {want:?} on each (flushed keys came back)",
            started.elapsed()
        );
        std::thread::sleep(Duration::from_millis(250));
    }
}

fn get(c: &Cluster, i: usize, db: u8, key: &str) -> Option<String> {
    let (v,): (Value,) = run_in(c, i, db, |p| {
        p.cmd("GET").arg(key);
    });
    text(&v)
}

fn flush(c: &Cluster, i: usize, db: u8, what: &str) {
    let (v,): (Value,) = run_in(c, i, db, |p| {
        p.cmd(what);
    });
    assert_eq!(
        text(&v).as_deref(),
        Some("OK"),
        "{what} on node {i} answered {v:?}"
    );
}

/// Waits until both nodes list both as members, caught up.
fn settle(c: &Cluster) {
    c.wait_members(&[0, 1], 2, Duration::from_secs(60));
    c.wait_caught_up(&[0, 1], Duration::from_secs(60));
}

/// The whole history, on a cluster of two nodes (0 and 1) that each hold
/// every key.
fn flushes_reach_every_node(c: &mut Cluster) {
    let both = [0, 1];
    let rounds = Duration::from_secs(3);

    // Keys in databases 0 and 1, written on node 0, on both nodes.
    write(c, 0, 0, &keys("k", 20), "v");
    write(c, 0, 1, &keys("j", 20), "v");
    wait_sizes(c, &both, &[(0, 20), (1, 20)], "written keys on both nodes");

    // FLUSHDB (database 0) on node 0: database 0 empty on both, 1 kept.
    flush(c, 0, 0, "FLUSHDB");
    let after_flushdb = [(0, 0), (1, 20)];
    wait_sizes(c, &both, &after_flushdb, "FLUSHDB 0 on node 0 reached both");
    hold_sizes(c, &both, &after_flushdb, "after FLUSHDB", rounds);

    // More keys from node 1, then FLUSHALL on node 1, then a write on
    // node 0 made after it: only that write is left, on both.
    write(c, 1, 0, &keys("m", 10), "v");
    write(c, 1, 2, &keys("d", 10), "v");
    wait_sizes(
        c,
        &both,
        &[(0, 10), (1, 20), (2, 10)],
        "node 1's keys on both",
    );
    flush(c, 1, 0, "FLUSHALL");
    std::thread::sleep(Duration::from_millis(20));
    write(c, 0, 0, &["after".to_string()], "x");
    write(c, 0, 1, &["after1".to_string()], "y");
    let after_flushall = [(0, 1), (1, 1), (2, 0)];
    wait_sizes(c, &both, &after_flushall, "FLUSHALL on node 1 reached both");
    hold_sizes(c, &both, &after_flushall, "after FLUSHALL", rounds);
    for i in both {
        assert_eq!(
            get(c, i, 0, "after").as_deref(),
            Some("x"),
            "node {i}: a write made after the FLUSHALL (on the other node) is lost"
        );
        assert_eq!(get(c, i, 0, "k3"), None, "node {i}: k3 came back");
    }

    // Restarts: kill -9 of node 0, SIGTERM of node 1.
    c.kill9(0);
    c.restart(0);
    settle(c);
    wait_sizes(
        c,
        &both,
        &after_flushall,
        "after kill -9 and restart of node 0",
    );
    c.terminate(1);
    c.restart(1);
    settle(c);
    wait_sizes(
        c,
        &both,
        &after_flushall,
        "after SIGTERM and restart of node 1",
    );
    hold_sizes(c, &both, &after_flushall, "after the restarts", rounds);
    c.wait_same_digest(&both, Duration::from_secs(30));

    // A node down during a FLUSHALL learns it when it comes back.
    write(c, 0, 0, &keys("old", 10), "v");
    write(c, 0, 3, &keys("old3_", 10), "v");
    let before = [(0, 11), (1, 1), (3, 10)];
    wait_sizes(c, &both, &before, "keys written before node 1 stops");
    c.kill9(1);
    flush(c, 0, 0, "FLUSHALL");
    let empty = [(0, 0), (1, 0), (3, 0)];
    wait_sizes(c, &[0], &empty, "FLUSHALL on node 0 while node 1 is down");
    c.restart(1);
    settle(c);
    wait_sizes(c, &both, &empty, "node 1 back after missing the FLUSHALL");
    hold_sizes(c, &both, &empty, "after node 1 came back", rounds);
    c.wait_same_digest(&both, Duration::from_secs(30));
    // And it stays so through its next restart too.
    c.terminate(1);
    c.restart(1);
    settle(c);
    hold_sizes(c, &both, &empty, "after node 1 restarted again", rounds);
}

#[test]
fn flushes_empty_both_nodes_of_a_region() {
    let _one = one_at_a_time();
    let mut c = Cluster::start(&["a", "a"], &["--replication-factor", "2"]);
    flushes_reach_every_node(&mut c);
}

#[test]
fn flushes_empty_both_regions() {
    let _one = one_at_a_time();
    let mut c = Cluster::start(&["a", "b"], &["--wan-delay-ms", "10"]);
    flushes_reach_every_node(&mut c);

    // The flush's own frame lost (node 0 cut off from the other region
    // when it flushes): the other region still has the keys until the cut
    // heals, and then anti-entropy carries the floor.
    write(&c, 1, 0, &keys("cut", 5), "v");
    let both = [0, 1];
    wait_sizes(&c, &both, &[(0, 5)], "keys written before the cut");
    c.fault(0, "ISOLATE");
    flush(&c, 0, 0, "FLUSHDB");
    std::thread::sleep(Duration::from_secs(1));
    assert_eq!(
        dbsize(&c, 1, 0),
        5,
        "the cut did not hold: the FLUSHDB reached the other region"
    );
    c.fault(0, "HEAL");
    wait_sizes(
        &c,
        &both,
        &[(0, 0)],
        "a FLUSHDB whose frame was lost, once healed",
    );
    hold_sizes(
        &c,
        &both,
        &[(0, 0)],
        "after the heal",
        Duration::from_secs(3),
    );
    c.wait_same_digest(&both, Duration::from_secs(30));
}

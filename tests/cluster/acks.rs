//! What an acknowledgement at level `region` (the default) promises: the
//! write is on every replica of its key in the region's view, so losing
//! the node that took it loses nothing acknowledged (issue 41, defect 8).

use std::time::Duration;

use super::commits::owner;
use super::common::cluster::Cluster;
use super::common::{cluster_slots, slot_owner_port};
use super::one_at_a_time;

/// A key node `i` is the primary of.
fn key_owned_by(c: &Cluster, i: usize, prefix: &str) -> String {
    (0..1000)
        .map(|n| format!("{prefix}{n}"))
        .find(|k| owner(c, i, k) == i)
        .expect("a key node i owns")
}

/// `n` keys node `i` is the primary of (by one `CLUSTER SLOTS`).
fn keys_owned_by(c: &Cluster, i: usize, prefix: &str, n: usize) -> Vec<String> {
    let mut con = c.conn(i);
    let slots = cluster_slots(&mut con);
    let mut out = Vec::new();
    for k in (0..100 * n).map(|m| format!("{prefix}{m}")) {
        let slot: u16 = redis::cmd("CLUSTER")
            .arg("KEYSLOT")
            .arg(&k)
            .query(&mut con)
            .expect("CLUSTER KEYSLOT");
        if slot_owner_port(&slots, slot) == c.port(i) {
            out.push(k);
            if out.len() == n {
                return out;
            }
        }
    }
    panic!("node {i} owns fewer than {n} of the keys tried")
}

/// A replica whose connections failed for a moment — its process alive,
/// its membership unchanged — is still a replica: a write waits for it
/// and is acknowledged once it has it. Before, a failed connection
/// attempt marked it "unreachable" and the batch counted as confirmed
/// with no replica holding it: kill -9 of the node that took the writes
/// lost every one of them.
#[test]
fn a_replica_out_of_reach_for_a_moment_is_waited_for() {
    let _one = one_at_a_time();
    // A region of two nodes that must survive one failure: `ownership =
    // gossip` (with leases the survivor alone is no majority and serves
    // nothing, `docs/regions.md`, *One owner per slot*).
    let mut c = Cluster::start(
        &["r1", "r1"],
        &[
            "--replication-factor",
            "2",
            "--appendfsync",
            "always",
            "--ownership",
            "gossip",
        ],
    );
    let key = key_owned_by(&c, 0, "hiccup:");
    let mut con = c.conn(0);
    let _: i64 = redis::cmd("RPUSH")
        .arg(&key)
        .arg("before")
        .query(&mut con)
        .expect("RPUSH");
    c.fault(0, "LINKS-DOWN 3000");
    std::thread::sleep(Duration::from_millis(300));
    let mut acked = vec!["before".to_string()];
    for i in 0..20 {
        let n: i64 = redis::cmd("RPUSH")
            .arg(&key)
            .arg(i)
            .query(&mut con)
            .expect("RPUSH");
        acked.push(i.to_string());
        assert_eq!(n as usize, acked.len());
    }
    c.kill9(0);
    // Node 1 takes the key over once node 0 is declared dead; until then
    // it answers that the key's node failed.
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    let got: Vec<String> = loop {
        match redis::cmd("LRANGE")
            .arg(&key)
            .arg(0)
            .arg(-1)
            .query(&mut c.conn(1))
        {
            Ok(v) => break v,
            Err(e) if std::time::Instant::now() < deadline => {
                eprintln!("node 1 answers: {e}");
                std::thread::sleep(Duration::from_millis(200));
            }
            Err(e) => panic!("node 1 never took the key over: {e}"),
        }
    };
    assert_eq!(
        got, acked,
        "the surviving replica lacks writes node 0 acknowledged"
    );
}

/// With leases (the default), a node whose failure detector has dropped
/// the rest of its region while its lease still runs — a second into a
/// cut — waits for the replicas the region's group has inside: it
/// acknowledges no write before a replica has it. Before, it counted
/// itself alone and answered at once; the cut nemesis then saw the
/// others serve its slots without the write (a `DEL` undone, a `SET`
/// lost; issue 42). `FORGET-PEERS` makes the view drop them at once,
/// `LINKS-DOWN` keeps every replica out of reach for a while.
#[test]
fn a_node_that_lost_sight_of_its_region_acknowledges_nothing_alone() {
    let _one = one_at_a_time();
    let mut c = Cluster::start(
        &["r1", "r1", "r1"],
        &["--replication-factor", "3", "--appendfsync", "always"],
    );
    // The group puts its nodes in one at a time once formed: before the
    // others are in, node 0 may own every slot with no other replica in
    // the agreed ring, and the case under test is a node that has them.
    c.wait_nodes_in(&[0, 1, 2], 3, Duration::from_secs(30));
    let key = key_owned_by(&c, 0, "alone:");
    // Retried: a starved node may restart in place before the test starts.
    let _: () = c.query_retrying(0, redis::cmd("SET").arg(&key).arg("before"));
    let mut con = c.conn(0);
    // The view drops the region's other nodes first (so no batch is in
    // flight when the links go down), then every replica is out of reach.
    c.fault(0, "FORGET-PEERS 3000");
    c.wait_members(&[0], 1, Duration::from_secs(1));
    let down = Duration::from_millis(1500);
    let cut = std::time::Instant::now();
    c.fault(0, &format!("LINKS-DOWN {}", down.as_millis()));
    let answer: redis::RedisResult<()> = redis::cmd("SET").arg(&key).arg("during").query(&mut con);
    let answered = cut.elapsed();
    eprintln!("node 0 answered {answer:?} {answered:?} after its links went down");
    if let Err(e) = &answer {
        // Refusing is allowed; acknowledging alone is not.
        eprintln!("node 0 refused the write: {e}");
        return;
    }
    assert!(
        answered >= down,
        "node 0 acknowledged a write {answered:?} into {down:?} without links, \
         when no replica could have it\nINFO replication:\n{}\nlog tail:\n{}",
        c.info_replication(0),
        c.log_tail(0, 40)
    );
    // What was acknowledged survives the loss of the node that took it.
    c.kill9(0);
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    let got: Option<String> = loop {
        match redis::cmd("GET").arg(&key).query(&mut c.conn(1)) {
            Ok(v) => break v,
            Err(e) if std::time::Instant::now() < deadline => {
                eprintln!("node 1 answers: {e}");
                std::thread::sleep(Duration::from_millis(200));
            }
            Err(e) => panic!("node 1 never took the key over: {e}"),
        }
    };
    assert_eq!(got.as_deref(), Some("during"), "an acknowledged write lost");
}

/// One `INFO` field of node `i` as a number.
fn info_num(c: &Cluster, i: usize, section: &str, field: &str) -> u64 {
    let text: String = c.query_retrying(i, redis::cmd("INFO").arg(section));
    text.lines()
        .find_map(|l| l.strip_prefix(&format!("{field}:")))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("no {field} in INFO {section} of node {i}"))
}

/// A key is evicted by its primary only (issue 41, defect 6). Node 1 is
/// short of memory and node 0 is not; node 1 holds node 0's keys as
/// their replica. Before, node 1 evicted them with a delete of its own
/// (with its own clock, so also a newer write node 0 had acknowledged),
/// shipped it to node 0, and node 0 lost keys it never chose to evict.
#[test]
fn a_replica_short_of_memory_evicts_no_key_of_another_primary() {
    let _one = one_at_a_time();
    let c = Cluster::start(&["r1", "r1"], &["--replication-factor", "2"]);
    let keys = keys_owned_by(&c, 0, "ev:", 600);
    let used = info_num(&c, 1, "memory", "used_memory");
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("maxmemory-policy")
        .arg("allkeys-random")
        .arg("maxmemory")
        .arg(used + (1 << 20))
        .query(&mut c.conn(1))
        .expect("CONFIG SET on node 1");
    let value = "x".repeat(8 << 10);
    let mut con = c.conn(0);
    for k in &keys {
        let _: () = redis::cmd("SET")
            .arg(k)
            .arg(&value)
            .query(&mut con)
            .expect("SET");
    }
    // Eviction runs before batches and on the epoch timer.
    std::thread::sleep(Duration::from_secs(2));
    let mut args = redis::cmd("EXISTS");
    for k in &keys {
        args.arg(k);
    }
    let present: usize = args.query(&mut c.conn(0)).expect("EXISTS");
    assert_eq!(
        present,
        keys.len(),
        "node 0 lost keys it did not evict (node 1 evicted {})",
        info_num(&c, 1, "stats", "evicted_keys")
    );
}

/// `WAIT` counts the region's other replicas of the node's keys: a
/// write acknowledged (at level `region`, the default) is on them, so
/// `WAIT 1` answers 1 at once, and asking for more than there are waits
/// out the timeout and answers what there is — as Redis with one replica.
#[test]
fn wait_counts_the_regions_other_replicas() {
    let _one = one_at_a_time();
    let c = Cluster::start(&["r1", "r1"], &["--replication-factor", "2"]);
    let mut con = c.conn(0);
    let _: () = redis::cmd("SET").arg("k").arg("v").query(&mut con).unwrap();
    let n: i64 = redis::cmd("WAIT").arg(1).arg(0).query(&mut con).unwrap();
    assert_eq!(n, 1);
    let n: i64 = redis::cmd("WAIT").arg(2).arg(100).query(&mut con).unwrap();
    assert_eq!(n, 1);
}

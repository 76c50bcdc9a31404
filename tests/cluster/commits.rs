//! Multi-node commits under a node's death (issue 12, item 4): a commit
//! whose participants live on several nodes is installed everywhere or
//! nowhere, whichever node dies between its decision and its installs —
//! a participant (the replica taking its keys over holds them, and the
//! coordinator installs there) or the coordinator (the participants'
//! resolvers finish it from the transaction's record). And RENAME, a
//! commit of two keys on two nodes, is never seen half done.

use std::time::Duration;

use super::common::cluster::Cluster;
use super::common::{cluster_slots, slot_owner_port};
use super::one_at_a_time;

/// Keys enough that a 3-node region's nodes are all primaries of some.
pub(super) fn keys() -> Vec<String> {
    (0..24).map(|i| format!("tx:{i}")).collect()
}

fn mset(c: &mut redis::Connection, keys: &[String], v: &str) -> redis::RedisResult<()> {
    let mut cmd = redis::cmd("MSET");
    for k in keys {
        cmd.arg(k).arg(v);
    }
    cmd.query(c)
}

/// Reads every key through node `i`, retrying while its view settles.
pub(super) fn read_all(c: &Cluster, i: usize, keys: &[String]) -> Vec<Option<String>> {
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        let got: redis::RedisResult<Vec<Option<String>>> =
            redis::cmd("MGET").arg(keys).query(&mut c.conn(i));
        match got {
            Ok(v) => return v,
            Err(e) if std::time::Instant::now() < deadline => {
                eprintln!("MGET through node {i}: {e}; again");
                std::thread::sleep(Duration::from_millis(300));
            }
            Err(e) => panic!("MGET through node {i}: {e}"),
        }
    }
}

/// `MSET` of every key of `ks` to `value` through the node on `port`, on a
/// thread of its own (the test kills nodes meanwhile); its answer at join.
fn mset_from_thread(
    port: u16,
    ks: &[String],
    value: &'static str,
) -> std::thread::JoinHandle<redis::RedisResult<()>> {
    let ks = ks.to_vec();
    std::thread::spawn(move || {
        let client = redis::Client::open(format!("redis://127.0.0.1:{port}/")).unwrap();
        let mut con = client.get_connection().unwrap();
        con.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
        mset(&mut con, &ks, value)
    })
}

pub(super) fn three_nodes() -> Cluster {
    Cluster::start(
        &["r0", "r0", "r0"],
        &["--replication-factor", "3", "--appendfsync", "always"],
    )
}

/// Sets every key of `ks` to "0", then has node 0 coordinate an `MSET`
/// of them to "1" whose part on node 1 is held but never installed, and
/// kills node 0 after the decision: the commit is orphaned, its keys on
/// node 1 held until node 1's resolver finishes it. Answers what the
/// client heard.
pub(super) fn orphan_a_commit(c: &mut Cluster, ks: &[String]) -> redis::RedisResult<()> {
    mset(&mut c.conn(0), ks, "0").expect("setup");
    c.fault(1, "DROP-INSTALLS");
    let commit = mset_from_thread(c.port(0), ks, "1");
    std::thread::sleep(Duration::from_millis(800));
    c.kill9(0);
    commit.join().unwrap()
}

#[test]
fn a_participant_dying_after_the_decision_loses_no_part_of_the_commit() {
    let _one = one_at_a_time();
    let mut c = three_nodes();
    let ks = keys();
    mset(&mut c.conn(0), &ks, "0").expect("setup");
    // Node 1 will take part in the commit but never install its part, as
    // if it died right after the decision; then it does die.
    c.fault(1, "DROP-INSTALLS");
    let commit = mset_from_thread(c.port(0), &ks, "1");
    std::thread::sleep(Duration::from_millis(800));
    c.kill9(1);
    let answer = commit.join().unwrap();
    // The coordinator asks the replica that took node 1's keys over (it
    // held them too) and the commit completes.
    assert!(answer.is_ok(), "MSET answered {answer:?}");
    for i in [0, 2] {
        let got = read_all(&c, i, &ks);
        assert!(
            got.iter().all(|v| v.as_deref() == Some("1")),
            "through node {i}: {got:?}"
        );
    }
    c.restart(1);
    c.wait_caught_up(&[0, 1, 2], Duration::from_secs(60));
    let got = read_all(&c, 1, &ks);
    assert!(got.iter().all(|v| v.as_deref() == Some("1")), "{got:?}");
}

#[test]
fn a_coordinator_dying_after_the_decision_leaves_the_commit_finished() {
    let _one = one_at_a_time();
    let mut c = three_nodes();
    let ks = keys();
    // Node 1's resolver finds the holds orphaned, reads the transaction's
    // record — committed — and installs.
    let answer = orphan_a_commit(&mut c, &ks);
    assert!(
        answer.is_err(),
        "the coordinator died: no answer ({answer:?})"
    );
    c.fault(1, "HEAL");
    // The outcome was unknown to the client; it must be all or nothing.
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    let got = loop {
        let got = read_all(&c, 2, &ks);
        let ones = got.iter().filter(|v| v.as_deref() == Some("1")).count();
        if ones == ks.len() || std::time::Instant::now() > deadline {
            break got;
        }
        std::thread::sleep(Duration::from_millis(300));
    };
    let ones = got.iter().filter(|v| v.as_deref() == Some("1")).count();
    assert!(
        ones == ks.len(),
        "the commit was decided, so every part must be installed: {got:?}"
    );
    assert_eq!(read_all(&c, 1, &ks), got, "nodes 1 and 2 agree");
}

#[test]
fn rename_between_nodes_is_atomic() {
    // Two nodes, each the primary of some keys: RENAME between keys whose
    // primaries differ runs the multi-node commit MSET runs. One client
    // moves eight values back and forth through node 0; another reads all
    // sixteen keys at once through node 1 (MGET holds them on both nodes).
    // Each value is always in exactly one key of its pair.
    let _one = one_at_a_time();
    let c = Cluster::start(&["r0", "r0"], &[]);
    let pairs: Vec<(String, String)> = (0..8)
        .map(|i| (format!("mv:{i}:a"), format!("mv:{i}:b")))
        .collect();
    let all: Vec<String> = pairs
        .iter()
        .flat_map(|(a, b)| [a.clone(), b.clone()])
        .collect();
    let mut w = c.conn(0);
    for (a, _) in &pairs {
        let _: () = redis::cmd("SET").arg(a).arg("v").query(&mut w).unwrap();
    }
    let writer = {
        let pairs = pairs.clone();
        std::thread::spawn(move || {
            for _ in 0..60 {
                for (a, b) in &pairs {
                    let _: () = redis::cmd("RENAME").arg(a).arg(b).query(&mut w).unwrap();
                    let _: () = redis::cmd("RENAME").arg(b).arg(a).query(&mut w).unwrap();
                }
            }
        })
    };
    let mut r = c.conn(1);
    let (mut reads, mut torn) = (0, 0);
    while !writer.is_finished() || reads < 10 {
        let got = read_all(&c, 1, &all);
        reads += 1;
        for pair in got.chunks(2) {
            if pair.iter().filter(|v| v.is_some()).count() != 1 {
                torn += 1;
                eprintln!("torn pair: {pair:?}");
            }
        }
    }
    writer.join().unwrap();
    eprintln!("{reads} reads of {} keys, {torn} torn pairs", all.len());
    assert_eq!(
        torn, 0,
        "a value was seen in neither key of its pair, or in both"
    );
    let got: Vec<Option<String>> = redis::cmd("MGET").arg(&all).query(&mut r).unwrap();
    let home: Vec<Option<String>> = (0..16)
        .map(|i| (i % 2 == 0).then(|| "v".to_string()))
        .collect();
    assert_eq!(got, home, "960 renames later every value is back home");
}

#[test]
fn bitop_reaches_sources_and_a_destination_on_both_nodes() {
    // BITOP is one commit of its destination, reading every source: with
    // the keys spread over two nodes it runs the multi-node commit RENAME
    // and MSET run. Each result, read through either node, is the byte
    // arithmetic of the sources, and a failed BITOP (WRONGTYPE) leaves
    // the destination as it was.
    let _one = one_at_a_time();
    let c = Cluster::start(&["r0", "r0"], &[]);
    let srcs: Vec<String> = (0..6).map(|i| format!("bo:{i}")).collect();
    let owners: Vec<usize> = srcs.iter().map(|k| owner(&c, 0, k)).collect();
    assert!(
        owners.contains(&0) && owners.contains(&1),
        "sources on both nodes: {owners:?}"
    );
    let values: Vec<Vec<u8>> = (0..srcs.len())
        .map(|i| (0..3 + 2 * i).map(|j| (i * 37 + j * 11) as u8).collect())
        .collect();
    let mut w = c.conn(0);
    for (k, v) in srcs.iter().zip(&values) {
        let _: () = redis::cmd("SET").arg(k).arg(v).query(&mut w).unwrap();
    }
    let len = values.iter().map(Vec::len).max().unwrap();
    let byte = |v: &Vec<u8>, i: usize| v.get(i).copied().unwrap_or(0);
    let fold = |f: fn(u8, u8) -> u8| -> Vec<u8> {
        (0..len)
            .map(|i| {
                values[1..]
                    .iter()
                    .fold(byte(&values[0], i), |a, v| f(a, byte(v, i)))
            })
            .collect()
    };
    let dests: Vec<String> = (0..4).map(|i| format!("bo:dest:{i}")).collect();
    for (dest, (how, want)) in dests.iter().zip([
        ("AND", fold(|a, b| a & b)),
        ("OR", fold(|a, b| a | b)),
        ("XOR", fold(|a, b| a ^ b)),
    ]) {
        let n: usize = redis::cmd("BITOP")
            .arg(how)
            .arg(dest)
            .arg(&srcs)
            .query(&mut w)
            .unwrap();
        assert_eq!(n, len, "BITOP {how}");
        for node in [0, 1] {
            let got: Vec<u8> = redis::cmd("GET")
                .arg(dest)
                .query(&mut c.conn(node))
                .unwrap();
            assert_eq!(got, want, "BITOP {how} read through node {node}");
        }
    }
    let not = &dests[3];
    let n: usize = redis::cmd("BITOP")
        .arg("NOT")
        .arg(not)
        .arg(&srcs[5])
        .query(&mut w)
        .unwrap();
    assert_eq!(n, values[5].len());
    let inverted: Vec<u8> = values[5].iter().map(|b| !b).collect();
    let got: Vec<u8> = redis::cmd("GET").arg(not).query(&mut c.conn(1)).unwrap();
    assert_eq!(got, inverted, "BITOP NOT");
    // A hash among the sources: WRONGTYPE, and the destination unchanged.
    let _: () = redis::cmd("HSET")
        .arg("bo:h")
        .arg("f")
        .arg("v")
        .query(&mut w)
        .unwrap();
    let refused: redis::RedisResult<usize> = redis::cmd("BITOP")
        .arg("OR")
        .arg(not)
        .arg(&srcs[0])
        .arg("bo:h")
        .query(&mut w);
    assert!(refused.is_err_and(|e| e.code() == Some("WRONGTYPE")));
    let got: Vec<u8> = redis::cmd("GET").arg(not).query(&mut c.conn(0)).unwrap();
    assert_eq!(got, inverted, "a refused BITOP writes nothing");
}

/// Each list of `lists` through node `i`, retrying while its view settles.
fn lranges(c: &Cluster, i: usize, lists: &[String]) -> Vec<Vec<String>> {
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        let mut pipe = redis::pipe();
        for l in lists {
            pipe.cmd("LRANGE").arg(l).arg(0).arg(-1);
        }
        match pipe.query::<Vec<Vec<String>>>(&mut c.conn(i)) {
            Ok(v) => return v,
            Err(e) if std::time::Instant::now() < deadline => {
                eprintln!("LRANGE through node {i}: {e}; again");
                std::thread::sleep(Duration::from_millis(300));
            }
            Err(e) => panic!("LRANGE through node {i}: {e}"),
        }
    }
}

/// A transaction record that only a dead node logged (it died before
/// shipping it to the other replicas) is not the region's word: the
/// region, finding the transaction's holds orphaned and no record, decides
/// it aborted, and writes on. When the node comes back, its log's record
/// must not put the transaction's writes back (it did: recovery restored
/// every committed record's writes at once — an element appeared in the
/// middle of lists that had moved on, the open issue-12 sighting).
#[test]
fn a_record_only_a_dead_node_logged_does_not_come_back_with_it() {
    let _one = one_at_a_time();
    let mut c = three_nodes();
    let lists: Vec<String> = (0..6).map(|i| format!("rec:{i}")).collect();
    // Node 0 coordinates; it dies right after logging a record of which it
    // is the primary (a third of the transactions), before shipping it.
    c.fault(0, "CRASH-AFTER-RECORD");
    let mut con = c.conn(0);
    let mut in_doubt = None;
    for i in 0..300 {
        let mut pipe = redis::pipe();
        pipe.atomic();
        for l in &lists {
            pipe.cmd("RPUSH").arg(l).arg(i);
        }
        if pipe.query::<Vec<i64>>(&mut con).is_err() {
            in_doubt = Some(i);
            break;
        }
    }
    let i = in_doubt.expect("node 0 never logged a record it is the primary of");
    c.kill9(0); // reaps it: it died at the fault
    let before: Vec<String> = (0..i).map(|n| n.to_string()).collect();
    // The other nodes' resolvers find the holds orphaned (after 3 s), read
    // no record — it never left node 0 — and record the transaction
    // aborted: its element is nowhere.
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        let got = lranges(&c, 1, &lists);
        if got.iter().all(|l| *l == before) {
            break;
        }
        assert!(
            got.iter()
                .all(|l| l.len() <= before.len() + 1 && l[..before.len()] == before[..]),
            "{got:?}"
        );
        assert!(
            std::time::Instant::now() < deadline,
            "the in-doubt transaction {i} was not settled aborted: {got:?}"
        );
        std::thread::sleep(Duration::from_millis(300));
    }
    let mut con1 = c.conn(1);
    for l in &lists {
        let _: i64 = redis::cmd("RPUSH")
            .arg(l)
            .arg("after")
            .query(&mut con1)
            .expect("RPUSH");
    }
    c.restart(0);
    c.wait_caught_up(&[0, 1, 2], Duration::from_secs(60));
    c.wait_same_digest(&[0, 1, 2], Duration::from_secs(60));
    let mut want = before.clone();
    want.push("after".into());
    for n in 0..3 {
        let got = lranges(&c, n, &lists);
        assert!(
            got.iter().all(|l| *l == want),
            "through node {n}, after node 0 came back: {got:?} (want every list {want:?})"
        );
    }
}

/// A lone write its primary logged and died before shipping was never
/// acknowledged and never seen; the region moves on without it. When the
/// node comes back, the write may stay lost or land late — after what the
/// region wrote meanwhile — but never before it: a list must not grow an
/// element in its middle, behind an element a reader saw appended to a
/// list without it. (It did: recovery replayed the write from the node's
/// log; now what the replicas never confirmed is left out.)
#[test]
fn a_write_only_a_dead_node_logged_does_not_come_back_before_later_ones() {
    let _one = one_at_a_time();
    let mut c = three_nodes();
    let key = write_one_node_keeps(&mut c, "CRASH-BEFORE-SHIP");
    c.kill9(0); // reaps it: it died at the fault
    region_moves_on(&c, &key);
    c.restart(0);
    the_write_is_not_in_the_middle(&c, &key);
}

/// The same with a pause: the primary stops right after logging the write
/// and wakes once the region has moved on. Its replicas refuse the write
/// (they declared it dead); it then restarts in place so its recovery
/// leaves the write out — it kept it in memory and spread it by
/// anti-entropy, into the middle of the list.
#[test]
fn a_write_only_a_paused_node_logged_does_not_come_back_before_later_ones() {
    let _one = one_at_a_time();
    let mut c = three_nodes();
    let key = write_one_node_keeps(&mut c, "PAUSE-BEFORE-SHIP");
    region_moves_on(&c, &key);
    c.resume(0);
    // Its replicas refuse the batch; it restarts in place (same PID).
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while !c.log_tail(0, 100).contains("restarting in place") {
        assert!(
            std::time::Instant::now() < deadline,
            "node 0 did not restart: {}",
            c.log_tail(0, 30)
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let url = format!("redis://127.0.0.1:{}/", c.port(0));
    while redis::Client::open(url.as_str())
        .and_then(|cl| cl.get_connection())
        .and_then(|mut con| redis::cmd("PING").query::<String>(&mut con))
        .is_err()
    {
        assert!(std::time::Instant::now() < deadline, "node 0 is not back");
        std::thread::sleep(Duration::from_millis(100));
    }
    the_write_is_not_in_the_middle(&c, &key);
}

/// A write its primary shipped to one replica only before it died: the
/// replica that takes the key over (not that one) must have it before it
/// serves the key — or a reader sees the list without it, the region
/// appends after it, and the replica that had it brings it back in the
/// middle (the region fault run's sighting of 2026-11-27:
/// `[…,25,27]` read, then `[…,25,26,27]`). Whatever a reader saw after the
/// takeover must stay the list's head.
#[test]
fn a_write_only_some_replicas_got_is_on_the_next_primary_before_it_serves() {
    takeover_keeps_what_one_replica_got(false);
}

/// The same when the primary is back at once: its peers route around it
/// while it catches up (it answers that it serves nothing), before their
/// view says it is catching up — the replica acting for it must take the
/// key over first too.
#[test]
fn a_write_only_some_replicas_got_is_on_a_stand_in_primary_before_it_serves() {
    takeover_keeps_what_one_replica_got(true);
}

fn takeover_keeps_what_one_replica_got(back_at_once: bool) {
    let _one = one_at_a_time();
    let mut c = three_nodes();
    // Without periodic anti-entropy between them, the replica that got
    // the write does not repair the other before the takeover (with it,
    // it mostly does in the seconds the failure detector takes).
    c.fault(1, "PAUSE-REPAIR");
    c.fault(2, "PAUSE-REPAIR");
    let key = write_one_node_keeps(&mut c, "CRASH-AFTER-SHIP-TO-ONE");
    c.kill9(0); // reaps it: it died once one replica had the write
    if back_at_once {
        c.restart(0);
    }
    let seen = lranges(&c, 1, std::slice::from_ref(&key)).remove(0);
    eprintln!("read after the takeover: {seen:?}");
    let _: i64 = redis::cmd("RPUSH")
        .arg(&key)
        .arg("after")
        .query(&mut c.conn(1))
        .expect("RPUSH after");
    c.fault(1, "HEAL");
    c.fault(2, "HEAL");
    if !back_at_once {
        c.restart(0);
    }
    c.wait_caught_up(&[0, 1, 2], Duration::from_secs(60));
    c.wait_same_digest(&[0, 1, 2], Duration::from_secs(60));
    let mut want = seen.clone();
    want.push("after".to_string());
    for n in 0..3 {
        let got = lranges(&c, n, std::slice::from_ref(&key)).remove(0);
        assert_eq!(
            got, want,
            "through node {n}: read {seen:?} after the takeover"
        );
    }
    // The replica that got the write survived: it is not lost either.
    assert!(seen.iter().any(|v| v == "lost"), "{seen:?}");
}

/// Appends "first" to many lists, then arms `fault` on node 0 and appends
/// "lost" to them through it until one is a list node 0 is the primary
/// of: that append is logged on node 0 only. Answers that list.
fn write_one_node_keeps(c: &mut Cluster, fault: &str) -> String {
    let mut con1 = c.conn(1);
    for k in 0..300 {
        let _: i64 = redis::cmd("RPUSH")
            .arg(format!("gen:{k}"))
            .arg("first")
            .query(&mut con1)
            .unwrap_or_else(|e| {
                let logs: Vec<String> = (0..3).map(|n| c.log_tail(n, 30)).collect();
                panic!("RPUSH through node 1: {e}\n{}", logs.join("\n"))
            });
    }
    c.wait_same_digest(&[0, 1, 2], Duration::from_secs(60));
    c.fault(0, &format!("{fault} gen:"));
    let mut con = c.conn(0);
    con.set_read_timeout(Some(Duration::from_secs(3))).unwrap();
    (0..300)
        .map(|k| format!("gen:{k}"))
        .find(|key| {
            redis::cmd("RPUSH")
                .arg(key)
                .arg("lost")
                .query::<i64>(&mut con)
                .is_err()
        })
        .expect("node 0 never logged a write it is the primary of")
}

/// Waits until node 1 serves `key` without the lost write, then appends
/// "after" through it.
fn region_moves_on(c: &Cluster, key: &str) {
    let list = |n: usize| lranges(c, n, &[key.to_string()]).remove(0);
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while list(1) != ["first"] {
        assert!(std::time::Instant::now() < deadline, "{:?}", list(1));
        std::thread::sleep(Duration::from_millis(300));
    }
    let _: i64 = redis::cmd("RPUSH")
        .arg(key)
        .arg("after")
        .query(&mut c.conn(1))
        .expect("RPUSH after");
}

/// Once node 0 is back and the region converged, every node has the lost
/// write nowhere, or after "after".
fn the_write_is_not_in_the_middle(c: &Cluster, key: &str) {
    c.wait_caught_up(&[0, 1, 2], Duration::from_secs(60));
    c.wait_same_digest(&[0, 1, 2], Duration::from_secs(60));
    for n in 0..3 {
        let got = lranges(c, n, &[key.to_string()]).remove(0);
        assert!(
            got == ["first", "after"] || got == ["first", "after", "lost"],
            "through node {n}: {got:?}"
        );
    }
}

/// A node with no other node in its region (replication factor 2, one node
/// per region, cut off from the other region) ships its commits to
/// nobody: its log alone keeps them, so none may be left out as
/// unconfirmed after `kill -9` — every acknowledged write is back.
#[test]
fn a_node_alone_in_its_region_loses_nothing_acknowledged_to_kill9() {
    let _one = one_at_a_time();
    let mut c = Cluster::start(
        &["r0", "r1"],
        &["--replication-factor", "2", "--appendfsync", "always"],
    );
    c.fault(0, "ISOLATE");
    let mut con = c.conn(0);
    for i in 0..500 {
        let n: i64 = redis::cmd("RPUSH")
            .arg("alone")
            .arg(i)
            .query(&mut con)
            .expect("RPUSH");
        assert_eq!(n, i + 1);
    }
    c.kill9(0);
    c.restart(0);
    let got: Vec<String> = c.query_retrying(0, redis::cmd("LRANGE").arg("alone").arg(0).arg(-1));
    let want: Vec<String> = (0..500).map(|i| i.to_string()).collect();
    assert!(
        got == want,
        "{} of 500 acknowledged elements back; missing from {:?}",
        got.len(),
        want.iter().find(|w| !got.contains(w))
    );
}

/// A snapshot in a region holds only confirmed writes: SAVE right after a
/// stream of writes acknowledged at level `local` (not waiting for the
/// replicas) answers once the replicas have them, and after kill -9 the
/// node recovers every write from snapshot and log.
#[test]
fn a_snapshot_in_a_region_waits_for_its_writes_to_be_confirmed() {
    let _one = one_at_a_time();
    let mut c = three_nodes();
    let mut con = c.conn(0);
    let _: () = redis::cmd("ACK")
        .arg("local")
        .query(&mut con)
        .expect("ACK local");
    let mut pipe = redis::pipe();
    for i in 0..300 {
        pipe.cmd("RPUSH").arg("snap:l").arg(i).ignore();
    }
    let _: () = pipe.query(&mut con).expect("RPUSH");
    let saved: String = redis::cmd("SAVE").query(&mut con).expect("SAVE");
    assert_eq!(saved, "OK");
    c.kill9(0);
    c.restart(0);
    let got: Vec<String> = c.query_retrying(0, redis::cmd("LRANGE").arg("snap:l").arg(0).arg(-1));
    assert_eq!(got.len(), 300, "{got:?}");
}

/// As [`a_participant_dying_after_the_decision_loses_no_part_of_the_commit`],
/// with the participant paused (SIGSTOP) instead of killed: the
/// coordinator installs its part on the replica that took its keys over,
/// and every part is readable through either live node as soon as the
/// commit is answered, before the paused node wakes up.
#[test]
fn a_participant_paused_after_the_decision_loses_no_part_of_the_commit() {
    let _one = one_at_a_time();
    let c = three_nodes();
    let ks = keys();
    mset(&mut c.conn(0), &ks, "0").expect("setup");
    c.fault(1, "DROP-INSTALLS");
    let commit = mset_from_thread(c.port(0), &ks, "1");
    std::thread::sleep(Duration::from_millis(800));
    c.pause(1);
    let answer = commit.join().unwrap();
    let t = std::time::Instant::now();
    assert!(answer.is_ok(), "MSET answered {answer:?}");
    let mut seen = Vec::new();
    for i in [0, 2, 0, 2] {
        let got = read_all(&c, i, &ks);
        seen.push((i, t.elapsed(), got.clone()));
    }
    c.resume(1);
    for (i, at, got) in &seen {
        assert!(
            got.iter().all(|v| v.as_deref() == Some("1")),
            "through node {i}, {at:?} after the answer: {got:?}"
        );
    }
    // The paused node wakes up holding its part uninstalled: it catches
    // up, and serves the commit too.
    c.fault(1, "HEAL");
    c.wait_caught_up(&[0, 1, 2], Duration::from_secs(60));
    let got = read_all(&c, 1, &ks);
    assert!(got.iter().all(|v| v.as_deref() == Some("1")), "{got:?}");
}

/// The node serving `key` for node `via`'s clients (by `CLUSTER SLOTS`'
/// port), as a cluster index.
pub(crate) fn owner(c: &Cluster, via: usize, key: &str) -> usize {
    let mut con = c.conn(via);
    let slot: u16 = redis::cmd("CLUSTER")
        .arg("KEYSLOT")
        .arg(key)
        .query(&mut con)
        .unwrap();
    let port = slot_owner_port(&cluster_slots(&mut con), slot);
    (0..c.len())
        .find(|&i| c.port(i) == port)
        .expect("a node's port")
}

/// `MULTI; RPUSH a x; RPUSH b y; EXEC` through the node on `port`, on a
/// thread of its own (the tests pause or restart nodes meanwhile); EXEC's
/// answer at join.
fn two_appends_from_thread(
    port: u16,
    a: &str,
    b: &str,
) -> std::thread::JoinHandle<redis::RedisResult<redis::Value>> {
    let (a, b) = (a.to_string(), b.to_string());
    std::thread::spawn(move || {
        let client = redis::Client::open(format!("redis://127.0.0.1:{port}/")).unwrap();
        let mut con = client.get_connection().unwrap();
        con.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
        let _: () = redis::cmd("MULTI").query(&mut con).unwrap();
        let _: () = redis::cmd("RPUSH")
            .arg(&a)
            .arg("x")
            .query(&mut con)
            .unwrap();
        let _: () = redis::cmd("RPUSH")
            .arg(&b)
            .arg("y")
            .query(&mut con)
            .unwrap();
        redis::cmd("EXEC").query(&mut con)
    })
}

/// `RPUSH key v`, which must succeed.
fn rpush(con: &mut redis::Connection, key: &str, v: &str) -> i64 {
    redis::cmd("RPUSH")
        .arg(key)
        .arg(v)
        .query(con)
        .unwrap_or_else(|e| panic!("RPUSH {v}: {e}"))
}

/// The whole list at `key`.
fn lrange(con: &mut redis::Connection, key: &str) -> Vec<String> {
    redis::cmd("LRANGE")
        .arg(key)
        .arg(0)
        .arg(-1)
        .query(con)
        .unwrap()
}

/// A participant's keys moving to another shard between the prepare and
/// the decision: node 0 coordinates `MULTI; RPUSH a x; RPUSH b y; EXEC`
/// with `a` on node 1 and `b` on node 2. Node 1 answers its prepare and
/// is paused; node 2's answers come 5 s late (`DELAY-ANSWERS`), after
/// node 0 declared node 1 dead and gave `a` to another replica, which
/// was `a`'s route, not a backup, so the shadows skipped it. Before the
/// fix node 0 decided anyway: the install at `a`'s new primary found no
/// hold (the EXEC answered an error) while it served `a`, and a backup's
/// resolver later put `x` in front of an append made after that answer —
/// the region fault run's element in the middle of a list. Now nothing
/// is decided on a view that moved a participant's keys: the commit is
/// prepared again, and every read of `a` is a prefix of the final list.
#[test]
fn a_participant_whose_keys_moved_before_the_decision_is_prepared_again() {
    let _one = one_at_a_time();
    let c = three_nodes();
    let pick = |node: usize| {
        (0..500)
            .map(|i| format!("mv:{i}"))
            .find(|k| owner(&c, 0, k) == node)
            .expect("a key on the node")
    };
    let (a, b) = (pick(1), pick(2));
    for k in [&a, &b] {
        rpush(&mut c.conn(0), k, "0");
    }
    c.wait_same_digest(&[0, 1, 2], Duration::from_secs(60));
    c.fault(2, "DELAY-ANSWERS 2500 PREPARES");
    let port = c.port(0);
    let exec = two_appends_from_thread(port, &a, &b);
    std::thread::sleep(Duration::from_millis(150));
    c.pause(1);
    c.wait_members(&[0], 2, Duration::from_secs(30));
    let mut con = c.conn(0);
    let mut seen: Vec<Vec<String>> = Vec::new();
    rpush(&mut con, &a, "w1");
    let answer = exec.join().unwrap();
    rpush(&mut con, &a, "w2");
    seen.push(lrange(&mut con, &a));
    c.resume(1);
    c.fault(2, "HEAL");
    c.wait_caught_up(&[0, 1, 2], Duration::from_secs(60));
    // Resolvers of orphaned holds act after a few seconds.
    std::thread::sleep(Duration::from_secs(8));
    c.wait_same_digest(&[0, 1, 2], Duration::from_secs(60));
    let last = lrange(&mut c.conn(0), &a);
    for s in &seen {
        assert!(
            last.starts_with(s),
            "read {s:?}, later {last:?} (EXEC: {answer:?})"
        );
    }
    let bl = lrange(&mut c.conn(0), &b);
    // All or nothing; all when acknowledged. (It is acknowledged here: the
    // second attempt prepares on the current view. On a loaded machine a
    // resolver may abort that one too, if node 2's late vote outlasts
    // `ORPHAN_AFTER`: then nothing is applied, and the error says so.)
    let applied = last.contains(&"x".to_string());
    assert_eq!(applied, bl == ["0", "y"], "{a} is {last:?}, {b} is {bl:?}");
    match &answer {
        Ok(redis::Value::Array(r)) if r.len() == 2 => assert!(applied, "{last:?}"),
        other => assert!(
            !applied && format!("{other:?}").contains("try again"),
            "EXEC answered {other:?}; {a} is {last:?}"
        ),
    }
    println!("EXEC answered {answer:?}; {a} is {last:?}");
}

/// The same move the other way: a restarted node's slot handed back
/// between a commit's prepare and its decision. Written after the region
/// fault run once showed an append in the middle of a list around a
/// hand-back (before the fix above); it is coverage, not that failure's
/// reproduction: it also passed with the check above forced off (twice:
/// once committed, the hold the hand-back carried keeping `w1` behind
/// `x`, once refused with TRYAGAIN). Node 1 is killed; the node standing in for `a`'s slot coordinates
/// `MULTI; RPUSH a x; RPUSH b y; EXEC` with `b` on the third node, whose
/// vote comes late (`DELAY-ANSWERS`). Meanwhile node 1 restarts and the
/// stand-in hands `a`'s slot back to it, with the commit's hold. Appends
/// to `a` go through the stand-in around the EXEC's answer; every read of
/// `a` must be a prefix of the final list, and the commit all or nothing.
#[test]
fn a_slot_handed_back_before_the_decision_leaves_no_element_in_the_middle() {
    let _one = one_at_a_time();
    let mut c = three_nodes();
    let a = (0..500)
        .map(|i| format!("hb:{i}"))
        .find(|k| owner(&c, 0, k) == 1)
        .expect("a key on node 1");
    rpush(&mut c.conn(0), &a, "0");
    c.wait_same_digest(&[0, 1, 2], Duration::from_secs(60));
    c.kill9(1);
    c.wait_members(&[0, 2], 2, Duration::from_secs(30));
    // The stand-in for `a` coordinates; `b` lives on the other live node,
    // whose answers to prepares are delayed.
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    let s = loop {
        match owner(&c, 0, &a) {
            1 if std::time::Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(200))
            }
            1 => panic!("no node took {a} over"),
            s => break s,
        }
    };
    let other = if s == 0 { 2 } else { 0 };
    let b = (0..500)
        .map(|i| format!("hb:b{i}"))
        .find(|k| owner(&c, s, k) == other)
        .expect("a key on the other node");
    rpush(&mut c.conn(s), &b, "0");
    c.fault(other, "DELAY-ANSWERS 8000 PREPARES");
    let port = c.port(s);
    let exec = two_appends_from_thread(port, &a, &b);
    std::thread::sleep(Duration::from_millis(300));
    c.restart(1);
    // The hand-back: `a` is node 1's again in the stand-in's view.
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while owner(&c, s, &a) != 1 {
        assert!(
            std::time::Instant::now() < deadline,
            "{a} not handed back to node 1"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let handed_back_before_exec = !exec.is_finished();
    let mut con = c.conn(s);
    // An append waits behind the commit's hold until its decision, which
    // the delayed prepare answers (8 s) hold back: more than the usual
    // 10 s on a loaded machine (CI, 2026-12-02: a read timeout).
    con.set_read_timeout(Some(Duration::from_secs(40)))
        .expect("read timeout");
    let mut seen: Vec<Vec<String>> = Vec::new();
    rpush(&mut con, &a, "w1");
    seen.push(lrange(&mut con, &a));
    let answer = exec.join().unwrap();
    rpush(&mut con, &a, "w2");
    seen.push(lrange(&mut con, &a));
    c.fault(other, "HEAL");
    c.wait_caught_up(&[0, 1, 2], Duration::from_secs(60));
    // Resolvers of orphaned holds act after a few seconds.
    std::thread::sleep(Duration::from_secs(8));
    c.wait_same_digest(&[0, 1, 2], Duration::from_secs(60));
    let last = lrange(&mut c.conn(s), &a);
    for r in &seen {
        assert!(
            last.starts_with(r),
            "read {r:?}, later {last:?} (EXEC: {answer:?})"
        );
    }
    let bl = lrange(&mut c.conn(s), &b);
    let applied = last.contains(&"x".to_string());
    assert_eq!(applied, bl == ["0", "y"], "{a} is {last:?}, {b} is {bl:?}");
    if let Ok(redis::Value::Array(r)) = &answer {
        assert!(
            r.len() != 2 || applied,
            "EXEC answered {r:?}; {a} is {last:?}"
        );
    }
    println!(
        "handed back while the EXEC waited: {handed_back_before_exec}; EXEC answered {answer:?}; {a} is {last:?}"
    );
}

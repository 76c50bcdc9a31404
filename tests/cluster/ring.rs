//! A node killed with `kill -9` leaves the ring of its region, and comes
//! back into it when restarted, without losing or hiding any write.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use redis::Value;

use crate::common::cluster::Cluster;
use crate::{get_all, one_at_a_time, try_get_all};

/// `SET` of every pair, pipelined; panics unless every answer is OK.
fn set_all(con: &mut redis::Connection, pairs: &BTreeMap<String, String>, what: &str) {
    let mut pipe = redis::pipe();
    for (k, v) in pairs {
        pipe.cmd("SET").arg(k).arg(v);
    }
    let answers: Vec<Value> = pipe
        .query(con)
        .unwrap_or_else(|e| panic!("{what}: pipelined SETs failed: {e}"));
    for ((k, _), a) in pairs.iter().zip(&answers) {
        assert!(
            matches!(a, Value::Okay) || matches!(a, Value::SimpleString(s) if s == "OK"),
            "{what}: SET {k} answered {a:?}"
        );
    }
}

/// Keys (with what each node read) whose value on node `i` is not `want`.
fn mismatches(
    c: &Cluster,
    nodes: &[usize],
    want: &BTreeMap<String, String>,
) -> Vec<(usize, String, Option<String>)> {
    let keys: Vec<String> = want.keys().cloned().collect();
    let mut bad = Vec::new();
    for &i in nodes {
        let seen = get_all(&mut c.conn(i), &keys);
        for (k, v) in keys.iter().zip(seen) {
            if v.as_deref() != Some(want[k].as_str()) {
                bad.push((i, k.clone(), v));
            }
        }
    }
    bad
}

#[test]
fn a_dead_node_leaves_the_ring_and_rejoins() {
    let _one = one_at_a_time();
    let started = Instant::now();
    let mut c = Cluster::start(
        &["r0", "r0", "r0"],
        &["--replication-factor", "2", "--appendfsync", "always"],
    );
    let (victim, survivors) = (1, [0usize, 2]);

    // Written through node 0 (forwarded to each key's primary), and
    // replicated to each key's second replica before the crash.
    let mut want: BTreeMap<String, String> = (0..150)
        .map(|i| (format!("a:{i}"), format!("before-{i}")))
        .collect();
    let mut con = c.conn(0);
    set_all(&mut con, &want, "before the crash");
    let merged: i64 = redis::cmd("WAITREGION")
        .arg("r0")
        .arg(10_000)
        .query(&mut con)
        .expect("WAITREGION r0");
    assert_eq!(
        merged, 1,
        "WAITREGION r0 10000 answered 0 with all nodes up"
    );
    drop(con);

    c.kill9(victim);
    let left = c.wait_members(&survivors, 2, Duration::from_secs(30));
    println!(
        "[ring] node {} killed; both survivors list 2 members after {left:.1?}",
        victim + 1
    );

    // Nothing acknowledged (and merged) before the crash is gone.
    let lost = mismatches(&c, &survivors, &want);
    assert!(
        lost.is_empty(),
        "{} reads on the survivors miss writes acknowledged before the crash (node, key, read; first 10): {:?}",
        lost.len(),
        &lost[..lost.len().min(10)]
    );

    // The two survivors take new writes and overwrites.
    let during: BTreeMap<String, String> = (0..150)
        .filter(|i| i % 3 == 0)
        .map(|i| (format!("a:{i}"), format!("during-{i}")))
        .chain((0..100).map(|i| (format!("b:{i}"), format!("during-{i}"))))
        .collect();
    set_all(&mut c.conn(2), &during, "with a node down");
    want.extend(during);
    let missing = mismatches(&c, &survivors, &want);
    assert!(
        missing.is_empty(),
        "writes acknowledged with a node down do not read back (node, key, read; first 10): {:?}",
        &missing[..missing.len().min(10)]
    );

    // Back on the same ports and data: in the ring again, and every node
    // answers every key's latest value (the restarted node's replicas are
    // repaired by anti-entropy).
    c.restart(victim);
    let all = [0usize, 1, 2];
    let rejoined = c.wait_members(&all, 3, Duration::from_secs(30));
    // A restarted node is no slot's primary until it has caught up, so no
    // read through any node may be stale, even right after the rejoin.
    let first_stale = mismatches(&c, &all, &want);
    assert!(
        first_stale.is_empty(),
        "right after node {} rejoined, {} reads are stale (node, key, read; first 10): {:?}",
        victim + 1,
        first_stale.len(),
        &first_stale[..first_stale.len().min(10)]
    );
    let caught_up = c.wait_caught_up(&all, Duration::from_secs(30));
    let stale = mismatches(&c, &all, &want);
    assert!(
        stale.is_empty(),
        "after node {} caught up, {} reads are not the latest write (node, key, read; first 10): {:?}",
        victim + 1,
        stale.len(),
        &stale[..stale.len().min(10)]
    );
    // The two survivors were the only replicas of every key while the node
    // was down, so both hold every key: the same digest. (The restarted
    // node holds only the slots it replicates, about 2/3 of the keys with
    // rf 2 over 3 nodes, so its digest differs by design.)
    c.wait_same_digest(&survivors, Duration::from_secs(20));
    let digests: Vec<(String, i64)> = all.iter().map(|&i| c.digest(i)).collect();
    assert_eq!(
        digests[0].1 as usize,
        want.len(),
        "the survivors should hold every key written: {digests:?}"
    );
    println!(
        "[ring] restarted: 3 members after {rejoined:.1?}, caught up {caught_up:.1?} later; \
         no stale read of {}; digests {digests:?}; whole test {:.1?}",
        want.len() * 3,
        started.elapsed()
    );
}

/// `INCR` of every key, pipelined; the answers.
fn incr_all(con: &mut redis::Connection, keys: &[String]) -> Vec<i64> {
    let mut pipe = redis::pipe();
    for k in keys {
        pipe.cmd("INCR").arg(k);
    }
    pipe.query(con).expect("pipelined INCRs")
}

/// A restarted node must not serve its slots from data older than what
/// the region acknowledged while it was down. Counters are set to 0, the
/// node is killed, every counter is incremented (acknowledged, and merged
/// by both survivors), the node restarts; right after it is back in the
/// ring, every node must read 1 everywhere, and one more `INCR` must
/// answer 2 — and leave 2 once everything has converged. (Until it has
/// caught up by anti-entropy, the restarted node is a replica but no
/// slot's primary.)
#[test]
fn a_rejoining_node_serves_no_stale_data() {
    let _one = one_at_a_time();
    let mut c = Cluster::start(
        &["r0", "r0", "r0"],
        &["--replication-factor", "2", "--appendfsync", "always"],
    );
    let victim = 1;
    let keys: Vec<String> = (0..60).map(|i| format!("n:{i}")).collect();
    let zero: BTreeMap<String, String> = keys.iter().map(|k| (k.clone(), "0".into())).collect();
    let mut con = c.conn(0);
    set_all(&mut con, &zero, "setup");
    let merged: i64 = redis::cmd("WAITREGION")
        .arg("r0")
        .arg(10_000)
        .query(&mut con)
        .expect("WAITREGION");
    assert_eq!(merged, 1, "WAITREGION r0 answered 0 with all nodes up");

    c.kill9(victim);
    c.wait_members(&[0, 2], 2, Duration::from_secs(30));
    let mut con = c.conn(2);
    let first = incr_all(&mut con, &keys);
    assert!(
        first.iter().all(|&v| v == 1),
        "INCR with a node down: {first:?}"
    );
    let merged: i64 = redis::cmd("WAITREGION")
        .arg("r0")
        .arg(10_000)
        .query(&mut con)
        .expect("WAITREGION");
    assert_eq!(merged, 1, "WAITREGION r0 answered 0 on the two survivors");

    c.restart(victim);
    c.wait_members(&[0, 1, 2], 3, Duration::from_secs(30));
    let mut stale = Vec::new();
    for i in 0..3 {
        for (k, v) in keys.iter().zip(get_all(&mut c.conn(i), &keys)) {
            if v.as_deref() != Some("1") {
                stale.push(format!("node {}: {k} = {v:?}", i + 1));
            }
        }
    }
    let second = incr_all(&mut c.conn(0), &keys);
    let wrong_incr: Vec<String> = keys
        .iter()
        .zip(&second)
        .filter(|(_, &v)| v != 2)
        .map(|(k, v)| format!("{k}: INCR answered {v}"))
        .collect();
    // The restarted node leaves the catching-up state (and is primary
    // again); let anti-entropy finish, then read the outcome on every node.
    c.wait_caught_up(&[0, 1, 2], Duration::from_secs(30));
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    let lost = loop {
        let reads: Vec<Vec<Option<String>>> =
            (0..3).map(|i| get_all(&mut c.conn(i), &keys)).collect();
        let agree = reads.windows(2).all(|w| w[0] == w[1]);
        if agree || std::time::Instant::now() > deadline {
            break keys
                .iter()
                .zip(&reads[0])
                .filter(|(_, v)| v.as_deref() != Some("2"))
                .map(|(k, v)| format!("{k} = {v:?}"))
                .collect::<Vec<_>>();
        }
        std::thread::sleep(Duration::from_millis(300));
    };
    assert!(
        stale.is_empty() && wrong_incr.is_empty() && lost.is_empty(),
        "right after node {} rejoined: {} stale reads (e.g. {:?}); {} INCRs computed from stale data \
         (e.g. {:?}); after convergence {} of {} counters lost an acknowledged increment (e.g. {:?})",
        victim + 1,
        stale.len(),
        &stale[..stale.len().min(3)],
        wrong_incr.len(),
        &wrong_incr[..wrong_incr.len().min(3)],
        lost.len(),
        keys.len(),
        &lost[..lost.len().min(3)]
    );
}

/// Per counter: increments acknowledged, and increments whose outcome is
/// unknown (an error or a dropped connection after sending).
#[derive(Default, Clone, Copy, Debug)]
struct Tally {
    acked: i64,
    unknown: i64,
}

/// Until `stop`: `INCR` of a random counter, over a connection to `port`
/// (reconnecting after errors); the tally per counter.
fn incr_loop(
    port: u16,
    keys: Vec<String>,
    seed: u64,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    acked: std::sync::Arc<std::sync::atomic::AtomicUsize>,
) -> Vec<Tally> {
    use std::sync::atomic::Ordering;
    let mut tally = vec![Tally::default(); keys.len()];
    let mut x = seed | 1;
    let mut con: Option<redis::Connection> = None;
    while !stop.load(Ordering::Relaxed) {
        let Some(c) = con.as_mut() else {
            con = crate::connect(port, Duration::from_secs(2)).ok();
            if con.is_none() {
                std::thread::sleep(Duration::from_millis(50));
            }
            continue;
        };
        // xorshift: cheap, reproducible key choice.
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let i = (x % keys.len() as u64) as usize;
        match redis::cmd("INCR").arg(&keys[i]).query::<i64>(c) {
            Ok(_) => {
                tally[i].acked += 1;
                acked.fetch_add(1, Ordering::Relaxed);
            }
            Err(e) => {
                tally[i].unknown += 1;
                if e.is_io_error() || e.is_connection_dropped() || e.is_timeout() {
                    con = None;
                }
                std::thread::sleep(Duration::from_millis(5));
            }
        }
    }
    tally
}

/// The counters' values, read on nodes 0 and 2 until both agree (reads go
/// to each counter's primary; the last merge epochs must land first).
fn settled_counters(c: &Cluster, keys: &[String]) -> Vec<Option<String>> {
    // A key still held by a commit whose install is delayed 9 s answers
    // TRYAGAIN once a read waited 10 s for it (CI, 54 cluster tests on two
    // cores): asked again, as Redis Cluster clients do.
    let get = |i: usize| match try_get_all(&mut c.conn(i), keys) {
        Ok(v) => Some(v),
        Err(e) if e.kind() == redis::ErrorKind::TryAgain => None,
        Err(e) => panic!("pipelined GETs: {e}"),
    };
    loop {
        std::thread::sleep(Duration::from_secs(1));
        let Some(a) = get(0) else { continue };
        std::thread::sleep(Duration::from_millis(500));
        if get(2).is_some_and(|b| a == b) {
            return a;
        }
    }
}

/// The counters whose final value is not explained by the increments
/// acknowledged (plus those whose answer was lost).
fn miscounted(keys: &[String], total: &[Tally], finals: &[Option<String>]) -> Vec<String> {
    let mut wrong = Vec::new();
    for ((k, t), v) in keys.iter().zip(total).zip(finals) {
        let v: i64 = v.as_deref().and_then(|v| v.parse().ok()).unwrap_or(-1);
        if v < t.acked || v > t.acked + t.unknown {
            wrong.push(format!(
                "{k} = {v}, acknowledged {} (+{} unknown)",
                t.acked, t.unknown
            ));
        }
    }
    wrong
}

/// Sixteen pairs of counters, `{prefix}:{i}:a` and `{prefix}:{i}:b`, and
/// all their keys.
fn counter_pairs(prefix: &str) -> (Vec<(String, String)>, Vec<String>) {
    let pairs: Vec<(String, String)> = (0..16)
        .map(|i| (format!("{prefix}:{i}:a"), format!("{prefix}:{i}:b")))
        .collect();
    let keys = pairs
        .iter()
        .flat_map(|(a, b)| [a.clone(), b.clone()])
        .collect();
    (pairs, keys)
}

type PairAnswer = redis::RedisResult<(i64, i64)>;

/// One `MULTI; INCR a; INCR b; EXEC` per pair, all at once, each over its
/// own connection to node `node_of(pair index)`.
fn spawn_pair_multis(
    c: &Cluster,
    pairs: &[(String, String)],
    node_of: impl Fn(usize) -> usize,
) -> Vec<std::thread::JoinHandle<PairAnswer>> {
    pairs
        .iter()
        .enumerate()
        .map(|(i, (a, b))| {
            let mut con = c.conn(node_of(i));
            // Its installs may be delayed past the usual 10 s.
            con.set_read_timeout(Some(Duration::from_secs(30)))
                .expect("read timeout");
            let (a, b) = (a.clone(), b.clone());
            std::thread::spawn(move || {
                redis::pipe()
                    .atomic()
                    .cmd("INCR")
                    .arg(&a)
                    .cmd("INCR")
                    .arg(&b)
                    .query::<(i64, i64)>(&mut con)
            })
        })
        .collect()
}

/// Joins the workers and sums their tallies per counter.
fn join_tallies(workers: Vec<std::thread::JoinHandle<Vec<Tally>>>, n: usize) -> Vec<Tally> {
    let mut total = vec![Tally::default(); n];
    for w in workers {
        for (t, w) in total.iter_mut().zip(w.join().expect("INCR worker")) {
            t.acked += w.acked;
            t.unknown += w.unknown;
        }
    }
    total
}

/// The primary role of a restarted node's slots moves back to it once it
/// has caught up. During that hand-back no two nodes may both act as a
/// slot's primary: clients on every node `INCR` a few hot counters without
/// pause while the node restarts, catches up and takes its slots back;
/// afterwards every counter must equal the increments acknowledged for it
/// (more only by increments whose answer was lost). Two primaries
/// validating at once would each add to a stale value: lost increments.
#[test]
fn hand_back_to_a_restarted_node_loses_no_increment() {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;
    let _one = one_at_a_time();
    let mut c = Cluster::start(
        &["r0", "r0", "r0"],
        &["--replication-factor", "2", "--appendfsync", "always"],
    );
    let victim = 1;
    let keys: Vec<String> = (0..16).map(|i| format!("hot:{i}")).collect();
    let zero: BTreeMap<String, String> = keys.iter().map(|k| (k.clone(), "0".into())).collect();
    set_all(&mut c.conn(0), &zero, "setup");
    c.kill9(victim);
    c.wait_members(&[0, 2], 2, Duration::from_secs(30));
    // Counters are written only from here on: a kill loses the victim's
    // last merge epoch (no synchronous replication inside a region), which
    // is not what this test is about.
    set_all(&mut c.conn(0), &zero, "reset after the kill");

    let stop = Arc::new(AtomicBool::new(false));
    let count = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let mut workers = Vec::new();
    for (n, node) in [0usize, 2, 0, 2].into_iter().enumerate() {
        let (port, keys, stop, count) = (c.port(node), keys.clone(), stop.clone(), count.clone());
        workers.push(std::thread::spawn(move || {
            incr_loop(port, keys, n as u64 + 7, stop, count)
        }));
    }
    c.restart(victim);
    for n in 0..2u64 {
        let (port, keys, stop, count) = (c.port(victim), keys.clone(), stop.clone(), count.clone());
        workers.push(std::thread::spawn(move || {
            incr_loop(port, keys, n + 101, stop, count)
        }));
    }
    c.wait_members(&[0, 1, 2], 3, Duration::from_secs(30));
    c.wait_caught_up(&[0, 1, 2], Duration::from_secs(30));
    // Past the hand-back on every node (membership gossip spreads `ready`
    // within a few hundred ms).
    std::thread::sleep(Duration::from_secs(2));
    // A loaded machine increments slower: go on until there are enough to
    // mean something (or a minute passed; the assert below then says so).
    let enough = Instant::now() + Duration::from_secs(60);
    while count.load(Ordering::Relaxed) <= 1000 && Instant::now() < enough {
        std::thread::sleep(Duration::from_millis(100));
    }
    stop.store(true, Ordering::Relaxed);
    let total = join_tallies(workers, keys.len());
    let finals = settled_counters(&c, &keys);
    let wrong = miscounted(&keys, &total, &finals);
    let acked: i64 = total.iter().map(|t| t.acked).sum();
    let unknown: i64 = total.iter().map(|t| t.unknown).sum();
    println!(
        "[hand-back] {acked} INCRs acknowledged, {unknown} unknown; {} counters wrong",
        wrong.len()
    );
    if !wrong.is_empty() {
        for i in 0..3 {
            eprintln!("--- log of node {}:\n{}", i + 1, c.log_tail(i, 30));
        }
    }
    assert!(
        acked > 1000,
        "too few increments to cover the hand-back: {acked}"
    );
    assert!(
        wrong.is_empty(),
        "{} of {} counters lost acknowledged increments across the hand-back: {wrong:?}",
        wrong.len(),
        keys.len()
    );
}

/// A multi-shard commit that took its holds on the node acting for a
/// killed one installs there, under those holds — possibly after the
/// restarted node took its slots back. The hand-back must wait for it:
/// else the restarted node serves without the install, and its next
/// increment of the key overwrites it (found by the long isolation run as
/// a lost append and a half-applied transaction). Here 16 `MULTI; INCR a;
/// INCR b; EXEC` start while a node is down and wait 2.8 s between their
/// decision and their installs (`ELSA.FAULT DELAY-INSTALLS`); the node
/// restarts, and as soon as it says it serves its slots, it increments
/// every key once. Each key must end at 2.
#[test]
fn hand_back_waits_for_commits_holding_its_keys() {
    hand_back_with_commits_in_flight(2800);
}

/// The same with the installs delayed past the hand-back's 6 s wait for
/// holds: the node hands the slots back with the holds still there, and
/// the restarted node holds those keys too until the commits finish (the
/// region fault run found a list element between two appends of one
/// transaction that was still holding keys when the hand-back gave up).
#[test]
fn hand_back_past_its_wait_carries_the_holds_still_there() {
    hand_back_with_commits_in_flight(9000);
}

fn hand_back_with_commits_in_flight(delay_ms: u64) {
    let _one = one_at_a_time();
    let mut c = Cluster::start(&["r0", "r0", "r0"], &["--replication-factor", "3"]);
    let victim = 1;
    let (pairs, keys) = counter_pairs("pair");
    c.kill9(victim);
    c.wait_members(&[0, 2], 2, Duration::from_secs(30));
    for node in [0, 2] {
        c.fault(node, &format!("DELAY-INSTALLS {delay_ms}"));
    }
    let commits = spawn_pair_multis(&c, &pairs, |i| if i % 2 == 0 { 0 } else { 2 });
    std::thread::sleep(Duration::from_millis(200));
    let handed_back = |c: &Cluster| c.log_tail(victim, 200).matches("slots handed back").count();
    let before = handed_back(&c);
    c.restart(victim);
    let deadline = Instant::now() + Duration::from_secs(30);
    while handed_back(&c) == before {
        assert!(
            Instant::now() < deadline,
            "node {} never took its slots back",
            victim + 1
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    // One connection per key: a key some commit holds elsewhere must not
    // delay the others.
    let lone: Vec<i64> = keys
        .iter()
        .map(|k| {
            let (mut con, k) = (c.conn(victim), k.clone());
            std::thread::spawn(move || redis::cmd("INCR").arg(&k).query::<i64>(&mut con))
        })
        .collect::<Vec<_>>()
        .into_iter()
        .map(|t| {
            t.join()
                .expect("INCR client")
                .expect("INCR on the restarted node")
        })
        .collect();
    let answers: Vec<_> = commits
        .into_iter()
        .map(|t| t.join().expect("MULTI client"))
        .collect();
    for node in [0, 2] {
        c.fault(node, "HEAL");
    }
    // Per key the two increments serialize: one saw the other. Usually
    // each MULTI holds its keys before the node restarts, and the node's
    // INCR comes second (answers 2, the MULTI 1). On a loaded machine a
    // MULTI may still be retrying (its slots being taken over) when the
    // slots come back, and then it comes second: also right. Both
    // answering 1 is the defect, a lost increment: the node served a key
    // while a commit still held it elsewhere.
    let mut want: BTreeMap<String, String> = BTreeMap::new();
    let mut multi_first = 0;
    for (i, ((a, b), answer)) in pairs.iter().zip(&answers).enumerate() {
        let answer = answer
            .as_ref()
            .unwrap_or_else(|e| panic!("MULTI on {a}, {b}: {e}"));
        for (key, mine, theirs) in [(a, answer.0, lone[2 * i]), (b, answer.1, lone[2 * i + 1])] {
            assert!(
                (mine, theirs) == (1, 2) || (mine, theirs) == (2, 1),
                "{key}: the MULTI answered {mine} and the restarted node's INCR {theirs} (answers {lone:?})"
            );
            multi_first += usize::from(mine == 1);
        }
        want.insert(a.clone(), "2".into());
        want.insert(b.clone(), "2".into());
    }
    println!(
        "[hand-back] {multi_first} of {} keys: the MULTI's increment came first",
        keys.len()
    );
    let lost: Vec<_> = keys
        .iter()
        .zip(settled_counters(&c, &keys))
        .filter(|(k, v)| v.as_deref() != Some(want[*k].as_str()))
        .map(|(k, v)| format!("{k} = {v:?}"))
        .collect();
    println!(
        "[hand-back] 16 commits in flight over the hand-back, then one INCR per key on the restarted node (answers {lone:?}); {} keys wrong",
        lost.len()
    );
    assert!(
        lost.is_empty(),
        "increments lost across the hand-back (want 2 each): {lost:?}\n--- log of node {}:\n{}",
        victim + 1,
        c.log_tail(victim, 20)
    );
}

/// A participant that ran a prepare before a pause and answers it after
/// must not have that answer trusted: its keys may have been served by
/// another node meanwhile. (The long isolation run: a coordinator took
/// its commit timestamp after the pause on a validation made before it;
/// the install on the paused node was the newest version and overwrote six
/// appends the node that took over had acknowledged.) Here node 2 answers
/// its peers 1.5 s late (`ELSA.FAULT DELAY-ANSWERS`), `MULTI; INCR a; INCR
/// b; EXEC`s from node 1 prepare on it, node 2 then acts as if it had
/// been paused (`ELSA.FAULT LAPSE`: it stops serving, catches up again)
/// while node 3 increments every key once. Every key must count both.
#[test]
fn a_prepare_answered_after_a_pause_is_not_trusted() {
    let _one = one_at_a_time();
    let c = Cluster::start(&["r0", "r0", "r0"], &["--replication-factor", "3"]);
    let (pairs, keys) = counter_pairs("lapse");
    let zero: BTreeMap<String, String> = keys.iter().map(|k| (k.clone(), "0".into())).collect();
    set_all(&mut c.conn(0), &zero, "setup");
    c.fault(1, "DELAY-ANSWERS 1500");
    let commits = spawn_pair_multis(&c, &pairs, |_| 0);
    // The prepares have run on node 2; their answers are on their way.
    std::thread::sleep(Duration::from_millis(400));
    c.fault(1, "LAPSE");
    // Only the answers already waiting are late; retries are not.
    c.fault(1, "DELAY-ANSWERS 0");
    let lone: Vec<_> = keys
        .iter()
        .map(|k| {
            let (mut con, k) = (c.conn(2), k.clone());
            std::thread::spawn(move || redis::cmd("INCR").arg(&k).query::<i64>(&mut con))
        })
        .collect();
    let lone_ok: BTreeMap<String, bool> = keys
        .iter()
        .cloned()
        .zip(
            lone.into_iter()
                .map(|t| t.join().expect("INCR client").is_ok()),
        )
        .collect();
    let answers: Vec<_> = commits
        .into_iter()
        .map(|t| t.join().expect("MULTI client"))
        .collect();
    let multi: Vec<bool> = answers.iter().map(Result::is_ok).collect();
    let errors: Vec<String> = answers
        .iter()
        .filter_map(|a| a.as_ref().err().map(|e| e.to_string()))
        .collect();
    c.fault(1, "HEAL");
    c.wait_caught_up(&[0, 1, 2], Duration::from_secs(30));
    let got: BTreeMap<String, i64> = keys
        .iter()
        .cloned()
        .zip(settled_counters(&c, &keys))
        .map(|(k, v)| (k, v.and_then(|v| v.parse().ok()).unwrap_or(-1)))
        .collect();
    // Acknowledged increments count; one whose answer was an error may
    // have run (its outcome was unknown). A MULTI runs whole: with both
    // lone INCRs acknowledged, its two keys end equal.
    let mut wrong = Vec::new();
    for ((a, b), ok) in pairs.iter().zip(&multi) {
        for k in [a, b] {
            let lo = i64::from(lone_ok[k]) + i64::from(*ok);
            let hi = 2;
            if got[k] < lo || got[k] > hi {
                wrong.push(format!("{k} = {}, want {lo}..={hi}", got[k]));
            }
        }
        if lone_ok[a] && lone_ok[b] && got[a] != got[b] {
            wrong.push(format!("{a} = {}, {b} = {}: half a MULTI", got[a], got[b]));
        }
    }
    println!(
        "[lapse] {} of {} MULTIs acknowledged (errors: {errors:?}); {} pairs wrong",
        multi.iter().filter(|x| **x).count(),
        multi.len(),
        wrong.len()
    );
    assert!(
        wrong.is_empty(),
        "increments lost to a prepare answered after a pause: {wrong:?}"
    );
}

/// Once a multi-shard commit is decided (its record says committed), a
/// participant that answers its install Busy — it is not the keys'
/// primary any more — is asked again through the current view; the
/// commit is not retried as if it had conflicted. (Before: the Busy
/// install became a CONFLICT, the coordinator ran the whole transaction
/// again, and the resolvers installed the first, decided attempt too: an
/// "aborted" transaction applied — G1a in the long isolation run — or
/// applied twice.) Node 2 answers installs Busy for a second while
/// `MULTI; INCR a; INCR b; EXEC`s from node 1 commit across the nodes:
/// each must be answered as applied and count exactly once.
#[test]
fn a_busy_install_after_the_decision_is_asked_again_not_retried_as_a_conflict() {
    let _one = one_at_a_time();
    let c = Cluster::start(&["r0", "r0", "r0"], &["--replication-factor", "3"]);
    let (pairs, keys) = counter_pairs("busy");
    let zero: BTreeMap<String, String> = keys.iter().map(|k| (k.clone(), "0".into())).collect();
    set_all(&mut c.conn(0), &zero, "setup");
    c.fault(1, "BUSY-INSTALLS");
    let commits = spawn_pair_multis(&c, &pairs, |_| 0);
    std::thread::sleep(Duration::from_secs(1));
    c.fault(1, "HEAL");
    let answers: Vec<_> = commits
        .into_iter()
        .map(|t| t.join().expect("MULTI client"))
        .collect();
    let got = settled_counters(&c, &keys);
    let wrong: Vec<String> = keys
        .iter()
        .zip(&got)
        .filter(|(_, v)| v.as_deref() != Some("1"))
        .map(|(k, v)| format!("{k} = {v:?}"))
        .collect();
    let errors: Vec<String> = answers
        .iter()
        .filter_map(|a| a.as_ref().err().map(|e| e.to_string()))
        .collect();
    println!(
        "[busy-install] {} of {} MULTIs answered OK (errors {errors:?}); {} keys not at 1",
        answers.iter().filter(|a| a.is_ok()).count(),
        answers.len(),
        wrong.len()
    );
    assert!(errors.is_empty(), "every MULTI commits: {errors:?}");
    assert!(
        wrong.is_empty(),
        "each MULTI counts exactly once: {wrong:?}"
    );
}

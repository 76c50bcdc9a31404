//! A node killed with `kill -9` leaves the ring of its region, and comes
//! back into it when restarted, without losing or hiding any write.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use redis::Value;

use crate::common::cluster::Cluster;
use crate::{get_all, one_at_a_time};

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

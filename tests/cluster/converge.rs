//! Regions of two nodes each converge through a node crash and a region
//! partition, under concurrent writers in every region.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use redis::Value;

use crate::common::cluster::Cluster;
use crate::{connect, get_all, lag_lines, one_at_a_time};

/// Keys only one region writes, per region.
const OWN_KEYS: usize = 40;
/// Keys every region writes.
const HOT_KEYS: usize = 4;
/// How long one write may keep failing (node down, region cut) before the
/// writer gives up and fails the test.
const WRITE_DEADLINE: Duration = Duration::from_secs(40);

/// What the test does at the moment (for counting acknowledged writes).
const NORMAL: usize = 0;
const NODE_DOWN: usize = 1;
const REGION_CUT: usize = 2;

fn own_key(region: &str, i: usize) -> String {
    format!("{region}:k{i}")
}

fn hot_key(i: usize) -> String {
    format!("hot:{i}")
}

/// What one region's writer did.
#[derive(Default)]
struct Written {
    /// Own key → last acknowledged value (`None`: deleted).
    last: HashMap<String, Option<String>>,
    /// Own key → values written without an acknowledgement (in doubt),
    /// with the error the client saw.
    doubt: HashMap<String, Vec<(String, String)>>,
    /// Hot key → every acknowledged value.
    hot: HashMap<String, HashSet<String>>,
    /// Hot key → values in doubt.
    hot_doubt: HashMap<String, HashSet<String>>,
    /// Acknowledged writes per phase (NORMAL, NODE_DOWN, REGION_CUT).
    acked: [usize; 3],
    /// Writes that failed or went unanswered (then retried).
    failed: usize,
    /// First few failures, for the report: when (since the writers
    /// started), in which phase, how long the attempt took, and why.
    errors: Vec<String>,
}

/// One write: `SET key value`, or `DEL key` when `value` is `None`.
fn write_once(con: &mut redis::Connection, key: &str, value: Option<&str>) -> Result<(), String> {
    let answer: Value = match value {
        Some(v) => redis::cmd("SET").arg(key).arg(v).query(con),
        None => redis::cmd("DEL").arg(key).query(con),
    }
    .map_err(|e| e.to_string())?;
    match (value, &answer) {
        (Some(_), Value::Okay) => Ok(()),
        (Some(_), Value::SimpleString(s)) if s == "OK" => Ok(()),
        (None, Value::Int(_)) => Ok(()),
        _ => Err(format!("unexpected answer {answer:?}")),
    }
}

/// Writes until `stop`, alternating between the region's two nodes: own
/// keys in turn, every 5th write a hot key, every 13th a DEL of an own
/// key. A write that fails is retried (new value, other node) until it is
/// acknowledged, so each writer's last write to any key is acknowledged.
fn writer(
    region: &str,
    ports: [u16; 2],
    stop: &AtomicBool,
    phase: &AtomicUsize,
    t0: Instant,
) -> Result<Written, String> {
    let mut w = Written::default();
    let mut cons: [Option<redis::Connection>; 2] = [None, None];
    let mut turn = 0usize;
    let mut n = 0u64;
    let mut seq = 0usize;
    while !stop.load(Ordering::Relaxed) {
        seq += 1;
        let (key, hot, delete) = if seq % 5 == 0 {
            (hot_key((seq / 5) % HOT_KEYS), true, false)
        } else {
            (own_key(region, seq % OWN_KEYS), false, seq % 13 == 0)
        };
        let started = Instant::now();
        loop {
            n += 1;
            let value = (!delete).then(|| format!("{region}.{n}"));
            let at = turn % 2;
            turn += 1;
            let attempt = Instant::now();
            let in_phase = phase.load(Ordering::Relaxed);
            let result = match &mut cons[at] {
                Some(con) => write_once(con, &key, value.as_deref()),
                slot => match connect(ports[at], Duration::from_secs(1)) {
                    Ok(con) => write_once(slot.insert(con), &key, value.as_deref()),
                    Err(e) => Err(format!("connect: {e}")),
                },
            };
            match result {
                Ok(()) => {
                    w.acked[phase.load(Ordering::Relaxed)] += 1;
                    if hot {
                        let v = value.expect("hot keys are never deleted");
                        w.hot.entry(key).or_default().insert(v);
                    } else {
                        w.last.insert(key, value);
                    }
                    break;
                }
                Err(e) => {
                    w.failed += 1;
                    if w.errors.len() < 8 {
                        w.errors.push(format!(
                            "at {:.1?} (phase {in_phase}, took {:.1?}) {key} on port {}: {e}",
                            attempt - t0,
                            attempt.elapsed(),
                            ports[at]
                        ));
                    }
                    if let Some(v) = value {
                        if hot {
                            w.hot_doubt.entry(key.clone()).or_default().insert(v);
                        } else {
                            let on = format!("port {}: {e}", ports[at]);
                            w.doubt.entry(key.clone()).or_default().push((v, on));
                        }
                    }
                    cons[at] = None;
                    if started.elapsed() > WRITE_DEADLINE {
                        return Err(format!(
                            "{region}: a write of {key} failed for {WRITE_DEADLINE:?}; errors: {:?}",
                            w.errors
                        ));
                    }
                    std::thread::sleep(Duration::from_millis(50));
                }
            }
        }
    }
    Ok(w)
}

/// Sets the flag when dropped, panics included.
struct StopOnDrop<'a>(&'a AtomicBool);

impl Drop for StopOnDrop<'_> {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Relaxed);
    }
}

/// Two nodes per region in `regions`: writers everywhere, a crash and
/// restart of one node, a partition of the last region, then the checks.
/// With `ownership = gossip`, the choice for regions of two nodes that
/// must keep serving through one node's failure (with leases the survivor
/// alone is no majority: `docs/regions.md`, *One owner per slot*).
fn converge_through_kill_and_partition(regions: &[&str]) {
    let _one = one_at_a_time();
    let layout: Vec<&str> = regions.iter().flat_map(|r| [*r, *r]).collect();
    let n = layout.len();
    let started = Instant::now();
    let mut c = Cluster::start(
        &layout,
        &[
            "--wan-delay-ms",
            "25",
            "--appendfsync",
            "always",
            "--replication-factor",
            "2",
            "--ownership",
            "gossip",
        ],
    );
    println!(
        "[converge] {n} nodes up, {n} members each, after {:.1?}",
        started.elapsed()
    );
    let ports: Vec<[u16; 2]> = regions
        .iter()
        .map(|r| {
            let n = c.in_region(r);
            [c.port(n[0]), c.port(n[1])]
        })
        .collect();
    // The crashed node (the first region's second), the cut region (the
    // last), and where the cut is observed from (the first region).
    let first = regions[0];
    let last = regions[regions.len() - 1];
    let victim = c.in_region(first)[1];
    let cut = c.in_region(last);
    let observer = c.in_region(first)[0];
    let marker = format!("{last}:marker");

    let stop = AtomicBool::new(false);
    let phase = AtomicUsize::new(NORMAL);
    let mut marker_seen_outside = None;
    let mut members_while_cut = String::new();
    let mut heal_at = Instant::now();
    let t0 = Instant::now();
    let mut events = Vec::new();
    let results: Vec<Result<Written, String>> = std::thread::scope(|s| {
        // Should this thread panic, the writers stop too (or the scope
        // would wait for them forever).
        let _stop = StopOnDrop(&stop);
        let handles: Vec<_> = regions
            .iter()
            .zip(&ports)
            .map(|(region, ports)| {
                let (stop, phase) = (&stop, &phase);
                s.spawn(move || writer(region, *ports, stop, phase, t0))
            })
            .collect();

        std::thread::sleep(Duration::from_secs(1));
        // A crash: kill -9, and back on the same ports and data a second later.
        c.kill9(victim);
        phase.store(NODE_DOWN, Ordering::Relaxed);
        events.push(format!("{:.1?} kill -9 node {}", t0.elapsed(), victim + 1));
        std::thread::sleep(Duration::from_secs(1));
        c.restart(victim);
        phase.store(NORMAL, Ordering::Relaxed);
        events.push(format!(
            "{:.1?} node {} restarted",
            t0.elapsed(),
            victim + 1
        ));
        std::thread::sleep(Duration::from_secs(1));

        // A partition: the last region cut off from every other region,
        // both its nodes.
        for &i in &cut {
            c.fault(i, "ISOLATE");
        }
        phase.store(REGION_CUT, Ordering::Relaxed);
        events.push(format!("{:.1?} {last} isolated", t0.elapsed()));
        let mut con = c.conn(cut[0]);
        let ok: Value = redis::cmd("SET")
            .arg(&marker)
            .arg("written-while-cut")
            .query(&mut con)
            .expect("a write in the cut region");
        assert!(matches!(ok, Value::Okay), "SET in the cut region: {ok:?}");
        // Far longer than an epoch plus the one-way delay.
        std::thread::sleep(Duration::from_millis(1500));
        let seen: Value = redis::cmd("GET")
            .arg(&marker)
            .query(&mut c.conn(observer))
            .expect("GET outside the cut region");
        marker_seen_outside = crate::text(&seen);
        members_while_cut = format!(
            "{first} sees members:{}, {last} sees members:{}",
            c.replication_field(observer, "members").unwrap_or_default(),
            c.replication_field(cut[0], "members").unwrap_or_default()
        );
        std::thread::sleep(Duration::from_millis(1000));
        for &i in &cut {
            c.fault(i, "HEAL");
        }
        phase.store(NORMAL, Ordering::Relaxed);
        heal_at = Instant::now();
        events.push(format!("{:.1?} {last} healed", t0.elapsed()));
        std::thread::sleep(Duration::from_secs(1));
        stop.store(true, Ordering::Relaxed);
        events.push(format!("{:.1?} writers told to stop", t0.elapsed()));
        handles
            .into_iter()
            .map(|h| h.join().expect("writer panicked"))
            .collect()
    });
    let writers_stopped = Instant::now();
    let written: Vec<Written> = results
        .into_iter()
        .map(|r| r.unwrap_or_else(|e| panic!("{e}")))
        .collect();
    for (region, w) in regions.iter().zip(&written) {
        println!(
            "[converge] {region}: acknowledged {} writes ({} normal, {} while a node was down, {} while {last} was cut), \
             {} failed and retried; first errors: {:#?}",
            w.acked.iter().sum::<usize>(),
            w.acked[NORMAL],
            w.acked[NODE_DOWN],
            w.acked[REGION_CUT],
            w.failed,
            w.errors
        );
    }
    println!("[converge] timeline: {}", events.join("; "));
    println!("[converge] while {last} was cut: {members_while_cut}");
    assert_eq!(
        marker_seen_outside, None,
        "{first} read {marker}, written in {last} while {last} was cut off: the partition did not hold"
    );
    for (region, w) in regions.iter().zip(&written) {
        assert!(
            w.acked[NORMAL] > 0,
            "{region}: no write was acknowledged; the run proves nothing"
        );
    }
    assert!(
        written[regions.len() - 1].acked[REGION_CUT] > 0,
        "{last} acknowledged no write while cut off: commits must not wait for other regions"
    );
    assert!(
        written[0].acked[REGION_CUT] > 0,
        "{first} acknowledged no write while {last} was cut off"
    );

    // Convergence: the same digest on every node.
    let all: Vec<usize> = (0..c.len()).collect();
    let took = c.wait_same_digest(&all, Duration::from_secs(45));
    let digest = c.digest(0);
    println!(
        "[converge] all {n} digests equal ({}, {} records) {:.1?} after heal, {:.1?} after the writers stopped (poll took {:.1?})",
        digest.0,
        digest.1,
        heal_at.elapsed(),
        writers_stopped.elapsed(),
        took
    );
    // The restarted node caught up and is primary of its slots again.
    let ready = c.wait_caught_up(&all, Duration::from_secs(30));
    println!("[converge] every node caught up (ready) {ready:.1?} later");
    println!(
        "[converge] membership views installed per node so far: {:?}",
        all.iter()
            .map(|&i| c.membership_changes(i))
            .collect::<Vec<_>>()
    );
    println!(
        "[converge] members seen by each node now: {:?}",
        all.iter()
            .map(|&i| c.replication_field(i, "members").unwrap_or_default())
            .collect::<Vec<_>>()
    );
    println!(
        "[converge] INFO replication of node {} ({first}):\n{}",
        c.specs[observer].id,
        lag_lines(&c.info_replication(observer))
    );

    // Every key, read on every node.
    let mut keys: Vec<String> = Vec::new();
    for region in regions {
        keys.extend((0..OWN_KEYS).map(|i| own_key(region, i)));
    }
    keys.extend((0..HOT_KEYS).map(hot_key));
    keys.push(marker.clone());
    let mut expected: HashMap<&str, Option<String>> = HashMap::new();
    let mut doubt: HashMap<&str, &Vec<(String, String)>> = HashMap::new();
    for w in &written {
        for (k, v) in &w.last {
            expected.insert(k.as_str(), v.clone());
        }
        for (k, v) in &w.doubt {
            doubt.insert(k.as_str(), v);
        }
    }
    expected.insert(marker.as_str(), Some("written-while-cut".into()));
    let mut hot_acked: HashMap<&str, HashSet<&str>> = HashMap::new();
    let mut hot_doubt: HashMap<&str, HashSet<&str>> = HashMap::new();
    for w in &written {
        for (k, vs) in &w.hot {
            hot_acked
                .entry(k.as_str())
                .or_default()
                .extend(vs.iter().map(String::as_str));
        }
        for (k, vs) in &w.hot_doubt {
            hot_doubt
                .entry(k.as_str())
                .or_default()
                .extend(vs.iter().map(String::as_str));
        }
    }
    let reads: Vec<Vec<Option<String>>> = all
        .iter()
        .map(|&i| {
            let t = Instant::now();
            let r = get_all(&mut c.conn(i), &keys);
            println!(
                "[converge] read {} keys on node {} in {:.1?}",
                keys.len(),
                i + 1,
                t.elapsed()
            );
            r
        })
        .collect();
    let mut wrong = Vec::new();
    let mut late_doubt = Vec::new();
    for (k, key) in keys.iter().enumerate() {
        let values: Vec<&Option<String>> = reads.iter().map(|r| &r[k]).collect();
        if values.iter().any(|v| *v != values[0]) {
            wrong.push(format!("{key}: nodes disagree: {values:?}"));
            continue;
        }
        let value = values[0];
        if key.starts_with("hot:") {
            let v = value.as_deref().unwrap_or("<nil>");
            let acked = hot_acked.get(key.as_str());
            if !acked.is_some_and(|a| a.contains(v)) {
                if hot_doubt.get(key.as_str()).is_some_and(|d| d.contains(v)) {
                    // A write whose answer was lost (a timeout while it
                    // waited for its region's replicas) may have been the
                    // last one committed: it may win, as any write may.
                    late_doubt.push(format!("{key}: {v} (answer lost) won"));
                } else {
                    wrong.push(format!("{key}: {v} is not a write anyone made"));
                }
            }
        } else if let Some(want) = expected.get(key.as_str()) {
            if value != want {
                let unanswered = value.as_ref().and_then(|v| {
                    doubt
                        .get(key.as_str())
                        .and_then(|d| d.iter().find(|(dv, _)| dv == v))
                });
                if let Some((v, error)) = unanswered {
                    // A write the client saw fail may take effect after a
                    // later, acknowledged one: legal for an op in doubt.
                    late_doubt.push(format!(
                        "{key}: {v} (failed with: {error}) over last acknowledged {want:?}"
                    ));
                } else {
                    wrong.push(format!(
                        "{key}: read {value:?} on every node, last acknowledged write was {want:?}"
                    ));
                }
            }
        } else if value.is_some() {
            wrong.push(format!("{key}: never written, yet reads {value:?}"));
        }
    }
    if !late_doubt.is_empty() {
        println!(
            "[converge] {} keys hold an unanswered write issued before their last acknowledged one: {late_doubt:?}",
            late_doubt.len()
        );
    }
    assert!(
        wrong.is_empty(),
        "{} of {} keys are wrong after convergence (first 10): {:#?}",
        wrong.len(),
        keys.len(),
        &wrong[..wrong.len().min(10)]
    );
    println!(
        "[converge] {} keys checked on {n} nodes; whole test {:.1?}",
        keys.len(),
        started.elapsed()
    );
}

#[test]
fn two_regions_two_nodes_converge_through_kill_and_partition() {
    converge_through_kill_and_partition(&["r0", "r1"]);
}

#[test]
fn four_regions_two_nodes_converge_through_kill_and_partition() {
    converge_through_kill_and_partition(&["r0", "r1", "r2", "r3"]);
}

//! Data types across regions, on real clusters: two regions of two nodes,
//! a client on every node changing the same keys concurrently — through
//! a `kill -9` and restart of one node and a partition of one region —
//! then, once healed: every node holds the same state, and it keeps every
//! acknowledged change (`docs/datatypes.md`):
//!
//! - a counter every client `INCR`s equals the number of acknowledged
//!   increments (plus at most the ones left in doubt by an error);
//! - a hash every client `HSET`s its own fields of holds every field whose
//!   `HSET` was acknowledged, with its value, and no field never sent;
//! - a set every client `SADD`s members to, and `SREM`s some of them from,
//!   holds every acknowledged add not acknowledged removed, and none of
//!   the acknowledged removes;
//! - a sorted set every client `ZINCRBY`s one shared member of scores the
//!   number of acknowledged increments (concurrent `ZINCRBY`s all count),
//!   and holds every member a client `ZADD`ed and did not `ZREM`, with its
//!   score, and none it removed;
//! - a list every client `RPUSH`es its own elements to (and `LPUSH`es,
//!   and `LREM`s some of its own from) holds every acknowledged push not
//!   acknowledged removed, once, none it removed and none never sent, in
//!   one order on every node, each client's `RPUSH`ed elements in the
//!   order it pushed them.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use redis::Value;

use crate::common::cluster::Cluster;
use crate::{connect, one_at_a_time, text};

/// The counter every client increments.
const COUNTER: &str = "dt:counter";
/// The hash every client sets fields of.
const HASH: &str = "dt:hash";
/// The set every client adds members to and removes some from.
const SET: &str = "dt:set";
/// The sorted set every client increments one member of, and adds and
/// removes its own members of.
const ZSET: &str = "dt:zset";
/// The list every client pushes its own elements to, and removes some of
/// them from.
const LIST: &str = "dt:list";

/// What one client did.
#[derive(Default, Debug)]
struct Done {
    /// Increments acknowledged.
    incr_acked: u64,
    /// Increments that failed or went unanswered: applied or not.
    incr_doubt: u64,
    /// Fields acknowledged, with their values.
    fields: BTreeMap<String, String>,
    /// Fields sent without an acknowledgement.
    fields_doubt: BTreeSet<String>,
    /// Members whose SADD was acknowledged.
    added: BTreeSet<String>,
    /// Members whose SREM was acknowledged (after their SADD was).
    removed: BTreeSet<String>,
    /// Members whose SADD or SREM went unacknowledged.
    members_doubt: BTreeSet<String>,
    /// ZINCRBYs of the shared member acknowledged, and in doubt.
    zincr_acked: u64,
    zincr_doubt: u64,
    /// Own members ZADDed (acknowledged), with their scores.
    zadded: BTreeMap<String, u64>,
    /// Own members ZREMoved (acknowledged).
    zremoved: BTreeSet<String>,
    /// Own members whose ZADD or ZREM went unacknowledged.
    zdoubt: BTreeSet<String>,
    /// Own elements pushed (acknowledged), in push order, and whether by
    /// RPUSH.
    pushed: Vec<(String, bool)>,
    /// Own elements LREMoved (acknowledged).
    lremoved: BTreeSet<String>,
    /// Own elements whose push or LREM went unacknowledged.
    ldoubt: BTreeSet<String>,
}

/// One client on node port `port`: increments, sets fields, adds and
/// removes members until told to stop. A failed command is not retried (a
/// retry could count twice): it is in doubt.
fn client(port: u16, me: usize, stop: &AtomicBool) -> Done {
    let mut done = Done::default();
    let mut con = None;
    let mut n = 0u64;
    while !stop.load(Ordering::Relaxed) {
        let c = match con.as_mut() {
            Some(c) => c,
            None => match connect(port, Duration::from_secs(2)) {
                Ok(c) => con.insert(c),
                Err(_) => {
                    std::thread::sleep(Duration::from_millis(50));
                    continue;
                }
            },
        };
        n += 1;
        if n % 5 == 0 {
            let ok = list_step(c, me, n, &mut done);
            if !ok {
                con = None;
                std::thread::sleep(Duration::from_millis(20));
            }
            continue;
        }
        let ok = match n % 6 {
            4 => {
                let r: redis::RedisResult<Value> = redis::cmd("ZINCRBY")
                    .arg(ZSET)
                    .arg(1)
                    .arg("shared")
                    .query(c);
                let ok = matches!(r, Ok(Value::BulkString(_)) | Ok(Value::Double(_)));
                if ok {
                    done.zincr_acked += 1;
                } else {
                    done.zincr_doubt += 1;
                }
                ok
            }
            5 if n % 4 == 1 => {
                // Remove one of this client's acknowledged members.
                let Some(member) = done
                    .zadded
                    .keys()
                    .find(|m| !done.zremoved.contains(*m) && !done.zdoubt.contains(*m))
                    .cloned()
                else {
                    continue;
                };
                let r: redis::RedisResult<Value> =
                    redis::cmd("ZREM").arg(ZSET).arg(&member).query(c);
                let ok = matches!(r, Ok(Value::Int(1)));
                if ok {
                    done.zremoved.insert(member);
                } else {
                    done.zdoubt.insert(member);
                }
                ok
            }
            5 => {
                let member = format!("c{me}:z{n}");
                let r: redis::RedisResult<Value> =
                    redis::cmd("ZADD").arg(ZSET).arg(n).arg(&member).query(c);
                let ok = matches!(r, Ok(Value::Int(1)));
                if ok {
                    done.zadded.insert(member, n);
                } else {
                    done.zdoubt.insert(member);
                }
                ok
            }
            0 => {
                let field = format!("c{me}:f{n}");
                let value = format!("v{n}");
                let r: redis::RedisResult<Value> = redis::cmd("HSET")
                    .arg(HASH)
                    .arg(&field)
                    .arg(&value)
                    .query(c);
                let ok = matches!(r, Ok(Value::Int(1)));
                if ok {
                    done.fields.insert(field, value);
                } else {
                    done.fields_doubt.insert(field);
                }
                ok
            }
            1 => {
                let member = format!("c{me}:m{n}");
                let r: redis::RedisResult<Value> =
                    redis::cmd("SADD").arg(SET).arg(&member).query(c);
                let ok = matches!(r, Ok(Value::Int(1)));
                if ok {
                    done.added.insert(member);
                } else {
                    done.members_doubt.insert(member);
                }
                ok
            }
            2 if (n / 6) % 2 == 0 => {
                // Remove one of this client's acknowledged members.
                let Some(member) = done
                    .added
                    .iter()
                    .find(|m| !done.removed.contains(*m) && !done.members_doubt.contains(*m))
                    .cloned()
                else {
                    continue;
                };
                let r: redis::RedisResult<Value> =
                    redis::cmd("SREM").arg(SET).arg(&member).query(c);
                let ok = matches!(r, Ok(Value::Int(1)));
                if ok {
                    done.removed.insert(member);
                } else {
                    done.members_doubt.insert(member);
                }
                ok
            }
            _ => {
                let r: redis::RedisResult<Value> = redis::cmd("INCR").arg(COUNTER).query(c);
                let ok = matches!(r, Ok(Value::Int(_)));
                if ok {
                    done.incr_acked += 1;
                } else {
                    done.incr_doubt += 1;
                }
                ok
            }
        };
        if !ok {
            con = None;
            std::thread::sleep(Duration::from_millis(20));
        }
    }
    done
}

/// One list command of client `me`: LREM of one of its acknowledged
/// elements now and then, else a push of a new one (RPUSH mostly).
fn list_step(c: &mut redis::Connection, me: usize, n: u64, done: &mut Done) -> bool {
    if n % 4 == 0 {
        let removable = done
            .pushed
            .iter()
            .map(|(e, _)| e)
            .find(|e| !done.lremoved.contains(*e) && !done.ldoubt.contains(*e))
            .cloned();
        if let Some(e) = removable {
            let r: redis::RedisResult<Value> = redis::cmd("LREM").arg(LIST).arg(1).arg(&e).query(c);
            let ok = matches!(r, Ok(Value::Int(1)));
            if ok {
                done.lremoved.insert(e);
            } else {
                done.ldoubt.insert(e);
            }
            return ok;
        }
    }
    let e = format!("c{me}:l{n}");
    let right = n % 3 != 0;
    let r: redis::RedisResult<Value> = redis::cmd(if right { "RPUSH" } else { "LPUSH" })
        .arg(LIST)
        .arg(&e)
        .query(c);
    let ok = matches!(r, Ok(Value::Int(len)) if len >= 1);
    if ok {
        done.pushed.push((e, right));
    } else {
        done.ldoubt.insert(e);
    }
    ok
}

/// Checks the list on every node against what the clients did (see the
/// module doc).
fn check_list(c: &Cluster, done: &[Done]) {
    let mut first: Option<Vec<String>> = None;
    for i in 0..c.len() {
        let list: Vec<String> = redis::cmd("LRANGE")
            .arg(LIST)
            .arg(0)
            .arg(-1)
            .query(&mut c.conn(i))
            .expect("LRANGE");
        let at: BTreeMap<&String, usize> = list.iter().enumerate().map(|(k, e)| (e, k)).collect();
        assert_eq!(at.len(), list.len(), "node {}: an element twice", i + 1);
        for d in done {
            let mut last_right = None;
            for (e, right) in &d.pushed {
                if d.ldoubt.contains(e) {
                    continue;
                }
                match (at.get(e), d.lremoved.contains(e)) {
                    (Some(_), true) => panic!("node {}: {e} was removed but is there", i + 1),
                    (None, false) => {
                        panic!("node {}: {e}, pushed and never removed, is missing", i + 1)
                    }
                    (Some(&k), false) if *right => {
                        assert!(
                            last_right.is_none_or(|l| l < k),
                            "node {}: {e} was RPUSHed after the client's previous RPUSH but \
                             stands before it",
                            i + 1
                        );
                        last_right = Some(k);
                    }
                    _ => {}
                }
            }
        }
        for e in &list {
            assert!(
                done.iter()
                    .any(|d| d.pushed.iter().any(|(p, _)| p == e) || d.ldoubt.contains(e)),
                "node {}: {e} was never sent",
                i + 1
            );
        }
        match &first {
            None => first = Some(list),
            Some(f) => assert_eq!(f, &list, "node {} holds the list in another order", i + 1),
        }
    }
}

#[test]
fn counters_hashes_and_sets_in_two_regions_keep_every_acknowledged_change() {
    let _one = one_at_a_time();
    // Region a keeps taking writes while one of its two nodes is down:
    // `ownership = gossip` (with leases the survivor alone is no majority,
    // `docs/regions.md`, *One owner per slot*).
    let mut c = Cluster::start(
        &["a", "a", "b", "b"],
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
    let ports: Vec<u16> = (0..c.len()).map(|i| c.port(i)).collect();
    let victim = c.in_region("a")[1];
    let cut = c.in_region("b");
    let stop = AtomicBool::new(false);
    let t0 = Instant::now();
    let mut events = Vec::new();
    let done: Vec<Done> = std::thread::scope(|s| {
        let handles: Vec<_> = ports
            .iter()
            .enumerate()
            .map(|(me, &p)| {
                let stop = &stop;
                s.spawn(move || client(p, me, stop))
            })
            .collect();
        std::thread::sleep(Duration::from_secs(1));
        c.kill9(victim);
        events.push(format!("{:.1?} kill -9 node {}", t0.elapsed(), victim + 1));
        std::thread::sleep(Duration::from_secs(1));
        c.restart(victim);
        events.push(format!("{:.1?} restarted", t0.elapsed()));
        std::thread::sleep(Duration::from_secs(1));
        for &i in &cut {
            c.fault(i, "ISOLATE");
        }
        events.push(format!("{:.1?} region b isolated", t0.elapsed()));
        std::thread::sleep(Duration::from_secs(2));
        for &i in &cut {
            c.fault(i, "HEAL");
        }
        events.push(format!("{:.1?} healed", t0.elapsed()));
        std::thread::sleep(Duration::from_secs(1));
        stop.store(true, Ordering::Relaxed);
        handles
            .into_iter()
            .map(|h| h.join().expect("client panicked"))
            .collect()
    });
    println!("[datatypes] {}", events.join("; "));
    for (i, d) in done.iter().enumerate() {
        println!(
            "[datatypes] client {i}: {} increments acked ({} in doubt), {} fields acked ({} in doubt), \
             {} members added, {} removed ({} in doubt), {} ZINCRBYs acked ({} in doubt), \
             {} sorted-set members added, {} removed ({} in doubt), \
             {} list pushes, {} removed ({} in doubt)",
            d.incr_acked,
            d.incr_doubt,
            d.fields.len(),
            d.fields_doubt.len(),
            d.added.len(),
            d.removed.len(),
            d.members_doubt.len(),
            d.zincr_acked,
            d.zincr_doubt,
            d.zadded.len(),
            d.zremoved.len(),
            d.zdoubt.len(),
            d.pushed.len(),
            d.lremoved.len(),
            d.ldoubt.len()
        );
    }
    let all: Vec<usize> = (0..c.len()).collect();
    let took = c.wait_same_digest(&all, Duration::from_secs(60));
    println!("[datatypes] same digest everywhere {took:.1?} after the clients stopped");

    let acked: u64 = done.iter().map(|d| d.incr_acked).sum();
    let doubt: u64 = done.iter().map(|d| d.incr_doubt).sum();
    assert!(
        done.iter()
            .all(|d| d.incr_acked > 0 && !d.fields.is_empty() && !d.added.is_empty()),
        "every client got changes through"
    );
    let fields: BTreeMap<&String, &String> = done.iter().flat_map(|d| &d.fields).collect();
    let field_doubt: BTreeSet<&String> = done.iter().flat_map(|d| &d.fields_doubt).collect();
    let present: BTreeSet<&String> = done
        .iter()
        .flat_map(|d| d.added.difference(&d.removed))
        .filter(|m| !done.iter().any(|d| d.members_doubt.contains(*m)))
        .collect();
    let removed: BTreeSet<&String> = done
        .iter()
        .flat_map(|d| &d.removed)
        .filter(|m| !done.iter().any(|d| d.members_doubt.contains(*m)))
        .collect();
    for i in all.clone() {
        let mut con = c.conn(i);
        let hash: BTreeMap<String, String> = redis::cmd("HGETALL")
            .arg(HASH)
            .query(&mut con)
            .expect("HGETALL");
        for (f, v) in &fields {
            assert_eq!(
                hash.get(*f),
                Some(*v),
                "node {}: field {f} of the hash, acknowledged, is missing or changed",
                i + 1
            );
        }
        for f in hash.keys() {
            assert!(
                fields.contains_key(f) || field_doubt.contains(f),
                "node {}: field {f} was never sent",
                i + 1
            );
        }
        let members: BTreeSet<String> = redis::cmd("SMEMBERS")
            .arg(SET)
            .query(&mut con)
            .expect("SMEMBERS");
        for m in &present {
            assert!(
                members.contains(*m),
                "node {}: member {m}, added and never removed, is missing",
                i + 1
            );
        }
        for m in &removed {
            assert!(
                !members.contains(*m),
                "node {}: member {m} was removed (acknowledged) but is there",
                i + 1
            );
        }
    }
    assert!(
        done.iter().all(|d| d.pushed.len() > d.lremoved.len()),
        "every client's pushes got through"
    );
    check_list(&c, &done);
    let zacked: u64 = done.iter().map(|d| d.zincr_acked).sum();
    let zdoubt: u64 = done.iter().map(|d| d.zincr_doubt).sum();
    assert!(zacked > 0, "ZINCRBYs got through");
    for i in all.clone() {
        let mut con = c.conn(i);
        let scores: Vec<(String, f64)> = redis::cmd("ZRANGE")
            .arg(ZSET)
            .arg(0)
            .arg(-1)
            .arg("WITHSCORES")
            .query(&mut con)
            .expect("ZRANGE");
        let scores: BTreeMap<String, f64> = scores.into_iter().collect();
        let shared = scores.get("shared").copied().unwrap_or(0.0) as u64;
        assert!(
            (zacked..=zacked + zdoubt).contains(&shared),
            "node {}: the shared member scores {shared}, but {zacked} ZINCRBYs were acknowledged \
             and {zdoubt} in doubt: concurrent increments in two regions must all count",
            i + 1
        );
        for d in &done {
            for (m, s) in &d.zadded {
                if d.zdoubt.contains(m) {
                    continue;
                }
                if d.zremoved.contains(m) {
                    assert!(
                        !scores.contains_key(m),
                        "node {}: {m} was removed but is there",
                        i + 1
                    );
                } else {
                    assert_eq!(
                        scores.get(m).copied(),
                        Some(*s as f64),
                        "node {}: sorted-set member {m}, added and never removed, is missing or changed",
                        i + 1
                    );
                }
            }
        }
    }
    for i in all {
        let v: Value = redis::cmd("GET")
            .arg(COUNTER)
            .query(&mut c.conn(i))
            .expect("GET");
        let n: u64 = text(&v)
            .and_then(|t| t.parse().ok())
            .unwrap_or_else(|| panic!("node {} answered {v:?}", i + 1));
        assert!(
            (acked..=acked + doubt).contains(&n),
            "node {}: counter {n}, but {acked} increments were acknowledged and {doubt} in doubt: \
             concurrent increments in two regions must all count",
            i + 1
        );
    }
}

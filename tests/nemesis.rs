//! Faults inside a region, as an operator would see them (network
//! namespaces and nftables, `tests/common/hosts.rs`): one region of three
//! nodes with three replicas and `ownership = leases`, a node cut off from
//! the other two while clients keep reaching every node.
//!
//! Checked over the whole history:
//! - no stale read: a read of the counter returns at least every value an
//!   `INCR` had acknowledged (through any node) before the read began;
//! - nothing acknowledged hidden: every `SET` of a unique key answered OK
//!   (through any node, the cut-off one included) is readable through
//!   every node once the cut healed;
//! - the cut-off node serves again after the heal.
//!
//! The same run with `ownership = gossip` shows the split brain of
//! issue 42 (`ELSA_NEMESIS_OWNERSHIP=gossip`, ignored test below).

mod common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::hosts::{broken, quick_conn, reconnected, Hosts};

const H1: usize = 0;
const H2: usize = 1;
const H3: usize = 2;
const COUNTER: &str = "nem:c";

/// One client operation as the client saw it.
#[derive(Clone, Debug)]
enum Op {
    /// `INCR` answered this value.
    Incr(i64),
    /// `GET` answered this value (nil = 0).
    Read(i64),
    /// `SET` of this unique key answered OK.
    Set(String),
    /// A `DEL` of this key was sent (its outcome may be unknown).
    DelSent(String),
    /// A `DEL` of this key answered this count.
    Del(String, i64),
}

#[derive(Clone, Debug)]
struct Event {
    host: usize,
    invoked: Instant,
    completed: Instant,
    op: Op,
}

/// A connection to host `i` with short timeouts (a cut makes calls hang).
fn conn(hosts: &Hosts, i: usize) -> Option<redis::Connection> {
    quick_conn(&hosts.hosts[i].ns, hosts.hosts[i].addr)
}

/// A client on host `i` until `stop`: an INCR, a GET and a unique SET per
/// step, each recorded only when answered.
fn client(
    hosts: &Hosts,
    i: usize,
    stop: Arc<AtomicBool>,
    history: Arc<Mutex<Vec<Event>>>,
) -> std::thread::JoinHandle<usize> {
    let mut c = conn(hosts, i);
    let (ns, addr) = (hosts.hosts[i].ns.clone(), hosts.hosts[i].addr);
    std::thread::spawn(move || {
        let mut errors = 0;
        let mut n = 0u64;
        while !stop.load(Ordering::Relaxed) {
            let Some(con) = reconnected(&mut c, &ns, addr) else {
                continue;
            };
            n += 1;
            let key = format!("nem:k:{i}:{n}");
            let mut ok = true;
            // Each step deletes the key written 8 steps before.
            let old = n.checked_sub(8).map(|m| format!("nem:k:{i}:{m}"));
            for step in 0..4 {
                let invoked = Instant::now();
                let answer = match (step, &old) {
                    (0, _) => redis::cmd("INCR")
                        .arg(COUNTER)
                        .query::<i64>(con)
                        .map(Op::Incr),
                    (1, _) => redis::cmd("GET")
                        .arg(COUNTER)
                        .query::<Option<i64>>(con)
                        .map(|v| Op::Read(v.unwrap_or(0))),
                    (2, _) => redis::cmd("SET")
                        .arg(&key)
                        .arg("v")
                        .query::<String>(con)
                        .map(|_| Op::Set(key.clone())),
                    (_, Some(old)) => {
                        history.lock().unwrap().push(Event {
                            host: i,
                            invoked,
                            completed: invoked,
                            op: Op::DelSent(old.clone()),
                        });
                        redis::cmd("DEL")
                            .arg(old)
                            .query::<i64>(con)
                            .map(|n| Op::Del(old.clone(), n))
                    }
                    (_, None) => continue,
                };
                match answer {
                    Ok(op) => history.lock().unwrap().push(Event {
                        host: i,
                        invoked,
                        completed: Instant::now(),
                        op,
                    }),
                    Err(e) => {
                        errors += 1;
                        if broken(&e) {
                            ok = false;
                            break;
                        }
                        std::thread::sleep(Duration::from_millis(20));
                    }
                }
            }
            if !ok {
                c = None;
            }
        }
        errors
    })
}

/// Reads that returned less than an INCR acknowledged before they began.
fn stale_reads(history: &[Event]) -> Vec<String> {
    let mut incrs: Vec<(Instant, i64)> = history
        .iter()
        .filter_map(|e| match e.op {
            Op::Incr(v) => Some((e.completed, v)),
            _ => None,
        })
        .collect();
    incrs.sort();
    // Highest value acknowledged by each completion time.
    let mut best = Vec::with_capacity(incrs.len());
    let mut m = i64::MIN;
    for (t, v) in &incrs {
        m = m.max(*v);
        best.push((*t, m));
    }
    let mut stale = Vec::new();
    for e in history {
        let Op::Read(v) = e.op else { continue };
        let i = best.partition_point(|(t, _)| *t < e.invoked);
        if i > 0 && best[i - 1].1 > v {
            stale.push(format!(
                "h{} read {v} though {} was acknowledged before",
                e.host + 1,
                best[i - 1].1
            ));
        }
    }
    stale
}

/// The tests of this file one at a time: each runs three nodes and
/// clients on every one, and two at once on a small machine starve the
/// failure detector before any fault is injected.
fn one_at_a_time() -> std::sync::MutexGuard<'static, ()> {
    static LOCK: Mutex<()> = Mutex::new(());
    LOCK.lock().unwrap_or_else(|e| e.into_inner())
}

/// One region of three nodes, three replicas, with `ownership` and
/// `extra` flags; returns once all are settled (and hold leases).
fn region_of_three(tag: &str, ownership: &str, extra: &[&str]) -> Hosts {
    let mut hosts = Hosts::new(tag, 3);
    let long = Duration::from_secs(60);
    let mut flags = vec!["--replication-factor", "3", "--ownership", ownership];
    flags.extend_from_slice(extra);
    hosts.start(H1, "a", 1, &[H2, H3], &flags);
    hosts.start(H2, "a", 2, &[H1, H3], &flags);
    hosts.start(H3, "a", 3, &[H1, H2], &flags);
    hosts.wait_settled(&[H1, H2, H3], 3, long);
    if ownership == "leases" {
        for i in [H1, H2, H3] {
            hosts.wait_until(i, "a lease held", long, || hosts.lease_held(i));
        }
    }
    hosts
}

type Clients = (
    Arc<AtomicBool>,
    Arc<Mutex<Vec<Event>>>,
    Vec<std::thread::JoinHandle<usize>>,
);

/// A [`client`] on every node: the stop flag, the shared history, the
/// threads (each returns its error count).
fn clients_on_every_node(hosts: &Hosts) -> Clients {
    let stop = Arc::new(AtomicBool::new(false));
    let history = Arc::new(Mutex::new(Vec::new()));
    let clients = (0..hosts.len())
        .map(|i| client(hosts, i, stop.clone(), history.clone()))
        .collect();
    (stop, history, clients)
}

fn cut_one_node_off(ownership: &str) {
    let _one = one_at_a_time();
    let long = Duration::from_secs(60);
    let hosts = region_of_three("nem", ownership, &[]);
    let t0 = Instant::now();
    let (stop, history, clients) = clients_on_every_node(&hosts);
    std::thread::sleep(Duration::from_secs(3));
    let cut_at = Instant::now();
    hosts.cut(&[H1], &[H2, H3]);
    std::thread::sleep(Duration::from_secs(12));
    hosts.heal();
    let healed = Instant::now();
    // h1 serves again: an INCR through it answers.
    hosts.wait_until(H1, "h1 serves again after the heal", long, || {
        conn(&hosts, H1)
            .is_some_and(|mut c| redis::cmd("INCR").arg(COUNTER).query::<i64>(&mut c).is_ok())
    });
    let back_after = healed.elapsed();
    std::thread::sleep(Duration::from_secs(5));
    stop.store(true, Ordering::Relaxed);
    let errors: Vec<usize> = clients.into_iter().map(|c| c.join().unwrap()).collect();
    let history = history.lock().unwrap().clone();

    let stale = stale_reads(&history);
    // Answers per host before, during and after the cut.
    let phases: Vec<[usize; 3]> = [H1, H2, H3]
        .iter()
        .map(|&h| {
            let mut p = [0; 3];
            for e in history.iter().filter(|e| e.host == h) {
                p[if e.completed < cut_at {
                    0
                } else if e.invoked < healed {
                    1
                } else {
                    2
                }] += 1;
            }
            p
        })
        .collect();
    // No write sent through the cut-off node once the cut holds (half a
    // second after `cut` began) is acknowledged before the heal: no other
    // replica can have it. Before 2026-11-30, with leases, h1 acknowledged
    // writes alone as soon as its failure detector dropped the others
    // (about 1 s in) while its lease still ran (3 s): lost once the others
    // served its slots — an acknowledged `DEL` undone, a `SET` gone.
    let alone: Vec<String> = history
        .iter()
        .filter(|e| {
            e.host == H1
                && e.invoked >= cut_at + Duration::from_millis(500)
                && e.completed < healed
                && matches!(e.op, Op::Incr(_) | Op::Set(_) | Op::Del(..))
        })
        .map(|e| format!("{:?} sent at {:.1?}", e.op, e.invoked - t0))
        .collect();
    let (acked, hidden) = check_keys(&hosts, &history, t0);
    let reads = history
        .iter()
        .filter(|e| matches!(e.op, Op::Read(_)))
        .count();
    eprintln!(
        "ownership {ownership}: {} events ({reads} reads, {} acknowledged keys), answers per host \
         before/during/after the cut {phases:?}, client errors {errors:?}, h1 back {back_after:?} after \
         the heal; {} stale reads; {} writes acknowledged by h1 alone; hidden: {hidden:?}",
        history.len(),
        acked,
        stale.len(),
        alone.len()
    );
    assert!(
        alone.is_empty(),
        "h1, cut off, acknowledged writes no replica could have: {:?}",
        &alone[..alone.len().min(5)]
    );
    assert!(reads > 100, "too few reads to judge: {reads}");
    assert!(
        stale.is_empty(),
        "{} stale reads, e.g. {:?}",
        stale.len(),
        &stale[..stale.len().min(5)]
    );
    assert!(hidden.is_empty(), "{hidden:?}");
}

/// Reads every key the clients wrote through every node (for up to 30 s
/// each) and says what is wrong: an acknowledged `SET` (never deleted)
/// unreadable, or an acknowledged `DEL` of a key whose `SET` had been
/// acknowledged before it undone. Returns how many keys
/// were acknowledged, and the problems.
fn check_keys(hosts: &Hosts, history: &[Event], t0: Instant) -> (usize, Vec<String>) {
    use std::collections::HashSet;
    let del_sent: HashSet<&String> = history
        .iter()
        .filter_map(|e| match &e.op {
            Op::DelSent(k) => Some(k),
            _ => None,
        })
        .collect();
    let present: Vec<String> = history
        .iter()
        .filter_map(|e| match &e.op {
            Op::Set(k) if !del_sent.contains(k) => Some(k.clone()),
            _ => None,
        })
        .collect();
    // A key whose SET was never answered may be written at any time, as
    // late as after its DEL (its outcome is unknown: a write admitted by a
    // node that was then paused runs when it resumes); only a DEL after an
    // acknowledged SET must stay.
    let set_at: std::collections::HashMap<&String, Instant> = history
        .iter()
        .filter_map(|e| match &e.op {
            Op::Set(k) => Some((k, e.completed)),
            _ => None,
        })
        .collect();
    let deleted: Vec<String> = history
        .iter()
        .filter_map(|e| match &e.op {
            Op::Del(k, _) if set_at.get(k).is_some_and(|t| *t <= e.invoked) => Some(k.clone()),
            _ => None,
        })
        .collect();
    let acked = history
        .iter()
        .filter(|e| matches!(e.op, Op::Set(_)))
        .count();
    let mut problems = Vec::new();
    // A DEL after an acknowledged SET of its key (and no other write of
    // it) must find the key: answering 0 is a stale read.
    for e in history {
        if let Op::Del(k, 0) = &e.op {
            if set_at.get(k).is_some_and(|t| *t <= e.invoked) {
                problems.push(format!(
                    "DEL {k} answered 0 after its SET was acknowledged: {}",
                    timeline(history, k, t0)
                ));
            }
        }
    }
    for i in 0..hosts.len() {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let Some(mut c) = conn(hosts, i) else {
                std::thread::sleep(Duration::from_millis(500));
                continue;
            };
            let mut read = |keys: &[String], want: bool| -> Vec<String> {
                keys.chunks(500)
                    .flat_map(|chunk| {
                        let vals: Vec<Option<String>> = redis::cmd("MGET")
                            .arg(chunk)
                            .query(&mut c)
                            .unwrap_or_else(|_| {
                                vec![if want { None } else { Some(String::new()) }; chunk.len()]
                            });
                        chunk
                            .iter()
                            .zip(vals)
                            .filter(|(_, v)| v.is_some() != want)
                            .map(|(k, _)| k.clone())
                            .collect::<Vec<_>>()
                    })
                    .collect()
            };
            let missing = read(&present, true);
            let back = read(&deleted, false);
            if missing.is_empty() && back.is_empty() {
                break;
            }
            if Instant::now() > deadline {
                if let Some(k) = back.first() {
                    problems.push(format!("{k}: {}", timeline(history, k, t0)));
                }
                if !missing.is_empty() {
                    problems.push(format!(
                        "h{}: {} of {} acknowledged keys unreadable, e.g. {:?}",
                        i + 1,
                        missing.len(),
                        present.len(),
                        &missing[..missing.len().min(5)]
                    ));
                }
                if !back.is_empty() {
                    problems.push(format!(
                        "h{}: {} of {} deleted keys back, e.g. {:?}",
                        i + 1,
                        back.len(),
                        deleted.len(),
                        &back[..back.len().min(5)]
                    ));
                }
                break;
            }
            std::thread::sleep(Duration::from_millis(500));
        }
    }
    (acked, problems)
}

/// Every event of `key`, with its host and times from `t0`.
fn timeline(history: &[Event], key: &str, t0: Instant) -> String {
    let of = |op: &Op| match op {
        Op::Set(k) | Op::DelSent(k) | Op::Del(k, _) => k == key,
        _ => false,
    };
    history
        .iter()
        .filter(|e| of(&e.op))
        .map(|e| {
            format!(
                "h{} {:?} {:.3?}..{:.3?}",
                e.host + 1,
                e.op,
                e.invoked - t0,
                e.completed - t0
            )
        })
        .collect::<Vec<_>>()
        .join("; ")
}

#[test]
fn a_node_cut_off_from_its_region_serves_nothing_stale_and_hides_nothing() {
    cut_one_node_off("leases");
}

/// The defect of issue 42 with `ownership = gossip` (fails: stale reads).
#[test]
#[ignore]
fn with_gossip_ownership_a_cut_off_node_serves_stale_reads() {
    cut_one_node_off(&std::env::var("ELSA_NEMESIS_OWNERSHIP").unwrap_or_else(|_| "gossip".into()));
}

fn env_or(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// Faults at random inside a region of three nodes with `ownership =
/// leases`, one at a time, each for 4–9 s, with a client on every node
/// throughout: a node cut off from the other two (nftables), killed with
/// SIGKILL and started again, paused with SIGSTOP and resumed, or its
/// clock moved by less than `max-clock-drift-ms` (500 ms) ahead or behind.
/// After each the region must hold its leases again within a minute.
/// `ELSA_NEMESIS_SEED` replays a run (CI runs seed 24: its first four
/// rounds pause h2 twice, kill h1, cut h2 off; `random` draws one),
/// `ELSA_NEMESIS_ROUNDS` (default 4) sets its length. Checked as above,
/// plus: no acknowledged `DEL` undone, and the counter ends at least at
/// every acknowledged `INCR`.
///
/// In the suite run of 2026-11-30 (seed 3359383595: h2 paused 9 s, h3
/// killed, h2 cut off, h2 killed) one `DEL` was found undone on every
/// node — its key written about when h2 was paused. The checker's error,
/// fixed since: it counted every answered `DEL`, also of a key whose `SET`
/// had not been answered (the client gave up after 3 s while h2 was
/// paused) — a write of unknown outcome that may land at any time, here
/// when h2 resumed. Every run since passed (the closing notes of sessions
/// 36 and 37 give the seeds).
#[test]
fn random_faults_inside_a_region_keep_one_owner_per_slot() {
    use rand::{Rng, SeedableRng};
    let seed = match std::env::var("ELSA_NEMESIS_SEED").as_deref() {
        Ok("random") => rand::random::<u32>() as u64,
        _ => env_or("ELSA_NEMESIS_SEED", 24),
    };
    let rounds = env_or("ELSA_NEMESIS_ROUNDS", 4);
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    eprintln!("nemesis: seed {seed}, {rounds} rounds (ELSA_NEMESIS_SEED={seed} replays it)");
    let _one = one_at_a_time();
    let long = Duration::from_secs(60);
    let mut hosts = region_of_three("nemr", "leases", &["--fault-injection", "true"]);
    let t0 = Instant::now();
    let (stop, history, clients) = clients_on_every_node(&hosts);
    std::thread::sleep(Duration::from_secs(2));
    let mut faults = Vec::new();
    for _ in 0..rounds {
        let x = rng.gen_range(0..3usize);
        let others: Vec<usize> = (0..3).filter(|&j| j != x).collect();
        let hold = Duration::from_secs(rng.gen_range(4..=9));
        let started = Instant::now();
        let at = t0.elapsed();
        let what = match rng.gen_range(0..4) {
            0 => {
                hosts.cut(&[x], &others);
                std::thread::sleep(hold);
                hosts.heal();
                "cut off"
            }
            1 => {
                hosts.kill(x);
                std::thread::sleep(hold);
                hosts.restart(x);
                "killed and restarted"
            }
            2 => {
                hosts.pause(x, true);
                std::thread::sleep(hold);
                hosts.pause(x, false);
                "paused"
            }
            _ => {
                let ms: i64 = if rng.gen_bool(0.5) { 400 } else { -400 };
                hosts.skew_clock(x, ms, hold);
                if ms > 0 {
                    "clock 400 ms ahead"
                } else {
                    "clock 400 ms behind"
                }
            }
        };
        for i in [H1, H2, H3] {
            hosts.wait_until(i, "a lease held again after the fault", long, || {
                hosts.lease_held(i)
            });
        }
        faults.push(format!(
            "{at:.1?}: h{} {what} for {hold:?} (back after {:.1?})",
            x + 1,
            started.elapsed()
        ));
        std::thread::sleep(Duration::from_secs(2));
    }
    stop.store(true, Ordering::Relaxed);
    let errors: Vec<usize> = clients.into_iter().map(|c| c.join().unwrap()).collect();
    let history = history.lock().unwrap().clone();
    let stale = stale_reads(&history);
    let (acked, problems) = check_keys(&hosts, &history, t0);
    let max_incr = history
        .iter()
        .filter_map(|e| match e.op {
            Op::Incr(v) => Some(v),
            _ => None,
        })
        .max()
        .unwrap_or(0);
    let finals: Vec<i64> = [H1, H2, H3]
        .iter()
        .map(|&i| {
            hosts
                .query::<Option<i64>>(i, redis::cmd("GET").arg(COUNTER))
                .unwrap_or(0)
        })
        .collect();
    let reads = history
        .iter()
        .filter(|e| matches!(e.op, Op::Read(_)))
        .count();
    eprintln!(
        "nemesis seed {seed}: {faults:?}; {} events ({reads} reads, {acked} acknowledged keys), \
         client errors {errors:?}; {} stale reads; counter {finals:?} (highest acknowledged \
         {max_incr}); problems: {problems:?}",
        history.len(),
        stale.len()
    );
    assert!(reads > 50, "too few reads to judge: {reads}");
    assert!(
        stale.is_empty(),
        "seed {seed}: {} stale reads, e.g. {:?}",
        stale.len(),
        &stale[..stale.len().min(5)]
    );
    assert!(problems.is_empty(), "seed {seed}: {problems:?}");
    assert!(
        finals.iter().all(|&v| v >= max_incr),
        "seed {seed}: counter {finals:?} below an acknowledged {max_incr}"
    );
}

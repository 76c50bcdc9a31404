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

use common::hosts::{in_netns, url, Hosts};

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
    let ns = hosts.hosts[i].ns.clone();
    let url = url(hosts.hosts[i].addr);
    in_netns(&ns, move || {
        let c = redis::Client::open(url)
            .ok()?
            .get_connection_with_timeout(Duration::from_secs(2))
            .ok()?;
        c.set_read_timeout(Some(Duration::from_secs(3))).ok()?;
        c.set_write_timeout(Some(Duration::from_secs(3))).ok()?;
        Some(c)
    })
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
            let Some(con) = c.as_mut() else {
                std::thread::sleep(Duration::from_millis(100));
                let u = url(addr);
                c = in_netns(&ns, move || {
                    let c = redis::Client::open(u)
                        .ok()?
                        .get_connection_with_timeout(Duration::from_secs(2))
                        .ok()?;
                    c.set_read_timeout(Some(Duration::from_secs(3))).ok()?;
                    Some(c)
                });
                continue;
            };
            n += 1;
            let key = format!("nem:k:{i}:{n}");
            let mut ok = true;
            for step in 0..3 {
                let invoked = Instant::now();
                let answer = match step {
                    0 => redis::cmd("INCR")
                        .arg(COUNTER)
                        .query::<i64>(con)
                        .map(Op::Incr),
                    1 => redis::cmd("GET")
                        .arg(COUNTER)
                        .query::<Option<i64>>(con)
                        .map(|v| Op::Read(v.unwrap_or(0))),
                    _ => redis::cmd("SET")
                        .arg(&key)
                        .arg("v")
                        .query::<String>(con)
                        .map(|_| Op::Set(key.clone())),
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
                        if e.is_io_error() || e.is_timeout() || e.is_connection_dropped() {
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

fn lease_held(hosts: &Hosts, i: usize) -> bool {
    hosts
        .replication_field(i, "lease_ms_left")
        .and_then(|v| v.parse::<u64>().ok())
        .is_some_and(|v| v > 0)
}

fn cut_one_node_off(ownership: &str) {
    let mut hosts = Hosts::new("nem", 3);
    let long = Duration::from_secs(60);
    let extra = ["--replication-factor", "3", "--ownership", ownership];
    hosts.start(H1, "a", 1, &[H2, H3], &extra);
    hosts.start(H2, "a", 2, &[H1, H3], &extra);
    hosts.start(H3, "a", 3, &[H1, H2], &extra);
    hosts.wait_settled(&[H1, H2, H3], 3, long);
    if ownership == "leases" {
        for i in [H1, H2, H3] {
            hosts.wait_until(i, "a lease held", long, || lease_held(&hosts, i));
        }
    }

    let stop = Arc::new(AtomicBool::new(false));
    let history = Arc::new(Mutex::new(Vec::new()));
    let clients: Vec<_> = [H1, H2, H3]
        .iter()
        .map(|&i| client(&hosts, i, stop.clone(), history.clone()))
        .collect();
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
    let acked: Vec<String> = history
        .iter()
        .filter_map(|e| match &e.op {
            Op::Set(k) => Some(k.clone()),
            _ => None,
        })
        .collect();
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
    // Every acknowledged key readable through every node (within 30 s).
    let mut hidden = Vec::new();
    for i in [H1, H2, H3] {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let mut c = hosts.conn(i);
            let missing: Vec<&String> = acked
                .chunks(500)
                .flat_map(|chunk| {
                    let vals: Vec<Option<String>> = redis::cmd("MGET")
                        .arg(chunk)
                        .query(&mut c)
                        .unwrap_or_else(|_| vec![None; chunk.len()]);
                    chunk
                        .iter()
                        .zip(vals)
                        .filter(|(_, v)| v.is_none())
                        .map(|(k, _)| k)
                        .collect::<Vec<_>>()
                })
                .collect();
            if missing.is_empty() {
                break;
            }
            if Instant::now() > deadline {
                hidden.push(format!(
                    "h{}: {} of {} acknowledged keys unreadable, e.g. {:?}",
                    i + 1,
                    missing.len(),
                    acked.len(),
                    &missing[..missing.len().min(5)]
                ));
                break;
            }
            std::thread::sleep(Duration::from_millis(500));
        }
    }
    let reads = history
        .iter()
        .filter(|e| matches!(e.op, Op::Read(_)))
        .count();
    eprintln!(
        "ownership {ownership}: {} events ({reads} reads, {} acknowledged keys), answers per host \
         before/during/after the cut {phases:?}, client errors {errors:?}, h1 back {back_after:?} after \
         the heal; {} stale reads; hidden: {hidden:?}",
        history.len(),
        acked.len(),
        stale.len()
    );
    assert!(reads > 100, "too few reads to judge: {reads}");
    assert!(
        stale.is_empty(),
        "{} stale reads, e.g. {:?}",
        stale.len(),
        &stale[..stale.len().min(5)]
    );
    assert!(hidden.is_empty(), "acknowledged writes hidden: {hidden:?}");
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

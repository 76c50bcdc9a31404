//! The isolation checker with its clients spread over the two nodes of a
//! region: the same workloads (`tests/isolation/`), run against a
//! two-node region (plus a one-node second region, so replication runs),
//! judged by the same rules `tests/isolation.rs` applies on one node.
//!
//! `tests/isolation.rs` connects every client to one server, so its
//! driver loop is copied here with one change: client `t` talks to node
//! `t % 2`. Keys spread over both nodes' shards by hash, so a multi-key
//! commit usually spans the two nodes (cross-node two-phase commit). Each
//! run gets its own key range, so the four runs share one cluster.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use rand::rngs::StdRng;
use rand::SeedableRng;

use crate::checker;
use crate::client::{self, Level, Outcome};
use crate::common::cluster::Cluster;
use crate::workload::{KeyPool, Kind, Mop, Recorder, Seen, Workload};
use crate::{connect, one_at_a_time};

/// Transactions per (workload, level) run: four runs, ~500 in all.
const TXNS: usize = 125;
const THREADS: usize = 8;
const HOT_KEYS: usize = 6;
/// Writes a key takes before it retires from the hot pool.
const MAX_WRITES_PER_KEY: u64 = 32;
/// Process id of the final read of every key.
const FINAL_PROCESS: u64 = 1_000_000;

/// One finished run (as in `tests/isolation.rs`).
struct Run {
    history: String,
    commit_ts: HashMap<u64, i64>,
    done: Vec<(Kind, Vec<Mop>, Option<i64>)>,
    committed: usize,
    conflicts: usize,
    unexpected: Vec<String>,
    max_in_flight: usize,
    final_state: HashMap<u64, Seen>,
    elapsed: Duration,
}

fn conn(port: u16) -> redis::Connection {
    connect(port, Duration::from_secs(30)).expect("connect")
}

/// Moves every key of `txn` into this run's range.
fn offset(txn: &mut [Mop], base: u64) {
    for m in txn {
        match m {
            Mop::Read { key, .. } | Mop::Append { key, .. } | Mop::Write { key, .. } => {
                *key += base
            }
        }
    }
}

fn forget_reads(txn: &mut [Mop]) {
    for m in txn {
        if let Mop::Read { seen, .. } = m {
            *seen = None;
        }
    }
}

/// `tests/isolation.rs`'s `run`, with client `t` on `ports[t % len]` and
/// keys from `base` on.
fn run(ports: &[u16], workload: Workload, level: Level, seed: u64, base: u64) -> Run {
    let started = Instant::now();
    let recorder = Recorder::default();
    let pool = Mutex::new(KeyPool::new(HOT_KEYS, MAX_WRITES_PER_KEY));
    let next = AtomicUsize::new(0);
    let in_flight = AtomicUsize::new(0);
    let max_in_flight = AtomicUsize::new(0);
    let results: Vec<_> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..THREADS)
            .map(|t| {
                let (recorder, pool, next) = (&recorder, &pool, &next);
                let (in_flight, max_in_flight) = (&in_flight, &max_in_flight);
                let port = ports[t % ports.len()];
                s.spawn(move || {
                    let mut rng = StdRng::seed_from_u64(seed.wrapping_add(t as u64));
                    let mut con = conn(port);
                    let mut process = t as u64;
                    let mut done = Vec::new();
                    let mut unexpected = Vec::new();
                    let mut conflicts = 0;
                    while next.fetch_add(1, Ordering::Relaxed) < TXNS {
                        let mut txn = pool.lock().expect("pool").txn(&mut rng, workload);
                        offset(&mut txn, base);
                        let now = in_flight.fetch_add(1, Ordering::SeqCst) + 1;
                        max_in_flight.fetch_max(now, Ordering::SeqCst);
                        recorder.invoke(process, &txn);
                        let outcome = client::run(&mut con, level, workload, &mut txn);
                        let (kind, ts) = match outcome {
                            Outcome::Committed(ts) => (Kind::Ok, ts),
                            Outcome::Conflict => {
                                conflicts += 1;
                                (Kind::Fail, None)
                            }
                            Outcome::Rejected(m) => {
                                unexpected.push(format!("port {port}: {m}"));
                                con = conn(port);
                                (Kind::Fail, None)
                            }
                            Outcome::Unknown(m) => {
                                unexpected.push(format!("port {port}: {m}"));
                                con = conn(port);
                                (Kind::Info, None)
                            }
                        };
                        if kind != Kind::Ok {
                            forget_reads(&mut txn);
                        }
                        recorder.complete(process, kind, &txn, ts);
                        in_flight.fetch_sub(1, Ordering::SeqCst);
                        if kind == Kind::Info {
                            process += THREADS as u64;
                        }
                        done.push((kind, txn, ts));
                    }
                    (done, unexpected, conflicts)
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("client thread panicked"))
            .collect()
    });
    let mut done = Vec::new();
    let mut unexpected = Vec::new();
    let mut conflicts = 0;
    for (d, u, c) in results {
        done.extend(d);
        unexpected.extend(u);
        conflicts += c;
    }

    // The final read of every key, with every client stopped.
    let keys = pool.into_inner().expect("pool").all_keys();
    let mut final_txn: Vec<Mop> = keys
        .iter()
        .map(|&key| Mop::Read {
            key: key + base,
            seen: None,
        })
        .collect();
    let mut con = conn(ports[0]);
    let mut final_state = HashMap::new();
    for _ in 0..50 {
        recorder.invoke(FINAL_PROCESS, &final_txn);
        match client::run(&mut con, level, workload, &mut final_txn) {
            Outcome::Committed(ts) => {
                recorder.complete(FINAL_PROCESS, Kind::Ok, &final_txn, ts);
                for m in &final_txn {
                    if let Mop::Read { key, seen: Some(s) } = m {
                        final_state.insert(*key, s.clone());
                    }
                }
                break;
            }
            outcome => {
                forget_reads(&mut final_txn);
                recorder.complete(FINAL_PROCESS, Kind::Fail, &final_txn, None);
                unexpected.push(format!("final read with no other clients: {outcome:?}"));
                con = conn(ports[0]);
            }
        }
    }
    assert!(
        !final_state.is_empty(),
        "the final read never committed: {unexpected:?}"
    );
    let committed = done.iter().filter(|d| d.0 == Kind::Ok).count();
    let (history, commit_ts) = recorder.finish();
    Run {
        history,
        commit_ts,
        done,
        committed,
        conflicts,
        unexpected,
        max_in_flight: max_in_flight.into_inner(),
        final_state,
        elapsed: started.elapsed(),
    }
}

/// Committed appends missing from the final state (as in `tests/isolation.rs`).
fn lost_appends(run: &Run) -> Vec<(u64, u64)> {
    let mut lost = Vec::new();
    for (kind, txn, _) in &run.done {
        if *kind != Kind::Ok {
            continue;
        }
        for m in txn {
            if let Mop::Append { key, value } = *m {
                let present = match run.final_state.get(&key) {
                    Some(Seen::List(xs)) => xs.contains(&value),
                    _ => false,
                };
                if !present {
                    lost.push((key, value));
                }
            }
        }
    }
    lost
}

/// Committed transactions that did not read their own writes.
fn own_write_misses(run: &Run) -> Vec<String> {
    let mut bad = Vec::new();
    for (kind, txn, _) in &run.done {
        if *kind != Kind::Ok {
            continue;
        }
        let mut mine: HashMap<u64, Vec<u64>> = HashMap::new();
        for m in txn {
            match m {
                Mop::Append { key, value } | Mop::Write { key, value } => {
                    mine.entry(*key).or_default().push(*value)
                }
                Mop::Read { key, seen } => {
                    let Some(own) = mine.get(key) else { continue };
                    let ok = match seen {
                        Some(Seen::List(xs)) => xs.ends_with(own),
                        Some(Seen::Reg(v)) => *v == own.last().copied(),
                        None => false,
                    };
                    if !ok {
                        bad.push(format!(
                            "{txn:?}: k{key} read {seen:?} after writing {own:?}"
                        ));
                    }
                }
            }
        }
    }
    bad
}

/// rw-register: keys whose final value is not the last write of the
/// committed transaction with the highest commit timestamp.
fn stale_registers(run: &Run) -> Vec<String> {
    if run
        .done
        .iter()
        .any(|(kind, _, ts)| *kind == Kind::Ok && ts.is_none())
    {
        return Vec::new();
    }
    let mut last: HashMap<u64, (i64, u64)> = HashMap::new();
    for (kind, txn, ts) in &run.done {
        let (Kind::Ok, Some(ts)) = (kind, ts) else {
            continue;
        };
        let mut writes: HashMap<u64, u64> = HashMap::new();
        for m in txn {
            if let Mop::Write { key, value } = *m {
                writes.insert(key, value);
            }
        }
        for (key, value) in writes {
            let slot = last.entry(key).or_insert((*ts, value));
            if *ts > slot.0 {
                *slot = (*ts, value);
            }
        }
    }
    let mut bad: Vec<String> = last
        .into_iter()
        .filter_map(|(key, (ts, value))| {
            let seen = run.final_state.get(&key);
            (seen != Some(&Seen::Reg(Some(value)))).then(|| {
                format!("k{key}: last commit (ts {ts}) wrote {value}, final read saw {seen:?}")
            })
        })
        .collect();
    bad.sort();
    bad
}

/// Runs one workload at one level over `ports` and asserts what
/// `tests/isolation.rs` asserts for that level on one node.
fn prove(ports: &[u16], workload: Workload, level: Level, base: u64) {
    let seed: u64 = rand::random();
    let run = run(ports, workload, level, seed, base);
    let name = format!("cluster-{}-{}", workload.name(), level.name());
    let path =
        std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("isolation-{name}.jsonl"));
    std::fs::write(&path, &run.history).expect("write history");

    let all_ts = run.unexpected.is_empty()
        && run
            .done
            .iter()
            .all(|(kind, _, ts)| *kind != Kind::Ok || ts.is_some());
    let checked = checker::check_history(
        &run.history,
        workload,
        all_ts.then(|| run.commit_ts.clone()),
    );
    let total = run.done.len();
    let lost = match workload {
        Workload::ListAppend | Workload::StringAppend => lost_appends(&run),
        Workload::RwRegister | Workload::HashRegister | Workload::ZsetRegister => Vec::new(),
    };
    let own_misses = own_write_misses(&run);
    let stale = match workload {
        Workload::RwRegister | Workload::HashRegister | Workload::ZsetRegister => {
            stale_registers(&run)
        }
        Workload::ListAppend | Workload::StringAppend => Vec::new(),
    };
    let orders_trusted = lost.is_empty();
    let g2 = if checked.all.anomaly_types.iter().any(|t| t == "G2-item") {
        "yes"
    } else {
        "no"
    };
    let mut notes = format!(
        "[spread] {name}: {total} txns from {THREADS} clients on {} nodes over {HOT_KEYS} hot keys (seed {seed}): \
         {} committed, {} conflicts, {} unexpected; max {} in flight; run {:.1?}\n\
         [spread] {name}: anomalies: {}; G2-item: {g2}; strict-serializable check: {}\n",
        ports.len(),
        run.committed,
        run.conflicts,
        run.unexpected.len(),
        run.max_in_flight,
        run.elapsed,
        checker::summary(&checked.all),
        checker::summary(&checked.strict),
    );
    if let Some(r) = &checked.by_commit_ts {
        notes += &format!(
            "[spread] {name}: with commit timestamps as version order: {}\n",
            checker::summary(r)
        );
    }
    println!("{notes}[spread] {name}: history: {}", path.display());

    assert!(
        run.unexpected.is_empty(),
        "{name}: {} unexpected answers (first 5): {:#?}",
        run.unexpected.len(),
        &run.unexpected[..run.unexpected.len().min(5)]
    );
    assert!(
        run.committed * 10 > total,
        "{name}: only {} of {total} transactions committed",
        run.committed
    );
    assert!(
        run.max_in_flight >= 2,
        "{name}: transactions never overlapped; the run proves nothing"
    );
    assert!(
        run.conflicts > 0,
        "{name}: no transaction lost a conflict in {total}; contention too low to test {}",
        level.name()
    );
    let bad = checker::violations(&checked.all, level, orders_trusted);
    assert!(
        bad.is_empty(),
        "{name}: {} forbids {bad:?}, adya found them (history: {}):\n{}",
        level.name(),
        path.display(),
        checker::explain(&checked.all, &bad)
    );
    if let Some(report) = &checked.by_commit_ts {
        let bad = checker::violations(report, level, true);
        assert!(
            bad.is_empty(),
            "{name}: with Elsa's commit timestamps as the version order, adya found {bad:?} (history: {}):\n{}",
            path.display(),
            checker::explain(report, &bad)
        );
    }
    assert!(
        own_misses.is_empty(),
        "{name}: {} committed transactions did not read their own writes, e.g. {:#?}",
        own_misses.len(),
        &own_misses[..own_misses.len().min(5)]
    );
    assert!(
        stale.is_empty(),
        "{name}: final state is not last-commit-wins: {stale:#?}"
    );
    assert!(
        lost.is_empty(),
        "{name}: {} committed appends missing from the final state (lost updates), e.g. {:?}",
        lost.len(),
        &lost[..lost.len().min(10)]
    );
}

/// `commits` of `INFO transactions` on node `i`.
fn commits(c: &Cluster, i: usize) -> u64 {
    let info = c.node(i).info("transactions");
    info.get("commits")
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no commits field in INFO transactions: {info:?}"))
}

#[test]
fn isolation_holds_for_clients_spread_over_a_region() {
    let _one = one_at_a_time();
    let started = Instant::now();
    let c = Cluster::start(&["a", "a", "b"], &["--wan-delay-ms", "10"]);
    let ports = [c.port(0), c.port(1)];
    let before = [commits(&c, 0), commits(&c, 1)];
    let runs = [
        (Workload::ListAppend, Level::Si),
        (Workload::ListAppend, Level::Rr),
        (Workload::RwRegister, Level::Si),
        (Workload::RwRegister, Level::Rr),
    ];
    for (n, (workload, level)) in runs.into_iter().enumerate() {
        prove(&ports, workload, level, (n as u64 + 1) * 1_000_000);
    }
    // Both nodes' shards committed (as primaries) — the keys spanned them.
    let after = [commits(&c, 0), commits(&c, 1)];
    println!(
        "[spread] commits on a's nodes' shards: {} and {}",
        after[0] - before[0],
        after[1] - before[1]
    );
    assert!(
        after[0] > before[0] && after[1] > before[1],
        "one node's shards committed nothing ({before:?} → {after:?}): the keys did not span both nodes"
    );
    // Replication ran: the one-node region ends with the same data.
    let took = c.wait_same_digest(&[0, 1, 2], Duration::from_secs(30));
    println!(
        "[spread] region b holds the same data (digest {:?}) {took:.1?} after the last run; whole test {:.1?}",
        c.digest(2),
        started.elapsed()
    );
}

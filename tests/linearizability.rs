//! Per-key linearizability inside one region, against real `elsa server`
//! processes under faults, checked by a Go checker built from
//! `tests/linearizability/porcupine` (porcupine for register keys, an exact
//! search of its own for counter keys; it needs Go, and fails loudly
//! without it).
//!
//! Clients (one connection each, one operation at a time, a 2 s timeout)
//! `SET` unique values to and `GET` register keys, and `INCR`/`INCRBY` and
//! `GET` counter keys, through every node; every operation is recorded with
//! its invoke and return time on one monotonic clock. An operation with an
//! error or no answer is indeterminate: it may take effect at any later
//! time or never, so it can never cause a false alarm. The history is then
//! checked key by key against a register and a counter model.
//!
//! - [`checker_rejects_stale_reads_and_lost_increments`] and
//!   [`checker_accepts_unknown_outcomes`]: hand-made histories, so a
//!   checker that accepts everything (or rejects every indeterminate
//!   operation) is caught.
//! - [`counter_checker_agrees_with_porcupine`]: counter keys are not
//!   checked by porcupine's search, which is exponential in the pending
//!   increments of unknown outcome, but by an exact search of the
//!   checker's own (`porcupine/counter.go`); on 20 000 random small
//!   histories it must give porcupine's verdict.
//!   [`checker_decides_many_unknown_increments_quickly`]: 20 pending ones,
//!   decided at once.
//! - [`one_node_is_linearizable`]: one node, no faults: must pass.
//! - [`one_region_under_kill_and_pause_is_linearizable`]: three nodes of
//!   one region (replication factor 3), with `kill -9` + restart and
//!   `SIGSTOP`/`SIGCONT` of one node at a time while the clients run.
//!
//! Each history is kept under cargo's test tmpdir (path printed; with a
//! violation, porcupine's HTML visualization beside it). Knobs:
//! `ELSA_LIN_SECS` (workload seconds per run, 20), `ELSA_LIN_CLIENTS`
//! (clients per node, 3; 4 on one node), `ELSA_LIN_KEYS` (register keys,
//! and as many counter keys, 4), `ELSA_LIN_TIMEOUT_MS` (per operation,
//! 2000), `ELSA_LIN_CHECK_SECS` (checker timeout, 120), `ELSA_LIN_SEED`,
//! `ELSA_LIN_SELFTEST_SEED` (the checker's self-test, 1 to 2^63 − 1),
//! and for the region `ELSA_LIN_FAULTS` (which faults take turns:
//! `kill,pause`; `kill`, `pause`, or `none` to run the same workload on
//! a healthy region).
//! The long run:
//!
//! ```text
//! ELSA_LIN_SECS=300 cargo test --test linearizability -- --include-ignored --nocapture
//! ```

mod common;

#[path = "linearizability/checker.rs"]
mod checker;
#[path = "linearizability/faults.rs"]
mod faults;
#[path = "linearizability/history.rs"]
mod history;
#[path = "linearizability/workload.rs"]
mod workload;

use std::path::PathBuf;
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use rand::rngs::StdRng;
use rand::SeedableRng;

use checker::Verdict;
use common::cluster::Cluster;
use common::{env_or, Elsa};
use history::{Annotation, Clock, History, Model, Op, F};
use workload::{Clients, Shared};

/// One live run at a time: two at once on a small machine would starve
/// the failure detector, and faults are about the nodes, not the host.
fn one_at_a_time() -> MutexGuard<'static, ()> {
    static LOCK: Mutex<()> = Mutex::new(());
    LOCK.lock().unwrap_or_else(|e| e.into_inner())
}

/// Where histories (and visualizations) are kept: one file per run name,
/// overwritten by the next run, so they do not pile up.
fn out_path(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .join("linearizability")
        .join(name)
}

fn check_timeout() -> Duration {
    Duration::from_secs(env_or("ELSA_LIN_CHECK_SECS", 120))
}

/// What a live run measured and what the checker said.
struct Outcome {
    verdict: Verdict,
    /// The run in one line, for an assertion message (the checker's
    /// report is printed before: libtest shows it with the failure).
    summary: String,
}

/// Runs `clients` per target node for the duration `during` takes (it
/// injects faults, or just waits; it returns what to annotate), reads every
/// key through every node at the end, and checks the history.
fn live_run(
    name: &str,
    targets: &[(usize, u16)],
    during: impl FnOnce(Clock, &mut StdRng) -> Vec<Annotation>,
) -> Outcome {
    let seed: u64 = env_or("ELSA_LIN_SEED", rand::random());
    let n_keys: usize = env_or("ELSA_LIN_KEYS", 4);
    let timeout = Duration::from_millis(env_or("ELSA_LIN_TIMEOUT_MS", 2000));
    println!(
        "[lin] {name}: seed {seed} (ELSA_LIN_SEED), {} clients, {n_keys}+{n_keys} keys",
        targets.len()
    );
    let keys = workload::keys(n_keys, n_keys);
    let clock = Clock::start();
    let shared = Shared::new(clock, keys.clone(), timeout);
    let mut rng = StdRng::seed_from_u64(seed);
    let clients = Clients::start(&shared, targets, seed);
    let annotations = during(clock, &mut rng);
    let mut history = History::new(&keys);
    history.ops = clients.finish();
    let ran = clock.now();
    let mut nodes: Vec<(usize, u16)> = targets.to_vec();
    nodes.dedup();
    history.ops.extend(workload::final_reads(&shared, &nodes));
    history.annotations = annotations;

    // A run in which some key saw no answered write or read proves little.
    for (key, model) in &keys {
        let writes = match model {
            Model::Register => history.answered(key, F::Write),
            Model::Counter => history.answered(key, F::Incr),
        };
        let reads = history.answered(key, F::Read);
        assert!(
            writes >= 10 && reads >= 10,
            "{name}: key {key} got only {writes} answered writes and {reads} answered reads"
        );
    }

    let base = out_path(name);
    let json = base.with_extension("json");
    let html = base.with_extension("html");
    history.save(&json);
    let _ = std::fs::remove_file(&html);
    let started = Instant::now();
    let report = checker::check(&json, Some(&html), check_timeout());
    let count = |f: F| history.ops.iter().filter(|o| o.f == f).count();
    let summary = format!(
        "{name}: {} ops in {:.1} s ({} writes, {} incrs, {} reads; {} indeterminate) by {} processes; \
         seed {seed}; history {}; checker: {:?} in {:.1?}{}",
        history.ops.len(),
        ran as f64 / 1e9,
        count(F::Write),
        count(F::Incr),
        count(F::Read),
        history.indeterminate(),
        shared.processes.load(std::sync::atomic::Ordering::Relaxed),
        json.display(),
        report.verdict,
        started.elapsed(),
        if report.verdict == Verdict::Linearizable {
            String::new()
        } else {
            format!("; visualization {}", html.display())
        },
    );
    println!("[lin] {summary}\n{}", report.output.trim_end());
    Outcome {
        verdict: report.verdict,
        summary,
    }
}

#[test]
fn one_node_is_linearizable() {
    one_node_run("one-node", &[]);
}

/// As [`one_node_is_linearizable`], with each connection moving to the
/// other worker whenever a command's key is on that worker's shard
/// (`--worker-move-after 1`; the default 256 is never reached by random
/// keys): about every other operation follows a move, and must still take
/// effect once, in order, between its invoke and its answer.
#[test]
fn one_node_with_connections_moving_is_linearizable() {
    one_node_run("one-node-moving", &["--worker-move-after", "1"]);
}

/// One node of two workers, started with `flags` too, under the register
/// and counter workload; must be linearizable. With `--worker-move-after`,
/// connections must have moved between the workers.
fn one_node_run(name: &str, flags: &[&str]) {
    let _one = one_at_a_time();
    let secs = env_or("ELSA_LIN_SECS", 20u64);
    let clients: usize = env_or("ELSA_LIN_CLIENTS", 3) + 1;
    let args: Vec<&str> = ["--workers", "2"].iter().chain(flags).copied().collect();
    let elsa = Elsa::start(&args);
    let targets = vec![(1, elsa.port); clients];
    let outcome = live_run(name, &targets, |_, _| {
        std::thread::sleep(Duration::from_secs(secs));
        Vec::new()
    });
    assert_eq!(
        outcome.verdict,
        Verdict::Linearizable,
        "{}",
        outcome.summary
    );
    if !flags.is_empty() {
        let moved = common::clients_moved(elsa.port);
        println!("[lin] {name}: connections moved between workers {moved} times");
        assert!(
            moved > 100,
            "only {moved} moves: the run did not exercise them"
        );
    }
}

/// At acknowledgement level `region` (the default; `ELSA_LIN_ACK` picks
/// another) a write is acknowledged, and a read answers a value, only once
/// every replica of the key in the region has it, and a node that was
/// declared dead catches up before it serves again. Before that (issue 12)
/// this failed at the first fault of every run: a killed or paused
/// primary's last ~50 ms of acknowledged writes were lost on failover
/// (stale reads, `INCR`s continuing from an older count), and a paused
/// node, resumed, served its pre-pause data. At `ELSA_LIN_ACK=local` it
/// still fails that way: that is the documented loss window of `local`.
#[test]
fn one_region_under_kill_and_pause_is_linearizable() {
    let _one = one_at_a_time();
    let secs = env_or("ELSA_LIN_SECS", 20u64);
    let per_node: usize = env_or("ELSA_LIN_CLIENTS", 3);
    let kinds = faults::Kind::parse_list(&env_or("ELSA_LIN_FAULTS", "kill,pause".to_string()));
    let ack = env_or("ELSA_LIN_ACK", "region".to_string());
    let mut cluster = Cluster::start(
        &["r1", "r1", "r1"],
        // Every acknowledged write is on its node's disk: what a kill
        // loses is then replication's doing, not the fsync policy's.
        &[
            "--replication-factor",
            "3",
            "--appendfsync",
            "always",
            "--ack",
            &ack,
        ],
    );
    let targets: Vec<(usize, u16)> = (0..cluster.len())
        .flat_map(|i| {
            std::iter::repeat_n((cluster.specs[i].id as usize, cluster.port(i)), per_node)
        })
        .collect();
    let outcome = live_run("one-region-faults", &targets, |clock, rng| {
        let until = Duration::from_secs(secs);
        let notes = faults::run(&mut cluster, clock, until, &kinds, rng);
        // A calm spell at the end: the clients of the last victim are back.
        std::thread::sleep(Duration::from_secs(2));
        notes
    });
    assert_eq!(
        outcome.verdict,
        Verdict::Linearizable,
        "{}",
        outcome.summary
    );
}

/// An operation of a hand-made history.
fn op(process: usize, key: &str, f: F, value: Option<&str>, call: u64, ret: Option<u64>) -> Op {
    Op {
        process,
        node: 0,
        key: key.into(),
        f,
        value: value.map(String::from),
        n: 1,
        call,
        ret,
    }
}

fn incr(
    process: usize,
    key: &str,
    n: i64,
    answer: Option<&str>,
    call: u64,
    ret: Option<u64>,
) -> Op {
    Op {
        n,
        ..op(process, key, F::Incr, answer, call, ret)
    }
}

/// Saves and checks a hand-made history.
fn check_control(name: &str, keys: &[(&str, Model)], ops: Vec<Op>) -> checker::Report {
    let keys: Vec<(String, Model)> = keys.iter().map(|(k, m)| (k.to_string(), *m)).collect();
    let mut history = History::new(&keys);
    history.ops = ops;
    let base = out_path(name);
    let (json, html) = (base.with_extension("json"), base.with_extension("html"));
    history.save(&json);
    let _ = std::fs::remove_file(&html);
    let report = checker::check(&json, Some(&html), Duration::from_secs(10));
    assert_eq!(
        html.exists(),
        report.verdict == Verdict::NotLinearizable,
        "a visualization goes with a violation, and only then"
    );
    report
}

/// Each key of this history breaks linearizability in its own way; the
/// checker must name each.
#[test]
fn checker_rejects_stale_reads_and_lost_increments() {
    use Model::{Counter, Register};
    let report = check_control(
        "control-reject",
        &[
            ("nil-after-write", Register),
            ("old-value", Register),
            ("lost-incr", Counter),
            ("unknown-twice", Counter),
        ],
        vec![
            // A read that starts after a write was acknowledged misses it.
            op(0, "nil-after-write", F::Write, Some("a"), 0, Some(10)),
            op(1, "nil-after-write", F::Read, None, 20, Some(30)),
            // A read returns a value already overwritten.
            op(2, "old-value", F::Write, Some("a"), 0, Some(10)),
            op(2, "old-value", F::Write, Some("b"), 20, Some(30)),
            op(3, "old-value", F::Read, Some("a"), 40, Some(50)),
            // Two increments one after the other both answer 1.
            incr(4, "lost-incr", 1, Some("1"), 0, Some(10)),
            incr(5, "lost-incr", 1, Some("1"), 20, Some(30)),
            // An increment of unknown outcome can explain +2, not +3.
            incr(6, "unknown-twice", 2, None, 0, None),
            incr(7, "unknown-twice", 1, Some("3"), 10, Some(20)),
            incr(7, "unknown-twice", 1, Some("5"), 30, Some(40)),
        ],
    );
    assert_eq!(
        report.verdict,
        Verdict::NotLinearizable,
        "{}",
        report.output
    );
    for key in ["nil-after-write", "old-value", "lost-incr", "unknown-twice"] {
        assert!(
            report
                .output
                .contains(&format!("key {key}: not linearizable")),
            "the checker did not name {key}:\n{}",
            report.output
        );
    }
}

/// The counter check (`counter.go`, which stands in for porcupine's search
/// on counter keys) must agree with porcupine on thousands of random small
/// counter histories, with and without increments of unknown outcome,
/// linearizable and not (porcupine decides small ones in milliseconds).
#[test]
fn counter_checker_agrees_with_porcupine() {
    let seed: u64 = env_or("ELSA_LIN_SELFTEST_SEED", 1 + rand::random::<u32>() as u64);
    let started = Instant::now();
    let (agreed, output) = checker::selftest(20_000, seed);
    println!("{}\n(in {:.1?})", output.trim_end(), started.elapsed());
    assert!(
        agreed,
        "the counter check and porcupine disagree (ELSA_LIN_SELFTEST_SEED={seed} replays it):\n{output}"
    );
    // "…: 13837 linearizable, 6163 not linearizable, 0 disagreements"
    let summary = output
        .lines()
        .find(|l| l.ends_with(" disagreements"))
        .unwrap_or_else(|| panic!("no summary in the self-test's report:\n{output}"));
    let counts: Vec<usize> = summary
        .rsplit(": ")
        .next()
        .unwrap()
        .split(", ")
        .map(|part| part.split(' ').next().unwrap().parse().unwrap())
        .collect();
    assert!(
        counts[0] >= 1000 && counts[1] >= 1000,
        "the self-test should exercise both verdicts: {summary}"
    );
}

/// A counter key whose 20 increments of unknown outcome are pending during
/// the whole history, taking effect now and then (`extra` is added to the
/// last answer). Porcupine's search would try every subset of the pending
/// ones at every point: it does not finish.
fn many_unknown_increments(extra: i64) -> Vec<Op> {
    let amounts = [
        1, 1, 1, 1, 1, 1, 2, 3, 5, 8, 13, 21, 34, 55, 89, 144, 233, 377, 610, 987,
    ];
    let mut ops: Vec<Op> = (0..amounts.len())
        .map(|i| incr(100 + i, "many", amounts[i], None, 10 * i as u64, None))
        .collect();
    // What the unknown ones add just before each of these steps; several
    // sums can be made more than one way (34 = 13 + 21, 377 = 144 + 233,
    // …), and the six +1s take all six increments of 1.
    let jumps = [
        (10, 1),
        (20, 1),
        (30, 1),
        (40, 1),
        (50, 1),
        (60, 1),
        (70, 3),
        (80, 34),
        (90, 377),
        (100, 55 + 610 + 987),
    ];
    let mut count = 0;
    let mut t = 200;
    for step in 0..240 {
        count += jumps
            .iter()
            .find(|(s, _)| *s == step)
            .map_or(0, |(_, n)| *n);
        if step % 2 == 0 {
            count += 1000;
            let answer = count.to_string();
            ops.push(incr(0, "many", 1000, Some(&answer), t, Some(t + 5)));
        } else {
            let answer = count.to_string();
            ops.push(op(0, "many", F::Read, Some(&answer), t, Some(t + 5)));
        }
        t += 10;
    }
    let answer = (count + extra).to_string();
    ops.push(op(1, "many", F::Read, Some(&answer), t, Some(t + 5)));
    ops
}

/// The counter check decides a key with 20 pending increments of unknown
/// outcome at once, linearizable or not (the one more the last read sees
/// would need a seventh increment of 1).
#[test]
fn checker_decides_many_unknown_increments_quickly() {
    for (name, extra, verdict) in [
        ("control-many-unknowns", 0, Verdict::Linearizable),
        ("control-many-unknowns-bad", 1, Verdict::NotLinearizable),
    ] {
        let mut history = History::new(&[("many".to_string(), Model::Counter)]);
        history.ops = many_unknown_increments(extra);
        let json = out_path(name).with_extension("json");
        history.save(&json);
        // A verdict within the checker's own timeout: porcupine's search
        // (what counter keys had before `counter.go`) may keep 2^20 cache
        // entries per point here, and with 16 unknown increments on a
        // recorded history it was still undecided after two minutes. No
        // wall-clock bound of our own: CI's load (and the first call's
        // `go build`, 6.5 s on one run) made that a flake, not a proof.
        let report = checker::check(&json, None, Duration::from_secs(30));
        assert_eq!(report.verdict, verdict, "{name}:\n{}", report.output);
        if verdict == Verdict::NotLinearizable {
            assert!(
                report.output.contains("key many: not linearizable")
                    && report.output.contains("increments of unknown outcome"),
                "{name}: the report does not say why:\n{}",
                report.output
            );
        }
    }
}

/// Operations whose outcome is unknown took effect (or not) at any time
/// after their call: none of this is a violation.
#[test]
fn checker_accepts_unknown_outcomes() {
    use Model::{Counter, Register};
    let report = check_control(
        "control-accept",
        &[("r", Register), ("c", Counter), ("fresh", Counter)],
        vec![
            op(0, "r", F::Write, Some("a"), 0, Some(10)),
            // Unknown outcome, seen only long after its client gave up.
            op(1, "r", F::Write, Some("b"), 15, None),
            op(2, "r", F::Read, Some("a"), 20, Some(30)),
            op(2, "r", F::Read, Some("b"), 40, Some(50)),
            // Unknown and never seen: it may never have happened.
            op(3, "r", F::Write, Some("c"), 60, None),
            op(2, "r", F::Read, Some("b"), 70, Some(80)),
            // Concurrent with the write of d: either answer is fine.
            op(4, "r", F::Write, Some("d"), 90, Some(120)),
            op(2, "r", F::Read, Some("b"), 100, Some(110)),
            op(5, "r", F::Read, Some("d"), 100, Some(130)),
            // A counter: an increment of unknown outcome shows up later.
            incr(6, "c", 2, None, 0, None),
            incr(7, "c", 1, Some("1"), 5, Some(8)),
            incr(7, "c", 1, Some("4"), 10, Some(20)),
            op(8, "c", F::Read, Some("4"), 30, Some(40)),
            // One that never shows up.
            incr(9, "c", 5, None, 50, None),
            op(8, "c", F::Read, Some("4"), 60, Some(70)),
            // A counter never incremented reads as nil, and counts 0.
            op(10, "fresh", F::Read, None, 0, Some(10)),
            incr(10, "fresh", 1, Some("1"), 20, Some(30)),
        ],
    );
    assert_eq!(report.verdict, Verdict::Linearizable, "{}", report.output);
}

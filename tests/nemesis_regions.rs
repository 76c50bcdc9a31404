//! Faults across two regions of two nodes each, as an operator would see
//! them (network namespaces and nftables, `tests/common/hosts.rs`), with
//! `ownership = leases` and two replicas per region.
//!
//! Each region keeps a bank of five accounts spread over the shards (so a
//! transfer is a multi-shard transaction); a client on every node moves
//! money between its own region's accounts at `BEGIN SI`, another reads
//! snapshots of both banks (`BEGIN SI` over all five, and a lone `MGET`).
//! Meanwhile faults at random, one at a time for 4–9 s each:
//!
//! - the two regions cut apart (each keeps serving its own bank);
//! - one node cut off from every other (its region, two nodes, has lost
//!   its majority and serves nothing until the heal — the stated choice of
//!   `docs/regions.md`);
//! - `kill -9` of a node, started again after the hold;
//! - `SIGSTOP` of a node, `SIGCONT` after the hold;
//! - a node's clock 400 ms ahead or behind (`ELSA.FAULT CLOCK`, below
//!   `max-clock-drift-ms`);
//! - one node cut off from the other region only (not drawn by default:
//!   `ELSA_NEMESIS_FAULTS`; its own test below).
//!
//! Checked over the whole run: every committed snapshot of either bank,
//! through any node, holds the bank's total (no transaction of this region
//! or of the other seen in part, during a fault or after it); after the
//! last heal every node reaches the same `ELSA.DIGEST`, and every node
//! reads the same balances, summing to the total.
//!
//! `ELSA_NEMESIS_SEED` replays a run (default 6; `random` draws one),
//! `ELSA_NEMESIS_ROUNDS` (default 4)
//! sets its length, `ELSA_NEMESIS_OWNERSHIP` runs it with `gossip`,
//! `ELSA_NEMESIS_FLAGS` adds server flags, `ELSA_NEMESIS_FAULTS` draws
//! only the kinds it lists (`regions,node,kill,pause,clock` as listed
//! above, and `remote`: one node cut off from the other region only), or
//! `all` six.

mod common;

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use redis::Value;

use common::hosts::{broken, reconnected, Hosts};

const A1: usize = 0;
const A2: usize = 1;
const B1: usize = 2;
const B2: usize = 3;
const ALL: [usize; 4] = [A1, A2, B1, B2];
const ACCOUNTS: usize = 5;
const TOTAL: i64 = 100 * ACCOUNTS as i64;

fn region_of(host: usize) -> &'static str {
    if host < B1 {
        "a"
    } else {
        "b"
    }
}

fn accounts(region: &str) -> Vec<String> {
    (0..ACCOUNTS).map(|i| format!("nb:{region}:{i}")).collect()
}

fn text(v: &Value) -> Option<String> {
    match v {
        Value::BulkString(d) => Some(String::from_utf8_lossy(d).into_owned()),
        Value::SimpleString(s) => Some(s.clone()),
        Value::Int(n) => Some(n.to_string()),
        _ => None,
    }
}

fn num(v: &Value) -> i64 {
    text(v).and_then(|s| s.parse().ok()).unwrap_or(0)
}

/// Ends a transaction left open by an error; false if the connection is
/// gone (the caller opens another).
fn abort(con: &mut redis::Connection) -> bool {
    match redis::cmd("ABORT").query::<Value>(con) {
        Ok(_) => true,
        Err(e) => !broken(&e),
    }
}

/// One transfer at SI between two accounts of `keys`: `Some(true)` if it
/// committed, `Some(false)` if refused or aborted, `None` if the
/// connection broke (the outcome may be either).
fn transfer(
    con: &mut redis::Connection,
    keys: &[String],
    from: usize,
    to: usize,
    n: i64,
) -> Option<bool> {
    let step = |con: &mut redis::Connection, cmd: &redis::Cmd| cmd.query::<Value>(con);
    let run = |con: &mut redis::Connection| -> redis::RedisResult<bool> {
        step(con, redis::cmd("BEGIN").arg("SI"))?;
        let a = step(con, redis::cmd("GET").arg(&keys[from]))?;
        let b = step(con, redis::cmd("GET").arg(&keys[to]))?;
        step(con, redis::cmd("SET").arg(&keys[from]).arg(num(&a) - n))?;
        step(con, redis::cmd("SET").arg(&keys[to]).arg(num(&b) + n))?;
        Ok(matches!(step(con, &redis::cmd("COMMIT"))?, Value::Int(_)))
    };
    match run(con) {
        Ok(done) => Some(done),
        Err(e) if broken(&e) => None,
        Err(_) => abort(con).then_some(false),
    }
}

/// A snapshot of `keys`: `BEGIN SI` … `COMMIT` when `si`, else one `MGET`.
/// `Ok(None)` when refused (no snapshot to judge), `Err` when the
/// connection broke.
fn snapshot(
    con: &mut redis::Connection,
    keys: &[String],
    si: bool,
) -> Result<Option<Vec<i64>>, ()> {
    if !si {
        return match redis::cmd("MGET").arg(keys).query::<Vec<Value>>(con) {
            Ok(v) => Ok(Some(v.iter().map(num).collect())),
            Err(e) if broken(&e) => Err(()),
            Err(_) => Ok(None),
        };
    }
    let run = |con: &mut redis::Connection| -> redis::RedisResult<Option<Vec<i64>>> {
        redis::cmd("BEGIN").arg("SI").query::<Value>(con)?;
        let mut seen = Vec::new();
        for k in keys {
            seen.push(num(&redis::cmd("GET").arg(k).query::<Value>(con)?));
        }
        let committed = redis::cmd("COMMIT").query::<Value>(con)?;
        Ok(matches!(committed, Value::Int(_)).then_some(seen))
    };
    match run(con) {
        Ok(seen) => Ok(seen),
        Err(e) if broken(&e) => Err(()),
        Err(_) => abort(con).then_some(None).ok_or(()),
    }
}

/// What the clients did, shared with the test.
#[derive(Default)]
struct Tally {
    commits: AtomicUsize,
    unknown: AtomicUsize,
    snapshots: AtomicUsize,
    remote: AtomicUsize,
    wrong: Mutex<Vec<String>>,
}

/// On host `i` until `stop`: a transfer thread in its own region and a
/// reader of both banks, each opening a new connection whenever one breaks.
fn clients(
    hosts: &Hosts,
    i: usize,
    stop: &Arc<AtomicBool>,
    tally: &Arc<Tally>,
    t0: Instant,
) -> Vec<std::thread::JoinHandle<()>> {
    let (ns, addr) = (hosts.hosts[i].ns.clone(), hosts.hosts[i].addr);
    let writer = {
        let (ns, stop, tally) = (ns.clone(), stop.clone(), tally.clone());
        std::thread::spawn(move || {
            let keys = accounts(region_of(i));
            let mut c = None;
            let mut x = 0x9e37_79b9_7f4a_7c15u64 ^ i as u64;
            while !stop.load(Ordering::Relaxed) {
                let Some(con) = reconnected(&mut c, &ns, addr) else {
                    continue;
                };
                x = x
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                let from = (x >> 33) as usize % ACCOUNTS;
                let to = (from + 1 + (x >> 40) as usize % (ACCOUNTS - 1)) % ACCOUNTS;
                match transfer(con, &keys, from, to, 1 + (x >> 50) as i64 % 10) {
                    Some(true) => {
                        tally.commits.fetch_add(1, Ordering::Relaxed);
                    }
                    Some(false) => std::thread::sleep(Duration::from_millis(5)),
                    None => {
                        tally.unknown.fetch_add(1, Ordering::Relaxed);
                        c = None;
                    }
                }
            }
        })
    };
    let reader = {
        let (stop, tally) = (stop.clone(), tally.clone());
        std::thread::spawn(move || {
            let mut c = None;
            let mut n = 0usize;
            while !stop.load(Ordering::Relaxed) {
                let Some(con) = reconnected(&mut c, &ns, addr) else {
                    continue;
                };
                n += 1;
                let bank = ["a", "b"][n % 2];
                let si = n % 4 < 2;
                match snapshot(con, &accounts(bank), si) {
                    Err(()) => c = None,
                    Ok(None) => std::thread::sleep(Duration::from_millis(5)),
                    Ok(Some(seen)) => {
                        tally.snapshots.fetch_add(1, Ordering::Relaxed);
                        if bank != region_of(i) {
                            tally.remote.fetch_add(1, Ordering::Relaxed);
                        }
                        let sum: i64 = seen.iter().sum();
                        // Before the opening MSET has arrived, a bank reads 0.
                        if sum != TOTAL && sum != 0 {
                            tally.wrong.lock().unwrap().push(format!(
                                "h{} at {:.2?} read bank {bank} ({}) as {seen:?}, sum {sum}",
                                i + 1,
                                t0.elapsed(),
                                if si { "BEGIN SI" } else { "MGET" }
                            ));
                        }
                    }
                }
            }
        })
    };
    vec![writer, reader]
}

/// Waits until every node lists four members, has caught up, and (with
/// leases) holds a lease.
fn settle(hosts: &Hosts, leases: bool) {
    let long = Duration::from_secs(90);
    hosts.wait_settled(&ALL, 4, long);
    if leases {
        for i in ALL {
            hosts.wait_until(i, "a lease held", long, || hosts.lease_held(i));
        }
    }
}

/// Before the fixes of 2026-11-30 (`docs/regions.md`, *Transactions
/// arrive whole*, *Streams that lose nothing*, *Parked parts survive a
/// restart*) every run failed, then most passed with bursts of torn
/// snapshots right after a regions cut healed or a region got its majority
/// back or a node of the reading region restarted; since, every seed tried
/// passed (the closing note of session 36 gives the long runs) until the
/// nemesis drew a node killed or cut off between its shards' installs of
/// the other region's transfers: the other node's resolver released the
/// part that went in (3 of 20 random seeds, 2026-12-04; `docs/regions.md`,
/// *Transactions arrive whole*). CI runs seed 6;
/// `ELSA_NEMESIS_SEED=random` draws one.
#[test]
fn two_regions_under_random_faults_keep_every_bank_whole() {
    use rand::{Rng, SeedableRng};
    let env = |name: &str, default: u64| common::env_or(name, default);
    // CI runs seed 6 (h2's clock 400 ms behind twice, h4 paused, h2
    // paused — the last hit the pause case of `docs/regions.md` now and
    // then until the new primary owed what the old one's streams held,
    // *A new primary owes what the old one's streams held*); long runs
    // give seeds (`ELSA_NEMESIS_SEED=random` draws one).
    let seed = match std::env::var("ELSA_NEMESIS_SEED").as_deref() {
        Ok("random") => rand::random::<u32>() as u64,
        _ => env("ELSA_NEMESIS_SEED", 6),
    };
    let rounds = env("ELSA_NEMESIS_ROUNDS", 4);
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let kinds: Vec<usize> = match std::env::var("ELSA_NEMESIS_FAULTS") {
        Ok(list) if list == "all" => (0..6).collect(),
        Ok(list) => list
            .split(',')
            .map(|k| {
                ["regions", "node", "kill", "pause", "clock", "remote"]
                    .iter()
                    .position(|n| *n == k.trim())
                    .unwrap_or_else(|| panic!("ELSA_NEMESIS_FAULTS: unknown kind {k:?}"))
            })
            .collect(),
        Err(_) => (0..5).collect(),
    };
    let fault = |hosts: &mut Hosts| {
        let x = rng.gen_range(0..4usize);
        let others: Vec<usize> = ALL.iter().copied().filter(|&j| j != x).collect();
        let hold = Duration::from_secs(rng.gen_range(4..=9));
        // Drawn from five kinds unless the sixth is asked for, so that a
        // seed replays the schedule it drew before the sixth existed.
        let kind = rng.gen_range(0..if kinds.contains(&5) { 6 } else { 5 });
        let kind = if kinds.contains(&kind) {
            kind
        } else {
            kinds[kind % kinds.len()]
        };
        let what = match kind {
            0 => {
                hosts.cut(&[A1, A2], &[B1, B2]);
                std::thread::sleep(hold);
                hosts.heal();
                "regions a and b cut apart".to_string()
            }
            1 => {
                hosts.cut(&[x], &others);
                std::thread::sleep(hold);
                hosts.heal();
                format!("h{} cut off from every other node", x + 1)
            }
            2 => {
                hosts.kill(x);
                std::thread::sleep(hold);
                hosts.restart(x);
                format!("h{} killed and restarted", x + 1)
            }
            3 => {
                hosts.pause(x, true);
                std::thread::sleep(hold);
                hosts.pause(x, false);
                format!("h{} paused", x + 1)
            }
            4 => {
                let ms: i64 = if rng.gen_bool(0.5) { 400 } else { -400 };
                hosts.skew_clock(x, ms, hold);
                format!("h{} clock {ms} ms", x + 1)
            }
            _ => {
                cut_from_other_region(hosts, x, hold);
                format!("h{} cut off from the other region", x + 1)
            }
        };
        (what, hold)
    };
    run_banks(&format!("seed {seed}"), rounds, fault);
}

/// One node cut off from the nodes of the other region only (a broken
/// route between two data centres, one host's uplink): its own region
/// still reaches it and it keeps serving.
fn cut_from_other_region(hosts: &Hosts, x: usize, hold: Duration) {
    let far: Vec<usize> = ALL
        .iter()
        .copied()
        .filter(|&j| region_of(j) != region_of(x))
        .collect();
    hosts.cut(&[x], &far);
    std::thread::sleep(hold);
    hosts.heal();
}

/// A node of region a cut off from region b only, while region a moves
/// money: its gossip to region b waits, but its region's other node,
/// which replicates every key, still reaches region b and repairs by
/// anti-entropy. A backup's repair must not overtake the primary's gossip
/// (CI, stop 62: right after a cut between the regions healed, the node
/// whose streams caught up first shipped the latest state of the other's
/// keys, and region b read bank a with a wrong total in 10 snapshots).
/// Now what a backup of another region ships merges only where it changes
/// nothing shown (`docs/regions.md`, *Streams that lose nothing*).
#[test]
fn a_node_cut_off_from_the_other_region_leaves_every_bank_whole() {
    let mut turn = 0;
    let fault = |hosts: &mut Hosts| {
        let x = [A1, A2, B1][turn % 3];
        turn += 1;
        let hold = Duration::from_secs(6);
        cut_from_other_region(hosts, x, hold);
        (format!("h{} cut off from the other region", x + 1), hold)
    };
    run_banks("partial cuts", 3, fault);
}

/// Four nodes, two regions, both banks and their clients; `rounds`
/// faults from `fault` (which plays one and says what it was), each
/// followed by a settle; then the checks of the module doc.
fn run_banks(label: &str, rounds: u64, mut fault: impl FnMut(&mut Hosts) -> (String, Duration)) {
    // One run at a time: two at once on a small machine starve the
    // failure detector before any fault is injected.
    static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let ownership =
        std::env::var("ELSA_NEMESIS_OWNERSHIP").unwrap_or_else(|_| "leases".to_string());
    let leases = ownership == "leases";
    eprintln!("nemesis regions: {label}, {rounds} rounds, ownership {ownership}");
    let mut hosts = Hosts::new("nemg", 4);
    let flags = [
        "--replication-factor",
        "2",
        "--ownership",
        &ownership,
        "--fault-injection",
        "true",
    ];
    // More flags, to explore (e.g. `--appendfsync always`).
    let more = std::env::var("ELSA_NEMESIS_FLAGS").unwrap_or_default();
    let mut flags = flags.to_vec();
    flags.extend(more.split_whitespace());
    for (i, id) in ALL.iter().zip(1..) {
        let seeds: Vec<usize> = ALL.iter().copied().filter(|j| j != i).collect();
        hosts.start(*i, region_of(*i), id, &seeds, &flags);
    }
    settle(&hosts, leases);
    for (r, h) in [("a", A1), ("b", B1)] {
        let mut mset = redis::cmd("MSET");
        for k in accounts(r) {
            mset.arg(k).arg(100);
        }
        // As a Redis Cluster client does, again on TRYAGAIN (a slot whose
        // takeover is still syncing).
        hosts.wait_until(h, "the opening MSET", Duration::from_secs(30), || {
            hosts
                .try_conn(h)
                .and_then(|mut c| mset.query::<Value>(&mut c))
                .is_ok()
        });
    }
    // Every node sees both opening balances before the clients start.
    for i in ALL {
        for r in ["a", "b"] {
            hosts.wait_until(i, "the opening balances", Duration::from_secs(30), || {
                let seen: Vec<Value> = hosts.query(i, redis::cmd("MGET").arg(accounts(r)));
                seen.iter().all(|v| num(v) == 100)
            });
        }
    }

    let t0 = Instant::now();
    let stop = Arc::new(AtomicBool::new(false));
    let tally = Arc::new(Tally::default());
    let threads: Vec<_> = ALL
        .iter()
        .flat_map(|&i| clients(&hosts, i, &stop, &tally, t0))
        .collect();
    std::thread::sleep(Duration::from_secs(2));
    let mut faults = Vec::new();
    for _ in 0..rounds {
        let started = t0.elapsed();
        let (what, hold) = fault(&mut hosts);
        settle(&hosts, leases);
        faults.push(format!(
            "{started:.1?}: {what} for {hold:?} (settled at {:.1?})",
            t0.elapsed()
        ));
        std::thread::sleep(Duration::from_secs(2));
    }
    stop.store(true, Ordering::Relaxed);
    for t in threads {
        t.join().unwrap();
    }
    let converged = hosts.wait_same_digest(&ALL, Duration::from_secs(90));
    let balances: Vec<Vec<i64>> = ALL
        .iter()
        .map(|&i| {
            let mut keys = accounts("a");
            keys.extend(accounts("b"));
            let seen: Vec<Value> = hosts.query(i, redis::cmd("MGET").arg(keys));
            seen.iter().map(num).collect()
        })
        .collect();
    let wrong = tally.wrong.lock().unwrap().clone();
    // Parts of the other region's transactions shown alone (the escape of
    // `docs/regions.md`, *In order*), per node.
    let field = |i: usize, section: &str, name: &str| {
        let info: String = hosts.query(i, redis::cmd("INFO").arg(section));
        info.lines()
            .find_map(|l| l.strip_prefix(name)?.strip_prefix(':'))
            .unwrap_or("?")
            .trim()
            .to_string()
    };
    let alone: Vec<String> = ALL
        .iter()
        .map(|&i| field(i, "gossip", "remote_parts_shown_alone"))
        .collect();
    // Gossip frames a sender gave up before they reached a node (repaired
    // by anti-entropy, where a transaction may be seen in part).
    let gaps: Vec<String> = ALL
        .iter()
        .map(|&i| field(i, "replication", "gossip_gaps"))
        .collect();
    eprintln!(
        "nemesis regions {label}: {faults:#?}\n{} transfers committed, {} of unknown \
         outcome; {} snapshots ({} of the other region's bank), {} wrong; converged \
         {converged:.1?} after the clients stopped; balances {balances:?}; parts shown alone \
         per node {alone:?}; gossip gaps per node {gaps:?}",
        tally.commits.load(Ordering::Relaxed),
        tally.unknown.load(Ordering::Relaxed),
        tally.snapshots.load(Ordering::Relaxed),
        tally.remote.load(Ordering::Relaxed),
        wrong.len()
    );
    assert!(
        tally.commits.load(Ordering::Relaxed) > 50 && tally.remote.load(Ordering::Relaxed) > 50,
        "too little done to judge"
    );
    assert!(
        wrong.is_empty(),
        "{label}: {} snapshots with a wrong total, e.g. {:#?}",
        wrong.len(),
        &wrong[..wrong.len().min(8)]
    );
    for (i, b) in balances.iter().enumerate() {
        assert_eq!(b, &balances[0], "{label}: h{} disagrees with h1", i + 1);
        assert_eq!(b[..ACCOUNTS].iter().sum::<i64>(), TOTAL, "{label}: bank a");
        assert_eq!(b[ACCOUNTS..].iter().sum::<i64>(), TOTAL, "{label}: bank b");
    }
}

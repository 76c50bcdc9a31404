//! The run loop of every live isolation run: client threads draw
//! transactions (or pipelines of lone commands) from one key pool, run them
//! against one node or spread over a region's nodes, and record everything
//! in one history; then one final read of every key.
//!
//! A [`Plan`] says what to mix in:
//!
//! - **pipelines**: an iteration sends 2–6 lone commands (and maybe a
//!   `PING`/`ECHO`) as one pipeline, no MULTI. Each lone command is its own
//!   one-micro-op transaction in the history, recorded on the client's
//!   process in pipeline order, so adya's process order says "this client
//!   ran them in this order" — what Elsa promises (a pipeline answers as if
//!   its commands ran one at a time, in order). They are recorded one after
//!   the other once the replies are in, which claims a real-time order
//!   among them (and after whatever finished while they were in flight)
//!   that they do not have: such runs are checked with process order, not
//!   real time.
//! - **admin commands in MULTI**: read-only admin commands queued after
//!   (or anywhere among) the data commands of WATCH/MULTI/EXEC
//!   transactions ([`AdminIn`]; their answers are checked in `client.rs`:
//!   one reply per queued command, in order, of the right shape).
//! - **TTLs**: see `ttl.rs`.
//! - **faults**: errors and timeouts are expected (the test injects them);
//!   a client reconnects after each, and what its transaction did is
//!   recorded as Jepsen does: failed when it certainly did not commit
//!   (error before COMMIT/EXEC, conflict), `info` when it may have.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use crate::client::{self, Admin, Extras, Level, Lone, Outcome, Slot, Trace};
use crate::ttl;
use crate::workload::{KeyPool, Kind, Mop, Recorder, Seen, Workload};

/// Writes a key takes before it retires from the hot pool.
pub const MAX_WRITES_PER_KEY: u64 = 32;
/// Process id of the final read of every key.
pub const FINAL_PROCESS: u64 = 1_000_000;

/// When a run stops.
pub enum Until<'a> {
    /// After this many iterations (transactions or pipelines) in all.
    Count(usize),
    /// When `stop` is set (by the fault schedule); `started` counts the
    /// iterations begun so far, for whoever sets it.
    Stopped {
        stop: &'a AtomicBool,
        started: &'a AtomicUsize,
    },
}

/// Where admin commands go inside MULTI.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum AdminIn {
    #[default]
    Nowhere,
    /// 1–3 of them, after every data command.
    Last,
    /// 1–3 of them, anywhere: first, last, between data commands (DBSIZE,
    /// which splits an EXEC, only last).
    Anywhere,
}

/// What to mix into a run.
#[derive(Clone, Copy, Debug, Default)]
pub struct Mix {
    /// Probability that an iteration is a pipeline of lone commands.
    pub pipelines: f64,
    /// Where to queue read-only admin commands inside MULTI (WATCH level).
    pub admin_in_multi: AdminIn,
    /// TTL riders and lingering transactions (rw-register; `ttl.rs`).
    pub ttl: bool,
    /// Half the clients (odd threads) run their transactions at this level
    /// instead of the plan's, on the same keys: levels side by side.
    pub also: Option<Level>,
}

/// One live run.
pub struct Plan<'a> {
    pub name: String,
    pub workload: Workload,
    pub level: Level,
    /// Client threads; thread `t` talks to `ports[t % ports.len()]`.
    pub threads: usize,
    pub ports: Vec<u16>,
    pub hot_keys: usize,
    pub seed: u64,
    /// Every history key is offset by this (runs sharing a store use
    /// disjoint ranges).
    pub base: u64,
    pub until: Until<'a>,
    pub mix: Mix,
    /// Errors and timeouts are the test's doing: count them, reconnect,
    /// go on. Without faults every one is unexpected (and fails the test).
    pub faults: bool,
    /// Connect, read and write timeout of every client connection.
    pub timeout: Duration,
}

/// One finished iteration's Elle transaction (a pipeline gives one per lone
/// command). Unlike the history, it keeps what the reads of a transaction
/// that did not commit saw.
#[derive(Clone, Debug)]
pub struct Done {
    pub kind: Kind,
    pub txn: Vec<Mop>,
    pub ts: Option<i64>,
    /// A lone command of a pipeline.
    pub lone: bool,
    /// TTL riders (empty unless a TTL run).
    pub ttl: Vec<Option<u64>>,
    pub trace: Trace,
    pub invoked: Instant,
    pub completed: Instant,
    /// Its completion's index in the history.
    pub index: u64,
}

/// One finished run.
pub struct Run {
    pub history: String,
    pub commit_ts: HashMap<u64, i64>,
    pub done: Vec<Done>,
    /// Transactions and pipelines started.
    pub iterations: usize,
    pub committed: usize,
    pub conflicts: usize,
    /// Certainly not committed because of an error (faults only).
    pub errors: usize,
    /// Outcome unknown (`info`).
    pub indeterminate: usize,
    /// Error replies, broken connections, garbled values, wrong admin
    /// answers — in a run without faults, none expected.
    pub unexpected: Vec<String>,
    pub max_in_flight: usize,
    /// What the final read (after every client stopped) saw, per key.
    pub final_state: HashMap<u64, Seen>,
    /// TTL runs: times the final read, alone, lost a conflict.
    pub final_conflicts: usize,
    pub elapsed: Duration,
}

/// A connection with `timeout` on connect, reads and writes.
pub fn connect(port: u16, timeout: Duration) -> redis::RedisResult<redis::Connection> {
    let client = redis::Client::open(format!("redis://127.0.0.1:{port}/"))?;
    let con = client.get_connection_with_timeout(timeout)?;
    con.set_read_timeout(Some(timeout))?;
    con.set_write_timeout(Some(timeout))?;
    Ok(con)
}

/// A connection to `port`: without faults the first try must work; with
/// faults, tries until it does or `stop` says the run is over.
fn connect_patiently(plan: &Plan, port: u16) -> Option<redis::Connection> {
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let err = match connect(port, plan.timeout) {
            Ok(c) => return Some(c),
            Err(e) if plan.faults => e,
            Err(e) => panic!("{}: connect to port {port}: {e}", plan.name),
        };
        if let Until::Stopped { stop, .. } = plan.until {
            if stop.load(Ordering::SeqCst) {
                return None;
            }
        }
        assert!(
            Instant::now() < deadline,
            "{}: port {port} refused connections for 2 minutes: {err}",
            plan.name
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn forget_reads(txn: &mut [Mop]) {
    for m in txn {
        if let Mop::Read { seen, .. } = m {
            *seen = None;
        }
    }
}

fn offset(txn: &mut [Mop], base: u64) {
    for m in txn {
        match m {
            Mop::Read { key, .. } | Mop::Append { key, .. } | Mop::Write { key, .. } => {
                *key += base
            }
        }
    }
}

/// What one client thread brings back.
#[derive(Default)]
struct Tally {
    done: Vec<Done>,
    unexpected: Vec<String>,
    conflicts: usize,
    errors: usize,
    indeterminate: usize,
}

/// Everything the client threads of one run share.
struct Shared<'p, 'a> {
    plan: &'p Plan<'a>,
    recorder: Recorder,
    pool: Mutex<KeyPool>,
    count: AtomicUsize,
    in_flight: AtomicUsize,
    max_in_flight: AtomicUsize,
    /// TTL runs: the expiry stand-ins (`ttl.rs`), by key.
    phantoms: ttl::Phantoms,
}

impl Shared<'_, '_> {
    /// Whether one more iteration may start (and counts it).
    fn next(&self) -> bool {
        match &self.plan.until {
            Until::Count(n) => self.count.fetch_add(1, Ordering::Relaxed) < *n,
            Until::Stopped { stop, started } => {
                if stop.load(Ordering::SeqCst) {
                    return false;
                }
                started.fetch_add(1, Ordering::Relaxed);
                true
            }
        }
    }

    fn enter(&self) {
        let now = self.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
        self.max_in_flight.fetch_max(now, Ordering::SeqCst);
    }

    fn leave(&self) {
        self.in_flight.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Runs `plan`: its iterations from its client threads, then one final read
/// of every key (through the first port).
pub fn run(plan: &Plan) -> Run {
    let started = Instant::now();
    let shared = Shared {
        plan,
        recorder: Recorder::default(),
        pool: Mutex::new(KeyPool::new(plan.hot_keys, MAX_WRITES_PER_KEY)),
        count: AtomicUsize::new(0),
        in_flight: AtomicUsize::new(0),
        max_in_flight: AtomicUsize::new(0),
        phantoms: ttl::Phantoms::default(),
    };
    if plan.mix.ttl {
        let n = match plan.until {
            Until::Count(n) => n,
            Until::Stopped { .. } => panic!("TTL runs need a fixed size"),
        };
        let mut con = connect_patiently(plan, plan.ports[0]).expect("setup connection");
        ttl::setup(
            &mut con,
            &shared.recorder,
            plan.workload,
            plan.base,
            KeyPool::key_bound(plan.hot_keys, n),
        );
    }
    let tallies: Vec<Tally> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..plan.threads)
            .map(|t| {
                let shared = &shared;
                s.spawn(move || client_thread(shared, t))
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("client thread panicked"))
            .collect()
    });
    let mut all = Tally::default();
    for t in tallies {
        all.done.extend(t.done);
        all.unexpected.extend(t.unexpected);
        all.conflicts += t.conflicts;
        all.errors += t.errors;
        all.indeterminate += t.indeterminate;
    }
    all.done.sort_by_key(|d| d.index);

    let keys = shared.pool.lock().expect("pool").all_keys();
    if plan.mix.ttl {
        // Every TTL runs out first: a key expiring during the final read
        // would (rightly) make it conflict.
        std::thread::sleep(Duration::from_millis(*crate::workload::TTL_MS.end() + 100));
    }
    let mut final_conflicts = 0;
    let final_state = final_read(&shared, &keys, &mut all.unexpected, &mut final_conflicts);
    if plan.mix.ttl {
        shared.phantoms.complete(&shared.recorder, &all.done);
    }

    let committed = all.done.iter().filter(|d| d.kind == Kind::Ok).count();
    let iterations = match &plan.until {
        Until::Count(n) => (*n).min(shared.count.load(Ordering::Relaxed)),
        Until::Stopped { started, .. } => started.load(Ordering::Relaxed),
    };
    let (history, commit_ts) = shared.recorder.finish();
    Run {
        history,
        commit_ts,
        done: all.done,
        iterations,
        committed,
        conflicts: all.conflicts,
        errors: all.errors,
        indeterminate: all.indeterminate,
        unexpected: all.unexpected,
        max_in_flight: shared.max_in_flight.into_inner(),
        final_state,
        final_conflicts,
        elapsed: started.elapsed(),
    }
}

fn client_thread(shared: &Shared, t: usize) -> Tally {
    let plan = shared.plan;
    let mut rng = StdRng::seed_from_u64(plan.seed.wrapping_add(t as u64));
    let port = plan.ports[t % plan.ports.len()];
    let mut tally = Tally::default();
    let Some(mut con) = connect_patiently(plan, port) else {
        return tally;
    };
    let mut process = t as u64;
    while shared.next() {
        let broken = if rng.gen_bool(plan.mix.pipelines) {
            pipeline(shared, &mut con, &mut rng, &mut process, port, &mut tally)
        } else {
            transaction(shared, &mut con, &mut rng, &mut process, port, &mut tally)
        };
        if broken {
            match connect_patiently(plan, port) {
                Some(c) => con = c,
                None => break,
            }
        }
    }
    tally
}

/// One transaction; true if the connection should be replaced.
fn transaction(
    shared: &Shared,
    con: &mut redis::Connection,
    rng: &mut StdRng,
    process: &mut u64,
    port: u16,
    tally: &mut Tally,
) -> bool {
    let plan = shared.plan;
    let (mut txn, ttls) = {
        let mut pool = shared.pool.lock().expect("pool");
        if plan.mix.ttl {
            pool.ttl_txn(rng)
        } else {
            (pool.txn(rng, plan.workload), Vec::new())
        }
    };
    offset(&mut txn, plan.base);
    let mut extras = Extras {
        ttl: ttls.clone(),
        ..Extras::default()
    };
    if plan.mix.admin_in_multi != AdminIn::Nowhere {
        extras.admin = (0..rng.gen_range(1..=3))
            .map(|_| {
                let admin = Admin::random(rng);
                // DBSIZE reads the whole key space: queued in MULTI it runs
                // between two atomic steps of the EXEC (docs/transactions.md),
                // so it goes after every data command; the keyless ones go
                // anywhere and must not split anything.
                let slot = match (plan.mix.admin_in_multi, &admin) {
                    (AdminIn::Last, _) | (_, Admin::Dbsize) => Slot::Last,
                    _ => Slot::Anywhere(rng.gen_range(0..8)),
                };
                (slot, admin)
            })
            .collect();
    }
    if plan.mix.ttl && rng.gen_bool(0.3) {
        extras.linger = Duration::from_millis(rng.gen_range(20..300));
    }
    shared.enter();
    // An expiry stand-in is invoked before the transaction that sets the
    // TTL: whatever finished before it, finished before any expiry.
    for (m, ttl) in txn.iter().zip(&ttls) {
        if ttl.is_some() {
            shared.phantoms.invoke(&shared.recorder, m.key());
        }
    }
    let invoked = Instant::now();
    shared.recorder.invoke(*process, &txn);
    let mut trace = Trace::default();
    let level = match plan.mix.also {
        Some(other) if (*process % plan.threads as u64) % 2 == 1 => other,
        _ => plan.level,
    };
    let outcome = client::run_with(con, level, plan.workload, &mut txn, &extras, &mut trace);
    let mut broken = false;
    let (kind, ts) = match outcome {
        Outcome::Committed(ts) => (Kind::Ok, ts),
        Outcome::Conflict => {
            tally.conflicts += 1;
            (Kind::Fail, None)
        }
        Outcome::Rejected(m) => {
            tally.errors += 1;
            if !plan.faults {
                tally.unexpected.push(format!("port {port}: {m}"));
            }
            broken = true;
            (Kind::Fail, None)
        }
        Outcome::Unknown(m) => {
            tally.indeterminate += 1;
            if !plan.faults {
                tally.unexpected.push(format!("port {port}: {m}"));
            }
            broken = true;
            (Kind::Info, None)
        }
    };
    if plan.mix.ttl {
        ttl::name_expiries(&mut txn);
    }
    // The history holds no reads of a transaction that did not commit (they
    // say nothing); `Done` keeps them for the TTL checks.
    let mut recorded = txn.clone();
    if kind != Kind::Ok {
        forget_reads(&mut recorded);
    }
    let index = shared.recorder.complete(*process, kind, &recorded, ts);
    let completed = Instant::now();
    shared.leave();
    if kind == Kind::Info {
        // Jepsen's rule: a process whose last operation is in doubt never
        // runs another.
        *process += plan.threads as u64;
    }
    tally.done.push(Done {
        kind,
        txn,
        ts,
        lone: false,
        ttl: ttls,
        trace,
        invoked,
        completed,
        index,
    });
    broken
}

/// One pipeline of lone commands; true if the connection should be
/// replaced.
fn pipeline(
    shared: &Shared,
    con: &mut redis::Connection,
    rng: &mut StdRng,
    process: &mut u64,
    port: u16,
    tally: &mut Tally,
) -> bool {
    let plan = shared.plan;
    let n = rng.gen_range(2..=6);
    let mut ops = shared
        .pool
        .lock()
        .expect("pool")
        .mops(rng, plan.workload, n);
    offset(&mut ops, plan.base);
    let admin: Vec<(Slot, Admin)> = if rng.gen_bool(0.3) {
        vec![(Slot::Anywhere(rng.gen_range(0..=n)), Admin::random(rng))]
    } else {
        Vec::new()
    };
    shared.enter();
    let invoked = Instant::now();
    let (outcomes, wrong) = client::run_pipeline(con, plan.workload, &mut ops, &admin);
    let completed = Instant::now();
    tally.unexpected.extend(wrong);
    let mut broken = false;
    // In pipeline order on this client's process (see the module doc).
    for (mut op, outcome) in ops.into_iter().zip(outcomes) {
        let kind = match outcome {
            Lone::Done => Kind::Ok,
            Lone::Failed(m) => {
                tally.errors += 1;
                if !plan.faults {
                    tally
                        .unexpected
                        .push(format!("port {port}: pipelined {op:?}: {m}"));
                }
                broken = true;
                Kind::Fail
            }
            Lone::Unknown(m) => {
                tally.indeterminate += 1;
                if !plan.faults {
                    tally
                        .unexpected
                        .push(format!("port {port}: pipelined {op:?}: {m}"));
                }
                broken = true;
                Kind::Info
            }
        };
        let mut asked = vec![op.clone()];
        forget_reads(&mut asked);
        shared.recorder.invoke(*process, &asked);
        if kind != Kind::Ok {
            forget_reads(std::slice::from_mut(&mut op));
        }
        let index = shared
            .recorder
            .complete(*process, kind, std::slice::from_ref(&op), None);
        if kind == Kind::Info {
            *process += plan.threads as u64;
        }
        tally.done.push(Done {
            kind,
            txn: vec![op],
            ts: None,
            lone: true,
            ttl: Vec::new(),
            trace: Trace::default(),
            invoked,
            completed,
            index,
        });
    }
    shared.leave();
    broken
}

/// The final read of every key, at the run's level, with every client
/// stopped: it shows each key's whole history to adya and the last
/// committed state to the checks.
fn final_read(
    shared: &Shared,
    keys: &[u64],
    unexpected: &mut Vec<String>,
    spurious: &mut usize,
) -> HashMap<u64, Seen> {
    let plan = shared.plan;
    let mut final_txn: Vec<Mop> = keys
        .iter()
        .map(|&key| Mop::Read {
            key: key + plan.base,
            seen: None,
        })
        .collect();
    let mut final_state = HashMap::new();
    let timeout = Duration::from_secs(10).max(plan.timeout);
    let mut con = connect(plan.ports[0], timeout)
        .unwrap_or_else(|e| panic!("{}: final read: connect: {e}", plan.name));
    let deadline = Instant::now() + Duration::from_secs(120);
    while Instant::now() < deadline {
        shared.recorder.invoke(FINAL_PROCESS, &final_txn);
        match client::run(&mut con, plan.level, plan.workload, &mut final_txn) {
            Outcome::Committed(ts) => {
                if plan.mix.ttl {
                    ttl::name_expiries(&mut final_txn);
                }
                shared
                    .recorder
                    .complete(FINAL_PROCESS, Kind::Ok, &final_txn, ts);
                for m in &final_txn {
                    if let Mop::Read { key, seen: Some(s) } = m {
                        final_state.insert(*key, s.clone());
                    }
                }
                break;
            }
            outcome => {
                forget_reads(&mut final_txn);
                // Read-only, so certainly without effect however it ended.
                shared
                    .recorder
                    .complete(FINAL_PROCESS, Kind::Fail, &final_txn, None);
                if plan.mix.ttl && matches!(outcome, Outcome::Conflict) {
                    // Nothing changed, yet a read of an already expired key
                    // fails validation when the shard collects the expired
                    // record meanwhile (a spurious abort, reported in
                    // docs/isolation-results.md): counted, not failed.
                    *spurious += 1;
                } else if !plan.faults {
                    unexpected.push(format!("final read with no other clients: {outcome:?}"));
                }
                std::thread::sleep(Duration::from_millis(200));
                if let Ok(c) = connect(plan.ports[0], timeout) {
                    con = c;
                }
            }
        }
    }
    assert!(
        !final_state.is_empty(),
        "{}: the final read never committed: {unexpected:?}",
        plan.name
    );
    final_state
}

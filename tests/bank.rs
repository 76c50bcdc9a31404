//! The bank invariant: concurrent transfers between accounts never create or
//! destroy money, and no committed read sees a total other than the constant.
//!
//! 16 clients move random amounts between 10 accounts (spread over both
//! shards of a `--workers 2` server, so most transfers commit by two-phase
//! commit), retrying on conflict, a fixed number of transfers each. Two
//! readers run meanwhile: a `BEGIN SI` transaction reading every balance
//! (only committed reads count), and a lone `MGET` of every account (atomic
//! across shards). Each run is one of `BEGIN RR`, `BEGIN SI` or
//! `WATCH`/`MULTI`/`EXEC`. RC is not tested here: it does not validate reads,
//! so concurrent transfers may lose money, as RC allows.
//!
//! `ELSA_BANK_TRANSFERS` sets the transfers per client (default 100).

mod common;

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use redis::{Connection, Value};

use common::Elsa;

const ACCOUNTS: usize = 10;
const INITIAL: i64 = 100;
const TOTAL: i64 = ACCOUNTS as i64 * INITIAL;
const CLIENTS: usize = 16;
/// A transfer that loses this many conflicts in a row means livelock.
const MAX_ATTEMPTS: usize = 2_000;
/// Upper bound on a reader's iterations (it normally stops with the clients).
const MAX_READS: usize = 1_000_000;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mode {
    Rr,
    Si,
    Watch,
}

fn account(i: usize) -> String {
    format!("acct:{i}")
}

fn all_accounts() -> Vec<String> {
    (0..ACCOUNTS).map(account).collect()
}

fn connect(elsa: &Elsa) -> Connection {
    let con = elsa.conn();
    // A hung server fails the test instead of hanging it.
    con.set_read_timeout(Some(Duration::from_secs(30)))
        .expect("read timeout");
    con
}

fn send(con: &mut Connection, cmd: &redis::Cmd) -> redis::RedisResult<Value> {
    cmd.query::<Value>(con)
}

fn must(con: &mut Connection, cmd: &redis::Cmd) -> Value {
    send(con, cmd)
        .unwrap_or_else(|e| panic!("{:?} failed: {e}", cmd.args_iter().collect::<Vec<_>>()))
}

/// A balance from a GET/MGET answer.
fn balance(v: &Value) -> i64 {
    let text = match v {
        Value::BulkString(b) => String::from_utf8_lossy(b).into_owned(),
        other => panic!("balance is not a string: {other:?}"),
    };
    text.parse()
        .unwrap_or_else(|_| panic!("balance {text:?} is not an integer"))
}

fn get(con: &mut Connection, key: &str) -> i64 {
    balance(&must(con, redis::cmd("GET").arg(key)))
}

fn is_conflict(e: &redis::RedisError) -> bool {
    e.code() == Some("CONFLICT")
}

/// How one attempt at a transfer ended.
enum Attempt {
    Moved,
    /// The source could not cover the amount: nothing to do.
    Insufficient,
    /// Lost a conflict: try again.
    Retry,
}

/// One attempt to move `amount` from `from` to `to`.
fn attempt(con: &mut Connection, mode: Mode, from: &str, to: &str, amount: i64) -> Attempt {
    match mode {
        Mode::Rr | Mode::Si => {
            let level = if mode == Mode::Rr { "RR" } else { "SI" };
            must(con, redis::cmd("BEGIN").arg(level));
            let (a, b) = (get(con, from), get(con, to));
            if a < amount {
                must(con, &redis::cmd("ABORT"));
                return Attempt::Insufficient;
            }
            must(con, redis::cmd("SET").arg(from).arg(a - amount));
            must(con, redis::cmd("SET").arg(to).arg(b + amount));
            match send(con, &redis::cmd("COMMIT")) {
                Ok(Value::Int(_)) => Attempt::Moved,
                Err(e) if is_conflict(&e) => Attempt::Retry,
                other => panic!("COMMIT of a transfer answered {other:?}"),
            }
        }
        Mode::Watch => {
            must(con, redis::cmd("WATCH").arg(from).arg(to));
            let (a, b) = (get(con, from), get(con, to));
            if a < amount {
                must(con, &redis::cmd("UNWATCH"));
                return Attempt::Insufficient;
            }
            must(con, &redis::cmd("MULTI"));
            must(con, redis::cmd("SET").arg(from).arg(a - amount));
            must(con, redis::cmd("SET").arg(to).arg(b + amount));
            match must(con, &redis::cmd("EXEC")) {
                Value::Array(replies) if replies.len() == 2 => Attempt::Moved,
                Value::Nil => Attempt::Retry,
                other => panic!("EXEC of a transfer answered {other:?}"),
            }
        }
    }
}

/// What a reader saw that it should not have.
fn audit(what: &str, balances: &[i64], bad: &Mutex<Vec<String>>) {
    let total: i64 = balances.iter().sum();
    if total != TOTAL || balances.iter().any(|b| *b < 0) {
        bad.lock()
            .expect("bad")
            .push(format!("{what} saw total {total} in {balances:?}"));
    }
}

#[derive(Default)]
struct Counts {
    moved: AtomicUsize,
    insufficient: AtomicUsize,
    retries: AtomicUsize,
    txn_reads: AtomicUsize,
    txn_read_conflicts: AtomicUsize,
    mget_reads: AtomicUsize,
}

fn run_bank(mode: Mode) {
    let transfers: usize = std::env::var("ELSA_BANK_TRANSFERS")
        .map(|v| v.parse().expect("ELSA_BANK_TRANSFERS is a number"))
        .unwrap_or(100);
    let seed: u64 = rand::random();
    let elsa = Elsa::start(&["--workers", "2"]);
    let mut con = connect(&elsa);
    let mut mset = redis::cmd("MSET");
    for k in all_accounts() {
        mset.arg(k).arg(INITIAL);
    }
    must(&mut con, &mset);

    let counts = Counts::default();
    let bad = Mutex::new(Vec::new());
    let writers_left = AtomicUsize::new(CLIENTS);
    let done = AtomicBool::new(false);
    std::thread::scope(|s| {
        for c in 0..CLIENTS {
            let (elsa, counts, writers_left, done) = (&elsa, &counts, &writers_left, &done);
            s.spawn(move || {
                let mut rng = StdRng::seed_from_u64(seed.wrapping_add(c as u64));
                let mut con = connect(elsa);
                for _ in 0..transfers {
                    let from = rng.gen_range(0..ACCOUNTS);
                    let to = (from + rng.gen_range(1..ACCOUNTS)) % ACCOUNTS;
                    let amount = rng.gen_range(1..=30);
                    let (from, to) = (account(from), account(to));
                    let mut attempts = 0;
                    loop {
                        attempts += 1;
                        assert!(
                            attempts <= MAX_ATTEMPTS,
                            "{mode:?}: a transfer lost {MAX_ATTEMPTS} conflicts in a row (livelock?)"
                        );
                        match attempt(&mut con, mode, &from, &to, amount) {
                            Attempt::Moved => {
                                counts.moved.fetch_add(1, Ordering::Relaxed);
                                break;
                            }
                            Attempt::Insufficient => {
                                counts.insufficient.fetch_add(1, Ordering::Relaxed);
                                break;
                            }
                            Attempt::Retry => {
                                counts.retries.fetch_add(1, Ordering::Relaxed);
                            }
                        }
                    }
                }
                if writers_left.fetch_sub(1, Ordering::SeqCst) == 1 {
                    done.store(true, Ordering::SeqCst);
                }
            });
        }
        // Reader 1: a read-only SI transaction over every account.
        let (elsa, counts, bad, done) = (&elsa, &counts, &bad, &done);
        s.spawn(move || {
            let mut con = connect(elsa);
            for _ in 0..MAX_READS {
                let last = done.load(Ordering::SeqCst);
                must(&mut con, redis::cmd("BEGIN").arg("SI"));
                let balances: Vec<i64> = all_accounts().iter().map(|k| get(&mut con, k)).collect();
                match send(&mut con, &redis::cmd("COMMIT")) {
                    Ok(Value::Int(_)) => {
                        counts.txn_reads.fetch_add(1, Ordering::Relaxed);
                        audit("BEGIN SI read", &balances, bad);
                    }
                    Err(e) if is_conflict(&e) => {
                        counts.txn_read_conflicts.fetch_add(1, Ordering::Relaxed);
                    }
                    other => panic!("COMMIT of a read answered {other:?}"),
                }
                if last {
                    break;
                }
            }
        });
        // Reader 2: a lone MGET, atomic across shards.
        s.spawn(move || {
            let mut con = connect(elsa);
            for _ in 0..MAX_READS {
                let last = done.load(Ordering::SeqCst);
                let balances: Vec<i64> =
                    match must(&mut con, redis::cmd("MGET").arg(all_accounts())) {
                        Value::Array(vs) => vs.iter().map(balance).collect(),
                        other => panic!("MGET answered {other:?}"),
                    };
                counts.mget_reads.fetch_add(1, Ordering::Relaxed);
                audit("MGET", &balances, bad);
                if last {
                    break;
                }
            }
        });
    });

    let finals: Vec<i64> = all_accounts().iter().map(|k| get(&mut con, k)).collect();
    audit("final read", &finals, &bad);
    let c = |a: &AtomicUsize| a.load(Ordering::Relaxed);
    println!(
        "[bank] {mode:?}: {CLIENTS} clients x {transfers} transfers (seed {seed}): {} moved, {} insufficient, \
         {} conflict retries; {} committed SI reads ({} conflicted), {} MGETs; final {finals:?}",
        c(&counts.moved),
        c(&counts.insufficient),
        c(&counts.retries),
        c(&counts.txn_reads),
        c(&counts.txn_read_conflicts),
        c(&counts.mget_reads),
    );
    let bad = bad.into_inner().expect("bad");
    assert!(
        bad.is_empty(),
        "{mode:?}: money was created or destroyed ({} bad reads), first few: {:#?}",
        bad.len(),
        &bad[..bad.len().min(10)]
    );
    assert_eq!(
        c(&counts.moved) + c(&counts.insufficient),
        CLIENTS * transfers,
        "every transfer ends"
    );
    assert!(
        c(&counts.txn_reads) > 0,
        "{mode:?}: the SI reader never committed a read"
    );
}

#[test]
fn bank_total_is_constant_rr() {
    run_bank(Mode::Rr);
}

#[test]
fn bank_total_is_constant_si() {
    run_bank(Mode::Si);
}

#[test]
fn bank_total_is_constant_watch_multi_exec() {
    run_bank(Mode::Watch);
}

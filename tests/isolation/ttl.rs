//! Keys with short TTLs, read and written by transactions (WATCH/MULTI/EXEC
//! or `BEGIN`): how expiry is written into an Elle history without fooling
//! adya, and the timing checks a history cannot express.
//!
//! # How expiry is recorded (rw-register)
//!
//! adya's rw-register reads `nil` as the *initial* state, which precedes
//! every write; a `nil` read after an expiry recorded as such would give
//! the reader anti-dependency edges to every write of the key, including
//! the ones it came after — false cycles. List-append is worse: a list that
//! vanishes breaks the append-only prefix order Elle's inference rests on.
//! So TTL runs use registers — strings (`SET`/`GET`), a hash's field
//! (`HSET`/`HGET`) or a sorted set member's score (`ZADD`/`ZSCORE`), the
//! last two's TTL set by a `PEXPIRE` after the write — and make
//! "gone" a *named version*:
//!
//! - every key starts at value 0, written by recorded setup transactions
//!   before the run, so nothing but an expiry can make a key vanish;
//! - a key gets a TTL at most once, ever, so it
//!   vanishes at most once, and every `nil` read of it means the same
//!   state; the history records such a read as reading value [`EXPIRED`]
//!   (the rule is [`KeyPool::ttl_txn`]'s);
//! - that version's writer is a stand-in transaction, "the expiry of k",
//!   writing `EXPIRED` to k, invoked (on its own process) just before the
//!   transaction that sets k's TTL, and completed at the end of the
//!   history: `info` if that transaction committed or may have, `fail` if
//!   it certainly did not — then a read of `EXPIRED` is an aborted read
//!   (G1a): the key vanished though its TTL was never set.
//!
//! adya takes writers from committed transactions only, so the `info`
//! stand-in adds no dependency edges (and so no false ones). What it buys:
//! a read of `EXPIRED` is an ordinary read of one version; reading a value
//! and later, in the same transaction, `EXPIRED` is adya's `internal`
//! anomaly (a committed transaction saw a value vanish), and a
//! transaction that read `EXPIRED` and then wrote the key orders the expiry
//! before its write (writes follow reads).
//!
//! # What only timing shows
//!
//! When a key expires is known from the client's clock: the TTL was set
//! between the invocation `I` and the reply `R` of the transaction that set
//! it, so a value with TTL `t` is gone by `R + t` and not before `I + t`
//! (the server compares wall-clock milliseconds; [`SLACK`] covers the
//! rounding). [`check`] then asserts:
//!
//! - a committed WATCH/RR/SI transaction that read a value whose deadline
//!   had passed when its `EXEC`/`COMMIT` was sent is a violation: its reads
//!   were validated after the value expired (a key that expires between
//!   WATCH and EXEC must make EXEC fail, as in Redis ≥ 6.0.9);
//! - a committed read of `EXPIRED` that finished before the key's earliest
//!   possible expiry is a violation (a key vanished early);
//! - a committed transaction that read a live value and then got 0 from
//!   `PEXPIRE` on it (the key was gone) is a violation;
//!
//! and counts the aborted transactions a watched (or RR/SI-read) key's
//! expiry must have aborted, so a run that never exercised it fails.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::driver::Done;
#[allow(unused_imports)] // for the doc links
use crate::workload::KeyPool;
use crate::workload::{redis_key, Kind, Mop, Recorder, Seen, Workload, EXPIRED};

/// Tolerance of the timing checks: the server rounds to milliseconds.
pub const SLACK: Duration = Duration::from_millis(15);
/// Process of the setup transactions.
pub const SETUP_PROCESS: u64 = 1_000_001;
/// Process of key k's expiry stand-in: this plus k.
pub const PHANTOM_PROCESS: u64 = 1 << 40;
/// Keys per setup `MSET`.
const SETUP_CHUNK: u64 = 1000;

/// Writes 0 to every key `base .. base + count`, as recorded transactions
/// (`MSET`; other registers' writes in one MULTI).
pub fn setup(
    con: &mut redis::Connection,
    recorder: &Recorder,
    workload: Workload,
    base: u64,
    count: u64,
) {
    let mut from = base;
    while from < base + count {
        let to = (from + SETUP_CHUNK).min(base + count);
        let txn: Vec<Mop> = (from..to).map(|key| Mop::Write { key, value: 0 }).collect();
        let mut pipe = redis::pipe();
        if workload != Workload::RwRegister {
            pipe.atomic();
            for m in &txn {
                pipe.add_command(crate::client::write_cmd(workload, m))
                    .ignore();
            }
        } else {
            let mset = pipe.cmd("MSET");
            for key in from..to {
                mset.arg(redis_key(key)).arg(0);
            }
            mset.ignore();
        }
        recorder.invoke(SETUP_PROCESS, &txn);
        let () = pipe
            .query(con)
            .unwrap_or_else(|e| panic!("setup of keys {from}..{to}: {e}"));
        recorder.complete(SETUP_PROCESS, Kind::Ok, &txn, None);
        from = to;
    }
}

/// Records every `nil` a transaction read as the named version [`EXPIRED`]
/// (see the module doc: in a TTL run only an expiry makes a key vanish).
pub fn name_expiries(txn: &mut [Mop]) {
    for m in txn {
        if let Mop::Read {
            seen: Some(seen @ Seen::Reg(None)),
            ..
        } = m
        {
            *seen = Seen::Reg(Some(EXPIRED));
        }
    }
}

/// The expiry stand-ins invoked so far, by key.
#[derive(Default)]
pub struct Phantoms {
    keys: Mutex<Vec<u64>>,
}

impl Phantoms {
    /// Invokes the stand-in for the expiry of `key`.
    pub fn invoke(&self, recorder: &Recorder, key: u64) {
        recorder.invoke(PHANTOM_PROCESS + key, &[expiry(key)]);
        self.keys.lock().expect("phantoms").push(key);
    }

    /// Completes every stand-in: `info` if the transaction that set its
    /// key's TTL committed or may have, `fail` if it certainly did not.
    pub fn complete(&self, recorder: &Recorder, done: &[Done]) {
        let mut setter: HashMap<u64, Kind> = HashMap::new();
        for d in done {
            for (m, ttl) in d.txn.iter().zip(&d.ttl) {
                if ttl.is_some() {
                    setter.insert(m.key(), d.kind);
                }
            }
        }
        for key in self.keys.lock().expect("phantoms").iter() {
            let kind = match setter.get(key) {
                Some(Kind::Fail) => Kind::Fail,
                _ => Kind::Info,
            };
            recorder.complete(PHANTOM_PROCESS + key, kind, &[expiry(*key)], None);
        }
    }
}

fn expiry(key: u64) -> Mop {
    Mop::Write {
        key,
        value: EXPIRED,
    }
}

/// A value that got a TTL from a committed transaction.
struct Fact {
    ms: u64,
    replied: Instant,
}

/// What [`check`] found.
#[derive(Debug, Default)]
pub struct Report {
    /// TTLs set by committed transactions (`SET … PX`, `PEXPIRE`).
    pub ttls_set: usize,
    /// Committed reads of a key after it expired.
    pub expired_reads: usize,
    /// Transactions that lost a conflict at commit after a value they read
    /// had certainly expired (what a watched key's expiry must do).
    pub expiry_aborts: usize,
    pub violations: Vec<String>,
}

/// The timing checks of the module doc, over a TTL run's transactions.
/// `snapshots`: SI on a node alone, where a transaction that only reads
/// takes effect at its start (`docs/transactions.md`, *Read-only
/// transactions*): a TTL set by a commit not yet answered when it began may
/// come after its snapshot, and then does not end what it read. A TTL
/// answered before it began is in its snapshot, and still must fail it
/// once passed.
pub fn check(done: &[Done], snapshots: bool) -> Report {
    let mut report = Report::default();
    let mut facts: HashMap<(u64, u64), Fact> = HashMap::new();
    // key -> the earliest moment it may have vanished.
    let mut earliest: HashMap<u64, Instant> = HashMap::new();
    for d in done {
        if d.kind == Kind::Fail {
            continue;
        }
        for (i, (m, ttl)) in d.txn.iter().zip(&d.ttl).enumerate() {
            let Some(ms) = *ttl else { continue };
            let at = d.invoked + Duration::from_millis(ms);
            let e = earliest.entry(m.key()).or_insert(at);
            *e = (*e).min(at);
            if d.kind != Kind::Ok {
                continue;
            }
            let value = match m {
                Mop::Write { value, .. } => Some(*value),
                Mop::Read {
                    seen: Some(Seen::Reg(Some(u))),
                    key,
                } if *u != EXPIRED => {
                    let existed = d.trace.expired.iter().find(|(j, _)| *j == i).map(|e| e.1);
                    if existed == Some(false) {
                        report.violations.push(format!(
                            "T{}: read k{key} = {u} live, then PEXPIRE found it gone, and committed: {:?}",
                            d.index, d.txn
                        ));
                    }
                    existed.and_then(|e| e.then_some(*u))
                }
                _ => None,
            };
            if let Some(value) = value {
                report.ttls_set += 1;
                facts.insert(
                    (m.key(), value),
                    Fact {
                        ms,
                        replied: d.completed,
                    },
                );
            }
        }
    }
    for d in done {
        let Some(sent) = d.trace.commit_sent else {
            continue;
        };
        let mut expired_meanwhile = false;
        for m in &d.txn {
            let Mop::Read {
                key,
                seen: Some(Seen::Reg(Some(v))),
            } = m
            else {
                continue;
            };
            if *v == EXPIRED {
                if d.kind != Kind::Ok {
                    continue;
                }
                report.expired_reads += 1;
                match earliest.get(key) {
                    None => report.violations.push(format!(
                        "T{}: read k{key} as expired, though no TTL was ever set on it: {:?}",
                        d.index, d.txn
                    )),
                    Some(&at) if d.completed + SLACK < at => report.violations.push(format!(
                        "T{}: read k{key} as expired {:?} before its TTL could have run out: {:?}",
                        d.index,
                        at - d.completed,
                        d.txn
                    )),
                    Some(_) => {}
                }
                continue;
            }
            let Some(f) = facts.get(&(*key, *v)) else {
                continue;
            };
            let deadline = f.replied + Duration::from_millis(f.ms) + SLACK;
            if sent <= deadline {
                continue;
            }
            let read_only = d.txn.iter().all(|m| matches!(m, Mop::Read { .. }));
            if snapshots && read_only && f.replied > d.invoked {
                continue;
            }
            expired_meanwhile = true;
            if d.kind == Kind::Ok {
                report.violations.push(format!(
                    "T{}: read k{key} = {v} (TTL {} ms, set by a commit answered {:?} before this commit was sent), \
                     yet committed: a key that expired after it was read or watched must fail the commit: {:?}",
                    d.index,
                    f.ms,
                    sent - f.replied,
                    d.txn
                ));
            }
        }
        if expired_meanwhile && d.kind == Kind::Fail {
            report.expiry_aborts += 1;
        }
    }
    report
}

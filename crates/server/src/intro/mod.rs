//! Introspection as a connection sees it: recording each command's
//! statistics (`crate::cmdstats`), slow-log entries and latency spikes as
//! it runs, and the commands that read them back — SLOWLOG, LATENCY,
//! CONFIG SET/RESETSTAT/REWRITE.
//!
//! Timing. A command served on its own is timed from its classification to
//! the end of its dispatch. A run of lone commands (consecutive pipelined
//! single-key commands, run together: one message per shard, see
//! `crate::conn`) is timed as a whole — from the first one's
//! classification to the replies being back — and each command of the run
//! is charged an equal share: they ran together, their individual times
//! cannot be told apart, and the shares add up to the run's time, so
//! `usec` totals stay true. The cost per lone command is then two
//! `Instant::now()` per run, a few single-writer counter bumps, and one
//! histogram bucket bump.

use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;

use crate::cmdstats::{Local, TxnKind, TxnOutcome, NO_SLOT};

mod commands;

/// A connection's statistics state between classifying and recording.
pub(crate) struct ConnStat {
    /// Its worker's counters.
    pub local: Arc<Local>,
    /// The slot of the command classified last.
    pub slot: u32,
    /// Its arguments, kept (only while the slow log is on) for the slow log.
    pending: Option<Vec<Bytes>>,
    /// The lone run being gathered: each command's slot and arguments.
    lone_slots: Vec<u32>,
    lone_args: Vec<Option<Vec<Bytes>>>,
    lone_start: Option<Instant>,
    /// The reply being written is an error a script's `redis.call` or
    /// `redis.pcall` got, counted in errorstats at that call: not again
    /// (Redis's `ignore_error_stats_update`).
    pub error_counted: bool,
}

/// What `Conn::stat_before` (`commands`) saw of a command about to be dispatched.
pub(crate) struct Token {
    slot: u32,
    /// A transaction this command ends (COMMIT, ABORT, EXEC), told from
    /// its reply afterwards.
    ends: Option<TxnKind>,
    /// EXEC: the slots of the commands it runs (each a call of its own,
    /// as in Redis).
    queued: Vec<u32>,
    kind: TokenKind,
    start: usize,
    /// When it started, for a command that runs now: a queued or refused
    /// one is not timed (as in Redis, whose queued commands are timed when
    /// EXEC runs them), which saves two clock reads per command of a
    /// MULTI.
    t0: Option<Instant>,
    args: Option<Vec<Bytes>>,
}

enum TokenKind {
    /// Refused before it ran (Redis's rejected_calls).
    Rejected,
    /// Queued inside MULTI: not a call yet.
    Queued,
    /// Runs now.
    Run,
}

impl ConnStat {
    pub fn new(local: &Arc<Local>) -> ConnStat {
        ConnStat {
            local: local.clone(),
            slot: NO_SLOT,
            pending: None,
            lone_slots: Vec::new(),
            lone_args: Vec::new(),
            lone_start: None,
            error_counted: false,
        }
    }

    /// The classified command's arguments, for the slow log.
    pub fn keep_args(&mut self, args: Vec<Bytes>) {
        self.pending = Some(args);
    }

    /// The classified command joins the lone run (`t0`: when the run
    /// started, given for its first command).
    pub fn lone_queued(&mut self, t0: Option<Instant>) {
        if let Some(t0) = t0 {
            self.lone_start = Some(t0);
            self.lone_slots.clear();
            self.lone_args.clear();
        }
        self.lone_slots.push(self.slot);
        self.lone_args.push(self.pending.take());
    }
}

/// The prefix of the error reply written at `start` of `out`, if one was.
/// The code of the error reply `out` holds (`ERR`, `WRONGTYPE`, …), if
/// it is one: a script's call counts it in errorstats.
pub(crate) fn error_prefix(out: &[u8]) -> Option<&str> {
    error_at(out, 0)
}

fn error_at(out: &[u8], start: usize) -> Option<&str> {
    let rest = out.get(start..)?;
    if rest.first() != Some(&b'-') {
        return None;
    }
    let end = rest
        .iter()
        .position(|&b| b == b' ' || b == b'\r')
        .unwrap_or(rest.len());
    std::str::from_utf8(&rest[1..end]).ok()
}

/// How the transaction a COMMIT, ABORT or EXEC ended came out, from the
/// reply written at `start`: a commit answers a timestamp (COMMIT) or an
/// array (EXEC); CONFLICT, or EXEC's nil for a changed WATCHed key, is a
/// conflict; ABORT and every other error an abort.
fn txn_outcome(out: &[u8], start: usize, slot: u32) -> TxnOutcome {
    let reply = out.get(start..).unwrap_or_default();
    if crate::cmdstats::slot_name(slot) == "abort" || crate::cmdstats::slot_name(slot) == "rollback"
    {
        return TxnOutcome::Abort;
    }
    if reply.starts_with(b"-CONFLICT")
        || reply.starts_with(b"*-1\r\n")
        || reply.starts_with(b"_\r\n")
    {
        TxnOutcome::Conflict
    } else if reply.starts_with(b"-") {
        TxnOutcome::Abort
    } else {
        TxnOutcome::Commit
    }
}

/// The commands an EXEC ran, each a call (with an equal share of the
/// EXEC's time) that failed when its element of EXEC's reply is an error,
/// as Redis counts them; answers that share. Nothing when EXEC ran
/// nothing (its reply is not an array of as many elements).
fn exec_calls(local: &Local, slots: &[u32], out: &[u8], start: usize, us: u64) -> Option<u64> {
    let errors = element_errors(out, start)?;
    if errors.len() != slots.len() {
        return None;
    }
    let share = us / slots.len() as u64;
    for (slot, err) in slots.iter().zip(errors) {
        if let Some(e) = err {
            local.error(e);
        }
        local.call(*slot, share, err.is_some());
    }
    Some(share)
}

/// For the array reply at `start`: each element's error prefix, if it is
/// an error. `None` when the reply there is not a whole array.
fn element_errors(out: &[u8], start: usize) -> Option<Vec<Option<&str>>> {
    if out.get(start) != Some(&b'*') {
        return None;
    }
    let (n, mut at) = header(out, start)?;
    let mut errors = Vec::with_capacity(n.max(0) as usize);
    for _ in 0..n.max(0) {
        errors.push(error_at(out, at));
        at = skip(out, at, 0)?;
    }
    Some(errors)
}

/// A RESP line's number (after its type byte) and where the next starts.
fn header(out: &[u8], at: usize) -> Option<(i64, usize)> {
    let rest = out.get(at + 1..)?;
    let end = rest.windows(2).position(|w| w == b"\r\n")?;
    let n = std::str::from_utf8(&rest[..end]).ok()?.parse().ok();
    Some((n.unwrap_or(0), at + 1 + end + 2))
}

/// Where the RESP value at `at` ends (nested at most 32 deep).
fn skip(out: &[u8], at: usize, depth: usize) -> Option<usize> {
    if depth > 32 {
        return None;
    }
    let (n, next) = header(out, at)?;
    match out.get(at)? {
        b'$' | b'=' | b'!' if n >= 0 => Some(next + n as usize + 2),
        b'*' | b'~' | b'>' | b'%' | b'|' => {
            let items = if matches!(out[at], b'%' | b'|') {
                2 * n
            } else {
                n
            };
            let mut at = next;
            for _ in 0..items.max(0) {
                at = skip(out, at, depth + 1)?;
            }
            Some(at)
        }
        _ => Some(next),
    }
}

//! Side effects a transaction may take only once it has committed.
//!
//! A script, and an EXEC whose queue holds one, run as one SI transaction
//! that runs again from the start each time its commit loses to a
//! concurrent one (CONFLICT); a script inside BEGIN commits only at COMMIT.
//! Its writes are buffered in the transaction, so they happen once or not
//! at all. What it does outside the key space — a script's PUBLISH, a
//! queued PUBLISH, CLIENT, CONFIG SET, SCRIPT FLUSH, BGSAVE… — would not
//! be: run in place, it would happen on every attempt, and even when the
//! transaction finally answers `-CONFLICT … nothing was written`.
//!
//! So such a step is recorded here as an [`Effect`], in order, and taken
//! after the commit succeeded (`Conn::take_effects`, `apply`) or dropped with the
//! attempt (`Conn::drop_effects`). A script's PUBLISH answers at the call
//! how many subscribers would receive it then; a queued command answers in
//! its slot of the EXEC array when it runs (`crate::script::exec`).
//!
//! Which commands queued in MULTI run in place on each attempt instead
//! ([`runs_in_attempt`]), and which split the EXEC ([`splits_exec`]), is
//! decided here too; docs/transactions.md states the rule.

use bytes::Bytes;

use crate::cmd::{is, Control};
use crate::pubsub::Space;

mod apply;

/// One deferred step of a transaction, taken once it commits.
pub(crate) enum Effect {
    /// A script's PUBLISH / SPUBLISH (its reply was given at the call).
    Publish {
        space: Space,
        channel: Bytes,
        payload: Bytes,
    },
    /// A command queued in MULTI: run with database `db` selected (the one
    /// in force at its place in the queue), its reply in slot `slot` of the
    /// EXEC array.
    Queued {
        slot: usize,
        c: Control,
        args: Vec<Bytes>,
        db: u8,
    },
}

/// True for a control command queued in MULTI that an EXEC run as one
/// transaction runs in its place on every attempt: those that act inside
/// the transaction (EVAL, MSETNX), read the key space through it (DBSIZE,
/// KEYS, SCAN, RANDOMKEY), choose the database the commands after it use
/// (SELECT), or only answer (PING, ECHO, TIME…). Every other one is an
/// [`Effect::Queued`], run once after the commit.
pub(crate) fn runs_in_attempt(c: Control, args: &[Bytes]) -> bool {
    match c {
        Control::Eval
        | Control::Msetnx
        | Control::Select
        | Control::Dbsize
        | Control::Randomkey
        | Control::Keys
        | Control::Scan
        | Control::Ping
        | Control::Echo
        | Control::Time
        | Control::Lastsave
        | Control::LastCommit
        | Control::Sort
        | Control::Dump
        | Control::Restore
        | Control::Unwatch => true,
        // Only caches a script (an EVALSHA queued after it may need it),
        // or reads the cache.
        Control::Script => args
            .get(1)
            .is_some_and(|sub| is(sub, "LOAD") || is(sub, "EXISTS")),
        _ => false,
    }
}

/// True for a command that changes the whole key space: queued in MULTI
/// with a script, it ends one transaction of the EXEC and runs in its
/// place, once, before the next begins — so it comes after the writes
/// queued before it and before those queued after it, as in Redis.
pub(crate) fn splits_exec(c: Control) -> bool {
    matches!(c, Control::Flushall | Control::Flushdb | Control::Swapdb)
}

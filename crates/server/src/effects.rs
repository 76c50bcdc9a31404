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
//! after the commit succeeded ([`Conn::take_effects`]) or dropped with the
//! attempt ([`Conn::drop_effects`]). A script's PUBLISH answers at the call
//! how many subscribers would receive it then; a queued command answers in
//! its slot of the EXEC array when it runs (`crate::script::exec`).
//!
//! Which commands queued in MULTI run in place on each attempt instead
//! ([`runs_in_attempt`]), and which split the EXEC ([`splits_exec`]), is
//! decided here too; docs/transactions.md states the rule.

use bytes::Bytes;

use crate::cmd::{is, Control};
use crate::conn::Conn;
use crate::pubsub::Space;

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

impl Conn {
    /// PUBLISH / SPUBLISH inside a script: answers how many subscribers
    /// would receive the message now, and sends it once the script's
    /// transaction commits.
    pub(crate) fn defer_publish(&mut self, c: Control, args: &[Bytes]) {
        let space = match c {
            Control::Spublish => Space::Shard,
            _ => Space::Plain,
        };
        let receivers = self.shared.pubsub.receivers(space, &args[1]);
        self.s.effects.push(Effect::Publish {
            space,
            channel: args[1].clone(),
            payload: args[2].clone(),
        });
        self.w().int(receivers as i64);
    }

    /// Forgets the effects recorded since `mark` (an attempt that lost, a
    /// script that failed, a transaction aborted).
    pub(crate) fn drop_effects(&mut self, mark: usize) {
        self.s.effects.truncate(mark);
    }

    /// The transaction committed: takes the effects recorded since `mark`,
    /// in order. Deferred queued commands are run and answered at the end
    /// of the output; each answers where its reply went, by slot.
    pub(crate) async fn take_effects(
        &mut self,
        mark: usize,
    ) -> Vec<(usize, std::ops::Range<usize>)> {
        if self.s.effects.len() <= mark {
            return Vec::new();
        }
        let effects = self.s.effects.split_off(mark);
        let db = self.s.db;
        let mut answered = Vec::new();
        for e in effects {
            match e {
                Effect::Publish {
                    space,
                    channel,
                    payload,
                } => {
                    self.publish_now(space, &channel, &payload);
                }
                Effect::Queued { slot, c, args, db } => {
                    self.s.db = db;
                    let start = self.out.len();
                    Box::pin(self.run_queued(c, &args)).await;
                    answered.push((slot, start..self.out.len()));
                }
            }
        }
        self.s.db = db;
        answered
    }
}

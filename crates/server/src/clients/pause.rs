//! CLIENT PAUSE's node-wide state: until when, and whether every command
//! or only those that may write waits (Redis 7.0's `pauseClients` and
//! `processCommand`: with WRITE, the commands flagged `write` or
//! `may_replicate` — EVAL, EVALSHA, PUBLISH, SPUBLISH, FCALL, PFCOUNT,
//! FUNCTION LOAD/DELETE/FLUSH/RESTORE — and an EXEC whose transaction
//! holds one). A paused command waits; it does
//! not fail. The pause is this node's: other nodes of the region go on.
//!
//! Cost when nothing is paused: one relaxed atomic load per command.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

use bytes::Bytes;
use tokio::sync::Notify;
use tokio::time::Instant;

use crate::cmd;

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Mode {
    All,
    Write,
}

#[derive(Default)]
pub(crate) struct Pause {
    /// A pause is set (perhaps expired: the waiters check the time).
    on: AtomicBool,
    until: Mutex<Option<(Instant, Mode)>>,
    /// Rung by UNPAUSE and by a new PAUSE (which may shorten it).
    changed: Notify,
}

impl Pause {
    /// True when a pause may be in force: the one check on the hot path.
    #[inline]
    pub fn maybe(&self) -> bool {
        self.on.load(Ordering::Relaxed)
    }

    /// CLIENT PAUSE: Redis keeps the later end, and ALL over WRITE.
    pub fn pause(&self, until: Instant, mode: Mode) {
        let mut p = self.until.lock().unwrap_or_else(|e| e.into_inner());
        let next = match *p {
            Some((end, m)) if end > Instant::now() => {
                let mode = if m == Mode::All || mode == Mode::All {
                    Mode::All
                } else {
                    Mode::Write
                };
                (end.max(until), mode)
            }
            _ => (until, mode),
        };
        *p = Some(next);
        self.on.store(true, Ordering::Relaxed);
        drop(p);
        self.changed.notify_waiters();
    }

    /// CLIENT UNPAUSE.
    pub fn unpause(&self) {
        *self.until.lock().unwrap_or_else(|e| e.into_inner()) = None;
        self.on.store(false, Ordering::Relaxed);
        self.changed.notify_waiters();
    }

    /// The pause's end if a command of this kind must wait now.
    pub(crate) fn holds(&self, pauses_on_write: bool) -> Option<Instant> {
        let p = *self.until.lock().unwrap_or_else(|e| e.into_inner());
        match p {
            Some((end, mode)) if end > Instant::now() => {
                (mode == Mode::All || pauses_on_write).then_some(end)
            }
            _ => None,
        }
    }

    /// Waits while a pause holds this command (`may_write`: it is one of
    /// those WRITE pauses). Returns at once when none does.
    pub async fn wait(&self, may_write: bool) {
        loop {
            let changed = self.changed.notified();
            tokio::pin!(changed);
            changed.as_mut().enable();
            let Some(end) = self.holds(may_write) else {
                return;
            };
            tokio::select! {
                _ = changed => {}
                _ = tokio::time::sleep_until(end) => {}
            }
        }
    }

    /// True when the command of `args` waits under CLIENT PAUSE WRITE.
    /// `queued`: the arguments of the commands queued in MULTI, for EXEC.
    /// `script_writes`: for a script or function that declares its flags,
    /// whether it may write (Redis's `scriptFlagsToCmdFlags`: such a call
    /// is a write unless `no-writes`, and never `may_replicate`).
    pub fn pauses_on_write(
        args: &[Bytes],
        queued: Option<&[Vec<Bytes>]>,
        script_writes: impl Fn(&[Bytes]) -> Option<bool>,
    ) -> bool {
        let writes = |a: &[Bytes]| {
            if let Some(w) = script_writes(a) {
                return w;
            }
            // A command of the wrong arity is answered at once (Redis
            // checks arity before the pause).
            a.first().and_then(|n| cmd::lookup(n)).is_some_and(|s| {
                // Elsa's COMMIT of an interactive transaction writes, and
                // so do FUNCTION's subcommands Redis flags `write` (the
                // table flags the container).
                let function_write = s.name == "function"
                    && a.get(1).is_some_and(|sub| {
                        ["load", "delete", "flush", "restore"]
                            .iter()
                            .any(|w| cmd::is(sub, w))
                    })
                    && cmd::subcommand_error(s, a).is_none();
                function_write
                    || ((s.is_write() || s.may_replicate() || s.name == "commit")
                        && s.arity_ok(a.len()))
            })
        };
        if writes(args) {
            return true;
        }
        let is_exec = args.first().is_some_and(|n| cmd::is(n, "exec"));
        is_exec && queued.is_some_and(|q| q.iter().any(|a| writes(a)))
    }
}

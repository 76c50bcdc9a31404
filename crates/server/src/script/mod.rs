//! Lua scripting: EVAL, EVALSHA, EVAL_RO, EVALSHA_RO and SCRIPT
//! LOAD|EXISTS|FLUSH|KILL, as Redis 7.0 — but each script runs as one
//! Elsa transaction.
//!
//! - [`cache`]: the node-wide script cache (SHA1 → body).
//! - [`lua`]: the script threads, their sandboxed Lua states and the
//!   `redis.*` API.
//! - [`convert`]: Redis reply ↔ Lua value conversions.
//! - `run`: running one script for a connection — its transaction, its
//!   `redis.call`s, retries on conflict.
//! - `exec`: an EXEC whose queue holds a script, run as one transaction.
//! - `handoff`: a call's message and its reply between the script thread
//!   and the connection's task.
//! - `fuzzing`: a script thread and canned replies for the `lua_script`
//!   fuzz target (`fuzz/`).
//!
//! This file holds the node-wide state ([`Scripts`]): the cache, the
//! thread pool, and the scripts running now, which is what -BUSY and
//! SCRIPT KILL are about.

mod bit;
pub mod cache;
mod cjson;
mod clib;
mod cmsgpack;
mod commands;
pub mod convert;
mod exec;
#[doc(hidden)]
pub mod fuzzing;
mod handoff;
pub mod inline;
mod lstruct;
pub mod lua;
mod run;
mod shebang;

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;

use crate::cmd::{is, Control, Kind, Spec};
use crate::config::Config;

/// Redis's reply to other clients while a script runs past the threshold.
pub const BUSY: &str =
    "BUSY Redis is busy running a script. You can only call SCRIPT KILL or SHUTDOWN NOSAVE.";

/// One script running now.
pub struct RunCtl {
    pub started: Instant,
    /// Set by SCRIPT KILL (or when its connection went away).
    pub killed: AtomicBool,
}

/// Scripting state shared by the whole node.
pub struct Scripts {
    pub cache: Arc<cache::ScriptCache>,
    pub pool: lua::Pool,
    running: Mutex<Vec<Arc<RunCtl>>>,
    /// `running.len()`, read without the lock on every command.
    count: AtomicUsize,
    /// `busy-reply-threshold` in ms (CONFIG SET changes it); zero: never
    /// busy.
    threshold_ms: std::sync::atomic::AtomicU64,
}

impl Scripts {
    /// The cache and the script threads (as many as the workers, at least
    /// two, so one busy script does not hold up every other).
    pub fn new(config: &Config) -> Scripts {
        let cache = Arc::new(cache::ScriptCache::default());
        let threads = config.workers.clamp(2, 16);
        Scripts {
            pool: lua::Pool::start(threads, cache.clone()),
            cache,
            running: Mutex::new(Vec::new()),
            count: AtomicUsize::new(0),
            threshold_ms: config.busy_reply_threshold.into(),
        }
    }

    /// `busy-reply-threshold` (ms).
    pub fn threshold_ms(&self) -> u64 {
        self.threshold_ms.load(Ordering::Relaxed)
    }

    pub fn set_threshold_ms(&self, ms: u64) {
        self.threshold_ms.store(ms, Ordering::Relaxed);
    }

    fn threshold(&self) -> Duration {
        Duration::from_millis(self.threshold_ms())
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<Arc<RunCtl>>> {
        self.running.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Registers a script that starts now.
    fn start(&self) -> Arc<RunCtl> {
        let ctl = Arc::new(RunCtl {
            started: Instant::now(),
            killed: AtomicBool::new(false),
        });
        let mut running = self.lock();
        running.push(ctl.clone());
        self.count.store(running.len(), Ordering::Release);
        ctl
    }

    /// Forgets a script that ended.
    fn finish(&self, ctl: &Arc<RunCtl>) {
        let mut running = self.lock();
        running.retain(|c| !Arc::ptr_eq(c, ctl));
        self.count.store(running.len(), Ordering::Release);
    }

    /// The scripts running for longer than the threshold.
    fn busy_ones(&self) -> Vec<Arc<RunCtl>> {
        let threshold = self.threshold();
        if threshold.is_zero() || self.count.load(Ordering::Acquire) == 0 {
            return Vec::new();
        }
        self.lock()
            .iter()
            .filter(|c| c.started.elapsed() >= threshold)
            .cloned()
            .collect()
    }

    /// True when some script has run past the threshold: other clients'
    /// commands are answered -BUSY. One atomic load when none runs.
    pub fn busy(&self) -> bool {
        // Asked before every command while any script runs: no Vec.
        let threshold = self.threshold();
        if threshold.is_zero() || self.count.load(Ordering::Acquire) == 0 {
            return false;
        }
        self.lock().iter().any(|c| c.started.elapsed() >= threshold)
    }
}

/// True for what Redis still serves while a script is busy (its
/// `allow-busy` commands that Elsa has): SCRIPT KILL, AUTH, HELLO, QUIT,
/// RESET, MULTI, DISCARD, WATCH, UNWATCH and SHUTDOWN. (A command refused
/// as busy inside MULTI fails the transaction: EXECABORT.)
pub fn allowed_while_busy(spec: &Spec, args: &[Bytes]) -> bool {
    match spec.kind {
        Kind::Control(Control::Script) => args.get(1).is_some_and(|a| is(a, "KILL")),
        Kind::Control(
            Control::Auth
            | Control::Hello
            | Control::Quit
            | Control::Reset
            | Control::Multi
            | Control::Discard
            | Control::Watch
            | Control::Unwatch
            | Control::Shutdown,
        ) => true,
        _ => false,
    }
}

/// True for the commands a script may call. Redis refuses its `noscript`
/// commands; of Elsa's control commands a script may call only those that
/// answer without touching the connection's state or escaping the
/// script's transaction.
fn allowed_in_script(spec: &Spec) -> bool {
    if spec.flags.contains(&"noscript") {
        return false;
    }
    match spec.kind {
        Kind::Data(_) => true,
        Kind::Control(c) => matches!(
            c,
            Control::Ping
                | Control::Echo
                | Control::Time
                | Control::Dbsize
                | Control::Randomkey
                | Control::Scan
                | Control::Keys
                | Control::Msetnx
                | Control::Lastsave
                | Control::Sort
                | Control::Dump
                | Control::Restore
                // Sent once the script's transaction commits
                // (`crate::effects`).
                | Control::Publish
                | Control::Spublish
        ),
    }
}

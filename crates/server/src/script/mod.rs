//! Lua scripting: EVAL, EVALSHA, EVAL_RO, EVALSHA_RO, SCRIPT
//! LOAD|EXISTS|FLUSH|KILL, and functions (FUNCTION, FCALL, FCALL_RO), as
//! Redis 7.0 — but each script or function call runs as one Elsa
//! transaction.
//!
//! - [`cache`]: the node-wide script cache (SHA1 → body).
//! - [`library`]: the node's function libraries, durable and shared with
//!   every node; `libload`: a library's code run on a script thread
//!   (registration, FCALL's callback); `function_cmd`: FUNCTION.
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
mod function_cmd;
#[doc(hidden)]
pub mod fuzzing;
mod handoff;
pub mod inline;
mod libload;
pub mod library;
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
/// The same while a function does.
pub const BUSY_FUNCTION: &str =
    "BUSY Redis is busy running a script. You can only call FUNCTION KILL or SHUTDOWN NOSAVE.";

/// One script running now.
pub struct RunCtl {
    pub started: Instant,
    /// Set by SCRIPT KILL (or when its connection went away).
    pub killed: AtomicBool,
    /// A function's name and the FCALL that runs it (FUNCTION STATS);
    /// None for a script.
    pub function: Option<(Bytes, Vec<Bytes>)>,
}

/// Scripting state shared by the whole node.
pub struct Scripts {
    pub cache: Arc<cache::ScriptCache>,
    /// The node's function libraries.
    pub functions: Arc<library::Functions>,
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
    pub fn new(config: &Config, functions: Arc<library::Functions>) -> Scripts {
        let cache = Arc::new(cache::ScriptCache::default());
        let threads = config.workers.clamp(2, 16);
        Scripts {
            pool: lua::Pool::start(threads, cache.clone()),
            cache,
            functions,
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

    /// Registers a script (or function) that starts now.
    fn start(&self, function: Option<(Bytes, Vec<Bytes>)>) -> Arc<RunCtl> {
        let ctl = Arc::new(RunCtl {
            started: Instant::now(),
            killed: AtomicBool::new(false),
            function,
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

    /// The -BUSY reply other clients' commands get while some script or
    /// function has run past the threshold. One atomic load when none runs.
    pub fn busy(&self) -> Option<&'static str> {
        // Asked before every command while any script runs: no Vec.
        let threshold = self.threshold();
        if threshold.is_zero() || self.count.load(Ordering::Acquire) == 0 {
            return None;
        }
        let running = self.lock();
        let busy = running.iter().find(|c| c.started.elapsed() >= threshold)?;
        Some(if busy.function.is_some() {
            BUSY_FUNCTION
        } else {
            BUSY
        })
    }

    /// SCRIPT KILL (`functions` false) or FUNCTION KILL: kills every
    /// script, or every function, past the threshold — in Elsa several may
    /// run at once. Killing one that wrote is allowed (Redis answers
    /// UNKILLABLE): its writes were only buffered in its transaction,
    /// which is dropped, so nothing of it stays. The error is Redis's when
    /// only the other kind runs, or nothing.
    fn kill(&self, functions: bool) -> Result<(), &'static str> {
        let busy = self.busy_ones();
        let (mine, others): (Vec<_>, Vec<_>) = busy
            .into_iter()
            .partition(|c| c.function.is_some() == functions);
        if mine.is_empty() {
            return Err(match (others.is_empty(), functions) {
                (true, _) => "NOTBUSY No scripts in execution right now.",
                (false, true) => BUSY,
                (false, false) => BUSY_FUNCTION,
            });
        }
        for c in mine {
            c.killed.store(true, Ordering::Relaxed);
        }
        Ok(())
    }

    /// For an EVAL, EVALSHA or FCALL (and their `_RO` forms) of a script
    /// or function that declares its flags: whether it may write (not
    /// `no-writes`). None for anything else.
    pub fn declared_writes(&self, args: &[Bytes]) -> Option<bool> {
        let name = args.first()?.to_ascii_lowercase();
        let (target, ro) = (args.get(1)?, name.ends_with(b"_ro"));
        match &name[..] {
            b"fcall" | b"fcall_ro" => {
                let f = self.functions.find(target)?;
                Some(!ro && f.flags & elsa_lattice::libraries::NO_WRITES == 0)
            }
            b"eval" | b"eval_ro" | b"evalsha" | b"evalsha_ro" => {
                let body = if name.starts_with(b"evalsha") {
                    self.cache.get(target)?
                } else {
                    target.clone()
                };
                let (flags, _) = shebang::parse(&body).ok()?;
                flags.declared.then_some(!ro && !flags.no_writes)
            }
            _ => None,
        }
    }

    /// The longest-running function now: its name, its FCALL and how long
    /// it has run (FUNCTION STATS).
    fn running_function(&self) -> Option<(Bytes, Vec<Bytes>, Duration)> {
        let running = self.lock();
        running
            .iter()
            .filter_map(|c| {
                let (name, command) = c.function.as_ref()?;
                Some((name.clone(), command.clone(), c.started.elapsed()))
            })
            .max_by_key(|r| r.2)
    }
}

/// True for what Redis still serves while a script is busy (its
/// `allow-busy` commands that Elsa has): SCRIPT KILL, AUTH, HELLO, QUIT,
/// RESET, MULTI, DISCARD, WATCH, UNWATCH and SHUTDOWN. (A command refused
/// as busy inside MULTI fails the transaction: EXECABORT.)
pub fn allowed_while_busy(spec: &Spec, args: &[Bytes]) -> bool {
    match spec.kind {
        Kind::Control(Control::Script) => args.get(1).is_some_and(|a| is(a, "KILL")),
        Kind::Control(Control::Function) => {
            args.get(1).is_some_and(|a| is(a, "KILL") || is(a, "STATS"))
        }
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

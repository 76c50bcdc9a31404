//! Running a script for a connection: as one SI transaction.
//!
//! A script is atomic in Redis because Redis runs nothing else meanwhile.
//! Elsa runs other clients (and other scripts) meanwhile, on other shards
//! and nodes, so a script is made atomic the way an interactive
//! transaction is: it runs inside an SI `Txn`. Every `redis.call` of a data
//! command becomes ops applied to that transaction — reads see the
//! script's own writes, writes are buffered — and when the script ends the
//! transaction commits, all of it or nothing, on every shard and node it
//! touched. If the commit loses to a concurrent one (CONFLICT), the whole
//! script runs again from the start, transparently (bounded, with the
//! usual backoff). A script that raises an error (or is killed) writes
//! nothing: its transaction is dropped. (Redis keeps the writes a script
//! made before its error; see docs/transactions.md.)
//!
//! Inside `BEGIN … COMMIT` a script's calls join the open transaction
//! instead (they commit with it). Inside MULTI, an EXEC whose queue holds a
//! script runs the whole queue as one SI transaction the same way
//! (`super::exec`). What a script publishes goes out once, after its
//! transaction commits (`crate::effects`).

use std::sync::Arc;

use bytes::Bytes;
use elsa_txn::router::backoff;
use elsa_txn::{Isolation, Txn, TxnError};

use super::convert::{self, Reply};
use super::lua::{Event, Job, Outcome, Run};
use super::{allowed_in_script, RunCtl};
use crate::cmd::{self, Control, DataCmd, Kind};
use crate::conn::{run_in_txn, write_shaped, Conn};
use crate::state::Shared;

/// Most runs of one script (or EXEC) that lose to concurrent commits
/// before the client gets the CONFLICT. With the backoff (past 32 quick
/// retries it sleeps up to a few ms), a second or so of losing: longer
/// would run into clients' read timeouts.
pub(super) const MAX_ATTEMPTS: u32 = 200;

/// A script to run, and with what.
pub(super) struct Script {
    pub(super) sha: String,
    pub(super) body: Bytes,
    pub(super) keys: Vec<Bytes>,
    pub(super) argv: Vec<Bytes>,
    pub(super) ro: bool,
    /// Declared `allow-oom`: its writes run over `maxmemory` too.
    pub(super) allow_oom: bool,
    /// FCALL: the function (then `sha` is its name), and the command.
    pub(super) function: Option<(super::library::Callable, Vec<Bytes>)>,
}

/// Unregisters a run when it ends — or when the connection's task is
/// dropped mid-run, which also kills the script (nobody would answer it).
struct Running {
    shared: Arc<Shared>,
    ctl: Arc<RunCtl>,
}

impl Drop for Running {
    fn drop(&mut self) {
        self.ctl
            .killed
            .store(true, std::sync::atomic::Ordering::Relaxed);
        self.shared.scripts.finish(&self.ctl);
    }
}

/// Where EVAL's or FCALL's keys end (`args[3..split]`), given its key
/// count; Redis's errors for a count out of range.
pub(super) fn key_split(args: &[Bytes], numkeys: i64) -> Result<usize, &'static str> {
    if numkeys > (args.len() - 3) as i64 {
        return Err("ERR Number of keys can't be greater than number of args");
    }
    if numkeys < 0 {
        return Err("ERR Number of keys can't be negative");
    }
    Ok(3 + numkeys as usize)
}

pub(super) fn conflict() -> String {
    "CONFLICT the script lost to concurrent commits too many times; nothing was written, retry"
        .into()
}

impl Conn {
    /// EVAL / EVALSHA / EVAL_RO / EVALSHA_RO script numkeys key… arg….
    pub(crate) async fn eval(&mut self, args: &[Bytes]) {
        let name = args[0].to_ascii_lowercase();
        if name.starts_with(b"fcall") {
            return self.fcall(args).await;
        }
        let by_sha = name.starts_with(b"evalsha");
        let ro = name.ends_with(b"_ro");
        // Redis's order: a SHA of the wrong length first, then numkeys,
        // then the cache.
        if by_sha && args[1].len() != 40 {
            return self
                .w()
                .error("NOSCRIPT No matching script. Please use EVAL.");
        }
        let numkeys = match cmd::int_arg(&args[2]) {
            Ok(n) => n,
            Err(e) => return self.w().error(&e.0),
        };
        let split = match key_split(args, numkeys) {
            Ok(split) => split,
            Err(e) => return self.w().error(e),
        };
        let (sha, body) = if by_sha {
            match self.shared.scripts.cache.get(&args[1]) {
                Some(body) => (String::from_utf8_lossy(&args[1]).to_ascii_lowercase(), body),
                None => {
                    return self
                        .w()
                        .error("NOSCRIPT No matching script. Please use EVAL.")
                }
            }
        } else {
            (super::cache::sha1hex(&args[1]), args[1].clone())
        };
        // The shebang's flags (`super::shebang`): its errors are the
        // script's compile errors; `no-writes` makes it read-only, and a
        // script that declares writes is refused by the `_RO` commands.
        let flags = match super::shebang::parse(&body) {
            Ok((flags, _)) => flags,
            Err(e) => return self.w().error(&e),
        };
        if ro && flags.declared && !flags.no_writes {
            return self
                .w()
                .error("ERR Can not execute a script with write flag using *_ro command.");
        }
        // A script that declares its flags runs over `maxmemory` only with
        // `allow-oom` (or `no-writes`, which implies it), whatever it
        // would do: Redis flags such an EVAL `denyoom` (its
        // `scriptFlagsToCmdFlags`) and refuses it before it runs.
        if flags.declared && !flags.allow_oom && !flags.no_writes && self.shared.memory.limit.oom()
        {
            return self.w().error(crate::memory::ERR_OOM);
        }
        let script = Script {
            sha,
            body,
            keys: args[3..split].to_vec(),
            argv: args[split..].to_vec(),
            ro: ro || flags.no_writes,
            allow_oom: flags.allow_oom,
            function: None,
        };
        self.run_scripted(script).await
    }

    /// Runs a script or function as one transaction (or inside the open
    /// one), retried on conflict, and answers.
    pub(super) async fn run_scripted(&mut self, script: Script) {
        if self.s.txn.is_some() {
            // Inside BEGIN (or an EXEC run as one transaction): join it.
            // What it published goes with what it wrote: kept in the open
            // transaction even if it fails, and sent if that commits.
            let outcome = self.run_script(&script).await;
            return self.answer(&script, outcome);
        }
        // What the script publishes goes out once its transaction commits
        // (`crate::effects`): dropped with a failed run or a lost attempt.
        let mark = self.s.effects.len();
        let mut attempt = 0;
        loop {
            self.s.txn = Some(Txn::begin(&self.coord, Isolation::Snapshot, self.s.ack));
            let outcome = self.run_script(&script).await;
            let Some(txn) = self.s.txn.take() else {
                self.drop_effects(mark);
                return self.w().error("ERR the script's transaction was lost");
            };
            if !matches!(outcome, Outcome::Ran(..)) {
                // Failed or did not compile: its writes are dropped.
                self.drop_effects(mark);
                return self.answer(&script, outcome);
            }
            let result = self.commit_run(txn).await;
            if result.is_ok() {
                self.take_effects(mark).await;
            } else {
                self.drop_effects(mark);
            }
            match result {
                Ok(()) => return self.answer(&script, outcome),
                Err(TxnError::Conflict(_)) if attempt < MAX_ATTEMPTS => {
                    backoff(attempt).await;
                    attempt += 1;
                }
                Err(TxnError::Conflict(_)) => return self.w().error(&conflict()),
                Err(e) => return self.w().error(&e.to_string()),
            }
        }
    }

    /// Commits a script's (or a scripted EXEC's) transaction; once it
    /// wrote, LASTCOMMIT answers its timestamp and blocked pops look again
    /// (it may have pushed to a list a client waits on).
    pub(super) async fn commit_run(&mut self, txn: Txn) -> Result<(), TxnError> {
        let wrote = txn.has_writes();
        let ts = txn.commit(&self.coord).await?;
        if wrote {
            self.s.last_commit = Some(ts);
            self.shared.pushes.notify_waiters();
        }
        Ok(())
    }

    /// Writes how a script ended; a script that compiled is cached (EVAL
    /// adds to the cache what it ran, as in Redis).
    fn answer(&mut self, script: &Script, outcome: Outcome) {
        if script.function.is_none() && !matches!(outcome, Outcome::Compile(_)) {
            self.shared
                .scripts
                .cache
                .insert(script.sha.clone(), script.body.clone());
        }
        match outcome {
            Outcome::Ran(reply, counted) => {
                self.stat.error_counted = counted;
                convert::write(&mut self.w(), &reply)
            }
            Outcome::Failed(e, counted) => {
                self.stat.error_counted = counted;
                self.w().error(&e)
            }
            Outcome::Compile(e) => self.w().error(&e),
        }
    }

    /// Runs the script on a script thread, serving its `redis.call`s here
    /// (inside `self.s.txn`) until it ends. The worker thread is never
    /// blocked: this task only awaits the script thread's messages.
    async fn run_script(&mut self, script: &Script) -> Outcome {
        // The transaction goes to the script thread for the run (it runs
        // plain data commands itself: `super::inline`) and comes back for
        // each call served here, and at the end.
        let slot: super::inline::Slot = Arc::new(std::sync::Mutex::new(self.s.txn.take()));
        let outcome = self.serve_script(script, &slot).await;
        self.s.txn = take_txn(&slot);
        outcome
    }

    /// [`Conn::run_script`] with the transaction in `slot`.
    async fn serve_script(&mut self, script: &Script, slot: &super::inline::Slot) -> Outcome {
        let shared = self.shared.clone();
        let running = Running {
            ctl: shared.scripts.start(
                script
                    .function
                    .as_ref()
                    .map(|(f, command)| (f.name.clone(), command.clone())),
            ),
            shared: shared.clone(),
        };
        let (events_tx, mut events) = tokio::sync::mpsc::unbounded_channel();
        let (answers_tx, answers) = std::sync::mpsc::channel();
        let job = Job::Run(Box::new(Run {
            sha: script.sha.clone(),
            body: script.body.clone(),
            keys: script.keys.clone(),
            argv: script.argv.clone(),
            ro: script.ro,
            ctl: running.ctl.clone(),
            events: events_tx,
            answers,
            inline: Some(super::inline::Inline {
                node: self.coord.node.clone(),
                txn: slot.clone(),
                db: self.s.db,
                shared: shared.clone(),
                acl_free: self.s.acl_free,
                ro: script.ro,
            }),
            function: script
                .function
                .as_ref()
                .map(|(f, _)| super::libload::Target {
                    library: f.library.clone(),
                    version: format!("{}.{}", f.version.commit_ts, f.version.origin),
                    code: f.code.clone(),
                    name: Bytes::from(f.name.to_ascii_lowercase()),
                }),
        }));
        if !shared.scripts.pool.send(job) {
            return Outcome::Failed("ERR script threads are not running".into(), false);
        }
        loop {
            match next_event(&mut events).await {
                Some(Event::Call { args, resp3 }) => {
                    self.s.txn = take_txn(slot);
                    let reply = self
                        .script_call(args, script.ro, script.allow_oom, resp3)
                        .await;
                    *slot.lock().unwrap_or_else(|e| e.into_inner()) = self.s.txn.take();
                    let _ = answers_tx.send(reply);
                }
                Some(Event::AclCheck { args }) => {
                    let _ = answers_tx.send(self.acl_check_for_script(&args));
                }
                Some(Event::Done(outcome)) => return outcome,
                None => return Outcome::Failed("ERR the script thread stopped".into(), false),
            }
        }
    }
}

/// The transaction out of a run's slot.
fn take_txn(slot: &super::inline::Slot) -> Option<Txn> {
    slot.lock().unwrap_or_else(|e| e.into_inner()).take()
}

/// The script's next message: polled for up to [`super::handoff::SPIN`] (the
/// script thread runs Lua between its calls, usually for a µs or two),
/// then awaited. While a script runs this holds its worker for at most
/// that long per call; Redis runs nothing else meanwhile at all.
async fn next_event(events: &mut tokio::sync::mpsc::UnboundedReceiver<Event>) -> Option<Event> {
    use std::ops::ControlFlow::{Break, Continue};
    use tokio::sync::mpsc::error::TryRecvError;
    let polled = super::handoff::spin(|| match events.try_recv() {
        Ok(e) => Break(Some(e)),
        Err(TryRecvError::Disconnected) => Break(None),
        Err(TryRecvError::Empty) => Continue(()),
    });
    match polled {
        Some(e) => e,
        None => events.recv().await,
    }
}

impl Conn {
    /// `redis.acl_check_cmd`: 1 when this connection's user may run the
    /// command line, 0 when not (nothing logged, as Redis).
    fn acl_check_for_script(&self, args: &[Bytes]) -> Reply {
        let Some(spec) = cmd::lookup(&args[0]).filter(|s| self.command_exists(s)) else {
            return Reply::Error(b"ERR Invalid command passed to redis.acl_check_cmd()".to_vec());
        };
        let allowed = self.s.acl_free || crate::acl::check(&self.s.user, spec, args).is_ok();
        Reply::Int(allowed as i64)
    }

    /// One `redis.call`: checked as Redis checks a script's command, then
    /// run inside the script's transaction; its reply, read back from the
    /// RESP it was written as.
    async fn script_call(
        &mut self,
        args: Vec<Bytes>,
        ro: bool,
        allow_oom: bool,
        resp3: bool,
    ) -> Reply {
        let refuse = |m: &str| Reply::Error(m.as_bytes().to_vec());
        // Every error a call answers counts in errorstats here, as Redis
        // counts it at the call (`afterErrorReply`); the script's reply
        // does not count it again (`convert::COUNTED`).
        let Some(spec) = cmd::lookup(&args[0]).filter(|s| self.command_exists(s)) else {
            self.stat.local.error("ERR");
            return refuse("ERR Unknown Redis command called from script");
        };
        // A refusal counts as a rejected call of the command (Redis's
        // `incrCommandStatsOnError`).
        let stat_slot = crate::cmdstats::slot(spec, &args);
        if let Some(refused) = self.script_refusal(spec, &args, ro, allow_oom) {
            self.stat.local.rejected(stat_slot);
            if let Reply::Error(e) = &refused {
                self.stat.local.error(&String::from_utf8_lossy(e));
            }
            return refused;
        }
        if self.shared.conns.monitors.any() {
            self.feed_script_call(&args);
        }
        // The command writes its reply into a scratch buffer, in the
        // script's protocol, exactly as it would for a client.
        let saved_out = std::mem::take(&mut self.out);
        let saved_resp3 = std::mem::replace(&mut self.s.resp3, resp3);
        let started = std::time::Instant::now();
        if self.s.script_keys.is_some() && spec.flags.contains(&"readonly") {
            self.s.script_read = true;
        }
        match spec.kind {
            Kind::Data(_) if elsa_shard::ops::streams::blocks_in_args(&args) => {
                let name = String::from_utf8_lossy(&args[0]).into_owned();
                self.w().error(&format!(
                    "ERR {name} command is not allowed with BLOCK option from scripts"
                ))
            }
            Kind::Data(parse) => match self.data_cmd(parse, &args) {
                Ok(dc) => self.run_in_script_txn(dc).await,
                Err(e) => self.w().error(&e.0),
            },
            // Sent once the script's transaction commits.
            Kind::Control(c @ (Control::Publish | Control::Spublish)) => {
                self.defer_publish(c, &args)
            }
            // Boxed: this is a cycle (control → eval → here → control).
            Kind::Control(c) => Box::pin(self.control(c, args)).await,
        }
        let out = std::mem::replace(&mut self.out, saved_out);
        self.s.resp3 = saved_resp3;
        // Counted in INFO commandstats as Redis counts a script's calls.
        let failed = matches!(out.first(), Some(b'-' | b'!'));
        let us = started.elapsed().as_micros() as u64;
        self.stat.local.call(stat_slot, us, failed);
        if let Some(e) = crate::intro::error_prefix(&out) {
            self.stat.local.error(e);
        }
        convert::parse(&out).unwrap_or_else(|| refuse("ERR unreadable reply"))
    }

    /// Why a script's call of `spec` is refused before it runs (Redis's
    /// checks in `scriptCall`, in its order), if it is.
    fn script_refusal(
        &mut self,
        spec: &'static cmd::Spec,
        args: &[Bytes],
        ro: bool,
        allow_oom: bool,
    ) -> Option<Reply> {
        let refuse = |m: &str| Some(Reply::Error(m.as_bytes().to_vec()));
        if !spec.arity_ok(args.len()) {
            return refuse("ERR Wrong number of args calling Redis command from script");
        }
        if !allowed_in_script(spec) {
            return refuse("ERR This Redis command is not allowed from script");
        }
        // PUBLISH and PFCOUNT are `may_replicate` in Redis: refused from
        // EVAL_RO too.
        if ro && (spec.is_write() || spec.may_replicate()) {
            return refuse("ERR Write commands are not allowed from read-only scripts.");
        }
        if let Some(e) = cmd::subcommand_error(spec, args) {
            return Some(Reply::Error(e.into_bytes()));
        }
        if let Some(d) = self.acl_check_logged(spec, args, crate::acl::Context::Lua) {
            return refuse(&format!(
                "ERR The user executing the script {}",
                d.script_message()
            ));
        }
        // Over maxmemory with nothing to evict: a `denyoom` command is
        // refused inside a script too (Redis's `scriptVerifyOOM`).
        if !allow_oom && self.shared.memory.refuses(spec, args, None) {
            return refuse(crate::memory::ERR_OOM);
        }
        None
    }

    /// Applies a data command's ops to the open transaction and writes its
    /// reply.
    pub(super) async fn run_in_script_txn(&mut self, dc: DataCmd) {
        let Some(mut txn) = self.s.txn.take() else {
            return self.w().error("ERR no transaction open for the script");
        };
        let result = if dc.ops.is_empty() {
            Ok(Vec::new())
        } else {
            run_in_txn(&self.coord, &mut txn, dc.ops).await
        };
        self.s.txn = Some(txn);
        match result {
            Ok(replies) => write_shaped(&mut self.w(), dc.shape, &replies),
            Err(e) => self.w().error(&e.to_string()),
        }
    }
}

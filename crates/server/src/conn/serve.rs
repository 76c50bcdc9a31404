//! The connection's loop: read a batch of requests, classify each, run
//! them (consecutive lone single-key commands together, one message per
//! shard), write the replies with one write. It dispatches to the command
//! families (`crate::admin` and the others); the connection's state and
//! its replies are the parent's.

use super::*;
use crate::cmd::{self, Control, DataCmd, Kind, Shape};
use crate::resp::parse_request_resuming;
use bytes::Bytes;
use elsa_shard::{KeyOp, OpReply};
use elsa_txn::TxnError;
use std::sync::atomic::Ordering;

/// How [`Conn::serve_here`] ended.
enum Served {
    /// The connection is done (closed, or to be closed).
    Ended,
    /// It moves to this worker.
    Moving(usize),
}

/// Why parsing stopped before the input buffer was used up.
enum Stop {
    /// Answered with `-ERR Protocol error: …`, then the connection closes.
    Protocol(crate::resp::ProtocolError),
    /// `POST` or `Host:` as a command: an HTTP request (cross-protocol
    /// scripting, e.g. a browser made to post to the port). Closed without
    /// a reply, nothing after it runs, as in Redis (`securityWarningCommand`).
    CrossProtocol,
}

/// A command name no Redis client sends but every HTTP request starts with
/// (or carries as a header line).
fn is_cross_protocol(name: &[u8]) -> bool {
    name.eq_ignore_ascii_case(b"POST") || name.eq_ignore_ascii_case(b"Host:")
}

/// Before AUTH a length over the (small) unauthenticated limits is refused
/// with Redis's words for it.
fn unauthenticated(e: crate::resp::ProtocolError) -> crate::resp::ProtocolError {
    match e.0.as_str() {
        "invalid multibulk length" => {
            crate::resp::ProtocolError("unauthenticated multibulk length".into())
        }
        "invalid bulk length" => crate::resp::ProtocolError("unauthenticated bulk length".into()),
        _ => e,
    }
}

impl Conn {
    /// Serves the connection until the client leaves or breaks the protocol.
    ///
    /// Input and output move independently, as in Redis: every complete
    /// request buffered is run (in batches of [`MAX_BATCH`], however many
    /// are buffered), replies queue in `out` and leave as the socket takes
    /// them, and input keeps being read while they wait. So a client that
    /// writes a whole pipeline before it reads a reply never deadlocks
    /// against us. What waits is bounded: `client-output-buffer-limit` for
    /// replies, [`QUERY_BUFFER_LIMIT`] for requests; past either the
    /// connection is closed with a log line, never left to stall. A
    /// subscriber's messages, queued by publishers on any thread, wake the
    /// loop and go out ahead of the replies to requests read after them
    /// (past `client-output-buffer-limit pubsub`, the connection closes).
    ///
    /// **Moving to the keys' worker.** Connections are dealt to workers
    /// round-robin, so a client that does not know the slot map (not a
    /// cluster client) may land on a thread whose shard holds none of its
    /// keys, and then every command is a message to another thread and a
    /// wake-up on both sides (with one hot key, a quarter more CPU per
    /// request at two workers than at one: `docs/performance-log.md`). After
    /// `worker-move-after` (256) lone commands in a row for one other worker's shard,
    /// the connection moves there, between two batches and only when
    /// nothing is in flight: no reply waiting to be sent, no MULTI, open
    /// transaction, WATCH, subscription, MONITOR or tracking, no CLIENT
    /// REPLY OFF|SKIP, not over TLS, and not one that came in on a
    /// worker's own port (`worker-port-base`: a cluster client sends that
    /// worker its slots). It keeps its socket, its client
    /// id and everything of its session (database, name, protocol, user);
    /// requests already read go with it and are answered there, in order.
    /// Answers `Some` when the connection leaves this way, for the worker's
    /// loop to send on.
    pub(crate) async fn serve(self) -> Option<Parcel> {
        let mut me = self;
        match me.serve_here().await {
            Served::Ended => None,
            Served::Moving(to) => me.into_parcel(to),
        }
    }

    async fn serve_here(&mut self) -> Served {
        if !crate::tls::take_early(&mut self.stream, &mut self.inbuf) {
            return Served::Ended;
        }
        if self.shared.acl.refuses(&self.s.addr) {
            self.shared.rejected.fetch_add(1, Ordering::Relaxed);
            self.out.extend_from_slice(crate::acl::DENIED.as_bytes());
            self.finish().await;
            return Served::Ended;
        }
        let mut last_read = std::time::Instant::now();
        loop {
            if !self.drain_pushes() {
                return Served::Ended;
            }
            if !self.run_buffered().await {
                return Served::Ended;
            }
            if self.s.closing || self.input_closed {
                self.finish().await;
                return Served::Ended;
            }
            if !self.within_query_limit() {
                return Served::Ended;
            }
            if self.client.client.is_killed() {
                return Served::Ended; // CLIENT KILL: closed at once, as Redis frees it
            }
            if self.home.due() && self.may_move() {
                return Served::Moving(self.home.worker);
            }
            let write = !self.out.is_empty() || self.stream.wants_write();
            let pushed = crate::pubsub::commands::pushed(self.subs.queue().cloned());
            let entry = self.client.client.clone();
            let idle_until = self.idle_limit().map(|d| last_read + d);
            tokio::select! {
                _ = entry.woken() => {}
                _ = async {
                    match idle_until {
                        Some(t) => tokio::time::sleep_until(t.into()).await,
                        None => std::future::pending().await,
                    }
                } => {
                    // Redis's `timeout`: closed without a reply.
                    tracing::debug!(client = self.s.id, "closing idle client");
                    self.finish().await;
                    return Served::Ended;
                }
                r = self.stream.readable() => {
                    last_read = std::time::Instant::now();
                    if r.is_err() || !self.read_some() {
                        // EOF or a dead socket: answer what was asked
                        // (a half-closed client still reads), then go.
                        let _ = self.run_buffered().await;
                        self.finish().await;
                        return Served::Ended;
                    }
                }
                r = self.stream.writable(), if write => {
                    if r.is_err() || !self.write_some() {
                        return Served::Ended;
                    }
                }
                _ = pushed => {}
            }
        }
    }

    /// How long this client may stay idle (`timeout`): none when it is 0,
    /// for a subscriber or a monitor (as Redis exempts them).
    fn idle_limit(&self) -> Option<std::time::Duration> {
        let secs = self.shared.runtime.timeout_sec.load(Ordering::Relaxed);
        let exempt = self.subs.active() || self.client.client.monitor.load(Ordering::Relaxed);
        (secs > 0 && !exempt).then(|| std::time::Duration::from_secs(secs))
    }

    /// Runs every complete request in the input buffer, batch by batch,
    /// sending replies as the socket takes them. False when the connection
    /// must close at once (client gone, output over its limit).
    async fn run_buffered(&mut self) -> bool {
        loop {
            let (reqs, stop) = self.take_batch();
            if reqs.is_empty() && stop.is_none() {
                return true;
            }
            if !reqs.is_empty() {
                self.execute(reqs).await;
            }
            match stop {
                Some(Stop::Protocol(e)) => {
                    tracing::debug!(client = self.s.id, "closing connection: {e}");
                    self.w().error(&format!("ERR {e}"));
                    self.s.closing = true;
                }
                Some(Stop::CrossProtocol) => {
                    // As Redis: no reply, nothing after it runs.
                    tracing::warn!(
                        client = self.s.id,
                        addr = %self.s.addr,
                        "Possible SECURITY ATTACK detected. It looks like somebody is sending POST or Host: commands to Elsa. This is likely due to an attacker attempting to use Cross Protocol Scripting to compromise your Elsa instance. Connection aborted."
                    );
                    self.s.closing = true;
                }
                None => {}
            }
            if !self.out.is_empty() {
                // The replies go out at the end of the worker's turn, after
                // every connection with requests in hand has run, as Redis
                // writes them in `beforeSleep`: the sends of a turn come
                // together. A send wakes the client if it sleeps, and waking
                // a thread on another CPU is an interrupt (in a VM, an exit):
                // with each reply sent as soon as it was made, between two
                // connections' reads, the client was woken over and over,
                // and that wake-up was 28 % of the worker's CPU under
                // pipelined GETs (Redis: 5 %; `sock_def_readable` under
                // `sendto` in `perf`).
                to_the_back_of_the_turn().await;
            }
            if !self.within_output_limit() || !self.write_some() {
                return false;
            }
            if self.s.closing {
                return true;
            }
        }
    }

    /// Up to [`MAX_BATCH`] complete requests from the input buffer, and
    /// what stopped parsing, if something did. Before AUTH a batch ends
    /// after AUTH/HELLO, so what follows is parsed with the limits of an
    /// authenticated client, as Redis parses one request at a time.
    fn take_batch(&mut self) -> (Vec<Vec<Bytes>>, Option<Stop>) {
        let mut reqs = Vec::new();
        let limits = self.limits();
        while reqs.len() < MAX_BATCH {
            match parse_request_resuming(&mut self.inbuf, &limits, &mut self.partial) {
                Ok(Some(args)) => {
                    if args.first().is_some_and(|a| is_cross_protocol(a)) {
                        return (reqs, Some(Stop::CrossProtocol));
                    }
                    let authenticates = !self.s.authed
                        && args
                            .first()
                            .is_some_and(|a| cmd::is(a, "AUTH") || cmd::is(a, "HELLO"));
                    if reqs.is_empty() {
                        // `redis-benchmark -P 16`'s batch without growing
                        // (a request is three words), allocated only once
                        // one is there: the loop ends on an empty batch.
                        reqs.reserve(16);
                    }
                    reqs.push(args);
                    if authenticates {
                        break;
                    }
                }
                Ok(None) => break,
                Err(e) => {
                    let e = if self.s.authed { e } else { unauthenticated(e) };
                    return (reqs, Some(Stop::Protocol(e)));
                }
            }
        }
        (reqs, None)
    }

    /// Sends what is left (the client may still be reading a half-closed
    /// connection), then closes.
    async fn finish(&mut self) {
        self.stream
            .finish(&mut self.out, std::time::Duration::from_secs(10))
            .await;
    }

    async fn execute(&mut self, reqs: Vec<Vec<Bytes>>) {
        self.shared
            .total_commands
            .fetch_add(reqs.len() as u64, Ordering::Relaxed);
        // Room for every request at once: a `KeyOp` is large, and growing
        // the run 4 → 8 → 16 copied it each time (3 % of the CPU under
        // pipelined GETs of one key, in `realloc`).
        let mut lone: Vec<KeyOp> = Vec::with_capacity(reqs.len());
        // For CLIENT LIST's `cmd`: the batch's last command.
        let last = reqs
            .iter()
            .rev()
            .find_map(|a| Some((a.first()?.clone(), a.get(1).cloned())));
        let registry = self.shared.conns.clone();
        for args in reqs {
            if args.is_empty() {
                continue;
            }
            // The rare paths (`crate::clients`), one relaxed load each
            // when unused: CLIENT PAUSE, MONITOR, CLIENT REPLY OFF|SKIP.
            if registry.pause.maybe() {
                let may_write = crate::clients::pause::Pause::pauses_on_write(
                    &args,
                    self.s.multi.as_ref().map(|_| &self.s.multi_args[..]),
                    |a| self.shared.scripts.declared_writes(a),
                );
                if !lone.is_empty() {
                    // What came before the paused command answers first.
                    self.run_lone(std::mem::take(&mut lone)).await;
                }
                if !self.out.is_empty() && !self.write_some() {
                    self.s.closing = true;
                    return;
                }
                if !self.wait_paused(&args, may_write).await {
                    return;
                }
            }
            let monitored = registry
                .monitors
                .any()
                .then(|| (args.clone(), self.s.multi.is_some()));
            let quiet = self.cl.quiet();
            if quiet && !lone.is_empty() {
                self.run_lone(std::mem::take(&mut lone)).await;
            }
            let out_before = self.out.len();
            // Every blocking command's name starts with a B: one byte
            // compared here, so that CLIENT LIST shows it while it waits.
            // Set afresh for every command: a B-command that does not
            // block (BEGIN, BITCOUNT) must not leave it set, or the
            // connection would never move (`Conn::may_move`).
            self.cl.blocking_cmd =
                matches!(args[0].first(), Some(b'b' | b'B')).then(|| args[0].clone());
            // A run of lone commands is timed as a whole, from its first
            // command's classification (`crate::intro::ConnStat`). Inside
            // MULTI nothing is timed before EXEC (which reads the clock in
            // `stat_before`).
            let t0 = (lone.is_empty() && self.s.multi.is_none()).then(std::time::Instant::now);
            let step = self.classify(args);
            if let Step::Lone(kop) = &step {
                self.note_home(kop.hash);
            }
            // MONITOR: a control command is shown once it ran (see
            // `feed_monitors`), anything else now.
            let mut feed_after = None;
            if let Some((args, was_in_multi)) = monitored {
                // (EVAL shows before the `redis.call`s it makes, as Redis
                // feeds it at its start.)
                if matches!(step, Step::Control(c, _) if c != Control::Eval) {
                    self.feed_queued(&args, was_in_multi);
                    feed_after = Some((args, was_in_multi));
                } else {
                    let ran = !matches!(step, Step::Refuse(_) | Step::Drop | Step::ExecAbort(_));
                    self.feed_monitors(&args, ran, was_in_multi);
                }
            }
            match step {
                Step::Lone(kop) if quiet => {
                    self.stat.lone_queued(t0);
                    self.run_lone(vec![kop]).await;
                    if self.cl.after_command() {
                        self.out.truncate(out_before);
                    }
                }
                Step::Lone(kop) => {
                    self.stat.lone_queued(t0);
                    lone.push(kop)
                }
                step => {
                    if quiet {
                        // (Un)subscribe confirmations are pushes, which
                        // CLIENT REPLY OFF|SKIP do not silence (Redis's
                        // `CLIENT_PUSHING`, in RESP2 too).
                        let pushes = matches!(step, Step::Control(c, _) if crate::pubsub::commands::confirms(c));
                        let token = self.stat_before(&step, t0);
                        self.dispatch(step).await;
                        self.stat_after(token);
                        if let Some((args, in_multi)) = feed_after {
                            self.feed_monitors(&args, true, in_multi);
                        }
                        if self.cl.after_command() && !pushes {
                            self.out.truncate(out_before);
                        }
                        self.drain_pushes_between();
                        if self.s.closing {
                            return;
                        }
                        continue;
                    }
                    if !lone.is_empty() {
                        self.run_lone(std::mem::take(&mut lone)).await;
                        self.drain_pushes_between();
                        if self.s.closing {
                            return;
                        }
                    }
                    let token = self.stat_before(&step, t0);
                    let out_before = self.out.len();
                    self.dispatch(step).await;
                    self.stat_after(token);
                    if let Some((args, in_multi)) = feed_after {
                        self.feed_monitors(&args, true, in_multi);
                    }
                    // CLIENT REPLY OFF|SKIP just ran: it starts counting.
                    if self.cl.quiet() && self.cl.after_command() {
                        self.out.truncate(out_before);
                    }
                    self.drain_pushes_between();
                    if self.out.len() > FLUSH_AT
                        && (!self.within_output_limit() || !self.write_some())
                    {
                        self.s.closing = true;
                        return;
                    }
                    if self.s.closing {
                        return;
                    }
                }
            }
        }
        if !lone.is_empty() {
            self.run_lone(lone).await;
            self.drain_pushes_between();
        }
        self.publish_batch(last);
        self.noloop_done();
        // Blocked clients try again once what this batch wrote is
        // committed (a transaction's writes: at its end).
        if self.list_written && self.s.multi.is_none() && self.s.txn.is_none() {
            self.list_written = false;
            self.shared.pushes.notify_waiters();
        }
    }

    fn classify(&mut self, args: Vec<Bytes>) -> Step {
        let caching = self.take_caching(&args);
        self.stat.slot = crate::cmdstats::NO_SLOT;
        let Some(spec) = cmd::lookup(&args[0]).filter(|s| self.command_exists(s)) else {
            return Step::Refuse(cmd::unknown_command(&args));
        };
        self.stat.slot = crate::cmdstats::slot(spec, &args);
        let refuse = |msg: String| match spec.kind {
            Kind::Control(Control::Exec) => Step::ExecAbort(msg),
            _ => Step::Refuse(msg),
        };
        if !self.acl_current() {
            self.s.closing = true;
            return Step::Drop;
        }
        if !self.s.authed && !spec.allowed_unauthenticated() && !self.shared.acl.default_open() {
            return refuse("NOAUTH Authentication required.".into());
        }
        if let Some(busy) = self.shared.scripts.busy() {
            if !crate::script::allowed_while_busy(spec, &args) {
                return refuse(busy.into());
            }
        }
        if !cmd::arity_ok_for(spec, &args) {
            return refuse(cmd::wrong_arity(spec.name));
        }
        // A container's unknown subcommand or wrong count is refused before
        // anything runs (inside MULTI it fails the transaction), as in Redis.
        if let Some(e) = cmd::subcommand_error(spec, &args) {
            return refuse(e);
        }
        if let Some(d) = self.acl_denied(spec, &args) {
            return refuse(d.message());
        }
        // Over maxmemory with nothing to evict (`crate::memory`).
        let queued = self.s.multi.as_ref().map(|_| &self.s.multi_args[..]);
        if self.shared.memory.refuses(spec, &args, queued) {
            return refuse(crate::memory::ERR_OOM.into());
        }
        // A MONITOR connection is a replica to Redis: it may not touch the
        // key space (`processCommand`).
        if self
            .client
            .client
            .monitor
            .load(std::sync::atomic::Ordering::Relaxed)
            && crate::clients::monitor::touches_keyspace(spec)
        {
            return refuse("ERR Replica can't interact with the keyspace".into());
        }
        if let Some(e) = self.pubsub_refusal(spec, &args) {
            return refuse(e);
        }
        if blocking::may_wake_a_blocked_pop(spec.name) {
            self.list_written = true;
        }
        if self.s.tracking.is_some() {
            self.noloop_writing(spec, &args);
            if matches!(spec.kind, Kind::Control(Control::Eval)) {
                self.script_may_track(spec, &args, caching);
            }
        }
        match spec.kind {
            Kind::Control(c) => {
                if self.shared.slowlog.enabled() {
                    // For the slow log; a data command's are kept without a copy.
                    self.stat.keep_args(args.clone());
                }
                self.keep_queued_args(&args);
                Step::Control(c, args)
            }
            // MEMORY STATS, DOCTOR… are node-wide (`crate::memory`); USAGE
            // is a data command like any other (it queues in MULTI).
            Kind::Data(_) if spec.name == "memory" && crate::memory::node_wide(&args) => {
                self.keep_queued_args(&args);
                Step::Control(Control::Memory, args)
            }
            Kind::Data(parse) => {
                let parsed = self.data_cmd(parse, &args);
                if let (Ok(dc), Some(_)) = (&parsed, &self.s.tracking) {
                    // (Only a tracking connection pays for the flag lookup.)
                    self.remember_reads(spec.flags.contains(&"readonly"), caching, dc);
                }
                if self.s.multi.is_some() {
                    // Kept for EXEC's checks: moved, not copied (a queued
                    // command's arguments were copied here, 2 % of the CPU
                    // under MULTI/EXEC batches). The slow log gets none:
                    // queuing is not a call it times (`stat_after` drops a
                    // queued command's arguments unread), and a copy for it
                    // was another 2-3 % of those batches.
                    self.s.classified = Some(args);
                } else if self.shared.slowlog.enabled() {
                    self.stat.keep_args(args);
                }
                let plain = self.s.txn.is_none() && self.s.multi.is_none();
                match parsed {
                    Ok(mut dc) if plain && dc.shape == Shape::One && dc.is_single_key() => {
                        match dc.ops.pop() {
                            Some((key, op)) => Step::Lone(KeyOp {
                                hash: self.coord.hash(&key),
                                key,
                                op,
                            }),
                            None => Step::Data(Ok(dc)),
                        }
                    }
                    other => Step::Data(other),
                }
            }
        }
    }

    /// Inside MULTI, a control command's arguments, kept for EXEC's checks.
    fn keep_queued_args(&mut self, args: &[Bytes]) {
        if self.s.multi.is_some() {
            self.s.classified = Some(args.to_vec());
        }
    }

    /// Between two commands of a batch: what a command made others push to
    /// this connection (an invalidation of a key it wrote, a message it
    /// published to itself) goes out right after that command's reply, as
    /// Redis sends it — for a run of lone commands, after the run's replies.
    fn drain_pushes_between(&mut self) {
        if self.subs.queue().is_some() && !self.drain_pushes() {
            self.s.closing = true;
        }
    }

    /// Runs lone commands; exactly one reply per command, in order, each
    /// its answer or the error saying whether it was applied.
    ///
    /// The replies are encoded into the output buffer as it drains, not all
    /// at once: a value read by a GET is the shard's own buffer (shared,
    /// not copied) until it is encoded, so 40 GETs of a 64 MB value hold
    /// one encoded copy at a time rather than 40. What is not encoded yet
    /// still counts against `client-output-buffer-limit`, as it would in
    /// Redis's reply list: a client that does not read is closed at once.
    async fn run_lone(&mut self, ops: Vec<KeyOp>) {
        let replies = self.coord.run_lone(ops, self.s.ack).await;
        self.stat_lone(&replies);
        let mut rest = replies.iter();
        let mut held: Option<usize> = None;
        loop {
            let mut w = self.w();
            while w.out.len() < FLUSH_AT {
                match rest.next() {
                    Some(Ok(r)) => write_op(&mut w, r),
                    Some(Err(e)) => w.error(&e.to_string()),
                    None => return,
                }
            }
            // Past FLUSH_AT with replies left: the slow path.
            let left = match held {
                Some(h) => h,
                None => rest.clone().map(lone_size).sum(),
            };
            if !self.within_output_limit_with(left) || !self.write_some() {
                self.s.closing = true;
                return;
            }
            while self.out.len() >= FLUSH_AT {
                if !self.wait_socket().await {
                    self.s.closing = true;
                    return;
                }
            }
            held = Some(rest.clone().map(lone_size).sum());
        }
    }

    async fn dispatch(&mut self, step: Step) {
        if self.s.multi.is_some() {
            return self.queue(step).await;
        }
        match step {
            Step::Lone(kop) => self.run_lone(vec![kop]).await,
            Step::Refuse(msg) => self.w().error(&msg),
            Step::Drop => {}
            Step::ExecAbort(msg) => self.exec_abort(&msg),
            Step::Data(Err(e)) => self.w().error(&e.0),
            Step::Data(Ok(dc)) => self.run_data(dc).await,
            Step::Control(c, args) => self.control(c, args).await,
        }
    }

    /// Between MULTI and EXEC: queue, or answer the few commands that act now.
    async fn queue(&mut self, step: Step) {
        let queued = match step {
            Step::Refuse(msg) => {
                self.s.multi_failed = true;
                return self.w().error(&msg);
            }
            Step::ExecAbort(msg) => return self.exec_abort(&msg),
            Step::Drop => return,
            Step::Lone(kop) => Queued::Data(Ok(DataCmd {
                ops: vec![(kop.key, kop.op)],
                shape: Shape::One,
            })),
            Step::Data(parsed) => Queued::Data(parsed),
            Step::Control(c, args) => match c {
                Control::Exec
                | Control::Discard
                | Control::Multi
                | Control::Watch
                | Control::Quit
                | Control::Reset => return self.control(c, args).await,
                c if crate::admin::allowed_in_multi(c) => {
                    // Redis refuses a bad subcommand before queueing it.
                    let refusal =
                        cmd::lookup(&args[0]).and_then(|spec| cmd::subcommand_error(spec, &args));
                    if let Some(e) = refusal {
                        self.s.multi_failed = true;
                        return self.w().error(&e);
                    }
                    if c == Control::Select {
                        // The commands queued after it name keys of the
                        // database it selects (EXEC runs it again in place).
                        if let Ok(db) = cmd::db_index(&args[1]) {
                            self.s.db = db;
                        }
                    }
                    Queued::Admin(c, args)
                }
                _ => {
                    self.s.multi_failed = true;
                    return self
                        .w()
                        .error("ERR Command not allowed inside a transaction");
                }
            },
        };
        if let Some(q) = self.s.multi.as_mut() {
            q.push(queued);
            let args = self.s.classified.take().unwrap_or_default();
            self.s.multi_args.push(args);
        }
        self.w().simple("QUEUED");
    }

    /// A data command outside MULTI: inside BEGIN it joins the transaction;
    /// otherwise it runs atomically on its own.
    async fn run_data(&mut self, dc: DataCmd) {
        if let Shape::Blocking { timeout_ms, .. } = dc.shape {
            if self.s.txn.is_none() {
                return self.run_blocking(dc, timeout_ms).await;
            }
        }
        let shape = dc.shape;
        let result = if let Some(mut txn) = self.s.txn.take() {
            let r = run_in_txn(&self.coord, &mut txn, dc.ops).await;
            self.s.txn = Some(txn);
            r
        } else {
            self.run_once(dc).await
        };
        match result {
            Ok(replies) => write_shaped(&mut self.w(), shape, &replies),
            Err(e) => self.w().error(&e.to_string()),
        }
    }

    /// Runs a data command's ops atomically, outside any transaction.
    pub(crate) async fn run_once(&self, dc: DataCmd) -> Result<Vec<OpReply>, TxnError> {
        if dc.ops.is_empty() {
            return Ok(Vec::new()); // OBJECT HELP and the like: nothing to run
        }
        let single = dc.is_single_key();
        let kops: Vec<KeyOp> = dc
            .ops
            .into_iter()
            .map(|(key, op)| KeyOp {
                hash: self.coord.hash(&key),
                key,
                op,
            })
            .collect();
        if single {
            self.coord
                .run_lone(kops, self.s.ack)
                .await
                .into_iter()
                .collect()
        } else {
            self.coord.run_atomic(kops, Vec::new(), self.s.ack).await
        }
    }
}

impl Conn {
    /// Waits while CLIENT PAUSE holds this command, shown meanwhile as
    /// Redis shows a postponed client: flag `b`, counted in
    /// `blocked_clients` (not in the timeout table), `cmd` the command.
    /// False when the connection was killed meanwhile.
    pub(crate) async fn wait_paused(&mut self, args: &[Bytes], may_write: bool) -> bool {
        let registry = self.shared.conns.clone();
        if registry.pause.holds(may_write).is_none() {
            return true;
        }
        self.publish_client(args);
        let entry = self.client.client.clone();
        let _blocked = self.client.block(false, false);
        loop {
            tokio::select! {
                _ = registry.pause.wait(may_write) => return true,
                _ = entry.woken() => {
                    if entry.is_killed() {
                        self.s.closing = true;
                        return false;
                    }
                }
            }
        }
    }
}

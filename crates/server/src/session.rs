//! Connection-level commands: transactions (BEGIN/COMMIT/ABORT, MULTI/EXEC/
//! WATCH), authentication and protocol negotiation (AUTH, HELLO, RESET).

use bytes::Bytes;
use elsa_shard::{Check, Expect, KeyOp, Op, OpReply, SetCond, SetReply};
use elsa_txn::{router::backoff, Isolation, Txn, TxnError};

use crate::admin;
use crate::cmd::DataCmd;
use crate::cmd::{is, Control};
use crate::conn::{run_in_txn, write_shaped, Conn, Queued};

fn conflict_message(key: &[u8]) -> String {
    if key == elsa_shard::KEYSET {
        return "CONFLICT the key space it listed or counted (KEYS, SCAN, DBSIZE, RANDOMKEY) \
                changed by a concurrent commit; nothing was written, retry"
            .into();
    }
    let key = elsa_shard::db::user_key(key);
    if key.is_empty() {
        "CONFLICT transaction lost to a concurrent commit; nothing was written, retry".into()
    } else {
        format!(
            "CONFLICT {} changed by a concurrent commit; nothing was written, retry",
            String::from_utf8_lossy(key)
        )
    }
}

impl Conn {
    /// Serves a control command.
    pub(crate) async fn control(&mut self, c: Control, args: Vec<Bytes>) {
        match c {
            Control::Begin => self.begin(&args),
            Control::Ack => self.ack(&args),
            Control::Commit => self.commit().await,
            Control::Abort => match self.s.txn.take() {
                Some(_) => {
                    self.drop_effects(0);
                    self.w().simple("OK")
                }
                None => self.w().error("ERR ABORT without BEGIN"),
            },
            Control::Multi => self.multi(),
            Control::Exec => self.exec().await,
            Control::Discard => match self.s.multi.take() {
                Some(_) => {
                    self.s.multi_args.clear();
                    self.leave_multi_db();
                    self.s.watches.clear();
                    self.s.multi_failed = false;
                    self.w().simple("OK");
                }
                None => self.w().error("ERR DISCARD without MULTI"),
            },
            Control::Watch => self.watch(&args).await,
            Control::Unwatch => {
                self.s.watches.clear();
                self.w().simple("OK");
            }
            Control::Msetnx => self.msetnx(&args).await,
            Control::Auth => self.auth(&args),
            Control::Hello => self.hello(&args),
            Control::Quit => {
                self.w().simple("OK");
                self.s.closing = true;
            }
            Control::Reset => {
                self.pubsub_reset();
                self.s.txn = None;
                self.drop_effects(0);
                self.s.multi = None;
                self.s.multi_failed = false;
                self.s.watches.clear();
                self.s.db = 0;
                self.s.db_before_multi = None;
                self.tracking_off();
                self.s.resp3 = false;
                self.s.name = None;
                self.s.ack = self.shared.config.default_ack;
                self.s.multi_args.clear();
                self.acl_reset_user();
                self.w().simple("RESET");
            }
            other => self.admin(other, &args).await,
        }
    }

    fn begin(&mut self, args: &[Bytes]) {
        if self.s.txn.is_some() {
            return self
                .w()
                .error("ERR BEGIN inside a transaction: COMMIT or ABORT it first");
        }
        // BEGIN [RC|RR|SI] [ACK local|region|all]
        let mut isolation = self.shared.config.default_isolation;
        let mut ack = self.s.ack;
        let mut rest = &args[1..];
        if let Some(level) = rest.first().filter(|a| !is(a, "ACK")) {
            match String::from_utf8_lossy(level).parse::<Isolation>() {
                Ok(i) => isolation = i,
                Err(e) => return self.w().error(&format!("ERR {e}")),
            }
            rest = &rest[1..];
        }
        match rest {
            [] => {}
            [word, level] if is(word, "ACK") => match String::from_utf8_lossy(level).parse() {
                Ok(a) => ack = a,
                Err(e) => return self.w().error(&format!("ERR {e}")),
            },
            _ => {
                return self
                    .w()
                    .error("ERR syntax error: BEGIN [RC|RR|SI] [ACK local|region|all]")
            }
        }
        self.drop_effects(0);
        self.s.txn = Some(Txn::begin(&self.coord, isolation, ack));
        self.w().simple("OK");
    }

    /// ACK [local|region|all]: when this connection's commits are
    /// acknowledged (and what its reads may reveal); without an argument,
    /// the current level.
    fn ack(&mut self, args: &[Bytes]) {
        match args {
            [_] => {
                let name = self.s.ack.name();
                self.w().bulk(name.as_bytes());
            }
            [_, level] => match String::from_utf8_lossy(level).parse() {
                Ok(a) => {
                    self.s.ack = a;
                    self.w().simple("OK");
                }
                Err(e) => self.w().error(&format!("ERR {e}")),
            },
            _ => self.w().error("ERR syntax error: ACK [local|region|all]"),
        }
    }

    async fn commit(&mut self) {
        let Some(txn) = self.s.txn.take() else {
            return self.w().error("ERR COMMIT without BEGIN");
        };
        let result = txn.commit(&self.coord).await;
        // What its scripts published goes out now, or never.
        match result {
            Ok(_) => drop(self.take_effects(0).await),
            Err(_) => self.drop_effects(0),
        }
        match result {
            Ok(ts) => {
                self.s.last_commit = Some(ts);
                self.w().int(ts as i64);
            }
            Err(TxnError::Conflict(key)) => self.w().error(&conflict_message(&key)),
            Err(e) => self.w().error(&e.to_string()),
        }
    }

    fn multi(&mut self) {
        if self.s.txn.is_some() {
            return self
                .w()
                .error("ERR MULTI inside a BEGIN transaction is not allowed");
        }
        if self.s.multi.is_some() {
            return self.w().error("ERR MULTI calls can not be nested");
        }
        // Room for a typical transaction's commands: a queued command is
        // large, and growing the queue 4 → 8 copied it (1.3 % of the CPU
        // under EloqKV's batches of six).
        self.s.multi = Some(Vec::with_capacity(8));
        self.s.multi_reads.clear();
        self.s.multi_args.clear();
        self.s.multi_failed = false;
        self.s.db_before_multi = Some(self.s.db);
        self.w().simple("OK");
    }

    async fn watch(&mut self, args: &[Bytes]) {
        if self.s.multi.is_some() {
            return self.w().error("ERR WATCH inside MULTI is not allowed");
        }
        if self.s.txn.is_some() {
            return self
                .w()
                .error("ERR WATCH inside a BEGIN transaction is not allowed");
        }
        if self.s.watches.open.is_none() {
            let now = self.coord.node.hlc.now();
            self.s.watches.open = Some(self.coord.node.open_reads.open(now));
        }
        for key in &args[1..] {
            let key = self.coord.hashed(self.db_key(key));
            match elsa_txn::txn::read(&self.coord, key.clone(), self.s.ack, None).await {
                Ok(state) => self.s.watches.keys.push((key, Expect::unchanged(&state))),
                Err(e) => return self.w().error(&e.to_string()),
            }
        }
        self.w().simple("OK");
    }

    async fn exec(&mut self) {
        let Some(mut queued) = self.s.multi.take() else {
            return self.w().error("ERR EXEC without MULTI");
        };
        let queued_args = std::mem::take(&mut self.s.multi_args);
        let watches = std::mem::take(&mut self.s.watches);
        let mut reads = std::mem::take(&mut self.s.multi_reads);
        // The queued SELECTs run again in their place below; until then the
        // queued keyless commands see the database MULTI started in.
        self.leave_multi_db();
        if std::mem::take(&mut self.s.multi_failed) {
            return self
                .w()
                .error("EXECABORT Transaction discarded because of previous errors.");
        }
        if !self.acl_recheck_queued(&mut queued, &queued_args) {
            return;
        }
        // Every queued command runs from here (or the WATCH check fails,
        // and the reply says so): the slow log's, moved, not copied.
        if self.shared.slowlog.enabled() {
            self.s.exec_args = Some(queued_args);
        }
        // A queue holding a script runs as one SI transaction (`script::run`).
        if queued
            .iter()
            .any(|q| matches!(q, Queued::Admin(Control::Eval, _)))
        {
            // (Every key read is remembered: an invalidation too many is
            // safe, one too few leaves a stale cache.)
            self.remember_exec_reads(reads, false);
            return self.exec_as_one_txn(queued, watches).await;
        }
        let total = queued.len();
        // Commands run in the order queued, and EXEC is one atomic step
        // from the first to the last — except around a command that reads
        // or changes the whole key space (FLUSHALL, DBSIZE, KEYS, SCAN,
        // MSETNX, LASTCOMMIT: see `admin::splits_exec`), which runs in its
        // place between two atomic steps. Commands that touch no key
        // (PING, ECHO, TIME, CLIENT…) are answered in their place without
        // splitting anything: their replies do not depend on when they run.
        // The WATCH checks go with the first step, so a changed key aborts
        // the EXEC before anything ran.
        let mut checks: Vec<Check> = watches
            .keys
            .clone()
            .into_iter()
            .map(|(key, expect)| Check { key, expect })
            .collect();
        let mut opened = false;
        let mut i = 0;
        loop {
            // The next step: everything up to the next command that splits.
            let end = queued[i..]
                .iter()
                .position(|q| matches!(q, Queued::Admin(c, _) if admin::splits_exec(*c)))
                .map_or(queued.len(), |n| i + n);
            let step = &queued[i..end];
            let data: Vec<&DataCmd> = step
                .iter()
                .filter_map(|q| match q {
                    Queued::Data(Ok(dc)) => Some(dc),
                    _ => None,
                })
                .collect();
            if !data.is_empty() || !opened {
                let ops: Vec<KeyOp> = data
                    .iter()
                    .flat_map(|dc| dc.ops.iter())
                    .map(|(key, op)| KeyOp {
                        hash: self.coord.hash(key),
                        key: key.clone(),
                        op: op.clone(),
                    })
                    .collect();
                let result = self
                    .coord
                    .run_atomic(ops, std::mem::take(&mut checks), self.s.ack)
                    .await;
                match result {
                    Err(TxnError::WatchFailed) if !opened => return self.w().nil_array(),
                    Err(e) if !opened => return self.w().error(&e.to_string()),
                    // A later step failed (the log cannot write…): its
                    // commands answer the error in their place.
                    Err(e) => {
                        for q in step {
                            match q {
                                Queued::Data(Ok(_)) => self.w().error(&e.to_string()),
                                Queued::Data(Err(e)) => self.w().error(&e.0),
                                Queued::Admin(c, args) => self.run_queued(*c, args).await,
                            }
                        }
                    }
                    Ok(replies) => {
                        if !opened {
                            self.w().array(total);
                            opened = true;
                            // Its reads count once it ran, in its order.
                            self.remember_exec_reads(std::mem::take(&mut reads), true);
                        }
                        let mut at = 0;
                        for q in step {
                            match q {
                                Queued::Data(Ok(dc)) => {
                                    let n = dc.ops.len();
                                    write_shaped(&mut self.w(), dc.shape, &replies[at..at + n]);
                                    at += n;
                                }
                                Queued::Data(Err(e)) => self.w().error(&e.0),
                                Queued::Admin(c, args) => self.run_queued(*c, args).await,
                            }
                        }
                    }
                }
            } else {
                // Nothing to run atomically: only errors and keyless
                // commands, answered in their place.
                for q in step {
                    match q {
                        Queued::Data(Err(e)) => self.w().error(&e.0),
                        Queued::Admin(c, args) => self.run_queued(*c, args).await,
                        Queued::Data(Ok(_)) => {}
                    }
                }
            }
            let Some(Queued::Admin(c, args)) = queued.get(end) else {
                return;
            };
            self.run_queued(*c, args).await;
            i = end + 1;
        }
    }

    /// EXEC checks every queued command against the user's rules again, as
    /// Redis does: a command no longer allowed answers -NOPERM in its place.
    /// False when the connection's user is gone: nothing runs, and the
    /// connection closes.
    fn acl_recheck_queued(&mut self, queued: &mut [Queued], args: &[Vec<Bytes>]) -> bool {
        if !self.acl_current() {
            self.s.closing = true;
            return false;
        }
        if self.s.acl_free {
            return true;
        }
        for (q, a) in queued.iter_mut().zip(args) {
            let Some(spec) = a.first().and_then(|n| crate::cmd::lookup(n)) else {
                continue;
            };
            if let Some(d) = self.acl_check_logged(spec, a, crate::acl::Context::Multi) {
                *q = Queued::Data(Err(crate::cmd::CmdError(format!(
                    "NOPERM ACLs rules changed between the moment the transaction was accumulated and the EXEC call. This command is no longer allowed for the following reason: {}",
                    d.exec_reason()
                ))));
            }
        }
        true
    }

    /// Back to the database MULTI started in (DISCARD, EXEC).
    fn leave_multi_db(&mut self) {
        if let Some(db) = self.s.db_before_multi.take() {
            self.s.db = db;
        }
    }

    /// A control command queued in MULTI, run at EXEC in its place.
    pub(crate) async fn run_queued(&mut self, c: Control, args: &[Bytes]) {
        match c {
            // MSETNX is atomic on its own: it runs as one step of the EXEC,
            // between the steps of the data commands around it.
            Control::Msetnx => self.msetnx(args).await,
            // EXEC has already dropped the watches.
            Control::Unwatch => self.w().simple("OK"),
            Control::Auth => self.auth(args),
            Control::Hello => self.hello(args),
            // Inside EXEC, WAIT answers at once (Redis's `CLIENT_MULTI`).
            Control::Wait => self.wait(args, false).await,
            // Redis queues MONITOR, then refuses it inside EXEC.
            Control::Monitor => self
                .w()
                .error("ERR MONITOR isn't allowed for DENY BLOCKING client"),
            other => self.admin(other, args).await,
        }
    }

    /// Answers a refused EXEC (wrong arity, not authenticated) as Redis
    /// does: the transaction, if any, is discarded and the watches dropped.
    pub(crate) fn exec_abort(&mut self, why: &str) {
        if self.s.multi.is_some() {
            self.leave_multi_db();
        }
        self.s.multi = None;
        self.s.multi_args.clear();
        self.s.multi_failed = false;
        self.s.watches.clear();
        // Redis quotes its internal error text, which has no `ERR ` prefix.
        let why = why.strip_prefix("ERR ").unwrap_or(why);
        self.w().error(&format!(
            "EXECABORT Transaction discarded because of: {why}"
        ));
    }

    /// MSETNX: all keys set, or none if any exists — as one SI transaction,
    /// retried on conflict (inside BEGIN it joins the open transaction).
    async fn msetnx(&mut self, args: &[Bytes]) {
        if args.len().is_multiple_of(2) {
            return self.w().error(&crate::cmd::wrong_arity("msetnx"));
        }
        let pairs: Vec<(Bytes, Bytes)> = args[1..]
            .chunks_exact(2)
            .map(|kv| (self.db_key(&kv[0]), kv[1].clone()))
            .collect();
        if let Some(mut txn) = self.s.txn.take() {
            let r = msetnx_in(&self.coord, &mut txn, &pairs).await;
            self.s.txn = Some(txn);
            return match r {
                Ok(n) => self.w().int(n),
                Err(e) => self.w().error(&e.to_string()),
            };
        }
        let mut attempt = 0;
        loop {
            let mut txn = Txn::begin(&self.coord, Isolation::Snapshot, self.s.ack);
            let r = match msetnx_in(&self.coord, &mut txn, &pairs).await {
                Ok(0) => Ok(0),
                Ok(n) => txn.commit(&self.coord).await.map(|_| n),
                Err(e) => Err(e),
            };
            match r {
                Ok(n) => return self.w().int(n),
                Err(TxnError::Conflict(_)) => {
                    backoff(attempt).await;
                    attempt += 1;
                }
                Err(e) => return self.w().error(&e.to_string()),
            }
        }
    }

    /// HELLO [protover [AUTH user pass] [SETNAME name]], as Redis 7.0: each
    /// option takes effect as it is read (an error after SETNAME keeps the
    /// name), and the protocol switches only once all of them passed.
    fn hello(&mut self, args: &[Bytes]) {
        let mut proto = if self.s.resp3 { 3 } else { 2 };
        if let Some(v) = args.get(1) {
            match crate::cmd::int_arg(v) {
                Ok(2) => proto = 2,
                Ok(3) => proto = 3,
                Ok(_) => return self.w().error("NOPROTO unsupported protocol version"),
                Err(_) => {
                    return self
                        .w()
                        .error("ERR Protocol version is not an integer or out of range")
                }
            }
        }
        let mut i = 2;
        while i < args.len() {
            let more = args.len() - 1 - i;
            // Redis reads option names as C strings: a NUL ends them.
            let opt = crate::cmd::c_str(&args[i]);
            if is(opt, "AUTH") && more >= 2 {
                if !self.login(&args[i + 1], &args[i + 2], &args[0]) {
                    return self
                        .w()
                        .error("WRONGPASS invalid username-password pair or user is disabled.");
                }
                i += 3;
            } else if is(opt, "SETNAME") && more >= 1 {
                if !self.set_name(&args[i + 1]) {
                    return;
                }
                i += 2;
            } else {
                return self.w().error(&format!(
                    "ERR Syntax error in HELLO option '{}'",
                    String::from_utf8_lossy(opt)
                ));
            }
        }
        if !self.s.authed && !self.shared.acl.default_open() {
            return self.w().error("NOAUTH HELLO must be called with the client already authenticated, otherwise the HELLO AUTH <user> <pass> option can be used to authenticate the client and select the RESP protocol version at the same time");
        }
        self.s.resp3 = proto == 3;
        let id = self.s.id as i64;
        let mut w = self.w();
        w.map(7);
        w.bulk(b"server");
        w.bulk(b"redis");
        w.bulk(b"version");
        w.bulk(crate::REDIS_COMPAT_VERSION.as_bytes());
        w.bulk(b"proto");
        w.int(proto);
        w.bulk(b"id");
        w.int(id);
        w.bulk(b"mode");
        w.bulk(b"standalone");
        w.bulk(b"role");
        w.bulk(b"master");
        w.bulk(b"modules");
        w.array(0);
    }
}

async fn msetnx_in(
    coord: &elsa_txn::Coordinator,
    txn: &mut Txn,
    pairs: &[(Bytes, Bytes)],
) -> Result<i64, TxnError> {
    // The existence checks are validated at commit at every level (RC
    // included): two MSETNX racing on the same keys must not both win.
    for (k, _) in pairs {
        let kop = KeyOp {
            hash: coord.hash(k),
            key: k.clone(),
            op: Op::Exists,
        };
        if txn.apply_validated(coord, kop).await? == OpReply::Int(1) {
            return Ok(0);
        }
    }
    let sets = pairs
        .iter()
        .map(|(k, v)| {
            (
                k.clone(),
                Op::Set {
                    value: v.clone(),
                    cond: SetCond::Always,
                    expiry: elsa_shard::Expiry::Clear,
                    reply: SetReply::Ok,
                },
            )
        })
        .collect();
    run_in_txn(coord, txn, sets).await?;
    Ok(1)
}

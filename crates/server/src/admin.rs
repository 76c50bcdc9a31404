//! Server and keyspace commands that are not per-key: PING, ECHO, TIME,
//! SELECT, CLIENT, COMMAND, CONFIG, INFO, DBSIZE, RANDOMKEY, FLUSHALL, SCAN,
//! KEYS.

use bytes::Bytes;
use elsa_shard::{AdminMsg, ShardMsg, ShardStats};
use elsa_txn::TxnError;

use crate::cmd::{self, int_arg, is, Control, COMMANDS};
use crate::conn::Conn;
use crate::txn_keyspace::{overlay, scan_place};
use elsa_shard::table::SEGMENTS;

/// Control commands that may be queued inside MULTI and run at EXEC in
/// their place. Redis queues every command but a few (EXEC, DISCARD,
/// MULTI, WATCH, QUIT and RESET act at once; SAVE is refused): so does
/// Elsa, except its own transaction and region commands.
pub fn allowed_in_multi(c: Control) -> bool {
    matches!(
        c,
        Control::Ping
            | Control::Echo
            | Control::Hello
            | Control::Auth
            | Control::Time
            | Control::Select
            | Control::Client
            | Control::Command
            | Control::Config
            | Control::Info
            | Control::Dbsize
            | Control::Randomkey
            | Control::Flushall
            | Control::Flushdb
            | Control::Swapdb
            | Control::Keys
            | Control::Scan
            | Control::Unwatch
            | Control::Msetnx
            | Control::Bgsave
            | Control::Lastsave
            | Control::Role
            | Control::Lolwut
            | Control::PfSelfTest
            | Control::Wait
            | Control::Sort
            | Control::Dump
            | Control::Restore
            | Control::LastCommit
            | Control::Publish
            | Control::Spublish
            | Control::Pubsub
            | Control::Subscribe
            | Control::Psubscribe
            | Control::Unsubscribe
            | Control::Punsubscribe
            | Control::Sunsubscribe
            | Control::Eval
            | Control::Script
            | Control::Function
            | Control::Acl
            | Control::Slowlog
            | Control::Latency
            | Control::Memory
            | Control::Monitor
    )
}

/// True for a command that reads or changes the whole key space (or the
/// connection's commit history): queued in MULTI, it runs in its place
/// between two atomic steps of the EXEC. Every other command allowed in
/// MULTI touches no key, so it is answered in its place without splitting
/// the EXEC (see `Session::exec`).
pub fn splits_exec(c: Control) -> bool {
    matches!(
        c,
        Control::Dbsize
            | Control::Randomkey
            | Control::Flushall
            | Control::Flushdb
            | Control::Keys
            | Control::Scan
            | Control::Msetnx
            | Control::LastCommit
            | Control::Sort
            | Control::Dump
            | Control::Restore
    )
}

/// Parses a SCAN cursor as Redis does (C's `strtoul`, base 10): an optional
/// sign then digits, where no digits at all is 0 and a minus sign wraps
/// around; refused when it starts with a space, has anything after the
/// digits (the text ends at a NUL byte) or overflows.
pub(crate) fn parse_cursor(arg: &[u8]) -> Option<u64> {
    elsa_shard::ops::parse_cursor(arg)
}

impl Conn {
    /// Serves a non-transactional control command.
    pub(crate) async fn admin(&mut self, c: Control, args: &[Bytes]) {
        match c {
            c if crate::pubsub::commands::is_pubsub(c) => self.pubsub(c, args),
            Control::Ping if self.pubsub_ping(args) => {}
            Control::Ping => match args.get(1) {
                Some(msg) if args.len() == 2 => self.w().bulk(msg),
                Some(_) => self.w().error(&cmd::wrong_arity("ping")),
                None => self.w().simple("PONG"),
            },
            Control::Echo => self.w().bulk(&args[1]),
            Control::Time => {
                let now = std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .unwrap_or_default();
                let mut w = self.w();
                w.array(2);
                w.bulk(now.as_secs().to_string().as_bytes());
                w.bulk(now.subsec_micros().to_string().as_bytes());
            }
            Control::Select => match cmd::db_index(&args[1]) {
                Ok(db) => {
                    self.s.db = db;
                    self.w().simple("OK")
                }
                Err(e) => self.w().error(&e.0),
            },
            Control::Swapdb => match (cmd::db_index(&args[1]), cmd::db_index(&args[2])) {
                (Err(_), _) => self.w().error("ERR invalid first DB index"),
                (_, Err(_)) => self.w().error("ERR invalid second DB index"),
                // Swapping is renaming every key of both databases on every
                // node of every region at one instant: a global step that a
                // coordination-free store cannot take (docs/commands.md).
                _ => self.w().error(
                    "ERR SWAPDB is not supported: Elsa's databases are key namespaces replicated across regions, and swapping two needs every node at once (use MOVE, or RENAME keys, instead)",
                ),
            },
            Control::LastCommit => match self.s.last_commit {
                Some(ts) => self.w().int(ts as i64),
                None => self.w().nil(),
            },
            Control::Dbsize => match self.dbsize().await {
                Ok(n) => self.w().int(n as i64),
                Err(e) => self.w().error(&e.to_string()),
            },
            Control::Randomkey => match self.random_key().await {
                Ok(Some(k)) => self.w().bulk(&k),
                Ok(None) => self.w().nil(),
                Err(e) => self.w().error(&e.to_string()),
            },
            Control::Flushall => self.flush(args, None).await,
            Control::Flushdb => self.flush(args, Some(self.s.db)).await,
            Control::Scan => self.scan(args).await,
            Control::Keys => self.keys(&args[1]).await,
            Control::Info => self.info(args).await,
            Control::Config => self.config(args).await,
            Control::Slowlog => self.slowlog(args),
            Control::Latency => self.latency(args),
            Control::Cluster => self.cluster(args),
            Control::Command => self.command(args),
            Control::Client => self.client(args),
            Control::Monitor => self.monitor(),
            Control::Shutdown => self.shutdown(args).await,
            Control::Save => {
                let p = self.shared.persistence.clone();
                match p.snapshot(&self.coord).await {
                    Ok(_) => self.w().simple("OK"),
                    Err(e) => self.w().error(&snapshot_error(e)),
                }
            }
            Control::Bgsave => {
                let p = self.shared.persistence.clone();
                if p.in_progress.load(std::sync::atomic::Ordering::Acquire) {
                    return self.w().error("ERR Background save already in progress");
                }
                let coord = self.coord.clone();
                tokio::task::spawn_local(async move {
                    let _ = p.snapshot(&coord).await;
                });
                self.w().simple("Background saving started");
            }
            Control::WaitRegion if args.len() <= 4 => {
                // Counted in blocked_clients while it waits, as Redis counts
                // WAIT (`crate::clients`).
                self.publish_client(args);
                let timeout = cmd::int_arg(&args[2]).is_ok_and(|ms| ms > 0);
                let _blocked = self.client.block(timeout, false);
                self.waitregion(args).await
            }
            Control::WaitRegion => self.w().error(&cmd::wrong_arity("waitregion")),
            Control::Wait => self.wait(args, true).await,
            Control::Sort => self.sort(args).await,
            Control::Dump => self.dump(args).await,
            Control::Restore => self.restore(args).await,
            Control::ElsaDigest => self.elsa_digest(args).await,
            Control::ElsaFault => self.elsa_fault(args),
            Control::ElsaDecommission => self.elsa_decommission(),
            Control::Eval => {
                self.eval(args).await;
                self.script_tracked();
            }
            Control::Script => self.script(args).await,
            Control::Function => self.function(args).await,
            Control::Acl => self.acl(args),
            Control::Memory => self.memory_cmd(args).await,
            // A node serves its slots itself: to a Redis client it is a
            // master (its in-region replicas are not Redis replicas:
            // `docs/regions.md`).
            Control::Role => {
                let mut w = self.w();
                w.array(3);
                w.bulk(b"master");
                w.int(0);
                w.array(0);
            }
            // The HyperLogLog code has its own tests (`elsa_lattice::hll`,
            // compared with redis-server's bytes); Redis answers OK.
            Control::PfSelfTest => self.w().simple("OK"),
            // Redis 7.0 draws no art for its own version: the version line.
            Control::Lolwut => {
                if args.len() >= 3 && is(&args[1], "VERSION") && int_arg(&args[2]).is_err() {
                    return self
                        .w()
                        .error("ERR value is not an integer or out of range");
                }
                let text = format!("Redis ver. {}\n", crate::REDIS_COMPAT_VERSION);
                self.w().verbatim(&text);
            }
            Control::Lastsave => {
                let t = self
                    .shared
                    .persistence
                    .last_save_unix
                    .load(std::sync::atomic::Ordering::Relaxed);
                self.w().int(t as i64);
            }
            other => self
                .w()
                .error(&format!("ERR {other:?} is not available here")),
        }
    }

    async fn each_shard<T: Send + 'static>(
        &self,
        make: impl Fn(tokio::sync::oneshot::Sender<T>) -> AdminMsg,
    ) -> Result<Vec<T>, TxnError> {
        let mut rxs = Vec::new();
        for shard in 0..self.coord.node.shards() {
            rxs.push(self.coord.start(self.coord.node.local(shard), |reply| {
                ShardMsg::Admin(make(reply))
            })?);
        }
        let mut out = Vec::with_capacity(rxs.len());
        for rx in rxs {
            out.push(rx.await.map_err(|_| TxnError::ShardGone)?);
        }
        Ok(out)
    }

    /// DBSIZE; inside a transaction, with its own writes counted
    /// (`crate::txn_keyspace`).
    async fn dbsize(&self) -> Result<usize, TxnError> {
        let db = self.s.db;
        let n: usize = self
            .each_shard(|reply| AdminMsg::Dbsize { db, reply })
            .await?
            .into_iter()
            .sum();
        let own = self.read_keyset(db);
        if own.is_empty() {
            return Ok(n);
        }
        let delta = self.own_dbsize_delta(&own).await?;
        Ok((n as i64 + delta).max(0) as usize)
    }

    /// Per database with keys: its keys, keys with a TTL and their mean
    /// remaining TTL in ms (INFO keyspace).
    pub(crate) async fn keyspace(&self) -> Result<Vec<(u8, usize, usize, u64)>, TxnError> {
        let mut per_db = std::collections::BTreeMap::<u8, (usize, usize, u64)>::new();
        for rows in self.each_shard(AdminMsg::Keyspace).await? {
            for (db, keys, expires, ttl) in rows {
                let row = per_db.entry(db).or_default();
                row.0 += keys;
                row.1 += expires;
                row.2 += ttl;
            }
        }
        Ok(per_db
            .into_iter()
            .map(|(db, (k, e, ttl))| (db, k, e, ttl.checked_div(e as u64).unwrap_or(0)))
            .collect())
    }

    /// RANDOMKEY: a live key of a shard picked at random (the next one if
    /// it has none), picked at random there. Every key can come out, though
    /// not with equal odds when shards hold different numbers of keys.
    /// Inside a transaction that wrote keys of the database: one of all
    /// the keys it shows, picked at random (`crate::txn_keyspace`).
    async fn random_key(&self) -> Result<Option<Bytes>, TxnError> {
        let shards = self.coord.node.shards();
        let seed: u64 = rand::random();
        let db = self.s.db;
        let own = self.read_keyset(db);
        if !own.is_empty() {
            let mut keys = self.all_keys(db, None).await?;
            overlay(&own, &mut keys, None, None, |_| true);
            return Ok(
                (!keys.is_empty()).then(|| keys[(seed % keys.len() as u64) as usize].clone())
            );
        }
        for i in 0..shards {
            let shard = self.coord.node.local((seed as usize + i) % shards);
            let seed = seed.rotate_left(17);
            let got = self
                .coord
                .ask(shard, |reply| {
                    ShardMsg::Admin(AdminMsg::RandomKey { db, seed, reply })
                })
                .await?;
            if got.is_some() {
                return Ok(got);
            }
        }
        Ok(None)
    }

    pub(crate) async fn shard_stats(&self) -> Result<Vec<ShardStats>, TxnError> {
        self.each_shard(AdminMsg::Stats).await
    }

    /// FLUSHALL (`db` None) or FLUSHDB.
    async fn flush(&mut self, args: &[Bytes], db: Option<u8>) {
        if args.len() > 2
            || args
                .get(1)
                .is_some_and(|a| !is(a, "ASYNC") && !is(a, "SYNC"))
        {
            return self.w().error("ERR syntax error");
        }
        // One timestamp for every shard: the node flushes as one.
        let at = self.coord.node.hlc.now();
        match self
            .each_shard(|reply| AdminMsg::Flush { db, at, reply })
            .await
        {
            Ok(floors) => {
                // Logged here; now to every other node of every region (a
                // range tombstone like any write: `docs/regions.md`).
                if let Some(cluster) = &self.shared.cluster {
                    let mut all = elsa_shard::db::Floors::default();
                    for f in &floors {
                        all.merge(f);
                    }
                    cluster.flushed(&all);
                }
                self.shared.tracking.flushed_by_command();
                self.w().simple("OK")
            }
            Err(e) => self.w().error(&e.to_string()),
        }
    }

    /// SCAN cursor [MATCH p] [COUNT n] [TYPE t]. The cursor names a shard and
    /// a table segment; a key never changes segment, so every key present
    /// for the whole scan is returned exactly once, as Redis promises.
    async fn scan(&mut self, args: &[Bytes]) {
        let Some(cursor) = parse_cursor(&args[1]) else {
            return self.w().error("ERR invalid cursor");
        };
        let mut pattern = None;
        let mut count = 10usize;
        let mut type_filter = None;
        let mut i = 2;
        while i < args.len() {
            let Some(val) = args.get(i + 1) else {
                return self.w().error("ERR syntax error");
            };
            if is(&args[i], "MATCH") {
                pattern = Some(val.clone());
            } else if is(&args[i], "COUNT") {
                match int_arg(val) {
                    Ok(n) if n >= 1 => count = n as usize,
                    Ok(_) => return self.w().error("ERR syntax error"),
                    Err(e) => return self.w().error(&e.0),
                }
            } else if is(&args[i], "TYPE") {
                // Matched against TYPE's names: a name no type has (Elsa
                // has no lists yet) matches nothing, as in Redis 7.0.
                type_filter = Some(Bytes::from(val.to_ascii_lowercase()));
            } else {
                return self.w().error("ERR syntax error");
            }
            i += 2;
        }
        let shards = self.coord.node.shards() as u64;
        let (mut shard, mut segment) = (
            (cursor / SEGMENTS as u64) as usize,
            (cursor % SEGMENTS as u64) as usize,
        );
        if shard as u64 >= shards {
            // Not a cursor Elsa hands out. Redis accepts any number as a
            // cursor and never refuses one; past the end, the scan is over.
            let mut w = self.w();
            w.array(2);
            w.bulk(b"0");
            w.array(0);
            return;
        }
        let mut keys = Vec::new();
        let kind = type_filter;
        let db = self.s.db;
        let next = loop {
            let pat = pattern.clone();
            let answer = self
                .coord
                .ask(self.coord.node.local(shard), |reply| {
                    ShardMsg::Admin(AdminMsg::Scan {
                        db,
                        segment,
                        count: count - keys.len().min(count),
                        pattern: pat,
                        kind: kind.clone(),
                        reply,
                    })
                })
                .await;
            let (mut got, next_seg) = match answer {
                Ok(a) => a,
                Err(e) => return self.w().error(&e.to_string()),
            };
            keys.append(&mut got);
            match next_seg {
                Some(seg) => segment = seg,
                None => {
                    shard += 1;
                    segment = 0;
                }
            }
            if shard as u64 >= shards {
                break 0;
            }
            if keys.len() >= count {
                break (shard * SEGMENTS + segment) as u64;
            }
        };
        // Inside a transaction: its own writes, each on the page that
        // covers its place (so a full scan lists it once).
        let own = self.read_keyset(db);
        if !own.is_empty() {
            let end = if next == 0 {
                shards * SEGMENTS as u64
            } else {
                next
            };
            let shards = shards as usize;
            let page = cursor..end;
            overlay(&own, &mut keys, pattern.as_deref(), kind.as_deref(), |h| {
                page.contains(&scan_place(h, shards))
            });
        }
        let mut w = self.w();
        w.array(2);
        w.bulk(next.to_string().as_bytes());
        w.bulks(keys.iter().map(|k| &k[..]));
    }

    /// KEYS; inside a transaction, with its own writes laid over
    /// (`crate::txn_keyspace`).
    async fn keys(&mut self, pattern: &Bytes) {
        let all_match = &pattern[..] == b"*";
        let pat = (!all_match).then(|| pattern.clone());
        let db = self.s.db;
        match self.all_keys(db, pat.clone()).await {
            Ok(mut keys) => {
                overlay(
                    &self.read_keyset(db),
                    &mut keys,
                    pat.as_deref(),
                    None,
                    |_| true,
                );
                self.w().bulks(keys.iter().map(|k| &k[..]));
            }
            Err(e) => self.w().error(&e.to_string()),
        }
    }

    /// Every live key of database `db` on this node's shards (matching
    /// `pattern`, if given).
    async fn all_keys(&self, db: u8, pattern: Option<Bytes>) -> Result<Vec<Bytes>, TxnError> {
        let parts = self
            .each_shard(move |reply| AdminMsg::Scan {
                db,
                segment: 0,
                count: usize::MAX,
                pattern: pattern.clone(),
                kind: None,
                reply,
            })
            .await?;
        Ok(parts.into_iter().flat_map(|(k, _)| k).collect())
    }

    /// Redis's refusal of a container command's subcommand (unknown, or
    /// the wrong number of arguments): answered, true when there was one.
    pub(crate) fn refuse_subcommand(&mut self, name: &str, args: &[Bytes]) -> bool {
        let refusal =
            cmd::lookup(name.as_bytes()).and_then(|spec| cmd::subcommand_error(spec, args));
        match refusal {
            Some(e) => {
                self.w().error(&e);
                true
            }
            None => false,
        }
    }

    async fn config(&mut self, args: &[Bytes]) {
        if self.refuse_subcommand("config", args) {
            return;
        }
        if is(&args[1], "GET") {
            let mut pairs = crate::info::config_pairs(&self.shared.config);
            pairs.extend(self.shared.tls.settings().pairs());
            pairs.extend(crate::runtime::params::pairs(&self.shared));
            let hits: Vec<&(String, String)> = pairs
                .iter()
                .filter(|(k, _)| {
                    args[2..]
                        .iter()
                        .any(|p| elsa_shard::glob::matches(&p.to_ascii_lowercase(), k.as_bytes()))
                })
                .collect();
            let mut w = self.w();
            w.map(hits.len());
            for (k, v) in hits {
                w.bulk(k.as_bytes());
                w.bulk(v.as_bytes());
            }
        } else if is(&args[1], "RESETSTAT") {
            self.config_resetstat().await;
        } else if is(&args[1], "SET") {
            self.config_set_runtime(&args[2..]);
        } else if is(&args[1], "REWRITE") {
            self.config_rewrite();
        } else if is(&args[1], "HELP") {
            self.help("CONFIG", CONFIG_HELP);
        } else {
            self.w().error(&not_supported("CONFIG", &args[1]));
        }
    }

    fn command(&mut self, args: &[Bytes]) {
        if self.refuse_subcommand("command", args) {
            return;
        }
        // Only the commands this node runs: ELSA.FAULT is listed only with
        // `fault-injection` on, as it exists only then.
        let listed: Vec<&cmd::Spec> = COMMANDS.iter().filter(|s| self.command_exists(s)).collect();
        let sub = args.get(1);
        if sub.is_none() || sub.is_some_and(|s| is(s, "INFO")) && args.len() == 2 {
            let mut w = self.w();
            w.array(listed.len());
            for spec in &listed {
                write_command_info(&mut w, spec);
            }
        } else if sub.is_some_and(|s| is(s, "COUNT")) {
            self.w().int(listed.len() as i64);
        } else if sub.is_some_and(|s| is(s, "INFO")) {
            let names = &args[2..];
            let found: Vec<Option<&cmd::Spec>> = names
                .iter()
                .map(|n| cmd::lookup(n).filter(|s| self.command_exists(s)))
                .collect();
            let mut w = self.w();
            w.array(found.len());
            for spec in found {
                match spec {
                    Some(spec) => write_command_info(&mut w, spec),
                    None => w.nil_array(),
                }
            }
        } else if sub.is_some_and(|s| is(s, "DOCS")) {
            self.command_docs(&args[2..], &listed);
        } else if sub.is_some_and(|s| is(s, "LIST")) {
            self.command_list(args, &listed);
        } else if sub.is_some_and(|s| is(s, "GETKEYS")) {
            self.command_getkeys(args, false);
        } else if sub.is_some_and(|s| is(s, "GETKEYSANDFLAGS")) {
            self.command_getkeys(args, true);
        } else if sub.is_some_and(|s| is(s, "HELP")) {
            self.help("COMMAND", COMMAND_HELP);
        } else if let Some(sub) = sub {
            self.w().error(&not_supported("COMMAND", sub));
        }
    }

    fn client(&mut self, args: &[Bytes]) {
        if self.refuse_subcommand("client", args) {
            return;
        }
        if self.client_ops(args) {
            return; // LIST INFO KILL PAUSE UNPAUSE REPLY NO-EVICT UNBLOCK
        }
        let sub = &args[1];
        if is(sub, "ID") {
            let id = self.s.id as i64;
            self.w().int(id);
        } else if is(sub, "SETNAME") {
            if self.set_name(&args[2]) {
                self.w().simple("OK");
            }
        } else if is(sub, "GETNAME") {
            match self.s.name.clone() {
                Some(n) => self.w().bulk(&n),
                None => self.w().nil(),
            }
        } else if is(sub, "SETINFO") {
            if is(&args[2], "LIB-NAME") {
                self.s.lib_name = Some(args[3].clone());
            } else if is(&args[2], "LIB-VER") {
                self.s.lib_ver = Some(args[3].clone());
            } else {
                return self.w().error(&format!(
                    "ERR Unrecognized option '{}'",
                    String::from_utf8_lossy(&args[2])
                ));
            }
            self.w().simple("OK");
        } else if is(sub, "NO-TOUCH") {
            self.w().simple("OK");
        } else if self.client_tracking(sub, args) {
        } else {
            self.w().error(&not_supported("CLIENT", sub));
        }
    }

    /// Sets the connection's name (CLIENT SETNAME, HELLO … SETNAME) as
    /// Redis does: empty clears it, spaces and special characters are
    /// refused. False (and the error answered) when refused.
    pub(crate) fn set_name(&mut self, name: &Bytes) -> bool {
        if name.iter().any(|b| *b <= b' ' || *b > b'~') {
            self.w()
                .error("ERR Client names cannot contain spaces, newlines or special characters.");
            return false;
        }
        self.s.name = (!name.is_empty()).then(|| name.clone());
        true
    }

    pub(crate) fn client_line(&self) -> String {
        let s = &self.s;
        let txt = |b: &Option<Bytes>| {
            b.as_ref()
                .map(|v| String::from_utf8_lossy(v).into_owned())
                .unwrap_or_default()
        };
        format!(
            "id={} addr={} name={} db={} multi={} user={} resp={} lib-name={} lib-ver={} txn={}\n",
            s.id,
            s.addr,
            txt(&s.name),
            s.db,
            s.multi.as_ref().map_or(-1, |q| q.len() as i64),
            String::from_utf8_lossy(&s.user.name),
            if s.resp3 { 3 } else { 2 },
            txt(&s.lib_name),
            txt(&s.lib_ver),
            s.txn.as_ref().map_or("none", |t| t.isolation.name()),
        )
    }
}

/// CONFIG HELP's lines (Redis 7.0's `configHelpCommand`).
const CONFIG_HELP: &[&str] = &[
    "GET <pattern>",
    "    Return parameters matching the glob-like <pattern> and their values.",
    "SET <directive> <value>",
    "    Set the configuration <directive> to <value>.",
    "RESETSTAT",
    "    Reset statistics reported by the INFO command.",
    "REWRITE",
    "    Rewrite the configuration file.",
];

/// COMMAND HELP's lines (Redis 7.0's `commandHelpCommand`).
const COMMAND_HELP: &[&str] = &[
    "(no subcommand)",
    "    Return details about all Redis commands.",
    "COUNT",
    "    Return the total number of commands in this Redis server.",
    "LIST",
    "    Return a list of all commands in this Redis server.",
    "INFO [<command-name> ...]",
    "    Return details about multiple Redis commands.",
    "    If no command names are given, documentation details for all",
    "    commands are returned.",
    "DOCS [<command-name> ...]",
    "    Return documentation details about multiple Redis commands.",
    "    If no command names are given, documentation details for all",
    "    commands are returned.",
    "GETKEYS <full-command>",
    "    Return the keys from a full Redis command.",
    "GETKEYSANDFLAGS <full-command>",
    "    Return the keys and the access flags from a full Redis command.",
];

/// The error for a subcommand Redis has and Elsa does not implement.
fn not_supported(container: &str, sub: &[u8]) -> String {
    format!(
        "ERR {container} {} is not supported",
        String::from_utf8_lossy(cmd::c_str(sub)).to_uppercase()
    )
}

fn snapshot_error(e: String) -> String {
    if e.starts_with("ERR ") {
        e
    } else {
        format!("ERR snapshot failed: {e}")
    }
}

fn write_command_info(w: &mut crate::resp::ReplyWriter<'_>, spec: &cmd::Spec) {
    w.array(10);
    w.bulk(spec.name.as_bytes());
    w.int(spec.arity as i64);
    w.set(spec.flags.len());
    for f in spec.flags {
        w.simple(f);
    }
    w.int(spec.first_key as i64);
    w.int(spec.last_key as i64);
    w.int(spec.step as i64);
    // ACL categories, as Redis: `@read`, `@string`…
    let table = &crate::acl::TABLE;
    let cats = table
        .id(spec.name.as_bytes())
        .map_or(0, |id| table.cmds[id as usize].cats);
    let names: Vec<&str> = crate::acl::CATEGORIES
        .iter()
        .enumerate()
        .filter(|(i, _)| cats & (1 << i) != 0)
        .map(|(_, c)| *c)
        .collect();
    w.set(names.len());
    for c in names {
        w.simple(&format!("@{c}"));
    }
    w.set(0); // tips
    w.array(0); // key specs
    w.array(0); // subcommands
}

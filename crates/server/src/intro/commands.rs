//! The introspection commands and hooks over a connection: the statistics
//! taken around each command (`stat_before`, `stat_after`), and the
//! commands that read or reset them.

use super::*;
use crate::cmd::{self, is, Control};
use crate::cmdstats::{TxnKind, NO_SLOT};
use crate::conn::{Conn, Step};
use bytes::Bytes;
use elsa_shard::OpReply;
use std::sync::atomic::Ordering::Relaxed;
use std::time::Instant;

impl Conn {
    /// Before dispatching `step`; `t0`, when its classification started
    /// (given when no lone run was pending: one clock read saved).
    pub(crate) fn stat_before(&mut self, step: &Step, t0: Option<Instant>) -> Token {
        let kind = match step {
            Step::Refuse(_) | Step::ExecAbort(_) => TokenKind::Rejected,
            Step::Control(
                Control::Exec
                | Control::Discard
                | Control::Multi
                | Control::Watch
                | Control::Quit
                | Control::Reset,
                _,
            ) => TokenKind::Run,
            _ if self.s.multi.is_some() => TokenKind::Queued,
            _ => TokenKind::Run,
        };
        let ends = match step {
            Step::Control(Control::Commit | Control::Abort, _) => {
                self.s.txn.as_ref().map(|t| TxnKind::of(t.isolation))
            }
            Step::Control(Control::Exec, _) if self.s.multi.is_some() => Some(TxnKind::MultiExec),
            _ => None,
        };
        let queued = match ends {
            Some(TxnKind::MultiExec) => self
                .s
                .multi_args
                .iter()
                .map(|a| match a.first().and_then(|n| cmd::lookup(n)) {
                    Some(spec) => crate::cmdstats::slot(spec, a),
                    None => NO_SLOT,
                })
                .collect(),
            _ => Vec::new(),
        };
        Token {
            ends,
            queued,
            slot: self.stat.slot,
            start: self.out.len(),
            t0: matches!(kind, TokenKind::Run).then(|| t0.unwrap_or_else(Instant::now)),
            kind,
            args: self.stat.pending.take(),
        }
    }

    /// After dispatching the command `token` was taken for.
    pub(crate) fn stat_after(&mut self, token: Token) {
        let us = token.t0.map_or(0, |t0| t0.elapsed().as_micros() as u64);
        let local = &self.stat.local;
        let err = error_at(&self.out, token.start);
        let counted = std::mem::take(&mut self.stat.error_counted);
        if let Some(e) = err.filter(|_| !counted) {
            local.error(e);
        }
        if let Some(kind) = token.ends {
            local.txn(kind, txn_outcome(&self.out, token.start, token.slot));
        }
        match token.kind {
            TokenKind::Rejected => local.rejected(token.slot),
            TokenKind::Queued if err.is_some() => local.rejected(token.slot),
            TokenKind::Queued => {}
            TokenKind::Run => {
                let ran = self.s.exec_args.take();
                if !token.queued.is_empty() {
                    let share = exec_calls(local, &token.queued, &self.out, token.start, us);
                    // Each command EXEC ran goes to the slow log with its
                    // share of EXEC's time (EXEC itself is not logged).
                    match (share, ran) {
                        (Some(share), Some(ran)) if self.shared.slowlog.wants(share) => {
                            for args in ran.iter().filter(|a| !a.is_empty()) {
                                self.shared.slowlog.push(
                                    args,
                                    share,
                                    &self.s.addr,
                                    self.s.name.as_ref(),
                                );
                            }
                        }
                        _ => {}
                    }
                }
                local.call(token.slot, us, err.is_some());
                self.after_call(token.slot, us, token.args);
            }
        }
    }

    /// A lone run's replies are back: each command's share of its time.
    pub(crate) fn stat_lone(&mut self, replies: &[elsa_txn::lone::LoneReply]) {
        let n = self.stat.lone_slots.len();
        let Some(t0) = self.stat.lone_start.take() else {
            return;
        };
        if n == 0 || n != replies.len() {
            self.stat.lone_slots.clear();
            self.stat.lone_args.clear();
            return;
        }
        let total = t0.elapsed().as_micros() as u64;
        let (share, extra) = (total / n as u64, total % n as u64);
        let slots = std::mem::take(&mut self.stat.lone_slots);
        let mut args = std::mem::take(&mut self.stat.lone_args);
        let local = &self.stat.local;
        for (i, (slot, r)) in slots.iter().zip(replies).enumerate() {
            let us = share + u64::from((i as u64) < extra);
            let failed = match r {
                Err(e) => {
                    local.error(e.to_string().split(' ').next().unwrap_or(""));
                    true
                }
                Ok(OpReply::Error(e)) => {
                    local.error(e.split(' ').next().unwrap_or(""));
                    true
                }
                Ok(_) => false,
            };
            local.call(*slot, us, failed);
            self.after_call(*slot, us, args.get_mut(i).and_then(Option::take));
        }
        // Keep the buffers' room for the next run.
        self.stat.lone_slots = slots;
        self.stat.lone_slots.clear();
        args.clear();
        self.stat.lone_args = args;
    }

    /// The slow log and the latency monitor for a command that ran.
    fn after_call(&self, slot: u32, us: u64, args: Option<Vec<Bytes>>) {
        let sh = &self.shared;
        if sh.slowlog.wants(us) {
            // EXEC is not logged, as Redis (its commands are).
            if let Some(args) = args.filter(|a| !a.first().is_some_and(|n| is(n, "exec"))) {
                sh.slowlog
                    .push(&args, us, &self.s.addr, self.s.name.as_ref());
            }
        }
        let ms = us / 1000;
        if ms > 0 && sh.latency.threshold_ms.load(Relaxed) != 0 {
            let fast = crate::cmdstats::slot_spec(slot).is_some_and(|s| s.flags.contains(&"fast"));
            let event = if fast { "fast-command" } else { "command" };
            sh.latency.sample_if_needed(event, ms);
        }
    }

    /// SLOWLOG GET [count] | LEN | RESET | HELP
    pub(crate) fn slowlog(&mut self, args: &[Bytes]) {
        if self.refuse_subcommand("slowlog", args) {
            return;
        }
        let sub = &args[1];
        if is(sub, "HELP") {
            self.help("SLOWLOG", crate::slowlog::HELP);
        } else if is(sub, "LEN") {
            let n = self.shared.slowlog.len();
            self.w().int(n as i64);
        } else if is(sub, "RESET") {
            self.shared.slowlog.reset();
            self.w().simple("OK");
        } else if is(sub, "GET") {
            if args.len() > 3 {
                // Redis's `addReplySubcommandSyntaxError`.
                return self.w().error(&format!(
                    "ERR unknown subcommand or wrong number of arguments for '{}'. Try SLOWLOG HELP.",
                    String::from_utf8_lossy(&sub[..sub.len().min(128)])
                ));
            }
            let count = match args.get(2) {
                None => Some(10),
                Some(a) => match elsa_shard::ops::parse_i64(a) {
                    Some(-1) => None,
                    Some(n) if n >= 0 => Some(n as usize),
                    _ => {
                        return self
                            .w()
                            .error("ERR count should be greater than or equal to -1")
                    }
                },
            };
            let entries = self.shared.slowlog.get(count);
            let mut w = self.w();
            w.array(entries.len());
            for e in entries {
                w.array(6);
                w.int(e.id as i64);
                w.int(e.time as i64);
                w.int(e.usec as i64);
                w.bulks(e.args.iter().map(|a| &a[..]));
                w.bulk(e.addr.as_bytes());
                w.bulk(&e.name);
            }
        }
    }

    /// LATENCY LATEST | HISTORY event | RESET [event …] | HISTOGRAM
    /// [command …] | DOCTOR | HELP
    pub(crate) fn latency(&mut self, args: &[Bytes]) {
        if self.refuse_subcommand("latency", args) {
            return;
        }
        let sub = &args[1];
        let lat = &self.shared.latency;
        if is(sub, "HELP") {
            self.help("LATENCY", crate::latency::HELP);
        } else if is(sub, "LATEST") {
            let latest = lat.latest();
            let mut w = self.w();
            w.array(latest.len());
            for (name, t, v, max) in latest {
                w.array(4);
                w.bulk(name.as_bytes());
                w.int(t as i64);
                w.int(v as i64);
                w.int(max as i64);
            }
        } else if is(sub, "HISTORY") {
            let h = lat.history(&args[2]);
            let mut w = self.w();
            w.array(h.len());
            for (t, v) in h {
                w.array(2);
                w.int(t as i64);
                w.int(v as i64);
            }
        } else if is(sub, "RESET") {
            let n = lat.reset(&args[2..]);
            self.w().int(n as i64);
        } else if is(sub, "DOCTOR") {
            let report = lat.doctor(self.shared.slowlog.slower_than.load(Relaxed));
            self.w().verbatim(&report);
        } else if is(sub, "HISTOGRAM") {
            self.latency_histogram(&args[2..]);
        } else if is(sub, "GRAPH") {
            match lat.graph(&args[2]) {
                Some(graph) => self.w().verbatim(&graph),
                None => self.w().error(&format!(
                    "ERR No samples available for event '{}'",
                    String::from_utf8_lossy(&args[2])
                )),
            }
        }
    }

    /// LATENCY HISTOGRAM: per command asked for (every command called,
    /// with none), its calls and cumulative counts at powers of two µs.
    fn latency_histogram(&mut self, names: &[Bytes]) {
        let stats = self.shared.cmdstats.totals().commands();
        let chosen: Vec<&crate::cmdstats::CommandStat> = stats
            .iter()
            .filter(|c| c.calls > 0)
            .filter(|c| {
                names.is_empty()
                    || names.iter().any(|n| {
                        let container = c.name.split('|').next().unwrap_or(c.name);
                        // A container names all its subcommands; a full
                        // name (`config|get`) only itself.
                        is(n, c.name) || (c.name.contains('|') && is(n, container))
                    })
            })
            .collect();
        let mut w = self.w();
        w.map(chosen.len());
        for c in chosen {
            w.bulk(c.name.as_bytes());
            w.map(2);
            w.bulk(b"calls");
            w.int(c.calls as i64);
            w.bulk(b"histogram_usec");
            let cdf = crate::latency::power_of_two_cdf(&c.buckets);
            w.map(cdf.len());
            for (le, n) in cdf {
                w.int(le as i64);
                w.int(n as i64);
            }
        }
    }

    /// A container's HELP as Redis's `addReplyHelp` writes it.
    pub(crate) fn help(&mut self, container: &str, lines: &[&str]) {
        let mut w = self.w();
        w.array(lines.len() + 3);
        w.simple(&format!(
            "{container} <subcommand> [<arg> [value] [opt] ...]. Subcommands are:"
        ));
        for l in lines {
            w.simple(l);
        }
        w.simple("HELP");
        w.simple("    Prints this help.");
    }

    /// CONFIG SET: every runtime parameter (`crate::runtime`), all pairs or
    /// none.
    pub(crate) fn config_set_runtime(&mut self, args: &[Bytes]) {
        let known: Vec<String> = crate::info::config_pairs(&self.shared.config)
            .into_iter()
            .map(|(k, _)| k)
            .collect();
        let fsync = self.shared.runtime.appendfsync();
        let r = crate::runtime::params::config_set(&self.shared, args, |name| {
            known.iter().any(|k| k == name)
        });
        // A new fsync policy goes to every shard's log, ahead of anything
        // this connection sends them next (each shard's inbox is in order).
        let now = self.shared.runtime.appendfsync();
        if r.is_ok() && now != fsync {
            for s in 0..self.coord.node.shards() {
                let msg = elsa_shard::ShardMsg::Admin(elsa_shard::AdminMsg::SetFsync(now));
                let _ = self.coord.post(self.coord.node.local(s), msg);
            }
        }
        match r {
            Ok(()) => self.w().simple("OK"),
            Err(e) => self.w().error(&e),
        }
    }

    /// CONFIG RESETSTAT: command and error statistics, the connection,
    /// command and keyspace counters start again from zero (as Redis's
    /// `resetServerStats`; the slow log is kept, as in Redis).
    pub(crate) async fn config_resetstat(&mut self) {
        self.shared.cmdstats.reset();
        let sh = &self.shared;
        sh.total_commands.store(0, Relaxed);
        sh.total_connections.store(0, Relaxed);
        sh.rejected.store(0, Relaxed);
        if let Ok(stats) = self.shard_stats().await {
            let b = crate::runtime::ShardBaseline::of(&crate::info_sections::sum(&stats));
            if let Ok(mut cur) = self.shared.runtime.shard_baseline.lock() {
                *cur = b;
            }
        }
        self.w().simple("OK");
    }

    /// CONFIG REWRITE: the runtime parameters written into the file the
    /// node was started with (its other keys and comments kept).
    pub(crate) fn config_rewrite(&mut self) {
        let Some(path) = self.shared.config.config_file.clone() else {
            return self
                .w()
                .error("ERR The server is running without a config file");
        };
        let mut pairs = crate::runtime::params::pairs(&self.shared);
        pairs.extend(self.shared.tls.settings().pairs());
        match crate::runtime::params::rewrite(&path, &pairs) {
            Ok(()) => self.w().simple("OK"),
            Err(e) => {
                tracing::warn!("CONFIG REWRITE of {} failed: {e}", path.display());
                self.w().error(&format!("ERR Rewriting config file: {e}"))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_prefixes_are_read_from_the_reply() {
        let out = b"+OK\r\n-WRONGTYPE Operation against a key\r\n-ERR\r\n";
        assert_eq!(error_at(out, 0), None);
        assert_eq!(error_at(out, 5), Some("WRONGTYPE"));
        assert_eq!(error_at(out, 41), Some("ERR"));
        assert_eq!(error_at(out, 500), None);
    }

    #[test]
    fn exec_replies_are_read_element_by_element() {
        let out = b"xx*4\r\n+OK\r\n-ERR bad\r\n*2\r\n$1\r\na\r\n-WRONGTYPE x\r\n:3\r\n";
        assert_eq!(
            element_errors(out, 2),
            Some(vec![None, Some("ERR"), None, None])
        );
        assert_eq!(element_errors(b"*-1\r\n", 0), Some(vec![]));
        // Cut short (flushed meanwhile): not read.
        assert_eq!(element_errors(b"*2\r\n+OK\r\n", 0), None);
        assert_eq!(element_errors(b"+OK\r\n", 0), None);
    }

    #[test]
    fn transaction_outcomes_from_replies() {
        let exec = crate::cmdstats::slot(cmd::lookup(b"exec").unwrap(), &[]);
        let abort = crate::cmdstats::slot(cmd::lookup(b"abort").unwrap(), &[]);
        assert_eq!(txn_outcome(b":17\r\n", 0, exec), TxnOutcome::Commit);
        assert_eq!(txn_outcome(b"*2\r\n", 0, exec), TxnOutcome::Commit);
        assert_eq!(txn_outcome(b"*-1\r\n", 0, exec), TxnOutcome::Conflict);
        assert_eq!(txn_outcome(b"_\r\n", 0, exec), TxnOutcome::Conflict);
        assert_eq!(
            txn_outcome(b"-CONFLICT k changed\r\n", 0, exec),
            TxnOutcome::Conflict
        );
        assert_eq!(
            txn_outcome(b"-EXECABORT Transaction discarded\r\n", 0, exec),
            TxnOutcome::Abort
        );
        assert_eq!(txn_outcome(b"+OK\r\n", 0, abort), TxnOutcome::Abort);
    }
}

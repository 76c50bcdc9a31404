//! The commands of client-side caching (CLIENT TRACKING, CACHING,
//! GETREDIR, TRACKINGINFO) over a connection; the tables are the parent's.

use super::*;
use crate::cmd::{self, is, DataCmd};
use crate::conn::Conn;
use bytes::Bytes;

impl Conn {
    /// CLIENT TRACKING | CACHING | GETREDIR | TRACKINGINFO (`sub`); false
    /// when `sub` is none of them.
    pub(crate) fn client_tracking(&mut self, sub: &[u8], args: &[Bytes]) -> bool {
        if is(sub, "TRACKING") {
            self.tracking(args);
        } else if is(sub, "CACHING") {
            self.caching(&args[2]);
        } else if is(sub, "GETREDIR") {
            let r = self.s.tracking.as_ref().map_or(-1, |o| o.redirect as i64);
            self.w().int(r);
        } else if is(sub, "TRACKINGINFO") {
            self.tracking_info();
        } else {
            return false;
        }
        true
    }

    fn tracking(&mut self, args: &[Bytes]) {
        let mut o = Options::default();
        let mut new_prefixes: Vec<Bytes> = Vec::new();
        let mut j = 3;
        while j < args.len() {
            let more = j + 1 < args.len();
            let a = &args[j];
            if is(a, "REDIRECT") && more {
                j += 1;
                if o.redirect != 0 {
                    return self
                        .w()
                        .error("ERR A client can only redirect to a single other client");
                }
                match elsa_shard::ops::parse_i64(&args[j]) {
                    Some(id) if id > 0 => o.redirect = id as u64,
                    Some(_) => {
                        return self
                            .w()
                            .error("ERR The client ID you want redirect to does not exist")
                    }
                    None => {
                        return self
                            .w()
                            .error("ERR value is not an integer or out of range")
                    }
                }
                if o.redirect != self.s.id && self.shared.pubsub.subscriber(o.redirect).is_none() {
                    // Elsa finds a redirect among subscribed connections:
                    // the redirect must be subscribed to receive anything.
                    return self
                        .w()
                        .error("ERR The client ID you want redirect to does not exist");
                }
            } else if is(a, "BCAST") {
                o.bcast = true;
            } else if is(a, "OPTIN") {
                o.optin = true;
            } else if is(a, "OPTOUT") {
                o.optout = true;
            } else if is(a, "NOLOOP") {
                o.noloop = true;
            } else if is(a, "PREFIX") && more {
                j += 1;
                new_prefixes.push(args[j].clone());
            } else {
                return self.w().error("ERR syntax error");
            }
            j += 1;
        }
        if is(&args[2], "OFF") {
            self.tracking_off();
            return self.w().simple("OK");
        }
        if !is(&args[2], "ON") {
            return self.w().error("ERR syntax error");
        }
        if self
            .shared
            .cluster
            .as_ref()
            .is_some_and(|c| !c.holds_every_key())
        {
            // Invalidations come from the changes installed on this node:
            // caching a key it does not replicate would never be told.
            return self.w().error("ERR CLIENT TRACKING needs a node that holds every key of its region (replication-factor at least the region's node count); this one does not");
        }
        if !o.bcast && !new_prefixes.is_empty() {
            return self
                .w()
                .error("ERR PREFIX option requires BCAST mode to be enabled");
        }
        if let Some(old) = &self.s.tracking {
            if old.bcast != o.bcast {
                return self.w().error("ERR You can't switch BCAST mode on/off before disabling tracking for this client, and then re-enabling it with a different mode.");
            }
        }
        if o.bcast && (o.optin || o.optout) {
            return self
                .w()
                .error("ERR OPTIN and OPTOUT are not compatible with BCAST");
        }
        if o.optin && o.optout {
            return self
                .w()
                .error("ERR You can't specify both OPTIN mode and OPTOUT mode");
        }
        if let Some(old) = &self.s.tracking {
            if (o.optin && old.optout) || (o.optout && old.optin) {
                return self.w().error("ERR You can't switch OPTIN/OPTOUT mode before disabling tracking for this client, and then re-enabling it with a different mode.");
            }
        }
        if o.bcast {
            if let Some(e) = prefix_collision(self.s.tracking.as_ref(), &new_prefixes) {
                return self.w().error(&e);
            }
            if let Some(old) = &self.s.tracking {
                o.prefixes = old.prefixes.clone();
            }
            if new_prefixes.is_empty() {
                new_prefixes.push(Bytes::new());
            }
            o.prefixes.extend(new_prefixes);
        }
        let own = self
            .s
            .resp3
            .then(|| self.subs.ensure_queue(self.own_queue()));
        let elsewhere = o.redirect != 0 && o.redirect != self.s.id;
        let target = if elsewhere {
            self.shared.pubsub.subscriber(o.redirect)
        } else {
            own.clone()
        };
        let bcast = o.bcast.then(|| o.prefixes.iter().cloned().collect());
        let client = Client {
            target,
            bcast,
            redirect: if elsewhere { o.redirect } else { 0 },
            own,
            broken: false,
        };
        self.shared.tracking.enable(self.s.id, client);
        self.s.tracking = Some(o);
        self.w().simple("OK");
    }

    /// Turns tracking off (CLIENT TRACKING OFF, RESET, the connection's end).
    pub(crate) fn tracking_off(&mut self) {
        if self.s.tracking.take().is_some() {
            self.shared.tracking.disable(self.s.id);
        }
    }

    fn caching(&mut self, opt: &[u8]) {
        let Some(o) = self.s.tracking.as_mut() else {
            return self.w().error("ERR CLIENT CACHING can be called only when the client is in tracking mode with OPTIN or OPTOUT mode enabled");
        };
        if is(opt, "YES") {
            if !o.optin {
                return self.w().error(
                    "ERR CLIENT CACHING YES is only valid when tracking is enabled in OPTIN mode.",
                );
            }
        } else if is(opt, "NO") {
            if !o.optout {
                return self.w().error(
                    "ERR CLIENT CACHING NO is only valid when tracking is enabled in OPTOUT mode.",
                );
            }
        } else {
            return self.w().error("ERR syntax error");
        }
        o.caching = true;
        self.w().simple("OK");
    }

    fn tracking_info(&mut self) {
        let o = self.s.tracking.clone();
        let mut flags: Vec<&str> = vec![if o.is_some() { "on" } else { "off" }];
        if let Some(o) = &o {
            let pairs = [
                (o.bcast, "bcast"),
                (o.optin, "optin"),
                (o.optin && o.caching, "caching-yes"),
                (o.optout, "optout"),
                (o.optout && o.caching, "caching-no"),
                (o.noloop, "noloop"),
                (self.shared.tracking.broken(self.s.id), "broken_redirect"),
            ];
            flags.extend(pairs.iter().filter(|(on, _)| *on).map(|(_, f)| *f));
        }
        let mut w = self.w();
        w.map(3);
        w.bulk(b"flags");
        w.set(flags.len());
        for f in flags {
            w.bulk(f.as_bytes());
        }
        w.bulk(b"redirect");
        w.int(o.as_ref().map_or(-1, |o| o.redirect as i64));
        w.bulk(b"prefixes");
        let prefixes = o.map(|o| o.prefixes).unwrap_or_default();
        w.array(prefixes.len());
        for p in &prefixes {
            w.bulk(p);
        }
    }

    /// Whether CLIENT CACHING was set for this command; every command
    /// after it ends it (refused ones too) — except CLIENT commands and
    /// commands queued in MULTI, as Redis's `resetClient`.
    pub(crate) fn take_caching(&mut self, args: &[Bytes]) -> bool {
        let multi = self.s.multi.is_some();
        let Some(o) = self.s.tracking.as_mut() else {
            return false;
        };
        if multi || is(&args[0], "CLIENT") {
            return o.caching;
        }
        std::mem::take(&mut o.caching)
    }

    /// NOLOOP: a write command (or a script, whose declared keys it
    /// writes) names its keys before it runs, so the change it makes is
    /// not sent back to this connection (see `Tables::writing`).
    ///
    /// A script's writes count as the caller's in default mode only: Redis
    /// compares the tracking client with `server.current_client` (the
    /// caller) there, but a BCAST client with the client that modified the
    /// key — a script's own client, never the caller.
    pub(crate) fn noloop_writing(&mut self, spec: &cmd::Spec, args: &[Bytes]) {
        let Some(o) = self.s.tracking.as_ref().filter(|o| o.noloop) else {
            return;
        };
        let script = matches!(spec.kind, cmd::Kind::Control(cmd::Control::Eval));
        if !(spec.is_write() || script && !o.bcast) {
            return;
        }
        let keys: Vec<Bytes> = cmd::key_positions(spec, args)
            .into_iter()
            .filter_map(|p| args.get(p))
            .map(|k| elsa_shard::db::encode(self.s.db, k))
            .collect();
        if !keys.is_empty() {
            self.shared.tracking.writing(self.s.id, keys);
            self.s.noloop_writing = true;
        }
    }

    /// After a batch of commands: what this connection wrote is done,
    /// unless a MULTI or transaction is still open.
    pub(crate) fn noloop_done(&mut self) {
        if self.s.noloop_writing && self.s.multi.is_none() && self.s.txn.is_none() {
            self.s.noloop_writing = false;
            self.shared.tracking.writing_done(self.s.id);
        }
    }

    /// A data command was parsed: a tracking connection in default mode
    /// may cache the keys a read-only one reads (as Redis's
    /// `trackingRememberKeys`: OPTIN only after `CLIENT CACHING yes`,
    /// OPTOUT unless `CLIENT CACHING no`; `caching` says whether it came).
    pub(crate) fn remember_reads(&mut self, readonly: bool, caching: bool, dc: &DataCmd) {
        if self.s.tracking.is_none() {
            return;
        }
        let cache = self.caches(caching);
        let keys = dc
            .ops
            .iter()
            .flat_map(|(k, op)| std::iter::once(k).chain(op.other_keys()));
        if self.s.multi.is_some() {
            // Queued: remembered when EXEC runs it (Redis remembers a
            // key when the command reading it runs, so a write queued
            // before the read does not invalidate it).
            let keys = keys.cloned().collect();
            self.s
                .multi_reads
                .push((readonly && cache, !readonly, keys));
            return;
        }
        if !readonly || !cache {
            return;
        }
        self.shared.tracking.remember(self.s.id, keys);
    }

    /// Whether this connection's reads are remembered now: default mode,
    /// and with OPTIN only when asked (`CLIENT CACHING yes`), with OPTOUT
    /// unless asked not to.
    fn caches(&self, caching: bool) -> bool {
        self.s.tracking.as_ref().is_some_and(|o| {
            !o.bcast
                && if o.optin {
                    caching
                } else {
                    !(o.optout && caching)
                }
        })
    }

    /// A script (EVAL, FCALL and their forms) is about to run: the keys
    /// it declares are remembered if it calls a read-only command, as
    /// Redis 7.0 does (`call()`: `trackingRememberKeys(script_caller)`).
    pub(crate) fn script_may_track(&mut self, spec: &cmd::Spec, args: &[Bytes], caching: bool) {
        self.s.script_read = false;
        self.s.script_keys = None;
        if self.s.multi.is_some() || !self.caches(caching) {
            return;
        }
        let keys = cmd::key_positions(spec, args)
            .into_iter()
            .filter_map(|p| args.get(p))
            .map(|k| elsa_shard::db::encode(self.s.db, k))
            .collect();
        self.s.script_keys = Some(keys);
    }

    /// The script ran: its declared keys are remembered if it read.
    pub(crate) fn script_tracked(&mut self) {
        let keys = self.s.script_keys.take();
        if std::mem::take(&mut self.s.script_read) {
            if let Some(keys) = keys.filter(|_| self.s.tracking.is_some()) {
                self.shared.tracking.remember(self.s.id, keys.iter());
            }
        }
    }

    /// EXEC ran its queued commands: the keys its reads read are
    /// remembered — or, `ordered`, a key a later queued command wrote is
    /// invalidated for this connection at once instead, as Redis, which
    /// remembered it at the read, tells of that write after EXEC's reply.
    pub(crate) fn remember_exec_reads(
        &mut self,
        reads: Vec<(bool, bool, Vec<Bytes>)>,
        ordered: bool,
    ) {
        if reads.is_empty() || self.s.tracking.is_none() {
            return;
        }
        for (i, (remember, _, keys)) in reads.iter().enumerate() {
            if !remember {
                continue;
            }
            for key in keys {
                let written_after = ordered
                    && reads[i + 1..]
                        .iter()
                        .any(|(_, writes, ks)| *writes && ks.contains(key));
                if written_after {
                    self.shared.tracking.tell(self.s.id, key);
                } else {
                    self.shared
                        .tracking
                        .remember(self.s.id, std::iter::once(key));
                }
            }
        }
    }
}

/// Redis's `checkPrefixCollisionsOrReply`: a new BCAST prefix may not
/// start another one (or be started by it), old or new.
fn prefix_collision(old: Option<&Options>, new: &[Bytes]) -> Option<String> {
    let overlap = |a: &[u8], b: &[u8]| {
        let n = a.len().min(b.len());
        a[..n] == b[..n]
    };
    let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    for (i, p) in new.iter().enumerate() {
        if let Some(hit) = old
            .into_iter()
            .flat_map(|o| o.prefixes.iter())
            .find(|e| overlap(e, p))
        {
            return Some(format!(
                "ERR Prefix '{}' overlaps with an existing prefix '{}'. Prefixes for a single client must not overlap.",
                text(p),
                text(hit)
            ));
        }
        if let Some(hit) = new[i + 1..].iter().find(|q| overlap(p, q)) {
            return Some(format!(
                "ERR Prefix '{}' overlaps with another provided prefix '{}'. Prefixes for a single client must not overlap.",
                text(p),
                text(hit)
            ));
        }
    }
    None
}

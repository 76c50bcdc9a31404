//! CLIENT LIST, INFO, KILL, PAUSE, UNPAUSE, REPLY, NO-EVICT and UNBLOCK,
//! with Redis 7.0's replies and errors (`clientCommand` in networking.c);
//! and what a connection publishes of itself to the registry.

use std::sync::Arc;

use bytes::Bytes;

use super::list::Type;
use super::{flag, pause, unblock, Client};
use crate::cmd::{self, is};
use crate::conn::Conn;

/// Redis's `addReplySubcommandSyntaxError`.
fn subcommand_syntax(args: &[Bytes]) -> String {
    let sub = cmd::c_str(&args[1]);
    format!(
        "ERR unknown subcommand or wrong number of arguments for '{}'. Try {} HELP.",
        String::from_utf8_lossy(&sub[..sub.len().min(128)]),
        String::from_utf8_lossy(cmd::c_str(&args[0])).to_uppercase()
    )
}

const SYNTAX: &str = "ERR syntax error";

/// CLIENT HELP's lines, Redis 7.0's (`clientCommand`).
const HELP: &[&str] = &[
    "CACHING (YES|NO)",
    "    Enable/disable tracking of the keys for next command in OPTIN/OPTOUT modes.",
    "GETREDIR",
    "    Return the client ID we are redirecting to when tracking is enabled.",
    "GETNAME",
    "    Return the name of the current connection.",
    "ID",
    "    Return the ID of the current connection.",
    "INFO",
    "    Return information about the current client connection.",
    "KILL <ip:port>",
    "    Kill connection made from <ip:port>.",
    "KILL <option> <value> [<option> <value> [...]]",
    "    Kill connections. Options are:",
    "    * ADDR (<ip:port>|<unixsocket>:0)",
    "      Kill connections made from the specified address",
    "    * LADDR (<ip:port>|<unixsocket>:0)",
    "      Kill connections made to specified local address",
    "    * TYPE (NORMAL|MASTER|REPLICA|PUBSUB)",
    "      Kill connections by type.",
    "    * USER <username>",
    "      Kill connections authenticated by <username>.",
    "    * SKIPME (YES|NO)",
    "      Skip killing current connection (default: yes).",
    "LIST [options ...]",
    "    Return information about client connections. Options:",
    "    * TYPE (NORMAL|MASTER|REPLICA|PUBSUB)",
    "      Return clients of specified type.",
    "UNPAUSE",
    "    Stop the current client pause, resuming traffic.",
    "PAUSE <timeout> [WRITE|ALL]",
    "    Suspend all, or just write, clients for <timeout> milliseconds.",
    "REPLY (ON|OFF|SKIP)",
    "    Control the replies sent to the current connection.",
    "SETNAME <name>",
    "    Assign the name <name> to the current connection.",
    "UNBLOCK <clientid> [TIMEOUT|ERROR]",
    "    Unblock the specified blocked client.",
    "TRACKING (ON|OFF) [REDIRECT <id>] [BCAST] [PREFIX <prefix> [...]]",
    "         [OPTIN] [OPTOUT] [NOLOOP]",
    "    Control server assisted client side caching.",
    "TRACKINGINFO",
    "    Report tracking status for the current connection.",
    "NO-EVICT (ON|OFF)",
    "    Protect current client connection from eviction.",
];

impl Conn {
    /// The CLIENT subcommands this module serves; false for the others.
    pub(crate) fn client_ops(&mut self, args: &[Bytes]) -> bool {
        let sub = &args[1];
        if is(sub, "HELP") {
            let cmd = String::from_utf8_lossy(cmd::c_str(&args[0])).to_uppercase();
            let mut w = self.w();
            w.array(HELP.len() + 3);
            w.simple(&format!(
                "{cmd} <subcommand> [<arg> [value] [opt] ...]. Subcommands are:"
            ));
            for l in HELP {
                w.simple(l);
            }
            w.simple("HELP");
            w.simple("    Prints this help.");
        } else if is(sub, "LIST") {
            self.client_list(args);
        } else if is(sub, "INFO") {
            self.publish_client(args);
            let line = format!("{}\n", self.client.client.line());
            self.w().verbatim(&line);
        } else if is(sub, "KILL") {
            self.client_kill(args);
        } else if is(sub, "PAUSE") {
            self.client_pause(args);
        } else if is(sub, "UNPAUSE") {
            self.shared.conns.pause.unpause();
            self.w().simple("OK");
        } else if is(sub, "REPLY") {
            if is(&args[2], "ON") {
                self.cl.reply_off = false;
                self.cl.skip_this = false;
                self.cl.skip_next = false;
                self.w().simple("OK");
            } else if is(&args[2], "OFF") {
                self.cl.reply_off = true;
            } else if is(&args[2], "SKIP") {
                if !self.cl.reply_off {
                    self.cl.skip_next = true;
                }
            } else {
                self.w().error(SYNTAX);
            }
        } else if is(sub, "NO-EVICT") {
            // Elsa evicts no client for memory (it has no maxmemory-clients):
            // the flag is kept and shown, as Redis shows it.
            if is(&args[2], "ON") {
                self.cl.no_evict = true;
                self.w().simple("OK");
            } else if is(&args[2], "OFF") {
                self.cl.no_evict = false;
                self.w().simple("OK");
            } else {
                self.w().error(SYNTAX);
            }
        } else if is(sub, "UNBLOCK") {
            self.client_unblock(args);
        } else {
            return false;
        }
        true
    }

    fn client_list(&mut self, args: &[Bytes]) {
        let mut only: Option<Type> = None;
        let mut ids: Option<Vec<u64>> = None;
        if args.len() == 4 && is(&args[2], "TYPE") {
            match Type::by_name(&args[3]) {
                Some(t) => only = Some(t),
                None => {
                    return self.w().error(&format!(
                        "ERR Unknown client type '{}'",
                        String::from_utf8_lossy(cmd::c_str(&args[3]))
                    ))
                }
            }
        } else if args.len() > 3 && is(&args[2], "ID") {
            let mut list = Vec::with_capacity(args.len() - 3);
            for a in &args[3..] {
                match cmd::int_arg(a) {
                    Ok(id) => list.push(id as u64),
                    Err(_) => return self.w().error("ERR Invalid client ID"),
                }
            }
            ids = Some(list);
        } else if args.len() != 2 {
            return self.w().error(SYNTAX);
        }
        self.publish_client(args);
        let registry = self.shared.conns.clone();
        let clients: Vec<Arc<Client>> = match ids {
            // In the order asked, each as often as asked, as Redis.
            Some(ids) => ids.iter().filter_map(|&id| registry.get(id)).collect(),
            None => registry.all(),
        };
        let mut text = String::with_capacity(clients.len() * 320);
        for c in clients {
            if only.is_some_and(|t| c.kind() != t) {
                continue;
            }
            text.push_str(&c.line());
            text.push('\n');
        }
        self.w().verbatim(&text);
    }

    fn client_kill(&mut self, args: &[Bytes]) {
        let mut addr: Option<&[u8]> = None;
        let mut laddr: Option<&[u8]> = None;
        let mut user: Option<Arc<crate::acl::User>> = None;
        let mut kind: Option<Type> = None;
        let mut id: Option<u64> = None;
        let old_form = args.len() == 3;
        let mut skipme = !old_form; // the old form may kill the caller
        if old_form {
            addr = Some(&args[2]);
        } else {
            let mut i = 2;
            while i < args.len() {
                let (opt, val) = (&args[i], args.get(i + 1));
                let Some(val) = val else {
                    return self.w().error(SYNTAX);
                };
                if is(opt, "ID") {
                    match cmd::int_arg(val) {
                        Ok(n) if n >= 1 => id = Some(n as u64),
                        _ => return self.w().error("ERR client-id should be greater than 0"),
                    }
                } else if is(opt, "TYPE") {
                    match Type::by_name(val) {
                        Some(t) => kind = Some(t),
                        None => {
                            return self.w().error(&format!(
                                "ERR Unknown client type '{}'",
                                String::from_utf8_lossy(cmd::c_str(val))
                            ))
                        }
                    }
                } else if is(opt, "ADDR") {
                    addr = Some(val);
                } else if is(opt, "LADDR") {
                    laddr = Some(val);
                } else if is(opt, "USER") {
                    match self.shared.acl.get(val) {
                        Some(u) => user = Some(u),
                        None => {
                            return self.w().error(&format!(
                                "ERR No such user '{}'",
                                String::from_utf8_lossy(cmd::c_str(val))
                            ))
                        }
                    }
                } else if is(opt, "SKIPME") {
                    if is(val, "YES") {
                        skipme = true;
                    } else if is(val, "NO") {
                        skipme = false;
                    } else {
                        return self.w().error(SYNTAX);
                    }
                } else {
                    return self.w().error(SYNTAX);
                }
                i += 2;
            }
        }
        self.publish_client(args);
        let me = self.s.id;
        let mut killed = 0;
        let mut close_me = false;
        for c in self.shared.conns.all() {
            // (Redis compares C strings: an argument stops at a NUL.)
            if addr.is_some_and(|a| cmd::c_str(a) != c.addr.as_bytes()) {
                continue;
            }
            if laddr.is_some_and(|a| cmd::c_str(a) != c.laddr.as_bytes()) {
                continue;
            }
            if kind.is_some_and(|t| c.kind() != t) {
                continue;
            }
            if id.is_some_and(|id| c.id != id) {
                continue;
            }
            if user.as_ref().is_some_and(|u| c.state().user.name != u.name) {
                continue;
            }
            if c.id == me && skipme {
                continue;
            }
            if c.is_killed() {
                continue; // already on its way out
            }
            if c.id == me {
                close_me = true;
            } else {
                c.kill();
            }
            killed += 1;
        }
        if old_form {
            if killed == 0 {
                self.w().error("ERR No such client");
            } else {
                self.w().simple("OK");
            }
        } else {
            self.w().int(killed);
        }
        if close_me {
            // After the reply, as Redis's CLIENT_CLOSE_AFTER_REPLY.
            self.s.closing = true;
        }
    }

    fn client_pause(&mut self, args: &[Bytes]) {
        if args.len() > 4 {
            return self.w().error(&subcommand_syntax(args));
        }
        let mut mode = pause::Mode::All;
        if let Some(m) = args.get(3) {
            if is(m, "WRITE") {
                mode = pause::Mode::Write;
            } else if !is(m, "ALL") {
                return self.w().error("ERR CLIENT PAUSE mode must be WRITE or ALL");
            }
        }
        let ms = match cmd::int_arg(&args[2]) {
            Ok(ms) if ms < 0 => return self.w().error("ERR timeout is negative"),
            Ok(ms) => ms as u64,
            Err(_) => {
                return self
                    .w()
                    .error("ERR timeout is not an integer or out of range")
            }
        };
        // (A timeout too far to represent is as good as forever.)
        let now = tokio::time::Instant::now();
        let until = now
            .checked_add(std::time::Duration::from_millis(ms))
            .unwrap_or_else(|| now + std::time::Duration::from_secs(100 * 365 * 86400));
        self.shared.conns.pause.pause(until, mode);
        self.w().simple("OK");
    }

    fn client_unblock(&mut self, args: &[Bytes]) {
        if args.len() > 4 {
            return self.w().error(&subcommand_syntax(args));
        }
        let mut how = unblock::TIMEOUT;
        if let Some(r) = args.get(3) {
            if is(r, "ERROR") {
                how = unblock::ERROR;
            } else if !is(r, "TIMEOUT") {
                return self
                    .w()
                    .error("ERR CLIENT UNBLOCK reason should be TIMEOUT or ERROR");
            }
        }
        let id = match cmd::int_arg(&args[2]) {
            Ok(id) => id,
            Err(e) => return self.w().error(&e.0),
        };
        let target = u64::try_from(id)
            .ok()
            .and_then(|id| self.shared.conns.get(id));
        let done = target.is_some_and(|c| c.unblock(how));
        self.w().int(i64::from(done));
    }

    /// Publishes this connection's state to its registry entry: once per
    /// batch of requests, and before its own CLIENT LIST/INFO/KILL (which
    /// show it as of the command running, `args`).
    pub(crate) fn publish_client(&mut self, args: &[Bytes]) {
        let cmd = args.first().map(|n| (n.clone(), args.get(1).cloned()));
        self.publish_entry(cmd, args.iter().map(|a| a.len()).sum());
    }

    /// Publishes after a batch: `cmd`, the name and first argument of its
    /// last request (no arguments are held any more).
    pub(crate) fn publish_batch(&mut self, cmd: Option<(Bytes, Option<Bytes>)>) {
        self.publish_entry(cmd, 0);
    }

    fn publish_entry(&mut self, cmd: Option<(Bytes, Option<Bytes>)>, argv_mem: usize) {
        let out_len = self.out.len();
        self.cl.out_peak = self.cl.out_peak.max(out_len);
        let s = &self.s;
        let mut flags = 0;
        if self.subs.active() {
            flags |= flag::PUBSUB;
        }
        if s.multi.is_some() {
            flags |= flag::MULTI;
        }
        let mut redir = -1;
        if let Some(t) = &s.tracking {
            flags |= flag::TRACKING;
            if t.is_bcast() {
                flags |= flag::BCAST;
            }
            redir = t.redirect_id() as i64;
        }
        if s.closing {
            flags |= flag::CLOSE_AFTER_REPLY;
        }
        if self.cl.no_evict {
            flags |= flag::NO_EVICT;
        }
        let (sub, psub, ssub) = self.subs.counts();
        let entry = self.client.client.clone();
        let mut st = entry.state();
        if st.name != s.name {
            st.name = s.name.clone();
        }
        if st.lib_name != s.lib_name {
            st.lib_name = s.lib_name.clone();
        }
        if st.lib_ver != s.lib_ver {
            st.lib_ver = s.lib_ver.clone();
        }
        if !Arc::ptr_eq(&st.user, &s.user) {
            st.user = s.user.clone();
        }
        st.db = s.db;
        (st.sub, st.psub, st.ssub) = (sub, psub, ssub);
        st.multi = s.multi.as_ref().map_or(-1, |q| q.len() as i64);
        st.multi_mem = match s.multi {
            Some(_) => s.multi_args.iter().flatten().map(|a| a.len()).sum(),
            None => 0,
        };
        st.flags = flags;
        st.qbuf = self.inbuf.len();
        st.qbuf_free = self.inbuf.capacity() - self.inbuf.len();
        st.argv_mem = argv_mem;
        st.obl = out_len;
        st.rbs = self.out.capacity();
        st.rbp = self.cl.out_peak;
        if cmd.is_some() {
            st.cmd = cmd;
        }
        st.redir = redir;
        st.resp = if s.resp3 { 3 } else { 2 };
        st.txn = s.txn.as_ref().map_or("none", |t| t.isolation.name());
        st.last_interaction = std::time::Instant::now();
        drop(st);
        self.cl.out_peak = out_len;
    }
}

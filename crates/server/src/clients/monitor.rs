//! MONITOR: the connections that asked for it receive every command the
//! node's clients run, one status line each in Redis's format
//! (`replicationFeedMonitors`): `+<secs>.<micros> [<db> <ip:port>] "arg" …`,
//! each argument quoted as `sdscatrepr` quotes it. Like Redis, commands
//! refused before they run (unknown, wrong arity, not authenticated,
//! denied by ACL) and admin commands (`@admin`: CONFIG, CLIENT KILL, ACL
//! SETUSER, …) are not shown, and passwords are redacted (AUTH, HELLO …
//! AUTH).
//!
//! Lines reach a monitor through its connection's push queue
//! (`crate::pubsub::queue`), bounded by `client-output-buffer-limit
//! pubsub`: a monitor that does not read is disconnected rather than
//! growing the node's memory. (Redis counts monitors as normal clients,
//! whose limit is off by default; Elsa bounds them as it bounds
//! subscribers.)
//!
//! Cost when nobody monitors: one relaxed atomic load per command.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, RwLock};

use bytes::Bytes;

use crate::cmd::is;
use crate::conn::Conn;
use crate::pubsub::{Msg, Subscriber};

#[derive(Default)]
pub(crate) struct Monitors {
    count: AtomicUsize,
    list: RwLock<Vec<Arc<Subscriber>>>,
}

impl Monitors {
    /// True when some connection monitors: the one check per command.
    #[inline]
    pub fn any(&self) -> bool {
        self.count.load(Ordering::Relaxed) > 0
    }

    fn add(&self, q: Arc<Subscriber>) {
        let mut l = self.list.write().unwrap_or_else(|e| e.into_inner());
        l.push(q);
        self.count.store(l.len(), Ordering::Relaxed);
    }

    /// A monitoring connection closed.
    pub fn remove(&self, id: u64) {
        let mut l = self.list.write().unwrap_or_else(|e| e.into_inner());
        l.retain(|q| q.id != id);
        self.count.store(l.len(), Ordering::Relaxed);
    }

    /// Sends one command to every monitor. `from`: the client's address,
    /// or `lua` for a script's `redis.call`.
    pub fn feed(&self, db: u8, from: &str, args: &[Bytes]) {
        let line = Bytes::from(line(db, from, args));
        for q in self.list.read().unwrap_or_else(|e| e.into_inner()).iter() {
            // Over its limit it closes itself; its connection then leaves.
            q.push(Msg::Raw(line.clone()));
        }
    }
}

/// The status line a monitor receives, `\r\n` included.
pub(crate) fn line(db: u8, from: &str, args: &[Bytes]) -> Vec<u8> {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    let mut out = format!(
        "+{}.{:06} [{db} {from}]",
        now.as_secs(),
        now.subsec_micros()
    )
    .into_bytes();
    for (i, a) in args.iter().enumerate() {
        out.push(b' ');
        if redacted(args, i) {
            out.extend_from_slice(b"\"(redacted)\"");
        } else {
            repr(&mut out, a);
        }
    }
    out.extend_from_slice(b"\r\n");
    out
}

/// Redis's `sdscatrepr`: quoted, `\\ \" \n \r \t \a \b` escaped, other
/// bytes outside printable ASCII as `\xhh`.
pub(crate) fn repr(out: &mut Vec<u8>, s: &[u8]) {
    out.push(b'"');
    for &c in s {
        match c {
            b'\\' | b'"' => out.extend_from_slice(&[b'\\', c]),
            b'\n' => out.extend_from_slice(b"\\n"),
            b'\r' => out.extend_from_slice(b"\\r"),
            b'\t' => out.extend_from_slice(b"\\t"),
            0x07 => out.extend_from_slice(b"\\a"),
            0x08 => out.extend_from_slice(b"\\b"),
            0x20..=0x7e => out.push(c),
            _ => out.extend_from_slice(format!("\\x{c:02x}").as_bytes()),
        }
    }
    out.push(b'"');
}

/// Whether argument `i` is shown as `(redacted)`, as Redis's
/// `redactClientCommandArgument` calls in AUTH and HELLO decide.
fn redacted(args: &[Bytes], i: usize) -> bool {
    let name = &args[0];
    if is(name, "auth") {
        // AUTH with too many arguments is refused before it redacts.
        return args.len() <= 3 && i >= 1;
    }
    if is(name, "hello") {
        let mut j = 2;
        while j < args.len() {
            let more = args.len() - 1 - j;
            if is(&args[j], "AUTH") && more >= 2 {
                if i == j + 1 || i == j + 2 {
                    return true;
                }
                j += 3;
            } else if is(&args[j], "SETNAME") && more >= 1 {
                j += 2;
            } else {
                break;
            }
        }
    }
    false
}

/// True for a command Redis keeps out of MONITOR (`@admin` ones).
fn is_admin(args: &[Bytes]) -> bool {
    let name = String::from_utf8_lossy(&args[0]).to_ascii_lowercase();
    let admin = crate::acl::category(b"admin").unwrap_or(0);
    crate::acl::TABLE
        .of_request(&name, args)
        .is_some_and(|id| crate::acl::TABLE.cmds[id as usize].cats & admin != 0)
}

/// True for a command a MONITOR connection may not run: one that reads
/// or writes keys, or may replicate (Redis's `CMD_READONLY`, `CMD_WRITE`,
/// `CMD_MAY_REPLICATE`: scripts, PUBLISH, SPUBLISH).
pub(crate) fn touches_keyspace(spec: &crate::cmd::Spec) -> bool {
    spec.flags
        .iter()
        .any(|f| matches!(*f, "readonly" | "write"))
        || matches!(
            spec.name,
            "eval" | "evalsha" | "fcall" | "pfcount" | "publish" | "spublish"
        )
}

impl Conn {
    /// MONITOR: `+OK`, then every command of every connection.
    pub(crate) fn monitor(&mut self) {
        let entry = self.client.client.clone();
        if entry.monitor.swap(true, Ordering::Relaxed) {
            return; // already monitoring: Redis ignores it
        }
        let q = self.subs.ensure_queue(self.own_queue());
        self.shared.conns.monitors.add(q);
        self.w().simple("OK");
    }

    /// Shows a command to the monitors, if it ran (`ran`: it was not
    /// refused before running). Redis shows a command once it ran, with the
    /// database it left selected (`SELECT 2` shows as db 2): a control
    /// command is fed after it ran, a data command (which changes no
    /// database; a blocking one shows as it blocks) before. Inside MULTI
    /// the commands queued are shown when EXEC runs them, before EXEC
    /// itself ([`Conn::feed_queued`]).
    pub(crate) fn feed_monitors(&self, args: &[Bytes], ran: bool, was_in_multi: bool) {
        if !ran || args.is_empty() || is_admin(args) {
            return;
        }
        let acts_now = ["exec", "discard", "multi", "watch", "quit", "reset"]
            .iter()
            .any(|n| is(&args[0], n));
        if was_in_multi && !acts_now {
            return; // queued: shown at EXEC
        }
        self.shared
            .conns
            .monitors
            .feed(self.s.db, &self.s.addr, args);
    }

    /// A script's `redis.call` that passed its checks, shown as from
    /// `lua` (no script command changes the database, so shown before it
    /// runs, as after).
    pub(crate) fn feed_script_call(&self, args: &[Bytes]) {
        if !is_admin(args) {
            self.shared.conns.monitors.feed(self.s.db, "lua", args);
        }
    }

    /// Before an EXEC runs: shows the commands it will run.
    pub(crate) fn feed_queued(&self, args: &[Bytes], was_in_multi: bool) {
        if !was_in_multi || !is(&args[0], "exec") || self.s.multi_failed {
            return;
        }
        for queued in &self.s.multi_args {
            if !queued.is_empty() && !is_admin(queued) {
                self.shared
                    .conns
                    .monitors
                    .feed(self.s.db, &self.s.addr, queued);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(a: &[&[u8]]) -> Vec<Bytes> {
        a.iter().map(|s| Bytes::copy_from_slice(s)).collect()
    }

    #[test]
    fn arguments_are_quoted_as_sdscatrepr() {
        let mut out = Vec::new();
        repr(&mut out, b"a\"b\\c\n\r\t\x07\x08\x00\xff ~");
        assert_eq!(out, b"\"a\\\"b\\\\c\\n\\r\\t\\a\\b\\x00\\xff ~\"");
    }

    #[test]
    fn passwords_are_redacted() {
        let l = line(0, "1.2.3.4:5", &args(&[b"AUTH", b"u", b"p"]));
        let l = String::from_utf8(l).unwrap();
        assert!(l.ends_with(" [0 1.2.3.4:5] \"AUTH\" \"(redacted)\" \"(redacted)\"\r\n"));
        let l = line(
            1,
            "lua",
            &args(&[b"hello", b"3", b"SETNAME", b"n", b"AUTH", b"u", b"p"]),
        );
        let l = String::from_utf8(l).unwrap();
        assert!(l.ends_with(
            " [1 lua] \"hello\" \"3\" \"SETNAME\" \"n\" \"AUTH\" \"(redacted)\" \"(redacted)\"\r\n"
        ));
        let l = String::from_utf8(line(0, "x", &args(&[b"auth", b"a", b"b", b"c"]))).unwrap();
        assert!(l.ends_with("\"auth\" \"a\" \"b\" \"c\"\r\n"));
    }

    #[test]
    fn admin_commands_are_not_shown() {
        assert!(is_admin(&args(&[b"config", b"set", b"a", b"b"])));
        assert!(is_admin(&args(&[b"ACL", b"SETUSER", b"u"])));
        assert!(is_admin(&args(&[b"client", b"kill", b"1.2.3.4:5"])));
        assert!(!is_admin(&args(&[b"set", b"k", b"v"])));
        assert!(!is_admin(&args(&[b"client", b"id"])));
    }
}

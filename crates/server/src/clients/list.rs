//! The line CLIENT LIST and CLIENT INFO give for one connection: Redis
//! 7.0's fields in its order (`catClientInfoString` in networking.c), then
//! Elsa's own (`lib-name`, `lib-ver` — Redis 7.2's — and `txn`).

use std::fmt::Write;
use std::sync::atomic::Ordering;

use bytes::Bytes;

use super::{flag, Client};
use crate::cmd;

/// A client class as CLIENT LIST TYPE and CLIENT KILL TYPE name it.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Type {
    Normal,
    Replica,
    Pubsub,
    Master,
}

impl Type {
    /// Redis's `getClientTypeByName`.
    pub fn by_name(name: &[u8]) -> Option<Type> {
        let is = |w: &str| name.eq_ignore_ascii_case(w.as_bytes());
        if is("normal") {
            Some(Type::Normal)
        } else if is("slave") || is("replica") {
            Some(Type::Replica)
        } else if is("pubsub") {
            Some(Type::Pubsub)
        } else if is("master") {
            Some(Type::Master)
        } else {
            None
        }
    }
}

impl Client {
    /// Redis's `getClientType`: Elsa has no replica or master connections
    /// on its client port (replication uses the peer port), and MONITOR
    /// clients count as normal, as in Redis.
    pub(crate) fn kind(&self) -> Type {
        if self.state().flags & flag::PUBSUB != 0 {
            Type::Pubsub
        } else {
            Type::Normal
        }
    }

    /// The CLIENT LIST line, without its newline.
    pub(crate) fn line(&self) -> String {
        let st = self.state();
        let mut flags = String::new();
        if self.monitor.load(Ordering::Relaxed) {
            flags.push('O');
        }
        for (bit, letter) in [(flag::PUBSUB, 'P'), (flag::MULTI, 'x')] {
            if st.flags & bit != 0 {
                flags.push(letter);
            }
        }
        if self.is_blocked() {
            flags.push('b');
        }
        for (bit, letter) in [
            (flag::TRACKING, 't'),
            (flag::BCAST, 'B'),
            (flag::CLOSE_AFTER_REPLY, 'c'),
        ] {
            if st.flags & bit != 0 {
                flags.push(letter);
            }
        }
        if self.is_killed() {
            flags.push('A'); // closing as soon as its task wakes
        }
        if st.flags & flag::NO_EVICT != 0 {
            flags.push('e');
        }
        if flags.is_empty() {
            flags.push('N');
        }
        let events = if st.obl > 0 { "rw" } else { "r" };
        let text = |b: &Option<Bytes>| {
            b.as_ref()
                .map(|v| String::from_utf8_lossy(v).into_owned())
                .unwrap_or_default()
        };
        // What this connection's buffers hold: its input buffer, its one
        // output buffer (Elsa has no reply list: `oll` and `omem` stay 0
        // and the bytes waiting show as `obl`), and the arguments held.
        let tot_mem = st.qbuf + st.qbuf_free + st.rbs + st.argv_mem + st.multi_mem;
        let mut line = String::with_capacity(320);
        let _ = write!(
            line,
            "id={} addr={} laddr={} fd={} name={} age={} idle={} flags={flags} db={} sub={} psub={} ssub={} multi={} qbuf={} qbuf-free={} argv-mem={} multi-mem={} rbs={} rbp={} obl={} oll=0 omem=0 tot-mem={tot_mem} events={events} cmd={} user={} redir={} resp={}",
            self.id,
            self.addr,
            self.laddr,
            self.fd,
            text(&st.name),
            self.created.elapsed().as_secs(),
            st.last_interaction.elapsed().as_secs(),
            st.db,
            st.sub,
            st.psub,
            st.ssub,
            st.multi,
            st.qbuf,
            st.qbuf_free,
            st.argv_mem,
            st.multi_mem,
            st.rbs,
            st.rbp,
            st.obl,
            command_name(st.cmd.as_ref()),
            String::from_utf8_lossy(&st.user.name),
            st.redir,
            st.resp,
        );
        let _ = write!(
            line,
            " lib-name={} lib-ver={} txn={}",
            text(&st.lib_name),
            text(&st.lib_ver),
            st.txn
        );
        line
    }
}

/// Redis's `lastcmd->fullname`: `client|list` for a container's
/// subcommand; `NULL` before any command Elsa knows.
fn command_name(cmd: Option<&(Bytes, Option<Bytes>)>) -> String {
    let Some((name, sub)) = cmd else {
        return "NULL".into();
    };
    let Some(spec) = cmd::lookup(name) else {
        return "NULL".into();
    };
    let args: Vec<Bytes> = std::iter::once(name.clone()).chain(sub.clone()).collect();
    cmd::full_name(spec, &args)
}

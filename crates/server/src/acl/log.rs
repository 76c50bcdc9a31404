//! ACL LOG: the node's recent denials and failed logins, grouped as Redis
//! groups them (same reason, context, object and user within a minute:
//! one entry with a count).

use std::collections::VecDeque;
use std::time::{SystemTime, UNIX_EPOCH};

/// Entries within this many ms of each other are grouped.
const GROUPING_MS: u64 = 60_000;

/// Why an entry was logged.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Reason {
    Command,
    Key,
    Channel,
    Auth,
}

impl Reason {
    fn name(self) -> &'static str {
        match self {
            Reason::Command => "command",
            Reason::Key => "key",
            Reason::Channel => "channel",
            Reason::Auth => "auth",
        }
    }
}

/// Where the command came from.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Context {
    Toplevel,
    Multi,
    Lua,
}

impl Context {
    fn name(self) -> &'static str {
        match self {
            Context::Toplevel => "toplevel",
            Context::Multi => "multi",
            Context::Lua => "lua",
        }
    }
}

/// One ACL LOG entry.
pub struct Entry {
    count: u64,
    reason: Reason,
    context: Context,
    object: Vec<u8>,
    username: Vec<u8>,
    ctime_ms: u64,
    client_info: String,
}

/// The log, newest first.
#[derive(Default)]
pub struct Log {
    entries: VecDeque<Entry>,
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

impl Log {
    /// Adds an entry (`addACLLogEntry`), or bumps a matching recent one.
    #[allow(clippy::too_many_arguments)]
    pub fn add(
        &mut self,
        reason: Reason,
        context: Context,
        object: &[u8],
        username: &[u8],
        client_info: String,
        max_len: usize,
    ) {
        let now = now_ms();
        let found = self.entries.iter().take(10).position(|e| {
            e.reason == reason
                && e.context == context
                && e.ctime_ms.abs_diff(now) <= GROUPING_MS
                && e.object == object
                && e.username == username
        });
        if let Some(i) = found {
            if let Some(mut e) = self.entries.remove(i) {
                e.count += 1;
                e.ctime_ms = now;
                e.client_info = client_info;
                self.entries.push_front(e);
            }
            return;
        }
        self.entries.push_front(Entry {
            count: 1,
            reason,
            context,
            object: object.to_vec(),
            username: username.to_vec(),
            ctime_ms: now,
            client_info,
        });
        self.entries.truncate(max_len);
    }

    /// ACL LOG RESET.
    pub fn reset(&mut self) {
        self.entries.clear();
    }

    /// Writes up to `count` entries as ACL LOG answers them.
    pub fn write(&self, w: &mut crate::resp::ReplyWriter<'_>, count: usize) {
        let now = now_ms();
        let n = count.min(self.entries.len());
        w.array(n);
        for e in self.entries.iter().take(n) {
            w.map(7);
            w.bulk(b"count");
            w.int(e.count as i64);
            w.bulk(b"reason");
            w.bulk(e.reason.name().as_bytes());
            w.bulk(b"context");
            w.bulk(e.context.name().as_bytes());
            w.bulk(b"object");
            w.bulk(&e.object);
            w.bulk(b"username");
            w.bulk(&e.username);
            w.bulk(b"age-seconds");
            w.double(now.saturating_sub(e.ctime_ms) as f64 / 1000.0);
            w.bulk(b"client-info");
            w.bulk(e.client_info.as_bytes());
        }
    }
}

//! Keyspace notifications (`notify-keyspace-events`): the event classes as
//! Redis 7.0 numbers them, the flags string both ways (`notify.c`), and the
//! node's [`Notifier`] that ops raise events through.
//!
//! Ops raise an event where Redis's command calls `notifyKeyspaceEvent`,
//! through [`crate::KeyView::notify`]: a lone command's view (on the shard
//! that applied it) raises it at once; a transaction's view keeps them
//! until the transaction commits, and its coordinator raises them then
//! (`docs/pubsub.md`, "Keyspace notifications"). Expiry and eviction raise
//! theirs on the shard that collects or evicts the key. The sink — the
//! server's pub/sub — is given once when the node starts.

use std::sync::atomic::{AtomicU32, Ordering::Relaxed};
use std::sync::OnceLock;

/// `K`: `__keyspace@<db>__:<key>` messages.
pub const KEYSPACE: u32 = 1 << 0;
/// `E`: `__keyevent@<db>__:<event>` messages.
pub const KEYEVENT: u32 = 1 << 1;
/// `g`: DEL, EXPIRE, RENAME… on any type.
pub const GENERIC: u32 = 1 << 2;
/// `$`: string commands.
pub const STRING: u32 = 1 << 3;
/// `l`: list commands.
pub const LIST: u32 = 1 << 4;
/// `s`: set commands.
pub const SET: u32 = 1 << 5;
/// `h`: hash commands.
pub const HASH: u32 = 1 << 6;
/// `z`: sorted-set commands.
pub const ZSET: u32 = 1 << 7;
/// `x`: a key expired.
pub const EXPIRED: u32 = 1 << 8;
/// `e`: a key was evicted.
pub const EVICTED: u32 = 1 << 9;
/// `t`: stream commands.
pub const STREAM: u32 = 1 << 10;
/// `m`: a key read was missing (not in `A`).
pub const KEY_MISS: u32 = 1 << 11;
/// `d`: module key types.
pub const MODULE: u32 = 1 << 13;
/// `n`: a key was created (not in `A`).
pub const NEW: u32 = 1 << 14;
/// `A`: `g$lshzxetd`.
pub const ALL: u32 =
    GENERIC | STRING | LIST | SET | HASH | ZSET | EXPIRED | EVICTED | STREAM | MODULE;

/// Parses Redis's flags string; None for an unknown character (Redis's
/// `keyspaceEventsStringToFlags`).
pub fn parse_flags(s: &str) -> Option<u32> {
    let mut flags = 0;
    for c in s.chars() {
        flags |= match c {
            'A' => ALL,
            'g' => GENERIC,
            '$' => STRING,
            'l' => LIST,
            's' => SET,
            'h' => HASH,
            'z' => ZSET,
            'x' => EXPIRED,
            'e' => EVICTED,
            'K' => KEYSPACE,
            'E' => KEYEVENT,
            't' => STREAM,
            'm' => KEY_MISS,
            'd' => MODULE,
            'n' => NEW,
            _ => return None,
        };
    }
    Some(flags)
}

/// The flags as CONFIG GET shows them (Redis's
/// `keyspaceEventsFlagsToString`: `A` for the whole set, else each class,
/// then `K`, `E` and `m`).
pub fn format_flags(flags: u32) -> String {
    let mut s = String::new();
    if flags & ALL == ALL {
        s.push('A');
    } else {
        for (bit, c) in [
            (GENERIC, 'g'),
            (STRING, '$'),
            (LIST, 'l'),
            (SET, 's'),
            (HASH, 'h'),
            (ZSET, 'z'),
            (EXPIRED, 'x'),
            (EVICTED, 'e'),
            (STREAM, 't'),
            (MODULE, 'd'),
            (NEW, 'n'),
        ] {
            if flags & bit != 0 {
                s.push(c);
            }
        }
    }
    // (`n` only here, as in Redis: with `A` it is not shown.)
    for (bit, c) in [(KEYSPACE, 'K'), (KEYEVENT, 'E'), (KEY_MISS, 'm')] {
        if flags & bit != 0 {
            s.push(c);
        }
    }
    s
}

/// One event: its class, Redis's name for it, the key as stored.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Event {
    /// One of the class bits.
    pub class: u32,
    /// Redis's event name (`set`, `lpush`, `expired`…).
    pub name: &'static str,
    /// The key, as stored (its database in it: `crate::db`).
    pub key: bytes::Bytes,
}

/// Where raised events go (the server's pub/sub), with the classes on
/// (whether `K`, `E` or both are wanted).
pub type Sink = Box<dyn Fn(&Event, u32) + Send + Sync>;

/// The node's switch and sink for keyspace notifications, shared by its
/// shards and its coordinator. With no class on (Redis's default) an op
/// pays one atomic load per event it could raise.
#[derive(Default)]
pub struct Notifier {
    flags: AtomicU32,
    sink: OnceLock<Sink>,
}

impl Notifier {
    /// Sets the classes (`notify-keyspace-events`).
    pub fn set_flags(&self, flags: u32) {
        self.flags.store(flags, Relaxed);
    }

    /// The classes on.
    pub fn flags(&self) -> u32 {
        self.flags.load(Relaxed)
    }

    /// Gives the sink (once; later calls change nothing).
    pub fn set_sink(&self, sink: Sink) {
        let _ = self.sink.set(sink);
    }

    /// The classes on when events go anywhere (a sink, and `K` or `E`);
    /// 0 otherwise.
    pub fn active(&self) -> u32 {
        let f = self.flags.load(Relaxed);
        if f & (KEYSPACE | KEYEVENT) != 0 && self.sink.get().is_some() {
            f
        } else {
            0
        }
    }

    /// True when an event of `class` would be sent anywhere.
    pub fn wants(&self, class: u32) -> bool {
        self.active() & class != 0
    }

    /// Sends `event` when its class is on (never for Elsa's own keys).
    pub fn raise(&self, event: &Event) {
        let flags = self.active();
        if flags & event.class != 0 && !event.key.starts_with(crate::INTERNAL_PREFIX) {
            if let Some(sink) = self.sink.get() {
                sink(event, flags);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flags_read_and_print_as_redis() {
        for (set, get) in [
            ("gKE", "gKE"),
            ("$lshzxeKE", "$lshzxeKE"),
            ("KA", "AK"),
            ("EA", "AE"),
            ("", ""),
            ("AKEmn", "AKEm"),
            ("gn", "gn"),
        ] {
            assert_eq!(format_flags(parse_flags(set).unwrap()), get, "{set}");
        }
        assert_eq!(parse_flags("KEx?"), None);
    }
}

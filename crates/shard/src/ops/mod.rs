//! Per-key operations: the semantics of every data command, written once.
//!
//! An [`Op`] acts on one key through a [`KeyView`]. The same code runs on a
//! shard's table (lone commands, single-shard EXEC) and on a transaction's
//! buffered overlay (BEGIN…COMMIT, multi-shard EXEC), so a command behaves the
//! same whichever path it takes.
//!
//! A few ops also touch keys besides their own ([`Op::other_keys`]: RENAME
//! and COPY write their destination). Every path that runs ops holds,
//! fetches or routes those keys with the op's own, so the op sees and
//! writes all of them in the same atomic step.
//!
//! The semantics live by family, as Redis's `t_string.c`, `bitops.c` and
//! `db.c` do: [`strings`], [`bits`], [`keys`]; [`longdouble`] is the
//! extended-precision arithmetic INCRBYFLOAT needs. A value is a string
//! for now; a value enum naming the type goes here when a second type
//! arrives, and each family checks it (WRONGTYPE) where Redis does.

mod bits;
mod keys;
pub mod longdouble;
mod strings;

use bytes::Bytes;

/// Largest string a value may grow to (Redis's `proto-max-bulk-len` default).
pub const MAX_STRING: usize = 512 * 1024 * 1024;

/// What a view holds for a key: its value and absolute expiry (Unix ms).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Current {
    /// The value bytes.
    pub value: Bytes,
    /// When it expires, if it has a TTL.
    pub expire_ms: Option<u64>,
}

/// Access to the live state of keys, as a command sees it.
pub trait KeyView {
    /// The live (not deleted, not expired) value of `key`.
    fn read(&mut self, key: &[u8]) -> Option<Current>;
    /// Writes `key`; `None` deletes it (a tombstone).
    fn write(&mut self, key: &[u8], state: Option<Current>);
    /// Milliseconds since the Unix epoch, for TTLs.
    fn now_ms(&self) -> u64;
}

/// SET's NX / XX condition.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SetCond {
    /// Always write.
    Always,
    /// Only if the key does not exist (NX).
    IfAbsent,
    /// Only if the key exists (XX).
    IfPresent,
}

/// What SET does to the key's TTL.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Expiry {
    /// Clear any TTL (plain SET).
    Clear,
    /// Keep the current TTL (KEEPTTL).
    Keep,
    /// Expire at this absolute Unix millisecond.
    At(u64),
}

/// What GETEX does to the key's TTL.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GetExTtl {
    /// No option: a plain GET.
    Keep,
    /// PERSIST: drop the TTL.
    Persist,
    /// EX / PX / EXAT / PXAT: expire at this Unix millisecond (a time
    /// already past deletes the key after answering its value).
    At(u64),
    /// The time given is refused — but Redis reads it only once it found
    /// the key, so a missing key still answers nil.
    Refused(&'static str),
}

/// The range arguments of BITCOUNT and BITPOS, as parsed. Redis looks the
/// key up before it reads them, so a refusal is answered only when the key
/// exists (a missing key answers 0 whatever follows).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BitRange {
    /// No range: the whole string.
    All,
    /// `start [end]`, in bytes, or in bits when `bits` (BIT).
    Span {
        /// First index; negative counts from the end.
        start: i64,
        /// Last index, inclusive; `None` (BITPOS only) runs to the end.
        end: Option<i64>,
        /// BIT rather than BYTE.
        bits: bool,
    },
    /// An argument Redis refuses.
    Refused(&'static str),
}

/// What OBJECT reports about a key.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ObjectField {
    /// OBJECT ENCODING: `int`, `embstr` or `raw`, as Redis would store it.
    Encoding,
    /// OBJECT REFCOUNT: Redis's count for the value it would have.
    Refcount,
    /// OBJECT IDLETIME: Elsa does not track access times; always 0.
    IdleTime,
    /// OBJECT FREQ: refused, as Redis refuses it without an LFU policy.
    Freq,
}

/// EXPIRE's NX / XX / GT / LT options (Redis 7), as given. The command
/// parser refuses the combinations Redis refuses (NX with any other, GT with
/// LT); XX may come with GT or LT.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ExpireCond {
    /// Only if the key has no TTL.
    pub nx: bool,
    /// Only if the key has a TTL.
    pub xx: bool,
    /// Only if the new expiry is later than the current one.
    pub gt: bool,
    /// Only if the new expiry is earlier than the current one.
    pub lt: bool,
}

impl ExpireCond {
    /// True when a key whose expiry is `current` may be given `at`.
    pub fn allows(self, at: u64, current: Option<u64>) -> bool {
        if self.nx && current.is_some() {
            return false;
        }
        if self.xx && current.is_none() {
            return false;
        }
        // No TTL counts as an infinite one, as in Redis: GT never beats
        // it, LT always does.
        if self.gt && current.is_none_or(|cur| at <= cur) {
            return false;
        }
        if self.lt && current.is_some_and(|cur| at >= cur) {
            return false;
        }
        true
    }
}

/// How SET answers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SetReply {
    /// `+OK` or nil when the condition failed (SET).
    Ok,
    /// The old value (SET … GET, GETSET).
    Old,
    /// `1` when written, `0` when not (SETNX).
    Flag,
}

/// One operation on one key.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Op {
    /// GET
    Get,
    /// SET / SETNX / GETSET / SET … GET
    Set {
        /// New value.
        value: Bytes,
        /// NX / XX.
        cond: SetCond,
        /// EX / PX / EXAT / PXAT / KEEPTTL.
        expiry: Expiry,
        /// Reply shape.
        reply: SetReply,
    },
    /// GETEX
    GetEx(GetExTtl),
    /// GETDEL
    GetDel,
    /// INCR / DECR / INCRBY / DECRBY
    IncrBy(i64),
    /// INCRBYFLOAT (the increment as given; checked again when applied)
    IncrByFloat(Bytes),
    /// APPEND
    Append(Bytes),
    /// STRLEN
    Strlen,
    /// GETRANGE / SUBSTR
    GetRange {
        /// First byte; negative counts from the end.
        start: i64,
        /// Last byte, inclusive; negative counts from the end.
        end: i64,
    },
    /// SETRANGE (the offset is checked non-negative by the parser)
    SetRange {
        /// Where the bytes go.
        offset: u64,
        /// The bytes.
        value: Bytes,
    },
    /// GETBIT (the offset is checked by the parser)
    GetBit(u64),
    /// SETBIT
    SetBit {
        /// Which bit, from the first byte's most significant one.
        offset: u64,
        /// Set (1) or clear (0).
        on: bool,
    },
    /// BITCOUNT
    BitCount(BitRange),
    /// BITPOS
    BitPos {
        /// The bit looked for.
        bit: bool,
        /// Where.
        range: BitRange,
    },
    /// DEL / UNLINK (one key; multi-key forms sum the replies)
    Del,
    /// EXISTS / TOUCH (one key)
    Exists,
    /// TYPE
    Type,
    /// TTL (seconds) or PTTL (milliseconds)
    Ttl {
        /// PTTL when true.
        millis: bool,
    },
    /// EXPIRETIME (seconds) or PEXPIRETIME (milliseconds): absolute.
    ExpireTime {
        /// PEXPIRETIME when true.
        millis: bool,
    },
    /// EXPIRE / PEXPIRE / EXPIREAT / PEXPIREAT; a time in the past deletes.
    ExpireAt(u64),
    /// The same with NX / XX / GT / LT: only when `cond` allows it.
    ExpireAtIf {
        /// Absolute Unix ms.
        at: u64,
        /// The options given.
        cond: ExpireCond,
    },
    /// PERSIST
    Persist,
    /// RENAME / RENAMENX: the value and its TTL move to `to`.
    Rename {
        /// The new name.
        to: Bytes,
        /// RENAMENX: only if `to` does not exist.
        nx: bool,
    },
    /// COPY: the value and its TTL are copied to `to` (the parser refuses
    /// `to` equal to the key, as Redis does).
    Copy {
        /// The destination.
        to: Bytes,
        /// REPLACE: overwrite an existing destination.
        replace: bool,
    },
    /// OBJECT ENCODING | REFCOUNT | IDLETIME | FREQ
    Object(ObjectField),
    /// MEMORY USAGE
    MemoryUsage,
}

/// The answer of an [`Op`], before RESP encoding.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum OpReply {
    /// Null bulk / null.
    Nil,
    /// `+OK`.
    Ok,
    /// An integer.
    Int(i64),
    /// A bulk string.
    Bulk(Bytes),
    /// A simple status string (TYPE's `string`).
    Status(&'static str),
    /// A Redis error line, without the leading `-`.
    Error(&'static str),
}

/// Error text Redis uses for non-integer values and overflow.
pub const ERR_NOT_INTEGER: &str = "ERR value is not an integer or out of range";
/// Error text for overflowing INCR.
pub const ERR_OVERFLOW: &str = "ERR increment or decrement would overflow";
/// Error text for values past [`MAX_STRING`].
pub const ERR_TOO_BIG: &str = "ERR string exceeds maximum allowed size (proto-max-bulk-len)";
/// INCRBYFLOAT on (or by) something that is not a number.
pub const ERR_NOT_FLOAT: &str = "ERR value is not a valid float";
/// INCRBYFLOAT whose result is infinite.
pub const ERR_NAN: &str = "ERR increment would produce NaN or Infinity";
/// Redis's generic refusal of an argument.
pub const ERR_SYNTAX: &str = "ERR syntax error";
/// RENAME of a missing key.
pub const ERR_NO_SUCH_KEY: &str = "ERR no such key";
/// GETEX's refused time (Redis names the command).
pub const ERR_GETEX_EXPIRE: &str = "ERR invalid expire time in 'getex' command";
/// OBJECT FREQ without an LFU eviction policy (Elsa has none).
pub const ERR_NO_LFU: &str = "ERR An LFU maxmemory policy is not selected, access frequency not tracked. Please note that when switching between policies at runtime LRU and LFU data will take some time to adjust.";

/// Every error and status text an op can answer. Replies cross the wire
/// between nodes as text and come back as `&'static str` through
/// [`intern`], so a text missing here would reach the client garbled.
pub const REPLY_TEXTS: &[&str] = &[
    ERR_NOT_INTEGER,
    ERR_OVERFLOW,
    ERR_TOO_BIG,
    ERR_NOT_FLOAT,
    ERR_NAN,
    ERR_SYNTAX,
    ERR_NO_SUCH_KEY,
    ERR_GETEX_EXPIRE,
    ERR_NO_LFU,
    "string",
    "none",
];

/// The static copy of a reply text an op can answer, if `text` is one.
pub fn intern(text: &str) -> Option<&'static str> {
    REPLY_TEXTS.iter().copied().find(|t| *t == text)
}

impl Op {
    /// True when the op may change a key (it needs write holds and a
    /// commit timestamp).
    pub fn is_write(&self) -> bool {
        !matches!(
            self,
            Op::Get
                | Op::Exists
                | Op::Strlen
                | Op::Type
                | Op::Ttl { .. }
                | Op::ExpireTime { .. }
                | Op::GetRange { .. }
                | Op::GetBit(_)
                | Op::BitCount(_)
                | Op::BitPos { .. }
                | Op::Object(_)
                | Op::MemoryUsage
        )
    }

    /// Keys besides the one the op is applied to that it reads and may
    /// write (RENAME's and COPY's destination). Whoever runs the op holds
    /// them as it holds the op's own key, for writing when
    /// [`Op::is_write`], and gives the op a view that has them.
    pub fn other_keys(&self) -> &[Bytes] {
        match self {
            Op::Rename { to, .. } | Op::Copy { to, .. } => std::slice::from_ref(to),
            _ => &[],
        }
    }

    /// Runs the op on `key` against `view`.
    pub fn apply(&self, key: &[u8], view: &mut impl KeyView) -> OpReply {
        match self {
            Op::Get => strings::get(key, view),
            Op::Set {
                value,
                cond,
                expiry,
                reply,
            } => strings::set(key, view, value, *cond, *expiry, *reply),
            Op::GetEx(ttl) => strings::getex(key, view, *ttl),
            Op::GetDel => strings::getdel(key, view),
            Op::IncrBy(delta) => strings::incr(key, view, *delta),
            Op::IncrByFloat(by) => strings::incr_by_float(key, view, by),
            Op::Append(suffix) => strings::append(key, view, suffix),
            Op::Strlen => strings::strlen(key, view),
            Op::GetRange { start, end } => strings::getrange(key, view, *start, *end),
            Op::SetRange { offset, value } => strings::setrange(key, view, *offset, value),
            Op::GetBit(offset) => bits::getbit(key, view, *offset),
            Op::SetBit { offset, on } => bits::setbit(key, view, *offset, *on),
            Op::BitCount(range) => bits::bitcount(key, view, *range),
            Op::BitPos { bit, range } => bits::bitpos(key, view, *bit, *range),
            Op::Del => keys::del(key, view),
            Op::Exists => keys::exists(key, view),
            Op::Type => keys::type_of(key, view),
            Op::Ttl { millis } => keys::ttl(key, view, *millis),
            Op::ExpireTime { millis } => keys::expiretime(key, view, *millis),
            Op::ExpireAt(at) => keys::expire(key, view, *at, ExpireCond::default()),
            Op::ExpireAtIf { at, cond } => keys::expire(key, view, *at, *cond),
            Op::Persist => keys::persist(key, view),
            Op::Rename { to, nx } => keys::rename(key, view, to, *nx),
            Op::Copy { to, replace } => keys::copy(key, view, to, *replace),
            Op::Object(field) => keys::object(key, view, *field),
            Op::MemoryUsage => keys::memory_usage(key, view),
        }
    }
}

/// Parses a Redis integer: optional `-`, digits, no spaces or `+`, fits i64.
pub fn parse_i64(b: &[u8]) -> Option<i64> {
    if b.is_empty() || b.len() > 20 || b[0] == b'+' {
        return None;
    }
    if b.len() > 1 && (b[0] == b'0' || (b[0] == b'-' && b[1] == b'0')) {
        return None; // Redis rejects leading zeros and "-0".
    }
    std::str::from_utf8(b).ok()?.parse().ok()
}

/// A value with a TTL kept: what in-place edits (APPEND, SETRANGE, SETBIT,
/// INCR…) write back, as Redis keeps the key's expiry when it changes the
/// value.
fn keeping_ttl(old: Option<&Current>, value: Bytes) -> Option<Current> {
    Some(Current {
        value,
        expire_ms: old.and_then(|c| c.expire_ms),
    })
}

/// A map-backed view for the families' unit tests.
#[cfg(test)]
pub(crate) mod testing {
    use super::*;
    use std::collections::HashMap;

    /// Keys in a map, and a clock.
    #[derive(Default)]
    pub struct MapView(pub HashMap<Vec<u8>, Current>, pub u64);

    impl KeyView for MapView {
        fn read(&mut self, key: &[u8]) -> Option<Current> {
            self.0
                .get(key)
                .filter(|c| c.expire_ms.is_none_or(|at| at > self.1))
                .cloned()
        }
        fn write(&mut self, key: &[u8], state: Option<Current>) {
            match state {
                Some(c) => self.0.insert(key.to_vec(), c),
                None => self.0.remove(key),
            };
        }
        fn now_ms(&self) -> u64 {
            self.1
        }
    }

    impl MapView {
        /// Stores `value` under `key` with no TTL.
        pub fn put(&mut self, key: &str, value: &[u8]) {
            self.0.insert(
                key.as_bytes().to_vec(),
                Current {
                    value: Bytes::copy_from_slice(value),
                    expire_ms: None,
                },
            );
        }

        /// Runs `op` on `key`.
        pub fn run(&mut self, key: &str, op: Op) -> OpReply {
            op.apply(key.as_bytes(), self)
        }
    }

    /// A bulk reply.
    pub fn bulk(b: &[u8]) -> OpReply {
        OpReply::Bulk(Bytes::copy_from_slice(b))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_i64_follows_string2ll() {
        assert_eq!(parse_i64(b"007"), None);
        assert_eq!(parse_i64(b"-0"), None);
        assert_eq!(parse_i64(b"+1"), None);
        assert_eq!(parse_i64(b"-12"), Some(-12));
        assert_eq!(parse_i64(b"-9223372036854775808"), Some(i64::MIN));
        assert_eq!(parse_i64(b"9223372036854775808"), None);
    }

    #[test]
    fn every_reply_text_is_interned() {
        for t in REPLY_TEXTS {
            assert_eq!(intern(t), Some(*t));
        }
        assert_eq!(intern("ERR something else"), None);
    }

    #[test]
    fn only_rename_and_copy_reach_other_keys() {
        let to = Bytes::from_static(b"dst");
        let rename = Op::Rename {
            to: to.clone(),
            nx: false,
        };
        assert_eq!(rename.other_keys(), std::slice::from_ref(&to));
        assert!(rename.is_write());
        let copy = Op::Copy {
            to: to.clone(),
            replace: true,
        };
        assert_eq!(copy.other_keys(), &[to]);
        assert!(Op::Get.other_keys().is_empty());
        assert!(!Op::MemoryUsage.is_write());
    }
}

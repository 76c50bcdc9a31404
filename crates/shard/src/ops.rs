//! Per-key operations: the semantics of every data command, written once.
//!
//! An [`Op`] acts on one key through a [`KeyView`]. The same code runs on a
//! shard's table (lone commands, single-shard EXEC) and on a transaction's
//! buffered overlay (BEGIN…COMMIT, multi-shard EXEC), so a command behaves the
//! same whichever path it takes.

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
    /// GETDEL
    GetDel,
    /// DEL / UNLINK (one key; multi-key forms sum the replies)
    Del,
    /// EXISTS (one key)
    Exists,
    /// INCR / DECR / INCRBY / DECRBY
    IncrBy(i64),
    /// APPEND
    Append(Bytes),
    /// STRLEN
    Strlen,
    /// TYPE
    Type,
    /// TTL (seconds) or PTTL (milliseconds)
    Ttl {
        /// PTTL when true.
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

impl Op {
    /// True when the op may change the key (it needs a write hold and a
    /// commit timestamp).
    pub fn is_write(&self) -> bool {
        !matches!(
            self,
            Op::Get | Op::Exists | Op::Strlen | Op::Type | Op::Ttl { .. }
        )
    }

    /// Runs the op on `key` against `view`.
    pub fn apply(&self, key: &[u8], view: &mut impl KeyView) -> OpReply {
        match self {
            Op::Get => view
                .read(key)
                .map_or(OpReply::Nil, |c| OpReply::Bulk(c.value)),
            Op::Set {
                value,
                cond,
                expiry,
                reply,
            } => apply_set(key, view, value, *cond, *expiry, *reply),
            Op::GetDel => match view.read(key) {
                Some(c) => {
                    view.write(key, None);
                    OpReply::Bulk(c.value)
                }
                None => OpReply::Nil,
            },
            Op::Del => match view.read(key) {
                Some(_) => {
                    view.write(key, None);
                    OpReply::Int(1)
                }
                None => OpReply::Int(0),
            },
            Op::Exists => OpReply::Int(view.read(key).is_some() as i64),
            Op::IncrBy(delta) => apply_incr(key, view, *delta),
            Op::Append(suffix) => {
                let (mut v, expire_ms) = match view.read(key) {
                    Some(c) => (c.value.to_vec(), c.expire_ms),
                    None => (Vec::new(), None),
                };
                if v.len() + suffix.len() > MAX_STRING {
                    return OpReply::Error(ERR_TOO_BIG);
                }
                v.extend_from_slice(suffix);
                let len = v.len() as i64;
                view.write(
                    key,
                    Some(Current {
                        value: v.into(),
                        expire_ms,
                    }),
                );
                OpReply::Int(len)
            }
            Op::Strlen => OpReply::Int(view.read(key).map_or(0, |c| c.value.len() as i64)),
            Op::Type => OpReply::Status(if view.read(key).is_some() {
                "string"
            } else {
                "none"
            }),
            Op::Ttl { millis } => match view.read(key) {
                None => OpReply::Int(-2),
                Some(Current {
                    expire_ms: None, ..
                }) => OpReply::Int(-1),
                Some(Current {
                    expire_ms: Some(at),
                    ..
                }) => {
                    let left = at.saturating_sub(view.now_ms());
                    // TTL rounds to the nearest second, as Redis does.
                    OpReply::Int(if *millis { left } else { (left + 500) / 1000 } as i64)
                }
            },
            Op::ExpireAt(at) => apply_expire(key, view, *at, ExpireCond::default()),
            Op::ExpireAtIf { at, cond } => apply_expire(key, view, *at, *cond),
            Op::Persist => match view.read(key) {
                Some(Current {
                    value,
                    expire_ms: Some(_),
                }) => {
                    view.write(
                        key,
                        Some(Current {
                            value,
                            expire_ms: None,
                        }),
                    );
                    OpReply::Int(1)
                }
                _ => OpReply::Int(0),
            },
        }
    }
}

fn apply_set(
    key: &[u8],
    view: &mut impl KeyView,
    value: &Bytes,
    cond: SetCond,
    expiry: Expiry,
    reply: SetReply,
) -> OpReply {
    // A plain SET needs nothing from the old state: skip the read (and its
    // copy of the old value).
    let blind = cond == SetCond::Always && reply == SetReply::Ok && expiry != Expiry::Keep;
    let old = if blind { None } else { view.read(key) };
    let allowed = match cond {
        SetCond::Always => true,
        SetCond::IfAbsent => old.is_none(),
        SetCond::IfPresent => old.is_some(),
    };
    let answer = match reply {
        SetReply::Ok if allowed => OpReply::Ok,
        SetReply::Ok => OpReply::Nil,
        SetReply::Old => old
            .as_ref()
            .map_or(OpReply::Nil, |c| OpReply::Bulk(c.value.clone())),
        SetReply::Flag => OpReply::Int(allowed as i64),
    };
    if allowed {
        let expire_ms = match expiry {
            Expiry::Clear => None,
            Expiry::Keep => old.and_then(|c| c.expire_ms),
            Expiry::At(at) => Some(at),
        };
        if matches!(expire_ms, Some(at) if at <= view.now_ms()) {
            // Redis treats an already-past expiry as set-then-expired.
            view.write(key, None);
        } else {
            view.write(
                key,
                Some(Current {
                    value: value.clone(),
                    expire_ms,
                }),
            );
        }
    }
    answer
}

fn apply_expire(key: &[u8], view: &mut impl KeyView, at: u64, cond: ExpireCond) -> OpReply {
    let Some(c) = view.read(key) else {
        return OpReply::Int(0);
    };
    if !cond.allows(at, c.expire_ms) {
        return OpReply::Int(0);
    }
    if at <= view.now_ms() {
        view.write(key, None);
    } else {
        view.write(
            key,
            Some(Current {
                value: c.value,
                expire_ms: Some(at),
            }),
        );
    }
    OpReply::Int(1)
}

fn apply_incr(key: &[u8], view: &mut impl KeyView, delta: i64) -> OpReply {
    let (current, expire_ms) = match view.read(key) {
        None => (0, None),
        Some(c) => match parse_i64(&c.value) {
            Some(n) => (n, c.expire_ms),
            None => return OpReply::Error(ERR_NOT_INTEGER),
        },
    };
    let Some(next) = current.checked_add(delta) else {
        return OpReply::Error(ERR_OVERFLOW);
    };
    view.write(
        key,
        Some(Current {
            value: Bytes::from(next.to_string()),
            expire_ms,
        }),
    );
    OpReply::Int(next)
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    #[derive(Default)]
    struct MapView(HashMap<Vec<u8>, Current>, u64);
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

    fn set(v: &str, cond: SetCond, reply: SetReply) -> Op {
        Op::Set {
            value: Bytes::copy_from_slice(v.as_bytes()),
            cond,
            expiry: Expiry::Clear,
            reply,
        }
    }

    #[test]
    fn set_conditions_and_replies() {
        let mut v = MapView::default();
        assert_eq!(
            set("a", SetCond::IfPresent, SetReply::Ok).apply(b"k", &mut v),
            OpReply::Nil
        );
        assert_eq!(
            set("a", SetCond::IfAbsent, SetReply::Flag).apply(b"k", &mut v),
            OpReply::Int(1)
        );
        assert_eq!(
            set("b", SetCond::IfAbsent, SetReply::Flag).apply(b"k", &mut v),
            OpReply::Int(0)
        );
        assert_eq!(
            set("c", SetCond::Always, SetReply::Old).apply(b"k", &mut v),
            OpReply::Bulk("a".into())
        );
        assert_eq!(Op::Get.apply(b"k", &mut v), OpReply::Bulk("c".into()));
    }

    #[test]
    fn incr_parses_like_redis() {
        let mut v = MapView::default();
        assert_eq!(Op::IncrBy(5).apply(b"n", &mut v), OpReply::Int(5));
        assert_eq!(Op::IncrBy(-7).apply(b"n", &mut v), OpReply::Int(-2));
        set(" 1", SetCond::Always, SetReply::Ok).apply(b"s", &mut v);
        assert_eq!(
            Op::IncrBy(1).apply(b"s", &mut v),
            OpReply::Error(ERR_NOT_INTEGER)
        );
        set(&i64::MAX.to_string(), SetCond::Always, SetReply::Ok).apply(b"m", &mut v);
        assert_eq!(
            Op::IncrBy(1).apply(b"m", &mut v),
            OpReply::Error(ERR_OVERFLOW)
        );
        assert_eq!(parse_i64(b"007"), None);
        assert_eq!(parse_i64(b"-0"), None);
        assert_eq!(parse_i64(b"-12"), Some(-12));
    }

    #[test]
    fn ttl_lifecycle() {
        let mut v = MapView(HashMap::new(), 1_000);
        assert_eq!(
            Op::Ttl { millis: false }.apply(b"k", &mut v),
            OpReply::Int(-2)
        );
        set("x", SetCond::Always, SetReply::Ok).apply(b"k", &mut v);
        assert_eq!(
            Op::Ttl { millis: false }.apply(b"k", &mut v),
            OpReply::Int(-1)
        );
        assert_eq!(Op::ExpireAt(3_500).apply(b"k", &mut v), OpReply::Int(1));
        assert_eq!(
            Op::Ttl { millis: false }.apply(b"k", &mut v),
            OpReply::Int(3)
        );
        assert_eq!(
            Op::Ttl { millis: true }.apply(b"k", &mut v),
            OpReply::Int(2_500)
        );
        assert_eq!(Op::Append("y".into()).apply(b"k", &mut v), OpReply::Int(2));
        assert_eq!(
            Op::Ttl { millis: true }.apply(b"k", &mut v),
            OpReply::Int(2_500),
            "APPEND keeps the TTL"
        );
        v.1 = 3_500;
        assert_eq!(Op::Get.apply(b"k", &mut v), OpReply::Nil);
    }

    #[test]
    fn ttl_rounds_to_the_nearest_second() {
        let mut v = MapView(HashMap::new(), 0);
        let ttl = |v: &mut MapView| Op::Ttl { millis: false }.apply(b"k", v);
        set("x", SetCond::Always, SetReply::Ok).apply(b"k", &mut v);
        for (left, want) in [
            (100_400, 100),
            (100_500, 101),
            (100_499, 100),
            (499, 0),
            (1, 0),
        ] {
            Op::ExpireAt(left).apply(b"k", &mut v);
            assert_eq!(ttl(&mut v), OpReply::Int(want), "{left} ms left");
        }
    }

    #[test]
    fn expire_options_follow_redis() {
        let mut v = MapView(HashMap::new(), 1_000);
        let nx = ExpireCond {
            nx: true,
            ..Default::default()
        };
        let xx = ExpireCond {
            xx: true,
            ..Default::default()
        };
        let gt = ExpireCond {
            gt: true,
            ..Default::default()
        };
        let lt = ExpireCond {
            lt: true,
            ..Default::default()
        };
        let xx_lt = ExpireCond { xx: true, ..lt };
        let exp = |at, cond| Op::ExpireAtIf { at, cond };
        let pttl = |v: &mut MapView| Op::Ttl { millis: true }.apply(b"k", v);
        assert_eq!(
            exp(5_000, nx).apply(b"k", &mut v),
            OpReply::Int(0),
            "no key"
        );
        set("x", SetCond::Always, SetReply::Ok).apply(b"k", &mut v);
        assert_eq!(exp(5_000, xx).apply(b"k", &mut v), OpReply::Int(0));
        assert_eq!(exp(5_000, xx_lt).apply(b"k", &mut v), OpReply::Int(0));
        assert_eq!(
            exp(5_000, gt).apply(b"k", &mut v),
            OpReply::Int(0),
            "no TTL is infinite: GT fails"
        );
        assert_eq!(
            exp(9_000, lt).apply(b"k", &mut v),
            OpReply::Int(1),
            "no TTL is infinite: LT passes"
        );
        assert_eq!(pttl(&mut v), OpReply::Int(8_000));
        assert_eq!(exp(5_000, nx).apply(b"k", &mut v), OpReply::Int(0));
        assert_eq!(exp(9_000, gt).apply(b"k", &mut v), OpReply::Int(0), "equal");
        assert_eq!(exp(9_500, gt).apply(b"k", &mut v), OpReply::Int(1));
        assert_eq!(exp(9_500, lt).apply(b"k", &mut v), OpReply::Int(0), "equal");
        assert_eq!(exp(7_000, xx_lt).apply(b"k", &mut v), OpReply::Int(1));
        assert_eq!(pttl(&mut v), OpReply::Int(6_000));
        assert_eq!(
            exp(0, lt).apply(b"k", &mut v),
            OpReply::Int(1),
            "a past time allowed by LT deletes"
        );
        assert_eq!(Op::Exists.apply(b"k", &mut v), OpReply::Int(0));
    }
}

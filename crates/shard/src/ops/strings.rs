//! String commands (Redis's `t_string.c`): GET, SET and its variants,
//! GETEX, GETDEL, the INCR family, INCRBYFLOAT, APPEND, STRLEN, GETRANGE,
//! SETRANGE.

use bytes::Bytes;
use elsa_lattice::{Counter, Crdt, KeyState, Kind, Version};

use super::longdouble::{self, FloatError};
use super::{
    keeping_ttl, notify, read_string, Current, Expiry, GetExTtl, KeyView, OpReply, SetCond,
    SetReply, Value, ERR_NAN, ERR_NOT_FLOAT, ERR_TOO_BIG, MAX_STRING, WRONGTYPE,
};
use crate::notify::{GENERIC, STRING};

pub(super) fn get(key: &[u8], view: &mut impl KeyView) -> OpReply {
    read_string!(view, key).map_or(OpReply::Nil, |c| OpReply::Bulk(c.value))
}

pub(super) fn set(
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
    // SET replaces a key of any type; only SET … GET needs a string.
    let (exists, old) = if blind {
        (false, None)
    } else {
        let now = view.now_ms();
        match view.live(key) {
            None => (false, None),
            Some(Value::Str(c)) => (true, Some(c)),
            Some(Value::Typed(s)) if s.kind(now) == Kind::String => (
                true,
                s.visible_string(now).map(|value| Current {
                    value,
                    expire_ms: s.string.expire_ms(),
                    ttl_of: None,
                }),
            ),
            Some(Value::Typed(_)) if reply == SetReply::Old => return OpReply::Error(WRONGTYPE),
            // Another type: KEEPTTL keeps its expiry.
            Some(Value::Typed(s)) => (
                true,
                Some(Current {
                    value: Bytes::new(),
                    expire_ms: s.expire_ms(now),
                    ttl_of: None,
                }),
            ),
        }
    };
    let allowed = match cond {
        SetCond::Always => true,
        SetCond::IfAbsent => !exists,
        SetCond::IfPresent => exists,
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
        // An expiry already past stores the value expired, as Redis sets
        // the key and then expires it: it reads as absent, and the key
        // counts as written (a WATCH on it fails) even if it was absent.
        view.write(
            key,
            Some(Current {
                value: value.clone(),
                expire_ms,
                ttl_of: None,
            }),
        );
        notify(view, STRING, "set", key);
        if matches!(expiry, Expiry::At(_)) {
            notify(view, GENERIC, "expire", key);
        }
    }
    answer
}

/// GETEX: the value, then the TTL change. Redis checks the time only once
/// it found the key, so a refused time answers nil for a missing key.
pub(super) fn getex(key: &[u8], view: &mut impl KeyView, ttl: GetExTtl) -> OpReply {
    let Some(c) = read_string!(view, key) else {
        return OpReply::Nil;
    };
    match ttl {
        GetExTtl::Refused(e) => return OpReply::Error(e),
        GetExTtl::Keep => {}
        // Only a key that has a TTL changes (Redis's removeExpire); a
        // change of the TTL alone (`keys::set_expiry`).
        GetExTtl::Persist if c.expire_ms.is_some() => {
            super::keys::set_expiry(key, view, None);
            notify(view, GENERIC, "persist", key);
        }
        GetExTtl::Persist => {}
        // A time already past deletes the key (Redis's GETEX deletes it).
        GetExTtl::At(at) if at <= view.now_ms() => {
            view.write(key, None);
            notify(view, GENERIC, "del", key);
        }
        GetExTtl::At(at) => {
            super::keys::set_expiry(key, view, Some(at));
            notify(view, GENERIC, "expire", key);
        }
    }
    OpReply::Bulk(c.value)
}

pub(super) fn getdel(key: &[u8], view: &mut impl KeyView) -> OpReply {
    match read_string!(view, key) {
        Some(c) => {
            view.write(key, None);
            notify(view, GENERIC, "del", key);
            OpReply::Bulk(c.value)
        }
        None => OpReply::Nil,
    }
}

/// INCR and its family: a counter delta — this node's running total of
/// increments — so increments made concurrently in several regions all
/// count (`docs/datatypes.md`); the TTL stays.
pub(super) fn incr(key: &[u8], view: &mut impl KeyView, delta: i64) -> OpReply {
    let now = view.now_ms();
    let counter = match view.lookup(key) {
        None => Counter::default(),
        // A plain string: its value is the base the increments add to.
        Some(Value::Str(c)) => Counter::default().set(Some(c.value), c.expire_ms, 0, Version::ZERO),
        Some(Value::Typed(s)) => match s.kind(now) {
            Kind::String => (*s.string).clone(),
            // A string hidden behind a newer, emptied collection is not
            // the key's value: count from zero (as after a DEL).
            Kind::None if s.string.value(now).is_some() => {
                let mut c = (*s.string).clone();
                c.merge(s.string.set(None, None, 0, Version::ZERO));
                c
            }
            Kind::None => (*s.string).clone(),
            _ => return OpReply::Error(WRONGTYPE),
        },
    };
    let (start_ts, version) = view.stamp();
    match counter.incr_by(delta, start_ts, version, now) {
        Ok((next, d)) => {
            view.merge(key, KeyState::of_string(d));
            notify(view, STRING, "incrby", key);
            OpReply::Int(next)
        }
        Err(e) => OpReply::Error(e),
    }
}

/// INCRBYFLOAT, in x87 extended precision and printed as Redis prints it
/// (see [`longdouble`]); the TTL stays.
pub(super) fn incr_by_float(key: &[u8], view: &mut impl KeyView, by: &[u8]) -> OpReply {
    let old = read_string!(view, key);
    let value = old.as_ref().map_or(&b"0"[..], |c| &c.value[..]);
    match longdouble::incr_by_float(value, by) {
        Ok(text) => {
            let text = Bytes::from(text);
            view.write(key, keeping_ttl(old.as_ref(), text.clone()));
            notify(view, STRING, "incrbyfloat", key);
            OpReply::Bulk(text)
        }
        Err(FloatError::NotFloat) => OpReply::Error(ERR_NOT_FLOAT),
        Err(FloatError::NanOrInfinity) => OpReply::Error(ERR_NAN),
    }
}

pub(super) fn append(key: &[u8], view: &mut impl KeyView, suffix: &[u8]) -> OpReply {
    let old = read_string!(view, key);
    let mut v = old.as_ref().map_or_else(Vec::new, |c| c.value.to_vec());
    if v.len() + suffix.len() > MAX_STRING {
        return OpReply::Error(ERR_TOO_BIG);
    }
    v.extend_from_slice(suffix);
    let len = v.len() as i64;
    view.write(key, keeping_ttl(old.as_ref(), v.into()));
    notify(view, STRING, "append", key);
    OpReply::Int(len)
}

pub(super) fn strlen(key: &[u8], view: &mut impl KeyView) -> OpReply {
    OpReply::Int(read_string!(view, key).map_or(0, |c| c.value.len() as i64))
}

/// GETRANGE / SUBSTR: Redis's index arithmetic, quirks included (both
/// ends negative and reversed is empty before anything is clamped).
pub(super) fn getrange(key: &[u8], view: &mut impl KeyView, start: i64, end: i64) -> OpReply {
    let Some(c) = read_string!(view, key) else {
        return OpReply::Bulk(Bytes::new());
    };
    match byte_range(c.value.len(), start, end) {
        Some((from, to)) => OpReply::Bulk(c.value.slice(from..=to)),
        None => OpReply::Bulk(Bytes::new()),
    }
}

/// The inclusive byte range `start..=end` of a string of `len` bytes, as
/// Redis resolves GETRANGE's indexes; `None` when it is empty.
fn byte_range(len: usize, start: i64, end: i64) -> Option<(usize, usize)> {
    if start < 0 && end < 0 && start > end {
        return None;
    }
    let len = len as i64;
    let start = if start < 0 { len + start } else { start }.max(0);
    let end = if end < 0 { len + end } else { end }.max(0).min(len - 1);
    (start <= end && len > 0).then_some((start as usize, end as usize))
}

/// SETRANGE: writes `value` at `offset`, padding with zero bytes. An empty
/// value changes nothing (a missing key stays missing); the TTL stays.
pub(super) fn setrange(key: &[u8], view: &mut impl KeyView, offset: u64, value: &[u8]) -> OpReply {
    let old = read_string!(view, key);
    let old_len = old.as_ref().map_or(0, |c| c.value.len());
    if value.is_empty() {
        return OpReply::Int(old_len as i64);
    }
    let end = offset.saturating_add(value.len() as u64);
    if end > MAX_STRING as u64 {
        return OpReply::Error(ERR_TOO_BIG);
    }
    let end = end as usize;
    let mut v = old.as_ref().map_or_else(Vec::new, |c| c.value.to_vec());
    if v.len() < end {
        v.resize(end, 0);
    }
    v[offset as usize..end].copy_from_slice(value);
    let len = v.len() as i64;
    view.write(key, keeping_ttl(old.as_ref(), v.into()));
    notify(view, STRING, "setrange", key);
    OpReply::Int(len)
}

#[cfg(test)]
mod tests {
    use super::super::testing::{bulk, MapView};
    use super::super::{Op, ERR_GETEX_EXPIRE};
    use super::super::{ERR_NOT_INTEGER, ERR_OVERFLOW};
    use super::*;

    fn set_op(v: &str, cond: SetCond, reply: SetReply) -> Op {
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
            v.run("k", set_op("a", SetCond::IfPresent, SetReply::Ok)),
            OpReply::Nil
        );
        assert_eq!(
            v.run("k", set_op("a", SetCond::IfAbsent, SetReply::Flag)),
            OpReply::Int(1)
        );
        assert_eq!(
            v.run("k", set_op("b", SetCond::IfAbsent, SetReply::Flag)),
            OpReply::Int(0)
        );
        assert_eq!(
            v.run("k", set_op("c", SetCond::Always, SetReply::Old)),
            bulk(b"a")
        );
        assert_eq!(v.run("k", Op::Get), bulk(b"c"));
    }

    #[test]
    fn incr_parses_like_redis() {
        let mut v = MapView::default();
        assert_eq!(v.run("n", Op::IncrBy(5)), OpReply::Int(5));
        assert_eq!(v.run("n", Op::IncrBy(-7)), OpReply::Int(-2));
        v.put("s", b" 1");
        assert_eq!(v.run("s", Op::IncrBy(1)), OpReply::Error(ERR_NOT_INTEGER));
        v.put("m", i64::MAX.to_string().as_bytes());
        assert_eq!(v.run("m", Op::IncrBy(1)), OpReply::Error(ERR_OVERFLOW));
    }

    #[test]
    fn getex_reads_then_changes_the_ttl() {
        let mut v = MapView(Default::default(), 1_000);
        assert_eq!(
            v.run("k", Op::GetEx(GetExTtl::Refused(ERR_GETEX_EXPIRE))),
            OpReply::Nil,
            "a missing key answers nil before the time is looked at"
        );
        v.put("k", b"v");
        assert_eq!(
            v.run("k", Op::GetEx(GetExTtl::Refused(ERR_GETEX_EXPIRE))),
            OpReply::Error(ERR_GETEX_EXPIRE)
        );
        assert_eq!(v.run("k", Op::GetEx(GetExTtl::At(5_000))), bulk(b"v"));
        assert_eq!(v.run("k", Op::Ttl { millis: true }), OpReply::Int(4_000));
        assert_eq!(v.run("k", Op::GetEx(GetExTtl::Keep)), bulk(b"v"));
        assert_eq!(v.run("k", Op::GetEx(GetExTtl::Persist)), bulk(b"v"));
        assert_eq!(v.run("k", Op::Ttl { millis: true }), OpReply::Int(-1));
        assert_eq!(
            v.run("k", Op::GetEx(GetExTtl::At(999))),
            bulk(b"v"),
            "a past time answers the value, then deletes"
        );
        assert_eq!(v.run("k", Op::Exists), OpReply::Int(0));
    }

    #[test]
    fn incrbyfloat_keeps_the_ttl_and_refuses_like_redis() {
        let mut v = MapView(Default::default(), 1_000);
        assert_eq!(
            v.run("f", Op::IncrByFloat(Bytes::from_static(b"0.1"))),
            bulk(b"0.1")
        );
        v.run("f", Op::ExpireAt(9_000));
        assert_eq!(
            v.run("f", Op::IncrByFloat(Bytes::from_static(b"10.4"))),
            bulk(b"10.5")
        );
        assert_eq!(v.run("f", Op::Ttl { millis: true }), OpReply::Int(8_000));
        assert_eq!(
            v.run("f", Op::IncrByFloat(Bytes::from_static(b"x"))),
            OpReply::Error(ERR_NOT_FLOAT)
        );
        assert_eq!(
            v.run("f", Op::IncrByFloat(Bytes::from_static(b"inf"))),
            OpReply::Error(ERR_NAN)
        );
        assert_eq!(
            v.run("f", Op::Get),
            bulk(b"10.5"),
            "a refusal writes nothing"
        );
    }

    #[test]
    fn getrange_resolves_indexes_like_redis() {
        let mut v = MapView::default();
        v.put("s", b"This is a string");
        for (start, end, want) in [
            (0, 3, &b"This"[..]),
            (-3, -1, b"ing"),
            (0, -1, b"This is a string"),
            (10, 100, b"string"),
            (5, 3, b""),
            (-1, -5, b""),
            (-100, 2, b"Thi"),
            (i64::MIN, i64::MAX, b"This is a string"),
            (100, 200, b""),
        ] {
            assert_eq!(
                v.run("s", Op::GetRange { start, end }),
                bulk(want),
                "{start} {end}"
            );
        }
        v.put("e", b"");
        assert_eq!(v.run("e", Op::GetRange { start: 0, end: -1 }), bulk(b""));
        assert_eq!(
            v.run("missing", Op::GetRange { start: 0, end: -1 }),
            bulk(b""),
            "a missing key is an empty string, not nil"
        );
    }

    proptest::proptest! {
        /// Any indexes: a slice of the value (possibly empty), never a panic.
        #[test]
        fn any_getrange_is_a_slice(
            value in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..12),
            start in proptest::prelude::any::<i64>(),
            end in proptest::prelude::any::<i64>(),
        ) {
            let mut v = MapView::default();
            v.put("k", &value);
            let OpReply::Bulk(got) = v.run("k", Op::GetRange { start, end }) else {
                panic!("not a bulk");
            };
            proptest::prop_assert!(got.is_empty() || value.windows(got.len()).any(|w| w == &got[..]));
        }

        /// Any float text either way: an answer or Redis's error, never a panic.
        #[test]
        fn any_incrbyfloat_answers(
            value in "[-+0-9.eExXpPinfINFa ]{0,12}",
            by in "[-+0-9.eExXpPinfINFa ]{0,12}",
        ) {
            let mut v = MapView::default();
            v.put("k", value.as_bytes());
            let r = v.run("k", Op::IncrByFloat(Bytes::from(by)));
            proptest::prop_assert!(matches!(
                r,
                OpReply::Bulk(_) | OpReply::Error(ERR_NOT_FLOAT) | OpReply::Error(ERR_NAN)
            ));
        }
    }

    #[test]
    fn setrange_pads_with_zeros_and_keeps_the_ttl() {
        let mut v = MapView(Default::default(), 1_000);
        let sr = |offset, value: &'static [u8]| Op::SetRange {
            offset,
            value: Bytes::from_static(value),
        };
        assert_eq!(v.run("k", sr(3, b"")), OpReply::Int(0));
        assert_eq!(v.run("k", Op::Exists), OpReply::Int(0), "nothing created");
        assert_eq!(v.run("k", sr(2, b"ab")), OpReply::Int(4));
        assert_eq!(v.run("k", Op::Get), bulk(b"\0\0ab"));
        v.run("k", Op::ExpireAt(5_000));
        assert_eq!(v.run("k", sr(0, b"xyz")), OpReply::Int(4));
        assert_eq!(v.run("k", Op::Get), bulk(b"xyzb"));
        assert_eq!(v.run("k", Op::Ttl { millis: true }), OpReply::Int(4_000));
        assert_eq!(v.run("k", sr(100, b"")), OpReply::Int(4));
        assert_eq!(
            v.run("k", sr(MAX_STRING as u64, b"x")),
            OpReply::Error(ERR_TOO_BIG)
        );
        assert_eq!(
            v.run("k", sr(u64::MAX, b"x")),
            OpReply::Error(ERR_TOO_BIG),
            "no overflow"
        );
    }
}

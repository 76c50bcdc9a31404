//! Generic key commands (Redis's `db.c`, `expire.c`, `object.c`): DEL,
//! EXISTS, TYPE, the TTL and EXPIRE families, PERSIST, RENAME, COPY,
//! OBJECT and MEMORY USAGE.

use bytes::Bytes;

use elsa_lattice::{Collection, KeyState, Kind, Ttl};

use crate::notify::GENERIC;

use super::{
    notify, parse_i64, Current, ExpireCond, KeyView, ObjectField, OpReply, Value, ERR_LFU_NO_IDLE,
    ERR_NO_LFU, ERR_NO_SUCH_KEY,
};

pub(super) fn del(key: &[u8], view: &mut impl KeyView) -> OpReply {
    match view.live(key) {
        Some(_) => {
            view.store(key, None);
            notify(view, GENERIC, "del", key);
            OpReply::Int(1)
        }
        None => OpReply::Int(0),
    }
}

pub(super) fn exists(key: &[u8], view: &mut impl KeyView) -> OpReply {
    OpReply::Int((view.kind(key) != Kind::None) as i64)
}

pub(super) fn type_of(key: &[u8], view: &mut impl KeyView) -> OpReply {
    OpReply::Status(view.kind(key).name())
}

/// The expiry of `key` if it shows a value: `None` when absent, `Some(None)`
/// when it persists.
fn expiry(key: &[u8], view: &mut impl KeyView) -> Option<Option<u64>> {
    let now = view.now_ms();
    match view.live(key)? {
        Value::Str(c) => Some(c.expire_ms),
        Value::Typed(s) => Some(s.expire_ms(now)),
    }
}

/// Gives the live `key` the expiry `at` (`None` persists it), whatever its
/// type: a string is written again with it, a collection's expiry changes
/// alone (a delta: its elements are not rewritten).
pub(super) fn set_expiry(key: &[u8], view: &mut impl KeyView, at: Option<u64>) {
    let now = view.now_ms();
    match view.live(key) {
        None => {}
        Some(Value::Str(c)) => {
            // A change of the TTL alone: a concurrent write of the value
            // elsewhere wins over it (issue 41, defect 15).
            let ttl_of = c.ttl_of.or_else(|| view.value_version(key));
            view.write(
                key,
                Some(Current {
                    value: c.value,
                    expire_ms: at,
                    ttl_of,
                }),
            )
        }
        Some(Value::Typed(s)) if s.kind(now) == Kind::String => {
            // The same for a counter: its base's TTL alone changes.
            let (start_ts, version) = view.stamp();
            let delta = s.string.retime(at, start_ts, version);
            drop(s);
            view.merge(key, KeyState::of_string(delta));
        }
        Some(Value::Typed(s)) => {
            // The expiry is the shown collection's (`Ttl`).
            let kind = s.kind(now);
            drop(s);
            let (_, version) = view.stamp();
            view.merge(key, KeyState::of_ttl(Ttl::on(kind, at, version)));
        }
    }
}

/// TTL / PTTL: -2 missing, -1 no TTL, else the time left.
pub(super) fn ttl(key: &[u8], view: &mut impl KeyView, millis: bool) -> OpReply {
    match expiry(key, view) {
        None => OpReply::Int(-2),
        Some(None) => OpReply::Int(-1),
        Some(Some(at)) => {
            let left = at.saturating_sub(view.now_ms());
            // TTL rounds to the nearest second, as Redis does.
            OpReply::Int(if millis { left } else { (left + 500) / 1000 } as i64)
        }
    }
}

/// EXPIRETIME / PEXPIRETIME: -2 missing, -1 no TTL, else the absolute
/// expiry — in seconds rounded to the nearest, as Redis rounds it.
pub(super) fn expiretime(key: &[u8], view: &mut impl KeyView, millis: bool) -> OpReply {
    match expiry(key, view) {
        None => OpReply::Int(-2),
        Some(None) => OpReply::Int(-1),
        Some(Some(at)) => OpReply::Int(if millis { at } else { (at + 500) / 1000 } as i64),
    }
}

pub(super) fn expire(key: &[u8], view: &mut impl KeyView, at: u64, cond: ExpireCond) -> OpReply {
    let Some(current) = expiry(key, view) else {
        return OpReply::Int(0);
    };
    if !cond.allows(at, current) {
        return OpReply::Int(0);
    }
    if at <= view.now_ms() {
        view.store(key, None);
        notify(view, GENERIC, "del", key);
    } else {
        set_expiry(key, view, Some(at));
        notify(view, GENERIC, "expire", key);
    }
    OpReply::Int(1)
}

pub(super) fn persist(key: &[u8], view: &mut impl KeyView) -> OpReply {
    match expiry(key, view) {
        Some(Some(_)) => {
            set_expiry(key, view, None);
            notify(view, GENERIC, "persist", key);
            OpReply::Int(1)
        }
        _ => OpReply::Int(0),
    }
}

/// RENAME / RENAMENX: the value moves to `to` with its TTL, and `key` is
/// deleted — in one step of whatever runs it, so nobody sees the key gone
/// and `to` not yet written. Renaming a key to itself changes nothing.
pub(super) fn rename(key: &[u8], view: &mut impl KeyView, to: &[u8], nx: bool) -> OpReply {
    let done = if nx { OpReply::Int(1) } else { OpReply::Ok };
    let Some(v) = view.live(key) else {
        return OpReply::Error(ERR_NO_SUCH_KEY);
    };
    if key == to {
        return if nx { OpReply::Int(0) } else { OpReply::Ok };
    }
    if nx && view.kind(to) != Kind::None {
        return OpReply::Int(0);
    }
    let replaced = replaces(view, to);
    view.store(to, Some(written_anew(v)));
    view.store(key, None);
    if replaced {
        view.notify(crate::notify::NEW, "new", to);
    }
    // MOVE is a RENAMENX into another database.
    let (from, into) = if crate::db::db_of(key) == crate::db::db_of(to) {
        ("rename_from", "rename_to")
    } else {
        ("move_from", "move_to")
    };
    notify(view, GENERIC, from, key);
    notify(view, GENERIC, into, to);
    done
}

/// True when `new` events are on and `to` exists: Redis deletes it and
/// adds the moved or copied key anew, so `new` is raised all the same
/// (a write over an absent key raises it by itself).
fn replaces(view: &mut impl KeyView, to: &[u8]) -> bool {
    view.notifies(crate::notify::NEW) && view.kind(to) != Kind::None
}

/// A value moved or copied to another key: a write of that key's value,
/// never a change of a TTL alone (`Current::ttl_of`).
fn written_anew(v: Value) -> Value {
    match v {
        Value::Str(c) => Value::Str(Current { ttl_of: None, ..c }),
        typed => typed,
    }
}

/// COPY: `to` gets the value and its TTL unless it exists (REPLACE
/// overwrites it). 1 when copied.
pub(super) fn copy(key: &[u8], view: &mut impl KeyView, to: &[u8], replace: bool) -> OpReply {
    let Some(v) = view.live(key) else {
        return OpReply::Int(0);
    };
    if !replace && view.kind(to) != Kind::None {
        return OpReply::Int(0);
    }
    let replaced = replaces(view, to);
    view.store(to, Some(written_anew(v)));
    if replaced {
        view.notify(crate::notify::NEW, "new", to);
    }
    notify(view, GENERIC, "copy_to", to);
    OpReply::Int(1)
}

/// Redis's encoding for a string value as SET stores it
/// (`tryObjectEncoding`): `int` for what reads as a 64-bit integer,
/// `embstr` up to 44 bytes, else `raw`. Redis leaves some values it built
/// in place (APPEND, SETRANGE…) `raw` whatever they hold; Elsa does not
/// remember how a value was made, so it answers what SET would give.
pub fn encoding(value: &[u8]) -> &'static str {
    if parse_i64(value).is_some() {
        "int"
    } else if value.len() <= 44 {
        "embstr"
    } else {
        "raw"
    }
}

/// The reference count Redis reports: small non-negative integers are
/// shared objects (OBJ_SHARED_INTEGERS, refcount INT_MAX), others have 1.
fn refcount(value: &[u8]) -> i64 {
    match parse_i64(value) {
        Some(n) if (0..10_000).contains(&n) => i64::from(i32::MAX),
        _ => 1,
    }
}

/// The encoding Redis 7.0 gives a collection with this history: small
/// ones packed (`listpack`; `intset` for a set of integers), and for good
/// once they outgrew it (the thresholds are Redis's built-in defaults).
fn collection_encoding(c: &Collection) -> &'static str {
    match c {
        Collection::Hash(m) if super::hashes::packed(m) => "listpack",
        Collection::Hash(_) => "hashtable",
        Collection::ZSet(z) if super::zsets::packed(z) => "listpack",
        Collection::ZSet(_) => "skiplist",
        // Redis 7.0 keeps every list as a quicklist (7.2 packs small ones).
        Collection::List(_) => "quicklist",
        Collection::Set(s) if super::sets::intset(s) => "intset",
        Collection::Set(_) => "hashtable",
        Collection::Stream(_) => "stream",
    }
}

pub(super) fn object(key: &[u8], view: &mut impl KeyView, field: ObjectField) -> OpReply {
    let now = view.now_ms();
    let Some(v) = view.live(key) else {
        return OpReply::Nil;
    };
    let string = match &v {
        Value::Str(c) => Some(c.value.clone()),
        Value::Typed(s) => s.visible_string(now),
    };
    match field {
        ObjectField::Encoding => {
            let name = match (&string, &v) {
                (Some(value), _) => encoding(value),
                (None, Value::Typed(s)) => {
                    s.visible_collection(now).map_or("raw", collection_encoding)
                }
                (None, Value::Str(_)) => "raw",
            };
            OpReply::Bulk(Bytes::from_static(name.as_bytes()))
        }
        ObjectField::Refcount => OpReply::Int(string.as_deref().map_or(1, refcount)),
        // Redis answers from the key's clock, and refuses the figure the
        // policy does not keep (an LFU clock holds no idle time).
        ObjectField::IdleTime => match view.access(key) {
            Some((_, clock)) if clock.lfu => OpReply::Error(ERR_LFU_NO_IDLE),
            Some((a, clock)) => OpReply::Int((clock.idle_ms(a) / 1000) as i64),
            None => OpReply::Int(0),
        },
        ObjectField::Freq => match view.access(key) {
            Some((a, clock)) if clock.lfu => OpReply::Int(i64::from(clock.freq(a))),
            _ => OpReply::Error(ERR_NO_LFU),
        },
    }
}

/// MEMORY USAGE: what the key's record costs in the table (see
/// [`crate::record::footprint`]), and a typed state's elements.
pub(super) fn memory_usage(key: &[u8], view: &mut impl KeyView) -> OpReply {
    match view.live(key) {
        None => OpReply::Nil,
        Some(Value::Str(c)) => {
            OpReply::Int(
                crate::record::footprint(key.len(), c.value.len(), c.expire_ms.is_some()) as i64,
            )
        }
        // The record holds a pointer to a box holding the `Arc` (its two
        // counts beside the state).
        Some(Value::Typed(s)) => OpReply::Int(
            (crate::record::footprint(key.len(), std::mem::size_of::<usize>(), false)
                + std::mem::size_of::<usize>()
                + 2 * std::mem::size_of::<usize>()
                + s.approx_bytes()) as i64,
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::super::testing::{bulk, MapView};
    use super::super::Op;
    use super::*;

    #[test]
    fn ttl_lifecycle() {
        let mut v = MapView(Default::default(), 1_000);
        assert_eq!(v.run("k", Op::Ttl { millis: false }), OpReply::Int(-2));
        v.put("k", b"x");
        assert_eq!(v.run("k", Op::Ttl { millis: false }), OpReply::Int(-1));
        assert_eq!(v.run("k", Op::ExpireAt(3_500)), OpReply::Int(1));
        assert_eq!(v.run("k", Op::Ttl { millis: false }), OpReply::Int(3));
        assert_eq!(v.run("k", Op::Ttl { millis: true }), OpReply::Int(2_500));
        assert_eq!(
            v.run("k", Op::ExpireTime { millis: false }),
            OpReply::Int(4),
            "3.5 s rounds to 4, as Redis rounds EXPIRETIME"
        );
        assert_eq!(
            v.run("k", Op::ExpireTime { millis: true }),
            OpReply::Int(3_500)
        );
        assert_eq!(v.run("k", Op::Append("y".into())), OpReply::Int(2));
        assert_eq!(
            v.run("k", Op::Ttl { millis: true }),
            OpReply::Int(2_500),
            "APPEND keeps the TTL"
        );
        v.1 = 3_500;
        assert_eq!(v.run("k", Op::Get), OpReply::Nil);
        assert_eq!(
            v.run("k", Op::ExpireTime { millis: true }),
            OpReply::Int(-2)
        );
    }

    #[test]
    fn ttl_rounds_to_the_nearest_second() {
        let mut v = MapView::default();
        v.put("k", b"x");
        for (left, want) in [
            (100_400, 100),
            (100_500, 101),
            (100_499, 100),
            (499, 0),
            (1, 0),
        ] {
            v.run("k", Op::ExpireAt(left));
            assert_eq!(
                v.run("k", Op::Ttl { millis: false }),
                OpReply::Int(want),
                "{left} ms left"
            );
        }
    }

    #[test]
    fn expire_options_follow_redis() {
        let mut v = MapView(Default::default(), 1_000);
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
        let pttl = |v: &mut MapView| v.run("k", Op::Ttl { millis: true });
        assert_eq!(v.run("k", exp(5_000, nx)), OpReply::Int(0), "no key");
        v.put("k", b"x");
        assert_eq!(v.run("k", exp(5_000, xx)), OpReply::Int(0));
        assert_eq!(v.run("k", exp(5_000, xx_lt)), OpReply::Int(0));
        assert_eq!(
            v.run("k", exp(5_000, gt)),
            OpReply::Int(0),
            "no TTL is infinite: GT fails"
        );
        assert_eq!(
            v.run("k", exp(9_000, lt)),
            OpReply::Int(1),
            "no TTL is infinite: LT passes"
        );
        assert_eq!(pttl(&mut v), OpReply::Int(8_000));
        assert_eq!(v.run("k", exp(5_000, nx)), OpReply::Int(0));
        assert_eq!(v.run("k", exp(9_000, gt)), OpReply::Int(0), "equal");
        assert_eq!(v.run("k", exp(9_500, gt)), OpReply::Int(1));
        assert_eq!(v.run("k", exp(9_500, lt)), OpReply::Int(0), "equal");
        assert_eq!(v.run("k", exp(7_000, xx_lt)), OpReply::Int(1));
        assert_eq!(pttl(&mut v), OpReply::Int(6_000));
        assert_eq!(
            v.run("k", exp(0, lt)),
            OpReply::Int(1),
            "a past time allowed by LT deletes"
        );
        assert_eq!(v.run("k", Op::Exists), OpReply::Int(0));
    }

    #[test]
    fn rename_moves_value_and_ttl() {
        let mut v = MapView(Default::default(), 1_000);
        let rename = |to: &'static str, nx| Op::Rename {
            to: Bytes::from_static(to.as_bytes()),
            nx,
        };
        assert_eq!(
            v.run("a", rename("b", false)),
            OpReply::Error(ERR_NO_SUCH_KEY)
        );
        assert_eq!(
            v.run("a", rename("a", true)),
            OpReply::Error(ERR_NO_SUCH_KEY),
            "even to itself"
        );
        v.put("a", b"1");
        v.run("a", Op::ExpireAt(9_000));
        assert_eq!(v.run("a", rename("a", false)), OpReply::Ok);
        assert_eq!(v.run("a", rename("a", true)), OpReply::Int(0));
        assert_eq!(v.run("a", rename("b", false)), OpReply::Ok);
        assert_eq!(v.run("a", Op::Exists), OpReply::Int(0));
        assert_eq!(v.run("b", Op::Get), bulk(b"1"));
        assert_eq!(v.run("b", Op::Ttl { millis: true }), OpReply::Int(8_000));
        v.put("c", b"2");
        assert_eq!(v.run("b", rename("c", true)), OpReply::Int(0));
        assert_eq!(v.run("b", rename("d", true)), OpReply::Int(1));
        assert_eq!(v.run("d", rename("c", false)), OpReply::Ok, "overwrites");
        assert_eq!(v.run("c", Op::Get), bulk(b"1"));
        assert_eq!(v.run("c", Op::Ttl { millis: true }), OpReply::Int(8_000));
    }

    #[test]
    fn copy_keeps_the_source_and_takes_its_ttl() {
        let mut v = MapView(Default::default(), 1_000);
        let copy = |to: &'static str, replace| Op::Copy {
            to: Bytes::from_static(to.as_bytes()),
            replace,
        };
        assert_eq!(v.run("a", copy("b", false)), OpReply::Int(0));
        v.put("a", b"1");
        v.run("a", Op::ExpireAt(9_000));
        v.put("b", b"2");
        assert_eq!(v.run("a", copy("b", false)), OpReply::Int(0));
        assert_eq!(v.run("b", Op::Get), bulk(b"2"));
        assert_eq!(v.run("a", copy("b", true)), OpReply::Int(1));
        assert_eq!(v.run("b", Op::Get), bulk(b"1"));
        assert_eq!(v.run("b", Op::Ttl { millis: true }), OpReply::Int(8_000));
        assert_eq!(v.run("a", Op::Get), bulk(b"1"));
    }

    #[test]
    fn object_answers_as_redis_would_for_a_set_value() {
        let mut v = MapView::default();
        for (value, enc, refs) in [
            (&b"5"[..], "int", i64::from(i32::MAX)),
            (b"9999", "int", i64::from(i32::MAX)),
            (b"10000", "int", 1),
            (b"-1", "int", 1),
            (b"007", "embstr", 1),
            (b"12345678901234567890123", "embstr", 1),
            (&[b'x'; 44], "embstr", 1),
            (&[b'x'; 45], "raw", 1),
        ] {
            v.put("k", value);
            assert_eq!(
                v.run("k", Op::Object(ObjectField::Encoding)),
                bulk(enc.as_bytes())
            );
            assert_eq!(
                v.run("k", Op::Object(ObjectField::Refcount)),
                OpReply::Int(refs)
            );
        }
        assert_eq!(
            v.run("k", Op::Object(ObjectField::Freq)),
            OpReply::Error(ERR_NO_LFU)
        );
        assert_eq!(
            v.run("k", Op::Object(ObjectField::IdleTime)),
            OpReply::Int(0)
        );
        assert_eq!(v.run("nope", Op::Object(ObjectField::Freq)), OpReply::Nil);
        assert_eq!(v.run("nope", Op::MemoryUsage), OpReply::Nil);
        assert!(matches!(v.run("k", Op::MemoryUsage), OpReply::Int(n) if n > 45));
    }
}

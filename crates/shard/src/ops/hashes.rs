//! Hash commands (Redis's `t_hash.c`) on the add-wins map of counters
//! (`elsa_lattice::OrMap`): HSET HSETNX HMSET HGET HMGET HGETALL HDEL HLEN
//! HEXISTS HKEYS HVALS HSTRLEN HINCRBY HINCRBYFLOAT HRANDFIELD HSCAN.
//!
//! Every write is one delta at one version (`begin_collection_write`):
//! `HSET` sets each field's value and adds it, `HDEL` removes the adds it
//! has seen, `HINCRBY` raises this node's running total of the field, so
//! concurrent changes in other regions merge field by field
//! (`docs/datatypes.md`). Replies and errors are Redis 7.0's; the order of
//! HGETALL, HKEYS and HVALS is unspecified (Redis keeps small hashes in
//! insertion order, Elsa in hash order).

use bytes::{Buf, BufMut, Bytes};
use elsa_lattice::{Collection, Crdt, KeyState, Kind, OrMap, Ts, Version};

use super::limits;
use super::longdouble::{self, FloatError};
use super::{begin_collection_write, read_collection, CollectionWrite, KeyView, OpReply, ScanArgs};

/// HINCRBY on a field that does not hold an integer.
pub const ERR_HASH_NOT_INTEGER: &str = "ERR hash value is not an integer";
/// HINCRBYFLOAT on a field that does not hold a number.
pub const ERR_HASH_NOT_FLOAT: &str = "ERR hash value is not a float";

/// What HSET answers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HSetReply {
    /// HSET: how many fields are new.
    Count,
    /// HMSET: `+OK`.
    Ok,
}

/// One hash command on one key.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum HashOp {
    /// HSET / HMSET: fields and values, in command order.
    Set {
        /// The pairs (a field given twice: the last value wins).
        pairs: Vec<(Bytes, Bytes)>,
        /// HSET or HMSET.
        reply: HSetReply,
    },
    /// HSETNX field value
    SetNx(Bytes, Bytes),
    /// HGET field
    Get(Bytes),
    /// HMGET field…
    MGet(Vec<Bytes>),
    /// HGETALL
    GetAll,
    /// HDEL field…
    Del(Vec<Bytes>),
    /// HLEN
    Len,
    /// HEXISTS field
    Exists(Bytes),
    /// HKEYS
    Keys,
    /// HVALS
    Vals,
    /// HSTRLEN field
    StrLen(Bytes),
    /// HINCRBY field by
    IncrBy(Bytes, i64),
    /// HINCRBYFLOAT field by (checked a number, finite, by the parser)
    IncrByFloat(Bytes, Bytes),
    /// HRANDFIELD [count [WITHVALUES]]
    RandField {
        /// `None`: one field (or nil); negative: may repeat.
        count: Option<i64>,
        /// WITHVALUES.
        with_values: bool,
        /// Seed of the choice (picked by the parser, so every replica of
        /// a forwarded op picks alike).
        seed: u64,
    },
    /// HSCAN cursor [MATCH pattern] [COUNT count]
    Scan(ScanArgs),
}

/// True when Redis would keep this hash packed: it never held more than
/// `hash-max-listpack-entries` fields or a field or value over
/// `hash-max-listpack-value` bytes since it was created (Redis does not
/// pack a hash again; see [`limits`](super::limits)).
pub(super) fn packed(m: &OrMap) -> bool {
    let peak = m.peak();
    !peak.wide
        && (peak.most as usize).max(m.len()) <= limits::get(&limits::HASH_ENTRIES)
        && short(m)
}

/// Every field and value within `hash-max-listpack-value`.
fn short(m: &OrMap) -> bool {
    let most = limits::get(&limits::HASH_VALUE);
    m.iter().all(|(f, v)| f.len() <= most && v.len() <= most)
}

/// Marks `delta` when it writes a field or value Redis would not pack.
fn mark_if_wide(delta: &mut OrMap, field: &[u8], value: &[u8]) {
    let most = limits::get(&limits::HASH_VALUE);
    if field.len() > most || value.len() > most {
        delta.mark_wide();
    }
}

impl HashOp {
    /// True when the command may change the key.
    pub fn is_write(&self) -> bool {
        matches!(
            self,
            HashOp::Set { .. }
                | HashOp::SetNx(..)
                | HashOp::Del(_)
                | HashOp::IncrBy(..)
                | HashOp::IncrByFloat(..)
        )
    }

    /// Runs the command on `key`.
    pub fn apply(&self, key: &[u8], view: &mut impl KeyView) -> OpReply {
        match self {
            HashOp::Set { pairs, reply } => set(key, view, pairs, *reply),
            HashOp::SetNx(f, v) => set_nx(key, view, f, v),
            HashOp::Del(fields) => del(key, view, fields),
            HashOp::IncrBy(f, by) => incr_by(key, view, f, *by),
            HashOp::IncrByFloat(f, by) => incr_by_float(key, view, f, by),
            read => match read_collection(view, key, Kind::Hash) {
                Err(e) => e,
                Ok(state) => {
                    if let (
                        Some(_),
                        HashOp::Scan(ScanArgs {
                            refused: Some(e), ..
                        }),
                    ) = (&state, read)
                    {
                        return OpReply::Error(e);
                    }
                    let empty = OrMap::default();
                    let map = match state.as_deref().and_then(|s| s.collection.as_ref()) {
                        Some(Collection::Hash(m)) => m,
                        _ => &empty,
                    };
                    read.answer(map)
                }
            },
        }
    }

    /// A read command's answer from the hash (empty when absent).
    fn answer(&self, m: &OrMap) -> OpReply {
        let bulk_or_nil = |v: Option<Bytes>| v.map_or(OpReply::Nil, OpReply::Bulk);
        match self {
            HashOp::Get(f) => bulk_or_nil(m.get(f)),
            HashOp::MGet(fields) => {
                OpReply::Array(fields.iter().map(|f| bulk_or_nil(m.get(f))).collect())
            }
            HashOp::GetAll => OpReply::Map(m.pairs()),
            HashOp::Len => OpReply::Int(m.len() as i64),
            HashOp::Exists(f) => OpReply::Int(m.contains(f) as i64),
            HashOp::Keys => OpReply::Array(
                m.iter()
                    .map(|(f, _)| OpReply::Bulk(Bytes::copy_from_slice(f)))
                    .collect(),
            ),
            HashOp::Vals => OpReply::Array(m.iter().map(|(_, v)| OpReply::Bulk(v)).collect()),
            HashOp::StrLen(f) => OpReply::Int(m.get(f).map_or(0, |v| v.len() as i64)),
            HashOp::RandField {
                count,
                with_values,
                seed,
            } => rand_field(m, *count, *with_values, *seed),
            HashOp::Scan(args) => scan(m, args),
            // Writes are answered by `apply`.
            _ => OpReply::Error(super::ERR_SYNTAX),
        }
    }
}

/// Runs a writing hash command: `f` gets the hash as stored (empty when
/// absent, expired or of no hash yet), the start timestamp and version,
/// and answers its reply and the delta to merge (none: nothing changed);
/// a change raises keyspace event `event`.
/// The stored state is let go before the merge, so a big hash is changed
/// in place, never copied.
fn write_hash(
    view: &mut impl KeyView,
    key: &[u8],
    event: &'static str,
    f: impl FnOnce(&OrMap, Ts, Version) -> (OpReply, Option<OrMap>),
) -> OpReply {
    let w = match begin_collection_write(view, key, Kind::Hash) {
        Ok(w) => w,
        Err(e) => return e,
    };
    let empty = OrMap::default();
    let map = match w.state.as_deref().and_then(|s| s.collection.as_ref()) {
        Some(Collection::Hash(m)) => m,
        _ => &empty,
    };
    let (reply, delta) = f(map, w.start_ts, w.dot);
    let CollectionWrite {
        state, mut prefix, ..
    } = w;
    drop(state);
    if let Some(delta) = delta {
        prefix.merge(KeyState::of(Collection::Hash(delta)));
        view.merge(key, prefix);
        super::notify(view, crate::notify::HASH, event, key);
    }
    reply
}

fn set(key: &[u8], view: &mut impl KeyView, pairs: &[(Bytes, Bytes)], reply: HSetReply) -> OpReply {
    write_hash(view, key, "hset", |map, start_ts, dot| {
        // One version for the whole command: a field given twice is set
        // once, to its last value (two sets at one version would tie).
        let mut last: Vec<(&Bytes, &Bytes)> = Vec::with_capacity(pairs.len());
        for (f, v) in pairs.iter().rev() {
            if !last.iter().any(|(seen, _)| *seen == f) {
                last.push((f, v));
            }
        }
        let mut delta: Option<OrMap> = None;
        let mut created = 0;
        for (f, v) in last.into_iter().rev() {
            created += i64::from(!map.contains(f));
            // (The field's name and value are copied into the hash: the
            // arguments are slices of the whole request, which the hash
            // would otherwise keep alive.)
            let d = map.set(f, v, start_ts, dot);
            // The first field's delta is the delta (YCSB's one-field
            // HSET): merged into an empty map it would be built twice.
            match &mut delta {
                None => delta = Some(d),
                Some(all) => {
                    all.merge(d);
                }
            }
        }
        let answer = match reply {
            HSetReply::Count => OpReply::Int(created),
            HSetReply::Ok => OpReply::Ok,
        };
        let mut delta = delta.unwrap_or_default();
        // Every pair counts, a value the command set again included: Redis
        // checks the arguments before it sets any (`hashTypeTryConversion`).
        for (f, v) in pairs {
            mark_if_wide(&mut delta, f, v);
        }
        (answer, Some(delta))
    })
}

fn set_nx(key: &[u8], view: &mut impl KeyView, f: &Bytes, v: &Bytes) -> OpReply {
    write_hash(view, key, "hset", |map, start_ts, dot| {
        if map.contains(f) {
            return (OpReply::Int(0), None);
        }
        let mut delta = map.set(f, v, start_ts, dot);
        mark_if_wide(&mut delta, f, v);
        (OpReply::Int(1), Some(delta))
    })
}

fn del(key: &[u8], view: &mut impl KeyView, fields: &[Bytes]) -> OpReply {
    let reply = remove_fields(key, view, fields);
    if matches!(reply, OpReply::Int(n) if n > 0) {
        super::notify_if_gone(view, key);
    }
    reply
}

fn remove_fields(key: &[u8], view: &mut impl KeyView, fields: &[Bytes]) -> OpReply {
    write_hash(view, key, "hdel", |map, _, dot| {
        let mut delta = OrMap::default();
        let mut removed = 0;
        for f in fields {
            if delta.has_field(f) {
                continue; // named twice: counted once
            }
            if let Some(d) = map.remove(f, dot) {
                removed += 1;
                delta.merge(d);
            }
        }
        (OpReply::Int(removed), (removed > 0).then_some(delta))
    })
}

fn incr_by(key: &[u8], view: &mut impl KeyView, f: &Bytes, by: i64) -> OpReply {
    write_hash(view, key, "hincrby", |map, start_ts, dot| {
        match map.incr_by(f, by, start_ts, dot) {
            Ok((n, mut delta)) => {
                mark_if_wide(&mut delta, f, b"");
                (OpReply::Int(n), Some(delta))
            }
            Err(e) if e == elsa_lattice::counter::ERR_OVERFLOW => {
                (OpReply::Error(super::ERR_OVERFLOW), None)
            }
            Err(_) => (OpReply::Error(ERR_HASH_NOT_INTEGER), None),
        }
    })
}

fn incr_by_float(key: &[u8], view: &mut impl KeyView, f: &Bytes, by: &[u8]) -> OpReply {
    write_hash(view, key, "hincrbyfloat", |map, start_ts, dot| {
        let current = map.get(f);
        let value = current.as_deref().unwrap_or(b"0");
        match longdouble::incr_by_float(value, by) {
            Ok(text) => {
                let text = Bytes::from(text);
                let mut delta = map.set(f, &text, start_ts, dot);
                mark_if_wide(&mut delta, f, &text);
                (OpReply::Bulk(text), Some(delta))
            }
            Err(FloatError::NotFloat) => (OpReply::Error(ERR_HASH_NOT_FLOAT), None),
            Err(FloatError::NanOrInfinity) => (OpReply::Error(super::ERR_NAN), None),
        }
    })
}

/// A splitmix64 step: the parser's seed spread into picks.
pub(super) fn next(seed: &mut u64) -> u64 {
    *seed = seed.wrapping_add(0x9e37_79b9_7f4a_7c15);
    let mut z = *seed;
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// HRANDFIELD: one field, `count` distinct ones, or `-count` with repeats.
fn rand_field(m: &OrMap, count: Option<i64>, with_values: bool, mut seed: u64) -> OpReply {
    let mut fields: Vec<(Bytes, Bytes)> = m
        .iter()
        .map(|(f, v)| (Bytes::copy_from_slice(f), v))
        .collect();
    // Hash order differs between replicas: sort, so a seed picks alike.
    fields.sort();
    let Some(count) = count else {
        if fields.is_empty() {
            return OpReply::Nil;
        }
        let i = (next(&mut seed) % fields.len() as u64) as usize;
        return OpReply::Bulk(fields.swap_remove(i).0);
    };
    if fields.is_empty() || count == 0 {
        return OpReply::Array(Vec::new());
    }
    let picked: Vec<(Bytes, Bytes)> = if count < 0 {
        (0..count.unsigned_abs())
            .map(|_| fields[(next(&mut seed) % fields.len() as u64) as usize].clone())
            .collect()
    } else {
        // A partial Fisher–Yates shuffle: `count` distinct fields.
        let n = (count as u64).min(fields.len() as u64) as usize;
        for i in 0..n {
            let j = i + (next(&mut seed) % (fields.len() - i) as u64) as usize;
            fields.swap(i, j);
        }
        fields.truncate(n);
        fields
    };
    if with_values {
        OpReply::Pairs(picked)
    } else {
        OpReply::Array(picked.into_iter().map(|(f, _)| OpReply::Bulk(f)).collect())
    }
}

/// HSCAN: a small hash whole (cursor 0), as Redis answers a packed one; a
/// bigger one `count` fields at a time in the fields' sorted order (the
/// cursor is a position in it: a field present for the whole scan is
/// returned at least once, as Redis promises).
fn scan(m: &OrMap, args: &ScanArgs) -> OpReply {
    let packed = m.len() <= limits::get(&limits::HASH_ENTRIES) && short(m);
    let fields: Vec<(Bytes, Bytes)> = m
        .iter()
        .map(|(f, v)| (Bytes::copy_from_slice(f), v))
        .collect();
    let (page, next_cursor) = args.page(fields, packed);
    let flat: Vec<OpReply> = page
        .into_iter()
        .filter(|(f, _)| args.matches(f))
        .flat_map(|(f, v)| [OpReply::Bulk(f), OpReply::Bulk(v)])
        .collect();
    OpReply::Array(vec![
        OpReply::Bulk(Bytes::from(next_cursor.to_string())),
        OpReply::Array(flat),
    ])
}

// ---- the wire form (an op forwarded to the key's node) -------------------

pub(super) fn put_bytes(out: &mut Vec<u8>, b: &[u8]) {
    out.put_u32_le(b.len() as u32);
    out.extend_from_slice(b);
}

pub(super) fn get_bytes(buf: &mut Bytes) -> Option<Bytes> {
    if buf.remaining() < 4 {
        return None;
    }
    let n = buf.get_u32_le() as usize;
    (buf.remaining() >= n).then(|| buf.split_to(n))
}

pub(super) fn get_u64(buf: &mut Bytes) -> Option<u64> {
    (buf.remaining() >= 8).then(|| buf.get_u64_le())
}

/// A list of byte strings: a count, each at least 4 bytes long, so the
/// count is checked against what is left before anything is allocated.
pub(super) fn get_list(buf: &mut Bytes) -> Option<Vec<Bytes>> {
    let n = get_u64(buf)? as usize;
    if n.saturating_mul(4) > buf.remaining() {
        return None;
    }
    (0..n).map(|_| get_bytes(buf)).collect()
}

pub(super) fn put_list(out: &mut Vec<u8>, items: &[Bytes]) {
    out.put_u64_le(items.len() as u64);
    for i in items {
        put_bytes(out, i);
    }
}

impl HashOp {
    /// The op as bytes (`decode` reads it back).
    pub fn encode(&self) -> Bytes {
        let mut out = Vec::new();
        match self {
            HashOp::Set { pairs, reply } => {
                out.put_u8(0);
                out.put_u8(u8::from(*reply == HSetReply::Ok));
                let flat: Vec<Bytes> = pairs
                    .iter()
                    .flat_map(|(f, v)| [f.clone(), v.clone()])
                    .collect();
                put_list(&mut out, &flat);
            }
            HashOp::SetNx(f, v) => {
                out.put_u8(1);
                put_bytes(&mut out, f);
                put_bytes(&mut out, v);
            }
            HashOp::Get(f) => {
                out.put_u8(2);
                put_bytes(&mut out, f);
            }
            HashOp::MGet(fs) => {
                out.put_u8(3);
                put_list(&mut out, fs);
            }
            HashOp::GetAll => out.put_u8(4),
            HashOp::Del(fs) => {
                out.put_u8(5);
                put_list(&mut out, fs);
            }
            HashOp::Len => out.put_u8(6),
            HashOp::Exists(f) => {
                out.put_u8(7);
                put_bytes(&mut out, f);
            }
            HashOp::Keys => out.put_u8(8),
            HashOp::Vals => out.put_u8(9),
            HashOp::StrLen(f) => {
                out.put_u8(10);
                put_bytes(&mut out, f);
            }
            HashOp::IncrBy(f, by) => {
                out.put_u8(11);
                put_bytes(&mut out, f);
                out.put_i64_le(*by);
            }
            HashOp::IncrByFloat(f, by) => {
                out.put_u8(12);
                put_bytes(&mut out, f);
                put_bytes(&mut out, by);
            }
            HashOp::RandField {
                count,
                with_values,
                seed,
            } => {
                out.put_u8(13);
                out.put_u8(u8::from(count.is_some()) | (u8::from(*with_values) << 1));
                out.put_i64_le(count.unwrap_or(0));
                out.put_u64_le(*seed);
            }
            HashOp::Scan(args) => {
                out.put_u8(14);
                args.encode(&mut out);
            }
        }
        Bytes::from(out)
    }

    /// Reads what [`HashOp::encode`] wrote; `None` for anything else.
    pub fn decode(mut buf: Bytes) -> Option<HashOp> {
        if !buf.has_remaining() {
            return None;
        }
        let op = match buf.get_u8() {
            0 => {
                if !buf.has_remaining() {
                    return None;
                }
                let reply = if buf.get_u8() == 1 {
                    HSetReply::Ok
                } else {
                    HSetReply::Count
                };
                let flat = get_list(&mut buf)?;
                if flat.len() % 2 != 0 || flat.is_empty() {
                    return None;
                }
                let pairs = flat
                    .chunks_exact(2)
                    .map(|p| (p[0].clone(), p[1].clone()))
                    .collect();
                HashOp::Set { pairs, reply }
            }
            1 => HashOp::SetNx(get_bytes(&mut buf)?, get_bytes(&mut buf)?),
            2 => HashOp::Get(get_bytes(&mut buf)?),
            3 => HashOp::MGet(get_list(&mut buf)?),
            4 => HashOp::GetAll,
            5 => HashOp::Del(get_list(&mut buf)?),
            6 => HashOp::Len,
            7 => HashOp::Exists(get_bytes(&mut buf)?),
            8 => HashOp::Keys,
            9 => HashOp::Vals,
            10 => HashOp::StrLen(get_bytes(&mut buf)?),
            11 => {
                let f = get_bytes(&mut buf)?;
                HashOp::IncrBy(f, get_u64(&mut buf)? as i64)
            }
            12 => HashOp::IncrByFloat(get_bytes(&mut buf)?, get_bytes(&mut buf)?),
            13 => {
                if !buf.has_remaining() {
                    return None;
                }
                let flags = buf.get_u8();
                let count = get_u64(&mut buf)? as i64;
                HashOp::RandField {
                    count: (flags & 1 != 0).then_some(count),
                    with_values: flags & 2 != 0,
                    seed: get_u64(&mut buf)?,
                }
            }
            14 => HashOp::Scan(ScanArgs::decode(&mut buf)?),
            _ => return None,
        };
        buf.is_empty().then_some(op)
    }
}

#[cfg(test)]
mod tests {
    use super::super::testing::{bulk, MapView};
    use super::super::{Op, WRONGTYPE};
    use super::*;

    fn b(s: &str) -> Bytes {
        Bytes::copy_from_slice(s.as_bytes())
    }

    fn hset(pairs: &[(&str, &str)]) -> Op {
        Op::Hash(HashOp::Set {
            pairs: pairs.iter().map(|(f, v)| (b(f), b(v))).collect(),
            reply: HSetReply::Count,
        })
    }

    fn sorted(r: OpReply) -> OpReply {
        match r {
            OpReply::Map(m) => {
                let mut m = m.to_vec();
                m.sort();
                OpReply::Map(m.into_iter().collect())
            }
            other => other,
        }
    }

    #[test]
    fn hset_counts_new_fields_and_the_last_value_of_a_repeated_one_wins() {
        let mut v = MapView::default();
        assert_eq!(
            v.run("h", hset(&[("a", "1"), ("b", "2"), ("a", "3")])),
            OpReply::Int(2)
        );
        assert_eq!(v.run("h", Op::Hash(HashOp::Get(b("a")))), bulk(b"3"));
        assert_eq!(v.run("h", hset(&[("a", "4"), ("c", "5")])), OpReply::Int(1));
        assert_eq!(
            sorted(v.run("h", Op::Hash(HashOp::GetAll))),
            OpReply::Map([("a", "4"), ("b", "2"), ("c", "5")].into_iter().collect())
        );
        assert_eq!(v.run("h", Op::Hash(HashOp::Len)), OpReply::Int(3));
        assert_eq!(v.run("h", Op::Type), OpReply::Status("hash"));
    }

    #[test]
    fn hdel_counts_each_field_once_and_an_emptied_hash_is_gone() {
        let mut v = MapView::default();
        v.run("h", hset(&[("a", "1"), ("b", "2")]));
        let del = |fs: &[&str]| Op::Hash(HashOp::Del(fs.iter().map(|f| b(f)).collect()));
        assert_eq!(v.run("h", del(&["a", "a", "x"])), OpReply::Int(1));
        assert_eq!(
            v.run("h", Op::Hash(HashOp::Exists(b("a")))),
            OpReply::Int(0)
        );
        assert_eq!(v.run("h", del(&["b"])), OpReply::Int(1));
        assert_eq!(v.run("h", Op::Exists), OpReply::Int(0));
        assert_eq!(v.run("h", Op::Type), OpReply::Status("none"));
        // Written again: only the new field.
        v.run("h", hset(&[("c", "3")]));
        assert_eq!(v.run("h", Op::Hash(HashOp::Len)), OpReply::Int(1));
    }

    #[test]
    fn hincrby_counts_and_refuses_like_redis() {
        let mut v = MapView::default();
        let incr = |f: &str, n: i64| Op::Hash(HashOp::IncrBy(b(f), n));
        assert_eq!(v.run("h", incr("n", 5)), OpReply::Int(5));
        assert_eq!(v.run("h", incr("n", -7)), OpReply::Int(-2));
        v.run("h", hset(&[("s", "x")]));
        assert_eq!(
            v.run("h", incr("s", 1)),
            OpReply::Error(ERR_HASH_NOT_INTEGER)
        );
        v.run("h", hset(&[("m", &i64::MAX.to_string())]));
        assert_eq!(
            v.run("h", incr("m", 1)),
            OpReply::Error(super::super::ERR_OVERFLOW)
        );
        let float = |f: &str, by: &str| Op::Hash(HashOp::IncrByFloat(b(f), b(by)));
        assert_eq!(v.run("h", float("n", "0.5")), bulk(b"-1.5"));
        assert_eq!(
            v.run("h", float("s", "1")),
            OpReply::Error(ERR_HASH_NOT_FLOAT)
        );
        // A field removed and incremented again counts from zero.
        v.run("h", Op::Hash(HashOp::Del(vec![b("n")])));
        assert_eq!(v.run("h", incr("n", 3)), OpReply::Int(3));
    }

    #[test]
    fn a_string_key_refuses_hash_commands_and_a_hash_refuses_string_ones() {
        let mut v = MapView::default();
        v.put("s", b"x");
        assert_eq!(v.run("s", hset(&[("a", "1")])), OpReply::Error(WRONGTYPE));
        assert_eq!(v.run("s", Op::Hash(HashOp::Len)), OpReply::Error(WRONGTYPE));
        v.run("h", hset(&[("a", "1")]));
        assert_eq!(v.run("h", Op::Get), OpReply::Error(WRONGTYPE));
        assert_eq!(v.run("h", Op::IncrBy(1)), OpReply::Error(WRONGTYPE));
        // SET replaces a hash whole, as Redis does.
        v.run(
            "h",
            Op::Set {
                value: b("v"),
                cond: super::super::SetCond::Always,
                expiry: super::super::Expiry::Clear,
                reply: super::super::SetReply::Ok,
            },
        );
        assert_eq!(v.run("h", Op::Get), bulk(b"v"));
    }

    #[test]
    fn hrandfield_picks_from_the_hash() {
        let mut v = MapView::default();
        v.run("h", hset(&[("a", "1"), ("b", "2"), ("c", "3")]));
        let rand = |count, with_values, seed| {
            Op::Hash(HashOp::RandField {
                count,
                with_values,
                seed,
            })
        };
        for seed in 0..20 {
            let OpReply::Array(some) = v.run("h", rand(Some(2), false, seed)) else {
                panic!("an array");
            };
            assert_eq!(some.len(), 2);
            assert_ne!(some[0], some[1], "distinct");
            let OpReply::Pairs(p) = v.run("h", rand(Some(-5), true, seed)) else {
                panic!("pairs");
            };
            assert_eq!(p.len(), 5);
            assert!(p
                .iter()
                .all(|(f, v)| (f.as_ref(), v.as_ref()) == (b"a", b"1")
                    || (f.as_ref(), v.as_ref()) == (b"b", b"2")
                    || (f.as_ref(), v.as_ref()) == (b"c", b"3")));
        }
        assert_eq!(
            v.run("h", rand(Some(9), false, 1)),
            v.run("h", rand(Some(3), false, 1))
        );
        assert_eq!(v.run("x", rand(None, false, 1)), OpReply::Nil);
        assert_eq!(v.run("x", rand(Some(3), false, 1)), OpReply::Array(vec![]));
    }

    #[test]
    fn every_hash_op_survives_its_encoding() {
        let ops = [
            HashOp::Set {
                pairs: vec![(b("f"), b("v")), (b("g"), b(""))],
                reply: HSetReply::Ok,
            },
            HashOp::SetNx(b("f"), b("v")),
            HashOp::Get(b("f")),
            HashOp::MGet(vec![b("a"), b("b")]),
            HashOp::GetAll,
            HashOp::Del(vec![b("a")]),
            HashOp::Len,
            HashOp::Exists(b("f")),
            HashOp::Keys,
            HashOp::Vals,
            HashOp::StrLen(b("f")),
            HashOp::IncrBy(b("f"), -9),
            HashOp::IncrByFloat(b("f"), b("1.5")),
            HashOp::RandField {
                count: Some(-3),
                with_values: true,
                seed: 7,
            },
            HashOp::RandField {
                count: None,
                with_values: false,
                seed: 8,
            },
            HashOp::Scan(ScanArgs {
                cursor: 5,
                pattern: Some(b("a*")),
                count: 10,
                refused: None,
            }),
            HashOp::Scan(ScanArgs {
                cursor: 0,
                pattern: None,
                count: 1,
                refused: Some(super::super::ERR_SYNTAX),
            }),
        ];
        for op in ops {
            assert_eq!(HashOp::decode(op.encode()), Some(op.clone()), "{op:?}");
        }
        assert_eq!(
            HashOp::decode(Bytes::from_static(b"\x03\xff\xff\xff\xff\xff\xff\xff\x7f")),
            None
        );
        assert_eq!(HashOp::decode(Bytes::new()), None);
    }
}

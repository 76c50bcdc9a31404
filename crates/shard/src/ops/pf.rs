//! HyperLogLog commands — PFADD, PFCOUNT, PFMERGE, PFDEBUG — on string
//! values in Redis 7.0's bytes (`elsa_lattice::hll`), as Redis keeps them:
//! a HyperLogLog is a string, `GET` shows its bytes, `SET` of those bytes
//! makes one, and a value Redis wrote counts the same here.
//!
//! Each command is one op on its key (PFMERGE's destination, PFCOUNT's
//! first key) that reads the others with it, so it commits in one step
//! across shards and nodes as BITOP does. Every write here only raises
//! registers, so it is written as this node's HyperLogLog part
//! (`elsa_lattice::hll_parts`): across regions concurrent PFADDs all
//! count, while a whole-value write (SET, DEL…) still replaces the value
//! (`docs/datatypes.md`).
//!
//! As in Redis, a PFCOUNT of one key whose cached cardinality is stale
//! writes the count back into the header (so `GET` shows the same bytes
//! as Redis's afterwards), and PFDEBUG GETREG/TODENSE convert a sparse
//! value to dense.

use bytes::{Buf, BufMut, Bytes};
use elsa_lattice::hll;

use super::hashes::{get_bytes, put_bytes};
use super::{keeping_ttl, read_string, Current, KeyView, OpReply};

/// `hll-sparse-max-bytes`: past this a sparse HyperLogLog becomes dense.
pub static SPARSE_MAX_BYTES: std::sync::atomic::AtomicUsize =
    std::sync::atomic::AtomicUsize::new(hll::SPARSE_MAX_BYTES);

/// PFDEBUG of a missing key.
pub const ERR_NO_KEY: &str = "ERR The specified key does not exist";
/// PFDEBUG DECODE of a dense value.
pub const ERR_NOT_SPARSE: &str = "ERR HLL encoding is not sparse";

fn sparse_max() -> usize {
    SPARSE_MAX_BYTES.load(std::sync::atomic::Ordering::Relaxed)
}

/// A PFDEBUG subcommand (the parser refuses others and wrong arities).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Debug {
    /// Every register, converting a sparse value to dense.
    GetReg,
    /// The sparse opcodes, as text.
    Decode,
    /// `dense` or `sparse`.
    Encoding,
    /// Converts a sparse value to dense: 1 if it did.
    ToDense,
}

/// A HyperLogLog command.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Pf {
    /// PFADD key element…
    Add(Vec<Bytes>),
    /// PFCOUNT key [key…]: the other keys.
    Count(Vec<Bytes>),
    /// PFMERGE destkey [sourcekey…]: the sources (the key is the
    /// destination, and a source too).
    Merge(Vec<Bytes>),
    /// PFDEBUG subcommand key.
    Debug(Debug),
}

impl Pf {
    /// Whether it may change its key: PFCOUNT of several keys does not
    /// (Redis updates no cache then).
    pub fn is_write(&self) -> bool {
        !matches!(self, Pf::Count(others) if !others.is_empty())
    }

    /// The keys it reads besides its own.
    pub fn other_keys(&self) -> &[Bytes] {
        match self {
            Pf::Count(k) | Pf::Merge(k) => k,
            _ => &[],
        }
    }

    /// Runs it on `key`.
    pub fn apply(&self, key: &[u8], view: &mut impl KeyView) -> OpReply {
        match self {
            Pf::Add(elements) => add(key, view, elements),
            Pf::Count(others) if others.is_empty() => count_one(key, view),
            Pf::Count(others) => count_many(key, others, view),
            Pf::Merge(sources) => merge(key, sources, view),
            Pf::Debug(d) => debug(key, *d, view),
        }
    }

    /// A compact encoding for the wire between nodes.
    pub fn encode(&self) -> Bytes {
        let mut out = Vec::new();
        let (tag, keys): (u8, &[Bytes]) = match self {
            Pf::Add(e) => (0, e),
            Pf::Count(k) => (1, k),
            Pf::Merge(k) => (2, k),
            Pf::Debug(d) => (3 + *d as u8, &[]),
        };
        out.put_u8(tag);
        out.put_u32_le(keys.len() as u32);
        for k in keys {
            put_bytes(&mut out, k);
        }
        out.into()
    }

    /// Reads what [`Pf::encode`] wrote; `None` when malformed.
    pub fn decode(mut buf: Bytes) -> Option<Pf> {
        if buf.remaining() < 5 {
            return None;
        }
        let tag = buf.get_u8();
        let n = buf.get_u32_le() as usize;
        let mut keys = Vec::with_capacity(n.min(buf.remaining()));
        for _ in 0..n {
            keys.push(get_bytes(&mut buf)?);
        }
        if buf.has_remaining() {
            return None;
        }
        let debug = |d| keys.is_empty().then_some(Pf::Debug(d));
        match tag {
            0 => Some(Pf::Add(keys)),
            1 => Some(Pf::Count(keys)),
            2 => Some(Pf::Merge(keys)),
            3 => debug(Debug::GetReg),
            4 => debug(Debug::Decode),
            5 => debug(Debug::Encoding),
            6 => debug(Debug::ToDense),
            _ => None,
        }
    }
}

/// The key's HyperLogLog bytes (None: missing), or the error reply.
macro_rules! read_hll {
    ($view:expr, $key:expr) => {{
        match read_string!($view, $key) {
            None => None,
            Some(c) => match hll::check(&c.value) {
                Ok(()) => Some(c),
                Err(e) => return OpReply::Error(e.message()),
            },
        }
    }};
}

/// Writes `v`, a HyperLogLog whose registers are each at least those of
/// `old` (what the key held), keeping its TTL: as this node's part where
/// the view keeps parts, else as the whole value.
fn write_hll(view: &mut impl KeyView, key: &[u8], old: Option<&Current>, v: Vec<u8>) {
    match view.hll_base(key) {
        Some(base) => {
            let (start_ts, version) = view.stamp();
            let now = view.now_ms();
            let delta = base.hll_write(v.into(), start_ts, version, now);
            view.merge(key, elsa_lattice::KeyState::of_string(delta));
        }
        None => view.write(key, keeping_ttl(old, v.into())),
    }
}

/// PFADD: creates the key (an empty sparse value) if missing; 1 when a
/// register changed or the key was made, else 0.
fn add(key: &[u8], view: &mut impl KeyView, elements: &[Bytes]) -> OpReply {
    let old = read_hll!(view, key);
    let (mut v, mut updated) = match &old {
        Some(c) => (c.value.to_vec(), false),
        None => (hll::new_sparse(), true),
    };
    for e in elements {
        match hll::add(&mut v, e, sparse_max()) {
            Ok(changed) => updated |= changed,
            Err(e) => return OpReply::Error(e.message()),
        }
    }
    if !updated {
        return OpReply::Int(0);
    }
    hll::invalidate(&mut v);
    write_hll(view, key, old.as_ref(), v);
    super::notify(view, crate::notify::STRING, "pfadd", key);
    OpReply::Int(1)
}

/// PFCOUNT of one key: the cached cardinality, or the count, written back
/// into the header when it was stale.
fn count_one(key: &[u8], view: &mut impl KeyView) -> OpReply {
    let Some(c) = read_hll!(view, key) else {
        return OpReply::Int(0);
    };
    if let Some(card) = hll::cached(&c.value) {
        return OpReply::Int(card as i64);
    }
    let card = match hll::count(&c.value) {
        Ok(n) => n,
        Err(e) => return OpReply::Error(e.message()),
    };
    let mut v = c.value.to_vec();
    hll::set_cached(&mut v, card);
    write_hll(view, key, Some(&c), v);
    OpReply::Int(card as i64)
}

/// PFCOUNT of several keys: the count of their register-wise maximum
/// (missing keys count as empty).
fn count_many(key: &[u8], others: &[Bytes], view: &mut impl KeyView) -> OpReply {
    let mut max = vec![0u8; hll::REGISTERS];
    for k in std::iter::once(key).chain(others.iter().map(|k| &k[..])) {
        let Some(c) = read_hll!(view, k) else {
            continue;
        };
        if let Err(e) = hll::merge_into(&mut max, &c.value) {
            return OpReply::Error(e.message());
        }
    }
    match hll::count_registers(&max) {
        Ok(n) => OpReply::Int(n as i64),
        Err(e) => OpReply::Error(e.message()),
    }
}

/// PFMERGE: the destination (a source too) raised to every source's
/// registers; dense when any source is; made if missing; its TTL kept.
fn merge(dest: &[u8], sources: &[Bytes], view: &mut impl KeyView) -> OpReply {
    let mut max = vec![0u8; hll::REGISTERS];
    let mut dense = false;
    let mut old = None;
    for (i, k) in std::iter::once(dest)
        .chain(sources.iter().map(|k| &k[..]))
        .enumerate()
    {
        let Some(c) = read_hll!(view, k) else {
            continue;
        };
        dense |= hll::is_dense(&c.value);
        if let Err(e) = hll::merge_into(&mut max, &c.value) {
            return OpReply::Error(e.message());
        }
        if i == 0 {
            old = Some(c);
        }
    }
    let mut v = old
        .as_ref()
        .map_or_else(hll::new_sparse, |c| c.value.to_vec());
    if let Err(e) = hll::raise(&mut v, &max, dense, sparse_max()) {
        return OpReply::Error(e.message());
    }
    write_hll(view, dest, old.as_ref(), v);
    super::notify(view, crate::notify::STRING, "pfadd", dest);
    OpReply::Ok
}

fn debug(key: &[u8], d: Debug, view: &mut impl KeyView) -> OpReply {
    let Some(c) = read_hll!(view, key) else {
        return OpReply::Error(ERR_NO_KEY);
    };
    let sparse = !hll::is_dense(&c.value);
    match d {
        Debug::Encoding => OpReply::Status(if sparse { "sparse" } else { "dense" }),
        Debug::Decode if !sparse => OpReply::Error(ERR_NOT_SPARSE),
        Debug::Decode => match hll::decode_sparse(&c.value) {
            Some(text) => OpReply::Bulk(text.into()),
            None => OpReply::Error(hll::HllError::Corrupt.message()),
        },
        Debug::GetReg | Debug::ToDense => {
            let mut v = c.value.to_vec();
            if sparse {
                if let Err(e) = hll::to_dense(&mut v) {
                    return OpReply::Error(e.message());
                }
            }
            let reply = if d == Debug::ToDense {
                OpReply::Int(i64::from(sparse))
            } else {
                match hll::registers(&v) {
                    Ok(regs) => {
                        OpReply::Array(regs.iter().map(|&r| OpReply::Int(i64::from(r))).collect())
                    }
                    Err(e) => return OpReply::Error(e.message()),
                }
            };
            if sparse {
                write_hll(view, key, Some(&c), v);
            }
            reply
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::testing::MapView;
    use super::super::Op;
    use super::*;

    fn b(s: &str) -> Bytes {
        Bytes::copy_from_slice(s.as_bytes())
    }

    #[test]
    fn ops_cross_the_wire_whole() {
        for op in [
            Pf::Add(vec![b("a"), b("")]),
            Pf::Count(vec![]),
            Pf::Count(vec![b("k2")]),
            Pf::Merge(vec![b("s1"), b("s2")]),
            Pf::Debug(Debug::GetReg),
            Pf::Debug(Debug::Decode),
            Pf::Debug(Debug::Encoding),
            Pf::Debug(Debug::ToDense),
        ] {
            assert_eq!(Pf::decode(op.encode()), Some(op));
        }
        assert_eq!(Pf::decode(Bytes::from_static(&[9, 0, 0, 0, 0])), None);
        assert_eq!(Pf::decode(Bytes::from_static(&[0, 1, 0, 0, 0])), None);
    }

    #[test]
    fn add_count_merge_and_debug() {
        let mut v = MapView::default();
        let run = |v: &mut MapView, k: &str, p: Pf| v.run(k, Op::Pf(p));
        assert_eq!(run(&mut v, "h", Pf::Add(vec![])), OpReply::Int(1));
        assert_eq!(run(&mut v, "h", Pf::Add(vec![])), OpReply::Int(0));
        assert_eq!(
            run(&mut v, "h", Pf::Add(vec![b("a"), b("b")])),
            OpReply::Int(1)
        );
        assert_eq!(run(&mut v, "h", Pf::Add(vec![b("a")])), OpReply::Int(0));
        assert_eq!(run(&mut v, "h", Pf::Count(vec![])), OpReply::Int(2));
        assert_eq!(run(&mut v, "g", Pf::Add(vec![b("c")])), OpReply::Int(1));
        assert_eq!(
            run(&mut v, "h", Pf::Count(vec![b("g"), b("none")])),
            OpReply::Int(3)
        );
        assert_eq!(
            run(&mut v, "m", Pf::Merge(vec![b("h"), b("g")])),
            OpReply::Ok
        );
        assert_eq!(run(&mut v, "m", Pf::Count(vec![])), OpReply::Int(3));
        assert_eq!(
            run(&mut v, "m", Pf::Debug(Debug::Encoding)),
            OpReply::Status("sparse")
        );
        assert_eq!(run(&mut v, "m", Pf::Debug(Debug::ToDense)), OpReply::Int(1));
        assert_eq!(run(&mut v, "m", Pf::Debug(Debug::ToDense)), OpReply::Int(0));
        assert_eq!(
            run(&mut v, "m", Pf::Debug(Debug::Decode)),
            OpReply::Error(ERR_NOT_SPARSE)
        );
        assert_eq!(run(&mut v, "m", Pf::Count(vec![])), OpReply::Int(3));
        assert_eq!(
            run(&mut v, "x", Pf::Debug(Debug::Encoding)),
            OpReply::Error(ERR_NO_KEY)
        );
        v.run(
            "s",
            Op::Set {
                value: b("not an hll"),
                cond: super::super::SetCond::Always,
                expiry: super::super::Expiry::Clear,
                reply: super::super::SetReply::Ok,
            },
        );
        assert_eq!(
            run(&mut v, "s", Pf::Add(vec![b("a")])),
            OpReply::Error(hll::HllError::NotHll.message())
        );
    }
}

//! A key's typed state as bytes: what the write-ahead log, snapshots and
//! the links between nodes carry for hashes, sets and counters.
//!
//! Little-endian, length-prefixed, no padding:
//!
//! ```text
//! state:      counter floor:version ttl collection
//! counter:    [flags u8: 1 value, 2 expiry, 4 ttl_of, 8 hll, 16 hll_on]
//!             [value_len u32][value] [expire u64] version(ttl_of)
//!             [start_ts u64] version tallies(observed) tallies
//!             [hll parts if 8] [version(hll_on) if 16]
//! hll parts:  [n u32] n × ([origin u32] version(on) version [len u32][bytes])
//! tallies:    [n u32] n × ([origin u32][total i64] version)
//! version:    [commit_ts u64][origin u32]
//! ttl:        [0 none | 1 expiry (any type) | 2 hash, 3 set, 4 zset, 5 list, 6 stream expiry u8]
//!             [expire u64 if set] version
//! collection: [0] none | [1] hash: version [n u32] n × ([len u32][field] presence counter)
//!                      | [2] set:  version [n u32] n × ([len u32][member] presence)
//!                      | [3] zset: version [n u32] n × ([len u32][member] presence score)
//!                      | [4] list: version [n u32] n × (pos [len u32][value] version(set))
//!                                          [m u32] m × (pos version(removed))
//!                      | [5] stream: see `stream_codec.rs`
//! pos:        [k u32] k × ([digit i64][ts u64][origin u32][seq u32])
//! score:      [base f64 bits u64] version ftallies(observed) ftallies(totals)
//! ftallies:   [n u32] n × ([origin u32][total f64 bits u64] version)
//! presence:   dots(adds) dots(removes) version(removed_at)
//! dots:       [n u32] n × ([origin u32][ts u64])
//! ```
//!
//! Decoding never trusts a length: every count is checked against the
//! bytes left before anything is allocated, and a state that does not
//! parse whole is refused (`None`) rather than half taken. Invariants
//! (sorted tallies, normalised presences, live counts, digests) are
//! rebuilt through the types' own constructors, so a forged frame cannot
//! make a state whose merge misbehaves.

use bytes::{Buf, BufMut, Bytes};

use crate::counter::{Tallies, Tally};
use crate::hll_parts::{HllParts, Part};
use crate::key::{Collection, KeyState, Kind, Ttl};
use crate::list::{Pos, Slot, Step};
use crate::ormap::{Field, OrMap};
use crate::orset::{digest_of, OrSet, Peak};
use crate::zset::{FTallies, FTally, Member, Score, ZSet};
use crate::{Counter, Dots, Elem, Presence, Version};

/// The smallest encoding of one set member (a length and two empty dot
/// lists): bounds how many a count may claim.
const MIN_MEMBER: usize = 4 + 4 + 4 + 12;

impl KeyState {
    /// Appends this state's encoding to `out`.
    pub fn encode(&self, out: &mut Vec<u8>) {
        put_counter(out, &self.string);
        put_version(out, self.floor);
        match self.ttl.expire_ms {
            Some(at) => {
                out.put_u8(match self.ttl.kind {
                    Kind::Hash => 2,
                    Kind::Set => 3,
                    Kind::ZSet => 4,
                    Kind::List => 5,
                    Kind::Stream => 6,
                    Kind::None | Kind::String => 1,
                });
                out.put_u64_le(at);
            }
            None => out.put_u8(0),
        }
        put_version(out, self.ttl.version);
        match &self.collection {
            None => out.put_u8(0),
            Some(Collection::Hash(m)) => {
                out.put_u8(1);
                put_version(out, m.newest);
                out.put_u32_le(m.fields.len() as u32);
                for (name, f) in m.fields.iter() {
                    put_bytes(out, name);
                    put_presence(out, &f.presence);
                    put_counter(out, &f.value);
                }
            }
            Some(Collection::Set(s)) => {
                out.put_u8(2);
                put_version(out, s.newest);
                out.put_u32_le(s.members.len() as u32);
                for (member, p) in s.members.iter() {
                    put_bytes(out, member);
                    put_presence(out, &p);
                }
            }
            Some(Collection::ZSet(z)) => {
                out.put_u8(3);
                put_version(out, z.newest);
                out.put_u32_le(z.members.len() as u32);
                for (member, m) in z.members.iter() {
                    put_bytes(out, member);
                    put_presence(out, &m.presence);
                    put_score(out, &m.score);
                }
            }
            Some(Collection::List(l)) => {
                out.put_u8(4);
                put_version(out, l.newest);
                out.put_u32_le(l.len() as u32);
                for (p, slot) in l.entries_iter() {
                    put_pos(out, &p);
                    put_bytes(out, &slot.value);
                    put_version(out, slot.set);
                }
                out.put_u32_le(l.tombstones() as u32);
                for (p, v) in l.tombstones_iter() {
                    put_pos(out, p);
                    put_version(out, v);
                }
            }
            Some(Collection::Stream(x)) => {
                out.put_u8(5);
                x.encode(out);
            }
        }
    }

    /// The encoding as one buffer.
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut out = Vec::new();
        self.encode(&mut out);
        out
    }

    /// Decodes a state from the front of `buf` (advancing it), or `None`
    /// when the bytes are not one.
    pub fn decode(buf: &mut Bytes) -> Option<KeyState> {
        let string = get_counter(buf)?;
        let floor = get_version(buf)?;
        let (expire_ms, kind) = match get_u8(buf)? {
            0 => (None, Kind::None),
            k @ 1..=6 => (
                Some(get_u64(buf)?),
                [
                    Kind::None,
                    Kind::Hash,
                    Kind::Set,
                    Kind::ZSet,
                    Kind::List,
                    Kind::Stream,
                ][usize::from(k - 1)],
            ),
            _ => return None,
        };
        let ttl = Ttl {
            expire_ms,
            version: get_version(buf)?,
            kind,
        };
        let collection = match get_u8(buf)? {
            0 => None,
            1 => {
                let newest = get_version(buf)?;
                let n = get_count(buf, MIN_MEMBER)?;
                let mut m = OrMap {
                    newest,
                    ..OrMap::default()
                };
                let fields = m.fields.full_mut();
                fields.reserve(n);
                for _ in 0..n {
                    let name = Elem::new(&get_bytes(buf)?);
                    let f = Field {
                        presence: get_presence(buf)?,
                        value: get_counter(buf)?,
                    };
                    m.live += usize::from(f.is_live());
                    if fields.insert(name, f).is_some() {
                        return None; // a field twice: not a state we wrote
                    }
                }
                m.digest = digest_of(fields);
                m.peak.after(Peak::default(), m.live);
                m.settle();
                Some(Collection::Hash(m))
            }
            2 => {
                let newest = get_version(buf)?;
                let n = get_count(buf, MIN_MEMBER)?;
                let mut s = OrSet {
                    newest,
                    ..OrSet::default()
                };
                let members = s.members.full_mut();
                members.reserve(n);
                for _ in 0..n {
                    let member = Elem::new(&get_bytes(buf)?);
                    let p = get_presence(buf)?;
                    s.live += usize::from(p.is_live());
                    if members.insert(member, p).is_some() {
                        return None; // a member twice: not a state we wrote
                    }
                }
                s.digest = digest_of(members);
                s.peak.after(Peak::default(), s.live);
                s.settle();
                Some(Collection::Set(s))
            }
            3 => {
                let newest = get_version(buf)?;
                let n = get_count(buf, MIN_MEMBER + 8 + 12 + 8)?;
                let mut z = ZSet {
                    newest,
                    ..ZSet::default()
                };
                let members = z.members.full_mut();
                members.reserve(n);
                for _ in 0..n {
                    let member = Elem::new(&get_bytes(buf)?);
                    let m = Member {
                        presence: get_presence(buf)?,
                        score: get_score(buf)?,
                    };
                    z.live += usize::from(m.is_live());
                    if members.insert(member, m).is_some() {
                        return None; // a member twice: not a state we wrote
                    }
                }
                z.digest = digest_of(members);
                z.peak.after(Peak::default(), z.live);
                z.settle();
                Some(Collection::ZSet(z))
            }
            4 => {
                let newest = get_version(buf)?;
                let n = get_count(buf, MIN_POS + 4 + 12)?;
                let mut live = Vec::with_capacity(n);
                for _ in 0..n {
                    let p = get_pos(buf)?;
                    let value = Elem::new(&get_bytes(buf)?);
                    live.push((
                        p,
                        Slot {
                            value,
                            set: get_version(buf)?,
                        },
                    ));
                }
                let m = get_count(buf, MIN_POS + 12)?;
                let mut dead = Vec::with_capacity(m);
                for _ in 0..m {
                    let p = get_pos(buf)?;
                    dead.push((p, get_version(buf)?));
                }
                Some(Collection::List(Box::new(crate::List::from_parts(
                    live, dead, newest,
                )?)))
            }
            5 => Some(Collection::Stream(Box::new(crate::stream::Stream::decode(
                buf,
            )?))),
            _ => return None,
        };
        Some(KeyState {
            string: string.into(),
            collection,
            ttl: ttl.into(),
            floor,
        })
    }

    /// Decodes a whole buffer as one state; trailing bytes refuse it.
    pub fn from_bytes(mut buf: Bytes) -> Option<KeyState> {
        let s = KeyState::decode(&mut buf)?;
        buf.is_empty().then_some(s)
    }

    /// A digest of the whole state: equal states have equal digests, and
    /// anti-entropy compares replicas by it. The collection's share is
    /// kept current as it changes, so this costs no scan of its elements.
    pub fn digest(&self) -> u64 {
        use std::hash::BuildHasher;
        let h = foldhash::fast::FixedState::with_seed(0xd16e_57a7);
        let collection = match &self.collection {
            None => 0,
            Some(Collection::Hash(m)) => m.digest() ^ 0x4a5b,
            Some(Collection::Set(s)) => s.digest() ^ 0x5e75,
            Some(Collection::ZSet(z)) => z.digest() ^ 0x25e7,
            Some(Collection::List(l)) => l.digest() ^ 0x7157,
            Some(Collection::Stream(x)) => x.digest() ^ 0x57e4,
        };
        h.hash_one((&*self.string, self.floor, *self.ttl)) ^ collection.rotate_left(17)
    }
}

/// A version's share of a collection digest.
pub(crate) fn version_digest(v: Version) -> u64 {
    use std::hash::BuildHasher;
    foldhash::fast::FixedState::with_seed(0x7e55_10a5).hash_one(v)
}

pub(crate) fn put_version(out: &mut Vec<u8>, v: Version) {
    out.put_u64_le(v.commit_ts);
    out.put_u32_le(v.origin);
}

pub(crate) fn put_bytes(out: &mut Vec<u8>, b: &[u8]) {
    out.put_u32_le(b.len() as u32);
    out.extend_from_slice(b);
}

fn put_tallies(out: &mut Vec<u8>, t: &Tallies) {
    out.put_u32_le(t.0.len() as u32);
    for (origin, tally) in &t.0 {
        out.put_u32_le(*origin);
        out.put_i64_le(tally.total);
        put_version(out, tally.version);
    }
}

pub(crate) fn put_counter(out: &mut Vec<u8>, c: &Counter) {
    let value = c.base_value();
    let expire_ms = c.expire_ms();
    let ttl_of = c.ttl_of();
    let flags = u8::from(value.is_some())
        | (u8::from(expire_ms.is_some()) << 1)
        | (u8::from(ttl_of.is_some()) << 2)
        | (u8::from(!c.hll_parts().is_empty()) << 3)
        | (u8::from(c.hll_on_mark().is_some()) << 4);
    out.put_u8(flags);
    if let Some(v) = value {
        put_bytes(out, v);
    }
    if let Some(at) = expire_ms {
        out.put_u64_le(at);
    }
    if let Some(of) = ttl_of {
        put_version(out, of);
    }
    out.put_u64_le(c.base_start_ts());
    put_version(out, c.base_version());
    put_tallies(out, c.observed());
    put_tallies(out, c.tallies());
    let parts = c.hll_parts();
    if !parts.is_empty() {
        out.put_u32_le(parts.len() as u32);
        for (origin, p) in parts.iter() {
            out.put_u32_le(*origin);
            put_version(out, p.on);
            put_version(out, p.version);
            put_bytes(out, &p.bytes);
        }
    }
    if let Some(on) = c.hll_on_mark() {
        put_version(out, on);
    }
}

fn put_dots(out: &mut Vec<u8>, d: &Dots) {
    out.put_u32_le(d.0.len() as u32);
    for (origin, ts) in &d.0 {
        out.put_u32_le(*origin);
        out.put_u64_le(*ts);
    }
}

pub(crate) fn put_presence(out: &mut Vec<u8>, p: &Presence) {
    put_dots(out, &p.adds);
    put_dots(out, p.removes());
    put_version(out, p.removed_at());
}

fn put_ftallies(out: &mut Vec<u8>, t: &FTallies) {
    out.put_u32_le(t.0.len() as u32);
    for (origin, tally) in &t.0 {
        out.put_u32_le(*origin);
        out.put_u64_le(tally.total.to_bits());
        put_version(out, tally.version);
    }
}

pub(crate) fn put_score(out: &mut Vec<u8>, s: &Score) {
    out.put_u64_le(s.base().to_bits());
    put_version(out, s.version());
    put_ftallies(out, s.observed());
    put_ftallies(out, s.totals());
}

fn get_ftallies(buf: &mut Bytes) -> Option<FTallies> {
    let n = get_count(buf, 4 + 8 + 12)?;
    let mut t = FTallies::default();
    for _ in 0..n {
        let origin = get_u32(buf)?;
        let total = f64::from_bits(get_u64(buf)?);
        let version = get_version(buf)?;
        t.offer(origin, FTally { total, version });
    }
    Some(t)
}

pub(crate) fn get_score(buf: &mut Bytes) -> Option<Score> {
    let base = f64::from_bits(get_u64(buf)?);
    let version = get_version(buf)?;
    let observed = get_ftallies(buf)?;
    let totals = get_ftallies(buf)?;
    Some(Score::from_parts(base, version, observed, totals))
}

/// The smallest encoding of a position: a count and one step.
const MIN_POS: usize = 4 + 24;

fn put_pos(out: &mut Vec<u8>, p: &Pos) {
    out.put_u32_le(p.steps().len() as u32);
    for s in p.steps() {
        out.put_i64_le(s.digit);
        out.put_u64_le(s.ts);
        out.put_u32_le(s.origin);
        out.put_u32_le(s.seq);
    }
}

fn get_pos(buf: &mut Bytes) -> Option<Pos> {
    let k = get_count(buf, 24)?;
    let mut steps = smallvec::SmallVec::<[Step; 1]>::with_capacity(k);
    for _ in 0..k {
        steps.push(Step {
            digit: get_u64(buf)? as i64,
            ts: get_u64(buf)?,
            origin: get_u32(buf)?,
            seq: get_u32(buf)?,
        });
    }
    Pos::from_steps(&steps)
}

pub(crate) fn get_u8(buf: &mut Bytes) -> Option<u8> {
    (buf.remaining() >= 1).then(|| buf.get_u8())
}

fn get_u32(buf: &mut Bytes) -> Option<u32> {
    (buf.remaining() >= 4).then(|| buf.get_u32_le())
}

fn get_u64(buf: &mut Bytes) -> Option<u64> {
    (buf.remaining() >= 8).then(|| buf.get_u64_le())
}

/// A count of items each at least `min` bytes long, refused when the
/// bytes left cannot hold that many.
pub(crate) fn get_count(buf: &mut Bytes, min: usize) -> Option<usize> {
    let n = get_u32(buf)? as usize;
    (n.saturating_mul(min) <= buf.remaining()).then_some(n)
}

pub(crate) fn get_version(buf: &mut Bytes) -> Option<Version> {
    let ts = get_u64(buf)?;
    Some(Version::new(ts, get_u32(buf)?))
}

pub(crate) fn get_bytes(buf: &mut Bytes) -> Option<Bytes> {
    let n = get_u32(buf)? as usize;
    (buf.remaining() >= n).then(|| buf.split_to(n))
}

fn get_tallies(buf: &mut Bytes) -> Option<Tallies> {
    let n = get_count(buf, 4 + 8 + 12)?;
    let mut t = Tallies::default();
    for _ in 0..n {
        let origin = get_u32(buf)?;
        let total = get_u64(buf)? as i64;
        let version = get_version(buf)?;
        t.offer(origin, Tally { total, version });
    }
    Some(t)
}

pub(crate) fn get_counter(buf: &mut Bytes) -> Option<Counter> {
    let flags = get_u8(buf)?;
    if flags > 31 {
        return None;
    }
    let value = if flags & 1 != 0 {
        Some(Elem::new(&get_bytes(buf)?))
    } else {
        None
    };
    let expire_ms = if flags & 2 != 0 {
        Some(get_u64(buf)?)
    } else {
        None
    };
    let ttl_of = if flags & 4 != 0 {
        Some(get_version(buf)?)
    } else {
        None
    };
    let start_ts = get_u64(buf)?;
    let version = get_version(buf)?;
    let observed = get_tallies(buf)?;
    let tallies = get_tallies(buf)?;
    let mut hll = HllParts::default();
    if flags & 8 != 0 {
        let n = get_count(buf, 4 + 12 + 12 + 4)?;
        for _ in 0..n {
            let origin = get_u32(buf)?;
            let on = get_version(buf)?;
            let version = get_version(buf)?;
            let bytes = get_bytes(buf)?;
            hll.offer(origin, Part { on, version, bytes });
        }
        if hll.is_empty() {
            return None;
        }
    }
    let hll_on = if flags & 16 != 0 {
        Some(get_version(buf)?)
    } else {
        None
    };
    Some(
        Counter::from_parts(value, expire_ms, start_ts, version, observed, tallies)
            .with_ttl_of(ttl_of)
            .with_hll(hll)
            .with_hll_on(hll_on),
    )
}

fn get_dots(buf: &mut Bytes) -> Option<Dots> {
    let n = get_count(buf, 12)?;
    let mut d = Dots::default();
    for _ in 0..n {
        let origin = get_u32(buf)?;
        d.raise(Version::new(get_u64(buf)?, origin));
    }
    Some(d)
}

pub(crate) fn get_presence(buf: &mut Bytes) -> Option<Presence> {
    let adds = get_dots(buf)?;
    let removes = get_dots(buf)?;
    let removed_at = get_version(buf)?;
    // Normalised as it is built (an add a remove covers is gone).
    Some(Presence::of(adds, removes, removed_at))
}

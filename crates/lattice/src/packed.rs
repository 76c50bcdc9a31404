//! Small collections packed in one buffer: what keeps a hash, a set or a
//! sorted set of a few short elements near Redis's listpack size (issue
//! 43).
//!
//! A collection's entries are either a map ([`Entries::Full`]: an
//! `IndexMap` of elements to their CRDT state, ~130 bytes an entry before
//! its bytes) or, while it has at most [`MAX_ENTRIES`] entries none longer
//! than [`MAX_ELEM`] bytes, one buffer ([`Entries::Packed`]; an empty
//! collection is an empty buffer, no allocation):
//!
//! ```text
//! buffer: [base ts u64 LE] entry*
//! entry:  [key len varint][key][state len varint][state]
//! ```
//!
//! An entry's state is its type's compact encoding ([`Pack`]): one written
//! by one add is a tag, its origin and its timestamp as a zigzag varint
//! from `base` (a few bytes), then its value's bytes; any other state (a
//! remove observed, concurrent adds of two regions, increments) is the tag
//! 1 and the log's encoding of it. The two forms are the same lattice:
//! equal states compare equal and have the same digest whichever form
//! each replica holds, and merges give the same result (the property
//! tests in `tests/packed.rs`). Reads scan the buffer (as Redis scans a
//! listpack: O(n) within the limits); a merge of a delta edits the entries
//! it touches in place. A collection that outgrows the limits turns into
//! the map, and back once it fits them again (its removes collected, or
//! emptied). Redis keeps a converted key in its hash table until the key
//! goes; `OBJECT ENCODING` answers as Redis would whatever the form (from
//! the collection's `Peak`).
//!
//! Hand-written: the encoding is Elsa's (dots and values of its lattices),
//! no crate packs them.

use std::borrow::Cow;

use crate::orset::{entry_digest, Map, Shows};
use crate::{Crdt, Elem, Ts, Version};

/// Most entries a packed collection holds (Redis's
/// `hash-max-listpack-entries` and `zset-max-listpack-entries`).
pub const MAX_ENTRIES: usize = 128;
/// Longest element (and hash value) a packed collection holds (Redis's
/// `hash-max-listpack-value`).
pub const MAX_ELEM: usize = 64;

thread_local! {
    static PACKING: std::cell::Cell<bool> = std::cell::Cell::new(packing_default());
}

/// On unless the environment says `ELSA_PACKING=0` (measurements of the
/// map form, and the CRDT checker's runs with and without; see
/// [`set_packing`]).
fn packing_default() -> bool {
    static DEFAULT: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *DEFAULT.get_or_init(|| !std::env::var("ELSA_PACKING").is_ok_and(|v| v == "0"))
}

/// Whether collections changed on this thread pack: on by default
/// (`ELSA_PACKING=0` turns it off for a process). It was off for a day
/// (2026-11-29/30) while the two-region CRDT checker
/// (`tests/crdt_concurrent.rs`, seed 17) undid an acknowledged remove in
/// 5 of 15 runs with packing and none of 11 without: two races of
/// tombstone collection (a bucket proven while a peer held its remove
/// only parked, and a restarted node's resent commits merged below the
/// collection floor; `docs/regions.md`, *Tombstones*), which packing's
/// timing made likelier. Not the packed form's: the property tests prove
/// both forms one lattice, and a list (never packed) lost a `DEL` too.
#[doc(hidden)]
pub fn set_packing(on: bool) {
    PACKING.with(|p| p.set(on));
}

/// An entry state's compact encoding (see the module doc).
pub(crate) trait Pack: Sized + Clone + Default + Crdt + std::hash::Hash + Shows {
    /// True when the state may live in a packed collection.
    fn packable(&self) -> bool;
    /// Appends its encoding, timestamps relative to `base`.
    fn pack(&self, base: Ts, out: &mut Vec<u8>);
    /// Decodes what [`Pack::pack`] wrote (a buffer this crate built).
    fn unpack(b: &[u8], base: Ts) -> Self;
    /// True while the element is in the collection.
    fn live(&self) -> bool;
    /// Its newest timestamp (what a packed buffer's base is chosen from).
    fn stamp(&self) -> Ts;
}

/// The entries of a collection (see the module doc).
#[derive(Clone)]
pub(crate) enum Entries<V> {
    /// Boxed: a collection's handle is part of every key's state, and a
    /// map is seven words where a box is one.
    Full(Box<Map<Elem, V>>),
    Packed(Packed),
}

/// Packed entries: the buffer and how many entries it holds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Packed {
    buf: Box<[u8]>,
    len: u32,
}

/// Empty: packed, with no buffer (and no allocation) yet.
impl<V> Default for Entries<V> {
    fn default() -> Self {
        Entries::Packed(Packed {
            buf: Box::default(),
            len: 0,
        })
    }
}

/// One entry found in a buffer: where it starts and ends, its key and its
/// state's bytes.
pub(crate) struct Slot<'a> {
    start: usize,
    end: usize,
    key: &'a [u8],
    state: &'a [u8],
}

impl Packed {
    /// The timestamps' base (0 while the buffer is empty, before its
    /// header is written).
    fn base(&self) -> Ts {
        self.buf
            .get(..8)
            .map_or(0, |b| u64::from_le_bytes(b.try_into().expect("8 bytes")))
    }

    fn slots(&self) -> Slots<'_> {
        Slots {
            buf: &self.buf,
            at: 8,
        }
    }

    fn find(&self, key: &[u8]) -> Option<Slot<'_>> {
        self.slots().find(|s| s.key == key)
    }

    /// Heap bytes of the buffer.
    pub(crate) fn heap_bytes(&self) -> usize {
        self.buf.len()
    }
}

/// The entries of a buffer, in order.
pub(crate) struct Slots<'a> {
    buf: &'a [u8],
    at: usize,
}

impl<'a> Iterator for Slots<'a> {
    type Item = Slot<'a>;

    fn next(&mut self) -> Option<Slot<'a>> {
        let (buf, start) = (self.buf, self.at);
        if start >= buf.len() {
            return None;
        }
        let mut at = start;
        let klen = get_varint(buf, &mut at) as usize;
        let key = &buf[at..at + klen];
        at += klen;
        let slen = get_varint(buf, &mut at) as usize;
        let state = &buf[at..at + slen];
        at += slen;
        self.at = at;
        Some(Slot {
            start,
            end: at,
            key,
            state,
        })
    }
}

/// Appends one entry.
fn put_entry<V: Pack>(out: &mut Vec<u8>, key: &[u8], v: &V, base: Ts, scratch: &mut Vec<u8>) {
    scratch.clear();
    v.pack(base, scratch);
    put_varint(out, key.len() as u64);
    out.extend_from_slice(key);
    put_varint(out, scratch.len() as u64);
    out.extend_from_slice(scratch);
}

/// Iterates a collection's entries: each element's bytes and its state.
pub(crate) enum Iter<'a, V> {
    Full(indexmap::map::Iter<'a, Elem, V>),
    Packed(Slots<'a>, Ts),
}

impl<'a, V: Pack> Iterator for Iter<'a, V> {
    type Item = (&'a [u8], Cow<'a, V>);

    fn next(&mut self) -> Option<Self::Item> {
        match self {
            Iter::Full(it) => it.next().map(|(k, v)| (&k[..], Cow::Borrowed(v))),
            Iter::Packed(it, base) => it
                .next()
                .map(|s| (s.key, Cow::Owned(V::unpack(s.state, *base)))),
        }
    }
}

impl<V: Pack> Entries<V> {
    /// The map form holding `m`.
    pub(crate) fn from_map(m: Map<Elem, V>) -> Entries<V> {
        Entries::Full(Box::new(m))
    }

    /// The entries as a map, whatever the form.
    pub(crate) fn into_map(mut self) -> Map<Elem, V> {
        std::mem::take(self.full_mut())
    }

    /// How many entries (removed elements' included).
    pub(crate) fn len(&self) -> usize {
        match self {
            Entries::Full(m) => m.len(),
            Entries::Packed(p) => p.len as usize,
        }
    }

    /// True when it holds no entry.
    pub(crate) fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The state of `key`'s entry.
    pub(crate) fn get(&self, key: &[u8]) -> Option<Cow<'_, V>> {
        match self {
            Entries::Full(m) => m.get(key).map(Cow::Borrowed),
            Entries::Packed(p) => p
                .find(key)
                .map(|s| Cow::Owned(V::unpack(s.state, p.base()))),
        }
    }

    /// True when `key` has an entry.
    pub(crate) fn contains_key(&self, key: &[u8]) -> bool {
        match self {
            Entries::Full(m) => m.contains_key(key),
            Entries::Packed(p) => p.find(key).is_some(),
        }
    }

    /// Every entry, in the order they were added.
    pub(crate) fn iter(&self) -> Iter<'_, V> {
        match self {
            Entries::Full(m) => Iter::Full(m.iter()),
            Entries::Packed(p) => Iter::Packed(p.slots(), p.base()),
        }
    }

    /// The map form, turned into it first when packed.
    pub(crate) fn full_mut(&mut self) -> &mut Map<Elem, V> {
        if let Entries::Packed(p) = self {
            let base = p.base();
            let mut m = Map::default();
            m.reserve(p.len as usize);
            for s in p.slots() {
                m.insert(Elem::new(s.key), V::unpack(s.state, base));
            }
            *self = Entries::Full(Box::new(m));
        }
        match self {
            Entries::Full(m) => m,
            Entries::Packed(_) => unreachable!("unpacked above"),
        }
    }

    /// The packed form, when this is it.
    pub(crate) fn packed(&self) -> Option<&Packed> {
        match self {
            Entries::Packed(p) => Some(p),
            Entries::Full(_) => None,
        }
    }

    /// Packs the map form when it fits the limits (after a change).
    pub(crate) fn settle(&mut self) {
        let Entries::Full(m) = self else {
            return;
        };
        if m.len() > MAX_ENTRIES
            || !PACKING.with(|p| p.get())
            || !m.iter().all(|(k, v)| k.len() <= MAX_ELEM && v.packable())
        {
            return;
        }
        let base = m.values().map(V::stamp).max().unwrap_or(0);
        let mut out = Vec::with_capacity(8 + m.len() * 16);
        out.extend_from_slice(&base.to_le_bytes());
        let mut scratch = Vec::new();
        for (k, v) in m.iter() {
            put_entry(&mut out, k, v, base, &mut scratch);
        }
        *self = Entries::Packed(Packed {
            buf: out.into_boxed_slice(),
            len: m.len() as u32,
        });
    }

    /// Merges `theirs` in, keeping `live` and `digest` current: in place
    /// while the result stays packed, else into the map form (packed again
    /// if it fits); true if anything changed. (A hash's and a set's merge;
    /// a sorted set keeps its order index beside, so it merges itself.)
    pub(crate) fn merge_in(
        &mut self,
        theirs: Entries<V>,
        live: &mut usize,
        digest: &mut u64,
    ) -> bool {
        let theirs = theirs.into_map();
        if let Some(changed) = self.merge_packed(&theirs, live, digest) {
            return changed;
        }
        let changed = crate::orset::merge_entries(self.full_mut(), live, digest, theirs, V::live);
        self.settle();
        changed
    }

    /// Merges `theirs` into the packed form in place, keeping `live` and
    /// `digest` current (as `orset::merge_entries` does for the map);
    /// `None`, with nothing changed, when the result would not fit the
    /// limits (the caller merges into the map form instead).
    pub(crate) fn merge_packed(
        &mut self,
        theirs: &Map<Elem, V>,
        live: &mut usize,
        digest: &mut u64,
    ) -> Option<bool> {
        let Entries::Packed(p) = self else {
            return None;
        };
        if !PACKING.with(|p| p.get()) {
            return None;
        }
        if p.buf.is_empty() {
            // The first entries: the header, based on their newest stamp.
            let base = theirs.values().map(V::stamp).max().unwrap_or(0);
            p.buf = base.to_le_bytes().to_vec().into_boxed_slice();
        }
        let base = p.base();
        // First what each entry becomes, so nothing changes unless all fit:
        // entries replaced (where, old state, new state) and entries added.
        let mut replaced: Vec<((usize, usize), &Elem, V, V)> = Vec::new();
        let mut added: Vec<(&Elem, &V)> = Vec::new();
        for (k, v) in theirs.iter() {
            if k.len() > MAX_ELEM {
                return None;
            }
            match p.find(k) {
                Some(s) => {
                    let old = V::unpack(s.state, base);
                    let mut new = old.clone();
                    if new.merge(v.clone()) {
                        if !new.packable() {
                            return None;
                        }
                        replaced.push(((s.start, s.end), k, old, new));
                    }
                }
                None if v.packable() => added.push((k, v)),
                None => return None,
            }
        }
        if p.len as usize + added.len() > MAX_ENTRIES {
            return None;
        }
        if replaced.is_empty() && added.is_empty() {
            return Some(false);
        }
        let mut buf = std::mem::take(&mut p.buf).into_vec();
        let mut scratch = Vec::new();
        // From the back, so the offsets not yet used stay valid.
        replaced.sort_by_key(|((start, _), ..)| std::cmp::Reverse(*start));
        for ((start, end), k, old, new) in replaced {
            *digest ^= entry_digest(&&k[..], &old) ^ entry_digest(&&k[..], &new);
            match (old.live(), new.live()) {
                (false, true) => *live += 1,
                (true, false) => *live -= 1,
                _ => {}
            }
            let mut entry = Vec::new();
            put_entry(&mut entry, k, &new, base, &mut scratch);
            buf.splice(start..end, entry);
        }
        for (k, v) in &added {
            *live += usize::from(v.live());
            *digest ^= entry_digest(&&k[..], *v);
            put_entry(&mut buf, k, *v, base, &mut scratch);
        }
        p.len += added.len() as u32;
        p.buf = buf.into_boxed_slice();
        Some(true)
    }
}

/// Packed or not, the entries as a map of elements to their states (a
/// buffer's bytes tell nobody anything).
impl<V: Pack + std::fmt::Debug> std::fmt::Debug for Entries<V> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let form = if self.packed().is_some() {
            "Packed"
        } else {
            "Full"
        };
        f.write_str(form)?;
        f.debug_map()
            .entries(self.iter().map(|(k, v)| (String::from_utf8_lossy(k), v)))
            .finish()
    }
}

impl<V: Pack + PartialEq> PartialEq for Entries<V> {
    /// Equal when they hold the same entries, whatever the form or order.
    fn eq(&self, other: &Self) -> bool {
        self.len() == other.len()
            && self
                .iter()
                .all(|(k, v)| other.get(k).is_some_and(|o| *o == *v))
    }
}

/// Appends `v` as a LEB128 varint.
pub(crate) fn put_varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// Reads a varint at `*at` (a buffer this crate wrote).
pub(crate) fn get_varint(b: &[u8], at: &mut usize) -> u64 {
    let mut v = 0u64;
    let mut shift = 0;
    loop {
        let byte = b[*at];
        *at += 1;
        v |= u64::from(byte & 0x7f) << shift;
        if byte < 0x80 {
            return v;
        }
        shift += 7;
    }
}

/// `ts` against `base`, zigzag-encoded (small either side of it).
pub(crate) fn put_ts(out: &mut Vec<u8>, ts: Ts, base: Ts) {
    let d = ts.wrapping_sub(base) as i64;
    put_varint(out, ((d << 1) ^ (d >> 63)) as u64);
}

/// Reads what [`put_ts`] wrote.
pub(crate) fn get_ts(b: &[u8], at: &mut usize, base: Ts) -> Ts {
    let z = get_varint(b, at);
    let d = ((z >> 1) as i64) ^ -((z & 1) as i64);
    base.wrapping_add(d as u64)
}

/// A version as origin and timestamp.
pub(crate) fn put_version(out: &mut Vec<u8>, v: Version, base: Ts) {
    put_varint(out, u64::from(v.origin));
    put_ts(out, v.commit_ts, base);
}

/// Reads what [`put_version`] wrote.
pub(crate) fn get_version(b: &[u8], at: &mut usize, base: Ts) -> Version {
    let origin = get_varint(b, at) as u32;
    Version::new(get_ts(b, at, base), origin)
}

//! One key's lattice, packed into a single heap allocation.
//!
//! Memory is a product goal (≤ 1.5× Redis for the same data), so a key, its
//! value, its origin and its optional expiry share one boxed byte slice and
//! the table slot holds only that pointer plus the two timestamps (32 bytes).
//! Layout of `data`:
//!
//! ```text
//! [flags u8][origin u32][key_len u32][access u24][expire_ms u64 if HAS_TTL]
//! [ttl_of: commit_ts u64, origin u32 if TTL_OF][key][value]
//! ```
//!
//! `ttl_of` marks a state that changed only the TTL of the value written
//! as that version (EXPIRE, PERSIST…): it orders by that version first
//! (`Current::order`), so a concurrent write of the value wins over it.
//!
//! `access` is the key's eviction clock, Redis's 24 `lru` bits of an object:
//! its last access in seconds, or (under an LFU policy) its last decrement
//! in minutes and a logarithmic access counter (`crate::evict`). It lives in
//! the record's own allocation, not the slot, so the slot stays 32 bytes.
//!
//! A value of [`SHARED_MIN`] bytes or more is not copied into the record:
//! the record keeps a handle on the (reference-counted) buffer it arrived
//! in — the client's request, or a peer's frame — in place of `[value]`,
//! so a 512 MiB `SET` is stored without a copy and `GET` answers it without
//! one either (Redis keeps big strings by reference the same way).
//!
//! A key of a data type that merges element by element (a hash, a set, a
//! string that was incremented: [`KeyState`]) keeps that state behind a
//! pointer in the same place (flag `TYPED`): the record's version is then
//! the state's newest write, and its expiry lives in the state.

use std::sync::Arc;

use bytes::Bytes;
use elsa_lattice::{KeyState, NodeId, Ts, Version};

const TOMBSTONE: u8 = 1;
const HAS_TTL: u8 = 2;
/// `[value]` is a pointer to a boxed [`Bytes`] owned by the record.
const SHARED: u8 = 4;
/// Written by a commit of several keys, all on this shard (see [`Unit`]).
const UNIT_HERE: u8 = 8;
/// Written by a commit whose keys span shards (see [`Unit`]).
const UNIT_SHARDS: u8 = 16;
/// `[value]` is a pointer to a boxed `Arc<KeyState>` owned by the record.
const TYPED: u8 = 32;
/// The state changed only the TTL of an earlier write (`ttl_of` follows
/// the expiry).
const TTL_OF: u8 = 64;
const HEADER: usize = 1 + 4 + 4 + 3;
/// Where the access clock sits in `data`.
const ACCESS: usize = 9;
const PTR: usize = std::mem::size_of::<usize>();

/// Values at least this long are kept by reference rather than copied.
pub const SHARED_MIN: usize = 1 << 20;

/// Which kind of commit wrote a state: what another region must wait for
/// before it shows it (issue 12, item 13: atomic visibility across
/// regions; `docs/regions.md`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Unit {
    /// A commit of one key: shown as soon as it arrives.
    #[default]
    None,
    /// A commit of several keys, all on one shard of the writing node: its
    /// other writes travel in the same gossip frame (the sender puts them
    /// all in every frame that carries one).
    Here,
    /// A commit across shards: its transaction record (`elsa_txn::record`)
    /// holds every write, and travels like any key.
    Shards,
}

impl Unit {
    /// Its number on the wire (`wire::Lattice::unit`).
    pub fn code(self) -> u32 {
        match self {
            Unit::None => 0,
            Unit::Here => 1,
            Unit::Shards => 2,
        }
    }

    /// From its number on the wire; an unknown one is treated as none.
    pub fn from_code(code: u32) -> Unit {
        match code {
            1 => Unit::Here,
            2 => Unit::Shards,
            _ => Unit::None,
        }
    }
}

/// What a key of this shape costs in a shard: its table slot, its
/// record's allocation and, for a big value kept by reference, that
/// buffer and its handle. MEMORY USAGE answers this; a record's
/// [`Record::heap_size`] is the allocation part of it.
pub fn footprint(key_len: usize, value_len: usize, has_ttl: bool) -> usize {
    let ttl = if has_ttl { 8 } else { 0 };
    let value = if value_len >= SHARED_MIN {
        PTR + std::mem::size_of::<Bytes>() + value_len
    } else {
        value_len
    };
    // The slot: the record itself plus hashbrown's control byte.
    std::mem::size_of::<Record>() + 1 + HEADER + ttl + key_len + value
}

/// A key's current lattice state as stored in a shard table.
pub struct Record {
    data: Box<[u8]>,
    /// When the writing transaction committed.
    pub commit_ts: Ts,
    /// When the writing transaction started.
    pub start_ts: Ts,
}

impl Record {
    /// Packs a state whose value arrived as `value`: a big one is kept by
    /// reference (see [`SHARED_MIN`]), a small one copied in.
    pub fn new_shared(
        key: &[u8],
        value: Option<&Bytes>,
        expire_ms: Option<u64>,
        ttl_of: Option<Version>,
        start_ts: Ts,
        version: Version,
    ) -> Record {
        match value {
            Some(v) if v.len() >= SHARED_MIN => {
                let mut r =
                    Record::packed(key, Some(&[0; PTR]), expire_ms, ttl_of, start_ts, version);
                let ptr = Box::into_raw(Box::new(v.clone())) as usize;
                let at = r.data.len() - PTR;
                r.data[at..].copy_from_slice(&ptr.to_le_bytes());
                r.data[0] |= SHARED;
                r
            }
            _ => Record::packed(
                key,
                value.map(|v| &v[..]),
                expire_ms,
                ttl_of,
                start_ts,
                version,
            ),
        }
    }

    /// Packs a typed state (see the module doc); its version is the
    /// state's newest write.
    pub fn new_typed(key: &[u8], state: Arc<KeyState>, start_ts: Ts) -> Record {
        let version = state.newest();
        let mut r = Record::new(key, Some(&[0; PTR]), None, start_ts, version);
        let ptr = Box::into_raw(Box::new(state)) as usize;
        let at = r.data.len() - PTR;
        r.data[at..].copy_from_slice(&ptr.to_le_bytes());
        r.data[0] |= TYPED;
        r
    }

    fn typed_ptr(&self) -> Option<*mut Arc<KeyState>> {
        if self.flags() & TYPED == 0 {
            return None;
        }
        let at = self.data.len() - PTR;
        let mut raw = [0u8; PTR];
        raw.copy_from_slice(&self.data[at..]);
        Some(usize::from_le_bytes(raw) as *mut Arc<KeyState>)
    }

    /// The typed state, if this record holds one.
    pub fn typed(&self) -> Option<&Arc<KeyState>> {
        // SAFETY: set by `new_typed` from `Box::into_raw` of an `Arc` this
        // record owns until it is dropped (see `Drop`).
        self.typed_ptr().map(|p| unsafe { &*p })
    }

    /// The typed state, to change in place: the caller then calls
    /// [`Record::restamp`] so the record's version follows the state.
    pub fn typed_mut(&mut self) -> Option<&mut Arc<KeyState>> {
        // SAFETY: as in `typed`; `&mut self` makes the access exclusive.
        self.typed_ptr().map(|p| unsafe { &mut *p })
    }

    /// After a change of the typed state: the record's version becomes
    /// its newest write, written by a transaction started at `start_ts`.
    pub fn restamp(&mut self, start_ts: Ts) {
        let Some(v) = self.typed().map(|s| s.newest()) else {
            return;
        };
        if v != self.version() {
            self.start_ts = start_ts;
        }
        self.commit_ts = v.commit_ts;
        self.data[1..5].copy_from_slice(&v.origin.to_le_bytes());
    }

    /// When what the record shows at `now_ms` expires, plain or typed
    /// (at 0: its TTL as stored, even one already passed).
    pub fn expiry(&self, now_ms: u64) -> Option<u64> {
        self.expire_ms()
            .or_else(|| self.typed().and_then(|t| t.expire_ms(now_ms)))
    }

    /// True when the collector may have work on this record, now or
    /// later: a tombstone, a key with a TTL, or a typed state that shows
    /// nothing, will stop showing anything, or keeps removed entries.
    /// Anything else stays as it is until a write replaces it, so the
    /// sweep passes it by (see `Table::sweep_segments`).
    pub fn needs_upkeep(&self) -> bool {
        match self.typed() {
            // Expiry only ever hides more as time goes on, so what shows
            // nothing at the end of time is what empties or expires.
            Some(s) => s.has_removed_entries() || s.kind(u64::MAX) == elsa_lattice::Kind::None,
            None => self.flags() & (TOMBSTONE | HAS_TTL) != 0,
        }
    }

    /// True for a typed record.
    pub fn is_typed(&self) -> bool {
        self.flags() & TYPED != 0
    }

    /// True when the key shows a value at `now_ms`, of any type.
    pub fn is_live(&self, now_ms: u64) -> bool {
        match self.typed() {
            Some(s) => s.kind(now_ms) != elsa_lattice::Kind::None,
            None => self.live_value(now_ms).is_some(),
        }
    }

    /// The type the key shows at `now_ms`, as Redis's TYPE names it.
    pub fn kind_name(&self, now_ms: u64) -> &'static str {
        match self.typed() {
            Some(s) => s.kind(now_ms).name(),
            None if self.live_value(now_ms).is_some() => "string",
            None => "none",
        }
    }

    /// What the record adds to its anti-entropy bucket's digest besides
    /// its key and version: a typed state's content (two replicas can hold
    /// different elements under one newest version), nothing for a string
    /// (one version is one value).
    pub fn content_digest(&self) -> u64 {
        self.typed().map_or(0, |s| s.digest())
    }

    /// The handle of a shared value (see [`Record::new_shared`]).
    fn shared(&self) -> Option<&Bytes> {
        if self.flags() & SHARED == 0 {
            return None;
        }
        let at = self.data.len() - PTR;
        let mut raw = [0u8; PTR];
        raw.copy_from_slice(&self.data[at..]);
        // SAFETY: set by `new_shared` from `Box::into_raw` of a `Bytes`
        // this record owns until it is dropped (see `Drop`); records are
        // never cloned, and the pointer bytes of `data` never change.
        Some(unsafe { &*(usize::from_le_bytes(raw) as *const Bytes) })
    }

    /// The value as `Bytes`: the shared buffer itself for a big value (no
    /// copy), a copy of a small one. `None` for a tombstone.
    pub fn value_bytes(&self) -> Option<Bytes> {
        if let Some(b) = self.shared() {
            return Some(b.clone());
        }
        self.value().map(Bytes::copy_from_slice)
    }

    /// Packs a state. `value == None` is a tombstone.
    pub fn new(
        key: &[u8],
        value: Option<&[u8]>,
        expire_ms: Option<u64>,
        start_ts: Ts,
        version: Version,
    ) -> Record {
        Record::packed(key, value, expire_ms, None, start_ts, version)
    }

    /// [`Record::new`] of a state that may be a TTL change (`ttl_of`).
    fn packed(
        key: &[u8],
        value: Option<&[u8]>,
        expire_ms: Option<u64>,
        ttl_of: Option<Version>,
        start_ts: Ts,
        version: Version,
    ) -> Record {
        let mut flags = 0;
        if value.is_none() {
            flags |= TOMBSTONE;
        }
        if expire_ms.is_some() {
            flags |= HAS_TTL;
        }
        // A tombstone is never a TTL change.
        let ttl_of = ttl_of.filter(|_| value.is_some());
        if ttl_of.is_some() {
            flags |= TTL_OF;
        }
        let val = value.unwrap_or(&[]);
        let ttl_len =
            if expire_ms.is_some() { 8 } else { 0 } + if ttl_of.is_some() { 12 } else { 0 };
        let mut data = Vec::with_capacity(HEADER + ttl_len + key.len() + val.len());
        data.push(flags);
        data.extend_from_slice(&version.origin.to_le_bytes());
        data.extend_from_slice(&(key.len() as u32).to_le_bytes());
        data.extend_from_slice(&[0; 3]);
        if let Some(ms) = expire_ms {
            data.extend_from_slice(&ms.to_le_bytes());
        }
        if let Some(v) = ttl_of {
            data.extend_from_slice(&v.commit_ts.to_le_bytes());
            data.extend_from_slice(&v.origin.to_le_bytes());
        }
        data.extend_from_slice(key);
        data.extend_from_slice(val);
        Record {
            data: data.into_boxed_slice(),
            commit_ts: version.commit_ts,
            start_ts,
        }
    }

    fn flags(&self) -> u8 {
        self.data[0]
    }

    /// The eviction clock (24 bits; see the module doc).
    pub fn access(&self) -> u32 {
        u32::from_le_bytes([
            self.data[ACCESS],
            self.data[ACCESS + 1],
            self.data[ACCESS + 2],
            0,
        ])
    }

    /// Sets the eviction clock (its low 24 bits). Not part of the
    /// lattice: merges, digests and the log ignore it.
    pub fn set_access(&mut self, clock: u32) {
        self.data[ACCESS..ACCESS + 3].copy_from_slice(&clock.to_le_bytes()[..3]);
    }

    /// Marks which kind of commit wrote this state.
    pub fn with_unit(mut self, unit: Unit) -> Record {
        self.set_unit(unit);
        self
    }

    /// A plain record's state as a typed one: its value (or tombstone) as
    /// the base of a string that has seen no increments — what it merges
    /// as when a typed state meets it.
    pub fn as_typed(&self) -> KeyState {
        if let Some(s) = self.typed() {
            return (**s).clone();
        }
        KeyState::of_string(elsa_lattice::Counter::default().set(
            self.value_bytes(),
            self.expire_ms(),
            self.start_ts,
            self.version(),
        ))
    }

    /// Marks, in place, which kind of commit wrote this state.
    pub fn set_unit(&mut self, unit: Unit) {
        self.data[0] &= !(UNIT_HERE | UNIT_SHARDS);
        self.data[0] |= match unit {
            Unit::None => 0,
            Unit::Here => UNIT_HERE,
            Unit::Shards => UNIT_SHARDS,
        };
    }

    /// Which kind of commit wrote this state.
    pub fn unit(&self) -> Unit {
        match self.flags() & (UNIT_HERE | UNIT_SHARDS) {
            UNIT_HERE => Unit::Here,
            UNIT_SHARDS => Unit::Shards,
            _ => Unit::None,
        }
    }

    fn body_start(&self) -> usize {
        HEADER
            + if self.flags() & HAS_TTL != 0 { 8 } else { 0 }
            + if self.flags() & TTL_OF != 0 { 12 } else { 0 }
    }

    /// The write whose value this state only changed the TTL of, if it
    /// is such a change (see the module doc).
    pub fn ttl_of(&self) -> Option<Version> {
        if self.flags() & TTL_OF == 0 {
            return None;
        }
        let at = HEADER + if self.flags() & HAS_TTL != 0 { 8 } else { 0 };
        let mut ts = [0u8; 8];
        ts.copy_from_slice(&self.data[at..at + 8]);
        let mut origin = [0u8; 4];
        origin.copy_from_slice(&self.data[at + 8..at + 12]);
        Some(Version::new(
            u64::from_le_bytes(ts),
            u32::from_le_bytes(origin),
        ))
    }

    /// Where this plain state stands in its key's order
    /// (`Current::order`).
    pub fn order(&self) -> (Version, Version) {
        let v = self.version();
        (self.ttl_of().unwrap_or(v), v)
    }

    fn key_len(&self) -> usize {
        u32::from_le_bytes([self.data[5], self.data[6], self.data[7], self.data[8]]) as usize
    }

    /// The node that committed this state.
    pub fn origin(&self) -> NodeId {
        u32::from_le_bytes([self.data[1], self.data[2], self.data[3], self.data[4]])
    }

    /// The version (commit_ts, origin) that decides merges.
    pub fn version(&self) -> Version {
        Version::new(self.commit_ts, self.origin())
    }

    /// The key bytes.
    pub fn key(&self) -> &[u8] {
        let start = self.body_start();
        &self.data[start..start + self.key_len()]
    }

    /// The value, or `None` for a tombstone (and for a typed record:
    /// see [`Record::typed`]).
    pub fn value(&self) -> Option<&[u8]> {
        if self.is_tombstone() || self.is_typed() {
            return None;
        }
        if let Some(b) = self.shared() {
            return Some(b);
        }
        Some(&self.data[self.body_start() + self.key_len()..])
    }

    /// True for a DELETE's tombstone.
    pub fn is_tombstone(&self) -> bool {
        self.flags() & TOMBSTONE != 0
    }

    /// Absolute expiry in Unix milliseconds, if the key has a TTL.
    pub fn expire_ms(&self) -> Option<u64> {
        if self.flags() & HAS_TTL == 0 {
            return None;
        }
        let mut b = [0u8; 8];
        b.copy_from_slice(&self.data[HEADER..HEADER + 8]);
        Some(u64::from_le_bytes(b))
    }

    /// The live value at `now_ms`: `None` for tombstones and expired keys.
    pub fn live_value(&self, now_ms: u64) -> Option<&[u8]> {
        match self.expire_ms() {
            Some(at) if at <= now_ms => None,
            _ => self.value(),
        }
    }

    /// The same lattice as a tombstone: key, timestamps and version kept,
    /// value and TTL dropped (an expired value, once collected, still has
    /// to win merges against older copies the way a DELETE does).
    pub fn to_tombstone(&self) -> Record {
        match self.ttl_of() {
            // A lapsed TTL change stays one, its value dropped: as a plain
            // tombstone it would order by its own version and beat a
            // write of the value it never saw.
            Some(of) => Record::packed(
                self.key(),
                Some(&[]),
                self.expire_ms(),
                Some(of),
                self.start_ts,
                self.version(),
            ),
            None => Record::new(self.key(), None, None, self.start_ts, self.version()),
        }
    }

    /// Heap bytes this record owns (for INFO memory accounting).
    pub fn heap_size(&self) -> usize {
        self.data.len()
            + self.shared().map_or(0, Bytes::len)
            + self.typed().map_or(0, |s| PTR + s.approx_bytes())
    }
}

impl Drop for Record {
    fn drop(&mut self) {
        if let Some(p) = self.typed_ptr() {
            // SAFETY: the pointer `new_typed` leaked, reclaimed once.
            drop(unsafe { Box::from_raw(p) });
        }
        if self.flags() & SHARED != 0 {
            let at = self.data.len() - PTR;
            let mut raw = [0u8; PTR];
            raw.copy_from_slice(&self.data[at..]);
            // SAFETY: the pointer `new_shared` leaked, reclaimed once.
            drop(unsafe { Box::from_raw(usize::from_le_bytes(raw) as *mut Bytes) });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn packs_and_unpacks(key in proptest::collection::vec(any::<u8>(), 0..40),
                             value in proptest::option::of(proptest::collection::vec(any::<u8>(), 0..40)),
                             ttl in proptest::option::of(any::<u64>()),
                             start in any::<u64>(), commit in any::<u64>(), origin in any::<u32>()) {
            let r = Record::new(&key, value.as_deref(), ttl, start, Version::new(commit, origin));
            prop_assert_eq!(r.key(), &key[..]);
            prop_assert_eq!(r.value(), value.as_deref());
            prop_assert_eq!(r.expire_ms(), ttl);
            prop_assert_eq!(r.version(), Version::new(commit, origin));
            prop_assert_eq!(r.start_ts, start);
            let mut r = r;
            r.set_access(0x00ab_cdef);
            prop_assert_eq!(r.access(), 0x00ab_cdef);
            prop_assert_eq!(r.key(), &key[..]);
            prop_assert_eq!(r.value(), value.as_deref());
            prop_assert_eq!(r.expire_ms(), ttl);
        }
    }

    #[test]
    fn footprint_is_the_slot_plus_what_the_record_owns() {
        let slot = std::mem::size_of::<Record>() + 1;
        for (key_len, value_len, ttl) in [(3, 10, false), (5, 100, true), (2, SHARED_MIN, true)] {
            let value = Bytes::from(vec![b'v'; value_len]);
            let r = Record::new_shared(
                &vec![b'k'; key_len],
                Some(&value),
                ttl.then_some(7),
                None,
                1,
                Version::new(2, 3),
            );
            // A shared value's handle is one more small allocation.
            let handle = if value_len >= SHARED_MIN {
                std::mem::size_of::<Bytes>()
            } else {
                0
            };
            assert_eq!(
                footprint(key_len, value_len, ttl),
                slot + r.heap_size() + handle
            );
        }
    }

    #[test]
    fn big_values_are_kept_by_reference() {
        let big = Bytes::from(vec![7u8; SHARED_MIN]);
        let r = Record::new_shared(b"k", Some(&big), Some(5), None, 1, Version::new(2, 3));
        assert_eq!(r.value(), Some(&big[..]));
        let v = r.value_bytes().unwrap();
        assert_eq!(v.as_ptr(), big.as_ptr(), "the same buffer, not a copy");
        assert_eq!(r.key(), b"k");
        assert_eq!(r.expire_ms(), Some(5));
        assert_eq!(r.version(), Version::new(2, 3));
        let t = r.to_tombstone();
        assert_eq!(t.value(), None);
        drop(r);
        assert_eq!(v.len(), SHARED_MIN, "the handle outlives the record");
        let small = Bytes::from_static(b"small");
        let s = Record::new_shared(b"k", Some(&small), None, None, 1, Version::new(2, 3));
        assert_ne!(s.value_bytes().unwrap().as_ptr(), small.as_ptr());
    }

    #[test]
    fn a_ttl_change_keeps_the_write_it_changed_through_expiry() {
        let of = Version::new(10, 4);
        for ttl in [None, Some(100)] {
            let r = Record::new_shared(
                b"key",
                Some(&Bytes::from_static(b"value")),
                ttl,
                Some(of),
                1,
                Version::new(20, 5),
            );
            assert_eq!(r.key(), b"key");
            assert_eq!(r.value(), Some(&b"value"[..]));
            assert_eq!(r.expire_ms(), ttl);
            assert_eq!(r.ttl_of(), Some(of));
            assert_eq!(r.order(), (of, Version::new(20, 5)));
        }
        let lapsed = Record::new_shared(
            b"key",
            Some(&Bytes::from_static(b"value")),
            Some(100),
            Some(of),
            1,
            Version::new(20, 5),
        )
        .to_tombstone();
        assert_eq!(lapsed.live_value(200), None);
        assert_eq!(lapsed.order(), (of, Version::new(20, 5)));
        let plain = Record::new(b"k", Some(b"v"), None, 1, Version::new(3, 1));
        assert_eq!(plain.ttl_of(), None);
        assert_eq!(plain.order(), (Version::new(3, 1), Version::new(3, 1)));
    }

    #[test]
    fn expired_values_are_not_live() {
        let r = Record::new(b"k", Some(b"v"), Some(100), 1, Version::new(1, 1));
        assert_eq!(r.live_value(99), Some(&b"v"[..]));
        assert_eq!(r.live_value(100), None);
    }

    #[test]
    fn the_unit_mark_is_kept_apart_from_the_other_flags() {
        let r = Record::new(b"k", Some(b"v"), Some(100), 1, Version::new(1, 1));
        assert_eq!(r.unit(), Unit::None);
        let r = r.with_unit(Unit::Shards);
        assert_eq!(r.unit(), Unit::Shards);
        let r = r.with_unit(Unit::Here);
        assert_eq!(
            (r.unit(), r.expire_ms(), r.value()),
            (Unit::Here, Some(100), Some(&b"v"[..]))
        );
        for u in [Unit::None, Unit::Here, Unit::Shards] {
            assert_eq!(Unit::from_code(u.code()), u);
        }
    }

    #[test]
    fn slot_is_32_bytes() {
        assert_eq!(std::mem::size_of::<Record>(), 32);
    }
}

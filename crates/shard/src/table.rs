//! A shard's key → [`Record`] table, split into fixed segments.
//!
//! Segments (by hash bits the shard choice does not use) keep every resize
//! small — a big single table doubles all at once and stalls the shard — and
//! give SCAN a cursor that survives resizes: a key never changes segment, so
//! a scan returns every key present from start to end exactly once.

use elsa_lattice::Version;
use hashbrown::HashTable;

use crate::evict::AccessClock;
use crate::record::Record;

/// Segments per shard; a power of two (the low 8 bits of the hash's high word).
pub const SEGMENTS: usize = 256;

/// The segment a key hash belongs to.
pub fn segment_of(hash: u64) -> usize {
    ((hash >> 32) as usize) & (SEGMENTS - 1)
}

pub use crate::keyhash::{bucket_of, KeyHasher};

/// Anti-entropy buckets: bits 40–55 of a key's hash, its Redis Cluster
/// slot times four (`crate::keyhash`). The ring places virtual nodes on
/// bucket boundaries, so two replicas of a ring arc hold exactly the same
/// buckets and can compare them digest by digest.
pub const DIGEST_BUCKETS: usize = 1 << 16;

/// What a record adds to its bucket's digest: equal only for the same key
/// at the same version (one commit writes a key once, so the version fixes
/// the value). XOR-combined, so adding and removing are the same step.
pub fn fingerprint(hash: u64, version: Version) -> u64 {
    // Each input goes through the finaliser before the next is mixed in,
    // so no linear relation between two versions can cancel out (a plain
    // XOR of shifted fields let (ts1 ^ ts2) == (o1 ^ o2) << 23 collide).
    let x = mix(hash ^ 0x9e37_79b9_7f4a_7c15);
    let x = mix(x ^ version.commit_ts);
    mix(x ^ u64::from(version.origin))
}

/// What a record adds to its bucket's digest: [`fingerprint`] of its key
/// and version, and for a typed record its content too.
pub fn print_of(hash: u64, r: &Record) -> u64 {
    fingerprint(hash, r.version()) ^ mix(r.content_digest())
}

/// How [`Table::update`] changed a key.
pub enum Update {
    /// Nothing changed.
    Unchanged,
    /// The record was changed in place (its key kept).
    InPlace,
    /// A new record replaces (or creates) the key's.
    Put(Record),
}

/// Gives a segment's slots back once it holds fewer than an eighth of
/// what they could (after deletes, evictions and their tombstones are
/// collected), keeping room to double: a table that grew for a burst of
/// keys otherwise holds its peak's slots for good, and a node under
/// `maxmemory` would keep evicting to pay for slots nobody uses. Redis
/// shrinks its dicts below a tenth full (`htNeedsResize`).
fn shrink(seg: &mut HashTable<Record>, hasher: &KeyHasher) {
    const MIN_SLOTS: usize = 64;
    if seg.capacity() > MIN_SLOTS && seg.len() * 8 < seg.capacity() {
        seg.shrink_to(seg.len() * 2, |r| {
            std::hash::BuildHasher::hash_one(hasher, r.key())
        });
    }
}

/// splitmix64's finaliser: spreads every input bit over the output.
fn mix(mut x: u64) -> u64 {
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

/// The lattice table of one shard.
pub struct Table {
    segments: Vec<HashTable<Record>>,
    hasher: KeyHasher,
    len: usize,
    /// Records that are tombstones (of `len`): eviction splits the node's
    /// excess by each shard's other records ([`Table::live_len`]), and a
    /// tombstone an eviction just left must not count as data to evict.
    tombstones: usize,
    /// XOR of [`fingerprint`]s per anti-entropy bucket, kept current on
    /// every change so comparing replicas never needs a scan.
    digests: Box<[u64]>,
    /// How records' access clocks are stamped and touched now (the shard
    /// sets it per batch; see [`crate::evict`]).
    clock: AccessClock,
    /// Segments that may hold a record the collector has work on (see
    /// [`Record::needs_upkeep`]), one bit each: set by every write that
    /// leaves such a record, recomputed by each sweep of the segment. The
    /// once-a-second sweep visits only these: sweeping every record of a
    /// table with nothing to collect cost a fifth of a core when idle and
    /// nearly half the shard's CPU under load.
    upkeep: [u64; SEGMENTS / 64],
    /// xorshift64* state for LFU's probabilistic increments. Hand-written:
    /// one multiply per access on the shard's own thread, where a crate
    /// generator would add a dependency for the same three lines.
    rng: u64,
}

impl Table {
    /// An empty table hashing with `hasher`.
    pub fn new(hasher: KeyHasher) -> Table {
        Table {
            segments: (0..SEGMENTS).map(|_| HashTable::new()).collect(),
            hasher,
            len: 0,
            tombstones: 0,
            digests: vec![0; DIGEST_BUCKETS].into_boxed_slice(),
            clock: AccessClock::default(),
            upkeep: [0; SEGMENTS / 64],
            rng: 0x2545_f491_4f6c_dd1d,
        }
    }

    /// Sets how access clocks are stamped from now on.
    pub fn set_clock(&mut self, clock: AccessClock) {
        self.clock = clock;
    }

    /// The clock records are stamped with now.
    pub fn clock(&self) -> &AccessClock {
        &self.clock
    }

    /// A uniform draw in [0, 1).
    fn random(&mut self) -> f64 {
        self.rng ^= self.rng >> 12;
        self.rng ^= self.rng << 25;
        self.rng ^= self.rng >> 27;
        (self.rng.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 11) as f64 / (1u64 << 53) as f64
    }

    /// The record for `key`, its access clock touched (a command read or
    /// wrote it: Redis's `lookupKey`).
    pub fn get_touched(&mut self, hash: u64, key: &[u8]) -> Option<&Record> {
        let draw = if self.clock.lfu { self.random() } else { 0.0 };
        let clock = self.clock;
        let rec = self.segments[segment_of(hash)].find_mut(hash, |r| r.key() == key)?;
        rec.set_access(clock.touched(rec.access(), draw));
        Some(rec)
    }

    /// Sets the access clock of `key`'s record to what `to` makes of the
    /// current clock; false when there is no record or nothing to set.
    pub fn set_access(&mut self, hash: u64, key: &[u8], to: crate::evict::Restored) -> bool {
        let Some(word) = self.clock.restored(to) else {
            return false;
        };
        match self.segments[segment_of(hash)].find_mut(hash, |r| r.key() == key) {
            Some(rec) => {
                rec.set_access(word);
                true
            }
            None => false,
        }
    }

    /// The digest of anti-entropy bucket `bucket`.
    pub fn digest(&self, bucket: usize) -> u64 {
        self.digests[bucket]
    }

    fn touch(&mut self, hash: u64, print: u64) {
        self.digests[bucket_of(hash)] ^= print;
    }

    /// Marks the segment of `hash` for the next sweep if the record just
    /// written there needs upkeep.
    fn note_upkeep(&mut self, hash: u64, needs: bool) {
        if needs {
            let seg = segment_of(hash);
            self.upkeep[seg / 64] |= 1 << (seg % 64);
        }
    }

    /// True when segment `index` may hold a record that needs upkeep.
    pub fn may_need_upkeep(&self, index: usize) -> bool {
        self.upkeep[index / 64] & (1 << (index % 64)) != 0
    }

    /// Number of records (tombstones and expired keys included).
    pub fn len(&self) -> usize {
        self.len
    }

    /// Records that are not tombstones (expired ones not yet collected
    /// included): the shard's weight when eviction splits the excess.
    pub fn live_len(&self) -> usize {
        self.len - self.tombstones
    }

    /// Counts a record `was` (if any) replaced by `now` (if any).
    fn recount(&mut self, was: Option<bool>, now: Option<bool>) {
        self.tombstones =
            self.tombstones + usize::from(now == Some(true)) - usize::from(was == Some(true));
    }

    /// True when the table holds no record.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The record for `key`, live or not.
    pub fn get(&self, hash: u64, key: &[u8]) -> Option<&Record> {
        self.segments[segment_of(hash)].find(hash, |r| r.key() == key)
    }

    /// Replaces (or inserts) the record for its key.
    pub fn put(&mut self, hash: u64, mut record: Record) {
        self.note_upkeep(hash, record.needs_upkeep());
        let hasher = &self.hasher;
        let seg = &mut self.segments[segment_of(hash)];
        let new = print_of(hash, &record);
        let tomb = Some(record.is_tombstone());
        let old = match seg.find_mut(hash, |r| r.key() == record.key()) {
            Some(slot) => {
                // A new state of a key keeps its access clock.
                record.set_access(slot.access());
                let old = std::mem::replace(slot, record);
                Some((print_of(hash, &old), old.is_tombstone()))
            }
            None => {
                record.set_access(self.clock.fresh());
                seg.insert_unique(hash, record, |r| {
                    std::hash::BuildHasher::hash_one(hasher, r.key())
                });
                self.len += 1;
                None
            }
        };
        self.recount(old.map(|(_, t)| t), tomb);
        if let Some((old, _)) = old {
            self.touch(hash, old);
        }
        self.touch(hash, new);
    }

    /// Looks `key` up once and lets `decide` replace its record (or create
    /// one): `decide` gets the current record, returns the new one or None to
    /// leave things as they are. Returns true when something was written.
    pub fn upsert(
        &mut self,
        hash: u64,
        key: &[u8],
        decide: impl FnOnce(Option<&Record>) -> Option<Record>,
    ) -> bool {
        let needs;
        let tombs;
        let hasher = &self.hasher;
        let seg = &mut self.segments[segment_of(hash)];
        let (old, new) = match seg.entry(
            hash,
            |r| r.key() == key,
            |r| std::hash::BuildHasher::hash_one(hasher, r.key()),
        ) {
            hashbrown::hash_table::Entry::Occupied(mut o) => match decide(Some(o.get())) {
                Some(mut rec) => {
                    rec.set_access(o.get().access());
                    needs = rec.needs_upkeep();
                    tombs = (Some(o.get().is_tombstone()), Some(rec.is_tombstone()));
                    let new = print_of(hash, &rec);
                    let old = print_of(hash, &std::mem::replace(o.get_mut(), rec));
                    (Some(old), new)
                }
                None => return false,
            },
            hashbrown::hash_table::Entry::Vacant(v) => match decide(None) {
                Some(mut rec) => {
                    rec.set_access(self.clock.fresh());
                    needs = rec.needs_upkeep();
                    tombs = (None, Some(rec.is_tombstone()));
                    let new = print_of(hash, &rec);
                    v.insert(rec);
                    self.len += 1;
                    (None, new)
                }
                None => return false,
            },
        };
        self.recount(tombs.0, tombs.1);
        if let Some(old) = old {
            self.touch(hash, old);
        }
        self.touch(hash, new);
        self.note_upkeep(hash, needs);
        true
    }

    /// [`Table::upsert`] that may also change the key's record in place
    /// (a typed state merging a delta: no copy of a big collection).
    pub fn update(
        &mut self,
        hash: u64,
        key: &[u8],
        decide: impl FnOnce(Option<&mut Record>) -> Update,
    ) -> bool {
        let needs;
        let tombs;
        let hasher = &self.hasher;
        let seg = &mut self.segments[segment_of(hash)];
        let (old, new) = match seg.entry(
            hash,
            |r| r.key() == key,
            |r| std::hash::BuildHasher::hash_one(hasher, r.key()),
        ) {
            hashbrown::hash_table::Entry::Occupied(mut o) => {
                let old = print_of(hash, o.get());
                let was = Some(o.get().is_tombstone());
                match decide(Some(o.get_mut())) {
                    Update::Unchanged => return false,
                    Update::InPlace => {
                        needs = o.get().needs_upkeep();
                        tombs = (was, Some(o.get().is_tombstone()));
                        (Some(old), print_of(hash, o.get()))
                    }
                    Update::Put(mut rec) => {
                        rec.set_access(o.get().access());
                        needs = rec.needs_upkeep();
                        tombs = (was, Some(rec.is_tombstone()));
                        let new = print_of(hash, &rec);
                        *o.get_mut() = rec;
                        (Some(old), new)
                    }
                }
            }
            hashbrown::hash_table::Entry::Vacant(v) => match decide(None) {
                Update::Put(mut rec) => {
                    rec.set_access(self.clock.fresh());
                    needs = rec.needs_upkeep();
                    tombs = (None, Some(rec.is_tombstone()));
                    let new = print_of(hash, &rec);
                    v.insert(rec);
                    self.len += 1;
                    (None, new)
                }
                _ => return false,
            },
        };
        self.recount(tombs.0, tombs.1);
        if let Some(old) = old {
            self.touch(hash, old);
        }
        self.touch(hash, new);
        self.note_upkeep(hash, needs);
        true
    }

    /// Removes `key` physically if its version is still `version` (so a
    /// newer write that raced in is never dropped).
    pub fn remove_if_version(&mut self, hash: u64, key: &[u8], version: Version) -> bool {
        let seg = &mut self.segments[segment_of(hash)];
        if let Ok(entry) = seg.find_entry(hash, |r| r.key() == key) {
            if entry.get().version() == version {
                let print = print_of(hash, entry.get());
                let tomb = entry.get().is_tombstone();
                entry.remove();
                self.len -= 1;
                self.recount(Some(tomb), None);
                self.touch(hash, print);
                return true;
            }
        }
        false
    }

    /// How many records segment `index` holds.
    pub fn segment_len(&self, index: usize) -> usize {
        self.segments[index].len()
    }

    /// Records of one segment.
    pub fn segment(&self, index: usize) -> impl Iterator<Item = &Record> {
        self.segments[index].iter()
    }

    /// All records.
    pub fn iter(&self) -> impl Iterator<Item = &Record> {
        self.segments.iter().flat_map(|s| s.iter())
    }

    /// Drops every record whose state `keep` rejects; returns how many went.
    pub fn retain(&mut self, mut keep: impl FnMut(&Record) -> bool) -> usize {
        // Unlike `retain_mut`, a record kept is not hashed: FLUSHDB keeps
        // every other database's records as they are.
        let (mut removed, mut tombstones) = (0, 0);
        let hasher = &self.hasher;
        let digests = &mut self.digests;
        for seg in &mut self.segments {
            seg.retain(|r| {
                let k = keep(r);
                if k {
                    tombstones += usize::from(r.is_tombstone());
                } else {
                    removed += 1;
                    let hash = std::hash::BuildHasher::hash_one(hasher, r.key());
                    digests[bucket_of(hash)] ^= print_of(hash, r);
                }
                k
            });
            shrink(seg, hasher);
        }
        self.len -= removed;
        self.tombstones = tombstones;
        removed
    }

    /// Keeps the records `keep` answers true for; it may also change a
    /// record in place, keeping its key (the digests follow). Answers how
    /// many were removed.
    pub fn retain_mut(&mut self, mut keep: impl FnMut(&mut Record) -> bool) -> usize {
        let (mut removed, mut tombstones) = (0, 0);
        let hasher = &self.hasher;
        let digests = &mut self.digests;
        let upkeep = &mut self.upkeep;
        for (index, seg) in self.segments.iter_mut().enumerate() {
            seg.retain(|r| {
                let hash = std::hash::BuildHasher::hash_one(hasher, r.key());
                let before = print_of(hash, r);
                let k = keep(r);
                if !k {
                    removed += 1;
                    digests[bucket_of(hash)] ^= before;
                } else {
                    tombstones += usize::from(r.is_tombstone());
                    digests[bucket_of(hash)] ^= before ^ print_of(hash, r);
                    if r.needs_upkeep() {
                        upkeep[index / 64] |= 1 << (index % 64);
                    }
                }
                k
            });
            shrink(seg, hasher);
        }
        self.len -= removed;
        self.tombstones = tombstones;
        removed
    }

    /// The collector's pass over `segments`: `keep` sees only the records
    /// that need upkeep ([`Record::needs_upkeep`]), in segments marked as
    /// holding some, and drops one (false) or changes it in place keeping
    /// its key (the digests follow). Each visited segment's mark is
    /// recomputed from what stays. Answers how many records went.
    pub fn sweep_segments(
        &mut self,
        segments: std::ops::Range<usize>,
        mut keep: impl FnMut(&mut Record) -> bool,
    ) -> usize {
        let mut removed = 0;
        // Tombstones before the pass less those after, of the records seen.
        let (mut was, mut now) = (0, 0);
        let hasher = &self.hasher;
        let digests = &mut self.digests;
        let end = segments.end.min(SEGMENTS);
        for index in segments.start.min(end)..end {
            let bit = 1u64 << (index % 64);
            if self.upkeep[index / 64] & bit == 0 {
                continue;
            }
            let mut still = false;
            let seg = &mut self.segments[index];
            seg.retain(|r| {
                if !r.needs_upkeep() {
                    return true;
                }
                let hash = std::hash::BuildHasher::hash_one(hasher, r.key());
                let before = print_of(hash, r);
                was += usize::from(r.is_tombstone());
                if !keep(r) {
                    removed += 1;
                    digests[bucket_of(hash)] ^= before;
                    return false;
                }
                now += usize::from(r.is_tombstone());
                digests[bucket_of(hash)] ^= before ^ print_of(hash, r);
                still |= r.needs_upkeep();
                true
            });
            shrink(seg, hasher);
            if !still {
                self.upkeep[index / 64] &= !bit;
            }
        }
        self.len -= removed;
        self.tombstones = self.tombstones + now - was;
        removed
    }

    /// Empties the table, releasing its memory.
    pub fn clear(&mut self) {
        for seg in &mut self.segments {
            *seg = HashTable::new();
        }
        self.len = 0;
        self.tombstones = 0;
        self.digests.fill(0);
        self.upkeep = [0; SEGMENTS / 64];
    }

    /// Approximate bytes used by slots and records.
    pub fn memory(&self) -> usize {
        let slots: usize = self
            .segments
            .iter()
            .map(|s| s.capacity() * (std::mem::size_of::<Record>() + 1))
            .sum();
        slots + self.iter().map(Record::heap_size).sum::<usize>()
    }
}

impl Table {
    /// The hasher this table places keys with.
    pub fn hasher(&self) -> &KeyHasher {
        &self.hasher
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(key: &str, value: Option<&[u8]>, ts: u64) -> Record {
        Record::new(key.as_bytes(), value, None, ts, Version::new(ts, 1))
    }

    fn hash(t: &Table, key: &str) -> u64 {
        std::hash::BuildHasher::hash_one(t.hasher(), key.as_bytes())
    }

    fn slots(t: &Table) -> usize {
        t.segments.iter().map(HashTable::capacity).sum()
    }

    #[test]
    fn counts_tombstones_through_every_change() {
        let mut t = Table::new(KeyHasher::default());
        for i in 0..1000 {
            let k = format!("k{i}");
            t.put(hash(&t, &k), rec(&k, Some(b"v"), 1));
        }
        assert_eq!((t.len(), t.live_len()), (1000, 1000));
        // Deleted by put, upsert and update; one written again.
        for i in 0..300 {
            let k = format!("k{i}");
            let h = hash(&t, &k);
            match i % 3 {
                0 => t.put(h, rec(&k, None, 2)),
                1 => assert!(t.upsert(h, k.as_bytes(), |_| Some(rec(&k, None, 2)))),
                _ => assert!(t.update(h, k.as_bytes(), |_| Update::Put(rec(&k, None, 2)))),
            }
        }
        let h = hash(&t, "k0");
        t.put(h, rec("k0", None, 3));
        assert_eq!(t.live_len(), 700, "a tombstone over a tombstone is one");
        t.put(h, rec("k0", Some(b"back"), 4));
        assert_eq!(t.live_len(), 701);
        // A new key deleted at once, and a version removed.
        let h = hash(&t, "new");
        t.put(h, rec("new", None, 5));
        assert_eq!((t.len(), t.live_len()), (1001, 701));
        assert!(t.remove_if_version(h, b"new", Version::new(5, 1)));
        assert_eq!((t.len(), t.live_len()), (1000, 701));
        // The collector drops some tombstones and turns a value into one.
        t.sweep_segments(0..SEGMENTS, |r| {
            !(r.is_tombstone() && r.key().ends_with(b"1"))
        });
        assert_eq!(
            t.len() - t.live_len(),
            t.iter().filter(|r| r.is_tombstone()).count()
        );
        t.retain_mut(|r| {
            if r.key() == b"k999" {
                *r = r.to_tombstone();
            }
            true
        });
        assert_eq!(t.live_len(), 700);
        t.retain(|r| !r.is_tombstone());
        assert_eq!((t.len(), t.live_len()), (700, 700));
        t.clear();
        assert_eq!((t.len(), t.live_len()), (0, 0));
    }

    #[test]
    fn swept_segments_give_their_slots_back() {
        let mut t = Table::new(KeyHasher::default());
        for i in 0..50_000 {
            let k = format!("k{i}");
            t.put(hash(&t, &k), rec(&k, Some(b"v"), 1));
        }
        let full = slots(&t);
        for i in 100..50_000 {
            let k = format!("k{i}");
            t.put(hash(&t, &k), rec(&k, None, 2));
        }
        assert_eq!(slots(&t), full, "tombstones hold their slots");
        assert_eq!(t.sweep_segments(0..SEGMENTS, |r| !r.is_tombstone()), 49_900);
        assert!(
            slots(&t) * 8 < full,
            "slots {} of {full} after 99.8 % went",
            slots(&t)
        );
        for i in 0..100 {
            let k = format!("k{i}");
            assert!(t.get(hash(&t, &k), k.as_bytes()).is_some(), "{k} kept");
        }
        // The digests still match the records left.
        let mut fresh = Table::new(KeyHasher::default());
        for r in t.iter() {
            let k = std::str::from_utf8(r.key()).unwrap();
            fresh.put(hash(&t, k), rec(k, Some(b"v"), 1));
        }
        assert!((0..DIGEST_BUCKETS).all(|b| t.digest(b) == fresh.digest(b)));
    }
}

//! A shard's key → [`Record`] table, split into fixed segments.
//!
//! Segments (by hash bits the shard choice does not use) keep every resize
//! small — a big single table doubles all at once and stalls the shard — and
//! give SCAN a cursor that survives resizes: a key never changes segment, so
//! a scan returns every key present from start to end exactly once.

use elsa_lattice::Version;
use hashbrown::HashTable;

use crate::record::Record;

/// Segments per shard; a power of two (the low 8 bits of the hash's high word).
pub const SEGMENTS: usize = 256;

/// The segment a key hash belongs to.
pub fn segment_of(hash: u64) -> usize {
    ((hash >> 32) as usize) & (SEGMENTS - 1)
}

/// Hashes keys; one per process so routing and tables agree.
pub type KeyHasher = foldhash::fast::RandomState;

/// The lattice table of one shard.
pub struct Table {
    segments: Vec<HashTable<Record>>,
    hasher: KeyHasher,
    len: usize,
}

impl Table {
    /// An empty table hashing with `hasher`.
    pub fn new(hasher: KeyHasher) -> Table {
        Table {
            segments: (0..SEGMENTS).map(|_| HashTable::new()).collect(),
            hasher,
            len: 0,
        }
    }

    /// Number of records (tombstones and expired keys included).
    pub fn len(&self) -> usize {
        self.len
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
    pub fn put(&mut self, hash: u64, record: Record) {
        let hasher = &self.hasher;
        let seg = &mut self.segments[segment_of(hash)];
        match seg.find_mut(hash, |r| r.key() == record.key()) {
            Some(slot) => *slot = record,
            None => {
                seg.insert_unique(hash, record, |r| {
                    std::hash::BuildHasher::hash_one(hasher, r.key())
                });
                self.len += 1;
            }
        }
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
        let hasher = &self.hasher;
        let seg = &mut self.segments[segment_of(hash)];
        match seg.entry(
            hash,
            |r| r.key() == key,
            |r| std::hash::BuildHasher::hash_one(hasher, r.key()),
        ) {
            hashbrown::hash_table::Entry::Occupied(mut o) => match decide(Some(o.get())) {
                Some(rec) => {
                    *o.get_mut() = rec;
                    true
                }
                None => false,
            },
            hashbrown::hash_table::Entry::Vacant(v) => match decide(None) {
                Some(rec) => {
                    v.insert(rec);
                    self.len += 1;
                    true
                }
                None => false,
            },
        }
    }

    /// Removes `key` physically if its version is still `version` (so a
    /// newer write that raced in is never dropped).
    pub fn remove_if_version(&mut self, hash: u64, key: &[u8], version: Version) -> bool {
        let seg = &mut self.segments[segment_of(hash)];
        if let Ok(entry) = seg.find_entry(hash, |r| r.key() == key) {
            if entry.get().version() == version {
                entry.remove();
                self.len -= 1;
                return true;
            }
        }
        false
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
        let mut removed = 0;
        for seg in &mut self.segments {
            seg.retain(|r| {
                let k = keep(r);
                if !k {
                    removed += 1;
                }
                k
            });
        }
        self.len -= removed;
        removed
    }

    /// Empties the table, releasing its memory.
    pub fn clear(&mut self) {
        for seg in &mut self.segments {
            *seg = HashTable::new();
        }
        self.len = 0;
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

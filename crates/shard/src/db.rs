//! Numbered databases (`SELECT n`) as key namespaces.
//!
//! A key of database `n > 0` is stored as [`MARK`], the byte `n`, then the
//! key the client named; a key of database 0 is stored as named — unless
//! it starts with [`MARK`] itself, when it is stored as [`MARK`], `0`, key,
//! so every stored key decodes to exactly one (database, key). Because the
//! database is part of the stored key, every path that carries keys —
//! commits, the log, snapshots, replication, anti-entropy, other regions —
//! keeps databases apart with no change of its own; only what lists keys
//! back to a client (KEYS, SCAN, RANDOMKEY, the key named by LMPOP/ZMPOP)
//! decodes them. A database holds at most 256 indexes (one byte).

use bytes::{BufMut, Bytes, BytesMut};

/// Starts every stored key that names its database.
pub const MARK: &[u8] = b"\xff\x00";

/// The stored form of `key` in database `db`.
pub fn encode(db: u8, key: &[u8]) -> Bytes {
    if db == 0 && !key.starts_with(MARK) {
        return Bytes::copy_from_slice(key);
    }
    let mut out = BytesMut::with_capacity(MARK.len() + 1 + key.len());
    out.put_slice(MARK);
    out.put_u8(db);
    out.put_slice(key);
    out.freeze()
}

/// True when `key`, as a client named it in database `db`, is stored in
/// another form (so a request naming it must be rewritten).
pub fn needs_encoding(db: u8, key: &[u8]) -> bool {
    db != 0 || key.starts_with(MARK)
}

/// The database of a stored key and the key as its client named it.
pub fn decode(stored: &[u8]) -> (u8, &[u8]) {
    match stored {
        [0xff, 0x00, db, key @ ..] => (*db, key),
        key => (0, key),
    }
}

/// The key as its client named it.
pub fn user_key(stored: &[u8]) -> &[u8] {
    decode(stored).1
}

/// The database a stored key belongs to.
pub fn db_of(stored: &[u8]) -> u8 {
    decode(stored).0
}

/// What FLUSHALL and FLUSHDB deleted: range tombstones over commit
/// timestamps, one for every database and one per database flushed alone.
/// A lattice committed before the floor of its key's database is gone.
///
/// A lattice itself: floors only rise, and two merge by taking the higher
/// of each (so every node of every region ends with the same floors
/// whatever order it learns them in; `elsa_cluster` carries them).
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Floors {
    /// FLUSHALL: before this, every database is gone.
    pub all: u64,
    /// FLUSHDB: before these, the database is gone.
    pub per_db: std::collections::BTreeMap<u8, u64>,
}

impl Floors {
    /// Raises the floor of `db` (every database: None) to `ts`.
    pub fn raise(&mut self, db: Option<u8>, ts: u64) {
        match db {
            None => self.all = self.all.max(ts),
            Some(db) => {
                let f = self.per_db.entry(db).or_default();
                *f = (*f).max(ts);
            }
        }
    }

    /// Takes every floor of `other` that is higher.
    pub fn merge(&mut self, other: &Floors) {
        self.raise(None, other.all);
        for (&db, &ts) in &other.per_db {
            self.raise(Some(db), ts);
        }
    }

    /// The floor under a stored key. The store's own keys (transaction
    /// records) belong to no database: only FLUSHALL's floor is theirs.
    pub fn of(&self, stored: &[u8]) -> u64 {
        if self.per_db.is_empty() || stored.starts_with(crate::INTERNAL_PREFIX) {
            return self.all;
        }
        let db = db_of(stored);
        self.all.max(self.per_db.get(&db).copied().unwrap_or(0))
    }

    /// Every floor: (None, FLUSHALL's) and (Some(db), FLUSHDB's), the
    /// zero ones left out.
    pub fn entries(&self) -> impl Iterator<Item = (Option<u8>, u64)> + '_ {
        std::iter::once((None, self.all))
            .chain(self.per_db.iter().map(|(&db, &ts)| (Some(db), ts)))
            .filter(|&(_, ts)| ts > 0)
    }

    /// The floors of `other` that are higher than these (what merging it
    /// would raise).
    pub fn raised_by(&self, other: &Floors) -> Floors {
        let mut up = Floors::default();
        if other.all > self.all {
            up.all = other.all;
        }
        for (&db, &ts) in &other.per_db {
            if ts > self.per_db.get(&db).copied().unwrap_or(0) {
                up.per_db.insert(db, ts);
            }
        }
        up
    }

    /// The highest floor of all.
    pub fn highest(&self) -> u64 {
        self.per_db.values().copied().fold(self.all, u64::max)
    }

    /// True when nothing was ever flushed.
    pub fn is_empty(&self) -> bool {
        self.highest() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn every_key_of_every_database_roundtrips(db: u8, key: Vec<u8>) {
            let stored = encode(db, &key);
            prop_assert_eq!(decode(&stored), (db, &key[..]));
            prop_assert_eq!(needs_encoding(db, &key), stored[..] != key[..]);
        }

        #[test]
        fn keys_of_different_databases_never_meet(a: u8, b: u8, ka: Vec<u8>, kb: Vec<u8>) {
            prop_assume!((a, &ka) != (b, &kb));
            prop_assert_ne!(encode(a, &ka), encode(b, &kb));
        }
    }

    proptest! {
        #[test]
        fn floors_merge_as_a_lattice(
            a in proptest::collection::vec((proptest::option::of(0u8..4), 0u64..50), 0..6),
            b in proptest::collection::vec((proptest::option::of(0u8..4), 0u64..50), 0..6),
        ) {
            let of = |v: &[(Option<u8>, u64)]| {
                let mut f = Floors::default();
                for &(db, ts) in v {
                    f.raise(db, ts);
                }
                f
            };
            let (fa, fb) = (of(&a), of(&b));
            let mut ab = fa.clone();
            ab.merge(&fb);
            let mut ba = fb.clone();
            ba.merge(&fa);
            for db in 0..4u8 {
                let key = encode(db, b"k");
                prop_assert_eq!(ab.of(&key), ba.of(&key));
                prop_assert_eq!(ab.of(&key), fa.of(&key).max(fb.of(&key)));
            }
            // What `raised_by` names is exactly what merging adds.
            let mut up = fa.clone();
            up.merge(&fa.raised_by(&fb));
            prop_assert_eq!(up.highest(), ab.highest());
            for db in 0..4u8 {
                let key = encode(db, b"k");
                prop_assert_eq!(up.of(&key), ab.of(&key));
            }
            prop_assert!(ab.raised_by(&fa).is_empty() && ab.raised_by(&fb).is_empty());
        }
    }

    #[test]
    fn a_store_key_is_under_flushall_only() {
        let mut f = Floors::default();
        f.raise(Some(0), 10);
        let internal = [crate::INTERNAL_PREFIX, b"txn"].concat();
        assert_eq!(f.of(&internal), 0);
        assert_eq!(f.of(b"user"), 10);
        f.raise(None, 5);
        assert_eq!(f.of(&internal), 5);
        assert_eq!(
            f.entries().collect::<Vec<_>>(),
            vec![(None, 5), (Some(0), 10)]
        );
    }

    #[test]
    fn a_database_zero_key_that_looks_encoded_is_escaped() {
        let k = b"\xff\x00\x05x";
        assert_eq!(&encode(0, k)[..], b"\xff\x00\x00\xff\x00\x05x");
        assert_eq!(decode(&encode(0, k)), (0, &k[..]));
        assert_eq!(&encode(0, b"plain")[..], b"plain");
        assert_eq!(&encode(3, b"k")[..], b"\xff\x00\x03k");
    }
}

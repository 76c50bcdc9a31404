//! A key's hash, and the Redis Cluster slot inside it.
//!
//! Every key is placed by one 64-bit hash: shards and nodes by its bucket
//! (bits 40–55, [`bucket_of`]), a shard's table segment by bits 32–39, the
//! hash table's probe by the rest. The bucket is the key's Redis Cluster
//! slot — CRC16 of the key, or of its `{hash tag}`, modulo 16384, exactly
//! as Redis computes it ([`key_slot`]) — times four: every key of a slot is
//! in the same bucket, so on the same shard and node, whatever the ring's
//! points (which sit on any of the 65536 buckets, as before slots: points
//! aligned to slot boundaries changed which shard kept which keys, and
//! with it how a two-worker node's eviction fell between its shards —
//! `allkeys_lfu_keeps_the_hot_keys` failed a third of its runs). The
//! other bits come from a fast general hash of the whole key (foldhash).
//! So:
//!
//! - a Redis Cluster client that asks `CLUSTER SLOTS` finds the worker (or
//!   node) that owns a key by the slot it already computes, and sends the
//!   command where it runs without a hop between threads;
//! - keys sharing a hash tag (`{user:1}:cart`, `{user:1}:orders`) share a
//!   slot, hence a shard, so a MULTI/EXEC or script over them commits on
//!   one shard in one step, with no two-phase commit;
//! - everything else (table probes, segments) still sees foldhash's
//!   well-mixed bits, so keys piled into one slot by a shared tag do not
//!   collide in the table.
//!
//! Fixed-seeded: every node of a cluster must place a key on the same
//! slot, so the hash cannot be per process. (The price: an attacker who
//! knows the seed can aim keys at one bucket; the segmented table bounds
//! how much one bucket can stall.)

use std::hash::{BuildHasher, Hasher};

/// Redis Cluster's hash slots.
pub const CLUSTER_SLOTS: usize = 16384;

/// Anti-entropy buckets per Redis Cluster slot (a slot's keys use the
/// first).
pub const BUCKETS_PER_SLOT: usize = 4;

/// Redis's key hash, CRC16/XMODEM (the `crc` crate's table-driven code;
/// Redis's `crc16.c` is the same polynomial, initial value and no
/// reflection). Sixteen bytes per step: byte at a time it was 3.1 % of
/// the CPU under redis-benchmark SET (16-byte keys).
const CRC16: crc::Crc<u16, crc::Table<16>> =
    crc::Crc::<u16, crc::Table<16>>::new(&crc::CRC_16_XMODEM);

/// The Redis Cluster slot of a key as a client names it: CRC16 of the
/// part between the first `{` and the next `}` when that part is not
/// empty, else of the whole key, modulo 16384 (Redis's `keyHashSlot`).
pub fn cluster_slot(key: &[u8]) -> u16 {
    let hashed = match key.iter().position(|&b| b == b'{') {
        Some(open) => match key[open + 1..].iter().position(|&b| b == b'}') {
            Some(len) if len > 0 => &key[open + 1..open + 1 + len],
            _ => key,
        },
        None => key,
    };
    CRC16.checksum(hashed) & (CLUSTER_SLOTS as u16 - 1)
}

/// The Redis Cluster slot of a stored key: that of the key its client
/// named, whatever its database (`crate::db`), so a cluster client that
/// SELECTs another database still finds the key's worker.
pub fn key_slot(stored: &[u8]) -> u16 {
    cluster_slot(crate::db::user_key(stored))
}

/// The anti-entropy bucket of a key hash (one of
/// [`crate::table::DIGEST_BUCKETS`]): its slot times [`BUCKETS_PER_SLOT`].
pub fn bucket_of(hash: u64) -> usize {
    ((hash >> 40) & 0xffff) as usize
}

/// The Redis Cluster slot of an anti-entropy bucket.
pub fn slot_of_bucket(bucket: usize) -> u16 {
    (bucket / BUCKETS_PER_SLOT) as u16
}

/// Builds [`KeyHash`]ers. For keys only: a key hashes as a byte slice
/// (its length, then its bytes in one write).
#[derive(Clone, Copy, Debug, Default)]
pub struct KeyHasher(foldhash::fast::FixedState);

impl BuildHasher for KeyHasher {
    type Hasher = KeyHash;
    fn build_hasher(&self) -> KeyHash {
        KeyHash {
            general: self.0.build_hasher(),
            slot: 0,
        }
    }
}

/// One key's hash under way: foldhash of every byte written, and the
/// cluster slot of the last byte string written (the key itself).
pub struct KeyHash {
    general: foldhash::fast::FoldHasher,
    slot: u16,
}

impl Hasher for KeyHash {
    fn write(&mut self, bytes: &[u8]) {
        self.slot = key_slot(bytes);
        self.general.write(bytes);
    }

    fn write_usize(&mut self, n: usize) {
        // The slice's length prefix: into the general hash only.
        self.general.write_usize(n);
    }

    fn finish(&self) -> u64 {
        // Bits 40–55 become the bucket (the slot, times four); every
        // other bit stays foldhash's.
        const BUCKET_BITS: u64 = 0xffff << 40;
        (self.general.finish() & !BUCKET_BITS) | (u64::from(self.slot) << 42)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_are_redis_cluster_slots() {
        // Values from Redis's own test suite and `CLUSTER KEYSLOT` on
        // redis-server 7.0.
        assert_eq!(cluster_slot(b"123456789"), 12739); // CRC16/XMODEM check value 0x31C3
        assert_eq!(cluster_slot(b"foo"), 12182);
        assert_eq!(cluster_slot(b"bar"), 5061);
        assert_eq!(
            cluster_slot(b"{user1000}.following"),
            cluster_slot(b"user1000")
        );
        assert_eq!(
            cluster_slot(b"{user1000}.followers"),
            cluster_slot(b"user1000")
        );
        // An empty tag hashes the whole key; only the first `{` counts.
        assert_eq!(
            cluster_slot(b"foo{}{bar}"),
            CRC16.checksum(b"foo{}{bar}") & 16383
        );
        assert_eq!(cluster_slot(b"foo{{bar}}zap"), cluster_slot(b"{bar"));
        assert_eq!(cluster_slot(b"foo{bar}{zap}"), cluster_slot(b"bar"));
        assert_eq!(cluster_slot(b""), 0);
    }

    #[test]
    fn the_hash_carries_the_slot_of_the_key_in_any_database() {
        let h = KeyHasher::default();
        for key in [&b"foo"[..], b"{tag}x", b"", b"\xff\x00\x03{tag}y"] {
            let hash = h.hash_one(key);
            assert_eq!(
                slot_of_bucket(bucket_of(hash)),
                cluster_slot(crate::db::user_key(key))
            );
            assert_eq!(hash, h.hash_one(bytes::Bytes::copy_from_slice(key)));
        }
        // Keys of one tag share their bucket, hence their shard, and
        // differ in the other bits.
        let (a, b) = (h.hash_one(&b"{t}a"[..]), h.hash_one(&b"{t}b"[..]));
        assert_eq!(bucket_of(a), bucket_of(b));
        assert_eq!(bucket_of(a) % BUCKETS_PER_SLOT, 0);
        assert_ne!(a >> 57, b >> 57, "table probe bits differ (for this pair)");
    }
}

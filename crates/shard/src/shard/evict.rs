//! Eviction from one shard's table: which key goes (Redis's approximated
//! LRU/LFU/TTL with a pool of the best candidates seen, or a random key)
//! and how it goes — as a delete committed here, logged, gossiped to the
//! other regions and shipped to the region's replicas exactly like a DEL,
//! so replicas converge on its absence and anti-entropy never brings the
//! key back (`docs/operations.md`, "Memory limit"). In a region of several
//! nodes only a key's primary evicts it: its delete is ordered after every
//! write it acknowledged; a replica's, stamped with its own clock, was not.

use std::sync::Arc;

use bytes::Bytes;
use elsa_lattice::Version;

use super::{upkeep::is_internal, Shard};
use crate::evict::{MemoryLimit, Policy};
use crate::table::SEGMENTS;

/// Best candidates kept between evictions (Redis's `EVPOOL_SIZE`).
const POOL_SIZE: usize = 16;

/// At most this many keys go per call, so one batch's latency stays
/// bounded; the next batch (or the epoch timer) evicts on.
const MAX_PER_CALL: usize = 64;

/// A candidate for eviction: a key and how good a victim it is (higher
/// goes first).
pub(super) struct Candidate {
    score: u64,
    hash: u64,
    key: Bytes,
}

/// What one round of sampling into the pool gave.
enum Pool {
    /// The key to evict.
    Found((u64, Bytes)),
    /// Every candidate had gone or been used since it was sampled.
    Stale,
    /// Nothing evictable was sampled and the pool is empty.
    Empty,
}

impl Shard {
    /// Shares the node's memory limit with this shard.
    pub fn set_memory_limit(&mut self, limit: Arc<MemoryLimit>) {
        self.limit = Some(limit);
    }

    /// On the epoch timer: tells the limit how many records this shard
    /// holds (its weight when the excess is split), and evicts what it
    /// owes if no command reached it since.
    pub fn evict_on_tick(&mut self, now_ms: u64) {
        if let Some(limit) = &self.limit {
            limit.set_weight(self.index, self.table.live_len() as u64);
            limit.set_replication(self.index, self.replication_bytes() as u64);
        }
        self.memory_check(now_ms);
    }

    /// Approximate bytes of replication state: the gossip buffer and the
    /// parts of other regions' transactions parked here (INFO's
    /// `mem_not_counted_for_evict`, with the node's streams).
    pub fn replication_bytes(&self) -> usize {
        const ENTRY: usize = std::mem::size_of::<crate::wal::codec::LogEntry>() + 64;
        let parked: usize = self
            .parts
            .iter()
            .map(|(k, p)| k.len() + ENTRY * (1 + p.pending.len()) + 16 * p.units.len())
            .sum();
        self.gossip.bytes() + parked
    }

    /// Before a batch: sets the table's access clock and, when this shard
    /// owes part of the node's excess, evicts. Costs two relaxed loads of
    /// the shard's own cache line when it does not.
    pub(super) fn memory_check(&mut self, now_ms: u64) {
        let clock = match &self.limit {
            Some(limit) => limit.clock(now_ms),
            None => crate::evict::AccessClock {
                now_ms,
                ..Default::default()
            },
        };
        self.table.set_clock(clock);
        // The Arc is cloned only on the way to evicting.
        if let Some(limit) = self
            .limit
            .as_ref()
            .filter(|l| l.owed(self.index) > 0)
            .cloned()
        {
            self.evict(&limit, now_ms);
        }
    }

    /// Evicts what this shard owes of the node's excess (at most
    /// [`MAX_PER_CALL`] keys). Not inside a commit of several keys: an
    /// eviction is a commit of its own.
    pub fn evict(&mut self, limit: &MemoryLimit, now_ms: u64) {
        let policy = limit.policy();
        if policy == Policy::NoEviction || self.unit != crate::record::Unit::None {
            return;
        }
        let owed = limit.owed(self.index);
        let (mut keys, mut bytes) = (0, 0);
        while owed > bytes && keys < MAX_PER_CALL as u64 {
            let Some((hash, key)) = self.victim(policy, limit.samples() as usize, now_ms) else {
                break;
            };
            let before = self.table.get(hash, &key).map_or(0, |r| r.heap_size());
            let ts = self.hlc.now();
            self.store(hash, &key, None, ts, Version::new(ts, self.node), now_ms);
            self.raise(crate::notify::EVICTED, "evicted", &key);
            let after = self.table.get(hash, &key).map_or(0, |r| r.heap_size());
            bytes += before.saturating_sub(after) as u64;
            keys += 1;
        }
        if keys > 0 {
            self.stats.evicted += keys;
            limit.freed(self.index, keys, bytes);
            limit.set_weight(self.index, self.table.live_len() as u64);
        } else if owed > 0 {
            limit.stuck(self.index);
        }
    }

    /// True when `key`'s record may be evicted: live, not Elsa's own, not
    /// held by a transaction under way, with a TTL if `volatile`, and —
    /// in a region of several nodes — of a key this node is the primary
    /// of (see [`crate::repl::Replicator::may_evict`]).
    fn evictable(&self, hash: u64, key: &[u8], volatile: bool, now_ms: u64) -> bool {
        let Some(r) = self.table.get(hash, key) else {
            return false;
        };
        r.is_live(now_ms)
            && !is_internal(key)
            && !self.holds.contains_key(key)
            && (!volatile || r.expiry(now_ms).is_some())
            && self
                .repl
                .as_ref()
                .is_none_or(|repl| repl.replicator.may_evict(key))
    }

    /// The next key to evict, or None when nothing may go.
    fn victim(&mut self, policy: Policy, samples: usize, now_ms: u64) -> Option<(u64, Bytes)> {
        let volatile = policy.is_volatile();
        if policy.is_random() {
            let found = self.sample(1, volatile, now_ms);
            return found.into_iter().next().map(|(h, k, _, _)| (h, k));
        }
        // Redis's performEvictions samples again until the pool yields a
        // key: a pool whose candidates all went stale is no reason to
        // stop while the table has others. Bounded, as a shard's turn is.
        for _ in 0..POOL_SIZE {
            match self.victim_from_pool(policy, samples, volatile, now_ms) {
                Pool::Found(key) => return Some(key),
                Pool::Stale => continue,
                Pool::Empty => return None,
            }
        }
        None
    }

    /// One round of Redis's `evictionPoolPopulate` and pick: sample, keep
    /// the best [`POOL_SIZE`], take the best still evictable.
    fn victim_from_pool(
        &mut self,
        policy: Policy,
        samples: usize,
        volatile: bool,
        now_ms: u64,
    ) -> Pool {
        let clock = *self.table.clock();
        let sampled = self.sample(samples, volatile, now_ms);
        if sampled.is_empty() && self.evict_pool.is_empty() {
            return Pool::Empty;
        }
        for (hash, key, access, expire) in sampled {
            let score = clock.score(policy, access, expire);
            if self.evict_pool.iter().any(|c| c.key == key) {
                continue;
            }
            if self.evict_pool.len() == POOL_SIZE {
                if self.evict_pool[0].score >= score {
                    continue;
                }
                self.evict_pool.remove(0);
            }
            let at = self.evict_pool.partition_point(|c| c.score < score);
            self.evict_pool.insert(at, Candidate { score, hash, key });
        }
        // The best first; a candidate gone meanwhile (deleted, held) is
        // dropped from the pool, and so is one used since it was sampled
        // (its score fell): Redis would evict it on its stale score.
        while let Some(c) = self.evict_pool.pop() {
            if !self.evictable(c.hash, &c.key, volatile, now_ms) {
                continue;
            }
            let now = self
                .table
                .get(c.hash, &c.key)
                .map_or(0, |r| clock.score(policy, r.access(), r.expiry(now_ms)));
            if now >= c.score {
                return Pool::Found((c.hash, c.key));
            }
        }
        Pool::Stale
    }

    /// Up to `n` evictable records from a random place in the table (hash,
    /// key, access clock, expiry); scans on until it has `n` or has seen
    /// the whole table (with a volatile policy and few keys with a TTL).
    fn sample(
        &mut self,
        n: usize,
        volatile: bool,
        now_ms: u64,
    ) -> Vec<(u64, Bytes, u32, Option<u64>)> {
        let mut out = Vec::with_capacity(n);
        if self.table.is_empty() {
            return out;
        }
        let r = self.next_random();
        let first = (r as usize) % SEGMENTS;
        let hasher = *self.table.hasher();
        for i in 0..SEGMENTS {
            let seg = (first + i) % SEGMENTS;
            let len = self.table.segment_len(seg);
            // Start at a random record of the first segment; later ones
            // from their start.
            let skip = if i == 0 && len > 0 {
                (r >> 32) as usize % len.max(1)
            } else {
                0
            };
            for rec in self.table.segment(seg).skip(skip) {
                if !rec.is_live(now_ms) || is_internal(rec.key()) {
                    continue;
                }
                let expire = rec.expiry(now_ms);
                if volatile && expire.is_none() {
                    continue;
                }
                let hash = std::hash::BuildHasher::hash_one(&hasher, rec.key());
                if self.holds.contains_key(rec.key())
                    || self
                        .repl
                        .as_ref()
                        .is_some_and(|repl| !repl.replicator.may_evict(rec.key()))
                {
                    continue;
                }
                out.push((
                    hash,
                    Bytes::copy_from_slice(rec.key()),
                    rec.access(),
                    expire,
                ));
                if out.len() == n {
                    return out;
                }
            }
        }
        out
    }

    /// A random 64-bit number (splitmix64 over a counter: the shard only
    /// needs places to sample from, not secrecy).
    fn next_random(&mut self) -> u64 {
        self.evict_seed = self.evict_seed.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut x = self.evict_seed;
        x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        x ^ (x >> 31)
    }
}

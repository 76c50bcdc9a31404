//! Keyspace upkeep and administration: counting, scanning, INFO
//! counters, the gossip buffer's epoch flush, and garbage collection
//! (FLUSHALL and FLUSHDB: [`super::flush`]).

use bytes::Bytes;

use super::{unix_ms, Shard, ShardStats};
use crate::db;
use crate::gossip::Dirty;
use crate::ops::Current;
use crate::record::Record;
use crate::table::{bucket_of, KeyHasher, DIGEST_BUCKETS, SEGMENTS};
use crate::wal::codec::{EntryState, LogEntry};
use elsa_lattice::Ts;

/// Where an incremental garbage sweep is (see
/// [`Shard::collect_garbage_step`]).
#[derive(Debug, Default)]
pub(super) struct GcSweep {
    /// The next segment to sweep.
    cursor: usize,
    /// The tombstone horizon of the sweep under way.
    horizon: Option<Ts>,
}

/// A key Elsa keeps for itself (see [`crate::INTERNAL_PREFIX`]).
pub(super) fn is_internal(key: &[u8]) -> bool {
    key.starts_with(crate::INTERNAL_PREFIX)
}

/// A record as a lattice to ship or log.
fn entry_of(rec: &Record, key: Bytes) -> LogEntry {
    let state = match rec.typed() {
        Some(s) => EntryState::Typed(s.clone()),
        None => EntryState::Plain(rec.value_bytes().map(|value| Current {
            value,
            expire_ms: rec.expire_ms(),
            ttl_of: rec.ttl_of(),
        })),
    };
    LogEntry {
        key,
        state,
        start_ts: rec.start_ts,
        version: rec.version(),
        unit: rec.unit(),
    }
}

impl Shard {
    pub(super) fn live_keys(&self, db: u8) -> usize {
        let now = unix_ms();
        self.table
            .iter()
            .filter(|r| r.is_live(now) && !is_internal(r.key()) && db::db_of(r.key()) == db)
            .count()
    }

    /// Live keys and keys with a TTL per database that has any (INFO
    /// keyspace).
    pub fn keyspace(&self) -> Vec<(u8, usize, usize, u64)> {
        let now = unix_ms();
        let mut per_db = std::collections::BTreeMap::<u8, (usize, usize, u64)>::new();
        for r in self.table.iter() {
            if !r.is_live(now) || is_internal(r.key()) {
                continue;
            }
            let row = per_db.entry(db::db_of(r.key())).or_default();
            row.0 += 1;
            let expire = r
                .expire_ms()
                .or_else(|| r.typed().and_then(|t| t.expire_ms(now)));
            if let Some(at) = expire {
                row.1 += 1;
                row.2 += at.saturating_sub(now);
            }
        }
        per_db
            .into_iter()
            .map(|(db, (k, e, ttl))| (db, k, e, ttl))
            .collect()
    }

    /// Live keys from `segment` on, until at least `count` were seen;
    /// only those matching `pattern` and, with `kind`, of that type.
    pub fn op_scan(
        &self,
        db: u8,
        mut segment: usize,
        count: usize,
        pattern: Option<&[u8]>,
        kind: Option<&[u8]>,
    ) -> (Vec<Bytes>, Option<usize>) {
        let now = unix_ms();
        let mut keys = Vec::new();
        while segment < SEGMENTS {
            keys.extend(
                self.table
                    .segment(segment)
                    .filter(|r| r.is_live(now) && !is_internal(r.key()))
                    .filter_map(|r| match db::decode(r.key()) {
                        (d, key) if d == db => Some((r, key)),
                        _ => None,
                    })
                    .filter(|(_, key)| pattern.is_none_or(|p| crate::glob::matches(p, key)))
                    .filter(|(r, _)| kind.is_none_or(|k| r.kind_name(now).as_bytes() == k))
                    .map(|(_, key)| Bytes::copy_from_slice(key)),
            );
            segment += 1;
            if keys.len() >= count {
                break;
            }
        }
        (keys, (segment < SEGMENTS).then_some(segment))
    }

    /// A live key for RANDOMKEY: the first segment from a random one that
    /// has live keys, and a random key of it (never an internal one).
    pub fn op_random_key(&self, db: u8, seed: u64) -> Option<Bytes> {
        let now = unix_ms();
        let first = (seed as usize) % SEGMENTS;
        (0..SEGMENTS).find_map(|i| {
            let live: Vec<&[u8]> = self
                .table
                .segment((first + i) % SEGMENTS)
                .filter(|r| r.is_live(now) && !is_internal(r.key()))
                .filter_map(|r| match db::decode(r.key()) {
                    (d, key) if d == db => Some(key),
                    _ => None,
                })
                .collect();
            let pick = (seed >> 8) as usize % live.len().max(1);
            live.get(pick).map(|k| Bytes::copy_from_slice(k))
        })
    }

    /// Counters for INFO.
    pub fn stats(&self) -> ShardStats {
        let mut s = self.stats.clone();
        s.records = self.table.len();
        let now = unix_ms();
        s.expires = self
            .table
            .iter()
            .filter(|r| {
                r.expire_ms().is_some() || r.typed().is_some_and(|t| t.expire_ms(now).is_some())
            })
            .count();
        s.memory = self.table.memory();
        s.gossip_pending = self.gossip_pending();
        s.parts_waiting = self.parts.len();
        s.history = self.history_len();
        s.wal = self.durability.as_ref().map(|d| d.wal.stats());
        s
    }

    /// End of a merge epoch: hands out the lattices changed since the last
    /// one (each key once, at its latest state) and forgets them. With no
    /// peers yet the caller drops them; replication will ship them.
    pub fn flush_gossip(&mut self) -> Vec<LogEntry> {
        let hasher = self.table_hasher();
        let mut out = self.gossip.take_captured();
        let now = self.gossip.drain().filter_map(|(key, (dirty, how))| {
            let hash = std::hash::BuildHasher::hash_one(&hasher, &key[..]);
            let rec = self.table.get(hash, &key)?;
            Some(match dirty {
                // The key's latest lattice: its version and unit are the
                // record's, whoever wrote it last.
                Dirty::Whole => entry_of(rec, key),
                // The deltas written here: their newest version, and how
                // they were written (`gossip::Written`).
                Dirty::Delta(d) => {
                    let version = d.newest();
                    LogEntry {
                        key,
                        state: EntryState::Typed(std::sync::Arc::new(*d)),
                        start_ts: how.start_ts,
                        version,
                        unit: how.unit,
                    }
                }
            })
        });
        out.extend(now);
        self.gossip.settle(out.len());
        self.stats.gossiped += out.len() as u64;
        out
    }

    /// Takes `key` out of this epoch's changes as the lattice its last
    /// write (a part of a transaction of several keys) left, to ship
    /// before the write about to replace it (see `crate::gossip`).
    pub(super) fn capture_part(&mut self, hash: u64, key: &[u8]) {
        let Some((dirty, how)) = self.gossip.capture(key) else {
            return;
        };
        let Some(rec) = self.table.get(hash, key) else {
            return;
        };
        let key = Bytes::copy_from_slice(key);
        let part = match dirty {
            Dirty::Whole => entry_of(rec, key),
            Dirty::Delta(d) => LogEntry {
                key,
                version: d.newest(),
                state: EntryState::Typed(std::sync::Arc::new(*d)),
                start_ts: how.start_ts,
                unit: how.unit,
            },
        };
        self.gossip.keep_captured(part);
    }

    fn table_hasher(&self) -> KeyHasher {
        *self.table.hasher()
    }

    /// Number of keys waiting in the gossip buffer.
    pub fn gossip_pending(&self) -> usize {
        self.gossip.len()
    }

    /// Collects expired keys and tombstones committed before
    /// `tombstone_before` (no transaction that could still need them for
    /// validation is that old, and every replica has them). An expired
    /// value is a tombstone to merges — it must beat an older copy arriving
    /// from a peer or replayed from the log, or that copy would come back —
    /// so a younger one stays, as a tombstone (its value freed), until it
    /// may go like any other. Tombstones are kept while unflushed gossip
    /// still has to carry them.
    pub fn collect_garbage(&mut self, now_ms: u64, tombstone_before: Ts) -> usize {
        let tombstone_before = self.held_back(tombstone_before);
        self.gc = GcSweep::default();
        let removed = self.collect_segments(0..crate::table::SEGMENTS, now_ms, tombstone_before);
        self.tombstone_floor = self.tombstone_floor.max(tombstone_before);
        removed
    }

    /// [`Shard::collect_garbage`] spread over turns: the next `segments` of
    /// the table's segments, with the horizon the sweep started with; the
    /// tombstone floor moves once a sweep has covered the whole table. One
    /// sweep over millions of keys in one turn stalled every client of the
    /// shard for its length; a slice of it stalls them for a slice.
    pub fn collect_garbage_step(&mut self, now_ms: u64, tombstone_before: Ts, segments: usize) {
        // Taken when a sweep starts (every epoch carries one; a sweep
        // keeps the first).
        let horizon = match self.gc.horizon {
            Some(h) => h,
            None => *self.gc.horizon.insert(self.held_back(tombstone_before)),
        };
        let start = self.gc.cursor;
        let end = (start + segments.max(1)).min(crate::table::SEGMENTS);
        self.collect_segments(start..end, now_ms, horizon);
        if end == crate::table::SEGMENTS {
            self.tombstone_floor = self.tombstone_floor.max(horizon);
            self.gc = GcSweep::default();
        } else {
            self.gc.cursor = end;
        }
    }

    /// `tombstone_before`, held back below the oldest part of another
    /// region's transaction waiting here: its install is not in any
    /// digest yet, so no proof covers it, and neither the removes it may
    /// meet nor the floor that judges it may pass it.
    fn held_back(&self, tombstone_before: Ts) -> Ts {
        self.parts
            .values()
            .map(|p| p.oldest)
            .min()
            .map_or(tombstone_before, |t| tombstone_before.min(t))
    }

    /// The collection floor: every tombstone this shard collected was
    /// committed before it, and every replica then held what this one
    /// held from before it (the horizon it collected by). A transaction
    /// delivered again — another region's installed once more from its
    /// record, or a record's writes put back by recovery — brings nothing
    /// from before it: what it holds from then is here already, or was
    /// removed and collected (issue 41). Snapshots keep it
    /// ([`Shard::set_collection_floor`]).
    pub fn collection_floor(&self) -> Ts {
        self.tombstone_floor
    }

    /// Takes a floor a snapshot kept (recovery, before replay; it only
    /// rises).
    pub fn set_collection_floor(&mut self, floor: Ts) {
        self.tombstone_floor = self.tombstone_floor.max(floor);
    }

    fn collect_segments(
        &mut self,
        segments: std::ops::Range<usize>,
        now_ms: u64,
        tombstone_before: Ts,
    ) -> usize {
        let gossip = &self.gossip;
        let hook = &self.on_change;
        // `expired` events: raised by the key's primary (alone, by this
        // node), for a string once its TTL passed (it becomes a tombstone
        // here), for a collection when its TTL passed since these
        // segments were last swept.
        let notifier = self
            .notifier
            .as_ref()
            .filter(|n| n.wants(crate::notify::EXPIRED));
        let repl = &self.repl;
        let primary = |key: &[u8]| repl.as_ref().is_none_or(|r| r.replicator.may_evict(key));
        let swept = &mut self.swept_at;
        swept.resize(crate::table::SEGMENTS, now_ms);
        let since = swept[segments.clone()]
            .iter()
            .copied()
            .min()
            .unwrap_or(now_ms);
        swept[segments.clone()].fill(now_ms);
        let mut events: Vec<bytes::Bytes> = Vec::new();
        let mut expired = 0;
        let mut visited = 0;
        let horizon = elsa_lattice::Version::new(tombstone_before, 0);
        let removed = self.table.sweep_segments(segments, |r| {
            visited += 1;
            let dirty = gossip.contains(r.key());
            let old = r.commit_ts < tombstone_before && !dirty;
            if let (Some(state), Some(_)) = (r.typed(), notifier) {
                if state
                    .expire_ms(since)
                    .is_some_and(|at| at > since && at <= now_ms)
                    && !is_internal(r.key())
                    && primary(r.key())
                {
                    events.push(bytes::Bytes::copy_from_slice(r.key()));
                }
            }
            if let Some(state) = r.typed_mut() {
                // A typed key that shows nothing (deleted, emptied or
                // expired) goes like a tombstone once old enough; one
                // that lives forgets the removes every replica has.
                if old && state.kind(now_ms) == elsa_lattice::Kind::None {
                    return false;
                }
                if state.has_removed_entries() && !dirty {
                    std::sync::Arc::make_mut(state).collect(horizon);
                }
                return true;
            }
            if r.expire_ms().is_some_and(|at| at <= now_ms) {
                expired += 1;
                if let Some(hook) = hook {
                    hook.changed(r.key()); // cached copies expire too
                }
                if notifier.is_some() && !is_internal(r.key()) && primary(r.key()) {
                    events.push(bytes::Bytes::copy_from_slice(r.key()));
                }
                if old {
                    return false;
                }
                *r = r.to_tombstone();
                return true;
            }
            !(r.is_tombstone() && old)
        });
        self.stats.expired += expired;
        self.stats.gc_visited += visited;
        for key in events {
            self.raise(crate::notify::EXPIRED, "expired", &key);
        }
        removed
    }

    /// Anti-entropy: this shard's digest of every bucket (a copy, so the
    /// comparison runs off the shard's thread).
    pub fn digests(&self) -> Box<[u64]> {
        (0..DIGEST_BUCKETS).map(|b| self.table.digest(b)).collect()
    }

    /// Anti-entropy: every lattice (tombstones included) in the buckets
    /// marked in `wanted` (a bitmap of [`DIGEST_BUCKETS`] bits), at most
    /// `limit` of them; the caller asks again for the rest next round.
    pub fn bucket_entries(&self, wanted: &[u64], limit: usize) -> Vec<LogEntry> {
        self.bucket_entries_before(wanted, limit, u64::MAX)
    }

    /// [`Shard::bucket_entries`], only lattices committed before
    /// `older_than`: newer ones are still on their way by gossip, and
    /// shipping them again would only race it.
    pub fn bucket_entries_before(
        &self,
        wanted: &[u64],
        limit: usize,
        older_than: Ts,
    ) -> Vec<LogEntry> {
        self.bucket_batch(wanted, limit, older_than).entries
    }

    /// [`Shard::bucket_entries_before`], and whether the wanted buckets
    /// also hold lattices committed at or after `older_than` (when the
    /// batch is not full: a full one stops scanning early).
    pub fn bucket_batch(&self, wanted: &[u64], limit: usize, older_than: Ts) -> AeBatch {
        self.bucket_batch_whole(wanted, limit, older_than, &[])
    }

    /// [`Shard::bucket_batch`], with the young typed lattices of the
    /// buckets marked in `whole` (a bitmap like `wanted`, empty for none)
    /// shipped too, and the buckets where a young typed lattice was held
    /// back listed (`AeBatch::held`). A collection's newer version does
    /// not hold an older element change, so a key written all the time
    /// would otherwise never carry one whose gossip was lost (issue 41,
    /// defects 12 and 13; `Cluster::ae_finish`).
    pub fn bucket_batch_whole(
        &self,
        wanted: &[u64],
        limit: usize,
        older_than: Ts,
        whole: &[u64],
    ) -> AeBatch {
        let hasher = self.table_hasher();
        let marked =
            |bits: &[u64], b: usize| bits.get(b / 64).is_some_and(|w| w & (1 << (b % 64)) != 0);
        let mut batch = AeBatch::default();
        let (start, skip) = self.ae_cursor.get();
        let start = start % SEGMENTS;
        // From the cursor round the table, and back over the part of the
        // start segment it skipped.
        let visits = (0..SEGMENTS)
            .map(|i| {
                (
                    (start + i) % SEGMENTS,
                    skip * usize::from(i == 0),
                    usize::MAX,
                )
            })
            .chain((skip > 0).then_some((start, 0, skip)));
        for (seg, from, to) in visits {
            for (pos, rec) in self.table.segment(seg).enumerate().take(to).skip(from) {
                let hash = std::hash::BuildHasher::hash_one(&hasher, rec.key());
                let b = bucket_of(hash);
                if !marked(wanted, b) {
                    continue;
                }
                if rec.commit_ts >= older_than {
                    batch.younger = true;
                    if !rec.is_typed() {
                        continue;
                    }
                    if !marked(whole, b) {
                        if batch.held.last() != Some(&(b as u32)) {
                            batch.held.push(b as u32);
                        }
                        continue;
                    }
                }
                batch
                    .entries
                    .push(entry_of(rec, Bytes::copy_from_slice(rec.key())));
                if batch.entries.len() >= limit {
                    self.ae_cursor.set((seg, pos + 1));
                    batch.capped = true;
                    batch.held.sort_unstable();
                    batch.held.dedup();
                    return batch;
                }
            }
        }
        // Another region's lattices parked here (`parts`) are in no
        // digest and merged nowhere yet: this node does not hold them, so
        // their buckets prove nothing either. Answering a round as if the
        // shipment were merged let a peer collect a remove this node held
        // only parked, and the add it still showed came back (issue 43's
        // concurrent checker, seed 17).
        for key in self.parts.keys() {
            let b = bucket_of(std::hash::BuildHasher::hash_one(&hasher, &key[..]));
            if marked(wanted, b) {
                batch.held.push(b as u32);
            }
        }
        batch.held.sort_unstable();
        batch.held.dedup();
        batch
    }
}

/// One anti-entropy batch of a shard.
#[derive(Debug, Default)]
pub struct AeBatch {
    /// Lattices of the wanted buckets committed before the cutoff.
    pub entries: Vec<LogEntry>,
    /// The wanted buckets also hold younger lattices (which may hide
    /// older commits they replaced; see `Cluster::ae_finish`).
    pub younger: bool,
    /// Buckets where a young typed lattice was held back, or where another
    /// region's lattice waits parked (sorted): what differs there may be
    /// an older element change the key's newer writes do not carry, or one
    /// this shard has not merged, so the batch proves nothing about them.
    pub held: Vec<u32>,
    /// The batch hit its limit: the scan stopped early, so `younger` and
    /// `held` are incomplete.
    pub capped: bool,
}

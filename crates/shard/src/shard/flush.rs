//! FLUSHALL and FLUSHDB as range tombstones over commit timestamps
//! ([`db::Floors`]): made here (`op_flush`), learnt from another node or
//! region (`raise_flush_floors`), or replayed (`apply_flush_floor`).
//! Either way a lattice committed before its database's floor is gone,
//! and one that arrives later — by gossip, replication, anti-entropy, a
//! transaction's install, or the log — is dropped on arrival
//! (`under_flush`), so nothing flushed comes back from a replica that had
//! not heard of the flush yet. A write committed at or after the floor,
//! here or anywhere, survives it.

use std::sync::Arc;

use elsa_lattice::{Ts, Version};

use super::Shard;
use crate::db;
use crate::ops::Current;
use crate::wal::codec::EntryState;

impl Shard {
    /// FLUSHALL (`db` None) or FLUSHDB at `at` (one timestamp from the
    /// node's clock for all its shards, so they flush as one): every key
    /// (of `db`) committed before `at` goes, and the log says so, so
    /// recovery (which replays in any order) drops what came before it
    /// too. A commit stamped after `at` that got here first stays, as it
    /// will on every other replica.
    pub fn op_flush(&mut self, db: Option<u8>, at: Ts) {
        let mut floors = db::Floors::default();
        floors.raise(db, at);
        self.raise_flush_floors(&floors);
    }

    /// Floors of a flush made here or on another node: each higher than
    /// this shard's is logged (so it survives a restart here) and applied.
    /// True when any rose.
    pub fn raise_flush_floors(&mut self, floors: &db::Floors) -> bool {
        let up = self.flush_floor.raised_by(floors);
        if up.is_empty() {
            return false;
        }
        // Later commits here are stamped after it.
        self.hlc.observe(up.highest());
        if let Some(d) = &mut self.durability {
            for (db, ts) in up.entries() {
                d.wal.stage_flush(db, ts);
            }
        }
        self.flush_floor.merge(&up);
        self.drop_below(&up);
        let now = self.hlc.peek();
        for (db, _) in up.entries() {
            match db {
                Some(db) => self.keyset.changed(db, now),
                None => self.keyset.changed_all(now),
            }
        }
        if let Some(hook) = &self.on_change {
            for (db, _) in up.entries() {
                hook.flushed(db);
            }
        }
        true
    }

    /// After recovery: drops what a logged FLUSHALL or FLUSHDB deleted
    /// (lattices committed before their floors), whatever order the files
    /// replayed in.
    pub fn apply_flush_floor(&mut self, floors: &db::Floors) {
        if floors.is_empty() {
            return;
        }
        self.flush_floor.merge(floors);
        self.drop_below(floors);
    }

    /// The shard's flush floors.
    pub fn flush_floors(&self) -> &db::Floors {
        &self.flush_floor
    }

    /// Drops every record committed before its floor in `floors`; a typed
    /// one written since keeps only the parts written since (a set's
    /// members added before the flush go, one added after stays).
    fn drop_below(&mut self, floors: &db::Floors) {
        self.table.retain_mut(|r| {
            let floor = floors.of(r.key());
            // A change of a TTL alone goes with the value it changed.
            if r.order().0.commit_ts < floor {
                return false;
            }
            if floor == 0 {
                return true;
            }
            let start_ts = r.start_ts;
            if let Some(state) = r.typed_mut() {
                if Arc::make_mut(state).forget_before(floor) {
                    r.restamp(start_ts);
                }
            }
            true
        });
    }

    /// What is left of a lattice committed as `version`, arriving for
    /// `key`, once this shard's flush floors are applied: None when they
    /// take nothing, Some(None) when they take it all, Some(Some(rest))
    /// for a typed state whose older parts they take.
    pub(super) fn under_flush(
        &self,
        key: &[u8],
        state: &EntryState,
        version: Version,
    ) -> Option<Option<EntryState>> {
        let floor: Ts = self.flush_floor.of(key);
        if floor == 0 {
            return None;
        }
        let s = match state {
            // A change of a TTL alone goes with the value it changed.
            EntryState::Plain(c) if Current::order(c.as_ref(), version).0.commit_ts < floor => {
                return Some(None)
            }
            EntryState::Plain(_) => return None,
            // Judged by its parts: a gossiped delta's version is its
            // newest part's, a transaction's write its commit's.
            EntryState::Typed(s) if s.newest().commit_ts.max(version.commit_ts) < floor => {
                return Some(None)
            }
            EntryState::Typed(s) => s,
        };
        let mut rest = (**s).clone();
        if !rest.forget_before(floor) {
            return None;
        }
        Some(Some(EntryState::Typed(Arc::new(rest))))
    }

    /// Writes the flush floors into the log again (after a rotation: the
    /// segments that held them are about to be replaced by a snapshot,
    /// which holds no floors, and a floor must outlive them — or a peer's
    /// older copy of a flushed key would be taken back after a restart).
    pub(super) fn relog_flush_floors(&mut self) {
        if self.flush_floor.is_empty() {
            return;
        }
        let floors = self.flush_floor.clone();
        if let Some(d) = &mut self.durability {
            for (db, ts) in floors.entries() {
                d.wal.stage_flush(db, ts);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::Current;
    use crate::wal::codec::LogEntry;
    use bytes::Bytes;
    use elsa_lattice::Hlc;

    fn shard() -> Shard {
        Shard::new(
            0,
            7,
            crate::table::KeyHasher::default(),
            Arc::new(Hlc::default()),
        )
    }

    fn entry(key: &[u8], value: &str, commit_ts: u64) -> LogEntry {
        LogEntry {
            key: Bytes::copy_from_slice(key),
            state: EntryState::Plain(Some(Current {
                value: Bytes::from(value.to_string()),
                expire_ms: None,
                ttl_of: None,
            })),
            start_ts: 1,
            version: Version::new(commit_ts, 1),
            unit: Default::default(),
        }
    }

    fn keys(s: &Shard) -> Vec<Bytes> {
        let mut k: Vec<Bytes> = s
            .table
            .iter()
            .map(|r| Bytes::copy_from_slice(r.key()))
            .collect();
        k.sort();
        k
    }

    /// A replica that learns a FLUSHALL from a peer ends as the one that
    /// made it: what came before is gone and stays gone when a replica
    /// that had not heard of it ships it again; what came after stays.
    #[test]
    fn a_learnt_floor_drops_what_came_before_and_keeps_it_out() {
        let mut here = shard();
        let mut there = shard();
        let old = [entry(b"a", "1", 10), entry(&db::encode(1, b"b"), "2", 11)];
        here.op_merge(&old, false).unwrap();
        there.op_merge(&old, false).unwrap();
        here.op_flush(None, 20);
        let newer = [entry(b"c", "3", 30)];
        here.op_merge(&newer, false).unwrap();
        there.op_merge(&newer, false).unwrap();
        assert!(there.raise_flush_floors(here.flush_floors()));
        assert!(
            !there.raise_flush_floors(here.flush_floors()),
            "already known"
        );
        assert_eq!(keys(&there), vec![Bytes::from("c")]);
        assert_eq!(here.digests(), there.digests());
        // The old lattices again (anti-entropy from a replica that missed
        // the flush, a late gossip frame, a replay): dropped.
        here.op_merge(&old, false).unwrap();
        for e in &old {
            let hash = std::hash::BuildHasher::hash_one(here.table.hasher(), &e.key[..]);
            here.restore(hash, e);
        }
        assert_eq!(keys(&here), vec![Bytes::from("c")]);
        assert_eq!(here.digests(), there.digests());
    }

    /// FLUSHDB's floor covers its database only, and not the store's own
    /// keys; FLUSHALL's covers those too.
    #[test]
    fn a_flushdb_floor_spares_other_databases() {
        let mut s = shard();
        let internal = [crate::INTERNAL_PREFIX, b"rec"].concat();
        let one = db::encode(1, b"k");
        s.op_merge(
            &[
                entry(b"k", "0", 10),
                entry(&one, "1", 10),
                entry(&internal, "r", 10),
            ],
            false,
        )
        .unwrap();
        let mut floors = db::Floors::default();
        floors.raise(Some(0), 20);
        s.raise_flush_floors(&floors);
        let mut kept = vec![Bytes::from(internal.clone()), one.clone()];
        kept.sort();
        assert_eq!(keys(&s), kept);
        s.op_merge(&[entry(b"k", "0", 10), entry(b"k2", "new", 25)], false)
            .unwrap();
        assert_eq!(keys(&s).len(), 3, "k stays out, k2 (after the floor) is in");
        s.op_flush(None, 40);
        assert!(keys(&s).is_empty());
    }
}

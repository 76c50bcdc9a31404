//! Old versions of plain values, kept while a snapshot may still read
//! them: what lets a transaction at snapshot isolation read the state as
//! of its start, so one that only reads never aborts.
//!
//! The table keeps one version per key (the lattice). When a write replaces
//! a string (plain, or a counter's typed state), or creates a key, while
//! some open snapshot started at or after the replaced version and before
//! the new one, the shard keeps the replaced version here, with the commit
//! timestamp that ended it. A read as of snapshot `S` answers from the
//! table when the key's version is at or before `S`, else from the entry
//! with `version ≤ S < until`; if there is none (a hash, set, sorted set or
//! list — keeping each of their versions would copy the collection on
//! every write — or a version older than the history), the caller falls
//! back to the latest state and validates it at commit, as before.
//!
//! Entries go once no open snapshot needs them (the merge-epoch timer
//! prunes). Hand-written: a per-key list of `(value, version, until)` is
//! the whole of it, and no MVCC crate fits a lattice table.
//!
//! Only a node without peers keeps a history: there every commit
//! timestamp comes from the one node clock that also stamps snapshots, so
//! a commit that is not yet visible at a read has a later timestamp than
//! any snapshot already open (`docs/transactions.md`, *Read-only
//! transactions*).

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use elsa_lattice::{Hlc, Ts, Version};

use crate::ops::Value;
use crate::FastMap;

/// The start timestamps of the snapshot transactions open on a node.
#[derive(Default)]
pub struct Snapshots {
    open: Mutex<BTreeMap<Ts, usize>>,
    /// How many are open: writes check this before taking the lock.
    count: AtomicUsize,
}

impl Snapshots {
    /// Registers a snapshot taken now: its timestamp is drawn under the
    /// lock writers check, so a write either sees the snapshot registered
    /// or was stamped before it was taken (its timestamp is then older).
    /// (A write's timestamp is always drawn before the shard installs it.)
    pub fn open_now(self: &Arc<Self>, hlc: &Hlc) -> SnapshotGuard {
        let mut open = self.open.lock().unwrap_or_else(|e| e.into_inner());
        // Counted before the timestamp is drawn: a write stamped after it
        // finds the count up, and then waits for this lock to check.
        self.count.fetch_add(1, Ordering::SeqCst);
        let ts = hlc.now();
        *open.entry(ts).or_default() += 1;
        SnapshotGuard {
            snapshots: self.clone(),
            ts,
        }
    }

    /// True when some snapshot is open.
    pub fn any(&self) -> bool {
        self.count.load(Ordering::SeqCst) > 0
    }

    /// True when a snapshot taken at or after `from` and before `until` is
    /// open: one that sees the version `from` replaced at `until`.
    pub fn any_between(&self, from: Ts, until: Ts) -> bool {
        if from >= until || !self.any() {
            return false;
        }
        let open = self.open.lock().unwrap_or_else(|e| e.into_inner());
        open.range(from..until).next().is_some()
    }

    /// The oldest open snapshot's timestamp, if one is open.
    pub fn oldest(&self) -> Option<Ts> {
        if !self.any() {
            return None;
        }
        let open = self.open.lock().unwrap_or_else(|e| e.into_inner());
        open.keys().next().copied()
    }
}

/// Keeps a snapshot registered while it lives.
pub struct SnapshotGuard {
    snapshots: Arc<Snapshots>,
    ts: Ts,
}

impl SnapshotGuard {
    /// The snapshot's timestamp.
    pub fn ts(&self) -> Ts {
        self.ts
    }
}

impl Drop for SnapshotGuard {
    fn drop(&mut self) {
        let mut open = self
            .snapshots
            .open
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        if let Some(n) = open.get_mut(&self.ts) {
            *n -= 1;
            if *n == 0 {
                open.remove(&self.ts);
            }
        }
        self.snapshots.count.fetch_sub(1, Ordering::SeqCst);
    }
}

/// One replaced version of a key.
#[derive(Clone, Debug)]
pub struct Past {
    /// What it held (a plain value's TTL is judged when read), or None
    /// when the key was absent or deleted.
    pub value: Option<Value>,
    /// Its version (ZERO for a key that did not exist).
    pub version: Version,
    /// The commit timestamp of the version that replaced it.
    pub until: Ts,
}

/// Bytes of old versions a shard keeps at most. A transaction left open
/// (a client that sent BEGIN SI and went quiet) would otherwise pin every
/// value overwritten after it; past this, replaced values are not kept
/// and snapshot reads of them fall back to the latest state (validated at
/// COMMIT), which is always safe.
pub const MAX_BYTES: usize = 64 << 20;

/// A shard's replaced versions that open snapshots may read.
pub struct History {
    snapshots: Arc<Snapshots>,
    by_key: FastMap<Bytes, Vec<Past>>,
    /// Approximate bytes kept (keys, values, entries).
    bytes: usize,
    limit: usize,
}

/// Approximate bytes one kept version costs.
fn cost(key: &[u8], past: &Past) -> usize {
    let value = match &past.value {
        Some(Value::Str(c)) => c.value.len(),
        Some(Value::Typed(s)) => std::mem::size_of_val(&**s),
        None => 0,
    };
    key.len() + value + std::mem::size_of::<Past>()
}

impl History {
    /// An empty history serving `snapshots`.
    pub fn new(snapshots: Arc<Snapshots>) -> History {
        History::with_limit(snapshots, MAX_BYTES)
    }

    /// [`History::new`] keeping at most `limit` bytes.
    pub fn with_limit(snapshots: Arc<Snapshots>, limit: usize) -> History {
        History {
            snapshots,
            by_key: FastMap::default(),
            bytes: 0,
            limit,
        }
    }

    /// True when a write now may have to keep what it replaces.
    pub fn wanted(&self) -> bool {
        self.snapshots.any()
    }

    /// `key`'s version `past` was replaced at `past.until`: kept if an
    /// open snapshot sees it.
    pub fn keep(&mut self, key: &[u8], past: Past) {
        let cost = cost(key, &past);
        if self.bytes + cost > self.limit
            || !self
                .snapshots
                .any_between(past.version.commit_ts, past.until)
        {
            return;
        }
        self.bytes += cost;
        match self.by_key.get_mut(key) {
            Some(list) => list.push(past),
            None => {
                self.by_key.insert(Bytes::copy_from_slice(key), vec![past]);
            }
        }
    }

    /// The version of `key` a snapshot at `at` sees, if kept.
    pub fn at(&self, key: &[u8], at: Ts) -> Option<&Past> {
        self.by_key
            .get(key)?
            .iter()
            .find(|p| p.version.commit_ts <= at && at < p.until)
    }

    /// Forgets what no open snapshot can read any more.
    pub fn prune(&mut self) {
        if self.by_key.is_empty() {
            return;
        }
        let mut bytes = 0;
        match self.snapshots.oldest() {
            None => self.by_key.clear(),
            Some(oldest) => self.by_key.retain(|key, list| {
                list.retain(|p| p.until > oldest);
                bytes += list.iter().map(|p| cost(key, p)).sum::<usize>();
                !list.is_empty()
            }),
        }
        self.bytes = bytes;
    }

    /// Versions kept (INFO, tests).
    pub fn len(&self) -> usize {
        self.by_key.values().map(Vec::len).sum()
    }

    /// True when nothing is kept.
    pub fn is_empty(&self) -> bool {
        self.by_key.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn past(v: &str, from: Ts, until: Ts) -> Past {
        Past {
            value: Some(Value::Str(crate::ops::Current {
                value: Bytes::copy_from_slice(v.as_bytes()),
                expire_ms: None,
                ttl_of: None,
            })),
            version: Version::new(from, 1),
            until,
        }
    }

    #[test]
    fn keeps_only_what_an_open_snapshot_sees_and_prunes_it_after() {
        let hlc = Hlc::default();
        let snaps = Arc::new(Snapshots::default());
        let mut h = History::new(snaps.clone());
        assert!(!h.wanted());
        h.keep(b"k", past("a", 1, 2));
        assert!(h.is_empty(), "no snapshot open: nothing kept");

        let s = snaps.open_now(&hlc);
        let at = s.ts();
        assert!(h.wanted());
        // Replaced before the snapshot: it sees the newer version.
        h.keep(b"k", past("old", 0, at));
        assert!(h.is_empty());
        // Written before and replaced after the snapshot: kept.
        h.keep(b"k", past("seen", at - 5, at + 10));
        // Written after the snapshot: it never sees it.
        h.keep(b"k", past("later", at + 10, at + 20));
        assert_eq!(h.len(), 1);
        let seen = h.at(b"k", at).expect("kept");
        assert!(
            matches!(&seen.value, Some(Value::Str(c)) if &c.value[..] == b"seen"),
            "{seen:?}"
        );
        assert!(h.at(b"k", at + 10).is_none());
        assert!(h.at(b"other", at).is_none());

        h.prune();
        assert_eq!(h.len(), 1, "still needed by the open snapshot");
        drop(s);
        assert!(!h.wanted());
        h.prune();
        assert!(h.is_empty());
    }

    #[test]
    fn past_its_limit_nothing_more_is_kept_until_pruned() {
        let hlc = Hlc::default();
        let snaps = Arc::new(Snapshots::default());
        let one = cost(b"k", &past("v", 0, 1));
        let mut h = History::with_limit(snaps.clone(), 2 * one);
        let s = snaps.open_now(&hlc);
        let at = s.ts();
        for i in 0..5 {
            h.keep(b"k", past("v", at - 1 - i, at + 1));
        }
        assert_eq!(h.len(), 2, "a quiet open snapshot pins a bounded history");
        drop(s);
        h.prune();
        assert!(h.is_empty());
        let _s2 = snaps.open_now(&hlc);
        let at = _s2.ts();
        h.keep(b"k", past("v", at - 1, at + 1));
        assert_eq!(h.len(), 1, "room again after pruning");
    }

    #[test]
    fn a_snapshot_taken_after_a_write_began_has_a_later_timestamp() {
        let hlc = Hlc::default();
        let snaps = Arc::new(Snapshots::default());
        let commit = hlc.now();
        let s = snaps.open_now(&hlc);
        assert!(s.ts() > commit);
        assert!(!snaps.any_between(s.ts() + 1, commit + 1));
        assert!(snaps.any_between(0, s.ts() + 1));
    }
}

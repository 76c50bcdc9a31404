//! A shard's key set, as whole-key-space reads inside a transaction see it
//! (KEYS, SCAN, DBSIZE, RANDOMKEY in a script, an EXEC, a BEGIN block), and
//! what validates those reads at commit (issue 41, defect 4).
//!
//! **What changes it.** A key appearing (written over nothing, a tombstone
//! or an expired value) or going (deleted, its last element removed, a
//! flush) in a database — from any source: a lone command, a commit's
//! install, a merge from a peer. A key that only lapses by its TTL is not a
//! change: time decides it, as in a Redis script, whose clock stands still
//! while it runs. A write that leaves the key present (a SET over a value,
//! an SADD to a set) is not either.
//!
//! **When it is recorded.** Only once some whole-key-space read reached a
//! shard of the process ([`Keyset::track`], a flag all shards read): a node
//! that never serves KEYS, SCAN, DBSIZE or RANDOMKEY pays one load and
//! branch per write. A shard sets the flag itself before it answers such a
//! read, so every change it installs after the read is recorded; changes
//! installed before the read were there for the read to see. From then on
//! each change stores,
//! for its database, the node's clock as the change is installed — at
//! least the start of any transaction that read the key set before it
//! (that start was drawn from the same clock), so a change installed after
//! such a read, even one decided earlier (a multi-shard install comes after
//! its decision), is seen as newer than the reader's start.
//!
//! **The check.** `Expect::KeysetBefore(db, start_ts)`, sent with a read
//! hold on [`KEYSET`] to every shard of the node: it passes when no change
//! of `db` was recorded at or after `start_ts`. Under the hold, every write to the shard waits (the hold is taken in a
//! multi-shard commit's prepare and kept until its install, microseconds),
//! and the hold itself waits for every write hold of another transaction
//! (a commit decided but not installed yet may be about to change the key
//! set). Conservative by design: these reads are rare, writes are not, and
//! this keeps the hot path to one map lookup while a commit is in flight.
//!
//! Hand-written: it is part of the commit protocol (the paper's §4
//! validation, extended from keys to the key set), not something a library
//! offers.

use std::sync::atomic::{AtomicBool, Ordering};

use elsa_lattice::{Kind, Ts};

use crate::record::Record;

/// The hold key of a shard's whole key set: never a stored key (a stored
/// key that starts with [`crate::db::MARK`] has its database byte after
/// it).
pub const KEYSET: &[u8] = crate::db::MARK;

/// Set by the first whole-key-space read any shard of the process served:
/// from then on every shard records key-set changes. (Per process, not per
/// node: several nodes in one test process only record more.)
static TRACKING: AtomicBool = AtomicBool::new(false);

/// When each database's key set last changed, once tracked.
#[derive(Default)]
pub(super) struct Keyset {
    /// Per database (256), the clock when its key set last changed; empty
    /// until the first change recorded.
    changed: Vec<Ts>,
}

impl Keyset {
    /// Starts recording changes (a whole-key-space read reached the shard).
    pub(super) fn track(&mut self) {
        if !TRACKING.load(Ordering::Relaxed) {
            TRACKING.store(true, Ordering::SeqCst);
        }
    }

    /// True once changes are recorded.
    pub(super) fn tracking(&self) -> bool {
        TRACKING.load(Ordering::Relaxed)
    }

    fn slots(&mut self) -> &mut Vec<Ts> {
        if self.changed.is_empty() {
            self.changed = vec![0; 256];
        }
        &mut self.changed
    }

    /// Database `db`'s key set changed; `at` is the node's clock now.
    pub(super) fn changed(&mut self, db: u8, at: Ts) {
        if !self.tracking() {
            return;
        }
        let c = &mut self.slots()[db as usize];
        *c = (*c).max(at);
    }

    /// Every database's key set changed (FLUSHALL).
    pub(super) fn changed_all(&mut self, at: Ts) {
        if !self.tracking() {
            return;
        }
        for c in self.slots() {
            *c = (*c).max(at);
        }
    }

    /// True when nothing changed `db`'s key set at or after `start_ts`.
    pub(super) fn unchanged_since(&self, db: u8, start_ts: Ts) -> bool {
        self.changed.get(db as usize).is_none_or(|&c| c < start_ts)
    }
}

/// An internal key (a transaction's record…): no listing shows it, so it
/// is not part of the key set, and a transaction that read the key set
/// must be able to write its own record.
pub(super) fn internal(key: &[u8]) -> bool {
    key.starts_with(crate::INTERNAL_PREFIX)
}

/// A plain record shows a key at `now_ms`.
pub(super) fn plain_live(rec: Option<&Record>, now_ms: u64) -> bool {
    rec.is_some_and(|r| !r.is_tombstone() && r.expire_ms().is_none_or(|at| at > now_ms))
}

/// A typed state shows a key at `now_ms`.
pub(super) fn typed_live(state: &elsa_lattice::KeyState, now_ms: u64) -> bool {
    state.kind(now_ms) != Kind::None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn judges_by_database() {
        let mut k = Keyset::default();
        k.track();
        assert!(k.unchanged_since(3, 50), "nothing recorded yet");
        k.changed(3, 100);
        assert!(!k.unchanged_since(3, 100));
        assert!(k.unchanged_since(3, 101));
        assert!(k.unchanged_since(4, 50), "another database");
        k.changed_all(200);
        assert!(!k.unchanged_since(4, 150));
    }
}

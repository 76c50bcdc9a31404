//! The gossip buffer: which keys changed in the current merge epoch.
//!
//! Anna's `local_changeset`: for a plain string only the key is kept, and
//! the flush reads its latest lattice, so a hot key written a thousand
//! times in an epoch is sent once, already merged. A typed key (a hash, a
//! set, a counter) keeps the merge of the epoch's deltas instead, so one
//! member's change to a million-member set ships one member.
//!
//! One exception to "once per epoch": a write of a transaction of several
//! keys is never folded into a later write of its key. Another region
//! installs such a transaction whole, and before any later one that
//! carries its change (`shard/parts.rs`); folded, its part would be
//! missing from its own unit. So a key whose last write this epoch was
//! such a part is *captured* — its lattice as that write left it — before
//! it is written again ([`GossipBuffer::holds_a_part`],
//! [`GossipBuffer::capture`]), and the flush ships both.

use bytes::Bytes;
use elsa_lattice::{Crdt, KeyState};
use hashbrown::HashMap;

use crate::record::Unit;

/// What changed about one key this epoch.
#[derive(Default)]
pub enum Dirty {
    /// A whole-state write: ship the key's latest lattice.
    #[default]
    Whole,
    /// Only deltas: ship their merge.
    Delta(Box<KeyState>),
}

/// How the key's last write here this epoch was made: what the flush
/// ships the key's deltas as. Not the record's own unit and start, which
/// are its last write's from anywhere: another region's transaction
/// installed on the key after a lone write here made the lone write's
/// delta ship as a part of it, which the other region kept out of sight
/// for `PART_WAIT`, waiting for a rest that does not exist (the concurrent
/// CRDT checker: half its runs took a minute to converge).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Written {
    /// A lone write, or a part of a transaction of several keys.
    pub unit: Unit,
    /// When its transaction started (a one-shard unit's parts share it).
    pub start_ts: elsa_lattice::Ts,
}

/// A part of a transaction taken out of the epoch's changes before a
/// later write of its key: the lattice to ship for it.
pub type Captured = crate::wal::codec::LogEntry;

/// Keys changed since the last flush.
#[derive(Default)]
pub struct GossipBuffer {
    // foldhash: this map is touched on every write.
    dirty: HashMap<Bytes, (Dirty, Written), foldhash::fast::RandomState>,
    /// Parts of transactions taken out of `dirty` before a later write of
    /// their key (see the module doc), in the order they were written.
    captured: Vec<Captured>,
    /// Nothing is kept: the node has no peers and never will (no peer
    /// port), so no epoch ever ships. Keeping the keys anyway cost a hash
    /// insert and a key copy per write, and a second table lookup per key
    /// at each epoch's flush — a tenth of a lone node's CPU under SET.
    off: bool,
}

impl GossipBuffer {
    /// Keeps nothing from now on (see `off`).
    pub fn turn_off(&mut self) {
        self.off = true;
        self.dirty = HashMap::default();
    }

    /// Notes that `key` changed as a whole (one hash; the key is copied
    /// only the first time in an epoch), written as `how`.
    pub fn record(&mut self, key: &[u8], how: Written) {
        if self.off {
            return;
        }
        match self.dirty.get_mut(key) {
            Some(d) => *d = (Dirty::Whole, how),
            None => {
                self.dirty
                    .insert(Bytes::copy_from_slice(key), (Dirty::Whole, how));
            }
        }
    }

    /// Notes a delta merged into `key`, written as `how`. After a
    /// whole-state write this epoch the key ships whole anyway.
    pub fn record_delta(&mut self, key: &[u8], delta: &KeyState, how: Written) {
        if self.off {
            return;
        }
        match self.dirty.get_mut(key) {
            Some((Dirty::Whole, w)) => *w = how,
            Some((Dirty::Delta(d), w)) => {
                d.merge(delta.clone());
                *w = how;
            }
            None => {
                self.dirty.insert(
                    Bytes::copy_from_slice(key),
                    (Dirty::Delta(Box::new(delta.clone())), how),
                );
            }
        }
    }

    /// True when `key`'s last write this epoch was a part of a transaction
    /// of several keys: it must be captured before `key` is written again.
    pub fn holds_a_part(&self, key: &[u8]) -> bool {
        !self.off
            && self
                .dirty
                .get(key)
                .is_some_and(|(_, w)| w.unit != Unit::None)
    }

    /// Takes `key` out of this epoch's changes, to ship as it is now
    /// (see the module doc): what changed of it, and how its last write
    /// here was made, which the caller turns into the lattice to ship.
    pub fn capture(&mut self, key: &[u8]) -> Option<(Dirty, Written)> {
        self.dirty.remove(key)
    }

    /// Keeps a captured part's lattice for the next flush.
    pub fn keep_captured(&mut self, part: Captured) {
        self.captured.push(part);
    }

    /// Takes the captured parts, oldest first.
    pub fn take_captured(&mut self) -> Vec<Captured> {
        std::mem::take(&mut self.captured)
    }

    /// True when `key` changed this epoch.
    pub fn contains(&self, key: &[u8]) -> bool {
        self.dirty.contains_key(key)
    }

    /// Number of changed keys (and captured parts).
    pub fn len(&self) -> usize {
        self.dirty.len() + self.captured.len()
    }

    /// True when nothing changed.
    pub fn is_empty(&self) -> bool {
        self.dirty.is_empty() && self.captured.is_empty()
    }

    /// Takes every changed key with how its last write here was made,
    /// leaving the buffer empty (the captured parts are taken apart:
    /// [`GossipBuffer::take_captured`]).
    pub fn drain(&mut self) -> impl Iterator<Item = (Bytes, (Dirty, Written))> + '_ {
        self.dirty.drain()
    }

    /// Approximate bytes the buffer holds: its map's slots (each with
    /// room for a short key's bytes) and the captured parts.
    pub fn bytes(&self) -> usize {
        self.dirty.capacity() * (std::mem::size_of::<(Bytes, (Dirty, Written))>() + 32)
            + self.captured.capacity() * (std::mem::size_of::<Captured>() + 64)
    }

    /// Gives back what a burst grew the buffer to, once the epochs after
    /// it change far fewer keys: a load of 200k keys left a 16 MB map
    /// behind for the node's life (`bench/memory-cluster.sh`). Kept when
    /// the epochs stay busy (no grow–shrink cycle per epoch).
    pub fn settle(&mut self, changed: usize) {
        const KEEP: usize = 1024;
        let cap = self.dirty.capacity();
        if cap > KEEP && changed.max(KEEP) * 4 < cap {
            self.dirty.shrink_to(changed.max(KEEP) * 2);
        }
        if self.captured.capacity() > KEEP && self.captured.is_empty() {
            self.captured = Vec::new();
        }
    }

    /// Forgets everything (FLUSHALL).
    pub fn clear(&mut self) {
        self.dirty.clear();
        self.captured.clear();
    }

    /// Forgets the keys `keep` refuses (FLUSHDB).
    pub fn retain(&mut self, mut keep: impl FnMut(&[u8]) -> bool) {
        self.dirty.retain(|k, _| keep(k));
        self.captured.retain(|c| keep(&c.key));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_burst_s_room_is_given_back_once_the_epochs_are_quiet() {
        let mut g = GossipBuffer::default();
        let how = Written {
            unit: Unit::default(),
            start_ts: 0,
        };
        for i in 0..100_000u32 {
            g.record(format!("k:{i}").as_bytes(), how);
        }
        let big = g.bytes();
        assert_eq!(g.drain().count(), 100_000);
        g.settle(100_000);
        assert_eq!(g.bytes(), big, "kept while the epochs are this busy");
        g.settle(0);
        assert!(g.bytes() * 20 < big, "{} of {big} kept", g.bytes());
        g.record(b"k", how);
        assert_eq!(g.len(), 1);
    }
}

//! The gossip buffer: which keys changed in the current merge epoch.
//!
//! Anna's `local_changeset`: for a plain string only the key is kept, and
//! the flush reads its latest lattice, so a hot key written a thousand
//! times in an epoch is sent once, already merged. A typed key (a hash, a
//! set, a counter) keeps the merge of the epoch's deltas instead, so one
//! member's change to a million-member set ships one member.

use bytes::Bytes;
use elsa_lattice::{Crdt, KeyState};
use hashbrown::HashMap;

/// What changed about one key this epoch.
#[derive(Default)]
pub enum Dirty {
    /// A whole-state write: ship the key's latest lattice.
    #[default]
    Whole,
    /// Only deltas: ship their merge.
    Delta(Box<KeyState>),
}

/// Keys changed since the last flush.
#[derive(Default)]
pub struct GossipBuffer {
    // foldhash: this map is touched on every write.
    dirty: HashMap<Bytes, Dirty, foldhash::fast::RandomState>,
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
    /// only the first time in an epoch).
    pub fn record(&mut self, key: &[u8]) {
        if self.off {
            return;
        }
        match self.dirty.get_mut(key) {
            Some(d) => *d = Dirty::Whole,
            None => {
                self.dirty.insert(Bytes::copy_from_slice(key), Dirty::Whole);
            }
        }
    }

    /// Notes a delta merged into `key`. After a whole-state write this
    /// epoch the key ships whole anyway.
    pub fn record_delta(&mut self, key: &[u8], delta: &KeyState) {
        if self.off {
            return;
        }
        match self.dirty.get_mut(key) {
            Some(Dirty::Whole) => {}
            Some(Dirty::Delta(d)) => {
                d.merge(delta.clone());
            }
            None => {
                self.dirty.insert(
                    Bytes::copy_from_slice(key),
                    Dirty::Delta(Box::new(delta.clone())),
                );
            }
        }
    }

    /// True when `key` changed this epoch.
    pub fn contains(&self, key: &[u8]) -> bool {
        self.dirty.contains_key(key)
    }

    /// Number of changed keys.
    pub fn len(&self) -> usize {
        self.dirty.len()
    }

    /// True when nothing changed.
    pub fn is_empty(&self) -> bool {
        self.dirty.is_empty()
    }

    /// Takes every changed key, leaving the buffer empty.
    pub fn drain(&mut self) -> impl Iterator<Item = (Bytes, Dirty)> + '_ {
        self.dirty.drain()
    }

    /// Forgets everything (FLUSHALL).
    pub fn clear(&mut self) {
        self.dirty.clear();
    }

    /// Forgets the keys `keep` refuses (FLUSHDB).
    pub fn retain(&mut self, mut keep: impl FnMut(&[u8]) -> bool) {
        self.dirty.retain(|k, _| keep(k));
    }
}

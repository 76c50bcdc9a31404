//! The gossip buffer: which keys changed in the current merge epoch.
//!
//! Anna's `local_changeset`: only keys are kept, and the flush reads each
//! key's latest lattice, so a hot key written a thousand times in an epoch is
//! sent once, already merged.

use bytes::Bytes;
use hashbrown::HashSet;

/// Keys changed since the last flush.
#[derive(Default)]
pub struct GossipBuffer {
    // foldhash: this set is touched on every write.
    dirty: HashSet<Bytes, foldhash::fast::RandomState>,
}

impl GossipBuffer {
    /// Notes that `key` changed (one hash; the key is copied only the first
    /// time in an epoch).
    pub fn record(&mut self, key: &[u8]) {
        self.dirty.get_or_insert_with(key, Bytes::copy_from_slice);
    }

    /// True when `key` changed this epoch.
    pub fn contains(&self, key: &[u8]) -> bool {
        self.dirty.contains(key)
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
    pub fn drain(&mut self) -> impl Iterator<Item = Bytes> + '_ {
        self.dirty.drain()
    }

    /// Forgets everything (FLUSHALL).
    pub fn clear(&mut self) {
        self.dirty.clear();
    }
}

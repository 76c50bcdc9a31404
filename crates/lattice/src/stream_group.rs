//! A consumer group's own bookkeeping: its newest write, pending counts,
//! lookups, and how a consumer is touched (`crate::stream`).

use super::{Consumer, Delivery, Group, Reg, StreamId};
use crate::{Elem, Version};

/// A delivery's share of its group's digest.
pub(super) fn delivery_hash(id: StreamId, d: &Delivery) -> u64 {
    use std::hash::BuildHasher;
    foldhash::fast::FixedState::with_seed(0xde11_7e12).hash_one((id, d))
}

/// An acknowledgement's share of its group's digest.
pub(super) fn ack_hash(id: StreamId, v: Version) -> u64 {
    use std::hash::BuildHasher;
    foldhash::fast::FixedState::with_seed(0xac4e_d000).hash_one((id, v))
}

/// A consumer's share of its group's digest.
pub(super) fn consumer_hash(name: &Elem, c: &Consumer) -> u64 {
    use std::hash::BuildHasher;
    foldhash::fast::FixedState::with_seed(0xc0e5_0e12).hash_one((name, c))
}

impl Group {
    /// The XOR of every item's share of the digest (after a change that
    /// touched many; a delta just built).
    pub(super) fn items_digest(&self) -> u64 {
        let d = self.deliveries.iter().map(|(id, d)| delivery_hash(*id, d));
        let a = self.acks.iter().map(|(id, v)| ack_hash(*id, *v));
        let c = self.consumers.iter().map(|(n, c)| consumer_hash(n, c));
        d.chain(a).chain(c).fold(0, |x, h| x ^ h)
    }

    /// What the group adds to its stream's digest: its own header and the
    /// items' XOR, no scan.
    pub(super) fn digest_share(&self) -> (Version, Option<Version>, (Version, StreamId, u64), u64) {
        (self.created, self.destroyed, self.delivered, self.digest)
    }

    /// The newest write it holds.
    pub(super) fn newest(&self) -> Version {
        let deliveries = self.deliveries.values().map(|d| d.version);
        let acks = self.acks.values().copied();
        let consumers = self.consumers.values().map(|c| c.live.version);
        deliveries
            .chain(acks)
            .chain(consumers)
            .chain([self.created, self.delivered.0])
            .chain(self.destroyed)
            .max()
            .unwrap_or_default()
    }

    /// The delivery of `id`, if it is pending.
    pub fn pending_entry(&self, id: StreamId) -> Option<&Delivery> {
        self.deliveries
            .get(&id)
            .filter(|d| self.acks.get(&id).is_none_or(|a| *a < d.version))
    }

    /// The live consumer `name`.
    pub fn consumer(&self, name: &[u8]) -> Option<&Consumer> {
        self.consumers.get(name).filter(|c| c.live.value)
    }

    /// How many times `id` was delivered, if it is still pending.
    pub(super) fn pending_count(&self, id: StreamId) -> u64 {
        match self.deliveries.get(&id) {
            Some(d) if self.acks.get(&id).is_none_or(|a| *a < d.version) => d.count,
            _ => 0,
        }
    }
}

impl Consumer {
    /// `consumer` of `g` created if it is not there, seen and active now.
    pub(super) fn touched(g: &Group, consumer: &[u8], now_ms: u64, version: Version) -> Consumer {
        let live = match g.consumers.get(consumer) {
            Some(c) if c.live.value => c.live,
            _ => Reg {
                version,
                value: true,
            },
        };
        Consumer {
            live,
            seen_ms: now_ms,
            active_ms: now_ms,
        }
    }
}

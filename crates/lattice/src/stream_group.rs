//! A consumer group's own bookkeeping: its newest write, pending counts,
//! lookups, and how a consumer is touched (`crate::stream`).

use super::{Consumer, Delivery, Group, Reg, StreamId};
use crate::Version;

impl Group {
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

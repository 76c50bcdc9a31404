//! Watermarks: what a peer has confirmed of one shard's gossip stream, so
//! `WAITREGION` can tell when a commit is merged in another region. Kept
//! apart from the service so the deterministic simulation drives this very
//! code rather than a copy.

/// One shard's gossip stream to one peer, for watermarks: every commit of
/// the shard up to `through` is merged at the peer. Frames are cumulative
/// by flush time, so `through` is the flush time of the last frame such
/// that it and every earlier frame were acknowledged. A frame lost on the
/// way is never acknowledged, so the watermark stops there until an
/// anti-entropy round finds the pair in sync.
#[derive(Default)]
pub struct Stream {
    through: u64,
    /// Frames sent (flush time, acknowledged yet), oldest first.
    outstanding: std::collections::VecDeque<(u64, bool)>,
    /// Newest frame sent while `outstanding` was full (0 = none): until an
    /// anti-entropy round after it, the watermark cannot move.
    unrecorded: u64,
}

/// Unacknowledged frames remembered per stream; a dead peer's stream
/// stops growing there (its watermark cannot move until anti-entropy).
pub const MAX_OUTSTANDING: usize = 4096;

impl Stream {
    /// Every commit of the shard before this is merged at the peer.
    pub fn through(&self) -> u64 {
        self.through
    }

    /// The newest frame sent while `outstanding` was full, or the boot
    /// time, until a clean round passes it (0 = none).
    pub fn unrecorded(&self) -> u64 {
        self.unrecorded
    }

    /// Frames sent and not yet passed (flush time, acknowledged yet).
    pub fn outstanding(&self) -> impl Iterator<Item = &(u64, bool)> {
        self.outstanding.iter()
    }

    /// A stream of a node that started at `boot` (HLC): lattices it
    /// recovered from disk were never gossiped by this incarnation, so the
    /// watermark may not pass `boot` until an anti-entropy round proves
    /// the peer has them.
    pub fn after_boot(boot: u64) -> Stream {
        Stream {
            unrecorded: boot,
            ..Stream::default()
        }
    }

    /// A frame flushed at `flushed_ts` was sent (or dropped on the way).
    pub fn sent(&mut self, flushed_ts: u64) {
        if self.outstanding.len() < MAX_OUTSTANDING {
            self.outstanding.push_back((flushed_ts, false));
        } else {
            self.unrecorded = flushed_ts;
        }
    }

    /// The peer acknowledged the frame flushed at `flushed_ts` (durable).
    pub fn acked(&mut self, flushed_ts: u64) {
        if let Some(f) = self.outstanding.iter_mut().find(|f| f.0 == flushed_ts) {
            f.1 = true;
        }
        while let Some(&(ts, true)) = self.outstanding.front() {
            if self.unrecorded == 0 {
                self.through = self.through.max(ts);
            }
            self.outstanding.pop_front();
        }
    }

    /// An anti-entropy round started at `ts` found the pair in sync.
    pub fn synced(&mut self, ts: u64) {
        self.through = self.through.max(ts);
        if self.unrecorded <= ts {
            self.unrecorded = 0;
        }
        while self.outstanding.front().is_some_and(|f| f.0 <= ts) {
            self.outstanding.pop_front();
        }
        self.acked(0); // pops what is acknowledged behind them
    }
}

#[cfg(test)]
mod tests {
    use super::Stream;

    #[test]
    fn the_watermark_stops_at_a_lost_frame_until_a_clean_round() {
        let mut s = Stream::default();
        for ts in [10, 20, 30] {
            s.sent(ts);
        }
        s.acked(10);
        s.acked(30); // 20 was lost
        assert_eq!(s.through, 10);
        s.sent(40);
        s.acked(40);
        assert_eq!(s.through, 10, "later acks do not jump the gap");
        s.synced(35);
        assert_eq!(
            s.through, 40,
            "a clean round covers 20; 30 and 40 were acked"
        );
        s.sent(50);
        s.acked(50);
        assert_eq!(s.through, 50);
    }
}

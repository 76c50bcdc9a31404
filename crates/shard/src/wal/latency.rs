//! How long this shard's log fsyncs take: a fixed-bucket histogram that
//! the thread doing the fsync (the shard's `elsa-wal-sync` thread, or the
//! shard itself when it syncs inline) adds to, and that a scrape of the
//! metrics port reads through `WalStats`.
//!
//! One histogram per shard, written by at most one thread at a time with
//! relaxed atomic adds, read rarely: nothing on the commit path is shared
//! with another shard or waits for a reader.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// Upper bounds of the buckets, in seconds (an fsync on a local SSD takes
/// tens of µs to a few ms; a loaded or networked disk, up to seconds).
pub const FSYNC_BUCKETS: [f64; 16] = [
    0.000_025, 0.000_05, 0.000_1, 0.000_25, 0.000_5, 0.001, 0.002_5, 0.005, 0.01, 0.025, 0.05, 0.1,
    0.25, 0.5, 1.0, 2.5,
];

/// The live histogram (bucket counts not cumulative; the last slot counts
/// fsyncs above every bound).
#[derive(Debug, Default)]
pub struct FsyncHistogram {
    counts: [AtomicU64; FSYNC_BUCKETS.len() + 1],
    sum_ns: AtomicU64,
}

impl FsyncHistogram {
    /// Counts one fsync that took `d`.
    pub fn observe(&self, d: Duration) {
        let secs = d.as_secs_f64();
        let i = FSYNC_BUCKETS
            .iter()
            .position(|b| secs <= *b)
            .unwrap_or(FSYNC_BUCKETS.len());
        self.counts[i].fetch_add(1, Ordering::Relaxed);
        self.sum_ns.fetch_add(
            u64::try_from(d.as_nanos()).unwrap_or(u64::MAX),
            Ordering::Relaxed,
        );
    }

    /// What it holds now.
    pub fn read(&self) -> FsyncLatency {
        FsyncLatency {
            counts: self
                .counts
                .iter()
                .map(|c| c.load(Ordering::Relaxed))
                .collect(),
            sum_secs: self.sum_ns.load(Ordering::Relaxed) as f64 / 1e9,
        }
    }
}

/// A reading of [`FsyncHistogram`].
#[derive(Clone, Debug, Default, PartialEq)]
pub struct FsyncLatency {
    /// Fsyncs per bucket of [`FSYNC_BUCKETS`] (not cumulative), then the
    /// ones above the last bound. Empty when the log never synced.
    pub counts: Vec<u64>,
    /// Their total duration.
    pub sum_secs: f64,
}

impl FsyncLatency {
    /// Fsyncs counted.
    pub fn count(&self) -> u64 {
        self.counts.iter().sum()
    }

    /// Adds another reading (node-wide totals).
    pub fn add(&mut self, other: &FsyncLatency) {
        if self.counts.len() < other.counts.len() {
            self.counts.resize(other.counts.len(), 0);
        }
        for (a, b) in self.counts.iter_mut().zip(&other.counts) {
            *a += b;
        }
        self.sum_secs += other.sum_secs;
    }

    /// `(upper bound, count)` per bucket (not cumulative), the last bound
    /// +Inf.
    pub fn buckets(&self) -> Vec<(f64, u64)> {
        FSYNC_BUCKETS
            .iter()
            .copied()
            .chain(std::iter::once(f64::INFINITY))
            .enumerate()
            .map(|(i, bound)| (bound, self.counts.get(i).copied().unwrap_or(0)))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_count_each_fsync_once_and_end_at_inf() {
        let h = FsyncHistogram::default();
        h.observe(Duration::from_micros(10)); // first bucket
        h.observe(Duration::from_micros(700)); // ≤ 1 ms
        h.observe(Duration::from_secs(5)); // above every bound
        let r = h.read();
        assert_eq!(r.count(), 3);
        let b = r.buckets();
        assert_eq!(b.len(), FSYNC_BUCKETS.len() + 1);
        assert_eq!(b[0], (0.000_025, 1));
        assert_eq!(b[4].1, 0, "nothing between 250 and 500 µs");
        assert_eq!(b[5], (0.001, 1));
        assert_eq!(b[FSYNC_BUCKETS.len()], (f64::INFINITY, 1));
        assert_eq!(b.iter().map(|(_, n)| n).sum::<u64>(), 3);
        assert!((r.sum_secs - 5.000_71).abs() < 1e-9);
        let mut sum = FsyncLatency::default();
        sum.add(&r);
        sum.add(&r);
        assert_eq!(sum.count(), 6);
    }
}

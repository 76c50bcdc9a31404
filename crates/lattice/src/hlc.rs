//! Hybrid logical clock: the node's timestamp oracle (the paper's TSO).
//!
//! Hand-written because it is a dozen lines and sits on every commit: one
//! atomic word, advanced with compare-and-swap, no lock.

use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use crate::Ts;

const LOGICAL_BITS: u32 = 16;

/// Where physical time comes from; injectable so tests can skew or freeze it.
pub trait PhysicalClock: Send + Sync {
    /// Milliseconds since the Unix epoch.
    fn now_ms(&self) -> u64;
}

/// The operating system's wall clock.
#[derive(Debug, Default, Clone, Copy)]
pub struct SystemClock;

impl PhysicalClock for SystemClock {
    fn now_ms(&self) -> u64 {
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_millis() as u64)
            .unwrap_or(0)
    }
}

/// A hybrid logical clock: every timestamp it hands out is strictly larger
/// than every one before it and than every one it has [`observed`], and stays
/// close to physical time (its high bits are milliseconds).
///
/// [`observed`]: Hlc::observe
pub struct Hlc<C: PhysicalClock = SystemClock> {
    last: AtomicU64,
    /// Physical time (ms) this clock may not read past: see
    /// [`Hlc::hold_physical_below`]. `u64::MAX` when nothing renews it.
    horizon: AtomicU64,
    /// How many pauses this process noticed (see [`Hlc::lapse`]).
    lapses: AtomicU64,
    /// Milliseconds added to the physical clock: a skewed clock, for
    /// tests only ([`Hlc::set_offset_ms`]).
    offset_ms: AtomicI64,
    clock: C,
}

impl Default for Hlc<SystemClock> {
    fn default() -> Self {
        Hlc::new(SystemClock)
    }
}

impl<C: PhysicalClock> Hlc<C> {
    /// A clock reading physical time from `clock`.
    pub fn new(clock: C) -> Self {
        Hlc {
            last: AtomicU64::new(0),
            horizon: AtomicU64::new(u64::MAX),
            lapses: AtomicU64::new(0),
            offset_ms: AtomicI64::new(0),
            clock,
        }
    }

    /// Physical time as this clock reads it (its offset included), ms.
    pub fn physical_ms(&self) -> u64 {
        let offset = self.offset_ms.load(Ordering::Relaxed);
        self.clock.now_ms().saturating_add_signed(offset)
    }

    /// Testing: reads physical time `ms` ahead (behind, when negative) of
    /// the real clock from now on — clock skew on one node, which a node
    /// allows only with `fault-injection` (`ELSA.FAULT CLOCK ms`). The
    /// timestamps it hands out stay increasing whatever the offset does.
    pub fn set_offset_ms(&self, ms: i64) {
        self.offset_ms.store(ms, Ordering::Relaxed);
    }

    fn physical(&self) -> Ts {
        let horizon = self.horizon.load(Ordering::SeqCst);
        self.physical_ms().min(horizon) << LOGICAL_BITS
    }

    /// Until renewed, timestamps take their physical part from no later
    /// than `ms` (they still grow, in the logical bits). A node in a region
    /// renews this a little ahead of now on every pulse; a process that was
    /// paused (SIGSTOP, a VM freeze) for longer wakes up with the horizon in
    /// its past, so whatever it commits before it notices — a commit whose
    /// holds and reads predate the pause — is stamped before the pause
    /// ended, hence before anything the region committed on its keys after
    /// declaring it dead, and loses every merge against that instead of
    /// overwriting it (issue 12: acknowledged appends were overwritten so).
    pub fn hold_physical_below(&self, ms: u64) {
        self.horizon.store(ms, Ordering::SeqCst);
    }

    /// Counts pauses noticed so far. Work that validated something before
    /// reading it and takes a timestamp after (a commit) checks it did not
    /// change in between: if it did, the process was paused meanwhile, what
    /// it validated may be stale and its timestamp may be past the pause,
    /// so it must not install. [`Hlc::lapsed`] is called before the horizon
    /// is renewed, so a timestamp past the old horizon always comes with a
    /// changed count.
    pub fn lapse(&self) -> u64 {
        self.lapses.load(Ordering::SeqCst)
    }

    /// This process noticed it was paused (call before renewing the horizon).
    pub fn lapsed(&self) {
        self.lapses.fetch_add(1, Ordering::SeqCst);
    }

    /// A fresh timestamp, strictly greater than any handed out or observed.
    pub fn now(&self) -> Ts {
        self.reserve(1)
    }

    /// `n` consecutive fresh timestamps (at least one), returned as the
    /// first: the clock moves past all of them at once, so no timestamp it
    /// hands to anyone else — a snapshot's — falls between two of them. An
    /// atomic step that writes several keys one after another stamps them
    /// from such a block.
    pub fn reserve(&self, n: u64) -> Ts {
        let n = n.max(1);
        let physical = self.physical();
        let mut last = self.last.load(Ordering::Relaxed);
        loop {
            let first = physical.max(last + 1);
            match self.last.compare_exchange_weak(
                last,
                first + (n - 1),
                Ordering::AcqRel,
                Ordering::Relaxed,
            ) {
                Ok(_) => return first,
                Err(seen) => last = seen,
            }
        }
    }

    /// Advances the clock past a timestamp received from elsewhere (a peer's
    /// commit), so later local commits order after it.
    pub fn observe(&self, ts: Ts) {
        self.last.fetch_max(ts, Ordering::AcqRel);
    }

    /// Whether `ts` lies no more than `max_drift_ms` past this clock's
    /// physical time: the test a timestamp from a peer must pass before it
    /// is observed or installed. A forged far-future one (2^64−2 would lock
    /// a key for good; 2^63−1 would push every later commit past it) fails.
    pub fn plausible(&self, ts: Ts, max_drift_ms: u64) -> bool {
        Self::millis(ts) <= self.physical_ms().saturating_add(max_drift_ms)
    }

    /// [`Hlc::observe`], but only for a [`plausible`](Hlc::plausible)
    /// timestamp; false (and the clock untouched) otherwise.
    pub fn observe_within(&self, ts: Ts, max_drift_ms: u64) -> bool {
        if !self.plausible(ts, max_drift_ms) {
            return false;
        }
        self.observe(ts);
        true
    }

    /// The latest timestamp handed out or observed (without advancing).
    pub fn peek(&self) -> Ts {
        self.last.load(Ordering::Acquire)
    }

    /// Physical milliseconds of a timestamp.
    pub fn millis(ts: Ts) -> u64 {
        ts >> LOGICAL_BITS
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicU64;
    use std::sync::Arc;

    struct Manual(AtomicU64);
    impl PhysicalClock for Arc<Manual> {
        fn now_ms(&self) -> u64 {
            self.0.load(Ordering::Relaxed)
        }
    }

    #[test]
    fn a_stale_horizon_keeps_timestamps_before_it_yet_increasing() {
        let phys = Arc::new(Manual(AtomicU64::new(1_000)));
        let hlc = Hlc::new(phys.clone());
        hlc.hold_physical_below(1_500);
        let a = hlc.now();
        phys.0.store(9_000, Ordering::Relaxed); // woke up after a pause
        let b = hlc.now();
        let c = hlc.now();
        assert!(a < b && b < c);
        assert_eq!(Hlc::<Arc<Manual>>::millis(c), 1_500);
        hlc.hold_physical_below(9_500); // renewed
        assert_eq!(Hlc::<Arc<Manual>>::millis(hlc.now()), 9_000);
    }

    #[test]
    fn an_offset_skews_timestamps_and_what_counts_as_plausible() {
        let phys = Arc::new(Manual(AtomicU64::new(10_000)));
        let hlc = Hlc::new(phys.clone());
        hlc.set_offset_ms(2_000);
        let ahead = hlc.now();
        assert_eq!(Hlc::<Arc<Manual>>::millis(ahead), 12_000);
        assert!(hlc.plausible(12_400 << LOGICAL_BITS, 500));
        assert!(!hlc.plausible(12_600 << LOGICAL_BITS, 500));
        // Set back: still increasing, the physical part held until real
        // time catches up.
        hlc.set_offset_ms(-1_000);
        let behind = hlc.now();
        assert!(behind > ahead);
        assert_eq!(Hlc::<Arc<Manual>>::millis(behind), 12_000);
        phys.0.store(14_000, Ordering::Relaxed);
        assert_eq!(Hlc::<Arc<Manual>>::millis(hlc.now()), 13_000);
    }

    #[test]
    fn strictly_monotonic_even_when_physical_time_goes_back() {
        let phys = Arc::new(Manual(AtomicU64::new(1_000)));
        let hlc = Hlc::new(phys.clone());
        let a = hlc.now();
        phys.0.store(500, Ordering::Relaxed); // wall clock stepped backwards
        let b = hlc.now();
        let c = hlc.now();
        assert!(a < b && b < c);
        phys.0.store(2_000, Ordering::Relaxed);
        let d = hlc.now();
        assert_eq!(Hlc::<Arc<Manual>>::millis(d), 2_000);
    }

    #[test]
    fn observe_moves_the_clock_past_remote_timestamps() {
        let phys = Arc::new(Manual(AtomicU64::new(1_000)));
        let hlc = Hlc::new(phys);
        let remote = 9_000 << LOGICAL_BITS;
        hlc.observe(remote);
        assert!(hlc.now() > remote);
    }

    #[test]
    fn a_far_future_timestamp_is_not_observed() {
        let phys = Arc::new(Manual(AtomicU64::new(1_000_000)));
        let hlc = Hlc::new(phys);
        let before = hlc.now();
        for forged in [u64::MAX - 1, (1u64 << 63) - 1, 1_000_600 << LOGICAL_BITS] {
            assert!(!hlc.plausible(forged, 500));
            assert!(!hlc.observe_within(forged, 500));
        }
        assert!(Hlc::<Arc<Manual>>::millis(hlc.now()) <= 1_000_000);
        assert!(hlc.now() > before);
        let near = 1_000_400 << LOGICAL_BITS;
        assert!(hlc.observe_within(near, 500));
        assert!(hlc.now() > near);
    }

    #[test]
    fn concurrent_callers_never_share_a_timestamp() {
        let hlc = Arc::new(Hlc::default());
        let handles: Vec<_> = (0..4)
            .map(|_| {
                let hlc = hlc.clone();
                std::thread::spawn(move || (0..10_000).map(|_| hlc.now()).collect::<Vec<_>>())
            })
            .collect();
        let mut all: Vec<Ts> = handles
            .into_iter()
            .flat_map(|h| h.join().unwrap())
            .collect();
        let n = all.len();
        all.sort_unstable();
        all.dedup();
        assert_eq!(all.len(), n);
    }

    #[test]
    fn a_reserved_block_is_never_interleaved() {
        let hlc = Hlc::default();
        let before = hlc.now();
        let first = hlc.reserve(10);
        assert!(first > before);
        let after = hlc.now();
        assert!(
            after > first + 9,
            "the next timestamp comes after the block"
        );
        assert_eq!(hlc.reserve(0) + 1, hlc.now(), "an empty block is one");
        // Under contention: every block and every single timestamp differ.
        let hlc = std::sync::Arc::new(Hlc::default());
        let taken: Vec<Vec<(Ts, Ts)>> = std::thread::scope(|s| {
            let hs: Vec<_> = (0..4)
                .map(|t| {
                    let hlc = hlc.clone();
                    s.spawn(move || {
                        (0..2000)
                            .map(|i| {
                                let n = if t % 2 == 0 { 1 + i % 7 } else { 1 };
                                let first = hlc.reserve(n);
                                (first, first + n - 1)
                            })
                            .collect()
                    })
                })
                .collect();
            hs.into_iter().map(|h| h.join().unwrap()).collect()
        });
        let mut all: Vec<(Ts, Ts)> = taken.into_iter().flatten().collect();
        all.sort();
        assert!(all.windows(2).all(|w| w[0].1 < w[1].0), "blocks overlap");
    }
}

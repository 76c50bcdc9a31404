//! Hybrid logical clock: the node's timestamp oracle (the paper's TSO).
//!
//! Hand-written because it is a dozen lines and sits on every commit: one
//! atomic word, advanced with compare-and-swap, no lock.

use std::sync::atomic::{AtomicU64, Ordering};
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
            clock,
        }
    }

    fn physical(&self) -> Ts {
        self.clock.now_ms() << LOGICAL_BITS
    }

    /// A fresh timestamp, strictly greater than any handed out or observed.
    pub fn now(&self) -> Ts {
        let physical = self.physical();
        let mut last = self.last.load(Ordering::Relaxed);
        loop {
            let next = physical.max(last + 1);
            match self
                .last
                .compare_exchange_weak(last, next, Ordering::AcqRel, Ordering::Relaxed)
            {
                Ok(_) => return next,
                Err(seen) => last = seen,
            }
        }
    }

    /// Advances the clock past a timestamp received from elsewhere (a peer's
    /// commit), so later local commits order after it.
    pub fn observe(&self, ts: Ts) {
        self.last.fetch_max(ts, Ordering::AcqRel);
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
}

//! The sending side of the read horizon (issue 46; the receiving side is
//! `horizon.rs`): a gossip frame's flush time promises the other regions
//! that every entry this node will still ship has a `*` ID at or above it
//! — their readers follow streams up to the least such promise. Two rules
//! keep it:
//!
//! - A `*` ID takes at least the milliseconds of every flush made before
//!   it is chosen ([`floor_ms`]): a clock behind the node's clock (which
//!   follows the other regions') or a stamp reserved earlier (a held
//!   part of a pipeline) would put it below.
//! - A transaction chooses its IDs before its writes reach their shard
//!   (at the command, or under holds before the commit): it *pins* each
//!   ([`pin`]), and no frame's flush time passes a pinned ID until the
//!   pin is dropped with the transaction ([`flush_ts`]). A pin older than
//!   [`PIN_FOR_MS`] holds nothing back any more — an interactive
//!   transaction left open must not stop every region's readers — and
//!   such an entry may be skipped by readers of other regions
//!   (`docs/datatypes.md`). Its age counts from when this process last
//!   made frames again after a stop ([`STOPPED_MS`] without one): a
//!   `MULTI` pinned just before a 9 s `SIGSTOP`, committed once the node
//!   had caught up 14 s after its ID, was past the age, and the entry
//!   reached the other regions below their readers' horizon
//!   (`tests/nemesis_streams.rs` under six CPU hogs, seed 2608784894:
//!   one entry skipped by two regions' followers).
//!
//! Process-wide, as the node is the process (like the horizon).

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use elsa_lattice::{Hlc, SystemClock, Ts};

fn millis(ts: Ts) -> u64 {
    Hlc::<SystemClock>::millis(ts)
}

/// How long a pin holds flush times back at most.
pub const PIN_FOR_MS: u64 = 10_000;

/// A gap between two frames' flushes longer than this: the process was
/// stopped (or starved) and a pin's age starts again.
pub const STOPPED_MS: u64 = 1_000;

/// Pinned IDs' milliseconds (→ how many), and the newest flush time's
/// milliseconds: one lock orders every pin against every flush. Also when
/// the last frame was flushed and when frames were flushed again after a
/// gap (the pins' ages count from there).
struct Pins {
    pinned: BTreeMap<u64, usize>,
    flushed_ms: u64,
    last_flush_ms: u64,
    resumed_ms: u64,
}

static PINS: Mutex<Pins> = Mutex::new(Pins {
    pinned: BTreeMap::new(),
    flushed_ms: 0,
    last_flush_ms: 0,
    resumed_ms: 0,
});

impl Pins {
    /// The flush time of a frame made at `now` (see [`flush_ts`]).
    fn flush(&mut self, now: Ts) -> Ts {
        let now_ms = millis(now);
        if self.last_flush_ms > 0 && now_ms.saturating_sub(self.last_flush_ms) > STOPPED_MS {
            self.resumed_ms = now_ms;
        }
        self.last_flush_ms = self.last_flush_ms.max(now_ms);
        let ts = match self.pinned.keys().next() {
            Some(&ms) if ms.max(self.resumed_ms).saturating_add(PIN_FOR_MS) > now_ms => {
                now.min(ms << 16)
            }
            _ => now,
        };
        self.flushed_ms = self.flushed_ms.max(millis(ts));
        ts
    }
}

/// [`Pins::flushed_ms`], readable without the lock.
static FLUSHED_MS: AtomicU64 = AtomicU64::new(0);

fn pins() -> std::sync::MutexGuard<'static, Pins> {
    PINS.lock().unwrap_or_else(|e| e.into_inner())
}

/// The least milliseconds a `*` ID chosen now may take, on the shard that
/// applies it at once (a lone command): at or above every flush so far —
/// those of its own shard were made on this thread before.
pub fn floor_ms() -> u64 {
    FLUSHED_MS.load(Ordering::Acquire)
}

/// A transaction's `*` ID not yet applied on its shard: flush times stay
/// at or below it while this lives (see the module doc).
#[derive(Debug)]
pub struct IdPin(u64);

impl Drop for IdPin {
    fn drop(&mut self) {
        let mut p = pins();
        if let Some(n) = p.pinned.get_mut(&self.0) {
            *n -= 1;
            if *n == 0 {
                p.pinned.remove(&self.0);
            }
        }
    }
}

/// Pins a `*` ID a transaction is choosing: the least milliseconds it may
/// take (at or above every flush so far, and the clock `now_ms`), held
/// until the pin drops.
pub fn pin(now_ms: u64) -> (u64, IdPin) {
    let mut p = pins();
    let ms = p.flushed_ms.max(now_ms);
    *p.pinned.entry(ms).or_default() += 1;
    (ms, IdPin(ms))
}

/// The flush time of a gossip frame made now: the clock, held at the
/// least pinned ID (not older than [`PIN_FOR_MS`]).
pub fn flush_ts(hlc: &Hlc) -> Ts {
    let mut p = pins();
    let ts = p.flush(hlc.now());
    FLUSHED_MS.store(p.flushed_ms, Ordering::Release);
    ts
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pinned_id_holds_flush_times_and_later_ids_above_flushes() {
        let hlc = Hlc::new(SystemClock);
        let first = flush_ts(&hlc);
        assert!(floor_ms() >= millis(first));
        // A pin is at or above every flush before it.
        let (ms, pin_a) = pin(0);
        assert!(ms >= millis(first));
        std::thread::sleep(std::time::Duration::from_millis(3));
        // While it lives, no flush time passes it.
        let held = flush_ts(&hlc);
        assert!(millis(held) <= ms, "{held} passed the pin at {ms}");
        drop(pin_a);
        let free = flush_ts(&hlc);
        assert!(millis(free) > ms);
        assert!(floor_ms() >= millis(free));
    }

    /// A pin's age counts from when frames were made again after a stop:
    /// a transaction pinned just before a 9 s pause still holds flush
    /// times once the node runs again; one left open 10 s while the
    /// process ran does not.
    #[test]
    fn a_pin_outlives_a_stopped_process_but_not_an_open_transaction() {
        let ts = |ms: u64| ms << 16;
        let mut p = Pins {
            pinned: BTreeMap::new(),
            flushed_ms: 0,
            last_flush_ms: 0,
            resumed_ms: 0,
        };
        let start = 1_000_000;
        p.flush(ts(start));
        p.pinned.insert(start + 10, 1);
        // Stopped 9 s, then catching up 4 s, flushing every 50 ms.
        let mut at = start + 9_000;
        while at < start + 14_400 {
            assert_eq!(millis(p.flush(ts(at))), start + 10, "held at {at}");
            at += 50;
        }
        // Running on: 10 s after the node was back, the pin holds no more.
        while at < start + 19_100 {
            at += 50;
            p.flush(ts(at));
        }
        assert_eq!(
            millis(p.flush(ts(at))),
            at,
            "an open transaction stops no reader"
        );
    }
}

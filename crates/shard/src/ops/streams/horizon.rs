//! The read horizon of streams across regions (issue 46): what XREAD and
//! XREADGROUP `>` may show, set by the cluster from the other regions'
//! gossip streams — and the check that nothing arrives below it.

use std::sync::atomic::{AtomicU64, Ordering};

use elsa_lattice::stream::{Stream, StreamId};
use elsa_lattice::Version;

/// What XREAD and XREADGROUP `>` show across regions (issue 46): only
/// entries whose ID's milliseconds are below this (unix ms; `u64::MAX`:
/// no bound). Set by the cluster to the least flush time of the other
/// regions' gossip streams merged here: an entry another region has not
/// shipped yet is stamped at or after its node's last flush, and a `*`
/// ID's milliseconds are at least its stamp's
/// (`write::add`) — so no entry can still arrive below the bound, and
/// a reader following a stream by its last ID skips none
/// (`docs/datatypes.md`). `u64::MAX` on a node alone or in one region.
static HORIZON_MS: AtomicU64 = AtomicU64::new(u64::MAX);

/// Sets the read horizon (see [`HORIZON_MS`]).
pub fn set_read_horizon(ms: u64) {
    HORIZON_MS.store(ms, Ordering::Relaxed);
}

/// The read horizon now (unix ms, `u64::MAX`: none): the cluster's, held
/// back by another region's stream parts waiting here ([`hold_for_parts`]).
pub fn read_horizon() -> u64 {
    HORIZON_MS
        .load(Ordering::Relaxed)
        .min(PARTS_MIN.load(Ordering::Acquire))
}

/// Per shard: the read horizon when its oldest waiting stream part of
/// another region's transaction was parked (`u64::MAX`: none). A part
/// waits for the rest of its transaction after its frame was merged —
/// the cluster's horizon has passed that frame — and shows later: its
/// entries are at or above the horizon of when it came, so the horizon
/// stays there until it shows (`tests/nemesis_streams.rs`: followers
/// skipped parts of `MULTI`s of other regions shown after waiting).
static PARTS: std::sync::Mutex<Vec<u64>> = std::sync::Mutex::new(Vec::new());

/// The least of [`PARTS`].
static PARTS_MIN: AtomicU64 = AtomicU64::new(u64::MAX);

fn set_parts(shard: usize, f: impl FnOnce(u64) -> u64) {
    let mut held = PARTS.lock().unwrap_or_else(|e| e.into_inner());
    if held.len() <= shard {
        held.resize(shard + 1, u64::MAX);
    }
    let v = f(held[shard]);
    if v == held[shard] {
        return;
    }
    held[shard] = v;
    let least = held.iter().copied().min().unwrap_or(u64::MAX);
    PARTS_MIN.store(least, Ordering::Release);
}

/// Shard `shard` parked a stream part when the horizon was `at`.
pub fn hold_for_parts(shard: usize, at: u64) {
    set_parts(shard, |held| held.min(at));
}

/// What shard `shard`'s waiting stream parts hold the horizon at now
/// (`u64::MAX`: none).
pub fn hold_for_parts_exactly(shard: usize, at: u64) {
    set_parts(shard, |_| at);
}

/// `stream-read-horizon immediate`: following reads show every entry
/// at once, as Redis Active-Active does (an entry another region adds
/// below one already read is then skipped by that reader).
static IMMEDIATE: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Sets `stream-read-horizon`: `immediate` (true) or `converged`.
pub fn set_read_immediate(on: bool) {
    IMMEDIATE.store(on, Ordering::Relaxed);
}

/// Whether `stream-read-horizon` is `immediate`.
pub fn read_immediate() -> bool {
    IMMEDIATE.load(Ordering::Relaxed)
}

/// The greatest ID a following read may show (None: none at all).
pub(super) fn shown_upto() -> Option<StreamId> {
    if read_immediate() {
        return Some(StreamId::MAX);
    }
    match read_horizon() {
        u64::MAX => Some(StreamId::MAX),
        ms => super::prev(StreamId::new(ms, 0)),
    }
}

/// Another region's entries merged here below the read horizon since the
/// start (`INFO replication` `stream_late_entries`): each one a reader
/// following the stream may have passed — the promise of
/// `docs/datatypes.md` broken. Counted so a checker and an operator see
/// it; 0 is the rule.
static LATE: AtomicU64 = AtomicU64::new(0);

/// How many entries came below the horizon (see [`LATE`]).
pub fn late_count() -> u64 {
    LATE.load(Ordering::Relaxed)
}

/// How far below the horizon [`late_entries`] looks: a whole state that
/// anti-entropy brings holds every entry ever kept, and only the recent
/// ones can be new.
const LATE_WINDOW_MS: u64 = 60_000;

/// The entries of `delta` (another region's, being merged) that are new
/// here (`held` lacks them) and lie below the read horizon, with who wrote
/// them — counted (see [`LATE`]). Empty with no horizon.
pub fn late_entries(delta: &Stream, held: Option<&Stream>) -> Vec<(StreamId, Version)> {
    let h = read_horizon();
    if h == u64::MAX || h == 0 || read_immediate() {
        return Vec::new();
    }
    let Some(upto) = super::prev(StreamId::new(h, 0)) else {
        return Vec::new();
    };
    let from = StreamId::new(h.saturating_sub(LATE_WINDOW_MS), 0);
    let late: Vec<(StreamId, Version)> = delta
        .entries_in(from, upto)
        .filter(|(id, _)| held.is_none_or(|s| !s.holds(*id)))
        .map(|(id, e)| (id, e.version))
        .collect();
    LATE.fetch_add(late.len() as u64, Ordering::Relaxed);
    late
}

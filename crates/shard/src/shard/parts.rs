//! Parts of other regions' transactions, kept out of sight here until
//! their transaction is installed whole (issue 12, item 13; issue 42).
//!
//! Another region's commit of several keys reaches this shard key by key,
//! in that region's gossip. A part that would win is *parked*
//! ([`Shard::op_merge`] with `park`) until the replication service
//! installs the whole transaction at once (`elsa_txn::unit`), or until
//! [`PART_WAIT`](super::PART_WAIT) passes and it is shown alone.
//!
//! **Order.** Whole is not enough. Transfer T2 writes x and y; T3, which
//! read T2's y, writes y and z. T3's lattice of y holds T2's change of y,
//! so installed before T2, T3 shows T2's y without T2's x — a reader sees
//! a wrong total (the bank run of issue 42: 20 of 5,928 remote snapshots).
//! So this shard remembers, per parked key, the versions of transaction
//! parts that arrived and are not installed yet (`units`), and:
//!
//! - an install of the key's versions `v₁ < … < vₙ` (one or several
//!   transactions installed together) passes its check
//!   ([`Expect::InOrder`](crate::Expect::InOrder)) only when `vₙ` has
//!   arrived here and every part still waiting below it is among them;
//! - a lone write of the other region (a commit of one key) that lands on
//!   a waiting part of an older transaction waits behind it, since it may
//!   carry that transaction's change (an `INCR` of T2's y).
//!
//! **Durable** (issue 42). Parked parts are logged
//! ([`Frame::Parked`](crate::wal::codec::Frame::Parked)) and logged again
//! at each snapshot, and recovery parks them again: forgotten in a restart,
//! the order check above would have let a later transaction of their keys
//! show before them (a reader right after the restart saw a wrong total).
//!
//! A key's parts come from one shard of the writing region, over one
//! connection, in the order they were committed there (the sender ships
//! every write of a transaction, even one overwritten in the same epoch:
//! `GossipBuffer::capture`), so a part that has arrived has every older
//! part of its key before it.

use std::time::{Duration, Instant};

use elsa_lattice::{Crdt, KeyState, Version};

use super::{Shard, Source};
use crate::record::{Record, Unit};
use crate::wal::codec::{EntryState, Frame, LogEntry};

/// A gap between two [`Shard::settle_parts`] calls (one per merge epoch)
/// longer than this: the process was stopped (SIGSTOP, a VM paused) and
/// could not install anything meanwhile.
const STOPPED_GAP: Duration = Duration::from_secs(1);

/// The region counts as unable to install for this long after its
/// installer last said so (it says so at least every 0.5 s while it
/// lasts: `elsa_txn::unit`).
const BLOCKED_HOLD: Duration = Duration::from_secs(1);

/// What waits for `key`: the other region's lattices merged, and which of
/// them are parts of transactions not yet installed here.
pub(super) struct Parked {
    /// Everything parked for the key, merged (a plain lattice: the newest;
    /// typed deltas: their merge). Shown alone after `PART_WAIT`.
    pub entry: LogEntry,
    /// When it was parked, or when an install last made progress on it.
    pub since: Instant,
    /// The oldest commit merged into it (holds the collection floor back:
    /// see [`Shard::collection_floor`]).
    pub oldest: elsa_lattice::Ts,
    /// Versions of transaction parts here and not installed yet, rising.
    pub units: Vec<Version>,
    /// Those parts as they came (what a snapshot logs again, and what
    /// recovery hands the installer: see [`Shard::parked_parts`]).
    pub pending: Vec<LogEntry>,
    /// For a stream's part: the read horizon when it was first parked,
    /// which holds the horizon back until it shows (`u64::MAX`: not a
    /// stream). Its entries are at or above it — they came in a frame
    /// after those the horizon counts — and readers must not pass them
    /// while they wait (`ops::streams::horizon::hold_for_parts`).
    pub horizon: u64,
}

impl Shard {
    /// Keeps `e` out of sight: until the rest of its transaction is here
    /// (a part), or until the parts older than it are installed (a lone
    /// write behind them). A plain lattice replaces an older one parked
    /// for its key (it supersedes it); typed deltas merge, since each
    /// holds changes the other does not.
    pub(super) fn park_part(&mut self, e: &LogEntry) {
        if let Some(d) = &mut self.durability {
            d.wal.stage(
                &e.key,
                &e.state,
                e.start_ts,
                e.version,
                Frame::Parked,
                e.unit,
            );
        }
        let unit = (e.unit != Unit::None).then_some(e.version);
        let horizon = if is_stream(e) {
            crate::ops::streams::read_horizon()
        } else {
            u64::MAX
        };
        if horizon != u64::MAX {
            crate::ops::streams::hold_for_parts(self.index, horizon);
        }
        let Some(p) = self.parts.get_mut(&e.key) else {
            self.parts.insert(
                e.key.clone(),
                Parked {
                    entry: e.clone(),
                    since: Instant::now(),
                    oldest: e.version.commit_ts,
                    units: unit.into_iter().collect(),
                    pending: unit.map(|_| e.clone()).into_iter().collect(),
                    horizon,
                },
            );
            return;
        };
        p.oldest = p.oldest.min(e.version.commit_ts);
        p.horizon = p.horizon.min(horizon);
        if let Some(v) = unit {
            if let Err(at) = p.units.binary_search(&v) {
                p.units.insert(at, v);
                p.pending.push(e.clone());
            }
        }
        if let (EntryState::Plain(_), EntryState::Plain(_)) = (&p.entry.state, &e.state) {
            if p.entry.version < e.version {
                p.entry = e.clone();
            }
            return;
        }
        let mut merged = typed_of_entry(&p.entry);
        merged.merge(typed_of_entry(e));
        p.entry.state = EntryState::Typed(std::sync::Arc::new(merged));
        if e.version > p.entry.version {
            p.entry.version = e.version;
            p.entry.start_ts = e.start_ts;
            p.entry.unit = e.unit;
        }
    }

    /// True when a lone write of `key` at `version`, from another region,
    /// must wait: a part of an older transaction of that key is here and
    /// not installed, and the write may carry its change.
    pub(super) fn waits_behind_a_part(&self, hash: u64, key: &[u8], version: Version) -> bool {
        let Some(p) = self.parts.get(key) else {
            return false;
        };
        let stored = self.version_of(hash, key);
        p.units.iter().any(|&u| u > stored && u < version)
    }

    /// The check of an install of another region's transactions
    /// ([`crate::Expect::InOrder`]): `versions` (rising) are what it
    /// installs of `key`. True when the newest has arrived here (or is
    /// superseded) and no part older than it waits that is not among them.
    pub(super) fn in_order(&self, hash: u64, key: &[u8], versions: &[Version]) -> bool {
        let Some(&newest) = versions.last() else {
            return true;
        };
        let stored = self.version_of(hash, key);
        if stored >= newest {
            return true;
        }
        let Some(p) = self.parts.get(key) else {
            // Its part has not arrived: an older one may be on the way
            // before it.
            return false;
        };
        p.units.binary_search(&newest).is_ok()
            && p.units
                .iter()
                .filter(|&&u| u > stored && u < newest)
                .all(|u| versions.binary_search(u).is_ok())
    }

    /// `key` was just written: forgets the parts that write installed or
    /// superseded, and shows what waited only behind them.
    pub(super) fn parts_after_write(&mut self, hash: u64, key: &[u8]) {
        let stored = self.version_of(hash, key);
        let Some(p) = self.parts.get_mut(key) else {
            return;
        };
        let before = p.units.len();
        p.units.retain(|&u| u > stored);
        p.pending.retain(|e| e.version > stored);
        if p.units.len() < before {
            p.since = Instant::now();
        }
        if p.entry.version > stored && !p.units.is_empty() {
            return;
        }
        let p = self.parts.remove(key).expect("just found");
        // Superseded, or installed with its transaction — but a typed
        // delta is never superseded by a newer write (it holds elements
        // the newer one may not): it merges (a no-op when its unit put it
        // here already). And a lattice newer than the write, with no part
        // left to wait behind, is shown now.
        if p.entry.version > stored || matches!(p.entry.state, EntryState::Typed(_)) {
            self.show_part(hash, &p.entry);
        }
    }

    /// Parts of other regions' transactions: forgets those installed
    /// since (the whole transaction was), and shows alone those that
    /// waited longer than `wait` — the rest was lost on the way, and
    /// staleness must stay bounded. Called every merge epoch.
    ///
    /// A part's wait counts only time in which this region could have
    /// installed it (issue 42: torn remote snapshots right after a region
    /// got its majority back). The wait pauses while the process was
    /// stopped (a gap between calls), while this shard refuses writes, and
    /// while this node's installer finds the region unable to install —
    /// `blocked_ago`, how long ago it last said so (a key's primary
    /// without its lease, unreachable or paused; `None`: never), said at
    /// least every 0.5 s while it lasts. After such a block every part
    /// still has [`PART_GRACE`](super::PART_GRACE) to go, for the backlog
    /// to install.
    ///
    /// Paused, not started again: until 2026-12-04 each block restarted
    /// every wait, and a region of one node starved of CPU, whose installs
    /// failed every 10–20 s, never reached the end of one — a part whose
    /// rest was lost stayed out of sight for good, and every later
    /// transaction on its key with it (`tests/nemesis_streams.rs` under six
    /// CPU hogs: the digests never converged).
    pub fn settle_parts(&mut self, wait: Duration, blocked_ago: Option<Duration>) {
        let now = Instant::now();
        let tick = self
            .parts_settled
            .replace(now)
            .map(|t| now.saturating_duration_since(t));
        let blocked =
            self.write_refusal().is_some() || blocked_ago.is_some_and(|a| a < BLOCKED_HOLD);
        let paused = tick.filter(|&g| blocked || g > STOPPED_GAP);
        let floor = blocked
            .then(|| now.checked_sub(wait.saturating_sub(super::PART_GRACE.min(wait))))
            .flatten();
        for p in self.parts.values_mut() {
            if let Some(g) = paused {
                p.since = (p.since + g).min(now);
            }
            if let Some(f) = floor {
                p.since = p.since.max(f);
            }
        }
        if self.parts.is_empty() || self.write_refusal().is_some() {
            self.release_horizon();
            return;
        }
        let hasher = *self.table.hasher();
        let mut late = Vec::new();
        let mut show = Vec::new();
        self.parts.retain(|key, p| {
            let hash = std::hash::BuildHasher::hash_one(&hasher, &key[..]);
            let stored = self
                .table
                .get(hash, key)
                .map_or(Version::ZERO, Record::version);
            p.units.retain(|&u| u > stored);
            p.pending.retain(|e| e.version > stored);
            if stored >= p.entry.version || p.units.is_empty() {
                // Superseded or installed (a typed delta still merges: a
                // newer write does not hold its elements), or a lone write
                // no part holds back any more.
                if stored < p.entry.version || matches!(p.entry.state, EntryState::Typed(_)) {
                    show.push((hash, p.entry.clone()));
                }
                return false;
            }
            if p.since.elapsed() >= wait {
                late.push((hash, p.entry.clone()));
                return false;
            }
            true
        });
        if !late.is_empty() {
            // Which ones, so a run's log tells what was shown in part.
            let which: Vec<String> = late
                .iter()
                .take(3)
                .map(|(_, e)| {
                    format!(
                        "{} (origin {}, ts {}, {:?})",
                        String::from_utf8_lossy(&e.key),
                        e.version.origin,
                        e.version.commit_ts,
                        e.unit
                    )
                })
                .collect();
            tracing::warn!(
                "{} parts of other regions' transactions waited {wait:?} for the rest; shown alone: {}{}",
                late.len(),
                which.join(", "),
                if late.len() > 3 { ", …" } else { "" }
            );
        }
        for (hash, e) in show {
            self.show_part(hash, &e);
        }
        for (hash, e) in late {
            self.stats.parts_alone += 1;
            self.show_part(hash, &e);
        }
        self.release_horizon();
    }

    /// Tells the read horizon what this shard's parked stream parts still
    /// hold it at (none: released), once parts went.
    pub(super) fn release_horizon(&mut self) {
        let held = self.parts.values().map(|p| p.horizon).min();
        crate::ops::streams::hold_for_parts_exactly(self.index, held.unwrap_or(u64::MAX));
    }

    /// A parked part read back by recovery ([`Frame::Parked`]): parked
    /// again unless what is stored is as new (then it was installed, or a
    /// typed delta merges as it would have when shown).
    pub fn restore_part(&mut self, hash: u64, e: &LogEntry) {
        if self.version_of(hash, &e.key) < e.version {
            self.park_part(e);
        } else if matches!(e.state, EntryState::Typed(_)) {
            self.restore(hash, e);
        }
    }

    /// Logs every parked part again (into a new segment, which the
    /// snapshot about to be written does not replace).
    pub(super) fn relog_parts(&mut self) {
        let Some(d) = &mut self.durability else {
            return;
        };
        for p in self.parts.values() {
            // The parts as they came first: recovery keeps the first copy
            // of each version as the part (a typed merge holds older ones').
            for e in p.pending.iter().chain(std::iter::once(&p.entry)) {
                d.wal.stage(
                    &e.key,
                    &e.state,
                    e.start_ts,
                    e.version,
                    Frame::Parked,
                    e.unit,
                );
            }
        }
        d.wal.seal();
    }

    /// Every part parked here as it came, not installed yet (for recovery:
    /// the installer's queue was lost with the process).
    pub fn parked_parts(&self) -> impl Iterator<Item = &LogEntry> {
        self.parts.values().flat_map(|p| &p.pending)
    }

    /// The version stored for `key` (ZERO when none).
    pub fn stored_version(&self, key: &[u8]) -> Version {
        let hash = std::hash::BuildHasher::hash_one(self.table.hasher(), key);
        self.version_of(hash, key)
    }

    /// True when `key`'s part of the transaction committed as `version`
    /// waits here.
    pub fn is_parked(&self, key: &[u8], version: Version) -> bool {
        self.parts
            .get(key)
            .is_some_and(|p| p.units.binary_search(&version).is_ok())
    }

    /// What is parked for `key`, as text (empty: nothing): its versions
    /// and how long they have waited (for `ELSA.DIGEST STATE`).
    pub(super) fn describe_parts(&self, key: &[u8]) -> String {
        let Some(p) = self.parts.get(key) else {
            return String::new();
        };
        let pending: Vec<(Version, crate::record::Unit)> =
            p.pending.iter().map(|e| (e.version, e.unit)).collect();
        format!(
            "parked: newest {:?} ({:?}), waiting {:.1?}, unit versions {:?}, parts as they came {pending:?}, stored {:?}\n{:#?}",
            p.entry.version,
            p.entry.unit,
            p.since.elapsed(),
            p.units,
            self.stored_version(key),
            p.entry.state
        )
    }

    /// Merges a parked lattice into the table, as the unit it came from.
    fn show_part(&mut self, hash: u64, e: &LogEntry) {
        let unit = std::mem::replace(&mut self.unit, e.unit);
        self.install_from(hash, &e.key, &e.state, e.start_ts, e.version, Source::Peer);
        self.unit = unit;
    }
}

/// Whether `e` carries a stream's change.
fn is_stream(e: &LogEntry) -> bool {
    matches!(&e.state, EntryState::Typed(s)
        if matches!(s.collection, Some(elsa_lattice::Collection::Stream(_))))
}

/// An entry's state as a typed one (a plain lattice as a string's base).
pub(super) fn typed_of_entry(e: &LogEntry) -> KeyState {
    match &e.state {
        EntryState::Typed(s) => (**s).clone(),
        EntryState::Plain(p) => KeyState::of_string(elsa_lattice::Counter::default().set(
            p.as_ref().map(|c| c.value.clone()),
            p.as_ref().and_then(|c| c.expire_ms),
            e.start_ts,
            e.version,
        )),
    }
}

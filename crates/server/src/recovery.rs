//! Recovery at start-up: the snapshot and the log into fresh shards, and
//! what of other regions' transactions this node was still installing
//! (handed to the installer once the node runs).

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, AtomicU64};
use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;
use elsa_lattice::Hlc;
use elsa_shard::wal::codec::LogEntry;
use elsa_shard::wal::files::{DataDir, Origin, Replayed};
use elsa_shard::wal::Wal;
use elsa_shard::{KeyHasher, Shard, Unit};
use elsa_txn::record::{is_record_key, Outcome};

use crate::config::Config;
use crate::persistence::Persistence;
use crate::state::StartError;

/// What recovery gives the node.
pub(crate) struct Recovered {
    /// One per worker, holding what the node held.
    pub shards: Vec<Shard>,
    /// The data directory and what recovery did.
    pub persistence: Persistence,
    /// Other regions' transactions to install (see [`units_to_install`]).
    pub units: Vec<Vec<LogEntry>>,
    /// Per shard, this node's own commits of the last 30 s before it
    /// stopped, in commit order: the first frame of each of its new
    /// streams to other regions (issue 42: the frames of its last moments
    /// were lost with the process, and anti-entropy, which brings keys'
    /// latest states only, left parts of its transactions waiting there
    /// for the full `PART_WAIT`).
    pub tail: Vec<Vec<LogEntry>>,
}

/// Loads the snapshot and log into fresh shards and opens a new log
/// segment for each. With `drop_unconfirmed`, this node's own commits that
/// its region's replicas never confirmed are left out (`DataDir::recover`).
pub(crate) fn recover(
    config: &Config,
    hasher: KeyHasher,
    hlc: &Arc<Hlc>,
    drop_unconfirmed: bool,
) -> Result<Recovered, StartError> {
    let dir = DataDir::open(&config.data_dir)
        .map_err(|e| StartError::DataDir(config.data_dir.display().to_string(), e))?;
    let workers = config.workers;
    let mut shards: Vec<Shard> = (0..workers)
        .map(|i| Shard::new(i, config.node_id, hasher, hlc.clone()))
        .collect();
    // What each shard had collected when the snapshot was taken: a
    // record read from the log after it puts back nothing from before
    // (`Shard::restore_replayed`).
    let manifest = dir.manifest().map_err(StartError::Recover)?;
    if let Some(m) = &manifest {
        for (i, shard) in shards.iter_mut().enumerate() {
            shard.set_collection_floor(m.floor_of(i, workers));
        }
    }
    let started = Instant::now();
    let mut max_ts = 0;
    // Replay is a merge: files may be read in any order, and a record is
    // placed by today's ring even if the node had another shard count.
    let ring =
        elsa_cluster::ring::Ring::alone(config.node_id, workers as u16, config.cluster.vnodes);
    let place = |e: &LogEntry| {
        let hash = std::hash::BuildHasher::hash_one(&hasher, &e.key[..]);
        let shard = usize::from(ring.own_shard(elsa_cluster::ring::slot_of(hash)));
        (hash, shard)
    };
    let mut remote_records = HashSet::new();
    let mut tail = Tail::new(workers);
    let recovery = dir.recover(drop_unconfirmed, |replayed| {
        let (record, origin) = match replayed {
            Replayed::Lattices(record, origin) => (record, origin),
            Replayed::Flush(db, floor) => {
                let mut floors = elsa_shard::db::Floors::default();
                floors.raise(db, floor);
                for shard in shards.iter_mut() {
                    shard.apply_flush_floor(&floors);
                }
                return;
            }
        };
        for e in record {
            // A committed transaction record in the log puts back every
            // write of its transaction, whichever shards' logs had their
            // own parts: a multi-shard commit recovers all-or-nothing. (A
            // record its region never confirmed is not replayed: the region
            // may have settled the transaction aborted meanwhile.) One in
            // the snapshot is spent: its transaction is in the snapshot
            // whole (`Origin::Snapshot`). One another region sent goes to
            // the installer (`units_to_install`).
            let more = match origin {
                Origin::Log | Origin::Own => {
                    elsa_txn::record::restore_writes(&e.key, e.state.plain().map(|c| &c.value[..]))
                }
                Origin::Remote => {
                    if is_record_key(&e.key) {
                        remote_records.insert(e.key.clone());
                    }
                    Vec::new()
                }
                Origin::Snapshot | Origin::Parked => Vec::new(),
            };
            max_ts = max_ts.max(e.version.commit_ts);
            let (hash, shard) = place(&e);
            if origin == Origin::Parked {
                shards[shard].restore_part(hash, &e);
                continue;
            }
            shards[shard].restore(hash, &e);
            if origin == Origin::Own {
                tail.keep(shard, &e);
            }
            for w in more {
                max_ts = max_ts.max(w.version.commit_ts);
                let (hash, shard) = place(&w);
                shards[shard].restore_replayed(hash, &w);
                // A write of this node's own transaction put back from its
                // record (its part never reached that shard's log before
                // the crash) goes to other regions again too: otherwise
                // only anti-entropy brings it, after this node's new frames
                // have moved their read horizons past it (issue 46).
                if origin == Origin::Own {
                    tail.keep(shard, &w);
                }
            }
        }
    })?;
    hlc.observe(max_ts.max(recovery.flush_floor.highest()));
    for shard in &mut shards {
        shard.apply_flush_floor(&recovery.flush_floor);
    }
    let recovery_ms = started.elapsed().as_millis() as u64;
    for (path, len) in &recovery.torn {
        tracing::warn!(
            "{}: torn record at the end (a write cut short by a crash); cut the file to {len} bytes",
            path.display()
        );
    }
    if recovery.files > 0 {
        tracing::info!(
            "recovered {} lattices from {} records in {} files ({} MB) in {recovery_ms} ms",
            recovery.entries,
            recovery.records,
            recovery.files,
            recovery.bytes / 1_000_000
        );
    }
    if recovery.unconfirmed > 0 {
        tracing::warn!(
            "left out {} lattices this node committed that its region's replicas never confirmed (never acknowledged at level region; a write any replica got comes back from it)",
            recovery.unconfirmed
        );
    }
    let seq = recovery.max_seq + 1;
    for (i, shard) in shards.iter_mut().enumerate() {
        let file = dir
            .create_segment(seq, i, true)
            .map_err(|e| StartError::Segment(config.data_dir.display().to_string(), e))?;
        shard.attach_wal(
            Wal::new(Box::new(file), config.appendfsync),
            dir.clone(),
            seq,
        );
    }
    let persistence = Persistence {
        dir,
        next_seq: AtomicU64::new(seq + 1),
        in_progress: AtomicBool::new(false),
        last_save_unix: AtomicU64::new(recovery.snapshot_unix),
        last_save_ms: AtomicU64::new(0),
        last_error: std::sync::Mutex::new(None),
        recovery,
        recovery_ms,
    };
    let units = units_to_install(&shards, &remote_records, |e| place(e).1);
    if !units.is_empty() {
        tracing::info!(
            "{} transactions of other regions were not installed here when the node stopped: handed to the installer",
            units.len()
        );
    }
    Ok(Recovered {
        shards,
        persistence,
        units,
        tail: tail.finish(),
    })
}

/// How far back a restarted node's own commits go to other regions again
/// (see [`Recovered::tail`]).
const TAIL: std::time::Duration = std::time::Duration::from_secs(30);
/// The most of them kept per shard.
const TAIL_MAX: usize = 100_000;

/// The newest of this node's own commits, per shard, as recovery reads
/// them (files in any order).
struct Tail {
    per_shard: Vec<Vec<LogEntry>>,
    newest: u64,
}

impl Tail {
    fn new(shards: usize) -> Tail {
        Tail {
            per_shard: vec![Vec::new(); shards],
            newest: 0,
        }
    }

    fn keep(&mut self, shard: usize, e: &LogEntry) {
        self.newest = self.newest.max(e.version.commit_ts);
        let list = &mut self.per_shard[shard];
        list.push(e.clone());
        if list.len() >= 2 * TAIL_MAX {
            let from = self.newest.saturating_sub((TAIL.as_millis() as u64) << 16);
            list.retain(|e| e.version.commit_ts >= from);
            list.sort_by_key(|e| e.version);
            let over = list.len().saturating_sub(TAIL_MAX);
            list.drain(..over);
        }
    }

    /// Per shard, its commits of the last [`TAIL`] before the newest, in
    /// commit order.
    fn finish(mut self) -> Vec<Vec<LogEntry>> {
        let from = self.newest.saturating_sub((TAIL.as_millis() as u64) << 16);
        for list in &mut self.per_shard {
            list.retain(|e| e.version.commit_ts >= from);
            list.sort_by_key(|e| e.version);
            let over = list.len().saturating_sub(TAIL_MAX);
            list.drain(..over);
        }
        self.per_shard
    }
}

/// Other regions' transactions this node was installing when it stopped
/// (the installer's queue is not kept): each transaction record another
/// region sent (`remote_records`) with a write not stored here, each
/// record (from the snapshot too) with a write whose part is parked here,
/// and each one-shard commit whose parts are parked here. The installer
/// installs them in order, as when they first came (issue 42: recovery
/// used to put such a record's writes in at once, and a transfer that
/// built on an earlier one still waiting showed first — a reader right
/// after the restart saw a wrong total).
fn units_to_install(
    shards: &[Shard],
    remote_records: &HashSet<Bytes>,
    shard_of: impl Fn(&LogEntry) -> usize,
) -> Vec<Vec<LogEntry>> {
    let parked = shards.iter().any(|s| s.parked_parts().next().is_some());
    if !parked && remote_records.is_empty() {
        return Vec::new();
    }
    let mut units = Vec::new();
    for shard in shards {
        for (key, value) in shard.values_under(elsa_txn::record::RECORD_PREFIX) {
            let Ok(Outcome::Committed(writes)) = Outcome::decode(&value) else {
                continue;
            };
            let waits = writes
                .iter()
                .any(|w| shards[shard_of(w)].is_parked(&w.key, w.version));
            let missing = remote_records.contains(&key)
                && writes
                    .iter()
                    .any(|w| shards[shard_of(w)].stored_version(&w.key) < w.version);
            if waits || missing {
                units.push(writes);
            }
        }
    }
    // A one-shard commit's parts share their start and origin
    // (`elsa_cluster`'s `service/units`).
    let mut here: HashMap<(u64, u32), Vec<LogEntry>> = HashMap::new();
    for shard in shards {
        for e in shard.parked_parts().filter(|e| e.unit == Unit::Here) {
            here.entry((e.start_ts, e.version.origin))
                .or_default()
                .push(e.clone());
        }
    }
    units.extend(here.into_values());
    units
}

#[cfg(test)]
mod tests {
    use super::*;
    use elsa_lattice::Version;
    use elsa_shard::wal::codec::EntryState;
    use elsa_shard::Current;

    fn entry(key: &str, value: &str, version: Version, unit: Unit) -> LogEntry {
        LogEntry {
            key: Bytes::from(key.to_string()),
            state: EntryState::Plain(Some(Current {
                value: Bytes::from(value.to_string()),
                expire_ms: None,
                ttl_of: None,
            })),
            start_ts: version.commit_ts,
            version,
            unit,
        }
    }

    fn record(txn: u64, writes: Vec<LogEntry>, version: Version) -> LogEntry {
        LogEntry {
            key: elsa_txn::record::record_key(txn),
            state: EntryState::Plain(Some(Current {
                value: Outcome::Committed(writes).encode(),
                expire_ms: None,
                ttl_of: None,
            })),
            start_ts: version.commit_ts,
            version,
            unit: Unit::None,
        }
    }

    /// Issue 42: what recovery hands the installer — another region's
    /// record with a write not here, a record (of any origin) with a part
    /// parked here, a one-shard commit whose parts are parked — and what
    /// it does not: a record whose writes are all here.
    #[test]
    fn recovery_hands_the_installer_what_was_not_installed() {
        let hasher = KeyHasher::default();
        let hlc = Arc::new(Hlc::default());
        let mut shards = vec![Shard::new(0, 1, hasher, hlc.clone())];
        let put = |s: &mut Shard, e: &LogEntry, parked: bool| {
            let hash = std::hash::BuildHasher::hash_one(&hasher, &e.key[..]);
            if parked {
                s.restore_part(hash, e);
            } else {
                s.restore(hash, e);
            }
        };
        let v = |t: u64| Version::new(t << 16, 9);
        // Another region's transaction: x's part parked, y's not here.
        let (x, y) = (
            entry("x", "1", v(20), Unit::Shards),
            entry("y", "2", v(20), Unit::Shards),
        );
        let remote = record(7, vec![x.clone(), y.clone()], v(20));
        put(&mut shards[0], &remote, false);
        put(&mut shards[0], &x, true);
        // This region's transaction, whole here.
        let (p, q) = (
            entry("p", "1", v(25), Unit::Shards),
            entry("q", "1", v(25), Unit::Shards),
        );
        let local = record(8, vec![p.clone(), q.clone()], v(25));
        for e in [&local, &p, &q] {
            put(&mut shards[0], e, false);
        }
        // Another region's one-shard commit, parked.
        let (a, b) = (
            entry("a", "1", v(30), Unit::Here),
            entry("b", "1", v(30), Unit::Here),
        );
        put(&mut shards[0], &a, true);
        put(&mut shards[0], &b, true);
        let remote_records = HashSet::from([remote.key.clone()]);
        let mut units = units_to_install(&shards, &remote_records, |_| 0);
        for u in &mut units {
            u.sort_by(|l, r| l.key.cmp(&r.key));
        }
        units.sort_by(|l, r| l[0].key.cmp(&r[0].key));
        assert_eq!(units, vec![vec![a, b], vec![x, y]]);
        // Nothing parked and no record of another region: nothing.
        assert!(units_to_install(&shards[..0], &HashSet::new(), |_| 0).is_empty());
    }

    /// Issue 42: a restarted node's own commits of its last 30 s, per
    /// shard and in commit order, whatever order the files were read in.
    #[test]
    fn the_tail_keeps_the_last_commits_in_order() {
        let ms = |t: u64| Version::new(t << 16, 1);
        let mut tail = Tail::new(2);
        for t in [100_000, 40_000, 99_000, 70_000, 69_000] {
            tail.keep(0, &entry("k", "v", ms(t), Unit::None));
        }
        tail.keep(1, &entry("j", "v", ms(80_000), Unit::Here));
        let got: Vec<Vec<u64>> = tail
            .finish()
            .iter()
            .map(|l| l.iter().map(|e| e.version.commit_ts >> 16).collect())
            .collect();
        assert_eq!(got, vec![vec![70_000, 99_000, 100_000], vec![80_000]]);
    }
}

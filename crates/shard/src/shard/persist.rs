//! The shard's durability half: staging lattices for its write-ahead log,
//! holding replies until their records are durable, the multi-shard
//! decision record, peer merges, snapshot dumps, and replay at startup.

use bytes::Bytes;

use super::{Durability, Refusal, Shard, Source, ERR_WAL};
use crate::record::Unit;
use crate::shard::unix_ms;
use crate::wal::codec::{EntryState, LogEntry};
use crate::wal::files::DataDir;
use crate::wal::Wal;

impl Shard {
    /// Tells `hook` of every change installed from now on.
    pub fn set_change_hook(&mut self, hook: std::sync::Arc<dyn super::ChangeHook>) {
        self.on_change = Some(hook);
    }

    /// Raises keyspace notifications through `notifier` from now on.
    pub fn set_notifier(&mut self, notifier: std::sync::Arc<crate::notify::Notifier>) {
        self.notifier = Some(notifier);
    }

    /// True when an event of `class` would go anywhere.
    pub(super) fn notifies(&self, class: u32) -> bool {
        self.notifier.as_ref().is_some_and(|n| n.wants(class))
    }

    /// Raises `name` of `class` about `key` (as stored).
    pub(super) fn raise(&self, class: u32, name: &'static str, key: &[u8]) {
        if let Some(n) = self.notifier.as_ref().filter(|n| n.wants(class)) {
            n.raise(&crate::notify::Event {
                class,
                name,
                key: bytes::Bytes::copy_from_slice(key),
            });
        }
    }

    /// Gives the shard a write-ahead log in `dir`, writing segment `seq`.
    pub fn attach_wal(&mut self, wal: Wal, dir: DataDir, seq: u64) {
        self.durability = Some(Durability {
            wal,
            dir,
            seq,
            marks: LogMarks::default(),
        });
    }

    /// Sends `value` now, or — if the message being handled wrote to the
    /// log, or the log holds records not yet durable — once they are.
    ///
    /// So no reply reveals a state the log could still lose: a value read
    /// before the write that made it is durable could otherwise vanish in a
    /// crash after the reader acted on it (a commit validated on a read of
    /// it, say, would recover without the write it read). Redis answers
    /// after its AOF write the same way. Exception: while the log is
    /// failing (disk full), reads are answered (see docs/durability.md).
    pub(super) fn respond<T: Send + 'static>(
        &mut self,
        tx: tokio::sync::oneshot::Sender<T>,
        value: T,
    ) {
        self.after_log(Box::new(move || {
            let _ = tx.send(value);
        }));
    }

    /// Runs `f` now, or once the log records before it are durable (see
    /// [`Shard::respond`]).
    fn after_log(&mut self, f: crate::wal::Ack) {
        match &mut self.durability {
            Some(d) if d.wal.has_staged() || (!d.wal.settled() && d.wal.failure().is_none()) => {
                d.wal.seal();
                d.wal.defer(f);
            }
            _ => f(),
        }
    }

    /// [`Shard::respond`] at acknowledgement level `ack`: at `region` (and
    /// `all`) the reply also waits until the other replicas of this
    /// shard's keys in the region have every commit it acknowledges or may
    /// reveal (see [`crate::repl`]). If they could not confirm it, the
    /// reply is `unconfirmed` when given (a write's truthful error), else
    /// `value` (a read: what this node holds is all there is to answer).
    pub(super) fn respond_at<T: Send + 'static>(
        &mut self,
        ack: crate::repl::AckLevel,
        tx: tokio::sync::oneshot::Sender<T>,
        value: T,
        unconfirmed: Option<T>,
    ) {
        let Some(r) = self
            .repl
            .as_ref()
            .filter(|_| ack != crate::repl::AckLevel::Local)
        else {
            return self.respond(tx, value);
        };
        let seq = r.horizon();
        if r.gate.settled_through() >= seq {
            return self.respond(tx, value);
        }
        let gate = r.gate.clone();
        self.after_log(Box::new(move || {
            gate.wait(
                seq,
                Box::new(move |ok| {
                    let v = match unconfirmed {
                        Some(u) if !ok => u,
                        _ => value,
                    };
                    let _ = tx.send(v);
                }),
            )
        }));
    }

    /// This shard's node has no peers and never will (it was started
    /// without a peer port): merge epochs have nothing to ship, so the
    /// gossip buffer keeps nothing.
    pub fn run_alone(&mut self) {
        self.gossip.turn_off();
    }

    /// Gives the shard a replicator: from now on its commits are shipped
    /// to the other replicas of their keys in the region.
    pub fn attach_replicator(&mut self, replicator: std::sync::Arc<dyn crate::repl::Replicator>) {
        self.repl = Some(crate::repl::Repl {
            replicator,
            pending: Vec::new(),
            next: 1,
            gate: std::sync::Arc::new(crate::repl::ReplGate::default()),
            shipped: std::collections::VecDeque::new(),
            logged: None,
        });
    }

    /// True when replies wait for a log flush (or commits for shipping).
    pub fn wal_pending(&self) -> bool {
        self.durability.as_ref().is_some_and(|d| d.wal.pending())
            || self.repl.as_ref().is_some_and(|r| !r.pending.is_empty())
    }

    /// Writes (and syncs, per policy) what the log holds, and ships what
    /// the region's other replicas need; sends the replies that waited for
    /// it. The worker calls this when the inbox runs dry.
    ///
    /// With both a log and replicas, the log also says how far the
    /// replicas confirmed this shard's own records (a confirmation
    /// record, when that moved since the last): on a restart, what they
    /// never confirmed is dropped (`DataDir::recover`).
    ///
    /// A batch with nobody to ship it to (no other node of the region is
    /// in the view) is its only copy: its confirmation is logged
    /// with it, as nothing else would keep it through a crash.
    pub fn flush_wal(&mut self) {
        let mut marked = false;
        if let (Some(d), Some(r)) = (&mut self.durability, &mut self.repl) {
            if let Some((seq, offset)) = r.newly_confirmed() {
                d.wal.stage_confirmed(seq, offset);
            }
            if !r.pending.is_empty() && r.shipped.is_empty() && r.replicator.alone() {
                r.logged = Some((d.seq, d.wal.stage_all_confirmed(d.seq)));
                marked = true;
            }
        }
        if let Some(d) = &mut self.durability {
            d.wal.flush();
            if d.wal.unwritten() {
                // The write failed (disk full): the batch waits for the
                // retry. Shipped now, it would carry the log's offset
                // before its records, a confirmation would not cover
                // them, and recovery would leave out what the region
                // acknowledged.
                return;
            }
        }
        let index = self.index;
        let at = self
            .durability
            .as_ref()
            .filter(|_| !marked)
            .map(|d| (d.seq, d.wal.position()));
        if let Some(r) = &mut self.repl {
            r.ship(index, at);
        }
    }

    /// Flushes and syncs the log (clean shutdown).
    pub fn close_wal(&mut self) {
        if let Some(d) = &mut self.durability {
            d.wal.close();
        }
    }

    /// Periodic log duty: retry a failed flush (and ship the batch that
    /// waited for it), `everysec` fsync, and log a confirmation that came
    /// after the shard went idle.
    pub fn tick_wal(&mut self) {
        if self
            .repl
            .as_ref()
            .is_some_and(|r| r.confirmation_due() || !r.pending.is_empty())
        {
            self.flush_wal();
        }
        if let Some(d) = &mut self.durability {
            d.wal.tick();
            let at = (d.seq, d.wal.position());
            d.marks.note(std::time::Instant::now(), at);
        }
    }

    /// The log files to read, each from a byte offset where a record
    /// starts, for every record this shard logged in the last `age` (a
    /// little more): oldest first. Empty without a data directory. (A
    /// slot's new primary ships other regions what its old one may still
    /// have owed them from here: `elsa_cluster`'s `service/handover.rs`.)
    pub fn log_since(&self, age: std::time::Duration) -> Vec<(std::path::PathBuf, u64)> {
        let Some(d) = &self.durability else {
            return Vec::new();
        };
        d.marks
            .since(std::time::Instant::now(), age, d.seq)
            .into_iter()
            .map(|(seq, offset)| (d.dir.segment_path(seq, self.index), offset))
            .collect()
    }

    /// Why writes are refused now, if they are.
    pub(super) fn write_refusal(&self) -> Option<Refusal> {
        let d = self.durability.as_ref()?;
        d.wal
            .failure()
            .map(|_| Refusal::Unavailable(ERR_WAL.to_string()))
    }

    /// Replays one recovered record (no log, no gossip). One committed
    /// before a FLUSHALL or FLUSHDB already replayed is gone
    /// (`install_from`).
    pub fn restore(&mut self, hash: u64, entry: &LogEntry) {
        self.restore_as(hash, entry, Source::Recovery);
    }

    /// A committed transaction record's write, put back by recovery
    /// (`elsa_txn::record::restore_writes`): as [`Shard::restore`], but
    /// what it holds from before the collection floor is not put back —
    /// the record may have arrived again after the snapshot that holds
    /// the floor, and its writes were here then or removed and collected.
    pub fn restore_replayed(&mut self, hash: u64, entry: &LogEntry) {
        self.restore_as(hash, entry, Source::Replayed);
    }

    /// Every live value whose key starts with `prefix` (a whole-table
    /// scan: for recovery, which looks for transaction records).
    pub fn values_under(&self, prefix: &[u8]) -> Vec<(Bytes, Bytes)> {
        self.table
            .iter()
            .filter(|r| r.key().starts_with(prefix))
            .filter_map(|r| {
                let value = r.value()?;
                Some((
                    Bytes::copy_from_slice(r.key()),
                    Bytes::copy_from_slice(value),
                ))
            })
            .collect()
    }

    fn restore_as(&mut self, hash: u64, entry: &LogEntry, source: Source) {
        // With the kind of commit that wrote it (logged since issue 42).
        let unit = std::mem::replace(&mut self.unit, entry.unit);
        self.install_from(
            hash,
            &entry.key,
            &entry.state,
            entry.start_ts,
            entry.version,
            source,
        );
        self.unit = unit;
    }

    /// Merges lattices received from a peer. Each is installed only if it
    /// wins the merge; those that do are logged (not gossiped back).
    /// Answers how many changed something here (installed, or parked):
    /// 0 when this shard held all of them already, or newer, or had
    /// collected them (anti-entropy's `dominated`).
    ///
    /// With `park` (the lattices come from another region), one that is
    /// part of a transaction of several keys ([`Unit`]) and would win is
    /// not shown yet: it waits in `parts` until the whole transaction is
    /// installed here as one (`elsa_txn::unit`, which makes it redundant)
    /// or [`PART_WAIT`] passes (see [`Shard::settle_parts`]). A reader in
    /// this region thus sees all of another region's transaction or none
    /// of it (issue 12, item 13).
    pub fn op_merge(&mut self, entries: &[LogEntry], park: bool) -> Result<usize, Refusal> {
        self.merge_entries(entries, park, false, false)
    }

    /// Another region's transaction records that a peer of this region
    /// repaired (anti-entropy, a catch-up): merged as [`Shard::op_merge`]
    /// without parking (a record is one key), but logged as another
    /// region's ([`crate::wal::codec::Frame::Remote`]), so that recovery
    /// hands them to the installer. Logged plain, recovery took them for
    /// this region's transactions and put their writes back at once:
    /// after a restart a node showed the other region's transfers out of
    /// order, four of them over the ones between (`tests/nemesis_regions.rs`,
    /// seed 1391638123).
    pub fn op_merge_foreign_records(&mut self, entries: &[LogEntry]) -> Result<usize, Refusal> {
        self.merge_entries(entries, false, false, true)
    }

    /// [`Shard::op_merge`] of another region's lattices its node sent
    /// again after a restart (recovery's tail: its own commits of the
    /// moments before it stopped, some delivered long ago). Like a
    /// transaction delivered again, nothing committed before the
    /// collection floor is merged: it is here already, or was removed and
    /// collected, and merged it would come back (the concurrent CRDT
    /// checker, seed 17: a list item pushed and removed 28 s before).
    pub fn op_merge_resent(&mut self, entries: &[LogEntry]) -> Result<usize, Refusal> {
        self.merge_entries(entries, true, true, false)
    }

    /// [`Shard::op_merge`] of another region's lattices repaired by a node
    /// that is not their slot's primary there (`elsa_cluster`'s
    /// `Cluster::by_repairer`): a lattice newer than what this shard
    /// stores is left out — it may be a transaction's part ahead of older
    /// ones still in the primary's gossip, which would show it first — and
    /// counted as a change, so the anti-entropy round proves nothing; the
    /// rest (what this shard holds already, or newer; what shows nothing
    /// where nothing is stored) merges as `op_merge` with `park`.
    pub fn op_merge_behind(&mut self, entries: &[LogEntry]) -> Result<usize, Refusal> {
        let mut kept = Vec::with_capacity(entries.len());
        let mut left = 0;
        for e in entries {
            let hash = std::hash::BuildHasher::hash_one(self.table.hasher(), &e.key[..]);
            if !self.absent_and_empty(hash, e) && self.version_of(hash, &e.key) < e.version {
                left += 1;
                continue;
            }
            kept.push(e.clone());
        }
        Ok(self.merge_entries(&kept, true, false, false)? + left)
    }

    fn merge_entries(
        &mut self,
        entries: &[LogEntry],
        park: bool,
        resent: bool,
        foreign: bool,
    ) -> Result<usize, Refusal> {
        if let Some(r) = self.write_refusal() {
            return Err(r);
        }
        let mut changed = 0;
        self.from_region = park || foreign;
        // Parts first: a lone write in the same frame may have to wait
        // behind one of them (`parts.rs`).
        let mut lone = Vec::with_capacity(if park { entries.len() } else { 0 });
        for e in entries {
            let hash = std::hash::BuildHasher::hash_one(self.table.hasher(), &e.key[..]);
            self.hlc.observe(e.version.commit_ts);
            if resent && super::written_before(&e.state, e.version, self.tombstone_floor) {
                continue;
            }
            let absent_and_empty = self.absent_and_empty(hash, e);
            if absent_and_empty && super::written_before(&e.state, e.version, self.tombstone_floor)
            {
                // Collected here, when every replica had it: a peer that
                // kept it over a restart ships it in each anti-entropy
                // round, and installed it would be refused (the cluster
                // restart-differential test, seed 1).
                continue;
            }
            // Shows nothing on a key with no record: shown at once, it
            // shows nothing either, so as a part it need not wait.
            if park && !absent_and_empty {
                if e.unit == Unit::None {
                    lone.push((hash, e));
                    continue;
                }
                if self.version_of(hash, &e.key) < e.version {
                    // New here, if not shown yet: a change.
                    self.park_part(e);
                    changed += 1;
                    continue;
                }
                // A plain lattice at or below the stored version is
                // superseded. A typed delta is not: a newer write of the
                // key does not hold this one's elements, so it merges now
                // (a no-op when its transaction's unit put it here).
                if !matches!(e.state, EntryState::Typed(_)) {
                    continue;
                }
            }
            self.unit = e.unit;
            changed +=
                self.install_from(hash, &e.key, &e.state, e.start_ts, e.version, Source::Peer)
                    as usize;
        }
        self.unit = Unit::None;
        for (hash, e) in lone {
            if self.waits_behind_a_part(hash, &e.key, e.version) {
                self.park_part(e);
                changed += 1;
                continue;
            }
            changed +=
                self.install_from(hash, &e.key, &e.state, e.start_ts, e.version, Source::Peer)
                    as usize;
        }
        self.unit = Unit::None;
        self.from_region = false;
        Ok(changed)
    }

    /// True for a lattice that shows nothing (a tombstone, an expired
    /// value, a collection with nothing in it) of a key this shard holds
    /// no record of. Shown at once, it shows nothing either: as part of
    /// another region's transaction it need not wait for the rest — and
    /// parked, a deletion this shard had already collected waited for a
    /// rest that never came (its transaction's install finds nothing to
    /// do), kept its bucket unproven round after round, and stalled every
    /// node's tombstone collection.
    fn absent_and_empty(&self, hash: u64, e: &LogEntry) -> bool {
        // Asked of every merged lattice: the clock only when it matters.
        let shows_nothing = match &e.state {
            EntryState::Plain(None) => true,
            EntryState::Plain(Some(c)) => c.expire_ms.is_some_and(|at| at <= unix_ms()),
            EntryState::Typed(t) => t.kind(unix_ms()) == elsa_lattice::Kind::None,
        };
        shows_nothing && self.table.get(hash, &e.key).is_none()
    }

    /// Switches the log to segment `seq` and writes this shard's snapshot.
    pub fn op_dump(&mut self, seq: u64) -> Result<Dumped, String> {
        let collection_floor = self.tombstone_floor;
        let index = self.index;
        let Some(d) = &mut self.durability else {
            return Err("this shard has no data directory".into());
        };
        let segment = d
            .dir
            .create_segment(seq, index, true)
            .map_err(|e| format!("new log segment: {e}"))?;
        // What the old segment holds is shipped from it: a batch never
        // spans two segments, so its confirmation names one.
        self.flush_wal();
        let Some(d) = &mut self.durability else {
            return Err("this shard has no data directory".into());
        };
        d.wal
            .rotate(Box::new(segment))
            .map_err(|e| format!("log rotation: {e}"))?;
        d.seq = seq;
        // The new segment starts with the flush floors: the snapshot
        // replaces the old ones, which held them.
        if !self.flush_floor.is_empty() {
            self.relog_flush_floors();
            self.flush_wal();
        }
        // And the parts still parked, which the snapshot does not hold.
        if !self.parts.is_empty() {
            self.relog_parts();
            self.flush_wal();
        }
        let Some(d) = &mut self.durability else {
            return Err("this shard has no data directory".into());
        };
        // An expired value is kept, as the tombstone it is to merges: left
        // out, an older live copy a peer still has (or sends late) would
        // come back after a restart (issue 41). The collector frees it
        // like any tombstone.
        let now = unix_ms();
        // A lapsed change of the TTL alone stays one, its value dropped
        // (`Record::to_tombstone`).
        let entries = self.table.iter().map(|r| {
            let expired = r.typed().is_none() && r.expire_ms().is_some_and(|at| at <= now);
            let ttl_of = r.ttl_of();
            crate::wal::codec::EntryRef {
                key: r.key(),
                typed: r.typed().map(|s| &**s),
                value: match (expired, ttl_of) {
                    (false, _) => r.value(),
                    (true, Some(_)) => Some(&[][..]),
                    (true, None) => None,
                },
                expire_ms: if expired && ttl_of.is_none() {
                    None
                } else {
                    r.expire_ms()
                },
                ttl_of,
                start_ts: r.start_ts,
                version: r.version(),
                unit: r.unit(),
            }
        });
        let (file, bytes) = d
            .dir
            .write_snapshot(seq, index, entries)
            .map_err(|e| format!("snapshot file: {e}"))?;
        Ok(Dumped {
            file,
            bytes,
            collection_floor,
        })
    }
}

/// One shard's snapshot file, as [`Shard::op_dump`] wrote it.
#[derive(Debug, Clone)]
pub struct Dumped {
    /// Its name inside `snap/`.
    pub file: String,
    /// Its size.
    pub bytes: u64,
    /// The shard's collection floor then ([`Shard::collection_floor`]),
    /// which the manifest keeps.
    pub collection_floor: elsa_lattice::Ts,
}

/// Where the log stood — (segment, byte offset where the next record
/// starts) — about once a second over the last [`LogMarks::KEPT`]: the
/// start of what a shard logged lately, without reading a whole segment
/// (one lives for a snapshot interval, 300 s by default).
#[derive(Default)]
pub(super) struct LogMarks(std::collections::VecDeque<(std::time::Instant, u64, u64)>);

impl LogMarks {
    /// How far back marks go.
    const KEPT: std::time::Duration = std::time::Duration::from_secs(40);
    /// The most often one is taken.
    const EVERY: std::time::Duration = std::time::Duration::from_secs(1);

    /// Notes where the log is at `now`, if the last mark is old enough;
    /// forgets marks past [`LogMarks::KEPT`] but the newest of those.
    pub(super) fn note(&mut self, now: std::time::Instant, at: (u64, u64)) {
        if self
            .0
            .back()
            .is_none_or(|m| now.saturating_duration_since(m.0) >= Self::EVERY)
        {
            self.0.push_back((now, at.0, at.1));
        }
        while self.0.len() > 1 && now.saturating_duration_since(self.0[1].0) > Self::KEPT {
            self.0.pop_front();
        }
    }

    /// Per segment from the one in use `age` ago (or the oldest marked)
    /// to `current`, where to start reading: the mark's offset for the
    /// first, 0 for the later ones.
    pub(super) fn since(
        &self,
        now: std::time::Instant,
        age: std::time::Duration,
        current: u64,
    ) -> Vec<(u64, u64)> {
        let start = self
            .0
            .iter()
            .rev()
            .find(|m| now.saturating_duration_since(m.0) >= age)
            .or(self.0.front())
            .map_or((current, 0), |m| (m.1, m.2));
        let mut out = vec![start];
        for m in self.0.iter().filter(|m| m.1 > start.0) {
            if out.last().is_some_and(|l| l.0 < m.1) {
                out.push((m.1, 0));
            }
        }
        if out.last().is_some_and(|l| l.0 < current) {
            out.push((current, 0));
        }
        out
    }
}

#[cfg(test)]
mod marks_tests {
    use super::LogMarks;
    use std::time::{Duration, Instant};

    #[test]
    fn marks_say_where_the_last_seconds_of_the_log_start() {
        let t0 = Instant::now();
        let s = Duration::from_secs;
        let mut m = LogMarks::default();
        assert_eq!(m.since(t0, s(30), 4), [(4, 0)], "nothing marked: all of it");
        for i in 0..60u64 {
            // A mark a second; the segment turns at 50 s.
            let seq = if i < 50 { 4 } else { 5 };
            m.note(t0 + s(i), (seq, i * 100));
            m.note(t0 + s(i) + Duration::from_millis(300), (seq, i * 100 + 50));
        }
        assert!(m.0.len() <= 42, "{} marks kept", m.0.len());
        // 30 s before 59 s: the mark at 29 s.
        assert_eq!(m.since(t0 + s(59), s(30), 5), [(4, 2900), (5, 0)]);
        assert_eq!(m.since(t0 + s(59), s(5), 5), [(5, 5400)]);
        // Older than anything kept: from the oldest mark.
        let oldest = m.0.front().unwrap().2;
        assert_eq!(
            m.since(t0 + s(59), s(100), 6),
            [(4, oldest), (5, 0), (6, 0)]
        );
    }
}

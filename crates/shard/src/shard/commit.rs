//! Transactions on this shard: reads at a snapshot, validation, holds
//! (prepare), commits and installs of a coordinator's writes, releases,
//! and one-shard steps run whole (`op_exec`).

use bytes::Bytes;
use elsa_lattice::{Ts, Version};

use crate::msg::{
    Check, CommitRequest, Expect, FastMap, HashedKey, HoldMode, KeyOp, PrepareRequest, ReadState,
    Refusal, TxnId, Write,
};
use crate::ops::OpReply;
use crate::record::{Record, Unit};
use crate::wal::codec::LogEntry;

use super::*;

impl Shard {
    /// Who else holds `key`, seen by a request that wants `mode`.
    pub(super) fn blocked(&self, key: &[u8], mode: HoldMode, me: Option<TxnId>) -> bool {
        if self.holds.is_empty() {
            return false; // the common case: no multi-shard commit in flight
        }
        if key == KEYSET {
            // A whole-key-space read waits for every commit about to
            // install here (see `keyset`).
            if mode == HoldMode::Read
                && self
                    .holds
                    .values()
                    .any(|h| h.writer.is_some_and(|w| Some(w) != me))
            {
                return true;
            }
        } else if mode == HoldMode::Write
            && !keyset::internal(key)
            && self
                .holds
                .get(KEYSET)
                .is_some_and(|h| h.readers.iter().any(|&r| Some(r) != me))
        {
            // Every write may change the key set another transaction read
            // (not an internal key, such as the reader's own transaction
            // record: no listing shows those).
            return true;
        }
        match self.holds.get(key) {
            None => false,
            Some(h) => {
                let other_writer = h.writer.is_some_and(|w| Some(w) != me);
                match mode {
                    HoldMode::Read => other_writer,
                    HoldMode::Write => other_writer || h.readers.iter().any(|&r| Some(r) != me),
                }
            }
        }
    }

    /// True when another transaction holds a key `kop` touches (its own,
    /// or one it reaches, as RENAME reaches its destination) in a way
    /// that excludes it.
    pub(super) fn op_blocked(&self, kop: &KeyOp, me: Option<TxnId>) -> bool {
        let mode = HoldMode::for_op(&kop.op);
        self.blocked(&kop.key, mode, me)
            || kop
                .op
                .other_keys()
                .iter()
                .any(|k| self.blocked(k, mode, me))
    }

    /// A transaction's read: the live value and the stored version.
    pub fn op_read(&mut self, key: &HashedKey) -> Result<ReadState, Refusal> {
        self.op_read_at(key, None)
    }

    /// [`Shard::op_read`] as of snapshot `at` when given: the key's
    /// version at that timestamp, from the table or the history, marked
    /// `snapshot`; the latest state, unmarked, when that version is no
    /// longer known (see [`crate::history`]). Either way it waits out a
    /// commit that holds the key for writing: one that took its timestamp
    /// before the snapshot is installed before the read answers.
    pub fn op_read_at(&mut self, key: &HashedKey, at: Option<Ts>) -> Result<ReadState, Refusal> {
        if self.blocked(&key.key, HoldMode::Read, None) {
            self.stats.busy += 1;
            return Err(Refusal::Busy);
        }
        let now_ms = unix_ms();
        let mut state = self.read_state(key, now_ms);
        let Some(at) = at else {
            return Ok(state);
        };
        // A FLUSHALL/FLUSHDB after the snapshot emptied the keyspace
        // without versions: what it dropped is not kept.
        if self.flush_floor.of(&key.key) > at {
            return Ok(state);
        }
        if state.version.commit_ts <= at {
            state.snapshot = true;
            return Ok(state);
        }
        if let Some(past) = self.history.as_ref().and_then(|h| h.at(&key.key, at)) {
            // (Its TTL as stored, even if already passed.)
            let latest_expire_ms = self.table.get(key.hash, &key.key).and_then(|r| r.expiry(0));
            state = state_of(past.value.clone(), past.version, now_ms);
            state.snapshot = true;
            state.latest_expire_ms = latest_expire_ms;
        }
        Ok(state)
    }

    pub(super) fn read_state(&self, key: &HashedKey, now_ms: u64) -> ReadState {
        // One probe for value, version and TTL-change mark.
        let rec = self.table.get(key.hash, &key.key);
        let mut state = state_of(
            rec.and_then(|r| value_of(r, now_ms)),
            rec.map_or(Version::ZERO, Record::version),
            now_ms,
        );
        state.ttl_of = rec.and_then(Record::ttl_of);
        state
    }

    pub(super) fn validate(
        &mut self,
        checks: &[Check],
        me: Option<TxnId>,
        busy: Refusal,
    ) -> Result<(), Refusal> {
        for c in checks {
            let mode = match c.expect {
                Expect::Version(_) | Expect::LiveVersion(..) | Expect::KeysetBefore(..) => {
                    HoldMode::Read
                }
                Expect::CommittedBefore(_) | Expect::InOrder(_) => HoldMode::Write,
            };
            if self.blocked(&c.key.key, mode, me) {
                self.stats.busy += 1;
                return Err(match &busy {
                    Refusal::Conflict(_) => Refusal::Conflict(c.key.key.clone()),
                    other => other.clone(),
                });
            }
            if let Expect::KeysetBefore(db, start_ts) = c.expect {
                if !self.keyset.unchanged_since(db, start_ts) {
                    self.stats.conflicts += 1;
                    return Err(Refusal::Conflict(c.key.key.clone()));
                }
                continue;
            }
            let version = self.version_of(c.key.hash, &c.key.key);
            let ok = match c.expect {
                Expect::Version(v) => version == v || self.collected_since(&c.key.key, v, version),
                Expect::LiveVersion(v, until) => version == v && until > unix_ms(),
                Expect::CommittedBefore(start_ts) => version.commit_ts < start_ts,
                Expect::KeysetBefore(..) => true, // judged above
                Expect::InOrder(ref versions) => self.in_order(c.key.hash, &c.key.key, versions),
            };
            if !ok {
                self.stats.conflicts += 1;
                return Err(Refusal::Conflict(c.key.key.clone()));
            }
        }
        Ok(())
    }

    /// True when a key read (or watched) absent at version `read` has no
    /// record now because the garbage sweep collected its tombstone (or
    /// its expired value): a write since would have left a record too new
    /// to collect while the reader is open, so nothing changed. Without
    /// this a WATCH on a deleted key failed once the sweep went by. A
    /// FLUSHALL since `read` leaves no record either, and then nobody can
    /// tell whether the key was written meanwhile: not unchanged.
    pub(super) fn collected_since(&self, key: &[u8], read: Version, now: Version) -> bool {
        now == Version::ZERO && read != Version::ZERO && self.flush_floor.of(key) <= read.commit_ts
    }

    /// Single-shard commit: validate, then install, in one actor step. A key
    /// held by a multi-shard commit in flight is a conflict here; a commit
    /// that may wait was parked before it came to this (`waiting`).
    pub fn op_commit(&mut self, req: CommitRequest) -> Result<Ts, Refusal> {
        if let Some(r) = self.write_refusal().filter(|_| !req.writes.is_empty()) {
            return Err(r);
        }
        let lapse = self.hlc.lapse();
        self.validate(&req.checks, None, Refusal::Conflict(Bytes::new()))?;
        for w in &req.writes {
            if self.blocked(&w.key.key, HoldMode::Write, None) {
                self.stats.conflicts += 1;
                return Err(Refusal::Conflict(w.key.key.clone()));
            }
        }
        let commit_ts = self.hlc.now();
        if self.hlc.lapse() != lapse {
            // Paused between validating and stamping (see `Hlc::lapse`).
            return Err(Refusal::Unavailable(
                "this node was paused during the commit; not applied".into(),
            ));
        }
        let version = Version::new(commit_ts, self.node);
        if req.writes.len() > 1 {
            self.unit = Unit::Here;
        }
        let now_ms = unix_ms();
        let mut writes = req.writes;
        for w in &mut writes {
            // A write of a typed state the transaction read is the delta
            // from what it read, as a multi-shard commit's: what another
            // region merged here since — stamped before the key's newest
            // write, so it moved no version and passed validation — stays,
            // as a concurrent add or increment must (docs/datatypes.md).
            // Against what is stored now, the commit removed it again
            // (`tests/crdt_concurrent/defect.rs`).
            if w.base.is_some() {
                w.settle(req.start_ts, version);
            }
        }
        for w in &writes {
            self.apply_write(w, req.start_ts, version, now_ms);
        }
        self.unit = Unit::None;
        self.stats.commits += 1;
        Ok(commit_ts)
    }

    /// Phase one: take the holds (all or none), then validate under them.
    pub fn op_prepare(&mut self, req: PrepareRequest) -> Result<Vec<ReadState>, Refusal> {
        if self.frozen {
            // A snapshot is being taken: no multi-shard commit may span it.
            // Busy even for interactive commits: nothing conflicted, and the
            // coordinator retries once the snapshot is done.
            self.stats.busy += 1;
            return Err(Refusal::Busy);
        }
        if self.first_blocked(&req).is_some() {
            self.stats.busy += 1;
            return Err(match self.doomed_key(&req) {
                Some(key) => Refusal::Conflict(key.clone()),
                None => Refusal::Busy,
            });
        }
        self.take_holds(req)
    }

    /// Validates under the holds `req` asks for and takes them (the caller
    /// checked that nobody else holds them).
    pub(super) fn take_holds(&mut self, req: PrepareRequest) -> Result<Vec<ReadState>, Refusal> {
        let busy = if req.retry_on_busy {
            Refusal::Busy
        } else {
            Refusal::Conflict(Bytes::new())
        };
        self.validate(&req.checks, Some(req.txn), busy)?;
        let now_ms = unix_ms();
        let mut states = Vec::with_capacity(if req.want_states { req.holds.len() } else { 0 });
        let mut keys = Vec::with_capacity(req.holds.len());
        self.holds.reserve(req.holds.len());
        for (k, mode) in req.holds {
            if req.want_states {
                states.push(self.read_state(&k, now_ms));
            }
            let hold = self.holds.entry(k.key.clone()).or_default();
            match mode {
                HoldMode::Write => hold.writer = Some(req.txn),
                HoldMode::Read => hold.readers.push(req.txn),
            }
            keys.push(k.key);
        }
        tracing::debug!(
            "shard {}: txn {:#x} holds {:?}",
            self.index,
            req.txn,
            keys.iter()
                .map(|k| String::from_utf8_lossy(k))
                .collect::<Vec<_>>()
        );
        self.held_since
            .entry(req.txn)
            .or_insert_with(std::time::Instant::now);
        self.held_by.entry(req.txn).or_default().extend(keys);
        Ok(states)
    }

    /// Phase two: install the writes as `version` (the same on every
    /// shard, and in the transaction's record), log them, then release.
    /// Never without the transaction's holds: if they are gone (a resolver
    /// released them after finding the transaction aborted, or this shard
    /// never held them), nothing is installed — unless it installed this
    /// transaction already (the install arriving again is done).
    pub fn op_install(
        &mut self,
        txn: TxnId,
        writes: &[Write],
        start_ts: Ts,
        version: Version,
    ) -> Result<(), Refusal> {
        // A replica that took a dead participant's keys over holds them
        // as the transaction's shadow: it installs under the shadow and
        // keeps it — more of the dead participant's keys may still come,
        // and the coordinator releases its shadows once every part is in.
        let release = if self.held_by.contains_key(&txn) {
            true
        } else if self.held_by.contains_key(&(txn | crate::msg::SHADOW)) {
            false
        } else if self.installed.contains_key(&txn) {
            return Ok(());
        } else {
            tracing::debug!("shard {}: install of txn {txn:#x}: holds lost", self.index);
            return Err(Refusal::Unavailable(ERR_HOLDS_LOST.to_string()));
        };
        tracing::debug!(
            "shard {}: install of txn {txn:#x} at {version:?} (release {release}): {:?}",
            self.index,
            writes
                .iter()
                .map(|w| String::from_utf8_lossy(&w.key.key))
                .collect::<Vec<_>>()
        );
        self.unit = Unit::Shards;
        for w in writes {
            // Under its holds nothing newer can have been written here by
            // a client. A newer version may still have come by replication
            // (a resolver installing on a backup after the primary did, and
            // the primary wrote on) — or from a second node serving the key,
            // and then the install loses the merge and an acknowledged write
            // is gone. Counted and logged, to tell the two apart in a post-
            // mortem (the long isolation run found one lost write, not yet
            // explained; docs/regions.md, Known problems).
            let stored = self.version_of(w.key.hash, &w.key.key);
            if stored > version {
                self.stats.installs_superseded += 1;
                tracing::warn!(
                    "transaction {txn:#x}: install of {:?} at {version:?} found a newer version {stored:?} here and loses the merge (fine if its primary installed it first)",
                    String::from_utf8_lossy(&w.key.key)
                );
            }
            self.apply_write(w, start_ts, version, unix_ms());
        }
        self.unit = Unit::None;
        self.installed.insert(txn, std::time::Instant::now());
        self.stats.commits += 1;
        if release {
            self.op_release(txn);
        }
        Ok(())
    }

    /// Other regions' transactions under this shard's holds (see
    /// [`ShardMsg::InstallRemote`]).
    ///
    /// With `others` (the same install's lattices on other shards), the
    /// whole install is kept with the holds until they are released: if
    /// the installer dies or stalls while another shard's part is not in,
    /// the orphan resolver installs that part before it lets anyone see
    /// this one (`elsa_txn::commit`'s `resolve_orphan`). Until then a
    /// resolver found no record for the installer's transaction, released,
    /// and readers here saw the part alone (`tests/nemesis_regions.rs`,
    /// seed 2451540199: the installing node killed between its shards'
    /// installs).
    pub fn op_install_remote(
        &mut self,
        txn: TxnId,
        entries: Vec<LogEntry>,
        others: Vec<LogEntry>,
    ) -> Result<(), Refusal> {
        if !self.held_by.contains_key(&txn) {
            return Err(Refusal::Unavailable(ERR_HOLDS_LOST.to_string()));
        }
        if self.refuse_remote_installs {
            return Err(Refusal::Busy);
        }
        if let Some(r) = self.write_refusal() {
            self.op_release(txn);
            return Err(r);
        }
        self.unit = Unit::Shards;
        for e in &entries {
            let hash = std::hash::BuildHasher::hash_one(self.table.hasher(), &e.key[..]);
            self.hlc.observe(e.version.commit_ts);
            self.install_from(
                hash,
                &e.key,
                &e.state,
                e.start_ts,
                e.version,
                Source::Remote,
            );
        }
        self.unit = Unit::None;
        if !others.is_empty() {
            // The installer's retries under the same holds send the same
            // install again: the latest whole replaces the last.
            let mut whole = entries;
            whole.extend(others);
            self.held_installs.insert(txn, whole);
        }
        Ok(())
    }

    /// The whole install `txn` put in here under holds it still has (see
    /// [`Shard::op_install_remote`]).
    pub fn held_install(&self, txn: TxnId) -> Option<Vec<LogEntry>> {
        self.held_installs.get(&txn).cloned()
    }

    /// A backup takes a participant's holds (see [`ShardMsg::Shadow`]):
    /// no checks, and it never refuses — the participant validated.
    pub fn op_shadow(&mut self, txn: TxnId, holds: Vec<(HashedKey, HoldMode)>) {
        let mut keys = Vec::with_capacity(holds.len());
        for (k, mode) in holds {
            let hold = self.holds.entry(k.key.clone()).or_default();
            match mode {
                HoldMode::Write => hold.writer = Some(txn),
                HoldMode::Read => hold.readers.push(txn),
            }
            keys.push(k.key);
        }
        tracing::debug!(
            "shard {}: txn {txn:#x} shadow-holds {:?}",
            self.index,
            keys.iter()
                .map(|k| String::from_utf8_lossy(k))
                .collect::<Vec<_>>()
        );
        self.held_since
            .entry(txn)
            .or_insert_with(std::time::Instant::now);
        self.held_by.entry(txn).or_default().extend(keys);
    }

    /// Transactions that have held keys here longer than `older_than`.
    pub fn stale_holds(&mut self, older_than: std::time::Duration) -> Vec<(TxnId, Vec<HashedKey>)> {
        self.installed
            .retain(|_, at| at.elapsed() < std::time::Duration::from_secs(600));
        let hasher = *self.table.hasher();
        self.held_since
            .iter()
            .filter(|(_, at)| at.elapsed() >= older_than)
            .filter_map(|(txn, _)| {
                let keys = self.held_by.get(txn)?;
                Some((
                    *txn,
                    keys.iter()
                        .map(|k| HashedKey {
                            hash: std::hash::BuildHasher::hash_one(&hasher, &k[..]),
                            key: k.clone(),
                        })
                        .collect(),
                ))
            })
            .collect()
    }

    /// Drops every hold of `txn` (abort, or the end of install).
    pub fn op_release(&mut self, txn: TxnId) {
        self.held_since.remove(&txn);
        self.held_installs.remove(&txn);
        let Some(keys) = self.held_by.remove(&txn) else {
            return;
        };
        tracing::debug!(
            "shard {}: txn {txn:#x} releases {} keys",
            self.index,
            keys.len()
        );
        for key in keys {
            if let Some(h) = self.holds.get_mut(&key) {
                if h.writer == Some(txn) {
                    h.writer = None;
                }
                h.readers.retain(|&r| r != txn);
                if h.writer.is_none() && h.readers.is_empty() {
                    self.holds.remove(&key);
                }
            }
        }
        if self.holds.is_empty() {
            if self.holds.capacity() > 4096 {
                // A million-key command's table goes with it.
                self.holds = FastMap::default();
            }
            for w in self.freeze_waiters.drain(..) {
                let _ = w.send(());
            }
        }
        if !self.parked.is_empty() {
            self.resume_parked();
        }
        if !self.waiting.is_empty() {
            self.resume_waiting();
        }
    }

    /// A fresh commit timestamp: the next of the atomic step's block, or
    /// the clock's. (Past the block — more stamps than reserved — the clock
    /// goes on; blocks hold [`KeyOp::stamps`] per op, which no op
    /// exceeds.)
    pub(super) fn next_ts(&mut self) -> Ts {
        match &mut self.block {
            Some((next, last)) if *next <= *last => {
                *next += 1;
                *next - 1
            }
            _ => self.hlc.now(),
        }
    }

    /// Validates WATCH-style checks and runs `ops` as one atomic step.
    pub fn op_exec(&mut self, checks: &[Check], ops: &[KeyOp]) -> Result<Vec<OpReply>, Refusal> {
        if let Some(r) = self
            .write_refusal()
            .filter(|_| ops.iter().any(|k| k.op.is_write()))
        {
            return Err(r);
        }
        if ops.iter().any(|kop| self.op_blocked(kop, None)) {
            self.stats.busy += 1;
            return Err(Refusal::Busy);
        }
        self.validate(checks, None, Refusal::Busy)?;
        let n = ops.iter().map(KeyOp::stamps).sum::<u64>();
        if n > 0 {
            // One block of timestamps for the whole step: each write of
            // it gets its own (a key written twice keeps its order), and no
            // snapshot opened meanwhile on another thread can draw one
            // between two of them — it would see the step's first writes
            // and not its last (a transfer's debit without its credit).
            let first = self.hlc.reserve(n);
            self.block = Some((first, first + (n - 1)));
            if n > 2 {
                // More than one key written.
                self.unit = Unit::Here;
                self.unit_first = Some(first);
            }
        }
        let replies = self.run_ops(ops, None);
        self.unit = Unit::None;
        self.unit_first = None;
        self.block = None;
        debug_assert_eq!(replies.len(), ops.len(), "holds were checked above");
        self.stats.commits += 1;
        Ok(replies)
    }
}

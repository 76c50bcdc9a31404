//! The state one shard actor owns, and the shard-side half of every request
//! (Dragonfly's `op_*` split: these functions run on the shard's own thread;
//! the coordinator in `elsa-txn` decides which ones to call).

use std::collections::HashMap;
use std::sync::Arc;

use bytes::Bytes;
use elsa_lattice::{Hlc, NodeId, Ts, Version};

use crate::gossip::GossipBuffer;
use crate::msg::{
    AdminMsg, Check, CommitRequest, Expect, HashedKey, HoldMode, KeyOp, PrepareRequest, ReadState,
    Refusal, ShardMsg, TxnId, Write,
};
use crate::ops::{Current, KeyView, OpReply};
use crate::record::Record;
use crate::table::{KeyHasher, Table, SEGMENTS};
use crate::wal::codec::LogEntry;
use crate::wal::files::DataDir;
use crate::wal::Wal;

/// Counters a shard reports to INFO.
#[derive(Clone, Debug, Default)]
pub struct ShardStats {
    /// Live and dead records in the table.
    pub records: usize,
    /// Keys that are neither deleted nor expired.
    pub live: usize,
    /// Keys that expire.
    pub expires: usize,
    /// Approximate bytes of table slots and records.
    pub memory: usize,
    /// Lone commands executed.
    pub ops: u64,
    /// Transactions committed here (single- and multi-shard).
    pub commits: u64,
    /// Validations that failed here.
    pub conflicts: u64,
    /// Requests answered Busy because a key was held.
    pub busy: u64,
    /// Keys expired by the active expiry cycle.
    pub expired: u64,
    /// Lattices flushed from the gossip buffer.
    pub gossiped: u64,
    /// The write-ahead log's counters, if the shard has one.
    pub wal: Option<crate::wal::WalStats>,
}

/// Who holds a key between prepare and install.
#[derive(Default)]
struct Hold {
    writer: Option<TxnId>,
    readers: Vec<TxnId>,
}

/// One shard: a private lattice table served by a single thread.
pub struct Shard {
    index: usize,
    node: NodeId,
    table: Table,
    hlc: Arc<Hlc>,
    holds: HashMap<Bytes, Hold>,
    held_by: HashMap<TxnId, Vec<Bytes>>,
    gossip: GossipBuffer,
    stats: ShardStats,
    durability: Option<Durability>,
    frozen: bool,
    freeze_waiters: Vec<tokio::sync::oneshot::Sender<()>>,
}

/// The shard's log and the directory its files live in.
struct Durability {
    wal: Wal,
    dir: DataDir,
}

/// Where an installed lattice comes from, which decides what else happens.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Source {
    /// A commit here: log it and gossip it.
    Local,
    /// A multi-shard commit whose decision record is already logged.
    Logged,
    /// Replayed from disk at startup: neither.
    Recovery,
    /// Received from a peer replica: logged, not gossiped back.
    Peer,
}

/// The error a client sees while the log cannot write.
pub const ERR_WAL: &str =
    "MISCONF the write-ahead log cannot write (see INFO persistence and the server log); writes are refused until it can";

/// Milliseconds since the Unix epoch.
pub fn unix_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

/// A [`KeyView`] over one key of the shard's table: reads the stored state,
/// installs writes as new lattices committed now.
struct LoneView<'a> {
    shard: &'a mut Shard,
    hash: u64,
    now_ms: u64,
}

impl KeyView for LoneView<'_> {
    fn read(&mut self, key: &[u8]) -> Option<Current> {
        self.shard.current(self.hash, key, self.now_ms)
    }

    fn write(&mut self, key: &[u8], state: Option<Current>) {
        let ts = self.shard.hlc.now();
        let version = Version::new(ts, self.shard.node);
        self.shard
            .install(self.hash, key, state.as_ref(), ts, version);
    }

    fn now_ms(&self) -> u64 {
        self.now_ms
    }
}

impl Shard {
    /// An empty shard number `index` of node `node`.
    pub fn new(index: usize, node: NodeId, hasher: KeyHasher, hlc: Arc<Hlc>) -> Shard {
        Shard {
            index,
            node,
            table: Table::new(hasher),
            hlc,
            holds: HashMap::new(),
            held_by: HashMap::new(),
            gossip: GossipBuffer::default(),
            stats: ShardStats::default(),
            durability: None,
            frozen: false,
            freeze_waiters: Vec::new(),
        }
    }

    /// Gives the shard a write-ahead log in `dir`.
    pub fn attach_wal(&mut self, wal: Wal, dir: DataDir) {
        self.durability = Some(Durability { wal, dir });
    }

    /// Sends `value` now, or — if the message being handled wrote to the
    /// log — once its record is durable.
    fn respond<T: Send + 'static>(&mut self, tx: tokio::sync::oneshot::Sender<T>, value: T) {
        match &mut self.durability {
            Some(d) if d.wal.has_staged() => {
                d.wal.seal();
                d.wal.defer(Box::new(move || {
                    let _ = tx.send(value);
                }));
            }
            _ => {
                let _ = tx.send(value);
            }
        }
    }

    /// True when replies wait for a log flush.
    pub fn wal_pending(&self) -> bool {
        self.durability.as_ref().is_some_and(|d| d.wal.pending())
    }

    /// Writes (and syncs, per policy) what the log holds; sends the replies
    /// that waited for it. The worker calls this when the inbox runs dry.
    pub fn flush_wal(&mut self) {
        if let Some(d) = &mut self.durability {
            d.wal.flush();
        }
    }

    /// Flushes and syncs the log (clean shutdown).
    pub fn close_wal(&mut self) {
        if let Some(d) = &mut self.durability {
            d.wal.close();
        }
    }

    /// Periodic log duty: retry a failed flush, `everysec` fsync.
    pub fn tick_wal(&mut self) {
        if let Some(d) = &mut self.durability {
            d.wal.tick();
        }
    }

    /// Why writes are refused now, if they are.
    fn write_refusal(&self) -> Option<Refusal> {
        let d = self.durability.as_ref()?;
        d.wal
            .failure()
            .map(|_| Refusal::Unavailable(ERR_WAL.to_string()))
    }

    /// Replays one recovered record (no log, no gossip).
    pub fn restore(&mut self, hash: u64, entry: &LogEntry) {
        self.install_from(
            hash,
            &entry.key,
            entry.state.as_ref(),
            entry.start_ts,
            entry.version,
            Source::Recovery,
        );
    }

    /// This shard's number within its node.
    pub fn index(&self) -> usize {
        self.index
    }

    /// Serves one message from the inbox.
    pub fn handle(&mut self, msg: ShardMsg) {
        // A dropped receiver means the client went away; nothing to do.
        match msg {
            ShardMsg::Batch { mut ops, reply } => {
                let replies = self.op_batch(&ops);
                let rest = ops.split_off(replies.len());
                self.respond(reply, (replies, rest));
            }
            ShardMsg::Read { key, reply } => {
                let _ = reply.send(self.op_read(&key));
            }
            ShardMsg::Commit { req, reply } => {
                let r = self.op_commit(req);
                self.respond(reply, r);
            }
            ShardMsg::Log { entries, reply } => {
                let r = self.op_log(&entries);
                self.respond(reply, r);
            }
            ShardMsg::Merge { entries, reply } => {
                let r = self.op_merge(&entries);
                self.respond(reply, r);
            }
            ShardMsg::Prepare { req, reply } => {
                let _ = reply.send(self.op_prepare(req));
            }
            ShardMsg::Install {
                txn,
                writes,
                start_ts,
                commit_ts,
                reply,
            } => {
                self.op_install(txn, &writes, start_ts, commit_ts);
                let _ = reply.send(());
            }
            ShardMsg::Release { txn } => self.op_release(txn),
            ShardMsg::Exec { checks, ops, reply } => {
                let r = self.op_exec(&checks, &ops);
                self.respond(reply, r);
            }
            ShardMsg::Admin(admin) => self.handle_admin(admin),
        }
    }

    fn handle_admin(&mut self, msg: AdminMsg) {
        match msg {
            AdminMsg::Dbsize(reply) => {
                let _ = reply.send(self.live_keys());
            }
            AdminMsg::Flush(reply) => {
                self.op_flush();
                let _ = reply.send(());
            }
            AdminMsg::Scan {
                segment,
                count,
                pattern,
                reply,
            } => {
                let _ = reply.send(self.op_scan(segment, count, pattern.as_deref()));
            }
            AdminMsg::Stats(reply) => {
                let _ = reply.send(self.stats());
            }
            AdminMsg::Freeze(reply) => {
                self.frozen = true;
                if self.holds.is_empty() {
                    let _ = reply.send(());
                } else {
                    self.freeze_waiters.push(reply);
                }
            }
            AdminMsg::Dump { seq, reply } => {
                let _ = reply.send(self.op_dump(seq));
            }
            AdminMsg::Thaw => self.frozen = false,
        }
    }

    fn current(&self, hash: u64, key: &[u8], now_ms: u64) -> Option<Current> {
        let rec = self.table.get(hash, key)?;
        rec.live_value(now_ms).map(|v| Current {
            value: Bytes::copy_from_slice(v),
            expire_ms: rec.expire_ms(),
        })
    }

    fn version_of(&self, hash: u64, key: &[u8]) -> Version {
        self.table
            .get(hash, key)
            .map_or(Version::ZERO, Record::version)
    }

    /// Installs a state committed here unless the stored one is newer.
    fn install(
        &mut self,
        hash: u64,
        key: &[u8],
        state: Option<&Current>,
        start_ts: Ts,
        version: Version,
    ) {
        self.install_from(hash, key, state, start_ts, version, Source::Local);
    }

    /// Installs a state unless the stored one is newer (merge semantics, so a
    /// lattice that arrived from a peer is never overwritten by an older one).
    fn install_from(
        &mut self,
        hash: u64,
        key: &[u8],
        state: Option<&Current>,
        start_ts: Ts,
        version: Version,
        source: Source,
    ) -> bool {
        let written = self.table.upsert(hash, key, |old| {
            match old {
                Some(old) if old.version() > version => return None,
                Some(old) if state.is_none() && old.is_tombstone() => return None,
                // Deleting a key that never existed leaves no trace to gossip.
                None if state.is_none() => return None,
                _ => {}
            }
            Some(Record::new(
                key,
                state.map(|c| &c.value[..]),
                state.and_then(|c| c.expire_ms),
                start_ts,
                version,
            ))
        });
        if written && matches!(source, Source::Local | Source::Logged) {
            self.gossip.record(key);
        }
        if written && matches!(source, Source::Local | Source::Peer) {
            if let Some(d) = &mut self.durability {
                d.wal.stage(key, state, start_ts, version);
            }
        }
        written
    }

    /// Who else holds `key`, seen by a request that wants `mode`.
    fn blocked(&self, key: &[u8], mode: HoldMode, me: Option<TxnId>) -> bool {
        if self.holds.is_empty() {
            return false; // the common case: no multi-shard commit in flight
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

    /// Lone commands, in order; stops at the first one whose key is held.
    pub fn op_batch(&mut self, ops: &[KeyOp]) -> Vec<OpReply> {
        let now_ms = unix_ms();
        let refuse_writes = self.write_refusal().is_some();
        let mut out = Vec::with_capacity(ops.len());
        for kop in ops {
            let mode = HoldMode::for_op(&kop.op);
            if refuse_writes && mode == HoldMode::Write {
                out.push(OpReply::Error(ERR_WAL));
                continue;
            }
            if self.blocked(&kop.key, mode, None) {
                self.stats.busy += 1;
                break;
            }
            let mut view = LoneView {
                shard: self,
                hash: kop.hash,
                now_ms,
            };
            out.push(kop.op.apply(&kop.key, &mut view));
        }
        self.stats.ops += out.len() as u64;
        out
    }

    /// A transaction's read: the live value and the stored version.
    pub fn op_read(&mut self, key: &HashedKey) -> Result<ReadState, Refusal> {
        if self.blocked(&key.key, HoldMode::Read, None) {
            self.stats.busy += 1;
            return Err(Refusal::Busy);
        }
        Ok(self.read_state(key, unix_ms()))
    }

    fn read_state(&self, key: &HashedKey, now_ms: u64) -> ReadState {
        ReadState {
            current: self.current(key.hash, &key.key, now_ms),
            version: self.version_of(key.hash, &key.key),
        }
    }

    fn validate(
        &mut self,
        checks: &[Check],
        me: Option<TxnId>,
        busy: Refusal,
    ) -> Result<(), Refusal> {
        for c in checks {
            let mode = match c.expect {
                Expect::Version(_) => HoldMode::Read,
                Expect::CommittedBefore(_) => HoldMode::Write,
            };
            if self.blocked(&c.key.key, mode, me) {
                self.stats.busy += 1;
                return Err(match &busy {
                    Refusal::Conflict(_) => Refusal::Conflict(c.key.key.clone()),
                    other => other.clone(),
                });
            }
            let version = self.version_of(c.key.hash, &c.key.key);
            let ok = match c.expect {
                Expect::Version(v) => version == v,
                Expect::CommittedBefore(start_ts) => version.commit_ts < start_ts,
            };
            if !ok {
                self.stats.conflicts += 1;
                return Err(Refusal::Conflict(c.key.key.clone()));
            }
        }
        Ok(())
    }

    /// Single-shard commit: validate, then install, in one actor step. A key
    /// held by a multi-shard commit in flight is a conflict (no waiting).
    pub fn op_commit(&mut self, req: CommitRequest) -> Result<Ts, Refusal> {
        if let Some(r) = self.write_refusal().filter(|_| !req.writes.is_empty()) {
            return Err(r);
        }
        self.validate(&req.checks, None, Refusal::Conflict(Bytes::new()))?;
        for w in &req.writes {
            if self.blocked(&w.key.key, HoldMode::Write, None) {
                self.stats.conflicts += 1;
                return Err(Refusal::Conflict(w.key.key.clone()));
            }
        }
        let commit_ts = self.hlc.now();
        let version = Version::new(commit_ts, self.node);
        for w in &req.writes {
            self.install(
                w.key.hash,
                &w.key.key,
                w.state.as_ref(),
                req.start_ts,
                version,
            );
        }
        self.stats.commits += 1;
        Ok(commit_ts)
    }

    /// Phase one: take the holds (all or none), then validate under them.
    pub fn op_prepare(&mut self, req: PrepareRequest) -> Result<Vec<ReadState>, Refusal> {
        if self.frozen {
            // A snapshot is being taken: no multi-shard commit may span it.
            self.stats.busy += 1;
            return Err(if req.retry_on_busy {
                Refusal::Busy
            } else {
                Refusal::Conflict(
                    req.holds
                        .first()
                        .map(|(k, _)| k.key.clone())
                        .unwrap_or_default(),
                )
            });
        }
        for (k, mode) in &req.holds {
            if self.blocked(&k.key, *mode, Some(req.txn)) {
                self.stats.busy += 1;
                return Err(if req.retry_on_busy {
                    Refusal::Busy
                } else {
                    Refusal::Conflict(k.key.clone())
                });
            }
        }
        let busy = if req.retry_on_busy {
            Refusal::Busy
        } else {
            Refusal::Conflict(Bytes::new())
        };
        self.validate(&req.checks, Some(req.txn), busy)?;
        let now_ms = unix_ms();
        let mut states = Vec::new();
        let mut keys = Vec::with_capacity(req.holds.len());
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
        self.held_by.entry(req.txn).or_default().extend(keys);
        Ok(states)
    }

    /// Phase two: install the writes at `commit_ts`, then release.
    pub fn op_install(&mut self, txn: TxnId, writes: &[Write], start_ts: Ts, commit_ts: Ts) {
        let version = Version::new(commit_ts, self.node);
        for w in writes {
            let state = w.state.as_ref();
            self.install_from(
                w.key.hash,
                &w.key.key,
                state,
                start_ts,
                version,
                Source::Logged,
            );
        }
        self.stats.commits += 1;
        self.op_release(txn);
    }

    /// Drops every hold of `txn` (abort, or the end of install).
    pub fn op_release(&mut self, txn: TxnId) {
        let Some(keys) = self.held_by.remove(&txn) else {
            return;
        };
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
            for w in self.freeze_waiters.drain(..) {
                let _ = w.send(());
            }
        }
    }

    /// Merges lattices received from a peer. Each is installed only if it
    /// wins the merge; those that do are logged (not gossiped back).
    pub fn op_merge(&mut self, entries: &[LogEntry]) -> Result<usize, Refusal> {
        if let Some(r) = self.write_refusal() {
            return Err(r);
        }
        let mut changed = 0;
        for e in entries {
            let hash = std::hash::BuildHasher::hash_one(self.table.hasher(), &e.key[..]);
            self.hlc.observe(e.version.commit_ts);
            changed += self.install_from(
                hash,
                &e.key,
                e.state.as_ref(),
                e.start_ts,
                e.version,
                Source::Peer,
            ) as usize;
        }
        Ok(changed)
    }

    /// Logs a multi-shard commit's decision record (all its writes).
    pub fn op_log(&mut self, entries: &[LogEntry]) -> Result<(), Refusal> {
        if let Some(r) = self.write_refusal() {
            return Err(r);
        }
        if let Some(d) = &mut self.durability {
            for e in entries {
                d.wal.stage(&e.key, e.state.as_ref(), e.start_ts, e.version);
            }
        }
        Ok(())
    }

    /// Switches the log to segment `seq` and writes this shard's snapshot.
    pub fn op_dump(&mut self, seq: u64) -> Result<(String, u64), String> {
        let index = self.index;
        let Some(d) = &mut self.durability else {
            return Err("this shard has no data directory".into());
        };
        let segment = d
            .dir
            .create_segment(seq, index)
            .map_err(|e| format!("new log segment: {e}"))?;
        d.wal
            .rotate(Box::new(segment))
            .map_err(|e| format!("log rotation: {e}"))?;
        let now = unix_ms();
        let entries = self
            .table
            .iter()
            .filter(|r| r.expire_ms().is_none_or(|at| at > now))
            .map(|r| crate::wal::codec::EntryRef {
                key: r.key(),
                value: r.value(),
                expire_ms: r.expire_ms(),
                start_ts: r.start_ts,
                version: r.version(),
            });
        d.dir
            .write_snapshot(seq, index, entries)
            .map_err(|e| format!("snapshot file: {e}"))
    }

    /// Validates WATCH-style checks and runs `ops` as one atomic step.
    pub fn op_exec(&mut self, checks: &[Check], ops: &[KeyOp]) -> Result<Vec<OpReply>, Refusal> {
        if let Some(r) = self
            .write_refusal()
            .filter(|_| ops.iter().any(|k| k.op.is_write()))
        {
            return Err(r);
        }
        for kop in ops {
            let mode = HoldMode::for_op(&kop.op);
            if self.blocked(&kop.key, mode, None) {
                self.stats.busy += 1;
                return Err(Refusal::Busy);
            }
        }
        self.validate(checks, None, Refusal::Busy)?;
        let replies = self.op_batch(ops);
        debug_assert_eq!(replies.len(), ops.len(), "holds were checked above");
        self.stats.commits += 1;
        Ok(replies)
    }

    fn live_keys(&self) -> usize {
        let now = unix_ms();
        self.table
            .iter()
            .filter(|r| r.live_value(now).is_some())
            .count()
    }

    /// Drops every key (FLUSHALL / FLUSHDB).
    pub fn op_flush(&mut self) {
        self.table.clear();
        self.gossip.clear();
    }

    /// Live keys from `segment` on, until at least `count` were seen.
    pub fn op_scan(
        &self,
        mut segment: usize,
        count: usize,
        pattern: Option<&[u8]>,
    ) -> (Vec<Bytes>, Option<usize>) {
        let now = unix_ms();
        let mut keys = Vec::new();
        while segment < SEGMENTS {
            keys.extend(
                self.table
                    .segment(segment)
                    .filter(|r| r.live_value(now).is_some())
                    .filter(|r| pattern.is_none_or(|p| crate::glob::matches(p, r.key())))
                    .map(|r| Bytes::copy_from_slice(r.key())),
            );
            segment += 1;
            if keys.len() >= count {
                break;
            }
        }
        (keys, (segment < SEGMENTS).then_some(segment))
    }

    /// Counters for INFO.
    pub fn stats(&self) -> ShardStats {
        let mut s = self.stats.clone();
        s.records = self.table.len();
        s.expires = self
            .table
            .iter()
            .filter(|r| r.expire_ms().is_some())
            .count();
        s.memory = self.table.memory();
        s.wal = self.durability.as_ref().map(|d| d.wal.stats());
        s
    }

    /// End of a merge epoch: hands out the lattices changed since the last
    /// one (each key once, at its latest state) and forgets them. With no
    /// peers yet the caller drops them; replication will ship them.
    pub fn flush_gossip(&mut self) -> Vec<(Bytes, elsa_lattice::Lww<Bytes>)> {
        let hasher = self.table_hasher();
        let out: Vec<_> = self
            .gossip
            .drain()
            .filter_map(|key| {
                let hash = std::hash::BuildHasher::hash_one(&hasher, &key[..]);
                let rec = self.table.get(hash, &key)?;
                let lww = elsa_lattice::Lww::new(
                    rec.value().map(Bytes::copy_from_slice),
                    rec.start_ts,
                    rec.version(),
                );
                Some((key, lww))
            })
            .collect();
        self.stats.gossiped += out.len() as u64;
        out
    }

    fn table_hasher(&self) -> KeyHasher {
        *self.table.hasher()
    }

    /// Number of keys waiting in the gossip buffer.
    pub fn gossip_pending(&self) -> usize {
        self.gossip.len()
    }

    /// Physically removes expired keys and tombstones older than
    /// `tombstone_before` (no transaction that could still need them for
    /// validation is that old). Tombstones are kept while unflushed gossip
    /// still has to carry them.
    pub fn collect_garbage(&mut self, now_ms: u64, tombstone_before: Ts) -> usize {
        let gossip = &self.gossip;
        let expired_before = self.stats.expired;
        let mut expired = 0;
        let removed = self.table.retain(|r| {
            if r.expire_ms().is_some_and(|at| at <= now_ms) {
                expired += 1;
                return false;
            }
            !(r.is_tombstone() && r.commit_ts < tombstone_before && !gossip.contains(r.key()))
        });
        self.stats.expired = expired_before + expired;
        removed
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::{Expiry, Op, SetCond, SetReply};

    fn shard() -> Shard {
        Shard::new(0, 7, KeyHasher::default(), Arc::new(Hlc::default()))
    }

    fn key(s: &Shard, k: &str) -> HashedKey {
        let key = Bytes::copy_from_slice(k.as_bytes());
        HashedKey {
            hash: std::hash::BuildHasher::hash_one(s.table.hasher(), &key[..]),
            key,
        }
    }

    fn kop(s: &Shard, k: &str, op: Op) -> KeyOp {
        let h = key(s, k);
        KeyOp {
            key: h.key,
            hash: h.hash,
            op,
        }
    }

    fn set(v: &str) -> Op {
        Op::Set {
            value: Bytes::copy_from_slice(v.as_bytes()),
            cond: SetCond::Always,
            expiry: Expiry::Clear,
            reply: SetReply::Ok,
        }
    }

    fn value(s: &mut Shard, k: &str) -> Option<Bytes> {
        let k = key(s, k);
        s.op_read(&k).unwrap().current.map(|c| c.value)
    }

    #[test]
    fn lone_writes_get_increasing_versions_with_our_origin() {
        let mut s = shard();
        s.op_batch(&[kop(&s, "a", set("1"))]);
        let v1 = s.op_read(&key(&s, "a")).unwrap().version;
        s.op_batch(&[kop(&s, "a", set("2"))]);
        let v2 = s.op_read(&key(&s, "a")).unwrap().version;
        assert!(v2 > v1);
        assert_eq!(v2.origin, 7);
    }

    #[test]
    fn gossip_buffer_holds_each_changed_key_once_at_its_latest_state() {
        let mut s = shard();
        for i in 0..100 {
            s.op_batch(&[
                kop(&s, "hot", set(&i.to_string())),
                kop(&s, &format!("k{i}"), set("x")),
            ]);
        }
        s.op_batch(&[kop(&s, "k0", Op::Del)]);
        assert_eq!(s.gossip_pending(), 101);
        let flushed = s.flush_gossip();
        assert_eq!(flushed.len(), 101);
        let hot = flushed.iter().find(|(k, _)| &k[..] == b"hot").unwrap();
        assert_eq!(hot.1.value.as_deref(), Some(&b"99"[..]));
        let k0 = flushed.iter().find(|(k, _)| &k[..] == b"k0").unwrap();
        assert_eq!(k0.1.value, None, "a delete is gossiped as a tombstone");
        assert_eq!(s.gossip_pending(), 0);
        assert!(s.flush_gossip().is_empty(), "nothing changed since");
        // Reads do not dirty the buffer.
        s.op_batch(&[kop(&s, "hot", Op::Get)]);
        assert_eq!(s.gossip_pending(), 0);
    }

    #[test]
    fn commit_validates_read_versions_and_first_committer_wins() {
        let mut s = shard();
        s.op_batch(&[kop(&s, "x", set("1"))]);
        let read = s.op_read(&key(&s, "x")).unwrap();
        let start_ts = s.hlc.now();
        s.op_batch(&[kop(&s, "x", set("2"))]);
        let stale = CommitRequest {
            checks: vec![Check {
                key: key(&s, "x"),
                expect: Expect::Version(read.version),
            }],
            writes: vec![],
            start_ts,
        };
        assert_eq!(s.op_commit(stale), Err(Refusal::Conflict(Bytes::from("x"))));
        let blind = CommitRequest {
            checks: vec![Check {
                key: key(&s, "x"),
                expect: Expect::CommittedBefore(start_ts),
            }],
            writes: vec![Write {
                key: key(&s, "x"),
                state: None,
            }],
            start_ts,
        };
        assert!(
            s.op_commit(blind).is_err(),
            "x was committed after start_ts"
        );
        assert_eq!(
            value(&mut s, "x").as_deref(),
            Some(&b"2"[..]),
            "a refused commit writes nothing"
        );
    }

    #[test]
    fn holds_block_conflicting_work_until_released() {
        let mut s = shard();
        s.op_batch(&[kop(&s, "x", set("1")), kop(&s, "r", set("1"))]);
        let prep = PrepareRequest {
            txn: 1,
            checks: vec![],
            holds: vec![
                (key(&s, "x"), HoldMode::Write),
                (key(&s, "r"), HoldMode::Read),
            ],
            want_states: true,
            retry_on_busy: true,
        };
        let states = s.op_prepare(prep).unwrap();
        assert_eq!(states.len(), 2);
        // Lone work on held keys waits (Busy: the batch stops there).
        assert!(
            s.op_batch(&[kop(&s, "x", Op::Get)]).is_empty(),
            "read of a write-held key"
        );
        assert!(
            s.op_batch(&[kop(&s, "r", set("2"))]).is_empty(),
            "write of a read-held key"
        );
        assert_eq!(
            s.op_batch(&[kop(&s, "r", Op::Get)]).len(),
            1,
            "read of a read-held key is fine"
        );
        assert_eq!(s.op_read(&key(&s, "x")), Err(Refusal::Busy));
        // Another transaction conflicts (no waiting).
        let other = PrepareRequest {
            txn: 2,
            checks: vec![],
            holds: vec![(key(&s, "r"), HoldMode::Write)],
            want_states: false,
            retry_on_busy: false,
        };
        assert_eq!(
            s.op_prepare(other),
            Err(Refusal::Conflict(Bytes::from("r")))
        );
        let ts = s.hlc.now();
        s.op_install(
            1,
            &[Write {
                key: key(&s, "x"),
                state: Some(Current {
                    value: Bytes::from("new"),
                    expire_ms: None,
                }),
            }],
            ts,
            ts,
        );
        assert_eq!(value(&mut s, "x").as_deref(), Some(&b"new"[..]));
        assert_eq!(s.op_batch(&[kop(&s, "r", set("2"))]).len(), 1, "released");
        assert!(s.holds.is_empty() && s.held_by.is_empty());
    }

    #[test]
    fn release_drops_only_that_transactions_holds() {
        let mut s = shard();
        for txn in [1, 2] {
            let req = PrepareRequest {
                txn,
                checks: vec![],
                holds: vec![(key(&s, "shared"), HoldMode::Read)],
                want_states: false,
                retry_on_busy: true,
            };
            s.op_prepare(req).unwrap();
        }
        s.op_release(1);
        assert!(
            s.op_batch(&[kop(&s, "shared", set("x"))]).is_empty(),
            "txn 2 still reads it"
        );
        s.op_release(2);
        assert_eq!(s.op_batch(&[kop(&s, "shared", set("x"))]).len(), 1);
    }

    #[test]
    fn older_versions_never_overwrite_newer_ones() {
        let mut s = shard();
        s.op_batch(&[kop(&s, "k", set("new"))]);
        let k = key(&s, "k");
        let old = Version::new(1, 9);
        s.install(
            k.hash,
            &k.key,
            Some(&Current {
                value: Bytes::from("old"),
                expire_ms: None,
            }),
            1,
            old,
        );
        assert_eq!(value(&mut s, "k").as_deref(), Some(&b"new"[..]));
    }

    #[test]
    fn garbage_collection_keeps_fresh_tombstones_and_unflushed_changes() {
        let mut s = shard();
        s.op_batch(&[kop(&s, "a", set("1")), kop(&s, "b", set("1"))]);
        s.op_batch(&[kop(&s, "a", Op::Del)]);
        let now = unix_ms();
        s.op_batch(&[kop(
            &s,
            "t",
            Op::Set {
                value: Bytes::from("v"),
                cond: SetCond::Always,
                expiry: Expiry::At(now + 50),
                reply: SetReply::Ok,
            },
        )]);
        // Unflushed: the tombstone must survive even past the horizon.
        assert_eq!(s.collect_garbage(now, u64::MAX), 0);
        s.flush_gossip();
        assert_eq!(
            s.collect_garbage(now, 0),
            0,
            "tombstone younger than the horizon"
        );
        assert_eq!(
            s.collect_garbage(now, u64::MAX),
            1,
            "old flushed tombstone goes"
        );
        assert_eq!(s.collect_garbage(now + 100, 0), 1, "expired key goes");
        assert_eq!(s.table.len(), 1);
        assert_eq!(s.live_keys(), 1);
    }

    fn durable_shard(dir: &std::path::Path) -> Shard {
        let data = DataDir::open(dir).unwrap();
        let mut s = Shard::new(0, 7, KeyHasher::default(), Arc::new(Hlc::default()));
        let seg = data.create_segment(1, 0).unwrap();
        s.attach_wal(Wal::new(Box::new(seg), crate::wal::Fsync::Always), data);
        s
    }

    fn recovered(dir: &std::path::Path) -> Shard {
        let mut s = shard();
        let data = DataDir::open(dir).unwrap();
        let mut entries = Vec::new();
        data.recover(|rec| entries.extend(rec)).unwrap();
        for e in entries {
            let h = std::hash::BuildHasher::hash_one(s.table.hasher(), &e.key[..]);
            s.restore(h, &e);
        }
        s
    }

    #[test]
    fn peer_lattices_are_merged_logged_and_acked_once_durable() {
        let dir = std::env::temp_dir().join(format!("elsa-shard-merge-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let mut s = durable_shard(&dir);
        s.op_batch(&[kop(&s, "mine", set("local"))]);
        let newer = LogEntry {
            key: Bytes::from("theirs"),
            state: Some(Current {
                value: Bytes::from("remote"),
                expire_ms: None,
            }),
            start_ts: 1,
            version: Version::new(u64::MAX / 2, 9),
        };
        let older = LogEntry {
            key: Bytes::from("mine"),
            state: Some(Current {
                value: Bytes::from("stale"),
                expire_ms: None,
            }),
            start_ts: 1,
            version: Version::new(1, 9),
        };
        let (tx, mut rx) = tokio::sync::oneshot::channel();
        s.handle(ShardMsg::Merge {
            entries: vec![newer, older],
            reply: tx,
        });
        assert!(rx.try_recv().is_err(), "the ack waits for the log");
        assert!(s.wal_pending());
        s.flush_wal();
        assert_eq!(
            rx.try_recv().unwrap(),
            Ok(1),
            "only the newer lattice changed anything"
        );
        assert_eq!(value(&mut s, "mine").as_deref(), Some(&b"local"[..]));
        assert!(
            s.hlc.now() > u64::MAX / 2,
            "the clock moved past the peer's commit"
        );
        s.close_wal();
        let mut r = recovered(&dir);
        assert_eq!(value(&mut r, "theirs").as_deref(), Some(&b"remote"[..]));
        assert_eq!(value(&mut r, "mine").as_deref(), Some(&b"local"[..]));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn refused_commits_leave_nothing_in_the_log() {
        let dir = std::env::temp_dir().join(format!("elsa-shard-refused-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let mut s = durable_shard(&dir);
        s.op_batch(&[kop(&s, "x", set("1"))]);
        let req = CommitRequest {
            checks: vec![Check {
                key: key(&s, "x"),
                expect: Expect::Version(Version::new(1, 1)),
            }],
            writes: vec![Write {
                key: key(&s, "y"),
                state: Some(Current {
                    value: Bytes::from("no"),
                    expire_ms: None,
                }),
            }],
            start_ts: 1,
        };
        let (tx, _rx) = tokio::sync::oneshot::channel();
        s.handle(ShardMsg::Commit { req, reply: tx });
        s.close_wal();
        let mut r = recovered(&dir);
        assert_eq!(value(&mut r, "x").as_deref(), Some(&b"1"[..]));
        assert_eq!(value(&mut r, "y"), None);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn scan_covers_all_segments() {
        let mut s = shard();
        let ops: Vec<_> = (0..1000)
            .map(|i| kop(&s, &format!("k{i}"), set("v")))
            .collect();
        s.op_batch(&ops);
        let mut seg = 0;
        let mut all = Vec::new();
        loop {
            let (keys, next) = s.op_scan(seg, 10, None);
            all.extend(keys);
            match next {
                Some(n) => seg = n,
                None => break,
            }
        }
        all.sort();
        all.dedup();
        assert_eq!(all.len(), 1000);
        let (some, _) = s.op_scan(0, usize::MAX, Some(b"k99*"));
        assert_eq!(some.len(), 11);
    }
}

//! The state one shard actor owns, and the shard-side half of every request
//! (Dragonfly's `op_*` split: these functions run on the shard's own thread;
//! the coordinator in `elsa-txn` decides which ones to call).

use std::collections::HashMap;
use std::sync::Arc;

use bytes::Bytes;
use elsa_lattice::{Crdt, Hlc, KeyState, NodeId, Ts, Version};

use crate::gossip::GossipBuffer;
use crate::msg::{
    BatchAnswer, BatchMode, FastMap, KeyOp, ReadState, Refusal, ShardMsg, TxnId, Write,
};
use crate::ops::{Current, KeyView, OpReply, Value};
use crate::record::{Record, Unit};
use crate::table::{KeyHasher, Table};
use crate::wal::codec::{EntryState, LogEntry};
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
    /// Requests that met a key another commit held: answered Busy (the
    /// sender retries), or parked until it is released (see `waiting`).
    pub busy: u64,
    /// Keys expired by the active expiry cycle.
    pub expired: u64,
    /// Records the garbage collector looked at (only those that may need
    /// it: see `Record::needs_upkeep`).
    pub gc_visited: u64,
    /// Old versions kept for open snapshots (see [`crate::history`]).
    pub history: usize,
    /// Keys evicted to stay under `maxmemory` (see `shard/evict.rs`).
    pub evicted: u64,
    /// Lattices flushed from the gossip buffer.
    pub gossiped: u64,
    /// Keys changed this epoch, waiting in the gossip buffer.
    pub gossip_pending: usize,
    /// Parts of other regions' transactions waiting for the rest (see
    /// [`Shard::op_merge`]).
    pub parts_waiting: usize,
    /// Parts shown alone because the rest did not come in time.
    pub parts_alone: u64,
    /// Requests refused because they reached the shard while its node was
    /// not serving (queued before a pause; see `ShardMsg::refuse_as_stale`).
    pub refused_stale: u64,
    /// Installs that found a newer version of their key already stored
    /// (see `Shard::op_install`).
    pub installs_superseded: u64,
    /// Messages that reached the shard through its inbox: work from
    /// another thread (a connection on another worker, the peer thread),
    /// where a connection on the shard's own worker calls it inline. Redis
    /// Cluster clients on worker ports (`CLUSTER SLOTS`) keep it near 0.
    pub inbox_messages: u64,
    /// Lone read-only commands that found their key (Redis's
    /// `keyspace_hits`, counted where its `lookupKeyRead` counts).
    pub keyspace_hits: u64,
    /// Lone read-only commands that did not find their key.
    pub keyspace_misses: u64,
    /// The write-ahead log's counters, if the shard has one.
    pub wal: Option<crate::wal::WalStats>,
}

/// Who holds a key between prepare and install.
#[derive(Default)]
struct Hold {
    writer: Option<TxnId>,
    readers: Vec<TxnId>,
}

/// Told of every change a shard installs (its own commits, replicated and
/// merged lattices, deletions, collected expired keys and flushes) — what
/// client-side caching (`CLIENT TRACKING`) invalidates. Called on the
/// shard's thread in the middle of an install: it must only queue work.
pub trait ChangeHook: Send + Sync {
    /// `key` (as stored) changed.
    fn changed(&self, key: &[u8]);
    /// Every key (`db` None) or every key of one database was dropped.
    fn flushed(&self, db: Option<u8>);
}

/// One shard: a private lattice table served by a single thread.
pub struct Shard {
    index: usize,
    node: NodeId,
    table: Table,
    hlc: Arc<Hlc>,
    holds: FastMap<Bytes, Hold>,
    held_by: HashMap<TxnId, Vec<Bytes>>,
    /// When each transaction took its first hold here.
    held_since: HashMap<TxnId, std::time::Instant>,
    /// Transactions installed here lately: an install arriving again (the
    /// coordinator retrying, or a resolver that got there first) is done.
    installed: HashMap<TxnId, std::time::Instant>,
    /// Installs of other regions' transactions that went in here under
    /// holds not yet released, whole (this shard's part and the other
    /// shards'): see [`AdminMsg::HeldInstall`].
    held_installs: HashMap<TxnId, Vec<LogEntry>>,
    /// Fault injection: see [`AdminMsg::RefuseRemoteInstalls`].
    refuse_remote_installs: bool,
    gossip: GossipBuffer,
    /// Which kind of commit the installs under way belong to (marked on
    /// the records they write, so gossip and anti-entropy can tell another
    /// region what to wait for).
    unit: Unit,
    /// Timestamps reserved for the step under way (`op_exec`, or a part of
    /// a pipeline across shards: [`BatchMode`]): the next to use and the
    /// last (see [`Shard::next_ts`]).
    block: Option<(Ts, Ts)>,
    /// The first timestamp of an `op_exec` step that writes several keys:
    /// every write of the step carries it as its start, which is how
    /// another region tells the step's writes (each with its own version)
    /// apart from others' and installs them as one (`Unit::Here` entries
    /// are grouped by start and origin: elsa_cluster's `service/units`).
    unit_first: Option<Ts>,
    /// Lattices from other regions that belong to a transaction of several
    /// keys, kept out of sight until the whole transaction is installed
    /// here (by `elsa_txn`'s unit install), or [`PART_WAIT`] passes.
    /// With each, when it came and the oldest commit merged into it (which
    /// holds the collection floor back: see [`Shard::collection_floor`]).
    parts: HashMap<Bytes, parts::Parked>,
    /// Set while lattices another region sent are merged
    /// ([`Shard::op_merge`] with `park`): logged as such
    /// ([`crate::wal::codec::Frame::Remote`]).
    from_region: bool,
    /// When [`Shard::settle_parts`] last ran (a longer gap than a few
    /// epochs means the process was stopped: parts' clocks skip it).
    parts_settled: Option<std::time::Instant>,
    stats: ShardStats,
    durability: Option<Durability>,
    frozen: bool,
    freeze_waiters: Vec<tokio::sync::oneshot::Sender<()>>,
    /// Lone batches waiting for a key a commit holds, oldest first; run
    /// on when it is released (see [`Shard::op_release`]).
    parked: std::collections::VecDeque<Parked>,
    /// Keys some parked batch waits for, and how many wait.
    parked_on: FastMap<Bytes, usize>,
    /// Prepares waiting for their keys, oldest first (see [`waiting`]).
    waiting: waiting::Waiting,
    /// In-region replication, when the shard's keys have replicas on
    /// other nodes (see [`crate::repl`]).
    repl: Option<crate::repl::Repl>,
    /// Replaced values open snapshots may still read (a node without
    /// peers only: see [`crate::history`]).
    history: Option<crate::history::History>,
    /// Tombstones committed before this were collected here; one arriving
    /// again from a peer or the log is dropped rather than resurrected.
    tombstone_floor: Ts,
    /// The garbage sweep under way.
    gc: upkeep::GcSweep,
    /// The last FLUSHALL here: everything committed before it was deleted.
    flush_floor: crate::db::Floors,
    /// When each database's key set last changed, once a whole-key-space
    /// read asked (see `keyset`).
    keyset: keyset::Keyset,
    /// Told of every change installed here (see [`ChangeHook`]).
    on_change: Option<Arc<dyn ChangeHook>>,
    /// Keyspace notifications (`crate::notify`), when the node has them.
    notifier: Option<Arc<crate::notify::Notifier>>,
    /// When each table segment was last swept for garbage (collections
    /// whose TTL passed since raise `expired`).
    swept_at: Vec<u64>,
    /// Set while a local write that changes nothing a client reads is
    /// installed (`KeyView::merge_unseen`): `on_change` is not told.
    unseen: bool,
    /// Where the last anti-entropy batch stopped: (segment, records into
    /// it). The next batch resumes there, so when more lattices differ
    /// than one batch holds, successive rounds cover the whole table
    /// instead of re-shipping one part (which stalled repair).
    ae_cursor: std::cell::Cell<(usize, usize)>,
    /// The node's memory limit, when the server set one up.
    limit: Option<Arc<crate::evict::MemoryLimit>>,
    /// The best eviction candidates seen lately (Redis's eviction pool).
    evict_pool: Vec<evict::Candidate>,
    /// Where eviction sampling draws its places from.
    evict_seed: u64,
}

/// The answer channel of a lone batch.
type BatchReply = tokio::sync::oneshot::Sender<BatchAnswer>;

/// A lone batch that met a held key: the ops still to run (the first one
/// waits for its key), the replies of those that ran.
struct Parked {
    ops: Vec<KeyOp>,
    done: Vec<OpReply>,
    /// Which ops of the whole batch write.
    writes: Vec<bool>,
    ack: crate::repl::AckLevel,
    reply: BatchReply,
    since: std::time::Instant,
}

/// What an install answers when this shard does not hold the transaction's
/// keys (it was resolved, and found aborted, meanwhile).
/// An install of other regions' transactions that the region's other
/// replicas of its keys did not confirm (see [`ShardMsg::InstallRemote`]).
pub const ERR_INSTALL_UNCONFIRMED: &str =
    "ERR the install was not confirmed by the region's replicas; install it again";
pub const ERR_HOLDS_LOST: &str = "ERR the transaction no longer holds its keys here (it was resolved as aborted while its coordinator was unreachable); not applied";

/// What a write answers when the region's other replicas did not confirm it.
pub const ERR_UNCONFIRMED: &str = "ERR written on this node, but its replicas in the region did not confirm it in time: it may be lost if this node fails";

fn unconfirmed<T>() -> Result<T, Refusal> {
    Err(Refusal::Unavailable(ERR_UNCONFIRMED.to_string()))
}

/// The shard's log and the directory its files live in.
struct Durability {
    wal: Wal,
    dir: DataDir,
    /// The log segment being written.
    seq: u64,
    /// Where the log stood, about once a second (`persist::LogMarks`).
    marks: persist::LogMarks,
}

/// Where an installed lattice comes from, which decides what else happens.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Source {
    /// A commit here (lone, single- or multi-shard): log it, gossip it,
    /// ship it to the region's other replicas.
    Local,
    /// Replayed from disk at startup: neither.
    Recovery,
    /// Received from a peer replica: logged, not gossiped back.
    Peer,
    /// Another region's transaction, installed here as a whole: logged
    /// and shipped to the region's other replicas, not gossiped (every
    /// region gets it from the committing one). Its record may bring it
    /// again long after: nothing in it below the collection floor counts.
    Remote,
    /// A committed transaction record's write put back by recovery
    /// (`elsa_txn::record::restore_writes`): as `Recovery`, and like an
    /// install, nothing in it below the collection floor counts.
    Replayed,
}

impl Source {
    /// Replayed from disk at startup.
    fn recovering(self) -> bool {
        matches!(self, Source::Recovery | Source::Replayed)
    }

    /// A transaction delivered again, perhaps long after it first was
    /// (see [`Shard::collection_floor`]).
    fn redelivered(self) -> bool {
        matches!(self, Source::Remote | Source::Replayed)
    }
}

/// True when every part of a write committed as `version` is older than
/// `floor`. A transaction's write is judged whole — all of it was written
/// by its commit — never trimmed part by part: a counter's or a score's
/// base carries the tallies it saw, and dropping those alone would count
/// them twice.
fn written_before(state: &EntryState, version: Version, floor: Ts) -> bool {
    let newest = match state {
        // A change of a TTL alone goes with the value it changed.
        EntryState::Plain(c) => Current::order(c.as_ref(), version).0,
        EntryState::Typed(s) => s.newest().max(version),
    };
    newest.commit_ts < floor
}

/// How long a part of another region's transaction waits for the rest
/// before it is shown alone (the rest lost on the way, or its unit install
/// failed): a bound on staleness, never reached while the link is healthy.
/// A minute, not less: the rest of a transaction whose writing node was
/// killed comes only once that node's region serves again (its backup
/// does not gossip it on), and with 10 s, two regions of two nodes showed
/// transfers in part after a `kill -9` of 7 s (issue 42,
/// `tests/nemesis_regions.rs` seeds 4 and 6).
pub const PART_WAIT: std::time::Duration = std::time::Duration::from_secs(60);

/// What is left of every part's wait (of [`PART_WAIT`]) at least, once
/// the region could install again after it could not: time for the
/// transactions held up meanwhile, and the rest of a part still on its
/// way, to install before anything is shown alone.
pub const PART_GRACE: std::time::Duration = std::time::Duration::from_secs(5);

/// How long a prepare or a commit that asked to wait
/// ([`PrepareRequest::wait`], [`CommitRequest::wait`]) waits for its keys
/// before it answers Busy. Holds last a few message round
/// trips; one held a second belongs to a commit whose coordinator is stuck,
/// which the resolver finishes after 3 s — and the waiting transaction's
/// own holds on other shards must not age that far meanwhile.
pub const PREPARE_WAIT: std::time::Duration = std::time::Duration::from_secs(1);

/// The error a client sees while the log cannot write.
pub const ERR_WAL: &str =
    "MISCONF the write-ahead log cannot write (see INFO persistence and the server log); writes are refused until it can";

/// What a stored record shows a command at `now_ms`.
fn value_of(rec: &Record, now_ms: u64) -> Option<Value> {
    if let Some(s) = rec.typed() {
        return Some(Value::Typed(s.clone()));
    }
    rec.live_value(now_ms)?;
    Some(Value::Str(Current {
        value: rec.value_bytes()?,
        expire_ms: rec.expire_ms(),
        ttl_of: None,
    }))
}

/// A key's state as a transaction reads it: `value` (a plain one shown
/// only while live at `now_ms`) of version `version`.
fn state_of(value: Option<Value>, version: Version, now_ms: u64) -> ReadState {
    let (current, typed) = match value {
        None => (None, None),
        Some(Value::Str(c)) => (c.expire_ms.is_none_or(|at| at > now_ms).then_some(c), None),
        Some(Value::Typed(s)) => (
            s.visible_string(now_ms).map(|value| Current {
                value,
                expire_ms: s.string.expire_ms(),
                ttl_of: None,
            }),
            Some(s),
        ),
    };
    ReadState {
        current,
        typed,
        version,
        ttl_of: None,
        snapshot: false,
        latest_expire_ms: None,
    }
}

/// Milliseconds since the Unix epoch.
pub fn unix_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

impl Shard {
    /// An empty shard number `index` of node `node`.
    pub fn new(index: usize, node: NodeId, hasher: KeyHasher, hlc: Arc<Hlc>) -> Shard {
        Shard {
            index,
            node,
            table: Table::new(hasher),
            hlc,
            holds: FastMap::default(),
            held_by: HashMap::new(),
            held_since: HashMap::new(),
            installed: HashMap::new(),
            held_installs: HashMap::new(),
            refuse_remote_installs: false,
            gossip: GossipBuffer::default(),
            unit: Unit::None,
            block: None,
            unit_first: None,
            parts: HashMap::new(),
            from_region: false,
            parts_settled: None,
            stats: ShardStats::default(),
            durability: None,
            frozen: false,
            tombstone_floor: 0,
            gc: upkeep::GcSweep::default(),
            flush_floor: Default::default(),
            keyset: keyset::Keyset::default(),
            on_change: None,
            notifier: None,
            swept_at: Vec::new(),
            unseen: false,
            ae_cursor: std::cell::Cell::new((0, 0)),
            freeze_waiters: Vec::new(),
            parked: std::collections::VecDeque::new(),
            parked_on: FastMap::default(),
            waiting: waiting::Waiting::default(),
            repl: None,
            history: None,
            limit: None,
            evict_pool: Vec::new(),
            evict_seed: index as u64,
        }
    }

    /// This shard's number within its node.
    pub fn index(&self) -> usize {
        self.index
    }

    /// [`Shard::handle`] for a message that came through the inbox.
    pub fn handle_from_inbox(&mut self, msg: ShardMsg) {
        self.stats.inbox_messages += 1;
        self.handle(msg);
    }

    /// Serves one message: from the inbox, or inline from a connection on
    /// this shard's own worker.
    pub fn handle(&mut self, msg: ShardMsg) {
        // Work routed here before this node stopped serving (see
        // `ShardMsg::refuse_as_stale`) is refused, whatever queue it sat in.
        let msg = match &self.repl {
            Some(r) if !r.replicator.serving() => match msg.refuse_as_stale() {
                Some(msg) => msg,
                None => {
                    self.stats.refused_stale += 1;
                    return;
                }
            },
            _ => msg,
        };
        // A dropped receiver means the client went away; nothing to do.
        match msg {
            ShardMsg::Batch {
                ops,
                mode: BatchMode::Prefix,
                ack,
                reply,
            } => {
                let writes = self.writes_of(&ops);
                self.run_or_park(ops, Vec::new(), writes, ack, reply)
            }
            ShardMsg::Batch {
                mut ops,
                mode,
                ack,
                reply,
            } => {
                let (replies, block) = self.op_lone(&ops, mode);
                let writes = self.writes_of(&ops);
                let rest = ops.split_off(replies.len());
                let answer = BatchAnswer {
                    replies,
                    rest,
                    block,
                };
                self.respond_batch(ack, reply, answer, &writes);
            }
            ShardMsg::Read {
                key,
                at,
                ack,
                reply,
            } => {
                let r = self.op_read_at(&key, at);
                self.respond_at(ack, reply, r, None);
            }
            ShardMsg::Commit { req, ack, reply } => {
                if req.wait && self.commit_blocked(&req) {
                    return self.wait_to_commit(req, ack, reply);
                }
                let writes = !req.writes.is_empty();
                let r = self.op_commit(req);
                let unconfirmed = (writes && r.is_ok()).then(unconfirmed);
                self.respond_at(ack, reply, r, unconfirmed);
            }
            ShardMsg::Merge {
                entries,
                park,
                reply,
            } => {
                let r = self.op_merge(&entries, park);
                self.respond(reply, r);
            }
            ShardMsg::MergeResent { entries, reply } => {
                let r = self.op_merge_resent(&entries);
                self.respond(reply, r);
            }
            ShardMsg::MergeForeignRecords { entries, reply } => {
                let r = self.op_merge_foreign_records(&entries);
                self.respond(reply, r);
            }
            ShardMsg::MergeBehind { entries, reply } => {
                let r = self.op_merge_behind(&entries);
                self.respond(reply, r);
            }
            ShardMsg::Prepare { req, ack, reply } => {
                if req.wait && !self.frozen && self.prepare_blocked(&req) && !self.doomed(&req) {
                    return self.wait_to_prepare(req, ack, reply);
                }
                // Through the log like a read: a commit must not be decided
                // on versions whose writes could still be lost.
                let r = self.op_prepare(req);
                self.respond_at(ack, reply, r, None);
            }
            ShardMsg::Install {
                txn,
                writes,
                start_ts,
                commit_ts,
                origin,
                ack,
                reply,
            } => {
                let r = self.op_install(txn, &writes, start_ts, Version::new(commit_ts, origin));
                let unconfirmed = r.is_ok().then(unconfirmed);
                self.respond_at(ack, reply, r, unconfirmed);
            }
            ShardMsg::InstallRemote {
                txn,
                entries,
                others,
                reply,
            } => {
                // Answered once every replica of the keys in the region has
                // logged them (or the region gave up waiting): the holds
                // stay until the installer has every answer, so no reader
                // sees the install before a crash of this node could no
                // longer take half of it away (issue 42).
                // Not confirmed (a replica refused or was lost), it is an
                // error: this node may drop the install when it catches up
                // again, and the installer installs it again.
                let r = self.op_install_remote(txn, entries, others);
                let unconfirmed = r
                    .is_ok()
                    .then(|| Err(Refusal::Unavailable(ERR_INSTALL_UNCONFIRMED.to_string())));
                self.respond_at(crate::repl::AckLevel::Region, reply, r, unconfirmed);
            }
            ShardMsg::Shadow { txn, holds, reply } => {
                self.op_shadow(txn | crate::msg::SHADOW, holds);
                let _ = reply.send(());
            }
            ShardMsg::Release { txn } => self.op_release(txn),
            ShardMsg::Exec {
                checks,
                ops,
                ack,
                reply,
            } => {
                let r = self.op_exec(&checks, &ops);
                let writes = r.is_ok() && ops.iter().any(|k| k.op.is_write());
                self.respond_at(ack, reply, r, writes.then(unconfirmed));
            }
            ShardMsg::Digests(reply) => {
                let _ = reply.send(self.digests());
            }
            ShardMsg::LogSince { age, reply } => {
                let _ = reply.send(self.log_since(age));
            }
            ShardMsg::BucketEntries {
                wanted,
                limit,
                older_than,
                whole,
                reply,
            } => {
                let _ = reply.send(self.bucket_batch_whole(&wanted, limit, older_than, &whole));
            }
            ShardMsg::Admin(admin) => self.handle_admin(admin),
        }
    }

    /// What `key` holds (see [`KeyView::lookup`]).
    fn lookup(&self, hash: u64, key: &[u8], now_ms: u64) -> Option<Value> {
        value_of(self.table.get(hash, key)?, now_ms)
    }

    /// A whole write committed here as `version` (a lone command's, or a
    /// transaction's install): `key` shows `value` from now on. A string
    /// over a plain string (or nothing) stays a plain lattice; anything
    /// involving a typed state becomes the delta that makes the key show
    /// `value` (`KeyState::replace_with`), so concurrent writes in other
    /// regions still merge with it element by element.
    fn store(
        &mut self,
        hash: u64,
        key: &[u8],
        value: Option<Value>,
        start_ts: Ts,
        version: Version,
        now_ms: u64,
    ) {
        let stored = self.table.get(hash, key).and_then(|r| r.typed().cloned());
        let target = match (&stored, value) {
            (None, None) => {
                return self.install(hash, key, &EntryState::Plain(None), start_ts, version)
            }
            (None, Some(Value::Str(c))) => {
                return self.install(hash, key, &EntryState::Plain(Some(c)), start_ts, version)
            }
            (None, Some(Value::Typed(t))) if !t.kind(now_ms).is_collection() => {
                // A typed string (a counter moved by RENAME) lands plain.
                let c = t.visible_string(now_ms).map(|value| Current {
                    value,
                    expire_ms: t.string.expire_ms(),
                    ttl_of: None,
                });
                return self.install(hash, key, &EntryState::Plain(c), start_ts, version);
            }
            (_, None) => Arc::new(KeyState::default()),
            (_, Some(Value::Str(c))) => Arc::new(KeyState::of_string(
                elsa_lattice::Counter::default().set(Some(c.value), c.expire_ms, start_ts, version),
            )),
            // Read where it is (a collection a transaction built may hold
            // a million members).
            (_, Some(Value::Typed(t))) => t,
        };
        let empty = KeyState::default();
        let from = stored.as_deref().unwrap_or(&empty);
        let delta = from.replace_with(&target, now_ms, start_ts, version);
        drop(stored);
        if delta != KeyState::default() {
            self.merge_local(hash, key, delta, start_ts, version, now_ms);
        }
    }

    /// A transaction's write, committed as `version`: its settled delta
    /// (see [`Write::settle`]) merged as it is, else its value stored.
    fn apply_write(&mut self, w: &Write, start_ts: Ts, version: Version, now_ms: u64) {
        match &w.delta {
            Some(d) => {
                let state = EntryState::Typed(d.clone());
                self.install(w.key.hash, &w.key.key, &state, start_ts, version);
            }
            None => self.store(
                w.key.hash,
                &w.key.key,
                w.state.clone(),
                start_ts,
                version,
                now_ms,
            ),
        }
    }

    /// Merges a delta committed here as `version`.
    fn merge_local(
        &mut self,
        hash: u64,
        key: &[u8],
        mut delta: KeyState,
        start_ts: Ts,
        version: Version,
        now_ms: u64,
    ) {
        // A string delta over an expired plain value: the value is gone
        // (its increments start from zero), and the delta must say so to
        // every replica — each would otherwise merge it under the value
        // it still keeps.
        // (The delta first: a collection's has no string part, and the
        // lookup is a second one per write.)
        let expired_plain = || {
            self.table
                .get(hash, key)
                .is_some_and(|r| !r.is_typed() && r.expire_ms().is_some_and(|at| at <= now_ms))
        };
        if *delta.string != elsa_lattice::Counter::default() && expired_plain() {
            delta.merge(KeyState::of_string(
                elsa_lattice::Counter::default().set(None, None, start_ts, version),
            ));
        }
        let state = EntryState::Typed(Arc::new(delta));
        self.install(hash, key, &state, start_ts, version);
    }

    fn version_of(&self, hash: u64, key: &[u8]) -> Version {
        self.table
            .get(hash, key)
            .map_or(Version::ZERO, Record::version)
    }

    /// What a snapshot would need of `key`'s stored version: its value
    /// (a plain value's TTL not yet judged; None when absent or deleted)
    /// and version (ZERO when nothing is stored); None for a collection,
    /// whose past is not kept (see [`crate::history`]).
    fn past_version(&self, hash: u64, key: &[u8]) -> Option<(Option<Value>, Version)> {
        let Some(r) = self.table.get(hash, key) else {
            return Some((None, Version::ZERO));
        };
        let value = match r.typed() {
            Some(s) if s.collection.is_some() => return None,
            Some(s) => Some(Value::Typed(s.clone())),
            None => r.value_bytes().map(|value| {
                Value::Str(Current {
                    value,
                    expire_ms: r.expire_ms(),
                    ttl_of: None,
                })
            }),
        };
        Some((value, r.version()))
    }

    /// From now on, keeps what writes replace while `snapshots` may read
    /// it (see [`crate::history`]).
    pub fn keep_history(&mut self, snapshots: Arc<crate::history::Snapshots>) {
        self.history = Some(crate::history::History::new(snapshots));
    }

    /// Forgets replaced values no open snapshot can read any more (the
    /// merge-epoch timer).
    pub fn prune_history(&mut self) {
        if let Some(h) = &mut self.history {
            h.prune();
        }
    }

    /// Replaced values kept for snapshots.
    pub fn history_len(&self) -> usize {
        self.history
            .as_ref()
            .map_or(0, crate::history::History::len)
    }
}

mod admin;
mod commit;
mod evict;
mod flush;
mod install;
mod keyset;
mod lone;
mod parts;
mod persist;
mod upkeep;
mod waiting;
pub use keyset::KEYSET;
pub use persist::Dumped;
pub use upkeep::AeBatch;

#[cfg(test)]
mod floor_tests;
#[cfg(test)]
mod order_tests;
#[cfg(test)]
mod repl_tests;
#[cfg(test)]
mod tests;
#[cfg(test)]
mod ttl_tests;

//! The state one shard actor owns, and the shard-side half of every request
//! (Dragonfly's `op_*` split: these functions run on the shard's own thread;
//! the coordinator in `elsa-txn` decides which ones to call).

use std::collections::HashMap;
use std::sync::Arc;

use bytes::Bytes;
use elsa_lattice::{Crdt, Hlc, KeyState, Kind, NodeId, Ts, Version};

use crate::gossip::GossipBuffer;
use crate::msg::{
    AdminMsg, BatchAnswer, BatchMode, Check, CommitRequest, Expect, FastMap, HashedKey, HoldMode,
    KeyOp, PrepareRequest, ReadState, Refusal, ShardMsg, TxnId, Write,
};
use crate::ops::{Current, KeyView, OpReply, Value};
use crate::record::{Record, Unit};
use crate::table::{KeyHasher, Table, Update};
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

/// A [`KeyView`] over the shard's table for one op: reads the stored
/// state, installs writes as new lattices committed now. The op's own key
/// comes with its hash; the others it touches (RENAME's destination) are
/// hashed here.
struct LoneView<'a> {
    shard: &'a mut Shard,
    key: &'a [u8],
    hash: u64,
    now_ms: u64,
    /// The last [`KeyView::stamp`].
    stamp: (Ts, Version),
    /// Whether the op's first lookup found something (keyspace hits and
    /// misses); `None` until it looks.
    found: Option<bool>,
    /// Whether a lookup counts as an access (not for OBJECT, MEMORY
    /// USAGE, TYPE…: Redis's `LOOKUP_NOTOUCH`).
    touch: bool,
}

impl LoneView<'_> {
    fn hash_of(&self, key: &[u8]) -> u64 {
        if key == self.key {
            self.hash
        } else {
            std::hash::BuildHasher::hash_one(self.shard.table.hasher(), key)
        }
    }
}

impl KeyView for LoneView<'_> {
    fn lookup(&mut self, key: &[u8]) -> Option<Value> {
        let hash = self.hash_of(key);
        let v = if self.touch {
            // One probe: the lookup is the access that touches the clock.
            self.shard
                .table
                .get_touched(hash, key)
                .and_then(|rec| value_of(rec, self.now_ms))
        } else {
            self.shard.lookup(hash, key, self.now_ms)
        };
        if self.found.is_none() {
            self.found = Some(v.is_some());
        }
        v
    }

    fn access(&mut self, key: &[u8]) -> Option<(u32, crate::evict::AccessClock)> {
        let hash = self.hash_of(key);
        let clock = *self.shard.table.clock();
        self.shard.table.get(hash, key).map(|r| (r.access(), clock))
    }

    fn store(&mut self, key: &[u8], value: Option<Value>) {
        let ts = self.shard.next_ts();
        let version = Version::new(ts, self.shard.node);
        let hash = self.hash_of(key);
        let start = self.shard.unit_first.unwrap_or(ts);
        self.shard
            .store(hash, key, value, start, version, self.now_ms);
    }

    fn merge(&mut self, key: &[u8], delta: KeyState) {
        let (start_ts, version) = self.stamp;
        let hash = self.hash_of(key);
        self.shard
            .merge_local(hash, key, delta, start_ts, version, self.now_ms);
    }

    fn merge_unseen(&mut self, key: &[u8], delta: KeyState) {
        self.shard.unseen = true;
        self.merge(key, delta);
        self.shard.unseen = false;
    }

    fn stamp(&mut self) -> (Ts, Version) {
        let ts = self.shard.next_ts();
        let start = self.shard.unit_first.unwrap_or(ts);
        self.stamp = (start, Version::new(ts, self.shard.node));
        self.stamp
    }

    fn now_ms(&self) -> u64 {
        self.now_ms
    }

    fn value_version(&mut self, key: &[u8]) -> Option<Version> {
        let hash = self.hash_of(key);
        let rec = self.shard.table.get(hash, key)?;
        (!rec.is_typed() && rec.live_value(self.now_ms).is_some()).then(|| rec.order().0)
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
            holds: FastMap::default(),
            held_by: HashMap::new(),
            held_since: HashMap::new(),
            installed: HashMap::new(),
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
                let r = self.op_install_remote(txn, &entries);
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

    fn handle_admin(&mut self, msg: AdminMsg) {
        match msg {
            AdminMsg::Dbsize { db, reply } => {
                self.keyset.track();
                let n = self.live_keys(db);
                self.respond(reply, n);
            }
            AdminMsg::Keyspace(reply) => {
                let rows = self.keyspace();
                self.respond(reply, rows);
            }
            AdminMsg::Flush { db, at, reply } => {
                self.op_flush(db, at);
                let floors = self.flush_floor.clone();
                self.respond(reply, floors);
            }
            AdminMsg::RaiseFloors(floors) => {
                self.raise_flush_floors(&floors);
            }
            AdminMsg::Floors(reply) => {
                let _ = reply.send(self.flush_floor.clone());
            }
            AdminMsg::Scan {
                db,
                segment,
                count,
                pattern,
                kind,
                reply,
            } => {
                self.keyset.track();
                let r = self.op_scan(db, segment, count, pattern.as_deref(), kind.as_deref());
                self.respond(reply, r);
            }
            AdminMsg::RandomKey { db, seed, reply } => {
                self.keyset.track();
                let k = self.op_random_key(db, seed);
                self.respond(reply, k);
            }
            AdminMsg::Stats(reply) => {
                let _ = reply.send(self.stats());
            }
            AdminMsg::StaleHolds { older_than, reply } => {
                let _ = reply.send(self.stale_holds(older_than));
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
                let dumped = self.op_dump(seq);
                // The snapshot replaces the log, which tells confirmed own
                // records from the rest: it may only hold what the region's
                // replicas confirmed, so it is answered once they have.
                match &self.repl {
                    Some(r) if dumped.is_ok() && r.gate.confirmed_through() < r.horizon() => {
                        let gate = r.gate.clone();
                        r.gate.wait(
                            r.horizon(),
                            Box::new(move |ok| {
                                let _ = reply.send(if ok && !gate.any_failed() {
                                    dumped
                                } else {
                                    Err("the region's replicas did not confirm every write the snapshot holds".into())
                                });
                            }),
                        );
                    }
                    _ => {
                        let _ = reply.send(dumped);
                    }
                }
            }
            AdminMsg::Thaw => self.frozen = false,
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

    /// Installs a state committed here unless the stored one is newer.
    fn install(
        &mut self,
        hash: u64,
        key: &[u8],
        state: &EntryState,
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
        state: &EntryState,
        start_ts: Ts,
        version: Version,
        source: Source,
    ) -> bool {
        // Committed before a FLUSHALL/FLUSHDB this shard knows of: gone
        // (a typed state keeps only its parts written since).
        let trimmed;
        let state = match self.under_flush(key, state, version) {
            Some(None) => return false,
            Some(Some(t)) => {
                trimmed = t;
                &trimmed
            }
            None => state,
        };
        // A transaction delivered again from before the collection floor:
        // what it wrote is here already, or was removed and collected.
        if source.redelivered() && written_before(state, version, self.tombstone_floor) {
            return false;
        }
        // What a snapshot may still need of the version this replaces.
        let replaced = match &self.history {
            Some(h) if h.wanted() => Some(self.past_version(hash, key)),
            _ => None,
        };
        if source == Source::Local && self.gossip.holds_a_part(key) {
            // Its last write this epoch was part of a transaction of
            // several keys: shipped as it is, not folded into this one.
            self.capture_part(hash, key);
        }
        let written = match state {
            EntryState::Plain(p) => {
                if self.table.get(hash, key).is_some_and(Record::is_typed) {
                    // A plain lattice meets a typed state: it merges as a
                    // string's base that saw no increments.
                    let s = KeyState::of_string(elsa_lattice::Counter::default().set(
                        p.as_ref().map(|c| c.value.clone()),
                        p.as_ref().and_then(|c| c.expire_ms),
                        start_ts,
                        version,
                    ));
                    self.install_typed(hash, key, s, start_ts, source)
                } else {
                    self.install_plain(hash, key, p.as_ref(), start_ts, version, source)
                }
            }
            EntryState::Typed(s) => self.install_typed(hash, key, (**s).clone(), start_ts, source),
        };
        if let (true, Some(Some((value, version)))) = (written, replaced) {
            let until = self.table.get(hash, key).map_or(0, |r| r.commit_ts);
            if let Some(h) = &mut self.history {
                let past = crate::history::Past {
                    value,
                    version,
                    until,
                };
                h.keep(key, past);
            }
        }
        if written && !self.parts.is_empty() {
            self.parts_after_write(hash, key);
        }
        if written && !source.recovering() && !self.unseen {
            if let Some(hook) = &self.on_change {
                hook.changed(key);
            }
        }
        if written && source == Source::Local {
            let how = crate::gossip::Written {
                unit: self.unit,
                start_ts,
            };
            match state {
                EntryState::Plain(_) => self.gossip.record(key, how),
                EntryState::Typed(s) => self.gossip.record_delta(key, s, how),
            }
        }
        let mut frame = if self.from_region || source == Source::Remote {
            crate::wal::codec::Frame::Remote
        } else {
            crate::wal::codec::Frame::Plain
        };
        if written && matches!(source, Source::Local | Source::Remote) {
            if let Some(r) = &mut self.repl {
                // Logged as this node's own commit (left out by a recovery
                // that finds it unconfirmed) only when it is one: another
                // region's install was decided there, and dropped by a
                // restart in place it left the region showing the rest of
                // its transaction (issue 42); kept, it is what anti-entropy
                // would bring back anyway.
                if source == Source::Local {
                    frame = crate::wal::codec::Frame::Own;
                }
                r.pending.push(crate::wal::codec::LogEntry {
                    key: Bytes::copy_from_slice(key),
                    state: state.clone(),
                    start_ts,
                    version,
                    unit: self.unit,
                });
            }
        }
        if written && !source.recovering() {
            if let Some(d) = &mut self.durability {
                d.wal.stage(key, state, start_ts, version, frame, self.unit);
            }
        }
        written
    }

    /// Merges a typed state (a delta, or a whole state) into `key`; a
    /// plain lattice stored there becomes a typed one. True when the key
    /// changed.
    fn install_typed(
        &mut self,
        hash: u64,
        key: &[u8],
        delta: KeyState,
        start_ts: Ts,
        source: Source,
    ) -> bool {
        let floor = self.tombstone_floor;
        let unit = self.unit;
        // Whether the key appeared or went, when someone asks (`keyset`).
        let now_ms = if self.keyset.tracking() { unix_ms() } else { 0 };
        let mut flipped = false;
        let written = self.table.update(hash, key, |old| match old {
            None => {
                // Collected here already (every replica had it), as a
                // tombstone would be.
                if source != Source::Local
                    && delta.newest().commit_ts < floor
                    && delta.kind(unix_ms()) == Kind::None
                {
                    return Update::Unchanged;
                }
                flipped = now_ms > 0 && keyset::typed_live(&delta, now_ms);
                Update::Put(Record::new_typed(key, Arc::new(delta), start_ts).with_unit(unit))
            }
            Some(rec) => {
                let was = now_ms > 0
                    && match rec.typed() {
                        Some(state) => keyset::typed_live(state, now_ms),
                        None => keyset::plain_live(Some(rec), now_ms),
                    };
                let update = match rec.typed_mut() {
                    Some(state) => {
                        if !Arc::make_mut(state).merge(delta) {
                            return Update::Unchanged;
                        }
                        rec.restamp(start_ts);
                        rec.set_unit(unit);
                        Update::InPlace
                    }
                    None => {
                        let mut state = rec.as_typed();
                        if !state.merge(delta) {
                            return Update::Unchanged;
                        }
                        Update::Put(
                            Record::new_typed(key, Arc::new(state), start_ts).with_unit(unit),
                        )
                    }
                };
                if now_ms > 0 {
                    let is = match &update {
                        Update::Put(r) => r.typed().is_some_and(|s| keyset::typed_live(s, now_ms)),
                        _ => rec.typed().is_some_and(|s| keyset::typed_live(s, now_ms)),
                    };
                    flipped = was != is;
                }
                update
            }
        });
        if flipped {
            self.keyset_changed(key);
        }
        written
    }

    /// `key` appeared or went: its database's key set changed now.
    fn keyset_changed(&mut self, key: &[u8]) {
        if keyset::internal(key) {
            return;
        }
        let at = self.hlc.peek();
        self.keyset.changed(crate::db::db_of(key), at);
    }

    /// Installs a plain lattice over a plain one (or none) unless the
    /// stored one is newer.
    fn install_plain(
        &mut self,
        hash: u64,
        key: &[u8],
        state: Option<&Current>,
        start_ts: Ts,
        version: Version,
        source: Source,
    ) -> bool {
        let here = source == Source::Local;
        let floor = self.tombstone_floor;
        let tracking = self.keyset.tracking();
        let now_ms = if here && !tracking { 0 } else { unix_ms() };
        let mut flipped = false;
        let written = self.table.upsert(hash, key, |old| {
            match old {
                // A lattice merge: the larger version wins — a change of
                // the TTL alone by the version of the value it changed
                // first (`Current::order`); an equal one is the same
                // state already.
                Some(old) if old.order() >= Current::order(state, version) => return None,
                // Deleting a key already deleted here needs no new lattice…
                Some(old) if here && state.is_none() && old.is_tombstone() => return None,
                // …nor does deleting a key that never existed.
                None if here && state.is_none() => return None,
                // From a peer or the log, a tombstone — or an expired value,
                // which acts as one — must be kept: it beats an older value
                // that may still arrive (replay and merges happen in any
                // order). Unless it is one this shard already collected:
                // every replica had it then.
                None if (state.is_none()
                    || state.is_some_and(|c| c.expire_ms.is_some_and(|at| at <= now_ms)))
                    && version.commit_ts < floor =>
                {
                    return None
                }
                _ => {}
            }
            if tracking {
                let is = state.is_some_and(|c| c.expire_ms.is_none_or(|at| at > now_ms));
                flipped = keyset::plain_live(old, now_ms) != is;
            }
            Some(
                Record::new_shared(
                    key,
                    state.map(|c| &c.value),
                    state.and_then(|c| c.expire_ms),
                    state.and_then(|c| c.ttl_of),
                    start_ts,
                    version,
                )
                .with_unit(self.unit),
            )
        });
        if flipped {
            self.keyset_changed(key);
        }
        written
    }

    /// Who else holds `key`, seen by a request that wants `mode`.
    fn blocked(&self, key: &[u8], mode: HoldMode, me: Option<TxnId>) -> bool {
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
    fn op_blocked(&self, kop: &KeyOp, me: Option<TxnId>) -> bool {
        let mode = HoldMode::for_op(&kop.op);
        self.blocked(&kop.key, mode, me)
            || kop
                .op
                .other_keys()
                .iter()
                .any(|k| self.blocked(k, mode, me))
    }

    /// Lone commands, run as `mode` says (see [`BatchMode`]): the replies
    /// of those that ran, a prefix of `ops`, and the first timestamp of
    /// the block a pivot's step reserved.
    pub fn op_lone(&mut self, ops: &[KeyOp], mode: BatchMode) -> (Vec<OpReply>, Option<Ts>) {
        match mode {
            BatchMode::Prefix => (self.run_ops(ops, None), None),
            BatchMode::AllOrNone { block } => {
                let held = ops.iter().any(|k| self.op_blocked(k, None));
                if held {
                    self.stats.busy += 1;
                    return (Vec::new(), None);
                }
                if block == 0 {
                    return (self.run_ops(ops, None), None);
                }
                // The whole pipeline's block, reserved in this step: the
                // held parts run after it, but stamp their writes from it,
                // so a snapshot opened in between (its timestamp past the
                // block) sees them all — it waits out their holds — rather
                // than this step's writes alone.
                let own = ops.iter().map(KeyOp::stamps).sum::<u64>();
                let first = self.hlc.reserve(block.max(own));
                let replies =
                    self.run_stamped(ops, None, (own > 0).then(|| (first, first + own - 1)));
                (replies, Some(first))
            }
            BatchMode::Held { txn, block } => {
                if let Some((_, last)) = block {
                    // From another node's clock, perhaps: later local
                    // commits must still order after these writes.
                    self.hlc.observe(last);
                }
                let replies = self.run_stamped(ops, Some(txn), block);
                self.op_release(txn);
                (replies, None)
            }
        }
    }

    /// [`Shard::run_ops`], stamping writes from `block` (first, last)
    /// when given.
    fn run_stamped(
        &mut self,
        ops: &[KeyOp],
        me: Option<TxnId>,
        block: Option<(Ts, Ts)>,
    ) -> Vec<OpReply> {
        self.block = block;
        let replies = self.run_ops(ops, me);
        self.block = None;
        replies
    }

    /// Runs a lone batch in order; if it meets a key a commit holds, the
    /// rest waits here (parked) and runs on when the key is released, so a
    /// lone command waits its turn instead of polling — polls kept losing
    /// to clients that held keys all the time.
    fn run_or_park(
        &mut self,
        mut ops: Vec<KeyOp>,
        mut done: Vec<OpReply>,
        writes: Vec<bool>,
        ack: crate::repl::AckLevel,
        reply: BatchReply,
    ) {
        // One read of the clock for the whole step: its writes are stamped
        // from a block reserved now, as an atomic step's are (`op_exec`),
        // not each from the clock — a read of the system clock and a CAS on
        // the node's clock per write. The step runs at one moment on this
        // shard, so a snapshot opened meanwhile is past the block and
        // reads after the step; what a held key stops waits for a step of
        // its own, and a block of its own.
        let stamps: u64 = ops.iter().map(KeyOp::stamps).sum();
        let block = (stamps > 2).then(|| {
            let first = self.hlc.reserve(stamps);
            (first, first + stamps - 1)
        });
        let ran = self.run_stamped(&ops, None, block);
        let n = ran.len();
        done.extend(ran);
        if n == ops.len() {
            return self.respond_batch(ack, reply, BatchAnswer::new(done, Vec::new()), &writes);
        }
        let rest = ops.split_off(n);
        *self.parked_on.entry(rest[0].key.clone()).or_default() += 1;
        self.parked.push_back(Parked {
            ops: rest,
            done,
            writes,
            ack,
            reply,
            since: std::time::Instant::now(),
        });
    }

    /// Which of a lone batch's ops write, for [`Shard::respond_batch`]
    /// (which needs it only with in-region replicas: none, no allocation).
    fn writes_of(&self, ops: &[KeyOp]) -> Vec<bool> {
        if self.repl.is_none() {
            return Vec::new();
        }
        ops.iter().map(|k| k.op.is_write()).collect()
    }

    /// Answers a lone batch at `ack`; writes the region's replicas could
    /// not confirm say so (see [`ERR_UNCONFIRMED`]).
    fn respond_batch(
        &mut self,
        ack: crate::repl::AckLevel,
        reply: BatchReply,
        answer: BatchAnswer,
        writes: &[bool],
    ) {
        let unconfirmed = if self.repl.is_some() && ack != crate::repl::AckLevel::Local {
            let failed: Vec<OpReply> = answer
                .replies
                .iter()
                .zip(writes)
                .map(|(r, w)| match r {
                    OpReply::Error(_) => r.clone(),
                    _ if *w => OpReply::Error(ERR_UNCONFIRMED),
                    _ => r.clone(),
                })
                .collect();
            Some(BatchAnswer {
                replies: failed,
                ..answer.clone()
            })
        } else {
            None
        };
        self.respond_at(ack, reply, answer, unconfirmed);
    }

    /// Runs on the parked batches whose key is free now, oldest first.
    fn resume_parked(&mut self) {
        let mut i = 0;
        while i < self.parked.len() {
            let p = &self.parked[i];
            let key = &p.ops[0];
            if self.op_blocked(key, None) {
                i += 1;
                continue;
            }
            let Some(p) = self.parked.remove(i) else {
                break;
            };
            self.unpark_key(&p.ops[0].key);
            self.run_or_park(p.ops, p.done, p.writes, p.ack, p.reply);
        }
    }

    fn unpark_key(&mut self, key: &Bytes) {
        if let Some(n) = self.parked_on.get_mut(key) {
            *n -= 1;
            if *n == 0 {
                self.parked_on.remove(key);
            }
        }
    }

    /// Answers the batches parked longer than `limit` with what ran and
    /// the ops that did not (their callers give up with TRYAGAIN): a key
    /// held that long belongs to a commit whose coordinator is stuck.
    pub fn expire_parked(&mut self, limit: std::time::Duration) {
        while self
            .parked
            .front()
            .is_some_and(|p| p.since.elapsed() >= limit)
        {
            let Some(p) = self.parked.pop_front() else {
                break;
            };
            self.unpark_key(&p.ops[0].key);
            let _ = p.reply.send(BatchAnswer::new(p.done, p.ops));
        }
    }

    /// Lone commands, in order; stops at the first one whose key is held.
    pub fn op_batch(&mut self, ops: &[KeyOp]) -> Vec<OpReply> {
        self.run_ops(ops, None)
    }

    /// Lone commands, in order; stops at the first one whose key is held
    /// by a transaction other than `me`.
    fn run_ops(&mut self, ops: &[KeyOp], me: Option<TxnId>) -> Vec<OpReply> {
        let now_ms = unix_ms();
        self.memory_check(now_ms);
        let refuse_writes = self.write_refusal().is_some();
        let mut out = Vec::with_capacity(ops.len());
        for kop in ops {
            let mode = HoldMode::for_op(&kop.op);
            if refuse_writes && mode == HoldMode::Write {
                out.push(OpReply::Error(ERR_WAL));
                continue;
            }
            if self.op_blocked(kop, me) {
                self.stats.busy += 1;
                break;
            }
            let mut view = LoneView {
                shard: self,
                key: &kop.key,
                hash: kop.hash,
                now_ms,
                stamp: (0, Version::ZERO),
                found: None,
                touch: !kop.op.no_touch(),
            };
            out.push(kop.op.apply(&kop.key, &mut view));
            if let (Some(found), HoldMode::Read) = (view.found, mode) {
                if found {
                    self.stats.keyspace_hits += 1;
                } else {
                    self.stats.keyspace_misses += 1;
                }
            }
        }
        self.stats.ops += out.len() as u64;
        out
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

    fn read_state(&self, key: &HashedKey, now_ms: u64) -> ReadState {
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

    fn validate(
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
    fn collected_since(&self, key: &[u8], read: Version, now: Version) -> bool {
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
    fn take_holds(&mut self, req: PrepareRequest) -> Result<Vec<ReadState>, Refusal> {
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
    pub fn op_install_remote(&mut self, txn: TxnId, entries: &[LogEntry]) -> Result<(), Refusal> {
        if !self.held_by.contains_key(&txn) {
            return Err(Refusal::Unavailable(ERR_HOLDS_LOST.to_string()));
        }
        if let Some(r) = self.write_refusal() {
            self.op_release(txn);
            return Err(r);
        }
        self.unit = Unit::Shards;
        for e in entries {
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
        Ok(())
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
    fn next_ts(&mut self) -> Ts {
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

mod evict;
mod flush;
mod keyset;
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

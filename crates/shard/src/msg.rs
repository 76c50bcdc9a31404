//! The shard actor's inbox: every request another thread can make of a shard.
//!
//! One typed enum (rather than closures or shared maps) so the set of things
//! that can happen to a shard is visible in one place, and so the same
//! messages can later arrive from a peer node or be replayed from a log.

use bytes::Bytes;
use elsa_lattice::{Ts, Version};
use tokio::sync::oneshot;

use crate::ops::{Current, Op, OpReply, Value};
use crate::repl::AckLevel;

/// A transaction's id, unique within a node.
pub type TxnId = u64;

/// The holds a backup takes for transaction `t` (see [`ShardMsg::Shadow`])
/// are held as `t | SHADOW`: a shard can be a participant of `t` for its
/// own keys and hold another participant's keys for it at once, and
/// installing its own part must not release the others'.
pub const SHADOW: TxnId = 1 << 63;

/// An operation on one key, with the key's hash computed once by the router.
#[derive(Clone, Debug)]
pub struct KeyOp {
    /// The key.
    pub key: Bytes,
    /// Its hash (decides shard and segment).
    pub hash: u64,
    /// What to do.
    pub op: Op,
}

impl KeyOp {
    /// Timestamps to reserve for this op when a step stamps its writes from
    /// a block: two per key it writes (a write may stamp a delta and a
    /// store), none for a read.
    pub fn stamps(&self) -> u64 {
        if self.op.is_write() {
            2 * (1 + self.op.other_keys().len() as u64)
        } else {
            0
        }
    }
}

/// A key with its precomputed hash.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HashedKey {
    /// The key.
    pub key: Bytes,
    /// Its hash.
    pub hash: u64,
}

/// Hashes only the precomputed hash (equal keys have equal hashes): a map
/// of a million keys held by one command re-hashed every key's bytes with
/// SipHash, a sixth of a 1M-key `EXISTS` (issue 12, item 16).
impl std::hash::Hash for HashedKey {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        state.write_u64(self.hash);
    }
}

/// A map for the hot paths of multi-key commands (holds, their plans and
/// overlays): foldhash instead of SipHash, a measured cost there.
pub type FastMap<K, V> = std::collections::HashMap<K, V, foldhash::fast::RandomState>;

/// A condition a transaction checks at commit, on one key.
#[derive(Clone, Debug)]
pub enum Expect {
    /// The key still has exactly this version (read-set validation, WATCH).
    Version(Version),
    /// The key still has exactly this version and has not expired: it was
    /// read live with a TTL ending at this Unix millisecond. A key that
    /// expires between a read (or WATCH) and the commit counted as changed,
    /// as in Redis.
    LiveVersion(Version, u64),
    /// The key was last committed before this start timestamp (the paper's
    /// preCommit check: first committer wins).
    CommittedBefore(Ts),
    /// No key of this database appeared or went on the shard since this
    /// start timestamp: a whole-key-space read (KEYS, SCAN, DBSIZE,
    /// RANDOMKEY) validated, checked on the key [`crate::KEYSET`] (see
    /// `shard/keyset.rs`).
    KeysetBefore(u8, Ts),
    /// Another region's transactions installed here may write this key's
    /// versions (rising): the newest has arrived here as a part, and
    /// every part of the key still waiting below it is among them — so
    /// no transaction shows here before one whose change it carries
    /// (`shard/parts.rs`). Holds the key for writing.
    InOrder(Vec<Version>),
}

impl ReadState {
    /// The write of the plain value a command sees, if it sees one: what
    /// a change of its TTL alone applies to (`KeyView::value_version`).
    pub fn value_version(&self) -> Option<Version> {
        match (&self.typed, &self.current) {
            (None, Some(_)) => Some(self.ttl_of.unwrap_or(self.version)),
            _ => None,
        }
    }

    /// What a command sees of the key: its typed state, else its live
    /// string.
    pub fn value(&self) -> Option<Value> {
        match &self.typed {
            Some(s) => Some(Value::Typed(s.clone())),
            None => self.current.clone().map(Value::Str),
        }
    }

    /// The first moment what was read stops being live: its own expiry,
    /// or, read from a snapshot, the latest state's if sooner. A read-only
    /// transaction that passed it fails (Redis's rule for WATCH).
    pub fn expires(&self) -> Option<u64> {
        match (self.expire_ms(), self.latest_expire_ms) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// When what the key shows expires, if it does.
    pub fn expire_ms(&self) -> Option<u64> {
        match &self.typed {
            Some(s) => s.expire_ms(crate::shard::unix_ms()),
            None => self.current.as_ref().and_then(|c| c.expire_ms),
        }
    }
}

impl Expect {
    /// The check that a key read as `state` is unchanged at commit.
    pub fn unchanged(state: &ReadState) -> Expect {
        match state.expire_ms() {
            Some(at) => Expect::LiveVersion(state.version, at),
            None => Expect::Version(state.version),
        }
    }
}

/// One validation: `key` must satisfy `expect`.
#[derive(Clone, Debug)]
pub struct Check {
    /// The key checked.
    pub key: HashedKey,
    /// What must hold.
    pub expect: Expect,
}

/// A write to install: what the key shows from then on (`None` deletes
/// it; a typed value is written as the delta that makes the key show it,
/// see `Shard::store`).
#[derive(Clone, Debug)]
pub struct Write {
    /// The key written.
    pub key: HashedKey,
    /// Its new value.
    pub state: Option<Value>,
    /// The key's typed state as the transaction read it, if it read one.
    pub base: Option<std::sync::Arc<elsa_lattice::KeyState>>,
    /// Set by [`Write::settle`]: the delta to merge, in place of `state`.
    pub delta: Option<std::sync::Arc<elsa_lattice::KeyState>>,
    /// The elements the transaction's deltas of `base` named, when it
    /// only merged deltas into it: settling compares those alone
    /// (`elsa_lattice::touched`). `None`: every element.
    pub touched: Option<std::sync::Arc<elsa_lattice::Touched>>,
}

impl Write {
    /// A write of `state` to `key`, read as `base`.
    pub fn new(
        key: HashedKey,
        state: Option<Value>,
        base: Option<std::sync::Arc<elsa_lattice::KeyState>>,
    ) -> Write {
        Write {
            key,
            state,
            base,
            delta: None,
            touched: None,
        }
    }

    /// Once a multi-shard commit's version is known: a write that involves
    /// a typed state becomes the delta that makes the state read show the
    /// value written — the same lattice in the transaction's record, in
    /// every install and in every replica's log, so a resolver installing
    /// it again, or recovery replaying the record, merges what the shard
    /// merged. A single-shard commit settles the writes of typed states it
    /// read too (`Shard::op_commit`); the others it computes against what
    /// the shard stores.
    pub fn settle(&mut self, start_ts: elsa_lattice::Ts, version: elsa_lattice::Version) {
        let typed = matches!(self.state, Some(Value::Typed(_))) || self.base.is_some();
        if !typed || self.delta.is_some() {
            return;
        }
        // Both read where they are: either may be a large collection.
        let empty = elsa_lattice::KeyState::default();
        let from = self.base.as_deref().unwrap_or(&empty);
        let built;
        let target = match &self.state {
            Some(Value::Typed(t)) => &**t,
            other => {
                built = crate::ops::typed_of(other.as_ref());
                &built
            }
        };
        // What the transaction touched is relative to what it read.
        let touched = self.base.as_ref().and(self.touched.as_deref());
        let delta =
            from.replace_touched(target, touched, crate::shard::unix_ms(), start_ts, version);
        self.delta = Some(std::sync::Arc::new(delta));
    }
}

/// What a transaction read of a key that held no typed state, kept until
/// it commits: a HyperLogLog it writes there is then settled as a delta
/// from it (`Write::settle`: a register-wise part,
/// `elsa_lattice::hll_parts`), as a write of a typed state it read is, so
/// its record, every install and every replica merge the same lattice.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PlainRead {
    /// The live string read, if any.
    pub current: Option<Current>,
    /// The version of the stored state (ZERO if never written).
    pub version: Version,
}

impl PlainRead {
    /// What was read, as `rs` says, when it held no typed state.
    pub fn of(rs: &ReadState) -> Option<PlainRead> {
        rs.typed.is_none().then(|| PlainRead {
            current: rs.current.clone(),
            version: rs.version,
        })
    }

    /// The typed state a shard makes of that plain value when a delta
    /// meets it (`Record::as_typed`). A value that is gone (deleted or
    /// expired: a read cannot tell) reads as expired, so a HyperLogLog
    /// written over it starts afresh at its own version.
    pub fn as_typed(&self) -> elsa_lattice::KeyState {
        let c = elsa_lattice::Counter::default();
        elsa_lattice::KeyState::of_string(match &self.current {
            Some(v) => c.set(Some(v.value.clone()), v.expire_ms, 0, self.version),
            None if self.version == Version::ZERO => c,
            None => c.set(None, Some(0), 0, self.version),
        })
    }
}

/// The base a transaction's write of `state` settles from: the typed
/// state it read, or — for a HyperLogLog string over a key it read as
/// plain — that plain read as a typed state (see [`PlainRead`]).
pub fn write_base(
    state: &Option<Value>,
    read: Option<std::sync::Arc<elsa_lattice::KeyState>>,
    plain: Option<&PlainRead>,
) -> Option<std::sync::Arc<elsa_lattice::KeyState>> {
    let hll = matches!(state, Some(Value::Str(c)) if c.value.starts_with(elsa_lattice::hll::MAGIC));
    match (read, plain) {
        (Some(r), _) => Some(r),
        (None, Some(p)) if hll => Some(std::sync::Arc::new(p.as_typed())),
        _ => None,
    }
}

/// A key's state as read by a transaction: value (if live) and version.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReadState {
    /// The live string value, if the key shows one.
    pub current: Option<Current>,
    /// The key's typed state, if it holds one (whatever it shows).
    pub typed: Option<std::sync::Arc<elsa_lattice::KeyState>>,
    /// The version of the stored state (ZERO if never written).
    pub version: Version,
    /// The stored plain state changed the TTL alone of the value written
    /// as this version (`Current::ttl_of`).
    pub ttl_of: Option<Version>,
    /// Read as of the snapshot asked for (`ShardMsg::Read::at`); false
    /// for the latest state.
    pub snapshot: bool,
    /// For a snapshot read of an older version: when the key's latest
    /// state expires, if it does. Expiry is the clock's, not a version: a
    /// TTL set since the snapshot still ends what the reader saw (see
    /// [`ReadState::expires`]).
    pub latest_expire_ms: Option<u64>,
}

/// How a transaction holds a key between prepare and install.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HoldMode {
    /// The transaction read it: writers must not change it yet.
    Read,
    /// The transaction will write it: nobody else may touch it yet.
    Write,
}

impl HoldMode {
    /// The hold an op needs: writes exclude everyone, reads only writers.
    pub fn for_op(op: &Op) -> HoldMode {
        if op.is_write() {
            HoldMode::Write
        } else {
            HoldMode::Read
        }
    }
}

/// Why a shard refused to validate or hold.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Refusal {
    /// A key is held by another transaction in flight; try again shortly.
    Busy,
    /// Validation failed on this key: the transaction must abort.
    Conflict(Bytes),
    /// Writes are refused: the write-ahead log cannot write (disk full…).
    Unavailable(String),
}

/// A single-shard commit: validate `checks`, then install `writes` — in one
/// step of the actor, so nothing can come in between. The shard picks the
/// commit timestamp then, so it is above every version already stored.
#[derive(Debug)]
pub struct CommitRequest {
    /// Read-set and write-write checks.
    pub checks: Vec<Check>,
    /// The transaction's buffered writes.
    pub writes: Vec<Write>,
    /// When the transaction started.
    pub start_ts: Ts,
    /// When true, a key another commit holds parks the commit at the
    /// shard until it is free (it holds nothing meanwhile), instead of
    /// refusing it; after [`crate::PREPARE_WAIT`] it answers
    /// [`Refusal::Busy`].
    pub wait: bool,
}

/// Phase one of a multi-shard commit: validate and hold.
#[derive(Debug)]
pub struct PrepareRequest {
    /// The transaction.
    pub txn: TxnId,
    /// Checks to run once the holds are taken.
    pub checks: Vec<Check>,
    /// Keys to hold, and how.
    pub holds: Vec<(HashedKey, HoldMode)>,
    /// True to get the held keys' states back (EXEC runs its commands on them).
    pub want_states: bool,
    /// When true, a key held by someone else answers [`Refusal::Busy`]
    /// (caller retries, or it waits: `wait`). When false, so does a key
    /// held by readers or one it does not validate; a key it validates
    /// (`checks`) that another transaction holds for writing answers
    /// [`Refusal::Conflict`] naming it at once: that writer's install will
    /// fail the check, and waiting for it would only delay the abort.
    pub retry_on_busy: bool,
    /// When true, a key held by someone else (or claimed by an earlier
    /// waiting prepare) parks the request at the shard instead: it takes
    /// its holds as soon as they are free, ahead of any new hold on its
    /// keys, or answers [`Refusal::Busy`] after [`crate::PREPARE_WAIT`].
    /// Only for a caller that holds nothing on shards after this one in
    /// [`ShardId`](crate) order and prepares them one at a time in that
    /// order: then every chain of waits climbs that order, and no cycle —
    /// no deadlock — can form.
    pub wait: bool,
}

/// How a shard runs a batch of lone operations.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BatchMode {
    /// In order, stopping at the first op whose key another commit holds;
    /// the caller resubmits the rest (a pipeline on one shard).
    Prefix,
    /// All of them, or none when any key is held (the pivot of a pipeline
    /// that spans shards: the others' keys are held by the caller already).
    /// When `block` is not zero, the step reserves that many consecutive
    /// timestamps ([`BatchAnswer::block`] gives the first), stamps its own
    /// writes from the start of it and leaves the rest to the held parts,
    /// so that every write of the pipeline is stamped before any snapshot
    /// opened after this step (`elsa_txn::lone`).
    AllOrNone {
        /// Timestamps to reserve for the whole pipeline's writes.
        block: u64,
    },
    /// All of them under the holds this transaction took here, which are
    /// then released (the other shards of a pipeline that spans shards);
    /// writes are stamped from `block` (first, last) when given.
    Held {
        /// The transaction whose holds these are.
        txn: TxnId,
        /// This part's slice of the pivot's block of timestamps.
        block: Option<(Ts, Ts)>,
    },
}

/// A shard's answer to a lone batch.
#[derive(Clone, Debug, Default)]
pub struct BatchAnswer {
    /// The replies of the ops that ran: a prefix of the batch.
    pub replies: Vec<OpReply>,
    /// The ops not run, for the caller to resubmit.
    pub rest: Vec<KeyOp>,
    /// The first of the timestamps a pivot's step reserved
    /// ([`BatchMode::AllOrNone`]); `None` when it reserved none.
    pub block: Option<Ts>,
}

impl BatchAnswer {
    /// Replies, and the ops not run, with no block.
    pub fn new(replies: Vec<OpReply>, rest: Vec<KeyOp>) -> BatchAnswer {
        BatchAnswer {
            replies,
            rest,
            block: None,
        }
    }
}

/// Work for a shard actor. Each variant carries the channel for its answer.
#[derive(Debug)]
pub enum ShardMsg {
    /// Run lone operations in order, as `mode` says; the answer may stop
    /// short and hands back the ops not run, for the caller to resubmit.
    Batch {
        /// The operations.
        ops: Vec<KeyOp>,
        /// Prefix, all-or-none, or under the caller's holds.
        mode: BatchMode,
        /// What the replies wait for.
        ack: AckLevel,
        /// Answers in order (possibly fewer than `ops`), and the ops not run.
        reply: oneshot::Sender<BatchAnswer>,
    },
    /// A transactional read of one key.
    Read {
        /// The key.
        key: HashedKey,
        /// Read as of this snapshot when the shard still knows the key's
        /// version then (`crate::history`); else, and when None, the
        /// latest state.
        at: Option<Ts>,
        /// What the reply may reveal.
        ack: AckLevel,
        /// Its state, or Busy while another commit holds it for writing.
        reply: oneshot::Sender<Result<ReadState, Refusal>>,
    },
    /// A single-shard commit.
    Commit {
        /// What to validate and install.
        req: CommitRequest,
        /// What the reply waits for.
        ack: AckLevel,
        /// The commit timestamp the shard gave it, or why it refused.
        reply: oneshot::Sender<Result<Ts, Refusal>>,
    },
    /// Multi-shard commit, phase one.
    Prepare {
        /// What to hold and validate.
        req: PrepareRequest,
        /// What the validated versions must have reached.
        ack: AckLevel,
        /// The held keys' states (when asked for), or why not.
        reply: oneshot::Sender<Result<Vec<ReadState>, Refusal>>,
    },
    /// Lattices from a peer replica: merged (last commit wins), logged like
    /// local commits, and answered once durable — so a restarted replica
    /// already has what it acknowledged receiving.
    Merge {
        /// The peer's lattices for keys of this shard.
        entries: Vec<crate::wal::codec::LogEntry>,
        /// From another region: a lattice that is part of a transaction of
        /// several keys waits for the rest (see `Shard::op_merge`).
        park: bool,
        /// How many changed the local state, once durable.
        reply: oneshot::Sender<Result<usize, Refusal>>,
    },
    /// Another region's lattices its node sent again after a restart
    /// (`Shard::op_merge_resent`): merged as `Merge` with `park`, except
    /// those committed before the collection floor.
    MergeResent {
        /// The peer's lattices for keys of this shard.
        entries: Vec<crate::wal::codec::LogEntry>,
        /// How many changed the local state, once durable.
        reply: oneshot::Sender<Result<usize, Refusal>>,
    },
    /// Another region's lattices repaired by a node that is not their
    /// slot's primary there (`Shard::op_merge_behind`): merged as `Merge`
    /// with `park` where they change nothing shown here, left out (and
    /// counted as changes) where they would.
    MergeBehind {
        /// The peer's lattices for keys of this shard.
        entries: Vec<crate::wal::codec::LogEntry>,
        /// How many changed the local state or were left out, once durable.
        reply: oneshot::Sender<Result<usize, Refusal>>,
    },
    /// Another region's transaction records that a peer of this region
    /// repaired (`Shard::op_merge_foreign_records`): merged as `Merge`
    /// without `park`, logged as another region's.
    MergeForeignRecords {
        /// The records.
        entries: Vec<crate::wal::codec::LogEntry>,
        /// How many changed the local state, once durable.
        reply: oneshot::Sender<Result<usize, Refusal>>,
    },
    /// Multi-shard commit, phase two: install the writes and release holds.
    Install {
        /// The transaction.
        txn: TxnId,
        /// Its writes on this shard.
        writes: Vec<Write>,
        /// When it started.
        start_ts: Ts,
        /// When it commits.
        commit_ts: Ts,
        /// The coordinator's node: the writes' version is (commit_ts,
        /// origin) on every shard, as in the transaction's record.
        origin: elsa_lattice::NodeId,
        /// What the reply waits for.
        ack: AckLevel,
        /// Done (or installed but not confirmed by the region's replicas,
        /// or refused: this shard does not hold the transaction's keys).
        reply: oneshot::Sender<Result<(), Refusal>>,
    },
    /// Other regions' transactions, installed here as one under the holds
    /// `txn` took (`elsa_txn::unit`): each lattice with its own version,
    /// merged (a newer state here stays), logged, shipped to the region's
    /// other replicas, not gossiped on. The holds stay: the installer
    /// releases them once every shard answered.
    InstallRemote {
        /// The holds' transaction here.
        txn: TxnId,
        /// The lattices.
        entries: Vec<crate::wal::codec::LogEntry>,
        /// The same install's lattices on other shards (empty when it
        /// touches one): kept with the holds, so that if the installer is
        /// gone this node's orphan resolver finishes the install whole
        /// before it releases them (`AdminMsg::HeldInstall`).
        others: Vec<crate::wal::codec::LogEntry>,
        /// Done once logged by every replica of the keys in the region
        /// (or the region stopped waiting for one), or refused (the holds
        /// were lost).
        reply: oneshot::Sender<Result<(), Refusal>>,
    },
    /// A backup of a participant's keys holds them too (no validation,
    /// never refused), so that if the participant's node dies, the replica
    /// that takes its keys over holds them until the transaction is
    /// finished — never letting anyone in between (see `elsa-txn::record`).
    Shadow {
        /// The transaction.
        txn: TxnId,
        /// Keys to hold, and how.
        holds: Vec<(HashedKey, HoldMode)>,
        /// Held.
        reply: oneshot::Sender<()>,
    },
    /// Multi-shard abort: release the transaction's holds.
    Release {
        /// The transaction.
        txn: TxnId,
    },
    /// Validate `checks` and run `ops` atomically (single-shard EXEC, MSET…).
    Exec {
        /// WATCH checks.
        checks: Vec<Check>,
        /// The operations.
        ops: Vec<KeyOp>,
        /// What the reply waits for.
        ack: AckLevel,
        /// Answers in order, or why nothing ran.
        reply: oneshot::Sender<Result<Vec<OpReply>, Refusal>>,
    },
    /// Anti-entropy: the digest of every bucket.
    Digests(oneshot::Sender<Box<[u64]>>),
    /// Where what this shard logged in the last `age` starts
    /// ([`crate::Shard::log_since`]).
    LogSince {
        /// How far back.
        age: std::time::Duration,
        /// Log files, each with the offset to read from.
        reply: oneshot::Sender<Vec<(std::path::PathBuf, u64)>>,
    },
    /// Anti-entropy: the lattices of the buckets set in `wanted` (a bitmap
    /// over the digest buckets), at most `limit`.
    BucketEntries {
        /// Bitmap of buckets.
        wanted: Vec<u64>,
        /// Most lattices to answer.
        limit: usize,
        /// Only lattices committed before this.
        older_than: Ts,
        /// Bitmap of buckets whose typed lattices go whatever their age
        /// (empty: none; see `Shard::bucket_batch_whole`).
        whole: Vec<u64>,
        /// The lattices.
        reply: oneshot::Sender<crate::shard::AeBatch>,
    },
    /// Administration (DBSIZE, FLUSHALL, SCAN, KEYS, INFO).
    Admin(AdminMsg),
}

impl ShardMsg {
    /// Answers this message "not here, try again" without running it when
    /// it starts work for a client's keys — a lone batch, a read, a
    /// commit, a prepare, a single-shard EXEC, or the held part of a
    /// pipeline — and hands it back otherwise (installs, releases and
    /// shadows follow holds taken earlier; merges and scans serve peers).
    ///
    /// For a node that is not serving: such work was routed to it before
    /// it stopped (a SIGSTOP with messages queued, resumed before the
    /// pulse noticed), and since then another node may have served those
    /// keys. Run now, it would answer from stale data, or tell a
    /// coordinator its record write succeeded on a node no longer primary.
    pub fn refuse_as_stale(self) -> Option<ShardMsg> {
        match self {
            ShardMsg::Batch { ops, reply, .. } => {
                // Nothing run: the caller resubmits every op elsewhere.
                let _ = reply.send(BatchAnswer::new(Vec::new(), ops));
            }
            ShardMsg::Read { reply, .. } => {
                let _ = reply.send(Err(Refusal::Busy));
            }
            ShardMsg::Commit { reply, .. } => {
                let _ = reply.send(Err(Refusal::Busy));
            }
            ShardMsg::Prepare { reply, .. } => {
                let _ = reply.send(Err(Refusal::Busy));
            }
            ShardMsg::Exec { reply, .. } => {
                let _ = reply.send(Err(Refusal::Busy));
            }
            other => return Some(other),
        }
        None
    }
}

/// Administrative requests.
#[derive(Debug)]
pub enum AdminMsg {
    /// Count live keys of a database.
    Dbsize {
        /// The database (see [`crate::db`]).
        db: u8,
        /// How many.
        reply: oneshot::Sender<usize>,
    },
    /// Per database with keys: live keys and keys with a TTL.
    /// Per database: keys, keys with a TTL, the sum of their TTLs (ms).
    Keyspace(oneshot::Sender<Vec<(u8, usize, usize, u64)>>),
    /// Delete everything (`db` None) or one database: a range tombstone
    /// at the shard's clock, logged.
    Flush {
        /// The database, or all.
        db: Option<u8>,
        /// Its timestamp: what was committed before it goes.
        at: Ts,
        /// Done (logged): the shard's flush floors now, for the other
        /// nodes (`elsa_cluster` replicates them).
        reply: oneshot::Sender<crate::db::Floors>,
    },
    /// Floors of FLUSHALL/FLUSHDB made elsewhere (another node, another
    /// region): those higher than the shard's are logged and applied —
    /// what was committed before them goes, and never comes back.
    RaiseFloors(crate::db::Floors),
    /// The shard's flush floors (anti-entropy carries them).
    Floors(oneshot::Sender<crate::db::Floors>),
    /// CONFIG SET appendfsync: the log's fsync policy from now on.
    SetFsync(crate::wal::Fsync),
    /// Live keys of segments starting at `segment`, at least `count` keys or
    /// until the shard ends; answers the keys and the next segment (None at end).
    Scan {
        /// Only keys of this database, named as its clients name them.
        db: u8,
        /// First segment to read.
        segment: usize,
        /// Minimum keys wanted (a hint, as in Redis).
        count: usize,
        /// Glob pattern, if any.
        pattern: Option<Bytes>,
        /// Only keys of this type (`TYPE` as Redis names it, lowercase).
        kind: Option<Bytes>,
        /// Keys and next segment.
        reply: oneshot::Sender<(Vec<Bytes>, Option<usize>)>,
    },
    /// A live key picked with `seed` (RANDOMKEY), if the shard has one.
    RandomKey {
        /// Of this database.
        db: u8,
        /// Where to look: a random segment, then a random key in it.
        seed: u64,
        /// The key.
        reply: oneshot::Sender<Option<Bytes>>,
    },
    /// Counters for INFO.
    Stats(oneshot::Sender<crate::ShardStats>),
    /// Transactions holding keys here for longer than `older_than` (their
    /// coordinator may be gone), with the keys they hold.
    StaleHolds {
        /// Age.
        older_than: std::time::Duration,
        /// The transactions and their keys.
        reply: oneshot::Sender<Vec<(TxnId, Vec<HashedKey>)>>,
    },
    /// The whole install (this shard's lattices and the other shards')
    /// that `txn` put in here under holds it still has, if it installed
    /// any: what the orphan resolver must finish before it releases them.
    HeldInstall {
        /// The holds' transaction.
        txn: TxnId,
        /// The install, or None.
        reply: oneshot::Sender<Option<Vec<crate::wal::codec::LogEntry>>>,
    },
    /// Fault injection (`ELSA.FAULT REFUSE-REMOTE-INSTALLS`, tests only):
    /// refuse (Busy) every install of other regions' transactions, from
    /// any installer — a shard whose region never confirms them.
    RefuseRemoteInstalls(bool),
    /// What of another region's transactions waits here for `key` (its
    /// parked parts, for `ELSA.DIGEST STATE`), as text.
    Parts {
        /// The stored key.
        key: Bytes,
        /// The description (empty: nothing parked).
        reply: oneshot::Sender<String>,
    },
    /// Snapshot, step 1: refuse new multi-shard prepares; answer once no
    /// multi-shard commit holds keys here.
    Freeze(oneshot::Sender<()>),
    /// Snapshot, step 2: switch the log to segment `seq` and write this
    /// shard's snapshot file; answers what it wrote.
    Dump {
        /// The snapshot's sequence number.
        seq: u64,
        /// What was written, or the error.
        reply: oneshot::Sender<Result<crate::Dumped, String>>,
    },
    /// Snapshot, step 3: accept multi-shard prepares again.
    Thaw,
}

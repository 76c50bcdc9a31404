//! Routing: key → shard (here or on another node of the region), and the
//! one way to ask a shard anything. Where keys live and how a message
//! reaches another node is the [`Placement`]'s business; the coordinator
//! only sees shard ids.

use std::cell::RefCell;
use std::rc::Rc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use bytes::Bytes;
use elsa_lattice::{Hlc, NodeId};
use elsa_shard::{AckLevel, HashedKey, KeyHasher, Shard, ShardMsg, TxnId};
use tokio::sync::{mpsc, oneshot};

use crate::TxnError;

/// A shard anywhere in the region: which node, which of its shards.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ShardId {
    /// The node.
    pub node: NodeId,
    /// The shard's number on that node.
    pub index: u16,
}

impl std::fmt::Display for ShardId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.node, self.index)
    }
}

/// Where keys live and how to reach shards of other nodes.
pub trait Placement: Send + Sync {
    /// The shard that serves `hash` for clients of this node.
    fn route(&self, hash: u64) -> ShardId;
    /// The other replicas in this region of the key with hash `hash` (not
    /// the one [`Placement::route`] gives): they hold a multi-shard
    /// commit's keys too, in case they take them over (`crate::commit`).
    fn backups(&self, _hash: u64) -> Vec<ShardId> {
        Vec::new()
    }
    /// False when this node's view no longer makes `shard` the one shard
    /// serving `hash` (it died, was declared dead, handed the key's slot
    /// back…). Always true where any replica serves a key.
    fn still_serves(&self, _hash: u64, _shard: ShardId) -> bool {
        true
    }
    /// Sends `msg` to a shard of another node; its reply channel is
    /// answered when the answer comes back, or dropped if the node cannot
    /// be reached (the caller sees [`TxnError::ShardGone`]).
    fn send_remote(&self, to: ShardId, msg: ShardMsg);
    /// With synchronous cross-region replication (`replication = 2pc`):
    /// pushes the committed state of `keys` to every other region and
    /// answers once all have it. `None` when commits do not wait.
    fn sync_replicate(
        &self,
        _keys: Vec<HashedKey>,
    ) -> Option<oneshot::Receiver<Result<(), String>>> {
        None
    }
}

/// Placement for a node alone: every key on one of its own shards.
pub struct Standalone {
    node: NodeId,
    shards: usize,
}

impl Standalone {
    /// `shards` shards of node `node`.
    pub fn new(node: NodeId, shards: usize) -> Standalone {
        Standalone { node, shards }
    }
}

impl Placement for Standalone {
    fn route(&self, hash: u64) -> ShardId {
        ShardId {
            node: self.node,
            index: shard_of(hash, self.shards) as u16,
        }
    }

    fn send_remote(&self, _to: ShardId, _msg: ShardMsg) {
        // No other node: dropping the message answers ShardGone.
    }
}

/// The start timestamps of the transactions and WATCHes open on this node.
/// A tombstone (or expired value) younger than the oldest may still decide
/// one of their validations — a key read while absent must not look
/// unchanged after it was written and deleted again — so a node with no
/// peers collects tombstones exactly up to it.
#[derive(Default)]
pub struct OpenReads {
    open: std::sync::Mutex<std::collections::BTreeMap<elsa_lattice::Ts, usize>>,
}

impl OpenReads {
    /// Registers a reader that started at `ts`; it stays open until the
    /// guard is dropped.
    pub fn open(self: &Arc<Self>, ts: elsa_lattice::Ts) -> OpenGuard {
        *self
            .open
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .entry(ts)
            .or_default() += 1;
        OpenGuard {
            reads: self.clone(),
            ts,
        }
    }

    /// The oldest open reader's start, if any is open.
    pub fn oldest(&self) -> Option<elsa_lattice::Ts> {
        let open = self.open.lock().unwrap_or_else(|e| e.into_inner());
        open.keys().next().copied()
    }
}

/// Keeps a reader registered in [`OpenReads`] while it lives.
pub struct OpenGuard {
    reads: Arc<OpenReads>,
    ts: elsa_lattice::Ts,
}

impl Drop for OpenGuard {
    fn drop(&mut self) {
        let mut open = self.reads.open.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(n) = open.get_mut(&self.ts) {
            *n -= 1;
            if *n == 0 {
                open.remove(&self.ts);
            }
        }
    }
}

/// What every thread of a node shares: the shards' inboxes, the clock, ids.
pub struct NodeContext {
    /// This node's id (the lattice tie-break).
    pub node_id: NodeId,
    /// The node's timestamp oracle.
    pub hlc: Arc<Hlc>,
    /// The key hasher every table and router uses.
    pub hasher: KeyHasher,
    /// One inbox per shard, indexed by shard number.
    pub inboxes: Vec<mpsc::UnboundedSender<ShardMsg>>,
    /// Key placement and the way to other nodes.
    pub placement: Arc<dyn Placement>,
    /// Transactions and WATCHes open on the node.
    pub open_reads: Arc<OpenReads>,
    /// Open snapshot-isolation transactions, when shards keep the values
    /// they replace for them (a node without peers: see
    /// `elsa_shard::history`); None, and SI reads the latest state.
    pub snapshots: Option<Arc<elsa_shard::history::Snapshots>>,
    /// Keyspace notifications: the node's switch and sink (its shards
    /// share it), which transactions raise their events through.
    pub notifier: Arc<elsa_shard::notify::Notifier>,
    next_txn: AtomicU64,
    /// Fault injection (`ELSA.FAULT DELAY-INSTALLS ms`, tests only): how
    /// long a multi-shard commit waits between its decision and its
    /// installs, widening the window in which slots can move under it.
    install_delay_ms: AtomicU64,
    /// When this node's installer of other regions' transactions last
    /// found the region unable to install them (ms since `created`, plus
    /// one; 0: never). The shards' parked parts wait that long again
    /// before they are shown alone (`Shard::settle_parts`).
    installs_blocked: AtomicU64,
    created: std::time::Instant,
}

/// Low bits of a transaction id that count this node's transactions.
const TXN_COUNTER_BITS: u32 = 40;
const TXN_COUNTER_MASK: u64 = (1 << TXN_COUNTER_BITS) - 1;

/// Where this process starts counting transactions: the wall clock in
/// microseconds (2^40 µs is 12.7 days). A process runs fewer than one
/// transaction per microsecond, so its counter stays behind the clock and
/// the next process, started later, counts from past every id it used;
/// records live minutes, far less than the wrap-around.
fn first_txn_counter() -> u64 {
    let micros = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(1, |d| d.as_micros() as u64);
    micros & TXN_COUNTER_MASK
}

impl NodeContext {
    /// A context for `inboxes.len()` shards placed by `placement`.
    pub fn new(
        node_id: NodeId,
        hlc: Arc<Hlc>,
        hasher: KeyHasher,
        inboxes: Vec<mpsc::UnboundedSender<ShardMsg>>,
        placement: Arc<dyn Placement>,
    ) -> NodeContext {
        NodeContext {
            node_id,
            hlc,
            hasher,
            inboxes,
            placement,
            open_reads: Arc::new(OpenReads::default()),
            snapshots: None,
            notifier: Arc::default(),
            next_txn: AtomicU64::new(first_txn_counter()),
            install_delay_ms: AtomicU64::new(0),
            installs_blocked: AtomicU64::new(0),
            created: std::time::Instant::now(),
        }
    }

    /// The region cannot install other regions' transactions now (a key's
    /// primary has no lease, cannot be reached, or stays busy).
    pub fn installs_blocked(&self) {
        let at = self.created.elapsed().as_millis() as u64 + 1;
        self.installs_blocked.store(at, Ordering::Relaxed);
    }

    /// How long ago [`NodeContext::installs_blocked`] was last said.
    pub fn installs_blocked_ago(&self) -> Option<std::time::Duration> {
        match self.installs_blocked.load(Ordering::Relaxed) {
            0 => None,
            at => Some(
                self.created
                    .elapsed()
                    .saturating_sub(std::time::Duration::from_millis(at - 1)),
            ),
        }
    }

    /// Testing: delay every multi-shard install this node coordinates by
    /// `ms` after the decision (0: none).
    pub fn set_install_delay(&self, ms: u64) {
        self.install_delay_ms.store(ms, Ordering::Relaxed);
    }

    /// The injected delay before installs, if any.
    pub(crate) fn install_delay(&self) -> Option<std::time::Duration> {
        match self.install_delay_ms.load(Ordering::Relaxed) {
            0 => None,
            ms => Some(std::time::Duration::from_millis(ms)),
        }
    }

    /// A region-unique transaction id: shards of this node may hold keys
    /// for coordinators on other nodes too, so the node id is part of it.
    /// Unique across restarts too: a transaction's record (`crate::record`)
    /// outlives the process, and a new transaction reusing an old id found
    /// the old record "committed" and never wrote its own — a crash then
    /// recovered it half-applied.
    pub fn next_txn(&self) -> TxnId {
        (u64::from(self.node_id) << TXN_COUNTER_BITS)
            | (self.next_txn.fetch_add(1, Ordering::Relaxed) & TXN_COUNTER_MASK)
    }

    /// Number of shards on this node.
    pub fn shards(&self) -> usize {
        self.inboxes.len()
    }

    /// The id of this node's shard number `index`.
    pub fn local(&self, index: usize) -> ShardId {
        ShardId {
            node: self.node_id,
            index: index as u16,
        }
    }
}

/// The shard a worker thread owns, as its connections see it.
#[derive(Clone)]
pub struct LocalShard {
    /// Its number.
    pub index: usize,
    /// The shard itself (only this thread touches it).
    pub shard: Rc<RefCell<Shard>>,
    /// Wakes the worker's inbox task to flush the shard's log after an
    /// inline request left replies waiting for it.
    pub flush: Rc<tokio::sync::Notify>,
}

/// A thread's handle on the node: the shared context plus, when the thread
/// is a shard worker, its own shard, which it serves inline without a message.
#[derive(Clone)]
pub struct Coordinator {
    /// Shared node state.
    pub node: Arc<NodeContext>,
    local: Option<LocalShard>,
}

impl Coordinator {
    /// A coordinator on a thread that owns shard `local` (if any).
    pub fn new(node: Arc<NodeContext>, local: Option<LocalShard>) -> Self {
        Coordinator { node, local }
    }

    /// The hash of `key`.
    pub fn hash(&self, key: &[u8]) -> u64 {
        std::hash::BuildHasher::hash_one(&self.node.hasher, key)
    }

    /// `key` with its hash.
    pub fn hashed(&self, key: Bytes) -> HashedKey {
        HashedKey {
            hash: self.hash(&key),
            key,
        }
    }

    /// The shard serving a key hash.
    pub fn shard_of(&self, hash: u64) -> ShardId {
        self.node.placement.route(hash)
    }

    /// The keys of `written` when commits must reach every region before
    /// they are answered (acknowledgement level `all`); `None` otherwise,
    /// at the cost of one check.
    pub fn keys_to_replicate<'a>(
        &self,
        written: impl Iterator<Item = &'a elsa_shard::KeyOp>,
        ack: AckLevel,
    ) -> Option<Vec<HashedKey>> {
        if ack != AckLevel::All {
            return None;
        }
        let mut keys = Vec::new();
        for k in written {
            keys.push(HashedKey {
                key: k.key.clone(),
                hash: k.hash,
            });
            // RENAME and COPY write their destination too.
            keys.extend(k.op.other_keys().iter().map(|o| self.hashed(o.clone())));
        }
        Some(keys)
    }

    /// Waits until every other region has the committed state of `keys`.
    pub async fn replicate(&self, keys: Option<Vec<HashedKey>>) -> Result<(), TxnError> {
        let Some(keys) = keys.filter(|k| !k.is_empty()) else {
            return Ok(());
        };
        match self.node.placement.sync_replicate(keys) {
            None => Ok(()),
            Some(rx) => match rx.await {
                Ok(Ok(())) => Ok(()),
                Ok(Err(e)) => Err(TxnError::Unavailable(format!(
                    "ERR committed here but not confirmed by every region: {e}"
                ))),
                Err(_) => Err(TxnError::ShardGone),
            },
        }
    }

    /// The index of this node's shard serving `hash` when another worker
    /// thread owns it: a connection whose commands all go there is better
    /// served on that thread. None for this thread's own shard, another
    /// node's, or a node of one shard.
    pub fn other_worker(&self, hash: u64) -> Option<usize> {
        let local = self.local.as_ref()?;
        if self.node.shards() < 2 {
            return None;
        }
        let s = self.shard_of(hash);
        let index = usize::from(s.index);
        (s.node == self.node.node_id && index != local.index).then_some(index)
    }

    /// True when `shard` is this thread's own, served inline.
    pub fn is_inline(&self, shard: ShardId) -> bool {
        shard.node == self.node.node_id
            && self
                .local
                .as_ref()
                .is_some_and(|l| l.index == usize::from(shard.index))
    }

    /// Sends `make(reply)` to `shard` and awaits the answer. The thread's own
    /// shard is served inline: no message, no thread hop.
    pub async fn ask<T>(
        &self,
        shard: ShardId,
        make: impl FnOnce(oneshot::Sender<T>) -> ShardMsg,
    ) -> Result<T, TxnError> {
        let (tx, rx) = oneshot::channel();
        self.post(shard, make(tx))?;
        rx.await.map_err(|_| TxnError::Lost)
    }

    /// Starts a request without waiting: returns the receiver to await later,
    /// so requests to several shards proceed in parallel.
    pub fn start<T>(
        &self,
        shard: ShardId,
        make: impl FnOnce(oneshot::Sender<T>) -> ShardMsg,
    ) -> Result<oneshot::Receiver<T>, TxnError> {
        let (tx, rx) = oneshot::channel();
        self.post(shard, make(tx))?;
        Ok(rx)
    }

    /// Delivers a message: inline to the thread's own shard, else to the
    /// shard's inbox, or to another node.
    pub fn post(&self, shard: ShardId, msg: ShardMsg) -> Result<(), TxnError> {
        if shard.node != self.node.node_id {
            self.node.placement.send_remote(shard, msg);
            return Ok(());
        }
        let index = usize::from(shard.index);
        match &self.local {
            Some(local) if local.index == index => {
                let mut s = local.shard.borrow_mut();
                s.handle(msg);
                if s.wal_pending() {
                    local.flush.notify_one();
                }
                Ok(())
            }
            _ => self
                .node
                .inboxes
                .get(index)
                .ok_or(TxnError::ShardGone)?
                .send(msg)
                .map_err(|_| TxnError::ShardGone),
        }
    }

    /// Delivers a message through the inbox even for the thread's own shard.
    pub fn post_later(&self, shard: ShardId, msg: ShardMsg) {
        if shard.node != self.node.node_id {
            self.node.placement.send_remote(shard, msg);
        } else if let Some(inbox) = self.node.inboxes.get(usize::from(shard.index)) {
            let _ = inbox.send(msg);
        }
    }

    /// Delivers a message from `Drop`: inline to the local shard when it is
    /// not borrowed (so a retry that follows cannot overtake it), else
    /// through the inbox.
    pub fn post_from_drop(&self, shard: ShardId, msg: ShardMsg) {
        if let Some(local) = self
            .local
            .as_ref()
            .filter(|l| shard.node == self.node.node_id && l.index == usize::from(shard.index))
        {
            if let Ok(mut s) = local.shard.try_borrow_mut() {
                s.handle(msg);
                return;
            }
        }
        self.post_later(shard, msg);
    }
}

/// The shard owning a key hash among `shards` (low 32 bits, multiply-shift;
/// the table uses other bits for segments, hashbrown the rest).
pub fn shard_of(hash: u64, shards: usize) -> usize {
    (((hash & 0xFFFF_FFFF) * shards as u64) >> 32) as usize
}

/// How long a request keeps retrying Busy answers — keys held by commits
/// in flight (microseconds), a primary moving between nodes (a membership
/// gossip interval) — before it answers [`TxnError::TryAgain`] rather than
/// keep its client waiting.
pub const RETRY_FOR: std::time::Duration = std::time::Duration::from_secs(10);

/// The retries of one request after Busy answers: backs off, and gives up
/// after [`RETRY_FOR`].
pub struct Retry {
    attempt: u32,
    /// The first Busy answer (the clock is read only once one comes: most
    /// requests never retry, and a lone batch is on the hot path).
    since: Option<tokio::time::Instant>,
}

impl Retry {
    /// Before the first attempt.
    pub fn new() -> Retry {
        Retry {
            attempt: 0,
            since: None,
        }
    }

    /// Waits before the next attempt; `TryAgain` once it has been retrying
    /// for [`RETRY_FOR`].
    /// True once an attempt was retried.
    pub fn retried(&self) -> bool {
        self.since.is_some()
    }

    pub async fn wait(&mut self) -> Result<(), TxnError> {
        let since = *self.since.get_or_insert_with(tokio::time::Instant::now);
        if since.elapsed() >= RETRY_FOR {
            return Err(TxnError::TryAgain);
        }
        backoff(self.attempt).await;
        self.attempt = self.attempt.saturating_add(1);
        Ok(())
    }
}

impl Default for Retry {
    fn default() -> Self {
        Retry::new()
    }
}

/// Backs off after a Busy answer: yields first (holds last microseconds),
/// then sleeps, so a stuck holder does not make callers spin.
pub async fn backoff(attempt: u32) {
    if attempt < 32 {
        tokio::task::yield_now().await;
    } else {
        let jitter = rand::random::<u64>() % 500;
        let micros = (100u64 << (attempt - 32).min(6)) + jitter;
        tokio::time::sleep(std::time::Duration::from_micros(micros)).await;
    }
}

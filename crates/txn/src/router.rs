//! Routing: key → shard, and the one way to ask a shard anything.

use std::cell::RefCell;
use std::rc::Rc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use bytes::Bytes;
use elsa_lattice::{Hlc, NodeId};
use elsa_shard::{HashedKey, KeyHasher, Shard, ShardMsg, TxnId};
use tokio::sync::{mpsc, oneshot};

use crate::TxnError;

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
    next_txn: AtomicU64,
}

impl NodeContext {
    /// A context for `inboxes.len()` shards.
    pub fn new(
        node_id: NodeId,
        hlc: Arc<Hlc>,
        hasher: KeyHasher,
        inboxes: Vec<mpsc::UnboundedSender<ShardMsg>>,
    ) -> NodeContext {
        NodeContext {
            node_id,
            hlc,
            hasher,
            inboxes,
            next_txn: AtomicU64::new(1),
        }
    }

    /// A node-unique transaction id.
    pub fn next_txn(&self) -> TxnId {
        self.next_txn.fetch_add(1, Ordering::Relaxed)
    }

    /// Number of shards.
    pub fn shards(&self) -> usize {
        self.inboxes.len()
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

    /// The shard owning a key hash.
    pub fn shard_of(&self, hash: u64) -> usize {
        shard_of(hash, self.node.shards())
    }

    /// Sends `make(reply)` to `shard` and awaits the answer. The thread's own
    /// shard is served inline: no message, no thread hop.
    pub async fn ask<T>(
        &self,
        shard: usize,
        make: impl FnOnce(oneshot::Sender<T>) -> ShardMsg,
    ) -> Result<T, TxnError> {
        let (tx, rx) = oneshot::channel();
        self.post(shard, make(tx))?;
        rx.await.map_err(|_| TxnError::ShardGone)
    }

    /// Starts a request without waiting: returns the receiver to await later,
    /// so requests to several shards proceed in parallel.
    pub fn start<T>(
        &self,
        shard: usize,
        make: impl FnOnce(oneshot::Sender<T>) -> ShardMsg,
    ) -> Result<oneshot::Receiver<T>, TxnError> {
        let (tx, rx) = oneshot::channel();
        self.post(shard, make(tx))?;
        Ok(rx)
    }

    /// Delivers a message: inline to the local shard, else to its inbox.
    pub fn post(&self, shard: usize, msg: ShardMsg) -> Result<(), TxnError> {
        match &self.local {
            Some(local) if local.index == shard => {
                let mut s = local.shard.borrow_mut();
                s.handle(msg);
                if s.wal_pending() {
                    local.flush.notify_one();
                }
                Ok(())
            }
            _ => self.node.inboxes[shard]
                .send(msg)
                .map_err(|_| TxnError::ShardGone),
        }
    }

    /// Delivers a message through the inbox even for the local shard.
    pub fn post_later(&self, shard: usize, msg: ShardMsg) {
        let _ = self.node.inboxes[shard].send(msg);
    }

    /// Delivers a message from `Drop`: inline to the local shard when it is
    /// not borrowed (so a retry that follows cannot overtake it), else
    /// through the inbox.
    pub fn post_from_drop(&self, shard: usize, msg: ShardMsg) {
        if let Some(local) = self.local.as_ref().filter(|l| l.index == shard) {
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

//! Elsa's coordinator side: the paper's *proxy*.
//!
//! - [`router`]: which shard owns a key, and how to ask it (inline when the
//!   shard lives on the caller's thread, by message otherwise).
//! - [`lone`]: lone commands — pipelined batches split per shard, in order.
//! - [`atomic`]: commands that must act on many keys at once (MULTI/EXEC,
//!   MSET, multi-key DEL…): hold, run, install.
//! - [`commit`]: the second half of every multi-shard commit — shadow
//!   holds on the other replicas, the decision, installs, release.
//! - [`record`]: transaction records — a multi-shard commit's decision,
//!   kept as a key of its own, and how half-finished ones are resolved.
//! - [`txn`]: interactive transactions (`BEGIN [RC|RR|SI]` … `COMMIT`): the
//!   write buffer, read buffer and commit protocol of the paper's §2.
//!
//! The shard side of each step lives in `elsa-shard`; this crate only decides
//! which shard is asked what, and in which order.

pub mod atomic;
pub mod commit;
pub mod lone;
pub mod record;
pub mod router;
pub mod txn;
pub mod unit;

pub use router::{Coordinator, NodeContext};
pub use txn::{Isolation, Txn};

impl From<elsa_shard::Refusal> for TxnError {
    fn from(r: elsa_shard::Refusal) -> TxnError {
        match r {
            elsa_shard::Refusal::Conflict(k) => TxnError::Conflict(k),
            elsa_shard::Refusal::Busy => TxnError::Conflict(Bytes::new()),
            elsa_shard::Refusal::Unavailable(why) => TxnError::Unavailable(why),
        }
    }
}

use bytes::Bytes;

/// Why a transactional request did not complete.
#[derive(Clone, Debug, thiserror::Error, PartialEq, Eq)]
pub enum TxnError {
    /// Validation failed on this key; nothing was written. Retry.
    #[error("CONFLICT {}", String::from_utf8_lossy(.0))]
    Conflict(Bytes),
    /// A WATCHed key changed: EXEC answers nil.
    #[error("watched key changed")]
    WatchFailed,
    /// The node cannot make writes durable now (disk full, read-only…).
    #[error("{0}")]
    Unavailable(String),
    /// Busy for [`router::RETRY_FOR`]: a key held that long, or views of
    /// who is its primary that disagree that long (Redis Cluster's
    /// TRYAGAIN, which clients retry).
    #[error("TRYAGAIN the key's shard stayed busy or its primary kept moving; try again")]
    TryAgain,
    /// The request could not be sent: its shard's thread is gone (the
    /// node is shutting down) or its node cannot be reached. Not applied.
    #[error("ERR shard unavailable (node shutting down or unreachable); not applied")]
    ShardGone,
    /// The request was sent but no answer came: the shard's node failed,
    /// restarted or stopped answering. It may or may not have been applied.
    #[error("ERR no answer from the shard serving the key (its node failed or restarted); it may or may not have been applied")]
    Lost,
}

//! Elsa's shard actor: the paper's server-side storage, one per worker thread.
//!
//! - [`record`] packs one key's lattice into a single allocation.
//! - [`table`] is the shard's private hash table of records, in segments.
//! - [`keyhash`] is a key's hash: its Redis Cluster slot (`{hash tags}`
//!   included) inside a general hash, which places it on a shard.
//! - [`ops`] is the semantics of every per-key command ([`Op`]), run against
//!   a [`KeyView`] so the same code serves lone commands and transactions.
//! - [`shard`] is the state one actor owns and the shard-side half of the
//!   commit protocol (`op_commit`, `op_prepare`, `op_install`, …); its
//!   `persist` part holds replies until the log has them, `upkeep` scans,
//!   counts and collects garbage.
//! - [`wal`] is durability: the record codec, the per-shard log with group
//!   commit, snapshot files and recovery.
//! - [`evict`] is the memory limit shards share and the eviction
//!   policies' access clocks (the eviction itself: `shard/evict.rs`).
//! - [`msg`] is the actor's typed inbox ([`ShardMsg`]).
//! - [`gossip`] records what changed each merge epoch.
//! - [`history`] keeps replaced values while a snapshot may read them.
//! - [`repl`] is in-region replication as the shard sees it: the batches
//!   it ships and the replies that wait for other replicas (`AckLevel`).
//!
//! Nothing here knows about sockets, RESP or other shards: routing and the
//! coordinator side of commits live in `elsa-txn`.

pub mod db;
pub mod evict;
pub mod geohash;
pub mod glob;
pub mod gossip;
pub mod history;
pub mod keyhash;
pub mod msg;
pub mod notify;
pub mod ops;
pub mod record;
pub mod repl;
pub mod shard;
pub mod table;

pub use msg::*;
pub use ops::{
    BitRange, Current, Expiry, GetExTtl, KeyView, ObjectField, Op, OpReply, SetCond, SetReply,
};
pub use record::Unit;
pub use repl::{AckLevel, Replicator};
pub use shard::{
    unix_ms, AeBatch, ChangeHook, Dumped, Shard, ShardStats, KEYSET, PART_GRACE, PART_WAIT,
    PREPARE_WAIT,
};
pub use table::KeyHasher;

/// Keys Elsa keeps for itself (transaction records) start with this;
/// KEYS, SCAN, DBSIZE and RANDOMKEY do not show them.
pub const INTERNAL_PREFIX: &[u8] = b"\xffELSA:";
pub mod wal;

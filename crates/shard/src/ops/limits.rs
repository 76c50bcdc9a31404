//! Redis's encoding thresholds (`hash-max-listpack-entries`,
//! `set-max-intset-entries`, …): the sizes up to which Redis keeps a
//! collection packed, which `OBJECT ENCODING` reports and which make
//! HSCAN/SSCAN/ZSCAN answer a small collection whole. Process-wide, as
//! Redis's `server.*` fields are; CONFIG SET changes them
//! (`elsa_server`'s `runtime/params.rs`).
//!
//! They decide only what Elsa *answers* as Redis would; how Elsa stores a
//! collection (its own compact encodings, `elsa_lattice::packed`) does
//! not depend on them. As in Redis, a collection that held more entries,
//! or a longer element, than the thresholds allowed when it was written
//! stays unpacked (`Peak`); a threshold changed later applies from then
//! on.

use std::sync::atomic::{AtomicI64, AtomicUsize, Ordering::Relaxed};

/// `hash-max-listpack-entries` (alias `hash-max-ziplist-entries`).
pub static HASH_ENTRIES: AtomicUsize = AtomicUsize::new(512);
/// `hash-max-listpack-value` (alias `hash-max-ziplist-value`).
pub static HASH_VALUE: AtomicUsize = AtomicUsize::new(64);
/// `set-max-intset-entries`.
pub static SET_INTSET_ENTRIES: AtomicUsize = AtomicUsize::new(512);
/// `zset-max-listpack-entries` (alias `zset-max-ziplist-entries`).
pub static ZSET_ENTRIES: AtomicUsize = AtomicUsize::new(128);
/// `zset-max-listpack-value` (alias `zset-max-ziplist-value`).
pub static ZSET_VALUE: AtomicUsize = AtomicUsize::new(64);
/// `list-max-listpack-size` (alias `list-max-ziplist-size`): Redis 7.0
/// reports every list as a quicklist whatever it is; kept for CONFIG.
pub static LIST_SIZE: AtomicI64 = AtomicI64::new(-2);
/// `list-compress-depth`: kept for CONFIG (Elsa does not compress lists).
pub static LIST_COMPRESS_DEPTH: AtomicI64 = AtomicI64::new(0);

/// `stream-node-max-entries`: how many entries Redis puts in one node of
/// a stream, which decides what an approximate trim (`~`) removes
/// (`ops::streams`). 0: no limit by count.
pub static STREAM_NODE_ENTRIES: AtomicUsize = AtomicUsize::new(100);
/// `stream-node-max-bytes`: kept for CONFIG (Elsa's nodes are counted in
/// entries only; `docs/commands.md`).
pub static STREAM_NODE_BYTES: AtomicUsize = AtomicUsize::new(4096);

/// The current value of a threshold.
pub fn get(t: &AtomicUsize) -> usize {
    t.load(Relaxed)
}

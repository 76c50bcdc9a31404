//! Elsa's lattices: the data every replica stores and merges.
//!
//! This crate is pure — no I/O, no threads of its own — so the laws the rest
//! of Elsa relies on can be proven here in isolation:
//!
//! - [`Crdt`]: the join-semilattice interface (merge is associative,
//!   commutative and idempotent — ties included).
//! - [`Lww`]: the paper's last-commit-wins register `{value | tombstone,
//!   start_ts, commit_ts}` with the committing node as tie-break.
//! - [`Hlc`]: the hybrid logical clock that hands out `start_ts`/`commit_ts`.
//! - The data types (`docs/datatypes.md`): [`Counter`] (a string that
//!   merges increments per origin), [`OrSet`] (add-wins set), [`OrMap`]
//!   (add-wins map of counters: hashes), [`ZSet`] (sorted sets), [`List`]
//!   (a sequence CRDT), [`stream::Stream`] (streams and their consumer
//!   groups; not wired to commands yet), built on [`Dots`]/[`Presence`],
//!   and [`KeyState`], one key's state whatever type it holds. Each
//!   mutation answers a *delta*: a small state whose merge into any
//!   replica has the mutation's effect, so one element's change ships,
//!   not the whole value.
//!
//! Storage layout, transactions and gossip live in higher crates; they call
//! into this one to decide which of two versions wins.

mod codec;
pub mod counter;
mod dots;
mod elem;
mod hlc;
pub mod hll;
pub mod hll_parts;
pub mod key;
pub mod libraries;
pub mod list;
mod list_rewrite;
mod lww;
pub mod ormap;
pub mod orset;
mod packed;
mod packing;
mod seq;
pub mod sparse;
pub mod stream;
pub mod stream_fields;
pub mod touched;
pub mod zset;

pub use counter::Counter;
pub use dots::{Dots, Presence};
pub use elem::Elem;
pub use hlc::{Hlc, PhysicalClock, SystemClock};
pub use key::{Collection, KeyState, Kind, Ttl};
pub use list::List;
pub use lww::{Lww, Version};
pub use ormap::{FieldValues, OrMap};
pub use orset::{OrSet, Peak};
pub use packed::{set_packing, MAX_ELEM, MAX_ENTRIES};
pub use touched::Touched;
pub use zset::ZSet;

/// A timestamp from the [`Hlc`]: physical milliseconds in the high 48 bits,
/// a logical counter in the low 16.
pub type Ts = u64;

/// The id of the node that committed a version; breaks `commit_ts` ties.
pub type NodeId = u32;

/// A state-based CRDT (join-semilattice).
///
/// Implementations must satisfy, for all `a`, `b`, `c` (with `⊔` = merge):
/// - commutativity: `a ⊔ b = b ⊔ a`
/// - associativity: `(a ⊔ b) ⊔ c = a ⊔ (b ⊔ c)`
/// - idempotence:   `a ⊔ a = a`
///
/// These hold for *every* input, including two states with equal timestamps —
/// the case Anna's LWW lattice gets wrong by keeping whichever arrived last.
/// The property tests in this crate check all three.
pub trait Crdt: Sized {
    /// Merges `other` into `self`; returns `true` when `self` changed, so a
    /// store can tell which keys need gossiping.
    fn merge(&mut self, other: Self) -> bool;
}

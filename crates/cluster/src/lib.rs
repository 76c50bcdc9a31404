//! Elsa across nodes and regions: where keys live (the [`ring`]), how
//! nodes talk ([`wire`], [`remote`]), and the replication service that
//! gossips each merge epoch's lattices and repairs what gossip missed by
//! anti-entropy. Peer links are authenticated and encrypted with the
//! cluster secret ([`peer_auth`]; membership datagrams in [`membership`]),
//! and every frame's timestamps are checked against `max-clock-drift`
//! before anything in it is observed or merged.

pub mod antientropy;
pub mod config;
pub mod membership;
pub mod owners;
pub mod peer_auth;
pub mod remote;
pub mod ring;
pub mod service;
pub mod watermark;
pub mod wire;

pub use config::{Ownership, Replication, Routing, Settings};
pub use service::{Cluster, FunctionLibraries, RegionReplicator, Router, Standalone};

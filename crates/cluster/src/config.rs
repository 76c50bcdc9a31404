//! The cluster settings a node runs with (resolved by the server's config).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use elsa_lattice::NodeId;

/// Which in-region replica serves a key's requests.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Routing {
    /// Always the key's primary replica: exact SI inside the region.
    Primary,
    /// Any replica, at random: spreads hot keys; SI per replica only.
    Random,
}

/// How commits reach other regions.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Replication {
    /// Gossiped every merge epoch; a commit never waits for a region.
    Crdt,
    /// A commit is acknowledged only after every other region has it
    /// durably (the paper's §5.9 baseline).
    TwoPc,
}

/// Who decides which node of a region serves a slot.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ownership {
    /// The failure detector's view (chitchat): each node decides alone.
    /// A node cut off from its region keeps serving (see
    /// `docs/regions.md`, *Partitions inside a region*).
    Gossip,
    /// A Raft group per region agrees on owners and a node serves a slot
    /// only under a lease from it (`crate::owners`): one owner per slot
    /// under any partition; a node cut off from its region's majority
    /// serves nothing.
    Leases,
}

impl Ownership {
    /// The config spelling.
    pub fn name(self) -> &'static str {
        match self {
            Ownership::Gossip => "gossip",
            Ownership::Leases => "leases",
        }
    }
}

impl std::str::FromStr for Ownership {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s.to_ascii_lowercase().as_str() {
            "gossip" => Ok(Ownership::Gossip),
            "leases" => Ok(Ownership::Leases),
            _ => Err(format!("'{s}' (expected gossip or leases)")),
        }
    }
}

impl Routing {
    /// The config spelling.
    pub fn name(self) -> &'static str {
        match self {
            Routing::Primary => "primary",
            Routing::Random => "random",
        }
    }
}

impl Replication {
    /// The config spelling.
    pub fn name(self) -> &'static str {
        match self {
            Replication::Crdt => "crdt",
            Replication::TwoPc => "2pc",
        }
    }
}

impl std::str::FromStr for Routing {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s.to_ascii_lowercase().as_str() {
            "primary" => Ok(Routing::Primary),
            "random" => Ok(Routing::Random),
            _ => Err(format!("'{s}' (expected primary or random)")),
        }
    }
}

impl std::str::FromStr for Replication {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s.to_ascii_lowercase().as_str() {
            "crdt" => Ok(Replication::Crdt),
            "2pc" => Ok(Replication::TwoPc),
            _ => Err(format!("'{s}' (expected crdt or 2pc)")),
        }
    }
}

/// Everything the replication service needs to know about its node.
#[derive(Clone, Debug)]
pub struct Settings {
    /// This node.
    pub node: NodeId,
    /// Its region.
    pub region: String,
    /// Its client address (published to peers).
    pub client: SocketAddr,
    /// Its peer address (TCP for replication, UDP for membership).
    pub peer: SocketAddr,
    /// Shards it runs.
    pub shards: u16,
    /// Peer addresses to join through.
    pub seeds: Vec<String>,
    /// Virtual nodes per shard.
    pub vnodes: u32,
    /// Replicas per region.
    pub replication_factor: usize,
    /// Request routing.
    pub routing: Routing,
    /// Cross-region mode.
    pub replication: Replication,
    /// Who decides a slot's owner inside the region.
    pub ownership: Ownership,
    /// Where the node keeps its own state (the ownership group's log).
    pub state_dir: Option<PathBuf>,
    /// Merge epoch.
    pub merge_epoch: Duration,
    /// Anti-entropy period.
    pub anti_entropy: Duration,
    /// Emulated one-way delay to other regions (testing; 0 = none).
    pub wan_delay: Duration,
    /// Emulated loss of gossip and anti-entropy frames to other regions, in percent.
    pub wan_loss_percent: f64,
    /// Whether ELSA.FAULT may cut this node off (testing).
    pub fault_injection: bool,
    /// How many nodes its region has when it first forms (0 = not said:
    /// then every seed must have been seen). See `Cluster::may_found_region`.
    pub region_nodes: usize,
    /// True when the node started with no data: it has never been part of
    /// a formed region.
    pub fresh: bool,
    /// Whether PUBLISH reaches subscribers in other regions too (and
    /// messages from other regions are delivered here).
    pub pubsub_across_regions: bool,
    /// The cluster secret's keys and this process's TLS certificate: every
    /// peer link runs over TLS and is authenticated, membership datagrams
    /// are sealed. None = plaintext (loopback development, `peer-insecure`).
    pub auth: Option<std::sync::Arc<crate::peer_auth::PeerAuth>>,
    /// How far ahead of this node's clock a peer's timestamp may be before
    /// its frame is refused (`max-clock-drift-ms`).
    pub max_clock_drift: Duration,
}

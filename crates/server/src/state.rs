//! The node-wide state every connection and service shares ([`Shared`]),
//! and why a node could not start ([`StartError`]). The bottom of the
//! server's layers: it holds the services (`crate::pubsub`,
//! `crate::tracking`, `crate::memory`…) and imports no command or
//! connection code (`docs/ARCHITECTURE.md`, *The server's layers*).

use std::sync::atomic::{AtomicU64, AtomicUsize};
use std::sync::Arc;
use std::time::Instant;

use crate::config::Config;
use crate::persistence::Persistence;

/// State every connection of the node shares.
pub struct Shared {
    /// The resolved configuration.
    pub config: Config,
    /// When the node started.
    pub started: Instant,
    /// Connected clients now.
    pub clients: AtomicUsize,
    /// Connections accepted since start.
    pub total_connections: AtomicU64,
    /// Commands processed since start.
    pub total_commands: AtomicU64,
    /// Connections refused by `maxclients`.
    pub rejected: AtomicU64,
    /// Connections moved to the worker keeping their keys (`crate::conn`,
    /// *Moving to the keys' worker*; INFO transactions' `clients_moved`).
    pub clients_moved: AtomicU64,
    /// Next CLIENT ID.
    pub next_client_id: AtomicU64,
    /// Snapshots and recovery.
    pub persistence: Arc<Persistence>,
    /// The replication service, when the node has peers.
    pub cluster: Option<Arc<elsa_cluster::Cluster>>,
    /// Rung when a client of this node wrote a list or a sorted set:
    /// clients blocked in BLPOP, BZPOPMIN and their relatives try again
    /// (`conn::blocking`).
    pub pushes: tokio::sync::Notify,
    /// Pub/sub subscriptions of this node's connections.
    pub pubsub: Arc<crate::pubsub::Registry>,
    /// Keyspace notifications' switch (`notify-keyspace-events`), shared
    /// with the shards and the coordinator, which raise the events.
    pub notifier: Arc<elsa_shard::notify::Notifier>,
    /// CLIENT TRACKING's tables; every shard tells it of its changes.
    pub tracking: Arc<crate::tracking::Tracking>,
    /// Lua scripting: the script cache, the script threads and the scripts
    /// running now (`crate::script`).
    pub scripts: crate::script::Scripts,
    /// ACL users and log (`crate::acl`).
    pub acl: Arc<crate::acl::Acl>,
    /// Client TLS: its settings and the configuration new TLS connections
    /// get (`CONFIG SET tls-*` swaps it).
    pub tls: crate::tls::Tls,
    /// Introspection (`crate::cmdstats`, `crate::slowlog`, `crate::latency`,
    /// `crate::runtime`, `crate::rates`): command statistics per worker,
    /// the slow log, the latency monitor, runtime settings, sampled rates.
    pub cmdstats: crate::cmdstats::CmdStats,
    pub slowlog: crate::slowlog::SlowLog,
    pub latency: crate::latency::Latency,
    pub runtime: crate::runtime::Runtime,
    pub rates: crate::rates::Rates,
    /// Memory use, `maxmemory` and eviction (`crate::memory`).
    pub memory: Arc<crate::memory::Memory>,
    /// Every connection (CLIENT LIST/KILL, MONITOR, CLIENT PAUSE,
    /// SHUTDOWN's request: `crate::clients`).
    pub conns: Arc<crate::clients::Registry>,
}

/// Why a node could not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error(transparent)]
    Config(#[from] crate::config::ConfigError),
    #[error("ACL: {0}")]
    Acl(String),
    #[error("cannot create data dir {0}: {1}")]
    DataDir(String, std::io::Error),
    #[error("cannot listen on {0}: {1}")]
    Listen(String, std::io::Error),
    #[error("cannot start worker thread: {0}")]
    Thread(std::io::Error),
    #[error("runtime: {0}")]
    Runtime(std::io::Error),
    #[error("recovery failed: {0}")]
    Recover(#[from] elsa_shard::wal::files::RecoverError),
    #[error("cannot open a log segment in {0}: {1}")]
    Segment(String, std::io::Error),
    #[error("cannot listen for peers on {0}: {1}")]
    Peer(String, std::io::Error),
    #[error("TLS: {0}")]
    Tls(String),
    #[error("function libraries: {0}")]
    Functions(String),
    #[error("port and tls-port are both 0: nothing to listen on")]
    NoListener,
}

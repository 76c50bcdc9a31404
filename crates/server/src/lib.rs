//! Elsa's node: everything between a TCP socket and the shards.
//!
//! - [`config`]: embedded defaults, `elsa.toml`, `ELSA_*`, flags.
//! - [`node`]: worker threads (one shard each) and the acceptor.
//! - [`conn`]: one client connection — read, batch, run, reply.
//! - [`resp`]: the RESP2/RESP3 codec.
//! - [`cmd`]: the command table and the data commands' parsers.
//! - `session`: transactions, MULTI/EXEC/WATCH, AUTH, HELLO.
//! - `effects`: what a transaction does outside the key space (a script's
//!   PUBLISH, a scripted EXEC's CLIENT/CONFIG…), taken once it commits.
//! - `txn_keyspace`: KEYS, SCAN, DBSIZE, RANDOMKEY inside a transaction,
//!   with its own writes laid over the shards' answer.
//! - `admin`, `info`: server and keyspace commands, INFO, CONFIG GET.
//! - [`cmdstats`], [`slowlog`], [`latency`], [`runtime`], `rates`, `intro`:
//!   introspection — command statistics, SLOWLOG, LATENCY, CONFIG SET's
//!   runtime parameters, sampled rates, COMMAND DOCS/GETKEYS.
//! - `replication`: INFO replication, WAITREGION, ELSA.DIGEST, ELSA.FAULT.
//! - [`pubsub`]: channels and patterns, subscribers' queues, PUBLISH.
//! - [`clients`]: the registry of connections; CLIENT LIST/KILL/PAUSE/…,
//!   MONITOR, SHUTDOWN.
//! - [`acl`]: users, passwords and permissions (ACL, AUTH), protected mode.
//! - `script`: Lua scripting (EVAL, EVALSHA, SCRIPT) on script threads.
//! - `http`: the metrics port — Prometheus `/metrics` and the status page;
//!
//! Per-key semantics live in `elsa-shard` (`Op`), commit protocols in
//! `elsa-txn`; this crate only parses, routes and encodes.

pub mod acl;
mod admin;
pub mod clients;
mod cluster_cmd;
pub mod cmd;
pub mod cmdstats;
mod command_cmd;
pub mod config;
pub mod conn;
mod dump;
mod effects;
mod http;
mod info;
mod info_sections;
mod intro;
pub mod latency;
pub mod memory;
pub mod node;
pub mod persistence;
pub mod pubsub;
mod rates;
mod recovery;
mod replication;
pub mod resp;
pub mod runtime;
mod script;
mod session;
pub mod slowlog;
mod sort;
pub mod state;
pub mod tls;
pub mod tracking;
mod txn_keyspace;

/// The `lua_script` fuzz target's entry point (`fuzz/`): scripts run on a
/// script thread's Lua state, their calls answered with canned replies.
#[doc(hidden)]
pub use script::fuzzing as script_fuzzing;

/// The Redis version whose commands and replies Elsa follows (clients
/// read it from INFO and HELLO to pick features).
pub const REDIS_COMPAT_VERSION: &str = "7.0.0";

/// Resolves the configuration and runs a node until SIGINT/SIGTERM.
pub fn run(args: config::ServerArgs) -> Result<(), state::StartError> {
    let config = config::Config::resolve(&args)?;
    node::run(config)
}

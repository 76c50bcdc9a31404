//! Configuration: embedded defaults, then `--config elsa.toml`, then `ELSA_*`
//! environment variables, then command-line flags — the later wins. The same
//! kebab-case names work in the file (`data-dir = "…"`), as variables
//! (`ELSA_DATA_DIR`) and as flags (`--data-dir`).

use std::net::SocketAddr;
use std::path::PathBuf;

use elsa_txn::Isolation;
use serde::Deserialize;

mod keys;
mod values;

pub use keys::Keys;
pub use values::{parse_memory, parse_percentiles};

/// The defaults, as a TOML file compiled into the binary: `elsa server`
/// with no configuration at all runs exactly this.
pub const DEFAULT_CONFIG: &str = include_str!("../../elsa.default.toml");

/// `elsa server` flags: a config file, plus every key of it.
#[derive(clap::Args, Debug, Default, Clone)]
pub struct ServerArgs {
    /// A TOML file with any of the keys below (kebab-case).
    #[arg(long, env = "ELSA_CONFIG")]
    pub config: Option<PathBuf>,
    /// The configuration keys.
    #[command(flatten)]
    pub keys: Keys,
}

/// The resolved configuration of a node.
#[derive(Debug, Clone)]
pub struct Config {
    /// Client address.
    pub addr: SocketAddr,
    /// Data directory.
    pub data_dir: PathBuf,
    /// Worker threads = shards.
    pub workers: usize,
    /// Password, if any.
    pub requirepass: Option<String>,
    /// ACL file, protected mode, new users' channels, ACL LOG length.
    pub acl: crate::acl::Settings,
    /// Connection limit.
    pub maxclients: usize,
    /// Longest bulk string.
    pub proto_max_bulk_len: usize,
    /// Most arguments per command.
    pub max_args: usize,
    /// Numbered databases (SELECT 0 to databases - 1).
    pub databases: usize,
    /// Idle seconds before a client is closed (`timeout`; 0 = never).
    pub timeout: u64,
    /// Output buffer limit per client (hard; 0 = none).
    pub client_output_buffer_limit: usize,
    /// Past this many unsent bytes (0 = never) for longer than
    /// `client_output_soft_secs`, a client is disconnected too.
    pub client_output_soft_limit: usize,
    pub client_output_soft_secs: u64,
    /// Output limit of subscribed clients.
    pub pubsub_output_limit: crate::pubsub::Limit,
    /// Largest unparsed input of one client (`client-query-buffer-limit`).
    pub client_query_buffer_limit: usize,
    /// The `tls-*` settings as given at startup (`crate::tls`).
    pub tls: crate::tls::TlsSettings,
    /// Default isolation level.
    pub default_isolation: Isolation,
    /// Default acknowledgement level (`replication = 2pc` makes it `all`).
    pub default_ack: elsa_shard::AckLevel,
    /// Node id.
    pub node_id: u32,
    /// Merge epoch.
    pub merge_epoch_ms: u64,
    /// Log fsync policy.
    pub appendfsync: elsa_shard::wal::Fsync,
    /// Automatic snapshot period (0 = off).
    pub snapshot_interval_sec: u64,
    /// The file the node was started with (`--config`), which CONFIG
    /// REWRITE rewrites.
    pub config_file: Option<PathBuf>,
    /// SLOWLOG and LATENCY settings as given at startup (`crate::runtime`
    /// holds the ones CONFIG SET changes).
    pub introspection: Startup,
    /// Lua scripts: ms before other clients get -BUSY (`script`).
    pub busy_reply_threshold: u64,
    /// The metrics port (`crate::http`; 0 = off).
    pub metrics_port: u16,
    /// Worker i's own client port is this + i (`crate::cluster_cmd`; 0 = off).
    pub worker_port_base: u16,
    /// Lone commands in a row for another worker's shard after which a
    /// connection moves there (`crate::conn`, *Moving to the keys'
    /// worker*; 0 = never).
    pub worker_move_after: u32,
    /// Keyspace notification classes at start (`elsa_shard::notify`;
    /// CONFIG SET changes the node's `Notifier`).
    pub notify_keyspace_events: u32,
    /// Memory limit and eviction at start (`crate::memory`; CONFIG SET
    /// changes the live values in `Shared::memory`).
    pub memory: MemorySettings,
    /// Redis's encoding thresholds at start (CONFIG SET changes them).
    pub encodings: Encodings,
    /// Region and peers.
    pub cluster: ClusterKeys,
}

/// The introspection settings as the configuration gave them at startup.
#[derive(Debug, Clone)]
pub struct Startup {
    pub slowlog_log_slower_than: i64,
    pub slowlog_max_len: u64,
    pub latency_monitor_threshold: u64,
    pub latency_tracking: bool,
    pub latency_tracking_info_percentiles: Vec<f64>,
}

/// Redis's encoding thresholds (`elsa_shard::ops::limits`):
/// `hash-max-listpack-entries`, `hash-max-listpack-value`,
/// `set-max-intset-entries`, `zset-max-listpack-entries`,
/// `zset-max-listpack-value`, `list-max-listpack-size`,
/// `list-compress-depth`, `stream-node-max-entries`,
/// `stream-node-max-bytes`, in that order; `hll-sparse-max-bytes`
/// (`elsa_shard::ops::pf`); `tracking-table-max-keys`
/// (`crate::tracking`), another process-wide limit; and
/// `stream-read-horizon` (`elsa_shard::ops::streams`).
#[derive(Debug, Clone, Copy)]
pub struct Encodings {
    pub hash_entries: u64,
    pub hash_value: u64,
    pub set_intset_entries: u64,
    pub zset_entries: u64,
    pub zset_value: u64,
    pub list_size: i64,
    pub list_compress_depth: i64,
    pub stream_node_entries: u64,
    pub stream_node_bytes: u64,
    pub hll_sparse_max_bytes: u64,
    pub tracking_table_max_keys: u64,
    /// `stream-read-horizon immediate`.
    pub stream_read_immediate: bool,
}

impl Encodings {
    /// Makes them the thresholds in force.
    pub fn apply(&self) {
        use elsa_shard::ops::limits::*;
        use std::sync::atomic::Ordering::Relaxed;
        let size = |n: u64| usize::try_from(n).unwrap_or(usize::MAX);
        HASH_ENTRIES.store(size(self.hash_entries), Relaxed);
        HASH_VALUE.store(size(self.hash_value), Relaxed);
        SET_INTSET_ENTRIES.store(size(self.set_intset_entries), Relaxed);
        ZSET_ENTRIES.store(size(self.zset_entries), Relaxed);
        ZSET_VALUE.store(size(self.zset_value), Relaxed);
        LIST_SIZE.store(self.list_size, Relaxed);
        LIST_COMPRESS_DEPTH.store(self.list_compress_depth, Relaxed);
        STREAM_NODE_ENTRIES.store(size(self.stream_node_entries), Relaxed);
        STREAM_NODE_BYTES.store(size(self.stream_node_bytes), Relaxed);
        elsa_shard::ops::pf::SPARSE_MAX_BYTES.store(size(self.hll_sparse_max_bytes), Relaxed);
        crate::tracking::MAX_KEYS.store(self.tracking_table_max_keys, Relaxed);
        elsa_shard::ops::streams::set_read_immediate(self.stream_read_immediate);
    }
}

/// The resolved memory settings.
#[derive(Debug, Clone)]
pub struct MemorySettings {
    /// `maxmemory` in bytes (0 = none).
    pub maxmemory: u64,
    /// `maxmemory-policy`.
    pub policy: elsa_shard::evict::Policy,
    /// `maxmemory-samples`.
    pub samples: u32,
    /// `lfu-log-factor`.
    pub lfu_log_factor: u32,
    /// `lfu-decay-time`.
    pub lfu_decay_time: u32,
}

/// The resolved region and peer settings.
#[derive(Debug, Clone)]
pub struct ClusterKeys {
    /// Region name.
    pub region: String,
    /// Peer port (0 = standalone).
    pub peer_port: u16,
    /// Seeds.
    pub seeds: Vec<String>,
    /// Virtual nodes per shard.
    pub vnodes: u32,
    /// Replicas per region.
    pub replication_factor: usize,
    /// Nodes of the region when it first forms (0 = every seed seen).
    pub region_nodes: usize,
    /// Request routing.
    pub routing: elsa_cluster::Routing,
    /// Cross-region mode.
    pub replication: elsa_cluster::Replication,
    /// Who decides a slot's owner inside the region.
    pub ownership: elsa_cluster::Ownership,
    /// Anti-entropy period.
    pub anti_entropy_ms: u64,
    /// Tombstone age limit.
    pub tombstone_ttl_sec: u64,
    /// Emulated one-way WAN delay.
    pub wan_delay_ms: u64,
    /// Emulated WAN loss, percent.
    pub wan_loss: f64,
    /// ELSA.FAULT allowed.
    pub fault_injection: bool,
    /// PUBLISH reaches other regions.
    pub pubsub_across_regions: bool,
    /// The cluster secret (TLS and authentication on every peer link).
    pub secret: Option<elsa_cluster::peer_auth::Secret>,
    /// Plaintext peers allowed beyond loopback.
    pub peer_insecure: bool,
    /// Largest lead of a peer's timestamps over this node's clock, ms.
    pub max_clock_drift_ms: u64,
}

/// `client-output-buffer-limit` as given: a number in TOML, a string in
/// TOML or on the command line.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OutputLimit(String);

impl std::str::FromStr for OutputLimit {
    type Err = String;
    fn from_str(s: &str) -> Result<OutputLimit, String> {
        let o = OutputLimit(s.to_string());
        o.limit()?;
        Ok(o)
    }
}

impl<'de> Deserialize<'de> for OutputLimit {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<OutputLimit, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Raw {
            Bytes(u64),
            Text(String),
        }
        Ok(OutputLimit(match Raw::deserialize(d)? {
            Raw::Bytes(n) => n.to_string(),
            Raw::Text(s) => s,
        }))
    }
}

impl OutputLimit {
    /// Hard and soft limits: `536870912` or `512mb` (hard only), or
    /// Redis's `normal <hard> <soft> <soft-seconds>` (the class word is
    /// optional; only `normal` applies here, pub/sub has its own key).
    pub fn limit(&self) -> Result<crate::pubsub::Limit, String> {
        let words: Vec<&str> = self.0.split_whitespace().collect();
        let words = match words.split_first() {
            Some((class, rest)) if class.eq_ignore_ascii_case("normal") => rest,
            _ => &words[..],
        };
        match words {
            [hard] => format!("{hard} 0 0").parse(),
            [_, _, _] => words.join(" ").parse(),
            _ => Err(format!(
                "'{}' (a size, or \"[normal] <hard> <soft> <soft-seconds>\")",
                self.0
            )),
        }
    }
}

/// A configuration problem, reported at startup.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read config file {0}: {1}")]
    Read(PathBuf, std::io::Error),
    #[error("bad config file {0}: {1}")]
    Parse(String, toml::de::Error),
    #[error("bad value for {0}: {1}")]
    Value(&'static str, String),
}

/// A memory value in the file: a number of bytes or a string ("100mb").
fn memory_value<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Value {
        Bytes(u64),
        Text(String),
    }
    Ok(Some(match Value::deserialize(d)? {
        Value::Bytes(n) => n.to_string(),
        Value::Text(s) => s,
    }))
}

fn need<T>(v: Option<T>, name: &'static str) -> Result<T, ConfigError> {
    v.ok_or(ConfigError::Value(name, "missing".into()))
}

fn parse_file(name: &str, text: &str) -> Result<Keys, ConfigError> {
    toml::from_str(text).map_err(|e| ConfigError::Parse(name.to_string(), e))
}

/// The cluster secret, and whether plaintext peers beyond loopback were
/// asked for: peers that listen beyond loopback need one or the other.
fn peer_security(
    c: &Keys,
    ip: std::net::IpAddr,
) -> Result<(Option<elsa_cluster::peer_auth::Secret>, bool), ConfigError> {
    use elsa_cluster::peer_auth::Secret;
    let secret = match (
        c.cluster_secret.as_deref().filter(|s| !s.is_empty()),
        &c.cluster_secret_file,
    ) {
        (Some(_), Some(_)) => {
            return Err(ConfigError::Value(
                "cluster-secret",
                "set cluster-secret or cluster-secret-file, not both".into(),
            ))
        }
        (Some(s), None) => Some(
            Secret::new(s.as_bytes().to_vec())
                .map_err(|e| ConfigError::Value("cluster-secret", e))?,
        ),
        (None, Some(f)) => {
            Some(Secret::from_file(f).map_err(|e| ConfigError::Value("cluster-secret-file", e))?)
        }
        (None, None) => None,
    };
    let insecure = need(c.peer_insecure, "peer-insecure")?;
    let peers = c.peer_port.unwrap_or(0) != 0;
    if peers && secret.is_none() && !insecure && !ip.is_loopback() {
        return Err(ConfigError::Value(
            "cluster-secret",
            format!(
                "peers would listen on {ip}, beyond loopback, with neither authentication nor \
                 encryption: set cluster-secret-file (a file of at least 16 random bytes, \
                 mode 600, the same on every node; `elsa cluster up` makes one), or \
                 peer-insecure true to accept that risk"
            ),
        ));
    }
    Ok((secret, insecure))
}

impl Config {
    /// Resolves defaults, file, environment and flags (in that order).
    pub fn resolve(args: &ServerArgs) -> Result<Config, ConfigError> {
        let mut c = parse_file("(embedded defaults)", DEFAULT_CONFIG)?;
        if let Some(path) = &args.config {
            let text =
                std::fs::read_to_string(path).map_err(|e| ConfigError::Read(path.clone(), e))?;
            let file = parse_file(&path.display().to_string(), &text)?;
            c.overlay(&file);
        }
        // clap already merged environment and flags (flags win).
        c.overlay(&args.keys);

        let bind = need(c.bind.clone(), "bind")?;
        let port = need(c.port, "port")?;
        let ip: std::net::IpAddr = bind
            .parse()
            .map_err(|_| ConfigError::Value("bind", format!("'{bind}' is not an IP address")))?;
        let workers = match need(c.workers, "workers")? {
            0 => std::thread::available_parallelism().map_or(1, |n| n.get()),
            n if n > 256 => {
                return Err(ConfigError::Value("workers", format!("{n} (at most 256)")))
            }
            n => n,
        };
        let (secret, peer_insecure) = peer_security(&c, ip)?;
        let iso = need(c.default_isolation, "default-isolation")?;
        let default_isolation = iso
            .parse()
            .map_err(|e| ConfigError::Value("default-isolation", e))?;
        let ack: elsa_shard::AckLevel = need(c.ack, "ack")?
            .parse()
            .map_err(|e| ConfigError::Value("ack", e))?;
        let replication: elsa_cluster::Replication = need(c.replication, "replication")?
            .parse()
            .map_err(|e| ConfigError::Value("replication", e))?;
        // 2pc mode: every commit waits for every region, as before levels.
        let default_ack = if replication == elsa_cluster::Replication::TwoPc {
            elsa_shard::AckLevel::All
        } else {
            ack
        };
        let merge_epoch_ms = need(c.merge_epoch_ms, "merge-epoch-ms")?;
        if !(10..=10_000).contains(&merge_epoch_ms) {
            return Err(ConfigError::Value(
                "merge-epoch-ms",
                format!("{merge_epoch_ms} (must be 10..=10000)"),
            ));
        }
        let node_id = need(c.node_id, "node-id")?;
        // Transaction ids put the node id above 40 counter bits, below the
        // flag bit `elsa_shard::msg::SHADOW`.
        if node_id >= 1 << 23 {
            return Err(ConfigError::Value(
                "node-id",
                format!("{node_id} (must be below 8388608)"),
            ));
        }
        let output_limit = need(c.client_output_buffer_limit, "client-output-buffer-limit")?
            .limit()
            .map_err(|e| ConfigError::Value("client-output-buffer-limit", e))?;
        Ok(Config {
            addr: SocketAddr::new(ip, port),
            data_dir: need(c.data_dir, "data-dir")?,
            workers,
            requirepass: c.requirepass.clone().filter(|p| !p.is_empty()),
            acl: crate::acl::Settings {
                file: c
                    .aclfile
                    .filter(|f| !f.is_empty())
                    .map(std::path::PathBuf::from),
                allchannels_default: match need(c.acl_pubsub_default, "acl-pubsub-default")?
                    .as_str()
                {
                    "allchannels" => true,
                    "resetchannels" => false,
                    v => {
                        return Err(ConfigError::Value(
                            "acl-pubsub-default",
                            format!("'{v}' (allchannels or resetchannels)"),
                        ))
                    }
                },
                log_max_len: need(c.acllog_max_len, "acllog-max-len")?,
                protected_mode: need(c.protected_mode, "protected-mode")?,
                requirepass: c.requirepass.filter(|p| !p.is_empty()),
            },
            maxclients: need(c.maxclients, "maxclients")?,
            proto_max_bulk_len: need(c.proto_max_bulk_len, "proto-max-bulk-len")?,
            max_args: need(c.max_args, "max-args")?,
            timeout: need(c.timeout, "timeout")?,
            databases: match need(c.databases, "databases")? {
                n @ 1..=256 => n,
                n => {
                    return Err(ConfigError::Value(
                        "databases",
                        format!("{n} (must be 1 to 256)"),
                    ))
                }
            },
            client_output_buffer_limit: output_limit.hard,
            client_output_soft_limit: output_limit.soft,
            client_output_soft_secs: output_limit.soft_secs,
            pubsub_output_limit: need(
                c.client_output_buffer_limit_pubsub,
                "client-output-buffer-limit-pubsub",
            )?
            .parse()
            .map_err(|e| ConfigError::Value("client-output-buffer-limit-pubsub", e))?,
            client_query_buffer_limit: need(
                c.client_query_buffer_limit,
                "client-query-buffer-limit",
            )?,
            tls: crate::tls::TlsSettings {
                port: need(c.tls_port, "tls-port")?,
                cert_file: c.tls_cert_file.unwrap_or_default(),
                key_file: c.tls_key_file.unwrap_or_default(),
                ca_cert_file: c.tls_ca_cert_file.unwrap_or_default(),
                auth_clients: match need(c.tls_auth_clients, "tls-auth-clients")?
                    .to_ascii_lowercase()
                    .as_str()
                {
                    v @ ("yes" | "no" | "optional") => v.to_string(),
                    v => {
                        return Err(ConfigError::Value(
                            "tls-auth-clients",
                            format!("'{v}' (yes, no or optional)"),
                        ))
                    }
                },
                protocols: c.tls_protocols.unwrap_or_default(),
                ciphersuites: c.tls_ciphersuites.unwrap_or_default(),
                ciphers: c.tls_ciphers.unwrap_or_default(),
            },
            default_isolation,
            default_ack,
            node_id,
            merge_epoch_ms,
            appendfsync: need(c.appendfsync, "appendfsync")?
                .parse()
                .map_err(|e| ConfigError::Value("appendfsync", e))?,
            snapshot_interval_sec: need(c.snapshot_interval_sec, "snapshot-interval-sec")?,
            busy_reply_threshold: need(c.busy_reply_threshold, "busy-reply-threshold")?,
            config_file: args.config.clone(),
            introspection: Startup {
                slowlog_log_slower_than: need(
                    c.slowlog_log_slower_than,
                    "slowlog-log-slower-than",
                )?,
                slowlog_max_len: need(c.slowlog_max_len, "slowlog-max-len")?,
                latency_monitor_threshold: need(
                    c.latency_monitor_threshold,
                    "latency-monitor-threshold",
                )?,
                latency_tracking: need(c.latency_tracking, "latency-tracking")?,
                latency_tracking_info_percentiles: parse_percentiles(&need(
                    c.latency_tracking_info_percentiles,
                    "latency-tracking-info-percentiles",
                )?)
                .map_err(|e| ConfigError::Value("latency-tracking-info-percentiles", e))?,
            },
            metrics_port: need(c.metrics_port, "metrics-port")?,
            worker_port_base: need(c.worker_port_base, "worker-port-base")?,
            worker_move_after: need(c.worker_move_after, "worker-move-after")?,
            notify_keyspace_events: {
                let v = need(c.notify_keyspace_events, "notify-keyspace-events")?;
                elsa_shard::notify::parse_flags(&v).ok_or_else(|| {
                    ConfigError::Value(
                        "notify-keyspace-events",
                        format!("'{v}' (Redis's classes: K E g $ l s h z x e t m d n A)"),
                    )
                })?
            },
            memory: MemorySettings {
                maxmemory: {
                    let v = need(c.maxmemory, "maxmemory")?;
                    parse_memory(&v).ok_or_else(|| {
                        ConfigError::Value(
                            "maxmemory",
                            format!("'{v}' (a memory value: 100mb, 2gb, bytes)"),
                        )
                    })?
                },
                policy: {
                    let v = need(c.maxmemory_policy, "maxmemory-policy")?;
                    elsa_shard::evict::Policy::parse(&v).ok_or_else(|| {
                        ConfigError::Value("maxmemory-policy", format!("'{v}' (noeviction, allkeys-lru, allkeys-lfu, allkeys-random, volatile-lru, volatile-lfu, volatile-random or volatile-ttl)"))
                    })?
                },
                samples: match need(c.maxmemory_samples, "maxmemory-samples")? {
                    0 => {
                        return Err(ConfigError::Value(
                            "maxmemory-samples",
                            "0 (at least 1)".into(),
                        ))
                    }
                    n => n,
                },
                lfu_log_factor: need(c.lfu_log_factor, "lfu-log-factor")?,
                lfu_decay_time: need(c.lfu_decay_time, "lfu-decay-time")?,
            },
            encodings: Encodings {
                hash_entries: need(c.hash_max_listpack_entries, "hash-max-listpack-entries")?,
                hash_value: need(c.hash_max_listpack_value, "hash-max-listpack-value")?,
                set_intset_entries: need(c.set_max_intset_entries, "set-max-intset-entries")?,
                zset_entries: need(c.zset_max_listpack_entries, "zset-max-listpack-entries")?,
                zset_value: need(c.zset_max_listpack_value, "zset-max-listpack-value")?,
                list_size: need(c.list_max_listpack_size, "list-max-listpack-size")?,
                list_compress_depth: need(c.list_compress_depth, "list-compress-depth")?,
                stream_node_entries: need(c.stream_node_max_entries, "stream-node-max-entries")?,
                stream_node_bytes: need(c.stream_node_max_bytes, "stream-node-max-bytes")?,
                hll_sparse_max_bytes: need(c.hll_sparse_max_bytes, "hll-sparse-max-bytes")?,
                tracking_table_max_keys: need(
                    c.tracking_table_max_keys,
                    "tracking-table-max-keys",
                )?,
                stream_read_immediate: {
                    let v = need(c.stream_read_horizon, "stream-read-horizon")?;
                    read_immediate(&v).ok_or_else(|| {
                        ConfigError::Value(
                            "stream-read-horizon",
                            format!("'{v}' (converged or immediate)"),
                        )
                    })?
                },
            },
            cluster: ClusterKeys {
                region: need(c.region, "region")?,
                peer_port: need(c.peer_port, "peer-port")?,
                seeds: need(c.seeds, "seeds")?,
                vnodes: match need(c.vnodes, "vnodes")? {
                    v @ 1..=4096 => v,
                    v => {
                        return Err(ConfigError::Value(
                            "vnodes",
                            format!("{v} (must be 1..=4096)"),
                        ))
                    }
                },
                replication_factor: match need(c.replication_factor, "replication-factor")? {
                    0 => {
                        return Err(ConfigError::Value(
                            "replication-factor",
                            "0 (at least 1)".into(),
                        ))
                    }
                    n => n,
                },
                region_nodes: need(c.region_nodes, "region-nodes")?,
                routing: need(c.routing, "routing")?
                    .parse()
                    .map_err(|e| ConfigError::Value("routing", e))?,
                replication,
                ownership: need(c.ownership, "ownership")?
                    .parse()
                    .map_err(|e| ConfigError::Value("ownership", e))?,
                anti_entropy_ms: match need(c.anti_entropy_ms, "anti-entropy-ms")? {
                    v @ 10..=600_000 => v,
                    v => {
                        return Err(ConfigError::Value(
                            "anti-entropy-ms",
                            format!("{v} (must be 10..=600000)"),
                        ))
                    }
                },
                tombstone_ttl_sec: need(c.tombstone_ttl_sec, "tombstone-ttl-sec")?,
                wan_delay_ms: need(c.wan_delay_ms, "wan-delay-ms")?,
                wan_loss: match need(c.wan_loss, "wan-loss")? {
                    v if (0.0..=100.0).contains(&v) => v,
                    v => {
                        return Err(ConfigError::Value(
                            "wan-loss",
                            format!("{v} (percent, 0..=100)"),
                        ))
                    }
                },
                fault_injection: need(c.fault_injection, "fault-injection")?,
                pubsub_across_regions: need(c.pubsub_across_regions, "pubsub-across-regions")?,
                secret,
                peer_insecure,
                max_clock_drift_ms: match need(c.max_clock_drift_ms, "max-clock-drift-ms")? {
                    v @ 1..=3_600_000 => v,
                    v => {
                        return Err(ConfigError::Value(
                            "max-clock-drift-ms",
                            format!("{v} (must be 1..=3600000)"),
                        ))
                    }
                },
            },
        })
    }
}

/// `stream-read-horizon`'s value: true for `immediate`, false for
/// `converged`, None for anything else.
pub fn read_immediate(v: &str) -> Option<bool> {
    match v.to_ascii_lowercase().as_str() {
        "immediate" => Some(true),
        "converged" => Some(false),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_need_no_input() {
        let c = Config::resolve(&ServerArgs::default()).unwrap();
        assert_eq!(c.addr.to_string(), "127.0.0.1:6379");
        assert_eq!(c.data_dir, PathBuf::from("./elsa-data"));
        assert!(c.workers >= 1);
        assert_eq!(c.default_isolation, Isolation::Snapshot);
    }

    #[test]
    fn peers_beyond_loopback_need_a_secret_or_an_explicit_opt_out() {
        let mut args = ServerArgs::default();
        args.keys.bind = Some("10.1.2.3".into());
        args.keys.peer_port = Some(7100);
        let err = Config::resolve(&args).unwrap_err().to_string();
        assert!(err.contains("cluster-secret"), "{err}");
        args.keys.peer_insecure = Some(true);
        assert!(Config::resolve(&args).is_ok());
        args.keys.peer_insecure = None;
        args.keys.cluster_secret = Some("short".into());
        assert!(Config::resolve(&args).is_err(), "a short secret");
        args.keys.cluster_secret = Some("0123456789abcdef0123".into());
        let c = Config::resolve(&args).unwrap();
        assert!(c.cluster.secret.is_some());
        assert!(
            !format!("{c:?}").contains("0123456789abcdef"),
            "the secret is never printed"
        );
        // Loopback without a secret: plaintext, for development.
        args.keys.cluster_secret = None;
        args.keys.bind = Some("127.0.0.1".into());
        assert!(Config::resolve(&args).unwrap().cluster.secret.is_none());
    }

    #[test]
    fn a_secret_file_others_can_read_is_refused() {
        use std::os::unix::fs::PermissionsExt;
        let dir = std::env::temp_dir().join(format!("elsa-secret-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let f = dir.join("secret");
        std::fs::write(&f, "0123456789abcdef0123456789abcdef\n").unwrap();
        std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o644)).unwrap();
        let mut args = ServerArgs::default();
        args.keys.cluster_secret_file = Some(f.clone());
        let err = Config::resolve(&args).unwrap_err().to_string();
        assert!(err.contains("readable by other users"), "{err}");
        std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o600)).unwrap();
        assert!(Config::resolve(&args).unwrap().cluster.secret.is_some());
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn output_limit_as_a_size_or_as_redis_spells_it() {
        let l = |s: &str| s.parse::<OutputLimit>().and_then(|o| o.limit());
        assert_eq!(l("10485760").unwrap().hard, 10485760);
        assert_eq!(l("10mb").unwrap().hard, 10 * 1024 * 1024);
        let r = l("normal 64mb 16mb 30").unwrap();
        assert_eq!((r.hard, r.soft, r.soft_secs), (64 << 20, 16 << 20, 30));
        assert_eq!(l("0 0 0").unwrap().hard, 0);
        assert!(l("normal 1 2").is_err());
        assert!(l("lots").is_err());
        let k: Keys = toml::from_str("client-output-buffer-limit = 100\n").unwrap();
        assert_eq!(
            k.client_output_buffer_limit.unwrap().limit().unwrap().hard,
            100
        );
        let k: Keys = toml::from_str("client-output-buffer-limit = \"normal 1mb 0 0\"\n").unwrap();
        assert_eq!(
            k.client_output_buffer_limit.unwrap().limit().unwrap().hard,
            1 << 20
        );
    }

    #[test]
    fn file_then_flags() {
        let dir = std::env::temp_dir().join(format!("elsa-cfg-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let f = dir.join("elsa.toml");
        std::fs::write(&f, "port = 7000\nworkers = 3\ndefault-isolation = \"RR\"\n").unwrap();
        let args = ServerArgs {
            config: Some(f.clone()),
            keys: Keys {
                port: Some(7001),
                ..Default::default()
            },
        };
        let c = Config::resolve(&args).unwrap();
        assert_eq!(c.addr.port(), 7001, "flag beats file");
        assert_eq!(c.workers, 3, "file beats default");
        assert_eq!(c.default_isolation, Isolation::RepeatableRead);
        std::fs::write(&f, "prot = 1\n").unwrap();
        assert!(Config::resolve(&args).is_err(), "unknown keys are refused");
        std::fs::remove_dir_all(dir).unwrap();
    }
}

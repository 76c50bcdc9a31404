//! Every configuration key, as flags, `ELSA_*` variables and the TOML
//! file's schema at once, and how a later source overlays an earlier one.

use std::path::PathBuf;

use serde::Deserialize;

use super::*;

/// Every configuration key. The one struct serves as flags (each also read
/// from `ELSA_<NAME>`) and as the TOML file's schema, so the two can't drift.
#[derive(clap::Args, Deserialize, Debug, Default, Clone)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub struct Keys {
    /// TCP port for clients.
    #[arg(long, env = "ELSA_PORT")]
    pub port: Option<u16>,
    /// Address to bind (loopback unless told otherwise).
    #[arg(long, env = "ELSA_BIND")]
    pub bind: Option<String>,
    /// Where the node keeps its files.
    #[arg(long, env = "ELSA_DATA_DIR")]
    pub data_dir: Option<PathBuf>,
    /// Shard worker threads (0 = one per core).
    #[arg(long, env = "ELSA_WORKERS")]
    pub workers: Option<usize>,
    /// Password clients must AUTH with.
    #[arg(long, env = "ELSA_REQUIREPASS")]
    pub requirepass: Option<String>,
    /// ACL file (Redis's format): users loaded at start and by ACL LOAD,
    /// written by ACL SAVE ("" = none).
    #[arg(long, env = "ELSA_ACLFILE")]
    pub aclfile: Option<String>,
    /// Refuse clients from outside loopback while the default user has no
    /// password.
    #[arg(long, env = "ELSA_PROTECTED_MODE")]
    pub protected_mode: Option<bool>,
    /// Channels a new ACL user may use: resetchannels (none) or allchannels.
    #[arg(long, env = "ELSA_ACL_PUBSUB_DEFAULT")]
    pub acl_pubsub_default: Option<String>,
    /// Most ACL LOG entries kept.
    #[arg(long, env = "ELSA_ACLLOG_MAX_LEN")]
    pub acllog_max_len: Option<usize>,
    /// Most simultaneous client connections.
    #[arg(long, env = "ELSA_MAXCLIENTS")]
    pub maxclients: Option<usize>,
    /// Longest bulk string a client may send, in bytes.
    #[arg(long, env = "ELSA_PROTO_MAX_BULK_LEN")]
    pub proto_max_bulk_len: Option<usize>,
    /// Most arguments in one command.
    #[arg(long, env = "ELSA_MAX_ARGS")]
    pub max_args: Option<usize>,
    /// Seconds a client may stay idle before the node closes it (Redis's
    /// `timeout`; 0 = never; subscribers and monitors are exempt).
    #[arg(long, env = "ELSA_TIMEOUT")]
    pub timeout: Option<u64>,
    /// Numbered databases SELECT offers (1 to 256).
    #[arg(long, env = "ELSA_DATABASES")]
    pub databases: Option<usize>,
    /// Unsent reply bytes after which a client is disconnected: a size
    /// (`536870912`, `512mb`; 0 = none), or Redis's `[normal] <hard>
    /// <soft> <soft-seconds>`.
    #[arg(long, env = "ELSA_CLIENT_OUTPUT_BUFFER_LIMIT")]
    pub client_output_buffer_limit: Option<OutputLimit>,
    /// Largest unparsed input kept for one client, in bytes.
    #[arg(long, env = "ELSA_CLIENT_QUERY_BUFFER_LIMIT")]
    pub client_query_buffer_limit: Option<usize>,
    /// TCP port for TLS clients (0 = none).
    #[arg(long, env = "ELSA_TLS_PORT")]
    pub tls_port: Option<u16>,
    /// The server's certificate chain (PEM).
    #[arg(long, env = "ELSA_TLS_CERT_FILE")]
    pub tls_cert_file: Option<String>,
    /// The server's private key (PEM).
    #[arg(long, env = "ELSA_TLS_KEY_FILE")]
    pub tls_key_file: Option<String>,
    /// CA certificates client certificates must chain to (PEM).
    #[arg(long, env = "ELSA_TLS_CA_CERT_FILE")]
    pub tls_ca_cert_file: Option<String>,
    /// Client certificates: yes (required), optional, or no.
    #[arg(long, env = "ELSA_TLS_AUTH_CLIENTS")]
    pub tls_auth_clients: Option<String>,
    /// TLS versions offered: "TLSv1.2 TLSv1.3" (empty = both).
    #[arg(long, env = "ELSA_TLS_PROTOCOLS")]
    pub tls_protocols: Option<String>,
    /// TLS 1.3 cipher suites, colon-separated (empty = all rustls has).
    #[arg(long, env = "ELSA_TLS_CIPHERSUITES")]
    pub tls_ciphersuites: Option<String>,
    /// TLS 1.2 cipher suites by IANA name, colon-separated (empty = all).
    #[arg(long, env = "ELSA_TLS_CIPHERS")]
    pub tls_ciphers: Option<String>,
    /// Subscribers' limit, as Redis's `client-output-buffer-limit pubsub`:
    /// "<hard> <soft> <soft-seconds>" (units b, k, kb, m, mb, g, gb).
    #[arg(long, env = "ELSA_CLIENT_OUTPUT_BUFFER_LIMIT_PUBSUB")]
    pub client_output_buffer_limit_pubsub: Option<String>,
    /// Isolation for BEGIN without a level: RC, RR or SI.
    #[arg(long, env = "ELSA_DEFAULT_ISOLATION")]
    pub default_isolation: Option<String>,
    /// When a commit is acknowledged: local (logged by the node that
    /// committed it), region (logged by every replica of its keys in the
    /// region) or all (merged by every region too). Per connection: ACK.
    #[arg(long, env = "ELSA_ACK")]
    pub ack: Option<String>,
    /// This node's id (breaks ties between equal commit timestamps).
    #[arg(long, env = "ELSA_NODE_ID")]
    pub node_id: Option<u32>,
    /// Merge epoch in milliseconds: how often each shard flushes its gossip buffer.
    #[arg(long, env = "ELSA_MERGE_EPOCH_MS")]
    pub merge_epoch_ms: Option<u64>,
    /// When the write-ahead log is fsynced: always, everysec or no.
    #[arg(long, env = "ELSA_APPENDFSYNC")]
    pub appendfsync: Option<String>,
    /// Seconds between automatic snapshots when something changed (0 = only
    /// on SAVE/BGSAVE and shutdown).
    #[arg(long, env = "ELSA_SNAPSHOT_INTERVAL_SEC")]
    pub snapshot_interval_sec: Option<u64>,
    /// This node's region.
    #[arg(long, env = "ELSA_REGION")]
    pub region: Option<String>,
    /// Port for peers (replication over TCP, membership over UDP); 0 = standalone.
    #[arg(long, env = "ELSA_PEER_PORT")]
    pub peer_port: Option<u16>,
    /// Peer addresses (host:port) to join through, comma-separated.
    #[arg(long, env = "ELSA_SEEDS", value_delimiter = ',')]
    pub seeds: Option<Vec<String>>,
    /// Virtual nodes per shard on the ring.
    #[arg(long, env = "ELSA_VNODES")]
    pub vnodes: Option<u32>,
    /// Replicas of each key per region.
    #[arg(long, env = "ELSA_REPLICATION_FACTOR")]
    pub replication_factor: Option<usize>,
    /// Nodes the region has when it first forms: a new node serves nothing
    /// until it sees that many (0 = until it has seen every seed).
    #[arg(long, env = "ELSA_REGION_NODES")]
    pub region_nodes: Option<usize>,
    /// Which in-region replica serves a key: primary or random.
    #[arg(long, env = "ELSA_ROUTING")]
    pub routing: Option<String>,
    /// Cross-region replication: crdt or 2pc.
    #[arg(long, env = "ELSA_REPLICATION")]
    pub replication: Option<String>,
    /// Who decides a slot's owner inside a region: gossip or leases.
    #[arg(long, env = "ELSA_OWNERSHIP")]
    pub ownership: Option<String>,
    /// Anti-entropy period in milliseconds.
    #[arg(long, env = "ELSA_ANTI_ENTROPY_MS")]
    pub anti_entropy_ms: Option<u64>,
    /// Age after which a tombstone every replica has may be collected.
    #[arg(long, env = "ELSA_TOMBSTONE_TTL_SEC")]
    pub tombstone_ttl_sec: Option<u64>,
    /// Testing: one-way delay added to frames to other regions, ms.
    #[arg(long, env = "ELSA_WAN_DELAY_MS")]
    pub wan_delay_ms: Option<u64>,
    /// Testing: percent of gossip/anti-entropy frames to other regions dropped.
    #[arg(long, env = "ELSA_WAN_LOSS")]
    pub wan_loss: Option<f64>,
    /// Testing: allow ELSA.FAULT to cut this node off from other regions.
    #[arg(long, env = "ELSA_FAULT_INJECTION")]
    pub fault_injection: Option<bool>,
    /// Whether PUBLISH reaches subscribers in other regions too.
    #[arg(long, env = "ELSA_PUBSUB_ACROSS_REGIONS")]
    pub pubsub_across_regions: Option<bool>,
    /// The cluster secret peers authenticate with (prefer
    /// cluster-secret-file: a flag shows in `ps`).
    #[arg(long, env = "ELSA_CLUSTER_SECRET")]
    pub cluster_secret: Option<String>,
    /// A file holding the cluster secret (not readable by others).
    #[arg(long, env = "ELSA_CLUSTER_SECRET_FILE")]
    pub cluster_secret_file: Option<PathBuf>,
    /// Plaintext, unauthenticated peer links beyond loopback (unsafe).
    #[arg(long, env = "ELSA_PEER_INSECURE")]
    pub peer_insecure: Option<bool>,
    /// How far ahead of this node's clock a peer's timestamps may be, ms.
    #[arg(long, env = "ELSA_MAX_CLOCK_DRIFT_MS", alias = "max-clock-drift")]
    #[serde(alias = "max-clock-drift")]
    pub max_clock_drift_ms: Option<u64>,
    /// Milliseconds a Lua script runs before other clients get -BUSY and
    /// SCRIPT KILL may stop it (Redis's `busy-reply-threshold`, alias
    /// `lua-time-limit`).
    #[arg(long, env = "ELSA_BUSY_REPLY_THRESHOLD", alias = "lua-time-limit")]
    #[serde(alias = "lua-time-limit")]
    pub busy_reply_threshold: Option<u64>,
    /// SLOWLOG: commands running at least this many µs are logged
    /// (-1 = none, 0 = all). CONFIG SET changes it.
    #[arg(long, env = "ELSA_SLOWLOG_LOG_SLOWER_THAN", allow_hyphen_values = true)]
    pub slowlog_log_slower_than: Option<i64>,
    /// SLOWLOG: entries kept.
    #[arg(long, env = "ELSA_SLOWLOG_MAX_LEN")]
    pub slowlog_max_len: Option<u64>,
    /// LATENCY: spikes of at least this many ms are recorded (0 = off).
    #[arg(long, env = "ELSA_LATENCY_MONITOR_THRESHOLD")]
    pub latency_monitor_threshold: Option<u64>,
    /// INFO latencystats: per-command latency percentiles on or off.
    #[arg(long, env = "ELSA_LATENCY_TRACKING")]
    pub latency_tracking: Option<bool>,
    /// INFO latencystats: which percentiles ("50 99 99.9").
    #[arg(long, env = "ELSA_LATENCY_TRACKING_INFO_PERCENTILES")]
    pub latency_tracking_info_percentiles: Option<String>,
    /// HTTP port for Prometheus metrics and the status page, on the bind
    /// address, unauthenticated (0 = off).
    #[arg(long, env = "ELSA_METRICS_PORT")]
    pub metrics_port: Option<u16>,
    /// A port per worker for Redis Cluster clients: worker i listens on
    /// this port + i, and CLUSTER SLOTS/SHARDS/NODES list each worker's
    /// slots on its port (0 = off: every slot on the client port).
    #[arg(long, env = "ELSA_WORKER_PORT_BASE")]
    pub worker_port_base: Option<u16>,
    /// A connection moves to the worker whose shard its keys are on after
    /// this many lone commands in a row for that shard (0 = never).
    #[arg(long, env = "ELSA_WORKER_MOVE_AFTER")]
    pub worker_move_after: Option<u32>,
    /// Memory limit (Redis's `maxmemory`: bytes, or 100mb, 2gb…; 0 = none).
    #[arg(long, env = "ELSA_MAXMEMORY")]
    #[serde(default, deserialize_with = "memory_value")]
    pub maxmemory: Option<String>,
    /// What goes when over `maxmemory`: noeviction, allkeys-lru, allkeys-lfu,
    /// allkeys-random, volatile-lru, volatile-lfu, volatile-random, volatile-ttl.
    #[arg(long, env = "ELSA_MAXMEMORY_POLICY")]
    pub maxmemory_policy: Option<String>,
    /// Keys sampled per eviction (Redis's `maxmemory-samples`).
    #[arg(long, env = "ELSA_MAXMEMORY_SAMPLES")]
    pub maxmemory_samples: Option<u32>,
    /// LFU counter's logarithm factor (Redis's `lfu-log-factor`).
    #[arg(long, env = "ELSA_LFU_LOG_FACTOR")]
    pub lfu_log_factor: Option<u32>,
    /// Minutes per halving step of an idle key's LFU counter (`lfu-decay-time`).
    #[arg(long, env = "ELSA_LFU_DECAY_TIME")]
    pub lfu_decay_time: Option<u32>,
    /// Redis's encoding thresholds, for what `OBJECT ENCODING` answers
    /// (`elsa_shard::ops::limits`): fields a hash keeps packed…
    #[arg(
        long,
        env = "ELSA_HASH_MAX_LISTPACK_ENTRIES",
        alias = "hash-max-ziplist-entries"
    )]
    #[serde(alias = "hash-max-ziplist-entries")]
    pub hash_max_listpack_entries: Option<u64>,
    /// …and the longest field or value it keeps packed.
    #[arg(
        long,
        env = "ELSA_HASH_MAX_LISTPACK_VALUE",
        alias = "hash-max-ziplist-value"
    )]
    #[serde(alias = "hash-max-ziplist-value")]
    pub hash_max_listpack_value: Option<u64>,
    /// Members of an integer set kept as an intset.
    #[arg(long, env = "ELSA_SET_MAX_INTSET_ENTRIES")]
    pub set_max_intset_entries: Option<u64>,
    /// Members a sorted set keeps packed…
    #[arg(
        long,
        env = "ELSA_ZSET_MAX_LISTPACK_ENTRIES",
        alias = "zset-max-ziplist-entries"
    )]
    #[serde(alias = "zset-max-ziplist-entries")]
    pub zset_max_listpack_entries: Option<u64>,
    /// …and the longest member it keeps packed.
    #[arg(
        long,
        env = "ELSA_ZSET_MAX_LISTPACK_VALUE",
        alias = "zset-max-ziplist-value"
    )]
    #[serde(alias = "zset-max-ziplist-value")]
    pub zset_max_listpack_value: Option<u64>,
    /// Redis's list node size (kept for CONFIG; Redis 7.0 reports every
    /// list as a quicklist).
    #[arg(
        long,
        env = "ELSA_LIST_MAX_LISTPACK_SIZE",
        alias = "list-max-ziplist-size",
        allow_hyphen_values = true
    )]
    #[serde(alias = "list-max-ziplist-size")]
    pub list_max_listpack_size: Option<i64>,
    /// Redis's list compression depth (kept for CONFIG; Elsa does not
    /// compress lists).
    #[arg(long, env = "ELSA_LIST_COMPRESS_DEPTH")]
    pub list_compress_depth: Option<i64>,
    /// Entries per stream node, which approximate trims (`~`) remove
    /// whole (0: no limit).
    #[arg(long, env = "ELSA_STREAM_NODE_MAX_ENTRIES")]
    pub stream_node_max_entries: Option<u64>,
    /// Redis's bytes per stream node (kept for CONFIG).
    #[arg(long, env = "ELSA_STREAM_NODE_MAX_BYTES")]
    pub stream_node_max_bytes: Option<u64>,
    /// What XREAD and XREADGROUP `>` show across regions: `converged`
    /// (entries no other region can still add below) or `immediate`.
    #[arg(long, env = "ELSA_STREAM_READ_HORIZON")]
    pub stream_read_horizon: Option<String>,
    /// The size past which a sparse HyperLogLog becomes dense, bytes.
    #[arg(long, env = "ELSA_HLL_SPARSE_MAX_BYTES")]
    pub hll_sparse_max_bytes: Option<u64>,
    /// Keys client-side caching remembers at most (0: no limit).
    #[arg(long, env = "ELSA_TRACKING_TABLE_MAX_KEYS")]
    pub tracking_table_max_keys: Option<u64>,
    /// Keyspace notifications: Redis's class letters (`KEA`…; "" = off).
    #[arg(long, env = "ELSA_NOTIFY_KEYSPACE_EVENTS", allow_hyphen_values = true)]
    pub notify_keyspace_events: Option<String>,
}

impl Keys {
    /// Takes every key `over` sets.
    pub(super) fn overlay(&mut self, over: &Keys) {
        macro_rules! take {
            ($($f:ident),*) => { $( if over.$f.is_some() { self.$f = over.$f.clone(); } )* };
        }
        take!(
            port,
            bind,
            data_dir,
            workers,
            requirepass,
            aclfile,
            protected_mode,
            acl_pubsub_default,
            acllog_max_len,
            maxclients,
            proto_max_bulk_len,
            max_args,
            databases,
            timeout,
            client_output_buffer_limit,
            client_output_buffer_limit_pubsub,
            client_query_buffer_limit,
            tls_port,
            tls_cert_file,
            tls_key_file,
            tls_ca_cert_file,
            tls_auth_clients,
            tls_protocols,
            tls_ciphersuites,
            tls_ciphers,
            default_isolation,
            ack,
            node_id,
            merge_epoch_ms,
            appendfsync,
            snapshot_interval_sec,
            region,
            peer_port,
            seeds,
            vnodes,
            replication_factor,
            region_nodes,
            routing,
            replication,
            ownership,
            anti_entropy_ms,
            tombstone_ttl_sec,
            wan_delay_ms,
            wan_loss,
            fault_injection,
            pubsub_across_regions,
            cluster_secret,
            cluster_secret_file,
            peer_insecure,
            max_clock_drift_ms,
            busy_reply_threshold,
            slowlog_log_slower_than,
            slowlog_max_len,
            latency_monitor_threshold,
            latency_tracking,
            latency_tracking_info_percentiles,
            metrics_port,
            worker_port_base,
            worker_move_after,
            maxmemory,
            maxmemory_policy,
            maxmemory_samples,
            lfu_log_factor,
            lfu_decay_time,
            hash_max_listpack_entries,
            hash_max_listpack_value,
            set_max_intset_entries,
            zset_max_listpack_entries,
            zset_max_listpack_value,
            list_max_listpack_size,
            list_compress_depth,
            stream_node_max_entries,
            stream_node_max_bytes,
            stream_read_horizon,
            hll_sparse_max_bytes,
            tracking_table_max_keys,
            notify_keyspace_events
        );
    }
}

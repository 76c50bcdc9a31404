//! Runtime configuration: the values of the parameters CONFIG SET changes
//! while the node runs that no service owns, each read by the code it
//! governs from an atomic (or, off the hot path, a mutex). CONFIG SET
//! itself, over the node's state, is [`params`].

pub mod params;

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize};
use std::sync::Mutex;

/// The runtime-changeable settings not owned by another module (the slow
/// log and the latency monitor keep their own thresholds).
pub struct Runtime {
    /// INFO latencystats on (`latency-tracking`).
    pub latency_tracking: AtomicBool,
    /// Its percentiles (`latency-tracking-info-percentiles`), read by INFO.
    pub percentiles: Mutex<Vec<f64>>,
    /// The shards' counters at the last CONFIG RESETSTAT (INFO subtracts
    /// them: a shard's counters are its own thread's to write).
    pub shard_baseline: Mutex<ShardBaseline>,
    /// Client limits CONFIG SET changes (the configuration's values at
    /// start): read where they apply, one relaxed load each.
    pub maxclients: AtomicUsize,
    pub proto_max_bulk_len: AtomicUsize,
    pub query_buffer_limit: AtomicUsize,
    /// `client-output-buffer-limit`'s normal class: hard, soft (bytes),
    /// soft seconds.
    pub output_hard: AtomicUsize,
    pub output_soft: AtomicUsize,
    pub output_soft_secs: AtomicU64,
    /// Its pubsub class, given to each new subscriber's queue.
    pub pubsub_output: Mutex<crate::pubsub::Limit>,
    /// `requirepass` as last set (the default user's password lives in
    /// the ACL table; this is what CONFIG GET answers).
    pub requirepass: Mutex<String>,
    /// How often a snapshot is taken (`snapshot-interval-sec`, 0: never),
    /// and `save` as last set, in Redis's words (`crate::node`'s
    /// `periodic_snapshots` reads the interval every second).
    pub snapshot_interval_sec: AtomicU64,
    pub save: Mutex<String>,
    /// `appendfsync` as last set; the shards are told by the connection
    /// that set it (`Conn::config_set_runtime`).
    pub appendfsync: Mutex<elsa_shard::wal::Fsync>,
    /// `timeout`: idle seconds before a client is closed (0: never).
    pub timeout_sec: AtomicU64,
}

/// Shard counters CONFIG RESETSTAT zeroes, as they were when it ran.
#[derive(Clone, Copy, Debug, Default)]
pub struct ShardBaseline {
    pub keyspace_hits: u64,
    pub keyspace_misses: u64,
    pub expired: u64,
}

impl ShardBaseline {
    /// The counters of `t`, the shards' statistics added up.
    pub fn of(t: &elsa_shard::ShardStats) -> ShardBaseline {
        ShardBaseline {
            keyspace_hits: t.keyspace_hits,
            keyspace_misses: t.keyspace_misses,
            expired: t.expired,
        }
    }
}

impl Runtime {
    pub fn new(c: &crate::config::Config) -> Runtime {
        let s = &c.introspection;
        Runtime {
            latency_tracking: AtomicBool::new(s.latency_tracking),
            percentiles: Mutex::new(s.latency_tracking_info_percentiles.clone()),
            shard_baseline: Mutex::new(ShardBaseline::default()),
            maxclients: AtomicUsize::new(c.maxclients),
            proto_max_bulk_len: AtomicUsize::new(c.proto_max_bulk_len),
            query_buffer_limit: AtomicUsize::new(c.client_query_buffer_limit),
            output_hard: AtomicUsize::new(c.client_output_buffer_limit),
            output_soft: AtomicUsize::new(c.client_output_soft_limit),
            output_soft_secs: AtomicU64::new(c.client_output_soft_secs),
            pubsub_output: Mutex::new(c.pubsub_output_limit),
            requirepass: Mutex::new(c.requirepass.clone().unwrap_or_default()),
            snapshot_interval_sec: AtomicU64::new(c.snapshot_interval_sec),
            save: Mutex::new(save_text(c.snapshot_interval_sec)),
            appendfsync: Mutex::new(c.appendfsync),
            timeout_sec: AtomicU64::new(c.timeout),
        }
    }

    /// The pubsub class of `client-output-buffer-limit`.
    pub fn pubsub_output(&self) -> crate::pubsub::Limit {
        *self.pubsub_output.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The snapshot interval and `save`'s text, set together (CONFIG SET
    /// of either).
    pub fn set_snapshots(&self, interval_sec: u64, save: String) {
        self.snapshot_interval_sec
            .store(interval_sec, std::sync::atomic::Ordering::Relaxed);
        *self.save.lock().unwrap_or_else(|e| e.into_inner()) = save;
    }

    /// The fsync policy in force.
    pub fn appendfsync(&self) -> elsa_shard::wal::Fsync {
        *self.appendfsync.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub fn percentiles(&self) -> Vec<f64> {
        self.percentiles
            .lock()
            .map(|p| p.clone())
            .unwrap_or_default()
    }
}

/// `save` as CONFIG GET answers it for a snapshot interval: a snapshot
/// after that many seconds if one change was logged (none when 0).
pub fn save_text(interval_sec: u64) -> String {
    if interval_sec == 0 {
        String::new()
    } else {
        format!("{interval_sec} 1")
    }
}

/// A double as Redis prints one in CONFIG GET and INFO (`%f` with its
/// trailing zeros and point trimmed: 99.9, 50).
pub fn trim_double(x: f64) -> String {
    let s = format!("{x:.6}");
    let s = s.trim_end_matches('0').trim_end_matches('.');
    s.to_string()
}

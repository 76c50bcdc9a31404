//! INFO's sections that follow Redis 7.0's `genRedisInfoString` field by
//! field where Elsa has the thing measured (`# Server`, `# Persistence`,
//! `# Stats`, `# CPU`, `# Commandstats`, `# Errorstats`, `# Latencystats`,
//! `# Cluster`, `# Keyspace`), and Elsa's own `# Transactions` and
//! `# Regions`. A Redis field Elsa has no counterpart for is left out
//! rather than answered with a made-up value; one that is zero by
//! construction (Elsa never forks, has no AOF rewrite, no I/O threads) is
//! given as zero. `crate::info` picks the sections.

use std::fmt::Write as _;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::OnceLock;

use elsa_shard::ShardStats;

use crate::cmdstats::{Totals, TxnKind, TxnOutcome};
use crate::state::Shared;

/// Which sections an INFO asked for, as Redis 7 reads its arguments:
/// none is `default`; `all` is every section, `everything` too (Elsa has
/// no module sections); several names may be given.
pub struct Sections {
    names: Vec<String>,
    all: bool,
    default: bool,
}

/// Redis's default sections, and Elsa's own (small, so shown by default).
const DEFAULT: &[&str] = &[
    "server",
    "clients",
    "memory",
    "persistence",
    "stats",
    "replication",
    "cpu",
    "module_list",
    "errorstats",
    "cluster",
    "keyspace",
    "transactions",
    "gossip",
    "regions",
];

impl Sections {
    pub fn of(args: &[bytes::Bytes]) -> Sections {
        let names: Vec<String> = args
            .iter()
            .map(|a| String::from_utf8_lossy(a).to_ascii_lowercase())
            .collect();
        let all = names.iter().any(|n| n == "all" || n == "everything");
        let default = names.is_empty() || names.iter().any(|n| n == "default");
        Sections {
            names,
            all,
            default,
        }
    }

    pub fn wants(&self, section: &str) -> bool {
        self.all
            || (self.default && DEFAULT.contains(&section))
            || self.names.iter().any(|n| n == section)
    }
}

/// A run id for this process: 40 random hex digits, as Redis's.
fn run_id() -> &'static str {
    static ID: OnceLock<String> = OnceLock::new();
    ID.get_or_init(|| {
        (0..20)
            .map(|_| format!("{:02x}", rand::random::<u8>()))
            .collect()
    })
}

/// `uname -srm`, as Redis's `os` field.
fn os() -> String {
    // SAFETY: `uname` fills the zeroed struct; its fields are NUL-terminated.
    let mut u: libc::utsname = unsafe { std::mem::zeroed() };
    if unsafe { libc::uname(&mut u) } != 0 {
        return std::env::consts::OS.to_string();
    }
    let field = |f: &[libc::c_char]| {
        let bytes: Vec<u8> = f
            .iter()
            .take_while(|&&c| c != 0)
            .map(|&c| c as u8)
            .collect();
        String::from_utf8_lossy(&bytes).into_owned()
    };
    format!(
        "{} {} {}",
        field(&u.sysname),
        field(&u.release),
        field(&u.machine)
    )
}

fn unix_us() -> u128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_micros())
}

pub fn server(t: &mut String, sh: &Shared) {
    let c = &sh.config;
    let uptime = sh.started.elapsed().as_secs();
    // Elsa's periodic work (expiry, gossip flush, log sync) runs every
    // merge epoch: its frequency is Redis's `hz`.
    let hz = (1000 / c.merge_epoch_ms.max(1)).max(1);
    let _ = write!(
        t,
        "# Server\r\nredis_version:{}\r\nredis_git_sha1:00000000\r\nredis_git_dirty:0\r\nredis_mode:standalone\r\nos:{}\r\narch_bits:{}\r\nmonotonic_clock:POSIX clock_gettime\r\nmultiplexing_api:epoll\r\nprocess_id:{}\r\nprocess_supervised:no\r\nrun_id:{}\r\ntcp_port:{}\r\nserver_time_usec:{}\r\nuptime_in_seconds:{}\r\nuptime_in_days:{}\r\nhz:{hz}\r\nconfigured_hz:{hz}\r\nlru_clock:{}\r\nexecutable:{}\r\nconfig_file:{}\r\nio_threads_active:0\r\nelsa_version:{}\r\nworkers:{}\r\nnode_id:{}\r\ndefault_isolation:{}\r\n\r\n",
        crate::REDIS_COMPAT_VERSION,
        os(),
        usize::BITS,
        std::process::id(),
        run_id(),
        c.addr.port(),
        unix_us(),
        uptime,
        uptime / 86400,
        // Redis's LRU clock: seconds, in 24 bits.
        (unix_us() / 1_000_000) as u64 & ((1 << 24) - 1),
        std::env::current_exe()
            .map(|p| p.display().to_string())
            .unwrap_or_default(),
        c.config_file
            .as_ref()
            .and_then(|p| std::fs::canonicalize(p).ok())
            .map(|p| p.display().to_string())
            .unwrap_or_default(),
        env!("CARGO_PKG_VERSION"),
        c.workers,
        c.node_id,
        c.default_isolation.name(),
    );
}

pub fn persistence(t: &mut String, sh: &Shared, stats: &[ShardStats]) {
    let p = &sh.persistence;
    let (mut records, mut fsyncs, mut errors, mut failure) = (0, 0, 0, None);
    for w in stats.iter().filter_map(|s| s.wal.clone()) {
        records += w.records;
        fsyncs += w.fsyncs;
        errors += w.errors;
        failure = failure.or(w.failure);
    }
    let last_error = p.last_error.lock().map(|e| e.clone()).unwrap_or(None);
    let last_ms = p.last_save_ms.load(Relaxed);
    let saved = p.last_save_unix.load(Relaxed) != 0;
    // Redis's names mapped to Elsa's files: the write-ahead log is the
    // AOF (always on, never rewritten: segments are dropped after a
    // snapshot), snapshots are RDB saves, made without a fork.
    let _ = write!(
        t,
        "# Persistence\r\nloading:0\r\nasync_loading:0\r\ncurrent_cow_peak:0\r\ncurrent_cow_size:0\r\ncurrent_cow_size_age:0\r\ncurrent_fork_perc:0.00\r\ncurrent_save_keys_processed:0\r\ncurrent_save_keys_total:0\r\nrdb_bgsave_in_progress:{}\r\nrdb_last_save_time:{}\r\nrdb_last_bgsave_status:{}\r\nrdb_last_bgsave_time_sec:{}\r\nrdb_current_bgsave_time_sec:-1\r\nrdb_last_cow_size:0\r\nrdb_last_load_keys_loaded:{}\r\naof_enabled:1\r\naof_rewrite_in_progress:0\r\naof_rewrite_scheduled:0\r\naof_last_rewrite_time_sec:-1\r\naof_current_rewrite_time_sec:-1\r\naof_last_bgrewrite_status:ok\r\naof_rewrites:0\r\naof_rewrites_consecutive_failures:0\r\naof_last_write_status:{}\r\naof_last_cow_size:0\r\nmodule_fork_in_progress:0\r\nmodule_fork_last_cow_size:0\r\naof_current_size:{}\r\naof_pending_rewrite:0\r\nappendfsync:{}\r\nwal_bytes:{}\r\nwal_records_written:{}\r\nwal_fsyncs:{}\r\nwal_write_errors:{}\r\nwal_status:{}\r\nlast_snapshot_ms:{}\r\nlast_snapshot_error:{}\r\nsnapshot_interval_sec:{}\r\nrecovery_ms:{}\r\nrecovered_lattices:{}\r\nrecovered_files:{}\r\ntorn_tails_cut:{}\r\n\r\n",
        p.in_progress.load(Relaxed) as u8,
        p.last_save_unix.load(Relaxed),
        if last_error.is_some() { "err" } else { "ok" },
        if saved { (last_ms / 1000) as i64 } else { -1 },
        p.recovery.entries,
        if failure.is_some() { "err" } else { "ok" },
        p.dir.wal_bytes(),
        sh.runtime.appendfsync().name(),
        p.dir.wal_bytes(),
        records,
        fsyncs,
        errors,
        failure.as_deref().unwrap_or("ok"),
        last_ms,
        last_error.as_deref().unwrap_or(""),
        sh.runtime
            .snapshot_interval_sec
            .load(std::sync::atomic::Ordering::Relaxed),
        p.recovery_ms,
        p.recovery.entries,
        p.recovery.files,
        p.recovery.torn.len(),
    );
}

/// Shard counters summed, less the last CONFIG RESETSTAT's baseline.
pub struct ShardCounters {
    pub expired: u64,
    pub hits: u64,
    pub misses: u64,
}

impl ShardCounters {
    pub fn of(sh: &Shared, stats: &[ShardStats]) -> ShardCounters {
        let now = crate::runtime::ShardBaseline::of(&sum(stats));
        let b = sh
            .runtime
            .shard_baseline
            .lock()
            .map(|b| *b)
            .unwrap_or_default();
        ShardCounters {
            expired: now.expired.saturating_sub(b.expired),
            hits: now.keyspace_hits.saturating_sub(b.keyspace_hits),
            misses: now.keyspace_misses.saturating_sub(b.keyspace_misses),
        }
    }
}

pub fn stats(t: &mut String, sh: &Shared, totals: &Totals, shard: &ShardCounters) {
    use crate::pubsub::Space;
    let (tracked_keys, tracked_items, tracked_prefixes) = sh.tracking.totals();
    let _ = write!(
        t,
        "# Stats\r\ntotal_connections_received:{}\r\ntotal_commands_processed:{}\r\ninstantaneous_ops_per_sec:{}\r\ntotal_net_input_bytes:{}\r\ntotal_net_output_bytes:{}\r\ninstantaneous_input_kbps:{:.2}\r\ninstantaneous_output_kbps:{:.2}\r\nrejected_connections:{}\r\nsync_full:0\r\nsync_partial_ok:0\r\nsync_partial_err:0\r\nexpired_keys:{}\r\nevicted_keys:{}\r\nkeyspace_hits:{}\r\nkeyspace_misses:{}\r\npubsub_channels:{}\r\npubsub_patterns:{}\r\npubsubshard_channels:{}\r\nlatest_fork_usec:0\r\ntotal_forks:0\r\ntracking_total_keys:{}\r\ntracking_total_items:{}\r\ntracking_total_prefixes:{}\r\nunexpected_error_replies:0\r\ntotal_error_replies:{}\r\ndump_payload_sanitizations:0\r\ntotal_reads_processed:{}\r\ntotal_writes_processed:{}\r\nio_threaded_reads_processed:0\r\nio_threaded_writes_processed:0\r\n{}\r\n",
        sh.total_connections.load(Relaxed),
        sh.total_commands.load(Relaxed),
        sh.rates.ops_per_sec(),
        totals.net.input,
        totals.net.output,
        sh.rates.input_kbps(),
        sh.rates.output_kbps(),
        sh.rejected.load(Relaxed),
        shard.expired,
        sh.memory.limit.evicted(),
        shard.hits,
        shard.misses,
        sh.pubsub.channels(Space::Plain, None).len(),
        sh.pubsub.numpat(),
        sh.pubsub.channels(Space::Shard, None).len(),
        tracked_keys,
        tracked_items,
        tracked_prefixes,
        totals.error_replies,
        totals.net.reads,
        totals.net.writes,
        sh.acl.info_stats(),
    );
}

/// `getrusage` of `who` as Redis prints it: seconds.microseconds.
fn rusage(who: libc::c_int) -> (String, String) {
    // SAFETY: `getrusage` fills the zeroed struct.
    let mut r: libc::rusage = unsafe { std::mem::zeroed() };
    if unsafe { libc::getrusage(who, &mut r) } != 0 {
        return ("0.000000".into(), "0.000000".into());
    }
    let tv = |t: libc::timeval| format!("{}.{:06}", t.tv_sec, t.tv_usec);
    (tv(r.ru_stime), tv(r.ru_utime))
}

/// `# CPU`: the process, its children, and — for Redis's main thread —
/// the worker thread answering the INFO (Elsa has one event loop per
/// worker, none of them main).
pub fn cpu(t: &mut String) {
    let (sys, user) = rusage(libc::RUSAGE_SELF);
    let (csys, cuser) = rusage(libc::RUSAGE_CHILDREN);
    let (tsys, tuser) = rusage(libc::RUSAGE_THREAD);
    let _ = write!(
        t,
        "# CPU\r\nused_cpu_sys:{sys}\r\nused_cpu_user:{user}\r\nused_cpu_sys_children:{csys}\r\nused_cpu_user_children:{cuser}\r\nused_cpu_sys_main_thread:{tsys}\r\nused_cpu_user_main_thread:{tuser}\r\n\r\n"
    );
}

pub fn commandstats(t: &mut String, totals: &Totals) {
    t.push_str("# Commandstats\r\n");
    for c in totals.commands() {
        let per_call = if c.calls == 0 {
            0.0
        } else {
            c.usec as f64 / c.calls as f64
        };
        let _ = write!(
            t,
            "cmdstat_{}:calls={},usec={},usec_per_call={:.2},rejected_calls={},failed_calls={}\r\n",
            c.name, c.calls, c.usec, per_call, c.rejected_calls, c.failed_calls
        );
    }
    t.push_str("\r\n");
}

pub fn errorstats(t: &mut String, totals: &Totals) {
    t.push_str("# Errorstats\r\n");
    let mut errors: Vec<(&String, &u64)> = totals.errors.iter().collect();
    errors.sort();
    for (prefix, n) in errors {
        // Redis prints the prefix made safe for INFO's format.
        let safe: String = prefix
            .chars()
            .map(|c| {
                if matches!(c, '#' | ':' | '\n' | '\r') {
                    '_'
                } else {
                    c
                }
            })
            .collect();
        let _ = write!(t, "errorstat_{safe}:count={n}\r\n");
    }
    t.push_str("\r\n");
}

pub fn latencystats(t: &mut String, sh: &Shared, totals: &Totals) {
    t.push_str("# Latencystats\r\n");
    if sh.runtime.latency_tracking.load(Relaxed) {
        let percentiles = sh.runtime.percentiles();
        for c in totals.commands().iter().filter(|c| c.calls > 0) {
            let values: Vec<String> = percentiles
                .iter()
                .map(|p| {
                    format!(
                        "p{}={:.3}",
                        crate::runtime::trim_double(*p),
                        c.percentile(*p) as f64
                    )
                })
                .collect();
            let _ = write!(
                t,
                "latency_percentiles_usec_{}:{}\r\n",
                c.name,
                values.join(",")
            );
        }
    }
    t.push_str("\r\n");
}

pub fn cluster(t: &mut String) {
    // Redis Cluster's field: Elsa's own clustering is in `# Replication`.
    t.push_str("# Cluster\r\ncluster_enabled:0\r\n\r\n");
}

pub fn keyspace(t: &mut String, rows: &[(u8, usize, usize, u64)]) {
    t.push_str("# Keyspace\r\n");
    for (db, keys, expires, avg_ttl) in rows {
        let _ = write!(
            t,
            "db{db}:keys={keys},expires={expires},avg_ttl={avg_ttl}\r\n"
        );
    }
    t.push_str("\r\n");
}

/// `# Transactions`: outcomes per isolation level (BEGIN … COMMIT) and
/// for MULTI/EXEC, with the shards' own counters, and what crossed
/// between workers (shard messages; connections moved to their keys'
/// worker, `crate::conn`).
pub fn transactions(t: &mut String, sh: &Shared, totals: &Totals, total: &ShardStats) {
    let _ = write!(
        t,
        "# Transactions\r\nlone_ops:{}\r\ncommits:{}\r\nconflicts:{}\r\nbusy_retries:{}\r\nrefused_while_not_serving:{}\r\ninstalls_superseded:{}\r\nsnapshot_versions_kept:{}\r\ninbox_messages:{}\r\nclients_moved:{}\r\n",
        total.ops, total.commits, total.conflicts, total.busy, total.refused_stale, total.installs_superseded, total.history, total.inbox_messages,
        sh.clients_moved.load(Relaxed)
    );
    for kind in TxnKind::ALL {
        let _ = write!(
            t,
            "txn_{}:commits={},aborts={},conflicts={}\r\n",
            kind.name(),
            totals.txns(kind, TxnOutcome::Commit),
            totals.txns(kind, TxnOutcome::Abort),
            totals.txns(kind, TxnOutcome::Conflict),
        );
    }
    t.push_str("\r\n");
}

/// `# Regions`: per other region, its nodes, how many are linked, the
/// worst replication lag and the frames waiting for them; then per node.
pub fn regions(t: &mut String, sh: &Shared) {
    t.push_str("# Regions\r\n");
    let Some(cl) = &sh.cluster else {
        let _ = write!(
            t,
            "region:{}\r\nregions:1\r\n\r\n",
            sh.config.cluster.region
        );
        return;
    };
    let peers = cl.peer_info();
    let mut by_region = std::collections::BTreeMap::<&str, (usize, usize, u64, usize)>::new();
    for p in &peers {
        let r = by_region.entry(p.region.as_str()).or_default();
        r.0 += 1;
        r.1 += p.connected as usize;
        r.2 = r.2.max(p.stats.lag_ms);
        r.3 += p.queued;
    }
    let _ = write!(
        t,
        "region:{}\r\nregions:{}\r\n",
        sh.config.cluster.region,
        cl.ring().regions().len()
    );
    for (name, (nodes, up, lag, queued)) in &by_region {
        let _ = write!(
            t,
            "region_{name}:nodes={nodes},connected={up},lag_ms={lag},pending_frames={queued}\r\n"
        );
    }
    for p in &peers {
        let _ = write!(
            t,
            "node_{}:region={},state={},lag_ms={},pending_frames={}\r\n",
            p.node,
            p.region,
            if p.connected { "up" } else { "down" },
            p.stats.lag_ms,
            p.queued
        );
    }
    t.push_str("\r\n");
}

/// The shards' statistics added up.
pub(crate) fn sum(stats: &[ShardStats]) -> ShardStats {
    let mut t = ShardStats::default();
    for s in stats {
        t.records += s.records;
        t.live += s.live;
        t.expires += s.expires;
        t.memory += s.memory;
        t.ops += s.ops;
        t.inbox_messages += s.inbox_messages;
        t.commits += s.commits;
        t.conflicts += s.conflicts;
        t.busy += s.busy;
        t.expired += s.expired;
        t.gc_visited += s.gc_visited;
        t.history += s.history;
        t.gossiped += s.gossiped;
        t.parts_waiting += s.parts_waiting;
        t.parts_alone += s.parts_alone;
        t.refused_stale += s.refused_stale;
        t.installs_superseded += s.installs_superseded;
        t.keyspace_hits += s.keyspace_hits;
        t.keyspace_misses += s.keyspace_misses;
    }
    t
}

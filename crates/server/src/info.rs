//! INFO sections and CONFIG GET values.

use std::fmt::Write as _;
use std::sync::atomic::Ordering;

use bytes::Bytes;
use elsa_shard::ShardStats;

use crate::cmd::is;
use crate::config::Config;
use crate::conn::Conn;

/// Parameters CONFIG GET answers (what common clients and tools probe).
pub fn config_pairs(c: &Config) -> Vec<(String, String)> {
    vec![
        ("bind".into(), c.addr.ip().to_string()),
        ("port".into(), c.addr.port().to_string()),
        ("dir".into(), c.data_dir.display().to_string()),
        ("data-dir".into(), c.data_dir.display().to_string()),
        ("workers".into(), c.workers.to_string()),
        ("maxclients".into(), c.maxclients.to_string()),
        (
            "proto-max-bulk-len".into(),
            c.proto_max_bulk_len.to_string(),
        ),
        ("max-args".into(), c.max_args.to_string()),
        (
            // Redis's form, every class: Elsa has no replica clients of
            // Redis's kind, so their class shows no limit.
            "client-output-buffer-limit".into(),
            format!(
                "normal {} {} {} slave 0 0 0 pubsub {}",
                c.client_output_buffer_limit,
                c.client_output_soft_limit,
                c.client_output_soft_secs,
                c.pubsub_output_limit
            ),
        ),
        (
            "client-query-buffer-limit".into(),
            c.client_query_buffer_limit.to_string(),
        ),
        (
            "client-output-buffer-limit-pubsub".into(),
            c.pubsub_output_limit.to_string(),
        ),
        (
            "default-isolation".into(),
            c.default_isolation.name().into(),
        ),
        ("node-id".into(), c.node_id.to_string()),
        ("merge-epoch-ms".into(), c.merge_epoch_ms.to_string()),
        (
            "busy-reply-threshold".into(),
            c.busy_reply_threshold.to_string(),
        ),
        ("lua-time-limit".into(), c.busy_reply_threshold.to_string()),
        (
            "requirepass".into(),
            c.requirepass.clone().unwrap_or_default(),
        ),
        (
            "aclfile".into(),
            c.acl
                .file
                .as_ref()
                .map(|f| f.display().to_string())
                .unwrap_or_default(),
        ),
        (
            "protected-mode".into(),
            if c.acl.protected_mode { "yes" } else { "no" }.into(),
        ),
        (
            "acl-pubsub-default".into(),
            if c.acl.allchannels_default {
                "allchannels"
            } else {
                "resetchannels"
            }
            .into(),
        ),
        ("acllog-max-len".into(), c.acl.log_max_len.to_string()),
        // Redis parameters clients probe; Elsa's answers for them.
        ("databases".into(), c.databases.to_string()),
        (
            "save".into(),
            if c.snapshot_interval_sec == 0 {
                String::new()
            } else {
                format!("{} 1", c.snapshot_interval_sec)
            },
        ),
        ("appendonly".into(), "yes".into()),
        ("appendfsync".into(), c.appendfsync.name().into()),
        (
            "snapshot-interval-sec".into(),
            c.snapshot_interval_sec.to_string(),
        ),
        ("maxmemory".into(), "0".into()),
        ("maxmemory-policy".into(), "noeviction".into()),
        ("timeout".into(), "0".into()),
        ("cluster-enabled".into(), "no".into()),
    ]
}

fn rss_bytes() -> u64 {
    // /proc/self/statm: size resident … in pages.
    std::fs::read_to_string("/proc/self/statm")
        .ok()
        .and_then(|s| s.split_whitespace().nth(1)?.parse::<u64>().ok())
        .map_or(0, |pages| pages * 4096)
}

impl Conn {
    /// INFO [section …]
    pub(crate) async fn info(&mut self, args: &[Bytes]) {
        let want = |name: &str| {
            args.len() == 1
                || args[1..]
                    .iter()
                    .any(|a| is(a, name) || is(a, "all") || is(a, "everything") || is(a, "default"))
        };
        let stats = match self.shard_stats().await {
            Ok(s) => s,
            Err(e) => return self.w().error(&e.to_string()),
        };
        let total = sum(&stats);
        let sh = &self.shared;
        let c = &sh.config;
        let mut t = String::new();
        if want("server") {
            let _ = write!(
                t,
                "# Server\r\nredis_version:{}\r\nelsa_version:{}\r\nredis_mode:standalone\r\nos:{}\r\narch_bits:64\r\nprocess_id:{}\r\ntcp_port:{}\r\nuptime_in_seconds:{}\r\nworkers:{}\r\nnode_id:{}\r\ndefault_isolation:{}\r\n\r\n",
                crate::REDIS_COMPAT_VERSION,
                env!("CARGO_PKG_VERSION"),
                std::env::consts::OS,
                std::process::id(),
                c.addr.port(),
                sh.started.elapsed().as_secs(),
                c.workers,
                c.node_id,
                c.default_isolation.name(),
            );
        }
        if want("clients") {
            let _ = write!(t, "{}", crate::clients::info::section(sh));
        }
        if want("memory") {
            let _ = write!(
                t,
                "# Memory\r\nused_memory_rss:{}\r\nused_memory_dataset:{}\r\nmaxmemory:0\r\n\r\n",
                rss_bytes(),
                total.memory
            );
        }
        if want("persistence") {
            let p = &sh.persistence;
            let wal = stats.iter().filter_map(|s| s.wal.clone());
            let (mut records, mut fsyncs, mut errors, mut failure) = (0, 0, 0, None);
            for w in wal {
                records += w.records;
                fsyncs += w.fsyncs;
                errors += w.errors;
                failure = failure.or(w.failure);
            }
            let last_error = p.last_error.lock().map(|e| e.clone()).unwrap_or(None);
            let _ = write!(
                t,
                "# Persistence\r\nloading:0\r\naof_enabled:1\r\nappendfsync:{}\r\nwal_bytes:{}\r\nwal_records_written:{}\r\nwal_fsyncs:{}\r\nwal_write_errors:{}\r\nwal_status:{}\r\naof_last_write_status:{}\r\nrdb_bgsave_in_progress:{}\r\nrdb_last_save_time:{}\r\nrdb_last_bgsave_status:{}\r\nlast_snapshot_ms:{}\r\nlast_snapshot_error:{}\r\nsnapshot_interval_sec:{}\r\nrecovery_ms:{}\r\nrecovered_lattices:{}\r\nrecovered_files:{}\r\ntorn_tails_cut:{}\r\n\r\n",
                c.appendfsync.name(),
                p.dir.wal_bytes(),
                records,
                fsyncs,
                errors,
                failure.as_deref().unwrap_or("ok"),
                if failure.is_some() { "err" } else { "ok" },
                p.in_progress.load(Ordering::Relaxed) as u8,
                p.last_save_unix.load(Ordering::Relaxed),
                if last_error.is_some() { "err" } else { "ok" },
                p.last_save_ms.load(Ordering::Relaxed),
                last_error.as_deref().unwrap_or(""),
                c.snapshot_interval_sec,
                p.recovery_ms,
                p.recovery.entries,
                p.recovery.files,
                p.recovery.torn.len(),
            );
        }
        if want("stats") {
            let _ = write!(
                t,
                "# Stats\r\ntotal_connections_received:{}\r\ntotal_commands_processed:{}\r\nrejected_connections:{}\r\nexpired_keys:{}\r\n{}\r\n",
                sh.total_connections.load(Ordering::Relaxed),
                sh.total_commands.load(Ordering::Relaxed),
                sh.rejected.load(Ordering::Relaxed),
                total.expired,
                sh.acl.info_stats(),
            );
        }
        if want("transactions") {
            let _ = write!(
                t,
                "# Transactions\r\nlone_ops:{}\r\ncommits:{}\r\nconflicts:{}\r\nbusy_retries:{}\r\nrefused_while_not_serving:{}\r\ninstalls_superseded:{}\r\n\r\n",
                total.ops, total.commits, total.conflicts, total.busy, total.refused_stale, total.installs_superseded
            );
        }
        if want("gossip") {
            let peers = sh.cluster.as_ref().map_or(0, |cl| cl.peer_info().len());
            let _ = write!(
                t,
                "# Gossip\r\nmerge_epoch_ms:{}\r\nlattices_flushed:{}\r\npeers:{peers}\r\nremote_parts_waiting:{}\r\nremote_parts_shown_alone:{}\r\n\r\n",
                c.merge_epoch_ms, total.gossiped, total.parts_waiting, total.parts_alone
            );
        }
        if want("replication") {
            let pending: usize = stats.iter().map(|s| s.gossip_pending).sum();
            self.info_replication(&mut t, pending);
        }
        if want("keyspace") {
            let _ = write!(t, "# Keyspace\r\n");
            for (db, keys, expires) in self.keyspace().await.unwrap_or_default() {
                let _ = write!(t, "db{db}:keys={keys},expires={expires},avg_ttl=0\r\n");
            }
        }
        self.w().verbatim(&t);
    }
}

fn sum(stats: &[ShardStats]) -> ShardStats {
    let mut t = ShardStats::default();
    for s in stats {
        t.records += s.records;
        t.live += s.live;
        t.expires += s.expires;
        t.memory += s.memory;
        t.ops += s.ops;
        t.commits += s.commits;
        t.conflicts += s.conflicts;
        t.busy += s.busy;
        t.expired += s.expired;
        t.gossiped += s.gossiped;
        t.parts_waiting += s.parts_waiting;
        t.parts_alone += s.parts_alone;
        t.refused_stale += s.refused_stale;
        t.installs_superseded += s.installs_superseded;
    }
    t
}

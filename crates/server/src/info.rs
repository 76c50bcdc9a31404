//! INFO sections and CONFIG GET values.

use std::fmt::Write as _;

use bytes::Bytes;

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
        ("max-args".into(), c.max_args.to_string()),
        (
            "default-isolation".into(),
            c.default_isolation.name().into(),
        ),
        ("node-id".into(), c.node_id.to_string()),
        ("merge-epoch-ms".into(), c.merge_epoch_ms.to_string()),
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
        // Redis parameters clients probe; Elsa's answers for them.
        ("databases".into(), c.databases.to_string()),
        ("appendonly".into(), "yes".into()),
        ("cluster-enabled".into(), "no".into()),
    ]
}

impl Conn {
    /// INFO [section …]
    pub(crate) async fn info(&mut self, args: &[Bytes]) {
        let sections = crate::info_sections::Sections::of(&args[1..]);
        let want = |name: &str| sections.wants(name);
        let stats = match self.shard_stats().await {
            Ok(s) => s,
            Err(e) => return self.w().error(&e.to_string()),
        };
        let total = crate::info_sections::sum(&stats);
        let sh = &self.shared;
        let c = &sh.config;
        let mut t = String::new();
        let totals = sh.cmdstats.totals();
        let counters = crate::info_sections::ShardCounters::of(sh, &stats);
        if want("server") {
            crate::info_sections::server(&mut t, sh);
        }
        if want("clients") {
            let _ = write!(t, "{}", crate::clients::info::section(sh));
        }
        if want("memory") {
            let f = crate::memory::report::Figures::measure(
                &sh.memory,
                total.memory as u64,
                total.live as u64,
            );
            let scripts = sh.scripts.cache.size();
            let (libraries, functions) = sh.scripts.functions.counts();
            t.push_str(&crate::memory::report::info_section(
                &sh.memory,
                &f,
                scripts,
                (functions, libraries),
                sh.scripts.pool.lua_memory(),
            ));
        }
        if want("persistence") {
            crate::info_sections::persistence(&mut t, sh, &stats);
        }
        if want("stats") {
            crate::info_sections::stats(&mut t, sh, &totals, &counters);
        }
        if want("transactions") {
            crate::info_sections::transactions(&mut t, sh, &totals, &total);
        }
        if want("gossip") {
            let peers = sh.cluster.as_ref().map_or(0, |cl| cl.peer_info().len());
            let _ = write!(
                t,
                "# Gossip\r\nmerge_epoch_ms:{}\r\nlattices_flushed:{}\r\npeers:{peers}\r\nremote_parts_waiting:{}\r\nremote_parts_shown_alone:{}\r\ncollector_records_visited:{}\r\n\r\n",
                c.merge_epoch_ms, total.gossiped, total.parts_waiting, total.parts_alone, total.gc_visited
            );
        }
        if want("replication") {
            let pending: usize = stats.iter().map(|s| s.gossip_pending).sum();
            self.info_replication(&mut t, pending);
        }
        if want("cpu") {
            crate::info_sections::cpu(&mut t);
        }
        if want("commandstats") {
            crate::info_sections::commandstats(&mut t, &totals);
        }
        if want("errorstats") {
            crate::info_sections::errorstats(&mut t, &totals);
        }
        if want("latencystats") {
            crate::info_sections::latencystats(&mut t, &self.shared, &totals);
        }
        if want("cluster") {
            crate::info_sections::cluster(&mut t);
        }
        if want("keyspace") {
            let rows = self.keyspace().await.unwrap_or_default();
            crate::info_sections::keyspace(&mut t, &rows);
        }
        if want("regions") {
            crate::info_sections::regions(&mut t, &self.shared);
        }
        self.w().verbatim(&t);
    }
}

//! What the node says about its memory: INFO's `# Memory` section and the
//! MEMORY subcommands other than USAGE (STATS, DOCTOR, MALLOC-STATS,
//! PURGE), with Redis 7.0's names and texts (`genRedisInfoString`,
//! `memoryCommand`, `getMemoryDoctorReport`).

use std::fmt::Write as _;

use bytes::Bytes;

use super::{human, rss_bytes, total_system_memory, Allocator, Memory};
use crate::cmd::{c_str, is};
use crate::conn::Conn;

/// The figures one report is made of, measured together.
pub struct Figures {
    /// The allocator's figures.
    pub alloc: Allocator,
    /// Process RSS.
    pub rss: u64,
    /// Highest `used_memory` seen.
    pub peak: u64,
    /// `used_memory` after start.
    pub startup: u64,
    /// The shards' own accounting of their tables (`Table::memory`).
    pub dataset: u64,
    /// Live keys.
    pub keys: u64,
}

fn ratio(a: u64, b: u64) -> f64 {
    if b == 0 {
        0.0
    } else {
        a as f64 / b as f64
    }
}

impl Figures {
    /// Measures now; `dataset` and `keys` from the shards' statistics.
    pub fn measure(mem: &Memory, dataset: u64, keys: u64) -> Figures {
        let alloc = mem.sample();
        Figures {
            alloc,
            rss: rss_bytes(),
            peak: mem.peak().max(alloc.allocated),
            startup: mem.startup(),
            dataset,
            keys,
        }
    }

    fn used(&self) -> u64 {
        self.alloc.allocated
    }

    /// Everything allocated that is not the dataset (Redis's
    /// `overhead_total`: startup, buffers, tables' own structures).
    fn overhead(&self) -> u64 {
        self.used().saturating_sub(self.dataset)
    }

    fn dataset_perc(&self) -> f64 {
        100.0 * ratio(self.dataset, self.used().saturating_sub(self.startup))
    }

    fn peak_perc(&self) -> f64 {
        100.0 * ratio(self.used(), self.peak)
    }
}

/// INFO's `# Memory` section. `scripts`: cached scripts and their bytes;
/// `functions`: functions and libraries loaded; `lua`: the bytes of the
/// script threads' Lua states (one per thread runs both scripts and
/// functions, so it is all reported as the scripts' VM, as Redis's
/// `used_memory_vm_eval`, and the functions' VM as 0).
pub fn info_section(
    mem: &Memory,
    f: &Figures,
    scripts: (usize, usize),
    functions: (usize, usize),
    lua: usize,
) -> String {
    let a = &f.alloc;
    let limit = &mem.limit;
    let system = total_system_memory();
    let mut t = String::from("# Memory\r\n");
    let _ = write!(
        t,
        "used_memory:{}\r\nused_memory_human:{}\r\nused_memory_rss:{}\r\nused_memory_rss_human:{}\r\nused_memory_peak:{}\r\nused_memory_peak_human:{}\r\nused_memory_peak_perc:{:.2}%\r\nused_memory_overhead:{}\r\nused_memory_startup:{}\r\nused_memory_dataset:{}\r\nused_memory_dataset_perc:{:.2}%\r\n",
        f.used(),
        human(f.used()),
        f.rss,
        human(f.rss),
        f.peak,
        human(f.peak),
        f.peak_perc(),
        f.overhead(),
        f.startup,
        f.dataset,
        f.dataset_perc(),
    );
    let _ = write!(
        t,
        "allocator_allocated:{}\r\nallocator_active:{}\r\nallocator_resident:{}\r\ntotal_system_memory:{system}\r\ntotal_system_memory_human:{}\r\nused_memory_lua:{lua}\r\nused_memory_vm_eval:{lua}\r\nused_memory_lua_human:{}\r\nused_memory_scripts_eval:{}\r\nnumber_of_cached_scripts:{}\r\nnumber_of_functions:{}\r\nnumber_of_libraries:{}\r\nused_memory_vm_functions:0\r\nused_memory_vm_total:{lua}\r\nused_memory_vm_total_human:{}\r\nused_memory_functions:0\r\nused_memory_scripts:{}\r\nused_memory_scripts_human:{}\r\nmaxmemory:{}\r\nmaxmemory_human:{}\r\nmaxmemory_policy:{}\r\n",
        a.allocated,
        a.active,
        a.resident,
        human(system),
        human(lua as u64),
        scripts.1,
        scripts.0,
        functions.0,
        functions.1,
        human(lua as u64),
        scripts.1,
        human(scripts.1 as u64),
        limit.maxmemory(),
        human(limit.maxmemory()),
        limit.policy().name(),
    );
    let _ = write!(
        t,
        "allocator_frag_ratio:{:.2}\r\nallocator_frag_bytes:{}\r\nallocator_rss_ratio:{:.2}\r\nallocator_rss_bytes:{}\r\nrss_overhead_ratio:{:.2}\r\nrss_overhead_bytes:{}\r\nmem_fragmentation_ratio:{:.2}\r\nmem_fragmentation_bytes:{}\r\nmem_not_counted_for_evict:{}\r\nmem_allocator:{}\r\nactive_defrag_running:0\r\nlazyfree_pending_objects:0\r\nlazyfreed_objects:0\r\n\r\n",
        ratio(a.active, a.allocated),
        a.active.saturating_sub(a.allocated),
        ratio(a.resident, a.active),
        a.resident as i64 - a.active as i64,
        ratio(f.rss, a.resident),
        f.rss as i64 - a.resident as i64,
        ratio(f.rss, f.used()),
        f.rss as i64 - f.used() as i64,
        limit.not_counted(),
        allocator_name(),
    );
    t
}

/// `jemalloc-5.3.0`, as Redis's `ZMALLOC_LIB`.
fn allocator_name() -> String {
    let v = tikv_jemalloc_ctl::version::read().unwrap_or("unknown");
    format!("jemalloc-{}", v.split('-').next().unwrap_or(v))
}

/// MEMORY DOCTOR's report (Redis's checks that apply to Elsa: the empty
/// instance, peak, and the fragmentation and RSS overheads).
pub fn doctor(f: &Figures) -> String {
    const MB10: u64 = 10 << 20;
    let a = &f.alloc;
    if f.used() < 5 << 20 {
        return "Hi Sam, this instance is empty or is using very little memory, my issues detector can't be used in these conditions. Please, leave for your mission on Earth and fill it with some data. The new Sam and I will be back to our programming as soon as I finished rebooting.\n".into();
    }
    let mut issues = Vec::new();
    if ratio(f.peak, f.used()) > 1.5 {
        issues.push(" * Peak memory: In the past this instance used more than 150% the memory that is currently using. The allocator is normally not able to release memory after a peak, so you can expect to see a big fragmentation ratio, however this is actually harmless and is only due to the memory peak, and if the Redis instance Resident Set Size (RSS) is currently bigger than expected, the memory will be used as soon as you fill the Redis instance with more data. If the memory peak was only occasional and you want to try to reclaim memory, please try the MEMORY PURGE command, otherwise the only other option is to shutdown and restart the instance.\n\n".to_string());
    }
    if ratio(f.rss, f.used()) > 1.4 && f.rss.saturating_sub(f.used()) > MB10 {
        issues.push(format!(" * High total RSS: This instance has a memory fragmentation and RSS overhead greater than 1.4 (this means that the Resident Set Size of the Redis process is much larger than the sum of the logical allocations Redis performed). This problem is usually due either to a large peak memory (check if there is a peak memory entry above in the report) or may result from a workload that causes the allocator to fragment memory a lot. If the problem is a large peak memory, then there is no issue. Otherwise, make sure you are using the Jemalloc allocator and not the default libc malloc. Note: The currently used allocator is \"{}\".\n\n", allocator_name()));
    }
    if ratio(a.active, a.allocated) > 1.1 && a.active.saturating_sub(a.allocated) > MB10 {
        issues.push(" * High allocator fragmentation: This instance has an allocator external fragmentation greater than 1.1. This problem is usually due either to a large peak memory (check if there is a peak memory entry above in the report) or may result from a workload that causes the allocator to fragment memory a lot. You can try enabling 'activedefrag' config option.\n\n".to_string());
    }
    if ratio(a.resident, a.active) > 1.1 && a.resident.saturating_sub(a.active) > MB10 {
        issues.push(" * High allocator RSS overhead: This instance has an RSS memory overhead is greater than 1.1 (this means that the Resident Set Size of the allocator is much larger than the sum what the allocator actually holds). This problem is usually due to a large peak memory (check if there is a peak memory entry above in the report), you can try the MEMORY PURGE command to reclaim it.\n\n".to_string());
    }
    if ratio(f.rss, a.resident) > 1.1 && f.rss.saturating_sub(a.resident) > MB10 {
        issues.push(" * High process RSS overhead: This instance has non-allocator RSS memory overhead is greater than 1.1 (this means that the Resident Set Size of the Redis process is much larger than the RSS the allocator holds). This problem may be due to Lua scripts or Modules.\n\n".to_string());
    }
    if issues.is_empty() {
        return "Hi Sam, I can't find any memory issue in your instance. I can only account for what occurs on this base.\n".into();
    }
    let mut s =
        String::from("Sam, I detected a few issues in this Redis instance memory implants:\n\n");
    for i in issues {
        s.push_str(&i);
    }
    s.push_str("I'm here to keep you safe, Sam. I want to help you.\n");
    s
}

/// jemalloc's own statistics report (`malloc_stats_print`).
fn malloc_stats() -> String {
    let mut out = Vec::new();
    let opts = tikv_jemalloc_ctl::stats_print::Options::default();
    match tikv_jemalloc_ctl::stats_print::stats_print(&mut out, opts) {
        Ok(()) => String::from_utf8_lossy(&out).into_owned(),
        Err(_) => "Stats not supported for the current allocator".into(),
    }
}

impl Conn {
    /// MEMORY STATS|DOCTOR|MALLOC-STATS|PURGE (the subcommand table has
    /// checked the subcommand and its count; USAGE and HELP are data
    /// commands, `cmd/object.rs`).
    pub(crate) async fn memory_cmd(&mut self, args: &[Bytes]) {
        let sub = c_str(&args[1]);
        if is(sub, "PURGE") {
            return if super::purge() {
                self.w().simple("OK")
            } else {
                self.w().error("ERR Error purging dirty pages")
            };
        }
        if is(sub, "MALLOC-STATS") {
            let text = malloc_stats();
            return self.w().verbatim(&text);
        }
        let stats = match self.shard_stats().await {
            Ok(s) => s,
            Err(e) => return self.w().error(&e.to_string()),
        };
        let dataset = stats.iter().map(|s| s.memory as u64).sum();
        let keys = stats.iter().map(|s| s.live as u64).sum();
        let f = Figures::measure(&self.shared.memory, dataset, keys);
        if is(sub, "DOCTOR") {
            let text = doctor(&f);
            return self.w().verbatim(&text);
        }
        // STATS: Redis's map, less what Elsa has no counterpart of
        // (per-database hash table overheads, Lua and function caches).
        let a = f.alloc;
        let ints: [(&str, i64); 9] = [
            ("peak.allocated", f.peak as i64),
            ("total.allocated", f.used() as i64),
            ("startup.allocated", f.startup as i64),
            ("replication.backlog", 0),
            ("clients.slaves", 0),
            ("overhead.total", f.overhead() as i64),
            ("keys.count", f.keys as i64),
            (
                "keys.bytes-per-key",
                f.used()
                    .saturating_sub(f.startup)
                    .checked_div(f.keys)
                    .unwrap_or(0) as i64,
            ),
            ("dataset.bytes", f.dataset as i64),
        ];
        let tail: [(&str, Result<i64, f64>); 13] = [
            ("dataset.percentage", Err(f.dataset_perc())),
            ("peak.percentage", Err(f.peak_perc())),
            ("allocator.allocated", Ok(a.allocated as i64)),
            ("allocator.active", Ok(a.active as i64)),
            ("allocator.resident", Ok(a.resident as i64)),
            (
                "allocator-fragmentation.ratio",
                Err(ratio(a.active, a.allocated)),
            ),
            (
                "allocator-fragmentation.bytes",
                Ok(a.active as i64 - a.allocated as i64),
            ),
            ("allocator-rss.ratio", Err(ratio(a.resident, a.active))),
            (
                "allocator-rss.bytes",
                Ok(a.resident as i64 - a.active as i64),
            ),
            ("rss-overhead.ratio", Err(ratio(f.rss, a.resident))),
            ("rss-overhead.bytes", Ok(f.rss as i64 - a.resident as i64)),
            ("fragmentation", Err(ratio(f.rss, f.used()))),
            ("fragmentation.bytes", Ok(f.rss as i64 - f.used() as i64)),
        ];
        let mut w = self.w();
        w.map(ints.len() + tail.len());
        for (k, v) in ints {
            w.bulk(k.as_bytes());
            w.int(v);
        }
        for (k, v) in tail {
            w.bulk(k.as_bytes());
            match v {
                Ok(n) => w.int(n),
                Err(d) => w.double(d),
            }
        }
    }
}

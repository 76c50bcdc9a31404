//! Memory, node-wide: what the node uses (the allocator's figures, as
//! Redis's `zmalloc_used_memory` and `zmalloc_get_allocator_info`), the
//! sampler thread that measures it and tells the shards how far over
//! `maxmemory` they are (`elsa_shard::evict`), the `-OOM` refusal of
//! commands Redis flags `denyoom`, the memory settings of CONFIG GET/SET,
//! INFO's `# Memory` section, and MEMORY STATS, DOCTOR, MALLOC-STATS and
//! PURGE. MEMORY USAGE is a per-key op (`cmd/object.rs`).

mod denyoom;
pub mod report;

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use elsa_shard::evict::{MemoryLimit, Policy};

use crate::cmd::Spec;

/// Redis's reply to a `denyoom` command while over the limit.
pub const ERR_OOM: &str = "OOM command not allowed when used memory > 'maxmemory'.";

/// How often the sampler measures while a limit is set. Between two
/// measurements shards go by their own estimate of what they freed.
const SAMPLE_LIMITED: Duration = Duration::from_millis(10);
/// How often it measures with no limit (the peak, for INFO).
const SAMPLE_IDLE: Duration = Duration::from_millis(100);

/// The allocator's figures at one moment (jemalloc's `stats.*`).
#[derive(Clone, Copy, Debug, Default)]
pub struct Allocator {
    /// Bytes the program holds (`stats.allocated`): `used_memory`.
    pub allocated: u64,
    /// Bytes in active pages (`stats.active`).
    pub active: u64,
    /// Bytes in resident pages the allocator maps (`stats.resident`).
    pub resident: u64,
}

impl Allocator {
    /// Reads jemalloc's statistics (refreshed first: they are cached per
    /// epoch). Zeros when jemalloc is not the allocator (unit tests).
    pub fn read() -> Allocator {
        use tikv_jemalloc_ctl::{epoch, stats};
        if epoch::advance().is_err() {
            return Allocator::default();
        }
        Allocator {
            allocated: stats::allocated::read().unwrap_or(0) as u64,
            active: stats::active::read().unwrap_or(0) as u64,
            resident: stats::resident::read().unwrap_or(0) as u64,
        }
    }
}

/// The process's resident set size (`/proc/self/statm`), Redis's
/// `used_memory_rss`.
pub fn rss_bytes() -> u64 {
    // SAFETY: sysconf has no preconditions.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) }.max(4096) as u64;
    std::fs::read_to_string("/proc/self/statm")
        .ok()
        .and_then(|s| s.split_whitespace().nth(1)?.parse::<u64>().ok())
        .map_or(0, |pages| pages * page)
}

/// The machine's memory (`/proc/meminfo`'s MemTotal), 0 if unknown.
pub fn total_system_memory() -> u64 {
    std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|s| {
            let line = s.lines().find(|l| l.starts_with("MemTotal:"))?;
            line.split_whitespace().nth(1)?.parse::<u64>().ok()
        })
        .map_or(0, |kb| kb * 1024)
}

/// The node's memory state: the limit shared with the shards, and the
/// figures Redis reports beside `used_memory`.
#[derive(Debug, Default)]
pub struct Memory {
    /// `maxmemory` and its policy, shared with every shard.
    pub limit: Arc<MemoryLimit>,
    peak: AtomicU64,
    startup: AtomicU64,
}

impl Memory {
    /// The settings the node starts with.
    pub fn from_settings(s: &crate::config::MemorySettings) -> Memory {
        let m = Memory::default();
        m.limit.set_maxmemory(s.maxmemory);
        m.limit.set_policy(s.policy);
        m.limit.set_samples(s.samples);
        m.limit.set_lfu_log_factor(s.lfu_log_factor);
        m.limit.set_lfu_decay_time(s.lfu_decay_time);
        m
    }

    /// The highest `used_memory` seen (Redis's `stat_peak_memory`).
    pub fn peak(&self) -> u64 {
        self.peak.load(Relaxed)
    }

    /// `used_memory` once the node had started (`used_memory_startup`).
    pub fn startup(&self) -> u64 {
        self.startup.load(Relaxed)
    }

    /// Measures now: publishes the excess to the shards, keeps the peak.
    pub fn sample(&self) -> Allocator {
        let a = Allocator::read();
        self.peak.fetch_max(a.allocated, Relaxed);
        self.limit.set_used(a.allocated);
        a
    }

    /// Starts the sampler thread (once the node has started: what is
    /// allocated then is `used_memory_startup`). `streams` measures the
    /// frames the node keeps for other regions, which the limit does not
    /// count (with the shards' gossip buffers, which they report).
    pub fn start_sampler(
        self: &Arc<Self>,
        shards: usize,
        streams: Option<Box<dyn Fn() -> u64 + Send>>,
    ) -> std::io::Result<()> {
        self.limit.set_shards(shards);
        // Pages freed after a burst go back to the system within
        // jemalloc's decay time (10 s) even when nothing allocates after
        // it, as Redis's `jemalloc-bg-thread yes` (its default) does;
        // without it a quiet node kept the burst's RSS for good.
        let _ = tikv_jemalloc_ctl::background_thread::write(true);
        let a = self.sample();
        self.startup.store(a.allocated, Relaxed);
        let me = self.clone();
        std::thread::Builder::new()
            .name("elsa-memory".into())
            .spawn(move || loop {
                if let Some(bytes) = &streams {
                    me.limit.set_streams(bytes());
                }
                me.sample();
                std::thread::sleep(if me.limit.maxmemory() > 0 {
                    SAMPLE_LIMITED
                } else {
                    SAMPLE_IDLE
                });
            })?;
        Ok(())
    }

    /// True when `spec` (with `args`) must be refused with [`ERR_OOM`] now:
    /// the node is over its limit with nothing left to evict, and the
    /// command is one Redis refuses then (`processCommand`): flagged
    /// `denyoom`, any command queued in MULTI but EXEC, DISCARD, QUIT and
    /// RESET, and EXEC of a queue holding a `denyoom` command. One relaxed
    /// load when not over.
    pub fn refuses(&self, spec: &Spec, args: &[Bytes], queued: Option<&[Vec<Bytes>]>) -> bool {
        if !self.limit.oom() {
            return false;
        }
        match (spec.name, queued) {
            ("exec", Some(q)) => q.iter().any(|a| denyoom_request(a)),
            ("exec" | "discard" | "quit" | "reset", _) => false,
            (_, Some(_)) => true,
            _ => denyoom_request(args),
        }
    }
}

/// True for the MEMORY subcommands about the whole node (STATS, DOCTOR,
/// MALLOC-STATS, PURGE), which `report` answers; USAGE and HELP are data
/// commands.
pub fn node_wide(args: &[Bytes]) -> bool {
    args.get(1).is_some_and(|s| {
        ["STATS", "DOCTOR", "MALLOC-STATS", "PURGE"]
            .iter()
            .any(|n| s.eq_ignore_ascii_case(n.as_bytes()))
    })
}

/// True for a request Redis flags `denyoom` (a subcommand by its
/// `container|sub` name). Elsa's own PUT writes a value like SET.
fn denyoom_request(args: &[Bytes]) -> bool {
    let Some(name) = args.first() else {
        return false;
    };
    let name = String::from_utf8_lossy(name).to_ascii_lowercase();
    if name == "put" {
        return true;
    }
    let full = match args.get(1) {
        Some(sub) => format!(
            "{name}|{}",
            String::from_utf8_lossy(sub).to_ascii_lowercase()
        ),
        None => String::new(),
    };
    denyoom::DENYOOM.binary_search(&name.as_str()).is_ok()
        || denyoom::DENYOOM.binary_search(&full.as_str()).is_ok()
}

/// Redis's `bytesToHuman`.
pub fn human(n: u64) -> String {
    const K: f64 = 1024.0;
    let d = n as f64;
    if n < 1024 {
        format!("{n}B")
    } else if d < K * K {
        format!("{:.2}K", d / K)
    } else if d < K * K * K {
        format!("{:.2}M", d / (K * K))
    } else if d < K * K * K * K {
        format!("{:.2}G", d / (K * K * K))
    } else if d < K * K * K * K * K {
        format!("{:.2}T", d / (K * K * K * K))
    } else if d < K * K * K * K * K * K {
        format!("{:.2}P", d / (K * K * K * K * K))
    } else {
        format!("{n}B")
    }
}

/// A parsed memory setting, ready to apply.
enum Setting {
    Maxmemory(u64),
    Policy(Policy),
    Samples(u32),
    LogFactor(u32),
    DecayTime(u32),
}

/// An int setting in `lo..=hi`, with Redis's errors.
fn int_in(value: &str, lo: i64, hi: i64) -> Result<u32, String> {
    let v: i64 = value
        .parse()
        .map_err(|_| "argument couldn't be parsed into an integer".to_string())?;
    if v < lo || v > hi {
        return Err(format!("argument must be between {lo} and {hi} inclusive"));
    }
    Ok(v as u32)
}

fn parse_setting(key: &str, value: &str) -> Result<Setting, String> {
    const INT_MAX: i64 = i32::MAX as i64;
    Ok(match key {
        "maxmemory" => Setting::Maxmemory(
            crate::config::parse_memory(value)
                .ok_or_else(|| "argument must be a memory value".to_string())?,
        ),
        "maxmemory-policy" => Setting::Policy(Policy::parse(value).ok_or_else(|| {
            let names: Vec<&str> = Policy::ALL.iter().map(|p| p.name()).collect();
            format!(
                "argument(s) must be one of the following: {}",
                names.join(", ")
            )
        })?),
        "maxmemory-samples" => Setting::Samples(int_in(value, 1, INT_MAX)?),
        "lfu-log-factor" => Setting::LogFactor(int_in(value, 0, INT_MAX)?),
        "lfu-decay-time" => Setting::DecayTime(int_in(value, 0, INT_MAX)?),
        _ => return Err("unknown memory setting".into()),
    })
}

/// A memory setting of CONFIG SET (`crate::runtime::PARAMS`): checked
/// when parsed, applied with the other pairs ([`MemoryChange::apply`]).
pub struct MemoryChange(Setting);

impl MemoryChange {
    /// Parses `value` for the setting `key`, with Redis's errors.
    pub fn parse(key: &str, value: &str) -> Result<MemoryChange, String> {
        parse_setting(key, value).map(MemoryChange)
    }

    /// Applies it, then measures memory again at once so the next command
    /// already meets the new limit.
    pub fn apply(self, memory: &Memory) {
        let limit = &memory.limit;
        match self.0 {
            Setting::Maxmemory(v) => limit.set_maxmemory(v),
            Setting::Policy(p) => limit.set_policy(p),
            Setting::Samples(n) => limit.set_samples(n),
            Setting::LogFactor(n) => limit.set_lfu_log_factor(n),
            Setting::DecayTime(n) => limit.set_lfu_decay_time(n),
        }
        memory.sample();
    }
}

/// Gives the calling thread a jemalloc arena of its own: each shard's
/// worker allocates its records from its own arena, as the shards are
/// one per core. The binary starts jemalloc with one arena for every
/// other thread (`src/main.rs`): with the heap in huge pages, jemalloc's
/// default of four arenas per CPU cost a 2 MiB page or two each, 16 MB
/// on two cores and half a gigabyte on thirty-two. Does nothing (the
/// thread keeps the shared arena) when jemalloc refuses.
pub fn own_arena() {
    // SAFETY: NUL-terminated jemalloc control names with the value types
    // jemalloc documents for them (`unsigned` both).
    unsafe {
        if let Ok(arena) = tikv_jemalloc_ctl::raw::read::<u32>(b"arenas.create\0") {
            let _ = tikv_jemalloc_ctl::raw::write(b"thread.arena\0", arena);
        }
    }
}

/// MEMORY PURGE: returns dirty pages of every arena to the system (Redis's
/// `jemalloc_purge`). True when jemalloc did.
pub fn purge() -> bool {
    // jemalloc's `arena.<MALLCTL_ARENAS_ALL>.purge` takes neither an old
    // nor a new value; tikv-jemalloc-ctl's calls always pass one, so this
    // one call goes to jemalloc itself.
    let name = b"arena.4096.purge\0";
    // SAFETY: a NUL-terminated control name, and null value pointers with
    // zero lengths, which this control requires.
    let rc = unsafe {
        tikv_jemalloc_sys::mallctl(
            name.as_ptr().cast(),
            std::ptr::null_mut(),
            std::ptr::null_mut(),
            std::ptr::null_mut(),
            0,
        )
    };
    rc == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(line: &str) -> Vec<Bytes> {
        line.split(' ')
            .map(|s| Bytes::copy_from_slice(s.as_bytes()))
            .collect()
    }

    #[test]
    fn human_matches_redis() {
        assert_eq!(human(1000), "1000B");
        assert_eq!(human(1024), "1.00K");
        assert_eq!(human(1536 * 1024), "1.50M");
        assert_eq!(human(3 << 30), "3.00G");
    }

    #[test]
    fn settings_parse_with_redis_errors() {
        // All-or-nothing across pairs is `crate::runtime::config_set`'s
        // (tests/ops_memory.rs checks it against Redis).
        let e = |k, v| parse_setting(k, v).err().unwrap_or_default();
        assert!(e("maxmemory-policy", "bogus").starts_with("argument(s) must be one of"));
        assert_eq!(e("maxmemory", "1xb"), "argument must be a memory value");
        assert_eq!(
            e("maxmemory-samples", "0"),
            "argument must be between 1 and 2147483647 inclusive"
        );
        assert!(matches!(
            parse_setting("maxmemory-policy", "ALLKEYS-LFU"),
            Ok(Setting::Policy(Policy::AllkeysLfu))
        ));
        assert!(matches!(
            parse_setting("maxmemory", "10mb"),
            Ok(Setting::Maxmemory(n)) if n == 10 << 20
        ));
    }

    #[test]
    fn denyoom_follows_redis_flags() {
        for w in ["SET k v", "lpush l x", "PUT k v", "incr n", "sadd s m"] {
            assert!(denyoom_request(&args(w)), "{w}");
        }
        for r in ["GET k", "DEL k", "getdel k", "expire k 10", "lpop l"] {
            assert!(!denyoom_request(&args(r)), "{r}");
        }
    }
}

//! Runtime configuration: the parameters CONFIG SET changes while the node
//! runs, each read by the code it governs from an atomic (or, off the hot
//! path, a mutex), and CONFIG SET's all-or-nothing application, with Redis
//! 7.0's errors (`config.c`: `configSetCommand`).
//!
//! Adding a parameter: one [`Param`] row in [`PARAMS`] — its name, a
//! `check` that parses the value into a [`Change`] (or Redis's error text)
//! without touching anything, and a `get` for CONFIG GET. A CONFIG SET of
//! several pairs checks every value first and applies only when all are
//! good, so no pair is applied alone.

use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::Mutex;

use bytes::Bytes;

use crate::node::Shared;

/// The introspection settings as the configuration gave them at startup.
#[derive(Debug, Clone)]
pub struct Startup {
    pub slowlog_log_slower_than: i64,
    pub slowlog_max_len: u64,
    pub latency_monitor_threshold: u64,
    pub latency_tracking: bool,
    pub latency_tracking_info_percentiles: Vec<f64>,
}

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
}

/// Shard counters CONFIG RESETSTAT zeroes, as they were when it ran.
#[derive(Clone, Copy, Debug, Default)]
pub struct ShardBaseline {
    pub keyspace_hits: u64,
    pub keyspace_misses: u64,
    pub expired: u64,
}

impl ShardBaseline {
    pub fn of(stats: &[elsa_shard::ShardStats]) -> ShardBaseline {
        let mut b = ShardBaseline::default();
        for s in stats {
            b.keyspace_hits += s.keyspace_hits;
            b.keyspace_misses += s.keyspace_misses;
            b.expired += s.expired;
        }
        b
    }
}

impl Runtime {
    pub fn new(s: &Startup) -> Runtime {
        Runtime {
            latency_tracking: AtomicBool::new(s.latency_tracking),
            percentiles: Mutex::new(s.latency_tracking_info_percentiles.clone()),
            shard_baseline: Mutex::new(ShardBaseline::default()),
        }
    }

    pub fn percentiles(&self) -> Vec<f64> {
        self.percentiles
            .lock()
            .map(|p| p.clone())
            .unwrap_or_default()
    }
}

/// A checked value, applied once every pair of the CONFIG SET is good.
pub type Change = Box<dyn FnOnce(&Shared) + Send>;

/// One parameter CONFIG SET may change.
pub struct Param {
    /// Redis's name, lowercase.
    pub name: &'static str,
    /// Parses a value: what to apply, or the error text Redis gives.
    pub check: fn(&str) -> Result<Change, String>,
    /// Its value as CONFIG GET answers.
    pub get: fn(&Shared) -> String,
}

/// Every parameter CONFIG SET changes (besides the `tls-*` ones,
/// `crate::tls`).
pub static PARAMS: &[Param] = &[
    Param {
        name: "slowlog-log-slower-than",
        check: |v| {
            let n = long_long(v, -1, i64::MAX)?;
            Ok(Box::new(move |s| s.slowlog.slower_than.store(n, Relaxed)))
        },
        get: |s| s.slowlog.slower_than.load(Relaxed).to_string(),
    },
    Param {
        name: "slowlog-max-len",
        check: |v| {
            let n = long_long(v, 0, i64::MAX)? as u64;
            Ok(Box::new(move |s| s.slowlog.set_max_len(n)))
        },
        get: |s| s.slowlog.max_len.load(Relaxed).to_string(),
    },
    Param {
        name: "latency-monitor-threshold",
        check: |v| {
            let n = long_long(v, 0, i64::MAX)? as u64;
            Ok(Box::new(move |s| s.latency.threshold_ms.store(n, Relaxed)))
        },
        get: |s| s.latency.threshold_ms.load(Relaxed).to_string(),
    },
    Param {
        name: "latency-tracking",
        check: |v| {
            let b = yes_no(v)?;
            Ok(Box::new(move |s| {
                s.runtime.latency_tracking.store(b, Relaxed)
            }))
        },
        get: |s| yes_no_text(s.runtime.latency_tracking.load(Relaxed)),
    },
    Param {
        name: "latency-tracking-info-percentiles",
        check: |v| {
            let p = parse_percentiles(v)?;
            Ok(Box::new(move |s| {
                if let Ok(mut cur) = s.runtime.percentiles.lock() {
                    *cur = p;
                }
            }))
        },
        get: |s| {
            s.runtime
                .percentiles()
                .iter()
                .map(|p| trim_double(*p))
                .collect::<Vec<_>>()
                .join(" ")
        },
    },
    // The memory limit (`crate::memory`).
    Param {
        name: "maxmemory",
        check: |v| crate::memory::config_change("maxmemory", v),
        get: |s| s.memory.limit.maxmemory().to_string(),
    },
    Param {
        name: "maxmemory-policy",
        check: |v| crate::memory::config_change("maxmemory-policy", v),
        get: |s| s.memory.limit.policy().name().to_string(),
    },
    Param {
        name: "maxmemory-samples",
        check: |v| crate::memory::config_change("maxmemory-samples", v),
        get: |s| s.memory.limit.samples().to_string(),
    },
    Param {
        name: "lfu-log-factor",
        check: |v| crate::memory::config_change("lfu-log-factor", v),
        get: |s| s.memory.limit.lfu_log_factor().to_string(),
    },
    Param {
        name: "lfu-decay-time",
        check: |v| crate::memory::config_change("lfu-decay-time", v),
        get: |s| s.memory.limit.lfu_decay_time().to_string(),
    },
];

/// The CONFIG GET pairs of [`PARAMS`].
pub fn pairs(shared: &Shared) -> Vec<(String, String)> {
    PARAMS
        .iter()
        .map(|p| (p.name.to_string(), (p.get)(shared)))
        .collect()
}

/// CONFIG SET's pairs (the arguments after `SET`), all applied or none:
/// `Ok`, or the whole error line. `immutable` tells a parameter Elsa knows
/// (CONFIG GET answers it) but cannot change while running.
pub fn config_set(
    shared: &Shared,
    args: &[Bytes],
    immutable: impl Fn(&str) -> bool,
) -> Result<(), String> {
    if !args.len().is_multiple_of(2) {
        return Err("ERR syntax error".into());
    }
    // Redis stops at the first name it refuses (unknown, immutable,
    // duplicate) and reports that one; only then does it check values.
    let mut unknown: Option<String> = None;
    let mut refused: Option<(String, &str)> = None;
    let mut ours: Vec<(&Param, String, String)> = Vec::new();
    let mut tls: Vec<(String, String)> = Vec::new();
    let mut seen: Vec<String> = Vec::new();
    for pair in args.chunks(2) {
        let given = String::from_utf8_lossy(&pair[0]).into_owned();
        let name = given.to_ascii_lowercase();
        let value = String::from_utf8_lossy(&pair[1]).into_owned();
        if unknown.is_some() || refused.is_some() {
            break;
        }
        let param = PARAMS.iter().find(|p| p.name == name);
        let is_tls = crate::tls::KEYS.contains(&name.as_str());
        if param.is_none() && !is_tls {
            if immutable(&name) {
                refused.get_or_insert((given, "can't set immutable config"));
            } else {
                unknown.get_or_insert(given);
            }
            continue;
        }
        if seen.contains(&name) {
            refused.get_or_insert((given, "duplicate parameter"));
            continue;
        }
        seen.push(name.clone());
        match param {
            Some(p) => ours.push((p, given, value)),
            None => tls.push((name, value)),
        }
    }
    if let Some(name) = unknown {
        return Err(format!(
            "ERR Unknown option or number of arguments for CONFIG SET - '{name}'"
        ));
    }
    if let Some((name, why)) = refused {
        return Err(failed(&name, why));
    }
    let mut changes = Vec::with_capacity(ours.len());
    for (p, given, value) in ours {
        changes.push((p.check)(&value).map_err(|why| failed(&given, &why))?);
    }
    // The TLS pairs are checked and applied together by `crate::tls`; ours
    // only once those succeeded, so a bad TLS value applies nothing.
    if !tls.is_empty() {
        shared
            .tls
            .reconfigure(&tls)
            .map_err(|(arg, why)| failed(&arg, &why))?;
    }
    for c in changes {
        c(shared);
    }
    Ok(())
}

/// CONFIG REWRITE: sets each `(name, value)` in the TOML file at `path`,
/// typed as the file's schema wants (`crate::config::Keys`), keeping its
/// other keys and its comments (`toml_edit`), and replaces the file whole
/// (a temporary file renamed over it).
pub fn rewrite(path: &std::path::Path, pairs: &[(String, String)]) -> Result<(), String> {
    let text = std::fs::read_to_string(path).map_err(|e| e.to_string())?;
    let mut doc: toml_edit::DocumentMut = text.parse().map_err(|e| format!("{e}"))?;
    for (name, value) in pairs {
        let item = match name.as_str() {
            "latency-tracking" => toml_edit::value(value == "yes"),
            "slowlog-log-slower-than"
            | "slowlog-max-len"
            | "latency-monitor-threshold"
            | "maxmemory-samples"
            | "lfu-log-factor"
            | "lfu-decay-time"
            | "tls-port" => match value.parse::<i64>() {
                Ok(n) => toml_edit::value(n),
                Err(_) => continue,
            },
            _ => toml_edit::value(value.as_str()),
        };
        doc[name.as_str()] = item;
    }
    let tmp = path.with_extension("rewrite.tmp");
    std::fs::write(&tmp, doc.to_string()).map_err(|e| e.to_string())?;
    std::fs::rename(&tmp, path).map_err(|e| e.to_string())
}

fn failed(name: &str, why: &str) -> String {
    format!("ERR CONFIG SET failed (possibly related to argument '{name}') - {why}")
}

/// An integer parameter as Redis parses one (`string2ll`, then its range).
fn long_long(v: &str, min: i64, max: i64) -> Result<i64, String> {
    let n: i64 = elsa_shard::ops::parse_i64(v.as_bytes())
        .ok_or_else(|| "argument couldn't be parsed into an integer".to_string())?;
    if n < min || n > max {
        return Err(format!(
            "argument must be between {min} and {max} inclusive"
        ));
    }
    Ok(n)
}

fn yes_no(v: &str) -> Result<bool, String> {
    match v.to_ascii_lowercase().as_str() {
        "yes" => Ok(true),
        "no" => Ok(false),
        _ => Err("argument must be 'yes' or 'no'".into()),
    }
}

fn yes_no_text(b: bool) -> String {
    if b { "yes" } else { "no" }.into()
}

/// `latency-tracking-info-percentiles`: numbers between 0 and 100
/// separated by spaces ("" = none), with Redis's errors.
pub fn parse_percentiles(v: &str) -> Result<Vec<f64>, String> {
    v.split(' ')
        .filter(|p| !p.is_empty())
        .map(|p| {
            let x: f64 = p
                .parse()
                .ok()
                .filter(|x: &f64| x.is_finite())
                .ok_or("Invalid latency-tracking-info-percentiles parameters")?;
            if !(0.0..=100.0).contains(&x) {
                return Err(
                    "latency-tracking-info-percentiles parameters should sit between [0.0,100.0]"
                        .to_string(),
                );
            }
            Ok(x)
        })
        .collect()
}

/// A double as Redis prints one in CONFIG GET and INFO (`%f` with its
/// trailing zeros and point trimmed: 99.9, 50).
pub fn trim_double(x: f64) -> String {
    let s = format!("{x:.6}");
    let s = s.trim_end_matches('0').trim_end_matches('.');
    s.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_are_parsed_as_redis() {
        assert_eq!(long_long("-1", -1, i64::MAX), Ok(-1));
        assert_eq!(
            long_long("-2", -1, i64::MAX).unwrap_err(),
            "argument must be between -1 and 9223372036854775807 inclusive"
        );
        assert_eq!(
            long_long("x", 0, 5).unwrap_err(),
            "argument couldn't be parsed into an integer"
        );
        assert_eq!(parse_percentiles("50 99 99.9"), Ok(vec![50.0, 99.0, 99.9]));
        assert_eq!(parse_percentiles(""), Ok(vec![]));
        assert!(parse_percentiles("101").is_err());
        assert!(parse_percentiles("abc").is_err());
        assert_eq!(trim_double(99.9), "99.9");
        assert_eq!(trim_double(50.0), "50");
        assert!(yes_no("maybe").is_err());
    }
}

//! CONFIG SET's parameters and its all-or-nothing application, with Redis
//! 7.0's errors (`config.c`: `configSetCommand`), and CONFIG REWRITE.
//!
//! Adding a parameter: one [`Param`] row in [`PARAMS`] — its name, a
//! `check` that parses the value into a [`Change`] (or Redis's error text)
//! without touching anything, and a `get` for CONFIG GET. A CONFIG SET of
//! several pairs checks every value first and applies only when all are
//! good, so no pair is applied alone.

use std::sync::atomic::Ordering::Relaxed;

use bytes::Bytes;

use super::trim_double;
use crate::state::Shared;

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
            let p = crate::config::parse_percentiles(v)?;
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
    // Clients' limits (`crate::conn`, the acceptor, pub/sub queues).
    Param {
        name: "maxclients",
        check: |v| {
            let n = long_long(v, 1, i64::from(u32::MAX))? as usize;
            Ok(Box::new(move |s| s.runtime.maxclients.store(n, Relaxed)))
        },
        get: |s| s.runtime.maxclients.load(Relaxed).to_string(),
    },
    Param {
        name: "proto-max-bulk-len",
        check: |v| {
            let n = at_least_1mb(v)?;
            Ok(Box::new(move |s| {
                s.runtime.proto_max_bulk_len.store(n, Relaxed)
            }))
        },
        get: |s| s.runtime.proto_max_bulk_len.load(Relaxed).to_string(),
    },
    Param {
        name: "client-query-buffer-limit",
        check: |v| {
            let n = at_least_1mb(v)?;
            Ok(Box::new(move |s| {
                s.runtime.query_buffer_limit.store(n, Relaxed)
            }))
        },
        get: |s| s.runtime.query_buffer_limit.load(Relaxed).to_string(),
    },
    Param {
        name: "client-output-buffer-limit",
        check: |v| {
            let classes = output_classes(v)?;
            Ok(Box::new(move |s| {
                let r = &s.runtime;
                for (class, limit) in classes {
                    match class {
                        OutputClass::Normal => {
                            r.output_hard.store(limit.hard, Relaxed);
                            r.output_soft.store(limit.soft, Relaxed);
                            r.output_soft_secs.store(limit.soft_secs, Relaxed);
                        }
                        OutputClass::Pubsub => {
                            *r.pubsub_output.lock().unwrap_or_else(|e| e.into_inner()) = limit;
                        }
                        // Elsa has no replica clients of Redis's kind.
                        OutputClass::Replica => {}
                    }
                }
            }))
        },
        get: |s| {
            let r = &s.runtime;
            let p = r.pubsub_output();
            format!(
                "normal {} {} {} slave 0 0 0 pubsub {} {} {}",
                r.output_hard.load(Relaxed),
                r.output_soft.load(Relaxed),
                r.output_soft_secs.load(Relaxed),
                p.hard,
                p.soft,
                p.soft_secs
            )
        },
    },
    Param {
        name: "client-output-buffer-limit-pubsub",
        check: |v| {
            let limit: crate::pubsub::Limit = v.parse()?;
            Ok(Box::new(move |s| {
                *s.runtime
                    .pubsub_output
                    .lock()
                    .unwrap_or_else(|e| e.into_inner()) = limit;
            }))
        },
        get: |s| s.runtime.pubsub_output().to_string(),
    },
    // Scripts (`crate::script`): when other clients start to get -BUSY.
    Param {
        name: "busy-reply-threshold",
        check: |v| {
            let n = long_long(v, 0, i64::MAX)? as u64;
            Ok(Box::new(move |s| s.scripts.set_threshold_ms(n)))
        },
        get: |s| s.scripts.threshold_ms().to_string(),
    },
    // ACL (`crate::acl`).
    Param {
        name: "acllog-max-len",
        check: |v| {
            let n = long_long(v, 0, i64::MAX)? as usize;
            Ok(Box::new(move |s| s.acl.set_log_max_len(n)))
        },
        get: |s| s.acl.log_max_len().to_string(),
    },
    Param {
        // As Redis: the default user's password becomes this one (none:
        // `nopass`), as `ACL SETUSER default resetpass >…` would.
        name: "requirepass",
        check: |v| {
            let v = v.to_string();
            Ok(Box::new(move |s| {
                let rules: Vec<Bytes> = if v.is_empty() {
                    vec![
                        Bytes::from_static(b"resetpass"),
                        Bytes::from_static(b"nopass"),
                    ]
                } else {
                    vec![
                        Bytes::from_static(b"resetpass"),
                        Bytes::from(format!(">{v}")),
                    ]
                };
                if let Err(e) = s.acl.set_user(b"default", &rules) {
                    tracing::warn!("CONFIG SET requirepass: {e}");
                }
                *s.runtime
                    .requirepass
                    .lock()
                    .unwrap_or_else(|e| e.into_inner()) = v;
            }))
        },
        get: |s| {
            s.runtime
                .requirepass
                .lock()
                .map(|p| p.clone())
                .unwrap_or_default()
        },
    },
    // The memory limit (`crate::memory`).
    Param {
        name: "maxmemory",
        check: |v| memory_change("maxmemory", v),
        get: |s| s.memory.limit.maxmemory().to_string(),
    },
    Param {
        name: "maxmemory-policy",
        check: |v| memory_change("maxmemory-policy", v),
        get: |s| s.memory.limit.policy().name().to_string(),
    },
    Param {
        name: "maxmemory-samples",
        check: |v| memory_change("maxmemory-samples", v),
        get: |s| s.memory.limit.samples().to_string(),
    },
    Param {
        name: "lfu-log-factor",
        check: |v| memory_change("lfu-log-factor", v),
        get: |s| s.memory.limit.lfu_log_factor().to_string(),
    },
    Param {
        name: "timeout",
        check: |v| {
            let n = long_long(v, 0, i64::from(i32::MAX))? as u64;
            Ok(Box::new(move |s| s.runtime.timeout_sec.store(n, Relaxed)))
        },
        get: |s| s.runtime.timeout_sec.load(Relaxed).to_string(),
    },
    Param {
        name: "appendfsync",
        check: |v| {
            let p: elsa_shard::wal::Fsync = v.to_ascii_lowercase().parse().map_err(|_| {
                "argument(s) must be one of the following: everysec, always, no".to_string()
            })?;
            Ok(Box::new(move |s| {
                if let Ok(mut cur) = s.runtime.appendfsync.lock() {
                    *cur = p;
                }
            }))
        },
        get: |s| s.runtime.appendfsync().name().to_string(),
    },
    Param {
        name: "save",
        check: |v| {
            let interval = save_interval(v)?;
            let text = normalized_save(v);
            Ok(Box::new(move |s| s.runtime.set_snapshots(interval, text)))
        },
        get: |s| s.runtime.save.lock().map(|t| t.clone()).unwrap_or_default(),
    },
    Param {
        name: "snapshot-interval-sec",
        check: |v| {
            let n = long_long(v, 0, i64::MAX)? as u64;
            Ok(Box::new(move |s| {
                s.runtime.set_snapshots(n, super::save_text(n))
            }))
        },
        get: |s| s.runtime.snapshot_interval_sec.load(Relaxed).to_string(),
    },
    Param {
        name: "stream-node-max-entries",
        check: |v| size_t(v, &elsa_shard::ops::limits::STREAM_NODE_ENTRIES),
        get: |_| limit(&elsa_shard::ops::limits::STREAM_NODE_ENTRIES),
    },
    Param {
        name: "stream-read-horizon",
        check: |v| {
            let on = crate::config::read_immediate(v).ok_or_else(|| {
                "argument(s) must be one of the following: converged, immediate".to_string()
            })?;
            Ok(Box::new(move |_| {
                elsa_shard::ops::streams::set_read_immediate(on)
            }))
        },
        get: |_| {
            if elsa_shard::ops::streams::read_immediate() {
                "immediate"
            } else {
                "converged"
            }
            .to_string()
        },
    },
    Param {
        name: "stream-node-max-bytes",
        check: |v| memory_size_t(v, &elsa_shard::ops::limits::STREAM_NODE_BYTES),
        get: |_| limit(&elsa_shard::ops::limits::STREAM_NODE_BYTES),
    },
    Param {
        name: "hash-max-listpack-entries",
        check: |v| size_t(v, &elsa_shard::ops::limits::HASH_ENTRIES),
        get: |_| limit(&elsa_shard::ops::limits::HASH_ENTRIES),
    },
    Param {
        name: "hash-max-listpack-value",
        check: |v| memory_size_t(v, &elsa_shard::ops::limits::HASH_VALUE),
        get: |_| limit(&elsa_shard::ops::limits::HASH_VALUE),
    },
    Param {
        name: "set-max-intset-entries",
        check: |v| size_t(v, &elsa_shard::ops::limits::SET_INTSET_ENTRIES),
        get: |_| limit(&elsa_shard::ops::limits::SET_INTSET_ENTRIES),
    },
    Param {
        name: "zset-max-listpack-entries",
        check: |v| size_t(v, &elsa_shard::ops::limits::ZSET_ENTRIES),
        get: |_| limit(&elsa_shard::ops::limits::ZSET_ENTRIES),
    },
    Param {
        name: "zset-max-listpack-value",
        check: |v| memory_size_t(v, &elsa_shard::ops::limits::ZSET_VALUE),
        get: |_| limit(&elsa_shard::ops::limits::ZSET_VALUE),
    },
    Param {
        name: "list-max-listpack-size",
        check: |v| {
            let n = long_long(v, i64::from(i32::MIN), i64::from(i32::MAX))?;
            Ok(Box::new(move |_| {
                elsa_shard::ops::limits::LIST_SIZE.store(n, Relaxed)
            }))
        },
        get: |_| elsa_shard::ops::limits::LIST_SIZE.load(Relaxed).to_string(),
    },
    Param {
        name: "notify-keyspace-events",
        check: |v| {
            let flags = elsa_shard::notify::parse_flags(v).ok_or_else(|| {
                "Invalid event class character. Use 'Ag$lshzxeKEtmdn'.".to_string()
            })?;
            Ok(Box::new(move |s| s.notifier.set_flags(flags)))
        },
        get: |s| elsa_shard::notify::format_flags(s.notifier.flags()),
    },
    Param {
        name: "tracking-table-max-keys",
        check: |v| {
            let n = long_long(v, 0, i64::MAX)? as u64;
            Ok(Box::new(move |s| {
                crate::tracking::MAX_KEYS.store(n, Relaxed);
                s.tracking.limit();
            }))
        },
        get: |_| crate::tracking::MAX_KEYS.load(Relaxed).to_string(),
    },
    Param {
        name: "hll-sparse-max-bytes",
        check: |v| memory_size_t(v, &elsa_shard::ops::pf::SPARSE_MAX_BYTES),
        get: |_| limit(&elsa_shard::ops::pf::SPARSE_MAX_BYTES),
    },
    Param {
        name: "list-compress-depth",
        check: |v| {
            let n = long_long(v, 0, i64::from(i32::MAX))?;
            Ok(Box::new(move |_| {
                elsa_shard::ops::limits::LIST_COMPRESS_DEPTH.store(n, Relaxed)
            }))
        },
        get: |_| {
            elsa_shard::ops::limits::LIST_COMPRESS_DEPTH
                .load(Relaxed)
                .to_string()
        },
    },
    Param {
        name: "lfu-decay-time",
        check: |v| memory_change("lfu-decay-time", v),
        get: |s| s.memory.limit.lfu_decay_time().to_string(),
    },
];

/// The CONFIG GET pairs of [`PARAMS`], and of their [`ALIASES`].
pub fn pairs(shared: &Shared) -> Vec<(String, String)> {
    let mut pairs: Vec<(String, String)> = PARAMS
        .iter()
        .map(|p| (p.name.to_string(), (p.get)(shared)))
        .collect();
    for (alias, name) in ALIASES {
        if let Some(p) = PARAMS.iter().find(|p| p.name == *name) {
            pairs.push((alias.to_string(), (p.get)(shared)));
        }
    }
    pairs
}

/// Redis 7.0's other names of parameters (CONFIG GET answers both; CONFIG
/// SET takes either; the configuration file keeps the first name).
pub static ALIASES: &[(&str, &str)] = &[
    ("lua-time-limit", "busy-reply-threshold"),
    ("hash-max-ziplist-entries", "hash-max-listpack-entries"),
    ("hash-max-ziplist-value", "hash-max-listpack-value"),
    ("zset-max-ziplist-entries", "zset-max-listpack-entries"),
    ("zset-max-ziplist-value", "zset-max-listpack-value"),
    ("list-max-ziplist-size", "list-max-listpack-size"),
];

/// The parameter `name` is another name of, or `name` itself.
fn unalias(name: String) -> String {
    match ALIASES.iter().find(|(a, _)| *a == name) {
        Some((_, n)) => n.to_string(),
        None => name,
    }
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
        let name = unalias(given.to_ascii_lowercase());
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
        if ALIASES.iter().any(|(a, _)| a == name) || name == "save" {
            // An alias: the file keeps the parameter's first name (`save`'s
            // is `snapshot-interval-sec`).
            continue;
        }
        if name == "requirepass" && value.is_empty() {
            // No password: the key is left out (present, it would set one).
            doc.remove(name);
            continue;
        }
        let item = match name.as_str() {
            // The file takes the normal class; the pubsub class has its
            // own key (client-output-buffer-limit-pubsub).
            "client-output-buffer-limit" => toml_edit::value(
                value
                    .split_whitespace()
                    .take(4)
                    .collect::<Vec<_>>()
                    .join(" "),
            ),
            "latency-tracking" => toml_edit::value(value == "yes"),
            "slowlog-log-slower-than"
            | "slowlog-max-len"
            | "latency-monitor-threshold"
            | "maxclients"
            | "proto-max-bulk-len"
            | "client-query-buffer-limit"
            | "busy-reply-threshold"
            | "acllog-max-len"
            | "maxmemory-samples"
            | "lfu-log-factor"
            | "lfu-decay-time"
            | "hash-max-listpack-entries"
            | "stream-node-max-entries"
            | "stream-node-max-bytes"
            | "hash-max-listpack-value"
            | "set-max-intset-entries"
            | "zset-max-listpack-entries"
            | "zset-max-listpack-value"
            | "list-max-listpack-size"
            | "list-compress-depth"
            | "hll-sparse-max-bytes"
            | "tracking-table-max-keys"
            | "snapshot-interval-sec"
            | "timeout"
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

/// A class of `client-output-buffer-limit`.
#[derive(Clone, Copy)]
enum OutputClass {
    Normal,
    Replica,
    Pubsub,
}

/// Redis's `<class> <hard> <soft> <soft-seconds>` groups, every one
/// checked (`config.c`: `setConfigClientOutputBufferLimitOption`).
fn output_classes(v: &str) -> Result<Vec<(OutputClass, crate::pubsub::Limit)>, String> {
    let words: Vec<&str> = v.split_whitespace().collect();
    // (Nothing given changes nothing, as in Redis.)
    if !words.len().is_multiple_of(4) {
        return Err("Wrong number of arguments in buffer limit configuration.".into());
    }
    words
        .chunks(4)
        .map(|g| {
            let class = match g[0].to_ascii_lowercase().as_str() {
                "normal" => OutputClass::Normal,
                "slave" | "replica" => OutputClass::Replica,
                "pubsub" => OutputClass::Pubsub,
                _ => {
                    return Err(
                        "Invalid client class specified in buffer limit configuration.".into(),
                    )
                }
            };
            let limit: crate::pubsub::Limit = g[1..].join(" ").parse().map_err(|_| {
                "Error in hard, soft or soft_seconds setting in buffer limit configuration."
                    .to_string()
            })?;
            Ok((class, limit))
        })
        .collect()
}

/// A memory size as redis.conf spells it (`2mb`, `4096`) of at least 1mb,
/// as Redis's `proto-max-bulk-len` and `client-query-buffer-limit` take.
fn at_least_1mb(v: &str) -> Result<usize, String> {
    let n = crate::config::parse_memory(v)
        .and_then(|n| usize::try_from(n).ok())
        .ok_or_else(|| "argument must be a memory value".to_string())?;
    if n < 1024 * 1024 {
        return Err("argument must be between 1048576 and 9223372036854775807 inclusive".into());
    }
    Ok(n)
}

/// `save`'s value as Redis checks it (`setConfigSaveOption`): pairs of
/// seconds (at least 1) and changes (at least 0), or nothing. Elsa
/// snapshots on a timer whenever anything was logged (its log is its
/// durability; a snapshot only shortens recovery), so the interval is the
/// shortest of the pairs' seconds, 0 (never) for none.
fn save_interval(v: &str) -> Result<u64, String> {
    let words: Vec<&str> = v.split_whitespace().collect();
    if !words.len().is_multiple_of(2) {
        return Err("Invalid save parameters".into());
    }
    let mut interval = u64::MAX;
    for (j, w) in words.iter().enumerate() {
        let n = elsa_shard::ops::parse_i64(w.as_bytes())
            .filter(|&n| if j % 2 == 0 { n >= 1 } else { n >= 0 })
            .ok_or_else(|| "Invalid save parameters".to_string())?;
        if j % 2 == 0 {
            interval = interval.min(n as u64);
        }
    }
    Ok(if words.is_empty() { 0 } else { interval })
}

/// `save` as CONFIG GET answers it: its pairs, one space apart.
fn normalized_save(v: &str) -> String {
    v.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// A `size_t` parameter (Redis's `createSizeTConfig`, `INTEGER_CONFIG`,
/// 0 to `LONG_MAX`) stored in `to`.
fn size_t(v: &str, to: &'static std::sync::atomic::AtomicUsize) -> Result<Change, String> {
    let n = long_long(v, 0, i64::MAX)? as usize;
    Ok(Box::new(move |_| to.store(n, Relaxed)))
}

/// A `size_t` parameter given as a memory value (`MEMORY_CONFIG`: `64`,
/// `1kb`), 0 to `LONG_MAX`.
fn memory_size_t(v: &str, to: &'static std::sync::atomic::AtomicUsize) -> Result<Change, String> {
    let n = crate::config::parse_memory(v)
        .and_then(|n| usize::try_from(n).ok())
        .ok_or_else(|| "argument must be a memory value".to_string())?;
    Ok(Box::new(move |_| to.store(n, Relaxed)))
}

/// A threshold's value as CONFIG GET answers it.
fn limit(t: &std::sync::atomic::AtomicUsize) -> String {
    t.load(Relaxed).to_string()
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

/// A memory setting's change (`crate::memory::MemoryChange`).
fn memory_change(key: &str, v: &str) -> Result<Change, String> {
    let c = crate::memory::MemoryChange::parse(key, v)?;
    Ok(Box::new(move |s| c.apply(&s.memory)))
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
        assert_eq!(trim_double(99.9), "99.9");
        assert_eq!(trim_double(50.0), "50");
        assert!(yes_no("maybe").is_err());
    }
}

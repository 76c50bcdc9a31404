//! Introspection against a real redis-server 7.0: the same commands sent to
//! Elsa and to Redis, their replies compared — INFO's field names per
//! section, commandstats/errorstats after the same command sequence,
//! keyspace hits and misses, SLOWLOG entries, LATENCY, CONFIG SET/GET and
//! its errors, CONFIG RESETSTAT, CONFIG REWRITE — plus what only Elsa has
//! (transactions per isolation level, avg_ttl).

mod common;
#[allow(dead_code)]
#[path = "differential/resp.rs"]
mod resp;

use std::collections::{BTreeMap, BTreeSet};

use common::redis_server::RedisServer;
use common::Elsa;
use resp::Reply;

fn args(line: &str) -> Vec<&[u8]> {
    line.split(' ').map(str::as_bytes).collect()
}

fn call(c: &mut resp::Conn, line: &str) -> Reply {
    c.call(&args(line))
}

/// INFO's text parsed: section name (lowercase) → field → value.
fn info(c: &mut resp::Conn, section: &str) -> BTreeMap<String, BTreeMap<String, String>> {
    let line = if section.is_empty() {
        "INFO".to_string()
    } else {
        format!("INFO {section}")
    };
    let text = match call(c, &line) {
        Reply::Bulk(b) | Reply::Verbatim(_, b) => String::from_utf8(b).unwrap(),
        r => panic!("INFO {section}: {r}"),
    };
    let mut out = BTreeMap::new();
    let mut current = String::new();
    for line in text.split("\r\n") {
        if let Some(name) = line.strip_prefix("# ") {
            current = name.to_ascii_lowercase();
            out.entry(current.clone()).or_insert_with(BTreeMap::new);
        } else if let Some((k, v)) = line.split_once(':') {
            out.entry(current.clone())
                .or_insert_with(BTreeMap::new)
                .insert(k.to_string(), v.to_string());
        }
    }
    out
}

fn field(c: &mut resp::Conn, section: &str, name: &str) -> String {
    info(c, section)
        .values()
        .find_map(|f| f.get(name).cloned())
        .unwrap_or_else(|| panic!("INFO {section} has no {name}"))
}

/// `calls=1,usec=2,…` as a map.
fn kv(v: &str) -> BTreeMap<String, String> {
    v.split(',')
        .filter_map(|p| p.split_once('='))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// Both servers, fresh, with one raw connection each.
struct Pair {
    _elsa: Elsa,
    _redis: RedisServer,
    e: resp::Conn,
    r: resp::Conn,
}

impl Pair {
    fn new(flags: &[&str]) -> Pair {
        let elsa = Elsa::start(flags);
        let redis = RedisServer::start();
        let e = resp::Conn::connect(elsa.port).unwrap();
        let r = resp::Conn::connect(redis.port).unwrap();
        Pair {
            _elsa: elsa,
            _redis: redis,
            e,
            r,
        }
    }

    /// Sends `line` to both and asserts the replies are equal.
    fn same(&mut self, line: &str) -> Reply {
        let a = call(&mut self.e, line);
        let b = call(&mut self.r, line);
        assert_eq!(a, b, "{line}: Elsa {a} vs Redis {b}");
        a
    }

    /// Sends `line` to both (replies may differ: a timing, an id).
    fn both(&mut self, line: &str) -> (Reply, Reply) {
        (call(&mut self.e, line), call(&mut self.r, line))
    }
}

/// Redis fields of our sections Elsa leaves out on purpose: each has no
/// counterpart in Elsa (it measures something Elsa does not have), so a
/// value would be made up. The test fails if Elsa gains or loses one.
const ABSENT: &[(&str, &[&str])] = &[
    (
        "server",
        &[
            // Build details of Redis's C build.
            "redis_build_id",
            "atomicvar_api",
            "gcc_version",
        ],
    ),
    (
        "persistence",
        &[
            // Elsa does not count changes between snapshots, nor saves.
            "rdb_changes_since_last_save",
            "rdb_saves",
            "rdb_last_load_keys_expired",
            // Redis's AOF base file and buffers: Elsa's log has neither.
            "aof_base_size",
            "aof_buffer_length",
            "aof_pending_bio_fsync",
            "aof_delayed_fsync",
        ],
    ),
    (
        "stats",
        &[
            // Replication traffic of Redis's replicas (Elsa's peers are
            // in # Replication / # Regions).
            "total_net_repl_input_bytes",
            "total_net_repl_output_bytes",
            "instantaneous_input_repl_kbps",
            "instantaneous_output_repl_kbps",
            // The active expiry cycle's internals.
            "expired_stale_perc",
            "expired_time_cap_reached_count",
            "expire_cycle_cpu_milliseconds",
            // Eviction internals Elsa does not track (evicted_keys it has).
            "evicted_clients",
            "total_eviction_exceeded_time",
            "current_eviction_exceeded_time",
            // Redis's MIGRATE, replicas, defragmenter, tracking table
            // (CLIENT TRACKING's counters belong with the clients block).
            "migrate_cached_sockets",
            "slave_expires_tracked_keys",
            "active_defrag_hits",
            "active_defrag_misses",
            "active_defrag_key_hits",
            "active_defrag_key_misses",
            "total_active_defrag_time",
            "current_active_defrag_time",
            // Reply buffer resizing of Redis's client struct.
            "reply_buffer_shrinks",
            "reply_buffer_expands",
        ],
    ),
    ("cpu", &[]),
    ("cluster", &[]),
];

#[test]
fn info_sections_have_redis_field_names() {
    let mut p = Pair::new(&[]);
    p.same("SET k v");
    // Elsa's log is always on: Redis's AOF fields show only with AOF on.
    assert_eq!(
        call(&mut p.r, "CONFIG SET appendonly yes"),
        Reply::Simple(b"OK".to_vec())
    );
    let e = info(&mut p.e, "everything");
    let r = info(&mut p.r, "everything");
    let mut total_redis = 0;
    let mut total_shared = 0;
    for (section, absent) in ABSENT {
        let rf: BTreeSet<&String> = r[*section].keys().collect();
        let ef: BTreeSet<&String> = e
            .get(*section)
            .unwrap_or_else(|| panic!("Elsa has no # {section}"))
            .keys()
            .collect();
        let missing: BTreeSet<&str> = rf.difference(&ef).map(|s| s.as_str()).collect();
        let expected: BTreeSet<&str> = absent.iter().copied().collect();
        assert_eq!(missing, expected, "# {section}: Redis fields Elsa lacks");
        total_redis += rf.len();
        total_shared += rf.intersection(&ef).count();
        eprintln!(
            "# {section}: Elsa has {} of Redis's {} fields",
            rf.intersection(&ef).count(),
            rf.len()
        );
    }
    // Sections Elsa shares with Redis but others own (# Clients, # Memory,
    // # Replication): counted for the report, not asserted here.
    let mut all_redis = 0;
    let mut all_shared = 0;
    for (section, fields) in &r {
        let ef = e.get(section);
        all_redis += fields.len();
        all_shared += fields
            .keys()
            .filter(|k| ef.is_some_and(|f| f.contains_key(*k)))
            .count();
    }
    eprintln!(
        "INFO everything: Elsa has {all_shared} of Redis's {all_redis} fields ({total_shared} of {total_redis} in the sections asserted)"
    );
    // Sections named as Redis names them, and selection as Redis 7.
    for name in [
        "server",
        "persistence",
        "stats",
        "cpu",
        "commandstats",
        "errorstats",
        "latencystats",
        "keyspace",
        "transactions",
        "regions",
    ] {
        assert!(e.contains_key(name), "INFO everything lacks # {name}");
    }
    let default: BTreeSet<String> = info(&mut p.e, "").into_keys().collect();
    assert!(default.contains("server") && default.contains("errorstats"));
    assert!(!default.contains("commandstats") && !default.contains("latencystats"));
    let two: BTreeSet<String> = info(&mut p.e, "cpu keyspace").into_keys().collect();
    let two_redis: BTreeSet<String> = info(&mut p.r, "cpu keyspace").into_keys().collect();
    assert_eq!(two, two_redis);
    assert!(info(&mut p.e, "nosuchsection").is_empty());
    // Values that must agree with what happened.
    assert_eq!(e["server"]["redis_mode"], "standalone");
    assert_eq!(e["server"]["tcp_port"], p._elsa.port.to_string());
    assert_eq!(e["server"]["run_id"].len(), 40);
    assert_eq!(
        e["server"]["process_id"],
        p._elsa.child.id().to_string(),
        "process_id"
    );
    assert!(e["cpu"]["used_cpu_user"].contains('.'));
}

/// The same commands, one at a time and pipelined, to both servers.
const SEQUENCE: &[&str] = &[
    "SET a 1",
    "GET a",
    "GET nokey",
    "INCR a b",
    "LPUSH a x",
    "HSET h f v",
    "HGET h f",
    "HGET nokey f",
    "STRLEN a",
    "CONFIG GET maxclients",
    "FOO bar",
    "CONFIG FOO",
    "CONFIG",
    "GET",
    "EXISTS a",
    "MULTI",
    "SET m 1",
    "INCR m",
    "LPUSH m x",
    "EXEC",
    "MULTI",
    "INCR m x",
    "EXEC",
];

fn cmdstats(c: &mut resp::Conn) -> BTreeMap<String, BTreeMap<String, String>> {
    info(c, "commandstats")
        .remove("commandstats")
        .unwrap_or_default()
        .into_iter()
        .map(|(k, v)| {
            let mut m = kv(&v);
            // Timings differ between any two servers.
            m.remove("usec");
            m.remove("usec_per_call");
            (k, m)
        })
        .collect()
}

#[test]
fn commandstats_errorstats_and_keyspace_hits_match_redis() {
    let mut p = Pair::new(&[]);
    p.same("CONFIG RESETSTAT");
    for line in SEQUENCE {
        p.both(line);
    }
    // Pipelined: a run of lone commands, timed as a whole.
    let batch: Vec<Vec<Vec<u8>>> = (0..50)
        .map(|i| {
            args(if i % 2 == 0 { "GET a" } else { "GET nokey" })
                .into_iter()
                .map(<[u8]>::to_vec)
                .collect()
        })
        .collect();
    for c in [&mut p.e, &mut p.r] {
        c.send(&batch);
        for _ in 0..batch.len() {
            assert!(!c.read().is_error());
        }
    }
    let e = cmdstats(&mut p.e);
    let r = cmdstats(&mut p.r);
    assert_eq!(e, r, "commandstats (calls, rejected, failed)");
    assert_eq!(e["cmdstat_get"]["calls"], "52");
    let errors = |c: &mut resp::Conn| info(c, "errorstats").remove("errorstats").unwrap();
    assert_eq!(errors(&mut p.e), errors(&mut p.r), "errorstats");
    for name in ["keyspace_hits", "keyspace_misses", "total_error_replies"] {
        assert_eq!(
            field(&mut p.e, "stats", name),
            field(&mut p.r, "stats", name),
            "{name}"
        );
    }
    // Every call is in the histogram: p100 is a bucket bound, and each
    // command called has a latencystats line with the three percentiles.
    let lat = info(&mut p.e, "latencystats")
        .remove("latencystats")
        .unwrap();
    let get = kv(&lat["latency_percentiles_usec_get"]);
    assert_eq!(
        get.keys().collect::<Vec<_>>(),
        ["p50", "p99", "p99.9"],
        "{get:?}"
    );
    let redis_lat = info(&mut p.r, "latencystats")
        .remove("latencystats")
        .unwrap();
    assert_eq!(
        lat.keys().collect::<BTreeSet<_>>(),
        redis_lat.keys().collect::<BTreeSet<_>>(),
        "commands with latency percentiles"
    );
}

#[test]
fn config_resetstat_resets_stats_not_the_slowlog() {
    let mut p = Pair::new(&[]);
    p.same("CONFIG SET slowlog-log-slower-than 0");
    for line in SEQUENCE {
        p.both(line);
    }
    let (el, rl) = p.both("SLOWLOG LEN");
    p.same("CONFIG RESETSTAT");
    let (ce, cr) = (cmdstats(&mut p.e), cmdstats(&mut p.r));
    assert_eq!(ce, cr);
    assert_eq!(ce.keys().collect::<Vec<_>>(), ["cmdstat_config|resetstat"]);
    for name in [
        "keyspace_hits",
        "keyspace_misses",
        "total_error_replies",
        "expired_keys",
    ] {
        assert_eq!(field(&mut p.e, "stats", name), "0", "{name}");
        assert_eq!(field(&mut p.r, "stats", name), "0", "{name}");
    }
    assert!(info(&mut p.e, "errorstats")["errorstats"].is_empty());
    assert!(info(&mut p.r, "errorstats")["errorstats"].is_empty());
    // The slow log keeps its entries (and logged the commands since).
    let (Reply::Int(before), Reply::Int(before_r)) = (el, rl) else {
        panic!("SLOWLOG LEN")
    };
    let (Reply::Int(after), Reply::Int(after_r)) = p.both("SLOWLOG LEN") else {
        panic!("SLOWLOG LEN")
    };
    assert!(after > before && before > 0);
    assert_eq!(after - before, after_r - before_r);
}

/// A SLOWLOG GET reply with what legitimately differs between two servers
/// (entry ids count every command logged since start, times and
/// durations, the client's port) taken out: the arguments and name stay.
fn slowlog_entries(r: Reply) -> Vec<(Reply, Reply)> {
    let Reply::Array(entries) = r else {
        panic!("SLOWLOG GET: {r}")
    };
    entries
        .into_iter()
        .map(|e| {
            let Reply::Array(f) = e else { panic!("entry") };
            assert_eq!(f.len(), 6);
            for x in &f[..3] {
                assert!(matches!(x, Reply::Int(n) if *n >= 0), "{x}");
            }
            let Reply::Bulk(addr) = &f[4] else {
                panic!("addr")
            };
            assert!(addr.starts_with(b"127.0.0.1:"));
            (f[3].clone(), f[5].clone())
        })
        .collect()
}

#[test]
fn slowlog_entries_and_errors_match_redis() {
    let mut p = Pair::new(&[]);
    p.same("SLOWLOG HELP");
    p.same("SLOWLOG FOO");
    p.same("SLOWLOG GET -2");
    p.same("SLOWLOG GET x");
    p.same("SLOWLOG GET 1 2");
    p.same("SLOWLOG LEN 1");
    p.same("CONFIG SET slowlog-log-slower-than 0");
    p.same("CLIENT SETNAME tester");
    p.same("SLOWLOG RESET");
    p.same("SET k v");
    let many: Vec<String> = (0..40).map(|i| format!("e{i}")).collect();
    p.same(&format!("RPUSH list {}", many.join(" ")));
    p.same(&format!("SET big {}", "x".repeat(200)));
    p.same("AUTH secret");
    p.same("GET k");
    let (e, r) = p.both("SLOWLOG GET -1");
    let (e, r) = (slowlog_entries(e), slowlog_entries(r));
    assert_eq!(e, r);
    assert_eq!(e.len(), 6, "SLOWLOG RESET, SET, RPUSH, SET, AUTH, GET");
    let Reply::Array(rpush) = &e[3].0 else {
        panic!()
    };
    assert_eq!(rpush.len(), 32);
    assert_eq!(rpush[31], Reply::Bulk(b"... (11 more arguments)".to_vec()));
    p.same("SLOWLOG LEN");
    let (e, r) = p.both("SLOWLOG GET 2");
    assert_eq!(slowlog_entries(e), slowlog_entries(r));
    // A shorter log keeps the newest entries.
    p.same("CONFIG SET slowlog-max-len 2");
    p.same("SLOWLOG LEN");
    p.same("CONFIG SET slowlog-log-slower-than -1");
    p.same("SLOWLOG RESET");
    p.same("GET k");
    p.same("SLOWLOG LEN");
}

/// The commands an EXEC ran are logged one by one, EXEC itself not, as
/// Redis logs them; a discarded MULTI, an EXEC that a WATCH aborted and an
/// EXECABORT run nothing, so log nothing but what was sent.
#[test]
fn slowlog_logs_the_commands_exec_ran() {
    let mut p = Pair::new(&[]);
    p.same("CONFIG SET slowlog-log-slower-than 0");
    p.same("SLOWLOG RESET");
    for cmd in [
        "MULTI",
        "SET a 1",
        "INCR a",
        "GET a",
        "EXEC", // ran
        "MULTI",
        "SET b 1",
        "DISCARD", // discarded
        "WATCH a",
        "SET a 2",
        "MULTI",
        "GET b",
        "EXEC", // aborted by the WATCH
        "MULTI",
        "SET c",
        "GET c",
        "EXEC", // EXECABORT
        "MULTI",
        "RPUSH l x",
        "PING",
        "LPOP l",
        "EXEC", // ran, a keyless one too
    ] {
        p.same(cmd);
    }
    let (e, r) = p.both("SLOWLOG GET -1");
    let (e, r) = (slowlog_entries(e), slowlog_entries(r));
    assert_eq!(e, r);
    let logged: Vec<String> = e
        .iter()
        .map(|(args, _)| match args {
            Reply::Array(a) => a
                .iter()
                .map(|x| match x {
                    Reply::Bulk(b) => String::from_utf8_lossy(b).into_owned(),
                    other => panic!("{other}"),
                })
                .collect::<Vec<_>>()
                .join(" "),
            other => panic!("{other}"),
        })
        .collect();
    for ran in ["SET a 1", "INCR a", "GET a", "RPUSH l x", "PING", "LPOP l"] {
        assert!(logged.iter().any(|l| l == ran), "{ran} not in {logged:?}");
    }
    assert!(!logged
        .iter()
        .any(|l| l == "EXEC" || l == "GET b" || l == "GET c"));
}

#[test]
fn latency_replies_and_errors_match_redis() {
    let mut p = Pair::new(&[]);
    p.same("LATENCY LATEST");
    p.same("LATENCY HISTORY command");
    p.same("LATENCY RESET");
    p.same("LATENCY RESET command fast-command");
    p.same("LATENCY DOCTOR");
    p.same("LATENCY FOO");
    p.same("LATENCY HISTORY");
    p.same("LATENCY HELP");
    p.same("LATENCY GRAPH command");
    p.same("CONFIG RESETSTAT");
    for _ in 0..5 {
        p.same("SET k v");
    }
    p.same("GET k");
    // HISTOGRAM: the same commands with the same calls; the buckets are
    // powers of two of µs, cumulative, ending at every call.
    let (e, r) = p.both("LATENCY HISTOGRAM set get");
    let per_cmd = |reply: Reply| -> BTreeMap<Vec<u8>, (i64, Vec<i64>)> {
        let Reply::Array(items) = reply else {
            panic!("histogram")
        };
        items
            .chunks(2)
            .map(|kv| {
                let Reply::Bulk(name) = &kv[0] else { panic!() };
                let Reply::Array(fields) = &kv[1] else {
                    panic!()
                };
                assert_eq!(fields[0], Reply::Bulk(b"calls".to_vec()));
                assert_eq!(fields[2], Reply::Bulk(b"histogram_usec".to_vec()));
                let Reply::Int(calls) = fields[1] else {
                    panic!()
                };
                let Reply::Array(h) = &fields[3] else {
                    panic!()
                };
                let h: Vec<i64> = h
                    .iter()
                    .map(|x| match x {
                        Reply::Int(n) => *n,
                        _ => panic!(),
                    })
                    .collect();
                (name.clone(), (calls, h))
            })
            .collect()
    };
    let (e, r) = (per_cmd(e), per_cmd(r));
    assert_eq!(
        e.iter().map(|(k, v)| (k, v.0)).collect::<Vec<_>>(),
        r.iter().map(|(k, v)| (k, v.0)).collect::<Vec<_>>()
    );
    for (calls, h) in e.values() {
        let bounds: Vec<i64> = h.iter().step_by(2).copied().collect();
        assert!(bounds.iter().all(|b| (*b as u64).is_power_of_two()));
        assert!(bounds.windows(2).all(|w| w[0] < w[1]));
        assert_eq!(h.last(), Some(calls));
    }
    // A spike over latency-monitor-threshold: a script that runs at least
    // a millisecond (three million Lua steps) is a `command` event.
    p.same("CONFIG SET latency-monitor-threshold 1");
    let spin = "EVAL";
    let body = "local i=0 while i<3000000 do i=i+1 end return 1";
    for c in [&mut p.e, &mut p.r] {
        assert_eq!(
            c.call(&[spin.as_bytes(), body.as_bytes(), b"0"]),
            Reply::Int(1)
        );
    }
    let events = |r: Reply| -> Vec<Vec<u8>> {
        let Reply::Array(rows) = r else { panic!() };
        rows.into_iter()
            .map(|row| {
                let Reply::Array(f) = row else { panic!() };
                let (Reply::Int(_), Reply::Int(latest), Reply::Int(max)) = (&f[1], &f[2], &f[3])
                else {
                    panic!()
                };
                assert!(*latest >= 1 && max >= latest);
                match &f[0] {
                    Reply::Bulk(b) => b.clone(),
                    _ => panic!(),
                }
            })
            .collect()
    };
    let (e, r) = p.both("LATENCY LATEST");
    assert_eq!(events(e), events(r));
    let (Reply::Array(e), Reply::Array(_)) = p.both("LATENCY HISTORY command") else {
        panic!()
    };
    assert_eq!(e.len(), 1);
    let (Reply::Bulk(doctor), _) = p.both("LATENCY DOCTOR") else {
        panic!()
    };
    assert!(doctor.starts_with(b"Dave, I have observed latency spikes"));
    p.same("LATENCY RESET command");
    p.same("LATENCY LATEST");
}

/// A CONFIG GET reply as sorted pairs.
fn pairs(r: Reply) -> Vec<(Reply, Reply)> {
    let Reply::Array(items) = r else {
        panic!("CONFIG GET: {r}")
    };
    let mut v: Vec<(Reply, Reply)> = items
        .chunks(2)
        .map(|kv| (kv[0].clone(), kv[1].clone()))
        .collect();
    v.sort_by_key(|(k, _)| k.to_string());
    assert!(!v.is_empty());
    v
}

#[test]
fn config_set_get_round_trips_and_errors_match_redis() {
    let mut p = Pair::new(&[]);
    for (name, value) in [
        ("slowlog-log-slower-than", "1234"),
        ("slowlog-log-slower-than", "-1"),
        ("slowlog-max-len", "7"),
        ("latency-monitor-threshold", "5"),
        ("latency-tracking", "no"),
        ("latency-tracking", "yes"),
        ("latency-tracking-info-percentiles", "50 99.9"),
        ("latency-tracking-info-percentiles", ""),
    ] {
        let (e, r) = {
            let line: Vec<&[u8]> = vec![b"CONFIG", b"SET", name.as_bytes(), value.as_bytes()];
            (p.e.call(&line), p.r.call(&line))
        };
        assert_eq!(e, r, "CONFIG SET {name} {value:?}");
        p.same(&format!("CONFIG GET {name}"));
    }
    p.same("CONFIG SET latency-tracking-info-percentiles 99");
    p.same("CONFIG GET latency-tracking-info-percentiles");
    // A pattern's pairs come in Redis's hash order: compared as sets.
    let (e, r) = p.both("CONFIG GET slowlog*");
    assert_eq!(pairs(e), pairs(r));
    // Errors, word for word.
    for line in [
        "CONFIG SET slowlog-max-len -1",
        "CONFIG SET slowlog-max-len abc",
        "CONFIG SET slowlog-log-slower-than -2",
        "CONFIG SET latency-tracking maybe",
        "CONFIG SET latency-tracking-info-percentiles 101",
        "CONFIG SET latency-tracking-info-percentiles x",
        "CONFIG SET databases 4",
        "CONFIG SET no-such-parameter 1",
        "CONFIG SET slowlog-max-len 1 slowlog-max-len 2",
        "CONFIG SET slowlog-max-len 1 latency-monitor-threshold",
        "CONFIG SET slowlog-max-len",
        "CONFIG SET slowlog-max-len 5 databases 4 no-such 1",
    ] {
        let r = p.same(line);
        assert!(r.is_error(), "{line}: {r}");
    }
    // All or nothing: a bad second value leaves the first unchanged.
    p.same("CONFIG SET slowlog-max-len 11");
    p.same("CONFIG SET slowlog-max-len 12 slowlog-log-slower-than abc");
    p.same("CONFIG GET slowlog-max-len");
    p.same("CONFIG SET slowlog-max-len 13 latency-monitor-threshold 9");
    p.same("CONFIG GET slowlog-max-len");
    p.same("CONFIG GET latency-monitor-threshold");
    // Without a config file there is nothing to rewrite.
    p.same("CONFIG REWRITE");
}

/// The client limits, the script threshold, the ACL log's length and
/// `requirepass` change at run time as in Redis: same replies to SET and
/// GET, same errors, and the new value applies to the next connection.
#[test]
fn client_limits_and_requirepass_change_at_run_time_as_redis() {
    let mut p = Pair::new(&[]);
    for line in [
        "CONFIG SET maxclients 500",
        "CONFIG GET maxclients",
        "CONFIG SET proto-max-bulk-len 2mb",
        "CONFIG GET proto-max-bulk-len",
        "CONFIG SET client-query-buffer-limit 4mb",
        "CONFIG GET client-query-buffer-limit",
        "CONFIG SET busy-reply-threshold 7000",
        "CONFIG GET busy-reply-threshold",
        "CONFIG GET lua-time-limit",
        "CONFIG SET lua-time-limit 6000",
        "CONFIG GET busy-reply-threshold",
        "CONFIG SET acllog-max-len 3",
        "CONFIG GET acllog-max-len",
        // Errors, word for word.
        "CONFIG SET maxclients 0",
        "CONFIG SET maxclients x",
        "CONFIG SET proto-max-bulk-len 1k",
        "CONFIG SET proto-max-bulk-len lots",
        "CONFIG SET client-query-buffer-limit 10",
        "CONFIG SET acllog-max-len -1",
        "CONFIG SET busy-reply-threshold -5",
    ] {
        p.same(line);
    }
    // Values of several words (sent as one argument).
    for value in [
        "normal 1mb 512kb 10 pubsub 16mb 4mb 30",
        "normal 1mb 512kb",
        "other 1mb 512kb 10",
        "normal 1mb soft 10",
        "",
    ] {
        let line: Vec<&[u8]> = vec![
            b"CONFIG",
            b"SET",
            b"client-output-buffer-limit",
            value.as_bytes(),
        ];
        let (e, r) = (p.e.call(&line), p.r.call(&line));
        assert_eq!(e, r, "CONFIG SET client-output-buffer-limit {value:?}");
    }
    // Elsa has no replica clients: their class always shows no limit;
    // the normal and pubsub classes are what was set.
    let (e, _) = p.both("CONFIG GET client-output-buffer-limit");
    assert_eq!(
        e,
        Reply::Array(vec![
            Reply::Bulk(b"client-output-buffer-limit".to_vec()),
            Reply::Bulk(
                b"normal 1048576 524288 10 slave 0 0 0 pubsub 16777216 4194304 30".to_vec()
            )
        ])
    );
    // requirepass: new connections must AUTH; the old one stays in.
    p.same("CONFIG SET requirepass s3cret");
    p.same("CONFIG GET requirepass");
    let (elsa_port, redis_port) = (p._elsa.port, p._redis.port);
    for port in [elsa_port, redis_port] {
        let mut c = resp::Conn::connect(port).unwrap();
        let r = call(&mut c, "GET k");
        assert!(
            matches!(&r, Reply::Error(e) if e.starts_with(b"NOAUTH")),
            "{r}"
        );
        assert_eq!(call(&mut c, "AUTH s3cret"), Reply::Simple(b"OK".to_vec()));
    }
    let clear: Vec<&[u8]> = vec![b"CONFIG", b"SET", b"requirepass", b""];
    assert_eq!(p.e.call(&clear), p.r.call(&clear));
    for port in [elsa_port, redis_port] {
        let mut c = resp::Conn::connect(port).unwrap();
        assert_eq!(call(&mut c, "PING"), Reply::Simple(b"PONG".to_vec()));
    }
    // maxclients: past it, a new connection is refused with Redis's error.
    p.same("CONFIG SET maxclients 1");
    for port in [elsa_port, redis_port] {
        let mut c = resp::Conn::connect(port).unwrap();
        let r = call(&mut c, "PING");
        assert!(
            matches!(&r, Reply::Error(e) if e.starts_with(b"ERR max number of clients reached")),
            "{port}: {r}"
        );
    }
    p.same("CONFIG SET maxclients 100");
    // proto-max-bulk-len: a bulk over it is a protocol error.
    p.same("CONFIG SET proto-max-bulk-len 1mb");
    for port in [elsa_port, redis_port] {
        use std::io::{Read, Write};
        let mut c = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
        c.set_read_timeout(Some(std::time::Duration::from_secs(10)))
            .unwrap();
        c.write_all(b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$2000000\r\n")
            .unwrap();
        let mut reply = Vec::new();
        let mut byte = [0u8; 1];
        while !reply.ends_with(b"\r\n") && c.read(&mut byte).unwrap_or(0) == 1 {
            reply.push(byte[0]);
        }
        assert_eq!(
            String::from_utf8_lossy(&reply),
            "-ERR Protocol error: invalid bulk length\r\n",
            "{port}"
        );
    }
}

#[test]
fn config_rewrite_keeps_the_file_and_its_comments() {
    let dir = common::TestDir::new("intro-rewrite");
    let file = dir.data().with_extension("toml");
    std::fs::write(&file, "# my settings\nworkers = 2\nslowlog-max-len = 3\n").unwrap();
    let mut elsa = Elsa::start(&["--config", file.to_str().unwrap()]);
    let mut c = resp::Conn::connect(elsa.port).unwrap();
    assert_eq!(
        call(&mut c, "CONFIG GET slowlog-max-len"),
        Reply::Array(vec![
            Reply::Bulk(b"slowlog-max-len".to_vec()),
            Reply::Bulk(b"3".to_vec())
        ])
    );
    assert_eq!(
        call(
            &mut c,
            "CONFIG SET slowlog-max-len 77 latency-tracking no maxclients 321 maxmemory 64mb"
        ),
        Reply::Simple(b"OK".to_vec())
    );
    assert_eq!(
        call(&mut c, "CONFIG REWRITE"),
        Reply::Simple(b"OK".to_vec())
    );
    let text = std::fs::read_to_string(&file).unwrap();
    assert!(text.starts_with("# my settings\nworkers = 2\n"), "{text}");
    assert!(text.contains("slowlog-max-len = 77"), "{text}");
    assert!(text.contains("latency-tracking = false"), "{text}");
    let config_file = field(&mut c, "server", "config_file");
    assert_eq!(
        std::path::PathBuf::from(config_file),
        std::fs::canonicalize(&file).unwrap()
    );
    elsa.stop();
    // The rewritten file starts a node with the values set.
    let elsa = Elsa::start(&["--config", file.to_str().unwrap()]);
    let mut c = resp::Conn::connect(elsa.port).unwrap();
    assert_eq!(
        call(&mut c, "CONFIG GET slowlog-max-len"),
        Reply::Array(vec![
            Reply::Bulk(b"slowlog-max-len".to_vec()),
            Reply::Bulk(b"77".to_vec())
        ])
    );
    for (name, value) in [("maxclients", "321"), ("maxmemory", "67108864")] {
        assert_eq!(
            call(&mut c, &format!("CONFIG GET {name}")),
            Reply::Array(vec![
                Reply::Bulk(name.as_bytes().to_vec()),
                Reply::Bulk(value.as_bytes().to_vec())
            ])
        );
    }
    let _ = std::fs::remove_file(&file);
}

#[test]
fn keyspace_avg_ttl_and_transactions_per_isolation() {
    let elsa = Elsa::start(&[]);
    let mut c = resp::Conn::connect(elsa.port).unwrap();
    call(&mut c, "SET a 1 EX 1000");
    call(&mut c, "SET b 1 EX 3000");
    call(&mut c, "SET c 1");
    let db0 = kv(&field(&mut c, "keyspace", "db0"));
    assert_eq!(db0["keys"], "3");
    assert_eq!(db0["expires"], "2");
    // The mean of the two remaining TTLs: at most 2000 s, and not far
    // below it (the test cannot take 1000 s).
    let avg: u64 = db0["avg_ttl"].parse().unwrap();
    assert!(avg <= 2_000_000 && avg > 1_000_000, "avg_ttl {avg}");

    let txn = |c: &mut resp::Conn| -> BTreeMap<String, BTreeMap<String, String>> {
        info(c, "transactions")["transactions"]
            .iter()
            .filter(|(k, _)| k.starts_with("txn_"))
            .map(|(k, v)| (k.clone(), kv(v)))
            .collect()
    };
    for level in ["RC", "RR", "SI"] {
        assert_eq!(
            call(&mut c, &format!("BEGIN {level}")),
            Reply::Simple(b"OK".to_vec())
        );
        call(&mut c, "SET t 1");
        assert!(matches!(call(&mut c, "COMMIT"), Reply::Int(_)));
    }
    call(&mut c, "BEGIN RR");
    assert_eq!(call(&mut c, "ABORT"), Reply::Simple(b"OK".to_vec()));
    // An SI conflict: two transactions write the key they both read.
    let mut d = resp::Conn::connect(elsa.port).unwrap();
    call(&mut c, "BEGIN SI");
    call(&mut d, "BEGIN SI");
    call(&mut c, "GET t");
    call(&mut d, "GET t");
    call(&mut c, "SET t 2");
    call(&mut d, "SET t 3");
    assert!(matches!(call(&mut c, "COMMIT"), Reply::Int(_)));
    let lost = call(&mut d, "COMMIT");
    assert!(
        matches!(&lost, Reply::Error(e) if e.starts_with(b"CONFLICT")),
        "{lost}"
    );
    // MULTI/EXEC: one committed, one aborted by a changed WATCHed key.
    call(&mut c, "MULTI");
    call(&mut c, "SET m 1");
    assert!(matches!(call(&mut c, "EXEC"), Reply::Array(_)));
    call(&mut c, "WATCH w");
    call(&mut d, "SET w 1");
    call(&mut c, "MULTI");
    call(&mut c, "SET w 2");
    assert_eq!(call(&mut c, "EXEC"), Reply::NilArray);
    let t = txn(&mut c);
    let row = |k: &str| {
        let r = &t[k];
        (
            r["commits"].as_str(),
            r["aborts"].as_str(),
            r["conflicts"].as_str(),
        )
    };
    assert_eq!(row("txn_rc"), ("1", "0", "0"));
    assert_eq!(row("txn_rr"), ("1", "1", "0"));
    assert_eq!(row("txn_si"), ("2", "0", "1"));
    assert_eq!(row("txn_multi_exec"), ("1", "0", "1"));
}

/// Commands both servers have, whose COMMAND DOCS must be Redis's own.
const DOCUMENTED: &[&str] = &[
    "get",
    "set",
    "mget",
    "mset",
    "incr",
    "del",
    "exists",
    "expire",
    "ttl",
    "hset",
    "hget",
    "hgetall",
    "lpush",
    "lrange",
    "blpop",
    "sadd",
    "smembers",
    "zadd",
    "zrange",
    "zunionstore",
    "scan",
    "keys",
    "select",
    "ping",
    "info",
    "eval",
    "multi",
    "exec",
    "watch",
    "subscribe",
    "publish",
    "getex",
    "copy",
    "object",
    "script",
    "slowlog",
    "latency",
];

/// A reply with its maps' entries in one order (Redis answers COMMAND
/// DOCS from hash tables: its order is not part of the reply's meaning).
fn sorted(r: Reply) -> Reply {
    match r {
        Reply::Map(pairs) => {
            let mut pairs: Vec<(Reply, Reply)> = pairs
                .into_iter()
                .map(|(k, v)| (sorted(k), sorted(v)))
                .collect();
            pairs.sort_by_key(|(k, _)| k.to_string());
            Reply::Map(pairs)
        }
        Reply::Array(items) => Reply::Array(items.into_iter().map(sorted).collect()),
        Reply::Set(items) => {
            let mut items: Vec<Reply> = items.into_iter().map(sorted).collect();
            items.sort_by_key(|r| r.to_string());
            Reply::Set(items)
        }
        r => r,
    }
}

#[test]
fn command_docs_and_getkeys_match_redis() {
    let mut p = Pair::new(&[]);
    // RESP3: maps and sets are typed, so their order can be normalised.
    p.both("HELLO 3");
    for name in DOCUMENTED {
        let (e, r) = p.both(&format!("COMMAND DOCS {name}"));
        let (e, r) = (sorted(e), sorted(r));
        if ["object", "script", "latency"].contains(name) {
            // Containers: Elsa shows only the subcommands it has (LATENCY
            // GRAPH, OBJECT…, SCRIPT DEBUG are Redis's alone): compare
            // each subcommand Elsa shows with Redis's.
            let subs = |r: &Reply| -> BTreeMap<String, Reply> {
                let Reply::Map(top) = r else { panic!("{r}") };
                let Reply::Map(fields) = &top[0].1 else {
                    panic!()
                };
                let Some((_, Reply::Map(subs))) = fields
                    .iter()
                    .find(|(k, _)| k.to_string() == "\"subcommands\"")
                else {
                    panic!("no subcommands")
                };
                subs.iter()
                    .map(|(k, v)| (k.to_string(), v.clone()))
                    .collect()
            };
            let (es, rs) = (subs(&e), subs(&r));
            assert!(!es.is_empty());
            for (k, v) in &es {
                assert_eq!(Some(v), rs.get(k), "COMMAND DOCS {name}: {k}");
            }
        } else {
            assert_eq!(e, r, "COMMAND DOCS {name}");
        }
    }
    p.same("COMMAND DOCS config|get");
    p.same("COMMAND DOCS nosuchcommand");
    let (Reply::Map(all), _) = p.both("COMMAND DOCS") else {
        panic!("COMMAND DOCS")
    };
    let Reply::Int(count) = call(&mut p.e, "COMMAND COUNT") else {
        panic!()
    };
    assert_eq!(all.len() as i64, count, "every command has docs");
    for line in [
        "COMMAND GETKEYS SET k v",
        "COMMAND GETKEYS MSET a 1 b 2",
        "COMMAND GETKEYS ZUNIONSTORE dst 2 a b",
        "COMMAND GETKEYS EVAL return 2 x y",
        "COMMAND GETKEYS EVAL return 0",
        "COMMAND GETKEYS LMOVE a b LEFT RIGHT",
        "COMMAND GETKEYS PING",
        "COMMAND GETKEYS GET",
        "COMMAND GETKEYS NOSUCH x",
        "COMMAND GETKEYSANDFLAGS SET k v",
        "COMMAND GETKEYSANDFLAGS SET k v GET",
        "COMMAND GETKEYSANDFLAGS LMOVE a b LEFT RIGHT",
        "COMMAND GETKEYSANDFLAGS DEL a b",
        "COMMAND GETKEYSANDFLAGS GET k",
        "COMMAND GETKEYSANDFLAGS SMOVE a b m",
        "COMMAND GETKEYS",
        "COMMAND LIST FILTERBY PATTERN hkey*",
        "COMMAND LIST FILTERBY MODULE nosuch",
        "COMMAND LIST FILTERBY ACLCAT nosuchcategory",
        "COMMAND LIST FILTERBY FOO x",
        "COMMAND LIST BAR",
    ] {
        let (e, r) = p.both(line);
        assert_eq!(sorted(e), sorted(r), "{line}");
    }
    // ACLCAT: Elsa's commands of a category are Redis's that Elsa has.
    let list = |r: Reply| -> BTreeSet<String> {
        let Reply::Array(items) = r else { panic!() };
        items.iter().map(|i| i.to_string()).collect()
    };
    let (e, r) = p.both("COMMAND LIST FILTERBY ACLCAT hash");
    let (e, r) = (list(e), list(r));
    assert!(e.len() > 10 && e.is_subset(&r), "{e:?}");
    let (e, r) = p.both("COMMAND LIST FILTERBY PATTERN config*");
    assert_eq!(list(e), list(r));
}

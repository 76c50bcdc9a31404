//! Errors inside scripts in INFO's errorstats, `total_error_replies` and
//! commandstats, against a real `redis-server` 7.0: Redis counts an error
//! a script's `redis.call`/`redis.pcall` gets where the call answers it,
//! and not again when the script raises or returns it (the error table's
//! `ignore_error_stats_update`); an error the script makes itself
//! (`redis.error_reply`, a table it builds, a Lua error) counts when EVAL
//! answers it. Each script runs alone after `CONFIG RESETSTAT`, and the
//! three counters must be Redis's.

mod common;

#[allow(dead_code)]
#[path = "differential/resp.rs"]
mod resp;

use std::collections::BTreeMap;

use common::redis_server::RedisServer;
use common::Elsa;
use resp::{Conn, Reply};

/// Scripts (with one key, `x`) whose errors count in different places.
const SCRIPTS: &[&str] = &[
    // A call's error, raised.
    "return redis.call('incr', 'x', 'y')",
    "redis.call('set', 'x', 'a'); return redis.call('incr', 'x')",
    // A call's error, returned by pcall: counted once.
    "return redis.pcall('incr', 'x', 'y')",
    "redis.call('set', 'x', 'a'); return redis.pcall('incr', 'x')",
    // Caught and not returned: counted at the call only.
    "redis.call('set', 'x', 'a'); local t = redis.pcall('lpush', 'x', 'a'); return 1",
    "local t = redis.pcall('nosuchcommand'); return t['err']",
    // Refused calls (arity, unknown, not allowed in scripts).
    "return redis.pcall('get')",
    "return redis.call('nosuchcommand')",
    "return redis.pcall('multi')",
    // The script's own errors: counted when EVAL answers.
    "return redis.error_reply('MY_CODE custom')",
    "return {err = 'OTHER made here'}",
    "local t = redis.pcall('incr', 'x', 'y'); return {err = t['err']}",
    "error('plain lua error')",
    "return nosuchglobal",
    // A call's error passed on twice: still once.
    "local t = redis.pcall('incr', 'x', 'y'); error(t)",
];

fn info(c: &mut Conn, section: &str) -> BTreeMap<String, String> {
    let text = match c.call(&[b"INFO", section.as_bytes()]) {
        Reply::Bulk(b) | Reply::Verbatim(_, b) => String::from_utf8(b).unwrap(),
        r => panic!("INFO {section}: {r}"),
    };
    text.split("\r\n")
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// errorstats, `total_error_replies`, and each command's calls, rejected
/// and failed counts (no timings).
fn counters(c: &mut Conn) -> BTreeMap<String, String> {
    let mut out = info(c, "errorstats");
    let total = info(c, "stats")
        .remove("total_error_replies")
        .expect("total_error_replies");
    out.insert("total_error_replies".into(), total);
    for (k, v) in info(c, "commandstats") {
        let kept: Vec<&str> = v.split(',').filter(|p| !p.starts_with("usec")).collect();
        out.insert(k, kept.join(","));
    }
    out
}

#[test]
fn script_errors_count_where_redis_counts_them() {
    let elsa = Elsa::start(&[]);
    let redis = RedisServer::start();
    let mut e = Conn::connect(elsa.port).unwrap();
    let mut r = Conn::connect(redis.port).unwrap();
    for script in SCRIPTS {
        let mut got = Vec::new();
        for c in [&mut e, &mut r] {
            c.call(&[b"DEL", b"x"]);
            c.call(&[b"CONFIG", b"RESETSTAT"]);
            let reply = c.call(&[b"EVAL", script.as_bytes(), b"1", b"x"]);
            got.push((reply.is_error(), counters(c)));
        }
        let (redis_got, elsa_got) = (got.pop().unwrap(), got.pop().unwrap());
        assert_eq!(elsa_got.0, redis_got.0, "{script}: an error reply or not");
        assert_eq!(elsa_got.1, redis_got.1, "{script}: counters");
    }
}

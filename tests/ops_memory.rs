//! Memory: accounting, maxmemory and eviction, OBJECT FREQ/IDLETIME and
//! MEMORY, against real `elsa server` processes — and, where Redis defines
//! the behaviour (errors, which commands -OOM refuses, CONFIG, OBJECT and
//! MEMORY replies), against a real redis-server given the same commands.

mod common;

#[path = "differential/resp.rs"]
#[allow(dead_code)]
mod resp;

use std::collections::HashSet;
use std::time::Duration;

use common::cluster::Cluster;
use common::redis_server::RedisServer;
use common::Elsa;
use resp::Conn;

/// Both servers, one raw connection each.
struct Pair {
    elsa: Conn,
    redis: Conn,
    _e: Elsa,
    _r: RedisServer,
}

impl Pair {
    fn start() -> Pair {
        let e = Elsa::start(&["--workers", "2"]);
        let r = RedisServer::start();
        Pair {
            elsa: Conn::connect(e.port).expect("connect elsa"),
            redis: Conn::connect(r.port).expect("connect redis"),
            _e: e,
            _r: r,
        }
    }

    /// Sends `args` to both; the replies must be equal. Returns Elsa's.
    fn same(&mut self, args: &[&str]) -> String {
        let b: Vec<&[u8]> = args.iter().map(|a| a.as_bytes()).collect();
        let e = render(self.elsa.call(&b));
        let r = render(self.redis.call(&b));
        assert_eq!(e, r, "{args:?}: Elsa vs Redis");
        e
    }

    /// `line` split at spaces, to both (see [`Pair::same`]).
    fn line(&mut self, line: &str) -> String {
        let args: Vec<&str> = line.split(' ').collect();
        self.same(&args)
    }
}

fn render(r: resp::Reply) -> String {
    match r {
        resp::Reply::Error(e) => format!("-{}", String::from_utf8_lossy(&e)),
        r => r.to_string(),
    }
}

/// One `field:value` of an INFO text.
fn field(info: &str, name: &str) -> Option<String> {
    info.lines()
        .find_map(|l| l.strip_prefix(&format!("{name}:")))
        .map(|v| v.trim().to_string())
}

fn info(c: &mut redis::Connection, section: &str) -> String {
    redis::cmd("INFO").arg(section).query(c).expect("INFO")
}

fn num(c: &mut redis::Connection, section: &str, name: &str) -> u64 {
    let text = info(c, section);
    field(&text, name)
        .unwrap_or_else(|| panic!("no {name} in INFO {section}:\n{text}"))
        .parse()
        .unwrap_or_else(|_| panic!("{name} is not a number"))
}

const OOM: &str = "-OOM command not allowed when used memory > 'maxmemory'.";

#[test]
fn noeviction_refuses_denyoom_commands_as_redis() {
    let mut p = Pair::start();
    p.line("SET k v");
    p.line("RPUSH l a");
    p.line("CONFIG SET maxmemory-policy noeviction");
    // 1 byte: both servers are over the limit whatever they hold.
    p.line("CONFIG SET maxmemory 1");
    // Writes Redis flags `denyoom` are refused…
    for w in [
        "SET k v2",
        "INCR n",
        "APPEND k x",
        "LPUSH l b",
        "HSET h f v",
        "SADD s m",
        "ZADD z 1 m",
        "SETNX k2 v",
        "MSET a 1 b 2",
    ] {
        assert_eq!(p.line(w), OOM, "{w}");
    }
    // …reads, deletes and other writes that free memory are served.
    assert_eq!(p.line("GET k"), "\"v\"");
    p.line("EXISTS k");
    p.line("EXPIRE k 100");
    p.line("LPOP l");
    p.line("GETDEL k");
    p.line("DEL l");
    // MULTI: a refused command fails the transaction, EXEC aborts; even a
    // read is refused while queueing (Redis: queueing may use memory).
    p.line("MULTI");
    assert_eq!(p.line("SET x y"), OOM);
    p.line("EXEC");
    p.line("MULTI");
    assert_eq!(p.line("GET x"), OOM);
    p.line("EXEC");
    p.line("MULTI");
    p.line("DISCARD");
    // EVAL runs; a denyoom command inside it fails the script.
    p.same(&["EVAL", "return 1", "0"]);
    p.same(&["EVAL", "return redis.call('get','x')", "0"]);
    let e = p.same(&["EVAL", "return redis.call('set','x','y')", "0"]);
    assert!(e.starts_with(OOM), "{e}");
    p.line("CONFIG SET maxmemory 0");
    assert_eq!(p.line("SET k v"), "+OK");
}

#[test]
fn memory_settings_in_config_as_redis() {
    let mut p = Pair::start();
    for bad in [
        "CONFIG SET maxmemory-policy bogus",
        "CONFIG SET maxmemory bogus",
        "CONFIG SET maxmemory -1",
        "CONFIG SET maxmemory 1xb",
        "CONFIG SET maxmemory-samples 0",
        "CONFIG SET maxmemory-samples x",
        "CONFIG SET lfu-log-factor -1",
        "CONFIG SET lfu-decay-time x",
    ] {
        assert!(p.line(bad).starts_with("-ERR CONFIG SET failed"), "{bad}");
    }
    // Nothing of a refused request applies: both still say the defaults.
    p.line("CONFIG SET maxmemory 10mb maxmemory-policy bogus");
    p.line("CONFIG GET maxmemory");
    p.line("CONFIG GET maxmemory-policy");
    for (set, get) in [
        ("CONFIG SET maxmemory 10mb", "CONFIG GET maxmemory"),
        ("CONFIG SET maxmemory 1kb", "CONFIG GET maxmemory"),
        ("CONFIG SET maxmemory 1000", "CONFIG GET maxmemory"),
        (
            "CONFIG SET maxmemory-policy ALLKEYS-LFU",
            "CONFIG GET maxmemory-policy",
        ),
        (
            "CONFIG SET maxmemory-policy volatile-ttl",
            "CONFIG GET maxmemory-policy",
        ),
        (
            "CONFIG SET maxmemory-samples 10",
            "CONFIG GET maxmemory-samples",
        ),
        ("CONFIG SET lfu-log-factor 0", "CONFIG GET lfu-log-factor"),
        ("CONFIG SET lfu-decay-time 5", "CONFIG GET lfu-decay-time"),
    ] {
        assert_eq!(p.line(set), "+OK", "{set}");
        p.line(get);
    }
    p.line("CONFIG SET maxmemory 0 maxmemory-policy noeviction");
    p.line("CONFIG GET maxmemory");
}

#[test]
fn object_freq_and_idletime_per_policy_as_redis() {
    let mut p = Pair::start();
    for (i, policy) in [
        "noeviction",
        "allkeys-lru",
        "volatile-random",
        "allkeys-lfu",
        "volatile-lfu",
    ]
    .iter()
    .enumerate()
    {
        p.line(&format!("CONFIG SET maxmemory-policy {policy}"));
        // A key created under this policy: its clock is of this kind.
        let k = format!("k{i}");
        p.line(&format!("SET {k} v"));
        // A new key's LFU counter is 5; the first read makes it 6 (the
        // increment's probability is 1 at the start value): both exact.
        p.line(&format!("OBJECT FREQ {k}"));
        p.line(&format!("GET {k}"));
        p.line(&format!("OBJECT FREQ {k}"));
        let idle = format!("OBJECT IDLETIME {k}");
        let b: Vec<&[u8]> = idle.split(' ').map(str::as_bytes).collect();
        let (e, r) = (render(p.elsa.call(&b)), render(p.redis.call(&b)));
        if policy.contains("lfu") {
            assert_eq!(e, r, "{idle} under {policy}");
        } else {
            // Seconds since the last access: the clock's second may tick
            // between the two servers' replies, so 0 and 1 are both right.
            assert!(e == ":0" || e == ":1", "{idle} under {policy}: {e}");
            assert!(r == ":0" || r == ":1", "redis: {r}");
        }
        p.line("OBJECT FREQ missing");
        p.line("OBJECT IDLETIME missing");
    }
    p.line("OBJECT FREQ");
    p.line("OBJECT IDLETIME a b");
}

/// OBJECT ENCODING of hashes, sets and sorted sets is their history, as in
/// Redis 7.0: one that outgrew its packed form (an entry too long, too
/// many entries, a member not an integer) stays unpacked after it shrinks,
/// until the key goes. Each line is sent to both servers, the encodings
/// compared; the comments give what Redis 7.0 answers.
#[test]
fn object_encoding_keeps_a_collections_history_as_redis() {
    let mut p = Pair::start();
    let big = "x".repeat(70);
    let seq = |prefix: &str, n: usize| -> String {
        (1..=n).map(|i| format!("{prefix}{i} ")).collect::<String>()
    };
    let steps: Vec<String> = vec![
        // A long value the same HSET set again: hashtable.
        format!("HSET h1 f {big} f s"),
        "OBJECT ENCODING h1".into(),
        // A long value overwritten by a later HSET: still hashtable.
        format!("HSET h2 f {big}"),
        "HSET h2 f s".into(),
        "OBJECT ENCODING h2".into(),
        // A long field name deleted again: hashtable.
        format!("HSET h3 {big} v a b"),
        format!("HDEL h3 {big}"),
        "OBJECT ENCODING h3".into(),
        // HSETNX on a field that is there changes nothing: listpack.
        "HSET h4 f s".into(),
        format!("HSETNX h4 f {big}"),
        "OBJECT ENCODING h4".into(),
        // HSETNX, HINCRBY and HINCRBYFLOAT of long ones: hashtable.
        format!("HSETNX h4 g {big}"),
        "HDEL h4 g".into(),
        "OBJECT ENCODING h4".into(),
        format!("HINCRBY h5 {big} 1"),
        format!("HDEL h5 {big}"),
        "HSET h5 a 1".into(),
        "OBJECT ENCODING h5".into(),
        "HINCRBYFLOAT h6 f 1e70".into(),
        "HSET h6 f 1".into(),
        "OBJECT ENCODING h6".into(),
        // Redis 7.0's own default packs up to 512 fields: listpack.
        format!(
            "HSET h7 {}",
            seq("f", 300).trim_end().replace(' ', " v ") + " v"
        ),
        "OBJECT ENCODING h7".into(),
        // Deleted when emptied, so a new hash starts packed: listpack.
        format!("HSET h8 f {big}"),
        "HDEL h8 f".into(),
        "HSET h8 f s".into(),
        "OBJECT ENCODING h8".into(),
        // A member that is not an integer, removed again: hashtable.
        "SADD s1 1 a".into(),
        "SREM s1 a".into(),
        "OBJECT ENCODING s1".into(),
        // The same through SMOVE's destination.
        "SADD s2 1".into(),
        "SADD s3 a".into(),
        "SMOVE s3 s2 a".into(),
        "SREM s2 a".into(),
        "OBJECT ENCODING s2".into(),
        // Over 512 integers, then 10 left: hashtable.
        format!("SADD s4 {}", seq("", 600).trim_end()),
        format!("SREM s4 {}", seq("", 590).trim_end()),
        "OBJECT ENCODING s4".into(),
        // A store makes a new set from what it holds: intset.
        "SADD s5 1 2".into(),
        "SUNIONSTORE s6 s5".into(),
        "OBJECT ENCODING s6".into(),
        // A long member removed again: skiplist.
        format!("ZADD z1 1 {big} 2 a"),
        format!("ZREM z1 {big}"),
        "OBJECT ENCODING z1".into(),
        format!("ZINCRBY z2 1 {big}"),
        "ZADD z2 1 a".into(),
        format!("ZREM z2 {big}"),
        "OBJECT ENCODING z2".into(),
        // Over 128 members, then 5 left: skiplist.
        format!("ZADD z3 {}", seq("1 m", 130).trim_end()),
        format!("ZREM z3 {}", seq("m", 125).trim_end()),
        "OBJECT ENCODING z3".into(),
        // XX with a long member adds nothing: listpack.
        "ZADD z4 1 a".into(),
        format!("ZADD z4 XX 1 {big}"),
        "OBJECT ENCODING z4".into(),
        // A range stored from a set that was wide: listpack.
        format!("ZADD z5 1 {big} 2 a"),
        "ZRANGESTORE z6 z5 1 1".into(),
        "OBJECT ENCODING z6".into(),
    ];
    for step in &steps {
        p.line(step);
    }
}

#[test]
fn idle_time_counts_seconds_since_the_last_access() {
    let e = Elsa::start(&["--workers", "2", "--maxmemory-policy", "allkeys-lru"]);
    let mut c = e.conn();
    let _: () = redis::cmd("SET").arg("k").arg("v").query(&mut c).unwrap();
    std::thread::sleep(Duration::from_millis(2100));
    // OBJECT, TYPE, TTL and EXISTS do not count as accesses (Redis's
    // LOOKUP_NOTOUCH); GET does.
    let _: String = redis::cmd("TYPE").arg("k").query(&mut c).unwrap();
    let _: i64 = redis::cmd("TTL").arg("k").query(&mut c).unwrap();
    let idle: i64 = redis::cmd("OBJECT")
        .arg("IDLETIME")
        .arg("k")
        .query(&mut c)
        .unwrap();
    assert!(idle >= 2, "slept 2.1 s since SET, idle {idle}");
    let _: String = redis::cmd("GET").arg("k").query(&mut c).unwrap();
    let idle: i64 = redis::cmd("OBJECT")
        .arg("IDLETIME")
        .arg("k")
        .query(&mut c)
        .unwrap();
    assert!(idle <= 1, "read just now, idle {idle}");
}

#[test]
fn memory_command_errors_and_usage_as_redis() {
    let mut p = Pair::start();
    for line in [
        "MEMORY",
        "MEMORY FOO",
        "MEMORY USAGE",
        "MEMORY USAGE missing",
        "MEMORY USAGE k SAMPLES -1",
        "MEMORY USAGE k SAMPLES x",
        "MEMORY USAGE k SAMPLES",
        "MEMORY USAGE k FOO 1",
        "MEMORY STATS x",
        "MEMORY DOCTOR x",
        "MEMORY PURGE x",
        "MEMORY MALLOC-STATS x",
        "MEMORY PURGE",
        "MEMORY HELP",
    ] {
        p.line(line);
    }
    // Sizes differ (Elsa's records are not Redis's objects): every type
    // has one, a missing key none.
    for (make, key) in [
        ("SET s v", "s"),
        ("RPUSH l a b", "l"),
        ("HSET h f v", "h"),
        ("SADD st m", "st"),
        ("ZADD z 1 m", "z"),
    ] {
        p.line(make);
        let args: Vec<&[u8]> = vec![b"MEMORY", b"USAGE", key.as_bytes(), b"SAMPLES", b"0"];
        match p.elsa.call(&args) {
            resp::Reply::Int(n) => assert!(n > 0, "{key}: {n}"),
            other => panic!("MEMORY USAGE {key}: {other:?}"),
        }
    }
    let stats = p.elsa.call(&[b"MEMORY", b"STATS"]);
    let text = stats.to_string();
    for k in [
        "peak.allocated",
        "total.allocated",
        "dataset.bytes",
        "keys.count",
        "fragmentation",
    ] {
        assert!(text.contains(k), "MEMORY STATS lacks {k}: {text}");
    }
    let doctor = render(p.elsa.call(&[b"MEMORY", b"DOCTOR"]));
    assert!(doctor.contains("Sam"), "{doctor}");
    let malloc = render(p.elsa.call(&[b"MEMORY", b"MALLOC-STATS"]));
    assert!(
        malloc.contains("jemalloc"),
        "{}",
        &malloc[..malloc.len().min(200)]
    );
}

#[test]
fn info_memory_uses_redis_field_names() {
    let e = Elsa::start(&["--workers", "2", "--maxmemory", "64mb"]);
    let r = RedisServer::start();
    let mut ec = e.conn();
    let mut rc = redis::Client::open(format!("redis://127.0.0.1:{}/", r.port))
        .unwrap()
        .get_connection()
        .unwrap();
    let names = |t: &str| -> HashSet<String> {
        t.lines()
            .filter_map(|l| l.split_once(':').map(|(k, _)| k.to_string()))
            .collect()
    };
    let ours = names(&info(&mut ec, "memory"));
    let theirs = names(&info(&mut rc, "memory"));
    // Every field Elsa shows is one of Redis's.
    let extra: Vec<&String> = ours.difference(&theirs).collect();
    assert!(extra.is_empty(), "not Redis's: {extra:?}");
    for want in [
        "used_memory",
        "used_memory_human",
        "used_memory_rss",
        "used_memory_peak",
        "used_memory_overhead",
        "used_memory_dataset",
        "allocator_allocated",
        "allocator_resident",
        "maxmemory",
        "maxmemory_human",
        "maxmemory_policy",
        "mem_fragmentation_ratio",
        "mem_allocator",
        "used_memory_lua",
        "used_memory_vm_total",
        "used_memory_scripts",
    ] {
        assert!(ours.contains(want), "INFO memory lacks {want}");
    }
    // The script threads' Lua states, once they ran something.
    let _: i64 = redis::cmd("EVAL")
        .arg("return 1")
        .arg(0)
        .query(&mut ec)
        .unwrap();
    assert!(num(&mut ec, "memory", "used_memory_lua") > 0);
    assert!(num(&mut ec, "memory", "used_memory_scripts") >= "return 1".len() as u64);
    assert_eq!(num(&mut ec, "memory", "maxmemory"), 64 << 20);
    let used = num(&mut ec, "memory", "used_memory");
    let rss = num(&mut ec, "memory", "used_memory_rss");
    assert!(used > 0 && rss > 0);
    assert!(field(&info(&mut ec, "memory"), "mem_allocator")
        .unwrap()
        .starts_with("jemalloc-"));
    assert!(field(&info(&mut ec, "stats"), "evicted_keys").is_some());
}

/// Sets `maxmemory` to what the node uses now plus `room`, with `policy`.
fn limit(c: &mut redis::Connection, policy: &str, room: u64) -> u64 {
    let used = num(c, "memory", "used_memory");
    let max = used + room;
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("maxmemory-policy")
        .arg(policy)
        .arg("maxmemory")
        .arg(max)
        .query(c)
        .unwrap();
    max
}

/// Writes `n` keys `prefix:i` of `size` bytes, pipelined on a raw
/// connection (the client crate's pipeline stops at the first error); with
/// `ex`, each with that TTL. Answers how many the server refused (-OOM).
fn fill(c: &mut Conn, prefix: &str, n: usize, size: usize, ex: Option<u64>) -> usize {
    let value = vec![b'x'; size];
    let mut refused = 0;
    for chunk in (0..n).collect::<Vec<_>>().chunks(200) {
        let reqs: Vec<Vec<Vec<u8>>> = chunk
            .iter()
            .map(|i| {
                let mut r = vec![
                    b"SET".to_vec(),
                    format!("{prefix}:{i}").into_bytes(),
                    value.clone(),
                ];
                if let Some(ex) = ex {
                    r.push(b"EX".to_vec());
                    r.push(ex.to_string().into_bytes());
                }
                r
            })
            .collect();
        c.send(&reqs);
        for _ in chunk {
            match c.read() {
                resp::Reply::Simple(_) => {}
                resp::Reply::Error(e) if e.starts_with(b"OOM") => refused += 1,
                other => panic!("SET: {other:?}"),
            }
        }
    }
    refused
}

/// How many of `prefix:i` for `range` exist.
fn present(c: &mut Conn, prefix: &str, range: std::ops::Range<usize>) -> usize {
    let keys: Vec<String> = range.map(|i| format!("{prefix}:{i}")).collect();
    keys.chunks(500)
        .map(|ks| {
            let mut args: Vec<&[u8]> = vec![b"EXISTS"];
            args.extend(ks.iter().map(|k| k.as_bytes()));
            match c.call(&args) {
                resp::Reply::Int(n) => n as usize,
                other => panic!("EXISTS: {other:?}"),
            }
        })
        .sum()
}

fn read_all(c: &mut Conn, prefix: &str, range: std::ops::Range<usize>) {
    let reqs: Vec<Vec<Vec<u8>>> = range
        .clone()
        .map(|i| vec![b"GET".to_vec(), format!("{prefix}:{i}").into_bytes()])
        .collect();
    c.send(&reqs);
    for _ in range {
        let r = c.read();
        assert!(!r.is_error(), "GET: {r:?}");
    }
}

#[test]
fn allkeys_lru_bounds_memory_and_keeps_recently_used_keys() {
    let e = Elsa::start(&["--workers", "2"]);
    let mut c = e.conn();
    let mut raw = Conn::connect(e.port).unwrap();
    // 8 MiB over what the idle node uses; ~24 MiB get written.
    let max = limit(&mut c, "allkeys-lru", 8 << 20);
    // Old keys; a tenth of them stays in use.
    assert_eq!(fill(&mut raw, "old", 8_000, 400, None), 0);
    // The LRU clock counts seconds (as Redis's): the test lets time pass
    // between rounds so that ages differ.
    std::thread::sleep(Duration::from_millis(1100));
    for round in 0..15 {
        read_all(&mut raw, "old", 0..800);
        assert_eq!(
            fill(&mut raw, &format!("new{round}"), 2_000, 400, None),
            0,
            "allkeys-lru evicts rather than refuses"
        );
        std::thread::sleep(Duration::from_millis(1100));
    }
    read_all(&mut raw, "old", 0..800);
    let evicted = num(&mut c, "stats", "evicted_keys");
    assert!(evicted > 0, "nothing evicted");
    // The dataset's own accounting never passes the limit: it is part of
    // used_memory, which eviction holds near maxmemory (the slack is what
    // is written between two measurements, 10 ms apart, far less than the
    // node's other allocations, which used_memory also counts).
    let dataset = num(&mut c, "memory", "used_memory_dataset");
    assert!(dataset <= max, "dataset {dataset} over maxmemory {max}");
    let hot = present(&mut raw, "old", 0..800);
    let cold = present(&mut raw, "old", 800..8_000);
    // Recently used keys survive; old unused ones went first.
    assert!(
        hot as f64 / 800.0 > 2.0 * (cold as f64 / 7_200.0),
        "hot {hot}/800 vs cold {cold}/7200 survived (evicted {evicted})"
    );
    assert!(hot >= 400, "most hot keys survive: {hot}/800");
}

#[test]
fn volatile_policies_evict_only_keys_with_a_ttl() {
    let e = Elsa::start(&["--workers", "2"]);
    let mut c = e.conn();
    let mut raw = Conn::connect(e.port).unwrap();
    assert_eq!(fill(&mut raw, "keep", 2_000, 100, None), 0);
    limit(&mut c, "volatile-lru", 4 << 20);
    assert_eq!(
        fill(&mut raw, "ttl", 20_000, 400, Some(10_000)),
        0,
        "keys with a TTL make room"
    );
    assert!(num(&mut c, "stats", "evicted_keys") > 0);
    assert_eq!(present(&mut raw, "keep", 0..2_000), 2_000, "no TTL: kept");
    // Persistent keys only, from now on: the TTL keys are evicted until
    // none is left, then writes are refused.
    let mut refused = 0;
    for round in 0..50 {
        refused += fill(&mut raw, &format!("more{round}"), 2_000, 400, None);
        if refused > 0 {
            break;
        }
    }
    assert!(refused > 0, "OOM once nothing with a TTL is left");
    assert_eq!(present(&mut raw, "keep", 0..2_000), 2_000);
    // EXPIRE (not denyoom) gives keys a TTL again: the stuck shards try
    // again (once a second) and find them, and writes are served again.
    for i in 0..2_000 {
        let _: i64 = redis::cmd("EXPIRE")
            .arg(format!("more0:{i}"))
            .arg(100_000)
            .query(&mut c)
            .unwrap();
    }
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        let r: redis::RedisResult<()> = redis::cmd("SET").arg("after").arg("x").query(&mut c);
        match r {
            Ok(()) => break,
            Err(e) if e.to_string().contains("OOM") && std::time::Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(100))
            }
            Err(e) => panic!("writes still refused after keys got a TTL: {e}"),
        }
    }
    // Reads and deletes still work.
    let _: String = redis::cmd("GET").arg("keep:1").query(&mut c).unwrap();
    let n: i64 = redis::cmd("DEL").arg("keep:1").query(&mut c).unwrap();
    assert_eq!(n, 1);
}

/// Live keys on each shard of a two-worker node (SCAN's cursor is the
/// shard times 256 plus a segment).
fn keys_per_shard(c: &mut redis::Connection) -> [usize; 2] {
    let mut out = [0; 2];
    for (shard, count) in out.iter_mut().enumerate() {
        let mut cursor = shard as u64 * 256;
        loop {
            let (next, keys): (u64, Vec<String>) = redis::cmd("SCAN")
                .arg(cursor)
                .arg("COUNT")
                .arg(1000)
                .query(c)
                .unwrap();
            *count += keys.len();
            if next == 0 || (shard == 0 && next >= 256) {
                break;
            }
            cursor = next;
        }
    }
    out
}

/// The node's excess is split among its shards by the keys each holds.
/// When it was one figure every shard drew on, the shard of the writing
/// connection paid all of it: here the other shard's share of the keys
/// went from 0.54 to 0.79 over nine rounds of evictions, and the keys of
/// the writing connection's shard — hot ones too — went first.
#[test]
fn eviction_takes_from_each_shard_by_its_share_and_stops_with_the_writes() {
    let e = Elsa::start(&["--workers", "2"]);
    let mut c = e.conn();
    let mut raw = Conn::connect(e.port).unwrap();
    limit(&mut c, "allkeys-lru", 24 << 20);
    assert_eq!(fill(&mut raw, "k0", 20_000, 400, None), 0);
    let before = keys_per_shard(&mut c);
    let share = |k: [usize; 2]| k[0] as f64 / (k[0] + k[1]).max(1) as f64;
    for round in 1..10 {
        assert_eq!(fill(&mut raw, &format!("k{round}"), 20_000, 400, None), 0);
    }
    let evicted = num(&mut c, "stats", "evicted_keys");
    assert!(evicted > 50_000, "evicted {evicted}");
    let after = keys_per_shard(&mut c);
    eprintln!(
        "shard 0's share of the keys: {:.3} before eviction, {:.3} after {evicted} evictions",
        share(before),
        share(after)
    );
    assert!(
        (share(after) - share(before)).abs() < 0.08,
        "shard 0 held {:.2} of the keys before eviction, {:.2} after ({before:?} -> {after:?})",
        share(before),
        share(after)
    );
    // Once the writes stop, so does eviction.
    std::thread::sleep(Duration::from_millis(2500));
    let later = keys_per_shard(&mut c);
    assert!(
        later[0] + later[1] >= (after[0] + after[1]) * 95 / 100,
        "keys went after the writes stopped: {after:?} -> {later:?}"
    );
}

#[test]
fn allkeys_lfu_keeps_the_hot_keys() {
    let e = Elsa::start(&["--workers", "2"]);
    let mut c = e.conn();
    let mut raw = Conn::connect(e.port).unwrap();
    limit(&mut c, "allkeys-lfu", 6 << 20);
    assert_eq!(fill(&mut raw, "hot", 500, 400, None), 0);
    for _ in 0..30 {
        read_all(&mut raw, "hot", 0..500);
    }
    for round in 0..5 {
        assert_eq!(
            fill(&mut raw, &format!("cold{round}"), 10_000, 400, None),
            0
        );
    }
    assert!(num(&mut c, "stats", "evicted_keys") > 0);
    let hot = present(&mut raw, "hot", 0..500);
    let cold = present(&mut raw, "cold0", 0..10_000);
    assert!(hot >= 450, "hot keys kept: {hot}/500 (cold0 {cold}/10000)");
    let freq: i64 = redis::cmd("OBJECT")
        .arg("FREQ")
        .arg("hot:1")
        .query(&mut c)
        .unwrap();
    assert!(freq > 5, "read 30 times: counter {freq}");
}

/// Runs redis-cli with `args` against `port`; its stdout.
fn redis_cli(port: u16, args: &[&str]) -> String {
    let out = std::process::Command::new("redis-cli")
        .args(["-p", &port.to_string()])
        .args(args)
        .output()
        .expect("run redis-cli");
    assert!(out.status.success(), "redis-cli {args:?} failed");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn redis_cli_memkeys_and_hotkeys_show_true_figures() {
    let e = Elsa::start(&["--workers", "2", "--maxmemory-policy", "allkeys-lfu"]);
    let mut c = e.conn();
    for i in 0..200 {
        let _: () = redis::cmd("SET")
            .arg(format!("k{i}"))
            .arg(vec![b'v'; 50 + i])
            .query(&mut c)
            .unwrap();
    }
    let _: () = redis::cmd("SET")
        .arg("biggest")
        .arg(vec![b'b'; 100_000])
        .query(&mut c)
        .unwrap();
    let _: () = redis::cmd("RPUSH")
        .arg("list")
        .arg(&["a", "b", "c"])
        .query(&mut c)
        .unwrap();
    for _ in 0..200 {
        let _: redis::Value = redis::cmd("GET").arg("k7").query(&mut c).unwrap();
    }
    let mem = redis_cli(e.port, &["--memkeys"]);
    let line = mem
        .lines()
        .find(|l| l.starts_with("Biggest string found"))
        .unwrap_or_else(|| panic!("no biggest string in:\n{mem}"));
    assert!(line.contains("'\"biggest\"'"), "{line}");
    let bytes: u64 = line
        .split_whitespace()
        .rev()
        .nth(1)
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("{line}"));
    assert!(bytes >= 100_000, "{line}");
    assert!(mem.contains("list found '\"list\"'"), "{mem}");
    let hot = redis_cli(e.port, &["--hotkeys"]);
    let first = hot
        .lines()
        .find(|l| l.starts_with("hot key found with counter:"))
        .unwrap_or_else(|| panic!("no hot key in:\n{hot}"));
    assert!(first.ends_with("keyname: \"k7\""), "{first}");
    let counter: u32 = first
        .trim_start_matches("hot key found with counter:")
        .split_whitespace()
        .next()
        .and_then(|n| n.parse().ok())
        .unwrap();
    assert!(counter > 5, "{first}");
}

#[test]
fn eviction_is_a_replicated_delete_regions_converge_and_nothing_resurrects() {
    let cluster = Cluster::start(&["r1", "r2"], &[]);
    let mut a = cluster.conn(0);
    let mut ra = Conn::connect(cluster.port(0)).unwrap();
    let mut rb = Conn::connect(cluster.port(1)).unwrap();
    // Only region r1's node has a limit: what it evicts is deleted in r2
    // too, as a DEL would be.
    // Room for the replication state a region node keeps besides its
    // data (docs/operations.md, "Memory limit").
    let _ = limit(&mut a, "allkeys-random", 24 << 20);
    // Paced, so that region r2 keeps up (see the note on room above).
    let mut refused = 0;
    for part in 0..40 {
        refused += fill(&mut ra, &format!("k{part}"), 1_000, 1_000, None);
        std::thread::sleep(Duration::from_millis(100));
    }
    // Not asserted: refusals. In a region, used_memory also counts the
    // replication state a burst leaves behind (docs/operations.md, "Memory
    // limit"); when that alone fills the limit, writes get -OOM as Redis's
    // would. What is checked is what eviction does to replicas.
    eprintln!("writes refused with -OOM: {refused} of 40000");
    let evicted = num(&mut a, "stats", "evicted_keys");
    assert!(evicted > 0, "nothing evicted");
    // The limit lifted, so that no eviction runs while the regions are
    // compared (r1 goes on evicting on its epoch timer while over it).
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("maxmemory")
        .arg(0)
        .query(&mut a)
        .unwrap();
    // Anti-entropy and gossip bring both regions to the same state…
    cluster.wait_same_digest(&[0, 1], Duration::from_secs(120));
    let mut b = cluster.conn(1);
    let count = |c: &mut Conn| -> usize {
        (0..40)
            .map(|part| present(c, &format!("k{part}"), 0..1_000))
            .sum()
    };
    let (here, there) = (count(&mut ra), count(&mut rb));
    assert_eq!(here, there, "both regions hold the same keys");
    assert!(here < 40_000 - refused, "r1 evicted, and r2 agrees");
    // …and an evicted key stays gone: several anti-entropy rounds later
    // (300 ms each), neither region has it back.
    let mut gone = Vec::new();
    for part in 0..40 {
        for i in 0..1_000 {
            let k = format!("k{part}:{i}");
            let n: i64 = redis::cmd("EXISTS").arg(&k).query(&mut a).unwrap();
            if n == 0 && gone.len() < 200 {
                gone.push(k);
            }
        }
    }
    assert!(!gone.is_empty());
    std::thread::sleep(Duration::from_secs(2));
    cluster.wait_same_digest(&[0, 1], Duration::from_secs(120));
    for k in gone {
        for (c, node) in [(&mut a, "r1"), (&mut b, "r2")] {
            let n: i64 = redis::cmd("EXISTS").arg(&k).query(c).unwrap();
            assert_eq!(n, 0, "{k} came back in {node}");
        }
    }
}

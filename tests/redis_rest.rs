//! The rest of Redis 7.0 (issue 45) against a real redis-server 7.0: the
//! same commands sent to Elsa and to Redis, their replies compared — the
//! encoding thresholds CONFIG SET changes (and their `ziplist` aliases)
//! as `OBJECT ENCODING` and the SCAN family honour them, `COMMAND HELP`,
//! `CONFIG HELP`, `ROLE`, `LOLWUT`, `WAIT`; the GEO commands.

mod common;
#[allow(dead_code)]
#[path = "differential/resp.rs"]
mod resp;

use common::redis_server::RedisServer;
use common::Elsa;
use resp::Reply;

/// Elsa and redis-server side by side, one connection to each.
struct Pair {
    _elsa: Elsa,
    _redis: RedisServer,
    e: resp::Conn,
    r: resp::Conn,
}

impl Pair {
    fn new() -> Pair {
        let elsa = Elsa::start(&[]);
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

    /// Sends `line` (words separated by single spaces) to both and
    /// asserts the replies are equal.
    fn same(&mut self, line: &str) -> Reply {
        let words: Vec<String> = line.split(' ').map(|w| w.replace("\\x20", " ")).collect();
        let args: Vec<&[u8]> = words.iter().map(|w| w.as_bytes()).collect();
        let a = self.e.call(&args);
        let b = self.r.call(&args);
        assert_eq!(a, b, "{line}: Elsa {a} vs Redis {b}");
        a
    }

    /// Sends `args` to both and asserts the replies are equal.
    fn same_args(&mut self, args: &[&[u8]]) -> Reply {
        let a = self.e.call(args);
        let b = self.r.call(args);
        assert_eq!(a, b, "{args:?}: Elsa {a} vs Redis {b}");
        a
    }

    /// Sends `line` to both; the replies may differ (a version, an id).
    fn both(&mut self, line: &str) {
        let args: Vec<&[u8]> = line.split(' ').map(str::as_bytes).collect();
        self.e.call(&args);
        self.r.call(&args);
    }
}

#[test]
fn encoding_thresholds_are_set_read_and_honoured_as_in_redis() {
    let mut p = Pair::new();
    // Defaults, by either name.
    for name in [
        "hash-max-listpack-entries",
        "hash-max-ziplist-entries",
        "hash-max-listpack-value",
        "hash-max-ziplist-value",
        "set-max-intset-entries",
        "zset-max-listpack-entries",
        "zset-max-ziplist-entries",
        "zset-max-listpack-value",
        "zset-max-ziplist-value",
        "list-max-listpack-size",
        "list-max-ziplist-size",
        "list-compress-depth",
    ] {
        p.same(&format!("CONFIG GET {name}"));
    }
    // Set by the alias, read by the name, and back.
    p.same("CONFIG SET hash-max-ziplist-entries 4");
    p.same("CONFIG GET hash-max-listpack-entries");
    p.same("CONFIG SET zset-max-ziplist-value 1kb");
    p.same("CONFIG GET zset-max-listpack-value");
    p.same("CONFIG SET list-max-ziplist-size -3");
    p.same("CONFIG GET list-max-listpack-size");
    p.same("CONFIG SET list-compress-depth 2");
    p.same("CONFIG GET list-compress-depth");
    // Errors, word for word.
    for line in [
        "CONFIG SET hash-max-listpack-entries -1",
        "CONFIG SET hash-max-listpack-entries x",
        "CONFIG SET hash-max-listpack-value lots",
        "CONFIG SET list-compress-depth -1",
        "CONFIG SET set-max-intset-entries 1.5",
    ] {
        let r = p.same(line);
        assert!(r.is_error(), "{line}: {r}");
    }
    // `appendfsync` at run time (the shards' logs follow).
    for line in [
        "CONFIG SET appendfsync no",
        "CONFIG GET appendfsync",
        "CONFIG SET appendfsync ALWAYS",
        "CONFIG GET appendfsync",
        "CONFIG SET appendfsync sometimes",
        "CONFIG SET appendfsync everysec",
        "SET afterwards 1",
        "GET afterwards",
    ] {
        p.same(line);
    }
    // `save`, as Redis's own tests set it (Elsa: the snapshot interval).
    p.same("CONFIG SET save ");
    p.same("CONFIG GET save");
    p.same("CONFIG SET save 3600\\x201\\x20300\\x20100");
    p.same("CONFIG GET save");
    for line in [
        "CONFIG SET save 1",
        "CONFIG SET save 0\\x201",
        "CONFIG SET save x\\x201",
        "CONFIG SET save 10\\x20-1",
    ] {
        let r = p.same(line);
        assert!(r.is_error(), "{line}: {r}");
    }
    // Small thresholds, as Redis's own tests set them, then collections
    // on either side of them.
    p.same("CONFIG SET hash-max-listpack-entries 4 hash-max-listpack-value 8");
    p.same("CONFIG SET set-max-intset-entries 4");
    p.same("CONFIG SET zset-max-listpack-entries 4 zset-max-listpack-value 8");
    p.same("HSET h1 a 1 b 2");
    p.same("OBJECT ENCODING h1");
    p.same("HSET h2 a 1 b 2 c 3 d 4 e 5");
    p.same("OBJECT ENCODING h2");
    p.same("HSET h3 a 123456789");
    p.same("OBJECT ENCODING h3");
    p.same("HDEL h2 e d c");
    // Redis does not pack a hash again.
    p.same("OBJECT ENCODING h2");
    p.same("SADD s1 1 2 3");
    p.same("OBJECT ENCODING s1");
    p.same("SADD s2 1 2 3 4 5");
    p.same("OBJECT ENCODING s2");
    p.same("ZADD z1 1 a 2 b");
    p.same("OBJECT ENCODING z1");
    p.same("ZADD z2 1 a 2 b 3 c 4 d 5 e");
    p.same("OBJECT ENCODING z2");
    p.same("ZADD z3 1 abcdefghij");
    p.same("OBJECT ENCODING z3");
    // A packed collection is scanned whole.
    p.same("HSCAN h1 0 COUNT 1");
    p.same("ZSCAN z1 0 COUNT 1");
    // Raised again: new collections pack up to the new limits.
    p.same("CONFIG SET hash-max-listpack-entries 512 zset-max-listpack-entries 128");
    p.same("HSET h4 a 1 b 2 c 3 d 4 e 5");
    p.same("OBJECT ENCODING h4");
    p.same("ZADD z4 1 a 2 b 3 c 4 d 5 e");
    p.same("OBJECT ENCODING z4");
}

#[test]
fn help_role_and_lolwut_answer_as_redis() {
    let mut p = Pair::new();
    for line in [
        "COMMAND HELP",
        "CONFIG HELP",
        "LATENCY HELP",
        "LATENCY GRAPH command",
        "LATENCY GRAPH",
        "COMMAND GETKEYSANDFLAGS sort k1 store k2",
        "COMMAND GETKEYSANDFLAGS sort k1 by w_* get #",
        "ROLE",
        "LOLWUT VERSION x",
        "ROLE extra",
        // No replicas: WAIT answers 0 (after its timeout when it asks for
        // more); inside MULTI at once.
        "WAIT 0 0",
        "WAIT 1 50",
        "WAIT x 0",
        "WAIT 0 -1",
        "WAIT 0 x",
        "MULTI",
        "WAIT 5 0",
        "EXEC",
    ] {
        p.same(line);
    }
    // LOLWUT names the server's version: Elsa's Redis compatibility level.
    let Reply::Bulk(text) = p.e.call(&[b"LOLWUT"]) else {
        panic!("LOLWUT answers a bulk string")
    };
    assert!(text.starts_with(b"Redis ver. 7.0"), "{text:?}");
}

/// A small deterministic generator (the test needs no seed to replay).
struct Lcg(u64);

impl Lcg {
    fn next(&mut self) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        self.0 >> 33
    }

    /// A number in `lo..hi` with 6 decimals, as text.
    fn coord(&mut self, lo: f64, hi: f64) -> String {
        let f = (self.next() % 1_000_000) as f64 / 1_000_000.0;
        format!("{:.6}", lo + f * (hi - lo))
    }

    fn pick<'a>(&mut self, of: &[&'a str]) -> &'a str {
        of[(self.next() % of.len() as u64) as usize]
    }
}

#[test]
fn geo_commands_answer_as_redis() {
    let mut p = Pair::new();
    // Redis's documentation example, then the edges of the area.
    for line in [
        "GEOADD Sicily 13.361389 38.115556 Palermo 15.087269 37.502669 Catania",
        "GEOADD Sicily NX CH 13.361389 38.115556 Palermo 12.758489 38.788135 edge1",
        "GEOADD Sicily XX CH 13.5 38.0 Palermo 1 1 never",
        "GEOADD Sicily 180 85.05112878 north -180 -85.05112878 south",
        "GEOPOS Sicily Palermo Catania nonexisting north south",
        "GEOPOS nokey a",
        "GEODIST Sicily Palermo Catania",
        "GEODIST Sicily Palermo Catania km",
        "GEODIST Sicily Palermo Catania MI",
        "GEODIST Sicily Palermo Catania ft",
        "GEODIST Sicily Palermo nonexisting",
        "GEODIST nokey a b",
        "GEOHASH Sicily Palermo Catania north south nonexisting",
        "GEORADIUS Sicily 15 37 200 km WITHDIST",
        "GEORADIUS Sicily 15 37 200 km WITHCOORD",
        "GEORADIUS Sicily 15 37 200 km WITHDIST WITHCOORD WITHHASH DESC",
        "GEORADIUS Sicily 15 37 200 km COUNT 1",
        "GEORADIUS Sicily 15 37 200 km COUNT 1 ANY",
        "GEORADIUS Sicily 15 37 200 km STORE dst",
        "ZRANGE dst 0 -1 WITHSCORES",
        "GEORADIUS Sicily 15 37 200 km STOREDIST dst",
        "ZRANGE dst 0 -1 WITHSCORES",
        "GEORADIUS Sicily 15 37 1 km STORE dst",
        "EXISTS dst",
        "GEORADIUSBYMEMBER Sicily Palermo 200 km WITHDIST ASC",
        "GEORADIUSBYMEMBER_RO Sicily Palermo 200 km",
        "GEORADIUS_RO Sicily 15 37 200 km ASC",
        "GEOSEARCH Sicily FROMLONLAT 15 37 BYRADIUS 200 km ASC WITHDIST",
        "GEOSEARCH Sicily FROMMEMBER Palermo BYBOX 400 400 km DESC WITHCOORD",
        "GEOSEARCH Sicily FROMLONLAT 15 37 BYBOX 400 400 km ASC COUNT 1 WITHHASH",
        "GEOSEARCH nokey FROMMEMBER x BYRADIUS 1 km",
        "GEOSEARCHSTORE dst2 Sicily FROMLONLAT 15 37 BYRADIUS 200 km STOREDIST",
        "ZRANGE dst2 0 -1 WITHSCORES",
        "GEOSEARCHSTORE dst2 nokey FROMLONLAT 15 37 BYRADIUS 200 km",
        "EXISTS dst2",
        // Errors, word for word.
        "GEOADD Sicily 200 100 bad",
        "GEOADD Sicily x 1 bad",
        "GEOADD Sicily NX XX 1 1 m",
        "GEOADD Sicily 1 1",
        "GEOADD Sicily GT 1 1 m",
        "GEODIST Sicily a b parsec",
        "GEODIST Sicily a b km extra",
        "GEORADIUS Sicily 15 37 -1 km",
        "GEORADIUS Sicily 15 37 x km",
        "GEORADIUS Sicily 15 37 1 km COUNT 0",
        "GEORADIUS Sicily 15 37 1 km COUNT x",
        "GEORADIUS Sicily 15 37 1 km ANY",
        "GEORADIUS Sicily 15 37 1 km STORE d WITHDIST",
        "GEORADIUS_RO Sicily 15 37 1 km STORE d",
        "GEORADIUS Sicily 15 37 1 km BYBOX 1 1 km",
        "GEOSEARCH Sicily BYRADIUS 1 km",
        "GEOSEARCH Sicily FROMLONLAT 1 1",
        "GEOSEARCH Sicily FROMLONLAT 1 1 FROMMEMBER Palermo BYRADIUS 1 km",
        "GEOSEARCH Sicily FROMLONLAT 1 1 BYRADIUS 1 km BYBOX 1 1 km",
        "GEOSEARCH Sicily FROMLONLAT 1 1 BYBOX -1 1 km",
        "GEOSEARCH Sicily FROMLONLAT 1 1 BYBOX x 1 km",
        "GEOSEARCH Sicily FROMLONLAT 1 1 BYBOX 1 x km",
        "GEOSEARCH Sicily FROMMEMBER nonexisting BYRADIUS 1 km",
        "GEOSEARCHSTORE d Sicily FROMLONLAT 1 1 BYRADIUS 1 km WITHDIST",
        "GEORADIUSBYMEMBER Sicily nonexisting 1 km",
        // Scores no GEOADD writes: decoded as Redis's C converts them.
        "ZADD odd -1 neg 0 zero 1e19 big 5e18 mid 1e30 huge -1e30 tiny 4503599627370496 top 1.5 half",
        "GEOPOS odd neg zero big mid huge tiny top half",
        "GEOHASH odd neg zero big mid huge tiny top half",
        "GEODIST odd neg big",
        "GEODIST odd huge tiny km",
        "GEOSEARCH odd FROMMEMBER zero BYRADIUS 20000 km ASC WITHHASH",
        // Their keys, as ACL and cluster routing see them.
        "COMMAND GETKEYSANDFLAGS georadius k 1 1 1 km STORE d STOREDIST e",
        "COMMAND GETKEYSANDFLAGS georadiusbymember k m 1 km STOREDIST e",
        "COMMAND GETKEYSANDFLAGS geosearchstore d s FROMLONLAT 1 1 BYRADIUS 1 km",
        "COMMAND GETKEYSANDFLAGS geoadd k 1 1 m",
        "COMMAND GETKEYS georadius_ro k 1 1 1 km",
        // In a transaction and a script, as alone.
        "MULTI",
        "GEOADD tx 13.361389 38.115556 Palermo",
        "GEOSEARCH tx FROMLONLAT 13 38 BYRADIUS 100 km WITHCOORD WITHDIST",
        "GEOPOS tx Palermo",
        "EXEC",
        "EVAL return\\x20redis.call('GEOPOS',KEYS[1],'Palermo','x') 1 Sicily",
        "EVAL return\\x20redis.call('GEODIST',KEYS[1],'Palermo','Catania','km') 1 Sicily",
        "OBJECT ENCODING Sicily",
        "TYPE Sicily",
        "SET str x",
        "GEOPOS str a",
        "GEOADD str 1 1 a",
        "GEOSEARCH str FROMLONLAT 1 1 BYRADIUS 1 km",
    ] {
        p.same(line);
    }
    // RESP3: coordinates are doubles.
    p.both("HELLO 3");
    p.same("GEOPOS Sicily Palermo north");
    p.same("GEOSEARCH Sicily FROMLONLAT 15 37 BYRADIUS 200 km ASC WITHCOORD WITHDIST");
    p.both("HELLO 2");
    // Many points around a centre, and searches of every shape and option.
    let mut g = Lcg(7);
    for batch in 0..10 {
        let mut line = String::from("GEOADD pts");
        for i in 0..50 {
            // Mostly Europe; some across the antimeridian and near the
            // edge of the indexable area.
            let (x, y) = match batch {
                8 => (g.coord(-180.0, 180.0), g.coord(80.0, 85.05)),
                9 => (g.coord(170.0, 180.0), g.coord(-10.0, 10.0)),
                _ => (g.coord(-10.0, 10.0), g.coord(40.0, 60.0)),
            };
            line.push_str(&format!(" {x} {y} p{batch}-{i}"));
        }
        p.same(&line);
    }
    for _ in 0..600 {
        let from = if g.next() % 3 == 0 {
            format!("FROMMEMBER p{}-{}", g.next() % 10, g.next() % 50)
        } else {
            let (x, y) = match g.next() % 5 {
                0 => (g.coord(-180.0, 180.0), g.coord(78.0, 85.05)),
                1 => (g.coord(-180.0, -175.0), g.coord(-12.0, 12.0)),
                _ => (g.coord(-12.0, 12.0), g.coord(38.0, 62.0)),
            };
            format!("FROMLONLAT {x} {y}")
        };
        let unit = g.pick(&["m", "km", "mi", "ft"]);
        let size = |g: &mut Lcg| match unit {
            "m" => g.coord(1.0, 900_000.0),
            "ft" => g.coord(1.0, 2_900_000.0),
            "km" => g.coord(0.5, 900.0),
            _ => g.coord(0.5, 560.0),
        };
        let by = if g.next() % 2 == 0 {
            format!("BYRADIUS {} {unit}", size(&mut g))
        } else {
            format!("BYBOX {} {} {unit}", size(&mut g), size(&mut g))
        };
        let mut opts = String::new();
        for o in ["WITHDIST", "WITHCOORD", "WITHHASH"] {
            if g.next() % 2 == 0 {
                opts.push(' ');
                opts.push_str(o);
            }
        }
        match g.next() % 4 {
            0 => opts.push_str(" ASC"),
            1 => opts.push_str(" DESC"),
            _ => {}
        }
        if g.next() % 3 == 0 {
            opts.push_str(&format!(" COUNT {}", 1 + g.next() % 20));
            if g.next() % 3 == 0 {
                opts.push_str(" ANY");
            }
        }
        p.same(&format!("GEOSEARCH pts {from} {by}{opts}"));
    }
}

/// A MONITOR connection may not touch the key space (Redis treats it as a
/// replica): reads, writes, scripts and PUBLISH are refused with Redis's
/// words (refused commands are not shown to monitors, so each reply is
/// the refusal alone).
#[test]
fn a_monitor_connection_may_not_touch_the_keyspace() {
    let mut p = Pair::new();
    for line in [
        "MONITOR",
        "GET x",
        "SET x 1",
        "EVAL return\\x201 0",
        "PUBLISH c m",
        "GEOADD g 1 1 m",
    ] {
        p.same(line);
    }
}

/// `CONFIG SET appendfsync` reaches the shards' logs: a node started
/// without fsyncs syncs every write once set to `always`.
#[test]
fn appendfsync_set_at_run_time_reaches_the_log() {
    let elsa = Elsa::start(&["--appendfsync", "no"]);
    let mut c = resp::Conn::connect(elsa.port).unwrap();
    let fsyncs = |c: &mut resp::Conn| -> u64 {
        let Reply::Bulk(text) = c.call(&[b"INFO", b"persistence"]) else {
            panic!("INFO answers a bulk string")
        };
        String::from_utf8_lossy(&text)
            .lines()
            .find_map(|l| l.strip_prefix("wal_fsyncs:"))
            .and_then(|v| v.trim().parse().ok())
            .expect("wal_fsyncs")
    };
    c.call(&[b"SET", b"a", b"1"]);
    let before = fsyncs(&mut c);
    assert_eq!(
        c.call(&[b"CONFIG", b"SET", b"appendfsync", b"always"]),
        Reply::Simple(b"OK".to_vec())
    );
    for i in 0..5 {
        c.call(&[b"SET", b"a", i.to_string().as_bytes()]);
    }
    let after = fsyncs(&mut c);
    assert!(after >= before + 5, "fsyncs {before} -> {after}");
}

#[test]
fn sort_answers_as_redis() {
    let mut p = Pair::new();
    for line in [
        "RPUSH l 3 1 2 10 -1 1.5 0x10",
        "SADD s 5 3 9 1",
        "SADD words banana apple cherry",
        "ZADD z 3 c 1 a 2 b 0 d",
        "RPUSH names ann bob cat",
        "MSET w_ann 3 w_bob 1 w_cat 2 o_ann x o_bob y",
        "HSET h_ann age 30 name Ann",
        "HSET h_bob age 20 name Bob",
        "HSET h_cat age 25",
        "SET notalist x",
        "RPUSH bad 1 two 3",
    ] {
        p.same(line);
    }
    for line in [
        "SORT l",
        "SORT l DESC",
        "SORT l LIMIT 1 3",
        "SORT l LIMIT 2 -1",
        "SORT l LIMIT -5 2",
        "SORT l LIMIT 100 5",
        "SORT l LIMIT 0 0",
        "SORT s",
        "SORT s DESC LIMIT 0 2",
        "SORT words ALPHA",
        "SORT words ALPHA DESC",
        "SORT z",
        "SORT z ALPHA DESC",
        "SORT z BY nosort",
        "SORT z BY nosort DESC LIMIT 1 2",
        "SORT l BY nosort",
        "SORT l BY nosort DESC",
        "SORT l BY nosort LIMIT 2 3",
        "SORT l BY nosort DESC LIMIT 2 3",
        "SORT s BY nosort",
        "SORT names BY w_*",
        "SORT names BY w_* DESC",
        "SORT names BY w_* GET #",
        "SORT names BY w_* GET o_* GET #",
        "SORT names BY h_*->age GET h_*->name",
        "SORT names BY h_*->age DESC GET h_*->name GET # GET h_*->nothing",
        "SORT names BY o_* ALPHA",
        "SORT names BY o_* ALPHA DESC GET #",
        "SORT names BY missing_* GET #",
        "SORT names BY w_* LIMIT 1 1 GET o_*",
        "SORT names ALPHA GET w_* GET o_*",
        "SORT names BY w_* STORE out",
        "LRANGE out 0 -1",
        "SORT names BY w_* GET o_* STORE out",
        "LRANGE out 0 -1",
        "SORT nokey STORE out",
        "EXISTS out",
        "SORT nokey",
        "SORT_RO l DESC",
        "SORT_RO names BY w_* GET #",
        // Errors, word for word.
        "SORT bad",
        "SORT bad ALPHA",
        "SORT notalist",
        "SORT l LIMIT x 1",
        "SORT l LIMIT 0",
        "SORT l FOO",
        "SORT_RO l STORE out",
        "SORT l GET",
        "SORT names BY w_* STORE",
        // In a transaction, as alone.
        "MULTI",
        "SORT l DESC LIMIT 0 3",
        "SORT names BY w_* GET o_* STORE out2",
        "LRANGE out2 0 -1",
        "EXEC",
        "EVAL return\\x20redis.call('SORT',KEYS[1],'BY','w_*','GET','#') 1 names",
        // Its keys, as ACL and cluster routing see them.
        "COMMAND GETKEYS SORT l BY w_* LIMIT 0 1 STORE dst",
        "COMMAND GETKEYS SORT l GET store STORE dst",
        "COMMAND GETKEYS SORT_RO l",
    ] {
        p.same(line);
    }
}

/// The command table as `COMMAND` shows it: every command both servers
/// have, with the same arity, flags and key positions — but ZRANK and
/// ZREVRANK, which take Redis 7.2's WITHSCORE (`docs/commands.md`).
#[test]
fn command_info_matches_redis() {
    let mut p = Pair::new();
    type Info = (i64, Vec<String>, i64, i64, i64);
    let table = |c: &mut resp::Conn| -> std::collections::BTreeMap<String, Info> {
        let Reply::Array(cmds) = c.call(&[b"COMMAND"]) else {
            panic!("COMMAND answers an array")
        };
        let text = |r: &Reply| match r {
            Reply::Simple(b) | Reply::Bulk(b) => String::from_utf8_lossy(b).into_owned(),
            other => format!("{other}"),
        };
        let int = |r: &Reply| match r {
            Reply::Int(n) => *n,
            _ => i64::MIN,
        };
        cmds.iter()
            .filter_map(|c| match c {
                Reply::Array(f) if f.len() >= 6 => {
                    let mut flags: Vec<String> = match &f[2] {
                        Reply::Array(fl) | Reply::Set(fl) => fl.iter().map(text).collect(),
                        _ => Vec::new(),
                    };
                    flags.sort();
                    Some((
                        text(&f[0]),
                        (int(&f[1]), flags, int(&f[3]), int(&f[4]), int(&f[5])),
                    ))
                }
                _ => None,
            })
            .collect()
    };
    let elsa = table(&mut p.e);
    let redis = table(&mut p.r);
    let differ: Vec<String> = elsa
        .iter()
        .filter(|(n, _)| !matches!(n.as_str(), "zrank" | "zrevrank"))
        .filter_map(|(n, e)| {
            let r = redis.get(n)?;
            (r != e).then(|| format!("{n}: Elsa {e:?}, Redis {r:?}"))
        })
        .collect();
    assert!(differ.is_empty(), "{}", differ.join("\n"));
}

/// `timeout`: a client idle longer is closed, a subscriber is not — on
/// both servers (Redis checks once a second or so: 3.5 s of idling for a
/// 1 s timeout).
#[test]
fn idle_clients_are_closed_after_the_timeout() {
    let mut p = Pair::new();
    for line in [
        "CONFIG SET timeout -1",
        "CONFIG SET timeout x",
        "CONFIG SET timeout 1",
        "CONFIG GET timeout",
    ] {
        p.same(line);
    }
    for port in [p._elsa.port, p._redis.port] {
        let mut idle = resp::Conn::connect(port).unwrap();
        let mut sub = resp::Conn::connect(port).unwrap();
        assert!(!idle.call(&[b"PING"]).is_error());
        sub.call(&[b"SUBSCRIBE", b"ch"]);
        std::thread::sleep(std::time::Duration::from_millis(3500));
        let mut c = resp::Conn::connect(port).unwrap();
        c.call(&[b"PUBLISH", b"ch", b"still here"]);
        assert!(
            matches!(sub.read(), Reply::Array(m) if m.len() == 3),
            "port {port}: the subscriber was closed"
        );
        idle.set_read_timeout(std::time::Duration::from_secs(2));
        assert!(
            matches!(idle.call(&[b"PING"]), Reply::Broken(_)),
            "port {port}: the idle client is still open"
        );
    }
}

/// MULTI, WATCH and their relatives are served while a script is busy,
/// as Redis serves its `allow-busy` commands; a command refused as busy
/// inside MULTI fails the transaction (Redis's test "MULTI and script
/// timeout").
#[test]
fn multi_is_served_while_a_script_is_busy() {
    let p = Pair::new();
    for port in [p._elsa.port, p._redis.port] {
        let mut a = resp::Conn::connect(port).unwrap();
        let mut b = resp::Conn::connect(port).unwrap();
        let mut d = resp::Conn::connect(port).unwrap();
        a.call(&[b"CONFIG", b"SET", b"lua-time-limit", b"10"]);
        a.call(&[b"SET", b"xx", b"1"]);
        d.send(&[vec![
            b"EVAL".to_vec(),
            b"while true do end".to_vec(),
            b"0".to_vec(),
        ]]);
        std::thread::sleep(std::time::Duration::from_millis(300));
        let got = (
            b.call(&[b"MULTI"]),
            b.call(&[b"INCR", b"xx"]),
            a.call(&[b"SCRIPT", b"KILL"]),
        );
        std::thread::sleep(std::time::Duration::from_millis(300));
        let after = (b.call(&[b"INCR", b"xx"]), b.call(&[b"EXEC"]));
        assert_eq!(got.0, Reply::Simple(b"OK".to_vec()), "port {port}");
        assert!(
            matches!(&got.1, Reply::Error(e) if e.starts_with(b"BUSY")),
            "port {port}: {}",
            got.1
        );
        assert_eq!(got.2, Reply::Simple(b"OK".to_vec()), "port {port}");
        assert_eq!(after.0, Reply::Simple(b"QUEUED".to_vec()), "port {port}");
        assert!(
            matches!(&after.1, Reply::Error(e) if e.starts_with(b"EXECABORT")),
            "port {port}: {}",
            after.1
        );
        assert_eq!(
            a.call(&[b"GET", b"xx"]),
            Reply::Bulk(b"1".to_vec()),
            "port {port}"
        );
    }
}

/// Redis 7.0's `#!lua` shebang on EVAL scripts: `flags=no-writes` makes a
/// script read-only (and EVAL_RO may run it), a declared writer is refused
/// by EVAL_RO, and a bad shebang is a compile error — word for word.
#[test]
fn script_shebangs_answer_as_redis() {
    let mut p = Pair::new();
    p.same("SET x 1");
    let scripts: &[(&[u8], &[u8])] = &[
        (
            b"EVAL",
            b"#!lua flags=no-writes\nreturn redis.call('GET','x')",
        ),
        (
            b"EVAL",
            b"#!lua flags=no-writes\nreturn redis.pcall('SET','x','2')",
        ),
        (b"EVAL", b"#!lua\nreturn redis.call('SET','x','3')"),
        (b"EVAL_RO", b"#!lua\nreturn 1"),
        (
            b"EVAL_RO",
            b"#!lua flags=no-writes,allow-oom\nreturn redis.call('GET','x')",
        ),
        (b"EVAL_RO", b"return redis.call('GET','x')"),
        (b"EVAL", b"#!python\nreturn 1"),
        (b"EVAL", b"#!lua flags=bad\nreturn 1"),
        (b"EVAL", b"#!lua name=f\nreturn 1"),
        (b"EVAL", b"#!lua"),
        (b"EVAL", b"#!lua\nreturn +"),
    ];
    for (cmd, body) in scripts {
        p.same_args(&[cmd, body, b"0"]);
    }
    p.same_args(&[b"SCRIPT", b"LOAD", b"#!lua flags=bad\nreturn 1"]);
    p.same_args(&[b"SCRIPT", b"LOAD", b"#!lua flags=no-writes\nreturn 1"]);
    p.same("GET x");
    // Over maxmemory: a script with flags runs only with allow-oom (or
    // no-writes), and then writes; one without flags is judged by command.
    p.same("CONFIG SET maxmemory 1");
    for body in [
        &b"#!lua flags=\nreturn 1"[..],
        b"#!lua\nreturn 1",
        b"#!lua flags=no-writes\nreturn redis.call('GET','x')",
        b"#!lua flags=allow-oom\nreturn redis.call('SET','x','9')",
        b"return redis.call('GET','x')",
        b"return redis.pcall('SET','x','10')",
    ] {
        p.same_args(&[b"EVAL", body, b"1", b"x"]);
    }
    p.same("CONFIG SET maxmemory 0");
    p.same("GET x");
}

/// The HyperLogLog commands: replies, and the very bytes `GET` shows
/// (sparse edits, promotion to dense, the cached count PFCOUNT writes
/// back), key by key; a value Redis wrote counts the same in Elsa.
#[test]
fn hyperloglog_answers_and_bytes_as_redis() {
    let mut p = Pair::new();
    p.same("PFADD h");
    p.same("PFADD h");
    p.same("GET h");
    p.same("PFADD h a b c d");
    p.same("PFADD h a");
    p.same("GET h");
    p.same("PFCOUNT h");
    p.same("GET h");
    p.same("PFCOUNT h");
    p.same("PFDEBUG ENCODING h");
    p.same("PFDEBUG DECODE h");
    // Many elements, a few at a time: sparse edits, then dense.
    for i in 0..400 {
        let line = format!("PFADD big e{i} f{i} g{i} h{}", i * 7);
        p.same(&line);
        if i % 37 == 0 {
            p.same("GET big");
            p.same("PFCOUNT big");
            p.same("PFDEBUG ENCODING big");
        }
    }
    p.same("GET big");
    p.same("PFCOUNT big h");
    p.same("PFCOUNT big h missing");
    p.same("PFMERGE m h");
    p.same("GET m");
    p.same("PFMERGE m big");
    p.same("GET m");
    p.same("PFCOUNT m");
    p.same("PFMERGE fresh");
    p.same("GET fresh");
    p.same("PFDEBUG TODENSE h");
    p.same("PFDEBUG TODENSE h");
    p.same("PFDEBUG DECODE h");
    p.same("GET h");
    p.same("PFADD s x");
    p.same("PFDEBUG GETREG s");
    p.same("GET s");
    // hll-sparse-max-bytes.
    p.same("CONFIG SET hll-sparse-max-bytes 30");
    p.same("CONFIG GET hll-sparse-max-bytes");
    p.same("PFADD t 1 2 3 4 5 6 7 8 9 10");
    p.same("PFDEBUG ENCODING t");
    p.same("GET t");
    p.same("CONFIG SET hll-sparse-max-bytes 3000");
    // Errors, in Redis's order.
    p.same("SET str hello");
    p.same("PFADD str a");
    p.same("PFCOUNT str");
    p.same("PFCOUNT h str");
    p.same("PFMERGE str h");
    p.same("PFMERGE h str");
    p.same("PFDEBUG ENCODING str");
    p.same("PFDEBUG ENCODING nokey");
    p.same("PFDEBUG NOPE h");
    p.same("LPUSH l a");
    p.same("PFADD l a");
    p.same("PFCOUNT l");
    p.same("PFADD");
    p.same("PFDEBUG ENCODING");
    p.same("PFSELFTEST");
    // `may_replicate`: refused from a read-only script, as a write is.
    p.same_args(&[
        b"EVAL_RO",
        b"return redis.pcall('PFCOUNT', KEYS[1])",
        b"1",
        b"h",
    ]);
    p.same_args(&[
        b"EVAL",
        b"return redis.call('PFCOUNT', KEYS[1])",
        b"1",
        b"h",
    ]);
    // A TTL stays through PFADD, PFCOUNT and PFMERGE.
    p.same("PFADD ttl a");
    p.same("EXPIRE ttl 1000");
    p.same("PFADD ttl b");
    p.same("PFCOUNT ttl");
    p.same("PFMERGE ttl h");
    p.same("TTL ttl");
    // A value Redis made, set in Elsa as bytes: the same counts and edits.
    let made = p.r.call(&[b"GET", b"big"]);
    let Reply::Bulk(bytes) = made else {
        panic!("GET big from Redis: {made}");
    };
    p.same_args(&[b"SET", b"copy", &bytes]);
    p.same("PFCOUNT copy");
    p.same("PFADD copy zz yy xx");
    p.same("GET copy");
    // A corrupt one: sparse opcodes that do not cover the registers.
    let mut bad = b"HYLL\x01\0\0\0\0\0\0\0\0\0\0\x80".to_vec();
    bad.extend_from_slice(&[0x7f, 0xff]);
    p.same_args(&[b"SET", b"bad", &bad]);
    p.same("PFCOUNT bad");
    p.same("PFADD bad a");
}

/// DUMP and RESTORE with Redis 7.0's payload: every type in each of
/// Redis's encodings dumped by redis-server restores in Elsa, Elsa's
/// payloads restore in redis-server, both answer the same; options and
/// refusals in Redis's order and words.
#[test]
fn dump_and_restore_carry_values_both_ways() {
    let mut p = Pair::new();
    let mut setup = vec![
        "SET int 123".to_string(),
        "SET str hello".to_string(),
        format!("SET long {}", "a".repeat(200)),
        "RPUSH list a b 12 -5 70000".to_string(),
        "SADD intset 1 -2 300000".to_string(),
        "SADD set a b c".to_string(),
        "ZADD zset 1 a 2.5 b -3 c".to_string(),
        "HSET hash f v n 12".to_string(),
    ];
    let many: Vec<String> = (0..600).map(|i| format!("m{i}")).collect();
    setup.push(format!("SADD bigset {}", many.join(" ")));
    setup.push(format!("RPUSH biglist {}", many.join(" ")));
    let scored: Vec<String> = (0..300).map(|i| format!("{i}.25 m{i}")).collect();
    setup.push(format!("ZADD bigzset {}", scored.join(" ")));
    let fields: Vec<String> = (0..600).map(|i| format!("f{i} v{i}")).collect();
    setup.push(format!("HSET bighash {}", fields.join(" ")));
    for line in &setup {
        p.same(line);
    }
    let keys = [
        "int", "str", "long", "list", "intset", "set", "zset", "hash", "bigset", "biglist",
        "bigzset", "bighash",
    ];
    let read = |p: &mut Pair, which: &str, key: &str| -> Vec<Reply> {
        let c = if which == "e" { &mut p.e } else { &mut p.r };
        let k = key.as_bytes();
        let mut out = vec![c.call(&[b"TYPE", k])];
        for cmd in [
            &[&b"GET"[..], k][..],
            &[b"LRANGE", k, b"0", b"-1"],
            &[b"SMISMEMBER", k, b"a", b"1", b"-2", b"m599", b"zz"],
            &[b"SCARD", k],
            &[b"ZRANGE", k, b"0", b"-1", b"WITHSCORES"],
            &[b"HGET", k, b"f"],
            &[b"HGET", k, b"f599"],
            &[b"HLEN", k],
        ] {
            out.push(c.call(cmd));
        }
        out
    };
    for key in keys {
        // Redis's payload into Elsa, Elsa's into Redis: same values.
        let Reply::Bulk(theirs) = p.r.call(&[b"DUMP", key.as_bytes()]) else {
            panic!("DUMP {key} from Redis");
        };
        let Reply::Bulk(ours) = p.e.call(&[b"DUMP", key.as_bytes()]) else {
            panic!("DUMP {key} from Elsa");
        };
        let copy = format!("{key}:copy");
        let got = p.e.call(&[b"RESTORE", copy.as_bytes(), b"0", &theirs]);
        assert_eq!(got, Reply::Simple(b"OK".to_vec()), "RESTORE {key} in Elsa");
        let got = p.r.call(&[b"RESTORE", copy.as_bytes(), b"0", &ours]);
        assert_eq!(got, Reply::Simple(b"OK".to_vec()), "RESTORE {key} in Redis");
        let (mut e, mut r) = (read(&mut p, "e", &copy), read(&mut p, "r", &copy));
        // SMEMBERS-like order is not Redis's contract: compare sorted.
        for v in [&mut e, &mut r] {
            for x in v.iter_mut() {
                if let Reply::Array(items) = x {
                    if key.contains("set") && !key.contains("zset") {
                        items.sort_by_key(|i| format!("{i}"));
                    }
                }
            }
        }
        assert_eq!(e, r, "{key}: Elsa {e:?} vs Redis {r:?}");
    }
    // Options, refusals and TTLs.
    let Reply::Bulk(payload) = p.r.call(&[b"DUMP", b"str"]) else {
        panic!("DUMP str");
    };
    let both = |p: &mut Pair, args: &[&[u8]]| p.same_args(args);
    both(&mut p, &[b"RESTORE", b"str", b"0", &payload]);
    both(&mut p, &[b"RESTORE", b"str", b"x", &payload, b"REPLACE"]);
    both(&mut p, &[b"RESTORE", b"str", b"-1", &payload, b"REPLACE"]);
    both(&mut p, &[b"RESTORE", b"str", b"0", &payload, b"BOGUS"]);
    both(
        &mut p,
        &[b"RESTORE", b"str", b"0", &payload, b"IDLETIME", b"-1"],
    );
    both(
        &mut p,
        &[b"RESTORE", b"str", b"0", &payload, b"FREQ", b"300"],
    );
    both(
        &mut p,
        &[
            b"RESTORE",
            b"str",
            b"0",
            &payload,
            b"FREQ",
            b"3",
            b"IDLETIME",
            b"3",
        ],
    );
    both(&mut p, &[b"RESTORE", b"new", b"0", b"garbage"]);
    let mut flipped = payload.clone();
    flipped[2] ^= 0x20;
    both(&mut p, &[b"RESTORE", b"new", b"0", &flipped]);
    both(&mut p, &[b"RESTORE", b"t1", b"100000", &payload]);
    both(&mut p, &[b"TTL", b"t1"]);
    both(&mut p, &[b"RESTORE", b"t2", b"1", &payload, b"ABSTTL"]);
    both(&mut p, &[b"EXISTS", b"t2"]);
    both(
        &mut p,
        &[b"RESTORE", b"str", b"1", &payload, b"ABSTTL", b"REPLACE"],
    );
    both(&mut p, &[b"EXISTS", b"str"]);
    both(
        &mut p,
        &[
            b"RESTORE",
            b"t3",
            b"0",
            &payload,
            b"IDLETIME",
            b"1000",
            b"REPLACE",
        ],
    );
    both(&mut p, &[b"GET", b"t3"]);
    both(&mut p, &[b"DUMP", b"nokey"]);
    both(&mut p, &[b"DUMP"]);
    both(&mut p, &[b"RESTORE", b"k", b"0"]);
    // Inside MULTI.
    both(&mut p, &[b"MULTI"]);
    both(&mut p, &[b"DUMP", b"t3"]);
    both(&mut p, &[b"RESTORE", b"t4", b"0", &payload]);
    both(&mut p, &[b"EXEC"]);
    both(&mut p, &[b"GET", b"t4"]);
    // IDLETIME and FREQ set the key's clock, each under its policy.
    p.same("CONFIG SET maxmemory-policy allkeys-lfu");
    both(
        &mut p,
        &[b"RESTORE", b"lfu", b"0", &payload, b"FREQ", b"100"],
    );
    both(&mut p, &[b"OBJECT", b"FREQ", b"lfu"]);
    p.same("CONFIG SET maxmemory-policy allkeys-lru");
    both(
        &mut p,
        &[b"RESTORE", b"lru", b"0", &payload, b"IDLETIME", b"1000"],
    );
    let Reply::Int(idle) = p.e.call(&[b"OBJECT", b"IDLETIME", b"lru"]) else {
        panic!("OBJECT IDLETIME");
    };
    assert!((1000..=1010).contains(&idle), "{idle}");
    p.same("CONFIG SET maxmemory-policy noeviction");
}

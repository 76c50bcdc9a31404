//! Keyspace notifications against a real `redis-server`: the random
//! command sequences of the differential test (`differential/gen.rs`:
//! every data type, multi-key commands, MULTI/EXEC, scripts, TTLs,
//! databases, RENAME/MOVE/COPY, SORT…) run on Elsa and on Redis 7 with
//! `notify-keyspace-events` on, a subscriber to `*` on each, and the
//! messages each command raised are compared, command by command.
//!
//! After every command (outside MULTI: a MULTI block is one group) the
//! client publishes a marker; the events between two markers are that
//! command's. Left out of the comparison, with its reason
//! (`docs/pubsub.md`, "Keyspace notifications"): `expired` (Redis raises
//! it when a command meets an expired key, Elsa when its sweep collects
//! the key, within a second).
//!
//! `ELSA_KS_SEQUENCES` sequences (default 150) of `ELSA_KS_LEN` commands
//! (default 40), seeds from `ELSA_KS_SEED` (default 1).

mod common;

#[allow(dead_code)]
#[path = "differential/gen.rs"]
mod gen;
#[allow(dead_code)]
#[path = "differential/norm.rs"]
mod norm;
#[allow(dead_code)]
#[path = "differential/resp.rs"]
mod resp;

use std::fmt::Write as _;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use common::redis_server::RedisServer;
use common::{env_or, Elsa};
use gen::Step;
use resp::{Conn, Reply};

/// Every class but `x` (expired: see the module docs) and `m`.
const CLASSES: &str = "KEg$lshzetn";
/// The marker channel.
const MARK: &[u8] = b"~mark";

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("clock")
        .as_millis() as i64
}

/// One server's side: the client running the sequence and the subscriber.
struct Side {
    port: u16,
    client: Conn,
    sub: Conn,
}

impl Side {
    fn open(port: u16) -> Side {
        let mut client = Conn::connect(port).expect("connect");
        assert_eq!(client.call(&[b"FLUSHALL"]), Reply::Simple(b"OK".to_vec()));
        let set = client.call(&[
            b"CONFIG",
            b"SET",
            b"notify-keyspace-events",
            CLASSES.as_bytes(),
        ]);
        assert_eq!(set, Reply::Simple(b"OK".to_vec()), "port {port}");
        let mut sub = Conn::connect(port).expect("connect");
        sub.send(&[vec![b"PSUBSCRIBE".to_vec(), b"*".to_vec()]]);
        let _ = sub.read();
        Side { port, client, sub }
    }

    /// Sends `args`; reads its reply (none for a QUIT that closed).
    fn run(&mut self, args: &[Vec<u8>]) {
        self.client.send(&[args.to_vec()]);
        let r = self.client.read();
        let quit = args
            .first()
            .is_some_and(|a| a.eq_ignore_ascii_case(b"QUIT"));
        if quit || matches!(r, Reply::Broken(_)) {
            self.client = Conn::connect(self.port).expect("reconnect");
        }
    }

    fn mark(&mut self, n: usize) {
        let n = n.to_string().into_bytes();
        self.client
            .send(&[vec![b"PUBLISH".to_vec(), MARK.to_vec(), n]]);
        let _ = self.client.read();
    }

    /// The messages up to marker `n`, as `channel payload` lines.
    fn events_until(&mut self, n: usize) -> Result<Vec<String>, String> {
        let mut out = Vec::new();
        loop {
            match self.sub.read() {
                Reply::Array(m) if m.len() == 4 => {
                    let text = |r: &Reply| match r {
                        Reply::Bulk(b) => String::from_utf8_lossy(b).into_owned(),
                        other => format!("{other:?}"),
                    };
                    let (channel, payload) = (text(&m[2]), text(&m[3]));
                    if channel.as_bytes() == MARK {
                        if payload == n.to_string() {
                            return Ok(out);
                        }
                        continue;
                    }
                    out.push(format!("{channel} {payload}"));
                }
                other => return Err(format!("subscriber got {other:?}")),
            }
        }
    }
}

/// Runs one sequence on both; the first group of events that differs.
fn run(redis: u16, elsa: u16, steps: &[Step]) -> Option<String> {
    let mut r = Side::open(redis);
    let mut e = Side::open(elsa);
    let mut listing = String::new();
    let mut group = 0;
    let mut in_multi = false;
    for step in steps {
        for cmd in &step.cmds {
            let args = cmd.resolve(now_ms());
            let _ = writeln!(listing, "    {}", cmd.line());
            r.run(&args);
            e.run(&args);
            let name = cmd.name();
            // (As `differential/gen.rs` tracks it: a malformed EXEC is
            // an error that leaves the MULTI open.)
            if cmd.is("MULTI", 1) {
                in_multi = true;
            } else if cmd.is("EXEC", 1)
                || cmd.is("DISCARD", 1)
                || cmd.is("RESET", 1)
                || name == "QUIT"
            {
                in_multi = false;
            }
            if in_multi {
                continue;
            }
            group += 1;
            r.mark(group);
            e.mark(group);
            let want = r.events_until(group);
            let got = e.events_until(group);
            match (want, got) {
                (Ok(want), Ok(got)) if want == got => {}
                (want, got) => {
                    return Some(format!(
                        "{listing}  redis raised: {want:?}\n  elsa raised:  {got:?}"
                    ))
                }
            }
        }
        if step.sleep_ms > 0 {
            std::thread::sleep(Duration::from_millis(step.sleep_ms));
        }
    }
    None
}

#[test]
fn keyspace_events_match_redis() {
    let sequences = env_or::<u64>("ELSA_KS_SEQUENCES", 150);
    let len = env_or::<u64>("ELSA_KS_LEN", 40) as usize;
    let base = env_or::<u64>("ELSA_KS_SEED", 1);
    let redis = RedisServer::start();
    let elsa = Elsa::start(&["--workers", "2"]);
    let mut failures = Vec::new();
    for seed in base..base + sequences {
        let seq = gen::sequence(seed, len);
        if let Some(report) = run(redis.port, elsa.port, &seq.steps) {
            failures.push(format!("seed {seed}:\n{report}"));
            if failures.len() >= 5 {
                break;
            }
        }
    }
    assert!(
        failures.is_empty(),
        "{} sequence(s) raised other events than Redis:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

/// A subscriber to `pattern` on `port`.
fn psubscriber(port: u16, pattern: &str) -> Conn {
    let mut c = Conn::connect(port).expect("connect");
    let r = c.call(&[b"PSUBSCRIBE", pattern.as_bytes()]);
    assert!(
        matches!(&r, Reply::Array(v) if v.len() == 3),
        "PSUBSCRIBE: {r:?}"
    );
    c
}

/// `channel payload` of the next message, None when none came within
/// `wait`.
fn next_event(c: &mut Conn, wait: Duration) -> Option<String> {
    match c.read_within(wait)? {
        Reply::Array(m) if m.len() == 4 => match (&m[2], &m[3]) {
            (Reply::Bulk(ch), Reply::Bulk(p)) => Some(format!(
                "{} {}",
                String::from_utf8_lossy(ch),
                String::from_utf8_lossy(p)
            )),
            _ => None,
        },
        _ => None,
    }
}

/// Everything `c` receives until `wait` passes without a message.
fn drain(c: &mut Conn, wait: Duration) -> Vec<String> {
    std::iter::from_fn(|| next_event(c, wait)).collect()
}

fn call(c: &mut Conn, line: &str) -> Reply {
    let args: Vec<&[u8]> = line.split(' ').map(str::as_bytes).collect();
    c.call(&args)
}

/// A script's events and a MULTI's are Redis's, in Redis's order; an
/// interactive transaction's come only once it commits, and one that
/// conflicted raises none.
#[test]
fn scripts_and_transactions_raise_their_events_once_they_commit() {
    let redis = RedisServer::start();
    let elsa = Elsa::start(&["--workers", "2"]);
    let script = "EVAL";
    let body = "redis.call('set',KEYS[1],'v') redis.call('lpush',KEYS[2],'a','b') \
                redis.call('rpop',KEYS[2]) redis.call('rpop',KEYS[2]) return 1";
    let mut seen = Vec::new();
    for port in [redis.port, elsa.port] {
        let mut c = Conn::connect(port).expect("connect");
        call(&mut c, "CONFIG SET notify-keyspace-events KEA");
        let mut sub = psubscriber(port, "*");
        let r = c.call(&[script.as_bytes(), body.as_bytes(), b"2", b"s{t}", b"l{t}"]);
        assert_eq!(r, Reply::Int(1));
        for line in [
            "MULTI",
            "HSET h{t} f 1",
            "HDEL h{t} f",
            "SADD s2{t} a",
            "EXEC",
            // Commands Elsa runs as transactions of others: told as Redis.
            "RPUSH src{t} 3 1 2",
            "SORT src{t} STORE dst{t}",
            "SORT src{t} STORE dst{t}",
            "SORT nosuch{t} STORE dst{t}",
        ] {
            call(&mut c, line);
        }
        let Reply::Bulk(payload) = call(&mut c, "DUMP src{t}") else {
            panic!("DUMP")
        };
        for extra in [&[][..], &[&b"REPLACE"[..]][..]] {
            let mut args: Vec<&[u8]> = vec![b"RESTORE", b"r{t}", b"0", &payload];
            args.extend_from_slice(extra);
            assert_eq!(c.call(&args), Reply::Simple(b"OK".to_vec()));
        }
        seen.push(drain(&mut sub, Duration::from_millis(500)));
    }
    assert!(!seen[0].is_empty());
    assert_eq!(seen[0], seen[1], "redis, then elsa");

    // BEGIN … COMMIT (Elsa's own): nothing before COMMIT.
    let mut c = Conn::connect(elsa.port).expect("connect");
    let mut sub = psubscriber(elsa.port, "__keyevent@0__:*");
    assert_eq!(call(&mut c, "BEGIN"), Reply::Simple(b"OK".to_vec()));
    call(&mut c, "SET a 1");
    call(&mut c, "INCR a");
    assert_eq!(
        drain(&mut sub, Duration::from_millis(300)),
        Vec::<String>::new()
    );
    call(&mut c, "COMMIT");
    assert_eq!(
        drain(&mut sub, Duration::from_millis(500)),
        ["__keyevent@0__:set a", "__keyevent@0__:incrby a"]
    );
    // A transaction that loses to a concurrent write raises nothing.
    let mut other = Conn::connect(elsa.port).expect("connect");
    call(&mut c, "BEGIN");
    call(&mut c, "GET a");
    call(&mut c, "SET a 2");
    call(&mut other, "SET a 3");
    let r = call(&mut c, "COMMIT");
    assert!(r.is_error(), "COMMIT after a concurrent write: {r:?}");
    assert_eq!(
        drain(&mut sub, Duration::from_millis(500)),
        ["__keyevent@0__:set a"],
        "only the other client's SET"
    );
}

/// The cases the long runs found or that sit on an edge of Redis's
/// conditions, each compared with redis-server: BITFIELD whose writes fail
/// (OVERFLOW FAIL) or change nothing, SETBIT of a bit already so, SMOVE to
/// a set that has the member, COPY/RENAME/MOVE onto an existing key (Redis
/// re-adds it: `new`), LMOVE of a one-element list onto itself, stores of
/// an empty result over an existing key, adds that change nothing.
#[test]
fn edge_cases_raise_what_redis_raises() {
    let redis = RedisServer::start();
    let elsa = Elsa::start(&["--workers", "2"]);
    let script = [
        "SET b{t} x",
        "BITFIELD b{t} OVERFLOW FAIL INCRBY u1 3 -129",
        "BITFIELD nb{t} OVERFLOW FAIL INCRBY u1 3 -129",
        "BITFIELD b{t} INCRBY u7 13 256 GET u8 13",
        "BITFIELD b{t} SET u1 13 1",
        "SETBIT b{t} 6 1",
        "SETBIT b{t} 6 1",
        "SADD s{t} a b",
        "SADD d{t} a",
        "SMOVE s{t} d{t} a",
        "SMOVE s{t} d{t} b",
        "SADD d{t} a",
        "SET c{t} 1",
        "COPY b{t} c{t} REPLACE",
        "RENAME c{t} b{t}",
        "SET m 1",
        "RPUSH one{t} x",
        "LMOVE one{t} one{t} LEFT RIGHT",
        "SINTERSTORE d{t} nosuch{t} d{t}",
        "ZADD z{t} 1 a",
        "ZADD z{t} 1 a",
        "ZRANGESTORE z{t} nosuch{t} 0 -1",
        "HSET h{t} f 1",
        "HSETNX h{t} f 2",
        "HDEL h{t} nosuch",
        "HDEL h{t} f",
        "PFADD p{t} a",
        "PFADD p{t} a",
        "GETEX b{t} PERSIST",
        "EXPIRE b{t} 100",
        "GETEX b{t} PERSIST",
        "SET k 1",
        "MOVE k 1",
        "SET m 2",
        "MOVE m 1",
    ];
    let mut seen = Vec::new();
    for port in [redis.port, elsa.port] {
        let mut c = Conn::connect(port).expect("connect");
        call(&mut c, "FLUSHALL");
        call(&mut c, "CONFIG SET notify-keyspace-events KEAn");
        let mut sub = psubscriber(port, "*");
        let mut per_command = Vec::new();
        for line in script {
            call(&mut c, line);
            per_command.push((line, drain(&mut sub, Duration::from_millis(100))));
        }
        seen.push(per_command);
    }
    for (r, e) in seen[0].iter().zip(&seen[1]) {
        assert_eq!(r, e, "redis, then elsa");
    }
}

/// `expired` comes once per key that expires (a string and a hash), and
/// `evicted` once per key evicted.
#[test]
fn expired_and_evicted_keys_are_told_once() {
    let elsa = Elsa::start(&["--workers", "2"]);
    let mut c = Conn::connect(elsa.port).expect("connect");
    call(&mut c, "CONFIG SET notify-keyspace-events Exe");
    let mut sub = psubscriber(elsa.port, "*");
    call(&mut c, "PSETEX s 100 v");
    call(&mut c, "HSET h f v");
    call(&mut c, "PEXPIRE h 150");
    call(&mut c, "SET keep v");
    let mut got = drain(&mut sub, Duration::from_secs(4));
    got.sort();
    assert_eq!(
        got,
        ["__keyevent@0__:expired h", "__keyevent@0__:expired s"]
    );

    call(&mut c, "CONFIG SET maxmemory-policy allkeys-random");
    call(&mut c, "CONFIG SET maxmemory 1");
    let got = drain(&mut sub, Duration::from_secs(2));
    call(&mut c, "CONFIG SET maxmemory 0");
    assert_eq!(got, ["__keyevent@0__:evicted keep"]);
}

/// In a region of three nodes, a subscriber on any node hears every event
/// of the region once, whichever node the client wrote through and
/// whichever node is the key's primary (`docs/pubsub.md`); the classes
/// come from the node's settings (`--notify-keyspace-events`).
#[test]
fn every_node_of_a_region_hears_each_event_once() {
    let cluster =
        common::cluster::Cluster::start(&["r1", "r1", "r1"], &["--notify-keyspace-events", "E$x"]);
    let n = cluster.len();
    let mut subs: Vec<Conn> = (0..n)
        .map(|i| psubscriber(cluster.port(i), "__keyevent@0__:*"))
        .collect();
    let keys = 30;
    for i in 0..keys {
        let mut c = Conn::connect(cluster.port(i % n)).expect("connect");
        assert_eq!(
            call(&mut c, &format!("SET k{i} v")),
            Reply::Simple(b"OK".to_vec())
        );
    }
    let mut c = Conn::connect(cluster.port(1)).expect("connect");
    call(&mut c, "PSETEX gone 100 v");
    for (i, s) in subs.iter_mut().enumerate() {
        let mut got = drain(s, Duration::from_secs(4));
        got.sort();
        let mut want: Vec<String> = (0..keys)
            .map(|k| format!("__keyevent@0__:set k{k}"))
            .collect();
        want.push("__keyevent@0__:set gone".into());
        want.push("__keyevent@0__:expired gone".into());
        want.sort();
        assert_eq!(got, want, "node {i}");
    }
}

//! Functions (FUNCTION, FCALL, FCALL_RO) against a real `redis-server`,
//! across restarts, and across nodes and regions.
//!
//! - `functions_match_redis`: seeded random sequences of FUNCTION LOAD
//!   (valid libraries of random functions — positional and named
//!   registration, flags, descriptions — and broken ones: bad metadata,
//!   compile errors, registration errors, load-time errors, name
//!   collisions), DELETE, LIST, STATS, FLUSH, DUMP and RESTORE (each
//!   server's own payload, and redis-server's on both), FCALL and FCALL_RO
//!   (reads, writes, errors, bad key counts), and reads of the keys the
//!   functions wrote, in lockstep on Elsa and Redis 7; every reply is
//!   compared (library order in LIST, and which colliding library a
//!   RESTORE names first, are Redis's hash order: normalised).
//!   `ELSA_FN_SEQUENCES` (default 60) × `ELSA_FN_LEN` (default 40), seeds
//!   from `ELSA_FN_SEED` (default 1).
//! - `libraries_survive_restarts`: random changes, then SIGTERM, `kill -9`
//!   or SAVE + `kill -9`, and the node lists the same libraries and calls
//!   them alike — a deleted or flushed library stays gone.
//! - `libraries_reach_every_node_and_region`: loads, deletes and flushes
//!   on any node of two regions reach every node; a node cut off or down
//!   during a change catches up (anti-entropy); concurrent loads in two
//!   regions of libraries registering the same function converge on one.

mod common;

#[allow(dead_code)]
#[path = "differential/resp.rs"]
mod resp;

use std::time::{Duration, Instant};

use common::cluster::Cluster;
use common::redis_server::RedisServer;
use common::{env_or, Elsa};
use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use resp::{Conn, Reply};

/// Function bodies (a body is the function's code between `function(keys,
/// args)` and `end`).
const BODIES: &[&str] = &[
    "return redis.call('SET', keys[1], args[1])",
    "return redis.call('GET', keys[1])",
    "return redis.call('INCR', keys[1])",
    "return {keys[1], args[1], #keys, #args}",
    "return redis.pcall('LPUSH', keys[1], 'x')",
    "return redis.call('DEL', keys[1])",
    "error('boom')",
    "return redis.error_reply('MY failure')",
    "return redis.status_reply('fine')",
    "return nil + 1",
    "return KEYS",
    "return redis.call('TYPE', keys[1])",
    "local t = redis.call('MGET', keys[1], keys[2]) return t",
    "return redis.setresp(3)",
];

const FLAGS: &[&str] = &[
    "",
    "'no-writes'",
    "'allow-oom'",
    "'no-writes', 'allow-stale'",
    "'NO-WRITES'",
];

/// Libraries that fail to load, each for its own reason.
const BROKEN: &[&str] = &[
    "return 1",
    "#!lua\nredis.register_function('f0', function() return 1 end)",
    "#!bad name=lib9\nredis.register_function('f0', function() return 1 end)",
    "#!lua name=b-d\nredis.register_function('f0', function() return 1 end)",
    "#!lua name=lib9 foo=bar\nredis.register_function('f0', function() return 1 end)",
    "#!lua name=lib9\nbad script",
    "#!lua name=lib9\nreturn 1",
    "#!lua name=lib9\nredis.register_function()",
    "#!lua name=lib9\nredis.register_function('f9')",
    "#!lua name=lib9\nredis.register_function(nil, function() return 1 end)",
    "#!lua name=lib9\nredis.register_function('a b', function() return 1 end)",
    "#!lua name=lib9\nredis.register_function('f9', function() return 1 end)\nredis.register_function('f9', function() return 1 end)",
    "#!lua name=lib9\nredis.register_function{function_name='f9', callback='x'}",
    "#!lua name=lib9\nredis.register_function{function_name='f9', callback=function() end, flags='x'}",
    "#!lua name=lib9\nredis.register_function{function_name='f9', callback=function() end, flags={'bad'}}",
    "#!lua name=lib9\nredis.register_function{function_name='f9', callback=function() end, other=1}",
    "#!lua name=lib9\nredis.register_function{callback=function() end}",
    "#!lua name=lib9\nredis.call('PING')",
    "#!lua name=lib9\nlocal x = math.floor(1)",
    "#!lua name=lib9\nx = 1",
    "#!lua name=lib9\nlocal x = nil + 1",
];

struct Gen {
    rng: StdRng,
}

impl Gen {
    fn library(&mut self) -> Vec<u8> {
        let lib = self.rng.gen_range(0..4);
        let mut code = format!("#!lua name={}\n", self.case(&format!("lib{lib}")));
        code.push_str("local function helper(x) return x end\n");
        let n = self.rng.gen_range(1..=3);
        let mut names: Vec<usize> = (0..8).collect();
        names.shuffle(&mut self.rng);
        for &f in names.iter().take(n) {
            let body = BODIES.choose(&mut self.rng).expect("bodies");
            let name = self.case(&format!("f{f}"));
            let flags = FLAGS.choose(&mut self.rng).expect("flags");
            if flags.is_empty() && self.rng.gen_bool(0.5) {
                code.push_str(&format!(
                    "redis.register_function('{name}', function(keys, args)\n  {body}\nend)\n"
                ));
            } else {
                let desc = if self.rng.gen_bool(0.5) {
                    format!(", description='about {name}'")
                } else {
                    String::new()
                };
                code.push_str(&format!(
                    "redis.register_function{{function_name='{name}', callback=function(keys, args)\n  {body}\nend, flags={{{flags}}}{desc}}}\n"
                ));
            }
        }
        code.into_bytes()
    }

    /// `name` in its case or upper case (names are case-insensitive).
    fn case(&mut self, name: &str) -> String {
        if self.rng.gen_bool(0.15) {
            name.to_uppercase()
        } else {
            name.to_string()
        }
    }

    fn key(&mut self) -> Vec<u8> {
        format!("k{}", self.rng.gen_range(0..3)).into_bytes()
    }

    /// One step: a command for both servers, or DUMP / RESTORE (`None`:
    /// handled by the runner).
    fn step(&mut self) -> Step {
        let r = self.rng.gen_range(0..100);
        let args: Vec<Vec<u8>> = match r {
            0..=24 => {
                let mut a = vec![b"FUNCTION".to_vec(), b"LOAD".to_vec()];
                if self.rng.gen_bool(0.5) {
                    a.push(b"REPLACE".to_vec());
                }
                a.push(if self.rng.gen_bool(0.85) {
                    self.library()
                } else {
                    BROKEN
                        .choose(&mut self.rng)
                        .expect("broken")
                        .as_bytes()
                        .to_vec()
                });
                a
            }
            25..=49 => {
                let ro = self.rng.gen_bool(0.25);
                let name = if ro { "FCALL_RO" } else { "FCALL" };
                let n = self.rng.gen_range(0..9);
                let f = self.case(&format!("f{n}"));
                let numkeys = self.rng.gen_range(0..=2);
                let mut a = vec![name.as_bytes().to_vec(), f.into_bytes()];
                let extra = self.rng.gen_range(0..=2);
                match self.rng.gen_range(0..20) {
                    0 => a.push(b"x".to_vec()),
                    1 => a.push(b"-1".to_vec()),
                    2 => a.push(b"5".to_vec()),
                    _ => a.push(numkeys.to_string().into_bytes()),
                }
                for _ in 0..numkeys {
                    a.push(self.key());
                }
                for i in 0..extra {
                    a.push(format!("v{i}").into_bytes());
                }
                a
            }
            50..=56 => {
                let n = self.rng.gen_range(0..5);
                let lib = self.case(&format!("lib{n}"));
                vec![b"FUNCTION".to_vec(), b"DELETE".to_vec(), lib.into_bytes()]
            }
            57..=64 => {
                let mut a = vec![b"FUNCTION".to_vec(), b"LIST".to_vec()];
                if self.rng.gen_bool(0.4) {
                    a.push(b"WITHCODE".to_vec());
                }
                if self.rng.gen_bool(0.3) {
                    a.push(b"LIBRARYNAME".to_vec());
                    a.push(self.pick(&["lib*", "LIB1", "*2", "x*", "lib[01]"]));
                }
                if self.rng.gen_bool(0.05) {
                    a.push(b"bad_arg".to_vec());
                }
                a
            }
            65..=67 => vec![b"FUNCTION".to_vec(), b"STATS".to_vec()],
            68..=70 => {
                let mut a = vec![b"FUNCTION".to_vec(), b"FLUSH".to_vec()];
                match self.rng.gen_range(0..5) {
                    0 => a.push(b"SYNC".to_vec()),
                    1 => a.push(b"async".to_vec()),
                    2 => a.push(b"bad".to_vec()),
                    _ => {}
                }
                a
            }
            71..=76 => return Step::Dump,
            77..=84 => {
                let policy = match self.rng.gen_range(0..6) {
                    0 => Some("APPEND"),
                    1 | 2 => Some("REPLACE"),
                    3 | 4 => Some("FLUSH"),
                    _ => None,
                };
                return Step::Restore {
                    policy,
                    redis_payload: self.rng.gen_bool(0.5),
                };
            }
            85..=92 => {
                let cmd = self.pick(&["GET", "TYPE", "EXISTS"]);
                vec![cmd, self.key()]
            }
            93 => vec![b"FUNCTION".to_vec(), b"BADSUB".to_vec()],
            94 => vec![
                b"FUNCTION".to_vec(),
                b"RESTORE".to_vec(),
                b"garbage".to_vec(),
            ],
            95 => vec![
                b"FUNCTION".to_vec(),
                b"LOAD".to_vec(),
                b"FOO".to_vec(),
                self.library(),
            ],
            96 => vec![b"FUNCTION".to_vec(), b"KILL".to_vec()],
            97 => vec![b"FCALL".to_vec(), b"f1".to_vec()],
            98 => vec![
                b"FUNCTION".to_vec(),
                b"FLUSH".to_vec(),
                b"SYNC".to_vec(),
                b"x".to_vec(),
            ],
            _ => vec![b"LPUSH".to_vec(), self.key(), b"item".to_vec()],
        };
        Step::Cmd(args)
    }

    fn pick(&mut self, options: &[&str]) -> Vec<u8> {
        options
            .choose(&mut self.rng)
            .expect("options")
            .as_bytes()
            .to_vec()
    }
}

enum Step {
    Cmd(Vec<Vec<u8>>),
    /// FUNCTION DUMP on both (each keeps its payload).
    Dump,
    /// FUNCTION RESTORE of a payload dumped before (each server's own, or
    /// redis-server's on both).
    Restore {
        policy: Option<&'static str>,
        redis_payload: bool,
    },
}

fn call(c: &mut Conn, args: &[Vec<u8>]) -> Reply {
    let refs: Vec<&[u8]> = args.iter().map(Vec::as_slice).collect();
    c.call(&refs)
}

/// Redis's hash order made irrelevant: FUNCTION LIST's libraries and each
/// library's functions sorted; a RESTORE's or LOAD's collision error
/// without the name it met first.
fn normalise(args: &[Vec<u8>], reply: Reply) -> Reply {
    let is = |i: usize, s: &str| {
        args.get(i)
            .is_some_and(|a| a.eq_ignore_ascii_case(s.as_bytes()))
    };
    if is(0, "FUNCTION") && is(1, "LIST") {
        if let Reply::Array(mut libs) = reply {
            for lib in &mut libs {
                sort_functions(lib);
            }
            libs.sort_by_key(|l| format!("{l:?}"));
            return Reply::Array(libs);
        }
    }
    if is(0, "FUNCTION") && (is(1, "RESTORE") || is(1, "LOAD")) {
        if let Reply::Error(e) = &reply {
            let text = String::from_utf8_lossy(e);
            for what in ["Library", "Function"] {
                if text.starts_with(&format!("ERR {what} ")) && text.ends_with(" already exists") {
                    return Reply::Error(format!("ERR {what} ? already exists").into_bytes());
                }
            }
        }
    }
    reply
}

fn sort_functions(lib: &mut Reply) {
    let fix = |v: &mut Reply| {
        if let Reply::Array(fns) = v {
            fns.sort_by_key(|f| format!("{f:?}"));
        }
    };
    match lib {
        Reply::Map(pairs) => {
            for (k, v) in pairs {
                if *k == Reply::Bulk(b"functions".to_vec()) {
                    fix(v);
                }
            }
        }
        Reply::Array(items) => {
            if let Some(i) = items
                .iter()
                .position(|x| *x == Reply::Bulk(b"functions".to_vec()))
            {
                if let Some(v) = items.get_mut(i + 1) {
                    fix(v);
                }
            }
        }
        _ => {}
    }
}

fn line(args: &[Vec<u8>]) -> String {
    args.iter()
        .map(|a| resp::quote(a))
        .collect::<Vec<_>>()
        .join(" ")
}

#[test]
fn functions_match_redis() {
    let sequences: u64 = env_or("ELSA_FN_SEQUENCES", 60);
    let len: usize = env_or("ELSA_FN_LEN", 40);
    let first: u64 = env_or("ELSA_FN_SEED", 1);
    let elsa = Elsa::start(&[]);
    let redis = RedisServer::start();
    let mut failures = Vec::new();
    for seed in first..first + sequences {
        let mut e = Conn::connect(elsa.port).expect("connect elsa");
        let mut r = Conn::connect(redis.port).expect("connect redis");
        for c in [&mut e, &mut r] {
            c.call(&[b"FUNCTION", b"FLUSH"]);
            c.call(&[b"FLUSHALL"]);
        }
        let mut g = Gen {
            rng: StdRng::seed_from_u64(seed),
        };
        if g.rng.gen_bool(0.2) {
            for c in [&mut e, &mut r] {
                c.call(&[b"HELLO", b"3"]);
            }
        }
        let mut log = Vec::new();
        let (mut e_dump, mut r_dump): (Option<Vec<u8>>, Option<Vec<u8>>) = (None, None);
        for _ in 0..len {
            let (ea, ra): (Vec<Vec<u8>>, Vec<Vec<u8>>) = match g.step() {
                Step::Cmd(a) => (a.clone(), a),
                Step::Dump => {
                    let d = [b"FUNCTION".to_vec(), b"DUMP".to_vec()];
                    let (ed, rd) = (call(&mut e, &d), call(&mut r, &d));
                    log.push(line(&d));
                    match (ed, rd) {
                        (Reply::Bulk(x), Reply::Bulk(y)) => {
                            e_dump = Some(x);
                            r_dump = Some(y);
                        }
                        (x, y) => {
                            failures.push(format!("seed {seed}: DUMP: elsa {x}, redis {y}"));
                            break;
                        }
                    }
                    continue;
                }
                Step::Restore {
                    policy,
                    redis_payload,
                } => {
                    let (Some(ed), Some(rd)) = (&e_dump, &r_dump) else {
                        continue;
                    };
                    let mut base = vec![b"FUNCTION".to_vec(), b"RESTORE".to_vec()];
                    let mut ea = base.clone();
                    ea.push(if redis_payload {
                        rd.clone()
                    } else {
                        ed.clone()
                    });
                    base.push(rd.clone());
                    if let Some(p) = policy {
                        ea.push(p.as_bytes().to_vec());
                        base.push(p.as_bytes().to_vec());
                    }
                    (ea, base)
                }
            };
            let ereply = normalise(&ea, call(&mut e, &ea));
            let rreply = normalise(&ra, call(&mut r, &ra));
            log.push(line(&ra));
            if ereply != rreply {
                failures.push(format!(
                    "seed {seed}: after\n    {}\n  elsa:  {ereply}\n  redis: {rreply}",
                    log.join("\n    ")
                ));
                break;
            }
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {sequences} sequences differ:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

/// FUNCTION LIST WITHCODE, sorted, and every function's FCALL reply on a
/// key: what a node's libraries are, as a client sees them.
fn libraries_seen(c: &mut redis::Connection) -> (Vec<String>, Vec<String>) {
    let list: redis::Value = redis::cmd("FUNCTION")
        .arg("LIST")
        .arg("WITHCODE")
        .query(c)
        .expect("FUNCTION LIST");
    let mut libs: Vec<String> = match list {
        redis::Value::Array(items) => items.iter().map(|l| format!("{l:?}")).collect(),
        other => panic!("FUNCTION LIST answered {other:?}"),
    };
    libs.sort();
    let calls = (0..9)
        .map(|f| {
            let r: redis::RedisResult<redis::Value> = redis::cmd("FCALL_RO")
                .arg(format!("f{f}"))
                .arg(1)
                .arg("k0")
                .query(c);
            format!("{r:?}")
        })
        .collect();
    (libs, calls)
}

#[test]
fn libraries_survive_restarts() {
    let mut cluster = Cluster::start(&["a"], &[]);
    let mut g = Gen {
        rng: StdRng::seed_from_u64(env_or("ELSA_FN_SEED", 1)),
    };
    for round in 0..9 {
        let mut c = cluster.conn(0);
        for _ in 0..8 {
            let args: Vec<Vec<u8>> = match g.rng.gen_range(0..10) {
                0..=5 => vec![
                    b"FUNCTION".to_vec(),
                    b"LOAD".to_vec(),
                    b"REPLACE".to_vec(),
                    g.library(),
                ],
                6 | 7 => vec![
                    b"FUNCTION".to_vec(),
                    b"DELETE".to_vec(),
                    format!("lib{}", g.rng.gen_range(0..4)).into_bytes(),
                ],
                8 => vec![b"FUNCTION".to_vec(), b"FLUSH".to_vec()],
                _ => {
                    let dump: Vec<u8> = redis::cmd("FUNCTION")
                        .arg("DUMP")
                        .query(&mut c)
                        .expect("dump");
                    vec![
                        b"FUNCTION".to_vec(),
                        b"RESTORE".to_vec(),
                        dump,
                        b"FLUSH".to_vec(),
                    ]
                }
            };
            let _: redis::RedisResult<redis::Value> =
                redis::cmd(&String::from_utf8_lossy(&args[0]))
                    .arg(&args[1..])
                    .query(&mut c);
        }
        let before = libraries_seen(&mut c);
        drop(c);
        match round % 3 {
            0 => cluster.terminate(0),
            1 => cluster.kill9(0),
            _ => {
                let _: () = redis::cmd("SAVE")
                    .query(&mut cluster.conn(0))
                    .expect("SAVE");
                cluster.kill9(0);
            }
        }
        cluster.restart(0);
        let after = libraries_seen(&mut cluster.conn(0));
        assert_eq!(
            before, after,
            "round {round}: the libraries changed over the restart"
        );
    }
}

/// Waits until every node in `nodes` sees the same libraries; their view.
fn converge(cluster: &Cluster, nodes: &[usize], what: &str) -> (Vec<String>, Vec<String>) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let seen: Vec<_> = nodes
            .iter()
            .map(|&i| libraries_seen(&mut cluster.conn(i)))
            .collect();
        if seen.windows(2).all(|w| w[0] == w[1]) {
            return seen[0].clone();
        }
        assert!(
            Instant::now() < deadline,
            "{what}: the nodes do not converge:\n{seen:#?}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn load(cluster: &Cluster, i: usize, code: &str) -> String {
    redis::cmd("FUNCTION")
        .arg("LOAD")
        .arg("REPLACE")
        .arg(code)
        .query(&mut cluster.conn(i))
        .unwrap_or_else(|e| panic!("FUNCTION LOAD on node {i}: {e}"))
}

fn fcall(cluster: &Cluster, i: usize, f: &str) -> redis::RedisResult<String> {
    redis::cmd("FCALL")
        .arg(f)
        .arg(0)
        .query(&mut cluster.conn(i))
}

#[test]
fn libraries_reach_every_node_and_region() {
    let mut cluster = Cluster::start(&["east", "east", "west", "west"], &[]);
    let all = [0, 1, 2, 3];
    // A load on one node: every node of both regions can call it.
    load(
        &cluster,
        0,
        "#!lua name=alpha\nredis.register_function('hello', function() return 'one' end)",
    );
    converge(&cluster, &all, "a load");
    for i in all {
        assert_eq!(
            fcall(&cluster, i, "hello").expect("FCALL"),
            "one",
            "node {i}"
        );
    }
    // A replace on another region's node, then a delete elsewhere.
    load(
        &cluster,
        3,
        "#!lua name=alpha\nredis.register_function('hello', function() return 'two' end)",
    );
    converge(&cluster, &all, "a replace");
    assert_eq!(fcall(&cluster, 1, "hello").expect("FCALL"), "two");
    let _: () = redis::cmd("FUNCTION")
        .arg("DELETE")
        .arg("alpha")
        .query(&mut cluster.conn(2))
        .expect("DELETE");
    converge(&cluster, &all, "a delete");
    assert!(
        fcall(&cluster, 0, "hello").is_err(),
        "a deleted function still runs"
    );

    // Node 1 cut off: a load and a flush elsewhere reach it once healed.
    cluster.fault(1, "ISOLATE");
    load(
        &cluster,
        2,
        "#!lua name=beta\nredis.register_function('b', function() return 'b' end)",
    );
    let _: () = redis::cmd("FUNCTION")
        .arg("FLUSH")
        .query(&mut cluster.conn(0))
        .expect("FLUSH");
    load(
        &cluster,
        0,
        "#!lua name=gamma\nredis.register_function('g', function() return 'g' end)",
    );
    cluster.fault(1, "HEAL");
    let seen = converge(&cluster, &all, "after a cut");
    assert_eq!(seen.0.len(), 1, "only gamma is left: {seen:?}");
    assert_eq!(fcall(&cluster, 1, "g").expect("FCALL"), "g");

    // Node 3 down during a load: it has the library once it is back.
    cluster.terminate(3);
    load(
        &cluster,
        1,
        "#!lua name=delta\nredis.register_function('d', function() return 'd' end)",
    );
    cluster.restart(3);
    converge(&cluster, &all, "after a restart");
    assert_eq!(fcall(&cluster, 3, "d").expect("FCALL"), "d");

    // Two regions, cut from each other, load libraries registering the
    // same function: once healed, every node keeps the same one.
    cluster.fault(0, "ISOLATE");
    cluster.fault(1, "ISOLATE");
    load(
        &cluster,
        0,
        "#!lua name=east\nredis.register_function('same', function() return 'east' end)",
    );
    load(
        &cluster,
        2,
        "#!lua name=west\nredis.register_function('same', function() return 'west' end)",
    );
    cluster.fault(0, "HEAL");
    cluster.fault(1, "HEAL");
    converge(&cluster, &all, "concurrent colliding loads");
    let answers: Vec<String> = all
        .iter()
        .map(|&i| fcall(&cluster, i, "same").expect("FCALL same"))
        .collect();
    assert!(answers.windows(2).all(|w| w[0] == w[1]), "{answers:?}");
    assert_eq!(answers[0], "east", "the older library keeps the name");
}

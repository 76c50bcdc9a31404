//! ACL users, AUTH and protected mode.
//!
//! The differential part sends the same commands — fixed edge cases, then
//! seeded random sequences of ACL SETUSER/GETUSER/LIST/USERS/CAT/DRYRUN/
//! DELUSER/WHOAMI/LOG, AUTH and permission-checked data, pub/sub, MULTI/EXEC
//! and EVAL commands, from several connections — to Elsa and to a real
//! `redis-server` 7.0, and compares every reply byte for byte, except:
//! the single-command part of an ACL LIST/GETUSER rule string is compared
//! as a set (Redis emits it in its command dict's hash order), ACL CAT of
//! a category as a set without Elsa's own commands, ACL LOG's age and
//! client info, ACL GENPASS's random digits (length and alphabet only), and
//! HELLO's server description.
//!
//! Size: `ELSA_ACL_SEQUENCES` sequences (default 200) of `ELSA_ACL_LEN`
//! steps (default 60), seeds from `ELSA_ACL_SEED` (default 1).

mod common;

#[path = "differential/resp.rs"]
#[allow(dead_code)]
mod resp;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use common::redis_server::RedisServer;
use common::{env_or, Elsa};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use resp::{Conn, Reply};

/// Elsa's commands that Redis does not have (left out of ACL CAT's lists).
const ELSA_ONLY: &[&str] = &[
    "put",
    "delete",
    "begin",
    "commit",
    "abort",
    "rollback",
    "lastcommit",
    "ack",
    "waitregion",
    "elsa.digest",
    "elsa.fault",
    "elsa.decommission",
    "client|no-touch",
    "client|setinfo",
];

/// Connections per server: 0 stays the default user (the admin).
const CONNS: usize = 4;

struct Pair {
    elsa_port: u16,
    redis_port: u16,
    elsa: Vec<Conn>,
    redis: Vec<Conn>,
}

fn args(line: &str) -> Vec<Vec<u8>> {
    // `\s` inside an argument stands for a space.
    line.split(' ')
        .map(|a| a.replace("\\s", " ").into_bytes())
        .collect()
}

impl Pair {
    fn new(elsa_port: u16, redis_port: u16) -> Pair {
        let mut p = Pair {
            elsa_port,
            redis_port,
            elsa: Vec::new(),
            redis: Vec::new(),
        };
        for _ in 0..CONNS {
            p.elsa.push(Conn::connect(elsa_port).expect("connect elsa"));
            p.redis
                .push(Conn::connect(redis_port).expect("connect redis"));
        }
        p
    }

    fn reconnect(&mut self, i: usize) {
        self.elsa[i] = Conn::connect(self.elsa_port).expect("connect elsa");
        self.redis[i] = Conn::connect(self.redis_port).expect("connect redis");
    }

    /// Sends one command on connection `i` of both servers; the two
    /// normalized replies.
    fn step(&mut self, i: usize, req: &[Vec<u8>]) -> (String, String) {
        let refs: Vec<&[u8]> = req.iter().map(|a| &a[..]).collect();
        let r = norm(req, self.redis[i].call(&refs));
        let e = norm(req, self.elsa[i].call(&refs));
        if r == "(broken)" || e == "(broken)" {
            self.reconnect(i);
        }
        (r, e)
    }
}

/// A reply as compared: rendered, with the parts that legitimately differ
/// normalized away.
fn norm(req: &[Vec<u8>], reply: Reply) -> String {
    let up = |i: usize| {
        req.get(i)
            .map(|a| String::from_utf8_lossy(a).to_ascii_uppercase())
            .unwrap_or_default()
    };
    let (cmd, sub) = (up(0), up(1));
    match reply {
        Reply::Broken(_) => "(broken)".into(),
        Reply::Array(items) if cmd == "ACL" && sub == "LIST" => items
            .into_iter()
            .map(|r| match r {
                Reply::Bulk(b) => String::from_utf8_lossy(&sort_rules(&b)).into_owned(),
                r => r.to_string(),
            })
            .collect::<Vec<_>>()
            .join("\n"),
        Reply::Array(mut items) if cmd == "ACL" && sub == "GETUSER" => {
            for pair in items.chunks_mut(2) {
                if pair[0] == Reply::Bulk(b"commands".to_vec()) {
                    if let Reply::Bulk(b) = &pair[1] {
                        pair[1] = Reply::Bulk(sort_rules(b));
                    }
                }
            }
            Reply::Array(items).to_string()
        }
        Reply::Array(items) if cmd == "ACL" && sub == "CAT" && req.len() == 3 => {
            let mut names: Vec<String> = items
                .iter()
                .map(|r| r.to_string())
                .filter(|n| !ELSA_ONLY.iter().any(|e| *n == format!("\"{e}\"")))
                .collect();
            names.sort();
            format!("CAT{names:?}")
        }
        Reply::Array(entries) if cmd == "ACL" && sub == "LOG" => Reply::Array(
            entries
                .into_iter()
                .map(|e| {
                    let hide = |k: &Reply| {
                        *k == Reply::Bulk(b"age-seconds".to_vec())
                            || *k == Reply::Bulk(b"client-info".to_vec())
                    };
                    match e {
                        Reply::Array(mut kv) => {
                            for pair in kv.chunks_mut(2) {
                                if hide(&pair[0]) {
                                    pair[1] = Reply::Bulk(b"*".to_vec());
                                }
                            }
                            Reply::Array(kv)
                        }
                        Reply::Map(mut kv) => {
                            for (k, v) in kv.iter_mut() {
                                if hide(k) {
                                    *v = Reply::Bulk(b"*".to_vec());
                                }
                            }
                            Reply::Map(kv)
                        }
                        e => e,
                    }
                })
                .collect(),
        )
        .to_string(),
        Reply::Bulk(b) if cmd == "ACL" && sub == "GENPASS" => format!(
            "genpass len={} hex={}",
            b.len(),
            b.iter()
                .all(|c| c.is_ascii_hexdigit() && !c.is_ascii_uppercase())
        ),
        Reply::Array(_) | Reply::Map(_) if cmd == "HELLO" => "(hello)".into(),
        Reply::Error(e) => format!("-{}", String::from_utf8_lossy(&e)),
        r => r.to_string(),
    }
}

/// An ACL rule string with its single-command rules sorted (Redis lists
/// them in its command table's hash order); the flags, passwords,
/// patterns and category rules keep their order.
fn sort_rules(text: &[u8]) -> Vec<u8> {
    let text = String::from_utf8_lossy(text);
    let words: Vec<&str> = text.split(' ').collect();
    let at = words
        .iter()
        .position(|w| *w == "+@all" || *w == "-@all")
        .map_or(words.len(), |i| i + 1);
    let cats = words[at..]
        .iter()
        .take_while(|w| w.starts_with("+@") || w.starts_with("-@"))
        .count();
    // Elsa's own commands (PUT, BEGIN…) have no counterpart in Redis's
    // text: categories hold them, and single rules may name them.
    let mut singles: Vec<&str> = words[at + cats..]
        .iter()
        .filter(|w| !ELSA_ONLY.contains(&w.get(1..).unwrap_or_default()))
        .copied()
        .collect();
    singles.sort();
    let mut out: Vec<&str> = words[..at + cats].to_vec();
    out.extend(singles);
    out.join(" ").into_bytes()
}

/// What the compared replies were (so a run shows it tested something).
#[derive(Default, Debug)]
struct Seen {
    noperm: usize,
    wrongpass: usize,
    closed: usize,
    ok: usize,
}

/// Runs `(conn, line)` steps on both servers; the first difference.
fn run_lines(p: &mut Pair, steps: &[(usize, String)], seen: &mut Seen) -> Result<(), String> {
    let mut log = String::new();
    for (n, (i, line)) in steps.iter().enumerate() {
        let req = args(line);
        let (r, e) = p.step(*i, &req);
        if r.contains("NOPERM") {
            seen.noperm += 1;
        } else if r.starts_with("-WRONGPASS") {
            seen.wrongpass += 1;
        } else if r == "(broken)" {
            seen.closed += 1;
        } else if !r.starts_with('-') {
            seen.ok += 1;
        }
        log.push_str(&format!("  {n:>3} [c{i}] {line}\n"));
        if r != e {
            return Err(format!("{log}replies differ:\n  redis: {r}\n  elsa:  {e}"));
        }
    }
    Ok(())
}

const USERS: &[&str] = &["u1", "u2", "u3"];
const PASSES: &[&str] = &["p1", "p1", "p2", "wrong"];
const KEYS: &[&str] = &["k1", "k2", "ka", "r1", "w1", "m1", "x"];
const CHANNELS: &[&str] = &["ch1", "news", "other"];

fn rules() -> Vec<String> {
    let mut r: Vec<String> = [
        "on",
        "off",
        "nopass",
        "resetpass",
        ">p1",
        ">p2",
        "<p1",
        "reset",
        "allkeys",
        "resetkeys",
        "~k*",
        "~ka",
        "%R~r*",
        "%W~w*",
        "%RW~m*",
        "%R~k*",
        "allchannels",
        "resetchannels",
        "&ch*",
        "&news",
        "allcommands",
        "nocommands",
        "+@all",
        "-@all",
        "+@read",
        "-@read",
        "+@write",
        "-@write",
        "+@string",
        "+@hash",
        "-@hash",
        "+@keyspace",
        "-@dangerous",
        "+@pubsub",
        "-@pubsub",
        "+@scripting",
        "+@fast",
        "-@slow",
        "+get",
        "-get",
        "+set",
        "-set",
        "+mget",
        "+hset",
        "-hget",
        "+del",
        "+publish",
        "+subscribe",
        "+eval",
        "+multi",
        "+exec",
        "+config|get",
        "-config|set",
        "+client",
        "-client|kill",
        "+select|0",
        "+acl|whoami",
        "skip-sanitize-payload",
        "sanitize-payload",
        "+nosuch",
        "-@nosuch",
        "#abc",
        "<nosuch",
        "%X~k",
        "~a\\sb",
        "+get|x",
        "+config|get|x",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    r.push(format!("#{}", sha256_hex("p2")));
    r.push(format!("!{}", sha256_hex("p1")));
    r
}

fn sha256_hex(s: &str) -> String {
    use sha2::Digest;
    sha2::Sha256::digest(s.as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

fn pick<'a>(rng: &mut StdRng, xs: &'a [&'a str]) -> &'a str {
    xs[rng.gen_range(0..xs.len())]
}

/// A data command that ACL rules decide about.
fn data_command(rng: &mut StdRng) -> String {
    let k = pick(rng, KEYS);
    let k2 = pick(rng, KEYS);
    let ch = pick(rng, CHANNELS);
    match rng.gen_range(0..20) {
        0 => format!("GET {k}"),
        1 => format!("SET {k} v"),
        2 => format!("SET {k} v GET"),
        3 => format!("HSET h{k} f v"),
        4 => format!("HGET h{k} f"),
        5 => format!("MGET {k} {k2}"),
        6 => format!("DEL {k} {k2}"),
        7 => format!("EXISTS {k}"),
        8 => format!("APPEND {k} x"),
        9 => format!("PUBLISH {ch} m"),
        10 => format!("EVAL return\\sredis.call('get',KEYS[1]) 1 {k}"),
        11 => format!("EVAL return\\sredis.call('set',KEYS[1],'v') 1 {k}"),
        12 => "PING".into(),
        13 => format!("COPY {k} {k2}"),
        14 => format!("RENAME {k} {k2}"),
        15 => format!("LMOVE l{k} l{k2} LEFT RIGHT"),
        16 => format!("SINTERSTORE {k} s{k2}"),
        17 => format!("EVAL return\\sredis.pcall('incr',KEYS[1]) 1 {k}"),
        18 => format!("SPUBLISH {ch} m"),
        _ => format!("TYPE {k}"),
    }
}

/// One random step: one or a few `(conn, line)` commands.
fn random_step(rng: &mut StdRng, rules: &[String]) -> Vec<(usize, String)> {
    let c = rng.gen_range(1..CONNS);
    let u = pick(rng, USERS);
    match rng.gen_range(0..100) {
        0..=17 => {
            let n = rng.gen_range(1..5);
            let rs: Vec<&str> = (0..n)
                .map(|_| rules[rng.gen_range(0..rules.len())].as_str())
                .collect();
            // Often a user that can log in, so its rules get exercised.
            let login = match rng.gen_range(0..4) {
                0 => "on >p1 ",
                1 => "on nopass ",
                _ => "",
            };
            vec![(0, format!("ACL SETUSER {u} {login}{}", rs.join(" ")))]
        }
        18..=22 => vec![(0, format!("ACL GETUSER {u}"))],
        23..=25 => vec![(0, "ACL LIST".into())],
        26 => vec![(0, "ACL USERS".into())],
        27 => vec![(0, format!("ACL DELUSER {u}"))],
        28..=30 => vec![(c, "ACL WHOAMI".into())],
        31..=34 => vec![(0, format!("ACL DRYRUN {u} {}", data_command(rng)))],
        35..=36 => vec![(0, "ACL LOG".into())],
        37 => vec![(0, "ACL LOG RESET".into())],
        38 => {
            let cats = [
                "read",
                "write",
                "string",
                "transaction",
                "pubsub",
                "dangerous",
            ];
            vec![(0, format!("ACL CAT {}", cats[rng.gen_range(0..cats.len())]))]
        }
        39..=48 => {
            let user = if rng.gen_bool(0.1) { "DEFAULT" } else { u };
            let pass = pick(rng, PASSES);
            if rng.gen_bool(0.2) {
                vec![(c, format!("HELLO 2 AUTH {user} {pass}"))]
            } else {
                vec![(c, format!("AUTH {user} {pass}"))]
            }
        }
        49..=51 => {
            let ch = pick(rng, CHANNELS);
            match rng.gen_range(0..3) {
                0 => vec![(c, format!("SUBSCRIBE {ch}")), (c, "UNSUBSCRIBE".into())],
                1 => vec![(c, format!("PSUBSCRIBE {ch}*")), (c, "PUNSUBSCRIBE".into())],
                _ => vec![(c, format!("SSUBSCRIBE {ch}")), (c, "SUNSUBSCRIBE".into())],
            }
        }
        52..=57 => {
            // MULTI … EXEC, sometimes with the rules changed in between.
            let mut v = vec![(c, "MULTI".into())];
            for _ in 0..rng.gen_range(1..3) {
                v.push((c, data_command(rng)));
            }
            if rng.gen_bool(0.4) {
                let r = &rules[rng.gen_range(0..rules.len())];
                v.push((0, format!("ACL SETUSER {u} {r}")));
            }
            v.push((c, "EXEC".into()));
            v
        }
        _ => vec![(c, data_command(rng))],
    }
}

/// Fixed edge cases, in order.
fn fixed() -> Vec<(usize, String)> {
    let mut v: Vec<(usize, &str)> = vec![
        (1, "AUTH DEFAULT s3cret"),
        (1, "AUTH s3cret"),
        (1, "AUTH a b c"),
        (0, "ACL WHOAMI"),
        (0, "ACL USERS"),
        (0, "ACL LIST"),
        (0, "ACL GETUSER default"),
        (0, "ACL GETUSER nosuch"),
        (0, "ACL CAT"),
        (0, "ACL CAT nosuch"),
        (0, "ACL CAT read"),
        (0, "ACL CAT dangerous"),
        (0, "ACL CAT a b"),
        (0, "ACL SETUSER a\\sb on"),
        (0, "ACL SETUSER x +nosuch"),
        (0, "ACL GETUSER x"),
        (0, "ACL DELUSER default"),
        (0, "ACL DELUSER nosuch"),
        (0, "ACL LOAD"),
        (0, "ACL SAVE"),
        (0, "ACL LOG x"),
        (0, "ACL LOG -1"),
        (0, "ACL GENPASS"),
        (0, "ACL GENPASS 5"),
        (0, "ACL GENPASS 0"),
        (0, "ACL GENPASS 5000"),
        (0, "ACL GENPASS abc"),
        (0, "ACL NOSUCH"),
        (0, "ACL GETUSER"),
        (0, "ACL DRYRUN default get k"),
        (0, "ACL DRYRUN nosuch get k"),
        (0, "ACL DRYRUN default nosuchcmd"),
        (0, "ACL DRYRUN default get"),
        (0, "ACL DRYRUN default config nosuch"),
        (0, "ACL SETUSER u1 reset"),
        (0, "ACL LIST"),
        (
            0,
            "ACL SETUSER u1 on >p1 ~k* %R~r* &ch* +@read +set -hget +config|get",
        ),
        (0, "ACL GETUSER u1"),
        (0, "ACL LIST"),
        (0, "ACL DRYRUN u1 get k1"),
        (0, "ACL DRYRUN u1 get x"),
        (0, "ACL DRYRUN u1 del k1"),
        (0, "ACL DRYRUN u1 publish other m"),
        (0, "ACL DRYRUN u1 config get maxmemory"),
        (0, "ACL DRYRUN u1 config set maxmemory 1"),
        (1, "AUTH u1 wrong"),
        (1, "AUTH U1 p1"),
        (1, "AUTH u1 p1"),
        (1, "ACL WHOAMI"),
        (1, "GET k1"),
        (1, "GET x"),
        (1, "SET k1 v"),
        (1, "SET r1 v"),
        (1, "SET k1 v GET"),
        (1, "MGET k1 r1 x"),
        (1, "DEL k1"),
        (1, "HGET hk f"),
        (1, "PUBLISH ch1 m"),
        (1, "PUBLISH other m"),
        (1, "SUBSCRIBE other"),
        (1, "ACL WHOAMI"),
        (1, "MULTI"),
        (1, "GET k1"),
        (1, "DEL k1"),
        (1, "EXEC"),
        (1, "MULTI"),
        (1, "GET k1"),
        (1, "SET k1 v"),
        (0, "ACL SETUSER u1 -get"),
        (1, "EXEC"),
        (0, "ACL SETUSER u1 +eval +get"),
        (1, "EVAL return\\sredis.call('get',KEYS[1]) 1 k1"),
        (1, "EVAL return\\sredis.call('get',KEYS[1]) 1 x"),
        (1, "EVAL return\\sredis.call('del',KEYS[1]) 1 k1"),
        (0, "ACL LOG"),
        (0, "ACL LOG 2"),
        (0, "ACL SETUSER u1 off"),
        (1, "ACL WHOAMI"),
        (2, "AUTH u1 p1"),
        (0, "ACL DELUSER u1"),
        (1, "PING"),
        (1, "ACL WHOAMI"),
        (0, "ACL LOG"),
        (0, "ACL LOG RESET"),
        (0, "ACL LOG"),
        (0, "ACL SETUSER u2 on nopass +@all -@dangerous ~* &*"),
        (0, "ACL LIST"),
        (2, "AUTH u2 anything"),
        (2, "CONFIG SET maxmemory 1"),
        (2, "FLUSHALL"),
        (0, "ACL SETUSER u2 reset"),
        (0, "ACL GETUSER u2"),
        (0, "ACL SETUSER u3 on >p1 #abc"),
        (0, "ACL GETUSER u3"),
        (0, "ACL SETUSER u3 on ~* ~a"),
        (0, "ACL SETUSER u3 &* &a"),
        (0, "ACL SETUSER u3 <nopass"),
        (0, "ACL SETUSER u3 +select|0 +get|x"),
        (0, "ACL SETUSER u3 +config|get|x"),
        (0, "ACL SETUSER u3 -select|0"),
        (0, "ACL GETUSER u3"),
        // A subscriber whose channel is taken away is disconnected.
        (0, "ACL SETUSER u5 on >p1 +@all ~* &ch*"),
        (2, "AUTH u5 p1"),
        (2, "SUBSCRIBE ch1"),
        (0, "ACL SETUSER u5 resetchannels &other"),
        (2, "PING"),
        (2, "AUTH u5 p1"),
        (2, "SUBSCRIBE other"),
        (0, "ACL SETUSER u5 &more"),
        (2, "PING"),
        (0, "ACL DELUSER u5"),
        (2, "PING"),
        (0, "ACL DELUSER u1 u2 u3 nosuch"),
        (0, "ACL USERS"),
    ];
    let hash = format!("ACL SETUSER u4 on #{} %W~w* +@all", sha256_hex("p2"));
    v.push((0, &hash));
    let mut out: Vec<(usize, String)> = v.into_iter().map(|(c, l)| (c, l.to_string())).collect();
    out.push((3, "AUTH u4 p2".into()));
    out.push((3, "SET w1 v".into()));
    out.push((3, "GET w1".into()));
    out.push((0, "ACL LIST".into()));
    out.push((0, "ACL DELUSER u4".into()));
    // RESP3: maps, sets and nulls where Redis sends them.
    for l in [
        "PING", // (u4 is gone: this finds its connection closed)
        "HELLO 3",
        "ACL GETUSER default",
        "ACL GETUSER nosuch",
        "AUTH nosuch x",
        "ACL LOG 1",
        "ACL USERS",
        "ACL WHOAMI",
        "HELLO 2",
    ] {
        out.push((3, l.into()));
    }
    out
}

#[test]
fn acl_replies_equal_redis() {
    let redis = RedisServer::start();
    let elsa = Elsa::start(&["--workers", "2"]);
    let mut p = Pair::new(elsa.port, redis.port);
    let mut seen = Seen::default();
    if let Err(e) = run_lines(&mut p, &fixed(), &mut seen) {
        panic!("fixed edge cases:\n{e}");
    }
    let sequences: u64 = env_or("ELSA_ACL_SEQUENCES", 200);
    let len: usize = env_or("ELSA_ACL_LEN", 60);
    let seed0: u64 = env_or("ELSA_ACL_SEED", 1);
    let rules = rules();
    let mut total = 0;
    for seed in seed0..seed0 + sequences {
        let mut rng = StdRng::seed_from_u64(seed);
        // A clean slate on both: no users but default, fresh connections.
        let reset = vec![
            (0, "ACL DELUSER u1 u2 u3".to_string()),
            (0, "ACL LOG RESET".to_string()),
            (0, "FLUSHALL".to_string()),
        ];
        run_lines(&mut p, &reset, &mut Seen::default()).expect("reset");
        for i in 1..CONNS {
            p.reconnect(i);
        }
        let mut steps = Vec::new();
        for _ in 0..len {
            steps.extend(random_step(&mut rng, &rules));
        }
        total += steps.len();
        if let Err(e) = run_lines(&mut p, &steps, &mut seen) {
            panic!("seed {seed} (replay: ELSA_ACL_SEED={seed} ELSA_ACL_SEQUENCES=1):\n{e}");
        }
    }
    eprintln!(
        "acl differential: {sequences} sequences, {total} commands, all equal to redis-server ({seen:?})"
    );
}

/// Reads whatever the server sends until it closes (or 5 s pass).
fn read_all(s: &mut TcpStream) -> String {
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut out = Vec::new();
    let _ = s.read_to_end(&mut out);
    String::from_utf8_lossy(&out).into_owned()
}

#[test]
fn elsa_commands_have_categories() {
    let elsa = Elsa::start(&[]);
    let mut c = Conn::connect(elsa.port).unwrap();
    let mut line = |l: &str| c.call_line(l);
    assert_eq!(
        line("ACL SETUSER safe on nopass +@all -@dangerous ~* &*"),
        "+OK"
    );
    assert_eq!(
        line("ACL SETUSER txn on nopass -@all +@transaction +@read ~*"),
        "+OK"
    );
    // ELSA.FAULT is unknown without fault-injection, whoever asks.
    assert!(line("ELSA.FAULT isolate").starts_with("-ERR unknown command 'ELSA.FAULT'"));
    // …and COMMAND does not list it.
    let listed = line("COMMAND LIST");
    assert!(listed.contains("\"elsa.digest\""), "{listed}");
    assert!(!listed.contains("\"elsa.fault\""), "{listed}");
    assert!(!line("COMMAND INFO elsa.fault").contains("elsa.fault"));
    assert_eq!(
        line("ACL DRYRUN safe elsa.digest"),
        "\"This user has no permissions to run the 'elsa.digest' command\""
    );
    // ELSA.DECOMMISSION removes the node from its cluster: @dangerous.
    assert_eq!(
        line("ACL DRYRUN safe elsa.decommission"),
        "\"This user has no permissions to run the 'elsa.decommission' command\""
    );
    assert_eq!(line("ACL DRYRUN safe begin"), "+OK");
    assert_eq!(line("ACL DRYRUN txn begin"), "+OK");
    assert_eq!(line("ACL DRYRUN txn commit"), "+OK");
    assert_eq!(line("ACL DRYRUN txn rollback"), "+OK");
    assert_eq!(
        line("ACL DRYRUN txn put k v"),
        "\"This user has no permissions to run the 'put' command\""
    );
    let cat = line("ACL CAT transaction");
    for name in [
        "begin",
        "commit",
        "abort",
        "rollback",
        "lastcommit",
        "multi",
    ] {
        assert!(cat.contains(&format!("\"{name}\"")), "{name} in {cat}");
    }
    assert!(line("ACL CAT dangerous").contains("\"elsa.fault\""));
    let mut t = Conn::connect(elsa.port).unwrap();
    assert_eq!(t.call_line("AUTH txn x"), "+OK");
    assert_eq!(t.call_line("BEGIN"), "+OK");
    assert_eq!(t.call_line("GET k"), "(nil bulk $-1)");
    assert!(t.call_line("COMMIT").starts_with(':'));
    assert_eq!(
        t.call_line("SET k v"),
        "-NOPERM this user has no permissions to run the 'set' command"
    );
    let mut admin = Conn::connect(elsa.port).unwrap();
    assert_eq!(admin.call_line("ACL SETUSER txn +client|list"), "+OK");
    // (The whole text: the report form of a reply clips long ones.)
    let list = client_list_text(&mut t);
    assert!(list.contains(" user=txn "), "{list}");
    drop(elsa);

    // With fault injection on (and peers) ELSA.FAULT exists, for those
    // allowed @dangerous.
    let elsa = Elsa::start(&["--fault-injection", "true"]);
    let mut c = Conn::connect(elsa.port).unwrap();
    assert!(c.call_line("COMMAND LIST").contains("\"elsa.fault\""));
    assert_eq!(
        c.call_line("ACL SETUSER safe on nopass +@all -@dangerous ~* &*"),
        "+OK"
    );
    assert!(c
        .call_line("ELSA.FAULT isolate")
        .starts_with("-ERR this node has no peers"));
    let mut s = Conn::connect(elsa.port).unwrap();
    assert_eq!(s.call_line("AUTH safe x"), "+OK");
    assert_eq!(
        s.call_line("ELSA.FAULT isolate"),
        "-NOPERM this user has no permissions to run the 'elsa.fault' command"
    );
}

#[test]
fn auth_user_names_are_case_sensitive_and_setname_is_checked() {
    let elsa = Elsa::start_with_password("s3cret");
    let mut c = Conn::connect(elsa.port).unwrap();
    assert_eq!(
        c.call_line("AUTH DEFAULT s3cret"),
        "-WRONGPASS invalid username-password pair or user is disabled."
    );
    assert_eq!(c.call_line("GET k"), "-NOAUTH Authentication required.");
    assert_eq!(c.call_line("AUTH default s3cret"), "+OK");
    let log = c.call_line("ACL LOG");
    assert!(
        log.contains("\"auth\"") && log.contains("\"DEFAULT\""),
        "{log}"
    );
    // (The reply's full text: call_line clips long replies, and INFO
    // stats has Redis's many fields before the ACL ones.)
    let stats = match c.call(&[b"INFO", b"stats"]) {
        Reply::Bulk(b) => String::from_utf8(b).unwrap(),
        r => panic!("INFO stats: {r}"),
    };
    assert!(stats.contains("acl_access_denied_auth:1"), "{stats}");
    // HELLO SETNAME is checked as CLIENT SETNAME: no line injected into
    // CLIENT LIST.
    let mut h = Conn::connect(elsa.port).unwrap();
    let r = h.call(&[
        b"HELLO",
        b"2",
        b"AUTH",
        b"default",
        b"s3cret",
        b"SETNAME",
        b"evil\nid=999",
    ]);
    assert_eq!(
        r,
        Reply::Error(
            b"ERR Client names cannot contain spaces, newlines or special characters.".to_vec()
        )
    );
    let list = client_list_text(&mut c);
    assert!(list.contains("id=") && !list.contains("id=999"), "{list}");
}

#[test]
fn aclfile_survives_a_restart() {
    let dir = common::TestDir::new("aclfile");
    let file = dir.data().join("users.acl");
    std::fs::create_dir_all(dir.data()).unwrap();
    std::fs::write(&file, "user default on nopass ~* &* +@all\n").unwrap();
    let path = file.display().to_string();
    let mut elsa = Elsa::start(&["--aclfile", &path]);
    let mut c = Conn::connect(elsa.port).unwrap();
    assert_eq!(
        c.call_line("ACL SETUSER app on >pw ~app:* +@read +@write"),
        "+OK"
    );
    assert_eq!(c.call_line("ACL SAVE"), "+OK");
    let saved = std::fs::read_to_string(&file).unwrap();
    assert!(saved.contains("user app on #"), "{saved}");
    elsa.stop();
    let elsa = Elsa::start(&["--aclfile", &path]);
    let mut c = Conn::connect(elsa.port).unwrap();
    assert_eq!(c.call_line("ACL USERS"), "[\"app\", \"default\"]");
    let mut a = Conn::connect(elsa.port).unwrap();
    assert_eq!(a.call_line("AUTH app pw"), "+OK");
    assert_eq!(a.call_line("SET app:1 v"), "+OK");
    assert_eq!(
        a.call_line("SET other v"),
        "-NOPERM this user has no permissions to access one of the keys used as arguments"
    );
    // ACL LOAD of a broken file changes nothing; of a good one replaces
    // the users and closes the connections of those it dropped.
    std::fs::write(
        &file,
        "user default on nopass ~* &* +@all\nuser bad +nosuch\n",
    )
    .unwrap();
    let err = c.call_line("ACL LOAD");
    assert!(
        err.contains("Unknown command or category name in ACL"),
        "{err}"
    );
    assert!(err.ends_with("no change to the previously active ACL rules was performed"));
    std::fs::write(&file, "user default on nopass ~* &* +@all\n").unwrap();
    assert_eq!(c.call_line("ACL LOAD"), "+OK");
    assert_eq!(c.call_line("ACL USERS"), "[\"default\"]");
    assert!(a.call_line("PING").contains("connection closed"));
}

#[test]
fn protected_mode_refuses_non_loopback_clients() {
    // Redis 7.0 counts only 127.0.0.1 and ::1 as local: a client from
    // 127.0.0.2 is "outside" for protected mode, without a network
    // namespace.
    let elsa = Elsa::start(&["--bind", "0.0.0.0"]);
    let from = |ip: &str| {
        let sock =
            socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
        let local: std::net::SocketAddr = format!("{ip}:0").parse().unwrap();
        sock.bind(&local.into()).unwrap();
        let to: std::net::SocketAddr = format!("127.0.0.1:{}", elsa.port).parse().unwrap();
        sock.connect(&to.into()).unwrap();
        TcpStream::from(sock)
    };
    let mut outside = from("127.0.0.2");
    let text = read_all(&mut outside);
    assert!(
        text.starts_with("-DENIED Elsa is running in protected mode because protected mode is enabled and no password is set for the default user."),
        "{text}"
    );
    let mut local = from("127.0.0.1");
    local.write_all(b"PING\r\n").unwrap();
    let mut buf = [0u8; 7];
    local.read_exact(&mut buf).unwrap();
    assert_eq!(&buf, b"+PONG\r\n");
    // A password for the default user (here set at run time): clients
    // from outside get as far as AUTH.
    let mut admin = Conn::connect(elsa.port).unwrap();
    assert_eq!(admin.call_line("ACL SETUSER default >pw"), "+OK");
    let mut s = from("127.0.0.2");
    s.write_all(b"PING\r\n").unwrap();
    let mut buf = [0u8; 7];
    s.read_exact(&mut buf).unwrap();
    assert_eq!(&buf, b"-NOAUTH");
    drop(elsa);

    // protected-mode off: everyone may connect.
    let elsa = Elsa::start(&["--bind", "0.0.0.0", "--protected-mode", "false"]);
    let sock = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
    let local: std::net::SocketAddr = "127.0.0.2:0".parse().unwrap();
    sock.bind(&local.into()).unwrap();
    let to: std::net::SocketAddr = format!("127.0.0.1:{}", elsa.port).parse().unwrap();
    sock.connect(&to.into()).unwrap();
    let mut s = TcpStream::from(sock);
    s.write_all(b"PING\r\n").unwrap();
    let mut buf = [0u8; 7];
    s.read_exact(&mut buf).unwrap();
    assert_eq!(&buf, b"+PONG\r\n");
}

/// CLIENT LIST's whole text.
fn client_list_text(c: &mut Conn) -> String {
    match c.call(&[b"CLIENT", b"LIST"]) {
        Reply::Bulk(b) => String::from_utf8_lossy(&b).into_owned(),
        r => panic!("CLIENT LIST answered {r}"),
    }
}

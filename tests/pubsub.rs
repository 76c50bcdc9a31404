//! Pub/sub: Elsa against a real `redis-server`, then what only Elsa has.
//!
//! - `replies_and_messages_match_redis`: random sequences of (P|S)SUBSCRIBE,
//!   their UNSUBSCRIBEs, PUBLISH, SPUBLISH, PUBSUB …, PING, RESET and a
//!   refused GET from several connections (each RESP2 or RESP3, seeded RNG)
//!   run on both servers in lockstep; after every step each connection is
//!   read up to a `PING <token>` sent behind it, so every reply and every
//!   message pushed to every subscriber is compared, in order. What Redis
//!   itself leaves unordered is put in order on both sides first (the
//!   channels of an UNSUBSCRIBE without arguments and of PUBSUB CHANNELS,
//!   which Redis lists in hash order, and the messages one PUBLISH pushes to
//!   one subscriber through several patterns).
//! - `a_slow_subscriber_is_cut_off_and_memory_stays_bounded`: a subscriber
//!   that never reads while a publisher floods is disconnected by
//!   `client-output-buffer-limit-pubsub`, the server's RSS stays far below
//!   the flood, and other clients go on.
//! - `messages_reach_every_node_of_the_region_in_publisher_order` and
//!   `messages_cross_regions_only_when_enabled`: clusters of real nodes.
//!
//! Size of the differential part: `ELSA_PUBSUB_SEQUENCES` (default 200) of
//! `ELSA_PUBSUB_LEN` steps (default 80), seeds from `ELSA_PUBSUB_SEED`.

mod common;

#[allow(dead_code)]
#[path = "differential/resp.rs"]
mod resp;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use resp::{Conn, Reply};

use common::redis_server::RedisServer;
use common::{env_or, Elsa, Node, TestDir};

const CHANNELS: &[&str] = &["c0", "c1", "c2", "news.a", "news.b", "c*"];
const PATTERNS: &[&str] = &[
    "c*", "c[01]", "news.*", "*", "n?ws.?", "c\\*", "x*", "[^c]*",
];
/// Connections per sequence.
const CONNS: usize = 4;

/// One generated step: which connection sends what, and which parts of the
/// answers Redis leaves unordered.
#[derive(Clone, Debug)]
struct Step {
    conn: usize,
    args: Vec<String>,
    /// An UNSUBSCRIBE-like command without arguments: Redis lists the
    /// channels in hash order.
    unsub_all: bool,
    /// PUBSUB (SHARD)CHANNELS: a list in hash order.
    sort_reply: bool,
}

fn pick(rng: &mut StdRng, from: &[&str], min: usize, max: usize) -> Vec<String> {
    let n = rng.gen_range(min..=max);
    (0..n)
        .map(|_| from.choose(rng).expect("non-empty").to_string())
        .collect()
}

fn step(rng: &mut StdRng, i: usize) -> Step {
    let conn = rng.gen_range(0..CONNS);
    let mut unsub_all = false;
    let mut sort_reply = false;
    let cmd = |name: &str, rest: Vec<String>| {
        let mut v = vec![name.to_string()];
        v.extend(rest);
        v
    };
    let args = match rng.gen_range(0..100) {
        0..=14 => cmd("SUBSCRIBE", pick(rng, CHANNELS, 1, 3)),
        15..=24 => {
            let a = pick(rng, CHANNELS, 0, 2);
            unsub_all = a.is_empty();
            cmd("UNSUBSCRIBE", a)
        }
        25..=34 => cmd("PSUBSCRIBE", pick(rng, PATTERNS, 1, 2)),
        35..=41 => {
            let a = pick(rng, PATTERNS, 0, 2);
            unsub_all = a.is_empty();
            cmd("PUNSUBSCRIBE", a)
        }
        42..=46 => cmd("SSUBSCRIBE", pick(rng, CHANNELS, 1, 2)),
        47..=50 => {
            let a = pick(rng, CHANNELS, 0, 1);
            unsub_all = a.is_empty();
            cmd("SUNSUBSCRIBE", a)
        }
        51..=70 => cmd(
            "PUBLISH",
            vec![pick(rng, CHANNELS, 1, 1).remove(0), format!("m{i}")],
        ),
        71..=75 => cmd(
            "SPUBLISH",
            vec![pick(rng, CHANNELS, 1, 1).remove(0), format!("s{i}")],
        ),
        76..=79 => cmd("PUBSUB", {
            let mut a = vec!["NUMSUB".to_string()];
            a.extend(pick(rng, CHANNELS, 0, 3));
            a
        }),
        80..=81 => cmd("PUBSUB", {
            let mut a = vec!["SHARDNUMSUB".to_string()];
            a.extend(pick(rng, CHANNELS, 0, 2));
            a
        }),
        82..=83 => cmd("PUBSUB", vec!["NUMPAT".into()]),
        84..=86 => {
            sort_reply = true;
            let sub = if rng.gen_bool(0.7) {
                "CHANNELS"
            } else {
                "SHARDCHANNELS"
            };
            let mut a = vec![sub.to_string()];
            a.extend(pick(rng, PATTERNS, 0, 1));
            cmd("PUBSUB", a)
        }
        87 => cmd(
            "PUBSUB",
            [
                vec!["HELP"],
                vec!["NOSUCH"],
                vec!["NUMPAT", "x"],
                vec!["CHANNELS", "a", "b"],
            ]
            .choose(rng)
            .expect("non-empty")
            .iter()
            .map(|s| s.to_string())
            .collect(),
        ),
        88..=91 => cmd("PING", pick(rng, &["hello"], 0, 1)),
        92..=95 => cmd("GET", vec!["k".into()]),
        96 => cmd("PUBLISH", vec!["c0".into()]),
        97 => cmd("SUBSCRIBE", vec![]),
        _ => cmd("RESET", vec![]),
    };
    Step {
        conn,
        args,
        unsub_all,
        sort_reply,
    }
}

fn is_sync(r: &Reply, token: &[u8]) -> bool {
    match r {
        Reply::Bulk(b) => b == token,
        Reply::Array(items) => {
            matches!(&items[..], [Reply::Bulk(p), Reply::Bulk(t)] if p == b"pong" && t == token)
        }
        _ => false,
    }
}

/// Sends `cmd` (if any) and a `PING <token>` behind it, and returns every
/// frame that came before the PING's answer: the command's replies and the
/// messages pushed meanwhile.
fn window(c: &mut Conn, cmd: Option<&[String]>, token: &str) -> Vec<Reply> {
    let mut reqs: Vec<Vec<Vec<u8>>> = Vec::new();
    if let Some(cmd) = cmd {
        reqs.push(cmd.iter().map(|a| a.as_bytes().to_vec()).collect());
    }
    reqs.push(vec![b"PING".to_vec(), token.as_bytes().to_vec()]);
    c.send(&reqs);
    let mut got = Vec::new();
    loop {
        let r = c.read();
        if is_sync(&r, token.as_bytes()) {
            return got;
        }
        let broken = matches!(r, Reply::Broken(_));
        got.push(r);
        if broken || got.len() > 1000 {
            return got;
        }
    }
}

fn items(r: &Reply) -> Option<&[Reply]> {
    match r {
        Reply::Array(v) | Reply::Push(v) => Some(v),
        _ => None,
    }
}

fn kind_of(r: &Reply) -> Option<&[u8]> {
    match items(r)?.first()? {
        Reply::Bulk(b) => Some(b),
        _ => None,
    }
}

/// The frames of one window as text, with what Redis leaves unordered put
/// in order.
fn canon(mut frames: Vec<Reply>, s: Option<&Step>) -> Vec<String> {
    let is_msg = |r: &Reply| {
        matches!(
            kind_of(r),
            Some(b"message") | Some(b"pmessage") | Some(b"smessage")
        )
    };
    let is_unsub = |r: &Reply| {
        matches!(
            kind_of(r),
            Some(b"unsubscribe") | Some(b"punsubscribe") | Some(b"sunsubscribe")
        )
    };
    if let Some(s) = s {
        if s.sort_reply {
            if let Some(Reply::Array(v)) = frames.first_mut() {
                v.sort_by_key(|r| r.to_string());
            }
        }
        if s.unsub_all {
            // Keep each confirmation's count where it is; sort the names.
            let at: Vec<usize> = (0..frames.len())
                .filter(|&i| is_unsub(&frames[i]))
                .collect();
            let mut names: Vec<Reply> = at
                .iter()
                .map(|&i| items(&frames[i]).expect("array")[1].clone())
                .collect();
            names.sort_by_key(|r| r.to_string());
            for (&i, name) in at.iter().zip(names) {
                if let Reply::Array(v) | Reply::Push(v) = &mut frames[i] {
                    v[1] = name;
                }
            }
        }
    }
    let mut text: Vec<String> = frames.iter().map(|r| r.to_string()).collect();
    let at: Vec<usize> = (0..frames.len()).filter(|&i| is_msg(&frames[i])).collect();
    let mut msgs: Vec<String> = at.iter().map(|&i| text[i].clone()).collect();
    msgs.sort();
    for (&i, m) in at.iter().zip(msgs) {
        text[i] = m;
    }
    text
}

/// One sequence on one server: per step, every connection's window.
fn run(port: u16, resp3: &[bool], steps: &[Step]) -> Vec<Vec<Vec<String>>> {
    let mut conns: Vec<Conn> = resp3
        .iter()
        .map(|&r3| {
            let mut c = Conn::connect(port).expect("connect");
            if r3 {
                let hello = c.call(&[b"HELLO", b"3"]);
                assert!(matches!(hello, Reply::Map(_)), "HELLO 3: {hello}");
            }
            c
        })
        .collect();
    let mut out = Vec::new();
    for (n, s) in steps.iter().enumerate() {
        // The step's connection first (its command and answers), then
        // every other one reads what the step pushed to it.
        let mut per_conn = vec![Vec::new(); conns.len()];
        let order = std::iter::once(s.conn).chain((0..conns.len()).filter(|&i| i != s.conn));
        for i in order {
            let token = format!("sync-{n}-{i}");
            let mine = i == s.conn;
            let frames = window(&mut conns[i], mine.then_some(&s.args[..]), &token);
            per_conn[i] = canon(frames, mine.then_some(s));
        }
        out.push(per_conn);
    }
    // RESET: the next sequence starts with no subscriber left (a closed
    // connection leaves the server only later).
    for c in &mut conns {
        let r = c.call(&[b"RESET"]);
        assert_eq!(r, Reply::Simple(b"RESET".to_vec()), "port {port}");
    }
    out
}

#[test]
fn replies_and_messages_match_redis() {
    let redis = RedisServer::start();
    let elsa = Elsa::start(&["--workers", "2"]);
    eprintln!("redis on {}, elsa on {}", redis.port, elsa.port);
    let sequences: u64 = env_or("ELSA_PUBSUB_SEQUENCES", 200);
    let len: usize = env_or("ELSA_PUBSUB_LEN", 80);
    let first: u64 = env_or("ELSA_PUBSUB_SEED", 1);
    let (mut frames, mut resp3_runs) = (0usize, 0usize);
    for seed in first..first + sequences {
        let mut rng = StdRng::seed_from_u64(seed);
        // Every mix: all RESP2, all RESP3, or some of each.
        let resp3: Vec<bool> = (0..CONNS)
            .map(|i| match seed % 3 {
                0 => false,
                1 => true,
                _ => i % 2 == 1 || rng.gen_bool(0.3),
            })
            .collect();
        resp3_runs += resp3.iter().filter(|&&r| r).count();
        let steps: Vec<Step> = (0..len).map(|i| step(&mut rng, i)).collect();
        let want = run(redis.port, &resp3, &steps);
        let got = run(elsa.port, &resp3, &steps);
        for (n, (w, g)) in want.iter().zip(&got).enumerate() {
            frames += w.iter().map(Vec::len).sum::<usize>();
            if w != g {
                let listing: Vec<String> = steps[..=n]
                    .iter()
                    .enumerate()
                    .map(|(k, s)| format!("  {:>3} conn {}: {}", k + 1, s.conn, s.args.join(" ")))
                    .collect();
                let diff: Vec<String> = (0..CONNS)
                    .filter(|&i| w[i] != g[i])
                    .map(|i| {
                        format!(
                            "  conn {i} (resp{}):\n    redis: {:?}\n    elsa:  {:?}",
                            if resp3[i] { 3 } else { 2 },
                            w[i],
                            g[i]
                        )
                    })
                    .collect();
                panic!(
                    "seed {seed}: step {} differs\n{}\n{}",
                    n + 1,
                    listing.join("\n"),
                    diff.join("\n")
                );
            }
        }
    }
    eprintln!(
        "pubsub differential: {sequences} sequences x {len} steps x {CONNS} connections ({resp3_runs} RESP3 connections), {frames} frames compared, all equal"
    );
}

/// The server's resident memory, in bytes.
fn rss(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("proc status");
    let kb: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmRSS");
    kb * 1024
}

fn send_raw(s: &mut TcpStream, args: &[&[u8]]) {
    let mut buf = Vec::new();
    resp::encode(
        &args.iter().map(|a| a.to_vec()).collect::<Vec<_>>(),
        &mut buf,
    );
    s.write_all(&buf).expect("write");
}

#[test]
fn a_slow_subscriber_is_cut_off_and_memory_stays_bounded() {
    let dir = TestDir::new("pubsub-slow");
    // The default limit: 32mb hard, 8mb for 60 s.
    let node = Node::start(&dir.data(), &dir.log(), &["--workers", "2"]);
    let before = rss(node.child.id());

    // Never reads (until the end): the kernel's socket buffers take a few
    // MB, the rest of the backlog stays in Elsa.
    let mut slow = TcpStream::connect(("127.0.0.1", node.port)).unwrap();
    send_raw(&mut slow, &[b"SUBSCRIBE", b"flood"]);

    // A subscriber of another channel that reads, and a plain client.
    let mut calm = Conn::connect(node.port).unwrap();
    let r = calm.call(&[b"SUBSCRIBE", b"calm"]);
    assert_eq!(
        r.to_string(),
        Reply::Array(vec![
            Reply::Bulk(b"subscribe".to_vec()),
            Reply::Bulk(b"calm".to_vec()),
            Reply::Int(1)
        ])
        .to_string()
    );
    let mut plain = node.conn();
    let mut publisher = node.conn();
    // Wait for the slow subscription to be in place.
    let deadline = Instant::now() + Duration::from_secs(10);
    while redis::cmd("PUBSUB")
        .arg("NUMSUB")
        .arg("flood")
        .query::<(String, i64)>(&mut publisher)
        .unwrap()
        .1
        != 1
    {
        assert!(Instant::now() < deadline, "SUBSCRIBE flood never landed");
        std::thread::sleep(Duration::from_millis(10));
    }

    // 100 kB messages, 400 MB in all: ten times the hard limit's worth
    // would already be far more than the bound checked below.
    let payload = vec![b'x'; 100 * 1024];
    let (mut delivered, mut published) = (0i64, 0usize);
    let mut peak = before;
    for i in 0..4000 {
        let n: i64 = redis::cmd("PUBLISH")
            .arg("flood")
            .arg(&payload[..])
            .query(&mut publisher)
            .unwrap();
        delivered += n;
        published += payload.len();
        if i % 200 == 0 {
            peak = peak.max(rss(node.child.id()));
            // Plain clients are served all along.
            let _: () = redis::cmd("SET").arg("k").arg(i).query(&mut plain).unwrap();
            let v: i64 = redis::cmd("GET").arg("k").query(&mut plain).unwrap();
            assert_eq!(v, i);
        }
    }
    peak = peak.max(rss(node.child.id()));
    assert!(
        delivered < 4000,
        "the slow subscriber took all {delivered} messages: never cut off"
    );
    let grew = peak.saturating_sub(before);
    eprintln!(
        "published {} MB; the slow subscriber was cut off after {delivered} messages; RSS {} MB before, peak {} MB",
        published >> 20,
        before >> 20,
        peak >> 20
    );
    assert!(
        grew < 100 << 20,
        "RSS grew by {} MB while {} MB were published",
        grew >> 20,
        published >> 20
    );

    // The slow subscriber's connection was closed: what the kernel held,
    // then EOF.
    slow.set_read_timeout(Some(Duration::from_secs(20)))
        .unwrap();
    let mut sink = vec![0u8; 1 << 20];
    loop {
        match slow.read(&mut sink) {
            Ok(0) => break,
            Ok(_) => {}
            Err(e) => panic!("the slow subscriber was not disconnected: {e}"),
        }
    }
    // Others go on: the calm subscriber gets its message, the plain client
    // its answers.
    let n: i64 = redis::cmd("PUBLISH")
        .arg("calm")
        .arg("still here")
        .query(&mut publisher)
        .unwrap();
    assert_eq!(n, 1);
    assert_eq!(
        calm.read().to_string(),
        Reply::Array(vec![
            Reply::Bulk(b"message".to_vec()),
            Reply::Bulk(b"calm".to_vec()),
            Reply::Bulk(b"still here".to_vec())
        ])
        .to_string()
    );
    let pong: String = redis::cmd("PING").query(&mut plain).unwrap();
    assert_eq!(pong, "PONG");
    let log = node.log_text();
    assert!(
        log.contains("client-output-buffer-limit pubsub"),
        "no log line for the cut-off subscriber:\n{log}"
    );
}

/// A RESP2 subscriber on `port`, subscribed to `channel`.
fn subscriber(port: u16, channel: &str) -> Conn {
    let mut c = Conn::connect(port).expect("connect");
    let r = c.call(&[b"SUBSCRIBE", channel.as_bytes()]);
    assert!(
        matches!(&r, Reply::Array(v) if v.len() == 3),
        "SUBSCRIBE: {r}"
    );
    c
}

/// The payload of the next message `c` receives (None: nothing within the
/// read timeout, or not a message).
fn next_message(c: &mut Conn) -> Option<String> {
    match c.read() {
        Reply::Array(v) => match &v[..] {
            [Reply::Bulk(k), _, Reply::Bulk(p)] if k == b"message" => {
                Some(String::from_utf8_lossy(p).into_owned())
            }
            _ => None,
        },
        _ => None,
    }
}

#[test]
fn messages_reach_every_node_of_the_region_in_publisher_order() {
    let cluster = common::cluster::Cluster::start(&["r1", "r1", "r1"], &[]);
    let n = cluster.len();
    let per_publisher = 300;
    let mut subs: Vec<Conn> = (0..n)
        .map(|i| subscriber(cluster.port(i), "events"))
        .collect();
    // Publishers on every node at once, each numbering its messages.
    let publishers: Vec<_> = (0..n)
        .map(|i| {
            let port = cluster.port(i);
            std::thread::spawn(move || {
                let mut c = redis::Client::open(format!("redis://127.0.0.1:{port}/"))
                    .unwrap()
                    .get_connection()
                    .unwrap();
                for seq in 0..per_publisher {
                    let local: i64 = redis::cmd("PUBLISH")
                        .arg("events")
                        .arg(format!("{i}:{seq}"))
                        .query(&mut c)
                        .unwrap();
                    // The reply counts the publishing node's subscribers.
                    assert_eq!(local, 1);
                }
            })
        })
        .collect();
    for p in publishers {
        p.join().expect("publisher");
    }
    for (i, s) in subs.iter_mut().enumerate() {
        let mut next = vec![0usize; n];
        for _ in 0..n * per_publisher {
            let m = next_message(s)
                .unwrap_or_else(|| panic!("node {i}: messages missing after {next:?}"));
            let (from, seq) = m.split_once(':').expect("from:seq");
            let (from, seq): (usize, usize) = (from.parse().unwrap(), seq.parse().unwrap());
            assert_eq!(
                seq, next[from],
                "node {i}: publisher {from}'s messages out of order"
            );
            next[from] += 1;
        }
    }
    eprintln!(
        "{n} nodes: each subscriber got all {} messages of {n} publishers, each publisher's in order",
        n * per_publisher
    );
}

/// How many of 20 messages published on node `from` reach a subscriber on
/// node `to`, checking they come in order. With `expect_delivery`, first a
/// warm-up message must get through (peer links are made at the first
/// frame), then the 20 are waited for as long as 20 s — a loaded test host
/// has delayed them past a second — and a missing one is a failure.
/// Without, a marker published on `to` after 2 s ends the wait: nothing may
/// come before it.
///
/// Each call has its own channel: with messages crossing regions, the
/// previous call's last messages (published on `from` for a subscriber
/// elsewhere) may still be on their way to `to` when this call subscribes
/// there — CI once read `remote:14…19` of the call before as this call's
/// first six.
fn crosses(
    cluster: &common::cluster::Cluster,
    from: usize,
    to: usize,
    expect_delivery: bool,
) -> usize {
    static CALLS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let channel = format!(
        "news-{}",
        CALLS.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
    );
    let mut sub = subscriber(cluster.port(to), &channel);
    let mut publisher = cluster.conn(from);
    let publish = |c: &mut redis::Connection, m: &str| {
        let _: i64 = redis::cmd("PUBLISH").arg(&channel).arg(m).query(c).unwrap();
    };
    if !expect_delivery {
        for seq in 0..20 {
            publish(&mut publisher, &format!("remote:{seq}"));
        }
        std::thread::sleep(Duration::from_secs(2));
        publish(&mut cluster.conn(to), "marker");
        let mut got = 0;
        while let Some(m) = next_message(&mut sub) {
            if m == "marker" {
                return got;
            }
            got += 1;
        }
        panic!("the marker never came");
    }
    // Warm-up messages every 200 ms until one arrives.
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let warmer = {
        let (stop, port, channel) = (stop.clone(), cluster.port(from), channel.clone());
        std::thread::spawn(move || {
            let mut c = redis::Client::open(format!("redis://127.0.0.1:{port}/"))
                .unwrap()
                .get_connection()
                .unwrap();
            let started = Instant::now();
            while !stop.load(std::sync::atomic::Ordering::Relaxed)
                && started.elapsed() < Duration::from_secs(20)
            {
                let _: i64 = redis::cmd("PUBLISH")
                    .arg(&channel)
                    .arg("warm")
                    .query(&mut c)
                    .unwrap();
                std::thread::sleep(Duration::from_millis(200));
            }
        })
    };
    let first = next_message(&mut sub);
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    warmer.join().expect("warm-up publisher");
    assert!(
        first.is_some(),
        "nothing from node {from} ever reached node {to}"
    );
    let deadline = Instant::now() + Duration::from_secs(20);
    for seq in 0..20 {
        publish(&mut publisher, &format!("remote:{seq}"));
    }
    let mut got: Vec<String> = Vec::new();
    while got.len() < 20 && Instant::now() < deadline {
        match next_message(&mut sub) {
            Some(m) if m.starts_with("remote:") => got.push(m),
            _ => {} // a late warm-up message, or a read timeout
        }
    }
    let want: Vec<String> = (0..got.len()).map(|i| format!("remote:{i}")).collect();
    assert_eq!(
        got,
        want,
        "out of order; the publisher's log:\n{}\nthe subscriber's:\n{}",
        cluster.log_tail(from, 20),
        cluster.log_tail(to, 20)
    );
    got.len()
}

#[test]
fn messages_cross_regions_only_when_enabled() {
    // Off (the default): the region's other node gets them, the other
    // region's does not.
    let off = common::cluster::Cluster::start(&["a", "a", "b"], &[]);
    assert_eq!(crosses(&off, 0, 1, true), 20, "in-region delivery");
    assert_eq!(
        crosses(&off, 0, 2, false),
        0,
        "crossed regions while disabled"
    );
    drop(off);
    let on =
        common::cluster::Cluster::start(&["a", "a", "b"], &["--pubsub-across-regions", "true"]);
    assert_eq!(crosses(&on, 0, 1, true), 20, "in-region delivery");
    assert_eq!(crosses(&on, 0, 2, true), 20, "cross-region delivery");
    assert_eq!(crosses(&on, 2, 0, true), 20, "cross-region delivery");
}

/// CLIENT REPLY OFF silences replies, not the confirmations of SUBSCRIBE
/// and its relatives (Redis's `CLIENT_PUSHING`), in RESP2 and RESP3 —
/// Elsa used to drop them, and a client waiting for its confirmation
/// (Redis's `unit/pubsub`) waited for ever.
#[test]
fn subscription_confirmations_come_through_client_reply_off() {
    let redis = RedisServer::start();
    let elsa = Elsa::start(&[]);
    for resp3 in [false, true] {
        let mut seen = Vec::new();
        for port in [redis.port, elsa.port] {
            let mut c = Conn::connect(port).expect("connect");
            if resp3 {
                let _ = c.call(&[b"HELLO", b"3"]);
            }
            c.send(&[vec![b"CLIENT".to_vec(), b"REPLY".to_vec(), b"OFF".to_vec()]]);
            let mut frames = Vec::new();
            for cmd in [
                &[&b"SUBSCRIBE"[..], b"ch"][..],
                &[b"PSUBSCRIBE", b"c*"],
                &[b"UNSUBSCRIBE", b"ch"],
                &[b"PUNSUBSCRIBE", b"c*"],
            ] {
                frames.push(c.call(cmd));
            }
            // A reply that is not a confirmation stays silenced: PING's
            // PONG never comes, the marker's confirmation does.
            c.send(&[vec![b"PING".to_vec()]]);
            frames.push(c.call(&[b"SUBSCRIBE", b"marker"]));
            seen.push(frames);
        }
        assert!(
            seen[0].iter().all(|r| !matches!(r, Reply::Broken(_))),
            "redis: {:?}",
            seen[0]
        );
        assert_eq!(seen[0], seen[1], "resp3 {resp3}: redis, then elsa");
    }
}

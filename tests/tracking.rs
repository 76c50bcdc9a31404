//! Client-side caching (`CLIENT TRACKING`): Elsa against a real
//! `redis-server`, then what only a multi-shard node shows.
//!
//! - `invalidations_match_redis`: random sequences over four connections —
//!   two RESP3 ones that turn tracking on and off in every mode (default,
//!   OPTIN/OPTOUT with `CLIENT CACHING`, BCAST with and without prefixes,
//!   refused combinations), a RESP2 one subscribed to
//!   `__redis__:invalidate`, and a RESP2 one whose tracking redirects to it
//!   — reading and writing strings, hashes and sets, with FLUSHALL and
//!   FLUSHDB, MULTI/EXEC and EVAL, NOLOOP on and off, on both servers in lockstep. After every step each
//!   connection is read up to a `PING <token>` sent behind it, so every
//!   reply and every invalidation each connection received is compared.
//!   Invalidations are compared as the set of keys a window received (Redis
//!   batches BCAST keys per event-loop turn, Elsa sends one message per
//!   key), everything else in order.
//! - `a_write_on_another_shard_or_by_expiry_invalidates`: the key changes
//!   through paths a single connection's writes do not show — a MULTI/EXEC
//!   across shards, a TTL running out — and the tracking client is told.
//!
//! Size: `ELSA_TRACKING_SEQUENCES` (default 150) of `ELSA_TRACKING_LEN`
//! steps (default 60), seeds from `ELSA_TRACKING_SEED`.

mod common;

#[allow(dead_code)]
#[path = "differential/resp.rs"]
mod resp;

use std::time::{Duration, Instant};

use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use resp::{Conn, Reply};

use common::redis_server::RedisServer;
use common::{env_or, Elsa};

/// Connection 2 is the redirect target; `$REDIR` stands for its client id
/// (each server's own).
const REDIR: &str = "$REDIR";
const KEYS: &[&str] = &["k1", "k2", "k3", "kx"];

fn pick<'a>(rng: &mut StdRng, from: &[&'a str]) -> &'a str {
    from.choose(rng).expect("non-empty")
}

fn words(s: &str) -> Vec<String> {
    s.split_whitespace().map(str::to_string).collect()
}

/// A tracking command for connection 0, 1 (RESP3) or 3 (RESP2, redirect).
fn tracking_cmd(rng: &mut StdRng, conn: usize) -> String {
    if conn == 3 {
        return pick(
            rng,
            &[
                "CLIENT TRACKING ON REDIRECT $REDIR",
                "CLIENT TRACKING ON REDIRECT $REDIR BCAST",
                "CLIENT TRACKING ON REDIRECT $REDIR BCAST PREFIX k",
                "CLIENT TRACKING ON REDIRECT $REDIR NOLOOP",
                "CLIENT TRACKING ON REDIRECT $REDIR BCAST NOLOOP",
                "CLIENT TRACKING OFF",
                "CLIENT TRACKING ON REDIRECT 999999",
            ],
        )
        .to_string();
    }
    pick(
        rng,
        &[
            "CLIENT TRACKING ON",
            "CLIENT TRACKING ON",
            "CLIENT TRACKING ON OPTIN",
            "CLIENT TRACKING ON OPTOUT",
            "CLIENT TRACKING ON BCAST",
            "CLIENT TRACKING ON BCAST PREFIX k1 PREFIX h",
            "CLIENT TRACKING ON NOLOOP",
            "CLIENT TRACKING ON BCAST NOLOOP",
            "CLIENT TRACKING ON OPTOUT NOLOOP",
            "CLIENT TRACKING OFF",
            "CLIENT TRACKING ON PREFIX k",
            "CLIENT TRACKING ON OPTIN OPTOUT",
            "CLIENT TRACKING ON BCAST OPTIN",
            "CLIENT TRACKING MAYBE",
            "CLIENT TRACKING ON FOO",
            "CLIENT CACHING YES",
            "CLIENT CACHING NO",
            "CLIENT CACHING MAYBE",
            "CLIENT GETREDIR",
            "CLIENT TRACKINGINFO",
        ],
    )
    .to_string()
}

fn data_cmd(rng: &mut StdRng) -> String {
    let k = pick(rng, KEYS);
    let k2 = pick(rng, KEYS);
    let v = rng.gen_range(0..5);
    match rng.gen_range(0..19) {
        17 => format!("EVAL redis.call('get',KEYS[2]) 2 {k} {k2}"),
        18 => format!("EVAL_RO redis.call('exists','kx') 1 {k}"),
        // Several commands in one step (`;`): a MULTI is sent whole.
        14 => format!("MULTI;SET {k} m{v};GET {k2};EXEC"),
        15 => format!("EVAL redis.call('set',KEYS[1],ARGV[1]) 1 {k} e{v}"),
        16 => format!("MULTI;DEL {k};HSET h f {v};EXEC"),
        0..=2 => format!("GET {k}"),
        3 => format!("MGET {k} {k2}"),
        4 => format!("EXISTS {k}"),
        5 => "HGET h f".to_string(),
        6 => "SISMEMBER s m".to_string(),
        7..=8 => format!("SET {k} v{v}"),
        9 => format!("DEL {k}"),
        10 => format!("MSET {k} a {k2} b"),
        11 => format!("HSET h f {v}"),
        12 => format!("SADD s m{v}"),
        _ => {
            if rng.gen_bool(0.5) {
                "FLUSHALL".to_string()
            } else {
                "FLUSHDB".to_string()
            }
        }
    }
}

/// (connection, command) steps of one sequence.
fn sequence(seed: u64, len: usize) -> Vec<(usize, String)> {
    let mut rng = StdRng::seed_from_u64(seed);
    (0..len)
        .map(|_| {
            let conn = *[0, 0, 1, 1, 3, 3].choose(&mut rng).expect("conns");
            let cmd = if rng.gen_bool(0.3) {
                tracking_cmd(&mut rng, conn)
            } else {
                data_cmd(&mut rng)
            };
            (conn, cmd)
        })
        .collect()
}

fn is_sync(r: &Reply, token: &[u8]) -> bool {
    matches!(r, Reply::Bulk(b) if b == token)
        || matches!(r, Reply::Array(v) if matches!(&v[..], [Reply::Bulk(p), Reply::Bulk(t)] if p == b"pong" && t == token))
}

/// The keys an invalidation names ("*" for a flush), if it is one.
fn invalidated(r: &Reply) -> Option<Vec<String>> {
    let keys = match r {
        Reply::Push(v) if v.first() == Some(&Reply::Bulk(b"invalidate".to_vec())) => v.get(1)?,
        Reply::Array(v)
            if v.len() == 3
                && v[0] == Reply::Bulk(b"message".to_vec())
                && v[1] == Reply::Bulk(b"__redis__:invalidate".to_vec()) =>
        {
            &v[2]
        }
        _ => return None,
    };
    Some(match keys {
        Reply::Array(ks) => ks.iter().map(|k| k.to_string()).collect(),
        _ => vec!["*".to_string()],
    })
}

/// What one connection received in a window: the replies in order, then
/// the keys invalidated (sorted). A second PING follows the first: Redis
/// sends a BCAST client the keys its own command changed after that
/// command's event-loop turn, so after the first PING's reply.
fn window(c: &mut Conn, cmd: Option<Vec<Vec<String>>>, token: &str, redir: &str) -> Vec<String> {
    let (mut replies, mut keys) = (Vec::new(), Vec::new());
    // Only CLIENT replies carry the redirect's id (GETREDIR, TRACKINGINFO).
    let client = cmd
        .as_ref()
        .is_some_and(|c| c[0][0].eq_ignore_ascii_case("CLIENT"));
    let mut cmd = cmd;
    for round in 0..2 {
        let token = format!("{token}-{round}");
        let mut reqs: Vec<Vec<Vec<u8>>> = Vec::new();
        for part in cmd.take().unwrap_or_default() {
            reqs.push(part.into_iter().map(String::into_bytes).collect());
        }
        reqs.push(vec![b"PING".to_vec(), token.as_bytes().to_vec()]);
        c.send(&reqs);
        loop {
            let r = c.read();
            if is_sync(&r, token.as_bytes()) {
                break;
            }
            if matches!(r, Reply::Broken(_)) || replies.len() > 100 {
                replies.push(r.to_string());
                return replies;
            }
            match invalidated(&r) {
                Some(k) => keys.extend(k),
                None if client => replies.push(r.to_string().replace(redir, REDIR)),
                None => replies.push(r.to_string()),
            }
        }
    }
    keys.sort();
    keys.dedup(); // Redis may name a key twice in one BCAST batch
    replies.push(format!("invalidated: {keys:?}"));
    replies
}

fn run(port: u16, steps: &[(usize, String)]) -> Vec<Vec<Vec<String>>> {
    let mut conns: Vec<Conn> = (0..4)
        .map(|_| Conn::connect(port).expect("connect"))
        .collect();
    for c in &mut conns[..2] {
        let hello = c.call(&[b"HELLO", b"3"]);
        assert!(matches!(hello, Reply::Map(_)), "HELLO 3: {hello}");
    }
    let redir = match conns[2].call(&[b"CLIENT", b"ID"]) {
        Reply::Int(id) => id.to_string(),
        other => panic!("CLIENT ID: {other}"),
    };
    let sub = conns[2].call(&[b"SUBSCRIBE", b"__redis__:invalidate"]);
    assert!(matches!(sub, Reply::Array(_)), "SUBSCRIBE: {sub}");
    let _ = conns[0].call(&[b"FLUSHALL"]);
    let _ = conns[0].call(&[b"PING"]);
    let mut out = Vec::new();
    for (n, (conn, cmd)) in steps.iter().enumerate() {
        let cmd: Vec<Vec<String>> = cmd.replace(REDIR, &redir).split(';').map(words).collect();
        let mut per_conn = vec![Vec::new(); conns.len()];
        let order = std::iter::once(*conn).chain((0..conns.len()).filter(|i| i != conn));
        for i in order {
            let token = format!("sync-{n}-{i}");
            let mine = (i == *conn).then(|| cmd.clone());
            per_conn[i] = window(&mut conns[i], mine, &token, &redir);
        }
        out.push(per_conn);
    }
    out
}

#[test]
fn invalidations_match_redis() {
    let redis = RedisServer::start();
    let elsa = Elsa::start(&["--workers", "2"]);
    let sequences: u64 = env_or("ELSA_TRACKING_SEQUENCES", 150);
    let len: usize = env_or("ELSA_TRACKING_LEN", 60);
    let first: u64 = env_or("ELSA_TRACKING_SEED", 1);
    let mut compared = 0;
    for seed in first..first + sequences {
        let steps = sequence(seed, len);
        let want = run(redis.port, &steps);
        let got = run(elsa.port, &steps);
        for (n, (w, g)) in want.iter().zip(&got).enumerate() {
            for (i, (wc, gc)) in w.iter().zip(g).enumerate() {
                compared += wc.len();
                assert_eq!(
                    wc, gc,
                    "seed {seed}, step {n} ({:?} on connection {}), connection {i}: redis vs elsa\nsteps so far: {:#?}",
                    steps[n].1, steps[n].0, &steps[..=n]
                );
            }
        }
    }
    eprintln!("[tracking] {sequences} sequences x {len} steps: {compared} frames equal");
}

/// Reads pushes until every key of `keys` was invalidated, or `timeout`
/// passes; the keys never invalidated.
fn wait_invalidations(c: &mut Conn, keys: &[&str], timeout: Duration) -> Vec<String> {
    let mut missing: Vec<String> = keys.iter().map(|k| format!("{k:?}")).collect();
    let deadline = Instant::now() + timeout;
    while !missing.is_empty() && Instant::now() < deadline {
        c.send(&[vec![b"PING".to_vec(), b"probe".to_vec()]]);
        // Pushes may come before the PING's reply.
        loop {
            let r = c.read();
            if is_sync(&r, b"probe") || matches!(r, Reply::Broken(_)) {
                break;
            }
            for k in invalidated(&r).unwrap_or_default() {
                missing.retain(|m| *m != k);
            }
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    missing
}

#[test]
fn a_write_on_another_shard_or_by_expiry_invalidates() {
    let elsa = Elsa::start(&["--workers", "3"]);
    let mut reader = Conn::connect(elsa.port).expect("connect");
    assert!(matches!(reader.call(&[b"HELLO", b"3"]), Reply::Map(_)));
    assert_eq!(
        reader.call(&[b"CLIENT", b"TRACKING", b"ON"]),
        Reply::Simple(b"OK".to_vec())
    );
    let mut writer = elsa.conn();
    let (a, b) = common::keys_on_two_shards(&mut writer);
    let _: () = redis::cmd("MSET")
        .arg(&a)
        .arg(1)
        .arg(&b)
        .arg(2)
        .query(&mut writer)
        .unwrap();
    // Read both: now cached by the reader.
    let _ = reader.call(&[b"MGET", a.as_bytes(), b.as_bytes()]);
    // A MULTI/EXEC across both shards changes both.
    let _: redis::Value = redis::pipe()
        .atomic()
        .set(&a, "x")
        .set(&b, "y")
        .query(&mut writer)
        .unwrap();
    let missing = wait_invalidations(&mut reader, &[&a, &b], Duration::from_secs(5));
    assert!(missing.is_empty(), "never invalidated: {missing:?}");
    // A value whose TTL runs out is invalidated once it is collected.
    let _: () = redis::cmd("SET")
        .arg("ttl-key")
        .arg("v")
        .arg("PX")
        .arg(100)
        .query(&mut writer)
        .unwrap();
    let _ = reader.call(&[b"GET", b"ttl-key"]);
    let missing = wait_invalidations(&mut reader, &["ttl-key"], Duration::from_secs(20));
    assert!(missing.is_empty(), "an expired key was never invalidated");
}

/// In a region whose nodes each hold every key (two nodes, replication
/// factor 2), a client tracking on one node is told of a write made on the
/// other node and of one made in another region; a region with more nodes
/// than replicas refuses tracking rather than leave caches stale.
#[test]
fn writes_on_other_nodes_and_regions_invalidate() {
    let c = common::cluster::Cluster::start(&["a", "a", "b"], &["--wan-delay-ms", "5"]);
    let mut reader = Conn::connect(c.port(0)).expect("connect");
    assert!(matches!(reader.call(&[b"HELLO", b"3"]), Reply::Map(_)));
    assert_eq!(
        reader.call(&[b"CLIENT", b"TRACKING", b"ON"]),
        Reply::Simple(b"OK".to_vec())
    );
    let keys: Vec<String> = (0..20).map(|i| format!("t:{i}")).collect();
    let mut other = c.conn(1);
    for k in &keys {
        let _: () = redis::cmd("SET")
            .arg(k)
            .arg("old")
            .query(&mut other)
            .unwrap();
    }
    let waited: i64 = redis::cmd("WAITREGION")
        .arg("b")
        .arg(10_000)
        .query(&mut other)
        .unwrap();
    assert_eq!(waited, 1);
    for k in &keys {
        let _ = reader.call(&[b"GET", k.as_bytes()]);
    }
    // Written on the region's other node: every key is invalidated here.
    for k in &keys[..10] {
        let _: () = redis::cmd("SET")
            .arg(k)
            .arg("new")
            .query(&mut other)
            .unwrap();
    }
    let names: Vec<&str> = keys[..10].iter().map(String::as_str).collect();
    let missing = wait_invalidations(&mut reader, &names, Duration::from_secs(10));
    assert!(
        missing.is_empty(),
        "a write on node 1 never invalidated {missing:?} on node 0"
    );
    // Written in region b: merged here, so invalidated here.
    let mut far = c.conn(2);
    for k in &keys[10..] {
        let _: () = redis::cmd("SET").arg(k).arg("far").query(&mut far).unwrap();
    }
    let names: Vec<&str> = keys[10..].iter().map(String::as_str).collect();
    let missing = wait_invalidations(&mut reader, &names, Duration::from_secs(20));
    assert!(
        missing.is_empty(),
        "a write in region b never invalidated {missing:?} in region a"
    );
    drop(c);

    // Three nodes, two replicas each: refused, with the reason.
    let c = common::cluster::Cluster::start(&["a", "a", "a"], &[]);
    c.wait_members(&[0, 1, 2], 3, Duration::from_secs(30));
    let mut conn = Conn::connect(c.port(0)).expect("connect");
    let r = conn.call(&[b"CLIENT", b"TRACKING", b"ON"]);
    assert!(
        matches!(&r, Reply::Error(e) if e.starts_with(b"ERR CLIENT TRACKING needs a node that holds every key")),
        "{r}"
    );
}

/// What one server shows for a redirect whose client left, for
/// `tracking-table-max-keys` and for INFO's tracking totals: every reply
/// and push in order, the redirect's client id replaced by a name.
fn redirect_and_limit_transcript(port: u16) -> Vec<String> {
    let mut out = Vec::new();
    let mut redir = Conn::connect(port).expect("connect");
    let redir_id = match redir.call(&[b"CLIENT", b"ID"]) {
        Reply::Int(id) => id.to_string(),
        other => panic!("CLIENT ID: {other}"),
    };
    let _ = redir.call(&[b"SUBSCRIBE", b"__redis__:invalidate"]);
    let mut c = Conn::connect(port).expect("connect");
    let mut w = Conn::connect(port).expect("connect");
    let named = |r: String| r.replace(&redir_id, "$REDIR");
    let _ = w.call_line("FLUSHALL");
    let _ = w.call_line("CONFIG SET tracking-table-max-keys 1000000");
    out.push(c.call(&[b"HELLO", b"3"]).kind().to_string());
    out.push(c.call_line(&format!("CLIENT TRACKING ON REDIRECT {redir_id}")));
    let _ = w.call_line("SET k 1");
    out.push(c.call_line("GET k"));
    // The redirect's client leaves; the next change finds it gone.
    out.push(redir.call_line("QUIT"));
    std::thread::sleep(Duration::from_millis(200));
    let _ = w.call_line("SET k 2");
    let push = c.read_within(Duration::from_secs(5));
    out.push(named(push.map_or("nothing".into(), |r| r.to_string())));
    out.push(
        c.call_line("CLIENT TRACKINGINFO")
            .replace(&redir_id, "$REDIR"),
    );
    out.push(named(c.call_line("CLIENT GETREDIR")));
    // Tracking on its own connection: three keys remembered, then a
    // limit of one forgets two of them, each told.
    out.push(c.call_line("CLIENT TRACKING ON"));
    for k in ["a", "b", "d"] {
        let _ = w.call_line(&format!("SET {k} v"));
        out.push(c.call_line(&format!("GET {k}")));
    }
    let info = match w.call(&[b"INFO", b"stats"]) {
        Reply::Bulk(b) | Reply::Verbatim(_, b) => String::from_utf8_lossy(&b).into_owned(),
        other => panic!("INFO: {other}"),
    };
    out.extend(
        info.lines()
            .filter(|l| l.starts_with("tracking_total_"))
            .map(str::to_string),
    );
    out.push(w.call_line("CONFIG SET tracking-table-max-keys 1"));
    out.push(w.call_line("CONFIG GET tracking-table-max-keys"));
    // Redis applies the limit before the tracking connection's next
    // command: the two invalidations come first, in either key order.
    c.send(&[vec![b"PING".to_vec(), b"end".to_vec()]]);
    let mut told = 0;
    loop {
        let r = c.read();
        if invalidated(&r).is_some() {
            told += 1;
            continue;
        }
        out.push(r.to_string());
        break;
    }
    out.push(format!("told {told}"));
    let _ = w.call_line("CONFIG SET tracking-table-max-keys 1000000");
    out
}

#[test]
fn a_broken_redirect_and_the_table_limit_as_redis() {
    let redis = RedisServer::start();
    let elsa = Elsa::start(&["--workers", "2"]);
    let want = redirect_and_limit_transcript(redis.port);
    let got = redirect_and_limit_transcript(elsa.port);
    assert_eq!(want, got, "redis vs elsa");
    eprintln!("[tracking] redirect and limit transcript: {want:?}");
}

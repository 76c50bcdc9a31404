//! The metrics port of a single node: `/metrics` scraped by a real HTTP
//! client and parsed strictly (`common::openmetrics`), its figures checked
//! against INFO and DBSIZE after a known workload; unknown paths, wrong
//! methods and malformed or oversized requests answered without harm to
//! the node. (A cluster node's families: `tests/status_page.rs`.)

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use common::openmetrics::{http_get, scrape};
use common::{free_port, Elsa};

fn info(c: &mut redis::Connection, section: &str) -> std::collections::HashMap<String, String> {
    let text: String = redis::cmd("INFO").arg(section).query(c).expect("INFO");
    text.lines()
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.to_string(), v.trim().to_string()))
        .collect()
}

fn num(m: &std::collections::HashMap<String, String>, k: &str) -> f64 {
    m.get(k)
        .unwrap_or_else(|| panic!("INFO has no {k}"))
        .parse()
        .unwrap_or_else(|_| panic!("INFO {k} is not a number"))
}

#[test]
fn metrics_match_info_after_a_known_workload() {
    let mport = free_port();
    let elsa = Elsa::start(&[
        "--metrics-port",
        &mport.to_string(),
        "--appendfsync",
        "always",
        "--workers",
        "2",
    ]);
    // Connected before the first scrape, so the commands a client library
    // sends on connecting are counted before it.
    let mut c = elsa.conn();
    let mut other = elsa.conn();
    let before = scrape(mport);
    let commands_before = before.value("elsa_commands_processed_total", &[]).unwrap();

    // The workload: 40 SETs in db 0, SELECT 3 + 7 SETs there, one
    // MULTI/EXEC (a transaction commit), one WATCH/EXEC that a write from
    // another client aborts.
    for i in 0..40 {
        let _: () = redis::cmd("SET")
            .arg(format!("k{i}"))
            .arg(i)
            .query(&mut c)
            .unwrap();
    }
    let _: () = redis::cmd("SELECT").arg(3).query(&mut c).unwrap();
    for i in 0..7 {
        let _: () = redis::cmd("SET")
            .arg(format!("d3-{i}"))
            .arg(i)
            .query(&mut c)
            .unwrap();
    }
    let _: () = redis::cmd("SELECT").arg(0).query(&mut c).unwrap();
    let _: Vec<String> = redis::pipe()
        .atomic()
        .cmd("SET")
        .arg("tx-a")
        .arg(1)
        .cmd("SET")
        .arg("tx-b")
        .arg(2)
        .query(&mut c)
        .unwrap();
    let _: () = redis::cmd("WATCH").arg("watched").query(&mut c).unwrap();
    let _: () = redis::cmd("SET")
        .arg("watched")
        .arg("theirs")
        .query(&mut other)
        .unwrap();
    let aborted: Option<Vec<String>> = redis::pipe()
        .atomic()
        .cmd("SET")
        .arg("watched")
        .arg("mine")
        .query(&mut c)
        .unwrap();
    assert_eq!(aborted, None, "EXEC after a watched key changed is aborted");
    // Commands sent on `c` and `other` since the first scrape: 40 SET,
    // SELECT, 7 SET, SELECT, MULTI SET SET EXEC, WATCH, SET (other),
    // MULTI SET EXEC.
    let sent = 40 + 1 + 7 + 1 + 4 + 1 + 1 + 3;

    let after = scrape(mport);
    assert_eq!(
        after.value("elsa_commands_processed_total", &[]).unwrap() - commands_before,
        sent as f64,
        "commands_total moved by exactly the commands sent"
    );
    // INFO counts itself too.
    let stats = info(&mut c, "stats");
    assert_eq!(
        num(&stats, "total_commands_processed"),
        after.value("elsa_commands_processed_total", &[]).unwrap() + 1.0
    );

    // Per command: the same calls INFO's commandstats shows (read after
    // the scrape, so INFO's own calls are not in the scrape).
    let cmdstats = info(&mut c, "commandstats");
    let set_calls: f64 = cmdstats
        .get("cmdstat_set")
        .and_then(|v| v.strip_prefix("calls="))
        .and_then(|r| r.split(',').next())
        .and_then(|n| n.parse().ok())
        .expect("cmdstat_set in INFO commandstats");
    assert_eq!(
        after.value("elsa_command_calls_total", &[("cmd", "set")]),
        Some(set_calls)
    );
    // 40 + 7 SETs, the 2 of the EXEC and `other`'s one; the SET queued
    // behind the changed WATCH never ran (as in Redis, it is not a call).
    assert_eq!(set_calls, 50.0, "the SETs that ran");
    assert_eq!(
        after.value("elsa_command_duration_seconds_count", &[("cmd", "select")]),
        after.value("elsa_command_calls_total", &[("cmd", "select")]),
        "every SELECT was timed"
    );

    // Keys per database = DBSIZE.
    let db0: i64 = redis::cmd("DBSIZE").query(&mut c).unwrap();
    assert_eq!(after.value("elsa_keys", &[("db", "0")]), Some(db0 as f64));
    assert_eq!(db0, 40 + 2 + 1);
    let _: () = redis::cmd("SELECT").arg(3).query(&mut c).unwrap();
    let db3: i64 = redis::cmd("DBSIZE").query(&mut c).unwrap();
    let _: () = redis::cmd("SELECT").arg(0).query(&mut c).unwrap();
    assert_eq!(db3, 7);
    assert_eq!(after.value("elsa_keys", &[("db", "3")]), Some(db3 as f64));

    // The log: bytes on disk, and with appendfsync always an fsync
    // histogram per shard whose count is that shard's fsync counter.
    let persistence = info(&mut c, "persistence");
    assert!(after.value("elsa_wal_bytes", &[]).unwrap() > 0.0);
    assert_eq!(
        after.value("elsa_wal_bytes", &[]),
        Some(num(&persistence, "wal_bytes"))
    );
    let fsyncs = after.sum("elsa_wal_fsyncs_total");
    assert!(fsyncs > 0.0, "appendfsync always: the writes were fsynced");
    assert_eq!(fsyncs, num(&persistence, "wal_fsyncs"));
    assert_eq!(after.sum("elsa_wal_fsync_seconds_count"), fsyncs);
    for shard in ["0", "1"] {
        assert_eq!(
            after.value("elsa_wal_fsync_seconds_count", &[("shard", shard)]),
            after.value("elsa_wal_fsyncs_total", &[("shard", shard)]),
            "shard {shard}: one histogram observation per fsync"
        );
    }
    assert!(after.sum("elsa_wal_fsync_seconds_sum") > 0.0);
    assert_eq!(
        after.sum("elsa_wal_records_total"),
        num(&persistence, "wal_records_written")
    );

    // Transactions: the same counters INFO shows, and the two
    // transactions show (a commit; the aborted EXEC never reached a
    // shard's validation, so it is no conflict there).
    let tx = info(&mut c, "transactions");
    for (metric, field) in [
        ("elsa_lone_ops_total", "lone_ops"),
        ("elsa_commits_total", "commits"),
        ("elsa_conflicts_total", "conflicts"),
        ("elsa_busy_retries_total", "busy_retries"),
    ] {
        assert_eq!(
            after.value(metric, &[]),
            Some(num(&tx, field)),
            "{metric} = INFO {field}"
        );
    }
    assert!(
        after.value("elsa_commits_total", &[]).unwrap() >= 1.0,
        "MULTI/EXEC committed"
    );
    assert!(
        after.value("elsa_lone_ops_total", &[]).unwrap()
            - before.value("elsa_lone_ops_total", &[]).unwrap()
            >= 48.0,
        "the lone SETs ran as lone ops"
    );

    // How clients' transactions ended, by isolation level: an RC commit,
    // an SI transaction that loses to another (write-write conflict), an
    // RR one ended by ABORT; the WATCH above aborted one EXEC, and an EXEC
    // after a refused queued command is an EXECABORT.
    let q = |c: &mut redis::Connection, args: &[&str]| -> redis::RedisResult<redis::Value> {
        let mut cmd = redis::cmd(args[0]);
        for a in &args[1..] {
            cmd.arg(*a);
        }
        cmd.query(c)
    };
    q(&mut c, &["BEGIN", "RC"]).unwrap();
    q(&mut c, &["SET", "rc-key", "1"]).unwrap();
    q(&mut c, &["COMMIT"]).unwrap();
    q(&mut c, &["BEGIN", "SI"]).unwrap();
    q(&mut other, &["BEGIN", "SI"]).unwrap();
    q(&mut c, &["GET", "si-key"]).unwrap();
    q(&mut other, &["GET", "si-key"]).unwrap();
    q(&mut c, &["SET", "si-key", "mine"]).unwrap();
    q(&mut other, &["SET", "si-key", "theirs"]).unwrap();
    q(&mut other, &["COMMIT"]).unwrap();
    let lost = q(&mut c, &["COMMIT"]).expect_err("the second SI writer conflicts");
    assert!(lost.to_string().contains("CONFLICT"), "{lost}");
    q(&mut c, &["BEGIN", "RR"]).unwrap();
    q(&mut c, &["SET", "rr-key", "1"]).unwrap();
    q(&mut c, &["ABORT"]).unwrap();
    q(&mut c, &["MULTI"]).unwrap();
    assert!(q(&mut c, &["NOSUCHCOMMAND"]).is_err());
    let execabort = q(&mut c, &["EXEC"]).unwrap_err();
    assert_eq!(
        execabort.kind(),
        redis::ErrorKind::ExecAbortError,
        "{execabort}"
    );
    let m = scrape(mport);
    let ended = |iso: &str, outcome: &str| {
        m.value(
            "elsa_transactions_total",
            &[("isolation", iso), ("outcome", outcome)],
        )
        .unwrap_or_else(|| panic!("no elsa_transactions_total for {iso} {outcome}"))
    };
    for iso in ["RC", "RR", "SI"] {
        for outcome in ["committed", "conflict", "aborted"] {
            let want = match (iso, outcome) {
                ("RC", "committed") | ("SI", "committed") => 1.0,
                ("SI", "conflict") => 1.0,
                ("RR", "aborted") => 1.0,
                _ => 0.0,
            };
            assert_eq!(ended(iso, outcome), want, "{iso} {outcome}");
        }
    }
    // MULTI/EXEC: the EXECs above committed, the WATCHed one is a
    // conflict, the EXECABORT an abort.
    assert!(ended("MULTI", "committed") >= 1.0);
    assert_eq!(ended("MULTI", "conflict"), 1.0);
    assert_eq!(ended("MULTI", "aborted"), 1.0);
    // The same counters INFO's # Transactions shows.
    let tx = info(&mut c, "transactions");
    assert_eq!(
        tx.get("txn_si").map(String::as_str),
        Some(
            format!(
                "commits={},aborts={},conflicts={}",
                ended("SI", "committed"),
                ended("SI", "aborted"),
                ended("SI", "conflict")
            )
            .as_str()
        ),
        "{tx:?}"
    );
    // The conflict was found by a shard's validation: INFO and /metrics
    // count it there too.
    assert_eq!(
        m.value("elsa_conflicts_total", &[]),
        Some(num(&tx, "conflicts"))
    );
    assert!(num(&tx, "conflicts") >= 1.0);

    // Clients and memory, read while nothing changes them.
    let now = scrape(mport);
    let clients = info(&mut c, "clients");
    assert_eq!(
        now.value("elsa_connected_clients", &[]),
        Some(num(&clients, "connected_clients"))
    );
    assert_eq!(now.value("elsa_connected_clients", &[]), Some(2.0));
    let memory = info(&mut c, "memory");
    assert_eq!(
        now.value("elsa_memory_dataset_bytes", &[]),
        Some(num(&memory, "used_memory_dataset"))
    );
    assert!(now.value("elsa_memory_rss_bytes", &[]).unwrap() > 0.0);
    // A standalone node has no cluster families.
    assert!(now.samples("elsa_cluster_members").is_empty());
    assert!(now.samples("elsa_peer_lag_ms").is_empty());
    // Every family has a help text.
    for (name, f) in &now.families {
        assert!(!f.help.is_empty(), "{name} has no HELP");
    }
}

/// Sends raw bytes, returns whatever comes back before the server closes
/// (or a second of silence).
fn raw(port: u16, bytes: &[u8]) -> String {
    raw_then(port, bytes, true)
}

/// As [`raw`]; `half_close`: shut the sending side after the bytes (hyper
/// then stops at the first request: it does not serve half-closed
/// connections).
fn raw_then(port: u16, bytes: &[u8], half_close: bool) -> String {
    let mut s = TcpStream::connect(("127.0.0.1", port)).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let _ = s.write_all(bytes);
    if half_close {
        let _ = s.shutdown(std::net::Shutdown::Write);
    }
    let mut out = Vec::new();
    let _ = s.read_to_end(&mut out);
    String::from_utf8_lossy(&out).into_owned()
}

#[test]
fn bad_requests_get_http_errors_and_the_node_lives_on() {
    let mport = free_port();
    let elsa = Elsa::start(&["--metrics-port", &mport.to_string()]);

    assert_eq!(http_get(mport, "/nope").0, 404);
    assert_eq!(http_get(mport, "/metrics/extra").0, 404);
    let post = ureq::post(&format!("http://127.0.0.1:{mport}/metrics")).call();
    match post {
        Err(ureq::Error::Status(405, r)) => assert_eq!(r.header("allow"), Some("GET, HEAD")),
        other => panic!("POST /metrics: {other:?}"),
    }
    let head = ureq::head(&format!("http://127.0.0.1:{mport}/status.json"))
        .call()
        .expect("HEAD");
    assert_eq!(head.status(), 200);

    // Not HTTP at all; a request line with no version; a header block
    // past the size limit; a body with a lying length; two requests in one
    // write.
    let garbage = raw(mport, b"\x00\x01\x02 hello\r\n\r\n");
    assert!(garbage.starts_with("HTTP/1.1 400 "), "{garbage:?}");
    let no_version = raw(mport, b"GET /metrics\r\n\r\n");
    assert!(no_version.starts_with("HTTP/1.1 400 "), "{no_version:?}");
    let huge = format!(
        "GET /metrics HTTP/1.1\r\nX-Big: {}\r\n\r\n",
        "a".repeat(200_000)
    );
    let huge = raw(mport, huge.as_bytes());
    assert!(huge.starts_with("HTTP/1.1 431 "), "{huge:?}");
    // The body is never read: the GET is answered, the rest dropped.
    let cut = raw(
        mport,
        b"GET /status.json HTTP/1.1\r\nHost: x\r\nContent-Length: 99999999\r\n\r\nabc",
    );
    assert!(cut.starts_with("HTTP/1.1 200 "), "{cut:?}");
    let pipelined = raw_then(
        mport,
        b"GET /nope HTTP/1.1\r\nHost: x\r\n\r\nGET /status.json HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
        false,
    );
    assert!(pipelined.starts_with("HTTP/1.1 404"), "{pipelined:?}");
    assert!(
        pipelined.contains("HTTP/1.1 200"),
        "second pipelined request answered: {pipelined:?}"
    );

    // The node still serves clients and scrapes.
    let pong: String = redis::cmd("PING").query(&mut elsa.conn()).unwrap();
    assert_eq!(pong, "PONG");
    let m = scrape(mport);
    assert!(m.value("elsa_uptime_seconds", &[]).is_some());
    let (status, ctype, body) = http_get(mport, "/");
    assert_eq!(status, 200);
    assert!(ctype.starts_with("text/html"));
    assert!(body.contains("/status.json"), "the page polls status.json");
    let (status, _, body) = http_get(mport, "/status.json");
    assert_eq!(status, 200);
    let v: serde_json::Value = serde_json::from_str(&body).expect("status.json is JSON");
    assert_eq!(v["cluster"], serde_json::Value::Null, "standalone");
    assert_eq!(v["node"], 1);
}

#[test]
fn a_taken_metrics_port_stops_the_node_at_start() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let mport = taken.local_addr().unwrap().port();
    let dir = common::TestDir::new("http-taken");
    let out = std::process::Command::new(common::elsa_bin())
        .args([
            "server",
            "--port",
            &free_port().to_string(),
            "--metrics-port",
            &mport.to_string(),
        ])
        .arg("--data-dir")
        .arg(dir.data())
        .output()
        .expect("run elsa");
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains(&format!("127.0.0.1:{mport}")), "{err}");
}

/// A connection to the metrics port from the loopback address `from`
/// (Linux routes all of 127/8 to `lo`, so 127.0.0.2 and 127.0.0.3 are two
/// clients as far as the node can tell).
fn connect_from(from: [u8; 4], port: u16) -> TcpStream {
    use socket2::{Domain, SockAddr, Socket, Type};
    let sock = Socket::new(Domain::IPV4, Type::STREAM, None).expect("socket");
    let src = std::net::SocketAddr::from((from, 0));
    sock.bind(&SockAddr::from(src))
        .expect("bind a loopback source");
    let dst = std::net::SocketAddr::from(([127, 0, 0, 1], port));
    sock.connect_timeout(&SockAddr::from(dst), Duration::from_secs(5))
        .expect("connect");
    let s: TcpStream = sock.into();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    s
}

/// Sends a whole request from `from`, reads the answer until the server
/// closes (or 5 s of silence).
fn request_from(from: [u8; 4], port: u16, req: &[u8]) -> String {
    let mut s = connect_from(from, port);
    let _ = s.write_all(req);
    let mut out = Vec::new();
    let _ = s.read_to_end(&mut out);
    String::from_utf8_lossy(&out).into_owned()
}

/// Whether the server closed `s` within `wait` (EOF or reset), not merely
/// stayed silent.
fn closed_within(s: &mut TcpStream, wait: Duration) -> bool {
    let deadline = std::time::Instant::now() + wait;
    let mut byte = [0u8; 1];
    while std::time::Instant::now() < deadline {
        s.set_read_timeout(Some(Duration::from_millis(200)))
            .unwrap();
        match s.read(&mut byte) {
            Ok(0) => return true,
            Ok(_) => {}
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) => {}
            Err(_) => return true,
        }
    }
    false
}

/// The review's slow-loris finding: 80 connections from one address, each
/// with half a request line and then nothing, used to take all 64 slots
/// (the 65th connection was closed at accept) for 10 s each. Now one
/// address holds at most a few slots, a half-sent request head is closed
/// after 3 s, and another client is served at once.
#[test]
fn slow_connections_from_one_address_do_not_lock_out_others() {
    let mport = free_port();
    let _elsa = Elsa::start(&["--metrics-port", &mport.to_string()]);
    let attacker = [127, 0, 0, 2];
    let mut slow: Vec<TcpStream> = (0..80)
        .map(|_| {
            let mut s = connect_from(attacker, mport);
            s.write_all(b"GET /metrics HT")
                .expect("partial request line");
            s
        })
        .collect();
    // The node accepts in order: the attacker's connections are all past
    // accept before this one is.
    let started = std::time::Instant::now();
    let answer = request_from(
        [127, 0, 0, 3],
        mport,
        b"GET /status.json HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
    );
    assert!(
        answer.starts_with("HTTP/1.1 200 "),
        "another address was not served while one held 80 slow connections: {answer:?}"
    );
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "served only after {:?}",
        started.elapsed()
    );
    // Every slow connection is closed: those past the address's share at
    // accept, the others at the head deadline (3 s) — all well before the
    // old 10 s.
    let deadline = std::time::Instant::now() + Duration::from_secs(8);
    for (i, s) in slow.iter_mut().enumerate() {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        assert!(
            closed_within(s, left.max(Duration::from_millis(200))),
            "slow connection {i} was still open after 8 s"
        );
    }
    // The attacker's own address is served again once its slow ones are
    // gone.
    drop(slow);
    let again = request_from(
        attacker,
        mport,
        b"GET /status.json HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
    );
    assert!(again.starts_with("HTTP/1.1 200 "), "{again:?}");
}

/// `docs/security.md` promises 431 for a header block over 64 KiB; a 70 KB
/// header used to be answered 200 (hyper's read buffer could take it in
/// one read, past `max_buf_size`).
#[test]
fn a_header_block_over_64_kib_gets_431() {
    let mport = free_port();
    let _elsa = Elsa::start(&["--metrics-port", &mport.to_string()]);
    for size in [70_000, 66_000, 100_000] {
        let req = format!(
            "GET /status.json HTTP/1.1\r\nHost: x\r\nX-Big: {}\r\nConnection: close\r\n\r\n",
            "a".repeat(size)
        );
        let got = raw(mport, req.as_bytes());
        assert!(
            got.starts_with("HTTP/1.1 431 "),
            "{size}-byte header: {got:?}"
        );
    }
    // Just under the limit is served (not half-closed: hyper would drop a
    // half-closed connection whose answer is not ready yet).
    let req = format!(
        "GET /status.json HTTP/1.1\r\nHost: x\r\nX-Big: {}\r\nConnection: close\r\n\r\n",
        "a".repeat(60_000)
    );
    let got = raw_then(mport, req.as_bytes(), false);
    assert!(got.starts_with("HTTP/1.1 200 "), "{got:?}");
}

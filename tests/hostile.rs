//! Hostile clients (issue 16), each attack as a regression test against the
//! real server process: cross-protocol HTTP, output buffers a client never
//! reads, huge declared lengths before AUTH and after it, an oversized
//! query buffer.
//!
//! Memory is measured as the server's resident set (`VmRSS` in
//! `/proc/PID/status`), sampled while the attack runs; the bounds are
//! generous multiples of the configured limits, never timings.

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::Elsa;

const MB: u64 = 1024 * 1024;

fn connect(port: u16) -> TcpStream {
    let s = TcpStream::connect(("127.0.0.1", port)).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    s
}

/// The server's resident set, in bytes.
fn rss(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("proc status");
    let line = status
        .lines()
        .find(|l| l.starts_with("VmRSS:"))
        .expect("VmRSS");
    let kb: u64 = line
        .split_whitespace()
        .nth(1)
        .and_then(|v| v.parse().ok())
        .expect("VmRSS value");
    kb * 1024
}

/// Samples the RSS of `pid` until dropped; `peak()` is the largest seen.
struct RssWatch {
    peak: Arc<AtomicU64>,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl RssWatch {
    fn start(pid: u32) -> RssWatch {
        let peak = Arc::new(AtomicU64::new(rss(pid)));
        let stop = Arc::new(AtomicBool::new(false));
        let (p, s) = (peak.clone(), stop.clone());
        let thread = std::thread::spawn(move || {
            while !s.load(Ordering::Relaxed) {
                if let Ok(text) = std::fs::read_to_string(format!("/proc/{pid}/status")) {
                    if let Some(kb) = text
                        .lines()
                        .find(|l| l.starts_with("VmRSS:"))
                        .and_then(|l| l.split_whitespace().nth(1))
                        .and_then(|v| v.parse::<u64>().ok())
                    {
                        p.fetch_max(kb * 1024, Ordering::Relaxed);
                    }
                }
                std::thread::sleep(Duration::from_millis(10));
            }
        });
        RssWatch {
            peak,
            stop,
            thread: Some(thread),
        }
    }

    fn peak(&self) -> u64 {
        self.peak.load(Ordering::Relaxed)
    }
}

impl Drop for RssWatch {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Reads until the server closes the connection; the bytes read.
fn read_to_close(s: &mut TcpStream) -> Vec<u8> {
    let mut got = Vec::new();
    let mut buf = vec![0u8; 256 * 1024];
    loop {
        match s.read(&mut buf) {
            Ok(0) => return got,
            Ok(n) => got.extend_from_slice(&buf[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => return got,
            Err(e) => panic!("connection not closed ({} bytes read): {e}", got.len()),
        }
    }
}

fn resp(args: &[&[u8]]) -> Vec<u8> {
    let mut out = format!("*{}\r\n", args.len()).into_bytes();
    for a in args {
        out.extend_from_slice(format!("${}\r\n", a.len()).as_bytes());
        out.extend_from_slice(a);
        out.extend_from_slice(b"\r\n");
    }
    out
}

#[test]
fn http_post_is_closed_without_running_anything() {
    let elsa = Elsa::start(&[]);
    let mut con = elsa.conn();
    // A browser tricked into posting to the port: the body is a command.
    let body = "SET xproto pwned\r\n";
    let post = format!(
        "POST / HTTP/1.1\r\nHost: 127.0.0.1:{}\r\nContent-Type: text/plain\r\nContent-Length: {}\r\n\r\n{body}",
        elsa.port,
        body.len()
    );
    let mut s = connect(elsa.port);
    s.write_all(post.as_bytes()).unwrap();
    let got = read_to_close(&mut s);
    assert!(
        got.is_empty(),
        "no reply to POST: {:?}",
        String::from_utf8_lossy(&got)
    );
    // `Host:` further down (after a GET line, which is answered as an
    // unknown-arity command) closes the connection too.
    let mut s = connect(elsa.port);
    s.write_all(b"GET / HTTP/1.1\r\nHost: example\r\n\r\nSET xproto2 pwned\r\n")
        .unwrap();
    let got = read_to_close(&mut s);
    assert!(
        !String::from_utf8_lossy(&got).contains("+OK"),
        "nothing after Host: runs: {:?}",
        String::from_utf8_lossy(&got)
    );
    let v: Option<String> = redis::cmd("GET").arg("xproto").query(&mut con).unwrap();
    assert_eq!(v, None, "the POST body must not run");
    let v: Option<String> = redis::cmd("GET").arg("xproto2").query(&mut con).unwrap();
    assert_eq!(v, None, "what follows Host: must not run");
    // What came before, in the same read, ran (as in Redis).
    let mut s = connect(elsa.port);
    s.write_all(b"SET before 1\r\npost / HTTP/1.0\r\nSET after 1\r\n")
        .unwrap();
    assert_eq!(read_to_close(&mut s), b"+OK\r\n");
    let after: Option<String> = redis::cmd("GET").arg("after").query(&mut con).unwrap();
    assert_eq!(after, None);
}

/// A pipeline of `n` copies of `cmd`, written in a thread (the server may
/// stop reading it once it closes the connection); the socket to read from.
fn pipeline_unread(port: u16, cmd: Vec<u8>, n: usize) -> TcpStream {
    let s = connect(port);
    let mut w = s.try_clone().unwrap();
    std::thread::spawn(move || {
        let mut all = Vec::with_capacity(cmd.len() * n);
        for _ in 0..n {
            all.extend_from_slice(&cmd);
        }
        let _ = w.write_all(&all);
    });
    s
}

/// Waits while the server works on what it was sent (RSS sampled meanwhile).
fn settle() {
    std::thread::sleep(Duration::from_millis(1500));
}

#[test]
fn slow_reader_of_get_pipelines_is_closed_at_the_output_limit() {
    let elsa = Elsa::start(&["--client-output-buffer-limit", "10485760"]);
    let mut con = elsa.conn();
    let value = vec![b'v'; MB as usize];
    let _: () = redis::cmd("SET")
        .arg("big")
        .arg(&value)
        .query(&mut con)
        .unwrap();
    let pid = elsa.child.id();
    let before = rss(pid);
    let watch = RssWatch::start(pid);
    // Three connections, each asking for 1 GB of replies and reading none.
    let get = resp(&[b"GET", b"big"]);
    let mut conns: Vec<TcpStream> = (0..3)
        .map(|_| pipeline_unread(elsa.port, get.clone(), 1024))
        .collect();
    settle();
    let peak = watch.peak();
    eprintln!(
        "slow GET readers: RSS before {} MB, peak {} MB",
        before / MB,
        peak / MB
    );
    assert!(
        peak < before + 200 * MB,
        "RSS grew from {} MB to {} MB with a 10 MB output limit",
        before / MB,
        peak / MB
    );
    for c in &mut conns {
        let got = read_to_close(c);
        assert!(
            (got.len() as u64) < 100 * MB,
            "closed before sending everything ({} bytes)",
            got.len()
        );
    }
    // The server still serves.
    let pong: String = redis::cmd("PING").query(&mut con).unwrap();
    assert_eq!(pong, "PONG");
}

#[test]
fn slow_reader_of_mget_pipelines_is_closed_at_the_output_limit() {
    let elsa = Elsa::start(&["--client-output-buffer-limit", "10485760"]);
    let mut con = elsa.conn();
    let value = vec![b'v'; MB as usize];
    let keys: Vec<String> = (0..8).map(|i| format!("big{i}")).collect();
    for k in &keys {
        let _: () = redis::cmd("SET")
            .arg(k)
            .arg(&value)
            .query(&mut con)
            .unwrap();
    }
    let pid = elsa.child.id();
    let before = rss(pid);
    let watch = RssWatch::start(pid);
    let mut args: Vec<&[u8]> = vec![b"MGET"];
    args.extend(keys.iter().map(|k| k.as_bytes()));
    // 8 MB per MGET, 128 of them: 1 GB of replies nobody reads.
    let mut s = pipeline_unread(elsa.port, resp(&args), 128);
    let started = Instant::now();
    let got = read_to_close(&mut s);
    let peak = watch.peak();
    eprintln!(
        "slow MGET reader: RSS before {} MB, peak {} MB, closed after {:?}",
        before / MB,
        peak / MB,
        started.elapsed()
    );
    assert!((got.len() as u64) < 100 * MB, "closed, not served in full");
    assert!(
        peak < before + 200 * MB,
        "RSS {} MB → {} MB",
        before / MB,
        peak / MB
    );
}

#[test]
fn fast_reader_of_big_values_holds_one_encoded_copy_at_a_time() {
    // A limit above the pipeline's total, so the client is served in full.
    let elsa = Elsa::start(&["--client-output-buffer-limit", "8589934592"]);
    let mut con = elsa.conn();
    let size = 64 * MB as usize;
    let value = vec![b'v'; size];
    let _: () = redis::cmd("SET")
        .arg("huge")
        .arg(&value)
        .query(&mut con)
        .unwrap();
    drop(value);
    let pid = elsa.child.id();
    let before = rss(pid);
    let watch = RssWatch::start(pid);
    let n = 40;
    let mut s = connect(elsa.port);
    let get = resp(&[b"GET", b"huge"]);
    let mut all = Vec::new();
    for _ in 0..n {
        all.extend_from_slice(&get);
    }
    s.write_all(&all).unwrap();
    let want = n * (size + format!("${size}\r\n\r\n").len());
    let mut buf = vec![0u8; 1024 * 1024];
    let mut got = 0usize;
    while got < want {
        let r = s.read(&mut buf).expect("read replies");
        assert!(r > 0, "closed after {got} of {want} bytes");
        got += r;
    }
    let peak = watch.peak();
    eprintln!(
        "fast reader of {n} x 64 MB: RSS before {} MB, peak {} MB",
        before / MB,
        peak / MB
    );
    // 40 × 64 MB = 2.5 GB of replies; a few values' worth at a time.
    assert!(
        peak < before + 512 * MB,
        "RSS {} MB → {} MB",
        before / MB,
        peak / MB
    );
}

#[test]
fn before_auth_huge_lengths_close_without_allocating() {
    let elsa = Elsa::start_with_password("s3cret");
    let pid = elsa.child.id();
    let before = rss(pid);
    let mut s = connect(elsa.port);
    s.write_all(b"*100000000\r\n").unwrap();
    let got = read_to_close(&mut s);
    assert_eq!(
        String::from_utf8_lossy(&got),
        "-ERR Protocol error: unauthenticated multibulk length\r\n"
    );
    let mut s = connect(elsa.port);
    s.write_all(b"*2\r\n$3\r\nGET\r\n$2000000000\r\n").unwrap();
    let got = read_to_close(&mut s);
    assert_eq!(
        String::from_utf8_lossy(&got),
        "-ERR Protocol error: unauthenticated bulk length\r\n"
    );
    // Many at once: still nothing allocated for them.
    let mut conns: Vec<TcpStream> = (0..50)
        .map(|_| {
            let mut s = connect(elsa.port);
            s.write_all(b"*1\r\n$536870912\r\n").unwrap();
            s
        })
        .collect();
    for c in &mut conns {
        assert!(read_to_close(c).starts_with(b"-ERR Protocol error: unauthenticated bulk length"));
    }
    let after = rss(pid);
    assert!(
        after < before + 20 * MB,
        "RSS {} MB → {} MB before AUTH",
        before / MB,
        after / MB
    );
    // After AUTH the normal limits apply: a 1 MB value is fine, a bulk
    // over proto-max-bulk-len (512 MB) is not.
    let mut s = connect(elsa.port);
    s.write_all(&resp(&[b"AUTH", b"s3cret"])).unwrap();
    let mut ok = [0u8; 5];
    s.read_exact(&mut ok).unwrap();
    assert_eq!(&ok, b"+OK\r\n");
    let value = vec![b'x'; MB as usize];
    s.write_all(&resp(&[b"SET", b"k", &value])).unwrap();
    s.read_exact(&mut ok).unwrap();
    assert_eq!(&ok, b"+OK\r\n");
    s.write_all(b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$536870913\r\n")
        .unwrap();
    let got = read_to_close(&mut s);
    assert_eq!(
        String::from_utf8_lossy(&got),
        "-ERR Protocol error: invalid bulk length\r\n"
    );
}

#[test]
fn query_buffer_limit_closes_the_connection() {
    let elsa = Elsa::start(&["--client-query-buffer-limit", "1048576"]);
    let mut s = connect(elsa.port);
    // A 4 MB value announced, 2 MB of it sent: past the 1 MB limit.
    s.write_all(b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$4194304\r\n")
        .unwrap();
    let chunk = vec![b'x'; 64 * 1024];
    for _ in 0..32 {
        if s.write_all(&chunk).is_err() {
            break;
        }
    }
    let got = read_to_close(&mut s);
    assert!(got.is_empty(), "{:?}", String::from_utf8_lossy(&got));
    let mut con = elsa.conn();
    let v: Option<String> = redis::cmd("GET").arg("k").query(&mut con).unwrap();
    assert_eq!(v, None);
}

#[test]
fn output_limit_in_redis_spelling_with_a_soft_limit() {
    // No hard limit; past 2 MB for 0 seconds the client is closed.
    let elsa = Elsa::start(&["--client-output-buffer-limit", "normal 0 2mb 0"]);
    let mut con = elsa.conn();
    let got: Vec<String> = redis::cmd("CONFIG")
        .arg("GET")
        .arg("client-output-buffer-limit")
        .query(&mut con)
        .unwrap();
    assert_eq!(
        got[1], "normal 0 2097152 0 slave 0 0 0 pubsub 33554432 8388608 60",
        "CONFIG GET answers as Redis: every class, in bytes"
    );
    let value = vec![b'v'; MB as usize];
    let _: () = redis::cmd("SET")
        .arg("big")
        .arg(&value)
        .query(&mut con)
        .unwrap();
    let mut s = pipeline_unread(elsa.port, resp(&[b"GET", b"big"]), 256);
    let got = read_to_close(&mut s);
    assert!((got.len() as u64) < 64 * MB, "closed past the soft limit");
}

/// The server's virtual size (`VmSize`), in bytes: what it asked the
/// kernel for, touched or not.
fn vm_size(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("proc status");
    let kb: u64 = status
        .lines()
        .find(|l| l.starts_with("VmSize:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse().ok())
        .expect("VmSize");
    kb * 1024
}

/// Issue 40 (3): after AUTH (here: no password), a declared bulk length
/// of 512 MB followed by one byte reserved the declared length up front,
/// 512 MB of address space per 40-byte request (200 such connections took
/// 62 GB). The buffer must grow as bytes arrive, so 100 such connections
/// cost about what their bytes cost.
#[test]
fn a_declared_bulk_length_is_not_reserved_before_its_bytes_arrive() {
    let elsa = Elsa::start(&["--workers", "1"]);
    let pid = elsa.child.id();
    let before = vm_size(pid);
    let mut conns: Vec<TcpStream> = (0..100)
        .map(|_| {
            let mut s = connect(elsa.port);
            s.write_all(b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$536870000\r\n")
                .unwrap();
            s
        })
        .collect();
    // The header is parsed; the next read is the one that sized its
    // buffer from the declared length.
    std::thread::sleep(Duration::from_millis(300));
    for s in &mut conns {
        s.write_all(b"x").unwrap();
    }
    // Every connection's bytes were read once a later request on the same
    // worker was answered.
    std::thread::sleep(Duration::from_millis(500));
    let mut probe = connect(elsa.port);
    probe.write_all(&resp(&[b"PING"])).unwrap();
    let mut pong = [0u8; 7];
    probe.read_exact(&mut pong).unwrap();
    assert_eq!(&pong, b"+PONG\r\n");
    let after = vm_size(pid);
    assert!(
        after < before + 1024 * MB,
        "virtual size {} MB → {} MB for 100 requests of 40 bytes",
        before / MB,
        after / MB
    );
    // The value still arrives whole when its bytes do.
    let mut s = connect(elsa.port);
    let value = vec![b'v'; 3 * MB as usize];
    s.write_all(&resp(&[b"SET", b"big", &value])).unwrap();
    let mut ok = [0u8; 5];
    s.read_exact(&mut ok).unwrap();
    assert_eq!(&ok, b"+OK\r\n");
    s.write_all(&resp(&[b"STRLEN", b"big"])).unwrap();
    let mut n = [0u8; 10];
    s.read_exact(&mut n).unwrap();
    assert_eq!(&n, b":3145728\r\n");
    drop(conns);
}

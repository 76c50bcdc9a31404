//! RESP edge cases against the real server process, with raw bytes: split
//! frames, pipelines, malformed and hostile input, auth limits, RESP3.

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use common::Elsa;

fn connect(elsa: &Elsa) -> TcpStream {
    let s = TcpStream::connect(("127.0.0.1", elsa.port)).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s
}

/// Reads until `want` bytes arrived (or the peer closed).
fn read_n(s: &mut TcpStream, want: usize) -> Vec<u8> {
    let mut buf = vec![0u8; 64 * 1024];
    let mut got = Vec::new();
    while got.len() < want {
        match s.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => got.extend_from_slice(&buf[..n]),
            Err(e) => panic!("read failed after {:?}: {e}", String::from_utf8_lossy(&got)),
        }
    }
    got
}

fn roundtrip(s: &mut TcpStream, req: &[u8], expect: &[u8]) {
    s.write_all(req).unwrap();
    let got = read_n(s, expect.len());
    assert_eq!(
        String::from_utf8_lossy(&got),
        String::from_utf8_lossy(expect)
    );
}

/// True when the server closed the connection (read returns 0).
fn closed(s: &mut TcpStream) -> bool {
    let mut b = [0u8; 256];
    loop {
        match s.read(&mut b) {
            Ok(0) => return true,
            Ok(_) => continue,
            Err(_) => return false,
        }
    }
}

#[test]
fn split_frames_byte_by_byte() {
    let elsa = Elsa::start(&["--workers", "2"]);
    let mut s = connect(&elsa);
    let req = b"*3\r\n$3\r\nSET\r\n$3\r\nkey\r\n$5\r\nvalue\r\n*2\r\n$3\r\nGET\r\n$3\r\nkey\r\n";
    for b in req.iter() {
        s.write_all(&[*b]).unwrap();
        std::thread::sleep(Duration::from_micros(200));
    }
    assert_eq!(read_n(&mut s, 16), b"+OK\r\n$5\r\nvalue\r\n");
}

#[test]
fn pipeline_answers_in_order() {
    let elsa = Elsa::start(&["--workers", "2"]);
    let mut s = connect(&elsa);
    let mut req = Vec::new();
    let mut expect = Vec::new();
    for i in 0..500 {
        let v = i.to_string();
        req.extend_from_slice(
            format!(
                "*3\r\n$3\r\nSET\r\n$5\r\nk{i:04}\r\n${}\r\n{v}\r\n",
                v.len()
            )
            .as_bytes(),
        );
        expect.extend_from_slice(b"+OK\r\n");
    }
    for i in 0..500 {
        req.extend_from_slice(format!("*2\r\n$4\r\nINCR\r\n$5\r\nk{i:04}\r\n").as_bytes());
        expect.extend_from_slice(format!(":{}\r\n", i + 1).as_bytes());
    }
    req.extend_from_slice(b"*2\r\n$3\r\nGET\r\n$5\r\nk0499\r\n");
    expect.extend_from_slice(b"$3\r\n500\r\n");
    roundtrip(&mut s, &req, &expect);
}

#[test]
fn errors_keep_the_connection_usable() {
    let elsa = Elsa::start(&[]);
    let mut s = connect(&elsa);
    roundtrip(
        &mut s,
        b"*2\r\n$6\r\nNOSUCH\r\n$1\r\na\r\n",
        b"-ERR unknown command 'NOSUCH', with args beginning with: 'a' \r\n",
    );
    roundtrip(
        &mut s,
        b"*1\r\n$3\r\nGET\r\n",
        b"-ERR wrong number of arguments for 'get' command\r\n",
    );
    roundtrip(
        &mut s,
        b"*4\r\n$3\r\nSET\r\n$1\r\nk\r\n$1\r\nv\r\n$2\r\nXY\r\n",
        b"-ERR syntax error\r\n",
    );
    roundtrip(
        &mut s,
        b"*3\r\n$6\r\nINCRBY\r\n$1\r\nn\r\n$3\r\nabc\r\n",
        b"-ERR value is not an integer or out of range\r\n",
    );
    roundtrip(
        &mut s,
        b"PING\r\n\r\nECHO \"a b\"\r\n",
        b"+PONG\r\n$3\r\na b\r\n",
    );
    roundtrip(&mut s, b"*0\r\n*1\r\n$4\r\nPING\r\n", b"+PONG\r\n");
}

#[test]
fn malformed_input_gets_an_error_then_close() {
    let elsa = Elsa::start(&[]);
    for bad in [
        &b"*abc\r\n"[..],
        b"*1\r\n:5\r\n",
        b"*1\r\n$-7\r\n",
        b"*1\r\n$3\r\nabcde\r\n",
        b"SET \"unbalanced\r\n",
    ] {
        let mut s = connect(&elsa);
        s.write_all(bad).unwrap();
        let got = read_n(&mut s, 5);
        assert!(
            got.starts_with(b"-ERR Protocol error"),
            "{:?} -> {:?}",
            String::from_utf8_lossy(bad),
            String::from_utf8_lossy(&got)
        );
        assert!(
            closed(&mut s),
            "connection should close after a protocol error"
        );
    }
    // The server itself is fine.
    let mut s = connect(&elsa);
    roundtrip(&mut s, b"PING\r\n", b"+PONG\r\n");
}

#[test]
fn hostile_lengths_are_refused_without_allocating() {
    let elsa = Elsa::start(&["--proto-max-bulk-len", "1048576"]);
    let mut s = connect(&elsa);
    s.write_all(b"*2147483647\r\n").unwrap();
    assert!(read_n(&mut s, 5).starts_with(b"-ERR Protocol error: invalid multibulk length"));
    let mut s = connect(&elsa);
    s.write_all(b"*2\r\n$3\r\nGET\r\n$999999999999\r\n")
        .unwrap();
    assert!(read_n(&mut s, 5).starts_with(b"-ERR Protocol error: invalid bulk length"));
    let mut s = connect(&elsa);
    s.write_all(b"*2\r\n$3\r\nGET\r\n$1048577\r\n").unwrap();
    assert!(read_n(&mut s, 5).starts_with(b"-ERR Protocol error: invalid bulk length"));
    // A header line that never ends is cut off at 64 KiB.
    let mut s = connect(&elsa);
    let _ = s.write_all(&vec![b'A'; 70 * 1024]);
    assert!(read_n(&mut s, 5).starts_with(b"-ERR Protocol error: too big inline request"));
    // A value right at the limit is fine.
    let mut c = elsa.conn();
    let big = vec![b'x'; 1048576];
    let _: () = redis::cmd("SET")
        .arg("big")
        .arg(&big)
        .query(&mut c)
        .unwrap();
    let n: usize = redis::cmd("STRLEN").arg("big").query(&mut c).unwrap();
    assert_eq!(n, big.len());
}

#[test]
fn requirepass_limits_unauthenticated_clients() {
    let elsa_pw = Elsa::start_with_password("s3cret");
    let mut s = connect(&elsa_pw);
    roundtrip(
        &mut s,
        b"GET k\r\n",
        b"-NOAUTH Authentication required.\r\n",
    );
    roundtrip(
        &mut s,
        b"AUTH nope\r\n",
        b"-WRONGPASS invalid username-password pair or user is disabled.\r\n",
    );
    // CVE-2021-32675: before AUTH, a big multibulk header is refused outright.
    let mut s2 = connect(&elsa_pw);
    s2.write_all(b"*100\r\n").unwrap();
    assert!(read_n(&mut s2, 5).starts_with(b"-ERR Protocol error"));
    let mut s3 = connect(&elsa_pw);
    s3.write_all(b"*2\r\n$4\r\nAUTH\r\n$100000\r\n").unwrap();
    assert!(read_n(&mut s3, 5).starts_with(b"-ERR Protocol error"));
    roundtrip(
        &mut s,
        b"AUTH s3cret\r\nSET k v\r\nGET k\r\n",
        b"+OK\r\n+OK\r\n$1\r\nv\r\n",
    );
}

#[test]
fn resp3_after_hello_3() {
    let elsa = Elsa::start(&[]);
    let mut s = connect(&elsa);
    s.write_all(b"HELLO 3\r\n").unwrap();
    let hello = read_n(&mut s, 1);
    assert!(
        hello.starts_with(b"%7\r\n"),
        "{}",
        String::from_utf8_lossy(&hello)
    );
    // Drain the rest of the map.
    std::thread::sleep(Duration::from_millis(100));
    s.set_nonblocking(true).unwrap();
    let mut sink = [0u8; 4096];
    let _ = s.read(&mut sink);
    s.set_nonblocking(false).unwrap();
    roundtrip(
        &mut s,
        b"GET missing\r\nCONFIG GET port\r\n",
        format!(
            "_\r\n%1\r\n$4\r\nport\r\n${}\r\n{}\r\n",
            elsa.port.to_string().len(),
            elsa.port
        )
        .as_bytes(),
    );
    roundtrip(
        &mut s,
        b"HELLO 4\r\n",
        b"-NOPROTO unsupported protocol version\r\n",
    );
}

#[test]
fn maxclients_refuses_with_an_error() {
    let elsa = Elsa::start(&["--maxclients", "2"]);
    // Two clients the server has taken (each answered PING). A refusal
    // here only means the start-up probe's connection was not closed yet.
    let mut held = Vec::new();
    for _ in 0..100 {
        if held.len() == 2 {
            break;
        }
        let mut s = connect(&elsa);
        s.write_all(b"PING\r\n").unwrap();
        if read_n(&mut s, 7) == b"+PONG\r\n" {
            held.push(s);
        } else {
            std::thread::sleep(Duration::from_millis(50));
        }
    }
    assert_eq!(held.len(), 2, "two clients should be taken");
    let mut c = connect(&elsa);
    let got = read_n(&mut c, 10);
    assert_eq!(got, b"-ERR max number of clients reached\r\n");
}

/// Connections are counted when accepted, so a burst of connects cannot
/// all slip past the limit before any is counted.
#[test]
fn a_burst_of_connects_never_passes_maxclients() {
    let elsa = Elsa::start(&["--maxclients", "3"]);
    let mut burst: Vec<TcpStream> = (0..30).map(|_| connect(&elsa)).collect();
    let mut taken = 0;
    for s in &mut burst {
        s.write_all(b"PING\r\n").unwrap();
        if read_n(s, 7) == b"+PONG\r\n" {
            taken += 1;
        }
    }
    assert!(taken <= 3, "{taken} of 30 clients taken with maxclients 3");
    assert!(taken >= 1, "no client taken at all");
}

#[test]
fn output_buffer_limit_disconnects_a_slow_reader() {
    let elsa = Elsa::start(&["--client-output-buffer-limit", "100000"]);
    let mut c = elsa.conn();
    let v = vec![b'v'; 1000];
    for i in 0..300 {
        let _: () = redis::cmd("SET")
            .arg(format!("key{i}"))
            .arg(&v)
            .query(&mut c)
            .unwrap();
    }
    // MGET of 300 KB in one reply exceeds 100 KB: the server drops the client.
    let mut s = connect(&elsa);
    let mut req = b"*301\r\n$4\r\nMGET\r\n".to_vec();
    for i in 0..300 {
        let k = format!("key{i}");
        req.extend_from_slice(format!("${}\r\n{}\r\n", k.len(), k).as_bytes());
    }
    // Many MGETs in one pipeline make the batch's output cross the limit.
    let mut all = Vec::new();
    for _ in 0..3 {
        all.extend_from_slice(&req);
    }
    s.write_all(&all).unwrap();
    let got = read_n(&mut s, 10_000_000);
    assert!(
        got.len() < 3 * 300 * 1000,
        "the server should have cut the client off"
    );
    // Others are unaffected.
    let n: i64 = redis::cmd("DBSIZE").query(&mut c).unwrap();
    assert_eq!(n, 300);
}

#[test]
fn sigterm_shuts_down_cleanly() {
    let mut elsa = Elsa::start(&[]);
    let status = elsa.stop();
    assert!(status.success(), "exit status {status:?}");
}

#[test]
fn a_pipeline_longer_than_one_batch_is_answered_in_full() {
    // 1100 requests in one write: more than one batch (1024). Every one is
    // answered without the client sending anything else.
    let elsa = Elsa::start(&["--workers", "2"]);
    let mut s = connect(&elsa);
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    s.write_all(&b"PING\r\n".repeat(1100)).unwrap();
    let got = read_n(&mut s, 1100 * 7);
    assert_eq!(got, b"+PONG\r\n".repeat(1100));
}

#[test]
fn a_client_that_writes_everything_before_reading_is_served() {
    // 500 000 GETs (12.5 MB, 55 MB of replies) written before a single
    // reply is read: the server must keep reading while its replies
    // queue, as Redis does, or both sides block on full socket buffers.
    let elsa = Elsa::start(&["--workers", "2"]);
    let mut c = elsa.conn();
    let value = vec![b'c'; 100];
    let _: () = redis::cmd("SET")
        .arg("canary")
        .arg(&value)
        .query(&mut c)
        .unwrap();
    let n = 500_000;
    let req = b"*2\r\n$3\r\nGET\r\n$6\r\ncanary\r\n".repeat(n);
    let mut s = connect(&elsa);
    s.set_write_timeout(Some(Duration::from_secs(30))).unwrap();
    let mut w = s.try_clone().unwrap();
    let writer = std::thread::spawn(move || w.write_all(&req).map(|_| ()));
    // Only once everything is written does this client start reading.
    writer
        .join()
        .unwrap()
        .expect("the server stopped reading requests");
    let reply = [&b"$100\r\n"[..], &value, b"\r\n"].concat();
    let got = read_n(&mut s, n * reply.len());
    assert_eq!(got.len(), n * reply.len());
    assert!(got.chunks(reply.len()).all(|r| r == reply));
}

#[test]
fn a_slow_reader_of_a_get_pipeline_is_cut_off_at_the_output_limit() {
    let elsa = Elsa::start(&["--client-output-buffer-limit", "1000000"]);
    let mut c = elsa.conn();
    let _: () = redis::cmd("SET")
        .arg("big")
        .arg(vec![b'v'; 100_000])
        .query(&mut c)
        .unwrap();
    // 300 GETs of 100 KB = 30 MB of replies, never read while queued.
    let mut s = connect(&elsa);
    s.write_all(&b"*2\r\n$3\r\nGET\r\n$3\r\nbig\r\n".repeat(300))
        .unwrap();
    std::thread::sleep(Duration::from_millis(500));
    let got = read_n(&mut s, 40_000_000);
    assert!(
        got.len() < 30 * 100_000,
        "the server should have cut the client off, sent {}",
        got.len()
    );
    let pong: String = redis::cmd("PING").query(&mut c).unwrap();
    assert_eq!(pong, "PONG");
}

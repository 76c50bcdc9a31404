//! Lists through real clients against real server processes: the blocking
//! commands (BLPOP BRPOP BLMPOP BLMOVE BRPOPLPUSH) — woken by a push from
//! another client of the node, or through another node of the region;
//! timing out; inside MULTI; pipelined behind other commands; a client
//! that leaves while blocked — and lists in transactions. (Every reply of
//! the non-blocking commands is compared with Redis's by the differential
//! test.)

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::thread;
use std::time::{Duration, Instant};

use common::cluster::Cluster;
use common::{keys_on_two_shards, Elsa};
use redis::{Commands, Value};

fn bulk(s: &str) -> Value {
    Value::BulkString(s.as_bytes().to_vec())
}

/// A blocked BLPOP is answered by the push of another client, with the
/// key it popped from; BRPOP on several keys takes the first that has an
/// element; BLMOVE and BRPOPLPUSH move what arrives.
#[test]
fn blocked_pops_wake_on_a_push_from_another_client() {
    let elsa = Elsa::start(&["--workers", "2"]);
    for (cmd, args, push, want) in [
        (
            "BLPOP",
            vec!["q1", "q2", "0"],
            ("q2", "a"),
            Value::Array(vec![bulk("q2"), bulk("a")]),
        ),
        (
            "BRPOP",
            vec!["q1", "q2", "5"],
            ("q1", "b"),
            Value::Array(vec![bulk("q1"), bulk("b")]),
        ),
        (
            "BLMPOP",
            vec!["0", "2", "q1", "q2", "RIGHT", "COUNT", "3"],
            ("q2", "c"),
            Value::Array(vec![bulk("q2"), Value::Array(vec![bulk("c")])]),
        ),
        (
            "BLMOVE",
            vec!["q1", "dst", "LEFT", "RIGHT", "0"],
            ("q1", "d"),
            bulk("d"),
        ),
        ("BRPOPLPUSH", vec!["q1", "dst", "0"], ("q1", "e"), bulk("e")),
    ] {
        let client = elsa.client();
        let blocked = thread::spawn(move || {
            let mut c = client.get_connection().unwrap();
            let started = Instant::now();
            let v: Value = redis::cmd(cmd).arg(&args).query(&mut c).unwrap();
            (v, started.elapsed())
        });
        thread::sleep(Duration::from_millis(300));
        let mut c = elsa.conn();
        let _: i64 = c.rpush(push.0, push.1).unwrap();
        let (v, waited) = blocked.join().unwrap();
        assert_eq!(v, want, "{cmd}");
        assert!(waited >= Duration::from_millis(250), "{cmd} did not block");
        let left: i64 = c.llen(push.0).unwrap();
        assert_eq!(left, 0, "{cmd}: the pushed element was popped");
    }
    let mut c = elsa.conn();
    let moved: Vec<String> = c.lrange("dst", 0, -1).unwrap();
    assert_eq!(moved, ["e", "d"]);
}

/// A timeout answers a null array once it passed, not before; in MULTI a
/// blocking command on an empty key answers at once, as Redis does
/// (BLMOVE a nil, the pops a null array).
#[test]
fn timeouts_and_transactions_answer_as_redis() {
    let elsa = Elsa::start(&["--workers", "2"]);
    let mut c = elsa.conn();
    let started = Instant::now();
    let v: Value = redis::cmd("BRPOP")
        .arg("none")
        .arg("0.3")
        .query(&mut c)
        .unwrap();
    assert_eq!(v, Value::Nil);
    assert!(started.elapsed() >= Duration::from_millis(300));
    let v: Value = redis::cmd("BLMOVE")
        .arg(&["none", "x", "LEFT", "LEFT", "0.05"])
        .query(&mut c)
        .unwrap();
    assert_eq!(v, Value::Nil);

    let started = Instant::now();
    let (a, b, d): (Value, Value, Value) = redis::pipe()
        .atomic()
        .cmd("BLPOP")
        .arg("none")
        .arg("0")
        .cmd("BLMOVE")
        .arg(&["none", "x", "LEFT", "LEFT", "0"])
        .cmd("RPUSH")
        .arg("full")
        .arg("v")
        .query(&mut c)
        .unwrap();
    assert_eq!((a, b), (Value::Nil, Value::Nil));
    assert_eq!(d, Value::Int(1));
    assert!(started.elapsed() < Duration::from_secs(5));
    // And one that finds something pops it in the transaction.
    let (p,): (Value,) = redis::pipe()
        .atomic()
        .cmd("BLPOP")
        .arg("full")
        .arg("0")
        .query(&mut c)
        .unwrap();
    assert_eq!(p, Value::Array(vec![bulk("full"), bulk("v")]));
    // Errors are answered before anything blocks.
    let e: redis::RedisResult<Value> = redis::cmd("BLPOP").arg("k").arg("-1").query(&mut c);
    assert!(e.unwrap_err().to_string().contains("timeout is negative"));
    let _: () = c.set("s", "v").unwrap();
    let e: redis::RedisResult<Value> = redis::cmd("BLPOP").arg("s").arg("0").query(&mut c);
    assert!(e.unwrap_err().to_string().contains("WRONGTYPE"));
}

/// Replies of commands pipelined before a blocking command arrive while
/// it waits; commands pipelined after it wait for it.
#[test]
fn a_pipeline_is_answered_up_to_the_blocked_command() {
    let elsa = Elsa::start(&["--workers", "2"]);
    let mut s = TcpStream::connect(("127.0.0.1", elsa.port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s.write_all(b"SET a 1\r\nBLPOP q 0\r\nGET a\r\n").unwrap();
    let mut got = Vec::new();
    let mut buf = [0u8; 256];
    while !got.ends_with(b"+OK\r\n") {
        let n = s.read(&mut buf).unwrap();
        assert!(n > 0, "connection closed");
        got.extend_from_slice(&buf[..n]);
    }
    assert_eq!(got, b"+OK\r\n", "only the reply before the blocked command");
    let mut c = elsa.conn();
    let _: i64 = c.lpush("q", "x").unwrap();
    let want = b"*2\r\n$1\r\nq\r\n$1\r\nx\r\n$1\r\n1\r\n";
    let mut rest = Vec::new();
    while rest.len() < want.len() {
        let n = s.read(&mut buf).unwrap();
        assert!(n > 0, "connection closed");
        rest.extend_from_slice(&buf[..n]);
    }
    assert_eq!(rest, want);
}

/// A client that leaves while blocked takes nothing: a later push stays.
/// A key that becomes another type while a client waits does not wake it.
#[test]
fn a_client_that_left_or_a_key_of_another_type_pops_nothing() {
    let elsa = Elsa::start(&["--workers", "2"]);
    {
        let mut s = TcpStream::connect(("127.0.0.1", elsa.port)).unwrap();
        s.write_all(b"BLPOP gone 0\r\n").unwrap();
        thread::sleep(Duration::from_millis(200));
    }
    thread::sleep(Duration::from_millis(300));
    let mut c = elsa.conn();
    let _: i64 = c.rpush("gone", "kept").unwrap();
    thread::sleep(Duration::from_millis(300));
    let kept: Vec<String> = c.lrange("gone", 0, -1).unwrap();
    assert_eq!(kept, ["kept"]);

    let client = elsa.client();
    let blocked = thread::spawn(move || {
        let mut c = client.get_connection().unwrap();
        let v: Value = redis::cmd("BLPOP")
            .arg("k")
            .arg("1.5")
            .query(&mut c)
            .unwrap();
        v
    });
    thread::sleep(Duration::from_millis(200));
    let _: () = c.set("k", "string").unwrap();
    assert_eq!(
        blocked.join().unwrap(),
        Value::Nil,
        "timed out, not WRONGTYPE"
    );
}

/// A client blocked on one node is woken by a push made through another
/// node of the region, and exactly one of two clients blocked on one key
/// (on two nodes) gets each element.
#[test]
fn a_push_through_another_node_of_the_region_wakes_a_blocked_client() {
    let cluster = Cluster::start(&["r1", "r1"], &["--replication-factor", "2"]);
    let (p0, p1) = (cluster.port(0), cluster.port(1));
    let blocked: Vec<_> = [p0, p1]
        .into_iter()
        .map(|port| {
            thread::spawn(move || {
                let client = redis::Client::open(format!("redis://127.0.0.1:{port}/")).unwrap();
                let mut c = client.get_connection().unwrap();
                let v: Value = redis::cmd("BLPOP")
                    .arg("work")
                    .arg("20")
                    .query(&mut c)
                    .unwrap();
                v
            })
        })
        .collect();
    thread::sleep(Duration::from_millis(500));
    let client = redis::Client::open(format!("redis://127.0.0.1:{p1}/")).unwrap();
    let mut c = client.get_connection().unwrap();
    let _: i64 = c.rpush("work", &["one", "two"]).unwrap();
    let mut got: Vec<Value> = blocked.into_iter().map(|t| t.join().unwrap()).collect();
    got.sort_by_key(|v| format!("{v:?}"));
    assert_eq!(
        got,
        vec![
            Value::Array(vec![bulk("work"), bulk("one")]),
            Value::Array(vec![bulk("work"), bulk("two")]),
        ]
    );
    let left: i64 = c.llen("work").unwrap();
    assert_eq!(left, 0);
}

/// Lists in transactions: MULTI/EXEC across shards reads its own writes
/// and stores all of them; BEGIN SI sees a snapshot and conflicts on a
/// concurrent push to a list it wrote.
#[test]
fn lists_in_transactions_read_their_own_writes_across_shards() {
    let elsa = Elsa::start(&["--workers", "2"]);
    let mut c = elsa.conn();
    let (a, b) = keys_on_two_shards(&mut c);
    let _: i64 = c.rpush(&a, &["1", "2", "3"]).unwrap();
    let (moved, range_a, range_b, popped): (String, Vec<String>, Vec<String>, Vec<String>) =
        redis::pipe()
            .atomic()
            .cmd("LMOVE")
            .arg(&a)
            .arg(&b)
            .arg("LEFT")
            .arg("RIGHT")
            .cmd("LRANGE")
            .arg(&a)
            .arg(0)
            .arg(-1)
            .cmd("LRANGE")
            .arg(&b)
            .arg(0)
            .arg(-1)
            .cmd("RPOP")
            .arg(&a)
            .arg(5)
            .query(&mut c)
            .unwrap();
    assert_eq!(moved, "1");
    assert_eq!(range_a, ["2", "3"]);
    assert_eq!(range_b, ["1"]);
    assert_eq!(popped, ["3", "2"]);
    let exists: i64 = c.exists(&a).unwrap();
    assert_eq!(exists, 0);
    let stored: Vec<String> = c.lrange(&b, 0, -1).unwrap();
    assert_eq!(stored, ["1"]);

    // BEGIN: the transaction's pushes and inserts are installed in order.
    let _: () = redis::cmd("BEGIN").arg("SI").query(&mut c).unwrap();
    let _: i64 = c.lpush(&b, "0").unwrap();
    let _: i64 = c.rpush(&b, &["2", "3"]).unwrap();
    let _: i64 = redis::cmd("LINSERT")
        .arg(&b)
        .arg("BEFORE")
        .arg("3")
        .arg("2.5")
        .query(&mut c)
        .unwrap();
    let _: () = c.lset(&b, 0, "zero").unwrap();
    let inside: Vec<String> = c.lrange(&b, 0, -1).unwrap();
    let mut other = elsa.conn();
    let outside: Vec<String> = other.lrange(&b, 0, -1).unwrap();
    assert_eq!(outside, ["1"], "not visible before COMMIT");
    let _: () = redis::cmd("COMMIT").query(&mut c).unwrap();
    let after: Vec<String> = other.lrange(&b, 0, -1).unwrap();
    assert_eq!(inside, ["zero", "1", "2", "2.5", "3"]);
    assert_eq!(after, inside);

    // A concurrent push to a list the transaction wrote: it conflicts.
    let _: () = redis::cmd("BEGIN").arg("SI").query(&mut c).unwrap();
    let _: i64 = c.rpush(&b, "mine").unwrap();
    let _: i64 = other.rpush(&b, "theirs").unwrap();
    let r: redis::RedisResult<()> = redis::cmd("COMMIT").query(&mut c);
    assert!(r.is_err(), "a write-write conflict on the list");
    let end: Vec<String> = other.lrange(&b, -1, -1).unwrap();
    assert_eq!(end, ["theirs"]);
}

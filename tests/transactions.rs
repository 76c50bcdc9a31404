//! Transaction semantics, deterministically, with two connections at a time:
//! what each isolation level lets through and what it stops.

mod common;
// The differential test's raw RESP client: replies exactly as sent.
#[allow(dead_code)]
#[path = "differential/resp.rs"]
mod resp;

use common::Elsa;
use redis::{Connection, RedisResult, Value};

fn q(c: &mut Connection, line: &str) -> RedisResult<Value> {
    let mut cmd = redis::cmd(line.split(' ').next().unwrap());
    for a in line.split(' ').skip(1) {
        cmd.arg(a);
    }
    cmd.query(c)
}

fn ok(c: &mut Connection, line: &str) -> Value {
    q(c, line).unwrap_or_else(|e| panic!("{line}: {e}"))
}

fn get(c: &mut Connection, key: &str) -> Option<String> {
    redis::cmd("GET").arg(key).query(c).unwrap()
}

fn is_conflict(r: RedisResult<Value>) -> bool {
    matches!(r, Err(ref e) if e.code() == Some("CONFLICT"))
}

#[test]
fn commit_is_all_or_nothing_and_reads_see_own_writes() {
    let elsa = Elsa::start(&["--workers", "4"]);
    let (mut a, mut b) = (elsa.conn(), elsa.conn());
    ok(&mut a, "BEGIN");
    for i in 0..20 {
        ok(&mut a, &format!("PUT k{i} v{i}"));
    }
    assert_eq!(
        get(&mut a, "k3").as_deref(),
        Some("v3"),
        "own write visible"
    );
    assert_eq!(get(&mut b, "k3"), None, "no dirty read");
    let ts = ok(&mut a, "COMMIT");
    assert!(
        matches!(ts, Value::Int(n) if n > 0),
        "COMMIT answers the commit ts: {ts:?}"
    );
    let last = ok(&mut a, "LASTCOMMIT");
    assert_eq!(last, ts);
    for i in 0..20 {
        assert_eq!(get(&mut b, &format!("k{i}")), Some(format!("v{i}")));
    }
    ok(&mut a, "BEGIN RR");
    ok(&mut a, "DELETE k1");
    ok(&mut a, "SET k2 changed");
    ok(&mut a, "ABORT");
    assert_eq!(
        get(&mut b, "k1").as_deref(),
        Some("v1"),
        "ABORT leaves nothing behind"
    );
    assert_eq!(get(&mut b, "k2").as_deref(), Some("v2"));
    assert!(q(&mut a, "COMMIT").is_err(), "COMMIT without BEGIN");
}

#[test]
fn rr_and_si_repeat_reads_rc_does_not() {
    let elsa = Elsa::start(&["--workers", "2"]);
    let (mut a, mut b) = (elsa.conn(), elsa.conn());
    ok(&mut b, "SET x 1");
    for level in ["RR", "SI"] {
        ok(&mut a, &format!("BEGIN {level}"));
        assert_eq!(get(&mut a, "x").as_deref(), Some("1"));
        ok(&mut b, "SET x 2");
        assert_eq!(
            get(&mut a, "x").as_deref(),
            Some("1"),
            "{level}: repeatable read"
        );
        if level == "RR" {
            // The read is stale now: committing must fail validation.
            assert!(
                is_conflict(q(&mut a, "COMMIT")),
                "{level}: stale read set must not commit"
            );
        } else {
            // SI read x from its snapshot and wrote nothing: it takes
            // effect at its start, where x was 1, and cannot conflict.
            ok(&mut a, "COMMIT");
        }
        ok(&mut b, "SET x 1");
    }
    // An SI transaction that read a key changed since its snapshot and
    // then writes is validated as before: it must not commit.
    ok(&mut a, "BEGIN SI");
    assert_eq!(get(&mut a, "x").as_deref(), Some("1"));
    ok(&mut b, "SET x 2");
    ok(&mut a, "SET y from-x-1");
    assert!(is_conflict(q(&mut a, "COMMIT")), "SI: read set changed");
    assert_eq!(get(&mut b, "y"), None);
    ok(&mut b, "SET x 1");
    ok(&mut a, "BEGIN RC");
    assert_eq!(get(&mut a, "x").as_deref(), Some("1"));
    ok(&mut b, "SET x 2");
    assert_eq!(
        get(&mut a, "x").as_deref(),
        Some("2"),
        "RC reads the latest commit"
    );
    ok(&mut a, "COMMIT");
}

#[test]
fn si_reads_its_snapshot_so_read_only_transactions_never_abort() {
    let elsa = Elsa::start(&["--workers", "2"]);
    let (mut a, mut b) = (elsa.conn(), elsa.conn());
    ok(&mut b, "SET from 100");
    ok(&mut b, "SET to 0");
    ok(&mut b, "SET gone here");
    ok(&mut a, "BEGIN SI");
    // Everything below commits after the snapshot: a sees none of it,
    // whichever key it reads first.
    ok(&mut b, "MSET from 60 to 40");
    ok(&mut b, "SET born now");
    ok(&mut b, "DEL gone");
    assert_eq!(get(&mut a, "to").as_deref(), Some("0"));
    assert_eq!(get(&mut a, "from").as_deref(), Some("100"));
    assert_eq!(get(&mut a, "born"), None, "created after the snapshot");
    assert_eq!(get(&mut a, "gone").as_deref(), Some("here"));
    ok(&mut b, "MSET from 10 to 90");
    assert_eq!(get(&mut a, "to").as_deref(), Some("0"), "repeatable");
    let ts = ok(&mut a, "COMMIT");
    assert!(matches!(ts, Value::Int(n) if n > 0), "{ts:?}");
    assert_eq!(get(&mut a, "from").as_deref(), Some("10"));

    // Under a stream of transfers, every read-only SI transaction commits
    // and sees the accounts' total unchanged.
    let accounts = 8;
    for i in 0..accounts {
        ok(&mut b, &format!("SET acct{i} 100"));
    }
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let writer = {
        let stop = stop.clone();
        let mut w = elsa.conn();
        std::thread::spawn(move || {
            let mut n = 0u64;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let (x, y) = (n % accounts, (n * 7 + 3) % accounts);
                n += 1;
                if x == y {
                    continue;
                }
                let _ = redis::pipe()
                    .atomic()
                    .cmd("DECRBY")
                    .arg(format!("acct{x}"))
                    .arg(1)
                    .cmd("INCRBY")
                    .arg(format!("acct{y}"))
                    .arg(1)
                    .query::<Value>(&mut w);
            }
            n
        })
    };
    for round in 0..300 {
        ok(&mut a, "BEGIN SI");
        let mut sum = 0i64;
        for i in 0..accounts {
            sum += get(&mut a, &format!("acct{i}"))
                .expect("account")
                .parse::<i64>()
                .expect("number");
        }
        let r = q(&mut a, "COMMIT");
        assert!(
            r.is_ok(),
            "round {round}: a read-only SI transaction aborted: {r:?}"
        );
        assert_eq!(
            sum,
            100 * accounts as i64,
            "round {round}: not one snapshot"
        );
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let transfers = writer.join().expect("writer");
    assert!(
        transfers > 100,
        "the readers overlapped the transfers ({transfers})"
    );
}

#[test]
fn lost_update_is_prevented_at_rr_and_si() {
    let elsa = Elsa::start(&["--workers", "2"]);
    let (mut a, mut b) = (elsa.conn(), elsa.conn());
    for level in ["RR", "SI"] {
        ok(&mut a, "SET n 10");
        ok(&mut a, &format!("BEGIN {level}"));
        ok(&mut b, &format!("BEGIN {level}"));
        assert_eq!(get(&mut a, "n").as_deref(), Some("10"));
        assert_eq!(get(&mut b, "n").as_deref(), Some("10"));
        ok(&mut a, "SET n 11");
        ok(&mut b, "SET n 12");
        ok(&mut a, "COMMIT");
        let r = q(&mut b, "COMMIT");
        assert!(is_conflict(r), "{level}: second committer must lose");
        assert_eq!(get(&mut a, "n").as_deref(), Some("11"));
    }
}

#[test]
fn read_modify_write_commands_never_lose_updates_even_at_rc() {
    let elsa = Elsa::start(&["--workers", "2"]);
    let (mut a, mut b) = (elsa.conn(), elsa.conn());
    ok(&mut a, "BEGIN RC");
    ok(&mut b, "BEGIN RC");
    ok(&mut a, "INCRBY c 1");
    ok(&mut b, "INCRBY c 1");
    ok(&mut b, "APPEND s b");
    ok(&mut b, "COMMIT");
    assert!(
        is_conflict(q(&mut a, "COMMIT")),
        "a's INCRBY read a value b changed"
    );
    assert_eq!(get(&mut a, "c").as_deref(), Some("1"));
    // A plain GET then SET in separate commands is RC's lost update: allowed.
    ok(&mut a, "BEGIN RC");
    assert_eq!(get(&mut a, "c").as_deref(), Some("1"));
    ok(&mut b, "SET c 5");
    ok(&mut a, "SET c 2");
    ok(&mut a, "COMMIT");
    assert_eq!(get(&mut b, "c").as_deref(), Some("2"));
}

#[test]
fn si_first_committer_wins_on_blind_writes_rr_does_not_check() {
    let elsa = Elsa::start(&["--workers", "2"]);
    let (mut a, mut b) = (elsa.conn(), elsa.conn());
    ok(&mut a, "BEGIN SI");
    ok(&mut b, "SET w other");
    ok(&mut a, "SET w mine");
    let r = q(&mut a, "COMMIT");
    assert!(
        is_conflict(r),
        "SI: w was committed after this transaction started"
    );
    assert_eq!(get(&mut b, "w").as_deref(), Some("other"));
    ok(&mut a, "BEGIN RR");
    ok(&mut b, "SET w other2");
    ok(&mut a, "SET w mine");
    ok(&mut a, "COMMIT");
    assert_eq!(
        get(&mut b, "w").as_deref(),
        Some("mine"),
        "RR validates reads only"
    );
}

#[test]
fn conflict_names_the_key() {
    let elsa = Elsa::start(&[]);
    let (mut a, mut b) = (elsa.conn(), elsa.conn());
    ok(&mut a, "BEGIN SI");
    ok(&mut a, "GET hot");
    ok(&mut b, "SET hot 1");
    ok(&mut a, "SET hot 2");
    let e = q(&mut a, "COMMIT").unwrap_err();
    assert_eq!(e.code(), Some("CONFLICT"));
    assert!(e.to_string().contains("hot"), "{e}");
    assert!(
        q(&mut a, "ABORT").is_err(),
        "the conflict already ended the transaction"
    );
}

#[test]
fn multi_exec_watch_have_redis_semantics() {
    let elsa = Elsa::start(&["--workers", "3"]);
    let (mut a, mut b) = (elsa.conn(), elsa.conn());
    ok(&mut a, "MULTI");
    for i in 0..10 {
        assert_eq!(
            ok(&mut a, &format!("INCR c{i}")),
            Value::SimpleString("QUEUED".into())
        );
    }
    let r = ok(&mut a, "EXEC");
    let Value::Array(items) = r else {
        panic!("EXEC answers an array")
    };
    assert_eq!(items, vec![Value::Int(1); 10]);
    // A command failing at EXEC answers its error in place; the rest run.
    // (Raw bytes: the redis crate turns such an array into one error.)
    {
        use std::io::{Read, Write};
        let mut s = std::net::TcpStream::connect(("127.0.0.1", elsa.port)).unwrap();
        s.write_all(b"MULTI\r\nSET s notanumber\r\nINCR s\r\nSET t 1\r\nEXEC\r\n")
            .unwrap();
        let want: &[u8] = b"+OK\r\n+QUEUED\r\n+QUEUED\r\n+QUEUED\r\n*3\r\n+OK\r\n-ERR value is not an integer or out of range\r\n+OK\r\n";
        let mut got = vec![0u8; want.len()];
        s.read_exact(&mut got).unwrap();
        assert_eq!(String::from_utf8_lossy(&got), String::from_utf8_lossy(want));
    }
    // WATCH: a change by another client makes EXEC answer nil.
    ok(&mut a, "WATCH c1 c2");
    ok(&mut b, "INCR c2");
    ok(&mut a, "MULTI");
    ok(&mut a, "SET c1 100");
    assert_eq!(ok(&mut a, "EXEC"), Value::Nil);
    assert_eq!(get(&mut b, "c1").as_deref(), Some("1"));
    // Unchanged watch: EXEC runs.
    ok(&mut a, "WATCH c1");
    ok(&mut a, "MULTI");
    ok(&mut a, "SET c1 100");
    assert!(matches!(ok(&mut a, "EXEC"), Value::Array(_)));
    assert_eq!(get(&mut b, "c1").as_deref(), Some("100"));
    // Queue-time errors abort the whole EXEC.
    ok(&mut a, "MULTI");
    assert!(q(&mut a, "GET").is_err());
    ok(&mut a, "SET z 1");
    let e = q(&mut a, "EXEC").unwrap_err();
    assert_eq!(e.code(), Some("EXECABORT"));
    assert_eq!(get(&mut a, "z"), None);
    ok(&mut a, "MULTI");
    ok(&mut a, "SET z 1");
    ok(&mut a, "DISCARD");
    assert_eq!(get(&mut a, "z"), None);
    assert!(q(&mut a, "EXEC").is_err());
    assert!(
        q(&mut a, "MULTI").and_then(|_| q(&mut a, "MULTI")).is_err(),
        "nested MULTI"
    );
}

#[test]
fn mset_is_atomic_to_concurrent_readers() {
    // A reader doing MGET across shards must never see half of an MSET.
    let elsa = Elsa::start(&["--workers", "4"]);
    let keys: Vec<String> = (0..16).map(|i| format!("atom{i}")).collect();
    let mut w = elsa.conn();
    let url = elsa.url();
    let writer_keys = keys.clone();
    let writer = std::thread::spawn(move || {
        for round in 0..300 {
            let mut cmd = redis::cmd("MSET");
            for k in &writer_keys {
                cmd.arg(k).arg(round);
            }
            let _: () = cmd.query(&mut w).unwrap();
        }
    });
    let mut r = redis::Client::open(url).unwrap().get_connection().unwrap();
    let mut reads = 0;
    while !writer.is_finished() || reads < 10 {
        let vals: Vec<Option<String>> = redis::cmd("MGET").arg(&keys).query(&mut r).unwrap();
        let first = &vals[0];
        assert!(vals.iter().all(|v| v == first), "torn MGET: {vals:?}");
        reads += 1;
    }
    writer.join().unwrap();
}

#[test]
fn exec_runs_queued_commands_in_order_admin_ones_included() {
    // Issue 12, item 5: FLUSHALL inside MULTI used to run after the data
    // commands, deleting what they had just written.
    let elsa = Elsa::start(&["--workers", "2"]);
    let mut c = elsa.conn();
    ok(&mut c, "SET old 1");
    ok(&mut c, "MULTI");
    for line in [
        "FLUSHALL", "SET a 1", "DBSIZE", "SET b 2", "GET old", "PING",
    ] {
        assert_eq!(
            ok(&mut c, line),
            Value::SimpleString("QUEUED".into()),
            "{line}"
        );
    }
    let replies = ok(&mut c, "EXEC");
    assert_eq!(
        replies,
        Value::Array(vec![
            Value::Okay,
            Value::Okay,
            Value::Int(1),
            Value::Okay,
            Value::Nil,
            Value::SimpleString("PONG".into()),
        ])
    );
    assert_eq!(get(&mut c, "a").as_deref(), Some("1"));
    assert_eq!(get(&mut c, "b").as_deref(), Some("2"));
    assert_eq!(get(&mut c, "old"), None);
}

#[test]
fn a_key_that_expires_after_watch_counts_as_changed() {
    // Issue 12, item 6 (Redis >= 6.0.9 behaves so).
    let elsa = Elsa::start(&["--workers", "2"]);
    let mut c = elsa.conn();
    ok(&mut c, "SET k v PX 100");
    ok(&mut c, "WATCH k");
    std::thread::sleep(std::time::Duration::from_millis(150));
    ok(&mut c, "MULTI");
    ok(&mut c, "SET k 2");
    assert_eq!(ok(&mut c, "EXEC"), Value::Nil, "k expired after WATCH");
    // A missing key written with a TTL by another client, then expired and
    // collected, still counts as changed.
    let mut other = elsa.conn();
    ok(&mut c, "WATCH w");
    ok(&mut other, "SET w v PX 50");
    std::thread::sleep(std::time::Duration::from_millis(1500));
    assert_eq!(get(&mut c, "w"), None);
    ok(&mut c, "MULTI");
    ok(&mut c, "SET w 2");
    assert_eq!(ok(&mut c, "EXEC"), Value::Nil, "w was written since WATCH");
}

#[test]
fn a_key_read_live_that_expires_before_commit_is_a_conflict() {
    // Issue 12, item 6: RR read 5, then nil, and committed.
    let elsa = Elsa::start(&["--workers", "2"]);
    for level in ["RR", "SI"] {
        let mut c = elsa.conn();
        ok(&mut c, "SET k 5 PX 200");
        ok(&mut c, &format!("BEGIN {level}"));
        assert_eq!(get(&mut c, "k").as_deref(), Some("5"));
        std::thread::sleep(std::time::Duration::from_millis(250));
        ok(&mut c, "SET other 1");
        assert!(
            is_conflict(q(&mut c, "COMMIT")),
            "{level}: k expired between the read and the commit"
        );
        // The same for a hash and a counter (typed keys), read-only and
        // read-write: at COMMIT they no longer show a TTL, so the check
        // is the one decided at the read.
        for write in [false, true] {
            ok(&mut c, "DEL h n");
            ok(&mut c, "HSET h f v");
            ok(&mut c, "PEXPIRE h 200");
            ok(&mut c, "INCRBY n 7");
            ok(&mut c, "PEXPIRE n 200");
            ok(&mut c, &format!("BEGIN {level}"));
            assert_eq!(
                redis::cmd("HGET")
                    .arg("h")
                    .arg("f")
                    .query::<Option<String>>(&mut c)
                    .unwrap()
                    .as_deref(),
                Some("v")
            );
            assert_eq!(get(&mut c, "n").as_deref(), Some("7"));
            std::thread::sleep(std::time::Duration::from_millis(250));
            if write {
                ok(&mut c, "SET other 2");
            }
            assert!(
                is_conflict(q(&mut c, "COMMIT")),
                "{level} (writes: {write}): h and n expired between the read and the commit"
            );
        }
    }
}

#[test]
fn msetnx_is_validated_at_every_level() {
    // Issue 12, item 7: two MSETNX in BEGIN RC both answered 1 and both
    // committed.
    let elsa = Elsa::start(&["--workers", "2"]);
    for level in ["RC", "RR", "SI"] {
        let (mut a, mut b) = (elsa.conn(), elsa.conn());
        let (x, y) = (format!("{level}:x"), format!("{level}:y"));
        ok(&mut a, &format!("BEGIN {level}"));
        ok(&mut b, &format!("BEGIN {level}"));
        assert_eq!(ok(&mut a, &format!("MSETNX {x} a {y} a")), Value::Int(1));
        assert_eq!(ok(&mut b, &format!("MSETNX {x} b {y} b")), Value::Int(1));
        ok(&mut a, "COMMIT");
        assert!(
            is_conflict(q(&mut b, "COMMIT")),
            "{level}: the second MSETNX saw the keys absent, which no longer held"
        );
        assert_eq!(get(&mut a, &x).as_deref(), Some("a"));
        assert_eq!(get(&mut a, &y).as_deref(), Some("a"));
    }
}

fn expect(c: &mut resp::Conn, script: &[(&str, &str)]) {
    c.expect(script)
}

fn raw(elsa: &Elsa) -> resp::Conn {
    resp::Conn::connect(elsa.port).expect("connect")
}

#[test]
fn multi_queues_the_commands_redis_queues() {
    let elsa = Elsa::start(&["--workers", "2"]);
    let mut c = raw(&elsa);
    expect(
        &mut c,
        &[
            ("SET a 1", "+OK"),
            ("MULTI", "+OK"),
            ("MSETNX a 2 b 3", "+QUEUED"),
            ("MSETNX c 1 d 2", "+QUEUED"),
            ("GET c", "+QUEUED"),
            ("MSETNX c 1 d", "+QUEUED"),
            ("UNWATCH", "+QUEUED"),
            ("AUTH x", "+QUEUED"),
            ("AUTH default x", "+QUEUED"),
            ("CLIENT SETNAME t", "+QUEUED"),
            ("CLIENT GETNAME", "+QUEUED"),
            ("CONFIG RESETSTAT", "+QUEUED"),
            (
                "EXEC",
                "[:0, :1, \"1\", -ERR wrong number of arguments for 'msetnx' command, +OK, \
                 -ERR AUTH <password> called without any password configured for the default user. \
                 Are you sure your configuration is correct?, +OK, +OK, \"t\", +OK]",
            ),
        ],
    );
    // Replies that describe the server: compared by type.
    expect(&mut c, &[("MULTI", "+OK")]);
    for q in ["HELLO 2", "COMMAND COUNT", "LASTSAVE", "CLIENT ID"] {
        assert_eq!(c.call_line(q), "+QUEUED", "{q}");
    }
    let r = c.call(&[b"EXEC"]);
    let resp::Reply::Array(items) = &r else {
        panic!("EXEC: {r}");
    };
    let kinds: Vec<&str> = items.iter().map(|i| i.kind()).collect();
    assert_eq!(kinds, ["array", "int", "int", "int"], "{r}");
}

#[test]
fn multi_refuses_what_redis_refuses_with_its_texts() {
    let elsa = Elsa::start(&[]);
    let mut c = raw(&elsa);
    expect(
        &mut c,
        &[
            ("MULTI", "+OK"),
            ("SAVE", "-ERR Command not allowed inside a transaction"),
            (
                "EXEC",
                "-EXECABORT Transaction discarded because of previous errors.",
            ),
            ("MULTI", "+OK"),
            (
                "CONFIG FOO",
                "-ERR unknown subcommand 'FOO'. Try CONFIG HELP.",
            ),
            (
                "EXEC",
                "-EXECABORT Transaction discarded because of previous errors.",
            ),
            ("MULTI", "+OK"),
            (
                "CLIENT ID x",
                "-ERR wrong number of arguments for 'client|id' command",
            ),
            (
                "EXEC",
                "-EXECABORT Transaction discarded because of previous errors.",
            ),
            // Refused without failing the transaction.
            ("MULTI", "+OK"),
            ("WATCH k", "-ERR WATCH inside MULTI is not allowed"),
            ("MULTI", "-ERR MULTI calls can not be nested"),
            ("SET a 2", "+QUEUED"),
            ("EXEC", "[+OK]"),
        ],
    );
}

#[test]
fn a_refused_exec_discards_the_transaction() {
    let elsa = Elsa::start(&[]);
    let mut c = raw(&elsa);
    expect(
        &mut c,
        &[
            ("MULTI", "+OK"),
            ("SET a 1", "+QUEUED"),
            (
                "EXEC x",
                "-EXECABORT Transaction discarded because of: wrong number of arguments for 'exec' command",
            ),
            ("EXEC", "-ERR EXEC without MULTI"),
            ("GET a", "(nil bulk $-1)"),
            // Outside MULTI too, and it drops the watches.
            ("WATCH k", "+OK"),
            ("SET k 1", "+OK"),
            (
                "EXEC x",
                "-EXECABORT Transaction discarded because of: wrong number of arguments for 'exec' command",
            ),
            ("MULTI", "+OK"),
            ("EXEC", "[]"),
            // DISCARD or MULTI with arguments only fail the transaction.
            ("MULTI", "+OK"),
            (
                "DISCARD x",
                "-ERR wrong number of arguments for 'discard' command",
            ),
            (
                "EXEC",
                "-EXECABORT Transaction discarded because of previous errors.",
            ),
        ],
    );
}

#[test]
fn exec_before_auth_is_aborted_as_in_redis() {
    let elsa = Elsa::start_with_password("pw");
    let mut c = raw(&elsa);
    expect(
        &mut c,
        &[(
            "EXEC",
            "-EXECABORT Transaction discarded because of: NOAUTH Authentication required.",
        )],
    );
}

#[test]
fn string_and_key_commands_run_in_multi_exec() {
    // Every reply below is redis-server 7.0's for the same script.
    let elsa = Elsa::start(&["--workers", "2"]);
    let mut c = raw(&elsa);
    expect(
        &mut c,
        &[
            ("SET s hello", "+OK"),
            ("WATCH s", "+OK"),
            ("MULTI", "+OK"),
            ("GETEX s EX 100", "+QUEUED"),
            ("TTL s", "+QUEUED"),
            ("GETRANGE s 1 3", "+QUEUED"),
            ("SETRANGE s 5 !!", "+QUEUED"),
            ("GET s", "+QUEUED"),
            ("INCRBYFLOAT f 1.5", "+QUEUED"),
            ("SETBIT b 1 1", "+QUEUED"),
            ("GETBIT b 1", "+QUEUED"),
            ("BITCOUNT b", "+QUEUED"),
            ("BITPOS b 1", "+QUEUED"),
            ("TOUCH s f nokey", "+QUEUED"),
            ("EXPIRETIME nokey", "+QUEUED"),
            ("RENAME s s2", "+QUEUED"),
            ("GET s", "+QUEUED"),
            ("GET s2", "+QUEUED"),
            ("TTL s2", "+QUEUED"),
            ("COPY s2 s3", "+QUEUED"),
            ("OBJECT ENCODING f", "+QUEUED"),
            ("RENAMENX f s3", "+QUEUED"),
            ("RENAME nokey x", "+QUEUED"),
            ("GETEX s3 PERSIST", "+QUEUED"),
            ("TTL s3", "+QUEUED"),
            (
                "EXEC",
                "[\"hello\", :100, \"ell\", :7, \"hello!!\", \"1.5\", :0, :1, :1, :1, :2, :-2, \
                 +OK, (nil bulk $-1), \"hello!!\", :100, :1, \"embstr\", :0, \
                 -ERR no such key, \"hello!!\", :-1]",
            ),
        ],
    );
    // A RENAME by someone else changes both keys for a WATCH.
    let mut other = raw(&elsa);
    for watched in ["s2", "moved"] {
        expect(&mut c, &[(&format!("WATCH {watched}"), "+OK")]);
        let (from, to) = if watched == "s2" {
            ("s2", "moved")
        } else {
            ("moved", "s2")
        };
        expect(&mut other, &[(&format!("RENAME {from} {to}"), "+OK")]);
        expect(
            &mut c,
            &[
                ("MULTI", "+OK"),
                ("GET s2", "+QUEUED"),
                ("EXEC", "(nil array *-1)"),
            ],
        );
    }
}

#[test]
fn a_transaction_reads_its_own_renames_copies_and_edits() {
    let elsa = Elsa::start(&["--workers", "2"]);
    let mut setup = elsa.conn();
    let (src, dst) = common::keys_on_two_shards(&mut setup);
    let mut a = raw(&elsa);
    let mut b = raw(&elsa);
    let line = |s: &str| s.replace("SRC", &src).replace("DST", &dst);
    let script = [
        ("BEGIN SI", "+OK"),
        ("SET SRC v", "+OK"),
        ("GETEX SRC EX 100", "\"v\""),
        ("TTL SRC", ":100"),
        ("RENAME SRC DST", "+OK"),
        ("GET SRC", "(nil bulk $-1)"),
        ("GET DST", "\"v\""),
        ("TTL DST", ":100"),
        ("COPY DST cp", ":1"),
        ("PERSIST cp", ":1"),
        ("SETRANGE cp 1 xy", ":3"),
        ("GETRANGE cp 1 -1", "\"xy\""),
        ("INCRBYFLOAT f 0.5", "\"0.5\""),
        ("INCRBYFLOAT f 0.25", "\"0.75\""),
        ("SETBIT bits 3 1", ":0"),
        ("GETBIT bits 3", ":1"),
        ("BITCOUNT bits", ":1"),
        ("BITPOS bits 1", ":3"),
        ("TOUCH DST cp SRC", ":2"),
        ("RENAMENX cp DST", ":0"),
        ("OBJECT ENCODING f", "\"embstr\""),
        ("OBJECT ENCODING bits", "\"embstr\""),
    ];
    for (req, want) in script {
        assert_eq!(a.call_line(&line(req)), want, "{}", line(req));
    }
    assert!(matches!(
        a.call_line(&line("EXPIRETIME DST")).strip_prefix(':').map(str::parse::<i64>),
        Some(Ok(t)) if t > 1_700_000_000
    ));
    assert!(matches!(
        a.call_line("MEMORY USAGE cp").strip_prefix(':').map(str::parse::<i64>),
        Some(Ok(n)) if n > 0
    ));
    // Nobody else sees any of it before COMMIT.
    assert_eq!(b.call_line(&line("GET DST")), "(nil bulk $-1)");
    assert_eq!(b.call_line("EXISTS cp f bits"), ":0");
    let commit = a.call_line("COMMIT");
    assert!(commit.starts_with(':'), "COMMIT answered {commit}");
    for (req, want) in [
        ("GET SRC", "(nil bulk $-1)"),
        ("GET DST", "\"v\""),
        ("TTL DST", ":100"),
        ("GET cp", "\"vxy\""),
        ("TTL cp", ":-1"),
        ("GET f", "\"0.75\""),
        ("GETBIT bits 3", ":1"),
    ] {
        assert_eq!(b.call_line(&line(req)), want, "{}", line(req));
    }
}

#[test]
fn rename_and_copy_validate_what_they_read_at_every_level() {
    // RENAME reads its source and writes it elsewhere: a change to the
    // source after the read must fail the commit, even at RC, or the
    // rename would delete a value it never moved (a lost update).
    let elsa = Elsa::start(&["--workers", "2"]);
    let (mut a, mut b) = (elsa.conn(), elsa.conn());
    let (x, y) = common::keys_on_two_shards(&mut a);
    for level in ["RC", "RR", "SI"] {
        for cmd in ["RENAME", "COPY"] {
            ok(&mut a, &format!("SET {x} old"));
            ok(&mut a, &format!("DEL {y}"));
            ok(&mut a, &format!("BEGIN {level}"));
            ok(&mut a, &format!("{cmd} {x} {y}"));
            ok(&mut b, &format!("SET {x} new"));
            assert!(
                is_conflict(q(&mut a, "COMMIT")),
                "{level} {cmd}: the source changed after it was read"
            );
            assert_eq!(get(&mut b, &x).as_deref(), Some("new"));
            assert_eq!(get(&mut b, &y), None, "{level} {cmd}: nothing written");
        }
    }
}

#[test]
fn hashes_and_sets_in_transactions_read_their_own_writes_and_commit_whole() {
    let elsa = Elsa::start(&["--workers", "2"]);
    let mut setup = elsa.conn();
    let (h, s) = common::keys_on_two_shards(&mut setup);
    for k in [&h, &s] {
        let _: () = redis::cmd("DEL").arg(k).query(&mut setup).unwrap();
    }
    let mut a = raw(&elsa);
    let mut b = raw(&elsa);
    let line = |x: &str| x.replace("{h}", &h).replace("{s}", &s);
    for level in ["RC", "RR", "SI"] {
        let script = [
            (format!("BEGIN {level}"), "+OK".to_string()),
            (line("HSET {h} f 1 g 2"), ":2".into()),
            (line("HINCRBY {h} f 10"), ":11".into()),
            (line("HGET {h} f"), "\"11\"".into()),
            (line("HDEL {h} g"), ":1".into()),
            (line("HLEN {h}"), ":1".into()),
            (line("SADD {s} x y"), ":2".into()),
            (line("SREM {s} x"), ":1".into()),
            (line("SADD {s} x"), ":1".into()),
            (line("SCARD {s}"), ":2".into()),
            (line("SISMEMBER {s} x"), ":1".into()),
        ];
        for (req, want) in &script {
            assert_eq!(a.call_line(req), *want, "{level}: {req}");
        }
        // Nobody else sees any of it before COMMIT.
        assert_eq!(b.call_line(&line("HLEN {h}")), ":0", "{level}");
        assert_eq!(b.call_line(&line("SCARD {s}")), ":0", "{level}");
        let commit = a.call_line("COMMIT");
        assert!(commit.starts_with(':'), "{level}: COMMIT answered {commit}");
        assert_eq!(b.call_line(&line("HGET {h} f")), "\"11\"", "{level}");
        assert_eq!(b.call_line(&line("HEXISTS {h} g")), ":0", "{level}");
        assert_eq!(b.call_line(&line("SCARD {s}")), ":2", "{level}");
        assert_eq!(b.call_line(&line("SISMEMBER {s} x")), ":1", "{level}");
        assert_eq!(b.call_line(&line("DEL {h} {s}")), ":2");
    }
    // MULTI/EXEC across the two shards, with WATCH.
    assert_eq!(a.call_line(&line("WATCH {h}")), "+OK");
    for q in [
        "MULTI",
        &line("HSET {h} f 5"),
        &line("SADD {s} m"),
        &line("HINCRBY {h} f 1"),
    ] {
        let _ = a.call_line(q);
    }
    assert_eq!(a.call_line("EXEC"), "[:1, :1, :6]");
    // A change to the watched hash by someone else fails the next EXEC.
    assert_eq!(a.call_line(&line("WATCH {h}")), "+OK");
    assert_eq!(b.call_line(&line("HSET {h} other 1")), ":1");
    for q in ["MULTI", &line("SADD {s} n")] {
        let _ = a.call_line(q);
    }
    assert_eq!(a.call_line("EXEC"), "(nil array *-1)");
    assert_eq!(b.call_line(&line("SISMEMBER {s} n")), ":0");
}

#[test]
fn smove_across_shards_is_never_seen_half_done() {
    let elsa = Elsa::start(&["--workers", "2"]);
    let mut setup = elsa.conn();
    let (x, y) = common::keys_on_two_shards(&mut setup);
    for k in [&x, &y] {
        let _: () = redis::cmd("DEL").arg(k).query(&mut setup).unwrap();
    }
    let _: i64 = redis::cmd("SADD")
        .arg(&x)
        .arg("m")
        .query(&mut setup)
        .unwrap();
    let stop = std::sync::atomic::AtomicBool::new(false);
    std::thread::scope(|s| {
        s.spawn(|| {
            let mut c = elsa.conn();
            for i in 0..300 {
                let (from, to) = if i % 2 == 0 { (&x, &y) } else { (&y, &x) };
                let moved: i64 = redis::cmd("SMOVE")
                    .arg(from)
                    .arg(to)
                    .arg("m")
                    .query(&mut c)
                    .unwrap();
                assert_eq!(moved, 1, "the member is always in exactly one set");
            }
            stop.store(true, std::sync::atomic::Ordering::Relaxed);
        });
        let mut r = elsa.conn();
        let mut reads = 0;
        while !stop.load(std::sync::atomic::Ordering::Relaxed) {
            let (a, b): (i64, i64) = redis::pipe()
                .atomic()
                .cmd("SISMEMBER")
                .arg(&x)
                .arg("m")
                .cmd("SISMEMBER")
                .arg(&y)
                .arg("m")
                .query(&mut r)
                .unwrap();
            assert_eq!(a + b, 1, "read {reads}: the member in both sets or in none");
            reads += 1;
        }
        assert!(reads > 0);
    });
}

#[test]
fn sorted_sets_in_transactions_read_their_own_writes_and_store_across_shards() {
    let elsa = Elsa::start(&["--workers", "2"]);
    let mut setup = elsa.conn();
    let (z, d) = common::keys_on_two_shards(&mut setup);
    for k in [&z, &d] {
        let _: () = redis::cmd("DEL").arg(k).query(&mut setup).unwrap();
    }
    let mut a = raw(&elsa);
    let mut b = raw(&elsa);
    let line = |x: &str| x.replace("{z}", &z).replace("{d}", &d);
    for level in ["RC", "RR", "SI"] {
        let script = [
            (format!("BEGIN {level}"), "+OK".to_string()),
            (line("ZADD {z} 1 a 2 b 3 c"), ":3".into()),
            (line("ZINCRBY {z} 10 a"), "\"11\"".into()),
            (line("ZRANGE {z} 0 -1"), "[\"b\", \"c\", \"a\"]".into()),
            (line("ZREM {z} c"), ":1".into()),
            (line("ZCARD {z}"), ":2".into()),
            (line("ZRANK {z} a"), ":1".into()),
            (line("ZUNIONSTORE {d} 1 {z} WEIGHTS 2"), ":2".into()),
            (line("ZSCORE {d} a"), "\"22\"".into()),
        ];
        for (req, want) in &script {
            assert_eq!(a.call_line(req), *want, "{level}: {req}");
        }
        // Nobody else sees any of it before COMMIT.
        assert_eq!(b.call_line(&line("ZCARD {z}")), ":0", "{level}");
        assert_eq!(b.call_line(&line("ZCARD {d}")), ":0", "{level}");
        let commit = a.call_line("COMMIT");
        assert!(commit.starts_with(':'), "{level}: COMMIT answered {commit}");
        assert_eq!(b.call_line(&line("ZSCORE {z} a")), "\"11\"", "{level}");
        assert_eq!(
            b.call_line(&line("ZRANGE {d} 0 -1")),
            "[\"b\", \"a\"]",
            "{level}"
        );
        assert_eq!(b.call_line(&line("DEL {z} {d}")), ":2");
    }
    // MULTI/EXEC with WATCH: a ZINCRBY elsewhere fails the next EXEC.
    assert_eq!(a.call_line(&line("ZADD {z} 1 m")), ":1");
    assert_eq!(a.call_line(&line("WATCH {z}")), "+OK");
    assert_eq!(b.call_line(&line("ZINCRBY {z} 1 m")), "\"2\"");
    for q in ["MULTI", &line("ZADD {d} 5 n")] {
        let _ = a.call_line(q);
    }
    assert_eq!(a.call_line("EXEC"), "(nil array *-1)");
    assert_eq!(b.call_line(&line("ZCARD {d}")), ":0");
    // ZUNIONSTORE across the two shards, read by a MULTI of both keys:
    // never half done.
    let stop = std::sync::atomic::AtomicBool::new(false);
    std::thread::scope(|s| {
        s.spawn(|| {
            let mut c = elsa.conn();
            for i in 0..200 {
                let _: i64 = redis::cmd("ZADD")
                    .arg(&z)
                    .arg(i)
                    .arg(format!("m{i}"))
                    .query(&mut c)
                    .unwrap();
                let n: i64 = redis::cmd("ZUNIONSTORE")
                    .arg(&d)
                    .arg(1)
                    .arg(&z)
                    .query(&mut c)
                    .unwrap();
                assert_eq!(n, i + 2, "m and m0..=m{i}");
            }
            stop.store(true, std::sync::atomic::Ordering::Relaxed);
        });
        let mut r = elsa.conn();
        let mut reads = 0;
        while !stop.load(std::sync::atomic::Ordering::Relaxed) {
            let (x, y): (i64, i64) = redis::pipe()
                .atomic()
                .cmd("ZCARD")
                .arg(&z)
                .cmd("ZCARD")
                .arg(&d)
                .query(&mut r)
                .unwrap();
            assert!(y == 0 || y == x || y + 1 == x, "read {reads}: {x} vs {y}");
            reads += 1;
        }
        assert!(reads > 0);
    });
}

#[test]
fn readers_holding_keys_cause_no_conflict() {
    // Clients reading two keys on two shards at once without pause (each
    // MGET holds both for its read) while one client commits blind writes
    // to them: nobody else writes, so no commit may fail. A held key is
    // waited for, not reported as a conflict (a reader's hold changes
    // nothing a commit validates).
    let elsa = Elsa::start(&["--workers", "2"]);
    let mut w = elsa.conn();
    let (a, b) = common::keys_on_two_shards(&mut w);
    let done = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let readers = common::looping_pair_readers(&elsa, (&a, &b), 3, &done, |x, y| {
        assert_eq!(x, y, "an MGET saw half of a commit");
    });
    let mut conflicts = Vec::new();
    for i in 0..200 {
        for level in ["SI", "RR", "RC"] {
            // Across both shards, then on one.
            ok(&mut w, &format!("BEGIN {level}"));
            ok(&mut w, &format!("SET {a} {i}"));
            ok(&mut w, &format!("SET {b} {i}"));
            if let Err(e) = q(&mut w, "COMMIT") {
                conflicts.push(format!("{level} across shards, commit {i}: {e}"));
            }
            ok(&mut w, &format!("BEGIN {level}"));
            ok(&mut w, &format!("GET {a}"));
            ok(&mut w, &format!("INCR {a}"));
            ok(&mut w, &format!("SET {b} {i}"));
            ok(&mut w, &format!("SET {a} {i}"));
            if let Err(e) = q(&mut w, "COMMIT") {
                conflicts.push(format!("{level} read and write, commit {i}: {e}"));
            }
        }
    }
    done.store(true, std::sync::atomic::Ordering::Relaxed);
    for r in readers {
        r.join().unwrap();
    }
    assert!(
        conflicts.is_empty(),
        "{} of 1200 commits failed beside readers alone: {:?}",
        conflicts.len(),
        &conflicts[..conflicts.len().min(5)]
    );
}

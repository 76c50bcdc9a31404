//! Cross-region visibility: `replication = 2pc` acknowledges a commit only
//! once the other region has it; `crdt` acknowledges at once, and
//! `WAITREGION` says when the other region has it. And an add of an
//! element already there, concurrent with a remove in the other region,
//! keeps it (add-wins, `docs/datatypes.md`); a change of a TTL alone
//! never undoes a concurrent write of the value.

use std::time::Instant;

use redis::Value;

use crate::common::cluster::Cluster;
use crate::{get_all, lag_lines, one_at_a_time, text};

/// `line` (arguments split at spaces) on `con`; panics on an error reply.
fn run(con: &mut redis::Connection, line: &str) -> Value {
    let mut cmd = redis::cmd(line.split(' ').next().unwrap_or_default());
    for arg in line.split(' ').skip(1) {
        cmd.arg(arg);
    }
    cmd.query(con)
        .unwrap_or_else(|e| panic!("{line} failed: {e}"))
}

fn ok(v: &Value) -> bool {
    matches!(v, Value::Okay) || matches!(v, Value::SimpleString(s) if s == "OK")
}

#[test]
fn replication_2pc_commit_is_in_the_other_region_when_acknowledged() {
    let _one = one_at_a_time();
    let started = Instant::now();

    // 2pc: every acknowledged commit is already in region b.
    let c = Cluster::start(
        &["a", "b"],
        &["--replication", "2pc", "--wan-delay-ms", "20"],
    );
    let mode = c.replication_field(0, "replication").unwrap_or_default();
    assert!(
        ["2pc", "twopc"].contains(&mode.to_ascii_lowercase().as_str()),
        "node a does not run 2pc replication: INFO says replication:{mode}"
    );
    let (mut a, mut b) = (c.conn(0), c.conn(1));
    let mut stale = Vec::new();
    let writes = Instant::now();
    for i in 0..20 {
        let key = format!("2pc:{i}");
        let value = format!("v{i}");
        let answer: Value = redis::cmd("SET")
            .arg(&key)
            .arg(&value)
            .query(&mut a)
            .expect("SET on a");
        assert!(ok(&answer), "SET {key} on a answered {answer:?}");
        let seen: Value = redis::cmd("GET").arg(&key).query(&mut b).expect("GET on b");
        if text(&seen).as_deref() != Some(value.as_str()) {
            stale.push(format!(
                "{key}: b read {seen:?} right after a acknowledged {value}"
            ));
        }
    }
    let per_write = writes.elapsed() / 20;
    // A transaction over several keys, and a delete.
    let mut tx = redis::pipe();
    tx.atomic()
        .cmd("SET")
        .arg("2pc:tx1")
        .arg("t1")
        .cmd("SET")
        .arg("2pc:tx2")
        .arg("t2")
        .cmd("DEL")
        .arg("2pc:0");
    let _: Value = tx.query(&mut a).expect("MULTI/EXEC on a");
    let seen = get_all(
        &mut b,
        &["2pc:tx1".into(), "2pc:tx2".into(), "2pc:0".into()],
    );
    if seen != [Some("t1".into()), Some("t2".into()), None] {
        stale.push(format!(
            "after MULTI SET 2pc:tx1 t1, SET 2pc:tx2 t2, DEL 2pc:0 EXEC on a, b read {seen:?}"
        ));
    }
    let _: Value = redis::cmd("BEGIN").arg("SI").query(&mut a).expect("BEGIN");
    let _: Value = redis::cmd("PUT")
        .arg("2pc:si")
        .arg("s1")
        .query(&mut a)
        .expect("PUT");
    let ts: Value = redis::cmd("COMMIT").query(&mut a).expect("COMMIT");
    assert!(matches!(ts, Value::Int(_)), "COMMIT answered {ts:?}");
    let seen: Value = redis::cmd("GET").arg("2pc:si").query(&mut b).expect("GET");
    if text(&seen).as_deref() != Some("s1") {
        stale.push(format!(
            "2pc:si: b read {seen:?} right after a committed s1"
        ));
    }
    println!(
        "[regions] 2pc: 20 SETs on a, each read back on b at once ({per_write:.1?} per SET with 20 ms one-way delay)"
    );
    assert!(
        stale.is_empty(),
        "with replication = 2pc, acknowledged writes were not yet in the other region: {stale:#?}"
    );
    drop(c);

    // crdt: acknowledged at once; WAITREGION says when b has it.
    let c = Cluster::start(&["a", "b"], &["--wan-delay-ms", "20"]);
    let (mut a, mut b) = (c.conn(0), c.conn(1));
    let mut keys = Vec::new();
    let mut immediate = 0;
    for i in 0..20 {
        let key = format!("crdt:{i}");
        let answer: Value = redis::cmd("SET")
            .arg(&key)
            .arg(format!("v{i}"))
            .query(&mut a)
            .expect("SET on a");
        assert!(ok(&answer), "SET {key} on a answered {answer:?}");
        // Not asserted: without waiting, b usually does not have it yet.
        let now: Value = redis::cmd("GET").arg(&key).query(&mut b).expect("GET on b");
        if text(&now) == Some(format!("v{i}")) {
            immediate += 1;
        }
        keys.push(key);
        if i % 5 == 4 {
            let waited = Instant::now();
            let w: i64 = redis::cmd("WAITREGION")
                .arg("b")
                .arg(10_000)
                .query(&mut a)
                .expect("WAITREGION");
            assert_eq!(
                w,
                1,
                "WAITREGION b 10000 answered 0; INFO replication of a:\n{}",
                lag_lines(&c.info_replication(0))
            );
            let seen: Value = redis::cmd("GET").arg(&keys[i]).query(&mut b).expect("GET");
            assert_eq!(
                text(&seen),
                Some(format!("v{i}")),
                "WAITREGION b said 1, yet b reads {} as {seen:?}",
                keys[i]
            );
            println!("[regions] crdt: WAITREGION b took {:.1?}", waited.elapsed());
        }
    }
    let seen = get_all(&mut b, &keys);
    let want: Vec<Option<String>> = (0..20).map(|i| Some(format!("v{i}"))).collect();
    assert_eq!(
        seen, want,
        "after WAITREGION b answered 1, b does not hold every write a acknowledged"
    );
    println!(
        "[regions] crdt: {immediate} of 20 GETs on b right after the SET on a already saw it \
         (2pc: 20 of 20)"
    );
    // An unknown region is an error, not a silent 1.
    let err = redis::cmd("WAITREGION")
        .arg("nowhere")
        .arg(10)
        .query::<Value>(&mut a);
    assert!(
        err.is_err(),
        "WAITREGION of an unknown region answered {err:?}"
    );
    println!("[regions] whole test {:.1?}", started.elapsed());
}

/// `ELSA.FAULT ISOLATE` must cut membership for as long as it lasts: once
/// the isolated node has dropped the other region's node from its ring,
/// that node must not come back before `HEAL`.
#[test]
fn an_isolated_node_keeps_the_other_region_out_until_healed() {
    let _one = one_at_a_time();
    let c = Cluster::start(&["a", "b"], &[]);
    c.fault(0, "ISOLATE");
    let cut = Instant::now();
    let mut seen = Vec::new();
    while cut.elapsed() < std::time::Duration::from_secs(8) {
        let m = c.replication_field(0, "members").unwrap_or_default();
        seen.push(format!("{:.1?}:{m}", cut.elapsed()));
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
    c.fault(0, "HEAL");
    let members: Vec<&str> = seen
        .iter()
        .map(|s| s.rsplit(':').next().unwrap_or(""))
        .collect();
    let dropped = members.iter().position(|m| *m == "1");
    assert!(
        dropped.is_some(),
        "the isolated node never dropped the other region in 8 s: {seen:?}"
    );
    let back = members[dropped.unwrap_or(0)..].iter().any(|m| *m != "1");
    assert!(
        !back,
        "the other region came back into the isolated node's ring before HEAL: {seen:?}"
    );
}

/// `ACK all` on a connection, in the default (crdt) replication mode: every
/// acknowledged write is already in the other region. Before the fix the
/// level waited for nothing outside `replication = 2pc`, and region b read
/// the old value right after region a acknowledged.
#[test]
fn ack_all_waits_for_every_region_in_crdt_mode() {
    let _one = one_at_a_time();
    let c = Cluster::start(&["a", "b"], &["--wan-delay-ms", "20"]);
    let (mut a, mut b) = (c.conn(0), c.conn(1));
    let answer: Value = redis::cmd("ACK").arg("all").query(&mut a).expect("ACK all");
    assert!(ok(&answer), "ACK all answered {answer:?}");
    let mut stale = Vec::new();
    for i in 0..20 {
        let key = format!("all:{i}");
        let value = format!("v{i}");
        let answer: Value = redis::cmd("SET")
            .arg(&key)
            .arg(&value)
            .query(&mut a)
            .expect("SET on a");
        assert!(ok(&answer), "SET {key} on a answered {answer:?}");
        let seen: Value = redis::cmd("GET").arg(&key).query(&mut b).expect("GET on b");
        if text(&seen).as_deref() != Some(value.as_str()) {
            stale.push(format!(
                "{key}: b read {seen:?} right after a acknowledged {value}"
            ));
        }
    }
    assert!(
        stale.is_empty(),
        "ACK all acknowledged before region b had it:\n{}",
        stale.join("\n")
    );
}

/// Numbered databases across nodes and regions: what a client writes in
/// database 1 on one node is database 1's on the other node of its region
/// (whichever node is the key's primary) and, once `WAITREGION` says so,
/// in the other region — never database 0's, which keeps its own values.
#[test]
fn numbered_databases_stay_apart_on_every_node_and_region() {
    let _one = one_at_a_time();
    let c = Cluster::start(&["a", "a", "b"], &["--wan-delay-ms", "10"]);
    let select = |con: &mut redis::Connection, db: u8| {
        let _: () = redis::cmd("SELECT").arg(db).query(con).expect("SELECT");
    };
    let keys: Vec<String> = (0..40).map(|i| format!("db:{i}")).collect();
    let mut w = c.conn(0);
    for k in &keys {
        let _: () = redis::cmd("SET")
            .arg(k)
            .arg(format!("zero-{k}"))
            .query(&mut w)
            .unwrap();
    }
    select(&mut w, 1);
    let mut pairs = redis::cmd("MSET");
    for k in &keys {
        pairs.arg(k).arg(format!("one-{k}"));
    }
    let _: () = pairs.query(&mut w).expect("MSET in db 1");
    let waited: i64 = redis::cmd("WAITREGION")
        .arg("b")
        .arg(10_000)
        .query(&mut w)
        .unwrap();
    assert_eq!(waited, 1, "WAITREGION b");
    for node in 0..3 {
        let mut r = c.conn(node);
        let zero = get_all(&mut r, &keys);
        select(&mut r, 1);
        let one = get_all(&mut r, &keys);
        select(&mut r, 2);
        let two = get_all(&mut r, &keys);
        for (i, k) in keys.iter().enumerate() {
            assert_eq!(zero[i], Some(format!("zero-{k}")), "node {node} db 0 {k}");
            assert_eq!(one[i], Some(format!("one-{k}")), "node {node} db 1 {k}");
            assert_eq!(two[i], None, "node {node} db 2 {k}");
        }
    }
}

/// An add of an element already there is a write (issue 41, defect 14):
/// region a removes `m` (`SREM`, `DEL`, `ZREM`, `HDEL`) while region b,
/// which has not seen the remove yet (300 ms away), adds `m` again with
/// what it has (`SADD`, `ZADD` with its score, `HSET` with its value, and
/// `SADD` inside `MULTI`) and
/// is answered as Redis answers (0: nothing new). Both regions end with
/// `m`. Before the fix, every set and sorted-set case ended without it on
/// both.
#[test]
fn an_add_of_a_present_element_survives_a_concurrent_remove_in_another_region() {
    let _one = one_at_a_time();
    let c = Cluster::start(&["a", "b"], &["--wan-delay-ms", "300"]);
    c.wait_members(&[0, 1], 2, std::time::Duration::from_secs(30));
    let (mut a, mut b) = (c.conn(0), c.conn(1));
    for line in [
        "SADD s1 m x",
        "SADD s2 m x",
        "SADD s3 m x",
        "ZADD z 1 m 2 x",
        "HSET h m v x w",
    ] {
        run(&mut a, line);
    }
    c.wait_same_digest(&[0, 1], std::time::Duration::from_secs(30));
    // The races: a's removes, then at once b's adds (both well inside
    // the 300 ms the other region's writes take to arrive).
    let races = [
        ("SREM s1 m", "SADD s1 m"),
        ("DEL s2", "SADD s2 m"),
        ("ZREM z m", "ZADD z 1 m"),
        ("HDEL h m", "HSET h m v"),
    ];
    let mut removed: Vec<Value> = races.iter().map(|(r, _)| run(&mut a, r)).collect();
    let mut added: Vec<Value> = races.iter().map(|(_, s)| run(&mut b, s)).collect();
    // And inside a transaction: its install writes `m` again too.
    removed.push(run(&mut a, "SREM s3 m"));
    let in_multi: Vec<i64> = redis::pipe()
        .atomic()
        .cmd("SADD")
        .arg("s3")
        .arg("m")
        .query(&mut b)
        .expect("MULTI SADD s3 m EXEC");
    added.extend(in_multi.into_iter().map(Value::Int));
    assert!(
        removed.iter().all(|v| *v == Value::Int(1)),
        "a's removes answered {removed:?}"
    );
    assert!(
        added.iter().all(|v| *v == Value::Int(0)),
        "b's adds answered {added:?}: b had seen a remove, so they did not race"
    );
    c.wait_same_digest(&[0, 1], std::time::Duration::from_secs(30));
    let mut lost = Vec::new();
    for (node, con) in [("a", &mut a), ("b", &mut b)] {
        for (line, want) in [
            ("SISMEMBER s1 m", Value::Int(1)),
            ("SISMEMBER s2 m", Value::Int(1)),
            ("SISMEMBER s3 m", Value::Int(1)),
            ("ZSCORE z m", Value::BulkString(b"1".to_vec())),
            ("HGET h m", Value::BulkString(b"v".to_vec())),
        ] {
            let got = run(con, line);
            if got != want {
                lost.push(format!(
                    "{node}: {line} answered {got:?}, expected {want:?}"
                ));
            }
        }
    }
    assert!(
        lost.is_empty(),
        "the re-adds were lost:\n{}",
        lost.join("\n")
    );
}

/// A change of a string's TTL alone never undoes a write of its value
/// (issue 41, defect 15): region a writes `b` over `a` while region b,
/// which has not seen it yet (300 ms away), changes the TTL of `a` — by
/// EXPIRE, PEXPIREAT, PERSIST, GETEX, inside MULTI and from a script —
/// after a's write, by the clocks. Both regions end with `b` and `b`'s own
/// TTL (none). Before the fix both ended with `a` and the new TTL: the
/// acknowledged SET was lost to a command that only set a TTL. The same
/// for a counter (`c…`: `10`, INCR'd, so a typed state): before its fix
/// it ended as `11` with the new TTL.
#[test]
fn a_ttl_change_never_undoes_a_concurrent_write_in_another_region() {
    let _one = one_at_a_time();
    let c = Cluster::start(&["a", "b"], &["--wan-delay-ms", "300"]);
    c.wait_members(&[0, 1], 2, std::time::Duration::from_secs(30));
    let (mut a, mut b) = (c.conn(0), c.conn(1));
    let changes = [
        ("1", "EXPIRE {} 100"),
        ("2", "PEXPIREAT {} 99999999999999"),
        ("3", "PERSIST {}"),
        ("4", "GETEX {} EX 100"),
        ("5", "MULTI"),
        ("6", "EVAL"),
    ];
    let keys = |n: &str| [format!("t{n}"), format!("c{n}")];
    for (n, _) in changes {
        let [t, counter] = keys(n);
        run(&mut a, &format!("SET {t} a EX 1000"));
        run(&mut a, &format!("SET {counter} 10 EX 1000"));
        run(&mut a, &format!("INCR {counter}"));
    }
    c.wait_same_digest(&[0, 1], std::time::Duration::from_secs(30));
    for (n, _) in changes {
        for k in keys(n) {
            run(&mut a, &format!("SET {k} b"));
        }
    }
    for (n, change) in changes {
        for k in keys(n) {
            match change {
                "MULTI" => {
                    let _: Vec<i64> = redis::pipe()
                        .atomic()
                        .cmd("EXPIRE")
                        .arg(&k)
                        .arg(100)
                        .query(&mut b)
                        .expect("MULTI EXPIRE EXEC");
                }
                "EVAL" => {
                    let _: i64 = redis::cmd("EVAL")
                        .arg("return redis.call('EXPIRE', KEYS[1], 100)")
                        .arg(1)
                        .arg(&k)
                        .query(&mut b)
                        .expect("EVAL EXPIRE");
                }
                line => {
                    run(&mut b, &line.replace("{}", &k));
                }
            }
        }
    }
    c.wait_same_digest(&[0, 1], std::time::Duration::from_secs(30));
    let mut lost = Vec::new();
    for (node, con) in [("a", &mut a), ("b", &mut b)] {
        for (n, change) in changes {
            for k in keys(n) {
                let got = run(con, &format!("GET {k}"));
                let left = run(con, &format!("TTL {k}"));
                if got != Value::BulkString(b"b".to_vec()) || left != Value::Int(-1) {
                    lost.push(format!("{node}: {k} ({change}) is {got:?}, TTL {left:?}"));
                }
            }
        }
    }
    assert!(
        lost.is_empty(),
        "a TTL change undid the write:\n{}",
        lost.join("\n")
    );
}

/// Clock skew, injected (`ELSA.FAULT CLOCK ms`, issue 42): a node whose
/// clock runs ahead stamps its commits ahead, so its write beats a later
/// one (by real time) of a node whose clock is right — last writer wins
/// by the clocks, as `docs/regions.md` says — and a node further ahead of
/// a peer than `max-clock-drift-ms` has its lattices refused there until
/// its clock is right again (then they go through).
#[test]
fn a_skewed_clock_orders_writes_by_its_timestamps_within_the_drift_limit() {
    let _one = one_at_a_time();
    let c = Cluster::start(&["a", "b"], &["--max-clock-drift-ms", "2000"]);
    let (mut a, mut b) = (c.conn(0), c.conn(1));
    let converged =
        |key: &str, want: &str, a: &mut redis::Connection, b: &mut redis::Connection| {
            let deadline = Instant::now() + std::time::Duration::from_secs(20);
            loop {
                let (x, y) = (run(a, &format!("GET {key}")), run(b, &format!("GET {key}")));
                if text(&x).as_deref() == Some(want) && text(&y).as_deref() == Some(want) {
                    return;
                }
                assert!(
                    Instant::now() < deadline,
                    "{key}: a has {x:?}, b has {y:?}, both should have {want}"
                );
                std::thread::sleep(std::time::Duration::from_millis(50));
            }
        };
    // Two concurrent writes, b's first by real time: b is cut off while
    // both are made, so neither clock has seen the other's stamp (a clock
    // that has moves past it, and its writes win as they should).
    let concurrent = |key: &str, a: &mut redis::Connection, b: &mut redis::Connection| {
        c.fault(1, "ISOLATE");
        assert!(ok(&run(b, &format!("SET {key} from-b"))));
        std::thread::sleep(std::time::Duration::from_millis(100));
        assert!(ok(&run(a, &format!("SET {key} from-a"))));
        c.fault(1, "HEAL");
    };
    // Right clocks: the later write wins.
    concurrent("k1", &mut a, &mut b);
    converged("k1", "from-a", &mut a, &mut b);
    // b's clock 1.5 s ahead: its write, made first, wins.
    c.fault(1, "CLOCK 1500");
    concurrent("k2", &mut a, &mut b);
    converged("k2", "from-b", &mut a, &mut b);
    // 5 s ahead, past the 2 s limit: a refuses b's lattices…
    std::thread::sleep(std::time::Duration::from_secs(2));
    c.fault(1, "CLOCK 5000");
    assert!(ok(&run(&mut b, "SET k3 from-b")));
    std::thread::sleep(std::time::Duration::from_secs(2));
    assert_eq!(
        text(&run(&mut a, "GET k3")),
        None,
        "a took a lattice 5 s ahead"
    );
    // …until b's clock is right and real time has passed the stamp.
    c.fault(1, "HEAL");
    std::thread::sleep(std::time::Duration::from_secs(4));
    converged("k3", "from-b", &mut a, &mut b);
    let bad = redis::cmd("ELSA.FAULT")
        .arg("CLOCK")
        .arg("soon")
        .query::<Value>(&mut b);
    assert!(bad.is_err(), "CLOCK soon answered {bad:?}");
}

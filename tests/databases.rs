//! Numbered databases (`SELECT n`): every path a key takes keeps them
//! apart — lone commands and pipelines, multi-key commands across shards,
//! MULTI/EXEC (with a queued SELECT), WATCH, BEGIN … COMMIT, blocking pops,
//! the key-space commands, MOVE and COPY … DB, FLUSHDB — and so do the log
//! and recovery after kill -9. The differential test compares SELECT, MOVE
//! and COPY … DB with Redis; this file checks what one client cannot see
//! there (several connections, shards, restarts).

mod common;

use std::time::Duration;

use common::{keys_on_two_shards, Elsa, Node, TestDir};
use redis::Commands;

/// A connection to database `db`.
fn conn_db(elsa: &Elsa, db: u8) -> redis::Connection {
    let mut c = elsa.conn();
    let _: () = redis::cmd("SELECT").arg(db).query(&mut c).unwrap();
    c
}

fn keyspace(c: &mut redis::Connection) -> Vec<String> {
    let info: String = redis::cmd("INFO").arg("keyspace").query(c).unwrap();
    info.lines()
        .filter(|l| l.starts_with("db"))
        .map(str::to_string)
        .collect()
}

#[test]
fn every_command_path_keeps_databases_apart() {
    let elsa = Elsa::start(&["--workers", "3"]);
    let mut d0 = elsa.conn();
    let mut d1 = conn_db(&elsa, 1);
    let (a, b) = keys_on_two_shards(&mut d0);

    // Lone commands and a pipeline.
    let _: () = d0.set(&a, "zero").unwrap();
    let _: () = d1.set(&a, "one").unwrap();
    let got: (Option<String>, Option<String>) = redis::pipe()
        .get(&a)
        .cmd("SELECT")
        .arg(0)
        .ignore()
        .get(&a)
        .cmd("SELECT")
        .arg(1)
        .ignore()
        .query(&mut d1)
        .unwrap();
    assert_eq!(got, (Some("one".into()), Some("zero".into())));

    // Multi-key commands across two shards.
    let _: () = d1.mset(&[(&a, "1a"), (&b, "1b")]).unwrap();
    let v: Vec<Option<String>> = d1.mget(&[&a, &b]).unwrap();
    assert_eq!(v, vec![Some("1a".into()), Some("1b".into())]);
    let v: Vec<Option<String>> = d0.mget(&[&a, &b]).unwrap();
    assert_eq!(v, vec![Some("zero".into()), None]);

    // MULTI/EXEC with a SELECT queued in the middle: the commands after it
    // name keys of the database it selects, and the connection stays there.
    let r: Vec<redis::Value> = redis::pipe()
        .atomic()
        .set(&b, "b-in-0")
        .cmd("SELECT")
        .arg(2)
        .set(&b, "b-in-2")
        .query(&mut d0)
        .unwrap();
    assert_eq!(r.len(), 3);
    let here: String = d0.get(&b).unwrap();
    assert_eq!(here, "b-in-2", "after EXEC the connection is in db 2");
    let _: () = redis::cmd("SELECT").arg(0).query(&mut d0).unwrap();
    assert_eq!(d0.get::<_, String>(&b).unwrap(), "b-in-0");
    assert_eq!(d1.get::<_, String>(&b).unwrap(), "1b");

    // DISCARD goes back to the database MULTI started in.
    let _: () = redis::cmd("MULTI").query(&mut d0).unwrap();
    let _: () = redis::cmd("SELECT").arg(5).query(&mut d0).unwrap();
    let _: () = redis::cmd("DISCARD").query(&mut d0).unwrap();
    assert_eq!(d0.get::<_, String>(&a).unwrap(), "zero");

    // WATCH in db 1 is not tripped by the same name written in db 0, and
    // is by a write in db 1.
    let _: () = redis::cmd("WATCH").arg(&a).query(&mut d1).unwrap();
    let _: () = d0.set(&a, "zero-again").unwrap();
    let r: Option<Vec<redis::Value>> = redis::pipe()
        .atomic()
        .set(&a, "watched-ok")
        .query(&mut d1)
        .unwrap();
    assert!(r.is_some(), "a write in db 0 must not fail db 1's WATCH");
    let _: () = redis::cmd("WATCH").arg(&a).query(&mut d1).unwrap();
    let mut other1 = conn_db(&elsa, 1);
    let _: () = other1.set(&a, "changed").unwrap();
    let r: Option<Vec<redis::Value>> = redis::pipe()
        .atomic()
        .set(&a, "lost")
        .query(&mut d1)
        .unwrap();
    assert!(r.is_none(), "a write in db 1 fails db 1's WATCH");

    // Elsa's BEGIN … COMMIT across two shards in db 1.
    let _: () = redis::cmd("BEGIN").arg("SI").query(&mut d1).unwrap();
    let _: () = redis::cmd("PUT")
        .arg(&a)
        .arg("tx-a")
        .query(&mut d1)
        .unwrap();
    let _: () = redis::cmd("PUT")
        .arg(&b)
        .arg("tx-b")
        .query(&mut d1)
        .unwrap();
    let _: i64 = redis::cmd("COMMIT").query(&mut d1).unwrap();
    let v: Vec<Option<String>> = other1.mget(&[&a, &b]).unwrap();
    assert_eq!(v, vec![Some("tx-a".into()), Some("tx-b".into())]);
    assert_eq!(d0.get::<_, String>(&a).unwrap(), "zero-again");

    // A blocking pop in db 1 is woken by a push in db 1 (not db 0), and
    // names the key as the client knows it.
    let url = format!("{}1", elsa.url());
    let waiter = std::thread::spawn(move || {
        let mut c = redis::Client::open(url).unwrap().get_connection().unwrap();
        let got: Option<(String, String)> = c.blpop("queue", 10.0).unwrap();
        got
    });
    std::thread::sleep(Duration::from_millis(300));
    let _: () = d0.lpush("queue", "for-db0").unwrap();
    let _: () = other1.lpush("queue", "for-db1").unwrap();
    let got = waiter.join().unwrap();
    assert_eq!(got, Some(("queue".into(), "for-db1".into())));
    assert_eq!(d0.llen::<_, i64>("queue").unwrap(), 1);

    // The key-space commands see only their database.
    let mut k1: Vec<String> = d1.keys("*").unwrap();
    k1.sort();
    let mut want = vec![a.clone(), b.clone()];
    want.sort();
    assert_eq!(k1, want);
    let scanned: Vec<String> = d1.scan().unwrap().collect();
    assert_eq!(scanned.len(), 2);
    assert_eq!(redis::cmd("DBSIZE").query::<i64>(&mut d1).unwrap(), 2);
    let rk: String = redis::cmd("RANDOMKEY").query(&mut d1).unwrap();
    assert!(want.contains(&rk));

    // MOVE and COPY … DB.
    assert_eq!(
        redis::cmd("MOVE")
            .arg(&a)
            .arg(3)
            .query::<i64>(&mut d1)
            .unwrap(),
        1
    );
    assert_eq!(
        redis::cmd("MOVE")
            .arg(&a)
            .arg(3)
            .query::<i64>(&mut d1)
            .unwrap(),
        0
    );
    assert_eq!(
        redis::cmd("COPY")
            .arg(&b)
            .arg(&b)
            .arg("DB")
            .arg(3)
            .query::<i64>(&mut d1)
            .unwrap(),
        1
    );
    let mut d3 = conn_db(&elsa, 3);
    let v: Vec<Option<String>> = d3.mget(&[&a, &b]).unwrap();
    assert_eq!(v, vec![Some("tx-a".into()), Some("tx-b".into())]);

    // INFO keyspace lists each database; FLUSHDB empties only its own.
    let ks = keyspace(&mut d0);
    assert!(ks.iter().any(|l| l.starts_with("db1:keys=1,")), "{ks:?}");
    assert!(ks.iter().any(|l| l.starts_with("db3:keys=2,")), "{ks:?}");
    let _: () = redis::cmd("FLUSHDB").query(&mut d3).unwrap();
    assert_eq!(redis::cmd("DBSIZE").query::<i64>(&mut d3).unwrap(), 0);
    assert_eq!(redis::cmd("DBSIZE").query::<i64>(&mut d1).unwrap(), 1);
    assert_eq!(d0.get::<_, String>(&a).unwrap(), "zero-again");
    let _: () = redis::cmd("FLUSHALL").query(&mut d0).unwrap();
    assert_eq!(redis::cmd("DBSIZE").query::<i64>(&mut d1).unwrap(), 0);
    assert!(keyspace(&mut d0).is_empty());
}

#[test]
fn databases_and_flushdb_survive_kill9() {
    let dir = TestDir::new("databases-kill9");
    let extra = ["--workers", "2", "--appendfsync", "always"];
    let mut node = Node::start(&dir.data(), &dir.log(), &extra);
    let select = |c: &mut redis::Connection, db: u8| {
        let _: () = redis::cmd("SELECT").arg(db).query(c).unwrap();
    };
    let mut c = node.conn();
    for db in 0..3u8 {
        select(&mut c, db);
        for i in 0..50 {
            let _: () = c.set(format!("k{i}"), format!("db{db}-{i}")).unwrap();
        }
    }
    // Database 1 is flushed, then written again: only the new key stays.
    select(&mut c, 1);
    let _: () = redis::cmd("FLUSHDB").query(&mut c).unwrap();
    let _: () = c.set("after", "flush").unwrap();
    drop(c);
    node.kill9();
    let node = Node::start(&dir.data(), &dir.log(), &extra);
    let mut c = node.conn();
    for db in [0u8, 2] {
        select(&mut c, db);
        assert_eq!(redis::cmd("DBSIZE").query::<i64>(&mut c).unwrap(), 50);
        for i in 0..50 {
            let v: String = c.get(format!("k{i}")).unwrap();
            assert_eq!(v, format!("db{db}-{i}"));
        }
    }
    select(&mut c, 1);
    let keys: Vec<String> = c.keys("*").unwrap();
    assert_eq!(
        keys,
        vec!["after".to_string()],
        "FLUSHDB came back after kill -9"
    );
}

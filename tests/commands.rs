//! Redis commands through real clients — the `redis` crate and `redis-cli` —
//! against the real server process.

mod common;

use std::collections::HashSet;
use std::process::Command;

use common::Elsa;
use redis::{Commands, Value};

#[test]
fn strings_behave_like_redis() {
    let elsa = Elsa::start(&["--workers", "3"]);
    let mut c = elsa.conn();
    let _: () = c.set("a", "1").unwrap();
    assert_eq!(c.get::<_, String>("a").unwrap(), "1");
    assert_eq!(c.incr::<_, _, i64>("a", 41).unwrap(), 42);
    assert_eq!(c.decr::<_, _, i64>("a", 2).unwrap(), 40);
    assert_eq!(c.append::<_, _, i64>("s", "hello").unwrap(), 5);
    assert_eq!(c.append::<_, _, i64>("s", " world").unwrap(), 11);
    assert_eq!(c.strlen::<_, i64>("s").unwrap(), 11);
    assert!(c.set_nx::<_, _, bool>("n", "x").unwrap());
    assert!(!c.set_nx::<_, _, bool>("n", "y").unwrap());
    assert_eq!(c.getset::<_, _, String>("n", "z").unwrap(), "x");
    assert_eq!(c.get_del::<_, String>("n").unwrap(), "z");
    assert_eq!(c.get::<_, Option<String>>("n").unwrap(), None);
    let old: Option<String> = redis::cmd("SET")
        .arg("a")
        .arg("new")
        .arg("GET")
        .query(&mut c)
        .unwrap();
    assert_eq!(old.as_deref(), Some("40"));
    let r: Option<String> = redis::cmd("SET")
        .arg("a")
        .arg("x")
        .arg("NX")
        .query(&mut c)
        .unwrap();
    assert_eq!(r, None, "NX on an existing key answers nil");
    let r: Option<String> = redis::cmd("SET")
        .arg("zz")
        .arg("x")
        .arg("XX")
        .query(&mut c)
        .unwrap();
    assert_eq!(r, None, "XX on a missing key answers nil");
    let _: () = c.mset(&[("m1", "1"), ("m2", "2"), ("m3", "3")]).unwrap();
    let got: Vec<Option<String>> = c.mget(&["m1", "m2", "nope", "m3"]).unwrap();
    assert_eq!(
        got,
        vec![Some("1".into()), Some("2".into()), None, Some("3".into())]
    );
    assert_eq!(c.exists::<_, i64>(&["m1", "m2", "nope", "m1"]).unwrap(), 3);
    assert_eq!(c.del::<_, i64>(&["m1", "m2", "nope"]).unwrap(), 2);
    let r: i64 = redis::cmd("MSETNX")
        .arg("m3")
        .arg("a")
        .arg("m4")
        .arg("b")
        .query(&mut c)
        .unwrap();
    assert_eq!(r, 0);
    assert_eq!(
        c.exists::<_, i64>("m4").unwrap(),
        0,
        "MSETNX sets nothing when one key exists"
    );
    let r: i64 = redis::cmd("MSETNX")
        .arg("m5")
        .arg("a")
        .arg("m4")
        .arg("b")
        .query(&mut c)
        .unwrap();
    assert_eq!(r, 1);
    assert_eq!(c.get::<_, String>("m4").unwrap(), "b");
    let t: String = redis::cmd("TYPE").arg("m4").query(&mut c).unwrap();
    assert_eq!(t, "string");
    let t: String = redis::cmd("TYPE").arg("nope").query(&mut c).unwrap();
    assert_eq!(t, "none");
    let e = c.incr::<_, _, i64>("s", 1).unwrap_err();
    assert!(e.to_string().contains("not an integer"), "{e}");
}

#[test]
fn ttls_expire_keys() {
    let elsa = Elsa::start(&[]);
    let mut c = elsa.conn();
    let _: () = redis::cmd("SET")
        .arg("t")
        .arg("v")
        .arg("PX")
        .arg(150)
        .query(&mut c)
        .unwrap();
    let ttl: i64 = c.pttl("t").unwrap();
    assert!(ttl > 0 && ttl <= 150, "pttl {ttl}");
    let _: () = c.set_ex("s", "v", 100).unwrap();
    assert_eq!(c.ttl::<_, i64>("s").unwrap(), 100);
    assert!(c.persist::<_, bool>("s").unwrap());
    assert_eq!(c.ttl::<_, i64>("s").unwrap(), -1);
    assert_eq!(c.ttl::<_, i64>("missing").unwrap(), -2);
    assert!(c.expire::<_, bool>("s", 100).unwrap());
    assert!(
        c.expire::<_, bool>("s", -1).unwrap(),
        "a past expiry deletes"
    );
    assert_eq!(c.exists::<_, i64>("s").unwrap(), 0);
    std::thread::sleep(std::time::Duration::from_millis(300));
    assert_eq!(c.get::<_, Option<String>>("t").unwrap(), None);
    let e = redis::cmd("SET")
        .arg("x")
        .arg("v")
        .arg("EX")
        .arg(0)
        .query::<()>(&mut c)
        .unwrap_err();
    assert!(e.to_string().contains("invalid expire time"), "{e}");
}

#[test]
fn scan_visits_every_key_once_across_shards() {
    let elsa = Elsa::start(&["--workers", "4"]);
    let mut c = elsa.conn();
    let mut pipe = redis::pipe();
    for i in 0..2000 {
        pipe.set(format!("user:{i}"), i).ignore();
    }
    for i in 0..100 {
        pipe.set(format!("other:{i}"), i).ignore();
    }
    let _: () = pipe.query(&mut c).unwrap();
    assert_eq!(redis::cmd("DBSIZE").query::<i64>(&mut c).unwrap(), 2100);
    let mut cursor = 0u64;
    let mut seen = Vec::new();
    loop {
        let (next, keys): (u64, Vec<String>) = redis::cmd("SCAN")
            .arg(cursor)
            .arg("MATCH")
            .arg("user:*")
            .arg("COUNT")
            .arg(50)
            .query(&mut c)
            .unwrap();
        seen.extend(keys);
        if next == 0 {
            break;
        }
        cursor = next;
    }
    let unique: HashSet<_> = seen.iter().cloned().collect();
    assert_eq!(seen.len(), 2000, "no duplicates");
    assert_eq!(unique.len(), 2000);
    let keys: Vec<String> = c.keys("other:1?").unwrap();
    assert_eq!(keys.len(), 10);
    let _: () = redis::cmd("FLUSHALL").query(&mut c).unwrap();
    assert_eq!(redis::cmd("DBSIZE").query::<i64>(&mut c).unwrap(), 0);
}

#[test]
fn server_commands_common_clients_probe() {
    let elsa = Elsa::start(&[]);
    let mut c = elsa.conn();
    let info: String = redis::cmd("INFO").query(&mut c).unwrap();
    for section in [
        "# Server",
        "# Clients",
        "# Stats",
        "# Keyspace",
        "redis_version:",
    ] {
        assert!(info.contains(section), "INFO lacks {section}");
    }
    let cfg: Vec<String> = redis::cmd("CONFIG")
        .arg("GET")
        .arg("append*")
        .query(&mut c)
        .unwrap();
    assert_eq!(cfg, vec!["appendonly", "yes", "appendfsync", "everysec"]);
    let n: i64 = redis::cmd("COMMAND").arg("COUNT").query(&mut c).unwrap();
    assert!(n > 40);
    let all: Value = redis::cmd("COMMAND").query(&mut c).unwrap();
    assert!(matches!(all, Value::Array(ref v) if v.len() as i64 == n));
    let _: () = redis::cmd("CLIENT")
        .arg("SETNAME")
        .arg("tester")
        .query(&mut c)
        .unwrap();
    let name: String = redis::cmd("CLIENT").arg("GETNAME").query(&mut c).unwrap();
    assert_eq!(name, "tester");
    let id: i64 = redis::cmd("CLIENT").arg("ID").query(&mut c).unwrap();
    assert!(id > 0);
    let _: () = redis::cmd("SELECT").arg(0).query(&mut c).unwrap();
    assert!(redis::cmd("SELECT").arg(1).query::<()>(&mut c).is_err());
    let t: Vec<String> = redis::cmd("TIME").query(&mut c).unwrap();
    assert_eq!(t.len(), 2);
}

fn redis_cli(port: u16, args: &[&str]) -> String {
    let out = Command::new("redis-cli")
        .arg("-p")
        .arg(port.to_string())
        .args(args)
        .output()
        .expect("redis-cli must be installed (apt-get install redis-tools)");
    assert!(out.status.success(), "redis-cli {args:?} failed");
    String::from_utf8_lossy(&out.stdout).trim_end().to_string()
}

#[test]
fn redis_cli_works_unchanged() {
    let elsa = Elsa::start(&[]);
    assert_eq!(redis_cli(elsa.port, &["PING"]), "PONG");
    assert_eq!(redis_cli(elsa.port, &["SET", "k", "hello world"]), "OK");
    assert_eq!(redis_cli(elsa.port, &["GET", "k"]), "hello world");
    assert_eq!(redis_cli(elsa.port, &["INCR", "n"]), "1");
    assert_eq!(redis_cli(elsa.port, &["DBSIZE"]), "2");
    assert!(redis_cli(elsa.port, &["NOSUCH"]).starts_with("ERR unknown command"));
    assert!(redis_cli(elsa.port, &["INFO", "server"]).contains("redis_version"));
    // RESP3 and a pipe of commands on stdin.
    assert_eq!(redis_cli(elsa.port, &["-3", "GET", "k"]), "hello world");
    let out = Command::new("sh")
        .arg("-c")
        .arg(format!(
            "printf 'BEGIN SI\\nSET a 1\\nGET a\\nCOMMIT\\nGET a\\n' | redis-cli -p {}",
            elsa.port
        ))
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines[0..3], ["OK", "OK", "1"], "{text}");
    assert!(
        lines[3].parse::<u64>().is_ok(),
        "COMMIT answers the commit timestamp: {text}"
    );
    assert_eq!(lines[4], "1");
}

//! Redis commands through real clients — the `redis` crate and `redis-cli` —
//! against the real server process.

mod common;
// The differential test's raw RESP client: replies exactly as sent, types
// included (the `redis` crate folds simple and bulk strings, verbatim…).
#[allow(dead_code)]
#[path = "differential/resp.rs"]
mod resp;

use std::collections::HashSet;
use std::process::Command;

use common::{keys_on_two_shards, Elsa};
use redis::{Commands, Value};
use resp::Reply;

fn raw(elsa: &Elsa) -> resp::Conn {
    resp::Conn::connect(elsa.port).expect("connect")
}

fn expect(c: &mut resp::Conn, script: &[(&str, &str)]) {
    c.expect(script)
}

fn error(text: &str) -> Reply {
    Reply::Error(text.as_bytes().to_vec())
}

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
    assert!(redis::cmd("SELECT").arg(16).query::<()>(&mut c).is_err());
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

// Regression tests for the differential findings against Redis 7.0.15
// (/work/notes/differential-findings.md); every expected reply below was
// checked against a real redis-server 7.0.

#[test]
fn ttl_rounds_to_the_nearest_second() {
    let elsa = Elsa::start(&[]);
    let mut c = raw(&elsa);
    expect(
        &mut c,
        &[
            ("SET k v PX 100400", "+OK"),
            ("TTL k", ":100"),
            ("PSETEX p 100600 v", "+OK"),
            ("TTL p", ":101"),
            ("MULTI", "+OK"),
            ("TTL k", "+QUEUED"),
            ("EXEC", "[:100]"),
        ],
    );
}

#[test]
fn set_accepts_repeated_options_and_refuses_conflicting_ones() {
    let elsa = Elsa::start(&[]);
    let mut c = raw(&elsa);
    expect(
        &mut c,
        &[
            ("SET k v NX NX", "+OK"),
            ("SET k v NX NX", "(nil bulk $-1)"),
            ("SET nokey v XX XX", "(nil bulk $-1)"),
            ("SET k w XX xx", "+OK"),
            ("SET k v KEEPTTL KEEPTTL", "+OK"),
            ("SET k v GET GET", "\"v\""),
            ("SET k v EX 100 EX 200", "+OK"),
            ("TTL k", ":200"),
            ("SET k v EX abc EX 100", "+OK"),
            ("TTL k", ":100"),
            (
                "SET k v XX XX PXAT abc",
                "-ERR value is not an integer or out of range",
            ),
            ("SET k v NX XX", "-ERR syntax error"),
            ("SET k v EX 100 PX 100", "-ERR syntax error"),
            ("SET k v EX 100 KEEPTTL", "-ERR syntax error"),
            ("SET k v KEEPTTL EXAT 100", "-ERR syntax error"),
            ("SET k v EX 100 EX", "-ERR syntax error"),
        ],
    );
    assert_eq!(
        c.call(&[b"SET", b"k", b"v", b"NX", b"NX", b"PXAT", b" 100"]),
        error("ERR value is not an integer or out of range"),
    );
    // Option names are C strings in Redis: a NUL ends them.
    assert_eq!(
        c.call(&[b"SET", b"k", b"v", b"NX\0junk"]),
        Reply::NilBulk,
        "NX\\0junk reads as NX"
    );
}

#[test]
fn set_checks_the_syntax_before_the_expiry_value() {
    let elsa = Elsa::start(&[]);
    let mut c = raw(&elsa);
    expect(
        &mut c,
        &[
            ("SET k v EX 0100 NX XX", "-ERR syntax error"),
            ("SET k v NX EX 9223372036854775 XX", "-ERR syntax error"),
            (
                "SET k v NX EX 9223372036854775",
                "-ERR invalid expire time in 'set' command",
            ),
            ("SET k v EX 0", "-ERR invalid expire time in 'set' command"),
        ],
    );
}

#[test]
fn expire_takes_nx_xx_gt_lt() {
    let elsa = Elsa::start(&["--workers", "2"]);
    let mut c = raw(&elsa);
    expect(
        &mut c,
        &[
            ("EXPIRE nokey 100 NX", ":0"),
            ("SET k v", "+OK"),
            ("EXPIRE k 100 XX", ":0"),
            ("EXPIRE k 100 GT", ":0"),
            ("EXPIRE k 100 NX", ":1"),
            ("TTL k", ":100"),
            ("EXPIRE k 200 NX", ":0"),
            ("EXPIRE k 200 XX", ":1"),
            ("TTL k", ":200"),
            ("PEXPIRE k 100000 GT", ":0"),
            ("EXPIRE k 300 gt", ":1"),
            ("TTL k", ":300"),
            ("EXPIRE k 400 LT", ":0"),
            ("EXPIRE k 50 XX LT", ":1"),
            ("TTL k", ":50"),
            ("EXPIRE k 40 XX GT", ":0"),
            ("EXPIRE k -1 GT", ":0"),
            ("EXISTS k", ":1"),
            ("EXPIRE k -1 LT", ":1"),
            ("EXISTS k", ":0"),
            ("SET p v", "+OK"),
            ("EXPIRE p 100 LT", ":1"),
            ("TTL p", ":100"),
            ("EXPIRE k 100 FOO", "-ERR Unsupported option FOO"),
            ("EXPIRE k abc NX FOO", "-ERR Unsupported option FOO"),
            (
                "EXPIRE k 100 NX XX",
                "-ERR NX and XX, GT or LT options at the same time are not compatible",
            ),
            (
                "PEXPIREAT k 100 LT NX",
                "-ERR NX and XX, GT or LT options at the same time are not compatible",
            ),
            (
                "EXPIRE k 100 GT LT",
                "-ERR GT and LT options at the same time are not compatible",
            ),
            (
                "EXPIREAT k abc LT",
                "-ERR value is not an integer or out of range",
            ),
            ("MULTI", "+OK"),
            ("EXPIRE p 500 GT", "+QUEUED"),
            ("EXPIRE p 50 NX", "+QUEUED"),
            ("TTL p", "+QUEUED"),
            ("EXEC", "[:1, :0, :500]"),
        ],
    );
}

#[test]
fn expire_time_overflow_names_the_command() {
    let elsa = Elsa::start(&[]);
    let mut c = raw(&elsa);
    expect(
        &mut c,
        &[
            ("SET k v", "+OK"),
            (
                "PEXPIRE k 9223372036854775807",
                "-ERR invalid expire time in 'pexpire' command",
            ),
            (
                "EXPIREAT k 9223372036854775807",
                "-ERR invalid expire time in 'expireat' command",
            ),
            (
                "EXPIRE k 9223372036854775807",
                "-ERR invalid expire time in 'expire' command",
            ),
            ("PEXPIREAT k 9223372036854775807", ":1"),
        ],
    );
}

#[test]
fn auth_and_hello_auth_without_requirepass_answer_as_redis() {
    let elsa = Elsa::start(&[]);
    let mut c = raw(&elsa);
    expect(
        &mut c,
        &[
            (
                "AUTH secret",
                "-ERR AUTH <password> called without any password configured for the default user. Are you sure your configuration is correct?",
            ),
            ("AUTH default secret", "+OK"),
            (
                "AUTH DEFAULT secret",
                "-WRONGPASS invalid username-password pair or user is disabled.",
            ),
            (
                "AUTH someone secret",
                "-WRONGPASS invalid username-password pair or user is disabled.",
            ),
            ("AUTH a b c", "-ERR syntax error"),
            (
                "HELLO 2 AUTH someone secret",
                "-WRONGPASS invalid username-password pair or user is disabled.",
            ),
        ],
    );
    let hello = c.call(&[b"HELLO", b"2", b"AUTH", b"default", b"secret"]);
    assert!(
        matches!(&hello, Reply::Array(items) if items.len() == 14),
        "HELLO 2 AUTH default <anything> answers the HELLO map: {hello}"
    );
}

#[test]
fn auth_with_requirepass_matches_the_default_user_exactly() {
    let elsa = Elsa::start_with_password("pw");
    let mut c = raw(&elsa);
    expect(
        &mut c,
        &[
            (
                "HELLO 3",
                "-NOAUTH HELLO must be called with the client already authenticated, otherwise the HELLO AUTH <user> <pass> option can be used to authenticate the client and select the RESP protocol version at the same time",
            ),
            (
                "AUTH DEFAULT pw",
                "-WRONGPASS invalid username-password pair or user is disabled.",
            ),
            (
                "AUTH x",
                "-WRONGPASS invalid username-password pair or user is disabled.",
            ),
            ("AUTH default pw", "+OK"),
            ("AUTH pw", "+OK"),
        ],
    );
}

#[test]
fn hello_config_command_errors_name_the_option() {
    let elsa = Elsa::start(&[]);
    let mut c = raw(&elsa);
    expect(
        &mut c,
        &[
            ("HELLO 3 FOO", "-ERR Syntax error in HELLO option 'FOO'"),
            (
                "HELLO 2 AUTH default",
                "-ERR Syntax error in HELLO option 'AUTH'",
            ),
            (
                "HELLO 3 SETNAME",
                "-ERR Syntax error in HELLO option 'SETNAME'",
            ),
            (
                "HELLO 2 SETNAME x FOO",
                "-ERR Syntax error in HELLO option 'FOO'",
            ),
            ("CLIENT GETNAME", "\"x\""),
            (
                "CONFIG FOO",
                "-ERR unknown subcommand 'FOO'. Try CONFIG HELP.",
            ),
            (
                "config foo",
                "-ERR unknown subcommand 'foo'. Try CONFIG HELP.",
            ),
            (
                "CONFIG GET",
                "-ERR wrong number of arguments for 'config|get' command",
            ),
            (
                "COMMAND FOO",
                "-ERR unknown subcommand 'FOO'. Try COMMAND HELP.",
            ),
            (
                "COMMAND COUNT x",
                "-ERR wrong number of arguments for 'command|count' command",
            ),
            (
                "CLIENT FOO",
                "-ERR unknown subcommand 'FOO'. Try CLIENT HELP.",
            ),
            (
                "CLIENT ID x",
                "-ERR wrong number of arguments for 'client|id' command",
            ),
        ],
    );
}

#[test]
fn unknown_command_lists_arguments_as_redis_does() {
    let elsa = Elsa::start(&[]);
    let mut c = raw(&elsa);
    assert_eq!(
        c.call(&[b"FOOBAR", b"1", b"2", b"3", b"4", b"5", b"6", b"7", b"8", b"9"]),
        error(
            "ERR unknown command 'FOOBAR', with args beginning with: \
             '1' '2' '3' '4' '5' '6' '7' '8' '9' "
        ),
        "every argument while the list is under 128 bytes"
    );
    assert_eq!(
        c.call(&[b"GETX", b"b\0\r\n\xff", b"\0x"]),
        error("ERR unknown command 'GETX', with args beginning with: 'b' '' "),
        "arguments end at a NUL byte"
    );
    let b60 = [b'b'; 60];
    assert_eq!(
        c.call(&[b"GETX", &b60, &b60, &b60]),
        error(&format!(
            "ERR unknown command 'GETX', with args beginning with: '{0}' '{0}' 'bb' ",
            "b".repeat(60)
        )),
        "the last argument is cut to what is left of 128 bytes"
    );
    assert_eq!(
        c.call(&[&[b'N'; 140], b"x"]),
        error(&format!(
            "ERR unknown command '{}', with args beginning with: 'x' ",
            "N".repeat(128)
        )),
    );
    assert_eq!(
        c.call(&[b"GETX", b"1\r2\n3"]),
        error("ERR unknown command 'GETX', with args beginning with: '1 2 3' "),
    );
}

#[test]
fn scan_parses_the_cursor_like_strtoul() {
    let elsa = Elsa::start(&["--workers", "2"]);
    let mut c = raw(&elsa);
    expect(
        &mut c,
        &[
            ("SET k v", "+OK"),
            ("SCAN ", "[\"0\", [\"k\"]]"),
            ("SCAN +0", "[\"0\", [\"k\"]]"),
            ("SCAN 00", "[\"0\", [\"k\"]]"),
            ("SCAN 18446744073709551615", "[\"0\", []]"),
            ("SCAN -1", "[\"0\", []]"),
            ("SCAN 1abc", "-ERR invalid cursor"),
            ("SCAN 18446744073709551616", "-ERR invalid cursor"),
            ("SCAN -", "-ERR invalid cursor"),
            ("SCAN 1.5", "-ERR invalid cursor"),
            ("SCAN abc COUNT 0", "-ERR invalid cursor"),
            ("SCAN  COUNT 0", "-ERR syntax error"),
            ("MULTI", "+OK"),
            ("SCAN ", "+QUEUED"),
            ("EXEC", "[[\"0\", [\"k\"]]]"),
        ],
    );
    assert_eq!(c.call(&[b"SCAN", b" 0"]), error("ERR invalid cursor"));
    assert_eq!(
        c.call(&[b"SCAN", b"0\0junk"]).to_string(),
        "[\"0\", [\"k\"]]",
        "the cursor ends at a NUL byte"
    );
}

#[test]
fn client_info_is_a_verbatim_string_under_resp3() {
    let elsa = Elsa::start(&[]);
    let mut c = raw(&elsa);
    let r = c.call(&[b"CLIENT", b"INFO"]);
    assert!(matches!(r, Reply::Bulk(_)), "RESP2: bulk, got {r}");
    assert!(matches!(c.call(&[b"HELLO", b"3"]), Reply::Map(_)));
    for sub in [&b"INFO"[..], b"LIST"] {
        let r = c.call(&[b"CLIENT", sub]);
        assert!(
            matches!(&r, Reply::Verbatim(fmt, text) if fmt == b"txt" && text.starts_with(b"id=")),
            "RESP3: verbatim txt, got {r}"
        );
    }
}

// String, bit and key commands added with GETEX; every expected reply was
// checked against redis-server 7.0.

#[test]
fn getex_getrange_setrange_incrbyfloat_answer_as_redis() {
    let elsa = Elsa::start(&[]);
    let mut c = raw(&elsa);
    expect(
        &mut c,
        &[
            ("SET k hello", "+OK"),
            ("GETEX k EX 100", "\"hello\""),
            ("TTL k", ":100"),
            ("GETEX k PERSIST", "\"hello\""),
            ("TTL k", ":-1"),
            ("GETEX nokey EX abc", "(nil bulk $-1)"),
            (
                "GETEX k EX abc",
                "-ERR value is not an integer or out of range",
            ),
            (
                "GETEX k EX 0",
                "-ERR invalid expire time in 'getex' command",
            ),
            ("GETEX k EX 10 PX 10", "-ERR syntax error"),
            ("GETEX k KEEPTTL", "-ERR syntax error"),
            ("GETEX k EXAT 1", "\"hello\""),
            ("EXISTS k", ":0"),
            ("SET s Thisisastring", "+OK"),
            ("GETRANGE s 0 3", "\"This\""),
            ("GETRANGE s -3 -1", "\"ing\""),
            ("SUBSTR s 9 100", "\"ring\""),
            ("GETRANGE s -1 -5", "\"\""),
            (
                "GETRANGE s -9223372036854775808 9223372036854775807",
                "\"Thisisastring\"",
            ),
            ("GETRANGE nokey 0 -1", "\"\""),
            (
                "GETRANGE s 0 x",
                "-ERR value is not an integer or out of range",
            ),
            ("SETRANGE s 15 xy", ":17"),
            ("GET s", "\"Thisisastring\\x00\\x00xy\""),
            ("SETRANGE s -1 x", "-ERR offset is out of range"),
            (
                "SETRANGE s 536870912 x",
                "-ERR string exceeds maximum allowed size (proto-max-bulk-len)",
            ),
            (
                "SETRANGE s 9223372036854775807 x",
                "-ERR string exceeds maximum allowed size (proto-max-bulk-len)",
            ),
            ("SETRANGE nokey 5 x", ":6"),
            ("GET nokey", "\"\\x00\\x00\\x00\\x00\\x00x\""),
            ("INCRBYFLOAT f 0.1", "\"0.1\""),
            ("INCRBYFLOAT f 10.4", "\"10.5\""),
            ("INCRBYFLOAT f 1e-17", "\"10.50000000000000001\""),
            ("INCRBYFLOAT f -10.50000000000000001", "\"0\""),
            ("INCRBYFLOAT f 5.0e3", "\"5000\""),
            ("INCRBYFLOAT f 0x10", "\"5016\""),
            ("INCRBYFLOAT f abc", "-ERR value is not a valid float"),
            ("INCRBYFLOAT s 1", "-ERR value is not a valid float"),
            (
                "INCRBYFLOAT f inf",
                "-ERR increment would produce NaN or Infinity",
            ),
            ("INCRBYFLOAT f 1e5000", "-ERR value is not a valid float"),
            ("SET big 1e4932", "+OK"),
            (
                "INCRBYFLOAT big 1e4932",
                "-ERR increment would produce NaN or Infinity",
            ),
        ],
    );
    // An empty value writes nothing, at any offset.
    assert_eq!(
        c.call(&[b"SETRANGE", b"none", b"9223372036854775807", b""]),
        Reply::Int(0)
    );
    assert_eq!(c.call(&[b"EXISTS", b"none"]), Reply::Int(0));
}

#[test]
fn bit_commands_answer_as_redis() {
    let elsa = Elsa::start(&[]);
    let mut c = raw(&elsa);
    expect(
        &mut c,
        &[
            ("SETBIT b 7 1", ":0"),
            ("SETBIT b 7 1", ":1"),
            ("GET b", "\"\\x01\""),
            ("SETBIT b 17 0", ":0"),
            ("STRLEN b", ":3"),
            ("GETBIT b 7", ":1"),
            ("GETBIT b 4294967295", ":0"),
            (
                "GETBIT b 4294967296",
                "-ERR bit offset is not an integer or out of range",
            ),
            (
                "SETBIT b 4294967296 1",
                "-ERR bit offset is not an integer or out of range",
            ),
            (
                "SETBIT b -1 1",
                "-ERR bit offset is not an integer or out of range",
            ),
            ("SETBIT b 0 2", "-ERR bit is not an integer or out of range"),
            ("SET k foobar", "+OK"),
            ("BITCOUNT k", ":26"),
            ("BITCOUNT k 1 1", ":6"),
            ("BITCOUNT k 5 30 BIT", ":17"),
            ("BITCOUNT k -2 -1 bit", ":1"),
            ("BITCOUNT k -9223372036854775808 9223372036854775807", ":26"),
            ("BITCOUNT k -9223372036854775808 -1 BIT", ":26"),
            ("BITCOUNT k 0 9223372036854775807 BIT", ":26"),
            ("BITCOUNT k -1 -2 FOO", ":0"),
            ("BITCOUNT k 0 1 FOO", "-ERR syntax error"),
            ("BITCOUNT k 0", "-ERR syntax error"),
            (
                "BITCOUNT k a b",
                "-ERR value is not an integer or out of range",
            ),
            ("BITCOUNT nokey a b", ":0"),
            ("BITPOS k 1", ":1"),
            ("BITPOS k 0 2", ":16"),
            ("BITPOS k 1 7 15 BIT", ":9"),
            ("BITPOS k 0 -1 -1 BYTE", ":40"),
            ("BITPOS k 2", "-ERR The bit argument must be 1 or 0."),
            ("BITPOS nokey 1 x", ":-1"),
            ("BITPOS nokey 0", ":0"),
            ("BITPOS k 1 0 x FOO", "-ERR syntax error"),
            (
                "BITPOS k 1 x 1 FOO",
                "-ERR value is not an integer or out of range",
            ),
        ],
    );
}

#[test]
fn key_commands_answer_as_redis() {
    let elsa = Elsa::start(&["--workers", "2"]);
    let mut c = raw(&elsa);
    expect(
        &mut c,
        &[
            ("SET a 1", "+OK"),
            ("SET e v EXAT 4000000000", "+OK"),
            ("TOUCH a e nokey a", ":3"),
            ("EXPIRETIME a", ":-1"),
            ("EXPIRETIME nokey", ":-2"),
            ("EXPIRETIME e", ":4000000000"),
            ("PEXPIRETIME e", ":4000000000000"),
            ("RENAME nokey x", "-ERR no such key"),
            ("RENAME a a", "+OK"),
            ("RENAMENX a a", ":0"),
            ("RENAME e e2", "+OK"),
            ("EXISTS e", ":0"),
            ("PEXPIRETIME e2", ":4000000000000"),
            ("RENAMENX a e2", ":0"),
            ("RENAMENX a b", ":1"),
            ("COPY b c", ":1"),
            ("COPY b c", ":0"),
            ("COPY e2 c REPLACE", ":1"),
            ("GET c", "\"v\""),
            ("PEXPIRETIME c", ":4000000000000"),
            (
                "COPY c c",
                "-ERR source and destination objects are the same",
            ),
            ("COPY c d DB 0", ":1"),
            (
                "COPY c d DB abc",
                "-ERR value is not an integer or out of range",
            ),
            ("COPY c d DB 16", "-ERR DB index is out of range"),
            ("COPY c d FOO", "-ERR syntax error"),
            ("COPY nokey d", ":0"),
            ("SET n 5", "+OK"),
            ("OBJECT ENCODING n", "\"int\""),
            ("OBJECT REFCOUNT n", ":2147483647"),
            ("OBJECT ENCODING c", "\"embstr\""),
            ("OBJECT REFCOUNT c", ":1"),
            ("OBJECT IDLETIME nokey", "(nil bulk $-1)"),
            (
                "OBJECT FREQ n",
                "-ERR An LFU maxmemory policy is not selected, access frequency not tracked. \
                 Please note that when switching between policies at runtime LRU and LFU data \
                 will take some time to adjust.",
            ),
            (
                "OBJECT FOO n",
                "-ERR unknown subcommand 'FOO'. Try OBJECT HELP.",
            ),
            (
                "OBJECT ENCODING",
                "-ERR wrong number of arguments for 'object|encoding' command",
            ),
            ("MEMORY USAGE nokey", "(nil bulk $-1)"),
            ("MEMORY USAGE n SAMPLES -1", "-ERR syntax error"),
            ("MEMORY USAGE nokey FOO", "-ERR syntax error"),
            ("MULTI", "+OK"),
            (
                "OBJECT FOO n",
                "-ERR unknown subcommand 'FOO'. Try OBJECT HELP.",
            ),
            (
                "EXEC",
                "-EXECABORT Transaction discarded because of previous errors.",
            ),
            ("FLUSHALL", "+OK"),
            ("RANDOMKEY", "(nil bulk $-1)"),
            ("SET only 1", "+OK"),
            ("RANDOMKEY", "\"only\""),
        ],
    );
    let help = c.call_line("OBJECT HELP");
    assert!(
        help.starts_with("[+OBJECT <subcommand> [<arg> [value] [opt] ...]. Subcommands are:"),
        "{help}"
    );
    assert!(help.ends_with("+HELP, +    Prints this help.]"), "{help}");
    assert!(
        matches!(c.call(&[b"MEMORY", b"USAGE", b"only"]), Reply::Int(n) if n > 0),
        "MEMORY USAGE answers a size"
    );
}

/// Both keys as of one moment: MGET (one atomic read across shards) on
/// even rounds, a pipelined MULTI / GET / GET / EXEC on odd ones.
///
/// Not two pipelined GETs: a pipeline of lone commands runs as of one
/// moment only while none of its keys is held; under contention it runs
/// command by command, in order (`docs/transactions.md`), so its second
/// GET may see a later commit than its first — with RENAME looping, both
/// keys missing or both present is then a correct answer.
fn read_both(r: &mut redis::Connection, a: &str, b: &str, round: usize) -> Vec<Option<String>> {
    if round % 2 == 0 {
        return redis::cmd("MGET").arg(a).arg(b).query(r).unwrap();
    }
    let (x, y): (Option<String>, Option<String>) = redis::pipe()
        .atomic()
        .cmd("GET")
        .arg(a)
        .cmd("GET")
        .arg(b)
        .query(r)
        .unwrap();
    vec![x, y]
}

#[test]
fn rename_is_atomic_across_shards() {
    // One client moves a value back and forth between two keys on
    // different shards; another reads both at once. Each RENAME is one
    // commit: exactly one key exists at any moment, never neither, never
    // both.
    let elsa = Elsa::start(&["--workers", "2"]);
    let mut w = elsa.conn();
    let (a, b) = keys_on_two_shards(&mut w);
    let _: () = w.set(&a, "v").unwrap();
    let writer = {
        let (a, b) = (a.clone(), b.clone());
        std::thread::spawn(move || {
            for _ in 0..1500 {
                let _: () = redis::cmd("RENAME").arg(&a).arg(&b).query(&mut w).unwrap();
                let _: () = redis::cmd("RENAME").arg(&b).arg(&a).query(&mut w).unwrap();
            }
        })
    };
    let mut r = elsa.conn();
    let (mut reads, mut torn) = (0, 0);
    while !writer.is_finished() || reads < 10 {
        let got = read_both(&mut r, &a, &b, reads);
        reads += 1;
        if got.iter().filter(|v| v.is_some()).count() != 1 {
            torn += 1;
            eprintln!("torn read of {a} and {b}: {got:?}");
        }
    }
    writer.join().unwrap();
    eprintln!("{reads} reads, {torn} torn");
    assert_eq!(torn, 0, "a reader saw the value in neither key or in both");
    let got: Vec<Option<String>> = redis::cmd("MGET").arg(&a).arg(&b).query(&mut r).unwrap();
    assert_eq!(
        got,
        [Some("v".to_string()), None],
        "3000 renames: back home"
    );
}

#[test]
fn writers_are_not_starved_by_readers_holding_their_keys() {
    // Readers that read two keys on two shards at once without pause (each
    // MGET holds both for its read) used to refuse every prepare of a
    // writer of the same keys, until it gave up with TRYAGAIN after 10 s.
    // A writer that lost once now waits its turn at each shard.
    let elsa = Elsa::start(&["--workers", "2"]);
    let mut w = elsa.conn();
    let (a, b) = keys_on_two_shards(&mut w);
    let _: () = redis::cmd("MSET")
        .arg(&a)
        .arg(0)
        .arg(&b)
        .arg(0)
        .query(&mut w)
        .unwrap();
    let done = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let readers = common::looping_pair_readers(&elsa, (&a, &b), 3, &done, |x, y| {
        // (i, i) after MSET and after SET; (nil, i) after the RENAME
        // between them.
        assert!(
            y.is_some() && (x.is_none() || x == y),
            "an MGET saw half of a commit: {x:?} {y:?}"
        );
    });
    for i in 1..=300 {
        let r: redis::RedisResult<()> = redis::cmd("MSET")
            .arg(&a)
            .arg(i)
            .arg(&b)
            .arg(i)
            .query(&mut w);
        if let Err(e) = r {
            done.store(true, std::sync::atomic::Ordering::Relaxed);
            panic!("MSET {i} of 300 failed under readers: {e}");
        }
        let _: () = redis::cmd("RENAME").arg(&a).arg(&b).query(&mut w).unwrap();
        let _: () = redis::cmd("SET").arg(&a).arg(i).query(&mut w).unwrap();
    }
    done.store(true, std::sync::atomic::Ordering::Relaxed);
    let reads: u64 = readers.into_iter().map(|r| r.join().unwrap()).sum();
    eprintln!("{reads} reads beside 300 MSETs and RENAMEs");
    let got: (i64, i64) = redis::cmd("MGET").arg(&a).arg(&b).query(&mut w).unwrap();
    assert_eq!(got, (300, 300));
}

#[test]
fn copy_in_exec_is_atomic_across_shards() {
    // Each EXEC bumps the source and copies it over the destination on
    // another shard; a reader must always see them equal.
    let elsa = Elsa::start(&["--workers", "2"]);
    let mut w = elsa.conn();
    let (a, b) = keys_on_two_shards(&mut w);
    let _: () = w.set(&a, 0).unwrap();
    let _: () = w.set(&b, 0).unwrap();
    let writer = {
        let (a, b) = (a.clone(), b.clone());
        std::thread::spawn(move || {
            for _ in 0..1500 {
                let _: (i64, i64) = redis::pipe()
                    .atomic()
                    .cmd("INCR")
                    .arg(&a)
                    .cmd("COPY")
                    .arg(&a)
                    .arg(&b)
                    .arg("REPLACE")
                    .query(&mut w)
                    .unwrap();
            }
        })
    };
    let mut r = elsa.conn();
    let mut reads = 0;
    while !writer.is_finished() || reads < 10 {
        let got = read_both(&mut r, &a, &b, reads);
        assert_eq!(
            got[0], got[1],
            "read {a} and {b} between the INCR and the COPY"
        );
        reads += 1;
    }
    writer.join().unwrap();
    assert_eq!(
        redis::cmd("GET").arg(&b).query::<i64>(&mut r).unwrap(),
        1500
    );
}

/// A collection written over an expired collection of another type does
/// not inherit its expiry (the key's collection TTL is one per key). Before
/// the fix, `SADD` on an expired sorted set made a set that showed nothing.
#[test]
fn a_new_collection_over_an_expired_one_of_another_type_shows() {
    let elsa = Elsa::start(&[]);
    let mut c = elsa.conn();
    let cases: [(&str, &[&str], &str); 3] = [
        ("ZINCRBY", &["1", "m"], "set"),
        ("HSET", &["f", "v"], "zset"),
        ("SADD", &["m"], "hash"),
    ];
    for (i, (first, args, _)) in cases.iter().enumerate() {
        let k = format!("k{i}");
        let _: redis::Value = redis::cmd(first).arg(&k).arg(*args).query(&mut c).unwrap();
        let _: i64 = redis::cmd("PEXPIRE").arg(&k).arg(20).query(&mut c).unwrap();
    }
    std::thread::sleep(std::time::Duration::from_millis(100));
    for (i, (_, _, then)) in cases.iter().enumerate() {
        let k = format!("k{i}");
        let write = match *then {
            "set" => redis::cmd("SADD").arg(&k).arg("x").clone(),
            "zset" => redis::cmd("ZADD").arg(&k).arg(1).arg("x").clone(),
            _ => redis::cmd("HSET").arg(&k).arg("x").arg("1").clone(),
        };
        let added: i64 = write.query(&mut c).unwrap();
        assert_eq!(added, 1, "{k}: a new {then}");
        let kind: String = redis::cmd("TYPE").arg(&k).query(&mut c).unwrap();
        assert_eq!(kind, *then, "{k}: the new {then} shows");
        let ttl: i64 = c.ttl(&k).unwrap();
        assert_eq!(ttl, -1, "{k}: no expiry inherited");
    }
}

/// A collection emptied by removing its last element is gone, as Redis
/// deletes it: one written again under that key starts without the old
/// expiry. (Before the fix Elsa kept the old TTL: `EXPIRE s 100; SREM s
/// a; SADD s b; TTL s` answered 100, Redis -1.)
#[test]
fn a_collection_emptied_and_written_again_has_no_expiry() {
    let elsa = Elsa::start(&[]);
    let mut c = elsa.conn();
    // (creating command, its arguments, the command emptying it, the write after)
    type Case<'a> = (&'a str, &'a [&'a str], &'a [&'a str], &'a [&'a str]);
    let cases: [Case; 4] = [
        ("SADD", &["a"], &["SREM", "k0", "a"], &["SADD", "k0", "b"]),
        (
            "HSET",
            &["f", "v"],
            &["HDEL", "k1", "f"],
            &["HSET", "k1", "g", "w"],
        ),
        (
            "ZADD",
            &["1", "m"],
            &["ZREM", "k2", "m"],
            &["ZADD", "k2", "2", "n"],
        ),
        ("RPUSH", &["x"], &["LPOP", "k3"], &["LPUSH", "k3", "y"]),
    ];
    for (i, (create, args, empty, again)) in cases.iter().enumerate() {
        let k = format!("k{i}");
        let _: redis::Value = redis::cmd(create).arg(&k).arg(*args).query(&mut c).unwrap();
        let _: i64 = redis::cmd("EXPIRE").arg(&k).arg(100).query(&mut c).unwrap();
        let _: redis::Value = redis::cmd(empty[0]).arg(&empty[1..]).query(&mut c).unwrap();
        let exists: i64 = c.exists(&k).unwrap();
        assert_eq!(exists, 0, "{k}: emptied, gone");
        let _: redis::Value = redis::cmd(again[0]).arg(&again[1..]).query(&mut c).unwrap();
        let ttl: i64 = c.ttl(&k).unwrap();
        assert_eq!(ttl, -1, "{k}: written again after {}, no expiry", empty[0]);
    }
}

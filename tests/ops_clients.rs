//! Connections and control against a real redis-server 7.0: CLIENT LIST /
//! INFO (field names, order and the values both servers must agree on),
//! CLIENT KILL in every form, CLIENT REPLY, CLIENT PAUSE WRITE, CLIENT
//! UNBLOCK, MONITOR's lines, SHUTDOWN (its errors, exit code and what a
//! restart reads back), INFO clients and `redis-cli --stat`.
//!
//! Every scenario runs the same requests on Elsa and on redis-server and
//! compares transcripts; what legitimately differs (ids, ports, ages,
//! buffer sizes, timestamps) is normalised where it is read, with the
//! reason beside it.

mod common;

#[path = "differential/resp.rs"]
#[allow(dead_code)]
mod resp;

use std::collections::HashMap;
use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::redis_server::RedisServer;
use common::{Elsa, Node, TestDir};
use resp::{Conn, Reply};

/// Redis 7.0's CLIENT LIST fields, in order; Elsa adds its own after them.
const ELSA_EXTRAS: &[&str] = &["lib-name", "lib-ver", "txn"];

/// Both servers, Elsa first.
fn servers() -> (Elsa, RedisServer) {
    (Elsa::start(&[]), RedisServer::start())
}

fn connect(port: u16) -> Conn {
    Conn::connect(port).expect("connect")
}

/// A reply's text (bulk or verbatim), for CLIENT LIST / INFO / INFO.
fn text(r: Reply) -> String {
    match r {
        Reply::Bulk(b) | Reply::Verbatim(_, b) => String::from_utf8(b).expect("utf-8"),
        other => panic!("expected text, got {other}"),
    }
}

/// One CLIENT LIST line as (field, value) pairs in order.
fn fields(line: &str) -> Vec<(String, String)> {
    line.split(' ')
        .map(|kv| {
            let (k, v) = kv.split_once('=').unwrap_or((kv, ""));
            (k.to_string(), v.to_string())
        })
        .collect()
}

/// Redis's fields only (Elsa's extras, which come last, dropped).
fn redis_fields(line: &str) -> Vec<(String, String)> {
    fields(line)
        .into_iter()
        .filter(|(k, _)| !ELSA_EXTRAS.contains(&k.as_str()))
        .collect()
}

fn field(line: &str, name: &str) -> String {
    fields(line)
        .into_iter()
        .find(|(k, _)| k == name)
        .map(|(_, v)| v)
        .unwrap_or_else(|| panic!("no {name} in {line}"))
}

fn client_list(c: &mut Conn, extra: &[&str]) -> Vec<String> {
    let mut args: Vec<&[u8]> = vec![b"CLIENT", b"LIST"];
    args.extend(extra.iter().map(|a| a.as_bytes()));
    text(c.call(&args)).lines().map(str::to_string).collect()
}

/// The line of the connection named `name`.
fn line_named(lines: &[String], name: &str) -> String {
    lines
        .iter()
        .find(|l| field(l, "name") == name)
        .unwrap_or_else(|| panic!("no client named {name} in {lines:?}"))
        .clone()
}

/// Polls (a hang guard, not a timing assertion) until `done` holds.
fn eventually(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while !done() {
        assert!(Instant::now() < deadline, "never happened: {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn ok(c: &mut Conn, line: &str) {
    assert_eq!(c.call_line(line), "+OK", "{line}");
}

/// The fields of each named connection whose values both servers must
/// agree on, after the same commands: name, db, sub/psub/ssub counts,
/// multi, flags, cmd, user, redir, resp.
/// Field names in order, the agreed values per named connection, and the
/// names TYPE / ID selections return.
type Agreed = (Vec<String>, Vec<Vec<(String, String)>>, Vec<String>);

fn agreed_values(port: u16) -> Agreed {
    let mut a = connect(port);
    ok(&mut a, "CLIENT SETNAME alpha");
    ok(&mut a, "SELECT 3");
    let mut b = connect(port);
    ok(&mut b, "CLIENT SETNAME beta");
    b.send(&[
        vec![b"SUBSCRIBE".to_vec(), b"c1".to_vec(), b"c2".to_vec()],
        vec![b"PSUBSCRIBE".to_vec(), b"p*".to_vec()],
    ]);
    for _ in 0..3 {
        assert!(matches!(b.read(), Reply::Array(_)));
    }
    let mut c = connect(port);
    ok(&mut c, "CLIENT SETNAME gamma");
    ok(&mut c, "MULTI");
    assert_eq!(c.call_line("SET k v"), "+QUEUED");
    let mut d = connect(port);
    assert!(matches!(d.call(&[b"HELLO", b"3"]), Reply::Map(_)));
    ok(&mut d, "CLIENT SETNAME delta");
    assert!(d.call_line("CLIENT TRACKING on").contains("OK"));
    let mut e = connect(port);
    ok(&mut e, "CLIENT SETNAME eps");
    assert!(matches!(e.call(&[b"SSUBSCRIBE", b"s1"]), Reply::Array(_)));

    let lines = client_list(&mut a, &[]);
    let mut values = Vec::new();
    for name in ["alpha", "beta", "gamma", "delta", "eps"] {
        let l = line_named(&lines, name);
        values.push(
            fields(&l)
                .into_iter()
                .filter(|(k, _)| {
                    [
                        "name", "db", "sub", "psub", "ssub", "multi", "flags", "cmd", "user",
                        "redir", "resp",
                    ]
                    .contains(&k.as_str())
                })
                .collect(),
        );
    }
    let names: Vec<String> = redis_fields(&line_named(&lines, "alpha"))
        .into_iter()
        .map(|(k, _)| k)
        .collect();
    // CLIENT LIST TYPE and ID select as Redis does.
    let of = |ls: Vec<String>| -> Vec<String> { ls.iter().map(|l| field(l, "name")).collect() };
    let mut selected = Vec::new();
    selected.extend(of(client_list(&mut a, &["TYPE", "pubsub"])));
    selected.push("|".into());
    let normal = of(client_list(&mut a, &["TYPE", "normal"]));
    selected.extend(normal.into_iter().filter(|n| !n.is_empty()));
    selected.push("|".into());
    let id = |l: &str| field(l, "id");
    let (ida, idc) = (
        id(&line_named(&lines, "alpha")),
        id(&line_named(&lines, "gamma")),
    );
    selected.extend(of(client_list(&mut a, &["ID", &idc, "999999", &ida])));
    selected.push("|".into());
    selected.extend(of(client_list(&mut a, &["TYPE", "replica"])));
    selected.extend(of(client_list(&mut a, &["TYPE", "master"])));
    (names, values, selected)
}

#[test]
fn client_list_has_redis_fields_in_order_and_the_same_values() {
    let (elsa, redis) = servers();
    let (e_names, e_values, e_sel) = agreed_values(elsa.port);
    let (r_names, r_values, r_sel) = agreed_values(redis.port);
    assert_eq!(e_names, r_names, "field names and order");
    for (e, r) in e_values.iter().zip(&r_values) {
        assert_eq!(e, r, "values Elsa and Redis must agree on");
    }
    assert_eq!(e_sel, r_sel, "TYPE and ID selections");
    // Spot checks of what the comparison covers.
    let flags: Vec<&str> = e_values
        .iter()
        .map(|v| v.iter().find(|(k, _)| k == "flags").unwrap().1.as_str())
        .collect();
    assert_eq!(flags, ["N", "P", "x", "t", "P"]);

    // Elsa's own fields come after Redis's, and CLIENT INFO is the same line.
    let mut c = connect(elsa.port);
    let info = text(c.call(&[b"CLIENT", b"INFO"]));
    let names: Vec<String> = fields(info.trim_end())
        .into_iter()
        .map(|(k, _)| k)
        .collect();
    let n = r_names.len();
    assert_eq!(names[..n], r_names[..]);
    assert_eq!(
        names[n..],
        ELSA_EXTRAS
            .iter()
            .map(|s| s.to_string())
            .collect::<Vec<_>>()
    );
    assert_eq!(field(info.trim_end(), "cmd"), "client|info");
    let mut r = connect(redis.port);
    let rinfo = text(r.call(&[b"CLIENT", b"INFO"]));
    let rnames: Vec<String> = fields(rinfo.trim_end())
        .into_iter()
        .map(|(k, _)| k)
        .collect();
    assert_eq!(rnames, r_names);
    assert!(info.ends_with('\n') && rinfo.ends_with('\n'));
}

/// Requests whose replies must be the same on both servers (none depends
/// on ids or addresses).
const SAME_REPLIES: &[&str] = &[
    "CLIENT",
    "CLIENT LIST foo",
    "CLIENT LIST TYPE",
    "CLIENT LIST TYPE foo",
    "CLIENT LIST ID",
    "CLIENT LIST ID abc",
    "CLIENT LIST ID 1 x",
    "CLIENT LIST TYPE normal extra",
    "CLIENT INFO x",
    "CLIENT KILL",
    "CLIENT KILL 1.2.3.4:5",
    "CLIENT KILL ID",
    "CLIENT KILL ID abc",
    "CLIENT KILL ID 0",
    "CLIENT KILL ID -1",
    "CLIENT KILL ID 999999",
    "CLIENT KILL TYPE foo",
    "CLIENT KILL TYPE master",
    "CLIENT KILL USER nosuch",
    "CLIENT KILL USER default SKIPME maybe",
    "CLIENT KILL ADDR 1.2.3.4:5",
    "CLIENT KILL LADDR 1.2.3.4:5",
    "CLIENT KILL ADDR 1.2.3.4:5 SKIPME",
    "CLIENT KILL FOO bar",
    "CLIENT KILL a b c",
    "CLIENT PAUSE",
    "CLIENT PAUSE abc",
    "CLIENT PAUSE -1",
    "CLIENT PAUSE 10 foo",
    "CLIENT PAUSE abc foo",
    "CLIENT PAUSE 10 WRITE x",
    "CLIENT PAUSE 0",
    "CLIENT PAUSE 0 WRITE",
    "CLIENT UNPAUSE",
    "CLIENT UNPAUSE x",
    "CLIENT REPLY",
    "CLIENT REPLY foo",
    "CLIENT REPLY ON",
    "CLIENT REPLY on x",
    "CLIENT NO-EVICT",
    "CLIENT NO-EVICT foo",
    "CLIENT NO-EVICT on",
    "CLIENT NO-EVICT OFF",
    "CLIENT UNBLOCK",
    "CLIENT UNBLOCK abc",
    "CLIENT UNBLOCK 1 foo",
    "CLIENT UNBLOCK abc foo",
    "CLIENT UNBLOCK 999999",
    "CLIENT UNBLOCK 999999 ERROR",
    "CLIENT UNBLOCK 1 timeout x",
    "CLIENT NOSUCH",
    "CLIENT ID x",
    "CLIENT GETNAME x",
    "CLIENT SETNAME",
    "CLIENT SETNAME a b",
    "CLIENT SETNAME a\nb",
    "CLIENT GETREDIR",
    "CLIENT GETREDIR x",
    "CLIENT HELP",
    "CLIENT HELP x",
    "MONITOR x",
    "SHUTDOWN ABORT",
    "SHUTDOWN abort NOW",
    "SHUTDOWN SAVE NOSAVE",
    "SHUTDOWN NOSAVE FORCE later",
    "SHUTDOWN later",
    "MULTI",
    "SHUTDOWN",
    "MONITOR",
    "DISCARD",
    "MULTI",
    "MONITOR",
    "EXEC",
];

#[test]
fn client_monitor_and_shutdown_errors_match_redis() {
    let (elsa, redis) = servers();
    let mut e = connect(elsa.port);
    let mut r = connect(redis.port);
    for req in SAME_REPLIES {
        assert_eq!(e.call_line(req), r.call_line(req), "{req}");
    }
}

/// A connection's `addr` and `laddr` as CLIENT INFO gives them.
fn addrs(c: &mut Conn) -> (String, String) {
    let info = text(c.call(&[b"CLIENT", b"INFO"]));
    (
        field(info.trim_end(), "addr"),
        field(info.trim_end(), "laddr"),
    )
}

/// True when the server closed `c` (an idle connection: nothing else can
/// come).
fn closed(c: &mut Conn) -> bool {
    matches!(c.read(), Reply::Broken(why) if why == "connection closed")
}

/// CLIENT KILL in every form; the transcript of replies and of which
/// connections closed.
fn kill_transcript(port: u16) -> Vec<String> {
    let mut t = Vec::new();
    let mut k = connect(port);
    ok(&mut k, "CLIENT SETNAME killer");
    let own_id = k.call_line("CLIENT ID").trim_start_matches(':').to_string();
    // Wait until only the killer is connected (readiness probes gone).
    eventually("only the killer connected", || {
        client_list(&mut k, &[]).len() == 1
    });

    let mut v = connect(port);
    let (addr, laddr) = addrs(&mut v);
    t.push(k.call_line(&format!("CLIENT KILL {addr}")));
    t.push(format!("old form closed: {}", closed(&mut v)));
    t.push(k.call_line(&format!("CLIENT KILL {addr}")));

    let mut v = connect(port);
    let id = v.call_line("CLIENT ID").trim_start_matches(':').to_string();
    t.push(k.call_line(&format!("CLIENT KILL ID {id}")));
    t.push(format!("ID closed: {}", closed(&mut v)));

    let mut v = connect(port);
    let mut w = connect(port);
    let (vaddr, _) = addrs(&mut v);
    t.push(k.call_line(&format!("CLIENT KILL ADDR {vaddr} SKIPME yes")));
    t.push(format!("ADDR closed: {}", closed(&mut v)));
    eventually("two connected", || client_list(&mut k, &[]).len() == 2);
    t.push(k.call_line(&format!("CLIENT KILL LADDR {laddr}")));
    t.push(format!("LADDR closed: {}", closed(&mut w)));

    eventually("one connected", || client_list(&mut k, &[]).len() == 1);
    ok(&mut k, "ACL SETUSER bob on nopass +@all ~* &*");
    let mut v = connect(port);
    ok(&mut v, "AUTH bob x");
    let mut w = connect(port);
    t.push(k.call_line("CLIENT KILL USER bob"));
    t.push(format!("USER closed: {}", closed(&mut v)));

    let mut s = connect(port);
    assert!(matches!(s.call(&[b"SUBSCRIBE", b"ch"]), Reply::Array(_)));
    t.push(k.call_line("CLIENT KILL TYPE pubsub"));
    t.push(format!("TYPE closed: {}", closed(&mut s)));
    t.push(k.call_line("CLIENT KILL TYPE normal"));
    t.push(format!("TYPE normal closed: {}", closed(&mut w)));
    t.push(k.call_line("CLIENT KILL TYPE normal SKIPME yes"));
    // The caller itself, new form: the count, then the connection closes.
    t.push(k.call_line(&format!("CLIENT KILL ID {own_id} SKIPME no")));
    t.push(format!("self closed: {}", closed(&mut k)));
    // The old form may kill the caller.
    let mut k = connect(port);
    let (kaddr, _) = addrs(&mut k);
    t.push(k.call_line(&format!("CLIENT KILL {kaddr}")));
    t.push(format!("self (old form) closed: {}", closed(&mut k)));
    t
}

#[test]
fn client_kill_every_form_answers_and_closes_as_redis() {
    let (elsa, redis) = servers();
    let e = kill_transcript(elsa.port);
    let r = kill_transcript(redis.port);
    assert_eq!(e, r);
    // What the transcript says, spelled out.
    assert_eq!(
        e,
        [
            "+OK",
            "old form closed: true",
            "-ERR No such client",
            ":1",
            "ID closed: true",
            ":1",
            "ADDR closed: true",
            ":1",
            "LADDR closed: true",
            ":1",
            "USER closed: true",
            ":1",
            "TYPE closed: true",
            ":1",
            "TYPE normal closed: true",
            ":0",
            ":1",
            "self closed: true",
            "+OK",
            "self (old form) closed: true",
        ]
    );
}

fn reply_transcript(port: u16) -> Vec<String> {
    let mut c = connect(port);
    let reqs: Vec<Vec<Vec<u8>>> = [
        "CLIENT REPLY SKIP",
        "SET a 1",
        "GET a",
        "CLIENT REPLY OFF",
        "SET b 2",
        "GET b",
        "NOSUCHCOMMAND",
        "CLIENT REPLY SKIP",
        "PING",
        "CLIENT REPLY ON",
        "GET b",
        "CLIENT REPLY SKIP",
        "CLIENT REPLY SKIP",
        "GET a",
        "ECHO last",
    ]
    .iter()
    .map(|l| l.split(' ').map(|a| a.as_bytes().to_vec()).collect())
    .collect();
    c.send(&reqs);
    (0..4).map(|_| c.read().to_string()).collect()
}

#[test]
fn client_reply_off_and_skip_drop_the_replies_redis_drops() {
    let (elsa, redis) = servers();
    let e = reply_transcript(elsa.port);
    assert_eq!(e, reply_transcript(redis.port));
    // GET a after SKIP; ON's +OK and GET b after OFF (the writes ran);
    // a second SKIP skips the next command only: ECHO answers.
    assert_eq!(e, ["\"1\"", "+OK", "\"2\"", "\"last\""]);
}

fn info_clients(c: &mut Conn) -> Vec<(String, String)> {
    text(c.call(&[b"INFO", b"clients"]))
        .lines()
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

fn info_field(c: &mut Conn, name: &str) -> String {
    info_clients(c)
        .into_iter()
        .find(|(k, _)| k == name)
        .unwrap_or_else(|| panic!("no {name}"))
        .1
}

/// CLIENT PAUSE WRITE: the write waits (shown blocked, `cmd=set`) while a
/// read is answered; UNPAUSE lets it through.
fn pause_transcript(port: u16) -> Vec<String> {
    let mut t = Vec::new();
    let mut p = connect(port);
    let mut w = connect(port);
    ok(&mut w, "CLIENT SETNAME writer");
    let mut r = connect(port);
    t.push(p.call_line("CLIENT PAUSE 1000000 WRITE"));
    w.send(&[vec![b"SET".to_vec(), b"k".to_vec(), b"v".to_vec()]]);
    eventually("the write is held", || {
        let l = line_named(&client_list(&mut p, &[]), "writer");
        field(&l, "flags") == "b" && field(&l, "cmd") == "set"
    });
    t.push(format!(
        "blocked_clients:{}",
        info_field(&mut p, "blocked_clients")
    ));
    t.push(format!(
        "in timeout table:{}",
        info_field(&mut p, "clients_in_timeout_table")
    ));
    // The read answers while the write waits: the write is not applied.
    t.push(r.call_line("GET k"));
    t.push(r.call_line("PING"));
    t.push(p.call_line("CLIENT UNPAUSE"));
    t.push(w.read().to_string());
    t.push(r.call_line("GET k"));
    t.push(format!(
        "blocked_clients:{}",
        info_field(&mut p, "blocked_clients")
    ));
    // A pause of 0 ms holds nothing.
    t.push(p.call_line("CLIENT PAUSE 0 ALL"));
    t.push(r.call_line("GET k"));
    t
}

#[test]
fn client_pause_write_holds_writes_and_answers_reads() {
    let (elsa, redis) = servers();
    let e = pause_transcript(elsa.port);
    assert_eq!(e, pause_transcript(redis.port));
    assert_eq!(
        e,
        [
            "+OK",
            "blocked_clients:1",
            "in timeout table:0",
            "(nil bulk $-1)",
            "+PONG",
            "+OK",
            "+OK",
            "\"v\"",
            "blocked_clients:0",
            "+OK",
            "\"v\"",
        ]
    );
}

/// Under CLIENT PAUSE WRITE, what Redis answers at once: a write of the
/// wrong arity (its error), and scripts and functions that declare
/// `no-writes` (EVAL, EVAL_RO, FCALL, FCALL_RO); a script that declares
/// writes waits. (Elsa held all of them until the pause ended.)
fn pause_lets_through_transcript(port: u16) -> Vec<String> {
    let mut t = Vec::new();
    let mut p = connect(port);
    let mut c = connect(port);
    let lib = "#!lua name=ro\nredis.register_function{function_name='ro', callback=function(keys) return redis.call('GET', keys[1]) end, flags={'no-writes'}}";
    let call = |c: &mut Conn, args: &[&str]| {
        let args: Vec<&[u8]> = args.iter().map(|a| a.as_bytes()).collect();
        c.call(&args).to_string()
    };
    t.push(call(&mut c, &["FUNCTION", "LOAD", lib]));
    t.push(c.call_line("SET k v"));
    t.push(p.call_line("CLIENT PAUSE 1000000 WRITE"));
    t.push(c.call_line("SET k"));
    t.push(call(
        &mut c,
        &[
            "EVAL",
            "#!lua flags=no-writes\nreturn redis.call('GET', KEYS[1])",
            "1",
            "k",
        ],
    ));
    t.push(call(
        &mut c,
        &["EVAL_RO", "return redis.call('GET', KEYS[1])", "1", "k"],
    ));
    t.push(c.call_line("FCALL ro 1 k"));
    t.push(c.call_line("FCALL_RO ro 1 k"));
    // A script declaring writes waits for the unpause.
    let mut w = connect(port);
    ok(&mut w, "CLIENT SETNAME writer");
    w.send(&[vec![
        b"EVAL".to_vec(),
        b"#!lua\nreturn redis.call('SET', KEYS[1], 'w')".to_vec(),
        b"1".to_vec(),
        b"k".to_vec(),
    ]]);
    eventually("the script is held", || {
        field(&line_named(&client_list(&mut p, &[]), "writer"), "flags") == "b"
    });
    // FUNCTION's writing subcommands wait too (Redis flags them
    // `write`); a wrong arity is answered at once, and FCALL_RO still runs.
    let mut f = connect(port);
    ok(&mut f, "CLIENT SETNAME fwriter");
    f.send(&[vec![
        b"FUNCTION".to_vec(),
        b"DELETE".to_vec(),
        b"ro".to_vec(),
    ]]);
    eventually("the FUNCTION DELETE is held", || {
        field(&line_named(&client_list(&mut p, &[]), "fwriter"), "flags") == "b"
    });
    t.push(c.call_line("GET k"));
    t.push(c.call_line("FUNCTION DELETE"));
    t.push(c.call_line("FCALL_RO ro 1 k"));
    t.push(p.call_line("CLIENT UNPAUSE"));
    t.push(w.read().to_string());
    t.push(f.read().to_string());
    t.push(c.call_line("GET k"));
    t
}

#[test]
fn client_pause_write_answers_bad_arity_and_no_writes_scripts_as_redis() {
    // (And holds FUNCTION DELETE, as Redis does.)
    let (elsa, redis) = servers();
    let e = pause_lets_through_transcript(elsa.port);
    assert_eq!(e, pause_lets_through_transcript(redis.port));
    assert_eq!(
        e,
        [
            "\"ro\"",
            "+OK",
            "+OK",
            "-ERR wrong number of arguments for 'set' command",
            "\"v\"",
            "\"v\"",
            "\"v\"",
            "\"v\"",
            "\"v\"",
            "-ERR wrong number of arguments for 'function|delete' command",
            "\"v\"",
            "+OK",
            "+OK",
            "+OK",
            "\"w\"",
        ]
    );
}

/// BLPOP counted in blocked_clients, shown `b`, ended by CLIENT UNBLOCK
/// (TIMEOUT: the null reply; ERROR: `-UNBLOCKED …`); CLIENT KILL closes a
/// blocked connection.
fn unblock_transcript(port: u16) -> Vec<String> {
    let mut t = Vec::new();
    let mut a = connect(port);
    let mut b = connect(port);
    ok(&mut b, "CLIENT SETNAME blocked");
    let id = b.call_line("CLIENT ID").trim_start_matches(':').to_string();
    for how in ["TIMEOUT", "ERROR", "KILL"] {
        b.send(&[vec![
            b"BLPOP".to_vec(),
            b"nothing".to_vec(),
            b"100".to_vec(),
        ]]);
        eventually("BLPOP blocks", || {
            info_field(&mut a, "blocked_clients") == "1"
        });
        let l = line_named(&client_list(&mut a, &[]), "blocked");
        t.push(format!(
            "flags={} cmd={}",
            field(&l, "flags"),
            field(&l, "cmd")
        ));
        t.push(format!(
            "in timeout table:{}",
            info_field(&mut a, "clients_in_timeout_table")
        ));
        if how == "KILL" {
            t.push(a.call_line(&format!("CLIENT KILL ID {id}")));
            t.push(format!("closed: {}", closed(&mut b)));
        } else {
            t.push(a.call_line(&format!("CLIENT UNBLOCK {id} {how}")));
            t.push(b.read().to_string());
            t.push(a.call_line(&format!("CLIENT UNBLOCK {id}")));
        }
    }
    eventually("nothing blocked", || {
        info_field(&mut a, "blocked_clients") == "0"
    });
    t
}

#[test]
fn blocked_clients_are_counted_unblocked_and_killed_as_redis() {
    let (elsa, redis) = servers();
    let e = unblock_transcript(elsa.port);
    assert_eq!(e, unblock_transcript(redis.port));
    assert_eq!(e[3], "(nil array *-1)");
    assert_eq!(e[8], "-UNBLOCKED client unblocked via CLIENT UNBLOCK");
}

#[test]
fn info_clients_has_redis_fields_in_order() {
    let (elsa, redis) = servers();
    let names = |port| -> Vec<String> {
        info_clients(&mut connect(port))
            .into_iter()
            .map(|(k, _)| k)
            .collect()
    };
    assert_eq!(names(elsa.port), names(redis.port));
    let mut c = connect(elsa.port);
    let _d = connect(elsa.port);
    eventually("two clients", || {
        info_field(&mut c, "connected_clients") == "2"
    });
    let mut t = connect(elsa.port);
    assert!(t.call_line("CLIENT TRACKING on").contains("OK"));
    assert_eq!(info_field(&mut c, "tracking_clients"), "1");
    assert_eq!(info_field(&mut c, "blocked_clients"), "0");
    assert_eq!(info_field(&mut c, "maxclients"), "10000");
}

/// MONITOR's lines for one sequence of commands, with the timestamp and
/// the client's port taken out (both differ by nature).
fn monitor_lines(port: u16) -> Vec<String> {
    let mut m = connect(port);
    assert_eq!(m.call_line("MONITOR"), "+OK");
    let mut c = connect(port);
    let script: &[&[&[u8]]] = &[
        &[b"SET", b"k", b"a b"],
        &[b"GET", b"k"],
        &[b"SELECT", b"2"],
        &[b"set", b"x\ny\"\\", b"\x00\xff\x07\t"],
        &[b"MULTI"],
        &[b"INCR", b"n"],
        &[b"GET", b"n"],
        &[b"EXEC"],
        &[b"MULTI"],
        &[b"INCR", b"n"],
        &[b"DISCARD"],
        &[b"AUTH", b"nosuch", b"pw"],
        &[b"AUTH", b"pw"],
        &[b"HELLO", b"2", b"AUTH", b"default", b"pw"],
        &[b"CONFIG", b"GET", b"port"],
        &[b"CLIENT", b"ID"],
        &[b"NOSUCHCOMMAND", b"x"],
        &[b"GET"],
        &[b"LPUSH", b"l", b"1", b"2"],
        &[
            b"EVAL",
            b"redis.call('set', KEYS[1], ARGV[1]); return redis.call('get', KEYS[1])",
            b"1",
            b"sk",
            b"sv",
        ],
        &[b"EVAL", b"return redis.call('nosuch')", b"0"],
        &[b"PING", b"last"],
    ];
    for req in script {
        let _ = c.call(req);
    }
    let mut lines = Vec::new();
    loop {
        let r = m.read();
        let Reply::Simple(s) = r else {
            panic!("monitor got {r}")
        };
        let s = String::from_utf8(s).expect("ascii");
        // `1700000000.123456 [db 127.0.0.1:port] …`: drop the time and
        // the client's port.
        let (_, rest) = s.split_once(' ').expect("timestamp");
        let (addr, args) = rest.split_once("] ").expect("address");
        // (A script's commands show `lua` instead of an address: kept.)
        let (db, from) = addr.trim_start_matches('[').split_once(' ').unwrap();
        let from = if from == "lua" { " lua" } else { "" };
        let line = format!("[{db}{from}] {args}");
        let last = line.ends_with("\"PING\" \"last\"");
        lines.push(line);
        if last {
            return lines;
        }
    }
}

#[test]
fn monitor_shows_commands_as_redis() {
    let (elsa, redis) = servers();
    let e = monitor_lines(elsa.port);
    assert_eq!(e, monitor_lines(redis.port));
    assert!(e.contains(&r#"[2] "set" "x\ny\"\\" "\x00\xff\a\t""#.to_string()));
    assert!(e.contains(&r#"[2] "AUTH" "(redacted)" "(redacted)""#.to_string()));
    assert!(
        !e.iter().any(|l| l.contains("CONFIG")),
        "admin commands hidden"
    );
    assert!(
        e.contains(&r#"[2 lua] "set" "sk" "sv""#.to_string()),
        "{e:?}"
    );
}

#[test]
fn a_monitor_that_does_not_read_is_disconnected() {
    let elsa = Elsa::start(&["--client-output-buffer-limit-pubsub", "64kb 0 0"]);
    let mut m = connect(elsa.port);
    assert_eq!(m.call_line("MONITOR"), "+OK");
    let mut c = connect(elsa.port);
    ok(&mut c, "CLIENT SETNAME busy");
    let big = vec![b'x'; 16 * 1024];
    // The monitor reads nothing; the node stays up and cuts it off.
    eventually("the monitor is disconnected", || {
        let _ = c.call(&[b"SET", b"k", &big]);
        client_list(&mut c, &[]).len() == 1
    });
    assert_eq!(c.call_line("PING"), "+PONG");
}

/// Starts a node on `dir`, returns it with a connection.
fn node(dir: &TestDir) -> Node {
    Node::start(&dir.data(), &dir.log(), &[])
}

#[test]
fn shutdown_exits_zero_and_a_restart_reads_every_acknowledged_write() {
    let dir = TestDir::new("ops-shutdown");
    let mut expected: HashMap<String, String> = HashMap::new();
    let mut lists: Vec<String> = Vec::new();
    for (round, form) in ["SHUTDOWN NOSAVE", "SHUTDOWN", "SHUTDOWN SAVE NOW FORCE"]
        .iter()
        .enumerate()
    {
        let mut n = node(&dir);
        let mut c = n.conn();
        for (k, v) in &expected {
            let got: Option<String> = redis::cmd("GET").arg(k).query(&mut c).unwrap();
            assert_eq!(got.as_ref(), Some(v), "{k} after restart (round {round})");
        }
        for i in 0..300 {
            let (k, v) = (format!("r{round}:k{i}"), format!("v{i}"));
            let _: () = redis::cmd("SET").arg(&k).arg(&v).query(&mut c).unwrap();
            expected.insert(k, v);
        }
        let _: i64 = redis::cmd("RPUSH")
            .arg(format!("r{round}:list"))
            .arg(&[1, 2, 3])
            .query(&mut c)
            .unwrap();
        // The shutting-down client gets no reply: its connection closes.
        let mut raw = connect(n.port);
        let args: Vec<&[u8]> = form.split(' ').map(str::as_bytes).collect();
        assert_eq!(raw.call(&args), Reply::Broken("connection closed".into()));
        let status = n
            .wait_exit(Duration::from_secs(60))
            .unwrap_or_else(|| panic!("no exit after {form}; log:\n{}", n.log_text()));
        assert!(status.success(), "{form}: exit {status}");
        lists.push(format!("r{round}:list"));
    }
    let n = node(&dir);
    let mut c = n.conn();
    for (k, v) in &expected {
        let got: Option<String> = redis::cmd("GET").arg(k).query(&mut c).unwrap();
        assert_eq!(got.as_ref(), Some(v), "{k} after the last restart");
    }
    for l in &lists {
        let got: Vec<String> = redis::cmd("LRANGE")
            .arg(l)
            .arg(0)
            .arg(-1)
            .query(&mut c)
            .unwrap();
        assert_eq!(got, ["1", "2", "3"], "{l} after the last restart");
    }
}

/// SHUTDOWN while a snapshot runs (BGSAVE, or the periodic one) waits for
/// it and takes its own, as Redis's SHUTDOWN stops a BGSAVE and saves.
/// Before, it answered `-ERR Errors trying to SHUTDOWN` (the final
/// snapshot found one "already in progress"): found by the
/// restart-differential long run (seed 700668, `snapshot-interval-sec 1`).
#[test]
fn shutdown_while_a_snapshot_runs_waits_for_it_and_exits() {
    let dir = TestDir::new("ops-shutdown-bgsave");
    let mut n = node(&dir);
    let mut c = n.conn();
    // Enough data that the snapshot BGSAVE starts is still running when
    // SHUTDOWN arrives in the same pipeline.
    let big = "v".repeat(64 * 1024);
    for i in 0..600 {
        let _: () = redis::cmd("SET")
            .arg(format!("k{i}"))
            .arg(&big)
            .query(&mut c)
            .unwrap();
    }
    // SAVE on one connection; SHUTDOWN on another once INFO shows the
    // snapshot running (tried again should SAVE end before it is seen).
    let mut saver = connect(n.port);
    let mut raw = connect(n.port);
    let mut seen = false;
    for _ in 0..5 {
        saver.send(&[vec![b"SAVE".to_vec()]]);
        let running = (0..2_000).any(|_| {
            let info = raw.call(&[b"INFO", b"persistence"]);
            matches!(&info, Reply::Bulk(b) if String::from_utf8_lossy(b).contains("rdb_bgsave_in_progress:1"))
        });
        if running {
            seen = true;
            break;
        }
        assert_eq!(saver.read(), Reply::Simple(b"OK".to_vec()));
    }
    assert!(seen, "no snapshot seen running");
    assert_eq!(
        raw.call(&[b"SHUTDOWN"]),
        Reply::Broken("connection closed".into()),
        "SHUTDOWN answered instead of exiting"
    );
    let status = n
        .wait_exit(Duration::from_secs(60))
        .unwrap_or_else(|| panic!("no exit after SHUTDOWN; log:\n{}", n.log_text()));
    assert!(status.success(), "exit {status}");
    let n = node(&dir);
    let got: Option<String> = redis::cmd("GET").arg("k599").query(&mut n.conn()).unwrap();
    assert_eq!(got.as_deref(), Some(&big[..]));
}

#[test]
fn shutdown_closes_the_connection_without_a_reply_as_redis() {
    let redis = RedisServer::start();
    let mut r = connect(redis.port);
    assert_eq!(
        r.call(&[b"SHUTDOWN", b"NOSAVE"]),
        Reply::Broken("connection closed".into())
    );
}

#[test]
fn redis_cli_stat_shows_clients_and_blocked() {
    let elsa = Elsa::start(&[]);
    let mut blocked = connect(elsa.port);
    blocked.send(&[vec![b"BLPOP".to_vec(), b"q".to_vec(), b"0".to_vec()]]);
    let mut idle = connect(elsa.port);
    eventually("BLPOP blocks", || {
        info_field(&mut idle, "blocked_clients") == "1"
    });
    // stdbuf: redis-cli --stat writes to a pipe without flushing.
    let mut cli = Command::new("stdbuf")
        .args(["-o0", "redis-cli", "-p", &elsa.port.to_string()])
        .args(["--stat", "-i", "0.1"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("redis-cli");
    let out = cli.stdout.take().unwrap();
    let mut lines = BufReader::new(out).lines();
    let header = lines.nth(1).unwrap().unwrap();
    let cols: Vec<&str> = header.split_whitespace().collect();
    let row = lines.next().unwrap().unwrap();
    let vals: Vec<&str> = row.split_whitespace().collect();
    let _ = cli.kill();
    let _ = cli.wait();
    let at = |name: &str| vals[cols.iter().position(|c| *c == name).unwrap()];
    // The blocked one, the idle one and redis-cli itself.
    assert_eq!(at("clients"), "3", "{header}\n{row}");
    assert_eq!(at("blocked"), "1", "{header}\n{row}");
}

//! DUMP and RESTORE of streams (issues 45 and 46) against a real
//! redis-server 7.0: streams built by the same commands on both servers
//! (entries of the same and of other fields, integers, long and huge
//! values, hundreds of entries over many of Redis's nodes, XDEL, trims,
//! XSETID's counters, consumer groups with pending entries, consumers and
//! NOACK reads, a stream emptied by XDEL); each server's payload restored
//! into the other, the copies compared by every read (times masked: a
//! payload carries the delivery and seen times of the server that made
//! it); a payload restored into the server that made it keeps them.

mod common;
#[allow(dead_code)]
#[path = "differential/resp.rs"]
mod resp;

use common::redis_server::RedisServer;
use common::Elsa;
use resp::Reply;

/// Replaces what follows a masked name (a map's key) and, in XPENDING's
/// extended rows and XINFO FULL's pending lists, the idle and delivery
/// times, so replies made at other moments compare.
fn masked(r: Reply) -> Reply {
    const TIMES: [&[u8]; 6] = [
        b"idle",
        b"seen-time",
        b"active-time",
        b"radix-tree-keys",
        b"radix-tree-nodes",
        b"inactive",
    ];
    match r {
        Reply::Array(items) => {
            let mut out = Vec::with_capacity(items.len());
            let mut mask_next = false;
            // [id, consumer, time, count] (XPENDING, XINFO FULL's group
            // pending) and [id, time, count] (a consumer's pending).
            let row = |items: &[Reply]| match items {
                [Reply::Bulk(_), Reply::Bulk(_), Reply::Int(_), Reply::Int(_)] => Some(2),
                [Reply::Bulk(id), Reply::Int(_), Reply::Int(_)] if id.contains(&b'-') => Some(1),
                _ => None,
            };
            let time_at = row(&items);
            for (i, item) in items.into_iter().enumerate() {
                if mask_next || time_at == Some(i) {
                    out.push(Reply::Int(0));
                    mask_next = false;
                    continue;
                }
                mask_next = matches!(&item, Reply::Bulk(b) if TIMES.contains(&&b[..]));
                out.push(masked(item));
            }
            Reply::Array(out)
        }
        other => other,
    }
}

/// Every read of a stream a user makes, masked.
fn reads(c: &mut resp::Conn, key: &str) -> Vec<Reply> {
    let k = key.as_bytes();
    let mut out = vec![
        c.call(&[b"TYPE", k]),
        c.call(&[b"XLEN", k]),
        c.call(&[b"XRANGE", k, b"-", b"+"]),
        c.call(&[b"XINFO", b"STREAM", k]),
        c.call(&[b"XINFO", b"STREAM", k, b"FULL", b"COUNT", b"0"]),
        c.call(&[b"XINFO", b"GROUPS", k]),
    ];
    if let Reply::Array(groups) = c.call(&[b"XINFO", b"GROUPS", k]) {
        for g in groups {
            let Reply::Array(fields) = g else { continue };
            let Some(Reply::Bulk(name)) = fields.get(1).cloned() else {
                continue;
            };
            out.push(c.call(&[b"XINFO", b"CONSUMERS", k, &name]));
            out.push(c.call(&[b"XPENDING", k, &name]));
            out.push(c.call(&[b"XPENDING", k, &name, b"-", b"+", b"1000"]));
        }
    }
    out.into_iter().map(masked).collect()
}

fn both(e: &mut resp::Conn, r: &mut resp::Conn, line: &str) {
    let words: Vec<&[u8]> = line.split(' ').map(str::as_bytes).collect();
    let (a, b) = (e.call(&words), r.call(&words));
    assert_eq!(a, b, "{line}: Elsa {a} vs Redis {b}");
}

fn setup() -> Vec<String> {
    let mut s: Vec<String> = vec![
        // Same fields (values only), other fields, integers as values and
        // fields, negative and huge integers.
        "XADD plain 1-1 a 1 b 2".into(),
        "XADD plain 2-0 a 3 b 4".into(),
        "XADD plain 3-5 x y".into(),
        "XADD plain 4-0 a 1 b 2 c 3".into(),
        "XADD plain 5-0 12 -4097 9223372036854775807 -9223372036854775808".into(),
        "XADD plain 6-0 a 0 b 007 c 1e3 d -0 e 8388608 f -32769".into(),
        // A deleted entry inside, a group with a consumer's pending
        // entries and an acknowledgement.
        "XADD groups 1-0 f v".into(),
        "XADD groups 2-0 f v".into(),
        "XADD groups 3-0 g w".into(),
        "XADD groups 4-0 f v".into(),
        "XDEL groups 2-0".into(),
        "XGROUP CREATE groups g1 0".into(),
        "XGROUP CREATE groups g2 $".into(),
        "XGROUP CREATE groups g3 0 ENTRIESREAD 1".into(),
        "XREADGROUP GROUP g1 alice COUNT 2 STREAMS groups >".into(),
        "XREADGROUP GROUP g1 bob COUNT 5 STREAMS groups >".into(),
        "XACK groups g1 3-0".into(),
        "XGROUP CREATECONSUMER groups g2 carol".into(),
        "XREADGROUP GROUP g3 dave NOACK COUNT 1 STREAMS groups >".into(),
        // Counters XSETID sets.
        "XADD counters 5-0 a b".into(),
        "XSETID counters 9-9 ENTRIESADDED 40 MAXDELETEDID 7-7".into(),
        // Emptied by XDEL: still a stream.
        "XADD empty 1-0 a b".into(),
        "XDEL empty 1-0".into(),
        // Trimmed.
        "XADD trimmed MAXLEN = 3 1-0 a 1".into(),
    ];
    for i in 2..=8 {
        s.push(format!("XADD trimmed MAXLEN = 3 {i}-0 a {i}"));
    }
    // Many entries: nodes of 100 entries; then some of other fields and
    // long values (nodes cut at 4 kB).
    for i in 1..=250 {
        s.push(format!("XADD many {i}-0 field {i} other v{i}"));
    }
    for i in 251..=300 {
        s.push(format!("XADD many {i}-0 other{} {}", i % 3, "x".repeat(i)));
    }
    s.push(format!("XADD huge 1-0 big {}", "y".repeat(70_000)));
    s.push(format!("XADD huge 2-0 mid {}", "z".repeat(5_000)));
    s.push("XADD huge 3-0 small s".into());
    s
}

#[test]
fn stream_payloads_restore_into_the_other_server() {
    let (elsa, redis) = (Elsa::start(&[]), RedisServer::start());
    let mut e = resp::Conn::connect(elsa.port).unwrap();
    let mut r = resp::Conn::connect(redis.port).unwrap();
    for line in setup() {
        let words: Vec<&[u8]> = line.split(' ').map(str::as_bytes).collect();
        let (a, b) = (e.call(&words), r.call(&words));
        // Times differ in the replies of reads; only errors must agree.
        assert_eq!(
            matches!(a, Reply::Error(_)),
            matches!(b, Reply::Error(_)),
            "{line}: Elsa {a} vs Redis {b}"
        );
    }
    for key in [
        "plain", "groups", "counters", "empty", "trimmed", "many", "huge",
    ] {
        assert_eq!(reads(&mut e, key), reads(&mut r, key), "{key} as built");
        let dump = |c: &mut resp::Conn| match c.call(&[b"DUMP", key.as_bytes()]) {
            Reply::Bulk(b) => b,
            other => panic!("DUMP {key}: {other}"),
        };
        let (ours, theirs) = (dump(&mut e), dump(&mut r));
        let copy = format!("{key}:copy");
        let ok = Reply::Simple(b"OK".to_vec());
        let got = e.call(&[b"RESTORE", copy.as_bytes(), b"0", &theirs]);
        assert_eq!(got, ok, "Redis's {key} into Elsa");
        let got = r.call(&[b"RESTORE", copy.as_bytes(), b"0", &ours]);
        assert_eq!(got, ok, "Elsa's {key} into Redis");
        assert_eq!(reads(&mut e, &copy), reads(&mut r, &copy), "{key} restored");
        assert_eq!(reads(&mut e, &copy), reads(&mut e, key), "{key} in Elsa");
        // Its own payload back into the same server: the times too.
        let own = format!("{key}:own");
        assert_eq!(e.call(&[b"RESTORE", own.as_bytes(), b"0", &ours]), ok);
        let full = |c: &mut resp::Conn, k: &str| {
            c.call(&[b"XINFO", b"STREAM", k.as_bytes(), b"FULL", b"COUNT", b"0"])
        };
        let (a, b) = (full(&mut e, &own), full(&mut e, key));
        assert_eq!(masked_radix(a), masked_radix(b), "{key} restored in Elsa");
    }
    // The copies take writes and reads as any stream.
    both(&mut e, &mut r, "XADD groups:copy 9-0 f v");
    both(
        &mut e,
        &mut r,
        "XREADGROUP GROUP g2 carol STREAMS groups:copy >",
    );
    both(&mut e, &mut r, "XACK groups:copy g1 1-0 4-0");
    both(&mut e, &mut r, "XPENDING groups:copy g1");
    both(&mut e, &mut r, "XADD many:copy 1000-0 a b");
    both(&mut e, &mut r, "XLEN many:copy");
    // Refusals: a payload cut short, a stream's key taken.
    let Reply::Bulk(p) = r.call(&[b"DUMP", b"groups"]) else {
        panic!("DUMP groups");
    };
    for k in [&b"groups"[..], b"plain"] {
        let (a, b) = (
            e.call(&[b"RESTORE", k, b"0", &p]),
            r.call(&[b"RESTORE", k, b"0", &p]),
        );
        assert_eq!(a, b, "RESTORE over {}", String::from_utf8_lossy(k));
    }
    let mut cut = p.clone();
    cut.truncate(p.len() - 12);
    assert_eq!(
        e.call(&[b"RESTORE", b"cut", b"0", &cut]),
        r.call(&[b"RESTORE", b"cut", b"0", &cut])
    );
}

/// XINFO FULL with the radix tree's figures masked only (the times must
/// survive a restore into the same server).
fn masked_radix(r: Reply) -> Reply {
    match r {
        Reply::Array(items) => {
            let mut out = Vec::new();
            let mut mask = false;
            for item in items {
                if mask {
                    out.push(Reply::Int(0));
                    mask = false;
                    continue;
                }
                mask = matches!(&item, Reply::Bulk(b) if b.starts_with(b"radix-tree"));
                out.push(masked_radix(item));
            }
            Reply::Array(out)
        }
        other => other,
    }
}

/// The payload of Redis's own test (`Loading from legacy (Redis <=
/// v6.2.x, rdb_ver < 10) persistence`, stream-cgroups.tcl): a stream
/// dumped by Redis 5, its groups' read counters estimated as Redis 7 does.
#[test]
fn a_redis_5_stream_payload_restores() {
    let elsa = Elsa::start(&[]);
    let mut e = resp::Conn::connect(elsa.port).unwrap();
    let payload = b"\x0F\x01\x10\x00\x00\x00\x00\x00\x00\x00\x01\x00\x00\x00\x00\x00\x00\x00\x00\xC3\x40\x4A\x40\x57\x16\x57\x00\x00\x00\x23\x00\x02\x01\x04\x01\x01\x01\x84\x64\x61\x74\x61\x05\x00\x01\x03\x01\x00\x20\x01\x03\x81\x61\x02\x04\x20\x0A\x00\x01\x40\x0A\x00\x62\x60\x0A\x00\x02\x40\x0A\x00\x63\x60\x0A\x40\x22\x01\x81\x64\x20\x0A\x40\x39\x20\x0A\x00\x65\x60\x0A\x00\x05\x40\x0A\x00\x66\x20\x0A\x00\xFF\x02\x06\x00\x02\x02\x67\x31\x05\x00\x04\x00\x00\x00\x00\x00\x00\x00\x01\x00\x00\x00\x00\x00\x00\x00\x00\x3E\xF7\x83\x43\x7A\x01\x00\x00\x01\x00\x00\x00\x00\x00\x00\x00\x02\x00\x00\x00\x00\x00\x00\x00\x00\x3E\xF7\x83\x43\x7A\x01\x00\x00\x01\x00\x00\x00\x00\x00\x00\x00\x04\x00\x00\x00\x00\x00\x00\x00\x00\x3E\xF7\x83\x43\x7A\x01\x00\x00\x01\x00\x00\x00\x00\x00\x00\x00\x05\x00\x00\x00\x00\x00\x00\x00\x00\x3E\xF7\x83\x43\x7A\x01\x00\x00\x01\x01\x03\x63\x31\x31\x3E\xF7\x83\x43\x7A\x01\x00\x00\x04\x00\x00\x00\x00\x00\x00\x00\x01\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x02\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x04\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x05\x00\x00\x00\x00\x00\x00\x00\x00\x02\x67\x32\x00\x00\x00\x00\x09\x00\x3D\x52\xEF\x68\x67\x52\x1D\xFA";
    let redis = RedisServer::start();
    let mut r = resp::Conn::connect(redis.port).unwrap();
    for c in [&mut e, &mut r] {
        assert_eq!(
            c.call(&[b"RESTORE", b"x", b"0", payload]),
            Reply::Simple(b"OK".to_vec())
        );
    }
    assert_eq!(reads(&mut e, "x"), reads(&mut r, "x"));
}

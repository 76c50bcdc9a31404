//! The list commands' unit tests, over the map-backed view.

use super::*;
use crate::ops::testing::{bulk, MapView};
use crate::ops::Op;

fn run(v: &mut MapView, line: &str) -> OpReply {
    let args: Vec<Bytes> = line
        .split(' ')
        .map(|s| Bytes::copy_from_slice(s.as_bytes()))
        .collect();
    match ListOp::parse(args) {
        Err(e) => panic!("{line}: {e}"),
        Ok(op) => {
            let key = op.key().clone();
            Op::Lists(op).apply(&key, v)
        }
    }
}

fn arr(items: &[&str]) -> OpReply {
    OpReply::Array(items.iter().map(|s| bulk(s.as_bytes())).collect())
}

#[test]
fn rotating_a_list_of_one_onto_itself_keeps_its_ttl() {
    for cmd in [
        "LMOVE l l LEFT RIGHT",
        "RPOPLPUSH l l",
        "LMOVE l l RIGHT LEFT",
    ] {
        let mut v = MapView::default();
        assert_eq!(run(&mut v, "RPUSH l b"), OpReply::Int(1));
        assert_eq!(
            Op::ExpireAt(u64::MAX / 4).apply(b"l", &mut v),
            OpReply::Int(1)
        );
        assert_eq!(run(&mut v, cmd), bulk(b"b"), "{cmd}");
        assert_eq!(run(&mut v, "LRANGE l 0 -1"), arr(&["b"]), "{cmd}");
        assert_ne!(
            Op::Ttl { millis: true }.apply(b"l", &mut v),
            OpReply::Int(-1),
            "{cmd}"
        );
    }
}

#[test]
fn pushes_pops_and_ranges_answer_as_redis() {
    let mut v = MapView::default();
    assert_eq!(run(&mut v, "RPUSH l a b c"), OpReply::Int(3));
    assert_eq!(run(&mut v, "LPUSH l x y"), OpReply::Int(5));
    assert_eq!(
        run(&mut v, "LRANGE l 0 -1"),
        arr(&["y", "x", "a", "b", "c"])
    );
    assert_eq!(run(&mut v, "LRANGE l -2 100"), arr(&["b", "c"]));
    assert_eq!(run(&mut v, "LRANGE l 3 1"), arr(&[]));
    assert_eq!(run(&mut v, "LINDEX l -1"), bulk(b"c"));
    assert_eq!(run(&mut v, "LINDEX l 5"), OpReply::Nil);
    assert_eq!(run(&mut v, "RPOP l 2"), arr(&["c", "b"]));
    assert_eq!(run(&mut v, "LPOP l"), bulk(b"y"));
    assert_eq!(run(&mut v, "LPOP l 0"), arr(&[]));
    assert_eq!(run(&mut v, "LLEN l"), OpReply::Int(2));
    assert_eq!(run(&mut v, "LPOP l 9"), arr(&["x", "a"]));
    assert_eq!(run(&mut v, "LPOP l 1"), OpReply::NilArray);
    assert_eq!(run(&mut v, "LPOP l"), OpReply::Nil);
    assert_eq!(run(&mut v, "LPUSHX l a"), OpReply::Int(0));
    assert_eq!(
        run(&mut v, "TYPE l".replace("TYPE", "LLEN").as_str()),
        OpReply::Int(0)
    );
}

#[test]
fn edits_in_the_middle_answer_as_redis() {
    let mut v = MapView::default();
    run(&mut v, "RPUSH l a b a c a");
    assert_eq!(run(&mut v, "LINSERT l BEFORE c z"), OpReply::Int(6));
    assert_eq!(run(&mut v, "LINSERT l AFTER nope z"), OpReply::Int(-1));
    assert_eq!(run(&mut v, "LINSERT m AFTER a z"), OpReply::Int(0));
    assert_eq!(run(&mut v, "LSET l -1 e"), OpReply::Ok);
    assert_eq!(run(&mut v, "LSET l 9 e"), OpReply::Error(ERR_INDEX));
    assert_eq!(
        run(&mut v, "LSET m 0 e"),
        OpReply::Error(super::super::ERR_NO_SUCH_KEY)
    );
    assert_eq!(
        run(&mut v, "LRANGE l 0 -1"),
        arr(&["a", "b", "a", "z", "c", "e"])
    );
    assert_eq!(run(&mut v, "LPOS l a RANK -1"), OpReply::Int(2));
    assert_eq!(
        run(&mut v, "LPOS l a COUNT 0"),
        OpReply::Array(vec![OpReply::Int(0), OpReply::Int(2)])
    );
    assert_eq!(run(&mut v, "LPOS l a MAXLEN 1 RANK 2"), OpReply::Nil);
    assert_eq!(run(&mut v, "LREM l -1 a"), OpReply::Int(1));
    assert_eq!(
        run(&mut v, "LRANGE l 0 -1"),
        arr(&["a", "b", "z", "c", "e"])
    );
    assert_eq!(run(&mut v, "LTRIM l 1 -2"), OpReply::Ok);
    assert_eq!(run(&mut v, "LRANGE l 0 -1"), arr(&["b", "z", "c"]));
    assert_eq!(run(&mut v, "LMOVE l l RIGHT LEFT"), bulk(b"c"));
    assert_eq!(run(&mut v, "RPOPLPUSH l m"), bulk(b"z"));
    assert_eq!(run(&mut v, "LRANGE l 0 -1"), arr(&["c", "b"]));
    assert_eq!(
        run(&mut v, "LMPOP 2 nope l RIGHT COUNT 5"),
        OpReply::Array(vec![bulk(b"l"), arr(&["b", "c"])])
    );
    assert_eq!(run(&mut v, "LMPOP 1 l LEFT"), OpReply::NilArray);
    assert_eq!(run(&mut v, "LTRIM m 5 1"), OpReply::Ok);
    assert_eq!(run(&mut v, "LLEN m"), OpReply::Int(0));
}

#[test]
fn arguments_are_refused_where_redis_refuses_them() {
    let parse = |line: &str| {
        ListOp::parse(
            line.split(' ')
                .map(|s| Bytes::copy_from_slice(s.as_bytes()))
                .collect(),
        )
    };
    assert_eq!(parse("LPOP l -1").unwrap_err(), ERR_POSITIVE);
    assert_eq!(parse("LPOP l x").unwrap_err(), ERR_POSITIVE);
    assert_eq!(parse("LPOS l a RANK 0").unwrap_err(), ERR_RANK_ZERO);
    assert_eq!(parse("LPOS l a COUNT -1").unwrap_err(), ERR_COUNT_NEGATIVE);
    assert_eq!(parse("LPOS l a RANK").unwrap_err(), ERR_SYNTAX);
    assert_eq!(parse("LMPOP 0 l LEFT").unwrap_err(), ERR_NUMKEYS);
    assert_eq!(parse("LMPOP 2 l LEFT").unwrap_err(), ERR_SYNTAX);
    assert_eq!(parse("LMPOP 1 l LEFT COUNT 0").unwrap_err(), ERR_MPOP_COUNT);
    assert_eq!(
        parse("LMPOP 1 l LEFT COUNT 1 COUNT 1").unwrap_err(),
        ERR_SYNTAX
    );
    assert_eq!(parse("LMOVE a b UP LEFT").unwrap_err(), ERR_SYNTAX);
    assert_eq!(parse("LINSERT l MIDDLE a b").unwrap_err(), ERR_SYNTAX);
    assert_eq!(parse("LRANGE l a 1").unwrap_err(), ERR_NOT_INTEGER);
    // LINDEX and LSET look the key up first.
    assert!(parse("LINDEX l x").is_ok());
    let mut v = MapView::default();
    assert_eq!(run(&mut v, "LINDEX l x"), OpReply::Nil);
    v.put("s", b"str");
    assert_eq!(
        run(&mut v, "LINDEX s x"),
        OpReply::Error(super::super::WRONGTYPE)
    );
    assert_eq!(
        run(&mut v, "RPUSH s x"),
        OpReply::Error(super::super::WRONGTYPE)
    );
    run(&mut v, "RPUSH l a");
    assert_eq!(run(&mut v, "LINDEX l x"), OpReply::Error(ERR_NOT_INTEGER));
    assert_eq!(
        run(&mut v, "LMOVE l s LEFT LEFT"),
        OpReply::Error(super::super::WRONGTYPE)
    );
    assert_eq!(run(&mut v, "LLEN l"), OpReply::Int(1));
}

#[test]
fn blocking_commands_become_what_they_try_and_their_timeout() {
    let parse = |line: &str| {
        Blocking::parse(
            &line
                .split(' ')
                .map(|s| Bytes::copy_from_slice(s.as_bytes()))
                .collect::<Vec<_>>(),
        )
    };
    let b = parse("BLPOP a b 0.0015").unwrap();
    assert_eq!((b.timeout_ms, b.pair), (2, true));
    assert_eq!(b.op.other_keys(), &[Bytes::from_static(b"b")]);
    assert_eq!(parse("BRPOP a 0").unwrap().timeout_ms, 0);
    assert_eq!(parse("BLPOP a x").unwrap_err(), ERR_TIMEOUT_FLOAT);
    assert_eq!(parse("BLPOP a -1").unwrap_err(), ERR_TIMEOUT_NEGATIVE);
    assert_eq!(parse("BLPOP a inf").unwrap_err(), ERR_TIMEOUT_NEGATIVE);
    assert_eq!(parse("BLMPOP x 0 a LEFT").unwrap_err(), ERR_NUMKEYS);
    assert_eq!(parse("BLMPOP x 1 a LEFT").unwrap_err(), ERR_TIMEOUT_FLOAT);
    assert_eq!(parse("BLMOVE a b UP LEFT x").unwrap_err(), ERR_SYNTAX);
    assert_eq!(
        parse("BLMOVE a b LEFT LEFT x").unwrap_err(),
        ERR_TIMEOUT_FLOAT
    );
    let m = parse("BRPOPLPUSH a b 1").unwrap();
    assert_eq!(
        m.op.cmd,
        LCmd::Move {
            from: End::Right,
            to: End::Left
        }
    );
    assert_eq!(m.timeout_ms, 1000);
}

//! The stream commands' unit tests, over the map-backed view (the
//! differential test against redis-server covers the rest).

use super::*;
use crate::ops::testing::{bulk, MapView};
use crate::ops::Op;

fn run(v: &mut MapView, line: &str) -> OpReply {
    let args: Vec<Bytes> = line
        .split(' ')
        .map(|s| Bytes::copy_from_slice(s.as_bytes()))
        .collect();
    match StreamOp::parse(args) {
        Err(e) => OpReply::ErrorText(e),
        Ok(op) => {
            let key = op.key().clone();
            Op::Streams(op).apply(&key, v)
        }
    }
}

fn len(v: &mut MapView) -> OpReply {
    run(v, "XLEN s")
}

#[test]
fn ids_rise_and_explicit_ones_must_too() {
    let mut v = MapView::default();
    assert_eq!(run(&mut v, "XADD s 5-1 a 1"), bulk(b"5-1"));
    assert_eq!(run(&mut v, "XADD s 5-* a 2"), bulk(b"5-2"));
    assert_eq!(
        run(&mut v, "XADD s 5 a 3"),
        OpReply::Error(ERR_ID_TOO_SMALL)
    );
    assert_eq!(
        run(&mut v, "XADD s 0-0 a 3"),
        OpReply::ErrorText(ERR_ZERO_ID.into())
    );
    assert_eq!(run(&mut v, "XADD s 6 a 3"), bulk(b"6-0"));
    assert_eq!(len(&mut v), OpReply::Int(3));
    assert_eq!(run(&mut v, "XDEL s 6-0 6-0 9-9"), OpReply::Int(1));
    // The last ID stays where the deleted entry had it.
    assert_eq!(
        run(&mut v, "XADD s 6-0 a 4"),
        OpReply::Error(ERR_ID_TOO_SMALL)
    );
    assert_eq!(len(&mut v), OpReply::Int(2));
    assert_eq!(
        run(&mut v, "TYPE_IS_STREAM s"),
        OpReply::ErrorText(ERR_SYNTAX.into())
    );
}

#[test]
fn a_stream_emptied_by_xdel_still_exists() {
    let mut v = MapView::default();
    run(&mut v, "XADD s 1-1 a 1");
    assert_eq!(run(&mut v, "XDEL s 1-1"), OpReply::Int(1));
    assert_eq!(len(&mut v), OpReply::Int(0));
    assert_eq!(Op::Type.apply(b"s", &mut v), OpReply::Status("stream"));
    assert_eq!(Op::Del.apply(b"s", &mut v), OpReply::Int(1));
    assert_eq!(Op::Type.apply(b"s", &mut v), OpReply::Status("none"));
    // After the delete the IDs start over.
    assert_eq!(run(&mut v, "XADD s 1-1 a 1"), bulk(b"1-1"));
}

#[test]
fn exact_and_approximate_trims_count_as_redis_does() {
    let mut v = MapView::default();
    for i in 1..=1000 {
        run(&mut v, &format!("XADD s MAXLEN ~ 555 {i}-0 x {i}"));
    }
    // Whole nodes of 100 only: Redis answers 600 here (its own test).
    assert_eq!(len(&mut v), OpReply::Int(600));
    assert_eq!(run(&mut v, "XTRIM s MAXLEN 10"), OpReply::Int(590));
    assert_eq!(len(&mut v), OpReply::Int(10));
    assert_eq!(run(&mut v, "XTRIM s MINID 996"), OpReply::Int(5));
    assert_eq!(
        run(&mut v, "XRANGE s - + COUNT 1"),
        OpReply::Array(vec![OpReply::Array(vec![
            bulk(b"996-0"),
            OpReply::Array(vec![bulk(b"x"), bulk(b"996")])
        ])])
    );
}

#[test]
fn ranges_and_reads() {
    let mut v = MapView::default();
    for i in 1..=5 {
        run(&mut v, &format!("XADD s {i}-0 f {i}"));
    }
    let ids = |r: OpReply| -> Vec<Bytes> {
        let OpReply::Array(items) = r else {
            panic!("{r:?}")
        };
        items
            .into_iter()
            .map(|e| match e {
                OpReply::Array(mut p) => match p.remove(0) {
                    OpReply::Bulk(b) => b,
                    x => panic!("{x:?}"),
                },
                x => panic!("{x:?}"),
            })
            .collect()
    };
    assert_eq!(ids(run(&mut v, "XRANGE s (2 4")), vec!["3-0", "4-0"]);
    assert_eq!(
        ids(run(&mut v, "XREVRANGE s + - COUNT 2")),
        vec!["5-0", "4-0"]
    );
    assert_eq!(run(&mut v, "XRANGE s - + COUNT 0"), OpReply::NilArray);
    assert_eq!(run(&mut v, "XREAD STREAMS s $"), OpReply::NilArray);
    let OpReply::Keyed(got) = run(&mut v, "XREAD COUNT 2 STREAMS s 3") else {
        panic!("no entries read")
    };
    assert_eq!(got.len(), 1);
    assert_eq!(ids(got[0].1.clone()), vec!["4-0", "5-0"]);
}

#[test]
fn tagged_ids_rise_and_never_meet_another_nodes() {
    use super::write::tagged;
    let (a, b) = (0x8000_0001, 0x8000_0002);
    let first = tagged(StreamId::new(5, 3), 5, a).expect("an ID");
    assert_eq!(first, StreamId::new(5, (1 << 32) | 0x8000_0001));
    let next = tagged(first, 5, a).expect("an ID");
    assert!(next > first);
    assert_eq!(next.seq & 0xffff_ffff, 0x8000_0001);
    // Another node's IDs in the same millisecond differ in the low bits.
    let theirs = tagged(StreamId::new(5, 3), 5, b).expect("an ID");
    assert_ne!(theirs, first);
    // A later millisecond starts its count again; an earlier one is refused.
    assert_eq!(tagged(next, 6, a), Some(StreamId::new(6, 0x8000_0001)));
    assert_eq!(tagged(next, 4, a), None);
    // A full millisecond has no ID left.
    assert_eq!(tagged(StreamId::new(7, u64::MAX), 7, a), None);
}

#[test]
fn an_op_too_short_from_a_peer_is_refused_not_run() {
    for name in [
        "xadd",
        "xlen",
        "xrange",
        "xrevrange",
        "xdel",
        "xtrim",
        "xsetid",
        "xread",
        "xgroup",
        "xinfo",
        "xack",
        "xpending",
        "xclaim",
        "xautoclaim",
        "xreadgroup",
        "xlastids",
    ] {
        for n in 1..=6 {
            let args: Vec<Bytes> = std::iter::once(Bytes::from(name))
                .chain((1..n).map(|_| Bytes::from_static(b"k")))
                .collect();
            // A peer's op is its arguments (`StreamOp::encode`); parsing
            // them either refuses or gives an op that runs.
            if let Ok(op) = StreamOp::parse(args.clone()) {
                let mut v = MapView::default();
                let key = op.key().clone();
                let _ = Op::Streams(op).apply(&key, &mut v);
            }
        }
    }
}

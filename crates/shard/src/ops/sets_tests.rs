//! Unit tests of the set commands (`super::sets`).
use super::super::testing::{bulk, MapView};
use super::super::Op;
use super::*;

fn b(s: &str) -> Bytes {
    Bytes::copy_from_slice(s.as_bytes())
}

fn ms(v: &[&str]) -> Vec<Bytes> {
    v.iter().map(|s| b(s)).collect()
}

fn members(v: &mut MapView, k: &str) -> Vec<Bytes> {
    match v.run(k, Op::Sets(SetOp::Members)) {
        OpReply::Set(mut m) => {
            m.sort();
            m
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn add_and_remove_count_each_member_once() {
    let mut v = MapView::default();
    assert_eq!(
        v.run("s", Op::Sets(SetOp::Add(ms(&["a", "b", "a"])))),
        OpReply::Int(2)
    );
    assert_eq!(
        v.run("s", Op::Sets(SetOp::Add(ms(&["b", "c"])))),
        OpReply::Int(1)
    );
    assert_eq!(members(&mut v, "s"), ms(&["a", "b", "c"]));
    assert_eq!(
        v.run("s", Op::Sets(SetOp::Rem(ms(&["a", "a", "x"])))),
        OpReply::Int(1)
    );
    assert_eq!(v.run("s", Op::Sets(SetOp::Card)), OpReply::Int(2));
    assert_eq!(
        v.run("s", Op::Sets(SetOp::MIsMember(ms(&["a", "b"])))),
        OpReply::Array(vec![OpReply::Int(0), OpReply::Int(1)])
    );
    v.run("s", Op::Sets(SetOp::Rem(ms(&["b", "c"]))));
    assert_eq!(v.run("s", Op::Type), OpReply::Status("none"));
    assert_eq!(v.run("s", Op::Get), OpReply::Nil);
}

#[test]
fn pop_removes_what_it_answers() {
    let mut v = MapView::default();
    v.run("s", Op::Sets(SetOp::Add(ms(&["a", "b", "c"]))));
    let OpReply::Set(popped) = v.run(
        "s",
        Op::Sets(SetOp::Pop {
            count: Some(2),
            seed: 3,
        }),
    ) else {
        panic!("a set");
    };
    assert_eq!(popped.len(), 2);
    let left = members(&mut v, "s");
    assert_eq!(left.len(), 1);
    assert!(!popped.contains(&left[0]));
    let OpReply::Bulk(last) = v.run(
        "s",
        Op::Sets(SetOp::Pop {
            count: None,
            seed: 1,
        }),
    ) else {
        panic!("a member");
    };
    assert_eq!(last, left[0]);
    assert_eq!(
        v.run(
            "s",
            Op::Sets(SetOp::Pop {
                count: None,
                seed: 1
            })
        ),
        OpReply::Nil
    );
}

#[test]
fn combining_checks_every_type_then_combines() {
    let mut v = MapView::default();
    v.run("a", Op::Sets(SetOp::Add(ms(&["1", "2", "3"]))));
    v.run("b", Op::Sets(SetOp::Add(ms(&["2", "3", "4"]))));
    v.put("str", b"x");
    let comb = |how, keys: &[&str], store| {
        Op::Sets(SetOp::Combine {
            how,
            keys: ms(keys),
            store,
        })
    };
    let sorted_set = |r: OpReply| match r {
        OpReply::Set(mut m) => {
            m.sort();
            m
        }
        other => panic!("{other:?}"),
    };
    assert_eq!(
        sorted_set(v.run("a", comb(Combine::Inter, &["b"], false))),
        ms(&["2", "3"])
    );
    assert_eq!(
        sorted_set(v.run("a", comb(Combine::Diff, &["b"], false))),
        ms(&["1"])
    );
    assert_eq!(
        sorted_set(v.run("a", comb(Combine::Union, &["b", "missing"], false))),
        ms(&["1", "2", "3", "4"])
    );
    assert_eq!(
        v.run("a", comb(Combine::Inter, &["missing", "str"], false)),
        OpReply::Error(WRONG)
    );
    assert_eq!(
        sorted_set(v.run("a", comb(Combine::Inter, &["missing"], false))),
        ms(&[])
    );
    // STORE replaces the destination, of any type.
    assert_eq!(
        v.run("a", comb(Combine::Inter, &["b", "str"], true)),
        OpReply::Int(2)
    );
    assert_eq!(members(&mut v, "str"), ms(&["2", "3"]));
    assert_eq!(
        v.run("a", comb(Combine::Inter, &["missing", "str"], true)),
        OpReply::Int(0)
    );
    assert_eq!(v.run("str", Op::Exists), OpReply::Int(0));
    assert_eq!(
        v.run(
            "a",
            Op::Sets(SetOp::InterCard {
                keys: ms(&["b"]),
                limit: 1
            })
        ),
        OpReply::Int(1)
    );
}

#[test]
fn smove_moves_one_member() {
    let mut v = MapView::default();
    v.run("a", Op::Sets(SetOp::Add(ms(&["x", "y"]))));
    let mv = |to: &str, m: &str| {
        Op::Sets(SetOp::Move {
            to: [b(to)],
            member: b(m),
        })
    };
    assert_eq!(v.run("a", mv("b", "x")), OpReply::Int(1));
    assert_eq!(members(&mut v, "a"), ms(&["y"]));
    assert_eq!(members(&mut v, "b"), ms(&["x"]));
    assert_eq!(v.run("a", mv("b", "nope")), OpReply::Int(0));
    assert_eq!(v.run("a", mv("a", "y")), OpReply::Int(1));
    v.put("s", b"v");
    assert_eq!(v.run("a", mv("s", "y")), OpReply::Error(WRONG));
    assert_eq!(v.run("missing", mv("s", "y")), OpReply::Int(0));
    assert_eq!(v.run("b", Op::Get), OpReply::Error(WRONG));
    let _ = bulk(b"");
}

#[test]
fn every_set_op_survives_its_encoding() {
    let ops = [
        SetOp::Add(ms(&["a", ""])),
        SetOp::Rem(ms(&["a"])),
        SetOp::Members,
        SetOp::IsMember(b("m")),
        SetOp::MIsMember(ms(&["a", "b"])),
        SetOp::Card,
        SetOp::Pop {
            count: Some(3),
            seed: 9,
        },
        SetOp::Pop {
            count: None,
            seed: 9,
        },
        SetOp::RandMember {
            count: Some(-4),
            seed: 1,
        },
        SetOp::Scan(ScanArgs {
            cursor: 3,
            pattern: Some(b("*a")),
            count: 10,
            refused: Some(super::super::ERR_NOT_INTEGER),
        }),
        SetOp::Move {
            to: [b("d")],
            member: b("m"),
        },
        SetOp::Combine {
            how: Combine::Diff,
            keys: ms(&["b", "dst"]),
            store: true,
        },
        SetOp::InterCard {
            keys: ms(&["b"]),
            limit: 2,
        },
    ];
    for op in ops {
        assert_eq!(SetOp::decode(op.encode()), Some(op.clone()), "{op:?}");
    }
    assert_eq!(
        SetOp::decode(Bytes::from_static(
            b"\x0a\x00\x01\x00\x00\x00\x00\x00\x00\x00\x00"
        )),
        None
    );
}

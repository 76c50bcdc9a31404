//! The sorted-set commands' unit tests, over the map-backed view.

use super::*;

fn op(line: &str) -> ZSetOp {
    let args: Vec<Bytes> = line
        .split(' ')
        .map(|a| Bytes::copy_from_slice(a.as_bytes()))
        .collect();
    ZSetOp::parse(args, 7).expect("parses")
}

#[test]
fn the_wire_form_is_the_arguments_parsed_again() {
    for line in [
        "ZADD k NX CH 1 a 2.5 b",
        "ZRANGE k (1 +inf BYSCORE REV LIMIT 1 2 WITHSCORES",
        "ZUNIONSTORE d 2 a b WEIGHTS 1 2 AGGREGATE MAX",
        "ZRANDMEMBER k -3 WITHSCORES",
        "ZSCAN k 0 MATCH a* COUNT 5",
    ] {
        let o = op(line);
        assert_eq!(ZSetOp::decode(o.encode()), Some(o.clone()), "{line}");
    }
    let o = op("ZUNIONSTORE d 2 a b");
    assert_eq!(o.other_keys(), &[Bytes::from("b"), Bytes::from("d")]);
    assert_eq!(o.key(), &Bytes::from("a"));
}

#[test]
fn a_stored_negative_zero_is_zero_as_in_redis() {
    use super::super::testing::MapView;
    use crate::Op;
    let mut v = MapView::default();
    let mut run = |key: &str, line: &str| v.run(key, Op::ZSets(op(line)));
    run("s", "ZADD s -1 a 1.5 c");
    for line in [
        "ZUNIONSTORE d 2 s nokey WEIGHTS 0 0",
        "ZINTERSTORE d 1 s WEIGHTS 0",
    ] {
        run("s", line);
        // redis-server 7.0 answers a 0 c 0 (ZUNION, not stored: a -0).
        let shown = format!("{:?}", run("d", "ZRANGE d 0 -1 WITHSCORES"));
        assert_eq!(
            shown,
            format!(
                "{:?}",
                OpReply::Scored(vec![(Bytes::from("a"), 0.0), (Bytes::from("c"), 0.0)])
            ),
            "{line}"
        );
        let score = format!("{:?}", run("d", "ZSCORE d a"));
        assert!(!score.contains('-'), "{line}: {score}");
    }
}

#[test]
fn a_lex_offset_on_mixed_scores_walks_as_redis_does() {
    use super::super::testing::{bulk, MapView};
    use crate::Op;
    let mut v = MapView::default();
    let mut run = |line: &str| v.run("z", Op::ZSets(op(line)));
    // Ascending: c(-1) a(1e-5) 2(1) 1(1.5) b(10) d(10); replies of
    // redis-server 7.0 for the same set.
    run("ZADD z -1 c 0.00001 a 1 2 1.5 1 10 b 10 d");
    let members = |r: OpReply| match r {
        OpReply::Array(items) => items,
        other => panic!("{other:?}"),
    };
    // From the last member (d), five steps back without looking at
    // the bounds to c, which is past (2 again: Redis answers it.
    assert_eq!(
        members(run("ZRANGE z + (2 REV BYLEX LIMIT 5 2")),
        [bulk(b"c")]
    );
    // Forward from c (the first member at or past [a), two steps to
    // 2, then on while at or before [c: 2, 1 and b (the span was c
    // alone).
    assert_eq!(
        members(run("ZRANGE z [a [c BYLEX LIMIT 2 10")),
        [bulk(b"2"), bulk(b"1"), bulk(b"b")]
    );
    // One score everywhere it walks: the span with the offset skipped.
    assert_eq!(
        members(run("ZRANGE z - + BYLEX LIMIT 4 5")),
        [bulk(b"b"), bulk(b"d")]
    );
}

#[test]
fn a_score_range_with_a_limit_answers_the_window_a_full_range_would() {
    use super::super::testing::MapView;
    use crate::Op;
    // Small (sorted on the fly) and big enough to keep an order index.
    for n in [10usize, 600] {
        let mut v = MapView::default();
        let mut run = |line: &str| match v.run("z", Op::ZSets(op(line))) {
            OpReply::Scored(pairs) => pairs,
            OpReply::Int(_) => Vec::new(),
            other => panic!("{line}: {other:?}"),
        };
        let mut add = String::from("ZADD z");
        for i in 0..n {
            add.push_str(&format!(" {} m{i:04}", i / 3));
        }
        run(&add);
        for (min, max) in [
            ("-inf", "+inf"),
            ("5", "+inf"),
            ("(2", "7"),
            ("100", "+inf"),
        ] {
            let all = run(&format!("ZRANGEBYSCORE z {min} {max} WITHSCORES"));
            let all_rev = run(&format!("ZREVRANGEBYSCORE z {max} {min} WITHSCORES"));
            for (off, count) in [(0i64, 1i64), (0, 10), (3, 4), (7, -1), (0, 0), (2, 10_000)] {
                let window = |all: &[(Bytes, f64)]| -> Vec<(Bytes, f64)> {
                    let it = all.iter().skip(off as usize).cloned();
                    match count {
                        c if c < 0 => it.collect(),
                        c => it.take(c as usize).collect(),
                    }
                };
                let got = run(&format!(
                    "ZRANGEBYSCORE z {min} {max} WITHSCORES LIMIT {off} {count}"
                ));
                assert_eq!(got, window(&all), "n {n}: {min} {max} LIMIT {off} {count}");
                let got = run(&format!(
                    "ZREVRANGEBYSCORE z {max} {min} WITHSCORES LIMIT {off} {count}"
                ));
                assert_eq!(
                    got,
                    window(&all_rev),
                    "n {n}: rev {max} {min} LIMIT {off} {count}"
                );
            }
        }
    }
}

//! The model alone, on a made-up history: it accepts what the rules allow
//! and flags what they forbid (no cluster; milliseconds).

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use super::check::{Absence, Got, Model};
use super::ops::{Effect, Op, Outcome};

fn s(v: &str) -> String {
    v.to_string()
}

fn add(key: &str, elem: &str, value: Option<&str>) -> Effect {
    Effect::Add {
        key: s(key),
        elem: s(elem),
        value: value.map(s),
    }
}

fn incr(key: &str, field: Option<&str>, delta: i64) -> Effect {
    Effect::Incr {
        key: s(key),
        field: field.map(s),
        delta,
    }
}

fn set(items: &[&str]) -> Got {
    Got::Set(items.iter().map(|i| s(i)).collect::<BTreeSet<_>>())
}

fn list(items: &[&str]) -> Got {
    Got::List(items.iter().map(|i| s(i)).collect())
}

fn hash(fields: &[(&str, &str)]) -> Got {
    Got::Hash(
        fields
            .iter()
            .map(|(f, v)| (s(f), s(v)))
            .collect::<BTreeMap<_, _>>(),
    )
}

fn string(v: Option<&str>) -> Got {
    Got::Str(v.map(s))
}

#[test]
fn the_model_accepts_what_the_rules_allow_and_flags_what_they_forbid() {
    let t0 = Instant::now();
    let mut ops = Vec::new();
    // (writer, sent ms, done ms, outcome, kind, effects)
    let mut op = |w: usize, from: u64, to: u64, outcome, kind, effects: Vec<Effect>| {
        ops.push(Op {
            writer: w,
            region: s(if w < 2 { "a" } else { "b" }),
            kind,
            sent: t0 + Duration::from_millis(from),
            done: t0 + Duration::from_millis(to),
            outcome,
            effects,
        })
    };
    use Outcome::*;
    op(0, 0, 10, Acked, "SADD", vec![add("cc:set:0", "w0:1", None)]);
    op(2, 0, 10, Acked, "SADD", vec![add("cc:set:0", "w2:1", None)]);
    let rem = Effect::Remove {
        key: s("cc:set:0"),
        elem: s("w0:1"),
    };
    op(0, 20, 30, Acked, "SREM", vec![rem]);
    // Region a's DEL may or may not have seen region b's w2:1; w2:2 is
    // added after it answered.
    let del = Effect::Del { key: s("cc:set:0") };
    op(1, 40, 50, Acked, "DEL", vec![del]);
    op(
        2,
        60,
        70,
        Acked,
        "SADD",
        vec![add("cc:set:0", "w2:2", None)],
    );
    op(0, 0, 5, Acked, "INCRBY", vec![incr("cc:cnt:0", None, 3)]);
    op(2, 0, 5, Unknown, "INCRBY", vec![incr("cc:cnt:0", None, 2)]);
    let push = |items: &[&str]| Effect::Push {
        key: s("cc:list:0"),
        items: items.iter().map(|i| s(i)).collect(),
    };
    op(0, 0, 5, Acked, "RPUSH", vec![push(&["w0:5.0", "w0:5.1"])]);
    op(0, 6, 9, Acked, "RPUSH", vec![push(&["w0:6.0"])]);
    let sets = |v: &str| Effect::Set {
        key: s("cc:str:0"),
        value: s(v),
    };
    op(0, 0, 5, Acked, "SET", vec![sets("w0:7")]);
    op(0, 6, 9, Acked, "SET", vec![sets("w0:8")]);
    op(2, 0, 5, Unknown, "SET", vec![sets("w2:9")]);
    let block = vec![
        add("cc:set:1", "w1:1", None),
        add("cc:hash:0", "w1:2", Some("v2")),
    ];
    op(1, 0, 5, NotApplied, "MULTI", block);
    op(
        1,
        6,
        9,
        Acked,
        "HSET",
        vec![add("cc:hash:0", "w1:3", Some("v3"))],
    );
    op(
        2,
        0,
        5,
        Acked,
        "HINCRBY",
        vec![incr("cc:hash:0", Some("shared"), 4)],
    );
    let m = Model::build(&ops, t0, &[], Duration::from_secs(1));
    let flagged = |key: &str, got: Got| m.check(0, key, &got).len();

    // Allowed.
    for (key, got) in [
        ("cc:set:0", set(&["w2:2"])),
        ("cc:set:0", set(&["w2:1", "w2:2"])),
        ("cc:cnt:0", string(Some("3"))),
        ("cc:cnt:0", string(Some("5"))),
        ("cc:list:0", list(&["w0:5.0", "w0:5.1", "w0:6.0"])),
        ("cc:str:0", string(Some("w0:8"))),
        ("cc:str:0", string(Some("w2:9"))),
        ("cc:set:1", set(&[])),
        ("cc:hash:0", hash(&[("w1:3", "v3"), ("shared", "4")])),
    ] {
        assert_eq!(flagged(key, got.clone()), 0, "{key} {got:?} is allowed");
    }
    // Forbidden.
    for (key, got) in [
        ("cc:set:0", set(&[])),
        ("cc:set:0", set(&["w0:1", "w2:2"])),
        ("cc:set:0", set(&["w2:2", "w9:9"])),
        ("cc:cnt:0", string(Some("2"))),
        ("cc:cnt:0", string(Some("6"))),
        ("cc:cnt:0", string(None)),
        ("cc:list:0", list(&["w0:6.0", "w0:5.0", "w0:5.1"])),
        ("cc:list:0", list(&["w0:5.0", "w0:6.0", "w0:5.1"])),
        ("cc:list:0", list(&["w0:5.0", "w0:5.1", "w0:6.0", "w0:6.0"])),
        ("cc:list:0", list(&["w0:5.0", "w0:6.0"])),
        ("cc:str:0", string(Some("w0:7"))),
        ("cc:str:0", string(None)),
        ("cc:set:1", set(&["w1:1"])),
        ("cc:hash:0", hash(&[("w1:3", "v4"), ("shared", "4")])),
        ("cc:hash:0", hash(&[("shared", "4")])),
        (
            "cc:hash:0",
            hash(&[("w1:2", "v2"), ("w1:3", "v3"), ("shared", "4")]),
        ),
        ("cc:hash:0", hash(&[("w1:3", "v3"), ("shared", "5")])),
    ] {
        assert!(flagged(key, got.clone()) > 0, "{key} {got:?} is flagged");
    }

    // A node away from before the SREM until more than the tombstone TTL
    // after it may bring w0:1 back (docs/regions.md, Tombstones); one back
    // within the TTL may not.
    let away = |to_ms: u64| Absence {
        who: s("node 3 (b)"),
        from: t0 + Duration::from_millis(15),
        to: t0 + Duration::from_millis(to_ms),
    };
    let back = set(&["w0:1", "w2:2"]);
    let long = [away(2_000)];
    let m = Model::build(&ops, t0, &long, Duration::from_secs(1));
    assert_eq!(
        m.check(0, "cc:set:0", &back).len(),
        0,
        "undone by the absence"
    );
    let short = [away(900)];
    let m = Model::build(&ops, t0, &short, Duration::from_secs(1));
    assert!(
        !m.check(0, "cc:set:0", &back).is_empty(),
        "back within the TTL"
    );
}

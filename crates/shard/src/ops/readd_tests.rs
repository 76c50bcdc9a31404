//! Add-wins through the commands (issue 41, defect 14): two regions start
//! from one key in which `m` is present; one removes `m` (or deletes the
//! key) having seen its adds, the other, concurrently, runs a command
//! that adds `m` again. Once each has merged the other's state, an add —
//! `SADD`, `SMOVE` into the set, `ZADD` with or without `XX`, `ZINCRBY`,
//! `HSET`, `HINCRBY` — keeps `m`, even when it changed nothing Redis
//! would see and answered so (0: not newly added). A conditional add whose
//! condition failed (`ZADD NX`/`GT`/`LT`, `HSETNX`) wrote nothing, and the
//! remove stands (`docs/datatypes.md`).

use bytes::Bytes;

use super::hashes::{HSetReply, HashOp};
use super::sets::SetOp;
use super::testing::MapView;
use super::zsets::ZSetOp;
use super::{KeyView, Op, OpReply, Value};

fn b(s: &str) -> Bytes {
    Bytes::copy_from_slice(s.as_bytes())
}

fn z(line: &str) -> Op {
    let args = line.split(' ').map(b).collect();
    Op::ZSets(ZSetOp::parse(args, 7).expect("parses"))
}

fn sadd(m: &str) -> Op {
    Op::Sets(SetOp::Add(vec![b(m)]))
}

fn hset(f: &str, v: &str) -> Op {
    Op::Hash(HashOp::Set {
        pairs: vec![(b(f), b(v))],
        reply: HSetReply::Count,
    })
}

/// The state stored under `key` (a typed one: every case's key is).
fn state(v: &MapView, key: &str) -> elsa_lattice::KeyState {
    match v.0.get(key.as_bytes()) {
        Some(Value::Typed(s)) => (**s).clone(),
        other => panic!("not a typed key: {other:?}"),
    }
}

/// A key set up by `setup`, then in region A `remove`, in region B
/// `add`; each merges the other's key, and `probe` reads it: the two
/// answers, and B's reply to `add`.
fn race(setup: &[(&str, Op)], remove: Op, add: (&str, Op), probe: Op) -> [OpReply; 3] {
    let mut start = MapView::default();
    for (key, op) in setup {
        start.run(key, op.clone());
    }
    let mut a = MapView(start.0.clone(), 0);
    let mut b = MapView(start.0, 0);
    assert!(!matches!(a.run("k", remove), OpReply::Error(_)));
    let added = b.run(add.0, add.1);
    let (sa, sb) = (state(&a, "k"), state(&b, "k"));
    a.merge(b"k", sb);
    b.merge(b"k", sa);
    [a.run("k", probe.clone()), b.run("k", probe), added]
}

/// One race (see [`race`]) and what it must end with.
struct Case {
    name: &'static str,
    setup: Vec<(&'static str, Op)>,
    remove: Op,
    /// The key B writes, and the command.
    add: (&'static str, Op),
    /// Redis's reply to the add.
    reply: OpReply,
    probe: Op,
    /// What both regions read at the end.
    want: OpReply,
}

/// A set `k` holding `m`: both regions end with `m`.
fn set_case(name: &'static str, remove: Op, add: (&'static str, Op), reply: i64) -> Case {
    Case {
        name,
        setup: vec![("k", sadd("m")), ("s", sadd("m"))],
        remove,
        add,
        reply: OpReply::Int(reply),
        probe: Op::Sets(SetOp::IsMember(b("m"))),
        want: OpReply::Int(1),
    }
}

/// A sorted set `k` holding `m` at 1: `kept` says whether both regions
/// end with it.
fn zset_case(name: &'static str, remove: &str, add: &str, reply: OpReply, kept: bool) -> Case {
    Case {
        name,
        setup: vec![("k", z("ZADD k 1 m"))],
        remove: if remove == "DEL" { Op::Del } else { z(remove) },
        add: ("k", z(add)),
        reply,
        probe: z("ZSCORE k m"),
        want: if kept {
            OpReply::Double(1.0)
        } else {
            OpReply::Nil
        },
    }
}

/// A hash `k` whose field `m` is `v`: `kept` says whether both regions
/// end with it.
fn hash_case(name: &'static str, remove: Op, add: HashOp, reply: i64, kept: bool) -> Case {
    Case {
        name,
        setup: vec![("k", hset("m", "v"))],
        remove,
        add: ("k", Op::Hash(add)),
        reply: OpReply::Int(reply),
        probe: Op::Hash(HashOp::Get(b("m"))),
        want: if kept {
            OpReply::Bulk(b("v"))
        } else {
            OpReply::Nil
        },
    }
}

#[test]
fn an_add_of_a_present_element_beats_a_concurrent_remove() {
    let srem = || Op::Sets(SetOp::Rem(vec![b("m")]));
    let smove = Op::Sets(SetOp::Move {
        to: [b("k")],
        member: b("m"),
    });
    let hdel = || Op::Hash(HashOp::Del(vec![b("m")]));
    let hset_m = || HashOp::Set {
        pairs: vec![(b("m"), b("v"))],
        reply: HSetReply::Count,
    };
    let zero = || OpReply::Int(0);
    let cases = [
        set_case("SREM/SADD", srem(), ("k", sadd("m")), 0),
        set_case("DEL/SADD", Op::Del, ("k", sadd("m")), 0),
        set_case("SREM/SMOVE", srem(), ("s", smove), 1),
        zset_case("ZREM/ZADD", "ZREM k m", "ZADD k 1 m", zero(), true),
        zset_case("DEL/ZADD", "DEL", "ZADD k 1 m", zero(), true),
        zset_case("ZREM/ZADD XX", "ZREM k m", "ZADD k XX 1 m", zero(), true),
        zset_case("ZREM/ZADD CH", "ZREM k m", "ZADD k CH 1 m", zero(), true),
        zset_case(
            "ZREM/ZINCRBY 0",
            "ZREM k m",
            "ZINCRBY k 0 m",
            OpReply::Double(1.0),
            true,
        ),
        zset_case("ZREM/ZADD NX", "ZREM k m", "ZADD k NX 1 m", zero(), false),
        zset_case("ZREM/ZADD GT", "ZREM k m", "ZADD k GT 1 m", zero(), false),
        hash_case("HDEL/HSET", hdel(), hset_m(), 0, true),
        hash_case("DEL/HSET", Op::Del, hset_m(), 0, true),
        hash_case(
            "HDEL/HSETNX",
            hdel(),
            HashOp::SetNx(b("m"), b("v")),
            0,
            false,
        ),
    ];
    let mut wrong = Vec::new();
    for c in cases {
        let [at_a, at_b, added] = race(&c.setup, c.remove, c.add, c.probe);
        // Redis's reply to the add is unchanged.
        if added != c.reply {
            wrong.push(format!("{}: the add answered {added:?}", c.name));
        }
        if at_a != at_b {
            wrong.push(format!(
                "{}: the regions differ: {at_a:?} / {at_b:?}",
                c.name
            ));
        } else if at_a != c.want {
            wrong.push(format!("{}: {at_a:?}, expected {:?}", c.name, c.want));
        }
    }
    assert!(wrong.is_empty(), "{wrong:#?}");
}

/// A tracking client is told of an add only when it changed what the key
/// shows, as Redis signals `SADD` and `ZADD` only then (`HSET` always):
/// the re-add replicates, but a cached read of the key stays right.
#[test]
fn an_add_that_changes_nothing_shown_tells_no_tracking_client() {
    use std::hash::BuildHasher;
    use std::sync::{Arc, Mutex};

    #[derive(Default)]
    struct Told(Mutex<Vec<Vec<u8>>>);
    impl crate::ChangeHook for Told {
        fn changed(&self, key: &[u8]) {
            self.0.lock().expect("not poisoned").push(key.to_vec());
        }
        fn flushed(&self, _db: Option<u8>) {}
    }

    let hasher = crate::KeyHasher::default();
    let mut shard = crate::Shard::new(0, 7, hasher, Arc::new(elsa_lattice::Hlc::default()));
    let told = Arc::new(Told::default());
    shard.set_change_hook(told.clone());
    let mut wrong = Vec::new();
    for (key, op, tells) in [
        ("s", sadd("m"), true),
        ("s", sadd("m"), false),
        ("s", Op::Sets(SetOp::Add(vec![b("m"), b("n")])), true),
        ("z", z("ZADD z 1 m"), true),
        ("z", z("ZADD z 1 m"), false),
        ("z", z("ZADD z XX CH 1 m"), false),
        ("z", z("ZINCRBY z 0 m"), false),
        ("z", z("ZADD z 2 m"), true),
        ("h", hset("f", "v"), true),
        ("h", hset("f", "v"), true),
    ] {
        let before = told.0.lock().expect("not poisoned").len();
        let what = format!("{key}: {op:?}");
        let k = b(key);
        shard.op_batch(&[crate::KeyOp {
            hash: hasher.hash_one(&k[..]),
            key: k,
            op,
        }]);
        let after = told.0.lock().expect("not poisoned").len();
        if (after > before) != tells {
            wrong.push(format!("{what}: told {}", after - before));
        }
    }
    assert!(wrong.is_empty(), "{wrong:#?}");
}

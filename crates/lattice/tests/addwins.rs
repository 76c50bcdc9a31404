//! Add-wins for an element that is already there (issue 41, defect 14).
//!
//! Two regions start from one state in which a member (field) `m` is
//! present. One removes it — `SREM`/`ZREM`/`HDEL` of `m`, or `DEL` of the
//! key — having observed the adds it holds; the other, concurrently, adds
//! `m` again (`SADD`, `ZADD` with the score it has, `HSET` to the value it
//! has), as a lone command or inside a transaction (whose install is the
//! `replace_with` of what its overlay shows). Once each has the other's
//! write, `m` is present on both, as `docs/datatypes.md` promises: an add
//! concurrent with a remove survives, whatever the add changed.

use bytes::Bytes;
use elsa_lattice::{Collection, Crdt, KeyState, Kind, OrMap, OrSet, Version, ZSet};
use proptest::prelude::*;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Type {
    Set,
    ZSet,
    Hash,
}

/// An element command: add element `e` with value `v` (a set ignores
/// it), or remove it.
#[derive(Clone, Copy, Debug)]
enum ElemOp {
    Add(u8, u8),
    Remove(u8),
}

fn e(i: u8) -> Bytes {
    Bytes::from(format!("e{i}"))
}

/// The member the two regions disagree on.
fn m() -> Bytes {
    e(0)
}

fn set_of(s: &KeyState) -> OrSet {
    match &s.collection {
        Some(Collection::Set(x)) => x.clone(),
        _ => OrSet::default(),
    }
}

fn zset_of(s: &KeyState) -> ZSet {
    match &s.collection {
        Some(Collection::ZSet(x)) => x.clone(),
        _ => ZSet::default(),
    }
}

fn hash_of(s: &KeyState) -> OrMap {
    match &s.collection {
        Some(Collection::Hash(x)) => x.clone(),
        _ => OrMap::default(),
    }
}

/// What element `e` shows: absent (`None`), or its value as text.
fn shown(ty: Type, s: &KeyState, el: &[u8]) -> Option<String> {
    match ty {
        Type::Set => set_of(s).contains(el).then(String::new),
        Type::ZSet => zset_of(s).score(el).map(|x| x.to_string()),
        Type::Hash => hash_of(s)
            .get(el)
            .map(|v| String::from_utf8_lossy(&v).into()),
    }
}

/// The delta a command writes, as the store's command does (`None`:
/// it writes nothing).
fn apply(ty: Type, s: &KeyState, op: ElemOp, dot: Version) -> Option<KeyState> {
    let c = match (ty, op) {
        (Type::Set, ElemOp::Add(i, _)) => Collection::Set(set_of(s).add(e(i).into(), dot)),
        (Type::Set, ElemOp::Remove(i)) => Collection::Set(set_of(s).remove(&e(i)[..], dot)?),
        (Type::ZSet, ElemOp::Add(i, v)) => {
            Collection::ZSet(zset_of(s).set(&e(i), f64::from(v), dot))
        }
        (Type::ZSet, ElemOp::Remove(i)) => Collection::ZSet(zset_of(s).remove(&e(i), dot)?),
        (Type::Hash, ElemOp::Add(i, v)) => Collection::Hash(hash_of(s).set(&e(i), &e(v), 0, dot)),
        (Type::Hash, ElemOp::Remove(i)) => Collection::Hash(hash_of(s).remove(&e(i), dot)?),
    };
    Some(KeyState::of(c))
}

/// The add of `m` with the value it shows: `SADD k m`, `ZADD k <its
/// score> m`, `HSET k m <its value>`.
fn readd(ty: Type, s: &KeyState, dot: Version) -> KeyState {
    let c = match ty {
        Type::Set => Collection::Set(set_of(s).add(m().into(), dot)),
        Type::ZSet => {
            let z = zset_of(s);
            let score = z.score(&m()).expect("m is present");
            Collection::ZSet(z.set(&m(), score, dot))
        }
        Type::Hash => {
            let h = hash_of(s);
            let v = h.get(&m()).expect("m is present");
            Collection::Hash(h.set(&m(), &v, 0, dot))
        }
    };
    KeyState::of(c)
}

/// The same add made inside a transaction: its overlay merges the
/// command's delta at a pending stamp, and the commit installs what the
/// overlay shows, at the commit's version.
fn readd_in_transaction(ty: Type, s: &KeyState, dot: Version) -> KeyState {
    let pending = Version::new((1 << 63) + 1, 0);
    let mut overlay = s.clone();
    overlay.merge(readd(ty, s, pending));
    s.replace_with(&overlay, 0, dot.commit_ts, dot)
}

/// The remove of `m` (`SREM`/`ZREM`/`HDEL`), or `DEL` of the whole key.
fn remove(ty: Type, s: &KeyState, del: bool, dot: Version) -> KeyState {
    if del {
        s.clear(0, dot)
    } else {
        apply(ty, s, ElemOp::Remove(0), dot).expect("m is present")
    }
}

fn merged(mut a: KeyState, b: KeyState) -> KeyState {
    a.merge(b);
    a
}

/// One case: `start` (where `m` shows), region `a` removes, region `b`
/// re-adds, at the given versions; answers both regions after each has
/// merged the other's state.
fn race(
    ty: Type,
    start: &KeyState,
    (del, at_a): (bool, Version),
    (txn, at_b): (bool, Version),
) -> (KeyState, KeyState) {
    let a = merged(start.clone(), remove(ty, start, del, at_a));
    let add = if txn {
        readd_in_transaction(ty, start, at_b)
    } else {
        readd(ty, start, at_b)
    };
    let b = merged(start.clone(), add);
    (merged(a.clone(), b.clone()), merged(b, a))
}

#[test]
fn readding_a_present_element_beats_a_concurrent_remove() {
    let mut lost = Vec::new();
    for ty in [Type::Set, Type::ZSet, Type::Hash] {
        // Added by region 1, seen by both.
        let start = apply(
            ty,
            &KeyState::default(),
            ElemOp::Add(0, 5),
            Version::new(1, 1),
        )
        .expect("an add writes");
        let before = shown(ty, &start, &m());
        for del in [false, true] {
            for txn in [false, true] {
                // Either write may be the newer.
                for (ta, tb) in [(10, 11), (11, 10)] {
                    let (a, b) = race(
                        ty,
                        &start,
                        (del, Version::new(ta, 1)),
                        (txn, Version::new(tb, 2)),
                    );
                    let what = format!("{ty:?}, del {del}, in a transaction {txn}, ts {ta}/{tb}");
                    assert_eq!(a, b, "{what}: the regions differ");
                    if shown(ty, &a, &m()) != before {
                        lost.push(what);
                    }
                }
            }
        }
    }
    assert!(lost.is_empty(), "the add was lost: {lost:#?}");
}

fn ty() -> impl Strategy<Value = Type> {
    prop_oneof![Just(Type::Set), Just(Type::ZSet), Just(Type::Hash)]
}

fn elem_op(elems: u8) -> impl Strategy<Value = ElemOp> {
    prop_oneof![
        (0..elems, 0u8..3).prop_map(|(i, v)| ElemOp::Add(i, v)),
        (0..elems).prop_map(ElemOp::Remove),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(500))]

    /// Any history of adds and removes at three origins that leaves `m`
    /// present; one region removes `m` (or deletes the key), another adds
    /// it again with what it shows, each also changing other elements:
    /// the regions agree, and `m` shows as it did.
    #[test]
    fn a_readd_survives_a_concurrent_remove(
        ty in ty(),
        history in proptest::collection::vec((1u32..4, elem_op(3)), 0..12),
        remover in 1u32..4,
        other in 1u32..3,
        del in any::<bool>(),
        txn in any::<bool>(),
        remove_first in any::<bool>(),
        extra_a in proptest::collection::vec(elem_op(3), 0..3),
        extra_b in proptest::collection::vec(elem_op(3), 0..3),
    ) {
        let mut start = KeyState::default();
        let mut ts = 0;
        let mut tick = || {
            ts += 1;
            ts
        };
        for (origin, op) in &history {
            if let Some(d) = apply(ty, &start, *op, Version::new(tick(), *origin)) {
                start.merge(d);
            }
        }
        if shown(ty, &start, &m()).is_none() {
            let d = apply(ty, &start, ElemOp::Add(0, 1), Version::new(tick(), remover));
            start.merge(d.expect("an add writes"));
        }
        prop_assume!(start.kind(0) != Kind::None);
        let before = shown(ty, &start, &m());
        let readder = (remover + other - 1) % 3 + 1;
        let base = tick();
        let (ta, tb) = if remove_first { (base + 1, base + 2) } else { (base + 2, base + 1) };
        let mut a = merged(start.clone(), remove(ty, &start, del, Version::new(ta, remover)));
        let add = if txn {
            readd_in_transaction(ty, &start, Version::new(tb, readder))
        } else {
            readd(ty, &start, Version::new(tb, readder))
        };
        let mut b = merged(start.clone(), add);
        // Each region goes on with other elements (never `m`: a later
        // command of its own would decide `m` there).
        for (n, op) in extra_a.iter().enumerate() {
            let op = match *op {
                ElemOp::Add(i, v) => ElemOp::Add(i % 2 + 1, v),
                ElemOp::Remove(i) => ElemOp::Remove(i % 2 + 1),
            };
            if let Some(d) = apply(ty, &a, op, Version::new(base + 3 + 2 * n as u64, remover)) {
                a.merge(d);
            }
        }
        for (n, op) in extra_b.iter().enumerate() {
            let op = match *op {
                ElemOp::Add(i, v) => ElemOp::Add(i % 2 + 1, v),
                ElemOp::Remove(i) => ElemOp::Remove(i % 2 + 1),
            };
            if let Some(d) = apply(ty, &b, op, Version::new(base + 4 + 2 * n as u64, readder)) {
                b.merge(d);
            }
        }
        let ab = merged(a.clone(), b.clone());
        let ba = merged(b, a);
        prop_assert_eq!(&ab, &ba);
        prop_assert_eq!(shown(ty, &ab, &m()), before);
    }
}

/// A re-add costs its delta one dot, and the state nothing: an origin's
/// new add replaces its own older one, so a member re-added any number
/// of times by the regions that write it keeps one add per such region.
#[test]
fn readds_keep_the_state_and_the_delta_small() {
    let size = |s: &KeyState| {
        let mut out = Vec::new();
        s.encode(&mut out);
        out.len()
    };
    let mut s = KeyState::default();
    for i in 0..50u8 {
        s.merge(apply(Type::Set, &s, ElemOp::Add(i, 0), Version::new(1, 1)).expect("writes"));
    }
    let first = s.clone();
    let fresh = size(&readd(Type::Set, &KeyState::default(), Version::new(1, 1)));
    let mut one_delta = 0;
    for ts in 2..100 {
        let d = readd(Type::Set, &s, Version::new(ts, 1));
        one_delta = one_delta.max(size(&d));
        s.merge(d);
    }
    assert_eq!(
        size(&s),
        size(&first),
        "re-adds by one origin grew the state"
    );
    // Packed, a later timestamp may take a byte more to write (its
    // distance from the buffer's base): not a growth per re-add.
    assert!(s.approx_bytes() <= first.approx_bytes() + 8);
    assert_eq!(one_delta, fresh, "a re-add's delta is one member's add");
    // Two regions taking turns: two adds for `m`, however many turns.
    for ts in 100..200 {
        s.merge(readd(Type::Set, &s, Version::new(ts, 1 + (ts % 2) as u32)));
    }
    let two = s.clone();
    for ts in 200..300 {
        s.merge(readd(Type::Set, &s, Version::new(ts, 1 + (ts % 2) as u32)));
    }
    assert_eq!(size(&s), size(&two));
    assert_eq!(s.approx_bytes(), two.approx_bytes());
}

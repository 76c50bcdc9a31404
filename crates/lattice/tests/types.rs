//! The data types' merge laws, over states real operations produce:
//! random operations of every type at three replicas (three origins),
//! with deltas and whole states exchanged in random orders.
//!
//! - merge is commutative, associative and idempotent on [`KeyState`];
//! - every replica that received the same deltas, in any order and any
//!   number of times, holds the same state — and the same as every delta
//!   merged into an empty state;
//! - one replica alone behaves as Redis: the sequential specification
//!   (a plain map model) gives the same values;
//! - across replicas: every increment counts once, an add concurrent with
//!   a remove survives.

use std::collections::{BTreeMap, BTreeSet};

use bytes::Bytes;
use elsa_lattice::stream::{Stream, StreamId};
use elsa_lattice::{
    Collection, Crdt, Elem, KeyState, Kind, List, OrMap, OrSet, Ttl, Version, ZSet,
};
use proptest::prelude::*;

/// One command on the key.
#[derive(Clone, Debug)]
enum Cmd {
    Set(u8),
    Incr(i8),
    Del,
    HSet(u8, u8),
    HIncr(u8, i8),
    HDel(u8),
    SAdd(u8),
    SRem(u8),
    ZAdd(u8, i8),
    ZIncr(u8, i8),
    ZRem(u8),
    /// LPUSH (true) or RPUSH of one element.
    Push(bool, u8),
    /// LPOP (true) or RPOP.
    Pop(bool),
    /// LSET of an index (from the head).
    LSet(u8, u8),
    /// LINSERT BEFORE the element at an index.
    LInsert(u8, u8),
    /// EXPIRE of a collection (a far-off time; `None`: PERSIST).
    Expire(Option<u8>),
    /// PFADD of one element.
    PfAdd(u8),
    /// XADD with `*` (the next ID) of one field's value.
    XAdd(u8),
    /// XDEL of the entry at an index.
    XDel(u8),
}

fn cmd() -> impl Strategy<Value = Cmd> {
    prop_oneof![
        (0u8..4).prop_map(Cmd::Set),
        (-3i8..4).prop_map(Cmd::Incr),
        Just(Cmd::Del),
        (0u8..3, 0u8..4).prop_map(|(f, v)| Cmd::HSet(f, v)),
        (0u8..3, -3i8..4).prop_map(|(f, n)| Cmd::HIncr(f, n)),
        (0u8..3).prop_map(Cmd::HDel),
        (0u8..4).prop_map(Cmd::SAdd),
        (0u8..4).prop_map(Cmd::SRem),
        (0u8..3, -3i8..4).prop_map(|(m, s)| Cmd::ZAdd(m, s)),
        (0u8..3, -3i8..4).prop_map(|(m, n)| Cmd::ZIncr(m, n)),
        (0u8..3).prop_map(Cmd::ZRem),
        (any::<bool>(), 0u8..4).prop_map(|(f, v)| Cmd::Push(f, v)),
        any::<bool>().prop_map(Cmd::Pop),
        (0u8..3, 0u8..4).prop_map(|(i, v)| Cmd::LSet(i, v)),
        (0u8..3, 0u8..4).prop_map(|(i, v)| Cmd::LInsert(i, v)),
        proptest::option::of(0u8..3).prop_map(Cmd::Expire),
        (0u8..6).prop_map(Cmd::PfAdd),
        (0u8..4).prop_map(Cmd::XAdd),
        (0u8..3).prop_map(Cmd::XDel),
    ]
}

fn b(x: impl ToString) -> Bytes {
    Bytes::from(x.to_string())
}

/// The absolute expiry an `Expire` sets (far off: nothing expires at the
/// tests' clock, 0).
fn expire_at(x: &Option<u8>) -> Option<u64> {
    x.map(|s| 1_000_000 + u64::from(s))
}

/// Runs `cmd` on `state` as write `dot`: the delta, or `None` when Redis
/// would refuse it (WRONGTYPE, not an integer) or change nothing. A
/// collection written on a key that shows nothing starts without an
/// expiry, as the store's `begin_collection_write` makes it.
fn apply(state: &KeyState, cmd: &Cmd, dot: Version) -> Option<KeyState> {
    let kind = state.kind(0);
    if let Cmd::Expire(x) = cmd {
        // A string's TTL changes on its base alone (`Counter::retime`).
        if kind == Kind::String {
            return Some(KeyState::of_string(state.string.retime(
                expire_at(x),
                0,
                dot,
            )));
        }
        return kind
            .is_collection()
            .then(|| KeyState::of_ttl(Ttl::on(kind, expire_at(x), dot)));
    }
    let mut delta = apply_value(state, cmd, dot)?;
    let creates = delta.collection.is_some()
        && kind == Kind::None
        && (state.collection.is_some() || *state.ttl != Ttl::default());
    if creates {
        delta.merge(KeyState::of_ttl(Ttl::none(dot)));
    }
    Some(delta)
}

fn apply_value(state: &KeyState, cmd: &Cmd, dot: Version) -> Option<KeyState> {
    let kind = state.kind(0);
    // The stored collection, even when it shows nothing (all removed):
    // its fields' counters and members' removes still count.
    let hash = || match &state.collection {
        Some(Collection::Hash(m)) => m.clone(),
        _ => OrMap::default(),
    };
    let set = || match &state.collection {
        Some(Collection::Set(s)) => s.clone(),
        _ => OrSet::default(),
    };
    let zset = || match &state.collection {
        Some(Collection::ZSet(z)) => z.clone(),
        _ => ZSet::default(),
    };
    let list = || match &state.collection {
        Some(Collection::List(l)) if kind == Kind::List => (**l).clone(),
        _ => List::default(),
    };
    let l = list();
    let stream = || match &state.collection {
        Some(Collection::Stream(x)) if kind == Kind::Stream => (**x).clone(),
        _ => Stream::default(),
    };
    match cmd {
        Cmd::Set(v) => Some(KeyState::of_string(state.string.set(
            Some(b(v)),
            None,
            0,
            dot,
        ))),
        Cmd::Incr(n) => {
            if !matches!(kind, Kind::String | Kind::None) {
                return None;
            }
            // A string hidden behind a newer (now empty) collection is not
            // the key's value: the increment starts from zero.
            let mut base = (*state.string).clone();
            let mut delta = elsa_lattice::Counter::default();
            if kind == Kind::None && state.string.value(0).is_some() {
                let reset = state.string.set(None, None, 0, dot);
                base.merge(reset.clone());
                delta.merge(reset);
            }
            let (_, d) = base.incr_by(i64::from(*n), 0, dot, 0).ok()?;
            delta.merge(d);
            Some(KeyState::of_string(delta))
        }
        Cmd::PfAdd(e) => {
            let shown = match kind {
                Kind::String => Some(state.visible_string(0)?),
                Kind::None => None,
                _ => return None,
            };
            let bytes = pfadd(shown.as_ref(), *e)?;
            Some(KeyState::of_string(
                state.string.hll_write(bytes, 0, dot, 0),
            ))
        }
        Cmd::Del => match kind {
            Kind::None => None,
            Kind::String => Some(KeyState::of_string(state.string.set(None, None, 0, dot))),
            Kind::Hash => Some(KeyState::of(Collection::Hash(hash().clear(dot)))),
            Kind::Set => Some(KeyState::of(Collection::Set(set().clear(dot)))),
            Kind::ZSet => Some(KeyState::of(Collection::ZSet(zset().clear(dot)))),
            Kind::List => Some(KeyState::of(Collection::list(l.clear(dot)))),
            Kind::Stream => Some(state.clear(0, dot)),
        },
        Cmd::XAdd(v) if matches!(kind, Kind::Stream | Kind::None) => {
            let x = stream();
            let id = x.last_id().next()?;
            let fields = vec![(Elem::new(b"f"), Elem::new(&b(v)))];
            Some(KeyState::of(Collection::Stream(Box::new(
                x.add(id, fields, dot),
            ))))
        }
        Cmd::XDel(i) if kind == Kind::Stream => {
            let x = stream();
            let (id, _) = x.entries().nth(usize::from(*i))?;
            Some(KeyState::of(Collection::Stream(Box::new(
                x.delete(&[id], dot),
            ))))
        }
        Cmd::HSet(f, v) if matches!(kind, Kind::Hash | Kind::None) => Some(KeyState::of(
            Collection::Hash(hash().set(&b(f), &b(v), 0, dot)),
        )),
        Cmd::HIncr(f, n) if matches!(kind, Kind::Hash | Kind::None) => {
            let (_, d) = hash().incr_by(&b(f), i64::from(*n), 0, dot).ok()?;
            Some(KeyState::of(Collection::Hash(d)))
        }
        Cmd::HDel(f) if kind == Kind::Hash => Some(KeyState::of(Collection::Hash(
            hash().remove(&b(f)[..], dot)?,
        ))),
        Cmd::SAdd(m) if matches!(kind, Kind::Set | Kind::None) => {
            Some(KeyState::of(Collection::Set(set().add(b(m).into(), dot))))
        }
        Cmd::SRem(m) if kind == Kind::Set => {
            Some(KeyState::of(Collection::Set(set().remove(&b(m)[..], dot)?)))
        }
        Cmd::ZAdd(m, sc) if matches!(kind, Kind::ZSet | Kind::None) => Some(KeyState::of(
            Collection::ZSet(zset().set(&b(m), f64::from(*sc) / 2.0, dot)),
        )),
        Cmd::ZIncr(m, n) if matches!(kind, Kind::ZSet | Kind::None) => {
            let (_, d) = zset().incr(&b(m), f64::from(*n) / 4.0, dot)?;
            Some(KeyState::of(Collection::ZSet(d)))
        }
        Cmd::ZRem(m) if kind == Kind::ZSet => Some(KeyState::of(Collection::ZSet(
            zset().remove(&b(m)[..], dot)?,
        ))),
        Cmd::Push(front, v) if matches!(kind, Kind::List | Kind::None) => {
            let at = if *front { 0 } else { l.len() };
            Some(KeyState::of(Collection::list(l.insert(
                at,
                [&b(v)[..]],
                dot,
            ))))
        }
        Cmd::Pop(front) if kind == Kind::List => {
            let at = if *front { 0 } else { l.len() - 1 };
            Some(KeyState::of(Collection::list(l.remove([at], dot))))
        }
        Cmd::LSet(i, v) if kind == Kind::List => Some(KeyState::of(Collection::list(l.set(
            usize::from(*i),
            &b(v),
            dot,
        )?))),
        Cmd::LInsert(i, v) if kind == Kind::List && usize::from(*i) < l.len() => {
            Some(KeyState::of(Collection::list(l.insert(
                usize::from(*i),
                [&b(v)[..]],
                dot,
            ))))
        }
        _ => None,
    }
}

/// PFADD's bytes (Redis's): `None` when it is refused (not a
/// HyperLogLog) or changes nothing.
fn pfadd(value: Option<&Bytes>, e: u8) -> Option<Bytes> {
    use elsa_lattice::hll;
    let mut v = match value {
        Some(v) => {
            hll::check(v).ok()?;
            v.to_vec()
        }
        None => hll::new_sparse(),
    };
    let changed = hll::add(&mut v, format!("e{e}").as_bytes(), hll::SPARSE_MAX_BYTES).ok()?;
    if !changed && value.is_some() {
        return None;
    }
    hll::invalidate(&mut v);
    Some(Bytes::from(v))
}

/// What a client reads: the type and the value, as plain data.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Seen {
    None,
    String(Bytes),
    Hash(BTreeMap<Bytes, Bytes>),
    Set(BTreeSet<Bytes>),
    /// Members and their scores' bits.
    ZSet(BTreeMap<Bytes, u64>),
    List(Vec<Bytes>),
    /// Entries by ID (the values of field `f`), and the last ID.
    Stream(Vec<(StreamId, Bytes)>, StreamId),
}

/// What a client reads: the value, and the expiry of what the key shows.
fn seen(s: &KeyState) -> (Seen, Option<u64>) {
    (seen_value(s), s.expire_ms(0))
}

fn seen_value(s: &KeyState) -> Seen {
    match (s.kind(0), s.visible_collection(0)) {
        (Kind::String, _) => Seen::String(s.visible_string(0).expect("a string shows")),
        (Kind::Hash, Some(Collection::Hash(m))) => Seen::Hash(
            m.iter()
                .map(|(f, v)| (bytes::Bytes::copy_from_slice(f), v))
                .collect(),
        ),
        (Kind::Set, Some(Collection::Set(x))) => {
            Seen::Set(x.iter().map(bytes::Bytes::copy_from_slice).collect())
        }
        (Kind::ZSet, Some(Collection::ZSet(z))) => Seen::ZSet(
            z.iter()
                .map(|(m, s)| (bytes::Bytes::copy_from_slice(m), s.to_bits()))
                .collect(),
        ),
        (Kind::List, Some(Collection::List(l))) => {
            Seen::List(l.iter().map(|e| e.to_bytes()).collect())
        }
        (Kind::Stream, Some(Collection::Stream(x))) => Seen::Stream(
            x.entries()
                .map(|(id, e)| {
                    (
                        id,
                        Bytes::copy_from_slice(e.fields.iter().next().expect("a pair").1),
                    )
                })
                .collect(),
            x.last_id(),
        ),
        _ => Seen::None,
    }
}

/// The sequential specification: Redis on one node, value and expiry.
fn model(seen: &(Seen, Option<u64>), cmd: &Cmd) -> (Seen, Option<u64>) {
    let is_collection = |v: &Seen| {
        matches!(
            v,
            Seen::Hash(_) | Seen::Set(_) | Seen::ZSet(_) | Seen::List(_) | Seen::Stream(..)
        )
    };
    let is_string = matches!(seen.0, Seen::String(_));
    if let Cmd::Expire(x) = cmd {
        return if is_collection(&seen.0) || is_string {
            (seen.0.clone(), expire_at(x))
        } else {
            seen.clone()
        };
    }
    let value = model_value(&seen.0, cmd);
    // A key that shows nothing has no expiry; a collection keeps its own
    // while it shows something; a string keeps its own through INCR and
    // refused commands, and loses it to SET and DEL.
    let keeps = (is_collection(&value) && is_collection(&seen.0))
        || (is_string && !matches!(cmd, Cmd::Set(_) | Cmd::Del));
    let ttl = if keeps { seen.1 } else { None };
    (value, ttl)
}

fn model_value(seen: &Seen, cmd: &Cmd) -> Seen {
    let int = |v: &Bytes| std::str::from_utf8(v).ok()?.parse::<i64>().ok();
    match (seen, cmd) {
        (_, Cmd::Set(v)) => Seen::String(b(v)),
        (Seen::None, Cmd::Incr(n)) => Seen::String(b(n)),
        (Seen::String(v), Cmd::Incr(n)) => match int(v) {
            Some(x) => Seen::String(b(x + i64::from(*n))),
            None => seen.clone(),
        },
        (_, Cmd::Del) => Seen::None,
        (Seen::None, Cmd::PfAdd(e)) => Seen::String(pfadd(None, *e).expect("made")),
        (Seen::String(v), Cmd::PfAdd(e)) => match pfadd(Some(v), *e) {
            Some(h) => Seen::String(h),
            None => seen.clone(),
        },
        (Seen::None, Cmd::HSet(f, v)) => Seen::Hash([(b(f), b(v))].into()),
        (Seen::Hash(h), Cmd::HSet(f, v)) => {
            let mut h = h.clone();
            h.insert(b(f), b(v));
            Seen::Hash(h)
        }
        (Seen::None, Cmd::HIncr(f, n)) => Seen::Hash([(b(f), b(n))].into()),
        (Seen::Hash(h), Cmd::HIncr(f, n)) => {
            let mut h = h.clone();
            match h.get(&b(f)).map(int) {
                Some(None) => {}
                Some(Some(x)) => {
                    h.insert(b(f), b(x + i64::from(*n)));
                }
                None => {
                    h.insert(b(f), b(n));
                }
            }
            Seen::Hash(h)
        }
        (Seen::Hash(h), Cmd::HDel(f)) => {
            let mut h = h.clone();
            h.remove(&b(f));
            if h.is_empty() {
                Seen::None
            } else {
                Seen::Hash(h)
            }
        }
        (Seen::None, Cmd::SAdd(m)) => Seen::Set([b(m)].into()),
        (Seen::Set(s), Cmd::SAdd(m)) => {
            let mut s = s.clone();
            s.insert(b(m));
            Seen::Set(s)
        }
        (Seen::Set(s), Cmd::SRem(m)) => {
            let mut s = s.clone();
            s.remove(&b(m));
            if s.is_empty() {
                Seen::None
            } else {
                Seen::Set(s)
            }
        }
        (Seen::None, Cmd::ZAdd(m, sc)) => {
            Seen::ZSet([(b(m), (f64::from(*sc) / 2.0).to_bits())].into())
        }
        (Seen::ZSet(z), Cmd::ZAdd(m, sc)) => {
            let mut z = z.clone();
            z.insert(b(m), (f64::from(*sc) / 2.0).to_bits());
            Seen::ZSet(z)
        }
        (Seen::None, Cmd::ZIncr(m, n)) => {
            Seen::ZSet([(b(m), (0.0 + f64::from(*n) / 4.0).to_bits())].into())
        }
        (Seen::ZSet(z), Cmd::ZIncr(m, n)) => {
            let mut z = z.clone();
            let old = z.get(&b(m)).map_or(0.0, |s| f64::from_bits(*s));
            z.insert(b(m), (old + f64::from(*n) / 4.0).to_bits());
            Seen::ZSet(z)
        }
        (Seen::ZSet(z), Cmd::ZRem(m)) => {
            let mut z = z.clone();
            z.remove(&b(m));
            if z.is_empty() {
                Seen::None
            } else {
                Seen::ZSet(z)
            }
        }
        (Seen::None, Cmd::Push(_, v)) => Seen::List(vec![b(v)]),
        (Seen::List(l), Cmd::Push(front, v)) => {
            let mut l = l.clone();
            if *front {
                l.insert(0, b(v));
            } else {
                l.push(b(v));
            }
            Seen::List(l)
        }
        (Seen::List(l), Cmd::Pop(front)) => {
            let mut l = l.clone();
            if *front {
                l.remove(0);
            } else {
                l.pop();
            }
            if l.is_empty() {
                Seen::None
            } else {
                Seen::List(l)
            }
        }
        (Seen::List(l), Cmd::LSet(i, v)) if usize::from(*i) < l.len() => {
            let mut l = l.clone();
            l[usize::from(*i)] = b(v);
            Seen::List(l)
        }
        (Seen::List(l), Cmd::LInsert(i, v)) if usize::from(*i) < l.len() => {
            let mut l = l.clone();
            l.insert(usize::from(*i), b(v));
            Seen::List(l)
        }
        (Seen::None, Cmd::XAdd(v)) => {
            let id = StreamId::new(0, 1);
            Seen::Stream(vec![(id, b(v))], id)
        }
        (Seen::Stream(x, last), Cmd::XAdd(v)) => {
            let id = last.next().expect("an ID left");
            let mut x = x.clone();
            x.push((id, b(v)));
            Seen::Stream(x, id)
        }
        (Seen::Stream(x, last), Cmd::XDel(i)) if usize::from(*i) < x.len() => {
            let mut x = x.clone();
            x.remove(usize::from(*i));
            Seen::Stream(x, *last)
        }
        _ => seen.clone(),
    }
}

/// A step of a replicated run: a command at a replica, or a whole-state
/// sync from one replica to another.
#[derive(Clone, Debug)]
enum Step {
    At(usize, Cmd),
    Sync(usize, usize),
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        4 => (0usize..3, cmd()).prop_map(|(r, c)| Step::At(r, c)),
        1 => (0usize..3, 0usize..3).prop_map(|(a, b)| Step::Sync(a, b)),
    ]
}

/// Replays `steps` on three replicas (origins 1..=3, one clock for all so
/// a write after a sync is newer than what the sync brought); answers the
/// replicas and every delta in order.
fn replay(steps: &[Step]) -> (Vec<KeyState>, Vec<KeyState>) {
    replay_run(steps, 0)
}

/// [`replay`] as run number `run` of three (0..3) sharing one history of
/// versions: each run's timestamps are its own (`3 * step + run`), so
/// two runs never share a version, as no two real writes do.
fn replay_run(steps: &[Step], run: u64) -> (Vec<KeyState>, Vec<KeyState>) {
    let mut replicas = vec![KeyState::default(); 3];
    let mut deltas = Vec::new();
    for (ts, s) in steps.iter().enumerate() {
        match s {
            Step::At(r, c) => {
                let dot = Version::new(3 * (ts as u64 + 1) + run, *r as u32 + 1);
                if let Some(d) = apply(&replicas[*r], c, dot) {
                    replicas[*r].merge(d.clone());
                    deltas.push(d);
                }
            }
            Step::Sync(a, b) => {
                let from = replicas[*a].clone();
                replicas[*b].merge(from);
            }
        }
    }
    (replicas, deltas)
}

fn merged(mut a: KeyState, b: KeyState) -> KeyState {
    a.merge(b);
    a
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(1000))]

    #[test]
    fn key_state_merge_is_a_lattice(
        a in proptest::collection::vec(step(), 0..24),
        b in proptest::collection::vec(step(), 0..24),
        c in proptest::collection::vec(step(), 0..24),
    ) {
        // States real commands produce, from three unrelated runs.
        let x = replay_run(&a, 0).0.remove(0);
        let y = replay_run(&b, 1).0.remove(1);
        let z = replay_run(&c, 2).0.remove(2);
        prop_assert_eq!(merged(x.clone(), y.clone()), merged(y.clone(), x.clone()));
        prop_assert_eq!(
            merged(merged(x.clone(), y.clone()), z.clone()),
            merged(x.clone(), merged(y.clone(), z))
        );
        prop_assert_eq!(merged(x.clone(), x.clone()), x.clone());
        let mut m = x.clone();
        let changed = m.merge(y);
        prop_assert_eq!(changed, m != x);
    }

    #[test]
    fn replicas_that_got_the_same_deltas_agree(
        steps in proptest::collection::vec(step(), 0..40),
        order in proptest::collection::vec(any::<u64>(), 3),
    ) {
        let (_, deltas) = replay(&steps);
        let all = deltas.iter().cloned().fold(KeyState::default(), merged);
        for seed in order {
            // A shuffled delivery with every delta twice.
            let mut shuffled: Vec<KeyState> = deltas.iter().chain(&deltas).cloned().collect();
            let mut x = seed | 1;
            for i in (1..shuffled.len()).rev() {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                shuffled.swap(i, (x % (i as u64 + 1)) as usize);
            }
            let got = shuffled.into_iter().fold(KeyState::default(), merged);
            prop_assert_eq!(seen(&got), seen(&all));
            prop_assert_eq!(got, all.clone());
        }
        // Whole-state syncs carry nothing the deltas do not.
        let (replicas, _) = replay(&steps);
        let everything = replicas.into_iter().fold(KeyState::default(), merged);
        prop_assert_eq!(everything, all);
    }

    #[test]
    fn states_survive_their_encoding_and_digests_track_content(
        a in proptest::collection::vec(step(), 0..30),
        b in proptest::collection::vec(step(), 0..30),
    ) {
        let x = replay_run(&a, 0).0.remove(0);
        let y = replay_run(&b, 1).0.remove(1);
        for s in [&x, &y] {
            let back = KeyState::from_bytes(Bytes::from(s.to_bytes())).expect("decodes");
            prop_assert_eq!(&back, s);
            prop_assert_eq!(back.digest(), s.digest());
        }
        // The digest kept current through a merge equals the one a fresh
        // decode computes from scratch.
        let m = merged(x.clone(), y.clone());
        let fresh = KeyState::from_bytes(Bytes::from(m.to_bytes())).expect("decodes");
        prop_assert_eq!(fresh.digest(), m.digest());
        if x != y {
            prop_assert_ne!(x.digest(), y.digest());
        }
        // A truncated encoding is refused, never half taken.
        let bytes = m.to_bytes();
        for cut in [0, bytes.len() / 2, bytes.len().saturating_sub(1)] {
            if cut < bytes.len() {
                prop_assert!(KeyState::from_bytes(Bytes::copy_from_slice(&bytes[..cut])).is_none());
            }
        }
    }

    #[test]
    fn a_replacement_shows_exactly_its_target(
        a in proptest::collection::vec(step(), 0..30),
        b in proptest::collection::vec(step(), 0..30),
    ) {
        let x = replay_run(&a, 0).0.remove(0);
        let y = replay_run(&b, 1).0.remove(1);
        let delta = x.replace_with(&y, 0, 0, Version::new(1_000_000, 1));
        let after = merged(x.clone(), delta.clone());
        prop_assert_eq!(seen(&after), seen(&y));
        // Replacing with what it already shows changes nothing shown, but
        // is a write: the key's version moves (a WATCH on it fails).
        let dot = Version::new(1_000_000, 1);
        let same = x.replace_with(&x, 0, 0, dot);
        let after = merged(x.clone(), same.clone());
        prop_assert_eq!(seen(&after), seen(&x));
        if seen(&x).0 != Seen::None {
            prop_assert_eq!(after.newest(), dot);
        }
    }

    /// A transaction's commit that compares only the elements its
    /// deltas named (`elsa_lattice::touched`) writes exactly the delta
    /// that comparing every element writes.
    #[test]
    fn a_replacement_of_touched_elements_is_the_whole_replacement(
        a in proptest::collection::vec(step(), 0..30),
        txn in proptest::collection::vec(cmd(), 1..12),
    ) {
        let x = replay_run(&a, 0).0.remove(0);
        let mut copy = x.clone();
        let mut touched = elsa_lattice::Touched::default();
        let mut whole = false;
        for (n, c) in txn.iter().enumerate() {
            // Pending stamps, above every real version (`pending_stamp`).
            let pending = Version::new((1 << 63) + n as u64 + 1, 0);
            if let Some(d) = apply(&copy, c, pending) {
                whole |= !touched.note(&d);
                copy.merge(d);
            }
        }
        let dot = Version::new(1_000_000, 1);
        let full = x.replace_with(&copy, 0, 0, dot);
        let part = x.replace_touched(&copy, (!whole).then_some(&touched), 0, 0, dot);
        prop_assert_eq!(&part, &full);
        prop_assert_eq!(seen(&merged(x.clone(), part)), seen(&copy));
    }

    #[test]
    fn decoding_garbage_refuses_it_without_panicking(
        junk in proptest::collection::vec(any::<u8>(), 0..200),
    ) {
        let _ = KeyState::from_bytes(Bytes::from(junk));
    }

    #[test]
    fn one_replica_alone_behaves_as_redis(
        cmds in proptest::collection::vec(cmd(), 0..40),
    ) {
        let steps: Vec<Step> = cmds.iter().cloned().map(|c| Step::At(0, c)).collect();
        let mut want = (Seen::None, None);
        let mut state = KeyState::default();
        for (ts, c) in cmds.iter().enumerate() {
            want = model(&want, c);
            if let Some(d) = apply(&state, c, Version::new(3 * (ts as u64 + 1), 1)) {
                state.merge(d);
            }
            prop_assert_eq!(seen(&state), want.clone(), "after {:?}", c);
        }
        prop_assert_eq!(replay(&steps).0.remove(0), state);
    }
}

#[test]
fn concurrent_increments_in_three_regions_all_count() {
    let steps = vec![
        Step::At(0, Cmd::Set(5)),
        Step::Sync(0, 1),
        Step::Sync(0, 2),
        Step::At(0, Cmd::Incr(3)),
        Step::At(1, Cmd::Incr(2)),
        Step::At(2, Cmd::Incr(-1)),
        Step::At(1, Cmd::Incr(1)),
    ];
    let (replicas, _) = replay(&steps);
    let all = replicas.into_iter().fold(KeyState::default(), merged);
    assert_eq!(seen(&all).0, Seen::String(b(10)));
}

#[test]
fn a_set_keeps_the_increments_it_did_not_see() {
    let steps = vec![
        Step::At(0, Cmd::Incr(3)),
        Step::Sync(0, 1),
        Step::At(1, Cmd::Set(1)),  // saw the 3: resets it
        Step::At(0, Cmd::Incr(2)), // concurrent with the SET
    ];
    let (replicas, _) = replay(&steps);
    let all = replicas.into_iter().fold(KeyState::default(), merged);
    assert_eq!(seen(&all).0, Seen::String(b(3)));
}

#[test]
fn concurrent_pfadds_all_count_and_a_set_resets_what_it_saw() {
    let count = |s: &KeyState| match seen(s).0 {
        Seen::String(v) => elsa_lattice::hll::count(&v).unwrap(),
        other => panic!("a string: {other:?}"),
    };
    // Created concurrently in three regions, then more in two of them.
    let steps = vec![
        Step::At(0, Cmd::PfAdd(0)),
        Step::At(1, Cmd::PfAdd(1)),
        Step::At(2, Cmd::PfAdd(2)),
        Step::Sync(0, 1),
        Step::At(1, Cmd::PfAdd(3)),
        Step::At(2, Cmd::PfAdd(4)),
    ];
    let (replicas, _) = replay(&steps);
    let all = replicas.into_iter().fold(KeyState::default(), merged);
    assert_eq!(count(&all), 5);
    // A SET made after seeing some of them resets those; a PFADD
    // concurrent with it was made on what it replaced and loses too.
    let steps = vec![
        Step::At(0, Cmd::PfAdd(0)),
        Step::Sync(0, 1),
        Step::At(1, Cmd::Del),
        Step::At(1, Cmd::PfAdd(1)),
        Step::At(0, Cmd::PfAdd(2)), // on the value the DEL removed
        Step::At(2, Cmd::PfAdd(3)), // on nothing, before the DEL: lost too
    ];
    let (replicas, _) = replay(&steps);
    let all = replicas.into_iter().fold(KeyState::default(), merged);
    assert_eq!(count(&all), 1);
}

#[test]
fn concurrent_fields_and_members_all_stay_and_adds_beat_removes() {
    let steps = vec![
        Step::At(0, Cmd::HSet(0, 1)),
        Step::Sync(0, 1),
        Step::At(0, Cmd::HSet(1, 1)),
        Step::At(1, Cmd::HSet(2, 2)),
        Step::At(1, Cmd::HDel(0)),     // removes the field it saw
        Step::At(2, Cmd::HIncr(0, 3)), // never saw it: its own field 0
    ];
    let (replicas, _) = replay(&steps);
    let all = replicas.into_iter().fold(KeyState::default(), merged);
    let Seen::Hash(h) = seen(&all).0 else {
        panic!("a hash: {:?}", seen(&all))
    };
    assert_eq!(h.get(&b(1)), Some(&b(1)));
    assert_eq!(h.get(&b(2)), Some(&b(2)));
    // HINCRBY at replica 3 was concurrent with the HDEL: add-wins, and it
    // counts on top of the value it merged with.
    assert!(h.contains_key(&b(0)), "{h:?}");

    let steps = vec![
        Step::At(0, Cmd::SAdd(1)),
        Step::Sync(0, 1),
        Step::At(1, Cmd::SRem(1)),
        Step::At(2, Cmd::SAdd(1)), // concurrent add
        Step::At(0, Cmd::SAdd(2)),
    ];
    let (replicas, _) = replay(&steps);
    let all = replicas.into_iter().fold(KeyState::default(), merged);
    assert_eq!(seen(&all).0, Seen::Set([b(1), b(2)].into()));
}

#[test]
fn a_newer_write_of_another_type_replaces_older_elements() {
    let steps = vec![
        Step::At(0, Cmd::SAdd(1)),
        Step::Sync(0, 1),
        Step::At(1, Cmd::Del),
        Step::At(1, Cmd::Set(7)),  // replaces the set
        Step::At(2, Cmd::SAdd(3)), // concurrent, newer: the set wins again
    ];
    let (replicas, _) = replay(&steps);
    let all = replicas.into_iter().fold(KeyState::default(), merged);
    assert_eq!(seen(&all).0, Seen::Set([b(3)].into()));
}

#[test]
fn a_remove_is_collected_by_its_own_age_not_the_age_of_the_add_it_removed() {
    let m = Bytes::from("m");
    // Added long ago (ts 1); everyone has the add.
    let added = OrSet::default().add(elsa_lattice::Elem::from(&m), Version::new(1, 1));
    let mut here = OrSet::default();
    here.merge(added.clone());
    let elsewhere = here.clone();
    // Removed recently (ts 10): another replica may not have the remove.
    let removal = here.remove(&m, Version::new(10, 1)).unwrap();
    here.merge(removal);
    assert!(!here.contains(&m));
    // A horizon between the add and the remove: the remove must stay, or
    // the replica that lacks it would bring the member back.
    here.collect(Version::new(5, 0));
    here.merge(elsewhere.clone());
    assert!(!here.contains(&m), "a recent remove survived collection");
    // Once every replica has it (horizon past the remove), it may go.
    assert_eq!(here.collect(Version::new(11, 0)), 1);
}

proptest! {
    #[test]
    fn collecting_removes_never_changes_what_a_key_shows(
        steps in proptest::collection::vec(step(), 0..40),
        horizon in 0u64..150,
    ) {
        let (replicas, _) = replay(&steps);
        for r in replicas {
            let mut c = r.clone();
            c.collect(Version::new(horizon, 0));
            prop_assert_eq!(seen(&c), seen(&r));
        }
    }
}

proptest! {
    /// A whole hash's reply from one buffer (`OrMap::pairs`, HGETALL)
    /// holds exactly what iterating the fields gives, counters included.
    #[test]
    fn pairs_from_one_buffer_are_the_fields_and_values(
        steps in proptest::collection::vec(step(), 0..40),
    ) {
        let (replicas, _) = replay(&steps);
        for r in replicas {
            if let Some(Collection::Hash(m)) = &r.collection {
                let one_by_one: Vec<(Bytes, Bytes)> =
                    m.iter().map(|(f, v)| (bytes::Bytes::copy_from_slice(f), v)).collect();
                let packed = m.pairs();
                prop_assert_eq!(packed.len(), one_by_one.len());
                prop_assert!(packed.iter().eq(one_by_one.iter().map(|(f, v)| (&f[..], &v[..]))));
                prop_assert_eq!(packed.to_vec(), one_by_one);
            }
        }
    }
}

/// An `EXPIRE` of a hash in one region, and a set created under that key
/// by another region that never saw the hash (later, so the set wins):
/// the set has no expiry, in whatever order the writes meet — the expiry
/// belongs to the hash. (Before, the set inherited it.) An expiry alone
/// (its delta first) orders like the collection's writes.
#[test]
fn an_expiry_stays_with_the_collection_it_was_set_on() {
    let hset = apply(&KeyState::default(), &Cmd::HSet(0, 1), Version::new(10, 1)).unwrap();
    let mut r1 = hset.clone();
    let expire = apply(&r1, &Cmd::Expire(Some(1)), Version::new(20, 1)).unwrap();
    r1.merge(expire.clone());
    assert_eq!(seen(&r1).1, expire_at(&Some(1)));
    let sadd = apply(&KeyState::default(), &Cmd::SAdd(2), Version::new(30, 2)).unwrap();
    for order in [
        vec![&hset, &expire, &sadd],
        vec![&sadd, &expire, &hset],
        vec![&expire, &sadd, &hset],
        vec![&expire, &hset, &sadd],
    ] {
        let got = order.into_iter().cloned().fold(KeyState::default(), merged);
        assert_eq!(seen(&got), (Seen::Set([b(2)].into()), None), "{got:?}");
    }
    // An expiry set on the set afterwards applies.
    let mut r2 = merged(merged(hset, expire), sadd);
    let own = apply(&r2, &Cmd::Expire(Some(2)), Version::new(40, 2)).unwrap();
    r2.merge(own);
    assert_eq!(seen(&r2).1, expire_at(&Some(2)));
}

/// Found by `a_replacement_shows_exactly_its_target` in CI (2026-12-02): a
/// transaction's HyperLogLog with a TTL, written over a cleared list, lost
/// the TTL (it was written as a part, whose TTL change had no value to
/// retime).
#[test]
fn a_hyperloglog_with_a_ttl_replacing_a_cleared_list_keeps_its_ttl() {
    let a = [
        Step::At(0, Cmd::Del),
        Step::At(0, Cmd::Push(false, 0)),
        Step::At(0, Cmd::Del),
    ];
    let b = [
        Step::At(1, Cmd::PfAdd(0)),
        Step::At(1, Cmd::Expire(Some(0))),
    ];
    let x = replay_run(&a, 0).0.remove(0);
    let y = replay_run(&b, 1).0.remove(1);
    let delta = x.replace_with(&y, 0, 0, Version::new(1_000_000, 1));
    assert_eq!(seen(&merged(x, delta)), seen(&y));
}

//! A packed collection and its map form are the same lattice (issue 43),
//! for hashes, sets and sorted sets:
//! one history of random writes at two replicas, run once with packing and
//! once without, gives states that compare equal, have the same digest,
//! encode to the same bytes and answer the same — and a state of either
//! form merged into one of the other gives what two of one form give.
//! The histories cross the packing limits both ways: fields past
//! [`MAX_ENTRIES`], values longer than [`MAX_ELEM`], removes that a
//! collector forgets, and a whole collection deleted.

use bytes::Bytes;
use elsa_lattice::{set_packing, Crdt, Elem, OrMap, OrSet, Version, ZSet, MAX_ELEM, MAX_ENTRIES};
use proptest::prelude::*;

/// One write at one of two replicas, or a sync between them.
#[derive(Clone, Debug)]
enum Step {
    /// HSET of field `f` with a value of `len` bytes, at replica `at`.
    Set { at: usize, f: u16, len: u8 },
    /// HINCRBY of field `f`.
    Incr { at: usize, f: u16, by: i8 },
    /// HDEL of field `f`.
    Del { at: usize, f: u16 },
    /// DEL of the whole hash.
    Clear { at: usize },
    /// Replica `to` merges replica `from`'s whole state.
    Sync { from: usize, to: usize },
    /// Both replicas collect removes older than every write so far.
    Collect,
}

fn step(fields: u16) -> impl Strategy<Value = Step> {
    let at = 0usize..2;
    prop_oneof![
        6 => (at.clone(), 0..fields, 0u8..(MAX_ELEM as u8 + 8))
            .prop_map(|(at, f, len)| Step::Set { at, f, len }),
        1 => (at.clone(), 0..fields, -3i8..4).prop_map(|(at, f, by)| Step::Incr { at, f, by }),
        2 => (at.clone(), 0..fields).prop_map(|(at, f)| Step::Del { at, f }),
        1 => at.clone().prop_map(|at| Step::Clear { at }),
        2 => (at.clone(), at).prop_map(|(from, to)| Step::Sync { from, to }),
        1 => Just(Step::Collect),
    ]
}

fn field(f: u16) -> Vec<u8> {
    format!("field{f}").into_bytes()
}

/// Runs `steps` at two replicas (origins 1 and 2), packing or not.
fn run(steps: &[Step], packing: bool) -> [OrMap; 2] {
    set_packing(packing);
    let mut r = [OrMap::default(), OrMap::default()];
    for (i, s) in steps.iter().enumerate() {
        let ts = 1_000 + i as u64 * 7;
        match s {
            Step::Set { at, f, len } => {
                let dot = Version::new(ts, *at as u32 + 1);
                let value = vec![b'a' + (i % 26) as u8; usize::from(*len)];
                let d = r[*at].set(&field(*f), &value, ts - 1, dot);
                r[*at].merge(d);
            }
            Step::Incr { at, f, by } => {
                let dot = Version::new(ts, *at as u32 + 1);
                if let Ok((_, d)) = r[*at].incr_by(&field(*f), i64::from(*by), ts - 1, dot) {
                    r[*at].merge(d);
                }
            }
            Step::Del { at, f } => {
                let dot = Version::new(ts, *at as u32 + 1);
                if let Some(d) = r[*at].remove(&field(*f), dot) {
                    r[*at].merge(d);
                }
            }
            Step::Clear { at } => {
                let d = r[*at].clear(Version::new(ts, *at as u32 + 1));
                r[*at].merge(d);
            }
            Step::Sync { from, to } => {
                let s = r[*from].clone();
                r[*to].merge(s);
            }
            Step::Collect => {
                for m in &mut r {
                    m.collect(Version::new(ts, 0));
                }
            }
        }
    }
    set_packing(true);
    r
}

/// What a hash answers: its fields and values, sorted.
fn answers(m: &OrMap) -> Vec<(Bytes, Bytes)> {
    let mut v: Vec<(Bytes, Bytes)> = m
        .iter()
        .map(|(f, v)| (Bytes::copy_from_slice(f), v))
        .collect();
    v.sort();
    v
}

fn same(a: &OrMap, b: &OrMap) -> Result<(), TestCaseError> {
    prop_assert_eq!(a, b);
    prop_assert_eq!(a.digest(), b.digest());
    prop_assert_eq!(a.len(), b.len());
    prop_assert_eq!(a.entries(), b.entries());
    prop_assert_eq!(answers(a), answers(b));
    prop_assert_eq!(a.pairs().to_vec().len(), b.len());
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(400))]

    #[test]
    fn a_packed_hash_is_the_same_lattice_as_its_map(
        small in proptest::collection::vec(step(6), 0..60),
        big in proptest::collection::vec(step(MAX_ENTRIES as u16 + 20), 0..400),
    ) {
        for steps in [&small, &big] {
            let packed = run(steps, true);
            let full = run(steps, false);
            for i in 0..2 {
                same(&packed[i], &full[i])?;
                // Every field's value, one by one (a packed read scans).
                for f in 0..MAX_ENTRIES as u16 + 20 {
                    prop_assert_eq!(packed[i].get(&field(f)), full[i].get(&field(f)));
                    prop_assert_eq!(packed[i].contains(&field(f)), full[i].contains(&field(f)));
                }
            }
            // Across forms: a packed state merged into a map gives what two
            // maps give, and the other way round.
            let mut a = full[0].clone();
            set_packing(false);
            a.merge(full[1].clone());
            set_packing(true);
            let mut b = packed[0].clone();
            b.merge(full[1].clone());
            same(&b, &a)?;
            let mut c = full[0].clone();
            c.merge(packed[1].clone());
            same(&c, &a)?;
            let mut d = packed[0].clone();
            d.merge(packed[1].clone());
            same(&d, &a)?;
            // Idempotent, and merging what it has changes nothing.
            let mut e = d.clone();
            prop_assert!(!e.merge(d.clone()));
            same(&e, &d)?;
        }
    }
}

/// The limits themselves: 128 short fields pack, a 129th or a value of
/// 65 bytes turns the hash into its map, and a hash that shrinks back
/// under them by removes packs again once its collector forgot them.
#[test]
fn the_limits_are_redis_listpack_limits() {
    set_packing(true);
    let mut m = OrMap::default();
    let mut ts = 10;
    let set = |m: &mut OrMap, f: usize, len: usize, ts: &mut u64| {
        *ts += 1;
        let d = m.set(
            format!("f{f}").as_bytes(),
            &vec![b'v'; len],
            *ts,
            Version::new(*ts, 1),
        );
        m.merge(d);
    };
    for f in 0..MAX_ENTRIES {
        set(&mut m, f, 8, &mut ts);
    }
    assert!(m.packed_bytes().is_some(), "128 short fields pack");
    set(&mut m, MAX_ENTRIES, 8, &mut ts);
    assert!(m.packed_bytes().is_none(), "a 129th field does not");
    ts += 1;
    let d = m.remove(format!("f{MAX_ENTRIES}").as_bytes(), Version::new(ts, 1));
    m.merge(d.expect("a live field"));
    m.collect(Version::new(ts + 1, 0));
    assert!(m.packed_bytes().is_some(), "back under the limit, packed");
    set(&mut m, 0, MAX_ELEM + 1, &mut ts);
    assert!(m.packed_bytes().is_none(), "a 65-byte value does not pack");
    set(&mut m, 0, MAX_ELEM, &mut ts);
    assert!(m.packed_bytes().is_some(), "64 bytes do");
}

/// A set member: `m` decides it, `len` its length (past the limit too).
fn member(m: u16, len: u8) -> Vec<u8> {
    let mut v = format!("m{m}-").into_bytes();
    v.resize(v.len().max(usize::from(len)), b'x');
    v
}

/// Runs `steps` on a set at two replicas: `Set` adds member `f` (of
/// length `len % 8 * 10`, so some members are longer than the limit),
/// `Incr` adds it too, `Del` removes it.
fn run_set(steps: &[Step], packing: bool) -> [OrSet; 2] {
    set_packing(packing);
    let mut r = [OrSet::default(), OrSet::default()];
    let len_of = |f: u16| (f % 9) as u8 * 9;
    for (i, s) in steps.iter().enumerate() {
        let ts = 1_000 + i as u64 * 7;
        match s {
            Step::Set { at, f, .. } | Step::Incr { at, f, .. } => {
                let dot = Version::new(ts, *at as u32 + 1);
                let d = r[*at].add(Elem::new(&member(*f, len_of(*f))), dot);
                r[*at].merge(d);
            }
            Step::Del { at, f } => {
                let dot = Version::new(ts, *at as u32 + 1);
                if let Some(d) = r[*at].remove(&member(*f, len_of(*f)), dot) {
                    r[*at].merge(d);
                }
            }
            Step::Clear { at } => {
                let d = r[*at].clear(Version::new(ts, *at as u32 + 1));
                r[*at].merge(d);
            }
            Step::Sync { from, to } => {
                let s = r[*from].clone();
                r[*to].merge(s);
            }
            Step::Collect => {
                for m in &mut r {
                    m.collect(Version::new(ts, 0));
                }
            }
        }
    }
    set_packing(true);
    r
}

fn same_set(a: &OrSet, b: &OrSet) -> Result<(), TestCaseError> {
    prop_assert_eq!(a, b);
    prop_assert_eq!(a.digest(), b.digest());
    prop_assert_eq!(a.len(), b.len());
    prop_assert_eq!(a.entries(), b.entries());
    let sorted = |s: &OrSet| {
        let mut v: Vec<Vec<u8>> = s.iter().map(<[u8]>::to_vec).collect();
        v.sort();
        v
    };
    prop_assert_eq!(sorted(a), sorted(b));
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(400))]

    #[test]
    fn a_packed_set_is_the_same_lattice_as_its_map(
        small in proptest::collection::vec(step(6), 0..60),
        big in proptest::collection::vec(step(MAX_ENTRIES as u16 + 20), 0..400),
    ) {
        for steps in [&small, &big] {
            let packed = run_set(steps, true);
            let full = run_set(steps, false);
            for i in 0..2 {
                same_set(&packed[i], &full[i])?;
            }
            let mut a = full[0].clone();
            set_packing(false);
            a.merge(full[1].clone());
            set_packing(true);
            for (x, y) in [(&packed[0], &full[1]), (&full[0], &packed[1]), (&packed[0], &packed[1])] {
                let mut m = x.clone();
                m.merge(y.clone());
                same_set(&m, &a)?;
                let mut again = m.clone();
                prop_assert!(!again.merge(m.clone()));
            }
        }
    }
}

/// Runs `steps` on a sorted set at two replicas: `Set` is a ZADD of
/// member `f` (score `len`, a fraction for odd lengths), `Incr` a
/// ZINCRBY, `Del` a ZREM.
fn run_zset(steps: &[Step], packing: bool) -> [ZSet; 2] {
    set_packing(packing);
    let mut r = [ZSet::default(), ZSet::default()];
    let len_of = |f: u16| (f % 9) as u8 * 9;
    for (i, s) in steps.iter().enumerate() {
        let ts = 1_000 + i as u64 * 7;
        match s {
            Step::Set { at, f, len } => {
                let dot = Version::new(ts, *at as u32 + 1);
                let score = f64::from(*len) / if len % 2 == 1 { 4.0 } else { 1.0 } - 20.0;
                let d = r[*at].set(&member(*f, len_of(*f)), score, dot);
                r[*at].merge(d);
            }
            Step::Incr { at, f, by } => {
                let dot = Version::new(ts, *at as u32 + 1);
                if let Some((_, d)) = r[*at].incr(&member(*f, len_of(*f)), f64::from(*by), dot) {
                    r[*at].merge(d);
                }
            }
            Step::Del { at, f } => {
                let dot = Version::new(ts, *at as u32 + 1);
                if let Some(d) = r[*at].remove(&member(*f, len_of(*f)), dot) {
                    r[*at].merge(d);
                }
            }
            Step::Clear { at } => {
                let d = r[*at].clear(Version::new(ts, *at as u32 + 1));
                r[*at].merge(d);
            }
            Step::Sync { from, to } => {
                let s = r[*from].clone();
                r[*to].merge(s);
            }
            Step::Collect => {
                for m in &mut r {
                    m.collect(Version::new(ts, 0));
                }
            }
        }
    }
    set_packing(true);
    r
}

fn same_zset(a: &ZSet, b: &ZSet) -> Result<(), TestCaseError> {
    prop_assert_eq!(a, b);
    prop_assert_eq!(a.digest(), b.digest());
    prop_assert_eq!(a.len(), b.len());
    prop_assert_eq!(a.entries(), b.entries());
    let order = |z: &ZSet| {
        let o = z.ordered();
        o.range(0, o.len())
            .into_iter()
            .map(|(s, m)| (s.to_bits(), m.to_vec()))
            .collect::<Vec<_>>()
    };
    prop_assert_eq!(order(a), order(b));
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    #[test]
    fn a_packed_sorted_set_is_the_same_lattice_as_its_map(
        small in proptest::collection::vec(step(6), 0..60),
        big in proptest::collection::vec(step(MAX_ENTRIES as u16 + 20), 0..400),
    ) {
        for steps in [&small, &big] {
            let packed = run_zset(steps, true);
            let full = run_zset(steps, false);
            for i in 0..2 {
                same_zset(&packed[i], &full[i])?;
            }
            let mut a = full[0].clone();
            set_packing(false);
            a.merge(full[1].clone());
            set_packing(true);
            for (x, y) in [(&packed[0], &full[1]), (&full[0], &packed[1]), (&packed[0], &packed[1])] {
                let mut m = x.clone();
                m.merge(y.clone());
                same_zset(&m, &a)?;
                let mut again = m.clone();
                prop_assert!(!again.merge(m.clone()));
            }
        }
    }
}

//! A transaction's change to a stream installed as a delta
//! (`Stream::delta_to`, issue 46): random stream and group operations
//! build a key's state; a transaction runs more of them on a copy, each
//! stamped with a placeholder version above every real one (as the
//! transaction views stamp them); meanwhile another region adds, deletes
//! and trims on the same state. Checked:
//!
//! - the delta, merged into the state the transaction read, shows exactly
//!   what the transaction's commands made (DUMP's parts);
//! - merged where the other region's changes already are, it keeps every
//!   entry that region added (unless the transaction trimmed below it),
//!   and everything the transaction added shows (unless the other region
//!   trimmed below it) — a whole-stream install dropped the other
//!   region's entries;
//! - a transaction of adds, reads and acknowledgements (`MULTI` with
//!   `XADD`, `XREADGROUP`, `XACK`: what applications do) always gets a
//!   delta.

use elsa_lattice::stream::{Stream, StreamId};
use elsa_lattice::{Crdt, Elem, Version};
use proptest::prelude::*;

#[derive(Clone, Debug)]
enum Op {
    Add(u8),
    Del(u8),
    Trim(u8),
    SetId(u8),
    Create(u8),
    Destroy,
    SetGroup(u8),
    Read(u8, u8),
    Ack(u8),
    DelConsumer(u8),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (0u8..24).prop_map(Op::Add),
        1 => (0u8..24).prop_map(Op::Del),
        1 => (0u8..24).prop_map(Op::Trim),
        1 => (0u8..24).prop_map(Op::SetId),
        1 => (0u8..6).prop_map(Op::Create),
        1 => Just(Op::Destroy),
        1 => (0u8..24).prop_map(Op::SetGroup),
        2 => (0u8..24, 0u8..2).prop_map(|(i, c)| Op::Read(i, c)),
        2 => (0u8..24).prop_map(Op::Ack),
        1 => (0u8..2).prop_map(Op::DelConsumer),
    ]
}

/// The common transaction: adds, group reads and acknowledgements.
fn app_op() -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => (0u8..24).prop_map(Op::Add),
        2 => (0u8..24, 0u8..2).prop_map(|(i, c)| Op::Read(i, c)),
        2 => (0u8..24).prop_map(Op::Ack),
    ]
}

/// IDs by origin: origin `o` adds `(i, o)`, so two regions never take
/// one ID (as `*` IDs carry their node).
fn id(i: u8, origin: u32) -> StreamId {
    StreamId::new(u64::from(i), u64::from(origin))
}

fn apply(s: &mut Stream, op: &Op, origin: u32, v: Version) {
    let g = b"g";
    let d = match op {
        Op::Add(i) => {
            let x = id(*i, origin);
            (x > s.last_id()).then(|| s.add(x, vec![(Elem::new(b"f"), Elem::new(&[*i]))], v))
        }
        Op::Del(i) => Some(s.delete(&[id(*i, 1)], v)),
        Op::Trim(i) => Some(s.trim_below(id(*i, 0), v)),
        Op::SetId(i) => Some(s.set_id(id(*i, 9).max(s.last_id()), None, None, v)),
        Op::Create(i) => s
            .group(g)
            .is_none()
            .then(|| s.create_group(Elem::new(g), id(*i, 0), 0, v)),
        Op::Destroy => s.destroy_group(g, v),
        Op::SetGroup(i) => s.set_group_id(g, id(*i, 0), 0, v),
        Op::Read(i, c) => {
            let ids: Vec<StreamId> = s
                .entries()
                .map(|(x, _)| x)
                .filter(|x| *x >= id(*i, 0))
                .take(2)
                .collect();
            let last = ids.last().copied();
            s.deliver(g, &[b'c', *c], &ids, last.map(|l| (l, 1)), 5, v)
        }
        Op::Ack(i) => s.ack(g, &[id(*i, 1)], v),
        Op::DelConsumer(c) => s.delete_consumer(g, &[b'c', *c], v),
    };
    if let Some(d) = d {
        s.merge(d);
    }
}

/// A placeholder version, as a transaction's view stamps (above every
/// real one).
fn pending(n: u64) -> Version {
    Version::new((1 << 63) + n, 0)
}

fn shown(s: &Stream) -> Vec<StreamId> {
    s.entries().map(|(x, _)| x).collect()
}

fn check(
    base_ops: &[Op],
    txn: &[Op],
    remote: &[Op],
    must_delta: bool,
) -> Result<(), TestCaseError> {
    elsa_lattice::stream::log::set_chunk_entries(2);
    let mut base = Stream::default();
    for (t, o) in base_ops.iter().enumerate() {
        apply(&mut base, o, 1, Version::new(t as u64 + 1, 1));
    }
    let mut target = base.clone();
    for (n, o) in txn.iter().enumerate() {
        apply(&mut target, o, 1, pending(n as u64 + 1));
    }
    let mut other = base.clone();
    for (t, o) in remote.iter().enumerate() {
        apply(&mut other, o, 2, Version::new(1000 + t as u64, 2));
    }
    let dot = Version::new(5000, 1);
    let Some(delta) = base.delta_to(&target, dot) else {
        prop_assert!(!must_delta, "no delta for an application's transaction");
        return Ok(());
    };
    let mut here = base.clone();
    here.merge(delta.clone());
    prop_assert_eq!(here.to_parts(), target.to_parts());
    // Where the other region's changes are already.
    let mut there = other.clone();
    there.merge(delta);
    let fin = shown(&there);
    for x in shown(&other).into_iter().filter(|x| !base.holds(*x)) {
        prop_assert_eq!(
            fin.contains(&x),
            x >= target.floor(),
            "the other region's entry {:?}",
            x
        );
    }
    let deleted_there: Vec<StreamId> = remote
        .iter()
        .filter_map(|o| match o {
            Op::Del(i) => Some(id(*i, 1)),
            _ => None,
        })
        .collect();
    for x in shown(&target).into_iter().filter(|x| !base.holds(*x)) {
        prop_assert_eq!(
            fin.contains(&x),
            x >= other.floor() && !deleted_there.contains(&x),
            "the transaction's entry {:?}",
            x
        );
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(
        std::env::var("STREAM_CASES").ok().and_then(|n| n.parse().ok()).unwrap_or(1000)
    ))]

    #[test]
    fn a_transactions_delta_shows_what_it_made_and_keeps_the_other_regions_entries(
        base in prop::collection::vec(op(), 0..20),
        txn in prop::collection::vec(op(), 1..8),
        remote in prop::collection::vec(op(), 0..8),
    ) {
        check(&base, &txn, &remote, false)?;
    }

    #[test]
    fn an_applications_transaction_always_gets_a_delta(
        base in prop::collection::vec(op(), 0..20),
        txn in prop::collection::vec(app_op(), 1..8),
        remote in prop::collection::vec(op(), 0..8),
    ) {
        check(&base, &txn, &remote, true)?;
    }
}

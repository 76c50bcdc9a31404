//! The stream lattice's merge laws (`elsa_lattice::stream`), over states
//! real operations produce: random stream and consumer-group operations
//! at three replicas (three origins), each applied to the replica's own
//! state and its delta merged there, with deltas exchanged in random
//! orders.
//!
//! - merge is commutative, associative and idempotent;
//! - every replica that received every delta, in any order and any number
//!   of times, holds the same state;
//! - nothing deleted or trimmed shows again, and the entries show in ID
//!   order;
//! - all of it with the log cut in chunks of two entries, so merges land
//!   inside chunks and split them.

use elsa_lattice::stream::{Stream, StreamId};
use elsa_lattice::{Collection, Crdt, Elem, KeyState, Version};
use proptest::prelude::*;

#[derive(Clone, Debug)]
enum Op {
    /// XADD of an ID (small, so two replicas take the same one).
    Add(u8, u8),
    Del(u8),
    Trim(u8),
    SetId(u8),
    Create(u8),
    Destroy,
    SetGroup(u8),
    /// XREADGROUP of the IDs from one on, for a consumer.
    Read(u8, u8),
    Ack(u8),
    DelConsumer(u8),
    /// DEL of the key: every part at or below its version forgotten.
    DelKey,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (0u8..12, 0u8..3).prop_map(|(i, f)| Op::Add(i, f)),
        1 => (0u8..12).prop_map(Op::Del),
        1 => (0u8..12).prop_map(Op::Trim),
        1 => (0u8..12).prop_map(Op::SetId),
        1 => (0u8..6).prop_map(Op::Create),
        1 => Just(Op::Destroy),
        1 => (0u8..12).prop_map(Op::SetGroup),
        2 => (0u8..12, 0u8..2).prop_map(|(i, c)| Op::Read(i, c)),
        2 => (0u8..12).prop_map(Op::Ack),
        1 => (0u8..2).prop_map(Op::DelConsumer),
        1 => Just(Op::DelKey),
    ]
}

fn id(i: u8) -> StreamId {
    StreamId::new(u64::from(i / 3), u64::from(i % 3))
}

/// The delta of `op` at replica `s`, committed as `v` (None: nothing to do).
fn delta(s: &Stream, op: &Op, v: Version) -> Option<Stream> {
    let g = b"g";
    match op {
        Op::Add(i, f) => Some(s.add(id(*i), vec![(Elem::new(b"f"), Elem::new(&[*f]))], v)),
        Op::Del(i) => Some(s.delete(&[id(*i)], v)),
        Op::Trim(i) => Some(s.trim_below(id(*i), v)),
        Op::SetId(i) => Some(s.set_id(id(*i).max(s.last_id()), Some(7), None, v)),
        Op::Create(i) => Some(s.create_group(Elem::new(g), id(*i), 0, v)),
        Op::Destroy => s.destroy_group(g, v),
        Op::SetGroup(i) => s.set_group_id(g, id(*i), 0, v),
        Op::Read(i, c) => {
            let ids: Vec<StreamId> = s
                .entries()
                .map(|(id, _)| id)
                .filter(|x| *x >= id(*i))
                .take(2)
                .collect();
            let last = ids.last().copied();
            s.deliver(g, &[b'c', *c], &ids, last.map(|l| (l, 1)), 5, v)
        }
        Op::Ack(i) => s.ack(g, &[id(*i)], v),
        Op::DelConsumer(c) => s.delete_consumer(g, &[b'c', *c], v),
        Op::DelKey => None,
    }
}

/// A replica as the key's state keeps it: the stream, and the newest
/// delete seen, below which nothing merges (`KeyState`'s floor).
#[derive(Clone, Debug, Default, PartialEq)]
struct Replica {
    stream: Stream,
    floor: Version,
}

/// What travels: a stream delta or a delete.
#[derive(Clone, Debug)]
#[allow(clippy::large_enum_variant)] // a test's few values
enum Delta {
    Stream(Stream),
    Forget(Version),
}

impl Replica {
    fn apply(&mut self, d: &Delta) {
        match d {
            Delta::Stream(s) => {
                let mut s = s.clone();
                s.drop_through(self.floor);
                self.stream.merge(s);
            }
            Delta::Forget(v) => {
                self.floor = self.floor.max(*v);
                self.stream.drop_through(self.floor);
            }
        }
    }
}

fn merged(mut a: Stream, b: &Stream) -> Stream {
    a.merge(b.clone());
    a
}

proptest! {
    // 1,000 cases by default; `STREAM_CASES` for long runs.
    #![proptest_config(ProptestConfig::with_cases(
        std::env::var("STREAM_CASES").ok().and_then(|n| n.parse().ok()).unwrap_or(1000)
    ))]

    #[test]
    fn replicas_that_saw_every_delta_agree(
        ops in prop::collection::vec((0usize..3, op()), 1..40),
        order in prop::collection::vec(0usize..1000, 0..40),
    ) {
        // Chunks of two entries: the 12 IDs spread over many chunks, and
        // entries land inside them and split them.
        elsa_lattice::stream::log::set_chunk_entries(2);
        let mut replicas = vec![Replica::default(); 3];
        let mut deltas: Vec<Delta> = Vec::new();
        for (ts, (r, o)) in ops.iter().enumerate() {
            let v = Version::new(ts as u64 + 1, *r as u32 + 1);
            let d = match o {
                Op::DelKey => Some(Delta::Forget(v)),
                _ => delta(&replicas[*r].stream, o, v).map(Delta::Stream),
            };
            if let Some(d) = d {
                replicas[*r].apply(&d);
                deltas.push(d);
            }
        }
        // Every replica gets every delta: in order, reversed, shuffled with
        // repeats.
        let mut forward = Replica::default();
        for d in &deltas {
            forward.apply(d);
        }
        let mut backward = Replica::default();
        for d in deltas.iter().rev() {
            backward.apply(d);
        }
        let mut shuffled = replicas[0].clone();
        for k in &order {
            if !deltas.is_empty() {
                shuffled.apply(&deltas[k % deltas.len()]);
            }
        }
        for d in &deltas {
            shuffled.apply(d);
        }
        prop_assert_eq!(&forward, &backward);
        prop_assert_eq!(&forward, &shuffled);
        let floor = forward.floor;
        let forward = forward.stream;
        let replicas: Vec<Stream> = replicas
            .into_iter()
            .map(|mut r| {
                r.stream.drop_through(floor);
                r.stream
            })
            .collect();
        for r in &replicas {
            prop_assert_eq!(&merged(r.clone(), &forward), &forward);
        }
        // The laws over the replicas' states.
        let [a, b, c] = [&replicas[0], &replicas[1], &replicas[2]];
        prop_assert_eq!(merged(a.clone(), b), merged(b.clone(), a));
        prop_assert_eq!(
            merged(merged(a.clone(), b), c),
            merged(a.clone(), &merged(b.clone(), c))
        );
        prop_assert_eq!(merged(a.clone(), a), a.clone());
        // Shown entries: in ID order, none deleted or below the floor.
        let shown: Vec<StreamId> = forward.entries().map(|(id, _)| id).collect();
        prop_assert!(shown.windows(2).all(|w| w[0] < w[1]));
        let last_del = ops.iter().rposition(|(_, o)| matches!(o, Op::DelKey));
        for (_, o) in &ops[last_del.map_or(0, |i| i + 1)..] {
            match o {
                Op::Del(i) => prop_assert!(!shown.contains(&id(*i))),
                Op::Trim(i) => prop_assert!(shown.iter().all(|x| *x >= id(*i))),
                _ => {}
            }
        }
        prop_assert!(shown.iter().all(|x| *x <= forward.last_id()));
        // Each state survives its bytes whole: the digest kept current by
        // every change equals the one decoding computes afresh.
        for s in replicas.iter().chain([&forward]) {
            let key = KeyState::of(Collection::Stream(Box::new(s.clone())));
            let back = KeyState::from_bytes(key.to_bytes().into());
            prop_assert_eq!(back.as_ref(), Some(&key));
            prop_assert_eq!(back.map(|b| b.digest()), Some(key.digest()));
        }
    }
}

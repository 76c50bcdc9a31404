//! Lists across replicas: pushes at both ends and in the middle, pops,
//! and whole-state exchanges in random orders converge to one order of
//! every value pushed and not popped.

use std::collections::BTreeSet;

use bytes::Bytes;
use elsa_lattice::{Crdt, List, Version};
use proptest::prelude::*;

fn b(x: impl ToString) -> Bytes {
    Bytes::from(x.to_string())
}

/// One list operation at a replica: a push of a value no one else
/// pushes, a pop, or a whole-state sync.
#[derive(Clone, Debug)]
enum ListStep {
    Push { at: usize, front: bool, index: u8 },
    Pop { at: usize, front: bool },
    Sync(usize, usize),
}

fn list_step() -> impl Strategy<Value = ListStep> {
    prop_oneof![
        4 => (0usize..3, any::<bool>(), any::<u8>())
            .prop_map(|(at, front, index)| ListStep::Push { at, front, index }),
        2 => (0usize..3, any::<bool>()).prop_map(|(at, front)| ListStep::Pop { at, front }),
        2 => (0usize..3, 0usize..3).prop_map(|(a, b)| ListStep::Sync(a, b)),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(500))]

    /// Three replicas (origins) push unique values at both ends and in
    /// the middle and pop, exchanging states at random: once every state
    /// is merged everywhere (in a different order at each replica), all
    /// show one order, holding exactly the values pushed and not popped.
    #[test]
    fn lists_converge_to_one_order_of_every_push_not_popped(
        steps in proptest::collection::vec(list_step(), 0..60),
    ) {
        let mut replicas = vec![List::default(); 3];
        let mut pushed = BTreeSet::new();
        let mut popped = BTreeSet::new();
        for (n, s) in steps.iter().enumerate() {
            let dot = Version::new(n as u64 + 1, 0);
            match *s {
                ListStep::Push { at, front, index } => {
                    let l = &replicas[at];
                    let i = if front { usize::from(index) % (l.len() + 1) } else { l.len() };
                    let v = b(n);
                    let d = l.insert(i, [&v[..]], Version { origin: at as u32 + 1, ..dot });
                    replicas[at].merge(d);
                    pushed.insert(v);
                }
                ListStep::Pop { at, front } => {
                    let l = &replicas[at];
                    if l.is_empty() {
                        continue;
                    }
                    let i = if front { 0 } else { l.len() - 1 };
                    popped.insert(l.get(i).unwrap().to_bytes());
                    let d = l.remove([i], Version { origin: at as u32 + 1, ..dot });
                    replicas[at].merge(d);
                }
                ListStep::Sync(a, b) => {
                    let from = replicas[a].clone();
                    replicas[b].merge(from);
                }
            }
        }
        let finals: Vec<List> = (0..3)
            .map(|r| {
                let mut m = replicas[r].clone();
                for k in [(r + 1) % 3, (r + 2) % 3] {
                    m.merge(replicas[k].clone());
                }
                m
            })
            .collect();
        prop_assert_eq!(&finals[0], &finals[1]);
        prop_assert_eq!(&finals[1], &finals[2]);
        let shown: Vec<Bytes> = finals[0].iter().map(|e| e.to_bytes()).collect();
        let want: BTreeSet<Bytes> = pushed.difference(&popped).cloned().collect();
        prop_assert_eq!(shown.len(), want.len());
        prop_assert_eq!(shown.into_iter().collect::<BTreeSet<_>>(), want);
    }
}

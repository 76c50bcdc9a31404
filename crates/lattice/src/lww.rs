//! The last-commit-wins register of the paper (§2.3, algorithm 4).

use crate::{Crdt, NodeId, Ts};

/// Which commit wrote a state: ordered by `commit_ts`, then `origin`.
///
/// Two different nodes never share an origin, and one node never hands out the
/// same `commit_ts` twice, so distinct commits have distinct versions.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Version {
    /// When the writing transaction committed (HLC).
    pub commit_ts: Ts,
    /// The node that committed it; breaks `commit_ts` ties.
    pub origin: NodeId,
}

impl Version {
    /// The version of a key nobody has written: below every real version.
    pub const ZERO: Version = Version {
        commit_ts: 0,
        origin: 0,
    };

    /// A version committed at `commit_ts` by `origin`.
    pub fn new(commit_ts: Ts, origin: NodeId) -> Version {
        Version { commit_ts, origin }
    }

    /// The greatest version below this one (itself for [`Version::ZERO`]):
    /// a floor that forgets everything older and keeps this write.
    pub fn pred(self) -> Version {
        match (self.origin.checked_sub(1), self.commit_ts.checked_sub(1)) {
            (Some(origin), _) => Version::new(self.commit_ts, origin),
            (None, Some(ts)) => Version::new(ts, NodeId::MAX),
            (None, None) => self,
        }
    }
}

/// The paper's snapshot-isolation lattice: a value or a tombstone, with the
/// writing transaction's start and commit timestamps.
///
/// Merge keeps the state with the larger `(version, start_ts, value)`. In
/// practice `version` alone decides — two commits never share one — but the
/// remaining fields make the order total, so merge stays commutative even for
/// inputs a buggy or hostile peer could forge.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct Lww<V> {
    /// The value, or `None` for a tombstone (DELETE).
    pub value: Option<V>,
    /// When the writing transaction started.
    pub start_ts: Ts,
    /// Who committed it, and when.
    pub version: Version,
}

impl<V: Ord> Lww<V> {
    /// A state written by a transaction that started at `start_ts` and
    /// committed as `version`.
    pub fn new(value: Option<V>, start_ts: Ts, version: Version) -> Self {
        Lww {
            value,
            start_ts,
            version,
        }
    }

    /// True when `self` wins over `other` under the merge order; a state
    /// never wins over itself.
    pub fn wins_over(&self, other: &Self) -> bool {
        (self.version, self.start_ts, &self.value) > (other.version, other.start_ts, &other.value)
    }

    /// The paper's `preCommit` check (algorithm 3): a transaction that started
    /// at `start_ts` may overwrite this state only if it committed before.
    pub fn committed_before(&self, start_ts: Ts) -> bool {
        self.version.commit_ts < start_ts
    }
}

impl<V: Ord> Crdt for Lww<V> {
    fn merge(&mut self, other: Self) -> bool {
        if other.wins_over(self) {
            *self = other;
            true
        } else {
            false
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    // Small domains on purpose: they make ties (equal commit_ts, equal origin,
    // equal everything) common, which is where LWW lattices usually break.
    fn lww() -> impl Strategy<Value = Lww<Vec<u8>>> {
        (
            proptest::option::of(proptest::collection::vec(0u8..3, 0..3)),
            0u64..4,
            0u64..4,
            0u32..3,
        )
            .prop_map(|(value, start_ts, commit_ts, origin)| {
                Lww::new(value, start_ts, Version::new(commit_ts, origin))
            })
    }

    fn merged(mut a: Lww<Vec<u8>>, b: Lww<Vec<u8>>) -> Lww<Vec<u8>> {
        a.merge(b);
        a
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2000))]

        #[test]
        fn merge_is_commutative(a in lww(), b in lww()) {
            prop_assert_eq!(merged(a.clone(), b.clone()), merged(b, a));
        }

        #[test]
        fn merge_is_associative(a in lww(), b in lww(), c in lww()) {
            let left = merged(merged(a.clone(), b.clone()), c.clone());
            let right = merged(a, merged(b, c));
            prop_assert_eq!(left, right);
        }

        #[test]
        fn merge_is_idempotent(a in lww()) {
            prop_assert_eq!(merged(a.clone(), a.clone()), a);
        }

        #[test]
        fn merge_reports_change_exactly_when_state_changes(a in lww(), b in lww()) {
            let mut m = a.clone();
            let changed = m.merge(b);
            prop_assert_eq!(changed, m != a);
        }

        #[test]
        fn later_commit_wins(a in lww(), b in lww()) {
            prop_assume!(a.version != b.version);
            let winner = if a.version > b.version { a.clone() } else { b.clone() };
            prop_assert_eq!(merged(a, b), winner);
        }
    }

    #[test]
    fn origin_breaks_commit_ts_ties() {
        let a = Lww::new(Some(b"a".to_vec()), 1, Version::new(5, 1));
        let b = Lww::new(Some(b"b".to_vec()), 1, Version::new(5, 2));
        assert_eq!(merged(a.clone(), b.clone()).value, Some(b"b".to_vec()));
        assert_eq!(merged(b, a).value, Some(b"b".to_vec()));
    }

    #[test]
    fn tombstone_is_a_state_like_any_other() {
        let live = Lww::new(Some(b"v".to_vec()), 1, Version::new(2, 1));
        let dead = Lww::<Vec<u8>>::new(None, 3, Version::new(4, 1));
        assert_eq!(merged(live.clone(), dead.clone()), dead);
        assert!(dead.committed_before(5));
        assert!(!dead.committed_before(4));
    }
}

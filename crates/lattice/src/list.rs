//! The sequence CRDT: what a Redis list key holds.
//!
//! Every element has a *position*, fixed when it is inserted and never
//! changed: a path of [`Step`]s compared lexicographically (a path before
//! its extensions), each step a digit and the id of the write that made
//! it (commit version and the element's number within that write). The
//! list is its live elements in position order. A push at either end
//! takes a digit one beyond the end's; an insertion between two
//! neighbours takes a digit between theirs, or extends the left one's
//! path when their digits are adjacent (Logoot's dense identifiers, with
//! the writer's id in every step so that two replicas inserting at one
//! place concurrently make two distinct positions, ordered by id).
//!
//! Hand-written because it is the heart of a list's merge and it must fit
//! Elsa's delta model (one push ships one element): the sequence crates
//! (yrs, diamond-types, automerge) keep an operation log and a document
//! clock of their own and replicate by it.
//!
//! Merge:
//! - an element's value is a last-writer-wins register (`LSET` writes it
//!   anew, by version);
//! - a remove (`LPOP`, `LREM`, `LTRIM`…) is final: the element becomes a
//!   tombstone — its position and the remove's version — and a
//!   concurrent `LSET` of it, or its insert arriving late, does not bring
//!   it back. Two replicas popping the same element concurrently both
//!   answer it: a pop is not a queue lock across regions
//!   (`docs/datatypes.md`);
//! - concurrent pushes all stay, in one order every replica agrees on.
//!
//! Tombstones are forgotten by [`List::collect`] once every replica has
//! them, as removed set members are. Live elements sit in an
//! order-statistic B-tree (`indexset::BTreeMap`: the element at an index,
//! and an element's index, in O(log n)); tombstones in a hash map beside
//! it, so indices count live elements only.

use std::hash::{Hash, Hasher};

use smallvec::SmallVec;

use crate::orset::{entry_digest, Map};
use crate::{Crdt, Elem, Version};

/// One step of a [`Pos`]: a digit, then the id of the write that made it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Step {
    /// Orders the step among its siblings.
    pub digit: i64,
    /// The writing commit's timestamp.
    pub ts: u64,
    /// The writing commit's node.
    pub origin: u32,
    /// Which of the write's elements (a push of many numbers them).
    pub seq: u32,
}

/// An element's position: unique (its last step carries its write's id
/// and number) and fixed. Compared step by step; a path sorts before
/// its extensions.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Pos(pub(crate) SmallVec<[Step; 1]>);

impl Pos {
    /// The steps.
    pub fn steps(&self) -> &[Step] {
        &self.0
    }

    /// A position of these steps (decoding); `None` for an empty path.
    pub fn from_steps(steps: &[Step]) -> Option<Pos> {
        (!steps.is_empty()).then(|| Pos(SmallVec::from_slice(steps)))
    }

    /// The write that inserted the element.
    pub fn inserted(&self) -> Version {
        let last = self.0.last().expect("a position has a step");
        Version::new(last.ts, last.origin)
    }
}

/// A live element: its value and the write that gave it.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Slot {
    /// The element's bytes.
    pub value: Elem,
    /// Its insert, or the last `LSET`.
    pub set: Version,
}

/// A live element always shows (tombstones are kept apart, in `dead`).
impl crate::orset::Shows for Slot {
    fn shows(&self) -> bool {
        true
    }
}

/// Hands out the ids of one write's elements.
pub(crate) struct Minter {
    pub(crate) dot: Version,
    pub(crate) seq: u32,
}

impl Minter {
    fn step(&mut self, digit: i64) -> Step {
        let s = Step {
            digit,
            ts: self.dot.commit_ts,
            origin: self.dot.origin,
            seq: self.seq,
        };
        self.seq = self.seq.wrapping_add(1);
        s
    }

    /// A path after `lo` (a suffix of a position; empty: nothing).
    fn after(&mut self, lo: &[Step]) -> SmallVec<[Step; 1]> {
        match lo.first() {
            None => SmallVec::from_buf([self.step(0)]),
            Some(s) if s.digit < i64::MAX => SmallVec::from_buf([self.step(s.digit + 1)]),
            Some(s) => {
                let mut p = SmallVec::from_buf([*s]);
                p.extend(self.after(&lo[1..]));
                p
            }
        }
    }

    /// A position strictly between `lo` and `hi` (`None`: the list's
    /// ends). `lo < hi` when both are given.
    pub(crate) fn between(&mut self, lo: Option<&Pos>, hi: Option<&Pos>) -> Pos {
        let lo = lo.map_or(&[][..], |p| &p.0[..]);
        let Some(hi) = hi else {
            return Pos(self.after(lo));
        };
        let hi = &hi.0[..];
        // The common prefix, kept.
        let i = lo.iter().zip(hi).take_while(|(a, b)| a == b).count();
        let mut p: SmallVec<[Step; 1]> = SmallVec::from_slice(&lo[..i]);
        match (lo.get(i), hi.get(i)) {
            // `lo` is a prefix of `hi`: go below `hi`'s next step.
            (None, Some(h)) => p.push(self.step(h.digit.saturating_sub(1))),
            // Room between the two digits.
            (Some(l), Some(h)) if i128::from(h.digit) - i128::from(l.digit) > 1 => {
                p.push(self.step(l.digit + 1))
            }
            // Adjacent (or equal) digits: extend `lo`, whose step here is
            // below `hi`'s, so anything after it stays below `hi`.
            (Some(l), _) => {
                p.push(*l);
                p.extend(self.after(&lo[i + 1..]));
            }
            // `hi` a prefix of (or equal to) `lo`: not `lo < hi`.
            (None, None) => p.push(self.step(0)),
        }
        Pos(p)
    }
}

/// A list (see the module doc).
#[derive(Clone, Debug, Default)]
pub struct List {
    /// The live elements, in position order.
    pub(crate) live: crate::seq::Seq,
    /// Tombstones: each removed element's position and when it was
    /// removed.
    pub(crate) dead: Map<Pos, Version>,
    /// The newest write this state holds.
    pub(crate) newest: Version,
    /// XOR of every live entry's digest (see `OrSet::digest`).
    pub(crate) digest: u64,
}

/// Two lists are equal when they hold the same elements at the same
/// positions (however their runs happen to be cut), the same tombstones
/// and the same newest write.
impl PartialEq for List {
    fn eq(&self, other: &Self) -> bool {
        self.newest == other.newest
            && self.live.len() == other.live.len()
            && self.dead == other.dead
            && self.live.entries().eq(other.live.entries())
    }
}

impl Eq for List {}

impl List {
    /// Live elements.
    pub fn len(&self) -> usize {
        self.live.len()
    }

    /// True when no element is live.
    pub fn is_empty(&self) -> bool {
        self.live.len() == 0
    }

    /// Entries kept, tombstones included.
    pub fn entries(&self) -> usize {
        self.live.len() + self.dead.len()
    }

    /// Tombstones kept.
    pub fn tombstones(&self) -> usize {
        self.dead.len()
    }

    /// The newest write this state holds.
    pub fn newest(&self) -> Version {
        self.newest
    }

    /// The element at `index` (from the head, 0-based).
    pub fn get(&self, index: usize) -> Option<&Elem> {
        self.live.get(index)
    }

    /// The position of the element at `index`.
    pub fn pos_at(&self, index: usize) -> Option<Pos> {
        self.live.pos_at(index)
    }

    /// The elements from `from` to `to` (exclusive), head first.
    pub fn range(&self, from: usize, to: usize) -> impl Iterator<Item = &Elem> + '_ {
        self.live.range(from, to)
    }

    /// Every element, head first.
    pub fn iter(&self) -> impl DoubleEndedIterator<Item = &Elem> + '_ {
        self.live.iter()
    }

    /// Every element with its position, head first.
    pub fn entries_iter(&self) -> impl Iterator<Item = (Pos, Slot)> + '_ {
        self.live.entries()
    }

    /// The tombstones, in no order.
    pub fn tombstones_iter(&self) -> impl Iterator<Item = (&Pos, Version)> + '_ {
        self.dead.iter().map(|(p, v)| (p, *v))
    }

    /// Heap bytes it owns (MEMORY USAGE, INFO).
    pub fn heap_bytes(&self) -> usize {
        self.live.heap_bytes() + self.dead.capacity() * (8 + std::mem::size_of::<(Pos, Version)>())
    }

    pub(crate) fn delta(dot: Version) -> List {
        List {
            newest: dot,
            ..List::default()
        }
    }

    /// The delta of inserting `values`, in that order, before the element
    /// now at `index` (at the tail when `index` is the length), as write
    /// `dot`. `LPUSH a b c` is `insert(0, [c, b, a])`.
    ///
    /// One value takes a position between its neighbours'; several take
    /// one such position `P` and stand at `P` extended by 0, 1, 2…, so a
    /// batch is one run, and two batches written at one place
    /// concurrently do not interleave.
    pub fn insert<'a>(
        &self,
        index: usize,
        values: impl IntoIterator<Item = &'a [u8]>,
        dot: Version,
    ) -> List {
        let index = index.min(self.len());
        let lo = index.checked_sub(1).and_then(|i| self.pos_at(i));
        let hi = self.pos_at(index);
        let values: Vec<&[u8]> = values.into_iter().collect();
        let mut minter = Minter { dot, seq: 0 };
        let mut delta = List::delta(dot);
        let at = minter.between(lo.as_ref(), hi.as_ref());
        if values.len() == 1 {
            delta.put_live(
                at,
                Slot {
                    value: Elem::new(values[0]),
                    set: dot,
                },
            );
            return delta;
        }
        for (i, v) in values.into_iter().enumerate() {
            let mut p = at.clone();
            p.0.push(minter.step(i as i64));
            delta.put_live(
                p,
                Slot {
                    value: Elem::new(v),
                    set: dot,
                },
            );
        }
        delta
    }

    /// The delta of removing the elements at `indices` as write `dot`
    /// (indices past the end are ignored).
    pub fn remove(&self, indices: impl IntoIterator<Item = usize>, dot: Version) -> List {
        let mut delta = List::delta(dot);
        for i in indices {
            if let Some(p) = self.pos_at(i) {
                delta.put_dead(p, dot);
            }
        }
        delta
    }

    /// The delta of giving the element at `index` the value `value` as
    /// write `dot` (`LSET`); `None` past the end.
    pub fn set(&self, index: usize, value: &[u8], dot: Version) -> Option<List> {
        let p = self.pos_at(index)?;
        let mut delta = List::delta(dot);
        delta.put_live(
            p,
            Slot {
                value: Elem::new(value),
                set: dot,
            },
        );
        Some(delta)
    }

    /// The delta of removing every element as write `dot` (`DEL`).
    pub fn clear(&self, dot: Version) -> List {
        let mut delta = List::delta(dot);
        for (p, _) in self.live.entries() {
            delta.put_dead(p, dot);
        }
        delta
    }

    pub(crate) fn put_live(&mut self, p: Pos, s: Slot) {
        let d = entry_digest(&p, &s);
        let (old, changed) = self.live.put(&p, s);
        if changed {
            if let Some(old) = old {
                self.digest ^= entry_digest(&p, &old);
            }
            self.digest ^= d;
        }
    }

    pub(crate) fn put_dead(&mut self, p: Pos, v: Version) {
        self.dead.insert(p, v);
    }

    /// Drops everything inserted at or below `floor` (a write of another
    /// type replaced the key then); true if anything changed.
    pub fn drop_through(&mut self, floor: Version) -> bool {
        let before = self.dead.len();
        let mut changed = self.live.retain_inserted(|v| v > floor);
        self.dead.retain(|p, _| p.inserted() > floor);
        changed |= self.dead.len() != before;
        if changed {
            self.redigest();
        }
        changed
    }

    /// A digest of the whole state, kept current (see `OrSet::digest`).
    pub fn digest(&self) -> u64 {
        self.digest ^ crate::codec::version_digest(self.newest)
    }

    /// True when it holds no element, not even a tombstone.
    pub fn has_no_entries(&self) -> bool {
        self.is_empty() && self.dead.is_empty()
    }

    /// Forgets tombstones older than `horizon` (every replica has them);
    /// answers how many went.
    pub fn collect(&mut self, horizon: Version) -> usize {
        let before = self.dead.len();
        self.dead.retain(|_, v| *v >= horizon);
        let gone = before - self.dead.len();
        if gone > 0 {
            self.redigest();
        }
        gone
    }

    /// The live elements' digests: tombstones add nothing (see
    /// `orset::entry_digest`).
    fn redigest(&mut self) {
        self.digest = self
            .live
            .entries()
            .fold(0, |d, (p, s)| d ^ entry_digest(&p, &s));
    }

    /// Rebuilds a state from decoded parts; `None` when a position is
    /// twice, or both live and dead (not a state Elsa writes).
    pub(crate) fn from_parts(
        live: Vec<(Pos, Slot)>,
        dead: Vec<(Pos, Version)>,
        newest: Version,
    ) -> Option<List> {
        let mut l = List::delta(newest);
        for (p, s) in live {
            if l.live.put(&p, s).0.is_some() {
                return None;
            }
        }
        for (p, v) in dead {
            if l.live.get_pos(&p).is_some() || l.dead.insert(p, v).is_some() {
                return None;
            }
        }
        l.redigest();
        Some(l)
    }
}

impl Hash for List {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.digest().hash(state);
    }
}

impl Crdt for List {
    /// Costs what `other` holds: a delta of one element merges into a
    /// million-element list in O(log n).
    fn merge(&mut self, other: List) -> bool {
        let mut changed = false;
        if other.newest > self.newest {
            self.newest = other.newest;
            changed = true;
        }
        for (p, v) in other.dead {
            if let Some(s) = self.live.remove(&p) {
                self.digest ^= entry_digest(&p, &s);
                changed = true;
            }
            match self.dead.get_mut(&p) {
                Some(mine) if *mine >= v => {}
                Some(mine) => {
                    *mine = v;
                    changed = true;
                }
                None => {
                    self.dead.insert(p, v);
                    changed = true;
                }
            }
        }
        for (p, s) in other.live.entries() {
            if self.dead.contains_key(&p) {
                continue;
            }
            let d = entry_digest(&p, &s);
            let (old, c) = self.live.put(&p, s);
            if c {
                if let Some(old) = old {
                    self.digest ^= entry_digest(&p, &old);
                }
                self.digest ^= d;
                changed = true;
            }
        }
        changed
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(ts: u64, origin: u32) -> Version {
        Version::new(ts, origin)
    }

    fn shown(l: &List) -> Vec<String> {
        l.iter()
            .map(|e| String::from_utf8_lossy(e).into_owned())
            .collect()
    }

    #[test]
    fn a_collected_tombstone_leaves_the_digest_as_it_was() {
        // Two replicas of the same list, one of which has collected the
        // tombstone of a removed element: they show the same, and compare
        // equal (they never did: the concurrent CRDT checker's replicas
        // stayed apart for good).
        let mut a = List::default();
        let d = a.insert(0, [&b"x"[..], b"y"], v(1, 1));
        a.merge(d);
        let d = a.remove([0], v(2, 1));
        a.merge(d);
        let mut b = a.clone();
        assert_eq!(b.collect(v(10, 0)), 1);
        assert_eq!(shown(&a), shown(&b));
        assert_eq!(a.digest(), b.digest());
        // An element live on one and removed on the other still differs.
        let mut c = List::default();
        let d = c.insert(0, [&b"x"[..], b"y"], v(1, 1));
        c.merge(d);
        assert_ne!(a.digest(), c.digest());
    }

    #[test]
    fn pushes_at_both_ends_and_inserts_between_keep_redis_order() {
        let mut l = List::default();
        let d = l.insert(0, [&b"c"[..], b"b", b"a"], v(1, 1));
        l.merge(d);
        let d = l.insert(l.len(), [&b"x"[..], b"y"], v(2, 1));
        l.merge(d);
        assert_eq!(shown(&l), ["c", "b", "a", "x", "y"]);
        // Insert repeatedly at the same place: no position grows.
        for i in 0..50u64 {
            let d = l.insert(1, [&b"m"[..]], v(3 + i, 1));
            l.merge(d);
        }
        let d = l.insert(52, [&b"n"[..]], v(100, 1));
        l.merge(d);
        assert_eq!(l.len(), 56);
        assert_eq!(shown(&l)[..2], ["c", "m"]);
        assert_eq!(shown(&l)[51..], ["b", "n", "a", "x", "y"]);
        assert!(l.live.entries().all(|(p, _)| p.0.len() <= 3));
        let positions: Vec<Pos> = l.live.entries().map(|(p, _)| p).collect();
        assert!(positions.windows(2).all(|w| w[0] < w[1]));
    }

    #[test]
    fn concurrent_pushes_all_stay_in_one_order_and_removes_are_final() {
        let mut base = List::default();
        let d = base.insert(0, [&b"a"[..]], v(1, 1));
        base.merge(d);
        let (mut r1, mut r2) = (base.clone(), base.clone());
        let d1 = r1.insert(1, [&b"x"[..]], v(2, 1));
        let d2 = r2.insert(1, [&b"y"[..]], v(2, 2));
        let pop = r2.remove([0], v(3, 2));
        let lset = r1.set(0, b"A", v(4, 1)).unwrap();
        let d = d1.clone();
        r1.merge(d);
        let d = lset.clone();
        r1.merge(d);
        let d = d2.clone();
        r2.merge(d);
        let d = pop.clone();
        r2.merge(d);
        let (a, b) = (r1.clone(), r2.clone());
        let d = b;
        r1.merge(d);
        let d = a;
        r2.merge(d);
        assert_eq!(r1, r2);
        assert_eq!(r1.digest(), r2.digest());
        assert_eq!(shown(&r1), ["x", "y"]);
    }

    #[test]
    fn a_rewrite_installs_exactly_the_target() {
        let mut l = List::default();
        let d = l.insert(0, [&b"a"[..], b"b", b"c", b"d"], v(1, 1));
        l.merge(d);
        // The target: an overlay's result, with placeholder versions.
        let mut t = l.clone();
        let d = t.remove([1], v(1 << 63, 0));
        t.merge(d);
        let d = t.insert(0, [&b"h"[..]], v((1 << 63) + 1, 0));
        t.merge(d);
        let d = t.insert(2, [&b"m1"[..], b"m2"], v((1 << 63) + 2, 0));
        t.merge(d);
        let d = t.remove([5], v((1 << 63) + 3, 0));
        t.merge(d);
        let d = t.insert(5, [&b"z"[..]], v((1 << 63) + 4, 0));
        t.merge(d);
        let d = t.set(4, b"C", v((1 << 63) + 5, 0)).unwrap();
        t.merge(d);
        assert_eq!(shown(&t), ["h", "a", "m1", "m2", "C", "z"]);
        let d = l.rewrite(&t, v(7, 3));
        assert!(d
            .live
            .entries()
            .all(|(p, s)| { p.0.iter().all(|st| st.ts < 1 << 63) && s.set < v(1 << 63, 0) }));
        l.merge(d);
        assert_eq!(shown(&l), ["h", "a", "m1", "m2", "C", "z"]);
    }
}

/// The run storage against a plain ordered map of positions: any mix of
/// batch inserts anywhere, removes, `LSET`s, and deltas merged in another
/// order, keeps the same elements in the same order, the same digest as
/// one computed from scratch, and index and range lookups that agree.
#[cfg(test)]
mod model {
    use std::collections::BTreeMap;

    use proptest::prelude::*;

    use super::*;

    #[derive(Clone, Debug)]
    enum Edit {
        /// One element at the head or the tail: how queues grow.
        Push {
            front: bool,
        },
        Insert {
            at: u16,
            n: u8,
        },
        Remove {
            at: u16,
            n: u8,
        },
        Set {
            at: u16,
        },
    }

    fn edit() -> impl Strategy<Value = Edit> {
        prop_oneof![
            4 => any::<bool>().prop_map(|front| Edit::Push { front }),
            4 => (any::<u16>(), 1u8..40).prop_map(|(at, n)| Edit::Insert { at, n }),
            2 => (any::<u16>(), 1u8..6).prop_map(|(at, n)| Edit::Remove { at, n }),
            1 => any::<u16>().prop_map(|at| Edit::Set { at }),
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(300))]

        #[test]
        fn runs_hold_what_a_map_of_positions_holds(
            edits in proptest::collection::vec(edit(), 1..160),
            shuffle in any::<u64>(),
        ) {
            let mut l = List::default();
            let mut model: BTreeMap<Pos, Slot> = BTreeMap::new();
            let mut deltas = Vec::new();
            for (n, e) in edits.iter().enumerate() {
                // Runs of edits from one origin: single pushes of one
                // node coalesce into stamped runs.
                let dot = Version::new(n as u64 + 1, 1 + (n / 5 % 3) as u32);
                let len = l.len();
                let d = match *e {
                    Edit::Push { front } => {
                        let v = format!("p{n}");
                        l.insert(if front { 0 } else { len }, [v.as_bytes()], dot)
                    }
                    Edit::Insert { at, n: k } => {
                        let values: Vec<Vec<u8>> =
                            (0..k).map(|i| format!("{n}.{i}").into_bytes()).collect();
                        l.insert(usize::from(at) % (len + 1), values.iter().map(|v| &v[..]), dot)
                    }
                    Edit::Remove { at, n: k } if len > 0 => {
                        let from = usize::from(at) % len;
                        l.remove(from..(from + usize::from(k)).min(len), dot)
                    }
                    Edit::Set { at } if len > 0 => {
                        l.set(usize::from(at) % len, format!("set{n}").as_bytes(), dot).unwrap()
                    }
                    _ => continue,
                };
                for (p, s) in d.live.entries() {
                    model.insert(p, s);
                }
                for (p, _) in d.tombstones_iter() {
                    model.remove(p);
                }
                l.merge(d.clone());
                deltas.push(d);
                prop_assert_eq!(l.len(), model.len());
            }
            let want: Vec<(Pos, Slot)> = model.into_iter().collect();
            let got: Vec<(Pos, Slot)> = l.entries_iter().collect();
            prop_assert_eq!(&got, &want);
            for (i, (p, s)) in want.iter().enumerate() {
                prop_assert_eq!(l.get(i), Some(&s.value));
                prop_assert_eq!(l.pos_at(i), Some(p.clone()));
            }
            let mid = want.len() / 3;
            let ranged: Vec<&Elem> = l.range(mid, mid + 17).collect();
            let expect: Vec<&Elem> = want.iter().skip(mid).take(17).map(|(_, s)| &s.value).collect();
            prop_assert_eq!(ranged, expect);
            let back: Vec<&Elem> = l.iter().rev().collect();
            prop_assert!(back.into_iter().eq(want.iter().rev().map(|(_, s)| &s.value)));
            let mut fresh = l.clone();
            fresh.redigest();
            prop_assert_eq!(fresh.digest, l.digest);
            // The same deltas in another order, each twice.
            let mut x = shuffle | 1;
            let mut order: Vec<List> = deltas.iter().chain(&deltas).cloned().collect();
            for i in (1..order.len()).rev() {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                order.swap(i, (x % (i as u64 + 1)) as usize);
            }
            let other = order.into_iter().fold(List::default(), |mut a, d| {
                a.merge(d);
                a
            });
            prop_assert_eq!(&other, &l);
            prop_assert_eq!(other.digest(), l.digest());
        }
    }
}

#[cfg(test)]
mod queue {
    use super::*;

    /// Single pushes of one node at either end share a run (stamped), so
    /// a queue costs about its values; pops at either end trim it; the
    /// positions and versions read back are the pushes'.
    #[test]
    fn single_pushes_of_one_node_share_a_run() {
        let mut l = List::default();
        let mut want = std::collections::VecDeque::new();
        for i in 0..200u64 {
            let front = i % 3 == 0;
            let v = format!("v{i}");
            let d = l.insert(
                if front { 0 } else { l.len() },
                [v.as_bytes()],
                Version::new(10 + i, 7),
            );
            l.merge(d);
            if front {
                want.push_front(v);
            } else {
                want.push_back(v);
            }
        }
        let runs: usize = l.live.chunks.iter().map(|c| c.runs.len()).sum();
        assert!(runs <= 3, "{runs} runs for 200 single pushes of one node");
        let got: Vec<String> = l
            .iter()
            .map(|e| String::from_utf8_lossy(e).into_owned())
            .collect();
        assert_eq!(got, Vec::from(want.clone()));
        // Each element keeps its own insert's version.
        let versions: std::collections::BTreeSet<Version> = l
            .entries_iter()
            .map(|(p, s)| {
                assert_eq!(p.inserted(), s.set);
                s.set
            })
            .collect();
        assert_eq!(versions.len(), 200);
        // Pops at both ends, merged into a copy made before: the same.
        let before = l.clone();
        for i in 0..50u64 {
            let at = if i % 2 == 0 { 0 } else { l.len() - 1 };
            let d = l.remove([at], Version::new(1000 + i, 7));
            l.merge(d);
            if i % 2 == 0 {
                want.pop_front();
            } else {
                want.pop_back();
            }
        }
        let got: Vec<String> = l
            .iter()
            .map(|e| String::from_utf8_lossy(e).into_owned())
            .collect();
        assert_eq!(got, Vec::from(want));
        let mut other = before;
        other.merge(l.clone());
        assert_eq!(other, l);
        assert_eq!(other.digest(), l.digest());
    }
}

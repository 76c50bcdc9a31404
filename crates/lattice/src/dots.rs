//! Per-origin timestamps, and the add-wins presence of one element built
//! on them: the metadata every collection type (hash field, set member,
//! later sorted-set member and list element) carries.
//!
//! A *dot* is the [`Version`] of the write that added an element: unique
//! (one node never hands out a commit timestamp twice) and, per origin,
//! increasing. An element needs only the newest dot of each origin that
//! added it — an origin's later add supersedes its earlier ones — so its
//! adds and its removes are each a small version vector ([`Dots`]): almost
//! always one entry, kept inline.

use smallvec::SmallVec;

use crate::{Crdt, NodeId, Ts, Version};

/// Per origin, the newest timestamp seen: a version vector, sorted by
/// origin. Merge is the pointwise maximum.
#[derive(Debug, Default, PartialEq, Eq, Hash)]
pub struct Dots(pub(crate) SmallVec<[(NodeId, Ts); 1]>);

/// A copy at once, as `Elem`'s (every element of a collection a
/// transaction copies has one).
impl Clone for Dots {
    fn clone(&self) -> Dots {
        Dots(SmallVec::from_slice(&self.0))
    }
}

impl Dots {
    /// The vector holding only `dot`.
    pub fn one(dot: Version) -> Dots {
        let mut d = Dots::default();
        d.raise(dot);
        d
    }

    /// The newest timestamp of `origin` (0 when none).
    pub fn get(&self, origin: NodeId) -> Ts {
        match self.0.binary_search_by_key(&origin, |&(o, _)| o) {
            Ok(i) => self.0[i].1,
            Err(_) => 0,
        }
    }

    /// Takes `dot` in; true if it raised its origin's entry.
    pub fn raise(&mut self, dot: Version) -> bool {
        match self.0.binary_search_by_key(&dot.origin, |&(o, _)| o) {
            Ok(i) if self.0[i].1 >= dot.commit_ts => false,
            Ok(i) => {
                self.0[i].1 = dot.commit_ts;
                true
            }
            Err(i) => {
                self.0.insert(i, (dot.origin, dot.commit_ts));
                true
            }
        }
    }

    /// Every entry, as versions, by origin.
    pub fn iter(&self) -> impl Iterator<Item = Version> + '_ {
        self.0.iter().map(|&(o, ts)| Version::new(ts, o))
    }

    /// True when no origin has an entry.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The newest entry, by version order.
    pub fn newest(&self) -> Version {
        self.iter().max().unwrap_or(Version::ZERO)
    }

    /// Drops the entries at or below `floor` (version order); true if any
    /// went.
    pub fn drop_through(&mut self, floor: Version) -> bool {
        let before = self.0.len();
        self.0.retain(|&mut (o, ts)| Version::new(ts, o) > floor);
        self.0.len() != before
    }

    /// Drops the entries below `horizon`; true if any went.
    pub fn drop_below(&mut self, horizon: Version) -> bool {
        let before = self.0.len();
        self.0.retain(|&mut (o, ts)| Version::new(ts, o) >= horizon);
        self.0.len() != before
    }

    /// Heap bytes owned beyond the inline entry (an element added by two
    /// origins or more).
    pub fn heap_bytes(&self) -> usize {
        if self.0.spilled() {
            self.0.capacity() * std::mem::size_of::<(NodeId, Ts)>()
        } else {
            0
        }
    }

    /// Keeps only the entries `keep` accepts; true if any went.
    fn retain(&mut self, mut keep: impl FnMut(NodeId, Ts) -> bool) -> bool {
        let before = self.0.len();
        self.0.retain(|&mut (o, ts)| keep(o, ts));
        self.0.len() != before
    }
}

impl Crdt for Dots {
    fn merge(&mut self, other: Dots) -> bool {
        let mut changed = false;
        for v in other.iter() {
            changed |= self.raise(v);
        }
        changed
    }
}

/// Whether one element is in its collection, add-wins: the newest add of
/// each origin, and per origin the newest add a remove had observed. The
/// element is present while some origin's add is newer than what any
/// remove observed of that origin — so a remove takes away exactly the
/// adds it saw, and an add concurrent with it survives.
///
/// Kept normalized: an origin's add at or below that origin's observed
/// remove is dropped (it can never count again), so two presences that
/// mean the same are equal.
///
/// `removed_at` is when the newest remove was written. The observed adds
/// say *what* a remove took away, not *when*: a remove may only be
/// forgotten once every replica has it, and that is a question of its own
/// version (`collect_removes`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Presence {
    pub(crate) adds: Dots,
    /// The removes, boxed: most elements were never removed, and a big
    /// collection pays for every byte here a million times (issue 13).
    /// `None` exactly when there is none (kept so, for equality).
    pub(crate) removed: Option<Box<Removed>>,
}

/// What the removes of one element observed, and when the newest was
/// written (see [`Presence`]).
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub(crate) struct Removed {
    pub(crate) removes: Dots,
    pub(crate) removed_at: Version,
}

/// Only the adds: what a digest compares (`orset::Shows`). The removes
/// are bookkeeping for late adds, forgotten by each replica at its own
/// time; two replicas that keep the same adds show the same element.
impl std::hash::Hash for Presence {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.adds.hash(state);
    }
}

impl Presence {
    /// The presence of an element added by `dot`.
    pub fn added(dot: Version) -> Presence {
        Presence {
            adds: Dots::one(dot),
            removed: None,
        }
    }

    /// A presence of these parts, normalised.
    pub(crate) fn of(adds: Dots, removes: Dots, removed_at: Version) -> Presence {
        let mut p = Presence {
            adds,
            removed: Some(Box::new(Removed {
                removes,
                removed_at,
            })),
        };
        p.normalize();
        p
    }

    /// True while some add is not removed.
    pub fn is_live(&self) -> bool {
        !self.adds.is_empty()
    }

    /// The adds a remove observed, per origin (empty when none).
    pub(crate) fn removes(&self) -> &Dots {
        static NONE: Dots = Dots(SmallVec::new_const());
        self.removed.as_ref().map_or(&NONE, |r| &r.removes)
    }

    /// When the newest remove was written ([`Version::ZERO`] when none).
    pub(crate) fn removed_at(&self) -> Version {
        self.removed
            .as_ref()
            .map_or(Version::ZERO, |r| r.removed_at)
    }

    /// The delta of removing the element as this replica sees it, as
    /// write `dot`: every add it has observed.
    pub fn removal(&self, dot: Version) -> Presence {
        Presence::of(Dots::default(), self.adds.clone(), dot)
    }

    /// True when `other` holds an add this presence never saw, neither
    /// as an add nor as one a remove took away: a write made after it (a
    /// transaction's overlay adding the element again, or a state written
    /// over it), which a replacement must write as an add
    /// (`KeyState::replace_with`).
    pub(crate) fn lacks_an_add_of(&self, other: &Presence) -> bool {
        let removes = self.removes();
        other
            .adds
            .iter()
            .any(|v| v.commit_ts > self.adds.get(v.origin).max(removes.get(v.origin)))
    }

    /// The newest add or remove: what the element last saw.
    pub fn newest(&self) -> Version {
        self.adds
            .newest()
            .max(self.removes().newest())
            .max(self.removed_at())
    }

    /// True when nothing is left: no add, no remove to remember.
    pub fn is_empty(&self) -> bool {
        self.adds.is_empty() && self.removed.is_none()
    }

    /// True when only removes are left (a tombstone to collect later).
    pub fn is_tombstone(&self) -> bool {
        self.adds.is_empty() && !self.is_empty()
    }

    /// Drops everything written at or below `floor` (a write of another
    /// type replaced the key then); true if anything went.
    pub fn drop_through(&mut self, floor: Version) -> bool {
        // Each part filtered on its own, as a threshold on a join: the
        // same whether applied before or after a merge.
        let mut changed = self.adds.drop_through(floor);
        if let Some(r) = self.removed.as_mut() {
            changed |= r.removes.drop_through(floor);
            if r.removed_at != Version::ZERO && r.removed_at <= floor {
                r.removed_at = Version::ZERO;
                changed = true;
            }
        }
        self.normalize();
        changed
    }

    /// Forgets the removes when the newest was written before `horizon`
    /// (every replica has it, and every add it took away, which are
    /// older; see `docs/datatypes.md` for why no older add can arrive
    /// after).
    pub fn collect_removes(&mut self, horizon: Version) -> bool {
        let at = self.removed_at();
        if at == Version::ZERO || at >= horizon {
            return false;
        }
        self.removed = None;
        true
    }

    /// Drops adds a remove covers, and an empty remove part.
    fn normalize(&mut self) {
        if let Some(r) = &self.removed {
            let removes = &r.removes;
            self.adds.retain(|o, ts| ts > removes.get(o));
            if r.removes.is_empty() && r.removed_at == Version::ZERO {
                self.removed = None;
            }
        }
    }
}

impl Crdt for Presence {
    fn merge(&mut self, other: Presence) -> bool {
        // An add may come in only to be dropped as removed: whether the
        // adds changed is decided after normalising (inline: no copy).
        let adds_before = self.adds.clone();
        self.adds.merge(other.adds);
        let mut changed = false;
        if let Some(theirs) = other.removed {
            match self.removed.as_mut() {
                None => {
                    self.removed = Some(theirs);
                    changed = true;
                }
                Some(mine) => {
                    changed |= mine.removes.merge(theirs.removes);
                    if theirs.removed_at > mine.removed_at {
                        mine.removed_at = theirs.removed_at;
                        changed = true;
                    }
                }
            }
        }
        self.normalize();
        changed || self.adds != adds_before
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn dots() -> impl Strategy<Value = Dots> {
        proptest::collection::vec((0u32..3, 1u64..6), 0..4).prop_map(|v| {
            let mut d = Dots::default();
            for (o, ts) in v {
                d.raise(Version::new(ts, o));
            }
            d
        })
    }

    fn presence() -> impl Strategy<Value = Presence> {
        (dots(), dots(), 0u64..8, 0u32..3)
            .prop_map(|(adds, removes, ts, o)| Presence::of(adds, removes, Version::new(ts, o)))
    }

    fn m<T: Crdt + Clone>(mut a: T, b: T) -> T {
        a.merge(b);
        a
    }

    proptest! {
        #[test]
        fn dots_form_a_lattice(a in dots(), b in dots(), c in dots()) {
            prop_assert_eq!(m(a.clone(), b.clone()), m(b.clone(), a.clone()));
            prop_assert_eq!(m(m(a.clone(), b.clone()), c.clone()), m(a.clone(), m(b, c)));
            prop_assert_eq!(m(a.clone(), a.clone()), a);
        }

        #[test]
        fn presence_forms_a_lattice(a in presence(), b in presence(), c in presence()) {
            prop_assert_eq!(m(a.clone(), b.clone()), m(b.clone(), a.clone()));
            prop_assert_eq!(m(m(a.clone(), b.clone()), c.clone()), m(a.clone(), m(b.clone(), c)));
            prop_assert_eq!(m(a.clone(), a.clone()), a.clone());
            let mut x = a.clone();
            let changed = x.merge(b);
            prop_assert_eq!(changed, x != a);
        }
    }

    #[test]
    fn a_remove_takes_only_the_adds_it_saw() {
        let seen = Presence::added(Version::new(1, 1));
        let removal = seen.removal(Version::new(2, 1));
        // Concurrently, origin 2 adds the element too.
        let concurrent = Presence::added(Version::new(1, 2));
        let merged = m(m(seen.clone(), removal.clone()), concurrent.clone());
        assert!(merged.is_live(), "the add the remove never saw survives");
        assert!(!m(seen.clone(), removal.clone()).is_live());
        // A later add by the origin whose add was removed counts again.
        let again = m(m(seen, removal), Presence::added(Version::new(2, 1)));
        assert!(again.is_live());
    }
}

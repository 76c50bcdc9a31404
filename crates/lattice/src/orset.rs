//! The add-wins observed-remove set: what a Redis set key holds.
//!
//! Each member carries its [`Presence`] (newest add per origin, newest add
//! a remove observed per origin). `SADD` adds a dot, to a member already
//! present too (its fresh dot is what a concurrent remove did not see);
//! `SREM` removes the adds it has seen; an add concurrent with a remove
//! survives. Removed members stay as tombstones (their observed
//! removes) until every replica has them; then [`OrSet::collect`] drops
//! them (`docs/datatypes.md`).

use std::hash::Hash;

use indexmap::IndexMap;

use crate::packed::Entries;
use crate::{Crdt, Elem, Presence, Version};

/// Map type of the collections: an `IndexMap` (entries in one dense
/// vector, a table of indices beside it) rather than a hash table of
/// entries, whose slack — up to half its slots empty — would cost a
/// whole entry per slot: a million-element collection takes about 1.1×
/// its entries' bytes instead of 2× (issue 13). foldhash, as the shard
/// tables use.
pub(crate) type Map<K, V> = IndexMap<K, V, foldhash::fast::RandomState>;

/// What a collection has held since it last emptied, for `OBJECT
/// ENCODING`. Redis leaves a packed encoding for good once the count or
/// an entry outgrows it (until the key goes), so its encoding is the
/// key's history, not only its content. A cache of this replica's own
/// writes and merges: equality, digests and the codec ignore it, and a
/// state decoded from the log or a snapshot starts from what it holds, as
/// Redis re-encodes a key it loads from an RDB file.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Peak {
    /// The most live entries at once.
    pub most: u32,
    /// A write gave it an entry Redis would not pack (marked by the
    /// command, which knows Redis's limits; see `mark_wide`).
    pub wide: bool,
}

impl Peak {
    /// After a change that left `live` entries, `other` being what the
    /// change brought (a delta's mark); an emptied collection starts over.
    pub(crate) fn after(&mut self, other: Peak, live: usize) {
        if live == 0 {
            *self = Peak::default();
        } else {
            self.wide |= other.wide;
            self.most = self.most.max(u32::try_from(live).unwrap_or(u32::MAX));
        }
    }
}

/// An add-wins set of members (see the module doc).
#[derive(Clone, Debug, Default)]
pub struct OrSet {
    /// Packed while small (see `crate::packed`).
    pub(crate) members: Entries<Presence>,
    /// How many members are live (not only tombstones).
    pub(crate) live: usize,
    /// The newest write (add or remove) this state holds.
    pub(crate) newest: Version,
    /// XOR of every entry's [`entry_digest`], kept current by every change
    /// so anti-entropy compares a million members without a scan.
    pub(crate) digest: u64,
    /// Its history, for `OBJECT ENCODING` (not state).
    pub(crate) peak: Peak,
}

impl PartialEq for OrSet {
    fn eq(&self, other: &Self) -> bool {
        self.newest == other.newest && self.members == other.members
    }
}

impl Eq for OrSet {}

impl OrSet {
    /// True when `e` has an entry, live or removed.
    pub fn has_member(&self, e: &[u8]) -> bool {
        self.members.contains_key(e)
    }

    /// True when `e` is a member.
    pub fn contains(&self, e: &[u8]) -> bool {
        self.members.get(e).is_some_and(|p| p.is_live())
    }

    /// Live members.
    pub fn len(&self) -> usize {
        self.live
    }

    /// True when no member is live.
    pub fn is_empty(&self) -> bool {
        self.live == 0
    }

    /// The live members, in no particular order.
    pub fn iter(&self) -> impl Iterator<Item = &[u8]> + '_ {
        self.members
            .iter()
            .filter(|(_, p)| p.is_live())
            .map(|(e, _)| e)
    }

    /// Entries kept, tombstones included (for memory accounting).
    pub fn entries(&self) -> usize {
        self.members.len()
    }

    /// The bytes of the members' buffer while they are packed (see
    /// `crate::packed`).
    pub fn packed_bytes(&self) -> Option<usize> {
        self.members.packed().map(|p| p.heap_bytes())
    }

    /// The newest write this state holds.
    pub fn newest(&self) -> Version {
        self.newest
    }

    /// What it has held since it last emptied (see [`Peak`]).
    pub fn peak(&self) -> Peak {
        self.peak
    }

    /// Marks a delta as bringing a member Redis would not pack.
    pub fn mark_wide(&mut self) {
        self.peak.wide = true;
    }

    /// The delta of adding `e` as write `dot` — a member already present
    /// too (Redis answers 0 for it, but it is a write): a remove made
    /// concurrently elsewhere takes away only the adds it saw, and this
    /// one it did not, so the member stays (issue 41, defect 14). One dot;
    /// merged, it replaces its origin's older add of `e`, so re-adds by
    /// one origin never grow the member.
    pub fn add(&self, e: Elem, dot: Version) -> OrSet {
        Self::single(e, Presence::added(dot), dot)
    }

    /// The delta of removing `e` as write `dot`, or `None` when it is not
    /// a member.
    pub fn remove(&self, e: &[u8], dot: Version) -> Option<OrSet> {
        let p = self.members.get(e).filter(|p| p.is_live())?;
        Some(Self::single(Elem::new(e), p.removal(dot), dot))
    }

    /// The delta of removing every live member as write `dot` (`DEL`).
    pub fn clear(&self, dot: Version) -> OrSet {
        let mut members = Map::default();
        for (e, p) in self.members.iter().filter(|(_, p)| p.is_live()) {
            members.insert(Elem::new(e), p.removal(dot));
        }
        OrSet {
            newest: dot,
            digest: digest_of(&members),
            members: Entries::from_map(members),
            ..OrSet::default()
        }
    }

    fn single(e: Elem, p: Presence, dot: Version) -> OrSet {
        let mut members = Map::default();
        let live = usize::from(p.is_live());
        let digest = entry_digest(&e, &p);
        members.insert(e, p);
        OrSet {
            members: Entries::from_map(members),
            live,
            newest: dot,
            digest,
            peak: Peak::default(),
        }
    }

    /// Drops everything written at or below `floor` (a write of another
    /// type replaced the key then); true if anything changed.
    pub fn drop_through(&mut self, floor: Version) -> bool {
        if self.members.is_empty() {
            return false;
        }
        let mut changed = false;
        self.members.full_mut().retain(|_, p| {
            changed |= p.drop_through(floor);
            !p.is_empty()
        });
        if changed {
            self.recount();
        }
        self.members.settle();
        changed
    }

    /// A digest of the whole state (equal states, equal digests), kept
    /// current as it changes: what anti-entropy compares.
    pub fn digest(&self) -> u64 {
        self.digest ^ crate::codec::version_digest(self.newest)
    }

    /// Forgets removes older than `horizon` (every replica has them), and
    /// members left with nothing; answers how many members went.
    pub fn collect(&mut self, horizon: Version) -> usize {
        let members = self.members.full_mut();
        let before = members.len();
        members.retain(|_, p| {
            p.collect_removes(horizon);
            !p.is_empty()
        });
        self.digest = digest_of(members);
        let gone = before - members.len();
        self.members.settle();
        gone
    }

    /// True when it holds no member, not even a tombstone.
    pub fn has_no_entries(&self) -> bool {
        self.members.is_empty()
    }

    /// Packs the members when they fit (see `crate::packed`).
    pub(crate) fn settle(&mut self) {
        self.members.settle();
    }

    fn recount(&mut self) {
        let members = self.members.full_mut();
        self.live = members.values().filter(|p| p.is_live()).count();
        self.digest = digest_of(members);
        self.peak.after(Peak::default(), self.live);
    }
}

impl Crdt for OrSet {
    fn merge(&mut self, other: OrSet) -> bool {
        let mut changed = false;
        if other.newest > self.newest {
            self.newest = other.newest;
            changed = true;
        }
        changed |= self
            .members
            .merge_in(other.members, &mut self.live, &mut self.digest);
        self.peak.after(other.peak, self.live);
        changed
    }
}

/// Whether an entry counts in its collection's digest: one that shows
/// (an element some add keeps). A removed element's entry is kept only to
/// answer late adds, and each replica forgets it when its own collector
/// decides every replica has the remove — at different times. Were it
/// counted, a replica that collected and one that has not yet would never
/// compare equal, and the one that has not would never be proven in sync
/// and so never collect (two regions' digests stayed apart for good, the
/// concurrent CRDT checker's seed 3). Counted as absent, it is what it
/// shows: an element live on one replica and removed on the other still
/// differs (so a lost remove is still repaired), and a removed entry is
/// equal to none.
pub(crate) trait Shows {
    fn shows(&self) -> bool;
}

impl Shows for Presence {
    fn shows(&self) -> bool {
        self.is_live()
    }
}

/// One entry's share of a collection's digest: nothing for an entry that
/// does not show ([`Shows`]).
pub(crate) fn entry_digest<K: Hash, V: Hash + Shows>(k: &K, v: &V) -> u64 {
    use std::hash::BuildHasher;
    if !v.shows() {
        return 0;
    }
    foldhash::fast::FixedState::with_seed(0x5eed_e15a).hash_one((k, v))
}

/// The XOR of every entry's digest (after a change that touched many).
pub(crate) fn digest_of<K: Hash, V: Hash + Shows>(entries: &Map<K, V>) -> u64 {
    entries.iter().fold(0, |d, (k, v)| d ^ entry_digest(k, v))
}

/// Merges `theirs` into `mine` entry by entry, keeping `live` — how many
/// entries `is_live` — current; true if anything changed. (The members of
/// a set and the fields of a hash merge alike.)
pub(crate) fn merge_entries<K: Eq + Hash, V: Crdt + Hash + Shows>(
    mine: &mut Map<K, V>,
    live: &mut usize,
    digest: &mut u64,
    theirs: Map<K, V>,
    is_live: impl Fn(&V) -> bool,
) -> bool {
    let mut changed = false;
    for (k, v) in theirs {
        match mine.get_mut(&k) {
            Some(m) => {
                let was = is_live(m);
                let before = entry_digest(&k, m);
                if m.merge(v) {
                    changed = true;
                    *digest ^= before ^ entry_digest(&k, m);
                    match (was, is_live(m)) {
                        (false, true) => *live += 1,
                        (true, false) => *live -= 1,
                        _ => {}
                    }
                }
            }
            None => {
                *live += usize::from(is_live(&v));
                *digest ^= entry_digest(&k, &v);
                mine.insert(k, v);
                changed = true;
            }
        }
    }
    changed
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Crdt;

    fn v(ts: u64, origin: u32) -> Version {
        Version::new(ts, origin)
    }

    #[test]
    fn a_collected_remove_leaves_the_digest_as_it_was() {
        // Two replicas of one set, one of which has collected a remove
        // its collector judged every replica has: they show the same and
        // compare equal (they never did, so the other was never proven in
        // sync and never collected: the concurrent CRDT checker, seed 3).
        let mut a = OrSet::default();
        for (i, m) in [b"x", b"y"].iter().enumerate() {
            let d = a.add(Elem::new(*m), v(1 + i as u64, 1));
            a.merge(d);
        }
        let d = a.remove(&b"x"[..], v(5, 2)).unwrap();
        a.merge(d);
        let mut b = a.clone();
        assert_eq!(b.collect(v(10, 0)), 1);
        assert_eq!(a.entries(), 2);
        assert_eq!(b.entries(), 1);
        assert_eq!(a.digest(), b.digest());
        // A member live on one replica and removed on the other differs,
        // so anti-entropy still repairs a lost remove.
        let mut c = OrSet::default();
        for (i, m) in [b"x", b"y"].iter().enumerate() {
            let d = c.add(Elem::new(*m), v(1 + i as u64, 1));
            c.merge(d);
        }
        assert_ne!(a.digest(), c.digest());
    }
}

//! The add-wins map of scores: what a Redis sorted set holds.
//!
//! Each member has a [`Presence`] (add-wins, as a set member) and a
//! [`Score`]: a float register whose last write (`ZADD`, and also
//! `ZINCRBY`) sets it, with per-origin increment totals so that
//! concurrent `ZINCRBY`s in different regions all count:
//!
//! ```text
//! score = base + Σ_origin (total[origin] − observed[origin])   (origins the base had not seen)
//! ```
//!
//! An increment writes the new score as the base *and* raises its
//! origin's total, the base observing every total including the raised
//! one: on one replica the score is always exactly the base, computed as
//! Redis computes it (`old + by`, one rounding), and only increments the
//! winning base never saw are added on top. So: concurrent `ZINCRBY`s all
//! count; of a `ZADD` and a concurrent `ZINCRBY` the later write sets the
//! score, and if that is the `ZADD`, the concurrent increment is added to
//! it (`docs/datatypes.md`). `ZREM` removes the adds it has seen; a score
//! stays with a removed member (a concurrent `ZINCRBY` still merges into
//! it) until the collector forgets it.
//!
//! Order (`ZRANGE`, `ZRANK`…) is by score, then member bytes, as Redis.
//! A sorted set of more than [`INDEXED_FROM`] members keeps an order
//! index beside its members — an order-statistic B-tree
//! (`indexset::BTreeSet`: rank and position lookups in O(log n)) — built
//! on its first ordered read and kept current by every merge after; a
//! smaller one (and every delta) sorts on demand, as Redis scans a small
//! one's listpack. The index is a cache, not state: equality, digests and
//! encodings ignore it.

use std::cmp::Ordering;
use std::hash::{Hash, Hasher};
use std::sync::OnceLock;

use crate::orset::{digest_of, entry_digest, Map, Peak};
use crate::packed::Entries;
use crate::{Crdt, Elem, Presence, Version};

/// Sorted sets with more members than this keep an order index.
pub const INDEXED_FROM: usize = 128;

/// One origin's running total of score increments.
pub type FTally = crate::counter::Tally<f64>;

/// Per origin, its [`FTally`], sorted by origin.
pub type FTallies = crate::counter::Tallies<f64>;

/// A member's score (see the module doc). The totals are boxed: most
/// scores are only ever set by `ZADD`.
#[derive(Clone, Debug, Default)]
pub struct Score {
    base: f64,
    version: Version,
    counts: Option<Box<Counts>>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
struct Counts {
    /// The totals the base includes.
    observed: FTallies,
    /// Every origin's running total.
    totals: FTallies,
}

impl PartialEq for Score {
    fn eq(&self, other: &Self) -> bool {
        self.order() == other.order() && self.counts == other.counts
    }
}

impl Eq for Score {}

impl Hash for Score {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.order().hash(state);
        self.counts.hash(state);
    }
}

static NO_TALLIES: FTallies = crate::counter::Tallies(Vec::new());

impl Score {
    /// A score of exactly these parts (decoding).
    pub(crate) fn from_parts(
        base: f64,
        version: Version,
        observed: FTallies,
        totals: FTallies,
    ) -> Score {
        let counts = (!observed.0.is_empty() || !totals.0.is_empty())
            .then(|| Box::new(Counts { observed, totals }));
        Score {
            base,
            version,
            counts,
        }
    }

    /// The merge order of bases: version, then the value's bits (two
    /// writes never share a version; this only makes the order total).
    fn order(&self) -> (Version, u64) {
        (self.version, self.base.to_bits())
    }

    /// The last write's score.
    pub fn base(&self) -> f64 {
        self.base
    }

    /// The last write's version.
    pub fn version(&self) -> Version {
        self.version
    }

    /// The totals the base includes.
    pub fn observed(&self) -> &FTallies {
        self.counts.as_ref().map_or(&NO_TALLIES, |c| &c.observed)
    }

    /// Every origin's running total.
    pub fn totals(&self) -> &FTallies {
        self.counts.as_ref().map_or(&NO_TALLIES, |c| &c.totals)
    }

    /// The score shown: the base plus the increments it never saw. (Were
    /// that not a number — infinities of both signs met — the base.)
    pub fn value(&self) -> f64 {
        let Some(c) = &self.counts else {
            return self.base;
        };
        let mut v = self.base;
        for (o, t) in c.totals.iter() {
            let seen = c.observed.get(o);
            if t.version != seen.version {
                v += t.total - seen.total;
            }
        }
        if v.is_nan() {
            self.base
        } else {
            v
        }
    }

    /// The newest write it holds.
    pub fn newest(&self) -> Version {
        self.version.max(self.totals().newest())
    }

    /// The delta of setting the score to `v` (`ZADD`) as write `dot`.
    pub fn set(&self, v: f64, dot: Version) -> Score {
        let totals = self.totals().clone();
        Score::from_parts(v, dot, totals.clone(), totals)
    }

    /// The delta of adding `by` to `current` (the score shown, or 0 for a
    /// member not in the set) as write `dot`, and the new score: it is the
    /// new base, and `dot`'s origin's total grows by `by` (see the module
    /// doc). `None` when the result is not a number (Redis refuses it).
    pub fn incr(&self, current: f64, by: f64, dot: Version) -> Option<(f64, Score)> {
        let new = current + by;
        if new.is_nan() {
            return None;
        }
        let mut totals = self.totals().clone();
        let mine = totals.get(dot.origin);
        totals.offer(
            dot.origin,
            FTally {
                total: mine.total + by,
                version: dot,
            },
        );
        Some((new, Score::from_parts(new, dot, totals.clone(), totals)))
    }

    /// Drops everything written at or below `floor`; true if anything
    /// changed (see `Counter::drop_through`).
    pub fn drop_through(&mut self, floor: Version) -> bool {
        let before = self.clone();
        let (mut observed, mut totals) = match self.counts.take() {
            Some(c) => (c.observed, c.totals),
            None => Default::default(),
        };
        if self.version <= floor {
            self.base = 0.0;
            self.version = Version::ZERO;
            observed = FTallies::default();
        }
        totals.0.retain(|(_, t)| t.version > floor);
        observed.0.retain(|(_, t)| t.version > floor);
        *self = Score::from_parts(self.base, self.version, observed, totals);
        *self != before
    }

    /// True when only the base is set: no increment totals (what a packed
    /// member encodes in a few bytes).
    pub(crate) fn is_plain(&self) -> bool {
        self.counts.is_none()
    }

    /// True when it holds no write at all.
    pub fn is_empty(&self) -> bool {
        self.version == Version::ZERO && self.counts.is_none() && self.base.to_bits() == 0
    }

    /// Heap bytes owned beyond the handle.
    pub fn heap_bytes(&self) -> usize {
        self.counts.as_ref().map_or(0, |c| {
            std::mem::size_of::<Counts>() + 32 * (c.observed.0.len() + c.totals.0.len())
        })
    }
}

impl Crdt for Score {
    fn merge(&mut self, other: Score) -> bool {
        let theirs_win = other.order() > self.order();
        let (observed, totals) = match other.counts {
            Some(c) => (c.observed, c.totals),
            None => Default::default(),
        };
        let (mut my_observed, mut my_totals) = match self.counts.take() {
            Some(c) => (c.observed, c.totals),
            None => Default::default(),
        };
        let mut changed = my_totals.merge(totals);
        if theirs_win {
            self.base = other.base;
            self.version = other.version;
            my_observed = observed;
            changed = true;
        }
        *self = Score::from_parts(self.base, self.version, my_observed, my_totals);
        changed
    }
}

/// One member: whether it is in the set, and its score.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct Member {
    pub(crate) presence: Presence,
    pub(crate) score: Score,
}

impl crate::orset::Shows for Member {
    fn shows(&self) -> bool {
        self.is_live()
    }
}

impl Member {
    /// True while the member is in the set.
    pub fn is_live(&self) -> bool {
        self.presence.is_live()
    }

    /// Its score, when live.
    pub fn score(&self) -> Option<f64> {
        self.is_live().then(|| self.score.value())
    }
}

impl Crdt for Member {
    fn merge(&mut self, other: Member) -> bool {
        self.presence.merge(other.presence) | self.score.merge(other.score)
    }
}

/// A score as the order sees it: `-0` and `0` are one score (as Redis
/// compares them), every other value by its total order.
fn score_key(s: f64) -> f64 {
    if s == 0.0 {
        0.0
    } else {
        s
    }
}

/// A live member in the order: by score, then member bytes. `bias`
/// makes probes: −1 sorts before every member of its score, +1 after.
#[derive(Clone, Debug)]
pub struct Ranked {
    score: f64,
    bias: i8,
    member: Elem,
}

impl Ranked {
    fn of(score: f64, member: Elem) -> Ranked {
        Ranked {
            score,
            bias: 0,
            member,
        }
    }
}

impl PartialEq for Ranked {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}

impl Eq for Ranked {}

impl PartialOrd for Ranked {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Ranked {
    fn cmp(&self, other: &Self) -> Ordering {
        order(self.score, self.bias, &self.member, other)
    }
}

/// The order of (score, bias, member) against `other`, without building
/// a [`Ranked`] (no copy of the member).
fn order(score: f64, bias: i8, member: &[u8], other: &Ranked) -> Ordering {
    score_key(score)
        .total_cmp(&score_key(other.score))
        .then(bias.cmp(&other.bias))
        .then_with(|| member.cmp(&other.member[..]))
}

/// A bound of a score range: the score, and whether it is excluded.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ScoreBound {
    /// The score.
    pub score: f64,
    /// `(score`: the score itself is outside the range.
    pub exclusive: bool,
}

/// An add-wins map of scores (see the module doc).
#[derive(Clone, Debug, Default)]
pub struct ZSet {
    /// Packed while small (see `crate::packed`).
    pub(crate) members: Entries<Member>,
    pub(crate) live: usize,
    pub(crate) newest: Version,
    pub(crate) digest: u64,
    /// The live members in order, once a big set was read in order.
    /// Boxed: most sorted sets never have one, and the handle is part of
    /// every key's state.
    pub(crate) index: OnceLock<Box<indexset::BTreeSet<Ranked>>>,
    /// Its history, for `OBJECT ENCODING` (not state).
    pub(crate) peak: Peak,
}

impl PartialEq for ZSet {
    fn eq(&self, other: &Self) -> bool {
        self.newest == other.newest && self.members == other.members
    }
}

impl Eq for ZSet {}

impl ZSet {
    /// The score of `member`, when it is in the set.
    pub fn score(&self, member: &[u8]) -> Option<f64> {
        self.members.get(member).and_then(|m| m.score())
    }

    /// True when `member` has an entry, live or removed.
    pub fn has_member(&self, member: &[u8]) -> bool {
        self.members.contains_key(member)
    }

    /// Members in the set.
    pub fn len(&self) -> usize {
        self.live
    }

    /// True when no member is in the set.
    pub fn is_empty(&self) -> bool {
        self.live == 0
    }

    /// Entries kept, removed members included.
    pub fn entries(&self) -> usize {
        self.members.len()
    }

    /// The newest write this state holds.
    pub fn newest(&self) -> Version {
        self.newest
    }

    /// The live members and scores, in no particular order.
    pub fn iter(&self) -> impl Iterator<Item = (&[u8], f64)> + '_ {
        self.members
            .iter()
            .filter_map(|(m, x)| x.score().map(|s| (m, s)))
    }

    /// The live members in order (score, then member): a sorted copy for
    /// a small set, the index (built now if need be) for a big one.
    pub fn ordered(&self) -> Ordered<'_> {
        if self.live <= INDEXED_FROM && self.index.get().is_none() {
            let mut v: Vec<(f64, &[u8])> = self.iter().map(|(m, s)| (s, m)).collect();
            v.sort_by(|a, b| {
                score_key(a.0)
                    .total_cmp(&score_key(b.0))
                    .then_with(|| a.1.cmp(b.1))
            });
            return Ordered::Small(v);
        }
        Ordered::Big(self.index.get_or_init(|| {
            let mut idx = indexset::BTreeSet::new();
            for (m, s) in self.iter() {
                idx.insert(Ranked::of(s, Elem::new(m)));
            }
            Box::new(idx)
        }))
    }

    /// The delta of `ZADD member score` as write `dot`.
    pub fn set(&self, member: &[u8], score: f64, dot: Version) -> ZSet {
        let current = self.members.get(member);
        let s = current
            .as_deref()
            .map(|m| &m.score)
            .unwrap_or(&Score::default())
            .set(score, dot);
        self.single(
            Elem::new(member),
            Member {
                presence: Presence::added(dot),
                score: s,
            },
            dot,
        )
    }

    /// The delta of `ZINCRBY member by` as write `dot`, and the new
    /// score; `None` when the result is not a number.
    pub fn incr(&self, member: &[u8], by: f64, dot: Version) -> Option<(f64, ZSet)> {
        let current = self.members.get(member).unwrap_or_default();
        let shown = current.score().unwrap_or(0.0);
        let (n, s) = current.score.incr(shown, by, dot)?;
        Some((
            n,
            self.single(
                Elem::new(member),
                Member {
                    presence: Presence::added(dot),
                    score: s,
                },
                dot,
            ),
        ))
    }

    /// The delta of `ZREM member` as write `dot`, or `None` when it is
    /// not in the set.
    pub fn remove(&self, member: &[u8], dot: Version) -> Option<ZSet> {
        let m = self.members.get(member).filter(|m| m.is_live())?;
        Some(self.single(
            Elem::new(member),
            Member {
                presence: m.presence.removal(dot),
                score: Score::default(),
            },
            dot,
        ))
    }

    /// The delta of removing every member as write `dot` (`DEL`).
    pub fn clear(&self, dot: Version) -> ZSet {
        let mut members = Map::default();
        for (name, m) in self.members.iter().filter(|(_, m)| m.is_live()) {
            members.insert(
                Elem::new(name),
                Member {
                    presence: m.presence.removal(dot),
                    score: Score::default(),
                },
            );
        }
        ZSet {
            newest: dot,
            digest: digest_of(&members),
            members: Entries::from_map(members),
            ..ZSet::default()
        }
    }

    fn single(&self, name: Elem, m: Member, dot: Version) -> ZSet {
        let mut members = Map::default();
        let live = usize::from(m.is_live());
        let digest = entry_digest(&name, &m);
        members.insert(name, m);
        ZSet {
            members: Entries::from_map(members),
            live,
            newest: dot,
            digest,
            ..ZSet::default()
        }
    }

    /// Drops everything written at or below `floor`; true if anything
    /// changed.
    pub fn drop_through(&mut self, floor: Version) -> bool {
        if self.members.is_empty() {
            return false;
        }
        let mut changed = false;
        self.members.full_mut().retain(|_, m| {
            changed |= m.presence.drop_through(floor) | m.score.drop_through(floor);
            !(m.presence.is_empty() && m.score.is_empty())
        });
        if changed {
            self.recount();
        }
        self.settle();
        changed
    }

    /// A digest of the whole state, kept current (see `OrSet::digest`).
    pub fn digest(&self) -> u64 {
        self.digest ^ crate::codec::version_digest(self.newest)
    }

    /// True when it holds no member, not even a removed one.
    pub fn has_no_entries(&self) -> bool {
        self.members.is_empty()
    }

    /// Forgets removes older than `horizon` and members with nothing
    /// newer left; answers how many members went.
    pub fn collect(&mut self, horizon: Version) -> usize {
        let members = self.members.full_mut();
        let before = members.len();
        members.retain(|_, m| {
            m.presence.collect_removes(horizon);
            !(m.presence.is_empty() && m.score.newest() < horizon)
        });
        self.digest = digest_of(members);
        let gone = before - members.len();
        self.settle();
        gone
    }

    fn recount(&mut self) {
        let members = self.members.full_mut();
        self.live = members.values().filter(|m| m.is_live()).count();
        self.digest = digest_of(members);
        self.index = OnceLock::new();
        self.peak.after(Peak::default(), self.live);
    }

    /// Packs the members when they fit (see `crate::packed`); a packed set
    /// keeps no order index (merges into it do not maintain one).
    pub(crate) fn settle(&mut self) {
        self.members.settle();
        if self.members.packed().is_some() {
            self.index = OnceLock::new();
        }
    }

    /// The bytes of the members' buffer while they are packed.
    pub fn packed_bytes(&self) -> Option<usize> {
        self.members.packed().map(|p| p.heap_bytes())
    }

    /// What it has held since it last emptied (see [`Peak`]).
    pub fn peak(&self) -> Peak {
        self.peak
    }

    /// Marks a delta as bringing a member Redis would not pack.
    pub fn mark_wide(&mut self) {
        self.peak.wide = true;
    }
}

impl Crdt for ZSet {
    fn merge(&mut self, other: ZSet) -> bool {
        let mut changed = false;
        if other.newest > self.newest {
            self.newest = other.newest;
            changed = true;
        }
        let brought = other.peak;
        let theirs = other.members.into_map();
        if let Some(c) = self
            .members
            .merge_packed(&theirs, &mut self.live, &mut self.digest)
        {
            // Packed sets keep no order index (`settle`): none to follow.
            self.index = OnceLock::new();
            self.peak.after(brought, self.live);
            return changed | c;
        }
        let members = self.members.full_mut();
        for (k, v) in theirs {
            match members.get_mut(&k) {
                Some(m) => {
                    let was = m.score();
                    let before = entry_digest(&k, m);
                    if m.merge(v) {
                        changed = true;
                        self.digest ^= before ^ entry_digest(&k, m);
                        let now = m.score();
                        match (was.is_some(), now.is_some()) {
                            (false, true) => self.live += 1,
                            (true, false) => self.live -= 1,
                            _ => {}
                        }
                        if let Some(idx) = self.index.get_mut() {
                            if was.map(f64::to_bits) != now.map(f64::to_bits) {
                                if let Some(s) = was {
                                    idx.remove(&Ranked::of(s, k.clone()));
                                }
                                if let Some(s) = now {
                                    idx.insert(Ranked::of(s, k.clone()));
                                }
                            }
                        }
                    }
                }
                None => {
                    let now = v.score();
                    self.live += usize::from(now.is_some());
                    self.digest ^= entry_digest(&k, &v);
                    if let (Some(idx), Some(s)) = (self.index.get_mut(), now) {
                        idx.insert(Ranked::of(s, k.clone()));
                    }
                    members.insert(k, v);
                    changed = true;
                }
            }
        }
        self.settle();
        self.peak.after(brought, self.live);
        changed
    }
}

/// The live members of a sorted set in order (see [`ZSet::ordered`]):
/// positions 0.. by score, then member.
pub enum Ordered<'a> {
    /// A small set, sorted now.
    Small(Vec<(f64, &'a [u8])>),
    /// A big set's index.
    Big(&'a indexset::BTreeSet<Ranked>),
}

impl<'a> Ordered<'a> {
    /// How many members.
    pub fn len(&self) -> usize {
        match self {
            Ordered::Small(v) => v.len(),
            Ordered::Big(b) => b.len(),
        }
    }

    /// True when there is none.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The member at position `i`, and its score.
    pub fn get(&self, i: usize) -> Option<(f64, &[u8])> {
        match self {
            Ordered::Small(v) => v.get(i).copied(),
            Ordered::Big(b) => b.get_index(i).map(|r| (r.score, &r.member[..])),
        }
    }

    /// Positions `from..to`, in order.
    pub fn range(&self, from: usize, to: usize) -> Vec<(f64, &[u8])> {
        let to = to.min(self.len());
        if from >= to {
            return Vec::new();
        }
        match self {
            Ordered::Small(v) => v[from..to].to_vec(),
            Ordered::Big(b) => b
                .range_idx(from..to)
                .map(|r| (r.score, &r.member[..]))
                .collect(),
        }
    }

    /// The position of `member`, which has score `score`.
    pub fn rank(&self, score: f64, member: &[u8]) -> usize {
        self.first_at_or_after(&Ranked::of(score, Elem::new(member)))
    }

    /// How many members sort before `probe`.
    fn first_at_or_after(&self, probe: &Ranked) -> usize {
        match self {
            Ordered::Small(v) => v.partition_point(|(s, m)| order(*s, 0, m, probe).is_lt()),
            Ordered::Big(b) => b.rank(probe),
        }
    }

    /// The first position whose score is inside `min` (as a lower bound).
    pub fn score_start(&self, min: ScoreBound) -> usize {
        let bias = if min.exclusive { 1 } else { -1 };
        self.first_at_or_after(&Ranked {
            score: min.score,
            bias,
            member: Elem::default(),
        })
    }

    /// One past the last position whose score is inside `max` (as an
    /// upper bound).
    pub fn score_end(&self, max: ScoreBound) -> usize {
        let bias = if max.exclusive { -1 } else { 1 };
        self.first_at_or_after(&Ranked {
            score: max.score,
            bias,
            member: Elem::default(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(ts: u64, o: crate::NodeId) -> Version {
        Version::new(ts, o)
    }

    fn apply(mut z: ZSet, d: ZSet) -> ZSet {
        z.merge(d);
        z
    }

    #[test]
    fn concurrent_increments_all_count_and_one_replica_is_exact() {
        let start = apply(ZSet::default(), ZSet::default().set(b"m", 10.0, v(1, 1)));
        let (_, a) = start.incr(b"m", 0.1, v(2, 1)).unwrap();
        let (_, b) = start.incr(b"m", 0.2, v(3, 2)).unwrap();
        let both = apply(apply(start.clone(), a.clone()), b.clone());
        let other = apply(apply(start.clone(), b), a);
        assert_eq!(both, other);
        assert!((both.score(b"m").unwrap() - 10.3).abs() < 1e-9);
        // Sequentially on one replica: exactly Redis's arithmetic.
        let mut z = ZSet::default();
        let mut redis = 0.0f64;
        for (i, by) in [0.1, 0.2, 1e-17, 3.3].iter().enumerate() {
            let (n, d) = z.incr(b"x", *by, v(10 + i as u64, 1)).unwrap();
            z.merge(d);
            redis += by;
            assert_eq!(n.to_bits(), redis.to_bits());
            assert_eq!(z.score(b"x").unwrap().to_bits(), redis.to_bits());
        }
    }

    #[test]
    fn a_later_zadd_keeps_a_concurrent_increment_on_top() {
        let start = apply(ZSet::default(), ZSet::default().set(b"m", 1.0, v(1, 1)));
        let (_, inc) = start.incr(b"m", 5.0, v(2, 2)).unwrap();
        let add = start.set(b"m", 100.0, v(3, 1));
        let z = apply(apply(start, inc), add);
        assert_eq!(z.score(b"m"), Some(105.0));
    }

    #[test]
    fn order_is_by_score_then_member_and_the_index_follows_merges() {
        let mut z = ZSet::default();
        let mut t = 1;
        for i in 0..300u32 {
            let m = format!("m{:03}", i % 200);
            z.merge(z.set(m.as_bytes(), f64::from(i % 7), v(t, 1)));
            t += 1;
        }
        let _ = z.ordered(); // builds the index
        for i in 0..50u32 {
            let m = format!("m{:03}", i * 3);
            if let Some(d) = z.remove(m.as_bytes(), v(t, 2)) {
                z.merge(d);
            }
            t += 1;
            let m = format!("n{i}");
            z.merge(z.set(m.as_bytes(), -f64::from(i), v(t, 1)));
            t += 1;
        }
        let fresh = z.clone();
        let fresh = ZSet {
            index: OnceLock::new(),
            ..fresh
        };
        let mut expect: Vec<(u64, Vec<u8>)> = fresh
            .iter()
            .map(|(m, s)| (s.to_bits(), m.to_vec()))
            .collect();
        expect.sort_by(|a, b| {
            score_key(f64::from_bits(a.0))
                .total_cmp(&score_key(f64::from_bits(b.0)))
                .then(a.1.cmp(&b.1))
        });
        let o = z.ordered();
        assert!(matches!(o, Ordered::Big(_)));
        let got: Vec<(u64, Vec<u8>)> = o
            .range(0, o.len())
            .into_iter()
            .map(|(s, m)| (s.to_bits(), m.to_vec()))
            .collect();
        assert_eq!(got, expect);
        let lo = o.score_start(ScoreBound {
            score: 2.0,
            exclusive: true,
        });
        let hi = o.score_end(ScoreBound {
            score: 4.0,
            exclusive: false,
        });
        assert!(o.range(lo, hi).iter().all(|(s, _)| *s > 2.0 && *s <= 4.0));
        let n = expect
            .iter()
            .filter(|(s, _)| f64::from_bits(*s) > 2.0 && f64::from_bits(*s) <= 4.0)
            .count();
        assert_eq!(hi - lo, n);
    }
}

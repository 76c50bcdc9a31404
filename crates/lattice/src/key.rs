//! One key's whole state, whatever type it holds: the lattice the store
//! keeps per key once types beyond plain strings exist.
//!
//! A key holds a string ([`Counter`]) and at most one collection (hash,
//! set, sorted set or list). Operations of one type merge as
//! that type says. Operations of *different* types on one key can only
//! meet when two replicas wrote concurrently (a replica refuses a command
//! of the wrong type with `WRONGTYPE`), and then the newer write's type
//! wins — last writer wins between types:
//!
//! - the key shows the type of its newest write (string or collection);
//! - the other part forgets everything, and the part shown forgets every
//!   write at or below the newest write of any other type (`SET k v`
//!   replaced the set: its older members are gone; members added later —
//!   concurrently, elsewhere — stay). That version is kept (`floor`), so
//!   a late delta of the replaced part is forgotten on arrival too;
//! - two different collection types: the newer one is kept, the older
//!   one's state dropped (all of it is at or below its own newest write).
//!
//! `docs/datatypes.md` states these rules for users.

use crate::counter::Counter;
use crate::list::List;
use crate::ormap::OrMap;
use crate::orset::OrSet;
use crate::sparse::Sparse;
use crate::stream::Stream;
use crate::zset::ZSet;
use crate::{Crdt, Version};

/// The collection a key may hold.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Collection {
    /// A hash.
    Hash(OrMap),
    /// A set of members.
    Set(OrSet),
    /// A sorted set.
    ZSet(ZSet),
    /// A list (boxed: its state is the largest, and the handle is part of
    /// every key's state).
    List(Box<List>),
    /// A stream (boxed, as a list is).
    Stream(Box<Stream>),
}

impl Collection {
    /// A list as a collection.
    pub fn list(l: List) -> Collection {
        Collection::List(Box::new(l))
    }

    /// The newest write it holds.
    pub fn newest(&self) -> Version {
        match self {
            Collection::Hash(m) => m.newest(),
            Collection::Set(s) => s.newest(),
            Collection::ZSet(z) => z.newest(),
            Collection::List(l) => l.newest(),
            Collection::Stream(x) => x.newest(),
        }
    }

    /// True when it has no live element — for a stream, when it holds
    /// nothing at all: a stream whose entries were all deleted still
    /// exists, as in Redis.
    pub fn is_empty(&self) -> bool {
        match self {
            Collection::Hash(m) => m.is_empty(),
            Collection::Set(s) => s.is_empty(),
            Collection::ZSet(z) => z.is_empty(),
            Collection::List(l) => l.is_empty(),
            Collection::Stream(x) => x.has_no_entries(),
        }
    }

    pub(crate) fn kind(&self) -> Kind {
        match self {
            Collection::Hash(_) => Kind::Hash,
            Collection::Set(_) => Kind::Set,
            Collection::ZSet(_) => Kind::ZSet,
            Collection::List(_) => Kind::List,
            Collection::Stream(_) => Kind::Stream,
        }
    }

    fn drop_through(&mut self, floor: Version) -> bool {
        match self {
            Collection::Hash(m) => m.drop_through(floor),
            Collection::Set(s) => s.drop_through(floor),
            Collection::ZSet(z) => z.drop_through(floor),
            Collection::List(l) => l.drop_through(floor),
            Collection::Stream(x) => x.drop_through(floor),
        }
    }

    fn has_no_entries(&self) -> bool {
        match self {
            Collection::Hash(m) => m.has_no_entries(),
            Collection::Set(s) => s.has_no_entries(),
            Collection::ZSet(z) => z.has_no_entries(),
            Collection::List(l) => l.has_no_entries(),
            Collection::Stream(x) => x.has_no_entries(),
        }
    }

    /// Merges a collection of the same kind; false (and nothing done)
    /// for another kind.
    // The Err hands the collection back unmoved: boxing it would cost an
    // allocation on every merge of a delta.
    #[allow(clippy::result_large_err)]
    fn merge_same(&mut self, other: Collection) -> Result<bool, Collection> {
        match (self, other) {
            (Collection::Hash(a), Collection::Hash(b)) => Ok(a.merge(b)),
            (Collection::Set(a), Collection::Set(b)) => Ok(a.merge(b)),
            (Collection::ZSet(a), Collection::ZSet(b)) => Ok(a.merge(b)),
            (Collection::List(a), Collection::List(b)) => Ok(a.merge(*b)),
            (Collection::Stream(a), Collection::Stream(b)) => Ok(a.merge(*b)),
            (_, other) => Err(other),
        }
    }
}

/// What a key shows (Redis's `TYPE`, with `none` for an absent key).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Kind {
    /// Absent.
    #[default]
    None,
    /// A string (or counter).
    String,
    /// A hash.
    Hash,
    /// A set.
    Set,
    /// A sorted set.
    ZSet,
    /// A list.
    List,
    /// A stream.
    Stream,
}

impl Kind {
    /// True for a hash, set, sorted set, list or stream.
    pub fn is_collection(self) -> bool {
        matches!(
            self,
            Kind::Hash | Kind::Set | Kind::ZSet | Kind::List | Kind::Stream
        )
    }

    /// Redis's name for it.
    pub fn name(self) -> &'static str {
        match self {
            Kind::None => "none",
            Kind::String => "string",
            Kind::Hash => "hash",
            Kind::Set => "set",
            Kind::ZSet => "zset",
            Kind::List => "list",
            Kind::Stream => "stream",
        }
    }
}

/// A collection's expiry (`EXPIRE` of a hash, set, sorted set or list):
/// the last write wins. A string keeps its own, in its base.
///
/// It applies to the type of collection it was set on only: an `EXPIRE`
/// of a hash in one region and a set created under that key in another
/// (newer, so the set wins) leave the set without the hash's expiry —
/// whatever order the two arrive in.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Ttl {
    /// Absolute expiry, Unix ms; `None` persists.
    pub expire_ms: Option<u64>,
    /// The write that set it.
    pub version: Version,
    /// The type it was set on (`Kind::None`: any — a persist or a reset,
    /// or an expiry decoded from a state written before types were kept).
    pub kind: Kind,
}

/// A key with no expiry (most) reads this one.
impl crate::sparse::Empty for Ttl {
    fn empty() -> &'static Ttl {
        static EMPTY: Ttl = Ttl {
            expire_ms: None,
            version: Version::ZERO,
            kind: Kind::None,
        };
        &EMPTY
    }
}

impl Ttl {
    /// An expiry at `expire_ms` of a collection of kind `kind`, written
    /// as `version`.
    pub fn on(kind: Kind, expire_ms: Option<u64>, version: Version) -> Ttl {
        Ttl {
            expire_ms,
            version,
            kind: if expire_ms.is_some() {
                kind
            } else {
                Kind::None
            },
        }
    }

    /// No expiry, written as `version` (PERSIST, a reset).
    pub fn none(version: Version) -> Ttl {
        Ttl::on(Kind::None, None, version)
    }

    /// The expiry that applies to a collection of kind `kind`.
    fn applies_to(&self, kind: Kind) -> Option<u64> {
        self.expire_ms
            .filter(|_| self.kind == Kind::None || self.kind == kind)
    }
}

/// One key's state (see the module doc).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct KeyState {
    /// The string part (boxed only when there is one: see
    /// `crate::sparse`).
    pub string: Sparse<Counter>,
    /// The collection part.
    pub collection: Option<Collection>,
    /// The collection's expiry (boxed only when set).
    pub ttl: Sparse<Ttl>,
    /// The newest write of any part that lost to another type: every part
    /// forgets what is at or below it.
    pub(crate) floor: Version,
}

impl KeyState {
    /// A state holding only `collection` (a collection command's delta).
    pub fn of(collection: Collection) -> KeyState {
        KeyState {
            collection: Some(collection),
            ..KeyState::default()
        }
    }

    /// A state holding only `string` (a string command's delta).
    pub fn of_string(string: Counter) -> KeyState {
        KeyState {
            string: string.into(),
            ..KeyState::default()
        }
    }

    /// A state holding only a collection expiry (an `EXPIRE` delta).
    pub fn of_ttl(ttl: Ttl) -> KeyState {
        KeyState {
            ttl: ttl.into(),
            ..KeyState::default()
        }
    }

    /// The newest write of the collection part, its expiry included.
    ///
    /// An expiry is a write of the collection side even when no element
    /// is here (an `EXPIRE` delta arrives alone): it takes part in the
    /// change-of-type rule as the elements would, whatever arrives first.
    fn collection_newest(&self) -> Option<Version> {
        match &self.collection {
            Some(c) => Some(c.newest().max(self.ttl.version)),
            None if *self.ttl != Ttl::default() => Some(self.ttl.version),
            None => None,
        }
    }

    /// What the key shows at `now_ms`.
    pub fn kind(&self, now_ms: u64) -> Kind {
        match self.collection_newest() {
            Some(c) if c > self.string.written() => match &self.collection {
                Some(coll) if !coll.is_empty() && !self.collection_expired(now_ms) => coll.kind(),
                _ => Kind::None,
            },
            _ if self.string.shows(now_ms) => Kind::String,
            _ => Kind::None,
        }
    }

    /// The collection, when the key shows one.
    pub fn visible_collection(&self, now_ms: u64) -> Option<&Collection> {
        match self.kind(now_ms) {
            k if k.is_collection() => self.collection.as_ref(),
            _ => None,
        }
    }

    /// The string value, when the key shows one.
    pub fn visible_string(&self, now_ms: u64) -> Option<bytes::Bytes> {
        match self.kind(now_ms) {
            Kind::String => self.string.value(now_ms),
            _ => None,
        }
    }

    /// Absolute expiry of what the key shows (Unix ms), if it has one.
    pub fn expire_ms(&self, now_ms: u64) -> Option<u64> {
        match self.kind(now_ms) {
            Kind::String => self.string.expire_ms(),
            Kind::None => None,
            k => self.ttl.applies_to(k),
        }
    }

    /// The newest write of the key.
    pub fn newest(&self) -> Version {
        let c = self
            .collection
            .as_ref()
            .map_or(Version::ZERO, |c| c.newest());
        self.string
            .newest()
            .max(c)
            .max(self.floor)
            .max(self.ttl.version)
    }

    /// The delta that empties the key as write `dot` — what `DEL` (or a
    /// write after expiry) does: the string is deleted having seen every
    /// increment, the collection loses every element it shows, and its
    /// expiry is dropped. Concurrent writes elsewhere survive it (add
    /// wins; unseen increments count).
    pub fn clear(&self, start_ts: crate::Ts, dot: Version) -> KeyState {
        // A merged state holds one part (the older is trimmed by the
        // floor rule), and a delta must touch one part only: a string and
        // a collection written at one version tie, and a tie drops both.
        let mut delta = KeyState::default();
        if self.collection.is_none()
            && (self.string.base_value().is_some()
                || !self.string.tallies().is_empty()
                || !self.string.hll_parts().is_empty())
        {
            delta.string = self.string.set(None, None, start_ts, dot).into();
        }
        if let Some(Collection::Stream(_)) = &self.collection {
            // A stream forgets everything older than the delete (the
            // key's floor, just below it: a write of this same version —
            // an XADD on an expired stream — stays): entries are not
            // removed one by one, and a concurrent add elsewhere, newer,
            // stays (`crate::stream`).
            delta.floor = dot.pred();
            delta.ttl = Ttl::none(dot).into();
            return delta;
        }
        if let Some(c) = &self.collection {
            delta.collection = Some(match c {
                Collection::Hash(m) => Collection::Hash(m.clear(dot)),
                Collection::Set(s) => Collection::Set(s.clear(dot)),
                Collection::ZSet(z) => Collection::ZSet(z.clear(dot)),
                Collection::List(l) => Collection::List(Box::new(l.clear(dot))),
                Collection::Stream(_) => unreachable!("a stream is cleared by its floor"),
            });
            delta.ttl = Ttl::none(dot).into();
        }
        delta
    }

    /// Approximate heap bytes the state owns (MEMORY USAGE, INFO): each
    /// entry's slot in its map's dense vector (hash, element, metadata),
    /// about 1.5 index slots of 8 bytes, and what it owns on the heap.
    pub fn approx_bytes(&self) -> usize {
        const INDEX: usize = 12;
        let presence = |p: &crate::Presence| {
            p.adds.heap_bytes()
                + p.removed
                    .as_ref()
                    .map_or(0, |_| std::mem::size_of::<crate::dots::Removed>())
        };
        // The string part and the expiry, when boxed (`crate::sparse`).
        let boxed = usize::from(self.string.is_boxed()) * std::mem::size_of::<Counter>()
            + usize::from(self.ttl.is_boxed()) * std::mem::size_of::<Ttl>();
        std::mem::size_of::<KeyState>()
            + boxed
            + self.string.heap_bytes()
            + match &self.collection {
                None => 0,
                Some(Collection::Hash(m)) => match m.packed_bytes() {
                    // The allocator's size class: a multiple of 16.
                    Some(bytes) => bytes.next_multiple_of(16),
                    None => m
                        .fields
                        .iter()
                        .map(|(f, x)| {
                            8 + INDEX
                                + std::mem::size_of::<(crate::Elem, crate::ormap::Field)>()
                                + crate::Elem::new(f).heap_bytes()
                                + presence(&x.presence)
                                + x.value.heap_bytes()
                        })
                        .sum(),
                },
                Some(Collection::ZSet(z)) => match z.packed_bytes() {
                    // The allocator's size class: a multiple of 16.
                    Some(bytes) => bytes.next_multiple_of(16),
                    None => z
                        .members
                        .iter()
                        .map(|(e, m)| {
                            // Its slot, and its place in the order index.
                            8 + INDEX
                                + std::mem::size_of::<(crate::Elem, crate::zset::Member)>()
                                + 2 * crate::Elem::new(e).heap_bytes()
                                + 40
                                + presence(&m.presence)
                                + m.score.heap_bytes()
                        })
                        .sum(),
                },
                Some(Collection::List(l)) => l.heap_bytes(),
                Some(Collection::Stream(x)) => x.heap_bytes(),
                Some(Collection::Set(s)) => match s.packed_bytes() {
                    // The allocator's size class: a multiple of 16.
                    Some(bytes) => bytes.next_multiple_of(16),
                    None => s
                        .members
                        .iter()
                        .map(|(e, p)| {
                            8 + INDEX
                                + std::mem::size_of::<(crate::Elem, crate::Presence)>()
                                + crate::Elem::new(e).heap_bytes()
                                + presence(&p)
                        })
                        .sum(),
                },
            }
    }

    /// The delta that makes this key show what `target` shows at `now_ms`
    /// — its string and expiry, or its collection's elements and expiry —
    /// written as `dot` by a transaction started at `start_ts`. Only the
    /// elements that differ are written (one changed field of a big hash is
    /// one field's delta), but the key's version always moves to `dot`
    /// unless both show nothing, and what is written merges like the commands that would
    /// have made the change: elements this key shows and `target` does
    /// not are removed as `SREM`/`HDEL` would, values set as `HSET` would,
    /// so concurrent writes elsewhere still merge (`docs/datatypes.md`).
    /// An element shown alike on both sides is written again when
    /// `target`'s holds an add this key never saw (a transaction added it
    /// again, or `target` is another key's state written over this one):
    /// that add must survive a concurrent remove, as the command's would.
    pub fn replace_with(
        &self,
        target: &KeyState,
        now_ms: u64,
        start_ts: crate::Ts,
        dot: Version,
    ) -> KeyState {
        self.replace_touched(target, None, now_ms, start_ts, dot)
    }

    /// [`KeyState::replace_with`] when `target` is this state changed by
    /// deltas that named only the elements in `touched` (a transaction's
    /// copy: `crate::touched`): only those are compared. `None`: all are.
    pub fn replace_touched(
        &self,
        target: &KeyState,
        touched: Option<&crate::touched::Touched>,
        now_ms: u64,
        start_ts: crate::Ts,
        dot: Version,
    ) -> KeyState {
        let mine = self.kind(now_ms);
        let theirs = target.kind(now_ms);
        match theirs {
            Kind::None => {
                if mine == Kind::None && !self.collection_expired(now_ms) {
                    KeyState::default()
                } else {
                    self.clear(start_ts, dot)
                }
            }
            Kind::String => {
                let value = target.visible_string(now_ms);
                let expire = target.string.expire_ms();
                // A change of this value's TTL alone (EXPIRE in a script
                // or a BEGIN block) stays one: it never wins over a
                // concurrent write of the value (`Counter::retime`).
                let retimed = mine == Kind::String
                    && target.string.ttl_of() == Some(self.string.ttl_target())
                    && value == self.visible_string(now_ms);
                if retimed {
                    KeyState::of_string(self.string.retime(expire, start_ts, dot))
                } else if let Some(bytes) = value.as_ref().filter(|v| {
                    let shown = match mine {
                        Kind::String => self.visible_string(now_ms),
                        // Nothing shown with a TTL to set: the whole value
                        // (a part's TTL change needs a value to retime —
                        // over a cleared collection it had none, and the
                        // TTL was lost: the proptest below, 2026-12-02).
                        Kind::None if expire.is_some() => return false,
                        Kind::None => None,
                        _ => return false,
                    };
                    raises_registers(shown.as_deref(), v)
                }) {
                    // A HyperLogLog whose registers only rose (PFADD in a
                    // transaction, with an EXPIRE or not): merged
                    // register-wise, as the lone command's write is, its
                    // TTL changed alone (`crate::hll_parts`).
                    KeyState::of_string(self.string.hll_write_ttl(
                        bytes.clone(),
                        expire,
                        start_ts,
                        dot,
                        now_ms,
                    ))
                } else {
                    KeyState::of_string(self.string.set(value, expire, start_ts, dot))
                }
            }
            Kind::Stream => {
                let Some(Collection::Stream(t)) = target.collection.as_ref() else {
                    unreachable!("a stream shows");
                };
                // This key's stream, changed by the transaction's commands:
                // what changed, as their deltas would write it (what
                // another region adds meanwhile stays: `stream_diff.rs`).
                let empty = Stream::default();
                let base = match (&self.collection, mine) {
                    (Some(Collection::Stream(m)), _) => Some(&**m),
                    (None, Kind::None) => Some(&empty),
                    _ => None,
                };
                if let Some(m) = base {
                    if let Some(d) = m.delta_to(t, dot) {
                        let mut delta = KeyState::of(Collection::Stream(Box::new(d)));
                        delta.ttl = Ttl::on(theirs, target.expire_ms(now_ms), dot).into();
                        return delta;
                    }
                }
                // Another key's stream (COPY, RENAME, RESTORE): this key
                // forgets what it held and takes the stream as written now
                // (its entries keep their IDs).
                KeyState {
                    floor: dot.pred(),
                    collection: Some(Collection::Stream(Box::new(t.restamped(dot)))),
                    ttl: Ttl::on(theirs, target.expire_ms(now_ms), dot).into(),
                    ..KeyState::default()
                }
            }
            Kind::Hash | Kind::Set | Kind::ZSet | Kind::List => {
                let same = mine == theirs;
                let to = target.collection.as_ref().expect("a collection shows");
                let same_kind = self.collection.as_ref().map(Collection::kind) == Some(to.kind());
                // Not shown as it is: start from empty. A collection of
                // the same type is emptied (its elements removed, so its
                // counters and removes carry on); one of another type
                // loses to the newer write when merged (the floor rule).
                let mut delta = if same {
                    KeyState::default()
                } else if same_kind {
                    self.clear(start_ts, dot)
                } else {
                    // A string or another collection: the new one, newer,
                    // replaces it when merged (never both in one delta).
                    KeyState::default()
                };
                let only = touched.filter(|_| same);
                let part = crate::touched::collection_part(
                    to,
                    self.collection.as_ref(),
                    same,
                    only,
                    start_ts,
                    dot,
                );
                delta.merge(KeyState::of(part));
                // The expiry is written even when unchanged: a write is a
                // write (it moves the key's version, so a WATCH on it
                // fails, as in Redis), whatever it changed.
                delta.ttl = Ttl::on(theirs, target.expire_ms(now_ms), dot).into();
                delta
            }
        }
    }

    /// Forgets the collection's removes older than `horizon` (every
    /// replica has them); answers how many entries went.
    pub fn collect(&mut self, horizon: Version) -> usize {
        match &mut self.collection {
            None => 0,
            Some(Collection::Hash(m)) => m.collect(horizon),
            Some(Collection::Set(s)) => s.collect(horizon),
            Some(Collection::ZSet(z)) => z.collect(horizon),
            Some(Collection::List(l)) => l.collect(horizon),
            Some(Collection::Stream(_)) => 0,
        }
    }

    /// True when the collection keeps entries that are not live (removed
    /// elements the collector may forget).
    pub fn has_removed_entries(&self) -> bool {
        match &self.collection {
            None => false,
            Some(Collection::Hash(m)) => m.entries() > m.len(),
            Some(Collection::Set(s)) => s.entries() > s.len(),
            Some(Collection::ZSet(z)) => z.entries() > z.len(),
            Some(Collection::List(l)) => l.tombstones() > 0,
            Some(Collection::Stream(_)) => false,
        }
    }

    /// True when the collection part has expired at `now_ms` (it still
    /// holds its elements until a write or the collector clears them).
    pub fn collection_expired(&self, now_ms: u64) -> bool {
        self.collection
            .as_ref()
            .is_some_and(|c| self.ttl.applies_to(c.kind()).is_some_and(|at| at <= now_ms))
    }
}

impl KeyState {
    /// Forgets every part written before commit timestamp `ts` (a FLUSHALL
    /// or FLUSHDB at `ts`: its range tombstone); true if anything went.
    /// Unlike a change of type it leaves no floor behind: the store drops
    /// whatever older arrives later itself.
    pub fn forget_before(&mut self, ts: crate::Ts) -> bool {
        match ts.checked_sub(1) {
            Some(below) => self.trim(Version::new(below, crate::NodeId::MAX)),
            None => false,
        }
    }

    /// Forgets everything written at or below `floor`; true if anything
    /// went.
    fn trim(&mut self, floor: Version) -> bool {
        // No write is at the zero version: the usual case (no floor ever
        // raised) costs nothing — each incoming delta is trimmed, and a
        // collection's `drop_through` unpacks and packs it again.
        if floor == Version::default() {
            return false;
        }
        let mut changed = false;
        if let Some(s) = self.string.get_mut() {
            changed = s.drop_through(floor);
            self.string.tidy();
        }
        if self.ttl.version <= floor && *self.ttl != Ttl::default() {
            self.ttl = Sparse::default();
            changed = true;
        }
        if let Some(c) = self.collection.as_mut() {
            changed |= c.drop_through(floor);
            if c.has_no_entries() && c.newest() <= floor {
                self.collection = None;
                changed = true;
            }
        }
        changed
    }

    fn raise_floor(&mut self, to: Version) -> bool {
        if to > self.floor {
            self.floor = to;
            true
        } else {
            false
        }
    }
}

impl Crdt for KeyState {
    /// Costs what `other` holds, not what `self` holds (a delta of one
    /// member merges into a million-member set without a copy or scan) —
    /// except when a change of type raises the floor, which trims
    /// everything once.
    fn merge(&mut self, mut other: KeyState) -> bool {
        // Nothing at or below the floor survives: trim what comes in (a
        // delta: small), and this state only if the floor rose.
        let floor = self.floor.max(other.floor);
        other.trim(floor);
        let mut changed = self.raise_floor(floor);
        if changed {
            self.trim(floor);
        }
        changed |= self.string.merge(other.string);
        if (other.ttl.version, other.ttl.expire_ms, other.ttl.kind)
            > (self.ttl.version, self.ttl.expire_ms, self.ttl.kind)
        {
            self.ttl = other.ttl;
            changed = true;
        }
        // In place: a collection is a large value to move out and back
        // for each one-member delta.
        let mut other_type = None;
        match (&mut self.collection, other.collection) {
            (_, None) => {}
            (slot @ None, Some(theirs)) => {
                *slot = Some(theirs);
                changed = true;
            }
            (Some(mine), Some(theirs)) => match mine.merge_same(theirs) {
                Ok(c) => changed |= c,
                Err(theirs) => other_type = Some(theirs),
            },
        }
        // Two collection types (`mine` is there: `merge_same` refused
        // it): the newer wins whole (two writes never share a version;
        // the kind only orders states that hold no write at all).
        if let (Some(theirs), Some(mine)) = (other_type, self.collection.as_ref()) {
            let theirs_win = (theirs.newest(), theirs.kind()) > (mine.newest(), mine.kind());
            changed |= theirs_win;
            let lose = if theirs_win {
                self.collection.replace(theirs).map(|m| m.newest())
            } else {
                Some(theirs.newest())
            };
            if let Some(v) = lose {
                changed |= self.raise_floor(v);
            }
        }
        // String against collection: the older part loses everything.
        if let Some(c) = self.collection_newest() {
            changed |= self.raise_floor(self.string.written().min(c));
        }
        if self.floor > floor {
            changed |= self.trim(self.floor);
        }
        changed
    }
}

/// True when `to` is a HyperLogLog whose registers are each at least
/// `from`'s (`from` a HyperLogLog too, or nothing).
fn raises_registers(from: Option<&[u8]>, to: &[u8]) -> bool {
    let Ok(new) = crate::hll::registers(to) else {
        return false;
    };
    match from {
        None => true,
        Some(f) => {
            crate::hll::registers(f).is_ok_and(|old| old.iter().zip(&new).all(|(o, n)| o <= n))
        }
    }
}

//! Streams (issue 46): Redis's logs of entries `ms-seq → field/value
//! pairs`, and their consumer groups, as one lattice.
//!
//! Hand-written: no CRDT library has Redis's stream, and its merge rules
//! are what Elsa promises across regions (`docs/datatypes.md`).
//!
//! **Entries.** An entry is written once, under its ID. IDs made by `*`
//! carry the writing node (the command layer's rule), so two regions never
//! make the same one; an explicit ID taken concurrently in two regions
//! keeps the entry of the larger version, as a string would, the same
//! everywhere. Entries merge by union, and every replica orders them by ID.
//!
//! **Removal.** `XDEL` adds the ID to a grow-only set: a deleted entry
//! stays deleted whatever arrives later. Trimming (`MAXLEN`, `MINID`) sets
//! a floor below which nothing shows, the greatest of every trim's: an
//! entry trimmed in one region and added, read or claimed below the floor
//! in another ends trimmed everywhere. A trim covers for good what is below
//! its ID and not newer than it (dropped: a trimmed stream stays small);
//! an entry added below it concurrently is kept out of sight, as it must
//! show again should a `DEL` of the key forget the trim (the key's rule: a
//! delete forgets every part at or below its version and keeps what was
//! written concurrently). So the trims kept are those no other covers in
//! both ID and version (a staircase, one step while trims come in order):
//! keeping only the greatest ID lost a later trim of a lower ID, and
//! replicas that saw them in different orders disagreed (the proptest).
//!
//! **Counters.** The last ID is a last-commit-wins register (`XSETID` may
//! lower it) shown as at least the greatest entry and the greatest
//! deleted ID, so it never shows below an ID the stream had; the entries
//! added are counted per origin (a grow-only counter) plus an offset
//! `XSETID … ENTRIESADDED` sets; the greatest deleted ID is a register.
//!
//! **Consumer groups.** A group is one incarnation per `XGROUP CREATE`
//! (its version): a later create replaces it, `XGROUP DESTROY` ends it and
//! wins over concurrent changes of the same incarnation. Within it:
//! - the last delivered ID is the greatest `(setid version, ID)`: an
//!   `XGROUP SETID` (or the create) starts a new epoch, in which deliveries
//!   only move it forward;
//! - each pending entry is a delivery (consumer, time, count) against an
//!   acknowledgement, per ID, the later version winning: an `XACK` hides a
//!   delivery made before it, a delivery after it (a claim, a re-read after
//!   `SETID`) shows again;
//! - consumers are created and deleted (last version wins) and keep the
//!   latest seen and active times.
//!
//! Within a region each command commits at the key's primary, so a group
//! hands an entry to one consumer; across regions two consumers may each
//! get it until the regions converge (at least once: `docs/datatypes.md`).

use std::collections::BTreeMap;
use std::ops::Bound;

use crate::{Crdt, Elem, NodeId, Version};

/// A group's entries-read counter when it is not known (Redis's
/// `SCG_INVALID_ENTRIES_READ`, shown as a null).
pub const UNKNOWN_READ: u64 = u64::MAX;

/// A stream entry's ID, Redis's `ms-seq`; ordered by `ms`, then `seq`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct StreamId {
    /// Milliseconds (of the clock that made it, for `*`).
    pub ms: u64,
    /// Sequence within the millisecond.
    pub seq: u64,
}

impl StreamId {
    /// `0-0`, below every entry.
    pub const MIN: StreamId = StreamId { ms: 0, seq: 0 };
    /// The greatest ID.
    pub const MAX: StreamId = StreamId {
        ms: u64::MAX,
        seq: u64::MAX,
    };

    /// `ms-seq`.
    pub fn new(ms: u64, seq: u64) -> StreamId {
        StreamId { ms, seq }
    }

    /// The ID right after this one (None after [`StreamId::MAX`]).
    pub fn next(self) -> Option<StreamId> {
        match self.seq.checked_add(1) {
            Some(seq) => Some(StreamId { ms: self.ms, seq }),
            None => self.ms.checked_add(1).map(|ms| StreamId { ms, seq: 0 }),
        }
    }
}

impl std::fmt::Display for StreamId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}-{}", self.ms, self.seq)
    }
}

pub use log::Entry;
use log::{Log, Put};

/// A register: the value of the larger version.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
struct Reg<T> {
    version: Version,
    value: T,
}

impl<T: Ord + Copy> Reg<T> {
    fn merge(&mut self, other: Reg<T>) -> bool {
        if (other.version, other.value) > (self.version, self.value) {
            *self = other;
            true
        } else {
            false
        }
    }
}

/// A delivery of an entry to a consumer of a group, not yet acknowledged.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Delivery {
    /// Which commit delivered (or claimed) it.
    pub version: Version,
    /// The consumer that has it.
    pub consumer: Elem,
    /// When it was last delivered (unix ms).
    pub at_ms: u64,
    /// How many times it was delivered.
    pub count: u64,
}

/// A consumer of a group.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct Consumer {
    /// Created (true) or deleted (false), by the later version.
    live: Reg<bool>,
    /// Last attempted interaction (unix ms), the latest.
    pub seen_ms: u64,
    /// Last successful interaction (unix ms), the latest.
    pub active_ms: u64,
}

/// One incarnation of a consumer group.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct Group {
    /// The `XGROUP CREATE` that made it.
    created: Version,
    /// The `XGROUP DESTROY` that ended it.
    destroyed: Option<Version>,
    /// `(epoch, last delivered ID, entries read)`, the greatest: an epoch
    /// is the version of the create or `SETID` that began it.
    delivered: (Version, StreamId, u64),
    /// Per ID: the latest delivery.
    deliveries: BTreeMap<StreamId, Delivery>,
    /// Per ID: the latest acknowledgement.
    acks: BTreeMap<StreamId, Version>,
    consumers: BTreeMap<Elem, Consumer>,
    /// XOR of its deliveries', acknowledgements' and consumers' shares of
    /// the digest, kept current by each change (a group of a million
    /// pending entries is not hashed per `XACK`).
    digest: u64,
}

impl Group {
    /// The last delivered ID and the entries read (Redis's `last-id`,
    /// `entries-read`).
    pub fn last_delivered(&self) -> (StreamId, u64) {
        (self.delivered.1, self.delivered.2)
    }

    /// The pending entries: delivered and not acknowledged since.
    pub fn pending(&self) -> impl Iterator<Item = (StreamId, &Delivery)> + '_ {
        self.pending_in(StreamId::MIN, StreamId::MAX)
    }

    /// The pending entries from `start` to `end` (inclusive), in ID order.
    pub fn pending_in(
        &self,
        start: StreamId,
        end: StreamId,
    ) -> impl Iterator<Item = (StreamId, &Delivery)> + '_ {
        let range = (start <= end).then(|| self.deliveries.range(start..=end));
        range
            .into_iter()
            .flatten()
            .filter(|(id, d)| self.acks.get(id).is_none_or(|a| *a < d.version))
            .map(|(id, d)| (*id, d))
    }

    /// The live consumers.
    pub fn consumers(&self) -> impl Iterator<Item = (&Elem, &Consumer)> + '_ {
        self.consumers.iter().filter(|(_, c)| c.live.value)
    }

    fn merge(&mut self, other: Group) -> bool {
        if other.created != self.created {
            if other.created > self.created {
                *self = other;
                return true;
            }
            return false;
        }
        let mut changed = false;
        if other.destroyed > self.destroyed {
            self.destroyed = other.destroyed;
            changed = true;
        }
        if other.delivered > self.delivered {
            self.delivered = other.delivered;
            changed = true;
        }
        for (id, d) in other.deliveries {
            match self.deliveries.get_mut(&id) {
                Some(mine) if *mine >= d => {}
                Some(mine) => {
                    self.digest ^= group::delivery_hash(id, mine) ^ group::delivery_hash(id, &d);
                    *mine = d;
                    changed = true;
                }
                None => {
                    self.digest ^= group::delivery_hash(id, &d);
                    self.deliveries.insert(id, d);
                    changed = true;
                }
            }
        }
        for (id, v) in other.acks {
            let mine = self.acks.entry(id).or_default();
            if v > *mine {
                if *mine != Version::ZERO {
                    self.digest ^= group::ack_hash(id, *mine);
                }
                self.digest ^= group::ack_hash(id, v);
                *mine = v;
                changed = true;
            }
        }
        for (name, c) in other.consumers {
            let existed = self.consumers.contains_key(&name);
            let mine = self.consumers.entry(name.clone()).or_default();
            let before = mine.clone();
            mine.live.merge(c.live);
            mine.seen_ms = mine.seen_ms.max(c.seen_ms);
            mine.active_ms = mine.active_ms.max(c.active_ms);
            if *mine != before || !existed {
                if existed {
                    self.digest ^= group::consumer_hash(&name, &before);
                }
                self.digest ^= group::consumer_hash(&name, mine);
                changed = true;
            }
        }
        changed
    }
}

/// A stream (see the module doc).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Stream {
    entries: Log,
    /// Deleted IDs, with the (latest) version that deleted each.
    deleted: BTreeMap<StreamId, Version>,
    /// Trims `(ID, version)`, none covering another in both, by rising
    /// ID (so falling version); nothing below the last ID shows.
    trims: Vec<(StreamId, Version)>,
    last: Reg<StreamId>,
    /// Entries added, per origin: how many, and the version of its latest
    /// add (the later wins: an origin counts from 1 again after a `DEL`).
    added: BTreeMap<NodeId, (u64, Version)>,
    /// `XSETID … ENTRIESADDED`: what the count shows beyond `added`.
    added_offset: Reg<i64>,
    max_deleted: Reg<StreamId>,
    /// The greatest ID a trim removed (the greatest wins): not shown —
    /// Redis's trims leave `max-deleted-entry-id` alone — but the last ID
    /// never shows below it, whatever the last-ID register holds.
    trimmed: Reg<StreamId>,
    groups: BTreeMap<Elem, Group>,
    /// XOR of every held entry's and deleted ID's share of the digest,
    /// kept current by each change (a write must not hash the log).
    digest: u64,
    /// Kept current by each change, as the digest (every write of a
    /// million-entry stream reads them): the newest write held, the
    /// entries at or above the floor, and those of them not deleted.
    newest: Version,
    held: usize,
    live: usize,
}

impl Stream {
    /// The entries that show, in ID order.
    pub fn entries(&self) -> impl DoubleEndedIterator<Item = (StreamId, Entry<'_>)> + '_ {
        self.entries
            .range(self.floor()..)
            .filter(|(id, _)| !self.deleted.contains_key(id))
    }

    /// The entries that show from `start` to `end` (inclusive), in ID
    /// order — read from where they are, not from the head.
    pub fn entries_in(
        &self,
        start: StreamId,
        end: StreamId,
    ) -> impl DoubleEndedIterator<Item = (StreamId, Entry<'_>)> + '_ {
        let start = start.max(self.floor());
        self.entries
            .range(start..=end)
            .filter(|(id, _)| !self.deleted.contains_key(id))
    }

    /// Every entry held at or above the trim floor, in ID order, with
    /// whether it shows (an `XDEL`ed one is held, hidden): Redis keeps a
    /// deleted entry in its node too, so approximate trims count nodes
    /// over these.
    pub fn held(&self) -> impl DoubleEndedIterator<Item = (StreamId, bool)> + '_ {
        self.entries
            .range(self.floor()..)
            .map(|(id, _)| (id, !self.deleted.contains_key(&id)))
    }

    /// The entries at or above the floor with their fields and when each
    /// was deleted (where Redis's nodes end depends on their sizes and on
    /// when a node lost its last entry).
    pub fn held_entries(
        &self,
    ) -> impl Iterator<Item = (StreamId, Option<Version>, Entry<'_>)> + '_ {
        self.entries
            .range(self.floor()..)
            .map(|(id, e)| (id, self.deleted.get(&id).copied(), e))
    }

    /// How many entries are held at or above the floor (shown or
    /// deleted).
    pub fn held_len(&self) -> usize {
        self.held
    }

    /// Whether `id` is known here: held (shown or deleted), or below the
    /// trim floor — an entry merged again under it shows nothing new.
    pub fn holds(&self, id: StreamId) -> bool {
        id < self.floor() || self.entries.contains(id) || self.deleted.contains_key(&id)
    }

    /// The entry `id`, if it shows.
    pub fn entry(&self, id: StreamId) -> Option<Entry<'_>> {
        if id < self.floor() || self.deleted.contains_key(&id) {
            return None;
        }
        self.entries.get(id)
    }

    /// How many entries show (`XLEN`).
    pub fn len(&self) -> usize {
        self.live
    }

    /// True when no entry shows.
    pub fn is_empty(&self) -> bool {
        self.live == 0
    }

    /// The last ID (`last-generated-id`): never below an entry or a
    /// deleted ID the stream had.
    pub fn last_id(&self) -> StreamId {
        let top = self.entries.last_id().unwrap_or_default();
        let deleted = self.deleted.keys().next_back().copied().unwrap_or_default();
        self.last
            .value
            .max(top)
            .max(deleted)
            .max(self.max_deleted.value)
            .max(self.trimmed.value)
    }

    /// Entries ever added (`entries-added`).
    pub fn entries_added(&self) -> u64 {
        let sum: u64 = self.added.values().map(|(n, _)| n).sum();
        (sum as i64).saturating_add(self.added_offset.value).max(0) as u64
    }

    /// The greatest deleted ID (`max-deleted-entry-id`).
    pub fn max_deleted_id(&self) -> StreamId {
        self.max_deleted.value
    }

    /// The trim floor: nothing below it shows.
    pub fn floor(&self) -> StreamId {
        self.trims.last().map_or(StreamId::MIN, |t| t.0)
    }

    /// The newest write it holds.
    pub fn newest(&self) -> Version {
        self.newest
    }

    /// Computes every cached figure afresh (after a change that touched
    /// many parts; a delta just built).
    fn recount(&mut self) {
        self.newest = self.scan_newest();
        let floor = self.floor();
        self.held = self.entries.range(floor..).count();
        self.live = self
            .entries
            .range(floor..)
            .filter(|(id, _)| !self.deleted.contains_key(id))
            .count();
        self.digest = self.held_digest();
    }

    /// True when every part written holds a version above `floor`: a
    /// scan, cheap for a delta (a group, whose parts are many, answers
    /// false).
    fn all_newer_than(&self, floor: Version) -> bool {
        fn kept<T: Default + PartialEq>(r: &Reg<T>, floor: Version) -> bool {
            r.version > floor || *r == Reg::default()
        }
        self.groups.is_empty()
            && kept(&self.last, floor)
            && kept(&self.added_offset, floor)
            && kept(&self.max_deleted, floor)
            && kept(&self.trimmed, floor)
            && self.deleted.values().all(|v| *v > floor)
            && self.added.values().all(|(_, v)| *v > floor)
            && self.trims.iter().all(|t| t.1 > floor)
            && self.entries.iter().all(|(_, e)| e.version > floor)
    }

    /// The newest write, by a scan of every part.
    fn scan_newest(&self) -> Version {
        let entries = self.entries.iter().map(|(_, e)| e.version);
        let deleted = self.deleted.values().copied();
        let added = self.added.values().map(|(_, v)| *v);
        let groups = self.groups.values().map(Group::newest);
        let trims = self.trims.iter().map(|t| t.1);
        entries
            .chain(deleted)
            .chain(added)
            .chain(groups)
            .chain(trims)
            .chain([
                self.last.version,
                self.added_offset.version,
                self.max_deleted.version,
                self.trimmed.version,
            ])
            .max()
            .unwrap_or_default()
    }

    /// True when nothing at all is held (no entry, deletion, group or
    /// register written): the key does not exist. A stream whose entries
    /// were all deleted still does, as in Redis.
    pub fn has_no_entries(&self) -> bool {
        self.newest() == Version::ZERO
    }

    /// Forgets everything written at or below `floor` (a `DEL` of the key,
    /// a change of its type); true if anything went.
    pub fn drop_through(&mut self, floor: Version) -> bool {
        // Every write of a key re-created after a `DEL` is trimmed by the
        // `DEL`'s floor as it merges (`KeyState::merge`): a one-entry
        // delta, all of it newer. Found so, it is left alone — the copy,
        // the compare and the recount below cost XADD a seventh of its
        // time on such a key (`bench/compare-streams.sh`).
        if self.all_newer_than(floor) {
            return false;
        }
        let before = self.clone();
        self.entries
            .retain_below(Bound::Unbounded, |_, e| e.version > floor);
        self.deleted.retain(|_, v| *v > floor);
        self.trims.retain(|t| t.1 > floor);
        if self.last.version <= floor {
            self.last = Reg::default();
        }
        if self.added_offset.version <= floor {
            self.added_offset = Reg::default();
        }
        if self.max_deleted.version <= floor {
            self.max_deleted = Reg::default();
        }
        if self.trimmed.version <= floor {
            self.trimmed = Reg::default();
        }
        self.added.retain(|_, (_, v)| *v > floor);
        self.groups.retain(|_, g| g.created > floor);
        self.recount();
        *self != before
    }

    /// The live groups.
    pub fn groups(&self) -> impl Iterator<Item = (&Elem, &Group)> + '_ {
        self.groups.iter().filter(|(_, g)| g.destroyed.is_none())
    }

    /// The live group `name`.
    pub fn group(&self, name: &[u8]) -> Option<&Group> {
        self.groups.get(name).filter(|g| g.destroyed.is_none())
    }

    /// The delta of `XADD id fields` committed as `version`.
    pub fn add(
        &self,
        id: StreamId,
        fields: impl Into<crate::stream_fields::Fields>,
        version: Version,
    ) -> Stream {
        let fields = fields.into();
        let mut d = Stream::default();
        d.entries.put(id, fields.as_ref(), version);
        d.last = Reg { version, value: id };
        let mine = self.added.get(&version.origin).map_or(0, |(n, _)| *n);
        d.added.insert(version.origin, (mine + 1, version));
        d.recount();
        d
    }

    /// The delta of `XDEL` of `ids` committed as `version`.
    pub fn delete(&self, ids: &[StreamId], version: Version) -> Stream {
        let mut d = Stream::default();
        d.deleted.extend(ids.iter().map(|id| (*id, version)));
        if let Some(top) = ids.iter().max() {
            d.max_deleted = Reg {
                version,
                value: (*top).max(self.max_deleted.value),
            };
        }
        d.recount();
        d
    }

    /// The delta of a trim that removes every entry below `floor`
    /// (`MINID`; `MAXLEN` once the command found its floor).
    pub fn trim_below(&self, floor: StreamId, version: Version) -> Stream {
        let mut d = Stream {
            trims: vec![(floor, version)],
            ..Stream::default()
        };
        let trimmed = self.entries.range(..floor).next_back().map(|(id, _)| id);
        if let Some(top) = trimmed.filter(|t| *t > self.trimmed.value) {
            d.trimmed = Reg {
                version,
                value: top,
            };
        }
        d.recount();
        d
    }

    /// The delta of `XSETID last [ENTRIESADDED n] [MAXDELETEDID id]`.
    pub fn set_id(
        &self,
        last: StreamId,
        entries_added: Option<u64>,
        max_deleted: Option<StreamId>,
        version: Version,
    ) -> Stream {
        let mut d = Stream {
            last: Reg {
                version,
                value: last,
            },
            ..Stream::default()
        };
        if let Some(n) = entries_added {
            let sum: u64 = self.added.values().map(|(n, _)| n).sum();
            d.added_offset = Reg {
                version,
                value: n as i64 - sum as i64,
            };
        }
        if let Some(m) = max_deleted {
            d.max_deleted = Reg { version, value: m };
        }
        d.recount();
        d
    }

    /// The delta of `XGROUP CREATE name last` (entries read unknown: 0).
    pub fn create_group(&self, name: Elem, last: StreamId, read: u64, version: Version) -> Stream {
        let mut d = Stream::default();
        d.groups.insert(
            name,
            Group {
                created: version,
                delivered: (version, last, read),
                ..Group::default()
            },
        );
        d.recount();
        d
    }

    /// A delta of the live group `name` (None when there is none), made by
    /// `change` from an empty group of the same incarnation.
    fn group_delta(&self, name: &[u8], change: impl FnOnce(&Group, &mut Group)) -> Option<Stream> {
        let g = self.group(name)?;
        let mut delta = Group {
            created: g.created,
            delivered: (Version::ZERO, StreamId::MIN, 0),
            ..Group::default()
        };
        change(g, &mut delta);
        delta.digest = delta.items_digest();
        let mut d = Stream::default();
        d.groups.insert(Elem::new(name), delta);
        d.recount();
        Some(d)
    }

    /// The delta of `XGROUP DESTROY name`.
    pub fn destroy_group(&self, name: &[u8], version: Version) -> Option<Stream> {
        self.group_delta(name, |_, d| d.destroyed = Some(version))
    }

    /// The delta of `XGROUP SETID name last [ENTRIESREAD n]`.
    pub fn set_group_id(
        &self,
        name: &[u8],
        last: StreamId,
        read: u64,
        version: Version,
    ) -> Option<Stream> {
        self.group_delta(name, |_, d| d.delivered = (version, last, read))
    }

    /// The delta of a delivery of `ids` to `consumer` at `now_ms`
    /// (`XREADGROUP`, `XCLAIM`): each delivered once more, the group's
    /// last delivered ID moved to `last` with `read` entries read if it is
    /// beyond (`XREADGROUP >`), the consumer created and active.
    pub fn deliver(
        &self,
        name: &[u8],
        consumer: &[u8],
        ids: &[StreamId],
        advance: Option<(StreamId, u64)>,
        now_ms: u64,
        version: Version,
    ) -> Option<Stream> {
        let g = self.group(name)?;
        let counted: Vec<(StreamId, u64)> = ids
            .iter()
            .map(|id| (*id, g.pending_count(*id) + 1))
            .collect();
        self.deliver_counted(name, consumer, &counted, now_ms, advance, now_ms, version)
    }

    /// The delta of a delivery of each `(id, count)` to `consumer`, as
    /// delivered at `at_ms` that many times (Redis's `XREADGROUP >` counts
    /// 1, a re-read one more, `XCLAIM … RETRYCOUNT` what it is told), the
    /// group's last delivered ID moved forward to `advance` if beyond, the
    /// consumer created if need be and seen at `now_ms`.
    #[allow(clippy::too_many_arguments)]
    pub fn deliver_counted(
        &self,
        name: &[u8],
        consumer: &[u8],
        deliveries: &[(StreamId, u64)],
        at_ms: u64,
        advance: Option<(StreamId, u64)>,
        now_ms: u64,
        version: Version,
    ) -> Option<Stream> {
        self.group_delta(name, |g, d| {
            for (id, count) in deliveries {
                d.deliveries.insert(
                    *id,
                    Delivery {
                        version,
                        consumer: Elem::new(consumer),
                        at_ms,
                        count: *count,
                    },
                );
            }
            if let Some((last, read)) = advance {
                let epoch = g.delivered.0;
                d.delivered = (epoch, last, read).max(g.delivered);
            }
            d.consumers.insert(
                Elem::new(consumer),
                Consumer::touched(g, consumer, now_ms, version),
            );
        })
    }

    /// The delta that moves the group's last delivered ID forward to
    /// `to` (ID, entries read) in its epoch, if beyond (`XCLAIM … LASTID`).
    pub fn advance_group(&self, name: &[u8], to: (StreamId, u64)) -> Option<Stream> {
        self.group_delta(name, |g, d| {
            d.delivered = (g.delivered.0, to.0, to.1).max(g.delivered);
        })
    }

    /// The delta of `XACK name ids`.
    pub fn ack(&self, name: &[u8], ids: &[StreamId], version: Version) -> Option<Stream> {
        self.group_delta(name, |_, d| {
            d.acks.extend(ids.iter().map(|id| (*id, version)));
        })
    }

    /// The delta of `XGROUP CREATECONSUMER` (and of a consumer seen by a
    /// read that delivered nothing).
    pub fn touch_consumer(
        &self,
        name: &[u8],
        consumer: &[u8],
        now_ms: u64,
        version: Version,
    ) -> Option<Stream> {
        self.group_delta(name, |g, d| {
            d.consumers.insert(
                Elem::new(consumer),
                Consumer::touched(g, consumer, now_ms, version),
            );
        })
    }

    /// The delta of `XGROUP DELCONSUMER`: the consumer goes, and its
    /// pending entries are acknowledged (as Redis drops them).
    pub fn delete_consumer(
        &self,
        name: &[u8],
        consumer: &[u8],
        version: Version,
    ) -> Option<Stream> {
        self.group_delta(name, |g, d| {
            for (id, p) in g.pending() {
                if &p.consumer[..] == consumer {
                    d.acks.insert(id, version);
                }
            }
            d.consumers.insert(
                Elem::new(consumer),
                Consumer {
                    live: Reg {
                        version,
                        value: false,
                    },
                    ..Consumer::default()
                },
            );
        })
    }

    /// True for what a trim hides for good: below its ID, and not newer.
    fn covered(&self, id: StreamId, version: Version) -> bool {
        // By rising ID and falling version: the first trim above `id` is
        // the newest of those above it.
        let i = self.trims.partition_point(|t| t.0 <= id);
        self.trims.get(i).is_some_and(|t| version <= t.1)
    }

    /// Adds a trim unless one covers it, dropping those it covers; true
    /// if it was added.
    fn add_trim(&mut self, t: (StreamId, Version)) -> bool {
        if self.trims.iter().any(|k| k.0 >= t.0 && k.1 >= t.1) {
            return false;
        }
        self.trims.retain(|k| !(k.0 <= t.0 && k.1 <= t.1));
        let at = self.trims.partition_point(|k| k.0 < t.0);
        self.trims.insert(at, t);
        true
    }

    /// Drops what the trims hide for good.
    fn settle(&mut self) {
        let trims = std::mem::take(&mut self.trims);
        let covered = |id: StreamId, v: Version| {
            let i = trims.partition_point(|t| t.0 <= id);
            trims.get(i).is_some_and(|t| v <= t.1)
        };
        let digest = &mut self.digest;
        // Nothing at or above the greatest trim's ID is covered.
        let top = trims.last().map_or(StreamId::MIN, |t| t.0);
        self.entries.retain_below(Bound::Excluded(top), |k, e| {
            let keep = !covered(k, e.version);
            if !keep {
                *digest ^= entry_hash(k, e);
            }
            keep
        });
        self.deleted.retain(|k, d| {
            let keep = !covered(*k, *d);
            if !keep {
                *digest ^= deleted_hash(*k, *d);
            }
            keep
        });
        self.trims = trims;
    }
}

impl Crdt for Stream {
    fn merge(&mut self, other: Stream) -> bool {
        let mut trimmed = false;
        for t in other.trims {
            trimmed |= self.add_trim(t);
        }
        let mut changed = trimmed;
        // The newest write held moves only by what is kept (a part that
        // loses its merge is older than the one it lost to).
        let mut newest = self.newest;
        let mut recount = trimmed;
        let floor = self.floor();
        for (id, e) in other.entries.iter() {
            if self.covered(id, e.version) {
                continue;
            }
            match self.entries.put(id, e.fields, e.version) {
                Put::Kept => {}
                Put::Replaced(share) => {
                    self.digest ^= share ^ entry_hash(id, e);
                    newest = newest.max(e.version);
                    changed = true;
                }
                Put::Added => {
                    self.digest ^= entry_hash(id, e);
                    newest = newest.max(e.version);
                    if id >= floor {
                        self.held += 1;
                        self.live += usize::from(!self.deleted.contains_key(&id));
                    }
                    changed = true;
                }
            }
        }
        for (id, v) in other.deleted {
            if self.covered(id, v) {
                continue;
            }
            let mine = self.deleted.entry(id).or_default();
            if v > *mine {
                if *mine != Version::ZERO {
                    self.digest ^= deleted_hash(id, *mine);
                } else if id >= floor && self.entries.contains(id) {
                    self.live -= 1;
                }
                self.digest ^= deleted_hash(id, v);
                newest = newest.max(v);
                *mine = v;
                changed = true;
            }
        }
        for (mine, theirs) in [
            (&mut self.last, other.last),
            (&mut self.max_deleted, other.max_deleted),
        ] {
            if mine.merge(theirs) {
                newest = newest.max(theirs.version);
                changed = true;
            }
        }
        if self.added_offset.merge(other.added_offset) {
            newest = newest.max(other.added_offset.version);
            changed = true;
        }
        for (origin, (n, v)) in other.added {
            let mine = self.added.entry(origin).or_default();
            if (v, n) > (mine.1, mine.0) {
                *mine = (n, v);
                newest = newest.max(v);
                changed = true;
            }
        }
        if (other.trimmed.value, other.trimmed.version) > (self.trimmed.value, self.trimmed.version)
        {
            self.trimmed = other.trimmed;
            newest = newest.max(other.trimmed.version);
            changed = true;
        }
        for (name, g) in other.groups {
            match self.groups.get_mut(&name) {
                // Another incarnation replacing this one takes its parts
                // with it: counted afresh.
                Some(mine) if g.created > mine.created => {
                    *mine = g;
                    recount = true;
                    changed = true;
                }
                Some(mine) if g.created == mine.created => {
                    let theirs = g.newest();
                    if mine.merge(g) {
                        newest = newest.max(theirs);
                        changed = true;
                    }
                }
                Some(_) => {}
                None => {
                    newest = newest.max(g.newest());
                    self.groups.insert(name, g);
                    changed = true;
                }
            }
        }
        self.newest = newest;
        if trimmed {
            self.settle();
        }
        if recount {
            self.recount();
        }
        changed
    }
}

/// An entry's share of a stream's digest.
fn entry_hash(id: StreamId, e: Entry<'_>) -> u64 {
    use std::hash::BuildHasher;
    foldhash::fast::FixedState::with_seed(0x57e4_e471).hash_one((id, e.version, e.fields))
}

/// A deleted ID's share of a stream's digest.
fn deleted_hash(id: StreamId, v: Version) -> u64 {
    use std::hash::BuildHasher;
    foldhash::fast::FixedState::with_seed(0xde1e_7ed0).hash_one((id, v))
}

#[path = "stream_codec.rs"]
mod codec;
#[path = "stream_diff.rs"]
mod diff;
pub use codec::{GroupParts, Parts};

#[path = "stream_log.rs"]
pub mod log;

#[path = "stream_group.rs"]
mod group;

#[cfg(test)]
#[path = "stream_tests.rs"]
mod tests;

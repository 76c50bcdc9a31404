//! The add-wins map of counters-or-registers: what a Redis hash holds.
//!
//! Each field has a [`Presence`] (add-wins, as a set member) and a
//! [`Counter`] value: `HSET` writes the field's base and adds a dot,
//! `HINCRBY` raises the field's tally (and adds a dot), `HDEL` removes the
//! adds it has seen. So `HSET`s of different fields in different regions
//! all stay, an `HSET` or `HINCRBY` concurrent with an `HDEL` (or `DEL`)
//! of the field wins, and concurrent `HINCRBY`s all count. A field that
//! is removed keeps its counter (a concurrent `HINCRBY` still merges into
//! it); whoever adds the field again sets its base over what it had seen
//! (see [`crate::counter`]).

use bytes::Bytes;

use crate::counter::Counter;
use crate::orset::{digest_of, entry_digest, Map, Peak};
use crate::packed::Entries;
use crate::{Crdt, Elem, Presence, Ts, Version};

/// Field–value pairs packed in one buffer: an `HGETALL`'s answer. Read
/// as slices, so a reply is encoded without a reference count per field —
/// a `Bytes` sliced out of one buffer per field and value cost an atomic
/// increment and decrement each, a fifth of an `HGETALL` in the shard
/// (`cargo bench -p elsa-shard --bench ops`).
#[derive(Clone, Debug, Default)]
pub struct FieldValues {
    buf: Bytes,
    /// Per pair, where its field and its value end in `buf`; each starts
    /// where the one before it ends.
    ends: Vec<(usize, usize)>,
}

impl FieldValues {
    /// How many pairs.
    pub fn len(&self) -> usize {
        self.ends.len()
    }

    /// True when it holds no pair.
    pub fn is_empty(&self) -> bool {
        self.ends.is_empty()
    }

    /// The pairs, in order.
    pub fn iter(&self) -> impl ExactSizeIterator<Item = (&[u8], &[u8])> + '_ {
        let mut start = 0;
        self.ends.iter().map(move |&(mid, end)| {
            let pair = (&self.buf[start..mid], &self.buf[mid..end]);
            start = end;
            pair
        })
    }

    /// The pairs as `Bytes` (slices of the one buffer).
    pub fn to_vec(&self) -> Vec<(Bytes, Bytes)> {
        self.iter()
            .map(|(f, v)| (self.buf.slice_ref(f), self.buf.slice_ref(v)))
            .collect()
    }
}

impl<K: AsRef<[u8]>, V: AsRef<[u8]>> FromIterator<(K, V)> for FieldValues {
    fn from_iter<I: IntoIterator<Item = (K, V)>>(pairs: I) -> FieldValues {
        let mut buf = bytes::BytesMut::new();
        let mut ends = Vec::new();
        for (k, v) in pairs {
            buf.extend_from_slice(k.as_ref());
            let mid = buf.len();
            buf.extend_from_slice(v.as_ref());
            ends.push((mid, buf.len()));
        }
        FieldValues {
            buf: buf.freeze(),
            ends,
        }
    }
}

impl PartialEq for FieldValues {
    fn eq(&self, other: &Self) -> bool {
        self.iter().eq(other.iter())
    }
}

impl Eq for FieldValues {}

/// One field: whether it is in the hash, and its value.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct Field {
    pub(crate) presence: Presence,
    pub(crate) value: Counter,
}

impl crate::orset::Shows for Field {
    fn shows(&self) -> bool {
        self.is_live()
    }
}

impl Field {
    /// True while the field is in the hash.
    pub fn is_live(&self) -> bool {
        self.presence.is_live()
    }

    /// Its value, when live.
    pub fn value(&self) -> Option<Bytes> {
        if self.is_live() {
            self.value.value(0)
        } else {
            None
        }
    }
}

impl Crdt for Field {
    fn merge(&mut self, other: Field) -> bool {
        self.presence.merge(other.presence) | self.value.merge(other.value)
    }
}

/// An add-wins map of fields (see the module doc).
#[derive(Clone, Debug, Default)]
pub struct OrMap {
    /// Packed while small (see `crate::packed`).
    pub(crate) fields: Entries<Field>,
    pub(crate) live: usize,
    pub(crate) newest: Version,
    /// XOR of every field's digest (see `OrSet`'s).
    pub(crate) digest: u64,
    /// Its history, for `OBJECT ENCODING` (not state).
    pub(crate) peak: Peak,
}

impl PartialEq for OrMap {
    fn eq(&self, other: &Self) -> bool {
        self.newest == other.newest && self.fields == other.fields
    }
}

impl Eq for OrMap {}

impl OrMap {
    /// The value of `field`, when it is in the hash.
    pub fn get(&self, field: &[u8]) -> Option<Bytes> {
        self.fields.get(field).and_then(|f| f.value())
    }

    /// True when `field` is in the hash.
    pub fn contains(&self, field: &[u8]) -> bool {
        self.fields.get(field).is_some_and(|f| f.is_live())
    }

    /// True when `field` has an entry, live or removed.
    pub fn has_field(&self, field: &[u8]) -> bool {
        self.fields.contains_key(field)
    }

    /// Fields in the hash.
    pub fn len(&self) -> usize {
        self.live
    }

    /// True when no field is in the hash.
    pub fn is_empty(&self) -> bool {
        self.live == 0
    }

    /// The live fields and their values, in no particular order.
    pub fn iter(&self) -> impl Iterator<Item = (&[u8], Bytes)> + '_ {
        self.fields
            .iter()
            .filter_map(|(f, x)| x.value().map(|v| (f, v)))
    }

    /// [`OrMap::iter`]'s fields and values, packed in one buffer: one
    /// allocation for a whole `HGETALL` rather than two per field.
    pub fn pairs(&self) -> FieldValues {
        let room: usize = self
            .fields
            .iter()
            .map(|(f, x)| f.len() + x.value.base_value().map_or(20, <[u8]>::len))
            .sum();
        let mut buf = bytes::BytesMut::with_capacity(room);
        let mut ends = Vec::with_capacity(self.len());
        for (f, x) in self.fields.iter().filter(|(_, x)| x.is_live()) {
            let start = buf.len();
            buf.extend_from_slice(f);
            let mid = buf.len();
            if x.value.value_into(0, &mut buf) {
                ends.push((mid, buf.len()));
            } else {
                buf.truncate(start);
            }
        }
        FieldValues {
            buf: buf.freeze(),
            ends,
        }
    }

    /// Entries kept, removed fields included (for memory accounting).
    pub fn entries(&self) -> usize {
        self.fields.len()
    }

    /// True while the fields are packed in one buffer (see
    /// `crate::packed`), and its bytes.
    pub fn packed_bytes(&self) -> Option<usize> {
        self.fields.packed().map(|p| p.heap_bytes())
    }

    /// The newest write this state holds.
    pub fn newest(&self) -> Version {
        self.newest
    }

    /// The delta of `HSET field value` as write `dot` (the value copied
    /// once, into the field).
    pub fn set(&self, field: &[u8], value: &[u8], start_ts: Ts, dot: Version) -> OrMap {
        let current = self.fields.get(field);
        let value = current
            .as_deref()
            .map(|f| &f.value)
            .unwrap_or(&Counter::default())
            .set_elem(Some(Elem::new(value)), None, start_ts, dot);
        self.single(
            Elem::new(field),
            Field {
                presence: Presence::added(dot),
                value,
            },
            dot,
        )
    }

    /// The delta of `HINCRBY field by` as write `dot`, and the new value;
    /// Redis's error when the value is not an integer or would overflow.
    pub fn incr_by(
        &self,
        field: &[u8],
        by: i64,
        start_ts: Ts,
        dot: Version,
    ) -> Result<(i64, OrMap), &'static str> {
        let current = self.fields.get(field).unwrap_or_default();
        let mut value = Counter::default();
        let base = if current.is_live() {
            current.value.clone()
        } else {
            // Not in the hash: it counts from zero, whatever it held.
            let reset = current.value.set(None, None, start_ts, dot);
            value.merge(reset.clone());
            let mut v = current.value.clone();
            v.merge(reset);
            v
        };
        let (n, delta) = base.incr_by(by, start_ts, dot, 0)?;
        value.merge(delta);
        Ok((
            n,
            self.single(
                Elem::new(field),
                Field {
                    presence: Presence::added(dot),
                    value,
                },
                dot,
            ),
        ))
    }

    /// The delta of `HDEL field` as write `dot`, or `None` when it is not
    /// in the hash.
    pub fn remove(&self, field: &[u8], dot: Version) -> Option<OrMap> {
        let f = self.fields.get(field).filter(|f| f.is_live())?;
        Some(self.single(
            Elem::new(field),
            Field {
                presence: f.presence.removal(dot),
                value: Counter::default(),
            },
            dot,
        ))
    }

    /// The delta of removing every field as write `dot` (`DEL`).
    pub fn clear(&self, dot: Version) -> OrMap {
        let mut fields = Map::default();
        for (name, f) in self.fields.iter().filter(|(_, f)| f.is_live()) {
            fields.insert(
                Elem::new(name),
                Field {
                    presence: f.presence.removal(dot),
                    value: Counter::default(),
                },
            );
        }
        OrMap {
            newest: dot,
            digest: digest_of(&fields),
            fields: Entries::from_map(fields),
            ..OrMap::default()
        }
    }

    fn single(&self, name: Elem, f: Field, dot: Version) -> OrMap {
        let mut fields = Map::default();
        let live = usize::from(f.is_live());
        let digest = entry_digest(&name, &f);
        fields.insert(name, f);
        OrMap {
            fields: Entries::from_map(fields),
            live,
            newest: dot,
            digest,
            peak: Peak::default(),
        }
    }

    /// Drops everything written at or below `floor` (a write of another
    /// type replaced the key then), values included; true if anything
    /// changed.
    pub fn drop_through(&mut self, floor: Version) -> bool {
        if self.newest <= floor && self.fields.is_empty() {
            return false;
        }
        let mut changed = false;
        let fields = self.fields.full_mut();
        fields.retain(|_, f| {
            changed |= f.presence.drop_through(floor) | f.value.drop_through(floor);
            !(f.presence.is_empty() && f.value == Counter::default())
        });
        if changed {
            self.live = fields.values().filter(|f| f.is_live()).count();
            self.digest = digest_of(fields);
            self.peak.after(Peak::default(), self.live);
        }
        self.fields.settle();
        changed
    }

    /// A digest of the whole state, kept current (see `OrSet::digest`).
    pub fn digest(&self) -> u64 {
        self.digest ^ crate::codec::version_digest(self.newest)
    }

    /// What it has held since it last emptied (see [`Peak`]).
    pub fn peak(&self) -> Peak {
        self.peak
    }

    /// Marks a delta as bringing a field or value Redis would not pack.
    pub fn mark_wide(&mut self) {
        self.peak.wide = true;
    }

    /// True when it holds no field, not even a removed one.
    pub fn has_no_entries(&self) -> bool {
        self.fields.is_empty()
    }

    /// Forgets removes older than `horizon` and fields with nothing newer
    /// left; answers how many fields went.
    pub fn collect(&mut self, horizon: Version) -> usize {
        let fields = self.fields.full_mut();
        let before = fields.len();
        fields.retain(|_, f| {
            f.presence.collect_removes(horizon);
            !(f.presence.is_empty() && f.value.newest() < horizon)
        });
        self.digest = digest_of(fields);
        let gone = before - fields.len();
        self.fields.settle();
        gone
    }

    /// Packs the fields when they fit (see `crate::packed`).
    pub(crate) fn settle(&mut self) {
        self.fields.settle();
    }
}

impl Crdt for OrMap {
    fn merge(&mut self, other: OrMap) -> bool {
        let mut changed = false;
        if other.newest > self.newest {
            self.newest = other.newest;
            changed = true;
        }
        changed |= self
            .fields
            .merge_in(other.fields, &mut self.live, &mut self.digest);
        self.peak.after(other.peak, self.live);
        changed
    }
}

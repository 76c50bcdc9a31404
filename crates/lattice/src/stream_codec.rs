//! A stream's bytes, digest, size and re-stamped copy: what the key's
//! codec (`crate::codec`), anti-entropy, `MEMORY USAGE` and `COPY` need
//! of [`Stream`].
//!
//! ```text
//! stream:  [n u32] n × (id version [k u32] k × ([len u32][field] [len u32][value]))
//!          [m u32] m × (id version)                       deleted IDs
//!          [t u32] t × (id version)                       trims
//!          version id                                     last ID
//!          [a u32] a × ([origin u32][count u64] version)  entries added
//!          version [offset i64]                           ENTRIESADDED
//!          version id                                     max deleted ID
//!          version id                                     greatest trimmed ID
//!          [g u32] g × ([len u32][name] group)
//! group:   version(created) [0 | 1 version(destroyed)]
//!          version(epoch) id [read u64]
//!          [d u32] d × (id version [len u32][consumer] [at u64][count u64])
//!          [a u32] a × (id version)
//!          [c u32] c × ([len u32][name] version [live u8] [seen u64][active u64])
//! id:      [ms u64][seq u64]
//! ```
//!
//! Decoding checks every count against the bytes left and refuses a
//! duplicate ID or name; the trims are rebuilt through the staircase's
//! own insert, and the digest recomputed, so a forged frame cannot make a
//! state whose merge misbehaves.

use std::collections::BTreeMap;

use bytes::{Buf, BufMut, Bytes};

use super::{deleted_hash, entry_hash, Consumer, Delivery, Group, Put, Reg, Stream, StreamId};
use crate::codec::{get_bytes, get_count, get_u8, get_version, put_bytes, put_version};
use crate::stream_fields::Fields;
use crate::{Elem, Version};

/// The smallest encoding of an ID and a version.
const ID_VERSION: usize = 16 + 12;

fn put_id(out: &mut Vec<u8>, id: StreamId) {
    out.put_u64_le(id.ms);
    out.put_u64_le(id.seq);
}

fn get_u64(buf: &mut Bytes) -> Option<u64> {
    (buf.remaining() >= 8).then(|| buf.get_u64_le())
}

fn get_id(buf: &mut Bytes) -> Option<StreamId> {
    let ms = get_u64(buf)?;
    Some(StreamId::new(ms, get_u64(buf)?))
}

fn put_id_reg(out: &mut Vec<u8>, r: &Reg<StreamId>) {
    put_version(out, r.version);
    put_id(out, r.value);
}

fn get_id_reg(buf: &mut Bytes) -> Option<Reg<StreamId>> {
    let version = get_version(buf)?;
    Some(Reg {
        version,
        value: get_id(buf)?,
    })
}

fn get_elem(buf: &mut Bytes) -> Option<Elem> {
    get_bytes(buf).map(|b| Elem::new(&b))
}

impl Stream {
    /// Appends the stream's encoding (see the module doc).
    pub(crate) fn encode(&self, out: &mut Vec<u8>) {
        out.put_u32_le(self.entries.len() as u32);
        for (id, e) in self.entries.iter() {
            put_id(out, id);
            put_version(out, e.version);
            out.put_u32_le(e.fields.len() as u32);
            for (f, v) in e.fields.iter() {
                put_bytes(out, f);
                put_bytes(out, v);
            }
        }
        for set in [&self.deleted] {
            out.put_u32_le(set.len() as u32);
            for (id, v) in set {
                put_id(out, *id);
                put_version(out, *v);
            }
        }
        out.put_u32_le(self.trims.len() as u32);
        for (id, v) in &self.trims {
            put_id(out, *id);
            put_version(out, *v);
        }
        put_id_reg(out, &self.last);
        out.put_u32_le(self.added.len() as u32);
        for (origin, (n, v)) in &self.added {
            out.put_u32_le(*origin);
            out.put_u64_le(*n);
            put_version(out, *v);
        }
        put_version(out, self.added_offset.version);
        out.put_i64_le(self.added_offset.value);
        put_id_reg(out, &self.max_deleted);
        put_id_reg(out, &self.trimmed);
        out.put_u32_le(self.groups.len() as u32);
        for (name, g) in &self.groups {
            put_bytes(out, name);
            put_version(out, g.created);
            match g.destroyed {
                Some(v) => {
                    out.put_u8(1);
                    put_version(out, v);
                }
                None => out.put_u8(0),
            }
            put_version(out, g.delivered.0);
            put_id(out, g.delivered.1);
            out.put_u64_le(g.delivered.2);
            out.put_u32_le(g.deliveries.len() as u32);
            for (id, d) in &g.deliveries {
                put_id(out, *id);
                put_version(out, d.version);
                put_bytes(out, &d.consumer);
                out.put_u64_le(d.at_ms);
                out.put_u64_le(d.count);
            }
            out.put_u32_le(g.acks.len() as u32);
            for (id, v) in &g.acks {
                put_id(out, *id);
                put_version(out, *v);
            }
            out.put_u32_le(g.consumers.len() as u32);
            for (name, c) in &g.consumers {
                put_bytes(out, name);
                put_version(out, c.live.version);
                out.put_u8(u8::from(c.live.value));
                out.put_u64_le(c.seen_ms);
                out.put_u64_le(c.active_ms);
            }
        }
    }

    /// Decodes what [`Stream::encode`] wrote, or `None`.
    pub(crate) fn decode(buf: &mut Bytes) -> Option<Stream> {
        let mut s = Stream::default();
        let n = get_count(buf, ID_VERSION + 4)?;
        for _ in 0..n {
            let id = get_id(buf)?;
            let version = get_version(buf)?;
            let k = get_count(buf, 8)?;
            let mut pairs = Vec::with_capacity(k);
            for _ in 0..k {
                let f = get_bytes(buf)?;
                pairs.push((f, get_bytes(buf)?));
            }
            let fields = Fields::new(pairs.iter().map(|(f, v)| (&f[..], &v[..])));
            if s.entries.put(id, fields.as_ref(), version) != Put::Added {
                return None;
            }
        }
        let m = get_count(buf, ID_VERSION)?;
        for _ in 0..m {
            let id = get_id(buf)?;
            if s.deleted.insert(id, get_version(buf)?).is_some() {
                return None;
            }
        }
        let t = get_count(buf, ID_VERSION)?;
        let mut trims = Vec::with_capacity(t);
        for _ in 0..t {
            let id = get_id(buf)?;
            trims.push((id, get_version(buf)?));
        }
        s.last = get_id_reg(buf)?;
        let a = get_count(buf, 4 + 8 + 12)?;
        for _ in 0..a {
            let origin = buf.remaining().ge(&4).then(|| buf.get_u32_le())?;
            let count = get_u64(buf)?;
            if s.added.insert(origin, (count, get_version(buf)?)).is_some() {
                return None;
            }
        }
        let version = get_version(buf)?;
        s.added_offset = Reg {
            version,
            value: get_u64(buf)? as i64,
        };
        s.max_deleted = get_id_reg(buf)?;
        s.trimmed = get_id_reg(buf)?;
        let g = get_count(buf, 4 + 12 + 1 + 12 + 16 + 8 + 12)?;
        for _ in 0..g {
            let name = get_elem(buf)?;
            let group = decode_group(buf)?;
            if s.groups.insert(name, group).is_some() {
                return None;
            }
        }
        for t in trims {
            s.add_trim(t);
        }
        s.settle();
        s.recount();
        Some(s)
    }

    /// The XOR of every held entry's and deleted ID's share of the digest
    /// (after a change that touched many).
    pub(crate) fn held_digest(&self) -> u64 {
        let entries = self.entries.iter().map(|(id, e)| entry_hash(id, e));
        let deleted = self.deleted.iter().map(|(id, v)| deleted_hash(*id, *v));
        entries.chain(deleted).fold(0, |d, h| d ^ h)
    }

    /// A digest of the whole state: equal states, equal digests. The log's
    /// share is kept current; the rest (trims, counters, groups) is small
    /// and hashed here.
    pub fn digest(&self) -> u64 {
        use std::hash::BuildHasher;
        let rest = foldhash::fast::FixedState::with_seed(0x57a7_e000).hash_one((
            &self.trims,
            self.last,
            &self.added,
            self.added_offset,
            self.max_deleted,
            self.trimmed,
            self.groups
                .iter()
                .map(|(n, g)| (n, g.digest_share()))
                .collect::<Vec<_>>(),
        ));
        self.digest ^ rest
    }

    /// Approximate heap bytes the stream owns: each entry's node share in
    /// its map, its pairs and what they own, and the groups' bookkeeping.
    pub fn heap_bytes(&self) -> usize {
        const NODE: usize = 16;
        let entries = self.entries.heap_bytes();
        let deleted = self.deleted.len() * (NODE + std::mem::size_of::<(StreamId, Version)>());
        let groups: usize = self
            .groups
            .values()
            .map(|g| {
                std::mem::size_of::<(Elem, Group)>()
                    + g.deliveries.len() * (NODE + std::mem::size_of::<(StreamId, Delivery)>())
                    + g.acks.len() * (NODE + std::mem::size_of::<(StreamId, Version)>())
                    + g.consumers.len() * (NODE + std::mem::size_of::<(Elem, Consumer)>())
            })
            .sum();
        entries + deleted + groups + self.trims.capacity() * 28
    }

    /// What the stream shows, every part written as `dot`: another key's
    /// stream copied here (`COPY`, `RENAME`, `RESTORE`). Entries keep their
    /// IDs; what is deleted or trimmed is left out (the key's floor forgets
    /// what this key held, so nothing older shows through).
    pub fn restamped(&self, dot: Version) -> Stream {
        let mut s = Stream::default();
        for (id, e) in self.entries() {
            s.entries.put(id, e.fields, dot);
        }
        s.last = Reg {
            version: dot,
            value: self.last_id(),
        };
        s.added.insert(dot.origin, (0, dot));
        s.added_offset = Reg {
            version: dot,
            value: self.entries_added() as i64,
        };
        s.max_deleted = Reg {
            version: dot,
            value: self.max_deleted_id(),
        };
        for (name, g) in self.groups() {
            let (last, read) = g.last_delivered();
            let mut copy = Group {
                created: dot,
                destroyed: None,
                delivered: (dot, last, read),
                ..Group::default()
            };
            for (id, d) in g.pending() {
                copy.deliveries.insert(
                    id,
                    Delivery {
                        version: dot,
                        ..d.clone()
                    },
                );
            }
            for (cname, c) in g.consumers() {
                copy.consumers.insert(
                    cname.clone(),
                    Consumer {
                        live: Reg {
                            version: dot,
                            value: true,
                        },
                        ..c.clone()
                    },
                );
            }
            copy.digest = copy.items_digest();
            s.groups.insert(name.clone(), copy);
        }
        s.recount();
        s
    }
}

/// A stream as Redis's `DUMP` carries it: what [`Stream::from_parts`]
/// builds and `DUMP` is written from.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Parts {
    /// The entries, in rising ID order.
    pub entries: Vec<(StreamId, Fields)>,
    /// `last-generated-id`.
    pub last: StreamId,
    /// `entries-added`.
    pub entries_added: u64,
    /// `max-deleted-entry-id`.
    pub max_deleted: StreamId,
    /// The consumer groups.
    pub groups: Vec<GroupParts>,
}

/// A consumer group as [`Parts`] carries it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct GroupParts {
    /// Its name.
    pub name: Elem,
    /// `last-delivered-id`.
    pub last: StreamId,
    /// `entries-read` ([`super::UNKNOWN_READ`] when unknown).
    pub read: u64,
    /// Pending entries: ID, consumer, delivery time (unix ms), count.
    pub pending: Vec<(StreamId, Elem, u64, u64)>,
    /// Consumers: name, seen time and active time (unix ms).
    pub consumers: Vec<(Elem, u64, u64)>,
}

impl Stream {
    /// What the stream shows, as [`Parts`] (DUMP). A pending entry whose
    /// consumer is gone (deleted in one region while another delivered to
    /// it) brings its consumer back, seen when it was delivered: Redis's
    /// format gives every pending entry a consumer.
    pub fn to_parts(&self) -> Parts {
        Parts {
            entries: self
                .entries()
                .map(|(id, e)| (id, e.fields.into()))
                .collect(),
            last: self.last_id(),
            entries_added: self.entries_added(),
            max_deleted: self.max_deleted_id(),
            groups: self.group_parts(),
        }
    }

    /// The groups as [`Parts`] has them.
    pub(super) fn group_parts(&self) -> Vec<GroupParts> {
        self.groups()
            .map(|(name, g)| {
                let (last, read) = g.last_delivered();
                let mut consumers: BTreeMap<Elem, (u64, u64)> = g
                    .consumers()
                    .map(|(n, c)| (n.clone(), (c.seen_ms, c.active_ms)))
                    .collect();
                let pending = g
                    .pending()
                    .map(|(id, d)| {
                        consumers
                            .entry(d.consumer.clone())
                            .or_insert((d.at_ms, d.at_ms));
                        (id, d.consumer.clone(), d.at_ms, d.count)
                    })
                    .collect();
                GroupParts {
                    name: name.clone(),
                    last,
                    read,
                    pending,
                    consumers: consumers.into_iter().map(|(n, (s, a))| (n, s, a)).collect(),
                }
            })
            .collect()
    }

    /// The stream `parts` describe, every part written as `dot` (RESTORE;
    /// the key then takes it as `COPY` does). None when an ID or a name
    /// comes twice, or the entries are not in rising order.
    pub fn from_parts(parts: Parts, dot: Version) -> Option<Stream> {
        let mut s = Stream::default();
        let mut prev = None;
        for (id, fields) in &parts.entries {
            if prev.is_some_and(|p| p >= *id) {
                return None;
            }
            prev = Some(*id);
            s.entries.put(*id, fields.as_ref(), dot);
        }
        s.last = Reg {
            version: dot,
            value: parts.last,
        };
        s.added.insert(dot.origin, (0, dot));
        s.added_offset = Reg {
            version: dot,
            value: i64::try_from(parts.entries_added).unwrap_or(i64::MAX),
        };
        s.max_deleted = Reg {
            version: dot,
            value: parts.max_deleted,
        };
        for g in parts.groups {
            let mut group = Group {
                created: dot,
                destroyed: None,
                delivered: (dot, g.last, g.read),
                ..Group::default()
            };
            for (id, consumer, at_ms, count) in g.pending {
                let d = Delivery {
                    version: dot,
                    consumer,
                    at_ms,
                    count,
                };
                if group.deliveries.insert(id, d).is_some() {
                    return None;
                }
            }
            for (name, seen_ms, active_ms) in g.consumers {
                let c = Consumer {
                    live: Reg {
                        version: dot,
                        value: true,
                    },
                    seen_ms,
                    active_ms,
                };
                if group.consumers.insert(name, c).is_some() {
                    return None;
                }
            }
            group.digest = group.items_digest();
            if s.groups.insert(g.name, group).is_some() {
                return None;
            }
        }
        s.recount();
        Some(s)
    }
}

fn decode_group(buf: &mut Bytes) -> Option<Group> {
    let created = get_version(buf)?;
    let destroyed = match get_u8(buf)? {
        0 => None,
        1 => Some(get_version(buf)?),
        _ => return None,
    };
    let epoch = get_version(buf)?;
    let last = get_id(buf)?;
    let read = get_u64(buf)?;
    let mut g = Group {
        created,
        destroyed,
        delivered: (epoch, last, read),
        deliveries: BTreeMap::new(),
        acks: BTreeMap::new(),
        consumers: BTreeMap::new(),
        digest: 0,
    };
    let d = get_count(buf, ID_VERSION + 4 + 16)?;
    for _ in 0..d {
        let id = get_id(buf)?;
        let version = get_version(buf)?;
        let consumer = get_elem(buf)?;
        let at_ms = get_u64(buf)?;
        let count = get_u64(buf)?;
        let d = Delivery {
            version,
            consumer,
            at_ms,
            count,
        };
        if g.deliveries.insert(id, d).is_some() {
            return None;
        }
    }
    let a = get_count(buf, ID_VERSION)?;
    for _ in 0..a {
        let id = get_id(buf)?;
        if g.acks.insert(id, get_version(buf)?).is_some() {
            return None;
        }
    }
    let c = get_count(buf, 4 + 12 + 1 + 16)?;
    for _ in 0..c {
        let name = get_elem(buf)?;
        let version = get_version(buf)?;
        let live = match get_u8(buf)? {
            0 => false,
            1 => true,
            _ => return None,
        };
        let seen_ms = get_u64(buf)?;
        let active_ms = get_u64(buf)?;
        let c = Consumer {
            live: Reg {
                version,
                value: live,
            },
            seen_ms,
            active_ms,
        };
        if g.consumers.insert(name, c).is_some() {
            return None;
        }
    }
    g.digest = g.items_digest();
    Some(g)
}

//! A stream in a DUMP payload: Redis 7.0's `RDB_TYPE_STREAM_LISTPACKS_2`
//! (`rdb.c` `rdbSaveObject`/`rdbLoadObject`, `t_stream.c`
//! `streamAppendItem`), and Redis 5–6's `RDB_TYPE_STREAM_LISTPACKS` read.
//!
//! ```text
//! stream: [nodes len] nodes × ([16-byte master ID, big end first] [listpack])
//!         [length len] [last ms len][last seq len]
//!         (v2) [first ms][first seq] [max deleted ms][max deleted seq] [entries added]
//!         [groups len] groups × ([name] [last ms][last seq] (v2)[entries read]
//!                                [pel len] pel × ([16-byte ID] [time u64 LE] [count len])
//!                                [consumers len] consumers × ([name] [seen u64 LE]
//!                                                [pel len] pel × [16-byte ID]))
//! node:   count deleted n field×n 0, then per entry
//!         flags ms-diff seq-diff [n field value … | value …] lp-count
//! ```
//!
//! An entry whose fields are the node's master fields (the node's first
//! entry's) carries only its values (flag 2); a deleted one (flag 1) is
//! skipped when read. Written as Redis's appends would write the entries
//! shown: a new node when the last holds `stream-node-max-entries` or its
//! bytes and the entry's would reach `stream-node-max-bytes`, strings that
//! read as integers as integers. The listpacks go uncompressed (Redis
//! compresses them with LZF when that saves bytes; both forms load).

use bytes::Bytes;
use elsa_lattice::stream::{GroupParts, Parts, StreamId, UNKNOWN_READ};
use elsa_lattice::stream_fields::Fields;
use elsa_lattice::Elem;

use elsa_shard::ops::streams::listpack::{node_max_bytes, Lp};

use super::{listpack, put_len, put_string, Reader};

/// Redis 5–6's stream (no first ID, tombstone or counters).
pub(super) const T_STREAM: u8 = 15;
/// Redis 7.0's.
pub(super) const T_STREAM_2: u8 = 19;

const FLAG_DELETED: i64 = 1;
const FLAG_SAME_FIELDS: i64 = 2;

fn raw_id(out: &mut Vec<u8>, id: StreamId) {
    out.extend_from_slice(&id.ms.to_be_bytes());
    out.extend_from_slice(&id.seq.to_be_bytes());
}

/// One radix-tree node being filled: its master ID and fields, and its
/// listpack's elements so far, encoded (the count first, rewritten at the
/// end).
struct Node {
    master: StreamId,
    fields: Vec<Vec<u8>>,
    count: i64,
    /// The elements after the count, and how many there are with it.
    body: Vec<u8>,
    elements: usize,
}

impl Node {
    /// The listpack's size now (`lpBytes`): header, elements, end byte.
    fn bytes(&self) -> usize {
        let mut count = Vec::new();
        Lp::Int(self.count).encode(&mut count);
        6 + count.len() + self.body.len() + 1
    }

    /// Writes the node: its key, then its listpack (header: total bytes,
    /// element count or 65535 when too many to say).
    fn finish(self, out: &mut Vec<u8>) {
        let mut key = Vec::with_capacity(16);
        raw_id(&mut key, self.master);
        put_string(out, &key);
        let mut elems = Vec::new();
        Lp::Int(self.count).encode(&mut elems);
        elems.extend_from_slice(&self.body);
        let mut lp = Vec::with_capacity(elems.len() + 7);
        lp.extend_from_slice(&((elems.len() + 7) as u32).to_le_bytes());
        lp.extend_from_slice(
            &u16::try_from(self.elements)
                .unwrap_or(u16::MAX)
                .to_le_bytes(),
        );
        lp.extend_from_slice(&elems);
        lp.push(0xff);
        put_string(out, &lp);
    }
}

/// Writes the body of a `RDB_TYPE_STREAM_LISTPACKS_2` object.
pub(super) fn put(out: &mut Vec<u8>, p: &Parts) {
    let max_entries = elsa_shard::ops::streams::parse::node_entries();
    let max_bytes = node_max_bytes();
    let mut nodes: Vec<Node> = Vec::new();
    for (id, fields) in &p.entries {
        let pairs: Vec<(&[u8], &[u8])> = fields.iter().collect();
        let total: usize = pairs.iter().map(|(f, v)| f.len() + v.len()).sum();
        let full = nodes
            .last()
            .is_none_or(|n| n.bytes() + total >= max_bytes || n.count as u64 >= max_entries);
        if full {
            let mut body = Vec::new();
            Lp::Int(0).encode(&mut body);
            Lp::Int(pairs.len() as i64).encode(&mut body);
            for (f, _) in &pairs {
                Lp::Str(f).encode(&mut body);
            }
            Lp::Int(0).encode(&mut body);
            nodes.push(Node {
                master: *id,
                fields: pairs.iter().map(|(f, _)| f.to_vec()).collect(),
                count: 0,
                body,
                elements: 4 + pairs.len(),
            });
        }
        let node = nodes.last_mut().expect("a node");
        let same = node.fields.len() == pairs.len()
            && node
                .fields
                .iter()
                .zip(&pairs)
                .all(|(a, (b, _))| a[..] == **b);
        let body = &mut node.body;
        Lp::Int(if same { FLAG_SAME_FIELDS } else { 0 }).encode(body);
        Lp::Int(id.ms.wrapping_sub(node.master.ms) as i64).encode(body);
        Lp::Int(id.seq.wrapping_sub(node.master.seq) as i64).encode(body);
        let mut n = 3 + pairs.len();
        if !same {
            Lp::Int(pairs.len() as i64).encode(body);
            n += pairs.len() + 1;
        }
        for (f, v) in &pairs {
            if !same {
                Lp::Str(f).encode(body);
            }
            Lp::Str(v).encode(body);
        }
        Lp::Int(n as i64).encode(body);
        node.count += 1;
        node.elements += n + 1;
    }
    put_len(out, nodes.len() as u64);
    for node in nodes {
        node.finish(out);
    }
    let first = p.entries.first().map_or(StreamId::MIN, |(id, _)| *id);
    put_len(out, p.entries.len() as u64);
    for id in [p.last, first, p.max_deleted] {
        put_len(out, id.ms);
        put_len(out, id.seq);
    }
    put_len(out, p.entries_added);
    let mut groups: Vec<&GroupParts> = p.groups.iter().collect();
    groups.sort_by(|a, b| a.name[..].cmp(&b.name[..]));
    put_len(out, groups.len() as u64);
    for g in groups {
        put_string(out, &g.name);
        put_len(out, g.last.ms);
        put_len(out, g.last.seq);
        put_len(out, g.read);
        let mut pending: Vec<&(StreamId, Elem, u64, u64)> = g.pending.iter().collect();
        pending.sort_by_key(|p| p.0);
        put_len(out, pending.len() as u64);
        for (id, _, at, count) in &pending {
            raw_id(out, *id);
            out.extend_from_slice(&at.to_le_bytes());
            put_len(out, *count);
        }
        let mut consumers: Vec<&(Elem, u64, u64)> = g.consumers.iter().collect();
        consumers.sort_by(|a, b| a.0[..].cmp(&b.0[..]));
        put_len(out, consumers.len() as u64);
        for (name, seen, _) in consumers {
            put_string(out, name);
            out.extend_from_slice(&seen.to_le_bytes());
            let mine: Vec<StreamId> = pending
                .iter()
                .filter(|p| p.1 == *name)
                .map(|p| p.0)
                .collect();
            put_len(out, mine.len() as u64);
            for id in mine {
                raw_id(out, id);
            }
        }
    }
}

fn int(e: &Bytes) -> Option<i64> {
    std::str::from_utf8(e).ok()?.parse().ok()
}

fn read_id(r: &mut Reader<'_>) -> Option<StreamId> {
    let b = r.bytes(16)?;
    let ms = u64::from_be_bytes(b[..8].try_into().ok()?);
    Some(StreamId::new(
        ms,
        u64::from_be_bytes(b[8..].try_into().ok()?),
    ))
}

fn read_u64_le(r: &mut Reader<'_>) -> Option<u64> {
    Some(u64::from_le_bytes(r.bytes(8)?.try_into().ok()?))
}

fn len_u64(r: &mut Reader<'_>) -> Option<u64> {
    r.len().map(|n| n as u64)
}

fn len_id(r: &mut Reader<'_>) -> Option<StreamId> {
    let ms = len_u64(r)?;
    Some(StreamId::new(ms, len_u64(r)?))
}

/// The entries one node holds (deleted ones left out).
fn node_entries(master: StreamId, lp: &[Bytes], out: &mut Vec<(StreamId, Fields)>) -> Option<()> {
    let count = int(lp.first()?)?;
    let deleted = int(lp.get(1)?)?;
    let nf = usize::try_from(int(lp.get(2)?)?).ok()?;
    let master_fields = lp.get(3..nf.checked_add(3)?)?;
    if int(lp.get(3 + nf)?)? != 0 {
        return None;
    }
    let mut at = 4 + nf;
    let mut seen = 0i64;
    while at < lp.len() {
        let flags = int(&lp[at])?;
        let ms = master.ms.wrapping_add(int(lp.get(at + 1)?)? as u64);
        let seq = master.seq.wrapping_add(int(lp.get(at + 2)?)? as u64);
        at += 3;
        let pairs: Vec<(&[u8], &[u8])> = if flags & FLAG_SAME_FIELDS != 0 {
            let values = lp.get(at..at.checked_add(nf)?)?;
            at += nf;
            master_fields
                .iter()
                .zip(values)
                .map(|(f, v)| (&f[..], &v[..]))
                .collect()
        } else {
            let n = usize::try_from(int(lp.get(at)?)?).ok()?;
            let end = n.checked_mul(2)?.checked_add(at + 1)?;
            let flat = lp.get(at + 1..end)?;
            at = end;
            flat.chunks(2).map(|c| (&c[0][..], &c[1][..])).collect()
        };
        at += 1; // lp-count
        if at > lp.len() {
            return None;
        }
        seen += 1;
        if flags & FLAG_DELETED == 0 {
            out.push((StreamId::new(ms, seq), Fields::new(pairs)));
        }
    }
    (Some(seen) == count.checked_add(deleted)).then_some(())
}

/// `streamEstimateDistanceFromFirstEverEntry`, for a group read from a
/// Redis 5–6 payload (no entries-read counter).
fn estimate(p: &Parts, id: StreamId) -> u64 {
    let (added, len) = (p.entries_added, p.entries.len() as u64);
    if added == 0 {
        return 0;
    }
    if (len == 0 && id <= p.last) || id == p.last {
        return added;
    }
    if id > p.last {
        return UNKNOWN_READ;
    }
    let first = p.entries.first().map_or(StreamId::MIN, |(id, _)| *id);
    if p.max_deleted == StreamId::MIN || p.max_deleted < first {
        if id < first {
            return added - len;
        } else if id == first {
            return added - len + 1;
        }
    }
    UNKNOWN_READ
}

/// Reads a stream object's body (after its type byte `ty`).
pub(super) fn read(r: &mut Reader<'_>, ty: u8) -> Option<Parts> {
    let mut p = Parts::default();
    let nodes = r.len()?;
    for _ in 0..nodes {
        let key = r.string()?;
        if key.len() != 16 {
            return None;
        }
        let master = read_id(&mut Reader { buf: &key, at: 0 })?;
        let lp = listpack(&r.string()?)?;
        if lp.is_empty() {
            return None;
        }
        node_entries(master, &lp, &mut p.entries)?;
    }
    p.entries.sort_by_key(|e| e.0);
    let length = len_u64(r)?;
    p.last = len_id(r)?;
    if ty == T_STREAM_2 {
        len_id(r)?; // the first ID: the first entry's
        p.max_deleted = len_id(r)?;
        p.entries_added = len_u64(r)?;
    } else {
        p.entries_added = length;
    }
    let groups = r.len()?;
    for _ in 0..groups {
        let name = Elem::new(&r.string()?);
        let last = len_id(r)?;
        let read = if ty == T_STREAM_2 {
            len_u64(r)?
        } else {
            estimate(&p, last)
        };
        let mut pending: Vec<(StreamId, Option<Elem>, u64, u64)> = Vec::new();
        for _ in 0..r.len()? {
            let id = read_id(r)?;
            let at = read_u64_le(r)?;
            pending.push((id, None, at, len_u64(r)?));
        }
        pending.sort_by_key(|p| p.0);
        if pending.windows(2).any(|w| w[0].0 == w[1].0) {
            return None;
        }
        let mut consumers = Vec::new();
        for _ in 0..r.len()? {
            let cname = Elem::new(&r.string()?);
            let seen = read_u64_le(r)?;
            for _ in 0..r.len()? {
                let id = read_id(r)?;
                let i = pending.binary_search_by_key(&id, |p| p.0).ok()?;
                if pending[i].1.replace(cname.clone()).is_some() {
                    return None;
                }
            }
            consumers.push((cname, seen, seen));
        }
        // Every pending entry has its consumer.
        let pending = pending
            .into_iter()
            .map(|(id, c, at, n)| Some((id, c?, at, n)))
            .collect::<Option<Vec<_>>>()?;
        p.groups.push(GroupParts {
            name,
            last,
            read,
            pending,
            consumers,
        });
    }
    Some(p)
}

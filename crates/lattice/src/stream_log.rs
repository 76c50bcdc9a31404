//! A stream's entries packed in chunks, as Redis packs them in listpack
//! nodes of a radix tree: the memory of a log of small entries (issue 46).
//!
//! A chunk holds up to [`MAX_ENTRIES`] entries in ID order (and takes
//! appends while under [`MAX_BYTES`], Redis's `stream-node-max-entries`
//! and `stream-node-max-bytes`), keyed in a `BTreeMap` by its first ID;
//! chunks never overlap, so the chunk of an ID is the one with the
//! greatest key at or below it. Each entry is written against the one
//! before it in its chunk:
//!
//! ```text
//! entry: [ms delta][seq zigzag delta][origin zigzag delta][commit ts zigzag delta]
//!        [fields len][fields]                     (varints; fields: stream_fields)
//! ```
//!
//! The first entry of a chunk is written against its key and the zero
//! version. An `XADD *` appends to the last chunk (a few bytes beside the
//! fields: ~40 bytes for three short pairs, Redis's 40); an entry that
//! lands inside a chunk (another region's, an explicit ID) rewrites that
//! chunk, split in two when it outgrows the limits. Reads decode a chunk
//! front to back; reading backwards decodes the chunk once into a queue.
//!
//! Chunks are shared (`Arc`) between copies of a log: a transaction's
//! copy of a stream costs a pointer per chunk, its writes copy the chunks
//! they change, and [`Log::diff`] finds what a commit changed by decoding
//! only the chunks the two logs do not share.
//!
//! Hand-written because it is one of Elsa's compact encodings: entries
//! carry a version beside Redis's fields, and no crate packs them.

use std::collections::{BTreeMap, VecDeque};
use std::ops::{Bound, RangeBounds};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use super::{entry_hash, StreamId};
use crate::packed::{get_ts, get_varint, put_ts, put_varint};
use crate::stream_fields::FieldsRef;
use crate::Version;

/// Most entries a chunk holds (Redis's `stream-node-max-entries`).
pub const MAX_ENTRIES: usize = 100;
/// A chunk takes no more appends once this big (Redis's
/// `stream-node-max-bytes`).
pub const MAX_BYTES: usize = 4096;

/// How many entries a chunk holds; 0 until first read.
static CHUNK_ENTRIES: AtomicUsize = AtomicUsize::new(0);

/// Sets how many entries a chunk holds from now on, 1 to [`MAX_ENTRIES`]
/// (the default; `ELSA_STREAM_CHUNK_ENTRIES` sets it for a process): the
/// property tests and the differential test cut small logs in many chunks
/// with it. Logs already built keep their chunks; every size reads the
/// same.
pub fn set_chunk_entries(n: usize) {
    CHUNK_ENTRIES.store(n.clamp(1, MAX_ENTRIES), Ordering::Relaxed);
}

fn chunk_entries() -> usize {
    match CHUNK_ENTRIES.load(Ordering::Relaxed) {
        0 => {
            let n = std::env::var("ELSA_STREAM_CHUNK_ENTRIES")
                .ok()
                .and_then(|v| v.parse().ok())
                .unwrap_or(MAX_ENTRIES);
            set_chunk_entries(n);
            chunk_entries()
        }
        n => n,
    }
}

/// One entry as held: its field/value pairs and the commit that wrote it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Entry<'a> {
    /// Field/value pairs, in the order given.
    pub fields: FieldsRef<'a>,
    /// Who wrote it (an ID taken twice keeps the larger).
    pub version: Version,
}

/// Up to [`MAX_ENTRIES`] entries, packed (see the module doc).
#[derive(Clone, Debug)]
struct Chunk {
    bytes: Vec<u8>,
    n: u32,
    /// Where the last entry starts, and its ID and version: what an
    /// append is written against, and a read from the back takes first
    /// (the newest entry, read by `XREADGROUP >` and `XREVRANGE … COUNT 1`).
    last_at: u32,
    last: StreamId,
    last_version: Version,
}

fn zigzag(d: i64) -> u64 {
    ((d << 1) ^ (d >> 63)) as u64
}

fn unzigzag(z: u64) -> i64 {
    ((z >> 1) as i64) ^ -((z & 1) as i64)
}

impl Chunk {
    /// An empty chunk whose first entry will be `first`.
    fn starting(first: StreamId) -> Chunk {
        Chunk {
            bytes: Vec::new(),
            n: 0,
            last_at: 0,
            last: first,
            last_version: Version::ZERO,
        }
    }

    fn has_room(&self) -> bool {
        (self.n as usize) < chunk_entries() && self.bytes.len() < MAX_BYTES
    }

    /// Appends an entry above every one held.
    fn push(&mut self, id: StreamId, fields: &[u8], version: Version) {
        let (prev, pv) = (self.last, self.last_version);
        self.last_at = self.bytes.len() as u32;
        let out = &mut self.bytes;
        put_varint(out, id.ms.wrapping_sub(prev.ms));
        put_varint(out, zigzag(id.seq.wrapping_sub(prev.seq) as i64));
        put_varint(
            out,
            zigzag(i64::from(version.origin) - i64::from(pv.origin)),
        );
        put_ts(out, version.commit_ts, pv.commit_ts);
        put_varint(out, fields.len() as u64);
        out.extend_from_slice(fields);
        self.n += 1;
        self.last = id;
        self.last_version = version;
        if !self.has_room() {
            self.bytes.shrink_to_fit();
        }
    }

    /// Its entries, front to back.
    fn cursor(&self, key: StreamId) -> Cursor<'_> {
        Cursor {
            bytes: &self.bytes,
            end: self.bytes.len(),
            at: 0,
            id: key,
            version: Version::ZERO,
        }
    }

    fn entries(&self, key: StreamId) -> ChunkIter<'_> {
        ChunkIter {
            cursor: self.cursor(key),
            queue: None,
            chunk: self,
        }
    }

    /// The last entry, read from where it starts (its ID and version are
    /// kept; the deltas before its fields are skipped).
    fn last_entry(&self) -> (StreamId, Entry<'_>) {
        let (b, at) = (&self.bytes[..], &mut (self.last_at as usize));
        for _ in 0..4 {
            get_varint(b, at);
        }
        let len = get_varint(b, at) as usize;
        let e = Entry {
            fields: FieldsRef::new(&b[*at..*at + len]),
            version: self.last_version,
        };
        (self.last, e)
    }
}

/// Decodes a chunk front to back.
struct Cursor<'a> {
    bytes: &'a [u8],
    /// Where its entries end (before an entry already read from the back).
    end: usize,
    at: usize,
    id: StreamId,
    version: Version,
}

impl<'a> Iterator for Cursor<'a> {
    type Item = (StreamId, Entry<'a>);

    fn next(&mut self) -> Option<Self::Item> {
        if self.at >= self.end {
            return None;
        }
        let (b, at) = (self.bytes, &mut self.at);
        let ms = self.id.ms.wrapping_add(get_varint(b, at));
        let seq = self.id.seq.wrapping_add(unzigzag(get_varint(b, at)) as u64);
        let origin = i64::from(self.version.origin) + unzigzag(get_varint(b, at));
        let commit_ts = get_ts(b, at, self.version.commit_ts);
        let len = get_varint(b, at) as usize;
        let fields = &b[*at..*at + len];
        *at += len;
        self.id = StreamId::new(ms, seq);
        self.version = Version {
            commit_ts,
            origin: origin as u32,
        };
        let e = Entry {
            fields: FieldsRef::new(fields),
            version: self.version,
        };
        Some((self.id, e))
    }
}

/// A chunk's entries both ways: forward lazily, backward the last entry
/// as kept, then from a queue decoded on the next step back.
struct ChunkIter<'a> {
    cursor: Cursor<'a>,
    queue: Option<VecDeque<(StreamId, Entry<'a>)>>,
    chunk: &'a Chunk,
}

impl<'a> Iterator for ChunkIter<'a> {
    type Item = (StreamId, Entry<'a>);

    fn next(&mut self) -> Option<Self::Item> {
        match &mut self.queue {
            Some(q) => q.pop_front(),
            None => self.cursor.next(),
        }
    }
}

impl DoubleEndedIterator for ChunkIter<'_> {
    fn next_back(&mut self) -> Option<Self::Item> {
        let last_at = self.chunk.last_at as usize;
        if self.queue.is_none() && self.cursor.end > last_at {
            // Not read from the back yet: the last entry, unless the front
            // has read it.
            self.cursor.end = last_at;
            return (self.cursor.at <= last_at && !self.chunk.bytes.is_empty())
                .then(|| self.chunk.last_entry());
        }
        let cursor = &mut self.cursor;
        self.queue
            .get_or_insert_with(|| cursor.collect())
            .pop_back()
    }
}

/// Which log of a [`Log::diff`] holds an entry at an ID, and what.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Side<'a> {
    /// Only this log.
    Mine(Entry<'a>),
    /// Only the other.
    Theirs(Entry<'a>),
    /// Both, different.
    Both(Entry<'a>, Entry<'a>),
}

/// What [`Log::put`] did.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Put {
    /// The ID was new.
    Added,
    /// It replaced the entry held, whose digest share this is.
    Replaced(u64),
    /// The entry held has the greater (version, fields): nothing changed.
    Kept,
}

/// A stream's entries by ID (see the module doc).
#[derive(Clone, Default)]
pub(crate) struct Log {
    chunks: BTreeMap<StreamId, Arc<Chunk>>,
    len: usize,
}

impl PartialEq for Log {
    fn eq(&self, other: &Log) -> bool {
        // Equal logs may be cut in chunks differently.
        self.len == other.len && self.iter().eq(other.iter())
    }
}

impl Eq for Log {}

impl std::fmt::Debug for Log {
    /// Each entry: its ID, the commit that wrote it and its pairs.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_map()
            .entries(self.iter().map(|(id, e)| {
                let pairs: Vec<String> = e
                    .fields
                    .iter()
                    .map(|(k, v)| format!("{}={}", k.escape_ascii(), v.escape_ascii()))
                    .collect();
                (
                    id.to_string(),
                    format!(
                        "{}@{} {}",
                        e.version.commit_ts,
                        e.version.origin,
                        pairs.join(" ")
                    ),
                )
            }))
            .finish()
    }
}

/// Rebuilds chunks from `entries` (in ID order): one, or two halves when
/// they outgrow a chunk.
fn build<'a>(entries: &[(StreamId, Entry<'a>)]) -> Vec<(StreamId, Arc<Chunk>)> {
    let bytes: usize = entries
        .iter()
        .map(|(_, e)| e.fields.bytes().len() + 8)
        .sum();
    let parts = if entries.len() > chunk_entries() || (entries.len() > 1 && bytes > MAX_BYTES) {
        2
    } else {
        1
    };
    let per = entries.len().div_ceil(parts).max(1);
    entries
        .chunks(per)
        .map(|part| {
            let key = part[0].0;
            let mut c = Chunk::starting(key);
            for (id, e) in part {
                c.push(*id, e.fields.bytes(), e.version);
            }
            c.bytes.shrink_to_fit();
            (key, Arc::new(c))
        })
        .collect()
}

impl Log {
    /// How many entries.
    pub fn len(&self) -> usize {
        self.len
    }

    /// The greatest ID held.
    pub fn last_id(&self) -> Option<StreamId> {
        self.chunks.values().next_back().map(|c| c.last)
    }

    /// Every entry, in ID order.
    pub fn iter(&self) -> impl DoubleEndedIterator<Item = (StreamId, Entry<'_>)> + '_ {
        self.range(..)
    }

    /// The entries with IDs in `r`, in ID order (empty when `r` is).
    pub fn range(
        &self,
        r: impl RangeBounds<StreamId>,
    ) -> impl DoubleEndedIterator<Item = (StreamId, Entry<'_>)> + '_ {
        let r = (r.start_bound().cloned(), r.end_bound().cloned());
        let start = match r.0 {
            Bound::Included(s) | Bound::Excluded(s) => s,
            Bound::Unbounded => StreamId::MIN,
        };
        // The chunk that may hold `start`: the greatest key at or below it.
        let from = self
            .chunks
            .range(..=start)
            .next_back()
            .map_or(StreamId::MIN, |(k, _)| *k);
        let empty = match r.1 {
            Bound::Included(end) => from > end || start > end,
            Bound::Excluded(end) => from >= end || start >= end,
            Bound::Unbounded => false,
        };
        let chunks = (!empty).then(|| self.chunks.range((Bound::Included(from), r.1)));
        chunks
            .into_iter()
            .flatten()
            .flat_map(|(k, c)| c.entries(*k))
            .filter(move |(id, _)| r.contains(id))
    }

    /// The entry `id`.
    pub fn get(&self, id: StreamId) -> Option<Entry<'_>> {
        let (k, c) = self.chunks.range(..=id).next_back()?;
        c.cursor(*k)
            .take_while(|(at, _)| *at <= id)
            .find(|(at, _)| *at == id)
            .map(|(_, e)| e)
    }

    /// True when `id` is held.
    pub fn contains(&self, id: StreamId) -> bool {
        self.get(id).is_some()
    }

    /// Puts the entry `id`, unless one held there has the greater
    /// (version, fields): the merge of two writes of one ID.
    pub fn put(&mut self, id: StreamId, fields: FieldsRef<'_>, version: Version) -> Put {
        // An append: above every entry, to the last chunk or a new one.
        if let Some(mut last) = self.chunks.last_entry() {
            if id > last.get().last {
                if last.get().has_room() {
                    Arc::make_mut(last.get_mut()).push(id, fields.bytes(), version);
                } else {
                    let mut c = Chunk::starting(id);
                    c.push(id, fields.bytes(), version);
                    self.chunks.insert(id, Arc::new(c));
                }
                self.len += 1;
                return Put::Added;
            }
        } else {
            let mut c = Chunk::starting(id);
            c.push(id, fields.bytes(), version);
            self.chunks.insert(id, Arc::new(c));
            self.len = 1;
            return Put::Added;
        }
        // Inside or before the chunks: the chunk at or below it, or the first.
        let key = match self.chunks.range(..=id).next_back() {
            Some((k, _)) => *k,
            None => *self.chunks.keys().next().expect("a chunk"),
        };
        let chunk = self.chunks.get_mut(&key).expect("the chunk");
        if id > chunk.last && chunk.has_room() {
            Arc::make_mut(chunk).push(id, fields.bytes(), version);
            self.len += 1;
            return Put::Added;
        }
        let chunk = self.chunks.remove(&key).expect("the chunk");
        let mut entries: Vec<(StreamId, Entry<'_>)> = chunk.cursor(key).collect();
        let new = Entry { fields, version };
        let at = entries.partition_point(|(k, _)| *k < id);
        let put = match entries.get(at) {
            Some((k, held)) if *k == id => {
                if (held.version, held.fields) >= (version, fields) {
                    Put::Kept
                } else {
                    let share = entry_hash(id, *held);
                    entries[at].1 = new;
                    Put::Replaced(share)
                }
            }
            _ => {
                entries.insert(at, (id, new));
                self.len += 1;
                Put::Added
            }
        };
        if put == Put::Kept {
            drop(entries);
            self.chunks.insert(key, chunk);
        } else {
            let rebuilt = build(&entries);
            drop(entries);
            self.chunks.extend(rebuilt);
        }
        put
    }

    /// Keeps the entries below `below` for which `keep` is true (called
    /// once on each, in ID order); the entries from `below` up are kept
    /// unvisited.
    pub fn retain_below(
        &mut self,
        below: Bound<StreamId>,
        mut keep: impl FnMut(StreamId, Entry<'_>) -> bool,
    ) {
        let keys: Vec<StreamId> = self
            .chunks
            .range((Bound::Unbounded, below))
            .map(|(k, _)| *k)
            .collect();
        let under = |id: StreamId| match below {
            Bound::Included(b) => id <= b,
            Bound::Excluded(b) => id < b,
            Bound::Unbounded => true,
        };
        for key in keys {
            let chunk = self.chunks.remove(&key).expect("a chunk");
            let entries: Vec<(StreamId, Entry<'_>)> = chunk.cursor(key).collect();
            let kept: Vec<(StreamId, Entry<'_>)> = entries
                .iter()
                .copied()
                .filter(|(id, e)| !under(*id) || keep(*id, *e))
                .collect();
            if kept.len() == entries.len() {
                drop((entries, kept));
                self.chunks.insert(key, chunk);
                continue;
            }
            self.len -= entries.len() - kept.len();
            if !kept.is_empty() {
                let rebuilt = build(&kept);
                drop((entries, kept));
                self.chunks.extend(rebuilt);
            }
        }
    }

    /// Approximate heap bytes: each chunk's node share in the map, its
    /// shared allocation (two counts and the chunk) and its buffer.
    pub fn heap_bytes(&self) -> usize {
        const NODE: usize = 16;
        let per_chunk = NODE
            + std::mem::size_of::<(StreamId, Arc<Chunk>)>()
            + 2 * std::mem::size_of::<usize>()
            + std::mem::size_of::<Chunk>();
        self.chunks
            .values()
            .map(|c| per_chunk + c.bytes.capacity())
            .sum()
    }

    /// Every ID at which this log and `other` hold different entries (or
    /// only one holds one), in ID order, with the entry each holds. Only
    /// the chunks the two do not share are decoded: a chunk shared under
    /// one key holds the same entries in both, and as chunks never
    /// overlap, every ID it spans is held alike or by neither.
    pub fn diff<'a>(&'a self, other: &'a Log) -> Vec<(StreamId, Side<'a>)> {
        let unshared = |log: &'a Log, of: &'a Log| {
            log.chunks
                .iter()
                .filter(move |(k, c)| !of.chunks.get(k).is_some_and(|o| Arc::ptr_eq(o, c)))
                .flat_map(|(k, c)| c.entries(*k))
                .peekable()
        };
        let (mut mine, mut theirs) = (unshared(self, other), unshared(other, self));
        let mut out = Vec::new();
        loop {
            let side = match (mine.peek(), theirs.peek()) {
                (None, None) => return out,
                (Some(m), Some(t)) if m.0 == t.0 => {
                    let (id, m, t) = (m.0, m.1, t.1);
                    mine.next();
                    theirs.next();
                    if (m.version, m.fields) == (t.version, t.fields) {
                        continue;
                    }
                    (id, Side::Both(m, t))
                }
                (Some(m), t) if t.is_none_or(|t| m.0 < t.0) => {
                    let m = *m;
                    mine.next();
                    (m.0, Side::Mine(m.1))
                }
                _ => {
                    let t = theirs.next().expect("an entry");
                    (t.0, Side::Theirs(t.1))
                }
            };
            out.push(side);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stream_fields::Fields;

    fn v(ts: u64, origin: u32) -> Version {
        Version {
            commit_ts: ts,
            origin,
        }
    }

    fn ids(log: &Log) -> Vec<StreamId> {
        log.iter().map(|(id, _)| id).collect()
    }

    #[test]
    fn entries_put_in_any_order_read_back_in_id_order_both_ways() {
        let mut log = Log::default();
        let mut want = Vec::new();
        // Interleaved: appends, inserts inside and before chunks.
        for i in 0..1000u64 {
            let id = StreamId::new((i * 7919) % 1000, (i % 3) << 32 | 5);
            let f = Fields::new([(&b"f"[..], format!("{i}").as_bytes())]);
            assert_eq!(
                log.put(id, f.as_ref(), v(i << 16, (i % 4) as u32)),
                Put::Added
            );
            want.push(id);
        }
        want.sort();
        assert_eq!(log.len(), 1000);
        assert_eq!(ids(&log), want);
        let back: Vec<StreamId> = log.iter().rev().map(|(id, _)| id).collect();
        assert_eq!(back, want.iter().rev().copied().collect::<Vec<_>>());
        for (i, id) in want.iter().enumerate().step_by(37) {
            let e = log.get(*id).expect("held");
            assert_eq!(e.fields.len(), 1);
            let from: Vec<StreamId> = log.range(*id..).map(|(id, _)| id).collect();
            assert_eq!(from, want[i..]);
            let upto: Vec<StreamId> = log.range(..=*id).rev().map(|(id, _)| id).collect();
            assert_eq!(upto.len(), i + 1);
        }
        // Both ends at once, meeting anywhere in a chunk.
        for skew in [0, 1, 2, 5] {
            let mut it = log.iter();
            let (mut front, mut back) = (Vec::new(), Vec::new());
            let mut step = 0;
            loop {
                let next = if step % (skew + 2) == 0 {
                    it.next_back().map(|x| back.push(x.0))
                } else {
                    it.next().map(|x| front.push(x.0))
                };
                if next.is_none() {
                    break;
                }
                step += 1;
            }
            front.extend(back.iter().rev());
            assert_eq!(front, want);
        }
        assert!(log.chunks.values().all(|c| c.n as usize <= MAX_ENTRIES));
        assert_eq!(
            log.range(StreamId::new(5, 0)..StreamId::new(5, 0)).count(),
            0
        );
        assert_eq!(
            log.range(StreamId::new(9, 0)..=StreamId::new(2, 0)).count(),
            0
        );
    }

    /// [`Log::diff`] by a walk of both logs whole.
    fn naive_diff(
        a: &Log,
        b: &Log,
    ) -> Vec<(StreamId, Option<Entry<'static>>, Option<Entry<'static>>)> {
        let leak = |log: &Log| -> BTreeMap<StreamId, Entry<'static>> {
            log.iter()
                .map(|(id, e)| {
                    let bytes: &'static [u8] = e.fields.bytes().to_vec().leak();
                    let fields = FieldsRef::new(bytes);
                    (
                        id,
                        Entry {
                            fields,
                            version: e.version,
                        },
                    )
                })
                .collect()
        };
        let (a, b) = (leak(a), leak(b));
        let ids: std::collections::BTreeSet<StreamId> = a.keys().chain(b.keys()).copied().collect();
        ids.into_iter()
            .map(|id| (id, a.get(&id).copied(), b.get(&id).copied()))
            .filter(|(_, x, y)| x != y)
            .collect()
    }

    fn sides(
        d: Vec<(StreamId, Side<'_>)>,
    ) -> Vec<(StreamId, Option<Entry<'_>>, Option<Entry<'_>>)> {
        d.into_iter()
            .map(|(id, s)| match s {
                Side::Mine(m) => (id, Some(m), None),
                Side::Theirs(t) => (id, None, Some(t)),
                Side::Both(m, t) => (id, Some(m), Some(t)),
            })
            .collect()
    }

    #[test]
    fn a_diff_decoding_only_unshared_chunks_finds_every_difference() {
        // A small generator of its own (splitmix64): no crate for a test.
        struct Rng(u64);
        impl Rng {
            fn gen_range(&mut self, r: std::ops::Range<u64>) -> u64 {
                self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
                let mut z = self.0;
                z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
                z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
                r.start + (z ^ (z >> 31)) % (r.end - r.start)
            }
            fn gen_bool(&mut self, p: f64) -> bool {
                (self.gen_range(0..1_000_000) as f64) < p * 1e6
            }
        }
        let mut rng = Rng(46);
        for round in 0..200 {
            let mut base = Log::default();
            let n = rng.gen_range(0..600u64);
            for i in 0..n {
                let f = Fields::new([(&b"f"[..], format!("{}", i % 7).as_bytes())]);
                base.put(
                    StreamId::new(rng.gen_range(0..2000), 0),
                    f.as_ref(),
                    v(i, 0),
                );
            }
            let mut changed = base.clone();
            for _ in 0..rng.gen_range(0..8) {
                let f = Fields::new([(&b"g"[..], &b"1"[..])]);
                let id = match rng.gen_range(0..3) {
                    0 => StreamId::new(2000 + rng.gen_range(0..100), 0),
                    _ => StreamId::new(rng.gen_range(0..2100), 0),
                };
                changed.put(
                    id,
                    f.as_ref(),
                    v(10_000 + round, rng.gen_range(0..2) as u32),
                );
            }
            if rng.gen_bool(0.3) {
                let cut = StreamId::new(rng.gen_range(0..2000), 0);
                changed.retain_below(Bound::Excluded(cut), |_, _| rng.gen_bool(0.5));
            }
            // The same entries in chunks of their own: nothing shared.
            let mut rebuilt = Log::default();
            for (id, e) in changed.iter() {
                rebuilt.put(id, e.fields, e.version);
            }
            for (a, b) in [
                (&base, &changed),
                (&changed, &base),
                (&base, &rebuilt),
                (&changed, &rebuilt),
            ] {
                assert_eq!(sides(a.diff(b)), naive_diff(a, b), "round {round}");
            }
        }
    }

    #[test]
    fn a_put_of_a_held_id_keeps_the_greater_version() {
        let mut log = Log::default();
        let id = StreamId::new(3, 0);
        let a = Fields::new([(&b"a"[..], &b"1"[..])]);
        let b = Fields::new([(&b"b"[..], &b"2"[..])]);
        assert_eq!(
            log.put(StreamId::new(9, 0), a.as_ref(), v(1, 1)),
            Put::Added
        );
        assert_eq!(log.put(id, a.as_ref(), v(5, 1)), Put::Added);
        assert_eq!(log.put(id, b.as_ref(), v(4, 2)), Put::Kept);
        assert!(matches!(log.put(id, b.as_ref(), v(6, 2)), Put::Replaced(_)));
        assert_eq!(log.get(id).expect("held").version, v(6, 2));
        assert_eq!(log.len(), 2);
    }

    #[test]
    fn retain_below_drops_only_what_it_is_asked_to() {
        let mut log = Log::default();
        let f = Fields::new([(&b"x"[..], &b"y"[..])]);
        for i in 0..450 {
            log.put(StreamId::new(i, 0), f.as_ref(), v(i, 0));
        }
        let mut seen = 0;
        log.retain_below(Bound::Excluded(StreamId::new(300, 0)), |id, _| {
            seen += 1;
            id.ms % 2 == 1 || id.ms >= 250
        });
        assert_eq!(seen, 300);
        assert_eq!(log.len(), 125 + 200);
        let want: Vec<StreamId> = (0..450)
            .filter(|i| i % 2 == 1 || *i >= 250)
            .map(|i| StreamId::new(i, 0))
            .collect();
        assert_eq!(ids(&log), want);
        log.retain_below(Bound::Unbounded, |_, _| false);
        assert_eq!(log.len(), 0);
        assert!(log.chunks.is_empty());
    }
}

//! How a list's live elements are stored: in *runs* — elements of one
//! write that stand next to each other, whose positions differ only in
//! their last step's digit and number, both counting up by one — kept in
//! position order in chunks of at most [`MAX_RUNS`] runs.
//!
//! A run keeps its first position once and its values densely, so a
//! million elements pushed a thousand per command cost about their bytes
//! plus a handle each (issue 14: a list within 2× Redis's memory), where
//! a map from position to value paid a 24-byte position, a version and a
//! B-tree slot per element. An element's position is computed from its
//! run's first and its offset. Inserting inside a run splits it; removing
//! its first or last element trims it; pushes that continue a run (the
//! next position of the same write) extend it.
//!
//! Finding an element by index walks the chunks' live counts, as Redis
//! walks its quicklist's nodes; finding one by position (merging a peer's
//! delta) is a binary search over chunks, runs and offsets.

use std::cmp::Ordering;
use std::collections::VecDeque;

use crate::list::{Pos, Slot, Step};
use crate::{Elem, Version};

/// Most runs a chunk holds before it is split in two (a handful in unit
/// tests, so they split and empty chunks often).
pub(crate) const MAX_RUNS: usize = if cfg!(test) { 4 } else { 64 };

/// Offset a new run's first element gets: a run grows both ways (pushes
/// at the head take offsets below it), and offsets are `u32`.
const MID: u32 = 1 << 31;

/// Elements at consecutive positions (see the module doc): the same
/// path but for the last step, whose digit counts up by one. Either one
/// write's elements (its number counts up too), or — `stamps` — elements
/// of different writes of one node, each its commit timestamp, as
/// single pushes at one end make them.
#[derive(Clone, Debug)]
pub(crate) struct Run {
    /// The position of offset 0 (which may not be held, nor even be a
    /// valid digit: offsets and digits wrap, only held ones are real).
    base: Pos,
    /// The offset of the first element held.
    start: u32,
    /// The values held, offsets `start..start + len`.
    values: VecDeque<Elem>,
    /// Each held element's commit timestamp, when they differ (then the
    /// origin and number are the base's for all); `None`: one write's,
    /// numbered from the base's.
    stamps: Option<VecDeque<u64>>,
    /// The version of each element `LSET` gave a value, by offset, sorted
    /// (the insert's otherwise; empty, unallocated, for most runs).
    sets: Vec<(u32, Version)>,
}

impl Run {
    fn single(p: Pos, value: Elem, set: Version) -> Run {
        let mut base = p;
        let last = base.0.last_mut().expect("a position has a step");
        last.digit = last.digit.wrapping_sub(i64::from(MID));
        last.seq = last.seq.wrapping_sub(MID);
        let mut r = Run {
            sets: Vec::new(),
            start: MID,
            values: VecDeque::from([value]),
            stamps: None,
            base,
        };
        r.put_set(MID, set);
        r
    }

    pub(crate) fn len(&self) -> usize {
        self.values.len()
    }

    fn last_step(&self) -> &Step {
        self.base.0.last().expect("a position has a step")
    }

    /// The last step of the element at offset `k` (held).
    fn step_at(&self, k: u32) -> Step {
        let last = self.last_step();
        let digit = last.digit.wrapping_add(i64::from(k));
        match &self.stamps {
            None => Step {
                digit,
                seq: last.seq.wrapping_add(k),
                ..*last
            },
            Some(st) => Step {
                digit,
                ts: st[(k - self.start) as usize],
                ..*last
            },
        }
    }

    /// The write that inserted the `i`th element held.
    pub(crate) fn inserted_at(&self, i: usize) -> Version {
        let s = self.step_at(self.start + i as u32);
        Version::new(s.ts, s.origin)
    }

    /// The position of the `i`th element held.
    pub(crate) fn pos_at(&self, i: usize) -> Pos {
        let mut p = self.base.clone();
        *p.0.last_mut().expect("a position has a step") = self.step_at(self.start + i as u32);
        p
    }

    /// Compares the position at offset `k` (held) with `p`, without
    /// building it.
    fn cmp_at(&self, k: u32, p: &Pos) -> Ordering {
        let n = self.base.0.len();
        let mine = self.step_at(k);
        self.base.0[..n - 1]
            .iter()
            .chain(std::iter::once(&mine))
            .cmp(p.0.iter())
    }

    /// Where `p` is among the elements held: `Ok(i)` at the `i`th, or
    /// `Err(i)` before the `i`th.
    fn find(&self, p: &Pos) -> Result<usize, usize> {
        let (mut lo, mut hi) = (0, self.len());
        while lo < hi {
            let mid = (lo + hi) / 2;
            match self.cmp_at(self.start + mid as u32, p) {
                Ordering::Less => lo = mid + 1,
                Ordering::Greater => hi = mid,
                Ordering::Equal => return Ok(mid),
            }
        }
        Err(lo)
    }

    /// True when `p` has the run's path but for its last step, and that
    /// step's digit is `digit` (the next one at an end).
    fn same_path(&self, p: &Pos, digit: Option<i64>) -> bool {
        let n = self.base.0.len();
        p.0.len() == n && self.base.0[..n - 1] == p.0[..n - 1] && digit == Some(p.0[n - 1].digit)
    }

    /// How `p`, standing right after the last element held (`front`:
    /// before the first), extends the run, if it can: the same write's
    /// next element, or another write of the same node (stamped).
    fn extends_with(&self, p: &Pos, front: bool) -> Option<bool> {
        let (k, digit) = if front {
            let k = self.start.checked_sub(1)?;
            (k, self.step_at(self.start).digit.checked_sub(1))
        } else {
            let k = self.start.checked_add(self.len() as u32)?;
            let last = self.step_at(k - 1);
            (k, last.digit.checked_add(1))
        };
        if !self.same_path(p, digit) {
            return None;
        }
        let q = p.0.last().expect("a position has a step");
        let last = self.last_step();
        match &self.stamps {
            None if q.ts == last.ts && q.origin == last.origin => {
                let seq = if front {
                    self.step_at(self.start).seq.checked_sub(1)
                } else {
                    self.step_at(k - 1).seq.checked_add(1)
                };
                (seq == Some(q.seq)).then_some(false)
            }
            // A lone element becomes the first of a stamped run.
            None => (self.len() == 1
                && q.origin == last.origin
                && q.seq == self.step_at(self.start).seq)
                .then_some(true),
            Some(_) => (q.origin == last.origin && q.seq == last.seq).then_some(true),
        }
    }

    /// Adds `p` (which [`Run::extends_with`] accepted) at an end.
    fn extend(&mut self, p: &Pos, value: Elem, set: Version, front: bool, stamped: bool) {
        let ts = p.0.last().expect("a position has a step").ts;
        if stamped && self.stamps.is_none() {
            // The lone element's number becomes the run's.
            let first = self.step_at(self.start);
            let last = self.base.0.last_mut().expect("a position has a step");
            last.seq = first.seq;
            self.stamps = Some(VecDeque::from([first.ts]));
        }
        if front {
            self.start -= 1;
            self.values.push_front(value);
            if let Some(st) = self.stamps.as_mut() {
                st.push_front(ts);
            }
            let k = self.start;
            self.put_set(k, set);
        } else {
            self.values.push_back(value);
            if let Some(st) = self.stamps.as_mut() {
                st.push_back(ts);
            }
            let k = self.start + self.len() as u32 - 1;
            self.put_set(k, set);
        }
    }

    /// The version that gave the `i`th element held its value.
    pub(crate) fn set_of(&self, i: usize) -> Version {
        let k = self.start + i as u32;
        match self.sets.binary_search_by_key(&k, |e| e.0) {
            Ok(j) => self.sets[j].1,
            Err(_) => self.inserted_at(i),
        }
    }

    fn put_set(&mut self, k: u32, v: Version) {
        let inserted = self.inserted_at((k - self.start) as usize);
        match self.sets.binary_search_by_key(&k, |e| e.0) {
            Ok(j) if v == inserted => {
                self.sets.remove(j);
            }
            Ok(j) => self.sets[j].1 = v,
            Err(_) if v == inserted => {}
            Err(j) => self.sets.insert(j, (k, v)),
        }
    }

    fn forget_set(&mut self, k: u32) {
        if let Ok(j) = self.sets.binary_search_by_key(&k, |e| e.0) {
            self.sets.remove(j);
        }
    }

    /// The `i`th element held, as a slot.
    pub(crate) fn slot(&self, i: usize) -> Slot {
        Slot {
            value: self.values[i].clone(),
            set: self.set_of(i),
        }
    }

    /// Splits off the elements from the `i`th held on (0 < i < len).
    fn split_off(&mut self, i: usize) -> Run {
        let k = self.start + i as u32;
        let values = self.values.split_off(i);
        let stamps = self.stamps.as_mut().map(|st| st.split_off(i));
        let j = self.sets.partition_point(|e| e.0 < k);
        let sets = self.sets.split_off(j);
        Run {
            base: self.base.clone(),
            start: k,
            values,
            stamps,
            sets,
        }
    }

    /// Removes the first (`front`) or last element held.
    fn pop(&mut self, front: bool) {
        if front {
            let k = self.start;
            self.forget_set(k);
            self.values.pop_front();
            if let Some(st) = self.stamps.as_mut() {
                st.pop_front();
            }
            self.start += 1;
        } else {
            let k = self.start + self.len() as u32 - 1;
            self.forget_set(k);
            self.values.pop_back();
            if let Some(st) = self.stamps.as_mut() {
                st.pop_back();
            }
        }
    }

    /// Heap bytes it owns besides its values' own blocks.
    pub(crate) fn heap_bytes(&self) -> usize {
        let path = if self.base.0.spilled() {
            self.base.0.capacity() * std::mem::size_of::<Step>()
        } else {
            0
        };
        path + self.values.capacity() * std::mem::size_of::<Elem>()
            + self.values.iter().map(|e| e.heap_bytes()).sum::<usize>()
            + self.stamps.as_ref().map_or(0, |s| s.capacity() * 8)
            + self.sets.capacity() * std::mem::size_of::<(u32, Version)>()
    }
}

/// Runs in position order, with how many elements they hold.
#[derive(Clone, Debug, Default)]
pub(crate) struct Chunk {
    pub(crate) runs: Vec<Run>,
    live: usize,
}

/// Where a position is.
enum Place {
    /// The `i`th element of run `r` of chunk `c`.
    At(usize, usize, usize),
    /// Between the `i-1`th and `i`th element of run `r` of chunk `c`.
    Inside(usize, usize, usize),
    /// Before run `r` of chunk `c` (`r` may be the chunk's run count),
    /// after whatever precedes it.
    Gap(usize, usize),
}

/// The live elements of a list, in position order (see the module doc).
#[derive(Clone, Debug, Default)]
pub(crate) struct Seq {
    pub(crate) chunks: Vec<Chunk>,
    len: usize,
}

impl Seq {
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// Chunk, run and offset of the element at `index`: walked from the
    /// nearer end, so both ends of a long list are found at once.
    fn locate(&self, mut index: usize) -> Option<(usize, usize, usize)> {
        if index >= self.len {
            return None;
        }
        if index >= self.len / 2 {
            let mut from_tail = self.len - 1 - index;
            for (c, chunk) in self.chunks.iter().enumerate().rev() {
                if from_tail >= chunk.live {
                    from_tail -= chunk.live;
                    continue;
                }
                for (r, run) in chunk.runs.iter().enumerate().rev() {
                    if from_tail < run.len() {
                        return Some((c, r, run.len() - 1 - from_tail));
                    }
                    from_tail -= run.len();
                }
            }
            return None;
        }
        for (c, chunk) in self.chunks.iter().enumerate() {
            if index >= chunk.live {
                index -= chunk.live;
                continue;
            }
            for (r, run) in chunk.runs.iter().enumerate() {
                if index < run.len() {
                    return Some((c, r, index));
                }
                index -= run.len();
            }
        }
        None
    }

    pub(crate) fn get(&self, index: usize) -> Option<&Elem> {
        let (c, r, i) = self.locate(index)?;
        self.chunks[c].runs[r].values.get(i)
    }

    pub(crate) fn pos_at(&self, index: usize) -> Option<Pos> {
        let (c, r, i) = self.locate(index)?;
        Some(self.chunks[c].runs[r].pos_at(i))
    }

    /// Every element, head first.
    pub(crate) fn iter(&self) -> impl DoubleEndedIterator<Item = &Elem> + '_ {
        self.chunks
            .iter()
            .flat_map(|c| c.runs.iter())
            .flat_map(|r| r.values.iter())
    }

    /// The elements from `from` (head first) to `to`, exclusive.
    pub(crate) fn range(&self, from: usize, to: usize) -> impl Iterator<Item = &Elem> + '_ {
        let to = to.min(self.len);
        let from = from.min(to);
        let start = self.locate(from);
        let (c0, r0, i0) = start.unwrap_or((self.chunks.len(), 0, 0));
        self.chunks
            .iter()
            .enumerate()
            .skip(c0)
            .flat_map(move |(c, chunk)| {
                let skip = if c == c0 { r0 } else { 0 };
                chunk
                    .runs
                    .iter()
                    .enumerate()
                    .skip(skip)
                    .map(move |(r, run)| {
                        let first = if c == c0 && r == r0 { i0 } else { 0 };
                        run.values.range(first..)
                    })
            })
            .flatten()
            .take(to - from)
    }

    /// Every element with its position and slot, head first.
    pub(crate) fn entries(&self) -> impl Iterator<Item = (Pos, Slot)> + '_ {
        self.chunks
            .iter()
            .flat_map(|c| c.runs.iter())
            .flat_map(|r| (0..r.len()).map(move |i| (r.pos_at(i), r.slot(i))))
    }

    /// The position of the first element of chunk `c`.
    fn chunk_first(&self, c: usize) -> Pos {
        self.chunks[c].runs[0].pos_at(0)
    }

    /// Where `p` is.
    fn place(&self, p: &Pos) -> Place {
        if self.chunks.is_empty() {
            return Place::Gap(0, 0);
        }
        // Pushes go to either end: answered without a search.
        let last_c = self.chunks.len() - 1;
        let last = self.chunks[last_c]
            .runs
            .last()
            .expect("chunks are not empty");
        if last.cmp_at(last.start + last.len() as u32 - 1, p) == Ordering::Less {
            return Place::Gap(last_c, self.chunks[last_c].runs.len());
        }
        let first = &self.chunks[0].runs[0];
        if first.cmp_at(first.start, p) == Ordering::Greater {
            return Place::Gap(0, 0);
        }
        // The last chunk whose first element is at or before `p`.
        let (mut lo, mut hi) = (0, self.chunks.len());
        while lo < hi {
            let mid = (lo + hi) / 2;
            if self.chunk_first(mid) <= *p {
                lo = mid + 1;
            } else {
                hi = mid;
            }
        }
        let c = lo.saturating_sub(1);
        let runs = &self.chunks[c].runs;
        // The last run whose first element is at or before `p`.
        let r = runs.partition_point(|run| run.cmp_at(run.start, p) != Ordering::Greater);
        if r == 0 {
            return Place::Gap(c, 0);
        }
        let run = &runs[r - 1];
        match run.find(p) {
            Ok(i) => Place::At(c, r - 1, i),
            Err(i) if i == run.len() => Place::Gap(c, r),
            Err(i) => Place::Inside(c, r - 1, i),
        }
    }

    /// The slot at position `p`, if an element is there.
    pub(crate) fn get_pos(&self, p: &Pos) -> Option<Slot> {
        match self.place(p) {
            Place::At(c, r, i) => Some(self.chunks[c].runs[r].slot(i)),
            _ => None,
        }
    }

    /// The index of the first element after position `p`.
    pub(crate) fn index_after(&self, p: &Pos) -> usize {
        let before = |c: usize, r: usize| -> usize {
            self.chunks[..c].iter().map(|k| k.live).sum::<usize>()
                + self.chunks[c].runs[..r].iter().map(Run::len).sum::<usize>()
        };
        match self.place(p) {
            Place::At(c, r, i) => before(c, r) + i + 1,
            Place::Inside(c, r, i) => before(c, r) + i,
            Place::Gap(c, r) if c < self.chunks.len() => before(c, r),
            Place::Gap(..) => self.len,
        }
    }

    /// Puts the element `p` with `slot`; when one is there already, the
    /// slot of the newer set wins. Answers the slot it replaced (or
    /// `None` when new) and whether anything changed.
    pub(crate) fn put(&mut self, p: &Pos, slot: Slot) -> (Option<Slot>, bool) {
        match self.place(p) {
            Place::At(c, r, i) => {
                let run = &mut self.chunks[c].runs[r];
                let old = run.slot(i);
                if (slot.set, &slot.value) > (old.set, &old.value) {
                    run.values[i] = slot.value;
                    let k = run.start + i as u32;
                    run.put_set(k, slot.set);
                    (Some(old), true)
                } else {
                    (Some(old), false)
                }
            }
            Place::Inside(c, r, i) => {
                let tail = self.chunks[c].runs[r].split_off(i);
                let runs = &mut self.chunks[c].runs;
                runs.insert(r + 1, tail);
                runs.insert(r + 1, Run::single(p.clone(), slot.value, slot.set));
                self.grew(c);
                (None, true)
            }
            Place::Gap(c, r) => {
                // At a chunk's start, the previous chunk's end is the same
                // gap: extend its last run if it can.
                let (c, r) = if r == 0 && c > 0 {
                    (c - 1, self.chunks[c - 1].runs.len())
                } else {
                    (c, r)
                };
                if self.chunks.is_empty() {
                    self.chunks.push(Chunk::default());
                }
                let runs = &mut self.chunks[c].runs;
                let after = (r > 0)
                    .then(|| runs[r - 1].extends_with(p, false))
                    .flatten();
                let before = (r < runs.len())
                    .then(|| runs[r].extends_with(p, true))
                    .flatten();
                match (after, before) {
                    (Some(stamped), _) => {
                        runs[r - 1].extend(p, slot.value, slot.set, false, stamped)
                    }
                    (None, Some(stamped)) => runs[r].extend(p, slot.value, slot.set, true, stamped),
                    (None, None) => runs.insert(r, Run::single(p.clone(), slot.value, slot.set)),
                }
                self.grew(c);
                (None, true)
            }
        }
    }

    /// Removes the element at `p`; answers its slot.
    pub(crate) fn remove(&mut self, p: &Pos) -> Option<Slot> {
        let Place::At(c, r, i) = self.place(p) else {
            return None;
        };
        let runs = &mut self.chunks[c].runs;
        let slot = runs[r].slot(i);
        let n = runs[r].len();
        if i + 1 < n && i > 0 {
            let tail = runs[r].split_off(i + 1);
            runs.insert(r + 1, tail);
        }
        let run = &mut runs[r];
        run.pop(i == 0);
        if run.values.is_empty() {
            runs.remove(r);
        }
        self.chunks[c].live -= 1;
        self.len -= 1;
        if self.chunks[c].runs.is_empty() {
            self.chunks.remove(c);
        } else if runs_too_many(&self.chunks[c]) {
            self.split_chunk(c);
        }
        Some(slot)
    }

    /// Keeps only the elements whose insert `keep` accepts; true if any
    /// went. (Rebuilds: a change of the key's type is rare.)
    pub(crate) fn retain_inserted(&mut self, keep: impl Fn(Version) -> bool) -> bool {
        let before = self.len;
        let kept: Vec<(Pos, Slot)> = self.entries().filter(|(p, _)| keep(p.inserted())).collect();
        if kept.len() == before {
            return false;
        }
        *self = Seq::default();
        for (p, s) in kept {
            self.put(&p, s);
        }
        true
    }

    /// Chunk `c` got one element more (and maybe a run more).
    fn grew(&mut self, c: usize) {
        self.chunks[c].live += 1;
        self.len += 1;
        if runs_too_many(&self.chunks[c]) {
            self.split_chunk(c);
        }
    }

    fn split_chunk(&mut self, c: usize) {
        let half = self.chunks[c].runs.len() / 2;
        let runs = self.chunks[c].runs.split_off(half);
        let live = runs.iter().map(Run::len).sum();
        self.chunks[c].live -= live;
        self.chunks.insert(c + 1, Chunk { runs, live });
    }

    /// Heap bytes it owns (MEMORY USAGE).
    pub(crate) fn heap_bytes(&self) -> usize {
        self.chunks.capacity() * std::mem::size_of::<Chunk>()
            + self
                .chunks
                .iter()
                .map(|c| {
                    c.runs.capacity() * std::mem::size_of::<Run>()
                        + c.runs.iter().map(Run::heap_bytes).sum::<usize>()
                })
                .sum::<usize>()
    }
}

fn runs_too_many(c: &Chunk) -> bool {
    c.runs.len() > MAX_RUNS
}

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

/// Elements of one write at consecutive positions (see the module doc).
#[derive(Clone, Debug)]
pub(crate) struct Run {
    /// The position of offset 0 (which may no longer be held).
    base: Pos,
    /// The offset of the first element held.
    start: u32,
    /// The values held, offsets `start..start + len`.
    values: VecDeque<Elem>,
    /// The version of each element `LSET` gave a value, by offset, sorted
    /// (the insert's otherwise; empty, unallocated, for most runs).
    sets: Vec<(u32, Version)>,
}

impl Run {
    fn single(p: Pos, value: Elem, set: Version) -> Run {
        let mut r = Run {
            sets: Vec::new(),
            start: 0,
            values: VecDeque::from([value]),
            base: p,
        };
        r.put_set(0, set);
        r
    }

    pub(crate) fn len(&self) -> usize {
        self.values.len()
    }

    fn last_step(&self) -> &Step {
        self.base.0.last().expect("a position has a step")
    }

    /// The write that inserted every element of the run.
    pub(crate) fn inserted(&self) -> Version {
        self.base.inserted()
    }

    /// The position at offset `k` (absolute).
    fn pos(&self, k: u32) -> Pos {
        let mut p = self.base.clone();
        let last = p.0.last_mut().expect("a position has a step");
        last.digit = last.digit.wrapping_add(i64::from(k));
        last.seq = last.seq.wrapping_add(k);
        p
    }

    /// The position of the `i`th element held.
    pub(crate) fn pos_at(&self, i: usize) -> Pos {
        self.pos(self.start + i as u32)
    }

    /// Compares the position at offset `k` with `p`, without building it.
    fn cmp_at(&self, k: u32, p: &Pos) -> Ordering {
        let n = self.base.0.len();
        let last = self.last_step();
        let mine = Step {
            digit: last.digit.wrapping_add(i64::from(k)),
            seq: last.seq.wrapping_add(k),
            ..*last
        };
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

    /// True when `p` is the position right after the last element held
    /// (the same write's next one), so it can extend the run.
    fn continues_with(&self, p: &Pos) -> bool {
        let next = self.start as u64 + self.len() as u64;
        if next > u64::from(u32::MAX) {
            return false;
        }
        let k = next as u32;
        let last = self.last_step();
        if last.digit.checked_add(i64::from(k)).is_none() || last.seq.checked_add(k).is_none() {
            return false;
        }
        self.cmp_at(k, p) == Ordering::Equal
    }

    /// True when `p` is the position right before the first element held.
    fn begins_after(&self, p: &Pos) -> bool {
        self.start > 0 && self.cmp_at(self.start - 1, p) == Ordering::Equal
    }

    /// The version that gave the `i`th element held its value.
    pub(crate) fn set_of(&self, i: usize) -> Version {
        let k = self.start + i as u32;
        match self.sets.binary_search_by_key(&k, |e| e.0) {
            Ok(j) => self.sets[j].1,
            Err(_) => self.inserted(),
        }
    }

    fn put_set(&mut self, k: u32, v: Version) {
        match self.sets.binary_search_by_key(&k, |e| e.0) {
            Ok(j) if v == self.inserted() => {
                self.sets.remove(j);
            }
            Ok(j) => self.sets[j].1 = v,
            Err(_) if v == self.inserted() => {}
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
        let j = self.sets.partition_point(|e| e.0 < k);
        let sets = self.sets.split_off(j);
        Run {
            base: self.base.clone(),
            start: k,
            values,
            sets,
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
                if r > 0 && runs[r - 1].continues_with(p) {
                    let run = &mut runs[r - 1];
                    run.values.push_back(slot.value);
                    let k = run.start + run.len() as u32 - 1;
                    run.put_set(k, slot.set);
                } else if r < runs.len() && runs[r].begins_after(p) {
                    let run = &mut runs[r];
                    run.start -= 1;
                    run.values.push_front(slot.value);
                    let k = run.start;
                    run.put_set(k, slot.set);
                } else {
                    runs.insert(r, Run::single(p.clone(), slot.value, slot.set));
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
        let k = run.start + i as u32;
        if i == 0 {
            run.values.pop_front();
            run.start += 1;
        } else {
            run.values.pop_back();
        }
        run.forget_set(k);
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

    /// Keeps only the runs `keep` accepts (whole runs: every element of a
    /// run has the same insert); true if any went.
    pub(crate) fn retain_runs(&mut self, mut keep: impl FnMut(&Run) -> bool) -> bool {
        let before = self.len;
        for chunk in &mut self.chunks {
            chunk.runs.retain(|r| keep(r));
            chunk.live = chunk.runs.iter().map(Run::len).sum();
        }
        self.chunks.retain(|c| !c.runs.is_empty());
        self.len = self.chunks.iter().map(|c| c.live).sum();
        self.len != before
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

//! A transaction's write of a list: the delta that makes the list show
//! what the transaction's copy shows, at the commit's version.
//!
//! The copy numbers its new elements with pending versions (the commit's
//! is not known yet), so they are inserted anew: each run of new elements
//! gets positions of this write between the kept elements around it.
//! [`List::rewrite`] compares every element; [`List::rewrite_touched`]
//! only the positions the transaction's deltas named (`crate::touched`),
//! with the same result.

use std::collections::{BTreeSet, HashSet};

use crate::list::{List, Minter, Pos, Slot};
use crate::{Elem, Version};

impl List {
    /// The delta that makes this list show exactly `target`'s elements,
    /// as write `dot`: elements in both (same position) stay — with their
    /// value written anew where it differs — the others are removed, and
    /// the target's elements that are not here are inserted with new
    /// positions between their neighbours. (A transaction's overlay
    /// numbers its writes with placeholder versions; what it shows is
    /// installed this way, at the commit's real version.)
    pub fn rewrite(&self, target: &List, dot: Version) -> List {
        let mut delta = List::delta(dot);
        for (p, _) in self.live.entries() {
            if target.live.get_pos(&p).is_none() {
                delta.put_dead(p, dot);
            }
        }
        let mut minter = Minter { dot, seq: 0 };
        // The last position kept, and the new elements since.
        let mut lo: Option<Pos> = None;
        let mut run: Vec<Elem> = Vec::new();
        let mut flush = |lo: &Option<Pos>, hi: Option<&Pos>, run: &mut Vec<Elem>, d: &mut List| {
            let mut prev = lo.clone();
            for value in run.drain(..) {
                let p = minter.between(prev.as_ref(), hi);
                d.put_live(p.clone(), Slot { value, set: dot });
                prev = Some(p);
            }
        };
        for (p, s) in target.live.entries() {
            match self.live.get_pos(&p) {
                Some(mine) => {
                    flush(&lo, Some(&p), &mut run, &mut delta);
                    if mine.value != s.value {
                        delta.put_live(
                            p.clone(),
                            Slot {
                                value: s.value,
                                set: dot,
                            },
                        );
                    }
                    lo = Some(p);
                }
                None => run.push(s.value),
            }
        }
        // A run after the last kept element goes before whatever follows
        // it here (only removed elements do).
        let hi = match &lo {
            None => self.pos_at(0),
            Some(l) => self.pos_at(self.live.index_after(l)),
        };
        flush(&lo, hi.as_ref(), &mut run, &mut delta);
        delta
    }

    /// [`List::rewrite`] when `target` is this list changed by deltas
    /// that named only the positions in `touched` (inserted, set or
    /// removed): every other element is the same on both sides, so only
    /// those are looked at. Runs of new elements are found around each
    /// new position in `target` and placed as `rewrite` places them.
    pub fn rewrite_touched(&self, target: &List, touched: &BTreeSet<Pos>, dot: Version) -> List {
        let mut delta = List::delta(dot);
        // New: live there, not here (the transaction inserted them).
        let mut new: Vec<&Pos> = Vec::new();
        for p in touched {
            match (self.live.get_pos(p), target.live.get_pos(p)) {
                (Some(_), None) => delta.put_dead(p.clone(), dot),
                (Some(mine), Some(s)) if mine.value != s.value => delta.put_live(
                    p.clone(),
                    Slot {
                        value: s.value,
                        set: dot,
                    },
                ),
                (None, Some(_)) => new.push(p),
                _ => {}
            }
        }
        let is_new: HashSet<&Pos> = new.iter().copied().collect();
        let mut minter = Minter { dot, seq: 0 };
        let mut placed: HashSet<&Pos> = HashSet::new();
        // In position order, as `rewrite` meets them: each unplaced new
        // element starts a run (one before it in the list would be new
        // and smaller, placed already).
        for p in new {
            if placed.contains(p) {
                continue;
            }
            let first = target.live.index_after(p) - 1;
            let lo = first.checked_sub(1).and_then(|i| target.live.pos_at(i));
            let mut run: Vec<Elem> = Vec::new();
            let mut i = first;
            let hi = loop {
                let Some(q) = target.live.pos_at(i) else {
                    break None;
                };
                match is_new.get(&q) {
                    Some(&q) => {
                        placed.insert(q);
                        run.push(target.live.get(i).expect("held").clone());
                        i += 1;
                    }
                    None => break Some(q),
                }
            };
            // A run after the last kept element goes before whatever
            // follows it here, as in `rewrite`.
            let hi = match hi {
                Some(h) => Some(h),
                None => match &lo {
                    None => self.pos_at(0),
                    Some(l) => self.pos_at(self.live.index_after(l)),
                },
            };
            let mut prev = lo;
            for value in run {
                let q = minter.between(prev.as_ref(), hi.as_ref());
                delta.put_live(q.clone(), Slot { value, set: dot });
                prev = Some(q);
            }
        }
        delta
    }
}

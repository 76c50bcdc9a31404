//! The register-wise part of a HyperLogLog string: what makes `PFADD`s
//! made concurrently in several regions all count (issue 45).
//!
//! A HyperLogLog is a string (Redis's bytes, `crate::hll`), and a string's
//! whole-value writes are last-writer-wins ([`crate::Counter`]'s base).
//! `PFADD`, `PFMERGE` and the rewrites of `PFCOUNT`/`PFDEBUG` only raise
//! registers, so they are written as a *part* instead: per origin (node),
//! the bytes that origin's last such write left, the base it was made on
//! (`on`: the version of the base's value it read) and its own version.
//! An origin's newer part replaces its older one (its bytes already hold
//! them: it read them), so the state keeps at most one part per origin.
//!
//! What the string shows is its base's value, unless some part was made
//! on that very base (*live*): then the live parts' join, which is
//!
//! - the newest live part's bytes when its registers are at least every
//!   other live part's (one region writing, or a region that already saw
//!   the others' parts: the bytes are exactly the ones its `PFADD` made,
//!   as Redis's would be);
//! - otherwise the canonical encoding of the register-wise maximum
//!   (`hll::encode` at Redis's default `hll-sparse-max-bytes`, dense when
//!   any live part is), the same on every replica whatever the order.
//!
//! A whole-value write (SET, DEL, RESTORE…) makes a new base, so the parts
//! made on the old one stop showing — the reset wins over a concurrent
//! `PFADD` made on what it replaced, as it wins over a concurrent `APPEND`.
//! A change of the TTL alone (EXPIRE) keeps them showing
//! (`Counter::hll_on`). A part that no longer shows stays (at most one per
//! origin) until its origin writes again or a change of type drops it: a
//! filter by the base would not commute with merging, as a TTL change can
//! win over a newer whole write.
//!
//! Hand-written: this is part of Elsa's lattice core, tied to Redis's
//! HyperLogLog bytes.

use bytes::Bytes;

use crate::hll;
use crate::{NodeId, Version};

/// One origin's last register-raising write of the string.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Part {
    /// The version of the base's value it was made on.
    pub on: Version,
    /// Its own write.
    pub version: Version,
    /// The HyperLogLog it left (Redis's bytes).
    pub bytes: Bytes,
}

impl Part {
    fn key(&self) -> (Version, Version, &[u8]) {
        (self.version, self.on, &self.bytes)
    }
}

/// Per origin its last [`Part`], sorted by origin.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct HllParts(pub(crate) Vec<(NodeId, Part)>);

impl HllParts {
    /// True when no origin wrote a part.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// How many origins hold a part.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Every origin's part, by origin.
    pub fn iter(&self) -> impl Iterator<Item = &(NodeId, Part)> {
        self.0.iter()
    }

    /// Takes `p` as origin `o`'s part if it is newer; true if it was.
    pub fn offer(&mut self, o: NodeId, p: Part) -> bool {
        match self.0.binary_search_by_key(&o, |(k, _)| *k) {
            Ok(i) => {
                if p.key() > self.0[i].1.key() {
                    self.0[i].1 = p;
                    true
                } else {
                    false
                }
            }
            Err(i) => {
                self.0.insert(i, (o, p));
                true
            }
        }
    }

    /// Merges `other` in, origin by origin; true if anything changed.
    pub fn merge(&mut self, other: HllParts) -> bool {
        let mut changed = false;
        for (o, p) in other.0 {
            changed |= self.offer(o, p);
        }
        changed
    }

    /// Drops the parts for which `dead` holds; true if any went.
    pub(crate) fn retain_not(&mut self, dead: impl Fn(&Part) -> bool) -> bool {
        let before = self.0.len();
        self.0.retain(|(_, p)| !dead(p));
        self.0.len() != before
    }

    /// The newest part's version (ZERO when none).
    pub fn newest(&self) -> Version {
        self.0
            .iter()
            .map(|(_, p)| p.version)
            .max()
            .unwrap_or(Version::ZERO)
    }

    /// True when some part was made on the base written as `on`.
    pub fn any_live(&self, on: Version) -> bool {
        self.0.iter().any(|(_, p)| p.on == on)
    }

    /// What the string shows when its base's value was written as `on`:
    /// the join of the parts made on it (see the module doc), or `None`
    /// when none was.
    pub fn show(&self, on: Version) -> Option<Bytes> {
        let mut live = self.0.iter().map(|(_, p)| p).filter(|p| p.on == on);
        let first = live.next()?;
        let rest: Vec<&Part> = live.collect();
        if rest.is_empty() {
            return Some(first.bytes.clone());
        }
        let mut all = rest;
        all.push(first);
        // Newest first; a part that does not parse counts as empty (a
        // peer's forged frame cannot make a merge misbehave).
        all.sort_by(|a, b| b.key().cmp(&a.key()));
        let regs: Vec<Vec<u8>> = all
            .iter()
            .map(|p| hll::registers(&p.bytes).unwrap_or_else(|_| vec![0; hll::REGISTERS]))
            .collect();
        let newest = &regs[0];
        if regs[1..]
            .iter()
            .all(|r| r.iter().zip(newest).all(|(x, n)| x <= n))
        {
            return Some(all[0].bytes.clone());
        }
        let mut max = newest.clone();
        for r in &regs[1..] {
            for (m, x) in max.iter_mut().zip(r) {
                *m = (*m).max(*x);
            }
        }
        let dense = all.iter().any(|p| hll::is_dense(&p.bytes));
        Some(Bytes::from(hll::encode(&max, dense, hll::SPARSE_MAX_BYTES)))
    }

    /// Heap bytes owned.
    pub fn heap_bytes(&self) -> usize {
        self.0
            .iter()
            .map(|(_, p)| std::mem::size_of::<(NodeId, Part)>() + p.bytes.len())
            .sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(ts: u64, o: NodeId) -> Version {
        Version::new(ts, o)
    }

    fn hll_of(elements: &[&str]) -> Bytes {
        let mut h = hll::new_sparse();
        for e in elements {
            hll::add(&mut h, e.as_bytes(), hll::SPARSE_MAX_BYTES).unwrap();
        }
        hll::invalidate(&mut h);
        Bytes::from(h)
    }

    fn part(on: Version, version: Version, elements: &[&str]) -> Part {
        Part {
            on,
            version,
            bytes: hll_of(elements),
        }
    }

    #[test]
    fn one_writer_shows_its_own_bytes_and_two_show_their_join() {
        let mut p = HllParts::default();
        p.offer(1, part(Version::ZERO, v(1, 1), &["a"]));
        assert_eq!(p.show(Version::ZERO), Some(hll_of(&["a"])));
        assert_eq!(p.show(v(5, 5)), None, "made on another base");
        p.offer(2, part(Version::ZERO, v(2, 2), &["b"]));
        let both = p.show(Version::ZERO).unwrap();
        assert_eq!(hll::count(&both).unwrap(), 2);
        // Origin 1 then read the join and added "c": its bytes show.
        p.offer(1, part(Version::ZERO, v(3, 1), &["a", "b", "c"]));
        assert_eq!(p.show(Version::ZERO), Some(hll_of(&["a", "b", "c"])));
        // An older part of an origin never replaces its newer one.
        assert!(!p.offer(1, part(Version::ZERO, v(1, 1), &["a"])));
    }

    #[test]
    fn a_transaction_raising_registers_and_the_ttl_keeps_concurrent_parts() {
        use crate::{Counter, Crdt, KeyState};
        // The key as a transaction at origin 1 read it; it then PFADDs b
        // and EXPIREs the key: its target shows {a, b} with a TTL (as
        // a plain value: what a transaction's overlay writes).
        let read = KeyState::of_string(Counter::default().hll_write(hll_of(&["a"]), 0, v(1, 1), 0));
        let target = KeyState::of_string(Counter::default().set(
            Some(hll_of(&["a", "b"])),
            Some(9_000),
            0,
            v(5, 1),
        ));
        let commit = read.replace_with(&target, 0, 0, v(6, 1));
        // Concurrently, origin 2 PFADDs c to the key it had (nothing).
        let other =
            KeyState::of_string(Counter::default().hll_write(hll_of(&["c"]), 0, v(4, 2), 0));
        for order in [[&commit, &other], [&other, &commit]] {
            let mut k = read.clone();
            for d in order {
                k.merge(d.clone());
            }
            let shown = k.visible_string(0).unwrap();
            assert_eq!(hll::count(&shown).unwrap(), 3, "a, b and c");
            assert_eq!(k.expire_ms(0), Some(9_000));
        }
        // Where nothing else wrote, the transaction's own bytes show.
        let mut k = read.clone();
        k.merge(commit);
        assert_eq!(k.visible_string(0), Some(hll_of(&["a", "b"])));
    }

    #[test]
    fn merges_in_any_order_agree() {
        let parts = [
            (1, part(Version::ZERO, v(1, 1), &["a"])),
            (2, part(Version::ZERO, v(2, 2), &["b", "x"])),
            (1, part(Version::ZERO, v(3, 1), &["a", "c"])),
            (3, part(v(9, 3), v(9, 3), &["z"])),
        ];
        let mut reference: Option<(HllParts, Option<Bytes>)> = None;
        for perm in [[0, 1, 2, 3], [3, 2, 1, 0], [2, 0, 3, 1], [1, 3, 0, 2]] {
            let mut p = HllParts::default();
            for i in perm {
                let (o, part) = parts[i].clone();
                p.offer(o, part);
            }
            let shown = p.show(Version::ZERO);
            match &reference {
                None => reference = Some((p, shown)),
                Some((r, s)) => {
                    assert_eq!(&p, r);
                    assert_eq!(&shown, s);
                }
            }
        }
        let shown = reference.unwrap().1.unwrap();
        assert_eq!(hll::count(&shown).unwrap(), 4, "a, b, x, c");
    }
}

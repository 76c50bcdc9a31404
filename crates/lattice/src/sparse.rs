//! A part of a key's state that most keys leave at its default, boxed only
//! when it holds something (issue 43).
//!
//! A hash, set or sorted set has no string part and, most of the time, no
//! expiry; held inline, those two parts were 88 of the 200 bytes every
//! collection key's state cost. [`Sparse`] keeps them as one pointer, null
//! while the part is its default: reads see the default through
//! [`Deref`](std::ops::Deref), and a change goes through
//! [`Sparse::make_mut`] (which boxes) or [`Sparse::get_mut`] (which does
//! not, for changes that leave a default part as it is). Equality,
//! hashing (so digests) and debug output are those of the part itself,
//! boxed or not.

use std::ops::Deref;

use crate::Crdt;

/// Types a [`Sparse`] holds: their default, once, for reads of an empty
/// part.
pub trait Empty: Default + PartialEq + 'static {
    /// The default value.
    fn empty() -> &'static Self;
}

/// A part kept boxed only when it is not its default (see the module doc).
#[derive(Clone, Default)]
pub struct Sparse<T>(Option<Box<T>>);

impl<T: Empty> Sparse<T> {
    /// The part to change in place (boxed from now on).
    pub fn make_mut(&mut self) -> &mut T {
        self.0.get_or_insert_with(Box::default)
    }

    /// The part to change in place, when it is not the default: a change
    /// that leaves a default part as it is need not box it.
    pub fn get_mut(&mut self) -> Option<&mut T> {
        self.0.as_deref_mut()
    }

    /// Drops the box when a change left the part at its default.
    pub fn tidy(&mut self) {
        if self.0.as_deref().is_some_and(|t| t == T::empty()) {
            self.0 = None;
        }
    }

    /// True when the part holds something (a box is kept).
    pub fn is_boxed(&self) -> bool {
        self.0.is_some()
    }
}

impl<T: Empty> From<T> for Sparse<T> {
    fn from(t: T) -> Sparse<T> {
        if &t == T::empty() {
            Sparse(None)
        } else {
            Sparse(Some(Box::new(t)))
        }
    }
}

impl<T: Empty> Deref for Sparse<T> {
    type Target = T;

    fn deref(&self) -> &T {
        self.0.as_deref().unwrap_or_else(|| T::empty())
    }
}

impl<T: Empty> PartialEq for Sparse<T> {
    fn eq(&self, other: &Self) -> bool {
        **self == **other
    }
}

impl<T: Empty + Eq> Eq for Sparse<T> {}

impl<T: Empty + std::hash::Hash> std::hash::Hash for Sparse<T> {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        (**self).hash(state)
    }
}

impl<T: Empty + std::fmt::Debug> std::fmt::Debug for Sparse<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        (**self).fmt(f)
    }
}

impl<T: Empty + Crdt> Crdt for Sparse<T> {
    fn merge(&mut self, other: Sparse<T>) -> bool {
        match (&mut self.0, other.0) {
            (_, None) => false,
            (mine @ None, Some(theirs)) => {
                let changed = *theirs != *T::empty();
                if changed {
                    *mine = Some(theirs);
                }
                changed
            }
            (Some(mine), Some(theirs)) => mine.merge(*theirs),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Counter, Kind, Ttl, Version};

    #[test]
    fn a_default_part_costs_one_pointer_and_reads_as_the_default() {
        assert_eq!(std::mem::size_of::<Sparse<Counter>>(), 8);
        let s: Sparse<Ttl> = Ttl::default().into();
        assert!(!s.is_boxed());
        assert_eq!(*s, Ttl::default());
        let t: Sparse<Ttl> = Ttl::on(Kind::Hash, Some(5), Version::new(3, 1)).into();
        assert!(t.is_boxed());
        assert_eq!(t.expire_ms, Some(5));
        let mut u = t.clone();
        *u.make_mut() = Ttl::default();
        u.tidy();
        assert!(!u.is_boxed());
        assert_eq!(u, s);
    }

    #[test]
    fn a_keys_state_and_its_arc_counts_fit_the_allocators_128_byte_class() {
        // 200 bytes (a 224-byte block) with both parts inline.
        assert!(std::mem::size_of::<crate::KeyState>() + 16 <= 128);
    }
}

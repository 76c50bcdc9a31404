//! The bytes of one collection element — a set member, a hash field's
//! name or value — stored compactly.
//!
//! A big collection holds millions of these, mostly short (Redis's own
//! encodings assume so), so each byte of the handle counts a million times
//! (issue 13: a 1M-member set within 2× Redis's memory). A `Bytes` handle
//! is 32 bytes and its short buffer another heap block; an [`Elem`] is 24
//! bytes and keeps up to 16 bytes inline, spilling longer ones to one heap
//! block of their own size. Hashing and ordering are those of the byte
//! slice, so a map keyed by `Elem` is looked up with a `&[u8]`.

use std::borrow::Borrow;
use std::hash::{Hash, Hasher};
use std::ops::Deref;

use bytes::Bytes;
use smallvec::SmallVec;

/// Up to this many bytes are kept inline, without a heap block.
pub const INLINE: usize = 16;

/// One element's bytes (see the module doc).
#[derive(Default, PartialEq, Eq, PartialOrd, Ord)]
pub struct Elem(SmallVec<[u8; INLINE]>);

/// A copy of the bytes at once (`SmallVec`'s own `clone` goes element by
/// element): a transaction's first write of a big collection copies every
/// element (`crate::touched`).
impl Clone for Elem {
    fn clone(&self) -> Elem {
        Elem(SmallVec::from_slice(&self.0))
    }
}

impl Elem {
    /// A copy of `b`.
    pub fn new(b: &[u8]) -> Elem {
        Elem(SmallVec::from_slice(b))
    }

    /// The bytes as a `Bytes` (a copy: replies and the wire own theirs).
    pub fn to_bytes(&self) -> Bytes {
        Bytes::copy_from_slice(&self.0)
    }

    /// Heap bytes owned beyond the handle (0 when inline).
    pub fn heap_bytes(&self) -> usize {
        if self.0.spilled() {
            self.0.capacity()
        } else {
            0
        }
    }
}

impl Deref for Elem {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        &self.0
    }
}

impl AsRef<[u8]> for Elem {
    fn as_ref(&self) -> &[u8] {
        &self.0
    }
}

/// Lets a map keyed by `Elem` be looked up by `&[u8]`: the hash below is
/// the slice's, as `Borrow` requires.
impl Borrow<[u8]> for Elem {
    fn borrow(&self) -> &[u8] {
        &self.0
    }
}

impl Hash for Elem {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.0.as_slice().hash(state)
    }
}

impl std::fmt::Debug for Elem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:?}", Bytes::copy_from_slice(&self.0))
    }
}

impl From<&[u8]> for Elem {
    fn from(b: &[u8]) -> Elem {
        Elem::new(b)
    }
}

impl From<&Bytes> for Elem {
    fn from(b: &Bytes) -> Elem {
        Elem::new(b)
    }
}

impl From<Bytes> for Elem {
    fn from(b: Bytes) -> Elem {
        Elem::new(&b)
    }
}

impl From<&str> for Elem {
    fn from(s: &str) -> Elem {
        Elem::new(s.as_bytes())
    }
}

impl From<Vec<u8>> for Elem {
    fn from(v: Vec<u8>) -> Elem {
        Elem(SmallVec::from_vec(v))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::hash::BuildHasher;

    #[test]
    fn hashes_and_orders_as_its_bytes() {
        let s = foldhash::fast::FixedState::with_seed(1);
        for b in [
            &b""[..],
            b"short",
            b"exactly-16-bytes",
            b"longer than sixteen bytes",
        ] {
            let e = Elem::new(b);
            assert_eq!(&*e, b);
            assert_eq!(s.hash_one(&e), s.hash_one(b));
            assert_eq!(e.to_bytes(), Bytes::copy_from_slice(b));
        }
        assert!(Elem::from("a") < Elem::from("ab"));
        assert_eq!(Elem::new(b"exactly-16-bytes").heap_bytes(), 0);
        assert!(Elem::new(b"longer than sixteen bytes").heap_bytes() >= 25);
        assert_eq!(std::mem::size_of::<Elem>(), 24);
    }
}

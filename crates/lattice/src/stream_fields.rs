//! A stream entry's field/value pairs packed in one allocation: each
//! field and value as a LEB128 length and its bytes, one after another.
//!
//! Hand-written because it is a compact encoding on the heart of a
//! stream's memory: a pair of `Elem`s costs 48 bytes before any heap, and
//! a `Vec` of them its own allocation — 263 bytes for an entry of three
//! short fields against Redis's 40 (`bench/memory-types.sh`). Packed, the
//! pairs take one allocation of about their bytes. Entries are written
//! once and read whole (`XRANGE`, `XREAD`, the codec), never edited, so a
//! buffer read front to back is all they need.

use std::fmt;

/// An entry's field/value pairs, in the order given (see the module doc).
#[derive(Clone, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Fields(Box<[u8]>);

fn put_len(out: &mut Vec<u8>, mut n: usize) {
    while n >= 0x80 {
        out.push((n as u8) | 0x80);
        n >>= 7;
    }
    out.push(n as u8);
}

/// The length at the front of `b` and the bytes after it (None when the
/// buffer is cut short — never for one [`Fields`] made).
fn take(b: &[u8]) -> Option<(&[u8], &[u8])> {
    let mut n = 0usize;
    let mut shift = 0;
    for (i, &byte) in b.iter().enumerate() {
        n |= usize::from(byte & 0x7f) << shift;
        if byte < 0x80 {
            let rest = &b[i + 1..];
            return (n <= rest.len()).then(|| rest.split_at(n));
        }
        shift += 7;
        if shift >= usize::BITS {
            return None;
        }
    }
    None
}

impl Fields {
    /// Packs `pairs`.
    pub fn new<'a>(pairs: impl IntoIterator<Item = (&'a [u8], &'a [u8])>) -> Fields {
        let mut out = Vec::new();
        for (f, v) in pairs {
            put_len(&mut out, f.len());
            out.extend_from_slice(f);
            put_len(&mut out, v.len());
            out.extend_from_slice(v);
        }
        Fields(out.into_boxed_slice())
    }

    /// The pairs, in order.
    pub fn iter(&self) -> Pairs<'_> {
        Pairs(&self.0)
    }

    /// How many pairs.
    pub fn len(&self) -> usize {
        self.iter().count()
    }

    /// True when there is no pair.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The pairs, borrowed.
    pub fn as_ref(&self) -> FieldsRef<'_> {
        FieldsRef(&self.0)
    }
}

/// Packed field/value pairs held elsewhere (a stream's chunk): what
/// [`Fields`] holds, borrowed.
#[derive(Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct FieldsRef<'a>(&'a [u8]);

impl<'a> FieldsRef<'a> {
    /// Pairs packed as [`Fields`] packs them (a buffer this crate wrote).
    pub(crate) fn new(packed: &'a [u8]) -> FieldsRef<'a> {
        FieldsRef(packed)
    }

    /// The pairs, in order.
    pub fn iter(&self) -> Pairs<'a> {
        Pairs(self.0)
    }

    /// How many pairs.
    pub fn len(&self) -> usize {
        self.iter().count()
    }

    /// True when there is no pair.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The packed bytes.
    pub fn bytes(&self) -> &'a [u8] {
        self.0
    }
}

impl From<FieldsRef<'_>> for Fields {
    fn from(f: FieldsRef<'_>) -> Fields {
        Fields(f.0.into())
    }
}

impl fmt::Debug for FieldsRef<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list()
            .entries(
                self.iter()
                    .map(|(k, v)| (String::from_utf8_lossy(k), String::from_utf8_lossy(v))),
            )
            .finish()
    }
}

impl From<Vec<(crate::Elem, crate::Elem)>> for Fields {
    fn from(pairs: Vec<(crate::Elem, crate::Elem)>) -> Fields {
        Fields::new(pairs.iter().map(|(f, v)| (&f[..], &v[..])))
    }
}

/// The pairs of a [`Fields`], in order.
pub struct Pairs<'a>(&'a [u8]);

impl<'a> Iterator for Pairs<'a> {
    type Item = (&'a [u8], &'a [u8]);

    fn next(&mut self) -> Option<Self::Item> {
        let (f, rest) = take(self.0)?;
        let (v, rest) = take(rest)?;
        self.0 = rest;
        Some((f, v))
    }
}

impl fmt::Debug for Fields {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.as_ref().fmt(f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pairs_come_back_as_packed_whatever_their_sizes() {
        let long = vec![7u8; 300];
        let big = vec![1u8; 70_000];
        let pairs: Vec<(&[u8], &[u8])> = vec![
            (b"a", b"1"),
            (b"", b""),
            (&long, b"x"),
            (b"y", &big),
            (b"\x80\xff", b"\x00"),
        ];
        let f = Fields::new(pairs.iter().copied());
        assert_eq!(f.iter().collect::<Vec<_>>(), pairs);
        assert_eq!(f.len(), 5);
        assert!(Fields::new([]).is_empty());
        assert_eq!(Fields::new([]).len(), 0);
    }
}

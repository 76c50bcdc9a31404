//! Redis's stream nodes, as far as they decide anything a user sees: a
//! node is a listpack (`listpack.c`), and `streamAppendItem` (`t_stream.c`)
//! starts a new one when the last holds `stream-node-max-entries` entries
//! (shown and deleted) or its bytes and the new entry's fields and values
//! would reach `stream-node-max-bytes`. Approximate trims remove whole
//! nodes, so how many entries `XADD … MAXLEN ~ n` keeps depends on where
//! they end (BullMQ's events stream: 40 entries of ~100 bytes to a node,
//! not 100). Hand-written: no maintained crate encodes listpacks, and the
//! DUMP writer (`dump/rdb_stream.rs`) lays nodes out with the same rules.

use elsa_lattice::stream::StreamId;
use elsa_lattice::stream_fields::FieldsRef;
use elsa_lattice::Version;

use crate::ops::limits;

/// A listpack element: an integer, or a string (`lpAppend` stores one
/// that reads as an integer as that integer).
pub enum Lp<'a> {
    Int(i64),
    Str(&'a [u8]),
}

/// `lpStringToInt64`: only the canonical text of an i64 (no `+`, no
/// leading zero, no `-0`). By hand: it runs for every element of every
/// entry an approximate trim looks at.
fn as_int(s: &[u8]) -> Option<i64> {
    let (neg, digits) = match s.split_first()? {
        (b'-', rest) => (true, rest),
        _ => (false, s),
    };
    if digits.is_empty() || digits.len() > 19 || (digits[0] == b'0' && (neg || digits.len() > 1)) {
        return None;
    }
    // Summed negative, so that i64::MIN fits.
    let mut v: i64 = 0;
    for &d in digits {
        if !d.is_ascii_digit() {
            return None;
        }
        v = v.checked_mul(10)?.checked_sub(i64::from(d - b'0'))?;
    }
    if neg {
        Some(v)
    } else {
        v.checked_neg()
    }
}

/// Bytes of the back-length of an element of `len` bytes
/// (`lpEncodeBacklen`: 7 bits a byte, its bounds one below a power of
/// two's).
pub fn backlen_size(len: usize) -> usize {
    match len {
        0..=127 => 1,
        128..=16_382 => 2,
        16_383..=2_097_150 => 3,
        2_097_151..=268_435_454 => 4,
        _ => 5,
    }
}

impl Lp<'_> {
    /// The element's encoding without its back-length: how many bytes.
    fn body_len(&self) -> usize {
        match *self {
            Lp::Int(v) => match v {
                0..=127 => 1,
                -4096..=4095 => 2,
                -32768..=32767 => 3,
                -8_388_608..=8_388_607 => 4,
                -2_147_483_648..=2_147_483_647 => 5,
                _ => 9,
            },
            Lp::Str(s) => match as_int(s) {
                Some(v) => Lp::Int(v).body_len(),
                None if s.len() < 64 => 1 + s.len(),
                None if s.len() < 4096 => 2 + s.len(),
                None => 5 + s.len(),
            },
        }
    }

    /// Bytes the element takes in a listpack, back-length included.
    pub fn size(&self) -> usize {
        let n = self.body_len();
        n + backlen_size(n)
    }

    /// Appends the element as a listpack holds it.
    pub fn encode(&self, out: &mut Vec<u8>) {
        let start = out.len();
        match *self {
            Lp::Int(v) => match v {
                0..=127 => out.push(v as u8),
                -4096..=4095 => {
                    let u = (v & 0x1fff) as u16;
                    out.extend_from_slice(&[0xc0 | (u >> 8) as u8, u as u8]);
                }
                -32768..=32767 => {
                    out.push(0xf1);
                    out.extend_from_slice(&(v as i16).to_le_bytes());
                }
                -8_388_608..=8_388_607 => {
                    out.push(0xf2);
                    out.extend_from_slice(&(v as i32).to_le_bytes()[..3]);
                }
                -2_147_483_648..=2_147_483_647 => {
                    out.push(0xf3);
                    out.extend_from_slice(&(v as i32).to_le_bytes());
                }
                _ => {
                    out.push(0xf4);
                    out.extend_from_slice(&v.to_le_bytes());
                }
            },
            Lp::Str(s) => {
                if let Some(v) = as_int(s) {
                    return Lp::Int(v).encode(out);
                }
                let n = s.len();
                if n < 64 {
                    out.push(0x80 | n as u8);
                } else if n < 4096 {
                    out.extend_from_slice(&[0xe0 | (n >> 8) as u8, n as u8]);
                } else {
                    out.push(0xf0);
                    out.extend_from_slice(&(n as u32).to_le_bytes());
                }
                out.extend_from_slice(s);
            }
        }
        // The back-length: most significant 7 bits first, all but the
        // first byte flagged.
        let l = (out.len() - start) as u64;
        let n = backlen_size(l as usize);
        for i in (0..n).rev() {
            let b = ((l >> (7 * i)) & 127) as u8;
            out.push(if i == n - 1 { b } else { b | 128 });
        }
    }
}

/// `stream-node-max-bytes`, as `streamAppendItem` reads it (0 or more
/// than `STREAM_LISTPACK_MAX_SIZE`: that, 1 GiB).
pub fn node_max_bytes() -> usize {
    match limits::get(&limits::STREAM_NODE_BYTES) {
        0 => 1 << 30,
        n => n.min(1 << 30),
    }
}

/// An entry as where nodes end depends on it.
#[derive(Clone, Copy)]
pub struct Held<'a> {
    pub id: StreamId,
    pub fields: FieldsRef<'a>,
    /// When it was added (None: now, after everything held).
    pub added: Option<Version>,
    /// When `XDEL` removed it (None: it shows).
    pub deleted: Option<Version>,
}

impl<'a> Held<'a> {
    /// An entry being added now.
    pub fn new(id: StreamId, fields: FieldsRef<'a>) -> Held<'a> {
        Held {
            id,
            fields,
            added: None,
            deleted: None,
        }
    }
}

/// The last node of a stream as entries are appended to it, by size only:
/// its master ID and fields, its entries, its listpack's bytes.
#[derive(Default)]
pub struct NodeFill {
    master: Option<StreamId>,
    fields: Vec<Vec<u8>>,
    /// Entries in it, shown and deleted.
    count: u64,
    deleted: u64,
    /// The elements' bytes after the two counts.
    body: usize,
    /// The latest `XDEL` of its entries: when every entry is deleted,
    /// when Redis freed the node (`streamIteratorRemoveEntry`).
    last_delete: Version,
}

impl NodeFill {
    /// Whether entry `e` starts a new node: there is none, its count or
    /// bytes are full, or every entry of it was deleted before `e` came.
    pub fn starts_new(&self, e: &Held<'_>) -> bool {
        if self.master.is_none() {
            return true;
        }
        let freed = self.count == self.deleted && e.added.is_none_or(|a| self.last_delete < a);
        freed || self.count >= super::parse::node_entries() || !self.fits_bytes(e.fields)
    }

    /// The listpack's size now (`lpBytes`): header, elements, end byte.
    pub fn bytes(&self) -> usize {
        6 + Lp::Int(self.count as i64 - self.deleted as i64).size()
            + Lp::Int(self.deleted as i64).size()
            + self.body
            + 1
    }

    /// A node of `n` shown entries of these fields and values (IDs equal
    /// to its master's): its size by arithmetic rather than `n` appends
    /// (every entry after the first adds the same bytes).
    pub fn of_copies(fields: FieldsRef<'_>, n: u64) -> NodeFill {
        let mut fill = NodeFill::default();
        if n == 0 {
            return fill;
        }
        let copy = Held::new(StreamId::MIN, fields);
        fill.push(&copy);
        if n > 1 {
            let body = fill.body;
            if fill.push(&copy) {
                return fill;
            }
            fill.body += (fill.body - body) * (n - 2) as usize;
            fill.count = n;
        }
        fill
    }

    /// Whether one more entry of these fields and values fits (the bytes
    /// only).
    pub fn fits_bytes(&self, fields: FieldsRef<'_>) -> bool {
        let total: usize = fields.iter().map(|(f, v)| f.len() + v.len()).sum();
        self.bytes() + total < node_max_bytes()
    }

    /// Appends entry `e`, starting a new node first when it must; true
    /// when it did.
    pub fn push(&mut self, e: &Held<'_>) -> bool {
        let new = self.starts_new(e);
        self.push_as(e, new);
        new
    }

    /// Appends entry `e`, in a new node when `new` (what
    /// [`NodeFill::starts_new`] answered for it).
    pub fn push_as(&mut self, e: &Held<'_>, new: bool) {
        let (id, fields) = (e.id, e.fields);
        if new {
            *self = NodeFill {
                master: Some(id),
                fields: fields.iter().map(|(f, _)| f.to_vec()).collect(),
                ..NodeFill::default()
            };
            self.body = Lp::Int(self.fields.len() as i64).size()
                + self.fields.iter().map(|f| Lp::Str(f).size()).sum::<usize>()
                + Lp::Int(0).size();
        }
        let master = self.master.unwrap_or(id);
        let n_pairs = fields.len();
        let same = n_pairs == self.fields.len()
            && fields
                .iter()
                .zip(&self.fields)
                .all(|((f, _), m)| f == &m[..]);
        // flags, ms and seq against the master's, [count, fields],
        // values, and the entry's element count.
        let mut elements = 3 + n_pairs;
        let mut body = Lp::Int(0).size()
            + Lp::Int(id.ms.wrapping_sub(master.ms) as i64).size()
            + Lp::Int(id.seq.wrapping_sub(master.seq) as i64).size();
        for (f, v) in fields.iter() {
            if !same {
                body += Lp::Str(f).size();
            }
            body += Lp::Str(v).size();
        }
        if !same {
            body += Lp::Int(n_pairs as i64).size();
            elements += n_pairs + 1;
        }
        body += Lp::Int(elements as i64).size();
        self.body += body;
        self.count += 1;
        if let Some(at) = e.deleted {
            self.deleted += 1;
            self.last_delete = self.last_delete.max(at);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use elsa_lattice::stream_fields::Fields;

    #[test]
    fn back_lengths_end_where_redis_ends_them() {
        // `lpEncodeBacklen`: 127 takes one byte, 16,382 two, 16,383 three.
        for (len, bytes) in [
            (127, 1),
            (128, 2),
            (16_382, 2),
            (16_383, 3),
            (2_097_150, 3),
            (2_097_151, 4),
            (268_435_454, 4),
            (268_435_455, 5),
        ] {
            assert_eq!(backlen_size(len), bytes, "{len}");
        }
    }

    #[test]
    fn lengths_match_the_encoding() {
        for v in [
            0i64,
            127,
            128,
            -1,
            4095,
            -4096,
            4096,
            32767,
            40_000,
            9_000_000,
            1 << 40,
        ] {
            let mut out = Vec::new();
            Lp::Int(v).encode(&mut out);
            assert_eq!(out.len(), Lp::Int(v).size(), "{v}");
        }
        for s in [
            &b""[..],
            b"abc",
            b"12",
            b"012",
            &[b'x'; 63],
            &[b'x'; 64],
            &[b'x'; 5000],
        ] {
            let mut out = Vec::new();
            Lp::Str(s).encode(&mut out);
            assert_eq!(out.len(), Lp::Str(s).size(), "{}", s.len());
        }
    }

    #[test]
    fn a_node_ends_at_the_byte_limit() {
        // 100-byte values: 4096 bytes hold 38 of them with their master.
        let v = [b'v'; 100];
        let fields = Fields::new([(&b"f"[..], &v[..])]);
        let mut fill = NodeFill::default();
        let mut starts = Vec::new();
        for i in 0..100u64 {
            if fill.push(&Held::new(StreamId::new(1, i), fields.as_ref())) {
                starts.push(i);
            }
        }
        assert_eq!(starts[0], 0);
        let per = starts[1];
        assert!((30..45).contains(&per), "{per}");
        assert!(starts.windows(2).all(|w| w[1] - w[0] == per));
    }

    #[test]
    fn copies_weigh_as_many_appends() {
        let v = [b'v'; 10];
        let fields = Fields::new([(&b"f"[..], &v[..]), (&b"n"[..], &b"12"[..])]);
        for n in [1u64, 2, 3, 50, 99] {
            let mut fill = NodeFill::default();
            for _ in 0..n {
                fill.push(&Held::new(StreamId::MIN, fields.as_ref()));
            }
            let copies = NodeFill::of_copies(fields.as_ref(), n);
            assert_eq!(
                (copies.bytes(), copies.count),
                (fill.bytes(), fill.count),
                "{n}"
            );
        }
    }

    #[test]
    fn integers_read_as_listpacks_read_them() {
        for (s, want) in [
            (&b"0"[..], Some(0)),
            (b"-1", Some(-1)),
            (b"9223372036854775807", Some(i64::MAX)),
            (b"-9223372036854775808", Some(i64::MIN)),
            (b"9223372036854775808", None),
            (b"-0", None),
            (b"01", None),
            (b"+1", None),
            (b"", None),
            (b"-", None),
            (b"1a", None),
            (b"12345678901234567890", None),
        ] {
            assert_eq!(as_int(s), want, "{}", String::from_utf8_lossy(s));
        }
    }
}

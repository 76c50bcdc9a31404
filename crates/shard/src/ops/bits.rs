//! Bit commands (Redis's `bitops.c`): GETBIT, SETBIT, BITCOUNT, BITPOS,
//! BITOP (BITFIELD is `super::bitfield`).
//! Bit 0 is the most significant bit of the first byte; a string reads as
//! zero bits past its end.

use bytes::{Buf, BufMut, Bytes};

use super::hashes::{get_list, put_list};
use super::{keeping_ttl, read_string, BitRange, Current, KeyView, OpReply, Value};

fn mask(offset: u64) -> u8 {
    1 << (7 - (offset & 7))
}

pub(super) fn getbit(key: &[u8], view: &mut impl KeyView, offset: u64) -> OpReply {
    let set = read_string!(view, key).is_some_and(|c| {
        usize::try_from(offset >> 3)
            .ok()
            .and_then(|byte| c.value.get(byte))
            .is_some_and(|b| b & mask(offset) != 0)
    });
    OpReply::Int(set as i64)
}

/// SETBIT: answers the bit's old value. The string grows (zero-padded) to
/// hold the bit; a key left exactly as it was is not written, so a WATCH
/// on it stays valid, as in Redis. The parser keeps `offset` under 2^32.
pub(super) fn setbit(key: &[u8], view: &mut impl KeyView, offset: u64, on: bool) -> OpReply {
    let old = read_string!(view, key);
    let byte = (offset >> 3) as usize;
    let mut v = old.as_ref().map_or_else(Vec::new, |c| c.value.to_vec());
    let grew = old.is_none() || v.len() <= byte;
    if v.len() <= byte {
        v.resize(byte + 1, 0);
    }
    let was = v[byte] & mask(offset) != 0;
    if grew || was != on {
        if on {
            v[byte] |= mask(offset);
        } else {
            v[byte] &= !mask(offset);
        }
        view.write(key, keeping_ttl(old.as_ref(), Bytes::from(v)));
        super::notify(view, crate::notify::STRING, "setbit", key);
    }
    OpReply::Int(was as i64)
}

/// Where a range's first and last bytes start and end, once resolved: a
/// byte span plus the masks of bits outside the range in its first and
/// last byte (BIT ranges only).
struct Resolved {
    start: usize,
    end: usize,
    first_out: u8,
    last_out: u8,
}

/// Redis's resolution of `start..=end` over a string of `len` bytes (in
/// bits when `bits`): negative indexes from the end, clamped; `None` when
/// nothing is left.
fn resolve(len: usize, start: i64, end: i64, bits: bool) -> Option<Resolved> {
    let total = if bits { (len as i64) << 3 } else { len as i64 };
    let mut start = if start < 0 { total + start } else { start }.max(0);
    let mut end = if end < 0 { total + end } else { end }.max(0);
    if end >= total {
        end = total - 1;
    }
    let (mut first_out, mut last_out) = (0u8, 0u8);
    if bits && start <= end {
        first_out = !((1u16 << (8 - (start & 7))) - 1) as u8;
        last_out = ((1u16 << (7 - (end & 7))) - 1) as u8;
        start >>= 3;
        end >>= 3;
    }
    (start <= end).then_some(Resolved {
        start: start as usize,
        end: end as usize,
        first_out,
        last_out,
    })
}

fn popcount(bytes: &[u8]) -> i64 {
    bytes.iter().map(|b| i64::from(b.count_ones())).sum()
}

pub(super) fn bitcount(key: &[u8], view: &mut impl KeyView, range: BitRange) -> OpReply {
    let Some(c) = read_string!(view, key) else {
        return OpReply::Int(0);
    };
    let v = &c.value[..];
    let (start, end, bits) = match range {
        BitRange::Refused(e) => return OpReply::Error(e),
        BitRange::All => return OpReply::Int(popcount(v)),
        BitRange::Span { start, end, bits } => (start, end.unwrap_or(-1), bits),
    };
    // Checked before anything is clamped, as Redis does.
    if start < 0 && end < 0 && start > end {
        return OpReply::Int(0);
    }
    let Some(r) = resolve(v.len(), start, end, bits) else {
        return OpReply::Int(0);
    };
    let mut count = popcount(&v[r.start..=r.end]);
    count -= i64::from((v[r.start] & r.first_out).count_ones());
    count -= i64::from((v[r.end] & r.last_out).count_ones());
    OpReply::Int(count)
}

/// The first `bit` in `bytes`; not found: -1 for a 1, and for a 0 the
/// position just past the end (the string continues with zeros).
fn first_bit(bytes: &[u8], bit: bool) -> i64 {
    for (i, &b) in bytes.iter().enumerate() {
        let b = if bit { b } else { !b };
        if b != 0 {
            return (i as i64) * 8 + i64::from(b.leading_zeros());
        }
    }
    if bit {
        -1
    } else {
        (bytes.len() as i64) * 8
    }
}

/// BITPOS: Redis's search, edge bytes of a BIT range masked off.
pub(super) fn bitpos(key: &[u8], view: &mut impl KeyView, bit: bool, range: BitRange) -> OpReply {
    let Some(c) = read_string!(view, key) else {
        // A missing key is an endless run of zeros.
        return OpReply::Int(if bit { -1 } else { 0 });
    };
    let v = &c.value[..];
    let len = v.len() as i64;
    let (start, end, end_given, bits) = match range {
        BitRange::Refused(e) => return OpReply::Error(e),
        BitRange::All => (0, len - 1, false, false),
        BitRange::Span { start, end, bits } => (start, end.unwrap_or(len - 1), end.is_some(), bits),
    };
    let Some(r) = resolve(v.len(), start, end, bits) else {
        // An empty range holds neither a 0 nor a 1.
        return OpReply::Int(-1);
    };
    let mut start = r.start;
    let mut bytes = r.end - r.start + 1;
    let pos = 'found: {
        if r.first_out != 0 {
            let mut b = if bit {
                v[start] & !r.first_out
            } else {
                v[start] | r.first_out
            };
            if r.last_out != 0 && bytes == 1 {
                b = if bit { b & !r.last_out } else { b | r.last_out };
            }
            let pos = first_bit(&[b], bit);
            if bytes == 1 || (pos != -1 && pos != 8) {
                break 'found pos;
            }
            start += 1;
            bytes -= 1;
        }
        let whole = bytes - usize::from(r.last_out != 0);
        if whole > 0 {
            let pos = first_bit(&v[start..start + whole], bit);
            if bytes == whole || (pos != -1 && pos != (whole as i64) << 3) {
                break 'found pos;
            }
            start += whole;
            bytes -= whole;
        }
        let b = if bit {
            v[r.end] & !r.last_out
        } else {
            v[r.end] | r.last_out
        };
        first_bit(&[b], bit)
    };
    // With an explicit end the zeros past it are not part of the range.
    if end_given && !bit && pos == (bytes as i64) << 3 {
        return OpReply::Int(-1);
    }
    OpReply::Int(if pos == -1 {
        -1
    } else {
        pos + ((start as i64) << 3)
    })
}

/// BITOP's operation (Redis 7.0's four).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BitOpKind {
    /// AND
    And,
    /// OR
    Or,
    /// XOR
    Xor,
    /// NOT (one source)
    Not,
}

/// BITOP op destination key [key …], run on the first source: `keys` are
/// the other sources, then the destination, last (every path holds them
/// all, as SINTERSTORE's; `Op::other_keys`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BitOp {
    /// Which operation.
    pub how: BitOpKind,
    /// The other sources, and the destination last.
    pub keys: Vec<Bytes>,
}

impl BitOp {
    /// Combines the sources (a missing one reads as an empty string, a
    /// shorter one as zero-padded) into the destination, which it
    /// replaces whatever it held, TTL included; an empty result deletes
    /// it. Answers the result's length. Any source of another type is
    /// WRONGTYPE, before anything is written.
    pub fn apply(&self, key: &[u8], view: &mut impl KeyView) -> OpReply {
        let Some((dest, others)) = self.keys.split_last() else {
            return OpReply::Error(super::ERR_SYNTAX);
        };
        let mut sources = Vec::with_capacity(others.len() + 1);
        sources.push(read_string!(view, key).map(|c| c.value));
        for k in others {
            sources.push(read_string!(view, k).map(|c| c.value));
        }
        let len = sources.iter().flatten().map(Bytes::len).max().unwrap_or(0);
        if len == 0 {
            let existed = view.notifies(crate::notify::GENERIC)
                && view.kind(dest) != elsa_lattice::Kind::None;
            view.store(dest, None);
            if existed {
                view.notify(crate::notify::GENERIC, "del", dest);
            }
            return OpReply::Int(0);
        }
        // The first source, zero-padded; each other one folded in a
        // byte at a time along its length (past it, AND clears and OR
        // and XOR keep), so the loops are plain slices.
        let mut result = vec![0u8; len];
        let first = sources[0].as_deref().unwrap_or(&[]);
        result[..first.len()].copy_from_slice(first);
        for s in &sources[1..] {
            let s = s.as_deref().unwrap_or(&[]);
            let (head, tail) = result.split_at_mut(s.len());
            match self.how {
                BitOpKind::And => {
                    head.iter_mut().zip(s).for_each(|(r, b)| *r &= b);
                    tail.fill(0);
                }
                BitOpKind::Or => head.iter_mut().zip(s).for_each(|(r, b)| *r |= b),
                BitOpKind::Xor => head.iter_mut().zip(s).for_each(|(r, b)| *r ^= b),
                BitOpKind::Not => {}
            }
        }
        if self.how == BitOpKind::Not {
            result.iter_mut().for_each(|r| *r = !*r);
        }
        view.store(
            dest,
            Some(Value::Str(Current {
                value: Bytes::from(result),
                expire_ms: None,
                ttl_of: None,
            })),
        );
        super::notify(view, crate::notify::STRING, "set", dest);
        OpReply::Int(len as i64)
    }

    /// The wire form.
    pub fn encode(&self) -> Bytes {
        let mut out = Vec::new();
        out.put_u8(match self.how {
            BitOpKind::And => 0,
            BitOpKind::Or => 1,
            BitOpKind::Xor => 2,
            BitOpKind::Not => 3,
        });
        put_list(&mut out, &self.keys);
        out.into()
    }

    /// Reads what [`BitOp::encode`] wrote; `None` when malformed.
    pub fn decode(mut buf: Bytes) -> Option<BitOp> {
        if !buf.has_remaining() {
            return None;
        }
        let how = match buf.get_u8() {
            0 => BitOpKind::And,
            1 => BitOpKind::Or,
            2 => BitOpKind::Xor,
            3 => BitOpKind::Not,
            _ => return None,
        };
        let keys = get_list(&mut buf)?;
        (!keys.is_empty() && !buf.has_remaining()).then_some(BitOp { how, keys })
    }
}

#[cfg(test)]
mod tests {
    use super::super::testing::{bulk, MapView};
    use super::super::{Op, ERR_SYNTAX};
    use super::*;

    proptest::proptest! {
        /// Any indexes on any string: an answer, never a panic, and a
        /// count within the string's bits.
        #[test]
        fn any_range_is_answered(
            value in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..12),
            start in proptest::prelude::any::<i64>(),
            end in proptest::option::of(proptest::prelude::any::<i64>()),
            bits in proptest::prelude::any::<bool>(),
            bit in proptest::prelude::any::<bool>(),
        ) {
            let mut v = MapView::default();
            v.put("k", &value);
            let range = span(start, end, bits);
            let count = v.run("k", Op::BitCount(span(start, Some(end.unwrap_or(-1)), bits)));
            proptest::prop_assert!(
                matches!(count, OpReply::Int(n) if (0..=8 * value.len() as i64).contains(&n))
            );
            let pos = v.run("k", Op::BitPos { bit, range });
            proptest::prop_assert!(
                matches!(pos, OpReply::Int(n) if (-1..=8 * value.len() as i64).contains(&n))
            );
        }
    }

    fn span(start: i64, end: Option<i64>, bits: bool) -> BitRange {
        BitRange::Span { start, end, bits }
    }

    #[test]
    fn setbit_grows_with_zeros_and_answers_the_old_bit() {
        let mut v = MapView::default();
        let set = |offset, on| Op::SetBit { offset, on };
        assert_eq!(v.run("b", set(7, true)), OpReply::Int(0));
        assert_eq!(v.run("b", Op::Get), bulk(b"\x01"));
        assert_eq!(v.run("b", set(7, true)), OpReply::Int(1));
        assert_eq!(v.run("b", set(17, false)), OpReply::Int(0));
        assert_eq!(v.run("b", Op::Get), bulk(b"\x01\0\0"), "grew to 3 bytes");
        assert_eq!(v.run("b", Op::GetBit(7)), OpReply::Int(1));
        assert_eq!(v.run("b", Op::GetBit(6)), OpReply::Int(0));
        assert_eq!(v.run("b", Op::GetBit(1 << 31)), OpReply::Int(0));
        assert_eq!(v.run("none", Op::GetBit(0)), OpReply::Int(0));
        assert_eq!(v.run("z", set(0, false)), OpReply::Int(0));
        assert_eq!(v.run("z", Op::Get), bulk(b"\0"), "clearing creates the key");
    }

    /// Expected answers checked against redis-server 7.0 with
    /// `SET k "foobar"` (popcounts 4 6 6 3 4 4 → 26).
    #[test]
    fn bitcount_ranges_match_redis() {
        let mut v = MapView::default();
        v.put("k", b"foobar");
        for (range, want) in [
            (BitRange::All, 26),
            (span(0, Some(0), false), 4),
            (span(1, Some(1), false), 6),
            (span(1, Some(1), true), 1),
            (span(5, Some(30), true), 17),
            (span(-1, Some(-1), false), 4),
            (span(-2, Some(-1), true), 1),
            (span(-1, Some(-2), false), 0),
            (span(2, Some(1), false), 0),
            (span(0, Some(i64::MAX), true), 26),
            (span(i64::MIN, Some(i64::MAX), false), 26),
            (span(i64::MIN, Some(-1), true), 26),
            (span(100, Some(200), false), 0),
        ] {
            assert_eq!(
                v.run("k", Op::BitCount(range)),
                OpReply::Int(want),
                "{range:?}"
            );
        }
        assert_eq!(
            v.run("k", Op::BitCount(BitRange::Refused(ERR_SYNTAX))),
            OpReply::Error(ERR_SYNTAX)
        );
        assert_eq!(
            v.run("missing", Op::BitCount(BitRange::Refused(ERR_SYNTAX))),
            OpReply::Int(0),
            "a missing key answers 0 before its arguments are read"
        );
        v.put("e", b"");
        assert_eq!(
            v.run("e", Op::BitCount(span(0, Some(-1), true))),
            OpReply::Int(0)
        );
    }

    /// Expected answers checked against redis-server 7.0.
    #[test]
    fn bitpos_matches_redis() {
        let mut v = MapView::default();
        v.put("a", b"\xff\xf0\x00");
        v.put("z", b"\x00\x00\x00");
        v.put("o", b"\xff\xff\xff");
        let pos = |v: &mut MapView, k: &str, bit, range| v.run(k, Op::BitPos { bit, range });
        for (k, bit, range, want) in [
            ("a", false, BitRange::All, 12),
            ("a", true, BitRange::All, 0),
            ("a", true, span(2, None, false), -1),
            ("a", false, span(1, None, false), 12),
            ("a", false, span(0, Some(0), false), -1),
            ("a", true, span(7, Some(15), true), 7),
            ("a", false, span(7, Some(15), true), 12),
            ("a", false, span(-2, Some(-1), true), 22),
            ("z", true, BitRange::All, -1),
            ("z", false, BitRange::All, 0),
            ("o", false, BitRange::All, 24),
            ("o", false, span(0, None, false), 24),
            ("o", false, span(0, Some(-1), false), -1),
            ("o", false, span(0, Some(-1), true), -1),
            ("o", true, span(9, Some(9), true), 9),
            ("o", true, span(5, Some(2), false), -1),
        ] {
            assert_eq!(
                pos(&mut v, k, bit, range),
                OpReply::Int(want),
                "{k} {bit} {range:?}"
            );
        }
        assert_eq!(
            pos(&mut v, "missing", true, BitRange::All),
            OpReply::Int(-1)
        );
        assert_eq!(
            pos(&mut v, "missing", false, BitRange::All),
            OpReply::Int(0)
        );
        v.put("e", b"");
        assert_eq!(
            pos(&mut v, "e", false, BitRange::All),
            OpReply::Int(-1),
            "an empty string has no range to search"
        );
    }

    #[test]
    fn bitop_zero_pads_replaces_the_destination_and_deletes_on_empty() {
        let mut v = MapView::default();
        let set = |v: &mut MapView, k: &str, val: &[u8]| {
            v.run(
                k,
                Op::Set {
                    value: Bytes::copy_from_slice(val),
                    cond: crate::ops::SetCond::Always,
                    expiry: crate::ops::Expiry::Clear,
                    reply: crate::ops::SetReply::Ok,
                },
            )
        };
        set(&mut v, "a", b"\xff\x0f\x01");
        set(&mut v, "b", b"\x0f");
        let op = |how, keys: &[&str]| {
            Op::BitOp(BitOp {
                how,
                keys: keys
                    .iter()
                    .map(|k| Bytes::copy_from_slice(k.as_bytes()))
                    .collect(),
            })
        };
        assert_eq!(
            v.run("a", op(BitOpKind::And, &["b", "none", "d"])),
            OpReply::Int(3)
        );
        assert_eq!(v.run("d", Op::Get), bulk(b"\0\0\0"));
        assert_eq!(v.run("a", op(BitOpKind::Xor, &["b", "d"])), OpReply::Int(3));
        assert_eq!(v.run("d", Op::Get), bulk(b"\xf0\x0f\x01"));
        assert_eq!(v.run("b", op(BitOpKind::Not, &["d"])), OpReply::Int(1));
        assert_eq!(v.run("d", Op::Get), bulk(b"\xf0"));
        assert_eq!(v.run("none", op(BitOpKind::Or, &["d"])), OpReply::Int(0));
        assert_eq!(v.run("d", Op::Exists), OpReply::Int(0));
        let round = BitOp {
            how: BitOpKind::Or,
            keys: vec![Bytes::from_static(b"x"), Bytes::from_static(b"dest")],
        };
        assert_eq!(BitOp::decode(round.encode()), Some(round.clone()));
        assert_eq!(BitOp::decode(Bytes::from_static(&[9])), None);
        assert_eq!(BitOp::decode(round.encode().slice(..5)), None);
    }
}

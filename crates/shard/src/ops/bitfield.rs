//! BITFIELD and BITFIELD_RO (Redis's `bitfieldGeneric` in `bitops.c`):
//! integers of 1 to 64 bits, signed or unsigned, read and written at any
//! bit offset of a string, as SETBIT numbers bits (bit 0 is the most
//! significant bit of the first byte). The parser (`elsa-server`'s
//! `cmd::bits`) checks every argument first, as Redis does, so an op here
//! only meets the key.
//!
//! A BITFIELD that writes is a write of the whole string, as SETBIT's:
//! across regions the last commit wins (`docs/commands.md`).

use bytes::{Buf, BufMut, Bytes};

use super::{keeping_ttl, read_string, KeyView, OpReply};

/// What a subcommand does when a value does not fit its width.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Overflow {
    /// Wrap around (the default): modulo 2^bits, signed as two's complement.
    Wrap,
    /// Saturate at the width's minimum or maximum.
    Sat,
    /// Write nothing and answer nil.
    Fail,
}

/// One subcommand's action.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Action {
    /// GET: answers the field.
    Get,
    /// SET value: answers the old field.
    Set(i64),
    /// INCRBY increment: answers the new field.
    IncrBy(i64),
}

/// One GET, SET or INCRBY, with the OVERFLOW in force where it stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Field {
    /// What it does.
    pub action: Action,
    /// Signed (`i<bits>`) or unsigned (`u<bits>`).
    pub signed: bool,
    /// Width: 1–64 signed, 1–63 unsigned.
    pub bits: u8,
    /// Bit offset of the field's most significant bit.
    pub offset: u64,
    /// The OVERFLOW given last before it.
    pub overflow: Overflow,
}

/// A whole BITFIELD (or BITFIELD_RO): its subcommands in order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BitField(pub Vec<Field>);

impl BitField {
    /// True when a subcommand writes (SET or INCRBY).
    pub fn is_write(&self) -> bool {
        self.0.iter().any(|f| f.action != Action::Get)
    }

    /// Runs the subcommands on `key`. With a write among them the string
    /// is first grown (zero-padded, created if absent) to the farthest bit
    /// a write reaches, as Redis does, even when no write then changes it.
    pub fn apply(&self, key: &[u8], view: &mut impl KeyView) -> OpReply {
        let old = read_string!(view, key);
        if !self.is_write() {
            let value = old.as_ref().map_or(&[][..], |c| &c.value[..]);
            return OpReply::Array(self.0.iter().map(|f| get(value, f)).collect());
        }
        let farthest = self
            .0
            .iter()
            .filter(|f| f.action != Action::Get)
            .map(|f| f.offset + u64::from(f.bits) - 1)
            .max()
            .unwrap_or(0);
        let mut v = old.as_ref().map_or_else(Vec::new, |c| c.value.to_vec());
        // The parser keeps offsets within a 512 MB string.
        let len = (farthest >> 3) as usize + 1;
        if v.len() < len {
            v.resize(len, 0);
        }
        let replies: Vec<OpReply> = self.0.iter().map(|f| run(&mut v, f)).collect();
        // Redis's `changes`: a write that ran (not refused by OVERFLOW
        // FAIL, which answers nil) on a string it grew or changed.
        let ran = self
            .0
            .iter()
            .zip(&replies)
            .any(|(f, r)| f.action != Action::Get && *r != OpReply::Nil);
        // A key left exactly as it was is not written, so a WATCH on it
        // stays valid (as SETBIT's).
        if old.as_ref().is_none_or(|c| c.value[..] != v[..]) {
            view.write(key, keeping_ttl(old.as_ref(), Bytes::from(v)));
            if ran {
                super::notify(view, crate::notify::STRING, "setbit", key);
            }
        }
        OpReply::Array(replies)
    }

    /// Appends the wire form to `out`.
    pub fn encode(&self) -> Bytes {
        let mut out = Vec::with_capacity(4 + self.0.len() * 20);
        out.put_u32_le(self.0.len() as u32);
        for f in &self.0 {
            let (kind, n) = match f.action {
                Action::Get => (0, 0),
                Action::Set(n) => (1, n),
                Action::IncrBy(n) => (2, n),
            };
            out.put_u8(kind);
            out.put_u8(u8::from(f.signed));
            out.put_u8(f.bits);
            out.put_u8(match f.overflow {
                Overflow::Wrap => 0,
                Overflow::Sat => 1,
                Overflow::Fail => 2,
            });
            out.put_u64_le(f.offset);
            out.put_i64_le(n);
        }
        out.into()
    }

    /// Reads what [`BitField::encode`] wrote; `None` when malformed.
    pub fn decode(mut buf: Bytes) -> Option<BitField> {
        if buf.remaining() < 4 {
            return None;
        }
        let n = buf.get_u32_le() as usize;
        // Each field is 20 bytes: a count the buffer cannot hold is refused
        // before anything is allocated for it.
        if buf.remaining() != n.checked_mul(20)? {
            return None;
        }
        let mut fields = Vec::with_capacity(n);
        for _ in 0..n {
            let (kind, signed, bits, overflow) =
                (buf.get_u8(), buf.get_u8(), buf.get_u8(), buf.get_u8());
            let (offset, value) = (buf.get_u64_le(), buf.get_i64_le());
            let max_bits = if signed == 1 { 64 } else { 63 };
            if signed > 1 || bits == 0 || bits > max_bits {
                return None;
            }
            fields.push(Field {
                action: match kind {
                    0 => Action::Get,
                    1 => Action::Set(value),
                    2 => Action::IncrBy(value),
                    _ => return None,
                },
                signed: signed == 1,
                bits,
                offset,
                overflow: match overflow {
                    0 => Overflow::Wrap,
                    1 => Overflow::Sat,
                    2 => Overflow::Fail,
                    _ => return None,
                },
            });
        }
        Some(BitField(fields))
    }
}

/// A GET: the field read from `value` as if zero-padded past its end.
fn get(value: &[u8], f: &Field) -> OpReply {
    let u = read_bits(value, f.offset, f.bits);
    OpReply::Int(if f.signed {
        sign_extend(u, f.bits)
    } else {
        u as i64
    })
}

/// A SET or INCRBY on `v` (already grown to hold the field), or a GET.
fn run(v: &mut [u8], f: &Field) -> OpReply {
    let bits = u32::from(f.bits);
    let (written, answer) = match f.action {
        Action::Get => return get(v, f),
        Action::Set(value) if f.signed => {
            let old = sign_extend(read_bits(v, f.offset, f.bits), f.bits);
            let new = match signed_overflow(value, 0, bits, f.overflow) {
                Fit::Yes => value,
                Fit::No(limit) => limit,
                Fit::Fail => return OpReply::Nil,
            };
            (new as u64, old)
        }
        Action::IncrBy(by) if f.signed => {
            let old = sign_extend(read_bits(v, f.offset, f.bits), f.bits);
            let new = match signed_overflow(old, by, bits, f.overflow) {
                Fit::Yes => old.wrapping_add(by),
                Fit::No(limit) => limit,
                Fit::Fail => return OpReply::Nil,
            };
            (new as u64, new)
        }
        Action::Set(value) => {
            let old = read_bits(v, f.offset, f.bits);
            // A negative value is its two's complement, as Redis's cast.
            let new = match unsigned_overflow(value as u64, 0, bits, f.overflow) {
                Fit::Yes => value as u64,
                Fit::No(limit) => limit,
                Fit::Fail => return OpReply::Nil,
            };
            (new, old as i64)
        }
        Action::IncrBy(by) => {
            let old = read_bits(v, f.offset, f.bits);
            let new = match unsigned_overflow(old, by, bits, f.overflow) {
                Fit::Yes => old.wrapping_add(by as u64),
                Fit::No(limit) => limit,
                Fit::Fail => return OpReply::Nil,
            };
            (new, new as i64)
        }
    };
    write_bits(v, f.offset, f.bits, written);
    OpReply::Int(answer)
}

/// Whether a result fits its width, and what to store when it does not.
enum Fit<T> {
    Yes,
    /// Store this instead (wrapped or saturated).
    No(T),
    /// OVERFLOW FAIL: store nothing.
    Fail,
}

/// Redis's `checkUnsignedBitfieldOverflow`: `value + incr` in `bits`
/// unsigned bits (the arithmetic wraps as C's does).
fn unsigned_overflow(value: u64, incr: i64, bits: u32, overflow: Overflow) -> Fit<u64> {
    let max = if bits == 64 {
        u64::MAX
    } else {
        (1u64 << bits) - 1
    };
    let max_incr = max.wrapping_sub(value) as i64;
    let min_incr = value.wrapping_neg() as i64;
    let over = value > max || (incr > 0 && incr > max_incr);
    let under = !over && incr < 0 && incr < min_incr;
    if !over && !under {
        return Fit::Yes;
    }
    match overflow {
        Overflow::Fail => Fit::Fail,
        Overflow::Sat => Fit::No(if over { max } else { 0 }),
        Overflow::Wrap => Fit::No(value.wrapping_add(incr as u64) & max),
    }
}

/// Redis's `checkSignedBitfieldOverflow`: `value + incr` in `bits` signed
/// bits (the arithmetic wraps as C's does).
fn signed_overflow(value: i64, incr: i64, bits: u32, overflow: Overflow) -> Fit<i64> {
    let max = if bits == 64 {
        i64::MAX
    } else {
        (1i64 << (bits - 1)) - 1
    };
    let min = -max - 1;
    let max_incr = (max as u64).wrapping_sub(value as u64) as i64;
    let min_incr = min.wrapping_sub(value);
    let over = value > max
        || (bits != 64 && incr > max_incr)
        || (value >= 0 && incr > 0 && incr > max_incr);
    let under = !over
        && (value < min
            || (bits != 64 && incr < min_incr)
            || (value < 0 && incr < 0 && incr < min_incr));
    if !over && !under {
        return Fit::Yes;
    }
    match overflow {
        Overflow::Fail => Fit::Fail,
        Overflow::Sat => Fit::No(if over { max } else { min }),
        Overflow::Wrap => Fit::No(sign_extend(
            (value as u64).wrapping_add(incr as u64),
            bits as u8,
        )),
    }
}

/// The low `bits` bits of `u` as a signed number of that width.
fn sign_extend(u: u64, bits: u8) -> i64 {
    let shift = 64 - u32::from(bits);
    ((u << shift) as i64) >> shift
}

/// The `bits`-bit field at bit `offset`, zeros past the end of `v`.
fn read_bits(v: &[u8], offset: u64, bits: u8) -> u64 {
    (0..u64::from(bits)).fold(0, |acc, i| {
        let at = offset + i;
        let byte = usize::try_from(at >> 3).ok().and_then(|b| v.get(b));
        let bit = byte.map_or(0, |b| (b >> (7 - (at & 7))) & 1);
        (acc << 1) | u64::from(bit)
    })
}

/// Writes the low `bits` bits of `value` at bit `offset` (inside `v`).
fn write_bits(v: &mut [u8], offset: u64, bits: u8, value: u64) {
    for i in 0..u64::from(bits) {
        let at = offset + i;
        let on = (value >> (u64::from(bits) - 1 - i)) & 1 == 1;
        let mask = 1u8 << (7 - (at & 7));
        let byte = &mut v[(at >> 3) as usize];
        if on {
            *byte |= mask;
        } else {
            *byte &= !mask;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::testing::MapView as View;
    use super::*;
    use crate::ops::Op;

    fn field(action: Action, ty: &str, offset: u64, overflow: Overflow) -> Field {
        Field {
            action,
            signed: ty.starts_with('i'),
            bits: ty[1..].parse().unwrap(),
            offset,
            overflow,
        }
    }

    fn ints(r: OpReply) -> Vec<Option<i64>> {
        match r {
            OpReply::Array(items) => items
                .into_iter()
                .map(|i| match i {
                    OpReply::Int(n) => Some(n),
                    OpReply::Nil => None,
                    other => panic!("not an integer: {other:?}"),
                })
                .collect(),
            other => panic!("not an array: {other:?}"),
        }
    }

    #[test]
    fn the_examples_of_redis_documentation() {
        let mut v = View::default();
        // BITFIELD mykey INCRBY i5 100 1 GET u4 0
        let op = BitField(vec![
            field(Action::IncrBy(1), "i5", 100, Overflow::Wrap),
            field(Action::Get, "u4", 0, Overflow::Wrap),
        ]);
        assert_eq!(ints(v.run("mykey", Op::BitField(op))), [Some(1), Some(0)]);
        // BITFIELD mykey incrby u2 100 1 OVERFLOW SAT incrby u2 102 1, four
        // times: 1 1, 2 2, 3 3, 0 3.
        let op = BitField(vec![
            field(Action::IncrBy(1), "u2", 100, Overflow::Wrap),
            field(Action::IncrBy(1), "u2", 102, Overflow::Sat),
        ]);
        let runs: Vec<_> = (0..4)
            .map(|_| ints(v.run("k2", Op::BitField(op.clone()))))
            .collect();
        assert_eq!(
            runs,
            [
                [Some(1), Some(1)],
                [Some(2), Some(2)],
                [Some(3), Some(3)],
                [Some(0), Some(3)]
            ]
        );
        // OVERFLOW FAIL: nil, and nothing written.
        let op = BitField(vec![field(Action::IncrBy(1), "u2", 102, Overflow::Fail)]);
        assert_eq!(ints(v.run("k2", Op::BitField(op))), [None]);
    }

    #[test]
    fn set_answers_the_old_value_and_stores_the_new_one_big_endian() {
        let mut v = View::default();
        let op = BitField(vec![
            field(Action::Set(23), "u5", 7, Overflow::Wrap),
            field(Action::Get, "u16", 0, Overflow::Wrap),
        ]);
        // 23 as 5 bits at offset 7: 00000001|01110000 (Redis's own example).
        assert_eq!(
            ints(v.run("k", Op::BitField(op))),
            [Some(0), Some(0b1_0111_0000)]
        );
        assert_eq!(v.run("k", Op::Strlen), OpReply::Int(2));
    }

    #[test]
    fn overflow_wraps_saturates_or_fails_like_redis() {
        // (value, incr, bits) → wrap, sat; checked against redis-server 7.0.
        assert!(matches!(
            signed_overflow(127, 1, 8, Overflow::Wrap),
            Fit::No(-128)
        ));
        assert!(matches!(
            signed_overflow(127, 1, 8, Overflow::Sat),
            Fit::No(127)
        ));
        assert!(matches!(
            signed_overflow(-128, -1, 8, Overflow::Sat),
            Fit::No(-128)
        ));
        assert!(matches!(
            signed_overflow(-128, -1, 8, Overflow::Wrap),
            Fit::No(127)
        ));
        assert!(matches!(
            signed_overflow(i64::MAX, 1, 64, Overflow::Wrap),
            Fit::No(i64::MIN)
        ));
        assert!(matches!(
            signed_overflow(5, 1, 64, Overflow::Wrap),
            Fit::Yes
        ));
        assert!(matches!(
            signed_overflow(1000, 0, 8, Overflow::Fail),
            Fit::Fail
        ));
        assert!(matches!(
            unsigned_overflow(255, 1, 8, Overflow::Wrap),
            Fit::No(0)
        ));
        assert!(matches!(
            unsigned_overflow(0, -1, 8, Overflow::Wrap),
            Fit::No(255)
        ));
        assert!(matches!(
            unsigned_overflow(0, -1, 8, Overflow::Sat),
            Fit::No(0)
        ));
        assert!(matches!(
            unsigned_overflow(u64::MAX, 0, 8, Overflow::Sat),
            Fit::No(255)
        ));
        assert!(matches!(
            unsigned_overflow(3, 4, 63, Overflow::Fail),
            Fit::Yes
        ));
    }

    #[test]
    fn a_read_only_bitfield_of_a_missing_key_writes_nothing() {
        let mut v = View::default();
        let op = BitField(vec![field(Action::Get, "i64", 1000, Overflow::Wrap)]);
        assert!(!op.is_write());
        assert_eq!(ints(v.run("none", Op::BitField(op))), [Some(0)]);
        assert_eq!(v.run("none", Op::Exists), OpReply::Int(0));
        // A failed write still creates the key, zero-padded, as in Redis.
        let op = BitField(vec![field(Action::Set(-1), "u8", 8, Overflow::Fail)]);
        assert_eq!(ints(v.run("made", Op::BitField(op))), [None]);
        assert_eq!(v.run("made", Op::Strlen), OpReply::Int(2));
    }

    #[test]
    fn the_wire_form_round_trips_and_refuses_a_lying_count() {
        let op = BitField(vec![
            field(Action::Get, "u63", 7, Overflow::Wrap),
            field(Action::Set(-5), "i64", 1 << 32, Overflow::Sat),
            field(Action::IncrBy(i64::MIN), "i1", 0, Overflow::Fail),
        ]);
        assert_eq!(BitField::decode(op.encode()), Some(op.clone()));
        let mut lying = op.encode().to_vec();
        lying[..4].copy_from_slice(&u32::MAX.to_le_bytes());
        assert_eq!(BitField::decode(lying.into()), None);
        assert_eq!(BitField::decode(Bytes::from_static(&[1, 2])), None);
    }
}

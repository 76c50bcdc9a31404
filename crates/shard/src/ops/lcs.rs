//! LCS (Redis's `lcsCommand` in `t_string.c`): the longest common
//! subsequence of two strings, as the string itself, its length (`LEN`),
//! or the matching ranges (`IDX`, `MINMATCHLEN`, `WITHMATCHLEN`). It runs
//! on the first key and reads the second as one of the op's other keys
//! (`Op::other_keys`), so both are read at one moment wherever they live.
//!
//! Redis checks the keys' types before it reads the options, so an option
//! the parser refused travels in the op ([`Lcs::refused`]) and is answered
//! only once both keys turned out to hold strings (or nothing).

use bytes::{Buf, BufMut, Bytes};

use super::hashes::{get_bytes, put_bytes};
use super::{KeyView, OpReply, ERR_NOT_INTEGER, ERR_SYNTAX, MAX_STRING};

/// Either key holds something other than a string.
pub const ERR_NOT_STRINGS: &str = "ERR The specified keys must contain string values";
/// `LEN` and `IDX` together.
pub const ERR_LEN_AND_IDX: &str =
    "ERR If you want both the length and indexes, please just use IDX.";
/// The table of lengths would pass 512 MB (Redis: `proto-max-bulk-len`).
pub const ERR_TABLE: &str =
    "ERR Insufficient memory, transient memory for LCS exceeds proto-max-bulk-len";

/// LCS key1 key2 [LEN] [IDX] [MINMATCHLEN len] [WITHMATCHLEN], run on key1.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Lcs {
    /// The second key.
    pub other: [Bytes; 1],
    /// LEN: the length only.
    pub len: bool,
    /// IDX: the matching ranges and the length.
    pub idx: bool,
    /// WITHMATCHLEN: each range with its length.
    pub with_match_len: bool,
    /// MINMATCHLEN: ranges shorter than this are left out (0: none).
    pub min_match_len: u64,
    /// The parser's refusal of an option, answered after the type check.
    pub refused: Option<&'static str>,
}

impl Lcs {
    /// Answers from the two strings (a missing key reads as empty).
    pub fn apply(&self, key: &[u8], view: &mut impl KeyView) -> OpReply {
        let (Ok(a), Ok(b)) = (view.read(key), view.read(&self.other[0])) else {
            return OpReply::Error(ERR_NOT_STRINGS);
        };
        if let Some(e) = self.refused {
            return OpReply::Error(e);
        }
        let a = a.map(|c| c.value).unwrap_or_default();
        let b = b.map(|c| c.value).unwrap_or_default();
        // The table is (|a|+1)·(|b|+1) lengths of 4 bytes, bounded as
        // Redis bounds it before allocating (two 512 MB strings would
        // otherwise ask for exabytes).
        let cells = (a.len() as u128 + 1) * (b.len() as u128 + 1);
        if cells * 4 > MAX_STRING as u128 {
            return OpReply::Error(ERR_TABLE);
        }
        let table = Table::new(&a, &b);
        let total = table.at(a.len(), b.len());
        if self.len && !self.idx {
            return OpReply::Int(i64::from(total));
        }
        let ranges = self
            .idx
            .then_some((self.min_match_len, self.with_match_len));
        let (common, ranges) = table.walk(&a, &b, ranges);
        if !self.idx {
            return OpReply::Bulk(Bytes::from(common));
        }
        OpReply::Fields(vec![
            ("matches", OpReply::Array(ranges)),
            ("len", OpReply::Int(i64::from(total))),
        ])
    }

    /// The wire form.
    pub fn encode(&self) -> Bytes {
        let mut out = Vec::new();
        put_bytes(&mut out, &self.other[0]);
        out.put_u8(
            u8::from(self.len) | u8::from(self.idx) << 1 | u8::from(self.with_match_len) << 2,
        );
        out.put_u64_le(self.min_match_len);
        out.put_u8(match self.refused {
            None => 0,
            Some(e) if e == ERR_SYNTAX => 1,
            Some(e) if e == ERR_NOT_INTEGER => 2,
            Some(_) => 3,
        });
        out.into()
    }

    /// Reads what [`Lcs::encode`] wrote; `None` when malformed.
    pub fn decode(mut buf: Bytes) -> Option<Lcs> {
        let other = get_bytes(&mut buf)?;
        if buf.remaining() != 10 {
            return None;
        }
        let flags = buf.get_u8();
        let min_match_len = buf.get_u64_le();
        let refused = match buf.get_u8() {
            0 => None,
            1 => Some(ERR_SYNTAX),
            2 => Some(ERR_NOT_INTEGER),
            3 => Some(ERR_LEN_AND_IDX),
            _ => return None,
        };
        Some(Lcs {
            other: [other],
            len: flags & 1 != 0,
            idx: flags & 2 != 0,
            with_match_len: flags & 4 != 0,
            min_match_len,
            refused,
        })
    }
}

/// The dynamic-programming table: at (i, j) the length of the LCS of
/// `a[..i]` and `b[..j]`.
struct Table {
    cells: Vec<u32>,
    width: usize,
}

impl Table {
    fn new(a: &[u8], b: &[u8]) -> Table {
        let width = b.len() + 1;
        let mut cells = vec![0u32; (a.len() + 1) * width];
        for i in 1..=a.len() {
            for j in 1..=b.len() {
                cells[i * width + j] = if a[i - 1] == b[j - 1] {
                    cells[(i - 1) * width + j - 1] + 1
                } else {
                    cells[(i - 1) * width + j].max(cells[i * width + j - 1])
                };
            }
        }
        Table { cells, width }
    }

    fn at(&self, i: usize, j: usize) -> u32 {
        self.cells[i * self.width + j]
    }

    /// Redis's walk back from the table's corner: the common subsequence,
    /// and when `ranges` is given (IDX: `min_len`, `with_len`) the
    /// matching ranges from the last to the first, each `[[a_start,
    /// a_end], [b_start, b_end]]` (and its length with `with_len`), those
    /// shorter than `min_len` left out.
    fn walk(&self, a: &[u8], b: &[u8], ranges: Option<(u64, bool)>) -> (Vec<u8>, Vec<OpReply>) {
        let (keep, min_len, with_len) = match ranges {
            Some((min_len, with_len)) => (true, min_len, with_len),
            None => (false, 0, false),
        };
        let mut common = vec![0u8; self.at(a.len(), b.len()) as usize];
        let mut left = common.len();
        let mut ranges = Vec::new();
        // `None`: no range open (Redis marks it with a_start == |a|).
        let mut open: Option<(usize, usize, usize, usize)> = None;
        let (mut i, mut j) = (a.len(), b.len());
        while i > 0 && j > 0 {
            let mut emit = false;
            if a[i - 1] == b[j - 1] {
                common[left - 1] = a[i - 1];
                match &mut open {
                    None => open = Some((i - 1, i - 1, j - 1, j - 1)),
                    // Contiguous with the open range: it grows backward.
                    Some((a_start, _, b_start, _)) if *a_start == i && *b_start == j => {
                        *a_start -= 1;
                        *b_start -= 1;
                    }
                    Some(_) => emit = true,
                }
                if open.is_some_and(|(a_start, _, b_start, _)| a_start == 0 || b_start == 0) {
                    emit = true;
                }
                left -= 1;
                i -= 1;
                j -= 1;
            } else {
                if self.at(i - 1, j) > self.at(i, j - 1) {
                    i -= 1;
                } else {
                    j -= 1;
                }
                emit = open.is_some();
            }
            if emit {
                if let Some((a_start, a_end, b_start, b_end)) = open.take() {
                    let len = (a_end - a_start + 1) as u64;
                    if keep && (min_len == 0 || len >= min_len) {
                        let pair = |s: usize, e: usize| {
                            OpReply::Array(vec![OpReply::Int(s as i64), OpReply::Int(e as i64)])
                        };
                        let mut range = vec![pair(a_start, a_end), pair(b_start, b_end)];
                        if with_len {
                            range.push(OpReply::Int(len as i64));
                        }
                        ranges.push(OpReply::Array(range));
                    }
                }
            }
        }
        (common, ranges)
    }
}

#[cfg(test)]
mod tests {
    use super::super::testing::{bulk, MapView};
    use super::*;
    use crate::ops::{Expiry, Op, SetCond, SetReply};

    fn lcs(other: &str, opts: &str) -> Op {
        Op::Lcs(Lcs {
            other: [Bytes::copy_from_slice(other.as_bytes())],
            len: opts.contains("LEN"),
            idx: opts.contains("IDX"),
            with_match_len: opts.contains("WITH"),
            min_match_len: if opts.contains("MIN4") { 4 } else { 0 },
            refused: None,
        })
    }

    fn set(v: &mut MapView, k: &str, val: &str) {
        v.run(
            k,
            Op::Set {
                value: Bytes::copy_from_slice(val.as_bytes()),
                cond: SetCond::Always,
                expiry: Expiry::Clear,
                reply: SetReply::Ok,
            },
        );
    }

    fn range(a: (i64, i64), b: (i64, i64), len: Option<i64>) -> OpReply {
        let pair = |(s, e)| OpReply::Array(vec![OpReply::Int(s), OpReply::Int(e)]);
        let mut r = vec![pair(a), pair(b)];
        r.extend(len.map(OpReply::Int));
        OpReply::Array(r)
    }

    #[test]
    fn the_examples_of_redis_documentation() {
        let mut v = MapView::default();
        set(&mut v, "key1", "ohmytext");
        set(&mut v, "key2", "mynewtext");
        assert_eq!(v.run("key1", lcs("key2", "")), bulk(b"mytext"));
        assert_eq!(v.run("key1", lcs("key2", "LEN")), OpReply::Int(6));
        assert_eq!(
            v.run("key1", lcs("key2", "IDX")),
            OpReply::Fields(vec![
                (
                    "matches",
                    OpReply::Array(vec![
                        range((4, 7), (5, 8), None),
                        range((2, 3), (0, 1), None)
                    ])
                ),
                ("len", OpReply::Int(6)),
            ])
        );
        assert_eq!(
            v.run("key1", lcs("key2", "IDX MIN4 WITH")),
            OpReply::Fields(vec![
                (
                    "matches",
                    OpReply::Array(vec![range((4, 7), (5, 8), Some(4))])
                ),
                ("len", OpReply::Int(6)),
            ])
        );
        // Missing keys read as empty strings.
        assert_eq!(v.run("key1", lcs("none", "")), bulk(b""));
        assert_eq!(v.run("none", lcs("none", "LEN")), OpReply::Int(0));
    }

    #[test]
    fn a_non_string_is_refused_before_any_option() {
        let mut v = MapView::default();
        set(&mut v, "s", "abc");
        v.run(
            "h",
            Op::Hash(crate::ops::hashes::HashOp::Set {
                pairs: vec![(Bytes::from_static(b"f"), Bytes::from_static(b"v"))],
                reply: crate::ops::hashes::HSetReply::Count,
            }),
        );
        let refused = |other: &'static [u8]| {
            Op::Lcs(Lcs {
                other: [Bytes::from_static(other)],
                len: false,
                idx: false,
                with_match_len: false,
                min_match_len: 0,
                refused: Some(ERR_SYNTAX),
            })
        };
        assert_eq!(v.run("s", refused(b"s")), OpReply::Error(ERR_SYNTAX));
        assert_eq!(v.run("s", refused(b"h")), OpReply::Error(ERR_NOT_STRINGS));
        assert_eq!(
            v.run("h", refused(b"none")),
            OpReply::Error(ERR_NOT_STRINGS)
        );
    }

    #[test]
    fn the_wire_form_round_trips() {
        let op = Lcs {
            other: [Bytes::from_static(b"k2")],
            len: false,
            idx: true,
            with_match_len: true,
            min_match_len: 3,
            refused: Some(ERR_LEN_AND_IDX),
        };
        assert_eq!(Lcs::decode(op.encode()), Some(op.clone()));
        assert_eq!(Lcs::decode(op.encode().slice(..6)), None);
    }
}

//! Stream command arguments as Redis 7.0's `t_stream.c` reads them: IDs
//! (`ms-seq`, `ms`, `-`, `+`, `(` exclusive, `ms-*`), the XADD/XTRIM trim
//! options, and the refusals in Redis's order and words.

use bytes::Bytes;
use elsa_lattice::stream::StreamId;

use super::super::{parse_i64, ERR_NOT_INTEGER, ERR_SYNTAX};

/// An ID argument that is not one.
pub const ERR_INVALID_ID: &str = "ERR Invalid stream ID specified as stream command argument";
/// MAXLEN and MINID together.
pub const ERR_MAXLEN_MINID: &str =
    "ERR syntax error, MAXLEN and MINID options at the same time are not compatible";
/// A negative MAXLEN.
pub const ERR_MAXLEN_NEGATIVE: &str = "ERR The MAXLEN argument must be >= 0.";
/// A negative LIMIT.
pub const ERR_LIMIT_NEGATIVE: &str = "ERR The LIMIT argument must be >= 0.";
/// LIMIT without MAXLEN or MINID.
pub const ERR_LIMIT_NO_STRATEGY: &str =
    "ERR syntax error, LIMIT cannot be used without specifying a trimming strategy";
/// XTRIM without MAXLEN or MINID.
pub const ERR_XTRIM_NO_STRATEGY: &str =
    "ERR syntax error, XTRIM must be called with a trimming strategy";
/// LIMIT with an exact trim.
pub const ERR_LIMIT_EXACT: &str =
    "ERR syntax error, LIMIT cannot be used without the special ~ option";

/// How many entries Redis keeps per radix-tree node
/// (`stream-node-max-entries`, 100 by default; 0: no limit): approximate
/// trims (`~`) remove whole nodes only.
pub fn node_entries() -> u64 {
    match crate::ops::limits::get(&crate::ops::limits::STREAM_NODE_ENTRIES) {
        0 => u64::MAX,
        n => n as u64,
    }
}

/// `ms-seq`, `ms` (the sequence `missing_seq`), `-` and `+` unless
/// `strict`; with `seq_star`, `ms-*` too (answered with `None` for the
/// sequence).
pub fn parse_id(
    arg: &[u8],
    missing_seq: u64,
    strict: bool,
    seq_star: bool,
) -> Result<(u64, Option<u64>), &'static str> {
    if arg.len() > 127 {
        return Err(ERR_INVALID_ID);
    }
    match arg {
        b"-" | b"+" if strict => return Err(ERR_INVALID_ID),
        b"-" => return Ok((0, Some(0))),
        b"+" => return Ok((u64::MAX, Some(u64::MAX))),
        _ => {}
    }
    let (ms, seq) = match arg.iter().position(|&b| b == b'-') {
        Some(at) => (&arg[..at], Some(&arg[at + 1..])),
        None => (arg, None),
    };
    let ms = parse_u64(ms).ok_or(ERR_INVALID_ID)?;
    let seq = match seq {
        None => Some(missing_seq),
        Some(b"*") if seq_star => None,
        Some(s) => Some(parse_u64(s).ok_or(ERR_INVALID_ID)?),
    };
    Ok((ms, seq))
}

/// A full ID (`ms` alone gets `missing_seq`).
pub fn id(arg: &[u8], missing_seq: u64, strict: bool) -> Result<StreamId, &'static str> {
    let (ms, seq) = parse_id(arg, missing_seq, strict, false)?;
    Ok(StreamId::new(ms, seq.unwrap_or(missing_seq)))
}

/// Redis's `string2ull`: a non-negative `string2ll`, else what C's
/// `strtoull` takes whole — leading white space, a `+` or `-` sign (a
/// negative number wraps, as C's does), leading zeros — refused past 64
/// bits.
fn parse_u64(b: &[u8]) -> Option<u64> {
    if let Some(n) = parse_i64(b) {
        return u64::try_from(n).ok();
    }
    let start = b
        .iter()
        .position(|c| !matches!(c, b' ' | b'\t' | b'\n' | 0x0b | 0x0c | b'\r'))?;
    let mut rest = &b[start..];
    let negative = match rest.first() {
        Some(b'-') => {
            rest = &rest[1..];
            true
        }
        Some(b'+') => {
            rest = &rest[1..];
            false
        }
        _ => false,
    };
    if rest.is_empty() || !rest.iter().all(u8::is_ascii_digit) {
        return None;
    }
    let mut v: u64 = 0;
    for d in rest {
        v = v.checked_mul(10)?.checked_add(u64::from(d - b'0'))?;
    }
    Some(if negative { v.wrapping_neg() } else { v })
}

/// A range bound of XRANGE/XREVRANGE: `(` makes it exclusive.
pub fn bound(arg: &[u8], missing_seq: u64) -> Result<(StreamId, bool), &'static str> {
    if arg.len() > 1 && arg[0] == b'(' {
        Ok((id(&arg[1..], missing_seq, true)?, true))
    } else {
        Ok((id(arg, missing_seq, false)?, false))
    }
}

/// A trim: how far, whether approximate (`~`), and LIMIT.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Trim {
    /// MAXLEN (entries kept) or MINID (the first ID kept).
    pub to: TrimTo,
    /// `~`: whole nodes only.
    pub approx: bool,
    /// LIMIT: at most this many entries go (0: no limit).
    pub limit: u64,
}

/// MAXLEN or MINID.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TrimTo {
    /// Keep at most this many entries.
    MaxLen(u64),
    /// Keep no entry below this ID.
    MinId(StreamId),
}

/// The ID XADD was given.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AddId {
    /// `*`.
    Auto,
    /// `ms-*`.
    Ms(u64),
    /// `ms-seq` (or `ms`, sequence 0).
    Exact(StreamId),
}

/// XADD's and XTRIM's options (`streamParseAddOrTrimArgsOrReply`): the
/// trim, NOMKSTREAM, and for XADD the ID and where the fields start.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AddArgs {
    /// MAXLEN / MINID, if given.
    pub trim: Option<Trim>,
    /// NOMKSTREAM.
    pub nomkstream: bool,
    /// The ID (XADD).
    pub id: AddId,
    /// Where the field/value pairs start (XADD).
    pub fields_at: usize,
}

/// Parses from argument 2 on; `xadd` selects XADD's form.
pub fn add_or_trim(args: &[Bytes], xadd: bool) -> Result<AddArgs, String> {
    let mut trim: Option<Trim> = None;
    let mut limit: Option<u64> = None;
    let mut nomkstream = false;
    let mut id = AddId::Auto;
    let mut i = 2;
    let is = |a: &[u8], w: &str| a.eq_ignore_ascii_case(w.as_bytes());
    while i < args.len() {
        let more = args.len() - 1 - i;
        let opt = &args[i][..];
        if xadd && opt == b"*" {
            break;
        } else if (is(opt, "maxlen") || is(opt, "minid")) && more > 0 {
            if trim.is_some() {
                return Err(ERR_MAXLEN_MINID.into());
            }
            let mut approx = false;
            let next = &args[i + 1][..];
            if more >= 2 && (next == b"~" || next == b"=") {
                approx = next == b"~";
                i += 1;
            }
            let arg = &args[i + 1][..];
            let to = if is(opt, "maxlen") {
                let n = parse_i64(arg).ok_or(ERR_NOT_INTEGER)?;
                if n < 0 {
                    return Err(ERR_MAXLEN_NEGATIVE.into());
                }
                TrimTo::MaxLen(n as u64)
            } else {
                TrimTo::MinId(id_strict(arg)?)
            };
            trim = Some(Trim {
                to,
                approx,
                limit: 0,
            });
            i += 2;
            continue;
        } else if is(opt, "limit") && more > 0 {
            let n = parse_i64(&args[i + 1]).ok_or(ERR_NOT_INTEGER)?;
            if n < 0 {
                return Err(ERR_LIMIT_NEGATIVE.into());
            }
            limit = Some(n as u64);
            i += 2;
            continue;
        } else if xadd && is(opt, "nomkstream") {
            nomkstream = true;
        } else if xadd {
            let (ms, seq) = parse_id(opt, 0, true, true)?;
            id = match seq {
                None => AddId::Ms(ms),
                Some(seq) => AddId::Exact(StreamId::new(ms, seq)),
            };
            break;
        } else {
            return Err(ERR_SYNTAX.into());
        }
        i += 1;
    }
    if limit.is_some_and(|l| l > 0) && trim.is_none() {
        return Err(ERR_LIMIT_NO_STRATEGY.into());
    }
    if !xadd && trim.is_none() {
        return Err(ERR_XTRIM_NO_STRATEGY.into());
    }
    if let Some(t) = trim.as_mut() {
        match limit {
            Some(_) if !t.approx => return Err(ERR_LIMIT_EXACT.into()),
            Some(l) => t.limit = l,
            // Redis's default: 100 nodes' worth, within 10 000..=1 000 000.
            None if t.approx => {
                let n = crate::ops::limits::get(&crate::ops::limits::STREAM_NODE_ENTRIES);
                t.limit = match (100 * n as u64).min(1_000_000) {
                    0 => 10_000,
                    l => l,
                };
            }
            None => {}
        }
    }
    Ok(AddArgs {
        trim,
        nomkstream,
        id,
        fields_at: i + 1,
    })
}

fn id_strict(arg: &[u8]) -> Result<StreamId, &'static str> {
    id(arg, 0, true)
}

//! Sorted-set commands' arguments, parsed as Redis 7's `t_zset.c` parses
//! them, and scores printed as Redis prints them.
//!
//! The parser lives beside the ops rather than in the server because a
//! sorted-set op crosses the wire between nodes as its command's
//! arguments and is parsed again there (`ZSetOp::encode`): one parser,
//! no second hand-written wire form to keep in step.

use bytes::Bytes;
use elsa_lattice::zset::ScoreBound;

use super::{ScanArgs, ERR_NOT_INTEGER, ERR_SYNTAX};

/// ZADD's options.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct AddFlags {
    pub nx: bool,
    pub xx: bool,
    pub gt: bool,
    pub lt: bool,
    pub ch: bool,
    pub incr: bool,
}

/// A bound of a lex range.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LexBound {
    /// `-`
    Min,
    /// `+`
    Max,
    /// `[x`
    Incl(Bytes),
    /// `(x`
    Excl(Bytes),
}

/// Which members a range command means.
#[derive(Clone, Debug, PartialEq)]
pub enum ZRange {
    /// Positions (negative: from the end).
    Rank { start: i64, stop: i64 },
    /// Scores.
    Score { min: ScoreBound, max: ScoreBound },
    /// Member bytes (for members of one score).
    Lex { min: LexBound, max: LexBound },
}

/// ZRANGE's and its relatives' arguments.
#[derive(Clone, Debug, PartialEq)]
pub struct RangeArgs {
    pub range: ZRange,
    pub rev: bool,
    /// LIMIT offset count (count < 0: all).
    pub offset: i64,
    pub limit: i64,
    pub withscores: bool,
}

/// How ZUNION/ZINTER combine the scores of a member.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Aggregate {
    Sum,
    Min,
    Max,
}

/// Which combination.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ZCombine {
    Union,
    Inter,
    Diff,
}

/// One sorted-set command, parsed. Multi-key forms name their keys in
/// order (`keys[0]` is the key the op runs on).
#[derive(Clone, Debug, PartialEq)]
pub enum ZCmd {
    Add {
        flags: AddFlags,
        pairs: Vec<(f64, Bytes)>,
    },
    Rem(Vec<Bytes>),
    Score(Bytes),
    MScore(Vec<Bytes>),
    Card,
    Count(ZRange),
    Rank {
        member: Bytes,
        rev: bool,
        withscore: bool,
    },
    Range(RangeArgs),
    /// ZRANGESTORE: runs on the source; the destination is `dest`.
    RangeStore {
        dest: Bytes,
        args: RangeArgs,
    },
    RemRange(ZRange),
    Pop {
        max: bool,
        count: Option<u64>,
    },
    /// ZMPOP: from the first of `keys` that holds a sorted set.
    MPop {
        keys: Vec<Bytes>,
        max: bool,
        count: u64,
    },
    RandMember {
        count: Option<i64>,
        withscores: bool,
    },
    /// ZUNION/ZINTER/ZDIFF (and STORE): every source, in order; the
    /// destination if STORE. `refused`: an error Redis reports only once
    /// every source was found of a usable type.
    Combine {
        how: ZCombine,
        sources: Vec<Bytes>,
        dest: Option<Bytes>,
        weights: Vec<f64>,
        aggregate: Aggregate,
        withscores: bool,
        refused: Option<&'static str>,
    },
    InterCard {
        sources: Vec<Bytes>,
        limit: u64,
        refused: Option<&'static str>,
    },
    Scan(ScanArgs),
    /// GEOPOS, GEODIST, GEOHASH, GEORADIUS*, GEOSEARCH(STORE): `ops::geo`.
    Geo(super::geo::GeoCmd),
}

/// The most elements one ZRANDMEMBER with a negative count answers (a
/// reply of unbounded size otherwise; Redis builds it, Elsa refuses).
pub const RAND_LIMIT: u64 = 16 * 1024 * 1024;

/// Redis's refusal of a float argument.
pub const ERR_NOT_FLOAT: &str = "ERR value is not a valid float";
/// ZADD INCR / ZINCRBY to NaN.
pub const ERR_SCORE_NAN: &str = "ERR resulting score is not a number (NaN)";
/// ZUNION…'s weights.
pub const ERR_WEIGHT: &str = "ERR weight value is not a float";
/// ZINTERCARD's limit.
pub const ERR_LIMIT_NEGATIVE: &str = "ERR LIMIT can't be negative";

/// `strtod` as Redis's `getDoubleFromObject` takes it: the whole
/// argument, no leading space, not NaN, no overflow (±HUGE_VAL) and no
/// underflow to zero. (glibc's hexadecimal floats are not taken.)
pub fn parse_double(b: &[u8]) -> Option<f64> {
    let s = std::str::from_utf8(b).ok()?;
    if s.is_empty() || s.starts_with(|c: char| c.is_ascii_whitespace()) {
        return None;
    }
    let body = s.trim_start_matches(['+', '-']);
    if s.len() - body.len() > 1 {
        return None;
    }
    let lower = body.to_ascii_lowercase();
    if lower == "inf" || lower == "infinity" {
        return Some(if s.starts_with('-') {
            f64::NEG_INFINITY
        } else {
            f64::INFINITY
        });
    }
    if let Some(hex) = body.strip_prefix("0x").or_else(|| body.strip_prefix("0X")) {
        let v = parse_hex(hex.as_bytes())?;
        if v.is_infinite() || (v == 0.0 && hex.bytes().any(|c| c.is_ascii_hexdigit() && c != b'0'))
        {
            return None; // overflow or underflow: ERANGE
        }
        return Some(if s.starts_with('-') { -v } else { v });
    }
    // Rust's grammar is strtod's decimal one, but also takes "inf"/"nan"
    // spellings, handled above, and never reports overflow.
    if !body
        .bytes()
        .all(|c| c.is_ascii_digit() || matches!(c, b'.' | b'e' | b'E' | b'+' | b'-'))
    {
        return None;
    }
    let v: f64 = s.parse().ok()?;
    if v.is_infinite() {
        return None; // overflow: ERANGE, HUGE_VAL
    }
    if v == 0.0 {
        let mantissa = body.split(['e', 'E']).next().unwrap_or("");
        if mantissa.bytes().any(|c| matches!(c, b'1'..=b'9')) {
            return None; // underflow to zero: ERANGE
        }
    }
    Some(v)
}

/// A C99 hexadecimal float without its `0x`: hex digits, an optional
/// fraction, an optional binary exponent `p±n` (as `strtod` reads it).
fn parse_hex(s: &[u8]) -> Option<f64> {
    let (mant, exp) = match s.iter().position(|&c| c == b'p' || c == b'P') {
        Some(i) => (&s[..i], Some(&s[i + 1..])),
        None => (s, None),
    };
    let (int, frac) = match mant.iter().position(|&c| c == b'.') {
        Some(i) => (&mant[..i], &mant[i + 1..]),
        None => (mant, &[][..]),
    };
    if int.is_empty() && frac.is_empty() {
        return None;
    }
    let mut m: u128 = 0;
    let mut shift: i64 = 0;
    for (i, &c) in int.iter().chain(frac).enumerate() {
        let d = (c as char).to_digit(16)?;
        if m >> 120 == 0 {
            m = (m << 4) | u128::from(d);
            if i >= int.len() {
                shift -= 4;
            }
        } else if i < int.len() {
            shift += 4; // digits past what fits: their value, not their bits
        }
    }
    let e: i64 = match exp {
        None => 0,
        Some(e) => std::str::from_utf8(e).ok()?.parse().ok()?,
    };
    let total = e.saturating_add(shift).clamp(-2200, 2200) as i32;
    let v = m as f64;
    // Scale in steps that stay within f64's exponent range.
    let mut out = v;
    let mut left = total;
    while left != 0 {
        let step = left.clamp(-1000, 1000);
        out *= 2f64.powi(step);
        left -= step;
    }
    Some(out)
}

/// Redis's `%.17g` (C's `printf`): 17 significant digits, the shorter of
/// fixed and exponent notation, trailing zeros cut; `inf`/`-inf`.
pub fn format_g17(d: f64) -> String {
    if d.is_infinite() {
        return if d > 0.0 { "inf".into() } else { "-inf".into() };
    }
    if d.is_nan() {
        return "nan".into();
    }
    if d == 0.0 {
        return if d.is_sign_negative() { "-0" } else { "0" }.into();
    }
    let e = format!("{d:.16e}");
    let (mantissa, exp) = e.split_once('e').expect("exponent form");
    let exp: i32 = exp.parse().expect("an exponent");
    if (-4..17).contains(&exp) {
        let decimals = (16 - exp).max(0) as usize;
        let fixed = format!("{d:.decimals$}");
        strip_zeros(&fixed)
    } else {
        let m = strip_zeros(mantissa);
        let sign = if exp < 0 { '-' } else { '+' };
        format!("{m}e{sign}{:02}", exp.abs())
    }
}

fn strip_zeros(s: &str) -> String {
    if s.contains('.') {
        s.trim_end_matches('0').trim_end_matches('.').to_string()
    } else {
        s.to_string()
    }
}

/// Redis's `d2string` (what a packed sorted set stores, and ZSCAN of one
/// shows): integers as integers, `-0`, else `%.17g`.
pub fn format_d2string(d: f64) -> String {
    if d.is_finite() && d != 0.0 && d.fract() == 0.0 && d.abs() <= (i64::MAX / 2) as f64 {
        return (d as i64).to_string();
    }
    format_g17(d)
}

fn is(arg: &[u8], word: &str) -> bool {
    arg.eq_ignore_ascii_case(word.as_bytes())
}

fn long(b: &[u8]) -> Result<i64, String> {
    super::parse_i64(b).ok_or_else(|| ERR_NOT_INTEGER.to_string())
}

/// A score bound: `x`, `(x`, `-inf`, `+inf`.
fn score_bound(b: &[u8]) -> Option<ScoreBound> {
    let (exclusive, rest) = match b.first() {
        Some(b'(') => (true, &b[1..]),
        _ => (false, b),
    };
    // strtod here, not getDouble: Redis checks only trailing garbage and
    // NaN (so "1e400" is inf, and " 1" is 1).
    let s = std::str::from_utf8(rest).ok()?;
    let t = s.trim_start();
    let unsigned = t.trim_start_matches(['+', '-']);
    let v = if t.is_empty() {
        0.0 // strtod of nothing is 0, and nothing is left over
    } else if let Some(hex) = unsigned
        .strip_prefix("0x")
        .or_else(|| unsigned.strip_prefix("0X"))
    {
        let v = parse_hex(hex.as_bytes())?;
        if t.starts_with('-') {
            -v
        } else {
            v
        }
    } else {
        let lower = t.trim_start_matches(['+', '-']).to_ascii_lowercase();
        if lower == "inf" || lower == "infinity" {
            if t.starts_with('-') {
                f64::NEG_INFINITY
            } else {
                f64::INFINITY
            }
        } else if t
            .bytes()
            .all(|c| c.is_ascii_digit() || matches!(c, b'.' | b'e' | b'E' | b'+' | b'-'))
        {
            t.parse::<f64>().ok()?
        } else {
            return None;
        }
    };
    (!v.is_nan()).then_some(ScoreBound {
        score: v,
        exclusive,
    })
}

fn score_range(min: &[u8], max: &[u8]) -> Result<ZRange, String> {
    match (score_bound(min), score_bound(max)) {
        (Some(min), Some(max)) => Ok(ZRange::Score { min, max }),
        _ => Err("ERR min or max is not a float".into()),
    }
}

fn lex_bound(b: &[u8]) -> Option<LexBound> {
    match b.first()? {
        b'+' if b.len() == 1 => Some(LexBound::Max),
        b'-' if b.len() == 1 => Some(LexBound::Min),
        b'[' => Some(LexBound::Incl(Bytes::copy_from_slice(&b[1..]))),
        b'(' => Some(LexBound::Excl(Bytes::copy_from_slice(&b[1..]))),
        _ => None,
    }
}

fn lex_range(min: &[u8], max: &[u8]) -> Result<ZRange, String> {
    match (lex_bound(min), lex_bound(max)) {
        (Some(min), Some(max)) => Ok(ZRange::Lex { min, max }),
        _ => Err("ERR min or max not valid string range item".into()),
    }
}

/// How a range command was named (fixing what its options may change).
#[derive(Clone, Copy, PartialEq, Eq)]
enum RangeKind {
    Auto,
    Rank,
    Score,
    Lex,
}

/// `zrangeGenericCommand`'s parse: `args[at]` is the source key, then
/// min max and the options.
fn range_args(
    args: &[Bytes],
    at: usize,
    store: bool,
    mut kind: RangeKind,
    mut rev: Option<bool>,
) -> Result<RangeArgs, String> {
    let mut withscores = false;
    let (mut offset, mut limit) = (0i64, -1i64);
    let mut j = at + 3;
    while j < args.len() {
        let left = args.len() - j - 1;
        let a = &args[j];
        if !store && is(a, "withscores") {
            withscores = true;
        } else if is(a, "limit") && left >= 2 {
            offset = long(&args[j + 1])?;
            limit = long(&args[j + 2])?;
            j += 2;
        } else if rev.is_none() && is(a, "rev") {
            rev = Some(true);
        } else if kind == RangeKind::Auto && is(a, "bylex") {
            kind = RangeKind::Lex;
        } else if kind == RangeKind::Auto && is(a, "byscore") {
            kind = RangeKind::Score;
        } else {
            return Err(ERR_SYNTAX.into());
        }
        j += 1;
    }
    let rev = rev.unwrap_or(false);
    if kind == RangeKind::Auto {
        kind = RangeKind::Rank;
    }
    if limit != -1 && kind == RangeKind::Rank {
        return Err(
            "ERR syntax error, LIMIT is only supported in combination with either BYSCORE or BYLEX"
                .into(),
        );
    }
    if withscores && kind == RangeKind::Lex {
        return Err("ERR syntax error, WITHSCORES not supported in combination with BYLEX".into());
    }
    let (mut lo, mut hi) = (&args[at + 1], &args[at + 2]);
    if rev && kind != RangeKind::Rank {
        std::mem::swap(&mut lo, &mut hi);
    }
    let range = match kind {
        RangeKind::Score => score_range(lo, hi)?,
        RangeKind::Lex => lex_range(lo, hi)?,
        _ => ZRange::Rank {
            start: long(lo)?,
            stop: long(hi)?,
        },
    };
    Ok(RangeArgs {
        range,
        rev,
        offset,
        limit,
        withscores: withscores || store,
    })
}

/// ZADD's (and ZINCRBY's) parse.
fn add(args: &[Bytes], incr: bool) -> Result<ZCmd, String> {
    let mut flags = AddFlags {
        incr,
        ..AddFlags::default()
    };
    let mut i = 2;
    while i < args.len() {
        let a = &args[i];
        if is(a, "nx") {
            flags.nx = true;
        } else if is(a, "xx") {
            flags.xx = true;
        } else if is(a, "ch") {
            flags.ch = true;
        } else if is(a, "incr") {
            flags.incr = true;
        } else if is(a, "gt") {
            flags.gt = true;
        } else if is(a, "lt") {
            flags.lt = true;
        } else {
            break;
        }
        i += 1;
    }
    let rest = &args[i..];
    if rest.is_empty() || !rest.len().is_multiple_of(2) {
        return Err(ERR_SYNTAX.into());
    }
    if flags.nx && flags.xx {
        return Err("ERR XX and NX options at the same time are not compatible".into());
    }
    if (flags.nx && (flags.gt || flags.lt)) || (flags.gt && flags.lt) {
        return Err("ERR GT, LT, and/or NX options at the same time are not compatible".into());
    }
    if flags.incr && rest.len() > 2 {
        return Err("ERR INCR option supports a single increment-element pair".into());
    }
    let mut pairs = Vec::with_capacity(rest.len() / 2);
    for p in rest.chunks(2) {
        let score = parse_double(&p[0]).ok_or_else(|| ERR_NOT_FLOAT.to_string())?;
        pairs.push((score, p[1].clone()));
    }
    Ok(ZCmd::Add { flags, pairs })
}

/// ZUNION/ZINTER/ZDIFF/ZINTERCARD (and STORE): `args[at]` is numkeys.
fn combine(
    args: &[Bytes],
    at: usize,
    how: ZCombine,
    dest: Option<Bytes>,
    card: bool,
) -> Result<ZCmd, String> {
    let n = long(&args[at])?;
    let name = String::from_utf8_lossy(&args[0]).to_lowercase();
    if n < 1 {
        return Err(format!(
            "ERR at least 1 input key is needed for '{name}' command"
        ));
    }
    let n = n as usize;
    if n > args.len() - at - 1 {
        return Err(ERR_SYNTAX.into());
    }
    let sources: Vec<Bytes> = args[at + 1..at + 1 + n].to_vec();
    // The options: Redis reads them only after finding every source of a
    // usable type, so an error here waits for that (`refused`).
    let mut weights = Vec::new();
    let mut aggregate = Aggregate::Sum;
    let mut withscores = false;
    let mut limit = 0u64;
    let mut refused = None;
    let mut j = at + 1 + n;
    while j < args.len() && refused.is_none() {
        let left = args.len() - j;
        let a = &args[j];
        if how != ZCombine::Diff && !card && left > n && is(a, "weights") {
            j += 1;
            weights.clear();
            for w in &args[j..j + n] {
                match parse_double(w) {
                    Some(w) => weights.push(w),
                    None => {
                        refused = Some(ERR_WEIGHT);
                        break;
                    }
                }
            }
            j += n;
        } else if how != ZCombine::Diff && !card && left >= 2 && is(a, "aggregate") {
            let v = &args[j + 1];
            if is(v, "sum") {
                aggregate = Aggregate::Sum;
            } else if is(v, "min") {
                aggregate = Aggregate::Min;
            } else if is(v, "max") {
                aggregate = Aggregate::Max;
            } else {
                refused = Some(ERR_SYNTAX);
            }
            j += 2;
        } else if dest.is_none() && !card && is(a, "withscores") {
            withscores = true;
            j += 1;
        } else if card && left >= 2 && is(a, "limit") {
            match super::parse_i64(&args[j + 1]) {
                Some(l) if l >= 0 => limit = l as u64,
                // Redis's one message for both (getPositiveLong… with it).
                _ => refused = Some(ERR_LIMIT_NEGATIVE),
            }
            j += 2;
        } else {
            refused = Some(ERR_SYNTAX);
        }
    }
    if card {
        return Ok(ZCmd::InterCard {
            sources,
            limit,
            refused,
        });
    }
    Ok(ZCmd::Combine {
        how,
        sources,
        dest,
        weights,
        aggregate,
        withscores,
        refused,
    })
}

/// Parses a whole sorted-set command (`args[0]` its name, arity already
/// checked); the error is the reply Redis gives before looking at a key.
pub fn parse(args: &[Bytes]) -> Result<ZCmd, String> {
    let name = String::from_utf8_lossy(&args[0]).to_lowercase();
    let lex_or_score = |kind| -> Result<ZRange, String> {
        match kind {
            RangeKind::Lex => lex_range(&args[2], &args[3]),
            _ => score_range(&args[2], &args[3]),
        }
    };
    Ok(match name.as_str() {
        "zadd" => add(args, false)?,
        "zincrby" => add(args, true)?,
        "zrem" => ZCmd::Rem(args[2..].to_vec()),
        "zscore" => ZCmd::Score(args[2].clone()),
        "zmscore" => ZCmd::MScore(args[2..].to_vec()),
        "zcard" => ZCmd::Card,
        "zcount" => ZCmd::Count(lex_or_score(RangeKind::Score)?),
        "zlexcount" => ZCmd::Count(lex_or_score(RangeKind::Lex)?),
        "zrank" | "zrevrank" => {
            // 7.2's WITHSCORE; any other extra argument is refused as 7.0
            // refuses it (its arity is exactly 3).
            let withscore = match args.get(3) {
                None => false,
                Some(a) if is(a, "withscore") && args.len() == 4 => true,
                Some(_) => {
                    return Err(format!(
                        "ERR wrong number of arguments for '{name}' command"
                    ))
                }
            };
            ZCmd::Rank {
                member: args[2].clone(),
                rev: name == "zrevrank",
                withscore,
            }
        }
        "zrange" => ZCmd::Range(range_args(args, 1, false, RangeKind::Auto, None)?),
        "zrevrange" => ZCmd::Range(range_args(args, 1, false, RangeKind::Rank, Some(true))?),
        "zrangebyscore" => ZCmd::Range(range_args(args, 1, false, RangeKind::Score, Some(false))?),
        "zrevrangebyscore" => {
            ZCmd::Range(range_args(args, 1, false, RangeKind::Score, Some(true))?)
        }
        "zrangebylex" => ZCmd::Range(range_args(args, 1, false, RangeKind::Lex, Some(false))?),
        "zrevrangebylex" => ZCmd::Range(range_args(args, 1, false, RangeKind::Lex, Some(true))?),
        "zrangestore" => ZCmd::RangeStore {
            dest: args[1].clone(),
            args: range_args(args, 2, true, RangeKind::Auto, None)?,
        },
        "zremrangebyrank" => ZCmd::RemRange(ZRange::Rank {
            start: long(&args[2])?,
            stop: long(&args[3])?,
        }),
        "zremrangebyscore" => ZCmd::RemRange(lex_or_score(RangeKind::Score)?),
        "zremrangebylex" => ZCmd::RemRange(lex_or_score(RangeKind::Lex)?),
        "zpopmin" | "zpopmax" => {
            if args.len() > 3 {
                return Err(ERR_SYNTAX.into());
            }
            let count = match args.get(2) {
                None => None,
                Some(c) => match super::parse_i64(c) {
                    Some(n) if n >= 0 => Some(n as u64),
                    _ => return Err("ERR value is out of range, must be positive".into()),
                },
            };
            ZCmd::Pop {
                max: name == "zpopmax",
                count,
            }
        }
        "zrandmember" => {
            let count = match args.get(2) {
                None => None,
                Some(c) => {
                    let n = long(c)?;
                    if n == i64::MIN {
                        return Err(format!(
                            "ERR value is out of range, value must between {} and {}",
                            -i64::MAX,
                            i64::MAX
                        ));
                    }
                    Some(n)
                }
            };
            let withscores = match args.get(3) {
                None => false,
                Some(a) if args.len() == 4 && is(a, "withscores") => true,
                Some(_) => return Err(ERR_SYNTAX.into()),
            };
            if withscores {
                let n = count.unwrap_or(0);
                if !(-(i64::MAX / 2)..=i64::MAX / 2).contains(&n) {
                    return Err("ERR value is out of range".into());
                }
            }
            if let Some(n) = count {
                if n < 0 && n.unsigned_abs() > RAND_LIMIT {
                    return Err(format!(
                        "ERR count is larger than Elsa answers at once ({} elements)",
                        RAND_LIMIT
                    ));
                }
            }
            ZCmd::RandMember { count, withscores }
        }
        "zmpop" => {
            let n = super::parse_i64(&args[1])
                .filter(|n| *n >= 1)
                .ok_or("ERR numkeys should be greater than 0")? as usize;
            let at = n
                .checked_add(2)
                .filter(|&at| at < args.len())
                .ok_or(ERR_SYNTAX)?;
            let max = if is(&args[at], "max") {
                true
            } else if is(&args[at], "min") {
                false
            } else {
                return Err(ERR_SYNTAX.into());
            };
            let mut count = None;
            let mut j = at + 1;
            while j < args.len() {
                if count.is_none() && is(&args[j], "count") && j + 1 < args.len() {
                    let c = super::parse_i64(&args[j + 1])
                        .filter(|c| *c >= 1)
                        .ok_or("ERR count should be greater than 0")?;
                    count = Some(c as u64);
                    j += 2;
                } else {
                    return Err(ERR_SYNTAX.into());
                }
            }
            ZCmd::MPop {
                keys: args[2..2 + n].to_vec(),
                max,
                count: count.unwrap_or(1),
            }
        }
        "zunion" => combine(args, 1, ZCombine::Union, None, false)?,
        "zinter" => combine(args, 1, ZCombine::Inter, None, false)?,
        "zdiff" => combine(args, 1, ZCombine::Diff, None, false)?,
        "zunionstore" => combine(args, 2, ZCombine::Union, Some(args[1].clone()), false)?,
        "zinterstore" => combine(args, 2, ZCombine::Inter, Some(args[1].clone()), false)?,
        "zdiffstore" => combine(args, 2, ZCombine::Diff, Some(args[1].clone()), false)?,
        "zintercard" => combine(args, 1, ZCombine::Inter, None, true)?,
        "zscan" => ZCmd::Scan(super::scan_args_of(args)?),
        "geoadd" => super::geo::add(args)?,
        "geopos"
        | "geodist"
        | "geohash"
        | "georadius"
        | "georadius_ro"
        | "georadiusbymember"
        | "georadiusbymember_ro"
        | "geosearch"
        | "geosearchstore" => ZCmd::Geo(super::geo::parse(&name, args)?),
        _ => return Err(ERR_SYNTAX.into()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scores_print_as_c_does() {
        for (d, want) in [
            (0.1, "0.10000000000000001"),
            (1.0, "1"),
            (1.5, "1.5"),
            (-0.0, "-0"),
            (1e3, "1000"),
            (123456789012345678.0, "1.2345678901234568e+17"),
            (1e-5, "1.0000000000000001e-05"),
            (3.0000000000000004, "3.0000000000000004"),
            (f64::INFINITY, "inf"),
            (1e17, "1e+17"),
            (1e16, "10000000000000000"),
            (0.0001, "0.0001"),
            (2.5e-300, "2.5e-300"),
        ] {
            assert_eq!(format_g17(d), want, "{d}");
        }
        assert_eq!(format_d2string(123456789012345678.0), "123456789012345680");
        assert_eq!(format_d2string(1.5), "1.5");
    }

    #[test]
    fn doubles_parse_as_getdouble_does() {
        assert_eq!(parse_double(b"1.5"), Some(1.5));
        assert_eq!(parse_double(b"-inf"), Some(f64::NEG_INFINITY));
        assert_eq!(parse_double(b"+inf"), Some(f64::INFINITY));
        for bad in [
            &b"nan"[..],
            b"",
            b" 1",
            b"1 ",
            b"1e400",
            b"1e-400",
            b"abc",
            b"--1",
        ] {
            assert_eq!(
                parse_double(bad),
                None,
                "{:?}",
                String::from_utf8_lossy(bad)
            );
        }
    }
}

//! HSCAN's, SSCAN's and ZSCAN's arguments and pages, as Redis reads and
//! answers them (`scanGenericCommand`).

use bytes::Bytes;

use super::{hashes, parse_i64, ERR_NOT_INTEGER, ERR_SYNTAX};

/// HSCAN's and SSCAN's arguments: where to go on, which elements, how
/// many — and an option Redis refuses, answered only once the key was
/// found of the right type (Redis reads the options after the key).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ScanArgs {
    /// A position in the elements' sorted order.
    pub cursor: u64,
    /// MATCH.
    pub pattern: Option<Bytes>,
    /// COUNT (at least 1).
    pub count: u64,
    /// A refused option (`ERR_SYNTAX` or `ERR_NOT_INTEGER`).
    pub refused: Option<&'static str>,
}

/// Parses a SCAN cursor as Redis does (C's `strtoul`, base 10): an optional
/// sign then digits, where no digits at all is 0 and a minus sign wraps
/// around; refused when it starts with a space, has anything after the
/// digits (the text ends at a NUL byte) or overflows.
pub fn parse_cursor(arg: &[u8]) -> Option<u64> {
    let s = arg.iter().position(|&c| c == 0).map_or(arg, |n| &arg[..n]);
    if s.is_empty() {
        return Some(0);
    }
    let (neg, digits) = match s[0] {
        b'-' => (true, &s[1..]),
        b'+' => (false, &s[1..]),
        _ => (false, s),
    };
    if digits.is_empty() || !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    let mut n: u64 = 0;
    for d in digits {
        n = n.checked_mul(10)?.checked_add(u64::from(d - b'0'))?;
    }
    Some(if neg { n.wrapping_neg() } else { n })
}

/// HSCAN's, SSCAN's and ZSCAN's `key cursor [MATCH p] [COUNT n]`: the
/// cursor is checked now, the options only once the key is found (Redis
/// reads them after the key), so a refused option rides along in the op.
pub fn scan_args_of(args: &[Bytes]) -> Result<ScanArgs, String> {
    let Some(cursor) = parse_cursor(&args[2]) else {
        return Err("ERR invalid cursor".into());
    };
    let mut scan = ScanArgs {
        cursor,
        pattern: None,
        count: 10,
        refused: None,
    };
    let mut i = 3;
    while i < args.len() && scan.refused.is_none() {
        match args.get(i + 1) {
            None => scan.refused = Some(ERR_SYNTAX),
            Some(v) if args[i].eq_ignore_ascii_case(b"COUNT") => match parse_i64(v) {
                None => scan.refused = Some(ERR_NOT_INTEGER),
                Some(n) if n < 1 => scan.refused = Some(ERR_SYNTAX),
                Some(n) => scan.count = n as u64,
            },
            Some(v) if args[i].eq_ignore_ascii_case(b"MATCH") => scan.pattern = Some(v.clone()),
            Some(_) => scan.refused = Some(ERR_SYNTAX),
        }
        i += 2;
    }
    Ok(scan)
}

impl ScanArgs {
    /// One page of `items` (sorted here): all of them when `packed`, else
    /// `count` from the cursor; and the next cursor (0 at the end).
    pub fn page<T: Ord>(&self, mut items: Vec<T>, packed: bool) -> (Vec<T>, u64) {
        if packed {
            return (items, 0);
        }
        items.sort();
        let from = (self.cursor as usize).min(items.len());
        let to = from.saturating_add(self.count as usize).min(items.len());
        let next = if to >= items.len() { 0 } else { to as u64 };
        (items.drain(from..to).collect(), next)
    }

    /// True when `element` passes MATCH.
    pub fn matches(&self, element: &[u8]) -> bool {
        self.pattern
            .as_deref()
            .is_none_or(|p| crate::glob::matches(p, element))
    }

    /// Appends the wire form to `out`.
    pub fn encode(&self, out: &mut Vec<u8>) {
        use bytes::BufMut;
        out.put_u64_le(self.cursor);
        out.put_u64_le(self.count);
        out.put_u8(match self.refused {
            None => 0,
            Some(e) if e == ERR_SYNTAX => 1,
            Some(_) => 2,
        });
        out.put_u8(u8::from(self.pattern.is_some()));
        if let Some(p) = &self.pattern {
            hashes::put_bytes(out, p);
        }
    }

    /// Reads what [`ScanArgs::encode`] wrote.
    pub fn decode(buf: &mut Bytes) -> Option<ScanArgs> {
        use bytes::Buf;
        let cursor = hashes::get_u64(buf)?;
        let count = hashes::get_u64(buf)?;
        if buf.remaining() < 2 {
            return None;
        }
        let refused = match buf.get_u8() {
            0 => None,
            1 => Some(ERR_SYNTAX),
            _ => Some(ERR_NOT_INTEGER),
        };
        let pattern = if buf.get_u8() == 1 {
            Some(hashes::get_bytes(buf)?)
        } else {
            None
        };
        Some(ScanArgs {
            cursor,
            pattern,
            count,
            refused,
        })
    }
}

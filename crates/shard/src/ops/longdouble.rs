//! INCRBYFLOAT's arithmetic, exactly as Redis does it on x86-64: C's
//! `long double` there is the x87 extended format (a 64-bit significand,
//! exponents down to 2^-16445 and up to 2^16383), so `0 + 0.1` is not the
//! `f64` sum — it prints as `0.1` where an `f64` would print
//! `0.10000000000000001`. Rust has no such type, so it is emulated: parse
//! as glibc's `strtold` does (decimal, hexadecimal, `inf`; correctly
//! rounded, ties to even), add with one rounding, print as `%.17Lf` with
//! the trailing zeros cut (Redis's "human friendly" form).
//!
//! Exactness comes from big integers: every value here is a dyadic
//! rational, so parsing and printing reduce to integer division and
//! shifts. The numbers stay small (a 5 kB argument is the most Redis
//! accepts), and INCRBYFLOAT is not a hot path.

use num_bigint::{BigInt, BigUint, Sign};

/// Significand bits of the x87 extended format (the integer bit included).
const MANT_BITS: u64 = 64;
/// Exponent of the lowest significand bit of the smallest subnormal (and
/// of every normal number with the smallest exponent): 2^(1-16383-63).
const MIN_EXP: i64 = -16445;
/// The largest exponent a 64-bit significand may carry: 2^(16383-63).
const MAX_EXP: i64 = 16320;
/// Redis refuses numbers written with this many bytes or more
/// (`MAX_LONG_DOUBLE_CHARS`).
const MAX_CHARS: usize = 5 * 1024;

/// A finite x87 extended value: `(-1)^neg × mant × 2^exp`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LongDouble {
    neg: bool,
    mant: u64,
    exp: i64,
}

/// What `strtold` made of a string Redis accepts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Parsed {
    /// A finite number (zero included).
    Finite(LongDouble),
    /// `inf` / `infinity`, either sign: accepted, but any sum with it is
    /// refused later, as Redis refuses an infinite result.
    Infinite,
}

/// Why an INCRBYFLOAT cannot go ahead.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FloatError {
    /// The stored value or the increment is not a number Redis reads.
    NotFloat,
    /// The sum is infinite (or not a number).
    NanOrInfinity,
}

/// `value + incr` as Redis's INCRBYFLOAT computes and prints it.
pub fn incr_by_float(value: &[u8], incr: &[u8]) -> Result<String, FloatError> {
    let a = parse(value).ok_or(FloatError::NotFloat)?;
    let b = parse(incr).ok_or(FloatError::NotFloat)?;
    match (a, b) {
        (Parsed::Finite(a), Parsed::Finite(b)) => {
            add(a, b).map(human).ok_or(FloatError::NanOrInfinity)
        }
        _ => Err(FloatError::NanOrInfinity),
    }
}

/// Parses like Redis's `string2ld`: the whole string must be one number as
/// `strtold` reads it (no leading space, nothing after it); NaN, overflow
/// and a non-zero number that rounds to zero are refused.
pub fn parse(s: &[u8]) -> Option<Parsed> {
    if s.is_empty() || s.len() >= MAX_CHARS || s[0].is_ascii_whitespace() || s[0] == 0x0b {
        return None;
    }
    let (neg, body) = match s[0] {
        b'-' => (true, &s[1..]),
        b'+' => (false, &s[1..]),
        _ => (false, s),
    };
    if body.eq_ignore_ascii_case(b"inf") || body.eq_ignore_ascii_case(b"infinity") {
        return Some(Parsed::Infinite);
    }
    let value = if body.len() > 2 && body[0] == b'0' && (body[1] | 0x20) == b'x' {
        parse_hex(neg, &body[2..])?
    } else {
        parse_decimal(neg, body)?
    };
    Some(Parsed::Finite(value))
}

/// Digits with an optional point, then an optional exponent: the parts,
/// or `None` unless the whole input is exactly that.
struct Number {
    digits: Vec<u8>,
    /// How many of `digits` came after the point.
    fraction: usize,
    /// The exponent as written (clamped: beyond ±10^9 only the sign and
    /// "huge" matter).
    exponent: i64,
}

fn split_number(s: &[u8], is_digit: fn(u8) -> bool, exp_char: u8) -> Option<Number> {
    let mut i = 0;
    let mut digits = Vec::new();
    let mut fraction = 0;
    while i < s.len() && is_digit(s[i]) {
        digits.push(s[i]);
        i += 1;
    }
    if i < s.len() && s[i] == b'.' {
        i += 1;
        while i < s.len() && is_digit(s[i]) {
            digits.push(s[i]);
            fraction += 1;
            i += 1;
        }
    }
    if digits.is_empty() {
        return None;
    }
    let mut exponent = 0i64;
    if i < s.len() && (s[i] | 0x20) == exp_char {
        i += 1;
        let neg = match s.get(i) {
            Some(b'-') => {
                i += 1;
                true
            }
            Some(b'+') => {
                i += 1;
                false
            }
            _ => false,
        };
        let start = i;
        while i < s.len() && s[i].is_ascii_digit() {
            exponent = (exponent * 10 + i64::from(s[i] - b'0')).min(1_000_000_000);
            i += 1;
        }
        if i == start {
            // `strtold` would stop before the `e`: not the whole string.
            return None;
        }
        if neg {
            exponent = -exponent;
        }
    }
    (i == s.len()).then_some(Number {
        digits,
        fraction,
        exponent,
    })
}

fn parse_decimal(neg: bool, s: &[u8]) -> Option<LongDouble> {
    let n = split_number(s, |c| c.is_ascii_digit(), b'e')?;
    let first = n.digits.iter().position(|&d| d != b'0');
    let Some(first) = first else {
        return Some(LongDouble::zero(neg));
    };
    let digits = &n.digits[first..];
    // value = digits × 10^e, with digits.len() significant digits.
    let e = n.exponent - n.fraction as i64;
    let magnitude = e + digits.len() as i64; // value < 10^magnitude
    if magnitude - 1 > 4932 {
        return None; // overflow: above the largest long double
    }
    if magnitude < -4951 {
        return None; // below half the smallest subnormal: rounds to zero
    }
    let d = BigUint::parse_bytes(digits, 10)?;
    if e >= 0 {
        let n = d * BigUint::from(5u32).pow(e as u32);
        return round(neg, &n, e, false);
    }
    // value = d / (5^k × 2^k): divide with enough quotient bits to round.
    let k = (-e) as u32;
    let five = BigUint::from(5u32).pow(k);
    let want = MANT_BITS + 2 + five.bits();
    let s = want.saturating_sub(d.bits());
    let num = d << s;
    let q = &num / &five;
    let sticky = (&q * &five) != num;
    round(neg, &q, -(s as i64) - i64::from(k), sticky)
}

fn parse_hex(neg: bool, s: &[u8]) -> Option<LongDouble> {
    let n = split_number(s, |c| c.is_ascii_hexdigit(), b'p')?;
    let first = n.digits.iter().position(|&d| d != b'0');
    let Some(first) = first else {
        return Some(LongDouble::zero(neg));
    };
    let digits = &n.digits[first..];
    let e = n.exponent - 4 * n.fraction as i64;
    let top = e + 4 * digits.len() as i64; // value < 2^top
    if top > MAX_EXP + MANT_BITS as i64 + 1 {
        return None;
    }
    if top < MIN_EXP - 1 {
        return None;
    }
    let h = BigUint::parse_bytes(digits, 16)?;
    round(neg, &h, e, false)
}

impl LongDouble {
    fn zero(neg: bool) -> LongDouble {
        LongDouble {
            neg,
            mant: 0,
            exp: 0,
        }
    }
}

/// Rounds `n × 2^e` (plus a little more when `sticky`: the exact value was
/// cut below `n`'s last bit) to the nearest long double, ties to even.
/// `None` on overflow, and for a non-zero value that rounds to zero (what
/// `strtold` reports as a range error).
fn round(neg: bool, n: &BigUint, e: i64, sticky: bool) -> Option<LongDouble> {
    if n.bits() == 0 {
        return None;
    }
    let bits = n.bits() as i64;
    // Drop bits so the significand has 64, but never below the smallest
    // exponent (subnormals keep fewer).
    let shift = (bits - MANT_BITS as i64).max(MIN_EXP - e);
    let (mant, exp) = if shift <= 0 {
        let m: u64 = (n << (-shift) as u64).try_into().ok()?;
        (m, e + shift)
    } else {
        let shift_u = shift as u64;
        let kept: BigUint = n >> shift_u;
        let rest: BigUint = n - (&kept << shift_u);
        let half = BigUint::from(1u32) << (shift_u - 1);
        let mut m: u64 = kept.try_into().ok()?;
        if rest > half || (rest == half && (sticky || m & 1 == 1)) {
            match m.checked_add(1) {
                Some(v) => m = v,
                None => return round_carry(neg, e + shift),
            }
        }
        (m, e + shift)
    };
    // Zero here means a non-zero value below half the smallest subnormal.
    (mant != 0 && exp <= MAX_EXP).then_some(LongDouble { neg, mant, exp })
}

/// Rounding carried the significand past 64 bits: it is 2^64 × 2^exp.
fn round_carry(neg: bool, exp: i64) -> Option<LongDouble> {
    let exp = exp + 1;
    (exp <= MAX_EXP).then_some(LongDouble {
        neg,
        mant: 1 << 63,
        exp,
    })
}

/// The long double nearest `a + b`; `None` when it overflows.
fn add(a: LongDouble, b: LongDouble) -> Option<LongDouble> {
    if a.mant == 0 && b.mant == 0 {
        // -0 + -0 is -0; any other sum of zeros is +0.
        return Some(LongDouble::zero(a.neg && b.neg));
    }
    let e = a.exp.min(b.exp);
    let signed = |x: LongDouble| {
        let m = BigInt::from(x.mant) << (x.exp - e) as u64;
        if x.neg {
            -m
        } else {
            m
        }
    };
    let sum = signed(a) + signed(b);
    let (sign, mag) = sum.into_parts();
    if sign == Sign::NoSign {
        // x + (-x) is +0 when rounding to nearest.
        return Some(LongDouble::zero(false));
    }
    // An exact sum of two long doubles never rounds to zero.
    round(sign == Sign::Minus, &mag, e, false)
}

/// `%.17Lf`, then trailing zeros (and a bare point) cut, and `-0` as `0`:
/// Redis's `ld2string(…, LD_STR_HUMAN)`.
fn human(x: LongDouble) -> String {
    const PLACES: usize = 17;
    let scaled = if x.mant == 0 {
        BigUint::from(0u32)
    } else if x.exp >= 0 {
        (BigUint::from(x.mant) << x.exp as u64) * BigUint::from(10u32).pow(PLACES as u32)
    } else {
        // Round mant × 10^17 / 2^k to an integer, ties to even (glibc
        // prints the exact binary value correctly rounded).
        let k = (-x.exp) as u64;
        let n = BigUint::from(x.mant) * BigUint::from(10u32).pow(PLACES as u32);
        let q: BigUint = &n >> k;
        let rest = &n - (&q << k);
        let half = BigUint::from(1u32) << (k - 1);
        if rest > half || (rest == half && q.bit(0)) {
            q + 1u32
        } else {
            q
        }
    };
    let mut digits = scaled.to_str_radix(10);
    if digits.len() <= PLACES {
        digits = format!("{}{digits}", "0".repeat(PLACES + 1 - digits.len()));
    }
    let (int, frac) = digits.split_at(digits.len() - PLACES);
    let frac = frac.trim_end_matches('0');
    let mut out = String::with_capacity(digits.len() + 2);
    if x.neg {
        out.push('-');
    }
    out.push_str(int);
    if !frac.is_empty() {
        out.push('.');
        out.push_str(frac);
    }
    if out == "-0" {
        out.remove(0);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn incr(value: &str, by: &str) -> Result<String, FloatError> {
        incr_by_float(value.as_bytes(), by.as_bytes())
    }

    /// Every expected answer below is what redis-server 7.0 (x86-64)
    /// replied to `SET k <value>; INCRBYFLOAT k <by>`.
    #[test]
    fn sums_print_as_redis_prints_them() {
        for (value, by, want) in [
            ("0", "0.1", "0.1"),
            ("10.50", "0.1", "10.6"),
            ("5.0e3", "2.0e2", "5200"),
            ("0x10", "1", "17"),
            ("0", "1.5e-10", "0.00000000015"),
            ("0", "-5", "-5"),
            // 2^-18 has 18 decimals ending in 5: a tie, to even.
            ("0", "0.000003814697265625", "0.00000381469726562"),
            ("0", "0.000003814697265624", "0.00000381469726562"),
            ("0", "-1e-20", "0"),
            ("0", "0e-5000", "0"),
            ("3.14", "-3.14", "0"),
            ("1", "0x1p-3", "1.125"),
            ("0", ".5", "0.5"),
            ("0", "5.", "5"),
            ("0", "+1.5", "1.5"),
            ("0", "-0", "0"),
            ("-0", "0", "0"),
            ("9223372036854775807", "1", "9223372036854775808"),
            ("0", "3.6e-4951", "0"),
            ("0", "0.1e-4945", "0"),
            ("1", "1e-17", "1.00000000000000001"),
            ("1", "5e-18", "1"),
            ("1", "1.5e-17", "1.00000000000000001"),
            (
                "0",
                "123456789012345678901234567890",
                "123456789012345678899921813504",
            ),
        ] {
            assert_eq!(incr(value, by).as_deref(), Ok(want), "{value} + {by}");
        }
    }

    #[test]
    fn huge_values_print_every_integer_digit() {
        let got = incr("0", "1e300").unwrap();
        assert!(
            got.starts_with("10000000000000000000089973240795591938705239442732907479"),
            "{got}"
        );
        assert_eq!(got.len(), 301);
        assert!(got.ends_with("6144"));
        let max = incr("0", "1.18973149535723176502e+4932").unwrap();
        assert_eq!(max.len(), 4933);
        assert!(max.starts_with("118973149535723176502126385303097020516906"));
        assert!(max.ends_with("1989770240"), "{max}");
    }

    #[test]
    fn refusals_match_redis() {
        for (value, by) in [
            ("0", "1e5000"),
            ("0", "1e-5000"),
            ("0", "1e-4951"),
            ("0", "1.18973149535723176509e+4932"),
            ("0", "1e"),
            ("0", "nan"),
            ("0", " 1"),
            ("0", "1 "),
            ("0", ""),
            ("0", "abc"),
            ("0", "0x"),
            ("0", "0x1p"),
            ("0", "."),
            ("0", "1\0"),
            ("abc", "1"),
        ] {
            assert_eq!(
                incr(value, by),
                Err(FloatError::NotFloat),
                "{value:?} + {by:?}"
            );
        }
        assert_eq!(incr("0", "inf"), Err(FloatError::NanOrInfinity));
        assert_eq!(incr("0", "-Infinity"), Err(FloatError::NanOrInfinity));
        assert_eq!(incr("inf", "1"), Err(FloatError::NanOrInfinity));
        let max = "1.18973149535723176502e+4932";
        assert_eq!(incr(max, max), Err(FloatError::NanOrInfinity));
        let long = "1".repeat(MAX_CHARS);
        assert_eq!(incr("0", &long), Err(FloatError::NotFloat));
    }

    #[test]
    fn parsing_rounds_to_the_nearest_long_double() {
        let Some(Parsed::Finite(x)) = parse(b"0.1") else {
            panic!("0.1 parses")
        };
        // 0.1 = 0xCCCCCCCCCCCCCCCD × 2^-67 in x87 extended precision.
        assert_eq!(
            x,
            LongDouble {
                neg: false,
                mant: 0xCCCC_CCCC_CCCC_CCCD,
                exp: -67
            }
        );
        let Some(Parsed::Finite(y)) = parse(b"18446744073709551615") else {
            panic!("2^64-1 parses")
        };
        // 2^64 - 1 needs 64 bits exactly: no rounding.
        assert_eq!(y.mant, u64::MAX);
        let Some(Parsed::Finite(z)) = parse(b"36893488147419103231") else {
            panic!("2^65-1 parses")
        };
        // 2^65 - 1 rounds up to 2^65.
        assert_eq!((z.mant, z.exp), (1 << 63, 2));
    }
}

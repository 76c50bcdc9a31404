//! Bit commands: GETBIT, SETBIT, BITCOUNT, BITPOS.
//!
//! Redis reads BITCOUNT's and BITPOS's range arguments only after it found
//! the key (a missing key answers 0 or -1 whatever follows), so their
//! refusals travel inside the op ([`BitRange::Refused`]) instead of being
//! answered here.

use elsa_shard::ops::{parse_i64, ERR_NOT_INTEGER, ERR_SYNTAX, MAX_STRING};
use elsa_shard::{BitRange, Op};

use super::{c_str, int_arg, is, one, Args, CmdError, DataCmd};

/// A bit offset as Redis's `getBitOffsetFromArgument` takes it: a whole
/// number from 0 up to the last bit of a 512 MB string.
fn bit_offset(arg: &[u8]) -> Result<u64, CmdError> {
    match parse_i64(arg) {
        Some(n) if n >= 0 && ((n >> 3) as u64) < MAX_STRING as u64 => Ok(n as u64),
        _ => Err("ERR bit offset is not an integer or out of range".into()),
    }
}

/// GETBIT key offset
pub fn getbit(args: &Args) -> Result<DataCmd, CmdError> {
    one(args, Op::GetBit(bit_offset(&args[2])?))
}

/// SETBIT key offset 0|1
pub fn setbit(args: &Args) -> Result<DataCmd, CmdError> {
    let offset = bit_offset(&args[2])?;
    let on = match parse_i64(&args[3]) {
        Some(0) => false,
        Some(1) => true,
        _ => return Err("ERR bit is not an integer or out of range".into()),
    };
    one(args, Op::SetBit { offset, on })
}

/// BIT or BYTE, compared as Redis compares it (a C string: a NUL ends it).
fn unit(arg: &[u8]) -> Option<bool> {
    let arg = c_str(arg);
    if is(arg, "BIT") {
        Some(true)
    } else if is(arg, "BYTE") {
        Some(false)
    } else {
        None
    }
}

fn index(arg: &[u8]) -> Result<i64, BitRange> {
    parse_i64(arg).ok_or(BitRange::Refused(ERR_NOT_INTEGER))
}

/// BITCOUNT key [start end [BIT|BYTE]]
pub fn bitcount(args: &Args) -> Result<DataCmd, CmdError> {
    let range = match args.len() {
        2 => BitRange::All,
        4 | 5 => bitcount_span(args).unwrap_or_else(|refused| refused),
        _ => BitRange::Refused(ERR_SYNTAX),
    };
    one(args, Op::BitCount(range))
}

fn bitcount_span(args: &Args) -> Result<BitRange, BitRange> {
    let start = index(&args[2])?;
    let end = index(&args[3])?;
    // Redis answers 0 for a reversed negative range before it reads the
    // unit, so a bad unit then is no error.
    let bits = if start < 0 && end < 0 && start > end {
        false
    } else {
        match args.get(4) {
            None => false,
            Some(u) => unit(u).ok_or(BitRange::Refused(ERR_SYNTAX))?,
        }
    };
    Ok(BitRange::Span {
        start,
        end: Some(end),
        bits,
    })
}

/// BITPOS key 0|1 [start [end [BIT|BYTE]]]
pub fn bitpos(args: &Args) -> Result<DataCmd, CmdError> {
    let bit = match int_arg(&args[2])? {
        0 => false,
        1 => true,
        _ => return Err("ERR The bit argument must be 1 or 0.".into()),
    };
    let range = match args.len() {
        3 => BitRange::All,
        4..=6 => bitpos_span(args).unwrap_or_else(|refused| refused),
        _ => BitRange::Refused(ERR_SYNTAX),
    };
    one(args, Op::BitPos { bit, range })
}

fn bitpos_span(args: &Args) -> Result<BitRange, BitRange> {
    // In Redis's order: start, then the unit, then end.
    let start = index(&args[3])?;
    let bits = match args.get(5) {
        None => false,
        Some(u) => unit(u).ok_or(BitRange::Refused(ERR_SYNTAX))?,
    };
    let end = args.get(4).map(|e| index(e)).transpose()?;
    Ok(BitRange::Span { start, end, bits })
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::cmd::test_args as args;

    fn op(r: Result<DataCmd, CmdError>) -> Result<Op, String> {
        r.map(|mut c| c.ops.remove(0).1).map_err(|e| e.0)
    }

    #[test]
    fn offsets_stop_at_512_mb() {
        assert_eq!(
            op(getbit(&args("GETBIT k 4294967295"))),
            Ok(Op::GetBit(4_294_967_295))
        );
        for line in [
            "GETBIT k 4294967296",
            "GETBIT k -1",
            "GETBIT k x",
            "GETBIT k 01",
        ] {
            assert_eq!(
                op(getbit(&args(line))),
                Err("ERR bit offset is not an integer or out of range".into()),
                "{line}"
            );
        }
        for line in ["SETBIT k 0 2", "SETBIT k 0 -1", "SETBIT k 0 x"] {
            assert_eq!(
                op(setbit(&args(line))),
                Err("ERR bit is not an integer or out of range".into()),
                "{line}"
            );
        }
        assert!(op(setbit(&args("SETBIT k 4294967296 x"))).is_err_and(|e| e.contains("offset")));
    }

    #[test]
    fn range_refusals_wait_for_the_key() {
        let count = |line| op(bitcount(&args(line)));
        assert_eq!(count("BITCOUNT k"), Ok(Op::BitCount(BitRange::All)));
        assert_eq!(
            count("BITCOUNT k 0"),
            Ok(Op::BitCount(BitRange::Refused(ERR_SYNTAX)))
        );
        assert_eq!(
            count("BITCOUNT k a 1"),
            Ok(Op::BitCount(BitRange::Refused(ERR_NOT_INTEGER)))
        );
        assert_eq!(
            count("BITCOUNT k 0 1 FOO"),
            Ok(Op::BitCount(BitRange::Refused(ERR_SYNTAX)))
        );
        assert!(matches!(
            count("BITCOUNT k -1 -2 FOO"),
            Ok(Op::BitCount(BitRange::Span { .. }))
        ));
        assert_eq!(
            count("BITCOUNT k 0 1 bit x"),
            Ok(Op::BitCount(BitRange::Refused(ERR_SYNTAX)))
        );
        let pos = |line| op(bitpos(&args(line)));
        assert_eq!(
            pos("BITPOS k 2"),
            Err("ERR The bit argument must be 1 or 0.".into())
        );
        assert_eq!(pos("BITPOS k x"), Err(ERR_NOT_INTEGER.into()));
        assert_eq!(
            pos("BITPOS k 1 0 x foo"),
            Ok(Op::BitPos {
                bit: true,
                range: BitRange::Refused(ERR_SYNTAX)
            }),
            "the unit is read before the end"
        );
        assert_eq!(
            pos("BITPOS k 0 3"),
            Ok(Op::BitPos {
                bit: false,
                range: BitRange::Span {
                    start: 3,
                    end: None,
                    bits: false
                }
            })
        );
    }
}

//! Bit commands: GETBIT, SETBIT, BITCOUNT, BITPOS, BITFIELD, BITFIELD_RO,
//! BITOP.
//!
//! Redis reads BITCOUNT's and BITPOS's range arguments only after it found
//! the key (a missing key answers 0 or -1 whatever follows), so their
//! refusals travel inside the op ([`BitRange::Refused`]) instead of being
//! answered here.

use elsa_shard::ops::bitfield::{Action, BitField, Field, Overflow};
use elsa_shard::ops::bits::{BitOp, BitOpKind};
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

/// BITFIELD key [GET type offset | [OVERFLOW WRAP|SAT|FAIL] SET type
/// offset value | INCRBY type offset increment] …
pub fn bitfield(args: &Args) -> Result<DataCmd, CmdError> {
    one(args, Op::BitField(bitfield_fields(args)?))
}

/// BITFIELD_RO key [GET type offset] …: BITFIELD's parse, then any write
/// refused (before the key is looked at, as in Redis).
pub fn bitfield_ro(args: &Args) -> Result<DataCmd, CmdError> {
    let fields = bitfield_fields(args)?;
    if fields.is_write() {
        return Err("ERR BITFIELD_RO only supports the GET subcommand".into());
    }
    one(args, Op::BitField(fields))
}

/// The subcommands, checked left to right as Redis's `bitfieldGeneric`
/// checks them: the first bad argument is the error, and nothing runs.
fn bitfield_fields(args: &Args) -> Result<BitField, CmdError> {
    let mut fields = Vec::new();
    let mut overflow = Overflow::Wrap;
    let mut j = 2;
    while j < args.len() {
        let left = args.len() - j - 1;
        let sub = c_str(&args[j]);
        // What the subcommand makes of its value (GET takes none).
        let action: fn(i64) -> Action = if is(sub, "GET") && left >= 2 {
            |_| Action::Get
        } else if is(sub, "SET") && left >= 3 {
            Action::Set
        } else if is(sub, "INCRBY") && left >= 3 {
            Action::IncrBy
        } else if is(sub, "OVERFLOW") && left >= 1 {
            let kind = c_str(&args[j + 1]);
            overflow = if is(kind, "WRAP") {
                Overflow::Wrap
            } else if is(kind, "SAT") {
                Overflow::Sat
            } else if is(kind, "FAIL") {
                Overflow::Fail
            } else {
                return Err("ERR Invalid OVERFLOW type specified".into());
            };
            j += 2;
            continue;
        } else {
            return Err(ERR_SYNTAX.into());
        };
        let (signed, bits) = bitfield_type(&args[j + 1])?;
        let offset = bitfield_offset(&args[j + 2], bits)?;
        let action = if action(0) == Action::Get {
            Action::Get
        } else {
            action(parse_i64(&args[j + 3]).ok_or(ERR_NOT_INTEGER)?)
        };
        fields.push(Field {
            action,
            signed,
            bits,
            offset,
            overflow,
        });
        j += if action == Action::Get { 3 } else { 4 };
    }
    Ok(BitField(fields))
}

/// `i1`..`i64` or `u1`..`u63` (Redis's replies are signed 64-bit, so no
/// `u64`); read as Redis reads it, up to a NUL.
fn bitfield_type(arg: &[u8]) -> Result<(bool, u8), CmdError> {
    const ERR: &str = "ERR Invalid bitfield type. Use something like i16 u8. Note that u64 is not supported but i64 is.";
    let arg = c_str(arg);
    let signed = match arg.first() {
        Some(b'i') => true,
        Some(b'u') => false,
        _ => return Err(ERR.into()),
    };
    let max = if signed { 64 } else { 63 };
    match parse_i64(&arg[1..]) {
        Some(n) if (1..=max).contains(&n) => Ok((signed, n as u8)),
        _ => Err(ERR.into()),
    }
}

/// A bit offset, or `#n`: the n-th field of this width. Redis multiplies
/// without an overflow check (a wrapped product is then refused as
/// negative or past 512 MB, or taken as it wrapped), and so does this.
fn bitfield_offset(arg: &[u8], bits: u8) -> Result<u64, CmdError> {
    let (n, times) = match arg.strip_prefix(b"#") {
        Some(rest) => (rest, i64::from(bits)),
        None => (arg, 1),
    };
    match parse_i64(n).map(|n| n.wrapping_mul(times)) {
        Some(n) if n >= 0 && ((n >> 3) as u64) < MAX_STRING as u64 => Ok(n as u64),
        _ => Err("ERR bit offset is not an integer or out of range".into()),
    }
}

/// BITOP AND|OR|XOR|NOT destination key [key …]: runs on the first
/// source and reaches the others and the destination (last), so all of
/// them commit in one step, across shards and nodes too.
pub fn bitop(args: &Args) -> Result<DataCmd, CmdError> {
    let name = c_str(&args[1]);
    let how = if is(name, "AND") {
        BitOpKind::And
    } else if is(name, "OR") {
        BitOpKind::Or
    } else if is(name, "XOR") {
        BitOpKind::Xor
    } else if is(name, "NOT") {
        BitOpKind::Not
    } else {
        return Err(ERR_SYNTAX.into());
    };
    if how == BitOpKind::Not && args.len() != 4 {
        return Err("ERR BITOP NOT must be called with a single source key.".into());
    }
    let mut keys: Vec<_> = args[4..].to_vec();
    keys.push(args[2].clone());
    Ok(DataCmd {
        ops: vec![(args[3].clone(), Op::BitOp(BitOp { how, keys }))],
        shape: super::Shape::One,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::cmd::test_args as args;

    fn op(r: Result<DataCmd, CmdError>) -> Result<Op, String> {
        r.map(|mut c| c.ops.remove(0).1).map_err(|e| e.0)
    }

    #[test]
    fn bitfield_checks_its_arguments_in_redis_order() {
        let fields = |line| match op(bitfield(&args(line))) {
            Ok(Op::BitField(b)) => Ok(b.0),
            Ok(other) => panic!("{other:?}"),
            Err(e) => Err(e),
        };
        let f = fields("BITFIELD k GET u8 #2 OVERFLOW fail INCRBY i64 7 -3 set i3 0 9").unwrap();
        assert_eq!(f.len(), 3);
        assert_eq!(
            (f[0].action, f[0].offset, f[0].overflow),
            (Action::Get, 16, Overflow::Wrap)
        );
        assert_eq!(
            (f[1].action, f[1].bits, f[1].signed),
            (Action::IncrBy(-3), 64, true)
        );
        assert_eq!(
            (f[2].action, f[2].overflow),
            (Action::Set(9), Overflow::Fail)
        );
        assert_eq!(fields("BITFIELD k").unwrap(), vec![]);
        for (line, err) in [
            ("BITFIELD k GET u8", "ERR syntax error"),
            ("BITFIELD k FOO u8 0", "ERR syntax error"),
            ("BITFIELD k OVERFLOW", "ERR syntax error"),
            (
                "BITFIELD k OVERFLOW up GET x 0",
                "ERR Invalid OVERFLOW type specified",
            ),
            ("BITFIELD k GET u64 0", "ERR Invalid bitfield type"),
            ("BITFIELD k GET I8 0", "ERR Invalid bitfield type"),
            ("BITFIELD k GET i0 0", "ERR Invalid bitfield type"),
            ("BITFIELD k GET i65 x", "ERR Invalid bitfield type"),
            ("BITFIELD k GET i8 -1", "ERR bit offset"),
            ("BITFIELD k GET i8 #", "ERR bit offset"),
            ("BITFIELD k GET i8 4294967296", "ERR bit offset"),
            ("BITFIELD k SET i8 0 x", "ERR value is not an integer"),
            ("BITFIELD k SET i8 x x", "ERR bit offset"),
        ] {
            let e = fields(line).unwrap_err();
            assert!(e.starts_with(err), "{line}: {e}");
        }
        assert_eq!(
            op(bitfield_ro(&args("BITFIELD_RO k GET u8 0 SET u8 0 1"))).unwrap_err(),
            "ERR BITFIELD_RO only supports the GET subcommand"
        );
        assert!(op(bitfield_ro(&args("BITFIELD_RO k GET u8 0 GET i3 #9"))).is_ok());
    }

    #[test]
    fn bitop_runs_on_the_first_source_and_reaches_the_rest() {
        match op(bitop(&args("BITOP xor d a b c"))) {
            Ok(Op::BitOp(b)) => {
                assert_eq!(b.how, BitOpKind::Xor);
                assert_eq!(b.keys, ["b", "c", "d"]);
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(
            op(bitop(&args("BITOP NAND d a"))).unwrap_err(),
            "ERR syntax error"
        );
        assert_eq!(
            op(bitop(&args("BITOP not d a b"))).unwrap_err(),
            "ERR BITOP NOT must be called with a single source key."
        );
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

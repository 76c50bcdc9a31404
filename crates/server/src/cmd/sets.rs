//! Set commands: SADD SREM SMEMBERS SISMEMBER SMISMEMBER SCARD SPOP
//! SRANDMEMBER SSCAN SMOVE SINTER SINTERCARD SUNION SDIFF SINTERSTORE
//! SUNIONSTORE SDIFFSTORE. Argument errors Redis reports before it looks a
//! key up are reported here; the rest by the op (`ops/sets.rs`).

use bytes::Bytes;
use elsa_shard::ops::sets::{Combine, SetOp};
use elsa_shard::Op;

use super::hashes::RAND_LIMIT;
use super::{int_arg, is, one, Args, CmdError, DataCmd};

fn set(args: &Args, op: SetOp) -> Result<DataCmd, CmdError> {
    one(args, Op::Sets(op))
}

/// SADD key member [member …]
pub fn sadd(args: &Args) -> Result<DataCmd, CmdError> {
    set(args, SetOp::Add(args[2..].to_vec()))
}

/// SREM key member [member …]
pub fn srem(args: &Args) -> Result<DataCmd, CmdError> {
    set(args, SetOp::Rem(args[2..].to_vec()))
}

/// SMEMBERS key
pub fn smembers(args: &Args) -> Result<DataCmd, CmdError> {
    set(args, SetOp::Members)
}

/// SISMEMBER key member
pub fn sismember(args: &Args) -> Result<DataCmd, CmdError> {
    set(args, SetOp::IsMember(args[2].clone()))
}

/// SMISMEMBER key member [member …]
pub fn smismember(args: &Args) -> Result<DataCmd, CmdError> {
    set(args, SetOp::MIsMember(args[2..].to_vec()))
}

/// SCARD key
pub fn scard(args: &Args) -> Result<DataCmd, CmdError> {
    set(args, SetOp::Card)
}

/// SPOP key [count]
pub fn spop(args: &Args) -> Result<DataCmd, CmdError> {
    let seed = rand::random();
    if args.len() > 3 {
        return Err(CmdError::syntax());
    }
    let count = match args.get(2) {
        None => None,
        // Redis's message for a count that is not a number too.
        Some(c) => match elsa_shard::ops::parse_i64(c) {
            Some(n) if n >= 0 => Some(n as u64),
            _ => return Err("ERR value is out of range, must be positive".into()),
        },
    };
    set(args, SetOp::Pop { count, seed })
}

/// SRANDMEMBER key [count]
pub fn srandmember(args: &Args) -> Result<DataCmd, CmdError> {
    let seed = rand::random();
    if args.len() > 3 {
        return Err(CmdError::syntax());
    }
    let count = match args.get(2) {
        None => None,
        Some(c) => {
            let n = int_arg(c)?;
            if n == i64::MIN {
                return Err(CmdError(format!(
                    "ERR value is out of range, value must between {} and {}",
                    -i64::MAX,
                    i64::MAX
                )));
            }
            if n < 0 && n.unsigned_abs() > RAND_LIMIT {
                return Err(CmdError(format!(
                    "ERR count is larger than Elsa answers at once ({RAND_LIMIT} elements)"
                )));
            }
            Some(n)
        }
    };
    set(args, SetOp::RandMember { count, seed })
}

/// SSCAN key cursor [MATCH pattern] [COUNT count]
pub fn sscan(args: &Args) -> Result<DataCmd, CmdError> {
    set(args, SetOp::Scan(super::scan_args(args)?))
}

/// SMOVE source destination member
pub fn smove(args: &Args) -> Result<DataCmd, CmdError> {
    set(
        args,
        SetOp::Move {
            to: [args[2].clone()],
            member: args[3].clone(),
        },
    )
}

fn combine(args: &Args, how: Combine) -> Result<DataCmd, CmdError> {
    set(
        args,
        SetOp::Combine {
            how,
            keys: args[2..].to_vec(),
            store: false,
        },
    )
}

/// The STORE forms: `args[1]` is the destination, the op runs on the
/// first source and reaches the others and the destination (last).
fn combine_store(args: &Args, how: Combine) -> Result<DataCmd, CmdError> {
    let mut keys: Vec<Bytes> = args[3..].to_vec();
    keys.push(args[1].clone());
    Ok(DataCmd {
        ops: vec![(
            args[2].clone(),
            Op::Sets(SetOp::Combine {
                how,
                keys,
                store: true,
            }),
        )],
        shape: super::Shape::One,
    })
}

/// SINTER key [key …]
pub fn sinter(args: &Args) -> Result<DataCmd, CmdError> {
    combine(args, Combine::Inter)
}

/// SUNION key [key …]
pub fn sunion(args: &Args) -> Result<DataCmd, CmdError> {
    combine(args, Combine::Union)
}

/// SDIFF key [key …]
pub fn sdiff(args: &Args) -> Result<DataCmd, CmdError> {
    combine(args, Combine::Diff)
}

/// SINTERSTORE destination key [key …]
pub fn sinterstore(args: &Args) -> Result<DataCmd, CmdError> {
    combine_store(args, Combine::Inter)
}

/// SUNIONSTORE destination key [key …]
pub fn sunionstore(args: &Args) -> Result<DataCmd, CmdError> {
    combine_store(args, Combine::Union)
}

/// SDIFFSTORE destination key [key …]
pub fn sdiffstore(args: &Args) -> Result<DataCmd, CmdError> {
    combine_store(args, Combine::Diff)
}

/// SINTERCARD numkeys key [key …] [LIMIT limit]
pub fn sintercard(args: &Args) -> Result<DataCmd, CmdError> {
    // Redis reads numkeys with one message for any bad value, a word or
    // an overflow included (`getRangeLongFromObjectOrReply`).
    let numkeys = match elsa_shard::ops::parse_i64(&args[1]) {
        Some(n) if n >= 1 => n as u64,
        _ => return Err("ERR numkeys should be greater than 0".into()),
    };
    if numkeys > (args.len() - 2) as u64 {
        return Err("ERR Number of keys can't be greater than number of args".into());
    }
    let n = numkeys as usize;
    let mut limit = 0u64;
    let mut i = 2 + n;
    while i < args.len() {
        if is(&args[i], "LIMIT") && i + 1 < args.len() {
            // Redis's message for a limit that is not a number too.
            match elsa_shard::ops::parse_i64(&args[i + 1]) {
                Some(l) if l >= 0 => limit = l as u64,
                _ => return Err("ERR LIMIT can't be negative".into()),
            }
            i += 2;
        } else {
            return Err(CmdError::syntax());
        }
    }
    Ok(DataCmd {
        ops: vec![(
            args[2].clone(),
            Op::Sets(SetOp::InterCard {
                keys: args[3..2 + n].to_vec(),
                limit,
            }),
        )],
        shape: super::Shape::One,
    })
}

#[cfg(test)]
mod tests {
    use super::super::test_args;
    use super::*;

    fn err(f: fn(&Args) -> Result<DataCmd, CmdError>, line: &str) -> String {
        f(&test_args(line)).map(|_| ()).unwrap_err().0
    }

    #[test]
    fn argument_errors_are_redis_s() {
        assert_eq!(
            err(spop, "SPOP s -1"),
            "ERR value is out of range, must be positive"
        );
        assert_eq!(err(spop, "SPOP s 1 2"), "ERR syntax error");
        assert_eq!(
            err(srandmember, "SRANDMEMBER s x"),
            "ERR value is not an integer or out of range"
        );
        for bad in ["0", "-1", "x", "9999999999999999999"] {
            assert_eq!(
                err(sintercard, &format!("SINTERCARD {bad} a")),
                "ERR numkeys should be greater than 0"
            );
        }
        assert_eq!(
            err(sintercard, "SINTERCARD 3 a b"),
            "ERR Number of keys can't be greater than number of args"
        );
        assert_eq!(
            err(sintercard, "SINTERCARD 1 a LIMIT -1"),
            "ERR LIMIT can't be negative"
        );
        assert_eq!(err(sintercard, "SINTERCARD 1 a FOO"), "ERR syntax error");
        assert_eq!(err(sscan, "SSCAN s abc"), "ERR invalid cursor");
    }

    #[test]
    fn store_forms_reach_the_destination_last() {
        let d = sinterstore(&test_args("SINTERSTORE dst a b c")).unwrap();
        assert_eq!(&d.ops[0].0[..], b"a");
        assert_eq!(
            d.ops[0].1.other_keys(),
            &[Bytes::from("b"), Bytes::from("c"), Bytes::from("dst")]
        );
    }
}

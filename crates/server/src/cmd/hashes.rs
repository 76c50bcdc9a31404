//! Hash commands: HSET HSETNX HMSET HGET HMGET HGETALL HDEL HLEN HEXISTS
//! HKEYS HVALS HSTRLEN HINCRBY HINCRBYFLOAT HRANDFIELD HSCAN. Argument
//! errors Redis reports before it looks the key up are reported here; the
//! rest (WRONGTYPE, a bad HSCAN option) by the op (`ops/hashes.rs`).

use bytes::Bytes;
use elsa_shard::ops::hashes::{HSetReply, HashOp};
use elsa_shard::ops::{longdouble, ERR_NOT_FLOAT};
use elsa_shard::Op;

use super::{int_arg, is, one, Args, CmdError, DataCmd};

/// The most elements one HRANDFIELD may answer: a count past it would
/// make one reply of unbounded size (Redis builds it; Elsa refuses).
pub const RAND_LIMIT: u64 = 16 * 1024 * 1024;

fn hash(args: &Args, op: HashOp) -> Result<DataCmd, CmdError> {
    one(args, Op::Hash(op))
}

fn pairs(args: &Args, name: &str) -> Result<Vec<(Bytes, Bytes)>, CmdError> {
    if !args.len().is_multiple_of(2) {
        return Err(CmdError(super::wrong_arity(name)));
    }
    Ok(args[2..]
        .chunks_exact(2)
        .map(|p| (p[0].clone(), p[1].clone()))
        .collect())
}

/// HSET key field value [field value …]
pub fn hset(args: &Args) -> Result<DataCmd, CmdError> {
    let pairs = pairs(args, "hset")?;
    hash(
        args,
        HashOp::Set {
            pairs,
            reply: HSetReply::Count,
        },
    )
}

/// HMSET key field value [field value …]
pub fn hmset(args: &Args) -> Result<DataCmd, CmdError> {
    let pairs = pairs(args, "hmset")?;
    hash(
        args,
        HashOp::Set {
            pairs,
            reply: HSetReply::Ok,
        },
    )
}

/// HSETNX key field value
pub fn hsetnx(args: &Args) -> Result<DataCmd, CmdError> {
    hash(args, HashOp::SetNx(args[2].clone(), args[3].clone()))
}

/// HGET key field
pub fn hget(args: &Args) -> Result<DataCmd, CmdError> {
    hash(args, HashOp::Get(args[2].clone()))
}

/// HMGET key field [field …]
pub fn hmget(args: &Args) -> Result<DataCmd, CmdError> {
    hash(args, HashOp::MGet(args[2..].to_vec()))
}

/// HGETALL key
pub fn hgetall(args: &Args) -> Result<DataCmd, CmdError> {
    hash(args, HashOp::GetAll)
}

/// HDEL key field [field …]
pub fn hdel(args: &Args) -> Result<DataCmd, CmdError> {
    hash(args, HashOp::Del(args[2..].to_vec()))
}

/// HLEN key
pub fn hlen(args: &Args) -> Result<DataCmd, CmdError> {
    hash(args, HashOp::Len)
}

/// HEXISTS key field
pub fn hexists(args: &Args) -> Result<DataCmd, CmdError> {
    hash(args, HashOp::Exists(args[2].clone()))
}

/// HKEYS key
pub fn hkeys(args: &Args) -> Result<DataCmd, CmdError> {
    hash(args, HashOp::Keys)
}

/// HVALS key
pub fn hvals(args: &Args) -> Result<DataCmd, CmdError> {
    hash(args, HashOp::Vals)
}

/// HSTRLEN key field
pub fn hstrlen(args: &Args) -> Result<DataCmd, CmdError> {
    hash(args, HashOp::StrLen(args[2].clone()))
}

/// HINCRBY key field increment
pub fn hincrby(args: &Args) -> Result<DataCmd, CmdError> {
    let by = int_arg(&args[3])?;
    hash(args, HashOp::IncrBy(args[2].clone(), by))
}

/// HINCRBYFLOAT key field increment: Redis refuses an increment that is
/// not a number, or is infinite, before it looks the key up.
pub fn hincrbyfloat(args: &Args) -> Result<DataCmd, CmdError> {
    match longdouble::parse(&args[3]) {
        None => Err(ERR_NOT_FLOAT.into()),
        Some(longdouble::Parsed::Infinite) => Err("ERR value is NaN or Infinity".into()),
        Some(longdouble::Parsed::Finite(_)) => {
            hash(args, HashOp::IncrByFloat(args[2].clone(), args[3].clone()))
        }
    }
}

/// HRANDFIELD key [count [WITHVALUES]]
pub fn hrandfield(args: &Args) -> Result<DataCmd, CmdError> {
    let seed = rand::random();
    if args.len() < 3 {
        return hash(
            args,
            HashOp::RandField {
                count: None,
                with_values: false,
                seed,
            },
        );
    }
    let count = int_arg(&args[2])?;
    if count == i64::MIN {
        return Err(CmdError(format!(
            "ERR value is out of range, value must between {} and {}",
            -i64::MAX,
            i64::MAX
        )));
    }
    if args.len() > 4 || (args.len() == 4 && !is(&args[3], "WITHVALUES")) {
        return Err(CmdError::syntax());
    }
    let with_values = args.len() == 4;
    if with_values && !(-i64::MAX / 2..=i64::MAX / 2).contains(&count) {
        return Err("ERR value is out of range".into());
    }
    if count.unsigned_abs() > RAND_LIMIT && count < 0 {
        return Err(CmdError(format!(
            "ERR count is larger than Elsa answers at once ({RAND_LIMIT} elements)"
        )));
    }
    hash(
        args,
        HashOp::RandField {
            count: Some(count),
            with_values,
            seed,
        },
    )
}

/// HSCAN key cursor [MATCH pattern] [COUNT count]
pub fn hscan(args: &Args) -> Result<DataCmd, CmdError> {
    hash(args, HashOp::Scan(super::scan_args(args)?))
}

#[cfg(test)]
mod tests {
    use super::super::test_args;
    use super::*;

    fn parse(f: fn(&Args) -> Result<DataCmd, CmdError>, line: &str) -> Result<Op, String> {
        f(&test_args(line))
            .map(|d| d.ops[0].1.clone())
            .map_err(|e| e.0)
    }

    #[test]
    fn argument_errors_are_redis_s() {
        assert_eq!(
            parse(hset, "HSET h f").unwrap_err(),
            "ERR wrong number of arguments for 'hset' command"
        );
        assert_eq!(
            parse(hincrby, "HINCRBY h f x").unwrap_err(),
            "ERR value is not an integer or out of range"
        );
        assert_eq!(
            parse(hincrbyfloat, "HINCRBYFLOAT h f x").unwrap_err(),
            "ERR value is not a valid float"
        );
        assert_eq!(
            parse(hincrbyfloat, "HINCRBYFLOAT h f inf").unwrap_err(),
            "ERR value is NaN or Infinity"
        );
        assert_eq!(
            parse(hrandfield, "HRANDFIELD h 1 withscores").unwrap_err(),
            "ERR syntax error"
        );
        assert_eq!(
            parse(hrandfield, "HRANDFIELD h 9223372036854775807 WITHVALUES").unwrap_err(),
            "ERR value is out of range"
        );
        assert_eq!(parse(hscan, "HSCAN h x").unwrap_err(), "ERR invalid cursor");
        assert!(matches!(
            parse(hscan, "HSCAN h 0 COUNT 0"),
            Ok(Op::Hash(HashOp::Scan(elsa_shard::ops::ScanArgs {
                refused: Some(_),
                ..
            })))
        ));
    }
}

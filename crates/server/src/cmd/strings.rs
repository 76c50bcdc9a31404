//! String commands: GET, SET and friends, MGET/MSET, INCR family, APPEND.

use elsa_shard::{unix_ms, Expiry, Op, SetCond, SetReply};

use super::{int_arg, is, Args, CmdError, DataCmd, Shape};

fn one(args: &Args, op: Op) -> Result<DataCmd, CmdError> {
    Ok(DataCmd {
        ops: vec![(args[1].clone(), op)],
        shape: Shape::One,
    })
}

fn plain_set(
    args: &Args,
    cond: SetCond,
    expiry: Expiry,
    reply: SetReply,
) -> Result<DataCmd, CmdError> {
    one(
        args,
        Op::Set {
            value: args[2].clone(),
            cond,
            expiry,
            reply,
        },
    )
}

/// GET key
pub fn get(args: &Args) -> Result<DataCmd, CmdError> {
    one(args, Op::Get)
}

/// PUT key value — the paper's write, same as a plain SET.
pub fn put(args: &Args) -> Result<DataCmd, CmdError> {
    plain_set(args, SetCond::Always, Expiry::Clear, SetReply::Ok)
}

fn invalid_expire(cmd: &str) -> CmdError {
    CmdError(format!("ERR invalid expire time in '{cmd}' command"))
}

/// Turns a relative or absolute TTL argument into absolute Unix ms.
fn expire_at(arg: &[u8], unit_ms: i64, absolute: bool, cmd: &str) -> Result<u64, CmdError> {
    let n = int_arg(arg)?;
    if n <= 0 {
        return Err(invalid_expire(cmd));
    }
    let ms = n.checked_mul(unit_ms).ok_or_else(|| invalid_expire(cmd))?;
    let at = if absolute {
        ms
    } else {
        ms.checked_add(unix_ms() as i64)
            .ok_or_else(|| invalid_expire(cmd))?
    };
    Ok(at as u64)
}

/// SET key value [NX|XX] [GET] [EX s|PX ms|EXAT s|PXAT ms|KEEPTTL]
pub fn set(args: &Args) -> Result<DataCmd, CmdError> {
    let mut cond = SetCond::Always;
    let mut expiry = Expiry::Clear;
    let mut reply = SetReply::Ok;
    let mut expiry_given = false;
    let mut i = 3;
    while i < args.len() {
        let a = &args[i];
        let next = args.get(i + 1);
        if is(a, "NX") && cond == SetCond::Always {
            cond = SetCond::IfAbsent;
        } else if is(a, "XX") && cond == SetCond::Always {
            cond = SetCond::IfPresent;
        } else if is(a, "GET") {
            reply = SetReply::Old;
        } else if is(a, "KEEPTTL") && !expiry_given {
            expiry = Expiry::Keep;
            expiry_given = true;
        } else if !expiry_given
            && next.is_some()
            && ["EX", "PX", "EXAT", "PXAT"].iter().any(|w| is(a, w))
        {
            let (unit, absolute) = if is(a, "EX") {
                (1000, false)
            } else if is(a, "PX") {
                (1, false)
            } else if is(a, "EXAT") {
                (1000, true)
            } else {
                (1, true)
            };
            expiry = Expiry::At(expire_at(
                next.map_or(&[][..], |b| &b[..]),
                unit,
                absolute,
                "set",
            )?);
            expiry_given = true;
            i += 1;
        } else {
            return Err(CmdError::syntax());
        }
        i += 1;
    }
    plain_set(args, cond, expiry, reply)
}

/// SETNX key value
pub fn setnx(args: &Args) -> Result<DataCmd, CmdError> {
    plain_set(args, SetCond::IfAbsent, Expiry::Clear, SetReply::Flag)
}

fn set_with_ttl(args: &Args, unit_ms: i64, cmd: &str) -> Result<DataCmd, CmdError> {
    let at = expire_at(&args[2], unit_ms, false, cmd)?;
    one(
        args,
        Op::Set {
            value: args[3].clone(),
            cond: SetCond::Always,
            expiry: Expiry::At(at),
            reply: SetReply::Ok,
        },
    )
}

/// SETEX key seconds value
pub fn setex(args: &Args) -> Result<DataCmd, CmdError> {
    set_with_ttl(args, 1000, "setex")
}

/// PSETEX key milliseconds value
pub fn psetex(args: &Args) -> Result<DataCmd, CmdError> {
    set_with_ttl(args, 1, "psetex")
}

/// GETSET key value
pub fn getset(args: &Args) -> Result<DataCmd, CmdError> {
    plain_set(args, SetCond::Always, Expiry::Clear, SetReply::Old)
}

/// GETDEL key
pub fn getdel(args: &Args) -> Result<DataCmd, CmdError> {
    one(args, Op::GetDel)
}

/// MGET key [key …]
pub fn mget(args: &Args) -> Result<DataCmd, CmdError> {
    Ok(DataCmd {
        ops: args[1..].iter().map(|k| (k.clone(), Op::Get)).collect(),
        shape: Shape::Array,
    })
}

/// MSET key value [key value …]
pub fn mset(args: &Args) -> Result<DataCmd, CmdError> {
    if args.len().is_multiple_of(2) {
        return Err(CmdError(super::wrong_arity("mset")));
    }
    let ops = args[1..]
        .chunks_exact(2)
        .map(|kv| {
            (
                kv[0].clone(),
                Op::Set {
                    value: kv[1].clone(),
                    cond: SetCond::Always,
                    expiry: Expiry::Clear,
                    reply: SetReply::Ok,
                },
            )
        })
        .collect();
    Ok(DataCmd {
        ops,
        shape: Shape::Ok,
    })
}

/// INCR key
pub fn incr(args: &Args) -> Result<DataCmd, CmdError> {
    one(args, Op::IncrBy(1))
}

/// DECR key
pub fn decr(args: &Args) -> Result<DataCmd, CmdError> {
    one(args, Op::IncrBy(-1))
}

/// INCRBY key delta
pub fn incrby(args: &Args) -> Result<DataCmd, CmdError> {
    one(args, Op::IncrBy(int_arg(&args[2])?))
}

/// DECRBY key delta
pub fn decrby(args: &Args) -> Result<DataCmd, CmdError> {
    let d = int_arg(&args[2])?;
    let neg = d
        .checked_neg()
        .ok_or_else(|| CmdError("ERR decrement would overflow".into()))?;
    one(args, Op::IncrBy(neg))
}

/// APPEND key value
pub fn append(args: &Args) -> Result<DataCmd, CmdError> {
    one(args, Op::Append(args[2].clone()))
}

/// STRLEN key
pub fn strlen(args: &Args) -> Result<DataCmd, CmdError> {
    one(args, Op::Strlen)
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;

    fn args(s: &str) -> Vec<Bytes> {
        s.split(' ')
            .map(|a| Bytes::copy_from_slice(a.as_bytes()))
            .collect()
    }

    #[test]
    fn set_options() {
        assert!(set(&args("SET k v NX XX")).is_err());
        assert!(set(&args("SET k v EX 10 PX 5")).is_err());
        assert!(set(&args("SET k v EX 0")).is_err());
        assert!(set(&args("SET k v EX")).is_err());
        assert!(set(&args("SET k v EX abc")).is_err());
        let c = set(&args("SET k v nx get px 100")).unwrap();
        match &c.ops[0].1 {
            Op::Set {
                cond,
                reply,
                expiry: Expiry::At(_),
                ..
            } => {
                assert_eq!(*cond, SetCond::IfAbsent);
                assert_eq!(*reply, SetReply::Old);
            }
            other => panic!("unexpected {other:?}"),
        }
    }
}

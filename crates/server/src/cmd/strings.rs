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

/// SET's expiry options.
#[derive(Clone, Copy, PartialEq, Eq)]
enum ExpiryOpt {
    Ex,
    Px,
    ExAt,
    PxAt,
}

/// SET key value [NX|XX] [GET] [EX s|PX ms|EXAT s|PXAT ms|KEEPTTL]
///
/// Parsed as Redis's `parseExtendedStringArgumentsOrReply` does: options
/// may repeat (the last expiry value wins) but not conflict (NX with XX,
/// two kinds of expiry, an expiry with KEEPTTL); all of them are parsed
/// before the expiry value is read, so a syntax error wins over a bad
/// number.
pub fn set(args: &Args) -> Result<DataCmd, CmdError> {
    let mut cond = SetCond::Always;
    let mut reply = SetReply::Ok;
    let mut keep_ttl = false;
    let mut expiry: Option<(ExpiryOpt, &[u8])> = None;
    let mut i = 3;
    while i < args.len() {
        // Redis compares option names as C strings: a NUL ends them.
        let a = super::c_str(&args[i]);
        let next = args.get(i + 1);
        // An expiry option is refused next to KEEPTTL or another kind of
        // expiry, not next to itself.
        let expiry_ok =
            |kind: ExpiryOpt| !keep_ttl && expiry.is_none_or(|(k, _)| k == kind) && next.is_some();
        let kind = if is(a, "EX") {
            Some(ExpiryOpt::Ex)
        } else if is(a, "PX") {
            Some(ExpiryOpt::Px)
        } else if is(a, "EXAT") {
            Some(ExpiryOpt::ExAt)
        } else if is(a, "PXAT") {
            Some(ExpiryOpt::PxAt)
        } else {
            None
        };
        if is(a, "NX") && cond != SetCond::IfPresent {
            cond = SetCond::IfAbsent;
        } else if is(a, "XX") && cond != SetCond::IfAbsent {
            cond = SetCond::IfPresent;
        } else if is(a, "GET") {
            reply = SetReply::Old;
        } else if is(a, "KEEPTTL") && expiry.is_none() {
            keep_ttl = true;
        } else if let (Some(kind), Some(value)) = (kind.filter(|k| expiry_ok(*k)), next) {
            expiry = Some((kind, &value[..]));
            i += 1;
        } else {
            return Err(CmdError::syntax());
        }
        i += 1;
    }
    let expiry = match expiry {
        Some((kind, value)) => {
            let (unit, absolute) = match kind {
                ExpiryOpt::Ex => (1000, false),
                ExpiryOpt::Px => (1, false),
                ExpiryOpt::ExAt => (1000, true),
                ExpiryOpt::PxAt => (1, true),
            };
            Expiry::At(expire_at(value, unit, absolute, "set")?)
        }
        None if keep_ttl => Expiry::Keep,
        None => Expiry::Clear,
    };
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

    fn set_err(line: &str) -> String {
        match set(&args(line)) {
            Err(e) => e.0,
            Ok(c) => panic!("{line}: accepted as {:?}", c.ops),
        }
    }

    fn set_op(line: &str) -> Op {
        match set(&args(line)) {
            Ok(mut c) => c.ops.remove(0).1,
            Err(e) => panic!("{line}: {}", e.0),
        }
    }

    #[test]
    fn set_options_repeat_and_conflict_like_redis() {
        for line in [
            "SET k v NX NX",
            "SET k v GET GET",
            "SET k v KEEPTTL KEEPTTL",
        ] {
            assert!(set(&args(line)).is_ok(), "{line}");
        }
        assert!(matches!(
            set_op("SET k v xx XX"),
            Op::Set {
                cond: SetCond::IfPresent,
                ..
            }
        ));
        assert!(matches!(
            set_op("SET k v EXAT 100 EXAT 200"),
            Op::Set {
                expiry: Expiry::At(200_000),
                ..
            }
        ));
        assert!(matches!(
            set_op("SET k v PXAT abc PXAT 5"),
            Op::Set {
                expiry: Expiry::At(5),
                ..
            }
        ));
        for line in [
            "SET k v NX XX",
            "SET k v EX 100 PX 100",
            "SET k v EX 100 KEEPTTL",
            "SET k v KEEPTTL EX 100",
            "SET k v EX 0100 NX XX",
            "SET k v NX EX 9223372036854775 XX",
            "SET k v EX 100 EX",
        ] {
            assert_eq!(set_err(line), "ERR syntax error", "{line}");
        }
        assert_eq!(
            set_err("SET k v NX NX PXAT abc"),
            elsa_shard::ops::ERR_NOT_INTEGER
        );
        assert!(matches!(
            set(&[
                Bytes::from("SET"),
                Bytes::from("k"),
                Bytes::from("v"),
                Bytes::from(&b"NX\0junk"[..])
            ])
            .map(|mut c| c.ops.remove(0).1),
            Ok(Op::Set {
                cond: SetCond::IfAbsent,
                ..
            })
        ));
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

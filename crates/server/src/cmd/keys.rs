//! Generic key commands: DEL/UNLINK, EXISTS, TYPE, TTL family, EXPIRE family.

use elsa_shard::{unix_ms, Op};

use super::{int_arg, Args, CmdError, DataCmd, Shape};

fn one(args: &Args, op: Op) -> Result<DataCmd, CmdError> {
    Ok(DataCmd {
        ops: vec![(args[1].clone(), op)],
        shape: Shape::One,
    })
}

fn each(args: &Args, op: Op) -> Result<DataCmd, CmdError> {
    Ok(DataCmd {
        ops: args[1..].iter().map(|k| (k.clone(), op.clone())).collect(),
        shape: if args.len() == 2 {
            Shape::One
        } else {
            Shape::Sum
        },
    })
}

/// DEL / UNLINK / DELETE key [key …]
pub fn del(args: &Args) -> Result<DataCmd, CmdError> {
    each(args, Op::Del)
}

/// EXISTS key [key …] (a key named twice counts twice, as in Redis)
pub fn exists(args: &Args) -> Result<DataCmd, CmdError> {
    each(args, Op::Exists)
}

/// TYPE key
pub fn type_(args: &Args) -> Result<DataCmd, CmdError> {
    one(args, Op::Type)
}

/// TTL key
pub fn ttl(args: &Args) -> Result<DataCmd, CmdError> {
    one(args, Op::Ttl { millis: false })
}

/// PTTL key
pub fn pttl(args: &Args) -> Result<DataCmd, CmdError> {
    one(args, Op::Ttl { millis: true })
}

fn expire_cmd(args: &Args, unit_ms: i64, absolute: bool) -> Result<DataCmd, CmdError> {
    if args.len() > 3 {
        // NX/XX/GT/LT are not supported yet; refuse rather than ignore them.
        return Err(CmdError(
            "ERR EXPIRE options NX|XX|GT|LT are not supported".into(),
        ));
    }
    let n = int_arg(&args[2])?;
    let overflow = || CmdError("ERR invalid expire time in 'expire' command".into());
    let ms = n.checked_mul(unit_ms).ok_or_else(overflow)?;
    let at = if absolute {
        ms
    } else {
        ms.checked_add(unix_ms() as i64).ok_or_else(overflow)?
    };
    one(args, Op::ExpireAt(at.max(0) as u64))
}

/// EXPIRE key seconds
pub fn expire(args: &Args) -> Result<DataCmd, CmdError> {
    expire_cmd(args, 1000, false)
}

/// PEXPIRE key milliseconds
pub fn pexpire(args: &Args) -> Result<DataCmd, CmdError> {
    expire_cmd(args, 1, false)
}

/// EXPIREAT key unix-seconds
pub fn expireat(args: &Args) -> Result<DataCmd, CmdError> {
    expire_cmd(args, 1000, true)
}

/// PEXPIREAT key unix-milliseconds
pub fn pexpireat(args: &Args) -> Result<DataCmd, CmdError> {
    expire_cmd(args, 1, true)
}

/// PERSIST key
pub fn persist(args: &Args) -> Result<DataCmd, CmdError> {
    one(args, Op::Persist)
}

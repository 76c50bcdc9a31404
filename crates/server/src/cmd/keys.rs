//! Generic key commands: DEL/UNLINK, EXISTS, TYPE, TTL family, EXPIRE family.

use elsa_shard::ops::ExpireCond;
use elsa_shard::{unix_ms, Op};

use super::{c_str, int_arg, is, Args, CmdError, DataCmd, Shape};

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

/// Parses EXPIRE's NX / XX / GT / LT options the way Redis 7 does: every
/// option is checked before the time, an unknown one is named, and only
/// then are incompatible ones refused.
fn expire_options(opts: &Args) -> Result<ExpireCond, CmdError> {
    let mut cond = ExpireCond::default();
    for opt in opts {
        // Redis compares options as C strings: a NUL ends them.
        let opt = c_str(opt);
        if is(opt, "NX") {
            cond.nx = true;
        } else if is(opt, "XX") {
            cond.xx = true;
        } else if is(opt, "GT") {
            cond.gt = true;
        } else if is(opt, "LT") {
            cond.lt = true;
        } else {
            return Err(CmdError(format!(
                "ERR Unsupported option {}",
                String::from_utf8_lossy(opt)
            )));
        }
    }
    if cond.nx && (cond.xx || cond.gt || cond.lt) {
        return Err(CmdError(
            "ERR NX and XX, GT or LT options at the same time are not compatible".into(),
        ));
    }
    if cond.gt && cond.lt {
        return Err(CmdError(
            "ERR GT and LT options at the same time are not compatible".into(),
        ));
    }
    Ok(cond)
}

fn expire_cmd(args: &Args, unit_ms: i64, absolute: bool, cmd: &str) -> Result<DataCmd, CmdError> {
    let cond = expire_options(&args[3..])?;
    let n = int_arg(&args[2])?;
    let overflow = || CmdError(format!("ERR invalid expire time in '{cmd}' command"));
    let ms = n.checked_mul(unit_ms).ok_or_else(overflow)?;
    let at = if absolute {
        ms
    } else {
        ms.checked_add(unix_ms() as i64).ok_or_else(overflow)?
    };
    // A negative time is simply in the past (the key is deleted); 0 is
    // just as past and compares the same way under GT / LT.
    let at = at.max(0) as u64;
    let op = if cond == ExpireCond::default() {
        Op::ExpireAt(at)
    } else {
        Op::ExpireAtIf { at, cond }
    };
    one(args, op)
}

/// EXPIRE key seconds [NX|XX|GT|LT]
pub fn expire(args: &Args) -> Result<DataCmd, CmdError> {
    expire_cmd(args, 1000, false, "expire")
}

/// PEXPIRE key milliseconds [NX|XX|GT|LT]
pub fn pexpire(args: &Args) -> Result<DataCmd, CmdError> {
    expire_cmd(args, 1, false, "pexpire")
}

/// EXPIREAT key unix-seconds [NX|XX|GT|LT]
pub fn expireat(args: &Args) -> Result<DataCmd, CmdError> {
    expire_cmd(args, 1000, true, "expireat")
}

/// PEXPIREAT key unix-milliseconds [NX|XX|GT|LT]
pub fn pexpireat(args: &Args) -> Result<DataCmd, CmdError> {
    expire_cmd(args, 1, true, "pexpireat")
}

/// PERSIST key
pub fn persist(args: &Args) -> Result<DataCmd, CmdError> {
    one(args, Op::Persist)
}

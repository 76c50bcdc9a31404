//! Generic key commands: DEL/UNLINK, EXISTS/TOUCH, TYPE, the TTL and
//! EXPIRETIME families, the EXPIRE family, PERSIST, RENAME, COPY, MOVE.

use elsa_shard::db;
use elsa_shard::ops::ExpireCond;
use elsa_shard::{unix_ms, Op};

use super::{c_str, int_arg, is, one, Args, CmdError, DataCmd, Shape};

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

/// TOUCH key [key …]: counts as EXISTS does, and resets each key's
/// access clock (`OBJECT IDLETIME`, eviction).
pub fn touch(args: &Args) -> Result<DataCmd, CmdError> {
    each(args, Op::Touch)
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

/// EXPIRETIME key
pub fn expiretime(args: &Args) -> Result<DataCmd, CmdError> {
    one(args, Op::ExpireTime { millis: false })
}

/// PEXPIRETIME key
pub fn pexpiretime(args: &Args) -> Result<DataCmd, CmdError> {
    one(args, Op::ExpireTime { millis: true })
}

/// RENAME key newkey
pub fn rename(args: &Args) -> Result<DataCmd, CmdError> {
    one(
        args,
        Op::Rename {
            to: args[2].clone(),
            nx: false,
        },
    )
}

/// RENAMENX key newkey
pub fn renamenx(args: &Args) -> Result<DataCmd, CmdError> {
    one(
        args,
        Op::Rename {
            to: args[2].clone(),
            nx: true,
        },
    )
}

/// MOVE key db: RENAMENX into the same name in database `db` (the key
/// arrives stored in the connection's database, see `Conn::data_cmd`), a
/// missing key answering 0 as Redis does (`Shape::Move`).
pub fn move_(args: &Args) -> Result<DataCmd, CmdError> {
    let (from, key) = db::decode(&args[1]);
    let to = super::db_index(&args[2])?;
    if to == from {
        return Err("ERR source and destination objects are the same".into());
    }
    Ok(DataCmd {
        ops: vec![(
            args[1].clone(),
            Op::Rename {
                to: db::encode(to, key),
                nx: true,
            },
        )],
        shape: Shape::Move,
    })
}

/// COPY source destination [DB index] [REPLACE]
///
/// Options are read in order, as Redis reads them. Both keys arrive stored
/// in the connection's database (`Conn::data_cmd`); `DB n` moves the
/// destination to database `n`.
pub fn copy(args: &Args) -> Result<DataCmd, CmdError> {
    let mut replace = false;
    let mut to = args[2].clone();
    let mut i = 3;
    while i < args.len() {
        let opt = c_str(&args[i]);
        if is(opt, "REPLACE") {
            replace = true;
        } else if is(opt, "DB") && i + 1 < args.len() {
            let db = super::db_index(&args[i + 1])?;
            to = db::encode(db, db::user_key(&args[2]));
            i += 1;
        } else {
            return Err(CmdError::syntax());
        }
        i += 1;
    }
    if args[1] == to {
        return Err("ERR source and destination objects are the same".into());
    }
    one(args, Op::Copy { to, replace })
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

#[cfg(test)]
mod tests {
    use super::*;

    use crate::cmd::test_args as args;

    fn copy_err(line: &str) -> String {
        match copy(&args(line)) {
            Err(e) => e.0,
            Ok(c) => panic!("{line}: accepted as {:?}", c.ops),
        }
    }

    #[test]
    fn copy_reads_its_options_in_order() {
        assert!(copy(&args("COPY a b")).is_ok());
        assert!(copy(&args("COPY a b REPLACE DB 0 replace")).is_ok());
        assert_eq!(copy_err("COPY a b DB"), "ERR syntax error");
        assert_eq!(copy_err("COPY a b FOO DB x"), "ERR syntax error");
        assert_eq!(
            copy_err("COPY a b DB x FOO"),
            "ERR value is not an integer or out of range"
        );
        assert_eq!(
            copy_err("COPY a b DB 2147483648"),
            "ERR value is out of range, value must between -2147483648 and 2147483647"
        );
        assert_eq!(copy_err("COPY a b DB -1"), "ERR DB index is out of range");
        assert_eq!(copy_err("COPY a b DB 16"), "ERR DB index is out of range");
        // Another database: the destination is stored there, and the same
        // name is not the same object.
        let into_1 = copy(&args("COPY a b DB 1")).unwrap();
        assert!(
            matches!(&into_1.ops[0].1, Op::Copy { to, .. } if to[..] == db::encode(1, b"b")[..])
        );
        assert!(copy(&args("COPY a a DB 1")).is_ok());
        assert_eq!(
            copy_err("COPY a a DB 0"),
            "ERR source and destination objects are the same"
        );
        assert_eq!(
            copy_err("COPY a a"),
            "ERR source and destination objects are the same"
        );
        assert_eq!(
            copy_err("COPY a a FOO"),
            "ERR syntax error",
            "options first"
        );
    }
}

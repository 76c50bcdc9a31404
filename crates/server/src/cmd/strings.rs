//! String commands: GET, SET and friends, GETEX, MGET/MSET, the INCR
//! family, INCRBYFLOAT, APPEND, GETRANGE/SUBSTR, SETRANGE, LCS.

use elsa_shard::ops::lcs::{Lcs, ERR_LEN_AND_IDX};
use elsa_shard::ops::{parse_i64, ERR_GETEX_EXPIRE, ERR_NOT_INTEGER, ERR_SYNTAX};
use elsa_shard::{unix_ms, Expiry, GetExTtl, Op, SetCond, SetReply};

use super::{c_str, int_arg, is, one, Args, CmdError, DataCmd, Shape};

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

/// Why an expiry argument is refused.
enum BadExpiry {
    /// Not a whole number.
    NotInteger,
    /// Zero, negative, or past the range once in milliseconds.
    Invalid,
}

/// Turns a relative or absolute TTL argument into absolute Unix ms, as
/// Redis's `getExpireMillisecondsOrReply` does.
fn expire_ms(arg: &[u8], unit_ms: i64, absolute: bool) -> Result<u64, BadExpiry> {
    let n = elsa_shard::ops::parse_i64(arg).ok_or(BadExpiry::NotInteger)?;
    if n <= 0 {
        return Err(BadExpiry::Invalid);
    }
    let ms = n.checked_mul(unit_ms).ok_or(BadExpiry::Invalid)?;
    let at = if absolute {
        ms
    } else {
        ms.checked_add(unix_ms() as i64).ok_or(BadExpiry::Invalid)?
    };
    Ok(at as u64)
}

/// [`expire_ms`] with Redis's error for command `cmd`.
fn expire_at(arg: &[u8], unit_ms: i64, absolute: bool, cmd: &str) -> Result<u64, CmdError> {
    expire_ms(arg, unit_ms, absolute).map_err(|e| match e {
        BadExpiry::NotInteger => CmdError::not_integer(),
        BadExpiry::Invalid => invalid_expire(cmd),
    })
}

/// SET's and GETEX's expiry options.
#[derive(Clone, Copy, PartialEq, Eq)]
enum ExpiryOpt {
    Ex,
    Px,
    ExAt,
    PxAt,
}

impl ExpiryOpt {
    /// Milliseconds per unit, and whether the time is absolute.
    fn unit(self) -> (i64, bool) {
        match self {
            ExpiryOpt::Ex => (1000, false),
            ExpiryOpt::Px => (1, false),
            ExpiryOpt::ExAt => (1000, true),
            ExpiryOpt::PxAt => (1, true),
        }
    }
}

/// The expiry option `a` names, if any.
fn expiry_kind(a: &[u8]) -> Option<ExpiryOpt> {
    if is(a, "EX") {
        Some(ExpiryOpt::Ex)
    } else if is(a, "PX") {
        Some(ExpiryOpt::Px)
    } else if is(a, "EXAT") {
        Some(ExpiryOpt::ExAt)
    } else if is(a, "PXAT") {
        Some(ExpiryOpt::PxAt)
    } else {
        None
    }
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
        let kind = expiry_kind(a);
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
            let (unit, absolute) = kind.unit();
            Expiry::At(expire_at(value, unit, absolute, "set")?)
        }
        None if keep_ttl => Expiry::Keep,
        None => Expiry::Clear,
    };
    plain_set(args, cond, expiry, reply)
}

/// GETEX key [EX s | PX ms | EXAT s | PXAT ms | PERSIST]
///
/// The options are checked first (Redis's parser, in its GET mode: NX,
/// XX, GET and KEEPTTL are syntax errors there); the time only once the
/// key is found, so `GETEX missing EX abc` answers nil.
pub fn getex(args: &Args) -> Result<DataCmd, CmdError> {
    let mut persist = false;
    let mut expiry: Option<(ExpiryOpt, &[u8])> = None;
    let mut i = 2;
    while i < args.len() {
        let a = super::c_str(&args[i]);
        let next = args.get(i + 1);
        let kind = expiry_kind(a);
        if is(a, "PERSIST") && expiry.is_none() {
            persist = true;
        } else if let (Some(kind), Some(value)) = (kind, next) {
            if persist || expiry.is_some_and(|(k, _)| k != kind) {
                return Err(CmdError::syntax());
            }
            expiry = Some((kind, &value[..]));
            i += 1;
        } else {
            return Err(CmdError::syntax());
        }
        i += 1;
    }
    let ttl = match expiry {
        None if persist => GetExTtl::Persist,
        None => GetExTtl::Keep,
        Some((kind, value)) => {
            let (unit, absolute) = kind.unit();
            match expire_ms(value, unit, absolute) {
                Ok(at) => GetExTtl::At(at),
                Err(BadExpiry::NotInteger) => GetExTtl::Refused(ERR_NOT_INTEGER),
                Err(BadExpiry::Invalid) => GetExTtl::Refused(ERR_GETEX_EXPIRE),
            }
        }
    };
    one(args, Op::GetEx(ttl))
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

/// INCRBYFLOAT key increment
pub fn incrbyfloat(args: &Args) -> Result<DataCmd, CmdError> {
    // The increment is checked by the op, after the key's type (as Redis
    // does: WRONGTYPE comes before a bad increment).
    one(args, Op::IncrByFloat(args[2].clone()))
}

/// GETRANGE / SUBSTR key start end
pub fn getrange(args: &Args) -> Result<DataCmd, CmdError> {
    let start = int_arg(&args[2])?;
    let end = int_arg(&args[3])?;
    one(args, Op::GetRange { start, end })
}

/// SETRANGE key offset value (the size limit is checked when the op runs:
/// Redis lets an empty value through at any offset).
pub fn setrange(args: &Args) -> Result<DataCmd, CmdError> {
    let offset = int_arg(&args[2])?;
    if offset < 0 {
        return Err("ERR offset is out of range".into());
    }
    one(
        args,
        Op::SetRange {
            offset: offset as u64,
            value: args[3].clone(),
        },
    )
}

/// LCS key1 key2 [LEN] [IDX] [MINMATCHLEN len] [WITHMATCHLEN]: runs on
/// key1 and reads key2 with it. Redis reads the options only once both
/// keys hold strings, so a refused option rides in the op.
pub fn lcs(args: &Args) -> Result<DataCmd, CmdError> {
    let mut op = Lcs {
        other: [args[2].clone()],
        len: false,
        idx: false,
        with_match_len: false,
        min_match_len: 0,
        refused: None,
    };
    let mut j = 3;
    while j < args.len() {
        let opt = c_str(&args[j]);
        if is(opt, "IDX") {
            op.idx = true;
        } else if is(opt, "LEN") {
            op.len = true;
        } else if is(opt, "WITHMATCHLEN") {
            op.with_match_len = true;
        } else if is(opt, "MINMATCHLEN") && j + 1 < args.len() {
            match parse_i64(&args[j + 1]) {
                Some(n) => op.min_match_len = n.max(0) as u64,
                None => {
                    op.refused = Some(ERR_NOT_INTEGER);
                    break;
                }
            }
            j += 1;
        } else {
            op.refused = Some(ERR_SYNTAX);
            break;
        }
        j += 1;
    }
    if op.refused.is_none() && op.len && op.idx {
        op.refused = Some(ERR_LEN_AND_IDX);
    }
    one(args, Op::Lcs(op))
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;

    use crate::cmd::test_args as args;

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

    fn getex_op(line: &str) -> Result<GetExTtl, String> {
        match getex(&args(line)) {
            Ok(mut c) => match c.ops.remove(0).1 {
                Op::GetEx(t) => Ok(t),
                other => panic!("{line}: {other:?}"),
            },
            Err(e) => Err(e.0),
        }
    }

    #[test]
    fn getex_options_follow_redis() {
        assert_eq!(getex_op("GETEX k"), Ok(GetExTtl::Keep));
        assert_eq!(getex_op("GETEX k PERSIST PERSIST"), Ok(GetExTtl::Persist));
        assert!(matches!(
            getex_op("GETEX k EX 10 EX 20"),
            Ok(GetExTtl::At(_))
        ));
        assert_eq!(getex_op("GETEX k PXAT 5"), Ok(GetExTtl::At(5)));
        for line in [
            "GETEX k EX 10 PX 10",
            "GETEX k PERSIST EX 10",
            "GETEX k EX 10 PERSIST",
            "GETEX k KEEPTTL",
            "GETEX k NX",
            "GETEX k GET",
            "GETEX k EX",
            "GETEX k FOO",
        ] {
            assert_eq!(getex_op(line), Err("ERR syntax error".into()), "{line}");
        }
        // Bad times wait for the key to exist (Redis looks it up first).
        assert_eq!(
            getex_op("GETEX k EX abc"),
            Ok(GetExTtl::Refused(ERR_NOT_INTEGER))
        );
        for line in [
            "GETEX k EX 0",
            "GETEX k PX -1",
            "GETEX k EX 9223372036854775",
        ] {
            assert_eq!(
                getex_op(line),
                Ok(GetExTtl::Refused(ERR_GETEX_EXPIRE)),
                "{line}"
            );
        }
    }

    #[test]
    fn range_commands_check_their_numbers_first() {
        assert!(setrange(&args("SETRANGE k -1 x")).is_err());
        assert!(setrange(&args("SETRANGE k abc x")).is_err());
        assert!(
            setrange(&args("SETRANGE k 536870912 x")).is_ok(),
            "the op refuses it"
        );
        assert!(getrange(&args("GETRANGE k 0 x")).is_err());
        // After the key's type, as Redis: WRONGTYPE before a bad increment.
        assert!(
            incrbyfloat(&args("INCRBYFLOAT k 1e")).is_ok(),
            "the op refuses it"
        );
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

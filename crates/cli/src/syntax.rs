//! The local syntax check: commands whose shape the client knows are checked
//! before anything is sent, so a typo never reaches the server half-formed.
//!
//! Owns the table of known commands — the paper's transaction language
//! (`BEGIN [RC|RR|SI]`, `PUT`, `GET`, `DELETE`, `COMMIT`, `ABORT`/`ROLLBACK`)
//! and common Redis commands — with Redis's arity convention: a positive
//! arity is the exact argument count including the command name, a negative
//! one the minimum. Unknown names pass unchecked: the server answers its own
//! error, and the client stays usable against any Redis-speaking server.
//!
//! Why this matters more for Elsa than for Redis: inside `BEGIN … COMMIT` a
//! malformed command answered with a server error is easy to miss in a
//! pasted script, and the commit would go ahead without it.

use crate::lex::Args;

/// A check beyond the count; `Err` says what is wrong.
pub type Extra = fn(&Args) -> Result<(), String>;

/// What the client knows about one command.
#[derive(Debug)]
pub struct Spec {
    /// Upper-case name.
    pub name: &'static str,
    /// Redis convention: `n > 0` exactly `n` words, `n < 0` at least `-n`.
    pub arity: i32,
    /// Synopsis shown in refusals and by `help NAME`.
    pub usage: &'static str,
    /// What a wrong count is told, when the generic wording would be vague.
    pub needs: Option<&'static str>,
    /// A further check on the arguments (pairs, isolation levels…).
    pub extra: Option<Extra>,
}

const fn spec(name: &'static str, arity: i32, usage: &'static str) -> Spec {
    Spec {
        name,
        arity,
        usage,
        needs: None,
        extra: None,
    }
}

const fn txn(
    name: &'static str,
    arity: i32,
    usage: &'static str,
    needs: &'static str,
    extra: Option<Extra>,
) -> Spec {
    Spec {
        name,
        arity,
        usage,
        needs: Some(needs),
        extra,
    }
}

const fn pairs(name: &'static str, arity: i32, usage: &'static str, skip: usize) -> Spec {
    Spec {
        name,
        arity,
        usage,
        needs: None,
        extra: Some(match skip {
            1 => pairs_after_1,
            _ => pairs_after_2,
        }),
    }
}

/// The paper's transaction language. `GET` is Redis's too (same arity), and
/// is listed only here so refusals use the friendlier wording.
pub const TXN_LANGUAGE: &[Spec] = &[
    txn(
        "BEGIN",
        -1,
        "BEGIN [RC|RR|SI]",
        "at most one isolation level (RC, RR or SI)",
        Some(begin_args),
    ),
    txn("PUT", 3, "PUT key value", "a key and a value", None),
    txn("GET", 2, "GET key", "exactly one key", None),
    txn("DELETE", 2, "DELETE key", "exactly one key", None),
    txn("COMMIT", 1, "COMMIT", "no arguments", None),
    txn("ABORT", 1, "ABORT", "no arguments", None),
    txn("ROLLBACK", 1, "ROLLBACK", "no arguments", None),
];

/// Common Redis commands, arities as in Redis's own command table.
pub const REDIS: &[Spec] = &[
    // strings
    spec(
        "SET",
        -3,
        "SET key value [NX|XX] [GET] [EX s|PX ms|EXAT ts|PXAT ts|KEEPTTL]",
    ),
    spec("SETNX", 3, "SETNX key value"),
    spec("SETEX", 4, "SETEX key seconds value"),
    spec("PSETEX", 4, "PSETEX key milliseconds value"),
    spec("GETSET", 3, "GETSET key value"),
    spec("GETDEL", 2, "GETDEL key"),
    spec(
        "GETEX",
        -2,
        "GETEX key [EX s|PX ms|EXAT ts|PXAT ts|PERSIST]",
    ),
    spec("MGET", -2, "MGET key [key ...]"),
    pairs("MSET", -3, "MSET key value [key value ...]", 1),
    pairs("MSETNX", -3, "MSETNX key value [key value ...]", 1),
    spec("APPEND", 3, "APPEND key value"),
    spec("STRLEN", 2, "STRLEN key"),
    spec("INCR", 2, "INCR key"),
    spec("DECR", 2, "DECR key"),
    spec("INCRBY", 3, "INCRBY key increment"),
    spec("DECRBY", 3, "DECRBY key decrement"),
    spec("INCRBYFLOAT", 3, "INCRBYFLOAT key increment"),
    spec("GETRANGE", 4, "GETRANGE key start end"),
    spec("SETRANGE", 4, "SETRANGE key offset value"),
    spec("SUBSTR", 4, "SUBSTR key start end"),
    // bits
    spec("SETBIT", 4, "SETBIT key offset 0|1"),
    spec("GETBIT", 3, "GETBIT key offset"),
    spec("BITCOUNT", -2, "BITCOUNT key [start end [BYTE|BIT]]"),
    spec("BITPOS", -3, "BITPOS key 0|1 [start [end [BYTE|BIT]]]"),
    // keys
    spec("DEL", -2, "DEL key [key ...]"),
    spec("UNLINK", -2, "UNLINK key [key ...]"),
    spec("EXISTS", -2, "EXISTS key [key ...]"),
    spec("TOUCH", -2, "TOUCH key [key ...]"),
    spec("EXPIRE", -3, "EXPIRE key seconds [NX|XX|GT|LT]"),
    spec("PEXPIRE", -3, "PEXPIRE key milliseconds [NX|XX|GT|LT]"),
    spec("EXPIREAT", -3, "EXPIREAT key unix-seconds [NX|XX|GT|LT]"),
    spec("PEXPIREAT", -3, "PEXPIREAT key unix-ms [NX|XX|GT|LT]"),
    spec("TTL", 2, "TTL key"),
    spec("PTTL", 2, "PTTL key"),
    spec("PERSIST", 2, "PERSIST key"),
    spec("TYPE", 2, "TYPE key"),
    spec("RENAME", 3, "RENAME key newkey"),
    spec("RENAMENX", 3, "RENAMENX key newkey"),
    spec("COPY", -3, "COPY source destination [DB 0] [REPLACE]"),
    spec("EXPIRETIME", 2, "EXPIRETIME key"),
    spec("PEXPIRETIME", 2, "PEXPIRETIME key"),
    spec("OBJECT", -2, "OBJECT ENCODING|REFCOUNT|IDLETIME|FREQ key"),
    spec("MEMORY", -2, "MEMORY USAGE key [SAMPLES n]"),
    spec("KEYS", 2, "KEYS pattern"),
    spec(
        "SCAN",
        -2,
        "SCAN cursor [MATCH pattern] [COUNT n] [TYPE type]",
    ),
    spec("RANDOMKEY", 1, "RANDOMKEY"),
    // hashes
    pairs("HSET", -4, "HSET key field value [field value ...]", 2),
    pairs("HMSET", -4, "HMSET key field value [field value ...]", 2),
    spec("HSETNX", 4, "HSETNX key field value"),
    spec("HGET", 3, "HGET key field"),
    spec("HMGET", -3, "HMGET key field [field ...]"),
    spec("HDEL", -3, "HDEL key field [field ...]"),
    spec("HGETALL", 2, "HGETALL key"),
    spec("HEXISTS", 3, "HEXISTS key field"),
    spec("HLEN", 2, "HLEN key"),
    spec("HKEYS", 2, "HKEYS key"),
    spec("HVALS", 2, "HVALS key"),
    spec("HINCRBY", 4, "HINCRBY key field increment"),
    // lists
    spec("LPUSH", -3, "LPUSH key element [element ...]"),
    spec("RPUSH", -3, "RPUSH key element [element ...]"),
    spec("LPOP", -2, "LPOP key [count]"),
    spec("RPOP", -2, "RPOP key [count]"),
    spec("LLEN", 2, "LLEN key"),
    spec("LRANGE", 4, "LRANGE key start stop"),
    spec("LINDEX", 3, "LINDEX key index"),
    spec("LSET", 4, "LSET key index element"),
    spec("LREM", 4, "LREM key count element"),
    spec("LTRIM", 4, "LTRIM key start stop"),
    // sets
    spec("SADD", -3, "SADD key member [member ...]"),
    spec("SREM", -3, "SREM key member [member ...]"),
    spec("SMEMBERS", 2, "SMEMBERS key"),
    spec("SISMEMBER", 3, "SISMEMBER key member"),
    spec("SCARD", 2, "SCARD key"),
    spec("SPOP", -2, "SPOP key [count]"),
    spec("SINTER", -2, "SINTER key [key ...]"),
    spec("SUNION", -2, "SUNION key [key ...]"),
    spec("SDIFF", -2, "SDIFF key [key ...]"),
    // sorted sets
    spec(
        "ZADD",
        -4,
        "ZADD key [NX|XX] [GT|LT] [CH] [INCR] score member [score member ...]",
    ),
    spec("ZREM", -3, "ZREM key member [member ...]"),
    spec("ZSCORE", 3, "ZSCORE key member"),
    spec("ZCARD", 2, "ZCARD key"),
    spec(
        "ZRANGE",
        -4,
        "ZRANGE key start stop [BYSCORE|BYLEX] [REV] [LIMIT offset count] [WITHSCORES]",
    ),
    spec("ZRANK", -3, "ZRANK key member [WITHSCORE]"),
    spec("ZINCRBY", 4, "ZINCRBY key increment member"),
    spec("ZCOUNT", 4, "ZCOUNT key min max"),
    // Redis transactions
    spec("MULTI", 1, "MULTI"),
    spec("EXEC", 1, "EXEC"),
    spec("DISCARD", 1, "DISCARD"),
    spec("WATCH", -2, "WATCH key [key ...]"),
    spec("UNWATCH", 1, "UNWATCH"),
    // connection and server
    spec("PING", -1, "PING [message]"),
    spec("ECHO", 2, "ECHO message"),
    spec("SELECT", 2, "SELECT index"),
    spec("AUTH", -2, "AUTH [username] password"),
    spec(
        "HELLO",
        -1,
        "HELLO [protover [AUTH username password] [SETNAME name]]",
    ),
    spec("DBSIZE", 1, "DBSIZE"),
    spec("FLUSHDB", -1, "FLUSHDB [ASYNC|SYNC]"),
    spec("FLUSHALL", -1, "FLUSHALL [ASYNC|SYNC]"),
    spec("INFO", -1, "INFO [section ...]"),
    spec("TIME", 1, "TIME"),
    spec("CLIENT", -2, "CLIENT subcommand [arguments ...]"),
    spec("CONFIG", -2, "CONFIG subcommand [arguments ...]"),
    spec("COMMAND", -1, "COMMAND [subcommand [arguments ...]]"),
    // pub/sub and monitoring
    spec("PUBLISH", 3, "PUBLISH channel message"),
    spec("SUBSCRIBE", -2, "SUBSCRIBE channel [channel ...]"),
    spec("PSUBSCRIBE", -2, "PSUBSCRIBE pattern [pattern ...]"),
    spec(
        "SSUBSCRIBE",
        -2,
        "SSUBSCRIBE shardchannel [shardchannel ...]",
    ),
    spec("MONITOR", 1, "MONITOR"),
];

/// The spec for `name` (any case), if the client knows the command.
pub fn lookup(name: &[u8]) -> Option<&'static Spec> {
    TXN_LANGUAGE
        .iter()
        .chain(REDIS)
        .find(|s| s.name.as_bytes().eq_ignore_ascii_case(name))
}

/// Checks `args` (name first) against the table. `Err` carries the message
/// to show, without the `(error) ` prefix; such a command must not be sent.
pub fn check(args: &Args) -> Result<(), String> {
    let Some(name) = args.first() else {
        return Ok(());
    };
    let Some(spec) = lookup(name) else {
        return Ok(());
    };
    let argc = args.len();
    let count_ok = match usize::try_from(spec.arity) {
        Ok(exact) => argc == exact,
        Err(_) => argc >= spec.arity.unsigned_abs() as usize,
    };
    if !count_ok {
        return Err(count_message(spec));
    }
    match spec.extra {
        Some(extra) => extra(args).map_err(|why| format!("{why}: {}", spec.usage)),
        None => Ok(()),
    }
}

fn count_message(spec: &Spec) -> String {
    let needs = match (spec.needs, spec.arity) {
        (Some(needs), _) => format!("needs {needs}"),
        (None, 1) => "takes no arguments".to_string(),
        (None, 2) => "takes exactly 1 argument".to_string(),
        (None, n) if n > 0 => format!("takes exactly {} arguments", n - 1),
        (None, -2) => "takes at least 1 argument".to_string(),
        (None, n) => format!("takes at least {} arguments", n.unsigned_abs() - 1),
    };
    format!("{} {needs}: {}", spec.name, spec.usage)
}

/// The isolation levels the server accepts; spelled as it parses them
/// (case-insensitive, `-`/`_`/space ignored) so the long names pass too.
/// Kept here rather than borrowed from `elsa-txn`: the client depends on no
/// server crate, so it builds and runs against plain Redis.
fn begin_args(args: &Args) -> Result<(), String> {
    if args.len() > 2 {
        return Err("BEGIN takes at most one isolation level".to_string());
    }
    let Some(level) = args.get(1) else {
        return Ok(());
    };
    let norm: String = String::from_utf8_lossy(level)
        .to_ascii_uppercase()
        .chars()
        .filter(|c| !matches!(c, '-' | '_' | ' '))
        .collect();
    match norm.as_str() {
        "RC" | "READCOMMITTED" | "RR" | "REPEATABLEREAD" | "SI" | "SNAPSHOT"
        | "SNAPSHOTISOLATION" => Ok(()),
        _ => Err(format!(
            "unknown isolation level '{}' (use RC, RR or SI)",
            String::from_utf8_lossy(level)
        )),
    }
}

fn pairs_after_1(args: &Args) -> Result<(), String> {
    pairs_after(args, 1)
}

fn pairs_after_2(args: &Args) -> Result<(), String> {
    pairs_after(args, 2)
}

/// `MSET k v k v`, `HSET key f v f v`: whatever follows the first `skip`
/// words must come in pairs.
fn pairs_after(args: &Args, skip: usize) -> Result<(), String> {
    let name = args
        .first()
        .map(|n| String::from_utf8_lossy(n).to_ascii_uppercase())
        .unwrap_or_default();
    if args.len().saturating_sub(skip) % 2 == 1 {
        Err(format!("{name} needs its arguments in pairs"))
    } else {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(line: &str) -> Args {
        line.split_whitespace()
            .map(|w| w.as_bytes().to_vec())
            .collect()
    }

    fn refused(line: &str) -> String {
        check(&args(line)).expect_err(line)
    }

    #[test]
    fn well_formed_transaction_language_passes() {
        for line in [
            "BEGIN",
            "begin rc",
            "BEGIN RR",
            "BEGIN si",
            "BEGIN snapshot",
            "BEGIN read-committed",
            "PUT k v",
            "GET k",
            "DELETE k",
            "COMMIT",
            "ABORT",
            "rollback",
        ] {
            assert_eq!(check(&args(line)), Ok(()), "{line}");
        }
    }

    #[test]
    fn put_without_value_is_refused_helpfully() {
        assert_eq!(
            refused("PUT k"),
            "PUT needs a key and a value: PUT key value"
        );
        assert_eq!(
            refused("put k v extra"),
            "PUT needs a key and a value: PUT key value"
        );
    }

    #[test]
    fn transaction_language_counts() {
        assert_eq!(refused("GET"), "GET needs exactly one key: GET key");
        assert_eq!(refused("GET a b"), "GET needs exactly one key: GET key");
        assert_eq!(
            refused("DELETE"),
            "DELETE needs exactly one key: DELETE key"
        );
        assert_eq!(refused("COMMIT now"), "COMMIT needs no arguments: COMMIT");
        assert_eq!(
            refused("ROLLBACK x"),
            "ROLLBACK needs no arguments: ROLLBACK"
        );
    }

    #[test]
    fn begin_checks_isolation() {
        assert_eq!(
            refused("BEGIN XX"),
            "unknown isolation level 'XX' (use RC, RR or SI): BEGIN [RC|RR|SI]"
        );
        assert_eq!(
            refused("BEGIN RC RR"),
            "BEGIN takes at most one isolation level: BEGIN [RC|RR|SI]"
        );
    }

    #[test]
    fn redis_arity_exact_and_minimum() {
        assert_eq!(refused("INCR"), "INCR takes exactly 1 argument: INCR key");
        assert_eq!(
            refused("INCRBY k"),
            "INCRBY takes exactly 2 arguments: INCRBY key increment"
        );
        assert!(refused("SET k").starts_with("SET takes at least 2 arguments: SET key value"));
        assert_eq!(
            refused("DEL"),
            "DEL takes at least 1 argument: DEL key [key ...]"
        );
        assert_eq!(refused("DBSIZE x"), "DBSIZE takes no arguments: DBSIZE");
        assert_eq!(check(&args("SET k v EX 10")), Ok(()));
        assert_eq!(check(&args("DEL a b c")), Ok(()));
        assert_eq!(check(&args("PING")), Ok(()));
    }

    #[test]
    fn pairs_are_checked() {
        assert_eq!(check(&args("MSET a 1 b 2")), Ok(()));
        assert_eq!(
            refused("MSET a 1 b"),
            "MSET needs its arguments in pairs: MSET key value [key value ...]"
        );
        assert_eq!(check(&args("HSET h f v g w")), Ok(()));
        assert!(refused("HSET h f v g").contains("pairs"));
    }

    #[test]
    fn unknown_commands_pass() {
        assert_eq!(check(&args("FROBNICATE a b c")), Ok(()));
        assert_eq!(check(&args("OBJECT ENCODING k")), Ok(()));
    }

    #[test]
    fn names_are_unique_and_upper_case() {
        let mut seen = std::collections::HashSet::new();
        for spec in TXN_LANGUAGE.iter().chain(REDIS) {
            assert_eq!(spec.name, spec.name.to_ascii_uppercase());
            assert_ne!(spec.arity, 0, "{}", spec.name);
            assert!(seen.insert(spec.name), "{} listed twice", spec.name);
            assert!(
                spec.usage.starts_with(spec.name),
                "{} usage {:?}",
                spec.name,
                spec.usage
            );
        }
    }
}

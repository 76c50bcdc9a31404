//! The command table: every command Elsa answers, with Redis-style metadata
//! (arity, flags, key positions) so COMMAND, the router and the transaction
//! layer can all tell what a command touches.
//!
//! Data commands turn their arguments into per-key [`Op`]s plus a [`Shape`]
//! saying how the per-key answers combine into one reply; the connection
//! decides how to run those ops (lone, in a transaction, or atomically).
//! Everything else is a [`Control`] command the connection serves itself.

mod bits;
pub mod docs;
mod docs_table;
mod hashes;
mod keys;
mod lists;
pub(crate) mod object;
mod sets;
mod strings;
mod zsets;

use std::collections::HashMap;
use std::sync::LazyLock;

use bytes::Bytes;
use elsa_shard::Op;

/// Arguments of one request (`args[0]` is the command name).
pub type Args = [Bytes];

/// How the per-key answers of a data command become one reply.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Shape {
    /// One key: the op's answer as is.
    One,
    /// MGET: an array of the answers.
    Array,
    /// DEL / EXISTS / UNLINK over several keys: the sum.
    Sum,
    /// MSET: `+OK`.
    Ok,
    /// MOVE: its RENAMENX's answer, a missing key answering 0.
    Move,
    /// OBJECT HELP, MEMORY HELP: these lines, whatever the ops answered
    /// (they have none).
    Help(&'static [&'static str]),
    /// A blocking pop: its one op is retried until it finds something
    /// (an answer other than nil) or `timeout_ms` passes (0: never), then
    /// answered as is — or, with `pair` (BLPOP, BRPOP, BZPOPMIN,
    /// BZPOPMAX), LMPOP's `[key, [element]]` as `[key, element]` and
    /// ZMPOP's `[key, [[member, score]]]` as `[key, member, score]`.
    Blocking {
        /// How long to wait.
        timeout_ms: u64,
        /// BLPOP/BRPOP's reply.
        pair: bool,
    },
}

/// A data command, parsed: what to do to which keys.
#[derive(Clone, Debug)]
pub struct DataCmd {
    /// Ops in command order.
    pub ops: Vec<(Bytes, Op)>,
    /// How their answers combine.
    pub shape: Shape,
}

impl DataCmd {
    /// True when the command is one op on one key: it may run as a lone
    /// command (batched per shard). An op that reaches other keys (RENAME)
    /// needs them held with its own, so it runs atomically instead.
    pub fn is_single_key(&self) -> bool {
        matches!(&self.ops[..], [(_, op)] if op.other_keys().is_empty())
    }
}

/// Commands the connection serves itself.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Control {
    Ping,
    Echo,
    Hello,
    Quit,
    Select,
    Client,
    Command,
    Config,
    Info,
    Dbsize,
    Randomkey,
    Flushall,
    Flushdb,
    Swapdb,
    Scan,
    Keys,
    Auth,
    Time,
    Reset,
    Begin,
    Ack,
    Commit,
    Abort,
    LastCommit,
    Multi,
    Exec,
    Discard,
    Watch,
    Unwatch,
    Msetnx,
    Save,
    Bgsave,
    Lastsave,
    WaitRegion,
    ElsaDigest,
    ElsaFault,
    ElsaDecommission,
    // pub/sub (`crate::pubsub::commands`)
    Subscribe,
    Unsubscribe,
    Psubscribe,
    Punsubscribe,
    Ssubscribe,
    Sunsubscribe,
    Publish,
    Spublish,
    Pubsub,
    /// EVAL, EVALSHA, EVAL_RO, EVALSHA_RO (`crate::script`).
    Eval,
    /// SCRIPT LOAD|EXISTS|FLUSH|KILL|HELP.
    Script,
    /// ACL SETUSER|GETUSER|… (`crate::acl`).
    Acl,
    /// SLOWLOG GET|LEN|RESET|HELP (`crate::intro`).
    Slowlog,
    /// LATENCY LATEST|HISTORY|RESET|HISTOGRAM|DOCTOR|HELP (`crate::intro`).
    Latency,
    /// MEMORY USAGE|STATS|DOCTOR|MALLOC-STATS|PURGE (`crate::memory`).
    Memory,
    /// CLUSTER KEYSLOT|SLOTS|SHARDS|NODES|INFO|MYID (`crate::cluster_cmd`).
    Cluster,
    /// MONITOR and SHUTDOWN (`crate::clients`).
    Monitor,
    Shutdown,
}

/// What kind of command a name is.
#[derive(Clone, Copy, Debug)]
pub enum Kind {
    /// Parsed into ops by this function.
    Data(fn(&Args) -> Result<DataCmd, CmdError>),
    /// Served by the connection.
    Control(Control),
}

/// One row of the command table.
#[derive(Debug)]
pub struct Spec {
    /// Lowercase name, as COMMAND reports it.
    pub name: &'static str,
    /// Redis arity: `n` exact argument count (name included), `-n` at least n.
    pub arity: i32,
    /// COMMAND flags.
    pub flags: &'static [&'static str],
    /// First key position (0 = no keys).
    pub first_key: i32,
    /// Last key position (-1 = last argument).
    pub last_key: i32,
    /// Step between keys.
    pub step: i32,
    /// How it runs.
    pub kind: Kind,
}

impl Spec {
    /// True when `argc` (name included) satisfies the arity.
    pub fn arity_ok(&self, argc: usize) -> bool {
        if self.arity >= 0 {
            argc == self.arity as usize
        } else {
            argc >= (-self.arity) as usize
        }
    }

    /// True for commands allowed before AUTH when a password is set.
    pub fn allowed_unauthenticated(&self) -> bool {
        matches!(
            self.kind,
            Kind::Control(Control::Auth | Control::Hello | Control::Quit | Control::Reset)
        )
    }

    /// True for commands that change data (COMMAND's `write` flag).
    pub fn is_write(&self) -> bool {
        self.flags.contains(&"write")
    }
}

/// How many databases SELECT offers (`databases`; set once at startup).
static DATABASES: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(16);

/// Sets how many databases SELECT, MOVE and COPY … DB accept.
pub fn set_databases(n: usize) {
    DATABASES.store(n.clamp(1, 256), std::sync::atomic::Ordering::Relaxed);
}

/// A database index as SELECT, MOVE and COPY … DB read it: Redis's
/// errors for a non-integer and for an index out of range.
pub fn db_index(arg: &[u8]) -> Result<u8, CmdError> {
    let n = elsa_shard::ops::parse_i64(arg).ok_or_else(CmdError::not_integer)?;
    if i32::try_from(n).is_err() {
        return Err(
            "ERR value is out of range, value must between -2147483648 and 2147483647".into(),
        );
    }
    match usize::try_from(n) {
        Ok(n) if n < DATABASES.load(std::sync::atomic::Ordering::Relaxed) => Ok(n as u8),
        _ => Err("ERR DB index is out of range".into()),
    }
}

/// Where a request names keys (Redis's `getKeysFromCommand`): the fixed
/// positions of the command table, or, for the commands whose keys follow
/// a count (`numkeys`), the positions that count gives. A count that is
/// not a number, or reaches past the arguments, gives what fits: the
/// command's own parse refuses it anyway.
pub fn key_positions(spec: &Spec, args: &Args) -> Vec<usize> {
    let counted = |at: usize, first: Vec<usize>| {
        let n = args
            .get(at)
            .and_then(|a| elsa_shard::ops::parse_i64(a))
            .and_then(|n| usize::try_from(n).ok())
            .unwrap_or(0);
        let end = (at + 1).saturating_add(n).min(args.len());
        first.into_iter().chain(at + 1..end).collect()
    };
    match spec.name {
        "zunion" | "zinter" | "zdiff" | "zintercard" | "sintercard" | "lmpop" | "zmpop" => {
            counted(1, vec![])
        }
        "zunionstore" | "zinterstore" | "zdiffstore" => counted(2, vec![1]),
        "blmpop" | "bzmpop" | "eval" | "evalsha" | "eval_ro" | "evalsha_ro" | "fcall"
        | "fcall_ro" => counted(2, vec![]),
        // OBJECT ENCODING key, MEMORY USAGE key [SAMPLES n]
        "object" | "memory" if args.len() >= 3 => vec![2],
        _ if spec.first_key <= 0 => vec![],
        _ => {
            let last = if spec.last_key < 0 {
                args.len() as i64 + spec.last_key as i64
            } else {
                spec.last_key as i64
            };
            let step = spec.step.max(1) as usize;
            (spec.first_key as usize..=last.max(0) as usize)
                .step_by(step)
                .filter(|&i| i < args.len())
                .collect()
        }
    }
}

/// A command-level error, answered as a Redis error line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CmdError(pub String);

impl CmdError {
    /// `ERR syntax error`.
    pub fn syntax() -> CmdError {
        CmdError("ERR syntax error".into())
    }

    /// `ERR value is not an integer or out of range`.
    pub fn not_integer() -> CmdError {
        CmdError(elsa_shard::ops::ERR_NOT_INTEGER.into())
    }
}

impl From<&str> for CmdError {
    fn from(text: &str) -> CmdError {
        CmdError(text.into())
    }
}

const R: &[&str] = &["readonly", "fast"];
const W: &[&str] = &["write", "denyoom", "fast"];
const WS: &[&str] = &["write", "denyoom"];
const A: &[&str] = &["fast", "loading", "stale"];
const N: &[&str] = &["noscript", "loading", "stale"];
const SUB: &[&str] = &["pubsub", "noscript", "loading", "stale"];
const ADM: &[&str] = &["admin", "noscript", "loading", "stale"];
const PUB: &[&str] = &["pubsub", "loading", "stale", "fast"];
const EV: &[&str] = &[
    "noscript",
    "stale",
    "skip_monitor",
    "no_mandatory_keys",
    "movablekeys",
];
const EVRO: &[&str] = &[
    "readonly",
    "noscript",
    "stale",
    "skip_monitor",
    "no_mandatory_keys",
    "movablekeys",
];

macro_rules! spec {
    ($name:expr, $arity:expr, $flags:expr, $first:expr, $last:expr, $step:expr, $kind:expr) => {
        Spec {
            name: $name,
            arity: $arity,
            flags: $flags,
            first_key: $first,
            last_key: $last,
            step: $step,
            kind: $kind,
        }
    };
}

use Control as C;
use Kind::{Control as Ctl, Data};

/// Every command, in one table.
pub static COMMANDS: &[Spec] = &[
    // strings
    spec!("get", 2, R, 1, 1, 1, Data(strings::get)),
    spec!("set", -3, W, 1, 1, 1, Data(strings::set)),
    spec!("put", 3, W, 1, 1, 1, Data(strings::put)),
    spec!("setnx", 3, W, 1, 1, 1, Data(strings::setnx)),
    spec!("setex", 4, W, 1, 1, 1, Data(strings::setex)),
    spec!("psetex", 4, W, 1, 1, 1, Data(strings::psetex)),
    spec!("getset", 3, W, 1, 1, 1, Data(strings::getset)),
    spec!("getdel", 2, W, 1, 1, 1, Data(strings::getdel)),
    spec!("mget", -2, R, 1, -1, 1, Data(strings::mget)),
    spec!("mset", -3, WS, 1, -1, 2, Data(strings::mset)),
    spec!("msetnx", -3, WS, 1, -1, 2, Ctl(C::Msetnx)),
    spec!("incr", 2, W, 1, 1, 1, Data(strings::incr)),
    spec!("decr", 2, W, 1, 1, 1, Data(strings::decr)),
    spec!("incrby", 3, W, 1, 1, 1, Data(strings::incrby)),
    spec!("decrby", 3, W, 1, 1, 1, Data(strings::decrby)),
    spec!("append", 3, W, 1, 1, 1, Data(strings::append)),
    spec!("strlen", 2, R, 1, 1, 1, Data(strings::strlen)),
    spec!(
        "getex",
        -2,
        &["write", "fast"],
        1,
        1,
        1,
        Data(strings::getex)
    ),
    spec!(
        "getrange",
        4,
        &["readonly"],
        1,
        1,
        1,
        Data(strings::getrange)
    ),
    spec!("substr", 4, &["readonly"], 1, 1, 1, Data(strings::getrange)),
    spec!("lcs", -3, &["readonly"], 1, 2, 1, Data(strings::lcs)),
    spec!("setrange", 4, WS, 1, 1, 1, Data(strings::setrange)),
    spec!("incrbyfloat", 3, W, 1, 1, 1, Data(strings::incrbyfloat)),
    // bits
    spec!("getbit", 3, R, 1, 1, 1, Data(bits::getbit)),
    spec!("setbit", 4, WS, 1, 1, 1, Data(bits::setbit)),
    spec!("bitcount", -2, &["readonly"], 1, 1, 1, Data(bits::bitcount)),
    spec!("bitpos", -3, &["readonly"], 1, 1, 1, Data(bits::bitpos)),
    spec!("bitfield", -2, WS, 1, 1, 1, Data(bits::bitfield)),
    spec!("bitfield_ro", -2, R, 1, 1, 1, Data(bits::bitfield_ro)),
    spec!("bitop", -4, WS, 2, -1, 1, Data(bits::bitop)),
    // hashes
    spec!("hset", -4, W, 1, 1, 1, Data(hashes::hset)),
    spec!("hsetnx", 4, W, 1, 1, 1, Data(hashes::hsetnx)),
    spec!("hmset", -4, W, 1, 1, 1, Data(hashes::hmset)),
    spec!("hget", 3, R, 1, 1, 1, Data(hashes::hget)),
    spec!("hmget", -3, R, 1, 1, 1, Data(hashes::hmget)),
    spec!("hgetall", 2, &["readonly"], 1, 1, 1, Data(hashes::hgetall)),
    spec!("hdel", -3, &["write", "fast"], 1, 1, 1, Data(hashes::hdel)),
    spec!("hlen", 2, R, 1, 1, 1, Data(hashes::hlen)),
    spec!("hexists", 3, R, 1, 1, 1, Data(hashes::hexists)),
    spec!("hkeys", 2, &["readonly"], 1, 1, 1, Data(hashes::hkeys)),
    spec!("hvals", 2, &["readonly"], 1, 1, 1, Data(hashes::hvals)),
    spec!("hstrlen", 3, R, 1, 1, 1, Data(hashes::hstrlen)),
    spec!("hincrby", 4, W, 1, 1, 1, Data(hashes::hincrby)),
    spec!("hincrbyfloat", 4, W, 1, 1, 1, Data(hashes::hincrbyfloat)),
    spec!(
        "hrandfield",
        -2,
        &["readonly"],
        1,
        1,
        1,
        Data(hashes::hrandfield)
    ),
    spec!("hscan", -3, &["readonly"], 1, 1, 1, Data(hashes::hscan)),
    // sets
    spec!("sadd", -3, W, 1, 1, 1, Data(sets::sadd)),
    spec!("srem", -3, &["write", "fast"], 1, 1, 1, Data(sets::srem)),
    spec!("smembers", 2, &["readonly"], 1, 1, 1, Data(sets::smembers)),
    spec!("sismember", 3, R, 1, 1, 1, Data(sets::sismember)),
    spec!("smismember", -3, R, 1, 1, 1, Data(sets::smismember)),
    spec!("scard", 2, R, 1, 1, 1, Data(sets::scard)),
    spec!("spop", -2, &["write", "fast"], 1, 1, 1, Data(sets::spop)),
    spec!(
        "srandmember",
        -2,
        &["readonly"],
        1,
        1,
        1,
        Data(sets::srandmember)
    ),
    spec!("sscan", -3, &["readonly"], 1, 1, 1, Data(sets::sscan)),
    spec!("smove", 4, &["write", "fast"], 1, 2, 1, Data(sets::smove)),
    spec!("sinter", -2, &["readonly"], 1, -1, 1, Data(sets::sinter)),
    spec!(
        "sintercard",
        -3,
        &["readonly"],
        0,
        0,
        0,
        Data(sets::sintercard)
    ),
    spec!("sunion", -2, &["readonly"], 1, -1, 1, Data(sets::sunion)),
    spec!("sdiff", -2, &["readonly"], 1, -1, 1, Data(sets::sdiff)),
    spec!("sinterstore", -3, WS, 1, -1, 1, Data(sets::sinterstore)),
    spec!("sunionstore", -3, WS, 1, -1, 1, Data(sets::sunionstore)),
    spec!("sdiffstore", -3, WS, 1, -1, 1, Data(sets::sdiffstore)),
    // sorted sets (one parser: `ops::zparse`)
    spec!("zadd", -4, W, 1, 1, 1, Data(zsets::zcmd)),
    spec!("zincrby", 4, W, 1, 1, 1, Data(zsets::zcmd)),
    spec!("zrem", -3, &["write", "fast"], 1, 1, 1, Data(zsets::zcmd)),
    spec!("zscore", 3, R, 1, 1, 1, Data(zsets::zcmd)),
    spec!("zmscore", -3, R, 1, 1, 1, Data(zsets::zcmd)),
    spec!("zcard", 2, R, 1, 1, 1, Data(zsets::zcmd)),
    spec!("zcount", 4, R, 1, 1, 1, Data(zsets::zcmd)),
    spec!("zlexcount", 4, R, 1, 1, 1, Data(zsets::zcmd)),
    spec!("zrank", -3, R, 1, 1, 1, Data(zsets::zcmd)),
    spec!("zrevrank", -3, R, 1, 1, 1, Data(zsets::zcmd)),
    spec!("zrange", -4, &["readonly"], 1, 1, 1, Data(zsets::zcmd)),
    spec!("zrevrange", -4, &["readonly"], 1, 1, 1, Data(zsets::zcmd)),
    spec!(
        "zrangebyscore",
        -4,
        &["readonly"],
        1,
        1,
        1,
        Data(zsets::zcmd)
    ),
    spec!(
        "zrevrangebyscore",
        -4,
        &["readonly"],
        1,
        1,
        1,
        Data(zsets::zcmd)
    ),
    spec!("zrangebylex", -4, &["readonly"], 1, 1, 1, Data(zsets::zcmd)),
    spec!(
        "zrevrangebylex",
        -4,
        &["readonly"],
        1,
        1,
        1,
        Data(zsets::zcmd)
    ),
    spec!("zrangestore", -5, WS, 1, 2, 1, Data(zsets::zcmd)),
    spec!("zremrangebyrank", 4, &["write"], 1, 1, 1, Data(zsets::zcmd)),
    spec!(
        "zremrangebyscore",
        4,
        &["write"],
        1,
        1,
        1,
        Data(zsets::zcmd)
    ),
    spec!("zremrangebylex", 4, &["write"], 1, 1, 1, Data(zsets::zcmd)),
    spec!(
        "zpopmin",
        -2,
        &["write", "fast"],
        1,
        1,
        1,
        Data(zsets::zcmd)
    ),
    spec!(
        "zpopmax",
        -2,
        &["write", "fast"],
        1,
        1,
        1,
        Data(zsets::zcmd)
    ),
    spec!("zrandmember", -2, &["readonly"], 1, 1, 1, Data(zsets::zcmd)),
    spec!("zunion", -3, &["readonly"], 0, 0, 0, Data(zsets::zcmd)),
    spec!("zinter", -3, &["readonly"], 0, 0, 0, Data(zsets::zcmd)),
    spec!("zdiff", -3, &["readonly"], 0, 0, 0, Data(zsets::zcmd)),
    spec!("zunionstore", -4, WS, 1, 1, 1, Data(zsets::zcmd)),
    spec!("zinterstore", -4, WS, 1, 1, 1, Data(zsets::zcmd)),
    spec!("zdiffstore", -4, WS, 1, 1, 1, Data(zsets::zcmd)),
    spec!("zintercard", -3, &["readonly"], 0, 0, 0, Data(zsets::zcmd)),
    spec!("zmpop", -4, &["write"], 0, 0, 0, Data(zsets::zcmd)),
    spec!("zscan", -3, &["readonly"], 1, 1, 1, Data(zsets::zcmd)),
    spec!(
        "bzpopmin",
        -3,
        &["write", "noscript", "fast"],
        1,
        -2,
        1,
        Data(zsets::bzcmd)
    ),
    spec!(
        "bzpopmax",
        -3,
        &["write", "noscript", "fast"],
        1,
        -2,
        1,
        Data(zsets::bzcmd)
    ),
    spec!("bzmpop", -5, &["write"], 0, 0, 0, Data(zsets::bzcmd)),
    // lists
    spec!("lpush", -3, W, 1, 1, 1, Data(lists::lcmd)),
    spec!("rpush", -3, W, 1, 1, 1, Data(lists::lcmd)),
    spec!("lpushx", -3, W, 1, 1, 1, Data(lists::lcmd)),
    spec!("rpushx", -3, W, 1, 1, 1, Data(lists::lcmd)),
    spec!("lpop", -2, &["write", "fast"], 1, 1, 1, Data(lists::lcmd)),
    spec!("rpop", -2, &["write", "fast"], 1, 1, 1, Data(lists::lcmd)),
    spec!("llen", 2, R, 1, 1, 1, Data(lists::lcmd)),
    spec!("lrange", 4, &["readonly"], 1, 1, 1, Data(lists::lcmd)),
    spec!("lindex", 3, &["readonly"], 1, 1, 1, Data(lists::lcmd)),
    spec!("lset", 4, WS, 1, 1, 1, Data(lists::lcmd)),
    spec!("linsert", 5, WS, 1, 1, 1, Data(lists::lcmd)),
    spec!("lrem", 4, &["write"], 1, 1, 1, Data(lists::lcmd)),
    spec!("ltrim", 4, &["write"], 1, 1, 1, Data(lists::lcmd)),
    spec!("lpos", -3, &["readonly"], 1, 1, 1, Data(lists::lcmd)),
    spec!("lmove", 5, WS, 1, 2, 1, Data(lists::lcmd)),
    spec!("rpoplpush", 3, WS, 1, 2, 1, Data(lists::lcmd)),
    spec!("lmpop", -4, &["write"], 0, 0, 0, Data(lists::lcmd)),
    spec!(
        "blpop",
        -3,
        &["write", "noscript"],
        1,
        -2,
        1,
        Data(lists::blocking)
    ),
    spec!(
        "brpop",
        -3,
        &["write", "noscript"],
        1,
        -2,
        1,
        Data(lists::blocking)
    ),
    spec!("blmpop", -5, &["write"], 0, 0, 0, Data(lists::blocking)),
    spec!(
        "blmove",
        6,
        &["write", "denyoom", "noscript"],
        1,
        2,
        1,
        Data(lists::blocking)
    ),
    spec!(
        "brpoplpush",
        4,
        &["write", "denyoom", "noscript"],
        1,
        2,
        1,
        Data(lists::blocking)
    ),
    // keys
    spec!("del", -2, &["write"], 1, -1, 1, Data(keys::del)),
    spec!("delete", -2, &["write"], 1, -1, 1, Data(keys::del)),
    spec!("unlink", -2, &["write", "fast"], 1, -1, 1, Data(keys::del)),
    spec!("exists", -2, R, 1, -1, 1, Data(keys::exists)),
    spec!("touch", -2, R, 1, -1, 1, Data(keys::exists)),
    spec!("expiretime", 2, R, 1, 1, 1, Data(keys::expiretime)),
    spec!("pexpiretime", 2, R, 1, 1, 1, Data(keys::pexpiretime)),
    spec!("rename", 3, &["write"], 1, 2, 1, Data(keys::rename)),
    spec!(
        "renamenx",
        3,
        &["write", "fast"],
        1,
        2,
        1,
        Data(keys::renamenx)
    ),
    spec!("copy", -3, WS, 1, 2, 1, Data(keys::copy)),
    spec!("object", -2, &[], 0, 0, 0, Data(object::object)),
    spec!("memory", -2, &[], 0, 0, 0, Data(object::memory)),
    spec!("randomkey", 1, &["readonly"], 0, 0, 0, Ctl(C::Randomkey)),
    spec!("type", 2, R, 1, 1, 1, Data(keys::type_)),
    spec!("ttl", 2, R, 1, 1, 1, Data(keys::ttl)),
    spec!("pttl", 2, R, 1, 1, 1, Data(keys::pttl)),
    spec!(
        "expire",
        -3,
        &["write", "fast"],
        1,
        1,
        1,
        Data(keys::expire)
    ),
    spec!(
        "pexpire",
        -3,
        &["write", "fast"],
        1,
        1,
        1,
        Data(keys::pexpire)
    ),
    spec!(
        "expireat",
        -3,
        &["write", "fast"],
        1,
        1,
        1,
        Data(keys::expireat)
    ),
    spec!(
        "pexpireat",
        -3,
        &["write", "fast"],
        1,
        1,
        1,
        Data(keys::pexpireat)
    ),
    spec!(
        "persist",
        2,
        &["write", "fast"],
        1,
        1,
        1,
        Data(keys::persist)
    ),
    spec!("scan", -2, &["readonly"], 0, 0, 0, Ctl(C::Scan)),
    spec!("keys", 2, &["readonly"], 0, 0, 0, Ctl(C::Keys)),
    spec!("dbsize", 1, R, 0, 0, 0, Ctl(C::Dbsize)),
    spec!("flushall", -1, &["write"], 0, 0, 0, Ctl(C::Flushall)),
    spec!("flushdb", -1, &["write"], 0, 0, 0, Ctl(C::Flushdb)),
    spec!("swapdb", 3, &["write", "fast"], 0, 0, 0, Ctl(C::Swapdb)),
    spec!("move", 3, &["write", "fast"], 1, 1, 1, Data(keys::move_)),
    // connection and server
    spec!("ping", -1, A, 0, 0, 0, Ctl(C::Ping)),
    spec!("echo", 2, A, 0, 0, 0, Ctl(C::Echo)),
    spec!("hello", -1, N, 0, 0, 0, Ctl(C::Hello)),
    spec!("quit", -1, A, 0, 0, 0, Ctl(C::Quit)),
    spec!("reset", 1, A, 0, 0, 0, Ctl(C::Reset)),
    spec!("auth", -2, N, 0, 0, 0, Ctl(C::Auth)),
    spec!("acl", -2, N, 0, 0, 0, Ctl(C::Acl)),
    spec!("select", 2, A, 0, 0, 0, Ctl(C::Select)),
    spec!("client", -2, N, 0, 0, 0, Ctl(C::Client)),
    spec!("command", -1, N, 0, 0, 0, Ctl(C::Command)),
    spec!("config", -2, N, 0, 0, 0, Ctl(C::Config)),
    spec!("info", -1, N, 0, 0, 0, Ctl(C::Info)),
    spec!("time", 1, A, 0, 0, 0, Ctl(C::Time)),
    spec!("save", 1, N, 0, 0, 0, Ctl(C::Save)),
    spec!("bgsave", -1, N, 0, 0, 0, Ctl(C::Bgsave)),
    spec!("lastsave", 1, A, 0, 0, 0, Ctl(C::Lastsave)),
    // introspection (`crate::intro`)
    spec!("slowlog", -2, ADM, 0, 0, 0, Ctl(C::Slowlog)),
    spec!("latency", -2, ADM, 0, 0, 0, Ctl(C::Latency)),
    spec!("cluster", -2, &[], 0, 0, 0, Ctl(C::Cluster)),
    spec!("monitor", 1, N, 0, 0, 0, Ctl(C::Monitor)),
    spec!("shutdown", -1, N, 0, 0, 0, Ctl(C::Shutdown)),
    // regions
    spec!("waitregion", -3, N, 0, 0, 0, Ctl(C::WaitRegion)),
    spec!("elsa.digest", 1, R, 0, 0, 0, Ctl(C::ElsaDigest)),
    spec!("elsa.fault", -2, N, 0, 0, 0, Ctl(C::ElsaFault)),
    spec!("elsa.decommission", 1, N, 0, 0, 0, Ctl(C::ElsaDecommission)),
    // pub/sub
    spec!("subscribe", -2, SUB, 0, 0, 0, Ctl(C::Subscribe)),
    spec!("unsubscribe", -1, SUB, 0, 0, 0, Ctl(C::Unsubscribe)),
    spec!("psubscribe", -2, SUB, 0, 0, 0, Ctl(C::Psubscribe)),
    spec!("punsubscribe", -1, SUB, 0, 0, 0, Ctl(C::Punsubscribe)),
    spec!("ssubscribe", -2, SUB, 1, -1, 1, Ctl(C::Ssubscribe)),
    spec!("sunsubscribe", -1, SUB, 1, -1, 1, Ctl(C::Sunsubscribe)),
    spec!("publish", 3, PUB, 0, 0, 0, Ctl(C::Publish)),
    spec!("spublish", 3, PUB, 1, 1, 1, Ctl(C::Spublish)),
    spec!("pubsub", -2, &[], 0, 0, 0, Ctl(C::Pubsub)),
    // Lua scripts (`crate::script`): keys are EVAL's `numkeys` form, so
    // the fixed positions are 0 and the flags say `movablekeys`.
    spec!("eval", -3, EV, 0, 0, 0, Ctl(C::Eval)),
    spec!("evalsha", -3, EV, 0, 0, 0, Ctl(C::Eval)),
    spec!("eval_ro", -3, EVRO, 0, 0, 0, Ctl(C::Eval)),
    spec!("evalsha_ro", -3, EVRO, 0, 0, 0, Ctl(C::Eval)),
    spec!("script", -2, &[], 0, 0, 0, Ctl(C::Script)),
    // transactions
    spec!("begin", -1, A, 0, 0, 0, Ctl(C::Begin)),
    spec!("ack", -1, A, 0, 0, 0, Ctl(C::Ack)),
    spec!("commit", 1, A, 0, 0, 0, Ctl(C::Commit)),
    spec!("abort", 1, A, 0, 0, 0, Ctl(C::Abort)),
    spec!("rollback", 1, A, 0, 0, 0, Ctl(C::Abort)),
    spec!("lastcommit", 1, A, 0, 0, 0, Ctl(C::LastCommit)),
    spec!("multi", 1, A, 0, 0, 0, Ctl(C::Multi)),
    spec!(
        "exec",
        1,
        &["noscript", "loading", "stale"],
        0,
        0,
        0,
        Ctl(C::Exec)
    ),
    spec!("discard", 1, A, 0, 0, 0, Ctl(C::Discard)),
    spec!("watch", -2, A, 1, -1, 1, Ctl(C::Watch)),
    spec!("unwatch", 1, A, 0, 0, 0, Ctl(C::Unwatch)),
];

// foldhash, not SipHash: the lookup runs once per command on the hot path
// and the keys are our own names, not attacker-chosen.
static BY_NAME: LazyLock<HashMap<&'static [u8], &'static Spec, foldhash::fast::FixedState>> =
    LazyLock::new(|| COMMANDS.iter().map(|s| (s.name.as_bytes(), s)).collect());

/// Looks a command up by name, case-insensitively, without allocating.
pub fn lookup(name: &[u8]) -> Option<&'static Spec> {
    let mut buf = [0u8; 24];
    if name.len() > buf.len() {
        return None;
    }
    for (d, s) in buf.iter_mut().zip(name) {
        *d = s.to_ascii_lowercase();
    }
    BY_NAME.get(&buf[..name.len()]).copied()
}

/// The Redis error for an unknown command: the name, then the arguments,
/// each quoted and followed by a space, while the list is under 128 bytes
/// (the last one cut to what is left). Redis prints them as C strings, so
/// each stops at a NUL byte.
pub fn unknown_command(args: &Args) -> String {
    const LIST_MAX: usize = 128;
    let name = args.first().map_or(&[][..], |a| c_str(a));
    let mut list: Vec<u8> = Vec::new();
    for a in args.iter().skip(1) {
        if list.len() >= LIST_MAX {
            break;
        }
        let a = c_str(a);
        let room = LIST_MAX - list.len();
        list.push(b'\'');
        list.extend_from_slice(&a[..a.len().min(room)]);
        list.extend_from_slice(b"' ");
    }
    format!(
        "ERR unknown command '{}', with args beginning with: {}",
        String::from_utf8_lossy(&name[..name.len().min(128)]),
        String::from_utf8_lossy(&list)
    )
}

/// The Redis error for a wrong argument count.
pub fn wrong_arity(name: &str) -> String {
    format!("ERR wrong number of arguments for '{name}' command")
}

/// Subcommands of the container commands, with their Redis 7.0 arities
/// (the container's name counted, as in `Spec::arity`). Redis looks them up
/// before it runs anything, so an unknown one or a wrong count is refused
/// at once — inside MULTI too, where it fails the transaction. The last
/// entries of CLIENT are Redis 7.2's, which Elsa answers as well.
const SUBCOMMANDS: &[(&str, &[(&str, i32)])] = &[
    (
        "acl",
        &[
            ("cat", -2),
            ("deluser", -3),
            ("dryrun", -4),
            ("genpass", -2),
            ("getuser", 3),
            ("help", 2),
            ("list", 2),
            ("load", 2),
            ("log", -2),
            ("save", 2),
            ("setuser", -3),
            ("users", 2),
            ("whoami", 2),
        ],
    ),
    (
        "client",
        &[
            ("caching", 3),
            ("getname", 2),
            ("getredir", 2),
            ("help", 2),
            ("id", 2),
            ("info", 2),
            ("kill", -3),
            ("list", -2),
            ("no-evict", 3),
            ("pause", -3),
            ("reply", 3),
            ("setname", 3),
            ("tracking", -3),
            ("trackinginfo", 2),
            ("unblock", -3),
            ("unpause", 2),
            ("no-touch", 3),
            ("setinfo", 4),
        ],
    ),
    (
        "command",
        &[
            ("count", 2),
            ("docs", -2),
            ("getkeys", -4),
            ("getkeysandflags", -4),
            ("help", 2),
            ("info", -2),
            ("list", -2),
        ],
    ),
    (
        "config",
        &[
            ("get", -3),
            ("help", 2),
            ("resetstat", 2),
            ("rewrite", 2),
            ("set", -4),
        ],
    ),
    (
        "script",
        &[
            ("debug", 3),
            ("exists", -3),
            ("flush", -2),
            ("help", 2),
            ("kill", 2),
            ("load", 3),
        ],
    ),
    (
        "object",
        &[
            ("encoding", 3),
            ("freq", 3),
            ("help", 2),
            ("idletime", 3),
            ("refcount", 3),
        ],
    ),
    (
        "pubsub",
        &[
            ("channels", -2),
            ("help", 2),
            ("numpat", 2),
            ("numsub", -2),
            ("shardchannels", -2),
            ("shardnumsub", -2),
        ],
    ),
    (
        "slowlog",
        &[("get", -2), ("help", 2), ("len", 2), ("reset", 2)],
    ),
    (
        "cluster",
        &[
            ("help", 2),
            ("info", 2),
            ("keyslot", 3),
            ("myid", 2),
            ("nodes", 2),
            ("shards", 2),
            ("slots", 2),
        ],
    ),
    (
        "latency",
        &[
            ("doctor", 2),
            ("help", 2),
            ("histogram", -2),
            ("history", 3),
            ("latest", 2),
            ("reset", -2),
        ],
    ),
    (
        "memory",
        &[
            ("doctor", 2),
            ("help", 2),
            ("malloc-stats", 2),
            ("purge", 2),
            ("stats", 2),
            ("usage", -3),
        ],
    ),
];

/// A container command's subcommands and their arities (`crate::cmdstats`
/// names each one's counters `container|sub`), if `name` is a container.
pub fn subcommands_of(name: &str) -> Option<&'static [(&'static str, i32)]> {
    SUBCOMMANDS
        .iter()
        .find(|(n, _)| *n == name)
        .map(|(_, subs)| *subs)
}

/// A command's index in [`COMMANDS`] (`spec` is one of its rows).
pub fn spec_index(spec: &'static Spec) -> usize {
    (spec as *const Spec as usize - COMMANDS.as_ptr() as usize) / std::mem::size_of::<Spec>()
}

/// Redis's refusal of a container command's subcommand (unknown, or the
/// wrong number of arguments), if any.
pub fn subcommand_error(spec: &Spec, args: &Args) -> Option<String> {
    let (_, subs) = SUBCOMMANDS.iter().find(|(name, _)| *name == spec.name)?;
    // With no subcommand Redis checks only the container's own arity.
    let sub = c_str(args.get(1)?);
    let Some((sub_name, arity)) = subs.iter().find(|(name, _)| is(sub, name)) else {
        return Some(format!(
            "ERR unknown subcommand '{}'. Try {} HELP.",
            String::from_utf8_lossy(&sub[..sub.len().min(128)]),
            spec.name.to_uppercase()
        ));
    };
    let ok = if *arity >= 0 {
        args.len() == *arity as usize
    } else {
        args.len() >= (-arity) as usize
    };
    (!ok).then(|| wrong_arity(&format!("{}|{sub_name}", spec.name)))
}

/// Redis's full name of a command (`c->cmd->fullname`): `config|get` for
/// a container's subcommand, else the name.
pub fn full_name(spec: &Spec, args: &Args) -> String {
    let sub = SUBCOMMANDS
        .iter()
        .find(|(name, _)| *name == spec.name)
        .and_then(|(_, subs)| {
            let arg = args.get(1)?;
            subs.iter().find(|(name, _)| is(arg, name))
        });
    match sub {
        Some((sub, _)) => format!("{}|{sub}", spec.name),
        None => spec.name.to_string(),
    }
}

/// An argument as C code sees it: up to its first NUL byte. Redis reads
/// option names and error-message arguments that way.
pub fn c_str(b: &[u8]) -> &[u8] {
    b.iter().position(|&c| c == 0).map_or(b, |n| &b[..n])
}

/// A command of one op on the key its first argument names.
fn one(args: &Args, op: Op) -> Result<DataCmd, CmdError> {
    Ok(DataCmd {
        ops: vec![(args[1].clone(), op)],
        shape: Shape::One,
    })
}

/// HSCAN's and SSCAN's `key cursor [MATCH p] [COUNT n]`: the cursor is
/// checked now, the options only once the key is found (Redis reads them
/// after the key), so a refused option rides along in the op.
pub fn scan_args(args: &Args) -> Result<elsa_shard::ops::ScanArgs, CmdError> {
    elsa_shard::ops::scan_args_of(args).map_err(CmdError)
}

/// The arity check of a whole request: the table's, and for ZRANK and
/// ZREVRANK 7.2's optional WITHSCORE but no other extra argument (7.0's
/// arity is exactly 3, and a wrong count is refused before anything runs,
/// inside MULTI too).
pub fn arity_ok_for(spec: &Spec, args: &Args) -> bool {
    spec.arity_ok(args.len())
        && match spec.name {
            "zrank" | "zrevrank" => {
                args.len() == 3 || (args.len() == 4 && is(&args[3], "withscore"))
            }
            _ => true,
        }
}

/// Parses a whole-number argument.
pub fn int_arg(b: &[u8]) -> Result<i64, CmdError> {
    elsa_shard::ops::parse_i64(b).ok_or_else(CmdError::not_integer)
}

/// True when `arg` equals `word`, ignoring ASCII case.
pub fn is(arg: &[u8], word: &str) -> bool {
    arg.eq_ignore_ascii_case(word.as_bytes())
}

/// A command line split at spaces into arguments (unit tests of the
/// parsers).
#[cfg(test)]
pub(crate) fn test_args(s: &str) -> Vec<bytes::Bytes> {
    s.split(' ')
        .map(|a| bytes::Bytes::copy_from_slice(a.as_bytes()))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_unique_and_lowercase() {
        assert_eq!(BY_NAME.len(), COMMANDS.len());
        for s in COMMANDS {
            assert_eq!(s.name, s.name.to_lowercase());
        }
    }

    #[test]
    fn lookup_ignores_case() {
        assert_eq!(lookup(b"gEt").map(|s| s.name), Some("get"));
        assert!(lookup(b"nosuchcommand").is_none());
        assert!(lookup(&[0xff; 100]).is_none());
    }
}

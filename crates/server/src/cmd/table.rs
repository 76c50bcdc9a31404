//! The table itself: every command's name, arity, flags, key positions
//! and how its arguments become ops or a control command; the container
//! commands' subcommands; lookup by name.

use std::collections::HashMap;
use std::sync::LazyLock;

use super::*;

const R: &[&str] = &["readonly", "fast"];
const W: &[&str] = &["write", "denyoom", "fast"];
const WS: &[&str] = &["write", "denyoom"];
const A: &[&str] = &["fast", "loading", "stale"];
const RO: &[&str] = &["readonly"];
/// A container command: Redis flags its subcommands, not it (scripts are
/// kept from the containers by `script::allowed_in_script`).
const CONTAINER: &[&str] = &[];
const WSM: &[&str] = &["write", "denyoom", "movablekeys"];
const N: &[&str] = &["noscript", "loading", "stale"];
const SUB: &[&str] = &["pubsub", "noscript", "loading", "stale"];
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
    spec!("set", -3, WS, 1, 1, 1, Data(strings::set)),
    spec!("put", 3, W, 1, 1, 1, Data(strings::put)),
    spec!("setnx", 3, W, 1, 1, 1, Data(strings::setnx)),
    spec!("setex", 4, WS, 1, 1, 1, Data(strings::setex)),
    spec!("psetex", 4, WS, 1, 1, 1, Data(strings::psetex)),
    spec!("getset", 3, W, 1, 1, 1, Data(strings::getset)),
    spec!(
        "getdel",
        2,
        &["write", "fast"],
        1,
        1,
        1,
        Data(strings::getdel)
    ),
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
    // HyperLogLog
    spec!("pfadd", -2, W, 1, 1, 1, Data(pf::pfadd)),
    // Redis's `may_replicate` is not one of the flags COMMAND shows; pause
    // knows PFCOUNT by name (`clients/pause.rs`).
    spec!("pfcount", -2, RO, 1, -1, 1, Data(pf::pfcount)),
    spec!("pfmerge", -2, WS, 1, -1, 1, Data(pf::pfmerge)),
    spec!(
        "pfdebug",
        3,
        &["write", "denyoom", "admin"],
        2,
        2,
        1,
        Data(pf::pfdebug)
    ),
    spec!("pfselftest", 1, &["admin"], 0, 0, 0, Ctl(C::PfSelfTest)),
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
        &["readonly", "movablekeys"],
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
    // geo (sorted sets: `elsa_shard::ops::geo`)
    spec!("geoadd", -5, WS, 1, 1, 1, Data(zsets::zcmd)),
    spec!("geodist", -4, RO, 1, 1, 1, Data(zsets::zcmd)),
    spec!("geohash", -2, RO, 1, 1, 1, Data(zsets::zcmd)),
    spec!("geopos", -2, RO, 1, 1, 1, Data(zsets::zcmd)),
    spec!("georadius", -6, WSM, 1, 1, 1, Data(zsets::zcmd)),
    spec!("georadiusbymember", -5, WSM, 1, 1, 1, Data(zsets::zcmd)),
    spec!("georadius_ro", -6, RO, 1, 1, 1, Data(zsets::zcmd)),
    spec!("georadiusbymember_ro", -5, RO, 1, 1, 1, Data(zsets::zcmd)),
    spec!("geosearch", -7, RO, 1, 1, 1, Data(zsets::zcmd)),
    spec!("geosearchstore", -8, WS, 1, 2, 1, Data(zsets::zcmd)),
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
    spec!(
        "zunion",
        -3,
        &["readonly", "movablekeys"],
        0,
        0,
        0,
        Data(zsets::zcmd)
    ),
    spec!(
        "zinter",
        -3,
        &["readonly", "movablekeys"],
        0,
        0,
        0,
        Data(zsets::zcmd)
    ),
    spec!(
        "zdiff",
        -3,
        &["readonly", "movablekeys"],
        0,
        0,
        0,
        Data(zsets::zcmd)
    ),
    spec!("zunionstore", -4, WSM, 1, 1, 1, Data(zsets::zcmd)),
    spec!("zinterstore", -4, WSM, 1, 1, 1, Data(zsets::zcmd)),
    spec!("zdiffstore", -4, WSM, 1, 1, 1, Data(zsets::zcmd)),
    spec!(
        "zintercard",
        -3,
        &["readonly", "movablekeys"],
        0,
        0,
        0,
        Data(zsets::zcmd)
    ),
    spec!(
        "zmpop",
        -4,
        &["write", "movablekeys"],
        0,
        0,
        0,
        Data(zsets::zcmd)
    ),
    spec!("zscan", -3, &["readonly"], 1, 1, 1, Data(zsets::zcmd)),
    spec!(
        "bzpopmin",
        -3,
        &["write", "noscript", "blocking", "fast"],
        1,
        -2,
        1,
        Data(zsets::bzcmd)
    ),
    spec!(
        "bzpopmax",
        -3,
        &["write", "noscript", "blocking", "fast"],
        1,
        -2,
        1,
        Data(zsets::bzcmd)
    ),
    spec!(
        "bzmpop",
        -5,
        &["write", "blocking", "movablekeys"],
        0,
        0,
        0,
        Data(zsets::bzcmd)
    ),
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
    spec!(
        "lmpop",
        -4,
        &["write", "movablekeys"],
        0,
        0,
        0,
        Data(lists::lcmd)
    ),
    spec!(
        "blpop",
        -3,
        &["write", "noscript", "blocking"],
        1,
        -2,
        1,
        Data(lists::blocking)
    ),
    spec!(
        "brpop",
        -3,
        &["write", "noscript", "blocking"],
        1,
        -2,
        1,
        Data(lists::blocking)
    ),
    spec!(
        "blmpop",
        -5,
        &["write", "blocking", "movablekeys"],
        0,
        0,
        0,
        Data(lists::blocking)
    ),
    spec!(
        "blmove",
        6,
        &["write", "denyoom", "noscript", "blocking"],
        1,
        2,
        1,
        Data(lists::blocking)
    ),
    spec!(
        "brpoplpush",
        4,
        &["write", "denyoom", "noscript", "blocking"],
        1,
        2,
        1,
        Data(lists::blocking)
    ),
    // streams
    spec!("xadd", -5, W, 1, 1, 1, Data(streams::xcmd)),
    spec!("xlen", 2, R, 1, 1, 1, Data(streams::xcmd)),
    spec!("xrange", -4, RO, 1, 1, 1, Data(streams::xcmd)),
    spec!("xrevrange", -4, RO, 1, 1, 1, Data(streams::xcmd)),
    spec!("xdel", -3, &["write", "fast"], 1, 1, 1, Data(streams::xcmd)),
    spec!("xtrim", -4, &["write"], 1, 1, 1, Data(streams::xcmd)),
    spec!("xsetid", -3, W, 1, 1, 1, Data(streams::xcmd)),
    spec!("xack", -4, &["write", "fast"], 1, 1, 1, Data(streams::xcmd)),
    spec!("xpending", -3, RO, 1, 1, 1, Data(streams::xcmd)),
    spec!(
        "xclaim",
        -6,
        &["write", "fast"],
        1,
        1,
        1,
        Data(streams::xcmd)
    ),
    spec!(
        "xautoclaim",
        -6,
        &["write", "fast"],
        1,
        1,
        1,
        Data(streams::xcmd)
    ),
    spec!("xgroup", -2, CONTAINER, 0, 0, 0, Data(streams::container)),
    spec!("xinfo", -2, CONTAINER, 0, 0, 0, Data(streams::container)),
    spec!(
        "xreadgroup",
        -7,
        &["write", "blocking", "movablekeys"],
        0,
        0,
        0,
        Data(streams::xcmd)
    ),
    spec!(
        "xread",
        -4,
        &["readonly", "blocking", "movablekeys"],
        0,
        0,
        0,
        Data(streams::xcmd)
    ),
    // keys
    spec!("del", -2, &["write"], 1, -1, 1, Data(keys::del)),
    spec!("delete", -2, &["write"], 1, -1, 1, Data(keys::del)),
    spec!("unlink", -2, &["write", "fast"], 1, -1, 1, Data(keys::del)),
    spec!("exists", -2, R, 1, -1, 1, Data(keys::exists)),
    spec!("touch", -2, R, 1, -1, 1, Data(keys::touch)),
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
    spec!("ping", -1, &["fast"], 0, 0, 0, Ctl(C::Ping)),
    spec!("echo", 2, A, 0, 0, 0, Ctl(C::Echo)),
    spec!(
        "hello",
        -1,
        &[
            "noscript",
            "loading",
            "stale",
            "fast",
            "no_auth",
            "allow_busy"
        ],
        0,
        0,
        0,
        Ctl(C::Hello)
    ),
    spec!(
        "quit",
        -1,
        &[
            "noscript",
            "loading",
            "stale",
            "fast",
            "no_auth",
            "allow_busy"
        ],
        0,
        0,
        0,
        Ctl(C::Quit)
    ),
    spec!(
        "reset",
        1,
        &[
            "noscript",
            "loading",
            "stale",
            "fast",
            "no_auth",
            "allow_busy"
        ],
        0,
        0,
        0,
        Ctl(C::Reset)
    ),
    spec!(
        "auth",
        -2,
        &[
            "noscript",
            "loading",
            "stale",
            "fast",
            "no_auth",
            "allow_busy"
        ],
        0,
        0,
        0,
        Ctl(C::Auth)
    ),
    spec!("acl", -2, CONTAINER, 0, 0, 0, Ctl(C::Acl)),
    spec!("select", 2, A, 0, 0, 0, Ctl(C::Select)),
    spec!("client", -2, CONTAINER, 0, 0, 0, Ctl(C::Client)),
    spec!(
        "command",
        -1,
        &["loading", "stale"],
        0,
        0,
        0,
        Ctl(C::Command)
    ),
    spec!("config", -2, CONTAINER, 0, 0, 0, Ctl(C::Config)),
    spec!("info", -1, &["loading", "stale"], 0, 0, 0, Ctl(C::Info)),
    spec!("time", 1, A, 0, 0, 0, Ctl(C::Time)),
    spec!(
        "save",
        1,
        &["admin", "noscript", "no_async_loading", "no_multi"],
        0,
        0,
        0,
        Ctl(C::Save)
    ),
    spec!(
        "bgsave",
        -1,
        &["admin", "noscript", "no_async_loading"],
        0,
        0,
        0,
        Ctl(C::Bgsave)
    ),
    spec!("lastsave", 1, A, 0, 0, 0, Ctl(C::Lastsave)),
    spec!(
        "role",
        1,
        &["noscript", "loading", "stale", "fast"],
        0,
        0,
        0,
        Ctl(C::Role)
    ),
    spec!("lolwut", -1, R, 0, 0, 0, Ctl(C::Lolwut)),
    // introspection (`crate::intro`)
    spec!("slowlog", -2, CONTAINER, 0, 0, 0, Ctl(C::Slowlog)),
    spec!("latency", -2, CONTAINER, 0, 0, 0, Ctl(C::Latency)),
    spec!("cluster", -2, &[], 0, 0, 0, Ctl(C::Cluster)),
    spec!(
        "monitor",
        1,
        &["admin", "noscript", "loading", "stale"],
        0,
        0,
        0,
        Ctl(C::Monitor)
    ),
    spec!(
        "shutdown",
        -1,
        &[
            "admin",
            "noscript",
            "loading",
            "stale",
            "allow_busy",
            "no_multi"
        ],
        0,
        0,
        0,
        Ctl(C::Shutdown)
    ),
    // regions
    spec!("waitregion", -3, N, 0, 0, 0, Ctl(C::WaitRegion)),
    spec!("wait", 3, &["noscript"], 0, 0, 0, Ctl(C::Wait)),
    spec!("sort", -2, WSM, 1, 1, 1, Ctl(C::Sort)),
    spec!("dump", 2, RO, 1, 1, 1, Ctl(C::Dump)),
    spec!("restore", -4, WS, 1, 1, 1, Ctl(C::Restore)),
    spec!(
        "restore-asking",
        -4,
        &["write", "denyoom", "asking"],
        1,
        1,
        1,
        Ctl(C::Restore)
    ),
    spec!(
        "sort_ro",
        -2,
        &["readonly", "movablekeys"],
        1,
        1,
        1,
        Ctl(C::Sort)
    ),
    spec!("elsa.digest", -1, R, 0, 0, 0, Ctl(C::ElsaDigest)),
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
    // Functions (`crate::script::function_cmd`): FCALL runs as EVAL does.
    spec!("fcall", -3, EV, 0, 0, 0, Ctl(C::Eval)),
    spec!("fcall_ro", -3, EVRO, 0, 0, 0, Ctl(C::Eval)),
    spec!("function", -2, &[], 0, 0, 0, Ctl(C::Function)),
    // transactions
    spec!("begin", -1, A, 0, 0, 0, Ctl(C::Begin)),
    spec!("ack", -1, A, 0, 0, 0, Ctl(C::Ack)),
    spec!("commit", 1, A, 0, 0, 0, Ctl(C::Commit)),
    spec!("abort", 1, A, 0, 0, 0, Ctl(C::Abort)),
    spec!("rollback", 1, A, 0, 0, 0, Ctl(C::Abort)),
    spec!("lastcommit", 1, A, 0, 0, 0, Ctl(C::LastCommit)),
    spec!(
        "multi",
        1,
        &["noscript", "loading", "stale", "fast", "allow_busy"],
        0,
        0,
        0,
        Ctl(C::Multi)
    ),
    spec!(
        "exec",
        1,
        &["noscript", "loading", "stale", "skip_slowlog"],
        0,
        0,
        0,
        Ctl(C::Exec)
    ),
    spec!(
        "discard",
        1,
        &["noscript", "loading", "stale", "fast", "allow_busy"],
        0,
        0,
        0,
        Ctl(C::Discard)
    ),
    spec!(
        "watch",
        -2,
        &["noscript", "loading", "stale", "fast", "allow_busy"],
        1,
        -1,
        1,
        Ctl(C::Watch)
    ),
    spec!(
        "unwatch",
        1,
        &["noscript", "loading", "stale", "fast", "allow_busy"],
        0,
        0,
        0,
        Ctl(C::Unwatch)
    ),
];

// foldhash, not SipHash: the lookup runs once per command on the hot path
// and the keys are our own names, not attacker-chosen.
pub(super) static BY_NAME: LazyLock<
    HashMap<&'static [u8], &'static Spec, foldhash::fast::FixedState>,
> = LazyLock::new(|| COMMANDS.iter().map(|s| (s.name.as_bytes(), s)).collect());

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

/// Subcommands of the container commands, with their Redis 7.0 arities
/// (the container's name counted, as in `Spec::arity`). Redis looks them up
/// before it runs anything, so an unknown one or a wrong count is refused
/// at once — inside MULTI too, where it fails the transaction. The last
/// entries of CLIENT are Redis 7.2's, which Elsa answers as well.
pub(super) const SUBCOMMANDS: &[(&str, &[(&str, i32)])] = &[
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
        "function",
        &[
            ("delete", 3),
            ("dump", 2),
            ("flush", -2),
            ("help", 2),
            ("kill", 2),
            ("list", -2),
            ("load", -3),
            ("restore", -3),
            ("stats", 2),
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
            ("graph", 3),
            ("help", 2),
            ("histogram", -2),
            ("history", 3),
            ("latest", 2),
            ("reset", -2),
        ],
    ),
    (
        "xgroup",
        &[
            ("create", -5),
            ("createconsumer", 5),
            ("delconsumer", 5),
            ("destroy", 4),
            ("help", 2),
            ("setid", -5),
        ],
    ),
    (
        "xinfo",
        &[("consumers", 4), ("groups", 3), ("help", 2), ("stream", -3)],
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

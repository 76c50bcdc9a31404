//! The canned replies the fuzz runner answers a script's `redis.call`s
//! with, chosen from the command's arguments, and `ELSA.REPLY <bytes>`'s
//! decoder: any reply shape a node could write.

use bytes::{Bytes, BytesMut};

use super::super::convert::{self, Reply};
use crate::resp::ReplyWriter;

/// Replies this deep at most (Elsa's own replies nest a few levels).
const MAX_REPLY_DEPTH: usize = 1100;
/// Elements in one canned reply at most.
const MAX_REPLY_ELEMENTS: usize = 100_000;

/// A command's reply as the script receives it: the canned reply, written
/// in the script's protocol and read back, as `run.rs`'s `script_call`
/// does with a real command's.
pub(super) fn command_reply(args: &[Bytes], ro: bool, resp3: bool) -> Reply {
    let reply = canned(args, ro);
    let mut out = BytesMut::new();
    convert::write(
        &mut ReplyWriter {
            out: &mut out,
            resp3,
        },
        &reply,
    );
    match convert::parse(&out) {
        Some(r) => r,
        None => panic!("a reply written for a script does not read back: {reply:?}"),
    }
}

/// `redis.acl_check_cmd`: allowed, denied, or an unknown command.
pub(super) fn acl_reply(args: &[Bytes]) -> Reply {
    let name = args[0].to_ascii_lowercase();
    match name.as_slice() {
        b"flushall" | b"flushdb" | b"config" | b"debug" | b"shutdown" => Reply::Int(0),
        n if kind(n).is_some() => Reply::Int(1),
        _ => Reply::Error(b"ERR Invalid command passed to redis.acl_check_cmd()".to_vec()),
    }
}

/// The canned commands' kinds.
#[derive(Clone, Copy, PartialEq)]
enum Kind {
    /// A bulk string or nil (GET).
    Get,
    /// +OK, or nil for SET … NX on an existing key.
    Set,
    /// A counter (INCR): the increment read from the last argument.
    Incr,
    /// A count (DEL, EXISTS, SADD…).
    Count,
    /// TTL / PTTL.
    Ttl,
    /// One bulk-or-nil per key (MGET).
    Mget,
    /// An array of bulk strings (LRANGE, KEYS…).
    List,
    /// A set (SMEMBERS): `~` in RESP3.
    Set3,
    /// A map (HGETALL): `%` in RESP3, a flat array in RESP2.
    Map,
    /// A double (ZSCORE, ZINCRBY): `,` in RESP3, a bulk in RESP2.
    Double,
    /// A cursor and a page (SCAN).
    Scan,
    Ping,
    Echo,
    Type,
    Time,
    /// `ELSA.REPLY <bytes>`: any reply, decoded from the argument.
    Any,
    /// `ELSA.NESTED <depth>`: arrays inside arrays.
    Nested,
    /// `ELSA.WIDE <n>`: an array of n elements.
    Wide,
    /// `ELSA.BOOL`, `ELSA.NULL`, `ELSA.NILARRAY`, `ELSA.BIGNUM`,
    /// `ELSA.ERROR <text>`: one reply of that type.
    Bool,
    Null,
    NilArray,
    BigNum,
    Error,
}

/// The kind of a (lowercase) command name, and whether it writes.
fn kind(name: &[u8]) -> Option<(Kind, bool)> {
    use Kind::*;
    Some(match name {
        b"get" | b"hget" | b"lindex" | b"srandmember" | b"getrange" | b"substr" => (Get, false),
        b"getdel" | b"getex" | b"getset" | b"lpop" | b"rpop" | b"spop" | b"lmove" => (Get, true),
        b"set" | b"mset" | b"hmset" | b"setex" | b"psetex" | b"rename" | b"lset" | b"ltrim" => {
            (Set, true)
        }
        b"incr" | b"decr" | b"incrby" | b"decrby" | b"hincrby" => (Incr, true),
        b"del" | b"unlink" | b"expire" | b"pexpire" | b"expireat" | b"persist" | b"sadd"
        | b"srem" | b"hset" | b"hdel" | b"hsetnx" | b"lpush" | b"rpush" | b"zadd" | b"zrem"
        | b"append" | b"setnx" | b"setrange" | b"pfadd" | b"publish" | b"msetnx"
        | b"zremrangebyscore" | b"zremrangebyrank" | b"pexpireat" | b"lrem" | b"linsert"
        | b"setbit" => (Count, true),
        b"exists" | b"touch" | b"llen" | b"scard" | b"hlen" | b"zcard" | b"strlen"
        | b"sismember" | b"hexists" | b"bitcount" | b"dbsize" | b"zrank" | b"zcount"
        | b"getbit" | b"pfcount" => (Count, false),
        b"ttl" | b"pttl" => (Ttl, false),
        b"mget" | b"hmget" => (Mget, false),
        b"keys" | b"lrange" | b"hkeys" | b"hvals" | b"zrange" | b"zrangebyscore" | b"sort"
        | b"zrevrange" | b"xrange" => (List, false),
        b"smembers" | b"sinter" | b"sunion" | b"sdiff" => (Set3, false),
        b"hgetall" | b"config" => (Map, false),
        b"zscore" => (Double, false),
        b"zincrby" | b"incrbyfloat" | b"hincrbyfloat" => (Double, true),
        b"scan" | b"sscan" | b"hscan" | b"zscan" => (Scan, false),
        b"ping" => (Ping, false),
        b"echo" => (Echo, false),
        b"type" => (Type, false),
        b"time" | b"lastsave" => (Time, false),
        b"elsa.reply" => (Any, false),
        b"elsa.nested" => (Nested, false),
        b"elsa.wide" => (Wide, false),
        b"elsa.bool" => (Bool, false),
        b"elsa.null" => (Null, false),
        b"elsa.nilarray" => (NilArray, false),
        b"elsa.bignum" => (BigNum, false),
        b"elsa.error" => (Error, false),
        _ => return None,
    })
}

/// FNV-1a: a choice that depends on the arguments only.
fn hash(b: &[u8]) -> u64 {
    b.iter().fold(0xcbf2_9ce4_8422_2325, |h, &c| {
        (h ^ c as u64).wrapping_mul(0x0100_0000_01b3)
    })
}

fn int_of(b: &[u8]) -> Option<i64> {
    std::str::from_utf8(b).ok()?.trim().parse().ok()
}

fn err(m: &str) -> Reply {
    Reply::Error(m.as_bytes().to_vec())
}

/// The reply a real node would plausibly give: chosen from the command's
/// name and arguments (so the same call gets the same answer).
fn canned(args: &[Bytes], ro: bool) -> Reply {
    use Kind::*;
    let name = args[0].to_ascii_lowercase();
    let Some((kind, writes)) = kind(&name) else {
        return err("ERR Unknown Redis command called from script");
    };
    if ro && writes {
        return err("ERR Write commands are not allowed from read-only scripts.");
    }
    let arg = |i: usize| args.get(i).map(|b| &b[..]).unwrap_or(b"");
    let h = hash(arg(1));
    let bulk = |b: &[u8]| Reply::Bulk(b.to_vec());
    let get = |key: &[u8]| match hash(key) % 5 {
        0 => Reply::Nil,
        1 => bulk(b"42"),
        2 => bulk(b""),
        3 => bulk(b"\x00\xff\r\n-ERR not an error\r\n"),
        _ => bulk(key),
    };
    let needs = |n: usize| args.len() < n;
    if needs(match kind {
        Ping | Time | Null | NilArray | Wide | Nested => 1,
        Get | Set | Incr | Count | Ttl | Mget | List | Set3 | Map | Double | Scan | Echo | Type
        | Any | Bool | BigNum | Error => 2,
    }) && !matches!(name.as_slice(), b"dbsize" | b"lastsave")
    {
        return err("ERR Wrong number of args calling Redis command from script");
    }
    match kind {
        Get => get(arg(1)),
        Set => {
            let has = |w: &str| {
                args.iter()
                    .skip(3)
                    .any(|a| a.eq_ignore_ascii_case(w.as_bytes()))
            };
            if has("GET") {
                get(arg(1))
            } else if (has("NX") || has("XX")) && h.is_multiple_of(2) {
                Reply::Nil
            } else {
                Reply::Status(b"OK".to_vec())
            }
        }
        Incr => match args.len() {
            2 => Reply::Int((h % 100) as i64 + if name == b"decr" { -1 } else { 1 }),
            _ => match int_of(&args[args.len() - 1]) {
                Some(n) => Reply::Int(n),
                None => err("ERR value is not an integer or out of range"),
            },
        },
        Count => Reply::Int(match h % 4 {
            0 => 0,
            1 => 1,
            2 => args.len() as i64 - 2,
            _ => i64::MAX,
        }),
        Ttl => Reply::Int([-2, -1, 0, 1000][(h % 4) as usize]),
        Mget => Reply::Array(args[1..].iter().map(|k| get(k)).collect()),
        List => Reply::Array(args[1..].iter().map(|a| bulk(a)).collect()),
        Set3 => {
            let mut items: Vec<Reply> = args[1..].iter().map(|a| bulk(a)).collect();
            items.dedup();
            Reply::Set(items)
        }
        Map => Reply::Map(args[1..].iter().map(|k| (bulk(k), get(k))).collect()),
        Double => {
            let specials = [
                0.0,
                -0.0,
                1.5,
                f64::INFINITY,
                f64::NEG_INFINITY,
                f64::NAN,
                1e300,
                5e-324,
            ];
            let parsed = std::str::from_utf8(arg(args.len() - 1))
                .ok()
                .and_then(|s| s.trim().parse::<f64>().ok());
            match parsed {
                Some(d) if !h.is_multiple_of(3) => Reply::Double(d),
                _ => Reply::Double(specials[(h % 8) as usize]),
            }
        }
        Scan => Reply::Array(vec![
            bulk(if h.is_multiple_of(2) { b"0" } else { b"17" }),
            Reply::Array(args[2..].iter().map(|a| bulk(a)).collect()),
        ]),
        Ping => match args.len() {
            1 => Reply::Status(b"PONG".to_vec()),
            _ => bulk(arg(1)),
        },
        Echo => bulk(arg(1)),
        Type => Reply::Status(
            [&b"none"[..], b"string", b"list", b"set", b"zset", b"hash"][(h % 6) as usize].to_vec(),
        ),
        Time => Reply::Array(vec![bulk(b"1700000000"), bulk(b"123456")]),
        Any => {
            let mut input = arg(1);
            let mut budget = MAX_REPLY_ELEMENTS;
            decode_reply(&mut input, 0, &mut budget)
        }
        Nested => {
            let depth = int_of(arg(1))
                .unwrap_or(10)
                .clamp(0, MAX_REPLY_DEPTH as i64);
            let leaf = if args.len() > 2 {
                bulk(arg(2))
            } else {
                Reply::Int(1)
            };
            (0..depth).fold(leaf, |r, _| Reply::Array(vec![r]))
        }
        Wide => {
            let n = int_of(arg(1))
                .unwrap_or(1000)
                .clamp(0, MAX_REPLY_ELEMENTS as i64) as usize;
            Reply::Array(
                (0..n)
                    .map(|i| match i % 3 {
                        0 => Reply::Int(i as i64),
                        1 => bulk(arg(2)),
                        _ => Reply::Nil,
                    })
                    .collect(),
            )
        }
        Bool => Reply::Bool(arg(1) != b"0" && !arg(1).is_empty()),
        Null => Reply::Null,
        NilArray => Reply::NilArray,
        BigNum => Reply::BigNum(arg(1).to_vec()),
        Error => Reply::Error(arg(1).to_vec()),
    }
}

/// Any reply, decoded from bytes: one tag byte per element, then what the
/// type needs; bounded in depth and elements (a command's reply the node
/// could write).
fn decode_reply(input: &mut &[u8], depth: usize, budget: &mut usize) -> Reply {
    fn cut(input: &mut &[u8], n: usize) -> Vec<u8> {
        let n = n.min(input.len());
        let (a, b) = input.split_at(n);
        *input = b;
        a.to_vec()
    }
    let mut take = |n: usize| cut(input, n);
    let tag = take(1).first().copied().unwrap_or(0);
    *budget = budget.saturating_sub(1);
    let short = |b: Vec<u8>| b.first().copied().unwrap_or(0) as usize;
    match tag % 14 {
        0 => Reply::Nil,
        1 => Reply::NilArray,
        2 => Reply::Null,
        3 => {
            let b = take(8);
            let mut n = [0u8; 8];
            n[..b.len()].copy_from_slice(&b);
            Reply::Int(i64::from_le_bytes(n))
        }
        4 => {
            let n = short(take(1));
            Reply::Bulk(take(n))
        }
        5 => {
            let n = short(take(1));
            Reply::Status(take(n))
        }
        6 => {
            let n = short(take(1));
            Reply::Error(take(n))
        }
        7 => {
            let b = take(8);
            let mut n = [0u8; 8];
            n[..b.len()].copy_from_slice(&b);
            Reply::Double(f64::from_le_bytes(n))
        }
        8 => Reply::Bool(tag & 0x80 != 0),
        9 => {
            let n = short(take(1));
            Reply::BigNum(take(n))
        }
        t => {
            // Array (10, 11), set (12), map (13) of up to 15 elements.
            let n = if depth >= MAX_REPLY_DEPTH || *budget == 0 {
                0
            } else {
                (tag >> 4) as usize
            };
            let mut items = Vec::new();
            for _ in 0..n {
                if *budget == 0 {
                    break;
                }
                items.push(decode_reply(input, depth + 1, budget));
            }
            match t {
                12 => Reply::Set(items),
                13 => {
                    let mut it = items.into_iter();
                    let mut pairs = Vec::new();
                    while let (Some(k), Some(v)) = (it.next(), it.next()) {
                        pairs.push((k, v));
                    }
                    Reply::Map(pairs)
                }
                _ => Reply::Array(items),
            }
        }
    }
}

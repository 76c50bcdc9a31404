//! The generator: seeded random single-client command sequences over a tiny
//! key and value space, covering every command Elsa shares with Redis 7 —
//! valid, invalid and edge-case forms alike.
//!
//! What is deliberately NOT generated, and why:
//! - `SWAPDB`: Elsa refuses it (databases are key namespaces replicated
//!   across regions; `docs/commands.md`). SELECT, MOVE and `COPY … DB` over
//!   databases 0–2 are generated, with indexes out of range.
//! - Elsa's own commands (PUT, DELETE, BEGIN, COMMIT, ABORT, ROLLBACK,
//!   LASTCOMMIT, WAITREGION, ELSA.*): Redis has no counterpart to compare
//!   with. Redis commands Elsa lacks (SORT, consumer groups, …) are not
//!   generated either, except a few truly unknown names for the
//!   unknown-command error. Hashes, sets, sorted sets and lists are
//!   (`gen_hashes.rs`, `gen_sets.rs`, `gen_zsets.rs`, `gen_lists.rs`; lists
//!   only while [`LISTS`] is on).
//! - The blocking commands (BLPOP, BRPOP, BLMOVE, BRPOPLPUSH, BLMPOP,
//!   BZPOPMIN, BZPOPMAX, BZMPOP): a blocking pop on an empty key would
//!   stall the single client (see `gen_lists.rs`, `gen_zsets.rs`).
//! - `COPY … DB 1`..`DB 15` and `MEMORY DOCTOR|STATS|MALLOC-STATS|PURGE`
//!   (see `gen_keys.rs`); SETRANGE, SETBIT and BITFIELD that would
//!   really write at the 512 MB limit (both servers would allocate it;
//!   refusals past the limit are generated, see `gen_strings.rs`).
//! - BGSAVE: whether it answers "started" or "already in progress" races
//!   with the previous background save, in both servers.
//! - CONFIG SET: it would change the servers' configuration under the rest
//!   of the run.
//! - SCAN with a non-zero cursor or a COUNT below the key space: cursors
//!   are implementation-defined (Redis accepts any number as a cursor).
//! - FLUSHALL / FLUSHDB while keys are WATCHed: a known divergence. Redis
//!   marks a watched key changed if it existed at the flush; Elsa's flush
//!   drops every record, so it cannot tell whether a key absent at WATCH
//!   was written and flushed since (Redis fails that EXEC, Elsa runs it)
//!   and counts a key deleted before the WATCH as changed (Redis runs that
//!   EXEC, Elsa fails it). Repro: `WATCH k`, another client `SET k 1` and
//!   `FLUSHALL`, then `MULTI`, `GET k`, `EXEC`.
//!
//! Time. Keys whose TTL is compared live at least 100 s. Expiry itself is
//! exercised by "expiry steps": a command giving a key a TTL of at most
//! 150 ms (or an already-past time), then a sleep long enough for both
//! servers to expire and collect it (Redis's active expiry runs every
//! 100 ms; until then its DBSIZE still counts the key). Nothing reads the
//! key between the command and the sleep, and expiry steps never sit
//! inside MULTI (at EXEC they would race the clock) — [`well_formed`]
//! checks both the generator and the shrinker against this.

use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};

use super::norm::Norm;
use super::resp::quote;

// String and bit commands (GETEX, GETRANGE, SETRANGE, INCRBYFLOAT, the
// bit commands) and key commands (RENAME, COPY, OBJECT…), one file each.
#[path = "gen_bulk.rs"]
mod bulk;
#[path = "gen_geo.rs"]
mod geo;
#[path = "gen_hashes.rs"]
mod hashes;
#[path = "gen_hll.rs"]
mod hll;

#[allow(unused_imports)] // the restart checker includes this file and runs none of them
pub use bulk::bulk_sequence;
#[path = "gen_keys.rs"]
mod keys;
#[path = "gen_lists.rs"]
mod lists;
#[path = "gen_sets.rs"]
mod sets;
#[path = "gen_streams.rs"]
mod streams;
#[path = "gen_strings.rs"]
mod strings;
#[path = "gen_zsets.rs"]
mod zsets;

/// Whether list commands are generated (`gen_lists.rs`): single commands
/// as often as sorted-set ones, "list steps" among the probes, and `list`
/// as a SCAN TYPE. Off, the sequences are exactly those generated before
/// lists existed (same seeds, same commands) — flip it if Elsa's lists are
/// not in the build under test.
pub const LISTS: bool = true;

/// Whether stream commands are generated (`gen_streams.rs`), as single
/// commands and "stream steps", and `stream` as a SCAN TYPE.
pub const STREAMS: bool = true;

/// One argument: literal bytes, or a time resolved when the command is sent
/// (so a replayed or shrunk sequence still means "in 200 s", not a moment
/// that has passed).
#[derive(Clone, Debug)]
pub enum Arg {
    Lit(Vec<u8>),
    /// Unix seconds now plus this.
    NowSecPlus(i64),
    /// Unix milliseconds now plus this.
    NowMsPlus(i64),
}

/// One command and how its reply is compared.
#[derive(Clone, Debug)]
pub struct Cmd {
    pub args: Vec<Arg>,
    pub norm: Norm,
}

impl Cmd {
    fn new(args: Vec<Arg>) -> Cmd {
        Cmd {
            args,
            norm: Norm::Exact,
        }
    }

    fn with(mut self, norm: Norm) -> Cmd {
        self.norm = norm;
        self
    }

    /// The arguments as bytes, times resolved against `now_ms`.
    pub fn resolve(&self, now_ms: i64) -> Vec<Vec<u8>> {
        self.args
            .iter()
            .map(|a| match a {
                Arg::Lit(b) => b.clone(),
                Arg::NowSecPlus(d) => (now_ms / 1000 + d).to_string().into_bytes(),
                Arg::NowMsPlus(d) => (now_ms + d).to_string().into_bytes(),
            })
            .collect()
    }

    /// The command name, upper-cased.
    pub fn name(&self) -> String {
        match self.args.first() {
            Some(Arg::Lit(b)) => String::from_utf8_lossy(b).to_uppercase(),
            _ => String::new(),
        }
    }

    /// True when this is `name` with exactly `argc` arguments in total.
    pub fn is(&self, name: &str, argc: usize) -> bool {
        self.args.len() == argc && self.name() == name
    }

    /// The command as a redis-cli line; times show as `<now+Ns>`/`<now+Nms>`.
    pub fn line(&self) -> String {
        self.args
            .iter()
            .map(|a| match a {
                // The 1 kB and 20 kB values would drown the report.
                Arg::Lit(b) if b.len() > 64 && b.iter().all(|&c| c == b[0]) => {
                    format!("<{} × {}>", b.len(), quote(&b[..1]))
                }
                Arg::Lit(b) => quote(b),
                Arg::NowSecPlus(d) => format!("<unix_s{d:+}>"),
                Arg::NowMsPlus(d) => format!("<unix_ms{d:+}>"),
            })
            .collect::<Vec<_>>()
            .join(" ")
    }
}

/// A unit the shrinker removes whole: one or a few commands, then an
/// optional sleep.
#[derive(Clone, Debug)]
pub struct Step {
    pub cmds: Vec<Cmd>,
    pub sleep_ms: u64,
}

impl Step {
    fn one(cmd: Cmd) -> Step {
        Step {
            cmds: vec![cmd],
            sleep_ms: 0,
        }
    }
}

/// A generated sequence.
#[derive(Clone, Debug)]
pub struct Sequence {
    pub seed: u64,
    pub steps: Vec<Step>,
    /// Requests per pipeline chunk when the sequence is pipelined.
    pub chunk: usize,
}

impl Sequence {
    /// Number of commands.
    pub fn len(&self) -> usize {
        self.steps.iter().map(|s| s.cmds.len()).sum()
    }
}

/// Tracks whether a connection is between MULTI and EXEC, from the commands
/// alone (only well-formed MULTI/EXEC/DISCARD/RESET/QUIT change it).
#[derive(Default)]
struct MultiState(bool);

impl MultiState {
    fn after(&mut self, c: &Cmd) {
        if c.is("MULTI", 1) {
            self.0 = true;
        } else if c.is("EXEC", 1) || c.is("DISCARD", 1) || c.is("RESET", 1) || c.name() == "QUIT" {
            self.0 = false;
        }
    }
}

/// Tracks whether a connection may have WATCHed keys, from the commands
/// alone: a WATCH outside MULTI starts it; EXEC or DISCARD inside MULTI,
/// UNWATCH, RESET and QUIT end it (EXEC and DISCARD without MULTI are
/// errors that keep the watches).
#[derive(Default)]
struct WatchState(bool);

impl WatchState {
    fn after(&mut self, c: &Cmd, in_multi: bool) {
        let name = c.name();
        if name == "WATCH" && !in_multi && c.args.len() > 1 {
            self.0 = true;
        } else if (in_multi && (c.is("EXEC", 1) || c.is("DISCARD", 1)))
            || c.is("UNWATCH", 1)
            || c.is("RESET", 1)
            || name == "QUIT"
        {
            self.0 = false;
        }
    }
}

fn is_flush(c: &Cmd) -> bool {
    matches!(c.name().as_str(), "FLUSHALL" | "FLUSHDB")
}

/// True when no expiry step (a step with a sleep) sits inside MULTI, and
/// no FLUSHALL/FLUSHDB comes while keys may be watched (see the module
/// doc for why).
pub fn well_formed(steps: &[Step]) -> bool {
    let mut multi = MultiState::default();
    let mut watch = WatchState::default();
    for s in steps {
        if s.sleep_ms > 0 && multi.0 {
            return false;
        }
        for c in &s.cmds {
            if watch.0 && is_flush(c) {
                return false;
            }
            watch.after(c, multi.0);
            multi.after(c);
        }
    }
    true
}

/// Keys: four plain names, the empty key and a binary one. With two shards
/// they spread over both, so multi-key commands cross shards.
const KEYS: &[&[u8]] = &[b"k1", b"k2", b"k3", b"k4", b"", b"b\x00\r\n\xff"];

/// Values: integers (small, negative, at and past the i64 limits), things
/// that look like integers but are not, floats, empty, binary, long.
const VALUES: &[&[u8]] = &[
    b"0",
    b"1",
    b"-1",
    b"7",
    b"42",
    b"-42",
    b"100",
    b"9223372036854775807",
    b"-9223372036854775808",
    b"9223372036854775806",
    b"-9223372036854775807",
    b"9223372036854775808",
    b"-9223372036854775809",
    b"3.14",
    b"-0",
    b"007",
    b"+5",
    b" 1",
    b"1 ",
    b"1e3",
    b"0x10",
    b"",
    b"abc",
    b"hello world",
    b"\x00\x01\xff\r\n",
    b"\xc3\xa9t\xc3\xa9",
];

/// INCRBY/DECRBY deltas.
const DELTAS: &[&[u8]] = &[
    b"1",
    b"-1",
    b"0",
    b"5",
    b"-5",
    b"100",
    b"9223372036854775807",
    b"-9223372036854775808",
    b"9223372036854775806",
    b"-9223372036854775807",
    b"99999999999999999999",
    b"1.5",
    b"abc",
    b"",
    b"+1",
    b"01",
    b"-0",
    b" 1",
];

/// Relative seconds that give a key a TTL safe to compare (at least 100 s).
const SECS_OK: &[&[u8]] = &[b"100", b"200", b"1000", b"86400", b"100000000"];
/// Relative milliseconds, likewise.
const MS_OK: &[&[u8]] = &[b"100000", b"150400", b"3600000"];
/// Expiry arguments SET/SETEX/PSETEX must refuse (or that overflow).
const EXPIRY_BAD: &[&[u8]] = &[
    b"0",
    b"-1",
    b"-100",
    b"abc",
    b"1.5",
    b"",
    b"9223372036854775807",
    b"9223372036854775",
    b"9223372036854776",
    b" 100",
    b"+100",
    b"0100",
];
/// EXPIRE/PEXPIRE arguments: zero and negative delete the key at once (no
/// clock race), huge ones overflow.
const EXPIRE_ODD: &[&[u8]] = &[
    b"0",
    b"-1",
    b"-100",
    b"abc",
    b"1.5",
    b"",
    b"9223372036854775807",
    b"-9223372036854775808",
    b"9223372036854775",
    b"-9223372036854775",
    b"9223372036854776",
];
/// Absolute times in the past (or invalid) for EXPIREAT/PEXPIREAT.
const AT_ODD: &[&[u8]] = &[b"1", b"0", b"-1", b"abc", b"9223372036854775807"];
/// Glob patterns for KEYS and SCAN MATCH, including malformed ones.
const PATTERNS: &[&[u8]] = &[
    b"*", b"k*", b"k?", b"k[1-2]", b"k[^1]", b"k[!1]", b"*2", b"[k]*", b"\\k*", b"?", b"", b"b*",
    b"k[", b"*[", b"k[2-1]", b"*\x00*", b"K*",
];
/// Names no Redis knows.
const UNKNOWN: &[&str] = &["FOOBAR", "GETX", "SETT", "HGETALLX"];
/// Commands with a wrong number of arguments (`K` = a key, `V` = a value).
const WRONG_ARITY: &[&[&str]] = &[
    &["GET"],
    &["GET", "K", "K"],
    &["SET", "K"],
    &["SETNX", "K"],
    &["SETEX", "K", "100"],
    &["PSETEX", "K"],
    &["GETSET", "K"],
    &["GETDEL"],
    &["GETDEL", "K", "K"],
    &["MGET"],
    &["MSET"],
    &["MSET", "K"],
    &["MSETNX", "K"],
    &["DEL"],
    &["UNLINK"],
    &["EXISTS"],
    &["INCR"],
    &["INCR", "K", "1"],
    &["DECR", "K", "K"],
    &["INCRBY", "K"],
    &["DECRBY", "K", "1", "2"],
    &["APPEND", "K"],
    &["STRLEN"],
    &["TYPE", "K", "K"],
    &["TTL"],
    &["PTTL", "K", "K"],
    &["EXPIRE", "K"],
    &["PEXPIREAT"],
    &["PERSIST", "K", "K"],
    &["ECHO"],
    &["ECHO", "V", "V"],
    &["PING", "V", "V"],
    &["DBSIZE", "V"],
    &["TIME", "V"],
    &["SELECT"],
    &["MOVE", "K"],
    &["SWAPDB", "V"],
    &["MULTI", "V"],
    &["EXEC", "V"],
    &["DISCARD", "V"],
    &["WATCH"],
    &["UNWATCH", "V"],
    &["KEYS"],
    &["KEYS", "V", "V"],
    &["SCAN"],
    &["LASTSAVE", "V"],
    &["SAVE", "V"],
    &["RESET", "V"],
    &["AUTH"],
    &["CLIENT"],
    &["CONFIG"],
    &["GETEX"],
    &["GETRANGE", "K", "0"],
    &["SUBSTR", "K"],
    &["SETRANGE", "K", "0"],
    &["INCRBYFLOAT", "K"],
    &["INCRBYFLOAT", "K", "1", "2"],
    &["SETBIT", "K", "0"],
    &["GETBIT", "K"],
    &["GETBIT", "K", "0", "0"],
    &["BITCOUNT"],
    &["BITPOS", "K"],
    &["TOUCH"],
    &["EXPIRETIME"],
    &["PEXPIRETIME", "K", "K"],
    &["RENAME", "K"],
    &["RENAMENX", "K", "K", "K"],
    &["COPY", "K"],
    &["OBJECT"],
    &["MEMORY"],
    &["MEMORY", "USAGE"],
    &["RANDOMKEY", "V"],
    &["HSET", "K", "V"],
    &["HSETNX", "K", "V"],
    &["HGET", "K"],
    &["HMGET", "K"],
    &["HGETALL"],
    &["HDEL", "K"],
    &["HLEN", "K", "K"],
    &["HEXISTS", "K"],
    &["HKEYS"],
    &["HSTRLEN", "K"],
    &["HINCRBY", "K", "V"],
    &["HINCRBYFLOAT", "K"],
    &["HRANDFIELD"],
    &["HSCAN", "K"],
    &["SADD", "K"],
    &["SREM", "K"],
    &["SMEMBERS"],
    &["SISMEMBER", "K"],
    &["SMISMEMBER", "K"],
    &["SCARD", "K", "K"],
    &["SPOP"],
    &["SRANDMEMBER"],
    &["SSCAN", "K"],
    &["SMOVE", "K", "K"],
    &["SINTER"],
    &["SINTERCARD", "1"],
    &["SUNIONSTORE", "K"],
    &["SDIFF"],
];

/// The generator's state for one sequence.
struct Gen {
    rng: StdRng,
    multi: MultiState,
    watch: WatchState,
    /// Expiry steps still allowed: each costs a sleep of 200–300 ms, so
    /// only about a quarter of the sequences get one (the CI budget).
    expiry_budget: usize,
}

fn lit(b: &[u8]) -> Arg {
    Arg::Lit(b.to_vec())
}

impl Gen {
    /// A generator for `seed`, no expiry step allowed yet.
    fn seeded(seed: u64) -> Gen {
        Gen {
            rng: StdRng::seed_from_u64(seed),
            multi: MultiState::default(),
            watch: WatchState::default(),
            expiry_budget: 0,
        }
    }

    fn pick<'a>(&mut self, from: &[&'a [u8]]) -> &'a [u8] {
        from.choose(&mut self.rng).expect("non-empty table")
    }

    /// A command or option name, now and then in odd case (names are
    /// case-insensitive in Redis).
    fn name(&mut self, n: &str) -> Arg {
        let s = match self.rng.gen_range(0..20) {
            0 => n.to_lowercase(),
            1 => n
                .chars()
                .enumerate()
                .map(|(i, c)| {
                    if i % 2 == 0 {
                        c.to_ascii_lowercase()
                    } else {
                        c
                    }
                })
                .collect(),
            _ => n.to_string(),
        };
        Arg::Lit(s.into_bytes())
    }

    fn key(&mut self) -> Arg {
        // The plain keys most of the time, so values meet each other.
        let i = if self.rng.gen_bool(0.8) {
            self.rng.gen_range(0..4)
        } else {
            self.rng.gen_range(4..KEYS.len())
        };
        lit(KEYS[i])
    }

    fn keys(&mut self, max: usize) -> Vec<Arg> {
        let n = self.rng.gen_range(1..=max);
        (0..n).map(|_| self.key()).collect()
    }

    fn value(&mut self) -> Arg {
        match self.rng.gen_range(0..40) {
            0 => Arg::Lit(vec![b'x'; 1000]),
            1 => Arg::Lit(vec![b'y'; 20_000]),
            _ => lit(self.pick(VALUES)),
        }
    }

    fn cmd(&mut self, name: &str, rest: Vec<Arg>) -> Cmd {
        let mut args = vec![self.name(name)];
        args.extend(rest);
        Cmd::new(args)
    }

    /// One step at the current point of the sequence.
    fn step(&mut self) -> Step {
        let step = if self.multi.0 {
            self.step_in_multi()
        } else {
            self.step_outside()
        };
        for c in &step.cmds {
            self.watch.after(c, self.multi.0);
            self.multi.after(c);
        }
        step
    }

    fn step_in_multi(&mut self) -> Step {
        let p = self.rng.gen_range(0..100);
        let cmd = match p {
            0..=13 => self.cmd("EXEC", vec![]),
            14..=16 => self.cmd("DISCARD", vec![]),
            17..=18 => self.cmd("MULTI", vec![]),
            19..=20 => {
                let k = self.keys(2);
                self.cmd("WATCH", k)
            }
            21..=23 => return self.ttl_probe(),
            _ => self.command(),
        };
        Step::one(cmd)
    }

    fn step_outside(&mut self) -> Step {
        let p = self.rng.gen_range(0..100);
        let cmd = match p {
            0..=7 => self.cmd("MULTI", vec![]),
            8..=10 => {
                let k = self.keys(3);
                self.cmd("WATCH", k)
            }
            11 => self.cmd("UNWATCH", vec![]),
            12 => self.cmd("EXEC", vec![]),
            13 => self.cmd("DISCARD", vec![]),
            14..=17 if self.expiry_budget > 0 => {
                self.expiry_budget -= 1;
                return self.expiry_step();
            }
            18..=19 => return self.ttl_probe(),
            20 => return self.object_probe(),
            21..=23 => return self.zset_step(),
            24..=26 if LISTS => return self.list_step(),
            27..=28 if STREAMS => return self.stream_step(),
            29..=30 if STREAMS => return self.group_step(),
            _ => self.command(),
        };
        Step::one(cmd)
    }

    /// A key given a TTL of at most 150 ms (or a past time), then a sleep.
    fn expiry_step(&mut self) -> Step {
        let k = self.key();
        let v = self.value();
        let short = self.rng.gen_range(1..=50i64);
        let ms = |n: i64| Arg::Lit(n.to_string().into_bytes());
        let (cmds, sleep_ms) = match self.rng.gen_range(0..11) {
            0 => {
                let mut c = self.cmd("SET", vec![k, v, lit(b"PX"), ms(short)]);
                if self.rng.gen_bool(0.3) {
                    let opt = self.pick(&[b"NX", b"XX", b"GET"]);
                    c.args.push(lit(opt));
                }
                (vec![c], 200)
            }
            1 => (vec![self.cmd("PSETEX", vec![k, ms(short), v])], 200),
            2 => (vec![self.cmd("PEXPIRE", vec![k, ms(short)])], 200),
            3 => (
                vec![self.cmd("PEXPIREAT", vec![k, Arg::NowMsPlus(short)])],
                200,
            ),
            4 => (
                vec![self.cmd("SET", vec![k, v, lit(b"PXAT"), Arg::NowMsPlus(short)])],
                200,
            ),
            5 => {
                // Already past: Redis stores the key and lets it expire, so
                // only the sleep makes DBSIZE deterministic.
                let (unit, at) = match self.rng.gen_range(0..3) {
                    0 => ("EXAT", lit(b"1")),
                    1 => ("PXAT", lit(b"1")),
                    _ => ("EXAT", Arg::NowSecPlus(-10)),
                };
                (
                    vec![self.cmd("SET", vec![k, v, lit(unit.as_bytes()), at])],
                    200,
                )
            }
            8 => (vec![self.cmd("GETEX", vec![k, lit(b"PX"), ms(short)])], 200),
            9 => (
                vec![self.cmd("GETEX", vec![k, lit(b"PXAT"), Arg::NowMsPlus(short)])],
                200,
            ),
            6 | 7 => {
                // WATCH a key that will expire before EXEC: Redis 7 fails
                // the EXEC. The TTL leaves WATCH ample time to arrive
                // before the key expires (else Redis would not fail it).
                let n = self.rng.gen_range(100..=150i64);
                let set = self.cmd("SET", vec![k.clone(), v, lit(b"PX"), ms(n)]);
                let watch = self.cmd("WATCH", vec![k]);
                (vec![set, watch], 300)
            }
            _ => {
                // A write that keeps (or clears) a short TTL; after the
                // sleep the key is gone, or not.
                let n = self.rng.gen_range(100..=150i64);
                let set = self.cmd("SET", vec![k.clone(), lit(b"5"), lit(b"PX"), ms(n)]);
                let other = self.key();
                let then = match self.rng.gen_range(0..13) {
                    0 => self.cmd("SET", vec![k, lit(b"6"), lit(b"KEEPTTL")]),
                    1 => self.cmd("APPEND", vec![k, lit(b"0")]),
                    2 => self.cmd("INCR", vec![k]),
                    3 => self.cmd("GETSET", vec![k, lit(b"8")]),
                    4 => self.cmd("SET", vec![k, lit(b"9")]),
                    5 => self.cmd("SETRANGE", vec![k, lit(b"1"), lit(b"x")]),
                    6 => self.cmd("SETBIT", vec![k, lit(b"3"), lit(b"1")]),
                    7 => self.cmd("INCRBYFLOAT", vec![k, lit(b"1.5")]),
                    8 => self.cmd("GETEX", vec![k, lit(b"PERSIST")]),
                    // The TTL moves (RENAME) or is copied (COPY) with the
                    // value: after the sleep the destination is gone too.
                    9 => self.cmd("RENAME", vec![k, other]),
                    10 => self.cmd("COPY", vec![k, other, lit(b"REPLACE")]),
                    11 => self.cmd("GETEX", vec![k, lit(b"EX"), lit(b"100")]),
                    _ => self.cmd("PERSIST", vec![k]),
                };
                (vec![set, then], 300)
            }
        };
        Step { cmds, sleep_ms }
    }

    /// A TTL read right after the TTL was set, compared exactly: 100.4 s
    /// left reads as 100 in Redis (TTL rounds to the nearest second), so a
    /// server that rounds up shows. A third of them give the TTL to a
    /// collection instead, then may empty it of its one element and write
    /// it again (Redis deleted the emptied key: the new one has no TTL) or
    /// write another type over it.
    fn ttl_probe(&mut self) -> Step {
        if self.rng.gen_range(0..3) == 0 {
            return self.collection_ttl_probe();
        }
        let k = self.key();
        let v = self.value();
        let mut cmds = match self.rng.gen_range(0..4) {
            0 => vec![self.cmd("SET", vec![k.clone(), v, lit(b"PX"), lit(b"100400")])],
            1 => vec![self.cmd("PSETEX", vec![k.clone(), lit(b"100400"), v])],
            2 => vec![
                self.cmd("SET", vec![k.clone(), v]),
                self.cmd("PEXPIRE", vec![k.clone(), lit(b"100400")]),
            ],
            _ => vec![self.cmd("SET", vec![k.clone(), v, lit(b"EX"), lit(b"100")])],
        };
        cmds.push(self.cmd("TTL", vec![k]));
        Step { cmds, sleep_ms: 0 }
    }

    /// See [`Gen::ttl_probe`]: a one-element collection of any type with
    /// a TTL, emptied or not, written again or not (the same type or
    /// another), its TTL read after each step.
    fn collection_ttl_probe(&mut self) -> Step {
        let k = self.key();
        // (create, empty, write again) for each collection type.
        let types: [[&[&[u8]]; 3]; 4] = [
            [&[b"SADD", b"m"], &[b"SREM", b"m"], &[b"SADD", b"n"]],
            [
                &[b"HSET", b"f", b"v"],
                &[b"HDEL", b"f"],
                &[b"HSET", b"g", b"w"],
            ],
            [
                &[b"ZADD", b"1", b"m"],
                &[b"ZREM", b"m"],
                &[b"ZADD", b"2", b"n"],
            ],
            [&[b"RPUSH", b"x"], &[b"LPOP"], &[b"LPUSH", b"y"]],
        ];
        let t = self.rng.gen_range(0..types.len());
        let other = (t + self.rng.gen_range(1..types.len())) % types.len();
        let with_key = |g: &mut Self, words: &[&[u8]]| {
            let mut args = vec![k.clone()];
            args.extend(words[1..].iter().map(|w| lit(w)));
            g.cmd(std::str::from_utf8(words[0]).expect("ascii"), args)
        };
        let mut cmds = vec![
            self.cmd("DEL", vec![k.clone()]),
            with_key(self, types[t][0]),
            self.cmd("PEXPIRE", vec![k.clone(), lit(b"100400")]),
            self.cmd("TTL", vec![k.clone()]),
        ];
        if self.rng.gen_bool(0.7) {
            cmds.push(with_key(self, types[t][1]));
            cmds.push(self.cmd("TTL", vec![k.clone()]));
            let again = if self.rng.gen_bool(0.5) { t } else { other };
            cmds.push(with_key(self, types[again][if again == t { 2 } else { 0 }]));
        } else {
            cmds.push(with_key(self, types[t][2]));
        }
        cmds.push(self.cmd("TTL", vec![k]));
        Step { cmds, sleep_ms: 0 }
    }

    /// One ordinary command (data or control), valid or not.
    fn command(&mut self) -> Cmd {
        // Without lists the draw is the one made before lists existed, so
        // the sequences stay the same.
        let n = match (LISTS, STREAMS) {
            (true, true) => 22,
            (true, false) => 20,
            _ => 17,
        };
        match self.rng.gen_range(0..n) {
            0..=1 => return self.string_command(),
            2 => return self.key_command(),
            3..=4 => return self.hash_command(),
            5..=6 => return self.set_command(),
            // Twice the commands of sets: a larger share.
            7..=9 => return self.zset_command(),
            // As many as sorted sets.
            17..=19 => return self.list_command(),
            20..=21 => return self.stream_command(),
            _ => {}
        }
        match self.rng.gen_range(0..100) {
            0..=7 => {
                let k = self.key();
                self.cmd("GET", vec![k])
            }
            8..=19 => self.set(),
            20..=21 => {
                let (k, v) = (self.key(), self.value());
                self.cmd("SETNX", vec![k, v])
            }
            22 => self.set_with_ttl("SETEX", SECS_OK),
            23 => self.set_with_ttl("PSETEX", MS_OK),
            24..=25 => {
                let (k, v) = (self.key(), self.value());
                self.cmd("GETSET", vec![k, v])
            }
            26..=27 => {
                let k = self.key();
                self.cmd("GETDEL", vec![k])
            }
            28..=30 => {
                let k = self.keys(5);
                self.cmd("MGET", k)
            }
            31..=33 => self.mset("MSET"),
            34..=35 => self.mset("MSETNX"),
            36..=38 => {
                let k = self.keys(4);
                let n = if self.rng.gen_bool(0.7) {
                    "DEL"
                } else {
                    "UNLINK"
                };
                self.cmd(n, k)
            }
            39..=40 => {
                let k = self.keys(4);
                self.cmd("EXISTS", k)
            }
            41..=46 => self.incr(),
            47..=49 => {
                let (k, v) = (self.key(), self.value());
                self.cmd("APPEND", vec![k, v])
            }
            50 => {
                let k = self.key();
                self.cmd("STRLEN", vec![k])
            }
            51 => {
                let k = self.key();
                self.cmd("TYPE", vec![k])
            }
            52..=54 => {
                let k = self.key();
                let millis = self.rng.gen_bool(0.4);
                let n = if millis { "PTTL" } else { "TTL" };
                self.cmd(n, vec![k]).with(Norm::Ttl { millis })
            }
            55..=61 => self.expire(),
            62..=63 => {
                let k = self.key();
                self.cmd("PERSIST", vec![k])
            }
            64..=65 => {
                let v = self.value();
                match self.rng.gen_range(0..3) {
                    0 => self.cmd("PING", vec![]),
                    1 => self.cmd("PING", vec![v]),
                    _ => self.cmd("ECHO", vec![v]),
                }
            }
            66..=67 => self.cmd("DBSIZE", vec![]),
            68..=69 => {
                let p = lit(self.pick(PATTERNS));
                self.cmd("KEYS", vec![p]).with(Norm::Unordered)
            }
            70..=71 => self.scan(),
            // Not while keys may be watched (see the module doc).
            72 if self.watch.0 => self.cmd("DBSIZE", vec![]),
            72 => self.flush(),
            73 => self.cmd("TIME", vec![]).with(Norm::Time),
            74 => {
                let db = self.pick(&[
                    b"0",
                    b"1",
                    b"2",
                    b"0",
                    b"-1",
                    b"16",
                    b"abc",
                    b"",
                    b"99999999999999999999",
                ]);
                self.cmd("SELECT", vec![lit(db)])
            }
            75 => {
                if self.rng.gen_bool(0.3) {
                    let extra = if self.rng.gen_bool(0.2) {
                        vec![lit(b"x")]
                    } else {
                        vec![]
                    };
                    self.cmd("QUIT", extra)
                } else {
                    self.cmd("RESET", vec![])
                }
            }
            76 => self.auth(),
            77 => self.hello(),
            78..=79 => self.client(),
            80 => self.config(),
            81 => self.command_cmd(),
            82 => {
                let mut args = vec![];
                if self.rng.gen_bool(0.5) {
                    let s = self.pick(&[b"server", b"keyspace", b"all", b"nosuchsection"]);
                    args.push(lit(s));
                }
                self.cmd("INFO", args).with(Norm::Shape)
            }
            83 => {
                if self.rng.gen_bool(0.3) {
                    self.cmd("SAVE", vec![])
                } else {
                    self.cmd("LASTSAVE", vec![]).with(Norm::Shape)
                }
            }
            84..=90 => self.wrong_arity(),
            91..=93 => self.unknown(),
            94..=96 => {
                let k = self.keys(2);
                self.cmd("WATCH", k)
            }
            _ => {
                let n = self.pick(&[b"MULTI", b"EXEC", b"DISCARD", b"UNWATCH"]);
                let n = String::from_utf8_lossy(n).into_owned();
                self.cmd(&n, vec![])
            }
        }
    }

    /// SET with a random mix of options, valid or not, in random order.
    fn set(&mut self) -> Cmd {
        let (k, v) = (self.key(), self.value());
        let mut opts: Vec<Vec<Arg>> = Vec::new();
        match self.rng.gen_range(0..12) {
            0 | 1 => opts.push(vec![self.name("NX")]),
            2 | 3 => opts.push(vec![self.name("XX")]),
            4 => opts.extend([vec![self.name("NX")], vec![self.name("XX")]]),
            5 => opts.extend([vec![self.name("NX")], vec![self.name("NX")]]),
            6 => opts.extend([vec![self.name("XX")], vec![self.name("XX")]]),
            _ => {}
        }
        if self.rng.gen_bool(0.25) {
            opts.push(vec![self.name("GET")]);
            if self.rng.gen_bool(0.1) {
                opts.push(vec![self.name("GET")]);
            }
        }
        let mut trailing = None;
        match self.rng.gen_range(0..22) {
            0..=2 => opts.push(vec![self.name("EX"), lit(self.pick(SECS_OK))]),
            3..=4 => opts.push(vec![self.name("PX"), lit(self.pick(MS_OK))]),
            5 => {
                let at = Arg::NowSecPlus(self.rng.gen_range(100..=1000));
                opts.push(vec![self.name("EXAT"), at]);
            }
            6 => {
                let at = Arg::NowMsPlus(self.rng.gen_range(100_000..=1_000_000));
                opts.push(vec![self.name("PXAT"), at]);
            }
            7..=8 => opts.push(vec![self.name("KEEPTTL")]),
            9 => {
                let unit = self.pick(&[b"EX", b"PX", b"EXAT", b"PXAT"]);
                opts.push(vec![lit(unit), lit(self.pick(EXPIRY_BAD))]);
            }
            10 => opts.extend([
                vec![self.name("EX"), lit(b"100")],
                vec![self.name("PX"), lit(b"100000")],
            ]),
            11 => opts.extend([
                vec![self.name("KEEPTTL")],
                vec![self.name("EX"), lit(b"100")],
            ]),
            12 => opts.extend([
                vec![self.name("EX"), lit(b"100")],
                vec![self.name("EX"), lit(b"200")],
            ]),
            13 => opts.extend([vec![self.name("KEEPTTL")], vec![self.name("KEEPTTL")]]),
            14 => {
                // EX at the very end with its value missing.
                let unit = self.pick(&[b"EX", b"PX", b"EXAT", b"PXAT"]);
                trailing = Some(lit(unit));
            }
            15 => {
                let bogus = self.pick(&[b"FOO", b"EXX", b"", b"100"]);
                opts.push(vec![lit(bogus)]);
            }
            _ => {}
        }
        opts.shuffle(&mut self.rng);
        let mut args = vec![k, v];
        args.extend(opts.into_iter().flatten());
        args.extend(trailing);
        self.cmd("SET", args)
    }

    fn set_with_ttl(&mut self, name: &str, ok: &[&[u8]]) -> Cmd {
        let (k, v) = (self.key(), self.value());
        let t = if self.rng.gen_bool(0.6) {
            self.pick(ok)
        } else {
            self.pick(EXPIRY_BAD)
        };
        self.cmd(name, vec![k, lit(t), v])
    }

    fn mset(&mut self, name: &str) -> Cmd {
        let n = self.rng.gen_range(1..=4);
        let mut args = Vec::new();
        for _ in 0..n {
            args.push(self.key());
            args.push(self.value());
        }
        if self.rng.gen_bool(0.1) {
            args.pop(); // an odd number of arguments
        }
        self.cmd(name, args)
    }

    fn incr(&mut self) -> Cmd {
        let k = self.key();
        match self.rng.gen_range(0..4) {
            0 => self.cmd("INCR", vec![k]),
            1 => self.cmd("DECR", vec![k]),
            2 => {
                let d = lit(self.pick(DELTAS));
                self.cmd("INCRBY", vec![k, d])
            }
            _ => {
                let d = lit(self.pick(DELTAS));
                self.cmd("DECRBY", vec![k, d])
            }
        }
    }

    /// EXPIRE/PEXPIRE/EXPIREAT/PEXPIREAT with long, zero, negative, past,
    /// invalid and overflowing times, and sometimes Redis 7's NX/XX/GT/LT.
    fn expire(&mut self) -> Cmd {
        let k = self.key();
        let odd = self.rng.gen_bool(0.3);
        let (name, t) = match self.rng.gen_range(0..4) {
            0 => (
                "EXPIRE",
                if odd {
                    lit(self.pick(EXPIRE_ODD))
                } else {
                    lit(self.pick(SECS_OK))
                },
            ),
            1 => (
                "PEXPIRE",
                if odd {
                    lit(self.pick(EXPIRE_ODD))
                } else {
                    lit(self.pick(MS_OK))
                },
            ),
            2 => (
                "EXPIREAT",
                if odd {
                    lit(self.pick(AT_ODD))
                } else {
                    Arg::NowSecPlus(self.rng.gen_range(100..=100_000))
                },
            ),
            _ => (
                "PEXPIREAT",
                if odd {
                    lit(self.pick(AT_ODD))
                } else {
                    Arg::NowMsPlus(self.rng.gen_range(100_000..=100_000_000))
                },
            ),
        };
        let mut args = vec![k, t];
        if self.rng.gen_bool(0.25) {
            let n = self.rng.gen_range(1..=2);
            for _ in 0..n {
                let o = self.pick(&[b"NX", b"XX", b"GT", b"LT", b"nx", b"FOO"]);
                args.push(lit(o));
            }
        }
        self.cmd(name, args)
    }

    fn scan(&mut self) -> Cmd {
        if self.rng.gen_bool(0.2) {
            let bad: &[&[u8]] = &[b"abc", b"", b" 0", b"1.5"];
            let c = lit(self.pick(bad));
            // Redis takes "" as cursor 0: a full, unordered answer.
            return self.cmd("SCAN", vec![c]).with(Norm::Scan);
        }
        let mut opts: Vec<Vec<Arg>> = Vec::new();
        if self.rng.gen_bool(0.5) {
            opts.push(vec![self.name("MATCH"), lit(self.pick(PATTERNS))]);
        }
        if self.rng.gen_bool(0.5) {
            opts.push(vec![
                self.name("COUNT"),
                lit(self.pick(&[b"10", b"100", b"1000"])),
            ]);
        }
        if self.rng.gen_bool(0.2) {
            let types: &[&[u8]] = if LISTS {
                &[
                    b"string", b"STRING", b"none", b"hash", b"set", b"zset", b"list", b"stream",
                    b"foo",
                ]
            } else {
                &[
                    b"string", b"STRING", b"none", b"hash", b"set", b"zset", b"foo",
                ]
            };
            let t = self.pick(types);
            opts.push(vec![self.name("TYPE"), lit(t)]);
        }
        if self.rng.gen_bool(0.1) {
            let bad: &[&[&[u8]]] = &[
                &[b"COUNT", b"0"],
                &[b"COUNT", b"-1"],
                &[b"COUNT", b"abc"],
                &[b"MATCH"],
                &[b"FOO", b"bar"],
            ];
            opts.push(
                bad.choose(&mut self.rng)
                    .expect("table")
                    .iter()
                    .map(|b| lit(b))
                    .collect(),
            );
        }
        opts.shuffle(&mut self.rng);
        let mut args = vec![lit(b"0")];
        args.extend(opts.into_iter().flatten());
        self.cmd("SCAN", args).with(Norm::Scan)
    }

    fn flush(&mut self) -> Cmd {
        let name = if self.rng.gen_bool(0.5) {
            "FLUSHALL"
        } else {
            "FLUSHDB"
        };
        let args = match self.rng.gen_range(0..5) {
            0 => vec![self.name("ASYNC")],
            1 => vec![self.name("SYNC")],
            2 => vec![lit(self.pick(&[b"FOO", b"ASYNC SYNC"]))],
            3 => vec![lit(b"SYNC"), lit(b"ASYNC")],
            _ => vec![],
        };
        self.cmd(name, args)
    }

    /// AUTH with no password configured on either server.
    fn auth(&mut self) -> Cmd {
        let args: Vec<&[u8]> = match self.rng.gen_range(0..4) {
            0 => vec![b"secret"],
            1 => vec![b"default", b"secret"],
            2 => vec![b"someone", b"secret"],
            _ => vec![b"a", b"b", b"c"],
        };
        self.cmd("AUTH", args.into_iter().map(lit).collect())
    }

    fn hello(&mut self) -> Cmd {
        let args: Vec<&[u8]> = match self.rng.gen_range(0..9) {
            0 => vec![],
            1 => vec![b"2"],
            2 => vec![b"3"],
            3 => vec![b"4"],
            4 => vec![b"abc"],
            5 => vec![b"3", b"SETNAME", b"differ"],
            6 => vec![b"2", b"AUTH", b"default", b"secret"],
            7 => vec![b"3", b"FOO"],
            _ => vec![b"2", b"SETNAME"],
        };
        self.cmd("HELLO", args.into_iter().map(lit).collect())
            .with(Norm::Hello)
    }

    fn client(&mut self) -> Cmd {
        let (args, norm): (Vec<&[u8]>, Norm) = match self.rng.gen_range(0..8) {
            0 => (vec![b"ID"], Norm::Shape),
            1 => (vec![b"SETNAME", b"differ"], Norm::Exact),
            2 => (vec![b"SETNAME", b"bad name"], Norm::Exact),
            3 => (vec![b"SETNAME", b""], Norm::Exact),
            4 | 5 => (vec![b"GETNAME"], Norm::Exact),
            6 => (vec![b"INFO"], Norm::Shape),
            _ => (vec![b"FOO"], Norm::Exact),
        };
        self.cmd("CLIENT", args.into_iter().map(lit).collect())
            .with(norm)
    }

    fn config(&mut self) -> Cmd {
        let (args, norm): (Vec<&[u8]>, Norm) = match self.rng.gen_range(0..4) {
            0 => (vec![b"GET", b"maxclients"], Norm::Shape),
            1 => (vec![b"GET", b"no-such-parameter"], Norm::Shape),
            2 => (vec![b"RESETSTAT"], Norm::Exact),
            _ => (vec![b"FOO"], Norm::Exact),
        };
        self.cmd("CONFIG", args.into_iter().map(lit).collect())
            .with(norm)
    }

    fn command_cmd(&mut self) -> Cmd {
        let (args, norm): (Vec<&[u8]>, Norm) = match self.rng.gen_range(0..4) {
            0 => (vec![b"COUNT"], Norm::Shape),
            1 => (vec![b"INFO", b"get"], Norm::Shape),
            2 => (vec![b"DOCS", b"get"], Norm::Shape),
            _ => (vec![b"FOO"], Norm::Exact),
        };
        self.cmd("COMMAND", args.into_iter().map(lit).collect())
            .with(norm)
    }

    fn wrong_arity(&mut self) -> Cmd {
        let form = *WRONG_ARITY.choose(&mut self.rng).expect("table");
        let mut c = self.cmd(form[0], vec![]);
        for a in &form[1..] {
            let arg = match *a {
                "K" => self.key(),
                "V" => self.value(),
                other => lit(other.as_bytes()),
            };
            c.args.push(arg);
        }
        c
    }

    fn unknown(&mut self) -> Cmd {
        let name = *UNKNOWN.choose(&mut self.rng).expect("table");
        let n = self.rng.gen_range(0..=12);
        let args: Vec<Arg> = (0..n)
            .map(|_| {
                if self.rng.gen_bool(0.5) {
                    self.key()
                } else {
                    self.value()
                }
            })
            .collect();
        Cmd::new(std::iter::once(lit(name.as_bytes())).chain(args).collect())
    }
}

/// The sequence for `seed`, of about `len` commands. Some sequences switch
/// to RESP3 first (`HELLO 3`), so RESP3 replies are compared too.
pub fn sequence(seed: u64, len: usize) -> Sequence {
    let mut g = Gen::seeded(seed);
    let chunk = g.rng.gen_range(2..=16);
    g.expiry_budget = usize::from(g.rng.gen_bool(0.25));
    let mut steps = Vec::new();
    if g.rng.gen_bool(0.15) {
        steps.push(Step::one(
            Cmd::new(vec![lit(b"HELLO"), lit(b"3")]).with(Norm::Hello),
        ));
    }
    let mut n = steps.len();
    while n < len {
        let s = g.step();
        n += s.cmds.len();
        steps.push(s);
    }
    debug_assert!(well_formed(&steps));
    Sequence { seed, steps, chunk }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sequences_are_seeded_and_well_formed() {
        for seed in 0..200 {
            let a = sequence(seed, 40);
            let b = sequence(seed, 40);
            assert!(well_formed(&a.steps), "seed {seed}");
            let lines = |s: &Sequence| -> Vec<String> {
                s.steps
                    .iter()
                    .flat_map(|st| st.cmds.iter().map(Cmd::line))
                    .collect()
            };
            assert_eq!(lines(&a), lines(&b));
            assert!(a.len() >= 40);
        }
    }

    #[test]
    fn a_flush_while_watching_is_not_well_formed() {
        let watch = Step::one(Cmd::new(vec![lit(b"WATCH"), lit(b"k1")]));
        let flush = Step::one(Cmd::new(vec![lit(b"FLUSHALL")]));
        let unwatch = Step::one(Cmd::new(vec![lit(b"UNWATCH")]));
        let exec = Step::one(Cmd::new(vec![lit(b"EXEC")]));
        assert!(!well_formed(&[watch.clone(), flush.clone()]));
        assert!(
            !well_formed(&[watch.clone(), exec.clone(), flush.clone()]),
            "EXEC without MULTI keeps the watches"
        );
        assert!(well_formed(&[watch, unwatch, flush]));
    }

    #[test]
    fn expiry_inside_multi_is_not_well_formed() {
        let multi = Step::one(Cmd::new(vec![lit(b"multi")]));
        let expiry = Step {
            cmds: vec![Cmd::new(vec![lit(b"PEXPIRE"), lit(b"k1"), lit(b"5")])],
            sleep_ms: 200,
        };
        let exec = Step::one(Cmd::new(vec![lit(b"EXEC")]));
        assert!(!well_formed(&[multi.clone(), expiry.clone(), exec.clone()]));
        assert!(well_formed(&[multi, exec, expiry]));
    }
}

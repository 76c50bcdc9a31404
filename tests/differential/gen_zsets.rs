//! The generator's sorted-set commands: ZADD (NX XX GT LT CH INCR) ZINCRBY
//! ZREM ZSCORE ZMSCORE ZCARD ZCOUNT ZLEXCOUNT ZRANK ZREVRANK ZRANGE (BYSCORE
//! BYLEX REV LIMIT WITHSCORES) ZRANGEBYSCORE ZREVRANGEBYSCORE ZRANGEBYLEX
//! ZREVRANGEBYLEX ZREVRANGE ZRANGESTORE ZPOPMIN ZPOPMAX ZRANDMEMBER
//! ZREMRANGEBYRANK ZREMRANGEBYSCORE ZREMRANGEBYLEX ZUNION ZINTER ZDIFF and
//! their STORE forms (WEIGHTS, AGGREGATE, WITHSCORES) ZINTERCARD ZSCAN — on
//! the same few keys the other types use, so every type meets every other
//! (WRONGTYPE both ways; ZUNION/ZINTER/ZDIFF/ZINTERCARD also take plain
//! sets, their members scored 1), with a handful of members and a handful of scores, so
//! members often share a score and their order falls to their bytes.
//! Besides single commands (`zset_command`, chosen where the other types'
//! are), "zset steps" (`zset_step`, chosen by `gen.rs` among the probes)
//! fill a key with a few pairs and then work on that very key: commands on
//! random keys alone would seldom meet a sorted set with members in it.
//!
//! Scores include values whose formatting is compared (`0.1` answers
//! `0.10000000000000001` in Redis 7.0, `-0`, `1e-5`, `123456789012345678`,
//! `inf`), and arguments Redis parses differently in different places: a
//! ZADD score goes through a strict parse (`""`, `" 1"`, `1e400`, `nan`
//! refused), a range bound through a bare `strtod` (`""` is 0, `1e400` is
//! inf, `" 1"` is 1; `nan` refused).
//!
//! Relaxed, and why (`norm.rs`): ZRANDMEMBER picks at random (without a
//! count the reply's type is compared, with one its type and length — a
//! negative count with WITHSCORES gives that many pairs, so the length is
//! still exact). ZSCAN lists its member–score pairs in any order, as HSCAN
//! does; it is generated with cursor 0 and a COUNT no smaller than the
//! member space, so both servers answer the whole set at once. Everything
//! else, ZPOPMIN/ZPOPMAX included, is deterministic and compared exactly.
//!
//! Not generated:
//! - ZRANK/ZREVRANK `WITHSCORE`: Redis 7.2 only; the reference server is
//!   7.0, which refuses it as a wrong number of arguments.
//! - ZRANDMEMBER with a huge negative count that Redis accepts (say
//!   `-9223372036854775807` without WITHSCORES): both servers would build
//!   that many replies. The huge counts generated are refused (LONG_MIN;
//!   beyond ±LONG_MAX/2 with WITHSCORES) or positive (the whole set).
//! - The blocking forms (BZPOPMIN, BZPOPMAX, BZMPOP): not yet (a blocking
//!   pop on an empty key would stall the single client). ZMPOP is.
//!
//! The GEO commands are chosen among these (`gen_geo.rs`).

use rand::seq::SliceRandom;
use rand::Rng;

use super::{lit, Arg, Cmd, Gen, Norm, Step};

/// Members: few, integers among them (`1` < `10` < `2` by bytes), the
/// empty one and a binary one.
const ZMEMBERS: &[&[u8]] = &[b"a", b"b", b"c", b"1", b"10", b"2", b"", b"m\x00\xff"];
/// Scores ZADD usually gets: few, so members often share one.
const SCORES: &[&[u8]] = &[b"0", b"1", b"1", b"2", b"-1", b"1.5"];
/// Valid scores whose parsing or formatting matters.
const SCORES_ODD: &[&[u8]] = &[
    b"-0",
    b"1e3",
    b"inf",
    b"-inf",
    b"+inf",
    b"0.1",
    b"3.0000000000000004",
    b"1e-5",
    b"123456789012345678",
    b"-2.5",
    b"0x10",
    b"+1",
    b"1.",
];
/// Not scores: ZADD, ZINCRBY and WEIGHTS refuse them.
const SCORES_BAD: &[&[u8]] = &[
    b"abc", b"nan", b"", b"1e400", b"-1e400", b"1e-400", b"(1", b" 1", b"1 ", b"1.5x",
];
/// Score range bounds refused (`""`, `1e400` and `" 1"` are accepted
/// there, see the module doc).
const BOUNDS_BAD: &[&[u8]] = &[
    b"abc", b"(abc", b"nan", b"(nan", b"(", b"", b"1e400", b"(-1e400", b" 1", b"[1", b"1 ",
];
/// Lex range bounds refused: no `[`/`(`, or `-`/`+` with more after it.
const LEX_BAD: &[&[u8]] = &[b"a", b"", b"-a", b"+x", b"1", b"abc"];
/// Ranks for ZRANGE, ZREVRANGE and ZREMRANGEBYRANK.
const RANKS: &[&[u8]] = &[
    b"0",
    b"0",
    b"1",
    b"2",
    b"-1",
    b"-1",
    b"-2",
    b"3",
    b"10",
    b"-10",
    b"9223372036854775807",
    b"-9223372036854775808",
];
/// Ranks refused.
const RANKS_BAD: &[&[u8]] = &[b"abc", b"1.5", b"", b"9223372036854775808", b" 1"];
/// LIMIT offsets.
const OFFSETS: &[&[u8]] = &[b"0", b"0", b"1", b"2", b"-1", b"5"];
/// LIMIT counts (negative: no limit).
const LIMITS: &[&[u8]] = &[
    b"1",
    b"2",
    b"-1",
    b"0",
    b"10",
    b"-5",
    b"9223372036854775807",
];
/// LIMIT offsets and counts refused.
const LIMITS_BAD: &[&[u8]] = &[b"abc", b"1.5", b"", b"9223372036854775808"];
/// ZPOPMIN/ZPOPMAX counts.
const POPS: &[&[u8]] = &[
    b"1",
    b"2",
    b"0",
    b"10",
    b"-1",
    b"abc",
    b"9223372036854775807",
];
/// ZRANDMEMBER counts (see the module doc for the huge ones).
const RANDS: &[&[u8]] = &[
    b"0",
    b"1",
    b"2",
    b"5",
    b"20",
    b"-1",
    b"-3",
    b"-6",
    b"abc",
    b"-9223372036854775808",
    b"9223372036854775807",
];
/// WEIGHTS values.
const WEIGHTS: &[&[u8]] = &[
    b"1", b"2", b"0", b"-1", b"0.5", b"inf", b"-inf", b"abc", b"nan", b"",
];
/// ZINTERCARD limits.
const CARD_LIMITS: &[&[u8]] = &[b"0", b"1", b"2", b"-1", b"x", b"9223372036854775807"];
/// Sorted-set commands with a wrong number of arguments (`K` = a key,
/// `M` = a member).
const ZWRONG_ARITY: &[&[&str]] = &[
    &["ZADD", "K"],
    &["ZADD", "K", "1"],
    &["ZINCRBY", "K", "1"],
    &["ZREM", "K"],
    &["ZSCORE", "K"],
    &["ZSCORE", "K", "M", "M"],
    &["ZMSCORE", "K"],
    &["ZCARD"],
    &["ZCARD", "K", "K"],
    &["ZCOUNT", "K", "0"],
    &["ZLEXCOUNT", "K", "-"],
    &["ZRANK", "K"],
    &["ZREVRANK", "K", "M", "M", "M"],
    &["ZRANGE", "K", "0"],
    &["ZRANGEBYSCORE", "K", "0"],
    &["ZREVRANGEBYSCORE", "K"],
    &["ZRANGEBYLEX", "K", "-"],
    &["ZREVRANGEBYLEX", "K"],
    &["ZREVRANGE", "K", "0"],
    &["ZRANGESTORE", "K", "K", "0"],
    &["ZPOPMIN"],
    &["ZPOPMAX", "K", "1", "1"],
    &["ZRANDMEMBER"],
    &["ZREMRANGEBYRANK", "K", "0"],
    &["ZREMRANGEBYSCORE", "K"],
    &["ZREMRANGEBYLEX", "K", "-"],
    &["ZUNION"],
    &["ZUNION", "1"],
    &["ZINTER", "1"],
    &["ZDIFF"],
    &["ZUNIONSTORE", "K", "1"],
    &["ZINTERSTORE", "K"],
    &["ZDIFFSTORE", "K", "1"],
    &["ZINTERCARD", "1"],
    &["ZSCAN", "K"],
];

/// How a ZRANGE-like command reads its two bounds.
#[derive(Clone, Copy, PartialEq, Eq)]
enum By {
    Rank,
    Score,
    Lex,
}

impl Gen {
    pub(super) fn zmember(&mut self) -> Arg {
        lit(self.pick(ZMEMBERS))
    }

    pub(super) fn zmembers(&mut self, max: usize) -> Vec<Arg> {
        let n = self.rng.gen_range(1..=max);
        (0..n).map(|_| self.zmember()).collect()
    }

    /// A valid score: mostly a common one, sometimes an odd one.
    fn zscore_ok(&mut self) -> Arg {
        if self.rng.gen_bool(0.7) {
            lit(self.pick(SCORES))
        } else {
            lit(self.pick(SCORES_ODD))
        }
    }

    /// A score for ZINCRBY: now and then refused.
    fn zscore_arg(&mut self) -> Arg {
        if self.rng.gen_bool(0.1) {
            lit(self.pick(SCORES_BAD))
        } else {
            self.zscore_ok()
        }
    }

    /// A score range bound: a score, often exclusive (`(`), or refused.
    fn score_bound(&mut self) -> Arg {
        let s = match self.rng.gen_range(0..40) {
            0..=7 => self.pick(&[b"-inf", b"+inf", b"inf"]),
            8..=26 => self.pick(SCORES),
            27..=37 => self.pick(SCORES_ODD),
            _ => return lit(self.pick(BOUNDS_BAD)),
        };
        if self.rng.gen_bool(0.3) {
            let mut v = b"(".to_vec();
            v.extend_from_slice(s);
            Arg::Lit(v)
        } else {
            lit(s)
        }
    }

    /// A lex range bound: `[m`, `(m`, `-`, `+`, or malformed.
    fn lex_bound(&mut self) -> Arg {
        match self.rng.gen_range(0..40) {
            0..=5 => lit(b"-"),
            6..=11 => lit(b"+"),
            12..=37 => {
                let mut v = if self.rng.gen_bool(0.5) {
                    b"[".to_vec()
                } else {
                    b"(".to_vec()
                };
                v.extend_from_slice(self.pick(ZMEMBERS));
                Arg::Lit(v)
            }
            _ => lit(self.pick(LEX_BAD)),
        }
    }

    fn rank(&mut self) -> Arg {
        if self.rng.gen_bool(0.05) {
            lit(self.pick(RANKS_BAD))
        } else {
            lit(self.pick(RANKS))
        }
    }

    /// Two bounds of the given kind, as the command reads them (`rev`: a
    /// score or lex range given max first). Half the time one end is open
    /// (rank 0 or -1, `-inf`/`+inf`, `-`/`+`), so that a range over a
    /// filled set is seldom empty; now and then they are of another kind,
    /// which the command must refuse (or read its own way).
    fn bounds(&mut self, by: By, rev: bool) -> (Arg, Arg) {
        let by = if self.rng.gen_bool(0.05) {
            *[By::Rank, By::Score, By::Lex]
                .choose(&mut self.rng)
                .expect("table")
        } else {
            by
        };
        let one = |g: &mut Gen| match by {
            By::Rank => g.rank(),
            By::Score => g.score_bound(),
            By::Lex => g.lex_bound(),
        };
        let (lowest, highest): (&[u8], &[u8]) = match by {
            By::Rank => (b"0", b"-1"),
            By::Score => (b"-inf", b"+inf"),
            By::Lex => (b"-", b"+"),
        };
        let (lo, hi) = match self.rng.gen_range(0..6) {
            0 => (lit(lowest), one(self)),
            1 => (one(self), lit(highest)),
            2 => (lit(lowest), lit(highest)),
            _ => (one(self), one(self)),
        };
        if rev && by != By::Rank {
            (hi, lo)
        } else {
            (lo, hi)
        }
    }

    fn limit(&mut self) -> Vec<Arg> {
        let mut v = vec![self.name("LIMIT"), lit(self.pick(OFFSETS))];
        match self.rng.gen_range(0..40) {
            // LIMIT with its count missing.
            0..=1 => {}
            2 => v.push(lit(self.pick(LIMITS_BAD))),
            3 => {
                v[1] = lit(self.pick(LIMITS_BAD));
                v.push(lit(self.pick(LIMITS)));
            }
            _ => v.push(lit(self.pick(LIMITS))),
        }
        v
    }

    /// One sorted-set command.
    pub(super) fn zset_command(&mut self) -> Cmd {
        let k = self.key();
        self.zset_command_on(k)
    }

    /// A sorted set filled, then worked on: a ZADD of several valid pairs
    /// (members often sharing a score) — usually after a DEL, as the key
    /// more often than not holds another type — now and then a second key
    /// filled too, then a few commands on the first key. So ranges, ranks,
    /// the flags that act on existing members (XX GT LT), pops and
    /// WITHSCORES meet real data, which commands on random keys alone
    /// seldom do.
    pub(super) fn zset_step(&mut self) -> Step {
        let k = self.key();
        let mut cmds = Vec::new();
        if self.rng.gen_bool(0.7) {
            cmds.push(self.cmd("DEL", vec![k.clone()]));
        }
        cmds.push(self.zfill(k.clone()));
        if self.rng.gen_bool(0.3) {
            let other = self.key();
            if self.rng.gen_bool(0.5) {
                cmds.push(self.cmd("DEL", vec![other.clone()]));
            }
            cmds.push(self.zfill(other));
        }
        for _ in 0..self.rng.gen_range(1..=3) {
            cmds.push(self.zset_command_on(k.clone()));
        }
        Step { cmds, sleep_ms: 0 }
    }

    /// ZADD of two to six valid pairs.
    fn zfill(&mut self, k: Arg) -> Cmd {
        let mut args = vec![k];
        for _ in 0..self.rng.gen_range(2..=6) {
            args.push(self.zscore_ok());
            args.push(self.zmember());
        }
        self.cmd("ZADD", args)
    }

    /// One sorted-set command on `k` (or, for ZINTERCARD and the
    /// wrong-arity forms, on keys of its own).
    fn zset_command_on(&mut self, k: Arg) -> Cmd {
        match self.rng.gen_range(0..44) {
            0..=9 => self.zadd(k),
            10..=11 => {
                let (by, m) = (self.zscore_arg(), self.zmember());
                self.cmd("ZINCRBY", vec![k, by, m])
            }
            12..=13 => {
                let mut args = vec![k];
                args.extend(self.zmembers(3));
                self.cmd("ZREM", args)
            }
            14 => {
                let m = self.zmember();
                self.cmd("ZSCORE", vec![k, m])
            }
            15 => {
                let mut args = vec![k];
                args.extend(self.zmembers(4));
                self.cmd("ZMSCORE", args)
            }
            16 => self.cmd("ZCARD", vec![k]),
            17 => {
                let (min, max) = self.bounds(By::Score, false);
                self.cmd("ZCOUNT", vec![k, min, max])
            }
            18 => {
                let (min, max) = self.bounds(By::Lex, false);
                self.cmd("ZLEXCOUNT", vec![k, min, max])
            }
            19 => {
                let n = if self.rng.gen_bool(0.5) {
                    "ZRANK"
                } else {
                    "ZREVRANK"
                };
                let m = self.zmember();
                self.cmd(n, vec![k, m])
            }
            20..=23 => self.zrange(vec![k]),
            24..=25 => self.zrangebyscore(k),
            26 => self.zrangebylex(k),
            27 => {
                let (start, stop) = self.bounds(By::Rank, false);
                let mut args = vec![k, start, stop];
                if self.rng.gen_bool(0.5) {
                    args.push(self.name("WITHSCORES"));
                }
                if self.rng.gen_bool(0.05) {
                    args.push(lit(self.pick(&[b"FOO", b"LIMIT", b"REV"])));
                }
                self.cmd("ZREVRANGE", args)
            }
            28 => {
                let dst = self.key();
                self.zrange(vec![dst, k])
            }
            29 if self.rng.gen_bool(0.3) => {
                // ZMPOP numkeys key… MIN|MAX [COUNT n], valid or not.
                let keys = self.keys(3);
                let numkeys = match self.rng.gen_range(0..10) {
                    0 => b"0".to_vec(),
                    1 => (keys.len() + 1).to_string().into_bytes(),
                    2 => b"x".to_vec(),
                    _ => keys.len().to_string().into_bytes(),
                };
                let mut args = vec![Arg::Lit(numkeys), k];
                args.extend(keys.into_iter().skip(1));
                args.push(lit(self.pick(&[b"MIN", b"max", b"MIN", b"MID"])));
                if self.rng.gen_bool(0.5) {
                    args.push(self.name("COUNT"));
                    args.push(lit(self.pick(&[b"1", b"2", b"10", b"0", b"-1", b"x"])));
                }
                if self.rng.gen_bool(0.05) {
                    args.push(lit(self.pick(&[b"COUNT", b"FOO"])));
                }
                self.cmd("ZMPOP", args)
            }
            29 => {
                let n = if self.rng.gen_bool(0.5) {
                    "ZPOPMIN"
                } else {
                    "ZPOPMAX"
                };
                let mut args = vec![k];
                if self.rng.gen_bool(0.7) {
                    args.push(lit(self.pick(POPS)));
                }
                self.cmd(n, args)
            }
            30..=31 => self.zrandmember(k),
            32 => {
                let (n, by) = match self.rng.gen_range(0..3) {
                    0 => ("ZREMRANGEBYRANK", By::Rank),
                    1 => ("ZREMRANGEBYSCORE", By::Score),
                    _ => ("ZREMRANGEBYLEX", By::Lex),
                };
                let (min, max) = self.bounds(by, false);
                self.cmd(n, vec![k, min, max])
            }
            33..=36 => self.zsetop(k),
            37 => self.zintercard(),
            38 => self.zscan(k),
            39..=42 => self.geo_command_on(k),
            _ => self.zwrong_arity(),
        }
    }

    /// ZADD with a random mix of flags, valid or conflicting, in random
    /// order, then score–member pairs (an odd count now and then).
    fn zadd(&mut self, k: Arg) -> Cmd {
        let mut flags: Vec<&str> = match self.rng.gen_range(0..40) {
            0..=19 => vec![],
            20..=21 => vec!["NX"],
            22..=23 => vec!["XX"],
            24..=25 => vec!["GT"],
            26..=27 => vec!["LT"],
            28 => vec!["XX", "GT"],
            29 => vec!["XX", "LT"],
            // Refused combinations.
            30 => vec!["NX", "XX"],
            31 => vec!["GT", "LT"],
            32 => vec!["NX", "GT"],
            33 => vec!["NX", "LT"],
            // Repeated flags are accepted.
            34 => vec!["NX", "NX"],
            _ => {
                let all = ["NX", "XX", "GT", "LT", "CH", "INCR"];
                let n = self.rng.gen_range(1..=3);
                (0..n)
                    .map(|_| *all.choose(&mut self.rng).expect("table"))
                    .collect()
            }
        };
        if self.rng.gen_bool(0.25) {
            flags.push("CH");
        }
        let incr = self.rng.gen_bool(0.15);
        if incr {
            flags.push("INCR");
        }
        flags.shuffle(&mut self.rng);
        let mut args = vec![k];
        for f in flags {
            args.push(self.name(f));
        }
        if self.rng.gen_bool(0.04) {
            // Not a flag: read as the first score.
            args.push(lit(self.pick(&[b"FOO", b"NXX", b"WITHSCORES"])));
        }
        // INCR takes a single pair; two are refused.
        let pairs = if incr && self.rng.gen_bool(0.85) {
            1
        } else {
            self.rng.gen_range(1..=4)
        };
        for _ in 0..pairs {
            args.push(self.zscore_ok());
            args.push(self.zmember());
        }
        if self.rng.gen_bool(0.08) {
            // One score refused.
            let i = 2 * self.rng.gen_range(0..pairs);
            let at = args.len() - i - 2;
            args[at] = lit(self.pick(SCORES_BAD));
        }
        if self.rng.gen_bool(0.05) {
            args.pop(); // a score without its member
        }
        self.cmd("ZADD", args)
    }

    /// ZRANGE (`head` = the key) or ZRANGESTORE (`head` = destination and
    /// source): by rank, score or lex, with REV, LIMIT, WITHSCORES in any
    /// order, and the refused mixes (LIMIT by rank, WITHSCORES by lex or
    /// in the STORE form).
    fn zrange(&mut self, head: Vec<Arg>) -> Cmd {
        let store = head.len() == 2;
        let by = match self.rng.gen_range(0..10) {
            0..=3 => By::Rank,
            4..=6 => By::Score,
            _ => By::Lex,
        };
        let rev = self.rng.gen_bool(0.35);
        // Now and then the bounds in the other order (empty, or refused).
        let swap = self.rng.gen_bool(0.1);
        let (a, b) = self.bounds(by, rev != swap);
        let mut opts: Vec<Vec<Arg>> = Vec::new();
        match by {
            By::Rank => {}
            By::Score => opts.push(vec![self.name("BYSCORE")]),
            By::Lex => opts.push(vec![self.name("BYLEX")]),
        }
        if self.rng.gen_bool(0.03) {
            opts.push(vec![self.name("BYSCORE")]);
            opts.push(vec![self.name("BYLEX")]);
        }
        if rev {
            opts.push(vec![self.name("REV")]);
        }
        let limit_p = if by == By::Rank { 0.1 } else { 0.35 };
        if self.rng.gen_bool(limit_p) {
            opts.push(self.limit());
        }
        let withscores_p = match (store, by) {
            (true, _) => 0.05,
            (false, By::Lex) => 0.1,
            (false, _) => 0.45,
        };
        if self.rng.gen_bool(withscores_p) {
            opts.push(vec![self.name("WITHSCORES")]);
        }
        if self.rng.gen_bool(0.04) {
            opts.push(vec![lit(self.pick(&[b"FOO", b"BYRANK", b"AGGREGATE"]))]);
        }
        opts.shuffle(&mut self.rng);
        let mut args = head;
        args.extend([a, b]);
        args.extend(opts.into_iter().flatten());
        let n = if store { "ZRANGESTORE" } else { "ZRANGE" };
        self.cmd(n, args)
    }

    /// ZRANGEBYSCORE / ZREVRANGEBYSCORE (max first) with WITHSCORES and
    /// LIMIT, and now and then an option only ZRANGE knows.
    fn zrangebyscore(&mut self, k: Arg) -> Cmd {
        let rev = self.rng.gen_bool(0.5);
        let n = if rev {
            "ZREVRANGEBYSCORE"
        } else {
            "ZRANGEBYSCORE"
        };
        // Now and then the bounds in the other order (empty, or refused).
        let swap = self.rng.gen_bool(0.1);
        let (a, b) = self.bounds(By::Score, rev != swap);
        let mut opts: Vec<Vec<Arg>> = Vec::new();
        if self.rng.gen_bool(0.45) {
            opts.push(vec![self.name("WITHSCORES")]);
        }
        if self.rng.gen_bool(0.35) {
            opts.push(self.limit());
        }
        if self.rng.gen_bool(0.05) {
            opts.push(vec![lit(self.pick(&[b"BYSCORE", b"REV", b"FOO"]))]);
        }
        opts.shuffle(&mut self.rng);
        let mut args = vec![k, a, b];
        args.extend(opts.into_iter().flatten());
        self.cmd(n, args)
    }

    /// ZRANGEBYLEX / ZREVRANGEBYLEX (max first) with LIMIT; WITHSCORES is
    /// refused.
    fn zrangebylex(&mut self, k: Arg) -> Cmd {
        let rev = self.rng.gen_bool(0.5);
        let n = if rev { "ZREVRANGEBYLEX" } else { "ZRANGEBYLEX" };
        // Now and then the bounds in the other order (empty, or refused).
        let swap = self.rng.gen_bool(0.1);
        let (a, b) = self.bounds(By::Lex, rev != swap);
        let mut args = vec![k, a, b];
        if self.rng.gen_bool(0.35) {
            args.extend(self.limit());
        }
        if self.rng.gen_bool(0.08) {
            args.push(lit(self.pick(&[b"WITHSCORES", b"BYLEX", b"FOO"])));
        }
        self.cmd(n, args)
    }

    fn zrandmember(&mut self, k: Arg) -> Cmd {
        if self.rng.gen_bool(0.3) {
            return self.cmd("ZRANDMEMBER", vec![k]).with(Norm::Shape);
        }
        let mut args = vec![k, lit(self.pick(RANDS))];
        match self.rng.gen_range(0..10) {
            0..=3 => args.push(self.name("WITHSCORES")),
            4 => args.push(lit(b"WITHVALUES")),
            5 => {
                args.push(self.name("WITHSCORES"));
                args.push(lit(b"x"));
            }
            _ => {}
        }
        self.cmd("ZRANDMEMBER", args).with(Norm::Count)
    }

    /// ZUNION/ZINTER/ZDIFF and their STORE forms: numkeys right or wrong,
    /// WEIGHTS (as many as keys, or not), AGGREGATE, WITHSCORES, in any
    /// order after the keys (ZDIFF refuses WEIGHTS and AGGREGATE, the
    /// STORE forms WITHSCORES).
    fn zsetop(&mut self, k: Arg) -> Cmd {
        let op = ["ZUNION", "ZINTER", "ZDIFF"][self.rng.gen_range(0..3)];
        let store = self.rng.gen_bool(0.4);
        let mut keys = vec![k];
        if self.rng.gen_bool(0.7) {
            keys.extend(self.keys(2));
        }
        let n = keys.len();
        let numkeys = match self.rng.gen_range(0..20) {
            0 => b"0".to_vec(),
            1 => (n + 1).to_string().into_bytes(),
            2 if n > 1 => (n - 1).to_string().into_bytes(),
            3 => self.pick(&[b"-1", b"abc", b"9223372036854775807"]).to_vec(),
            _ => n.to_string().into_bytes(),
        };
        let mut opts: Vec<Vec<Arg>> = Vec::new();
        let weights_p = if op == "ZDIFF" { 0.05 } else { 0.35 };
        if self.rng.gen_bool(weights_p) {
            let w = match self.rng.gen_range(0..10) {
                0 => n + 1,
                1 => n - 1,
                _ => n,
            };
            let mut v = vec![self.name("WEIGHTS")];
            for _ in 0..w {
                let x = if self.rng.gen_bool(0.7) {
                    self.pick(&WEIGHTS[..3])
                } else {
                    self.pick(WEIGHTS)
                };
                v.push(lit(x));
            }
            opts.push(v);
        }
        let aggregate_p = if op == "ZDIFF" { 0.05 } else { 0.3 };
        if self.rng.gen_bool(aggregate_p) {
            let mut v = vec![self.name("AGGREGATE")];
            if self.rng.gen_bool(0.95) {
                let a = self.pick(&[b"SUM", b"MIN", b"MAX", b"sum", b"max", b"AVG", b""]);
                v.push(lit(a));
            }
            opts.push(v);
        }
        if self.rng.gen_bool(if store { 0.05 } else { 0.5 }) {
            opts.push(vec![self.name("WITHSCORES")]);
        }
        if self.rng.gen_bool(0.04) {
            opts.push(vec![lit(self.pick(&[b"FOO", b"LIMIT", b"WEIGHT"]))]);
        }
        opts.shuffle(&mut self.rng);
        let mut args = Vec::new();
        if store {
            args.push(self.key());
        }
        args.push(Arg::Lit(numkeys));
        args.extend(keys);
        args.extend(opts.into_iter().flatten());
        let name = if store {
            format!("{op}STORE")
        } else {
            op.to_string()
        };
        self.cmd(&name, args)
    }

    fn zintercard(&mut self) -> Cmd {
        let keys = self.keys(3);
        let numkeys = match self.rng.gen_range(0..10) {
            0 => b"0".to_vec(),
            1 => (keys.len() + 1).to_string().into_bytes(),
            2 => b"-1".to_vec(),
            _ => keys.len().to_string().into_bytes(),
        };
        let mut args = vec![Arg::Lit(numkeys)];
        args.extend(keys);
        if self.rng.gen_bool(0.4) {
            args.push(self.name("LIMIT"));
            args.push(lit(self.pick(CARD_LIMITS)));
        }
        if self.rng.gen_bool(0.04) {
            args.push(lit(b"FOO"));
        }
        self.cmd("ZINTERCARD", args)
    }

    /// ZSCAN at cursor 0 (or an invalid cursor), COUNT no smaller than the
    /// member space (or refused), as HSCAN.
    fn zscan(&mut self, k: Arg) -> Cmd {
        let cursor: &[u8] = if self.rng.gen_bool(0.9) { b"0" } else { b"x" };
        let mut args = vec![k, lit(cursor)];
        if self.rng.gen_bool(0.4) {
            args.push(self.name("MATCH"));
            args.push(lit(self.pick(&[b"*", b"[ab]", b"1*", b"*\x00*", b""])));
        }
        match self.rng.gen_range(0..10) {
            0..=2 => {
                args.push(self.name("COUNT"));
                args.push(lit(self.pick(&[b"10", b"100"])));
            }
            // Refused options: answered only when the key is a sorted set.
            3 => {
                args.push(self.name("COUNT"));
                args.push(lit(self.pick(&[b"0", b"-1", b"abc"])));
            }
            4 => args.push(lit(self.pick(&[b"NOSCORES", b"MATCH"]))),
            _ => {}
        }
        self.cmd("ZSCAN", args).with(Norm::ScanPairs)
    }

    fn zwrong_arity(&mut self) -> Cmd {
        let form = *ZWRONG_ARITY.choose(&mut self.rng).expect("table");
        let mut c = self.cmd(form[0], vec![]);
        for a in &form[1..] {
            let arg = match *a {
                "K" => self.key(),
                "M" => self.zmember(),
                other => lit(other.as_bytes()),
            };
            c.args.push(arg);
        }
        c
    }
}

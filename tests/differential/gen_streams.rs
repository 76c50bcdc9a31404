//! The generator's stream commands: XADD (NOMKSTREAM, MAXLEN/MINID with
//! `=`/`~` and LIMIT, explicit `ms-seq`, `ms` and `ms-*` IDs), XLEN,
//! XRANGE, XREVRANGE (inclusive and `(` exclusive bounds, `-`/`+`,
//! COUNT), XDEL, XTRIM, XSETID (ENTRIESADDED, MAXDELETEDID) and XREAD
//! (COUNT, `$`, a short BLOCK) — on the same few keys the other types use,
//! so streams meet every other type (WRONGTYPE both ways, XREAD over keys
//! of mixed types). Besides single commands (`stream_command`), "stream
//! steps" (`stream_step`) fill a key with entries and then work on that
//! very key. All of it only while `STREAMS` (in `gen.rs`) is on.
//!
//!
//! Entries are small, large (hundreds to thousands of bytes) and in long
//! runs ("long stream steps": up to 250 entries of ~100 bytes with
//! `MAXLEN ~`, as BullMQ's events stream): Redis ends a node of its radix
//! tree at 100 entries or when it would pass 4 kB (`stream-node-max-bytes`)
//! and approximate trims (`~`) remove whole nodes, so how many entries
//! they keep shows whether Elsa ends nodes where Redis does.
//!
//! Not generated:
//! - An exact trim followed by approximate ones on a stream whose nodes
//!   end by their bytes: Redis keeps the entries an exact trim removes
//!   from the middle of a node there, flagged deleted, and they still
//!   fill the node; Elsa drops them, so its next `~` trims count that
//!   node from the first kept entry and may keep a few more or fewer
//!   entries (both at least the count asked; `docs/redis-tests.md`).
//!   Long stream steps trim with `~` only; where nodes end by their count
//!   Elsa counts the dropped entries in (`head_node`).
//! - XADD with `*`: the ID is the server's clock, which two servers never
//!   share (and every later read shows it). `ms-*` is generated; `*` is
//!   covered by the shard's unit tests and Redis's Tcl suite
//!   (`docs/redis-tests.md`).
//! - XREAD BLOCK longer than a few milliseconds, or BLOCK 0: it would stall
//!   the single client when nothing comes (BLOCK 1–5 ms is generated: both
//!   servers answer a null array, or at once when there are entries).
//! - Idle times that race the clock: XPENDING IDLE, XCLAIM and XAUTOCLAIM
//!   min-idle are 0 or hours (nothing or everything qualifies the same on
//!   both servers), XCLAIM IDLE/TIME set times read back within the PTTL
//!   tolerance (`Norm::PendingIdle`, `Norm::StreamInfo`).
//!
//! Consumer groups (XGROUP, XREADGROUP with `>`, history and NOACK, XACK,
//! XPENDING, XCLAIM, XAUTOCLAIM) and XINFO are generated, in single
//! commands and "group steps" (a stream with a group, reads by two
//! consumers, then acknowledgements, claims and introspection).

use rand::seq::SliceRandom;
use rand::Rng;

use super::super::norm::Norm;
use super::{lit, Arg, Cmd, Gen, Step};

/// IDs for XADD, XDEL, XSETID and MINID: small, so they meet.
const IDS: &[&[u8]] = &[
    b"1", b"1-1", b"1-2", b"2", b"2-0", b"2-1", b"3-*", b"4", b"5-5", b"0-1", b"7", b"10-*",
];
/// IDs refused or odd: 0-0 (XADD's own error), `-`/`+` (refused where the
/// ID is strict), malformed, at and past the greatest.
const IDS_ODD: &[&[u8]] = &[
    b"0-0",
    b"0",
    b"-",
    b"+",
    b"abc",
    b"1-",
    b"-1",
    b"1-x",
    b"",
    b"18446744073709551615-18446744073709551615",
    b"18446744073709551615-*",
    b"18446744073709551616",
    b"01",
];
/// Range bounds: special, exclusive, incomplete.
const BOUNDS: &[&[u8]] = &[
    b"-",
    b"+",
    b"-",
    b"+",
    b"1",
    b"2",
    b"1-1",
    b"(1",
    b"(1-1",
    b"(2-0",
    b"5",
    b"(0-0",
    b"(18446744073709551615-18446744073709551615",
    b"(-",
    b"(+",
    b"x",
];
/// Counts for MAXLEN, LIMIT, COUNT.
const COUNTS: &[&[u8]] = &[
    b"0",
    b"1",
    b"1",
    b"2",
    b"3",
    b"5",
    b"10",
    b"-1",
    b"abc",
    b"9223372036854775807",
];
/// Fields.
const FIELDS: &[&[u8]] = &[b"f", b"g", b"f", b"", b"1"];
/// Stream commands with a wrong number of arguments.
const XWRONG_ARITY: &[&[&str]] = &[
    &["XADD", "K"],
    &["XADD", "K", "1-1"],
    &["XADD", "K", "1-1", "f"],
    &["XADD", "K", "1-1", "f", "v", "g"],
    &["XADD", "K", "MAXLEN", "1", "1-1", "f"],
    &["XLEN"],
    &["XLEN", "K", "K"],
    &["XRANGE", "K", "-"],
    &["XREVRANGE", "K"],
    &["XDEL", "K"],
    &["XTRIM", "K", "MAXLEN"],
    &["XSETID", "K"],
    &["XREAD", "STREAMS"],
    &["XREAD", "STREAMS", "K"],
    &["XREAD", "COUNT", "1"],
    &["XREADGROUP", "GROUP", "g", "c", "STREAMS", "K"],
    &["XACK", "K", "g"],
    &["XPENDING", "K"],
    &["XPENDING", "K", "g", "-"],
    &["XPENDING", "K", "g", "-", "+", "1", "c", "x"],
    &["XCLAIM", "K", "g", "c", "0"],
    &["XAUTOCLAIM", "K", "g", "c", "0"],
    &["XGROUP"],
    &["XGROUP", "CREATE", "K", "g"],
    &["XGROUP", "DESTROY", "K"],
    &["XGROUP", "SETID", "K", "g", "0", "ENTRIESREAD"],
    &["XGROUP", "CREATECONSUMER", "K", "g"],
    &["XGROUP", "HELP", "x"],
    &["XGROUP", "FOO", "K"],
    &["XINFO"],
    &["XINFO", "STREAM"],
    &["XINFO", "GROUPS", "K", "x"],
    &["XINFO", "CONSUMERS", "K"],
    &["XINFO", "HELP", "x"],
];
/// Group and consumer names.
const GROUPS: &[&[u8]] = &[b"g", b"g", b"g2"];
const CONSUMERS: &[&[u8]] = &[b"c1", b"c1", b"c2", b"c3"];
/// Idle thresholds: none, or more than any test lasts; and refused ones.
const IDLES: &[&[u8]] = &[b"0", b"0", b"3600000", b"-5", b"x"];

impl Gen {
    fn stream_id(&mut self) -> Arg {
        if self.rng.gen_bool(0.1) {
            lit(self.pick(IDS_ODD))
        } else {
            lit(self.pick(IDS))
        }
    }

    fn entry_fields(&mut self) -> Vec<Arg> {
        let n = self.rng.gen_range(1..=3);
        let mut out = Vec::new();
        for _ in 0..n {
            out.push(lit(self.pick(FIELDS)));
            if self.rng.gen_bool(0.1) {
                // Large: a few end a node by its bytes.
                let n = *[200usize, 900, 1800, 4000]
                    .choose(&mut self.rng)
                    .expect("sizes");
                out.push(Arg::Lit(vec![b'v'; n]));
            } else {
                out.push(lit(self.pick(super::VALUES)));
            }
        }
        out
    }

    /// MAXLEN/MINID [=|~] x [LIMIT n], now and then odd.
    fn trim_args(&mut self) -> Vec<Arg> {
        let mut out = Vec::new();
        let minid = self.rng.gen_bool(0.3);
        out.push(self.name(if minid { "MINID" } else { "MAXLEN" }));
        let how = self.rng.gen_range(0..4);
        if how == 1 {
            out.push(lit(b"="));
        } else if how == 2 {
            out.push(lit(b"~"));
        }
        out.push(if minid {
            self.stream_id()
        } else {
            lit(self.pick(COUNTS))
        });
        if self.rng.gen_bool(0.2) {
            out.push(self.name("LIMIT"));
            out.push(lit(self.pick(COUNTS)));
        }
        if self.rng.gen_bool(0.05) {
            // Both strategies: refused.
            out.push(self.name("MAXLEN"));
            out.push(lit(b"1"));
        }
        out
    }

    fn xadd(&mut self, k: Arg, id: Arg) -> Cmd {
        let mut args = vec![k];
        if self.rng.gen_bool(0.1) {
            args.push(self.name("NOMKSTREAM"));
        }
        if self.rng.gen_bool(0.3) {
            args.extend(self.trim_args());
        }
        args.push(id);
        args.extend(self.entry_fields());
        self.cmd("XADD", args)
    }

    fn xrange(&mut self, k: Arg) -> Cmd {
        let rev = self.rng.gen_bool(0.4);
        let a = lit(self.pick(BOUNDS));
        let b = lit(self.pick(BOUNDS));
        let mut args = vec![k, a, b];
        if self.rng.gen_bool(0.4) {
            args.push(self.name("COUNT"));
            args.push(lit(self.pick(COUNTS)));
        }
        if self.rng.gen_bool(0.03) {
            args.push(lit(b"junk"));
        }
        self.cmd(if rev { "XREVRANGE" } else { "XRANGE" }, args)
    }

    fn xread(&mut self, first: Option<Arg>) -> Cmd {
        let mut args = Vec::new();
        if self.rng.gen_bool(0.4) {
            args.push(self.name("COUNT"));
            args.push(lit(self.pick(COUNTS)));
        }
        if self.rng.gen_bool(0.15) {
            args.push(self.name("BLOCK"));
            args.push(lit(self.pick(&[b"1", b"2", b"5", b"-1", b"x"])));
        }
        args.push(self.name("STREAMS"));
        let n = self.rng.gen_range(1..=3);
        let mut keys: Vec<Arg> = (0..n).map(|_| self.key()).collect();
        if let Some(k) = first {
            keys[0] = k;
        }
        let ids: Vec<Arg> = (0..n)
            .map(|_| match self.rng.gen_range(0..10) {
                0..=2 => lit(b"$"),
                3 => lit(b">"),
                4 => lit(b"0"),
                _ => self.stream_id(),
            })
            .collect();
        args.extend(keys);
        if self.rng.gen_bool(0.03) {
            args.extend(ids.into_iter().skip(1));
        } else {
            args.extend(ids);
        }
        self.cmd("XREAD", args)
    }

    /// One stream command on a random key, valid or not.
    pub(super) fn stream_command(&mut self) -> Cmd {
        let k = self.key();
        match self.rng.gen_range(0..20) {
            0..=5 => {
                let id = self.stream_id();
                self.xadd(k, id)
            }
            6 => self.cmd("XLEN", vec![k]),
            7..=9 => self.xrange(k),
            10..=11 => {
                let n = self.rng.gen_range(1..=3);
                let mut args = vec![k];
                args.extend((0..n).map(|_| self.stream_id()));
                self.cmd("XDEL", args)
            }
            12..=13 => {
                let mut args = vec![k];
                if self.rng.gen_bool(0.9) {
                    args.extend(self.trim_args());
                } else {
                    args.push(self.name("LIMIT"));
                    args.push(lit(b"1"));
                }
                self.cmd("XTRIM", args)
            }
            14..=15 => {
                let mut args = vec![k, self.stream_id()];
                if self.rng.gen_bool(0.3) {
                    args.push(self.name("ENTRIESADDED"));
                    args.push(lit(self.pick(COUNTS)));
                }
                if self.rng.gen_bool(0.3) {
                    args.push(self.name("MAXDELETEDID"));
                    args.push(self.stream_id());
                }
                self.cmd("XSETID", args)
            }
            16..=17 => self.xread(None),
            18 => self.group_command(k),
            _ => {
                let words = XWRONG_ARITY.choose(&mut self.rng).expect("non-empty");
                let args = words[1..]
                    .iter()
                    .map(|w| match *w {
                        "K" => self.key(),
                        w => lit(w.as_bytes()),
                    })
                    .collect();
                self.cmd(words[0], args)
            }
        }
    }

    fn group(&mut self) -> Arg {
        lit(self.pick(GROUPS))
    }

    fn consumer(&mut self) -> Arg {
        lit(self.pick(CONSUMERS))
    }

    fn ids(&mut self, max: usize) -> Vec<Arg> {
        let n = self.rng.gen_range(1..=max);
        (0..n).map(|_| self.stream_id()).collect()
    }

    /// One consumer-group command (or XINFO) on `k`, valid or not.
    pub(super) fn group_command(&mut self, k: Arg) -> Cmd {
        let (g, c) = (self.group(), self.consumer());
        match self.rng.gen_range(0..16) {
            0..=1 => {
                let id = match self.rng.gen_range(0..5) {
                    0 => lit(b"$"),
                    1 => lit(b"0"),
                    _ => self.stream_id(),
                };
                let mut args = vec![self.name("CREATE"), k, g, id];
                if self.rng.gen_bool(0.4) {
                    args.push(self.name("MKSTREAM"));
                }
                if self.rng.gen_bool(0.2) {
                    args.push(self.name("ENTRIESREAD"));
                    args.push(lit(self.pick(&[b"0", b"1", b"-1", b"-2", b"5", b"x"])));
                }
                self.cmd("XGROUP", args)
            }
            2 => {
                let id = if self.rng.gen_bool(0.3) {
                    lit(b"$")
                } else {
                    lit(self.pick(BOUNDS))
                };
                let mut args = vec![self.name("SETID"), k, g, id];
                if self.rng.gen_bool(0.3) {
                    args.push(self.name("ENTRIESREAD"));
                    args.push(lit(self.pick(&[b"0", b"2", b"-1", b"-3"])));
                }
                self.cmd("XGROUP", args)
            }
            3 => {
                let (sub, with_consumer) = match self.rng.gen_range(0..4) {
                    0 => ("DESTROY", false),
                    1 => ("CREATECONSUMER", true),
                    2 => ("DELCONSUMER", true),
                    _ => ("HELP", false),
                };
                let mut args = vec![self.name(sub)];
                if sub != "HELP" {
                    args.extend([k, g]);
                    if with_consumer {
                        args.push(c);
                    }
                }
                self.cmd("XGROUP", args)
            }
            4..=6 => {
                let mut args = vec![self.name("GROUP"), g, c];
                if self.rng.gen_bool(0.4) {
                    args.push(self.name("COUNT"));
                    args.push(lit(self.pick(COUNTS)));
                }
                if self.rng.gen_bool(0.15) {
                    args.push(self.name("NOACK"));
                }
                if self.rng.gen_bool(0.1) {
                    args.push(self.name("BLOCK"));
                    args.push(lit(self.pick(&[b"1", b"2"])));
                }
                args.push(self.name("STREAMS"));
                let n = self.rng.gen_range(1..=2);
                let mut keys = vec![k];
                keys.extend((1..n).map(|_| self.key()));
                let ids: Vec<Arg> = (0..n)
                    .map(|_| match self.rng.gen_range(0..8) {
                        0..=3 => lit(b">"),
                        4 => lit(b"0"),
                        5 => lit(b"$"),
                        _ => self.stream_id(),
                    })
                    .collect();
                args.extend(keys);
                args.extend(ids);
                self.cmd("XREADGROUP", args)
            }
            7..=8 => {
                let mut args = vec![k, g];
                args.extend(self.ids(3));
                self.cmd("XACK", args)
            }
            9..=10 => {
                let mut args = vec![k, g];
                if self.rng.gen_bool(0.7) {
                    if self.rng.gen_bool(0.2) {
                        args.push(self.name("IDLE"));
                        args.push(lit(self.pick(IDLES)));
                    }
                    args.push(lit(self.pick(BOUNDS)));
                    args.push(lit(self.pick(BOUNDS)));
                    args.push(lit(self.pick(COUNTS)));
                    if self.rng.gen_bool(0.3) {
                        args.push(c);
                    }
                    return self.cmd("XPENDING", args).with(Norm::PendingIdle);
                }
                self.cmd("XPENDING", args)
            }
            11 => {
                let mut args = vec![k, g, c, lit(self.pick(IDLES))];
                args.extend(self.ids(2));
                for _ in 0..self.rng.gen_range(0..3) {
                    match self.rng.gen_range(0..7) {
                        0 => args.push(self.name("JUSTID")),
                        1 => args.push(self.name("FORCE")),
                        2 => {
                            args.push(self.name("RETRYCOUNT"));
                            args.push(lit(self.pick(&[b"0", b"5", b"-1", b"x"])));
                        }
                        3 => {
                            args.push(self.name("LASTID"));
                            args.push(self.stream_id());
                        }
                        4 => {
                            args.push(self.name("IDLE"));
                            args.push(lit(self.pick(&[b"0", b"5000", b"x"])));
                        }
                        5 => {
                            args.push(self.name("TIME"));
                            args.push(Arg::NowMsPlus(-5000));
                        }
                        _ => args.push(lit(b"FOO")),
                    }
                }
                self.cmd("XCLAIM", args)
            }
            12 => {
                let mut args = vec![k, g, c, lit(self.pick(IDLES)), lit(self.pick(BOUNDS))];
                if self.rng.gen_bool(0.4) {
                    args.push(self.name("COUNT"));
                    args.push(lit(self.pick(&[b"1", b"2", b"10", b"0", b"x"])));
                }
                if self.rng.gen_bool(0.3) {
                    args.push(self.name("JUSTID"));
                }
                self.cmd("XAUTOCLAIM", args)
            }
            _ => {
                let args = match self.rng.gen_range(0..5) {
                    0 => vec![self.name("GROUPS"), k],
                    1 => vec![self.name("CONSUMERS"), k, g],
                    2 => vec![self.name("STREAM"), k],
                    3 => {
                        let mut a = vec![self.name("STREAM"), k, self.name("FULL")];
                        if self.rng.gen_bool(0.5) {
                            a.push(self.name("COUNT"));
                            a.push(lit(self.pick(&[b"0", b"1", b"2", b"-1", b"x"])));
                        }
                        a
                    }
                    _ => vec![self.name("HELP")],
                };
                self.cmd("XINFO", args).with(Norm::StreamInfo)
            }
        }
    }

    /// A stream with a group: entries, reads by two consumers, then group
    /// commands on it.
    pub(super) fn group_step(&mut self) -> Step {
        let k = self.key();
        let mut cmds = vec![self.cmd("DEL", vec![k.clone()])];
        for ms in 1..=self.rng.gen_range(2..6u64) {
            let id = Arg::Lit(format!("{ms}-1").into_bytes());
            let c = self.xadd(k.clone(), id);
            cmds.push(c);
        }
        let g = lit(b"g");
        let start = lit(self.pick(&[b"0", b"0", b"$", b"2-1"]));
        let create = vec![self.name("CREATE"), k.clone(), g.clone(), start];
        cmds.push(self.cmd("XGROUP", create));
        for _ in 0..self.rng.gen_range(1..=3) {
            let c = self.consumer();
            let mut args = vec![self.name("GROUP"), g.clone(), c];
            if self.rng.gen_bool(0.6) {
                args.push(self.name("COUNT"));
                args.push(lit(self.pick(&[b"1", b"2"])));
            }
            args.extend([self.name("STREAMS"), k.clone(), lit(b">")]);
            cmds.push(self.cmd("XREADGROUP", args));
        }
        for _ in 0..self.rng.gen_range(1..=5) {
            let c = if self.rng.gen_bool(0.2) {
                let mut c = self.stream_command();
                if c.args.len() > 1 && c.name() != "XREAD" {
                    c.args[1] = k.clone();
                }
                c
            } else {
                self.group_command(k.clone())
            };
            cmds.push(c);
        }
        Step { cmds, sleep_ms: 0 }
    }

    /// A stream with a few entries (rising IDs, now and then a trim or a
    /// delete among them), then commands on that key.
    pub(super) fn stream_step(&mut self) -> Step {
        if self.rng.gen_bool(0.15) {
            return self.long_stream_step();
        }
        let k = self.key();
        let mut cmds = vec![self.cmd("DEL", vec![k.clone()])];
        let n = self.rng.gen_range(1..=6);
        let mut ms = self.rng.gen_range(1..4u64);
        for _ in 0..n {
            ms += self.rng.gen_range(0..3);
            let id = match self.rng.gen_range(0..3) {
                0 => format!("{ms}-*"),
                1 => format!("{ms}"),
                _ => format!("{ms}-{}", self.rng.gen_range(1..4)),
            };
            let c = self.xadd(k.clone(), Arg::Lit(id.into_bytes()));
            cmds.push(c);
        }
        for _ in 0..self.rng.gen_range(1..=4) {
            let c = match self.rng.gen_range(0..6) {
                0 => self.cmd("XLEN", vec![k.clone()]),
                1 | 2 => self.xrange(k.clone()),
                3 => self.xread(Some(k.clone())),
                _ => {
                    let mut c = self.stream_command();
                    if c.args.len() > 1 {
                        c.args[1] = k.clone();
                    }
                    c
                }
            };
            cmds.push(c);
        }
        Step { cmds, sleep_ms: 0 }
    }

    /// A long run of XADDs of ~100-byte entries (an event log: `event`,
    /// a job ID, a reason of varying length), most with `MAXLEN ~ n`, now
    /// and then an exact trim, an XDEL or an XTRIM; then XLEN and the
    /// first entries.
    fn long_stream_step(&mut self) -> Step {
        let k = self.key();
        let mut cmds = vec![self.cmd("DEL", vec![k.clone()])];
        let cap = *[5u32, 10, 50, 100].choose(&mut self.rng).expect("caps");
        let n = self.rng.gen_range(30..=250u64);
        for i in 1..=n {
            let mut args = vec![k.clone()];
            match self.rng.gen_range(0..20) {
                // MINID ~, not an exact trim: see the module doc.
                0 => {
                    let min = i.saturating_sub(u64::from(cap)).to_string();
                    args.extend([self.name("MINID"), lit(b"~"), lit(min.as_bytes())]);
                }
                1 => {}
                _ => args.extend([
                    self.name("MAXLEN"),
                    lit(b"~"),
                    lit(cap.to_string().as_bytes()),
                ]),
            }
            args.push(Arg::Lit(format!("{i}-1").into_bytes()));
            let reason = "r".repeat(self.rng.gen_range(20..140));
            args.extend([
                lit(b"event"),
                lit(b"completed"),
                lit(b"jobId"),
                lit(i.to_string().as_bytes()),
                lit(b"returnvalue"),
                Arg::Lit(reason.into_bytes()),
            ]);
            cmds.push(self.cmd("XADD", args));
            if self.rng.gen_bool(0.02) {
                let id = format!("{}-1", self.rng.gen_range(1..=i));
                cmds.push(self.cmd("XDEL", vec![k.clone(), Arg::Lit(id.into_bytes())]));
            }
        }
        if self.rng.gen_bool(0.3) {
            let args = vec![k.clone(), self.name("MAXLEN"), lit(b"~"), lit(b"20")];
            cmds.push(self.cmd("XTRIM", args));
        }
        cmds.push(self.cmd("XLEN", vec![k.clone()]));
        let args = vec![k, lit(b"-"), lit(b"+"), self.name("COUNT"), lit(b"3")];
        cmds.push(self.cmd("XRANGE", args));
        Step { cmds, sleep_ms: 0 }
    }
}

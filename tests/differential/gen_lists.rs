//! The generator's list commands: LPUSH RPUSH LPUSHX RPUSHX LPOP RPOP (with
//! and without a count) LLEN LRANGE LINDEX LSET LINSERT LREM LTRIM LPOS
//! (RANK COUNT MAXLEN) LMOVE RPOPLPUSH LMPOP — on the same few keys the
//! other types use, so lists meet every other type (WRONGTYPE both ways,
//! LMOVE/RPOPLPUSH into a destination of another type, LMPOP over keys of
//! mixed types), with a handful of elements: duplicates (so LREM's count,
//! LPOS's RANK and LINSERT's pivot matter), integers (`1` and `01` are
//! different elements, although Redis stores `1` as an integer), the empty
//! one, a binary one, and now and then a long one.
//! Besides single commands (`list_command`, chosen where the other types'
//! are), "list steps" (`list_step`, chosen by `gen.rs` among the probes)
//! fill a key with a few elements and then work on that very key: commands
//! on random keys alone would seldom meet a list with elements in it.
//! All of it is generated only while `LISTS` (in `gen.rs`) is on.
//!
//! Indices and counts include the edges: negative and out-of-range
//! indices, `i64::MAX`/`i64::MIN`, counts of 0 and negative, and arguments
//! that are not integers (`1.5`, `""`, `" 1"`, one past `i64::MAX`).
//!
//! Relaxed, and why (`norm.rs`): OBJECT ENCODING of a list (Redis 7.0
//! answers `quicklist` for every list; Elsa does not mimic Redis's list
//! encodings). Every list command itself is deterministic and compared
//! exactly.
//!
//! Not generated:
//! - The blocking forms (BLPOP, BRPOP, BLMOVE, BRPOPLPUSH, BLMPOP): a
//!   blocking pop on an empty key would stall the single client; they get
//!   their own test.
//! - LPOS `RANK -9223372036854775808` (LONG_MIN): Redis 7.0 negates the
//!   rank without checking, the negation overflows and the rank then acts
//!   as RANK -1 (`LPOS k a RANK <LONG_MIN>` answers the last match); 7.2
//!   refuses it ("value is out of range"). The reference server is 7.0,
//!   whose answer is an overflow accident, so neither is asked of Elsa.
//!   `RANK -9223372036854775807` (the most negative rank Redis negates
//!   safely) and ranks past `i64` (refused as not an integer) are
//!   generated. (LREM's `i64::MIN` count overflows the same way but ends
//!   up meaning what it says — remove every match from the tail — so it is
//!   generated.)

use rand::seq::SliceRandom;
use rand::Rng;

use super::{lit, Arg, Cmd, Gen, Step};

/// Elements: few, `a` twice as likely (duplicates), integers (`1` and
/// `01` differ; `1`, `-1` and `i64::MAX` are stored as integers by Redis),
/// the empty one and a binary one.
const ELEMS: &[&[u8]] = &[
    b"a",
    b"a",
    b"b",
    b"c",
    b"1",
    b"01",
    b"10",
    b"-1",
    b"9223372036854775807",
    b"",
    b"e\x00\xff\r\n",
];
/// Indices for LRANGE, LINDEX, LSET and LTRIM.
const INDICES: &[&[u8]] = &[
    b"0",
    b"0",
    b"1",
    b"2",
    b"-1",
    b"-1",
    b"-2",
    b"3",
    b"5",
    b"10",
    b"-10",
    b"-100",
    b"9223372036854775807",
    b"-9223372036854775808",
];
/// Indices refused (not integers, or past `i64`).
const INDICES_BAD: &[&[u8]] = &[b"abc", b"1.5", b"", b" 1", b"9223372036854775808", b"+"];
/// LPOP/RPOP counts: 0 (an empty array on a list, nil on no key),
/// negative, not integers, huge.
const POP_COUNTS: &[&[u8]] = &[
    b"1",
    b"1",
    b"2",
    b"3",
    b"0",
    b"10",
    b"-1",
    b"abc",
    b"1.5",
    b"",
    b"9223372036854775807",
    b"-9223372036854775808",
];
/// LREM counts: from the head (positive), from the tail (negative), all
/// (0); see the module doc for `i64::MIN`.
const REM_COUNTS: &[&[u8]] = &[
    b"0",
    b"0",
    b"1",
    b"2",
    b"-1",
    b"-2",
    b"5",
    b"-5",
    b"abc",
    b"9223372036854775807",
    b"-9223372036854775808",
];
/// LPOS RANK values: negative counts from the tail; see the module doc
/// for why `i64::MIN` is not among them.
const RANKS: &[&[u8]] = &[
    b"1",
    b"1",
    b"2",
    b"3",
    b"-1",
    b"-1",
    b"-2",
    b"-3",
    b"9223372036854775807",
    b"-9223372036854775807",
];
/// LPOS RANK values refused: 0 (its own message), not integers.
const RANKS_BAD: &[&[u8]] = &[b"0", b"0", b"x", b"-9223372036854775809", b""];
/// LPOS COUNT values: 0 means every match.
const POS_COUNTS: &[&[u8]] = &[b"0", b"0", b"1", b"2", b"10", b"9223372036854775807"];
/// LPOS MAXLEN values: 0 means no limit.
const MAXLENS: &[&[u8]] = &[b"0", b"1", b"2", b"3", b"9223372036854775807"];
/// LPOS COUNT and MAXLEN values refused: negative (each its own
/// message), not integers.
const POS_BAD: &[&[u8]] = &[b"-1", b"-1", b"abc", b"1.5", b"-9223372036854775808"];
/// LMPOP counts: 0 and negative are refused.
const MPOP_COUNTS: &[&[u8]] = &[b"1", b"1", b"2", b"2", b"10", b"0", b"-1", b"x"];
/// List commands with a wrong number of arguments (`K` = a key, `E` = an
/// element).
const LWRONG_ARITY: &[&[&str]] = &[
    &["LPUSH"],
    &["LPUSH", "K"],
    &["RPUSH", "K"],
    &["LPUSHX", "K"],
    &["RPUSHX"],
    &["LPOP"],
    &["LPOP", "K", "1", "1"],
    &["RPOP"],
    &["RPOP", "K", "1", "E"],
    &["LLEN"],
    &["LLEN", "K", "K"],
    &["LRANGE", "K", "0"],
    &["LRANGE", "K", "0", "-1", "-1"],
    &["LINDEX", "K"],
    &["LINDEX", "K", "0", "0"],
    &["LSET", "K", "0"],
    &["LSET", "K", "0", "E", "E"],
    &["LINSERT", "K", "BEFORE", "E"],
    &["LINSERT", "K", "AFTER", "E", "E", "E"],
    &["LREM", "K", "0"],
    &["LTRIM", "K", "0"],
    &["LPOS", "K"],
    &["LMOVE", "K", "K", "LEFT"],
    &["LMOVE", "K", "K", "LEFT", "RIGHT", "LEFT"],
    &["RPOPLPUSH", "K"],
    &["RPOPLPUSH", "K", "K", "K"],
    &["LMPOP"],
    &["LMPOP", "1"],
    &["LMPOP", "1", "K"],
];

impl Gen {
    /// An element: from the table, now and then a long one.
    fn elem(&mut self) -> Arg {
        if self.rng.gen_bool(0.02) {
            Arg::Lit(vec![b'x'; 1000])
        } else {
            lit(self.pick(ELEMS))
        }
    }

    /// An element to look for (LPOS, LREM, LINSERT's pivot): in a list
    /// step, more often than not one the step pushed (`pushed`), so the
    /// search finds something.
    fn sought(&mut self, pushed: &[Arg]) -> Arg {
        match pushed.choose(&mut self.rng) {
            Some(e) if self.rng.gen_bool(0.6) => e.clone(),
            _ => self.elem(),
        }
    }

    /// A value for an LPOS option: valid, now and then refused.
    fn pos_arg(&mut self, ok: &[&'static [u8]], bad: &[&'static [u8]]) -> Arg {
        if self.rng.gen_bool(0.15) {
            lit(self.pick(bad))
        } else {
            lit(self.pick(ok))
        }
    }

    fn elems(&mut self, max: usize) -> Vec<Arg> {
        let n = self.rng.gen_range(1..=max);
        (0..n).map(|_| self.elem()).collect()
    }

    fn index(&mut self) -> Arg {
        if self.rng.gen_bool(0.05) {
            lit(self.pick(INDICES_BAD))
        } else {
            lit(self.pick(INDICES))
        }
    }

    /// `LEFT` or `RIGHT` (any case), now and then neither.
    fn side(&mut self) -> Arg {
        match self.rng.gen_range(0..40) {
            0..=18 => self.name("LEFT"),
            19..=37 => self.name("RIGHT"),
            _ => lit(self.pick(&[b"UP", b"", b"LEFTX", b"HEAD"])),
        }
    }

    /// One list command.
    pub(super) fn list_command(&mut self) -> Cmd {
        let k = self.key();
        self.list_command_on(k, &[])
    }

    /// A list filled, then worked on: an RPUSH or LPUSH of several
    /// elements (duplicates likely) — usually after a DEL, as the key more
    /// often than not holds another type — now and then a second key
    /// filled too (a destination or another source for LMOVE, RPOPLPUSH,
    /// LMPOP), then a few commands on the first key. So indices, ranks,
    /// pivots, counts and moves meet real data.
    pub(super) fn list_step(&mut self) -> Step {
        let k = self.key();
        let mut cmds = Vec::new();
        if self.rng.gen_bool(0.7) {
            cmds.push(self.cmd("DEL", vec![k.clone()]));
        }
        let fill = self.lfill(k.clone());
        let pushed = fill.args[2..].to_vec();
        cmds.push(fill);
        if self.rng.gen_bool(0.3) {
            let other = self.key();
            if self.rng.gen_bool(0.5) {
                cmds.push(self.cmd("DEL", vec![other.clone()]));
            }
            cmds.push(self.lfill(other));
        }
        for _ in 0..self.rng.gen_range(1..=4) {
            cmds.push(self.list_command_on(k.clone(), &pushed));
        }
        Step { cmds, sleep_ms: 0 }
    }

    /// RPUSH or LPUSH of two to seven elements.
    fn lfill(&mut self, k: Arg) -> Cmd {
        let n = if self.rng.gen_bool(0.6) {
            "RPUSH"
        } else {
            "LPUSH"
        };
        let mut args = vec![k];
        for _ in 0..self.rng.gen_range(2..=7) {
            args.push(self.elem());
        }
        self.cmd(n, args)
    }

    /// One list command on `k` (or, for the wrong-arity forms, on keys of
    /// its own); `pushed`: elements likely in it.
    fn list_command_on(&mut self, k: Arg, pushed: &[Arg]) -> Cmd {
        match self.rng.gen_range(0..40) {
            0..=6 => {
                let n = match self.rng.gen_range(0..10) {
                    0..=3 => "LPUSH",
                    4..=7 => "RPUSH",
                    8 => "LPUSHX",
                    _ => "RPUSHX",
                };
                let mut args = vec![k];
                args.extend(self.elems(4));
                self.cmd(n, args)
            }
            7..=10 => {
                let n = if self.rng.gen_bool(0.5) {
                    "LPOP"
                } else {
                    "RPOP"
                };
                let mut args = vec![k];
                if self.rng.gen_bool(0.5) {
                    args.push(lit(self.pick(POP_COUNTS)));
                }
                self.cmd(n, args)
            }
            11..=12 => self.cmd("LLEN", vec![k]),
            13..=16 => {
                let (start, stop) = self.index_pair();
                self.cmd("LRANGE", vec![k, start, stop])
            }
            17..=18 => {
                let i = self.index();
                self.cmd("LINDEX", vec![k, i])
            }
            19..=20 => {
                let (i, e) = (self.index(), self.elem());
                self.cmd("LSET", vec![k, i, e])
            }
            21..=22 => {
                let place = match self.rng.gen_range(0..20) {
                    0..=8 => self.name("BEFORE"),
                    9..=17 => self.name("AFTER"),
                    _ => lit(self.pick(&[b"MIDDLE", b"", b"BEFOREX"])),
                };
                let (pivot, e) = (self.sought(pushed), self.elem());
                self.cmd("LINSERT", vec![k, place, pivot, e])
            }
            23..=24 => {
                let (c, e) = (lit(self.pick(REM_COUNTS)), self.sought(pushed));
                self.cmd("LREM", vec![k, c, e])
            }
            25..=26 => {
                let (start, stop) = self.index_pair();
                self.cmd("LTRIM", vec![k, start, stop])
            }
            27..=30 => self.lpos(k, pushed),
            31..=33 => {
                let dst = self.dest(&k);
                let (from, to) = (self.side(), self.side());
                self.cmd("LMOVE", vec![k, dst, from, to])
            }
            34 => {
                let dst = self.dest(&k);
                self.cmd("RPOPLPUSH", vec![k, dst])
            }
            35..=37 => self.lmpop(k),
            _ => self.lwrong_arity(),
        }
    }

    /// A start and a stop: half the time one end is open (0 or -1), so a
    /// range over a filled list is seldom empty.
    fn index_pair(&mut self) -> (Arg, Arg) {
        match self.rng.gen_range(0..6) {
            0 => (lit(b"0"), self.index()),
            1 => (self.index(), lit(b"-1")),
            2 => (lit(b"0"), lit(b"-1")),
            _ => (self.index(), self.index()),
        }
    }

    /// A destination for LMOVE/RPOPLPUSH: often the source itself (a
    /// rotation).
    fn dest(&mut self, src: &Arg) -> Arg {
        if self.rng.gen_bool(0.25) {
            src.clone()
        } else {
            self.key()
        }
    }

    /// LPOS key element [RANK r] [COUNT n] [MAXLEN m], options in any
    /// order, now and then repeated (the last one wins), missing their
    /// value or unknown.
    fn lpos(&mut self, k: Arg, pushed: &[Arg]) -> Cmd {
        let mut opts: Vec<Vec<Arg>> = Vec::new();
        if self.rng.gen_bool(0.4) {
            let r = self.pos_arg(RANKS, RANKS_BAD);
            opts.push(vec![self.name("RANK"), r]);
        }
        if self.rng.gen_bool(0.4) {
            let c = self.pos_arg(POS_COUNTS, POS_BAD);
            opts.push(vec![self.name("COUNT"), c]);
        }
        if self.rng.gen_bool(0.25) {
            let m = self.pos_arg(MAXLENS, POS_BAD);
            opts.push(vec![self.name("MAXLEN"), m]);
        }
        if self.rng.gen_bool(0.05) {
            let r = self.pos_arg(RANKS, RANKS_BAD);
            opts.push(vec![self.name("RANK"), r]);
        }
        opts.shuffle(&mut self.rng);
        let e = self.sought(pushed);
        let mut args = vec![k, e];
        args.extend(opts.into_iter().flatten());
        if self.rng.gen_bool(0.05) {
            // An option without its value, or none Redis knows.
            args.push(lit(self.pick(&[b"RANK", b"COUNT", b"MAXLEN", b"FOO"])));
        }
        self.cmd("LPOS", args)
    }

    /// LMPOP numkeys key… LEFT|RIGHT [COUNT n], valid or not: numkeys 0,
    /// negative, not a number, more or fewer than the keys given (a key
    /// then read as the direction, or the direction as a key).
    fn lmpop(&mut self, k: Arg) -> Cmd {
        let mut keys = vec![k];
        if self.rng.gen_bool(0.6) {
            keys.extend(self.keys(2));
        }
        let n = keys.len();
        let numkeys = match self.rng.gen_range(0..30) {
            0 => b"0".to_vec(),
            1 => b"-1".to_vec(),
            2 => b"x".to_vec(),
            3 => (n + 1).to_string().into_bytes(),
            4 if n > 1 => (n - 1).to_string().into_bytes(),
            5 => b"9223372036854775807".to_vec(),
            _ => n.to_string().into_bytes(),
        };
        let mut args = vec![Arg::Lit(numkeys)];
        args.extend(keys);
        args.push(self.side());
        if self.rng.gen_bool(0.5) {
            args.push(self.name("COUNT"));
            args.push(lit(self.pick(MPOP_COUNTS)));
        }
        if self.rng.gen_bool(0.05) {
            // COUNT twice, COUNT without its value, or an unknown option.
            let extra: &[&[u8]] = match self.rng.gen_range(0..3) {
                0 => &[b"COUNT", b"2"],
                1 => &[b"COUNT"],
                _ => &[b"FOO"],
            };
            args.extend(extra.iter().map(|b| lit(b)));
        }
        self.cmd("LMPOP", args)
    }

    fn lwrong_arity(&mut self) -> Cmd {
        let form = *LWRONG_ARITY.choose(&mut self.rng).expect("table");
        let mut c = self.cmd(form[0], vec![]);
        for a in &form[1..] {
            let arg = match *a {
                "K" => self.key(),
                "E" => self.elem(),
                other => lit(other.as_bytes()),
            };
            c.args.push(arg);
        }
        c
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::super::{sequence, LISTS};

    /// Every list command (and the LPOS options) turns up in a run the size
    /// of the self-test's; the counts are printed (`--nocapture`).
    #[test]
    fn every_list_command_is_generated() {
        if !LISTS {
            return;
        }
        const NAMES: &[&str] = &[
            "LPUSH",
            "RPUSH",
            "LPUSHX",
            "RPUSHX",
            "LPOP",
            "RPOP",
            "LLEN",
            "LRANGE",
            "LINDEX",
            "LSET",
            "LINSERT",
            "LREM",
            "LTRIM",
            "LPOS",
            "LMOVE",
            "RPOPLPUSH",
            "LMPOP",
        ];
        let mut counts: BTreeMap<String, usize> = BTreeMap::new();
        let mut total = 0;
        for seed in 1..=500 {
            for step in sequence(seed, 80).steps {
                for c in step.cmds {
                    total += 1;
                    let n = c.name();
                    if NAMES.contains(&n.as_str()) {
                        *counts.entry(n).or_default() += 1;
                    }
                }
            }
        }
        let lists: usize = counts.values().sum();
        println!("list commands in seeds 1..=500 × 80: {lists} of {total}: {counts:?}");
        for n in NAMES {
            assert!(counts.get(*n).copied().unwrap_or(0) > 20, "{n}: {counts:?}");
        }
    }
}

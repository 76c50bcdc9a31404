//! The generator's hash commands: HSET HSETNX HMSET HGET HMGET HGETALL HDEL
//! HLEN HEXISTS HKEYS HVALS HSTRLEN HINCRBY HINCRBYFLOAT HRANDFIELD HSCAN —
//! on the same few keys the string commands use, so hashes meet strings
//! (WRONGTYPE both ways), with a handful of fields, repeated fields, and
//! the edge arguments Redis refuses.
//!
//! Relaxed, and why (`norm.rs`): HGETALL, HKEYS, HVALS and HSCAN list in
//! an unspecified order (Redis keeps a small hash in insertion order, Elsa
//! in hash order); HRANDFIELD picks at random, so only the reply's type
//! and length are compared. HSCAN is generated with a COUNT no smaller
//! than the field space, so both servers answer the whole hash at once.

use rand::Rng;

use super::{lit, Arg, Cmd, Gen, Norm};

/// Field names: few, so commands meet each other's fields.
const FIELDS: &[&[u8]] = &[b"f1", b"f2", b"f3", b"", b"f\x00\xff"];
/// Increments for HINCRBY: small, at the limits, and not integers.
const HINCR: &[&[u8]] = &[
    b"1",
    b"-1",
    b"5",
    b"0",
    b"9223372036854775807",
    b"-9223372036854775808",
    b"abc",
    b"1.5",
    b"",
];
/// Increments for HINCRBYFLOAT: decimals, exponents, and refusals.
const HFLOAT: &[&[u8]] = &[
    b"0.5", b"-1.25", b"3", b"1e3", b"-0", b"abc", b"inf", b"-inf", b"nan", b"", b"1e4933",
];
/// HRANDFIELD counts.
const COUNTS: &[&[u8]] = &[
    b"0",
    b"1",
    b"2",
    b"5",
    b"-1",
    b"-3",
    b"abc",
    b"-9223372036854775808",
    b"9223372036854775807",
];

impl Gen {
    fn field(&mut self) -> Arg {
        lit(self.pick(FIELDS))
    }

    fn fields(&mut self, max: usize) -> Vec<Arg> {
        let n = self.rng.gen_range(1..=max);
        (0..n).map(|_| self.field()).collect()
    }

    /// One hash command.
    pub(super) fn hash_command(&mut self) -> Cmd {
        let k = self.key();
        match self.rng.gen_range(0..30) {
            0..=5 => {
                let n = if self.rng.gen_bool(0.8) {
                    "HSET"
                } else {
                    "HMSET"
                };
                let mut args = vec![k];
                for _ in 0..self.rng.gen_range(1..=3) {
                    args.push(self.field());
                    args.push(self.value());
                }
                if self.rng.gen_bool(0.05) {
                    args.pop(); // an odd count: wrong arity
                }
                self.cmd(n, args)
            }
            6 => {
                let (f, v) = (self.field(), self.value());
                self.cmd("HSETNX", vec![k, f, v])
            }
            7..=9 => {
                let f = self.field();
                self.cmd("HGET", vec![k, f])
            }
            10 => {
                let mut args = vec![k];
                args.extend(self.fields(4));
                self.cmd("HMGET", args)
            }
            11..=12 => self.cmd("HGETALL", vec![k]).with(Norm::Pairs),
            13..=14 => {
                let mut args = vec![k];
                args.extend(self.fields(3));
                self.cmd("HDEL", args)
            }
            15 => self.cmd("HLEN", vec![k]),
            16 => {
                let f = self.field();
                self.cmd("HEXISTS", vec![k, f])
            }
            17 => self.cmd("HKEYS", vec![k]).with(Norm::Unordered),
            18 => self.cmd("HVALS", vec![k]).with(Norm::Unordered),
            19 => {
                let f = self.field();
                self.cmd("HSTRLEN", vec![k, f])
            }
            20..=22 => {
                let (f, by) = (self.field(), lit(self.pick(HINCR)));
                self.cmd("HINCRBY", vec![k, f, by])
            }
            23..=24 => {
                let (f, by) = (self.field(), lit(self.pick(HFLOAT)));
                self.cmd("HINCRBYFLOAT", vec![k, f, by])
            }
            25..=26 => self.hrandfield(k),
            _ => self.hscan(k),
        }
    }

    fn hrandfield(&mut self, k: Arg) -> Cmd {
        if self.rng.gen_bool(0.3) {
            return self.cmd("HRANDFIELD", vec![k]).with(Norm::Shape);
        }
        let mut args = vec![k, lit(self.pick(COUNTS))];
        match self.rng.gen_range(0..10) {
            0..=3 => args.push(self.name("WITHVALUES")),
            4 => args.push(lit(b"WITHSCORES")),
            5 => {
                args.push(self.name("WITHVALUES"));
                args.push(lit(b"x"));
            }
            _ => {}
        }
        self.cmd("HRANDFIELD", args).with(Norm::Count)
    }

    fn hscan(&mut self, k: Arg) -> Cmd {
        let cursor: &[u8] = if self.rng.gen_bool(0.9) { b"0" } else { b"x" };
        let mut args = vec![k, lit(cursor)];
        if self.rng.gen_bool(0.4) {
            args.push(self.name("MATCH"));
            args.push(lit(self.pick(&[b"f*", b"*1", b"f[12]", b"*"])));
        }
        match self.rng.gen_range(0..10) {
            0..=2 => {
                args.push(self.name("COUNT"));
                args.push(lit(self.pick(&[b"10", b"100"])));
            }
            // Refused options: answered only when the key is a hash.
            3 => {
                args.push(self.name("COUNT"));
                args.push(lit(self.pick(&[b"0", b"-1", b"abc"])));
            }
            4 => args.push(lit(b"NOVALUES")),
            _ => {}
        }
        self.cmd("HSCAN", args).with(Norm::ScanPairs)
    }
}

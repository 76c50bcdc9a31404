//! Sequences that cross the packing limits both ways (issue 43): a hash,
//! a set and a sorted set of their own keys grow past 128 entries, take
//! elements longer than 64 bytes, and shrink back under, by adds and
//! removes of many elements at once — so Elsa's packed form turns into
//! its map and back (`crates/lattice/src/packed.rs`) while every reply
//! is compared with Redis's (whose listpack turns into its hash table).
//! The keys are only these commands': no SCAN pages them (Elsa's cursors
//! are not Redis's), and lists of them are compared in order only where
//! Redis defines one (ZRANGE).

use rand::Rng;

use super::{lit, Arg, Cmd, Gen, Norm, Sequence, Step};

/// An element of the bulk keys: mostly short, sometimes past 64 bytes.
fn element(prefix: &str, i: u32, long: bool) -> Arg {
    let mut s = format!("{prefix}{i}");
    if long {
        s.push_str(&"-".repeat(70));
    }
    lit(s.as_bytes())
}

impl Gen {
    /// `n` elements from `from` on (a range, so adds and removes meet).
    fn run_of(&mut self, prefix: &str) -> Vec<(u32, Arg)> {
        let from = self.rng.gen_range(0..150);
        let n = self.rng.gen_range(1..=140);
        let long = self.rng.gen_bool(0.1);
        (from..from + n)
            .map(|i| (i, element(prefix, i, long && i % 7 == 0)))
            .collect()
    }

    fn bulk_command(&mut self) -> Cmd {
        match self.rng.gen_range(0..15) {
            0..=1 => {
                let mut args = vec![lit(b"bulk:h")];
                for (i, f) in self.run_of("f") {
                    args.push(f);
                    let v = if self.rng.gen_bool(0.05) {
                        vec![b'v'; 80]
                    } else {
                        format!("v{i}").into_bytes()
                    };
                    args.push(lit(&v));
                }
                self.cmd("HSET", args)
            }
            2 => {
                let mut args = vec![lit(b"bulk:h")];
                args.extend(self.run_of("f").into_iter().map(|(_, f)| f));
                self.cmd("HDEL", args)
            }
            3 => match self.rng.gen_range(0..4) {
                0 => self.cmd("HLEN", vec![lit(b"bulk:h")]),
                1 => self.cmd("HGETALL", vec![lit(b"bulk:h")]).with(Norm::Pairs),
                2 => {
                    let f = element("f", self.rng.gen_range(0..300), false);
                    self.cmd("HGET", vec![lit(b"bulk:h"), f])
                }
                _ => self.cmd("HINCRBY", vec![lit(b"bulk:h"), lit(b"f3"), lit(b"2")]),
            },
            4..=5 => {
                let mut args = vec![lit(b"bulk:s")];
                args.extend(self.run_of("m").into_iter().map(|(_, m)| m));
                self.cmd("SADD", args)
            }
            6 => {
                let mut args = vec![lit(b"bulk:s")];
                args.extend(self.run_of("m").into_iter().map(|(_, m)| m));
                self.cmd("SREM", args)
            }
            7 => match self.rng.gen_range(0..3) {
                0 => self.cmd("SCARD", vec![lit(b"bulk:s")]),
                1 => self
                    .cmd("SMEMBERS", vec![lit(b"bulk:s")])
                    .with(Norm::Unordered),
                _ => {
                    let m = element("m", self.rng.gen_range(0..300), false);
                    self.cmd("SISMEMBER", vec![lit(b"bulk:s"), m])
                }
            },
            8..=9 => {
                let mut args = vec![lit(b"bulk:z")];
                for (i, m) in self.run_of("z") {
                    let score = if i % 3 == 0 {
                        format!("{}.5", i % 40)
                    } else {
                        (i % 40).to_string()
                    };
                    args.push(lit(score.as_bytes()));
                    args.push(m);
                }
                self.cmd("ZADD", args)
            }
            10 => {
                let mut args = vec![lit(b"bulk:z")];
                args.extend(self.run_of("z").into_iter().map(|(_, m)| m));
                self.cmd("ZREM", args)
            }
            11 => {
                let m = element("z", self.rng.gen_range(0..300), false);
                self.cmd("ZINCRBY", vec![lit(b"bulk:z"), lit(b"1.25"), m])
            }
            12 => self.cmd(
                "ZRANGE",
                vec![lit(b"bulk:z"), lit(b"0"), lit(b"-1"), lit(b"WITHSCORES")],
            ),
            13 => match self.rng.gen_range(0..3) {
                0 => self.cmd("ZCARD", vec![lit(b"bulk:z")]),
                1 => {
                    let m = element("z", self.rng.gen_range(0..300), false);
                    self.cmd("ZRANK", vec![lit(b"bulk:z"), m])
                }
                _ => self.cmd(
                    "ZRANGEBYSCORE",
                    vec![
                        lit(b"bulk:z"),
                        lit(b"(10"),
                        lit(b"20.5"),
                        lit(b"WITHSCORES"),
                    ],
                ),
            },
            _ => {
                // Emptied and started over.
                let k = ["bulk:h", "bulk:s", "bulk:z"][self.rng.gen_range(0..3)];
                self.cmd("DEL", vec![lit(k.as_bytes())])
            }
        }
    }
}

/// A sequence of `len` bulk commands for `seed` (see the module doc).
pub fn bulk_sequence(seed: u64, len: usize) -> Sequence {
    let mut g = Gen::seeded(seed);
    let chunk = g.rng.gen_range(2..=16);
    let steps = (0..len).map(|_| Step::one(g.bulk_command())).collect();
    Sequence { seed, steps, chunk }
}

//! The generator's set commands: SADD SREM SMEMBERS SISMEMBER SMISMEMBER
//! SCARD SPOP SRANDMEMBER SSCAN SMOVE SINTER SINTERCARD SUNION SDIFF and
//! the STORE forms — on the same few keys the string and hash commands
//! use, so every type meets every other (WRONGTYPE both ways), with a
//! handful of members (integers among them: Redis's intset encoding).
//!
//! Relaxed, and why (`norm.rs`): member lists come in an unspecified order
//! (Redis sorts an intset and hashes the rest); SRANDMEMBER picks at
//! random (type and length compared). SPOP is generated only with a count
//! no set can reach (it then pops every member, in both servers alike),
//! since a random pop would leave the two servers' sets different for the
//! rest of the sequence.

use rand::Rng;

use super::{lit, Arg, Cmd, Gen, Norm};

/// Members: few, some of them integers.
const MEMBERS: &[&[u8]] = &[b"a", b"b", b"c", b"1", b"2", b"", b"m\x00\xff"];
/// SRANDMEMBER counts.
const COUNTS: &[&[u8]] = &[
    b"0",
    b"1",
    b"3",
    b"20",
    b"-1",
    b"-4",
    b"abc",
    b"-9223372036854775808",
];

impl Gen {
    fn member(&mut self) -> Arg {
        lit(self.pick(MEMBERS))
    }

    fn members(&mut self, max: usize) -> Vec<Arg> {
        let n = self.rng.gen_range(1..=max);
        (0..n).map(|_| self.member()).collect()
    }

    /// One set command.
    pub(super) fn set_command(&mut self) -> Cmd {
        let k = self.key();
        match self.rng.gen_range(0..30) {
            0..=6 => {
                let mut args = vec![k];
                args.extend(self.members(4));
                self.cmd("SADD", args)
            }
            7..=9 => {
                let mut args = vec![k];
                args.extend(self.members(3));
                self.cmd("SREM", args)
            }
            10..=11 => self.cmd("SMEMBERS", vec![k]).with(Norm::Unordered),
            12 => {
                let m = self.member();
                self.cmd("SISMEMBER", vec![k, m])
            }
            13 => {
                let mut args = vec![k];
                args.extend(self.members(3));
                self.cmd("SMISMEMBER", args)
            }
            14 => self.cmd("SCARD", vec![k]),
            15 => {
                // A count past any set's size: every member, in both.
                let c = lit(self.pick(&[b"100", b"-1", b"abc"]));
                self.cmd("SPOP", vec![k, c]).with(Norm::Unordered)
            }
            16..=17 => {
                if self.rng.gen_bool(0.3) {
                    return self.cmd("SRANDMEMBER", vec![k]).with(Norm::Shape);
                }
                let c = lit(self.pick(COUNTS));
                self.cmd("SRANDMEMBER", vec![k, c]).with(Norm::Count)
            }
            18 => {
                let mut args = vec![k, lit(b"0")];
                if self.rng.gen_bool(0.4) {
                    args.push(self.name("MATCH"));
                    args.push(lit(self.pick(&[b"*", b"[ab]", b"1*"])));
                }
                if self.rng.gen_bool(0.3) {
                    args.push(self.name("COUNT"));
                    args.push(lit(self.pick(&[b"100", b"0", b"x"])));
                }
                self.cmd("SSCAN", args).with(Norm::Scan)
            }
            19..=20 => {
                let (to, m) = (self.key(), self.member());
                self.cmd("SMOVE", vec![k, to, m])
            }
            21..=26 => {
                let n = ["SINTER", "SUNION", "SDIFF"][self.rng.gen_range(0..3)];
                let mut args = vec![k];
                args.extend(self.keys(2));
                if self.rng.gen_bool(0.4) {
                    // The STORE form: the first key is the destination.
                    return self.cmd(&format!("{n}STORE"), args);
                }
                self.cmd(n, args).with(Norm::Unordered)
            }
            _ => {
                let keys = self.keys(3);
                let numkeys = match self.rng.gen_range(0..10) {
                    0 => b"0".to_vec(),
                    1 => (keys.len() + 1).to_string().into_bytes(),
                    _ => keys.len().to_string().into_bytes(),
                };
                let mut args = vec![Arg::Lit(numkeys)];
                args.extend(keys);
                if self.rng.gen_bool(0.4) {
                    args.push(self.name("LIMIT"));
                    args.push(lit(self.pick(&[b"0", b"1", b"2", b"-1", b"x"])));
                }
                self.cmd("SINTERCARD", args)
            }
        }
    }
}

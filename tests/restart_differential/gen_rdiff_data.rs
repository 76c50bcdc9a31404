//! The restart-differential generator's single data commands, one
//! function per family: strings, deletes, key commands (RENAME, COPY,
//! MOVE, TTLs), hashes, sets, sorted sets and lists — what plain steps,
//! MULTI blocks and BEGIN blocks are made of.

use rand::seq::SliceRandom;
use rand::Rng;

use super::{RGen, WithNorm, HASHES, HLLS, LISTS, SCORES, SETS, STRINGS, ZSETS};
use crate::gen::Cmd;
use crate::norm::Norm;

impl RGen {
    /// One data command of any family (what MULTI, BEGIN and the plain
    /// steps are made of).
    pub(super) fn data_cmd(&mut self) -> Cmd {
        match self.rng.gen_range(0..100) {
            0..=17 => self.string_cmd(),
            18..=29 => self.delete_cmd(),
            30..=41 => self.key_cmd(),
            42..=52 => self.hash_cmd(),
            53..=64 => self.set_cmd(),
            65..=81 => self.zset_cmd(),
            _ => self.list_cmd(),
        }
    }

    fn string_cmd(&mut self) -> Cmd {
        let k = self.key(STRINGS);
        let v = self.value();
        match self.rng.gen_range(0..17) {
            0..=2 => {
                let mut args = vec![k, v];
                match self.rng.gen_range(0..8) {
                    0 => args.extend([b"EX".to_vec(), b"200".to_vec()]),
                    1 => args.extend([b"PX".to_vec(), b"150000".to_vec()]),
                    2 => args.push(b"KEEPTTL".to_vec()),
                    3 => args.push(b"NX".to_vec()),
                    4 => args.push(b"XX".to_vec()),
                    5 => args.push(b"GET".to_vec()),
                    _ => {}
                }
                self.build("SET", args)
            }
            3..=5 => {
                let n = self.rng.gen_range(2..=4);
                let mut args = Vec::new();
                for _ in 0..n {
                    args.push(self.key(STRINGS));
                    args.push(self.value());
                }
                let name = if self.rng.gen_bool(0.3) {
                    "MSETNX"
                } else {
                    "MSET"
                };
                self.build(name, args)
            }
            6 => self.build("APPEND", vec![k, v]),
            7 => {
                let c = if self.rng.gen_bool(0.6) {
                    b"c1".to_vec()
                } else {
                    k
                };
                match self.rng.gen_range(0..4) {
                    0 => self.build("INCR", vec![c]),
                    1 => self.build("DECRBY", vec![c, b"7".to_vec()]),
                    2 => self.build("INCRBYFLOAT", vec![c, b"1.5".to_vec()]),
                    _ => self.build("INCRBY", vec![c, b"100".to_vec()]),
                }
            }
            8 => self.build("GETSET", vec![k, v]),
            9 => self.build("GETDEL", vec![k]),
            10 => self.build("SETRANGE", vec![k, b"2".to_vec(), v]),
            11 => self.build("SETNX", vec![k, v]),
            12 => self.build("GETEX", vec![k, b"EX".to_vec(), b"300".to_vec()]),
            // HyperLogLogs: written as parts, not whole values.
            13 => {
                let mut args = vec![self.key(HLLS)];
                args.extend(self.members(3));
                self.build("PFADD", args)
            }
            14 => {
                let (d, s) = (self.key(HLLS), self.key(HLLS));
                self.build("PFMERGE", vec![d, s])
            }
            15 => {
                let p = self.key(HLLS);
                self.build("PFCOUNT", vec![p])
            }
            _ => self.build("GETEX", vec![k, b"PERSIST".to_vec()]),
        }
    }

    fn delete_cmd(&mut self) -> Cmd {
        let n = self.rng.gen_range(1..=4);
        let keys: Vec<Vec<u8>> = (0..n).map(|_| self.any_key()).collect();
        let name = if self.rng.gen_bool(0.3) {
            "UNLINK"
        } else {
            "DEL"
        };
        self.build(name, keys)
    }

    fn key_cmd(&mut self) -> Cmd {
        let (a, b) = (self.any_key(), self.any_key());
        match self.rng.gen_range(0..11) {
            0..=1 => self.build("RENAME", vec![a, b]),
            2 => self.build("RENAMENX", vec![a, b]),
            3 => self.build("COPY", vec![a, b]),
            4 => self.build("COPY", vec![a, b, b"REPLACE".to_vec()]),
            5 => {
                let db = self.pick(&[b"1", b"2"]).to_vec();
                self.build("MOVE", vec![a, db])
            }
            6 => {
                let db = self.pick(&[b"0", b"1", b"2"]).to_vec();
                self.build("COPY", vec![a, b, b"DB".to_vec(), db, b"REPLACE".to_vec()])
            }
            7..=8 => {
                let secs = self.pick(&[b"100", b"500", b"5000"]).to_vec();
                let mut args = vec![a, secs];
                if self.rng.gen_bool(0.3) {
                    args.push(self.pick(&[b"NX", b"XX", b"GT", b"LT"]).to_vec());
                }
                self.build("EXPIRE", args)
            }
            9 => self.build("PEXPIRE", vec![a, b"250000".to_vec()]),
            _ => self.build("PERSIST", vec![a]),
        }
    }

    fn hash_cmd(&mut self) -> Cmd {
        let k = self.key(HASHES);
        let f = self.pick(&[b"f", b"g", b"h", b"n"]).to_vec();
        match self.rng.gen_range(0..8) {
            0..=2 => {
                let mut args = vec![k, f, self.value()];
                if self.rng.gen_bool(0.5) {
                    args.extend([b"g".to_vec(), self.value()]);
                }
                self.build("HSET", args)
            }
            3 => {
                let v = self.value();
                self.build("HSETNX", vec![k, f, v])
            }
            4..=5 => {
                let mut args = vec![k, f];
                if self.rng.gen_bool(0.4) {
                    args.push(b"g".to_vec());
                }
                self.build("HDEL", args)
            }
            6 => self.build("HINCRBY", vec![k, b"n".to_vec(), b"3".to_vec()]),
            _ => self.build("HINCRBYFLOAT", vec![k, b"n".to_vec(), b"0.5".to_vec()]),
        }
    }

    fn set_cmd(&mut self) -> Cmd {
        let k = self.key(SETS);
        match self.rng.gen_range(0..10) {
            0..=3 => {
                let mut args = vec![k];
                args.extend(self.members(3));
                self.build("SADD", args)
            }
            4..=5 => {
                let mut args = vec![k];
                args.extend(self.members(2));
                self.build("SREM", args)
            }
            6 => {
                let (to, m) = (self.key(SETS), self.member());
                self.build("SMOVE", vec![k, to, m])
            }
            // Every member: no random choice.
            7 => self
                .build("SPOP", vec![k, b"100".to_vec()])
                .with_norm(Norm::Unordered),
            _ => {
                let name = ["SINTERSTORE", "SUNIONSTORE", "SDIFFSTORE"][self.rng.gen_range(0..3)];
                let (a, b) = (self.key(SETS), self.key(SETS));
                self.build(name, vec![k, a, b])
            }
        }
    }

    fn zset_cmd(&mut self) -> Cmd {
        let k = self.key(ZSETS);
        match self.rng.gen_range(0..14) {
            0..=3 => {
                let mut args = vec![k];
                if self.rng.gen_bool(0.3) {
                    args.push(self.pick(&[b"NX", b"XX", b"GT", b"LT"]).to_vec());
                }
                if self.rng.gen_bool(0.2) {
                    args.push(b"CH".to_vec());
                }
                for _ in 0..self.rng.gen_range(1..=3) {
                    args.push(self.pick(SCORES).to_vec());
                    args.push(self.member());
                }
                self.build("ZADD", args)
            }
            4 => {
                let m = self.member();
                self.build("ZINCRBY", vec![k, b"2".to_vec(), m])
            }
            5 => {
                let mut args = vec![k];
                args.extend(self.members(2));
                self.build("ZREM", args)
            }
            6 => {
                let name = if self.rng.gen_bool(0.5) {
                    "ZPOPMIN"
                } else {
                    "ZPOPMAX"
                };
                let mut args = vec![k];
                if self.rng.gen_bool(0.5) {
                    args.push(b"2".to_vec());
                }
                self.build(name, args)
            }
            7..=8 => {
                let name = ["ZUNIONSTORE", "ZINTERSTORE"][self.rng.gen_range(0..2)];
                let (a, b) = (self.key(ZSETS), self.key(ZSETS));
                let mut args = vec![k, b"2".to_vec(), a, b];
                if self.rng.gen_bool(0.4) {
                    args.extend([b"WEIGHTS".to_vec(), b"1".to_vec(), b"2".to_vec()]);
                }
                if self.rng.gen_bool(0.4) {
                    args.push(b"AGGREGATE".to_vec());
                    args.push(self.pick(&[b"SUM", b"MIN", b"MAX"]).to_vec());
                }
                self.build(name, args)
            }
            9 => {
                let (a, b) = (self.key(ZSETS), self.key(ZSETS));
                self.build("ZDIFFSTORE", vec![k, b"2".to_vec(), a, b])
            }
            10 => {
                let src = self.key(ZSETS);
                self.build(
                    "ZRANGESTORE",
                    vec![k, src, b"0".to_vec(), b"2".to_vec(), b"BYSCORE".to_vec()],
                )
            }
            11 => self.build("ZREMRANGEBYSCORE", vec![k, b"-inf".to_vec(), b"1".to_vec()]),
            12 => self.build("ZREMRANGEBYRANK", vec![k, b"0".to_vec(), b"0".to_vec()]),
            _ => {
                let b = self.key(ZSETS);
                let side = self.pick(&[b"MIN", b"MAX"]).to_vec();
                self.build(
                    "ZMPOP",
                    vec![b"2".to_vec(), k, b, side, b"COUNT".to_vec(), b"2".to_vec()],
                )
            }
        }
    }

    fn list_cmd(&mut self) -> Cmd {
        let k = self.key(LISTS);
        let side = |g: &mut Self| g.pick(&[b"LEFT", b"RIGHT"]).to_vec();
        match self.rng.gen_range(0..15) {
            0..=3 => {
                let name = ["LPUSH", "RPUSH"][self.rng.gen_range(0..2)];
                let mut args = vec![k];
                args.extend(self.members(3));
                self.build(name, args)
            }
            4 => {
                let name = ["LPUSHX", "RPUSHX"][self.rng.gen_range(0..2)];
                let m = self.member();
                self.build(name, vec![k, m])
            }
            5..=6 => {
                let name = ["LPOP", "RPOP"][self.rng.gen_range(0..2)];
                let mut args = vec![k];
                if self.rng.gen_bool(0.4) {
                    args.push(self.pick(&[b"1", b"2", b"10"]).to_vec());
                }
                self.build(name, args)
            }
            7 => {
                let to = self.key(LISTS);
                let (a, b) = (side(self), side(self));
                self.build("LMOVE", vec![k, to, a, b])
            }
            8 => {
                let to = self.key(LISTS);
                self.build("RPOPLPUSH", vec![k, to])
            }
            9 => {
                let n = self.pick(&[b"0", b"1", b"-1"]).to_vec();
                let m = self.member();
                self.build("LREM", vec![k, n, m])
            }
            10 => {
                let (a, b) = *[(&b"1"[..], &b"-1"[..]), (b"0", b"1"), (b"1", b"0")]
                    .choose(&mut self.rng)
                    .expect("table");
                self.build("LTRIM", vec![k, a.to_vec(), b.to_vec()])
            }
            11 => {
                let m = self.member();
                self.build("LSET", vec![k, b"0".to_vec(), m])
            }
            12 => {
                let (p, m) = (self.member(), self.member());
                self.build("LINSERT", vec![k, b"BEFORE".to_vec(), p, m])
            }
            _ => {
                let b = self.key(LISTS);
                let s = side(self);
                self.build(
                    "LMPOP",
                    vec![b"2".to_vec(), k, b, s, b"COUNT".to_vec(), b"2".to_vec()],
                )
            }
        }
    }
}

//! The generator's key commands beyond DEL/EXISTS/TTL: TOUCH, EXPIRETIME,
//! PEXPIRETIME, RENAME, RENAMENX, COPY, OBJECT, MEMORY USAGE, RANDOMKEY,
//! SORT and SORT_RO (BY and GET patterns over the generator's keys: `k*`
//! names `k1` for the element `1`) — and the probes that compare exactly
//! what the general norms relax.
//!
//! SORT is not generated where Redis's order is its own: `BY <constant>`
//! without STORE (a set comes out in its hash order), and ALPHA with BY and
//! LIMIT (Redis's partial sort leaves equal weights in no set order).
//!
//! MOVE and `COPY … DB n` cross databases 0–2 (the generator's SELECT
//! visits the same three).
//!
//! Not generated: `MEMORY DOCTOR|STATS|MALLOC-STATS|PURGE` (they describe
//! Redis's allocator; Elsa refuses them).

use rand::Rng;

use super::{lit, Arg, Cmd, Gen, Norm, Step};

impl Gen {
    /// One key command.
    pub(super) fn key_command(&mut self) -> Cmd {
        match self.rng.gen_range(0..21) {
            0 => {
                let k = self.keys(4);
                self.cmd("TOUCH", k)
            }
            1..=2 => {
                let k = self.key();
                let millis = self.rng.gen_bool(0.5);
                let n = if millis { "PEXPIRETIME" } else { "EXPIRETIME" };
                // Both servers turn a relative TTL into an absolute time
                // a moment apart: the TTL tolerance applies.
                self.cmd(n, vec![k]).with(Norm::Ttl { millis })
            }
            3..=6 => self.rename(),
            7..=9 => self.copy(),
            10..=12 => self.object(),
            13..=14 => self.memory(),
            15..=16 => {
                let k = self.key();
                let db = self.pick(&[b"0", b"1", b"2", b"1", b"16", b"-1", b"x"]);
                self.cmd("MOVE", vec![k, lit(db)])
            }
            18..=19 => self.sort(),
            // Which key comes out is random in both servers.
            _ => self.cmd("RANDOMKEY", vec![]).with(Norm::Shape),
        }
    }

    /// SORT or SORT_RO with random options (see the module doc).
    fn sort(&mut self) -> Cmd {
        const PATTERNS: &[&[u8]] = &[b"k*", b"*", b"k*->f", b"#", b"k*->", b"*x"];
        let ro = self.rng.gen_bool(0.2);
        let mut args = vec![self.key()];
        let store = !ro && self.rng.gen_bool(0.3);
        let by = match self.rng.gen_range(0..4) {
            0 => Some(lit(self.pick(PATTERNS))),
            1 if store => Some(lit(b"nosort")),
            _ => None,
        };
        let alpha = self.rng.gen_bool(0.4);
        let limit = self.rng.gen_bool(0.3) && !(alpha && by.is_some());
        let mut opts: Vec<Vec<Arg>> = Vec::new();
        if let Some(p) = by {
            opts.push(vec![self.name("BY"), p]);
        }
        if alpha {
            opts.push(vec![self.name("ALPHA")]);
        }
        if limit {
            let a = lit(self.pick(&[b"0", b"1", b"-1", b"2", b"100", b"x"]));
            let b = lit(self.pick(&[b"0", b"1", b"-1", b"2", b"3"]));
            opts.push(vec![self.name("LIMIT"), a, b]);
        }
        for _ in 0..self.rng.gen_range(0..3) {
            opts.push(vec![self.name("GET"), lit(self.pick(PATTERNS))]);
        }
        match self.rng.gen_range(0..4) {
            0 => opts.push(vec![self.name("DESC")]),
            1 => opts.push(vec![self.name("ASC")]),
            _ => {}
        }
        if store {
            let dst = self.key();
            opts.push(vec![self.name("STORE"), dst]);
        }
        if self.rng.gen_bool(0.03) {
            opts.push(vec![lit(self.pick(&[b"FOO", b"LIMIT", b"BY"]))]);
        }
        // Options in any order.
        for i in (1..opts.len()).rev() {
            let j = self.rng.gen_range(0..=i);
            opts.swap(i, j);
        }
        args.extend(opts.into_iter().flatten());
        self.cmd(if ro { "SORT_RO" } else { "SORT" }, args)
    }

    /// A source and a destination: often the same key (RENAME answers OK
    /// without doing anything, COPY refuses).
    fn key_pair(&mut self) -> (Arg, Arg) {
        let a = self.key();
        let b = if self.rng.gen_bool(0.15) {
            a.clone()
        } else {
            self.key()
        };
        (a, b)
    }

    fn rename(&mut self) -> Cmd {
        let (a, b) = self.key_pair();
        let n = if self.rng.gen_bool(0.6) {
            "RENAME"
        } else {
            "RENAMENX"
        };
        self.cmd(n, vec![a, b])
    }

    fn copy(&mut self) -> Cmd {
        let (a, b) = self.key_pair();
        let mut args = vec![a, b];
        match self.rng.gen_range(0..10) {
            0..=3 => {}
            4..=5 => args.push(self.name("REPLACE")),
            6 => {
                let db = self.pick(&[b"0", b"1", b"2"]);
                args.extend([self.name("DB"), lit(db)]);
            }
            7 => {
                let db = self.pick(&[b"-1", b"16", b"abc", b"99999999999", b""]);
                args.extend([self.name("DB"), lit(db)]);
                if self.rng.gen_bool(0.3) {
                    args.push(self.name("REPLACE"));
                }
            }
            8 => args.extend([self.name("REPLACE"), self.name("DB"), lit(b"0")]),
            _ => {
                let bad: &[&[u8]] = &[b"FOO", b"DB", b"REPLACEX"];
                args.push(lit(self.pick(bad)));
            }
        }
        self.cmd("COPY", args)
    }

    fn object(&mut self) -> Cmd {
        let k = self.key();
        let (args, norm) = match self.rng.gen_range(0..10) {
            0..=2 => (vec![self.name("ENCODING"), k], Norm::Encoding),
            3..=4 => (vec![self.name("REFCOUNT"), k], Norm::Refcount),
            // Seconds since the last access: both keep it, but the two
            // servers' clocks tick at different moments.
            5 => (vec![self.name("IDLETIME"), k], Norm::Shape),
            6 => (vec![self.name("FREQ"), k], Norm::Exact),
            7 => (vec![self.name("HELP")], Norm::Exact),
            8 => (vec![lit(b"FOO"), k], Norm::Exact),
            _ => {
                // A wrong number of arguments for the subcommand.
                let a = match self.rng.gen_range(0..3) {
                    0 => vec![lit(b"ENCODING")],
                    1 => vec![lit(b"HELP"), k],
                    _ => vec![lit(b"FREQ"), k.clone(), k],
                };
                (a, Norm::Exact)
            }
        };
        self.cmd("OBJECT", args).with(norm)
    }

    fn memory(&mut self) -> Cmd {
        let k = self.key();
        let (args, norm) = match self.rng.gen_range(0..8) {
            // The size is each server's own estimate: only nil vs a number
            // is compared.
            0..=3 => (vec![self.name("USAGE"), k], Norm::Shape),
            4 => {
                let n = self.pick(&[b"0", b"5", b"-1", b"abc"]);
                (
                    vec![self.name("USAGE"), k, self.name("SAMPLES"), lit(n)],
                    Norm::Shape,
                )
            }
            5 => (vec![self.name("USAGE"), k, lit(b"FOO")], Norm::Shape),
            6 => (vec![self.name("HELP")], Norm::Exact),
            _ => (vec![lit(b"FOO")], Norm::Exact),
        };
        self.cmd("MEMORY", args).with(norm)
    }

    /// OBJECT ENCODING / REFCOUNT right after a SET, compared exactly: a
    /// value SET stored is encoded the same way in both servers (the
    /// general norms allow for values Redis built in place). Never inside
    /// MULTI, where Redis's count includes the queued SET's reference.
    pub(super) fn object_probe(&mut self) -> Step {
        let k = self.key();
        let v = self.value();
        let sub = self.pick(&[b"ENCODING", b"REFCOUNT"]);
        Step {
            cmds: vec![
                self.cmd("SET", vec![k.clone(), v]),
                self.cmd("OBJECT", vec![lit(sub), k]),
            ],
            sleep_ms: 0,
        }
    }
}

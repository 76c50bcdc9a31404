//! The generator's string and bit commands beyond GET/SET: GETEX,
//! GETRANGE/SUBSTR, SETRANGE, INCRBYFLOAT, SETBIT, GETBIT, BITCOUNT,
//! BITPOS, BITFIELD, BITFIELD_RO, BITOP, LCS — with their edge arguments:
//! negative and out-of-range indexes,
//! offsets at the 512 MB limit (only where refusing them is cheap: a
//! SETRANGE or SETBIT that really wrote there would make both servers
//! allocate 512 MB), floats at the long double's limits, every option
//! combination, valid or not.

use rand::seq::SliceRandom;
use rand::Rng;

use super::{lit, Arg, Cmd, Gen, EXPIRY_BAD, MS_OK, SECS_OK};

/// GETRANGE / BITCOUNT / BITPOS indexes: inside, past and before the
/// value, at the i64 limits, and not numbers at all.
const INDEXES: &[&[u8]] = &[
    b"0",
    b"1",
    b"2",
    b"3",
    b"-1",
    b"-2",
    b"-3",
    b"5",
    b"7",
    b"8",
    b"9",
    b"15",
    b"100",
    b"-100",
    b"9223372036854775807",
    b"-9223372036854775808",
    b"abc",
    b"1.5",
    b"",
    b"01",
];

/// SETRANGE offsets that write (small: the padding is real memory).
const OFFSETS: &[&[u8]] = &[b"0", b"1", b"3", b"5", b"10", b"100", b"1000"];
/// SETRANGE offsets refused before anything is written, in both servers.
const OFFSETS_BAD: &[&[u8]] = &[
    b"-1",
    b"abc",
    b"1.5",
    b"",
    b"536870912",
    b"9223372036854775807",
    b"-9223372036854775808",
];

/// SETBIT / GETBIT offsets that SETBIT may write (small).
const BITS: &[&[u8]] = &[b"0", b"1", b"6", b"7", b"8", b"13", b"63", b"100", b"1000"];
/// Offsets at and past the 512 MB limit: GETBIT reads them for free,
/// SETBIT refuses the ones past it (and is never sent the last valid one).
const BITS_FAR: &[&[u8]] = &[
    b"4294967295",
    b"4294967296",
    b"-1",
    b"abc",
    b"9223372036854775807",
    b"",
];

/// INCRBYFLOAT increments: ordinary, exact and inexact in binary, at the
/// limits of the long double (1e4932 twice overflows), special names, and
/// things `strtold` reads only partly.
const FLOATS: &[&[u8]] = &[
    b"0.1",
    b"1",
    b"-1",
    b"1.5",
    b"-0.5",
    b"10.50",
    b"3.0e3",
    b"5.0e-3",
    b"1e300",
    b"-1e300",
    b"1e4932",
    b"1.5e-10",
    b"0.000003814697265625",
    b"0x10",
    b"0x1p-3",
    b"+1",
    b"-0",
    b"0",
    b".5",
    b"5.",
    b"9223372036854775807",
    b"abc",
    b"",
    b"inf",
    b"-Infinity",
    b"nan",
    b"1e5000",
    b"1e-5000",
    b" 1",
    b"1 ",
    b"1e",
    b"0x",
];

impl Gen {
    /// One string or bit command.
    pub(super) fn string_command(&mut self) -> Cmd {
        match self.rng.gen_range(0..26) {
            0..=2 => self.getex(),
            3..=4 => self.getrange(),
            5..=6 => self.setrange(),
            7..=8 => self.incrbyfloat(),
            9..=10 => self.setbit(),
            11 => self.getbit(),
            12..=13 => self.bitcount(),
            14..=15 => self.bitpos(),
            16..=17 => self.bitfield("BITFIELD"),
            18 => self.bitfield("BITFIELD_RO"),
            19..=20 => self.bitop(),
            21..=22 => self.hll_command(),
            _ => self.lcs(),
        }
    }

    /// GETEX with no option, PERSIST, one expiry (valid, refused or past),
    /// a conflicting pair, an option only SET takes, or a bare EX.
    fn getex(&mut self) -> Cmd {
        let k = self.key();
        let mut opts: Vec<Vec<Arg>> = Vec::new();
        let mut trailing = None;
        match self.rng.gen_range(0..14) {
            0..=2 => {}
            3..=4 => opts.push(vec![self.name("PERSIST")]),
            5 => opts.push(vec![self.name("EX"), lit(self.pick(SECS_OK))]),
            6 => opts.push(vec![self.name("PX"), lit(self.pick(MS_OK))]),
            7 => {
                let at = Arg::NowSecPlus(self.rng.gen_range(100..=1000));
                opts.push(vec![self.name("EXAT"), at]);
            }
            8 => {
                let at = Arg::NowMsPlus(self.rng.gen_range(100_000..=1_000_000));
                opts.push(vec![self.name("PXAT"), at]);
            }
            9 => {
                // Past: the value is answered, then the key deleted.
                let unit = self.pick(&[b"EXAT", b"PXAT"]);
                opts.push(vec![lit(unit), lit(self.pick(&[b"1", b"1000"]))]);
            }
            10 => {
                let unit = self.pick(&[b"EX", b"PX", b"EXAT", b"PXAT"]);
                opts.push(vec![lit(unit), lit(self.pick(EXPIRY_BAD))]);
            }
            11 => {
                let pair: &[&[&[u8]]] = &[
                    &[b"EX", b"100", b"PX", b"100000"],
                    &[b"PERSIST", b"EX", b"100"],
                    &[b"EX", b"100", b"PERSIST"],
                    &[b"PERSIST", b"PERSIST"],
                    &[b"EX", b"100", b"EX", b"200"],
                    &[b"EXAT", b"1", b"EX", b"100"],
                ];
                let p = pair.choose(&mut self.rng).expect("table");
                opts.push(p.iter().map(|a| lit(a)).collect());
            }
            12 => {
                let set_only = self.pick(&[b"NX", b"XX", b"GET", b"KEEPTTL", b"FOO", b""]);
                opts.push(vec![lit(set_only)]);
            }
            _ => trailing = Some(lit(self.pick(&[b"EX", b"PX", b"EXAT", b"PXAT"]))),
        }
        let mut args = vec![k];
        args.extend(opts.into_iter().flatten());
        args.extend(trailing);
        self.cmd("GETEX", args)
    }

    fn getrange(&mut self) -> Cmd {
        let name = if self.rng.gen_bool(0.3) {
            "SUBSTR"
        } else {
            "GETRANGE"
        };
        let k = self.key();
        let (start, end) = (lit(self.pick(INDEXES)), lit(self.pick(INDEXES)));
        self.cmd(name, vec![k, start, end])
    }

    fn setrange(&mut self) -> Cmd {
        let k = self.key();
        let (offset, value) = match self.rng.gen_range(0..10) {
            0..=6 => (lit(self.pick(OFFSETS)), self.value()),
            7 => (lit(self.pick(OFFSETS_BAD)), self.value()),
            8 => {
                // The last byte the limit allows: only an empty value
                // (nothing written) or two bytes (one too many) are cheap.
                let v = self.pick(&[b"", b"ab"]);
                (lit(b"536870911"), lit(v))
            }
            _ => {
                // An empty value at any offset answers the length.
                let o = self.pick(&[b"0", b"99999999", b"536870912", b"-1"]);
                (lit(o), lit(b""))
            }
        };
        self.cmd("SETRANGE", vec![k, offset, value])
    }

    fn incrbyfloat(&mut self) -> Cmd {
        let k = self.key();
        let by = lit(self.pick(FLOATS));
        self.cmd("INCRBYFLOAT", vec![k, by])
    }

    fn setbit(&mut self) -> Cmd {
        let k = self.key();
        let offset = if self.rng.gen_bool(0.85) {
            self.pick(BITS)
        } else {
            // Refused: never the last valid offset, 4294967295.
            self.pick(&[b"4294967296", b"-1", b"abc", b""])
        };
        let bit = if self.rng.gen_bool(0.85) {
            self.pick(&[b"0", b"1"])
        } else {
            self.pick(&[b"2", b"-1", b"abc", b"01", b""])
        };
        self.cmd("SETBIT", vec![k, lit(offset), lit(bit)])
    }

    fn getbit(&mut self) -> Cmd {
        let k = self.key();
        let offset = if self.rng.gen_bool(0.7) {
            self.pick(BITS)
        } else {
            self.pick(BITS_FAR)
        };
        self.cmd("GETBIT", vec![k, lit(offset)])
    }

    /// A range of 0 to 3 arguments after whatever BITCOUNT/BITPOS take
    /// first, sometimes with a unit (valid or not) or one word too many.
    fn bit_range(&mut self, max: usize) -> Vec<Arg> {
        let n = self.rng.gen_range(0..=max);
        let mut args: Vec<Arg> = (0..n.min(2)).map(|_| lit(self.pick(INDEXES))).collect();
        if n >= 3 {
            let u = self.pick(&[b"BIT", b"BYTE", b"bit", b"byte", b"FOO", b""]);
            args.push(lit(u));
        }
        if self.rng.gen_bool(0.05) {
            args.push(lit(b"BIT"));
        }
        args
    }

    fn bitcount(&mut self) -> Cmd {
        let mut args = vec![self.key()];
        args.extend(self.bit_range(3));
        self.cmd("BITCOUNT", args)
    }

    /// BITFIELD or BITFIELD_RO with 0 to 4 subcommands: every width (and
    /// ones refused), plain and `#` offsets, values at and past each
    /// width's limits, OVERFLOW modes in any case, sometimes an unknown
    /// subcommand or one cut short. Writes stay at small offsets (a write
    /// at the 512 MB limit would make both servers allocate it); GETs
    /// also read far ones.
    fn bitfield(&mut self, name: &str) -> Cmd {
        let mut args = vec![self.key()];
        let ro = name == "BITFIELD_RO";
        for _ in 0..self.rng.gen_range(0..=4) {
            let sub: &[u8] = match self.rng.gen_range(0..12) {
                0..=3 => b"GET",
                4..=5 if ro => b"GET",
                4..=5 => self.pick(&[b"SET", b"set"]),
                6..=8 if ro && self.rng.gen_bool(0.8) => b"get",
                6..=8 => self.pick(&[b"INCRBY", b"incrby"]),
                9..=10 => b"OVERFLOW",
                _ => self.pick(&[b"FOO", b"", b"GET", b"SET"]),
            };
            args.push(lit(sub));
            if sub.eq_ignore_ascii_case(b"OVERFLOW") {
                if self.rng.gen_bool(0.9) {
                    let kind = self.pick(&[
                        b"WRAP", b"SAT", b"FAIL", b"wrap", b"sat", b"fail", b"FOO", b"",
                    ]);
                    args.push(lit(kind));
                }
                continue;
            }
            let writes = !sub.eq_ignore_ascii_case(b"GET");
            let ty = if self.rng.gen_bool(0.9) {
                self.pick(&[
                    b"i1", b"i5", b"i8", b"i16", b"i63", b"i64", b"u1", b"u7", b"u8", b"u16",
                    b"u63",
                ])
            } else {
                self.pick(&[b"u64", b"i65", b"I8", b"x8", b"i0", b"i", b"", b"i08"])
            };
            let offset = if self.rng.gen_bool(0.85) {
                self.pick(&[
                    b"0", b"1", b"3", b"7", b"8", b"13", b"100", b"#0", b"#1", b"#3", b"#10",
                ])
            } else if writes {
                self.pick(&[b"-1", b"abc", b"", b"#", b"#-1", b"4294967296"])
            } else {
                self.pick(&[
                    b"4294967295",
                    b"4294967233",
                    b"#536870911",
                    b"-1",
                    b"#",
                    b"4294967296",
                ])
            };
            // Now and then cut short: the syntax error of a missing argument.
            if self.rng.gen_bool(0.04) {
                break;
            }
            args.push(lit(ty));
            args.push(lit(offset));
            if writes {
                let value = self.pick(&[
                    b"0",
                    b"1",
                    b"-1",
                    b"5",
                    b"100",
                    b"127",
                    b"128",
                    b"255",
                    b"256",
                    b"-128",
                    b"-129",
                    b"9223372036854775807",
                    b"-9223372036854775808",
                    b"abc",
                    b"",
                    b"1.5",
                ]);
                args.push(lit(value));
            }
        }
        self.cmd(name, args)
    }

    /// BITOP over 1 to 3 sources of any type (a destination among them
    /// now and then), NOT with one or more, and names it does not know.
    fn bitop(&mut self) -> Cmd {
        let how = if self.rng.gen_bool(0.9) {
            self.pick(&[b"AND", b"OR", b"XOR", b"NOT", b"and", b"Xor", b"not"])
        } else {
            self.pick(&[b"NAND", b"", b"DIFF", b"ONE"])
        };
        let mut args = vec![lit(how), self.key()];
        args.extend(self.keys(3));
        self.cmd("BITOP", args)
    }

    /// LCS of two keys of any type (values up to the generator's 20 kB
    /// ones, whose table passes the 512 MB limit) with 0 to 3 options,
    /// valid, conflicting (LEN with IDX), refused or cut short.
    fn lcs(&mut self) -> Cmd {
        let mut args = vec![self.key(), self.key()];
        for _ in 0..self.rng.gen_range(0..=3) {
            match self.rng.gen_range(0..10) {
                0..=2 => args.push(lit(self.pick(&[b"IDX", b"idx"]))),
                3 => args.push(lit(b"LEN")),
                4..=5 => args.push(lit(b"WITHMATCHLEN")),
                6..=7 => {
                    args.push(lit(b"MINMATCHLEN"));
                    if self.rng.gen_bool(0.9) {
                        args.push(lit(self.pick(&[b"0", b"1", b"2", b"4", b"-1", b"abc"])));
                    }
                }
                _ => args.push(lit(self.pick(&[b"FOO", b""]))),
            }
        }
        self.cmd("LCS", args)
    }

    fn bitpos(&mut self) -> Cmd {
        let bit = if self.rng.gen_bool(0.9) {
            self.pick(&[b"0", b"1"])
        } else {
            self.pick(&[b"2", b"-1", b"abc"])
        };
        let mut args = vec![self.key(), lit(bit)];
        args.extend(self.bit_range(3));
        self.cmd("BITPOS", args)
    }
}

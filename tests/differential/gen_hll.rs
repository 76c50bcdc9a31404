//! The generator's HyperLogLog commands (chosen among the string
//! commands, so they meet plain strings, numbers and keys of every other
//! type): PFADD of none to many elements (enough at times to make a value
//! dense), PFCOUNT of one key (which writes the cached count back) and of
//! several, PFMERGE, PFDEBUG ENCODING/DECODE/TODENSE, and GET of the
//! bytes — every reply compared exactly, so the values' bytes are too.

use rand::Rng;

use super::{lit, Arg, Cmd, Gen};

impl Gen {
    /// One HyperLogLog command (or a GET of the bytes one made).
    pub(super) fn hll_command(&mut self) -> Cmd {
        match self.rng.gen_range(0..12) {
            0..=4 => {
                let k = self.key();
                let n = match self.rng.gen_range(0..10) {
                    0 => 0,
                    1 => self.rng.gen_range(100..400),
                    _ => self.rng.gen_range(1..6),
                };
                let base = self.rng.gen_range(0..50);
                let mut args = vec![k];
                args.extend((0..n).map(|i| Arg::Lit(format!("e{}", base + i * 3).into_bytes())));
                self.cmd("PFADD", args)
            }
            5..=6 => {
                let keys = self.keys(3);
                self.cmd("PFCOUNT", keys)
            }
            7..=8 => {
                let keys = self.keys(3);
                self.cmd("PFMERGE", keys)
            }
            9 => {
                let sub = self.pick(&[b"ENCODING", b"DECODE", b"TODENSE"]);
                let k = self.key();
                self.cmd("PFDEBUG", vec![lit(sub), k])
            }
            _ => {
                let k = self.key();
                self.cmd("GET", vec![k])
            }
        }
    }
}

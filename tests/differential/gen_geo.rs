//! The generator's GEO commands (on sorted sets, chosen among the sorted-set
//! commands, so they meet sets whose scores no GEOADD wrote and keys of
//! every other type): GEOADD (NX XX CH), GEOPOS, GEODIST, GEOHASH,
//! GEORADIUS, GEORADIUSBYMEMBER (STORE, STOREDIST) and their `_RO` forms,
//! GEOSEARCH and GEOSEARCHSTORE (FROMMEMBER FROMLONLAT, BYRADIUS BYBOX, ASC
//! DESC, COUNT [ANY], WITHCOORD WITHDIST WITHHASH) — positions from a few
//! cities a few hundred kilometres apart and the edges of the indexable
//! area, sizes from 0 to half the earth, with bad values (a longitude
//! past 180, a negative radius, an unknown unit, COUNT 0, ANY without
//! COUNT, options in conflict) now and then. Every reply is compared
//! exactly.

use rand::Rng;

use super::{lit, Arg, Cmd, Gen};

/// Longitudes: Palermo, Catania, Rome, London, the antimeridian; bad ones.
const LONS: &[&[u8]] = &[
    b"13.361389",
    b"15.087269",
    b"12.496366",
    b"-0.127758",
    b"180",
    b"-180",
];
const LATS: &[&[u8]] = &[
    b"38.115556",
    b"37.502669",
    b"41.902782",
    b"51.507351",
    b"85.05112878",
    b"-85.05112878",
];
const COORDS_BAD: &[&[u8]] = &[b"200", b"-180.1", b"85.1", b"x", b"", b"nan"];
const SIZES: &[&[u8]] = &[b"0", b"1", b"100", b"250", b"500", b"1500", b"20000"];
const SIZES_BAD: &[&[u8]] = &[b"-1", b"x", b""];
const UNITS: &[&[u8]] = &[b"km", b"KM", b"m", b"mi", b"ft"];
const COUNTS: &[&[u8]] = &[b"1", b"2", b"3", b"10"];
const COUNTS_BAD: &[&[u8]] = &[b"0", b"-1", b"x"];

impl Gen {
    /// A longitude, now and then a bad one.
    fn lon(&mut self) -> Arg {
        lit(if self.rng.gen_bool(0.05) {
            self.pick(COORDS_BAD)
        } else {
            self.pick(LONS)
        })
    }

    fn lat(&mut self) -> Arg {
        lit(if self.rng.gen_bool(0.05) {
            self.pick(COORDS_BAD)
        } else {
            self.pick(LATS)
        })
    }

    /// A size and its unit.
    fn size(&mut self) -> Vec<Arg> {
        let n = if self.rng.gen_bool(0.05) {
            self.pick(SIZES_BAD)
        } else {
            self.pick(SIZES)
        };
        let u = if self.rng.gen_bool(0.03) {
            &b"parsec"[..]
        } else {
            self.pick(UNITS)
        };
        vec![lit(n), lit(u)]
    }

    /// One GEO command on `k`.
    pub(super) fn geo_command_on(&mut self, k: Arg) -> Cmd {
        match self.rng.gen_range(0..10) {
            0..=2 => {
                let mut args = vec![k];
                for f in ["NX", "XX", "CH"] {
                    if self.rng.gen_bool(0.1) {
                        args.push(self.name(f));
                    }
                }
                for _ in 0..self.rng.gen_range(1..=3) {
                    args.push(self.lon());
                    args.push(self.lat());
                    args.push(self.zmember());
                }
                if self.rng.gen_bool(0.03) {
                    args.pop();
                }
                self.cmd("GEOADD", args)
            }
            3 => {
                let mut args = vec![k];
                args.extend(self.zmembers(3));
                self.cmd("GEOPOS", args)
            }
            4 => {
                let mut args = vec![k];
                args.extend(self.zmembers(3));
                self.cmd("GEOHASH", args)
            }
            5 => {
                let (a, b) = (self.zmember(), self.zmember());
                let mut args = vec![k, a, b];
                if self.rng.gen_bool(0.6) {
                    args.push(self.size().pop().expect("unit"));
                }
                self.cmd("GEODIST", args)
            }
            6 => {
                let ro = self.rng.gen_bool(0.3);
                let by_member = self.rng.gen_bool(0.4);
                let mut args = vec![k];
                if by_member {
                    args.push(self.zmember());
                } else {
                    args.push(self.lon());
                    args.push(self.lat());
                }
                args.extend(self.size());
                self.search_options(&mut args, !ro);
                let name = match (by_member, ro) {
                    (false, false) => "GEORADIUS",
                    (false, true) => "GEORADIUS_RO",
                    (true, false) => "GEORADIUSBYMEMBER",
                    (true, true) => "GEORADIUSBYMEMBER_RO",
                };
                self.cmd(name, args)
            }
            _ => {
                let store = self.rng.gen_bool(0.3);
                let mut args = Vec::new();
                if store {
                    args.push(self.key());
                }
                args.push(k);
                if self.rng.gen_bool(0.95) {
                    if self.rng.gen_bool(0.4) {
                        args.push(self.name("FROMMEMBER"));
                        args.push(self.zmember());
                    } else {
                        args.push(self.name("FROMLONLAT"));
                        args.push(self.lon());
                        args.push(self.lat());
                    }
                }
                if self.rng.gen_bool(0.95) {
                    if self.rng.gen_bool(0.5) {
                        args.push(self.name("BYRADIUS"));
                        args.extend(self.size());
                    } else {
                        args.push(self.name("BYBOX"));
                        let w = self.size();
                        args.push(w[0].clone());
                        args.extend(self.size());
                    }
                }
                self.search_options(&mut args, false);
                if store && self.rng.gen_bool(0.4) {
                    args.push(self.name("STOREDIST"));
                }
                self.cmd(if store { "GEOSEARCHSTORE" } else { "GEOSEARCH" }, args)
            }
        }
    }

    /// A search's options, in random order; STORE/STOREDIST with `store`.
    fn search_options(&mut self, args: &mut Vec<Arg>, store: bool) {
        let mut opts: Vec<Vec<Arg>> = Vec::new();
        for o in ["WITHDIST", "WITHCOORD", "WITHHASH"] {
            if self.rng.gen_bool(0.3) {
                opts.push(vec![self.name(o)]);
            }
        }
        match self.rng.gen_range(0..4) {
            0 => opts.push(vec![self.name("ASC")]),
            1 => opts.push(vec![self.name("DESC")]),
            _ => {}
        }
        if self.rng.gen_bool(0.4) {
            let n = if self.rng.gen_bool(0.05) {
                self.pick(COUNTS_BAD)
            } else {
                self.pick(COUNTS)
            };
            opts.push(vec![self.name("COUNT"), lit(n)]);
            if self.rng.gen_bool(0.3) {
                opts.push(vec![self.name("ANY")]);
            }
        } else if self.rng.gen_bool(0.03) {
            opts.push(vec![self.name("ANY")]);
        }
        if store && self.rng.gen_bool(0.2) {
            let dst = self.key();
            let which = if self.rng.gen_bool(0.5) {
                "STORE"
            } else {
                "STOREDIST"
            };
            opts.push(vec![self.name(which), dst]);
        }
        // Options in any order.
        for i in (1..opts.len()).rev() {
            let j = self.rng.gen_range(0..=i);
            opts.swap(i, j);
        }
        args.extend(opts.into_iter().flatten());
    }
}

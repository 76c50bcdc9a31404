//! The restart-differential generator: the differential test's sequences
//! (`differential/gen.rs`, every command Elsa shares with Redis 7, on keys
//! `k1`–`k4`…) with this module's steps mixed in between, and restarts of
//! both servers at random clean points (outside MULTI, nothing watched).
//!
//! This module's steps write every data type through every write family —
//! single- and multi-key (MSET, MSETNX, RENAME, COPY, MOVE, SMOVE, LMOVE,
//! the STORE forms, ZMPOP/LMPOP), deletes and pops of every kind, long
//! TTLs set, changed and removed, short TTLs that lapse (on keys `t1`–`t3`,
//! which nothing else touches), MULTI/EXEC with and without WATCH, EVAL and
//! EVALSHA of scripts writing several keys, SELECT and FLUSHDB, values of
//! 100 kB, and Elsa's `BEGIN … COMMIT` at each level (run on Redis as the
//! MULTI/EXEC with the same commands: one client, so the same effect).
//!
//! Keys are drawn per type (`s*`/`m*` strings, `h*` hashes, `x*` sets, `z*`
//! sorted sets, `l*` lists) so most writes succeed, and a quarter of the
//! time from every pool and the base generator's keys, so types meet.
//!
//! Random outcomes are never generated: SPOP takes a count past any set's
//! size, and nothing reads a key whose TTL may be lapsing (a read would
//! race the clock; `t*` keys are only ever overwritten, after a DEL).

use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};

use crate::gen::{self, Arg, Cmd, Step};
use crate::norm::Norm;
use crate::servers::RestartKind;

// The single data commands of every family.
#[path = "gen_rdiff_data.rs"]
mod data;

/// One unit of a sequence.
#[derive(Clone, Debug)]
pub enum Item {
    /// Commands sent in lockstep to both servers, then an optional sleep.
    /// `short_ttl_ms`: the longest TTL of at most a few seconds the step
    /// gives a `t*` key (0: none), so the runner knows a key may lapse.
    Step { step: Step, short_ttl_ms: u64 },
    /// `BEGIN [level] … COMMIT` on Elsa, `MULTI … EXEC` on Redis.
    Begin {
        level: Option<&'static str>,
        cmds: Vec<Cmd>,
    },
    /// Both servers stopped `kind`'s way and started again, after
    /// `sleep_ms` of quiet (so Elsa's collector and snapshots run).
    Restart { kind: RestartKind, sleep_ms: u64 },
}

impl Item {
    pub fn commands(&self) -> usize {
        match self {
            Item::Step { step, .. } => step.cmds.len(),
            Item::Begin { cmds, .. } => cmds.len() + 2,
            Item::Restart { .. } => 0,
        }
    }
}

/// A generated sequence and the settings it runs under.
#[derive(Clone, Debug)]
pub struct RSequence {
    pub seed: u64,
    pub items: Vec<Item>,
    /// Elsa's `--snapshot-interval-sec` for this run.
    pub snapshot_sec: u64,
}

fn lit(b: &[u8]) -> Arg {
    Arg::Lit(b.to_vec())
}

fn cmd(words: &[&[u8]]) -> Cmd {
    Cmd {
        args: words.iter().map(|w| lit(w)).collect(),
        norm: Norm::Exact,
    }
}

fn cmd_args(args: Vec<Arg>) -> Cmd {
    Cmd {
        args,
        norm: Norm::Exact,
    }
}

fn one(c: Cmd) -> Step {
    Step {
        cmds: vec![c],
        sleep_ms: 0,
    }
}

/// Whether a connection is in MULTI or may have keys watched, from the
/// commands alone (as `gen.rs` tracks it): restarts and this module's
/// steps go only where neither holds.
#[derive(Default, Clone, Copy)]
pub struct Clean {
    multi: bool,
    watch: bool,
}

impl Clean {
    pub fn after(&mut self, c: &Cmd) {
        let name = c.name();
        let exact = |n: &str| c.is(n, 1);
        if name == "WATCH" && !self.multi && c.args.len() > 1 {
            self.watch = true;
        } else if (self.multi && (exact("EXEC") || exact("DISCARD")))
            || exact("UNWATCH")
            || exact("RESET")
            || name == "QUIT"
        {
            self.watch = false;
        }
        if exact("MULTI") {
            self.multi = true;
        } else if exact("EXEC") || exact("DISCARD") || exact("RESET") || name == "QUIT" {
            self.multi = false;
        }
    }

    pub fn is_clean(&self) -> bool {
        !self.multi && !self.watch
    }
}

const STRINGS: &[&[u8]] = &[b"s1", b"s2", b"m1", b"m2", b"m3", b"m4", b"m5", b"c1"];
const HASHES: &[&[u8]] = &[b"h1", b"h2"];
/// HyperLogLogs (PFADD, PFMERGE, PFCOUNT).
const HLLS: &[&[u8]] = &[b"p1", b"p2"];
const SETS: &[&[u8]] = &[b"x1", b"x2", b"x3"];
const ZSETS: &[&[u8]] = &[b"z1", b"z2", b"z3"];
const LISTS: &[&[u8]] = &[b"l1", b"l2", b"l3"];
/// The base generator's plain keys.
const BASE: &[&[u8]] = &[b"k1", b"k2", b"k3", b"k4"];
/// Keys given short TTLs: only [`RGen::short_ttl`] touches them.
const SHORT: &[&[u8]] = &[b"t1", b"t2", b"t3"];
const VALUES: &[&[u8]] = &[b"a", b"b", b"c", b"1", b"2", b"10", b"-3", b"hello", b""];
const MEMBERS: &[&[u8]] = &[b"a", b"b", b"c", b"d", b"1", b"2"];
const SCORES: &[&[u8]] = &[b"1", b"2", b"-1.5", b"3.25", b"0", b"10"];

/// The length of a large value (the "100 kB").
const BIG: usize = 100_000;

struct RGen {
    rng: StdRng,
}

impl RGen {
    fn pick<'a>(&mut self, from: &[&'a [u8]]) -> &'a [u8] {
        from.choose(&mut self.rng).expect("non-empty table")
    }

    /// A key of `pool` three times in four, else of any pool.
    fn key(&mut self, pool: &[&[u8]]) -> Vec<u8> {
        if self.rng.gen_bool(0.75) {
            return self.pick(pool).to_vec();
        }
        let pools = [STRINGS, HASHES, SETS, ZSETS, LISTS, BASE, HLLS];
        let p = *pools.choose(&mut self.rng).expect("pools");
        self.pick(p).to_vec()
    }

    fn any_key(&mut self) -> Vec<u8> {
        let pools = [STRINGS, HASHES, SETS, ZSETS, LISTS, BASE, HLLS];
        let p = *pools.choose(&mut self.rng).expect("pools");
        self.pick(p).to_vec()
    }

    fn value(&mut self) -> Vec<u8> {
        if self.rng.gen_bool(0.03) {
            return vec![b'v'; BIG];
        }
        self.pick(VALUES).to_vec()
    }

    fn member(&mut self) -> Vec<u8> {
        self.pick(MEMBERS).to_vec()
    }

    fn members(&mut self, max: usize) -> Vec<Vec<u8>> {
        let n = self.rng.gen_range(1..=max);
        (0..n).map(|_| self.member()).collect()
    }

    fn build(&mut self, name: &str, rest: Vec<Vec<u8>>) -> Cmd {
        let mut args = vec![lit(name.as_bytes())];
        args.extend(rest.into_iter().map(Arg::Lit));
        cmd_args(args)
    }

    /// A `t*` key given a TTL of 0.3–2.5 s: a string set with it, or a
    /// key of any type deleted, made again and given it. Nothing reads
    /// these keys, and the DEL's count (which depends on whether the old
    /// one lapsed yet) is compared by type only.
    fn short_ttl(&mut self) -> Item {
        let k = self.pick(SHORT).to_vec();
        let ms = self.rng.gen_range(300..=2500u64);
        let ms_b = ms.to_string().into_bytes();
        let v = self.value();
        let cmds = match self.rng.gen_range(0..4) {
            0 => vec![self.build("SET", vec![k, v, b"PX".to_vec(), ms_b])],
            1 => vec![self.build("PSETEX", vec![k, ms_b, v])],
            _ => {
                let make: Vec<&[u8]> = match self.rng.gen_range(0..5) {
                    0 => vec![b"SET", b"v"],
                    1 => vec![b"HSET", b"f", b"v"],
                    2 => vec![b"SADD", b"a", b"b"],
                    3 => vec![b"ZADD", b"1", b"a"],
                    _ => vec![b"RPUSH", b"a", b"b"],
                };
                let mut create = vec![lit(make[0]), lit(&k)];
                create.extend(make[1..].iter().map(|w| lit(w)));
                vec![
                    self.build("DEL", vec![k.clone()]).with_norm(Norm::Shape),
                    cmd_args(create),
                    self.build("PEXPIRE", vec![k, ms_b]),
                ]
            }
        };
        Item::Step {
            step: Step { cmds, sleep_ms: 0 },
            short_ttl_ms: ms,
        }
    }

    /// MULTI … EXEC (or DISCARD), with or without WATCH, and sometimes a
    /// write of a watched key in between (the EXEC then fails in both).
    fn multi(&mut self) -> Step {
        let mut cmds = Vec::new();
        let watched = self.rng.gen_bool(0.5);
        if watched {
            let n = self.rng.gen_range(1..=2);
            let keys: Vec<Vec<u8>> = (0..n).map(|_| self.any_key()).collect();
            let first = keys[0].clone();
            cmds.push(self.build("WATCH", keys));
            if self.rng.gen_bool(0.3) {
                cmds.push(self.build("SET", vec![first, b"w".to_vec()]));
            }
        }
        cmds.push(cmd(&[b"MULTI"]));
        for _ in 0..self.rng.gen_range(1..=4) {
            let c = if self.rng.gen_bool(0.1) {
                self.script(true).cmds.pop().expect("a script")
            } else {
                self.data_cmd()
            };
            cmds.push(c);
        }
        let end: &[u8] = if self.rng.gen_bool(0.1) {
            b"DISCARD"
        } else {
            b"EXEC"
        };
        cmds.push(cmd(&[end]));
        Step { cmds, sleep_ms: 0 }
    }

    /// EVAL (or SCRIPT LOAD, then EVALSHA) of a script writing several
    /// keys. `pcall_only`: every call through `redis.pcall`, so the script
    /// cannot raise (else one in five uses `redis.call`).
    fn script(&mut self, pcall_only: bool) -> Step {
        let n = self.rng.gen_range(2..=4usize);
        let mut keys: Vec<Vec<u8>> = Vec::new();
        while keys.len() < n {
            let k = self.any_key();
            if !keys.contains(&k) {
                keys.push(k);
            }
        }
        let call = if pcall_only || self.rng.gen_bool(0.8) {
            "redis.pcall"
        } else {
            "redis.call"
        };
        let mut body = String::new();
        for _ in 0..self.rng.gen_range(2..=5) {
            let i = self.rng.gen_range(1..=n);
            let j = self.rng.gen_range(1..=n);
            let op = match self.rng.gen_range(0..18) {
                0 => format!("'SET', KEYS[{i}], ARGV[1]"),
                1 => format!("'DEL', KEYS[{i}]"),
                2 => format!("'SADD', KEYS[{i}], ARGV[1], ARGV[2]"),
                3 => format!("'SREM', KEYS[{i}], ARGV[1]"),
                4 => format!("'HSET', KEYS[{i}], 'f', ARGV[1], 'g', ARGV[2]"),
                5 => format!("'HDEL', KEYS[{i}], 'f'"),
                6 => format!("'RPUSH', KEYS[{i}], ARGV[1], ARGV[2]"),
                7 => format!("'LPOP', KEYS[{i}]"),
                8 => format!("'ZADD', KEYS[{i}], 1, ARGV[1], 2, ARGV[2]"),
                9 => format!("'ZREM', KEYS[{i}], ARGV[1]"),
                10 => format!("'INCR', KEYS[{i}]"),
                11 => format!("'APPEND', KEYS[{i}], ARGV[1]"),
                12 => format!("'EXPIRE', KEYS[{i}], 500"),
                13 => format!("'PERSIST', KEYS[{i}]"),
                14 => format!("'RENAME', KEYS[{i}], KEYS[{j}]"),
                15 => format!("'COPY', KEYS[{i}], KEYS[{j}], 'REPLACE'"),
                16 => format!("'SMOVE', KEYS[{i}], KEYS[{j}], ARGV[1]"),
                _ => format!("'LMOVE', KEYS[{i}], KEYS[{j}], 'LEFT', 'RIGHT'"),
            };
            body.push_str(&format!("{call}({op}); "));
        }
        body.push_str("return 'ok'");
        let (a1, a2) = (self.member(), self.member());
        let mut rest = vec![n.to_string().into_bytes()];
        rest.extend(keys);
        rest.extend([a1, a2]);
        if pcall_only || self.rng.gen_bool(0.7) {
            let mut args = vec![body.into_bytes()];
            args.extend(rest);
            return one(self.build("EVAL", args));
        }
        let sha = sha1_hex(body.as_bytes());
        let load = self.build("SCRIPT", vec![b"LOAD".to_vec(), body.into_bytes()]);
        let mut args = vec![sha.into_bytes()];
        args.extend(rest);
        Step {
            cmds: vec![load, self.build("EVALSHA", args)],
            sleep_ms: 0,
        }
    }

    /// The reproductions, as steps: keys written by one multi-key
    /// command, then deleted or emptied one command at a time.
    fn delete_one_by_one(&mut self) -> Step {
        let cmds = match self.rng.gen_range(0..4) {
            0 => vec![
                cmd(&[b"MSET", b"m1", b"a", b"m2", b"b", b"m3", b"c", b"m4", b"d"]),
                cmd(&[b"DEL", b"m1"]),
                cmd(&[b"DEL", b"m2"]),
                cmd(&[b"DEL", b"m3"]),
                cmd(&[b"DEL", b"m4"]),
                cmd(&[b"SET", b"m5", b"e"]),
            ],
            1 => vec![
                cmd(&[b"MULTI"]),
                cmd(&[b"RPUSH", b"l1", b"x", b"y"]),
                cmd(&[b"SET", b"s1", b"1"]),
                cmd(&[b"EXEC"]),
                cmd(&[b"LPOP", b"l1"]),
                cmd(&[b"LPOP", b"l1"]),
            ],
            2 => vec![
                cmd(&[b"MULTI"]),
                cmd(&[b"SADD", b"x1", b"a", b"b"]),
                cmd(&[b"HSET", b"h1", b"f", b"1"]),
                cmd(&[b"ZADD", b"z1", b"1", b"a"]),
                cmd(&[b"EXEC"]),
                cmd(&[b"SREM", b"x1", b"a", b"b"]),
                cmd(&[b"HDEL", b"h1", b"f"]),
                cmd(&[b"ZPOPMIN", b"z1"]),
            ],
            _ => vec![
                cmd(&[b"MSET", b"m1", b"a", b"k1", b"b", b"s2", b"c"]),
                cmd(&[b"RENAME", b"m1", b"m2"]),
                cmd(&[b"DEL", b"m2", b"k1"]),
                cmd(&[b"GETDEL", b"s2"]),
            ],
        };
        Step { cmds, sleep_ms: 0 }
    }

    /// A value of 100 kB, written to every type.
    fn big(&mut self) -> Step {
        let fill = self.pick(&[b"v", b"w"])[0];
        let v = vec![fill; BIG];
        let (name, pool): (&str, &[&[u8]]) = match self.rng.gen_range(0..6) {
            0 => ("SET", STRINGS),
            1 => ("APPEND", STRINGS),
            2 => ("HSET", HASHES),
            3 => ("RPUSH", LISTS),
            4 => ("SADD", SETS),
            _ => ("ZADD", ZSETS),
        };
        let k = self.pick(pool).to_vec();
        let args = match name {
            "HSET" => vec![k, b"big".to_vec(), v],
            "ZADD" => vec![k, b"5".to_vec(), v],
            _ => vec![k, v],
        };
        let c = self.build(name, args);
        one(c)
    }

    fn select_or_flush(&mut self) -> Step {
        if self.rng.gen_bool(0.25) {
            let args = if self.rng.gen_bool(0.3) {
                vec![b"ASYNC".to_vec()]
            } else {
                vec![]
            };
            return one(self.build("FLUSHDB", args));
        }
        let db = self.pick(&[b"0", b"0", b"1", b"2"]).to_vec();
        one(self.build("SELECT", vec![db]))
    }

    /// One item of this module's, at a clean point.
    fn item(&mut self) -> Item {
        let step = match self.rng.gen_range(0..100) {
            0..=39 => one(self.data_cmd()),
            40..=47 => return self.short_ttl(),
            48..=57 => self.multi(),
            58..=65 => self.script(false),
            66..=70 => self.select_or_flush(),
            71..=73 => self.big(),
            74..=77 => self.delete_one_by_one(),
            78..=84 => {
                let level = *[None, Some("RC"), Some("RR"), Some("SI")]
                    .choose(&mut self.rng)
                    .expect("levels");
                let n = self.rng.gen_range(1..=4);
                let cmds = (0..n).map(|_| self.data_cmd()).collect();
                return Item::Begin { level, cmds };
            }
            _ => {
                // Two or three writes in a row.
                let n = self.rng.gen_range(2..=3);
                Step {
                    cmds: (0..n).map(|_| self.data_cmd()).collect(),
                    sleep_ms: 0,
                }
            }
        };
        Item::Step {
            step,
            short_ttl_ms: 0,
        }
    }

    fn restart(&mut self) -> Item {
        let kind = *RestartKind::ALL.choose(&mut self.rng).expect("kinds");
        // Sometimes quiet first, so Elsa's collector (once a second) and
        // snapshots run before the stop.
        let sleep_ms = if self.rng.gen_bool(0.35) {
            self.rng.gen_range(1000..=3000)
        } else {
            0
        };
        Item::Restart { kind, sleep_ms }
    }
}

trait WithNorm {
    fn with_norm(self, n: Norm) -> Self;
}

impl WithNorm for Cmd {
    fn with_norm(mut self, n: Norm) -> Cmd {
        self.norm = n;
        self
    }
}

/// The sequence for `seed`: about `len` commands, half of them the base
/// generator's, and 1–4 restarts (at least one).
pub fn sequence(seed: u64, len: usize) -> RSequence {
    let base = gen::sequence(seed, len / 2);
    let mut g = RGen {
        rng: StdRng::seed_from_u64(seed ^ 0x7265_7374_6172_7421),
    };
    let snapshot_sec = *[0u64, 1, 2, 5].choose(&mut g.rng).expect("table");
    let mut items = Vec::new();
    let mut clean = Clean::default();
    let mut commands = 0;
    let mut clean_points = Vec::new();
    for step in base.steps {
        if clean.is_clean() {
            while g.rng.gen_bool(0.5) {
                let it = g.item();
                commands += it.commands();
                items.push(it);
                clean_points.push(items.len());
            }
        }
        for c in &step.cmds {
            clean.after(c);
        }
        commands += step.cmds.len();
        items.push(Item::Step {
            step,
            short_ttl_ms: 0,
        });
        if clean.is_clean() {
            clean_points.push(items.len());
        }
    }
    if !clean.is_clean() {
        // Leave the connection clean, so the sequence can end in a restart.
        items.push(Item::Step {
            step: Step {
                cmds: vec![cmd(&[b"DISCARD"]), cmd(&[b"UNWATCH"])],
                sleep_ms: 0,
            },
            short_ttl_ms: 0,
        });
        clean_points.push(items.len());
    }
    while commands < len {
        let it = g.item();
        commands += it.commands();
        items.push(it);
        clean_points.push(items.len());
    }
    // Restarts at distinct clean points, inserted from the back so the
    // earlier positions stay valid.
    clean_points.dedup();
    let n = g.rng.gen_range(1..=4).min(clean_points.len());
    let mut at: Vec<usize> = clean_points
        .choose_multiple(&mut g.rng, n)
        .copied()
        .collect();
    at.sort_unstable_by(|a, b| b.cmp(a));
    for pos in at {
        let r = g.restart();
        items.insert(pos, r);
    }
    RSequence {
        seed,
        items,
        snapshot_sec,
    }
}

/// The commands `ELSA_RDIFF_SKIP` names (comma-separated, any case), for
/// [`without`].
pub fn skip_from_env() -> Vec<String> {
    std::env::var("ELSA_RDIFF_SKIP")
        .unwrap_or_default()
        .split(',')
        .map(|s| s.trim().to_uppercase())
        .filter(|s| !s.is_empty())
        .collect()
}

/// `seq` without the commands named in `skip` (upper case): a way to look
/// past a known divergence (`ELSA_RDIFF_SKIP=FLUSHDB,FLUSHALL`). Only data
/// commands should be named: leaving out MULTI or EXEC would unbalance
/// the blocks around them.
pub fn without(mut seq: RSequence, skip: &[String]) -> RSequence {
    if skip.is_empty() {
        return seq;
    }
    let keep = |c: &Cmd| !skip.contains(&c.name());
    for it in &mut seq.items {
        match it {
            Item::Step { step, .. } => step.cmds.retain(keep),
            Item::Begin { cmds, .. } => cmds.retain(keep),
            Item::Restart { .. } => {}
        }
    }
    seq.items.retain(|it| match it {
        Item::Step { step, .. } => !step.cmds.is_empty() || step.sleep_ms > 0,
        Item::Begin { cmds, .. } => !cmds.is_empty(),
        Item::Restart { .. } => true,
    });
    seq
}

/// SHA-1 of `data` in hex (EVALSHA's name for a script), computed here
/// so the step names its script before SCRIPT LOAD answers.
fn sha1_hex(data: &[u8]) -> String {
    sha1_smol::Sha1::from(data).digest().to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sequences_are_seeded_restart_and_end_clean() {
        for seed in 0..100 {
            let a = sequence(seed, 60);
            let b = sequence(seed, 60);
            assert_eq!(format!("{:?}", a.items), format!("{:?}", b.items));
            let restarts = a
                .items
                .iter()
                .filter(|i| matches!(i, Item::Restart { .. }))
                .count();
            assert!(restarts >= 1, "seed {seed}");
            let mut clean = Clean::default();
            for it in &a.items {
                match it {
                    Item::Step { step, .. } => step.cmds.iter().for_each(|c| clean.after(c)),
                    _ => assert!(clean.is_clean(), "seed {seed}: {it:?} at an unclean point"),
                }
            }
        }
    }
}

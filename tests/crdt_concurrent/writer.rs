//! One writer: a thread with its own connection to its own node, drawing
//! ops from a seeded RNG on the shared hot keys until told to stop. A
//! failed op is never retried (a retry could count twice): it is recorded
//! as [`Outcome::Unknown`] and the connection is opened again.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use redis::{ConnectionLike, Value};

use super::ops::{Effect, KeyType, Op, Outcome, KEYS_PER_TYPE, SHARED};

/// The whole script every `EVAL` runs: `ARGV` holds, per call, the command
/// name, the number of its arguments after the key, and those arguments;
/// `KEYS` holds each call's key.
const SCRIPT: &str = "local i, k = 1, 1
while i <= #ARGV do
  local n = tonumber(ARGV[i + 1])
  local args = {ARGV[i], KEYS[k]}
  for j = 1, n do args[#args + 1] = ARGV[i + 1 + j] end
  redis.call(unpack(args))
  i = i + 2 + n
  k = k + 1
end
return #KEYS";

/// A reply's read timeout: above the 10 s a node retries a request that
/// finds no primary before it answers `-TRYAGAIN`.
const REPLY_TIMEOUT: Duration = Duration::from_secs(15);

/// What a writer did.
pub struct Done {
    pub ops: Vec<Op>,
    /// Errors by kind (`ERR no answer from …`, `TRYAGAIN`, `io timeout`…).
    pub errors: BTreeMap<String, usize>,
    /// Connection attempts refused (nothing was sent).
    pub connect_failures: usize,
}

pub struct Writer {
    me: usize,
    region: String,
    port: u16,
    rng: StdRng,
    /// Ops drawn so far: makes every element, field, member and item
    /// unique.
    n: u64,
    /// Per key, this writer's elements whose add was acknowledged and
    /// that no op of it removed yet.
    live: BTreeMap<String, Vec<String>>,
    con: Option<redis::Connection>,
    done: Done,
}

/// Lone commands only: a transaction writes a sorted-set score as a
/// `ZADD` would (`docs/transactions.md`), a `DEL` in a block gains
/// nothing.
fn lone_only(e: &Effect) -> bool {
    match e {
        Effect::Del { .. } => true,
        Effect::Incr { key, .. } => KeyType::of(key) == KeyType::ZSet,
        _ => false,
    }
}

/// A block writes a counter as a `SET` of the value it computed, which
/// loses to a concurrent one of another region, and to a concurrent
/// `EXPIRE` of the counter that saw an increment it missed: blocks
/// increment counters and hash fields, and anyone `EXPIRE`s a counter,
/// only in region `a` (see the module doc).
fn counter_write(e: &Effect) -> bool {
    matches!(e, Effect::Incr { .. })
}

impl Writer {
    pub fn new(me: usize, region: &str, port: u16, seed: u64) -> Writer {
        Writer {
            me,
            region: region.to_string(),
            port,
            rng: StdRng::seed_from_u64(seed.wrapping_mul(1_000_003).wrapping_add(me as u64)),
            n: 0,
            live: BTreeMap::new(),
            con: None,
            done: Done {
                ops: Vec::new(),
                errors: BTreeMap::new(),
                connect_failures: 0,
            },
        }
    }

    /// Runs until `stop`.
    pub fn run(mut self, stop: &AtomicBool) -> Done {
        while !stop.load(Ordering::Relaxed) {
            if self.con.is_none() {
                match connect(self.port) {
                    Ok(c) => self.con = Some(c),
                    Err(_) => {
                        self.done.connect_failures += 1;
                        std::thread::sleep(Duration::from_millis(100));
                        continue;
                    }
                }
            }
            self.step();
            // Leave the nodes some of the two cores.
            std::thread::sleep(Duration::from_millis(2));
        }
        self.done
    }

    fn key(&mut self, ty: KeyType) -> String {
        ty.key(self.rng.gen_range(0..KEYS_PER_TYPE))
    }

    fn unique(&mut self) -> String {
        self.n += 1;
        format!("w{}:{}", self.me, self.n)
    }

    /// One of this writer's live elements of `key`, taken out of `live`
    /// (it is removed at most once).
    fn take_live(&mut self, key: &str) -> Option<String> {
        let v = self.live.get_mut(key)?;
        if v.is_empty() {
            return None;
        }
        let i = self.rng.gen_range(0..v.len());
        Some(v.swap_remove(i))
    }

    /// A random effect (never a remove of an element taken already).
    fn effect(&mut self) -> Effect {
        loop {
            let w = self.rng.gen_range(0..100);
            let e = match w {
                0..=11 => {
                    let key = self.key(KeyType::Counter);
                    let delta = self.rng.gen_range(1..=5);
                    Effect::Incr {
                        key,
                        field: None,
                        delta,
                    }
                }
                12..=15 => {
                    let key = self.key(KeyType::Hll);
                    let elem = self.unique();
                    Effect::Add {
                        key,
                        elem,
                        value: None,
                    }
                }
                16..=23 => {
                    let key = self.key(KeyType::Set);
                    let elem = self.unique();
                    Effect::Add {
                        key,
                        elem,
                        value: None,
                    }
                }
                24..=34 => {
                    let ty = *[KeyType::Set, KeyType::Hash, KeyType::ZSet, KeyType::List]
                        .choose(&mut self.rng)
                        .expect("types");
                    let key = self.key(ty);
                    let Some(elem) = self.take_live(&key) else {
                        continue;
                    };
                    Effect::Remove { key, elem }
                }
                35..=44 => {
                    let key = self.key(KeyType::Hash);
                    let elem = self.unique();
                    let value = format!("v{}", self.n);
                    Effect::Add {
                        key,
                        elem,
                        value: Some(value),
                    }
                }
                45..=56 => {
                    let ty = if w <= 50 {
                        KeyType::Hash
                    } else {
                        KeyType::ZSet
                    };
                    let key = self.key(ty);
                    let delta = self.rng.gen_range(1..=5);
                    Effect::Incr {
                        key,
                        field: Some(SHARED.into()),
                        delta,
                    }
                }
                57..=64 => {
                    let key = self.key(KeyType::ZSet);
                    let elem = self.unique();
                    let value = Some(self.n.to_string());
                    Effect::Add { key, elem, value }
                }
                65..=78 => {
                    let key = self.key(KeyType::List);
                    let first = self.unique();
                    let items = (0..self.rng.gen_range(1..=3))
                        .map(|j| format!("{first}.{j}"))
                        .collect();
                    Effect::Push { key, items }
                }
                79..=91 => {
                    let key = self.key(KeyType::Str);
                    let value = self.unique();
                    Effect::Set { key, value }
                }
                92..=98 => {
                    let ty = *KeyType::ALL.choose(&mut self.rng).expect("types");
                    if ty == KeyType::Counter && self.region != "a" {
                        // See `counter_write`.
                        continue;
                    }
                    let key = self.key(ty);
                    Effect::Expire { key }
                }
                _ => {
                    let ty = if self.rng.gen_bool(0.5) {
                        KeyType::Set
                    } else {
                        KeyType::List
                    };
                    let key = self.key(ty);
                    Effect::Del { key }
                }
            };
            return e;
        }
    }

    /// An effect a block may hold.
    fn block_effect(&mut self) -> Effect {
        loop {
            let e = self.effect();
            if lone_only(&e) || (counter_write(&e) && self.region != "a") {
                continue;
            }
            return e;
        }
    }

    fn step(&mut self) {
        let block = self.rng.gen_range(0..100) < 8;
        let (kind, effects) = if block {
            let n = self.rng.gen_range(2..=4);
            let effects: Vec<Effect> = (0..n).map(|_| self.block_effect()).collect();
            let kind = *["MULTI", "BEGIN", "EVAL"]
                .choose(&mut self.rng)
                .expect("kinds");
            (kind, effects)
        } else {
            let e = self.effect();
            (e.command().0, vec![e])
        };
        let sent = Instant::now();
        let outcome = match kind {
            "MULTI" => self.multi(&effects),
            "BEGIN" => self.begin(&effects),
            "EVAL" => self.eval(&effects),
            _ => {
                let r = self.call(&effects[0].line());
                self.lone(r)
            }
        };
        if outcome == Outcome::Acked {
            for e in &effects {
                match e {
                    Effect::Add { key, elem, .. } => {
                        self.live.entry(key.clone()).or_default().push(elem.clone())
                    }
                    Effect::Push { key, items } => self
                        .live
                        .entry(key.clone())
                        .or_default()
                        .extend(items.iter().cloned()),
                    _ => {}
                }
            }
        }
        if outcome != Outcome::Acked {
            // A reply may still be on its way, a MULTI or BEGIN open.
            self.con = None;
        }
        self.done.ops.push(Op {
            writer: self.me,
            region: self.region.clone(),
            kind,
            sent,
            done: Instant::now(),
            outcome,
            effects,
        });
    }

    /// Sends `line`; the raw reply (a server error is `Ok(ServerError)`).
    fn call(&mut self, line: &[String]) -> redis::RedisResult<Value> {
        let con = self.con.as_mut().expect("connected");
        let mut cmd = redis::cmd(&line[0]);
        for a in &line[1..] {
            cmd.arg(a);
        }
        con.req_command(&cmd)
    }

    fn note(&mut self, what: String) {
        *self.done.errors.entry(what).or_default() += 1;
    }

    /// Notes an error reply or a failed call.
    fn failed(&mut self, r: &redis::RedisResult<Value>) {
        let what = match r {
            Ok(Value::ServerError(e)) => {
                // Without key names: one count per kind.
                let detail: Vec<&str> = e
                    .details()
                    .unwrap_or_default()
                    .split_whitespace()
                    .filter(|w| !w.contains("cc:"))
                    .take(5)
                    .collect();
                format!("{} {}", e.code(), detail.join(" "))
            }
            Ok(v) => format!("unexpected reply {v:?}"),
            Err(e) if e.is_timeout() => "io timeout".into(),
            Err(e) if e.is_connection_refusal() => "io refused".into(),
            Err(e) if e.is_connection_dropped() => "io dropped".into(),
            Err(e) => format!("io {:?}", e.kind()),
        };
        self.note(what);
    }

    fn lone(&mut self, r: redis::RedisResult<Value>) -> Outcome {
        match r {
            Ok(Value::ServerError(_)) | Err(_) => {
                self.failed(&r);
                Outcome::Unknown
            }
            Ok(_) => Outcome::Acked,
        }
    }

    /// Runs `lines` before the block's last command; false (noted) on the
    /// first error: the block's last command is then never sent.
    fn prelude(&mut self, lines: &[Vec<String>]) -> bool {
        for line in lines {
            let r = self.call(line);
            if matches!(r, Ok(Value::ServerError(_)) | Err(_)) {
                self.failed(&r);
                return false;
            }
        }
        true
    }

    fn multi(&mut self, effects: &[Effect]) -> Outcome {
        let mut lines = vec![vec!["MULTI".to_string()]];
        lines.extend(effects.iter().map(Effect::line));
        if !self.prelude(&lines) {
            return Outcome::NotApplied;
        }
        let r = self.call(&["EXEC".to_string()]);
        match &r {
            Ok(Value::Nil) => Outcome::NotApplied,
            Ok(Value::ServerError(e)) if e.code() == "EXECABORT" => {
                self.failed(&r);
                Outcome::NotApplied
            }
            Ok(Value::Array(replies)) => {
                if let Some(bad) = replies.iter().find(|v| matches!(v, Value::ServerError(_))) {
                    // A command failed in place: the others applied.
                    self.failed(&Ok(bad.clone()));
                    Outcome::Unknown
                } else {
                    Outcome::Acked
                }
            }
            _ => {
                self.failed(&r);
                Outcome::Unknown
            }
        }
    }

    fn begin(&mut self, effects: &[Effect]) -> Outcome {
        let level = *["RC", "SI"].choose(&mut self.rng).expect("levels");
        let mut lines = vec![vec!["BEGIN".to_string(), level.to_string()]];
        lines.extend(effects.iter().map(Effect::line));
        if !self.prelude(&lines) {
            // Never committed; the connection is dropped (ABORTing it).
            return Outcome::NotApplied;
        }
        let r = self.call(&["COMMIT".to_string()]);
        match &r {
            Ok(Value::Int(_)) => Outcome::Acked,
            Ok(Value::ServerError(e)) if e.code() == "CONFLICT" => {
                self.failed(&r);
                Outcome::NotApplied
            }
            _ => {
                self.failed(&r);
                Outcome::Unknown
            }
        }
    }

    fn eval(&mut self, effects: &[Effect]) -> Outcome {
        let mut line = vec![
            "EVAL".to_string(),
            SCRIPT.to_string(),
            effects.len().to_string(),
        ];
        line.extend(effects.iter().map(|e| e.key().to_string()));
        for e in effects {
            let (name, rest) = e.command();
            line.push(name.to_string());
            line.push(rest.len().to_string());
            line.extend(rest);
        }
        let r = self.call(&line);
        match &r {
            Ok(Value::ServerError(e)) if e.code() == "CONFLICT" => {
                self.failed(&r);
                Outcome::NotApplied
            }
            _ => self.lone(r),
        }
    }
}

/// A connection to a loopback port with [`REPLY_TIMEOUT`].
fn connect(port: u16) -> redis::RedisResult<redis::Connection> {
    let client = redis::Client::open(format!("redis://127.0.0.1:{port}/"))?;
    let con = client.get_connection_with_timeout(Duration::from_secs(2))?;
    con.set_read_timeout(Some(REPLY_TIMEOUT))?;
    con.set_write_timeout(Some(REPLY_TIMEOUT))?;
    Ok(con)
}

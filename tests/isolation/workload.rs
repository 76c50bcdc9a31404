//! What the isolation harness asks for and how it writes it down: random
//! transactions over a small, rotating pool of hot keys, and the history in
//! the JSON-lines format Elle and `adya` read.
//!
//! Besides whole transactions the pool hands out runs of lone micro-ops
//! (for pipelines) and, for the TTL runs, transactions whose micro-ops may
//! carry a TTL rider; see [`KeyPool::ttl_txn`] for the rule that keeps
//! expiry checkable (one TTL per key, ever).

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Instant;

use rand::Rng;
use serde_json::{json, Value as Json};

/// Which of Elle's two transactional workloads a run uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Workload {
    /// `["append", k, v]` / `["r", k, [..]]`, on `RPUSH k v` and
    /// `LRANGE k 0 -1` (Elle's native form).
    ListAppend,
    /// The same history on strings: `APPEND k " v"` and `GET` (what
    /// list-append ran on before lists; the region fault run keeps it —
    /// see `docs/regions.md`, Known problems).
    StringAppend,
    /// `["w", k, v]` / `["r", k, v]`, on `SET` / `GET`.
    RwRegister,
    /// The same history on a field of a hash: `HSET k v <value>` /
    /// `HGET k v` — a typed key, written as a lattice delta and merged,
    /// through every commit path strings take.
    HashRegister,
    /// The same on a sorted set's member, the value its score:
    /// `ZADD k <value> m` / `ZSCORE k m`.
    ZsetRegister,
}

impl Workload {
    pub fn name(self) -> &'static str {
        match self {
            Workload::ListAppend => "list-append",
            Workload::StringAppend => "string-append",
            Workload::RwRegister => "rw-register",
            Workload::HashRegister => "hash-register",
            Workload::ZsetRegister => "zset-register",
        }
    }

    pub fn adya(self) -> adya::Workload {
        match self {
            Workload::ListAppend | Workload::StringAppend => adya::Workload::ListAppend,
            Workload::RwRegister | Workload::HashRegister | Workload::ZsetRegister => {
                adya::Workload::RwRegister
            }
        }
    }

    /// True for the register workloads (strings, hash fields, sorted set
    /// scores).
    pub fn registers(self) -> bool {
        matches!(
            self,
            Workload::RwRegister | Workload::HashRegister | Workload::ZsetRegister
        )
    }
}

/// What a read returned, once it has.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Seen {
    /// list-append: the elements, oldest first (a missing key is `[]`).
    List(Vec<u64>),
    /// rw-register: the value, or `None` for a missing key.
    Reg(Option<u64>),
}

/// One micro-operation of a transaction.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Mop {
    /// Read `key`; `seen` is filled in when the read answers.
    Read { key: u64, seen: Option<Seen> },
    /// Append `value` to the list at `key`.
    Append { key: u64, value: u64 },
    /// Overwrite the register at `key` with `value`.
    Write { key: u64, value: u64 },
}

impl Mop {
    pub fn key(&self) -> u64 {
        match *self {
            Mop::Read { key, .. } | Mop::Append { key, .. } | Mop::Write { key, .. } => key,
        }
    }

    pub fn is_write(&self) -> bool {
        !matches!(self, Mop::Read { .. })
    }

    /// Elle's JSON form, e.g. `["append", 3, 7]` or `["r", 3, [1, 7]]`.
    pub fn to_json(&self) -> Json {
        match self {
            Mop::Append { key, value } => json!(["append", key, value]),
            Mop::Write { key, value } => json!(["w", key, value]),
            Mop::Read { key, seen } => match seen {
                None | Some(Seen::Reg(None)) => json!(["r", key, null]),
                Some(Seen::Reg(Some(v))) => json!(["r", key, v]),
                Some(Seen::List(xs)) => json!(["r", key, xs]),
            },
        }
    }
}

/// rw-register value recorded for a read that found its key gone in a TTL
/// run (where every key starts at 0, so only an expiry can make one vanish;
/// see `tests/isolation/ttl.rs`). Far above any value [`KeyPool`] hands out.
pub const EXPIRED: u64 = 999_999_999;

/// TTL runs: range of the TTLs given, in milliseconds (`SET … PX`,
/// `PEXPIRE`).
pub const TTL_MS: std::ops::RangeInclusive<u64> = 50..=500;

/// The Redis key holding history key `k`.
pub fn redis_key(k: u64) -> String {
    format!("k{k}")
}

/// Hands out keys and unique values. A few keys are hot at a time (so
/// transactions conflict); a key that has taken `max_writes` writes retires
/// and a fresh one takes its place, so values stay short and the dependency
/// graph stays tractable (Elle's rotating key pool).
pub struct KeyPool {
    active: Vec<u64>,
    next_key: u64,
    /// Writes handed out per key so far; the next value is this plus one.
    written: HashMap<u64, u64>,
    max_writes: u64,
    /// TTL runs: keys that got their TTL and take no more writes, newest
    /// last; still read (that is where expiry shows), at most as many as
    /// there are hot keys.
    dying: Vec<u64>,
}

impl KeyPool {
    pub fn new(hot_keys: usize, max_writes: u64) -> KeyPool {
        KeyPool {
            active: (0..hot_keys as u64).collect(),
            next_key: hot_keys as u64,
            written: HashMap::new(),
            max_writes,
            dying: Vec::new(),
        }
    }

    /// The most keys a pool of `hot_keys` can hand out over `txns` calls of
    /// [`KeyPool::txn`] or [`KeyPool::ttl_txn`] (at most four retirements
    /// per transaction).
    pub fn key_bound(hot_keys: usize, txns: usize) -> u64 {
        (hot_keys + 4 * txns) as u64
    }

    /// Every key ever handed out.
    pub fn all_keys(&self) -> Vec<u64> {
        (0..self.next_key).collect()
    }

    /// A random transaction of 1–4 micro-ops, half reads, half writes.
    pub fn txn(&mut self, rng: &mut impl Rng, workload: Workload) -> Vec<Mop> {
        let n = rng.gen_range(1..=4);
        self.mops(rng, workload, n)
    }

    /// `n` random micro-ops, half reads, half writes: the lone commands of
    /// a pipeline, or a transaction's body.
    pub fn mops(&mut self, rng: &mut impl Rng, workload: Workload, n: usize) -> Vec<Mop> {
        (0..n)
            .map(|_| {
                let slot = rng.gen_range(0..self.active.len());
                let key = self.active[slot];
                if rng.gen_bool(0.5) {
                    return Mop::Read { key, seen: None };
                }
                let value = self.next_value(key);
                if value >= self.max_writes {
                    self.replace(slot);
                }
                match workload {
                    Workload::ListAppend | Workload::StringAppend => Mop::Append { key, value },
                    w if w.registers() => Mop::Write { key, value },
                    _ => unreachable!("every workload appends or writes registers"),
                }
            })
            .collect()
    }

    /// The next unique value of `key`.
    fn next_value(&mut self, key: u64) -> u64 {
        let count = self.written.entry(key).or_insert(0);
        *count += 1;
        *count
    }

    /// Retires the hot key in `slot`; a fresh key takes its place.
    fn replace(&mut self, slot: usize) {
        self.active[slot] = self.next_key;
        self.next_key += 1;
    }

    /// TTL runs (rw-register): a random transaction of 1–4 micro-ops and
    /// their TTL riders — `Some(ms)` on a write means `SET k v PX ms`, on a
    /// read `PEXPIRE k ms` right after it. A quarter of the writes and a
    /// sixth of the reads of hot keys carry one.
    ///
    /// The rule that keeps expiry checkable: a key gets a TTL at most once,
    /// ever. The key then leaves the hot pool (no more writes are handed
    /// out for it, so none clears the TTL) and joins the dying keys, which
    /// reads keep visiting. So a key vanishes at most once, and every read
    /// of a vanished key sees the same state, which the history records as
    /// the value [`EXPIRED`]. A transaction never reads a key after giving
    /// it a TTL itself (whether its own buffered write may expire before
    /// its commit is not what these runs test).
    pub fn ttl_txn(&mut self, rng: &mut impl Rng) -> (Vec<Mop>, Vec<Option<u64>>) {
        let n = rng.gen_range(1..=4);
        let mut mops = Vec::with_capacity(n);
        let mut ttls = Vec::with_capacity(n);
        let mut doomed_here: Vec<u64> = Vec::new();
        for _ in 0..n {
            if rng.gen_bool(0.5) {
                let dying = !self.dying.is_empty() && rng.gen_bool(0.4);
                let (key, slot) = if dying {
                    (self.dying[rng.gen_range(0..self.dying.len())], None)
                } else {
                    let slot = rng.gen_range(0..self.active.len());
                    (self.active[slot], Some(slot))
                };
                if doomed_here.contains(&key) {
                    continue;
                }
                let ttl = match slot {
                    Some(slot) if rng.gen_bool(1.0 / 6.0) => {
                        self.doom(slot);
                        doomed_here.push(key);
                        Some(rng.gen_range(TTL_MS))
                    }
                    _ => None,
                };
                mops.push(Mop::Read { key, seen: None });
                ttls.push(ttl);
            } else {
                let slot = rng.gen_range(0..self.active.len());
                let key = self.active[slot];
                let value = self.next_value(key);
                let ttl = if rng.gen_bool(0.25) {
                    self.doom(slot);
                    doomed_here.push(key);
                    Some(rng.gen_range(TTL_MS))
                } else {
                    if value >= self.max_writes {
                        self.replace(slot);
                    }
                    None
                };
                mops.push(Mop::Write { key, value });
                ttls.push(ttl);
            }
        }
        if mops.is_empty() {
            // Every pick was a key this transaction had doomed: read a hot one.
            let key = self.active[rng.gen_range(0..self.active.len())];
            mops.push(Mop::Read { key, seen: None });
            ttls.push(None);
        }
        (mops, ttls)
    }

    /// The hot key in `slot` gets its TTL: it moves to the dying keys.
    fn doom(&mut self, slot: usize) {
        let key = self.active[slot];
        self.replace(slot);
        self.dying.push(key);
        if self.dying.len() > self.active.len() {
            self.dying.remove(0);
        }
    }
}

/// How a transaction ended, in Jepsen's terms.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// Committed.
    Ok,
    /// Certainly not committed.
    Fail,
    /// Unknown.
    Info,
}

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Kind::Ok => "ok",
            Kind::Fail => "fail",
            Kind::Info => "info",
        }
    }
}

struct Lines {
    lines: Vec<String>,
    /// Completion index -> commit timestamp, for committed transactions.
    commit_ts: HashMap<u64, i64>,
}

/// A history being recorded by many client threads at once. Each event gets
/// the next index under one lock, so file order is real-time order.
pub struct Recorder {
    start: Instant,
    inner: Mutex<Lines>,
}

impl Default for Recorder {
    fn default() -> Self {
        Recorder {
            start: Instant::now(),
            inner: Mutex::new(Lines {
                lines: Vec::new(),
                commit_ts: HashMap::new(),
            }),
        }
    }
}

impl Recorder {
    fn push(&self, process: u64, kind: &str, txn: &[Mop], ts: Option<i64>) -> u64 {
        let time = self.start.elapsed().as_nanos() as u64;
        let value: Vec<Json> = txn.iter().map(Mop::to_json).collect();
        let mut inner = self.inner.lock().expect("recorder lock");
        let index = inner.lines.len() as u64;
        let line = json!({
            "index": index, "type": kind, "f": "txn", "process": process,
            "time": time, "value": value,
        });
        inner.lines.push(line.to_string());
        if let Some(ts) = ts {
            inner.commit_ts.insert(index, ts);
        }
        index
    }

    /// Records that `process` is about to run `txn` (reads not yet known).
    pub fn invoke(&self, process: u64, txn: &[Mop]) {
        self.push(process, "invoke", txn, None);
    }

    /// Records how `process`'s transaction ended, with what its reads saw
    /// and, when known, its commit timestamp; returns the completion's
    /// index in the history (what adya's reports name it by).
    pub fn complete(&self, process: u64, kind: Kind, txn: &[Mop], commit_ts: Option<i64>) -> u64 {
        self.push(process, kind.name(), txn, commit_ts)
    }

    /// The history as JSON lines, and the commit timestamps seen.
    pub fn finish(self) -> (String, HashMap<u64, i64>) {
        let inner = self.inner.into_inner().expect("recorder lock");
        let mut text = inner.lines.join("\n");
        text.push('\n');
        (text, inner.commit_ts)
    }
}

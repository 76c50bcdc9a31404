//! What a writer sent and what came of it: one [`Op`] per lone command or
//! per block (`MULTI`/`EXEC`, `BEGIN … COMMIT`, `EVAL`), each a list of
//! [`Effect`]s with one [`Outcome`] — a block is all or nothing.

use std::time::Instant;

/// The shared hot keys, `KEYS_PER_TYPE` of each type.
pub const KEYS_PER_TYPE: usize = 2;

/// The field of every hash, and the member of every sorted set, that all
/// writers increment (`HINCRBY`, `ZINCRBY`).
pub const SHARED: &str = "shared";

/// What a key holds (its name says it: `cc:<type>:<n>`).
#[derive(Clone, Copy, PartialEq, Eq, Debug, PartialOrd, Ord)]
pub enum KeyType {
    /// A string only ever `INCRBY`ed.
    Counter,
    Set,
    Hash,
    ZSet,
    List,
    /// A string only ever `SET` (last writer wins).
    Str,
    /// A HyperLogLog only ever `PFADD`ed (register-wise maximum).
    Hll,
}

impl KeyType {
    pub const ALL: [KeyType; 7] = [
        KeyType::Counter,
        KeyType::Set,
        KeyType::Hash,
        KeyType::ZSet,
        KeyType::List,
        KeyType::Str,
        KeyType::Hll,
    ];

    fn tag(self) -> &'static str {
        match self {
            KeyType::Counter => "cnt",
            KeyType::Set => "set",
            KeyType::Hash => "hash",
            KeyType::ZSet => "zset",
            KeyType::List => "list",
            KeyType::Str => "str",
            KeyType::Hll => "hll",
        }
    }

    pub fn key(self, n: usize) -> String {
        format!("cc:{}:{n}", self.tag())
    }

    pub fn of(key: &str) -> KeyType {
        let tag = key.split(':').nth(1).unwrap_or_default();
        *KeyType::ALL
            .iter()
            .find(|t| t.tag() == tag)
            .unwrap_or_else(|| panic!("not a key of this test: {key}"))
    }

    /// Every key of the test.
    pub fn all_keys() -> Vec<String> {
        KeyType::ALL
            .iter()
            .flat_map(|t| (0..KEYS_PER_TYPE).map(|n| t.key(n)))
            .collect()
    }
}

/// What came of an op.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Outcome {
    /// A reply that is not an error.
    Acked,
    /// An error or a broken connection after it was sent: applied or not.
    Unknown,
    /// Certainly not applied: a block whose `EXEC`/`COMMIT` was never sent,
    /// or was answered `CONFLICT`/`EXECABORT`/nil.
    NotApplied,
}

/// One change an op makes.
#[derive(Clone, Debug)]
pub enum Effect {
    /// `INCRBY key delta` (no field), `HINCRBY key field delta` (hash),
    /// `ZINCRBY key delta field` (sorted set).
    Incr {
        key: String,
        field: Option<String>,
        delta: i64,
    },
    /// `SADD key elem`, `HSET key elem value`, `ZADD key value elem`,
    /// `PFADD key elem`: an element unique to this op.
    Add {
        key: String,
        elem: String,
        value: Option<String>,
    },
    /// `SREM`, `HDEL`, `ZREM`, `LREM key 0`: of an element the same writer
    /// added before, acknowledged.
    Remove { key: String, elem: String },
    /// `RPUSH key items…`: items unique to this op.
    Push { key: String, items: Vec<String> },
    /// `SET key value` (last writer wins).
    Set { key: String, value: String },
    /// `DEL key` (sets and lists only).
    Del { key: String },
    /// `EXPIRE key <long TTL>`: changes no value.
    Expire { key: String },
}

/// The TTL `EXPIRE` sets: far beyond the run.
pub const LONG_TTL_SEC: u64 = 100_000;

impl Effect {
    pub fn key(&self) -> &str {
        match self {
            Effect::Incr { key, .. }
            | Effect::Add { key, .. }
            | Effect::Remove { key, .. }
            | Effect::Push { key, .. }
            | Effect::Set { key, .. }
            | Effect::Del { key }
            | Effect::Expire { key } => key,
        }
    }

    /// The command: its name, then its arguments after the key.
    pub fn command(&self) -> (&'static str, Vec<String>) {
        let ty = KeyType::of(self.key());
        match self {
            Effect::Incr { field, delta, .. } => match (ty, field) {
                (KeyType::Hash, Some(f)) => ("HINCRBY", vec![f.clone(), delta.to_string()]),
                (KeyType::ZSet, Some(f)) => ("ZINCRBY", vec![delta.to_string(), f.clone()]),
                _ => ("INCRBY", vec![delta.to_string()]),
            },
            Effect::Add { elem, value, .. } => {
                let v = value.clone().unwrap_or_default();
                match ty {
                    KeyType::Hash => ("HSET", vec![elem.clone(), v]),
                    KeyType::ZSet => ("ZADD", vec![v, elem.clone()]),
                    KeyType::Hll => ("PFADD", vec![elem.clone()]),
                    _ => ("SADD", vec![elem.clone()]),
                }
            }
            Effect::Remove { elem, .. } => match ty {
                KeyType::Hash => ("HDEL", vec![elem.clone()]),
                KeyType::ZSet => ("ZREM", vec![elem.clone()]),
                KeyType::List => ("LREM", vec!["0".into(), elem.clone()]),
                _ => ("SREM", vec![elem.clone()]),
            },
            Effect::Push { items, .. } => ("RPUSH", items.clone()),
            Effect::Set { value, .. } => ("SET", vec![value.clone()]),
            Effect::Del { .. } => ("DEL", vec![]),
            Effect::Expire { .. } => ("EXPIRE", vec![LONG_TTL_SEC.to_string()]),
        }
    }

    /// The whole command line.
    pub fn line(&self) -> Vec<String> {
        let (name, rest) = self.command();
        let mut v = vec![name.to_string(), self.key().to_string()];
        v.extend(rest);
        v
    }
}

/// One lone command or one block.
#[derive(Clone, Debug)]
pub struct Op {
    pub writer: usize,
    /// The writer's node's region.
    pub region: String,
    /// The command's name, or `MULTI`, `BEGIN`, `EVAL` for a block.
    pub kind: &'static str,
    /// When its first command was sent, and its last reply came (or the
    /// failure).
    pub sent: Instant,
    pub done: Instant,
    pub outcome: Outcome,
    pub effects: Vec<Effect>,
}

impl Op {
    /// The op as the commands it sent, for a report.
    pub fn describe(&self) -> String {
        let lines: Vec<String> = self.effects.iter().map(|e| e.line().join(" ")).collect();
        if self.effects.len() == 1 && !matches!(self.kind, "MULTI" | "BEGIN" | "EVAL") {
            format!("writer {} ({}): {}", self.writer, self.region, lines[0])
        } else {
            format!(
                "writer {} ({}): {} [{}]",
                self.writer,
                self.region,
                self.kind,
                lines.join("; ")
            )
        }
    }
}

//! The whole key space of a server, read over its own RESP2 connection —
//! every database, every key (`SCAN 0 MATCH * COUNT 1000` to the end), its
//! type, its full value and its PTTL — and the comparison of two of them.
//!
//! Relaxed, and why (each a rule the report names):
//! - Hash fields and set members are sorted before comparing: neither
//!   server promises an order (`docs/commands.md, "Hashes"`, "list fields in
//!   hash order"; `docs/commands.md, "Sets"`, "Members come in hash order").
//! - PTTLs agree within [`PTTL_TOLERANCE_MS`]; -1 (no TTL) only with -1.
//!   The two dumps are read moments apart, a restart in between.
//! - A key present on one side only, whose PTTL there is at most the
//!   tolerance, is lapsing as the dumps are read: not a divergence.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use crate::resp::{quote, Conn, Reply};

/// How far two PTTLs of one key may be apart (ms).
pub const PTTL_TOLERANCE_MS: i64 = 1_500;
/// Databases read (the servers are started with 16).
pub const DATABASES: usize = 16;

/// A key's value, in a form two servers can be compared by.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Value {
    Str(Vec<u8>),
    /// Field–value pairs, sorted.
    Hash(Vec<(Vec<u8>, Vec<u8>)>),
    /// Members, sorted.
    Set(Vec<Vec<u8>>),
    /// Members with their scores as the server prints them, in rank order.
    ZSet(Vec<(Vec<u8>, Vec<u8>)>),
    List(Vec<Vec<u8>>),
    /// Entries in ID order, flattened: ID, then fields and values.
    Stream(Vec<Vec<u8>>),
    /// A type this checker does not read (it names it).
    Other(String),
}

impl Value {
    pub fn type_name(&self) -> &str {
        match self {
            Value::Str(_) => "string",
            Value::Hash(_) => "hash",
            Value::Set(_) => "set",
            Value::ZSet(_) => "zset",
            Value::List(_) => "list",
            Value::Stream(_) => "stream",
            Value::Other(t) => t,
        }
    }
}

/// Shortens a value for a report.
fn clip(b: &[u8]) -> String {
    if b.len() > 40 && b.iter().all(|&c| c == b[0]) {
        return format!("<{} × {}>", b.len(), quote(&b[..1]));
    }
    let q = quote(b);
    if q.chars().count() > 60 {
        let head: String = q.chars().take(60).collect();
        return format!("{head}…({} bytes)", b.len());
    }
    q
}

impl std::fmt::Display for Value {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let list = |v: &[Vec<u8>]| v.iter().map(|b| clip(b)).collect::<Vec<_>>().join(" ");
        let pairs = |v: &[(Vec<u8>, Vec<u8>)]| {
            v.iter()
                .map(|(a, b)| format!("{}={}", clip(a), clip(b)))
                .collect::<Vec<_>>()
                .join(" ")
        };
        match self {
            Value::Str(b) => write!(f, "string {}", clip(b)),
            Value::Hash(p) => write!(f, "hash {{{}}}", pairs(p)),
            Value::Set(m) => write!(f, "set {{{}}}", list(m)),
            Value::ZSet(p) => write!(f, "zset [{}]", pairs(p)),
            Value::List(v) => write!(f, "list [{}]", list(v)),
            Value::Stream(v) => write!(f, "stream [{}]", list(v)),
            Value::Other(t) => write!(f, "{t} (not read)"),
        }
    }
}

/// One key as read.
#[derive(Clone, Debug)]
pub struct Entry {
    pub value: Value,
    pub pttl: i64,
}

impl std::fmt::Display for Entry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.pttl {
            -1 => write!(f, "{} (no TTL)", self.value),
            t => write!(f, "{} (PTTL {t})", self.value),
        }
    }
}

/// Every key of every database: (db, key) → entry.
pub type Dump = BTreeMap<(usize, Vec<u8>), Entry>;

fn bulk(r: &Reply) -> Option<Vec<u8>> {
    match r {
        Reply::Bulk(b) | Reply::Simple(b) => Some(b.clone()),
        _ => None,
    }
}

fn bulks(r: &Reply, what: &str) -> Result<Vec<Vec<u8>>, String> {
    match r {
        Reply::Array(v) => v
            .iter()
            .map(|x| bulk(x).ok_or_else(|| format!("{what}: element {x}")))
            .collect(),
        other => Err(format!("{what} answered {other}")),
    }
}

/// Every bulk of a nested array, in order.
fn flatten(r: &Reply, out: &mut Vec<Vec<u8>>) -> Result<(), String> {
    match r {
        Reply::Array(v) => v.iter().try_for_each(|x| flatten(x, out)),
        x => {
            out.push(bulk(x).ok_or_else(|| format!("element {x}"))?);
            Ok(())
        }
    }
}

fn pairs(v: Vec<Vec<u8>>) -> Vec<(Vec<u8>, Vec<u8>)> {
    v.chunks(2).map(|c| (c[0].clone(), c[1].clone())).collect()
}

/// Reads the whole key space of the server on `port`. An error means the
/// server did not answer as any Redis would (it is reported as such).
pub fn dump(port: u16) -> Result<Dump, String> {
    let mut c = Conn::connect(port).map_err(|e| format!("connect: {e}"))?;
    c.set_read_timeout(std::time::Duration::from_secs(60));
    let mut out = Dump::new();
    for db in 0..DATABASES {
        let r = c.call(&[b"SELECT", db.to_string().as_bytes()]);
        if r != Reply::Simple(b"OK".to_vec()) {
            return Err(format!("SELECT {db} answered {r}"));
        }
        let mut keys = Vec::new();
        let mut cursor = b"0".to_vec();
        loop {
            let r = c.call(&[b"SCAN", &cursor, b"MATCH", b"*", b"COUNT", b"1000"]);
            let Reply::Array(parts) = &r else {
                return Err(format!("SCAN answered {r}"));
            };
            let [next, batch] = parts.as_slice() else {
                return Err(format!("SCAN answered {r}"));
            };
            keys.extend(bulks(batch, "SCAN")?);
            cursor = bulk(next).ok_or_else(|| format!("SCAN cursor {next}"))?;
            if cursor == b"0" {
                break;
            }
        }
        keys.sort();
        keys.dedup();
        for key in keys {
            if let Some(e) = read_key(&mut c, &key)? {
                out.insert((db, key), e);
            }
        }
    }
    Ok(out)
}

/// One key's entry, or None if it is gone by the time it is read (it
/// lapsed between SCAN and here).
fn read_key(c: &mut Conn, key: &[u8]) -> Result<Option<Entry>, String> {
    let t = c.call(&[b"TYPE", key]);
    let Some(t) = bulk(&t) else {
        return Err(format!("TYPE {} answered {t}", quote(key)));
    };
    let call = |c: &mut Conn, args: &[&[u8]]| -> Result<Vec<Vec<u8>>, String> {
        bulks(&c.call(args), &String::from_utf8_lossy(args[0]))
    };
    let value = match t.as_slice() {
        b"none" => return Ok(None),
        b"string" => match c.call(&[b"GET", key]) {
            Reply::Bulk(b) => Value::Str(b),
            Reply::NilBulk => return Ok(None),
            other => return Err(format!("GET {} answered {other}", quote(key))),
        },
        b"hash" => {
            let mut p = pairs(call(c, &[b"HGETALL", key])?);
            p.sort();
            Value::Hash(p)
        }
        b"set" => {
            let mut m = call(c, &[b"SMEMBERS", key])?;
            m.sort();
            Value::Set(m)
        }
        b"zset" => Value::ZSet(pairs(call(
            c,
            &[b"ZRANGE", key, b"0", b"-1", b"WITHSCORES"],
        )?)),
        b"list" => Value::List(call(c, &[b"LRANGE", key, b"0", b"-1"])?),
        b"stream" => {
            let r = c.call(&[b"XRANGE", key, b"-", b"+"]);
            let mut flat = Vec::new();
            flatten(&r, &mut flat).map_err(|e| format!("XRANGE {}: {e}", quote(key)))?;
            Value::Stream(flat)
        }
        other => Value::Other(String::from_utf8_lossy(other).into_owned()),
    };
    let pttl = match c.call(&[b"PTTL", key]) {
        Reply::Int(-2) => return Ok(None),
        Reply::Int(n) => n,
        other => return Err(format!("PTTL {} answered {other}", quote(key))),
    };
    Ok(Some(Entry { value, pttl }))
}

/// How one key differs.
#[derive(Clone, Debug)]
pub struct KeyDiff {
    pub db: usize,
    pub key: Vec<u8>,
    pub redis: Option<Entry>,
    pub elsa: Option<Entry>,
    /// "missing in elsa", "extra in elsa", "value differs", "TTL differs".
    pub class: &'static str,
}

impl KeyDiff {
    /// The kind of difference and the key's type, for grouping.
    pub fn tag(&self) -> String {
        let t = |e: &Option<Entry>| {
            e.as_ref()
                .map(|e| e.value.type_name().to_string())
                .unwrap_or_else(|| "none".into())
        };
        match self.class {
            "extra in elsa" => format!("{} {}", self.class, t(&self.elsa)),
            "missing in elsa" => format!("{} {}", self.class, t(&self.redis)),
            _ if t(&self.redis) != t(&self.elsa) => {
                format!("type differs ({} vs {})", t(&self.redis), t(&self.elsa))
            }
            _ => format!("{} {}", self.class, t(&self.redis)),
        }
    }
}

impl std::fmt::Display for KeyDiff {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let show = |e: &Option<Entry>| match e {
            Some(e) => e.to_string(),
            None => "(no key)".into(),
        };
        let mut s = String::new();
        let _ = write!(
            s,
            "db {} key {}: {}\n        redis: {}\n        elsa:  {}",
            self.db,
            quote(&self.key),
            self.class,
            show(&self.redis),
            show(&self.elsa)
        );
        f.write_str(&s)
    }
}

/// Lapsing: present with a TTL no longer than the tolerance.
fn lapsing(e: &Entry) -> bool {
    e.pttl >= 0 && e.pttl <= PTTL_TOLERANCE_MS
}

/// The keys on which two dumps differ, under the rules of the module doc.
pub fn compare(redis: &Dump, elsa: &Dump) -> Vec<KeyDiff> {
    let mut out = Vec::new();
    let keys: std::collections::BTreeSet<&(usize, Vec<u8>)> =
        redis.keys().chain(elsa.keys()).collect();
    for k in keys {
        let (r, e) = (redis.get(k), elsa.get(k));
        let class = match (r, e) {
            (Some(r), None) if !lapsing(r) => "missing in elsa",
            (None, Some(e)) if !lapsing(e) => "extra in elsa",
            (Some(r), Some(e)) if r.value != e.value => "value differs",
            (Some(r), Some(e)) if !ttl_agrees(r.pttl, e.pttl) => "TTL differs",
            _ => continue,
        };
        out.push(KeyDiff {
            db: k.0,
            key: k.1.clone(),
            redis: r.cloned(),
            elsa: e.cloned(),
            class,
        });
    }
    out
}

fn ttl_agrees(r: i64, e: i64) -> bool {
    if r < 0 || e < 0 {
        return r == e;
    }
    (r - e).abs() <= PTTL_TOLERANCE_MS
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(v: &str, pttl: i64) -> Entry {
        Entry {
            value: Value::Str(v.as_bytes().to_vec()),
            pttl,
        }
    }

    #[test]
    fn the_rules_are_narrow() {
        let k = |s: &str| (0usize, s.as_bytes().to_vec());
        let mut r = Dump::new();
        let mut e = Dump::new();
        r.insert(k("same"), entry("a", -1));
        e.insert(k("same"), entry("a", -1));
        r.insert(k("lapsing"), entry("a", 900));
        r.insert(k("gone"), entry("a", 5_000));
        e.insert(k("back"), entry("a", -1));
        r.insert(k("ttl"), entry("a", -1));
        e.insert(k("ttl"), entry("a", 100_000));
        r.insert(k("near"), entry("a", 100_000));
        e.insert(k("near"), entry("a", 99_000));
        let d = compare(&r, &e);
        let got: Vec<(String, &str)> = d
            .iter()
            .map(|d| (String::from_utf8_lossy(&d.key).into_owned(), d.class))
            .collect();
        assert_eq!(
            got,
            vec![
                ("back".into(), "extra in elsa"),
                ("gone".into(), "missing in elsa"),
                ("ttl".into(), "TTL differs"),
            ]
        );
    }
}

//! The crash loop: writers commit unique keys — strings, single and in
//! groups, a counter's increments, new fields of a hash, new members of a
//! set, and MULTI/EXEC commits that give one of the writer's keys a
//! short TTL while they set another (its old value must never come back
//! once the short-lived one expired, issue 12 item 3) — and note every
//! acknowledgement; the server is killed with SIGKILL
//! at a random moment (sometimes just after a BGSAVE); a new server recovers from the same data dir and every
//! acknowledged key must be there with its value, every commit whose reply
//! never came must be all there or all absent, and what a restart decided
//! must not change at the next one.

use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use redis::{Connection, RedisError, Value};

use crate::common::{Node, TestDir};
use crate::env_or;

/// Writers per cycle: several clients so group commit batches them.
const WRITERS: usize = 3;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Set,
    Mset,
    Txn,
    /// `INCRBY` of the writer's own counter (a typed key: its increments
    /// are logged as counter deltas).
    Incr,
    /// `HSET` of a new field of the writer's own hash.
    HSet,
    /// `SADD` of a new member to the writer's own set.
    SAdd,
    /// `ZADD` of a new member to the writer's own sorted set.
    ZAdd,
    /// `RPUSH` of a new element to the writer's own list.
    RPush,
    /// `MULTI; SET a v PX 20; SET b w; EXEC` where `a` held an older value
    /// (set by an acknowledged `Set`): once committed, `a` is absent (its
    /// new value expired) and never its older value again.
    TtlTxn,
}

/// A ledger value meaning "absent: expired" (see [`Kind::TtlTxn`]).
const EXPIRED: &str = "\u{0}expired";

/// True when `found` shows what the ledger expects of `k`.
fn holds(found: &HashMap<String, String>, k: &str, v: &str) -> bool {
    if v == EXPIRED {
        !found.contains_key(k)
    } else {
        found.get(k).map(String::as_str) == Some(v)
    }
}

/// The ledger's name for field `field` of hash `key` (read with HGET).
fn hash_slot(key: &str, field: &str) -> String {
    format!("h|{key}|{field}")
}

/// The ledger's name for member `member` of set `key` (read with
/// SISMEMBER: present as "1").
fn set_slot(key: &str, member: &str) -> String {
    format!("s|{key}|{member}")
}

/// The ledger's name for member `member` of sorted set `key` (read with
/// ZSCORE: present as its score).
fn zset_slot(key: &str, member: &str) -> String {
    format!("z|{key}|{member}")
}

/// The ledger's name for element `elem` of list `key` (read with LPOS:
/// present as "1").
fn list_slot(key: &str, elem: &str) -> String {
    format!("l|{key}|{elem}")
}

/// What `keys` hold on `c`: plain keys with MGET, hash fields with HGET,
/// set members with SISMEMBER, sorted-set members with ZSCORE (see
/// `hash_slot`, `set_slot`, `zset_slot`).
fn read_all(c: &mut Connection, keys: &[&str]) -> HashMap<String, String> {
    let (plain, typed): (Vec<&str>, Vec<&str>) = keys.iter().partition(|k| {
        !k.starts_with("h|") && !k.starts_with("s|") && !k.starts_with("z|") && !k.starts_with("l|")
    });
    let mut out = crate::mget_all(c, &plain);
    for chunk in typed.chunks(500) {
        let mut pipe = redis::pipe();
        for k in chunk {
            let mut parts = k.splitn(3, '|');
            let (kind, key, elem) = (parts.next(), parts.next(), parts.next());
            match (kind, key, elem) {
                (Some("h"), Some(key), Some(f)) => pipe.cmd("HGET").arg(key).arg(f),
                (Some("z"), Some(key), Some(m)) => pipe.cmd("ZSCORE").arg(key).arg(m),
                (Some("l"), Some(key), Some(e)) => pipe.cmd("LPOS").arg(key).arg(e),
                (Some(_), Some(key), Some(m)) => pipe.cmd("SISMEMBER").arg(key).arg(m),
                _ => unreachable!("ledger names are built by the *_slot functions"),
            };
        }
        let answers: Vec<Value> = pipe.query(c).expect("HGET/SISMEMBER/ZSCORE");
        for (k, v) in chunk.iter().zip(answers) {
            match v {
                Value::BulkString(b) => {
                    out.insert(k.to_string(), String::from_utf8_lossy(&b).into_owned());
                }
                Value::Int(1) => {
                    out.insert(k.to_string(), "1".into());
                }
                // LPOS: the element is in the list, at this index.
                Value::Int(_) if k.starts_with("l|") => {
                    out.insert(k.to_string(), "1".into());
                }
                _ => {}
            }
        }
    }
    out
}

/// One unit of commit: its keys and the values it gives them.
#[derive(Clone, Debug)]
struct Group {
    kind: Kind,
    pairs: Vec<(String, String)>,
    /// What each key held before (`None`: absent), for a group left in
    /// doubt: found all `pairs` it committed, found all `before` it did not.
    before: Vec<Option<String>>,
}

/// What the writer knows about a group when the server died.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Fate {
    /// The OK / commit reply arrived: must survive.
    Acked,
    /// Sent, no reply: all of it or none of it.
    InDoubt,
    /// COMMIT was never sent: none of it.
    NotCommitted,
    /// The server answered an error (a CONFLICT while a snapshot freezes
    /// multi-shard commits, say): none of it. Holds the error.
    Refused(String),
}

/// What must hold after every restart.
#[derive(Default)]
struct Ledger {
    /// Key → value that must be present.
    present: HashMap<String, String>,
    /// Keys that must be absent.
    absent: HashSet<String>,
    /// Groups to be found all-or-nothing at the next restart, then fixed.
    in_doubt: Vec<Group>,
    acked_groups: u64,
    /// Acknowledged TtlTxn groups.
    ttl_groups: u64,
    in_doubt_committed: u64,
    in_doubt_dropped: u64,
    /// Error replies, by command kind and error code.
    refused: HashMap<String, u64>,
    /// One refusal in full.
    refusal_example: Option<String>,
}

/// What one check after a restart found wrong.
#[derive(Default, Debug)]
struct Damage {
    /// Acknowledged (or earlier recovered) keys missing or changed.
    lost: Vec<String>,
    /// Keys that must be absent but are there.
    resurrected: Vec<String>,
    /// In-doubt groups found partly applied (or with wrong values).
    torn: Vec<String>,
}

impl Damage {
    fn is_empty(&self) -> bool {
        self.lost.is_empty() && self.resurrected.is_empty() && self.torn.is_empty()
    }
}

fn io_like(e: &RedisError) -> bool {
    e.is_io_error() || e.is_connection_dropped() || e.is_timeout() || e.code().is_none()
}

fn value(rng: &mut StdRng, key: &str) -> String {
    let pad = rng.gen_range(0..120);
    format!("{key}={:x}{}", rng.gen::<u64>(), "v".repeat(pad))
}

/// Commits groups until the connection breaks; returns each group's fate.
fn writer(url: String, prefix: String, seed: u64) -> Vec<(Group, Fate)> {
    let mut rng = StdRng::seed_from_u64(seed);
    let mut out = Vec::new();
    let Ok(client) = redis::Client::open(url) else {
        return out;
    };
    let Ok(mut c) = client.get_connection() else {
        return out;
    };
    let _ = c.set_read_timeout(Some(Duration::from_secs(30)));
    let mut n = 0u64;
    // The writer's counter: only it increments it.
    let counter = format!("{prefix}:ctr");
    let mut count: Option<i64> = None;
    // A key of this writer with an acknowledged value, for a TtlTxn.
    let mut spare: Option<(String, String)> = None;
    loop {
        let kind = match rng.gen_range(0..19) {
            0..=3 => Kind::Set,
            4..=6 => Kind::Mset,
            7..=9 => Kind::Txn,
            10..=11 => Kind::Incr,
            12..=13 => Kind::HSet,
            14 => Kind::SAdd,
            15 => Kind::ZAdd,
            16 => Kind::RPush,
            _ if spare.is_some() => Kind::TtlTxn,
            _ => Kind::Set,
        };
        if kind == Kind::TtlTxn {
            let (a, old) = spare.take().expect("chosen only with a spare key");
            n += 1;
            let b = format!("{prefix}:{n}");
            let w = value(&mut rng, &b);
            let group = Group {
                kind,
                pairs: vec![(a, EXPIRED.into()), (b, w)],
                before: vec![Some(old), None],
            };
            if commit_noting(&mut c, group, &mut out) {
                return out;
            }
            continue;
        }
        if matches!(kind, Kind::HSet | Kind::SAdd | Kind::ZAdd | Kind::RPush) {
            n += 1;
            let pair = if kind == Kind::HSet {
                let field = format!("f{n}");
                let v = value(&mut rng, &field);
                (hash_slot(&format!("{prefix}:h"), &field), v)
            } else if kind == Kind::ZAdd {
                (
                    zset_slot(&format!("{prefix}:z"), &format!("m{n}")),
                    rng.gen_range(-1000i64..1000).to_string(),
                )
            } else if kind == Kind::RPush {
                (
                    list_slot(&format!("{prefix}:l"), &format!("e{n}")),
                    "1".into(),
                )
            } else {
                (
                    set_slot(&format!("{prefix}:s"), &format!("m{n}")),
                    "1".into(),
                )
            };
            let group = Group {
                kind,
                pairs: vec![pair],
                before: vec![None],
            };
            if commit_noting(&mut c, group, &mut out) {
                return out;
            }
            continue;
        }
        if kind == Kind::Incr {
            let by = rng.gen_range(-5i64..=100);
            let next = count.unwrap_or(0) + by;
            let group = Group {
                kind,
                pairs: vec![(counter.clone(), next.to_string())],
                before: vec![count.map(|c| c.to_string())],
            };
            let fate = commit(&mut c, &group);
            if fate == Fate::Acked {
                count = Some(next);
            }
            let gone = matches!(fate, Fate::InDoubt | Fate::NotCommitted);
            out.push((group, fate));
            if gone {
                return out;
            }
            continue;
        }
        let len = if kind == Kind::Set {
            1
        } else {
            rng.gen_range(2..=5)
        };
        let pairs: Vec<(String, String)> = (0..len)
            .map(|_| {
                n += 1;
                let key = format!("{prefix}:{n}");
                let v = value(&mut rng, &key);
                (key, v)
            })
            .collect();
        let before = vec![None; pairs.len()];
        let group = Group {
            kind,
            pairs,
            before,
        };
        let fate = commit(&mut c, &group);
        let gone = matches!(fate, Fate::InDoubt | Fate::NotCommitted);
        let refused = matches!(fate, Fate::Refused(_));
        if kind == Kind::Set && fate == Fate::Acked {
            spare = Some(group.pairs[0].clone());
        }
        out.push((group, fate));
        if gone {
            return out;
        }
        if refused && kind == Kind::Txn {
            // The transaction may still be open after a refused command.
            let _ = redis::cmd("ABORT").query::<Value>(&mut c);
        }
    }
}

/// Commits `group` and notes its fate in `out`; true when the server is
/// gone (the writer stops).
fn commit_noting(c: &mut Connection, group: Group, out: &mut Vec<(Group, Fate)>) -> bool {
    let fate = commit(c, &group);
    let gone = matches!(fate, Fate::InDoubt | Fate::NotCommitted);
    out.push((group, fate));
    gone
}

/// Runs one group; Acked, or how it failed.
fn commit(c: &mut Connection, g: &Group) -> Fate {
    let failed = |e: RedisError, sent: bool| match (io_like(&e), sent) {
        (true, true) => Fate::InDoubt,
        (true, false) => Fate::NotCommitted,
        (false, _) => Fate::Refused(e.to_string()),
    };
    match g.kind {
        Kind::HSet | Kind::SAdd | Kind::ZAdd | Kind::RPush => {
            let (slot, v) = &g.pairs[0];
            let mut parts = slot.splitn(3, '|');
            let (_, key, elem) = (parts.next(), parts.next(), parts.next());
            let (key, elem) = (key.expect("key"), elem.expect("element"));
            let r = if g.kind == Kind::HSet {
                redis::cmd("HSET")
                    .arg(key)
                    .arg(elem)
                    .arg(v)
                    .query::<Value>(c)
            } else if g.kind == Kind::ZAdd {
                redis::cmd("ZADD")
                    .arg(key)
                    .arg(v)
                    .arg(elem)
                    .query::<Value>(c)
            } else if g.kind == Kind::RPush {
                redis::cmd("RPUSH").arg(key).arg(elem).query::<Value>(c)
            } else {
                redis::cmd("SADD").arg(key).arg(elem).query::<Value>(c)
            };
            match r {
                Ok(Value::Int(1)) => Fate::Acked,
                Ok(Value::Int(n)) if n > 1 && g.kind == Kind::RPush => Fate::Acked,
                Ok(other) => panic!("{:?} answered {other:?}", g.kind),
                Err(e) => failed(e, true),
            }
        }
        Kind::Incr => {
            let (k, want) = &g.pairs[0];
            let by = want.parse::<i64>().expect("a number")
                - g.before[0]
                    .as_deref()
                    .map_or(0, |b| b.parse::<i64>().expect("a number"));
            match redis::cmd("INCRBY").arg(k).arg(by).query::<Value>(c) {
                Ok(Value::Int(n)) => {
                    assert_eq!(n.to_string(), *want, "INCRBY {k} {by}");
                    Fate::Acked
                }
                Ok(other) => panic!("INCRBY answered {other:?}"),
                Err(e) => failed(e, true),
            }
        }
        Kind::TtlTxn => {
            let ((a, _), (b, w)) = (&g.pairs[0], &g.pairs[1]);
            let mut pipe = redis::pipe();
            pipe.atomic()
                .cmd("SET")
                .arg(a)
                .arg("short-lived")
                .arg("PX")
                .arg(20)
                .cmd("SET")
                .arg(b)
                .arg(w);
            match pipe.query::<Value>(c) {
                Ok(_) => Fate::Acked,
                Err(e) => failed(e, true),
            }
        }
        Kind::Set => {
            let (k, v) = &g.pairs[0];
            match redis::cmd("SET").arg(k).arg(v).query::<Value>(c) {
                Ok(Value::Okay) => Fate::Acked,
                Ok(other) => panic!("SET answered {other:?}"),
                Err(e) => failed(e, true),
            }
        }
        Kind::Mset => {
            let mut cmd = redis::cmd("MSET");
            for (k, v) in &g.pairs {
                cmd.arg(k).arg(v);
            }
            match cmd.query::<Value>(c) {
                Ok(Value::Okay) => Fate::Acked,
                Ok(other) => panic!("MSET answered {other:?}"),
                Err(e) => failed(e, true),
            }
        }
        Kind::Txn => {
            if let Err(e) = redis::cmd("BEGIN").query::<Value>(c) {
                return failed(e, false);
            }
            for (k, v) in &g.pairs {
                if let Err(e) = redis::cmd("SET").arg(k).arg(v).query::<Value>(c) {
                    return failed(e, false);
                }
            }
            match redis::cmd("COMMIT").query::<Value>(c) {
                Ok(Value::Int(_)) => Fate::Acked,
                Ok(other) => panic!("COMMIT answered {other:?}"),
                Err(e) => failed(e, true),
            }
        }
    }
}

impl Ledger {
    fn record(&mut self, group: Group, fate: Fate) {
        match fate {
            Fate::Acked => {
                self.acked_groups += 1;
                self.ttl_groups += u64::from(group.kind == Kind::TtlTxn);
                self.settle(group.pairs);
            }
            Fate::InDoubt => self.in_doubt.push(group),
            Fate::NotCommitted => self.keep_before(group),
            Fate::Refused(why) => {
                let code = why.split([':', ' ']).next().unwrap_or_default();
                *self
                    .refused
                    .entry(format!("{:?} {code}", group.kind))
                    .or_default() += 1;
                self.refusal_example.get_or_insert(why);
                self.keep_before(group);
            }
        }
    }

    /// A group that committed: its keys hold what it gave them.
    fn settle(&mut self, pairs: Vec<(String, String)>) {
        for (k, v) in pairs {
            if v == EXPIRED {
                self.present.remove(&k);
                self.absent.insert(k);
            } else {
                self.absent.remove(&k);
                self.present.insert(k, v);
            }
        }
    }

    /// A group that did not commit: its keys hold what they held before.
    fn keep_before(&mut self, group: Group) {
        for ((k, _), before) in group.pairs.into_iter().zip(group.before) {
            match before {
                Some(b) => {
                    self.present.insert(k, b);
                }
                None => {
                    self.absent.insert(k);
                }
            }
        }
    }

    /// Reads every key the ledger knows on `node`; reports what is wrong
    /// and settles the in-doubt groups as found.
    fn check(&mut self, node: &Node) -> Damage {
        let mut keys: Vec<&str> = self.present.keys().map(String::as_str).collect();
        keys.extend(self.absent.iter().map(String::as_str));
        keys.extend(
            self.in_doubt
                .iter()
                .flat_map(|g| g.pairs.iter().map(|(k, _)| k.as_str())),
        );
        let found = read_all(&mut node.conn(), &keys);
        let mut d = Damage::default();
        // A key an in-doubt group changes (a counter's next increment) is
        // judged with that group below.
        let doubted: HashSet<&str> = self
            .in_doubt
            .iter()
            .flat_map(|g| g.pairs.iter().map(|(k, _)| k.as_str()))
            .collect();
        for (k, v) in &self.present {
            if doubted.contains(k.as_str()) {
                continue;
            }
            if found.get(k.as_str()) != Some(v) {
                d.lost
                    .push(format!("{k}: want {v:?}, found {:?}", found.get(k)));
            }
        }
        for k in &self.absent {
            if let Some(v) = found.get(k.as_str()) {
                d.resurrected.push(format!("{k} = {v:?}"));
            }
        }
        for g in std::mem::take(&mut self.in_doubt) {
            let here = g.pairs.iter().filter(|(k, v)| holds(&found, k, v)).count();
            let as_before = g
                .pairs
                .iter()
                .zip(&g.before)
                .all(|((k, _), b)| found.get(k.as_str()) == b.as_ref());
            if here == g.pairs.len() {
                self.in_doubt_committed += 1;
                self.settle(g.pairs);
            } else if as_before {
                self.in_doubt_dropped += 1;
                self.keep_before(g);
            } else {
                let seen: Vec<_> = g
                    .pairs
                    .iter()
                    .map(|(k, v)| (k, found.get(k.as_str()).map(|f| f == v)))
                    .collect();
                d.torn.push(format!("{:?} half applied: {seen:?}", g.kind));
            }
        }
        d
    }
}

fn summary(d: &Damage) -> String {
    let head = |v: &[String]| v.iter().take(5).cloned().collect::<Vec<_>>().join("; ");
    format!(
        "lost {} acknowledged (e.g. {}), resurrected {} (e.g. {}), half-applied {} (e.g. {})",
        d.lost.len(),
        head(&d.lost),
        d.resurrected.len(),
        head(&d.resurrected),
        d.torn.len(),
        head(&d.torn)
    )
}

/// What a run found, for the report line.
struct Outcome {
    cycles: usize,
    acked_keys: usize,
    lost: usize,
}

/// Runs the loop with `appendfsync` = `policy`; panics on the first damage.
fn crash_loop(policy: &str) -> Outcome {
    let cycles: usize = env_or("ELSA_CRASH_CYCLES", 5);
    let seed: u64 = env_or("ELSA_CRASH_SEED", rand::thread_rng().gen());
    let mut rng = StdRng::seed_from_u64(seed);
    let dir = TestDir::new(&format!("crash-{policy}"));
    let flags = ["--workers", "2", "--appendfsync", policy];
    let started = Instant::now();
    let mut ledger = Ledger::default();
    let mut node = Node::start(&dir.data(), &dir.log(), &flags);
    let (mut bgsaves, mut torn_tails, mut lost_total) = (0, 0u64, 0);
    for cycle in 0..cycles {
        let kill_after = Duration::from_millis(rng.gen_range(50..=400));
        let bgsave_after = rng
            .gen_bool(0.4)
            .then(|| kill_after.mul_f64(rng.gen_range(0.0..1.0)));
        let writers: Vec<_> = (0..WRITERS)
            .map(|w| {
                let (url, prefix, s) = (node.url(), format!("c{cycle}w{w}"), rng.gen());
                std::thread::spawn(move || writer(url, prefix, s))
            })
            .collect();
        let t0 = Instant::now();
        if let Some(at) = bgsave_after {
            std::thread::sleep(at);
            match redis::cmd("BGSAVE").query::<String>(&mut node.conn()) {
                Ok(s) => assert_eq!(s, "Background saving started"),
                Err(e) => assert!(e.to_string().contains("in progress"), "BGSAVE failed: {e}"),
            }
            bgsaves += 1;
        }
        std::thread::sleep(kill_after.saturating_sub(t0.elapsed()));
        node.kill9();
        for w in writers {
            for (group, fate) in w.join().expect("writer thread") {
                ledger.record(group, fate);
            }
        }
        node = Node::start(&dir.data(), &dir.log(), &flags);
        let info = node.info("persistence");
        torn_tails += info["torn_tails_cut"].parse::<u64>().unwrap_or(0);
        let damage = ledger.check(&node);
        lost_total += damage.lost.len();
        assert!(
            damage.is_empty(),
            "appendfsync {policy}, cycle {cycle} (seed {seed}, killed after {kill_after:?}, \
             bgsave at {bgsave_after:?}): {}; refused so far: {:?} (e.g. {:?})",
            summary(&damage),
            ledger.refused,
            ledger.refusal_example
        );
    }
    println!(
        "crash loop (appendfsync {policy}, seed {seed}): {cycles} kill -9 cycles in {:.1?}; \
         {} acknowledged keys checked ({} groups, {} of them a MULTI giving a key a 20 ms TTL), \
         lost {lost_total}; in-doubt commits: {} \
         recovered whole, {} absent whole, 0 half; refused: {:?} (e.g. {:?}); \
         {bgsaves} BGSAVEs; {torn_tails} torn tails cut",
        started.elapsed(),
        ledger.present.len(),
        ledger.acked_groups,
        ledger.ttl_groups,
        ledger.in_doubt_committed,
        ledger.in_doubt_dropped,
        ledger.refused,
        ledger.refusal_example,
    );
    Outcome {
        cycles,
        acked_keys: ledger.present.len(),
        lost: lost_total,
    }
}

/// `appendfsync always`: nothing acknowledged is ever lost, every commit is
/// all-or-nothing, across kills during writes and during snapshots.
#[test]
fn crash_loop_always() {
    let o = crash_loop("always");
    assert_eq!(o.lost, 0);
    assert!(o.acked_keys > 0, "the writers committed nothing");
}

/// `appendfsync everysec` under kill -9: an acknowledged record is already
/// in the OS, so a process crash loses nothing (only an OS or machine crash
/// can lose the last second, which this test cannot cause).
#[test]
fn crash_loop_everysec_loss_window() {
    let o = crash_loop("everysec");
    println!(
        "everysec loss window under kill -9: {} of {} acknowledged keys lost over {} cycles",
        o.lost, o.acked_keys, o.cycles
    );
    assert_eq!(o.lost, 0);
}

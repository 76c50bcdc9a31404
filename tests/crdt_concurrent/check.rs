//! The model: what every key must read once every node has every op, by
//! the rules of `docs/datatypes.md`, from the writers' ops and outcomes;
//! and the comparison of what a node reads with it.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use super::ops::{Effect, KeyType, Op, Outcome, SHARED};

/// What a node reads for a key.
#[derive(Clone, Debug, PartialEq)]
pub enum Got {
    /// `GET` (a counter or a last-writer-wins string).
    Str(Option<String>),
    Set(BTreeSet<String>),
    Hash(BTreeMap<String, String>),
    ZSet(BTreeMap<String, f64>),
    List(Vec<String>),
    /// `GET` of a HyperLogLog: its bytes.
    Hll(Option<Vec<u8>>),
}

/// Reads `key` whole on `con`.
pub fn read(con: &mut redis::Connection, key: &str) -> redis::RedisResult<Got> {
    let q = |name: &str| {
        let mut c = redis::cmd(name);
        c.arg(key);
        c
    };
    Ok(match KeyType::of(key) {
        KeyType::Counter | KeyType::Str => Got::Str(q("GET").query(con)?),
        KeyType::Set => Got::Set(q("SMEMBERS").query(con)?),
        KeyType::Hash => Got::Hash(q("HGETALL").query(con)?),
        KeyType::ZSet => {
            let v: Vec<(String, f64)> = q("ZRANGE").arg(0).arg(-1).arg("WITHSCORES").query(con)?;
            Got::ZSet(v.into_iter().collect())
        }
        KeyType::List => Got::List(q("LRANGE").arg(0).arg(-1).query(con)?),
        KeyType::Hll => Got::Hll(q("GET").query(con)?),
    })
}

/// What an element must be once converged.
#[derive(Clone, Copy, PartialEq, Eq, Debug, PartialOrd, Ord)]
pub enum Must {
    Present,
    Absent,
    /// An op in doubt, or a `DEL` that may or may not have seen it.
    Either,
}

/// An element (set member, hash field, sorted-set member, list item) and
/// the ops that touched it.
struct Elem {
    add: usize,
    value: Option<String>,
    removes: Vec<usize>,
}

/// A node out of some peers' view (stopped, or cut off from the other
/// region) from `from` until the cluster was whole again at `to`.
pub struct Absence {
    pub who: String,
    pub from: Instant,
    pub to: Instant,
}

/// How long before a node went away a remove may still not have reached
/// it (replication lag on a loaded machine, generous).
const LAG: Duration = Duration::from_secs(2);

/// An acknowledged push: its op, its items.
type Pushed = (usize, Vec<String>);

/// One thing a node reads that the rules do not allow.
pub struct Divergence {
    pub node: usize,
    pub key: String,
    pub what: String,
    pub expected: String,
    pub got: String,
}

pub struct Model<'a> {
    ops: &'a [Op],
    t0: Instant,
    absences: &'a [Absence],
    /// `--tombstone-ttl-sec`.
    ttl: Duration,
    /// (key, field) → sums of the acknowledged and of the in-doubt deltas.
    counters: BTreeMap<(String, Option<String>), (i64, i64)>,
    elems: BTreeMap<String, BTreeMap<String, Elem>>,
    dels: BTreeMap<String, Vec<usize>>,
    /// Per string key: each writer's last acknowledged value, and every
    /// value whose SET is in doubt.
    last_acked: BTreeMap<String, BTreeMap<usize, (usize, String)>>,
    in_doubt: BTreeMap<String, BTreeMap<String, usize>>,
    /// Per list key and writer: its acknowledged pushes in order (the
    /// op, its items).
    pushes: BTreeMap<String, BTreeMap<usize, Vec<Pushed>>>,
    /// How many elements were expected each way (over all keys, once).
    pub musts: BTreeMap<Must, usize>,
    /// How many of the `Either`s only because a remove of theirs may be
    /// undone by a node away past the tombstone TTL.
    pub exempt: usize,
}

impl<'a> Model<'a> {
    /// `ops` holds every writer's ops, each writer's in the order it made
    /// them.
    pub fn build(ops: &'a [Op], t0: Instant, absences: &'a [Absence], ttl: Duration) -> Model<'a> {
        let mut m = Model {
            ops,
            t0,
            absences,
            ttl,
            counters: BTreeMap::new(),
            elems: BTreeMap::new(),
            dels: BTreeMap::new(),
            last_acked: BTreeMap::new(),
            in_doubt: BTreeMap::new(),
            pushes: BTreeMap::new(),
            musts: BTreeMap::new(),
            exempt: 0,
        };
        for (i, op) in ops.iter().enumerate() {
            for e in &op.effects {
                let key = e.key().to_string();
                match e {
                    Effect::Incr { field, delta, .. } => {
                        let c = m.counters.entry((key, field.clone())).or_default();
                        match op.outcome {
                            Outcome::Acked => c.0 += delta,
                            Outcome::Unknown => c.1 += delta,
                            Outcome::NotApplied => {}
                        }
                    }
                    Effect::Add { elem, value, .. } => {
                        let el = Elem {
                            add: i,
                            value: value.clone(),
                            removes: Vec::new(),
                        };
                        m.elems.entry(key).or_default().insert(elem.clone(), el);
                    }
                    Effect::Remove { elem, .. } => {
                        let el = m.elems.get_mut(&key).and_then(|k| k.get_mut(elem));
                        el.expect("a remove of an element added before")
                            .removes
                            .push(i);
                    }
                    Effect::Push { items, .. } => {
                        let k = m.elems.entry(key.clone()).or_default();
                        for item in items {
                            let el = Elem {
                                add: i,
                                value: None,
                                removes: Vec::new(),
                            };
                            k.insert(item.clone(), el);
                        }
                        if op.outcome == Outcome::Acked {
                            let w = m.pushes.entry(key).or_default();
                            w.entry(op.writer).or_default().push((i, items.clone()));
                        }
                    }
                    Effect::Set { value, .. } => match op.outcome {
                        Outcome::Acked => {
                            let last = m.last_acked.entry(key).or_default();
                            last.insert(op.writer, (i, value.clone()));
                        }
                        Outcome::Unknown => {
                            m.in_doubt.entry(key).or_default().insert(value.clone(), i);
                        }
                        Outcome::NotApplied => {}
                    },
                    Effect::Del { .. } => m.dels.entry(key).or_default().push(i),
                    Effect::Expire { .. } => {}
                }
            }
        }
        let mut musts = BTreeMap::new();
        let mut away = 0;
        for (key, elems) in &m.elems {
            for elem in elems.keys() {
                let (must, why) = m.must(key, elem);
                *musts.entry(must).or_default() += 1;
                away += usize::from(must == Must::Either && why.contains(" was away ("));
            }
        }
        m.musts = musts;
        m.exempt = away;
        m
    }

    /// An op for a report: what it sent, its outcome, when.
    pub fn said(&self, i: usize) -> String {
        let op = &self.ops[i];
        format!(
            "{} -> {:?} ({:.2}s..{:.2}s)",
            op.describe(),
            op.outcome,
            (op.sent - self.t0).as_secs_f64(),
            (op.done - self.t0).as_secs_f64()
        )
    }

    /// Whether remove `i` may be undone by the documented trade of
    /// collecting tombstones (`docs/regions.md`, *Tombstones*: "A node that
    /// is away longer than the TTL and comes back with an old value can
    /// bring that value back"): it was made when a node may not have had
    /// it yet and stayed away past the TTL after it, so the others could
    /// forget it before that node brought its old add back. Answers who.
    fn undone_by_absence(&self, i: usize) -> Option<String> {
        let op = &self.ops[i];
        self.absences
            .iter()
            .find(|a| op.sent + LAG >= a.from && op.sent + self.ttl < a.to)
            .map(|a| {
                format!(
                    "{} was away ({:.1}s..{:.1}s, longer than the tombstone TTL after it)",
                    a.who,
                    (a.from - self.t0).as_secs_f64(),
                    (a.to - self.t0).as_secs_f64()
                )
            })
    }

    /// What `elem` of `key` must be, and why.
    fn must(&self, key: &str, elem: &str) -> (Must, String) {
        let el = &self.elems[key][elem];
        let add = &self.ops[el.add];
        let why = |i: usize, how: &str| format!("{how}: {}", self.said(i));
        if add.outcome == Outcome::NotApplied {
            return (Must::Absent, why(el.add, "its add was not applied"));
        }
        let mut doubt = (add.outcome == Outcome::Unknown).then(|| why(el.add, "add in doubt"));
        for &r in &el.removes {
            match self.ops[r].outcome {
                Outcome::Acked => match self.undone_by_absence(r) {
                    Some(who) => doubt = Some(why(r, &format!("removed while {who}"))),
                    None => return (Must::Absent, why(r, "removed")),
                },
                Outcome::Unknown => doubt = Some(why(r, "remove in doubt")),
                Outcome::NotApplied => {}
            }
        }
        for &d in self.dels.get(key).into_iter().flatten() {
            let del = &self.ops[d];
            match del.outcome {
                Outcome::NotApplied => {}
                // Acknowledged in the add's region after the add was: the
                // region's primary had the add, the DEL removed it.
                Outcome::Acked
                    if add.outcome == Outcome::Acked
                        && del.region == add.region
                        && del.sent > add.done =>
                {
                    match self.undone_by_absence(d) {
                        Some(who) => doubt = Some(why(d, &format!("deleted while {who}"))),
                        None => return (Must::Absent, why(d, "deleted after it was added")),
                    }
                }
                // Added after the DEL was answered: the DEL cannot have
                // seen it (it removes only what it saw).
                Outcome::Acked if add.sent > del.done => {}
                _ => doubt = Some(why(d, "a DEL that may have seen it")),
            }
        }
        match doubt {
            Some(why) => (Must::Either, why),
            None => (Must::Present, format!("added: {}", self.said(el.add))),
        }
    }

    /// A hash's or sorted set's divergences: its shared counter (field or
    /// member [`SHARED`]), then its other elements.
    fn shared_and_elements(
        &self,
        key: &str,
        mut got: BTreeMap<String, Option<String>>,
    ) -> Vec<(String, String, String)> {
        let shared = got.remove(SHARED).flatten();
        let counter = self.counter(key, Some(SHARED), shared.as_deref());
        counter
            .into_iter()
            .chain(self.elements(key, &got))
            .collect()
    }

    /// Every divergence of what node `node` read for `key` from the model.
    pub fn check(&self, node: usize, key: &str, got: &Got) -> Vec<Divergence> {
        let mut out = Vec::new();
        let mut diverge = |what: String, expected: String, got: String| {
            out.push(Divergence {
                node,
                key: key.to_string(),
                what,
                expected,
                got,
            })
        };
        match (KeyType::of(key), got) {
            (KeyType::Counter, Got::Str(v)) => {
                if let Some((what, exp, g)) = self.counter(key, None, v.as_deref()) {
                    diverge(what, exp, g);
                }
            }
            (KeyType::Str, Got::Str(v)) => {
                if let Some((exp, g)) = self.string(key, v.as_deref()) {
                    diverge("last writer wins".into(), exp, g);
                }
            }
            (KeyType::Set, Got::Set(s)) => {
                let got = s.iter().map(|m| (m.clone(), None)).collect();
                for d in self.elements(key, &got) {
                    diverge(d.0, d.1, d.2);
                }
            }
            (KeyType::Hash, Got::Hash(h)) => {
                let got = h.iter().map(|(f, v)| (f.clone(), Some(v.clone())));
                for d in self.shared_and_elements(key, got.collect()) {
                    diverge(d.0, d.1, d.2);
                }
            }
            (KeyType::ZSet, Got::ZSet(z)) => {
                let got = z.iter().map(|(m, s)| (m.clone(), Some(format!("{s}"))));
                for d in self.shared_and_elements(key, got.collect()) {
                    diverge(d.0, d.1, d.2);
                }
            }
            (KeyType::List, Got::List(l)) => {
                for d in self.list(key, l) {
                    diverge(d.0, d.1, d.2);
                }
            }
            (KeyType::Hll, Got::Hll(v)) => {
                for d in self.hll(key, v.as_deref()) {
                    diverge(d.0, d.1, d.2);
                }
            }
            (ty, g) => diverge("type".into(), format!("{ty:?}"), format!("{g:?}")),
        }
        out
    }

    /// A counter (a string, a hash field, a sorted-set score): the sum of
    /// the acknowledged increments, plus at most those in doubt.
    fn counter(
        &self,
        key: &str,
        field: Option<&str>,
        got: Option<&str>,
    ) -> Option<(String, String, String)> {
        let (acked, doubt) = self
            .counters
            .get(&(key.to_string(), field.map(str::to_string)))
            .copied()
            .unwrap_or_default();
        let what = match field {
            None => "counter: concurrent increments all count".to_string(),
            Some(f) => format!("{f}: concurrent increments all count"),
        };
        let expected = format!(
            "{acked}..={} ({acked} acknowledged, {doubt} in doubt)",
            acked + doubt
        );
        let ok = match got {
            None => acked == 0,
            Some(v) => v
                .parse::<f64>()
                .is_ok_and(|n| n >= acked as f64 && n <= (acked + doubt) as f64),
        };
        (!ok).then(|| (what, expected, format!("{got:?}")))
    }

    /// A last-writer-wins string: one writer's last acknowledged value or
    /// a value in doubt.
    fn string(&self, key: &str, got: Option<&str>) -> Option<(String, String)> {
        let none = BTreeMap::new();
        let last = self.last_acked.get(key).unwrap_or(&none);
        let doubt = self.in_doubt.get(key);
        let ok = match got {
            None => last.is_empty(),
            Some(v) => {
                doubt.is_some_and(|d| d.contains_key(v)) || last.values().any(|(_, l)| l == v)
            }
        };
        let lasts: Vec<String> = last.values().map(|(i, _)| self.said(*i)).collect();
        let expected = format!(
            "one of the writers' last acknowledged SETs [{}] or one of {} in doubt",
            lasts.join("; "),
            doubt.map_or(0, BTreeMap::len)
        );
        (!ok).then(|| (expected, format!("{got:?}")))
    }

    /// The elements (with their values, if any) `got` against the model.
    fn elements(
        &self,
        key: &str,
        got: &BTreeMap<String, Option<String>>,
    ) -> Vec<(String, String, String)> {
        let mut out = Vec::new();
        let none = BTreeMap::new();
        let elems = self.elems.get(key).unwrap_or(&none);
        for (e, v) in got {
            if !elems.contains_key(e) {
                out.push((e.clone(), "never sent".into(), format!("present {v:?}")));
            }
        }
        for (e, el) in elems {
            let (must, why) = self.must(key, e);
            let g = got.get(e);
            let bad = match (must, g) {
                (Must::Present, None) => true,
                (Must::Absent, Some(_)) => true,
                (_, Some(v)) => match (v, &el.value) {
                    (Some(v), Some(want)) => v != want,
                    _ => false,
                },
                _ => false,
            };
            if bad {
                let expected = match &el.value {
                    Some(want) => format!("{must:?} (value {want}), {why}"),
                    None => format!("{must:?}, {why}"),
                };
                let got = match g {
                    None => "absent".to_string(),
                    Some(v) => format!("present {v:?}"),
                };
                out.push((e.clone(), expected, got));
            }
        }
        out
    }

    /// A HyperLogLog: every element whose `PFADD` must have counted has
    /// its register raised to at least its rank (concurrent `PFADD`s all
    /// count). Absence cannot be read off registers (two elements share
    /// one), so only presence is checked.
    fn hll(&self, key: &str, got: Option<&[u8]>) -> Vec<(String, String, String)> {
        use elsa_lattice::hll;
        let regs = match got.map(hll::registers) {
            None => vec![0; hll::REGISTERS],
            Some(Ok(r)) => r,
            Some(Err(e)) => {
                return vec![("value".into(), "a HyperLogLog".into(), format!("{e:?}"))]
            }
        };
        let none = BTreeMap::new();
        let mut out = Vec::new();
        for e in self.elems.get(key).unwrap_or(&none).keys() {
            let (must, why) = self.must(key, e);
            let (i, rank) = hll::pattern(e.as_bytes());
            if must == Must::Present && regs[i] < rank {
                let got = format!("register {i} at {} below its rank {rank}", regs[i]);
                out.push((e.clone(), format!("{must:?}, {why}"), got));
            }
        }
        out
    }

    /// A list: its items as elements, each at most once, and each
    /// writer's acknowledged pushes in the order it made them; a lone
    /// push's items next to each other.
    fn list(&self, key: &str, got: &[String]) -> Vec<(String, String, String)> {
        let mut out = Vec::new();
        let mut at: BTreeMap<&String, usize> = BTreeMap::new();
        for (k, item) in got.iter().enumerate() {
            if at.insert(item, k).is_some() {
                out.push((item.clone(), "at most once".into(), "twice or more".into()));
            }
        }
        let as_elems = got.iter().map(|i| (i.clone(), None)).collect();
        out.extend(self.elements(key, &as_elems));
        for (w, pushes) in self.pushes.get(key).into_iter().flatten() {
            let mut last: Option<(usize, &String)> = None;
            for (p, items) in pushes {
                let present: Vec<(usize, &String)> = items
                    .iter()
                    .filter_map(|i| Some((*at.get(i)?, i)))
                    .collect();
                for &(k, item) in &present {
                    if let Some((lk, litem)) = last {
                        if lk > k {
                            out.push((
                                item.clone(),
                                format!("after writer {w}'s earlier push of {litem} (index {lk})"),
                                format!("at index {k}"),
                            ));
                        }
                    }
                    last = Some((k, item));
                }
                let lone = self.ops[*p].effects.len() == 1;
                if lone && present.windows(2).any(|x| x[1].0 != x[0].0 + 1) {
                    out.push((
                        format!("{items:?}"),
                        "one RPUSH's items next to each other".into(),
                        format!("at {:?}", present.iter().map(|x| x.0).collect::<Vec<_>>()),
                    ));
                }
            }
        }
        out
    }
}

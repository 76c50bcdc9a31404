//! Sorted-set commands (Redis's `t_zset.c`) on the add-wins map of scores
//! (`elsa_lattice::ZSet`): ZADD ZINCRBY ZREM ZSCORE ZMSCORE ZCARD ZCOUNT
//! ZLEXCOUNT ZRANK ZREVRANK ZRANGE (BYSCORE BYLEX REV LIMIT WITHSCORES)
//! ZREVRANGE ZRANGEBYSCORE ZREVRANGEBYSCORE ZRANGEBYLEX ZREVRANGEBYLEX
//! ZRANGESTORE ZPOPMIN ZPOPMAX ZRANDMEMBER ZREMRANGEBYRANK|SCORE|LEX ZUNION
//! ZINTER ZDIFF (and STORE) ZINTERCARD ZSCAN. Commands of several keys
//! reach the others through [`crate::ops::Op::other_keys`], so every path
//! holds all of them and runs the command in one atomic step.
//!
//! A write is one delta at one version (see `elsa_lattice::zset` for how
//! concurrent writes merge). Replies and errors are Redis 7.0's (ZRANK's
//! WITHSCORE is 7.2's); arguments are parsed by [`super::zparse`], which
//! also gives the op its wire form (the arguments, parsed again).

mod pop;
mod range;
mod store;

use bytes::{Buf, BufMut, Bytes};
use elsa_lattice::{Collection, Crdt, Elem, KeyState, Kind, ZSet};

use super::geo::{self, GeoCmd};
use super::hashes::{get_list, next, put_list};
use super::zparse::{
    format_d2string, format_g17, parse, AddFlags, Aggregate, ZCmd, ZCombine, ERR_SCORE_NAN,
};
use super::{
    begin_collection_write, read_collection, CollectionWrite, KeyView, OpReply, ScanArgs, Value,
    WRONGTYPE,
};
use pop::{mpop, notify_removed, pop};
use range::{positions, range};
use store::{geo_search, store};

/// One sorted-set command on one key (and, for some, others).
#[derive(Clone, Debug, PartialEq)]
pub struct ZSetOp {
    /// What it does.
    pub cmd: ZCmd,
    /// The command's arguments, name first: its wire form.
    args: Vec<Bytes>,
    /// Keys besides the one it runs on.
    others: Vec<Bytes>,
    /// Seed of ZRANDMEMBER's choice.
    seed: u64,
}

/// Its scores are never NaN (the parser refuses them): equality is total.
impl Eq for ZSetOp {}

impl ZSetOp {
    /// Parses a sorted-set command; the error is Redis's reply before it
    /// looks at any key. `seed` drives ZRANDMEMBER.
    pub fn parse(args: Vec<Bytes>, seed: u64) -> Result<ZSetOp, String> {
        let cmd = parse(&args)?;
        let others = match &cmd {
            ZCmd::RangeStore { dest, .. } => vec![dest.clone()],
            ZCmd::Combine { sources, dest, .. } => {
                let mut o: Vec<Bytes> = sources[1..].to_vec();
                o.extend(dest.iter().cloned());
                o
            }
            ZCmd::InterCard { sources, .. } => sources[1..].to_vec(),
            ZCmd::MPop { keys, .. } => keys[1..].to_vec(),
            ZCmd::Geo(GeoCmd::Search(s)) => s.store.iter().cloned().collect(),
            _ => Vec::new(),
        };
        Ok(ZSetOp {
            cmd,
            args,
            others,
            seed,
        })
    }

    /// The key the op runs on.
    pub fn key(&self) -> &Bytes {
        match &self.cmd {
            ZCmd::RangeStore { .. } => &self.args[2],
            ZCmd::Combine { sources, .. } | ZCmd::InterCard { sources, .. } => &sources[0],
            ZCmd::MPop { keys, .. } => &keys[0],
            ZCmd::Geo(GeoCmd::Search(_))
                if self.args[0].eq_ignore_ascii_case(b"geosearchstore") =>
            {
                &self.args[2]
            }
            _ => &self.args[1],
        }
    }

    /// ZMPOP over only the keys `keep` accepts, in the same order (a
    /// blocked BZPOPMIN retried without the keys that became another
    /// type); `None` for another command, or when no key is left.
    pub fn retain_keys(&self, keep: impl Fn(&[u8]) -> bool) -> Option<ZSetOp> {
        let ZCmd::MPop { keys, max, count } = &self.cmd else {
            return None;
        };
        let keys: Vec<Bytes> = keys.iter().filter(|k| keep(k)).cloned().collect();
        if keys.is_empty() {
            return None;
        }
        let mut args = vec![
            Bytes::from_static(b"zmpop"),
            Bytes::from(keys.len().to_string()),
        ];
        args.extend(keys);
        args.push(Bytes::from_static(if *max { b"max" } else { b"min" }));
        args.push(Bytes::from_static(b"count"));
        args.push(Bytes::from(count.to_string()));
        ZSetOp::parse(args, self.seed).ok()
    }

    /// True when the command may change a key.
    pub fn is_write(&self) -> bool {
        match &self.cmd {
            ZCmd::Add { .. }
            | ZCmd::Rem(_)
            | ZCmd::RemRange(_)
            | ZCmd::Pop { .. }
            | ZCmd::MPop { .. }
            | ZCmd::RangeStore { .. } => true,
            ZCmd::Combine { dest, .. } => dest.is_some(),
            ZCmd::Geo(GeoCmd::Search(s)) => s.store.is_some(),
            _ => false,
        }
    }

    /// Keys besides the one the op is applied to (see `Op::other_keys`).
    pub fn other_keys(&self) -> &[Bytes] {
        &self.others
    }

    /// The op as bytes (`decode` parses the arguments again).
    pub fn encode(&self) -> Bytes {
        let mut out = Vec::new();
        out.put_u64_le(self.seed);
        put_list(&mut out, &self.args);
        Bytes::from(out)
    }

    /// Reads what [`ZSetOp::encode`] wrote.
    pub fn decode(mut buf: Bytes) -> Option<ZSetOp> {
        if buf.remaining() < 8 {
            return None;
        }
        let seed = buf.get_u64_le();
        let args = get_list(&mut buf)?;
        if args.len() < 2 || !buf.is_empty() {
            return None;
        }
        ZSetOp::parse(args, seed).ok()
    }

    /// Runs the command on `key`.
    pub fn apply(&self, key: &[u8], view: &mut impl KeyView) -> OpReply {
        match &self.cmd {
            ZCmd::Add { flags, pairs } => add(key, view, *flags, pairs),
            ZCmd::Rem(members) => {
                let reply = write_zset(view, key, |z, dot| {
                    let mut delta = ZSet::default();
                    let mut n = 0;
                    for m in members {
                        if delta.has_member(m) {
                            continue;
                        }
                        if let Some(d) = z.remove(m, dot) {
                            n += 1;
                            delta.merge(d);
                        }
                    }
                    (OpReply::Int(n), (n > 0).then_some(delta))
                });
                notify_removed(view, key, "zrem", &reply);
                reply
            }
            ZCmd::RemRange(range) => {
                let event = match range {
                    super::zparse::ZRange::Rank { .. } => "zremrangebyrank",
                    super::zparse::ZRange::Score { .. } => "zremrangebyscore",
                    super::zparse::ZRange::Lex { .. } => "zremrangebylex",
                };
                let reply = write_zset(view, key, |z, dot| {
                    let o = z.ordered();
                    let (from, to) = positions(&o, range, false);
                    let doomed: Vec<Elem> = o
                        .range(from, to)
                        .into_iter()
                        .map(|(_, m)| Elem::new(m))
                        .collect();
                    let mut delta = ZSet::default();
                    for m in &doomed {
                        if let Some(d) = z.remove(m, dot) {
                            delta.merge(d);
                        }
                    }
                    let n = doomed.len() as i64;
                    (OpReply::Int(n), (n > 0).then_some(delta))
                });
                notify_removed(view, key, event, &reply);
                reply
            }
            ZCmd::Pop { max, count } => pop(key, view, *max, *count),
            ZCmd::MPop { keys, max, count } => mpop(key, keys, view, *max, *count),
            ZCmd::RangeStore { dest, args } => match read_zset(view, key) {
                Err(e) => e,
                Ok(state) => {
                    let picked =
                        zset_of(state.as_deref()).map_or_else(Vec::new, |z| range(z, args));
                    store(view, dest, picked, "zrangestore")
                }
            },
            ZCmd::Combine { .. } | ZCmd::InterCard { .. } => self.combine(key, view),
            ZCmd::Geo(GeoCmd::Search(s)) => geo_search(s, key, view),
            read => match read_zset(view, key) {
                Err(e) => e,
                Ok(state) => {
                    if let (
                        Some(_),
                        ZCmd::Scan(ScanArgs {
                            refused: Some(e), ..
                        }),
                    ) = (&state, read)
                    {
                        return OpReply::Error(e);
                    }
                    let empty = ZSet::default();
                    let exists = state.is_some();
                    self.answer(zset_of(state.as_deref()).unwrap_or(&empty), exists)
                }
            },
        }
    }

    fn answer(&self, z: &ZSet, exists: bool) -> OpReply {
        let double_or_nil = |s: Option<f64>| s.map_or(OpReply::Nil, OpReply::Double);
        match &self.cmd {
            ZCmd::Score(m) => double_or_nil(z.score(m)),
            ZCmd::MScore(ms) => {
                OpReply::Array(ms.iter().map(|m| double_or_nil(z.score(m))).collect())
            }
            ZCmd::Card => OpReply::Int(z.len() as i64),
            ZCmd::Count(range) => {
                let o = z.ordered();
                let (from, to) = positions(&o, range, false);
                OpReply::Int(to.saturating_sub(from) as i64)
            }
            ZCmd::Rank {
                member,
                rev,
                withscore,
            } => match z.score(member) {
                None => OpReply::Nil,
                Some(s) => {
                    let o = z.ordered();
                    let r = o.rank(s, member);
                    let r = if *rev { o.len() - 1 - r } else { r };
                    if *withscore {
                        OpReply::Array(vec![OpReply::Int(r as i64), OpReply::Double(s)])
                    } else {
                        OpReply::Int(r as i64)
                    }
                }
            },
            ZCmd::Range(args) => {
                let picked = range(z, args);
                if args.withscores {
                    OpReply::Scored(picked)
                } else {
                    OpReply::Array(picked.into_iter().map(|(m, _)| OpReply::Bulk(m)).collect())
                }
            }
            ZCmd::RandMember { count, withscores } => {
                rand_member(z, exists, *count, *withscores, self.seed)
            }
            ZCmd::Scan(args) => scan(z, args),
            ZCmd::Geo(g) => geo::answer(g, z),
            _ => OpReply::Error(super::ERR_SYNTAX),
        }
    }

    /// ZUNION ZINTER ZDIFF (STORE) and ZINTERCARD: every source found (a
    /// plain set counts, its members scored 1), then combined as Redis's
    /// `zunionInterDiffGenericCommand` does.
    fn combine(&self, key: &[u8], view: &mut impl KeyView) -> OpReply {
        let no_weights: Vec<f64> = Vec::new();
        let (how, sources, dest, weights, aggregate, withscores, refused, card) = match &self.cmd {
            ZCmd::Combine {
                how,
                sources,
                dest,
                weights,
                aggregate,
                withscores,
                refused,
            } => (
                *how,
                sources,
                dest.as_ref(),
                weights,
                *aggregate,
                *withscores,
                *refused,
                None,
            ),
            ZCmd::InterCard {
                sources,
                limit,
                refused,
            } => (
                ZCombine::Inter,
                sources,
                None,
                &no_weights,
                Aggregate::Sum,
                false,
                *refused,
                Some(*limit),
            ),
            _ => return OpReply::Error(super::ERR_SYNTAX),
        };
        let mut inputs: Vec<(usize, Vec<(Bytes, f64)>)> = Vec::with_capacity(sources.len());
        for (i, k) in sources.iter().enumerate() {
            let k: &[u8] = if i == 0 { key } else { k };
            match source_of(view, k) {
                Ok(s) => inputs.push((i, s)),
                Err(e) => return e,
            }
        }
        if let Some(e) = refused {
            return OpReply::Error(e);
        }
        let weight = |i: usize| weights.get(i).copied().unwrap_or(1.0);
        let mut out: Vec<(Bytes, f64)> = Vec::new();
        match how {
            ZCombine::Diff => {
                let Some((first, rest)) = inputs.split_first() else {
                    return OpReply::Error(super::ERR_SYNTAX); // the parser asks for one
                };
                let others: std::collections::HashSet<&Bytes> = rest
                    .iter()
                    .flat_map(|(_, r)| r.iter().map(|(x, _)| x))
                    .collect();
                for (m, s) in &first.1 {
                    if !others.contains(m) {
                        out.push((m.clone(), *s));
                    }
                }
            }
            ZCombine::Union => {
                inputs.sort_by_key(|(_, s)| s.len());
                let mut acc: Vec<(Bytes, f64)> = Vec::new();
                let mut at: std::collections::HashMap<Bytes, usize> = Default::default();
                for (i, src) in &inputs {
                    for (m, s) in src {
                        let mut v = weight(*i) * s;
                        if v.is_nan() {
                            v = 0.0;
                        }
                        match at.get(m) {
                            Some(&k) => aggregate_into(&mut acc[k].1, v, aggregate),
                            None => {
                                at.insert(m.clone(), acc.len());
                                acc.push((m.clone(), v));
                            }
                        }
                    }
                }
                out = acc;
            }
            ZCombine::Inter => {
                inputs.sort_by_key(|(_, s)| s.len());
                let Some((first, rest)) = inputs.split_first() else {
                    return OpReply::Error(super::ERR_SYNTAX); // the parser asks for one
                };
                // Each other source as a map: one lookup per member, not a scan.
                let rest: Vec<(usize, std::collections::HashMap<&Bytes, f64>)> = rest
                    .iter()
                    .map(|(j, src)| (*j, src.iter().map(|(x, v)| (x, *v)).collect()))
                    .collect();
                let mut n = 0u64;
                'members: for (m, s) in &first.1 {
                    let mut score = weight(first.0) * s;
                    if score.is_nan() {
                        score = 0.0;
                    }
                    for (j, src) in &rest {
                        let v = if sources[*j] == sources[first.0] {
                            s * weight(*j)
                        } else {
                            match src.get(m) {
                                Some(v) => v * weight(*j),
                                None => continue 'members,
                            }
                        };
                        aggregate_into(&mut score, v, aggregate);
                    }
                    if let Some(limit) = card {
                        n += 1;
                        if limit > 0 && n >= limit {
                            break;
                        }
                    } else {
                        out.push((m.clone(), score));
                    }
                }
                if card.is_some() {
                    return OpReply::Int(n as i64);
                }
            }
        }
        sort_scored(&mut out);
        match dest {
            Some(d) => {
                let event = match how {
                    ZCombine::Union => "zunionstore",
                    ZCombine::Inter => "zinterstore",
                    ZCombine::Diff => "zdiffstore",
                };
                store(view, d, out, event)
            }
            None if withscores => OpReply::Scored(out),
            None => OpReply::Array(out.into_iter().map(|(m, _)| OpReply::Bulk(m)).collect()),
        }
    }
}

fn aggregate_into(target: &mut f64, v: f64, how: Aggregate) {
    match how {
        Aggregate::Sum => {
            *target += v;
            if target.is_nan() {
                *target = 0.0;
            }
        }
        Aggregate::Min => {
            if v < *target {
                *target = v;
            }
        }
        Aggregate::Max => {
            if v > *target {
                *target = v;
            }
        }
    }
}

/// Redis's order: score (`-0` equal to `0`), then member bytes.
fn sort_scored(v: &mut [(Bytes, f64)]) {
    let key = |s: f64| if s == 0.0 { 0.0 } else { s };
    v.sort_by(|a, b| key(a.1).total_cmp(&key(b.1)).then_with(|| a.0.cmp(&b.0)));
}

fn zset_of(state: Option<&KeyState>) -> Option<&ZSet> {
    match state?.collection.as_ref()? {
        Collection::ZSet(z) => Some(z),
        _ => None,
    }
}

/// The sorted set `key` holds (`None` when absent), or WRONGTYPE. The
/// state is shared with the store, so an order index a read builds stays
/// with it.
fn read_zset(
    view: &mut impl KeyView,
    key: &[u8],
) -> Result<Option<std::sync::Arc<KeyState>>, OpReply> {
    read_collection(view, key, Kind::ZSet)
}

/// A source of ZUNION and its relatives: a sorted set, or a set whose
/// members score 1; absent: empty; anything else WRONGTYPE.
fn source_of(view: &mut impl KeyView, key: &[u8]) -> Result<Vec<(Bytes, f64)>, OpReply> {
    let now = view.now_ms();
    match view.lookup(key) {
        None => Ok(Vec::new()),
        Some(Value::Str(_)) => Err(OpReply::Error(WRONGTYPE)),
        Some(Value::Typed(s)) => match (s.kind(now), s.collection.as_ref()) {
            (Kind::None, _) => Ok(Vec::new()),
            (Kind::ZSet, Some(Collection::ZSet(z))) => Ok(z
                .iter()
                .map(|(m, s)| (Bytes::copy_from_slice(m), s))
                .collect()),
            (Kind::Set, Some(Collection::Set(x))) => {
                Ok(x.iter().map(|m| (Bytes::copy_from_slice(m), 1.0)).collect())
            }
            _ => Err(OpReply::Error(WRONGTYPE)),
        },
    }
}

/// Runs a writing command on `key` (see `sets::write_set`).
fn write_zset(
    view: &mut impl KeyView,
    key: &[u8],
    f: impl FnOnce(&ZSet, elsa_lattice::Version) -> (OpReply, Option<ZSet>),
) -> OpReply {
    let w = match begin_collection_write(view, key, Kind::ZSet) {
        Ok(w) => w,
        Err(e) => return e,
    };
    let empty = ZSet::default();
    let z = zset_of(w.state.as_deref()).unwrap_or(&empty);
    let (reply, delta) = f(z, w.dot);
    // Only adds of members already there, at their scores: nothing a
    // client reads changed.
    let unseen = delta.as_ref().is_some_and(|d| {
        d.entries() == d.len()
            && d.iter()
                .all(|(m, s)| z.score(m).map(f64::to_bits) == Some(s.to_bits()))
    });
    let CollectionWrite {
        state, mut prefix, ..
    } = w;
    drop(state);
    if let Some(delta) = delta {
        prefix.merge(KeyState::of(Collection::ZSet(delta)));
        if unseen {
            view.merge_unseen(key, prefix);
        } else {
            view.merge(key, prefix);
        }
    }
    reply
}

/// ZADD and ZINCRBY: each pair in order, as `zsetAdd` does, then one
/// delta with each changed member's final score.
fn add(key: &[u8], view: &mut impl KeyView, f: AddFlags, pairs: &[(f64, Bytes)]) -> OpReply {
    let mut changed = false;
    let reply = write_zset(view, key, |z, dot| {
        let (mut added, mut updated, mut processed) = (0i64, 0i64, 0);
        let mut result = 0.0;
        // What this command made of each member so far: its score, and
        // whether it is new (a hash map: a ZADD may name a million pairs).
        let mut now: std::collections::HashMap<&Bytes, (f64, bool)> = Default::default();
        for (score, m) in pairs {
            let cur = match now.get(m) {
                Some((s, _)) => Some(*s),
                None => z.score(m),
            };
            match cur {
                Some(cur) => {
                    if f.nx {
                        continue;
                    }
                    let new = if f.incr { score + cur } else { *score };
                    if new.is_nan() {
                        return (OpReply::Error(ERR_SCORE_NAN), None);
                    }
                    if (f.lt && new >= cur) || (f.gt && new <= cur) {
                        continue;
                    }
                    processed += 1;
                    result = new;
                    if new != cur {
                        updated += 1;
                    }
                    // Written even when the score stays (Redis counts no
                    // change): the member's fresh dot keeps it through a
                    // remove made concurrently elsewhere.
                    set_now(&mut now, m, new, false);
                }
                None if !f.xx => {
                    added += 1;
                    processed += 1;
                    result = *score;
                    set_now(&mut now, m, *score, true);
                }
                None => {}
            }
        }
        let mut delta = ZSet::default();
        let most = packed_member();
        let wide = now.iter().any(|(m, (_, new))| *new && m.len() > most);
        for (m, (s, _)) in &now {
            // An increment merges as one (concurrent ones elsewhere all
            // count); a zero increment is just the score (no tally).
            let d = match pairs.first() {
                Some((by, _)) if f.incr && *by != 0.0 => match z.incr(m, *by, dot) {
                    Some((_, d)) => d,
                    None => return (OpReply::Error(ERR_SCORE_NAN), None),
                },
                _ => z.set(m, *s, dot),
            };
            delta.merge(d);
        }
        if wide {
            // Redis leaves its listpack for good (see `packed`).
            delta.mark_wide();
        }
        changed = added + updated > 0;
        let reply = if f.incr {
            if processed > 0 {
                OpReply::Double(result)
            } else {
                OpReply::Nil
            }
        } else {
            OpReply::Int(if f.ch { added + updated } else { added })
        };
        (reply, (!now.is_empty()).then_some(delta))
    });
    if changed {
        let event = if f.incr { "zincr" } else { "zadd" };
        super::notify(view, crate::notify::ZSET, event, key);
    }
    reply
}

fn set_now<'a>(
    now: &mut std::collections::HashMap<&'a Bytes, (f64, bool)>,
    m: &'a Bytes,
    s: f64,
    new: bool,
) {
    // A small Redis set stores `-0` as the integer 0: it reads back as 0
    // (the command's own reply still says -0), so -0 is stored as 0.
    let s = if s == 0.0 { 0.0 } else { s };
    now.entry(m).and_modify(|e| e.0 = s).or_insert((s, new));
}

/// ZRANDMEMBER: one member, `count` distinct ones, or `-count` with
/// repeats — picked from the set in its order, so a seed picks alike on
/// every replica.
fn rand_member(
    z: &ZSet,
    exists: bool,
    count: Option<i64>,
    withscores: bool,
    mut seed: u64,
) -> OpReply {
    let o = z.ordered();
    let mut all: Vec<(Bytes, f64)> = o
        .range(0, o.len())
        .into_iter()
        .map(|(s, m)| (Bytes::copy_from_slice(m), s))
        .collect();
    let Some(count) = count else {
        if all.is_empty() {
            return OpReply::Nil;
        }
        let i = (next(&mut seed) % all.len() as u64) as usize;
        return OpReply::Bulk(all.swap_remove(i).0);
    };
    if !exists || all.is_empty() || count == 0 {
        return OpReply::Array(Vec::new());
    }
    let picked: Vec<(Bytes, f64)> = if count < 0 {
        (0..count.unsigned_abs())
            .map(|_| all[(next(&mut seed) % all.len() as u64) as usize].clone())
            .collect()
    } else {
        let n = (count as u64).min(all.len() as u64) as usize;
        for i in 0..n {
            let j = i + (next(&mut seed) % (all.len() - i) as u64) as usize;
            all.swap(i, j);
        }
        all.truncate(n);
        all
    };
    if withscores {
        OpReply::Scored(picked)
    } else {
        OpReply::Array(picked.into_iter().map(|(m, _)| OpReply::Bulk(m)).collect())
    }
}

/// The longest member a packed sorted set holds now (Redis's
/// `zset-max-listpack-value`; see [`limits`](super::limits)).
fn packed_member() -> usize {
    super::limits::get(&super::limits::ZSET_VALUE)
}

/// The most members a packed sorted set holds now
/// (`zset-max-listpack-entries`).
fn packed_entries() -> usize {
    super::limits::get(&super::limits::ZSET_ENTRIES)
}

/// True when Redis would keep this sorted set packed: it never held more
/// than `zset-max-listpack-entries` members or a member over
/// `zset-max-listpack-value` bytes since it was created (Redis does not
/// pack one again).
pub(super) fn packed(z: &ZSet) -> bool {
    let peak = z.peak();
    let most = packed_member();
    !peak.wide
        && (peak.most as usize).max(z.len()) <= packed_entries()
        && z.iter().all(|(m, _)| m.len() <= most)
}

/// ZSCAN: a small set whole (cursor 0), its scores as a packed Redis set
/// stores them; a bigger one `count` members at a time in member order.
fn scan(z: &ZSet, args: &ScanArgs) -> OpReply {
    let most = packed_member();
    let packed = z.len() <= packed_entries() && z.iter().all(|(m, _)| m.len() <= most);
    let mut members: Vec<(Bytes, f64)> = if packed {
        let o = z.ordered();
        o.range(0, o.len())
            .into_iter()
            .map(|(s, m)| (Bytes::copy_from_slice(m), s))
            .collect()
    } else {
        z.iter()
            .map(|(m, s)| (Bytes::copy_from_slice(m), s))
            .collect()
    };
    let next_cursor = if packed {
        0
    } else {
        members.sort_by(|a, b| a.0.cmp(&b.0));
        let from = (args.cursor as usize).min(members.len());
        let to = from.saturating_add(args.count as usize).min(members.len());
        members = members.drain(from..to).collect();
        if to >= z.len() {
            0
        } else {
            to as u64
        }
    };
    let fmt = |s: f64| {
        if packed {
            format_d2string(s)
        } else {
            format_g17(s)
        }
    };
    OpReply::Array(vec![
        OpReply::Bulk(Bytes::from(next_cursor.to_string())),
        OpReply::Array(
            members
                .into_iter()
                .filter(|(m, _)| args.matches(m))
                .flat_map(|(m, s)| [OpReply::Bulk(m), OpReply::Bulk(Bytes::from(fmt(s)))])
                .collect(),
        ),
    ])
}

#[cfg(test)]
mod tests;

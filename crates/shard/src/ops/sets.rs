//! Set commands (Redis's `t_set.c`) on the add-wins set
//! (`elsa_lattice::OrSet`): SADD SREM SMEMBERS SISMEMBER SMISMEMBER SCARD
//! SPOP SRANDMEMBER SSCAN, and the commands of several keys — SMOVE,
//! SINTER SUNION SDIFF (and their STORE forms), SINTERCARD — which reach
//! their other keys through [`crate::ops::Op::other_keys`], so every path
//! holds all of them and runs the command in one atomic step.
//!
//! A write is one delta at one version: an add adds a dot, a remove takes
//! away the adds it has seen, so an add concurrent with a remove in
//! another region survives (`docs/datatypes.md`). Replies and errors are
//! Redis 7.0's; member order is unspecified, as in Redis.

use bytes::{Buf, BufMut, Bytes};
use elsa_lattice::{Collection, Crdt, Elem, KeyState, Kind, OrSet};

use super::hashes::{get_bytes, get_list, get_u64, next, put_bytes, put_list};
use super::{
    begin_collection_write, parse_i64, read_collection, CollectionWrite, KeyView, OpReply,
    ScanArgs, Value, WRONGTYPE,
};

/// How the members of several sets combine.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Combine {
    /// SINTER
    Inter,
    /// SUNION
    Union,
    /// SDIFF: the first set without the others.
    Diff,
}

/// One set command on one key (and, for some, others).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SetOp {
    /// SADD member…
    Add(Vec<Bytes>),
    /// SREM member…
    Rem(Vec<Bytes>),
    /// SMEMBERS
    Members,
    /// SISMEMBER member
    IsMember(Bytes),
    /// SMISMEMBER member…
    MIsMember(Vec<Bytes>),
    /// SCARD
    Card,
    /// SPOP [count]
    Pop {
        /// `None`: one member (or nil).
        count: Option<u64>,
        /// Seed of the choice.
        seed: u64,
    },
    /// SRANDMEMBER [count]
    RandMember {
        /// `None`: one member; negative: may repeat.
        count: Option<i64>,
        /// Seed of the choice.
        seed: u64,
    },
    /// SSCAN cursor [MATCH pattern] [COUNT count]
    Scan(ScanArgs),
    /// SMOVE (this key is the source) destination member
    Move {
        /// The destination (`other_keys`).
        to: [Bytes; 1],
        /// The member.
        member: Bytes,
    },
    /// SINTER / SUNION / SDIFF, and their STORE forms: this key is the
    /// first set; `keys` the other sets, then the destination if `store`.
    Combine {
        /// How.
        how: Combine,
        /// The other sets (and the destination, last, if `store`).
        keys: Vec<Bytes>,
        /// STORE form.
        store: bool,
    },
    /// SINTERCARD: this key is the first set.
    InterCard {
        /// The other sets.
        keys: Vec<Bytes>,
        /// LIMIT (0: none).
        limit: u64,
    },
}

impl SetOp {
    /// True when the command may change a key.
    pub fn is_write(&self) -> bool {
        match self {
            SetOp::Add(_) | SetOp::Rem(_) | SetOp::Pop { .. } | SetOp::Move { .. } => true,
            SetOp::Combine { store, .. } => *store,
            _ => false,
        }
    }

    /// Keys besides the one the op is applied to (see `Op::other_keys`).
    pub fn other_keys(&self) -> &[Bytes] {
        match self {
            SetOp::Move { to, .. } => to,
            SetOp::Combine { keys, .. } | SetOp::InterCard { keys, .. } => keys,
            _ => &[],
        }
    }

    /// Runs the command on `key`.
    pub fn apply(&self, key: &[u8], view: &mut impl KeyView) -> OpReply {
        match self {
            SetOp::Add(members) => add(key, view, members),
            SetOp::Rem(members) => rem(key, view, members),
            SetOp::Pop { count, seed } => pop(key, view, *count, *seed),
            SetOp::Move { to, member } => move_member(key, view, &to[0], member),
            SetOp::Combine { how, keys, store } => combine(key, view, *how, keys, *store),
            SetOp::InterCard { keys, limit } => inter_card(key, view, keys, *limit),
            read => match read_collection(view, key, Kind::Set) {
                Err(e) => e,
                Ok(state) => {
                    if let (
                        Some(_),
                        SetOp::Scan(ScanArgs {
                            refused: Some(e), ..
                        }),
                    ) = (&state, read)
                    {
                        return OpReply::Error(e);
                    }
                    let empty = OrSet::default();
                    let set = set_of(state.as_deref()).unwrap_or(&empty);
                    read.answer(set, state.is_some())
                }
            },
        }
    }

    fn answer(&self, s: &OrSet, exists: bool) -> OpReply {
        match self {
            SetOp::Members => OpReply::Set(s.iter().map(Bytes::copy_from_slice).collect()),
            SetOp::IsMember(m) => OpReply::Int(s.contains(&m[..]) as i64),
            SetOp::MIsMember(ms) => OpReply::Array(
                ms.iter()
                    .map(|m| OpReply::Int(s.contains(&m[..]) as i64))
                    .collect(),
            ),
            SetOp::Card => OpReply::Int(s.len() as i64),
            SetOp::RandMember { count, seed } => rand_member(s, exists, *count, *seed),
            SetOp::Scan(args) => scan(s, args),
            _ => OpReply::Error(super::ERR_SYNTAX),
        }
    }
}

fn set_of(state: Option<&KeyState>) -> Option<&OrSet> {
    match state?.collection.as_ref()? {
        Collection::Set(s) => Some(s),
        _ => None,
    }
}

/// Runs a writing set command on `key` (see `hashes::write_hash`): `f`
/// gets the set as stored and the version, answers the reply and the
/// delta to merge.
fn write_set(
    view: &mut impl KeyView,
    key: &[u8],
    f: impl FnOnce(&OrSet, elsa_lattice::Version) -> (OpReply, Option<OrSet>),
) -> OpReply {
    let w = match begin_collection_write(view, key, Kind::Set) {
        Ok(w) => w,
        Err(e) => return e,
    };
    let empty = OrSet::default();
    let set = set_of(w.state.as_deref()).unwrap_or(&empty);
    let (reply, delta) = f(set, w.dot);
    // Only adds of members already there: nothing a client reads changed.
    let unseen = delta
        .as_ref()
        .is_some_and(|d| d.entries() == d.len() && d.iter().all(|m| set.contains(m)));
    let CollectionWrite {
        state, mut prefix, ..
    } = w;
    drop(state);
    if let Some(delta) = delta {
        prefix.merge(KeyState::of(Collection::Set(delta)));
        if unseen {
            view.merge_unseen(key, prefix);
        } else {
            view.merge(key, prefix);
        }
    }
    reply
}

/// Raises `event` (a set event) when `reply` counts a change, then — for
/// a removal (`removes`) — `del` when it emptied the set.
fn notify_count(
    view: &mut impl KeyView,
    key: &[u8],
    event: &'static str,
    reply: &OpReply,
    removes: bool,
) {
    if matches!(reply, OpReply::Int(n) if *n > 0) {
        super::notify(view, crate::notify::SET, event, key);
        if removes {
            super::notify_if_gone(view, key);
        }
    }
}

fn add(key: &[u8], view: &mut impl KeyView, members: &[Bytes]) -> OpReply {
    let reply = add_members(key, view, members);
    notify_count(view, key, "sadd", &reply, false);
    reply
}

fn add_members(key: &[u8], view: &mut impl KeyView, members: &[Bytes]) -> OpReply {
    write_set(view, key, |set, dot| {
        let mut delta = OrSet::default();
        let mut added = 0;
        for m in members {
            if delta.contains(&m[..]) {
                continue;
            }
            // A member already there is added again all the same (Redis
            // counts it 0): its fresh dot keeps it through a remove made
            // concurrently elsewhere (`docs/datatypes.md`). A copy (into
            // the set's compact form), never the argument: a slice of the
            // whole request, kept alive as long as the member.
            let new = !set.contains(&m[..]);
            delta.merge(set.add(Elem::new(m), dot));
            if new {
                added += 1;
                if !delta.peak().wide && parse_i64(m).is_none() {
                    // Redis leaves its intset for good (see `intset`).
                    delta.mark_wide();
                }
            }
        }
        (OpReply::Int(added), (!members.is_empty()).then_some(delta))
    })
}

/// The removal of `members` (those present) as one delta.
fn removal(set: &OrSet, members: &[Bytes], dot: elsa_lattice::Version) -> (i64, OrSet) {
    let mut delta = OrSet::default();
    let mut removed = 0;
    for m in members {
        if delta.has_member(&m[..]) {
            continue;
        }
        if let Some(d) = set.remove(&m[..], dot) {
            removed += 1;
            delta.merge(d);
        }
    }
    (removed, delta)
}

fn rem(key: &[u8], view: &mut impl KeyView, members: &[Bytes]) -> OpReply {
    let reply = write_set(view, key, |set, dot| {
        let (removed, delta) = removal(set, members, dot);
        (OpReply::Int(removed), (removed > 0).then_some(delta))
    });
    notify_count(view, key, "srem", &reply, true);
    reply
}

/// The members in a stable order (hash order differs between replicas):
/// what a seed picks from.
fn sorted(s: &OrSet) -> Vec<Bytes> {
    let mut v: Vec<Bytes> = s.iter().map(Bytes::copy_from_slice).collect();
    v.sort();
    v
}

/// `n` distinct members picked with `seed` (a partial Fisher–Yates).
fn pick(s: &OrSet, n: usize, mut seed: u64) -> Vec<Bytes> {
    let mut v = sorted(s);
    let n = n.min(v.len());
    for i in 0..n {
        let j = i + (next(&mut seed) % (v.len() - i) as u64) as usize;
        v.swap(i, j);
    }
    v.truncate(n);
    v
}

fn pop(key: &[u8], view: &mut impl KeyView, count: Option<u64>, seed: u64) -> OpReply {
    let mut popped = 0;
    let reply = write_set(view, key, |set, dot| {
        let n = count.unwrap_or(1) as usize;
        let chosen = pick(set, n, seed);
        popped = chosen.len() as i64;
        let (_, delta) = removal(set, &chosen, dot);
        let changed = (!chosen.is_empty()).then_some(delta);
        let reply = match count {
            None => chosen
                .into_iter()
                .next()
                .map_or(OpReply::Nil, OpReply::Bulk),
            Some(_) => OpReply::Set(chosen),
        };
        (reply, changed)
    });
    notify_count(view, key, "spop", &OpReply::Int(popped), true);
    reply
}

fn rand_member(s: &OrSet, exists: bool, count: Option<i64>, mut seed: u64) -> OpReply {
    let Some(count) = count else {
        return pick(s, 1, seed)
            .into_iter()
            .next()
            .map_or(OpReply::Nil, OpReply::Bulk);
    };
    if !exists || count == 0 {
        return OpReply::Array(Vec::new());
    }
    if count > 0 {
        return OpReply::Array(
            pick(s, count as usize, seed)
                .into_iter()
                .map(OpReply::Bulk)
                .collect(),
        );
    }
    let all = sorted(s);
    OpReply::Array(
        (0..count.unsigned_abs())
            .map(|_| OpReply::Bulk(all[(next(&mut seed) % all.len() as u64) as usize].clone()))
            .collect(),
    )
}

/// True when Redis would keep this set an intset: it never held more than
/// `set-max-intset-entries` members or one that is not an integer since it
/// was created (Redis does not make an intset again; see
/// [`limits`](super::limits)).
pub(super) fn intset(s: &OrSet) -> bool {
    let peak = s.peak();
    !peak.wide
        && (peak.most as usize).max(s.len())
            <= super::limits::get(&super::limits::SET_INTSET_ENTRIES)
        && s.iter().all(|m| parse_i64(m).is_some())
}

/// SSCAN: an intset whole (cursor 0), as Redis 7.0 answers its only
/// packed set encoding; any other set `count` members at a time in sorted
/// order (see `ScanArgs::page`) — BullMQ pages a set of 65 strings with
/// `COUNT 50` and expects a cursor back.
fn scan(s: &OrSet, args: &ScanArgs) -> OpReply {
    let packed = intset(s);
    let members: Vec<Bytes> = s.iter().map(Bytes::copy_from_slice).collect();
    let (page, next_cursor) = args.page(members, packed);
    OpReply::Array(vec![
        OpReply::Bulk(Bytes::from(next_cursor.to_string())),
        OpReply::Array(
            page.into_iter()
                .filter(|m| args.matches(m))
                .map(OpReply::Bulk)
                .collect(),
        ),
    ])
}

/// What a key holds for a command reading several sets: its members,
/// `None` when absent, WRONGTYPE when not a set.
fn members_of(view: &mut impl KeyView, key: &[u8]) -> Result<Option<Vec<Bytes>>, OpReply> {
    Ok(read_collection(view, key, Kind::Set)?
        .and_then(|s| set_of(Some(&s)).map(|x| x.iter().map(Bytes::copy_from_slice).collect())))
}

fn move_member(key: &[u8], view: &mut impl KeyView, to: &[u8], member: &Bytes) -> OpReply {
    let src = match read_collection(view, key, Kind::Set) {
        Err(e) => return e,
        Ok(None) => {
            // A missing source answers 0 before the destination's type
            // is looked at (Redis checks the source first).
            return OpReply::Int(0);
        }
        Ok(Some(s)) => s,
    };
    if let Err(e) = read_collection(view, to, Kind::Set) {
        return e;
    }
    let present = set_of(Some(&src)).is_some_and(|s| s.contains(&member[..]));
    drop(src);
    if key == to {
        return OpReply::Int(present as i64);
    }
    if !present {
        return OpReply::Int(0);
    }
    rem(key, view, std::slice::from_ref(member));
    add(to, view, std::slice::from_ref(member));
    OpReply::Int(1)
}

/// The sets a combining command reads, in order: first this key's.
fn sets_of(
    key: &[u8],
    view: &mut impl KeyView,
    others: &[Bytes],
) -> Result<Vec<Option<Vec<Bytes>>>, OpReply> {
    let mut out = Vec::with_capacity(others.len() + 1);
    // Every key's type is checked before anything is answered.
    out.push(members_of(view, key)?);
    for k in others {
        out.push(members_of(view, k)?);
    }
    Ok(out)
}

fn combined(how: Combine, sets: Vec<Option<Vec<Bytes>>>) -> Vec<Bytes> {
    use std::collections::HashSet;
    let mut it = sets.into_iter();
    let first: Vec<Bytes> = it.next().flatten().unwrap_or_default();
    let rest: Vec<HashSet<Bytes>> = it
        .map(|s| s.unwrap_or_default().into_iter().collect())
        .collect();
    match how {
        Combine::Inter => first
            .into_iter()
            .filter(|m| rest.iter().all(|r| r.contains(m)))
            .collect(),
        Combine::Diff => first
            .into_iter()
            .filter(|m| !rest.iter().any(|r| r.contains(m)))
            .collect(),
        Combine::Union => {
            let mut all: HashSet<Bytes> = first.into_iter().collect();
            for r in rest {
                all.extend(r);
            }
            all.into_iter().collect()
        }
    }
}

fn combine(
    key: &[u8],
    view: &mut impl KeyView,
    how: Combine,
    keys: &[Bytes],
    store: bool,
) -> OpReply {
    let (sources, dest) = if store {
        let (d, s) = keys
            .split_last()
            .expect("the parser puts the destination last");
        (s, Some(d))
    } else {
        (keys, None)
    };
    let sets = match sets_of(key, view, sources) {
        Ok(s) => s,
        Err(e) => return e,
    };
    let empty_inter = how == Combine::Inter && sets.iter().any(Option::is_none);
    let result = if empty_inter {
        Vec::new()
    } else {
        combined(how, sets)
    };
    let Some(dest) = dest else {
        return OpReply::Set(result);
    };
    let n = result.len() as i64;
    if result.is_empty() {
        let existed = view.notifies(crate::notify::GENERIC) && view.kind(dest) != Kind::None;
        view.store(dest, None);
        if existed {
            view.notify(crate::notify::GENERIC, "del", dest);
        }
    } else {
        // Replaces whatever the destination held, of any type.
        let (_, dot) = view.stamp();
        let mut s = OrSet::default();
        for m in result {
            let d = s.add(Elem::from(m), dot);
            s.merge(d);
        }
        view.store(
            dest,
            Some(Value::Typed(std::sync::Arc::new(KeyState::of(
                Collection::Set(s),
            )))),
        );
        let event = match how {
            Combine::Inter => "sinterstore",
            Combine::Union => "sunionstore",
            Combine::Diff => "sdiffstore",
        };
        super::notify(view, crate::notify::SET, event, dest);
    }
    OpReply::Int(n)
}

fn inter_card(key: &[u8], view: &mut impl KeyView, keys: &[Bytes], limit: u64) -> OpReply {
    let sets = match sets_of(key, view, keys) {
        Ok(s) => s,
        Err(e) => return e,
    };
    if sets.iter().any(Option::is_none) {
        return OpReply::Int(0);
    }
    let n = combined(Combine::Inter, sets).len() as u64;
    OpReply::Int(if limit > 0 { n.min(limit) } else { n } as i64)
}

/// WRONGTYPE, for the parser's unit tests.
pub const WRONG: &str = WRONGTYPE;

// ---- the wire form ---------------------------------------------------------

impl SetOp {
    /// The op as bytes (`decode` reads it back).
    pub fn encode(&self) -> Bytes {
        let mut out = Vec::new();
        match self {
            SetOp::Add(ms) => {
                out.put_u8(0);
                put_list(&mut out, ms);
            }
            SetOp::Rem(ms) => {
                out.put_u8(1);
                put_list(&mut out, ms);
            }
            SetOp::Members => out.put_u8(2),
            SetOp::IsMember(m) => {
                out.put_u8(3);
                put_bytes(&mut out, m);
            }
            SetOp::MIsMember(ms) => {
                out.put_u8(4);
                put_list(&mut out, ms);
            }
            SetOp::Card => out.put_u8(5),
            SetOp::Pop { count, seed } => {
                out.put_u8(6);
                out.put_u8(u8::from(count.is_some()));
                out.put_u64_le(count.unwrap_or(0));
                out.put_u64_le(*seed);
            }
            SetOp::RandMember { count, seed } => {
                out.put_u8(7);
                out.put_u8(u8::from(count.is_some()));
                out.put_i64_le(count.unwrap_or(0));
                out.put_u64_le(*seed);
            }
            SetOp::Scan(args) => {
                out.put_u8(8);
                args.encode(&mut out);
            }
            SetOp::Move { to, member } => {
                out.put_u8(9);
                put_bytes(&mut out, &to[0]);
                put_bytes(&mut out, member);
            }
            SetOp::Combine { how, keys, store } => {
                out.put_u8(10);
                out.put_u8(match how {
                    Combine::Inter => 0,
                    Combine::Union => 1,
                    Combine::Diff => 2,
                });
                out.put_u8(u8::from(*store));
                put_list(&mut out, keys);
            }
            SetOp::InterCard { keys, limit } => {
                out.put_u8(11);
                out.put_u64_le(*limit);
                put_list(&mut out, keys);
            }
        }
        Bytes::from(out)
    }

    /// Reads what [`SetOp::encode`] wrote; `None` for anything else.
    pub fn decode(mut buf: Bytes) -> Option<SetOp> {
        let byte = |buf: &mut Bytes| buf.has_remaining().then(|| buf.get_u8());
        let op = match byte(&mut buf)? {
            0 => SetOp::Add(get_list(&mut buf)?),
            1 => SetOp::Rem(get_list(&mut buf)?),
            2 => SetOp::Members,
            3 => SetOp::IsMember(get_bytes(&mut buf)?),
            4 => SetOp::MIsMember(get_list(&mut buf)?),
            5 => SetOp::Card,
            6 => {
                let has = byte(&mut buf)? == 1;
                let count = get_u64(&mut buf)?;
                SetOp::Pop {
                    count: has.then_some(count),
                    seed: get_u64(&mut buf)?,
                }
            }
            7 => {
                let has = byte(&mut buf)? == 1;
                let count = get_u64(&mut buf)? as i64;
                SetOp::RandMember {
                    count: has.then_some(count),
                    seed: get_u64(&mut buf)?,
                }
            }
            8 => SetOp::Scan(ScanArgs::decode(&mut buf)?),
            9 => SetOp::Move {
                to: [get_bytes(&mut buf)?],
                member: get_bytes(&mut buf)?,
            },
            10 => {
                let how = match byte(&mut buf)? {
                    0 => Combine::Inter,
                    1 => Combine::Union,
                    2 => Combine::Diff,
                    _ => return None,
                };
                let store = byte(&mut buf)? == 1;
                let keys = get_list(&mut buf)?;
                if store && keys.is_empty() {
                    return None;
                }
                SetOp::Combine { how, keys, store }
            }
            11 => {
                let limit = get_u64(&mut buf)?;
                SetOp::InterCard {
                    keys: get_list(&mut buf)?,
                    limit,
                }
            }
            _ => return None,
        };
        buf.is_empty().then_some(op)
    }
}

#[cfg(test)]
#[path = "sets_tests.rs"]
mod tests;

//! The stream commands that write: XADD (with its trim), XTRIM, XDEL,
//! XSETID — each a delta of the stream lattice written as the command's
//! version, with Redis's checks and keyspace events.

use bytes::Bytes;
use elsa_lattice::stream::{Stream, StreamId};
use elsa_lattice::stream_fields::FieldsRef;
use elsa_lattice::{Collection, Crdt, KeyState, Kind};

use super::listpack::{Held, NodeFill};
use super::parse::{self, AddArgs, AddId, Trim, TrimTo};
use super::{id_bulk, stream, ERR_EXHAUSTED, ERR_ID_TOO_SMALL, ERR_SETID_ENTRIES, ERR_SETID_SMALL};
use crate::notify::STREAM;
use crate::ops::{
    begin_collection_write, notify, read_collection, CollectionWrite, KeyView, OpReply,
    ERR_NO_SUCH_KEY,
};

/// Merges a stream delta written as the write's version.
fn write(view: &mut impl KeyView, key: &[u8], w: CollectionWrite, delta: Stream) {
    let CollectionWrite {
        state, mut prefix, ..
    } = w;
    drop(state);
    prefix.merge(KeyState::of(Collection::Stream(Box::new(delta))));
    view.merge(key, prefix);
}

pub(super) fn add(key: &[u8], view: &mut impl KeyView, a: &AddArgs, fields: &[Bytes]) -> OpReply {
    let w = match begin_collection_write(view, key, Kind::Stream) {
        Ok(w) => w,
        Err(e) => return e,
    };
    let empty = Stream::default();
    let shown = w
        .state
        .as_deref()
        .filter(|s| s.kind(view.now_ms()) == Kind::Stream);
    let x = match (&w.state, shown) {
        (Some(s), _) => match &s.collection {
            Some(Collection::Stream(x)) => x,
            _ => &empty,
        },
        _ => &empty,
    };
    if shown.is_none() && a.nomkstream {
        return OpReply::Nil;
    }
    let last = x.last_id();
    if last == StreamId::MAX {
        return OpReply::Error(ERR_EXHAUSTED);
    }
    let tag = super::id_tag();
    let id = match (a.id, tag) {
        (AddId::Exact(id), _) => id,
        (AddId::Ms(ms), Some(tag)) => match tagged(last, ms, tag) {
            Some(id) => id,
            None => return OpReply::Error(ERR_ID_TOO_SMALL),
        },
        (AddId::Ms(ms), None) if ms == last.ms => match last.seq.checked_add(1) {
            Some(seq) => StreamId::new(ms, seq),
            None => return OpReply::Error(ERR_ID_TOO_SMALL),
        },
        (AddId::Ms(ms), None) => StreamId::new(ms, 0),
        (AddId::Auto, Some(tag)) => {
            // At least the write's stamp: the read horizon of the other
            // regions relies on it (`super::set_read_horizon`). And at
            // least this node's own horizon: its followers have read up
            // to it, and a clock behind the others' (whose flush times
            // set it) would put the entry below, where they never look
            // again (`tests/nemesis_streams.rs`, seed 14: two entries
            // skipped while this node's clock ran 400 ms behind).
            // (A transaction's stamp is a placeholder, no time: its
            // view's floor stands for it.)
            let stamped = match w.dot.commit_ts {
                ts if crate::ops::is_pending(ts) => 0,
                ts => elsa_lattice::Hlc::<elsa_lattice::SystemClock>::millis(ts),
            };
            let horizon = match super::read_horizon() {
                u64::MAX => 0,
                h => h,
            };
            // And at least every gossip flush before it (or pinned until
            // its transaction's writes are in: `id_floor`).
            let floor = view.id_floor_ms();
            let ms = view
                .now_ms()
                .max(stamped)
                .max(last.ms)
                .max(horizon)
                .max(floor);
            match tagged(last, ms, tag).or_else(|| tagged(last, ms.checked_add(1)?, tag)) {
                Some(id) => id,
                None => return OpReply::Error(ERR_EXHAUSTED),
            }
        }
        (AddId::Auto, None) => {
            let now = view.now_ms();
            if now > last.ms {
                StreamId::new(now, 0)
            } else {
                last.next().expect("below the greatest ID")
            }
        }
    };
    if id <= last {
        return OpReply::Error(ERR_ID_TOO_SMALL);
    }
    let pairs =
        elsa_lattice::stream_fields::Fields::new(fields.chunks(2).map(|p| (&p[0][..], &p[1][..])));
    let planned = a
        .trim
        .as_ref()
        .map(|t| plan_trim(x, Some((id, pairs.as_ref())), t));
    let mut delta = x.add(id, pairs, w.dot);
    let mut trimmed = 0;
    if let Some((n, floor)) = planned {
        if let Some(floor) = floor {
            delta.merge(x.trim_below(floor, w.dot));
        }
        trimmed = n;
    }
    write(view, key, w, delta);
    notify(view, STREAM, "xadd", key);
    if trimmed > 0 {
        notify(view, STREAM, "xtrim", key);
    }
    id_bulk(id)
}

/// `xrestore key bytes`: the key written whole as the stream in a
/// state's bytes (RESTORE's write, the key checked and cleared before).
pub(super) fn restore(key: &[u8], view: &mut impl KeyView, bytes: &[u8]) -> OpReply {
    let state = KeyState::from_bytes(Bytes::copy_from_slice(bytes));
    match state {
        Some(s) if matches!(s.collection, Some(Collection::Stream(_))) => {
            view.store(key, Some(crate::ops::Value::Typed(std::sync::Arc::new(s))));
            OpReply::Ok
        }
        _ => OpReply::Error("ERR Bad data format"),
    }
}

/// The next ID in millisecond `ms` that carries `tag` in its sequence's
/// low 32 bits (see [`super::set_id_tag`]): above `last` (None when `ms`
/// is below it or full).
pub(super) fn tagged(last: StreamId, ms: u64, tag: u32) -> Option<StreamId> {
    let n = match ms.cmp(&last.ms) {
        std::cmp::Ordering::Less => return None,
        std::cmp::Ordering::Equal => (last.seq >> 32).checked_add(1)?,
        std::cmp::Ordering::Greater => 0,
    };
    let seq = n.checked_mul(1 << 32)? | u64::from(tag);
    (seq >> 32 == n).then_some(StreamId::new(ms, seq))
}

/// How many shown entries a trim removes from `x` (plus `added`, an
/// entry XADD is adding above all of them), and the ID below which it
/// hides everything (None: nothing goes).
fn plan_trim(
    x: &Stream,
    added: Option<(StreamId, FieldsRef<'_>)>,
    t: &Trim,
) -> (u64, Option<StreamId>) {
    // Read from the head only as far as the trim goes, a node at a time,
    // nodes ending where Redis's appends would end them (`listpack`).
    let extra = u64::from(added.is_some());
    let held = x.held_len() as u64 + extra;
    let mut len = x.len() as u64 + extra;
    let first = (x.entries_added() + extra).saturating_sub(held);
    let mut it = x
        .held_entries()
        .map(|(id, deleted, e)| Held {
            id,
            fields: e.fields,
            added: Some(e.version),
            deleted,
        })
        .chain(added.map(|(id, f)| Held::new(id, f)))
        .peekable();
    let mut fill = head_node(first, it.peek().map(|e| e.fields));
    let mut removed = 0u64;
    let mut last_gone: Option<StreamId> = None;
    let mut kept: Option<StreamId> = None;
    loop {
        if let TrimTo::MaxLen(n) = t.to {
            if len <= n {
                break;
            }
        }
        let Some(e) = it.next() else {
            break;
        };
        fill.push(&e);
        let mut chunk = vec![(e.id, e.deleted.is_none())];
        let mut shown = u64::from(e.deleted.is_none());
        // An approximate MAXLEN keeps a node once it holds more than the
        // trim may remove: its end does not matter then.
        let stop = match t.to {
            TrimTo::MaxLen(n) if t.approx => {
                let mut most = len.saturating_sub(n);
                if t.limit > 0 {
                    most = most.min(t.limit.saturating_sub(removed));
                }
                most
            }
            _ => u64::MAX,
        };
        while let Some(e) = it.peek() {
            if shown > stop || fill.starts_new(e) {
                break;
            }
            fill.push_as(e, false);
            chunk.push((e.id, e.deleted.is_none()));
            shown += u64::from(e.deleted.is_none());
            it.next();
        }
        let valid = chunk.iter().filter(|(_, shown)| *shown).count() as u64;
        let whole = match t.to {
            TrimTo::MaxLen(n) => len - valid >= n,
            TrimTo::MinId(min) => chunk.last().is_some_and(|(id, _)| *id < min),
        };
        if (t.limit > 0 && removed + valid > t.limit) || (!whole && t.approx) {
            kept = chunk.first().map(|(id, _)| *id);
            break;
        }
        if whole {
            removed += valid;
            len -= valid;
            last_gone = chunk.last().map(|(id, _)| *id);
            continue;
        }
        // Entry by entry inside the node.
        let mut k = 0;
        while k < chunk.len() {
            let done = match t.to {
                TrimTo::MaxLen(n) => len <= n,
                TrimTo::MinId(min) => chunk[k].0 >= min,
            };
            if done {
                break;
            }
            if chunk[k].1 {
                removed += 1;
                len -= 1;
            }
            last_gone = Some(chunk[k].0);
            k += 1;
        }
        kept = chunk.get(k).map(|(id, _)| *id);
        break;
    }
    let Some(gone) = last_gone else {
        return (0, None);
    };
    let kept = kept.or_else(|| it.peek().map(|e| e.id));
    (
        removed,
        Some(kept.unwrap_or_else(|| gone.next().unwrap_or(StreamId::MAX))),
    )
}

/// The head node as the trim finds it: the first held entry is entry
/// `first` of all ever added. Where every node holds
/// `stream-node-max-entries` (entries of the head's size: that many fit
/// in `stream-node-max-bytes`), the head node began `first % max` entries
/// before it (an exact trim may have cut it): filled as if with as many
/// entries of the head's size. Where the byte limit ends nodes, the head
/// starts one (only approximate trims, which take whole nodes, leave a
/// head that does not — an exact trim before them is counted from it).
fn head_node(first: u64, head: Option<FieldsRef<'_>>) -> NodeFill {
    let (Some(head), per) = (head, parse::node_entries()) else {
        return NodeFill::default();
    };
    if per == u64::MAX || first.is_multiple_of(per) {
        return NodeFill::default();
    }
    if !NodeFill::of_copies(head, per - 1).fits_bytes(head) {
        return NodeFill::default();
    }
    NodeFill::of_copies(head, first % per)
}

pub(super) fn trim(key: &[u8], view: &mut impl KeyView, t: &Trim) -> OpReply {
    match read_collection(view, key, Kind::Stream) {
        Err(e) => return e,
        Ok(None) => return OpReply::Int(0),
        Ok(Some(_)) => {}
    }
    let w = match begin_collection_write(view, key, Kind::Stream) {
        Ok(w) => w,
        Err(e) => return e,
    };
    let Some(s) = w.state.clone() else {
        return OpReply::Int(0);
    };
    let x = stream(&s);
    let (n, floor) = plan_trim(x, None, t);
    let Some(floor) = floor.filter(|_| n > 0) else {
        return OpReply::Int(0);
    };
    let delta = x.trim_below(floor, w.dot);
    drop(s);
    write(view, key, w, delta);
    notify(view, STREAM, "xtrim", key);
    OpReply::Int(n as i64)
}

pub(super) fn del(key: &[u8], view: &mut impl KeyView, args: &[Bytes]) -> OpReply {
    match read_collection(view, key, Kind::Stream) {
        Err(e) => return e,
        Ok(None) => return OpReply::Int(0),
        Ok(Some(_)) => {}
    }
    let mut ids = Vec::with_capacity(args.len());
    for a in args {
        match parse::id(a, 0, true) {
            Ok(id) => ids.push(id),
            Err(e) => return OpReply::Error(e),
        }
    }
    let w = match begin_collection_write(view, key, Kind::Stream) {
        Ok(w) => w,
        Err(e) => return e,
    };
    let Some(s) = w.state.clone() else {
        return OpReply::Int(0);
    };
    let x = stream(&s);
    ids.sort_unstable();
    ids.dedup();
    let shown: std::collections::BTreeSet<StreamId> = x.entries().map(|(id, _)| id).collect();
    ids.retain(|id| shown.contains(id));
    if ids.is_empty() {
        return OpReply::Int(0);
    }
    let delta = x.delete(&ids, w.dot);
    drop(s);
    write(view, key, w, delta);
    notify(view, STREAM, "xdel", key);
    OpReply::Int(ids.len() as i64)
}

pub(super) fn set_id(
    key: &[u8],
    view: &mut impl KeyView,
    last: StreamId,
    entries_added: Option<u64>,
    max_deleted: Option<StreamId>,
) -> OpReply {
    let s = match read_collection(view, key, Kind::Stream) {
        Err(e) => return e,
        Ok(None) => return OpReply::Error(ERR_NO_SUCH_KEY),
        Ok(Some(s)) => s,
    };
    let x = stream(&s);
    let len = x.len() as u64;
    if len > 0 {
        let top = x
            .entries()
            .next_back()
            .map(|(id, _)| id)
            .unwrap_or_default();
        if last < top {
            return OpReply::Error(ERR_SETID_SMALL);
        }
        if entries_added.is_some_and(|n| len > n) {
            return OpReply::Error(ERR_SETID_ENTRIES);
        }
    }
    drop(s);
    let w = match begin_collection_write(view, key, Kind::Stream) {
        Ok(w) => w,
        Err(e) => return e,
    };
    let Some(s) = w.state.clone() else {
        return OpReply::Error(ERR_NO_SUCH_KEY);
    };
    let max_deleted = max_deleted.filter(|m| *m != StreamId::MIN);
    let delta = stream(&s).set_id(last, entries_added, max_deleted, w.dot);
    drop(s);
    write(view, key, w, delta);
    notify(view, STREAM, "xsetid", key);
    OpReply::Ok
}

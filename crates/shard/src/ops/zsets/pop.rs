//! ZPOPMIN/ZPOPMAX (BZPOP*'s tries) and ZMPOP, and the events of a
//! command that removes members.

use bytes::Bytes;
use elsa_lattice::{Crdt, Kind, ZSet};

use super::write_zset;
use crate::ops::{read_collection, KeyView, OpReply};

/// Raises `event` when `reply` counts removed members, then `del` when
/// they were the last.
pub(super) fn notify_removed(
    view: &mut impl KeyView,
    key: &[u8],
    event: &'static str,
    reply: &OpReply,
) {
    if matches!(reply, OpReply::Int(n) if *n > 0) {
        crate::ops::notify(view, crate::notify::ZSET, event, key);
        crate::ops::notify_if_gone(view, key);
    }
}

pub(super) fn pop(key: &[u8], view: &mut impl KeyView, max: bool, count: Option<u64>) -> OpReply {
    match read_collection(view, key, Kind::ZSet) {
        Err(e) => return e,
        Ok(None) => return OpReply::Array(Vec::new()),
        Ok(Some(_)) if count == Some(0) => return OpReply::Array(Vec::new()),
        Ok(Some(_)) => {}
    }
    let mut popped = 0;
    let reply = write_zset(view, key, |z, dot| {
        let o = z.ordered();
        let n = (count.unwrap_or(1) as usize).min(o.len());
        popped = n as i64;
        let mut picked = if max {
            o.range(o.len() - n, o.len())
        } else {
            o.range(0, n)
        };
        if max {
            picked.reverse();
        }
        let mut delta = ZSet::default();
        for (_, m) in &picked {
            if let Some(d) = z.remove(m, dot) {
                delta.merge(d);
            }
        }
        let picked: Vec<(Bytes, f64)> = picked
            .into_iter()
            .map(|(s, m)| (Bytes::copy_from_slice(m), s))
            .collect();
        let reply = match count {
            Some(_) => OpReply::Scored(picked),
            None => OpReply::Array(
                picked
                    .into_iter()
                    .flat_map(|(m, s)| [OpReply::Bulk(m), OpReply::Double(s)])
                    .collect(),
            ),
        };
        (reply, (!delta.has_no_entries()).then_some(delta))
    });
    let event = if max { "zpopmax" } else { "zpopmin" };
    notify_removed(view, key, event, &OpReply::Int(popped));
    reply
}

/// ZMPOP: from the first key holding a sorted set (one of another type
/// first: WRONGTYPE) — `[key, [[member, score]…]]`; none: a null array.
pub(super) fn mpop(
    key: &[u8],
    keys: &[Bytes],
    view: &mut impl KeyView,
    max: bool,
    count: u64,
) -> OpReply {
    for (i, k) in keys.iter().enumerate() {
        let k: &[u8] = if i == 0 { key } else { k };
        // Only whether it holds a sorted set is kept: a state still
        // shared when the pop writes would be copied whole.
        let exists = match read_collection(view, k, Kind::ZSet) {
            Err(e) => return e,
            Ok(s) => s.is_some(),
        };
        if exists {
            let OpReply::Scored(popped) = pop(k, view, max, Some(count)) else {
                return OpReply::Error(crate::ops::ERR_SYNTAX);
            };
            let pairs = popped
                .into_iter()
                .map(|(m, s)| OpReply::Array(vec![OpReply::Bulk(m), OpReply::Double(s)]))
                .collect();
            return OpReply::Array(vec![
                OpReply::Bulk(Bytes::copy_from_slice(crate::db::user_key(k))),
                OpReply::Array(pairs),
            ]);
        }
    }
    OpReply::NilArray
}

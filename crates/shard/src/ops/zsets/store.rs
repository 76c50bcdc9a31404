//! What the sorted-set commands that write a new key store — ZRANGESTORE,
//! the STORE forms of the GEO searches — and the GEO searches themselves
//! (`ops::geo` finds the points; here they become a reply or a key).

use bytes::Bytes;
use elsa_lattice::{Collection, Crdt, KeyState, ZSet};

use super::super::geo;
use super::{read_zset, zset_of};
use crate::ops::{KeyView, OpReply, Value};

/// GEORADIUS*, GEOSEARCH and GEOSEARCHSTORE on `key`: the reply, or the
/// count stored.
pub(super) fn geo_search(s: &geo::Search, key: &[u8], view: &mut impl KeyView) -> OpReply {
    let state = match read_zset(view, key) {
        Err(e) => return e,
        Ok(state) => state,
    };
    let z = zset_of(state.as_deref());
    if let Some(refused) = geo::refusal(s, z) {
        return refused;
    }
    let found = match z {
        // A missing key: nothing found (FROMMEMBER included).
        None => Vec::new(),
        Some(z) => match geo::search_points(s, z) {
            Ok(found) => found,
            Err(e) => return OpReply::Error(e),
        },
    };
    match &s.store {
        Some(dest) => {
            let picked = geo::stored(s, found);
            let event = if s.searchstore {
                "geosearchstore"
            } else {
                "georadiusstore"
            };
            store(view, dest, picked, event)
        }
        None => geo::search_reply(s, found),
    }
}

/// Writes `picked` as the sorted set at `dest` (replacing any type), or
/// deletes `dest` when it is empty; answers its size. Raises `event` (or
/// `del` when an existing `dest` goes).
pub(super) fn store(
    view: &mut impl KeyView,
    dest: &[u8],
    picked: Vec<(Bytes, f64)>,
    event: &'static str,
) -> OpReply {
    let n = picked.len() as i64;
    if picked.is_empty() {
        let existed =
            view.notifies(crate::notify::GENERIC) && view.kind(dest) != elsa_lattice::Kind::None;
        view.store(dest, None);
        if existed {
            view.notify(crate::notify::GENERIC, "del", dest);
        }
        return OpReply::Int(0);
    }
    let (_, dot) = view.stamp();
    let mut z = ZSet::default();
    for (m, s) in picked {
        // A stored -0 is 0, as Redis's compact encoding (every set up to
        // zset-max-listpack-entries) stores it and as ZADD stores it
        // here: `WEIGHTS 0` of a negative score (restart-differential
        // seed 2300028).
        let s = if s == 0.0 { 0.0 } else { s };
        let d = z.set(&m, s, dot);
        z.merge(d);
    }
    view.store(
        dest,
        Some(Value::Typed(std::sync::Arc::new(KeyState::of(
            Collection::ZSet(z),
        )))),
    );
    crate::ops::notify(view, crate::notify::ZSET, event, dest);
    OpReply::Int(n)
}

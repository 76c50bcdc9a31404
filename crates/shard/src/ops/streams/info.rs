//! XINFO STREAM [FULL [COUNT n]], XINFO GROUPS, XINFO CONSUMERS: Redis
//! 7.0's maps, in its field order.
//!
//! `radix-tree-keys` counts the nodes of `stream-node-max-entries` the
//! stream's approximate trims count (Redis's listpacks, for small entries);
//! `radix-tree-nodes` is an estimate of its radix tree's inner nodes —
//! both describe Redis's memory layout, which Elsa does not have.

use bytes::Bytes;
use elsa_lattice::stream::{Group, Stream, StreamId, UNKNOWN_READ};
use elsa_lattice::Kind;

use super::groups::subcommand_error;
use super::{entry_reply, id_bulk, stream};
use crate::ops::{parse_i64, read_collection, KeyView, OpReply, ERR_NOT_INTEGER, ERR_NO_SUCH_KEY};

/// XINFO sub key …: the key looked up first, then the subcommand's
/// arguments, as Redis does.
pub fn xinfo(key: &[u8], view: &mut impl KeyView, args: &[Bytes]) -> OpReply {
    let s = match read_collection(view, key, Kind::Stream) {
        Err(e) => return e,
        Ok(None) => return OpReply::Error(ERR_NO_SUCH_KEY),
        Ok(Some(s)) => s,
    };
    let x = stream(&s);
    let sub = &args[1][..];
    let is = |a: &[u8], w: &str| a.eq_ignore_ascii_case(w.as_bytes());
    let now = view.now_ms() as i64;
    if is(sub, "consumers") && args.len() == 4 {
        let Some(g) = x.group(&args[3]) else {
            return OpReply::ErrorText(format!(
                "NOGROUP No such consumer group '{}' for key name '{}'",
                super::groups::c_name(&args[3]),
                super::groups::c_name(crate::db::user_key(key))
            ));
        };
        let out = g
            .consumers()
            .map(|(name, c)| {
                let pending = g.pending().filter(|(_, d)| d.consumer == *name).count();
                OpReply::Fields(vec![
                    ("name", OpReply::Bulk(name.to_bytes())),
                    ("pending", OpReply::Int(pending as i64)),
                    ("idle", OpReply::Int((now - c.seen_ms as i64).max(0))),
                ])
            })
            .collect();
        OpReply::Array(out)
    } else if is(sub, "groups") && args.len() == 3 {
        let out = x
            .groups()
            .map(|(name, g)| {
                let (last, read) = g.last_delivered();
                OpReply::Fields(vec![
                    ("name", OpReply::Bulk(name.to_bytes())),
                    ("consumers", OpReply::Int(g.consumers().count() as i64)),
                    ("pending", OpReply::Int(g.pending().count() as i64)),
                    ("last-delivered-id", id_bulk(last)),
                    ("entries-read", read_reply(read)),
                    ("lag", lag(x, g)),
                ])
            })
            .collect();
        OpReply::Array(out)
    } else if is(sub, "stream") {
        stream_info(x, args)
    } else {
        OpReply::ErrorText(subcommand_error(args))
    }
}

/// `xstate`: the key's whole state as its bytes (DUMP reads a stream
/// through it), nil when there is no stream.
pub(super) fn state(key: &[u8], view: &mut impl KeyView) -> OpReply {
    match read_collection(view, key, Kind::Stream) {
        Err(e) => e,
        Ok(None) => OpReply::Nil,
        Ok(Some(s)) => OpReply::Bulk(s.to_bytes().into()),
    }
}

fn read_reply(read: u64) -> OpReply {
    if read == UNKNOWN_READ {
        OpReply::Nil
    } else {
        OpReply::Int(read as i64)
    }
}

/// Redis's `streamReplyWithCGLag`: the entries not yet delivered to the
/// group, when the stream can tell.
fn lag(x: &Stream, g: &Group) -> OpReply {
    let added = x.entries_added();
    if added == 0 {
        return OpReply::Int(0);
    }
    let (last, read) = g.last_delivered();
    let tombstones =
        !x.is_empty() && x.max_deleted_id() != StreamId::MIN && last <= x.max_deleted_id();
    if read != UNKNOWN_READ && !tombstones {
        return OpReply::Int(added as i64 - read as i64);
    }
    let estimate = super::groups::distance(x, last);
    if estimate != UNKNOWN_READ {
        OpReply::Int(added as i64 - estimate as i64)
    } else {
        OpReply::Nil
    }
}

/// The radix tree's keys and (estimated) nodes (see the module doc).
fn radix(x: &Stream) -> (i64, i64) {
    let held = x.held_len() as u64;
    if held == 0 {
        return (0, 1);
    }
    let per = super::parse::node_entries();
    let first = x.entries_added().saturating_sub(held);
    let keys = ((first + held - 1) / per - first / per + 1) as i64;
    (keys, 2 * keys)
}

fn stream_info(x: &Stream, args: &[Bytes]) -> OpReply {
    let opts = &args[3..];
    let (full, count) = match opts.len() {
        0 => (false, 10),
        1 | 3 if opts[0].eq_ignore_ascii_case(b"full") => {
            if opts.len() == 3 {
                if !opts[1].eq_ignore_ascii_case(b"count") {
                    return OpReply::ErrorText(subcommand_error(args));
                }
                match parse_i64(&opts[2]) {
                    None => return OpReply::Error(ERR_NOT_INTEGER),
                    Some(n) if n < 0 => (true, 10),
                    Some(n) => (true, n as u64),
                }
            } else {
                (true, 10)
            }
        }
        _ => return OpReply::ErrorText(subcommand_error(args)),
    };
    let (keys, nodes) = radix(x);
    let first = x.entries().next();
    let mut f = vec![
        ("length", OpReply::Int(x.len() as i64)),
        ("radix-tree-keys", OpReply::Int(keys)),
        ("radix-tree-nodes", OpReply::Int(nodes)),
        ("last-generated-id", id_bulk(x.last_id())),
        ("max-deleted-entry-id", id_bulk(x.max_deleted_id())),
        ("entries-added", OpReply::Int(x.entries_added() as i64)),
        (
            "recorded-first-entry-id",
            id_bulk(first.map_or(StreamId::MIN, |(id, _)| id)),
        ),
    ];
    if !full {
        f.push(("groups", OpReply::Int(x.groups().count() as i64)));
        f.push(("first-entry", first.map_or(OpReply::Nil, entry_reply)));
        let last = x.entries().next_back();
        f.push(("last-entry", last.map_or(OpReply::Nil, entry_reply)));
        return OpReply::Fields(f);
    }
    let n = if count == 0 {
        usize::MAX
    } else {
        count as usize
    };
    f.push((
        "entries",
        OpReply::Array(x.entries().take(n).map(entry_reply).collect()),
    ));
    let groups = x
        .groups()
        .map(|(name, g)| {
            let (last, read) = g.last_delivered();
            let pending: Vec<OpReply> = g
                .pending()
                .take(n)
                .map(|(id, d)| {
                    OpReply::Array(vec![
                        id_bulk(id),
                        OpReply::Bulk(d.consumer.to_bytes()),
                        OpReply::Int(d.at_ms as i64),
                        OpReply::Int(d.count as i64),
                    ])
                })
                .collect();
            let consumers = g
                .consumers()
                .map(|(cname, c)| {
                    let mine: Vec<_> = g.pending().filter(|(_, d)| d.consumer == *cname).collect();
                    let listed = mine
                        .iter()
                        .take(n)
                        .map(|(id, d)| {
                            OpReply::Array(vec![
                                id_bulk(*id),
                                OpReply::Int(d.at_ms as i64),
                                OpReply::Int(d.count as i64),
                            ])
                        })
                        .collect();
                    OpReply::Fields(vec![
                        ("name", OpReply::Bulk(cname.to_bytes())),
                        ("seen-time", OpReply::Int(c.seen_ms as i64)),
                        ("pel-count", OpReply::Int(mine.len() as i64)),
                        ("pending", OpReply::Array(listed)),
                    ])
                })
                .collect();
            OpReply::Fields(vec![
                ("name", OpReply::Bulk(name.to_bytes())),
                ("last-delivered-id", id_bulk(last)),
                ("entries-read", read_reply(read)),
                ("lag", lag(x, g)),
                ("pel-count", OpReply::Int(g.pending().count() as i64)),
                ("pending", OpReply::Array(pending)),
                ("consumers", OpReply::Array(consumers)),
            ])
        })
        .collect();
    f.push(("groups", OpReply::Array(groups)));
    OpReply::Fields(f)
}

//! Consumer groups (Redis's `t_stream.c`): XGROUP (CREATE, SETID,
//! DESTROY, CREATECONSUMER, DELCONSUMER), XREADGROUP, XACK, XPENDING,
//! XCLAIM, XAUTOCLAIM — each a delta of the group in the stream lattice
//! (`elsa_lattice::stream`), with Redis's replies, errors and their order.
//!
//! Inside a region every command runs at the key's primary, so a group
//! hands an entry to one consumer (`XREADGROUP >` moves the group's last
//! delivered ID in the same atomic step); across regions see
//! `docs/datatypes.md`.

use bytes::Bytes;
use elsa_lattice::stream::{Group, Stream, StreamId, UNKNOWN_READ};
use elsa_lattice::{Collection, Crdt, KeyState, Kind};

use super::{entry_reply, id_bulk, parse, stream, ERR_START};
use crate::notify::STREAM;
use crate::ops::{
    begin_collection_write, notify, parse_i64, read_collection, KeyView, OpReply, ERR_NOT_INTEGER,
    ERR_SYNTAX,
};

/// XGROUP on a missing key without MKSTREAM.
pub const ERR_XGROUP_NO_KEY: &str = "ERR The XGROUP subcommand requires the key to exist. Note that for CREATE you may want to use the MKSTREAM option to create an empty stream automatically.";
/// XGROUP CREATE of a group that exists.
pub const ERR_BUSYGROUP: &str = "BUSYGROUP Consumer Group name already exists";
/// ENTRIESREAD below -1.
pub const ERR_ENTRIES_READ: &str = "ERR value for ENTRIESREAD must be positive or -1";
/// XREADGROUP with `$`.
pub const ERR_DOLLAR: &str = "ERR The $ ID is meaningless in the context of XREADGROUP: you want to read the history of this consumer by specifying a proper ID, or use the > ID to get new messages. The $ ID would just return an empty result set.";
/// XREADGROUP without GROUP.
pub const ERR_MISSING_GROUP: &str = "ERR Missing GROUP option for XREADGROUP";
/// XAUTOCLAIM COUNT below 1.
pub const ERR_AUTOCLAIM_COUNT: &str = "ERR COUNT must be > 0";

/// The group commands' fixed texts (they cross the wire as text).
pub const TEXTS: &[&str] = &[
    ERR_XGROUP_NO_KEY,
    ERR_BUSYGROUP,
    ERR_ENTRIES_READ,
    ERR_DOLLAR,
    ERR_MISSING_GROUP,
    ERR_AUTOCLAIM_COUNT,
];

/// An ID argument of XGROUP CREATE / SETID, or `$`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GroupId {
    /// `$`: the stream's last ID.
    Last,
    /// An ID.
    Id(StreamId),
}

/// Where XREADGROUP reads a key from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GroupFrom {
    /// `>`: entries never delivered to the group.
    New,
    /// The consumer's pending entries above this ID.
    History(StreamId),
}

/// Redis's `addReplySubcommandSyntaxError`.
pub fn subcommand_error(args: &[Bytes]) -> String {
    format!(
        "ERR unknown subcommand or wrong number of arguments for '{}'. Try {} HELP.",
        c_name(&args[1]),
        String::from_utf8_lossy(&args[0]).to_uppercase()
    )
}

/// A name as Redis's `%s` prints it in an error: up to its first NUL,
/// line breaks as spaces.
pub fn c_name(b: &[u8]) -> String {
    let end = b.iter().position(|&c| c == 0).unwrap_or(b.len());
    String::from_utf8_lossy(&b[..end]).replace(['\r', '\n'], " ")
}

pub(super) fn no_group(key: &[u8], group: &[u8]) -> OpReply {
    OpReply::ErrorText(format!(
        "NOGROUP No such key '{}' or consumer group '{}'",
        c_name(crate::db::user_key(key)),
        c_name(group)
    ))
}

fn no_such_group(key: &[u8], group: &[u8]) -> OpReply {
    OpReply::ErrorText(format!(
        "NOGROUP No such consumer group '{}' for key name '{}'",
        c_name(group),
        c_name(crate::db::user_key(key))
    ))
}

/// XGROUP's subcommands, parsed (the container's table checked the
/// counts Redis checks first).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum XGroup {
    /// CREATE key group id|$ [MKSTREAM] [ENTRIESREAD n].
    Create {
        /// The ID, or its refusal (answered after the key's checks).
        id: Result<GroupId, &'static str>,
        /// MKSTREAM.
        mkstream: bool,
        /// ENTRIESREAD (-1: unknown).
        read: i64,
    },
    /// SETID key group id|$ [ENTRIESREAD n].
    SetId {
        /// The ID, or its refusal.
        id: Result<GroupId, &'static str>,
        /// ENTRIESREAD (-1: unknown).
        read: i64,
    },
    /// DESTROY key group.
    Destroy,
    /// CREATECONSUMER key group consumer.
    CreateConsumer,
    /// DELCONSUMER key group consumer.
    DelConsumer,
}

impl XGroup {
    /// Parses `XGROUP sub key group …` as Redis does before the lookup.
    pub fn parse(args: &[Bytes]) -> Result<XGroup, String> {
        let is = |a: &[u8], w: &str| a.eq_ignore_ascii_case(w.as_bytes());
        let sub = &args[1][..];
        let (create, setid) = (is(sub, "create"), is(sub, "setid"));
        let mut mkstream = false;
        let mut read = -1;
        let mut i = 5;
        while i < args.len() {
            if create && is(&args[i], "mkstream") {
                mkstream = true;
                i += 1;
            } else if (create || setid) && is(&args[i], "entriesread") && i + 1 < args.len() {
                let n = parse_i64(&args[i + 1]).ok_or(ERR_NOT_INTEGER)?;
                if n < -1 {
                    return Err(ERR_ENTRIES_READ.into());
                }
                read = n;
                i += 2;
            } else {
                return Err(subcommand_error(args));
            }
        }
        let n = args.len();
        let id = |strict: bool| match args.get(4).map(|a| &a[..]) {
            Some(b"$") => Ok(GroupId::Last),
            Some(a) => parse::id(a, 0, strict).map(GroupId::Id),
            None => Err(ERR_SYNTAX),
        };
        Ok(if create && (5..=8).contains(&n) {
            XGroup::Create {
                id: id(true),
                mkstream,
                read,
            }
        } else if setid && (n == 5 || n == 7) {
            XGroup::SetId {
                id: id(false),
                read,
            }
        } else if is(sub, "destroy") && n == 4 {
            XGroup::Destroy
        } else if is(sub, "createconsumer") && n == 5 {
            XGroup::CreateConsumer
        } else if is(sub, "delconsumer") && n == 5 {
            XGroup::DelConsumer
        } else {
            return Err(subcommand_error(args));
        })
    }
}

/// The stream `key` holds for a group command: WRONGTYPE, or the stream
/// (None when the key is absent).
pub(super) fn lookup(
    view: &mut impl KeyView,
    key: &[u8],
) -> Result<Option<std::sync::Arc<KeyState>>, OpReply> {
    read_collection(view, key, Kind::Stream)
}

/// Writes `delta` (a stream delta, written as the view's next stamp the
/// caller took) to `key`.
pub(super) fn write(view: &mut impl KeyView, key: &[u8], prefix: KeyState, delta: Stream) {
    let mut d = prefix;
    d.merge(KeyState::of(Collection::Stream(Box::new(delta))));
    view.merge(key, d);
}

/// Runs XGROUP `g` on `key` (`args`: the command's).
pub fn xgroup(key: &[u8], view: &mut impl KeyView, g: &XGroup, args: &[Bytes]) -> OpReply {
    let group = &args[3][..];
    let s = match lookup(view, key) {
        Err(e) => return e,
        Ok(s) => s,
    };
    let mkstream = matches!(g, XGroup::Create { mkstream: true, .. });
    let Some(s) = s else {
        if !mkstream {
            return OpReply::Error(ERR_XGROUP_NO_KEY);
        }
        // MKSTREAM on a missing key: a new stream with the group.
        let XGroup::Create { id, read, .. } = g else {
            unreachable!("mkstream is CREATE's")
        };
        let id = match id {
            Ok(GroupId::Last) => StreamId::MIN,
            Ok(GroupId::Id(id)) => *id,
            Err(e) => return OpReply::Error(e),
        };
        let w = match begin_collection_write(view, key, Kind::Stream) {
            Ok(w) => w,
            Err(e) => return e,
        };
        let delta = Stream::default().create_group(
            elsa_lattice::Elem::new(group),
            id,
            read_of(*read),
            w.dot,
        );
        write(view, key, w.prefix, delta);
        notify(view, STREAM, "xgroup-create", key);
        return OpReply::Ok;
    };
    let x = stream(&s);
    let found = x.group(group);
    if found.is_none() && !matches!(g, XGroup::Create { .. } | XGroup::Destroy) {
        return no_such_group(key, group);
    }
    let resolve = |id: &Result<GroupId, &'static str>| match id {
        Ok(GroupId::Last) => Ok(x.last_id()),
        Ok(GroupId::Id(id)) => Ok(*id),
        Err(e) => Err(OpReply::Error(e)),
    };
    let (_, dot) = view.stamp();
    let (delta, reply, event) = match g {
        XGroup::Create { id, read, .. } => {
            let id = match resolve(id) {
                Ok(id) => id,
                Err(e) => return e,
            };
            if found.is_some() {
                return OpReply::Error(ERR_BUSYGROUP);
            }
            let d = x.create_group(elsa_lattice::Elem::new(group), id, read_of(*read), dot);
            (Some(d), OpReply::Ok, "xgroup-create")
        }
        XGroup::SetId { id, read } => {
            let id = match resolve(id) {
                Ok(id) => id,
                Err(e) => return e,
            };
            let d = x.set_group_id(group, id, read_of(*read), dot);
            (d, OpReply::Ok, "xgroup-setid")
        }
        XGroup::Destroy => match found {
            None => return OpReply::Int(0),
            Some(_) => (
                x.destroy_group(group, dot),
                OpReply::Int(1),
                "xgroup-destroy",
            ),
        },
        XGroup::CreateConsumer => {
            let consumer = &args[4][..];
            if found.and_then(|f| f.consumer(consumer)).is_some() {
                return OpReply::Int(0);
            }
            let d = x.touch_consumer(group, consumer, view.now_ms(), dot);
            (d, OpReply::Int(1), "xgroup-createconsumer")
        }
        XGroup::DelConsumer => {
            let consumer = &args[4][..];
            let Some(f) = found.filter(|f| f.consumer(consumer).is_some()) else {
                return OpReply::Int(0);
            };
            let pending = f
                .pending()
                .filter(|(_, d)| &d.consumer[..] == consumer)
                .count();
            let d = x.delete_consumer(group, consumer, dot);
            (d, OpReply::Int(pending as i64), "xgroup-delconsumer")
        }
    };
    drop(s);
    if let Some(delta) = delta {
        write(view, key, KeyState::default(), delta);
        notify(view, STREAM, event, key);
    }
    reply
}

/// ENTRIESREAD as the lattice keeps it.
fn read_of(n: i64) -> u64 {
    u64::try_from(n).unwrap_or(UNKNOWN_READ)
}

/// Redis's `streamEstimateDistanceFromFirstEverEntry`: the entries-read
/// counter of `id`, when the stream can tell it.
pub(super) fn distance(x: &Stream, id: StreamId) -> u64 {
    let added = x.entries_added();
    if added == 0 {
        return 0;
    }
    let len = x.len() as u64;
    let last = x.last_id();
    if len == 0 && id <= last {
        return added;
    }
    if id == last {
        return added;
    } else if id > last {
        return UNKNOWN_READ;
    }
    let first = x.entries().next().map_or(StreamId::MIN, |(id, _)| id);
    let max_deleted = x.max_deleted_id();
    if max_deleted == StreamId::MIN || max_deleted < first {
        if id < first {
            return added - len;
        } else if id == first {
            return added - len + 1;
        }
    }
    UNKNOWN_READ
}

/// Whether a deleted entry lies at or above `from` (Redis's
/// `streamRangeHasTombstones` up to the end).
fn tombstones_from(x: &Stream, from: StreamId) -> bool {
    !x.is_empty() && x.max_deleted_id() != StreamId::MIN && from <= x.max_deleted_id()
}

/// XREADGROUP on one key: the entries served (`None`: nothing to serve,
/// the key is left out of the reply), and the delta.
#[allow(clippy::too_many_arguments)]
pub fn read_group_key(
    x: &Stream,
    g: &Group,
    group: &[u8],
    consumer: &[u8],
    from: GroupFrom,
    count: u64,
    noack: bool,
    now_ms: u64,
    dot: elsa_lattice::Version,
) -> (Option<Vec<OpReply>>, Option<Stream>) {
    let n = if count == 0 {
        usize::MAX
    } else {
        count as usize
    };
    match from {
        GroupFrom::History(after) => {
            // The consumer's own pending entries above `after`.
            let from = after.next().unwrap_or(StreamId::MAX);
            let mine: Vec<(StreamId, u64)> = g
                .pending_in(from, StreamId::MAX)
                .filter(|(id, d)| *id > after && &d.consumer[..] == consumer)
                .take(n)
                .map(|(id, d)| (id, d.count))
                .collect();
            let mut out = Vec::with_capacity(mine.len());
            let mut again = Vec::new();
            for (id, count) in mine {
                match x.entry(id).map(|e| (id, e)) {
                    Some(e) => {
                        out.push(entry_reply(e));
                        again.push((id, count + 1));
                    }
                    None => out.push(OpReply::Array(vec![id_bulk(id), OpReply::NilArray])),
                }
            }
            let delta = x.deliver_counted(group, consumer, &again, now_ms, None, now_ms, dot);
            (Some(out), delta)
        }
        GroupFrom::New => {
            let (last, mut read) = g.last_delivered();
            // Below the read horizon only (`super::shown_upto`): `last`
            // must not pass an entry that may still arrive.
            let Some(upto) = super::shown_upto() else {
                return (None, None);
            };
            let top = x
                .entries_in(StreamId::MIN, upto)
                .next_back()
                .map(|(id, _)| id);
            if top.is_none_or(|t| t <= last) {
                return (None, None);
            }
            let mut out = Vec::new();
            let mut ids = Vec::new();
            let mut moved = last;
            let from = last.next().unwrap_or(StreamId::MAX);
            for (id, e) in x
                .entries_in(from, upto)
                .filter(|(id, _)| *id > last)
                .take(n)
            {
                if read != UNKNOWN_READ && !tombstones_from(x, id) {
                    read += 1;
                } else if x.entries_added() > 0 {
                    read = distance(x, id);
                }
                moved = id;
                out.push(entry_reply((id, e)));
                if !noack {
                    ids.push((id, 1));
                }
            }
            let delta = x.deliver_counted(
                group,
                consumer,
                &ids,
                now_ms,
                Some((moved, read)),
                now_ms,
                dot,
            );
            (Some(out), delta)
        }
    }
}

/// XREADGROUP GROUP group consumer … STREAMS keys ids: every key checked
/// first (its type, its group, its ID, in Redis's order), then each
/// served; a null array when no key has anything to serve.
pub fn read_group(
    key: &[u8],
    keys: &[Bytes],
    view: &mut impl KeyView,
    (group, consumer): (&Bytes, &Bytes),
    count: u64,
    noack: bool,
    from: &[Result<GroupFrom, &'static str>],
) -> OpReply {
    let name = |i: usize| -> &[u8] {
        if i == 0 {
            key
        } else {
            &keys[i]
        }
    };
    for (i, f) in from.iter().enumerate().take(keys.len()) {
        let k = name(i);
        let s = match lookup(view, k) {
            Err(e) => return e,
            Ok(s) => s,
        };
        if s.is_none_or(|s| stream(&s).group(group).is_none()) {
            return OpReply::ErrorText(format!(
                "NOGROUP No such key '{}' or consumer group '{}' in XREADGROUP with GROUP option",
                c_name(crate::db::user_key(k)),
                c_name(group)
            ));
        }
        if let Err(e) = f {
            return OpReply::Error(e);
        }
    }
    let now = view.now_ms();
    let (_, dot) = view.stamp();
    let mut out = Vec::new();
    for (i, f) in from.iter().enumerate().take(keys.len()) {
        // Looked up again: a key named twice is served from what the
        // first serving left (Redis's group moved on).
        let Ok(Some(s)) = lookup(view, name(i)) else {
            continue;
        };
        let x = stream(&s);
        let (Some(g), Ok(f)) = (x.group(group), f) else {
            continue;
        };
        let new_consumer = g.consumer(consumer).is_none();
        let (served, delta) = read_group_key(x, g, group, consumer, *f, count, noack, now, dot);
        drop(s);
        if let Some(d) = delta {
            write(view, name(i), KeyState::default(), d);
        }
        if new_consumer && served.is_some() {
            notify(view, STREAM, "xgroup-createconsumer", name(i));
        }
        if let Some(entries) = served {
            let k = Bytes::copy_from_slice(crate::db::user_key(name(i)));
            out.push((k, OpReply::Array(entries)));
        }
    }
    if out.is_empty() {
        OpReply::NilArray
    } else {
        OpReply::Keyed(out)
    }
}

/// XACK key group id…: how many of the IDs were pending.
pub fn xack(key: &[u8], view: &mut impl KeyView, args: &[Bytes]) -> OpReply {
    let group = &args[2][..];
    let s = match lookup(view, key) {
        Err(e) => return e,
        Ok(None) => return OpReply::Int(0),
        Ok(Some(s)) => s,
    };
    let x = stream(&s);
    let Some(g) = x.group(group) else {
        return OpReply::Int(0);
    };
    let mut ids = Vec::with_capacity(args.len() - 3);
    for a in &args[3..] {
        match parse::id(a, 0, true) {
            Ok(id) => ids.push(id),
            Err(e) => return OpReply::Error(e),
        }
    }
    ids.sort_unstable();
    ids.dedup();
    ids.retain(|id| g.pending_entry(*id).is_some());
    if ids.is_empty() {
        return OpReply::Int(0);
    }
    let (_, dot) = view.stamp();
    let delta = x.ack(group, &ids, dot);
    drop(s);
    if let Some(d) = delta {
        write(view, key, KeyState::default(), d);
    }
    OpReply::Int(ids.len() as i64)
}

/// XPENDING's arguments past the group.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Pending {
    /// IDLE.
    pub min_idle: i64,
    /// From (inclusive).
    pub start: StreamId,
    /// To (inclusive).
    pub end: StreamId,
    /// COUNT.
    pub count: u64,
    /// Only this consumer's.
    pub consumer: Option<Bytes>,
}

impl Pending {
    /// Parses `XPENDING key group [[IDLE n] start end count [consumer]]`
    /// (`None`: the summary form).
    pub fn parse(args: &[Bytes]) -> Result<Option<Pending>, String> {
        let n = args.len();
        if n != 3 && !(6..=9).contains(&n) {
            return Err(ERR_SYNTAX.into());
        }
        if n == 3 {
            return Ok(None);
        }
        let mut at = 3;
        let mut min_idle = 0;
        if args[3].eq_ignore_ascii_case(b"idle") {
            min_idle = parse_i64(&args[4]).ok_or(ERR_NOT_INTEGER)?;
            if n < 8 {
                return Err(ERR_SYNTAX.into());
            }
            at += 2;
        }
        let count = parse_i64(&args[at + 2]).ok_or(ERR_NOT_INTEGER)?.max(0) as u64;
        let (mut start, ex) = parse::bound(&args[at], 0)?;
        if ex {
            start = start.next().ok_or(ERR_START)?;
        }
        let (mut end, ex) = parse::bound(&args[at + 1], u64::MAX)?;
        if ex {
            end = super::prev(end).ok_or(super::ERR_END)?;
        }
        Ok(Some(Pending {
            min_idle,
            start,
            end,
            count,
            consumer: args.get(at + 3).cloned(),
        }))
    }
}

/// XPENDING key group [...].
pub fn xpending(key: &[u8], view: &mut impl KeyView, group: &[u8], p: &Option<Pending>) -> OpReply {
    let s = match lookup(view, key) {
        Err(e) => return e,
        Ok(None) => return no_group(key, group),
        Ok(Some(s)) => s,
    };
    let x = stream(&s);
    let Some(g) = x.group(group) else {
        return no_group(key, group);
    };
    let now = view.now_ms() as i64;
    let Some(p) = p else {
        let pending: Vec<(StreamId, &elsa_lattice::stream::Delivery)> = g.pending().collect();
        let Some(first) = pending.first() else {
            return OpReply::Array(vec![
                OpReply::Int(0),
                OpReply::Nil,
                OpReply::Nil,
                OpReply::NilArray,
            ]);
        };
        let last = pending.last().expect("not empty");
        let mut per: std::collections::BTreeMap<&[u8], i64> = Default::default();
        for (_, d) in &pending {
            *per.entry(&d.consumer[..]).or_default() += 1;
        }
        let consumers = per
            .into_iter()
            .map(|(c, n)| {
                OpReply::Array(vec![
                    OpReply::Bulk(Bytes::copy_from_slice(c)),
                    OpReply::Bulk(Bytes::from(n.to_string())),
                ])
            })
            .collect();
        return OpReply::Array(vec![
            OpReply::Int(pending.len() as i64),
            id_bulk(first.0),
            id_bulk(last.0),
            OpReply::Array(consumers),
        ]);
    };
    if let Some(c) = &p.consumer {
        if g.consumer(c).is_none() {
            return OpReply::Array(Vec::new());
        }
    }
    let mut out = Vec::new();
    let mut left = p.count;
    for (id, d) in g.pending_in(p.start, p.end) {
        if left == 0 {
            break;
        }
        if p.consumer.as_ref().is_some_and(|c| c[..] != d.consumer[..]) {
            continue;
        }
        let idle = (now - d.at_ms as i64).max(0);
        if p.min_idle != 0 && now - (d.at_ms as i64) < p.min_idle {
            continue;
        }
        left -= 1;
        out.push(OpReply::Array(vec![
            id_bulk(id),
            OpReply::Bulk(d.consumer.to_bytes()),
            OpReply::Int(idle),
            OpReply::Int(d.count as i64),
        ]));
    }
    OpReply::Array(out)
}

//! Stream commands (Redis's `t_stream.c`) on the stream lattice
//! (`elsa_lattice::stream`): XADD XLEN XRANGE XREVRANGE XDEL XTRIM XSETID
//! XREAD. XREAD of several keys reaches the others through
//! [`crate::ops::Op::other_keys`], so every path holds all of them and
//! reads them in one atomic step.
//!
//! The commands that write are in `write.rs`, the argument grammar in
//! `parse.rs`; the reads are here.
//!
//! Replies and errors are Redis 7.0's, in Redis's order: what Redis checks
//! before it looks the key up is refused by [`StreamOp::parse`]; what it
//! checks after rides in the op. The op's wire form is its arguments,
//! parsed again where it runs.
//!
//! Approximate trims (`~`) remove whole nodes of [`parse::node_entries`]
//! entries, as Redis's radix tree of listpacks does with its default
//! `stream-node-max-entries`: an entry's node is its place in the order
//! entries were added (`entries-added`), which is where Redis's node
//! boundaries fall for entries small enough to fill them.

mod claim;
pub mod groups;
mod horizon;
pub mod id_floor;
mod info;
pub mod listpack;
pub mod parse;
pub(super) mod write;

use bytes::{Buf, Bytes};
use elsa_lattice::stream::{Stream, StreamId};
use elsa_lattice::{Collection, KeyState, Kind};

use super::hashes::{get_list, put_list};
use super::{read_collection, KeyView, OpReply, ERR_NOT_INTEGER, ERR_SYNTAX};
use horizon::shown_upto;
pub use horizon::{
    hold_for_parts, hold_for_parts_exactly, late_count, late_entries, read_horizon, read_immediate,
    set_read_horizon, set_read_immediate,
};
pub use parse::{node_entries, ERR_INVALID_ID};
use parse::{AddArgs, AddId, Trim};

/// XADD with the ID 0-0.
pub const ERR_ZERO_ID: &str = "ERR The ID specified in XADD must be greater than 0-0";
/// XADD with an ID not above the stream's last.
pub const ERR_ID_TOO_SMALL: &str =
    "ERR The ID specified in XADD is equal or smaller than the target stream top item";
/// XADD once the last ID is the greatest there is.
pub const ERR_EXHAUSTED: &str =
    "ERR The stream has exhausted the last possible ID, unable to add more items";
/// XRANGE with an exclusive start at the greatest ID.
pub const ERR_START: &str = "ERR invalid start ID for the interval";
/// XRANGE with an exclusive end at 0-0.
pub const ERR_END: &str = "ERR invalid end ID for the interval";
/// XREAD's keys without as many IDs.
pub const ERR_UNBALANCED: &str =
    "ERR Unbalanced XREAD list of streams: for each stream key an ID or '$' must be specified.";
/// XREAD GROUP.
pub const ERR_GROUP_XREAD: &str =
    "ERR The GROUP option is only supported by XREADGROUP. You called XREAD instead.";
/// XREAD NOACK.
pub const ERR_NOACK_XREAD: &str =
    "ERR The NOACK option is only supported by XREADGROUP. You called XREAD instead.";
/// XREAD with `>`.
pub const ERR_GT_XREAD: &str =
    "ERR The > ID can be specified only when calling XREADGROUP using the GROUP <group> <consumer> option.";
/// A BLOCK time that is not an integer.
pub const ERR_TIMEOUT: &str = "ERR timeout is not an integer or out of range";
/// XSETID ENTRIESADDED below 0.
pub const ERR_ENTRIES_ADDED: &str = "ERR entries_added must be positive";
/// XSETID MAXDELETEDID above the ID.
pub const ERR_SETID_MAX_DELETED: &str =
    "ERR The ID specified in XSETID is smaller than the provided max_deleted_entry_id";
/// XSETID below the top entry.
pub const ERR_SETID_SMALL: &str =
    "ERR The ID specified in XSETID is smaller than the target stream top item";
/// XSETID ENTRIESADDED below the length.
pub const ERR_SETID_ENTRIES: &str =
    "ERR The entries_added specified in XSETID is smaller than the target stream length";

/// The stream commands' error texts (they cross the wire as text).
pub const TEXTS: &[&str] = &[
    ERR_ZERO_ID,
    ERR_ID_TOO_SMALL,
    ERR_EXHAUSTED,
    ERR_START,
    ERR_END,
    ERR_UNBALANCED,
    ERR_GROUP_XREAD,
    ERR_NOACK_XREAD,
    ERR_GT_XREAD,
    ERR_ENTRIES_ADDED,
    ERR_SETID_MAX_DELETED,
    ERR_SETID_SMALL,
    ERR_SETID_ENTRIES,
    ERR_INVALID_ID,
    ERR_TIMEOUT,
    parse::ERR_MAXLEN_MINID,
    parse::ERR_MAXLEN_NEGATIVE,
    parse::ERR_LIMIT_NEGATIVE,
    parse::ERR_LIMIT_NO_STRATEGY,
    parse::ERR_XTRIM_NO_STRATEGY,
    parse::ERR_LIMIT_EXACT,
    "stream",
    "length",
    "radix-tree-keys",
    "radix-tree-nodes",
    "last-generated-id",
    "max-deleted-entry-id",
    "entries-added",
    "recorded-first-entry-id",
    "groups",
    "first-entry",
    "last-entry",
    "entries",
    "name",
    "last-delivered-id",
    "entries-read",
    "lag",
    "pel-count",
    "pending",
    "consumers",
    "seen-time",
    "idle",
];

/// The node's tag in the IDs it makes (0: none), see [`set_id_tag`].
static ID_TAG: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);

/// Makes every ID this node generates (`*`, `ms-*`) carry `node` in its
/// sequence's low 32 bits (with the top one set, above any count a stream
/// reaches without it): `ms-(n·2³² + 2³¹ + node)`. Two regions then never
/// make the same ID, with no coordination (issue 46): within a region a
/// stream's IDs come from its key's primary and rise, across regions they
/// differ by node. Set by the cluster once it has seen a second region,
/// and kept for the process's life (a cut region is still writing); a
/// node alone or in one region makes Redis's IDs (`ms-0`, `ms-1`, …).
/// Process-wide, as the node is the process.
pub fn set_id_tag(node: u32) {
    ID_TAG.store(
        0x8000_0000 | (node & 0x7fff_ffff),
        std::sync::atomic::Ordering::Relaxed,
    );
}

/// The tag IDs carry, if any.
fn id_tag() -> Option<u32> {
    match ID_TAG.load(std::sync::atomic::Ordering::Relaxed) {
        0 => None,
        t => Some(t),
    }
}

/// Where XREAD reads a key from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReadFrom {
    /// `$`: what is added after the command.
    Last,
    /// Entries above this ID.
    After(StreamId),
}

/// What a stream command does, parsed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum XCmd {
    /// XADD.
    Add(AddArgs),
    /// XLEN.
    Len,
    /// XRANGE / XREVRANGE (bounds inclusive, already moved past an
    /// exclusive one).
    Range {
        /// From (the lower bound).
        start: StreamId,
        /// To (the upper bound).
        end: StreamId,
        /// COUNT (`None`: all; 0 answers a null array, as Redis does).
        count: Option<u64>,
        /// XREVRANGE.
        rev: bool,
    },
    /// XDEL (the IDs checked after the lookup, as Redis does).
    Del,
    /// XTRIM.
    Trim(Trim),
    /// XSETID.
    SetId {
        /// The new last ID.
        last: StreamId,
        /// ENTRIESADDED.
        entries_added: Option<u64>,
        /// MAXDELETEDID.
        max_deleted: Option<StreamId>,
    },
    /// XREAD (per key, where from — or the refusal Redis answers once it
    /// got to that key).
    Read {
        /// COUNT (0: all).
        count: u64,
        /// Per key.
        from: Vec<Result<ReadFrom, &'static str>>,
        /// BLOCK, in milliseconds.
        block_ms: Option<u64>,
        /// Where the IDs start in the arguments.
        ids_at: usize,
    },
    /// XGROUP (HELP is the server's).
    Group(groups::XGroup),
    /// XREADGROUP.
    ReadGroup {
        /// COUNT (0: all).
        count: u64,
        /// NOACK.
        noack: bool,
        /// Per key, where from (or its refusal, answered in Redis's order).
        from: Vec<Result<groups::GroupFrom, &'static str>>,
        /// BLOCK, in milliseconds.
        block_ms: Option<u64>,
        /// Where GROUP's group and consumer are in the arguments.
        group_at: usize,
    },
    /// XACK.
    Ack,
    /// XPENDING (`None`: the summary).
    Pending(Option<groups::Pending>),
    /// XCLAIM (parsed after the lookup, as Redis does).
    Claim,
    /// XAUTOCLAIM.
    AutoClaim(claim::AutoClaim),
    /// XINFO STREAM | GROUPS | CONSUMERS (HELP is the server's).
    Info,
    /// The last ID of each key (`0-0` for a missing one): what a blocking
    /// XREAD reads `$` as before it waits. Internal: no client command is
    /// routed to it (its name is `xlastids`).
    LastIds,
    /// The key's whole state as its bytes (DUMP's read; internal,
    /// `xstate`).
    State,
    /// The key written whole as the stream in a state's bytes (RESTORE's
    /// write; internal, `xrestore key bytes`).
    Restore,
}

/// A stream command, parsed, with its arguments (its wire form).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StreamOp {
    args: Vec<Bytes>,
    keys: Vec<Bytes>,
    cmd: XCmd,
}

fn wrong_arity(name: &[u8]) -> String {
    format!(
        "ERR wrong number of arguments for '{}' command",
        String::from_utf8_lossy(name).to_ascii_lowercase()
    )
}

impl StreamOp {
    /// Parses a stream command (arity already checked), refusing what
    /// Redis refuses before it looks at a key, in Redis's order.
    pub fn parse(args: Vec<Bytes>) -> Result<StreamOp, String> {
        let Some(first) = args.first() else {
            return Err(ERR_SYNTAX.into());
        };
        let name = first.to_ascii_lowercase();
        // The command table checks a client's counts; an op from a peer
        // (`decode`) is checked here, so no index below is out of range.
        let least = match &name[..] {
            b"xadd" => 5,
            b"xrange" | b"xrevrange" | b"xtrim" | b"xread" | b"xack" => 4,
            b"xdel" | b"xsetid" | b"xpending" => 3,
            b"xclaim" | b"xautoclaim" => 6,
            b"xreadgroup" => 7,
            _ => 2,
        };
        if args.len() < least {
            return Err(wrong_arity(first));
        }
        let mut keys = vec![args[1].clone()];
        let is = |a: &[u8], w: &str| a.eq_ignore_ascii_case(w.as_bytes());
        let cmd = match &name[..] {
            b"xadd" => {
                let a = parse::add_or_trim(&args, true)?;
                let n = args.len().saturating_sub(a.fields_at);
                if args.len() < a.fields_at + 2 || !n.is_multiple_of(2) {
                    return Err(wrong_arity(&args[0]));
                }
                if a.id == AddId::Exact(StreamId::MIN) {
                    return Err(ERR_ZERO_ID.into());
                }
                XCmd::Add(a)
            }
            b"xtrim" => XCmd::Trim(parse::add_or_trim(&args, false)?.trim.expect("a strategy")),
            b"xlen" => XCmd::Len,
            b"xrange" | b"xrevrange" => {
                let rev = name[1] == b'r' && name.len() == 9;
                let (start_arg, end_arg) = if rev {
                    (&args[3], &args[2])
                } else {
                    (&args[2], &args[3])
                };
                let (mut start, ex) = parse::bound(start_arg, 0)?;
                if ex {
                    start = start.next().ok_or(ERR_START)?;
                }
                let (mut end, ex) = parse::bound(end_arg, u64::MAX)?;
                if ex {
                    end = prev(end).ok_or(ERR_END)?;
                }
                let mut count = None;
                let mut j = 4;
                while j < args.len() {
                    if is(&args[j], "count") && j + 1 < args.len() {
                        let n = super::parse_i64(&args[j + 1]).ok_or(ERR_NOT_INTEGER)?;
                        count = Some(n.max(0) as u64);
                        j += 2;
                    } else {
                        return Err(ERR_SYNTAX.into());
                    }
                }
                XCmd::Range {
                    start,
                    end,
                    count,
                    rev,
                }
            }
            b"xdel" => XCmd::Del,
            b"xsetid" => {
                let last = parse::id(&args[2], 0, true)?;
                let mut entries_added = None;
                let mut max_deleted = None;
                let mut i = 3;
                while i < args.len() {
                    let more = args.len() - 1 - i;
                    if is(&args[i], "entriesadded") && more > 0 {
                        let n = super::parse_i64(&args[i + 1]).ok_or(ERR_NOT_INTEGER)?;
                        if n < 0 {
                            return Err(ERR_ENTRIES_ADDED.into());
                        }
                        entries_added = Some(n as u64);
                    } else if is(&args[i], "maxdeletedid") && more > 0 {
                        let m = parse::id(&args[i + 1], 0, true)?;
                        if last < m {
                            return Err(ERR_SETID_MAX_DELETED.into());
                        }
                        max_deleted = Some(m);
                    } else {
                        return Err(ERR_SYNTAX.into());
                    }
                    i += 2;
                }
                XCmd::SetId {
                    last,
                    entries_added,
                    max_deleted,
                }
            }
            b"xlastids" => {
                keys = args[1..].to_vec();
                XCmd::LastIds
            }
            b"xstate" => XCmd::State,
            b"xrestore" if args.len() == 3 => XCmd::Restore,
            b"xgroup" => {
                keys = vec![args.get(2).cloned().ok_or(ERR_SYNTAX)?];
                XCmd::Group(groups::XGroup::parse(&args)?)
            }
            b"xack" => XCmd::Ack,
            b"xinfo" => {
                keys = vec![args.get(2).cloned().ok_or(ERR_SYNTAX)?];
                XCmd::Info
            }
            b"xpending" => XCmd::Pending(groups::Pending::parse(&args)?),
            b"xclaim" => XCmd::Claim,
            b"xautoclaim" => XCmd::AutoClaim(claim::AutoClaim::parse(&args)?),
            b"xreadgroup" => {
                let o = read_options(&args, true)?;
                let group_at = o.group_at.ok_or(groups::ERR_MISSING_GROUP)?;
                let n = (args.len() - o.streams_at) / 2;
                keys = args[o.streams_at..o.streams_at + n].to_vec();
                let from = args[o.streams_at + n..]
                    .iter()
                    .map(|a| match &a[..] {
                        b"$" => Err(groups::ERR_DOLLAR),
                        b">" => Ok(groups::GroupFrom::New),
                        // Redis holds `>` as the greatest ID: that ID
                        // given outright reads new entries too.
                        a => parse::id(a, 0, true).map(|id| match id {
                            StreamId::MAX => groups::GroupFrom::New,
                            id => groups::GroupFrom::History(id),
                        }),
                    })
                    .collect();
                XCmd::ReadGroup {
                    count: o.count,
                    noack: o.noack,
                    from,
                    block_ms: o.block,
                    group_at,
                }
            }
            b"xread" => {
                let o = read_options(&args, false)?;
                let (count, block_ms, streams_at) = (o.count, o.block, o.streams_at);
                let n = (args.len() - streams_at) / 2;
                keys = args[streams_at..streams_at + n].to_vec();
                let from = args[streams_at + n..]
                    .iter()
                    .map(|a| match &a[..] {
                        b"$" => Ok(ReadFrom::Last),
                        b">" => Err(ERR_GT_XREAD),
                        a => parse::id(a, 0, true).map(ReadFrom::After),
                    })
                    .collect();
                XCmd::Read {
                    count,
                    from,
                    block_ms,
                    ids_at: streams_at + n,
                }
            }
            _ => return Err(ERR_SYNTAX.into()),
        };
        Ok(StreamOp { args, keys, cmd })
    }

    /// The key the op runs on.
    pub fn key(&self) -> &Bytes {
        &self.keys[0]
    }

    /// What the command does.
    pub fn cmd(&self) -> &XCmd {
        &self.cmd
    }

    /// True when the command may change a key.
    pub fn is_write(&self) -> bool {
        !matches!(
            self.cmd,
            XCmd::Len
                | XCmd::Range { .. }
                | XCmd::Read { .. }
                | XCmd::LastIds
                | XCmd::Pending(_)
                | XCmd::Info
                | XCmd::State
        )
    }

    /// True for XREADGROUP.
    pub fn is_group_read(&self) -> bool {
        matches!(self.cmd, XCmd::ReadGroup { .. })
    }

    /// XREAD's BLOCK, if given.
    pub fn block_ms(&self) -> Option<u64> {
        match self.cmd {
            XCmd::Read { block_ms, .. } | XCmd::ReadGroup { block_ms, .. } => block_ms,
            _ => None,
        }
    }

    /// A blocking XREAD that reads some key from `$`: the op asking for
    /// the last IDs it stands for (see [`StreamOp::reading_from`]).
    pub fn last_ids_wanted(&self) -> Option<StreamOp> {
        let XCmd::Read { from, .. } = &self.cmd else {
            return None;
        };
        // A refused ID is answered by the read itself, in Redis's order
        // (after the types of the keys before it).
        if !from.contains(&Ok(ReadFrom::Last)) || from.iter().any(Result::is_err) {
            return None;
        }
        let mut args = vec![Bytes::from_static(b"xlastids")];
        args.extend(self.keys.iter().cloned());
        StreamOp::parse(args).ok()
    }

    /// The same XREAD reading from `ids` (the answer of
    /// [`StreamOp::last_ids_wanted`]'s op) where it read from `$`.
    pub fn reading_from(&self, ids: &[OpReply]) -> Option<StreamOp> {
        let XCmd::Read { from, ids_at, .. } = &self.cmd else {
            return None;
        };
        let mut args = self.args.clone();
        for (i, f) in from.iter().enumerate() {
            if *f == Ok(ReadFrom::Last) {
                let OpReply::Bulk(id) = ids.get(i)? else {
                    return None;
                };
                args[ids_at + i] = id.clone();
            }
        }
        StreamOp::parse(args).ok()
    }

    /// Keys besides the one the op is applied to (see `Op::other_keys`).
    pub fn other_keys(&self) -> &[Bytes] {
        &self.keys[1..]
    }

    /// The op as bytes (`decode` parses the arguments again).
    pub fn encode(&self) -> Bytes {
        let mut out = Vec::new();
        put_list(&mut out, &self.args);
        Bytes::from(out)
    }

    /// Reads what [`StreamOp::encode`] wrote.
    pub fn decode(mut buf: Bytes) -> Option<StreamOp> {
        let args = get_list(&mut buf)?;
        if args.len() < 2 || buf.has_remaining() {
            return None;
        }
        StreamOp::parse(args).ok()
    }

    /// Runs the command on `key`.
    pub fn apply(&self, key: &[u8], view: &mut impl KeyView) -> OpReply {
        match &self.cmd {
            XCmd::Add(a) => write::add(key, view, a, &self.args[a.fields_at..]),
            XCmd::Len => match read_collection(view, key, Kind::Stream) {
                Err(e) => e,
                Ok(s) => OpReply::Int(s.map_or(0, |s| stream(&s).len() as i64)),
            },
            XCmd::Range {
                start,
                end,
                count,
                rev,
            } => match read_collection(view, key, Kind::Stream) {
                Err(e) => e,
                Ok(None) => OpReply::Array(Vec::new()),
                Ok(Some(_)) if *count == Some(0) => OpReply::NilArray,
                Ok(Some(s)) => {
                    let x = stream(&s);
                    let n = count.map_or(usize::MAX, |c| c as usize);
                    if start > end {
                        return OpReply::Array(Vec::new());
                    }
                    let range = x.entries_in(*start, *end);
                    if *rev {
                        OpReply::Array(range.rev().take(n).map(entry_reply).collect())
                    } else {
                        OpReply::Array(range.take(n).map(entry_reply).collect())
                    }
                }
            },
            XCmd::Del => write::del(key, view, &self.args[2..]),
            XCmd::Trim(t) => write::trim(key, view, t),
            XCmd::SetId {
                last,
                entries_added,
                max_deleted,
            } => write::set_id(key, view, *last, *entries_added, *max_deleted),
            XCmd::Read { count, from, .. } => read(key, &self.keys, view, *count, from),
            XCmd::Group(g) => groups::xgroup(key, view, g, &self.args),
            XCmd::ReadGroup {
                count,
                noack,
                from,
                group_at,
                ..
            } => groups::read_group(
                key,
                &self.keys,
                view,
                (&self.args[*group_at], &self.args[*group_at + 1]),
                *count,
                *noack,
                from,
            ),
            XCmd::Ack => groups::xack(key, view, &self.args),
            XCmd::Info => info::xinfo(key, view, &self.args),
            XCmd::Pending(p) => groups::xpending(key, view, &self.args[2], p),
            XCmd::Claim => claim::xclaim(key, view, &self.args),
            XCmd::AutoClaim(a) => claim::xautoclaim(key, view, &self.args, a),
            XCmd::State => info::state(key, view),
            XCmd::Restore => write::restore(key, view, &self.args[2]),
            XCmd::LastIds => {
                let mut ids = Vec::with_capacity(self.keys.len());
                for (i, k) in self.keys.iter().enumerate() {
                    let k: &[u8] = if i == 0 { key } else { k };
                    match read_collection(view, k, Kind::Stream) {
                        Err(e) => return e,
                        Ok(None) => ids.push(id_bulk(StreamId::MIN)),
                        // `$` past the horizon would skip what may
                        // still arrive below it: read from the horizon.
                        Ok(Some(s)) => ids.push(id_bulk(match shown_upto() {
                            Some(upto) => stream(&s).last_id().min(upto),
                            None => StreamId::MIN,
                        })),
                    }
                }
                OpReply::Array(ids)
            }
        }
    }
}

/// The ID right before `id` (None before 0-0).
fn prev(id: StreamId) -> Option<StreamId> {
    match id.seq.checked_sub(1) {
        Some(seq) => Some(StreamId::new(id.ms, seq)),
        None => id.ms.checked_sub(1).map(|ms| StreamId::new(ms, u64::MAX)),
    }
}

/// XREAD's and XREADGROUP's options before STREAMS.
struct ReadOptions {
    count: u64,
    block: Option<u64>,
    noack: bool,
    /// Where GROUP's arguments are.
    group_at: Option<usize>,
    /// Where the keys start.
    streams_at: usize,
}

/// Parses XREAD's (`group`: XREADGROUP's) options, in Redis's order.
fn read_options(args: &[Bytes], group: bool) -> Result<ReadOptions, String> {
    let is = |a: &[u8], w: &str| a.eq_ignore_ascii_case(w.as_bytes());
    let mut count = 0;
    let mut block = None;
    let mut noack = false;
    let mut group_at = None;
    let mut i = 1;
    while i < args.len() {
        let more = args.len() - 1 - i;
        let o = &args[i][..];
        if is(o, "block") && more > 0 {
            i += 1;
            block = Some(block_ms(&args[i])?);
        } else if is(o, "count") && more > 0 {
            i += 1;
            count = super::parse_i64(&args[i]).ok_or(ERR_NOT_INTEGER)?.max(0) as u64;
        } else if is(o, "streams") && more > 0 {
            if !(args.len() - i - 1).is_multiple_of(2) {
                return Err(ERR_UNBALANCED.into());
            }
            return Ok(ReadOptions {
                count,
                block,
                noack,
                group_at,
                streams_at: i + 1,
            });
        } else if is(o, "group") && more >= 2 {
            if !group {
                return Err(ERR_GROUP_XREAD.into());
            }
            group_at = Some(i + 1);
            i += 2;
        } else if is(o, "noack") {
            if !group {
                return Err(ERR_NOACK_XREAD.into());
            }
            noack = true;
        } else {
            return Err(ERR_SYNTAX.into());
        }
        i += 1;
    }
    Err(ERR_SYNTAX.into())
}

/// Whether `args` are an XREAD's or XREADGROUP's that reach a `BLOCK`
/// before anything Redis would refuse first: a script may not block
/// (Redis answers `… command is not allowed with BLOCK option from
/// scripts` there, with the command's name as called).
pub fn blocks_in_args(args: &[Bytes]) -> bool {
    let is = |a: &[u8], w: &str| a.eq_ignore_ascii_case(w.as_bytes());
    let group = match args.first() {
        Some(n) if is(n, "xreadgroup") => true,
        Some(n) if is(n, "xread") => false,
        _ => return false,
    };
    let mut i = 1;
    while i < args.len() {
        let more = args.len() - 1 - i;
        let o = &args[i][..];
        if is(o, "block") && more > 0 {
            return true;
        } else if is(o, "count") && more > 0 {
            if super::parse_i64(&args[i + 1]).is_none() {
                return false;
            }
            i += 1;
        } else if group && is(o, "group") && more >= 2 {
            i += 2;
        } else if !(group && is(o, "noack")) {
            return false;
        }
        i += 1;
    }
    false
}

/// XREAD's BLOCK milliseconds (Redis's `getTimeoutFromObjectOrReply` in
/// milliseconds: an integer).
pub fn block_ms(arg: &[u8]) -> Result<u64, &'static str> {
    let n = super::parse_i64(arg).ok_or(ERR_TIMEOUT)?;
    u64::try_from(n).map_err(|_| super::lists::ERR_TIMEOUT_NEGATIVE)
}

/// The stream a state shows (`read_collection` checked its kind).
fn stream(s: &KeyState) -> &Stream {
    match &s.collection {
        Some(Collection::Stream(x)) => x,
        _ => unreachable!("the key shows a stream"),
    }
}

fn id_bulk(id: StreamId) -> OpReply {
    OpReply::Bulk(Bytes::from(id.to_string()))
}

/// `[id, [field, value, …]]`.
fn entry_reply((id, e): (StreamId, elsa_lattice::stream::Entry<'_>)) -> OpReply {
    let fields = e
        .fields
        .iter()
        .flat_map(|(f, v)| {
            [
                OpReply::Bulk(Bytes::copy_from_slice(f)),
                OpReply::Bulk(Bytes::copy_from_slice(v)),
            ]
        })
        .collect();
    OpReply::Array(vec![id_bulk(id), OpReply::Array(fields)])
}

/// XREAD: per key (in order) the entries above where it reads from;
/// a null array when no key has any.
fn read(
    key: &[u8],
    keys: &[Bytes],
    view: &mut impl KeyView,
    count: u64,
    from: &[Result<ReadFrom, &'static str>],
) -> OpReply {
    let mut out = Vec::new();
    for (i, k) in keys.iter().enumerate() {
        let k: &[u8] = if i == 0 { key } else { k };
        let s = match read_collection(view, k, Kind::Stream) {
            Err(e) => return e,
            Ok(s) => s,
        };
        let after = match from[i] {
            Err(e) => return OpReply::Error(e),
            Ok(ReadFrom::Last) => continue,
            Ok(ReadFrom::After(id)) => id,
        };
        let Some(s) = s else { continue };
        let n = if count == 0 {
            usize::MAX
        } else {
            count as usize
        };
        let Some(upto) = shown_upto() else { continue };
        let from = after.next().unwrap_or(StreamId::MAX);
        let entries: Vec<OpReply> = stream(&s)
            .entries_in(from, upto)
            .filter(|(id, _)| *id > after)
            .take(n)
            .map(entry_reply)
            .collect();
        if !entries.is_empty() {
            out.push((
                Bytes::copy_from_slice(crate::db::user_key(k)),
                OpReply::Array(entries),
            ));
        }
    }
    if out.is_empty() {
        OpReply::NilArray
    } else {
        OpReply::Keyed(out)
    }
}

#[cfg(test)]
mod tests;

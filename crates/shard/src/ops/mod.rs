//! Per-key operations: the semantics of every data command, written once.
//!
//! An [`Op`] acts on one key through a [`KeyView`]. The same code runs on a
//! shard's table (lone commands, single-shard EXEC) and on a transaction's
//! buffered overlay (BEGIN…COMMIT, multi-shard EXEC), so a command behaves the
//! same whichever path it takes.
//!
//! A few ops also touch keys besides their own ([`Op::other_keys`]: RENAME
//! and COPY write their destination). Every path that runs ops holds,
//! fetches or routes those keys with the op's own, so the op sees and
//! writes all of them in the same atomic step.
//!
//! The semantics live by family, as Redis's `t_string.c`, `bitops.c` and
//! `db.c` do: [`strings`], [`bits`], [`keys`]; [`longdouble`] is the
//! extended-precision arithmetic INCRBYFLOAT needs.
//!
//! A key holds a plain string ([`Current`]) or a typed state
//! ([`KeyState`]: a hash, a set, a counter — see `docs/datatypes.md`),
//! together a [`Value`]. Typed commands change a key by *deltas*
//! ([`KeyView::merge`]) written as the view's [`KeyView::stamp`], so one
//! member's change is what is logged and shipped; whole-value writes
//! ([`KeyView::store`]: SET, RENAME…) replace whatever the key held. Each
//! family answers WRONGTYPE where Redis does ([`KeyView::read`] for the
//! string commands).

pub mod bitfield;
pub mod bits;
mod events;
pub mod geo;
pub mod hashes;
mod keys;
pub mod lcs;
pub mod limits;
pub mod lists;
pub mod longdouble;
pub mod pf;
mod replies;
pub use events::{absent_for_new, raise_if_created, shows};
pub(crate) use events::{notify, notify_if_gone};
mod scan;
pub mod sets;
pub mod streams;
mod strings;
pub mod zparse;

pub mod zsets;

use std::sync::Arc;

use bytes::Bytes;
use elsa_lattice::{Collection, KeyState, Kind, Ts, Version};

pub use replies::*;
pub use scan::{parse_cursor, scan_args_of, ScanArgs};

/// Largest string a value may grow to (Redis's `proto-max-bulk-len` default).
pub const MAX_STRING: usize = 512 * 1024 * 1024;

/// What a view holds for a key: its value and absolute expiry (Unix ms).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Current {
    /// The value bytes.
    pub value: Bytes,
    /// When it expires, if it has a TTL.
    pub expire_ms: Option<u64>,
    /// `Some(v)` when this state is a change of the TTL alone (EXPIRE,
    /// PERSIST, GETEX…) of the value written as `v`: it orders after that
    /// value and other TTL changes of it, never after another write of
    /// the value, whatever the clocks say (see [`Current::order`]).
    pub ttl_of: Option<Version>,
}

impl Current {
    /// Where a plain state written as `version` stands in its key's
    /// order: by the write of its value first, then by the write itself.
    /// A TTL change concurrent with a write of the value (SET in one
    /// region, EXPIRE of the older value in another) loses to it, and
    /// never brings the older value back (issue 41, defect 15).
    pub fn order(state: Option<&Current>, version: Version) -> (Version, Version) {
        (state.and_then(|c| c.ttl_of).unwrap_or(version), version)
    }
}

/// What a key holds, of any type.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Value {
    /// A plain string (last writer wins as a whole).
    Str(Current),
    /// A typed state. From [`KeyView::lookup`], the key's whole state as
    /// stored (it may show nothing: see [`Value::kind`]); given to
    /// [`KeyView::store`], what the key must show from then on.
    Typed(Arc<KeyState>),
}

impl Value {
    /// What the key shows at `now_ms`.
    pub fn kind(&self, now_ms: u64) -> Kind {
        match self {
            Value::Str(_) => Kind::String,
            Value::Typed(s) => s.kind(now_ms),
        }
    }
}

/// A value as a typed state: a plain string is a base that saw no
/// increments (what it merges as when a delta meets it); none is empty.
pub fn typed_of(value: Option<&Value>) -> KeyState {
    match value {
        None => KeyState::default(),
        Some(Value::Typed(s)) => (**s).clone(),
        Some(Value::Str(c)) => KeyState::of_string(elsa_lattice::Counter::default().set(
            Some(c.value.clone()),
            c.expire_ms,
            0,
            Version::new(1, 0),
        )),
    }
}

/// Merges `delta` into `value` where it is: a typed state held only here
/// (a transaction's overlay, once it has written the key) changes in place,
/// so a transaction writing one collection many times pays for each write,
/// not for the whole collection each time (issue 41: 100,000 SADDs in one
/// script were quadratic); a shared one, or a string, is copied first.
pub fn merge_into(value: &mut Option<Value>, delta: KeyState) {
    let mut state = match value.take() {
        Some(Value::Typed(s)) => s,
        other => std::sync::Arc::new(typed_of(other.as_ref())),
    };
    elsa_lattice::Crdt::merge(std::sync::Arc::make_mut(&mut state), delta);
    *value = Some(Value::Typed(state));
}

/// The `n`th stamp a transaction's overlay gives its deltas before it
/// commits (the commit's own version is not known yet). Above every real
/// version — HLC timestamps stay below 2^63 — and increasing, so the
/// overlay merges them as later writes, in order. Only what the overlay
/// then *shows* is installed (`KeyState::replace_with` at the commit's
/// real version), never these versions.
pub fn pending_stamp(n: u64) -> (Ts, Version) {
    let ts = (1 << 63) + n;
    (ts, Version::new(ts, 0))
}

/// Whether `ts` is a [`pending_stamp`]: no time at all.
pub fn is_pending(ts: Ts) -> bool {
    ts >= 1 << 63
}

/// A string command on a key holding another type.
pub const WRONGTYPE: &str = "WRONGTYPE Operation against a key holding the wrong kind of value";

/// Access to the state of keys, as a command sees it.
pub trait KeyView {
    /// What `key` holds: a live string, or its typed state (whatever that
    /// shows, even nothing); `None` when absent, deleted or expired.
    fn lookup(&mut self, key: &[u8]) -> Option<Value>;
    /// Writes `key` whole: it shows `value` from now on (a typed value's
    /// elements replace the old ones; concurrent writes elsewhere merge
    /// as `docs/datatypes.md` says); `None` deletes it.
    fn store(&mut self, key: &[u8], value: Option<Value>);
    /// Merges `delta`, written as the last [`KeyView::stamp`], into `key`.
    fn merge(&mut self, key: &[u8], delta: KeyState);
    /// [`KeyView::merge`] of a write that changes nothing a client reads
    /// (an add of elements already there, with what they hold): it still
    /// replicates, but Redis, which changes nothing, tells no tracking
    /// client, so neither does a view that can tell.
    fn merge_unseen(&mut self, key: &[u8], delta: KeyState) {
        self.merge(key, delta)
    }
    /// The start timestamp and version the next delta is written as; each
    /// call a new, larger version.
    fn stamp(&mut self) -> (Ts, Version);
    /// Milliseconds since the Unix epoch, for TTLs.
    fn now_ms(&self) -> u64;

    /// The least milliseconds a `*` stream ID chosen now may take across
    /// regions (`streams::id_floor`): a view whose writes apply at once
    /// answers every gossip flush so far; a transaction's view pins the
    /// ID until its writes are installed. 0 where nothing is shipped.
    fn id_floor_ms(&mut self) -> u64 {
        0
    }

    /// The write of the plain value `key` shows, when it comes from the
    /// store unchanged (not written by this transaction): a change of its
    /// TTL alone applies to that write (`Current::ttl_of`). `None`: the
    /// change is written as a write of the value (where the view cannot
    /// tell, or the value is this transaction's own).
    fn value_version(&mut self, _key: &[u8]) -> Option<Version> {
        None
    }

    /// `key`'s string as a register-wise HyperLogLog write merges into
    /// it: the stored typed string, or the stored plain value (live,
    /// deleted or expired) as the base it becomes when a delta meets it
    /// (`Record::as_typed`). `None` where writes are whole values (a
    /// transaction's overlay: its commit writes a HyperLogLog whose
    /// registers only rose as a part, `KeyState::replace_with`).
    fn hll_base(&mut self, _key: &[u8]) -> Option<elsa_lattice::Counter> {
        None
    }

    /// `key`'s access clock and how to read it (OBJECT IDLETIME, FREQ);
    /// `None` where no clock is kept.
    fn access(&mut self, _key: &[u8]) -> Option<(u32, crate::evict::AccessClock)> {
        None
    }

    /// Whether a keyspace event of `class` would go anywhere (`crate::notify`):
    /// an op skips the work of one (a lookup after its write) when not.
    fn notifies(&self, _class: u32) -> bool {
        false
    }

    /// Raises Redis's keyspace event `name` of `class` about `key`, where
    /// Redis's command calls `notifyKeyspaceEvent`: at once on the shard
    /// that applied a lone command, at commit for a transaction's.
    fn notify(&mut self, _class: u32, _name: &'static str, _key: &[u8]) {}

    /// Sets `key`'s access clock as RESTORE asks (only where the shard's
    /// table is at hand: the lone path); true when it did.
    fn set_access(&mut self, _key: &[u8], _to: crate::evict::Restored) -> bool {
        false
    }

    /// The live string value of `key`, or WRONGTYPE when it holds another
    /// type.
    fn read(&mut self, key: &[u8]) -> Result<Option<Current>, &'static str> {
        let now = self.now_ms();
        match self.lookup(key) {
            None => Ok(None),
            Some(Value::Str(c)) => Ok(Some(c)),
            Some(Value::Typed(s)) => match s.kind(now) {
                Kind::None => Ok(None),
                Kind::String => Ok(s.visible_string(now).map(|value| Current {
                    value,
                    expire_ms: s.string.expire_ms(),
                    ttl_of: None,
                })),
                _ => Err(WRONGTYPE),
            },
        }
    }

    /// Writes `key` as a string; `None` deletes it.
    fn write(&mut self, key: &[u8], state: Option<Current>) {
        self.store(key, state.map(Value::Str));
    }

    /// What `key` shows.
    fn kind(&mut self, key: &[u8]) -> Kind {
        let now = self.now_ms();
        self.lookup(key).map_or(Kind::None, |v| v.kind(now))
    }

    /// The live value of `key` of any type (`None` when it shows nothing).
    fn live(&mut self, key: &[u8]) -> Option<Value> {
        let now = self.now_ms();
        self.lookup(key).filter(|v| v.kind(now) != Kind::None)
    }
}

/// A collection command's read of `key`: its state when it shows a
/// collection of kind `want`, `None` when it shows nothing, WRONGTYPE when
/// it shows another type.
pub fn read_collection(
    view: &mut impl KeyView,
    key: &[u8],
    want: Kind,
) -> Result<Option<Arc<KeyState>>, OpReply> {
    let now = view.now_ms();
    match view.lookup(key) {
        None => Ok(None),
        Some(Value::Str(_)) => Err(OpReply::Error(WRONGTYPE)),
        Some(Value::Typed(s)) => match s.kind(now) {
            Kind::None => Ok(None),
            k if k == want => Ok(Some(s)),
            _ => Err(OpReply::Error(WRONGTYPE)),
        },
    }
}

/// What a collection command that writes starts from (see
/// [`begin_collection_write`]).
pub struct CollectionWrite {
    /// The key's stored state when its collection is of the kind written
    /// and not expired — even if it shows nothing (all removed: its
    /// fields' counters still count) — else `None`: start from empty.
    pub state: Option<Arc<KeyState>>,
    /// What the delta must hold before the command's own changes: the
    /// clearing of an expired collection of the same kind (its elements
    /// are gone for good, in every replica).
    pub prefix: KeyState,
    /// The transaction start and version every part of the delta is
    /// written as (one per command: its elements differ, so one version
    /// serves them all).
    pub start_ts: Ts,
    /// See `start_ts`.
    pub dot: Version,
}

/// Starts a hash or set command that writes `key`: WRONGTYPE when the key
/// shows another type, else what its delta starts from. The delta the
/// command builds must hold this collection kind only (a string and a
/// collection written at one version tie, and a tie drops both): a key
/// that held a string, or another collection, is replaced by the newer
/// write when merged.
pub fn begin_collection_write(
    view: &mut impl KeyView,
    key: &[u8],
    want: Kind,
) -> Result<CollectionWrite, OpReply> {
    let now = view.now_ms();
    let stored = match view.lookup(key) {
        None => None,
        Some(Value::Str(_)) => return Err(OpReply::Error(WRONGTYPE)),
        Some(Value::Typed(s)) => {
            let shown = s.kind(now);
            if shown != Kind::None && shown != want {
                return Err(OpReply::Error(WRONGTYPE));
            }
            Some(s)
        }
    };
    let (start_ts, dot) = view.stamp();
    let same_kind = |s: &KeyState| {
        matches!(
            (&s.collection, want),
            (Some(Collection::Hash(_)), Kind::Hash)
                | (Some(Collection::Set(_)), Kind::Set)
                | (Some(Collection::ZSet(_)), Kind::ZSet)
                | (Some(Collection::List(_)), Kind::List)
                | (Some(Collection::Stream(_)), Kind::Stream)
        )
    };
    Ok(match stored {
        Some(s) if same_kind(&s) && s.collection_expired(now) => CollectionWrite {
            prefix: s.clear(start_ts, dot),
            state: None,
            start_ts,
            dot,
        },
        // Emptied (every element removed): the key was gone, as Redis
        // deletes an emptied collection, so the new elements start without
        // its expiry — but on its state (its fields' counters still count).
        Some(s) if same_kind(&s) && s.kind(now) == Kind::None => CollectionWrite {
            state: Some(s),
            prefix: KeyState::of_ttl(elsa_lattice::Ttl::none(dot)),
            start_ts,
            dot,
        },
        Some(s) if same_kind(&s) => CollectionWrite {
            state: Some(s),
            prefix: KeyState::default(),
            start_ts,
            dot,
        },
        // Another type (shown or not — a collection of another kind that
        // expired, a deleted string): the new collection replaces it when
        // merged, and must not inherit its expiry (the key's collection
        // TTL is one per key): the delta resets it.
        Some(_) => CollectionWrite {
            state: None,
            prefix: KeyState::of_ttl(elsa_lattice::Ttl::none(dot)),
            start_ts,
            dot,
        },
        None => CollectionWrite {
            state: None,
            prefix: KeyState::default(),
            start_ts,
            dot,
        },
    })
}

/// A string command's read of `key`: its value, or the WRONGTYPE reply
/// from the enclosing op.
macro_rules! read_string {
    ($view:expr, $key:expr) => {
        match $view.read($key) {
            Ok(c) => c,
            Err(e) => return OpReply::Error(e),
        }
    };
}
pub(crate) use read_string;

/// SET's NX / XX condition.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SetCond {
    /// Always write.
    Always,
    /// Only if the key does not exist (NX).
    IfAbsent,
    /// Only if the key exists (XX).
    IfPresent,
}

/// What SET does to the key's TTL.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Expiry {
    /// Clear any TTL (plain SET).
    Clear,
    /// Keep the current TTL (KEEPTTL).
    Keep,
    /// Expire at this absolute Unix millisecond.
    At(u64),
}

/// What GETEX does to the key's TTL.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GetExTtl {
    /// No option: a plain GET.
    Keep,
    /// PERSIST: drop the TTL.
    Persist,
    /// EX / PX / EXAT / PXAT: expire at this Unix millisecond (a time
    /// already past deletes the key after answering its value).
    At(u64),
    /// The time given is refused — but Redis reads it only once it found
    /// the key, so a missing key still answers nil.
    Refused(&'static str),
}

/// The range arguments of BITCOUNT and BITPOS, as parsed. Redis looks the
/// key up before it reads them, so a refusal is answered only when the key
/// exists (a missing key answers 0 whatever follows).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BitRange {
    /// No range: the whole string.
    All,
    /// `start [end]`, in bytes, or in bits when `bits` (BIT).
    Span {
        /// First index; negative counts from the end.
        start: i64,
        /// Last index, inclusive; `None` (BITPOS only) runs to the end.
        end: Option<i64>,
        /// BIT rather than BYTE.
        bits: bool,
    },
    /// An argument Redis refuses.
    Refused(&'static str),
}

/// What OBJECT reports about a key.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ObjectField {
    /// OBJECT ENCODING: `int`, `embstr` or `raw`, as Redis would store it.
    Encoding,
    /// OBJECT REFCOUNT: Redis's count for the value it would have.
    Refcount,
    /// OBJECT IDLETIME: Elsa does not track access times; always 0.
    IdleTime,
    /// OBJECT FREQ: refused, as Redis refuses it without an LFU policy.
    Freq,
}

/// EXPIRE's NX / XX / GT / LT options (Redis 7), as given. The command
/// parser refuses the combinations Redis refuses (NX with any other, GT with
/// LT); XX may come with GT or LT.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ExpireCond {
    /// Only if the key has no TTL.
    pub nx: bool,
    /// Only if the key has a TTL.
    pub xx: bool,
    /// Only if the new expiry is later than the current one.
    pub gt: bool,
    /// Only if the new expiry is earlier than the current one.
    pub lt: bool,
}

impl ExpireCond {
    /// True when a key whose expiry is `current` may be given `at`.
    pub fn allows(self, at: u64, current: Option<u64>) -> bool {
        if self.nx && current.is_some() {
            return false;
        }
        if self.xx && current.is_none() {
            return false;
        }
        // No TTL counts as an infinite one, as in Redis: GT never beats
        // it, LT always does.
        if self.gt && current.is_none_or(|cur| at <= cur) {
            return false;
        }
        if self.lt && current.is_some_and(|cur| at >= cur) {
            return false;
        }
        true
    }
}

/// How SET answers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SetReply {
    /// `+OK` or nil when the condition failed (SET).
    Ok,
    /// The old value (SET … GET, GETSET).
    Old,
    /// `1` when written, `0` when not (SETNX).
    Flag,
}

/// One operation on one key.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Op {
    /// GET
    Get,
    /// SET / SETNX / GETSET / SET … GET
    Set {
        /// New value.
        value: Bytes,
        /// NX / XX.
        cond: SetCond,
        /// EX / PX / EXAT / PXAT / KEEPTTL.
        expiry: Expiry,
        /// Reply shape.
        reply: SetReply,
    },
    /// GETEX
    GetEx(GetExTtl),
    /// GETDEL
    GetDel,
    /// INCR / DECR / INCRBY / DECRBY
    IncrBy(i64),
    /// INCRBYFLOAT (the increment as given; checked again when applied)
    IncrByFloat(Bytes),
    /// APPEND
    Append(Bytes),
    /// STRLEN
    Strlen,
    /// GETRANGE / SUBSTR
    GetRange {
        /// First byte; negative counts from the end.
        start: i64,
        /// Last byte, inclusive; negative counts from the end.
        end: i64,
    },
    /// SETRANGE (the offset is checked non-negative by the parser)
    SetRange {
        /// Where the bytes go.
        offset: u64,
        /// The bytes.
        value: Bytes,
    },
    /// GETBIT (the offset is checked by the parser)
    GetBit(u64),
    /// SETBIT
    SetBit {
        /// Which bit, from the first byte's most significant one.
        offset: u64,
        /// Set (1) or clear (0).
        on: bool,
    },
    /// BITCOUNT
    BitCount(BitRange),
    /// BITFIELD / BITFIELD_RO (arguments checked by the parser)
    BitField(bitfield::BitField),
    /// BITOP, run on its first source
    BitOp(bits::BitOp),
    /// LCS, run on its first key
    Lcs(lcs::Lcs),
    /// BITPOS
    BitPos {
        /// The bit looked for.
        bit: bool,
        /// Where.
        range: BitRange,
    },
    /// DEL / UNLINK (one key; multi-key forms sum the replies)
    Del,
    /// EXISTS / TOUCH (one key)
    Exists,
    /// TYPE
    Type,
    /// TTL (seconds) or PTTL (milliseconds)
    Ttl {
        /// PTTL when true.
        millis: bool,
    },
    /// EXPIRETIME (seconds) or PEXPIRETIME (milliseconds): absolute.
    ExpireTime {
        /// PEXPIRETIME when true.
        millis: bool,
    },
    /// EXPIRE / PEXPIRE / EXPIREAT / PEXPIREAT; a time in the past deletes.
    ExpireAt(u64),
    /// The same with NX / XX / GT / LT: only when `cond` allows it.
    ExpireAtIf {
        /// Absolute Unix ms.
        at: u64,
        /// The options given.
        cond: ExpireCond,
    },
    /// PERSIST
    Persist,
    /// RENAME / RENAMENX: the value and its TTL move to `to`.
    Rename {
        /// The new name.
        to: Bytes,
        /// RENAMENX: only if `to` does not exist.
        nx: bool,
    },
    /// COPY: the value and its TTL are copied to `to` (the parser refuses
    /// `to` equal to the key, as Redis does).
    Copy {
        /// The destination.
        to: Bytes,
        /// REPLACE: overwrite an existing destination.
        replace: bool,
    },
    /// OBJECT ENCODING | REFCOUNT | IDLETIME | FREQ
    Object(ObjectField),
    /// MEMORY USAGE
    MemoryUsage,
    /// A hash command.
    Hash(hashes::HashOp),
    /// A set command (SADD…; `Set` is SET's).
    Sets(sets::SetOp),
    /// A sorted-set command.
    ZSets(zsets::ZSetOp),
    /// A list command.
    Lists(lists::ListOp),
    /// TOUCH: EXISTS that counts as an access of the key.
    Touch,
    /// RESTORE's IDLETIME or FREQ: sets the key's access clock, after
    /// the restore committed (not a write, and not an access).
    SetAccess(crate::evict::Restored),
    /// A HyperLogLog command.
    Pf(pf::Pf),
    /// A stream command.
    Streams(streams::StreamOp),
}

/// The answer of an [`Op`], before RESP encoding.
#[derive(Clone, Debug, PartialEq)]
pub enum OpReply {
    /// Null bulk / null.
    Nil,
    /// `+OK`.
    Ok,
    /// An integer.
    Int(i64),
    /// A bulk string.
    Bulk(Bytes),
    /// A simple status string (TYPE's `string`).
    Status(&'static str),
    /// A Redis error line, without the leading `-`.
    Error(&'static str),
    /// An error line made at run time (the GEO searches' refusals, which
    /// Redis answers only after it checked the key's type).
    ErrorText(String),
    /// An array of answers (HMGET, SMISMEMBER, HKEYS, SSCAN's parts…).
    Array(Vec<OpReply>),
    /// Field–value pairs: a RESP3 map, a flat RESP2 array (HGETALL).
    Map(elsa_lattice::FieldValues),
    /// Members: a RESP3 set, a RESP2 array (SMEMBERS, SINTER…).
    Set(Vec<Bytes>),
    /// Pairs: RESP3 an array of two-element arrays, RESP2 a flat array
    /// (HRANDFIELD … WITHVALUES).
    Pairs(Vec<(Bytes, Bytes)>),
    /// A null array: RESP2 `*-1`, RESP3 `_` (ZMPOP finding nothing).
    NilArray,
    /// A score: RESP3 a double, RESP2 a bulk string (`%.17g`).
    Double(f64),
    /// Members with scores: RESP3 an array of [member, double] pairs,
    /// RESP2 one flat array (ZRANGE … WITHSCORES).
    Scored(Vec<(Bytes, f64)>),
    /// Named answers: a RESP3 map, a flat RESP2 array (LCS … IDX).
    Fields(Vec<(&'static str, OpReply)>),
    /// A coordinate (GEOPOS, WITHCOORD): `%.17Lf` without its trailing
    /// zeros, as a RESP3 double or a RESP2 bulk string (Redis's
    /// `addReplyHumanLongDouble`).
    Coord(f64),
    /// Answers per key: a RESP3 map, a RESP2 array of `[key, answer]`
    /// pairs (XREAD).
    Keyed(Vec<(Bytes, OpReply)>),
}

/// Scores in replies are never NaN (Redis refuses every command that would
/// make one), so equality is total.
impl Eq for OpReply {}

impl Op {
    /// True when running the op is not an access of its key: its access
    /// clock stays as it was (Redis's `LOOKUP_NOTOUCH`).
    pub fn no_touch(&self) -> bool {
        matches!(
            self,
            Op::Exists
                | Op::Type
                | Op::Ttl { .. }
                | Op::ExpireTime { .. }
                | Op::Object(_)
                | Op::MemoryUsage
                | Op::SetAccess(_)
        )
    }

    /// True when the op may change a key (it needs write holds and a
    /// commit timestamp).
    pub fn is_write(&self) -> bool {
        !matches!(
            self,
            Op::Get
                | Op::Exists
                | Op::Touch
                | Op::SetAccess(_)
                | Op::Strlen
                | Op::Type
                | Op::Ttl { .. }
                | Op::ExpireTime { .. }
                | Op::GetRange { .. }
                | Op::GetBit(_)
                | Op::BitCount(_)
                | Op::BitPos { .. }
                | Op::Lcs(_)
                | Op::Object(_)
                | Op::MemoryUsage
        ) && !matches!(self, Op::Hash(h) if !h.is_write())
            && !matches!(self, Op::BitField(b) if !b.is_write())
            && !matches!(self, Op::Sets(s) if !s.is_write())
            && !matches!(self, Op::ZSets(z) if !z.is_write())
            && !matches!(self, Op::Lists(l) if !l.is_write())
            && !matches!(self, Op::Pf(p) if !p.is_write())
            && !matches!(self, Op::Streams(x) if !x.is_write())
    }

    /// Keys besides the one the op is applied to that it reads and may
    /// write (RENAME's and COPY's destination). Whoever runs the op holds
    /// them as it holds the op's own key, for writing when
    /// [`Op::is_write`], and gives the op a view that has them.
    pub fn other_keys(&self) -> &[Bytes] {
        match self {
            Op::Rename { to, .. } | Op::Copy { to, .. } => std::slice::from_ref(to),
            Op::BitOp(b) => &b.keys,
            Op::Lcs(l) => &l.other,
            Op::Sets(s) => s.other_keys(),
            Op::ZSets(z) => z.other_keys(),
            Op::Lists(l) => l.other_keys(),
            Op::Pf(p) => p.other_keys(),
            Op::Streams(x) => x.other_keys(),
            _ => &[],
        }
    }

    /// Runs the op on `key` against `view`.
    pub fn apply(&self, key: &[u8], view: &mut impl KeyView) -> OpReply {
        match self {
            Op::Get => strings::get(key, view),
            Op::Set {
                value,
                cond,
                expiry,
                reply,
            } => strings::set(key, view, value, *cond, *expiry, *reply),
            Op::GetEx(ttl) => strings::getex(key, view, *ttl),
            Op::GetDel => strings::getdel(key, view),
            Op::IncrBy(delta) => strings::incr(key, view, *delta),
            Op::IncrByFloat(by) => strings::incr_by_float(key, view, by),
            Op::Append(suffix) => strings::append(key, view, suffix),
            Op::Strlen => strings::strlen(key, view),
            Op::GetRange { start, end } => strings::getrange(key, view, *start, *end),
            Op::SetRange { offset, value } => strings::setrange(key, view, *offset, value),
            Op::GetBit(offset) => bits::getbit(key, view, *offset),
            Op::SetBit { offset, on } => bits::setbit(key, view, *offset, *on),
            Op::BitCount(range) => bits::bitcount(key, view, *range),
            Op::BitPos { bit, range } => bits::bitpos(key, view, *bit, *range),
            Op::BitField(b) => b.apply(key, view),
            Op::BitOp(b) => b.apply(key, view),
            Op::Lcs(l) => l.apply(key, view),
            Op::Del => keys::del(key, view),
            Op::Exists | Op::Touch => keys::exists(key, view),
            Op::SetAccess(to) => OpReply::Int(i64::from(view.set_access(key, *to))),
            Op::Type => keys::type_of(key, view),
            Op::Ttl { millis } => keys::ttl(key, view, *millis),
            Op::ExpireTime { millis } => keys::expiretime(key, view, *millis),
            Op::ExpireAt(at) => keys::expire(key, view, *at, ExpireCond::default()),
            Op::ExpireAtIf { at, cond } => keys::expire(key, view, *at, *cond),
            Op::Persist => keys::persist(key, view),
            Op::Rename { to, nx } => keys::rename(key, view, to, *nx),
            Op::Copy { to, replace } => keys::copy(key, view, to, *replace),
            Op::Object(field) => keys::object(key, view, *field),
            Op::MemoryUsage => keys::memory_usage(key, view),
            Op::Hash(h) => h.apply(key, view),
            Op::Sets(s) => s.apply(key, view),
            Op::ZSets(z) => z.apply(key, view),
            Op::Lists(l) => l.apply(key, view),
            Op::Pf(p) => p.apply(key, view),
            Op::Streams(x) => x.apply(key, view),
        }
    }
}

/// Parses a Redis integer: optional `-`, digits, no spaces or `+`, fits i64.
pub fn parse_i64(b: &[u8]) -> Option<i64> {
    if b.is_empty() || b.len() > 20 || b[0] == b'+' {
        return None;
    }
    if b.len() > 1 && (b[0] == b'0' || (b[0] == b'-' && b[1] == b'0')) {
        return None; // Redis rejects leading zeros and "-0".
    }
    std::str::from_utf8(b).ok()?.parse().ok()
}

/// A value with a TTL kept: what in-place edits (APPEND, SETRANGE, SETBIT,
/// INCR…) write back, as Redis keeps the key's expiry when it changes the
/// value.
fn keeping_ttl(old: Option<&Current>, value: Bytes) -> Option<Current> {
    Some(Current {
        value,
        expire_ms: old.and_then(|c| c.expire_ms),
        ttl_of: None,
    })
}

/// A map-backed view for the families' unit tests.
#[cfg(test)]
pub(crate) mod testing;

#[cfg(test)]
mod readd_tests;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_i64_follows_string2ll() {
        assert_eq!(parse_i64(b"007"), None);
        assert_eq!(parse_i64(b"-0"), None);
        assert_eq!(parse_i64(b"+1"), None);
        assert_eq!(parse_i64(b"-12"), Some(-12));
        assert_eq!(parse_i64(b"-9223372036854775808"), Some(i64::MIN));
        assert_eq!(parse_i64(b"9223372036854775808"), None);
    }

    #[test]
    fn every_reply_text_is_interned() {
        for t in REPLY_TEXTS {
            assert_eq!(intern(t), Some(*t));
        }
        assert_eq!(intern("ERR something else"), None);
    }

    #[test]
    fn only_rename_and_copy_reach_other_keys() {
        let to = Bytes::from_static(b"dst");
        let rename = Op::Rename {
            to: to.clone(),
            nx: false,
        };
        assert_eq!(rename.other_keys(), std::slice::from_ref(&to));
        assert!(rename.is_write());
        let copy = Op::Copy {
            to: to.clone(),
            replace: true,
        };
        assert_eq!(copy.other_keys(), &[to]);
        assert!(Op::Get.other_keys().is_empty());
        assert!(!Op::MemoryUsage.is_write());
    }
}

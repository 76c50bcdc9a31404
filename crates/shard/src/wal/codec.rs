//! The on-disk format shared by the write-ahead log and snapshots.
//!
//! A file is a sequence of frames; a frame is one *record*: a batch of
//! lattices installed together (a lone write, a single-shard commit, or every
//! write of a multi-shard commit), so a multi-shard commit is all in one
//! frame and recovers all-or-nothing.
//!
//! ```text
//! frame:  [magic u32][payload_len u32][crc32 of payload_len and payload u32][payload]
//! payload: [count u32] count × entry
//!        | [count | OWN u32] count × entry  (this node's own commits, shipped
//!                                      to the region's other replicas)
//!        | [count | REMOTE u32] count × entry  (lattices another region
//!                                      sent, merged as they came)
//!        | [count | PARKED u32] count × entry  (parts of another region's
//!                                      transactions, kept out of sight)
//!        | [u32::MAX][floor u64]      (FLUSHALL: every lattice committed
//!                                      before `floor` is gone)
//!        | [u32::MAX - 1][seq u64][offset u64]  (the region's replicas
//!                                      confirmed every own frame of segment
//!                                      `seq` that ends by byte `offset`)
//! entry:  [key_len u32][key][flags u8][expire_ms u64 if TTL]
//!         [value_len u32][value] (absent for a tombstone)
//!         [start_ts u64][commit_ts u64][origin u32]
//! ```
//!
//! Flag 4 (TYPED) marks a typed state (a hash, a set, a counter; see
//! `elsa_lattice::KeyState`): `[value]` is then its encoding, a delta to
//! merge, and the entry has no TTL field. Files written before typed
//! states existed never set it and read unchanged, so an older data
//! directory needs no upgrade; a flag this version does not know is
//! refused as corrupt rather than guessed.
//!
//! Replay merges every entry into the table with the lattice's merge, so the
//! order in which files are replayed does not matter.
//!
//! Own frames and confirmation marks let a node of a region drop, when it
//! restarts, the commits it logged that its region never confirmed: the
//! region may have moved on without them (see `files::DataDir::recover`).

use std::sync::Arc;

use bytes::{Buf, BufMut, Bytes};
use elsa_lattice::{KeyState, Ts, Version};

use crate::ops::Current;

const TOMBSTONE: u8 = 1;
const HAS_TTL: u8 = 2;
const TYPED: u8 = 4;
/// A change of the TTL alone: the version of the value it changed follows
/// the expiry (see `Current::ttl_of`).
const TTL_OF: u8 = 8;
/// Two bits: which kind of commit wrote the entry ([`crate::record::Unit`]
/// code, 0–2), so that a node that restarts still ships another region a
/// transaction's part as a part (issue 42: after a restart, recovered keys
/// went out as lone writes and the other region showed them at once —
/// a transfer seen in part). Logs written before carry none.
const UNIT_SHIFT: u8 = 4;
const UNIT_MASK: u8 = 3 << UNIT_SHIFT;
const HEADER: usize = 12;
/// Marks the start of every frame, so recovery can tell a torn tail (no
/// valid frame after the damage) from damage in the middle of a file.
const MAGIC: u32 = 0xE15A_F7A1;
/// Frames larger than this are treated as corrupt (no allocation is made
/// from a length read off disk before this check).
pub const MAX_FRAME: usize = 1 << 30;

/// A key's lattice as logged and shipped between replicas.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum EntryState {
    /// A plain string's whole state: value and expiry, or None for a
    /// tombstone. The larger version wins a merge.
    Plain(Option<Current>),
    /// A typed state (often a delta: one member's change), merged into
    /// what the key holds.
    Typed(Arc<KeyState>),
}

impl EntryState {
    /// The plain state, if it is one.
    pub fn plain(&self) -> Option<&Current> {
        match self {
            EntryState::Plain(c) => c.as_ref(),
            EntryState::Typed(_) => None,
        }
    }
}

/// One lattice as logged.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LogEntry {
    /// The key.
    pub key: Bytes,
    /// Its state.
    pub state: EntryState,
    /// When the writing transaction started.
    pub start_ts: Ts,
    /// Who committed it, when.
    pub version: Version,
    /// Which kind of commit wrote it (steers what another region waits
    /// for before showing it; logged since issue 42).
    pub unit: crate::record::Unit,
}

/// A lattice to encode, borrowed (from a table record or a write).
#[derive(Clone, Copy, Debug)]
pub struct EntryRef<'a> {
    /// The key.
    pub key: &'a [u8],
    /// A typed state; then `value` and `expire_ms` are unused.
    pub typed: Option<&'a KeyState>,
    /// The value; None = tombstone.
    pub value: Option<&'a [u8]>,
    /// Absolute expiry, if any.
    pub expire_ms: Option<u64>,
    /// The value's write, when this state changed its TTL alone.
    pub ttl_of: Option<Version>,
    /// Start timestamp.
    pub start_ts: Ts,
    /// Version.
    pub version: Version,
    /// Which kind of commit wrote it.
    pub unit: crate::record::Unit,
}

impl<'a> EntryRef<'a> {
    /// Borrows a key and its state.
    pub fn of(key: &'a [u8], state: &'a EntryState, start_ts: Ts, version: Version) -> Self {
        match state {
            EntryState::Plain(c) => Self::plain(key, c.as_ref(), start_ts, version),
            EntryState::Typed(s) => EntryRef {
                key,
                typed: Some(s),
                value: None,
                expire_ms: None,
                ttl_of: None,
                start_ts,
                version,
                unit: crate::record::Unit::None,
            },
        }
    }

    /// The same, written by a commit of `unit`'s kind.
    pub fn with_unit(self, unit: crate::record::Unit) -> Self {
        EntryRef { unit, ..self }
    }

    /// Borrows a key and its plain state.
    pub fn plain(
        key: &'a [u8],
        state: Option<&'a Current>,
        start_ts: Ts,
        version: Version,
    ) -> Self {
        EntryRef {
            key,
            typed: None,
            value: state.map(|c| &c.value[..]),
            expire_ms: state.and_then(|c| c.expire_ms),
            ttl_of: state.and_then(|c| c.ttl_of),
            start_ts,
            version,
            unit: crate::record::Unit::None,
        }
    }
}

/// Appends one entry's encoding to `out`.
pub fn encode_entry(out: &mut Vec<u8>, e: EntryRef<'_>) {
    let EntryRef {
        key,
        typed,
        value,
        expire_ms,
        ttl_of,
        start_ts,
        version,
        unit,
    } = e;
    let unit = (unit.code() as u8) << UNIT_SHIFT;
    out.put_u32_le(key.len() as u32);
    out.extend_from_slice(key);
    if let Some(s) = typed {
        out.put_u8(TYPED | unit);
        let at = out.len();
        out.put_u32_le(0);
        s.encode(out);
        let len = (out.len() - at - 4) as u32;
        out[at..at + 4].copy_from_slice(&len.to_le_bytes());
        out.put_u64_le(start_ts);
        out.put_u64_le(version.commit_ts);
        out.put_u32_le(version.origin);
        return;
    }
    let mut flags = unit;
    if value.is_none() {
        flags |= TOMBSTONE;
    }
    if expire_ms.is_some() {
        flags |= HAS_TTL;
    }
    let ttl_of = ttl_of.filter(|_| value.is_some());
    if ttl_of.is_some() {
        flags |= TTL_OF;
    }
    out.put_u8(flags);
    if let Some(ms) = expire_ms {
        out.put_u64_le(ms);
    }
    if let Some(of) = ttl_of {
        out.put_u64_le(of.commit_ts);
        out.put_u32_le(of.origin);
    }
    if let Some(v) = value {
        out.put_u32_le(v.len() as u32);
        out.extend_from_slice(v);
    }
    out.put_u64_le(start_ts);
    out.put_u64_le(version.commit_ts);
    out.put_u32_le(version.origin);
}

/// What one frame of a file holds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Logged {
    /// Lattices installed together.
    Lattices(Vec<LogEntry>),
    /// Lattices this node committed and shipped to its region's other
    /// replicas: trusted once a [`Logged::Confirmed`] covers them.
    Own(Vec<LogEntry>),
    /// Lattices another region sent, installed as they came (lone writes,
    /// transaction records): recovery must not take such a record's
    /// writes as a transaction of this region's (see [`Frame::Remote`]).
    Remote(Vec<LogEntry>),
    /// Parts of another region's transactions, kept out of sight until
    /// their transaction is installed whole (see [`Frame::Parked`]).
    Parked(Vec<LogEntry>),
    /// Every own frame of segment `seq` (of the same shard) ending by
    /// byte `offset` was confirmed by the region's replicas.
    Confirmed {
        /// The segment.
        seq: u64,
        /// Where its confirmed part ends.
        offset: u64,
    },
    /// FLUSHALL: every lattice committed before this timestamp is deleted
    /// (a range tombstone, so replay in any order gives the same result).
    Flush(Ts),
    /// FLUSHDB of one database: its lattices committed before the
    /// timestamp are deleted (see [`crate::db`]).
    FlushDb(u8, Ts),
}

/// Marks a flush frame where a payload's entry count would be.
const FLUSH_MARK: u32 = u32::MAX;
/// Marks a confirmation frame (see [`Logged::Confirmed`]).
const CONFIRMED_MARK: u32 = u32::MAX - 1;
/// Marks a one-database flush frame (see [`Logged::FlushDb`]).
const FLUSH_DB_MARK: u32 = u32::MAX - 2;
/// Set in an entry count: an own frame (see [`Logged::Own`]). Counts stay
/// far below it (a frame is at most [`MAX_FRAME`] bytes).
pub const OWN: u32 = 1 << 30;
/// Set in an entry count: lattices another region sent (see
/// [`Logged::Remote`]).
pub const REMOTE: u32 = 1 << 29;
/// Set in an entry count: parked parts (see [`Logged::Parked`]).
pub const PARKED: u32 = 1 << 28;
const KINDS: u32 = OWN | REMOTE | PARKED;

/// Which kind of frame a lattice is logged in.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Frame {
    /// Installed here: from a peer of this region, or recovered.
    #[default]
    Plain,
    /// A commit of this node's, shipped to its region's other replicas.
    Own,
    /// Sent by another region and installed as it came. A transaction
    /// record among them is another region's: replay hands it to the
    /// installer rather than putting its writes in (issue 42: a restart
    /// showed such a transaction before an older one it built on).
    Remote,
    /// A part of another region's transaction, parked
    /// (`shard/parts.rs`): replay parks it again (issue 42: parts lost in
    /// a restart left the transactions after them free to show first).
    Parked,
}

impl Frame {
    fn bits(self) -> u32 {
        match self {
            Frame::Plain => 0,
            Frame::Own => OWN,
            Frame::Remote => REMOTE,
            Frame::Parked => PARKED,
        }
    }
}

/// Closes a frame of `count` lattices of kind `kind` (see [`open_frame`]).
pub fn close_frame_of(out: &mut [u8], at: usize, count: u32, kind: Frame) {
    close_frame(out, at, count | kind.bits());
}

/// Appends a confirmation frame (see [`Logged::Confirmed`]) to `out`.
pub fn encode_confirmed(out: &mut Vec<u8>, seq: u64, offset: u64) {
    let mut body = [0u8; 16];
    body[..8].copy_from_slice(&seq.to_le_bytes());
    body[8..].copy_from_slice(&offset.to_le_bytes());
    encode_frame(out, CONFIRMED_MARK, &body);
}

/// Appends a flush frame (see [`Logged::Flush`], [`Logged::FlushDb`]) to
/// `out`: every database (None) or one.
pub fn encode_flush(out: &mut Vec<u8>, db: Option<u8>, floor: Ts) {
    match db {
        None => encode_frame(out, FLUSH_MARK, &floor.to_le_bytes()),
        Some(db) => {
            let mut body = [0u8; 9];
            body[..8].copy_from_slice(&floor.to_le_bytes());
            body[8] = db;
            encode_frame(out, FLUSH_DB_MARK, &body);
        }
    }
}

/// Bytes of a frame before its entries: magic, length, checksum, count.
pub const FRAME_HEAD: usize = HEADER + 4;

/// Opens a frame at the end of `out`: its head is written by
/// [`close_frame`] once the entries encoded after it are known, so
/// entries are encoded once, in place (a big value is not copied twice).
pub fn open_frame(out: &mut Vec<u8>) -> usize {
    let at = out.len();
    out.extend_from_slice(&[0; FRAME_HEAD]);
    at
}

/// Closes the frame opened at `at` in `out`, holding `count` entries.
pub fn close_frame(out: &mut [u8], at: usize, count: u32) {
    let len = (out.len() - at - HEADER) as u32;
    out[at + HEADER..at + FRAME_HEAD].copy_from_slice(&count.to_le_bytes());
    let mut crc = crc32fast::Hasher::new();
    crc.update(&len.to_le_bytes());
    crc.update(&out[at + HEADER..]);
    let crc = crc.finalize();
    out[at..at + 4].copy_from_slice(&MAGIC.to_le_bytes());
    out[at + 4..at + 8].copy_from_slice(&len.to_le_bytes());
    out[at + 8..at + 12].copy_from_slice(&crc.to_le_bytes());
}

/// Wraps `count` encoded entries into a frame appended to `out`.
pub fn encode_frame(out: &mut Vec<u8>, count: u32, entries: &[u8]) {
    let len = (4 + entries.len()) as u32;
    let mut crc = crc32fast::Hasher::new();
    crc.update(&len.to_le_bytes());
    crc.update(&count.to_le_bytes());
    crc.update(entries);
    out.put_u32_le(MAGIC);
    out.put_u32_le(len);
    out.put_u32_le(crc.finalize());
    out.put_u32_le(count);
    out.extend_from_slice(entries);
}

/// How a file ended.
#[derive(Debug, PartialEq, Eq)]
pub enum Tail {
    /// Every byte belonged to a valid frame.
    Clean,
    /// The last frame was incomplete or damaged (a write cut short by a
    /// crash); valid data ends at `valid_len`.
    Torn {
        /// Bytes of valid frames.
        valid_len: usize,
    },
}

/// A damaged frame with valid-looking data after it: not a torn write, so
/// recovery stops rather than guess.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
#[error("corrupt record at byte {offset}: {why}")]
pub struct Corrupt {
    /// Where the bad frame starts.
    pub offset: usize,
    /// What was wrong.
    pub why: String,
}

/// The payload of the frame at the start of `rest`, if it is whole and
/// its checksum matches.
fn valid_frame(rest: &[u8]) -> Option<&[u8]> {
    if rest.len() < HEADER {
        return None;
    }
    let word = |i: usize| u32::from_le_bytes([rest[i], rest[i + 1], rest[i + 2], rest[i + 3]]);
    let (magic, len, crc) = (word(0), word(4) as usize, word(8));
    if magic != MAGIC || len == 0 || len > MAX_FRAME || rest.len() < HEADER + len {
        return None;
    }
    let payload = &rest[HEADER..HEADER + len];
    let mut h = crc32fast::Hasher::new();
    h.update(&rest[4..8]);
    h.update(payload);
    (h.finalize() == crc).then_some(payload)
}

/// True when a valid frame starts anywhere in `rest` (checked only where the
/// magic number appears, so scanning garbage is cheap).
fn valid_frame_follows(rest: &[u8]) -> bool {
    let magic = MAGIC.to_le_bytes();
    (1..rest.len().saturating_sub(3))
        .any(|i| rest[i..i + 4] == magic && valid_frame(&rest[i..]).is_some())
}

/// Decodes every frame of a file, calling `each` per record (a batch of
/// entries applied together, or a flush). A damaged end — no valid frame after the
/// damage, as a write cut short by a crash leaves it — is reported as
/// [`Tail::Torn`] and never passed to `each`; damage with valid frames
/// after it is [`Corrupt`].
pub fn decode_file(data: &[u8], mut each: impl FnMut(Logged)) -> Result<Tail, Corrupt> {
    decode_file_at(data, |_, logged| each(logged))
}

/// [`decode_file`], telling `each` where in the file each frame ends.
pub fn decode_file_at(data: &[u8], mut each: impl FnMut(u64, Logged)) -> Result<Tail, Corrupt> {
    let mut pos = 0;
    while pos < data.len() {
        let rest = &data[pos..];
        let Some(payload) = valid_frame(rest) else {
            if valid_frame_follows(rest) {
                return Err(Corrupt {
                    offset: pos,
                    why: "damaged record followed by valid ones".into(),
                });
            }
            return Ok(Tail::Torn { valid_len: pos });
        };
        let entries = decode_payload(payload).map_err(|why| Corrupt { offset: pos, why })?;
        pos += HEADER + payload.len();
        each(pos as u64, entries);
    }
    Ok(Tail::Clean)
}

/// Encodes `entries` as a record's payload (count, then entries) — the
/// form a transaction record keeps its writes in.
pub fn encode_lattices(out: &mut Vec<u8>, entries: &[LogEntry]) {
    out.put_u32_le(entries.len() as u32);
    for e in entries {
        encode_entry(
            out,
            EntryRef::of(&e.key, &e.state, e.start_ts, e.version).with_unit(e.unit),
        );
    }
}

/// Decodes what [`encode_lattices`] wrote.
pub fn decode_lattices(p: &[u8]) -> Result<Vec<LogEntry>, String> {
    match decode_payload(p)? {
        Logged::Lattices(l) => Ok(l),
        _ => Err("not a record of lattices".into()),
    }
}

fn decode_payload(mut p: &[u8]) -> Result<Logged, String> {
    let need = |p: &[u8], n: usize| {
        if p.remaining() < n {
            Err("record shorter than its contents".to_string())
        } else {
            Ok(())
        }
    };
    need(p, 4)?;
    let count = p.get_u32_le();
    if count == FLUSH_MARK {
        need(p, 8)?;
        let floor = p.get_u64_le();
        if p.has_remaining() {
            return Err("trailing bytes in flush record".into());
        }
        return Ok(Logged::Flush(floor));
    }
    if count == FLUSH_DB_MARK {
        need(p, 9)?;
        let floor = p.get_u64_le();
        let db = p.get_u8();
        if p.has_remaining() {
            return Err("trailing bytes in flush record".into());
        }
        return Ok(Logged::FlushDb(db, floor));
    }
    if count == CONFIRMED_MARK {
        need(p, 16)?;
        let (seq, offset) = (p.get_u64_le(), p.get_u64_le());
        if p.has_remaining() {
            return Err("trailing bytes in confirmation record".into());
        }
        return Ok(Logged::Confirmed { seq, offset });
    }
    let kind = count & KINDS;
    if kind.count_ones() > 1 {
        return Err(format!("unknown record kind {kind:#x}"));
    }
    let count = (count & !KINDS) as usize;
    // Each entry takes at least 29 bytes: bounds the allocation by the data.
    let mut out = Vec::with_capacity(count.min(p.len() / 29 + 1));
    for _ in 0..count {
        need(p, 4)?;
        let klen = p.get_u32_le() as usize;
        need(p, klen + 1)?;
        let key = Bytes::copy_from_slice(&p[..klen]);
        p.advance(klen);
        let flags = p.get_u8();
        let unit = (flags & UNIT_MASK) >> UNIT_SHIFT;
        let flags = flags & !UNIT_MASK;
        if flags & !(TOMBSTONE | HAS_TTL | TYPED | TTL_OF) != 0
            || (flags & TYPED != 0 && flags != TYPED)
            || (flags & TTL_OF != 0 && flags & TOMBSTONE != 0)
            || unit > 2
        {
            return Err(format!(
                "unknown entry flags {flags:#x} (written by a newer Elsa?)"
            ));
        }
        let expire_ms = if flags & HAS_TTL != 0 {
            need(p, 8)?;
            Some(p.get_u64_le())
        } else {
            None
        };
        let ttl_of = if flags & TTL_OF != 0 {
            need(p, 12)?;
            let ts = p.get_u64_le();
            Some(Version::new(ts, p.get_u32_le()))
        } else {
            None
        };
        let state = if flags & TYPED != 0 {
            need(p, 4)?;
            let slen = p.get_u32_le() as usize;
            need(p, slen)?;
            let s = KeyState::from_bytes(Bytes::copy_from_slice(&p[..slen]))
                .ok_or("a typed state that does not decode")?;
            p.advance(slen);
            EntryState::Typed(Arc::new(s))
        } else if flags & TOMBSTONE != 0 {
            EntryState::Plain(None)
        } else {
            need(p, 4)?;
            let vlen = p.get_u32_le() as usize;
            need(p, vlen)?;
            let value = Bytes::copy_from_slice(&p[..vlen]);
            p.advance(vlen);
            EntryState::Plain(Some(Current {
                value,
                expire_ms,
                ttl_of,
            }))
        };
        need(p, 20)?;
        let start_ts = p.get_u64_le();
        let commit_ts = p.get_u64_le();
        let origin = p.get_u32_le();
        out.push(LogEntry {
            key,
            state,
            start_ts,
            version: Version::new(commit_ts, origin),
            unit: crate::record::Unit::from_code(u32::from(unit)),
        });
    }
    if p.has_remaining() {
        return Err("trailing bytes in record".into());
    }
    Ok(match kind {
        OWN => Logged::Own(out),
        REMOTE => Logged::Remote(out),
        PARKED => Logged::Parked(out),
        _ => Logged::Lattices(out),
    })
}

#[cfg(test)]
#[path = "codec_tests.rs"]
mod tests;

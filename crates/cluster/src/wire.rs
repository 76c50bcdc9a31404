//! The peer protocol: protobuf messages (prost, derived in code, so no
//! `protoc` is needed to build) in length-prefixed frames over long-lived
//! TCP connections.
//!
//! One [`Frame`] carries one of: a hello, a shard's gossip for one peer
//! shard, an anti-entropy step, a forwarded shard request and its answer,
//! or a flush's floors (among others: see [`Body`]).

use bytes::{Buf, BufMut, Bytes, BytesMut};
use prost::Message;

/// Largest frame accepted (anti-entropy batches stay well below it); a
/// bigger length prefix is a protocol error, never an allocation.
pub const MAX_FRAME: usize = 64 << 20;

/// A key's lattice on the wire.
#[derive(Clone, PartialEq, Message)]
pub struct Lattice {
    #[prost(bytes = "bytes", tag = "1")]
    pub key: Bytes,
    /// Absent for a tombstone.
    #[prost(bytes = "bytes", optional, tag = "2")]
    pub value: Option<Bytes>,
    #[prost(uint64, optional, tag = "3")]
    pub expire_ms: Option<u64>,
    #[prost(uint64, tag = "4")]
    pub start_ts: u64,
    #[prost(uint64, tag = "5")]
    pub commit_ts: u64,
    #[prost(uint32, tag = "6")]
    pub origin: u32,
    /// Which kind of commit wrote it (`elsa_shard::Unit::code`): another
    /// region shows a part of a transaction of several keys only with the
    /// rest.
    #[prost(uint32, tag = "7")]
    pub unit: u32,
    /// A typed state (`elsa_lattice::KeyState::encode`), in place of
    /// `value`: a delta, or a whole state, to merge.
    #[prost(bytes = "bytes", optional, tag = "8")]
    pub typed: Option<Bytes>,
    /// A change of the TTL alone: the write of the value it changed
    /// (`elsa_shard::Current::ttl_of`), commit time and origin.
    #[prost(uint64, optional, tag = "9")]
    pub ttl_of_ts: Option<u64>,
    #[prost(uint32, optional, tag = "10")]
    pub ttl_of_origin: Option<u32>,
}

/// A typed state's bytes on the wire.
pub fn typed_bytes(s: &elsa_lattice::KeyState) -> Bytes {
    Bytes::from(s.to_bytes())
}

/// A typed state from the wire. One that does not decode (a damaged or
/// forged frame) is logged and taken as empty: merging it changes nothing,
/// rather than a half-read state changing something wrongly.
pub fn typed_from(b: Bytes) -> std::sync::Arc<elsa_lattice::KeyState> {
    let s = elsa_lattice::KeyState::from_bytes(b).unwrap_or_else(|| {
        tracing::warn!("a typed state from a peer did not decode; ignored");
        elsa_lattice::KeyState::default()
    });
    std::sync::Arc::new(s)
}

/// First frame on a connection: who is calling.
#[derive(Clone, PartialEq, Message)]
pub struct Hello {
    #[prost(uint32, tag = "1")]
    pub node: u32,
    #[prost(string, tag = "2")]
    pub region: String,
    /// With a cluster secret: this side's random challenge (32 bytes).
    #[prost(bytes = "bytes", tag = "3")]
    pub nonce: Bytes,
    /// With a cluster secret: this side's proof that it knows the secret,
    /// bound to the TLS session (`peer_auth`); empty in the caller's first
    /// Hello, which has not seen the callee's nonce yet.
    #[prost(bytes = "bytes", tag = "4")]
    pub proof: Bytes,
}

/// One merge epoch's lattices from a shard, for one shard of the receiver.
#[derive(Clone, PartialEq, Message)]
pub struct Gossip {
    #[prost(uint32, tag = "1")]
    pub to_shard: u32,
    #[prost(uint32, tag = "2")]
    pub from_shard: u32,
    /// The sender's HLC when it flushed: every commit of `from_shard`
    /// before it is in this or an earlier frame (unless one was dropped).
    #[prost(uint64, tag = "3")]
    pub flushed_ts: u64,
    #[prost(message, repeated, tag = "4")]
    pub lattices: Vec<Lattice>,
    /// Unused (always false; the sender tracks lost frames itself, see
    /// `service::Stream`).
    #[prost(bool, tag = "5")]
    pub after_gap: bool,
    /// To another region: the frame's place in the stream of
    /// `from_shard` to the receiver (1, 2, …; 0: not sequenced), which the
    /// receiver merges in order (`service::streams`).
    #[prost(uint64, tag = "6")]
    pub seq: u64,
    /// The sender's start (its HLC then): a new one starts a new stream.
    #[prost(uint64, tag = "7")]
    pub boot: u64,
    /// The oldest frame of the stream the sender still holds (every one
    /// before it was acknowledged, or given up: a gap).
    #[prost(uint64, tag = "8")]
    pub first: u64,
    /// The sender's own commits from before it started (recovery's tail,
    /// the first frame of a new stream), sent again: some arrived long
    /// ago, so the receiver merges none committed before its collection
    /// floor (`Shard::op_merge_resent`).
    #[prost(bool, tag = "9")]
    pub resent: bool,
}

/// The receiver merged a gossip frame durably.
#[derive(Clone, PartialEq, Message)]
pub struct GossipAck {
    #[prost(uint32, tag = "1")]
    pub from_shard: u32,
    #[prost(uint64, tag = "2")]
    pub flushed_ts: u64,
    #[prost(bool, tag = "3")]
    pub after_gap: bool,
    /// The frame's `seq` and `boot` (see [`Gossip::seq`]).
    #[prost(uint64, tag = "4")]
    pub seq: u64,
    #[prost(uint64, tag = "5")]
    pub boot: u64,
}

/// Anti-entropy step 1: XOR digests of 256-bucket groups, over the buckets
/// both nodes replicate.
#[derive(Clone, PartialEq, Message)]
pub struct AeGroups {
    #[prost(uint64, tag = "1")]
    pub round: u64,
    #[prost(uint32, repeated, tag = "2")]
    pub groups: Vec<u32>,
    #[prost(uint64, repeated, tag = "3")]
    pub digests: Vec<u64>,
    /// A takeover round (see `service::takeover`): the nodes the sender
    /// takes slots over from, whose lattices the receiver refuses from
    /// now on until they caught up again.
    #[prost(message, repeated, tag = "4")]
    pub fence: Vec<Fence>,
    /// The sender's flush floors (see [`Floors`]).
    #[prost(message, optional, tag = "5")]
    pub floors: Option<Floors>,
    /// The digest of the sender's function libraries (0: none); see
    /// `service::functions`.
    #[prost(uint64, tag = "6")]
    pub functions: u64,
}

/// A node fenced by a takeover, as the taker last saw it: refused until
/// membership shows it past this generation and ready count.
#[derive(Clone, PartialEq, Message)]
pub struct Fence {
    #[prost(uint32, tag = "1")]
    pub node: u32,
    #[prost(uint64, tag = "2")]
    pub generation: u64,
    #[prost(uint64, tag = "3")]
    pub ready: u64,
}

/// Anti-entropy step 2: the responder's bucket digests inside the groups
/// that differed (empty = in sync).
#[derive(Clone, PartialEq, Message)]
pub struct AeBuckets {
    #[prost(uint64, tag = "1")]
    pub round: u64,
    #[prost(uint32, repeated, tag = "2")]
    pub buckets: Vec<u32>,
    #[prost(uint64, repeated, tag = "3")]
    pub digests: Vec<u64>,
    /// The responder's flush floors (see [`Floors`]).
    #[prost(message, optional, tag = "4")]
    pub floors: Option<Floors>,
    /// The digest of the responder's function libraries (0: none).
    #[prost(uint64, tag = "5")]
    pub functions: u64,
}

/// A node's function libraries, whole (`elsa_lattice::libraries`):
/// sent to every node after FUNCTION LOAD/DELETE/FLUSH/RESTORE, and to a
/// peer whose anti-entropy digest differs.
#[derive(Clone, PartialEq, Message)]
pub struct Functions {
    /// `Libraries::encode`.
    #[prost(bytes = "bytes", tag = "1")]
    pub state: Bytes,
}

/// The FLUSHALL and FLUSHDB floors a node knows (`elsa_shard::db::Floors`):
/// sent to every node when a flush is made, and in every anti-entropy
/// round both ways, so a lost frame or a node that was down is repaired.
/// A receiver keeps the higher of each; absent when nothing was flushed.
#[derive(Clone, PartialEq, Message)]
pub struct Floors {
    /// FLUSHALL's: every database.
    #[prost(uint64, tag = "1")]
    pub all: u64,
    /// Databases flushed alone, and (same order) their floors.
    #[prost(uint32, repeated, tag = "2")]
    pub dbs: Vec<u32>,
    #[prost(uint64, repeated, tag = "3")]
    pub ts: Vec<u64>,
}

impl Floors {
    /// The wire form of `f`, None when nothing was ever flushed.
    pub fn of(f: &elsa_shard::db::Floors) -> Option<Floors> {
        if f.is_empty() {
            return None;
        }
        Some(Floors {
            all: f.all,
            dbs: f.per_db.keys().map(|&db| u32::from(db)).collect(),
            ts: f.per_db.values().copied().collect(),
        })
    }

    /// The floors this names (a database index beyond 255 names none).
    pub fn floors(&self) -> elsa_shard::db::Floors {
        let mut f = elsa_shard::db::Floors::default();
        f.raise(None, self.all);
        for (&db, &ts) in self.dbs.iter().zip(&self.ts) {
            if let Ok(db) = u8::try_from(db) {
                f.raise(Some(db), ts);
            }
        }
        f
    }
}

/// Anti-entropy step 3/4: lattices of differing buckets, and (from the
/// initiator) which buckets it wants the responder's lattices of.
#[derive(Clone, PartialEq, Message)]
pub struct AeEntries {
    #[prost(uint64, tag = "1")]
    pub round: u64,
    #[prost(message, repeated, tag = "2")]
    pub lattices: Vec<Lattice>,
    #[prost(uint32, repeated, tag = "3")]
    pub pull: Vec<u32>,
    /// The sender is catching up: answer its pull with every lattice of
    /// those buckets, young ones too (see `Cluster::ae_compare`).
    #[prost(bool, tag = "4")]
    pub full: bool,
    /// From the initiator: buckets whose young typed lattices the answer
    /// must carry too (a bucket that kept differing while its collection
    /// was written; see `service::proofs`).
    #[prost(uint32, repeated, tag = "5")]
    pub whole: Vec<u32>,
    /// In an answer: the buckets where the responder held a young typed
    /// lattice back (sorted).
    #[prost(uint32, repeated, tag = "6")]
    pub held: Vec<u32>,
    /// In an answer: `held` and `capped` are filled in, and the responder
    /// merged what the initiator shipped (a node older than this field
    /// sends neither, and its answer proves nothing; nor does one that
    /// refused the initiator's lattices, distrusting or fencing it).
    #[prost(bool, tag = "7")]
    pub proof: bool,
    /// In an answer: a shard's batch hit its cap (`held` is incomplete).
    #[prost(bool, tag = "8")]
    pub capped: bool,
    /// In an answer: what the initiator shipped changed nothing here —
    /// this node held it or newer, or had collected it (a tombstone the
    /// initiator kept over a restart). Shipping it proves nothing missing
    /// here, so the pair may count as in sync (`Cluster::ae_finish`); a
    /// node older than this field never says so.
    #[prost(bool, tag = "9")]
    pub dominated: bool,
    /// To a node of another region: the slots (sorted) among `lattices`'
    /// that the sender does not repair for its region — not their
    /// primary, or their primary but not yet past what it owes the
    /// receiver of the slots' old primary (`service::handover`). The
    /// receiver merges those only where they change nothing shown
    /// (`Cluster::by_repairer`); a node older than this field sends none.
    #[prost(uint32, repeated, tag = "10")]
    pub unvouched: Vec<u32>,
}

/// A request forwarded to a shard of the receiver (see `remote`).
#[derive(Clone, PartialEq, Message)]
pub struct Request {
    #[prost(uint64, tag = "1")]
    pub id: u64,
    #[prost(uint32, tag = "2")]
    pub shard: u32,
    /// The caller's HLC, so the callee's clock passes it.
    #[prost(uint64, tag = "3")]
    pub hlc: u64,
    /// The encoded call (see `remote::Call`).
    #[prost(bytes = "bytes", tag = "4")]
    pub call: Bytes,
}

/// The answer to a [`Request`].
#[derive(Clone, PartialEq, Message)]
pub struct Response {
    #[prost(uint64, tag = "1")]
    pub id: u64,
    #[prost(uint64, tag = "2")]
    pub hlc: u64,
    #[prost(bytes = "bytes", tag = "3")]
    pub answer: Bytes,
    /// The request was refused because the answering node is catching up
    /// (maybe restarted since the caller's view of it was made): the
    /// caller routes around it for a while, as membership will soon say.
    #[prost(bool, tag = "4")]
    pub not_serving: bool,
}

/// Ask a node for its replication watermark towards a region.
#[derive(Clone, PartialEq, Message)]
pub struct WatermarkQuery {
    #[prost(uint64, tag = "1")]
    pub id: u64,
    #[prost(string, tag = "2")]
    pub region: String,
}

/// Every commit of the answering node below `ts` has reached the region.
#[derive(Clone, PartialEq, Message)]
pub struct WatermarkReply {
    #[prost(uint64, tag = "1")]
    pub id: u64,
    #[prost(uint64, tag = "2")]
    pub ts: u64,
}

/// From a node that has caught up, to a peer of its region: "I am ready;
/// hand my slots back" (sent again until answered).
#[derive(Clone, PartialEq, Message)]
pub struct HandBackAsk {}

/// The answer, on the answering node's own link (behind its gossip): it
/// routes the asker's slots to the asker, refuses requests for them, and
/// every one of its shards has shipped its gossip since — so the asker has
/// everything it committed for those slots.
#[derive(Clone, PartialEq, Message)]
pub struct HandBack {
    /// Transactions that still held keys of those slots on the sender
    /// when it handed them back anyway (see `Cluster::drain_moved_holds`):
    /// the asker holds those keys for them too before it serves them.
    #[prost(message, repeated, tag = "1")]
    pub holds: Vec<HeldKeys>,
}

/// One transaction's held keys (see [`HandBack`]).
#[derive(Clone, PartialEq, Message)]
pub struct HeldKeys {
    #[prost(uint64, tag = "1")]
    pub txn: u64,
    #[prost(message, repeated, tag = "2")]
    pub holds: Vec<crate::remote::HoldMsg>,
}

/// In-region replication: a batch of lattices a shard's commits
/// installed, for the receiver to merge durably before it answers.
#[derive(Clone, PartialEq, Message)]
pub struct Replicate {
    /// The sender's batch id (echoed in the ack).
    #[prost(uint64, tag = "1")]
    pub id: u64,
    #[prost(message, repeated, tag = "2")]
    pub lattices: Vec<Lattice>,
}

/// The answer to [`Replicate`]: merged durably (`ok`); or not (the log
/// cannot write: sent again later); or refused (`stranger`): the receiver
/// does not count the sender among the region's live members.
#[derive(Clone, PartialEq, Message)]
pub struct ReplicateAck {
    #[prost(uint64, tag = "1")]
    pub id: u64,
    #[prost(bool, tag = "2")]
    pub ok: bool,
    #[prost(bool, tag = "3")]
    pub stranger: bool,
}

/// A PUBLISH (or SPUBLISH) made on the sending node, for its subscribers
/// here (see `service::pubsub`). Fire and forget: never acknowledged.
#[derive(Clone, PartialEq, Message)]
pub struct Publish {
    #[prost(bytes = "bytes", tag = "1")]
    pub channel: Bytes,
    #[prost(bytes = "bytes", tag = "2")]
    pub message: Bytes,
    /// SPUBLISH: for SSUBSCRIBE subscribers (patterns never match).
    #[prost(bool, tag = "3")]
    pub sharded: bool,
}

/// Everything that travels between nodes.
#[derive(Clone, PartialEq, Message)]
pub struct Frame {
    #[prost(
        oneof = "Body",
        tags = "1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17"
    )]
    pub body: Option<Body>,
}

/// The kinds of frame.
#[derive(Clone, PartialEq, prost::Oneof)]
pub enum Body {
    #[prost(message, tag = "1")]
    Hello(Hello),
    #[prost(message, tag = "2")]
    Gossip(Gossip),
    #[prost(message, tag = "3")]
    GossipAck(GossipAck),
    #[prost(message, tag = "4")]
    AeGroups(AeGroups),
    #[prost(message, tag = "5")]
    AeBuckets(AeBuckets),
    #[prost(message, tag = "6")]
    AeEntries(AeEntries),
    #[prost(message, tag = "7")]
    Request(Request),
    #[prost(message, tag = "8")]
    Response(Response),
    #[prost(message, tag = "9")]
    WatermarkQuery(WatermarkQuery),
    #[prost(message, tag = "10")]
    WatermarkReply(WatermarkReply),
    #[prost(message, tag = "11")]
    HandBackAsk(HandBackAsk),
    #[prost(message, tag = "12")]
    HandBack(HandBack),
    #[prost(message, tag = "13")]
    Replicate(Replicate),
    #[prost(message, tag = "14")]
    ReplicateAck(ReplicateAck),
    #[prost(message, tag = "15")]
    Publish(Publish),
    /// A FLUSHALL or FLUSHDB made on the sender (its floors after it).
    #[prost(message, tag = "16")]
    Flush(Floors),
    /// The sender's function libraries, whole.
    #[prost(message, tag = "17")]
    Functions(Functions),
}

impl Frame {
    /// A frame around `body`.
    pub fn new(body: Body) -> Frame {
        Frame { body: Some(body) }
    }

    /// `[u32 length][protobuf]`, appended to `out`.
    pub fn encode_to(&self, out: &mut BytesMut) {
        out.put_u32(self.encoded_len() as u32);
        // Cannot fail: `out` grows as needed.
        let _ = self.encode(out);
    }
}

/// Why a frame could not be read.
#[derive(Debug, thiserror::Error)]
pub enum FrameError {
    #[error("frame of {0} bytes is over the {MAX_FRAME}-byte limit")]
    TooBig(usize),
    #[error("bad frame: {0}")]
    Decode(#[from] prost::DecodeError),
}

/// Takes one whole frame off the front of `buf`, if one is there: the one
/// entry point from peer bytes to a [`Frame`] (the fuzz target calls it).
/// The length prefix is checked against [`MAX_FRAME`] before anything is
/// reserved; prost bounds every inner length by the frame's bytes.
pub fn decode_frame(buf: &mut BytesMut) -> Result<Option<Frame>, FrameError> {
    if buf.len() < 4 {
        return Ok(None);
    }
    let len = u32::from_be_bytes([buf[0], buf[1], buf[2], buf[3]]) as usize;
    if len > MAX_FRAME {
        return Err(FrameError::TooBig(len));
    }
    if buf.len() < 4 + len {
        return Ok(None);
    }
    buf.advance(4);
    let body = buf.split_to(len).freeze();
    Ok(Some(Frame::decode(body)?))
}

impl From<&elsa_shard::wal::codec::LogEntry> for Lattice {
    fn from(e: &elsa_shard::wal::codec::LogEntry) -> Lattice {
        let (value, expire_ms, typed, ttl_of) = match &e.state {
            elsa_shard::wal::codec::EntryState::Plain(c) => (
                c.as_ref().map(|c| c.value.clone()),
                c.as_ref().and_then(|c| c.expire_ms),
                None,
                c.as_ref().and_then(|c| c.ttl_of),
            ),
            elsa_shard::wal::codec::EntryState::Typed(s) => {
                (None, None, Some(typed_bytes(s)), None)
            }
        };
        Lattice {
            key: e.key.clone(),
            value,
            expire_ms,
            start_ts: e.start_ts,
            commit_ts: e.version.commit_ts,
            origin: e.version.origin,
            unit: e.unit.code(),
            typed,
            ttl_of_ts: ttl_of.map(|v| v.commit_ts),
            ttl_of_origin: ttl_of.map(|v| v.origin),
        }
    }
}

impl From<Lattice> for elsa_shard::wal::codec::LogEntry {
    fn from(l: Lattice) -> Self {
        elsa_shard::wal::codec::LogEntry {
            key: l.key,
            state: match l.typed {
                Some(b) => elsa_shard::wal::codec::EntryState::Typed(typed_from(b)),
                None => elsa_shard::wal::codec::EntryState::Plain(l.value.map(|value| {
                    elsa_shard::Current {
                        value,
                        expire_ms: l.expire_ms,
                        ttl_of: l
                            .ttl_of_ts
                            .map(|ts| elsa_lattice::Version::new(ts, l.ttl_of_origin.unwrap_or(0))),
                    }
                })),
            },
            start_ts: l.start_ts,
            version: elsa_lattice::Version::new(l.commit_ts, l.origin),
            unit: elsa_shard::Unit::from_code(l.unit),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_round_trip_and_split_anywhere() {
        let f = Frame::new(Body::Gossip(Gossip {
            to_shard: 1,
            from_shard: 0,
            flushed_ts: 42,
            lattices: vec![Lattice {
                key: Bytes::from("k"),
                value: None,
                expire_ms: None,
                start_ts: 1,
                commit_ts: 2,
                origin: 3,
                unit: 1,
                typed: None,
                ttl_of_ts: None,
                ttl_of_origin: None,
            }],
            after_gap: false,
            seq: 7,
            boot: 8,
            first: 5,
            resent: true,
        }));
        let mut all = BytesMut::new();
        f.encode_to(&mut all);
        f.encode_to(&mut all);
        let bytes = all.freeze();
        for cut in 0..bytes.len() {
            let mut buf = BytesMut::from(&bytes[..cut]);
            let mut got = Vec::new();
            while let Some(x) = decode_frame(&mut buf).unwrap() {
                got.push(x);
            }
            buf.extend_from_slice(&bytes[cut..]);
            while let Some(x) = decode_frame(&mut buf).unwrap() {
                got.push(x);
            }
            assert_eq!(got, vec![f.clone(), f.clone()]);
        }
    }

    #[test]
    fn a_huge_length_is_refused_without_allocating() {
        let mut buf = BytesMut::from(&[0xff, 0xff, 0xff, 0xff, 0][..]);
        assert!(matches!(decode_frame(&mut buf), Err(FrameError::TooBig(_))));
    }
}

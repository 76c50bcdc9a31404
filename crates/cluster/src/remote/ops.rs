//! Ops and their replies on the wire: every [`Op`] a forwarded batch or
//! EXEC may carry, as one flat [`OpMsg`], and every [`OpReply`] as a
//! [`ReplyMsg`]. Texts (errors, TYPE's status) travel as text and are
//! interned back into the static strings the shard knows.

use bytes::Bytes;
use elsa_shard::ops::ExpireCond;
use elsa_shard::shard::{ERR_UNCONFIRMED, ERR_WAL};
use elsa_shard::{BitRange, Expiry, GetExTtl, KeyOp, ObjectField, Op, OpReply, SetCond, SetReply};
use prost::Message;

/// One op. `kind` says which; the other fields carry its arguments (which
/// ones, per kind, in [`op_msg`]). Fields 10 and up came with GETEX and
/// the commands after it; a node that does not know a kind refuses the
/// call rather than guess.
#[derive(Clone, PartialEq, Message)]
pub struct OpMsg {
    #[prost(bytes = "bytes", tag = "1")]
    pub key: Bytes,
    #[prost(uint64, tag = "2")]
    pub hash: u64,
    #[prost(uint32, tag = "3")]
    pub kind: u32,
    #[prost(bytes = "bytes", tag = "4")]
    pub value: Bytes,
    #[prost(int64, tag = "5")]
    pub int: i64,
    #[prost(uint64, tag = "6")]
    pub at: u64,
    #[prost(uint32, tag = "7")]
    pub cond: u32,
    #[prost(uint32, tag = "8")]
    pub expiry: u32,
    #[prost(uint32, tag = "9")]
    pub shape: u32,
    /// The other key an op reaches (RENAME's and COPY's destination).
    #[prost(bytes = "bytes", tag = "10")]
    pub other: Bytes,
    /// A second integer (GETRANGE's and the bit ranges' end).
    #[prost(int64, tag = "11")]
    pub int2: i64,
    /// An argument refusal an op answers only if its key exists.
    #[prost(string, tag = "12")]
    pub refusal: String,
}

#[derive(Clone, PartialEq, Message)]
pub struct ReplyMsg {
    /// 0 nil, 1 ok, 2 int, 3 bulk, 4 status, 5 error, 6 array (`items`),
    /// 7 map, 8 set, 9 pairs (`bulks`, pairs flattened).
    #[prost(uint32, tag = "1")]
    pub kind: u32,
    /// An array's answers.
    #[prost(message, repeated, tag = "5")]
    pub items: Vec<ReplyMsg>,
    /// A map's, set's or pairs' strings, in order.
    #[prost(bytes = "bytes", repeated, tag = "6")]
    pub bulks: Vec<Bytes>,
    #[prost(int64, tag = "2")]
    pub int: i64,
    #[prost(bytes = "bytes", tag = "3")]
    pub bulk: Bytes,
    #[prost(string, tag = "4")]
    pub text: String,
}

/// A bit range in `m`: `shape` 0 all, 1 span with an end, 2 span to the
/// end, 3 refused; `cond` 1 for BIT; start in `int`, end in `int2`.
fn put_range(m: &mut OpMsg, range: BitRange) {
    match range {
        BitRange::All => m.shape = 0,
        BitRange::Span { start, end, bits } => {
            m.shape = if end.is_some() { 1 } else { 2 };
            m.int = start;
            m.int2 = end.unwrap_or(0);
            m.cond = bits as u32;
        }
        BitRange::Refused(e) => {
            m.shape = 3;
            m.refusal = e.to_string();
        }
    }
}

fn get_range(m: &OpMsg) -> Option<BitRange> {
    Some(match m.shape {
        0 => BitRange::All,
        1 | 2 => BitRange::Span {
            start: m.int,
            end: (m.shape == 1).then_some(m.int2),
            bits: m.cond != 0,
        },
        3 => BitRange::Refused(intern(&m.refusal)),
        _ => return None,
    })
}

/// Encodes an op for a remote shard.
pub fn op_msg(k: &KeyOp) -> OpMsg {
    let mut m = OpMsg {
        key: k.key.clone(),
        hash: k.hash,
        ..Default::default()
    };
    match &k.op {
        Op::Get => m.kind = 0,
        Op::Set {
            value,
            cond,
            expiry,
            reply,
        } => {
            m.kind = 1;
            m.value = value.clone();
            m.cond = *cond as u32;
            (m.expiry, m.at) = match expiry {
                Expiry::Clear => (0, 0),
                Expiry::Keep => (1, 0),
                Expiry::At(at) => (2, *at),
            };
            m.shape = *reply as u32;
        }
        Op::GetDel => m.kind = 2,
        Op::Del => m.kind = 3,
        Op::Exists => m.kind = 4,
        Op::IncrBy(n) => (m.kind, m.int) = (5, *n),
        Op::Append(v) => (m.kind, m.value) = (6, v.clone()),
        Op::Strlen => m.kind = 7,
        Op::Type => m.kind = 8,
        Op::Ttl { millis } => (m.kind, m.int) = (9, *millis as i64),
        Op::ExpireAt(at) => (m.kind, m.at) = (10, *at),
        Op::Persist => m.kind = 11,
        Op::ExpireAtIf { at, cond } => (m.kind, m.at, m.cond) = (12, *at, expire_cond_bits(*cond)),
        Op::GetEx(ttl) => {
            m.kind = 13;
            match ttl {
                GetExTtl::Keep => m.expiry = 0,
                GetExTtl::Persist => m.expiry = 1,
                GetExTtl::At(at) => (m.expiry, m.at) = (2, *at),
                GetExTtl::Refused(e) => (m.expiry, m.refusal) = (3, e.to_string()),
            }
        }
        Op::GetRange { start, end } => (m.kind, m.int, m.int2) = (14, *start, *end),
        Op::SetRange { offset, value } => (m.kind, m.at, m.value) = (15, *offset, value.clone()),
        Op::IncrByFloat(by) => (m.kind, m.value) = (16, by.clone()),
        Op::GetBit(offset) => (m.kind, m.at) = (17, *offset),
        Op::SetBit { offset, on } => (m.kind, m.at, m.int) = (18, *offset, *on as i64),
        Op::BitCount(range) => {
            m.kind = 19;
            put_range(&mut m, *range);
        }
        Op::BitPos { bit, range } => {
            m.kind = 20;
            m.at = *bit as u64;
            put_range(&mut m, *range);
        }
        Op::ExpireTime { millis } => (m.kind, m.int) = (21, *millis as i64),
        Op::Rename { to, nx } => (m.kind, m.other, m.cond) = (22, to.clone(), *nx as u32),
        Op::Copy { to, replace } => (m.kind, m.other, m.cond) = (23, to.clone(), *replace as u32),
        Op::Object(field) => {
            m.kind = 24;
            m.cond = match field {
                ObjectField::Encoding => 0,
                ObjectField::Refcount => 1,
                ObjectField::IdleTime => 2,
                ObjectField::Freq => 3,
            };
        }
        Op::MemoryUsage => m.kind = 25,
        // The typed families carry their own compact encoding.
        Op::Hash(h) => (m.kind, m.value) = (26, h.encode()),
        Op::Sets(s) => (m.kind, m.value) = (27, s.encode()),
        Op::ZSets(z) => (m.kind, m.value) = (28, z.encode()),
        Op::Lists(l) => (m.kind, m.value) = (29, l.encode()),
        Op::BitField(b) => (m.kind, m.value) = (30, b.encode()),
        Op::BitOp(b) => (m.kind, m.value) = (31, b.encode()),
        Op::Lcs(l) => (m.kind, m.value) = (32, l.encode()),
        Op::Pf(p) => (m.kind, m.value) = (33, p.encode()),
        Op::Touch => m.kind = 34,
        Op::Streams(x) => (m.kind, m.value) = (36, x.encode()),
        Op::SetAccess(to) => {
            m.kind = 35;
            (m.cond, m.at) = match to {
                elsa_shard::evict::Restored::Idle(s) => (0, *s),
                elsa_shard::evict::Restored::Freq(f) => (1, u64::from(*f)),
            };
        }
    }
    m
}

/// EXPIRE's options in `OpMsg::cond`: bit 0 NX, 1 XX, 2 GT, 3 LT.
fn expire_cond_bits(c: ExpireCond) -> u32 {
    c.nx as u32 | (c.xx as u32) << 1 | (c.gt as u32) << 2 | (c.lt as u32) << 3
}

fn expire_cond(bits: u32) -> Option<ExpireCond> {
    (bits < 16).then_some(ExpireCond {
        nx: bits & 1 != 0,
        xx: bits & 2 != 0,
        gt: bits & 4 != 0,
        lt: bits & 8 != 0,
    })
}

/// Decodes an op; `None` for a kind or an argument this node does not know.
pub fn key_op(m: OpMsg) -> Option<KeyOp> {
    let op = match m.kind {
        0 => Op::Get,
        1 => Op::Set {
            value: m.value,
            cond: match m.cond {
                0 => SetCond::Always,
                1 => SetCond::IfAbsent,
                2 => SetCond::IfPresent,
                _ => return None,
            },
            expiry: match m.expiry {
                0 => Expiry::Clear,
                1 => Expiry::Keep,
                2 => Expiry::At(m.at),
                _ => return None,
            },
            reply: match m.shape {
                0 => SetReply::Ok,
                1 => SetReply::Old,
                2 => SetReply::Flag,
                _ => return None,
            },
        },
        2 => Op::GetDel,
        3 => Op::Del,
        4 => Op::Exists,
        5 => Op::IncrBy(m.int),
        6 => Op::Append(m.value),
        7 => Op::Strlen,
        8 => Op::Type,
        9 => Op::Ttl { millis: m.int != 0 },
        10 => Op::ExpireAt(m.at),
        11 => Op::Persist,
        12 => Op::ExpireAtIf {
            at: m.at,
            cond: expire_cond(m.cond)?,
        },
        13 => Op::GetEx(match m.expiry {
            0 => GetExTtl::Keep,
            1 => GetExTtl::Persist,
            2 => GetExTtl::At(m.at),
            3 => GetExTtl::Refused(intern(&m.refusal)),
            _ => return None,
        }),
        14 => Op::GetRange {
            start: m.int,
            end: m.int2,
        },
        15 => Op::SetRange {
            offset: m.at,
            value: m.value,
        },
        16 => Op::IncrByFloat(m.value),
        17 => Op::GetBit(m.at),
        18 => Op::SetBit {
            offset: m.at,
            on: m.int != 0,
        },
        19 => Op::BitCount(get_range(&m)?),
        20 => Op::BitPos {
            bit: m.at != 0,
            range: get_range(&m)?,
        },
        21 => Op::ExpireTime { millis: m.int != 0 },
        22 => Op::Rename {
            to: m.other,
            nx: m.cond != 0,
        },
        23 => Op::Copy {
            to: m.other,
            replace: m.cond != 0,
        },
        24 => Op::Object(match m.cond {
            0 => ObjectField::Encoding,
            1 => ObjectField::Refcount,
            2 => ObjectField::IdleTime,
            3 => ObjectField::Freq,
            _ => return None,
        }),
        25 => Op::MemoryUsage,
        26 => Op::Hash(elsa_shard::ops::hashes::HashOp::decode(m.value)?),
        27 => Op::Sets(elsa_shard::ops::sets::SetOp::decode(m.value)?),
        28 => Op::ZSets(elsa_shard::ops::zsets::ZSetOp::decode(m.value)?),
        29 => Op::Lists(elsa_shard::ops::lists::ListOp::decode(m.value)?),
        30 => Op::BitField(elsa_shard::ops::bitfield::BitField::decode(m.value)?),
        31 => Op::BitOp(elsa_shard::ops::bits::BitOp::decode(m.value)?),
        32 => Op::Lcs(elsa_shard::ops::lcs::Lcs::decode(m.value)?),
        33 => Op::Pf(elsa_shard::ops::pf::Pf::decode(m.value)?),
        34 => Op::Touch,
        36 => Op::Streams(elsa_shard::ops::streams::StreamOp::decode(m.value)?),
        35 => Op::SetAccess(match m.cond {
            0 => elsa_shard::evict::Restored::Idle(m.at),
            1 => elsa_shard::evict::Restored::Freq(u8::try_from(m.at).ok()?),
            _ => return None,
        }),
        _ => return None,
    };
    Some(KeyOp {
        key: m.key,
        hash: m.hash,
        op,
    })
}

/// The shard's static copy of a reply text that crossed the wire.
fn intern(text: &str) -> &'static str {
    elsa_shard::ops::intern(text)
        .or_else(|| [ERR_WAL, ERR_UNCONFIRMED].into_iter().find(|k| *k == text))
        .unwrap_or("ERR the remote shard answered an error this node does not know")
}

/// Encodes a reply for the calling node.
pub fn reply_msg(r: &OpReply) -> ReplyMsg {
    let mut m = ReplyMsg::default();
    match r {
        OpReply::Nil => m.kind = 0,
        OpReply::Ok => m.kind = 1,
        OpReply::Int(n) => (m.kind, m.int) = (2, *n),
        OpReply::Bulk(b) => (m.kind, m.bulk) = (3, b.clone()),
        OpReply::Status(s) => (m.kind, m.text) = (4, s.to_string()),
        OpReply::Error(s) => (m.kind, m.text) = (5, s.to_string()),
        OpReply::Array(items) => (m.kind, m.items) = (6, items.iter().map(reply_msg).collect()),
        OpReply::Map(pairs) => (m.kind, m.bulks) = (7, flatten(&pairs.to_vec())),
        OpReply::Set(members) => (m.kind, m.bulks) = (8, members.clone()),
        OpReply::Pairs(pairs) => (m.kind, m.bulks) = (9, flatten(pairs)),
        // A score as its bits (an integer): exact, NaN-free by then.
        OpReply::Double(d) => (m.kind, m.int) = (10, d.to_bits() as i64),
        OpReply::NilArray => m.kind = 12,
        OpReply::Coord(d) => (m.kind, m.int) = (14, d.to_bits() as i64),
        OpReply::ErrorText(s) => (m.kind, m.text) = (15, s.clone()),
        OpReply::Fields(fields) => {
            m.kind = 13;
            m.bulks = fields
                .iter()
                .map(|(k, _)| Bytes::from_static(k.as_bytes()))
                .collect();
            m.items = fields.iter().map(|(_, v)| reply_msg(v)).collect();
        }
        OpReply::Keyed(items) => {
            m.kind = 16;
            m.bulks = items.iter().map(|(k, _)| k.clone()).collect();
            m.items = items.iter().map(|(_, v)| reply_msg(v)).collect();
        }
        OpReply::Scored(pairs) => {
            m.kind = 11;
            m.bulks = pairs.iter().map(|(b, _)| b.clone()).collect();
            m.items = pairs
                .iter()
                .map(|(_, s)| reply_msg(&OpReply::Double(*s)))
                .collect();
        }
    }
    m
}

fn flatten(pairs: &[(Bytes, Bytes)]) -> Vec<Bytes> {
    pairs
        .iter()
        .flat_map(|(k, v)| [k.clone(), v.clone()])
        .collect()
}

fn pairs(bulks: Vec<Bytes>) -> Vec<(Bytes, Bytes)> {
    let mut it = bulks.into_iter();
    let mut out = Vec::with_capacity(it.len() / 2);
    while let (Some(k), Some(v)) = (it.next(), it.next()) {
        out.push((k, v));
    }
    out
}

/// Decodes a reply from a remote shard.
pub fn reply(m: ReplyMsg) -> OpReply {
    match m.kind {
        0 => OpReply::Nil,
        1 => OpReply::Ok,
        2 => OpReply::Int(m.int),
        3 => OpReply::Bulk(m.bulk),
        4 => OpReply::Status(intern(&m.text)),
        6 => OpReply::Array(m.items.into_iter().map(reply).collect()),
        7 => OpReply::Map(pairs(m.bulks).into_iter().collect()),
        8 => OpReply::Set(m.bulks),
        9 => OpReply::Pairs(pairs(m.bulks)),
        10 => OpReply::Double(f64::from_bits(m.int as u64)),
        12 => OpReply::NilArray,
        14 => OpReply::Coord(f64::from_bits(m.int as u64)),
        15 => OpReply::ErrorText(m.text),
        13 => OpReply::Fields(
            m.bulks
                .iter()
                .map(|k| intern(&String::from_utf8_lossy(k)))
                .zip(m.items.into_iter().map(reply))
                .collect(),
        ),
        16 => OpReply::Keyed(
            m.bulks
                .into_iter()
                .zip(m.items.into_iter().map(reply))
                .collect(),
        ),
        11 => OpReply::Scored(
            m.bulks
                .into_iter()
                .zip(m.items)
                .map(|(b, s)| (b, f64::from_bits(s.int as u64)))
                .collect(),
        ),
        _ => OpReply::Error(intern(&m.text)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use elsa_shard::ops::bitfield::{self, BitField};
    use elsa_shard::ops::ERR_SYNTAX;

    fn round_trip(op: Op) {
        let k = KeyOp {
            key: Bytes::from_static(b"k"),
            hash: 7,
            op,
        };
        let m = op_msg(&k);
        // Through the bytes, as a peer gets it.
        let m = OpMsg::decode(m.encode_to_vec().as_slice()).expect("decodes");
        let back = key_op(m).expect("known kind");
        assert_eq!(back.op, k.op);
        assert_eq!((back.key, back.hash), (k.key, k.hash));
    }

    #[test]
    fn expire_options_survive_the_wire() {
        for bits in 0..16 {
            let cond = expire_cond(bits).expect("valid bits");
            round_trip(Op::ExpireAtIf { at: 1_234, cond });
        }
        let plain = op_msg(&KeyOp {
            key: Bytes::from_static(b"k"),
            hash: 7,
            op: Op::ExpireAt(5),
        });
        assert_eq!(plain.kind, 10, "plain EXPIRE keeps its kind");
        assert!(expire_cond(16).is_none());
    }

    #[test]
    fn every_op_survives_the_wire() {
        let b = |s: &'static str| Bytes::from_static(s.as_bytes());
        let ranges = [
            BitRange::All,
            BitRange::Span {
                start: -3,
                end: Some(i64::MAX),
                bits: true,
            },
            BitRange::Span {
                start: i64::MIN,
                end: None,
                bits: false,
            },
            BitRange::Refused(ERR_SYNTAX),
        ];
        let mut ops = vec![
            Op::Get,
            Op::GetDel,
            Op::Del,
            Op::Exists,
            Op::Touch,
            Op::SetAccess(elsa_shard::evict::Restored::Idle(1000)),
            Op::SetAccess(elsa_shard::evict::Restored::Freq(100)),
            Op::IncrBy(-9),
            Op::Append(b("x")),
            Op::Strlen,
            Op::Type,
            Op::Ttl { millis: true },
            Op::ExpireAt(5),
            Op::Persist,
            Op::GetEx(GetExTtl::Keep),
            Op::GetEx(GetExTtl::Persist),
            Op::GetEx(GetExTtl::At(77)),
            Op::GetEx(GetExTtl::Refused(elsa_shard::ops::ERR_GETEX_EXPIRE)),
            Op::GetRange {
                start: i64::MIN,
                end: -1,
            },
            Op::SetRange {
                offset: 10,
                value: b("abc"),
            },
            Op::IncrByFloat(b("1.5")),
            Op::GetBit(4_294_967_295),
            Op::SetBit {
                offset: 3,
                on: true,
            },
            Op::ExpireTime { millis: false },
            Op::ExpireTime { millis: true },
            Op::Rename {
                to: b("dst"),
                nx: true,
            },
            Op::Copy {
                to: b("dst"),
                replace: true,
            },
            Op::MemoryUsage,
            Op::Hash(elsa_shard::ops::hashes::HashOp::IncrBy(b("f"), -3)),
            Op::Hash(elsa_shard::ops::hashes::HashOp::MGet(vec![b("a"), b("b")])),
            Op::BitField(BitField(vec![bitfield::Field {
                action: bitfield::Action::IncrBy(-7),
                signed: true,
                bits: 12,
                offset: 99,
                overflow: bitfield::Overflow::Sat,
            }])),
            Op::BitOp(elsa_shard::ops::bits::BitOp {
                how: elsa_shard::ops::bits::BitOpKind::Xor,
                keys: vec![b("src2"), b("dest")],
            }),
            Op::Lcs(elsa_shard::ops::lcs::Lcs {
                other: [b("k2")],
                len: false,
                idx: true,
                with_match_len: true,
                min_match_len: 2,
                refused: Some(ERR_SYNTAX),
            }),
            Op::Pf(elsa_shard::ops::pf::Pf::Merge(vec![b("s1"), b("s2")])),
            Op::Pf(elsa_shard::ops::pf::Pf::Debug(
                elsa_shard::ops::pf::Debug::ToDense,
            )),
        ];
        for r in ranges {
            ops.push(Op::BitCount(r));
            ops.push(Op::BitPos {
                bit: true,
                range: r,
            });
        }
        for f in [
            ObjectField::Encoding,
            ObjectField::Refcount,
            ObjectField::IdleTime,
            ObjectField::Freq,
        ] {
            ops.push(Op::Object(f));
        }
        for op in ops {
            round_trip(op);
        }
    }

    #[test]
    fn every_reply_text_survives_the_wire() {
        for t in elsa_shard::ops::REPLY_TEXTS {
            assert_eq!(reply(reply_msg(&OpReply::Error(t))), OpReply::Error(t));
        }
    }

    #[test]
    fn collection_replies_survive_the_wire() {
        let b = |s: &str| Bytes::copy_from_slice(s.as_bytes());
        for r in [
            OpReply::Map(
                [("f", "v"), ("", "empty field"), ("g", "")]
                    .into_iter()
                    .collect(),
            ),
            OpReply::Map(elsa_lattice::FieldValues::default()),
            OpReply::Pairs(vec![(b("a"), b("1")), (b("b"), b("2"))]),
            OpReply::Set(vec![b("x"), b("")]),
            OpReply::Scored(vec![(b("m"), 1.5), (b("n"), -0.0)]),
            OpReply::Fields(vec![
                ("matches", OpReply::Array(vec![OpReply::Int(3)])),
                ("len", OpReply::Int(6)),
            ]),
            OpReply::Array(vec![OpReply::Nil, OpReply::Int(3), OpReply::Bulk(b("z"))]),
        ] {
            let m = ReplyMsg::decode(reply_msg(&r).encode_to_vec().as_slice()).expect("decodes");
            assert_eq!(reply(m), r);
        }
    }
}

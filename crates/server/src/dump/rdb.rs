//! Redis 7.0's DUMP payload (`rdb.c`, `cluster.c`): one RDB object — its
//! type byte and its body — then the RDB version (10, two bytes, little
//! end first) and a CRC64 (Jones, reflected; the `crc` crate's
//! `CRC_64_REDIS`) of everything before it, eight bytes little end first.
//!
//! Read: every object encoding Redis 7.0 writes or still loads for the
//! five types — strings raw, as integers or LZF-compressed (the `lzf`
//! crate); lists as quicklists of listpacks (plain nodes too) or of
//! ziplists, or plain; sets plain or as intsets (or listpacks); sorted
//! sets plain (binary or text scores), as listpacks or ziplists; hashes
//! plain, as listpacks or ziplists; streams (Redis 5–7's, `rdb_stream.rs`).
//! Written: the plain forms (a list of strings, a set, a sorted set with
//! binary scores, a hash), which every Redis since 4.0 restores, and a
//! stream as Redis 7.0 writes one.
//!
//! Hand-written: the format is Redis's own and small; no maintained
//! crate reads RDB object bodies (only whole files, with their own
//! value model).

use bytes::Bytes;
use elsa_shard::ops::streams::listpack::backlen_size;

/// The RDB version this payload format is (Redis 7.0's).
pub const RDB_VERSION: u16 = 10;

const T_STRING: u8 = 0;
const T_LIST: u8 = 1;
const T_SET: u8 = 2;
const T_ZSET: u8 = 3;
const T_HASH: u8 = 4;
const T_ZSET_2: u8 = 5;
const T_LIST_ZIPLIST: u8 = 10;
const T_SET_INTSET: u8 = 11;
const T_ZSET_ZIPLIST: u8 = 12;
const T_HASH_ZIPLIST: u8 = 13;
const T_LIST_QUICKLIST: u8 = 14;
const T_HASH_LISTPACK: u8 = 16;
const T_ZSET_LISTPACK: u8 = 17;
const T_LIST_QUICKLIST_2: u8 = 18;
const T_SET_LISTPACK: u8 = 20;

#[path = "rdb_stream.rs"]
mod stream;

const CRC: crc::Crc<u64> = crc::Crc::<u64>::new(&crc::CRC_64_REDIS);

/// A value as a payload carries it.
#[derive(Clone, Debug, PartialEq)]
pub enum Value {
    Str(Bytes),
    List(Vec<Bytes>),
    Set(Vec<Bytes>),
    ZSet(Vec<(Bytes, f64)>),
    Hash(Vec<(Bytes, Bytes)>),
    Stream(Box<elsa_lattice::stream::Parts>),
}

/// Why a payload was refused, as RESTORE words it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refused {
    /// "DUMP payload version or checksum are wrong".
    VersionOrChecksum,
    /// "Bad data format".
    BadFormat,
}

/// The payload DUMP answers for `v`.
pub fn dump(v: &Value) -> Vec<u8> {
    let mut out = Vec::new();
    match v {
        Value::Str(s) => {
            out.push(T_STRING);
            put_string(&mut out, s);
        }
        Value::List(items) => {
            out.push(T_LIST);
            put_len(&mut out, items.len() as u64);
            for i in items {
                put_string(&mut out, i);
            }
        }
        Value::Set(members) => {
            out.push(T_SET);
            put_len(&mut out, members.len() as u64);
            for m in members {
                put_string(&mut out, m);
            }
        }
        Value::ZSet(pairs) => {
            out.push(T_ZSET_2);
            put_len(&mut out, pairs.len() as u64);
            for (m, score) in pairs {
                put_string(&mut out, m);
                out.extend_from_slice(&score.to_le_bytes());
            }
        }
        Value::Hash(pairs) => {
            out.push(T_HASH);
            put_len(&mut out, pairs.len() as u64);
            for (f, v) in pairs {
                put_string(&mut out, f);
                put_string(&mut out, v);
            }
        }
        Value::Stream(parts) => {
            out.push(stream::T_STREAM_2);
            stream::put(&mut out, parts);
        }
    }
    with_footer(out)
}

/// `body` (a type byte and an object) as a payload: the RDB version and
/// the CRC64 after it.
pub fn with_footer(mut body: Vec<u8>) -> Vec<u8> {
    body.extend_from_slice(&RDB_VERSION.to_le_bytes());
    let crc = CRC.checksum(&body);
    body.extend_from_slice(&crc.to_le_bytes());
    body
}

/// Checks the footer of `payload` (`verifyDumpPayload`).
pub fn verify(payload: &[u8]) -> Result<(), Refused> {
    if payload.len() < 10 {
        return Err(Refused::VersionOrChecksum);
    }
    let footer = &payload[payload.len() - 10..];
    let version = u16::from_le_bytes([footer[0], footer[1]]);
    if version > RDB_VERSION {
        return Err(Refused::VersionOrChecksum);
    }
    let crc = u64::from_le_bytes(footer[2..].try_into().expect("8 bytes"));
    if CRC.checksum(&payload[..payload.len() - 8]) != crc {
        return Err(Refused::VersionOrChecksum);
    }
    Ok(())
}

/// The value in a verified `payload`.
pub fn restore(payload: &[u8]) -> Result<Value, Refused> {
    verify(payload)?;
    let body = &payload[..payload.len() - 10];
    let mut r = Reader { buf: body, at: 0 };
    let v = r.object().ok_or(Refused::BadFormat)?;
    let empty = match &v {
        Value::Str(_) => false,
        Value::List(x) | Value::Set(x) => x.is_empty(),
        Value::ZSet(x) => x.is_empty(),
        Value::Hash(x) => x.is_empty(),
        // A stream all of whose entries were deleted is still a stream.
        Value::Stream(_) => false,
    };
    if empty {
        return Err(Refused::BadFormat);
    }
    Ok(v)
}

/// RDB's opcodes for a function library: its code (Redis 7.0), and the
/// form of 7.0's release candidates (name, engine, description, code).
const OP_FUNCTION2: u8 = 245;
const OP_FUNCTION_RC: u8 = 246;

/// FUNCTION DUMP's payload: each library's code after its opcode, then
/// the footer (`functionDumpCommand`).
pub fn dump_functions<'a>(codes: impl Iterator<Item = &'a [u8]>) -> Vec<u8> {
    let mut out = Vec::new();
    for code in codes {
        out.push(OP_FUNCTION2);
        put_string(&mut out, code);
    }
    out.extend_from_slice(&RDB_VERSION.to_le_bytes());
    let crc = CRC.checksum(&out);
    out.extend_from_slice(&crc.to_le_bytes());
    out
}

/// The libraries' codes in a FUNCTION RESTORE payload, or its error reply
/// (`functionRestoreCommand`, `rdbFunctionLoad`).
pub fn restore_functions(payload: &[u8]) -> Result<Vec<Bytes>, String> {
    verify(payload).map_err(|_| "ERR DUMP payload version or checksum are wrong".to_string())?;
    let body = &payload[..payload.len() - 10];
    let mut r = Reader { buf: body, at: 0 };
    let mut codes = Vec::new();
    while r.at < body.len() {
        let code = match r.byte() {
            Some(OP_FUNCTION2) => r.string().ok_or("ERR Failed loading library payload")?,
            Some(OP_FUNCTION_RC) => {
                let name = r.string().ok_or("ERR Failed loading library name")?;
                let engine = r.string().ok_or("ERR Failed loading engine name")?;
                let has_desc = r
                    .len()
                    .ok_or("ERR Failed loading library description indicator")?;
                if has_desc != 0 {
                    r.string().ok_or("ERR Failed loading library description")?;
                }
                let blob = r.string().ok_or("ERR Failed loading library blob")?;
                let mut code = format!(
                    "#!{} name={}\n",
                    String::from_utf8_lossy(&engine),
                    String::from_utf8_lossy(&name)
                )
                .into_bytes();
                code.extend_from_slice(&blob);
                Bytes::from(code)
            }
            Some(_) => return Err("ERR given type is not a function".into()),
            None => return Err("ERR can not read data type".into()),
        };
        codes.push(code);
    }
    Ok(codes)
}

fn put_len(out: &mut Vec<u8>, n: u64) {
    if n < 1 << 6 {
        out.push(n as u8);
    } else if n < 1 << 14 {
        out.push(0x40 | (n >> 8) as u8);
        out.push(n as u8);
    } else if n <= u64::from(u32::MAX) {
        out.push(0x80);
        out.extend_from_slice(&(n as u32).to_be_bytes());
    } else {
        out.push(0x81);
        out.extend_from_slice(&n.to_be_bytes());
    }
}

fn put_string(out: &mut Vec<u8>, s: &[u8]) {
    put_len(out, s.len() as u64);
    out.extend_from_slice(s);
}

/// A length, or a string's special encoding (`rdbLoadLenByRef`).
enum Len {
    Plain(u64),
    Encoded(u8),
}

struct Reader<'a> {
    buf: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    fn bytes(&mut self, n: usize) -> Option<&'a [u8]> {
        let end = self.at.checked_add(n)?;
        let b = self.buf.get(self.at..end)?;
        self.at = end;
        Some(b)
    }

    fn byte(&mut self) -> Option<u8> {
        Some(self.bytes(1)?[0])
    }

    fn len_or_enc(&mut self) -> Option<Len> {
        let b = self.byte()?;
        Some(match b >> 6 {
            0 => Len::Plain(u64::from(b & 0x3f)),
            1 => Len::Plain(u64::from(b & 0x3f) << 8 | u64::from(self.byte()?)),
            2 => match b {
                0x80 => Len::Plain(u64::from(u32::from_be_bytes(
                    self.bytes(4)?.try_into().ok()?,
                ))),
                0x81 => Len::Plain(u64::from_be_bytes(self.bytes(8)?.try_into().ok()?)),
                _ => return None,
            },
            _ => Len::Encoded(b & 0x3f),
        })
    }

    fn len(&mut self) -> Option<usize> {
        match self.len_or_enc()? {
            Len::Plain(n) => usize::try_from(n).ok(),
            Len::Encoded(_) => None,
        }
    }

    /// A string (`rdbGenericLoadStringObject`).
    fn string(&mut self) -> Option<Bytes> {
        match self.len_or_enc()? {
            Len::Plain(n) => Some(Bytes::copy_from_slice(
                self.bytes(usize::try_from(n).ok()?)?,
            )),
            Len::Encoded(0) => Some(int_text(i64::from(self.byte()? as i8))),
            Len::Encoded(1) => Some(int_text(i64::from(i16::from_le_bytes(
                self.bytes(2)?.try_into().ok()?,
            )))),
            Len::Encoded(2) => Some(int_text(i64::from(i32::from_le_bytes(
                self.bytes(4)?.try_into().ok()?,
            )))),
            Len::Encoded(3) => {
                let clen = self.len()?;
                let len = self.len()?;
                let packed = self.bytes(clen)?;
                let out = lzf::decompress(packed, len).ok()?;
                (out.len() == len).then(|| Bytes::from(out))
            }
            Len::Encoded(_) => None,
        }
    }

    /// A sorted set's text score (`rdbLoadDoubleValue`).
    fn text_double(&mut self) -> Option<f64> {
        match self.byte()? {
            253 => Some(f64::NAN),
            254 => Some(f64::INFINITY),
            255 => Some(f64::NEG_INFINITY),
            n => std::str::from_utf8(self.bytes(usize::from(n))?)
                .ok()?
                .parse()
                .ok(),
        }
    }

    fn object(&mut self) -> Option<Value> {
        let ty = self.byte()?;
        let v = match ty {
            T_STRING => Value::Str(self.string()?),
            T_LIST => Value::List(self.strings()?),
            T_SET => Value::Set(self.strings()?),
            T_ZSET | T_ZSET_2 => {
                let n = self.len()?;
                let mut pairs = Vec::with_capacity(n.min(4096));
                for _ in 0..n {
                    let m = self.string()?;
                    let score = if ty == T_ZSET_2 {
                        f64::from_le_bytes(self.bytes(8)?.try_into().ok()?)
                    } else {
                        self.text_double()?
                    };
                    if score.is_nan() {
                        return None;
                    }
                    pairs.push((m, score));
                }
                Value::ZSet(pairs)
            }
            T_HASH => {
                let n = self.len()?;
                let mut pairs = Vec::with_capacity(n.min(4096));
                for _ in 0..n {
                    pairs.push((self.string()?, self.string()?));
                }
                Value::Hash(pairs)
            }
            T_SET_INTSET => Value::Set(intset(&self.string()?)?),
            T_SET_LISTPACK => Value::Set(listpack(&self.string()?)?),
            T_LIST_ZIPLIST => Value::List(ziplist(&self.string()?)?),
            T_LIST_QUICKLIST | T_LIST_QUICKLIST_2 => {
                let nodes = self.len()?;
                let mut items = Vec::new();
                for _ in 0..nodes {
                    let container = if ty == T_LIST_QUICKLIST_2 {
                        self.len()?
                    } else {
                        2
                    };
                    let blob = self.string()?;
                    match (ty, container) {
                        (T_LIST_QUICKLIST_2, 1) => items.push(blob),
                        (T_LIST_QUICKLIST_2, 2) => items.extend(listpack(&blob)?),
                        (T_LIST_QUICKLIST, _) => items.extend(ziplist(&blob)?),
                        _ => return None,
                    }
                }
                Value::List(items)
            }
            T_HASH_LISTPACK | T_HASH_ZIPLIST => {
                let blob = self.string()?;
                let flat = if ty == T_HASH_LISTPACK {
                    listpack(&blob)?
                } else {
                    ziplist(&blob)?
                };
                Value::Hash(pairs(flat)?)
            }
            T_ZSET_LISTPACK | T_ZSET_ZIPLIST => {
                let blob = self.string()?;
                let flat = if ty == T_ZSET_LISTPACK {
                    listpack(&blob)?
                } else {
                    ziplist(&blob)?
                };
                let mut out = Vec::with_capacity(flat.len() / 2);
                for (m, s) in pairs(flat)? {
                    let score = elsa_shard::ops::zparse::parse_double(&s)?;
                    if score.is_nan() {
                        return None;
                    }
                    out.push((m, score));
                }
                Value::ZSet(out)
            }
            stream::T_STREAM | stream::T_STREAM_2 => {
                Value::Stream(Box::new(stream::read(self, ty)?))
            }
            _ => return None,
        };
        // Nothing may follow the object.
        (self.at == self.buf.len()).then_some(v)
    }

    fn strings(&mut self) -> Option<Vec<Bytes>> {
        let n = self.len()?;
        let mut out = Vec::with_capacity(n.min(4096));
        for _ in 0..n {
            out.push(self.string()?);
        }
        Some(out)
    }
}

fn int_text(n: i64) -> Bytes {
    Bytes::from(n.to_string())
}

/// Alternating entries as pairs; None for an odd count.
fn pairs(flat: Vec<Bytes>) -> Option<Vec<(Bytes, Bytes)>> {
    if !flat.len().is_multiple_of(2) {
        return None;
    }
    let mut it = flat.into_iter();
    let mut out = Vec::new();
    while let (Some(a), Some(b)) = (it.next(), it.next()) {
        out.push((a, b));
    }
    Some(out)
}

/// An intset's members as text (`intset.h`: encoding, length, integers,
/// all little end first).
fn intset(blob: &[u8]) -> Option<Vec<Bytes>> {
    let enc = u32::from_le_bytes(blob.get(0..4)?.try_into().ok()?) as usize;
    let n = u32::from_le_bytes(blob.get(4..8)?.try_into().ok()?) as usize;
    if ![2, 4, 8].contains(&enc) || blob.len() != 8 + enc.checked_mul(n)? {
        return None;
    }
    Some(
        blob[8..]
            .chunks(enc)
            .map(|c| {
                let v = match enc {
                    2 => i64::from(i16::from_le_bytes([c[0], c[1]])),
                    4 => i64::from(i32::from_le_bytes([c[0], c[1], c[2], c[3]])),
                    _ => i64::from_le_bytes(c.try_into().expect("8 bytes")),
                };
                int_text(v)
            })
            .collect(),
    )
}

/// A listpack's entries as text (`listpack.c`): total bytes and count,
/// then each entry's encoding and data followed by its back-length, then
/// 0xFF.
fn listpack(lp: &[u8]) -> Option<Vec<Bytes>> {
    let total = u32::from_le_bytes(lp.get(0..4)?.try_into().ok()?) as usize;
    if total != lp.len() || total < 7 || lp[total - 1] != 0xff {
        return None;
    }
    let mut p = 6;
    let mut out = Vec::new();
    while p < total - 1 {
        let b = lp[p];
        let (entry, len) = if b & 0x80 == 0 {
            (int_text(i64::from(b & 0x7f)), 1)
        } else if b & 0xc0 == 0x80 {
            let n = usize::from(b & 0x3f);
            (Bytes::copy_from_slice(lp.get(p + 1..p + 1 + n)?), 1 + n)
        } else if b & 0xe0 == 0xc0 {
            let u = (i64::from(b & 0x1f) << 8) | i64::from(*lp.get(p + 1)?);
            let v = if u >= 1 << 12 { u - (1 << 13) } else { u };
            (int_text(v), 2)
        } else if b & 0xf0 == 0xe0 {
            let n = (usize::from(b & 0x0f) << 8) | usize::from(*lp.get(p + 1)?);
            (Bytes::copy_from_slice(lp.get(p + 2..p + 2 + n)?), 2 + n)
        } else {
            match b {
                0xf0 => {
                    let n = u32::from_le_bytes(lp.get(p + 1..p + 5)?.try_into().ok()?) as usize;
                    (Bytes::copy_from_slice(lp.get(p + 5..p + 5 + n)?), 5 + n)
                }
                0xf1 => (
                    int_text(i64::from(i16::from_le_bytes(
                        lp.get(p + 1..p + 3)?.try_into().ok()?,
                    ))),
                    3,
                ),
                0xf2 => {
                    let d = lp.get(p + 1..p + 4)?;
                    let v = i32::from_le_bytes([0, d[0], d[1], d[2]]) >> 8;
                    (int_text(i64::from(v)), 4)
                }
                0xf3 => (
                    int_text(i64::from(i32::from_le_bytes(
                        lp.get(p + 1..p + 5)?.try_into().ok()?,
                    ))),
                    5,
                ),
                0xf4 => (
                    int_text(i64::from_le_bytes(lp.get(p + 1..p + 9)?.try_into().ok()?)),
                    9,
                ),
                _ => return None,
            }
        };
        p = p.checked_add(len + backlen_size(len))?;
        out.push(entry);
    }
    (p == total - 1).then_some(out)
}

/// A ziplist's entries as text (`ziplist.c`): total bytes, tail offset
/// and count, then each entry's previous length, encoding and data, then
/// 0xFF.
fn ziplist(zl: &[u8]) -> Option<Vec<Bytes>> {
    let total = u32::from_le_bytes(zl.get(0..4)?.try_into().ok()?) as usize;
    if total != zl.len() || total < 11 || zl[total - 1] != 0xff {
        return None;
    }
    let mut p = 10;
    let mut out = Vec::new();
    while p < total - 1 {
        p += if zl[p] < 254 { 1 } else { 5 };
        let b = *zl.get(p)?;
        let (entry, len) = match b >> 6 {
            0 => {
                let n = usize::from(b & 0x3f);
                (Bytes::copy_from_slice(zl.get(p + 1..p + 1 + n)?), 1 + n)
            }
            1 => {
                let n = (usize::from(b & 0x3f) << 8) | usize::from(*zl.get(p + 1)?);
                (Bytes::copy_from_slice(zl.get(p + 2..p + 2 + n)?), 2 + n)
            }
            2 => {
                let n = u32::from_be_bytes(zl.get(p + 1..p + 5)?.try_into().ok()?) as usize;
                (Bytes::copy_from_slice(zl.get(p + 5..p + 5 + n)?), 5 + n)
            }
            _ => match b {
                0xc0 => (
                    int_text(i64::from(i16::from_le_bytes(
                        zl.get(p + 1..p + 3)?.try_into().ok()?,
                    ))),
                    3,
                ),
                0xd0 => (
                    int_text(i64::from(i32::from_le_bytes(
                        zl.get(p + 1..p + 5)?.try_into().ok()?,
                    ))),
                    5,
                ),
                0xe0 => (
                    int_text(i64::from_le_bytes(zl.get(p + 1..p + 9)?.try_into().ok()?)),
                    9,
                ),
                0xf0 => {
                    let d = zl.get(p + 1..p + 4)?;
                    let v = i32::from_le_bytes([0, d[0], d[1], d[2]]) >> 8;
                    (int_text(i64::from(v)), 4)
                }
                0xfe => (int_text(i64::from(*zl.get(p + 1)? as i8)), 2),
                0xf1..=0xfd => (int_text(i64::from(b & 0x0f) - 1), 1),
                _ => return None,
            },
        };
        p = p.checked_add(len)?;
        out.push(entry);
    }
    (p == total - 1).then_some(out)
}

#[cfg(test)]
#[path = "rdb_tests.rs"]
mod tests;

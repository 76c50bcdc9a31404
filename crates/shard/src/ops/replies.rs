//! The error and status texts ops answer with, Redis 7.0's words, and
//! their static copies (a reply decoded from the wire or the log names one
//! of these rather than allocating).

use super::{geo, hashes, lcs, lists, pf, zparse, WRONGTYPE};

/// Error text Redis uses for non-integer values and overflow.
pub const ERR_NOT_INTEGER: &str = "ERR value is not an integer or out of range";
/// Error text for overflowing INCR.
pub const ERR_OVERFLOW: &str = "ERR increment or decrement would overflow";
/// Error text for values past [`MAX_STRING`].
pub const ERR_TOO_BIG: &str = "ERR string exceeds maximum allowed size (proto-max-bulk-len)";
/// INCRBYFLOAT on (or by) something that is not a number.
pub const ERR_NOT_FLOAT: &str = "ERR value is not a valid float";
/// INCRBYFLOAT whose result is infinite.
pub const ERR_NAN: &str = "ERR increment would produce NaN or Infinity";
/// Redis's generic refusal of an argument.
pub const ERR_SYNTAX: &str = "ERR syntax error";
/// RENAME of a missing key.
pub const ERR_NO_SUCH_KEY: &str = "ERR no such key";
/// GETEX's refused time (Redis names the command).
pub const ERR_GETEX_EXPIRE: &str = "ERR invalid expire time in 'getex' command";
/// OBJECT FREQ without an LFU eviction policy (Elsa has none).
pub const ERR_LFU_NO_IDLE: &str = "ERR An LFU maxmemory policy is selected, idle time not tracked. Please note that when switching between policies at runtime LRU and LFU data will take some time to adjust.";

/// OBJECT FREQ's error when the policy is not LFU (Redis's text).
pub const ERR_NO_LFU: &str = "ERR An LFU maxmemory policy is not selected, access frequency not tracked. Please note that when switching between policies at runtime LRU and LFU data will take some time to adjust.";

/// Every error and status text an op can answer. Replies cross the wire
/// between nodes as text and come back as `&'static str` through
/// [`intern`], so a text missing here would reach the client garbled.
pub const REPLY_TEXTS: &[&str] = &[
    lcs::ERR_NOT_STRINGS,
    lcs::ERR_LEN_AND_IDX,
    lcs::ERR_TABLE,
    ERR_NOT_INTEGER,
    ERR_OVERFLOW,
    ERR_TOO_BIG,
    ERR_NOT_FLOAT,
    ERR_NAN,
    ERR_SYNTAX,
    ERR_NO_SUCH_KEY,
    ERR_GETEX_EXPIRE,
    ERR_NO_LFU,
    ERR_LFU_NO_IDLE,
    WRONGTYPE,
    hashes::ERR_HASH_NOT_INTEGER,
    hashes::ERR_HASH_NOT_FLOAT,
    zparse::ERR_NOT_FLOAT,
    zparse::ERR_SCORE_NAN,
    zparse::ERR_WEIGHT,
    zparse::ERR_LIMIT_NEGATIVE,
    geo::ERR_DECODE_MEMBER,
    lists::ERR_INDEX,
    lists::ERR_TIMEOUT_NEGATIVE,
    pf::ERR_NO_KEY,
    pf::ERR_NOT_SPARSE,
    "WRONGTYPE Key is not a valid HyperLogLog string value.",
    "INVALIDOBJ Corrupted HLL object detected",
    "dense",
    "sparse",
    "matches",
    "len",
    "zset",
    "list",
    "string",
    "none",
    "hash",
    "set",
];

/// [`REPLY_TEXTS`] and the stream commands' texts.
fn all_texts() -> impl Iterator<Item = &'static str> {
    REPLY_TEXTS.iter().chain(super::streams::TEXTS).copied()
}

/// The static copy of a reply text an op can answer, if `text` is one.
pub fn intern(text: &str) -> Option<&'static str> {
    all_texts().find(|t| *t == text)
}

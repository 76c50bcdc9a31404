//! Transaction records: how a multi-shard commit's decision survives the
//! loss of any one node, and how a transaction left half-way by a lost
//! coordinator or participant is finished the way it was decided.
//!
//! A commit that spans shards writes, after every participant has taken
//! its holds, one *record* under a key of its own ([`record_key`]): either
//! `committed` with every write of the transaction, or `aborted`. The
//! record is written only if it does not exist yet (set-if-absent) at
//! acknowledgement level `region`, so exactly one outcome is ever recorded,
//! and the record survives any one node's loss like any acknowledged write.
//! It expires after [`RECORD_TTL`].
//!
//! A shard that holds keys for a transaction whose coordinator is gone
//! (holds older than a few seconds: the coordinator died, or this shard
//! took over a dead participant's keys, whose holds it shadowed) asks the
//! record: `committed` — install its part from the record, then release;
//! `aborted` — release; absent — write `aborted` (set-if-absent; if the
//! coordinator got there first, read again and install). See
//! `docs/transactions.md`.
//!
//! Records also make a multi-shard commit recover all-or-nothing: replay
//! installs a committed record's writes (`restore_writes`), whichever
//! shards' logs had their own parts.

use bytes::{Bytes, BytesMut};
use elsa_shard::wal::codec::{decode_lattices, encode_lattices, LogEntry};
use elsa_shard::TxnId;

/// Every transaction record's key starts with this; keys a client names
/// never should (KEYS, SCAN, DBSIZE and RANDOMKEY do not show them).
pub const RECORD_PREFIX: &[u8] = b"\xffELSA:txn:";

/// How long a record is kept: far longer than any resolution takes.
pub const RECORD_TTL_MS: u64 = 10 * 60 * 1000;

/// The key of transaction `txn`'s record.
pub fn record_key(txn: TxnId) -> Bytes {
    let mut k = BytesMut::with_capacity(RECORD_PREFIX.len() + 8);
    k.extend_from_slice(RECORD_PREFIX);
    k.extend_from_slice(&txn.to_be_bytes());
    k.freeze()
}

/// True for a transaction record's key.
pub fn is_record_key(key: &[u8]) -> bool {
    key.starts_with(RECORD_PREFIX)
}

/// How a transaction ended, as its record says.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Committed: every write, each with its timestamps and version.
    Committed(Vec<LogEntry>),
    /// Aborted: nothing may be installed.
    Aborted,
}

const COMMITTED: u8 = b'C';
const ABORTED: u8 = b'A';

impl Outcome {
    /// The record's value.
    pub fn encode(&self) -> Bytes {
        match self {
            Outcome::Aborted => Bytes::from_static(&[ABORTED]),
            Outcome::Committed(writes) => {
                let mut out = vec![COMMITTED];
                encode_lattices(&mut out, writes);
                out.into()
            }
        }
    }

    /// Reads a record's value.
    pub fn decode(value: &[u8]) -> Result<Outcome, String> {
        match value.split_first() {
            Some((&ABORTED, [])) => Ok(Outcome::Aborted),
            Some((&COMMITTED, rest)) => decode_lattices(rest).map(Outcome::Committed),
            _ => Err("not a transaction record".into()),
        }
    }
}

/// The writes a replayed record puts back: a committed record's writes
/// (merged like any lattice, so replaying them again changes nothing).
pub fn restore_writes(key: &[u8], value: Option<&[u8]>) -> Vec<LogEntry> {
    if !is_record_key(key) {
        return Vec::new();
    }
    match value.map(Outcome::decode) {
        Some(Ok(Outcome::Committed(writes))) => writes,
        _ => Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use elsa_lattice::Version;
    use elsa_shard::Current;

    #[test]
    fn records_round_trip() {
        let w = LogEntry {
            key: Bytes::from_static(b"k"),
            state: elsa_shard::wal::codec::EntryState::Plain(Some(Current {
                value: Bytes::from_static(b"v"),
                expire_ms: Some(9),
                ttl_of: None,
            })),
            start_ts: 3,
            version: Version::new(4, 5),
            unit: Default::default(),
        };
        let c = Outcome::Committed(vec![w.clone()]);
        assert_eq!(Outcome::decode(&c.encode()), Ok(c.clone()));
        assert_eq!(
            Outcome::decode(&Outcome::Aborted.encode()),
            Ok(Outcome::Aborted)
        );
        assert!(Outcome::decode(b"").is_err());
        let key = record_key(42);
        assert!(is_record_key(&key));
        assert_eq!(restore_writes(&key, Some(&c.encode())), vec![w]);
        assert!(restore_writes(b"user key", Some(&c.encode())).is_empty());
    }
}

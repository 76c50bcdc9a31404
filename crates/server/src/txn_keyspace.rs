//! Whole-key-space reads inside a transaction: KEYS, SCAN, DBSIZE and
//! RANDOMKEY in a script, in an EXEC run as one transaction, or between
//! BEGIN and COMMIT.
//!
//! They answer from the shards (the latest committed keys, as outside a
//! transaction) with the transaction's own writes laid over that answer: a
//! key it created is listed and counted, a key it deleted is not — as a
//! Redis script sees its own writes (`EXISTS`, `KEYS`, `DBSIZE` agree). They
//! are validated at commit (RR, SI): a key of the database another client
//! creates or deletes on this node meanwhile makes the transaction lose, as
//! a key read by name that changed does (`Txn::read_keyset`; the shards'
//! side is `elsa_shard`'s `shard/keyset.rs`; docs/transactions.md,
//! "Whole-key-space reads"). Outside a transaction nothing here applies.

use std::collections::HashSet;

use bytes::Bytes;
use elsa_shard::table::{segment_of, SEGMENTS};
use elsa_shard::HashedKey;
use elsa_txn::TxnError;

use crate::conn::Conn;

/// One key the open transaction wrote in the selected database.
pub(crate) struct Own {
    /// As the client names it.
    key: Bytes,
    /// As stored (with its database).
    stored: Bytes,
    hash: u64,
    /// The type it shows in the transaction (`"none"`: deleted).
    kind: &'static str,
}

impl Own {
    fn live(&self) -> bool {
        self.kind != "none"
    }
}

/// Where a key falls in SCAN's cursor space: its shard, then its segment
/// (`Conn::scan`).
pub(crate) fn scan_place(hash: u64, shards: usize) -> u64 {
    (elsa_txn::router::shard_of(hash, shards) * SEGMENTS + segment_of(hash)) as u64
}

/// Lays a transaction's own writes over a list of keys (KEYS, or one SCAN
/// page): drops every key it wrote, then adds those it shows live that
/// match `pattern` and `kind` and whose place the list covers (`covers`,
/// given the key's hash).
pub(crate) fn overlay(
    own: &[Own],
    keys: &mut Vec<Bytes>,
    pattern: Option<&[u8]>,
    kind: Option<&[u8]>,
    covers: impl Fn(u64) -> bool,
) {
    if own.is_empty() {
        return;
    }
    let written: HashSet<&[u8]> = own.iter().map(|o| &o.key[..]).collect();
    keys.retain(|k| !written.contains(&k[..]));
    keys.extend(
        own.iter()
            .filter(|o| o.live() && covers(o.hash))
            .filter(|o| pattern.is_none_or(|p| elsa_shard::glob::matches(p, &o.key)))
            .filter(|o| kind.is_none_or(|k| o.kind.as_bytes() == k))
            .map(|o| o.key.clone()),
    );
}

impl Conn {
    /// A whole-key-space read of database `db`: inside a transaction,
    /// noted for validation at commit, and the keys the transaction wrote
    /// in `db` (what the read lays over the shards' answer); nothing
    /// outside one.
    pub(crate) fn read_keyset(&self, db: u8) -> Vec<Own> {
        let Some(txn) = &self.s.txn else {
            return Vec::new();
        };
        txn.read_keyset(db);
        txn.written(elsa_shard::unix_ms())
            .filter_map(|(stored, hash, kind)| {
                let (d, key) = elsa_shard::db::decode(stored);
                (d == db).then(|| Own {
                    key: Bytes::copy_from_slice(key),
                    stored: stored.clone(),
                    hash,
                    kind,
                })
            })
            .collect()
    }

    /// How DBSIZE inside a transaction differs from the shards' count: per
    /// key it wrote, +1 if it shows the key and the shards do not, -1 the
    /// other way round. One read per key written.
    pub(crate) async fn own_dbsize_delta(&self, own: &[Own]) -> Result<i64, TxnError> {
        let now = elsa_shard::unix_ms();
        let mut delta = 0;
        for o in own {
            let key = HashedKey {
                key: o.stored.clone(),
                hash: o.hash,
            };
            let rs = elsa_txn::txn::read(&self.coord, key, self.s.ack, None).await?;
            let there = rs.current.is_some()
                || rs
                    .typed
                    .as_ref()
                    .is_some_and(|s| s.kind(now) != elsa_lattice::Kind::None);
            delta += i64::from(o.live()) - i64::from(there);
        }
        Ok(delta)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn own(key: &str, hash: u64, kind: &'static str) -> Own {
        Own {
            key: Bytes::copy_from_slice(key.as_bytes()),
            stored: Bytes::copy_from_slice(key.as_bytes()),
            hash,
            kind,
        }
    }

    #[test]
    fn overlay_drops_what_it_wrote_and_adds_what_it_shows() {
        let own = [
            own("new", 1, "string"),
            own("gone", 2, "none"),
            own("s", 3, "set"),
        ];
        let mut keys = vec![Bytes::from("old"), Bytes::from("gone"), Bytes::from("s")];
        overlay(&own, &mut keys, None, None, |_| true);
        assert_eq!(keys, ["old", "new", "s"]);
        // Pattern, type, and only the places the page covers.
        let mut keys = vec![Bytes::from("old")];
        overlay(&own, &mut keys, Some(b"*e*"), None, |_| true);
        assert_eq!(keys, ["old", "new"]);
        let mut keys = Vec::new();
        overlay(&own, &mut keys, None, Some(b"set"), |_| true);
        assert_eq!(keys, ["s"]);
        let mut keys = Vec::new();
        overlay(&own, &mut keys, None, None, |h| h == 3);
        assert_eq!(keys, ["s"]);
    }
}

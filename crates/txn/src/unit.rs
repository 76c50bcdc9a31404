//! Other regions' transactions, installed in this region each as one
//! (issue 12, item 13: atomic visibility across regions;
//! `docs/regions.md`).
//!
//! The replication service finds, among the lattices other regions
//! gossip, the transactions of several keys this node must install (from a
//! transaction record, or a one-shard commit's gossip frame), and the
//! shards keep those parts out of sight meanwhile. Installing is the
//! second half of a multi-shard commit without the decision — the writes
//! were decided in their region: hold every key at its primary here (no
//! validation: nothing here can refuse a remote commit, last commit wins),
//! then install the lattices under the holds with their *original*
//! versions (a key a newer commit already changed here keeps the newer
//! state), which releases the holds. A reader here therefore sees all of
//! such a transaction or none of it.
//!
//! Transactions waiting at once are installed together, under one set of
//! holds: each key takes the newest of their lattices, which is the state
//! after all of them, so each is still seen whole or not at all — and a
//! writer committing faster than holds can be taken one by one (hundreds
//! of commits a second on the same keys) does not turn into a queue of
//! installs fighting for the same holds. Busy (a local commit holds a
//! key) releases everything and retries after a backoff; if it keeps
//! failing, the parked parts are shown alone after `elsa_shard::PART_WAIT`.

use std::collections::HashMap;

use bytes::Bytes;
use elsa_shard::wal::codec::LogEntry;
use elsa_shard::{AckLevel, HoldMode, PrepareRequest, Refusal, ShardMsg};

use crate::atomic::HoldGuard;
use crate::router::{Coordinator, Retry, ShardId};
use crate::TxnError;

/// Several transactions' lattices as one batch: per key, the newest.
pub fn newest_per_key(units: Vec<Vec<LogEntry>>) -> Vec<LogEntry> {
    let mut newest: HashMap<Bytes, LogEntry> = HashMap::new();
    for e in units.into_iter().flatten() {
        match newest.get(&e.key) {
            Some(have) if have.version >= e.version => {}
            _ => {
                newest.insert(e.key.clone(), e);
            }
        }
    }
    newest.into_values().collect()
}

impl Coordinator {
    /// Installs `entries` (other regions' committed lattices, one per key)
    /// all at once in this region.
    pub async fn install_unit(&self, entries: Vec<LogEntry>) -> Result<(), TxnError> {
        if entries.is_empty() {
            return Ok(());
        }
        if let Some(newest) = entries.iter().map(|e| e.version.commit_ts).max() {
            // Later local commits order after it.
            self.node.hlc.observe(newest);
        }
        let mut retry = Retry::new();
        loop {
            // Planned again on every attempt: Busy may mean a primary moved.
            let mut per_shard: HashMap<ShardId, Vec<LogEntry>> = HashMap::new();
            for e in &entries {
                per_shard
                    .entry(self.shard_of(self.hash(&e.key)))
                    .or_default()
                    .push(e.clone());
            }
            // A fresh id per attempt: a late release of the last attempt
            // must not free this one's holds.
            let txn = self.node.next_txn();
            let mut guard = HoldGuard::new(self, txn);
            let mut waits = Vec::with_capacity(per_shard.len());
            for (&shard, part) in &per_shard {
                let req = PrepareRequest {
                    txn,
                    checks: Vec::new(),
                    holds: part
                        .iter()
                        .map(|e| (self.hashed(e.key.clone()), HoldMode::Write))
                        .collect(),
                    want_states: false,
                    retry_on_busy: true,
                    wait: false,
                };
                guard.add(shard);
                let ack = AckLevel::Local;
                waits.push(self.start(shard, |reply| ShardMsg::Prepare { req, ack, reply })?);
            }
            let mut busy = false;
            for rx in waits {
                match rx.await.map_err(|_| TxnError::ShardGone)? {
                    Ok(_) => {}
                    Err(Refusal::Busy | Refusal::Conflict(_)) => busy = true,
                    Err(Refusal::Unavailable(why)) => return Err(TxnError::Unavailable(why)),
                }
            }
            if busy {
                drop(guard); // releases what was held
                retry.wait().await?;
                continue;
            }
            guard.disarm();
            let mut waits = Vec::with_capacity(per_shard.len());
            for (shard, entries) in per_shard {
                waits.push(self.start(shard, |reply| ShardMsg::InstallRemote {
                    txn,
                    entries,
                    reply,
                })?);
            }
            for rx in waits {
                rx.await.map_err(|_| TxnError::ShardGone)??;
            }
            return Ok(());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use elsa_lattice::Version;
    use elsa_shard::Current;

    fn e(key: &str, value: &str, ts: u64) -> LogEntry {
        LogEntry {
            key: Bytes::from(key.to_string()),
            state: elsa_shard::wal::codec::EntryState::Plain(Some(Current {
                value: Bytes::from(value.to_string()),
                expire_ms: None,
                ttl_of: None,
            })),
            start_ts: ts,
            version: Version::new(ts, 1),
            unit: Default::default(),
        }
    }

    #[test]
    fn a_batch_is_the_state_after_all_its_transactions() {
        let t1 = vec![e("x", "1", 10), e("y", "1", 10)];
        let t2 = vec![e("x", "2", 20)];
        let t0 = vec![e("y", "0", 5), e("z", "0", 5)];
        let mut got = newest_per_key(vec![t1, t2, t0]);
        got.sort_by(|a, b| a.key.cmp(&b.key));
        let seen: Vec<(&[u8], u64)> = got
            .iter()
            .map(|e| (&e.key[..], e.version.commit_ts))
            .collect();
        assert_eq!(seen, vec![(&b"x"[..], 20), (&b"y"[..], 10), (&b"z"[..], 5)]);
    }
}

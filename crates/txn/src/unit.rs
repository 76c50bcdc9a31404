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
//!
//! **In order** (issue 42). A transaction whose lattice of a key carries
//! an earlier transaction's change of it (a transfer that read what
//! another wrote) must not show before that one. Each key's primary
//! checks it under the holds (`Expect::InOrder`, `elsa_shard`'s
//! `shard/parts.rs`): the key's newest version installed has arrived
//! there, and every older part of the key still waiting is installed with
//! it. A transaction that fails the check waits here
//! ([`install_remote_units`]) and is tried again with the next ones, until
//! the parts it waits for come or are shown alone (`PART_WAIT`).

use std::collections::{HashMap, HashSet};

use std::time::{Duration, Instant};

use bytes::Bytes;
use elsa_lattice::Version;
use elsa_shard::wal::codec::LogEntry;
use elsa_shard::{AckLevel, Check, Expect, HoldMode, PrepareRequest, Refusal, ShardMsg};
use tokio::sync::mpsc;

use crate::atomic::HoldGuard;
use crate::router::{Coordinator, Retry, ShardId};
use crate::TxnError;

/// Several transactions' lattices as one batch: per key, the newest, and
/// every version of the key among them (rising).
pub fn newest_per_key(units: &[Vec<LogEntry>]) -> Vec<(LogEntry, Vec<Version>)> {
    let mut newest: HashMap<&Bytes, (&LogEntry, Vec<Version>)> = HashMap::new();
    for e in units.iter().flatten() {
        let (have, versions) = newest.entry(&e.key).or_insert((e, Vec::new()));
        if have.version < e.version {
            *have = e;
        }
        versions.push(e.version);
    }
    newest
        .into_values()
        .map(|(e, mut versions)| {
            versions.sort_unstable();
            versions.dedup();
            (e.clone(), versions)
        })
        .collect()
}

/// How an attempt to install transactions ended.
#[derive(Debug, PartialEq, Eq)]
pub enum Installed {
    /// All of them, each whole.
    All,
    /// None: this key's primary says a part one of them carries, or the
    /// key's own part, is not here yet (`Expect::InOrder`).
    NotYet(Bytes),
}

/// The most attempts one round of [`install_remote_units`] makes (each
/// waiting one tries half as many transactions as the last).
const ATTEMPTS_PER_ROUND: usize = 16;

/// How often transactions that wait are tried again.
const ROUND: Duration = Duration::from_millis(5);

/// The node's installer of other regions' transactions: takes them from
/// `units` as the replication service finds them, and installs as many
/// as can go together, in order (see the module doc). One that waits
/// longer than `elsa_shard::PART_WAIT` is given up: its parts are shown
/// alone by then.
pub async fn install_remote_units(
    coord: Coordinator,
    mut units: mpsc::UnboundedReceiver<Vec<LogEntry>>,
) {
    let mut waiting: Vec<(Vec<LogEntry>, Instant)> = Vec::new();
    loop {
        if waiting.is_empty() {
            match units.recv().await {
                Some(u) => waiting.push((u, Instant::now())),
                None => return,
            }
        } else if let Ok(got) = tokio::time::timeout(ROUND, units.recv()).await {
            match got {
                Some(u) => waiting.push((u, Instant::now())),
                None => return,
            }
        }
        while let Ok(more) = units.try_recv() {
            waiting.push((more, Instant::now()));
        }
        let before = waiting.len();
        waiting.retain(|(_, since)| since.elapsed() < elsa_shard::PART_WAIT);
        if waiting.len() < before {
            tracing::warn!(
                "{} transactions of other regions waited {:?} for parts they carry; their parts show alone",
                before - waiting.len(),
                elsa_shard::PART_WAIT
            );
        }
        // Oldest first: a transaction can only carry the change of an
        // older one, so what may go now is a prefix in this order (if a
        // prefix passes, so does every shorter one). Try them all; while
        // some wait, try half as many. One that cannot go alone waits for
        // its part, and so does every later one that shares a key with it
        // (it may carry its change); the others are tried without them.
        waiting.sort_by_key(|(u, _)| u.first().map(|e| e.version));
        let mut cand: Vec<usize> = (0..waiting.len()).collect();
        let mut done = vec![false; waiting.len()];
        let mut len = cand.len();
        for _ in 0..ATTEMPTS_PER_ROUND {
            if cand.is_empty() {
                break;
            }
            len = len.clamp(1, cand.len());
            let batch: Vec<Vec<LogEntry>> =
                cand[..len].iter().map(|&i| waiting[i].0.clone()).collect();
            match coord.install_unit(&batch).await {
                Ok(Installed::All) => {
                    for &i in &cand[..len] {
                        done[i] = true;
                    }
                    cand.drain(..len);
                    len = cand.len();
                }
                Ok(Installed::NotYet(_)) if len > 1 => len /= 2,
                Ok(Installed::NotYet(_)) => {
                    let head = cand[0];
                    let mut blocked: HashSet<&Bytes> = HashSet::new();
                    cand.retain(|&i| {
                        let unit = &waiting[i].0;
                        let waits = i == head || unit.iter().any(|e| blocked.contains(&e.key));
                        if waits {
                            blocked.extend(unit.iter().map(|e| &e.key));
                        }
                        !waits
                    });
                    len = cand.len();
                }
                Err(e) => {
                    tracing::warn!(
                        "{len} transactions of other regions not installed as one: {e}; their parts show once they have waited {:?}",
                        elsa_shard::PART_WAIT
                    );
                    for &i in &cand[..len] {
                        done[i] = true;
                    }
                    cand.drain(..len);
                    len = cand.len();
                }
            }
        }
        let mut i = 0;
        waiting.retain(|_| {
            i += 1;
            !done[i - 1]
        });
    }
}

impl Coordinator {
    /// Installs `units` (other regions' committed transactions) all at
    /// once in this region, each key's newest lattice, if every key's
    /// primary finds them in order.
    pub async fn install_unit(&self, units: &[Vec<LogEntry>]) -> Result<Installed, TxnError> {
        let entries = newest_per_key(units);
        if entries.is_empty() {
            return Ok(Installed::All);
        }
        if let Some(newest) = entries.iter().map(|(e, _)| e.version.commit_ts).max() {
            // Later local commits order after it.
            self.node.hlc.observe(newest);
        }
        let mut retry = Retry::new();
        loop {
            // Planned again on every attempt: Busy may mean a primary moved.
            let mut per_shard: HashMap<ShardId, Vec<&(LogEntry, Vec<Version>)>> = HashMap::new();
            for e in &entries {
                per_shard
                    .entry(self.shard_of(self.hash(&e.0.key)))
                    .or_default()
                    .push(e);
            }
            // A fresh id per attempt: a late release of the last attempt
            // must not free this one's holds.
            let txn = self.node.next_txn();
            let mut guard = HoldGuard::new(self, txn);
            let mut waits = Vec::with_capacity(per_shard.len());
            for (&shard, part) in &per_shard {
                let req = PrepareRequest {
                    txn,
                    checks: part
                        .iter()
                        .map(|(e, versions)| Check {
                            key: self.hashed(e.key.clone()),
                            expect: Expect::InOrder(versions.clone()),
                        })
                        .collect(),
                    holds: part
                        .iter()
                        .map(|(e, _)| (self.hashed(e.key.clone()), HoldMode::Write))
                        .collect(),
                    want_states: false,
                    retry_on_busy: true,
                    wait: false,
                };
                guard.add(shard);
                let ack = AckLevel::Local;
                waits.push(self.start(shard, |reply| ShardMsg::Prepare { req, ack, reply })?);
            }
            let (mut busy, mut not_yet) = (false, None);
            for rx in waits {
                match rx.await.map_err(|_| TxnError::ShardGone)? {
                    Ok(_) => {}
                    Err(Refusal::Busy) => busy = true,
                    Err(Refusal::Conflict(key)) => not_yet = Some(key),
                    Err(Refusal::Unavailable(why)) => return Err(TxnError::Unavailable(why)),
                }
            }
            if let Some(key) = not_yet {
                return Ok(Installed::NotYet(key)); // the guard releases
            }
            if busy {
                drop(guard); // releases what was held
                retry.wait().await?;
                continue;
            }
            guard.disarm();
            let mut waits = Vec::with_capacity(per_shard.len());
            for (shard, part) in per_shard {
                let entries = part.into_iter().map(|(e, _)| e.clone()).collect();
                waits.push(self.start(shard, |reply| ShardMsg::InstallRemote {
                    txn,
                    entries,
                    reply,
                })?);
            }
            for rx in waits {
                rx.await.map_err(|_| TxnError::ShardGone)??;
            }
            return Ok(Installed::All);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
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
        let mut got = newest_per_key(&[t1, t2, t0]);
        got.sort_by(|a, b| a.0.key.cmp(&b.0.key));
        let seen: Vec<(&[u8], u64, Vec<u64>)> = got
            .iter()
            .map(|(e, versions)| {
                (
                    &e.key[..],
                    e.version.commit_ts,
                    versions.iter().map(|v| v.commit_ts).collect(),
                )
            })
            .collect();
        assert_eq!(
            seen,
            vec![
                (&b"x"[..], 20, vec![10, 20]),
                (&b"y"[..], 10, vec![5, 10]),
                (&b"z"[..], 5, vec![5])
            ]
        );
    }
}

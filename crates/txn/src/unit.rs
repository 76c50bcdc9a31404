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
//! key) releases everything and retries after a backoff. An install the
//! region cannot run (a primary without its lease, unreachable, busy too
//! long) is tried again every 100 ms for as long as that lasts, and the
//! parked parts' waits pause with it: only time in which installing was
//! possible counts towards `elsa_shard::PART_WAIT`, and each has at least
//! `elsa_shard::PART_GRACE` left when installing works again.
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
use elsa_shard::{AckLevel, Check, Expect, HoldMode, PrepareRequest, Refusal, ShardMsg, TxnId};
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

/// How often while the region cannot install them.
const BLOCKED_RETRY: Duration = Duration::from_millis(100);

/// A longer gap between rounds: the process was stopped.
const STOPPED_GAP: Duration = Duration::from_secs(1);

/// The node's installer of other regions' transactions: takes them from
/// `units` as the replication service finds them, and installs as many
/// as can go together, in order (see the module doc). One that waits
/// longer than `elsa_shard::PART_WAIT` for a part it builds on is given
/// up: its parts are shown alone by then. Time in which the region could
/// not install at all (or this process was stopped) does not count.
pub async fn install_remote_units(
    coord: Coordinator,
    mut units: mpsc::UnboundedReceiver<Vec<LogEntry>>,
) {
    // Each with when it came (moved on by the time its wait paused), and the key its
    // last order check waited on (for the log, should it be given up).
    let mut waiting: Vec<(Vec<LogEntry>, Instant, Option<Bytes>)> = Vec::new();
    let mut last_round = Instant::now();
    // While the region cannot install (see `Err` below): not before then,
    // and since when (for the log).
    let (mut retry_at, mut blocked_since): (Option<Instant>, Option<Instant>) = (None, None);
    loop {
        if waiting.is_empty() {
            match units.recv().await {
                Some(u) => waiting.push((u, Instant::now(), None)),
                None => return,
            }
        } else if let Ok(got) = tokio::time::timeout(ROUND, units.recv()).await {
            match got {
                Some(u) => waiting.push((u, Instant::now(), None)),
                None => return,
            }
        }
        while let Ok(more) = units.try_recv() {
            waiting.push((more, Instant::now(), None));
        }
        // A stopped process (SIGSTOP), or a region that cannot install
        // (below), installs nothing: the waits pause, as the shards'
        // parked parts do.
        let now = Instant::now();
        let gap = now.saturating_duration_since(last_round);
        last_round = now;
        if gap > STOPPED_GAP || blocked_since.is_some() {
            for (_, since, _) in &mut waiting {
                *since = (*since + gap).min(now);
            }
        }
        if retry_at.is_some_and(|t| now < t) {
            continue;
        }
        let (late, kept): (Vec<_>, Vec<_>) = waiting
            .drain(..)
            .partition(|(_, since, _)| since.elapsed() >= elsa_shard::PART_WAIT);
        waiting = kept;
        if !late.is_empty() {
            let what: Vec<String> = late
                .iter()
                .take(3)
                .map(|(u, _, on)| {
                    format!(
                        "{} keys at {:?}, last waiting on {:?}",
                        u.len(),
                        u.first().map(|e| e.version),
                        on.as_ref().map(|k| String::from_utf8_lossy(k).into_owned())
                    )
                })
                .collect();
            tracing::warn!(
                "{} transactions of other regions waited {:?} for parts they carry; their parts show alone (e.g. {what:?})",
                late.len(),
                elsa_shard::PART_WAIT
            );
        }
        // Oldest first: a transaction can only carry the change of an
        // older one, so what may go now is a prefix in this order (if a
        // prefix passes, so does every shorter one). Try them all; while
        // some wait, try half as many. One that cannot go alone waits for
        // its part, and so does every later one that shares a key with it
        // (it may carry its change); the others are tried without them.
        waiting.sort_by_key(|(u, _, _)| u.first().map(|e| e.version));
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
            let tried = install_stamped(&coord, &batch).await;
            if tried.is_ok() {
                // It ran (installed, or found a part missing): the region
                // can install again.
                if let Some(t) = blocked_since.take() {
                    tracing::info!(
                        "transactions of other regions install again, after {:.1?}",
                        t.elapsed()
                    );
                }
                retry_at = None;
            }
            match tried {
                Ok(Installed::All) => {
                    for &i in &cand[..len] {
                        done[i] = true;
                    }
                    cand.drain(..len);
                    len = cand.len();
                }
                Ok(Installed::NotYet(_)) if len > 1 => len /= 2,
                Ok(Installed::NotYet(key)) => {
                    let head = cand[0];
                    waiting[head].2 = Some(key);
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
                    // The region cannot install now: a key's primary has no
                    // lease, cannot be reached, or stayed busy (every
                    // `TxnError` an install can meet is of that kind).
                    // Nothing is given up for it (issue 42: parts shown
                    // alone once a region had been without its majority
                    // for 10 s tore remote snapshots right after it came
                    // back): the waits, here and of the shards' parked
                    // parts, pause until an install goes in again, each
                    // with at least `PART_GRACE` left, and all is tried
                    // again soon.
                    if blocked_since.is_none() {
                        tracing::warn!(
                            "transactions of other regions cannot be installed now ({e}); they wait out of sight and are tried again every {BLOCKED_RETRY:?}"
                        );
                        blocked_since = Some(Instant::now());
                    }
                    coord.node.installs_blocked();
                    let now = Instant::now();
                    let left = elsa_shard::PART_WAIT - elsa_shard::PART_GRACE;
                    for (_, since, _) in &mut waiting {
                        *since = (*since).max(now.checked_sub(left).unwrap_or(now));
                    }
                    retry_at = Some(Instant::now() + BLOCKED_RETRY);
                    break;
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

/// [`Coordinator::install_unit`], saying the region is blocked
/// ([`NodeContext::installs_blocked`](crate::router::NodeContext)) every
/// [`STUCK`] it takes while a key's primary is another node: an install
/// whose hold waits on a paused or cut-off primary can take as long as
/// the fault, and the parts it would install must not be shown alone
/// meanwhile. An install of keys this node is the primary of that is
/// merely slow (the node starved of CPU) is no such fault: counted as
/// one, on a region of one node under six CPU hogs, every slow install
/// started every part's wait again, so a transaction whose part was lost
/// never showed alone and its stream key, and everything queued behind
/// it, stayed out of sight for good (`tests/nemesis_streams.rs`: the
/// digests never converged).
async fn install_stamped(
    coord: &Coordinator,
    batch: &[Vec<LogEntry>],
) -> Result<Installed, TxnError> {
    let me = coord.node.node_id;
    let remote = batch
        .iter()
        .flatten()
        .any(|e| coord.shard_of(coord.hash(&e.key)).node != me);
    let install = coord.install_unit(batch);
    tokio::pin!(install);
    loop {
        match tokio::time::timeout(STUCK, &mut install).await {
            Ok(done) => return done,
            Err(_) if remote => coord.node.installs_blocked(),
            Err(_) => {}
        }
    }
}

/// How long an install may take before the region counts as blocked.
const STUCK: Duration = Duration::from_millis(500);

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
            // The guard stays armed: the holds are released once every
            // shard has answered, i.e. once every replica of every key in
            // the region has logged the install — a node that crashes
            // after a reader saw the transaction cannot take part of it
            // back (issue 42: with the holds released at each shard's own
            // install, a node killed right after lost one shard's half from
            // its log and the region showed the rest).
            // Each shard keeps the whole install with its holds when it
            // spans shards (see `finish_install`).
            let all: Vec<LogEntry> = if per_shard.len() > 1 {
                entries.iter().map(|(e, _)| e.clone()).collect()
            } else {
                Vec::new()
            };
            let mut waits = Vec::with_capacity(per_shard.len());
            for (shard, part) in per_shard {
                let entries: Vec<LogEntry> = part.iter().map(|(e, _)| e.clone()).collect();
                let others = others_than(&all, &entries);
                let rx = self.start(shard, |reply| ShardMsg::InstallRemote {
                    txn,
                    entries,
                    others,
                    reply,
                });
                waits.push((part, rx));
            }
            let (mut installed, mut unsettled) = (0, Vec::new());
            for (part, rx) in waits {
                let done = match rx {
                    Ok(rx) => matches!(rx.await, Ok(Ok(()))),
                    Err(_) => false,
                };
                if done {
                    installed += 1;
                } else {
                    // Copied again only when it must be installed again.
                    unsettled.extend(part.into_iter().map(|(e, _)| e.clone()));
                }
            }
            if !unsettled.is_empty() {
                if installed == 0 {
                    // Shown nowhere: given up whole, tried again later.
                    return Err(TxnError::Unavailable(
                        "no shard confirmed the install".to_string(),
                    ));
                }
                self.settle_install(&mut guard, txn, unsettled, &all).await;
            }
            return Ok(Installed::All); // the guard releases every hold
        }
    }

    /// Part of an install went in and stays held, part did not (its
    /// shard's node was unreachable, lost the holds, or its replicas did
    /// not confirm — such a node drops the lattices when it catches up
    /// again): installs the rest again under the same transaction's holds,
    /// without checks (the transaction is decided and partly shown to
    /// nobody yet), every 100 ms until it is in, for at most
    /// [`SETTLE_FOR`]. Readers of the held keys wait meanwhile: released
    /// before, the region showed the part that went in (issue 42).
    async fn settle_install(
        &self,
        guard: &mut HoldGuard<'_>,
        txn: TxnId,
        mut rest: Vec<LogEntry>,
        all: &[LogEntry],
    ) {
        let deadline = Instant::now() + SETTLE_FOR;
        while !rest.is_empty() {
            if Instant::now() > deadline {
                tracing::error!(
                    "an install of other regions' transactions stayed unfinished for {SETTLE_FOR:?}: {} of its lattices may show late",
                    rest.len()
                );
                return;
            }
            self.node.installs_blocked();
            tokio::time::sleep(BLOCKED_RETRY).await;
            let mut per_shard: HashMap<ShardId, Vec<LogEntry>> = HashMap::new();
            for e in rest.drain(..) {
                per_shard
                    .entry(self.shard_of(self.hash(&e.key)))
                    .or_default()
                    .push(e);
            }
            for (shard, entries) in per_shard {
                if self
                    .install_again(guard, txn, shard, &entries, all)
                    .await
                    .is_err()
                {
                    rest.extend(entries);
                }
            }
        }
    }

    /// Finishes an install that `txn` put in on `shard` (a shard of this
    /// node) under holds its installer left there — the installer died or
    /// stalls (`resolve_orphan`): installs every lattice of `whole` again,
    /// each under `txn`'s holds at its key's primary, every 100 ms until
    /// all are in (for at most [`SETTLE_FOR`]), then releases what it
    /// held. Readers of the held keys wait meanwhile, as under the
    /// installer's own [`Coordinator::settle_install`].
    pub async fn finish_install(&self, shard: ShardId, txn: TxnId, whole: Vec<LogEntry>) {
        let mut guard = HoldGuard::new(self, txn);
        guard.add(shard);
        tracing::info!(
            "an install of other regions' transactions holding keys on shard {shard} lost its installer: finishing its {} lattices",
            whole.len()
        );
        self.settle_install(&mut guard, txn, whole.clone(), &whole)
            .await;
    }

    /// Holds `entries`' keys on `shard` for `txn` (again) and installs them.
    async fn install_again(
        &self,
        guard: &mut HoldGuard<'_>,
        txn: TxnId,
        shard: ShardId,
        entries: &[LogEntry],
        all: &[LogEntry],
    ) -> Result<(), ()> {
        let req = PrepareRequest {
            txn,
            checks: Vec::new(),
            holds: entries
                .iter()
                .map(|e| (self.hashed(e.key.clone()), HoldMode::Write))
                .collect(),
            want_states: false,
            retry_on_busy: true,
            wait: false,
        };
        let ack = AckLevel::Local;
        let held = self
            .start(shard, |reply| ShardMsg::Prepare { req, ack, reply })
            .map_err(|_| ())?;
        guard.add(shard);
        held.await.map_err(|_| ())?.map_err(|_| ())?;
        let others = others_than(all, entries);
        let entries = entries.to_vec();
        let done = self
            .start(shard, |reply| ShardMsg::InstallRemote {
                txn,
                entries,
                others,
                reply,
            })
            .map_err(|_| ())?;
        done.await.map_err(|_| ())?.map_err(|_| ())
    }
}

/// The lattices of an install (`all`) that are not in one shard's
/// `part` (one lattice per key).
fn others_than(all: &[LogEntry], part: &[LogEntry]) -> Vec<LogEntry> {
    let mine: std::collections::HashSet<&[u8]> = part.iter().map(|e| &e.key[..]).collect();
    all.iter()
        .filter(|e| !mine.contains(&e.key[..]))
        .cloned()
        .collect()
}

/// How long [`Coordinator::settle_install`] keeps trying.
const SETTLE_FOR: Duration = Duration::from_secs(60);

#[cfg(test)]
mod tests {
    use super::*;
    use elsa_shard::Current;
    use std::sync::Arc;

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

    /// Every key's primary is `node`; what is sent to another node is
    /// kept and never answered (a paused primary).
    struct On(elsa_lattice::NodeId, std::sync::Mutex<Vec<ShardMsg>>);

    impl crate::router::Placement for On {
        fn route(&self, _hash: u64) -> ShardId {
            ShardId {
                node: self.0,
                index: 0,
            }
        }

        fn send_remote(&self, _to: ShardId, msg: ShardMsg) {
            self.1.lock().unwrap().push(msg);
        }
    }

    /// A slow install counts as the region blocked (the parked parts'
    /// waits pause) only when it waits on another node: one of
    /// this node's own keys that is merely slow (a starved process) is no
    /// fault, and a part whose rest was lost must reach its end.
    #[tokio::test(start_paused = true)]
    async fn only_an_install_waiting_on_another_node_blocks_the_region() {
        for (primary, blocks) in [(1, false), (2, true)] {
            // The local shard takes the request and never answers.
            let (tx, _held) = mpsc::unbounded_channel();
            let node = Arc::new(crate::router::NodeContext::new(
                1,
                Arc::new(elsa_lattice::Hlc::default()),
                elsa_shard::KeyHasher::default(),
                vec![tx],
                Arc::new(On(primary, Default::default())),
            ));
            let coord = Coordinator::new(node.clone(), None);
            let batch = vec![vec![e("x", "1", 10)]];
            let slow = tokio::time::timeout(STUCK * 4, install_stamped(&coord, &batch)).await;
            assert!(
                slow.is_err(),
                "the install never ends (primary on node {primary})"
            );
            assert_eq!(
                node.installs_blocked_ago().is_some(),
                blocks,
                "primary on node {primary}"
            );
        }
    }
}

//! The second half of every multi-shard commit (EXEC, MSET, BEGIN … COMMIT
//! across shards), once each participant holds its keys and validated:
//!
//! 1. **shadow**: the other replicas of the participants' keys in the
//!    region hold them too, so if a participant's node dies now, the
//!    replica that takes its keys over holds them until the transaction
//!    is finished — nobody reads or writes them in between. If this
//!    node's view moved a participant's keys elsewhere meanwhile (the
//!    shard serving them now got no shadow), nothing is decided: the
//!    holds are released and the commit prepared again;
//! 2. **decide**: the transaction's record (`crate::record`) is written
//!    set-if-absent at acknowledgement level `region`: from then on the
//!    transaction is committed, whatever fails, and the record survives
//!    the loss of any one node; if a resolver recorded `aborted` first
//!    (it found the holds orphaned), the transaction aborts instead;
//! 3. **install** at every participant, under its holds, as one version
//!    `(commit_ts, coordinator)` everywhere; a participant that does not
//!    answer (its node died) is asked again through the current view —
//!    the replica that took its keys over holds them by step 1 — until
//!    every part is installed or the retry time runs out (then resolvers
//!    finish it from the record);
//! 4. **release** the shadows.
//!
//! What is decided is installed everywhere, what is not is installed
//! nowhere: all-or-nothing on every node, and an install never applies
//! without its holds (issue 12, item 4).

use std::collections::HashMap;

use elsa_lattice::{Ts, Version};
use elsa_shard::ops::Value;
use elsa_shard::wal::codec::{EntryState, LogEntry};
use elsa_shard::{
    unix_ms, AckLevel, Expiry, HashedKey, HoldMode, KeyOp, Op, OpReply, Refusal, SetCond, SetReply,
    ShardMsg, TxnId, Write,
};

use crate::atomic::HoldGuard;
use crate::record::{record_key, Outcome, RECORD_TTL_MS};
use crate::router::{Coordinator, Retry, ShardId};
use crate::TxnError;

/// A transaction whose participants all hold their keys and validated.
pub(crate) struct Prepared<'a> {
    pub txn: TxnId,
    pub start_ts: Ts,
    /// Each participant's holds.
    pub holds: Vec<(ShardId, Vec<(HashedKey, HoldMode)>)>,
    /// Each participant's writes.
    pub writes: HashMap<ShardId, Vec<Write>>,
    pub ack: AckLevel,
    pub guard: HoldGuard<'a>,
}

impl Coordinator {
    /// Steps 1–4 (see the module doc); answers the commit timestamp, or
    /// `Conflict` when a resolver aborted the transaction first.
    pub(crate) async fn finish_commit(&self, mut p: Prepared<'_>) -> Result<Ts, TxnError> {
        if p.writes.values().all(Vec::is_empty) {
            // Read-only: validated under holds; nothing to decide or
            // install. The guard releases.
            return Ok(self.node.hlc.now());
        }
        let backups = self.shadow_holds(&p).await;
        for &b in &backups {
            p.guard.add_shadow(b);
        }
        if self.a_part_moved(&p) {
            // A participant stopped serving its keys in this node's view
            // while it prepared or the shadows were placed (its node was
            // declared dead, or handed the slot back). The shard serving
            // them now was the route, not a backup, when the shadows were
            // placed: it holds nothing for this commit and serves the keys
            // meanwhile, and a decided install would land there (or, by a
            // backup's resolver, on the replicas) behind writes made after
            // it — an element in the middle of a list, in the region fault
            // run (2026-11-27). Not decided: the guard releases every hold
            // and the caller prepares again on the current view.
            tracing::debug!(
                "txn {:#x}: a participant's keys moved before the decision",
                p.txn
            );
            return Err(TxnError::Conflict(bytes::Bytes::new()));
        }
        // Every key is held, so no version can appear between this
        // timestamp and the installs: the commit orders after everything
        // it read.
        let commit_ts = self.node.hlc.now();
        let version = Version::new(commit_ts, self.node.node_id);
        for w in p.writes.values_mut().flatten() {
            w.settle(p.start_ts, version);
        }
        if self.node.hlc.lapse() != p.guard.lapse {
            // Paused since the holds were taken: its own node's keys may
            // have been served by another node meanwhile, and the
            // timestamp may be past that. Not decided, so not installed
            // anywhere; the guard releases every hold.
            return Err(TxnError::Unavailable(
                "this node was paused during the commit; not applied".into(),
            ));
        }
        if !self.record_commit(&p, commit_ts).await? {
            // Aborted by a resolver: the guard releases every hold.
            tracing::debug!("txn {:#x}: a resolver recorded aborted first", p.txn);
            return Err(TxnError::Conflict(bytes::Bytes::new()));
        }
        tracing::debug!(
            "txn {:#x}: committed at {commit_ts}, parts {:?}, shadows {backups:?}, keys {:?}",
            p.txn,
            p.holds.iter().map(|(s, _)| *s).collect::<Vec<_>>(),
            p.writes
                .values()
                .flatten()
                .map(|w| String::from_utf8_lossy(&w.key.key).into_owned())
                .collect::<Vec<_>>()
        );
        p.guard.disarm();
        if let Some(delay) = self.node.install_delay() {
            tokio::time::sleep(delay).await;
        }
        let outcome = self.install_all(&mut p, commit_ts).await;
        if outcome.is_ok() {
            let txn = p.txn | elsa_shard::msg::SHADOW;
            for b in backups {
                self.post_later(b, ShardMsg::Release { txn });
            }
        }
        // (Not installed everywhere in time: the shadows stay, so the
        // replicas that hold them finish the transaction from its record.)
        outcome.map(|()| commit_ts)
    }

    /// True when this node's view no longer routes some held key to the
    /// participant that holds it (see `finish_commit`).
    fn a_part_moved(&self, p: &Prepared<'_>) -> bool {
        p.holds.iter().any(|(shard, holds)| {
            holds
                .iter()
                .any(|(k, _)| !self.node.placement.still_serves(k.hash, *shard))
        })
    }

    /// Step 1: the participants' keys are held by their other replicas in
    /// the region too. Answers the backup shards asked. A backup that does
    /// not answer is down: it will not take the keys over.
    async fn shadow_holds(&self, p: &Prepared<'_>) -> Vec<ShardId> {
        let mut per_backup: HashMap<ShardId, Vec<(HashedKey, HoldMode)>> = HashMap::new();
        for (_, holds) in &p.holds {
            for (k, mode) in holds {
                for b in self.node.placement.backups(k.hash) {
                    per_backup.entry(b).or_default().push((k.clone(), *mode));
                }
            }
        }
        let mut asked = Vec::with_capacity(per_backup.len());
        let mut waits = Vec::with_capacity(per_backup.len());
        for (b, holds) in per_backup {
            let txn = p.txn;
            if let Ok(rx) = self.start(b, |reply| ShardMsg::Shadow { txn, holds, reply }) {
                asked.push(b);
                waits.push(rx);
            }
        }
        for rx in waits {
            let _ = rx.await;
        }
        asked
    }

    /// Step 2: writes the transaction's record; true when it says
    /// committed (ours), false when a resolver recorded aborted first.
    async fn record_commit(&self, p: &Prepared<'_>, commit_ts: Ts) -> Result<bool, TxnError> {
        let version = Version::new(commit_ts, self.node.node_id);
        let entries: Vec<LogEntry> = p
            .writes
            .values()
            .flatten()
            .map(|w| LogEntry {
                key: w.key.key.clone(),
                state: match (&w.delta, &w.state) {
                    (Some(d), _) => EntryState::Typed(d.clone()),
                    (None, Some(Value::Str(c))) => EntryState::Plain(Some(c.clone())),
                    // Settled: a typed value has its delta.
                    (None, _) => EntryState::Plain(None),
                },
                start_ts: p.start_ts,
                version,
                unit: elsa_shard::Unit::Shards,
            })
            .collect();
        let key = record_key(p.txn);
        let set = KeyOp {
            hash: self.hash(&key),
            key: key.clone(),
            op: Op::Set {
                value: Outcome::Committed(entries).encode(),
                cond: SetCond::IfAbsent,
                expiry: Expiry::At(unix_ms() + RECORD_TTL_MS),
                reply: SetReply::Flag,
            },
        };
        let mut retry = Retry::new();
        loop {
            match self
                .run_lone(vec![set.clone()], AckLevel::Region)
                .await
                .pop()
            {
                Some(Ok(OpReply::Int(1))) => return Ok(true),
                // There already: a resolver's `aborted`, or ours from an
                // attempt whose answer was lost.
                Some(Ok(OpReply::Int(0))) => {
                    return match read_record(self, key).await? {
                        Some(Outcome::Committed(_)) => Ok(true),
                        _ => Ok(false),
                    }
                }
                Some(Ok(other)) => {
                    return Err(TxnError::Unavailable(format!(
                        "ERR the transaction record could not be written: {other:?}"
                    )))
                }
                // Not written, or not known to be: the next attempt tells.
                Some(Err(_)) | None => retry.wait().await?,
            }
        }
    }

    /// Step 3: installs every part; asks again, through the current view,
    /// any participant that did not answer.
    async fn install_all(&self, p: &mut Prepared<'_>, commit_ts: Ts) -> Result<(), TxnError> {
        let mut todo: Vec<(ShardId, Vec<Write>)> = p
            .holds
            .iter()
            .map(|(s, _)| (*s, p.writes.remove(s).unwrap_or_default()))
            .collect();
        let mut outcome = Ok(());
        let mut retry = Retry::new();
        loop {
            let mut waits = Vec::with_capacity(todo.len());
            for (shard, writes) in todo.drain(..) {
                let (txn, start_ts, origin, ack) = (p.txn, p.start_ts, self.node.node_id, p.ack);
                let w = writes.clone();
                let rx = self.start(shard, |reply| ShardMsg::Install {
                    txn,
                    writes: w,
                    start_ts,
                    commit_ts,
                    origin,
                    ack,
                    reply,
                });
                waits.push((shard, writes, rx));
            }
            let mut again: Vec<Write> = Vec::new();
            for (shard, writes, rx) in waits {
                let answer = match rx {
                    Ok(rx) => rx.await.map_err(|_| TxnError::Lost),
                    Err(e) => Err(e),
                };
                tracing::debug!("txn {:#x}: install at {shard}: {answer:?}", p.txn);
                match answer {
                    Ok(Ok(())) => {}
                    // Not the shard to ask any more (it stopped serving, or
                    // no primary is known yet): ask again through the
                    // current view, as for an unanswered part. (Before, a
                    // Busy install became a CONFLICT, and the coordinator
                    // retried the whole commit while its record said
                    // committed: resolvers installed it afterwards — an
                    // "aborted" transaction applied, G1a in the long run.)
                    Ok(Err(Refusal::Busy)) if writes.is_empty() => {}
                    Ok(Err(Refusal::Busy)) => again.extend(writes),
                    Ok(Err(r)) => outcome = outcome.and(Err(decided(r.into()))),
                    // Its node is gone (or unreachable): the replica that
                    // takes its keys over holds them (shadow); ask again.
                    Err(_) if writes.is_empty() => {}
                    Err(_) => {
                        tracing::debug!("install at {shard} unanswered; asking again");
                        again.extend(writes);
                    }
                }
            }
            if again.is_empty() {
                return outcome;
            }
            // One install per shard: the keys of every unanswered part,
            // by the shard the current view routes each to.
            todo = self.regroup_writes(again);
            if let Err(e) = retry.wait().await {
                return Err(decided(e));
            }
        }
    }

    /// `writes` split by the shard the current view routes each key to.
    fn regroup_writes(&self, writes: Vec<Write>) -> Vec<(ShardId, Vec<Write>)> {
        let mut out: Vec<(ShardId, Vec<Write>)> = Vec::new();
        for w in writes {
            let s = self.shard_of(w.key.hash);
            match out.iter_mut().find(|(t, _)| *t == s) {
                Some((_, part)) => part.push(w),
                None => out.push((s, vec![w])),
            }
        }
        out
    }
}

impl Coordinator {
    /// Finishes transaction `txn`, found holding `keys` on `shard` with no
    /// coordinator in sight (see `crate::record`): installs its part if
    /// its record says committed, releases if aborted, and when there is
    /// no record, records `aborted` first (set-if-absent: if the
    /// coordinator's `committed` got there first, that wins and is
    /// installed).
    pub async fn resolve_orphan(
        &self,
        shard: ShardId,
        txn: TxnId,
        keys: Vec<HashedKey>,
    ) -> Result<(), TxnError> {
        // An install of other regions' transactions whose installer is
        // gone or stalled, and which put lattices in here: it has no
        // record (its transactions are decided), and released here it
        // would show this part alone — finished whole first.
        if txn & elsa_shard::msg::SHADOW == 0 {
            let asked = self
                .ask(shard, |reply| {
                    ShardMsg::Admin(elsa_shard::AdminMsg::HeldInstall { txn, reply })
                })
                .await;
            if let Ok(Some(whole)) = asked {
                self.finish_install(shard, txn, whole).await;
                return Ok(());
            }
        }
        // Found held as a shadow, or as a participant: the same record.
        let key = record_key(txn & !elsa_shard::msg::SHADOW);
        match self.record_outcome(key).await? {
            Outcome::Committed(writes) => {
                let held: std::collections::HashSet<&[u8]> =
                    keys.iter().map(|k| &k.key[..]).collect();
                let Some(first) = writes.first() else {
                    self.post_later(shard, ShardMsg::Release { txn });
                    return Ok(());
                };
                let (start_ts, version) = (first.start_ts, first.version);
                let mine: Vec<Write> = writes
                    .iter()
                    .filter(|e| held.contains(&e.key[..]))
                    .map(|e| {
                        let key = self.hashed(e.key.clone());
                        match &e.state {
                            EntryState::Plain(c) => {
                                Write::new(key, c.clone().map(Value::Str), None)
                            }
                            EntryState::Typed(d) => Write {
                                delta: Some(d.clone()),
                                ..Write::new(key, None, None)
                            },
                        }
                    })
                    .collect();
                tracing::info!(
                    "transaction {txn:#x} was committed and its coordinator is gone: installing its {} writes on shard {shard}",
                    mine.len()
                );
                self.ask(shard, |reply| ShardMsg::Install {
                    txn,
                    writes: mine,
                    start_ts,
                    commit_ts: version.commit_ts,
                    origin: version.origin,
                    ack: AckLevel::Region,
                    reply,
                })
                .await?
                .map_err(TxnError::from)
            }
            Outcome::Aborted => {
                tracing::info!(
                    "transaction {txn:#x} held keys on shard {shard} with no coordinator in sight: aborted"
                );
                self.post_later(shard, ShardMsg::Release { txn });
                Ok(())
            }
        }
    }

    /// What the region says of the transaction whose record is `key`,
    /// read through the current view at acknowledgement level `region`;
    /// when there is no record, records `aborted` first (set-if-absent:
    /// if the coordinator's `committed` got there first, that wins). So
    /// every caller gets the one outcome that is ever recorded.
    pub async fn record_outcome(&self, key: bytes::Bytes) -> Result<Outcome, TxnError> {
        let mut retry = Retry::new();
        loop {
            if let Some(outcome) = read_record(self, key.clone()).await? {
                return Ok(outcome);
            }
            let fence = KeyOp {
                hash: self.hash(&key),
                key: key.clone(),
                op: Op::Set {
                    value: Outcome::Aborted.encode(),
                    cond: SetCond::IfAbsent,
                    expiry: Expiry::At(unix_ms() + RECORD_TTL_MS),
                    reply: SetReply::Flag,
                },
            };
            if let Some(Ok(OpReply::Int(1))) =
                self.run_lone(vec![fence], AckLevel::Region).await.pop()
            {
                return Ok(Outcome::Aborted);
            }
            // Someone recorded an outcome first (or the answer was lost):
            // read it again.
            retry.wait().await?;
        }
    }
}

/// What a client hears when a decided transaction's install failed
/// somewhere: never a conflict or "not applied" (its record says
/// committed, and the resolvers of the parts still held finish it), but
/// an error whose outcome the client must treat as unknown.
fn decided(e: TxnError) -> TxnError {
    TxnError::Unavailable(format!(
        "ERR the transaction is committed but not installed everywhere yet ({e}); its record finishes it"
    ))
}

/// Reads transaction `key`'s record (acknowledgement level `region`).
pub(crate) async fn read_record(
    coord: &Coordinator,
    key: bytes::Bytes,
) -> Result<Option<Outcome>, TxnError> {
    let get = KeyOp {
        hash: coord.hash(&key),
        key,
        op: Op::Get,
    };
    match coord.run_lone(vec![get], AckLevel::Region).await.pop() {
        Some(Ok(OpReply::Bulk(v))) => Ok(Outcome::decode(&v).ok()),
        Some(Ok(_)) => Ok(None),
        Some(Err(e)) => Err(e),
        None => Err(TxnError::Lost),
    }
}

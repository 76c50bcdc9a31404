//! Commands that act on many keys as one: MULTI/EXEC (with WATCH), MSET,
//! MSETNX, multi-key DEL/EXISTS/MGET.
//!
//! Keys on one shard: one `Exec` message, validated and run in one actor
//! step. Keys on several: hold them all (prepare), run the commands here on
//! the states the holds returned, install the result everywhere (commit).
//! A key held by someone else answers Busy; then every hold is released and
//! the whole thing retried after a backoff. The first attempt asks every
//! shard at once and nobody waits while holding; the retries prepare one
//! shard at a time in `ShardId` order and wait at each for the keys (see
//! `elsa_shard`'s `waiting`), so readers that keep holding the same keys
//! cannot starve them, and waits ordered that way cannot deadlock.

use std::collections::HashMap;

use bytes::Bytes;
use elsa_lattice::{KeyState, Ts, Version};
use elsa_shard::ops::{absent_for_new, raise_if_created, Value};
use elsa_shard::{
    unix_ms, AckLevel, Check, FastMap, HashedKey, HoldMode, KeyOp, KeyView, OpReply,
    PrepareRequest, Refusal, ShardMsg, TxnId, Write,
};

use crate::commit::Prepared;
use crate::router::{Coordinator, Retry, ShardId};
use crate::TxnError;

/// Releases a transaction's holds unless it was installed — also when the
/// future running it is dropped halfway (client gone, shutdown).
pub(crate) struct HoldGuard<'a> {
    coord: &'a Coordinator,
    txn: TxnId,
    shards: Vec<(ShardId, TxnId)>,
    /// The clock's pause count before any hold was asked for (see
    /// `Hlc::lapse`).
    pub(crate) lapse: u64,
}

impl<'a> HoldGuard<'a> {
    pub(crate) fn new(coord: &'a Coordinator, txn: TxnId) -> Self {
        HoldGuard {
            coord,
            txn,
            shards: Vec::new(),
            lapse: coord.node.hlc.lapse(),
        }
    }

    pub(crate) fn add(&mut self, shard: ShardId) {
        self.shards.push((shard, self.txn));
    }

    /// `shard` holds the transaction's keys as a backup (its shadow).
    pub(crate) fn add_shadow(&mut self, shard: ShardId) {
        self.shards
            .push((shard, self.txn | elsa_shard::msg::SHADOW));
    }

    /// The holds are being installed: nothing to release.
    pub(crate) fn disarm(&mut self) {
        self.shards.clear();
    }
}

impl Drop for HoldGuard<'_> {
    fn drop(&mut self) {
        for &(s, txn) in &self.shards {
            self.coord.post_from_drop(s, ShardMsg::Release { txn });
        }
    }
}

/// One key captured under holds.
struct HeldKey {
    key: HashedKey,
    /// Its value now (the commands' changes on top of what was read).
    value: Option<Value>,
    /// A command wrote it.
    dirty: bool,
    /// Its typed state as read under the holds (a typed write's base).
    read: Option<std::sync::Arc<KeyState>>,
    /// The write of the plain value read (`KeyView::value_version`).
    read_version: Option<Version>,
    /// What was read when the key held no typed state (a HyperLogLog
    /// written there settles from it: `elsa_shard::write_base`).
    plain: Option<elsa_shard::PlainRead>,
}

/// Keys' states captured under holds, with the commands' changes on top.
struct Overlay {
    states: FastMap<Bytes, HeldKey>,
    now_ms: u64,
    /// Stamps handed out (see [`elsa_shard::ops::pending_stamp`]).
    stamps: u64,
    /// The keyspace-event classes on, and the events raised: sent once
    /// the commit is done.
    notify: u32,
    events: Vec<elsa_shard::notify::Event>,
    /// `*` stream IDs chosen, pinned until the commit is installed
    /// (`elsa_shard::ops::streams::id_floor`).
    pins: Vec<elsa_shard::ops::streams::id_floor::IdPin>,
}

impl Overlay {
    /// Takes in a shard's answer to a prepare of `keys`: their states, or
    /// into `outcome` why not (`Err(None)`: Busy, retry; a conflict or an
    /// unavailable shard outranks that).
    fn absorb(
        &mut self,
        keys: Vec<(HashedKey, HoldMode)>,
        answer: Result<Vec<elsa_shard::ReadState>, Refusal>,
        outcome: &mut Result<(), Option<TxnError>>,
    ) {
        match answer {
            Ok(states) => {
                for ((k, _), rs) in keys.into_iter().zip(states) {
                    let held = HeldKey {
                        plain: elsa_shard::PlainRead::of(&rs),
                        read_version: rs.value_version(),
                        value: rs.value(),
                        read: rs.typed,
                        dirty: false,
                        key: k.clone(),
                    };
                    self.states.insert(k.key, held);
                }
            }
            Err(Refusal::Busy) => {
                if outcome.is_ok() {
                    *outcome = Err(None);
                }
            }
            Err(Refusal::Conflict(_)) => *outcome = Err(Some(TxnError::WatchFailed)),
            Err(Refusal::Unavailable(why)) => *outcome = Err(Some(TxnError::Unavailable(why))),
        }
    }
}

impl KeyView for Overlay {
    fn lookup(&mut self, key: &[u8]) -> Option<Value> {
        let now = self.now_ms;
        match self.states.get(key)?.value.as_ref()? {
            Value::Str(c) if c.expire_ms.is_some_and(|at| at <= now) => None,
            v => Some(v.clone()),
        }
    }

    fn store(&mut self, key: &[u8], value: Option<Value>) {
        let absent = absent_for_new(self, key);
        if let Some(entry) = self.states.get_mut(key) {
            entry.value = value;
            entry.dirty = true;
        }
        raise_if_created(self, key, absent);
    }

    fn merge(&mut self, key: &[u8], delta: KeyState) {
        let absent = absent_for_new(self, key);
        if let Some(entry) = self.states.get_mut(key) {
            elsa_shard::ops::merge_into(&mut entry.value, delta);
            entry.dirty = true;
        }
        raise_if_created(self, key, absent);
    }

    fn notifies(&self, class: u32) -> bool {
        self.notify & class != 0
    }

    fn notify(&mut self, class: u32, name: &'static str, key: &[u8]) {
        if self.notify & class != 0 {
            self.events.push(elsa_shard::notify::Event {
                class,
                name,
                key: Bytes::copy_from_slice(key),
            });
        }
    }

    fn stamp(&mut self) -> (Ts, Version) {
        self.stamps += 1;
        elsa_shard::ops::pending_stamp(self.stamps)
    }

    fn now_ms(&self) -> u64 {
        self.now_ms
    }

    fn id_floor_ms(&mut self) -> u64 {
        let (ms, pin) = elsa_shard::ops::streams::id_floor::pin(self.now_ms);
        self.pins.push(pin);
        ms
    }

    fn value_version(&mut self, key: &[u8]) -> Option<Version> {
        let entry = self.states.get(key)?;
        match (&entry.value, entry.dirty) {
            // A command before wrote it: a TTL change folds into that
            // write (or stays the change of the value it already named).
            (Some(Value::Str(c)), true) => c.ttl_of,
            (_, true) => None,
            (_, false) => entry.read_version,
        }
    }
}

impl Coordinator {
    /// Runs `ops` atomically after checking `watches`; answers per op, or
    /// [`TxnError::WatchFailed`] when a watched key changed.
    pub async fn run_atomic(
        &self,
        ops: Vec<KeyOp>,
        watches: Vec<Check>,
        ack: AckLevel,
    ) -> Result<Vec<OpReply>, TxnError> {
        let written = self.keys_to_replicate(ops.iter().filter(|k| k.op.is_write()), ack);
        let replies = self.run_atomic_here(ops, watches, ack).await?;
        self.replicate(written).await?;
        Ok(replies)
    }

    async fn run_atomic_here(
        &self,
        ops: Vec<KeyOp>,
        watches: Vec<Check>,
        ack: AckLevel,
    ) -> Result<Vec<OpReply>, TxnError> {
        let mut retry = Retry::new();
        loop {
            // Planned again on every attempt: Busy may also mean a shard is
            // no longer the primary of a key (the view changed).
            let outcome = if let Some(shard) = self.only_shard(&ops, &watches) {
                // Every key on one shard (a batch under one hash tag, a
                // one-shard node): no plan of holds to build.
                self.exec_on_one(shard, &ops, watches.clone(), ack).await?
            } else {
                self.run_planned(&ops, &watches, ack, retry.retried())
                    .await?
            };
            if let Some(replies) = outcome {
                return Ok(replies);
            }
            retry.wait().await?;
        }
    }

    /// The one shard every key of `ops` (those they reach too) and of
    /// `watches` is on, if there is one.
    fn only_shard(&self, ops: &[KeyOp], watches: &[Check]) -> Option<ShardId> {
        let first = self.shard_of(ops.first()?.hash);
        let same = |hash: u64| self.shard_of(hash) == first;
        let all = ops
            .iter()
            .all(|k| same(k.hash) && k.op.other_keys().iter().all(|o| same(self.hash(o))))
            && watches.iter().all(|c| same(c.key.hash));
        all.then_some(first)
    }

    /// One attempt through a plan of holds: on one shard, or across
    /// (`ordered`: shard by shard, waiting for held keys).
    async fn run_planned(
        &self,
        ops: &[KeyOp],
        watches: &[Check],
        ack: AckLevel,
        ordered: bool,
    ) -> Result<Option<Vec<OpReply>>, TxnError> {
        let (holds, mut checks) = self.plan_atomic(ops, watches);
        if holds.len() <= 1 {
            let shard = holds.keys().next().copied().unwrap_or(self.node.local(0));
            let checks = checks.remove(&shard).unwrap_or_default();
            self.exec_on_one(shard, ops, checks, ack).await
        } else {
            self.exec_across(ops, &holds, &checks, ack, ordered).await
        }
    }

    /// Which keys each shard must hold, and how; which watches it checks.
    #[allow(clippy::type_complexity)]
    fn plan_atomic(
        &self,
        ops: &[KeyOp],
        watches: &[Check],
    ) -> (
        HashMap<ShardId, FastMap<HashedKey, HoldMode>>,
        HashMap<ShardId, Vec<Check>>,
    ) {
        let mut holds: HashMap<ShardId, FastMap<HashedKey, HoldMode>> = HashMap::new();
        // Sized for an even spread: growing a million-key map rehashes it
        // (and faults its pages in) again and again.
        let per_shard = ops.len() / self.node.shards().max(1) + 1;
        for kop in ops {
            let mode = HoldMode::for_op(&kop.op);
            // The op's own key, and those it reaches (RENAME's
            // destination): the op runs on the states these holds return.
            let others = kop.op.other_keys().iter().map(|k| self.hashed(k.clone()));
            let keys = std::iter::once(HashedKey {
                key: kop.key.clone(),
                hash: kop.hash,
            })
            .chain(others);
            for key in keys {
                let slot = holds
                    .entry(self.shard_of(key.hash))
                    .or_insert_with(|| {
                        FastMap::with_capacity_and_hasher(per_shard, Default::default())
                    })
                    .entry(key)
                    .or_insert(mode);
                if mode == HoldMode::Write {
                    *slot = HoldMode::Write;
                }
            }
        }
        let mut checks: HashMap<ShardId, Vec<Check>> = HashMap::new();
        for c in watches {
            let shard = self.shard_of(c.key.hash);
            holds
                .entry(shard)
                .or_default()
                .entry(c.key.clone())
                .or_insert(HoldMode::Read);
            checks.entry(shard).or_default().push(c.clone());
        }
        (holds, checks)
    }

    /// One attempt on one shard; `Ok(None)` means "Busy, retry".
    async fn exec_on_one(
        &self,
        shard: ShardId,
        ops: &[KeyOp],
        checks: Vec<Check>,
        ack: AckLevel,
    ) -> Result<Option<Vec<OpReply>>, TxnError> {
        let ops = ops.to_vec();
        match self
            .ask(shard, |reply| ShardMsg::Exec {
                checks,
                ops,
                ack,
                reply,
            })
            .await?
        {
            Ok(replies) => Ok(Some(replies)),
            Err(Refusal::Conflict(_)) => Err(TxnError::WatchFailed),
            Err(Refusal::Unavailable(why)) => Err(TxnError::Unavailable(why)),
            Err(Refusal::Busy) => Ok(None),
        }
    }

    /// One attempt across shards; `Ok(None)` means "someone held a key, retry".
    /// `ordered`: one shard at a time in `ShardId` order, each waiting for
    /// its keys (see the module docs); otherwise all at once, none waiting.
    async fn exec_across(
        &self,
        ops: &[KeyOp],
        holds: &HashMap<ShardId, FastMap<HashedKey, HoldMode>>,
        checks: &HashMap<ShardId, Vec<Check>>,
        ack: AckLevel,
        ordered: bool,
    ) -> Result<Option<Vec<OpReply>>, TxnError> {
        let txn = self.node.next_txn();
        let mut guard = HoldGuard::new(self, txn);
        let mut overlay = Overlay {
            states: FastMap::with_capacity_and_hasher(ops.len(), Default::default()),
            now_ms: unix_ms(),
            stamps: 0,
            notify: self.node.notifier.active(),
            events: Vec::new(),
            pins: Vec::new(),
        };
        let mut outcome = Ok(());
        let mut shards: Vec<&ShardId> = holds.keys().collect();
        if ordered {
            shards.sort_unstable();
        }
        let mut waits = Vec::with_capacity(holds.len());
        for shard in shards {
            let keys: Vec<(HashedKey, HoldMode)> =
                holds[shard].iter().map(|(k, m)| (k.clone(), *m)).collect();
            let req = PrepareRequest {
                txn,
                checks: checks.get(shard).cloned().unwrap_or_default(),
                holds: keys.clone(),
                want_states: true,
                retry_on_busy: true,
                wait: ordered,
            };
            guard.add(*shard);
            let rx = self.start(*shard, |reply| ShardMsg::Prepare { req, ack, reply })?;
            if ordered {
                let answer = rx.await.map_err(|_| TxnError::ShardGone)?;
                overlay.absorb(keys, answer, &mut outcome);
                if outcome.is_err() {
                    break; // the guard releases what the shards before held
                }
            } else {
                waits.push((keys, rx));
            }
        }
        for (keys, rx) in waits {
            let answer = rx.await.map_err(|_| TxnError::ShardGone)?;
            overlay.absorb(keys, answer, &mut outcome);
        }
        match outcome {
            Ok(()) => {}
            Err(None) => return Ok(None), // guard releases
            Err(Some(e)) => return Err(e),
        }
        let replies: Vec<OpReply> = ops
            .iter()
            .map(|k| k.op.apply(&k.key, &mut overlay))
            .collect();
        // Until the commit is installed (end of this function).
        let _pins = std::mem::take(&mut overlay.pins);
        let mut writes: HashMap<ShardId, Vec<Write>> = HashMap::new();
        for (_, held) in overlay.states {
            let HeldKey {
                key,
                value: state,
                dirty,
                read,
                plain,
                ..
            } = held;
            if dirty {
                // To the shard that holds the key, even if the view has
                // changed since the prepare.
                let home = holds
                    .iter()
                    .find(|(_, keys)| keys.contains_key(&key))
                    .map_or_else(|| self.shard_of(key.hash), |(s, _)| *s);
                let base = elsa_shard::write_base(&state, read, plain.as_ref());
                writes
                    .entry(home)
                    .or_default()
                    .push(Write::new(key, state, base));
            }
        }
        let prepared = Prepared {
            txn,
            // EXEC reads and writes in one step: it starts as it commits.
            start_ts: self.node.hlc.now(),
            holds: holds
                .iter()
                .map(|(s, keys)| (*s, keys.iter().map(|(k, m)| (k.clone(), *m)).collect()))
                .collect(),
            writes,
            ack,
            guard,
        };
        let events = std::mem::take(&mut overlay.events);
        match self.finish_commit(prepared).await {
            Ok(_) => {
                for e in &events {
                    self.node.notifier.raise(e);
                }
                Ok(Some(replies))
            }
            // Aborted by a resolver that found the holds orphaned: retry.
            Err(TxnError::Conflict(_)) => Ok(None),
            Err(e) => Err(e),
        }
    }
}

//! Lone commands: a batch of single-key commands run in order on this
//! shard, parked behind a key a commit holds and run on when it is released.

use bytes::Bytes;
use elsa_lattice::{Ts, Version};

use crate::msg::{BatchAnswer, BatchMode, HoldMode, KeyOp, TxnId};
use crate::ops::OpReply;

use super::*;

impl Shard {
    /// Lone commands, run as `mode` says (see [`BatchMode`]): the replies
    /// of those that ran, a prefix of `ops`, and the first timestamp of
    /// the block a pivot's step reserved.
    pub fn op_lone(&mut self, ops: &[KeyOp], mode: BatchMode) -> (Vec<OpReply>, Option<Ts>) {
        match mode {
            BatchMode::Prefix => (self.run_ops(ops, None), None),
            BatchMode::AllOrNone { block } => {
                let held = ops.iter().any(|k| self.op_blocked(k, None));
                if held {
                    self.stats.busy += 1;
                    return (Vec::new(), None);
                }
                if block == 0 {
                    return (self.run_ops(ops, None), None);
                }
                // The whole pipeline's block, reserved in this step: the
                // held parts run after it, but stamp their writes from it,
                // so a snapshot opened in between (its timestamp past the
                // block) sees them all — it waits out their holds — rather
                // than this step's writes alone.
                let own = ops.iter().map(KeyOp::stamps).sum::<u64>();
                let first = self.hlc.reserve(block.max(own));
                let replies =
                    self.run_stamped(ops, None, (own > 0).then(|| (first, first + own - 1)));
                (replies, Some(first))
            }
            BatchMode::Held { txn, block } => {
                if let Some((_, last)) = block {
                    // From another node's clock, perhaps: later local
                    // commits must still order after these writes.
                    self.hlc.observe(last);
                }
                let replies = self.run_stamped(ops, Some(txn), block);
                self.op_release(txn);
                (replies, None)
            }
        }
    }

    /// [`Shard::run_ops`], stamping writes from `block` (first, last)
    /// when given.
    pub(super) fn run_stamped(
        &mut self,
        ops: &[KeyOp],
        me: Option<TxnId>,
        block: Option<(Ts, Ts)>,
    ) -> Vec<OpReply> {
        self.block = block;
        let replies = self.run_ops(ops, me);
        self.block = None;
        replies
    }

    /// Runs a lone batch in order; if it meets a key a commit holds, the
    /// rest waits here (parked) and runs on when the key is released, so a
    /// lone command waits its turn instead of polling — polls kept losing
    /// to clients that held keys all the time.
    pub(super) fn run_or_park(
        &mut self,
        mut ops: Vec<KeyOp>,
        mut done: Vec<OpReply>,
        writes: Vec<bool>,
        ack: crate::repl::AckLevel,
        reply: BatchReply,
    ) {
        // One read of the clock for the whole step: its writes are stamped
        // from a block reserved now, as an atomic step's are (`op_exec`),
        // not each from the clock — a read of the system clock and a CAS on
        // the node's clock per write. The step runs at one moment on this
        // shard, so a snapshot opened meanwhile is past the block and
        // reads after the step; what a held key stops waits for a step of
        // its own, and a block of its own.
        let stamps: u64 = ops.iter().map(KeyOp::stamps).sum();
        let block = (stamps > 2).then(|| {
            let first = self.hlc.reserve(stamps);
            (first, first + stamps - 1)
        });
        let ran = self.run_stamped(&ops, None, block);
        let n = ran.len();
        done.extend(ran);
        if n == ops.len() {
            return self.respond_batch(ack, reply, BatchAnswer::new(done, Vec::new()), &writes);
        }
        let rest = ops.split_off(n);
        *self.parked_on.entry(rest[0].key.clone()).or_default() += 1;
        self.parked.push_back(Parked {
            ops: rest,
            done,
            writes,
            ack,
            reply,
            since: std::time::Instant::now(),
        });
    }

    /// Which of a lone batch's ops write, for [`Shard::respond_batch`]
    /// (which needs it only with in-region replicas: none, no allocation).
    pub(super) fn writes_of(&self, ops: &[KeyOp]) -> Vec<bool> {
        if self.repl.is_none() {
            return Vec::new();
        }
        ops.iter().map(|k| k.op.is_write()).collect()
    }

    /// Answers a lone batch at `ack`; writes the region's replicas could
    /// not confirm say so (see [`ERR_UNCONFIRMED`]).
    pub(super) fn respond_batch(
        &mut self,
        ack: crate::repl::AckLevel,
        reply: BatchReply,
        answer: BatchAnswer,
        writes: &[bool],
    ) {
        let unconfirmed = if self.repl.is_some() && ack != crate::repl::AckLevel::Local {
            let failed: Vec<OpReply> = answer
                .replies
                .iter()
                .zip(writes)
                .map(|(r, w)| match r {
                    OpReply::Error(_) | OpReply::ErrorText(_) => r.clone(),
                    _ if *w => OpReply::Error(ERR_UNCONFIRMED),
                    _ => r.clone(),
                })
                .collect();
            Some(BatchAnswer {
                replies: failed,
                ..answer.clone()
            })
        } else {
            None
        };
        self.respond_at(ack, reply, answer, unconfirmed);
    }

    /// Runs on the parked batches whose key is free now, oldest first.
    pub(super) fn resume_parked(&mut self) {
        let mut i = 0;
        while i < self.parked.len() {
            let p = &self.parked[i];
            let key = &p.ops[0];
            if self.op_blocked(key, None) {
                i += 1;
                continue;
            }
            let Some(p) = self.parked.remove(i) else {
                break;
            };
            self.unpark_key(&p.ops[0].key);
            self.run_or_park(p.ops, p.done, p.writes, p.ack, p.reply);
        }
    }

    pub(super) fn unpark_key(&mut self, key: &Bytes) {
        if let Some(n) = self.parked_on.get_mut(key) {
            *n -= 1;
            if *n == 0 {
                self.parked_on.remove(key);
            }
        }
    }

    /// Answers the batches parked longer than `limit` with what ran and
    /// the ops that did not (their callers give up with TRYAGAIN): a key
    /// held that long belongs to a commit whose coordinator is stuck.
    pub fn expire_parked(&mut self, limit: std::time::Duration) {
        while self
            .parked
            .front()
            .is_some_and(|p| p.since.elapsed() >= limit)
        {
            let Some(p) = self.parked.pop_front() else {
                break;
            };
            self.unpark_key(&p.ops[0].key);
            let _ = p.reply.send(BatchAnswer::new(p.done, p.ops));
        }
    }

    /// Lone commands, in order; stops at the first one whose key is held.
    pub fn op_batch(&mut self, ops: &[KeyOp]) -> Vec<OpReply> {
        self.run_ops(ops, None)
    }

    /// Lone commands, in order; stops at the first one whose key is held
    /// by a transaction other than `me`.
    pub(super) fn run_ops(&mut self, ops: &[KeyOp], me: Option<TxnId>) -> Vec<OpReply> {
        let now_ms = unix_ms();
        self.memory_check(now_ms);
        let refuse_writes = self.write_refusal().is_some();
        let mut out = Vec::with_capacity(ops.len());
        for kop in ops {
            let mode = HoldMode::for_op(&kop.op);
            if refuse_writes && mode == HoldMode::Write {
                out.push(OpReply::Error(ERR_WAL));
                continue;
            }
            if self.op_blocked(kop, me) {
                self.stats.busy += 1;
                break;
            }
            let mut view = LoneView {
                shard: self,
                key: &kop.key,
                hash: kop.hash,
                now_ms,
                stamp: (0, Version::ZERO),
                found: None,
                touch: !kop.op.no_touch(),
            };
            out.push(kop.op.apply(&kop.key, &mut view));
            if let (Some(found), HoldMode::Read) = (view.found, mode) {
                if found {
                    self.stats.keyspace_hits += 1;
                } else {
                    self.stats.keyspace_misses += 1;
                }
            }
        }
        self.stats.ops += out.len() as u64;
        out
    }
}

/// A [`KeyView`] over the shard's table for one op: reads the stored
/// state, installs writes as new lattices committed now. The op's own key
/// comes with its hash; the others it touches (RENAME's destination) are
/// hashed here.
struct LoneView<'a> {
    shard: &'a mut Shard,
    key: &'a [u8],
    hash: u64,
    now_ms: u64,
    /// The last [`KeyView::stamp`].
    stamp: (Ts, Version),
    /// Whether the op's first lookup found something (keyspace hits and
    /// misses); `None` until it looks.
    found: Option<bool>,
    /// Whether a lookup counts as an access (not for OBJECT, MEMORY
    /// USAGE, TYPE…: Redis's `LOOKUP_NOTOUCH`).
    touch: bool,
}

impl LoneView<'_> {
    /// True when `new` events are on and `key` shows nothing now (so a
    /// write that makes it show something creates it).
    fn absent(&self, key: &[u8]) -> bool {
        if !self.shard.notifies(crate::notify::NEW) {
            return false;
        }
        let v = self.shard.lookup(self.hash_of(key), key, self.now_ms);
        !crate::ops::shows(v.as_ref(), self.now_ms)
    }

    fn hash_of(&self, key: &[u8]) -> u64 {
        if key == self.key {
            self.hash
        } else {
            std::hash::BuildHasher::hash_one(self.shard.table.hasher(), key)
        }
    }
}

impl KeyView for LoneView<'_> {
    fn lookup(&mut self, key: &[u8]) -> Option<Value> {
        let hash = self.hash_of(key);
        let v = if self.touch {
            // One probe: the lookup is the access that touches the clock.
            self.shard
                .table
                .get_touched(hash, key)
                .and_then(|rec| value_of(rec, self.now_ms))
        } else {
            self.shard.lookup(hash, key, self.now_ms)
        };
        if self.found.is_none() {
            self.found = Some(v.is_some());
        }
        v
    }

    fn set_access(&mut self, key: &[u8], to: crate::evict::Restored) -> bool {
        let hash = self.hash_of(key);
        self.shard.table.set_access(hash, key, to)
    }

    fn access(&mut self, key: &[u8]) -> Option<(u32, crate::evict::AccessClock)> {
        let hash = self.hash_of(key);
        let clock = *self.shard.table.clock();
        self.shard.table.get(hash, key).map(|r| (r.access(), clock))
    }

    fn store(&mut self, key: &[u8], value: Option<Value>) {
        let new = value.is_some() && self.absent(key);
        let ts = self.shard.next_ts();
        let version = Version::new(ts, self.shard.node);
        let hash = self.hash_of(key);
        let start = self.shard.unit_first.unwrap_or(ts);
        self.shard
            .store(hash, key, value, start, version, self.now_ms);
        if new {
            self.shard.raise(crate::notify::NEW, "new", key);
        }
    }

    fn merge(&mut self, key: &[u8], delta: KeyState) {
        let absent = self.absent(key);
        let (start_ts, version) = self.stamp;
        let hash = self.hash_of(key);
        self.shard
            .merge_local(hash, key, delta, start_ts, version, self.now_ms);
        if absent && !self.absent(key) {
            self.shard.raise(crate::notify::NEW, "new", key);
        }
    }

    fn notifies(&self, class: u32) -> bool {
        self.shard.notifies(class)
    }

    fn notify(&mut self, class: u32, name: &'static str, key: &[u8]) {
        self.shard.raise(class, name, key);
    }

    fn merge_unseen(&mut self, key: &[u8], delta: KeyState) {
        self.shard.unseen = true;
        self.merge(key, delta);
        self.shard.unseen = false;
    }

    fn stamp(&mut self) -> (Ts, Version) {
        let ts = self.shard.next_ts();
        let start = self.shard.unit_first.unwrap_or(ts);
        self.stamp = (start, Version::new(ts, self.shard.node));
        self.stamp
    }

    fn now_ms(&self) -> u64 {
        self.now_ms
    }

    fn id_floor_ms(&mut self) -> u64 {
        // Its shard's flushes ran on this thread before.
        crate::ops::streams::id_floor::floor_ms()
    }

    fn hll_base(&mut self, key: &[u8]) -> Option<elsa_lattice::Counter> {
        let hash = self.hash_of(key);
        Some(match self.shard.table.get(hash, key) {
            None => elsa_lattice::Counter::default(),
            Some(rec) => match rec.typed() {
                Some(s) => (*s.string).clone(),
                None => (*rec.as_typed().string).clone(),
            },
        })
    }

    fn value_version(&mut self, key: &[u8]) -> Option<Version> {
        let hash = self.hash_of(key);
        let rec = self.shard.table.get(hash, key)?;
        (!rec.is_typed() && rec.live_value(self.now_ms).is_some()).then(|| rec.order().0)
    }
}

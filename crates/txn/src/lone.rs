//! Lone commands: each is its own one-key transaction. A pipelined run of
//! them is answered as if its commands ran one at a time in the client's
//! order (as Redis runs them), one reply per command, while the work is
//! still batched per shard:
//!
//! - **One shard** (always so with one worker, and for every command that
//!   is not pipelined): one `Batch` message; the shard runs the ops in
//!   order and stops at a key another commit holds; the rest is resubmitted.
//! - **Several shards**: sending each shard its part in parallel would let
//!   the parts run at different moments — a reader pipelining `GET x; GET
//!   y` could see x after a concurrent `MSET x y` and y before it, and a
//!   writer's `SET data; SET flag` could become visible flag first. So the
//!   parts are made to run at one moment, by holds, without anyone
//!   waiting while holding: every shard but one (the *pivot*) first holds
//!   its part's keys; the pivot then runs its part in one step if none of
//!   its keys is held (else everything is released and retried); then the
//!   others run theirs under their holds and release them. Every part's
//!   keys are untouched from the pivot's step until they run, so the whole
//!   run is equivalent to running all of it in that step — to a snapshot
//!   too: the pivot's step reserves one block of timestamps for every
//!   part's writes, and the held parts stamp theirs from it. (Stamped when
//!   they ran, after the pivot's, a snapshot drawn in between saw the
//!   pivot's writes and, once the holds were gone, not the others': a
//!   later command of the pipeline without an earlier one.) The pivot is
//!   chosen so that with the thread's own shard and one other (two
//!   workers) this costs one message, as a plain parallel send did.
//!   If a key is held, the rest of the pipeline runs instead *run by run*
//!   (each maximal run of consecutive ops on one shard is one message,
//!   awaited before the next): still in order, and a run waits only for
//!   its own keys, so clients holding keys all the time cannot starve it.
//!
//! Failures are per command: an op that did not run answers an error that
//! says so (`TRYAGAIN`, shard gone); one whose shard went away after it was
//! sent answers that its outcome is unknown; the others keep their replies.

use elsa_shard::{
    AckLevel, BatchMode, HashedKey, HoldMode, KeyOp, OpReply, PrepareRequest, ShardMsg,
};

use crate::atomic::HoldGuard;
use crate::router::{Coordinator, Retry, ShardId};
use crate::TxnError;

/// One lone op's outcome: its reply, or why it has none.
pub type LoneReply = Result<OpReply, TxnError>;

/// What one attempt at running ops achieved.
enum Attempt {
    /// Every op has its outcome.
    Done(Vec<LoneReply>),
    /// The first ops ran; the rest is next, at once.
    Progress(Vec<LoneReply>, Vec<KeyOp>),
    /// The first ops ran; the rest met a held key: retry after a backoff.
    Busy(Vec<LoneReply>, Vec<KeyOp>),
}

impl Coordinator {
    /// Runs lone operations; one outcome per op, in the order given. With
    /// synchronous cross-region replication, a write is answered once
    /// every region has it (or with the error saying it has not).
    /// An op that reaches other keys (RENAME) must go through
    /// [`Coordinator::run_atomic`] instead: a lone batch runs on the op's
    /// own shard only.
    pub async fn run_lone(&self, ops: Vec<KeyOp>, ack: AckLevel) -> Vec<LoneReply> {
        debug_assert!(
            ops.iter().all(|k| k.op.other_keys().is_empty()),
            "ops that reach other keys run atomically"
        );
        let written = self.keys_to_replicate(ops.iter().filter(|k| k.op.is_write()), ack);
        let is_write: Vec<bool> = match written {
            Some(_) => ops.iter().map(|k| k.op.is_write()).collect(),
            None => Vec::new(),
        };
        let mut replies = self.run_lone_here(ops, ack).await;
        if let Err(e) = self.replicate(written).await {
            for (r, w) in replies.iter_mut().zip(is_write) {
                if w && matches!(r, Ok(reply) if !matches!(reply, OpReply::Error(_) | OpReply::ErrorText(_)))
                {
                    *r = Err(e.clone());
                }
            }
        }
        replies
    }

    async fn run_lone_here(&self, mut ops: Vec<KeyOp>, ack: AckLevel) -> Vec<LoneReply> {
        let mut out = Vec::new();
        let mut retry = Retry::new();
        // Once the all-at-once run across shards has met a held key, the
        // rest goes run by run: a part of a pipeline waits only for its own
        // keys then, so busy neighbours cannot starve it.
        let mut contended = false;
        while !ops.is_empty() {
            // Routed again on every attempt: Busy may also mean a shard is
            // no longer the primary of a key (the view changed).
            let first = self.shard_of(ops[0].hash);
            let n = ops.len();
            let attempt = if ops[1..].iter().all(|k| self.shard_of(k.hash) == first) {
                // One shard (the common case: no route list to build).
                self.lone_on_one(first, ops, ack).await
            } else if !contended {
                let route: Vec<ShardId> = ops.iter().map(|k| self.shard_of(k.hash)).collect();
                self.lone_across(&route, ops, ack).await
            } else {
                // The first run of ops on one shard; what follows waits.
                let run = ops
                    .iter()
                    .take_while(|k| self.shard_of(k.hash) == first)
                    .count();
                let rest = ops.split_off(run);
                match self.lone_on_one(first, ops, ack).await {
                    Attempt::Done(replies) => Attempt::Progress(replies, rest),
                    Attempt::Busy(replies, mut left) | Attempt::Progress(replies, mut left) => {
                        left.extend(rest);
                        Attempt::Busy(replies, left)
                    }
                }
            };
            match attempt {
                Attempt::Done(replies) if out.is_empty() => return replies,
                Attempt::Done(replies) => {
                    out.extend(replies);
                    break;
                }
                Attempt::Progress(replies, rest) => {
                    out.extend(replies);
                    ops = rest;
                }
                Attempt::Busy(replies, rest) => {
                    contended |= replies.is_empty() && rest.len() == n;
                    out.extend(replies);
                    ops = rest;
                    if let Err(e) = retry.wait().await {
                        out.extend(ops.iter().map(|_| Err(e.clone())));
                        break;
                    }
                }
            }
        }
        out
    }

    /// Every op on one shard: one message, run in order up to a held key.
    async fn lone_on_one(&self, shard: ShardId, ops: Vec<KeyOp>, ack: AckLevel) -> Attempt {
        let n = ops.len();
        let rx = match self.start(shard, |reply| ShardMsg::Batch {
            ops,
            mode: BatchMode::Prefix,
            ack,
            reply,
        }) {
            Ok(rx) => rx,
            Err(e) => return Attempt::Done(vec![Err(e); n]),
        };
        match rx.await {
            Ok(answer) => {
                let replies = answer.replies.into_iter().map(Ok).collect();
                if answer.rest.is_empty() {
                    Attempt::Done(replies)
                } else {
                    Attempt::Busy(replies, answer.rest)
                }
            }
            Err(_) => Attempt::Done(vec![Err(TxnError::Lost); n]),
        }
    }

    /// Ops on several shards, run as of one moment (see the module doc);
    /// all of them or, when a key is held, none (`Busy` with no reply).
    async fn lone_across(&self, route: &[ShardId], ops: Vec<KeyOp>, ack: AckLevel) -> Attempt {
        // Each shard's part, in the client's order within it.
        let mut parts: Vec<(ShardId, Vec<usize>)> = Vec::new();
        for (i, s) in route.iter().enumerate() {
            match parts.iter_mut().find(|p| p.0 == *s) {
                Some(p) => p.1.push(i),
                None => parts.push((*s, vec![i])),
            }
        }
        let pivot = self.pivot(&parts);
        let txn = self.node.next_txn();
        let mut guard = HoldGuard::new(self, txn);
        let not_run = |e: TxnError| Attempt::Done(vec![Err(e); route.len()]);

        // 1. Hold every other part's keys (nothing runs yet).
        let mut waits = Vec::with_capacity(parts.len());
        for (shard, idx) in parts.iter().filter(|p| p.0 != pivot) {
            let mut holds: Vec<(HashedKey, HoldMode)> = Vec::with_capacity(idx.len());
            for &i in idx {
                let k = &ops[i];
                let mode = HoldMode::for_op(&k.op);
                match holds.iter_mut().find(|(h, _)| h.key == k.key) {
                    Some(h) if mode == HoldMode::Write => h.1 = mode,
                    Some(_) => {}
                    None => holds.push((
                        HashedKey {
                            key: k.key.clone(),
                            hash: k.hash,
                        },
                        mode,
                    )),
                }
            }
            let req = PrepareRequest {
                txn,
                checks: Vec::new(),
                holds,
                want_states: false,
                retry_on_busy: true,
                wait: false,
            };
            guard.add(*shard);
            match self.start(*shard, |reply| ShardMsg::Prepare { req, ack, reply }) {
                Ok(rx) => waits.push(rx),
                Err(e) => return not_run(e),
            }
        }
        let mut held = true;
        for rx in waits {
            match rx.await {
                Ok(Ok(_)) => {}
                Ok(Err(_)) => held = false,
                // Nothing ran anywhere; the guard releases what was held.
                Err(_) => return not_run(TxnError::ShardGone),
            }
        }
        if !held {
            return Attempt::Busy(Vec::new(), ops);
        }

        // 2. The pivot runs its part in one step, unless a key is held.
        let mut out: Vec<Option<LoneReply>> = vec![None; ops.len()];
        let pivot_idx: Vec<usize> = parts
            .iter()
            .find(|p| p.0 == pivot)
            .map(|p| p.1.clone())
            .unwrap_or_default();
        // Its step reserves one block of timestamps for every part's
        // writes (see `BatchMode::AllOrNone`): its own first, then each
        // held part's in turn.
        let pivot_ops: Vec<KeyOp> = pivot_idx.iter().map(|&i| ops[i].clone()).collect();
        let stamps: Vec<u64> = parts
            .iter()
            .map(|(_, idx)| idx.iter().map(|&i| ops[i].stamps()).sum())
            .collect();
        let answer = match self.start(pivot, |reply| ShardMsg::Batch {
            ops: pivot_ops,
            mode: BatchMode::AllOrNone {
                block: stamps.iter().sum(),
            },
            ack,
            reply,
        }) {
            Ok(rx) => rx.await.map_err(|_| TxnError::Lost),
            Err(e) => return not_run(e),
        };
        // Where the next part's slice of the block starts.
        let mut next_stamp = None;
        match answer {
            Ok(a) if a.replies.len() == pivot_idx.len() => {
                for (&i, r) in pivot_idx.iter().zip(a.replies) {
                    out[i] = Some(Ok(r));
                }
                let own = parts
                    .iter()
                    .position(|p| p.0 == pivot)
                    .map_or(0, |p| stamps[p]);
                next_stamp = a.block.map(|first| first + own);
            }
            Ok(_) => return Attempt::Busy(Vec::new(), ops), // held: retry
            // Sent, not answered: it may have run, and its block is not
            // known. The others' keys are held by us, so they run
            // regardless, stamped when they run (the outcome the client
            // gets is unknown either way).
            Err(e) => {
                for &i in &pivot_idx {
                    out[i] = Some(Err(e.clone()));
                }
            }
        }

        // 3. The others run theirs under their holds, which they release.
        guard.disarm();
        let mut runs = Vec::with_capacity(parts.len());
        for ((shard, idx), n) in parts.iter().zip(&stamps).filter(|(p, _)| p.0 != pivot) {
            let part: Vec<KeyOp> = idx.iter().map(|&i| ops[i].clone()).collect();
            let block = match next_stamp.as_mut() {
                Some(first) if *n > 0 => {
                    let slice = (*first, *first + n - 1);
                    *first += n;
                    Some(slice)
                }
                _ => None,
            };
            let rx = self.start(*shard, |reply| ShardMsg::Batch {
                ops: part,
                mode: BatchMode::Held { txn, block },
                ack,
                reply,
            });
            runs.push((idx, rx));
        }
        for (idx, rx) in runs {
            let got = match rx {
                Ok(rx) => rx.await.map_err(|_| TxnError::Lost),
                Err(e) => Err(e),
            };
            match got {
                Ok(answer) => {
                    let mut replies = answer.replies.into_iter();
                    for &i in idx {
                        // Under our holds every op runs; a shorter answer
                        // would be a bug, reported rather than hidden.
                        out[i] = Some(replies.next().ok_or(TxnError::Lost));
                    }
                }
                Err(e) => {
                    for &i in idx {
                        out[i] = Some(Err(e.clone()));
                    }
                }
            }
        }
        Attempt::Done(
            out.into_iter()
                .map(|r| r.unwrap_or(Err(TxnError::Lost)))
                .collect(),
        )
    }

    /// The part that runs first, in one step: with exactly one part away
    /// from this thread, that one (the thread's own part is then held and
    /// run inline: one message in all); else this thread's own part if it
    /// has one (held parts cost a message each way), else the first.
    fn pivot(&self, parts: &[(ShardId, Vec<usize>)]) -> ShardId {
        let away: Vec<ShardId> = parts
            .iter()
            .map(|p| p.0)
            .filter(|s| !self.is_inline(*s))
            .collect();
        if away.len() == 1 {
            return away[0];
        }
        parts
            .iter()
            .map(|p| p.0)
            .find(|s| self.is_inline(*s))
            .unwrap_or(parts[0].0)
    }
}

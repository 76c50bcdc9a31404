//! Lone commands: each is its own one-key transaction, committed by its
//! shard in one step. A pipelined run of them is split into one message per
//! shard (order kept within each shard, which is all that a key can observe),
//! sent in parallel, and answered in the client's order.

use elsa_shard::{KeyOp, OpReply, ShardMsg};

use crate::router::{backoff, Coordinator};
use crate::TxnError;

impl Coordinator {
    /// Runs lone operations; answers in the order given.
    pub async fn run_lone(&self, ops: Vec<KeyOp>) -> Result<Vec<OpReply>, TxnError> {
        let shards = self.node.shards();
        let total = ops.len();
        let first = ops.first().map_or(0, |k| self.shard_of(k.hash));
        if ops.iter().all(|k| self.shard_of(k.hash) == first) {
            return self.run_lone_on(first, ops).await;
        }
        // (shard, positions in the client's order, ops) still to run.
        let mut pending: Vec<(usize, Vec<usize>, Vec<KeyOp>)> = Vec::new();
        {
            let mut per_shard: Vec<(Vec<usize>, Vec<KeyOp>)> = vec![Default::default(); shards];
            for (i, kop) in ops.into_iter().enumerate() {
                let s = self.shard_of(kop.hash);
                per_shard[s].0.push(i);
                per_shard[s].1.push(kop);
            }
            for (shard, (idx, ops)) in per_shard.into_iter().enumerate() {
                if !ops.is_empty() {
                    pending.push((shard, idx, ops));
                }
            }
        }
        let mut replies: Vec<OpReply> = vec![OpReply::Nil; total];
        let mut attempt = 0;
        loop {
            let mut waits = Vec::with_capacity(pending.len());
            for (shard, idx, ops) in pending.drain(..) {
                let rx = self.start(shard, |reply| ShardMsg::Batch { ops, reply })?;
                waits.push((shard, idx, rx));
            }
            for (shard, idx, rx) in waits {
                let (got, rest) = rx.await.map_err(|_| TxnError::ShardGone)?;
                let done = got.len();
                for (i, r) in idx.iter().zip(got) {
                    replies[*i] = r;
                }
                if !rest.is_empty() {
                    // A held key stopped the shard there; resubmit the rest.
                    pending.push((shard, idx[done..].to_vec(), rest));
                }
            }
            if pending.is_empty() {
                return Ok(replies);
            }
            backoff(attempt).await;
            attempt += 1;
        }
    }

    /// All ops on one shard (always so with one worker, and for every lone
    /// command that is not pipelined): no regrouping, no index bookkeeping.
    async fn run_lone_on(
        &self,
        shard: usize,
        mut ops: Vec<KeyOp>,
    ) -> Result<Vec<OpReply>, TxnError> {
        let mut replies = Vec::new();
        let mut attempt = 0;
        loop {
            let (mut got, rest) = self
                .ask(shard, |reply| ShardMsg::Batch { ops, reply })
                .await?;
            if replies.is_empty() {
                replies = got;
            } else {
                replies.append(&mut got);
            }
            if rest.is_empty() {
                return Ok(replies);
            }
            ops = rest;
            backoff(attempt).await;
            attempt += 1;
        }
    }
}

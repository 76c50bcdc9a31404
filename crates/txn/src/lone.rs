//! Lone commands: each is its own one-key transaction, committed by its
//! shard in one step. A pipelined run of them is split into one message per
//! shard (order kept within each shard, which is all that a key can observe),
//! sent in parallel, and answered in the client's order.

use elsa_shard::{KeyOp, OpReply, ShardMsg};

use crate::router::{backoff, Coordinator, ShardId};
use crate::TxnError;

impl Coordinator {
    /// Runs lone operations; answers in the order given. With synchronous
    /// cross-region replication, answers once every region has the writes.
    pub async fn run_lone(&self, ops: Vec<KeyOp>) -> Result<Vec<OpReply>, TxnError> {
        let written = self.keys_to_replicate(ops.iter().filter(|k| k.op.is_write()));
        let replies = self.run_lone_here(ops).await?;
        self.replicate(written).await?;
        Ok(replies)
    }

    async fn run_lone_here(&self, ops: Vec<KeyOp>) -> Result<Vec<OpReply>, TxnError> {
        let total = ops.len();
        let Some(first) = ops.first().map(|k| self.shard_of(k.hash)) else {
            return Ok(Vec::new());
        };
        if ops.iter().all(|k| self.shard_of(k.hash) == first) {
            return self.run_lone_on(first, ops).await;
        }
        // (shard, positions in the client's order, ops) still to run; few
        // shards per batch, so a linear search beats a map.
        let mut pending: Vec<(ShardId, Vec<usize>, Vec<KeyOp>)> = Vec::new();
        for (i, kop) in ops.into_iter().enumerate() {
            let s = self.shard_of(kop.hash);
            match pending.iter_mut().find(|p| p.0 == s) {
                Some(p) => {
                    p.1.push(i);
                    p.2.push(kop);
                }
                None => pending.push((s, vec![i], vec![kop])),
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
        shard: ShardId,
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

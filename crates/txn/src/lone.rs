//! Lone commands: each is its own one-key transaction, committed by its
//! shard in one step. A pipelined run of them is split into one message per
//! shard (order kept within each shard, which is all that a key can observe),
//! sent in parallel, and answered in the client's order.

use elsa_shard::{KeyOp, OpReply, ShardMsg};

use crate::router::{Coordinator, Retry, ShardId};
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
        if !ops.iter().all(|k| self.shard_of(k.hash) == first) {
            let todo = ops.into_iter().enumerate().collect();
            let replies = vec![OpReply::Nil; total];
            return self.run_lone_rest(replies, todo, Retry::new()).await;
        }
        // All on one shard (always so with one worker, and for every lone
        // command that is not pipelined): one message, no bookkeeping
        // unless something is left over.
        let (mut replies, rest) = self
            .ask(first, |reply| ShardMsg::Batch { ops, reply })
            .await?;
        if rest.is_empty() {
            return Ok(replies);
        }
        let done = replies.len();
        replies.resize(total, OpReply::Nil);
        let todo = rest
            .into_iter()
            .enumerate()
            .map(|(i, k)| (done + i, k))
            .collect();
        let mut retry = Retry::new();
        retry.wait().await?;
        self.run_lone_rest(replies, todo, retry).await
    }

    /// Runs the ops still to do, grouped by shard (order kept within each
    /// shard, which is all that a key can observe), until none is left. A
    /// shard stops at a held key — or runs nothing when it is no longer the
    /// key's primary — and the rest is routed again and resubmitted.
    async fn run_lone_rest(
        &self,
        mut replies: Vec<OpReply>,
        mut todo: Vec<(usize, KeyOp)>,
        mut retry: Retry,
    ) -> Result<Vec<OpReply>, TxnError> {
        loop {
            // Few shards per batch, so a linear search beats a map.
            let mut groups: Vec<(ShardId, Vec<usize>, Vec<KeyOp>)> = Vec::new();
            for (i, kop) in todo.drain(..) {
                let s = self.shard_of(kop.hash);
                match groups.iter_mut().find(|g| g.0 == s) {
                    Some(g) => {
                        g.1.push(i);
                        g.2.push(kop);
                    }
                    None => groups.push((s, vec![i], vec![kop])),
                }
            }
            let mut waits = Vec::with_capacity(groups.len());
            for (shard, idx, ops) in groups {
                let rx = self.start(shard, |reply| ShardMsg::Batch { ops, reply })?;
                waits.push((idx, rx));
            }
            for (idx, rx) in waits {
                let (got, rest) = rx.await.map_err(|_| TxnError::ShardGone)?;
                let done = got.len();
                for (i, r) in idx.iter().zip(got) {
                    replies[*i] = r;
                }
                todo.extend(idx[done..].iter().copied().zip(rest));
            }
            if todo.is_empty() {
                return Ok(replies);
            }
            todo.sort_by_key(|(i, _)| *i);
            retry.wait().await?;
        }
    }
}

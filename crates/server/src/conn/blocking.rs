//! Blocking pops (BLPOP BRPOP BLMPOP BLMOVE BRPOPLPUSH, and BZPOPMIN
//! BZPOPMAX BZMPOP) outside a transaction: the connection tries the command's non-blocking form
//! and, while it finds nothing, waits and tries again until the timeout.
//!
//! A try is woken by any push a client of this node made (the
//! connection that ran it rings [`Shared::pushes`] when its batch is
//! done), and otherwise every [`POLL`]: a push made through another node
//! of the region, or arriving from another region, is seen by the next
//! poll. Each try is the ordinary atomic command, so an element is handed
//! to one client of the region only; unlike Redis, several clients
//! blocked on one key are not served in the order they blocked
//! (`docs/commands.md`).
//!
//! While it waits the connection keeps reading (a client that leaves is
//! noticed, and unblocks nothing) and keeps sending the replies of the
//! commands pipelined before the blocking one; commands pipelined after
//! it wait, as in Redis.

use std::time::Duration;

use elsa_shard::{Op, OpReply};
use tokio::time::Instant;

use super::{write_op, write_shaped, Conn};
use crate::clients::unblock;
use crate::cmd::{DataCmd, Shape};

/// Longest wait between two tries when nothing on this node rang.
pub(crate) const POLL: Duration = Duration::from_millis(20);

/// True when a try found nothing to pop: LMPOP's and ZMPOP's null array,
/// LMOVE's nil.
fn found_nothing(r: &[OpReply]) -> bool {
    matches!(r.first(), Some(OpReply::NilArray | OpReply::Nil))
}

impl Conn {
    /// Runs a blocking command: answers as soon as a try finds something
    /// (or fails), else a null array once `timeout_ms` passed (0: never).
    pub(super) async fn run_blocking(&mut self, dc: DataCmd, timeout_ms: u64) {
        let deadline = (timeout_ms > 0).then(|| Instant::now() + Duration::from_millis(timeout_ms));
        let shape = dc.shape;
        let mut first = true;
        let shared = self.shared.clone();
        // Counted in INFO's blocked_clients and flagged `b` while it waits;
        // CLIENT KILL and CLIENT UNBLOCK ring `entry`.
        let entry = self.client.client.clone();
        if let Some(name) = self.cl.blocking_cmd.take() {
            self.publish_batch(Some((name, None)));
        }
        let _blocked = self.client.block(deadline.is_some(), true);
        // XREAD … BLOCK reads `$` as the last IDs when it blocks.
        let dc = match self.last_ids_read(dc).await {
            Ok(dc) => dc,
            Err(r) => return write_shaped(&mut self.w(), shape, &r),
        };
        loop {
            let rang = shared.pushes.notified();
            tokio::pin!(rang);
            rang.as_mut().enable();
            let tried = match self.run_once(dc.clone()).await {
                Ok(r) if !first && is_stream_read(&dc) && is_refusal(&r) => {
                    self.stream_gone(&dc, r).await
                }
                Ok(r) if !first && is_wrongtype(&r) => self.without_wrong_types(&dc, r).await,
                r => Some(r),
            };
            match tried {
                Some(Err(e)) => return self.w().error(&e.to_string()),
                Some(Ok(r)) if !found_nothing(&r) => {
                    return write_shaped(&mut self.w(), shape, &r);
                }
                _ => {}
            }
            first = false;
            let poll = tokio::time::sleep(POLL);
            tokio::pin!(poll);
            loop {
                let past_due = deadline.is_some_and(|d| Instant::now() >= d);
                if past_due {
                    return write_op(&mut self.w(), &OpReply::NilArray);
                }
                let until = deadline.unwrap_or_else(|| Instant::now() + Duration::from_secs(3600));
                let write = !self.out.is_empty();
                let read = self.inbuf.len()
                    <= self
                        .shared
                        .runtime
                        .query_buffer_limit
                        .load(std::sync::atomic::Ordering::Relaxed);
                tokio::select! {
                    _ = entry.woken() => {
                        if entry.is_killed() {
                            self.s.closing = true;
                            return;
                        }
                        match entry.take_unblock() {
                            unblock::TIMEOUT => return write_op(&mut self.w(), &OpReply::NilArray),
                            unblock::ERROR => {
                                return self.w().error("UNBLOCKED client unblocked via CLIENT UNBLOCK")
                            }
                            _ => {}
                        }
                    }
                    _ = &mut rang => break,
                    _ = &mut poll => break,
                    _ = tokio::time::sleep_until(until) => {}
                    r = self.stream.readable(), if read => {
                        if r.is_err() || !self.read_some() {
                            // The client left: nothing to answer.
                            self.s.closing = true;
                            return;
                        }
                    }
                    r = self.stream.writable(), if write => {
                        if r.is_err() || !self.write_some() {
                            self.s.closing = true;
                            return;
                        }
                    }
                }
            }
        }
    }
}

/// True for a blocking XREAD or XREADGROUP.
fn is_stream_read(dc: &DataCmd) -> bool {
    matches!(dc.ops.first(), Some((_, Op::Streams(x))) if x.block_ms().is_some())
}

/// True when a try was refused (WRONGTYPE, NOGROUP…).
fn is_refusal(r: &[OpReply]) -> bool {
    matches!(r.first(), Some(OpReply::Error(_) | OpReply::ErrorText(_)))
}

impl Conn {
    /// A retry of a blocked XREAD or XREADGROUP was refused: a key it
    /// waits on changed type, went, or lost its group. XREAD keeps waiting
    /// (Redis serves it from the keys that are streams when written);
    /// XREADGROUP answers Redis's errors for a key gone or of another type
    /// (`UNBLOCKED`) and for its group gone (`NOGROUP`). `None`: keep
    /// waiting.
    async fn stream_gone(
        &self,
        dc: &DataCmd,
        refused: Vec<OpReply>,
    ) -> Option<Result<Vec<OpReply>, elsa_txn::TxnError>> {
        let (key, Op::Streams(x)) = dc.ops.first()? else {
            return Some(Ok(refused));
        };
        if !x.is_group_read() {
            return None;
        }
        for k in std::iter::once(key).chain(x.other_keys()) {
            let kind = self
                .run_once(DataCmd {
                    ops: vec![(k.clone(), Op::Type)],
                    shape: Shape::One,
                })
                .await;
            if !matches!(kind.as_deref(), Ok([OpReply::Status("stream")])) {
                return Some(Ok(vec![OpReply::Error(
                    "UNBLOCKED the stream key no longer exists",
                )]));
            }
        }
        Some(Ok(vec![OpReply::Error(
            "NOGROUP the consumer group this client was blocked on no longer exists",
        )]))
    }

    /// A blocking XREAD that reads some key from `$`: the same XREAD
    /// reading from the keys' last IDs now, or the refusal (WRONGTYPE)
    /// to answer.
    async fn last_ids_read(&self, dc: DataCmd) -> Result<DataCmd, Vec<OpReply>> {
        let Some((key, Op::Streams(x))) = dc.ops.first() else {
            return Ok(dc);
        };
        let Some(ask) = x.last_ids_wanted() else {
            return Ok(dc);
        };
        let ids = match self
            .run_once(DataCmd {
                ops: vec![(key.clone(), Op::Streams(ask))],
                shape: Shape::One,
            })
            .await
        {
            Ok(mut r) => match r.pop() {
                Some(OpReply::Array(ids)) => ids,
                Some(other) => return Err(vec![other]),
                None => return Ok(dc),
            },
            Err(_) => return Ok(dc),
        };
        match x.reading_from(&ids) {
            Some(read) => Ok(DataCmd {
                ops: vec![(key.clone(), Op::Streams(read))],
                shape: dc.shape,
            }),
            None => Ok(dc),
        }
    }

    /// A retry answered WRONGTYPE: some key the client waits on is now of
    /// another type. A key that is not a list (sorted set) only stops
    /// being waited on — Redis serves a blocked client from the key that
    /// was pushed to, whatever the others hold — so the pop is tried again
    /// without such keys; but an LMOVE that found its source non-empty
    /// and its destination of another type answers the error, as Redis
    /// does. `None`: nothing found, keep waiting.
    async fn without_wrong_types(
        &self,
        dc: &DataCmd,
        wrongtype: Vec<OpReply>,
    ) -> Option<Result<Vec<OpReply>, elsa_txn::TxnError>> {
        let (key, op) = dc.ops.first()?;
        let want = match op {
            Op::Lists(_) => "list",
            Op::ZSets(_) => "zset",
            _ => return Some(Ok(wrongtype)),
        };
        let mut waitable = Vec::new();
        for k in std::iter::once(key).chain(op.other_keys()) {
            let kind = self
                .run_once(DataCmd {
                    ops: vec![(k.clone(), Op::Type)],
                    shape: Shape::One,
                })
                .await;
            if let Ok(r) = kind {
                if matches!(r.first(), Some(OpReply::Status(t)) if *t == want || *t == "none") {
                    waitable.push(k.clone());
                }
            }
        }
        let keep = |k: &[u8]| waitable.iter().any(|w| &w[..] == k);
        let retry = match op {
            Op::Lists(l) if l.retain_keys(|_| true).is_none() => {
                // LMOVE: its source still a list means the destination
                // is of another type.
                return keep(key).then_some(Ok(wrongtype));
            }
            Op::Lists(l) => Op::Lists(l.retain_keys(keep)?),
            Op::ZSets(z) => Op::ZSets(z.retain_keys(keep)?),
            _ => return Some(Ok(wrongtype)),
        };
        let key = match &retry {
            Op::Lists(l) => l.key().clone(),
            Op::ZSets(z) => z.key().clone(),
            _ => key.clone(),
        };
        Some(
            self.run_once(DataCmd {
                ops: vec![(key, retry)],
                shape: dc.shape,
            })
            .await,
        )
    }
}

/// True for a command that may make a list or sorted set non-empty: what
/// wakes blocked clients.
pub(super) fn may_wake_a_blocked_pop(name: &str) -> bool {
    matches!(
        name,
        "zadd"
            | "zincrby"
            | "zunionstore"
            | "zinterstore"
            | "zdiffstore"
            | "zrangestore"
            | "lpush"
            | "rpush"
            | "lpushx"
            | "rpushx"
            | "linsert"
            | "lset"
            | "lmove"
            | "rpoplpush"
            | "blmove"
            | "brpoplpush"
            | "rename"
            | "renamenx"
            | "copy"
            | "xadd"
            | "exec"
            | "commit"
    )
}

fn is_wrongtype(r: &[OpReply]) -> bool {
    matches!(r.first(), Some(OpReply::Error(e)) if *e == elsa_shard::ops::WRONGTYPE)
}

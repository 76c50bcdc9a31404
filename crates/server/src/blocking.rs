//! Blocking list commands (BLPOP BRPOP BLMPOP BLMOVE BRPOPLPUSH) outside
//! a transaction: the connection tries the command's non-blocking form
//! and, while it finds nothing, waits and tries again until the timeout.
//!
//! A try is woken by any list write a client of this node made (the
//! connection that ran it rings [`Shared::list_writes`] when its batch is
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

use elsa_shard::OpReply;
use tokio::time::Instant;

use super::{write_op, write_shaped, Conn, QUERY_BUFFER_LIMIT};
use crate::cmd::DataCmd;

/// Longest wait between two tries when nothing on this node rang.
pub(crate) const POLL: Duration = Duration::from_millis(20);

/// True when a try found nothing to pop: LMPOP's null array, LMOVE's nil.
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
        loop {
            let rang = shared.list_writes.notified();
            tokio::pin!(rang);
            rang.as_mut().enable();
            match self.run_once(dc.clone()).await {
                Err(e) => return self.w().error(&e.to_string()),
                // A key of another type answers WRONGTYPE at once; one
                // that becomes another type while the client waits does
                // not wake it (Redis serves only lists to it).
                Ok(r) if !found_nothing(&r) && (first || !is_wrongtype(&r)) => {
                    return write_shaped(&mut self.w(), shape, &r);
                }
                Ok(_) => {}
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
                let read = self.inbuf.len() <= QUERY_BUFFER_LIMIT;
                tokio::select! {
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

/// True for a command that may make a list key non-empty: what wakes
/// blocked clients. (RESTORE and the like would too; Elsa has none that
/// make lists.)
pub(super) fn may_fill_a_list(name: &str) -> bool {
    matches!(
        name,
        "lpush"
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
            | "exec"
            | "commit"
    )
}

fn is_wrongtype(r: &[OpReply]) -> bool {
    matches!(r.first(), Some(OpReply::Error(e)) if *e == elsa_shard::ops::WRONGTYPE)
}

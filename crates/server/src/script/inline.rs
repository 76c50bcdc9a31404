//! A script's plain data commands on keys its transaction already holds,
//! run on the script thread itself (issue 41, defect 11).
//!
//! Every `redis.call` used to be a message to the connection's task and
//! its reply a message back: two thread hand-offs per call, most of a
//! call's time (100,000 SADDs in one script: 0.94 s against Redis's 0.22,
//! and far worse on a loaded host, where the two threads spin for each
//! other while the CPU runs a third). A data command on keys the script's
//! transaction already wrote or read (its write or read buffer answers; no
//! shard is asked) needs only what the script thread can hold for the
//! run: the transaction (moved here for the run, see [`Slot`]), the
//! database and the command table. So the script thread parses it,
//! applies its ops to the transaction and encodes the reply itself,
//! through the very functions the connection uses (`Conn::data_cmd`'s
//! `data_cmd_in`, `run_in_txn`, `write_shaped`): one code path, two
//! callers.
//!
//! A command that must read a shard still goes to the connection: its
//! worker serves its own shard inline and polls for the script's next
//! call, while from here a read would be a message and a wake-up each way
//! (short scripts, which read first, got a third slower that way).
//!
//! Everything else still goes to the connection, which answers it exactly
//! as before: control commands (PUBLISH, PING, TIME…), and any data
//! command on a key the transaction has not met yet, or that needs the
//! connection or must be refused — a user with
//! ACL rules (the connection checks and logs), a node over `maxmemory`,
//! a MONITOR to feed, wrong arity, `noscript` commands, a write from a
//! read-only script, a refused subcommand. Run here, a command sees and
//! changes the same transaction it would have there; nothing of the
//! connection's state changes during a script otherwise (SELECT is
//! refused in scripts).

use std::future::Future;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use elsa_txn::router::{Coordinator, NodeContext};
use elsa_txn::Txn;

use super::convert::{self, Reply};
use crate::cmd::{self, Kind};
use crate::conn::{data_cmd_in, run_in_txn, write_shaped};
use crate::resp::ReplyWriter;
use crate::state::Shared;

/// The script's transaction while the script runs: here, or taken by the
/// connection for a call it serves (the script thread waits then).
pub type Slot = Arc<Mutex<Option<Txn>>>;

/// What a script thread needs to run a run's data commands itself.
pub struct Inline {
    /// The node, for a coordinator of the script thread's own (a worker's
    /// holds its shard, which another thread may not touch).
    pub node: Arc<NodeContext>,
    pub txn: Slot,
    pub db: u8,
    pub shared: Arc<Shared>,
    /// The script's user may run every command (no check, nothing to log).
    pub acl_free: bool,
    /// EVAL_RO / EVALSHA_RO.
    pub ro: bool,
}

thread_local! {
    /// The script thread's runtime for a call's awaits (a read from a
    /// shard, a backoff): one per thread, made at its first call.
    static RUNTIME: Option<tokio::runtime::Runtime> = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .ok();
}

impl Inline {
    /// The reply of `args`, run here; `None` when the connection must
    /// serve it (see the module doc).
    pub fn call(&self, args: &[Bytes], resp3: bool) -> Option<Reply> {
        let spec = cmd::lookup(&args[0])?;
        let Kind::Data(parse) = spec.kind else {
            return None;
        };
        if !self.acl_free
            || !spec.arity_ok(args.len())
            || !super::allowed_in_script(spec)
            || (self.ro && (spec.is_write() || spec.may_replicate()))
            || cmd::subcommand_error(spec, args).is_some()
            || self.shared.memory.refuses(spec, args, None)
            || self.shared.conns.monitors.any()
            || elsa_shard::ops::streams::blocks_in_args(args)
        {
            return None;
        }
        let started = std::time::Instant::now();
        let mut out = bytes::BytesMut::new();
        let mut w = ReplyWriter {
            out: &mut out,
            resp3,
        };
        match data_cmd_in(self.db, parse, args) {
            Err(e) => w.error(&e.0),
            Ok(dc) => {
                let mut slot = self.txn.lock().unwrap_or_else(|e| e.into_inner());
                let txn = slot.as_mut()?;
                // Only what the transaction's buffers answer: a read of a
                // shard goes through the connection, whose worker serves
                // its own shard inline (from here it would be a message
                // and a wake-up each way).
                let buffered = |k: &[u8]| txn.buffered(k);
                if !dc
                    .ops
                    .iter()
                    .all(|(k, op)| buffered(k) && op.other_keys().iter().all(|o| buffered(o)))
                {
                    return None;
                }
                let result = if dc.ops.is_empty() {
                    Ok(Vec::new())
                } else {
                    let coord = Coordinator::new(self.node.clone(), None);
                    // Its keys are buffered: nothing awaits, one poll ends
                    // it (a runtime only if that ever changes).
                    let mut run = std::pin::pin!(run_in_txn(&coord, txn, dc.ops));
                    let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
                    match run.as_mut().poll(&mut cx) {
                        std::task::Poll::Ready(r) => r,
                        std::task::Poll::Pending => RUNTIME
                            .with(|rt| rt.as_ref().map(|rt| rt.block_on(run)))
                            .unwrap_or_else(|| {
                                Err(elsa_txn::TxnError::Unavailable(
                                    "the script thread cannot wait for a shard".into(),
                                ))
                            }),
                    }
                };
                match result {
                    Ok(replies) => write_shaped(&mut w, dc.shape, &replies),
                    Err(e) => w.error(&e.to_string()),
                }
            }
        }
        // Counted in INFO commandstats as the connection counts the calls
        // it serves (`Conn::script_call`).
        let failed = matches!(out.first(), Some(b'-' | b'!'));
        let local = self.shared.cmdstats.local();
        local.call(
            crate::cmdstats::slot(spec, args),
            started.elapsed().as_micros() as u64,
            failed,
        );
        // And its error in errorstats, at the call (`Conn::script_call`).
        if let Some(e) = crate::intro::error_prefix(&out) {
            local.error(e);
        }
        Some(convert::parse(&out).unwrap_or_else(|| Reply::Error(b"ERR unreadable reply".to_vec())))
    }
}

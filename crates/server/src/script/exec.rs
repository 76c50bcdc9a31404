//! EXEC of a queue that holds a script: the queue as one SI transaction.
//!
//! A script cannot be one step among the atomic steps of a plain EXEC
//! (`Session::exec`): its calls are only known as it runs. So the queue
//! runs as one SI transaction — each command in order, the script's calls
//! joining it — committed at the end and run again from the start on
//! CONFLICT, as a script alone is (`run`). Every attempt:
//!
//! - starts in the database EXEC began in: a queued SELECT applies in its
//!   place on each attempt, and the committed attempt's last one stays;
//! - runs in place only what acts inside the transaction or only answers
//!   (`crate::effects::runs_in_attempt`); every other command (PUBLISH,
//!   CLIENT, CONFIG, SCRIPT FLUSH, BGSAVE…) is deferred, and runs once,
//!   after the commit, in queue order, answering in its slot of the EXEC
//!   array — or never, when EXEC answers CONFLICT.
//!
//! A queued FLUSHALL or FLUSHDB (`crate::effects::splits_exec`) splits the
//! queue: what comes before it commits as one transaction, it runs once,
//! then what comes after it runs as the next — so the flush removes the
//! writes queued before it and none queued after it, as in Redis. A part
//! after the first that finally loses answers the error in each of its
//! slots (as a later step of a plain EXEC does). WATCHed keys are checked
//! before each attempt of the first part.

use std::ops::Range;

use elsa_shard::Check;
use elsa_txn::router::backoff;
use elsa_txn::{Isolation, Txn, TxnError};

use super::run::{conflict, MAX_ATTEMPTS};
use crate::cmd::Control;
use crate::conn::{Conn, Queued, Watched};
use crate::effects::{runs_in_attempt, splits_exec, Effect};

/// How one part of the EXEC ended without committing.
enum Lost {
    /// A WATCHed key changed: EXEC answers a nil array.
    Watch,
    /// What the EXEC (first part) or each command of the part answers.
    Error(String),
}

impl Conn {
    /// Runs a queue that holds a script (see the module's head) and writes
    /// EXEC's reply: its array, each command's reply in queue order.
    pub(crate) async fn exec_as_one_txn(&mut self, queued: Vec<Queued>, watches: Watched) {
        let checks: Vec<Check> = watches
            .keys
            .iter()
            .map(|(key, expect)| Check {
                key: key.clone(),
                expect: expect.clone(),
            })
            .collect();
        let mark = self.out.len();
        // Where each command's reply went in `self.out`.
        let mut replies: Vec<Range<usize>> = vec![mark..mark; queued.len()];
        let mut start = 0;
        loop {
            let end = queued[start..]
                .iter()
                .position(|q| matches!(q, Queued::Admin(c, _) if splits_exec(*c)))
                .map_or(queued.len(), |n| start + n);
            let checks = if start == 0 { &checks[..] } else { &[] };
            let part = start..end;
            if let Err(lost) = self.exec_part(&queued, part, checks, &mut replies).await {
                if start == 0 {
                    self.out.truncate(mark);
                    return match lost {
                        Lost::Watch => self.w().nil_array(),
                        Lost::Error(e) => self.w().error(&e),
                    };
                }
                let e = match lost {
                    Lost::Error(e) => e,
                    Lost::Watch => "EXECABORT a watched key changed".into(),
                };
                for r in &mut replies[start..end] {
                    let at = self.out.len();
                    self.w().error(&e);
                    *r = at..self.out.len();
                }
            }
            let Some(Queued::Admin(c, args)) = queued.get(end) else {
                break;
            };
            let at = self.out.len();
            Box::pin(self.run_queued(*c, args)).await;
            replies[end] = at..self.out.len();
            start = end + 1;
        }
        let body = self.out.split_off(mark);
        self.w().array(queued.len());
        for r in replies {
            self.out
                .extend_from_slice(&body[r.start - mark..r.end - mark]);
        }
    }

    /// One part of the queue as one transaction, attempted until it
    /// commits (then its deferred commands run) or finally loses (then
    /// nothing of it stays: output, effects, database choice).
    async fn exec_part(
        &mut self,
        queued: &[Queued],
        part: Range<usize>,
        checks: &[Check],
        replies: &mut [Range<usize>],
    ) -> Result<(), Lost> {
        let db = self.s.db;
        let effects = self.s.effects.len();
        let mut attempt = 0;
        loop {
            if !checks.is_empty() {
                match self
                    .coord
                    .run_atomic(Vec::new(), checks.to_vec(), self.s.ack)
                    .await
                {
                    Ok(_) => {}
                    Err(TxnError::WatchFailed) => return Err(Lost::Watch),
                    Err(e) => return Err(Lost::Error(e.to_string())),
                }
            }
            if part.is_empty() {
                return Ok(());
            }
            self.s.db = db;
            let at = self.out.len();
            self.s.txn = Some(Txn::begin(&self.coord, Isolation::Snapshot, self.s.ack));
            for i in part.clone() {
                let from = self.out.len();
                match &queued[i] {
                    Queued::Data(Ok(dc)) => self.run_in_script_txn(dc.clone()).await,
                    Queued::Data(Err(e)) => self.w().error(&e.0),
                    Queued::Admin(Control::Eval, args) => Box::pin(self.eval(args)).await,
                    Queued::Admin(c, args) if runs_in_attempt(*c, args) => {
                        Box::pin(self.run_queued(*c, args)).await
                    }
                    Queued::Admin(c, args) => self.s.effects.push(Effect::Queued {
                        slot: i,
                        c: *c,
                        args: args.clone(),
                        db: self.s.db,
                    }),
                }
                replies[i] = from..self.out.len();
            }
            let Some(txn) = self.s.txn.take() else {
                self.drop_effects(effects);
                self.out.truncate(at);
                self.s.db = db;
                return Err(Lost::Error("ERR the transaction was lost".into()));
            };
            let result = self.commit_run(txn).await;
            if result.is_ok() {
                for (slot, r) in self.take_effects(effects).await {
                    replies[slot] = r;
                }
                return Ok(());
            }
            self.drop_effects(effects);
            self.out.truncate(at);
            self.s.db = db;
            match result {
                Err(TxnError::Conflict(_)) if attempt < MAX_ATTEMPTS => {
                    backoff(attempt).await;
                    attempt += 1;
                }
                Err(TxnError::Conflict(_)) => return Err(Lost::Error(conflict())),
                Err(e) => return Err(Lost::Error(e.to_string())),
                Ok(()) => return Ok(()),
            }
        }
    }
}

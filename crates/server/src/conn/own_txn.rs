//! A command that runs as one snapshot-isolated transaction of ordinary
//! commands (SORT, DUMP, RESTORE): inside the connection's open one
//! (BEGIN, a scripted EXEC), or in one of its own, committed and retried
//! when it loses to a concurrent commit — so it reads and writes one
//! consistent state wherever its keys live, as Redis's single thread does.

use elsa_shard::OpReply;
use elsa_txn::router::backoff;
use elsa_txn::{Isolation, Txn, TxnError};

use super::{write_op, Conn};

/// What one attempt answers.
pub(crate) enum Answer {
    Reply(OpReply),
    /// An error reply (nothing it wrote is committed).
    Refused(String),
}

/// The body of such a command: one attempt inside `txn`.
pub(crate) trait InTxn {
    async fn attempt(&self, c: &Conn, txn: &mut Txn) -> Result<Answer, TxnError>;
}

impl Conn {
    /// Runs `job` and writes its answer; the reply when it answered one
    /// (not an error).
    pub(crate) async fn in_own_txn(&mut self, job: &impl InTxn) -> Option<OpReply> {
        if let Some(mut txn) = self.s.txn.take() {
            let r = job.attempt(self, &mut txn).await;
            self.s.txn = Some(txn);
            return self.write_answer(r);
        }
        let mut attempt = 0;
        loop {
            let mut txn = Txn::begin(&self.coord, Isolation::Snapshot, self.s.ack);
            let r = match job.attempt(self, &mut txn).await {
                Ok(Answer::Reply(reply)) => {
                    let wrote = txn.has_writes();
                    match txn.commit(&self.coord).await {
                        Ok(ts) => {
                            if wrote {
                                self.s.last_commit = Some(ts);
                                self.shared.pushes.notify_waiters();
                            }
                            Ok(Answer::Reply(reply))
                        }
                        Err(e) => Err(e),
                    }
                }
                other => other,
            };
            match r {
                Err(TxnError::Conflict(_)) if attempt < 200 => {
                    backoff(attempt).await;
                    attempt += 1;
                }
                r => return self.write_answer(r),
            }
        }
    }

    fn write_answer(&mut self, r: Result<Answer, TxnError>) -> Option<OpReply> {
        match r {
            Ok(Answer::Reply(reply)) => {
                write_op(&mut self.w(), &reply);
                Some(reply)
            }
            Ok(Answer::Refused(e)) => {
                self.w().error(&e);
                None
            }
            Err(e) => {
                self.w().error(&e.to_string());
                None
            }
        }
    }
}

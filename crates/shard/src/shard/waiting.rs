//! Prepares that wait for their keys instead of being refused.
//!
//! A prepare that meets a held key is refused at once, so no transaction
//! ever waits while holding. That alone lets readers that hold keys across
//! shards without pause starve a writer of the same keys: each retry meets
//! the next reader's hold (a RENAME between two shards gave up after 10 s
//! against a client looping `MGET`s of both keys).
//!
//! So a multi-key command that lost once prepares again shard by shard, in
//! `ShardId` order, asking each shard to wait ([`PrepareRequest::wait`]).
//! Here such a prepare is parked while a key it needs is held, and it
//! *claims* its keys: no new hold is taken on them meanwhile. When holds
//! are released, the oldest waiter whose keys are free takes them.
//!
//! No deadlock: a waiting transaction holds keys only on shards before
//! this one in that order, so every chain of waits climbs the order and
//! cannot close into a cycle; prepares that do not wait join no chain.
//! Within a shard a waiter waits only for holds, lone commands parked
//! before it, and waiters before it — never for one behind it.

use std::collections::VecDeque;

use bytes::Bytes;

use super::Shard;
use crate::msg::{FastMap, PrepareRequest, ReadState, Refusal};

/// A parked prepare and where its answer goes.
struct Waiter {
    req: PrepareRequest,
    ack: crate::repl::AckLevel,
    reply: tokio::sync::oneshot::Sender<Result<Vec<ReadState>, Refusal>>,
    since: std::time::Instant,
}

/// The shard's waiting prepares, oldest first, and the keys they claim.
#[derive(Default)]
pub(super) struct Waiting {
    queue: VecDeque<Waiter>,
    /// How many waiters claim each key.
    claimed: FastMap<Bytes, usize>,
}

impl Waiting {
    pub(super) fn is_empty(&self) -> bool {
        self.queue.is_empty()
    }

    /// True when a waiting prepare claims `key`.
    pub(super) fn claims(&self, key: &[u8]) -> bool {
        !self.claimed.is_empty() && self.claimed.contains_key(key)
    }

    fn claim(&mut self, req: &PrepareRequest) {
        for (k, _) in &req.holds {
            *self.claimed.entry(k.key.clone()).or_default() += 1;
        }
    }

    fn unclaim(&mut self, req: &PrepareRequest) {
        for (k, _) in &req.holds {
            if let Some(n) = self.claimed.get_mut(&k.key) {
                *n -= 1;
                if *n == 0 {
                    self.claimed.remove(&k.key);
                }
            }
        }
    }
}

impl Shard {
    /// Parks `req` until its keys are free (see the module docs).
    pub(super) fn wait_to_prepare(
        &mut self,
        req: PrepareRequest,
        ack: crate::repl::AckLevel,
        reply: tokio::sync::oneshot::Sender<Result<Vec<ReadState>, Refusal>>,
    ) {
        self.stats.busy += 1;
        self.waiting.claim(&req);
        self.waiting.queue.push_back(Waiter {
            req,
            ack,
            reply,
            since: std::time::Instant::now(),
        });
    }

    /// Oldest first, each waiter whose keys are free of holds, of lone
    /// commands parked on them and of the claims of waiters before it
    /// takes its holds (or answers Busy while a snapshot is being taken).
    pub(super) fn resume_waiting(&mut self) {
        let mut before: FastMap<Bytes, ()> = FastMap::default();
        let mut i = 0;
        while i < self.waiting.queue.len() {
            let w = &self.waiting.queue[i];
            let stuck = w.req.holds.iter().any(|(k, mode)| {
                self.blocked(&k.key, *mode, Some(w.req.txn))
                    || self.parked_on.contains_key(&k.key)
                    || before.contains_key(&k.key)
            });
            if stuck && !self.frozen {
                before.extend(w.req.holds.iter().map(|(k, _)| (k.key.clone(), ())));
                i += 1;
                continue;
            }
            let Some(w) = self.waiting.queue.remove(i) else {
                break;
            };
            self.waiting.unclaim(&w.req);
            let r = if self.frozen {
                // No multi-shard commit may span a snapshot: the
                // coordinator releases and retries once it is done.
                Err(Refusal::Busy)
            } else {
                self.take_holds(w.req)
            };
            self.respond_at(w.ack, w.reply, r, None);
        }
    }

    /// Answers Busy to the prepares that waited `limit` or longer.
    pub fn expire_waiting(&mut self, limit: std::time::Duration) {
        let mut expired = false;
        while self
            .waiting
            .queue
            .front()
            .is_some_and(|w| w.since.elapsed() >= limit)
        {
            let Some(w) = self.waiting.queue.pop_front() else {
                break;
            };
            self.waiting.unclaim(&w.req);
            self.respond(w.reply, Err(Refusal::Busy));
            expired = true;
        }
        if expired {
            // Waiters behind may have waited only for those claims.
            self.resume_waiting();
        }
    }
}

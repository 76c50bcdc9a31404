//! Commits that wait for their keys instead of being refused, and what
//! every prepare meets first: whether it may take its holds now
//! ([`Shard::first_blocked`]) and whether a held key dooms it at once
//! ([`Shard::doomed_key`]).
//!
//! A prepare that meets a held key is refused at once, so no transaction
//! ever waits while holding. That alone lets readers that hold keys across
//! shards without pause starve a writer of the same keys: each retry meets
//! the next reader's hold (a RENAME between two shards gave up after 10 s
//! against a client looping `MGET`s of both keys), and a transaction's
//! COMMIT that met a reader's hold answered CONFLICT though nothing it
//! read had changed (1,195 of 1,200 beside three looping readers).
//!
//! So two kinds of request may ask to wait here:
//!
//! - a **prepare** ([`PrepareRequest::wait`]) of a commit that lost once
//!   and now prepares shard by shard, in `ShardId` order. It is parked
//!   while a key it needs is held, and it *claims* its keys: no new hold is
//!   taken on them meanwhile. When holds are released, the oldest waiter
//!   whose keys are free takes them.
//! - a transaction's **single-shard commit** ([`CommitRequest::wait`]),
//!   parked while a key it validates or writes is held, then validated and
//!   installed in one step as usual. It holds nothing while it waits.
//!
//! No deadlock: a waiting transaction holds keys only on shards before
//! this one in that order (a single-shard commit, none), so every chain of
//! waits climbs the order and cannot close into a cycle; prepares that do
//! not wait join no chain. Within a shard a waiter waits only for holds,
//! lone commands parked before it, and waiters before it — never for one
//! behind it.

use std::collections::VecDeque;

use bytes::Bytes;

use super::Shard;
use crate::msg::{
    Check, CommitRequest, Expect, FastMap, HoldMode, PrepareRequest, ReadState, Refusal, TxnId,
};
use elsa_lattice::Ts;

/// A parked request and where its answer goes.
enum Wanted {
    Prepare {
        req: PrepareRequest,
        reply: tokio::sync::oneshot::Sender<Result<Vec<ReadState>, Refusal>>,
    },
    Commit {
        req: CommitRequest,
        reply: tokio::sync::oneshot::Sender<Result<Ts, Refusal>>,
    },
}

impl Wanted {
    /// The keys it needs, and how.
    fn keys(&self) -> Vec<(&Bytes, HoldMode)> {
        match self {
            Wanted::Prepare { req, .. } => req.holds.iter().map(|(k, m)| (&k.key, *m)).collect(),
            Wanted::Commit { req, .. } => commit_keys(req).collect(),
        }
    }

    /// The transaction whose holds do not count against it (a prepare's).
    fn me(&self) -> Option<crate::msg::TxnId> {
        match self {
            Wanted::Prepare { req, .. } => Some(req.txn),
            Wanted::Commit { .. } => None,
        }
    }
}

/// A single-shard commit's keys, held as its validation and install need
/// them free: a key read, of writers; a key written (or checked for a
/// newer write), of everyone.
fn commit_keys(req: &CommitRequest) -> impl Iterator<Item = (&Bytes, HoldMode)> {
    let checks = req.checks.iter().map(|c| {
        let mode = match c.expect {
            Expect::Version(_) | Expect::LiveVersion(..) | Expect::KeysetBefore(..) => {
                HoldMode::Read
            }
            Expect::CommittedBefore(_) | Expect::InOrder(_) => HoldMode::Write,
        };
        (&c.key.key, mode)
    });
    checks.chain(req.writes.iter().map(|w| (&w.key.key, HoldMode::Write)))
}

struct Waiter {
    wanted: Wanted,
    ack: crate::repl::AckLevel,
    since: std::time::Instant,
}

/// The shard's waiting requests, oldest first, and the keys the prepares
/// among them claim.
#[derive(Default)]
pub(super) struct Waiting {
    queue: VecDeque<Waiter>,
    /// How many waiting prepares claim each key.
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

    fn claim(&mut self, wanted: &Wanted) {
        if let Wanted::Prepare { req, .. } = wanted {
            for (k, _) in &req.holds {
                *self.claimed.entry(k.key.clone()).or_default() += 1;
            }
        }
    }

    fn unclaim(&mut self, wanted: &Wanted) {
        if let Wanted::Prepare { req, .. } = wanted {
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
}

impl Shard {
    /// A key `req` validates that another transaction holds for writing,
    /// when `req` fails on such a key rather than retrying
    /// ([`PrepareRequest::retry_on_busy`]).
    pub(super) fn doomed_key<'r>(&self, req: &'r PrepareRequest) -> Option<&'r Bytes> {
        if req.retry_on_busy {
            return None;
        }
        self.written_by_another(&req.checks, Some(req.txn))
    }

    pub(super) fn doomed(&self, req: &PrepareRequest) -> bool {
        self.doomed_key(req).is_some()
    }

    /// The first key of `checks` another transaction than `me` holds for
    /// writing: its install will change the key, so the check will fail.
    pub(super) fn written_by_another<'c>(
        &self,
        checks: &'c [Check],
        me: Option<TxnId>,
    ) -> Option<&'c Bytes> {
        if self.holds.is_empty() {
            return None;
        }
        checks
            .iter()
            .map(|c| &c.key.key)
            .find(|k| self.blocked(k, HoldMode::Read, me))
    }

    /// The first key of `req` it may not hold now: held by another
    /// transaction, or waited for by a lone command or a waiting prepare —
    /// they go first, as holds taken over their heads could starve them.
    pub(super) fn first_blocked<'r>(&self, req: &'r PrepareRequest) -> Option<&'r Bytes> {
        req.holds
            .iter()
            .find(|(k, mode)| {
                self.blocked(&k.key, *mode, Some(req.txn))
                    || self.parked_on.contains_key(&k.key)
                    || self.waiting.claims(&k.key)
            })
            .map(|(k, _)| &k.key)
    }

    pub(super) fn prepare_blocked(&self, req: &PrepareRequest) -> bool {
        self.first_blocked(req).is_some()
    }

    /// Parks a prepare until its keys are free (see the module docs).
    pub(super) fn wait_to_prepare(
        &mut self,
        req: PrepareRequest,
        ack: crate::repl::AckLevel,
        reply: tokio::sync::oneshot::Sender<Result<Vec<ReadState>, Refusal>>,
    ) {
        self.park_waiter(Wanted::Prepare { req, reply }, ack);
    }

    /// True when a key `req` validates or writes is held, but none it
    /// validates is held for writing (that writer's install will fail the
    /// check: the commit fails at once): then a single-shard commit that
    /// may wait parks instead of failing.
    pub(super) fn commit_blocked(&self, req: &CommitRequest) -> bool {
        !self.holds.is_empty()
            && commit_keys(req).any(|(k, mode)| self.blocked(k, mode, None))
            && self.written_by_another(&req.checks, None).is_none()
    }

    /// Parks a single-shard commit until its keys are free.
    pub(super) fn wait_to_commit(
        &mut self,
        req: CommitRequest,
        ack: crate::repl::AckLevel,
        reply: tokio::sync::oneshot::Sender<Result<Ts, Refusal>>,
    ) {
        self.park_waiter(Wanted::Commit { req, reply }, ack);
    }

    fn park_waiter(&mut self, wanted: Wanted, ack: crate::repl::AckLevel) {
        self.stats.busy += 1;
        self.waiting.claim(&wanted);
        self.waiting.queue.push_back(Waiter {
            wanted,
            ack,
            since: std::time::Instant::now(),
        });
    }

    /// Oldest first, each waiter whose keys are free of holds, of lone
    /// commands parked on them and of the claims of prepares before it
    /// runs: a prepare takes its holds (or answers Busy while a snapshot
    /// is being taken), a commit validates and installs.
    pub(super) fn resume_waiting(&mut self) {
        let mut before: FastMap<Bytes, ()> = FastMap::default();
        let mut i = 0;
        while i < self.waiting.queue.len() {
            let w = &self.waiting.queue[i].wanted;
            let keys = w.keys();
            let stuck = keys.iter().any(|&(k, mode)| {
                self.blocked(k, mode, w.me())
                    || self.parked_on.contains_key(k)
                    || before.contains_key(k)
            });
            let frozen = self.frozen && matches!(w, Wanted::Prepare { .. });
            // A commit whose checked key a writer took meanwhile (commits
            // claim nothing) fails now rather than wait for that writer.
            let doomed = match w {
                Wanted::Commit { req, .. } => self.written_by_another(&req.checks, None).is_some(),
                Wanted::Prepare { .. } => false,
            };
            if stuck && !frozen && !doomed {
                if matches!(w, Wanted::Prepare { .. }) {
                    before.extend(keys.into_iter().map(|(k, _)| (k.clone(), ())));
                }
                i += 1;
                continue;
            }
            let Some(w) = self.waiting.queue.remove(i) else {
                break;
            };
            self.waiting.unclaim(&w.wanted);
            match w.wanted {
                Wanted::Prepare { req, reply } => {
                    let r = if self.frozen {
                        // No multi-shard commit may span a snapshot: the
                        // coordinator releases and retries once it is done.
                        Err(Refusal::Busy)
                    } else {
                        self.take_holds(req)
                    };
                    self.respond_at(w.ack, reply, r, None);
                }
                Wanted::Commit { req, reply } => {
                    let writes = !req.writes.is_empty();
                    let r = self.op_commit(req);
                    let unconfirmed = (writes && r.is_ok()).then(super::unconfirmed);
                    self.respond_at(w.ack, reply, r, unconfirmed);
                }
            }
        }
    }

    /// Answers Busy to the requests that waited `limit` or longer.
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
            self.waiting.unclaim(&w.wanted);
            match w.wanted {
                Wanted::Prepare { reply, .. } => self.respond(reply, Err(Refusal::Busy)),
                Wanted::Commit { reply, .. } => self.respond(reply, Err(Refusal::Busy)),
            }
            expired = true;
        }
        if expired {
            // Waiters behind may have waited only for those claims.
            self.resume_waiting();
        }
    }
}

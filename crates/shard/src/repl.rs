//! In-region replication of a shard's commits, seen from the shard: what
//! it ships, and which replies wait for the other replicas.
//!
//! A shard whose keys have replicas on other nodes of its region collects
//! the lattices its commits install (lone writes, single-shard commits,
//! multi-shard installs) and, at each log flush, hands them as one
//! numbered *batch* to a [`Replicator`] (the cluster service), which ships
//! them to every other replica of their keys in the region and reports
//! when each has them durably. A reply at acknowledgement level `region`
//! waits (in the [`ReplGate`]) until the batch holding everything it
//! acknowledges or reveals is confirmed: a write is acknowledged only
//! once a single node failure cannot lose it, and a read never returns a
//! value a failover could take back — the two halves of linearizability
//! under a crash. Replies at level `local` do not wait.
//!
//! Hand-written: this is Elsa's commit path (the group commit of the log,
//! extended to the region), not something a library does.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Mutex;

use crate::wal::codec::LogEntry;

/// How far a commit must have travelled before it is acknowledged (and
/// what a read may reveal): chosen per connection or per transaction.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Default)]
pub enum AckLevel {
    /// Logged by the node that committed it (one node's crash within a
    /// replication round trip can lose it).
    Local,
    /// Logged by every replica of its keys in the region: losing one node
    /// loses nothing acknowledged. The default.
    #[default]
    Region,
    /// `Region`, and merged durably by a replica in every other region.
    All,
}

impl std::str::FromStr for AckLevel {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s.to_ascii_lowercase().as_str() {
            "local" => Ok(AckLevel::Local),
            "region" => Ok(AckLevel::Region),
            "all" => Ok(AckLevel::All),
            _ => Err(format!(
                "unknown acknowledgement level '{s}' (use local, region or all)"
            )),
        }
    }
}

impl AckLevel {
    /// The name used in configuration and commands.
    pub fn name(self) -> &'static str {
        match self {
            AckLevel::Local => "local",
            AckLevel::Region => "region",
            AckLevel::All => "all",
        }
    }
}

/// Something to run once a batch is settled: `true` if every replica
/// confirmed it, `false` if the replicator gave up.
pub type Waiter = Box<dyn FnOnce(bool) + Send>;

/// Ships a shard's batches to the other replicas of its keys in the region.
pub trait Replicator: Send + Sync {
    /// Ships `entries` (installed by commits on local shard `shard`) to
    /// every other replica of their keys in this region and calls `done`
    /// exactly once: `true` when each has merged them durably, `false`
    /// when it gave up (replicas unreachable for too long).
    fn replicate(&self, shard: usize, entries: Vec<LogEntry>, done: Waiter);

    /// Whether this node acts as a primary right now. False while it
    /// catches up, and from the moment a pause is noticed — or could have
    /// happened: its pulse is overdue — so work that was queued for the
    /// shard before a pause is refused, not run on what may by now be
    /// another node's keys (see [`crate::ShardMsg::refuse_as_stale`]).
    fn serving(&self) -> bool {
        true
    }

    /// A batch was not confirmed by the replicas (see [`Repl::ship`]).
    fn unconfirmed(&self) {}

    /// Whether this node may evict `key` to free memory: it is the key's
    /// primary in the region and serving. A replica never evicts on its
    /// own: its delete, stamped with its clock, would also remove a newer
    /// write the primary acknowledged. It follows the primary's
    /// evictions as it follows any delete.
    fn may_evict(&self, _key: &[u8]) -> bool {
        true
    }

    /// True when no other node of the region is in the view: what is
    /// shipped is confirmed with nobody having it, so the log marks it
    /// confirmed as it writes it.
    fn alone(&self) -> bool {
        true
    }
}

/// Which batches are settled, and the replies waiting for them.
///
/// Batches settle in any order (different replicas answer at different
/// speeds); a reply waits for every batch up to its own, because a read
/// may reveal any of them.
#[derive(Default)]
pub struct ReplGate {
    state: Mutex<GateState>,
}

#[derive(Default)]
struct GateState {
    /// Every batch up to this one is settled.
    through: u64,
    /// Settled batches above `through`.
    ahead: BTreeSet<u64>,
    /// Batches the replicator gave up on (kept so a late waiter learns it;
    /// bounded, failures are rare).
    failed: BTreeSet<u64>,
    /// Replies waiting for batches up to their key.
    waiting: BTreeMap<u64, Vec<Waiter>>,
}

/// How many failed batch numbers the gate remembers.
const FAILED_KEPT: usize = 1024;

impl ReplGate {
    /// Every batch up to this one is settled.
    pub fn settled_through(&self) -> u64 {
        self.lock().through
    }

    /// Every batch up to this one was confirmed by the replicas.
    pub fn confirmed_through(&self) -> u64 {
        let s = self.lock();
        match s.failed.first() {
            Some(&f) => s.through.min(f - 1),
            None => s.through,
        }
    }

    /// True when some batch was not confirmed (the node restarts).
    pub fn any_failed(&self) -> bool {
        !self.lock().failed.is_empty()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, GateState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Runs `w` once every batch up to `seq` is settled (at once if they
    /// are), told whether batch `seq` itself was confirmed.
    pub fn wait(&self, seq: u64, w: Waiter) {
        let mut s = self.lock();
        if s.through >= seq {
            let ok = !s.failed.contains(&seq);
            drop(s);
            return w(ok);
        }
        s.waiting.entry(seq).or_default().push(w);
    }

    /// Batch `seq` is settled (`ok`: confirmed by every replica); runs the
    /// waiters it completes.
    pub fn finish(&self, seq: u64, ok: bool) {
        let mut ready = Vec::new();
        {
            let mut s = self.lock();
            if !ok {
                s.failed.insert(seq);
                while s.failed.len() > FAILED_KEPT {
                    s.failed.pop_first();
                }
            }
            if seq > s.through {
                s.ahead.insert(seq);
            }
            loop {
                let next = s.through + 1;
                if !s.ahead.remove(&next) {
                    break;
                }
                s.through = next;
            }
            let through = s.through;
            while let Some(entry) = s.waiting.first_entry() {
                if *entry.key() > through {
                    break;
                }
                let (k, ws) = entry.remove_entry();
                let ok = !s.failed.contains(&k);
                ready.extend(ws.into_iter().map(|w| (w, ok)));
            }
        }
        for (w, ok) in ready {
            w(ok);
        }
    }
}

/// A shard's side of replication: the batch being collected and the gate.
pub(crate) struct Repl {
    pub replicator: std::sync::Arc<dyn Replicator>,
    /// Lattices installed since the last batch was shipped.
    pub pending: Vec<LogEntry>,
    /// The number the pending batch will get (batches count from 1).
    pub next: u64,
    pub gate: std::sync::Arc<ReplGate>,
    /// Shipped batches not known confirmed yet, with where the log stood
    /// when each was shipped: (batch, segment, end of its records).
    pub shipped: std::collections::VecDeque<(u64, u64, u64)>,
    /// The last confirmation logged: (segment, offset).
    pub logged: Option<(u64, u64)>,
}

impl Repl {
    /// The batch holding everything installed so far: what a reply given
    /// now acknowledges or may reveal (0: nothing was ever installed).
    pub fn horizon(&self) -> u64 {
        if self.pending.is_empty() {
            self.next - 1
        } else {
            self.next
        }
    }

    /// Ships the pending batch, if any; `at`: where the log ends now that
    /// its records are written (segment, offset), if there is a log.
    ///
    /// A batch the replicas did not confirm makes the node restart
    /// ([`Replicator::unconfirmed`]): its writes may be in this node's
    /// memory and log but in no other replica, and the region may have
    /// moved on without them, so they must go.
    pub fn ship(&mut self, shard: usize, at: Option<(u64, u64)>) {
        if self.pending.is_empty() {
            return;
        }
        let seq = self.next;
        self.next += 1;
        if let Some((segment, offset)) = at {
            self.shipped.push_back((seq, segment, offset));
        }
        let gate = self.gate.clone();
        let entries = std::mem::take(&mut self.pending);
        let replicator = self.replicator.clone();
        self.replicator.replicate(
            shard,
            entries,
            Box::new(move |ok| {
                gate.finish(seq, ok);
                if !ok {
                    replicator.unconfirmed();
                }
            }),
        );
    }

    /// True when a confirmation arrived that the log does not hold yet.
    pub fn confirmation_due(&self) -> bool {
        self.shipped
            .front()
            .is_some_and(|&(b, _, _)| b <= self.gate.confirmed_through())
    }

    /// Where the log's confirmed part now ends, if that moved since the
    /// last call: every batch up to it was confirmed by the replicas.
    pub fn newly_confirmed(&mut self) -> Option<(u64, u64)> {
        let through = self.gate.confirmed_through();
        let mut last = None;
        while let Some(&(b, segment, offset)) = self.shipped.front() {
            if b > through {
                break;
            }
            last = Some((segment, offset));
            self.shipped.pop_front();
        }
        let last = last.filter(|l| self.logged != Some(*l))?;
        self.logged = Some(last);
        Some(last)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    type Log = Arc<Mutex<Vec<(u32, bool)>>>;

    fn recorder() -> (Log, impl Fn(u32) -> Waiter) {
        let log = Arc::new(Mutex::new(Vec::new()));
        let l = log.clone();
        (log, move |id| {
            let l = l.clone();
            Box::new(move |ok| l.lock().unwrap().push((id, ok))) as Waiter
        })
    }

    #[test]
    fn a_reply_waits_for_every_batch_up_to_its_own() {
        let gate = ReplGate::default();
        let (log, w) = recorder();
        gate.wait(2, w(1));
        gate.wait(1, w(2));
        gate.finish(2, true);
        assert!(log.lock().unwrap().is_empty(), "batch 1 is still out");
        gate.finish(1, true);
        let mut got = log.lock().unwrap().clone();
        got.sort();
        assert_eq!(got, vec![(1, true), (2, true)]);
        assert_eq!(gate.settled_through(), 2);
        gate.wait(2, w(3));
        assert_eq!(log.lock().unwrap().len(), 3, "settled: runs at once");
    }

    #[test]
    fn a_failed_batch_is_reported_to_its_waiters_even_late() {
        let gate = ReplGate::default();
        let (log, w) = recorder();
        gate.wait(1, w(1));
        gate.finish(1, false);
        gate.wait(1, w(2));
        gate.wait(0, w(3));
        assert_eq!(
            log.lock().unwrap().clone(),
            vec![(1, false), (2, false), (3, true)]
        );
    }
}

//! Outcomes of clients' transactions, for the metrics port: interactive
//! ones (BEGIN [RC|RR|SI] … COMMIT or ABORT) by isolation level, and EXECs
//! that a changed WATCHed key or a queueing error aborted. The shards count
//! commits and failed validations (`ShardStats`) but never see a
//! transaction's level or its end; the connection does.
//!
//! One relaxed atomic add per transaction end (not per command), as
//! `Shared::total_commands` is per batch.

use std::sync::atomic::{AtomicU64, Ordering};

use elsa_txn::Isolation;

/// How a BEGIN transaction ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// COMMIT succeeded.
    Committed,
    /// COMMIT failed validation (`-CONFLICT`).
    Conflict,
    /// COMMIT failed otherwise (log, replicas, routing…).
    Error,
    /// The client ended it with ABORT.
    Aborted,
}

impl Outcome {
    pub const ALL: [Outcome; 4] = [
        Outcome::Committed,
        Outcome::Conflict,
        Outcome::Error,
        Outcome::Aborted,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Outcome::Committed => "committed",
            Outcome::Conflict => "conflict",
            Outcome::Error => "error",
            Outcome::Aborted => "aborted",
        }
    }
}

/// The levels, in the order of [`TxnStats`]' rows.
pub const LEVELS: [Isolation; 3] = [
    Isolation::ReadCommitted,
    Isolation::RepeatableRead,
    Isolation::Snapshot,
];

fn row(i: Isolation) -> usize {
    match i {
        Isolation::ReadCommitted => 0,
        Isolation::RepeatableRead => 1,
        Isolation::Snapshot => 2,
    }
}

/// The node's counters.
#[derive(Debug, Default)]
pub struct TxnStats {
    begin: [[AtomicU64; 4]; 3],
    exec_watch_failed: AtomicU64,
    exec_aborted: AtomicU64,
}

impl TxnStats {
    /// A BEGIN transaction at level `i` ended so.
    pub fn ended(&self, i: Isolation, o: Outcome) {
        self.begin[row(i)][o as usize].fetch_add(1, Ordering::Relaxed);
    }

    /// An EXEC answered nil: a WATCHed key had changed.
    pub fn exec_watch_failed(&self) {
        self.exec_watch_failed.fetch_add(1, Ordering::Relaxed);
    }

    /// An EXEC answered EXECABORT (a queued command was refused).
    pub fn exec_aborted(&self) {
        self.exec_aborted.fetch_add(1, Ordering::Relaxed);
    }

    /// BEGIN transactions that ended at level `i` with `o`.
    pub fn count(&self, i: Isolation, o: Outcome) -> u64 {
        self.begin[row(i)][o as usize].load(Ordering::Relaxed)
    }

    /// (EXECs aborted by WATCH, EXECs aborted by EXECABORT).
    pub fn exec(&self) -> (u64, u64) {
        (
            self.exec_watch_failed.load(Ordering::Relaxed),
            self.exec_aborted.load(Ordering::Relaxed),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_level_and_outcome_counts_apart() {
        let s = TxnStats::default();
        s.ended(Isolation::ReadCommitted, Outcome::Committed);
        s.ended(Isolation::Snapshot, Outcome::Conflict);
        s.ended(Isolation::Snapshot, Outcome::Conflict);
        s.exec_watch_failed();
        for i in LEVELS {
            for o in Outcome::ALL {
                let want = match (i, o) {
                    (Isolation::ReadCommitted, Outcome::Committed) => 1,
                    (Isolation::Snapshot, Outcome::Conflict) => 2,
                    _ => 0,
                };
                assert_eq!(s.count(i, o), want, "{} {}", i.name(), o.name());
            }
        }
        assert_eq!(s.exec(), (1, 0));
    }
}

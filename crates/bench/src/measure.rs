//! Latency and outcome recording: one HdrHistogram per operation name per
//! client thread (no sharing on the hot path), merged when the run ends,
//! plus the transaction counters (commits, aborts, retries).

use std::collections::BTreeMap;

use hdrhistogram::Histogram;

/// Latencies in microseconds, from 1 µs to one hour at 3 significant digits
/// (what YCSB's HdrHistogram measurement uses).
fn new_histogram() -> Histogram<u64> {
    // Constant bounds that satisfy HdrHistogram's preconditions: no input
    // reaches this.
    Histogram::new_with_bounds(1, 3_600_000_000, 3).expect("constant histogram bounds are valid")
}

/// One operation's latencies and return codes.
#[derive(Clone, Debug)]
pub struct OpStats {
    /// Latencies (µs) of successful operations.
    pub hist: Histogram<u64>,
    /// Operations that answered OK.
    pub ok: u64,
    /// Operations that failed (error reply, lost connection, gave up
    /// retrying).
    pub errors: u64,
}

impl Default for OpStats {
    fn default() -> OpStats {
        OpStats {
            hist: new_histogram(),
            ok: 0,
            errors: 0,
        }
    }
}

impl OpStats {
    /// Total operations, failed or not.
    pub fn operations(&self) -> u64 {
        self.ok + self.errors
    }
}

/// Everything one thread (or, merged, one run) measured.
#[derive(Clone, Debug, Default)]
pub struct Recorder {
    /// Per operation name (`READ`, `UPDATE`, `TXN`, `INTENDED-READ`, ...).
    pub ops: BTreeMap<&'static str, OpStats>,
    /// Transactions (or batches) that committed.
    pub commits: u64,
    /// Attempts that lost a conflict (and were retried or given up).
    pub aborts: u64,
    /// Retries issued after an abort.
    pub retries: u64,
    /// Transactions given up after `--max-retries`.
    pub gave_up: u64,
    /// Key-value operations inside committed transactions or batches.
    pub kv_ops: u64,
    /// Read-only transactions that committed (YCSB-T; see
    /// [`Recorder::read_only`]).
    pub ro_commits: u64,
    /// Attempts of read-only transactions that lost a conflict.
    pub ro_aborts: u64,
    /// While false (warm-up), nothing is recorded.
    pub enabled: bool,
}

impl Recorder {
    /// A recorder that records from the start.
    pub fn new() -> Recorder {
        Recorder {
            enabled: true,
            ..Recorder::default()
        }
    }

    /// Records a successful operation's latency.
    pub fn ok(&mut self, op: &'static str, micros: u64) {
        if !self.enabled {
            return;
        }
        let s = self.ops.entry(op).or_default();
        s.ok += 1;
        // Saturate instead of failing on an absurd (>1 h) latency.
        s.hist.saturating_record(micros.max(1));
    }

    /// Records a failed operation (YCSB's `Return=ERROR`).
    pub fn error(&mut self, op: &'static str) {
        if !self.enabled {
            return;
        }
        self.ops.entry(op).or_default().errors += 1;
    }

    /// Adds transaction counters.
    pub fn txn(&mut self, committed: bool, aborts: u64, kv_ops: u64) {
        if !self.enabled {
            return;
        }
        if committed {
            self.commits += 1;
            self.kv_ops += kv_ops;
        } else {
            self.gave_up += 1;
        }
        self.aborts += aborts;
        self.retries += if committed {
            aborts
        } else {
            aborts.saturating_sub(1)
        };
    }

    /// Counts a transaction that only read, after [`Recorder::txn`]:
    /// its abort rate is reported apart, since a snapshot read never
    /// needs to abort.
    pub fn read_only(&mut self, committed: bool, aborts: u64) {
        if !self.enabled {
            return;
        }
        self.ro_commits += u64::from(committed);
        self.ro_aborts += aborts;
    }

    /// Folds another thread's recorder into this one.
    pub fn merge(&mut self, other: &Recorder) {
        for (name, s) in &other.ops {
            let mine = self.ops.entry(name).or_default();
            mine.ok += s.ok;
            mine.errors += s.errors;
            // Same bounds on both sides, so adding cannot fail.
            let _ = mine.hist.add(&s.hist);
        }
        self.commits += other.commits;
        self.aborts += other.aborts;
        self.retries += other.retries;
        self.gave_up += other.gave_up;
        self.kv_ops += other.kv_ops;
        self.ro_commits += other.ro_commits;
        self.ro_aborts += other.ro_aborts;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn merge_adds_counts_and_histograms() {
        let mut a = Recorder::new();
        a.ok("READ", 10);
        a.ok("READ", 30);
        a.error("READ");
        a.txn(true, 2, 5);
        let mut b = Recorder::new();
        b.ok("READ", 20);
        b.ok("UPDATE", 100);
        b.txn(false, 3, 5);
        b.read_only(false, 3);
        a.read_only(true, 0);
        a.merge(&b);
        assert_eq!((a.ro_commits, a.ro_aborts), (1, 3));
        let r = &a.ops["READ"];
        assert_eq!((r.ok, r.errors, r.operations()), (3, 1, 4));
        assert_eq!(r.hist.len(), 3);
        assert_eq!(r.hist.min(), 10);
        assert_eq!(a.ops["UPDATE"].ok, 1);
        assert_eq!(
            (a.commits, a.gave_up, a.aborts, a.retries, a.kv_ops),
            (1, 1, 5, 4, 5)
        );
    }

    #[test]
    fn disabled_records_nothing() {
        let mut a = Recorder::default();
        a.ok("READ", 10);
        a.txn(true, 1, 1);
        assert!(a.ops.is_empty());
        assert_eq!(a.commits, 0);
    }
}

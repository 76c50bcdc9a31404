//! Command statistics (INFO commandstats, errorstats, latencystats; LATENCY
//! HISTOGRAM; the Prometheus exporter): per command and per subcommand as
//! Redis 7 names them (`client|list`), calls, µs, rejected and failed
//! calls, a latency histogram, and errors counted by their prefix.
//!
//! Cost on the hot path: every worker thread owns a [`Local`] block of
//! counters that only it writes (a relaxed load and store, no locked
//! instruction, no cache line shared with another core); readers add the
//! blocks up. Resetting (CONFIG RESETSTAT) never writes a worker's
//! counters: it records the current totals as a baseline that reads
//! subtract, so the single-writer rule holds.
//!
//! Read API for exporters: [`snapshot`] (one [`CommandStat`] per command
//! that was called, with its histogram as cumulative `(upper bound µs,
//! count)` buckets) and [`error_stats`].

use std::cell::RefCell;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, LazyLock, Mutex, OnceLock};

use crate::cmd::{self, Spec, COMMANDS};

/// Sub-buckets per power of two: 3 bits, so a bucket's width is at most
/// 1/8 of its lower bound (percentiles within 12.5%, as fine as Redis's
/// latencystats need, coarser than its HDR histogram's 2 digits).
const SUB_BITS: u32 = 3;
const SUB: u64 = 1 << SUB_BITS;
/// Largest exponent kept: 2^40 µs (12 days); longer lands in the last bucket.
const MAX_EXP: u32 = 40;
/// Buckets per histogram.
pub const BUCKETS: usize = (SUB + (MAX_EXP as u64 - SUB_BITS as u64 + 1) * SUB) as usize;
/// Most distinct error prefixes kept, as Redis (`ERROR_STATS_NUMBER`);
/// past that new prefixes are not tracked (total_error_replies still
/// counts them).
const MAX_ERROR_PREFIXES: usize = 128;

/// The bucket a duration in µs falls in.
pub fn bucket_of(us: u64) -> usize {
    if us < SUB {
        return us as usize;
    }
    let exp = (63 - us.leading_zeros()).min(MAX_EXP);
    if exp == MAX_EXP && us >= 1 << (MAX_EXP + 1) {
        return BUCKETS - 1;
    }
    let sub = (us >> (exp - SUB_BITS)) & (SUB - 1);
    (SUB + (exp - SUB_BITS) as u64 * SUB + sub) as usize
}

/// The largest duration (µs) bucket `i` holds.
pub fn bucket_upper(i: usize) -> u64 {
    let i = i as u64;
    if i < SUB {
        return i;
    }
    let exp = (i - SUB) / SUB + SUB_BITS as u64;
    let sub = (i - SUB) % SUB;
    ((SUB + sub + 1) << (exp - SUB_BITS as u64)) - 1
}

/// Where each command's counters are: a slot per command of the table,
/// then one per subcommand of each container.
struct Slots {
    names: Vec<String>,
    /// Per command (its index in `COMMANDS`): its containers' first
    /// subcommand slot and the subcommand names.
    subs: Vec<Option<(usize, Subcommands)>>,
}

/// A container's subcommands and their arities (`cmd::subcommands_of`).
type Subcommands = &'static [(&'static str, i32)];

static SLOTS: LazyLock<Slots> = LazyLock::new(|| {
    let mut names: Vec<String> = COMMANDS.iter().map(|s| s.name.to_string()).collect();
    let mut subs = Vec::with_capacity(COMMANDS.len());
    for spec in COMMANDS {
        match cmd::subcommands_of(spec.name) {
            Some(list) => {
                subs.push(Some((names.len(), list)));
                names.extend(list.iter().map(|(s, _)| format!("{}|{s}", spec.name)));
            }
            None => subs.push(None),
        }
    }
    Slots { names, subs }
});

/// No slot: an unknown command (counted in errorstats only, as Redis).
pub const NO_SLOT: u32 = u32::MAX;

/// The slot of a request for `spec`: its subcommand's for a container
/// with a known subcommand, else the command's.
pub fn slot(spec: &'static Spec, args: &[bytes::Bytes]) -> u32 {
    let index = cmd::spec_index(spec);
    if let Some((first, list)) = SLOTS.subs[index] {
        if let Some(arg) = args.get(1) {
            // An unknown subcommand is no command at all to Redis: its
            // refusal counts in errorstats only.
            return match list.iter().position(|(n, _)| cmd::is(arg, n)) {
                Some(i) => (first + i) as u32,
                None => NO_SLOT,
            };
        }
    }
    index as u32
}

/// A slot's name (`get`, `config|set`).
pub fn slot_name(slot: u32) -> &'static str {
    SLOTS
        .names
        .get(slot as usize)
        .map(String::as_str)
        .unwrap_or("")
}

/// The command a slot counts (a subcommand's container for a subcommand).
pub fn slot_spec(slot: u32) -> Option<&'static Spec> {
    let slot = slot as usize;
    if let Some(spec) = COMMANDS.get(slot) {
        return Some(spec);
    }
    SLOTS
        .subs
        .iter()
        .enumerate()
        .filter_map(|(i, s)| s.map(|(first, list)| (i, first, list.len())))
        .find(|(_, first, n)| (*first..first + n).contains(&slot))
        .map(|(i, _, _)| &COMMANDS[i])
}

/// One command's counters in one worker.
#[derive(Default)]
struct Counters {
    calls: AtomicU64,
    usec: AtomicU64,
    rejected: AtomicU64,
    failed: AtomicU64,
    /// Made on the command's first call: most commands are never called.
    hist: OnceLock<Box<[AtomicU64]>>,
}

/// Adds `n` to a counter only this thread writes: no locked instruction.
#[inline]
fn bump(a: &AtomicU64, n: u64) {
    a.store(a.load(Relaxed).wrapping_add(n), Relaxed);
}

/// One worker thread's counters. Only that thread writes them.
pub struct Local {
    slots: Box<[Counters]>,
    /// Error replies by prefix (`ERR`, `WRONGTYPE`): errors are the rare
    /// path, so a map behind this worker's own (uncontended) mutex.
    errors: Mutex<HashMap<String, u64>>,
    error_replies: AtomicU64,
    /// Bytes read from and written to clients, and the reads and writes
    /// (INFO's total_net_*_bytes, total_reads/writes_processed).
    net_in: AtomicU64,
    net_out: AtomicU64,
    reads: AtomicU64,
    writes: AtomicU64,
    /// Transaction outcomes per [`TxnKind`] and [`TxnOutcome`].
    txns: [AtomicU64; TXN_KINDS * TXN_OUTCOMES],
}

/// Which transactions: BEGIN's three isolation levels, and MULTI/EXEC.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TxnKind {
    Rc = 0,
    Rr = 1,
    Si = 2,
    MultiExec = 3,
}
const TXN_KINDS: usize = 4;

/// How a transaction ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TxnOutcome {
    Commit = 0,
    /// Validation failed (a concurrent commit; a WATCHed key changed).
    Conflict = 1,
    /// Any other end without commit (ABORT, an error, EXECABORT).
    Abort = 2,
}
const TXN_OUTCOMES: usize = 3;

impl TxnKind {
    /// The name INFO uses: `rc`, `rr`, `si`, `multi_exec`.
    pub fn name(self) -> &'static str {
        ["rc", "rr", "si", "multi_exec"][self as usize]
    }
    /// The metrics port's label: `RC`, `RR`, `SI`, `MULTI`.
    pub fn label(self) -> &'static str {
        ["RC", "RR", "SI", "MULTI"][self as usize]
    }
    pub const ALL: [TxnKind; TXN_KINDS] =
        [TxnKind::Rc, TxnKind::Rr, TxnKind::Si, TxnKind::MultiExec];
    pub fn of(iso: elsa_txn::Isolation) -> TxnKind {
        match iso {
            elsa_txn::Isolation::ReadCommitted => TxnKind::Rc,
            elsa_txn::Isolation::RepeatableRead => TxnKind::Rr,
            elsa_txn::Isolation::Snapshot => TxnKind::Si,
        }
    }
}

impl Local {
    /// A transaction of `kind` ended as `outcome`.
    pub fn txn(&self, kind: TxnKind, outcome: TxnOutcome) {
        bump(
            &self.txns[kind as usize * TXN_OUTCOMES + outcome as usize],
            1,
        );
    }

    /// A read from a client's socket returned `n` bytes.
    #[inline]
    pub fn read(&self, n: usize) {
        bump(&self.reads, 1);
        bump(&self.net_in, n as u64);
    }

    /// A write to a client's socket took `n` bytes.
    #[inline]
    pub fn wrote(&self, n: usize) {
        bump(&self.writes, 1);
        bump(&self.net_out, n as u64);
    }

    fn new() -> Local {
        Local {
            slots: (0..SLOTS.names.len())
                .map(|_| Counters::default())
                .collect(),
            errors: Mutex::new(HashMap::new()),
            error_replies: AtomicU64::new(0),
            net_in: AtomicU64::new(0),
            net_out: AtomicU64::new(0),
            reads: AtomicU64::new(0),
            writes: AtomicU64::new(0),
            txns: std::array::from_fn(|_| AtomicU64::new(0)),
        }
    }

    /// A command ran for `us` µs; `failed` when it answered an error.
    #[inline]
    pub fn call(&self, slot: u32, us: u64, failed: bool) {
        let Some(c) = self.slots.get(slot as usize) else {
            return;
        };
        bump(&c.calls, 1);
        bump(&c.usec, us);
        if failed {
            bump(&c.failed, 1);
        }
        let hist = c
            .hist
            .get_or_init(|| (0..BUCKETS).map(|_| AtomicU64::new(0)).collect());
        // Under 1 µs counts as 1 µs, as Redis's histograms start at 1 µs.
        bump(&hist[bucket_of(us.max(1))], 1);
    }

    /// A command was refused before it ran (arity, ACL, …).
    pub fn rejected(&self, slot: u32) {
        if let Some(c) = self.slots.get(slot as usize) {
            bump(&c.rejected, 1);
        }
    }

    /// An error reply went out: counted under its prefix (the text up to
    /// the first space, as Redis's `afterErrorReply`).
    pub fn error(&self, text: &str) {
        bump(&self.error_replies, 1);
        let prefix = text.split(' ').next().unwrap_or("");
        let Ok(mut m) = self.errors.lock() else {
            return;
        };
        if let Some(n) = m.get_mut(prefix) {
            *n += 1;
        } else if m.len() < MAX_ERROR_PREFIXES {
            m.insert(prefix.to_string(), 1);
        }
    }
}

/// The node's command statistics: every worker's block, and the baseline
/// CONFIG RESETSTAT left.
#[derive(Default)]
pub struct CmdStats {
    workers: Mutex<Vec<Arc<Local>>>,
    baseline: Mutex<Option<Totals>>,
}

thread_local! {
    /// This thread's block, per node (keyed by the node's `CmdStats`
    /// address: tests may run more than one node in a process).
    static LOCAL: RefCell<Vec<(usize, Arc<Local>)>> = const { RefCell::new(Vec::new()) };
}

impl CmdStats {
    /// The calling thread's block (made and registered on first use).
    pub fn local(&self) -> Arc<Local> {
        let key = self as *const CmdStats as usize;
        LOCAL.with(|l| {
            let mut l = l.borrow_mut();
            if let Some((_, local)) = l.iter().find(|(k, _)| *k == key) {
                return local.clone();
            }
            let local = Arc::new(Local::new());
            if let Ok(mut w) = self.workers.lock() {
                w.push(local.clone());
            }
            l.push((key, local.clone()));
            local
        })
    }

    /// Every worker's counters added up (before the baseline).
    fn raw(&self) -> Totals {
        let mut t = Totals::new();
        let workers = self.workers.lock().map(|w| w.clone()).unwrap_or_default();
        for w in workers {
            for (i, c) in w.slots.iter().enumerate() {
                let s = &mut t.slots[i];
                s.calls += c.calls.load(Relaxed);
                s.usec += c.usec.load(Relaxed);
                s.rejected += c.rejected.load(Relaxed);
                s.failed += c.failed.load(Relaxed);
                if let Some(h) = c.hist.get() {
                    let sh = s.hist.get_or_insert_with(|| vec![0; BUCKETS]);
                    for (a, b) in sh.iter_mut().zip(h.iter()) {
                        *a += b.load(Relaxed);
                    }
                }
            }
            if let Ok(m) = w.errors.lock() {
                for (k, v) in m.iter() {
                    *t.errors.entry(k.clone()).or_default() += v;
                }
            }
            t.error_replies += w.error_replies.load(Relaxed);
            t.net.input += w.net_in.load(Relaxed);
            t.net.output += w.net_out.load(Relaxed);
            t.net.reads += w.reads.load(Relaxed);
            t.net.writes += w.writes.load(Relaxed);
            for (a, b) in t.txns.iter_mut().zip(&w.txns) {
                *a += b.load(Relaxed);
            }
        }
        t
    }

    /// Network totals only (what the rate sampler reads ten times a
    /// second: no per-command work), before the baseline.
    pub fn net_raw(&self) -> Net {
        let mut n = Net::default();
        let workers = self.workers.lock().map(|w| w.clone()).unwrap_or_default();
        for w in workers {
            n.input += w.net_in.load(Relaxed);
            n.output += w.net_out.load(Relaxed);
            n.reads += w.reads.load(Relaxed);
            n.writes += w.writes.load(Relaxed);
        }
        n
    }

    /// The totals since start or the last reset.
    pub fn totals(&self) -> Totals {
        let mut t = self.raw();
        if let Ok(b) = self.baseline.lock() {
            if let Some(b) = b.as_ref() {
                t.subtract(b);
            }
        }
        t
    }

    /// CONFIG RESETSTAT: from now on, counts start at zero.
    pub fn reset(&self) {
        let now = self.raw();
        if let Ok(mut b) = self.baseline.lock() {
            *b = Some(now);
        }
    }
}

/// One command's counters, added up.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SlotTotals {
    pub calls: u64,
    pub usec: u64,
    pub rejected: u64,
    pub failed: u64,
    /// Per bucket (not cumulative), when it was ever called.
    pub hist: Option<Vec<u64>>,
}

/// Client traffic: bytes in and out, reads and writes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Net {
    pub input: u64,
    pub output: u64,
    pub reads: u64,
    pub writes: u64,
}

/// Every command's counters and the error counts.
#[derive(Clone, Debug)]
pub struct Totals {
    pub slots: Vec<SlotTotals>,
    pub errors: HashMap<String, u64>,
    pub error_replies: u64,
    pub net: Net,
    txns: [u64; TXN_KINDS * TXN_OUTCOMES],
}

impl Totals {
    fn new() -> Totals {
        Totals {
            slots: vec![SlotTotals::default(); SLOTS.names.len()],
            errors: HashMap::new(),
            error_replies: 0,
            net: Net::default(),
            txns: [0; TXN_KINDS * TXN_OUTCOMES],
        }
    }

    fn subtract(&mut self, b: &Totals) {
        for (s, b) in self.slots.iter_mut().zip(&b.slots) {
            s.calls = s.calls.saturating_sub(b.calls);
            s.usec = s.usec.saturating_sub(b.usec);
            s.rejected = s.rejected.saturating_sub(b.rejected);
            s.failed = s.failed.saturating_sub(b.failed);
            if let (Some(h), Some(bh)) = (s.hist.as_mut(), b.hist.as_ref()) {
                for (x, y) in h.iter_mut().zip(bh) {
                    *x = x.saturating_sub(*y);
                }
            }
        }
        for (k, v) in &b.errors {
            if let Some(n) = self.errors.get_mut(k) {
                *n = n.saturating_sub(*v);
            }
        }
        self.errors.retain(|_, n| *n > 0);
        self.error_replies = self.error_replies.saturating_sub(b.error_replies);
        self.net.input = self.net.input.saturating_sub(b.net.input);
        self.net.output = self.net.output.saturating_sub(b.net.output);
        self.net.reads = self.net.reads.saturating_sub(b.net.reads);
        self.net.writes = self.net.writes.saturating_sub(b.net.writes);
        for (a, b) in self.txns.iter_mut().zip(&b.txns) {
            *a = a.saturating_sub(*b);
        }
    }

    /// How many transactions of `kind` ended as `outcome`.
    pub fn txns(&self, kind: TxnKind, outcome: TxnOutcome) -> u64 {
        self.txns[kind as usize * TXN_OUTCOMES + outcome as usize]
    }

    /// Total calls of every command.
    pub fn total_calls(&self) -> u64 {
        self.slots.iter().map(|s| s.calls).sum()
    }
}

/// A command's statistics as the exporters read them.
#[derive(Clone, Debug, PartialEq)]
pub struct CommandStat {
    /// Redis's name: `get`, `client|list`.
    pub name: &'static str,
    pub calls: u64,
    pub usec: u64,
    pub rejected_calls: u64,
    pub failed_calls: u64,
    /// Cumulative histogram: `(upper bound in µs, calls that took at most
    /// that long)`, ascending, up to the bucket holding the slowest call
    /// (Prometheus's `le` buckets; `+Inf` is `calls`).
    pub buckets: Vec<(u64, u64)>,
}

impl CommandStat {
    /// The duration (µs) under which `p` percent of the calls ran
    /// (the upper bound of the bucket the percentile falls in).
    pub fn percentile(&self, p: f64) -> u64 {
        percentile(&self.buckets, p)
    }
}

/// `p` percent's bucket bound in a cumulative histogram.
pub fn percentile(buckets: &[(u64, u64)], p: f64) -> u64 {
    let Some(&(_, total)) = buckets.last() else {
        return 0;
    };
    let want = ((p / 100.0) * total as f64).ceil().max(1.0) as u64;
    buckets
        .iter()
        .find(|(_, n)| *n >= want)
        .map_or(0, |(le, _)| *le)
}

fn cumulative(hist: &[u64]) -> Vec<(u64, u64)> {
    let last = hist.iter().rposition(|&n| n > 0);
    let mut sum = 0;
    hist.iter()
        .take(last.map_or(0, |l| l + 1))
        .enumerate()
        .map(|(i, n)| {
            sum += n;
            (bucket_upper(i), sum)
        })
        .collect()
}

impl Totals {
    /// One [`CommandStat`] per command called or refused since the reset,
    /// in the command table's order.
    pub fn commands(&self) -> Vec<CommandStat> {
        self.slots
            .iter()
            .enumerate()
            .filter(|(_, s)| s.calls + s.rejected + s.failed > 0)
            .map(|(i, s)| CommandStat {
                name: slot_name(i as u32),
                calls: s.calls,
                usec: s.usec,
                rejected_calls: s.rejected,
                failed_calls: s.failed,
                buckets: s.hist.as_deref().map(cumulative).unwrap_or_default(),
            })
            .collect()
    }
}

/// The read API: every command's statistics on this node.
pub fn snapshot(stats: &CmdStats) -> Vec<CommandStat> {
    stats.totals().commands()
}

/// Error replies by prefix (`ERR`, `WRONGTYPE`…), sorted by prefix.
pub fn error_stats(stats: &CmdStats) -> Vec<(String, u64)> {
    let mut v: Vec<(String, u64)> = stats.totals().errors.into_iter().collect();
    v.sort();
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_cover_every_duration_in_order() {
        let mut last = 0;
        for us in (0..5000u64).chain([1 << 20, (1 << 20) + 1, 1 << 39, u64::MAX]) {
            let b = bucket_of(us);
            assert!(b < BUCKETS, "{us}");
            assert!(b >= last || us > 5000, "bucket order at {us}");
            if us < 5000 {
                last = b;
            }
            if us < 1 << 41 {
                assert!(us <= bucket_upper(b), "{us} over its bucket {b}");
                if b > 0 {
                    assert!(us > bucket_upper(b - 1), "{us} fits an earlier bucket");
                }
            }
        }
        // Relative width at most 1/8.
        for b in SUB as usize..BUCKETS - 1 {
            let lo = bucket_upper(b - 1) + 1;
            let hi = bucket_upper(b);
            assert!((hi - lo + 1) * 8 <= lo, "bucket {b}: {lo}..={hi}");
        }
    }

    #[test]
    fn workers_add_up_and_reset_is_a_baseline() {
        let stats = Arc::new(CmdStats::default());
        let get = slot(cmd::lookup(b"get").unwrap(), &[]);
        let set = slot(
            cmd::lookup(b"config").unwrap(),
            &[bytes::Bytes::from("config"), bytes::Bytes::from("SET")],
        );
        assert_eq!(slot_name(set), "config|set");
        let mut threads = Vec::new();
        for t in 0..3u64 {
            let stats = stats.clone();
            threads.push(std::thread::spawn(move || {
                let l = stats.local();
                for i in 0..100 {
                    l.call(get, t * 10 + i, i % 10 == 0);
                }
                l.rejected(set);
                l.error("ERR wrong number");
                l.error("WRONGTYPE Operation");
            }));
        }
        for t in threads {
            t.join().unwrap();
        }
        let t = stats.totals();
        let g = &t.slots[get as usize];
        assert_eq!(g.calls, 300);
        assert_eq!(g.failed, 30);
        let expected_usec: u64 = (0..3).flat_map(|t| (0..100).map(move |i| t * 10 + i)).sum();
        assert_eq!(g.usec, expected_usec);
        assert_eq!(t.slots[set as usize].rejected, 3);
        assert_eq!(t.errors.get("ERR"), Some(&3));
        assert_eq!(t.errors.get("WRONGTYPE"), Some(&3));
        assert_eq!(t.error_replies, 6);
        let cmds = t.commands();
        let gs = cmds.iter().find(|c| c.name == "get").unwrap();
        assert_eq!(gs.buckets.last().unwrap().1, 300);
        // 0..=119 µs, uniform-ish: the median is near 60, p100 near 119.
        let p50 = gs.percentile(50.0);
        assert!((50..=70).contains(&p50), "p50 {p50}");
        assert!(gs.percentile(100.0) >= 119);

        stats.reset();
        let t = stats.totals();
        assert_eq!(t.total_calls(), 0);
        assert!(t.errors.is_empty());
        assert!(t.commands().is_empty());
        stats.local().call(get, 5, false);
        let t = stats.totals();
        assert_eq!(t.slots[get as usize].calls, 1);
        assert_eq!(
            t.commands()[0].buckets.last(),
            Some(&(bucket_upper(bucket_of(5)), 1))
        );
    }

    #[test]
    fn percentiles_of_a_known_histogram() {
        let b = vec![(1, 10), (3, 50), (7, 99), (15, 100)];
        assert_eq!(percentile(&b, 50.0), 3);
        assert_eq!(percentile(&b, 99.0), 7);
        assert_eq!(percentile(&b, 99.9), 15);
        assert_eq!(percentile(&[], 50.0), 0);
    }
}

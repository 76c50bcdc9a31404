//! YCSB-T, the Elsa paper's transactional YCSB (§5.1.4): each step is a
//! transaction of N read/update operations on Zipf-chosen records, with a
//! share of read-only and of long transactions, run at an isolation level
//! and retried until it commits.
//!
//! How a transaction runs on each system (reads are round trips because a
//! real client uses what it read; writes do not depend on reads here, so
//! they travel with the next round trip, on every system alike):
//! - **Elsa**: `BEGIN RC|RR|SI`, `GET`s and `SET`s, `COMMIT` (an integer
//!   commit timestamp, or `-CONFLICT …`: retry). `--isolation watch` uses
//!   the Redis form below instead.
//! - **Redis**: `WATCH` every key of the transaction, `GET`s, then
//!   `MULTI` + `SET`s + `EXEC`; a nil `EXEC` (a watched key changed) is an
//!   abort: retry. Read-only transactions still `EXEC` (empty) to validate.
//! - **PostgreSQL**: `usertable` at READ COMMITTED, REPEATABLE READ (its
//!   snapshot isolation, used for both RR and SI) or SERIALIZABLE; SQLSTATE
//!   40001/40P01 is an abort: retry.
//!
//! Records are `user<n>` (ranked: record 0 is the hottest), one field each:
//! the RESP key `user<n>:field0`, the PostgreSQL row `YCSB_KEY = 'user<n>'`.

use std::sync::Arc;
use std::time::Duration;

use clap::Args;
use postgres::types::ToSql;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use redis::Value;

use crate::gen::{random_value, Zipf};
use crate::measure::Recorder;
use crate::report::{java_f64, ycsb_summary, RunRecord};
use crate::runner::{drive, Plan, Step, StepResult, Worker};
use crate::target::{pg_conflict, redis_conflict, redis_fatal, Isolation, System, Target};
use crate::ycsb::Workload;
use crate::{BenchError, Common};

/// `elsa bench ycsbt`.
#[derive(Args, Debug, Clone)]
pub struct YcsbtArgs {
    /// Client threads (one connection each).
    #[arg(long, default_value_t = 8)]
    pub threads: usize,
    /// Records in the key space.
    #[arg(long, default_value_t = 100_000)]
    pub records: u64,
    /// Zipf exponent of the key choice (the paper: 1 = low contention, 4 = high).
    #[arg(long, default_value_t = 1.0)]
    pub zipf: f64,
    /// Operations in a regular transaction.
    #[arg(long, default_value_t = 5)]
    pub txn_ops: usize,
    /// Share of reads among the operations of a read-write transaction.
    #[arg(long, default_value_t = 0.5)]
    pub read_proportion: f64,
    /// Share of transactions that only read.
    #[arg(long, default_value_t = 0.1)]
    pub read_only_share: f64,
    /// Share of long transactions.
    #[arg(long, default_value_t = 0.05)]
    pub long_share: f64,
    /// Operations in a long transaction.
    #[arg(long, default_value_t = 50)]
    pub long_ops: usize,
    /// rc, rr, si, serializable (PostgreSQL) or watch (Redis form); default: si on Elsa and
    /// PostgreSQL, watch on Redis.
    #[arg(long)]
    pub isolation: Option<String>,
    /// Read/update operations per thread (the paper: 10 000); sets the number of transactions.
    #[arg(long, default_value_t = 10_000)]
    pub ops_per_thread: u64,
    /// Total transactions (overrides --ops-per-thread).
    #[arg(long)]
    pub txns: Option<u64>,
    /// Bytes per value written.
    #[arg(long, default_value_t = 100)]
    pub value_size: usize,
    /// Give a transaction up after this many aborts.
    #[arg(long, default_value_t = 1000)]
    pub max_retries: u32,
    /// Do not (re)load the records first.
    #[arg(long)]
    pub no_load: bool,
    #[command(flatten)]
    pub common: Common,
}

impl YcsbtArgs {
    fn validate(&self) -> Result<(), BenchError> {
        let share = |x: f64| (0.0..=1.0).contains(&x);
        if !(share(self.read_proportion) && share(self.read_only_share) && share(self.long_share)) {
            return Err(BenchError::Config(
                "--read-proportion, --read-only-share and --long-share must be within 0..1".into(),
            ));
        }
        if self.txn_ops == 0 || self.long_ops == 0 || self.records == 0 || self.threads == 0 {
            return Err(BenchError::Config(
                "--txn-ops, --long-ops, --records and --threads must be at least 1".into(),
            ));
        }
        Ok(())
    }

    /// Mean operations per transaction.
    fn mean_ops(&self) -> f64 {
        (1.0 - self.long_share) * self.txn_ops as f64 + self.long_share * self.long_ops as f64
    }
}

/// One operation of a transaction, on a record number.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TxnOp {
    /// Read the record.
    Read(u64),
    /// Overwrite the record.
    Update(u64),
}

/// The YCSB-T transaction mix: sizes, read-only share and Zipf keys.
#[derive(Clone, Debug)]
pub struct TxnMix {
    zipf: Zipf,
    txn_ops: usize,
    long_ops: usize,
    long_share: f64,
    read_only_share: f64,
    read_proportion: f64,
}

impl TxnMix {
    /// The next transaction's operations.
    pub fn next(&self, rng: &mut StdRng) -> Vec<TxnOp> {
        let n = if rng.gen::<f64>() < self.long_share {
            self.long_ops
        } else {
            self.txn_ops
        };
        let read_only = rng.gen::<f64>() < self.read_only_share;
        (0..n)
            .map(|_| {
                let k = self.zipf.sample(rng) - 1;
                if read_only || rng.gen::<f64>() < self.read_proportion {
                    TxnOp::Read(k)
                } else {
                    TxnOp::Update(k)
                }
            })
            .collect()
    }
}

/// The YCSB-T record key (`user<n>`).
pub fn record_key(n: u64) -> String {
    format!("user{n}")
}

/// The RESP key holding the record's single field.
pub fn resp_key(n: u64) -> String {
    format!("user{n}:field0")
}

/// How one attempt ended.
enum Attempt {
    Committed,
    Conflict,
    Failed(String),
}

enum Conn {
    Resp(redis::Connection),
    Pg(Box<postgres::Client>, Box<[postgres::Statement; 2]>),
}

struct TxnWorker {
    conn: Conn,
    rng: StdRng,
    mix: Arc<TxnMix>,
    isolation: Isolation,
    value_size: usize,
    max_retries: u32,
    reported_error: bool,
}

/// Classifies a RESP error: a dead connection ends the run, a conflict is
/// retried, anything else is a failed transaction.
fn resp_outcome(
    c: &mut redis::Connection,
    r: redis::RedisResult<Attempt>,
    cleanup: &str,
) -> Result<Attempt, BenchError> {
    match r {
        Ok(a) => Ok(a),
        Err(e) if redis_fatal(&e) => Err(e.into()),
        Err(e) => {
            // Leave the connection outside any transaction whatever state
            // the error interrupted; the reply (often "without BEGIN") does
            // not matter.
            let _: redis::RedisResult<Value> = redis::cmd(cleanup).query(c);
            if redis_conflict(&e) {
                Ok(Attempt::Conflict)
            } else {
                Ok(Attempt::Failed(e.to_string()))
            }
        }
    }
}

/// Elsa's own transactions: BEGIN level … COMMIT.
fn elsa_begin(
    c: &mut redis::Connection,
    level: &str,
    ops: &[TxnOp],
    value: &str,
) -> redis::RedisResult<Attempt> {
    let mut p = redis::pipe();
    p.cmd("BEGIN").arg(level).ignore();
    for op in ops {
        match *op {
            TxnOp::Update(k) => {
                p.cmd("SET").arg(resp_key(k)).arg(value).ignore();
            }
            TxnOp::Read(k) => {
                p.cmd("GET").arg(resp_key(k));
                let _: Vec<Value> = p.query(c)?;
                p.clear();
            }
        }
    }
    p.cmd("COMMIT");
    let _: Vec<Value> = p.query(c)?;
    Ok(Attempt::Committed)
}

/// Redis's optimistic transactions: WATCH, GETs, MULTI, SETs, EXEC.
fn redis_watch(
    c: &mut redis::Connection,
    ops: &[TxnOp],
    value: &str,
) -> redis::RedisResult<Attempt> {
    let mut keys: Vec<String> = ops
        .iter()
        .map(|op| match *op {
            TxnOp::Read(k) | TxnOp::Update(k) => resp_key(k),
        })
        .collect();
    keys.sort_unstable();
    keys.dedup();
    let mut p = redis::pipe();
    p.cmd("WATCH").arg(&keys).ignore();
    let mut writes = Vec::new();
    for op in ops {
        match *op {
            TxnOp::Update(k) => writes.push(resp_key(k)),
            TxnOp::Read(k) => {
                p.cmd("GET").arg(resp_key(k));
                let _: Vec<Value> = p.query(c)?;
                p.clear();
            }
        }
    }
    p.cmd("MULTI").ignore();
    for k in &writes {
        p.cmd("SET").arg(k).arg(value).ignore();
    }
    p.cmd("EXEC");
    let r: Vec<Value> = p.query(c)?;
    Ok(match r.first() {
        Some(Value::Nil) | None => Attempt::Conflict,
        Some(_) => Attempt::Committed,
    })
}

impl TxnWorker {
    fn attempt(&mut self, ops: &[TxnOp]) -> Result<Attempt, BenchError> {
        let value = random_value(&mut self.rng, self.value_size);
        match &mut self.conn {
            Conn::Resp(c) => {
                if self.isolation == Isolation::Watch {
                    let r = redis_watch(c, ops, &value);
                    // UNWATCH also ends a WATCH left by an error before MULTI.
                    resp_outcome(c, r, "UNWATCH")
                } else {
                    let r = elsa_begin(c, self.isolation.name(), ops, &value);
                    resp_outcome(c, r, "ABORT")
                }
            }
            Conn::Pg(c, stmts) => {
                let level = self.isolation.pg_level();
                let r = (|| -> Result<(), postgres::Error> {
                    let mut tx = c.build_transaction().isolation_level(level).start()?;
                    for op in ops {
                        match *op {
                            TxnOp::Read(k) => {
                                tx.query_opt(&stmts[0], &[&record_key(k)])?;
                            }
                            TxnOp::Update(k) => {
                                let params: [&(dyn ToSql + Sync); 2] = [&value, &record_key(k)];
                                tx.execute(&stmts[1], &params)?;
                            }
                        }
                    }
                    tx.commit()
                })();
                match r {
                    Ok(()) => Ok(Attempt::Committed),
                    Err(e) if pg_conflict(&e) => Ok(Attempt::Conflict),
                    Err(e) if c.is_closed() => Err(e.into()),
                    Err(e) => Ok(Attempt::Failed(crate::target::pg_message(&e))),
                }
            }
        }
    }
}

impl Worker for TxnWorker {
    fn step(&mut self, rec: &mut Recorder) -> Result<StepResult, BenchError> {
        let ops = self.mix.next(&mut self.rng);
        let mut aborts = 0u64;
        let committed = loop {
            match self.attempt(&ops)? {
                Attempt::Committed => break true,
                Attempt::Conflict => {
                    aborts += 1;
                    if aborts > u64::from(self.max_retries) {
                        break false;
                    }
                    // Randomised exponential backoff (the same on every
                    // system), so hot-key retries do not just collide again.
                    let cap = (20u64 << aborts.min(6)).min(1000);
                    std::thread::sleep(Duration::from_micros(self.rng.gen_range(0..=cap)));
                }
                Attempt::Failed(msg) => {
                    if !self.reported_error {
                        eprintln!("elsa bench: transaction failed (further failures are only counted): {msg}");
                        self.reported_error = true;
                    }
                    break false;
                }
            }
        };
        rec.txn(committed, aborts, ops.len() as u64);
        if ops.iter().all(|op| matches!(op, TxnOp::Read(_))) {
            rec.read_only(committed, aborts);
        }
        Ok(StepResult::Done(Step {
            op: "TXN",
            ok: committed,
            units: if committed { ops.len() as u64 } else { 0 },
        }))
    }
}

/// Writes `records` records of `value_size` bytes (idempotent).
pub fn load(target: &Target, records: u64, value_size: usize, seed: u64) -> Result<(), BenchError> {
    let mut rng = StdRng::seed_from_u64(seed ^ 0x5eed);
    const CHUNK: u64 = 1000;
    match target.system {
        System::Postgres => {
            let mut c = target.postgres()?;
            c.batch_execute(&Workload::create_table_sql(
                "usertable",
                &["field0".to_string()],
            ))?;
            let mut start = 0;
            while start < records {
                let end = (start + CHUNK).min(records);
                let keys: Vec<String> = (start..end).map(record_key).collect();
                let vals: Vec<String> = (start..end)
                    .map(|_| random_value(&mut rng, value_size))
                    .collect();
                let rows: Vec<String> = (0..keys.len())
                    .map(|i| format!("(${}, ${})", 2 * i + 1, 2 * i + 2))
                    .collect();
                let sql = format!(
                    "INSERT INTO usertable (YCSB_KEY, field0) VALUES {} ON CONFLICT (YCSB_KEY) DO UPDATE SET field0 = EXCLUDED.field0",
                    rows.join(", ")
                );
                let mut params: Vec<&(dyn ToSql + Sync)> = Vec::with_capacity(keys.len() * 2);
                for (k, v) in keys.iter().zip(&vals) {
                    params.push(k);
                    params.push(v);
                }
                c.execute(&sql, &params)?;
                start = end;
            }
        }
        _ => {
            let mut c = target.redis()?;
            let mut start = 0;
            while start < records {
                let mut p = redis::pipe();
                for _ in 0..10 {
                    if start >= records {
                        break;
                    }
                    let end = (start + CHUNK).min(records);
                    let mut cmd = redis::cmd("MSET");
                    for n in start..end {
                        cmd.arg(resp_key(n)).arg(random_value(&mut rng, value_size));
                    }
                    p.add_command(cmd).ignore();
                    start = end;
                }
                p.query::<()>(&mut c)?;
            }
        }
    }
    Ok(())
}

/// Runs YCSB-T against `target`.
pub fn run(target: &Target, a: &YcsbtArgs, seed: u64) -> Result<(RunRecord, String), BenchError> {
    a.validate()?;
    let isolation = match &a.isolation {
        Some(s) => Isolation::parse(s)?,
        None => Isolation::default_for(target.system),
    };
    isolation.check(target.system)?;
    let zipf = Zipf::new(a.records, a.zipf).ok_or_else(|| {
        BenchError::Config(format!("--zipf {}: the exponent must be > 0", a.zipf))
    })?;
    if !a.no_load {
        eprintln!("# loading {} records", a.records);
        load(target, a.records, a.value_size, seed)?;
    }
    let mix = Arc::new(TxnMix {
        zipf,
        txn_ops: a.txn_ops,
        long_ops: a.long_ops,
        long_share: a.long_share,
        read_only_share: a.read_only_share,
        read_proportion: a.read_proportion,
    });
    let txns = a.txns.unwrap_or_else(|| {
        a.threads as u64 * (a.ops_per_thread as f64 / a.mean_ops()).ceil() as u64
    });
    let plan = Plan {
        threads: a.threads,
        steps: Some(txns),
        duration: a.common.duration(),
        warmup: a.common.warmup(),
        target_rate: a.common.target,
        label: format!(
            "ycsbt {} {} zipf={}",
            target.system,
            isolation.name(),
            a.zipf
        ),
    };
    let out = drive(&plan, |i| {
        let conn = match target.system {
            System::Postgres => {
                let mut c = target.postgres()?;
                let read = c.prepare("SELECT field0 FROM usertable WHERE YCSB_KEY = $1")?;
                let update = c.prepare("UPDATE usertable SET field0 = $1 WHERE YCSB_KEY = $2")?;
                Conn::Pg(Box::new(c), Box::new([read, update]))
            }
            _ => Conn::Resp(target.redis()?),
        };
        Ok(TxnWorker {
            conn,
            rng: StdRng::seed_from_u64(seed.wrapping_add(i as u64)),
            mix: mix.clone(),
            isolation,
            value_size: a.value_size,
            max_retries: a.max_retries,
            reported_error: false,
        })
    })?;
    let r = &out.rec;
    let runtime_ms = out.runtime.as_millis() as u64;
    let per_sec = |n: u64| out.per_sec(n);
    let abort_rate = if r.commits + r.aborts > 0 {
        r.aborts as f64 * 100.0 / (r.commits + r.aborts) as f64
    } else {
        0.0
    };
    let ro_abort_rate = if r.ro_commits + r.ro_aborts > 0 {
        r.ro_aborts as f64 * 100.0 / (r.ro_commits + r.ro_aborts) as f64
    } else {
        0.0
    };
    let extra = vec![
        ("Transactions".to_string(), r.commits.to_string()),
        (
            "Transactions(txn/sec)".to_string(),
            java_f64(per_sec(r.commits)),
        ),
        ("Aborts".to_string(), r.aborts.to_string()),
        ("AbortRate(%)".to_string(), java_f64(abort_rate)),
        ("ReadOnlyTransactions".to_string(), r.ro_commits.to_string()),
        ("ReadOnlyAborts".to_string(), r.ro_aborts.to_string()),
        ("ReadOnlyAbortRate(%)".to_string(), java_f64(ro_abort_rate)),
        ("Retries".to_string(), r.retries.to_string()),
        ("GaveUp".to_string(), r.gave_up.to_string()),
    ];
    let summary = ycsb_summary(runtime_ms, out.units, r, &extra);
    let mut rec = RunRecord {
        workload: "ycsbt".into(),
        system: target.system.name().into(),
        url: target.url.clone(),
        threads: a.threads,
        isolation: isolation.name().into(),
        zipf: Some(a.zipf),
        runtime_ms,
        operations: out.units,
        ops_per_sec: per_sec(out.units),
        txns_per_sec: per_sec(r.commits),
        commits: r.commits,
        aborts: r.aborts,
        retries: r.retries,
        errors: r.ops.values().map(|s| s.errors).sum(),
        abort_rate_pct: abort_rate,
        params: format!(
            "records={} txn_ops={} read_proportion={} read_only_share={} long_share={} long_ops={} value_size={}",
            a.records, a.txn_ops, a.read_proportion, a.read_only_share, a.long_share, a.long_ops, a.value_size
        ),
        ..RunRecord::default()
    };
    rec.set_latency(r, Some("TXN"));
    Ok((rec, summary))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mix_has_the_configured_shape() {
        let mix = TxnMix {
            zipf: Zipf::new(1000, 4.0).expect("valid"),
            txn_ops: 4,
            long_ops: 40,
            long_share: 0.1,
            read_only_share: 0.2,
            read_proportion: 0.5,
        };
        let mut rng = StdRng::seed_from_u64(5);
        let (mut long, mut read_only, mut hot, mut total) = (0, 0, 0, 0);
        for _ in 0..10_000 {
            let t = mix.next(&mut rng);
            assert!(t.len() == 4 || t.len() == 40);
            long += usize::from(t.len() == 40);
            read_only += usize::from(t.iter().all(|o| matches!(o, TxnOp::Read(_))));
            for o in &t {
                let (TxnOp::Read(k) | TxnOp::Update(k)) = *o;
                assert!(k < 1000);
                hot += usize::from(k == 0);
                total += 1;
            }
        }
        assert!((800..1200).contains(&long), "long {long}");
        // Read-only ones, plus read-write ones that drew only reads.
        assert!((2_000..2_700).contains(&read_only), "read-only {read_only}");
        // P(rank 1) at s = 4 is 1/zeta(4) ≈ 0.924.
        let share = hot as f64 / total as f64;
        assert!((0.91..0.94).contains(&share), "hot share {share}");
    }
}

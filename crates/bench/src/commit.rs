//! Cedar's commit test: autocommit single-key upserts that never collide
//! (every key is new), so the number measured is the commit path itself —
//! throughput and latency — not conflicts.
//!
//! Elsa/Redis: `SET commit:<run>:<n> <value>` (a lone command is a
//! one-command transaction on Elsa). PostgreSQL: Cedar's table
//! `t1 (id BIGINT PRIMARY KEY, no INT, name VARCHAR(50))` and
//! `INSERT … ON CONFLICT (id) DO UPDATE` in autocommit, ids above any
//! already there.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use clap::Args;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use crate::gen::random_value;
use crate::measure::Recorder;
use crate::report::{ycsb_summary, RunRecord};
use crate::runner::{drive, Plan, Step, StepResult, Worker};
use crate::target::{redis_fatal, System, Target};
use crate::{BenchError, Common};

/// `elsa bench commit`.
#[derive(Args, Debug, Clone)]
pub struct CommitArgs {
    /// Client threads (one connection each).
    #[arg(long, default_value_t = 16)]
    pub threads: usize,
    /// Upserts in total.
    #[arg(long, default_value_t = 100_000)]
    pub num_ops: u64,
    /// Bytes per value (Cedar's `name`, at most 50 on PostgreSQL).
    #[arg(long, default_value_t = 16)]
    pub value_size: usize,
    #[command(flatten)]
    pub common: Common,
}

enum Conn {
    Resp(redis::Connection),
    Pg(Box<postgres::Client>, Box<postgres::Statement>),
}

struct CommitWorker {
    conn: Conn,
    rng: StdRng,
    next_id: Arc<AtomicU64>,
    run: u64,
    value_size: usize,
    reported_error: bool,
}

impl Worker for CommitWorker {
    fn step(&mut self, _rec: &mut Recorder) -> Result<StepResult, BenchError> {
        // One shared counter: ids never repeat, across threads or runs.
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let value = random_value(&mut self.rng, self.value_size);
        let failed = match &mut self.conn {
            Conn::Resp(c) => {
                let r: redis::RedisResult<()> = redis::cmd("SET")
                    .arg(format!("commit:{:016x}:{id}", self.run))
                    .arg(&value)
                    .query(c);
                match r {
                    Ok(()) => None,
                    Err(e) if redis_fatal(&e) => return Err(e.into()),
                    Err(e) => Some(e.to_string()),
                }
            }
            Conn::Pg(c, stmt) => {
                let no = (id % i32::MAX as u64) as i32;
                match c.execute(stmt.as_ref(), &[&(id as i64), &no, &value]) {
                    Ok(_) => None,
                    Err(e) if c.is_closed() => return Err(e.into()),
                    Err(e) => Some(crate::target::pg_message(&e)),
                }
            }
        };
        if let Some(msg) = &failed {
            if !self.reported_error {
                eprintln!("elsa bench: upsert failed (further failures are only counted): {msg}");
                self.reported_error = true;
            }
        }
        Ok(StepResult::Done(Step {
            op: "UPSERT",
            ok: failed.is_none(),
            units: 1,
        }))
    }
}

/// Runs the commit test against `target`.
pub fn run(target: &Target, a: &CommitArgs, seed: u64) -> Result<(RunRecord, String), BenchError> {
    if a.threads == 0 {
        return Err(BenchError::Config("--threads must be at least 1".into()));
    }
    let mut first_id = 0u64;
    if target.system == System::Postgres {
        if a.value_size > 50 {
            return Err(BenchError::Config(
                "--value-size: Cedar's name column is VARCHAR(50)".into(),
            ));
        }
        let mut c = target.postgres()?;
        c.batch_execute(
            "CREATE TABLE IF NOT EXISTS t1 (id BIGINT PRIMARY KEY, no INT, name VARCHAR(50))",
        )?;
        let max: i64 = c
            .query_one("SELECT COALESCE(MAX(id), 0) FROM t1", &[])?
            .get(0);
        first_id = max as u64 + 1;
    }
    let next_id = Arc::new(AtomicU64::new(first_id));
    // A per-run tag keeps RESP keys new across runs.
    let run_tag: u64 = StdRng::seed_from_u64(seed ^ 0xc0de).gen::<u64>()
        ^ std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(0);
    let plan = Plan {
        threads: a.threads,
        steps: Some(a.num_ops),
        duration: a.common.duration(),
        warmup: a.common.warmup(),
        target_rate: a.common.target,
        label: format!("commit {}", target.system),
    };
    let out = drive(&plan, |i| {
        let conn = match target.system {
            System::Postgres => {
                let mut c = target.postgres()?;
                let s = c.prepare(
                    "INSERT INTO t1 (id, no, name) VALUES ($1, $2, $3) ON CONFLICT (id) DO UPDATE SET no = EXCLUDED.no, name = EXCLUDED.name",
                )?;
                Conn::Pg(Box::new(c), Box::new(s))
            }
            _ => Conn::Resp(target.redis()?),
        };
        Ok(CommitWorker {
            conn,
            rng: StdRng::seed_from_u64(seed.wrapping_add(i as u64)),
            next_id: next_id.clone(),
            run: run_tag,
            value_size: a.value_size,
            reported_error: false,
        })
    })?;
    let runtime_ms = out.runtime.as_millis() as u64;
    let per_sec = |n: u64| out.per_sec(n);
    let summary = ycsb_summary(runtime_ms, out.steps, &out.rec, &[]);
    let ok = out.rec.ops.get("UPSERT").map_or(0, |s| s.ok);
    let mut rec = RunRecord {
        workload: "commit".into(),
        system: target.system.name().into(),
        url: target.url.clone(),
        threads: a.threads,
        runtime_ms,
        operations: out.steps,
        ops_per_sec: per_sec(out.steps),
        txns_per_sec: per_sec(ok),
        commits: ok,
        errors: out.steps - ok,
        params: format!("value_size={}", a.value_size),
        ..RunRecord::default()
    };
    rec.set_latency(&out.rec, Some("UPSERT"));
    Ok((rec, summary))
}

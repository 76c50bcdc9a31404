//! EloqKV's batch test: each step sends `--batch-size` GET/SETs on uniform
//! random keys, either as a pipeline (independent commands, one round trip)
//! or as one atomic MULTI/EXEC; reports batches/s, KV ops/s and the share
//! of batches retried.
//!
//! `tx` on PostgreSQL is one transaction (`--isolation`, default READ
//! COMMITTED) of SELECTs and upserts on table `kv`; deadlocks and
//! serialization failures are retried. PostgreSQL has no pipeline mode in
//! its synchronous client, so `pipeline` needs a RESP target.

use std::time::Duration;

use clap::Args;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use redis::Value;

use crate::gen::random_value;
use crate::measure::Recorder;
use crate::report::{java_f64, ycsb_summary, RunRecord};
use crate::runner::{drive, Plan, Step, StepResult, Worker};
use crate::target::{pg_conflict, redis_conflict, redis_fatal, Isolation, System, Target};
use crate::{BenchError, Common};

/// `elsa bench batch`.
#[derive(Args, Debug, Clone)]
pub struct BatchArgs {
    /// `pipeline` (independent commands) or `tx` (MULTI/EXEC; a transaction on PostgreSQL).
    #[arg(long, default_value = "tx", value_parser = ["pipeline", "tx"])]
    pub op_type: String,
    /// GET/SETs per batch (EloqKV: 1..6).
    #[arg(long, default_value_t = 6)]
    pub batch_size: usize,
    /// Share of GETs: 0 (writes), 0.5 (mixed) or 1 (reads).
    #[arg(long, default_value_t = 0.5)]
    pub get_ratio: f64,
    /// Keys drawn from (uniformly).
    #[arg(long, default_value_t = 1_000_000)]
    pub num_keys: u64,
    /// Concurrent connections (one thread each).
    #[arg(long, default_value_t = 32)]
    pub connections: usize,
    /// Batches to run in total.
    #[arg(long, default_value_t = 100_000)]
    pub num_ops: u64,
    /// Bytes per value written.
    #[arg(long, default_value_t = 16)]
    pub value_size: usize,
    /// PostgreSQL isolation for `tx`: rc, rr, si or serializable.
    #[arg(long, default_value = "rc")]
    pub isolation: String,
    /// Give a batch up after this many retries.
    #[arg(long, default_value_t = 1000)]
    pub max_retries: u32,
    /// Co-locate each batch (0 = off): a batch draws its keys from one
    /// group of this many consecutive keys, each named with its group as a
    /// Redis Cluster hash tag (`{g}:key:n`), so Elsa keeps a batch's keys
    /// on one shard and commits it in one step (RESP targets only).
    #[arg(long, default_value_t = 0)]
    pub tag_group: u64,
    /// With `--tag-group`: act as a Redis Cluster client — read CLUSTER
    /// SLOTS once, keep a connection per listed port, and send each batch
    /// to the port of its hash tag's slot (Elsa: the worker that keeps it).
    #[arg(long)]
    pub cluster: bool,
    #[command(flatten)]
    pub common: Common,
}

enum Conn {
    Resp(redis::Connection),
    /// `--cluster`: each slot's connection (slot → index into the list).
    Slots(Vec<u16>, Vec<redis::Connection>),
    Pg(Box<postgres::Client>, Box<[postgres::Statement; 2]>),
}

enum Attempt {
    Done,
    Retry,
    Failed(String),
}

struct BatchWorker {
    conn: Conn,
    rng: StdRng,
    tx: bool,
    batch_size: usize,
    get_ratio: f64,
    num_keys: u64,
    value_size: usize,
    pg_level: postgres::IsolationLevel,
    max_retries: u32,
    reported_error: bool,
    tag_group: u64,
}

/// Key `n`'s name: `key:n`, or `{g}:key:n` (g = n / group) when batches
/// are co-located.
fn key(n: u64, group: u64) -> String {
    match group {
        0 => format!("key:{n}"),
        g => format!("{{{}}}:key:{n}", n / g),
    }
}

/// Redis Cluster's slot of a hash tag (CRC16/XMODEM mod 16384).
fn tag_slot(tag: &str) -> u16 {
    const CRC16: crc::Crc<u16> = crc::Crc::<u16>::new(&crc::CRC_16_XMODEM);
    CRC16.checksum(tag.as_bytes()) & 16383
}

/// `--cluster`: a connection to every port CLUSTER SLOTS lists, and each
/// slot's index among them.
fn connect_by_slot(target: &Target) -> Result<Conn, BenchError> {
    let mut first = target.redis()?;
    let ranges: Vec<(u16, u16, (String, u16))> = redis::cmd("CLUSTER")
        .arg("SLOTS")
        .query::<Vec<redis::Value>>(&mut first)?
        .iter()
        .map(|r| {
            let (a, b, node): (u16, u16, (String, u16, redis::Value, redis::Value)) =
                redis::from_redis_value(r)?;
            Ok((a, b, (node.0, node.1)))
        })
        .collect::<Result<_, redis::RedisError>>()?;
    let mut slots = vec![0u16; 16384];
    let mut addrs: Vec<(String, u16)> = Vec::new();
    let mut conns = Vec::new();
    for (a, b, addr) in ranges {
        let i = match addrs.iter().position(|x| *x == addr) {
            Some(i) => i,
            None => {
                // The target's settings (password, database), another address.
                let mut info =
                    redis::IntoConnectionInfo::into_connection_info(target.url.as_str())?;
                info.addr = redis::ConnectionAddr::Tcp(addr.0.clone(), addr.1);
                conns.push(redis::Client::open(info)?.get_connection()?);
                addrs.push(addr);
                addrs.len() - 1
            }
        };
        for s in a..=b.min(16383) {
            slots[usize::from(s)] = i as u16;
        }
    }
    Ok(Conn::Slots(slots, conns))
}

impl BatchWorker {
    fn attempt(&mut self, ops: &[(bool, u64)], value: &str) -> Result<Attempt, BenchError> {
        // `--cluster`: the connection to the port of the batch's slot.
        let at = match &self.conn {
            Conn::Slots(slots, _) => {
                let tag = (ops[0].1 / self.tag_group.max(1)).to_string();
                usize::from(slots[usize::from(tag_slot(&tag))])
            }
            _ => 0,
        };
        match &mut self.conn {
            Conn::Resp(_) | Conn::Slots(..) => {
                let c = match &mut self.conn {
                    Conn::Slots(_, conns) => &mut conns[at],
                    Conn::Resp(c) => c,
                    Conn::Pg(..) => unreachable!("matched above"),
                };
                let mut p = redis::pipe();
                if self.tx {
                    p.cmd("MULTI").ignore();
                }
                for &(get, k) in ops {
                    if get {
                        p.cmd("GET").arg(key(k, self.tag_group));
                    } else {
                        p.cmd("SET").arg(key(k, self.tag_group)).arg(value);
                    }
                    if self.tx {
                        p.ignore();
                    }
                }
                if self.tx {
                    p.cmd("EXEC");
                }
                match p.query::<Vec<Value>>(c) {
                    // A nil EXEC (never without WATCH on Redis) is a lost
                    // transaction, as is Elsa's -CONFLICT.
                    Ok(r) if self.tx && matches!(r.first(), Some(Value::Nil) | None) => {
                        Ok(Attempt::Retry)
                    }
                    Ok(_) => Ok(Attempt::Done),
                    Err(e) if redis_fatal(&e) => Err(e.into()),
                    Err(e) if redis_conflict(&e) => Ok(Attempt::Retry),
                    Err(e) => Ok(Attempt::Failed(e.to_string())),
                }
            }
            Conn::Pg(c, s) => {
                let level = self.pg_level;
                let r = (|| -> Result<(), postgres::Error> {
                    let mut tx = c.build_transaction().isolation_level(level).start()?;
                    for &(get, k) in ops {
                        let k = k as i64;
                        if get {
                            tx.query_opt(&s[0], &[&k])?;
                        } else {
                            tx.execute(&s[1], &[&k, &value])?;
                        }
                    }
                    tx.commit()
                })();
                match r {
                    Ok(()) => Ok(Attempt::Done),
                    Err(e) if pg_conflict(&e) => Ok(Attempt::Retry),
                    Err(e) if c.is_closed() => Err(e.into()),
                    Err(e) => Ok(Attempt::Failed(crate::target::pg_message(&e))),
                }
            }
        }
    }
}

impl Worker for BatchWorker {
    fn step(&mut self, rec: &mut Recorder) -> Result<StepResult, BenchError> {
        // Co-located: every key of the batch from one group.
        let (from, span) = match self.tag_group {
            0 => (0, self.num_keys),
            g => {
                let group = self.rng.gen_range(0..self.num_keys.div_ceil(g));
                (group * g, g.min(self.num_keys - group * g))
            }
        };
        let ops: Vec<(bool, u64)> = (0..self.batch_size)
            .map(|_| {
                (
                    self.rng.gen::<f64>() < self.get_ratio,
                    from + self.rng.gen_range(0..span),
                )
            })
            .collect();
        let value = random_value(&mut self.rng, self.value_size);
        let mut retries = 0u64;
        let done = loop {
            match self.attempt(&ops, &value)? {
                Attempt::Done => break true,
                Attempt::Retry => {
                    retries += 1;
                    if retries > u64::from(self.max_retries) {
                        break false;
                    }
                    let cap = (20u64 << retries.min(6)).min(1000);
                    std::thread::sleep(Duration::from_micros(self.rng.gen_range(0..=cap)));
                }
                Attempt::Failed(msg) => {
                    if !self.reported_error {
                        eprintln!(
                            "elsa bench: batch failed (further failures are only counted): {msg}"
                        );
                        self.reported_error = true;
                    }
                    break false;
                }
            }
        };
        rec.txn(done, retries, ops.len() as u64);
        Ok(StepResult::Done(Step {
            op: "BATCH",
            ok: done,
            units: if done { ops.len() as u64 } else { 0 },
        }))
    }
}

/// Runs the batch test against `target`.
pub fn run(target: &Target, a: &BatchArgs, seed: u64) -> Result<(RunRecord, String), BenchError> {
    if a.batch_size == 0 || a.num_keys == 0 || a.connections == 0 {
        return Err(BenchError::Config(
            "--batch-size, --num-keys and --connections must be at least 1".into(),
        ));
    }
    if a.cluster && (a.tag_group == 0 || target.system == System::Postgres) {
        return Err(BenchError::Config(
            "--cluster needs --tag-group (a batch must be one slot) and a Redis-protocol target"
                .into(),
        ));
    }
    if !(0.0..=1.0).contains(&a.get_ratio) {
        return Err(BenchError::Config("--get-ratio must be within 0..1".into()));
    }
    let tx = a.op_type == "tx";
    let isolation = Isolation::parse(&a.isolation)?;
    if target.system == System::Postgres {
        if !tx {
            return Err(BenchError::Config(
                "--op-type pipeline needs a Redis-protocol target (the PostgreSQL client here does not pipeline); use --op-type tx".into(),
            ));
        }
        isolation.check(System::Postgres)?;
        target
            .postgres()?
            .batch_execute("CREATE TABLE IF NOT EXISTS kv (k BIGINT PRIMARY KEY, v TEXT)")?;
    }
    let plan = Plan {
        threads: a.connections,
        steps: Some(a.num_ops),
        duration: a.common.duration(),
        warmup: a.common.warmup(),
        target_rate: a.common.target,
        label: format!("batch {} {} x{}", target.system, a.op_type, a.batch_size),
    };
    let out = drive(&plan, |i| {
        let conn = match target.system {
            System::Postgres => {
                let mut c = target.postgres()?;
                let get = c.prepare("SELECT v FROM kv WHERE k = $1")?;
                let set = c.prepare("INSERT INTO kv (k, v) VALUES ($1, $2) ON CONFLICT (k) DO UPDATE SET v = EXCLUDED.v")?;
                Conn::Pg(Box::new(c), Box::new([get, set]))
            }
            _ if a.cluster => connect_by_slot(target)?,
            _ => Conn::Resp(target.redis()?),
        };
        Ok(BatchWorker {
            conn,
            rng: StdRng::seed_from_u64(seed.wrapping_add(i as u64)),
            tx,
            batch_size: a.batch_size,
            get_ratio: a.get_ratio,
            num_keys: a.num_keys,
            value_size: a.value_size,
            pg_level: isolation.pg_level(),
            max_retries: a.max_retries,
            reported_error: false,
            tag_group: a.tag_group,
        })
    })?;
    let r = &out.rec;
    let runtime_ms = out.runtime.as_millis() as u64;
    let per_sec = |n: u64| out.per_sec(n);
    let retry_pct = if r.commits > 0 {
        r.retries as f64 * 100.0 / r.commits as f64
    } else {
        0.0
    };
    let extra = vec![
        ("Batches".to_string(), r.commits.to_string()),
        (
            "Batches(batch/sec)".to_string(),
            java_f64(per_sec(r.commits)),
        ),
        ("Retries".to_string(), r.retries.to_string()),
        ("RetryRate(%)".to_string(), java_f64(retry_pct)),
    ];
    let summary = ycsb_summary(runtime_ms, out.units, r, &extra);
    let mut rec = RunRecord {
        workload: "batch".into(),
        system: target.system.name().into(),
        url: target.url.clone(),
        threads: a.connections,
        isolation: a.op_type.clone(),
        runtime_ms,
        operations: out.units,
        ops_per_sec: per_sec(out.units),
        txns_per_sec: per_sec(r.commits),
        commits: r.commits,
        aborts: r.aborts,
        retries: r.retries,
        errors: r.ops.values().map(|s| s.errors).sum(),
        abort_rate_pct: retry_pct,
        params: format!(
            "batch_size={} get_ratio={} num_keys={} value_size={} tag_group={}",
            a.batch_size, a.get_ratio, a.num_keys, a.value_size, a.tag_group
        ),
        ..RunRecord::default()
    };
    rec.set_latency(r, Some("BATCH"));
    Ok((rec, summary))
}

//! YCSB core workloads A–F: YCSB's `CoreWorkload` (same property names,
//! defaults, key names and request distributions), its load and run phases,
//! and how a record maps onto each system.
//!
//! Mapping (see `docs/bench.md`):
//! - **Elsa / Redis**, `redis.layout=hash` (the default): YCSB's own Redis
//!   binding — a record is one hash, `<key>` with fields `field<i>`. Read
//!   all fields = `HGETALL`, read one field = `HMGET`, update and insert =
//!   `HSET` of the fields written (YCSB's `HMSET`); an insert also adds
//!   the key to the sorted set `_indices`, scored by its Java hash code.
//!   Scan of `n` records from key `k` = `ZRANGEBYSCORE _indices hash(k)
//!   +inf LIMIT 0 n`, then one pipeline of `HGETALL` (or `HMGET`) of the
//!   keys it answered — as YCSB's binding does.
//! - `redis.layout=strings`: one string key per field, `<key>:field<i>`.
//!   Read all = `MGET`, one field = `GET`, update = `SET`/`MSET`, insert =
//!   one `MSET`; scan = one `MGET` of records `k..k+n`.
//! - **PostgreSQL**: YCSB's JDBC `usertable` (`YCSB_KEY` primary key,
//!   `FIELD0..FIELDn`), with the JDBC binding's statements; scans are
//!   `WHERE YCSB_KEY >= $1 ORDER BY YCSB_KEY LIMIT $2`.

use std::path::PathBuf;
use std::sync::Arc;

use clap::Args;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use crate::gen::{fnv_hash64, random_value, InsertCounter, KeyChooser, Zipf};
use crate::measure::Recorder;
use crate::props::Props;
use crate::report::{ycsb_summary, RunRecord};
use crate::runner::{drive, Plan, Step, StepResult, Worker};
use crate::target::{System, Target};
use crate::{BenchError, Common};

mod db;
use db::{db_read, db_scan, db_write, Conn, OpResult, PgStatements};

/// `elsa bench ycsb load|run`.
#[derive(Args, Debug, Clone)]
pub struct YcsbArgs {
    /// Phase: `load` inserts the records, `run` runs the operation mix.
    #[arg(value_parser = ["load", "run"])]
    pub phase: String,
    /// YCSB property file(s), applied in order (YCSB's -P).
    #[arg(short = 'P', value_name = "FILE")]
    pub files: Vec<PathBuf>,
    /// Property overrides name=value, applied after the files (YCSB's -p).
    #[arg(short = 'p', value_name = "NAME=VALUE")]
    pub props: Vec<String>,
    /// Client threads (overrides the threadcount property).
    #[arg(long)]
    pub threads: Option<usize>,
    #[command(flatten)]
    pub common: Common,
}

impl YcsbArgs {
    /// The files, then the overrides.
    pub fn props(&self) -> Result<Props, BenchError> {
        let mut p = Props::new();
        for f in &self.files {
            p.load_file(f)?;
        }
        for pair in &self.props {
            p.set_pair(pair)?;
        }
        Ok(p)
    }

    /// The workload's name: the first property file's name (`workloada`).
    fn name(&self) -> String {
        self.files
            .first()
            .and_then(|f| f.file_stem())
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_else(|| "ycsb".into())
    }
}

/// One YCSB operation kind.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Op {
    Read,
    Update,
    Insert,
    Scan,
    ReadModifyWrite,
}

/// How long values or scans are (YCSB's `*lengthdistribution`).
#[derive(Clone, Debug)]
enum Length {
    Constant(u64),
    Uniform(u64, u64),
    Zipfian(u64, Zipf),
}

impl Length {
    fn parse(kind: &str, min: u64, max: u64, what: &str) -> Result<Length, BenchError> {
        let max = max.max(min);
        match kind {
            "constant" => Ok(Length::Constant(max)),
            "uniform" => Ok(Length::Uniform(min, max)),
            "zipfian" => Ok(Length::Zipfian(
                min,
                Zipf::new(max - min + 1, 0.99)
                    .ok_or_else(|| BenchError::Config(format!("{what}: bad range")))?,
            )),
            other => Err(BenchError::Config(format!(
                "{what}={other:?}: use constant, uniform or zipfian"
            ))),
        }
    }

    fn sample(&self, rng: &mut StdRng) -> u64 {
        match self {
            Length::Constant(n) => *n,
            Length::Uniform(lo, hi) => rng.gen_range(*lo..=*hi),
            Length::Zipfian(lo, z) => lo + z.sample(rng) - 1,
        }
    }
}

/// YCSB's CoreWorkload parameters, read from properties with YCSB's
/// defaults.
#[derive(Clone, Debug)]
pub struct Workload {
    /// Workload name for reports.
    pub name: String,
    /// PostgreSQL table (YCSB's `table`, default `usertable`).
    pub table: String,
    /// Fields per record.
    pub fieldcount: usize,
    field_len: Length,
    field_prefix: String,
    key_prefix: String,
    /// Read every field (else one random field).
    pub readallfields: bool,
    /// Update every field (else one random field).
    pub writeallfields: bool,
    ops: Vec<(Op, f64)>,
    /// `uniform`, `zipfian`, `latest` or `hotspot`.
    pub requestdistribution: String,
    zipf_constant: f64,
    hot_data: f64,
    hot_ops: f64,
    scan_len: Length,
    ordered: bool,
    /// A record is one hash (YCSB's Redis binding), else one string key
    /// per field (`redis.layout`).
    pub hash_layout: bool,
    zeropadding: usize,
    /// First record this client loads.
    pub insertstart: u64,
    /// Records this client loads.
    pub insertcount: u64,
    /// Records in the data set.
    pub recordcount: u64,
    /// Operations in the run phase.
    pub operationcount: u64,
    /// Client threads.
    pub threads: usize,
    /// YCSB's `target` (ops/s over all threads), 0 = unthrottled.
    pub target: f64,
    /// YCSB's `maxexecutiontime` in seconds, 0 = none.
    pub maxexecutiontime: u64,
}

fn sql_ident(s: &str, what: &str) -> Result<String, BenchError> {
    if !s.is_empty()
        && s.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
        && !s.starts_with(|c: char| c.is_ascii_digit())
    {
        Ok(s.to_string())
    } else {
        Err(BenchError::Config(format!(
            "{what}={s:?} must be a plain SQL identifier"
        )))
    }
}

impl Workload {
    /// Reads the workload from properties (YCSB's names and defaults).
    pub fn from_props(name: &str, p: &Props) -> Result<Workload, BenchError> {
        if let Some(w) = p.get("workload") {
            if !w.ends_with("CoreWorkload") {
                return Err(BenchError::Config(format!(
                    "workload={w}: only YCSB's CoreWorkload is implemented (use `elsa bench ycsbt` for transactions)"
                )));
            }
        }
        let recordcount = p.u64_or("recordcount", 1000)?;
        let insertstart = p.u64_or("insertstart", 0)?;
        let insertcount = p.u64_or("insertcount", recordcount.saturating_sub(insertstart))?;
        let fieldcount = p.u64_or("fieldcount", 10)? as usize;
        if fieldcount == 0 || fieldcount > 1000 {
            return Err(BenchError::Config(format!(
                "fieldcount={fieldcount}: use 1..=1000"
            )));
        }
        let fieldlength = p.u64_or("fieldlength", 100)?.max(1);
        let minfieldlength = p.u64_or("minfieldlength", 1)?.max(1);
        let field_len = Length::parse(
            p.str_or("fieldlengthdistribution", "constant"),
            minfieldlength.min(fieldlength),
            fieldlength,
            "fieldlengthdistribution",
        )?;
        let minscan = p.u64_or("minscanlength", 1)?.max(1);
        let maxscan = p.u64_or("maxscanlength", 1000)?.max(minscan);
        let scan_len = Length::parse(
            p.str_or("scanlengthdistribution", "uniform"),
            minscan,
            maxscan,
            "scanlengthdistribution",
        )?;
        let ops = vec![
            (Op::Read, p.f64_or("readproportion", 0.95)?),
            (Op::Update, p.f64_or("updateproportion", 0.05)?),
            (Op::Insert, p.f64_or("insertproportion", 0.0)?),
            (Op::Scan, p.f64_or("scanproportion", 0.0)?),
            (
                Op::ReadModifyWrite,
                p.f64_or("readmodifywriteproportion", 0.0)?,
            ),
        ];
        if ops.iter().any(|(_, w)| *w < 0.0) || ops.iter().map(|(_, w)| w).sum::<f64>() <= 0.0 {
            return Err(BenchError::Config(
                "operation proportions must be >= 0 and not all 0".into(),
            ));
        }
        let requestdistribution = p.str_or("requestdistribution", "uniform").to_string();
        if !["uniform", "zipfian", "latest", "hotspot"].contains(&requestdistribution.as_str()) {
            return Err(BenchError::Config(format!(
                "requestdistribution={requestdistribution}: use uniform, zipfian, latest or hotspot"
            )));
        }
        let insertorder = p.str_or("insertorder", "hashed");
        if insertorder != "hashed" && insertorder != "ordered" {
            return Err(BenchError::Config(format!(
                "insertorder={insertorder}: use hashed or ordered"
            )));
        }
        let hot_data = p.f64_or("hotspotdatafraction", 0.2)?;
        let hot_ops = p.f64_or("hotspotopnfraction", 0.8)?;
        if !(0.0..=1.0).contains(&hot_data) || !(0.0..=1.0).contains(&hot_ops) {
            return Err(BenchError::Config(
                "hotspot fractions must be within 0..1".into(),
            ));
        }
        let zipf_constant = p.f64_or("zipfianconstant", 0.99)?;
        if zipf_constant <= 0.0 {
            return Err(BenchError::Config("zipfianconstant must be > 0".into()));
        }
        Ok(Workload {
            name: name.to_string(),
            table: sql_ident(p.str_or("table", "usertable"), "table")?,
            fieldcount,
            field_len,
            field_prefix: sql_ident(p.str_or("fieldnameprefix", "field"), "fieldnameprefix")?,
            key_prefix: p.str_or("keyprefix", "user").to_string(),
            readallfields: p.bool_or("readallfields", true),
            writeallfields: p.bool_or("writeallfields", false),
            ops,
            requestdistribution,
            zipf_constant,
            hot_data,
            hot_ops,
            scan_len,
            ordered: insertorder == "ordered",
            hash_layout: match p.str_or("redis.layout", "hash") {
                "hash" => true,
                "strings" => false,
                other => {
                    return Err(BenchError::Config(format!(
                        "redis.layout={other}: use hash or strings"
                    )))
                }
            },
            zeropadding: p.u64_or("zeropadding", 1)? as usize,
            insertstart,
            insertcount,
            recordcount,
            operationcount: p.u64_or("operationcount", 1000)?,
            threads: p.u64_or("threadcount", 1)?.max(1) as usize,
            target: p.f64_or("target", 0.0)?,
            maxexecutiontime: p.u64_or("maxexecutiontime", 0)?,
        })
    }

    /// YCSB's `buildKeyName`: `user` + the FNV hash of the record number
    /// (or the number itself with `insertorder=ordered`), zero-padded.
    pub fn key(&self, keynum: u64) -> String {
        let n = if self.ordered {
            keynum as i64
        } else {
            fnv_hash64(keynum as i64)
        };
        let digits = n.to_string();
        let fill = self.zeropadding.saturating_sub(digits.len());
        format!("{}{}{}", self.key_prefix, "0".repeat(fill), digits)
    }

    /// Field `i`'s column name (`field3`; PostgreSQL folds `FIELD3` to it).
    pub fn field(&self, i: usize) -> String {
        format!("{}{i}", self.field_prefix)
    }

    /// The RESP key holding field `i` of record `key`.
    pub fn field_key(&self, key: &str, i: usize) -> String {
        format!("{key}:{}{i}", self.field_prefix)
    }

    /// YCSB's key chooser for the run phase.
    fn chooser(&self) -> Result<KeyChooser, BenchError> {
        let lo = self.insertstart;
        let hi = self.insertstart + self.insertcount.max(1) - 1;
        Ok(match self.requestdistribution.as_str() {
            "zipfian" => {
                let insert = self
                    .ops
                    .iter()
                    .find(|(o, _)| *o == Op::Insert)
                    .map_or(0.0, |(_, w)| *w)
                    / self.ops.iter().map(|(_, w)| w).sum::<f64>();
                let expected_new = (self.operationcount as f64 * insert * 2.0) as u64;
                KeyChooser::scrambled_zipfian(
                    lo,
                    self.insertcount.max(1) + expected_new,
                    self.zipf_constant,
                )
                .ok_or_else(|| BenchError::Config("bad zipfian parameters".into()))?
            }
            "latest" => KeyChooser::Latest {
                zipf: Zipf::new(self.recordcount.max(1), self.zipf_constant)
                    .ok_or_else(|| BenchError::Config("bad zipfian parameters".into()))?,
            },
            "hotspot" => KeyChooser::Hotspot {
                lo,
                hi,
                hot_fraction: self.hot_data,
                hot_op_fraction: self.hot_ops,
            },
            _ => KeyChooser::Uniform { lo, hi },
        })
    }

    fn pick_op(&self, rng: &mut StdRng) -> Op {
        let total: f64 = self.ops.iter().map(|(_, w)| w).sum();
        let mut x = rng.gen::<f64>() * total;
        for (op, w) in &self.ops {
            if x < *w {
                return *op;
            }
            x -= w;
        }
        self.ops
            .iter()
            .rev()
            .find(|(_, w)| *w > 0.0)
            .map_or(Op::Read, |(o, _)| *o)
    }

    /// The `CREATE TABLE` for PostgreSQL (fields nullable, so YCSB-T can
    /// share the table with fewer fields).
    pub fn create_table_sql(table: &str, fields: &[String]) -> String {
        let cols: Vec<String> = fields.iter().map(|f| format!("{f} TEXT")).collect();
        format!(
            "CREATE TABLE IF NOT EXISTS {table} (YCSB_KEY VARCHAR(255) PRIMARY KEY, {})",
            cols.join(", ")
        )
    }
}

struct YcsbWorker {
    wl: Arc<Workload>,
    conn: Conn,
    rng: StdRng,
    chooser: KeyChooser,
    counter: Arc<InsertCounter>,
    load: bool,
    load_end: u64,
    reported_error: bool,
}

impl YcsbWorker {
    /// Runs one database call, turning a dead connection into the run's
    /// error and anything else into an operation result.
    fn call<F>(&mut self, f: F) -> Result<bool, BenchError>
    where
        F: FnOnce(&mut Conn, &Workload) -> Result<OpResult, BenchError>,
    {
        match f(&mut self.conn, &self.wl)? {
            Ok(found) => Ok(found),
            Err(msg) => {
                if !self.reported_error {
                    eprintln!(
                        "elsa bench: operation failed (further errors are only counted): {msg}"
                    );
                    self.reported_error = true;
                }
                Ok(false)
            }
        }
    }

    fn values(&mut self, all: bool) -> Vec<(usize, String)> {
        let fields: Vec<usize> = if all {
            (0..self.wl.fieldcount).collect()
        } else {
            vec![self.rng.gen_range(0..self.wl.fieldcount)]
        };
        fields
            .into_iter()
            .map(|i| {
                let len = self.wl.field_len.sample(&mut self.rng) as usize;
                (i, random_value(&mut self.rng, len))
            })
            .collect()
    }

    fn next_keynum(&mut self) -> u64 {
        let limit = self.counter.limit().max(1);
        // Draws past the records that exist (zipfian's room for inserts)
        // are redrawn, as YCSB does.
        for _ in 0..1000 {
            let k = self.chooser.next(&mut self.rng, limit - 1);
            if k < limit {
                return k;
            }
        }
        self.rng.gen_range(0..limit)
    }

    fn read_field(&mut self) -> Option<usize> {
        if self.wl.readallfields {
            None
        } else {
            Some(self.rng.gen_range(0..self.wl.fieldcount))
        }
    }
}

impl Worker for YcsbWorker {
    fn step(&mut self, rec: &mut Recorder) -> Result<StepResult, BenchError> {
        if self.load {
            let keynum = self.counter.next();
            if keynum >= self.load_end {
                return Ok(StepResult::Exhausted);
            }
            let key = self.wl.key(keynum);
            let values = self.values(true);
            let ok = self.call(|c, wl| db_write(c, wl, &key, &values, true))?;
            self.counter.acknowledge(keynum);
            return Ok(StepResult::Done(Step {
                op: "INSERT",
                ok,
                units: 1,
            }));
        }
        let op = self.wl.pick_op(&mut self.rng);
        let (name, ok) = match op {
            Op::Read => {
                let keynum = self.next_keynum();
                let key = self.wl.key(keynum);
                let field = self.read_field();
                ("READ", self.call(|c, wl| db_read(c, wl, &key, field))?)
            }
            Op::Update => {
                let keynum = self.next_keynum();
                let key = self.wl.key(keynum);
                let values = self.values(self.wl.writeallfields);
                (
                    "UPDATE",
                    self.call(|c, wl| db_write(c, wl, &key, &values, false))?,
                )
            }
            Op::Insert => {
                let keynum = self.counter.next();
                let key = self.wl.key(keynum);
                let values = self.values(true);
                let ok = self.call(|c, wl| db_write(c, wl, &key, &values, true))?;
                self.counter.acknowledge(keynum);
                ("INSERT", ok)
            }
            Op::Scan => {
                let start = self.next_keynum();
                let len = self.wl.scan_len.sample(&mut self.rng);
                let field = self.read_field();
                let limit = self.counter.limit();
                (
                    "SCAN",
                    self.call(|c, wl| db_scan(c, wl, start, len, limit, field))?,
                )
            }
            Op::ReadModifyWrite => {
                let keynum = self.next_keynum();
                let key = self.wl.key(keynum);
                let field = self.read_field();
                let values = self.values(self.wl.writeallfields);
                let t0 = std::time::Instant::now();
                let read_ok = self.call(|c, wl| db_read(c, wl, &key, field))?;
                let t1 = std::time::Instant::now();
                let write_ok = self.call(|c, wl| db_write(c, wl, &key, &values, false))?;
                let t2 = std::time::Instant::now();
                // YCSB reports the read and the update of an RMW under READ
                // and UPDATE as well.
                for (op, ok, d) in [("READ", read_ok, t1 - t0), ("UPDATE", write_ok, t2 - t1)] {
                    if ok {
                        rec.ok(op, d.as_micros() as u64);
                    } else {
                        rec.error(op);
                    }
                }
                ("READ-MODIFY-WRITE", read_ok && write_ok)
            }
        };
        Ok(StepResult::Done(Step {
            op: name,
            ok,
            units: 1,
        }))
    }
}

/// Runs one YCSB phase against `target`; answers the record and the
/// summary text.
pub fn run(
    target: &Target,
    args: &YcsbArgs,
    props: &Props,
    seed: u64,
) -> Result<(RunRecord, String), BenchError> {
    let mut wl = Workload::from_props(&args.name(), props)?;
    if let Some(t) = args.threads {
        wl.threads = t.max(1);
    }
    let load = args.phase == "load";
    if target.system == System::Postgres && load {
        let fields: Vec<String> = (0..wl.fieldcount).map(|i| wl.field(i)).collect();
        target
            .postgres()?
            .batch_execute(&Workload::create_table_sql(&wl.table, &fields))?;
    }
    let counter = Arc::new(InsertCounter::new(if load {
        wl.insertstart
    } else {
        wl.recordcount
    }));
    let load_end = wl.insertstart + wl.insertcount;
    let chooser = wl.chooser()?;
    let plan = Plan {
        threads: wl.threads,
        steps: Some(if load {
            wl.insertcount
        } else {
            wl.operationcount
        }),
        duration: args.common.duration().or(if wl.maxexecutiontime > 0 {
            Some(std::time::Duration::from_secs(wl.maxexecutiontime))
        } else {
            None
        }),
        warmup: if load {
            std::time::Duration::ZERO
        } else {
            args.common.warmup()
        },
        target_rate: args.common.target.or(if wl.target > 0.0 {
            Some(wl.target)
        } else {
            None
        }),
        label: format!("{} {} {}", wl.name, args.phase, target.system),
    };
    let wl = Arc::new(wl);
    let out = drive(&plan, |i| {
        let conn = match target.system {
            System::Postgres => {
                let mut c = target.postgres()?;
                let s = PgStatements::prepare(&mut c, &wl)?;
                Conn::Pg(Box::new(c), Box::new(s))
            }
            _ => Conn::Resp(target.redis()?),
        };
        Ok(YcsbWorker {
            wl: wl.clone(),
            conn,
            rng: StdRng::seed_from_u64(seed.wrapping_add(i as u64)),
            chooser: chooser.clone(),
            counter: counter.clone(),
            load,
            load_end,
            reported_error: false,
        })
    })?;
    let runtime_ms = out.runtime.as_millis() as u64;
    let summary = ycsb_summary(runtime_ms, out.steps, &out.rec, &[]);
    let errors: u64 = out.rec.ops.values().map(|s| s.errors).sum();
    let mut rec = RunRecord {
        workload: format!("{}-{}", wl.name, args.phase),
        system: target.system.name().into(),
        url: target.url.clone(),
        threads: wl.threads,
        zipf: (wl.requestdistribution == "zipfian" || wl.requestdistribution == "latest").then_some(wl.zipf_constant),
        runtime_ms,
        operations: out.steps,
        ops_per_sec: if runtime_ms > 0 { out.steps as f64 * 1000.0 / runtime_ms as f64 } else { 0.0 },
        errors,
        params: format!(
            "recordcount={} operationcount={} fieldcount={} requestdistribution={} readallfields={}",
            wl.recordcount, wl.operationcount, wl.fieldcount, wl.requestdistribution, wl.readallfields
        ),
        ..RunRecord::default()
    };
    rec.set_latency(&out.rec, None);
    Ok((rec, summary))
}

#[cfg(test)]
mod tests;

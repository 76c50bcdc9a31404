//! `elsa bench`: the workloads users measure transactional key-value stores
//! with, run against Elsa, Redis or PostgreSQL from one binary, so every
//! performance claim is a ratio measured in one run on one machine.
//!
//! Component map (this crate depends only on client libraries — `redis`,
//! `postgres` — never on Elsa's own crates, so it measures Elsa exactly as a
//! user would):
//!
//! - [`props`]   YCSB property files and `-p` overrides
//! - [`gen`]     Zipf sampler (any s > 0), YCSB request distributions, key hash
//! - [`target`]  URL → system detection, connections, retryable errors, isolation
//! - [`runner`]  threads, warm-up, budget/duration, target rate + CO correction, progress bar
//! - [`measure`] per-thread HdrHistograms and transaction counters
//! - [`report`]  YCSB summary lines, result records, JSON/CSV files
//! - [`ycsb`]    YCSB core workloads A–F (load and run) and their mapping per system
//! - [`ycsbt`]   YCSB-T, the paper's transactional YCSB (§5.1.4)
//! - [`batch`]   EloqKV's pipeline vs MULTI/EXEC batch test
//! - [`commit`]  Cedar's autocommit single-key upsert test
//! - [`plot`]    SVG charts from result files (paper figures 7, 8, 11)
//!
//! Where the workloads end up on each system (key layout, SCAN, transaction
//! forms) is written down in `docs/bench.md`.

pub mod batch;
pub mod commit;
pub mod gen;
pub mod measure;
pub mod plot;
pub mod props;
pub mod report;
pub mod runner;
pub mod target;
pub mod ycsb;
pub mod ycsbt;

use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Subcommand};

use report::{java_f64, RunRecord};
use target::Target;

/// Everything that can stop a benchmark: bad input, or a target that
/// cannot be reached or answers in a way the workload cannot go on from.
#[derive(Debug, thiserror::Error)]
pub enum BenchError {
    /// Bad arguments, properties or files.
    #[error("{0}")]
    Config(String),
    /// A RESP connection failed.
    #[error("redis: {0}")]
    Redis(#[from] redis::RedisError),
    /// A PostgreSQL connection failed.
    #[error("postgres: {}", target::pg_message(.0))]
    Postgres(#[from] postgres::Error),
}

/// `elsa bench`: its subcommands.
#[derive(Args, Debug, Clone)]
pub struct BenchArgs {
    #[command(subcommand)]
    pub cmd: BenchCmd,
}

/// The workloads and the plotter.
#[derive(Subcommand, Debug, Clone)]
pub enum BenchCmd {
    /// YCSB core workloads A–F: `ycsb load|run -P workloads/workloada [-p name=value]...`.
    Ycsb(ycsb::YcsbArgs),
    /// YCSB-T (the paper's transactional YCSB): Zipf keys, N-op transactions, isolation levels.
    Ycsbt(ycsbt::YcsbtArgs),
    /// EloqKV's batch test: pipelines or MULTI/EXEC of --batch-size GET/SETs.
    Batch(batch::BatchArgs),
    /// Cedar's commit test: autocommit single-key upserts without collisions.
    Commit(commit::CommitArgs),
    /// Draw SVG charts from result files (--output of earlier runs).
    Plot(plot::PlotArgs),
}

/// Options every workload shares: where, how long, how fast, what to write.
#[derive(Args, Debug, Clone)]
pub struct Common {
    /// Target: redis://HOST:PORT (Elsa or Redis, detected) or postgres://USER@HOST:PORT/DB.
    #[arg(long, short = 'u', default_value = "redis://127.0.0.1:6379")]
    pub url: String,
    /// TLS for a `redis://` --url (as `rediss://`); `rediss://` URLs (also
    /// in --compare) always use TLS, with the files below.
    #[arg(long)]
    pub tls: bool,
    /// CA certificate(s) that sign the server's certificate (PEM).
    #[arg(long, value_name = "FILE")]
    pub cacert: Option<PathBuf>,
    /// Client certificate, for servers that require one (PEM); needs --key.
    #[arg(long, value_name = "FILE", requires = "key")]
    pub cert: Option<PathBuf>,
    /// Private key of --cert (PEM).
    #[arg(long, value_name = "FILE", requires = "cert")]
    pub key: Option<PathBuf>,
    /// Run the same workload against two targets, alternating, and print the throughput ratio A/B.
    #[arg(long, num_args = 2, value_names = ["URL_A", "URL_B"])]
    pub compare: Option<Vec<String>>,
    /// Repeat the run (alternating targets with --compare); medians are reported.
    #[arg(long, default_value_t = 1)]
    pub rounds: usize,
    /// Stop after this many seconds (with a count as well, whichever comes first).
    #[arg(long)]
    pub duration: Option<f64>,
    /// Run unmeasured for this many seconds first.
    #[arg(long, default_value_t = 0.0)]
    pub warmup: f64,
    /// Target throughput in operations (steps) per second over all threads; latencies are then
    /// also reported from each operation's intended start (coordinated-omission correction).
    #[arg(long)]
    pub target: Option<f64>,
    /// Seed for every random stream (thread i uses seed + i), so key streams repeat.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Append the results to this .json or .csv file.
    #[arg(long, short = 'o')]
    pub output: Option<PathBuf>,
    /// Free text stored with the results (e.g. the server's configuration).
    #[arg(long, default_value = "")]
    pub label: String,
}

impl Common {
    /// Checks the numbers a user typed.
    fn validate(&self) -> Result<(), BenchError> {
        let bad = |what: &str| Err(BenchError::Config(what.to_string()));
        if self.rounds == 0 {
            return bad("--rounds must be at least 1");
        }
        if self.duration.is_some_and(|d| !(d > 0.0 && d.is_finite())) {
            return bad("--duration must be a positive number of seconds");
        }
        if !(self.warmup >= 0.0 && self.warmup.is_finite()) {
            return bad("--warmup must be a non-negative number of seconds");
        }
        if self.target.is_some_and(|t| !(t > 0.0 && t.is_finite())) {
            return bad("--target must be a positive rate");
        }
        Ok(())
    }

    /// The measured window, if time-bound.
    pub fn duration(&self) -> Option<Duration> {
        self.duration.map(Duration::from_secs_f64)
    }

    /// The warm-up window.
    pub fn warmup(&self) -> Duration {
        Duration::from_secs_f64(self.warmup)
    }
}

/// Runs `elsa bench` and answers the process exit code; errors go to
/// stderr.
pub fn run(args: BenchArgs) -> i32 {
    match execute(args) {
        Ok(_) => 0,
        Err(e) => {
            eprintln!("elsa bench: {e}");
            1
        }
    }
}

/// Runs `elsa bench` and answers every run's record (tests and scripts use
/// this; `run` wraps it).
pub fn execute(args: BenchArgs) -> Result<Vec<RunRecord>, BenchError> {
    match args.cmd {
        BenchCmd::Ycsb(a) => {
            let props = a.props()?;
            runs(&a.common, |t, seed| ycsb::run(t, &a, &props, seed))
        }
        BenchCmd::Ycsbt(a) => runs(&a.common, |t, seed| ycsbt::run(t, &a, seed)),
        BenchCmd::Batch(a) => runs(&a.common, |t, seed| batch::run(t, &a, seed)),
        BenchCmd::Commit(a) => runs(&a.common, |t, seed| commit::run(t, &a, seed)),
        BenchCmd::Plot(a) => {
            plot::run(&a)?;
            Ok(Vec::new())
        }
    }
}

/// Runs `one` against the target (or, with `--compare`, both targets,
/// alternating) `--rounds` times; prints each summary, then the medians and
/// the ratio; appends every record to `--output`.
fn runs<F>(common: &Common, mut one: F) -> Result<Vec<RunRecord>, BenchError>
where
    F: FnMut(&Target, u64) -> Result<(RunRecord, String), BenchError>,
{
    common.validate()?;
    let urls: Vec<String> = match &common.compare {
        Some(pair) => pair.clone(),
        None if common.tls => vec![common.url.replacen("redis://", "rediss://", 1).replacen(
            "REDIS://",
            "rediss://",
            1,
        )],
        None => vec![common.url.clone()],
    };
    let tls = target::TlsFiles::read(common)?;
    let targets = urls
        .iter()
        .map(|u| Target::detect(u, &tls))
        .collect::<Result<Vec<_>, _>>()?;
    let mut records: Vec<RunRecord> = Vec::new();
    for round in 0..common.rounds {
        for t in &targets {
            eprintln!(
                "# elsa bench: {} at {} (round {}/{})",
                t.system,
                t.url,
                round + 1,
                common.rounds
            );
            // The same seed for both targets in a round: both see the same
            // key stream.
            let (mut rec, summary) = one(t, common.seed.wrapping_add(round as u64 * 1_000_003))?;
            rec.label = common.label.clone();
            rec.unix_time = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_secs())
                .unwrap_or(0);
            if targets.len() > 1 || common.rounds > 1 {
                println!("[TARGET], {}, {}", t.system, t.url);
            }
            print!("{summary}");
            if let Some(path) = &common.output {
                report::append_records(path, std::slice::from_ref(&rec))?;
            }
            records.push(rec);
        }
    }
    if targets.len() == 2 {
        let median = |url: &str| {
            let mut v: Vec<f64> = records
                .iter()
                .filter(|r| r.url == url)
                .map(|r| r.ops_per_sec)
                .collect();
            v.sort_by(|a, b| a.total_cmp(b));
            match v.len() {
                0 => 0.0,
                n if n % 2 == 1 => v[n / 2],
                n => (v[n / 2 - 1] + v[n / 2]) / 2.0,
            }
        };
        let (a, b) = (median(&targets[0].url), median(&targets[1].url));
        println!(
            "[COMPARE], A, {} {}, {}",
            targets[0].system,
            targets[0].url,
            java_f64(a)
        );
        println!(
            "[COMPARE], B, {} {}, {}",
            targets[1].system,
            targets[1].url,
            java_f64(b)
        );
        println!(
            "[COMPARE], Throughput ratio A/B (median of {}), {}",
            common.rounds,
            java_f64(if b > 0.0 {
                (a / b * 1000.0).round() / 1000.0
            } else {
                0.0
            })
        );
    }
    Ok(records)
}

//! What a run reports: YCSB's summary lines (byte for byte, so a result
//! compares line by line with a YCSB report), one machine-readable
//! [`RunRecord`] per run, and the JSON/CSV result files that `elsa bench
//! plot` and the `bench/` scripts read back.

use std::fmt::Write as _;
use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::measure::Recorder;
use crate::BenchError;

/// Formats a double as Java's `Double.toString` does (YCSB is Java): a
/// plain decimal with at least one fractional digit in [1e-3, 1e7), else
/// `1.2345E7`-style scientific notation.
pub fn java_f64(x: f64) -> String {
    if x.is_nan() {
        return "NaN".into();
    }
    if x.is_infinite() {
        return if x > 0.0 { "Infinity" } else { "-Infinity" }.into();
    }
    if x == 0.0 {
        return if x.is_sign_negative() { "-0.0" } else { "0.0" }.into();
    }
    let a = x.abs();
    if (1e-3..1e7).contains(&a) {
        let s = format!("{x}");
        if s.contains('.') {
            s
        } else {
            format!("{s}.0")
        }
    } else {
        // Rust's `{:e}` gives the shortest round-trip digits: "1.2345e7".
        let s = format!("{x:e}");
        let (mantissa, exp) = s.split_once('e').unwrap_or((&s, "0"));
        let mantissa = if mantissa.contains('.') {
            mantissa.to_string()
        } else {
            format!("{mantissa}.0")
        };
        format!("{mantissa}E{exp}")
    }
}

/// YCSB's summary: `[OVERALL]` run time and throughput, then `extra`
/// `[OVERALL]` lines (our transactional counters, in the same style), then
/// per operation count, average/min/max/p95/p99 latency and return codes.
pub fn ycsb_summary(
    runtime_ms: u64,
    operations: u64,
    rec: &Recorder,
    extra: &[(String, String)],
) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "[OVERALL], RunTime(ms), {runtime_ms}");
    let tput = if runtime_ms == 0 {
        0.0
    } else {
        operations as f64 * 1000.0 / runtime_ms as f64
    };
    let _ = writeln!(out, "[OVERALL], Throughput(ops/sec), {}", java_f64(tput));
    for (name, value) in extra {
        let _ = writeln!(out, "[OVERALL], {name}, {value}");
    }
    for (op, s) in &rec.ops {
        let h = &s.hist;
        let _ = writeln!(out, "[{op}], Operations, {}", s.operations());
        let _ = writeln!(
            out,
            "[{op}], AverageLatency(us), {}",
            java_f64(if h.is_empty() { 0.0 } else { h.mean() })
        );
        let _ = writeln!(
            out,
            "[{op}], MinLatency(us), {}",
            if h.is_empty() { 0 } else { h.min() }
        );
        let _ = writeln!(out, "[{op}], MaxLatency(us), {}", h.max());
        let _ = writeln!(
            out,
            "[{op}], 95thPercentileLatency(us), {}",
            h.value_at_quantile(0.95)
        );
        let _ = writeln!(
            out,
            "[{op}], 99thPercentileLatency(us), {}",
            h.value_at_quantile(0.99)
        );
        let _ = writeln!(out, "[{op}], Return=OK, {}", s.ok);
        if s.errors > 0 {
            let _ = writeln!(out, "[{op}], Return=ERROR, {}", s.errors);
        }
    }
    out
}

/// One run, as written to `--output` files and read by `elsa bench plot`.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct RunRecord {
    /// `workloada-run`, `workloadb-load`, `ycsbt`, `batch`, `commit`.
    pub workload: String,
    /// `elsa`, `redis` or `postgres`.
    pub system: String,
    /// The target URL.
    pub url: String,
    /// Free text from `--label` (e.g. "elsa --workers 1").
    pub label: String,
    /// Client threads (connections).
    pub threads: usize,
    /// Isolation level or transaction form (`RC`, `RR`, `SI`, `WATCH`,
    /// `pipeline`, `tx`); empty where it does not apply.
    pub isolation: String,
    /// Zipf exponent (YCSB-T) or YCSB's request distribution constant.
    pub zipf: Option<f64>,
    /// Measured time, warm-up excluded.
    pub runtime_ms: u64,
    /// Operations counted for throughput (YCSB ops, or committed KV ops).
    pub operations: u64,
    /// `operations` per second.
    pub ops_per_sec: f64,
    /// Committed transactions (or batches) per second; 0 where n/a.
    pub txns_per_sec: f64,
    /// Committed transactions or batches.
    pub commits: u64,
    /// Attempts that lost a conflict.
    pub aborts: u64,
    /// Retries after an abort.
    pub retries: u64,
    /// Transactions given up after `--max-retries`, plus failed operations.
    pub errors: u64,
    /// aborts / (commits + aborts), in percent.
    pub abort_rate_pct: f64,
    /// Latency of the main unit (operation, transaction, batch), µs.
    pub lat_avg_us: f64,
    /// Median latency, µs.
    pub lat_p50_us: u64,
    /// 95th percentile, µs.
    pub lat_p95_us: u64,
    /// 99th percentile, µs.
    pub lat_p99_us: u64,
    /// Maximum, µs.
    pub lat_max_us: u64,
    /// The parameters that define the workload, `k=v` separated by spaces.
    pub params: String,
    /// Seconds since the Unix epoch when the run ended.
    pub unix_time: u64,
}

impl RunRecord {
    /// Fills the latency fields from the histogram of `op` (all operations
    /// merged when `op` is `None`).
    pub fn set_latency(&mut self, rec: &Recorder, op: Option<&str>) {
        let mut merged: Option<hdrhistogram::Histogram<u64>> = None;
        for (name, s) in &rec.ops {
            if name.starts_with("INTENDED-") || op.is_some_and(|o| o != *name) {
                continue;
            }
            match merged.as_mut() {
                None => merged = Some(s.hist.clone()),
                Some(m) => {
                    let _ = m.add(&s.hist);
                }
            }
        }
        if let Some(h) = merged.filter(|h| !h.is_empty()) {
            self.lat_avg_us = h.mean();
            self.lat_p50_us = h.value_at_quantile(0.5);
            self.lat_p95_us = h.value_at_quantile(0.95);
            self.lat_p99_us = h.value_at_quantile(0.99);
            self.lat_max_us = h.max();
        }
    }
}

/// Appends records to a result file: `.json` (one array, read back and
/// extended) or `.csv` (a header when the file is new).
pub fn append_records(path: &Path, records: &[RunRecord]) -> Result<(), BenchError> {
    let io = |e: std::io::Error| BenchError::Config(format!("{}: {e}", path.display()));
    match extension(path).as_str() {
        "json" => {
            let mut all: Vec<RunRecord> = if path.exists() {
                let text = std::fs::read_to_string(path).map_err(io)?;
                if text.trim().is_empty() {
                    Vec::new()
                } else {
                    serde_json::from_str(&text).map_err(|e| {
                        BenchError::Config(format!("{} is not a result file: {e}", path.display()))
                    })?
                }
            } else {
                Vec::new()
            };
            all.extend_from_slice(records);
            let text = serde_json::to_string_pretty(&all)
                .map_err(|e| BenchError::Config(e.to_string()))?;
            std::fs::write(path, text + "\n").map_err(io)
        }
        "csv" => {
            let new = !path.exists()
                || std::fs::metadata(path)
                    .map(|m| m.len() == 0)
                    .unwrap_or(true);
            let file = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(path)
                .map_err(io)?;
            let mut w = csv::WriterBuilder::new().has_headers(new).from_writer(file);
            for r in records {
                w.serialize(r)
                    .map_err(|e| BenchError::Config(format!("{}: {e}", path.display())))?;
            }
            w.flush().map_err(io)
        }
        _ => Err(BenchError::Config(format!(
            "--output {}: use a .json or .csv file name",
            path.display()
        ))),
    }
}

/// Reads a result file written by [`append_records`].
pub fn read_records(path: &Path) -> Result<Vec<RunRecord>, BenchError> {
    let bad = |e: String| BenchError::Config(format!("{}: {e}", path.display()));
    match extension(path).as_str() {
        "json" => {
            let text = std::fs::read_to_string(path).map_err(|e| bad(e.to_string()))?;
            serde_json::from_str(&text).map_err(|e| bad(e.to_string()))
        }
        "csv" => {
            let mut r = csv::Reader::from_path(path).map_err(|e| bad(e.to_string()))?;
            r.deserialize()
                .map(|row| row.map_err(|e| bad(e.to_string())))
                .collect()
        }
        _ => Err(bad("not a .json or .csv result file".into())),
    }
}

fn extension(path: &Path) -> String {
    path.extension()
        .and_then(|e| e.to_str())
        .unwrap_or("")
        .to_ascii_lowercase()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn java_double_format() {
        assert_eq!(java_f64(17163.256899629272), "17163.256899629272");
        assert_eq!(java_f64(1000.0), "1000.0");
        assert_eq!(java_f64(0.0), "0.0");
        assert_eq!(java_f64(0.5), "0.5");
        assert_eq!(java_f64(1.0e7), "1.0E7");
        assert_eq!(java_f64(12345678.9), "1.23456789E7");
        assert_eq!(java_f64(0.0001), "1.0E-4");
    }

    /// The golden summary: the same lines, in the same order and format, as
    /// YCSB 0.17 prints for a run with reads and updates.
    #[test]
    fn summary_is_ycsb_format() {
        let mut rec = Recorder::new();
        for us in [100u64, 200, 300, 400] {
            rec.ok("READ", us);
        }
        rec.ok("UPDATE", 1000);
        rec.error("UPDATE");
        let s = ycsb_summary(2000, 6, &rec, &[]);
        let golden = "\
[OVERALL], RunTime(ms), 2000
[OVERALL], Throughput(ops/sec), 3.0
[READ], Operations, 4
[READ], AverageLatency(us), 250.0
[READ], MinLatency(us), 100
[READ], MaxLatency(us), 400
[READ], 95thPercentileLatency(us), 400
[READ], 99thPercentileLatency(us), 400
[READ], Return=OK, 4
[UPDATE], Operations, 2
[UPDATE], AverageLatency(us), 1000.0
[UPDATE], MinLatency(us), 1000
[UPDATE], MaxLatency(us), 1000
[UPDATE], 95thPercentileLatency(us), 1000
[UPDATE], 99thPercentileLatency(us), 1000
[UPDATE], Return=OK, 1
[UPDATE], Return=ERROR, 1
";
        assert_eq!(s, golden);
        let s = ycsb_summary(
            1000,
            10,
            &Recorder::new(),
            &[("Transactions(txn/sec)".into(), java_f64(2.5))],
        );
        assert_eq!(
            s,
            "[OVERALL], RunTime(ms), 1000\n[OVERALL], Throughput(ops/sec), 10.0\n[OVERALL], Transactions(txn/sec), 2.5\n"
        );
    }

    #[test]
    fn result_files_round_trip() {
        let dir = std::env::temp_dir().join(format!("elsa-bench-report-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("temp dir");
        let a = RunRecord {
            workload: "ycsbt".into(),
            system: "redis".into(),
            threads: 4,
            zipf: Some(1.0),
            ops_per_sec: 123.5,
            ..RunRecord::default()
        };
        let b = RunRecord {
            system: "postgres".into(),
            zipf: None,
            ..a.clone()
        };
        for name in ["r.json", "r.csv"] {
            let p = dir.join(name);
            let _ = std::fs::remove_file(&p);
            append_records(&p, std::slice::from_ref(&a)).expect("write");
            append_records(&p, std::slice::from_ref(&b)).expect("append");
            assert_eq!(
                read_records(&p).expect("read"),
                vec![a.clone(), b.clone()],
                "{name}"
            );
        }
        assert!(append_records(&dir.join("r.txt"), &[a]).is_err());
        let _ = std::fs::remove_dir_all(&dir);
    }
}

//! Sweep charts: throughput and p99 against one parameter, for runs
//! labelled `param=value [series]` (`bench/regions.sh` labels its runs
//! `epoch=100`, `rtt=50ms`, `replication=2pc`, …).
//!
//! Records that share a workload and a whole label are the parallel parts
//! of one run (one bench process per region): their throughputs add up and
//! the worst p99 stands for the run. Repeated rounds need distinct labels.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use super::{file_name, file_safe, line_chart, metric, metric_name};
use crate::report::RunRecord;
use crate::BenchError;

/// `(param, value, series)` of a label whose first word is `param=value`.
fn parse_label(label: &str) -> Option<(&str, &str, &str)> {
    let (first, rest) = label.split_once(' ').unwrap_or((label, ""));
    let (param, value) = first.split_once('=')?;
    (!param.is_empty() && !value.is_empty()).then_some((param, value, rest.trim()))
}

/// The number a value starts with ("50ms" → 50); `None` for "crdt".
fn leading_number(v: &str) -> Option<f64> {
    let end = v
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(v.len());
    v[..end].parse().ok()
}

/// One run: its parts summed.
#[derive(Default, Clone, Copy)]
struct Point {
    throughput: f64,
    p99_ms: f64,
}

/// Series name → value → point, values in first-seen order.
type Sweep = BTreeMap<String, Vec<(String, Point)>>;

/// Draws a throughput and a p99 chart per (workload, param) that has at
/// least two values, and adds their tables to `md`.
pub(super) fn charts(
    records: &[RunRecord],
    out_dir: &Path,
    md: &mut String,
) -> Result<Vec<PathBuf>, BenchError> {
    let mut sweeps: BTreeMap<(String, String), Sweep> = BTreeMap::new();
    for r in records {
        let Some((param, value, series)) = parse_label(&r.label) else {
            continue;
        };
        let series = if series.is_empty() { &r.system } else { series };
        let points = sweeps
            .entry((r.workload.clone(), param.to_string()))
            .or_default()
            .entry(series.to_string())
            .or_default();
        let i = match points.iter().position(|(v, _)| v == value) {
            Some(i) => i,
            None => {
                points.push((value.to_string(), Point::default()));
                points.len() - 1
            }
        };
        let p = &mut points[i].1;
        p.throughput += metric(r);
        p.p99_ms = p.p99_ms.max(r.lat_p99_us as f64 / 1000.0);
    }

    let mut written = Vec::new();
    for ((workload, param), sweep) in &sweeps {
        // The x axis: every value any series ran, numeric if all are.
        let mut values: Vec<&str> = Vec::new();
        for (v, _) in sweep.values().flatten() {
            if !values.contains(&v.as_str()) {
                values.push(v);
            }
        }
        if values.len() < 2 {
            continue;
        }
        let numeric = values.iter().all(|v| leading_number(v).is_some());
        if numeric {
            values.sort_by(|a, b| {
                leading_number(a)
                    .unwrap_or(0.0)
                    .total_cmp(&leading_number(b).unwrap_or(0.0))
            });
        }
        let x_of = |v: &str| match numeric {
            true => leading_number(v).unwrap_or(0.0),
            false => values.iter().position(|x| *x == v).unwrap_or(0) as f64,
        };
        let categories = (!numeric).then_some(values.as_slice());
        let line = |pick: fn(&Point) -> f64| -> Vec<(String, Vec<(f64, f64)>)> {
            sweep
                .iter()
                .map(|(name, pts)| {
                    let mut xy: Vec<(f64, f64)> =
                        pts.iter().map(|(v, p)| (x_of(v), pick(p))).collect();
                    xy.sort_by(|a, b| a.0.total_cmp(&b.0));
                    (name.clone(), xy)
                })
                .collect()
        };
        let stem = format!("sweep-{}-{}", file_safe(workload), file_safe(param));
        let unit = metric_name(workload);
        let tput_title = format!("{workload}: {unit} vs {param}");
        let tput_path = out_dir.join(format!("{stem}.svg"));
        line_chart(
            &tput_path,
            &tput_title,
            param,
            unit,
            &line(|p| p.throughput),
            categories,
        )?;
        let p99_title = format!("{workload}: worst p99 latency (ms) vs {param}");
        let p99_path = out_dir.join(format!("{stem}-p99.svg"));
        line_chart(
            &p99_path,
            &p99_title,
            param,
            "p99 ms",
            &line(|p| p.p99_ms),
            categories,
        )?;

        let _ = write!(
            md,
            "\n## {tput_title}\n\n![]({})\n![]({})\n\n| {param} |",
            file_name(&tput_path),
            file_name(&p99_path)
        );
        for name in sweep.keys() {
            let _ = write!(md, " {name}: {unit} | {name}: p99 ms |");
        }
        md.push_str("\n|---|");
        md.push_str(&"---:|---:|".repeat(sweep.len()));
        md.push('\n');
        for v in &values {
            let _ = write!(md, "| {v} |");
            for pts in sweep.values() {
                match pts.iter().find(|(x, _)| x == v) {
                    Some((_, p)) => {
                        let _ = write!(md, " {:.0} | {:.1} |", p.throughput, p.p99_ms);
                    }
                    None => md.push_str(" | |"),
                }
            }
            md.push('\n');
        }
        written.push(tput_path);
        written.push(p99_path);
    }
    Ok(written)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(workload: &str, label: &str, url: &str, tput: f64, p99_us: u64) -> RunRecord {
        RunRecord {
            workload: workload.into(),
            system: "elsa".into(),
            url: url.into(),
            label: label.into(),
            ops_per_sec: tput,
            txns_per_sec: tput,
            lat_p99_us: p99_us,
            ..RunRecord::default()
        }
    }

    #[test]
    fn labels_parse_into_param_value_and_series() {
        assert_eq!(parse_label("epoch=10"), Some(("epoch", "10", "")));
        assert_eq!(
            parse_label("epoch=10 paced"),
            Some(("epoch", "10", "paced"))
        );
        assert_eq!(parse_label("elsa --workers 1"), None);
        assert_eq!(parse_label("=3"), None);
        assert_eq!(leading_number("50ms"), Some(50.0));
        assert_eq!(leading_number("0"), Some(0.0));
        assert_eq!(leading_number("crdt"), None);
    }

    #[test]
    fn parts_of_a_run_add_up_and_values_sort() {
        let dir = std::env::temp_dir().join(format!("elsa-sweep-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("temp dir");
        let mut records = Vec::new();
        // Two regions per run, values out of order, one series paced.
        for (ep, base) in [("500", 300.0), ("10", 100.0), ("100", 200.0)] {
            for (r, p99) in [("r1", 2000), ("r2", 9000)] {
                records.push(run("commit", &format!("epoch={ep}"), r, base, p99));
                records.push(run("commit", &format!("epoch={ep} paced"), r, 50.0, 1000));
            }
        }
        for (mode, t) in [("crdt", 7000.0), ("2pc", 500.0)] {
            records.push(run("commit", &format!("replication={mode}"), "r1", t, 1000));
        }
        records.push(run("commit", "unrelated label", "r1", 1.0, 1));
        let mut md = String::new();
        let out = charts(&records, &dir, &mut md).expect("charts");
        let names: Vec<String> = out.iter().map(|p| file_name(p)).collect();
        assert_eq!(
            names,
            [
                "sweep-commit-epoch.svg",
                "sweep-commit-epoch-p99.svg",
                "sweep-commit-replication.svg",
                "sweep-commit-replication-p99.svg"
            ]
        );
        // Sorted numerically, parts summed, worst p99 kept.
        assert!(
            md.contains("| 10 | 200 | 9.0 | 100 | 1.0 |\n| 100 | 400 | 9.0 | 100 | 1.0 |\n| 500 | 600 | 9.0 | 100 | 1.0 |"),
            "{md}"
        );
        // Categorical values keep the order they ran in.
        assert!(
            md.contains("| crdt | 7000 | 1.0 |\n| 2pc | 500 | 1.0 |"),
            "{md}"
        );
        let svg = std::fs::read_to_string(dir.join("sweep-commit-replication.svg")).expect("svg");
        assert!(
            svg.contains("2pc") && svg.contains("crdt"),
            "category labels"
        );
        let _ = std::fs::remove_dir_all(&dir);
    }
}

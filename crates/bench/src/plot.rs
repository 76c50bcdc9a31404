//! `elsa bench plot`: SVG charts and a markdown table from result files —
//! throughput against client threads per system (the paper's figures 7 and
//! 8), against isolation level (figure 11), and against any parameter a
//! run's label names (`sweep`: the cross-region figures 9–15).

mod sweep;

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use clap::Args;
use plotters::prelude::*;

use crate::report::{read_records, RunRecord};
use crate::BenchError;

/// `elsa bench plot`.
#[derive(Args, Debug, Clone)]
pub struct PlotArgs {
    /// Result files (.json or .csv) written with --output.
    #[arg(required = true)]
    pub files: Vec<PathBuf>,
    /// Directory for the charts and results.md.
    #[arg(long, default_value = "bench-results")]
    pub out_dir: PathBuf,
}

/// The number a chart plots: committed transactions/s for YCSB-T (the
/// paper's y axis), operations/s otherwise.
fn metric(r: &RunRecord) -> f64 {
    if r.workload == "ycsbt" {
        r.txns_per_sec
    } else {
        r.ops_per_sec
    }
}

fn metric_name(workload: &str) -> &'static str {
    if workload == "ycsbt" {
        "committed txn/s"
    } else {
        "ops/s"
    }
}

fn series_name(r: &RunRecord) -> String {
    let mut s = r.system.clone();
    if !r.isolation.is_empty() {
        s.push(' ');
        s.push_str(&r.isolation);
    }
    if !r.label.is_empty() {
        let _ = write!(s, " ({})", r.label);
    }
    s
}

fn zipf_name(z: Option<f64>) -> String {
    z.map_or_else(|| "-".into(), |z| format!("{z}"))
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    match v.len() {
        0 => 0.0,
        n if n % 2 == 1 => v[n / 2],
        n => (v[n / 2 - 1] + v[n / 2]) / 2.0,
    }
}

fn file_safe(s: &str) -> String {
    s.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '.' || c == '-' {
                c
            } else {
                '_'
            }
        })
        .collect()
}

/// Series name → x position → the values measured there (one per round).
type Series = BTreeMap<String, BTreeMap<usize, Vec<f64>>>;

const ISOLATION_ORDER: [&str; 5] = ["RC", "RR", "SI", "SERIALIZABLE", "WATCH"];

/// Reads the files, writes the charts and `results.md` into `--out-dir`.
pub fn run(a: &PlotArgs) -> Result<Vec<PathBuf>, BenchError> {
    let mut records = Vec::new();
    for f in &a.files {
        records.extend(read_records(f)?);
    }
    std::fs::create_dir_all(&a.out_dir)
        .map_err(|e| BenchError::Config(format!("{}: {e}", a.out_dir.display())))?;
    let mut written = Vec::new();
    let mut md = String::from("# Benchmark results\n");

    // Throughput vs threads: one chart per (workload, zipf); one line per
    // system/isolation/label with at least two thread counts.
    let mut by_group: BTreeMap<(String, String), Series> = BTreeMap::new();
    for r in &records {
        by_group
            .entry((r.workload.clone(), zipf_name(r.zipf)))
            .or_default()
            .entry(series_name(r))
            .or_default()
            .entry(r.threads)
            .or_default()
            .push(metric(r));
    }
    for ((workload, zipf), series) in &by_group {
        let lines: Vec<(String, Vec<(f64, f64)>)> = series
            .iter()
            .filter(|(_, pts)| pts.len() >= 2)
            .map(|(name, pts)| {
                (
                    name.clone(),
                    pts.iter()
                        .map(|(t, v)| (*t as f64, median(v.clone())))
                        .collect(),
                )
            })
            .collect();
        if lines.is_empty() {
            continue;
        }
        let title = format!(
            "{workload}, zipf {zipf}: {} vs client threads",
            metric_name(workload)
        );
        let path = a.out_dir.join(format!(
            "threads-{}-zipf{}.svg",
            file_safe(workload),
            file_safe(zipf)
        ));
        line_chart(
            &path,
            &title,
            "client threads",
            metric_name(workload),
            &lines,
            None,
        )?;
        written.push(path.clone());
        // The same numbers as a table: threads down, series across.
        let threads: std::collections::BTreeSet<usize> = series
            .values()
            .flat_map(|pts| pts.keys().copied())
            .collect();
        let _ = write!(
            md,
            "\n## {title}\n\n![]({})\n\n| threads |",
            file_name(&path)
        );
        for (name, _) in &lines {
            let _ = write!(md, " {name} |");
        }
        md.push_str("\n|---:|");
        md.push_str(&"---:|".repeat(lines.len()));
        md.push('\n');
        for t in threads {
            let _ = write!(md, "| {t} |");
            for (name, _) in &lines {
                match series.get(name).and_then(|p| p.get(&t)) {
                    Some(v) => {
                        let _ = write!(md, " {:.0} |", median(v.clone()));
                    }
                    None => md.push_str(" |"),
                }
            }
            md.push('\n');
        }
    }

    // Throughput vs isolation: one chart per (workload, threads); one line
    // per system/zipf/label that ran at least two levels.
    let mut by_iso: BTreeMap<(String, usize), Series> = BTreeMap::new();
    for r in &records {
        let Some(rank) = ISOLATION_ORDER.iter().position(|l| *l == r.isolation) else {
            continue;
        };
        let mut name = format!("{} zipf {}", r.system, zipf_name(r.zipf));
        if !r.label.is_empty() {
            let _ = write!(name, " ({})", r.label);
        }
        by_iso
            .entry((r.workload.clone(), r.threads))
            .or_default()
            .entry(name)
            .or_default()
            .entry(rank)
            .or_default()
            .push(metric(r));
    }
    for ((workload, threads), series) in &by_iso {
        let levels: std::collections::BTreeSet<usize> = series
            .values()
            .filter(|pts| pts.len() >= 2)
            .flat_map(|pts| pts.keys().copied())
            .collect();
        if levels.len() < 2 {
            continue;
        }
        let levels: Vec<usize> = levels.into_iter().collect();
        let lines: Vec<(String, Vec<(f64, f64)>)> = series
            .iter()
            .filter(|(_, pts)| pts.len() >= 2)
            .map(|(name, pts)| {
                let pts = pts
                    .iter()
                    .filter_map(|(rank, v)| {
                        levels
                            .iter()
                            .position(|l| l == rank)
                            .map(|x| (x as f64, median(v.clone())))
                    })
                    .collect();
                (name.clone(), pts)
            })
            .collect();
        let names: Vec<&str> = levels.iter().map(|&r| ISOLATION_ORDER[r]).collect();
        let title = format!(
            "{workload}, {threads} threads: {} vs isolation level",
            metric_name(workload)
        );
        let path = a
            .out_dir
            .join(format!("isolation-{}-t{threads}.svg", file_safe(workload)));
        line_chart(
            &path,
            &title,
            "isolation level",
            metric_name(workload),
            &lines,
            Some(&names),
        )?;
        written.push(path.clone());
        let _ = write!(
            md,
            "\n## {title}\n\n![]({})\n\n| series |",
            file_name(&path)
        );
        for n in &names {
            let _ = write!(md, " {n} |");
        }
        md.push_str("\n|---|");
        md.push_str(&"---:|".repeat(names.len()));
        md.push('\n');
        for (name, pts) in &lines {
            let _ = write!(md, "| {name} |");
            for x in 0..names.len() {
                match pts.iter().find(|(px, _)| *px as usize == x) {
                    Some((_, y)) => {
                        let _ = write!(md, " {y:.0} |");
                    }
                    None => md.push_str(" |"),
                }
            }
            md.push('\n');
        }
    }

    written.extend(sweep::charts(&records, &a.out_dir, &mut md)?);

    md.push_str("\n## Every run\n\n| workload | system | label | threads | isolation | zipf | txn/s | ops/s | abort % | p50 µs | p99 µs | errors |\n|---|---|---|---:|---|---:|---:|---:|---:|---:|---:|---:|\n");
    for r in &records {
        let _ = writeln!(
            md,
            "| {} | {} | {} | {} | {} | {} | {:.0} | {:.0} | {:.1} | {} | {} | {} |",
            r.workload,
            r.system,
            r.label,
            r.threads,
            r.isolation,
            zipf_name(r.zipf),
            r.txns_per_sec,
            r.ops_per_sec,
            r.abort_rate_pct,
            r.lat_p50_us,
            r.lat_p99_us,
            r.errors
        );
    }
    let md_path = a.out_dir.join("results.md");
    std::fs::write(&md_path, md)
        .map_err(|e| BenchError::Config(format!("{}: {e}", md_path.display())))?;
    written.push(md_path);
    for p in &written {
        eprintln!("wrote {}", p.display());
    }
    Ok(written)
}

fn file_name(p: &Path) -> String {
    p.file_name()
        .map(|f| f.to_string_lossy().into_owned())
        .unwrap_or_default()
}

fn draw_err<E: std::fmt::Debug>(path: &Path) -> impl Fn(E) -> BenchError + '_ {
    move |e| BenchError::Config(format!("drawing {}: {e:?}", path.display()))
}

/// One SVG line chart; `categories` names the x positions 0, 1, … instead
/// of numbering them.
fn line_chart(
    path: &Path,
    title: &str,
    x_desc: &str,
    y_desc: &str,
    lines: &[(String, Vec<(f64, f64)>)],
    categories: Option<&[&str]>,
) -> Result<(), BenchError> {
    let err = draw_err(path);
    let xmax = lines
        .iter()
        .flat_map(|(_, p)| p.iter().map(|(x, _)| *x))
        .fold(0.0, f64::max);
    let ymax = lines
        .iter()
        .flat_map(|(_, p)| p.iter().map(|(_, y)| *y))
        .fold(0.0, f64::max);
    let x_range = match categories {
        Some(c) => -0.5..(c.len() as f64 - 0.5),
        None => 0.0..(xmax * 1.05).max(1.0),
    };
    let root = SVGBackend::new(path, (900, 540)).into_drawing_area();
    root.fill(&WHITE).map_err(&err)?;
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 20))
        .margin(15)
        .x_label_area_size(45)
        .y_label_area_size(80)
        .build_cartesian_2d(x_range, 0.0..(ymax * 1.15).max(1.0))
        .map_err(&err)?;
    let fmt_x = |x: &f64| match categories {
        Some(c) => {
            let i = x.round();
            if (x - i).abs() < 1e-6 && i >= 0.0 && (i as usize) < c.len() {
                c[i as usize].to_string()
            } else {
                String::new()
            }
        }
        None => format!("{x:.0}"),
    };
    let mut mesh = chart.configure_mesh();
    mesh.x_desc(x_desc)
        .y_desc(y_desc)
        .x_label_formatter(&fmt_x)
        .y_label_formatter(&|y| format!("{y:.0}"));
    if let Some(c) = categories {
        mesh.x_labels(c.len() * 2 + 1);
    }
    mesh.draw().map_err(&err)?;
    for (i, (name, pts)) in lines.iter().enumerate() {
        let color = Palette99::pick(i).to_rgba();
        chart
            .draw_series(LineSeries::new(pts.iter().copied(), color.stroke_width(2)))
            .map_err(&err)?
            .label(name.as_str())
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(2))
            });
        chart
            .draw_series(
                pts.iter()
                    .map(|&(x, y)| Circle::new((x, y), 4, color.filled())),
            )
            .map_err(&err)?;
    }
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .position(SeriesLabelPosition::UpperRight)
        .draw()
        .map_err(&err)?;
    root.present().map_err(&err)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn draws_threads_and_isolation_charts() {
        let dir = std::env::temp_dir().join(format!("elsa-bench-plot-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("temp dir");
        let mut records = Vec::new();
        for (system, iso) in [("elsa", "SI"), ("redis", "WATCH"), ("postgres", "SI")] {
            for (i, t) in [2usize, 4, 8].into_iter().enumerate() {
                records.push(RunRecord {
                    workload: "ycsbt".into(),
                    system: system.into(),
                    isolation: iso.into(),
                    threads: t,
                    zipf: Some(4.0),
                    txns_per_sec: 1000.0 * (i + 1) as f64,
                    ..RunRecord::default()
                });
            }
        }
        for (i, iso) in ["RC", "RR", "SI"].into_iter().enumerate() {
            records.push(RunRecord {
                workload: "ycsbt".into(),
                system: "elsa".into(),
                isolation: iso.into(),
                threads: 32,
                zipf: Some(1.0),
                txns_per_sec: 900.0 - 100.0 * i as f64,
                ..RunRecord::default()
            });
        }
        let file = dir.join("r.json");
        crate::report::append_records(&file, &records).expect("write results");
        let out = run(&PlotArgs {
            files: vec![file],
            out_dir: dir.join("charts"),
        })
        .expect("plot");
        let names: Vec<String> = out.iter().map(|p| file_name(p)).collect();
        assert!(
            names.contains(&"threads-ycsbt-zipf4.svg".to_string()),
            "{names:?}"
        );
        assert!(
            names.contains(&"isolation-ycsbt-t32.svg".to_string()),
            "{names:?}"
        );
        let svg = std::fs::read_to_string(dir.join("charts/threads-ycsbt-zipf4.svg")).expect("svg");
        assert!(
            svg.starts_with("<svg")
                && svg.contains("redis WATCH")
                && svg.contains("client threads")
        );
        let iso = std::fs::read_to_string(dir.join("charts/isolation-ycsbt-t32.svg")).expect("svg");
        assert!(
            iso.contains(">RR<") || iso.contains("RR"),
            "isolation labels"
        );
        let md = std::fs::read_to_string(dir.join("charts/results.md")).expect("md");
        assert!(md.contains("| 8 | 3000 | 3000 | 3000 |"), "{md}");
        assert!(md.contains("| elsa zipf 1 | 900 | 800 | 700 |"), "{md}");
        let _ = std::fs::remove_dir_all(&dir);
    }
}

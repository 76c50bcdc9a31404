//! Every workload, briefly, against real servers started here: Debian's
//! redis-server, a throw-away PostgreSQL cluster and the `elsa` binary.
//! The checks are about what happened (counts, errors, data written,
//! system detected, files produced), never about how fast.

mod common;

use common::{bench, bench_err, Elsa, Postgres, Redis};
use elsa_bench::report::{read_records, RunRecord};

fn one(records: Vec<RunRecord>) -> RunRecord {
    assert_eq!(records.len(), 1, "{records:?}");
    records.into_iter().next().expect("one record")
}

/// YCSB load then run A–F: every operation answered OK. Each workload gets
/// its own table (YCSB's `table` property; RESP targets ignore it), as
/// YCSB runs D and E each insert records after `recordcount` and a plain
/// SQL INSERT of an existing key fails.
fn ycsb_all(url: &str, system: &str) {
    for w in ["a", "b", "c", "d", "e", "f"] {
        let file = format!("../../workloads/workload{w}");
        let table = format!("table=usertable_{w}");
        let load = one(bench(&[
            "ycsb",
            "load",
            "-P",
            &file,
            "-p",
            "recordcount=200",
            "-p",
            &table,
            "--threads",
            "3",
            "-u",
            url,
        ]));
        assert_eq!(
            (load.system.as_str(), load.workload.clone()),
            (system, format!("workload{w}-load"))
        );
        assert_eq!((load.operations, load.errors), (200, 0), "{load:?}");
        let r = one(bench(&[
            "ycsb",
            "run",
            "-P",
            &file,
            "-p",
            "recordcount=200",
            "-p",
            "operationcount=150",
            "-p",
            "maxscanlength=20",
            "-p",
            &table,
            "--threads",
            "2",
            "-u",
            url,
        ]));
        assert_eq!(r.operations, 150, "workload{w} on {system}: {r:?}");
        assert_eq!(r.errors, 0, "workload{w} on {system}: {r:?}");
        assert!(r.lat_p99_us >= r.lat_p50_us && r.lat_max_us > 0, "{r:?}");
    }
}

/// YCSB-T at the given levels and both of the paper's exponents: every
/// transaction commits (after retries), none gives up or fails.
fn ycsbt_all(url: &str, system: &str, levels: &[&str]) {
    for level in levels {
        for zipf in ["1", "4"] {
            let r = one(bench(&[
                "ycsbt",
                "-u",
                url,
                "--threads",
                "4",
                "--records",
                "500",
                "--zipf",
                zipf,
                "--txns",
                "120",
                "--isolation",
                level,
                "--long-ops",
                "12",
                "--long-share",
                "0.1",
            ]));
            assert_eq!(r.system, system);
            assert_eq!(r.isolation, level.to_ascii_uppercase());
            assert_eq!(r.commits, 120, "{system} {level} zipf {zipf}: {r:?}");
            assert_eq!(r.errors, 0, "{system} {level} zipf {zipf}: {r:?}");
            assert_eq!(r.retries, r.aborts, "every abort was retried: {r:?}");
            assert!(r.operations >= 120, "{r:?}");
        }
    }
}

fn batch_and_commit(url: &str, system: &str, op_types: &[&str]) {
    for op in op_types {
        for ratio in ["0", "0.5", "1"] {
            let r = one(bench(&[
                "batch",
                "-u",
                url,
                "--op-type",
                op,
                "--batch-size",
                "6",
                "--get-ratio",
                ratio,
                "--num-keys",
                "1000",
                "--connections",
                "4",
                "--num-ops",
                "200",
            ]));
            assert_eq!(
                (r.commits, r.errors, r.operations),
                (200, 0, 1200),
                "{system} {op} {ratio}: {r:?}"
            );
        }
    }
    let r = one(bench(&[
        "commit",
        "-u",
        url,
        "--threads",
        "4",
        "--num-ops",
        "300",
    ]));
    assert_eq!((r.commits, r.errors), (300, 0), "{system}: {r:?}");
}

#[test]
fn redis_runs_every_workload() {
    let redis = Redis::start();
    let url = redis.url();
    ycsb_all(&url, "redis");
    ycsbt_all(&url, "redis", &["watch"]);
    let mut c = redis.conn();
    let before: u64 = redis::cmd("DBSIZE").query(&mut c).expect("dbsize");
    batch_and_commit(&url, "redis", &["pipeline", "tx"]);
    let keys: Vec<String> = redis::cmd("KEYS")
        .arg("commit:*")
        .query(&mut c)
        .expect("keys");
    assert_eq!(keys.len(), 300, "each upsert wrote a new key");
    let after: u64 = redis::cmd("DBSIZE").query(&mut c).expect("dbsize");
    assert!(after >= before + 300);
    // Redis has no isolation levels: asking for one is a clear error.
    let e = bench_err(&[
        "ycsbt",
        "-u",
        &url,
        "--isolation",
        "si",
        "--txns",
        "1",
        "--records",
        "10",
    ]);
    assert!(e.contains("not available on redis"), "{e}");
}

#[test]
fn postgres_runs_every_workload() {
    let pg = Postgres::start();
    let url = pg.url();
    ycsb_all(&url, "postgres");
    let mut c = pg.client();
    let n: i64 = c
        .query_one("SELECT count(*) FROM usertable_a", &[])
        .expect("count")
        .get(0);
    assert_eq!(n, 200, "the load phase wrote the records");
    // YCSB-T shares usertable (its other fields are nullable).
    ycsbt_all(&url, "postgres", &["rc", "si", "serializable"]);
    batch_and_commit(&url, "postgres", &["tx"]);
    let n: i64 = c
        .query_one("SELECT count(*) FROM t1", &[])
        .expect("count")
        .get(0);
    assert_eq!(n, 300, "each upsert inserted a new row");
    // A second commit run must not collide with the first one's ids.
    let r = one(bench(&[
        "commit",
        "-u",
        &url,
        "--threads",
        "2",
        "--num-ops",
        "50",
    ]));
    assert_eq!(r.errors, 0);
    let n: i64 = c
        .query_one("SELECT count(*) FROM t1", &[])
        .expect("count")
        .get(0);
    assert_eq!(n, 350);
    let e = bench_err(&[
        "batch",
        "-u",
        &url,
        "--op-type",
        "pipeline",
        "--num-ops",
        "1",
    ]);
    assert!(e.contains("pipeline"), "{e}");
}

#[test]
fn elsa_runs_every_workload() {
    let elsa = Elsa::start();
    let url = elsa.url();
    ycsb_all(&url, "elsa");
    // Elsa's own BEGIN/COMMIT at each level, and the Redis WATCH form.
    ycsbt_all(&url, "elsa", &["rc", "rr", "si", "watch"]);
    batch_and_commit(&url, "elsa", &["pipeline", "tx"]);
    let mut c = elsa.conn();
    let v: Option<String> = redis::cmd("GET")
        .arg("user0:field0")
        .query(&mut c)
        .expect("get");
    assert_eq!(v.map(|s| s.len()), Some(100), "YCSB-T loaded its records");
}

/// --compare runs both targets alternately and writes every run to the
/// result files; plot draws from them.
#[test]
fn compare_output_and_plot() {
    let a = Redis::start();
    let b = Redis::start();
    let dir = std::env::temp_dir().join(format!("elsa-bench-live-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("temp dir");
    let json = dir.join("r.json");
    let csv = dir.join("r.csv");
    let (ua, ub) = (a.url(), b.url());
    for threads in ["2", "4"] {
        for out in [&json, &csv] {
            let recs = bench(&[
                "ycsbt",
                "--compare",
                &ua,
                &ub,
                "--rounds",
                "2",
                "--threads",
                threads,
                "--records",
                "100",
                "--txns",
                "40",
                "--zipf",
                "4",
                "--warmup",
                "0.05",
                "--target",
                "5000",
                "--seed",
                "7",
                "-o",
                out.to_str().expect("utf-8 path"),
            ]);
            assert_eq!(recs.len(), 4, "2 rounds x 2 targets");
            assert_eq!(recs.iter().filter(|r| r.url == ua).count(), 2);
        }
    }
    assert_eq!(read_records(&json).expect("json").len(), 8);
    assert_eq!(read_records(&csv).expect("csv").len(), 8);
    let charts = dir.join("charts");
    bench(&[
        "plot",
        json.to_str().expect("utf-8"),
        "--out-dir",
        charts.to_str().expect("utf-8"),
    ]);
    assert!(charts.join("threads-ycsbt-zipf4.svg").exists());
    let md = std::fs::read_to_string(charts.join("results.md")).expect("results.md");
    assert!(md.contains("| 4 |"), "{md}");
    let _ = std::fs::remove_dir_all(&dir);
}

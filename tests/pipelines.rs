//! Pipelines behave as if their commands ran one at a time, in the client's
//! order, as in Redis — also when their keys live on different shards and
//! other clients commit multi-key transactions meanwhile.

mod common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::Elsa;

/// Keys enough that with two workers both shards hold some of them.
fn keys(prefix: &str) -> Vec<String> {
    (0..16).map(|i| format!("{prefix}{i}")).collect()
}

#[test]
fn a_pipeline_never_sees_half_of_a_multi_shard_commit() {
    // Client A commits `MSET k0 i k1 i …` in a loop; client B pipelines a
    // GET of every key. Run one at a time in order, each GET sees the MSET
    // the one before it saw or a later one: the values never decrease
    // along the pipeline (they did when each shard ran its part of the
    // pipeline at its own moment: k3 from MSET 7 after k5 from MSET 8).
    let elsa = Elsa::start(&["--workers", "2"]);
    let ks = keys("k");
    let mut w = elsa.conn();
    let mut init = redis::cmd("MSET");
    for k in &ks {
        init.arg(k).arg(0);
    }
    let _: () = init.query(&mut w).unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let writer = {
        let (ks, stop) = (ks.clone(), stop.clone());
        std::thread::spawn(move || {
            let mut i = 1u64;
            while !stop.load(Ordering::Relaxed) {
                let mut m = redis::cmd("MSET");
                for k in &ks {
                    m.arg(k).arg(i);
                }
                let _: () = m.query(&mut w).unwrap();
                i += 1;
            }
            i
        })
    };
    let mut r = elsa.conn();
    let deadline = Instant::now() + Duration::from_secs(3);
    let (mut reads, mut torn) = (0, 0);
    while Instant::now() < deadline {
        let mut p = redis::pipe();
        for k in &ks {
            p.cmd("GET").arg(k);
        }
        let got: Vec<u64> = p.query(&mut r).unwrap();
        reads += 1;
        if got.windows(2).any(|w| w[1] < w[0]) {
            torn += 1;
            eprintln!("torn pipeline read: {got:?}");
        }
    }
    stop.store(true, Ordering::Relaxed);
    let commits = writer.join().unwrap();
    eprintln!("{reads} pipelined reads against {commits} commits, {torn} torn");
    assert!(commits > 10 && reads > 10, "both sides must have run");
    assert_eq!(torn, 0, "a pipeline saw part of a commit");
}

#[test]
fn pipelined_writes_become_visible_in_the_client_order() {
    // A writer pipelines `SET data:j i …; SET flag:f i …` (data and flag
    // keys on every shard, flags last); readers pipeline `GET flag:f …;
    // GET data:j …`. Whenever a reader sees a flag at i, every data key it
    // reads after it must be at least i (writes on the writer's own
    // thread's shard used to become visible before those it sent away).
    let elsa = Elsa::start(&["--workers", "2"]);
    let data = keys("data:");
    let stop = Arc::new(AtomicBool::new(false));
    let writer = {
        let (data, stop) = (data.clone(), stop.clone());
        let mut w = elsa.conn();
        std::thread::spawn(move || {
            let mut i = 1u64;
            while !stop.load(Ordering::Relaxed) {
                let mut p = redis::pipe();
                for k in &data {
                    p.cmd("SET").arg(k).arg(i).ignore();
                }
                for f in 0..4 {
                    p.cmd("SET").arg(format!("flag:{f}")).arg(i).ignore();
                }
                let _: () = p.query(&mut w).unwrap();
                i += 1;
            }
            i
        })
    };
    // Several readers, so some run on the writer's thread and some not.
    let readers: Vec<_> = (0..4)
        .map(|_| {
            let (data, mut r) = (data.clone(), elsa.conn());
            std::thread::spawn(move || {
                let deadline = Instant::now() + Duration::from_secs(3);
                let (mut reads, mut early) = (0, 0);
                while Instant::now() < deadline {
                    let mut p = redis::pipe();
                    for f in 0..4 {
                        p.cmd("GET").arg(format!("flag:{f}"));
                    }
                    for k in &data {
                        p.cmd("GET").arg(k);
                    }
                    let got: Vec<Option<u64>> = p.query(&mut r).unwrap();
                    reads += 1;
                    let flag = got[..4].iter().map(|v| v.unwrap_or(0)).max().unwrap_or(0);
                    if got[4..].iter().any(|v| v.unwrap_or(0) < flag) {
                        early += 1;
                        eprintln!("flag {flag} visible before its data: {got:?}");
                    }
                }
                (reads, early)
            })
        })
        .collect();
    let (mut reads, mut early) = (0, 0);
    for r in readers {
        let (n, e) = r.join().unwrap();
        reads += n;
        early += e;
    }
    stop.store(true, Ordering::Relaxed);
    let rounds = writer.join().unwrap();
    eprintln!("{reads} pipelined reads against {rounds} pipelined rounds, {early} out of order");
    assert!(rounds > 10 && reads > 10, "both sides must have run");
    assert_eq!(
        early, 0,
        "a write became visible before one pipelined ahead of it"
    );
}

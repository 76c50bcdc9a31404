//! The fault schedules of the region isolation runs: one fault at a time
//! on a random node, of the kinds given, taking turns —
//!
//! - `kill -9`, then a restart on the same ports and data 1.5–3 s later;
//! - `SIGSTOP` for 3–5 s, then `SIGCONT` (the node wakes up believing
//!   nothing happened, while the others may have declared it dead);
//! - the node's clock 400 ms ahead or behind for 3–5 s (`ELSA.FAULT
//!   CLOCK`, needs `--fault-injection true`);
//!
//! each followed by healing (every node lists every member and has caught
//! up) and a calm spell, while the clients keep going. It goes on until
//! `min_faults` have been healed and the caller says enough.

use std::time::{Duration, Instant};

use rand::rngs::StdRng;
use rand::Rng;

use crate::common::cluster::Cluster;

/// A kind of fault.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Kill,
    Pause,
    Clock,
}

/// Faults of `kinds`, in turn, until `min_faults` ran and `enough()`;
/// returns one line per fault (what, when, when healed), times from `t0`.
pub fn run(
    cluster: &mut Cluster,
    rng: &mut StdRng,
    t0: Instant,
    kinds: &[Kind],
    min_faults: usize,
    mut enough: impl FnMut() -> bool,
) -> Vec<String> {
    let all: Vec<usize> = (0..cluster.len()).collect();
    let mut log = Vec::new();
    let first = rng.gen_range(0..kinds.len());
    let mut done = 0;
    while done < min_faults || !enough() {
        std::thread::sleep(Duration::from_millis(rng.gen_range(1000..2000)));
        let node = rng.gen_range(0..cluster.len());
        let id = cluster.specs[node].id;
        let start = t0.elapsed();
        let what = match kinds[(first + done) % kinds.len()] {
            Kind::Kill => {
                let down = Duration::from_millis(rng.gen_range(1500..3000));
                cluster.kill9(node);
                std::thread::sleep(down);
                cluster.restart(node);
                format!("kill -9 node {id}, down {:.1} s", down.as_secs_f64())
            }
            Kind::Pause => {
                let paused = Duration::from_millis(rng.gen_range(3000..5000));
                cluster.pause(node);
                std::thread::sleep(paused);
                cluster.resume(node);
                format!("SIGSTOP node {id} for {:.1} s", paused.as_secs_f64())
            }
            Kind::Clock => {
                let held = Duration::from_millis(rng.gen_range(3000..5000));
                let ms: i64 = if rng.gen_bool(0.5) { 400 } else { -400 };
                let clock = |ms: i64| {
                    let _: String = redis::cmd("ELSA.FAULT")
                        .arg("CLOCK")
                        .arg(ms)
                        .query(&mut cluster.conn(node))
                        .expect("ELSA.FAULT CLOCK");
                };
                clock(ms);
                std::thread::sleep(held);
                clock(0);
                format!("clock {ms} ms on node {id} for {:.1} s", held.as_secs_f64())
            }
        };
        let back = t0.elapsed();
        cluster.wait_members(&all, all.len(), Duration::from_secs(60));
        cluster.wait_caught_up(&all, Duration::from_secs(60));
        let line = format!(
            "{:6.2} s: {what}; back at {:.2} s, healed at {:.2} s",
            start.as_secs_f64(),
            back.as_secs_f64(),
            t0.elapsed().as_secs_f64()
        );
        println!("[isolation] faults: {line}");
        log.push(line);
        done += 1;
    }
    // A calm spell at the end: the last victim's clients are back.
    std::thread::sleep(Duration::from_secs(1));
    log
}

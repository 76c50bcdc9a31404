//! The fault schedule of a linearizability run: one fault at a time on a
//! random node of the region, the kinds taking turns —
//!
//! - `kill -9`, then a restart on the same ports and data 2–4 s later;
//! - `SIGSTOP` for 3–10 s, then `SIGCONT` (the node wakes up believing
//!   nothing happened, while the others may have declared it dead);
//!
//! each followed by healing (every node lists every member and has caught
//! up) and a calm spell before the next, while the clients keep going.

use std::time::Duration;

use rand::rngs::StdRng;
use rand::Rng;

use crate::common::cluster::Cluster;
use crate::history::{Annotation, Clock};

/// A kind of fault.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Kill,
    Pause,
}

impl Kind {
    /// The kinds named in a comma-separated list (`kill,pause`; `none`
    /// for no faults).
    pub fn parse_list(list: &str) -> Vec<Kind> {
        list.split(',')
            .map(str::trim)
            .filter(|s| !s.is_empty() && *s != "none")
            .map(|s| match s {
                "kill" => Kind::Kill,
                "pause" => Kind::Pause,
                other => panic!("unknown fault {other:?}: expected kill, pause or none"),
            })
            .collect()
    }
}

/// One fault.
#[derive(Clone, Copy, Debug)]
enum Fault {
    Kill { node: usize, down: Duration },
    Pause { node: usize, paused: Duration },
}

impl Fault {
    fn describe(&self, cluster: &Cluster) -> String {
        match *self {
            Fault::Kill { node, down } => format!(
                "kill -9 node {} (down {:.1} s)",
                cluster.specs[node].id,
                down.as_secs_f64()
            ),
            Fault::Pause { node, paused } => format!(
                "SIGSTOP node {} for {:.1} s",
                cluster.specs[node].id,
                paused.as_secs_f64()
            ),
        }
    }
}

/// Faults of the given kinds, in turn, until `until` on `clock` — at
/// least one of each kind however short the run — healing after each; each
/// fault's span, from its start until healed. With no kinds, just waits
/// until `until`.
pub fn run(
    cluster: &mut Cluster,
    clock: Clock,
    until: Duration,
    kinds: &[Kind],
    rng: &mut StdRng,
) -> Vec<Annotation> {
    let all: Vec<usize> = (0..cluster.len()).collect();
    let mut notes = Vec::new();
    if kinds.is_empty() {
        std::thread::sleep(until.saturating_sub(Duration::from_nanos(clock.now())));
        return notes;
    }
    let first = rng.gen_range(0..kinds.len());
    let mut done = 0;
    while done < kinds.len() || clock.now() < until.as_nanos() as u64 {
        std::thread::sleep(Duration::from_millis(rng.gen_range(2000..4000)));
        let node = rng.gen_range(0..cluster.len());
        let fault = match kinds[(first + done) % kinds.len()] {
            Kind::Kill => Fault::Kill {
                node,
                down: Duration::from_millis(rng.gen_range(2000..4000)),
            },
            Kind::Pause => Fault::Pause {
                node,
                paused: Duration::from_millis(rng.gen_range(3000..10_000)),
            },
        };
        let what = fault.describe(cluster);
        let start = clock.now();
        match fault {
            Fault::Kill { node, down } => {
                cluster.kill9(node);
                std::thread::sleep(down);
                cluster.restart(node);
            }
            Fault::Pause { node, paused } => {
                cluster.pause(node);
                std::thread::sleep(paused);
                cluster.resume(node);
            }
        }
        let back = clock.now();
        cluster.wait_members(&all, all.len(), Duration::from_secs(60));
        cluster.wait_caught_up(&all, Duration::from_secs(60));
        let healed = clock.now();
        println!(
            "[lin] {:6.2} s: {what}; back at {:.2} s, healed at {:.2} s",
            secs(start),
            secs(back),
            secs(healed)
        );
        notes.push(Annotation {
            tag: "faults".into(),
            start,
            end: healed,
            description: format!(
                "{what}; back at {:.2} s, healed at {:.2} s",
                secs(back),
                secs(healed)
            ),
        });
        done += 1;
    }
    notes
}

fn secs(ns: u64) -> f64 {
    ns as f64 / 1e9
}

//! Data types across regions, on real clusters: two regions of two nodes,
//! a client on every node changing the same keys concurrently — through
//! a `kill -9` and restart of one node and a partition of one region —
//! then, once healed: every node holds the same state, and it keeps every
//! acknowledged change (`docs/datatypes.md`):
//!
//! - a counter every client `INCR`s equals the number of acknowledged
//!   increments (plus at most the ones left in doubt by an error);

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use redis::Value;

use crate::common::cluster::Cluster;
use crate::{connect, one_at_a_time, text};

/// The counter every client increments.
const COUNTER: &str = "dt:counter";

/// What one client did.
#[derive(Default, Debug)]
struct Done {
    /// Increments acknowledged.
    incr_acked: u64,
    /// Increments that failed or went unanswered: applied or not.
    incr_doubt: u64,
}

/// One client on node port `port`: increments until told to stop. A failed
/// increment is not retried (a retry could count twice): it is in doubt.
fn client(port: u16, stop: &AtomicBool) -> Done {
    let mut done = Done::default();
    let mut con = None;
    while !stop.load(Ordering::Relaxed) {
        let c = match con.as_mut() {
            Some(c) => c,
            None => match connect(port, Duration::from_secs(2)) {
                Ok(c) => con.insert(c),
                Err(_) => {
                    std::thread::sleep(Duration::from_millis(50));
                    continue;
                }
            },
        };
        let answer: redis::RedisResult<Value> = redis::cmd("INCR").arg(COUNTER).query(c);
        match answer {
            Ok(Value::Int(_)) => done.incr_acked += 1,
            Ok(_) | Err(_) => {
                done.incr_doubt += 1;
                con = None;
                std::thread::sleep(Duration::from_millis(20));
            }
        }
    }
    done
}

#[test]
fn counters_in_two_regions_keep_every_acknowledged_change() {
    let _one = one_at_a_time();
    let mut c = Cluster::start(
        &["a", "a", "b", "b"],
        &[
            "--wan-delay-ms",
            "25",
            "--appendfsync",
            "always",
            "--replication-factor",
            "2",
        ],
    );
    let ports: Vec<u16> = (0..c.len()).map(|i| c.port(i)).collect();
    let victim = c.in_region("a")[1];
    let cut = c.in_region("b");
    let stop = AtomicBool::new(false);
    let t0 = Instant::now();
    let mut events = Vec::new();
    let done: Vec<Done> = std::thread::scope(|s| {
        let handles: Vec<_> = ports
            .iter()
            .map(|&p| {
                let stop = &stop;
                s.spawn(move || client(p, stop))
            })
            .collect();
        std::thread::sleep(Duration::from_secs(1));
        c.kill9(victim);
        events.push(format!("{:.1?} kill -9 node {}", t0.elapsed(), victim + 1));
        std::thread::sleep(Duration::from_secs(1));
        c.restart(victim);
        events.push(format!("{:.1?} restarted", t0.elapsed()));
        std::thread::sleep(Duration::from_secs(1));
        for &i in &cut {
            c.fault(i, "ISOLATE");
        }
        events.push(format!("{:.1?} region b isolated", t0.elapsed()));
        std::thread::sleep(Duration::from_secs(2));
        for &i in &cut {
            c.fault(i, "HEAL");
        }
        events.push(format!("{:.1?} healed", t0.elapsed()));
        std::thread::sleep(Duration::from_secs(1));
        stop.store(true, Ordering::Relaxed);
        handles
            .into_iter()
            .map(|h| h.join().expect("client panicked"))
            .collect()
    });
    println!("[datatypes] {}", events.join("; "));
    println!("[datatypes] clients: {done:?}");
    let all: Vec<usize> = (0..c.len()).collect();
    let took = c.wait_same_digest(&all, Duration::from_secs(60));
    println!("[datatypes] same digest everywhere {took:.1?} after the clients stopped");

    let acked: u64 = done.iter().map(|d| d.incr_acked).sum();
    let doubt: u64 = done.iter().map(|d| d.incr_doubt).sum();
    assert!(
        done.iter().all(|d| d.incr_acked > 0),
        "every client got increments through: {done:?}"
    );
    for i in all {
        let v: Value = redis::cmd("GET")
            .arg(COUNTER)
            .query(&mut c.conn(i))
            .expect("GET");
        let n: u64 = text(&v)
            .and_then(|t| t.parse().ok())
            .unwrap_or_else(|| panic!("node {} answered {v:?}", i + 1));
        assert!(
            (acked..=acked + doubt).contains(&n),
            "node {}: counter {n}, but {acked} increments were acknowledged and {doubt} in doubt: \
             concurrent increments in two regions must all count",
            i + 1
        );
    }
}

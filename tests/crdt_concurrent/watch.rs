//! `ELSA_CRDT_WATCH=FILE`: a diagnosis aid, not a check. A thread reads
//! every key on every node about ten times a second through the run and
//! writes each change of an element's presence, per node, with its time
//! (`12.34s node 2 cc:list:1 +w0:5.0`), and when a node stops or starts
//! answering. When a removed element comes back, the file says on which
//! node it came back first and when — which fault, restart or heal
//! brought it.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use crate::check::{read, Got};

/// The elements `g` shows (a string's value as one element).
fn elements(g: &Got) -> BTreeSet<String> {
    match g {
        Got::Str(v) => v.iter().cloned().collect(),
        Got::Set(s) => s.clone(),
        Got::Hash(h) => h.keys().cloned().collect(),
        Got::ZSet(z) => z.keys().cloned().collect(),
        Got::List(l) => l.iter().cloned().collect(),
        // Registers, not elements: its length stands for it.
        Got::Hll(v) => v.iter().map(|b| format!("{} bytes", b.len())).collect(),
    }
}

fn connect(port: u16) -> Option<redis::Connection> {
    let client = redis::Client::open(format!("redis://127.0.0.1:{port}/")).ok()?;
    let con = client
        .get_connection_with_timeout(Duration::from_millis(300))
        .ok()?;
    con.set_read_timeout(Some(Duration::from_millis(500)))
        .ok()?;
    Some(con)
}

/// Watches `ports` (node index → port) for `keys` until `stop`, then
/// writes the changes to `path`.
pub fn watch(path: &str, ports: &[u16], keys: &[String], t0: Instant, stop: &AtomicBool) {
    let mut lines = Vec::new();
    let mut cons: Vec<Option<redis::Connection>> = ports.iter().map(|_| None).collect();
    let mut up = vec![true; ports.len()];
    let mut seen: BTreeMap<(usize, &str), BTreeSet<String>> = BTreeMap::new();
    while !stop.load(Ordering::Relaxed) {
        for (i, &port) in ports.iter().enumerate() {
            if cons[i].is_none() {
                cons[i] = connect(port);
            }
            let mut ok = cons[i].is_some();
            for key in keys {
                let Some(con) = cons[i].as_mut() else { break };
                match read(con, key) {
                    Ok(g) => {
                        let now = elements(&g);
                        let before = seen.entry((i, key.as_str())).or_default();
                        let t = t0.elapsed().as_secs_f64();
                        for e in now.difference(before) {
                            lines.push(format!("{t:.2}s node {} {key} +{e}", i + 1));
                        }
                        for e in before.difference(&now) {
                            lines.push(format!("{t:.2}s node {} {key} -{e}", i + 1));
                        }
                        *before = now;
                    }
                    // A busy or wrong-type answer says nothing; a broken
                    // connection is opened again next time.
                    Err(e) if e.is_io_error() || e.is_connection_dropped() => {
                        cons[i] = None;
                        ok = false;
                    }
                    Err(_) => {}
                }
            }
            if ok != up[i] {
                let t = t0.elapsed().as_secs_f64();
                let what = if ok {
                    "answers again"
                } else {
                    "does not answer"
                };
                lines.push(format!("{t:.2}s node {} {what}", i + 1));
                up[i] = ok;
            }
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    std::fs::write(path, lines.join("\n") + "\n").expect("write ELSA_CRDT_WATCH");
}

//! Multi-node and multi-region Elsa, from the outside: real `elsa server`
//! processes on loopback (client port + peer port each, chitchat
//! membership, emulated WAN delay), driven by real Redis clients.
//!
//! What it proves (each test's module says how):
//!
//! - [`converge`]: two nodes per region, concurrent writers in every region
//!   (own keys plus shared hot keys, every acknowledged write recorded), a
//!   `kill -9` and restart of one node, and one region cut off with
//!   `ELSA.FAULT ISOLATE` and healed: the cut holds (the other regions do
//!   not see the cut region's writes), commits go on on both sides, and
//!   afterwards every node has the same `ELSA.DIGEST`, every key written by
//!   one region reads as that region's last acknowledged value on every
//!   node, and every shared key reads the same acknowledged value
//!   everywhere (last-commit-wins). Runs on 2 regions and on 4 regions ×
//!   2 nodes.
//! - [`spread`]: the isolation checker (list-append and rw-register, at SI
//!   and RR) with clients spread over both nodes of a region, so multi-key
//!   commits run the cross-node two-phase commit, shows none of the
//!   anomalies those levels forbid on one node.
//! - [`ring`]: a node killed with `kill -9` leaves the ring (members drop),
//!   nothing acknowledged and merged before is lost, writes go on; restarted,
//!   it rejoins and every node answers every key's latest value. Right
//!   after rejoining it serves no stale data (`INCR` on it loses nothing),
//!   and while it takes its slots back from the node acting for it, with
//!   clients on every node incrementing hot counters, no acknowledged
//!   increment is lost (one primary per slot at any time).
//! - [`regions`]: with `replication = 2pc` an acknowledged write is already
//!   readable in the other region; with `crdt`, `WAITREGION` returns 1 and
//!   the write is then readable there. `ELSA.FAULT ISOLATE` keeps the other
//!   region out until healed. A clock skewed ahead (`ELSA.FAULT CLOCK`)
//!   wins last-writer-wins by its stamps, and past `max-clock-drift-ms`
//!   its lattices are refused until real time reaches them.
//! - [`atomic_visibility`]: transactions committed in one region (`BEGIN
//!   SI`, `MULTI/EXEC`, `MSET`) are seen whole by readers on every node of
//!   the other region (`BEGIN SI` reads and `MGET`), never in part. The
//!   bank shape (transfers between five accounts at SI, readers of the
//!   other region's totals) still fails: ignored until fixed (issue 42).
//! - [`collection`]: a replica shut down right after a delete catches up
//!   and every node collects the deletion; a cluster killed whole and
//!   started again brings no deleted key back.
//! - [`commits`]: a multi-node commit survives the death of a participant
//!   or of its coordinator after the decision; RENAME between keys whose
//!   primaries are on different nodes is seen whole by MGET readers on the
//!   other node.
//! - [`datatypes`]: two regions of two nodes, clients on every node
//!   incrementing one counter, setting fields of one hash and adding and
//!   removing members of one set, through a `kill -9` and a region
//!   partition: afterwards every node reads the same counter — the number
//!   of acknowledged increments — every acknowledged field, and every
//!   acknowledged member not acknowledged removed.
//! - [`flush`]: FLUSHDB and FLUSHALL on one node empty the database on
//!   every node of every region, through anti-entropy rounds, restarts
//!   (`kill -9`, SIGTERM) and a node that was down during the flush; a
//!   write made after the flush survives it.
//! - [`hot_keys`]: a set or list written every 40 ms in both regions
//!   whose remove's gossip frame was lost: the other region gets the
//!   remove while the key is still written, and once the remove is
//!   collected the element does not come back.
//! - [`streams`]: clients in two regions `XADD *` to one stream at once;
//!   both regions end with every acknowledged entry, in one order, no ID
//!   taken twice.
//! - [`pipeline_replies`]: a pipeline whose writes fail (2pc, node cut off
//!   from the other region) answers exactly one reply per command, in
//!   order, and the connection stays in step (`PING` answers `PONG`).
//!
//! Every process is killed by PID when its test ends (also on panic), data
//! lives in temp dirs, and only 127.0.0.1 is used. The tests take a shared
//! lock so that only one cluster runs at a time on a small machine: the
//! failure detector would otherwise see CPU starvation as dead nodes.

mod common;

#[allow(dead_code)]
#[path = "isolation/checker.rs"]
mod checker;
#[allow(dead_code)]
#[path = "isolation/client.rs"]
mod client;
#[allow(dead_code)]
#[path = "isolation/workload.rs"]
mod workload;

#[path = "cluster/acks.rs"]
mod acks;
#[path = "cluster/atomic_visibility.rs"]
mod atomic_visibility;
#[path = "cluster/collection.rs"]
mod collection;
#[path = "cluster/commits.rs"]
mod commits;
#[path = "cluster/converge.rs"]
mod converge;
#[path = "cluster/datatypes.rs"]
mod datatypes;
#[path = "cluster/flush.rs"]
mod flush;
#[path = "cluster/hot_keys.rs"]
mod hot_keys;
#[path = "cluster/pipeline_replies.rs"]
mod pipeline_replies;
#[path = "cluster/regions.rs"]
mod regions;
#[path = "cluster/ring.rs"]
mod ring;
#[path = "cluster/shutdown.rs"]
mod shutdown;
#[path = "cluster/spread.rs"]
mod spread;
#[path = "cluster/streams.rs"]
mod streams;

use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use redis::Value;

/// One cluster at a time (see the module doc).
pub fn one_at_a_time() -> MutexGuard<'static, ()> {
    static LOCK: Mutex<()> = Mutex::new(());
    LOCK.lock().unwrap_or_else(|e| e.into_inner())
}

/// A connection to a loopback port with short timeouts, or the error.
pub fn connect(port: u16, timeout: Duration) -> redis::RedisResult<redis::Connection> {
    let client = redis::Client::open(format!("redis://127.0.0.1:{port}/"))?;
    let con = client.get_connection_with_timeout(timeout)?;
    con.set_read_timeout(Some(timeout))?;
    con.set_write_timeout(Some(timeout))?;
    Ok(con)
}

/// A bulk or status reply as text; nil as `None`.
pub fn text(v: &Value) -> Option<String> {
    match v {
        Value::Nil => None,
        Value::BulkString(b) => Some(String::from_utf8_lossy(b).into_owned()),
        Value::SimpleString(s) => Some(s.clone()),
        Value::Okay => Some("OK".into()),
        other => Some(format!("{other:?}")),
    }
}

/// `GET` of every key in `keys`, pipelined, on one connection.
pub fn get_all(con: &mut redis::Connection, keys: &[String]) -> Vec<Option<String>> {
    try_get_all(con, keys).expect("pipelined GETs")
}

/// [`get_all`], its error returned.
pub fn try_get_all(
    con: &mut redis::Connection,
    keys: &[String],
) -> redis::RedisResult<Vec<Option<String>>> {
    let mut pipe = redis::pipe();
    for k in keys {
        pipe.cmd("GET").arg(k);
    }
    let answers: Vec<Value> = pipe.query(con)?;
    Ok(answers.iter().map(text).collect())
}

/// The lines of an `INFO replication` text worth printing in a report:
/// members, lag percentiles, dropped frames, and per-peer state and
/// anti-entropy.
pub fn lag_lines(info: &str) -> String {
    info.lines()
        .filter(|l| {
            l.starts_with("members:")
                || l.starts_with("convergence_lag")
                || l.starts_with("gossip_frames_dropped")
                || l.starts_with("epochs_flushed")
                || l.starts_with("peer")
                || l.starts_with("watermark")
        })
        .map(|l| format!("    {l}"))
        .collect::<Vec<_>>()
        .join("\n")
}

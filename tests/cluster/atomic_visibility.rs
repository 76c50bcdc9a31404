//! Atomic visibility across regions (issue 12, item 13): a transaction
//! committed in one region becomes visible in another all at once.
//!
//! Region b (one node) commits, in three or two writers, transactions that write
//! one value to every key of a group: `BEGIN SI … COMMIT`, `MULTI/EXEC`
//! and a lone `MSET` whose keys spread over both shards of the writer and
//! over both nodes of region a (keys sharing a shard in b split across
//! a's nodes, and the other way round), and `MULTI/EXEC` and `EVAL` whose
//! keys share one hash slot (one shard runs the transaction whole). Readers on both nodes of
//! region a read whole groups as of one moment (`BEGIN SI` with one `GET`
//! per key, and `MGET`) and check every key of a group holds the same
//! value. Without the unit install every so often a reader sees a group
//! half updated (the issue saw x ≠ y in 2 of 6 419 snapshots).

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use redis::Value;

use crate::common::cluster::Cluster;
use crate::{one_at_a_time, text};

const GROUP: usize = 6;

/// A group's keys: spread over shards and nodes, or — for the `…1`
/// writers — all in one hash slot (one shard: the transaction runs there
/// whole, as one op).
fn group(name: &str) -> Vec<String> {
    if name.ends_with('1') {
        (0..GROUP).map(|i| format!("av:{{{name}}}:{i}")).collect()
    } else {
        (0..GROUP).map(|i| format!("av:{name}:{i}")).collect()
    }
}

/// The writers whose transactions span shards (or are one write).
const SPREAD: [&str; 3] = ["si", "multi", "mset"];
/// The writers whose transactions run on one shard: each write of a
/// `MULTI` step has its own version (they used to arrive in another region
/// split key by key: 10 torn of 747 group reads).
const ONE_SHARD: [&str; 2] = ["multi1", "eval1"];

/// One group write in region b, by `how`.
fn write_group(con: &mut redis::Connection, how: &str, keys: &[String], value: u64) -> bool {
    let v = value.to_string();
    match how {
        "si" => {
            let _: Value = redis::cmd("BEGIN").arg("SI").query(con).expect("BEGIN");
            for k in keys {
                let _: Value = redis::cmd("SET").arg(k).arg(&v).query(con).expect("SET");
            }
            matches!(redis::cmd("COMMIT").query::<Value>(con), Ok(Value::Int(_)))
        }
        "eval1" => {
            let script = "for i, k in ipairs(KEYS) do redis.call('SET', k, ARGV[1]) end return 1";
            redis::cmd("EVAL")
                .arg(script)
                .arg(keys.len())
                .arg(keys)
                .arg(&v)
                .query::<Value>(con)
                .is_ok()
        }
        "multi" | "multi1" => {
            let mut p = redis::pipe();
            p.atomic();
            for k in keys {
                p.cmd("SET").arg(k).arg(&v);
            }
            p.query::<Value>(con).is_ok()
        }
        _ => {
            let mut c = redis::cmd("MSET");
            for k in keys {
                c.arg(k).arg(&v);
            }
            c.query::<Value>(con).is_ok()
        }
    }
}

/// One group read in region a, by `how`; the values seen.
fn read_group(
    con: &mut redis::Connection,
    how: &str,
    keys: &[String],
) -> Option<Vec<Option<String>>> {
    match how {
        "si" => {
            let _: Value = redis::cmd("BEGIN").arg("SI").query(con).ok()?;
            let mut seen = Vec::new();
            for k in keys {
                let v: Value = redis::cmd("GET").arg(k).query(con).ok()?;
                seen.push(text(&v));
            }
            let committed: Value = redis::cmd("COMMIT").query(con).ok()?;
            matches!(committed, Value::Int(_)).then_some(seen)
        }
        _ => {
            let v: Vec<Value> = redis::cmd("MGET").arg(keys).query(con).ok()?;
            Some(v.iter().map(text).collect())
        }
    }
}

fn field(info: &str, name: &str) -> String {
    info.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(':'))
        .unwrap_or("?")
        .trim()
        .to_string()
}

#[test]
fn a_remote_transaction_is_visible_all_at_once() {
    visible_all_at_once(&SPREAD);
}

#[test]
fn a_remote_one_shard_transaction_is_visible_all_at_once() {
    visible_all_at_once(&ONE_SHARD);
}

fn visible_all_at_once(hows: &'static [&'static str]) {
    let _one = one_at_a_time();
    let started = Instant::now();
    let c = Arc::new(Cluster::start(&["a", "a", "b"], &["--wan-delay-ms", "10"]));
    let run = Duration::from_secs(crate::common::env_or("ELSA_AV_SECS", 8));
    let stop = Arc::new(AtomicBool::new(false));
    let commits = Arc::new(AtomicUsize::new(0));

    let mut writers = Vec::new();
    for &how in hows {
        let (c, stop, commits) = (c.clone(), stop.clone(), commits.clone());
        writers.push(std::thread::spawn(move || {
            let mut con = c.conn(2);
            let keys = group(how);
            let mut i = 0;
            while !stop.load(Ordering::Relaxed) {
                i += 1;
                if write_group(&mut con, how, &keys, i) {
                    commits.fetch_add(1, Ordering::Relaxed);
                }
            }
        }));
    }
    let reads = Arc::new(AtomicUsize::new(0));
    let mut readers = Vec::new();
    for node in [0, 1] {
        for read_how in ["si", "mget"] {
            let (c, stop, reads) = (c.clone(), stop.clone(), reads.clone());
            readers.push(std::thread::spawn(move || {
                let mut con = c.conn(node);
                let (mut snapshots, mut torn) = (0usize, Vec::new());
                while !stop.load(Ordering::Relaxed) {
                    for &how in hows {
                        let Some(seen) = read_group(&mut con, read_how, &group(how)) else {
                            continue;
                        };
                        snapshots += 1;
                        reads.fetch_add(1, Ordering::Relaxed);
                        if seen.iter().any(|v| *v != seen[0]) && torn.len() < 5 {
                            torn.push(format!(
                                "node {node} {read_how} read of the {how} group: {seen:?}"
                            ));
                        }
                    }
                }
                (snapshots, torn)
            }));
        }
    }
    std::thread::sleep(run);
    // A loaded machine runs fewer: go on until both sides did enough to
    // mean something (or a minute passed; the asserts below then say so).
    let enough = Instant::now() + Duration::from_secs(60);
    while (commits.load(Ordering::Relaxed) <= 100 || reads.load(Ordering::Relaxed) <= 100)
        && Instant::now() < enough
    {
        std::thread::sleep(Duration::from_millis(200));
    }
    stop.store(true, Ordering::Relaxed);
    for w in writers {
        w.join().expect("writer");
    }
    let (mut snapshots, mut torn) = (0, Vec::new());
    for r in readers {
        let (n, t) = r.join().expect("reader");
        snapshots += n;
        torn.extend(t);
    }
    // Everything arrives in the end, whole.
    let all: Vec<usize> = (0..c.len()).collect();
    c.wait_same_digest(&all, Duration::from_secs(30));
    let commits = commits.load(Ordering::Relaxed);
    let alone: Vec<String> = [0, 1]
        .iter()
        .map(|&i| field(&c.info(i, "gossip"), "remote_parts_shown_alone"))
        .collect();
    eprintln!(
        "atomic visibility: {commits} group commits in b, {snapshots} group reads in a, {} torn, parts shown alone {alone:?}, {:.1?}",
        torn.len(),
        started.elapsed()
    );
    assert!(commits > 100, "only {commits} commits in b");
    assert!(
        snapshots > 100,
        "only {snapshots} reads in a; node 1's log:\n{}",
        c.log_tail(0, 20)
    );
    assert!(
        torn.is_empty(),
        "readers in region a saw part of a region-b transaction:\n{}",
        torn.join("\n")
    );
}

/// Accounts of one region, 100 each.
const ACCOUNTS: usize = 5;

fn accounts(region: &str) -> Vec<String> {
    (0..ACCOUNTS)
        .map(|i| format!("bank:{region}:{i}"))
        .collect()
}

/// One transfer between two of `keys` at SI; true if it committed.
fn transfer(con: &mut redis::Connection, keys: &[String], from: usize, to: usize, n: i64) -> bool {
    let num = |v: &Value| text(v).and_then(|s| s.parse::<i64>().ok()).unwrap_or(0);
    let Ok(Value::Okay) = redis::cmd("BEGIN").arg("SI").query::<Value>(con) else {
        return false;
    };
    let a = redis::cmd("GET").arg(&keys[from]).query::<Value>(con);
    let b = redis::cmd("GET").arg(&keys[to]).query::<Value>(con);
    let (Ok(a), Ok(b)) = (a, b) else {
        let _ = redis::cmd("ABORT").query::<Value>(con);
        return false;
    };
    let _: Result<Value, _> = redis::cmd("SET")
        .arg(&keys[from])
        .arg(num(&a) - n)
        .query(con);
    let _: Result<Value, _> = redis::cmd("SET").arg(&keys[to]).arg(num(&b) + n).query(con);
    matches!(redis::cmd("COMMIT").query::<Value>(con), Ok(Value::Int(_)))
}

/// Issue 42: in two regions of two nodes, each region transferring
/// between its own five accounts (`BEGIN SI`, two keys at a time, many
/// writers), readers in the other region (`BEGIN SI`, all five, `COMMIT`)
/// saw sums other than the total in 84 of 299 snapshots — a transfer
/// reads what an earlier one wrote, and installed before it, the later
/// transfer's half showed the earlier one's effect without its other half.
///
/// Failed before each key's primary checked the order of installs
/// (`Expect::InOrder`, `elsa_shard`'s `shard/parts.rs`): 20 of 5,928
/// remote snapshots wrong in 10 s, e.g. `[100, 120, 100, 100, 100]` —
/// another region's transactions were installed in the order their
/// records and frames arrived, so a transfer that read an earlier one's
/// write could show before it.
#[test]
fn transfers_of_another_region_never_show_a_wrong_total() {
    let _one = one_at_a_time();
    let started = Instant::now();
    let c = Arc::new(Cluster::start(&["a", "a", "b", "b"], &[]));
    let regions = [("a", [0usize, 1]), ("b", [2, 3])];
    for (r, nodes) in regions {
        let mut con = c.conn(nodes[0]);
        let mut mset = redis::cmd("MSET");
        for k in accounts(r) {
            mset.arg(k).arg(100);
        }
        let _: Value = mset.query(&mut con).expect("MSET");
    }
    // Every node sees both regions' opening balances.
    for i in 0..c.len() {
        let mut con = c.conn(i);
        let deadline = Instant::now() + Duration::from_secs(30);
        for r in ["a", "b"] {
            loop {
                let v: Vec<Value> = redis::cmd("MGET").arg(accounts(r)).query(&mut con).unwrap();
                if v.iter().all(|v| text(v).as_deref() == Some("100")) {
                    break;
                }
                assert!(
                    Instant::now() < deadline,
                    "node {i} never saw region {r}'s accounts"
                );
                std::thread::sleep(Duration::from_millis(50));
            }
        }
    }
    let run = Duration::from_secs(crate::common::env_or("ELSA_AV_SECS", 8));
    let stop = Arc::new(AtomicBool::new(false));
    let commits = Arc::new(AtomicUsize::new(0));
    let read_total = Arc::new(AtomicUsize::new(0));
    let mut threads = Vec::new();
    for (r, nodes) in regions {
        for node in nodes {
            for w in 0..2u64 {
                let (c, stop, commits) = (c.clone(), stop.clone(), commits.clone());
                threads.push(std::thread::spawn(move || {
                    let mut con = c.conn(node);
                    let keys = accounts(r);
                    let mut i = w * 7 + node as u64;
                    while !stop.load(Ordering::Relaxed) {
                        i = i
                            .wrapping_mul(6364136223846793005)
                            .wrapping_add(1442695040888963407);
                        let from = (i >> 33) as usize % ACCOUNTS;
                        let to = (from + 1 + (i >> 40) as usize % (ACCOUNTS - 1)) % ACCOUNTS;
                        if transfer(&mut con, &keys, from, to, 1 + (i >> 50) as i64 % 10) {
                            commits.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                    (0usize, Vec::<String>::new())
                }));
            }
        }
    }
    // Readers on every node, of the other region's accounts.
    for (other, nodes) in [("b", [0usize, 1]), ("a", [2, 3])] {
        for node in nodes {
            let (c, stop, read_total) = (c.clone(), stop.clone(), read_total.clone());
            threads.push(std::thread::spawn(move || {
                let mut con = c.conn(node);
                let keys = accounts(other);
                let (mut snapshots, mut wrong) = (0usize, Vec::new());
                while !stop.load(Ordering::Relaxed) {
                    let Some(seen) = read_group(&mut con, "si", &keys) else {
                        continue;
                    };
                    snapshots += 1;
                    read_total.fetch_add(1, Ordering::Relaxed);
                    let values: Vec<i64> = seen
                        .iter()
                        .map(|v| v.as_deref().and_then(|s| s.parse().ok()).unwrap_or(-1))
                        .collect();
                    let sum: i64 = values.iter().sum();
                    if sum != 100 * ACCOUNTS as i64 && wrong.len() < 5 {
                        wrong.push(format!(
                            "node {node} read region {other}'s accounts as {values:?} (sum {sum}) at {:.1?}",
                            started.elapsed()
                        ));
                    }
                }
                (snapshots, wrong)
            }));
        }
    }
    std::thread::sleep(run);
    // A slow build (debug, a loaded machine) runs on until the history is
    // long enough to mean something. Readers of the other region commit
    // about two snapshots a second here: most end in CONFLICT, since a
    // read-only snapshot validates at COMMIT on a node with peers and the
    // other region's transfers keep landing on the five accounts
    // (`docs/regions.md`, *Known problems*) — so up to three minutes.
    let until = Instant::now() + Duration::from_secs(180);
    while (commits.load(Ordering::Relaxed) <= 100 || read_total.load(Ordering::Relaxed) <= 100)
        && Instant::now() < until
    {
        std::thread::sleep(Duration::from_millis(200));
    }
    stop.store(true, Ordering::Relaxed);
    let (mut snapshots, mut wrong) = (0, Vec::new());
    for t in threads {
        let (n, w) = t.join().expect("a client thread");
        snapshots += n;
        wrong.extend(w);
    }
    let commits = commits.load(Ordering::Relaxed);
    eprintln!(
        "bank across regions: {commits} transfers, {snapshots} remote snapshots, {} with a wrong total (first 5 per reader), {:.1?}",
        wrong.len(),
        started.elapsed()
    );
    assert!(commits > 100, "only {commits} transfers");
    assert!(snapshots > 100, "only {snapshots} remote snapshots");
    assert!(
        wrong.is_empty(),
        "readers saw another region's transfers in part:\n{}",
        wrong.join("\n")
    );
    // And the totals hold everywhere once converged.
    let all: Vec<usize> = (0..c.len()).collect();
    c.wait_same_digest(&all, Duration::from_secs(30));
    for i in 0..c.len() {
        let mut con = c.conn(i);
        for r in ["a", "b"] {
            let v: Vec<Value> = redis::cmd("MGET").arg(accounts(r)).query(&mut con).unwrap();
            let sum: i64 = v.iter().filter_map(|v| text(v)?.parse::<i64>().ok()).sum();
            assert_eq!(
                sum,
                100 * ACCOUNTS as i64,
                "node {i}, region {r}'s accounts"
            );
        }
    }
}

/// An install of another region's transaction that spans both nodes of
/// the region goes in on one node and is refused on the other
/// (`ELSA.FAULT REFUSE-REMOTE-INSTALLS`: a node whose region does not
/// confirm it, or an installer killed between its shards' installs). The
/// part that went in stays held — readers wait — until the rest is in.
/// Before, the orphan resolver of the node holding it found no record for
/// the installer's transaction after 3 s and released the holds: readers
/// there saw `x` new and `y` old for as long as the fault lasted (the
/// nemesis of `tests/nemesis_regions.rs` saw it as a bank off its total,
/// about 1 run in 7 with random seeds).
#[test]
fn an_install_refused_on_one_node_shows_nothing_until_whole() {
    let _one = one_at_a_time();
    let c = Cluster::start(&["a", "a", "b"], &[]);
    // x served by node 0, y by node 1, in region a.
    let pick = |want: usize, prefix: &str| {
        (0..1000)
            .map(|n| format!("{prefix}{n}"))
            .find(|k| crate::commits::owner(&c, 0, k) == want)
            .expect("a key the node serves")
    };
    let (x, y) = (pick(0, "hx:"), pick(1, "hy:"));
    let mset = |v: u32| {
        let mut con = c.conn(2);
        let _: Value = redis::cmd("MSET")
            .arg(&x)
            .arg(v)
            .arg(&y)
            .arg(v)
            .query(&mut con)
            .expect("MSET");
    };
    let read = |i: usize| -> Option<(Option<String>, Option<String>)> {
        let mut con = c.conn(i);
        con.set_read_timeout(Some(Duration::from_secs(2))).ok()?;
        let v: Vec<Value> = redis::cmd("MGET").arg(&x).arg(&y).query(&mut con).ok()?;
        Some((text(&v[0]), text(&v[1])))
    };
    let wait_for = |v: &str| {
        let until = Instant::now() + Duration::from_secs(30);
        let want = Some((Some(v.to_string()), Some(v.to_string())));
        while [0, 1].iter().any(|&i| read(i) != want) {
            assert!(
                Instant::now() < until,
                "region a never read {v}: {:?}",
                read(0)
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    };
    mset(1);
    wait_for("1");
    c.fault(1, "REFUSE-REMOTE-INSTALLS");
    mset(2);
    // Past the orphan resolver's 3 s, twice over.
    let (until, mut torn, mut reads) = (Instant::now() + Duration::from_secs(7), Vec::new(), 0);
    while Instant::now() < until {
        for i in [0, 1] {
            if let Some((a, b)) = read(i) {
                reads += 1;
                if a != b && torn.len() < 5 {
                    torn.push(format!("node {i} read {x} = {a:?}, {y} = {b:?}"));
                }
            }
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    c.fault(1, "HEAL");
    wait_for("2");
    eprintln!(
        "{reads} reads while node 1 refused the install, {} torn",
        torn.len()
    );
    assert!(
        torn.is_empty(),
        "region a showed part of a transaction:\n{}",
        torn.join("\n")
    );
}

/// The pause case of `docs/regions.md` (*A new primary owes what the old
/// one's streams still carried*): region a's node 1, primary of `{g}a` and
/// `{g}b` (one slot), is cut off from region b, commits T1 (`MULTI; SET
/// {g}a 1; SET {g}b 1; EXEC`, one shard: it travels whole in that shard's
/// stream) and then T2 (`SET {g}b 2`), and is killed with both still in its
/// stream to b. The slot's new primary in a has both (ack level `region`);
/// what it ships b of them must come in commit order, so that b shows only
/// states a went through: `[0, 0]`, `[1, 1]`, `[1, 2]`. Before, the new
/// primary shipped the keys' latest states only (anti-entropy): b got
/// `{g}a` as a part of T1 without the rest of T1 (its `{g}b` was
/// overwritten) and `{g}b = 2` as a lone write, and showed `[0, 2]` until
/// `PART_WAIT` let the part show alone.
#[test]
fn a_new_primary_ships_what_the_old_ones_stream_still_carried() {
    let _one = one_at_a_time();
    let mut c = Cluster::start(&["a", "a", "a", "b"], &[]);
    let tag = (0..2000)
        .map(|i| format!("{{g{i}}}"))
        .find(|t| crate::commits::owner(&c, 0, t) == 1)
        .expect("a slot node 1 serves");
    let keys = [format!("{tag}a"), format!("{tag}b")];
    let read_b = |c: &Cluster| -> Option<Vec<u32>> {
        let mut con = c.conn(3);
        con.set_read_timeout(Some(Duration::from_secs(2))).ok()?;
        let v: Vec<Value> = redis::cmd("MGET").arg(&keys).query(&mut con).ok()?;
        Some(
            v.iter()
                .map(|v| text(v).and_then(|s| s.parse().ok()).unwrap_or(99))
                .collect(),
        )
    };
    {
        let mut con = c.conn(1);
        let _: Value = redis::cmd("MSET")
            .arg(&keys[0])
            .arg(0)
            .arg(&keys[1])
            .arg(0)
            .query(&mut con)
            .expect("MSET");
    }
    let start = Instant::now();
    while read_b(&c) != Some(vec![0, 0]) {
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "b never read the opening values"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    c.fault(1, "ISOLATE");
    {
        let mut con = c.conn(1);
        let mut p = redis::pipe();
        p.atomic()
            .cmd("SET")
            .arg(&keys[0])
            .arg(1)
            .cmd("SET")
            .arg(&keys[1])
            .arg(1);
        let _: Value = p.query(&mut con).expect("MULTI");
        let _: Value = redis::cmd("SET")
            .arg(&keys[1])
            .arg(2)
            .query(&mut con)
            .expect("SET");
    }
    c.kill9(1);
    let states = [vec![0, 0], vec![1, 1], vec![1, 2]];
    let (start, mut wrong, mut reads, mut last) = (Instant::now(), Vec::new(), 0, None);
    while start.elapsed() < Duration::from_secs(40) {
        if let Some(v) = read_b(&c) {
            reads += 1;
            if !states.contains(&v) && wrong.len() < 5 {
                wrong.push(format!("{:.1?}: b read {v:?}", start.elapsed()));
            }
            let done = v == states[2];
            last = Some(v);
            if done {
                break;
            }
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    eprintln!(
        "{reads} reads in b after node 1 was killed; last {last:?} at {:.1?}",
        start.elapsed()
    );
    assert!(
        wrong.is_empty(),
        "region b showed a state region a never had (keys {keys:?}):\n{}",
        wrong.join("\n")
    );
    assert_eq!(
        last.as_ref(),
        Some(&states[2]),
        "b never read T2 (before PART_WAIT)"
    );
}

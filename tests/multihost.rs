//! A cluster on several hosts (network namespaces on one bridge, see
//! `tests/common/hosts.rs`), seeded by host name, peers over TLS with a
//! cluster secret: a node joins while a writer writes, another is
//! decommissioned while it still writes, and an nftables partition
//! between the regions is healed — checked by reading every acknowledged
//! write back from every node and by equal `ELSA.DIGEST`s.
//!
//! Topology: region `a` on h1 and h2, region `b` on h3; h4 joins `a`,
//! then h2 is decommissioned. Two nodes in `a` with two replicas per
//! region (the default) is the smallest region where a join moves slots
//! (h4 takes a third of them as primary) and a decommission must stream
//! data (each of h2's slots gains a replica on a node that lacked it);
//! `b` on its own host is what the partition cuts off, each side still
//! accepting writes.

mod common;

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::hosts::Hosts;

const H1: usize = 0;
const H2: usize = 1;
const H3: usize = 2;
const H4: usize = 3;

/// What the writer got acknowledged.
#[derive(Default)]
struct Acked {
    /// `SET j:<n> <n>` answered OK.
    keys: Vec<u64>,
    /// `INCR jc` answered (ok) or failed (outcome unknown).
    incr_ok: i64,
    incr_unknown: i64,
    /// `SADD js <n>` answered.
    members: Vec<u64>,
}

/// Writes on host `i` until `stop`: a new key, an increment and a set
/// member per step, recording what was acknowledged. Errors (a retry that
/// ran out while primaries moved) are outcomes unknown, never counted as
/// acknowledged; there must be few of them.
fn writer(
    hosts: &Hosts,
    i: usize,
    stop: Arc<AtomicBool>,
    acked: Arc<Mutex<Acked>>,
) -> std::thread::JoinHandle<u64> {
    let mut conn = Some(hosts.conn(i));
    let ns = hosts.hosts[i].ns.clone();
    let addr = hosts.hosts[i].addr;
    std::thread::spawn(move || {
        let mut errors = 0u64;
        let mut n = 0u64;
        while !stop.load(Ordering::Relaxed) {
            let c = match conn.as_mut() {
                Some(c) => c,
                None => {
                    let url = common::hosts::url(addr);
                    let ns = ns.clone();
                    match common::hosts::in_netns(&ns, move || {
                        redis::Client::open(url).and_then(|c| c.get_connection())
                    }) {
                        Ok(c) => conn.insert(c),
                        Err(_) => {
                            std::thread::sleep(Duration::from_millis(100));
                            continue;
                        }
                    }
                }
            };
            n += 1;
            // One step under the lock: a check reading back (which holds
            // it) never sees an increment whose answer is not yet noted.
            let mut a = acked.lock().unwrap();
            let set: redis::RedisResult<()> =
                redis::cmd("SET").arg(format!("j:{n}")).arg(n).query(c);
            let incr: redis::RedisResult<i64> = redis::cmd("INCR").arg("jc").query(c);
            let sadd: redis::RedisResult<i64> = redis::cmd("SADD").arg("js").arg(n).query(c);
            match set {
                Ok(()) => a.keys.push(n),
                Err(_) => errors += 1,
            }
            match incr {
                Ok(_) => a.incr_ok += 1,
                Err(_) => {
                    errors += 1;
                    a.incr_unknown += 1
                }
            }
            match sadd {
                Ok(_) => a.members.push(n),
                Err(e) => {
                    errors += 1;
                    if e.is_io_error() || e.is_connection_dropped() {
                        conn = None;
                    }
                }
            }
            drop(a);
            // Let the checks in between steps.
            std::thread::yield_now();
        }
        errors
    })
}

/// Asserts every acknowledged write becomes readable on host `i`. A host
/// of the writer's region has them at once; one of another region within
/// a few merge epochs (regions converge asynchronously), so a missing write
/// is looked for again for up to 30 s before it counts as lost.
fn check_reads(hosts: &Hosts, i: usize, acked: &Acked, what: &str) {
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            reads_now(hosts, i, acked, what)
        }));
        match outcome {
            Ok(()) => return,
            Err(e) if std::time::Instant::now() >= deadline => std::panic::resume_unwind(e),
            Err(_) => std::thread::sleep(Duration::from_millis(200)),
        }
    }
}

/// [`check_reads`], once.
fn reads_now(hosts: &Hosts, i: usize, acked: &Acked, what: &str) {
    let mut c = hosts.conn(i);
    for chunk in acked.keys.chunks(500) {
        let keys: Vec<String> = chunk.iter().map(|n| format!("j:{n}")).collect();
        let got: Vec<Option<u64>> = redis::cmd("MGET").arg(&keys).query(&mut c).unwrap();
        for (n, v) in chunk.iter().zip(got) {
            assert_eq!(v, Some(*n), "{what}: j:{n} on {} lost", hosts.hosts[i].name);
        }
    }
    let jc: i64 = redis::cmd("GET").arg("jc").query(&mut c).unwrap();
    assert!(
        jc >= acked.incr_ok && jc <= acked.incr_ok + acked.incr_unknown,
        "{what}: jc = {jc} on {}, acknowledged {} (+{} unknown)",
        hosts.hosts[i].name,
        acked.incr_ok,
        acked.incr_unknown
    );
    let members: BTreeSet<u64> = redis::cmd("SMEMBERS").arg("js").query(&mut c).unwrap();
    let missing: Vec<&u64> = acked
        .members
        .iter()
        .filter(|m| !members.contains(m))
        .collect();
    assert!(
        missing.is_empty(),
        "{what}: js on {} lacks {missing:?}",
        hosts.hosts[i].name
    );
}

/// The keys `j:*` node `i` holds itself (KEYS is per node, as in Redis
/// Cluster).
fn local_keys(hosts: &Hosts, i: usize) -> BTreeSet<u64> {
    let keys: Vec<String> = hosts.query(i, redis::cmd("KEYS").arg("j:*"));
    keys.iter()
        .filter_map(|k| k.strip_prefix("j:")?.parse().ok())
        .collect()
}

/// Waits until the `slots_primary` of a region's nodes, each by its own
/// view, add up to every slot. A node that has just started serving
/// counts its slots from its next membership tick (its own entry in its
/// view changes then), so one reading can come up short for a moment.
fn wait_one_primary_per_slot(hosts: &Hosts, region: &[usize]) -> Vec<i64> {
    let mut primaries = Vec::new();
    hosts.wait_until(
        region[0],
        "the region's nodes are primaries of every slot once",
        Duration::from_secs(60),
        || {
            primaries = region
                .iter()
                .map(|&i| field(hosts, i, "slots_primary"))
                .collect();
            primaries.iter().sum::<i64>() == 65536
        },
    );
    primaries
}

fn field(hosts: &Hosts, i: usize, name: &str) -> i64 {
    hosts
        .replication_field(i, name)
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| {
            panic!(
                "INFO replication of {} has no numeric {name}",
                hosts.hosts[i].name
            )
        })
}

/// The metrics port of h1 and h2.
const METRICS_PORT: &str = "9100";

/// `GET path` on host `i`'s metrics port, from inside its namespace.
fn http_get(hosts: &Hosts, i: usize, path: &str) -> String {
    let url = format!("http://{}:{METRICS_PORT}{path}", hosts.hosts[i].addr);
    common::hosts::in_netns(&hosts.hosts[i].ns, move || {
        ureq::get(&url)
            .call()
            .unwrap_or_else(|e| panic!("GET {url}: {e}"))
            .into_string()
            .expect("body")
    })
}

/// Host `i`'s `/status.json`.
fn status_json(hosts: &Hosts, i: usize) -> serde_json::Value {
    serde_json::from_str(&http_get(hosts, i, "/status.json")).expect("status.json")
}

#[test]
fn join_decommission_and_partition_across_hosts() {
    let mut hosts = Hosts::new("mh", 4);
    let long = Duration::from_secs(60);
    // Every node seeded by host name with the others (not with itself).
    // h1 and h2 serve the metrics port (status page, /metrics) on their
    // own addresses: the decommission shows there too.
    hosts.start(H1, "a", 1, &[H2, H3], &["--metrics-port", METRICS_PORT]);
    hosts.start(H2, "a", 2, &[H1, H3], &["--metrics-port", METRICS_PORT]);
    hosts.start(H3, "b", 3, &[H1, H2], &[]);
    hosts.wait_settled(&[H1, H2, H3], 3, long);
    for i in [H1, H2, H3] {
        assert_eq!(
            hosts.replication_field(i, "peer_links").as_deref(),
            Some("tls")
        );
    }
    // A region formed by host-name seeds has one primary per slot.
    wait_one_primary_per_slot(&hosts, &[H1, H2]);

    // Join: h4 enters region a while a writer on h1 writes.
    let stop = Arc::new(AtomicBool::new(false));
    let acked = Arc::new(Mutex::new(Acked::default()));
    let w = writer(&hosts, H1, stop.clone(), acked.clone());
    hosts.wait_until(H1, "the writer got 200 writes in", long, || {
        acked.lock().unwrap().keys.len() >= 200
    });
    hosts.start(H4, "a", 4, &[H1], &[]);
    hosts.wait_settled(&[H1, H2, H3, H4], 4, long);
    let before_join = acked.lock().unwrap().keys.len();
    hosts.wait_until(H1, "the writer went on after the join", long, || {
        acked.lock().unwrap().keys.len() >= before_join + 200
    });
    // h4 serves its share as primary, by every region-a node's view.
    let primaries = wait_one_primary_per_slot(&hosts, &[H1, H2, H4]);
    assert!(
        primaries[2] > 65536 / 6,
        "h4 is primary of {} slots only",
        primaries[2]
    );
    assert!(field(&hosts, H4, "slots_replica") > 65536 / 2);
    assert_eq!(
        hosts.replication_field(H4, "catching_up").as_deref(),
        Some("0")
    );
    // Data streamed to it: it holds its slots' keys written before it came.
    let on_h4 = local_keys(&hosts, H4);
    assert!(
        on_h4.iter().any(|&n| n <= 200),
        "h4 holds none of the keys written before it joined"
    );
    {
        let a = acked.lock().unwrap();
        for i in [H1, H2, H3, H4] {
            check_reads(&hosts, i, &a, "after the join");
        }
    }

    // Decommission h2 while the writer goes on.
    let before = acked.lock().unwrap().keys.len();
    // The operator's way: `elsa cluster decommission`, run on h1 and
    // naming h2 by host name; it returns once h2 reports `done`.
    let out = hosts.elsa(
        H1,
        &[
            "cluster",
            "decommission",
            "--node",
            "h2:6379",
            "--password",
            common::hosts::PASSWORD,
            "--timeout-secs",
            "120",
        ],
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "elsa cluster decommission: {}\n{stdout}{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("h2:6379: draining"), "{stdout}");
    assert!(stdout.contains("h2:6379: done"), "{stdout}");
    assert_eq!(
        hosts.replication_field(H2, "decommission").as_deref(),
        Some("done")
    );
    assert_eq!(field(&hosts, H2, "slots_primary"), 0);
    assert_eq!(field(&hosts, H2, "decommission_slots_remaining"), 0);
    // The status page's data and /metrics say the same: h2 done, and h1
    // lists h2 as leaving, with no slot.
    let h2_status = status_json(&hosts, H2);
    assert_eq!(h2_status["cluster"]["decommission"]["phase"], "done");
    assert_eq!(h2_status["cluster"]["decommission"]["slots_remaining"], 0);
    let h1_status = status_json(&hosts, H1);
    let h2_seen: Vec<&serde_json::Value> = h1_status["cluster"]["regions"]
        .as_array()
        .expect("regions")
        .iter()
        .flat_map(|r| r["nodes"].as_array().expect("nodes").iter())
        .filter(|n| n["node"] == 2)
        .collect();
    assert_eq!(h2_seen.len(), 1, "{h1_status}");
    assert_eq!(h2_seen[0]["leaving"], true, "{h1_status}");
    assert_eq!(h2_seen[0]["slots_primary"], 0, "{h1_status}");
    let h2_metrics = http_get(&hosts, H2, "/metrics");
    assert!(
        h2_metrics.contains("elsa_decommission_phase{phase=\"done\"} 1"),
        "{h2_metrics}"
    );
    // Its slots have their replicas back: with two replicas and two nodes
    // left, h1 and h4 each hold every key acknowledged so far.
    let done_at: Vec<u64> = acked.lock().unwrap().keys.clone();
    assert!(
        done_at.len() > before,
        "the writer stalled during the decommission"
    );
    for i in [H1, H4] {
        let local = local_keys(&hosts, i);
        let missing: Vec<&u64> = done_at.iter().filter(|n| !local.contains(n)).collect();
        assert!(
            missing.is_empty(),
            "{} lacks {} acknowledged keys after the drain, e.g. {:?}",
            hosts.hosts[i].name,
            missing.len(),
            &missing[..missing.len().min(5)]
        );
    }
    let status = hosts.stop(H2);
    assert!(status.success(), "h2 exited with {status}");
    let n = acked.lock().unwrap().keys.len();
    hosts.wait_until(H1, "the writer went on after h2 left", long, || {
        acked.lock().unwrap().keys.len() >= n + 200
    });
    hosts.wait_settled(&[H1, H3, H4], 3, long);
    wait_one_primary_per_slot(&hosts, &[H1, H4]);
    stop.store(true, Ordering::Relaxed);
    let errors = w.join().expect("writer");
    let total = acked.lock().unwrap().keys.len();
    assert!(
        errors * 20 < total as u64,
        "{errors} writes failed of {total}"
    );
    {
        let a = acked.lock().unwrap();
        for i in [H1, H3, H4] {
            check_reads(&hosts, i, &a, "after the decommission");
        }
    }
    hosts.wait_same_digest(&[H1, H3, H4], long);

    // Partition region a (h1, h4) from region b (h3) with nftables.
    hosts.cut(&[H1, H4], &[H3]);
    hosts.wait_until(H3, "h3 sees itself alone", long, || {
        field(&hosts, H3, "members") == 1
    });
    hosts.wait_until(H1, "h1 sees h3 gone", long, || {
        field(&hosts, H1, "members") == 2
    });
    let per_side = 50;
    for (i, side) in [(H1, "a"), (H4, "a"), (H3, "b")] {
        let mut c = hosts.conn(i);
        for k in 0..per_side {
            let _: i64 = redis::cmd("INCR").arg("pc").query(&mut c).unwrap();
            let _: i64 = redis::cmd("SADD")
                .arg("ps")
                .arg(format!("{side}{i}-{k}"))
                .query(&mut c)
                .unwrap();
            let _: () = redis::cmd("SET")
                .arg(format!("p:{side}{i}-{k}"))
                .arg(k)
                .query(&mut c)
                .unwrap();
        }
    }
    // Each side sees only its own writes while cut.
    let b_view: i64 = hosts.query(H3, redis::cmd("SCARD").arg("ps"));
    assert_eq!(
        b_view, per_side as i64,
        "h3 saw region a's members during the partition"
    );
    let a_view: i64 = hosts.query(H1, redis::cmd("GET").arg("pc"));
    assert_eq!(
        a_view,
        2 * per_side as i64,
        "h1 saw region b's increments during the partition"
    );
    hosts.heal();
    hosts.wait_settled(&[H1, H3, H4], 3, long);
    hosts.wait_same_digest(&[H1, H3, H4], long);
    for i in [H1, H3, H4] {
        let pc: i64 = hosts.query(i, redis::cmd("GET").arg("pc"));
        assert_eq!(
            pc,
            3 * per_side as i64,
            "increments merged on {}",
            hosts.hosts[i].name
        );
        let ps: BTreeSet<String> = hosts.query(i, redis::cmd("SMEMBERS").arg("ps"));
        assert_eq!(
            ps.len(),
            3 * per_side,
            "set members merged on {}",
            hosts.hosts[i].name
        );
        let mut c = hosts.conn(i);
        for (j, side) in [(H1, "a"), (H4, "a"), (H3, "b")] {
            for k in 0..per_side {
                let v: Option<u64> = redis::cmd("GET")
                    .arg(format!("p:{side}{j}-{k}"))
                    .query(&mut c)
                    .unwrap();
                assert_eq!(
                    v,
                    Some(k as u64),
                    "p:{side}{j}-{k} on {}",
                    hosts.hosts[i].name
                );
            }
        }
        check_reads(&hosts, i, &acked.lock().unwrap(), "after the partition");
    }
}

/// ELSA.DECOMMISSION is refused where nothing could take the node's
/// slots: a node without peers, the last node of its region (on
/// loopback: no namespaces needed). Nothing changes on the node.
#[test]
fn decommission_is_refused_where_no_node_could_take_the_slots() {
    let alone = common::Elsa::start(&[]);
    let err = redis::cmd("ELSA.DECOMMISSION")
        .query::<String>(&mut alone.conn())
        .unwrap_err();
    assert_eq!(err.code(), Some("ERR"), "{err}");
    assert_eq!(err.detail(), Some("this node has no peers"), "{err}");
    let c = common::cluster::Cluster::start(&["a", "b"], &[]);
    let err = redis::cmd("ELSA.DECOMMISSION")
        .query::<String>(&mut c.conn(0))
        .unwrap_err();
    assert_eq!(err.code(), Some("ERR"), "{err}");
    assert_eq!(
        err.detail(),
        Some("this node is the last ready node of region a: no node could take its slots"),
        "{err}"
    );
    assert_eq!(
        c.replication_field(0, "decommission").as_deref(),
        Some("none")
    );
    assert_eq!(
        c.replication_field(0, "slots_primary").as_deref(),
        Some("65536")
    );
}

/// Two fresh nodes of a new region, each seeded with the other by host
/// name: the region forms once each has seen the other, and one of them
/// goes first — so the first `INCR`s on both count, 1 then 2. (A seed
/// given by name used to count as seen at once: each node, alone in its
/// first view, went first and served every slot, and both answered 1.)
#[test]
fn a_region_seeded_by_host_names_forms_with_one_primary_per_slot() {
    let mut hosts = Hosts::new("form", 2);
    hosts.start(H1, "a", 1, &[H2], &[]);
    hosts.start(H2, "a", 2, &[H1], &[]);
    // Right after both answer PING, before the region may have formed.
    let incr = |i: usize| {
        let mut c = hosts.conn(i);
        std::thread::spawn(move || {
            redis::cmd("INCR")
                .arg("first")
                .query::<i64>(&mut c)
                .unwrap()
        })
    };
    let (a, b) = (incr(H2), incr(H1));
    let mut got = vec![a.join().unwrap(), b.join().unwrap()];
    got.sort();
    assert_eq!(got, vec![1, 2], "both nodes served the key as its primary");
    hosts.wait_settled(&[H1, H2], 2, Duration::from_secs(60));
    wait_one_primary_per_slot(&hosts, &[H1, H2]);
}

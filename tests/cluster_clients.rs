//! Redis Cluster clients (docs/commands.md, *Cluster clients*): every
//! key's slot is Redis's (`CLUSTER KEYSLOT`, hash tags included, checked
//! against a real redis-server in cluster mode); CLUSTER SLOTS/SHARDS/NODES
//! give each slot to the worker that keeps it, on its own port
//! (`worker-port-base`); a command sent there runs on that worker without
//! a message to another thread (`inbox_messages`); a real cluster client
//! (the `redis` crate's) reads and writes through the map; and any port
//! still serves any key.

mod common;

use std::collections::HashMap;

use common::redis_server::RedisServer;
use common::{cluster_slots as slots, slot_owner_port as owner_port, Elsa};
use rand::{Rng, SeedableRng};

/// A random key, often with a hash tag (possibly empty or unclosed, as
/// Redis's rules for those are part of what is compared).
fn random_key(rng: &mut rand::rngs::StdRng) -> Vec<u8> {
    let alphabet = b"ab{}xyz01:";
    let len = rng.gen_range(0..12);
    let mut k: Vec<u8> = (0..len)
        .map(|_| alphabet[rng.gen_range(0..alphabet.len())])
        .collect();
    if rng.gen_bool(0.3) {
        k.extend_from_slice(format!("{{user:{}}}", rng.gen_range(0..50)).as_bytes());
    }
    if rng.gen_bool(0.1) {
        k.push(rng.gen());
    }
    k
}

#[test]
fn keyslot_is_redis_cluster_keyslot() {
    let dir = std::env::temp_dir().join(format!("elsa-keyslot-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let nodes_conf = dir.join("nodes.conf");
    let redis = RedisServer::start_with(&[
        "--cluster-enabled",
        "yes",
        "--cluster-config-file",
        nodes_conf.to_str().unwrap(),
    ]);
    let elsa = Elsa::start(&["--workers", "2"]);
    let mut r = redis::Client::open(format!("redis://127.0.0.1:{}/", redis.port))
        .unwrap()
        .get_connection()
        .unwrap();
    let mut e = elsa.conn();
    let mut rng = rand::rngs::StdRng::seed_from_u64(common::env_or("ELSA_SEED", 18));
    for _ in 0..2000 {
        let key = random_key(&mut rng);
        let want: i64 = redis::cmd("CLUSTER")
            .arg("KEYSLOT")
            .arg(&key)
            .query(&mut r)
            .unwrap();
        let got: i64 = redis::cmd("CLUSTER")
            .arg("KEYSLOT")
            .arg(&key)
            .query(&mut e)
            .unwrap();
        assert_eq!(
            got,
            want,
            "CLUSTER KEYSLOT {:?}",
            String::from_utf8_lossy(&key)
        );
    }
    // Errors as Redis's.
    for args in [&["KEYSLOT"][..], &["KEYSLOT", "a", "b"], &["NOSUCH"]] {
        let want = redis::cmd("CLUSTER")
            .arg(args)
            .query::<redis::Value>(&mut r);
        let got = redis::cmd("CLUSTER")
            .arg(args)
            .query::<redis::Value>(&mut e);
        assert_eq!(
            got.unwrap_err().to_string(),
            want.unwrap_err().to_string(),
            "CLUSTER {args:?}"
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}

fn inbox_messages(c: &mut redis::Connection) -> u64 {
    let info: String = redis::cmd("INFO").arg("transactions").query(c).unwrap();
    info.lines()
        .find_map(|l| l.strip_prefix("inbox_messages:"))
        .expect("inbox_messages in INFO transactions")
        .trim()
        .parse()
        .unwrap()
}

#[test]
fn worker_ports_serve_their_own_slots_without_a_hop() {
    let base = common::cluster::free_port_run(2);
    let elsa = Elsa::start(&["--workers", "2", "--worker-port-base", &base.to_string()]);
    let mut main = elsa.conn();
    let map = slots(&mut main);

    // Every slot once, on one of the two worker ports, one id per port.
    let mut covered = vec![0u8; 16384];
    let mut ids: HashMap<u16, String> = HashMap::new();
    for (start, end, port, id) in &map {
        assert!(start <= end);
        assert!(*port == base || *port == base + 1, "port {port}");
        assert_eq!(ids.entry(*port).or_insert_with(|| id.clone()), id);
        for s in *start..=*end {
            covered[usize::from(s)] += 1;
        }
    }
    assert!(covered.iter().all(|&n| n == 1), "each slot listed once");
    assert_eq!(ids.len(), 2);
    // Every port gives the same map; MYID names the worker of the port.
    for w in 0..2u16 {
        let mut c = redis::Client::open(format!("redis://127.0.0.1:{}/", base + w))
            .unwrap()
            .get_connection()
            .unwrap();
        assert_eq!(slots(&mut c), map);
        let id: String = redis::cmd("CLUSTER").arg("MYID").query(&mut c).unwrap();
        assert_eq!(id, ids[&(base + w)]);
        let nodes: String = redis::cmd("CLUSTER").arg("NODES").query(&mut c).unwrap();
        let mine: Vec<&str> = nodes.lines().filter(|l| l.contains("myself")).collect();
        assert_eq!(mine.len(), 1);
        assert!(mine[0].starts_with(&id) && mine[0].contains(&format!(":{}@", base + w)));
    }

    // The map says where each key is kept: SCAN from cursor 256 lists the
    // second shard's keys (the cursor is shard × 256 + segment).
    let keys: Vec<String> = (0..200).map(|i| format!("k{i}")).collect();
    for k in &keys {
        let _: () = redis::cmd("SET").arg(k).arg(1).query(&mut main).unwrap();
    }
    let mut second: Vec<String> = Vec::new();
    let mut cursor = 256u64;
    loop {
        let (next, batch): (u64, Vec<String>) = redis::cmd("SCAN")
            .arg(cursor)
            .arg("COUNT")
            .arg(1000)
            .query(&mut main)
            .unwrap();
        second.extend(batch);
        if next == 0 {
            break;
        }
        cursor = next;
    }
    let mut per_port: HashMap<u16, Vec<&String>> = HashMap::new();
    for k in &keys {
        let slot: u16 = redis::cmd("CLUSTER")
            .arg("KEYSLOT")
            .arg(k)
            .query(&mut main)
            .unwrap();
        let port = owner_port(&map, slot);
        let shard = if second.contains(k) { 1 } else { 0 };
        assert_eq!(
            port,
            base + shard,
            "{k} (slot {slot}) is kept by shard {shard}"
        );
        per_port.entry(port).or_default().push(k);
    }

    // On its own worker's port a key's commands (lone, pipelined, MULTI)
    // reach no other thread; on the other worker's port each does.
    for w in 0..2u16 {
        let mut c = redis::Client::open(format!("redis://127.0.0.1:{}/", base + w))
            .unwrap()
            .get_connection()
            .unwrap();
        let own = &per_port[&(base + w)];
        let other = &per_port[&(base + 1 - w)];
        // The node's own background work (the orphan resolver asks every
        // shard once a second) may land in the window now and then: the
        // fewest hops of three tries is the commands' own.
        let own_hops = (0..3)
            .map(|_| {
                let before = inbox_messages(&mut c);
                for k in own.iter() {
                    let _: () = redis::cmd("SET").arg(*k).arg(2).query(&mut c).unwrap();
                    let v: i64 = redis::cmd("GET").arg(*k).query(&mut c).unwrap();
                    assert_eq!(v, 2);
                }
                let mut p = redis::pipe();
                p.atomic();
                for k in own.iter().take(6) {
                    p.cmd("INCR").arg(*k);
                }
                let _: Vec<i64> = p.query(&mut c).unwrap();
                inbox_messages(&mut c) - before
            })
            .min()
            .unwrap_or(0);
        // Each INFO asks the other shard by message: two INFOs, two hops.
        assert!(own_hops <= 2, "{own_hops} hops for {} own keys", own.len());
        let before = inbox_messages(&mut c);
        for k in other.iter() {
            let _: () = redis::cmd("SET").arg(*k).arg(3).query(&mut c).unwrap();
        }
        let other_hops = inbox_messages(&mut c) - before;
        assert!(
            other_hops >= other.len() as u64,
            "{other_hops} hops for {} keys of the other worker",
            other.len()
        );
    }
}

#[test]
fn a_redis_cluster_client_reads_and_writes_through_the_map() {
    let base = common::cluster::free_port_run(2);
    let elsa = Elsa::start(&["--workers", "2", "--worker-port-base", &base.to_string()]);
    let client = redis::cluster::ClusterClient::new(vec![elsa.url()]).unwrap();
    let mut c = client.get_connection().unwrap();
    for i in 0..300 {
        let _: () = redis::cmd("SET")
            .arg(format!("key:{i}"))
            .arg(i)
            .query(&mut c)
            .unwrap();
        let _: () = redis::cmd("HSET")
            .arg(format!("{{user:{}}}:profile", i % 7))
            .arg(format!("f{i}"))
            .arg(i)
            .query(&mut c)
            .unwrap();
    }
    for i in 0..300 {
        let v: i64 = redis::cmd("GET")
            .arg(format!("key:{i}"))
            .query(&mut c)
            .unwrap();
        assert_eq!(v, i);
    }
    let mut main = elsa.conn();
    let n: i64 = redis::cmd("DBSIZE").query(&mut main).unwrap();
    assert_eq!(n, 300 + 7);
    let v: i64 = redis::cmd("HGET")
        .arg("{user:3}:profile")
        .arg("f3")
        .query(&mut main)
        .unwrap();
    assert_eq!(v, 3);
    // The cluster client reached both workers' ports, as the map said.
    let list: String = redis::cmd("CLIENT").arg("LIST").query(&mut main).unwrap();
    for port in [base, base + 1] {
        assert!(
            list.contains(&format!("laddr=127.0.0.1:{port} ")),
            "a client on port {port}: {list}"
        );
    }
}

#[test]
fn without_worker_ports_the_node_is_one_cluster_node_on_the_port_reached() {
    let elsa = Elsa::start(&["--workers", "2"]);
    let mut c = elsa.conn();
    let map = slots(&mut c);
    assert_eq!(map.len(), 1);
    assert_eq!((map[0].0, map[0].1, map[0].2), (0, 16383, elsa.port));
    let info: String = redis::cmd("CLUSTER").arg("INFO").query(&mut c).unwrap();
    assert!(info.contains("cluster_state:ok") && info.contains("cluster_known_nodes:1"));
    let nodes: String = redis::cmd("CLUSTER").arg("NODES").query(&mut c).unwrap();
    assert_eq!(nodes.lines().count(), 1);
    assert!(nodes.contains("myself,master") && nodes.trim_end().ends_with(" 0-16383"));
    // Keys of one hash tag are kept together: a MULTI over them is one
    // shard's commit (no prepare round), whichever keys they are.
    let keys: Vec<String> = (0..40).map(|i| format!("{{order:9}}:{i}")).collect();
    let slot: i64 = redis::cmd("CLUSTER")
        .arg("KEYSLOT")
        .arg(&keys[0])
        .query(&mut c)
        .unwrap();
    for k in &keys {
        let s: i64 = redis::cmd("CLUSTER")
            .arg("KEYSLOT")
            .arg(k)
            .query(&mut c)
            .unwrap();
        assert_eq!(s, slot);
        let _: () = redis::cmd("SET").arg(k).arg(1).query(&mut c).unwrap();
    }
    let (a, b) = common::keys_on_two_shards(&mut c);
    assert_ne!(a, b);
    let (_, second): (u64, Vec<String>) = redis::cmd("SCAN")
        .arg(256)
        .arg("COUNT")
        .arg(10000)
        .query(&mut c)
        .unwrap();
    let on_second = keys.iter().filter(|k| second.contains(k)).count();
    assert!(
        on_second == 0 || on_second == keys.len(),
        "{on_second} of 40 tagged keys on shard 1"
    );
}

/// A client that does not know the slot map is dealt to a worker
/// round-robin. Once its commands all go to another worker's shard it
/// moves to that worker (`Conn::serve`, *Moving to the keys' worker*):
/// from then on nothing hops between threads, and nothing of its session
/// or of the pipeline in flight across the move is lost or reordered.
#[test]
fn a_plain_client_moves_to_the_worker_that_keeps_its_keys() {
    let elsa = Elsa::start(&["--workers", "2"]);
    let mut info = elsa.conn();
    // Two connections in a row: round-robin puts one on each worker, so
    // one of them starts on the worker without the keys.
    let mut conns: Vec<redis::Connection> = (0..2).map(|_| elsa.conn()).collect();
    let mut ids = Vec::new();
    for (i, c) in conns.iter_mut().enumerate() {
        let _: () = redis::cmd("CLIENT")
            .arg("SETNAME")
            .arg(format!("mover{i}"))
            .query(c)
            .unwrap();
        let _: () = redis::cmd("SELECT").arg(5).query(c).unwrap();
        let _: () = redis::cmd("SET")
            .arg(format!("{{t}}before{i}"))
            .arg("kept")
            .query(c)
            .unwrap();
        let id: u64 = redis::cmd("CLIENT").arg("ID").query(c).unwrap();
        ids.push(id);
        // Commands named B-something that do not block must not keep it
        // from moving (BEGIN and BITCOUNT did: the marker CLIENT LIST
        // shows for a blocked BLPOP stayed set).
        let _: () = redis::cmd("BEGIN").arg("SI").query(c).unwrap();
        let _: i64 = redis::cmd("COMMIT").query(c).unwrap();
        let _: i64 = redis::cmd("BITCOUNT").arg("{t}none").query(c).unwrap();
    }
    // A long pipeline of lone commands on keys of one slot: it arrives in
    // many reads, and the move happens between two of them, with the rest
    // (a request cut in two, most likely) still to come.
    const N: usize = 3000;
    for (i, c) in conns.iter_mut().enumerate() {
        let mut p = redis::pipe();
        for n in 0..N {
            p.cmd("SET")
                .arg(format!("{{t}}k{n}"))
                .arg(format!("{i}-{n}"));
            p.cmd("GET").arg(format!("{{t}}k{n}"));
        }
        let replies: Vec<String> = p.query(c).unwrap();
        assert_eq!(replies.len(), 2 * N);
        for n in 0..N {
            assert_eq!(replies[2 * n], "OK", "SET {n} of connection {i}");
            assert_eq!(
                replies[2 * n + 1],
                format!("{i}-{n}"),
                "GET {n} of connection {i}"
            );
        }
    }
    // Both are now on the keys' worker: the only messages between threads
    // are the two INFOs' own (each asks the other shard).
    let before = inbox_messages(&mut info);
    for c in conns.iter_mut() {
        for _ in 0..300 {
            let _: i64 = redis::cmd("INCR").arg("{t}n").query(c).unwrap();
        }
    }
    let hops = inbox_messages(&mut info) - before;
    assert!(
        hops <= 2,
        "{hops} messages between threads for 600 INCRs after the move"
    );
    let n: i64 = redis::cmd("GET").arg("{t}n").query(&mut conns[0]).unwrap();
    assert_eq!(n, 600);
    let txns: String = redis::cmd("INFO")
        .arg("transactions")
        .query(&mut info)
        .unwrap();
    assert!(
        txns.contains("\r\nclients_moved:1\r\n"),
        "one of the two moved, once: {txns}"
    );
    // The session came along: client id, name, database.
    for (i, c) in conns.iter_mut().enumerate() {
        let id: u64 = redis::cmd("CLIENT").arg("ID").query(c).unwrap();
        assert_eq!(id, ids[i]);
        let name: String = redis::cmd("CLIENT").arg("GETNAME").query(c).unwrap();
        assert_eq!(name, format!("mover{i}"));
        let kept: Option<String> = redis::cmd("GET")
            .arg(format!("{{t}}before{i}"))
            .query(c)
            .unwrap();
        assert_eq!(kept.as_deref(), Some("kept"), "still in database 5");
    }
    // Listed once each, under its own id.
    let list: String = redis::cmd("CLIENT").arg("LIST").query(&mut info).unwrap();
    for (i, id) in ids.iter().enumerate() {
        let lines: Vec<&str> = list
            .lines()
            .filter(|l| l.contains(&format!(" name=mover{i} ")))
            .collect();
        assert_eq!(lines.len(), 1, "{list}");
        assert!(lines[0].starts_with(&format!("id={id} ")), "{}", lines[0]);
        assert!(lines[0].contains(" db=5 "), "{}", lines[0]);
    }
}

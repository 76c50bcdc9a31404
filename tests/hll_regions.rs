//! HyperLogLogs across regions (issue 45): `PFADD`s made in two regions
//! cut off from each other all count once the regions meet again, every
//! node then holds the same bytes, and a whole-value write still
//! replaces the value everywhere (`docs/datatypes.md`, *HyperLogLogs*).
//! Before the register-wise parts, the newer region's value won whole and
//! the other region's additions were lost.

mod common;

use std::time::Duration;

use common::cluster::Cluster;

fn pfadd(cluster: &Cluster, i: usize, key: &str, elements: &[String]) {
    let _: i64 = redis::cmd("PFADD")
        .arg(key)
        .arg(elements)
        .query(&mut cluster.conn(i))
        .expect("PFADD");
}

fn get(cluster: &Cluster, i: usize, key: &str) -> Option<Vec<u8>> {
    redis::cmd("GET")
        .arg(key)
        .query(&mut cluster.conn(i))
        .expect("GET")
}

fn count(cluster: &Cluster, i: usize, key: &str) -> i64 {
    redis::cmd("PFCOUNT")
        .arg(key)
        .query(&mut cluster.conn(i))
        .expect("PFCOUNT")
}

fn elements(prefix: &str, n: usize) -> Vec<String> {
    (0..n).map(|j| format!("{prefix}{j}")).collect()
}

/// Every register an element raises, read off the bytes.
fn missing(bytes: &[u8], elements: &[String]) -> Vec<String> {
    use elsa_lattice::hll;
    let regs = hll::registers(bytes).expect("a HyperLogLog");
    elements
        .iter()
        .filter(|e| {
            let (i, rank) = hll::pattern(e.as_bytes());
            regs[i] < rank
        })
        .cloned()
        .collect()
}

#[test]
fn concurrent_pfadds_in_two_regions_all_count() {
    let cluster = Cluster::start(&["east", "west"], &[]);
    let all = [0, 1];
    // Made in both regions at once, each cut off from the other: the key
    // is new in both (dense in one: past `hll-sparse-max-bytes`).
    cluster.fault(0, "ISOLATE");
    cluster.fault(1, "ISOLATE");
    let east = elements("east-", 40);
    let west = elements("west-", 3000);
    pfadd(&cluster, 0, "visitors", &east);
    pfadd(&cluster, 1, "visitors", &west);
    pfadd(&cluster, 0, "small", &elements("a", 3));
    pfadd(&cluster, 1, "small", &elements("b", 3));
    cluster.fault(0, "HEAL");
    cluster.fault(1, "HEAL");
    cluster.wait_same_digest(&all, Duration::from_secs(60));
    let bytes: Vec<Vec<u8>> = all
        .iter()
        .map(|&i| get(&cluster, i, "visitors").expect("visitors"))
        .collect();
    assert_eq!(bytes[0], bytes[1], "every node holds the same bytes");
    let both: Vec<String> = east.iter().chain(&west).cloned().collect();
    assert_eq!(missing(&bytes[0], &both), Vec::<String>::new());
    for i in all {
        let n = count(&cluster, i, "visitors");
        assert!((2900..=3150).contains(&n), "node {i} counts {n}");
        assert_eq!(count(&cluster, i, "small"), 6, "node {i}");
    }

    // Then each region adds more on what it has seen: its own bytes show.
    pfadd(&cluster, 1, "small", &elements("c", 2));
    cluster.wait_same_digest(&all, Duration::from_secs(60));
    assert_eq!(get(&cluster, 0, "small"), get(&cluster, 1, "small"));
    assert_eq!(count(&cluster, 0, "small"), 8);

    // An EXPIRE in one region keeps the other region's concurrent PFADD;
    // a DEL replaces everything it saw.
    cluster.fault(0, "ISOLATE");
    cluster.fault(1, "ISOLATE");
    let _: i64 = redis::cmd("EXPIRE")
        .arg("small")
        .arg(100_000)
        .query(&mut cluster.conn(0))
        .expect("EXPIRE");
    pfadd(&cluster, 1, "small", &elements("d", 2));
    let _: i64 = redis::cmd("DEL")
        .arg("visitors")
        .query(&mut cluster.conn(0))
        .expect("DEL");
    cluster.fault(0, "HEAL");
    cluster.fault(1, "HEAL");
    cluster.wait_same_digest(&all, Duration::from_secs(60));
    for i in all {
        assert_eq!(count(&cluster, i, "small"), 10, "node {i}");
        let ttl: i64 = redis::cmd("TTL")
            .arg("small")
            .query(&mut cluster.conn(i))
            .expect("TTL");
        assert!(ttl > 99_000, "node {i}: TTL {ttl}");
        assert_eq!(get(&cluster, i, "visitors"), None, "node {i}");
    }
}

//! Streams across regions (issue 46): clients in two regions `XADD *` to
//! one stream at once, as fast as they can (many adds in one
//! millisecond), and every region ends with every acknowledged entry, in
//! one ID order, with no ID taken twice — IDs carry the node that made
//! them (`elsa_shard::ops::streams::set_id_tag`), no coordination.

use std::collections::BTreeSet;
use std::time::Duration;

use redis::Value;

use crate::common::cluster::Cluster;
use crate::one_at_a_time;

/// An `XRANGE` reply as (ID, fields) pairs.
fn entries(v: &Value) -> Vec<(String, Vec<String>)> {
    let Value::Array(items) = v else {
        panic!("XRANGE answered {v:?}")
    };
    items
        .iter()
        .map(|e| match e {
            Value::Array(p) => match (&p[0], &p[1]) {
                (Value::BulkString(id), Value::Array(f)) => (
                    String::from_utf8_lossy(id).into_owned(),
                    f.iter()
                        .map(|x| match x {
                            Value::BulkString(b) => String::from_utf8_lossy(b).into_owned(),
                            x => panic!("a field {x:?}"),
                        })
                        .collect(),
                ),
                x => panic!("an entry {x:?}"),
            },
            x => panic!("an entry {x:?}"),
        })
        .collect()
}

/// (ms, seq) of an ID.
fn parsed(id: &str) -> (u64, u64) {
    let (ms, seq) = id.split_once('-').expect("ms-seq");
    (ms.parse().expect("ms"), seq.parse().expect("seq"))
}

#[test]
fn concurrent_adds_in_two_regions_keep_every_entry_in_one_order() {
    let _one = one_at_a_time();
    let c = Cluster::start(&["a", "b"], &["--wan-delay-ms", "50"]);
    c.wait_members(&[0, 1], 2, Duration::from_secs(30));
    const ADDS: usize = 400;
    let writers: Vec<_> = [0usize, 1]
        .into_iter()
        .map(|i| {
            let url = c.node(i).url();
            std::thread::spawn(move || {
                let mut con = redis::Client::open(url)
                    .and_then(|c| c.get_connection())
                    .expect("connect");
                let mut ids = Vec::with_capacity(ADDS);
                for n in 0..ADDS {
                    let id: String = redis::cmd("XADD")
                        .arg("events")
                        .arg("*")
                        .arg("region")
                        .arg(i)
                        .arg("n")
                        .arg(n)
                        .query(&mut con)
                        .expect("XADD");
                    ids.push(id);
                }
                ids
            })
        })
        .collect();
    let acked: Vec<Vec<String>> = writers
        .into_iter()
        .map(|t| t.join().expect("writer"))
        .collect();
    // Each region's own IDs rise; no ID was handed out twice.
    for (i, ids) in acked.iter().enumerate() {
        let p: Vec<(u64, u64)> = ids.iter().map(|s| parsed(s)).collect();
        assert!(p.windows(2).all(|w| w[0] < w[1]), "region {i}'s IDs fell");
    }
    let all: BTreeSet<&String> = acked.iter().flatten().collect();
    assert_eq!(all.len(), 2 * ADDS, "an ID was taken twice");
    c.wait_same_digest(&[0, 1], Duration::from_secs(60));
    let mut seen = Vec::new();
    for i in 0..2 {
        let v: Value = redis::cmd("XRANGE")
            .arg("events")
            .arg("-")
            .arg("+")
            .query(&mut c.conn(i))
            .expect("XRANGE");
        seen.push(entries(&v));
    }
    assert_eq!(seen[0], seen[1], "the regions hold different streams");
    let ids: Vec<&String> = seen[0].iter().map(|(id, _)| id).collect();
    let got: BTreeSet<&String> = ids.iter().copied().collect();
    let lost: Vec<_> = all.difference(&got).take(5).collect();
    assert!(lost.is_empty(), "acknowledged entries missing: {lost:?}");
    assert_eq!(ids.len(), 2 * ADDS, "entries besides the acknowledged ones");
    // Every entry holds what its writer wrote, under the ID it was told.
    for (i, mine) in acked.iter().enumerate() {
        for (n, id) in mine.iter().enumerate() {
            let (_, fields) = seen[0].iter().find(|(x, _)| x == id).expect("present");
            assert_eq!(
                fields,
                &vec![
                    "region".to_string(),
                    i.to_string(),
                    "n".to_string(),
                    n.to_string()
                ]
            );
        }
    }
    let len: i64 = redis::cmd("XLEN")
        .arg("events")
        .query(&mut c.conn(1))
        .expect("XLEN");
    assert_eq!(len, 2 * ADDS as i64);
}

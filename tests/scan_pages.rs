//! SSCAN's paging against a real `redis-server` 7.0: a set Redis keeps as
//! a hashtable (strings) comes in pages, with a cursor back, and an intset
//! whole (cursor 0). BullMQ pages a set of 65 strings with `COUNT 50` and
//! expects a cursor; Elsa answered every set of up to 128 whole.

mod common;

#[allow(dead_code)]
#[path = "differential/resp.rs"]
mod resp;

use std::collections::BTreeSet;

use common::redis_server::RedisServer;
use common::Elsa;
use resp::{Conn, Reply};

/// One SSCAN page: the next cursor and the members.
fn page(c: &mut Conn, key: &str, cursor: &str) -> (String, Vec<Vec<u8>>) {
    match c.call(&[b"SSCAN", key.as_bytes(), cursor.as_bytes(), b"COUNT", b"50"]) {
        Reply::Array(parts) => match (&parts[0], &parts[1]) {
            (Reply::Bulk(next), Reply::Array(members)) => (
                String::from_utf8(next.clone()).unwrap(),
                members
                    .iter()
                    .map(|m| match m {
                        Reply::Bulk(b) => b.clone(),
                        r => panic!("member {r}"),
                    })
                    .collect(),
            ),
            r => panic!("SSCAN {r:?}"),
        },
        r => panic!("SSCAN {r}"),
    }
}

#[test]
fn sscan_pages_a_hashtable_and_answers_an_intset_whole() {
    let elsa = Elsa::start(&[]);
    let redis = RedisServer::start();
    for port in [elsa.port, redis.port] {
        let mut c = Conn::connect(port).unwrap();
        for i in 0..65 {
            c.call(&[b"SADD", b"strings", format!("member:{i}").as_bytes()]);
            c.call(&[b"SADD", b"ints", i.to_string().as_bytes()]);
        }
        let (next, first) = page(&mut c, "strings", "0");
        assert_ne!(next, "0", "port {port}: a hashtable comes in pages");
        assert!(first.len() < 65, "port {port}: {} at once", first.len());
        let mut seen: BTreeSet<Vec<u8>> = first.into_iter().collect();
        let mut cursor = next;
        while cursor != "0" {
            let (next, more) = page(&mut c, "strings", &cursor);
            seen.extend(more);
            cursor = next;
        }
        assert_eq!(
            seen.len(),
            65,
            "port {port}: every member once the scan ends"
        );
        let (next, all) = page(&mut c, "ints", "0");
        assert_eq!(
            (next.as_str(), all.len()),
            ("0", 65),
            "port {port}: an intset whole"
        );
    }
}

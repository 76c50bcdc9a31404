//! What an acknowledgement at level `region` (the default) promises: the
//! write is on every replica of its key in the region's view, so losing
//! the node that took it loses nothing acknowledged (issue 41, defect 8).

use std::time::Duration;

use super::commits::owner;
use super::common::cluster::Cluster;
use super::one_at_a_time;

/// A key node `i` is the primary of.
fn key_owned_by(c: &Cluster, i: usize, prefix: &str) -> String {
    (0..1000)
        .map(|n| format!("{prefix}{n}"))
        .find(|k| owner(c, i, k) == i)
        .expect("a key node i owns")
}

/// A replica whose connections failed for a moment — its process alive,
/// its membership unchanged — is still a replica: a write waits for it
/// and is acknowledged once it has it. Before, a failed connection
/// attempt marked it "unreachable" and the batch counted as confirmed
/// with no replica holding it: kill -9 of the node that took the writes
/// lost every one of them.
#[test]
fn a_replica_out_of_reach_for_a_moment_is_waited_for() {
    let _one = one_at_a_time();
    let mut c = Cluster::start(
        &["r1", "r1"],
        &["--replication-factor", "2", "--appendfsync", "always"],
    );
    let key = key_owned_by(&c, 0, "hiccup:");
    let mut con = c.conn(0);
    let _: i64 = redis::cmd("RPUSH")
        .arg(&key)
        .arg("before")
        .query(&mut con)
        .expect("RPUSH");
    c.fault(0, "LINKS-DOWN 3000");
    std::thread::sleep(Duration::from_millis(300));
    let mut acked = vec!["before".to_string()];
    for i in 0..20 {
        let n: i64 = redis::cmd("RPUSH")
            .arg(&key)
            .arg(i)
            .query(&mut con)
            .expect("RPUSH");
        acked.push(i.to_string());
        assert_eq!(n as usize, acked.len());
    }
    c.kill9(0);
    // Node 1 takes the key over once node 0 is declared dead; until then
    // it answers that the key's node failed.
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    let got: Vec<String> = loop {
        match redis::cmd("LRANGE")
            .arg(&key)
            .arg(0)
            .arg(-1)
            .query(&mut c.conn(1))
        {
            Ok(v) => break v,
            Err(e) if std::time::Instant::now() < deadline => {
                eprintln!("node 1 answers: {e}");
                std::thread::sleep(Duration::from_millis(200));
            }
            Err(e) => panic!("node 1 never took the key over: {e}"),
        }
    };
    assert_eq!(
        got, acked,
        "the surviving replica lacks writes node 0 acknowledged"
    );
}

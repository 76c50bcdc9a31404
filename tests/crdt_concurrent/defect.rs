//! The defect the concurrent checker found (seed 3, one run of ten),
//! made deterministic: a single-shard `BEGIN … COMMIT` undoes a change
//! another region made to the key between the transaction's read and its
//! commit. `msg.rs` says "(A single-shard commit needs none: the shard
//! computes it against what it stores.)": the commit diffs its target
//! against what the shard stores *at commit*, not against what the
//! transaction read. A remote delta stamped before the key's newest local
//! write merges without moving the key's version, so validation passes
//! (RC and SI), and the diff removes the merged member and writes the
//! member's score (or field's value) back as read, dropping the merged
//! increment — on every node, acknowledged writes lost
//! (`docs/datatypes.md`: a concurrent add survives; concurrent increments
//! all count; `docs/transactions.md`: "a member added … by the transaction
//! merges with concurrent changes made in other regions exactly as a lone
//! `SADD`/`HSET` would"). Failed before the fix (`Shard::op_commit` now
//! settles such writes against what the transaction read).

use std::time::Duration;

use redis::Value;

use crate::common::cluster::Cluster;

fn q(c: &mut redis::Connection, line: &str) -> Value {
    let args: Vec<&str> = line.split(' ').collect();
    redis::cmd(args[0])
        .arg(&args[1..])
        .query(c)
        .unwrap_or_else(|e| panic!("{line}: {e}"))
}

#[test]
fn a_single_shard_commit_keeps_what_another_region_merged_after_its_read() {
    // Deltas take 300 ms between regions: region b's writes are stamped
    // before region a's newer local write, and arrive after a's read.
    let c = Cluster::start(
        &["a", "a", "b", "b"],
        &["--replication-factor", "2", "--wan-delay-ms", "300"],
    );
    let all: Vec<usize> = (0..4).collect();
    let (mut a, mut b) = (c.conn(0), c.conn(2));
    let mut txs = [c.conn(0), c.conn(0)];
    let keys = 4;
    for k in 0..keys {
        q(&mut a, &format!("ZADD z{k} 1 old"));
        q(&mut a, &format!("ZINCRBY z{k} 1 shared"));
        q(&mut a, &format!("SADD s{k} old"));
    }
    c.wait_same_digest(&all, Duration::from_secs(60));
    for k in 0..keys {
        q(&mut b, &format!("ZADD z{k} 7 m"));
        q(&mut b, &format!("ZINCRBY z{k} 5 shared"));
        q(&mut b, &format!("SADD s{k} m"));
        // Stamped in a later millisecond than b's writes: two nodes'
        // clocks give equal timestamps within one, and the tie goes to the
        // higher node id — b's write would be the newer, and the read of
        // region a's commit rightly refused.
        std::thread::sleep(Duration::from_millis(3));
        q(&mut a, &format!("ZADD z{k} 2 newer"));
        q(&mut a, &format!("SADD s{k} newer"));
        let reads = [format!("ZREM z{k} old"), format!("SREM s{k} old")];
        for (tx, rem) in txs.iter_mut().zip(&reads) {
            q(tx, "BEGIN RC");
            q(tx, rem);
        }
        // Region b's writes arrive and merge.
        std::thread::sleep(Duration::from_millis(1000));
        for tx in &mut txs {
            let ts = q(tx, "COMMIT");
            assert!(matches!(ts, Value::Int(_)), "COMMIT answered {ts:?}");
        }
    }
    c.wait_same_digest(&all, Duration::from_secs(60));
    let mut wrong = Vec::new();
    for i in all {
        let mut con = c.conn(i);
        for k in 0..keys {
            let m: Option<f64> = redis::cmd("ZSCORE")
                .arg(format!("z{k}"))
                .arg("m")
                .query(&mut con)
                .unwrap();
            let s: Option<f64> = redis::cmd("ZSCORE")
                .arg(format!("z{k}"))
                .arg("shared")
                .query(&mut con)
                .unwrap();
            let sm: bool = redis::cmd("SISMEMBER")
                .arg(format!("s{k}"))
                .arg("m")
                .query(&mut con)
                .unwrap();
            if m != Some(7.0) || s != Some(6.0) || !sm {
                wrong.push(format!(
                    "node {}: ZSCORE z{k} m = {m:?} (want 7), ZSCORE z{k} shared = {s:?} (want 6), \
                     SISMEMBER s{k} m = {sm} (want true)",
                    i + 1
                ));
            }
        }
    }
    assert!(
        wrong.is_empty(),
        "region b's acknowledged ZADD/ZINCRBY/SADD undone by region a's single-shard commits:\n{}",
        wrong.join("\n")
    );
}

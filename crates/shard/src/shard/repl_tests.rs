//! The log and in-region replication together (`persist.rs`, `repl.rs`):
//! what the replicas confirm must cover the records the log holds for it,
//! whatever the disk does in between.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use super::tests::{kop, recovered_as, set, shard};
use super::*;
use crate::wal::files::DataDir;
use crate::wal::{LogSink, Wal};

/// A segment whose writes fail while `fail` is set (a full disk).
struct Flaky {
    inner: crate::wal::segment::Segment,
    fail: Arc<AtomicBool>,
}

impl LogSink for Flaky {
    fn append(&mut self, buf: &[u8]) -> std::io::Result<()> {
        if self.fail.load(Ordering::SeqCst) {
            return Err(std::io::Error::other("No space left on device"));
        }
        self.inner.append(buf)
    }
    fn sync(&mut self) -> std::io::Result<()> {
        if self.fail.load(Ordering::SeqCst) {
            return Err(std::io::Error::other("No space left on device"));
        }
        self.inner.sync()
    }
    fn truncate(&mut self, len: u64) -> std::io::Result<()> {
        self.inner.truncate(len)
    }
}

/// A replicator that holds each batch until the test confirms it, as the
/// region's replicas would.
#[derive(Default)]
struct Held(Mutex<Vec<crate::repl::Waiter>>);

impl crate::repl::Replicator for Held {
    fn replicate(&self, _shard: usize, _entries: Vec<LogEntry>, done: crate::repl::Waiter) {
        self.0.lock().unwrap().push(done);
    }
    fn alone(&self) -> bool {
        false
    }
}

impl Held {
    /// The replicas confirm every batch shipped so far; how many.
    fn confirm_all(&self) -> usize {
        let batches = std::mem::take(&mut *self.0.lock().unwrap());
        let n = batches.len();
        for done in batches {
            done(true);
        }
        n
    }
}

#[test]
fn a_write_acknowledged_after_the_disk_came_back_survives_a_restart() {
    // Issue 41, defect 7: the log write failed (disk full), the batch was
    // shipped anyway with the log's offset *before* its records; the
    // replicas' confirmation then covered nothing of it, and recovery
    // left out a write the region had acknowledged.
    let dir = std::env::temp_dir().join(format!("elsa-shard-replfull-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let data = DataDir::open(&dir).unwrap();
    let fail = Arc::new(AtomicBool::new(false));
    let seg = data.create_segment(1, 0, false).unwrap();
    let mut s = shard();
    s.attach_wal(
        Wal::new(
            Box::new(Flaky {
                inner: seg,
                fail: fail.clone(),
            }),
            crate::wal::Fsync::No,
        ),
        data,
        1,
    );
    let replicas = Arc::new(Held::default());
    s.attach_replicator(replicas.clone());

    fail.store(true, Ordering::SeqCst);
    let (tx, mut rx) = tokio::sync::oneshot::channel();
    s.handle(ShardMsg::Batch {
        ops: vec![kop(&s, "k", set("v"))],
        mode: BatchMode::Prefix,
        ack: crate::repl::AckLevel::Region,
        reply: tx,
    });
    s.flush_wal();
    // Whatever was shipped while the disk was full is confirmed.
    replicas.confirm_all();
    s.tick_wal();
    assert!(rx.try_recv().is_err(), "nothing is acknowledged yet");

    // Space is back: the log is written, the replicas confirm, the
    // write is acknowledged.
    fail.store(false, Ordering::SeqCst);
    for _ in 0..3 {
        s.tick_wal();
        replicas.confirm_all();
        s.tick_wal();
    }
    let answer = rx
        .try_recv()
        .expect("acknowledged once written and confirmed");
    assert_eq!(answer.replies, vec![OpReply::Ok]);
    s.close_wal();

    let mut r = recovered_as(&dir, true);
    assert_eq!(
        super::tests::value(&mut r, "k").as_deref(),
        Some(&b"v"[..]),
        "an acknowledged write was left out by recovery"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

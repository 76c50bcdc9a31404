//! The log and in-region replication together (`persist.rs`, `repl.rs`):
//! what the replicas confirm must cover the records the log holds for it,
//! whatever the disk does in between.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use super::tests::{kop, recovered_as, set, shard};
use super::*;
use crate::msg::{HoldMode, PrepareRequest};
use crate::wal::codec::LogEntry;
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

/// Issue 42: another region's install waits for the region's replicas
/// before it is answered, an unconfirmed one is answered with an error (the
/// installer installs it again), and a restart that leaves out this node's
/// own unconfirmed commits keeps it — with its unit mark, so anti-entropy
/// ships it on as a part of its transaction.
#[test]
fn an_unconfirmed_remote_install_is_an_error_and_survives_a_restart_in_place() {
    let dir = std::env::temp_dir().join(format!("elsa-shard-replinst-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let data = DataDir::open(&dir).unwrap();
    let seg = data.create_segment(1, 0, false).unwrap();
    let mut s = shard();
    s.attach_wal(Wal::new(Box::new(seg), crate::wal::Fsync::No), data, 1);
    let replicas = Arc::new(Held::default());
    s.attach_replicator(replicas.clone());

    // This node's own commit, which the replicas never confirm.
    let (tx, _own) = tokio::sync::oneshot::channel();
    s.handle(ShardMsg::Batch {
        ops: vec![kop(&s, "mine", set("v"))],
        mode: BatchMode::Prefix,
        ack: crate::repl::AckLevel::Local,
        reply: tx,
    });
    // Another region's transaction, installed under holds.
    let txn = 91;
    let (tx, mut held) = tokio::sync::oneshot::channel();
    s.handle(ShardMsg::Prepare {
        req: PrepareRequest {
            txn,
            checks: Vec::new(),
            holds: vec![(super::tests::key(&s, "x"), HoldMode::Write)],
            want_states: false,
            retry_on_busy: true,
            wait: false,
        },
        ack: crate::repl::AckLevel::Local,
        reply: tx,
    });
    s.flush_wal();
    s.tick_wal();
    assert!(held.try_recv().unwrap().is_ok());
    let remote = LogEntry {
        key: Bytes::from_static(b"x"),
        state: EntryState::Plain(Some(Current {
            value: Bytes::from_static(b"remote"),
            expire_ms: None,
            ttl_of: None,
        })),
        start_ts: 50 << 16,
        version: Version::new(50 << 16, 9),
        unit: Unit::Shards,
    };
    let (tx, mut installed) = tokio::sync::oneshot::channel();
    s.handle(ShardMsg::InstallRemote {
        txn,
        entries: vec![remote],
        others: Vec::new(),
        reply: tx,
    });
    s.flush_wal();
    s.tick_wal();
    assert!(
        installed.try_recv().is_err(),
        "not answered before the region's replicas logged it"
    );
    // The replicas refuse every batch (they count this node as dead).
    for done in std::mem::take(&mut *replicas.0.lock().unwrap()) {
        done(false);
    }
    s.tick_wal();
    assert!(
        matches!(installed.try_recv(), Ok(Err(Refusal::Unavailable(_)))),
        "an unconfirmed install is an error"
    );
    s.close_wal();

    let mut r = recovered_as(&dir, true);
    assert_eq!(
        super::tests::value(&mut r, "mine"),
        None,
        "own and unconfirmed: left out"
    );
    assert_eq!(
        super::tests::value(&mut r, "x").as_deref(),
        Some(&b"remote"[..]),
        "another region's install is kept"
    );
    let h = super::tests::key(&r, "x");
    assert_eq!(r.table.get(h.hash, b"x").unwrap().unit(), Unit::Shards);
    std::fs::remove_dir_all(&dir).unwrap();
}

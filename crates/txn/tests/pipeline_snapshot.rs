//! A pipeline of lone commands across shards runs as of one moment (the
//! pivot's step, `elsa_txn::lone`) — for a snapshot too. The shards here
//! are real ones on one clock, served through the placement; a snapshot
//! is opened just before each held part runs, the latest point a reader
//! can fall between the pivot's writes and the held parts'. Read as of that
//! snapshot, the pipeline must show all of its writes or none: when the
//! held parts stamped their writes as they ran, after the pivot's, the
//! snapshot saw the pivot's writes without the held parts' (SI's
//! G-single-item in `isolation::list_append_si_with_pipelines`).

use std::sync::{Arc, Mutex};

use bytes::Bytes;
use elsa_lattice::Hlc;
use elsa_shard::history::{SnapshotGuard, Snapshots};
use elsa_shard::{
    AckLevel, BatchMode, Expiry, HashedKey, KeyHasher, KeyOp, Op, OpReply, SetCond, SetReply,
    Shard, ShardMsg,
};
use elsa_txn::router::{Coordinator, NodeContext, Placement, ShardId};

/// Two real shards of "node 2", answered in place.
struct TwoShards {
    shards: [Mutex<Shard>; 2],
    hlc: Arc<Hlc>,
    snapshots: Arc<Snapshots>,
    /// Snapshots opened just before a held part ran.
    opened: Mutex<Vec<SnapshotGuard>>,
    /// The modes the shards were sent, in order.
    modes: Mutex<Vec<BatchMode>>,
}

impl Placement for TwoShards {
    fn route(&self, hash: u64) -> ShardId {
        ShardId {
            node: 2,
            index: (hash % 2) as u16,
        }
    }

    fn send_remote(&self, to: ShardId, msg: ShardMsg) {
        if let ShardMsg::Batch { mode, .. } = &msg {
            self.modes.lock().unwrap().push(*mode);
            if matches!(mode, BatchMode::Held { .. }) {
                let snapshot = self.snapshots.open_now(&self.hlc);
                self.opened.lock().unwrap().push(snapshot);
            }
        }
        self.shards[usize::from(to.index)]
            .lock()
            .unwrap()
            .handle(msg);
    }
}

fn setup() -> (Coordinator, Arc<TwoShards>) {
    let hlc = Arc::new(Hlc::default());
    let hasher = KeyHasher::default();
    let snapshots = Arc::new(Snapshots::default());
    let shard = |i| {
        let mut s = Shard::new(i, 2, hasher, hlc.clone());
        s.keep_history(snapshots.clone());
        Mutex::new(s)
    };
    let placement = Arc::new(TwoShards {
        shards: [shard(0), shard(1)],
        hlc: hlc.clone(),
        snapshots,
        opened: Mutex::new(Vec::new()),
        modes: Mutex::new(Vec::new()),
    });
    let node = NodeContext::new(1, hlc, hasher, Vec::new(), placement.clone());
    (Coordinator::new(Arc::new(node), None), placement)
}

/// A key of `c` on shard `index`, named after `stem`.
fn key_on(c: &Coordinator, stem: &str, index: u64) -> Bytes {
    (0..)
        .map(|i| Bytes::from(format!("{stem}{i}")))
        .find(|k| c.hash(k) % 2 == index)
        .expect("some key hashes there")
}

fn op(c: &Coordinator, key: &Bytes, op: Op) -> KeyOp {
    KeyOp {
        key: key.clone(),
        hash: c.hash(key),
        op,
    }
}

fn set(v: &str) -> Op {
    Op::Set {
        value: Bytes::copy_from_slice(v.as_bytes()),
        cond: SetCond::Always,
        expiry: Expiry::Clear,
        reply: SetReply::Ok,
    }
}

/// `key` as of `snapshot`, read on its shard.
fn read_at(c: &Coordinator, p: &TwoShards, key: &Bytes, snapshot: &SnapshotGuard) -> Option<Bytes> {
    let hashed = HashedKey {
        key: key.clone(),
        hash: c.hash(key),
    };
    let mut shard = p.shards[(hashed.hash % 2) as usize].lock().unwrap();
    let state = shard.op_read_at(&hashed, Some(snapshot.ts())).unwrap();
    assert!(state.snapshot, "read as of the snapshot");
    state.current.map(|v| v.value)
}

/// Runs `pipeline` (after `before`), then reads every key it writes as of
/// each snapshot opened before a held part ran: each must show the value
/// the pipeline left there (opened after the pivot's step, the snapshot is
/// after the whole pipeline).
async fn check(pipeline: &[(Bytes, &str)], before: &[(Bytes, &str)]) {
    let (c, p) = setup();
    let ops = |kvs: &[(Bytes, &str)]| kvs.iter().map(|(k, v)| op(&c, k, set(v))).collect();
    let got = c.run_lone(ops(before), AckLevel::Local).await;
    assert!(got.iter().all(|r| r == &Ok(OpReply::Ok)), "{got:?}");
    p.opened.lock().unwrap().clear();
    p.modes.lock().unwrap().clear();

    let got = c.run_lone(ops(pipeline), AckLevel::Local).await;
    assert_eq!(got, vec![Ok(OpReply::Ok); pipeline.len()]);
    let modes = p.modes.lock().unwrap().clone();
    assert!(
        matches!(modes[0], BatchMode::AllOrNone { block } if block == 2 * pipeline.len() as u64),
        "one pivot step reserves for every write: {modes:?}"
    );
    let opened = std::mem::take(&mut *p.opened.lock().unwrap());
    assert!(!opened.is_empty(), "a held part ran: {modes:?}");
    for snapshot in &opened {
        for (i, (key, _)) in pipeline.iter().enumerate() {
            // The last value the pipeline wrote to this key.
            let last = pipeline[i..]
                .iter()
                .rev()
                .find(|(k, _)| k == key)
                .map(|(_, v)| Bytes::copy_from_slice(v.as_bytes()));
            assert_eq!(
                read_at(&c, &p, key, snapshot),
                last,
                "key {key:?} as of a snapshot opened after the pivot's step"
            );
        }
    }
}

#[tokio::test]
async fn a_snapshot_after_the_pivot_sees_every_part_of_the_pipeline() {
    let (c, _) = setup();
    let (a, b) = (key_on(&c, "a", 0), key_on(&c, "b", 1));
    let before = [(a.clone(), "a0"), (b.clone(), "b0")];
    // The pivot is the first op's shard (neither is this thread's): the
    // held part runs the later command, the one G-single-item showed
    // without the earlier.
    check(&[(a.clone(), "a1"), (b.clone(), "b1")], &before).await;
    check(&[(b.clone(), "b1"), (a.clone(), "a1")], &before).await;
}

#[tokio::test]
async fn each_part_stamps_its_own_slice_of_the_block() {
    let (c, _) = setup();
    let (a1, a2) = (key_on(&c, "a", 0), key_on(&c, "c", 0));
    let (b1, b2) = (key_on(&c, "b", 1), key_on(&c, "d", 1));
    let before = [(a1.clone(), "0"), (b1.clone(), "0"), (b2.clone(), "0")];
    // Several writes per part, a key written twice in the held part (its
    // order kept), keys created by the pipeline.
    check(
        &[
            (a1.clone(), "1"),
            (b1.clone(), "2"),
            (b1.clone(), "3"),
            (a2.clone(), "4"),
            (b2.clone(), "5"),
            (b1.clone(), "6"),
        ],
        &before,
    )
    .await;
}

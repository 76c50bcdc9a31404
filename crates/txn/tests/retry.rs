//! A request that keeps meeting Busy answers — a key's primary that never
//! settles, as when two nodes' views of the ring disagree for long — gives
//! up with TRYAGAIN after `RETRY_FOR` instead of keeping its client
//! waiting forever; every retry asks the placement for the route again.
//! (Simulated time: the ten seconds pass at once.)

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use bytes::Bytes;
use elsa_lattice::Hlc;
use elsa_shard::{AckLevel, KeyHasher, KeyOp, Op, Refusal, ShardMsg};
use elsa_txn::router::{Coordinator, NodeContext, Placement, ShardId, RETRY_FOR};
use elsa_txn::TxnError;

/// Every key lives on node 2, which answers every request Busy.
struct AlwaysBusy {
    routes: AtomicUsize,
}

impl Placement for AlwaysBusy {
    fn route(&self, _hash: u64) -> ShardId {
        self.routes.fetch_add(1, Ordering::Relaxed);
        ShardId { node: 2, index: 0 }
    }

    fn send_remote(&self, _to: ShardId, msg: ShardMsg) {
        match msg {
            ShardMsg::Batch { ops, reply, .. } => {
                let _ = reply.send(elsa_shard::BatchAnswer::new(Vec::new(), ops));
            }
            ShardMsg::Read { reply, .. } => {
                let _ = reply.send(Err(Refusal::Busy));
            }
            ShardMsg::Exec { reply, .. } => {
                let _ = reply.send(Err(Refusal::Busy));
            }
            _ => {}
        }
    }
}

fn coordinator() -> (Coordinator, Arc<AlwaysBusy>) {
    let placement = Arc::new(AlwaysBusy {
        routes: AtomicUsize::new(0),
    });
    let node = NodeContext::new(
        1,
        Arc::new(Hlc::default()),
        KeyHasher::default(),
        Vec::new(),
        placement.clone(),
    );
    (Coordinator::new(Arc::new(node), None), placement)
}

fn get(c: &Coordinator, key: &str) -> KeyOp {
    KeyOp {
        key: Bytes::from(key.to_string()),
        hash: c.hash(key.as_bytes()),
        op: Op::Get,
    }
}

#[tokio::test(start_paused = true)]
async fn lone_commands_give_up_with_tryagain() {
    let (c, placement) = coordinator();
    let started = tokio::time::Instant::now();
    let got = c
        .run_lone(vec![get(&c, "a"), get(&c, "b")], AckLevel::Region)
        .await;
    assert_eq!(
        got,
        vec![Err(TxnError::TryAgain); 2],
        "one reply per command"
    );
    assert!(started.elapsed() >= RETRY_FOR, "gave up too early");
    assert!(
        placement.routes.load(Ordering::Relaxed) > 10,
        "retries must route again"
    );
    assert!(TxnError::TryAgain.to_string().starts_with("TRYAGAIN "));
}

#[tokio::test(start_paused = true)]
async fn reads_and_multi_exec_give_up_with_tryagain() {
    let (c, _) = coordinator();
    let key = c.hashed(Bytes::from_static(b"k"));
    assert_eq!(
        elsa_txn::txn::read(&c, key, AckLevel::Region, None)
            .await
            .map(|_| ()),
        Err(TxnError::TryAgain)
    );
    assert_eq!(
        c.run_atomic(vec![get(&c, "x")], Vec::new(), AckLevel::Region)
            .await,
        Err(TxnError::TryAgain)
    );
}

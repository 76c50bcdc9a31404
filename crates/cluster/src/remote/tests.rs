//! The wire form of shard messages: a pipeline's batch modes and blocks
//! of timestamps survive the trip to another node's shard and back.

use super::*;
use elsa_shard::Op;

fn batch(mode: BatchMode) -> (ShardMsg, oneshot::Receiver<BatchAnswer>) {
    let (reply, rx) = oneshot::channel();
    let ops = vec![KeyOp {
        key: Bytes::from_static(b"k"),
        hash: 7,
        op: Op::Get,
    }];
    let msg = ShardMsg::Batch {
        ops,
        mode,
        ack: AckLevel::Local,
        reply,
    };
    (msg, rx)
}

/// A pipeline's batch modes, blocks of timestamps included, reach the
/// other node's shard as they were sent (`elsa_txn::lone`), and a
/// pivot's block comes back with its answer.
#[tokio::test]
async fn batch_modes_and_blocks_cross_the_wire() {
    for mode in [
        BatchMode::Prefix,
        BatchMode::AllOrNone { block: 0 },
        BatchMode::AllOrNone { block: 12 },
        BatchMode::Held {
            txn: 5,
            block: None,
        },
        BatchMode::Held {
            txn: 5,
            block: Some((1 << 40, (1 << 40) + 3)),
        },
    ] {
        let (msg, mut caller) = batch(mode);
        let (call, done) = encode(msg).expect("batches leave the node");
        let call = Call::decode(call.encode_to_vec().as_slice()).unwrap();
        let (inbox, mut shard) = mpsc::unbounded_channel();
        let started = start(call, &inbox).expect("well-formed");
        let Some(ShardMsg::Batch {
            mode: got, reply, ..
        }) = shard.recv().await
        else {
            panic!("a batch arrives");
        };
        assert_eq!(got, mode);
        let block = matches!(mode, BatchMode::AllOrNone { block } if block > 0).then_some(1 << 40);
        let _ = reply.send(BatchAnswer {
            replies: vec![OpReply::Nil],
            rest: Vec::new(),
            block,
        });
        let answer = finish(started).await.unwrap().expect("answered");
        let answer = Answer::decode(answer.encode_to_vec().as_slice()).unwrap();
        done.expect("a completer")(answer);
        let back = caller.try_recv().unwrap();
        assert_eq!(back.replies, vec![OpReply::Nil]);
        assert_eq!(back.block, block);
    }
}

#[test]
fn a_held_block_that_ends_before_it_starts_is_malformed() {
    let (msg, _caller) = batch(BatchMode::Held {
        txn: 5,
        block: Some((10, 20)),
    });
    let (mut call, _) = encode(msg).unwrap();
    (call.start_ts, call.commit_ts) = (20, 10);
    let (inbox, _shard) = mpsc::unbounded_channel();
    assert!(matches!(start(call, &inbox), Err(ServeError::Malformed)));
}

//! What a shard spends per op, without the network, the runtime or the
//! client: a pipeline's batch of lone commands as the server hands it over
//! (`ShardMsg::Batch`, answered through its channel), with the log on and
//! written per batch as the server writes it (`appendfsync no`). Issue 18's
//! "Elsa's own code per request": compare a change's figures with the
//! figures before it (`cargo bench -p elsa-shard --bench ops`), not with
//! Redis (whose server loop is not in here).

use std::sync::Arc;

use bytes::Bytes;
use criterion::{criterion_group, criterion_main, BatchSize, Criterion, Throughput};
use elsa_lattice::Hlc;
use elsa_shard::ops::hashes::{HSetReply, HashOp};
use elsa_shard::wal::files::DataDir;
use elsa_shard::wal::{Fsync, Wal};
use elsa_shard::{
    AckLevel, BatchMode, Expiry, KeyHasher, KeyOp, Op, SetCond, SetReply, Shard, ShardMsg,
};

/// Commands per batch: `redis-benchmark -P 16`.
const PIPELINE: usize = 16;
/// Keys the random-key workloads spread over.
const KEYS: usize = 100_000;

struct Bench {
    shard: Shard,
    hasher: KeyHasher,
    dir: std::path::PathBuf,
}

impl Bench {
    fn new(tag: &str) -> Bench {
        let dir = std::env::temp_dir().join(format!("elsa-bench-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let data = DataDir::open(&dir).expect("data dir");
        let hasher = KeyHasher::default();
        let mut shard = Shard::new(0, 1, hasher, Arc::new(Hlc::default()));
        let seg = data.create_segment(1, 0, true).expect("segment");
        shard.attach_wal(Wal::new(Box::new(seg), Fsync::No), data, 1);
        shard.run_alone();
        Bench { shard, hasher, dir }
    }

    /// One batch, as a connection hands it over, then the log write that
    /// follows it.
    fn run(&mut self, ops: Vec<KeyOp>) {
        let (reply, mut rx) = tokio::sync::oneshot::channel();
        self.shard.handle(ShardMsg::Batch {
            ops,
            mode: BatchMode::Prefix,
            ack: AckLevel::Local,
            reply,
        });
        self.shard.flush_wal();
        let answer = rx.try_recv().expect("answered");
        assert_eq!(answer.rest.len(), 0);
        std::hint::black_box(answer);
    }
}

impl Drop for Bench {
    fn drop(&mut self) {
        self.shard.close_wal();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn kop(hasher: &KeyHasher, key: &[u8], op: Op) -> KeyOp {
    let key = Bytes::copy_from_slice(key);
    KeyOp {
        hash: std::hash::BuildHasher::hash_one(hasher, &key[..]),
        key,
        op,
    }
}

fn set(value: &Bytes) -> Op {
    Op::Set {
        value: value.clone(),
        cond: SetCond::Always,
        expiry: Expiry::Clear,
        reply: SetReply::Ok,
    }
}

fn key(i: usize) -> Vec<u8> {
    format!("key:{:012}", i).into_bytes()
}

fn strings(c: &mut Criterion) {
    let value = Bytes::from(vec![b'x'; 3]);
    let mut g = c.benchmark_group("strings");
    g.throughput(Throughput::Elements(PIPELINE as u64));
    for (name, hot) in [("hot", true), ("random", false)] {
        let mut b = Bench::new(&format!("set-{name}"));
        let h = b.hasher;
        let mut i = 0usize;
        for (what, op) in [("set", set(&value)), ("get", Op::Get)] {
            // GETs after the SETs: every key exists.
            g.bench_function(format!("{what}/{name}"), |bench| {
                bench.iter_batched(
                    || {
                        (0..PIPELINE)
                            .map(|_| {
                                i = (i + 7919) % KEYS;
                                let k = if hot { key(0) } else { key(i) };
                                kop(&h, &k, op.clone())
                            })
                            .collect::<Vec<_>>()
                    },
                    |ops| b.run(ops),
                    BatchSize::SmallInput,
                )
            });
        }
    }
    g.finish();
}

/// YCSB-A's records (`workloads/workloada`: 1,000 of them): a hash of ten
/// 100-byte fields; an update sets one field, a read gets them all. One
/// command per batch (no pipelining).
fn hashes(c: &mut Criterion) {
    const RECORDS: usize = 1_000;
    let mut b = Bench::new("hashes");
    let h = b.hasher;
    let value = Bytes::from(vec![b'v'; 100]);
    let field = |f: usize| Bytes::from(format!("field{f}"));
    for r in 0..RECORDS {
        let pairs = (0..10).map(|f| (field(f), value.clone())).collect();
        let op = kop(
            &h,
            &key(r),
            Op::Hash(HashOp::Set {
                pairs,
                reply: HSetReply::Count,
            }),
        );
        b.run(vec![op]);
    }
    let mut g = c.benchmark_group("hashes");
    g.throughput(Throughput::Elements(1));
    let mut i = 0usize;
    g.bench_function("hset-one-field", |bench| {
        bench.iter_batched(
            || {
                i = (i + 7919) % RECORDS;
                let pairs = vec![(field(i % 10), value.clone())];
                vec![kop(
                    &h,
                    &key(i),
                    Op::Hash(HashOp::Set {
                        pairs,
                        reply: HSetReply::Count,
                    }),
                )]
            },
            |ops| b.run(ops),
            BatchSize::SmallInput,
        )
    });
    g.bench_function("hgetall", |bench| {
        bench.iter_batched(
            || {
                i = (i + 7919) % RECORDS;
                vec![kop(&h, &key(i), Op::Hash(HashOp::GetAll))]
            },
            |ops| b.run(ops),
            BatchSize::SmallInput,
        )
    });
    g.finish();
}

criterion_group!(benches, strings, hashes);
criterion_main!(benches);

//! Forwarded shard requests: a [`ShardMsg`] for a shard on another node of
//! the region is encoded as a [`Call`], answered there by the same actor
//! step a local message gets, and the [`Answer`] fulfils the caller's
//! reply channel. The transaction code never knows the shard was remote.

use bytes::Bytes;
use elsa_lattice::Version;
use elsa_shard::wal::codec::LogEntry;
use elsa_shard::{
    AckLevel, BatchAnswer, BatchMode, Check, CommitRequest, Current, Expect, HashedKey, HoldMode,
    KeyOp, OpReply, PrepareRequest, ReadState, Refusal, ShardMsg, Write,
};
use prost::Message;
use tokio::sync::{mpsc, oneshot};

use crate::wire::{typed_bytes, typed_from, Lattice};
use elsa_shard::ops::Value;

mod ops;
use ops::{key_op, op_msg, reply, reply_msg};
pub use ops::{OpMsg, ReplyMsg};

#[derive(Clone, PartialEq, Message)]
pub struct CheckMsg {
    #[prost(bytes = "bytes", tag = "1")]
    pub key: Bytes,
    #[prost(uint64, tag = "2")]
    pub hash: u64,
    /// 0 = exact version, 1 = committed before `ts`, 2 = exact version
    /// and live until `until`, 3 = key set of database `origin` unchanged
    /// since `ts`, 4 = another region's versions installed in order
    /// (`order_ts`/`order_origin`, see `Expect::InOrder`).
    #[prost(uint32, tag = "3")]
    pub kind: u32,
    #[prost(uint64, tag = "4")]
    pub ts: u64,
    #[prost(uint32, tag = "5")]
    pub origin: u32,
    #[prost(uint64, tag = "6")]
    pub until: u64,
    #[prost(uint64, repeated, tag = "7")]
    pub order_ts: Vec<u64>,
    #[prost(uint32, repeated, tag = "8")]
    pub order_origin: Vec<u32>,
}

#[derive(Clone, PartialEq, Message)]
pub struct WriteMsg {
    #[prost(bytes = "bytes", tag = "1")]
    pub key: Bytes,
    #[prost(uint64, tag = "2")]
    pub hash: u64,
    #[prost(bytes = "bytes", optional, tag = "3")]
    pub value: Option<Bytes>,
    #[prost(uint64, optional, tag = "4")]
    pub expire_ms: Option<u64>,
    /// A typed value written whole, in place of `value`.
    #[prost(bytes = "bytes", optional, tag = "5")]
    pub typed: Option<Bytes>,
    /// The typed state the transaction read (`Write::base`).
    #[prost(bytes = "bytes", optional, tag = "6")]
    pub base: Option<Bytes>,
    /// The settled delta (`Write::delta`).
    #[prost(bytes = "bytes", optional, tag = "7")]
    pub delta: Option<Bytes>,
    /// A change of the TTL alone: the value's write (`Current::ttl_of`).
    #[prost(uint64, optional, tag = "8")]
    pub ttl_of_ts: Option<u64>,
    #[prost(uint32, optional, tag = "9")]
    pub ttl_of_origin: Option<u32>,
}

#[derive(Clone, PartialEq, Message)]
pub struct HoldMsg {
    #[prost(bytes = "bytes", tag = "1")]
    pub key: Bytes,
    #[prost(uint64, tag = "2")]
    pub hash: u64,
    #[prost(bool, tag = "3")]
    pub write: bool,
}

#[derive(Clone, PartialEq, Message)]
pub struct StateMsg {
    #[prost(bytes = "bytes", optional, tag = "1")]
    pub value: Option<Bytes>,
    #[prost(uint64, optional, tag = "2")]
    pub expire_ms: Option<u64>,
    #[prost(uint64, tag = "3")]
    pub commit_ts: u64,
    #[prost(uint32, tag = "4")]
    pub origin: u32,
    /// The key's typed state, if it holds one.
    #[prost(bytes = "bytes", optional, tag = "5")]
    pub typed: Option<Bytes>,
    /// `ReadState::ttl_of`.
    #[prost(uint64, optional, tag = "6")]
    pub ttl_of_ts: Option<u64>,
    #[prost(uint32, optional, tag = "7")]
    pub ttl_of_origin: Option<u32>,
}

/// [`Call::kind`] of a prepare (hold + validate).
pub const PREPARE: u32 = 4;

/// A forwarded request. `kind`: 1 batch, 2 read, 3 commit, 4 prepare,
/// 5 shadow holds, 6 install, 7 release, 8 exec, 9 synchronous
/// replication push (`entries`), 10 install of other regions' transactions
/// under holds (`entries`), 11 a call between ownership groups (`raft`).
#[derive(Clone, PartialEq, Message)]
pub struct Call {
    #[prost(uint32, tag = "1")]
    pub kind: u32,
    #[prost(message, repeated, tag = "2")]
    pub ops: Vec<OpMsg>,
    #[prost(message, repeated, tag = "3")]
    pub checks: Vec<CheckMsg>,
    #[prost(message, repeated, tag = "4")]
    pub writes: Vec<WriteMsg>,
    #[prost(message, repeated, tag = "5")]
    pub holds: Vec<HoldMsg>,
    #[prost(message, repeated, tag = "6")]
    pub entries: Vec<Lattice>,
    #[prost(uint64, tag = "7")]
    pub txn: u64,
    #[prost(uint64, tag = "8")]
    pub start_ts: u64,
    #[prost(uint64, tag = "9")]
    pub commit_ts: u64,
    #[prost(bool, tag = "10")]
    pub want_states: bool,
    #[prost(bool, tag = "11")]
    pub retry_on_busy: bool,
    /// A batch's mode: 0 prefix, 1 all-or-none, 2 under the holds of `txn`.
    #[prost(uint32, tag = "12")]
    pub batch_mode: u32,
    /// Acknowledgement level: 0 local, 1 region, 2 all.
    #[prost(uint32, tag = "13")]
    pub ack: u32,
    /// An install's version origin (the coordinator's node).
    #[prost(uint32, tag = "14")]
    pub origin: u32,
    /// A pivot batch's (mode 1) block of timestamps to reserve; a held
    /// batch's (mode 2) slice of it is `start_ts..=commit_ts`.
    #[prost(uint64, tag = "15")]
    pub block: u64,
    /// A prepare or a commit that waits for held keys
    /// (`PrepareRequest::wait`, `CommitRequest::wait`).
    #[prost(bool, tag = "16")]
    pub wait: bool,
    /// Kind 11: the ownership group's request (`crate::owners::net`).
    #[prost(bytes = "bytes", tag = "17")]
    pub raft: Bytes,
    /// Kind 10: the same install's lattices on other shards
    /// (`ShardMsg::InstallRemote::others`).
    #[prost(message, repeated, tag = "18")]
    pub others: Vec<Lattice>,
}

fn holds_of(holds: Vec<HoldMsg>) -> Vec<(HashedKey, HoldMode)> {
    holds
        .into_iter()
        .map(|h| {
            let mode = if h.write {
                HoldMode::Write
            } else {
                HoldMode::Read
            };
            (
                HashedKey {
                    key: h.key,
                    hash: h.hash,
                },
                mode,
            )
        })
        .collect()
}

fn ack_code(a: AckLevel) -> u32 {
    match a {
        AckLevel::Local => 0,
        AckLevel::Region => 1,
        AckLevel::All => 2,
    }
}

fn ack_level(code: u32) -> Result<AckLevel, ServeError> {
    match code {
        0 => Ok(AckLevel::Local),
        1 => Ok(AckLevel::Region),
        2 => Ok(AckLevel::All),
        _ => Err(ServeError::Malformed),
    }
}

impl Call {
    /// True for the follow-up of a prepare (it must reach the shard that
    /// holds the keys, whatever the views say now); false for new work.
    pub fn follows_holds(&self) -> bool {
        (5..=7).contains(&self.kind) || self.kind == 10 || (self.kind == 1 && self.batch_mode == 2)
    }

    /// True for a transactional read or a prepare: its answer reports what
    /// the keys held when the shard ran it and changes nothing a retry
    /// would repeat (a refused prepare's holds are released by its
    /// coordinator), so it can be refused after the fact when the node
    /// stopped being their primary before answering. (Lone batches,
    /// commits and EXECs change data: an answer withheld after they ran
    /// would have the caller run them twice.)
    pub fn answers_from_state(&self) -> bool {
        matches!(self.kind, 2 | 4)
    }
}

/// The answer to a [`Call`].
#[derive(Clone, PartialEq, Message)]
pub struct Answer {
    /// 0 = none, 1 busy, 2 conflict (`refusal_key`), 3 unavailable (`refusal_text`).
    #[prost(uint32, tag = "1")]
    pub refusal: u32,
    #[prost(bytes = "bytes", tag = "2")]
    pub refusal_key: Bytes,
    #[prost(string, tag = "3")]
    pub refusal_text: String,
    #[prost(message, repeated, tag = "4")]
    pub replies: Vec<ReplyMsg>,
    #[prost(message, repeated, tag = "5")]
    pub states: Vec<StateMsg>,
    #[prost(uint64, tag = "6")]
    pub ts: u64,
    /// An ownership group's reply (to a call of kind 11).
    #[prost(bytes = "bytes", tag = "7")]
    pub raft: Bytes,
}

/// Fulfils a caller's reply channel from an answer (or drops it).
pub type Completer = Box<dyn FnOnce(Answer) + Send>;

fn check_msg(c: &Check) -> CheckMsg {
    let (kind, ts, origin) = match c.expect {
        Expect::Version(v) => (0, v.commit_ts, v.origin),
        Expect::LiveVersion(v, _) => (2, v.commit_ts, v.origin),
        Expect::CommittedBefore(ts) => (1, ts, 0),
        Expect::KeysetBefore(db, ts) => (3, ts, u32::from(db)),
        Expect::InOrder(_) => (4, 0, 0),
    };
    let (order_ts, order_origin) = match &c.expect {
        Expect::InOrder(versions) => versions.iter().map(|v| (v.commit_ts, v.origin)).unzip(),
        _ => (Vec::new(), Vec::new()),
    };
    CheckMsg {
        key: c.key.key.clone(),
        hash: c.key.hash,
        kind,
        ts,
        origin,
        until: match c.expect {
            Expect::LiveVersion(_, until) => until,
            _ => 0,
        },
        order_ts,
        order_origin,
    }
}

fn check(m: CheckMsg) -> Check {
    Check {
        key: HashedKey {
            key: m.key,
            hash: m.hash,
        },
        expect: match m.kind {
            0 => Expect::Version(Version::new(m.ts, m.origin)),
            2 => Expect::LiveVersion(Version::new(m.ts, m.origin), m.until),
            3 => Expect::KeysetBefore(m.origin as u8, m.ts),
            4 => {
                let mut versions: Vec<Version> = m
                    .order_ts
                    .iter()
                    .zip(&m.order_origin)
                    .map(|(&ts, &origin)| Version::new(ts, origin))
                    .collect();
                // Rising, as the check reads them, whatever the peer sent.
                versions.sort_unstable();
                versions.dedup();
                Expect::InOrder(versions)
            }
            _ => Expect::CommittedBefore(m.ts),
        },
    }
}

fn write_msg(w: &Write) -> WriteMsg {
    let (value, expire_ms, typed, ttl_of) = match &w.state {
        None => (None, None, None, None),
        Some(Value::Str(c)) => (Some(c.value.clone()), c.expire_ms, None, c.ttl_of),
        Some(Value::Typed(s)) => (None, None, Some(typed_bytes(s)), None),
    };
    WriteMsg {
        key: w.key.key.clone(),
        hash: w.key.hash,
        value,
        expire_ms,
        typed,
        base: w.base.as_deref().map(typed_bytes),
        delta: w.delta.as_deref().map(typed_bytes),
        ttl_of_ts: ttl_of.map(|v| v.commit_ts),
        ttl_of_origin: ttl_of.map(|v| v.origin),
    }
}

fn write(m: WriteMsg) -> Write {
    let state = match (m.typed, m.value) {
        (Some(t), _) => Some(Value::Typed(typed_from(t))),
        (None, value) => value.map(|value| {
            Value::Str(Current {
                value,
                expire_ms: m.expire_ms,
                ttl_of: m
                    .ttl_of_ts
                    .map(|ts| Version::new(ts, m.ttl_of_origin.unwrap_or(0))),
            })
        }),
    };
    Write {
        key: HashedKey {
            key: m.key,
            hash: m.hash,
        },
        state,
        base: m.base.map(typed_from),
        delta: m.delta.map(typed_from),
        // Not shipped: a remote shard settles against every element.
        touched: None,
    }
}

fn state_msg(s: &ReadState) -> StateMsg {
    StateMsg {
        value: s.current.as_ref().map(|c| c.value.clone()),
        expire_ms: s.current.as_ref().and_then(|c| c.expire_ms),
        commit_ts: s.version.commit_ts,
        origin: s.version.origin,
        typed: s.typed.as_deref().map(typed_bytes),
        ttl_of_ts: s.ttl_of.map(|v| v.commit_ts),
        ttl_of_origin: s.ttl_of.map(|v| v.origin),
    }
}

fn state(m: StateMsg) -> ReadState {
    ReadState {
        current: m.value.map(|value| Current {
            value,
            expire_ms: m.expire_ms,
            ttl_of: None,
        }),
        typed: m.typed.map(typed_from),
        version: Version::new(m.commit_ts, m.origin),
        ttl_of: m
            .ttl_of_ts
            .map(|ts| Version::new(ts, m.ttl_of_origin.unwrap_or(0))),
        snapshot: false,
        latest_expire_ms: None,
    }
}

/// The shard's error and status texts are `&'static`: map known ones back.
fn refusal_into(a: &mut Answer, r: &Refusal) {
    match r {
        Refusal::Busy => a.refusal = 1,
        Refusal::Conflict(k) => (a.refusal, a.refusal_key) = (2, k.clone()),
        Refusal::Unavailable(t) => (a.refusal, a.refusal_text) = (3, t.clone()),
    }
}

fn refusal_of(a: &Answer) -> Option<Refusal> {
    match a.refusal {
        0 => None,
        1 => Some(Refusal::Busy),
        2 => Some(Refusal::Conflict(a.refusal_key.clone())),
        _ => Some(Refusal::Unavailable(a.refusal_text.clone())),
    }
}

fn result<T>(a: Answer, ok: impl FnOnce(Answer) -> T) -> Result<T, Refusal> {
    match refusal_of(&a) {
        Some(r) => Err(r),
        None => Ok(ok(a)),
    }
}

/// Splits a message for a remote shard into the call to send and what to
/// do with the answer. `None` for messages that never leave a node
/// (administration, anti-entropy, peer merges): they are dropped, and the
/// caller sees the shard as gone.
pub fn encode(msg: ShardMsg) -> Option<(Call, Option<Completer>)> {
    let mut call = Call::default();
    let done: Option<Completer> = match msg {
        ShardMsg::Batch {
            ops,
            mode,
            ack,
            reply,
        } => {
            call.kind = 1;
            call.ack = ack_code(ack);
            call.ops = ops.iter().map(op_msg).collect();
            match mode {
                BatchMode::Prefix => call.batch_mode = 0,
                BatchMode::AllOrNone { block } => (call.batch_mode, call.block) = (1, block),
                BatchMode::Held { txn, block } => {
                    (call.batch_mode, call.txn) = (2, txn);
                    if let Some((first, last)) = block {
                        (call.start_ts, call.commit_ts) = (first, last);
                    }
                }
            }
            Some(Box::new(move |a: Answer| {
                let replies: Vec<OpReply> = a.replies.into_iter().map(reply_fn).collect();
                let rest = ops[replies.len().min(ops.len())..].to_vec();
                let _ = reply.send(BatchAnswer {
                    replies,
                    rest,
                    // A pivot's block (checked like every answer's `ts`).
                    block: (a.ts != 0).then_some(a.ts),
                });
            }))
        }
        // Snapshot reads are a lone node's (`elsa_shard::history`): a
        // read that crosses nodes is of the latest state.
        ShardMsg::Read {
            key, ack, reply, ..
        } => {
            call.kind = 2;
            call.ack = ack_code(ack);
            call.ops = vec![OpMsg {
                key: key.key,
                hash: key.hash,
                ..Default::default()
            }];
            Some(Box::new(move |a: Answer| {
                let _ = reply.send(result(a, |a| {
                    a.states.into_iter().next().map(state).unwrap_or(ReadState {
                        current: None,
                        typed: None,
                        version: Version::ZERO,
                        ttl_of: None,
                        snapshot: false,
                        latest_expire_ms: None,
                    })
                }));
            }))
        }
        ShardMsg::Commit { req, ack, reply } => {
            call.kind = 3;
            call.ack = ack_code(ack);
            call.checks = req.checks.iter().map(check_msg).collect();
            call.writes = req.writes.iter().map(write_msg).collect();
            call.start_ts = req.start_ts;
            call.wait = req.wait;
            Some(Box::new(move |a: Answer| {
                let _ = reply.send(result(a, |a| a.ts));
            }))
        }
        ShardMsg::Prepare { req, ack, reply } => {
            call.kind = PREPARE;
            call.ack = ack_code(ack);
            call.txn = req.txn;
            call.checks = req.checks.iter().map(check_msg).collect();
            call.holds = req
                .holds
                .iter()
                .map(|(k, mode)| HoldMsg {
                    key: k.key.clone(),
                    hash: k.hash,
                    write: *mode == HoldMode::Write,
                })
                .collect();
            call.want_states = req.want_states;
            call.retry_on_busy = req.retry_on_busy;
            call.wait = req.wait;
            Some(Box::new(move |a: Answer| {
                let _ = reply.send(result(a, |a| a.states.into_iter().map(state).collect()));
            }))
        }
        ShardMsg::Shadow { txn, holds, reply } => {
            call.kind = 5;
            call.txn = txn;
            call.holds = holds
                .iter()
                .map(|(k, mode)| HoldMsg {
                    key: k.key.clone(),
                    hash: k.hash,
                    write: *mode == HoldMode::Write,
                })
                .collect();
            Some(Box::new(move |_| {
                let _ = reply.send(());
            }))
        }
        ShardMsg::Install {
            txn,
            writes,
            start_ts,
            commit_ts,
            origin,
            ack,
            reply,
        } => {
            call.kind = 6;
            call.ack = ack_code(ack);
            call.txn = txn;
            call.writes = writes.iter().map(write_msg).collect();
            call.start_ts = start_ts;
            call.commit_ts = commit_ts;
            call.origin = origin;
            Some(Box::new(move |a: Answer| {
                let _ = reply.send(result(a, |_| ()));
            }))
        }
        ShardMsg::InstallRemote {
            txn,
            entries,
            others,
            reply,
        } => {
            call.kind = 10;
            call.txn = txn;
            call.entries = entries.iter().map(Lattice::from).collect();
            call.others = others.iter().map(Lattice::from).collect();
            Some(Box::new(move |a: Answer| {
                let _ = reply.send(result(a, |_| ()));
            }))
        }
        ShardMsg::Release { txn } => {
            call.kind = 7;
            call.txn = txn;
            None
        }
        ShardMsg::Exec {
            checks,
            ops,
            ack,
            reply,
        } => {
            call.kind = 8;
            call.ack = ack_code(ack);
            call.checks = checks.iter().map(check_msg).collect();
            call.ops = ops.iter().map(op_msg).collect();
            Some(Box::new(move |a: Answer| {
                let _ = reply.send(result(a, |a| a.replies.into_iter().map(reply_fn).collect()));
            }))
        }
        _ => return None,
    };
    Some((call, done))
}

fn reply_fn(m: ReplyMsg) -> OpReply {
    reply(m)
}

/// Why a call could not be served.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    #[error("malformed call")]
    Malformed,
    #[error("shard is gone")]
    Gone,
}

/// A call posted to its shard, its answer still to come.
pub enum Started {
    Batch(oneshot::Receiver<BatchAnswer>),
    Exec(oneshot::Receiver<Result<Vec<OpReply>, Refusal>>),
    Read(oneshot::Receiver<Result<ReadState, Refusal>>),
    Commit(oneshot::Receiver<Result<u64, Refusal>>),
    Prepare(oneshot::Receiver<Result<Vec<ReadState>, Refusal>>),
    Shadow(oneshot::Receiver<()>),
    Install(oneshot::Receiver<Result<(), Refusal>>),
    /// Nothing to answer (release).
    Nothing,
}

/// Posts a call to a local shard's inbox, synchronously, so calls from one
/// connection reach the shard in the order they were sent (a release after
/// a prepare must not overtake it).
pub fn start(call: Call, inbox: &mpsc::UnboundedSender<ShardMsg>) -> Result<Started, ServeError> {
    let send = |m: ShardMsg| inbox.send(m).map_err(|_| ServeError::Gone);
    let ack = ack_level(call.ack)?;
    Ok(match call.kind {
        1 | 8 => {
            let ops: Option<Vec<KeyOp>> = call.ops.into_iter().map(key_op).collect();
            let ops = ops.ok_or(ServeError::Malformed)?;
            if call.kind == 1 {
                let mode = match call.batch_mode {
                    0 => BatchMode::Prefix,
                    1 => BatchMode::AllOrNone { block: call.block },
                    2 => BatchMode::Held {
                        txn: call.txn,
                        block: match (call.start_ts, call.commit_ts) {
                            (0, 0) => None,
                            (first, last) if first <= last => Some((first, last)),
                            _ => return Err(ServeError::Malformed),
                        },
                    },
                    _ => return Err(ServeError::Malformed),
                };
                let (reply, rx) = oneshot::channel();
                send(ShardMsg::Batch {
                    ops,
                    mode,
                    ack,
                    reply,
                })?;
                Started::Batch(rx)
            } else {
                let (reply, rx) = oneshot::channel();
                let checks = call.checks.into_iter().map(check).collect();
                send(ShardMsg::Exec {
                    checks,
                    ops,
                    ack,
                    reply,
                })?;
                Started::Exec(rx)
            }
        }
        2 => {
            let m = call.ops.into_iter().next().ok_or(ServeError::Malformed)?;
            let (reply, rx) = oneshot::channel();
            let key = HashedKey {
                key: m.key,
                hash: m.hash,
            };
            send(ShardMsg::Read {
                key,
                at: None,
                ack,
                reply,
            })?;
            Started::Read(rx)
        }
        3 => {
            let (reply, rx) = oneshot::channel();
            let req = CommitRequest {
                checks: call.checks.into_iter().map(check).collect(),
                writes: call.writes.into_iter().map(write).collect(),
                start_ts: call.start_ts,
                wait: call.wait,
            };
            send(ShardMsg::Commit { req, ack, reply })?;
            Started::Commit(rx)
        }
        4 => {
            let (reply, rx) = oneshot::channel();
            let req = PrepareRequest {
                txn: call.txn,
                checks: call.checks.into_iter().map(check).collect(),
                holds: holds_of(call.holds),
                want_states: call.want_states,
                retry_on_busy: call.retry_on_busy,
                wait: call.wait,
            };
            send(ShardMsg::Prepare { req, ack, reply })?;
            Started::Prepare(rx)
        }
        5 => {
            let (reply, rx) = oneshot::channel();
            send(ShardMsg::Shadow {
                txn: call.txn,
                holds: holds_of(call.holds),
                reply,
            })?;
            Started::Shadow(rx)
        }
        6 => {
            let (reply, rx) = oneshot::channel();
            send(ShardMsg::Install {
                txn: call.txn,
                writes: call.writes.into_iter().map(write).collect(),
                start_ts: call.start_ts,
                commit_ts: call.commit_ts,
                origin: call.origin,
                ack,
                reply,
            })?;
            Started::Install(rx)
        }
        7 => {
            send(ShardMsg::Release { txn: call.txn })?;
            Started::Nothing
        }
        10 => {
            let (reply, rx) = oneshot::channel();
            send(ShardMsg::InstallRemote {
                txn: call.txn,
                entries: call.entries.into_iter().map(LogEntry::from).collect(),
                others: call.others.into_iter().map(LogEntry::from).collect(),
                reply,
            })?;
            Started::Install(rx)
        }
        _ => return Err(ServeError::Malformed),
    })
}

/// Awaits a started call's answer and encodes it (`None`: no answer due).
pub async fn finish(started: Started) -> Result<Option<Answer>, ServeError> {
    let gone = |_| ServeError::Gone;
    let mut a = Answer::default();
    let refused = |a: &mut Answer, r: Refusal| refusal_into(a, &r);
    match started {
        Started::Batch(rx) => {
            let answer = rx.await.map_err(gone)?;
            a.replies = answer.replies.iter().map(reply_msg).collect();
            a.ts = answer.block.unwrap_or(0);
        }
        Started::Exec(rx) => match rx.await.map_err(gone)? {
            Ok(r) => a.replies = r.iter().map(reply_msg).collect(),
            Err(r) => refused(&mut a, r),
        },
        Started::Read(rx) => match rx.await.map_err(gone)? {
            Ok(s) => a.states = vec![state_msg(&s)],
            Err(r) => refused(&mut a, r),
        },
        Started::Commit(rx) => match rx.await.map_err(gone)? {
            Ok(ts) => a.ts = ts,
            Err(r) => refused(&mut a, r),
        },
        Started::Prepare(rx) => match rx.await.map_err(gone)? {
            Ok(states) => a.states = states.iter().map(state_msg).collect(),
            Err(r) => refused(&mut a, r),
        },
        Started::Shadow(rx) => rx.await.map_err(gone)?,
        Started::Install(rx) => {
            if let Err(r) = rx.await.map_err(gone)? {
                refused(&mut a, r);
            }
        }
        Started::Nothing => return Ok(None),
    }
    Ok(Some(a))
}

#[cfg(test)]
mod tests;

//! DUMP and RESTORE (RESTORE-ASKING too), with Redis 7.0's payload
//! (`rdb`): a value dumped by redis-server restores here and one dumped
//! here restores into redis-server.
//!
//! Both run as one snapshot-isolated transaction of the ordinary
//! commands, as SORT does: DUMP reads the key's type and its whole value
//! (GET, LRANGE, SMEMBERS, ZRANGE … WITHSCORES, HGETALL) at one moment;
//! RESTORE checks the key, deletes it with REPLACE, writes the value (SET,
//! RPUSH, SADD, ZADD, HSET) and its expiry (PEXPIREAT), all committed at
//! once, so the key's lattices and replication are those of the commands
//! themselves. A stream has no such commands (a group's pending entries
//! and consumers keep their times): DUMP reads its state whole and RESTORE
//! writes it whole, through two internal stream ops (`xstate`,
//! `xrestore`), as `COPY` writes one. IDLETIME and FREQ are checked and
//! otherwise ignored: Elsa's access clock starts again at the restore.

pub mod rdb;

use bytes::Bytes;
use elsa_shard::notify::Event;
use elsa_shard::OpReply;
use elsa_txn::{Txn, TxnError};

use crate::cmd::{int_arg, is};
use crate::conn::{run_in_txn, Answer, Conn, InTxn};

/// RESTORE's arguments, checked as far as Redis checks them before it
/// looks at the key.
struct RestoreArgs {
    key: Bytes,
    ttl: Bytes,
    payload: Bytes,
    replace: bool,
    absttl: bool,
    /// IDLETIME or FREQ, set on the key's clock once the restore committed.
    access: Option<elsa_shard::evict::Restored>,
}

fn parse_restore(args: &[Bytes]) -> Result<RestoreArgs, String> {
    let (mut replace, mut absttl) = (false, false);
    let (mut idle, mut freq) = (false, false);
    let mut access = None;
    let mut j = 4;
    while j < args.len() {
        let more = j + 1 < args.len();
        let a = &args[j];
        if is(a, "REPLACE") {
            replace = true;
        } else if is(a, "ABSTTL") {
            absttl = true;
        } else if is(a, "IDLETIME") && more && !freq {
            let n = int_arg(&args[j + 1]).map_err(|e| e.0)?;
            if n < 0 {
                return Err("ERR Invalid IDLETIME value, must be >= 0".into());
            }
            idle = true;
            access = Some(elsa_shard::evict::Restored::Idle(n as u64));
            j += 1;
        } else if is(a, "FREQ") && more && !idle {
            let n = int_arg(&args[j + 1]).map_err(|e| e.0)?;
            if !(0..=255).contains(&n) {
                return Err("ERR Invalid FREQ value, must be >= 0 and <= 255".into());
            }
            freq = true;
            access = Some(elsa_shard::evict::Restored::Freq(n as u8));
            j += 1;
        } else {
            return Err("ERR syntax error".into());
        }
        j += 1;
    }
    Ok(RestoreArgs {
        key: args[1].clone(),
        ttl: args[2].clone(),
        payload: args[3].clone(),
        replace,
        absttl,
        access,
    })
}

fn word(w: &'static str) -> Bytes {
    Bytes::from_static(w.as_bytes())
}

/// The command an attempt runs.
enum Job {
    Dump(Bytes),
    Restore(RestoreArgs),
}

impl InTxn for Job {
    async fn attempt(&self, c: &Conn, txn: &mut Txn) -> Result<Answer, TxnError> {
        match self {
            Job::Dump(key) => c.dump_in(txn, key.clone()).await,
            Job::Restore(r) => c.restore_in(txn, r).await,
        }
    }
}

impl Conn {
    /// DUMP key
    pub(crate) async fn dump(&mut self, args: &[Bytes]) {
        self.in_own_txn(&Job::Dump(args[1].clone())).await;
    }

    /// RESTORE key ttl serialized-value [REPLACE] [ABSTTL] [IDLETIME s]
    /// [FREQ f]
    pub(crate) async fn restore(&mut self, args: &[Bytes]) {
        let r = match parse_restore(args) {
            Ok(r) => r,
            Err(e) => return self.w().error(&e),
        };
        let (key, access, alone) = (r.key.clone(), r.access, self.s.txn.is_none());
        let restored = self.in_own_txn(&Job::Restore(r)).await.is_some();
        // The clock is the node's own record, not replicated data: set once
        // the value is there (inside BEGIN or EXEC the restore's clock
        // starts at its commit).
        if let (true, true, Some(to)) = (restored, alone, access) {
            let dc = crate::cmd::DataCmd {
                ops: vec![(self.db_key(&key), elsa_shard::Op::SetAccess(to))],
                shape: crate::cmd::Shape::One,
            };
            let _ = self.run_once(dc).await;
        }
    }

    async fn dump_in(&self, txn: &mut Txn, key: Bytes) -> Result<Answer, TxnError> {
        let kind = match self.read_in(txn, vec![word("type"), key.clone()]).await? {
            OpReply::Status(t) => t,
            _ => "none",
        };
        let all = |c: &'static str| vec![word(c), key.clone(), word("0"), word("-1")];
        let value = match kind {
            "none" => return Ok(Answer::Reply(OpReply::Nil)),
            "string" => match self.read_in(txn, vec![word("get"), key.clone()]).await? {
                OpReply::Bulk(b) => rdb::Value::Str(b),
                _ => return Ok(Answer::Reply(OpReply::Nil)),
            },
            "list" => rdb::Value::List(bulks(self.read_in(txn, all("lrange")).await?)),
            "set" => rdb::Value::Set(bulks(
                self.read_in(txn, vec![word("smembers"), key.clone()])
                    .await?,
            )),
            "zset" => {
                let mut line = all("zrange");
                line.push(word("withscores"));
                match self.read_in(txn, line).await? {
                    OpReply::Scored(pairs) => rdb::Value::ZSet(pairs),
                    _ => return Ok(Answer::Reply(OpReply::Nil)),
                }
            }
            "hash" => match self
                .read_in(txn, vec![word("hgetall"), key.clone()])
                .await?
            {
                OpReply::Map(m) => rdb::Value::Hash(
                    m.iter()
                        .map(|(f, v)| (Bytes::copy_from_slice(f), Bytes::copy_from_slice(v)))
                        .collect(),
                ),
                _ => return Ok(Answer::Reply(OpReply::Nil)),
            },
            "stream" => match self
                .stream_op(txn, vec![word("xstate"), key.clone()])
                .await?
            {
                OpReply::Bulk(b) => {
                    match elsa_lattice::KeyState::from_bytes(b).and_then(|s| s.collection) {
                        Some(elsa_lattice::Collection::Stream(x)) => {
                            rdb::Value::Stream(Box::new(x.to_parts()))
                        }
                        _ => return Ok(Answer::Reply(OpReply::Nil)),
                    }
                }
                _ => return Ok(Answer::Reply(OpReply::Nil)),
            },
            other => {
                return Ok(Answer::Refused(format!(
                    "ERR DUMP of a {other} is not supported"
                )))
            }
        };
        Ok(Answer::Reply(OpReply::Bulk(rdb::dump(&value).into())))
    }

    async fn restore_in(&self, txn: &mut Txn, r: &RestoreArgs) -> Result<Answer, TxnError> {
        let exists = matches!(
            self.read_in(txn, vec![word("exists"), r.key.clone()]).await?,
            OpReply::Int(n) if n > 0
        );
        if exists && !r.replace {
            return Ok(Answer::Refused(
                "BUSYKEY Target key name already exists.".into(),
            ));
        }
        let ttl = match int_arg(&r.ttl) {
            Ok(n) if n < 0 => {
                return Ok(Answer::Refused(
                    "ERR Invalid TTL value, must be >= 0".into(),
                ))
            }
            Ok(n) => n,
            Err(e) => return Ok(Answer::Refused(e.0)),
        };
        let value = match rdb::restore(&r.payload) {
            Ok(v) => v,
            Err(rdb::Refused::VersionOrChecksum) => {
                return Ok(Answer::Refused(
                    "ERR DUMP payload version or checksum are wrong".into(),
                ))
            }
            Err(rdb::Refused::BadFormat) => {
                return Ok(Answer::Refused("ERR Bad data format".into()))
            }
        };
        let mark = txn.events_len();
        if r.replace && exists {
            self.read_in(txn, vec![word("del"), r.key.clone()]).await?;
        }
        let at = match (ttl, r.absttl) {
            (0, _) => None,
            (t, true) => Some(t),
            (t, false) => Some(elsa_shard::unix_ms() as i64 + t),
        };
        if at.is_some_and(|at| at <= elsa_shard::unix_ms() as i64) {
            // Already expired: nothing is written (the key deleted above
            // stays deleted), as in Redis.
            return Ok(Answer::Reply(OpReply::Ok));
        }
        if let rdb::Value::Stream(parts) = value {
            let Some(x) =
                elsa_lattice::stream::Stream::from_parts(*parts, elsa_lattice::Version::new(1, 0))
            else {
                return Ok(Answer::Refused("ERR Bad data format".into()));
            };
            let state = elsa_lattice::KeyState::of(elsa_lattice::Collection::Stream(Box::new(x)));
            let line = vec![word("xrestore"), r.key.clone(), state.to_bytes().into()];
            if let OpReply::Error(e) = self.stream_op(txn, line).await? {
                return Ok(Answer::Refused(e.to_string()));
            }
        } else {
            for line in writes(&r.key, value) {
                if let OpReply::Error(e) = self.read_in(txn, line).await? {
                    return Ok(Answer::Refused(e.to_string()));
                }
            }
        }
        if let Some(at) = at {
            let line = vec![
                word("pexpireat"),
                r.key.clone(),
                Bytes::from(at.to_string()),
            ];
            self.read_in(txn, line).await?;
        }
        // Redis tells a restore as `new` and `restore` (it deletes a
        // replaced key silently), not as the writes above.
        txn.retell_events(mark, |_| {
            let key = self.db_key(&r.key);
            vec![
                Event {
                    class: elsa_shard::notify::NEW,
                    name: "new",
                    key: key.clone(),
                },
                Event {
                    class: elsa_shard::notify::GENERIC,
                    name: "restore",
                    key,
                },
            ]
        });
        Ok(Answer::Reply(OpReply::Ok))
    }
}

impl Conn {
    /// Runs an internal stream op (`xstate`, `xrestore`: no client
    /// command reaches them) on its key within `txn`.
    async fn stream_op(&self, txn: &mut Txn, line: Vec<Bytes>) -> Result<OpReply, TxnError> {
        let key = self.db_key(&line[1]);
        let op = match elsa_shard::ops::streams::StreamOp::parse(line) {
            Ok(op) => op,
            Err(_) => return Ok(OpReply::Nil),
        };
        let ops = vec![(key, elsa_shard::Op::Streams(op))];
        let mut replies = run_in_txn(&self.coord, txn, ops).await?;
        Ok(if replies.is_empty() {
            OpReply::Nil
        } else {
            replies.swap_remove(0)
        })
    }
}

/// The commands that write `value` at `key` (in batches of at most 512
/// elements each).
fn writes(key: &Bytes, value: rdb::Value) -> Vec<Vec<Bytes>> {
    const BATCH: usize = 512;
    let head = |c: &'static str| vec![word(c), key.clone()];
    match value {
        rdb::Value::Str(s) => vec![vec![word("set"), key.clone(), s]],
        rdb::Value::List(items) => items
            .chunks(BATCH)
            .map(|c| head("rpush").into_iter().chain(c.iter().cloned()).collect())
            .collect(),
        rdb::Value::Set(members) => members
            .chunks(BATCH)
            .map(|c| head("sadd").into_iter().chain(c.iter().cloned()).collect())
            .collect(),
        rdb::Value::ZSet(pairs) => pairs
            .chunks(BATCH)
            .map(|c| {
                let mut line = head("zadd");
                for (m, s) in c {
                    line.push(Bytes::from(score_text(*s)));
                    line.push(m.clone());
                }
                line
            })
            .collect(),
        rdb::Value::Stream(_) => unreachable!("a stream is written whole"),
        rdb::Value::Hash(pairs) => pairs
            .chunks(BATCH)
            .map(|c| {
                let mut line = head("hset");
                for (f, v) in c {
                    line.push(f.clone());
                    line.push(v.clone());
                }
                line
            })
            .collect(),
    }
}

/// A score as text ZADD reads back to the same double (Rust prints the
/// shortest text that round-trips, and `inf`/`-inf`, which ZADD takes).
fn score_text(s: f64) -> String {
    format!("{s:?}")
}

fn bulks(r: OpReply) -> Vec<Bytes> {
    match r {
        OpReply::Array(items) => items
            .into_iter()
            .filter_map(|i| match i {
                OpReply::Bulk(b) => Some(b),
                _ => None,
            })
            .collect(),
        OpReply::Set(items) => items,
        _ => Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scores_read_back_exactly() {
        for s in [
            1.0,
            -0.5,
            1e-300,
            123_456_789.123,
            f64::INFINITY,
            f64::NEG_INFINITY,
            0.1 + 0.2,
        ] {
            let t = score_text(s);
            let back = elsa_shard::ops::zparse::parse_double(t.as_bytes()).unwrap();
            assert_eq!(back.to_bits(), s.to_bits(), "{t}");
        }
    }

    #[test]
    fn options_are_checked_as_redis_checks_them() {
        let a = |s: &str| -> Vec<Bytes> {
            s.split(' ')
                .map(|w| Bytes::copy_from_slice(w.as_bytes()))
                .collect()
        };
        assert!(parse_restore(&a("RESTORE k 0 p REPLACE ABSTTL")).is_ok());
        assert!(parse_restore(&a("RESTORE k 0 p IDLETIME 5")).is_ok());
        assert_eq!(
            parse_restore(&a("RESTORE k 0 p IDLETIME -1"))
                .err()
                .unwrap(),
            "ERR Invalid IDLETIME value, must be >= 0"
        );
        assert_eq!(
            parse_restore(&a("RESTORE k 0 p FREQ 256")).err().unwrap(),
            "ERR Invalid FREQ value, must be >= 0 and <= 255"
        );
        assert_eq!(
            parse_restore(&a("RESTORE k 0 p FREQ 1 IDLETIME 1"))
                .err()
                .unwrap(),
            "ERR syntax error"
        );
        assert_eq!(
            parse_restore(&a("RESTORE k 0 p IDLETIME")).err().unwrap(),
            "ERR syntax error"
        );
    }
}

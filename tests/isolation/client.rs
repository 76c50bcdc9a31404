//! Runs one generated transaction against a live Elsa: either Elsa's own
//! interactive form (`BEGIN RC|RR|SI` … `COMMIT`) or Redis's optimistic form
//! (`WATCH` + `GET`, then `MULTI` … `EXEC`), and says how it ended.

use redis::{Connection, RedisError, Value};

use crate::workload::{redis_key, Mop, Seen, Workload};

/// How a transaction is run: an interactive isolation level, or WATCH/MULTI.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Level {
    Rc,
    Rr,
    Si,
    /// `WATCH` the keys read before the first write, `GET` them, then queue
    /// the rest in `MULTI` … `EXEC` (nil = aborted).
    Watch,
}

impl Level {
    pub fn name(self) -> &'static str {
        match self {
            Level::Rc => "RC",
            Level::Rr => "RR",
            Level::Si => "SI",
            Level::Watch => "WATCH",
        }
    }
}

/// How a transaction ended.
#[derive(Debug)]
pub enum Outcome {
    /// Committed, at this commit timestamp when the server says.
    Committed(Option<i64>),
    /// Lost a conflict (`-CONFLICT`, or `EXEC` answered nil): not committed.
    Conflict,
    /// Not committed because something unexpected happened before the commit
    /// was asked for (an error reply, a broken connection, a garbled value).
    Rejected(String),
    /// Might have committed: the commit's answer was lost or unexpected.
    Unknown(String),
}

/// Why a step failed.
enum StepError {
    Conflict,
    /// The connection is gone or timed out.
    Io(String),
    /// An error reply or an answer of the wrong shape; the connection is fine.
    Reply(String),
}

impl From<RedisError> for StepError {
    fn from(e: RedisError) -> Self {
        if e.code() == Some("CONFLICT") {
            StepError::Conflict
        } else if e.is_io_error() || e.is_timeout() || e.is_connection_dropped() {
            StepError::Io(e.to_string())
        } else {
            StepError::Reply(e.to_string())
        }
    }
}

impl StepError {
    fn message(self) -> String {
        match self {
            StepError::Conflict => "unexpected CONFLICT before COMMIT".into(),
            StepError::Io(m) => format!("connection: {m}"),
            StepError::Reply(m) => m,
        }
    }
}

fn query(con: &mut Connection, cmd: &redis::Cmd) -> Result<Value, StepError> {
    Ok(cmd.query::<Value>(con)?)
}

fn expect_status(v: Value, want: &str) -> Result<(), StepError> {
    match v {
        Value::Okay if want == "OK" => Ok(()),
        Value::SimpleString(s) if s == want => Ok(()),
        other => Err(StepError::Reply(format!("expected +{want}, got {other:?}"))),
    }
}

/// Decodes a GET answer into what the micro-op saw.
fn decode(workload: Workload, key: u64, v: Value) -> Result<Seen, StepError> {
    let text = match v {
        Value::Nil => None,
        Value::BulkString(b) => {
            Some(String::from_utf8(b).map_err(|e| StepError::Reply(e.to_string()))?)
        }
        Value::SimpleString(s) => Some(s),
        other => {
            return Err(StepError::Reply(format!(
                "GET {}: unexpected answer {other:?}",
                redis_key(key)
            )))
        }
    };
    let garbled =
        |t: &str| StepError::Reply(format!("GET {}: garbled value {t:?}", redis_key(key)));
    match workload {
        Workload::ListAppend => {
            let elems = match &text {
                None => Vec::new(),
                Some(t) => t
                    .split_whitespace()
                    .map(str::parse)
                    .collect::<Result<Vec<u64>, _>>()
                    .map_err(|_| garbled(t))?,
            };
            Ok(Seen::List(elems))
        }
        Workload::RwRegister => match &text {
            None => Ok(Seen::Reg(None)),
            Some(t) => t
                .parse()
                .map(|v| Seen::Reg(Some(v)))
                .map_err(|_| garbled(t)),
        },
    }
}

/// The command for a write micro-op.
fn write_cmd(m: &Mop) -> redis::Cmd {
    match *m {
        Mop::Append { key, value } => {
            let mut c = redis::cmd("APPEND");
            c.arg(redis_key(key)).arg(format!(" {value}"));
            c
        }
        Mop::Write { key, value } => {
            let mut c = redis::cmd("SET");
            c.arg(redis_key(key)).arg(value.to_string());
            c
        }
        Mop::Read { .. } => unreachable!("not a write"),
    }
}

fn get_cmd(key: u64) -> redis::Cmd {
    let mut c = redis::cmd("GET");
    c.arg(redis_key(key));
    c
}

/// Checks a write's answer: APPEND answers the new length, SET answers OK.
fn check_write(m: &Mop, v: Value) -> Result<(), StepError> {
    match (m, v) {
        (Mop::Append { .. }, Value::Int(n)) if n > 0 => Ok(()),
        (Mop::Write { .. }, v) => expect_status(v, "OK"),
        (m, v) => Err(StepError::Reply(format!("{m:?}: unexpected answer {v:?}"))),
    }
}

/// Runs `txn` once at `level`, filling in what its reads saw. The caller
/// should reconnect after `Rejected` or `Unknown`: the connection's state is
/// then not known.
pub fn run(con: &mut Connection, level: Level, workload: Workload, txn: &mut [Mop]) -> Outcome {
    match level {
        Level::Watch => run_watch(con, workload, txn),
        _ => run_begin(con, level, workload, txn),
    }
}

fn run_begin(con: &mut Connection, level: Level, workload: Workload, txn: &mut [Mop]) -> Outcome {
    let body = |con: &mut Connection, txn: &mut [Mop]| -> Result<(), StepError> {
        expect_status(query(con, redis::cmd("BEGIN").arg(level.name()))?, "OK")?;
        for m in txn.iter_mut() {
            if let Mop::Read { key, seen } = m {
                *seen = Some(decode(workload, *key, query(con, &get_cmd(*key))?)?);
            } else {
                let v = query(con, &write_cmd(m))?;
                check_write(m, v)?;
            }
        }
        Ok(())
    };
    if let Err(e) = body(con, txn) {
        let _ = redis::cmd("ABORT").query::<Value>(con);
        return Outcome::Rejected(e.message());
    }
    match redis::cmd("COMMIT")
        .query::<Value>(con)
        .map_err(StepError::from)
    {
        Ok(Value::Int(ts)) => Outcome::Committed(Some(ts)),
        Ok(other) => Outcome::Unknown(format!("COMMIT answered {other:?}")),
        Err(StepError::Conflict) => Outcome::Conflict,
        Err(e) => Outcome::Unknown(format!("COMMIT: {}", e.message())),
    }
}

fn run_watch(con: &mut Connection, workload: Workload, txn: &mut [Mop]) -> Outcome {
    let split = txn.iter().position(Mop::is_write).unwrap_or(txn.len());
    let before = |con: &mut Connection, txn: &mut [Mop]| -> Result<(), StepError> {
        let mut watched: Vec<String> = txn[..split].iter().map(|m| redis_key(m.key())).collect();
        watched.sort();
        watched.dedup();
        if !watched.is_empty() {
            expect_status(query(con, redis::cmd("WATCH").arg(&watched))?, "OK")?;
        }
        for m in txn[..split].iter_mut() {
            if let Mop::Read { key, seen } = m {
                *seen = Some(decode(workload, *key, query(con, &get_cmd(*key))?)?);
            }
        }
        expect_status(query(con, &redis::cmd("MULTI"))?, "OK")?;
        for m in &txn[split..] {
            let cmd = match m {
                Mop::Read { key, .. } => get_cmd(*key),
                _ => write_cmd(m),
            };
            expect_status(query(con, &cmd)?, "QUEUED")?;
        }
        Ok(())
    };
    if let Err(e) = before(con, txn) {
        // Ends MULTI if it began, and drops the watches either way.
        let _ = redis::cmd("DISCARD").query::<Value>(con);
        let _ = redis::cmd("UNWATCH").query::<Value>(con);
        return Outcome::Rejected(e.message());
    }
    let answers = match redis::cmd("EXEC")
        .query::<Value>(con)
        .map_err(StepError::from)
    {
        Ok(Value::Nil) => return Outcome::Conflict,
        Ok(Value::Array(items)) => items,
        Ok(other) => return Outcome::Unknown(format!("EXEC answered {other:?}")),
        Err(e) => return Outcome::Unknown(format!("EXEC: {}", e.message())),
    };
    if answers.len() != txn.len() - split {
        return Outcome::Unknown(format!(
            "EXEC answered {} replies for {} commands",
            answers.len(),
            txn.len() - split
        ));
    }
    for (m, v) in txn[split..].iter_mut().zip(answers) {
        let step = match m {
            Mop::Read { key, seen } => decode(workload, *key, v).map(|s| *seen = Some(s)),
            _ => check_write(m, v),
        };
        if let Err(e) = step {
            // EXEC ran: the transaction committed, but a reply is wrong.
            return Outcome::Unknown(format!("inside EXEC: {}", e.message()));
        }
    }
    Outcome::Committed(None)
}

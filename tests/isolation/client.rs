//! Runs one generated transaction against a live Elsa: either Elsa's own
//! interactive form (`BEGIN RC|RR|SI` … `COMMIT`) or Redis's optimistic form
//! (`WATCH` + `GET`, then `MULTI` … `EXEC`), and says how it ended — or a
//! pipeline of lone commands, and how each of them ended.
//!
//! [`run_with`] adds what the edge-case runs need ([`Extras`]): read-only
//! admin commands queued inside MULTI between the data commands, TTL riders
//! (`SET … PX`, `PEXPIRE`), and a pause before the commit so TTLs run out
//! meanwhile; it notes what a history cannot hold ([`Trace`]).

use std::time::{Duration, Instant};

use redis::{Connection, ConnectionLike, RedisError, Value};

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
    fn is_io(&self) -> bool {
        matches!(self, StepError::Io(_))
    }

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

/// Decodes a read's answer (LRANGE's for list-append, GET's for
/// rw-register) into what the micro-op saw.
fn decode(workload: Workload, key: u64, v: Value) -> Result<Seen, StepError> {
    if workload == Workload::ListAppend {
        return decode_list(key, v);
    }
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
    if workload == Workload::StringAppend {
        let elems = match &text {
            None => Vec::new(),
            Some(t) => t
                .split_whitespace()
                .map(str::parse)
                .collect::<Result<Vec<u64>, _>>()
                .map_err(|_| garbled(t))?,
        };
        return Ok(Seen::List(elems));
    }
    match &text {
        None => Ok(Seen::Reg(None)),
        Some(t) => t
            .parse()
            .map(|v| Seen::Reg(Some(v)))
            .map_err(|_| garbled(t)),
    }
}

/// Decodes `LRANGE k 0 -1`: the list's elements, oldest first (a missing
/// key is an empty list).
fn decode_list(key: u64, v: Value) -> Result<Seen, StepError> {
    let garbled = |what: &dyn std::fmt::Debug| {
        StepError::Reply(format!(
            "LRANGE {}: garbled answer {what:?}",
            redis_key(key)
        ))
    };
    let Value::Array(items) = v else {
        return Err(garbled(&v));
    };
    let elems = items
        .iter()
        .map(|item| match item {
            Value::BulkString(b) => std::str::from_utf8(b).ok().and_then(|t| t.parse().ok()),
            _ => None,
        })
        .collect::<Option<Vec<u64>>>()
        .ok_or_else(|| garbled(&items))?;
    Ok(Seen::List(elems))
}

/// The command for a write micro-op.
pub fn write_cmd(workload: Workload, m: &Mop) -> redis::Cmd {
    match *m {
        Mop::Append { key, value } if workload == Workload::StringAppend => {
            let mut c = redis::cmd("APPEND");
            c.arg(redis_key(key)).arg(format!(" {value}"));
            c
        }
        Mop::Append { key, value } => {
            let mut c = redis::cmd("RPUSH");
            c.arg(redis_key(key)).arg(value.to_string());
            c
        }
        Mop::Write { key, value } if workload == Workload::ZsetRegister => {
            let mut c = redis::cmd("ZADD");
            c.arg(redis_key(key)).arg(value).arg("m");
            c
        }
        Mop::Write { key, value } if workload == Workload::HashRegister => {
            let mut c = redis::cmd("HSET");
            c.arg(redis_key(key)).arg("v").arg(value.to_string());
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

/// The read of a micro-op: Elle's native list read for list-append.
fn get_cmd(workload: Workload, key: u64) -> redis::Cmd {
    match workload {
        Workload::ListAppend => {
            let mut c = redis::cmd("LRANGE");
            c.arg(redis_key(key)).arg(0).arg(-1);
            c
        }
        Workload::RwRegister | Workload::StringAppend => {
            let mut c = redis::cmd("GET");
            c.arg(redis_key(key));
            c
        }
        Workload::HashRegister => {
            let mut c = redis::cmd("HGET");
            c.arg(redis_key(key)).arg("v");
            c
        }
        Workload::ZsetRegister => {
            let mut c = redis::cmd("ZSCORE");
            c.arg(redis_key(key)).arg("m");
            c
        }
    }
}

/// Checks a write's answer: RPUSH answers the new length, SET answers OK,
/// HSET and ZADD how many fields or members they added (0 or 1).
fn check_write(m: &Mop, v: Value) -> Result<(), StepError> {
    match (m, v) {
        (Mop::Append { .. }, Value::Int(n)) if n > 0 => Ok(()),
        (Mop::Write { .. }, Value::Int(0 | 1)) => Ok(()),
        (Mop::Write { .. }, v) => expect_status(v, "OK"),
        (m, v) => Err(StepError::Reply(format!("{m:?}: unexpected answer {v:?}"))),
    }
}

/// A read-only admin command, queued inside MULTI or pipelined between
/// lone commands; its answer must not depend on (or disturb) the data
/// commands around it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Admin {
    Ping,
    /// `ECHO <token>`: the answer must be the token.
    Echo(u64),
    Dbsize,
    Time,
}

impl Admin {
    /// One of the four, at random.
    pub fn random(rng: &mut impl rand::Rng) -> Admin {
        match rng.gen_range(0..4) {
            0 => Admin::Ping,
            1 => Admin::Echo(rng.gen()),
            2 => Admin::Dbsize,
            _ => Admin::Time,
        }
    }

    fn cmd(&self) -> redis::Cmd {
        match self {
            Admin::Ping => redis::cmd("PING"),
            Admin::Echo(token) => {
                let mut c = redis::cmd("ECHO");
                c.arg(format!("echo-{token}"));
                c
            }
            Admin::Dbsize => redis::cmd("DBSIZE"),
            Admin::Time => redis::cmd("TIME"),
        }
    }

    /// Checks the answer's shape: `+PONG`, the echoed token, a count, and
    /// `[seconds, microseconds]`.
    fn check(&self, v: Value) -> Result<(), StepError> {
        let ok = match (self, &v) {
            (Admin::Ping, Value::SimpleString(s)) => s == "PONG",
            (Admin::Echo(token), Value::BulkString(b)) => *b == format!("echo-{token}").as_bytes(),
            (Admin::Dbsize, Value::Int(n)) => *n >= 0,
            (Admin::Time, Value::Array(parts)) => {
                parts.len() == 2
                    && parts.iter().all(|p| {
                        matches!(p, Value::BulkString(b)
                            if std::str::from_utf8(b).is_ok_and(|t| t.parse::<u64>().is_ok()))
                    })
            }
            _ => false,
        };
        if ok {
            Ok(())
        } else {
            Err(StepError::Reply(format!("{self:?} answered {v:?}")))
        }
    }
}

/// Where in a queue an admin command goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Slot {
    /// After every queued command.
    Last,
    /// Before the queued command at this position (modulo the queue's
    /// length plus one, so any number is valid).
    Anywhere(usize),
}

impl Slot {
    /// The index to insert at in a queue of `len`.
    fn index(self, len: usize) -> usize {
        match self {
            Slot::Last => len,
            Slot::Anywhere(at) => at % (len + 1),
        }
    }
}

/// What [`run_with`] adds to a plain transaction.
#[derive(Clone, Debug, Default)]
pub struct Extras {
    /// WATCH only: admin commands to queue inside MULTI, where [`Slot`]
    /// says.
    pub admin: Vec<(Slot, Admin)>,
    /// TTL riders, one per micro-op (or empty): `Some(ms)` on a write sends
    /// `SET k v PX ms`, on a read `PEXPIRE k ms` right after the read (in
    /// MULTI, first thing, for reads made before it).
    pub ttl: Vec<Option<u64>>,
    /// Pause after the reads before the commit (WATCH: before MULTI), so
    /// TTLs of what was read can run out meanwhile.
    pub linger: Duration,
}

/// What a run saw that a history cannot hold.
#[derive(Clone, Debug, Default)]
pub struct Trace {
    /// When `COMMIT` or `EXEC` was sent: a committed transaction's reads
    /// were all still current when it ran, which is after this.
    pub commit_sent: Option<Instant>,
    /// `PEXPIRE` answers: (micro-op index of the read it follows, whether
    /// the key existed).
    pub expired: Vec<(usize, bool)>,
}

/// Runs `txn` once at `level`, filling in what its reads saw. The caller
/// should reconnect after `Rejected` or `Unknown`: the connection's state is
/// then not known.
pub fn run(con: &mut Connection, level: Level, workload: Workload, txn: &mut [Mop]) -> Outcome {
    run_with(
        con,
        level,
        workload,
        txn,
        &Extras::default(),
        &mut Trace::default(),
    )
}

/// [`run`] with `extras`, noting what happened in `trace`.
pub fn run_with(
    con: &mut Connection,
    level: Level,
    workload: Workload,
    txn: &mut [Mop],
    extras: &Extras,
    trace: &mut Trace,
) -> Outcome {
    match level {
        Level::Watch => run_watch(con, workload, txn, extras, trace),
        _ => run_begin(con, level, workload, txn, extras, trace),
    }
}

fn ttl_of(extras: &Extras, i: usize) -> Option<u64> {
    extras.ttl.get(i).copied().flatten()
}

/// `PEXPIRE k ms`.
fn pexpire_cmd(key: u64, ms: u64) -> redis::Cmd {
    let mut c = redis::cmd("PEXPIRE");
    c.arg(redis_key(key)).arg(ms);
    c
}

/// A PEXPIRE answer: whether the key existed.
fn decode_pexpire(v: Value) -> Result<bool, StepError> {
    match v {
        Value::Int(1) => Ok(true),
        Value::Int(0) => Ok(false),
        other => Err(StepError::Reply(format!("PEXPIRE answered {other:?}"))),
    }
}

/// The command for write micro-op `m`, with its TTL rider if it rides on
/// the write itself (`SET … PX`; a hash's is a `PEXPIRE` after the
/// `HSET`: [`rider_after_write`]).
fn write_cmd_ttl(workload: Workload, m: &Mop, ttl: Option<u64>) -> redis::Cmd {
    let mut c = write_cmd(workload, m);
    if let Some(ms) = ttl {
        assert!(
            matches!(m, Mop::Write { .. }),
            "TTLs ride on writes to registers only"
        );
        if workload == Workload::RwRegister {
            c.arg("PX").arg(ms);
        }
    }
    c
}

/// True when write `m`'s TTL rider is a `PEXPIRE` sent after it: a hash
/// field's `HSET` or a member's `ZADD` takes no TTL (the key's stays as it
/// was, where `SET` would clear it; a key gets a TTL once and is not
/// written again, so the difference never shows).
fn rider_after_write(workload: Workload, ttl: Option<u64>) -> bool {
    ttl.is_some() && workload != Workload::RwRegister
}

fn run_begin(
    con: &mut Connection,
    level: Level,
    workload: Workload,
    txn: &mut [Mop],
    extras: &Extras,
    trace: &mut Trace,
) -> Outcome {
    let mut body = |con: &mut Connection, txn: &mut [Mop]| -> Result<(), StepError> {
        expect_status(query(con, redis::cmd("BEGIN").arg(level.name()))?, "OK")?;
        for (i, m) in txn.iter_mut().enumerate() {
            let ttl = ttl_of(extras, i);
            if let Mop::Read { key, seen } = m {
                *seen = Some(decode(
                    workload,
                    *key,
                    query(con, &get_cmd(workload, *key))?,
                )?);
                if let Some(ms) = ttl {
                    let existed = decode_pexpire(query(con, &pexpire_cmd(*key, ms))?)?;
                    trace.expired.push((i, existed));
                }
            } else {
                let v = query(con, &write_cmd_ttl(workload, m, ttl))?;
                check_write(m, v)?;
                if let Some(ms) = ttl.filter(|_| rider_after_write(workload, ttl)) {
                    // The key was just written: it exists.
                    if !decode_pexpire(query(con, &pexpire_cmd(m.key(), ms))?)? {
                        return Err(StepError::Reply(format!(
                            "PEXPIRE right after {m:?} found no key"
                        )));
                    }
                }
            }
        }
        Ok(())
    };
    if let Err(e) = body(con, txn) {
        // On a broken connection ABORT would only wait out its timeout;
        // the caller reconnects, which drops the transaction anyway.
        if !e.is_io() {
            let _ = redis::cmd("ABORT").query::<Value>(con);
        }
        return Outcome::Rejected(e.message());
    }
    if !extras.linger.is_zero() {
        std::thread::sleep(extras.linger);
    }
    trace.commit_sent = Some(Instant::now());
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

/// One command queued inside MULTI.
enum Queued {
    /// Micro-op `i` of the transaction.
    Mop(usize),
    /// `PEXPIRE` rider of read `i`.
    Expire(usize),
    Admin(Admin),
}

fn run_watch(
    con: &mut Connection,
    workload: Workload,
    txn: &mut [Mop],
    extras: &Extras,
    trace: &mut Trace,
) -> Outcome {
    let split = txn.iter().position(Mop::is_write).unwrap_or(txn.len());
    // What MULTI queues, in order: the riders of the reads made before it,
    // then the rest of the transaction (each read's rider right after it),
    // with the admin commands slotted in between.
    let mut queue: Vec<Queued> = (0..split)
        .filter(|&i| ttl_of(extras, i).is_some())
        .map(Queued::Expire)
        .collect();
    for (i, m) in txn.iter().enumerate().skip(split) {
        queue.push(Queued::Mop(i));
        let ttl = ttl_of(extras, i);
        if (!m.is_write() && ttl.is_some()) || (m.is_write() && rider_after_write(workload, ttl)) {
            queue.push(Queued::Expire(i));
        }
    }
    for (slot, admin) in &extras.admin {
        queue.insert(slot.index(queue.len()), Queued::Admin(admin.clone()));
    }
    let before = |con: &mut Connection, txn: &mut [Mop]| -> Result<(), StepError> {
        let mut watched: Vec<String> = txn[..split].iter().map(|m| redis_key(m.key())).collect();
        watched.sort();
        watched.dedup();
        if !watched.is_empty() {
            expect_status(query(con, redis::cmd("WATCH").arg(&watched))?, "OK")?;
        }
        for m in txn[..split].iter_mut() {
            if let Mop::Read { key, seen } = m {
                *seen = Some(decode(
                    workload,
                    *key,
                    query(con, &get_cmd(workload, *key))?,
                )?);
            }
        }
        if !extras.linger.is_zero() {
            std::thread::sleep(extras.linger);
        }
        expect_status(query(con, &redis::cmd("MULTI"))?, "OK")?;
        for q in &queue {
            let cmd = match q {
                Queued::Mop(i) => match &txn[*i] {
                    Mop::Read { key, .. } => get_cmd(workload, *key),
                    m => write_cmd_ttl(workload, m, ttl_of(extras, *i)),
                },
                Queued::Expire(i) => {
                    pexpire_cmd(txn[*i].key(), ttl_of(extras, *i).expect("a rider"))
                }
                Queued::Admin(a) => a.cmd(),
            };
            expect_status(query(con, &cmd)?, "QUEUED")?;
        }
        Ok(())
    };
    if let Err(e) = before(con, txn) {
        if !e.is_io() {
            // Ends MULTI if it began, and drops the watches either way.
            let _ = redis::cmd("DISCARD").query::<Value>(con);
            let _ = redis::cmd("UNWATCH").query::<Value>(con);
        }
        return Outcome::Rejected(e.message());
    }
    trace.commit_sent = Some(Instant::now());
    let answers = match redis::cmd("EXEC")
        .query::<Value>(con)
        .map_err(StepError::from)
    {
        Ok(Value::Nil) => return Outcome::Conflict,
        Ok(Value::Array(items)) => items,
        Ok(other) => return Outcome::Unknown(format!("EXEC answered {other:?}")),
        Err(e) => return Outcome::Unknown(format!("EXEC: {}", e.message())),
    };
    // One reply per queued command, in the order queued (admin commands
    // included): anything else and the replies cannot be matched up.
    if answers.len() != queue.len() {
        return Outcome::Unknown(format!(
            "EXEC answered {} replies for {} queued commands",
            answers.len(),
            queue.len()
        ));
    }
    for (q, v) in queue.iter().zip(answers) {
        let step = match q {
            Queued::Mop(i) => match &mut txn[*i] {
                Mop::Read { key, seen } => decode(workload, *key, v).map(|s| *seen = Some(s)),
                m => check_write(m, v),
            },
            Queued::Expire(i) => decode_pexpire(v).map(|existed| trace.expired.push((*i, existed))),
            Queued::Admin(a) => a.check(v),
        };
        if let Err(e) = step {
            // EXEC ran: the transaction committed, but a reply is wrong.
            return Outcome::Unknown(format!("inside EXEC: {}", e.message()));
        }
    }
    Outcome::Committed(None)
}

/// How one lone command of a pipeline ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Lone {
    /// Answered as expected (a read's `seen` is filled in).
    Done,
    /// Certainly had no effect: a read that got no usable answer (a read
    /// changes nothing, whatever happened to it).
    Failed(String),
    /// A write with an error or no answer: it may have run.
    Unknown(String),
}

/// Sends `ops` as one pipeline of lone commands (no MULTI), with `admin`
/// commands slotted in, and reads every reply. One outcome per op, in order;
/// the second value lists wrong admin answers. The caller should reconnect
/// if any op is not `Done`.
pub fn run_pipeline(
    con: &mut Connection,
    workload: Workload,
    ops: &mut [Mop],
    admin: &[(Slot, Admin)],
) -> (Vec<Lone>, Vec<String>) {
    // None = the op at that index; Some = an admin command.
    let mut order: Vec<(usize, Option<Admin>)> = (0..ops.len()).map(|i| (i, None)).collect();
    for (slot, a) in admin {
        order.insert(slot.index(order.len()), (usize::MAX, Some(a.clone())));
    }
    let mut pipe = redis::pipe();
    for (i, a) in &order {
        match a {
            Some(a) => pipe.add_command(a.cmd()),
            None => match &ops[*i] {
                Mop::Read { key, .. } => pipe.add_command(get_cmd(workload, *key)),
                m => pipe.add_command(write_cmd(workload, m)),
            },
        };
    }
    // `req_packed_commands` keeps each error reply in its place, where
    // `Pipeline::query` would turn the first into an error for all.
    let replies = match con.req_packed_commands(&pipe.get_packed_pipeline(), 0, order.len()) {
        Ok(r) if r.len() == order.len() => r,
        Ok(r) => {
            let why = format!("{} replies for {} commands", r.len(), order.len());
            return (no_answer(ops, &why), Vec::new());
        }
        Err(e) => return (no_answer(ops, &format!("connection: {e}")), Vec::new()),
    };
    let mut out = vec![Lone::Done; ops.len()];
    let mut wrong = Vec::new();
    for ((i, a), v) in order.into_iter().zip(replies) {
        if let Some(a) = a {
            if let Err(e) = a.check(v) {
                wrong.push(format!("pipelined {}", e.message()));
            }
            continue;
        }
        out[i] = match &mut ops[i] {
            Mop::Read { key, seen } => match decode(workload, *key, v) {
                Ok(s) => {
                    *seen = Some(s);
                    Lone::Done
                }
                Err(e) => Lone::Failed(e.message()),
            },
            m => match check_write(m, v) {
                Ok(()) => Lone::Done,
                // An error reply may say it did not run (TRYAGAIN), or that
                // its outcome is unknown; either way, maybe.
                Err(e) => Lone::Unknown(e.message()),
            },
        };
    }
    (out, wrong)
}

/// Every op of a pipeline that got no answers at all.
fn no_answer(ops: &[Mop], why: &str) -> Vec<Lone> {
    ops.iter()
        .map(|m| {
            if m.is_write() {
                Lone::Unknown(why.to_string())
            } else {
                Lone::Failed(why.to_string())
            }
        })
        .collect()
}

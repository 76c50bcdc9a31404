//! The clients of a linearizability run: each one connection to one node,
//! one operation at a time on a random key — `SET` of a unique value or
//! `GET` on register keys, `INCR`/`INCRBY` or `GET` on counter keys — each
//! recorded with its invoke and return time.
//!
//! A client whose operation gets an error or no answer within its timeout
//! records it with no return time (it may still take effect: a killed node
//! may have logged it, a paused one will run it when it wakes up), takes a
//! new process id, reconnects and backs off a little, so a dead node yields
//! a few indeterminate operations per client, not thousands. Failed reads
//! say nothing and are not recorded.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use redis::Value;

use crate::history::{Clock, Model, Op, F};

/// `n` register keys and `n` counter keys.
pub fn keys(registers: usize, counters: usize) -> Vec<(String, Model)> {
    (0..registers)
        .map(|i| (format!("lin:reg:{i}"), Model::Register))
        .chain((0..counters).map(|i| (format!("lin:ctr:{i}"), Model::Counter)))
        .collect()
}

/// What all clients of a run share.
#[derive(Clone)]
pub struct Shared {
    pub clock: Clock,
    pub keys: Arc<Vec<(String, Model)>>,
    /// Per-operation read/write timeout (and connect timeout).
    pub timeout: Duration,
    /// Process ids handed out so far.
    pub processes: Arc<AtomicUsize>,
    stop: Arc<AtomicBool>,
}

impl Shared {
    pub fn new(clock: Clock, keys: Vec<(String, Model)>, timeout: Duration) -> Shared {
        Shared {
            clock,
            keys: Arc::new(keys),
            timeout,
            processes: Arc::new(AtomicUsize::new(0)),
            stop: Arc::new(AtomicBool::new(false)),
        }
    }

    fn new_process(&self) -> usize {
        self.processes.fetch_add(1, Ordering::Relaxed)
    }
}

/// A connection to a loopback port whose every call gives up after
/// `timeout`.
fn connect(port: u16, timeout: Duration) -> redis::RedisResult<redis::Connection> {
    let client = redis::Client::open(format!("redis://127.0.0.1:{port}/"))?;
    let con = client.get_connection_with_timeout(timeout)?;
    con.set_read_timeout(Some(timeout))?;
    con.set_write_timeout(Some(timeout))?;
    Ok(con)
}

/// Running client threads; dropping them (a panicking test) stops them.
pub struct Clients {
    shared: Shared,
    threads: Vec<JoinHandle<Vec<Op>>>,
}

impl Clients {
    /// One thread per `(node id, port)` in `targets`, each its own seed.
    pub fn start(shared: &Shared, targets: &[(usize, u16)], seed: u64) -> Clients {
        let threads = targets
            .iter()
            .enumerate()
            .map(|(n, &(node, port))| {
                let shared = shared.clone();
                std::thread::Builder::new()
                    .name(format!("lin-client-{n}"))
                    .spawn(move || client(&shared, n, node, port, seed.wrapping_add(n as u64)))
                    .expect("spawn client")
            })
            .collect();
        Clients {
            shared: shared.clone(),
            threads,
        }
    }

    /// Stops every client and returns all their operations.
    pub fn finish(mut self) -> Vec<Op> {
        self.shared.stop.store(true, Ordering::Relaxed);
        let mut ops = Vec::new();
        for t in self.threads.drain(..) {
            ops.extend(t.join().expect("client thread"));
        }
        ops
    }
}

impl Drop for Clients {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::Relaxed);
    }
}

/// The operation a client sends.
enum Request {
    Set(String),
    Get,
    Incr(i64),
}

/// One client: operations until told to stop.
fn client(shared: &Shared, id: usize, node: usize, port: u16, seed: u64) -> Vec<Op> {
    let mut rng = StdRng::seed_from_u64(seed);
    let mut ops = Vec::new();
    let mut process = shared.new_process();
    let mut con: Option<redis::Connection> = None;
    let mut backoff = Duration::from_millis(25);
    let mut written = 0u64;
    while !shared.stop.load(Ordering::Relaxed) {
        let Some(c) = con.as_mut() else {
            match connect(port, shared.timeout) {
                Ok(c) => con = Some(c),
                // Refused (killed node) or no handshake (paused node):
                // nothing was sent, nothing to record.
                Err(_) => std::thread::sleep(Duration::from_millis(100)),
            }
            continue;
        };
        let (key, model) = &shared.keys[rng.gen_range(0..shared.keys.len())];
        let request = match (model, rng.gen_bool(0.5)) {
            (Model::Register, true) => {
                written += 1;
                Request::Set(format!("{id}.{written}"))
            }
            (Model::Counter, true) if rng.gen_bool(0.2) => Request::Incr(1),
            // Amounts that differ tell the checker which increments of
            // unknown outcome took effect: with +1 everywhere, any subset
            // of them fits any gap, and porcupine tries them all.
            (Model::Counter, true) => Request::Incr(rng.gen_range(2..1000)),
            (_, false) => Request::Get,
        };
        let call = shared.clock.now();
        // The answer to record (a read's value, an incr's new value), or
        // Err when there is no definite one.
        let answer: Result<Option<String>, ()> = match &request {
            Request::Set(v) => match redis::cmd("SET").arg(key).arg(v).query::<Value>(c) {
                Ok(Value::Okay) => Ok(None),
                Ok(Value::SimpleString(s)) if s == "OK" => Ok(None),
                _ => Err(()),
            },
            Request::Get => redis::cmd("GET")
                .arg(key)
                .query::<Option<String>>(c)
                .map_err(drop),
            Request::Incr(1) => redis::cmd("INCR")
                .arg(key)
                .query::<i64>(c)
                .map(|v| Some(v.to_string()))
                .map_err(drop),
            Request::Incr(by) => redis::cmd("INCRBY")
                .arg(key)
                .arg(by)
                .query::<i64>(c)
                .map(|v| Some(v.to_string()))
                .map_err(drop),
        };
        let ret = shared.clock.now();
        let (f, n) = match &request {
            Request::Set(_) => (F::Write, 0),
            Request::Get => (F::Read, 0),
            Request::Incr(by) => (F::Incr, *by),
        };
        let definite = answer.is_ok();
        let value = match &request {
            Request::Set(v) => Some(v.clone()),
            _ => answer.unwrap_or(None),
        };
        if definite || f != F::Read {
            ops.push(Op {
                process,
                node,
                key: key.clone(),
                f,
                value,
                n,
                call,
                ret: definite.then_some(ret),
            });
        }
        if definite {
            backoff = Duration::from_millis(25);
        } else {
            // The connection may still deliver the late answer: start over.
            process = shared.new_process();
            con = None;
            std::thread::sleep(backoff);
            backoff = (backoff * 2).min(Duration::from_secs(1));
        }
    }
    ops
}

/// One `GET` of every key through every node in `targets`, once the
/// cluster has healed: an increment or write lost along the way shows up
/// here even if no client happened to read the key afterwards.
pub fn final_reads(shared: &Shared, targets: &[(usize, u16)]) -> Vec<Op> {
    let mut ops = Vec::new();
    for &(node, port) in targets {
        let Ok(mut con) = connect(port, Duration::from_secs(10)) else {
            continue;
        };
        let process = shared.new_process();
        for (key, _) in shared.keys.iter() {
            let call = shared.clock.now();
            // After an error the connection could hand a late answer to
            // the next GET: stop using it.
            let Ok(value) = redis::cmd("GET").arg(key).query::<Option<String>>(&mut con) else {
                break;
            };
            ops.push(Op {
                process,
                node,
                key: key.clone(),
                f: F::Read,
                value,
                n: 0,
                call,
                ret: Some(shared.clock.now()),
            });
        }
    }
    ops
}

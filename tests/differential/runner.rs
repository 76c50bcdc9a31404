//! The runner: a real `redis-server` child process, one connection to each
//! server per run, commands sent in lockstep (one at a time, or in pipeline
//! chunks) and every reply compared; plus the shrinker that cuts a failing
//! sequence down to the commands that still make it fail.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use super::gen::{well_formed, Cmd, Step};
use super::norm::{compare, Norm};
use super::resp::{Conn, Reply};

pub use crate::common::redis_server::RedisServer;

/// Where the two servers listen.
#[derive(Clone, Copy, Debug)]
pub struct Ports {
    pub redis: u16,
    pub elsa: u16,
}

/// How a sequence is sent.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// One request, then its reply, then the next.
    Sequential,
    /// Up to this many requests written at once, then all their replies.
    Pipelined(usize),
}

impl std::fmt::Display for Mode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Mode::Sequential => write!(f, "one command at a time"),
            Mode::Pipelined(n) => write!(f, "pipelined, {n} requests per write"),
        }
    }
}

/// The first reply that differed.
#[derive(Clone, Debug)]
pub struct Mismatch {
    /// Index (from 0) of the command among all commands of the run.
    pub index: usize,
    /// Index of the last command written before this reply was read: in a
    /// pipeline, the commands after the mismatch in the same write may be
    /// what caused it, so they belong to the repro.
    pub sent_upto: usize,
    /// Index of the step holding that last command.
    pub sent_step: usize,
    pub redis: Reply,
    pub elsa: Reply,
    pub why: String,
    /// What kind of divergence this is, to group and to shrink against.
    pub signature: String,
}

/// The result of one run.
pub struct Outcome {
    /// Replies compared (the mismatching one included).
    pub compared: usize,
    pub mismatch: Option<Mismatch>,
}

/// A connection to each server.
struct Pair {
    redis: Conn,
    elsa: Conn,
}

impl Pair {
    /// Connects to both; the error says which server is unreachable.
    fn open(ports: Ports) -> Result<Pair, String> {
        let redis = Conn::connect(ports.redis).map_err(|e| format!("connect to redis: {e}"))?;
        let elsa = Conn::connect(ports.elsa).map_err(|e| format!("connect to elsa: {e}"))?;
        Ok(Pair { redis, elsa })
    }

    /// A fresh pair on an empty key space.
    fn fresh(ports: Ports) -> Result<Pair, String> {
        let mut p = Pair::open(ports)?;
        for (who, c) in [("redis", &mut p.redis), ("elsa", &mut p.elsa)] {
            let r = c.call(&[b"FLUSHALL"]);
            if r != Reply::Simple(b"OK".to_vec()) {
                return Err(format!("FLUSHALL on {who} before a run answered {r}"));
            }
        }
        Ok(p)
    }
}

/// Follows MULTI/EXEC from Redis's replies, to know which norm each EXEC
/// element gets (a command is in the EXEC reply iff Redis said QUEUED; when
/// Elsa disagrees, that reply already mismatched).
#[derive(Default)]
struct Tracker {
    queued: Option<Vec<(String, Norm)>>,
}

fn is_simple(r: &Reply, s: &str) -> bool {
    matches!(r, Reply::Simple(b) if b == s.as_bytes())
}

impl Tracker {
    /// The norm for this command's reply, and the names of the commands an
    /// EXEC answers for.
    fn norm(&self, cmd: &Cmd, redis: &Reply) -> (Norm, Vec<String>) {
        match &self.queued {
            Some(q) if cmd.is("EXEC", 1) => (
                Norm::Exec(q.iter().map(|(_, n)| n.clone()).collect()),
                q.iter().map(|(name, _)| name.clone()).collect(),
            ),
            Some(_) if is_simple(redis, "QUEUED") => (Norm::Exact, Vec::new()),
            _ => (cmd.norm.clone(), Vec::new()),
        }
    }

    fn after(&mut self, cmd: &Cmd, redis: &Reply) {
        if cmd.is("MULTI", 1) && is_simple(redis, "OK") {
            self.queued = Some(Vec::new());
        } else if cmd.is("EXEC", 1)
            || cmd.is("RESET", 1)
            || cmd.name() == "QUIT"
            || (cmd.is("DISCARD", 1) && is_simple(redis, "OK"))
        {
            self.queued = None;
        } else if let Some(q) = self.queued.as_mut() {
            if is_simple(redis, "QUEUED") {
                q.push((cmd.name(), cmd.norm.clone()));
            }
        }
    }
}

/// A reply reduced to what kind of divergence it shows: the type, or an
/// error's text with the quoted and numeric parts blanked.
fn sig(r: &Reply) -> String {
    match r {
        Reply::Error(t) => {
            let mut out = String::from("-");
            let mut quoted = false;
            for c in String::from_utf8_lossy(t).chars().take(70) {
                match c {
                    '\'' => {
                        quoted = !quoted;
                        out.push('\'');
                    }
                    _ if quoted => {}
                    d if d.is_ascii_digit() => {
                        if !out.ends_with('N') {
                            out.push('N');
                        }
                    }
                    c => out.push(c),
                }
            }
            // However many quoted arguments an error lists, it is one kind.
            while out.contains("'' ''") {
                out = out.replace("'' ''", "''");
            }
            out
        }
        Reply::Broken(_) => "no reply".into(),
        other => other.kind().into(),
    }
}

fn signature(name: &str, redis: &Reply, elsa: &Reply) -> String {
    // Every unknown name is the same divergence.
    let name = match redis {
        Reply::Error(t) if t.starts_with(b"ERR unknown command") => "(unknown command)",
        _ => name,
    };
    format!("{name}: redis {} / elsa {}", sig(redis), sig(elsa))
}

/// The signature of a mismatch at command `cmd`: an EXEC mismatch is
/// refined to the first element that differs.
fn exec_aware_signature(
    cmd: &Cmd,
    norm: &Norm,
    names: &[String],
    redis: &Reply,
    elsa: &Reply,
) -> String {
    if let (Norm::Exec(norms), Reply::Array(a), Reply::Array(b)) = (norm, redis, elsa) {
        if a.len() == norms.len() && b.len() == a.len() {
            for (i, n) in norms.iter().enumerate() {
                if compare(n, &a[i], &b[i]).is_some() {
                    return signature(&format!("EXEC>{}", names[i]), &a[i], &b[i]);
                }
            }
        }
    }
    signature(&cmd.name(), redis, elsa)
}

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("clock after 1970")
        .as_millis() as i64
}

/// Runs `steps` against both servers from a fresh connection and an empty
/// key space; stops at the first reply that differs. An error means a
/// server cannot be reached or reset any more (it died): nothing later can
/// be compared.
pub fn run(ports: Ports, steps: &[Step], mode: Mode) -> Result<Outcome, String> {
    let mut pair = Pair::fresh(ports)?;
    let mut tracker = Tracker::default();
    let mut compared = 0;
    let mut pending: Vec<(usize, usize, &Cmd)> = Vec::new();
    let mut index = 0;
    let mut mismatch = None;
    'steps: for (si, step) in steps.iter().enumerate() {
        for cmd in &step.cmds {
            pending.push((si, index, cmd));
            index += 1;
            let flush = match mode {
                Mode::Sequential => true,
                // QUIT closes the connection: nothing may follow it in a
                // write.
                Mode::Pipelined(n) => pending.len() >= n || cmd.name() == "QUIT",
            };
            if flush {
                mismatch = exchange(ports, &mut pair, &mut tracker, &mut pending, &mut compared)?;
                if mismatch.is_some() {
                    break 'steps;
                }
            }
        }
        if step.sleep_ms > 0 {
            mismatch = exchange(ports, &mut pair, &mut tracker, &mut pending, &mut compared)?;
            if mismatch.is_some() {
                break;
            }
            std::thread::sleep(Duration::from_millis(step.sleep_ms));
        }
    }
    if mismatch.is_none() {
        mismatch = exchange(ports, &mut pair, &mut tracker, &mut pending, &mut compared)?;
    }
    Ok(Outcome { compared, mismatch })
}

/// Sends the pending requests to both servers (the same bytes: times are
/// resolved once), reads all replies, compares them in order.
fn exchange(
    ports: Ports,
    pair: &mut Pair,
    tracker: &mut Tracker,
    pending: &mut Vec<(usize, usize, &Cmd)>,
    compared: &mut usize,
) -> Result<Option<Mismatch>, String> {
    if pending.is_empty() {
        return Ok(None);
    }
    let now = now_ms();
    let reqs: Vec<Vec<Vec<u8>>> = pending.iter().map(|(_, _, c)| c.resolve(now)).collect();
    pair.redis.send(&reqs);
    pair.elsa.send(&reqs);
    let redis: Vec<Reply> = reqs.iter().map(|_| pair.redis.read()).collect();
    let elsa: Vec<Reply> = reqs.iter().map(|_| pair.elsa.read()).collect();
    let batch = std::mem::take(pending);
    let (sent_step, sent_upto, _) = *batch.last().expect("non-empty batch");
    for (p, (_, index, cmd)) in batch.into_iter().enumerate() {
        *compared += 1;
        let (r, e) = (&redis[p], &elsa[p]);
        let (norm, names) = tracker.norm(cmd, r);
        if let Some(why) = compare(&norm, r, e) {
            // Elsa answering a pipelined write with exactly Redis's
            // replies, in another order, is one bug however the commands
            // are named: group it as such.
            let reordered = redis.len() > 1 && {
                let sorted = |v: &[Reply]| {
                    let mut d: Vec<String> = v.iter().map(|r| format!("{r:?}")).collect();
                    d.sort();
                    d
                };
                sorted(&redis) == sorted(&elsa)
            };
            let signature = if reordered {
                "(pipeline) elsa sends the right replies in the wrong order".to_string()
            } else {
                exec_aware_signature(cmd, &norm, &names, r, e)
            };
            return Ok(Some(Mismatch {
                index,
                sent_upto,
                sent_step,
                redis: r.clone(),
                elsa: e.clone(),
                why,
                signature,
            }));
        }
        tracker.after(cmd, r);
        if cmd.name() == "QUIT" {
            *pair = Pair::open(ports)?;
        }
    }
    Ok(None)
}

/// Runs of a shrunk sequence that check it still fails.
pub const REPRODUCE: usize = 5;

/// A failing sequence cut down.
pub struct Shrunk {
    pub steps: Vec<Step>,
    pub mode: Mode,
    pub mismatch: Mismatch,
    /// Runs the shrinking took.
    pub runs: usize,
    /// Of [`REPRODUCE`] more runs of the result, how many failed the same
    /// way (less than all: the divergence depends on timing).
    pub reproduced: usize,
}

/// Delta debugging, simply: drop chunks of steps (halves, quarters, …, then
/// single steps, until nothing more can go) while the run still fails with
/// the same signature. Tries one command at a time first if the sequence
/// was pipelined, so a pipeline-only divergence stays visibly so.
pub fn shrink(
    ports: Ports,
    steps: &[Step],
    mode: Mode,
    found: &Mismatch,
    max_runs: usize,
) -> Shrunk {
    let mut runs = 0;
    let fails = |cand: &[Step], mode: Mode, runs: &mut usize| -> Option<Mismatch> {
        if cand.is_empty() || !well_formed(cand) || *runs >= max_runs {
            return None;
        }
        *runs += 1;
        run(ports, cand, mode)
            .ok()?
            .mismatch
            .filter(|m| m.signature == found.signature)
    };
    let mut cur: Vec<Step> = steps[..=found.sent_step].to_vec();
    let mut cur_m = found.clone();
    let mut mode = mode;
    if mode != Mode::Sequential {
        if let Some(m) = fails(&cur, Mode::Sequential, &mut runs) {
            mode = Mode::Sequential;
            cur.truncate(m.sent_step + 1);
            cur_m = m;
        }
    }
    let mut chunk = cur.len().div_ceil(2).max(1);
    loop {
        let mut removed = false;
        let mut start = 0;
        while start < cur.len() && runs < max_runs {
            let end = (start + chunk).min(cur.len());
            let cand: Vec<Step> = cur[..start].iter().chain(&cur[end..]).cloned().collect();
            match fails(&cand, mode, &mut runs) {
                Some(m) => {
                    cur = cand;
                    cur.truncate(m.sent_step + 1);
                    cur_m = m;
                    removed = true;
                }
                None => start = end,
            }
        }
        if runs >= max_runs || (chunk == 1 && !removed) {
            break;
        }
        if chunk > 1 {
            chunk = chunk.div_ceil(2);
        }
    }
    let mut reproduced = 0;
    for _ in 0..REPRODUCE {
        let o = run(ports, &cur, mode);
        if o.is_ok_and(|o| o.mismatch.is_some_and(|m| m.signature == found.signature)) {
            reproduced += 1;
        }
    }
    Shrunk {
        steps: cur,
        mode,
        mismatch: cur_m,
        runs,
        reproduced,
    }
}

//! Running one sequence: fresh servers on fresh files, every command sent
//! to both in lockstep and its replies compared (the differential test's
//! norms), and at each restart the whole key space of both compared
//! before the stop (live) and after the start (what was kept). A run stops
//! at its first divergence. The side under test is a [`Side`]: the single
//! server ([`run`]), or the cluster variant's nodes behind one session
//! connection ([`run_on`], `restart_differential_cluster.rs`), each node's
//! key space compared with Redis's.
//!
//! Rules where Elsa may differ from Redis, each applied where it arises
//! and named in the listing:
//! - A script that raises an error writes nothing in Elsa and keeps what it
//!   wrote before the error in Redis (`docs/commands.md, "Scripting"`: "A
//!   script that raises an error (or is killed) writes nothing; Redis keeps
//!   what it wrote before the error"). After such an error the checker
//!   deletes the script's keys on both servers.
//! - `BEGIN … COMMIT` is Elsa's: Redis runs the same commands as `MULTI …
//!   EXEC`. A COMMIT answered `-CONFLICT` wrote nothing and is retried, as a
//!   client does (`docs/transactions.md, the first table`: "`-CONFLICT <key> …`, nothing
//!   written, client retries"; a snapshot's freeze makes a COMMIT conflict,
//!   `docs/durability.md, "Snapshots", freeze`).
//! - SAVE while a periodic snapshot runs answers `-ERR Background save
//!   already in progress` and is retried: that snapshot is Redis's save
//!   point (`docs/durability.md, "Snapshots"`), and Redis answers SAVE during a
//!   save point's BGSAVE the same way.
//! - While a `t*` key may be lapsing, replies that count or list the whole
//!   key space (DBSIZE, KEYS, SCAN, RANDOMKEY) are compared by errors only:
//!   the two servers read the clock moments apart, and Redis counts an
//!   expired key until its active expiry (100 ms cycles) collects it.
//! - A `BITFIELD` with a write that failed (`OVERFLOW FAIL`, a nil in its
//!   reply) has created or padded the key in both servers, but Redis does
//!   not log a BITFIELD that changed no field, so a restart loses what it
//!   showed (`docs/durability.md, "What survives each restart"`: "One
//!   difference the other way"). The checker deletes the key on both.
//! - SCAN, HSCAN, SSCAN and ZSCAN replies are compared in full only when
//!   both servers answered in one page (cursor 0): this module's keys make
//!   the key space outgrow the base generator's COUNTs, and where a page
//!   ends is implementation-defined (`differential/gen.rs`: "SCAN with a
//!   non-zero cursor or a COUNT below the key space" is not generated).
//!   The key-space dumps read everything anyway.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use crate::common::TestDir;
use crate::gen::Cmd;
use crate::gen_rdiff::{Item, RSequence};
use crate::keyspace::{self, Dump};
use crate::norm::{compare, Norm};
use crate::resp::{Conn, Reply};
use crate::servers::{save, RedisPersistent, RestartKind, Subject};

/// Counts of one run, summed over the whole test.
#[derive(Default, Clone)]
pub struct Stats {
    pub commands: usize,
    pub restarts: BTreeMap<RestartKind, usize>,
    pub keys_compared: usize,
    pub rules_applied: usize,
    /// Keys compared per key space read (a cluster's nodes; empty for
    /// the single server).
    pub keys_by_space: BTreeMap<String, usize>,
    /// The side's own counters ([`Side::counters`]).
    pub side: BTreeMap<String, usize>,
}

impl Stats {
    /// The restarts by kind, for a summary line: `SIGTERM 3, SHUTDOWN 1, …`.
    pub fn restarts_by_kind(&self) -> String {
        let by_kind: Vec<String> = RestartKind::ALL
            .iter()
            .map(|k| format!("{k} {}", self.restarts.get(k).copied().unwrap_or(0)))
            .collect();
        by_kind.join(", ")
    }

    pub fn add(&mut self, o: &Stats) {
        self.commands += o.commands;
        self.keys_compared += o.keys_compared;
        self.rules_applied += o.rules_applied;
        for (k, n) in &o.restarts {
            *self.restarts.entry(*k).or_default() += n;
        }
        for (k, n) in &o.keys_by_space {
            *self.keys_by_space.entry(k.clone()).or_default() += n;
        }
        for (k, n) in &o.side {
            *self.side.entry(k.clone()).or_default() += n;
        }
    }
}

/// Where a run diverged.
#[derive(Clone, Debug)]
pub struct Failure {
    /// What kind of divergence this is (to group and to shrink against).
    pub signature: String,
    /// The restart just before the divergence, if it showed after one.
    pub restart: Option<RestartKind>,
    /// Index of the item at which it showed.
    pub item: usize,
    /// For a reply divergence: the number (from 0) of the command.
    pub command: Option<usize>,
    /// What differed, for the report.
    pub detail: String,
    /// For a key-space divergence: each differing key's kind of difference
    /// and type ("extra in elsa string"), sorted, without repeats.
    pub tags: Vec<String>,
}

/// The result of one run.
pub struct Outcome {
    pub stats: Stats,
    pub failure: Option<Failure>,
    /// Rules applied, by item index (shown in listings).
    pub notes: BTreeMap<usize, Vec<String>>,
}

/// Whole-key-space reads, relaxed while a short TTL may lapse.
const WHOLE_SPACE: &[&str] = &["DBSIZE", "KEYS", "SCAN", "RANDOMKEY"];
/// How long after a short TTL's end the whole key space stays relaxed.
const LAPSE_MARGIN: Duration = Duration::from_millis(1_500);
/// COMMIT attempts of one BEGIN block before the conflicts count as a
/// divergence.
const COMMIT_ATTEMPTS: usize = 20;

struct Pair {
    redis: Conn,
    elsa: Conn,
}

fn connect(port: u16) -> Result<Conn, String> {
    let mut c = Conn::connect(port).map_err(|e| format!("connect to {port}: {e}"))?;
    c.set_read_timeout(Duration::from_secs(60));
    Ok(c)
}

/// A connection's database and whether it speaks RESP3.
type Session = (Vec<u8>, bool);

/// How to compare one reply.
#[derive(Clone)]
enum Judge {
    /// The command's norm.
    Norm(Norm),
    /// Errors only (a whole-key-space read while a key may lapse).
    ErrorsOnly,
    /// A SCAN-family page: by the norm when both servers answered in one
    /// page (cursor 0), else only that both answered a page.
    Page(Norm),
    /// SAVE queued in MULTI: Elsa may meet its periodic snapshot (the
    /// SAVE rule of the module doc; inside EXEC it cannot be retried).
    Save,
}

fn judge(j: &Judge, r: &Reply, e: &Reply) -> Option<String> {
    let broken = matches!(r, Reply::Broken(_)) || matches!(e, Reply::Broken(_));
    match j {
        Judge::Norm(n) => compare(n, r, e),
        Judge::ErrorsOnly if broken => compare(&Norm::Exact, r, e),
        Judge::ErrorsOnly => ((r.is_error() || e.is_error()) && r != e)
            .then(|| "different error (or error vs value)".into()),
        Judge::Save if is_simple(r, "OK") && is_in_progress(e) => None,
        Judge::Save => compare(&Norm::Exact, r, e),
        Judge::Page(n) => match (r, e) {
            (Reply::Array(a), Reply::Array(b)) if a.len() == 2 && b.len() == 2 => {
                let done = |x: &Reply| matches!(x, Reply::Bulk(c) if c == b"0");
                if done(&a[0]) && done(&b[0]) {
                    compare(n, r, e)
                } else {
                    None
                }
            }
            _ => compare(n, r, e),
        },
    }
}

fn is_in_progress(r: &Reply) -> bool {
    matches!(r, Reply::Error(t) if t.ends_with(b"already in progress"))
}

fn is_simple(r: &Reply, s: &str) -> bool {
    matches!(r, Reply::Simple(b) if b == s.as_bytes())
}

/// The reply reduced to its kind (errors: their first words).
fn sig(r: &Reply) -> String {
    match r {
        Reply::Error(t) => {
            let t = String::from_utf8_lossy(t);
            let words: Vec<&str> = t.split_whitespace().take(3).collect();
            format!("-{}", words.join(" "))
        }
        other => other.kind().into(),
    }
}

/// One key space of the side under test, as [`Side::spaces`] lists it.
pub struct Space {
    pub port: u16,
    /// Its name in reports ("node 3 (b)"); None: the single server,
    /// named "elsa".
    pub name: Option<String>,
    /// What groups its divergences in a signature ("region b").
    pub group: String,
}

/// The side under test as the runner sees it: one server ([`Subject`]),
/// or a cluster (`restart_differential_cluster.rs`) reached through one
/// session connection.
pub trait Side {
    /// Where the session connection goes (asked again after a restart).
    fn port(&self) -> u16;
    /// Stops and starts again `kind`'s way (the server, or one node); an
    /// error begins `stop:`, `start:` or (a cluster whose restarted node
    /// is up while its nodes do not all see each other ready) `whole:`.
    fn restart(&mut self, kind: RestartKind) -> Result<(), String>;
    /// Before item `i` runs (a cluster cuts a node off or heals it).
    fn before_item(&mut self, _i: usize) {}
    /// Before the key spaces are read: a cluster waits until its nodes
    /// agree; an error says they did not.
    fn settle(&mut self) -> Result<(), String> {
        Ok(())
    }
    /// The key spaces to read and compare with Redis's.
    fn spaces(&self) -> Vec<Space>;
    /// What happened since last asked, for the listing.
    fn take_notes(&mut self) -> Vec<String> {
        Vec::new()
    }
    /// Counters of the run for the summary.
    fn counters(&self) -> BTreeMap<String, usize> {
        BTreeMap::new()
    }
}

impl Side for Subject {
    fn port(&self) -> u16 {
        Subject::port(self)
    }

    fn restart(&mut self, kind: RestartKind) -> Result<(), String> {
        Subject::restart(self, kind)
    }

    fn spaces(&self) -> Vec<Space> {
        vec![Space {
            port: Subject::port(self),
            name: None,
            group: String::new(),
        }]
    }
}

struct Runner {
    redis: RedisPersistent,
    elsa: Box<dyn Side>,
    pair: Pair,
    /// Norms of the commands queued since MULTI (None: not in MULTI).
    queued: Option<Vec<(Judge, Cmd)>>,
    lapse_until: Instant,
    stats: Stats,
    notes: BTreeMap<usize, Vec<String>>,
    command: usize,
    last_restart: Option<RestartKind>,
    /// The sequence's last item (where notes made at the end go).
    last_item: usize,
    _dir: TestDir,
}

/// Runs `seq` on fresh servers. An `Err` is a harness failure (Redis
/// would not start); everything Elsa does wrong is a [`Failure`].
pub fn run(seq: &RSequence) -> Result<Outcome, String> {
    run_on(seq, "rdiff", |dir| {
        Subject::start(dir, seq.snapshot_sec, selftest()).map(|s| Box::new(s) as Box<dyn Side>)
    })
}

/// As [`run`], with the side under test `start` makes (after Redis
/// started, in the run's dir, a [`TestDir`] tagged `tag`).
pub fn run_on(
    seq: &RSequence,
    tag: &str,
    start: impl FnOnce(&TestDir) -> Result<Box<dyn Side>, String>,
) -> Result<Outcome, String> {
    let dir = TestDir::new(tag);
    let redis = RedisPersistent::start(&dir.root.join("redis"))?;
    let elsa = match start(&dir) {
        Ok(e) => e,
        Err(why) => {
            return Ok(Outcome {
                stats: Stats::default(),
                failure: Some(Failure {
                    signature: "elsa did not start on an empty dir".into(),
                    restart: None,
                    item: 0,
                    command: None,
                    tags: Vec::new(),
                    detail: why,
                }),
                notes: BTreeMap::new(),
            })
        }
    };
    let pair = Pair {
        redis: connect(redis.port())?,
        elsa: connect(elsa.port())?,
    };
    let mut r = Runner {
        redis,
        elsa,
        pair,
        queued: None,
        lapse_until: Instant::now(),
        stats: Stats::default(),
        notes: BTreeMap::new(),
        command: 0,
        last_restart: None,
        last_item: seq.items.len().saturating_sub(1),
        _dir: dir,
    };
    let mut failure = None;
    for (i, item) in seq.items.iter().enumerate() {
        r.elsa.before_item(i);
        // Shown after the item before (a listing shows notes after an
        // item's commands).
        r.side_notes(i.saturating_sub(1));
        if let Err(f) = r.item(i, item) {
            failure = Some(f);
            break;
        }
    }
    if failure.is_none() {
        r.last_restart = None;
        failure = r.compare_spaces(seq.items.len(), "at the end").err();
    }
    r.stats.side = r.elsa.counters();
    Ok(Outcome {
        stats: r.stats,
        failure,
        notes: r.notes,
    })
}

impl Runner {
    fn fail(&self, item: usize, signature: String, detail: String) -> Failure {
        Failure {
            signature,
            restart: self.last_restart,
            item,
            command: None,
            tags: Vec::new(),
            detail,
        }
    }

    /// The side's notes, shown at item `i` (the last item's, at the end;
    /// not rules: nothing counted).
    fn side_notes(&mut self, i: usize) {
        let notes = self.elsa.take_notes();
        if !notes.is_empty() {
            let i = i.min(self.last_item);
            self.notes.entry(i).or_default().extend(notes);
        }
    }

    fn note(&mut self, item: usize, text: String) {
        self.stats.rules_applied += 1;
        self.notes.entry(item).or_default().push(text);
    }

    fn item(&mut self, i: usize, item: &Item) -> Result<(), Failure> {
        match item {
            Item::Step { step, short_ttl_ms } => {
                for c in &step.cmds {
                    self.command(i, c)?;
                }
                if *short_ttl_ms > 0 {
                    let until =
                        Instant::now() + Duration::from_millis(*short_ttl_ms) + LAPSE_MARGIN;
                    self.lapse_until = self.lapse_until.max(until);
                }
                if step.sleep_ms > 0 {
                    std::thread::sleep(Duration::from_millis(step.sleep_ms));
                }
                Ok(())
            }
            Item::Begin { level, cmds } => self.begin(i, *level, cmds),
            Item::Restart { kind, sleep_ms } => self.restart(i, *kind, *sleep_ms),
        }
    }

    fn exchange(&mut self, args: &[Vec<u8>]) -> (Reply, Reply) {
        let req = [args.to_vec()];
        self.pair.redis.send(&req);
        self.pair.elsa.send(&req);
        (self.pair.redis.read(), self.pair.elsa.read())
    }

    /// One command of a step, in lockstep.
    fn command(&mut self, i: usize, c: &Cmd) -> Result<(), Failure> {
        let name = c.name();
        let lapsing = Instant::now() < self.lapse_until && WHOLE_SPACE.contains(&name.as_str());
        let own = if lapsing {
            Judge::ErrorsOnly
        } else if name.ends_with("SCAN") {
            Judge::Page(c.norm.clone())
        } else if name == "SAVE" && self.queued.is_some() {
            Judge::Save
        } else {
            Judge::Norm(c.norm.clone())
        };
        let args = c.resolve(now_ms());
        let (r, mut e) = self.exchange(&args);
        if name == "SAVE" && self.queued.is_none() && e != r && is_in_progress(&e) {
            e = save(&mut self.pair.elsa);
            self.note(
                i,
                "rule (docs/durability.md, Snapshots: a periodic snapshot is Redis's save \
                 point; SAVE meets it with 'already in progress'): SAVE retried on elsa"
                    .into(),
            );
        }
        self.stats.commands += 1;
        let n = self.command;
        self.command += 1;
        let why = match &self.queued {
            Some(q) if c.is("EXEC", 1) => match (&r, &e) {
                (Reply::Array(a), Reply::Array(b)) if a.len() == q.len() && b.len() == a.len() => q
                    .iter()
                    .zip(a.iter().zip(b))
                    .enumerate()
                    .find_map(|(k, ((j, _), (x, y)))| {
                        judge(j, x, y).map(|w| format!("EXEC element {}: {w}", k + 1))
                    }),
                _ => compare(&Norm::Exact, &r, &e),
            },
            Some(_) if is_simple(&r, "QUEUED") => compare(&Norm::Exact, &r, &e),
            _ => judge(&own, &r, &e),
        };
        if let Some(why) = why {
            return Err(Failure {
                signature: format!(
                    "reply differs: {name}: redis {} / elsa {}",
                    sig(&r),
                    sig(&e)
                ),
                restart: self.last_restart,
                item: i,
                command: Some(n),
                tags: Vec::new(),
                detail: format!("    redis: {r}\n    elsa:  {e}\n    ({why})"),
            });
        }
        // Follow MULTI from Redis's replies, as the differential runner.
        if c.is("MULTI", 1) && is_simple(&r, "OK") {
            self.queued = Some(Vec::new());
        } else if c.is("EXEC", 1)
            || c.is("RESET", 1)
            || name == "QUIT"
            || (c.is("DISCARD", 1) && is_simple(&r, "OK"))
        {
            self.queued = None;
        } else if let Some(q) = self.queued.as_mut() {
            if is_simple(&r, "QUEUED") {
                q.push((own, c.clone()));
            }
        }
        if name == "QUIT" {
            self.reconnect(i, None)?;
        }
        if name == "BITFIELD" && self.queued.is_none() {
            let failed = |x: &Reply| matches!(x, Reply::NilBulk | Reply::Null);
            if matches!(&r, Reply::Array(items) if items.iter().any(failed)) {
                let del = vec![b"DEL".to_vec(), args[1].clone()];
                let (rd, ed) = self.exchange(&del);
                self.note(
                    i,
                    format!(
                        "rule (docs/durability.md, What survives each restart: Redis does not \
                         log a BITFIELD whose writes failed, though it made the key): DEL {} on \
                         both (redis {rd}, elsa {ed})",
                        crate::resp::quote(&args[1])
                    ),
                );
            }
        }
        if (name == "EVAL" || name == "EVALSHA") && self.queued.is_none() {
            if let Reply::Error(t) = &r {
                if String::from_utf8_lossy(t).contains("@user_script") {
                    self.script_error_rule(i, &args)?;
                }
            }
        }
        Ok(())
    }

    /// The scripting rule (module doc): delete the failed script's keys.
    fn script_error_rule(&mut self, i: usize, args: &[Vec<u8>]) -> Result<(), Failure> {
        let numkeys: usize = std::str::from_utf8(&args[2])
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(0);
        let keys: Vec<Vec<u8>> = args.iter().skip(3).take(numkeys).cloned().collect();
        if keys.is_empty() {
            return Ok(());
        }
        let mut del = vec![b"DEL".to_vec()];
        del.extend(keys.iter().cloned());
        let (r, e) = self.exchange(&del);
        let shown: Vec<String> = keys.iter().map(|k| crate::resp::quote(k)).collect();
        self.note(
            i,
            format!(
                "rule (docs/commands.md, Scripting: a script that raises an error writes \
                 nothing in Elsa, Redis keeps its partial writes): DEL {} on both \
                 (redis {r}, elsa {e})",
                shown.join(" ")
            ),
        );
        Ok(())
    }

    /// `BEGIN … COMMIT` on Elsa against `MULTI … EXEC` on Redis.
    fn begin(&mut self, i: usize, level: Option<&str>, cmds: &[Cmd]) -> Result<(), Failure> {
        let now = now_ms();
        let reqs: Vec<Vec<Vec<u8>>> = cmds.iter().map(|c| c.resolve(now)).collect();
        let mut multi = vec![vec![b"MULTI".to_vec()]];
        multi.extend(reqs.iter().cloned());
        multi.push(vec![b"EXEC".to_vec()]);
        self.pair.redis.send(&multi);
        let mut redis: Vec<Reply> = (0..multi.len()).map(|_| self.pair.redis.read()).collect();
        let exec = redis.pop().expect("EXEC's reply");
        let Reply::Array(want) = exec else {
            return Err(self.fail(
                i,
                "harness: redis MULTI … EXEC did not answer an array".into(),
                format!("    redis: {exec}"),
            ));
        };
        let n0 = self.command;
        self.command += cmds.len() + 2;
        self.stats.commands += cmds.len() + 2;
        let mut begin = vec![b"BEGIN".to_vec()];
        begin.extend(level.map(|l| l.as_bytes().to_vec()));
        for attempt in 1..=COMMIT_ATTEMPTS {
            let mut all = vec![begin.clone()];
            all.extend(reqs.iter().cloned());
            all.push(vec![b"COMMIT".to_vec()]);
            self.pair.elsa.send(&all);
            let mut got: Vec<Reply> = (0..all.len()).map(|_| self.pair.elsa.read()).collect();
            let commit = got.pop().expect("COMMIT's reply");
            let opened = got.remove(0);
            if !is_simple(&opened, "OK") {
                return Err(Failure {
                    signature: format!("BEGIN answered {}", sig(&opened)),
                    restart: self.last_restart,
                    item: i,
                    command: Some(n0),
                    tags: Vec::new(),
                    detail: format!("    elsa:  {opened}"),
                });
            }
            for (k, ((c, x), y)) in cmds.iter().zip(&want).zip(&got).enumerate() {
                if let Some(why) = compare(&c.norm, x, y) {
                    return Err(Failure {
                        signature: format!(
                            "reply differs: BEGIN>{}: redis {} / elsa {}",
                            c.name(),
                            sig(x),
                            sig(y)
                        ),
                        restart: self.last_restart,
                        item: i,
                        command: Some(n0 + 1 + k),
                        tags: Vec::new(),
                        detail: format!(
                            "    redis (in EXEC): {x}\n    elsa (in BEGIN):  {y}\n    ({why})"
                        ),
                    });
                }
            }
            match &commit {
                Reply::Error(t) if t.starts_with(b"CONFLICT") && attempt < COMMIT_ATTEMPTS => {
                    self.note(
                        i,
                        format!(
                            "rule (docs/transactions.md, the first table: CONFLICT, nothing written, client \
                             retries): COMMIT answered {commit}; attempt {}",
                            attempt + 1
                        ),
                    );
                    std::thread::sleep(Duration::from_millis(20 * attempt as u64));
                }
                Reply::Error(_) | Reply::Broken(_) => {
                    return Err(Failure {
                        signature: format!("COMMIT answered {}", sig(&commit)),
                        restart: self.last_restart,
                        item: i,
                        command: Some(n0 + cmds.len() + 1),
                        tags: Vec::new(),
                        detail: format!("    elsa:  {commit} (attempt {attempt})"),
                    })
                }
                _ => return Ok(()),
            }
        }
        unreachable!("the last attempt returns")
    }

    /// The connection's database and protocol, read from the server, to
    /// be set again on the new connection after a restart (a client that
    /// reconnects does so).
    fn session(c: &mut Conn) -> Session {
        let info = match c.call(&[b"CLIENT", b"INFO"]) {
            Reply::Bulk(t) | Reply::Verbatim(_, t) => String::from_utf8_lossy(&t).into_owned(),
            _ => String::new(),
        };
        let field = |name: &str| {
            info.split_whitespace()
                .find_map(|f| f.strip_prefix(name))
                .unwrap_or("")
                .to_string()
        };
        let db = field("db=");
        let db = if db.is_empty() { "0".into() } else { db };
        (db.into_bytes(), field("resp=") == "3")
    }

    /// New connections to both servers (after QUIT or a restart), with
    /// each one's session as it was.
    fn reconnect(&mut self, i: usize, sessions: Option<(Session, Session)>) -> Result<(), Failure> {
        let conns = connect(self.redis.port()).and_then(|r| Ok((r, connect(self.elsa.port())?)));
        let (redis, elsa) = conns.map_err(|e| self.fail(i, "reconnect failed".into(), e))?;
        self.pair = Pair { redis, elsa };
        self.queued = None;
        let Some((rs, es)) = sessions else {
            return Ok(());
        };
        for (c, (db, resp3)) in [(&mut self.pair.redis, rs), (&mut self.pair.elsa, es)] {
            if resp3 {
                let _ = c.call(&[b"HELLO", b"3"]);
            }
            if db != b"0" {
                let _ = c.call(&[b"SELECT", &db]);
            }
        }
        Ok(())
    }

    fn restart(&mut self, i: usize, kind: RestartKind, sleep_ms: u64) -> Result<(), Failure> {
        std::thread::sleep(Duration::from_millis(sleep_ms));
        self.compare_spaces(i, "live, before the restart")?;
        let sessions = (
            Self::session(&mut self.pair.redis),
            Self::session(&mut self.pair.elsa),
        );
        self.last_restart = Some(kind);
        if let Err(e) = self.redis.restart(kind) {
            return Err(self.fail(i, format!("harness: redis restart ({kind}) failed"), e));
        }
        let restarted = self.elsa.restart(kind);
        self.side_notes(i);
        if let Err(e) = restarted {
            let sig = if e.starts_with("stop:") {
                format!("elsa could not be stopped by {kind}")
            } else if e.starts_with("whole:") {
                format!("the cluster was not whole again after {kind} of one node")
            } else {
                format!("elsa did not come back after {kind}")
            };
            return Err(self.fail(i, sig, format!("    {e}")));
        }
        *self.stats.restarts.entry(kind).or_default() += 1;
        self.reconnect(i, Some(sessions))?;
        if Instant::now() < self.lapse_until {
            self.lapse_until = Instant::now() + LAPSE_MARGIN;
        }
        self.compare_spaces(i, "after the restart")
    }

    /// Both key spaces, compared; `phase` names the moment. A cluster's
    /// nodes are each compared with a dump of Redis read just before.
    fn compare_spaces(&mut self, i: usize, phase: &str) -> Result<(), Failure> {
        let settled = self.elsa.settle();
        self.side_notes(i);
        if let Err(e) = settled {
            return Err(self.fail(i, format!("{phase}: the nodes did not converge"), e));
        }
        let read = |port: u16, who: &str| -> Result<Dump, String> {
            keyspace::dump(port).map_err(|e| format!("{who}: {e}"))
        };
        let mut found = Vec::new();
        for space in self.elsa.spaces() {
            let who = space.name.clone().unwrap_or_else(|| "elsa".into());
            let (redis, elsa) = match read(self.redis.port(), "redis")
                .and_then(|r| Ok((r, read(space.port, &who)?)))
            {
                Ok(d) => d,
                Err(e) => {
                    return Err(self.fail(
                        i,
                        format!("{phase}: the key space could not be read"),
                        e,
                    ))
                }
            };
            let n = redis.len().max(elsa.len());
            self.stats.keys_compared += n;
            if let Some(name) = &space.name {
                *self.stats.keys_by_space.entry(name.clone()).or_default() += n;
            }
            let diffs = keyspace::compare(&redis, &elsa);
            if !diffs.is_empty() {
                found.push((space, who, redis.len(), elsa.len(), diffs));
            }
        }
        if found.is_empty() {
            return Ok(());
        }
        let all = || found.iter().flat_map(|f| f.4.iter());
        let mut tags: Vec<String> = all().map(|d| d.tag()).collect();
        tags.sort();
        tags.dedup();
        // Grouped by the kinds of difference; the types are counted per
        // group in the report.
        let mut classes: Vec<&str> = all().map(|d| d.class).collect();
        classes.sort_unstable();
        classes.dedup();
        let phase_sig = match phase {
            "after the restart" => "after a restart",
            other => other,
        };
        let mut groups: Vec<&str> = found
            .iter()
            .filter(|f| f.0.name.is_some())
            .map(|f| f.0.group.as_str())
            .collect();
        groups.dedup();
        let on = match groups.is_empty() {
            true => String::new(),
            false => format!(" on {}", groups.join(", ")),
        };
        let texts: Vec<String> = found
            .iter()
            .map(|(space, who, rn, en, diffs)| {
                let at = match &space.name {
                    Some(name) => format!("{phase}, {name}"),
                    None => phase.to_string(),
                };
                let detail: Vec<String> = diffs.iter().map(|d| format!("      {d}")).collect();
                format!(
                    "    {at}: {} keys differ (redis has {rn}, {who} {en}):\n{}",
                    diffs.len(),
                    detail.join("\n")
                )
            })
            .collect();
        let mut f = self.fail(
            i,
            format!("key space {phase_sig}: {}{on}", classes.join(", ")),
            texts.join("\n"),
        );
        f.tags = tags;
        Err(f)
    }
}

/// `ELSA_RDIFF_SELFTEST=1`: a second `redis-server` in Elsa's place (the
/// checker's own test: any divergence is the checker's).
pub fn selftest() -> bool {
    std::env::var_os("ELSA_RDIFF_SELFTEST").is_some()
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock after 1970")
        .as_millis() as i64
}

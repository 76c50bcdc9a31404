//! The two servers of a restart-differential run, each on files it keeps
//! across restarts: Elsa (a [`Node`] on the run's data dir, two workers,
//! `appendfsync always`, collectors and snapshots on a clock of seconds)
//! and `redis-server` (`appendonly yes`, `appendfsync always`, its own
//! dir). Both are stopped the same way at each restart ([`RestartKind`])
//! and started again on the same files, on fresh ports.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::common::{free_port, served_by, Node, TestDir};
use crate::resp::{Conn, Reply};

/// How both servers are stopped before they are started again.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum RestartKind {
    /// SIGTERM: a clean shutdown (Elsa snapshots; Redis fsyncs its AOF).
    Sigterm,
    /// The `SHUTDOWN` command.
    Shutdown,
    /// `SAVE`, then `kill -9`.
    SaveKill9,
    /// `kill -9` alone: at `appendfsync always` Redis keeps exactly what
    /// it acknowledged, so it is the model of what must survive.
    Kill9,
}

impl RestartKind {
    pub const ALL: [RestartKind; 4] = [
        RestartKind::Sigterm,
        RestartKind::Shutdown,
        RestartKind::SaveKill9,
        RestartKind::Kill9,
    ];
}

impl std::fmt::Display for RestartKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            RestartKind::Sigterm => "SIGTERM",
            RestartKind::Shutdown => "SHUTDOWN",
            RestartKind::SaveKill9 => "SAVE + kill -9",
            RestartKind::Kill9 => "kill -9",
        })
    }
}

/// How long a stop or a start may take before the server counts as hung
/// (generous: a debug build on a shared machine).
const STOP_TIMEOUT: Duration = Duration::from_secs(60);
const START_TIMEOUT: Duration = Duration::from_secs(60);

/// Elsa's flags for a run: two workers (multi-key commands cross shards)
/// and [`durability_flags`].
pub fn elsa_flags(snapshot_sec: u64) -> Vec<String> {
    let mut flags = vec!["--workers".to_string(), "2".to_string()];
    flags.extend(durability_flags(snapshot_sec));
    flags
}

/// Every commit fsynced, tombstones collectable after a second, 16
/// databases, and a snapshot every `snapshot_sec` seconds (0: only on SAVE
/// and shutdown).
pub fn durability_flags(snapshot_sec: u64) -> Vec<String> {
    [
        "--appendfsync",
        "always",
        "--tombstone-ttl-sec",
        "1",
        "--databases",
        "16",
        "--snapshot-interval-sec",
    ]
    .iter()
    .map(|s| s.to_string())
    .chain([snapshot_sec.to_string()])
    .collect()
}

/// The server under test: Elsa, or — for the checker's self-test — a
/// second `redis-server`, which must never diverge from the first.
pub enum Subject {
    Elsa(ElsaServer),
    Redis(RedisPersistent),
}

impl Subject {
    /// Elsa on `dir`, or with `selftest` a second Redis there.
    pub fn start(dir: &TestDir, snapshot_sec: u64, selftest: bool) -> Result<Subject, String> {
        if selftest {
            return RedisPersistent::start(&dir.root.join("redis-subject")).map(Subject::Redis);
        }
        ElsaServer::start(dir, elsa_flags(snapshot_sec)).map(Subject::Elsa)
    }

    pub fn port(&self) -> u16 {
        match self {
            Subject::Elsa(e) => e.port(),
            Subject::Redis(r) => r.port(),
        }
    }

    /// As [`ElsaServer::restart`]; errors begin `stop:` or `start:`.
    pub fn restart(&mut self, kind: RestartKind) -> Result<(), String> {
        match self {
            Subject::Elsa(e) => e.restart(kind),
            Subject::Redis(r) => r.restart(kind).map_err(|e| format!("start: {e}")),
        }
    }
}

/// An Elsa node on files that outlive it.
pub struct ElsaServer {
    node: Node,
    flags: Vec<String>,
}

impl ElsaServer {
    pub fn start(dir: &TestDir, flags: Vec<String>) -> Result<ElsaServer, String> {
        let node = spawn_elsa(&dir.data(), &dir.log(), &flags)?;
        Ok(ElsaServer { node, flags })
    }

    pub fn port(&self) -> u16 {
        self.node.port
    }

    /// Stops the node `kind`'s way and starts another on the same files.
    pub fn restart(&mut self, kind: RestartKind) -> Result<(), String> {
        stop("elsa", self.node.port, &mut self.node.child, kind)
            .map_err(|e| format!("stop: {e}"))?;
        let data = self.node.data_dir.clone();
        let log = self.node.log.clone();
        self.node = spawn_elsa(&data, &log, &self.flags).map_err(|e| format!("start: {e}"))?;
        Ok(())
    }
}

/// Starts a node and waits for it. A port another process took between
/// the free-port check and the node's bind (long runs start several
/// checkers side by side) is the harness's race, not a finding: that
/// start is tried again on another port.
fn spawn_elsa(
    data: &std::path::Path,
    log: &std::path::Path,
    flags: &[String],
) -> Result<Node, String> {
    let refs: Vec<&str> = flags.iter().map(String::as_str).collect();
    let mut attempt = 0;
    loop {
        let mut node = Node::spawn(data, log, &refs);
        match wait_elsa(&mut node) {
            Err(e) if e.contains("Address already in use") && attempt < 5 => attempt += 1,
            Err(e) => return Err(e),
            Ok(()) => return Ok(node),
        }
    }
}

fn tail(text: &str, lines: usize) -> String {
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

fn wait_elsa(node: &mut Node) -> Result<(), String> {
    let deadline = Instant::now() + START_TIMEOUT;
    while Instant::now() < deadline {
        if let Ok(Some(status)) = node.child.try_wait() {
            return Err(format!(
                "elsa exited during startup ({status}); log:\n{}",
                tail(&node.log_text(), 40)
            ));
        }
        // Ours, not another process's server that took the port first
        // (checkers side by side: seed 100966 talked to another run's
        // Redis).
        if ping(node.port) && served_by(node.port, node.child.id()) {
            return Ok(());
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    Err(format!(
        "elsa did not answer PING within {START_TIMEOUT:?}; log:\n{}",
        tail(&node.log_text(), 40)
    ))
}

fn ping(port: u16) -> bool {
    match Conn::connect(port) {
        Ok(mut c) => {
            c.set_read_timeout(Duration::from_secs(5));
            c.call(&[b"PING"]) == Reply::Simple(b"PONG".to_vec())
        }
        Err(_) => false,
    }
}

/// A `redis-server` with an append-only file fsynced on every write, in a
/// dir that outlives the process; killed by PID on drop.
pub struct RedisPersistent {
    port: u16,
    child: Child,
    dir: PathBuf,
    log: PathBuf,
}

impl RedisPersistent {
    pub fn start(dir: &Path) -> Result<RedisPersistent, String> {
        std::fs::create_dir_all(dir).map_err(|e| format!("create redis dir: {e}"))?;
        let log = dir.join("redis.log");
        let (port, child) = spawn_redis(dir, &log)?;
        let mut r = RedisPersistent {
            port,
            child,
            dir: dir.to_path_buf(),
            log,
        };
        r.ready_or_respawn()?;
        Ok(r)
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// Stops Redis `kind`'s way and starts it again on the same dir.
    pub fn restart(&mut self, kind: RestartKind) -> Result<(), String> {
        stop("redis", self.port, &mut self.child, kind)?;
        let (port, child) = spawn_redis(&self.dir, &self.log)?;
        self.port = port;
        self.child = child;
        self.ready_or_respawn()
    }

    /// Waits for the server; one that lost its port to another process
    /// (checkers side by side) starts again on another (as `spawn_elsa`).
    fn ready_or_respawn(&mut self) -> Result<(), String> {
        let mut attempt = 0;
        loop {
            match self.wait_ready() {
                Err(e) if e.contains("Failed listening on port") && attempt < 5 => {
                    attempt += 1;
                    let (port, child) = spawn_redis(&self.dir, &self.log)?;
                    self.port = port;
                    self.child = child;
                }
                other => return other,
            }
        }
    }

    fn wait_ready(&mut self) -> Result<(), String> {
        let deadline = Instant::now() + START_TIMEOUT;
        while Instant::now() < deadline {
            if let Ok(Some(status)) = self.child.try_wait() {
                return Err(format!(
                    "redis-server exited during startup ({status}); log:\n{}",
                    tail(&std::fs::read_to_string(&self.log).unwrap_or_default(), 20)
                ));
            }
            // Redis answers -LOADING while it reads its AOF.
            if ping(self.port) && served_by(self.port, self.child.id()) {
                return Ok(());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        Err("redis-server did not answer PING".into())
    }
}

impl Drop for RedisPersistent {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn spawn_redis(dir: &Path, log: &Path) -> Result<(u16, Child), String> {
    let port = free_port();
    let child = Command::new("redis-server")
        .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
        .args(["--appendonly", "yes", "--appendfsync", "always"])
        .args(["--save", "", "--databases", "16"])
        .arg("--dir")
        .arg(dir)
        .arg("--logfile")
        .arg(log)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| format!("spawn redis-server (scripts/test.sh installs it): {e}"))?;
    Ok((port, child))
}

/// How long SAVE is retried while a save is already in progress.
const SAVE_RETRY: Duration = Duration::from_secs(30);

/// `SAVE`, retried while it answers that a save is in progress: Elsa's
/// periodic snapshot (`snapshot-interval-sec`, `docs/durability.md`,
/// Snapshots) is Redis's save point, and SAVE meets a running one with
/// `-ERR Background save already in progress` in both.
pub fn save(c: &mut Conn) -> Reply {
    let deadline = Instant::now() + SAVE_RETRY;
    loop {
        let r = c.call(&[b"SAVE"]);
        match &r {
            Reply::Error(t) if t.ends_with(b"already in progress") && Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(50));
            }
            _ => return r,
        }
    }
}

/// Sends `sig` to `pid` (the process this test started).
fn signal(pid: u32, sig: &str) {
    let _ = Command::new("kill")
        .arg(format!("-{sig}"))
        .arg(pid.to_string())
        .status();
}

fn wait_exit(child: &mut Child, timeout: Duration) -> bool {
    let deadline = Instant::now() + timeout;
    loop {
        if let Ok(Some(_)) = child.try_wait() {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Stops `child` (listening on `port`) the way `kind` says; an error names
/// what did not go as it should (a refused SAVE or SHUTDOWN, a hang).
fn stop(who: &str, port: u16, child: &mut Child, kind: RestartKind) -> Result<(), String> {
    match kind {
        RestartKind::Sigterm => signal(child.id(), "TERM"),
        RestartKind::Shutdown => {
            let mut c = Conn::connect(port).map_err(|e| format!("{who}: connect: {e}"))?;
            c.set_read_timeout(STOP_TIMEOUT);
            // Success is the connection closing without a reply.
            match c.call(&[b"SHUTDOWN"]) {
                Reply::Broken(_) => {}
                other => return Err(format!("{who}: SHUTDOWN answered {other}")),
            }
        }
        RestartKind::SaveKill9 => {
            let mut c = Conn::connect(port).map_err(|e| format!("{who}: connect: {e}"))?;
            c.set_read_timeout(STOP_TIMEOUT);
            let r = save(&mut c);
            if r != Reply::Simple(b"OK".to_vec()) {
                return Err(format!("{who}: SAVE answered {r}"));
            }
            let _ = child.kill();
        }
        RestartKind::Kill9 => {
            let _ = child.kill();
        }
    }
    if !wait_exit(child, STOP_TIMEOUT) {
        let _ = child.kill();
        let _ = child.wait();
        return Err(format!(
            "{who} did not exit within {STOP_TIMEOUT:?} ({kind})"
        ));
    }
    Ok(())
}

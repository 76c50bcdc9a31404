//! Test support: start the real `elsa server` process on a free loopback
//! port, and stop it by PID when the test ends.
#![allow(dead_code)]
pub mod cluster;
pub mod hosts;
pub mod openmetrics;
pub mod redis_server;

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A running `elsa server` child process.
pub struct Elsa {
    pub port: u16,
    pub child: Child,
    pub data_dir: PathBuf,
}

/// An environment knob (`ELSA_…` sizes and seeds of the checkers), or its
/// default; a value that does not parse stops the test rather than being
/// silently replaced.
pub fn env_or<T: std::str::FromStr>(name: &str, default: T) -> T {
    match std::env::var(name) {
        Ok(v) => v
            .parse()
            .unwrap_or_else(|_| panic!("{name}={v:?} is not a valid value")),
        Err(_) => default,
    }
}

/// A free loopback port: free now, below the ephemeral range and never
/// handed out before by this process. (A port taken from the ephemeral
/// range and released can be any parallel test's next outgoing or server
/// port; CI once saw two isolation tests share one server that way.)
pub fn free_port() -> u16 {
    cluster::free_tcp_udp_port()
}

/// Whether the server answering on `port` is the process `pid` (a server
/// that could not bind its port exits, and another test's server may be
/// the one answering there). A server that refuses INFO before AUTH counts
/// as answering.
pub fn served_by(port: u16, pid: u32) -> bool {
    let Ok(client) = redis::Client::open(format!("redis://127.0.0.1:{port}/")) else {
        return false;
    };
    let Ok(mut c) = client.get_connection() else {
        return false;
    };
    let info = match redis::cmd("INFO").arg("server").query::<String>(&mut c) {
        Ok(info) => info,
        Err(e) => return e.kind() == redis::ErrorKind::AuthenticationFailed || e.code().is_some(),
    };
    info.lines()
        .any(|l| l.trim() == format!("process_id:{pid}"))
}

/// [`served_by`] for a server that requires `AUTH password`: it must
/// accept the password and name `pid` as its process.
pub fn served_by_with_password(port: u16, pid: u32, password: &str) -> bool {
    let Ok(client) = redis::Client::open(format!("redis://:{password}@127.0.0.1:{port}/")) else {
        return false;
    };
    let Ok(mut c) = client.get_connection() else {
        return false;
    };
    redis::cmd("INFO")
        .arg("server")
        .query::<String>(&mut c)
        .is_ok_and(|info| {
            info.lines()
                .any(|l| l.trim() == format!("process_id:{pid}"))
        })
}

/// Path of the `elsa` binary the tests run: `$ELSA_BIN` when set (to run
/// a new test against an older build, e.g. to see it fail without a fix),
/// else the one cargo built for these tests.
pub fn elsa_bin() -> PathBuf {
    std::env::var_os("ELSA_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_BIN_EXE_elsa")))
}

impl Elsa {
    /// Starts `elsa server` with `extra` flags on a free port; waits until it
    /// answers PING.
    pub fn start(extra: &[&str]) -> Elsa {
        Elsa::spawn_ready(extra, None)
    }

    /// Starts `elsa server` with `extra` flags (and `--requirepass` when
    /// `password` is given) on a free port and waits until this very
    /// process answers there. A server that exits during start-up (another
    /// process took its port between the check and the bind) is started
    /// again on another port, twice at most.
    fn spawn_ready(extra: &[&str], password: Option<&str>) -> Elsa {
        let mut last_exit = None;
        for _ in 0..3 {
            let port = free_port();
            let data_dir =
                std::env::temp_dir().join(format!("elsa-test-{}-{}", std::process::id(), port));
            let mut cmd = Command::new(elsa_bin());
            cmd.arg("server")
                .arg("--port")
                .arg(port.to_string())
                .arg("--data-dir")
                .arg(&data_dir)
                .args(extra)
                .env("ELSA_LOG", "warn")
                .stdout(Stdio::null())
                .stderr(Stdio::inherit());
            if let Some(password) = password {
                cmd.arg("--requirepass").arg(password);
            }
            let child = cmd.spawn().expect("spawn elsa server");
            let mut elsa = Elsa {
                port,
                child,
                data_dir,
            };
            match elsa.wait_ready(password) {
                Ok(()) => return elsa,
                Err(status) => last_exit = Some(status),
            }
        }
        panic!("elsa server exited during startup three times (last: {last_exit:?})");
    }

    /// Waits until this very process answers on its port; `Err` with its
    /// exit status if it exits first.
    fn wait_ready(&mut self, password: Option<&str>) -> Result<(), std::process::ExitStatus> {
        let deadline = Instant::now() + Duration::from_secs(20);
        while Instant::now() < deadline {
            if let Ok(Some(status)) = self.child.try_wait() {
                return Err(status);
            }
            let ours = match password {
                None => served_by(self.port, self.child.id()),
                Some(password) => served_by_with_password(self.port, self.child.id(), password),
            };
            if ours {
                return Ok(());
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        panic!("elsa server on port {} did not answer PING", self.port);
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }

    pub fn client(&self) -> redis::Client {
        redis::Client::open(self.url()).expect("client")
    }

    pub fn conn(&self) -> redis::Connection {
        self.client().get_connection().expect("connect")
    }

    /// Sends SIGTERM and waits for the process to exit.
    pub fn stop(&mut self) -> std::process::ExitStatus {
        unsafe_kill(self.child.id() as i32, 15);
        self.child.wait().expect("wait elsa")
    }
}

fn unsafe_kill(pid: i32, sig: i32) {
    let _ = Command::new("kill")
        .arg(format!("-{sig}"))
        .arg(pid.to_string())
        .status();
}

impl Drop for Elsa {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.data_dir);
    }
}

impl Elsa {
    /// Starts a server that requires `AUTH password`.
    pub fn start_with_password(password: &str) -> Elsa {
        Elsa::spawn_ready(&[], Some(password))
    }
}

/// A directory a test owns — a data dir (`data/`) plus server logs — kept
/// across server restarts and removed when the test ends.
pub struct TestDir {
    pub root: PathBuf,
}

impl TestDir {
    /// A fresh, empty directory under the system temp dir.
    pub fn new(tag: &str) -> TestDir {
        static NEXT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let root = std::env::temp_dir().join(format!(
            "elsa-{tag}-{}-{n}-{}",
            std::process::id(),
            free_port()
        ));
        let _ = std::fs::remove_dir_all(&root);
        std::fs::create_dir_all(&root).expect("create test dir");
        TestDir { root }
    }

    /// The server's `--data-dir`.
    pub fn data(&self) -> PathBuf {
        self.root.join("data")
    }

    /// Where the servers' stdout and stderr go (appended across restarts).
    pub fn log(&self) -> PathBuf {
        self.root.join("server.log")
    }
}

impl Drop for TestDir {
    fn drop(&mut self) {
        // ELSA_KEEP_TEST_DIRS=1 keeps data and server logs for a post-mortem.
        if std::env::var_os("ELSA_KEEP_TEST_DIRS").is_none() {
            let _ = std::fs::remove_dir_all(&self.root);
        }
    }
}

/// An `elsa server` on a data dir the test owns. Unlike [`Elsa`], dropping
/// it kills the process (by PID) but keeps the data, so a test can kill it
/// and start another on the same directory.
pub struct Node {
    pub port: u16,
    pub child: Child,
    pub data_dir: PathBuf,
    pub log: PathBuf,
}

impl Node {
    /// The command line of a server on `data_dir` and `port` (the caller
    /// chooses where its output goes).
    pub fn command(data_dir: &std::path::Path, port: u16, extra: &[&str]) -> Command {
        let mut cmd = Command::new(elsa_bin());
        cmd.arg("server")
            .arg("--port")
            .arg(port.to_string())
            .arg("--data-dir")
            .arg(data_dir)
            .args(extra)
            .env("ELSA_LOG", "warn")
            .stdin(Stdio::null());
        cmd
    }

    /// Starts a server on a free port, its output appended to `log`,
    /// without waiting for it.
    pub fn spawn(data_dir: &std::path::Path, log: &std::path::Path, extra: &[&str]) -> Node {
        use std::io::Write;
        let port = free_port();
        let mut out = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(log)
            .expect("open server log");
        let _ = writeln!(out, "=== elsa server --port {port} {}", extra.join(" "));
        let err = out.try_clone().expect("clone log handle");
        let child = Node::command(data_dir, port, extra)
            .stdout(out)
            .stderr(err)
            .spawn()
            .expect("spawn elsa server");
        Node {
            port,
            child,
            data_dir: data_dir.to_path_buf(),
            log: log.to_path_buf(),
        }
    }

    /// Starts a server and waits until it answers PING (recovery included).
    pub fn start(data_dir: &std::path::Path, log: &std::path::Path, extra: &[&str]) -> Node {
        let mut node = Node::spawn(data_dir, log, extra);
        node.wait_ready(Duration::from_secs(60));
        node
    }

    /// Waits until the server answers PING; panics with its log if it
    /// exits or does not answer within `timeout`.
    pub fn wait_ready(&mut self, timeout: Duration) {
        if let Err(e) = self.try_wait_ready(timeout) {
            panic!("{e}");
        }
    }

    /// [`Node::wait_ready`], answering what went wrong instead of
    /// panicking (a caller may retry a lost port race: the text then holds
    /// "Address already in use").
    pub fn try_wait_ready(&mut self, timeout: Duration) -> Result<(), String> {
        let deadline = Instant::now() + timeout;
        while Instant::now() < deadline {
            if let Ok(Some(status)) = self.child.try_wait() {
                return Err(format!(
                    "elsa server exited during startup ({status}); log:\n{}",
                    self.log_text()
                ));
            }
            if served_by(self.port, self.child.id()) {
                return Ok(());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        Err(format!(
            "elsa server on port {} did not answer PING; log:\n{}",
            self.port,
            self.log_text()
        ))
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }

    pub fn client(&self) -> redis::Client {
        redis::Client::open(self.url()).expect("client")
    }

    pub fn conn(&self) -> redis::Connection {
        let c = self.client().get_connection().expect("connect");
        // A hung server fails the test instead of hanging it.
        c.set_read_timeout(Some(Duration::from_secs(60)))
            .expect("read timeout");
        c
    }

    /// `kill -9`: no shutdown code runs.
    pub fn kill9(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// Sends SIGTERM and waits up to `timeout` for the process to exit.
    pub fn terminate(&mut self, timeout: Duration) -> std::process::ExitStatus {
        unsafe_kill(self.child.id() as i32, 15);
        self.wait_exit(timeout).unwrap_or_else(|| {
            panic!(
                "elsa server did not exit within {timeout:?} of SIGTERM; log:\n{}",
                self.log_text()
            )
        })
    }

    /// The exit status, if the process ends within `timeout`.
    pub fn wait_exit(&mut self, timeout: Duration) -> Option<std::process::ExitStatus> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Ok(Some(status)) = self.child.try_wait() {
                return Some(status);
            }
            if Instant::now() >= deadline {
                return None;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Everything the servers wrote to the log file so far.
    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// `INFO <section>` as field → value.
    pub fn info(&self, section: &str) -> std::collections::HashMap<String, String> {
        let text: String = redis::cmd("INFO")
            .arg(section)
            .query(&mut self.conn())
            .expect("INFO");
        text.lines()
            .filter_map(|l| l.split_once(':'))
            .map(|(k, v)| (k.to_string(), v.trim().to_string()))
            .collect()
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// How many times connections moved between the workers of the server on
/// `port` (INFO transactions' `clients_moved`; `--worker-move-after`).
#[allow(dead_code)] // not every test binary uses it
pub fn clients_moved(port: u16) -> u64 {
    let mut con = redis::Client::open(format!("redis://127.0.0.1:{port}/"))
        .and_then(|c| c.get_connection())
        .expect("connect for INFO");
    let info: String = redis::cmd("INFO")
        .arg("transactions")
        .query(&mut con)
        .expect("INFO transactions");
    info.lines()
        .find_map(|l| l.strip_prefix("clients_moved:"))
        .and_then(|v| v.trim().parse().ok())
        .expect("INFO transactions has clients_moved")
}

/// `n` clients reading `a` and `b` at once without pause (pipelines of 8
/// `MGET`s) until `done` is set, passing each MGET's pair to `check`.
/// With the keys on two shards each MGET holds both for its read: readers
/// a writer of those keys must get past. Each thread answers how many
/// reads it made.
#[allow(dead_code)] // not every test binary uses it
pub fn looping_pair_readers(
    elsa: &Elsa,
    (a, b): (&str, &str),
    n: usize,
    done: &std::sync::Arc<std::sync::atomic::AtomicBool>,
    check: fn(Option<String>, Option<String>),
) -> Vec<std::thread::JoinHandle<u64>> {
    (0..n)
        .map(|_| {
            let (a, b, done) = (a.to_string(), b.to_string(), done.clone());
            let mut r = elsa.conn();
            std::thread::spawn(move || {
                let mut reads = 0;
                while !done.load(std::sync::atomic::Ordering::Relaxed) {
                    let mut pipe = redis::pipe();
                    for _ in 0..8 {
                        pipe.cmd("MGET").arg(&a).arg(&b);
                    }
                    let got: Vec<(Option<String>, Option<String>)> =
                        pipe.query(&mut r).expect("MGET pipeline");
                    for (x, y) in got {
                        check(x, y);
                    }
                    reads += 8;
                }
                reads
            })
        })
        .collect()
}

/// Two keys the node keeps on different shards (`--workers 2`): SCAN's
/// cursor names the shard (shard × 256 + segment), so SCAN from cursor 256
/// lists exactly the second shard's keys.
pub fn keys_on_two_shards(c: &mut redis::Connection) -> (String, String) {
    let keys: Vec<String> = (0..32).map(|i| format!("probe{i}")).collect();
    for k in &keys {
        let _: () = redis::cmd("SET").arg(k).arg(1).query(c).unwrap();
    }
    let (_, second): (u64, Vec<String>) = redis::cmd("SCAN")
        .arg(256)
        .arg("COUNT")
        .arg(1000)
        .query(c)
        .unwrap();
    let a = keys
        .iter()
        .find(|k| !second.contains(k))
        .expect("a key on shard 0");
    let b = second.first().expect("a key on shard 1").clone();
    let _: i64 = redis::cmd("DEL").arg(&keys).query(c).unwrap();
    (a.clone(), b)
}

/// CLUSTER SLOTS as (start, end, port, id).
#[allow(dead_code)] // not every test binary uses it
pub fn cluster_slots(c: &mut redis::Connection) -> Vec<(u16, u16, u16, String)> {
    let v: Vec<redis::Value> = redis::cmd("CLUSTER").arg("SLOTS").query(c).unwrap();
    v.into_iter()
        .map(|range| {
            let (start, end, node): (u16, u16, (String, u16, String, redis::Value)) =
                redis::from_redis_value(&range).unwrap();
            assert_eq!(node.0, "127.0.0.1");
            (start, end, node.1, node.2)
        })
        .collect()
}

/// The port `map` (from [`cluster_slots`]) lists for `slot`.
#[allow(dead_code)] // not every test binary uses it
pub fn slot_owner_port(map: &[(u16, u16, u16, String)], slot: u16) -> u16 {
    let owners: Vec<u16> = map
        .iter()
        .filter(|r| r.0 <= slot && slot <= r.1)
        .map(|r| r.2)
        .collect();
    assert_eq!(owners.len(), 1, "slot {slot} has exactly one owner");
    owners[0]
}

/// `f()`, its panic (the cluster harness panics on a timeout) as an error.
pub fn caught<T>(f: impl FnOnce() -> T) -> Result<T, String> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)).map_err(|p| {
        p.downcast_ref::<String>()
            .cloned()
            .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
            .unwrap_or_else(|| "panic".into())
    })
}

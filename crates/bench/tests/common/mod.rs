//! Real servers for the live tests: Debian's `redis-server`, a throw-away
//! PostgreSQL cluster (initdb + pg_ctl into a temp dir), and the `elsa`
//! binary — each on a free loopback port, each stopped by PID on drop.
#![allow(dead_code)]

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use clap::Parser;
use elsa_bench::report::RunRecord;
use elsa_bench::BenchArgs;

/// A free loopback port (bound, then released).
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("bind an ephemeral loopback port")
}

fn temp_dir(what: &str, port: u16) -> PathBuf {
    let d = std::env::temp_dir().join(format!("elsa-bench-{what}-{}-{port}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).expect("create temp dir");
    d
}

fn wait_for_ping(url: &str, what: &str) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while Instant::now() < deadline {
        if let Ok(mut c) = redis::Client::open(url).and_then(|c| c.get_connection()) {
            if redis::cmd("PING").query::<String>(&mut c).is_ok() {
                return;
            }
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    panic!("{what} at {url} did not answer PING");
}

fn stop_child(child: &mut Child) {
    let _ = Command::new("kill")
        .arg("-TERM")
        .arg(child.id().to_string())
        .status();
    let deadline = Instant::now() + Duration::from_secs(10);
    while Instant::now() < deadline {
        if let Ok(Some(_)) = child.try_wait() {
            return;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let _ = child.kill();
    let _ = child.wait();
}

/// `elsa bench …` parsed as the binary would parse it, then run.
pub fn bench(args: &[&str]) -> Vec<RunRecord> {
    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        args: BenchArgs,
    }
    let argv = std::iter::once("bench").chain(args.iter().copied());
    let cli = Cli::try_parse_from(argv).unwrap_or_else(|e| panic!("bad arguments {args:?}: {e}"));
    elsa_bench::execute(cli.args).unwrap_or_else(|e| panic!("elsa bench {args:?} failed: {e}"))
}

/// Like [`bench`], but expects an error and answers its text.
pub fn bench_err(args: &[&str]) -> String {
    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        args: BenchArgs,
    }
    let argv = std::iter::once("bench").chain(args.iter().copied());
    match Cli::try_parse_from(argv) {
        Err(e) => e.to_string(),
        Ok(cli) => match elsa_bench::execute(cli.args) {
            Ok(r) => panic!("elsa bench {args:?} should fail, got {r:?}"),
            Err(e) => e.to_string(),
        },
    }
}

/// Debian's redis-server, no persistence, on a free loopback port.
pub struct Redis {
    pub port: u16,
    child: Child,
    dir: PathBuf,
}

impl Redis {
    pub fn start() -> Redis {
        let bin = ["/usr/bin/redis-server", "redis-server"]
            .into_iter()
            .find(|b| Command::new(b).arg("--version").output().is_ok())
            .expect(
                "redis-server not found: apt-get install -y redis-server (scripts/test.sh does it)",
            );
        let port = free_port();
        let dir = temp_dir("redis", port);
        let child = Command::new(bin)
            .args([
                "--port",
                &port.to_string(),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
            ])
            .arg("--dir")
            .arg(&dir)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn redis-server");
        let r = Redis { port, child, dir };
        wait_for_ping(&r.url(), "redis-server");
        r
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    pub fn conn(&self) -> redis::Connection {
        redis::Client::open(self.url())
            .and_then(|c| c.get_connection())
            .expect("connect to redis")
    }
}

impl Drop for Redis {
    fn drop(&mut self) {
        stop_child(&mut self.child);
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// The `elsa` binary this workspace builds: next to the test executable's
/// deps/ directory (target/debug/elsa), built with cargo if missing.
pub fn elsa_bin() -> PathBuf {
    let exe = std::env::current_exe().expect("test executable path");
    // target/debug/deps/live-xxxx -> target/debug/elsa
    let profile_dir = exe.parent().and_then(Path::parent).expect("target/debug");
    let bin = profile_dir.join("elsa");
    if bin.exists() {
        return bin;
    }
    // `cargo test -p elsa-bench` does not build the root package's binary.
    // Build it into a separate target dir so this cannot wait on the lock
    // the running cargo holds.
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let target = root.join("target/bench-elsa");
    eprintln!("building the elsa binary into {} ...", target.display());
    let status = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()))
        .args(["build", "--bin", "elsa"])
        .env("CARGO_TARGET_DIR", &target)
        .current_dir(&root)
        .status()
        .expect("run cargo build --bin elsa");
    assert!(status.success(), "cargo build --bin elsa failed");
    target.join("debug/elsa")
}

/// A real `elsa server` on a free loopback port.
pub struct Elsa {
    pub port: u16,
    child: Child,
    dir: PathBuf,
}

impl Elsa {
    pub fn start() -> Elsa {
        let bin = elsa_bin();
        let port = free_port();
        let dir = temp_dir("elsa", port);
        let child = Command::new(&bin)
            .args(["server", "--port", &port.to_string(), "--data-dir"])
            .arg(dir.join("data"))
            .env("ELSA_LOG", "warn")
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap_or_else(|e| panic!("spawn {}: {e}", bin.display()));
        let s = Elsa { port, child, dir };
        wait_for_ping(&s.url(), "elsa server");
        s
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    pub fn conn(&self) -> redis::Connection {
        redis::Client::open(self.url())
            .and_then(|c| c.get_connection())
            .expect("connect to elsa")
    }
}

impl Drop for Elsa {
    fn drop(&mut self) {
        stop_child(&mut self.child);
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Where Debian keeps PostgreSQL's server binaries (not on PATH).
pub fn pg_bin_dir() -> Option<PathBuf> {
    let on_path = Command::new("sh")
        .args(["-c", "command -v initdb"])
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| PathBuf::from(String::from_utf8_lossy(&o.stdout).trim()));
    if let Some(p) = on_path.and_then(|p| p.parent().map(Path::to_path_buf)) {
        if p.join("pg_ctl").exists() {
            return Some(p);
        }
    }
    let mut versions: Vec<PathBuf> = std::fs::read_dir("/usr/lib/postgresql")
        .ok()?
        .filter_map(|e| e.ok().map(|e| e.path().join("bin")))
        .filter(|b| b.join("initdb").exists() && b.join("pg_ctl").exists())
        .collect();
    versions.sort();
    versions.pop()
}

/// A throw-away PostgreSQL cluster: initdb into a temp dir, started with
/// pg_ctl on 127.0.0.1 and a free port, stopped by its postmaster PID.
/// initdb refuses to run as root, so as root it runs as `postgres`.
pub struct Postgres {
    pub port: u16,
    dir: PathBuf,
    as_postgres: bool,
}

fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
        .unwrap_or(false)
}

impl Postgres {
    pub fn start() -> Postgres {
        let bin = pg_bin_dir().expect(
            "PostgreSQL server binaries (initdb, pg_ctl) not found: apt-get install -y postgresql (scripts/test.sh does it)",
        );
        let port = free_port();
        let dir = temp_dir("pg", port);
        let as_postgres = is_root();
        if as_postgres {
            let ok = Command::new("chown")
                .args(["-R", "postgres:postgres"])
                .arg(&dir)
                .status()
                .map(|s| s.success())
                .unwrap_or(false);
            assert!(
                ok,
                "chown {} to postgres (the Debian package creates that user)",
                dir.display()
            );
        }
        let pg = Postgres {
            port,
            dir,
            as_postgres,
        };
        let data = pg.dir.join("data");
        let out = pg
            .cmd(&bin.join("initdb"))
            .arg("-D")
            .arg(&data)
            .args(["-U", "bench", "--auth=trust", "-E", "UTF8", "--no-sync"])
            .output()
            .expect("run initdb");
        assert!(
            out.status.success(),
            "initdb failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        // fsync off: the tests check behaviour, not durability.
        let opts = format!(
            "-c listen_addresses=127.0.0.1 -p {port} -c unix_socket_directories={} -c fsync=off -c max_connections=200",
            pg.dir.display()
        );
        let out = pg
            .cmd(&bin.join("pg_ctl"))
            .arg("-D")
            .arg(&data)
            .arg("-l")
            .arg(pg.dir.join("log"))
            .args(["-o", &opts, "-w", "-t", "60", "start"])
            .output()
            .expect("run pg_ctl start");
        assert!(
            out.status.success(),
            "pg_ctl start failed: {}{}",
            String::from_utf8_lossy(&out.stderr),
            std::fs::read_to_string(pg.dir.join("log")).unwrap_or_default()
        );
        pg
    }

    fn cmd(&self, program: &Path) -> Command {
        if self.as_postgres {
            let mut c = Command::new("runuser");
            c.args(["-u", "postgres", "--"]).arg(program);
            c
        } else {
            Command::new(program)
        }
    }

    pub fn url(&self) -> String {
        format!("postgres://bench@127.0.0.1:{}/postgres", self.port)
    }

    pub fn client(&self) -> postgres::Client {
        postgres::Client::connect(&self.url(), postgres::NoTls).expect("connect to postgres")
    }

    fn postmaster_pid(&self) -> Option<u32> {
        std::fs::read_to_string(self.dir.join("data/postmaster.pid"))
            .ok()?
            .lines()
            .next()?
            .trim()
            .parse()
            .ok()
    }
}

impl Drop for Postgres {
    fn drop(&mut self) {
        if let Some(pid) = self.postmaster_pid() {
            // SIGINT = PostgreSQL's fast shutdown.
            let _ = Command::new("kill")
                .arg("-INT")
                .arg(pid.to_string())
                .status();
            let deadline = Instant::now() + Duration::from_secs(20);
            while Instant::now() < deadline && Path::new(&format!("/proc/{pid}")).exists() {
                std::thread::sleep(Duration::from_millis(50));
            }
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

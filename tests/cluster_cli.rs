//! `elsa cluster` from the outside: argument errors, and a live two-region
//! cluster brought up, checked with raw RESP PINGs and `status`, and brought
//! down, with every node's PID gone afterwards. A guard runs `cluster down`
//! (then SIGKILLs any recorded PID still alive) even when a test fails.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream, UdpSocket};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Duration;

fn elsa(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_elsa"))
        .args(args)
        .output()
        .expect("run elsa")
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// A fresh directory under the system temp dir, unique to this test.
fn temp_dir(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("elsa-cluster-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    d
}

fn port_free(port: u16) -> bool {
    TcpListener::bind(("127.0.0.1", port)).is_ok() && UdpSocket::bind(("127.0.0.1", port)).is_ok()
}

/// A base port whose first `nodes` client ports and peer ports (base+1000+i)
/// are all free right now. Bases are drawn below the Linux ephemeral range
/// (32768+), so other tests' outgoing connections don't take them.
fn free_base_port(nodes: u16) -> u16 {
    use rand::Rng;
    let mut rng = rand::thread_rng();
    for _ in 0..200 {
        let base: u16 = rng.gen_range(20_000..30_000);
        if (0..nodes).all(|i| port_free(base + i) && port_free(base + 1000 + i)) {
            return base;
        }
    }
    panic!("no free port range found");
}

/// The `pid = N` entries of a cluster file.
fn recorded_pids(dir: &Path) -> Vec<u32> {
    let Ok(file) = std::fs::read_to_string(dir.join("cluster.toml")) else {
        return Vec::new();
    };
    file.lines()
        .filter_map(|l| l.strip_prefix("pid = "))
        .map(|p| p.trim().parse().expect("pid"))
        .collect()
}

/// Alive and not a zombie (stopped nodes are reparented to an init that
/// may never reap them).
fn pid_alive(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => {
            let state = stat
                .rsplit_once(')')
                .and_then(|(_, rest)| rest.trim_start().chars().next());
            !matches!(state, Some('Z' | 'X'))
        }
        Err(_) => false,
    }
}

/// Stops the cluster in `dir` when dropped: `cluster down`, then SIGKILL
/// for any PID it learned of that still runs, then removes the directory.
struct ClusterGuard {
    dir: PathBuf,
    pids: Vec<u32>,
}

impl ClusterGuard {
    fn remember_pids(&mut self) {
        for p in recorded_pids(&self.dir) {
            if !self.pids.contains(&p) {
                self.pids.push(p);
            }
        }
    }
}

impl Drop for ClusterGuard {
    fn drop(&mut self) {
        self.remember_pids();
        let _ = elsa(&["cluster", "down", "--dir", &self.dir.to_string_lossy()]);
        for &p in &self.pids {
            if p > 1 && pid_alive(p) {
                let _ = Command::new("kill").args(["-9", &p.to_string()]).status();
            }
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A raw RESP `PING`; the first reply line.
fn raw_ping(port: u16) -> String {
    let mut s = TcpStream::connect(("127.0.0.1", port)).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    s.write_all(b"*1\r\n$4\r\nPING\r\n").unwrap();
    let mut reply = Vec::new();
    let mut buf = [0u8; 64];
    while !reply.ends_with(b"\r\n") {
        let n = s.read(&mut buf).expect("read reply");
        assert!(n > 0, "connection closed");
        reply.extend_from_slice(&buf[..n]);
    }
    text(&reply).trim_end().to_string()
}

fn assert_fails(args: &[&str], needle: &str) {
    let out = elsa(args);
    assert!(!out.status.success(), "{args:?} should fail");
    let err = text(&out.stderr);
    assert!(
        err.contains(needle),
        "{args:?}: stderr {err:?} lacks {needle:?}"
    );
}

#[test]
fn bad_arguments_are_refused_clearly() {
    let dir = temp_dir("bad-args");
    let d = dir.to_string_lossy().into_owned();
    let run = |extra: &[&str], needle: &str| {
        let mut args = vec!["cluster", "up", "--dir", &d];
        args.extend_from_slice(extra);
        assert_fails(&args, needle);
    };
    let one = ["--regions", "1", "--nodes-per-region", "1"];
    run(
        &["--regions", "0", "--nodes-per-region", "1"],
        "--regions must be at least 1",
    );
    run(
        &["--regions", "1", "--nodes-per-region", "0"],
        "--nodes-per-region must be at least 1",
    );
    run(
        &[
            "--regions",
            "2",
            "--nodes-per-region",
            "1",
            "--base-port",
            "65000",
        ],
        "too high",
    );
    run(&["--regions", "40", "--nodes-per-region", "40"], "too many");
    run(&[&one[..], &["--base-port", "0"]].concat(), "--base-port");
    run(&[&one[..], &["--rtt", "fast"]].concat(), "--rtt");
    run(&[&one[..], &["--loss", "150%"]].concat(), "--loss");
    run(
        &[&one[..], &["--replication", "paxos"]].concat(),
        "--replication",
    );
    assert_fails(&["cluster", "down", "--dir", &d], "no cluster in");
    assert_fails(&["cluster", "status", "--dir", &d], "no cluster in");
    // Nothing was started for any of these.
    assert!(!dir.join("cluster.toml").exists());
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_node_that_fails_to_start_stops_the_rest() {
    let dir = temp_dir("fail");
    let _guard = ClusterGuard {
        dir: dir.clone(),
        pids: Vec::new(),
    };
    let base = free_base_port(2);
    // The server refuses a merge epoch below 10 ms and exits at once.
    let out = elsa(&[
        "cluster",
        "up",
        "--regions",
        "2",
        "--nodes-per-region",
        "1",
        "--base-port",
        &base.to_string(),
        "--dir",
        &dir.to_string_lossy(),
        "--merge-epoch-ms",
        "5",
    ]);
    assert!(!out.status.success());
    let err = text(&out.stderr);
    assert!(err.contains("exited during startup"), "{err}");
    assert!(
        err.contains("merge-epoch-ms"),
        "the log tail is shown: {err}"
    );
    assert!(!dir.join("cluster.toml").exists());
    // Neither node is left behind: no process runs on the cluster's
    // directory. (Not "nothing answers on its ports": the ports are picked
    // at random, and once another process held one — CI, 2026-11-26.)
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    loop {
        let left = processes_on(&dir);
        if left.is_empty() {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "nodes left behind: {left:?}"
        );
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
}

/// PIDs of the processes whose command line names `dir`.
fn processes_on(dir: &Path) -> Vec<u32> {
    let needle = dir.to_string_lossy().into_owned();
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/cmdline"))
                .is_ok_and(|c| String::from_utf8_lossy(&c).contains(&needle))
        })
        .collect()
}

#[test]
fn up_status_down() {
    let dir = temp_dir("live");
    let d = dir.to_string_lossy().into_owned();
    let mut guard = ClusterGuard {
        dir: dir.clone(),
        pids: Vec::new(),
    };
    let base = free_base_port(2);
    let out = elsa(&[
        "cluster",
        "up",
        "--regions",
        "2",
        "--nodes-per-region",
        "1",
        "--base-port",
        &base.to_string(),
        "--dir",
        &d,
        "--rtt",
        "20ms",
        "--loss",
        "0.5",
        "--workers",
        "1",
    ]);
    guard.remember_pids();
    let stdout = text(&out.stdout);
    assert!(
        out.status.success(),
        "up failed: {stdout}{}",
        text(&out.stderr)
    );
    assert!(
        stdout.contains(&format!("region r1: 127.0.0.1:{base}\n")),
        "{stdout}"
    );
    assert!(
        stdout.contains(&format!("region r2: 127.0.0.1:{}\n", base + 1)),
        "{stdout}"
    );
    assert!(
        stdout.contains(&format!("stop with: elsa cluster down --dir {d}")),
        "{stdout}"
    );
    // Peer links run over TLS with a secret only the owner can read.
    {
        use std::os::unix::fs::PermissionsExt;
        let meta = std::fs::metadata(dir.join("cluster.secret")).expect("cluster.secret");
        assert_eq!(meta.permissions().mode() & 0o777, 0o600);
    }

    let pids = recorded_pids(&dir);
    assert_eq!(pids.len(), 2, "two nodes recorded");
    assert!(pids.iter().all(|&p| pid_alive(p)));
    let file = std::fs::read_to_string(dir.join("cluster.toml")).unwrap();
    for want in [
        format!("client-port = {base}"),
        format!("peer-port = {}", base + 1000),
        format!("peer-port = {}", base + 1001),
        "region = \"r2\"".to_string(),
        "id = 2".to_string(),
        "r2-1/data".to_string(),
    ] {
        assert!(file.contains(&want), "cluster file lacks {want:?}:\n{file}");
    }

    // Both client ports answer a raw RESP PING.
    assert_eq!(raw_ping(base), "+PONG");
    assert_eq!(raw_ping(base + 1), "+PONG");

    // Each node was given the cluster flags.
    let log = std::fs::read_to_string(dir.join("r2-1/elsa.log")).unwrap();
    assert!(!log.contains('\u{1b}'), "no terminal colours in the log");
    let cmdline = std::fs::read(format!("/proc/{}/cmdline", pids[1])).unwrap();
    let cmdline = text(&cmdline).replace('\0', " ");
    for want in [
        "server --node-id 2 ".to_string(),
        "--region r2".to_string(),
        format!("--seeds 127.0.0.1:{}", base + 1000),
        "--wan-delay-ms 10".to_string(),
        "--wan-loss 0.5".to_string(),
        "--fault-injection true".to_string(),
        "--workers 1".to_string(),
    ] {
        assert!(cmdline.contains(&want), "{cmdline:?} lacks {want:?}");
    }

    let st = elsa(&["cluster", "status", "--dir", &d]);
    let st_out = text(&st.stdout);
    assert!(st.status.success(), "status: {st_out}{}", text(&st.stderr));
    assert_eq!(st_out.matches(" alive ").count(), 2, "{st_out}");
    assert_eq!(st_out.matches("PONG").count(), 2, "{st_out}");
    assert!(st_out.contains("2/2 nodes up"), "{st_out}");

    // A second `up` on a running cluster is refused and starts nothing.
    assert_fails(
        &[
            "cluster",
            "up",
            "--regions",
            "1",
            "--nodes-per-region",
            "1",
            "--base-port",
            &free_base_port(1).to_string(),
            "--dir",
            &d,
        ],
        "already running",
    );
    assert_eq!(recorded_pids(&dir), pids);

    let down = elsa(&["cluster", "down", "--dir", &d]);
    assert!(
        down.status.success(),
        "down: {}{}",
        text(&down.stdout),
        text(&down.stderr)
    );
    for &p in &pids {
        assert!(!pid_alive(p), "pid {p} still running after down");
    }
    assert!(!dir.join("cluster.toml").exists());
    assert!(dir.join("r1-1/data").is_dir(), "data kept without --purge");
    assert!(TcpStream::connect(("127.0.0.1", base)).is_err());

    // `status` now has nothing to report on.
    assert!(!elsa(&["cluster", "status", "--dir", &d]).status.success());

    // Up again on the kept data; one node dies behind our back: `status`
    // says so and fails, `down --purge` stops the other and removes it all.
    let again = elsa(&[
        "cluster",
        "up",
        "--regions",
        "2",
        "--nodes-per-region",
        "1",
        "--base-port",
        &base.to_string(),
        "--dir",
        &d,
    ]);
    guard.remember_pids();
    assert!(again.status.success(), "{}", text(&again.stderr));
    let pids = recorded_pids(&dir);
    assert_eq!(pids.len(), 2);
    Command::new("kill")
        .args(["-9", &pids[0].to_string()])
        .status()
        .unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while pid_alive(pids[0]) && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    let st = elsa(&["cluster", "status", "--dir", &d]);
    let st_out = text(&st.stdout);
    assert!(!st.status.success(), "{st_out}");
    assert!(
        st_out.contains(" dead ") && st_out.contains("1/2 nodes up"),
        "{st_out}"
    );
    let down = elsa(&["cluster", "down", "--dir", &d, "--purge"]);
    let down_out = text(&down.stdout);
    assert!(down.status.success(), "{down_out}{}", text(&down.stderr));
    assert!(down_out.contains("1 were not running"), "{down_out}");
    assert!(pids.iter().all(|&p| !pid_alive(p)));
    assert!(!dir.exists(), "--purge removes the cluster dir");
}

/// `INCR key` over raw RESP; the integer reply.
fn raw_incr(port: u16, key: &str) -> i64 {
    let mut s = TcpStream::connect(("127.0.0.1", port)).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(15))).unwrap();
    write!(s, "*2\r\n$4\r\nINCR\r\n${}\r\n{key}\r\n", key.len()).unwrap();
    let mut buf = [0u8; 128];
    let n = s.read(&mut buf).expect("INCR reply");
    let line = text(&buf[..n]);
    line.trim_end()
        .strip_prefix(':')
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("INCR {key} on {port} answered {line:?}"))
}

/// Issue 12, item 10: right after `cluster up`, one `INCR` on each node.
/// Each node of a region used to act as primary before membership had
/// formed, so every INCR answered 1 (three increments lost). `up` now
/// returns only once the cluster has formed, and a new region forms only
/// once all its nodes see each other, the lowest id first.
#[test]
fn increments_right_after_up_all_count() {
    let dir = temp_dir("formed");
    let d = dir.to_string_lossy().into_owned();
    let mut guard = ClusterGuard {
        dir: dir.clone(),
        pids: Vec::new(),
    };
    let base = free_base_port(4);
    let out = elsa(&[
        "cluster",
        "up",
        "--regions",
        "2",
        "--nodes-per-region",
        "2",
        "--base-port",
        &base.to_string(),
        "--dir",
        &d,
        "--workers",
        "1",
    ]);
    guard.remember_pids();
    assert!(
        out.status.success(),
        "up failed: {}{}",
        text(&out.stdout),
        text(&out.stderr)
    );
    // Nodes are region-major: base, base+1 in r1; base+2, base+3 in r2.
    let replies: Vec<i64> = std::thread::scope(|s| {
        let all: Vec<_> = (0..4)
            .map(|i| s.spawn(move || raw_incr(base + i, "c")))
            .collect();
        all.into_iter().map(|h| h.join().expect("INCR")).collect()
    });
    // Inside a region both increments count: the two replies differ. (They
    // need not be consecutive: the other region's increment may arrive by
    // gossip between them, so r1 may answer 1 and 3.) When each node acted
    // as its own primary, both answered 1.
    for (region, pair) in replies.chunks(2).enumerate() {
        assert_ne!(
            pair[0],
            pair[1],
            "region r{}: both nodes' INCRs must count, got {replies:?}",
            region + 1
        );
    }
    // And none is lost: once gossip has carried them, every node reads 4.
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    for i in 0..4u16 {
        let client = redis::Client::open(format!("redis://127.0.0.1:{}", base + i)).unwrap();
        let mut con = client.get_connection().expect("connect");
        loop {
            let got: Option<i64> = redis::cmd("GET").arg("c").query(&mut con).expect("GET c");
            if got == Some(4) {
                break;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "node {i} reads {got:?} 30 s after the INCRs {replies:?}; 4 were acked"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

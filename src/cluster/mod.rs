//! `elsa cluster up | down | status`: a local cluster launcher. It owns
//! starting R regions × N nodes of real `elsa server` processes on loopback
//! (detached, one directory each under the cluster dir), recording them in
//! `<dir>/cluster.toml`, reporting on them, and stopping them by PID. It
//! never talks to the nodes beyond PING: all replication is the servers' own.
//!
//! `decommission` removes a node of any running cluster (it talks to that
//! node: ELSA.DECOMMISSION, then INFO until its slots have drained).
//!
//! - `plan`: pure layout, flag parsing and server command lines (unit-tested);
//! - `process`: liveness by PID, signals, PING, port checks, log tails.

mod decommission;
mod plan;
mod process;

use plan::{
    layout, parse_loss, parse_rtt, server_args, shell_quote, wan_delay_ms, Appendfsync,
    ClusterFile, NodeRecord, NodeSpec, Replication, ServerOptions, CLUSTER_FILE, HOST, SECRET_FILE,
};
use std::fs::File;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// `elsa cluster`.
#[derive(clap::Args, Debug)]
pub struct ClusterArgs {
    #[command(subcommand)]
    command: ClusterCommand,
}

#[derive(clap::Subcommand, Debug)]
enum ClusterCommand {
    /// Start R regions × N nodes of `elsa server` on 127.0.0.1, detached.
    Up(UpArgs),
    /// Stop the cluster in --dir (SIGTERM, then SIGKILL after 10 s).
    Down(DownArgs),
    /// Show each node of the cluster in --dir: process alive or dead, PING.
    Status(DirArg),
    /// Remove one node of a running cluster (any hosts): its slots drain
    /// to the other nodes, then it can be stopped.
    Decommission(decommission::DecommissionArgs),
}

#[derive(clap::Args, Debug)]
struct DirArg {
    /// The cluster's directory (node data, logs, cluster.toml).
    #[arg(long, default_value = "./elsa-cluster")]
    dir: PathBuf,
}

#[derive(clap::Args, Debug)]
struct UpArgs {
    /// Number of regions (named r1, r2, ...).
    #[arg(long)]
    regions: u32,
    /// Nodes in each region; node ids run 1..=R*N, region by region.
    #[arg(long)]
    nodes_per_region: u32,
    /// Simulated round trip between regions: 50ms, 1s, 0 (bare number = ms).
    /// Each node delays its WAN messages by half of it.
    #[arg(long, default_value = "0", value_parser = parse_rtt)]
    rtt: Duration,
    /// Simulated WAN message loss, percent: 1% or 0.5.
    #[arg(long, default_value = "0", value_parser = parse_loss)]
    loss: f64,
    /// Node i (0-based) gets client port base+i and peer port base+1000+i.
    #[arg(long, default_value_t = 7000)]
    base_port: u16,
    #[command(flatten)]
    dir: DirArg,
    /// Shard worker threads per node (server default if not given).
    #[arg(long)]
    workers: Option<usize>,
    /// Replicas of each key (server default if not given).
    #[arg(long)]
    replication_factor: Option<u32>,
    /// Replication protocol (server default if not given).
    #[arg(long, value_enum)]
    replication: Option<Replication>,
    /// Who serves a slot inside a region: `leases` (the server default)
    /// or `gossip` (for regions of two nodes that must survive one
    /// failure).
    #[arg(long)]
    ownership: Option<elsa_cluster::Ownership>,
    /// Merge epoch in milliseconds (server default if not given).
    #[arg(long)]
    merge_epoch_ms: Option<u64>,
    /// When each node fsyncs its log (server default if not given).
    #[arg(long, value_enum)]
    appendfsync: Option<Appendfsync>,
    /// Wipe every node's data dir before starting.
    #[arg(long)]
    fresh: bool,
    /// Seconds to wait for every node to answer PING.
    #[arg(long, default_value_t = 20)]
    ready_timeout_secs: u64,
}

#[derive(clap::Args, Debug)]
struct DownArgs {
    #[command(flatten)]
    dir: DirArg,
    /// Also delete every node's directory (data and log).
    #[arg(long)]
    purge: bool,
}

/// Runs `elsa cluster …`; returns the process exit code.
pub fn run(args: ClusterArgs) -> i32 {
    let result = match args.command {
        ClusterCommand::Up(a) => up(a),
        ClusterCommand::Down(a) => down(a),
        ClusterCommand::Status(a) => status(a),
        ClusterCommand::Decommission(a) => decommission::decommission(a),
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("elsa cluster: {e}");
            1
        }
    }
}

/// How long `down` waits after SIGTERM before SIGKILL.
const STOP_GRACE: Duration = Duration::from_secs(10);
/// Timeout of one PING.
const PING_TIMEOUT: Duration = Duration::from_millis(500);

fn cluster_file_path(dir: &Path) -> PathBuf {
    dir.join(CLUSTER_FILE)
}

/// Reads `<dir>/cluster.toml`; `Ok(None)` if there is none.
fn read_cluster_file(dir: &Path) -> Result<Option<ClusterFile>, String> {
    let path = cluster_file_path(dir);
    match std::fs::read_to_string(&path) {
        Ok(text) => ClusterFile::from_toml(&text)
            .map(Some)
            .map_err(|e| format!("{} is not a cluster file: {e}", path.display())),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(format!("cannot read {}: {e}", path.display())),
    }
}

/// Writes the cluster file atomically (temp file, then rename).
fn write_cluster_file(dir: &Path, file: &ClusterFile) -> Result<(), String> {
    let path = cluster_file_path(dir);
    let tmp = dir.join(format!("{CLUSTER_FILE}.tmp"));
    let text = file.to_toml()?;
    std::fs::write(&tmp, text)
        .and_then(|()| std::fs::rename(&tmp, &path))
        .map_err(|e| format!("cannot write {}: {e}", path.display()))
}

fn running(n: &NodeRecord) -> bool {
    process::is_running(n.pid, &n.data_dir)
}

/// The cluster's secret file: kept if a valid one is there (a restarted
/// cluster keeps its secret), else 32 random bytes, hex, mode 600.
fn ensure_secret(path: &Path) -> Result<(), String> {
    use std::io::{Read, Write};
    use std::os::unix::fs::OpenOptionsExt;
    if path.exists() {
        return elsa_cluster::peer_auth::Secret::from_file(path).map(|_| ());
    }
    let mut raw = [0u8; 32];
    File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut raw))
        .map_err(|e| format!("cannot read random bytes: {e}"))?;
    let hex: String = raw.iter().map(|b| format!("{b:02x}")).collect();
    std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
        .and_then(|mut f| f.write_all(hex.as_bytes()))
        .map_err(|e| format!("cannot write {}: {e}", path.display()))
}

fn up(a: UpArgs) -> Result<i32, String> {
    let nodes = layout(a.regions, a.nodes_per_region, a.base_port)?;
    let opts = ServerOptions {
        rtt: a.rtt,
        loss_percent: a.loss,
        workers: a.workers,
        replication_factor: a.replication_factor,
        replication: a.replication,
        ownership: a.ownership,
        merge_epoch_ms: a.merge_epoch_ms,
        appendfsync: a.appendfsync,
    };
    let given_dir = a.dir.dir;
    std::fs::create_dir_all(&given_dir)
        .map_err(|e| format!("cannot create {}: {e}", given_dir.display()))?;
    let dir = std::fs::canonicalize(&given_dir)
        .map_err(|e| format!("cannot resolve {}: {e}", given_dir.display()))?;

    if let Some(old) = read_cluster_file(&dir)? {
        let alive: Vec<String> = old
            .node
            .iter()
            .filter(|n| running(n))
            .map(|n| n.pid.to_string())
            .collect();
        if !alive.is_empty() {
            return Err(format!(
                "a cluster is already running in {} (pids {}); stop it with: elsa cluster down --dir {}",
                dir.display(),
                alive.join(" "),
                shell_quote(&given_dir.to_string_lossy())
            ));
        }
    }

    for n in &nodes {
        if let Some(why) = process::port_busy(HOST, n.client_port)
            .or_else(|| process::port_busy(HOST, n.peer_port))
        {
            return Err(format!(
                "node {} ({}) cannot use its ports: {why}; pick another --base-port",
                n.id,
                n.name()
            ));
        }
    }

    // Directories and log files first, so nothing starts if any fails.
    let mut logs = Vec::with_capacity(nodes.len());
    for n in &nodes {
        let data = n.data_dir(&dir);
        if a.fresh {
            match std::fs::remove_dir_all(&data) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(format!("cannot wipe {}: {e}", data.display())),
            }
        }
        std::fs::create_dir_all(&data)
            .map_err(|e| format!("cannot create {}: {e}", data.display()))?;
        let log_path = n.log_file(&dir);
        let log = File::create(&log_path)
            .map_err(|e| format!("cannot create {}: {e}", log_path.display()))?;
        logs.push(log);
    }

    ensure_secret(&dir.join(SECRET_FILE))?;

    let exe =
        std::env::current_exe().map_err(|e| format!("cannot find the elsa executable: {e}"))?;
    let mut started: Vec<(NodeSpec, Child)> = Vec::with_capacity(nodes.len());
    for (n, log) in nodes.iter().zip(logs) {
        let spawned = log.try_clone().and_then(|err| {
            Command::new(&exe)
                .arg("server")
                .args(server_args(n, &nodes, &dir, &opts))
                .stdin(Stdio::null())
                // Plain text in the log files, no terminal colours.
                .env("NO_COLOR", "1")
                .stdout(log)
                .stderr(err)
                .process_group(0)
                .spawn()
        });
        match spawned {
            Ok(child) => started.push((n.clone(), child)),
            Err(e) => {
                stop_children(&mut started);
                return Err(format!("cannot start node {} ({}): {e}", n.id, n.name()));
            }
        }
    }

    let file = ClusterFile {
        version: ClusterFile::VERSION,
        dir: dir.clone(),
        rtt_ms: a.rtt.as_millis() as u64,
        loss_percent: a.loss,
        node: started
            .iter()
            .map(|(n, child)| NodeRecord {
                id: n.id,
                region: n.region.clone(),
                host: HOST.into(),
                client_port: n.client_port,
                peer_port: n.peer_port,
                pid: child.id(),
                data_dir: n.data_dir(&dir),
                log: n.log_file(&dir),
            })
            .collect(),
    };
    // Written before waiting, so `down` can stop the nodes even if this
    // process is interrupted while they start.
    if let Err(e) = write_cluster_file(&dir, &file) {
        stop_children(&mut started);
        return Err(e);
    }

    let ready = wait_ready(
        &mut started,
        &dir,
        Duration::from_secs(a.ready_timeout_secs),
    )
    .and_then(|_| {
        wait_formed(
            &mut started,
            &dir,
            Duration::from_secs(a.ready_timeout_secs),
        )
    });
    if let Err(e) = ready {
        stop_children(&mut started);
        let _ = std::fs::remove_file(cluster_file_path(&dir));
        return Err(e);
    }

    println!(
        "started {} nodes in {} region(s) (rtt {} ms, one-way delay {} ms, loss {}%), data and logs in {}",
        nodes.len(),
        a.regions,
        a.rtt.as_millis(),
        wan_delay_ms(a.rtt),
        a.loss,
        dir.display()
    );
    // Nodes are region-major, so each region's nodes are consecutive.
    for region in nodes.chunk_by(|x, y| x.region == y.region) {
        let addrs: Vec<String> = region
            .iter()
            .map(|n| format!("{HOST}:{}", n.client_port))
            .collect();
        println!("region {}: {}", region[0].region, addrs.join(" "));
    }
    println!(
        "stop with: elsa cluster down --dir {}",
        shell_quote(&given_dir.to_string_lossy())
    );
    Ok(0)
}

/// Waits until the cluster has formed: every node counts every node as a
/// member and serves (`catching_up:0` in `INFO replication`), so a client
/// that starts right after `up` returns never meets a region still
/// deciding who is primary.
fn wait_formed(
    started: &mut [(NodeSpec, Child)],
    dir: &Path,
    timeout: Duration,
) -> Result<(), String> {
    let deadline = Instant::now() + timeout;
    let total = started.len();
    loop {
        let mut behind = None;
        for (n, child) in started.iter_mut() {
            if let Ok(Some(st)) = child.try_wait() {
                return Err(format!(
                    "node {} ({}) exited while the cluster formed ({st}); last lines of its log:\n{}",
                    n.id,
                    n.name(),
                    process::tail(&n.log_file(dir), 30)
                ));
            }
            let info =
                process::info(HOST, n.client_port, "replication", PING_TIMEOUT).unwrap_or_default();
            let formed = info
                .lines()
                .any(|l| l.trim_end() == format!("members:{total}"))
                && info.lines().any(|l| l.trim_end() == "catching_up:0");
            if !formed {
                behind = Some(n.clone());
                break;
            }
        }
        let Some(n) = behind else {
            return Ok(());
        };
        if Instant::now() >= deadline {
            return Err(format!(
                "node {} ({}) had not joined a formed cluster after {} s; last lines of its log:\n{}",
                n.id,
                n.name(),
                timeout.as_secs(),
                process::tail(&n.log_file(dir), 30)
            ));
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Waits until every started node answers PING, or one exits, or `timeout`
/// passes; on failure the error carries the failing node's log tail.
fn wait_ready(
    started: &mut [(NodeSpec, Child)],
    dir: &Path,
    timeout: Duration,
) -> Result<(), String> {
    let deadline = Instant::now() + timeout;
    let mut pending: Vec<usize> = (0..started.len()).collect();
    let failure = |n: &NodeSpec, what: String| {
        let log = n.log_file(dir);
        format!(
            "node {} ({}, 127.0.0.1:{}) {what}; last lines of {}:\n{}",
            n.id,
            n.name(),
            n.client_port,
            log.display(),
            process::tail(&log, 30)
        )
    };
    while !pending.is_empty() {
        let mut still = Vec::with_capacity(pending.len());
        for &i in &pending {
            let (n, child) = &mut started[i];
            if let Ok(Some(st)) = child.try_wait() {
                return Err(failure(n, format!("exited during startup ({st})")));
            }
            if !process::pongs(HOST, n.client_port, PING_TIMEOUT) {
                still.push(i);
            }
        }
        pending = still;
        if pending.is_empty() {
            break;
        }
        if Instant::now() >= deadline {
            let (n, _) = &started[pending[0]];
            return Err(failure(
                n,
                format!("did not answer PING within {} s", timeout.as_secs()),
            ));
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    Ok(())
}

/// Stops the children this process started: SIGTERM, then SIGKILL after the
/// grace period; reaps them.
fn stop_children(started: &mut [(NodeSpec, Child)]) {
    for (_, child) in started.iter() {
        process::terminate(child.id());
    }
    let deadline = Instant::now() + STOP_GRACE;
    for (_, child) in started.iter_mut() {
        loop {
            match child.try_wait() {
                Ok(Some(_)) | Err(_) => break,
                Ok(None) if Instant::now() >= deadline => {
                    let _ = child.kill();
                    let _ = child.wait();
                    break;
                }
                Ok(None) => std::thread::sleep(Duration::from_millis(50)),
            }
        }
    }
}

fn down(a: DownArgs) -> Result<i32, String> {
    let dir = a.dir.dir;
    let Some(file) = read_cluster_file(&dir)? else {
        return Err(format!(
            "no cluster in {} (no {CLUSTER_FILE} there)",
            dir.display()
        ));
    };
    let mut live: Vec<&NodeRecord> = file.node.iter().filter(|n| running(n)).collect();
    let was_running = live.len();
    for n in &live {
        process::terminate(n.pid);
    }
    let deadline = Instant::now() + STOP_GRACE;
    while !live.is_empty() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(100));
        live.retain(|n| running(n));
    }
    let mut killed = Vec::new();
    if !live.is_empty() {
        for n in &live {
            process::kill(n.pid);
            killed.push(n.id.to_string());
        }
        let deadline = Instant::now() + Duration::from_secs(5);
        while !live.is_empty() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(50));
            live.retain(|n| running(n));
        }
    }
    if !live.is_empty() {
        let pids: Vec<String> = live.iter().map(|n| n.pid.to_string()).collect();
        return Err(format!(
            "could not stop pids {}; {} kept",
            pids.join(" "),
            cluster_file_path(&dir).display()
        ));
    }
    std::fs::remove_file(cluster_file_path(&dir))
        .map_err(|e| format!("cannot remove {}: {e}", cluster_file_path(&dir).display()))?;
    if !killed.is_empty() {
        println!(
            "nodes {} did not stop within {} s and were killed",
            killed.join(" "),
            STOP_GRACE.as_secs()
        );
    }
    let stopped = if was_running == file.node.len() {
        format!("stopped {was_running} nodes")
    } else {
        format!(
            "stopped {was_running} nodes ({} were not running)",
            file.node.len() - was_running
        )
    };
    if a.purge {
        let root = std::fs::canonicalize(&dir).unwrap_or_else(|_| dir.clone());
        for n in &file.node {
            // Only ever a node's own `<region>-<n>` directory right inside
            // this cluster dir, whatever the file says.
            let Some(node_dir) = n.data_dir.parent() else {
                continue;
            };
            let ours = node_dir.parent() == Some(root.as_path())
                && node_dir
                    .file_name()
                    .and_then(|f| f.to_str())
                    .is_some_and(plan::is_node_dir_name);
            if !ours {
                eprintln!(
                    "not removing {}: not a node directory of {}",
                    node_dir.display(),
                    root.display()
                );
                continue;
            }
            match std::fs::remove_dir_all(node_dir) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(format!("cannot remove {}: {e}", node_dir.display())),
            }
        }
        match std::fs::remove_file(dir.join(SECRET_FILE)) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(format!("cannot remove {SECRET_FILE}: {e}")),
        }
        let _ = std::fs::remove_dir(&dir); // only if now empty
        println!("{stopped}; data removed");
    } else {
        println!("{stopped}; data kept in {}", dir.display());
    }
    Ok(0)
}

/// Prints one line per node; exits 0 only if every node is alive and
/// answers PONG.
fn status(a: DirArg) -> Result<i32, String> {
    let Some(file) = read_cluster_file(&a.dir)? else {
        return Err(format!(
            "no cluster in {} (no {CLUSTER_FILE} there)",
            a.dir.display()
        ));
    };
    println!(
        "{:<5} {:<7} {:<21} {:<6} {:<8} {:<8} ping",
        "node", "region", "client", "peer", "pid", "process"
    );
    let mut healthy = 0;
    for n in &file.node {
        let alive = running(n);
        let ping = match process::ping(&n.host, n.client_port, PING_TIMEOUT) {
            Ok(reply) => reply,
            Err(e) => format!("error: {e}"),
        };
        if alive && ping == "+PONG" {
            healthy += 1;
        }
        println!(
            "{:<5} {:<7} {:<21} {:<6} {:<8} {:<8} {}",
            n.id,
            n.region,
            format!("{}:{}", n.host, n.client_port),
            n.peer_port,
            n.pid,
            if alive { "alive" } else { "dead" },
            ping.trim_start_matches('+')
        );
    }
    println!(
        "{healthy}/{} nodes up (rtt {} ms, loss {}%)",
        file.node.len(),
        file.rtt_ms,
        file.loss_percent
    );
    Ok(if healthy == file.node.len() { 0 } else { 1 })
}

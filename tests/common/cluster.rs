//! Clusters of real `elsa server` processes on loopback: each node on its
//! own client port and peer port (TCP replication + UDP membership, same
//! number), seeded with every other node's peer address, in a directory
//! the test owns. A node can be `kill -9`ed and restarted on the same ports
//! and data; dropping the cluster kills every process it started by PID.

use std::collections::HashSet;
use std::net::{TcpListener, UdpSocket};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use redis::Value;

use super::{Node, TestDir};

/// Ports this process handed out already (tests run on parallel threads).
static TAKEN: Mutex<Option<HashSet<u16>>> = Mutex::new(None);

/// A loopback port free for both TCP and UDP right now, below the Linux
/// ephemeral range (so outgoing connections do not take it meanwhile), and
/// never handed out before by this process.
pub fn free_tcp_udp_port() -> u16 {
    use rand::Rng;
    let mut rng = rand::thread_rng();
    let mut taken = TAKEN.lock().unwrap_or_else(|e| e.into_inner());
    let taken = taken.get_or_insert_with(HashSet::new);
    for _ in 0..1000 {
        let port: u16 = rng.gen_range(20_000..32_000);
        if taken.contains(&port) {
            continue;
        }
        if TcpListener::bind(("127.0.0.1", port)).is_ok()
            && UdpSocket::bind(("127.0.0.1", port)).is_ok()
        {
            taken.insert(port);
            return port;
        }
    }
    panic!("no free TCP+UDP port found");
}

/// `n` consecutive loopback TCP ports, free now, below the ephemeral
/// range and never handed out before by this process: a worker port base
/// (`--worker-port-base`) and the ports after it. (Taken from the ephemeral
/// range, the port after a free one could be any test's next ephemeral
/// port, or its server's.) Returns the first.
pub fn free_port_run(n: u16) -> u16 {
    use rand::Rng;
    let mut rng = rand::thread_rng();
    let mut taken = TAKEN.lock().unwrap_or_else(|e| e.into_inner());
    let taken = taken.get_or_insert_with(HashSet::new);
    for _ in 0..1000 {
        let first: u16 = rng.gen_range(20_000..32_000 - n);
        let run = first..first + n;
        if run.clone().any(|p| taken.contains(&p)) {
            continue;
        }
        if run
            .clone()
            .all(|p| TcpListener::bind(("127.0.0.1", p)).is_ok())
        {
            taken.extend(run);
            return first;
        }
    }
    panic!("no run of {n} free TCP ports found");
}

/// How one node runs.
pub struct Spec {
    pub id: u32,
    pub region: String,
    pub port: u16,
    pub peer: u16,
    /// Its full `elsa server` argument list after `--port` and `--data-dir`.
    pub args: Vec<String>,
    pub dir: TestDir,
}

/// A running (or killed) cluster. Its `Drop` kills every node by PID
/// before the fields (and with them the nodes' directories) go.
pub struct Cluster {
    nodes: Vec<Option<Node>>,
    pub specs: Vec<Spec>,
    /// The cluster secret every node was started with.
    pub secret: String,
}

/// A fresh random cluster secret (64 hex digits).
pub fn new_secret() -> String {
    use rand::Rng;
    let mut rng = rand::thread_rng();
    (0..32)
        .map(|_| format!("{:02x}", rng.gen::<u8>()))
        .collect()
}

/// Writes `secret` into `dir` (mode 600), for `--cluster-secret-file`.
pub fn write_secret(dir: &TestDir, secret: &str) -> std::path::PathBuf {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let path = dir.root.join("cluster.secret");
    std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&path)
        .and_then(|mut f| f.write_all(secret.as_bytes()))
        .expect("write the cluster secret");
    path
}

impl Cluster {
    /// Starts one node per entry of `regions` (its region name), node ids
    /// 1.., every node seeded with all the others' peer addresses, with
    /// `--bind 127.0.0.1 --workers 2 --merge-epoch-ms 50 --anti-entropy-ms
    /// 300 --fault-injection true` and then `extra`. Waits until every node
    /// answers PING and lists all of them as members.
    pub fn start(regions: &[&str], extra: &[&str]) -> Cluster {
        Cluster::start_each(regions, extra, |_| Vec::new())
    }

    /// As [`Cluster::start`], with `each(i)`'s flags added to node `i`'s
    /// (flags that differ per node, such as `--metrics-port`).
    ///
    /// Ports are picked free and may be taken by another process before a
    /// node binds them (tests run in parallel): a node that could not
    /// listen makes the whole cluster start again on new ports, up to five
    /// times.
    pub fn start_each(
        regions: &[&str],
        extra: &[&str],
        each: impl Fn(usize) -> Vec<String>,
    ) -> Cluster {
        let mut attempt = 0;
        loop {
            match Cluster::try_start_each(regions, extra, &each) {
                Ok(c) => return c,
                Err(e) if e.contains("Address already in use") && attempt < 5 => attempt += 1,
                Err(e) => panic!("{e}"),
            }
        }
    }

    fn try_start_each(
        regions: &[&str],
        extra: &[&str],
        each: &impl Fn(usize) -> Vec<String>,
    ) -> Result<Cluster, String> {
        let ports: Vec<(u16, u16)> = regions
            .iter()
            .map(|_| (free_tcp_udp_port(), free_tcp_udp_port()))
            .collect();
        let secret = new_secret();
        let specs: Vec<Spec> = regions
            .iter()
            .enumerate()
            .map(|(i, region)| {
                let seeds: Vec<String> = ports
                    .iter()
                    .enumerate()
                    .filter(|(j, _)| *j != i)
                    .map(|(_, (_, peer))| format!("127.0.0.1:{peer}"))
                    .collect();
                let id = (i + 1) as u32;
                let mut args: Vec<String> = [
                    "--bind",
                    "127.0.0.1",
                    "--node-id",
                    &id.to_string(),
                    "--region",
                    region,
                    "--peer-port",
                    &ports[i].1.to_string(),
                    "--workers",
                    "2",
                    "--merge-epoch-ms",
                    "50",
                    "--anti-entropy-ms",
                    "300",
                    "--fault-injection",
                    "true",
                ]
                .iter()
                .map(|s| s.to_string())
                .collect();
                if !seeds.is_empty() {
                    args.push("--seeds".into());
                    args.push(seeds.join(","));
                }
                let dir = TestDir::new(&format!("cluster-n{id}"));
                // Peer links over TLS, as `elsa cluster up` runs them
                // (ELSA_TEST_PLAINTEXT_PEERS=1: plaintext loopback links, to
                // measure what TLS costs).
                if std::env::var_os("ELSA_TEST_PLAINTEXT_PEERS").is_none() {
                    let secret_file = write_secret(&dir, &secret);
                    args.push("--cluster-secret-file".into());
                    args.push(secret_file.display().to_string());
                }
                args.extend(extra.iter().map(|s| s.to_string()));
                args.extend(each(i));
                Spec {
                    id,
                    region: region.to_string(),
                    port: ports[i].0,
                    peer: ports[i].1,
                    args,
                    dir,
                }
            })
            .collect();
        let mut cluster = Cluster {
            nodes: specs.iter().map(|_| None).collect(),
            specs,
            secret,
        };
        for i in 0..cluster.specs.len() {
            cluster.spawn(i);
        }
        for i in 0..cluster.specs.len() {
            // On an error the cluster drops: every node it started is
            // killed.
            cluster.nodes[i]
                .as_mut()
                .expect("spawned")
                .try_wait_ready(Duration::from_secs(60))?;
        }
        let all: Vec<usize> = (0..cluster.len()).collect();
        cluster.wait_members(&all, cluster.len(), Duration::from_secs(60));
        cluster.wait_caught_up(&all, Duration::from_secs(60));
        Ok(cluster)
    }

    pub fn len(&self) -> usize {
        self.specs.len()
    }

    /// Nodes (indices) of `region`.
    pub fn in_region(&self, region: &str) -> Vec<usize> {
        (0..self.len())
            .filter(|&i| self.specs[i].region == region)
            .collect()
    }

    fn spawn(&mut self, i: usize) {
        use std::io::Write;
        let s = &self.specs[i];
        let log = s.dir.log();
        let mut out = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log)
            .expect("open server log");
        let _ = writeln!(
            out,
            "=== elsa server --port {} {}",
            s.port,
            s.args.join(" ")
        );
        let err = out.try_clone().expect("clone log handle");
        let args: Vec<&str> = s.args.iter().map(String::as_str).collect();
        let mut cmd = Node::command(&s.dir.data(), s.port, &args);
        // Should the test process itself be killed (no Drop runs), the
        // kernel kills the node: nothing outlives the test.
        // SAFETY: prctl is async-signal-safe and touches no memory.
        unsafe {
            use std::os::unix::process::CommandExt;
            cmd.pre_exec(|| {
                libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
                Ok(())
            });
        }
        let child = cmd
            // ELSA_TEST_NODE_LOG (say `info,elsa_txn=debug`) for a post-mortem.
            .env(
                "ELSA_LOG",
                std::env::var("ELSA_TEST_NODE_LOG").unwrap_or_else(|_| "info".into()),
            )
            .stdout(out)
            .stderr(err)
            .spawn()
            .expect("spawn elsa server");
        self.nodes[i] = Some(Node {
            port: s.port,
            child,
            data_dir: s.dir.data(),
            log,
        });
    }

    /// The running node `i` (panics if it was killed and not restarted).
    pub fn node(&self, i: usize) -> &Node {
        self.nodes[i]
            .as_ref()
            .unwrap_or_else(|| panic!("node {i} is not running"))
    }

    pub fn port(&self, i: usize) -> u16 {
        self.specs[i].port
    }

    /// A connection to node `i` with 10 s read/write timeouts.
    pub fn conn(&self, i: usize) -> redis::Connection {
        let c = self.node(i).conn();
        c.set_read_timeout(Some(Duration::from_secs(10)))
            .expect("read timeout");
        c.set_write_timeout(Some(Duration::from_secs(10)))
            .expect("write timeout");
        c
    }

    /// `kill -9` node `i`.
    pub fn kill9(&mut self, i: usize) {
        if let Some(mut n) = self.nodes[i].take() {
            n.kill9();
        }
    }

    /// SIGTERM to node `i`; waits (60 s) for it to exit (a clean shutdown).
    pub fn terminate(&mut self, i: usize) {
        if let Some(mut n) = self.nodes[i].take() {
            n.terminate(Duration::from_secs(60));
        }
    }

    /// Starts node `i` again on the same ports and data; waits for PING.
    pub fn restart(&mut self, i: usize) {
        assert!(self.nodes[i].is_none(), "node {i} is still running");
        self.spawn(i);
        self.nodes[i]
            .as_mut()
            .expect("spawned")
            .wait_ready(Duration::from_secs(60));
    }

    /// `SIGSTOP` node `i`: it runs nothing (no answers, no heartbeats)
    /// while the kernel still accepts connections on its ports, as with a
    /// stalled VM or a long pause. Undo with [`Cluster::resume`].
    pub fn pause(&self, i: usize) {
        self.signal(i, libc::SIGSTOP);
    }

    /// `SIGCONT` node `i` after [`Cluster::pause`].
    pub fn resume(&self, i: usize) {
        self.signal(i, libc::SIGCONT);
    }

    fn signal(&self, i: usize, sig: libc::c_int) {
        let pid = self.node(i).child.id() as libc::pid_t;
        // SAFETY: kill(2) on the PID of a child this cluster owns and has
        // not reaped (so the PID cannot belong to another process).
        let rc = unsafe { libc::kill(pid, sig) };
        assert_eq!(
            rc,
            0,
            "kill({pid}, {sig}) on node {i}: {}",
            std::io::Error::last_os_error()
        );
    }

    /// Raw `INFO replication` text of node `i`.
    pub fn info_replication(&self, i: usize) -> String {
        self.info(i, "replication")
    }

    /// `INFO section` on node `i`.
    pub fn info(&self, i: usize, section: &str) -> String {
        self.query_retrying(i, redis::cmd("INFO").arg(section))
    }

    /// Runs `cmd` on node `i`. A node may be restarting in place (it does
    /// after a batch of its writes went unconfirmed, e.g. on waking from a
    /// pause): connection errors are retried for 30 s.
    pub fn query_retrying<T: redis::FromRedisValue>(&self, i: usize, cmd: &redis::Cmd) -> T {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let got = redis::Client::open(self.node(i).url())
                .and_then(|c| c.get_connection_with_timeout(Duration::from_secs(10)))
                .and_then(|mut c| {
                    c.set_read_timeout(Some(Duration::from_secs(10)))?;
                    cmd.query::<T>(&mut c)
                });
            match got {
                Ok(v) => return v,
                Err(e)
                    if Instant::now() < deadline
                        && (e.is_io_error() || e.is_connection_dropped()) =>
                {
                    std::thread::sleep(Duration::from_millis(100));
                }
                Err(e) => panic!("{:?} on node {i}: {e}", cmd.args_iter().next()),
            }
        }
    }

    /// One `field:` value of `INFO replication` on node `i`.
    pub fn replication_field(&self, i: usize, field: &str) -> Option<String> {
        let text = self.info_replication(i);
        text.lines()
            .find_map(|l| l.strip_prefix(&format!("{field}:")))
            .map(|v| v.trim().to_string())
    }

    /// Waits until each node in `nodes` applied an ownership record with
    /// exactly `n` nodes inside the ring (`ownership_nodes_in`). Right
    /// after the group forms its leader puts the nodes in one at a time:
    /// until they all are, the first owns every slot and the agreed ring
    /// names no other replica.
    pub fn wait_nodes_in(&self, nodes: &[usize], n: usize, timeout: Duration) -> Duration {
        let started = Instant::now();
        let want = n.to_string();
        loop {
            let seen: Vec<Option<String>> = nodes
                .iter()
                .map(|&i| self.replication_field(i, "ownership_nodes_in"))
                .collect();
            if seen.iter().all(|m| m.as_deref() == Some(want.as_str())) {
                return started.elapsed();
            }
            assert!(
                started.elapsed() <= timeout,
                "nodes {nodes:?} did not all have {n} nodes in the ring within {timeout:?}: {seen:?}"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Waits until each node in `nodes` lists exactly `n` members.
    pub fn wait_members(&self, nodes: &[usize], n: usize, timeout: Duration) -> Duration {
        let started = Instant::now();
        let want = n.to_string();
        loop {
            let seen: Vec<Option<String>> = nodes
                .iter()
                .map(|&i| self.replication_field(i, "members"))
                .collect();
            if seen.iter().all(|m| m.as_deref() == Some(want.as_str())) {
                return started.elapsed();
            }
            if started.elapsed() > timeout {
                panic!(
                    "nodes {nodes:?} did not all see {n} members within {timeout:?}: members = {seen:?}\n\
                     INFO replication of node {}:\n{}\nlog tail:\n{}",
                    nodes[0],
                    self.info_replication(nodes[0]),
                    self.log_tail(nodes[0], 30)
                );
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Waits until each node in `nodes` has caught up since it started and
    /// sees every peer caught up too (so primaries are where they stay).
    pub fn wait_caught_up(&self, nodes: &[usize], timeout: Duration) -> Duration {
        let started = Instant::now();
        loop {
            let behind: Vec<usize> = nodes
                .iter()
                .copied()
                .filter(|&i| {
                    let info = self.info_replication(i);
                    !info.contains("catching_up:0") || info.contains(",ready=0,")
                })
                .collect();
            if behind.is_empty() {
                return started.elapsed();
            }
            if started.elapsed() > timeout {
                // A catch-up needs a clean anti-entropy round: what keeps
                // one from coming is what the region's nodes do not share.
                let region: Vec<usize> = (0..self.specs.len())
                    .filter(|&i| self.specs[i].region == self.specs[behind[0]].region)
                    .collect();
                panic!(
                    "nodes {behind:?} still catching up (or see a peer catching up) after {timeout:?}\n\
                     INFO replication of node {}:\n{}\n{}\nlog tail:\n{}",
                    behind[0],
                    self.info_replication(behind[0]),
                    self.records_not_everywhere(&region),
                    self.log_tail(behind[0], 30)
                );
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// `ELSA.DIGEST` of node `i`: (hex fingerprint, record count).
    pub fn digest(&self, i: usize) -> (String, i64) {
        self.query_retrying(i, &redis::cmd("ELSA.DIGEST"))
    }

    /// The records that are not on every node of `nodes` (by
    /// `ELSA.DIGEST RECORDS`: key, version, kind, content), one line each with the
    /// nodes that hold it: what a digest that will not converge is made of.
    pub fn records_not_everywhere(&self, nodes: &[usize]) -> String {
        let mut holders: std::collections::BTreeMap<String, Vec<String>> = Default::default();
        for &i in nodes {
            let name = format!("node {} ({})", self.specs[i].id, self.specs[i].region);
            let got = redis::Client::open(self.node(i).url())
                .and_then(|c| c.get_connection_with_timeout(Duration::from_secs(10)))
                .and_then(|mut c| redis::cmd("ELSA.DIGEST").arg("RECORDS").query(&mut c));
            let records: Vec<String> = got.unwrap_or_else(|e| vec![format!("(no listing: {e})")]);
            for r in records {
                holders.entry(r).or_default().push(name.clone());
            }
        }
        let lines: Vec<String> = holders
            .into_iter()
            .filter(|(_, on)| on.len() < nodes.len())
            .map(|(r, on)| format!("        {r}   on {}", on.join(", ")))
            .collect();
        format!("records not on every node:\n{}", lines.join("\n"))
    }

    /// Polls until every node in `nodes` has the same `ELSA.DIGEST` (twice
    /// in a row, 200 ms apart); returns how long that took. Panics with the
    /// last digests after `timeout`.
    pub fn wait_same_digest(&self, nodes: &[usize], timeout: Duration) -> Duration {
        let started = Instant::now();
        let mut previous: Option<Vec<(String, i64)>> = None;
        loop {
            let now: Vec<(String, i64)> = nodes.iter().map(|&i| self.digest(i)).collect();
            let same = now.windows(2).all(|w| w[0] == w[1]);
            if same && previous.as_ref() == Some(&now) {
                return started.elapsed();
            }
            previous = same.then_some(now.clone());
            if started.elapsed() > timeout {
                let lines: Vec<String> = nodes
                    .iter()
                    .zip(&now)
                    .map(|(&i, d)| {
                        format!(
                            "  node {} ({}): {} records {}",
                            self.specs[i].id, self.specs[i].region, d.0, d.1
                        )
                    })
                    .collect();
                panic!(
                    "digests did not converge within {timeout:?}; last digests:\n{}\n{}\n\
                     INFO replication of node {}:\n{}",
                    lines.join("\n"),
                    self.records_not_everywhere(nodes),
                    self.specs[nodes[0]].id,
                    self.info_replication(nodes[0])
                );
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// `ELSA.FAULT <what>` on node `i` (`what` split at spaces).
    pub fn fault(&self, i: usize, what: &str) {
        let v: Value = redis::cmd("ELSA.FAULT")
            .arg(what.split_whitespace().collect::<Vec<_>>())
            .query(&mut self.conn(i))
            .unwrap_or_else(|e| panic!("ELSA.FAULT {what} on node {i}: {e}"));
        assert!(
            matches!(&v, Value::Okay) || matches!(&v, Value::SimpleString(s) if s == "OK"),
            "ELSA.FAULT {what} answered {v:?}"
        );
    }

    /// How many membership views node `i` installed so far (its log's
    /// `membership:` lines, all its runs): a measure of ring churn.
    pub fn membership_changes(&self, i: usize) -> usize {
        std::fs::read_to_string(self.specs[i].dir.log())
            .unwrap_or_default()
            .lines()
            .filter(|l| l.contains("membership:"))
            .count()
    }

    /// Each node's tombstone horizon and anti-entropy rounds with its peers
    /// (from `INFO replication`): why a deletion is not collected yet.
    pub fn collection_state(&self, nodes: &[usize]) -> String {
        let mut out = String::new();
        for &i in nodes {
            let info = self.info_replication(i);
            out.push_str(&format!("node {}:", self.specs[i].id));
            for l in info.lines() {
                if l.starts_with("tombstone_horizon_age_ms:")
                    || l.starts_with("catching_up:")
                    || l.starts_with("peer")
                {
                    out.push_str("\n\t");
                    out.push_str(l);
                }
            }
            out.push('\n');
        }
        out
    }

    /// The last `n` lines of node `i`'s log (all its runs).
    pub fn log_tail(&self, i: usize, n: usize) -> String {
        let text = std::fs::read_to_string(self.specs[i].dir.log()).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(n)..].join("\n")
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        for n in self.nodes.iter_mut() {
            if let Some(mut n) = n.take() {
                n.kill9();
            }
        }
    }
}

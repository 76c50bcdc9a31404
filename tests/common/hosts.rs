//! Hosts for multi-host clusters on one machine: each host is a network
//! namespace the test creates (`elsa-<pid>-<tag>-hN`), wired by a veth pair
//! into a Linux bridge in a "switch" namespace of its own, with an address
//! on a private subnet and a host name every host resolves
//! (`/etc/netns/<ns>/hosts`, which `ip netns exec` bind-mounts over
//! `/etc/hosts`). Nodes are real `elsa server` processes started with `ip
//! netns exec`, each on its host's own address; partitions are nftables
//! rules inside the namespaces.
//!
//! Nothing is added to the root namespace: the veth pairs are made inside
//! the switch namespace and one end is moved into the host's. Clients
//! reach the nodes from inside a host's namespace too: a connection is
//! opened on a short-lived thread that has `setns`ed into it (a socket
//! stays in the namespace it was created in, so the connection is then
//! used from any thread) — no route from the machine's own network to
//! the test's, and no way for a test to disturb the host's interfaces.
//!
//! Every namespace gets its own subnet-local addresses (10.213.0.N/24):
//! the subnets of different tests never meet (each has its own bridge in
//! its own namespace), so they may all use the same one.
//!
//! Dropping [`Hosts`] kills every node by PID and deletes the namespaces
//! (which removes the veths and the bridge), even when the test panicked;
//! leftovers of a crashed earlier run (a prefix whose PID is gone) are
//! removed when the next [`Hosts`] is made.

use std::fs::File;
use std::io::Write;
use std::net::Ipv4Addr;
use std::os::fd::AsRawFd;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use super::cluster::{new_secret, write_secret};
use super::{elsa_bin, TestDir};

/// The client port every node listens on (each host has its own address).
pub const CLIENT_PORT: u16 = 6379;
/// The peer port (TCP replication + UDP membership) of every node.
pub const PEER_PORT: u16 = 7379;

/// The password every node requires: off loopback, protected mode
/// refuses clients of a node without one (as Redis does).
pub const PASSWORD: &str = "elsa-multihost";

/// The prefix of every namespace this harness makes.
const PREFIX: &str = "elsa-";

/// One host: a namespace with an address, maybe running a node.
pub struct Host {
    /// Its host name (what seeds name), e.g. `h1`.
    pub name: String,
    /// Its network namespace.
    pub ns: String,
    pub addr: Ipv4Addr,
    node: Option<Child>,
    pub node_id: u32,
    pub region: String,
    dir: TestDir,
    /// What it was last started with (seeds, extra flags), to restart it.
    launched: Option<(Vec<usize>, Vec<String>)>,
}

/// A set of hosts on one bridge. Drop tears everything down.
pub struct Hosts {
    switch: String,
    pub hosts: Vec<Host>,
    secret_dir: TestDir,
    secret_file: PathBuf,
}

/// Runs a command, panicking with its output if it fails.
fn run(cmd: &mut Command) {
    let out = cmd.output().unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
    assert!(
        out.status.success(),
        "{cmd:?} failed: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

fn ip(args: &[&str]) {
    run(Command::new("ip").args(args));
}

/// `ip netns exec <ns> nft -f -` with `rules` on stdin.
fn nft(ns: &str, rules: &str) {
    let mut child = Command::new("ip")
        .args(["netns", "exec", ns, "nft", "-f", "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run nft (is nftables installed? scripts/test.sh installs it)");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(rules.as_bytes())
        .expect("write nft rules");
    let out = child.wait_with_output().expect("nft");
    assert!(
        out.status.success(),
        "nft in {ns} failed: {}\nrules:\n{rules}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Whether this machine lets the test make namespaces (root, iproute2,
/// nftables). Without it the multi-host tests cannot run at all: they
/// fail saying so rather than pass without testing anything.
pub fn require_netns() {
    let ok = Command::new("ip")
        .args(["netns", "list"])
        .output()
        .is_ok_and(|o| o.status.success());
    assert!(
        ok,
        "`ip netns` does not work here: the multi-host tests need root and iproute2"
    );
    let nft = Command::new("nft")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    assert!(
        nft,
        "`nft` is missing: apt-get install nftables (scripts/test.sh does)"
    );
}

/// Removes namespaces (and their hosts files) left by runs whose process
/// is gone: killed before their Drop ran.
fn clean_leftovers() {
    let Ok(out) = Command::new("ip").args(["netns", "list"]).output() else {
        return;
    };
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        let Some(ns) = line.split_whitespace().next() else {
            continue;
        };
        let Some(pid) = ns
            .strip_prefix(PREFIX)
            .and_then(|rest| rest.split('-').next())
            .and_then(|p| p.parse::<u32>().ok())
        else {
            continue;
        };
        if std::path::Path::new(&format!("/proc/{pid}")).exists() {
            continue; // a live run (maybe this one)
        }
        remove_ns(ns);
    }
}

/// Kills what runs in `ns`, deletes it and its hosts file.
fn remove_ns(ns: &str) {
    if let Ok(out) = Command::new("ip").args(["netns", "pids", ns]).output() {
        for pid in String::from_utf8_lossy(&out.stdout).split_whitespace() {
            if let Ok(pid) = pid.parse::<libc::pid_t>() {
                // SAFETY: kill(2) on a PID inside a namespace this harness
                // made (the namespace name carries its run's prefix).
                unsafe { libc::kill(pid, libc::SIGKILL) };
            }
        }
    }
    let _ = Command::new("ip").args(["netns", "del", ns]).output();
    let _ = std::fs::remove_dir_all(format!("/etc/netns/{ns}"));
}

impl Hosts {
    /// Makes the switch and `n` hosts `h1`..`hn` (10.213.0.1..n), every one
    /// knowing every other by name. No node runs yet.
    pub fn new(tag: &str, n: usize) -> Hosts {
        require_netns();
        clean_leftovers();
        let base = format!("{PREFIX}{}-{tag}", std::process::id());
        let switch = format!("{base}-sw");
        let secret_dir = TestDir::new(&format!("{tag}-secret"));
        let secret_file = write_secret(&secret_dir, &new_secret());
        let mut hosts = Hosts {
            switch: switch.clone(),
            hosts: Vec::new(),
            secret_dir,
            secret_file,
        };
        ip(&["netns", "add", &switch]);
        ip(&["-n", &switch, "link", "add", "br0", "type", "bridge"]);
        ip(&["-n", &switch, "link", "set", "br0", "up"]);
        for i in 1..=n {
            let name = format!("h{i}");
            let ns = format!("{base}-{name}");
            let addr = Ipv4Addr::new(10, 213, 0, i as u8);
            // The hosts file first: the Drop that follows a failure below
            // removes it with the namespace.
            hosts.hosts.push(Host {
                name: name.clone(),
                ns: ns.clone(),
                addr,
                node: None,
                node_id: 0,
                region: String::new(),
                dir: TestDir::new(&format!("{tag}-{name}")),
                launched: None,
            });
            ip(&["netns", "add", &ns]);
            let port = format!("p{i}");
            // Both ends made in the switch; one moves to the host as eth0.
            ip(&[
                "-n", &switch, "link", "add", &port, "type", "veth", "peer", "name", "eth0",
                "netns", &ns,
            ]);
            ip(&["-n", &switch, "link", "set", &port, "master", "br0", "up"]);
            ip(&[
                "-n",
                &ns,
                "addr",
                "add",
                &format!("{addr}/24"),
                "dev",
                "eth0",
            ]);
            ip(&["-n", &ns, "link", "set", "eth0", "up"]);
            ip(&["-n", &ns, "link", "set", "lo", "up"]);
        }
        let mut names = String::from("127.0.0.1 localhost\n");
        for h in &hosts.hosts {
            names.push_str(&format!("{} {}\n", h.addr, h.name));
        }
        for h in &hosts.hosts {
            let dir = format!("/etc/netns/{}", h.ns);
            std::fs::create_dir_all(&dir).expect("create /etc/netns/<ns>");
            std::fs::write(format!("{dir}/hosts"), &names).expect("write the hosts file");
        }
        hosts
    }

    pub fn len(&self) -> usize {
        self.hosts.len()
    }

    /// Starts node `node_id` of `region` on host `i`, seeded with the
    /// peer addresses of `seeds` (host indices) by host name, with a
    /// shared cluster secret, `--workers 2 --merge-epoch-ms 50
    /// --anti-entropy-ms 300`, then `extra`. Waits until it answers PING.
    pub fn start(&mut self, i: usize, region: &str, node_id: u32, seeds: &[usize], extra: &[&str]) {
        self.hosts[i].launched = Some((
            seeds.to_vec(),
            extra.iter().map(|s| s.to_string()).collect(),
        ));
        let seeds: Vec<String> = seeds
            .iter()
            .map(|&s| format!("{}:{PEER_PORT}", self.hosts[s].name))
            .collect();
        let h = &mut self.hosts[i];
        assert!(h.node.is_none(), "host {} runs a node already", h.name);
        let mut args: Vec<String> = [
            "server",
            "--bind",
            &h.addr.to_string(),
            "--port",
            &CLIENT_PORT.to_string(),
            "--peer-port",
            &PEER_PORT.to_string(),
            "--node-id",
            &node_id.to_string(),
            "--region",
            region,
            "--workers",
            "2",
            "--merge-epoch-ms",
            "50",
            "--anti-entropy-ms",
            "300",
            "--requirepass",
            PASSWORD,
            "--cluster-secret-file",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        args.push(self.secret_file.display().to_string());
        args.push("--data-dir".into());
        args.push(h.dir.data().display().to_string());
        if !seeds.is_empty() {
            args.push("--seeds".into());
            args.push(seeds.join(","));
        }
        args.extend(extra.iter().map(|s| s.to_string()));
        let log = h.dir.log();
        let mut out = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log)
            .expect("open server log");
        let _ = writeln!(out, "=== ip netns exec {} elsa {}", h.ns, args.join(" "));
        let err = out.try_clone().expect("clone log handle");
        let mut cmd = Command::new("ip");
        // `ip netns exec` execs the command itself (no fork): the child's
        // PID is the node's, so killing it by PID kills the node.
        cmd.args(["netns", "exec", &h.ns])
            .arg(elsa_bin())
            .args(&args)
            .env(
                "ELSA_LOG",
                std::env::var("ELSA_TEST_NODE_LOG").unwrap_or_else(|_| "info".into()),
            )
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err);
        // Should the test process be killed (no Drop runs), the kernel
        // kills the node; the namespaces go at the next run's start.
        // SAFETY: prctl is async-signal-safe and touches no memory.
        unsafe {
            use std::os::unix::process::CommandExt;
            cmd.pre_exec(|| {
                libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
                Ok(())
            });
        }
        h.node = Some(cmd.spawn().expect("spawn ip netns exec elsa"));
        h.node_id = node_id;
        h.region = region.to_string();
        self.wait_ready(i, Duration::from_secs(60));
    }

    fn wait_ready(&mut self, i: usize, timeout: Duration) {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(Ok(Some(status))) = self.hosts[i].node.as_mut().map(|c| c.try_wait()) {
                panic!(
                    "node on {} exited during startup ({status}); log:\n{}",
                    self.hosts[i].name,
                    self.log_tail(i, 40)
                );
            }
            if let Ok(mut c) = self.try_conn(i) {
                if redis::cmd("PING").query::<String>(&mut c).is_ok() {
                    return;
                }
            }
            assert!(
                Instant::now() < deadline,
                "node on {} did not answer PING; log:\n{}",
                self.hosts[i].name,
                self.log_tail(i, 40)
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// A connection to host `i`'s node, opened from inside its namespace.
    pub fn try_conn(&self, i: usize) -> redis::RedisResult<redis::Connection> {
        let ns = self.hosts[i].ns.clone();
        let url = url(self.hosts[i].addr);
        in_netns(&ns, move || {
            let c =
                redis::Client::open(url)?.get_connection_with_timeout(Duration::from_secs(10))?;
            c.set_read_timeout(Some(Duration::from_secs(20)))?;
            c.set_write_timeout(Some(Duration::from_secs(20)))?;
            Ok(c)
        })
    }

    /// [`Hosts::try_conn`], panicking on failure.
    pub fn conn(&self, i: usize) -> redis::Connection {
        self.try_conn(i)
            .unwrap_or_else(|e| panic!("connect to {}: {e}", self.hosts[i].name))
    }

    /// Runs `cmd` on host `i`'s node (a fresh connection; connection
    /// errors, `TRYAGAIN` and `BUSY` retried for 30 s: a node may restart
    /// in place, a region settling after faults answers `TRYAGAIN` while
    /// a slot's owner moves — as a Redis Cluster client retries it — and
    /// a node just let go after `SIGSTOP` answers `BUSY` until a script it
    /// was running, now past `busy-reply-threshold`, ends).
    pub fn query<T: redis::FromRedisValue>(&self, i: usize, cmd: &redis::Cmd) -> T {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            match self.try_conn(i).and_then(|mut c| cmd.query::<T>(&mut c)) {
                Ok(v) => return v,
                Err(e)
                    if Instant::now() < deadline
                        && (e.is_io_error()
                            || e.is_connection_dropped()
                            || e.kind() == redis::ErrorKind::TryAgain
                            || e.code() == Some("BUSY")) =>
                {
                    std::thread::sleep(Duration::from_millis(100));
                }
                Err(e) => panic!(
                    "{:?} on {}: {e}",
                    cmd.args_iter().next(),
                    self.hosts[i].name
                ),
            }
        }
    }

    /// One `field:` of `INFO replication` on host `i`.
    pub fn replication_field(&self, i: usize, field: &str) -> Option<String> {
        let text: String = self.query(i, redis::cmd("INFO").arg("replication"));
        text.lines()
            .find_map(|l| l.strip_prefix(&format!("{field}:")))
            .map(|v| v.trim().to_string())
    }

    /// Whether host `i`'s node holds an ownership lease now (`ownership =
    /// leases`: `lease_ms_left` above 0 in `INFO replication`).
    pub fn lease_held(&self, i: usize) -> bool {
        self.replication_field(i, "lease_ms_left")
            .and_then(|v| v.parse::<u64>().ok())
            .is_some_and(|v| v > 0)
    }

    /// Polls `cond` every 100 ms until it holds; panics with `what` and
    /// host `i`'s log tail after `timeout`.
    pub fn wait_until(
        &self,
        i: usize,
        what: &str,
        timeout: Duration,
        mut cond: impl FnMut() -> bool,
    ) -> Duration {
        let started = Instant::now();
        while !cond() {
            if started.elapsed() > timeout {
                let info: String = self.query(i, redis::cmd("INFO").arg("replication"));
                panic!(
                    "{what}: not within {timeout:?}\nINFO replication of {}:\n{info}\nlog tail:\n{}",
                    self.hosts[i].name,
                    self.log_tail(i, 40)
                );
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        started.elapsed()
    }

    /// Waits until every host in `hosts` lists `n` members, has caught up
    /// and sees no member catching up.
    pub fn wait_settled(&self, hosts: &[usize], n: usize, timeout: Duration) -> Duration {
        let started = Instant::now();
        for &i in hosts {
            self.wait_until(
                i,
                &format!("{} sees {n} members, all caught up", self.hosts[i].name),
                timeout.saturating_sub(started.elapsed()),
                || {
                    let text: String = self.query(i, redis::cmd("INFO").arg("replication"));
                    text.contains(&format!("\r\nmembers:{n}\r\n"))
                        && text.contains("catching_up:0")
                        && !text.contains(",ready=0,")
                },
            );
        }
        started.elapsed()
    }

    /// `ELSA.DIGEST` of host `i`'s node.
    pub fn digest(&self, i: usize) -> (String, i64) {
        self.query(i, &redis::cmd("ELSA.DIGEST"))
    }

    /// Polls until the nodes of `hosts` have the same `ELSA.DIGEST` twice
    /// in a row; panics with the digests after `timeout`.
    pub fn wait_same_digest(&self, hosts: &[usize], timeout: Duration) -> Duration {
        let started = Instant::now();
        let mut previous: Option<Vec<(String, i64)>> = None;
        loop {
            let now: Vec<(String, i64)> = hosts.iter().map(|&i| self.digest(i)).collect();
            let same = now.windows(2).all(|w| w[0] == w[1]);
            if same && previous.as_ref() == Some(&now) {
                return started.elapsed();
            }
            previous = same.then_some(now.clone());
            assert!(
                started.elapsed() < timeout,
                "digests did not converge within {timeout:?}: {:?}\n{}",
                hosts
                    .iter()
                    .zip(&now)
                    .map(|(&i, d)| (&self.hosts[i].name, d))
                    .collect::<Vec<_>>(),
                self.records_not_everywhere(hosts)
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// The records not on every host of `hosts` (`ELSA.DIGEST RECORDS`:
    /// key, version, kind, content), each with the hosts holding it; the
    /// lattice state of each such key on every host (`ELSA.DIGEST STATE`)
    /// goes to a file beside the hosts' logs, named here: what a digest
    /// that will not converge is made of.
    pub fn records_not_everywhere(&self, hosts: &[usize]) -> String {
        let mut holders: std::collections::BTreeMap<String, Vec<&str>> = Default::default();
        for &i in hosts {
            let got = self
                .try_conn(i)
                .and_then(|mut c| redis::cmd("ELSA.DIGEST").arg("RECORDS").query(&mut c));
            let records: Vec<String> = got.unwrap_or_else(|e| vec![format!("(no listing: {e})")]);
            for r in records {
                holders.entry(r).or_default().push(&self.hosts[i].name);
            }
        }
        let odd: Vec<(String, Vec<&str>)> = holders
            .into_iter()
            .filter(|(_, on)| on.len() < hosts.len())
            .take(20)
            .collect();
        let mut states = String::new();
        let mut keys: Vec<&str> = odd
            .iter()
            .filter_map(|(r, _)| r.split(' ').next())
            .collect();
        keys.dedup();
        for key in keys {
            for &i in hosts {
                let state: redis::RedisResult<Vec<String>> = self.try_conn(i).and_then(|mut c| {
                    redis::cmd("ELSA.DIGEST")
                        .arg("STATE")
                        .arg(key)
                        .query(&mut c)
                });
                states.push_str(&format!(
                    "=== {key} on {}:\n{state:#?}\n",
                    self.hosts[i].name
                ));
            }
        }
        for &i in hosts {
            let info: redis::RedisResult<String> = self.try_conn(i).and_then(|mut c| {
                redis::cmd("INFO")
                    .arg("gossip")
                    .arg("replication")
                    .query(&mut c)
            });
            states.push_str(&format!(
                "=== INFO of {}:\n{}\n",
                self.hosts[i].name,
                info.unwrap_or_else(|e| e.to_string())
            ));
        }
        let file = std::env::temp_dir().join(format!("elsa-diverged-{}.txt", std::process::id()));
        let _ = std::fs::write(&file, states);
        let lines: Vec<String> = odd
            .iter()
            .map(|(r, on)| format!("    {r}   on {}", on.join(", ")))
            .collect();
        format!(
            "records not on every host:\n{}\n(their states: {})",
            lines.join("\n"),
            file.display()
        )
    }

    /// Cuts the network between the hosts of `a` and those of `b` with
    /// nftables rules in each host's namespace (table `inet elsa_cut`):
    /// every packet to or from the other side is dropped, TCP and UDP
    /// alike, as a real partition would.
    pub fn cut(&self, a: &[usize], b: &[usize]) {
        for (side, other) in [(a, b), (b, a)] {
            let others: Vec<String> = other
                .iter()
                .map(|&j| self.hosts[j].addr.to_string())
                .collect();
            let set = others.join(", ");
            for &i in side {
                nft(
                    &self.hosts[i].ns,
                    &format!(
                        "table inet elsa_cut {{\n\
                         chain input {{ type filter hook input priority 0; policy accept; ip saddr {{ {set} }} drop; }}\n\
                         chain output {{ type filter hook output priority 0; policy accept; ip daddr {{ {set} }} drop; }}\n\
                         }}\n"
                    ),
                );
            }
        }
    }

    /// Undoes [`Hosts::cut`]: deletes the table wherever it exists.
    pub fn heal(&self) {
        for h in &self.hosts {
            let listed = Command::new("ip")
                .args(["netns", "exec", &h.ns, "nft", "list", "tables"])
                .output()
                .expect("nft list tables");
            if String::from_utf8_lossy(&listed.stdout).contains("elsa_cut") {
                nft(&h.ns, "delete table inet elsa_cut\n");
            }
        }
    }

    /// Runs `elsa <args>` on host `i` (inside its namespace, where the
    /// host names resolve) and returns its output.
    pub fn elsa(&self, i: usize, args: &[&str]) -> std::process::Output {
        Command::new("ip")
            .args(["netns", "exec", &self.hosts[i].ns])
            .arg(elsa_bin())
            .args(args)
            .stdin(Stdio::null())
            .output()
            .expect("run elsa in a namespace")
    }

    /// Sends SIGTERM to host `i`'s node and waits (60 s) for it to exit.
    pub fn stop(&mut self, i: usize) -> std::process::ExitStatus {
        let mut child = self.hosts[i].node.take().expect("a node runs there");
        // SAFETY: kill(2) on the PID of a child we own and have not reaped.
        unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGTERM) };
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            if let Ok(Some(status)) = child.try_wait() {
                return status;
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                let _ = child.wait();
                panic!(
                    "node on {} did not exit within 60 s of SIGTERM",
                    self.hosts[i].name
                );
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Kills host `i`'s node as `kill -9` does, and reaps it.
    pub fn kill(&mut self, i: usize) {
        let mut child = self.hosts[i].node.take().expect("a node runs there");
        let _ = child.kill();
        let _ = child.wait();
    }

    /// Starts host `i`'s node again as it was last started (same node id,
    /// region, seeds, flags and data directory).
    pub fn restart(&mut self, i: usize) {
        let (seeds, extra) = self.hosts[i]
            .launched
            .clone()
            .expect("the node was started before");
        let (region, id) = (self.hosts[i].region.clone(), self.hosts[i].node_id);
        let extra: Vec<&str> = extra.iter().map(String::as_str).collect();
        self.start(i, &region, id, &seeds, &extra);
    }

    /// Host `i`'s node's clock `ms` off (`ELSA.FAULT CLOCK`, a node started
    /// with `--fault-injection true`) for `hold`, then back.
    pub fn skew_clock(&self, i: usize, ms: i64, hold: Duration) {
        let clock = |ms: i64| {
            let _: String = self.query(i, redis::cmd("ELSA.FAULT").arg("CLOCK").arg(ms));
        };
        clock(ms);
        std::thread::sleep(hold);
        clock(0);
    }

    /// Pauses (SIGSTOP) or resumes (SIGCONT) host `i`'s node.
    pub fn pause(&self, i: usize, on: bool) {
        let pid = self.hosts[i].node.as_ref().expect("a node runs there").id();
        let sig = if on { libc::SIGSTOP } else { libc::SIGCONT };
        // SAFETY: kill(2) on the PID of a child we own and have not reaped.
        unsafe { libc::kill(pid as libc::pid_t, sig) };
    }

    /// The lines of host `i`'s node log that hold `needle`.
    pub fn log_lines_with(&self, i: usize, needle: &str) -> Vec<String> {
        let text = std::fs::read_to_string(self.hosts[i].dir.log()).unwrap_or_default();
        text.lines()
            .filter(|l| l.contains(needle))
            .map(str::to_string)
            .collect()
    }

    /// The last `n` lines of host `i`'s node log.
    pub fn log_tail(&self, i: usize, n: usize) -> String {
        let text = std::fs::read_to_string(self.hosts[i].dir.log()).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(n)..].join("\n")
    }
}

impl Drop for Hosts {
    fn drop(&mut self) {
        for h in &mut self.hosts {
            if let Some(mut c) = h.node.take() {
                let _ = c.kill();
                let _ = c.wait();
            }
        }
        for h in &self.hosts {
            remove_ns(&h.ns);
        }
        remove_ns(&self.switch);
        let _ = &self.secret_dir;
    }
}

/// The client URL of a node at `addr` (with the password).
pub fn url(addr: Ipv4Addr) -> String {
    format!("redis://:{PASSWORD}@{addr}:{CLIENT_PORT}/")
}

/// A connection to the node at `addr`, opened inside namespace `ns`, with
/// short timeouts (2 s to connect, 3 s per call: a cut or a paused node
/// makes calls hang) for clients that keep going through faults; `None`
/// when it cannot be opened now.
pub fn quick_conn(ns: &str, addr: Ipv4Addr) -> Option<redis::Connection> {
    let url = url(addr);
    in_netns(ns, move || {
        let c = redis::Client::open(url)
            .ok()?
            .get_connection_with_timeout(Duration::from_secs(2))
            .ok()?;
        c.set_read_timeout(Some(Duration::from_secs(3))).ok()?;
        c.set_write_timeout(Some(Duration::from_secs(3))).ok()?;
        Some(c)
    })
}

/// For a client that keeps going through faults: the connection in `c`,
/// or, when there is none (it broke), a new one opened after 100 ms —
/// `None` while none can be opened.
pub fn reconnected<'c>(
    c: &'c mut Option<redis::Connection>,
    ns: &str,
    addr: Ipv4Addr,
) -> Option<&'c mut redis::Connection> {
    if c.is_none() {
        std::thread::sleep(Duration::from_millis(100));
        *c = quick_conn(ns, addr);
    }
    c.as_mut()
}

/// The error says the connection is gone or hung (a cut, a paused or
/// killed node): open another one; the call's outcome is unknown.
pub fn broken(e: &redis::RedisError) -> bool {
    e.is_io_error() || e.is_timeout() || e.is_connection_dropped()
}

/// Runs `f` on a thread that has joined network namespace `ns` (a socket
/// made there stays there; the thread then ends).
pub fn in_netns<T: Send + 'static>(ns: &str, f: impl FnOnce() -> T + Send + 'static) -> T {
    let path = format!("/run/netns/{ns}");
    std::thread::spawn(move || {
        let file = File::open(&path).unwrap_or_else(|e| panic!("open {path}: {e}"));
        // SAFETY: setns(2) with a namespace fd we just opened; it changes
        // only this (fresh, short-lived) thread's network namespace.
        let rc = unsafe { libc::setns(file.as_raw_fd(), libc::CLONE_NEWNET) };
        assert_eq!(rc, 0, "setns({path}): {}", std::io::Error::last_os_error());
        f()
    })
    .join()
    .expect("netns thread panicked")
}

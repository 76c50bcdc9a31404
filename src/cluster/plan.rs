//! The pure half of `elsa cluster`: parsing `--rtt`/`--loss`, laying out
//! nodes (ids, regions, ports, directories), each server's command line, and
//! the cluster file's schema. No I/O here, so all of it is unit-tested below.

use serde::{Deserialize, Serialize};
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Peer port = client port + this. It is also the most nodes one cluster can
/// have, so the peer ports never overlap the client ports.
pub const PEER_PORT_OFFSET: u32 = 1000;

/// Loopback: every node of a local cluster binds and dials it.
pub const HOST: &str = "127.0.0.1";

/// Largest `--rtt` accepted (a sanity bound, not a protocol limit).
const MAX_RTT: Duration = Duration::from_secs(60);

/// Parses `--rtt`: `50ms`, `1s`, `1.5s`, `0`; a bare number is milliseconds.
pub fn parse_rtt(s: &str) -> Result<Duration, String> {
    let t = s.trim();
    let (num, scale_ms) = if let Some(n) = t.strip_suffix("ms") {
        (n, 1.0)
    } else if let Some(n) = t.strip_suffix('s') {
        (n, 1000.0)
    } else {
        (t, 1.0)
    };
    let bad = || format!("invalid round-trip time {s:?}: expected e.g. 50ms, 1s or 0");
    let num = num.trim();
    if num.is_empty() || num.starts_with(['+', '-']) {
        return Err(bad());
    }
    let v: f64 = num.parse().map_err(|_| bad())?;
    if !v.is_finite() {
        return Err(bad());
    }
    let ms = v * scale_ms;
    if ms > MAX_RTT.as_millis() as f64 {
        return Err(format!(
            "round-trip time {s:?} is too large (at most {}s)",
            MAX_RTT.as_secs()
        ));
    }
    Ok(Duration::from_secs_f64(ms / 1000.0))
}

/// Parses `--loss` as a percentage: `1%`, `0.5` (= 0.5 %), `0`.
pub fn parse_loss(s: &str) -> Result<f64, String> {
    let t = s.trim();
    let num = t.strip_suffix('%').unwrap_or(t).trim();
    let bad = || format!("invalid loss {s:?}: expected a percentage from 0 to 100, e.g. 1% or 0.5");
    if num.is_empty() || num.starts_with(['+', '-']) {
        return Err(bad());
    }
    let v: f64 = num.parse().map_err(|_| bad())?;
    if !v.is_finite() || !(0.0..=100.0).contains(&v) {
        return Err(bad());
    }
    Ok(v)
}

/// The one-way WAN delay each node injects: half the round trip, whole ms
/// (rounded down).
pub fn wan_delay_ms(rtt: Duration) -> u64 {
    (rtt / 2).as_millis() as u64
}

/// One node of the planned cluster.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeSpec {
    /// 1-based, region-major: r1's nodes first.
    pub id: u32,
    /// `r1`, `r2`, ...
    pub region: String,
    /// 1-based position inside its region; the node with 1 is its region's seed.
    pub index_in_region: u32,
    pub client_port: u16,
    pub peer_port: u16,
}

impl NodeSpec {
    /// The node's directory name under the cluster dir: `r1-1`, `r2-3`, ...
    pub fn name(&self) -> String {
        format!("{}-{}", self.region, self.index_in_region)
    }

    /// `<cluster dir>/<region>-<n>`: the node's log and data live here.
    pub fn node_dir(&self, cluster_dir: &Path) -> PathBuf {
        cluster_dir.join(self.name())
    }

    /// `<cluster dir>/<region>-<n>/data`: the server's `--data-dir`.
    pub fn data_dir(&self, cluster_dir: &Path) -> PathBuf {
        self.node_dir(cluster_dir).join("data")
    }

    /// `<cluster dir>/<region>-<n>/elsa.log`: the server's stdout and stderr.
    pub fn log_file(&self, cluster_dir: &Path) -> PathBuf {
        self.node_dir(cluster_dir).join("elsa.log")
    }
}

/// Whether `name` has the shape of [`NodeSpec::name`]: `r<digits>-<digits>`.
pub fn is_node_dir_name(name: &str) -> bool {
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    name.strip_prefix('r')
        .and_then(|rest| rest.split_once('-'))
        .is_some_and(|(r, n)| digits(r) && digits(n))
}

/// Lays out `regions` × `per_region` nodes from `base_port`: node index `i`
/// (0-based, region-major) gets client port `base_port + i` and peer port
/// `base_port + 1000 + i`.
pub fn layout(regions: u32, per_region: u32, base_port: u16) -> Result<Vec<NodeSpec>, String> {
    if regions == 0 {
        return Err("--regions must be at least 1".into());
    }
    if per_region == 0 {
        return Err("--nodes-per-region must be at least 1".into());
    }
    if base_port == 0 {
        return Err("--base-port must be at least 1".into());
    }
    let total = regions
        .checked_mul(per_region)
        .filter(|&t| t <= PEER_PORT_OFFSET)
        .ok_or_else(|| {
            format!(
                "{regions} regions × {per_region} nodes is too many: at most {PEER_PORT_OFFSET} nodes"
            )
        })?;
    let last_peer = u32::from(base_port) + PEER_PORT_OFFSET + total - 1;
    if last_peer > u32::from(u16::MAX) {
        return Err(format!(
            "--base-port {base_port} is too high for {total} nodes: their peer ports would run \
             to {last_peer} (> 65535); use a base port of at most {}",
            u32::from(u16::MAX) + 1 - PEER_PORT_OFFSET - total
        ));
    }
    let mut nodes = Vec::with_capacity(total as usize);
    for r in 0..regions {
        for n in 0..per_region {
            let i = r * per_region + n;
            nodes.push(NodeSpec {
                id: i + 1,
                region: format!("r{}", r + 1),
                index_in_region: n + 1,
                // Both fit: checked against u16::MAX above.
                client_port: (u32::from(base_port) + i) as u16,
                peer_port: (u32::from(base_port) + PEER_PORT_OFFSET + i) as u16,
            });
        }
    }
    Ok(nodes)
}

/// `--replication` values passed through to `elsa server`.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Replication {
    /// Coordination-free: replicas merge CRDT lattices.
    Crdt,
    /// Two-phase commit across replicas.
    #[value(name = "2pc")]
    TwoPc,
}

impl Replication {
    pub fn as_str(self) -> &'static str {
        match self {
            Replication::Crdt => "crdt",
            Replication::TwoPc => "2pc",
        }
    }
}

/// `--appendfsync` values passed through to `elsa server`.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Appendfsync {
    Always,
    Everysec,
    No,
}

impl Appendfsync {
    pub fn as_str(self) -> &'static str {
        match self {
            Appendfsync::Always => "always",
            Appendfsync::Everysec => "everysec",
            Appendfsync::No => "no",
        }
    }
}

/// What every server of the cluster shares; the optional keys are passed
/// only when given to `elsa cluster up`.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ServerOptions {
    pub rtt: Duration,
    /// Percent, 0..=100.
    pub loss_percent: f64,
    pub workers: Option<usize>,
    pub replication_factor: Option<u32>,
    pub replication: Option<Replication>,
    pub ownership: Option<elsa_cluster::Ownership>,
    pub merge_epoch_ms: Option<u64>,
    pub appendfsync: Option<Appendfsync>,
}

/// `--seeds` for `node`: the peer address of the first node of every region,
/// except `node` itself.
pub fn seeds(node: &NodeSpec, all: &[NodeSpec]) -> Vec<String> {
    all.iter()
        .filter(|n| n.index_in_region == 1 && n.id != node.id)
        .map(|n| format!("{HOST}:{}", n.peer_port))
        .collect()
}

/// The flags after `elsa server` for `node` of the cluster `all` living in
/// `cluster_dir`. `--seeds` is left out when there is none (a one-node
/// cluster).
pub fn server_args(
    node: &NodeSpec,
    all: &[NodeSpec],
    cluster_dir: &Path,
    opts: &ServerOptions,
) -> Vec<OsString> {
    let mut args: Vec<OsString> = Vec::with_capacity(32);
    let mut flag = |name: &str, value: OsString| {
        args.push(format!("--{name}").into());
        args.push(value);
    };
    flag("node-id", node.id.to_string().into());
    flag("port", node.client_port.to_string().into());
    flag("bind", HOST.into());
    flag("data-dir", node.data_dir(cluster_dir).into_os_string());
    flag("region", node.region.clone().into());
    flag("peer-port", node.peer_port.to_string().into());
    let seeds = seeds(node, all);
    if !seeds.is_empty() {
        flag("seeds", seeds.join(",").into());
    }
    // The region forms only once all its nodes see each other.
    let in_region = all.iter().filter(|n| n.region == node.region).count();
    flag("region-nodes", in_region.to_string().into());
    flag("wan-delay-ms", wan_delay_ms(opts.rtt).to_string().into());
    // `{:?}` keeps the decimal point: 1.0, 0.5.
    flag("wan-loss", format!("{:?}", opts.loss_percent).into());
    flag("fault-injection", "true".into());
    if let Some(w) = opts.workers {
        flag("workers", w.to_string().into());
    }
    if let Some(k) = opts.replication_factor {
        flag("replication-factor", k.to_string().into());
    }
    if let Some(r) = opts.replication {
        flag("replication", r.as_str().into());
    }
    if let Some(o) = opts.ownership {
        flag("ownership", o.name().into());
    }
    if let Some(e) = opts.merge_epoch_ms {
        flag("merge-epoch-ms", e.to_string().into());
    }
    if let Some(a) = opts.appendfsync {
        flag("appendfsync", a.as_str().into());
    }
    // Peer links over TLS, authenticated with the cluster's secret.
    flag(
        "cluster-secret-file",
        cluster_dir.join(SECRET_FILE).into_os_string(),
    );
    args
}

/// `<cluster dir>/cluster.secret`: the cluster secret `up` generates (mode
/// 600) and every node reads (`cluster-secret-file`).
pub const SECRET_FILE: &str = "cluster.secret";

/// `<cluster dir>/cluster.toml`: what `up` started, read by `down` and
/// `status`.
pub const CLUSTER_FILE: &str = "cluster.toml";

/// The cluster file's contents.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
#[serde(rename_all = "kebab-case")]
pub struct ClusterFile {
    /// Schema version of this file.
    pub version: u32,
    /// The cluster directory (absolute).
    pub dir: PathBuf,
    pub rtt_ms: u64,
    pub loss_percent: f64,
    pub node: Vec<NodeRecord>,
}

/// One started node, as recorded in the cluster file.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
#[serde(rename_all = "kebab-case")]
pub struct NodeRecord {
    pub id: u32,
    pub region: String,
    pub host: String,
    pub client_port: u16,
    pub peer_port: u16,
    pub pid: u32,
    pub data_dir: PathBuf,
    pub log: PathBuf,
}

impl ClusterFile {
    pub const VERSION: u32 = 1;

    pub fn to_toml(&self) -> Result<String, String> {
        let body = toml::to_string(self).map_err(|e| format!("cannot encode cluster file: {e}"))?;
        Ok(format!(
            "# Written by `elsa cluster up`; read by `elsa cluster status` and `elsa cluster down`.\n{body}"
        ))
    }

    pub fn from_toml(text: &str) -> Result<ClusterFile, String> {
        toml::from_str(text).map_err(|e| e.to_string())
    }
}

/// Quotes `s` for a POSIX shell if it needs it (for the printed `stop with:`
/// line).
pub fn shell_quote(s: &str) -> String {
    let plain = !s.is_empty()
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_./:@%+=,".contains(c));
    if plain {
        s.to_string()
    } else {
        format!("'{}'", s.replace('\'', r"'\''"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn strs(args: &[OsString]) -> Vec<String> {
        args.iter()
            .map(|a| a.to_string_lossy().into_owned())
            .collect()
    }

    #[test]
    fn rtt_accepts_units_and_zero() {
        assert_eq!(parse_rtt("50ms"), Ok(Duration::from_millis(50)));
        assert_eq!(parse_rtt("200ms"), Ok(Duration::from_millis(200)));
        assert_eq!(parse_rtt("1s"), Ok(Duration::from_secs(1)));
        assert_eq!(parse_rtt("1.5s"), Ok(Duration::from_millis(1500)));
        assert_eq!(parse_rtt("0"), Ok(Duration::ZERO));
        assert_eq!(parse_rtt("0ms"), Ok(Duration::ZERO));
        assert_eq!(parse_rtt("80"), Ok(Duration::from_millis(80)));
        assert_eq!(parse_rtt(" 30 ms "), Ok(Duration::from_millis(30)));
    }

    #[test]
    fn rtt_rejects_garbage() {
        for bad in [
            "", "ms", "s", "-5ms", "+5ms", "abc", "5m", "5h", "NaN", "infs", "61s",
        ] {
            assert!(parse_rtt(bad).is_err(), "{bad:?} should be rejected");
        }
    }

    #[test]
    fn loss_is_a_percentage() {
        assert_eq!(parse_loss("1%"), Ok(1.0));
        assert_eq!(parse_loss("0.5"), Ok(0.5));
        assert_eq!(parse_loss("0.5%"), Ok(0.5));
        assert_eq!(parse_loss("0"), Ok(0.0));
        assert_eq!(parse_loss("100%"), Ok(100.0));
        for bad in ["", "%", "-1%", "101", "x%", "NaN", "inf", "1%%"] {
            assert!(parse_loss(bad).is_err(), "{bad:?} should be rejected");
        }
    }

    #[test]
    fn wan_delay_is_half_the_rtt_rounded_down() {
        assert_eq!(wan_delay_ms(Duration::from_millis(50)), 25);
        assert_eq!(wan_delay_ms(Duration::from_millis(3)), 1);
        assert_eq!(wan_delay_ms(Duration::from_secs(1)), 500);
        assert_eq!(wan_delay_ms(Duration::ZERO), 0);
    }

    #[test]
    fn layout_is_region_major() {
        let nodes = layout(2, 3, 7000).unwrap();
        let got: Vec<(u32, &str, u32, u16, u16)> = nodes
            .iter()
            .map(|n| {
                (
                    n.id,
                    n.region.as_str(),
                    n.index_in_region,
                    n.client_port,
                    n.peer_port,
                )
            })
            .collect();
        assert_eq!(
            got,
            vec![
                (1, "r1", 1, 7000, 8000),
                (2, "r1", 2, 7001, 8001),
                (3, "r1", 3, 7002, 8002),
                (4, "r2", 1, 7003, 8003),
                (5, "r2", 2, 7004, 8004),
                (6, "r2", 3, 7005, 8005),
            ]
        );
        assert_eq!(nodes[4].name(), "r2-2");
        assert!(nodes.iter().all(|n| is_node_dir_name(&n.name())));
        for bad in [
            "", "r", "r1", "r1-", "r-1", "x1-1", "r1-1/..", "..", "r1-1-1",
        ] {
            assert!(!is_node_dir_name(bad), "{bad:?}");
        }
        assert_eq!(
            nodes[4].data_dir(Path::new("/c")),
            PathBuf::from("/c/r2-2/data")
        );
        assert_eq!(
            nodes[4].log_file(Path::new("/c")),
            PathBuf::from("/c/r2-2/elsa.log")
        );
    }

    #[test]
    fn layout_rejects_bad_shapes() {
        assert!(layout(0, 1, 7000).unwrap_err().contains("--regions"));
        assert!(layout(1, 0, 7000)
            .unwrap_err()
            .contains("--nodes-per-region"));
        assert!(layout(1, 1, 0).unwrap_err().contains("--base-port"));
        assert!(layout(u32::MAX, 2, 7000).unwrap_err().contains("too many"));
        assert!(layout(1001, 1, 7000).unwrap_err().contains("too many"));
        // The last peer port must fit: 64535 + 1000 = 65535 is the edge.
        assert!(layout(1, 1, 64535).is_ok());
        let e = layout(1, 2, 64535).unwrap_err();
        assert!(e.contains("65536") && e.contains("at most 64534"), "{e}");
        assert!(layout(1, 1, 65535).is_err());
    }

    #[test]
    fn seeds_are_other_regions_first_nodes() {
        let nodes = layout(3, 2, 7000).unwrap();
        // r1's seed sees the other regions' seeds.
        assert_eq!(
            seeds(&nodes[0], &nodes),
            ["127.0.0.1:8002", "127.0.0.1:8004"]
        );
        // A non-seed node also joins through its own region's seed.
        assert_eq!(
            seeds(&nodes[3], &nodes),
            ["127.0.0.1:8000", "127.0.0.1:8002", "127.0.0.1:8004"]
        );
        let one = layout(1, 1, 7000).unwrap();
        assert!(seeds(&one[0], &one).is_empty());
    }

    #[test]
    fn server_args_minimal() {
        let nodes = layout(2, 1, 7000).unwrap();
        let opts = ServerOptions {
            rtt: Duration::from_millis(50),
            loss_percent: 1.0,
            ..Default::default()
        };
        let args = strs(&server_args(&nodes[1], &nodes, Path::new("/tmp/c"), &opts));
        assert_eq!(
            args,
            [
                "--node-id",
                "2",
                "--port",
                "7001",
                "--bind",
                "127.0.0.1",
                "--data-dir",
                "/tmp/c/r2-1/data",
                "--region",
                "r2",
                "--peer-port",
                "8001",
                "--seeds",
                "127.0.0.1:8000",
                "--region-nodes",
                "1",
                "--wan-delay-ms",
                "25",
                "--wan-loss",
                "1.0",
                "--fault-injection",
                "true",
                "--cluster-secret-file",
                "/tmp/c/cluster.secret",
            ]
        );
    }

    #[test]
    fn server_args_pass_optional_keys_only_when_given() {
        let nodes = layout(1, 2, 7000).unwrap();
        let opts = ServerOptions {
            rtt: Duration::ZERO,
            loss_percent: 0.5,
            workers: Some(2),
            replication_factor: Some(3),
            replication: Some(Replication::TwoPc),
            ownership: Some(elsa_cluster::Ownership::Gossip),
            merge_epoch_ms: Some(20),
            appendfsync: Some(Appendfsync::Always),
        };
        let args = strs(&server_args(&nodes[0], &nodes, Path::new("/c"), &opts));
        assert_eq!(args[12..14], ["--region-nodes", "2"], "both nodes of r1");
        let tail: Vec<&str> = args.iter().map(String::as_str).skip(14).collect();
        assert_eq!(
            tail,
            [
                "--wan-delay-ms",
                "0",
                "--wan-loss",
                "0.5",
                "--fault-injection",
                "true",
                "--workers",
                "2",
                "--replication-factor",
                "3",
                "--replication",
                "2pc",
                "--ownership",
                "gossip",
                "--merge-epoch-ms",
                "20",
                "--appendfsync",
                "always",
                "--cluster-secret-file",
                "/c/cluster.secret",
            ]
        );
        // A single region's seed has nobody to dial: no --seeds at all.
        assert!(!args.iter().any(|a| a == "--seeds"));
        // Every flag is followed by its value.
        assert_eq!(args.len() % 2, 0);
        assert!(args.iter().step_by(2).all(|a| a.starts_with("--")));
    }

    #[test]
    fn cluster_file_round_trips() {
        let f = ClusterFile {
            version: ClusterFile::VERSION,
            dir: "/tmp/my cluster".into(),
            rtt_ms: 50,
            loss_percent: 1.0,
            node: vec![NodeRecord {
                id: 1,
                region: "r1".into(),
                host: HOST.into(),
                client_port: 7000,
                peer_port: 8000,
                pid: 4242,
                data_dir: "/tmp/my cluster/r1-1/data".into(),
                log: "/tmp/my cluster/r1-1/elsa.log".into(),
            }],
        };
        let text = f.to_toml().unwrap();
        assert!(text.contains("[[node]]"), "{text}");
        assert!(text.contains("pid = 4242"), "{text}");
        assert_eq!(ClusterFile::from_toml(&text).unwrap(), f);
    }

    #[test]
    fn shell_quoting() {
        assert_eq!(shell_quote("./elsa-cluster"), "./elsa-cluster");
        assert_eq!(shell_quote("/tmp/a b"), "'/tmp/a b'");
        assert_eq!(shell_quote("it's"), r"'it'\''s'");
        assert_eq!(shell_quote(""), "''");
    }
}

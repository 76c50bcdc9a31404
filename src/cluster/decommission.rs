//! `elsa cluster decommission --node host:port`: removes one node of a
//! running cluster (any hosts, not only `cluster up`'s) gracefully. It
//! sends the node `ELSA.DECOMMISSION`, then follows `INFO replication`
//! (`decommission:`, `decommission_slots_remaining:`) until the node's
//! slots have drained to the remaining nodes; stopping the node is left to
//! the operator's service manager (the node holds nothing by then).

use std::time::{Duration, Instant};

/// `elsa cluster decommission`.
#[derive(clap::Args, Debug)]
pub struct DecommissionArgs {
    /// The node to remove: its client address, host:port (a name works).
    #[arg(long)]
    node: String,
    /// The node's password (`requirepass`), if it has one.
    #[arg(long, env = "ELSA_PASSWORD", hide_env_values = true)]
    password: Option<String>,
    /// ACL user to authenticate as (with --password).
    #[arg(long)]
    user: Option<String>,
    /// Give up (exit 1) if the drain has not finished after this many seconds.
    #[arg(long, default_value_t = 600)]
    timeout_secs: u64,
}

/// How often the progress is read.
const POLL: Duration = Duration::from_millis(500);

/// Runs it; the process exit code (0 once the node reports `done`).
pub fn decommission(a: DecommissionArgs) -> Result<i32, String> {
    let info = redis::ConnectionInfo {
        addr: parse_addr(&a.node)?,
        redis: redis::RedisConnectionInfo {
            username: a.user.clone(),
            password: a.password.clone(),
            ..Default::default()
        },
    };
    let client = redis::Client::open(info).map_err(|e| format!("{}: {e}", a.node))?;
    let mut conn = client
        .get_connection_with_timeout(Duration::from_secs(10))
        .map_err(|e| format!("{}: {e}", a.node))?;
    conn.set_read_timeout(Some(Duration::from_secs(30)))
        .map_err(|e| e.to_string())?;
    redis::cmd("ELSA.DECOMMISSION")
        .query::<()>(&mut conn)
        .map_err(|e| format!("{}: {e}", a.node))?;
    println!("{}: decommissioning", a.node);
    let deadline = Instant::now() + Duration::from_secs(a.timeout_secs);
    let mut last = String::new();
    loop {
        let text: String = redis::cmd("INFO")
            .arg("replication")
            .query(&mut conn)
            .map_err(|e| format!("{}: {e}", a.node))?;
        let field = |name: &str| {
            text.lines()
                .find_map(|l| l.strip_prefix(name)?.strip_prefix(':'))
                .unwrap_or("?")
                .trim()
                .to_string()
        };
        let phase = field("decommission");
        let now = format!(
            "{phase}, {} slots to hand over",
            field("decommission_slots_remaining")
        );
        if now != last {
            println!("{}: {now}", a.node);
            last = now;
        }
        if phase == "done" {
            println!(
                "{}: done — every slot it held has its replicas on the other nodes; stop it now",
                a.node
            );
            return Ok(0);
        }
        if Instant::now() >= deadline {
            eprintln!(
                "{}: still {phase} after {} s (INFO replication shows the progress)",
                a.node, a.timeout_secs
            );
            return Ok(1);
        }
        std::thread::sleep(POLL);
    }
}

/// `host:port` as a TCP connection address (the host may be a name).
fn parse_addr(node: &str) -> Result<redis::ConnectionAddr, String> {
    let (host, port) = node
        .rsplit_once(':')
        .ok_or_else(|| format!("--node {node}: expected host:port"))?;
    let port: u16 = port
        .parse()
        .map_err(|_| format!("--node {node}: {port:?} is not a port"))?;
    let host = host.trim_start_matches('[').trim_end_matches(']');
    Ok(redis::ConnectionAddr::Tcp(host.to_string(), port))
}

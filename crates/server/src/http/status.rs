//! `GET /status.json`: a [`NodeView`] as the status page (`status.html`)
//! reads it — the cluster map as this node sees it (its membership view,
//! what peers publish through it), replication lag per region pair this
//! node takes part in, and the counters the page turns into rates.

use serde_json::{json, Value};

use super::view::NodeView;

pub(crate) fn render(v: &NodeView) -> Value {
    let t = &v.total;
    let cluster = v.cluster.as_ref().map(|c| {
        let regions: Vec<Value> = c
            .regions
            .iter()
            .map(|r| {
                let nodes: Vec<Value> = c
                    .members
                    .iter()
                    .filter(|m| &m.region == r)
                    .map(|m| {
                        let link = c.peers.iter().find(|p| p.node == m.node);
                        json!({
                            "node": m.node,
                            "client": m.client,
                            "peer": m.peer,
                            "alive": m.alive,
                            "ready": m.ready,
                            "catching_up": m.alive && !m.ready,
                            "leaving": m.leaving,
                            "slots_primary": m.slots_primary,
                            "self": m.node == v.node,
                            // The link from this node (None: itself).
                            "link_up": link.map(|p| p.connected),
                        })
                    })
                    .collect();
                json!({ "name": r, "nodes": nodes })
            })
            .collect();
        // Lag per region pair, as far as this node sees it: into its
        // region from each peer's (the newest lattice received), and from
        // its region (its own commits' watermark) into each other.
        let mut lag: Vec<Value> = Vec::new();
        for r in &c.regions {
            let peers: Vec<_> = c.peers.iter().filter(|p| &p.region == r).collect();
            if !peers.is_empty() {
                // -1 (unknown) until one of them has sent something.
                let lag_ms = peers
                    .iter()
                    .filter(|p| p.stats.received > 0)
                    .map(|p| p.stats.lag_ms as i64)
                    .max()
                    .unwrap_or(-1);
                lag.push(json!({
                    "from": r, "to": v.region,
                    "lag_ms": lag_ms,
                    "source": "newest lattice received from the region's peers",
                }));
            }
        }
        for (r, behind) in &c.watermark_behind_ms {
            if r != &v.region {
                lag.push(json!({
                    "from": v.region, "to": r,
                    "lag_ms": behind,
                    "source": "watermark of this node's commits",
                }));
            }
        }
        json!({
            "regions": regions,
            "lag": lag,
            "replication": c.replication,
            "serving": c.serving,
            "catching_up": !c.serving,
            "decommission": { "phase": c.decommission.0, "slots_remaining": c.decommission.1 },
            "pending_deltas": c.pending_deltas,
            "convergence_lag_ms": { "p50": c.lag_ms.0, "p99": c.lag_ms.1, "max": c.lag_ms.2 },
            "epochs": c.epochs,
        })
    });
    json!({
        "node": v.node,
        "region": v.region,
        "addr": v.addr,
        "version": env!("CARGO_PKG_VERSION"),
        "uptime_seconds": v.uptime_secs,
        "unix_ms": elsa_shard::unix_ms(),
        "clients": v.clients,
        "commands_processed": v.commands_total,
        "lone_ops": t.ops,
        "commits": t.commits,
        "conflicts": t.conflicts,
        "busy_retries": t.busy,
        "keys": v.keyspace.iter().map(|(_, k, _)| k).sum::<usize>(),
        "memory_rss_bytes": v.rss_bytes,
        "memory_dataset_bytes": t.memory,
        "wal_bytes": v.wal_bytes,
        "cluster": cluster,
    })
}

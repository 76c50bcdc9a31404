//! One reading of the node for the metrics port: every figure `/metrics`
//! and `/status.json` show, gathered once per request from the shards (an
//! `AdminMsg` to each, as INFO does), the node's shared counters and the
//! replication service's view of the cluster. Both outputs are pure
//! functions of a [`NodeView`], so they always agree.

use std::sync::atomic::Ordering;

use elsa_cluster::service::PeerInfo;
use elsa_shard::{AdminMsg, ShardMsg, ShardStats};
use elsa_txn::{Coordinator, TxnError};

use crate::state::Shared;

/// The node as one scrape saw it.
pub(crate) struct NodeView {
    /// The node's shared state, for families that read their own
    /// counters at encoding time (per-command statistics, say).
    pub shared: std::sync::Arc<Shared>,
    pub node: u32,
    pub region: String,
    pub addr: String,
    pub uptime_secs: u64,
    pub clients: usize,
    pub connections_total: u64,
    pub commands_total: u64,
    pub rejected_total: u64,
    pub rss_bytes: u64,
    /// Per database with keys: (db, keys, keys with an expiry).
    pub keyspace: Vec<(u8, usize, usize)>,
    /// Per shard, in index order.
    pub shards: Vec<ShardStats>,
    /// Their sum (the figures INFO shows).
    pub total: ShardStats,
    /// Bytes of log files on disk.
    pub wal_bytes: u64,
    pub cluster: Option<ClusterView>,
}

/// A node of the cluster as this node sees it.
#[derive(Debug)]
pub(crate) struct MemberView {
    pub node: u32,
    pub region: String,
    pub peer: String,
    pub client: String,
    /// In this node's membership view now.
    pub alive: bool,
    /// Caught up (may be primary); false while catching up.
    pub ready: bool,
    /// Slots (of 65536) it is the primary of in its region.
    pub slots_primary: usize,
    /// Being decommissioned: it holds no slot, its old ones are draining.
    pub leaving: bool,
}

/// The replication service's view.
#[derive(Debug)]
pub(crate) struct ClusterView {
    pub regions: Vec<String>,
    /// Every node ever seen, this one included, by id.
    pub members: Vec<MemberView>,
    pub peers: Vec<PeerInfo>,
    /// This node serves its slots (false while catching up).
    pub serving: bool,
    /// This node's decommission: its phase and the slots still draining.
    pub decommission: (&'static str, usize),
    pub replication: &'static str,
    pub epochs: u64,
    /// Convergence lag over lattices received: p50, p99, max (ms).
    pub lag_ms: (u64, u64, u64),
    pub gossip_frames_dropped: u64,
    pub frames_refused: u64,
    pub datagrams_dropped: u64,
    /// Keys changed this epoch, waiting for the gossip flush.
    pub pending_deltas: usize,
    /// Per region: how far behind now the watermark of this node's
    /// commits there is, ms (-1: unknown).
    pub watermark_behind_ms: Vec<(String, i64)>,
    pub isolated: bool,
}

/// Reads the node. Fails only when a shard is gone (shutting down).
pub(crate) async fn read(
    shared: &std::sync::Arc<Shared>,
    coord: &Coordinator,
) -> Result<NodeView, TxnError> {
    let mut shards = Vec::with_capacity(coord.node.shards());
    let mut per_db = std::collections::BTreeMap::<u8, (usize, usize)>::new();
    for s in 0..coord.node.shards() {
        let shard = coord.node.local(s);
        shards.push(
            coord
                .ask(shard, |r| ShardMsg::Admin(AdminMsg::Stats(r)))
                .await?,
        );
        for (db, keys, expires, _ttl) in coord
            .ask(shard, |r| ShardMsg::Admin(AdminMsg::Keyspace(r)))
            .await?
        {
            let row = per_db.entry(db).or_default();
            row.0 += keys;
            row.1 += expires;
        }
    }
    let total = crate::info_sections::sum(&shards);
    let c = &shared.config;
    Ok(NodeView {
        shared: shared.clone(),
        node: c.node_id,
        region: c.cluster.region.clone(),
        addr: c.addr.to_string(),
        uptime_secs: shared.started.elapsed().as_secs(),
        clients: shared.clients.load(Ordering::Relaxed),
        connections_total: shared.total_connections.load(Ordering::Relaxed),
        commands_total: shared.total_commands.load(Ordering::Relaxed),
        rejected_total: shared.rejected.load(Ordering::Relaxed),
        rss_bytes: crate::memory::rss_bytes(),
        keyspace: per_db.into_iter().map(|(db, (k, e))| (db, k, e)).collect(),
        cluster: shared
            .cluster
            .as_ref()
            .map(|cl| cluster_view(cl, shards.iter().map(|s| s.gossip_pending).sum())),
        wal_bytes: shared.persistence.dir.wal_bytes(),
        total,
        shards,
    })
}

fn cluster_view(cl: &elsa_cluster::Cluster, pending_deltas: usize) -> ClusterView {
    let ring = cl.ring();
    let regions = ring.regions().to_vec();
    // Primaries per node: the first replica of every slot in every region
    // (65536 lookups per region: a scrape's cost, never a command's).
    let mut primaries = std::collections::HashMap::<u32, usize>::new();
    for r in 0..regions.len() {
        for slot in 0..elsa_shard::table::DIGEST_BUCKETS {
            if let Some(first) = ring.replicas(slot, r).first() {
                *primaries.entry(first.node).or_default() += 1;
            }
        }
    }
    let members = cl
        .known_members()
        .into_iter()
        .map(|(m, alive)| MemberView {
            node: m.node,
            slots_primary: primaries.get(&m.node).copied().unwrap_or(0),
            region: m.region,
            peer: m.peer.to_string(),
            client: m.client.to_string(),
            alive,
            ready: m.ready,
            leaving: m.leaving,
        })
        .collect();
    let now = elsa_shard::unix_ms();
    let watermark_behind_ms = regions
        .iter()
        .map(|r| {
            let wm = cl.watermark(r);
            let behind = if wm == u64::MAX || wm == 0 {
                -1
            } else {
                now.saturating_sub(wm >> 16) as i64
            };
            (r.clone(), behind)
        })
        .collect();
    ClusterView {
        regions,
        members,
        peers: cl.peer_info(),
        serving: cl.is_serving(),
        decommission: {
            let d = cl.decommission_status();
            (d.phase, d.slots_remaining)
        },
        replication: cl.replication().name(),
        epochs: cl.epochs(),
        lag_ms: cl.lag_percentiles(),
        gossip_frames_dropped: cl.gossip_frames_dropped() as u64,
        frames_refused: cl.frames_refused(),
        datagrams_dropped: cl.datagrams_dropped(),
        pending_deltas,
        watermark_behind_ms,
        isolated: cl.isolated(),
    }
}

//! `GET /metrics`: a [`NodeView`] in the Prometheus exposition format
//! (OpenMetrics text, which Prometheus scrapes natively), written with
//! `prometheus-client` — the Prometheus project's own Rust client — rather
//! than by hand, so names, escaping, `_total` suffixes and histogram
//! buckets follow the format exactly.
//!
//! Every figure is read at scrape time (a custom `Collector`), none is
//! kept here: the node's counters live where they are counted. Families
//! come in groups, one function each, listed in [`FAMILIES`]; a group may
//! read its counters through `NodeView::shared` (per-command statistics
//! and transaction outcomes do, from `crate::cmdstats`).

use std::fmt;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, NoLabelSet};
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::Registry;

use super::view::NodeView;

/// One group of families.
type Family = fn(&NodeView, &mut DescriptorEncoder) -> fmt::Result;

/// Every group, in the order they are written.
const FAMILIES: &[Family] = &[
    node,
    keyspace,
    transactions,
    client_transactions,
    commands,
    wal,
    membership,
    replication,
    peers,
];

/// The content type of the answer.
pub(crate) const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// The whole exposition for one reading.
pub(crate) fn render(view: NodeView) -> String {
    let mut registry = Registry::default();
    registry.register_collector(Box::new(Exposition(view)));
    let mut out = String::new();
    // Writing into a String cannot fail; an encoder error would be a bug
    // in a family, and then the scrape says so rather than half an answer.
    if let Err(e) = prometheus_client::encoding::text::encode(&mut out, &registry) {
        return format!("# encoding failed: {e}\n");
    }
    out
}

struct Exposition(NodeView);

impl fmt::Debug for Exposition {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Exposition")
    }
}

impl Collector for Exposition {
    fn encode(&self, mut enc: DescriptorEncoder) -> fmt::Result {
        for family in FAMILIES {
            family(&self.0, &mut enc)?;
        }
        Ok(())
    }
}

type Labels = Vec<(&'static str, String)>;

fn gauge(enc: &mut DescriptorEncoder, name: &str, help: &str, v: i64) -> fmt::Result {
    enc.encode_descriptor(name, help, None, MetricType::Gauge)?
        .encode_gauge(&v)
}

/// A counter; `name` without `_total` (the encoder adds it).
fn counter(enc: &mut DescriptorEncoder, name: &str, help: &str, v: u64) -> fmt::Result {
    enc.encode_descriptor(name, help, None, MetricType::Counter)?
        .encode_counter::<NoLabelSet, _, u64>(&v, None)
}

fn gauges(
    enc: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    rows: impl IntoIterator<Item = (Labels, i64)>,
) -> fmt::Result {
    let mut m = enc.encode_descriptor(name, help, None, MetricType::Gauge)?;
    for (labels, v) in rows {
        m.encode_family(&labels)?.encode_gauge(&v)?;
    }
    Ok(())
}

fn counters(
    enc: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    rows: impl IntoIterator<Item = (Labels, u64)>,
) -> fmt::Result {
    let mut m = enc.encode_descriptor(name, help, None, MetricType::Counter)?;
    for (labels, v) in rows {
        m.encode_family(&labels)?
            .encode_counter::<NoLabelSet, _, u64>(&v, None)?;
    }
    Ok(())
}

fn node(v: &NodeView, enc: &mut DescriptorEncoder) -> fmt::Result {
    enc.encode_descriptor(
        "elsa_node",
        "This node: its id, region, client address and version.",
        None,
        MetricType::Info,
    )?
    .encode_info(&vec![
        ("node", v.node.to_string()),
        ("region", v.region.clone()),
        ("addr", v.addr.clone()),
        ("version", env!("CARGO_PKG_VERSION").to_string()),
    ])?;
    gauge(
        enc,
        "elsa_uptime_seconds",
        "Seconds since the node started.",
        v.uptime_secs as i64,
    )?;
    gauge(
        enc,
        "elsa_connected_clients",
        "Client connections open now.",
        v.clients as i64,
    )?;
    counter(
        enc,
        "elsa_connections_received",
        "Client connections accepted since start.",
        v.connections_total,
    )?;
    counter(
        enc,
        "elsa_rejected_connections",
        "Connections refused by maxclients.",
        v.rejected_total,
    )?;
    counter(
        enc,
        "elsa_commands_processed",
        "Commands processed since start (INFO total_commands_processed).",
        v.commands_total,
    )?;
    gauge(
        enc,
        "elsa_memory_rss_bytes",
        "Resident set size of the process.",
        v.rss_bytes as i64,
    )?;
    gauge(
        enc,
        "elsa_memory_dataset_bytes",
        "Bytes of table slots and records (INFO used_memory_dataset).",
        v.total.memory as i64,
    )
}

fn keyspace(v: &NodeView, enc: &mut DescriptorEncoder) -> fmt::Result {
    gauges(
        enc,
        "elsa_keys",
        "Live keys per database (as DBSIZE).",
        v.keyspace
            .iter()
            .map(|(db, keys, _)| (vec![("db", db.to_string())], *keys as i64)),
    )?;
    gauges(
        enc,
        "elsa_expiring_keys",
        "Live keys with an expiry, per database.",
        v.keyspace
            .iter()
            .map(|(db, _, e)| (vec![("db", db.to_string())], *e as i64)),
    )?;
    counter(
        enc,
        "elsa_expired_keys",
        "Keys removed by the active expiry cycle.",
        v.total.expired,
    )
}

fn transactions(v: &NodeView, enc: &mut DescriptorEncoder) -> fmt::Result {
    let t = &v.total;
    counter(
        enc,
        "elsa_lone_ops",
        "Lone commands executed by this node's shards.",
        t.ops,
    )?;
    counter(
        enc,
        "elsa_commits",
        "Transactions committed by this node's shards (single- and multi-shard).",
        t.commits,
    )?;
    counter(
        enc,
        "elsa_conflicts",
        "Validations that failed here (transactions aborted by a conflict).",
        t.conflicts,
    )?;
    counter(
        enc,
        "elsa_busy_retries",
        "Requests that met a key another commit held: answered Busy (the sender retries) or parked until its release.",
        t.busy,
    )?;
    counter(
        enc,
        "elsa_refused_not_serving",
        "Requests refused because they reached a shard while the node was not serving.",
        t.refused_stale,
    )?;
    counter(
        enc,
        "elsa_installs_superseded",
        "Installs that found a newer version of their key already stored.",
        t.installs_superseded,
    )
}

/// How clients' transactions ended (BEGIN at each level, MULTI/EXEC), read
/// from the per-worker command statistics (`crate::cmdstats`) that INFO's
/// `# Transactions` shows too, so the two never disagree.
fn client_transactions(v: &NodeView, enc: &mut DescriptorEncoder) -> fmt::Result {
    use crate::cmdstats::{TxnKind, TxnOutcome};
    let totals = v.shared.cmdstats.totals();
    let outcomes = [
        (TxnOutcome::Commit, "committed"),
        (TxnOutcome::Conflict, "conflict"),
        (TxnOutcome::Abort, "aborted"),
    ];
    counters(
        enc,
        "elsa_transactions",
        "Client transactions ended, by kind (RC, RR, SI: BEGIN…COMMIT; MULTI: MULTI/EXEC) and outcome (committed; conflict: validation failed or a WATCHed key changed; aborted: ABORT, EXECABORT or another error).",
        TxnKind::ALL.into_iter().flat_map(|k| {
            let totals = &totals;
            outcomes.iter().map(move |(o, name)| {
                (
                    vec![
                        ("isolation", k.label().to_string()),
                        ("outcome", name.to_string()),
                    ],
                    totals.txns(k, *o),
                )
            })
        }),
    )
}

/// Prometheus buckets for command latency (µs): fixed bounds, the same for
/// every command so series aggregate; each is filled from the finer
/// per-command histogram (`crate::cmdstats`), counting the fine buckets
/// whose upper bound is at most the bound.
const COMMAND_BOUNDS_US: [u64; 16] = [
    10, 25, 50, 100, 250, 500, 1_000, 2_500, 5_000, 10_000, 25_000, 50_000, 100_000, 250_000,
    1_000_000, 10_000_000,
];

/// Per command (Redis's names, `client|list`): calls, time, refused and
/// failed calls, and latency — INFO's `# Commandstats`.
fn commands(v: &NodeView, enc: &mut DescriptorEncoder) -> fmt::Result {
    let stats = crate::cmdstats::snapshot(&v.shared.cmdstats);
    let cmd = |s: &crate::cmdstats::CommandStat| vec![("cmd", s.name.to_string())];
    counters(
        enc,
        "elsa_command_calls",
        "Calls per command (INFO commandstats calls).",
        stats.iter().map(|s| (cmd(s), s.calls)),
    )?;
    counters(
        enc,
        "elsa_command_rejected_calls",
        "Calls refused before running (arity, ACL, OOM, …), per command.",
        stats.iter().map(|s| (cmd(s), s.rejected_calls)),
    )?;
    counters(
        enc,
        "elsa_command_failed_calls",
        "Calls that ran and answered an error, per command.",
        stats.iter().map(|s| (cmd(s), s.failed_calls)),
    )?;
    let mut m = enc.encode_descriptor(
        "elsa_command_duration_seconds",
        "How long calls ran, per command.",
        None,
        MetricType::Histogram,
    )?;
    for s in &stats {
        let below = |bound: u64| {
            s.buckets
                .iter()
                .take_while(|(le, _)| *le <= bound)
                .last()
                .map_or(0, |(_, n)| *n)
        };
        // prometheus-client takes each bucket's own count (it sums them)
        // and the last bound as f64::MAX for +Inf. The histogram holds the
        // calls timed while latency-tracking was on; its count is theirs.
        let timed = s.buckets.last().map_or(0, |(_, n)| *n);
        let mut seen = 0;
        let mut buckets: Vec<(f64, u64)> = COMMAND_BOUNDS_US
            .iter()
            .map(|&b| {
                let upto = below(b);
                let own = upto - seen;
                seen = upto;
                (b as f64 / 1e6, own)
            })
            .collect();
        buckets.push((f64::MAX, timed - seen));
        m.encode_family(&cmd(s))?.encode_histogram::<NoLabelSet>(
            s.usec as f64 / 1e6,
            timed,
            &buckets,
            None,
        )?;
    }
    Ok(())
}

fn wal(v: &NodeView, enc: &mut DescriptorEncoder) -> fmt::Result {
    let shard = |i: usize| vec![("shard", i.to_string())];
    let logs: Vec<(usize, &elsa_shard::wal::WalStats)> = v
        .shards
        .iter()
        .enumerate()
        .filter_map(|(i, s)| Some((i, s.wal.as_ref()?)))
        .collect();
    gauge(
        enc,
        "elsa_wal_bytes",
        "Bytes of write-ahead log files on disk.",
        v.wal_bytes as i64,
    )?;
    counters(
        enc,
        "elsa_wal_records",
        "Log records written, per shard.",
        logs.iter().map(|(i, w)| (shard(*i), w.records)),
    )?;
    counters(
        enc,
        "elsa_wal_fsyncs",
        "Log fsyncs, per shard.",
        logs.iter().map(|(i, w)| (shard(*i), w.fsyncs)),
    )?;
    counters(
        enc,
        "elsa_wal_errors",
        "Failed log writes or syncs, per shard.",
        logs.iter().map(|(i, w)| (shard(*i), w.errors)),
    )?;
    gauges(
        enc,
        "elsa_wal_failing",
        "1 while a shard's log refuses writes after a failed write or sync.",
        logs.iter()
            .map(|(i, w)| (shard(*i), i64::from(w.failure.is_some()))),
    )?;
    let mut m = enc.encode_descriptor(
        "elsa_wal_fsync_seconds",
        "How long log fsyncs took, per shard.",
        None,
        MetricType::Histogram,
    )?;
    for (i, w) in &logs {
        let l = &w.fsync_latency;
        // prometheus-client wants the last bound as f64::MAX for +Inf.
        let buckets: Vec<(f64, u64)> = l
            .buckets()
            .into_iter()
            .map(|(b, n)| (if b.is_infinite() { f64::MAX } else { b }, n))
            .collect();
        m.encode_family(&shard(*i))?
            .encode_histogram::<NoLabelSet>(l.sum_secs, l.count(), &buckets, None)?;
    }
    Ok(())
}

fn membership(v: &NodeView, enc: &mut DescriptorEncoder) -> fmt::Result {
    let Some(c) = &v.cluster else { return Ok(()) };
    gauges(
        enc,
        "elsa_cluster_members",
        "Nodes per region in this node's membership view (alive).",
        c.regions.iter().map(|r| {
            let n = c
                .members
                .iter()
                .filter(|m| m.alive && &m.region == r)
                .count();
            (vec![("region", r.clone())], n as i64)
        }),
    )?;
    let member = |m: &super::view::MemberView| {
        vec![("node", m.node.to_string()), ("region", m.region.clone())]
    };
    gauges(
        enc,
        "elsa_cluster_node_up",
        "1 if the node is in this node's membership view, 0 if it left it (dead or cut off).",
        c.members.iter().map(|m| (member(m), i64::from(m.alive))),
    )?;
    gauges(
        enc,
        "elsa_cluster_node_catching_up",
        "1 while the node catches up (a replica of its slots but no primary).",
        c.members
            .iter()
            .filter(|m| m.alive)
            .map(|m| (member(m), i64::from(!m.ready))),
    )?;
    gauges(
        enc,
        "elsa_cluster_node_primary_slots",
        "Slots (of 65536 per region) the node is the primary of.",
        c.members
            .iter()
            .filter(|m| m.alive)
            .map(|m| (member(m), m.slots_primary as i64)),
    )?;
    gauge(
        enc,
        "elsa_serving",
        "1 when this node serves its slots (caught up), 0 while catching up.",
        i64::from(c.serving),
    )?;
    gauges(
        enc,
        "elsa_decommission_phase",
        "1 for this node's decommission phase (none, stopping, draining, done).",
        ["none", "stopping", "draining", "done"].map(|p| {
            (
                vec![("phase", p.to_string())],
                i64::from(c.decommission.0 == p),
            )
        }),
    )?;
    gauge(
        enc,
        "elsa_decommission_slots_remaining",
        "Slots this node held whose replicas are not yet restored elsewhere.",
        c.decommission.1 as i64,
    )?;
    gauge(
        enc,
        "elsa_fault_isolated",
        "1 while ELSA.FAULT cuts this node off from other regions.",
        i64::from(c.isolated),
    )
}

fn replication(v: &NodeView, enc: &mut DescriptorEncoder) -> fmt::Result {
    let Some(c) = &v.cluster else { return Ok(()) };
    counter(
        enc,
        "elsa_replication_epochs",
        "Merge epochs flushed to peers (all shards).",
        c.epochs,
    )?;
    gauge(
        enc,
        "elsa_replication_pending_deltas",
        "Keys changed this epoch, waiting in the gossip buffers.",
        c.pending_deltas as i64,
    )?;
    counter(
        enc,
        "elsa_gossip_lattices",
        "Lattices flushed from the gossip buffers.",
        v.total.gossiped,
    )?;
    counter(
        enc,
        "elsa_gossip_frames_dropped",
        "Gossip frames dropped (full queues, emulated loss, cut links).",
        c.gossip_frames_dropped,
    )?;
    counter(
        enc,
        "elsa_peer_frames_refused",
        "Peer frames refused (bad timestamps or counts, failed authentication).",
        c.frames_refused,
    )?;
    counter(
        enc,
        "elsa_membership_datagrams_dropped",
        "Membership datagrams dropped (do not open, or too old).",
        c.datagrams_dropped,
    )?;
    let (p50, p99, max) = c.lag_ms;
    gauges(
        enc,
        "elsa_replication_convergence_lag_ms",
        "Commit-to-merge delay of lattices received from peers since start: quantile 0.5, 0.99 and 1 (max).",
        [("0.5", p50), ("0.99", p99), ("1", max)]
            .into_iter()
            .map(|(q, ms)| (vec![("quantile", q.to_string())], ms as i64)),
    )?;
    gauges(
        enc,
        "elsa_replication_watermark_behind_ms",
        "How far behind now the watermark of this node's commits in each region is (-1: unknown).",
        c.watermark_behind_ms
            .iter()
            .map(|(r, ms)| (vec![("region", r.clone())], *ms)),
    )
}

fn peers(v: &NodeView, enc: &mut DescriptorEncoder) -> fmt::Result {
    let Some(c) = &v.cluster else { return Ok(()) };
    let peer = |p: &elsa_cluster::service::PeerInfo| {
        vec![("peer", p.node.to_string()), ("region", p.region.clone())]
    };
    let ps = &c.peers;
    gauges(
        enc,
        "elsa_peer_link_up",
        "1 if the link to the peer is connected.",
        ps.iter().map(|p| (peer(p), i64::from(p.connected))),
    )?;
    gauges(
        enc,
        "elsa_peer_lag_ms",
        "Commit-to-merge delay of the newest lattice received from the peer.",
        ps.iter().map(|p| (peer(p), p.stats.lag_ms as i64)),
    )?;
    gauges(
        enc,
        "elsa_peer_queued_frames",
        "Frames queued on the link to the peer (pending deltas and calls).",
        ps.iter().map(|p| (peer(p), p.queued as i64)),
    )?;
    counters(
        enc,
        "elsa_peer_dropped_frames",
        "Gossip frames to the peer dropped.",
        ps.iter().map(|p| (peer(p), p.dropped)),
    )?;
    counters(
        enc,
        "elsa_peer_received_lattices",
        "Lattices received from the peer by gossip.",
        ps.iter().map(|p| (peer(p), p.stats.received)),
    )?;
    counters(
        enc,
        "elsa_antientropy_rounds",
        "Anti-entropy rounds with the peer that got its digests back.",
        ps.iter().map(|p| (peer(p), p.stats.ae_rounds)),
    )?;
    counters(
        enc,
        "elsa_antientropy_shipped_lattices",
        "Lattices shipped to the peer by anti-entropy.",
        ps.iter().map(|p| (peer(p), p.stats.ae_shipped)),
    )?;
    gauges(
        enc,
        "elsa_antientropy_last_differing_buckets",
        "Buckets that differed in the last anti-entropy round with the peer.",
        ps.iter().map(|p| (peer(p), p.stats.last_ae_buckets as i64)),
    )?;
    counters(
        enc,
        "elsa_antientropy_waited_for_stream",
        "Anti-entropy rounds with the peer not started or not answered while a gossip stream to it was behind.",
        ps.iter().map(|p| (peer(p), p.stats.ae_waited_for_stream)),
    )?;
    gauges(
        enc,
        "elsa_gossip_stream_wait_ms",
        "How long the oldest frame of the gossip streams to the peer (another region) has waited for its acknowledgement.",
        ps.iter().map(|p| (peer(p), p.stream.0.as_millis() as i64)),
    )?;
    gauges(
        enc,
        "elsa_gossip_stream_stuck",
        "1 if a gossip stream to the peer has taken nothing for 20 s while behind (anti-entropy no longer waits for it).",
        ps.iter().map(|p| (peer(p), i64::from(p.stream.1))),
    )
}

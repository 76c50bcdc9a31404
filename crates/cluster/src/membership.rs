//! Membership through chitchat (Quickwit's scuttlebutt gossip with a
//! phi-accrual failure detector) — a maintained library, not a hand-rolled
//! detector. Each node publishes its region, client address and shard
//! count, and `ready` once it has caught up after starting (until then it
//! is a replica but no slot's primary); the live set becomes the ring. A restarted node joins with a new
//! generation; a node the detector declares dead leaves the ring, and the
//! keys it replicated move to the next shards clockwise.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use chitchat::transport::{Socket, Transport, UdpTransport};
use chitchat::{
    spawn_chitchat, ChitchatConfig, ChitchatId, ChitchatMessage, FailureDetectorConfig,
};
use elsa_lattice::NodeId;

use crate::ring::Member;
use crate::service::Cluster;

/// Runs membership for `cluster` until the process ends.
pub async fn run(cluster: Arc<Cluster>) {
    let s = cluster.settings().clone();
    let generation = elsa_shard::unix_ms();
    let config = ChitchatConfig {
        chitchat_id: ChitchatId::new(s.node.to_string(), generation, s.peer),
        cluster_id: "elsa".into(),
        gossip_interval: Duration::from_millis(200),
        listen_addr: s.peer,
        seed_nodes: s.seeds.clone(),
        failure_detector_config: FailureDetectorConfig {
            phi_threshold: 8.0,
            sampling_window_size: 1000,
            max_interval: Duration::from_secs(10),
            initial_interval: Duration::from_millis(500),
            dead_node_grace_period: Duration::from_secs(3600),
        },
        marked_for_deletion_grace_period: Duration::from_secs(3600),
        catchup_callback: None,
        extra_liveness_predicate: None,
    };
    let kvs = vec![
        ("region".to_string(), s.region.clone()),
        ("client".to_string(), s.client.to_string()),
        ("shards".to_string(), s.shards.to_string()),
        // How many times it has caught up (0 while catching up).
        ("ready".to_string(), "0".to_string()),
    ];
    let transport = FaultTransport {
        cluster: cluster.clone(),
    };
    let handle = match spawn_chitchat(config, kvs, &transport).await {
        Ok(h) => h,
        Err(e) => {
            tracing::error!("membership cannot start on {}: {e}", s.peer);
            return;
        }
    };
    let mut watcher = handle.chitchat().lock().await.live_nodes_watcher();
    // Readiness (catching up after a start) is checked on a tick too: it
    // changes with anti-entropy rounds, not only with membership.
    let mut tick = tokio::time::interval(Duration::from_millis(100));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut published: Option<u64> = None;
    let mut seen = Seen::default();
    loop {
        let ready = cluster.catch_up_done();
        // Others route this node's slots to it once it is ready; it does
        // so itself only once they have been handed back.
        let serving = cluster.hand_back_done();
        let epoch = cluster.published_ready();
        if published != Some(epoch) {
            handle
                .with_chitchat(|c| c.self_node_state().set("ready", epoch.to_string()))
                .await;
            published = Some(epoch);
        }
        let live = watcher.borrow_and_update().clone();
        let mut newest: HashMap<NodeId, (u64, Member, u64)> = HashMap::new();
        for (id, state) in &live {
            let Ok(node) = id.node_id.parse::<NodeId>() else {
                continue;
            };
            if node == s.node {
                continue;
            }
            let (Some(region), Some(client), Some(shards)) = (
                state.get("region"),
                state.get("client"),
                state.get("shards"),
            ) else {
                continue; // not all keys gossiped yet
            };
            let (Ok(client), Ok(shards)) = (client.parse(), shards.parse()) else {
                continue;
            };
            let ready: u64 = state.get("ready").and_then(|r| r.parse().ok()).unwrap_or(0);
            let m = Member {
                node,
                region: region.to_string(),
                shards,
                peer: id.gossip_advertise_addr,
                client,
                ready: ready > 0,
            };
            match newest.get(&node) {
                Some((g, _, _)) if *g >= id.generation_id => {}
                _ => {
                    newest.insert(node, (id.generation_id, m, ready));
                }
            }
        }
        if seen.update(&mut newest, ready, &s.region) {
            cluster.rejoin("every other node of the region was unreachable and is back");
        }
        cluster.set_distrusted(seen.distrusted());
        let mut members: Vec<Member> = newest.into_values().map(|(_, m, _)| m).collect();
        members.push(Member {
            node: s.node,
            region: s.region.clone(),
            shards: s.shards,
            peer: s.peer,
            client: s.client,
            ready: serving,
        });
        members.sort_by_key(|m| m.node);
        if members != cluster.ring().members() {
            cluster.set_members(members).await;
        }
        tokio::select! {
            changed = watcher.changed() => {
                if changed.is_err() {
                    return;
                }
            }
            _ = tick.tick() => {}
        }
    }
}

/// Peers of this node's region it saw leave the live set (declared dead),
/// with the generation and `ready` count they had then.
///
/// One that comes back alive in the same generation with the same count
/// has not caught up since — a paused process resumed, a node cut off
/// and reconnected — so it may hold stale data: it is no slot's primary
/// here until its count grows (it caught up again), and its replication is
/// refused (see `replicate`). A new generation is a restart, which catches
/// up anyway. Only a ready node keeps this record: one catching up has no
/// view to trust (after a pause of its own, everyone else looks dead to
/// it for a moment). Other regions never serve this region's keys, so
/// their comings and goings (a WAN partition healing) change nothing.
///
/// A node that saw *every* other node of its region go is the one more
/// likely cut off: when they come back it catches up again itself (on the
/// majority side each node saw only it go).
#[derive(Default)]
struct Seen {
    live: HashMap<NodeId, (u64, u64)>,
    gone: HashMap<NodeId, (u64, u64)>,
    alone: bool,
}

impl Seen {
    /// Applies the record to a new view (marking returning nodes not
    /// ready); true when this node must catch up again itself.
    fn update(
        &mut self,
        members: &mut HashMap<NodeId, (u64, Member, u64)>,
        ready: bool,
        own_region: &str,
    ) -> bool {
        if !ready {
            *self = Seen::default();
            return false;
        }
        let mut live = HashMap::with_capacity(members.len());
        let mut returned = false;
        for (node, (generation, m, count)) in members.iter_mut() {
            if m.region != own_region {
                continue;
            }
            live.insert(*node, (*generation, *count));
            if let Some(&(g, c)) = self.gone.get(node) {
                if g == *generation && *count <= c {
                    m.ready = false;
                    returned = true;
                } else {
                    self.gone.remove(node);
                }
            }
        }
        for (node, was) in &self.live {
            if !live.contains_key(node) {
                self.gone.insert(*node, *was);
            }
        }
        if live.is_empty() && !self.live.is_empty() {
            self.alone = true;
        }
        self.live = live;
        if returned && self.alone {
            *self = Seen::default();
            return true;
        }
        false
    }

    fn distrusted(&self) -> std::collections::HashSet<NodeId> {
        self.gone.keys().copied().collect()
    }
}

/// UDP, except that while fault injection cuts this node off, membership
/// messages to and from other regions are dropped too — so the other side
/// sees a real partition, not just silent replication.
struct FaultTransport {
    cluster: Arc<Cluster>,
}

#[async_trait]
impl Transport for FaultTransport {
    async fn open(&self, listen_addr: SocketAddr) -> anyhow::Result<Box<dyn Socket>> {
        let inner = UdpTransport.open(listen_addr).await?;
        Ok(Box::new(FaultSocket {
            inner,
            cluster: self.cluster.clone(),
        }))
    }
}

struct FaultSocket {
    inner: Box<dyn Socket>,
    cluster: Arc<Cluster>,
}

impl FaultSocket {
    fn blocked(&self, addr: SocketAddr) -> bool {
        self.cluster.cut_addr(addr)
    }
}

#[async_trait]
impl Socket for FaultSocket {
    async fn send(&mut self, to: SocketAddr, msg: ChitchatMessage) -> anyhow::Result<()> {
        if self.blocked(to) {
            return Ok(());
        }
        self.inner.send(to, msg).await
    }

    async fn recv(&mut self) -> anyhow::Result<(SocketAddr, ChitchatMessage)> {
        loop {
            let (from, msg) = self.inner.recv().await?;
            if !self.blocked(from) {
                return Ok((from, msg));
            }
        }
    }
}

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
    let mut published_ready = false;
    loop {
        let ready = cluster.catch_up_done();
        // Others route this node's slots to it once it is ready; it does
        // so itself only once they have been handed back.
        let serving = cluster.hand_back_done();
        if ready && !published_ready {
            handle
                .with_chitchat(|c| c.self_node_state().set("ready", "1"))
                .await;
            published_ready = true;
        }
        let live = watcher.borrow_and_update().clone();
        let mut newest: HashMap<NodeId, (u64, Member)> = HashMap::new();
        newest.insert(
            s.node,
            (
                generation,
                Member {
                    node: s.node,
                    region: s.region.clone(),
                    shards: s.shards,
                    peer: s.peer,
                    client: s.client,
                    ready: serving,
                },
            ),
        );
        for (id, state) in &live {
            let Ok(node) = id.node_id.parse::<NodeId>() else {
                continue;
            };
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
            let m = Member {
                node,
                region: region.to_string(),
                shards,
                peer: id.gossip_advertise_addr,
                client,
                ready: state.get("ready") == Some("1"),
            };
            match newest.get(&node) {
                Some((g, _)) if *g >= id.generation_id => {}
                _ => {
                    newest.insert(node, (id.generation_id, m));
                }
            }
        }
        let mut members: Vec<Member> = newest.into_values().map(|(_, m)| m).collect();
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

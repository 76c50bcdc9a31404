//! The node's side of its region's ownership group (`crate::owners`,
//! with `ownership = leases`): starting it, carrying its Raft calls over
//! the peer links (a [`Call`] of kind [`OWNERS`]), founding the group when
//! the region first forms, telling its leader which nodes are alive, and
//! the gate [`Cluster::leased`] that `route` puts before serving a slot.

use super::*;
use crate::owners::net::Carrier;
use crate::owners::Region;
use crate::Ownership;
use std::collections::BTreeMap;

/// [`Call::kind`] of a call between ownership groups (`raft` carries it;
/// the answer's `raft` its reply).
pub(crate) const OWNERS: u32 = 11;

/// Carries ownership calls over the peer links.
struct Links(std::sync::Weak<Cluster>);

#[async_trait::async_trait]
impl Carrier for Links {
    async fn call(&self, to: NodeId, request: Vec<u8>) -> Result<Vec<u8>, String> {
        let cluster = self.0.upgrade().ok_or("shutting down")?;
        let (tx, rx) = oneshot::channel::<Answer>();
        let call = Call {
            kind: OWNERS,
            raft: request.into(),
            ..Default::default()
        };
        cluster.request(
            ShardId { node: to, index: 0 },
            call,
            Some(Box::new(move |a| {
                let _ = tx.send(a);
            })),
        );
        match rx.await {
            Ok(a) if !a.raft.is_empty() => Ok(a.raft.to_vec()),
            Ok(_) => Err(format!("node {to} has no ownership group")),
            Err(_) => Err(format!("node {to} is unreachable")),
        }
    }
}

impl Cluster {
    /// Starts the region's ownership group here (with `ownership =
    /// leases`), on the service's runtime.
    pub(super) async fn start_ownership(self: &Arc<Self>) {
        if self.settings.ownership != Ownership::Leases {
            return;
        }
        let s = &self.settings;
        let hlc = self.hlc.clone();
        let me = Arc::downgrade(self);
        let member = move || {
            let c = me.upgrade();
            let c = c.as_deref();
            Member {
                node: c.map_or(0, |c| c.settings.node),
                region: c.map_or(String::new(), |c| c.settings.region.clone()),
                shards: c.map_or(0, |c| c.settings.shards),
                peer: c.map_or(SocketAddr::from(([0, 0, 0, 0], 0)), |c| c.settings.peer),
                client: c.map_or(SocketAddr::from(([0, 0, 0, 0], 0)), |c| c.settings.client),
                ready: c.is_some_and(|c| c.is_serving()),
                leaving: c.is_some_and(|c| c.leaving()),
            }
        };
        let region = Region::start(
            s.node,
            s.state_dir.as_ref().map(|d| d.join("ownership")).as_deref(),
            s.vnodes,
            s.replication_factor,
            s.max_clock_drift,
            Arc::new(move || hlc.physical_ms()),
            Arc::new(Links(Arc::downgrade(self))),
            Box::new(member),
            Arc::new(|| {}),
        )
        .await;
        match region {
            Ok(r) => {
                let _ = self.region.set(r);
            }
            Err(e) => tracing::error!("the region's ownership group cannot start: {e}"),
        }
    }

    /// The region's ownership group, with `ownership = leases`.
    pub fn region(&self) -> Option<&Arc<Region>> {
        self.region.get()
    }

    /// Whether this node may serve `slot` as its primary now: always with
    /// `ownership = gossip`; with leases, only while it holds the slot's
    /// lease (and never before the group started).
    pub(super) fn leased(&self, slot: usize) -> bool {
        match self.settings.ownership {
            Ownership::Gossip => true,
            Ownership::Leases => self.region.get().is_some_and(|r| r.may_serve(slot)),
        }
    }

    /// Answers an ownership call from a peer.
    pub(super) fn answer_owners(
        self: &Arc<Self>,
        id: u64,
        call: Call,
        tx: &mpsc::UnboundedSender<Out>,
    ) {
        let Some(region) = self.region.get().cloned() else {
            return; // no group here: the caller's call fails
        };
        let tx = tx.clone();
        let hlc = self.hlc.clone();
        self.handle.spawn(async move {
            let reply = region.answer(&call.raft).await;
            let answer = Answer {
                raft: reply.into(),
                ..Answer::default()
            };
            let _ = tx.send(Out {
                frame: Frame::new(Body::Response(wire::Response {
                    id,
                    hlc: hlc.peek(),
                    answer: answer.encode_to_vec().into(),
                    not_serving: false,
                })),
                at: Instant::now(),
            });
        });
    }

    /// A membership round's part: tells the group which nodes of the
    /// region are alive, and founds it when this node is the one to.
    /// `live` holds this region's live members, this node included.
    pub(crate) async fn ownership_round(self: &Arc<Self>, live: &[Member], peers_formed: bool) {
        let Some(region) = self.region.get() else {
            return;
        };
        let alive: BTreeMap<NodeId, SocketAddr> = live.iter().map(|m| (m.node, m.peer)).collect();
        region.set_alive(alive.clone());
        if peers_formed || region.is_formed().await || !self.may_found_region() {
            return;
        }
        match region.found(&alive).await {
            Ok(()) => tracing::info!(
                "founded the region's ownership group with nodes {:?}",
                alive.keys().collect::<Vec<_>>()
            ),
            Err(e) => tracing::warn!("founding the region's ownership group: {e}"),
        }
    }
}

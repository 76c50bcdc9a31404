//! Membership through chitchat (Quickwit's scuttlebutt gossip with a
//! phi-accrual failure detector) — a maintained library, not a hand-rolled
//! detector. Each node publishes its region, client address and shard
//! count, and `ready` once it has caught up after starting (until then it
//! is a replica but no slot's primary); the live set becomes the ring. A restarted node joins with a new
//! generation; a node the detector declares dead leaves the ring, and the
//! keys it replicated move to the next shards clockwise.
//!
//! With a cluster secret every datagram is sealed ([`Sealer`]:
//! ChaCha20-Poly1305 under a key derived from the secret, a random nonce
//! per datagram, the send time inside), and chitchat's cluster id is
//! derived from the secret too. A datagram that does not open is dropped
//! and counted; one older than [`REPLAY_WINDOW`] is dropped as a replay.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use chitchat::transport::{Socket, Transport, UdpTransport};
use chitchat::{
    spawn_chitchat, ChitchatConfig, ChitchatId, ChitchatMessage, Deserializable,
    FailureDetectorConfig, Serializable,
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
        cluster_id: match &s.auth {
            Some(a) => a.cluster_id().to_string(),
            None => "elsa".into(),
        },
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
    let mut published_leaving = false;
    let mut published_formed = false;
    let mut published_excluding: Option<String> = None;
    let own_id = s.node.to_string();
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
        if cluster.publishes_leaving() && !published_leaving {
            handle
                .with_chitchat(|c| c.self_node_state().set("leaving", "1"))
                .await;
            published_leaving = true;
        }
        let live = watcher.borrow_and_update().clone();
        // Whether a peer of this region is in a formed ownership group.
        let mut peers_formed = false;
        let mut newest: HashMap<NodeId, (u64, Member, u64)> = HashMap::new();
        // node → whether it publishes that it excludes this one (leaving).
        let mut excludes: HashMap<NodeId, bool> = HashMap::new();
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
            let (Ok(client), Ok(shards)) = (client.parse::<SocketAddr>(), shards.parse::<u16>())
            else {
                continue;
            };
            if shards == 0 || shards > MAX_SHARDS {
                continue; // absurd: the ring would be sized by it
            }
            let ready: u64 = state.get("ready").and_then(|r| r.parse().ok()).unwrap_or(0);
            peers_formed |= region == s.region && state.get("owners") == Some("1");
            excludes.insert(
                node,
                state
                    .get("excluding")
                    .is_some_and(|x| x.split(',').any(|n| n == own_id)),
            );
            let m = Member {
                node,
                region: region.to_string(),
                shards,
                peer: id.gossip_advertise_addr,
                client,
                ready: ready > 0,
                leaving: state.get("leaving") == Some("1"),
            };
            match newest.get(&node) {
                Some((g, _, _)) if *g >= id.generation_id => {}
                _ => {
                    newest.insert(node, (id.generation_id, m, ready));
                }
            }
        }
        cluster.note_epochs(
            newest
                .iter()
                .filter(|(_, (_, m, _))| m.region == s.region)
                .map(|(n, (generation, _, count))| (*n, (*generation, *count)))
                .collect(),
        );
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
            leaving: cluster.leaving(),
        });
        members.sort_by_key(|m| m.node);
        if let Some(region) = cluster.region() {
            let own: Vec<Member> = members
                .iter()
                .filter(|m| m.region == s.region)
                .cloned()
                .collect();
            cluster.ownership_round(&own, peers_formed).await;
            if !published_formed && region.is_formed().await {
                handle
                    .with_chitchat(|c| c.self_node_state().set("owners", "1"))
                    .await;
                published_formed = true;
            }
        }
        if cluster.peers_forgotten() {
            members.retain(|m| m.node == s.node || m.region != s.region);
        }
        if members != cluster.ring().members() {
            cluster.set_members(members).await;
        }
        // Which leaving nodes this node's installed view excludes: a
        // leaving node drains once every live node says it excludes it.
        let excluding = cluster
            .ring()
            .members()
            .iter()
            .filter(|m| m.leaving && m.node != s.node)
            .map(|m| m.node.to_string())
            .collect::<Vec<_>>()
            .join(",");
        if published_excluding.as_deref() != Some(excluding.as_str()) {
            let value = excluding.clone();
            handle
                .with_chitchat(|c| c.self_node_state().set("excluding", value.clone()))
                .await;
            published_excluding = Some(excluding);
        }
        cluster.decommission_tick(excludes.values().all(|&x| x));
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

/// Most shards a member may announce (a node runs at most 256 workers).
const MAX_SHARDS: u16 = 256;

/// How old a sealed datagram may be (by the sender's clock) before it is
/// dropped as a replay.
pub const REPLAY_WINDOW: Duration = Duration::from_secs(60);

#[async_trait]
impl Transport for FaultTransport {
    async fn open(&self, listen_addr: SocketAddr) -> anyhow::Result<Box<dyn Socket>> {
        let inner: Box<dyn Socket> = match &self.cluster.settings().auth {
            Some(a) => Box::new(
                SealedSocket::open(listen_addr, Sealer::new(a.membership_key()))
                    .await?
                    .count_into(self.cluster.datagram_counter()),
            ),
            None => UdpTransport.open(listen_addr).await?,
        };
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

/// Seals and opens membership datagrams:
/// `[version 1][nonce 12][ChaCha20-Poly1305(send ms ‖ chitchat bytes) + tag 16]`.
pub struct Sealer {
    key: ring::aead::LessSafeKey,
}

const SEAL_VERSION: u8 = 1;
const NONCE_LEN: usize = 12;
const TAG_LEN: usize = 16;
const AAD: &[u8] = b"elsa membership v1";
/// Largest UDP payload.
const MAX_DATAGRAM: usize = 65_507;

/// Why a datagram was dropped.
#[derive(Debug, PartialEq, Eq)]
pub enum Unsealed {
    /// Too short, another version, or it does not authenticate (another
    /// key, or changed on the way).
    Forged,
    /// Authentic but sent longer ago than [`REPLAY_WINDOW`] (or as far in
    /// the future).
    Stale,
}

impl Sealer {
    /// A sealer for a 32-byte key (`PeerAuth::membership_key`).
    pub fn new(key: &[u8; 32]) -> Sealer {
        let unbound = ring::aead::UnboundKey::new(&ring::aead::CHACHA20_POLY1305, key)
            .expect("a 32-byte key is a ChaCha20-Poly1305 key");
        Sealer {
            key: ring::aead::LessSafeKey::new(unbound),
        }
    }

    /// Seals `payload` sent at `now_ms`.
    pub fn seal(&self, payload: &[u8], now_ms: u64) -> Vec<u8> {
        use rand::RngCore;
        let mut nonce = [0u8; NONCE_LEN];
        rand::rngs::OsRng.fill_bytes(&mut nonce);
        let mut out = Vec::with_capacity(1 + NONCE_LEN + 8 + payload.len() + TAG_LEN);
        out.push(SEAL_VERSION);
        out.extend_from_slice(&nonce);
        let mut body = Vec::with_capacity(8 + payload.len() + TAG_LEN);
        body.extend_from_slice(&now_ms.to_be_bytes());
        body.extend_from_slice(payload);
        // Cannot fail for lengths far below ChaCha20's limit.
        let _ = self.key.seal_in_place_append_tag(
            ring::aead::Nonce::assume_unique_for_key(nonce),
            ring::aead::Aad::from(AAD),
            &mut body,
        );
        out.extend_from_slice(&body);
        out
    }

    /// Opens a datagram received at `now_ms`: the chitchat bytes inside.
    pub fn open<'a>(&self, datagram: &'a mut [u8], now_ms: u64) -> Result<&'a [u8], Unsealed> {
        if datagram.len() < 1 + NONCE_LEN + 8 + TAG_LEN || datagram[0] != SEAL_VERSION {
            return Err(Unsealed::Forged);
        }
        let (head, body) = datagram.split_at_mut(1 + NONCE_LEN);
        let mut nonce = [0u8; NONCE_LEN];
        nonce.copy_from_slice(&head[1..]);
        let plain = self
            .key
            .open_in_place(
                ring::aead::Nonce::assume_unique_for_key(nonce),
                ring::aead::Aad::from(AAD),
                body,
            )
            .map_err(|_| Unsealed::Forged)?;
        let (sent, payload) = plain.split_at(8);
        let sent = u64::from_be_bytes(sent.try_into().map_err(|_| Unsealed::Forged)?);
        if sent.abs_diff(now_ms) > REPLAY_WINDOW.as_millis() as u64 {
            return Err(Unsealed::Stale);
        }
        Ok(payload)
    }
}

/// Chitchat's UDP socket, with every datagram sealed.
pub struct SealedSocket {
    socket: tokio::net::UdpSocket,
    sealer: Sealer,
    buf: Vec<u8>,
    dropped: Arc<std::sync::atomic::AtomicU64>,
    last_log_ms: u64,
}

impl SealedSocket {
    /// Binds `addr`.
    pub async fn open(addr: SocketAddr, sealer: Sealer) -> anyhow::Result<SealedSocket> {
        Ok(SealedSocket {
            socket: tokio::net::UdpSocket::bind(addr).await?,
            sealer,
            buf: vec![0u8; MAX_DATAGRAM],
            dropped: Arc::default(),
            last_log_ms: 0,
        })
    }

    /// Counts its drops in `counter` (the node's, for INFO).
    pub fn count_into(mut self, counter: Arc<std::sync::atomic::AtomicU64>) -> SealedSocket {
        self.dropped = counter;
        self
    }

    /// Datagrams dropped so far (forged, or replayed late).
    pub fn dropped(&self) -> u64 {
        self.dropped.load(std::sync::atomic::Ordering::Relaxed)
    }
}

#[async_trait]
impl Socket for SealedSocket {
    async fn send(&mut self, to: SocketAddr, msg: ChitchatMessage) -> anyhow::Result<()> {
        let sealed = self
            .sealer
            .seal(&msg.serialize_to_vec(), elsa_shard::unix_ms());
        if sealed.len() > MAX_DATAGRAM {
            tracing::warn!(
                "membership: a {}-byte message does not fit a datagram",
                sealed.len()
            );
            return Ok(());
        }
        if let Err(e) = self.socket.send_to(&sealed, to).await {
            tracing::debug!("membership: send to {to}: {e}");
        }
        Ok(())
    }

    async fn recv(&mut self) -> anyhow::Result<(SocketAddr, ChitchatMessage)> {
        loop {
            let (len, from) = match self.socket.recv_from(&mut self.buf).await {
                Ok(x) => x,
                Err(e) => {
                    tracing::debug!("membership: recv: {e}");
                    tokio::time::sleep(Duration::from_millis(10)).await;
                    continue;
                }
            };
            let now = elsa_shard::unix_ms();
            let why = match self.sealer.open(&mut self.buf[..len], now) {
                Ok(mut payload) => match ChitchatMessage::deserialize(&mut payload) {
                    Ok(msg) => return Ok((from, msg)),
                    Err(_) => "does not decode",
                },
                Err(Unsealed::Forged) => "does not authenticate (another secret, or forged)",
                Err(Unsealed::Stale) => "is too old (a replay?)",
            };
            let n = self
                .dropped
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed)
                + 1;
            if now >= self.last_log_ms + 10_000 {
                self.last_log_ms = now;
                tracing::warn!(
                    "membership: dropped a datagram from {from}: it {why} ({n} dropped so far)"
                );
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sealed_datagram_opens_only_with_its_key_and_in_time() {
        let a = Sealer::new(&[7u8; 32]);
        let b = Sealer::new(&[8u8; 32]);
        let mut d = a.seal(b"hello", 1_000_000);
        assert_eq!(a.open(&mut d.clone(), 1_000_500), Ok(&b"hello"[..]));
        assert_eq!(b.open(&mut d.clone(), 1_000_500), Err(Unsealed::Forged));
        assert_eq!(
            a.open(&mut d.clone(), 1_000_000 + 61_000),
            Err(Unsealed::Stale)
        );
        let last = d.len() - 1;
        d[last] ^= 1;
        assert_eq!(a.open(&mut d, 1_000_500), Err(Unsealed::Forged));
        assert_eq!(a.open(&mut [1u8, 2, 3], 0), Err(Unsealed::Forged));
    }

    #[tokio::test]
    async fn the_socket_drops_datagrams_sealed_with_another_key() {
        let mut rx = SealedSocket::open("127.0.0.1:0".parse().unwrap(), Sealer::new(&[1u8; 32]))
            .await
            .unwrap();
        let to = rx.socket.local_addr().unwrap();
        let mut wrong = SealedSocket::open("127.0.0.1:0".parse().unwrap(), Sealer::new(&[2u8; 32]))
            .await
            .unwrap();
        let mut right = SealedSocket::open("127.0.0.1:0".parse().unwrap(), Sealer::new(&[1u8; 32]))
            .await
            .unwrap();
        let plain = tokio::net::UdpSocket::bind("127.0.0.1:0").await.unwrap();
        plain
            .send_to(&ChitchatMessage::BadCluster.serialize_to_vec(), to)
            .await
            .unwrap();
        wrong.send(to, ChitchatMessage::BadCluster).await.unwrap();
        let got = tokio::time::timeout(Duration::from_millis(300), rx.recv()).await;
        assert!(got.is_err(), "a forged or unsealed datagram was delivered");
        assert_eq!(rx.dropped(), 2);
        right.send(to, ChitchatMessage::BadCluster).await.unwrap();
        let (_, msg) = tokio::time::timeout(Duration::from_secs(2), rx.recv())
            .await
            .unwrap()
            .unwrap();
        assert!(matches!(msg, ChitchatMessage::BadCluster));
    }
}

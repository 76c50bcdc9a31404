//! The replication service of one node: it owns the ring view, the
//! outgoing links to peers and the peer listener, and runs on its own
//! thread (a current-thread runtime), so shard workers only ever hand it
//! work through channels and never wait on the network.
//!
//! - Forwarding: [`Placement::send_remote`] turns a shard message into a
//!   request on the link to the shard's node.
//! - Gossip: each shard's epoch flush goes, one frame per peer node, to
//!   every node that replicates any of its keys, in every region. Queues
//!   are bounded: a slow or dead peer loses frames (anti-entropy repairs
//!   them), never blocks a commit.
//! - Anti-entropy: every period, towards each peer, a two-level digest
//!   comparison (see [`crate::antientropy`]) and a swap of the lattices of
//!   the buckets that differ.

use std::collections::{HashMap, HashSet};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use arc_swap::ArcSwap;
use bytes::BytesMut;
use elsa_lattice::{Hlc, NodeId};
use elsa_shard::wal::codec::LogEntry;
use elsa_shard::{HashedKey, KeyHasher, ShardMsg};
use elsa_txn::router::{Placement, ShardId};
use prost::Message;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, oneshot};

use crate::antientropy as ae;
use crate::config::{Replication, Routing, Settings};
use crate::remote::{self, Answer, Call, Completer};
use crate::ring::{slot_of, Member, Ring};
use crate::watermark::Stream;
use crate::wire::{self, Body, Frame, Lattice};

/// Frames a link holds for a peer before it starts dropping gossip.
const LINK_QUEUE: usize = 4096;
/// How long a forwarded request may wait for its answer.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);
/// Most lattices in one anti-entropy batch; the rest follow next round.
const AE_BATCH: usize = 20_000;

/// One frame on its way out, stamped for the emulated WAN delay.
struct Out {
    frame: Frame,
    at: Instant,
}

/// The outgoing side of the connection to one peer node.
struct Link {
    node: NodeId,
    addr: SocketAddr,
    region: String,
    /// Unbounded so requests keep their order and are never dropped (a
    /// client waits for each; their number is bounded by the clients).
    /// Gossip and anti-entropy frames are dropped instead once `queued`
    /// reaches [`LINK_QUEUE`].
    tx: mpsc::UnboundedSender<Out>,
    queued: AtomicUsize,
    /// Answers awaited, with when they were asked.
    pending: Mutex<HashMap<u64, (Instant, Completer)>>,
    connected: AtomicBool,
    dropped: AtomicU64,
    closed: AtomicBool,
}

/// What this node knows about one peer, for INFO replication.
#[derive(Clone, Debug, Default)]
pub struct PeerStats {
    /// Commit-to-merge delay of the newest lattice received from it, ms.
    pub lag_ms: u64,
    /// Lattices received from it by gossip.
    pub received: u64,
    /// When the last anti-entropy round with it ended in sync (HLC).
    pub synced_ts: u64,
    /// Buckets that differed in the last round.
    pub last_ae_buckets: usize,
    /// Lattices shipped to it by anti-entropy.
    pub ae_shipped: u64,
    /// Wall time of the last anti-entropy round (ms since the epoch).
    pub last_ae_unix_ms: u64,
}

/// A peer as INFO shows it.
#[derive(Clone, Debug)]
pub struct PeerInfo {
    /// Its id.
    pub node: NodeId,
    /// Its region.
    pub region: String,
    /// Peer address.
    pub addr: SocketAddr,
    /// Client address.
    pub client: SocketAddr,
    /// Link up.
    pub connected: bool,
    /// Caught up since it started (may be primary).
    pub ready: bool,
    /// Frames queued on the link.
    pub queued: usize,
    /// Gossip frames dropped for a full queue or emulated loss.
    pub dropped: u64,
    /// Counters.
    pub stats: PeerStats,
}

/// An anti-entropy round this node started.
struct Round {
    peer: NodeId,
    /// HLC when the round started.
    started: u64,
    /// Only lattices committed before this are shipped (see [`Cluster::cutoff`]).
    cutoff: u64,
    digest: Arc<Vec<u64>>,
    /// Lattices this node shipped in step 3, once it has.
    shipped: Option<usize>,
    /// The differing buckets here also held lattices younger than the
    /// cutoff (not shipped).
    younger: bool,
    /// When it started (rounds not answered in [`ROUND_TIMEOUT`] are dropped).
    at: Instant,
}

/// How long an anti-entropy round may wait for the peer's answers.
const ROUND_TIMEOUT: Duration = Duration::from_secs(10);

/// The node's replication service.
pub struct Cluster {
    settings: Settings,
    ring: ArcSwap<Ring>,
    inboxes: Vec<mpsc::UnboundedSender<ShardMsg>>,
    hlc: Arc<Hlc>,
    hasher: KeyHasher,
    links: Mutex<HashMap<NodeId, Arc<Link>>>,
    shared: Mutex<HashMap<NodeId, Arc<Vec<u16>>>>,
    handle: tokio::runtime::Handle,
    next_id: AtomicU64,
    isolated: AtomicBool,
    /// The HLC when the service started (see [`Stream::after_boot`]).
    boot_ts: u64,
    /// Every peer address ever in the ring, with its region: a node that
    /// left the ring must stay cut off while isolated (fault injection).
    seen: Mutex<HashMap<SocketAddr, String>>,
    /// (local shard, peer) → what that peer has confirmed of the shard's
    /// gossip stream.
    acked: Mutex<HashMap<(u16, NodeId), Stream>>,
    peers: Mutex<HashMap<NodeId, PeerStats>>,
    rounds: Mutex<HashMap<u64, Round>>,
    waits: Mutex<HashMap<u64, oneshot::Sender<u64>>>,
    epoch: AtomicU64,
    lag: Mutex<hdrhistogram::Histogram<u64>>,
    gossip_frames_dropped: AtomicUsize,
    /// Whether this node has caught up since it started (see
    /// [`Cluster::catch_up_done`]); until then it is no slot's primary.
    ready: AtomicBool,
    booted: Instant,
    /// peer → `flushed_ts` of its first gossip frame since this node
    /// started: every commit of that peer missing from its gossip stream
    /// to this incarnation is older than it.
    first_gossip: Mutex<HashMap<NodeId, u64>>,
    /// When this node caught up (it then asks for its slots back).
    ready_at: std::sync::OnceLock<Instant>,
    /// Whether this node acts as the primary of its slots: caught up, and
    /// every peer that could have been acting for it has handed them back
    /// (see [`Cluster::hand_back_done`]).
    serving: AtomicBool,
    /// Peers that have handed this incarnation its slots back.
    handed_back: Mutex<HashSet<NodeId>>,
    /// Peers this node is handing slots back to right now.
    handing_back: Mutex<HashSet<NodeId>>,
    /// Per local shard: merge epochs shipped so far.
    flushes: Vec<AtomicU64>,
}

/// How long a node that caught up waits for a peer to hand its slots back
/// before it serves them anyway (a peer alive to membership but not
/// answering: better a short window of two primaries than none).
const HAND_BACK_TIMEOUT: Duration = Duration::from_secs(10);

/// The route of a key no known node serves yet: a node that has just
/// started and knows no ready replica but itself. Requests to it are
/// answered Busy at once, so callers retry until membership tells them
/// where the key lives (never from this node's data before it caught up).
const NO_PRIMARY: ShardId = ShardId {
    node: NodeId::MAX,
    index: 0,
};

/// What a shard answers when it must not serve a call (see
/// [`Cluster::serves`]): Busy, so the caller routes again; for a batch,
/// no op run (the caller resubmits the rest).
fn busy_answer(kind: u32) -> Answer {
    Answer {
        refusal: if kind == 1 { 0 } else { 1 },
        ..Answer::default()
    }
}

/// How long a starting node looks for a ready peer in its region before
/// concluding it is the first (a fresh cluster: nobody has data to miss).
const JOIN_GRACE: Duration = Duration::from_secs(2);

impl Cluster {
    /// Starts the service on its own thread: binds the peer listener
    /// (errors here are the caller's to report), joins membership, and
    /// returns the handle shard workers and coordinators use.
    pub fn start(
        settings: Settings,
        inboxes: Vec<mpsc::UnboundedSender<ShardMsg>>,
        hlc: Arc<Hlc>,
        hasher: KeyHasher,
    ) -> std::io::Result<Arc<Cluster>> {
        let std_listener = std::net::TcpListener::bind(settings.peer)?;
        std_listener.set_nonblocking(true)?;
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        let me = Member {
            node: settings.node,
            region: settings.region.clone(),
            shards: settings.shards,
            peer: settings.peer,
            client: settings.client,
            ready: false,
        };
        let ring = Ring::new(
            vec![me],
            settings.node,
            settings.vnodes,
            settings.replication_factor,
        );
        let boot_ts = hlc.now();
        let shards = inboxes.len();
        let cluster = Arc::new(Cluster {
            settings,
            ring: ArcSwap::from_pointee(ring),
            inboxes,
            hlc,
            hasher,
            links: Mutex::new(HashMap::new()),
            shared: Mutex::new(HashMap::new()),
            handle: rt.handle().clone(),
            next_id: AtomicU64::new(1),
            isolated: AtomicBool::new(false),
            boot_ts,
            seen: Mutex::new(HashMap::new()),
            acked: Mutex::new(HashMap::new()),
            peers: Mutex::new(HashMap::new()),
            rounds: Mutex::new(HashMap::new()),
            waits: Mutex::new(HashMap::new()),
            epoch: AtomicU64::new(0),
            lag: Mutex::new(
                hdrhistogram::Histogram::new_with_bounds(1, 3_600_000, 2)
                    .expect("static histogram bounds are valid"),
            ),
            gossip_frames_dropped: AtomicUsize::new(0),
            ready: AtomicBool::new(false),
            booted: Instant::now(),
            first_gossip: Mutex::new(HashMap::new()),
            ready_at: std::sync::OnceLock::new(),
            serving: AtomicBool::new(false),
            handed_back: Mutex::new(HashSet::new()),
            handing_back: Mutex::new(HashSet::new()),
            flushes: (0..shards).map(|_| AtomicU64::new(0)).collect(),
        });
        let c = cluster.clone();
        std::thread::Builder::new()
            .name("elsa-peer".into())
            .spawn(move || {
                rt.block_on(async move {
                    let listener = match TcpListener::from_std(std_listener) {
                        Ok(l) => l,
                        Err(e) => {
                            tracing::error!("peer listener: {e}");
                            return;
                        }
                    };
                    tokio::spawn(c.clone().accept_loop(listener));
                    tokio::spawn(c.clone().anti_entropy_loop());
                    tokio::spawn(c.clone().expire_requests());
                    crate::membership::run(c).await;
                })
            })?;
        Ok(cluster)
    }

    /// The settings.
    pub fn settings(&self) -> &Settings {
        &self.settings
    }

    /// The current ring view.
    pub fn ring(&self) -> Arc<Ring> {
        self.ring.load_full()
    }

    /// Installs a new membership view. The ring and the shared-bucket lists
    /// are built on a blocking thread: on the peer thread they would delay
    /// membership's own heartbeats (on a busy host, long enough for the
    /// failure detector to declare live nodes dead).
    pub(crate) async fn set_members(self: &Arc<Self>, members: Vec<Member>) {
        {
            let mut seen = self.seen.lock().unwrap_or_else(|e| e.into_inner());
            for m in &members {
                seen.insert(m.peer, m.region.clone());
            }
        }
        let s = &self.settings;
        let (node, vnodes, rf) = (s.node, s.vnodes, s.replication_factor);
        let built = tokio::task::spawn_blocking(move || {
            let ring = Ring::new(members, node, vnodes, rf);
            let shared: HashMap<NodeId, Arc<Vec<u16>>> = ring
                .shared_lists()
                .into_iter()
                .map(|(n, list)| (n, Arc::new(list)))
                .collect();
            (ring, shared)
        })
        .await;
        let Ok((ring, shared)) = built else {
            tracing::error!("membership: building the ring failed; keeping the old view");
            return;
        };
        let live: HashSet<NodeId> = ring.members().iter().map(|m| m.node).collect();
        self.first_gossip
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .retain(|n, _| live.contains(n));
        tracing::info!(
            "membership: {} nodes in {} regions: {}",
            ring.members().len(),
            ring.regions().len(),
            ring.members()
                .iter()
                .map(|m| format!(
                    "{}@{}{}",
                    m.node,
                    m.region,
                    if m.ready { "" } else { "(catching up)" }
                ))
                .collect::<Vec<_>>()
                .join(" ")
        );
        *self.shared.lock().unwrap_or_else(|e| e.into_inner()) = shared;
        self.ring.store(Arc::new(ring));
        // Links to nodes that left close; they are re-made if they return.
        let mut links = self.links.lock().unwrap_or_else(|e| e.into_inner());
        links.retain(|node, link| {
            let keep = live.contains(node);
            if !keep {
                link.closed.store(true, Ordering::Relaxed);
            }
            keep
        });
    }

    /// True once this node has caught up since it started (it may then be
    /// primary).
    pub fn is_ready(&self) -> bool {
        self.ready.load(Ordering::Relaxed)
    }

    /// The ready peers of this node's region it shares buckets with and
    /// has not yet caught up from; `None` while it is still looking for
    /// one (the first [`JOIN_GRACE`] after starting).
    ///
    /// Caught up from peer P means: a clean anti-entropy round with P
    /// proved the pair in sync up to a time at or after the first gossip
    /// frame P sent this incarnation. Commits P made before P put this node
    /// back in its view never reach it by gossip; they are all older than
    /// that frame, so the round covered them; later ones come by gossip.
    pub fn catch_up_pending(&self) -> Option<Vec<NodeId>> {
        let ring = self.ring.load();
        let own = &self.settings.region;
        let shared = self.shared.lock().unwrap_or_else(|e| e.into_inner());
        let teachers: Vec<NodeId> = ring
            .members()
            .iter()
            .filter(|m| m.node != self.settings.node && m.ready && &m.region == own)
            .filter(|m| shared.get(&m.node).is_some_and(|l| !l.is_empty()))
            .map(|m| m.node)
            .collect();
        drop(shared);
        if teachers.is_empty() {
            return (self.booted.elapsed() >= JOIN_GRACE).then(Vec::new);
        }
        let first = self.first_gossip.lock().unwrap_or_else(|e| e.into_inner());
        let peers = self.peers.lock().unwrap_or_else(|e| e.into_inner());
        Some(
            teachers
                .into_iter()
                .filter(|p| {
                    let synced = peers.get(p).map_or(0, |s| s.synced_ts);
                    first.get(p).is_none_or(|&f| synced < f)
                })
                .collect(),
        )
    }

    /// Marks this node ready once nothing is pending; true if it is.
    pub(crate) fn catch_up_done(&self) -> bool {
        if self.is_ready() {
            return true;
        }
        if self.catch_up_pending().is_some_and(|p| p.is_empty()) {
            let _ = self.ready_at.set(Instant::now());
            self.ready.store(true, Ordering::Relaxed);
            tracing::info!(
                "caught up after {:?}: may be primary now",
                self.booted.elapsed()
            );
            return true;
        }
        false
    }

    /// True once this node acts as the primary of its slots.
    pub fn is_serving(&self) -> bool {
        self.serving.load(Ordering::Relaxed)
    }

    /// The hand-back after catching up (called on the membership tick):
    /// true once this node may act as the primary of its slots.
    ///
    /// Caught up, a node publishes `ready`; peers then route its slots to
    /// it and refuse requests for them (see [`Cluster::serves`]). It
    /// routes them to itself only once every ready peer of its region it
    /// shares slots with has answered [`wire::HandBack`] — sent after the
    /// peer switched and shipped a full merge epoch of every shard, so what
    /// the peer committed as the acting primary has reached this node. At
    /// no moment do two nodes both serve a slot (without this, both did for
    /// a membership gossip interval, and the new primary lacked the old
    /// one's last epoch: lost increments).
    pub(crate) fn hand_back_done(self: &Arc<Self>) -> bool {
        if self.is_serving() {
            return true;
        }
        let Some(since) = self.ready_at.get().filter(|_| self.is_ready()) else {
            return false;
        };
        let ring = self.ring.load();
        let own = &self.settings.region;
        let shared = self.shared.lock().unwrap_or_else(|e| e.into_inner());
        let done = self.handed_back.lock().unwrap_or_else(|e| e.into_inner());
        let pending: Vec<NodeId> = ring
            .members()
            .iter()
            .filter(|m| m.node != self.settings.node && m.ready && &m.region == own)
            .filter(|m| shared.get(&m.node).is_some_and(|l| !l.is_empty()))
            .filter(|m| !done.contains(&m.node))
            .map(|m| m.node)
            .collect();
        drop((shared, done));
        if pending.is_empty() || since.elapsed() > HAND_BACK_TIMEOUT {
            if !pending.is_empty() {
                tracing::warn!(
                    "hand-back: no answer from {pending:?} in {HAND_BACK_TIMEOUT:?}; serving anyway"
                );
            }
            self.serving.store(true, Ordering::Relaxed);
            tracing::info!(
                "slots handed back {:?} after catching up: primary now",
                since.elapsed()
            );
            return true;
        }
        for p in pending {
            self.send(
                p,
                Frame::new(Body::HandBackAsk(wire::HandBackAsk {})),
                false,
            );
        }
        false
    }

    /// A peer that caught up asks for its slots back: once this node routes
    /// them to it, every local shard ships a merge epoch begun after that,
    /// then [`wire::HandBack`] follows that gossip on the same link.
    fn hand_back(self: &Arc<Self>, peer: NodeId) {
        if !self.ring.load().member(peer).is_some_and(|m| m.ready) {
            return; // not switched yet: the peer asks again
        }
        if !self
            .handing_back
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(peer)
        {
            return;
        }
        let me = self.clone();
        self.handle.spawn(async move {
            // Two flushes: the one under way may have taken its lattices
            // before the switch; the next one holds everything after it.
            let start: Vec<u64> = me
                .flushes
                .iter()
                .map(|f| f.load(Ordering::Relaxed))
                .collect();
            let deadline =
                Instant::now() + 20 * me.settings.merge_epoch.max(Duration::from_millis(50));
            while Instant::now() < deadline
                && me
                    .flushes
                    .iter()
                    .zip(&start)
                    .any(|(f, s)| f.load(Ordering::Relaxed) < s + 2)
            {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            me.send(peer, Frame::new(Body::HandBack(wire::HandBack {})), false);
            me.handing_back
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .remove(&peer);
        });
    }

    /// Whether a forwarded call may be served by local shard `shard`: with
    /// `routing = primary`, only if this node's own view makes that shard
    /// the primary of every key in it. A caller with an older or newer
    /// view is answered Busy and routes again — so a slot is served by one
    /// node even while views differ (a node leaving, a hand-back).
    fn serves(&self, call: &Call, shard: u32) -> bool {
        if self.settings.routing != Routing::Primary {
            return true;
        }
        let here = ShardId {
            node: self.settings.node,
            index: shard as u16,
        };
        let hashes = call
            .ops
            .iter()
            .map(|o| o.hash)
            .chain(call.checks.iter().map(|c| c.hash))
            .chain(call.holds.iter().map(|h| h.hash))
            .chain(call.writes.iter().map(|w| w.hash));
        let mut ok = true;
        for h in hashes {
            ok &= self.route(h) == here;
        }
        ok
    }

    /// Whether this node is cut off from other regions (fault injection).
    pub fn isolated(&self) -> bool {
        self.isolated.load(Ordering::Relaxed)
    }

    /// Cuts this node off from every other region, or heals it.
    pub fn set_isolated(&self, on: bool) {
        self.isolated.store(on, Ordering::Relaxed);
        tracing::warn!(
            "fault injection: {} other regions",
            if on { "cut off from" } else { "reconnected to" }
        );
    }

    fn other_region(&self, region: &str) -> bool {
        region != self.settings.region
    }

    /// Is peer address `addr` cut off by fault injection?
    pub(crate) fn cut_addr(&self, addr: SocketAddr) -> bool {
        self.isolated()
            && self
                .seen
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .get(&addr)
                .is_some_and(|r| self.other_region(r))
    }

    /// Blocked by fault injection?
    pub(crate) fn cut(&self, region: &str) -> bool {
        self.isolated() && self.other_region(region)
    }

    fn link(self: &Arc<Self>, node: NodeId) -> Option<Arc<Link>> {
        let mut links = self.links.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(l) = links.get(&node) {
            return Some(l.clone());
        }
        let ring = self.ring.load();
        let m = ring.member(node)?;
        let (tx, rx) = mpsc::unbounded_channel();
        let link = Arc::new(Link {
            node,
            addr: m.peer,
            region: m.region.clone(),
            tx,
            queued: AtomicUsize::new(0),
            pending: Mutex::new(HashMap::new()),
            connected: AtomicBool::new(false),
            dropped: AtomicU64::new(0),
            closed: AtomicBool::new(false),
        });
        links.insert(node, link.clone());
        self.handle.spawn(self.clone().run_link(link.clone(), rx));
        Some(link)
    }

    /// Queues a frame; false when it was dropped (queue full, emulated loss
    /// or a cut link).
    fn send(self: &Arc<Self>, node: NodeId, frame: Frame, lossy: bool) -> bool {
        let Some(link) = self.link(node) else {
            return false;
        };
        if self.cut(&link.region) {
            return false;
        }
        if lossy
            && self.other_region(&link.region)
            && self.settings.wan_loss_percent > 0.0
            && rand::random::<f64>() * 100.0 < self.settings.wan_loss_percent
        {
            link.dropped.fetch_add(1, Ordering::Relaxed);
            return false;
        }
        if lossy && link.queued.load(Ordering::Relaxed) >= LINK_QUEUE {
            // A slow or dead peer: drop, anti-entropy will repair.
            link.dropped.fetch_add(1, Ordering::Relaxed);
            return false;
        }
        let out = Out {
            frame,
            at: Instant::now(),
        };
        link.queued.fetch_add(1, Ordering::Relaxed);
        if link.tx.send(out).is_err() {
            link.queued.fetch_sub(1, Ordering::Relaxed);
            return false;
        }
        true
    }

    fn delay_for(&self, region: &str) -> Duration {
        if self.other_region(region) {
            self.settings.wan_delay
        } else {
            Duration::ZERO
        }
    }

    async fn run_link(self: Arc<Self>, link: Arc<Link>, mut rx: mpsc::UnboundedReceiver<Out>) {
        let mut backoff = Duration::from_millis(50);
        while !link.closed.load(Ordering::Relaxed) {
            if !self.cut(&link.region) {
                let conn =
                    tokio::time::timeout(Duration::from_secs(1), TcpStream::connect(link.addr))
                        .await;
                if let Ok(Ok(stream)) = conn {
                    backoff = Duration::from_millis(50);
                    let _ = stream.set_nodelay(true);
                    link.connected.store(true, Ordering::Relaxed);
                    self.serve_link(&link, stream, &mut rx).await;
                    link.connected.store(false, Ordering::Relaxed);
                }
            }
            // Whatever was waiting fails now: callers see the shard as
            // gone, gossip is left to anti-entropy. The queue first: a
            // request queued after this drain keeps its answer slot and is
            // sent on the next connection.
            while rx.try_recv().is_ok() {
                link.queued.fetch_sub(1, Ordering::Relaxed);
            }
            let pending: Vec<Completer> = link
                .pending
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .drain()
                .map(|(_, (_, c))| c)
                .collect();
            drop(pending);
            tokio::time::sleep(backoff).await;
            backoff = (backoff * 2).min(Duration::from_secs(1));
        }
    }

    async fn serve_link(
        self: &Arc<Self>,
        link: &Link,
        stream: TcpStream,
        rx: &mut mpsc::UnboundedReceiver<Out>,
    ) {
        let (mut rd, mut wr) = stream.into_split();
        let hello = Frame::new(Body::Hello(wire::Hello {
            node: self.settings.node,
            region: self.settings.region.clone(),
        }));
        let mut buf = BytesMut::new();
        hello.encode_to(&mut buf);
        if wr.write_all(&buf).await.is_err() {
            return;
        }
        let delay = self.delay_for(&link.region);
        let writer = async {
            let mut buf = BytesMut::new();
            while let Some(out) = rx.recv().await {
                link.queued.fetch_sub(1, Ordering::Relaxed);
                if !delay.is_zero() {
                    tokio::time::sleep_until((out.at + delay).into()).await;
                }
                buf.clear();
                out.frame.encode_to(&mut buf);
                // Batch whatever else is already due.
                while buf.len() < 1 << 20 {
                    let Ok(o) = rx.try_recv() else { break };
                    link.queued.fetch_sub(1, Ordering::Relaxed);
                    if !delay.is_zero() && o.at + delay > Instant::now() {
                        if wr.write_all(&buf).await.is_err() {
                            return;
                        }
                        buf.clear();
                        tokio::time::sleep_until((o.at + delay).into()).await;
                    }
                    o.frame.encode_to(&mut buf);
                }
                if self.cut(&link.region) || wr.write_all(&buf).await.is_err() {
                    return;
                }
            }
        };
        let reader = async {
            let mut buf = BytesMut::with_capacity(64 * 1024);
            loop {
                match wire::decode_frame(&mut buf) {
                    Ok(Some(frame)) => {
                        if self.cut(&link.region) {
                            return;
                        }
                        self.on_link_frame(link, frame);
                        continue;
                    }
                    Ok(None) => {}
                    Err(e) => {
                        tracing::warn!("peer {}: {e}; reconnecting", link.node);
                        return;
                    }
                }
                match rd.read_buf(&mut buf).await {
                    Ok(0) | Err(_) => return,
                    Ok(_) => {}
                }
            }
        };
        tokio::select! {
            _ = writer => {}
            _ = reader => {}
        }
    }

    /// Answers coming back on a link we opened.
    fn on_link_frame(self: &Arc<Self>, link: &Link, frame: Frame) {
        let Some(body) = frame.body else { return };
        match body {
            Body::Response(r) => {
                self.hlc.observe(r.hlc);
                let done = link
                    .pending
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .remove(&r.id);
                if let (Some((_, done)), Ok(answer)) = (done, Answer::decode(r.answer)) {
                    done(answer);
                }
            }
            Body::GossipAck(a) => {
                let mut acked = self.acked.lock().unwrap_or_else(|e| e.into_inner());
                acked
                    .entry((a.from_shard as u16, link.node))
                    .or_insert_with(|| Stream::after_boot(self.boot_ts))
                    .acked(a.flushed_ts);
            }
            Body::AeBuckets(b) => self.ae_compare(link.node, b),
            Body::AeEntries(e) => {
                let received = e.lattices.len();
                self.merge_lattices(e.lattices, None);
                self.ae_finish(link.node, e.round, received);
            }
            Body::WatermarkReply(w) => {
                if let Some(tx) = self
                    .waits
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .remove(&w.id)
                {
                    let _ = tx.send(w.ts);
                }
            }
            _ => {}
        }
    }

    async fn accept_loop(self: Arc<Self>, listener: TcpListener) {
        loop {
            match listener.accept().await {
                Ok((stream, _)) => {
                    let _ = stream.set_nodelay(true);
                    tokio::spawn(self.clone().serve_peer(stream));
                }
                Err(e) => {
                    tracing::warn!("peer accept: {e}");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            }
        }
    }

    /// A connection a peer opened: its requests, gossip and anti-entropy.
    async fn serve_peer(self: Arc<Self>, stream: TcpStream) {
        let (mut rd, mut wr) = stream.into_split();
        let mut buf = BytesMut::with_capacity(64 * 1024);
        let hello = loop {
            match wire::decode_frame(&mut buf) {
                Ok(Some(Frame {
                    body: Some(Body::Hello(h)),
                })) => break h,
                Ok(Some(_)) | Err(_) => return,
                Ok(None) => {}
            }
            match rd.read_buf(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(_) => {}
            }
        };
        if self.cut(&hello.region) {
            return;
        }
        let (tx, mut rx) = mpsc::unbounded_channel::<Out>();
        let delay = self.delay_for(&hello.region);
        let region = hello.region.clone();
        let me = self.clone();
        let writer = tokio::spawn(async move {
            let mut out_buf = BytesMut::new();
            while let Some(out) = rx.recv().await {
                if !delay.is_zero() {
                    tokio::time::sleep_until((out.at + delay).into()).await;
                }
                out_buf.clear();
                out.frame.encode_to(&mut out_buf);
                while let Ok(o) = rx.try_recv() {
                    if !delay.is_zero() {
                        tokio::time::sleep_until((o.at + delay).into()).await;
                    }
                    o.frame.encode_to(&mut out_buf);
                    if out_buf.len() > 1 << 20 {
                        break;
                    }
                }
                if me.cut(&region) || wr.write_all(&out_buf).await.is_err() {
                    return;
                }
            }
        });
        // Prepared transactions of coordinators on that node: released if
        // the connection dies before their decision arrives.
        let mut prepared: HashSet<(u32, u64)> = HashSet::new();
        'conn: loop {
            loop {
                match wire::decode_frame(&mut buf) {
                    Ok(Some(frame)) => {
                        if self.cut(&hello.region) {
                            break 'conn;
                        }
                        self.on_peer_frame(&hello, frame, &tx, &mut prepared);
                    }
                    Ok(None) => break,
                    Err(e) => {
                        tracing::warn!("peer {}: {e}; closing", hello.node);
                        break 'conn;
                    }
                }
            }
            match rd.read_buf(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(_) => {}
            }
        }
        for (shard, txn) in prepared {
            if let Some(inbox) = self.inboxes.get(shard as usize) {
                let _ = inbox.send(ShardMsg::Release { txn });
            }
        }
        writer.abort();
    }

    fn on_peer_frame(
        self: &Arc<Self>,
        hello: &wire::Hello,
        frame: Frame,
        tx: &mpsc::UnboundedSender<Out>,
        prepared: &mut HashSet<(u32, u64)>,
    ) {
        let Some(body) = frame.body else { return };
        let reply = |body: Body| {
            let _ = tx.send(Out {
                frame: Frame::new(body),
                at: Instant::now(),
            });
        };
        match body {
            Body::Request(req) => {
                self.hlc.observe(req.hlc);
                let Ok(call) = Call::decode(req.call) else {
                    return;
                };
                if call.kind == 9 {
                    // A synchronous-replication push (2pc mode).
                    let entries = call.entries;
                    let me = self.clone();
                    let tx = tx.clone();
                    self.handle.spawn(async move {
                        me.merge_lattices(entries, None);
                        // Durable before the answer: merge_lattices' acks.
                        let answer = Answer::default().encode_to_vec().into();
                        let _ = tx.send(Out {
                            frame: Frame::new(Body::Response(wire::Response {
                                id: req.id,
                                hlc: me.hlc.peek(),
                                answer,
                            })),
                            at: Instant::now(),
                        });
                    });
                    return;
                }
                let Some(inbox) = self.inboxes.get(req.shard as usize) else {
                    return;
                };
                // New work for a key (not the follow-ups of a prepare,
                // which must reach the shard that holds its keys).
                if matches!(call.kind, 1 | 2 | 3 | 4 | 8) && !self.serves(&call, req.shard) {
                    reply(Body::Response(wire::Response {
                        id: req.id,
                        hlc: self.hlc.peek(),
                        answer: busy_answer(call.kind).encode_to_vec().into(),
                    }));
                    return;
                }
                match call.kind {
                    4 => {
                        prepared.insert((req.shard, call.txn));
                    }
                    6 | 7 => {
                        prepared.remove(&(req.shard, call.txn));
                    }
                    _ => {}
                }
                let Ok(started) = remote::start(call, inbox) else {
                    return; // malformed or gone: the caller's request fails
                };
                let tx = tx.clone();
                let hlc = self.hlc.clone();
                self.handle.spawn(async move {
                    if let Ok(Some(answer)) = remote::finish(started).await {
                        let _ = tx.send(Out {
                            frame: Frame::new(Body::Response(wire::Response {
                                id: req.id,
                                hlc: hlc.peek(),
                                answer: answer.encode_to_vec().into(),
                            })),
                            at: Instant::now(),
                        });
                    }
                });
            }
            Body::Gossip(g) => {
                self.hlc.observe(g.flushed_ts);
                self.first_gossip
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .entry(hello.node)
                    .or_insert(g.flushed_ts);
                self.note_received(hello.node, &g.lattices);
                let done = self.merge_lattices(g.lattices, Some(()));
                let tx = tx.clone();
                let ack = wire::GossipAck {
                    from_shard: g.from_shard,
                    flushed_ts: g.flushed_ts,
                    after_gap: g.after_gap,
                };
                self.handle.spawn(async move {
                    for rx in done {
                        if !matches!(rx.await, Ok(Ok(_))) {
                            return; // not durable: no ack, the watermark waits
                        }
                    }
                    let _ = tx.send(Out {
                        frame: Frame::new(Body::GossipAck(ack)),
                        at: Instant::now(),
                    });
                });
            }
            Body::AeGroups(g) => {
                let me = self.clone();
                let tx = tx.clone();
                let peer = hello.node;
                self.handle.spawn(async move {
                    let Some(shared) = me.shared_with(peer) else {
                        return;
                    };
                    let digest = me.node_digest().await;
                    let mine = ae::group_digests(&digest, &shared);
                    let groups = ae::differing_groups(&mine, &g.groups, &g.digests);
                    let (buckets, digests) = ae::bucket_digests(&digest, &shared, &groups);
                    let _ = tx.send(Out {
                        frame: Frame::new(Body::AeBuckets(wire::AeBuckets {
                            round: g.round,
                            buckets,
                            digests,
                        })),
                        at: Instant::now(),
                    });
                });
            }
            Body::AeEntries(e) => {
                self.merge_lattices(e.lattices, None);
                if !e.pull.is_empty() {
                    let me = self.clone();
                    let tx = tx.clone();
                    self.handle.spawn(async move {
                        let (lattices, _) = me.bucket_lattices(&e.pull, me.cutoff()).await;
                        let _ = tx.send(Out {
                            frame: Frame::new(Body::AeEntries(wire::AeEntries {
                                round: e.round,
                                lattices,
                                pull: Vec::new(),
                            })),
                            at: Instant::now(),
                        });
                    });
                }
            }
            Body::HandBackAsk(_) => self.hand_back(hello.node),
            Body::HandBack(_) => {
                self.handed_back
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .insert(hello.node);
            }
            Body::WatermarkQuery(q) => {
                let ts = self.watermark(&q.region);
                reply(Body::WatermarkReply(wire::WatermarkReply { id: q.id, ts }));
            }
            _ => {}
        }
    }

    fn note_received(&self, peer: NodeId, lattices: &[Lattice]) {
        if lattices.is_empty() {
            return;
        }
        let now = elsa_shard::unix_ms();
        let mut lag = self.lag.lock().unwrap_or_else(|e| e.into_inner());
        let mut newest = 0;
        for l in lattices {
            let ms = now.saturating_sub(l.commit_ts >> 16);
            let _ = lag.record(ms.max(1));
            newest = newest.max(l.commit_ts);
        }
        let mut peers = self.peers.lock().unwrap_or_else(|e| e.into_inner());
        let p = peers.entry(peer).or_default();
        p.lag_ms = now.saturating_sub(newest >> 16);
        p.received += lattices.len() as u64;
    }

    /// Merges lattices into the local shards that hold their buckets; with
    /// `durable`, returns the shards' answers (durable merges) to await.
    #[allow(clippy::type_complexity)]
    fn merge_lattices(
        &self,
        lattices: Vec<Lattice>,
        durable: Option<()>,
    ) -> Vec<oneshot::Receiver<Result<usize, elsa_shard::Refusal>>> {
        let ring = self.ring.load();
        let mut per_shard: HashMap<u16, Vec<LogEntry>> = HashMap::new();
        for l in lattices {
            let hash = std::hash::BuildHasher::hash_one(&self.hasher, &l.key[..]);
            per_shard
                .entry(ring.own_shard(slot_of(hash)))
                .or_default()
                .push(LogEntry::from(l));
        }
        let mut waits = Vec::new();
        for (shard, entries) in per_shard {
            let (reply, rx) = oneshot::channel();
            if let Some(inbox) = self.inboxes.get(usize::from(shard)) {
                let _ = inbox.send(ShardMsg::Merge { entries, reply });
                if durable.is_some() {
                    waits.push(rx);
                }
            }
        }
        waits
    }

    fn shared_with(&self, peer: NodeId) -> Option<Arc<Vec<u16>>> {
        self.shared
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(&peer)
            .cloned()
    }

    async fn node_digest(&self) -> Vec<u64> {
        let mut per_shard = Vec::with_capacity(self.inboxes.len());
        for inbox in &self.inboxes {
            let (tx, rx) = oneshot::channel();
            let _ = inbox.send(ShardMsg::Digests(tx));
            per_shard.push(
                rx.await.unwrap_or_else(|_| {
                    vec![0; elsa_shard::table::DIGEST_BUCKETS].into_boxed_slice()
                }),
            );
        }
        ae::node_digest(&self.ring.load(), &per_shard)
    }

    /// The lattices of `buckets` committed before `older_than` (at most
    /// one batch per shard), and whether those buckets also hold younger
    /// ones here.
    async fn bucket_lattices(&self, buckets: &[u32], older_than: u64) -> (Vec<Lattice>, bool) {
        let wanted = ae::bitmap(buckets);
        let mut out = Vec::new();
        let mut younger = false;
        for inbox in &self.inboxes {
            let (reply, rx) = oneshot::channel();
            let _ = inbox.send(ShardMsg::BucketEntries {
                wanted: wanted.clone(),
                limit: AE_BATCH,
                older_than,
                reply,
            });
            if let Ok(batch) = rx.await {
                out.extend(batch.entries.iter().map(Lattice::from));
                younger |= batch.younger;
            }
        }
        (out, younger)
    }

    /// A peer that stopped answering (paused, overloaded) must not hold a
    /// client forever: requests older than [`REQUEST_TIMEOUT`] fail as if
    /// the shard were gone.
    async fn expire_requests(self: Arc<Self>) {
        let mut tick = tokio::time::interval(Duration::from_secs(1));
        loop {
            tick.tick().await;
            let links: Vec<Arc<Link>> = self
                .links
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .values()
                .cloned()
                .collect();
            for link in links {
                let expired: Vec<Completer> = {
                    let mut pending = link.pending.lock().unwrap_or_else(|e| e.into_inner());
                    let old: Vec<u64> = pending
                        .iter()
                        .filter(|(_, (at, _))| at.elapsed() > REQUEST_TIMEOUT)
                        .map(|(id, _)| *id)
                        .collect();
                    old.iter()
                        .filter_map(|id| pending.remove(id).map(|(_, c)| c))
                        .collect()
                };
                if !expired.is_empty() {
                    tracing::warn!(
                        "peer {}: {} requests unanswered for {:?}; failed",
                        link.node,
                        expired.len(),
                        REQUEST_TIMEOUT
                    );
                }
            }
        }
    }

    /// One round per period, with the next peer in turn: a node that
    /// missed updates is repaired by one peer at a time rather than by all
    /// of them shipping the same lattices at once.
    async fn anti_entropy_loop(self: Arc<Self>) {
        let mut tick = tokio::time::interval(self.settings.anti_entropy);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut turn = 0usize;
        loop {
            tick.tick().await;
            let mut peers: Vec<NodeId> = match self.catch_up_pending() {
                // Catching up: only with the peers it still needs.
                Some(pending) if !self.is_ready() && !pending.is_empty() => pending,
                _ => self
                    .ring
                    .load()
                    .members()
                    .iter()
                    .map(|m| m.node)
                    .filter(|n| *n != self.settings.node)
                    .collect(),
            };
            if peers.is_empty() {
                continue;
            }
            // Start the rotation at a different peer on every node.
            let first = self.settings.node as usize % peers.len();
            peers.rotate_left(first);
            let peer = peers[turn % peers.len()];
            turn = turn.wrapping_add(1);
            let Some(shared) = self.shared_with(peer) else {
                continue;
            };
            let started = self.hlc.now();
            let cutoff = self.cutoff();
            let digest = Arc::new(self.node_digest().await);
            let round = self.next_id.fetch_add(1, Ordering::Relaxed);
            let (groups, digests) = ae::group_digests(&digest, &shared);
            {
                let mut rounds = self.rounds.lock().unwrap_or_else(|e| e.into_inner());
                // Rounds whose answers never came (peer down, frame lost).
                rounds.retain(|_, r| r.at.elapsed() < ROUND_TIMEOUT);
                rounds.insert(
                    round,
                    Round {
                        peer,
                        started,
                        cutoff,
                        digest,
                        shipped: None,
                        younger: false,
                        at: Instant::now(),
                    },
                );
            }
            self.send(
                peer,
                Frame::new(Body::AeGroups(wire::AeGroups {
                    round,
                    groups,
                    digests,
                })),
                true,
            );
        }
    }

    /// Step 3 of a round this node started: find the buckets that differ,
    /// ship ours and ask for theirs.
    fn ae_compare(self: &Arc<Self>, peer: NodeId, b: wire::AeBuckets) {
        let Some(mut round) = self
            .rounds
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&b.round)
            .filter(|r| r.peer == peer)
        else {
            return;
        };
        let Some(shared) = self.shared_with(peer) else {
            return;
        };
        let differ = if b.buckets.is_empty() {
            Vec::new()
        } else {
            // The responder listed every shared bucket of the groups that
            // differed; compare those groups bucket by bucket.
            let mut groups: Vec<u32> = b.buckets.iter().map(|x| x / ae::GROUP as u32).collect();
            groups.sort_unstable();
            groups.dedup();
            ae::differing_buckets(&round.digest, &shared, &groups, &b.buckets, &b.digests)
        };
        {
            let mut peers = self.peers.lock().unwrap_or_else(|e| e.into_inner());
            let p = peers.entry(peer).or_default();
            p.last_ae_buckets = differ.len();
            p.last_ae_unix_ms = elsa_shard::unix_ms();
        }
        if differ.is_empty() {
            // Identical: everything either side committed before the round
            // started is on both, whatever gossip frames were lost.
            self.mark_synced(peer, round.started, true);
            return;
        }
        let this = self.clone();
        let id = b.round;
        self.handle.spawn(async move {
            let (lattices, younger) = this.bucket_lattices(&differ, round.cutoff).await;
            {
                let mut peers = this.peers.lock().unwrap_or_else(|e| e.into_inner());
                peers.entry(peer).or_default().ae_shipped += lattices.len() as u64;
            }
            round.shipped = Some(lattices.len());
            round.younger = younger;
            this.rounds
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .insert(id, round);
            this.send(
                peer,
                Frame::new(Body::AeEntries(wire::AeEntries {
                    round: id,
                    lattices,
                    pull: differ,
                })),
                true,
            );
        });
    }

    /// Step 4 answered: if neither side had anything older than the
    /// round's cutoff to ship, the pair was in sync up to the cutoff (what
    /// differed was still arriving by gossip) — for the peer's data, and
    /// for this node's commits only if no younger lattice here sat in the
    /// differing buckets: such a lattice may have replaced a commit of ours
    /// older than the cutoff whose gossip was lost, which the peer then has
    /// in no version (the watermark must not pass it; found by the
    /// simulation, `ae_finish_cutoff_sync_covers_replaced_writes`).
    fn ae_finish(&self, peer: NodeId, round_id: u64, received: usize) {
        let round = self
            .rounds
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&round_id)
            .filter(|r| r.peer == peer);
        if let Some(r) = round {
            if r.shipped == Some(0) && received == 0 {
                self.mark_synced(peer, r.cutoff, !r.younger);
            }
        }
    }

    /// A round found the pair in sync up to `ts`: for catching up and
    /// tombstone collection, and, with `ours`, for this node's gossip
    /// streams to the peer (watermarks).
    fn mark_synced(&self, peer: NodeId, ts: u64, ours: bool) {
        {
            let mut peers = self.peers.lock().unwrap_or_else(|e| e.into_inner());
            let p = peers.entry(peer).or_default();
            p.synced_ts = p.synced_ts.max(ts);
        }
        if !ours {
            return;
        }
        let mut acked = self.acked.lock().unwrap_or_else(|e| e.into_inner());
        for s in 0..self.settings.shards {
            acked
                .entry((s, peer))
                .or_insert_with(|| Stream::after_boot(self.boot_ts))
                .synced(ts);
        }
    }

    /// Anti-entropy leaves alone lattices younger than two merge epochs
    /// plus the WAN round trip plus 100 ms: gossip is still delivering
    /// them, and shipping them too would only race it.
    fn cutoff(&self) -> u64 {
        let settle = 2 * self.settings.merge_epoch
            + 2 * self.settings.wan_delay
            + Duration::from_millis(100);
        self.hlc
            .now()
            .saturating_sub((settle.as_millis() as u64) << 16)
    }

    /// End of a merge epoch on local shard `shard`: ships its lattices to
    /// every other replica of their keys (one frame per peer node; an
    /// empty frame still carries the flush time, for watermarks).
    pub fn ship_gossip(self: &Arc<Self>, shard: usize, entries: Vec<LogEntry>) {
        let flushed_ts = self.hlc.now();
        self.epoch.fetch_add(1, Ordering::Relaxed);
        if let Some(f) = self.flushes.get(shard) {
            f.fetch_add(1, Ordering::Relaxed);
        }
        let ring = self.ring.load();
        let me = self.settings.node;
        let mut per_node: HashMap<NodeId, Vec<Lattice>> = ring
            .members()
            .iter()
            .filter(|m| m.node != me)
            .map(|m| (m.node, Vec::new()))
            .collect();
        for e in &entries {
            let hash = std::hash::BuildHasher::hash_one(&self.hasher, &e.key[..]);
            for id in ring.all_replicas(slot_of(hash)) {
                if id.node != me {
                    if let Some(v) = per_node.get_mut(&id.node) {
                        v.push(Lattice::from(e));
                    }
                }
            }
        }
        for (node, lattices) in per_node {
            let frame = Frame::new(Body::Gossip(wire::Gossip {
                to_shard: 0,
                from_shard: shard as u32,
                flushed_ts,
                lattices,
                after_gap: false,
            }));
            // Recorded whether or not it leaves: a dropped frame is never
            // acknowledged, which is what holds the watermark back.
            self.acked
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .entry((shard as u16, node))
                .or_insert_with(|| Stream::after_boot(self.boot_ts))
                .sent(flushed_ts);
            if !self.send(node, frame, true) {
                self.gossip_frames_dropped.fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    /// Every commit of this node's shards below the answer has been merged
    /// durably by every node of `region` that replicates its key.
    pub fn watermark(&self, region: &str) -> u64 {
        let ring = self.ring.load();
        let peers: Vec<NodeId> = ring
            .members()
            .iter()
            .filter(|m| m.region == region && m.node != self.settings.node)
            .map(|m| m.node)
            .collect();
        if peers.is_empty() {
            // Alone in that region (or it is ours): everything is there.
            return if region == self.settings.region {
                self.hlc.peek()
            } else {
                0
            };
        }
        let acked = self.acked.lock().unwrap_or_else(|e| e.into_inner());
        let mut wm = u64::MAX;
        for s in 0..self.settings.shards {
            for p in &peers {
                wm = wm.min(acked.get(&(s, *p)).map_or(0, |a| a.through()));
            }
        }
        wm
    }

    /// The watermark towards `region` of the whole own region: every
    /// commit made anywhere in this region below it is in `region`.
    pub async fn region_watermark(self: &Arc<Self>, region: &str) -> u64 {
        let ring = self.ring.load_full();
        let mut wm = self.watermark(region);
        for m in ring.members() {
            if m.region != self.settings.region || m.node == self.settings.node {
                continue;
            }
            let id = self.next_id.fetch_add(1, Ordering::Relaxed);
            let (tx, rx) = oneshot::channel();
            self.waits
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .insert(id, tx);
            let q = Frame::new(Body::WatermarkQuery(wire::WatermarkQuery {
                id,
                region: region.to_string(),
            }));
            if !self.send(m.node, q, false) {
                return 0;
            }
            match tokio::time::timeout(Duration::from_secs(1), rx).await {
                Ok(Ok(ts)) => wm = wm.min(ts),
                _ => return 0,
            }
        }
        wm
    }

    /// Sends lattices to one replica in every other region and waits until
    /// each has them durably (`replication = 2pc`).
    pub async fn replicate_sync(self: &Arc<Self>, entries: Vec<LogEntry>) -> Result<(), String> {
        let ring = self.ring.load_full();
        let own = ring.own_region();
        let mut per_node: HashMap<NodeId, Vec<Lattice>> = HashMap::new();
        for e in &entries {
            let hash = std::hash::BuildHasher::hash_one(&self.hasher, &e.key[..]);
            for r in 0..ring.regions().len() {
                if r == own {
                    continue;
                }
                match ring.replicas(slot_of(hash), r).first() {
                    Some(id) => per_node.entry(id.node).or_default().push(Lattice::from(e)),
                    None => return Err(format!("region {} has no replica", ring.regions()[r])),
                }
            }
        }
        let mut waits = Vec::new();
        for (node, lattices) in per_node {
            let call = Call {
                kind: 9,
                entries: lattices,
                ..Default::default()
            };
            let (tx, rx) = oneshot::channel::<Answer>();
            self.request(
                ShardId { node, index: 0 },
                call,
                Some(Box::new(move |a| {
                    let _ = tx.send(a);
                })),
            );
            waits.push((node, rx));
        }
        for (node, rx) in waits {
            if rx.await.is_err() {
                return Err(format!("node {node} did not confirm the commit"));
            }
        }
        Ok(())
    }

    fn request(self: &Arc<Self>, to: ShardId, call: Call, done: Option<Completer>) {
        let Some(link) = self.link(to.node) else {
            return; // dropping `done` answers "gone"
        };
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        if let Some(done) = done {
            link.pending
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .insert(id, (Instant::now(), done));
        }
        let frame = Frame::new(Body::Request(wire::Request {
            id,
            shard: u32::from(to.index),
            hlc: self.hlc.peek(),
            call: call.encode_to_vec().into(),
        }));
        if !self.send(to.node, frame, false) {
            link.pending
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .remove(&id);
        }
    }

    /// Every peer, for INFO replication.
    pub fn peer_info(&self) -> Vec<PeerInfo> {
        let ring = self.ring.load();
        let links = self.links.lock().unwrap_or_else(|e| e.into_inner());
        let peers = self.peers.lock().unwrap_or_else(|e| e.into_inner());
        ring.members()
            .iter()
            .filter(|m| m.node != self.settings.node)
            .map(|m| {
                let link = links.get(&m.node);
                PeerInfo {
                    node: m.node,
                    region: m.region.clone(),
                    addr: m.peer,
                    client: m.client,
                    connected: link.is_some_and(|l| l.connected.load(Ordering::Relaxed)),
                    ready: m.ready,
                    queued: link.map_or(0, |l| l.queued.load(Ordering::Relaxed)),
                    dropped: link.map_or(0, |l| l.dropped.load(Ordering::Relaxed)),
                    stats: peers.get(&m.node).cloned().unwrap_or_default(),
                }
            })
            .collect()
    }

    /// Merge epochs flushed so far (all shards).
    pub fn epochs(&self) -> u64 {
        self.epoch.load(Ordering::Relaxed)
    }

    /// Convergence lag percentiles (ms) over lattices received: p50, p99, max.
    pub fn lag_percentiles(&self) -> (u64, u64, u64) {
        let h = self.lag.lock().unwrap_or_else(|e| e.into_inner());
        if h.is_empty() {
            return (0, 0, 0);
        }
        (h.value_at_quantile(0.5), h.value_at_quantile(0.99), h.max())
    }

    /// Tombstones older than this may be collected: every peer that
    /// replicates anything with this node has confirmed identical digests
    /// since (the caller also applies its age limit).
    pub fn tombstone_horizon(&self) -> u64 {
        let ring = self.ring.load();
        let peers = self.peers.lock().unwrap_or_else(|e| e.into_inner());
        let mut h = u64::MAX;
        for m in ring.members() {
            if m.node != self.settings.node {
                h = h.min(peers.get(&m.node).map_or(0, |p| p.synced_ts));
            }
        }
        h
    }

    /// The cluster's mode for cross-region commits.
    pub fn replication(&self) -> Replication {
        self.settings.replication
    }

    /// Gossip frames dropped (full queues, emulated loss, cut links).
    pub fn gossip_frames_dropped(&self) -> usize {
        self.gossip_frames_dropped.load(Ordering::Relaxed)
    }
}

/// Placement for a node alone: every key on its own shard for the key's
/// slot — the same shard it would use in a cluster, so a node can join
/// one later without moving data between its shards.
pub struct Standalone {
    node: NodeId,
    ring: Ring,
}

impl Standalone {
    /// The placement of node `node` with `shards` shards.
    pub fn new(node: NodeId, shards: u16, vnodes: u32) -> Standalone {
        Standalone {
            node,
            ring: Ring::alone(node, shards, vnodes),
        }
    }
}

impl Placement for Standalone {
    fn route(&self, hash: u64) -> ShardId {
        ShardId {
            node: self.node,
            index: self.ring.own_shard(slot_of(hash)),
        }
    }

    fn send_remote(&self, _to: ShardId, _msg: ShardMsg) {
        // No other node: dropping the message answers "gone".
    }
}

/// The [`Placement`] coordinators use: routes by the ring, forwards
/// through the service.
pub struct Router(pub Arc<Cluster>);

impl Placement for Router {
    fn route(&self, hash: u64) -> ShardId {
        self.0.route(hash)
    }

    fn send_remote(&self, to: ShardId, msg: ShardMsg) {
        self.0.forward(to, msg);
    }

    fn synchronous(&self) -> bool {
        self.0.settings.replication == Replication::TwoPc
    }

    fn sync_replicate(
        &self,
        keys: Vec<HashedKey>,
    ) -> Option<oneshot::Receiver<Result<(), String>>> {
        let c = &self.0;
        if c.settings.replication != Replication::TwoPc || c.ring.load().regions().len() < 2 {
            return None;
        }
        let (tx, rx) = oneshot::channel();
        let me = c.clone();
        c.handle.spawn(async move {
            let r = me.read_and_replicate(keys).await;
            let _ = tx.send(r);
        });
        Some(rx)
    }
}

impl Cluster {
    /// The shard that serves `hash` for this node's clients.
    pub fn route(&self, hash: u64) -> ShardId {
        let ring = self.ring.load();
        let slot = slot_of(hash);
        let replicas = ring.replicas(slot, ring.own_region());
        // Until it serves, this node is nobody's replica to ask: its data
        // may predate what the region acknowledged while it was away.
        let me = self.settings.node;
        let usable = |id: &ShardId| id.node != me || self.is_serving();
        match (self.settings.routing, replicas) {
            (_, []) => ShardId {
                node: me,
                index: ring.own_shard(slot),
            },
            (Routing::Primary, [first, ..]) => Some(*first).filter(usable).unwrap_or(NO_PRIMARY),
            (Routing::Random, all) => {
                let pick = all[rand::random::<usize>() % all.len()];
                if usable(&pick) {
                    pick
                } else {
                    all.iter().copied().find(usable).unwrap_or(NO_PRIMARY)
                }
            }
        }
    }

    /// Forwards a shard message to another node.
    pub fn forward(self: &Arc<Self>, to: ShardId, msg: ShardMsg) {
        if let Some((call, done)) = remote::encode(msg) {
            if to == NO_PRIMARY {
                if let Some(done) = done {
                    done(busy_answer(call.kind));
                }
                return;
            }
            self.request(to, call, done);
        }
    }
}

impl Cluster {
    /// 2pc mode: reads the committed lattices of `keys` from their primary
    /// replicas here, then pushes them to every other region and waits.
    async fn read_and_replicate(self: &Arc<Self>, keys: Vec<HashedKey>) -> Result<(), String> {
        let mut entries = Vec::with_capacity(keys.len());
        for key in keys {
            let to = self.route(key.hash);
            let (reply, rx) = oneshot::channel();
            let msg = ShardMsg::Read {
                key: key.clone(),
                reply,
            };
            if to.node == self.settings.node {
                if let Some(inbox) = self.inboxes.get(usize::from(to.index)) {
                    let _ = inbox.send(msg);
                }
            } else {
                self.forward(to, msg);
            }
            match rx.await {
                Ok(Ok(state)) if state.version == elsa_lattice::Version::ZERO => {}
                Ok(Ok(state)) => entries.push(LogEntry {
                    key: key.key,
                    state: state.current,
                    start_ts: state.version.commit_ts,
                    version: state.version,
                }),
                // Held by a newer commit: that one will replicate itself.
                Ok(Err(_)) => {}
                Err(_) => return Err("the key's replica is gone".into()),
            }
        }
        self.replicate_sync(entries).await
    }
}

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
//!
//! The state lives here; the work is split by job: [`links`] (connections
//! and every frame that arrives), [`routing`] (key → shard, the
//! one-primary fence, 2pc push), [`rounds`] (anti-entropy rounds), [`proofs`]
//! (what they prove each peer holds: tombstone collection) and
//! [`catchup`] (catch-up after a start, hand-back of slots); [`floors`]
//! carries FLUSHALL and FLUSHDB to every node, [`functions`] the function
//! libraries; [`pubsub`]
//! carries PUBLISH to the other nodes; [`untrusted`] checks every peer
//! frame's timestamps and counts before anything in it is used (links are
//! authenticated by `crate::peer_auth` before any frame is read).

mod catchup;
mod decommission;
mod faults;
mod floors;
mod functions;
mod handover;
mod inbox;
mod links;
mod ownership;
mod peers;
mod proofs;
mod pubsub;
mod replicate;
mod rounds;
mod routing;
mod seeds;
mod streams;
mod takeover;
mod units;
mod untrusted;

pub use decommission::DecommissionStatus;
pub use functions::FunctionLibraries;
pub use peers::{PeerInfo, PeerStats};
pub use pubsub::PublishHook;
pub use replicate::RegionReplicator;
pub use routing::{Router, Standalone};
pub(crate) use units::Arrival;

use std::collections::{HashMap, HashSet};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicU8, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use arc_swap::ArcSwap;
use bytes::{Bytes, BytesMut};
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
    /// The last attempt to connect failed (refused, timed out): the peer
    /// process is down. In-region replication does not wait for it (see
    /// `replicate`); set again by the next successful connect.
    unreachable: AtomicBool,
    dropped: AtomicU64,
    /// [`LINK_OPEN`], [`LINK_CLOSING`] or [`LINK_ENDED`].
    state: AtomicU8,
}

/// A link in use.
const LINK_OPEN: u8 = 0;
/// The node left the membership view; the link's task ends at its next
/// reconnect unless the node comes back first and the link is taken up
/// again. Until then it keeps sending what it has queued: a second link
/// made meanwhile would race it to the peer, and frames of one publisher
/// (or one coordinator) could arrive out of order — a view that drops a
/// node for a moment on a loaded host must not reorder its stream.
const LINK_CLOSING: u8 = 1;
/// Its task ended: a new link replaces it.
const LINK_ENDED: u8 = 2;

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
    /// The buckets that differed, where a young typed lattice was held
    /// back here, and whether a batch hit the cap (see `proofs`).
    differ: Vec<u32>,
    held: Vec<u32>,
    capped: bool,
    /// When it started (rounds not answered in [`ROUND_TIMEOUT`] are dropped).
    at: Instant,
    /// A takeover round: which slots, and who waits for it.
    takeover: Option<takeover::TakeoverRound>,
}

/// How long an anti-entropy round may wait for the peer's answers.
const ROUND_TIMEOUT: Duration = Duration::from_secs(10);

/// This node's own commits of its last moments before it started, per
/// local shard, and when they were set (see `streams`).
type BootTail = (Vec<Arc<Vec<LogEntry>>>, Instant);

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
    /// Until when this node's peer connections are down (fault injection).
    links_down_until: Mutex<Option<Instant>>,
    /// Until when the views this node installs leave out the other nodes
    /// of its region (fault injection).
    peers_forgotten_until: Mutex<Option<Instant>>,
    /// The HLC when the service started (see [`Stream::after_boot`]).
    boot_ts: u64,
    /// Every node ever in the ring, as last seen there: the metrics port
    /// and status page show those that left it as down, and a node that
    /// left the ring stays cut off while isolated (fault injection, by
    /// its peer address and region).
    known: Mutex<HashMap<NodeId, Member>>,
    /// (local shard, peer) → what that peer has confirmed of the shard's
    /// gossip stream.
    acked: Mutex<HashMap<(u16, NodeId), Stream>>,
    /// (local shard, node of another region) → the gossip frames it has
    /// not acknowledged yet (see [`streams`]).
    outboxes: Mutex<HashMap<(u16, NodeId), streams::Outbox>>,
    /// Per peer: since when, and when last, a frame came from it.
    heard: Mutex<HashMap<NodeId, (Instant, Instant)>>,
    /// (node of another region, its shard) → the next frame to merge.
    streams_in: Mutex<HashMap<(NodeId, u32), Option<inbox::Inbox>>>,
    /// (node of another region, its shard) → the flush time of the last
    /// frame merged here durably: the streams read horizon's inputs.
    merged_in: Mutex<HashMap<(NodeId, u32), u64>>,
    /// Nodes of other regions: the last view they were in, and when.
    last_view: Mutex<HashMap<NodeId, (Arc<Ring>, Instant)>>,
    /// Frames peers of other regions gave up before they reached here.
    gossip_gaps: AtomicU64,
    /// This node's commits of its last moments before it started, and
    /// when they were set (see [`Cluster::set_boot_tail`]).
    boot_tail: Mutex<Option<BootTail>>,
    /// Per node of another region, the frames a takeover pushed to it
    /// that it has not acknowledged yet (see [`handover`]).
    handovers_owed: Mutex<HashMap<NodeId, Vec<handover::Owed>>>,
    peers: Mutex<HashMap<NodeId, PeerStats>>,
    rounds: Mutex<HashMap<u64, Round>>,
    /// Per peer, which buckets anti-entropy proved it holds (tombstone
    /// collection) and which keep differing (see [`proofs`]).
    proofs: Mutex<HashMap<NodeId, proofs::Proofs>>,
    waits: Mutex<HashMap<u64, oneshot::Sender<u64>>>,
    epoch: AtomicU64,
    lag: Mutex<hdrhistogram::Histogram<u64>>,
    /// The region of every node seen in a view since this process started
    /// (a node's region never changes): which region a lattice's origin is
    /// in after the node left the view (see `units`).
    regions_seen: Mutex<HashMap<NodeId, String>>,
    gossip_frames_dropped: AtomicUsize,
    /// Whether this node has caught up since it started (see
    /// [`Cluster::catch_up_done`]); until then it is no slot's primary.
    ready: AtomicBool,
    /// When this node (re)joined: started, or began catching up again.
    booted: Mutex<Instant>,
    /// peer → `flushed_ts` of its first gossip frame since this node
    /// started: every commit of that peer missing from its gossip stream
    /// to this incarnation is older than it.
    first_gossip: Mutex<HashMap<NodeId, u64>>,
    /// When this node caught up (it then asks for its slots back).
    ready_at: Mutex<Option<Instant>>,
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
    /// In-region replication batches awaiting their replicas' answers.
    batches: Mutex<HashMap<u64, replicate::Batch>>,
    /// A peer refused our replication: it no longer counts this node as a
    /// live member (we were declared dead, paused or cut off). Until we
    /// have caught up again we serve nothing.
    fenced: AtomicBool,
    /// How many times this incarnation has become ready (published as
    /// `ready` through membership; 0 while catching up): a node that comes
    /// back with the count it had when it was declared dead has not caught
    /// up since, and its peers do not take it back (see `membership`).
    ready_epoch: AtomicU64,
    /// Peers this node saw leave the live set that have not caught up
    /// since (dead, or back with a stale `ready`): their replication is
    /// refused, so a zombie primary gets no write confirmed.
    distrusted: Mutex<HashSet<NodeId>>,
    /// Testing: installs forwarded by other nodes are ignored.
    drop_installs: AtomicBool,
    /// Fault injection: answers to forwarded calls wait this long (ms).
    answer_delay_ms: AtomicU64,
    delay_prepares_only: AtomicBool,
    /// Fault injection: installs are answered Busy, not run.
    busy_installs: AtomicBool,
    /// What to do when a batch of this node's commits was not confirmed
    /// by the region's replicas (the server restarts the process).
    on_lost_batch: Mutex<Option<Box<dyn Fn() + Send + Sync>>>,
    /// Fault injection: right after logging a write of a key with this
    /// prefix, before shipping it to the replicas, the process stops
    /// itself with this signal (SIGKILL: as by kill -9; SIGSTOP: paused).
    crash_before_ship: Mutex<Option<(bytes::Bytes, i32)>>,
    /// Fault injection: a batch with a write of a key with this prefix
    /// goes to one replica only, and the process dies (SIGKILL) once that
    /// one has confirmed it (then the id of that batch).
    ship_to_one: Mutex<Option<(bytes::Bytes, Option<u64>)>>,
    /// Fault injection: this node starts no periodic anti-entropy round
    /// (it still answers peers' rounds).
    repair_paused: AtomicBool,
    /// Which slots this node took over since a view made them its, and
    /// the fences peers' takeovers asked for (see `takeover`).
    takeovers: takeover::Takeovers,
    /// When this node last said it waits for its region to form.
    forming_log: Mutex<Option<Instant>>,
    /// Peers that answered "serving nothing" lately, and when (routed
    /// around, see `routing`); how many, to skip the lock when none.
    not_serving: Mutex<HashMap<NodeId, Instant>>,
    not_serving_count: AtomicUsize,
    /// Unix ms of the last pulse (see `catchup`): a node whose pulses
    /// stopped (a paused process) may have been declared dead meanwhile,
    /// and serves nothing until it has caught up again.
    last_tick: AtomicU64,
    /// Where whole transactions of other regions go to be installed here
    /// as one (see [`units`]); set once the installer runs.
    units_tx: Mutex<Option<mpsc::UnboundedSender<Vec<LogEntry>>>>,
    /// Delivers messages other nodes published to this node's subscribers.
    publish_hook: std::sync::OnceLock<PublishHook>,
    /// The node's function libraries (see [`functions`]).
    functions: std::sync::OnceLock<Arc<dyn FunctionLibraries>>,
    /// Peer frames and datagrams refused (bad timestamps or counts, failed
    /// authentication), and the log's rate limit (see [`untrusted`]).
    frames_refused: AtomicU64,
    refused_log: AtomicU64,
    /// Membership datagrams dropped (do not open, or too old).
    datagrams_dropped: Arc<AtomicU64>,
    /// Per seed (as given): the addresses it resolved to (empty: not
    /// resolved yet; see [`seeds`]).
    seed_addrs: Mutex<Vec<Vec<SocketAddr>>>,
    /// This node's decommission, if one was asked for.
    decommission: decommission::Decommission,
    /// The region's ownership group (`ownership = leases`), once started.
    region: std::sync::OnceLock<Arc<crate::owners::Region>>,
}

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
            leaving: false,
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
            links_down_until: Mutex::new(None),
            peers_forgotten_until: Mutex::new(None),
            boot_ts,
            known: Mutex::new(HashMap::new()),
            acked: Mutex::new(HashMap::new()),
            peers: Mutex::new(HashMap::new()),
            rounds: Mutex::new(HashMap::new()),
            proofs: Mutex::new(HashMap::new()),
            waits: Mutex::new(HashMap::new()),
            epoch: AtomicU64::new(0),
            regions_seen: Mutex::default(),
            lag: Mutex::new(
                hdrhistogram::Histogram::new_with_bounds(1, 3_600_000, 2)
                    .expect("static histogram bounds are valid"),
            ),
            gossip_frames_dropped: AtomicUsize::new(0),
            outboxes: Mutex::new(HashMap::new()),
            heard: Mutex::new(HashMap::new()),
            streams_in: Mutex::new(HashMap::new()),
            merged_in: Mutex::new(HashMap::new()),
            last_view: Mutex::new(HashMap::new()),
            gossip_gaps: AtomicU64::new(0),
            boot_tail: Mutex::new(None),
            handovers_owed: Mutex::default(),
            ready: AtomicBool::new(false),
            booted: Mutex::new(Instant::now()),
            first_gossip: Mutex::new(HashMap::new()),
            ready_at: Mutex::new(None),
            serving: AtomicBool::new(false),
            handed_back: Mutex::new(HashSet::new()),
            handing_back: Mutex::new(HashSet::new()),
            flushes: (0..shards).map(|_| AtomicU64::new(0)).collect(),
            batches: Mutex::new(HashMap::new()),
            fenced: AtomicBool::new(false),
            ready_epoch: AtomicU64::new(0),
            distrusted: Mutex::new(HashSet::new()),
            last_tick: AtomicU64::new(elsa_shard::unix_ms()),
            forming_log: Mutex::new(None),
            drop_installs: AtomicBool::new(false),
            answer_delay_ms: AtomicU64::new(0),
            delay_prepares_only: AtomicBool::new(false),
            busy_installs: AtomicBool::new(false),
            crash_before_ship: Mutex::new(None),
            ship_to_one: Mutex::new(None),
            repair_paused: AtomicBool::new(false),
            takeovers: takeover::Takeovers::new(),
            on_lost_batch: Mutex::new(None),
            not_serving: Mutex::new(HashMap::new()),
            not_serving_count: AtomicUsize::new(0),
            units_tx: Mutex::new(None),
            publish_hook: std::sync::OnceLock::new(),
            functions: std::sync::OnceLock::new(),
            frames_refused: AtomicU64::new(0),
            refused_log: AtomicU64::new(0),
            datagrams_dropped: Arc::new(AtomicU64::new(0)),
            seed_addrs: Mutex::new(Vec::new()),
            decommission: decommission::Decommission::default(),
            region: std::sync::OnceLock::new(),
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
                    tokio::spawn(c.clone().takeover_loop());
                    tokio::spawn(c.clone().expire_requests());
                    tokio::spawn(c.clone().resend_loop());
                    tokio::spawn(c.clone().replication_loop());
                    tokio::spawn(c.clone().pulse());
                    tokio::spawn(c.clone().resolve_seeds());
                    c.start_ownership().await;
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
            let mut known = self.known.lock().unwrap_or_else(|e| e.into_inner());
            for m in &members {
                known.insert(m.node, m.clone());
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
        if ring.regions().len() > 1 {
            // Stream IDs made here carry the node from now on.
            elsa_shard::ops::streams::set_id_tag(node);
        }
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
        let ring = Arc::new(ring);
        self.note_regions(&ring);
        self.ring.store(ring.clone());
        self.takeover_view(&ring);
        // Links to nodes that left close (taken up again if they return
        // before their task ends; see `LINK_CLOSING`).
        let mut links = self.links.lock().unwrap_or_else(|e| e.into_inner());
        links.retain(|node, link| {
            if !live.contains(node) {
                let _ = link.state.compare_exchange(
                    LINK_OPEN,
                    LINK_CLOSING,
                    Ordering::SeqCst,
                    Ordering::SeqCst,
                );
            }
            link.state.load(Ordering::SeqCst) != LINK_ENDED
        });
    }

    /// True when this node holds a replica of every key of its region (no
    /// more nodes in the region than the replication factor): then every
    /// change to any key is installed here too (what CLIENT TRACKING needs).
    pub fn holds_every_key(&self) -> bool {
        let ring = self.ring.load();
        let here = ring
            .members()
            .iter()
            .filter(|m| !self.other_region(&m.region) && !m.leaving)
            .count();
        here <= self.settings.replication_factor.max(1)
    }

    fn other_region(&self, region: &str) -> bool {
        region != self.settings.region
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
    /// From another region, parts of transactions of several keys wait
    /// for the rest (see [`units`]).
    #[allow(clippy::type_complexity)]
    fn merge_lattices(
        &self,
        lattices: Vec<Lattice>,
        durable: Option<()>,
        arrival: Arrival,
    ) -> Vec<oneshot::Receiver<Result<usize, elsa_shard::Refusal>>> {
        self.find_units(&lattices, arrival);
        let park = arrival != Arrival::Direct;
        let ring = self.ring.load();
        let mut per_shard: HashMap<u16, Vec<LogEntry>> = HashMap::new();
        for l in lattices {
            let hash = std::hash::BuildHasher::hash_one(&self.hasher, &l.key[..]);
            if park && !ring.replicates(slot_of(hash), self.settings.node) {
                // Not a key of ours: the rest of a one-shard commit,
                // carried for `find_units`.
                continue;
            }
            per_shard
                .entry(ring.own_shard(slot_of(hash)))
                .or_default()
                .push(LogEntry::from(l));
        }
        let mut waits = Vec::new();
        for (shard, mut entries) in per_shard {
            if arrival == Arrival::Direct {
                if let Some(rx) = self.merge_foreign_records(shard, &mut entries) {
                    waits.extend(durable.map(|_| rx));
                }
            }
            let (reply, rx) = oneshot::channel();
            if let Some(inbox) = self.inboxes.get(usize::from(shard)) {
                let _ = inbox.send(match arrival {
                    Arrival::Resent => ShardMsg::MergeResent { entries, reply },
                    Arrival::Behind => ShardMsg::MergeBehind { entries, reply },
                    _ => ShardMsg::Merge {
                        entries,
                        park,
                        reply,
                    },
                });
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

    /// Every node that was ever in this node's ring (itself included),
    /// each with whether it is in the ring now (alive as membership sees
    /// it), by node id.
    pub fn known_members(&self) -> Vec<(Member, bool)> {
        let ring = self.ring.load();
        let known = self.known.lock().unwrap_or_else(|e| e.into_inner());
        let mut all: Vec<(Member, bool)> =
            ring.members().iter().map(|m| (m.clone(), true)).collect();
        for (node, m) in known.iter() {
            if ring.member(*node).is_none() {
                all.push((m.clone(), false));
            }
        }
        all.sort_by_key(|(m, _)| m.node);
        all
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

    /// The cluster's mode for cross-region commits.
    pub fn replication(&self) -> Replication {
        self.settings.replication
    }

    /// Gossip frames dropped (full queues, emulated loss, cut links).
    pub fn gossip_frames_dropped(&self) -> usize {
        self.gossip_frames_dropped.load(Ordering::Relaxed)
    }
}

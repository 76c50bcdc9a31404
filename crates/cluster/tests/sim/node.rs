//! One simulated Elsa node: real shards, the real ring, the real
//! anti-entropy arithmetic and the real wire frames, over turmoil's
//! simulated TCP. Each function names the `service.rs` function it mirrors;
//! where the sim deviates, the comment says so and why.

use std::cell::{Cell, RefCell};
use std::collections::BTreeMap;
use std::rc::{Rc, Weak};
use std::sync::Arc;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use elsa_cluster::antientropy as ae;
use elsa_cluster::ring::{slot_of, Member, Ring};
use elsa_cluster::watermark::Stream;
use elsa_cluster::wire::{self, Body, Frame, Lattice};
use elsa_lattice::{Hlc, NodeId, PhysicalClock, Ts, Version};
use elsa_shard::table::DIGEST_BUCKETS;
use elsa_shard::wal::codec::LogEntry;
use elsa_shard::{Expiry, HashedKey, KeyHasher, KeyOp, Op, SetCond, SetReply, Shard};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::mpsc;
use turmoil::net::{TcpListener, TcpStream};

/// The peer port every simulated node listens on.
pub const PORT: u16 = 7000;
/// `service::LINK_QUEUE` (frames a link holds before it drops gossip);
/// smaller here so a dead link's queue really fills and drops.
const LINK_QUEUE: usize = 256;
/// `service::AE_BATCH` (lattices per anti-entropy batch).
pub const AE_BATCH: usize = 20_000;
/// Sim-only: a connection that has carried nothing for this long is
/// dropped and re-made. Turmoil's TCP never retransmits, so a segment lost
/// to a partition stalls its stream for ever; a real kernel would
/// retransmit (or reset) instead. Every healthy link carries a frame per
/// merge epoch (gossip one way, its ack the other; epochs are ≤ 100 ms
/// here), so silence this long only happens on a broken stream.
const STALL: Duration = Duration::from_millis(500);
/// Physical time of the simulation's start: 2100-01-01, far above the
/// machine's wall clock, so the skewed simulated clock (observed into the
/// node's HLC before every use) always dominates the shard's system clock.
pub const BASE_MS: u64 = 4_102_444_800_000;

/// A node's skewed physical clock: simulated time plus a fixed offset.
#[derive(Clone, Copy, Debug)]
pub struct SimClock {
    pub offset_ms: i64,
}

impl PhysicalClock for SimClock {
    fn now_ms(&self) -> u64 {
        let elapsed = turmoil::sim_elapsed().unwrap_or_default().as_millis() as i64;
        (BASE_MS as i64 + elapsed + self.offset_ms) as u64
    }
}

/// Simulated time now (inside a host).
pub fn now() -> Duration {
    turmoil::sim_elapsed().unwrap_or_default()
}

/// The host name of a node.
pub fn host(node: NodeId) -> String {
    format!("n{node}")
}

/// The key hash every layer uses (router, shard table, service).
pub fn hash_of(key: &[u8]) -> u64 {
    std::hash::BuildHasher::hash_one(&KeyHasher::default(), key)
}

/// Per-seed settings every node reads.
#[derive(Clone, Debug)]
pub struct Knobs {
    /// `merge-epoch-ms`.
    pub merge_epoch: Duration,
    /// `anti-entropy-ms`; None disables anti-entropy (negative control).
    pub anti_entropy: Option<Duration>,
    /// Writes stop at this simulated time.
    pub writes_until: Duration,
    /// Gap between one node's writes, ms (uniform).
    pub write_gap_ms: (u64, u64),
    /// Percent of writes that are DEL.
    pub del_percent: u32,
    /// Share of writes that are `INCRBY`s of a shared counter key (a
    /// typed key every region's primary increments concurrently).
    pub incr_percent: u32,
    /// `tombstone-ttl-sec`, in ms of the node's clock.
    pub tombstone_ttl_ms: u64,
    /// Batch limit of `bucket_entries` (the service's AE_BATCH).
    pub ae_batch: usize,
    /// Only this node writes (None: every node).
    pub only_writer: Option<NodeId>,
    /// Which acknowledged writes the watermark check holds a node's
    /// watermarks to (see [`WatermarkCheck`]).
    pub watermarks: WatermarkCheck,
}

/// Which of a node's acknowledged writes its watermark must cover. The
/// default is all of them; the two cases where production watermarks were
/// wrong (each has a regression test in `sim/bugs.rs`) can be left out.
#[derive(Clone, Copy, Debug)]
pub struct WatermarkCheck {
    /// Writes an earlier incarnation made (lost with the gossip buffer in
    /// a crash, then passed by the new incarnation's first acked frames).
    pub earlier_boots: bool,
    /// Writes the node itself has since replaced by a younger version
    /// (hidden from `ae_finish`'s "nothing older than the cutoff" proof).
    pub replaced: bool,
}

impl Default for WatermarkCheck {
    fn default() -> Self {
        WatermarkCheck {
            earlier_boots: true,
            replaced: true,
        }
    }
}

/// What survives a crash: the shards' durable state (the sim has no WAL;
/// everything installed counts as logged) and the boot count.
#[derive(Default)]
pub struct Disk {
    pub shards: Vec<Shard>,
    pub boots: u32,
}

/// An acknowledged write: `op_batch` returned on the key's primary.
#[derive(Clone, Debug)]
pub struct Ack {
    pub key: usize,
    pub value: Option<Bytes>,
    pub version: Version,
    pub node: NodeId,
    /// Which incarnation of the node made it (1 = first boot).
    pub boot: u32,
    pub at: Duration,
}

/// Counters over the whole run.
#[derive(Clone, Debug, Default)]
pub struct Stats {
    pub gossip_frames: u64,
    pub gossip_dropped: u64,
    pub gossip_lattices: u64,
    pub ae_rounds: u64,
    pub ae_in_sync: u64,
    pub ae_shipped: u64,
    pub connections: u64,
    pub stalls: u64,
    pub gc_removed: u64,
    /// Node digests and group digests computed (each a 65,536-bucket pass).
    pub digest_passes: u64,
    pub group_passes: u64,
}

/// What typed key `c` is: 0 a counter, 1 a hash, 2 a set, 3 a sorted
/// set (whose one member every region's primary `ZINCRBY`s), 4 a list
/// (`LPUSH`/`RPUSH` of new elements, `LREM` of one it pushed).
pub fn typed_kind(c: usize) -> usize {
    c % 5
}

/// A key of the workload.
pub struct Key {
    pub key: Bytes,
    pub hash: u64,
}

/// Everything a seed's nodes and harness share.
pub struct World {
    pub seed: u64,
    pub knobs: Knobs,
    pub members: Vec<Member>,
    pub skew: BTreeMap<NodeId, i64>,
    pub rings: BTreeMap<NodeId, Arc<Ring>>,
    /// `Cluster::shared`: (node, peer) → buckets both replicate.
    pub shared: BTreeMap<(NodeId, NodeId), Arc<Vec<u16>>>,
    pub disks: BTreeMap<NodeId, Rc<RefCell<Disk>>>,
    pub keys: Vec<Key>,
    pub acks: RefCell<Vec<Ack>>,
    /// Typed keys every region's primary of one changes: counters
    /// (`INCRBY`), hashes (`HSET` of new fields), sets (`SADD`, and `SREM`
    /// of members it added) — by index, see [`typed_kind`].
    pub counters: Vec<Key>,
    /// Acknowledged increments: (key, by).
    pub increments: RefCell<Vec<(usize, i64)>>,
    /// Acknowledged new fields: (key, field, value).
    pub fields: RefCell<Vec<(usize, Bytes, Bytes)>>,
    /// Acknowledged adds (key, member, removed later?).
    pub set_members: RefCell<Vec<(usize, Bytes, bool)>>,
    pub stats: RefCell<Stats>,
    /// `wan-loss` percent for lossy frames to other regions.
    pub loss_percent: Cell<f64>,
    /// Negative control: drop this many gossip frames that carry lattices.
    pub drop_gossip: Cell<usize>,
    /// Things a node saw that must never happen.
    pub violations: RefCell<Vec<String>>,
    /// The running incarnation of each node (gone while it is crashed).
    pub live: RefCell<BTreeMap<NodeId, Weak<Node>>>,
}

impl World {
    pub fn region_of(&self, node: NodeId) -> &str {
        self.members
            .iter()
            .find(|m| m.node == node)
            .map_or("", |m| m.region.as_str())
    }
}

/// One outgoing link (`service::Link`): an unbounded queue, of which
/// gossip and anti-entropy may fill `LINK_QUEUE` before they are dropped.
struct Link {
    node: NodeId,
    region: String,
    tx: mpsc::UnboundedSender<Frame>,
    queued: Cell<usize>,
}

/// An anti-entropy round this node started (`service::Round`).
struct Round {
    peer: NodeId,
    started: Ts,
    cutoff: Ts,
    digest: Rc<Vec<u64>>,
    shipped: Option<usize>,
    younger: bool,
    at: Duration,
}

/// `service::ROUND_TIMEOUT`.
const ROUND_TIMEOUT: Duration = Duration::from_secs(10);

/// One incarnation of a node (the `Cluster` plus the shard workers).
pub struct Node {
    world: Rc<World>,
    me: NodeId,
    region: String,
    ring: Arc<Ring>,
    hlc: Arc<Hlc>,
    clock: SimClock,
    disk: Rc<RefCell<Disk>>,
    links: RefCell<BTreeMap<NodeId, Rc<Link>>>,
    /// `Cluster::acked`: (local shard, peer) → its gossip stream (the
    /// production `Stream`).
    acked: RefCell<BTreeMap<(u16, NodeId), Stream>>,
    /// `Cluster::boot_ts`: the HLC when this incarnation started.
    boot_ts: Ts,
    /// `PeerStats::synced_ts` per peer.
    synced: RefCell<BTreeMap<NodeId, Ts>>,
    rounds: RefCell<BTreeMap<u64, Round>>,
    next_id: Cell<u64>,
    rng: RefCell<StdRng>,
    /// Rounds that found a peer in sync: (peer, ts, how, when), for reports.
    sync_log: RefCell<Vec<(NodeId, Ts, &'static str, Duration)>>,
    /// Sim-only speed-ups (the debug build pays dearly for 65,536-bucket
    /// passes): the node digest, each shard's digests and the group digests
    /// per shared-bucket set are pure functions of the shards, so they are
    /// kept until a shard changes (`generation`, bumped on every change).
    generation: Cell<u64>,
    shard_generation: RefCell<Vec<u64>>,
    shard_digests: RefCell<Vec<Option<Digests>>>,
    digest_cache: RefCell<Option<(u64, Rc<Vec<u64>>)>>,
    groups_cache: RefCell<BTreeMap<usize, (u64, Rc<GroupDigests>)>>,
}

/// A shard's digests, with the shard generation they were taken at.
type Digests = (u64, Box<[u64]>);

/// `antientropy::group_digests` output.
type GroupDigests = (Vec<u32>, Vec<u64>);

/// The host software: boots (or recovers) the node and serves until the
/// simulation crashes it.
pub async fn boot(world: Rc<World>, me: NodeId) -> turmoil::Result {
    let _guard = PanicGuard(world.clone(), "node");
    let node = Rc::new(Node::start(world, me));
    node.world
        .live
        .borrow_mut()
        .insert(me, Rc::downgrade(&node));
    node.links_up();
    let shards = node.disk.borrow().shards.len();
    for s in 0..shards {
        spawn(&node.world, "epoch", node.clone().epoch_loop(s));
    }
    if let Some(period) = node.world.knobs.anti_entropy {
        spawn(
            &node.world,
            "anti-entropy",
            node.clone().anti_entropy_loop(period),
        );
    }
    spawn(&node.world, "workload", node.clone().workload());
    node.accept_loop().await;
    Ok(())
}

/// Reports a panic in a node's task as a violation (a panicking task
/// would otherwise just vanish from its runtime).
struct PanicGuard(Rc<World>, &'static str);

impl Drop for PanicGuard {
    fn drop(&mut self) {
        if std::thread::panicking() {
            if let Ok(mut v) = self.0.violations.try_borrow_mut() {
                v.push(format!("a {} task panicked", self.1));
            }
        }
    }
}

/// `spawn_local`, with panics reported.
fn spawn(
    world: &Rc<World>,
    what: &'static str,
    task: impl std::future::Future<Output = ()> + 'static,
) {
    let guard = PanicGuard(world.clone(), what);
    tokio::task::spawn_local(async move {
        let _guard = guard;
        task.await;
    });
}

impl Node {
    /// `node::recover` + `Cluster::start`: a fresh HLC and fresh shards; on a
    /// restart the old shards' lattices are replayed into the new ones
    /// (`Shard::restore`, as recovery does from the log) and the clock
    /// observes the largest commit. The gossip buffer, links, acks, rounds
    /// and sync state of the previous incarnation are gone.
    fn start(world: Rc<World>, me: NodeId) -> Node {
        let disk = world.disks[&me].clone();
        let ring = world.rings[&me].clone();
        let member = world
            .members
            .iter()
            .find(|m| m.node == me)
            .expect("member")
            .clone();
        let clock = SimClock {
            offset_ms: world.skew[&me],
        };
        let hlc = Arc::new(Hlc::default());
        {
            let mut d = disk.borrow_mut();
            d.boots += 1;
            let mut fresh: Vec<Shard> = (0..usize::from(member.shards))
                .map(|i| Shard::new(i, me, KeyHasher::default(), hlc.clone()))
                .collect();
            let all = vec![u64::MAX; DIGEST_BUCKETS / 64];
            let mut max_ts = 0;
            for old in &d.shards {
                for e in old.bucket_entries(&all, usize::MAX) {
                    let hash = hash_of(&e.key);
                    max_ts = max_ts.max(e.version.commit_ts);
                    let shard = usize::from(ring.own_shard(slot_of(hash)));
                    fresh[shard].restore(hash, &e);
                }
            }
            hlc.observe(max_ts);
            d.shards = fresh;
        }
        hlc.observe(clock.now_ms() << 16);
        let boot_ts = hlc.now();
        let seed = world
            .seed
            .wrapping_mul(0x9e37_79b9_7f4a_7c15)
            .wrapping_add(u64::from(me) << 32)
            .wrapping_add(u64::from(disk.borrow().boots));
        Node {
            me,
            region: member.region,
            ring,
            hlc,
            clock,
            disk,
            links: RefCell::new(BTreeMap::new()),
            acked: RefCell::new(BTreeMap::new()),
            boot_ts,
            synced: RefCell::new(BTreeMap::new()),
            rounds: RefCell::new(BTreeMap::new()),
            next_id: Cell::new(1),
            sync_log: RefCell::new(Vec::new()),
            rng: RefCell::new(StdRng::seed_from_u64(seed)),
            generation: Cell::new(0),
            shard_generation: RefCell::new(vec![0; usize::from(member.shards)]),
            shard_digests: RefCell::new(vec![None; usize::from(member.shards)]),
            digest_cache: RefCell::new(None),
            groups_cache: RefCell::new(BTreeMap::new()),
            world,
        }
    }

    /// The node's skewed physical clock drives its HLC: `Shard` holds an
    /// `Arc<Hlc>` (system clock), so the skewed reading is observed into it
    /// before every use — the same timestamps an `Hlc<SimClock>` would hand
    /// out (plus one logical tick).
    fn tick(&self) {
        self.hlc.observe(self.clock.now_ms() << 16);
    }

    fn now_ts(&self) -> Ts {
        self.tick();
        self.hlc.now()
    }

    fn next_id(&self) -> u64 {
        let id = self.next_id.get();
        self.next_id.set(id + 1);
        id
    }

    fn others(&self) -> Vec<NodeId> {
        self.ring
            .members()
            .iter()
            .map(|m| m.node)
            .filter(|n| *n != self.me)
            .collect()
    }

    // ---- clients ------------------------------------------------------

    /// Lone SET/DEL on keys this node is the primary of in its region (a
    /// client anywhere in the region is routed there: `Cluster::route`).
    async fn workload(self: Rc<Self>) {
        let own = self.ring.own_region();
        let mine: Vec<usize> = (0..self.world.keys.len())
            .filter(|&k| {
                let slot = slot_of(self.world.keys[k].hash);
                self.ring.replicas(slot, own).first().map(|id| id.node) == Some(self.me)
            })
            .collect();
        let my_counters: Vec<usize> = (0..self.world.counters.len())
            .filter(|&k| {
                let slot = slot_of(self.world.counters[k].hash);
                self.ring.replicas(slot, own).first().map(|id| id.node) == Some(self.me)
            })
            .collect();
        if (mine.is_empty() && my_counters.is_empty())
            || self.world.knobs.only_writer.is_some_and(|w| w != self.me)
        {
            return;
        }
        let knobs = &self.world.knobs;
        let mut n = 0u64;
        loop {
            let (gap, k, del, incr) = {
                let mut rng = self.rng.borrow_mut();
                let incr = (!my_counters.is_empty()
                    && (mine.is_empty() || rng.gen_range(0..100) < knobs.incr_percent))
                    .then(|| {
                        (
                            my_counters[rng.gen_range(0..my_counters.len())],
                            rng.gen_range(-3i64..=10),
                        )
                    });
                (
                    rng.gen_range(knobs.write_gap_ms.0..=knobs.write_gap_ms.1),
                    if mine.is_empty() {
                        0
                    } else {
                        mine[rng.gen_range(0..mine.len())]
                    },
                    rng.gen_range(0..100) < knobs.del_percent,
                    incr,
                )
            };
            tokio::time::sleep(Duration::from_millis(gap)).await;
            if now() >= knobs.writes_until {
                return;
            }
            if let Some((c, by)) = incr {
                self.increment(c, by);
                continue;
            }
            n += 1;
            let boots = self.disk.borrow().boots;
            let value = (!del).then(|| Bytes::from(format!("{}.{}.{}", self.me, boots, n)));
            self.write(k, value);
        }
    }

    /// A change of typed key `c` on its primary shard (the shard installs
    /// a delta, gossiped as one): `INCRBY by` of a counter, `HSET` of a
    /// new field of a hash, `SADD` of a new member to a set — or, now and
    /// then, `SREM` of a member this node added.
    fn increment(&self, c: usize, by: i64) {
        let key = &self.world.counters[c];
        let slot = slot_of(key.hash);
        let id = self.ring.replicas(slot, self.ring.own_region())[0];
        assert_eq!(id.node, self.me);
        self.tick();
        let seq = self.next_id();
        let boots = self.disk.borrow().boots;
        let elem = Bytes::from(format!("n{}.{boots}.{seq}", self.me));
        // SREM of one of this node's acknowledged, not removed members.
        let removable = (matches!(typed_kind(c), 2 | 4) && by < 0)
            .then(|| {
                self.world
                    .set_members
                    .borrow()
                    .iter()
                    .position(|(k, m, gone)| {
                        *k == c && !gone && m.starts_with(format!("n{}.", self.me).as_bytes())
                    })
            })
            .flatten();
        let op = match typed_kind(c) {
            0 => Op::IncrBy(by),
            3 => Op::ZSets(
                elsa_shard::ops::zsets::ZSetOp::parse(
                    vec![
                        Bytes::from_static(b"ZINCRBY"),
                        key.key.clone(),
                        Bytes::from(by.to_string()),
                        Bytes::from_static(b"shared"),
                    ],
                    0,
                )
                .expect("ZINCRBY parses"),
            ),
            4 => {
                let args: Vec<Bytes> = match removable {
                    Some(i) => vec![
                        Bytes::from_static(b"LREM"),
                        key.key.clone(),
                        Bytes::from_static(b"1"),
                        self.world.set_members.borrow()[i].1.clone(),
                    ],
                    None => vec![
                        Bytes::from_static(if by % 2 == 0 { b"LPUSH" } else { b"RPUSH" }),
                        key.key.clone(),
                        elem.clone(),
                    ],
                };
                Op::Lists(elsa_shard::ops::lists::ListOp::parse(args).expect("list op parses"))
            }
            1 => Op::Hash(elsa_shard::ops::hashes::HashOp::Set {
                pairs: vec![(elem.clone(), Bytes::from(by.to_string()))],
                reply: elsa_shard::ops::hashes::HSetReply::Count,
            }),
            _ => match removable {
                Some(i) => Op::Sets(elsa_shard::ops::sets::SetOp::Rem(vec![self
                    .world
                    .set_members
                    .borrow()[i]
                    .1
                    .clone()])),
                None => Op::Sets(elsa_shard::ops::sets::SetOp::Add(vec![elem.clone()])),
            },
        };
        let mut disk = self.disk.borrow_mut();
        let shard = &mut disk.shards[usize::from(id.index)];
        let replies = shard.op_batch(&[KeyOp {
            key: key.key.clone(),
            hash: key.hash,
            op: op.clone(),
        }]);
        self.changed(usize::from(id.index));
        let reply = replies.first().cloned();
        match (typed_kind(c), reply) {
            (0, Some(elsa_shard::OpReply::Int(_))) | (3, Some(elsa_shard::OpReply::Double(_))) => {
                self.world.increments.borrow_mut().push((c, by))
            }
            (1, Some(elsa_shard::OpReply::Int(1))) => {
                self.world
                    .fields
                    .borrow_mut()
                    .push((c, elem, Bytes::from(by.to_string())))
            }
            (4, Some(elsa_shard::OpReply::Int(n))) if n >= 1 => match removable {
                Some(i) => self.world.set_members.borrow_mut()[i].2 = true,
                None => self.world.set_members.borrow_mut().push((c, elem, false)),
            },
            (_, Some(elsa_shard::OpReply::Int(1))) => match removable {
                Some(i) => self.world.set_members.borrow_mut()[i].2 = true,
                None => self.world.set_members.borrow_mut().push((c, elem, false)),
            },
            (_, other) => self.world.violations.borrow_mut().push(format!(
                "node {}: {op:?} of typed key {c} answered {other:?}",
                self.me
            )),
        }
    }

    /// One lone command through `Shard::op_batch` on the key's primary
    /// shard; the version it stored is read back (`op_read`) in the same
    /// actor step.
    fn write(&self, k: usize, value: Option<Bytes>) {
        let key = &self.world.keys[k];
        let slot = slot_of(key.hash);
        let id = self.ring.replicas(slot, self.ring.own_region())[0];
        assert_eq!(id.node, self.me);
        assert_eq!(id.index, self.ring.own_shard(slot), "primary shard");
        let op = match &value {
            Some(v) => Op::Set {
                value: v.clone(),
                cond: SetCond::Always,
                expiry: Expiry::Clear,
                reply: SetReply::Ok,
            },
            None => Op::Del,
        };
        self.tick();
        let before = self.hlc.peek();
        let mut disk = self.disk.borrow_mut();
        let shard = &mut disk.shards[usize::from(id.index)];
        let replies = shard.op_batch(&[KeyOp {
            key: key.key.clone(),
            hash: key.hash,
            op,
        }]);
        assert_eq!(replies.len(), 1);
        self.changed(usize::from(id.index));
        let state = shard
            .op_read(&HashedKey {
                key: key.key.clone(),
                hash: key.hash,
            })
            .expect("no holds in the sim");
        let fresh = state.version.origin == self.me && state.version.commit_ts > before;
        if !fresh {
            if value.is_some() {
                self.world.violations.borrow_mut().push(format!(
                    "node {}: acknowledged SET of key {k} not installed (stored {:?}, clock {before})",
                    self.me, state.version
                ));
            }
            return; // DEL of a key absent here: no new lattice
        }
        if state.current.as_ref().map(|c| &c.value) != value.as_ref() {
            self.world.violations.borrow_mut().push(format!(
                "node {}: key {k} reads {:?} right after writing {:?}",
                self.me, state.current, value
            ));
        }
        self.world.acks.borrow_mut().push(Ack {
            key: k,
            value,
            version: state.version,
            node: self.me,
            boot: disk.boots,
            at: now(),
        });
    }

    // ---- merge epoch (server `node.rs` epoch timer) -------------------

    /// Per shard: every merge epoch, `flush_gossip` → `ship_gossip`; every
    /// second, `collect_garbage` below `min(now - ttl, tombstone_horizon)`.
    async fn epoch_loop(self: Rc<Self>, shard: usize) {
        let mut tick = tokio::time::interval(self.world.knobs.merge_epoch);
        let mut last_gc = now();
        loop {
            tick.tick().await;
            let mut entries = self.disk.borrow_mut().shards[shard].flush_gossip();
            // The buffer drains in hash-set order; sorted for reproducible seeds.
            entries.sort_by(|a, b| a.key.cmp(&b.key));
            self.ship_gossip(shard, entries);
            if now().saturating_sub(last_gc) >= Duration::from_secs(1) {
                last_gc = now();
                let now_ms = self.clock.now_ms();
                let horizon = (now_ms.saturating_sub(self.world.knobs.tombstone_ttl_ms) << 16)
                    .min(self.tombstone_horizon());
                let removed = self.disk.borrow_mut().shards[shard].collect_garbage(now_ms, horizon);
                if removed > 0 {
                    self.changed(shard);
                }
                self.world.stats.borrow_mut().gc_removed += removed as u64;
            }
        }
    }

    /// `Cluster::ship_gossip`.
    fn ship_gossip(&self, shard: usize, entries: Vec<LogEntry>) {
        let flushed_ts = self.now_ts();
        let mut per_node: BTreeMap<NodeId, Vec<Lattice>> =
            self.others().into_iter().map(|n| (n, Vec::new())).collect();
        for e in &entries {
            for id in self.ring.all_replicas(slot_of(hash_of(&e.key))) {
                if id.node != self.me {
                    if let Some(v) = per_node.get_mut(&id.node) {
                        v.push(Lattice::from(e));
                    }
                }
            }
        }
        for (node, lattices) in per_node {
            let carried = lattices.len() as u64;
            let frame = Frame::new(Body::Gossip(wire::Gossip {
                to_shard: 0,
                from_shard: shard as u32,
                flushed_ts,
                lattices,
                after_gap: false,
                ..Default::default()
            }));
            // Recorded whether or not it leaves: a dropped frame is never
            // acknowledged, which is what holds the watermark back.
            self.acked
                .borrow_mut()
                .entry((shard as u16, node))
                .or_insert_with(|| Stream::after_boot(self.boot_ts))
                .sent(flushed_ts);
            // Negative control: lose a frame that carries lattices.
            let forced = carried > 0 && self.world.drop_gossip.get() > 0;
            if forced {
                self.world.drop_gossip.set(self.world.drop_gossip.get() - 1);
            }
            let sent = !forced && self.send(node, frame);
            let mut stats = self.world.stats.borrow_mut();
            stats.gossip_frames += 1;
            if sent {
                stats.gossip_lattices += carried;
            } else {
                stats.gossip_dropped += 1;
            }
        }
    }

    /// `Cluster::tombstone_horizon`.
    fn tombstone_horizon(&self) -> Ts {
        let synced = self.synced.borrow();
        self.others()
            .iter()
            .map(|n| synced.get(n).copied().unwrap_or(0))
            .min()
            .unwrap_or(u64::MAX)
    }

    /// `Cluster::watermark`: every commit of this node's shards below the
    /// answer has been merged by every node of `region` that replicates
    /// its key.
    pub fn watermark(&self, region: &str) -> u64 {
        let peers: Vec<NodeId> = self
            .ring
            .members()
            .iter()
            .filter(|m| m.region == region && m.node != self.me)
            .map(|m| m.node)
            .collect();
        if peers.is_empty() {
            return if region == self.region {
                self.hlc.peek()
            } else {
                0
            };
        }
        let acked = self.acked.borrow();
        let mut wm = u64::MAX;
        for s in 0..self.disk.borrow().shards.len() as u16 {
            for p in &peers {
                wm = wm.min(acked.get(&(s, *p)).map_or(0, |a| a.through()));
            }
        }
        wm
    }

    /// The gossip streams towards `peer`, for failure reports.
    pub fn streams_to(&self, peer: NodeId) -> String {
        self.acked
            .borrow()
            .iter()
            .filter(|((_, p), _)| *p == peer)
            .map(|((s, _), st)| {
                format!(
                    "shard {s}: through {} unrecorded {} outstanding {:?}",
                    st.through(),
                    st.unrecorded(),
                    st.outstanding().take(4).collect::<Vec<_>>()
                )
            })
            .chain(
                self.sync_log
                    .borrow()
                    .iter()
                    .filter(|l| l.0 == peer)
                    .rev()
                    .take(3)
                    .map(|l| format!("synced at {} ({}) at {:?}", l.1, l.2, l.3)),
            )
            .collect::<Vec<_>>()
            .join("; ")
    }

    // ---- links --------------------------------------------------------

    /// `Cluster::link`.
    fn link(self: &Rc<Self>, node: NodeId) -> Rc<Link> {
        if let Some(l) = self.links.borrow().get(&node) {
            return l.clone();
        }
        let (tx, rx) = mpsc::unbounded_channel();
        let link = Rc::new(Link {
            node,
            region: self.world.region_of(node).to_string(),
            tx,
            queued: Cell::new(0),
        });
        self.links.borrow_mut().insert(node, link.clone());
        spawn(&self.world, "link", self.clone().run_link(link.clone(), rx));
        link
    }

    /// `Cluster::send` for lossy frames (gossip and anti-entropy): emulated
    /// WAN loss to other regions, and a full queue drops.
    fn send(&self, node: NodeId, frame: Frame) -> bool {
        // `link` needs an Rc of self; links are made up front (see `links_up`).
        let Some(link) = self.links.borrow().get(&node).cloned() else {
            return false;
        };
        let loss = self.world.loss_percent.get();
        if link.region != self.region
            && loss > 0.0
            && self.rng.borrow_mut().gen::<f64>() * 100.0 < loss
        {
            return false;
        }
        if link.queued.get() >= LINK_QUEUE {
            return false; // a slow or dead peer: anti-entropy will repair
        }
        link.queued.set(link.queued.get() + 1);
        if link.tx.send(frame).is_err() {
            link.queued.set(link.queued.get() - 1);
            return false;
        }
        true
    }

    /// Makes the link to every peer (the service makes them on first use;
    /// every peer gets gossip each epoch, so that is at once anyway).
    fn links_up(self: &Rc<Self>) {
        for n in self.others() {
            self.link(n);
        }
    }

    /// `Cluster::run_link`.
    async fn run_link(self: Rc<Self>, link: Rc<Link>, mut rx: mpsc::UnboundedReceiver<Frame>) {
        let mut backoff = Duration::from_millis(50);
        loop {
            let conn = tokio::time::timeout(
                Duration::from_secs(1),
                TcpStream::connect((host(link.node), PORT)),
            )
            .await;
            if let Ok(Ok(stream)) = conn {
                backoff = Duration::from_millis(50);
                self.world.stats.borrow_mut().connections += 1;
                self.serve_link(&link, stream, &mut rx).await;
            }
            while rx.try_recv().is_ok() {
                link.queued.set(link.queued.get() - 1);
            }
            tokio::time::sleep(backoff).await;
            backoff = (backoff * 2).min(Duration::from_secs(1));
        }
    }

    /// `Cluster::serve_link`: hello, then frames out (batched) and answers
    /// in, until either side fails (or, sim only, the stream stalls).
    async fn serve_link(
        &self,
        link: &Link,
        stream: TcpStream,
        rx: &mut mpsc::UnboundedReceiver<Frame>,
    ) {
        let (mut rd, mut wr) = stream.into_split();
        let mut buf = BytesMut::new();
        Frame::new(Body::Hello(wire::Hello {
            node: self.me,
            region: self.region.clone(),
            ..Default::default()
        }))
        .encode_to(&mut buf);
        if wr.write_all(&buf).await.is_err() {
            return;
        }
        let writer = async {
            let mut buf = BytesMut::new();
            while let Some(frame) = rx.recv().await {
                link.queued.set(link.queued.get() - 1);
                buf.clear();
                frame.encode_to(&mut buf);
                while buf.len() < 1 << 20 {
                    let Ok(f) = rx.try_recv() else { break };
                    link.queued.set(link.queued.get() - 1);
                    f.encode_to(&mut buf);
                }
                if wr.write_all(&buf).await.is_err() {
                    return;
                }
            }
        };
        let reader = async {
            let mut buf = BytesMut::with_capacity(64 * 1024);
            loop {
                match wire::decode_frame(&mut buf) {
                    Ok(Some(frame)) => {
                        self.on_link_frame(link.node, frame);
                        continue;
                    }
                    Ok(None) => {}
                    Err(_) => return,
                }
                match tokio::time::timeout(STALL, rd.read_buf(&mut buf)).await {
                    Ok(Ok(n)) if n > 0 => {}
                    Ok(_) => return,
                    Err(_) => {
                        self.world.stats.borrow_mut().stalls += 1;
                        return;
                    }
                }
            }
        };
        // `biased`: tokio's own select! order is randomly seeded outside
        // `tokio_unstable`, which would make runs irreproducible.
        tokio::select! {
            biased;
            _ = writer => {}
            _ = reader => {}
        }
    }

    /// `Cluster::on_link_frame`: answers on a link this node opened.
    fn on_link_frame(&self, peer: NodeId, frame: Frame) {
        let Some(body) = frame.body else { return };
        match body {
            Body::GossipAck(a) => {
                self.acked
                    .borrow_mut()
                    .entry((a.from_shard as u16, peer))
                    .or_insert_with(|| Stream::after_boot(self.boot_ts))
                    .acked(a.flushed_ts);
            }
            Body::AeBuckets(b) => self.ae_compare(peer, b),
            Body::AeEntries(e) => {
                let received = e.lattices.len();
                self.merge_lattices(e.lattices);
                self.ae_finish(peer, e.round, received);
            }
            _ => {}
        }
    }

    // ---- the accepting side -------------------------------------------

    /// `Cluster::accept_loop`.
    async fn accept_loop(self: Rc<Self>) {
        let listener = TcpListener::bind(("0.0.0.0", PORT))
            .await
            .expect("bind the peer port");
        loop {
            if let Ok((stream, _)) = listener.accept().await {
                spawn(&self.world, "peer", self.clone().serve_peer(stream));
            }
        }
    }

    /// `Cluster::serve_peer`.
    async fn serve_peer(self: Rc<Self>, stream: TcpStream) {
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
            match tokio::time::timeout(STALL, rd.read_buf(&mut buf)).await {
                Ok(Ok(n)) if n > 0 => {}
                _ => return,
            }
        };
        let (tx, mut rx) = mpsc::unbounded_channel::<Frame>();
        let writer = tokio::task::spawn_local(async move {
            let mut out = BytesMut::new();
            while let Some(frame) = rx.recv().await {
                out.clear();
                frame.encode_to(&mut out);
                while let Ok(f) = rx.try_recv() {
                    f.encode_to(&mut out);
                    if out.len() > 1 << 20 {
                        break;
                    }
                }
                if wr.write_all(&out).await.is_err() {
                    return;
                }
            }
        });
        'conn: loop {
            loop {
                match wire::decode_frame(&mut buf) {
                    Ok(Some(frame)) => self.on_peer_frame(&hello, frame, &tx),
                    Ok(None) => break,
                    Err(_) => break 'conn,
                }
            }
            match tokio::time::timeout(STALL, rd.read_buf(&mut buf)).await {
                Ok(Ok(n)) if n > 0 => {}
                Ok(_) => break,
                Err(_) => {
                    self.world.stats.borrow_mut().stalls += 1;
                    break;
                }
            }
        }
        writer.abort();
    }

    /// `Cluster::on_peer_frame` (gossip and anti-entropy arms).
    fn on_peer_frame(&self, hello: &wire::Hello, frame: Frame, tx: &mpsc::UnboundedSender<Frame>) {
        let Some(body) = frame.body else { return };
        match body {
            Body::Gossip(g) => {
                self.hlc.observe(g.flushed_ts);
                self.merge_lattices(g.lattices);
                // Merged (no log in the sim: durable at once): ack.
                let _ = tx.send(Frame::new(Body::GossipAck(wire::GossipAck {
                    from_shard: g.from_shard,
                    flushed_ts: g.flushed_ts,
                    after_gap: g.after_gap,
                    ..Default::default()
                })));
            }
            Body::AeGroups(g) => {
                let Some(shared) = self.shared_with(hello.node) else {
                    return;
                };
                let digest = self.node_digest();
                let mine = self.group_digests(&digest, &shared);
                let groups = ae::differing_groups(&mine, &g.groups, &g.digests);
                let (buckets, digests) =
                    ae::bucket_digests(&digest, &in_groups(&shared, &groups), &groups);
                let _ = tx.send(Frame::new(Body::AeBuckets(wire::AeBuckets {
                    round: g.round,
                    buckets,
                    digests,
                    floors: None,
                    functions: 0,
                })));
            }
            Body::AeEntries(e) => {
                self.merge_lattices(e.lattices);
                if !e.pull.is_empty() {
                    let (lattices, _) = self.bucket_lattices(&e.pull, self.cutoff());
                    self.world.stats.borrow_mut().ae_shipped += lattices.len() as u64;
                    let _ = tx.send(Frame::new(Body::AeEntries(wire::AeEntries {
                        round: e.round,
                        lattices,
                        pull: Vec::new(),
                        full: false,
                        ..Default::default()
                    })));
                }
            }
            _ => {}
        }
    }

    // ---- shard access -------------------------------------------------

    /// `Cluster::merge_lattices`: each lattice to the local shard of its
    /// slot, as `ShardMsg::Merge` → `Shard::op_merge`.
    fn merge_lattices(&self, lattices: Vec<Lattice>) {
        let mut per_shard: BTreeMap<u16, Vec<LogEntry>> = BTreeMap::new();
        for l in lattices {
            let shard = self.ring.own_shard(slot_of(hash_of(&l.key)));
            per_shard.entry(shard).or_default().push(LogEntry::from(l));
        }
        let mut disk = self.disk.borrow_mut();
        for (shard, entries) in per_shard {
            if let Some(s) = disk.shards.get_mut(usize::from(shard)) {
                if s.op_merge(&entries, false).expect("no log, no refusal") > 0 {
                    self.changed(usize::from(shard));
                }
            }
        }
    }

    fn shared_with(&self, peer: NodeId) -> Option<Arc<Vec<u16>>> {
        self.world.shared.get(&(self.me, peer)).cloned()
    }

    fn changed(&self, shard: usize) {
        self.generation.set(self.generation.get() + 1);
        self.shard_generation.borrow_mut()[shard] += 1;
    }

    /// `Cluster::node_digest`: `ShardMsg::Digests` (`Shard::digests`) of
    /// every shard, combined by `antientropy::node_digest`.
    fn node_digest(&self) -> Rc<Vec<u64>> {
        let generation = self.generation.get();
        if let Some((g, d)) = &*self.digest_cache.borrow() {
            if *g == generation {
                return d.clone();
            }
        }
        self.world.stats.borrow_mut().digest_passes += 1;
        let disk = self.disk.borrow();
        let shard_generation = self.shard_generation.borrow();
        let mut cached = self.shard_digests.borrow_mut();
        let per_shard: Vec<Box<[u64]>> = disk
            .shards
            .iter()
            .enumerate()
            .map(|(i, shard)| match &cached[i] {
                Some((g, d)) if *g == shard_generation[i] => d.clone(),
                _ => {
                    let d = shard.digests();
                    cached[i] = Some((shard_generation[i], d.clone()));
                    d
                }
            })
            .collect();
        let d = Rc::new(match <[Box<[u64]>; 1]>::try_from(per_shard) {
            // One shard keeps every slot: `node_digest` is its digest as is.
            Ok([only]) => only.into_vec(),
            Err(per_shard) => ae::node_digest(&self.ring, &per_shard),
        });
        *self.digest_cache.borrow_mut() = Some((generation, d.clone()));
        d
    }

    /// `antientropy::group_digests` of the node digest over `shared` (one
    /// of the world's deduplicated shared-bucket sets).
    fn group_digests(&self, digest: &[u64], shared: &Arc<Vec<u16>>) -> Rc<GroupDigests> {
        let generation = self.generation.get();
        let id = Arc::as_ptr(shared) as usize;
        if let Some((g, d)) = self.groups_cache.borrow().get(&id) {
            if *g == generation {
                return d.clone();
            }
        }
        self.world.stats.borrow_mut().group_passes += 1;
        let d = Rc::new(ae::group_digests(digest, shared));
        self.groups_cache
            .borrow_mut()
            .insert(id, (generation, d.clone()));
        d
    }

    /// `Cluster::bucket_lattices`: `ShardMsg::BucketEntries` of every shard
    /// (`Shard::bucket_entries_before`).
    fn bucket_lattices(&self, buckets: &[u32], older_than: Ts) -> (Vec<Lattice>, bool) {
        let wanted = ae::bitmap(buckets);
        let disk = self.disk.borrow();
        let mut younger = false;
        let mut out = Vec::new();
        for s in &disk.shards {
            let batch = s.bucket_batch(&wanted, self.world.knobs.ae_batch, older_than);
            out.extend(batch.entries.iter().map(Lattice::from));
            younger |= batch.younger;
        }
        (out, younger)
    }

    // ---- anti-entropy -------------------------------------------------

    /// `Cluster::anti_entropy_loop`: one round per period, with the next
    /// peer in turn (the rotation starts at a different peer on every node).
    async fn anti_entropy_loop(self: Rc<Self>, period: Duration) {
        let mut tick = tokio::time::interval(period);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut turn = 0usize;
        loop {
            tick.tick().await;
            let mut peers = self.others();
            if peers.is_empty() {
                continue;
            }
            let first = self.me as usize % peers.len();
            peers.rotate_left(first);
            let peer = peers[turn % peers.len()];
            turn = turn.wrapping_add(1);
            let Some(shared) = self.shared_with(peer) else {
                continue;
            };
            let started = self.now_ts();
            let cutoff = self.cutoff();
            let digest = self.node_digest();
            let round = self.next_id();
            let (groups, digests) = (*self.group_digests(&digest, &shared)).clone();
            {
                let mut rounds = self.rounds.borrow_mut();
                rounds.retain(|_, r| now().saturating_sub(r.at) < ROUND_TIMEOUT);
                rounds.insert(
                    round,
                    Round {
                        peer,
                        started,
                        cutoff,
                        digest,
                        shipped: None,
                        younger: false,
                        at: now(),
                    },
                );
            }
            self.world.stats.borrow_mut().ae_rounds += 1;
            self.send(
                peer,
                Frame::new(Body::AeGroups(wire::AeGroups {
                    fence: Vec::new(),
                    round,
                    groups,
                    digests,
                    floors: None,
                    functions: 0,
                })),
            );
        }
    }

    /// `Cluster::ae_compare`: step 3 of a round this node started.
    fn ae_compare(&self, peer: NodeId, b: wire::AeBuckets) {
        let Some(mut round) = self
            .rounds
            .borrow_mut()
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
            let mut groups: Vec<u32> = b.buckets.iter().map(|x| x / ae::GROUP as u32).collect();
            groups.sort_unstable();
            groups.dedup();
            ae::differing_buckets(
                &round.digest,
                &in_groups(&shared, &groups),
                &groups,
                &b.buckets,
                &b.digests,
            )
        };
        if differ.is_empty() {
            self.sync_log
                .borrow_mut()
                .push((peer, round.started, "identical digests", now()));
            self.mark_synced(peer, round.started, true);
            return;
        }
        let (lattices, younger) = self.bucket_lattices(&differ, round.cutoff);
        self.world.stats.borrow_mut().ae_shipped += lattices.len() as u64;
        round.shipped = Some(lattices.len());
        round.younger = younger;
        self.rounds.borrow_mut().insert(b.round, round);
        self.send(
            peer,
            Frame::new(Body::AeEntries(wire::AeEntries {
                round: b.round,
                lattices,
                pull: differ,
                full: false,
                ..Default::default()
            })),
        );
    }

    /// `Cluster::ae_finish`: step 4 answered; nothing older than the
    /// cutoff shipped either way proves the pair in sync up to the cutoff
    /// (for this node's streams only if no younger lattice was held back).
    fn ae_finish(&self, peer: NodeId, round_id: u64, received: usize) {
        let round = self
            .rounds
            .borrow_mut()
            .remove(&round_id)
            .filter(|r| r.peer == peer);
        if let Some(r) = round {
            if r.shipped == Some(0) && received == 0 {
                self.sync_log.borrow_mut().push((
                    peer,
                    r.cutoff,
                    if r.younger {
                        "nothing older than the cutoff (the peer's data only)"
                    } else {
                        "nothing older than the cutoff"
                    },
                    now(),
                ));
                self.mark_synced(peer, r.cutoff, !r.younger);
            }
        }
    }

    /// `Cluster::mark_synced`.
    fn mark_synced(&self, peer: NodeId, ts: Ts, ours: bool) {
        self.world.stats.borrow_mut().ae_in_sync += 1;
        {
            let mut synced = self.synced.borrow_mut();
            let s = synced.entry(peer).or_insert(0);
            *s = (*s).max(ts);
        }
        if !ours {
            return;
        }
        let mut acked = self.acked.borrow_mut();
        for s in 0..self.disk.borrow().shards.len() as u16 {
            acked
                .entry((s, peer))
                .or_insert_with(|| Stream::after_boot(self.boot_ts))
                .synced(ts);
        }
    }

    /// `Cluster::cutoff` (no emulated WAN delay in the sim: turmoil's
    /// latency is the WAN).
    fn cutoff(&self) -> Ts {
        let settle = 2 * self.world.knobs.merge_epoch + Duration::from_millis(100);
        self.now_ts()
            .saturating_sub((settle.as_millis() as u64) << 16)
    }
}

/// The buckets of `shared` (sorted) that lie in `groups` (sorted). Sim-only
/// speed-up: `bucket_digests` and `differing_buckets` only ever look at the
/// shared buckets inside `groups`, so handing them this subset gives the
/// same answer without a pass over every shared bucket
/// (`prefiltered_shared_buckets_give_the_same_answers` checks it).
pub fn in_groups(shared: &[u16], groups: &[u32]) -> Vec<u16> {
    let mut out = Vec::new();
    for &g in groups {
        let lo = g as usize * ae::GROUP;
        let from = shared.partition_point(|&b| usize::from(b) < lo);
        let to = shared.partition_point(|&b| usize::from(b) < lo + ae::GROUP);
        out.extend_from_slice(&shared[from..to]);
    }
    out
}

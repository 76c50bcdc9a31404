//! One seed's simulation: the topology, the fault schedule, the turmoil
//! run, healing, and the convergence check after it.

use std::cell::{Cell, RefCell};
use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::rc::Rc;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use elsa_cluster::ring::{Member, Ring};
use elsa_lattice::NodeId;
use elsa_shard::table::DIGEST_BUCKETS;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use crate::check;
use crate::node::{self, hash_of, host, Disk, Key, Knobs, Stats, WatermarkCheck, World, AE_BATCH};

/// Simulated time per turmoil step.
const TICK: Duration = Duration::from_millis(4);
/// Virtual nodes per shard (1024 in production; fewer keep rings cheap).
const VNODES: u32 = 16;
/// Replicas per region.
const RF: usize = 2;
/// How often the harness looks for convergence after healing.
const CHECK_EVERY: Duration = Duration::from_millis(100);
/// How often every replica is checked for going back in time.
const SAMPLE_EVERY: Duration = Duration::from_millis(100);
/// How long a converged state must stay converged.
const STABLE_FOR: Duration = Duration::from_millis(500);

/// Something the harness does to the simulated network or a host.
#[derive(Clone, Debug)]
pub enum Fault {
    /// Drop everything between two sets of nodes.
    Partition(Vec<NodeId>, Vec<NodeId>),
    /// Undo a partition.
    Repair(Vec<NodeId>, Vec<NodeId>),
    /// Hold everything between two sets of nodes (delivered late, on release).
    Hold(Vec<NodeId>, Vec<NodeId>),
    /// Deliver what was held.
    Release(Vec<NodeId>, Vec<NodeId>),
    /// Kill a node's software (its shards' state survives).
    Crash(NodeId),
    /// Restart a node's software.
    Bounce(NodeId),
}

/// A node of the topology.
#[derive(Clone, Debug)]
pub struct NodeSpec {
    pub id: NodeId,
    pub region: String,
    pub shards: u16,
    pub skew_ms: i64,
}

/// Everything one seed's run is made of.
#[derive(Clone, Debug)]
pub struct Scenario {
    pub seed: u64,
    pub nodes: Vec<NodeSpec>,
    pub knobs: Knobs,
    pub keys: usize,
    pub latency_ms: (u64, u64),
    pub fail_rate: f64,
    pub repair_rate: f64,
    pub loss_percent: f64,
    pub random_order: bool,
    pub faults: Vec<(Duration, Fault)>,
    pub drop_gossip: usize,
    pub settle_max: Duration,
}

impl Scenario {
    /// The randomized scenario of `seed`.
    pub fn random(seed: u64) -> Scenario {
        let mut rng = StdRng::seed_from_u64(seed ^ 0x5eed_0000_e15a);
        let regions = rng.gen_range(2..=3);
        // Every node 1 shard, every node 2, or a mix (1 and 2 alternating,
        // so topologies repeat: each costs a ring per node to build).
        let shards_mode = rng.gen_range(0..3);
        let mut nodes = Vec::new();
        for r in 0..regions {
            // At most 6 nodes (3 regions × 2): the cost grows with the square.
            let room = 6 - nodes.len() - (regions - r - 1);
            for _ in 0..rng.gen_range(1..=3).min(room) {
                nodes.push(NodeSpec {
                    id: nodes.len() as NodeId + 1,
                    region: format!("r{r}"),
                    shards: match shards_mode {
                        0 => 1,
                        1 => 2,
                        _ => 1 + (nodes.len() % 2) as u16,
                    },
                    skew_ms: rng.gen_range(-500..=500),
                });
            }
        }
        let writes_until = Duration::from_millis(rng.gen_range(600..=1_200));
        let knobs = Knobs {
            merge_epoch: Duration::from_millis(rng.gen_range(50..=100)),
            anti_entropy: Some(Duration::from_millis(rng.gen_range(400..=800))),
            writes_until,
            // Busy, or sparse enough for rounds to find replicas in sync
            // (which lets tombstones be collected while faults go on).
            write_gap_ms: if rng.gen_bool(0.7) {
                (5, rng.gen_range(20..=80))
            } else {
                (50, rng.gen_range(200..=500))
            },
            del_percent: rng.gen_range(10..=40),
            incr_percent: rng.gen_range(0..=40),
            // Mostly the default (never within a run); sometimes short, so
            // tombstone collection and its horizon are exercised too.
            tombstone_ttl_ms: if rng.gen_bool(0.25) {
                rng.gen_range(0..=2_000)
            } else {
                600_000
            },
            ae_batch: AE_BATCH,
            only_writer: None,
            watermarks: WatermarkCheck::default(),
        };
        let ids: Vec<NodeId> = nodes.iter().map(|n| n.id).collect();
        let region_nodes = |r: usize| -> Vec<NodeId> {
            nodes
                .iter()
                .filter(|n| n.region == format!("r{r}"))
                .map(|n| n.id)
                .collect()
        };
        let mut faults = Vec::new();
        let end = writes_until.as_millis() as u64;
        for _ in 0..rng.gen_range(1..=5) {
            let at = rng.gen_range(100..end);
            let dur = rng.gen_range(50..=1_500);
            let (a, b) = (rng.gen_range(0..regions), rng.gen_range(0..regions));
            let (x, y) = if a != b {
                (region_nodes(a), region_nodes(b))
            } else {
                // One node cut off from everyone else.
                let n = ids[rng.gen_range(0..ids.len())];
                (vec![n], ids.iter().copied().filter(|&m| m != n).collect())
            };
            let ms = Duration::from_millis;
            match rng.gen_range(0..3) {
                0 => {
                    faults.push((ms(at), Fault::Partition(x.clone(), y.clone())));
                    faults.push((ms(at + dur), Fault::Repair(x, y)));
                }
                1 => {
                    faults.push((ms(at), Fault::Hold(x.clone(), y.clone())));
                    faults.push((ms(at + dur), Fault::Release(x, y)));
                }
                _ => {
                    let n = ids[rng.gen_range(0..ids.len())];
                    faults.push((ms(at), Fault::Crash(n)));
                    faults.push((ms(at + dur.min(1_000)), Fault::Bounce(n)));
                }
            }
        }
        faults.sort_by_key(|f| f.0);
        let min_latency = rng.gen_range(0..=5);
        Scenario {
            seed,
            nodes,
            knobs,
            keys: 50,
            latency_ms: (min_latency, rng.gen_range(min_latency + 5..=150)),
            fail_rate: if rng.gen_bool(0.5) {
                0.0
            } else {
                rng.gen_range(0.0002..0.002)
            },
            repair_rate: rng.gen_range(0.05..0.5),
            loss_percent: [0.0, 0.0, 5.0, 20.0][rng.gen_range(0..4)],
            random_order: rng.gen_bool(0.5),
            faults,
            drop_gossip: 0,
            settle_max: Duration::from_secs(20),
        }
    }

    /// Two regions of one node each, one key written once, no faults: the
    /// base of the negative control.
    pub fn quiet(seed: u64) -> Scenario {
        let nodes = (1..=2)
            .map(|id| NodeSpec {
                id,
                region: format!("r{}", id - 1),
                shards: 1,
                skew_ms: 0,
            })
            .collect();
        Scenario {
            seed,
            nodes,
            knobs: Knobs {
                merge_epoch: Duration::from_millis(50),
                anti_entropy: Some(Duration::from_millis(250)),
                writes_until: Duration::from_millis(150),
                write_gap_ms: (100, 100),
                del_percent: 0,
                incr_percent: 0,
                tombstone_ttl_ms: 600_000,
                ae_batch: AE_BATCH,
                only_writer: Some(1),
                watermarks: WatermarkCheck::default(),
            },
            keys: 1,
            latency_ms: (1, 10),
            fail_rate: 0.0,
            repair_rate: 1.0,
            loss_percent: 0.0,
            random_order: false,
            faults: Vec::new(),
            drop_gossip: 0,
            settle_max: Duration::from_secs(3),
        }
    }
}

/// What a successful run reports.
#[derive(Clone, Debug, Default)]
pub struct Outcome {
    pub writes: usize,
    /// Acknowledged increments of the counter keys.
    pub increments: usize,
    /// Acknowledged new hash fields, set adds and set removes.
    pub collection_changes: usize,
    /// Of those, acknowledged list pushes and removes.
    pub list_changes: usize,
    /// Faults started: (partitions, held links, crashes).
    pub faults: (usize, usize, usize),
    pub converged_after: Duration,
    pub stats: Stats,
}

/// Every node's ring and the shared-bucket sets of a membership.
struct Topology {
    rings: BTreeMap<NodeId, Arc<Ring>>,
    shared: BTreeMap<(NodeId, NodeId), Arc<Vec<u16>>>,
}

/// A membership as a cache key: (node, region, shards) of each member.
type MembersKey = Vec<(NodeId, String, u16)>;

/// Topologies already built (seeds repeat them often; every thread shares them).
static TOPOLOGIES: Mutex<BTreeMap<MembersKey, Arc<Topology>>> = Mutex::new(BTreeMap::new());

fn topology(members: &[Member]) -> Arc<Topology> {
    let key: MembersKey = members
        .iter()
        .map(|m| (m.node, m.region.clone(), m.shards))
        .collect();
    if let Some(t) = TOPOLOGIES
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .get(&key)
    {
        return t.clone();
    }
    let rings: BTreeMap<NodeId, Arc<Ring>> = members
        .iter()
        .map(|m| {
            (
                m.node,
                Arc::new(Ring::new(members.to_vec(), m.node, VNODES, RF)),
            )
        })
        .collect();
    // Equal sets share one Arc, so per-set caches in the nodes are shared too.
    let mut sets: Vec<Arc<Vec<u16>>> = Vec::new();
    let mut shared = BTreeMap::new();
    for ((a, b), buckets) in shared_buckets(rings.values().next().expect("a node")) {
        let set = match sets.iter().find(|s| ***s == buckets) {
            Some(s) => s.clone(),
            None => {
                sets.push(Arc::new(buckets));
                sets[sets.len() - 1].clone()
            }
        };
        shared.insert((a, b), set.clone());
        shared.insert((b, a), set);
    }
    let t = Arc::new(Topology { rings, shared });
    TOPOLOGIES
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .insert(key, t.clone());
    t
}

fn world_of(s: &Scenario) -> World {
    let addr = SocketAddr::from(([127, 0, 0, 1], node::PORT));
    let members: Vec<Member> = s
        .nodes
        .iter()
        .map(|n| Member {
            node: n.id,
            region: n.region.clone(),
            shards: n.shards,
            peer: addr,
            client: addr,
            ready: true,
            leaving: false,
        })
        .collect();
    let topology = topology(&members);
    let keys = (0..s.keys)
        .map(|k| {
            let key = Bytes::from(format!("key:{k}"));
            Key {
                hash: hash_of(&key),
                key,
            }
        })
        .collect();
    World {
        seed: s.seed,
        knobs: s.knobs.clone(),
        members,
        skew: s.nodes.iter().map(|n| (n.id, n.skew_ms)).collect(),
        rings: topology.rings.clone(),
        shared: topology.shared.clone(),
        disks: s
            .nodes
            .iter()
            .map(|n| (n.id, Rc::new(RefCell::new(Disk::default()))))
            .collect(),
        keys,
        acks: RefCell::new(Vec::new()),
        counters: (0..8)
            .map(|k| {
                let key = Bytes::from(format!("typed:{k}"));
                Key {
                    hash: hash_of(&key),
                    key,
                }
            })
            .collect(),
        increments: RefCell::new(Vec::new()),
        fields: RefCell::new(Vec::new()),
        set_members: RefCell::new(Vec::new()),
        stats: RefCell::new(Stats::default()),
        loss_percent: Cell::new(s.loss_percent),
        drop_gossip: Cell::new(s.drop_gossip),
        violations: RefCell::new(Vec::new()),
        live: RefCell::new(BTreeMap::new()),
    }
}

/// `Ring::shared_with` for every pair of members at once (one pass over
/// the slots instead of one per pair; `shared_buckets_are_ring_shared_with`
/// checks they agree): (a, b) with a < b → the buckets both replicate.
pub fn shared_buckets(ring: &Ring) -> BTreeMap<(NodeId, NodeId), Vec<u16>> {
    let nodes: Vec<NodeId> = ring.members().iter().map(|m| m.node).collect();
    let index = |node: NodeId| nodes.iter().position(|&n| n == node).expect("member");
    let pairs: Vec<(usize, usize)> = (0..nodes.len())
        .flat_map(|i| (i + 1..nodes.len()).map(move |j| (i, j)))
        .collect();
    let mut out: Vec<Vec<u16>> = vec![Vec::new(); pairs.len()];
    // The pairs inside each set of replicas (a bitmask of member indices).
    let mut pairs_of: BTreeMap<u64, Vec<usize>> = BTreeMap::new();
    let regions = ring.regions().len();
    for slot in 0..DIGEST_BUCKETS {
        let mut set = 0u64;
        for r in 0..regions {
            for id in ring.replicas(slot, r) {
                set |= 1 << index(id.node);
            }
        }
        let inside = pairs_of.entry(set).or_insert_with(|| {
            (0..pairs.len())
                .filter(|&p| set & (1 << pairs[p].0) != 0 && set & (1 << pairs[p].1) != 0)
                .collect()
        });
        for &p in inside.iter() {
            out[p].push(slot as u16);
        }
    }
    pairs
        .iter()
        .zip(out)
        .map(|(&(i, j), slots)| ((nodes[i], nodes[j]), slots))
        .collect()
}

fn pairs(a: &[NodeId], b: &[NodeId], mut f: impl FnMut(String, String)) {
    for x in a {
        for y in b {
            if x != y {
                f(host(*x), host(*y));
            }
        }
    }
}

/// Runs one scenario to convergence (Ok) or to a failed check (Err, with
/// the checker's explanation).
pub fn run(s: &Scenario) -> Result<Outcome, String> {
    let t0 = std::time::Instant::now();
    let world = Rc::new(world_of(s));
    if std::env::var("ELSA_SIM_TIMING").is_ok() {
        eprintln!(
            "seed {}: world {:?} ({} nodes)",
            s.seed,
            t0.elapsed(),
            s.nodes.len()
        );
    }
    let mut builder = turmoil::Builder::new();
    builder
        .rng_seed(s.seed)
        .tick_duration(TICK)
        .simulation_duration(Duration::from_secs(3_600))
        .min_message_latency(Duration::from_millis(s.latency_ms.0))
        .max_message_latency(Duration::from_millis(s.latency_ms.1))
        .fail_rate(s.fail_rate)
        .repair_rate(s.repair_rate)
        .tcp_capacity(1 << 16);
    if s.random_order {
        builder.enable_random_order();
    }
    let mut sim = builder.build();
    for n in &s.nodes {
        let (w, id) = (world.clone(), n.id);
        sim.host(host(id), move || node::boot(w.clone(), id));
    }
    let ids: Vec<NodeId> = s.nodes.iter().map(|n| n.id).collect();
    let heal_at = s.knobs.writes_until;
    let mut faults = s.faults.iter().filter(|f| f.0 < heal_at).peekable();
    let mut crashed: BTreeSet<NodeId> = BTreeSet::new();
    let mut healed = false;
    let mut next_check = heal_at;
    let mut converged: Option<Duration> = None;
    // Long enough for a collection pass to run on converged replicas.
    let stable_for = if s.knobs.tombstone_ttl_ms < 60_000 {
        STABLE_FOR + Duration::from_millis(800)
    } else {
        STABLE_FOR
    };
    let mut monotonic = check::Monotonic::default();
    let mut next_sample = Duration::ZERO;
    // ELSA_SIM_TRACE_KEY: print every change of one key's replicas.
    let trace_key: Option<usize> = std::env::var("ELSA_SIM_TRACE_KEY")
        .ok()
        .and_then(|v| v.parse().ok());
    let mut last_trace = String::new();
    // ELSA_SIM_SAMPLE_MS: check replicas more often (to pin a failure down).
    let sample_every = std::env::var("ELSA_SIM_SAMPLE_MS")
        .ok()
        .and_then(|v| v.parse().ok())
        .map_or(SAMPLE_EVERY, Duration::from_millis);
    let mut started = (0, 0, 0);
    let outcome = |converged_after, faults| Outcome {
        writes: world.acks.borrow().len(),
        increments: world.increments.borrow().len(),
        collection_changes: world.fields.borrow().len()
            + world.set_members.borrow().len()
            + world.set_members.borrow().iter().filter(|m| m.2).count(),
        list_changes: world
            .set_members
            .borrow()
            .iter()
            .filter(|m| crate::node::typed_kind(m.0) == 4)
            .map(|m| 1 + usize::from(m.2))
            .sum(),
        faults,
        converged_after,
        stats: world.stats.borrow().clone(),
    };
    loop {
        let now = sim.elapsed();
        while let Some((_, f)) = faults.next_if(|f| f.0 <= now) {
            match f {
                Fault::Partition(a, b) => {
                    started.0 += 1;
                    pairs(a, b, |x, y| sim.partition(x, y));
                }
                Fault::Repair(a, b) => pairs(a, b, |x, y| sim.repair(x, y)),
                Fault::Hold(a, b) => {
                    started.1 += 1;
                    pairs(a, b, |x, y| sim.hold(x, y));
                }
                Fault::Release(a, b) => pairs(a, b, |x, y| sim.release(x, y)),
                Fault::Crash(n) => {
                    started.2 += 1;
                    crashed.insert(*n);
                    sim.crash(host(*n));
                }
                Fault::Bounce(n) => {
                    crashed.remove(n);
                    sim.bounce(host(*n));
                }
            }
        }
        if !healed && now >= heal_at {
            healed = true;
            pairs(&ids, &ids, |x, y| {
                sim.repair(x.clone(), y.clone());
                sim.release(x, y);
            });
            sim.set_fail_rate(0.0);
            world.loss_percent.set(0.0);
            for n in std::mem::take(&mut crashed) {
                sim.bounce(host(n));
            }
        }
        if now >= next_sample {
            next_sample += sample_every;
            let held = check::versions(&world);
            if let Some(k) = trace_key {
                let now_held: Vec<_> = held.iter().filter(|(id, _)| id.1 == k).collect();
                let line = format!("{now_held:?}");
                if line != last_trace {
                    eprintln!("{now:?} key {k}: {line}");
                    last_trace = line;
                }
            }
            monotonic.sample(now, &held)?;
            check::watermarks(&world, now, &held)?;
        }
        if healed && now >= next_check {
            next_check += CHECK_EVERY;
            match (check::check(&world), converged) {
                (Ok(()), None) => converged = Some(now),
                (Ok(()), Some(at)) if now >= at + stable_for => {
                    if std::env::var("ELSA_SIM_TIMING").is_ok() {
                        eprintln!(
                            "seed {}: {:?} sim, {:?} wall, {:?}",
                            s.seed,
                            now,
                            t0.elapsed(),
                            world.stats.borrow()
                        );
                    }
                    return Ok(outcome(at - heal_at, started));
                }
                (Ok(()), Some(_)) => {}
                (Err(e), Some(at)) => {
                    return Err(format!(
                        "converged {:?} after healing, then diverged: {e}",
                        at - heal_at
                    ))
                }
                (Err(e), None) if now >= heal_at + s.settle_max => {
                    return Err(format!(
                        "not converged {:?} after healing: {e}",
                        s.settle_max
                    ))
                }
                (Err(_), None) => {}
            }
        }
        sim.step().map_err(|e| format!("simulation error: {e}"))?;
    }
}

/// The shared state of a scenario, without running it.
pub fn world_for_test(s: &Scenario) -> World {
    world_of(s)
}

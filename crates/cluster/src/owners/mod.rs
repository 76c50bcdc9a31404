//! One owner per slot inside a region, agreed through Raft (`openraft`, a
//! maintained implementation — agreement is not something to hand-write)
//! and held by leases.
//!
//! Each region runs one small Raft group of its nodes. Its log holds the
//! region's ownership record ([`state::Owners`]): every node beats into it
//! every [`BEAT`], extending its lease by [`LEASE`]; the leader takes a
//! node whose lease ended (plus the drift) out of the ring and puts one
//! that beats again back in. Which node owns a slot follows from the
//! nodes in the ring (the consistent-hash ring, ready replicas first), so
//! every node that applied the same log agrees on it.
//!
//! A node serves a slot — reads and writes — only while (see
//! [`Region::may_serve`]):
//! - the state it applied makes it the slot's owner,
//! - the slot's start (its previous owner's lease end plus the drift)
//!   has passed by its clock, and
//! - its own lease, extended only by a beat it then applied itself, has
//!   not ended by its clock.
//!
//! A node cut off from its region's majority cannot commit a beat: its
//! lease ends within [`LEASE`] and it serves nothing until it is back; the
//! majority takes it out and serves its slots once its lease has certainly
//! ended. No message between regions is involved, and a commit never
//! waits for Raft: leases are renewed in the background.

pub mod net;
pub mod state;
pub mod store;

#[cfg(test)]
mod tests;

use std::collections::{BTreeMap, BTreeSet};
use std::io::Cursor;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use arc_swap::ArcSwap;
use elsa_lattice::NodeId;
use elsa_shard::table::DIGEST_BUCKETS;
use openraft::error::{ClientWriteError, RaftError};
use openraft::{BasicNode, ChangeMembers, Raft};

use crate::ring::{Member, Ring};
use net::{Carrier, Net, Reply, Rpc};
use state::{Command, Owners, Record};
use store::{Applied, LogStore, StateStore};

/// Raft's node id (ours widened).
pub type RaftId = u64;
/// What Raft knows of a node: its peer address.
pub type Node = BasicNode;

openraft::declare_raft_types!(
    /// The ownership group's types.
    pub TypeConfig:
        D = Command,
        R = state::Outcome,
);

/// How long a beat extends a node's lease: longer than an election
/// (while the group has no leader nobody can renew), short enough that a
/// node's slots are not long without an owner once it is gone.
pub const LEASE: Duration = Duration::from_millis(3_000);
/// How often a node beats.
pub const BEAT: Duration = Duration::from_millis(500);
/// How often the leader looks for nodes to take out or put in.
const LEADER_TICK: Duration = Duration::from_millis(100);
/// Log entries between snapshots.
pub const SNAPSHOT_EVERY: u64 = 1_000;
/// How long one call to a peer may take.
const CALL_LIMIT: Duration = Duration::from_millis(1_000);

/// A clock in unix ms (with a test offset, see `faults`).
pub type Clock = Arc<dyn Fn() -> u64 + Send + Sync>;

/// What the node sees of the agreed state.
pub struct View {
    /// The log index applied.
    pub index: u64,
    /// Per node.
    pub records: BTreeMap<NodeId, Record>,
    /// The members in the ring.
    pub inside: Vec<Member>,
    /// The ring of those members (None while there is none): the agreed
    /// replicas of each slot, which a write waits for even once this
    /// node's failure detector dropped one (`service/replicate.rs`).
    pub ring: Option<Arc<Ring>>,
    /// Per slot: the unix ms this node may start serving it at, or
    /// `u64::MAX` where it does not own it.
    mine: Arc<Vec<u64>>,
    /// Which generation of owners `mine` was made from.
    generation: u64,
    /// The group's voters.
    pub voters: BTreeSet<RaftId>,
    /// Nodes that left the region for good (see `Command::Forget`).
    pub forgotten: BTreeSet<NodeId>,
}

/// A node's member of its region's ownership group.
pub struct Region {
    me: NodeId,
    raft: Raft<TypeConfig>,
    carrier: Arc<dyn Carrier>,
    view: Arc<ArcSwap<View>>,
    /// Until when this node's lease runs (unix ms, its clock).
    lease_until: AtomicU64,
    clock: Clock,
    drift_ms: u64,
    /// The member this node announces (its readiness changes).
    member: Box<dyn Fn() -> Member + Send + Sync>,
    /// Region nodes membership sees alive (peer address), for the leader
    /// to make voters of.
    alive: Mutex<BTreeMap<NodeId, SocketAddr>>,
    /// Set once this node left the region for good ([`Region::leave`]):
    /// it beats no more.
    left: std::sync::atomic::AtomicBool,
    /// Set when this node applied its own removal from the ring (see
    /// [`Region::taken_out`]).
    taken_out: Arc<std::sync::atomic::AtomicBool>,
}

impl Region {
    /// Starts this node's member of the group (on the current Tokio
    /// runtime), keeping its log in `dir` (None: memory only). `on_view`
    /// is called whenever the ring inside the region changed.
    #[allow(clippy::too_many_arguments)]
    pub async fn start(
        me: NodeId,
        dir: Option<&Path>,
        vnodes: u32,
        rf: usize,
        drift: Duration,
        clock: Clock,
        carrier: Arc<dyn Carrier>,
        member: Box<dyn Fn() -> Member + Send + Sync>,
        on_view: Arc<dyn Fn() + Send + Sync>,
    ) -> std::io::Result<Arc<Region>> {
        let view = Arc::new(ArcSwap::from_pointee(View {
            index: 0,
            records: BTreeMap::new(),
            inside: Vec::new(),
            ring: None,
            mine: Arc::new(vec![u64::MAX; DIGEST_BUCKETS]),
            generation: u64::MAX,
            voters: BTreeSet::new(),
            forgotten: BTreeSet::new(),
        }));
        let v = view.clone();
        let (lost_tx, lost_rx) = tokio::sync::watch::channel(0u64);
        let taken_out = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let out_flag = taken_out.clone();
        let on_apply = Arc::new(move |a: &Applied| {
            let old = v.load();
            let outs = |r: &BTreeMap<NodeId, Record>| r.get(&me).map(|r| r.outs);
            if let (Some(was), Some(now)) = (outs(&old.records), outs(&a.owners.records)) {
                if now > was {
                    // Set before the view that shows it: nothing reads the
                    // new view and finds this node still serving.
                    out_flag.store(true, Ordering::SeqCst);
                }
            }
            let generation = a.owners.generation();
            let mine = if generation == old.generation {
                old.mine.clone()
            } else {
                let mine: Vec<u64> = (0..DIGEST_BUCKETS)
                    .map(|slot| match a.owners.owner(slot) {
                        Some(n) if n == me => a.owners.start(slot),
                        _ => u64::MAX,
                    })
                    .collect();
                let lost = mine
                    .iter()
                    .zip(old.mine.iter())
                    .any(|(new, was)| *new == u64::MAX && *was != u64::MAX);
                if lost {
                    lost_tx.send_replace(generation);
                }
                Arc::new(mine)
            };
            let inside = a.owners.inside();
            let ring = if inside == old.inside {
                old.ring.clone()
            } else {
                (!inside.is_empty()).then(|| Arc::new(Ring::new(inside.clone(), me, vnodes, rf)))
            };
            v.store(Arc::new(View {
                index: a.last_applied.map_or(0, |l| l.index),
                records: a.owners.records.clone(),
                inside,
                ring,
                mine,
                generation,
                voters: a.membership.membership().voter_ids().collect(),
                forgotten: a.owners.forgotten.clone(),
            }));
            if generation != old.generation {
                on_view();
            }
        });
        let log = LogStore::open(dir)?;
        let sm = StateStore::open(dir, Owners::new(vnodes, rf), on_apply)?;
        let config = openraft::Config {
            cluster_name: "elsa-region".into(),
            // Raft's heartbeat is also its append timeout: a peer link
            // over TLS on a loaded node needs more than 100 ms at times.
            heartbeat_interval: 250,
            election_timeout_min: 750,
            election_timeout_max: 1_500,
            snapshot_policy: openraft::SnapshotPolicy::LogsSinceLast(SNAPSHOT_EVERY),
            max_in_snapshot_log_to_keep: 100,
            ..Default::default()
        }
        .validate()
        .map_err(std::io::Error::other)?;
        let raft = Raft::new(
            RaftId::from(me),
            Arc::new(config),
            Net(carrier.clone()),
            log,
            sm,
        )
        .await
        .map_err(std::io::Error::other)?;
        let region = Arc::new(Region {
            me,
            raft,
            carrier,
            view,
            lease_until: AtomicU64::new(0),
            clock,
            drift_ms: drift.as_millis() as u64,
            member,
            alive: Mutex::new(BTreeMap::new()),
            left: std::sync::atomic::AtomicBool::new(false),
            taken_out,
        });
        tokio::spawn(beat_loop(Arc::downgrade(&region)));
        tokio::spawn(release_loop(Arc::downgrade(&region), lost_rx));
        tokio::spawn(leader_loop(Arc::downgrade(&region)));
        Ok(region)
    }

    /// Whether this node may serve `slot` now (see the module's head).
    pub fn may_serve(&self, slot: usize) -> bool {
        let start = self.view.load().mine.get(slot).copied().unwrap_or(u64::MAX);
        if start == u64::MAX {
            return false;
        }
        let now = (self.clock)();
        now >= start && now < self.lease_until.load(Ordering::Acquire)
    }

    /// Whether this node applied its own removal from the ring since the
    /// last [`Region::clear_taken_out`]. While it was out the region
    /// acknowledged writes its inside replicas had, without it (the
    /// acks test of 2026-12-01: a node out for a second, put back in,
    /// served the slots of a node that then died from before a write the
    /// dead node had acknowledged): it catches up again before it serves.
    pub fn taken_out(&self) -> bool {
        self.taken_out.load(Ordering::SeqCst)
    }

    /// The node started catching up again (see [`Region::taken_out`]).
    pub fn clear_taken_out(&self) {
        self.taken_out.store(false, Ordering::SeqCst);
    }

    /// The agreed state as this node applied it.
    pub fn view(&self) -> Arc<View> {
        self.view.load_full()
    }

    /// Until when this node's lease runs (unix ms, 0: none yet).
    pub fn lease_until(&self) -> u64 {
        self.lease_until.load(Ordering::Acquire)
    }

    /// How long this node's lease still runs, ms (0: none).
    pub fn lease_left_ms(&self) -> u64 {
        self.lease_until().saturating_sub((self.clock)())
    }

    /// The group's leader, as this node knows it.
    pub fn leader(&self) -> Option<NodeId> {
        self.raft
            .metrics()
            .borrow()
            .current_leader
            .and_then(|l| NodeId::try_from(l).ok())
    }

    /// Whether the group exists here (founded, or joined).
    pub async fn is_formed(&self) -> bool {
        self.raft.is_initialized().await.unwrap_or(false)
    }

    /// Founds the region's group with these voters (the first node of a
    /// new region does, once every node it expects is seen).
    pub async fn found(&self, voters: &BTreeMap<NodeId, SocketAddr>) -> Result<(), String> {
        let nodes: BTreeMap<RaftId, Node> = voters
            .iter()
            .map(|(n, a)| (RaftId::from(*n), BasicNode::new(a.to_string())))
            .collect();
        self.raft.initialize(nodes).await.map_err(|e| e.to_string())
    }

    /// The region's nodes membership sees alive now (the leader makes
    /// voters of those that are not).
    pub fn set_alive(&self, alive: BTreeMap<NodeId, SocketAddr>) {
        *self.alive.lock().unwrap_or_else(|e| e.into_inner()) = alive;
    }

    /// This node leaves the region for good (decommissioned): it beats no
    /// more, and the group forgets it — its record, and, by the leader's
    /// next round, its vote, so the region's majority no longer counts it
    /// (a region of three that decommissioned one and lost another would
    /// otherwise serve nothing).
    pub async fn leave(&self) -> Result<(), String> {
        self.left.store(true, Ordering::SeqCst);
        self.propose(Command::Forget {
            node: self.me,
            drift_ms: self.drift_ms,
        })
        .await
        .map(|_| ())
    }

    /// Answers a peer's call.
    pub async fn answer(&self, request: &[u8]) -> Vec<u8> {
        let reply = match serde_json::from_slice::<Rpc>(request) {
            Ok(Rpc::Append(r)) => Reply::Append(self.raft.append_entries(r).await),
            Ok(Rpc::Vote(r)) => Reply::Vote(self.raft.vote(r).await),
            Ok(Rpc::Snapshot(r)) => Reply::Snapshot(self.raft.install_snapshot(r).await),
            Ok(Rpc::Propose(cmd)) => Reply::Proposed(
                self.raft
                    .client_write(cmd)
                    .await
                    .map(|r| r.log_id.index)
                    .map_err(|e| e.to_string()),
            ),
            Err(e) => Reply::Proposed(Err(format!("undecodable request: {e}"))),
        };
        serde_json::to_vec(&reply).unwrap_or_default()
    }

    /// Proposes `cmd` as the leader; whether it changed anything.
    async fn write_here(&self, cmd: Command) -> Result<bool, String> {
        match self.raft.client_write(cmd).await {
            Ok(r) => Ok(r.data.changed),
            Err(e) => Err(e.to_string()),
        }
    }

    /// Proposes `cmd` through the leader; the index it was committed at.
    async fn propose(&self, cmd: Command) -> Result<u64, String> {
        match self.raft.client_write(cmd.clone()).await {
            Ok(r) => Ok(r.log_id.index),
            Err(RaftError::APIError(ClientWriteError::ForwardToLeader(f))) => {
                let Some(leader) = f.leader_id else {
                    return Err("no leader known".into());
                };
                match net::call(&*self.carrier, leader, &Rpc::Propose(cmd), CALL_LIMIT).await? {
                    Reply::Proposed(r) => r,
                    _ => Err("answer of another kind".into()),
                }
            }
            Err(e) => Err(e.to_string()),
        }
    }

    /// One beat: proposes this node's lease and, once this node applied
    /// it, holds it.
    async fn beat(&self) -> Result<(), String> {
        let expires_ms = (self.clock)() + LEASE.as_millis() as u64;
        let index = self
            .propose(Command::Beat {
                member: (self.member)(),
                expires_ms,
                drift_ms: self.drift_ms,
            })
            .await?;
        self.raft
            .wait(Some(CALL_LIMIT))
            .applied_index_at_least(Some(index), "beat applied")
            .await
            .map_err(|e| e.to_string())?;
        self.lease_until.fetch_max(expires_ms, Ordering::AcqRel);
        Ok(())
    }

    /// The leader's round: nodes whose lease ended out, nodes that beat
    /// again in, nodes membership sees alive made voters.
    async fn lead(&self) -> Result<(), String> {
        if self.leader() != Some(self.me) {
            return Ok(());
        }
        let view = self.view();
        let now = (self.clock)();
        for (&node, r) in &view.records {
            let cmd = if r.inside && r.expires_ms + self.drift_ms < now {
                Command::Out {
                    node,
                    seen_expires: r.expires_ms,
                    drift_ms: self.drift_ms,
                }
            } else if !r.inside && r.expires_ms > now {
                Command::In {
                    node,
                    seen_expires: r.expires_ms,
                    drift_ms: self.drift_ms,
                }
            } else {
                continue;
            };
            let what = format!("{cmd:?}");
            if self.write_here(cmd).await? {
                tracing::info!("ownership: {what}");
            }
        }
        let gone: BTreeSet<RaftId> = view
            .forgotten
            .iter()
            .map(|&n| RaftId::from(n))
            .filter(|id| view.voters.contains(id))
            .collect();
        if !gone.is_empty() && gone.len() < view.voters.len() {
            tracing::info!("ownership: nodes {gone:?} left the region; no longer voters");
            self.raft
                .change_membership(ChangeMembers::RemoveVoters(gone), false)
                .await
                .map_err(|e| e.to_string())?;
        }
        let alive = self.alive.lock().unwrap_or_else(|e| e.into_inner()).clone();
        for (node, addr) in alive {
            let id = RaftId::from(node);
            if view.voters.contains(&id) || view.forgotten.contains(&node) {
                continue;
            }
            tracing::info!("ownership: node {node} joins the region's group");
            self.raft
                .add_learner(id, BasicNode::new(addr.to_string()), true)
                .await
                .map_err(|e| e.to_string())?;
            self.raft
                .change_membership(ChangeMembers::AddVoterIds([id].into()), false)
                .await
                .map_err(|e| e.to_string())?;
        }
        Ok(())
    }

    /// Stops the group's tasks.
    pub async fn shutdown(&self) {
        let _ = self.raft.shutdown().await;
    }
}

async fn beat_loop(region: std::sync::Weak<Region>) {
    let mut tick = tokio::time::interval(BEAT);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut held = false;
    let mut why = String::new();
    loop {
        tick.tick().await;
        let Some(r) = region.upgrade() else { return };
        if r.left.load(Ordering::SeqCst) || !r.is_formed().await {
            continue;
        }
        match tokio::time::timeout(2 * BEAT, r.beat()).await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => why = e,
            Err(_) => why = format!("no answer in {:?}", 2 * BEAT),
        }
        let holds = r.lease_left_ms() > 0;
        if holds != held {
            if holds {
                tracing::info!("ownership: this node holds its lease");
            } else {
                tracing::warn!(
                    "ownership: this node's lease ended; it serves no slot until its region \
                     renews it (last beat: {why})"
                );
            }
            held = holds;
        }
    }
}

/// Releases the slots this node lost, once it has applied their loss and
/// the drift has passed — the bound this design already puts on how long
/// a request routed under a lease may take to reach its shard — so their
/// new owners need not wait for this node's lease to end.
async fn release_loop(
    region: std::sync::Weak<Region>,
    mut lost: tokio::sync::watch::Receiver<u64>,
) {
    while lost.changed().await.is_ok() {
        let generation = *lost.borrow_and_update();
        let Some(drift) = region.upgrade().map(|r| r.drift_ms) else {
            return;
        };
        tokio::time::sleep(Duration::from_millis(drift)).await;
        let Some(r) = region.upgrade() else { return };
        let cmd = Command::Released {
            node: r.me,
            generation,
        };
        if let Err(e) = r.propose(cmd).await {
            tracing::debug!("ownership: releasing slots: {e}");
        }
    }
}

async fn leader_loop(region: std::sync::Weak<Region>) {
    let mut tick = tokio::time::interval(LEADER_TICK);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let Some(r) = region.upgrade() else { return };
        // A leader cut off from the majority commits nothing: give up
        // the round rather than wait for the heal.
        match tokio::time::timeout(CALL_LIMIT, r.lead()).await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => tracing::debug!("ownership leader round: {e}"),
            Err(_) => tracing::debug!("ownership leader round: no commit in {CALL_LIMIT:?}"),
        }
    }
}

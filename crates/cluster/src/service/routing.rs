//! Routing inside a region: which shard serves a key for this node's
//! clients, the one-primary fence on forwarded requests, forwarding
//! itself, and the synchronous push of `replication = 2pc`.

use super::*;

/// The route of a key no known node serves yet: a node that has just
/// started and knows no ready replica but itself. Requests to it are
/// answered Busy at once, so callers retry until membership tells them
/// where the key lives (never from this node's data before it caught up).
pub(super) const NO_PRIMARY: ShardId = ShardId {
    node: NodeId::MAX,
    index: 0,
};

/// How long a peer that answered "serving nothing" is routed around.
const NOT_SERVING_FOR: Duration = Duration::from_secs(2);

/// What a shard answers when it must not serve a call (see
/// [`Cluster::serves`]): Busy, so the caller routes again; for a batch,
/// no op run (the caller resubmits the rest).
pub(super) fn busy_answer(kind: u32) -> Answer {
    Answer {
        refusal: if kind == 1 { 0 } else { 1 },
        ..Answer::default()
    }
}

/// Placement for a node alone: every key on its own shard for the key's
/// slot — the same shard it would use in a cluster, so a node can join
/// one later without moving data between its shards.
pub struct Standalone {
    node: NodeId,
    /// None with one shard: every key is on it, and the ring's 128 KiB
    /// slot table need not be read (a cache miss per key, 1.7 % of the CPU
    /// of a one-worker node under MULTI/EXEC batches).
    ring: Option<Ring>,
}

impl Standalone {
    /// The placement of node `node` with `shards` shards.
    pub fn new(node: NodeId, shards: u16, vnodes: u32) -> Standalone {
        Standalone {
            node,
            ring: (shards > 1).then(|| Ring::alone(node, shards, vnodes)),
        }
    }
}

impl Placement for Standalone {
    fn route(&self, hash: u64) -> ShardId {
        ShardId {
            node: self.node,
            index: self
                .ring
                .as_ref()
                .map_or(0, |ring| ring.own_shard(slot_of(hash))),
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

    fn backups(&self, hash: u64) -> Vec<ShardId> {
        let primary = self.0.route(hash);
        let ring = self.0.ring.load();
        ring.replicas(slot_of(hash), ring.own_region())
            .iter()
            .copied()
            .filter(|r| *r != primary && r.node != NO_PRIMARY.node)
            .collect()
    }

    fn still_serves(&self, hash: u64, shard: ShardId) -> bool {
        // With `routing = random` any replica validates and installs.
        self.0.settings.routing != Routing::Primary || self.0.route(hash) == shard
    }

    fn sync_replicate(
        &self,
        keys: Vec<HashedKey>,
    ) -> Option<oneshot::Receiver<Result<(), String>>> {
        let c = &self.0;
        // Asked for whenever a write's acknowledgement level is `all` — the
        // default in 2pc mode, chosen per connection or transaction in crdt
        // mode (where it waited for nothing before: docs/regions.md).
        if c.ring.load().regions().len() < 2 {
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
    /// Whether a forwarded call may be served by local shard `shard`: with
    /// `routing = primary`, only if this node's own view makes that shard
    /// the primary of every key in it. A caller with an older or newer
    /// view is answered Busy and routes again — so a slot is served by one
    /// node even while views differ (a node leaving, a hand-back).
    pub(super) fn serves(&self, call: &Call, shard: u32) -> bool {
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

    /// The shard that serves `hash` for this node's clients.
    pub fn route(&self, hash: u64) -> ShardId {
        let ring = self.ring.load();
        let slot = slot_of(hash);
        let replicas = ring.replicas(slot, ring.own_region());
        // Until it serves, this node is nobody's replica to ask: its data
        // may predate what the region acknowledged while it was away.
        let me = self.settings.node;
        let usable = |id: &ShardId| id.node != me || self.is_serving();
        let skipped = self.not_serving_peers();
        match (self.settings.routing, replicas) {
            (_, []) => ShardId {
                node: me,
                index: ring.own_shard(slot),
            },
            (Routing::Primary, all) => all
                .iter()
                .find(|id| !skipped.as_ref().is_some_and(|s| s.contains(&id.node)))
                .copied()
                .filter(usable)
                // Not before it took the slot over (see `takeover`), nor
                // without its lease (`ownership = leases`).
                .filter(|id| id.node != me || (self.took_over(slot) && self.leased(slot)))
                .unwrap_or(NO_PRIMARY),
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

    /// A peer answered that it serves no slot (it is catching up, maybe
    /// restarted before this node's view noticed): route around it for
    /// [`NOT_SERVING_FOR`], as if membership already said so.
    pub(super) fn note_not_serving(&self, node: NodeId) {
        let mut m = self.not_serving.lock().unwrap_or_else(|e| e.into_inner());
        m.insert(node, Instant::now());
        self.not_serving_count.store(m.len(), Ordering::Relaxed);
    }

    /// The peers noted as serving nothing lately (None, without a lock, in
    /// the common case of none).
    pub(super) fn not_serving_peers(&self) -> Option<Vec<NodeId>> {
        if self.not_serving_count.load(Ordering::Relaxed) == 0 {
            return None;
        }
        let mut m = self.not_serving.lock().unwrap_or_else(|e| e.into_inner());
        let before = m.len();
        m.retain(|_, at| at.elapsed() < NOT_SERVING_FOR);
        self.not_serving_count.store(m.len(), Ordering::Relaxed);
        let peers = m.keys().copied().collect();
        if m.len() < before {
            drop(m);
            // A peer routed around serves its slots again: those this
            // node served meanwhile must be taken over anew next time.
            self.takeover_view(&self.ring.load());
        }
        Some(peers)
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

    pub(super) fn request(self: &Arc<Self>, to: ShardId, call: Call, done: Option<Completer>) {
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
        if !self.send_on(&link, frame, false) {
            link.pending
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .remove(&id);
        }
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

    /// 2pc mode: reads the committed lattices of `keys` from their primary
    /// replicas here, then pushes them to every other region and waits.
    pub(super) async fn read_and_replicate(
        self: &Arc<Self>,
        keys: Vec<HashedKey>,
    ) -> Result<(), String> {
        let mut entries = Vec::with_capacity(keys.len());
        for key in keys {
            let to = self.route(key.hash);
            let (reply, rx) = oneshot::channel();
            let msg = ShardMsg::Read {
                key: key.clone(),
                at: None,
                ack: elsa_shard::AckLevel::Local,
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
                    state: match state.typed {
                        Some(s) => elsa_shard::wal::codec::EntryState::Typed(s),
                        None => elsa_shard::wal::codec::EntryState::Plain(state.current),
                    },
                    start_ts: state.version.commit_ts,
                    version: state.version,
                    unit: elsa_shard::Unit::None,
                }),
                // Held by a newer commit: that one will replicate itself.
                Ok(Err(_)) => {}
                Err(_) => return Err("the key's replica is gone".into()),
            }
        }
        self.replicate_sync(entries).await
    }
}

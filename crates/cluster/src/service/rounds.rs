//! Anti-entropy rounds: digests compared with one peer at a time, only
//! differing buckets shipped, and what a clean round proves (watermarks,
//! catch-up).

use super::*;

/// What a round's answer brought (see [`Cluster::ae_finish`]).
///
/// What changed nothing on the receiving side proves the pair in sync as
/// well as nothing shipped. A node that kept a tombstone over a restart
/// which its peers collected meanwhile ships it in every round (and a
/// peer that kept one sends it); when a round waited for nothing to ship
/// either way, such a node stayed catching up forever — never primary,
/// never collecting it (the cluster restart-differential test, seed 1:
/// `ZADD`, `MOVE`, `SHUTDOWN` of a replica).
pub(super) struct Seen<'a> {
    /// The commit timestamps of the lattices the peer sent.
    pub received: &'a [u64],
    /// They changed nothing here: this node held them, or newer, or had
    /// collected them.
    pub absorbed: bool,
    /// What this node shipped changed nothing at the peer (its answer's
    /// `dominated`).
    pub dominated: bool,
    /// The peer's answer was cut at its batch cap: it holds more.
    pub capped: bool,
}

impl Cluster {
    pub(super) async fn node_digest(&self) -> Vec<u64> {
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
    /// one batch per shard), with the young typed ones of `whole` too
    /// (see `proofs`).
    pub(super) async fn bucket_lattices(
        &self,
        buckets: &[u32],
        older_than: u64,
        whole: &[u32],
    ) -> Shipment {
        let wanted = ae::bitmap(buckets);
        let whole = if whole.is_empty() {
            Vec::new()
        } else {
            ae::bitmap(whole)
        };
        let mut out = Shipment::default();
        for inbox in &self.inboxes {
            let (reply, rx) = oneshot::channel();
            let _ = inbox.send(ShardMsg::BucketEntries {
                wanted: wanted.clone(),
                limit: AE_BATCH,
                older_than,
                whole: whole.clone(),
                reply,
            });
            if let Ok(batch) = rx.await {
                out.lattices.extend(batch.entries.iter().map(Lattice::from));
                out.younger |= batch.younger;
                out.held.extend(batch.held);
                out.capped |= batch.capped;
            }
        }
        out.held.sort_unstable();
        out.held.dedup();
        out
    }

    /// One round per period, with the next peer in turn: a node that
    /// missed updates is repaired by one peer at a time rather than by all
    /// of them shipping the same lattices at once.
    pub(super) async fn anti_entropy_loop(self: Arc<Self>) {
        let mut tick = tokio::time::interval(self.settings.anti_entropy);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut turn = 0usize;
        loop {
            tick.tick().await;
            if self.repair_paused() {
                continue;
            }
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
            // Behind on gossip to it: the stream goes first (`streams`).
            if self.stream_behind(peer) {
                self.note_ae_waited(peer);
                continue;
            }
            let Some(shared) = self.shared_with(peer) else {
                continue;
            };
            self.start_round(peer, &shared, None, Vec::new()).await;
        }
    }

    /// Step 1 of a round with `peer` over the `shared` buckets: this
    /// node's group digests go out; answers the round's id. A takeover
    /// round (see `takeover`) carries its slots and the nodes to fence.
    pub(super) async fn start_round(
        self: &Arc<Self>,
        peer: NodeId,
        shared: &[u16],
        takeover: Option<super::takeover::TakeoverRound>,
        fence: Vec<wire::Fence>,
    ) -> u64 {
        let started = self.hlc.now();
        let cutoff = self.cutoff();
        let floors = self.node_floors().await;
        let digest = Arc::new(self.node_digest().await);
        let round = self.next_id.fetch_add(1, Ordering::Relaxed);
        let (groups, digests) = ae::group_digests(&digest, shared);
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
                    differ: Vec::new(),
                    held: Vec::new(),
                    capped: false,
                    at: Instant::now(),
                    takeover,
                },
            );
        }
        self.send(
            peer,
            Frame::new(Body::AeGroups(wire::AeGroups {
                round,
                groups,
                digests,
                fence,
                floors,
                functions: self.functions_digest(),
            })),
            true,
        );
        round
    }

    /// Step 3 of a round this node started: find the buckets that differ,
    /// ship ours and ask for theirs.
    pub(super) fn ae_compare(self: &Arc<Self>, peer: NodeId, b: wire::AeBuckets) {
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
            p.ae_rounds += 1;
        }
        if differ.is_empty() {
            // Identical: everything either side committed before the round
            // started is on both, whatever gossip frames were lost.
            self.mark_handed_over(peer, round.started);
            self.mark_synced(peer, round.started, true);
            self.prove_identical(peer, &shared, round.started);
            if let Some(t) = round.takeover {
                let _ = t.done.send(true);
            }
            return;
        }
        if let Some(t) = &round.takeover {
            // A takeover pulls the differing buckets of its slots whole,
            // young lattices too, and ships nothing (see `takeover`).
            let pull: Vec<u32> = differ
                .iter()
                .copied()
                .filter(|b| u16::try_from(*b).is_ok_and(|b| t.slots.binary_search(&b).is_ok()))
                .collect();
            if pull.is_empty() {
                if let Some(t) = round.takeover {
                    let _ = t.done.send(true);
                }
                return;
            }
            round.shipped = Some(0);
            self.rounds
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .insert(b.round, round);
            self.send(
                peer,
                Frame::new(Body::AeEntries(wire::AeEntries {
                    round: b.round,
                    lattices: Vec::new(),
                    pull,
                    full: true,
                    ..Default::default()
                })),
                true,
            );
            return;
        }
        let this = self.clone();
        let id = b.round;
        let whole = self.whole_due(peer, &differ);
        self.handle.spawn(async move {
            let out = this.bucket_lattices(&differ, round.cutoff, &whole).await;
            let lattices = out.lattices;
            {
                let mut peers = this.peers.lock().unwrap_or_else(|e| e.into_inner());
                peers.entry(peer).or_default().ae_shipped += lattices.len() as u64;
            }
            round.shipped = Some(lattices.len());
            round.younger = out.younger;
            round.held = out.held;
            round.capped = out.capped;
            round.differ = differ.clone();
            this.rounds
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .insert(id, round);
            // Catching up, it asks for the young lattices too. A key
            // written all the time is always young, so a pull bounded by
            // the cutoff never brings it whole: this node would then take
            // its slots back without a part only its own log had — one it
            // left out as unconfirmed that a replica had got (a counter's
            // own running total, which a newer, lower one would overwrite).
            let full = !this.is_ready();
            let unvouched = this.unvouched(peer, &lattices);
            this.send(
                peer,
                Frame::new(Body::AeEntries(wire::AeEntries {
                    round: id,
                    unvouched,
                    lattices,
                    pull: differ,
                    full,
                    whole,
                    ..Default::default()
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
    /// `received`: the commit timestamps of the lattices the peer sent;
    /// only those older than the round's cutoff count (a full pull brings
    /// young ones too). `theirs`: where the peer held young typed
    /// lattices back, when its answer says (tombstone proofs: `proofs`).
    /// What changed nothing on the other side counts as not shipped
    /// ([`Seen`]).
    pub(super) fn ae_finish(
        &self,
        peer: NodeId,
        round_id: u64,
        seen: Seen<'_>,
        theirs: Option<&[u32]>,
    ) {
        let received = seen.received;
        let round = self
            .rounds
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&round_id)
            .filter(|r| r.peer == peer);
        if let Some(r) = round {
            if let Some(t) = r.takeover {
                // Whole unless a shard's batch limit cut it short.
                let _ = t.done.send(received.len() < AE_BATCH);
                return;
            }
            // Everything here older than the cutoff in the buckets that
            // differed went in this round (not cut short by the batch cap),
            // and the peer merged it before answering: it has all of this
            // node's data up to the cutoff, even if it has newer versions
            // (what a decommissioning node, which no longer gets writes,
            // needs; a clean round may never come while keys change).
            if r.shipped.is_some_and(|n| n < AE_BATCH) {
                self.mark_handed_over(peer, r.cutoff);
            }
            if let Some(shared) = self.shared_with(peer) {
                let outcome = super::proofs::Outcome {
                    differ: &r.differ,
                    held: &r.held,
                    theirs,
                    capped: r.capped,
                };
                self.prove_round(peer, &shared, r.started, r.cutoff, outcome);
            }
            let received = received.iter().filter(|&&ts| ts < r.cutoff).count();
            let theirs_here = received == 0 || seen.absorbed;
            if (r.shipped == Some(0) || seen.dominated) && theirs_here {
                self.mark_synced(peer, r.cutoff, !r.younger);
            } else if theirs_here && !seen.capped && !self.is_ready() && !self.batches_pending() {
                // Catching up needs the peer's data here, not this node's
                // there: a peer that fenced this node (a takeover while it
                // caught up) merges nothing it ships, so a record only this
                // node kept — a deletion the others collected while it was
                // down — made every round unclean and the node never
                // caught up (CI, 2026-12-01). Not with a batch of its own
                // still unconfirmed: a node back from a pause must first
                // lose that batch (it restarts), or it would serve and
                // spread a write its region moved on without.
                self.mark_caught_up_from(peer, r.cutoff);
            }
        }
    }

    /// A round found the pair in sync up to `ts`: for catching up, and,
    /// with `ours`, for this node's gossip streams to the peer
    /// (watermarks). Not for tombstone collection: a young collection may
    /// hide an older element change (see `proofs`).
    pub(super) fn mark_synced(&self, peer: NodeId, ts: u64, ours: bool) {
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

    /// Everything `peer` held committed before `ts` is here (see
    /// [`Cluster::catch_up_pending`]); says nothing of this node's data
    /// there, so no watermark moves.
    fn mark_caught_up_from(&self, peer: NodeId, ts: u64) {
        let mut peers = self.peers.lock().unwrap_or_else(|e| e.into_inner());
        let p = peers.entry(peer).or_default();
        p.synced_ts = p.synced_ts.max(ts);
    }

    /// `peer` holds every lattice this node committed or merged before
    /// `ts` (see `decommission`).
    fn mark_handed_over(&self, peer: NodeId, ts: u64) {
        let mut peers = self.peers.lock().unwrap_or_else(|e| e.into_inner());
        let p = peers.entry(peer).or_default();
        p.handoff_ts = p.handoff_ts.max(ts);
    }

    /// Anti-entropy leaves alone lattices younger than two merge epochs
    /// plus the WAN round trip plus 100 ms: gossip is still delivering
    /// them, and shipping them too would only race it.
    pub(super) fn cutoff(&self) -> u64 {
        let settle = 2 * self.settings.merge_epoch
            + 2 * self.settings.wan_delay
            + Duration::from_millis(100);
        self.hlc
            .now()
            .saturating_sub((settle.as_millis() as u64) << 16)
    }
}

/// What the shards answered for a set of buckets (see
/// [`Cluster::bucket_lattices`]).
#[derive(Default)]
pub(super) struct Shipment {
    pub lattices: Vec<Lattice>,
    /// Younger lattices sat in those buckets too (not shipped).
    pub younger: bool,
    /// Buckets where a young typed lattice was held back (sorted).
    pub held: Vec<u32>,
    /// A shard's batch hit the cap.
    pub capped: bool,
}

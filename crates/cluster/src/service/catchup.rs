//! Catching up after a start, and the hand-back of a node's slots once
//! it has: when a node may act as a primary (see `docs/regions.md`).

use super::*;
use elsa_shard::{AdminMsg, TxnId};

/// How long a node that caught up waits for a peer to hand its slots back
/// before it serves them anyway (a peer alive to membership but not
/// answering: better a short window of two primaries than no primary),
/// on top of three merge epochs (a peer answers after two flushes).
pub(super) const HAND_BACK_TIMEOUT: Duration = Duration::from_secs(10);

/// How long a hand-back waits for the transactions holding keys of the
/// slots handed back to finish here: past the orphan resolver's 3 s (it
/// finishes any whose coordinator is gone), well under the peer's
/// [`HAND_BACK_TIMEOUT`].
const HOLD_DRAIN_LIMIT: Duration = Duration::from_secs(6);

/// How long a starting node looks for a ready peer in its region before
/// concluding it is the first (a fresh cluster: nobody has data to miss).
pub(super) const JOIN_GRACE: Duration = Duration::from_secs(2);

/// A gap this long between pulses (every 100 ms) means the process was
/// paused (or starved) long enough that it may have been declared dead
/// (the failure detector takes some seconds of silence).
pub(super) const PAUSE_GAP: Duration = Duration::from_millis(2500);

/// How often the pulse runs.
const PULSE: Duration = Duration::from_millis(100);

/// How far ahead of each pulse the clock may read physical time (see
/// [`Hlc::hold_physical_below`]): several pulses, so a loaded runtime does
/// not stall timestamps, and well under the second or more of silence the
/// failure detector needs before peers take this node's slots over.
pub(super) const CLOCK_LEASE: Duration = Duration::from_millis(600);

impl Cluster {
    /// True once this node has caught up since it started (it may then be
    /// primary).
    pub fn is_ready(&self) -> bool {
        self.ready.load(Ordering::Relaxed)
    }

    /// The ready peers of this node's region that replicate some slot it
    /// replicates: the ones it catches up from, and the ones that may have
    /// acted as primary for its slots while it was away.
    fn ready_region_peers_sharing_slots(&self) -> Vec<NodeId> {
        let ring = self.ring.load();
        let own = &self.settings.region;
        let shared = self.shared.lock().unwrap_or_else(|e| e.into_inner());
        ring.members()
            .iter()
            // A leaving node is no teacher: it stops receiving writes.
            .filter(|m| m.node != self.settings.node && m.ready && !m.leaving && &m.region == own)
            .filter(|m| shared.get(&m.node).is_some_and(|l| !l.is_empty()))
            .map(|m| m.node)
            .collect()
    }

    /// The ready peers of this node's region it shares buckets with and
    /// has not yet caught up from; `None` while it is still looking for
    /// one (the first [`JOIN_GRACE`] after starting).
    ///
    /// Caught up from peer P means: an anti-entropy round with P proved
    /// that everything P held up to a time at or after the first gossip
    /// frame P sent this incarnation is here (what only this node holds
    /// does not count: P may refuse it while fencing this node, see
    /// `Cluster::ae_finish`). Commits P made before P put this node
    /// back in its view never reach it by gossip; they are all older than
    /// that frame, so the round covered them; later ones come by gossip.
    pub fn catch_up_pending(&self) -> Option<Vec<NodeId>> {
        let teachers = self.ready_region_peers_sharing_slots();
        if teachers.is_empty() {
            return self.may_found_region().then(Vec::new);
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

    /// With no ready peer in its region to catch up from: whether this node
    /// may be the first to serve — a region forming, or restarting whole.
    /// Two nodes that each thought they were first would both act as the
    /// primary of every slot (a split brain: both answered `INCR` with 1),
    /// so the rule is explicit:
    ///
    /// - a node that started with no data waits until its region has
    ///   formed — `region-nodes` of its nodes in view, or, when that is not
    ///   set, every seed it was given — and then only the lowest node id
    ///   goes first; the others catch up from it and have their slots
    ///   handed back, as after a restart;
    /// - a node with data (a restart) waits [`JOIN_GRACE`] for a ready
    ///   peer; with none, the lowest node id in view goes first.
    pub(super) fn may_found_region(&self) -> bool {
        let booted = *self.booted.lock().unwrap_or_else(|e| e.into_inner());
        let ring = self.ring.load();
        let own: Vec<NodeId> = ring
            .members()
            .iter()
            .filter(|m| m.region == self.settings.region)
            .map(|m| m.node)
            .collect();
        let lowest = own.iter().min() == Some(&self.settings.node);
        if !self.settings.fresh || self.ready_epoch.load(Ordering::Relaxed) > 0 {
            return booted.elapsed() >= JOIN_GRACE && lowest;
        }
        let expected = self.settings.region_nodes;
        let (formed, missing) = if expected > 0 {
            (
                own.len() >= expected,
                format!("{} of {expected} nodes of the region", own.len()),
            )
        } else {
            // Seeds given as host names count once resolved and seen (a
            // name used to count as seen at once: two fresh nodes seeded
            // by name each went first, both primary of every slot).
            let unseen = self.unseen_seeds(&ring);
            (unseen.is_empty(), format!("seeds not seen yet: {unseen:?}"))
        };
        if !formed {
            let mut last = self.forming_log.lock().unwrap_or_else(|e| e.into_inner());
            if last.is_none_or(|t| t.elapsed() >= Duration::from_secs(5)) {
                *last = Some(Instant::now());
                tracing::info!("waiting for the region to form before serving ({missing})");
            }
            return false;
        }
        lowest
    }

    /// Marks this node ready once nothing is pending; true if it is.
    pub(crate) fn catch_up_done(&self) -> bool {
        if self.is_ready() {
            return true;
        }
        if self.catch_up_pending().is_some_and(|p| p.is_empty()) {
            *self.ready_at.lock().unwrap_or_else(|e| e.into_inner()) = Some(Instant::now());
            self.ready_epoch.fetch_add(1, Ordering::Relaxed);
            self.ready.store(true, Ordering::Relaxed);
            let booted = *self.booted.lock().unwrap_or_else(|e| e.into_inner());
            tracing::info!("caught up after {:?}: may be primary now", booted.elapsed());
            return true;
        }
        false
    }

    /// What this node publishes as `ready`: how many times it has caught
    /// up, or 0 while it is catching up.
    pub(crate) fn published_ready(&self) -> u64 {
        if self.is_ready() {
            self.ready_epoch.load(Ordering::Relaxed)
        } else {
            0
        }
    }

    /// True once this node acts as the primary of its slots — and not
    /// while its membership ticks have stopped (a paused process that may
    /// have been declared dead meanwhile: it must not serve before its
    /// next tick decides).
    pub fn is_serving(&self) -> bool {
        // The pulse first: a fresh pulse after a pause was stored after
        // `serving` was cleared (see `tick`), so it is seen cleared here.
        let tick = self.last_tick.load(Ordering::SeqCst);
        elsa_shard::unix_ms().saturating_sub(tick) < PAUSE_GAP.as_millis() as u64
            && self.serving.load(Ordering::SeqCst)
            && !self.fenced.load(Ordering::Relaxed)
            && !self.region.get().is_some_and(|r| r.taken_out())
    }

    /// Peer `peer` refused this node's replication because it saw this
    /// node declared dead: it stops serving at once, and catches up again
    /// on the next membership tick.
    pub(super) fn fenced_by(&self, peer: NodeId) {
        if !self.fenced.swap(true, Ordering::Relaxed) {
            tracing::warn!(
                "peer {peer} counts this node as dead: not serving until caught up again"
            );
        }
    }

    /// The pulse: a task that only ticks, so a gap in it means the whole
    /// process stopped (a busy membership loop, waiting for a ring to be
    /// built, does not count). Rejoins when [`Cluster::tick`] says so.
    pub(super) async fn pulse(self: Arc<Self>) {
        let mut tick = tokio::time::interval(PULSE);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            if let Some(why) = self.tick() {
                self.rejoin(&why);
            }
        }
    }

    /// One pulse: notes it, and says whether this node must catch up
    /// again — its pulses stopped for longer than [`PAUSE_GAP`] (it was
    /// paused, and may have been declared dead meanwhile), or a peer
    /// refused it as dead.
    fn tick(&self) -> Option<String> {
        let now = elsa_shard::unix_ms();
        let last = self.last_tick.load(Ordering::SeqCst);
        let gap = now.saturating_sub(last);
        let paused = gap >= PAUSE_GAP.as_millis() as u64;
        if paused {
            // Before the horizon moves: a commit in flight across the pause
            // sees the count change and does not install (see `Hlc::lapse`).
            self.hlc.lapsed();
            // And before the pulse looks fresh again: a shard running work
            // queued before the pause must already see "not serving" (it
            // checks on every request; see `ShardMsg::refuse_as_stale`).
            self.serving.store(false, Ordering::SeqCst);
        }
        self.last_tick.store(now, Ordering::SeqCst);
        // Ahead of the clock's own physical time (a skewed clock, in tests,
        // reads other than `now`).
        self.hlc
            .hold_physical_below(self.hlc.physical_ms() + CLOCK_LEASE.as_millis() as u64);
        if paused {
            return Some(format!("no pulse for {gap} ms (paused?)"));
        }
        if self.region.get().is_some_and(|r| r.taken_out()) {
            return Some("the region's ownership group took this node out".to_string());
        }
        self.fenced
            .load(Ordering::Relaxed)
            .then(|| "a peer counts this node as dead".to_string())
    }

    /// Starts catching up again, as after a restart: no slot's primary
    /// until caught up from the ready peers of its region and handed its
    /// slots back (see `docs/regions.md`). What it holds may predate what
    /// the region acknowledged while it was away.
    pub(crate) fn rejoin(&self, why: &str) {
        tracing::warn!("{why}: catching up again before serving any slot");
        self.serving.store(false, Ordering::Relaxed);
        self.ready.store(false, Ordering::Relaxed);
        *self.ready_at.lock().unwrap_or_else(|e| e.into_inner()) = None;
        *self.booted.lock().unwrap_or_else(|e| e.into_inner()) = Instant::now();
        self.handed_back
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clear();
        self.first_gossip
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clear();
        self.fenced.store(false, Ordering::Relaxed);
        if let Some(r) = self.region.get() {
            r.clear_taken_out();
        }
    }

    /// Peers this node saw leave the live set and not catch up since.
    /// True for a peer of this region that this node saw declared dead
    /// and that has not caught up since: nothing it sends is merged —
    /// replication, gossip or anti-entropy — as it may hold writes its
    /// region never confirmed (a paused primary's last batch), which it
    /// drops by restarting (`Cluster::on_lost_batch`).
    pub(crate) fn distrusts(&self, peer: NodeId) -> bool {
        self.distrusted
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .contains(&peer)
    }

    pub(crate) fn set_distrusted(&self, nodes: HashSet<NodeId>) {
        *self.distrusted.lock().unwrap_or_else(|e| e.into_inner()) = nodes;
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
        let ready_at = *self.ready_at.lock().unwrap_or_else(|e| e.into_inner());
        let Some(since) = ready_at.filter(|_| self.is_ready()) else {
            return false;
        };
        let mut pending = self.ready_region_peers_sharing_slots();
        {
            let done = self.handed_back.lock().unwrap_or_else(|e| e.into_inner());
            pending.retain(|n| !done.contains(n));
        }
        let limit = HAND_BACK_TIMEOUT + 3 * self.settings.merge_epoch;
        if pending.is_empty() || since.elapsed() > limit {
            if !pending.is_empty() {
                tracing::warn!(
                    "hand-back: no answer from {pending:?} in {limit:?}; serving anyway"
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

    /// Waits until no transaction holds a key on this node's shards that
    /// this node no longer routes to itself (the slots just handed to
    /// `peer`), at most [`HOLD_DRAIN_LIMIT`]: each such transaction has
    /// then installed or aborted here. Shadow holds are the backups' and
    /// do not count. New holds on those keys cannot appear: requests for
    /// them are refused since the switch. Answers the holds still there
    /// at the limit — a transaction that cannot finish while nobody
    /// serves the slots (its record's key is among them): the peer holds
    /// those keys for it before it serves them, so nothing it runs gets
    /// in before the transaction's writes (a list element landed between
    /// two of one transaction's appends: the region fault run, 2026-11-27).
    pub(super) async fn drain_moved_holds(&self, peer: NodeId) -> Vec<(TxnId, Vec<HashedKey>)> {
        let deadline = Instant::now() + HOLD_DRAIN_LIMIT;
        loop {
            let held = self.holds_routed_elsewhere().await;
            if held.is_empty() {
                return held;
            }
            if Instant::now() >= deadline {
                tracing::warn!(
                    "hand-back to {peer}: transactions {:x?} still hold keys here after {HOLD_DRAIN_LIMIT:?}; handing back with their holds",
                    held.iter().map(|(t, _)| *t).collect::<Vec<_>>()
                );
                return held;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    /// The transactions (not shadows) holding a key on a local shard that
    /// the current view routes to another shard, with those keys.
    async fn holds_routed_elsewhere(&self) -> Vec<(TxnId, Vec<HashedKey>)> {
        let mut asks = Vec::with_capacity(self.inboxes.len());
        for inbox in &self.inboxes {
            let (reply, rx) = oneshot::channel();
            let msg = ShardMsg::Admin(AdminMsg::StaleHolds {
                older_than: Duration::ZERO,
                reply,
            });
            if inbox.send(msg).is_ok() {
                asks.push(rx);
            }
        }
        let mut out: Vec<(TxnId, Vec<HashedKey>)> = Vec::new();
        for (index, rx) in asks.into_iter().enumerate() {
            let here = ShardId {
                node: self.settings.node,
                index: index as u16,
            };
            for (txn, keys) in rx.await.unwrap_or_default() {
                if txn & elsa_shard::msg::SHADOW != 0 {
                    continue;
                }
                let moved: Vec<HashedKey> = keys
                    .into_iter()
                    .filter(|k| self.route(k.hash) != here)
                    .collect();
                if !moved.is_empty() {
                    out.push((txn, moved));
                }
            }
        }
        out
    }

    /// A peer handed slots back with transactions still holding some of
    /// their keys there: each local shard holds those keys for them as
    /// their shadow (queued ahead of any request this node serves after),
    /// until the transaction's install or its resolver releases them.
    pub(super) fn hold_for_handed_back(&self, peer: NodeId, held: Vec<wire::HeldKeys>) {
        if held.is_empty() {
            return;
        }
        tracing::warn!(
            "hand-back from {peer}: {} transactions still hold keys there; held here too until they finish",
            held.len()
        );
        let ring = self.ring.load();
        for h in held {
            let mut per_shard: HashMap<u16, Vec<(HashedKey, elsa_shard::HoldMode)>> =
                HashMap::new();
            for x in h.holds {
                let mode = if x.write {
                    elsa_shard::HoldMode::Write
                } else {
                    elsa_shard::HoldMode::Read
                };
                per_shard
                    .entry(ring.own_shard(slot_of(x.hash)))
                    .or_default()
                    .push((
                        HashedKey {
                            key: x.key,
                            hash: x.hash,
                        },
                        mode,
                    ));
            }
            for (shard, holds) in per_shard {
                let (reply, _) = oneshot::channel();
                if let Some(inbox) = self.inboxes.get(usize::from(shard)) {
                    let _ = inbox.send(ShardMsg::Shadow {
                        txn: h.txn & !elsa_shard::msg::SHADOW,
                        holds,
                        reply,
                    });
                }
            }
        }
    }

    /// Waits until every local shard has shipped two merge epochs (at
    /// most 20 epochs): the one under way may have taken its lattices
    /// before a switch of primaries; the next one holds everything after.
    pub(super) async fn two_flushes(&self) {
        let start: Vec<u64> = self
            .flushes
            .iter()
            .map(|f| f.load(Ordering::Relaxed))
            .collect();
        let deadline =
            Instant::now() + 20 * self.settings.merge_epoch.max(Duration::from_millis(50));
        while Instant::now() < deadline
            && self
                .flushes
                .iter()
                .zip(&start)
                .any(|(f, s)| f.load(Ordering::Relaxed) < s + 2)
        {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    /// A peer that caught up asks for its slots back: once this node routes
    /// them to it, every local shard ships a merge epoch begun after that,
    /// then [`wire::HandBack`] follows that gossip on the same link.
    pub(super) fn hand_back(self: &Arc<Self>, peer: NodeId) {
        // It caught up: stop routing around it (see `note_not_serving`),
        // and take over anew what this node served for it meanwhile.
        self.not_serving
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&peer);
        self.takeover_view(&self.ring.load());
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
            // Commits that took holds here while this node was the acting
            // primary install here, under those holds, possibly long after
            // the switch (a slow record write, a retry): the peer must not
            // serve before they did and their installs were shipped, or it
            // reads around them and overwrites them (a lost append, a
            // transaction half applied: the long isolation run found both).
            let held = me.drain_moved_holds(peer).await;
            me.two_flushes().await;
            let holds = held
                .into_iter()
                .map(|(txn, keys)| wire::HeldKeys {
                    txn,
                    holds: keys
                        .into_iter()
                        .map(|k| remote::HoldMsg {
                            key: k.key,
                            hash: k.hash,
                            write: true,
                        })
                        .collect(),
                })
                .collect();
            me.send(
                peer,
                Frame::new(Body::HandBack(wire::HandBack { holds })),
                false,
            );
            me.handing_back
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .remove(&peer);
        });
    }
}

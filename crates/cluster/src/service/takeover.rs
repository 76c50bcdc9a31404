//! Taking a slot over: before this node serves a slot as its primary —
//! because the primary it had was declared dead, is catching up, answered
//! that it serves nothing, or handed the slot back — it pulls every
//! lattice of the slot it lacks from the slot's other ready replicas in
//! the region, young ones included, and fences the node it takes over
//! from at each of them.
//!
//! Why: a primary ships each batch of its commits to its replicas
//! together, but they may not all get it — it dies or stops between the
//! frames. A replica that missed it and takes the slot over would serve
//! the key without the write and move on; the replica that had it brings
//! it back by anti-entropy later, behind the newer writes (an element in
//! the middle of a list a reader had seen without it; the region fault
//! run of 2026-11-27 caught it). Anti-entropy usually repairs the pair
//! first, in the seconds the failure detector takes, but not when the
//! takeover is quick (a restarted primary answering that it serves
//! nothing) or the round comes late.
//!
//! The fence closes the other half: a paused primary that wakes up may
//! still send a batch queued before the pause. A replica that answered a
//! takeover round refuses everything from the node fenced there (as from
//! one it saw declared dead) until that node has caught up again — so
//! nothing of the old primary reaches it after the new primary read it.
//!
//! A slot has a state word: a version, bumped each time a new view makes
//! another node its primary, and a flag set once a takeover round for
//! that version finished. `route` serves a slot here only with the flag
//! set, and asks for a round otherwise (the caller is answered Busy and
//! routes again). A round that cannot finish (a teacher that does not
//! answer) is given up after [`TAKEOVER_LIMIT`]: better serving than no
//! primary, as the hand-back decides too.

use super::*;
use elsa_shard::table::DIGEST_BUCKETS;
use tokio::sync::Notify;

/// Flag bit of a slot's state word: synced for the version in the rest.
const SYNCED: u32 = 1 << 31;

/// How long a slot waits for its takeover round before it is served anyway.
const TAKEOVER_LIMIT: Duration = Duration::from_secs(10);

/// How long one takeover round with one teacher may take.
const ROUND_LIMIT: Duration = Duration::from_secs(3);

/// Most nodes one takeover round may fence (a frame's bound).
pub(super) const MAX_FENCE: usize = 1024;

/// The takeover state of a node's slots, and the fences peers asked for.
pub(super) struct Takeovers {
    /// Per slot: [`SYNCED`] and a version.
    state: Box<[AtomicU32]>,
    /// Slots a request found not synced (the skipped-primary route, which
    /// no view change announces), with when they were first asked for.
    asked: Mutex<HashMap<u16, Instant>>,
    /// Wakes [`Cluster::takeover_loop`].
    wake: Notify,
    /// Nodes this node refuses everything from until their `(generation,
    /// ready count)` moves past the one here (they caught up again), and
    /// the latest pair membership showed for each node of the region.
    fences: Mutex<Fences>,
}

#[derive(Default)]
pub(super) struct Fences {
    fenced: HashMap<NodeId, (u64, u64)>,
    /// Each node's last `(generation, ready count)`, kept once it is gone.
    epochs: HashMap<NodeId, (u64, u64)>,
    /// The nodes of the region membership shows live now.
    live: HashSet<NodeId>,
}

impl Fences {
    /// Fences `node` until it is past `at` (generation, ready count);
    /// true if it was not fenced before. Nothing when membership here
    /// already shows it past `at` (the taker's view was behind), and an
    /// older `at` never lowers a fence.
    fn fence(&mut self, node: NodeId, at: (u64, u64)) -> bool {
        if self.epochs.get(&node).is_some_and(|&now| now > at) {
            return false;
        }
        match self.fenced.get_mut(&node) {
            Some(old) => {
                *old = (*old).max(at);
                false
            }
            None => {
                self.fenced.insert(node, at);
                true
            }
        }
    }

    /// Membership's latest pairs of the nodes it shows live: each fence
    /// whose node is past it lifts. A node gone keeps its fence, and one
    /// that rejoins catching up (ready count 0) is not past it.
    fn note(&mut self, epochs: HashMap<NodeId, (u64, u64)>) {
        self.fenced
            .retain(|n, at| epochs.get(n).is_none_or(|now| now <= at));
        self.live = epochs.keys().copied().collect();
        self.epochs.extend(epochs);
    }

    fn refuses(&self, node: NodeId) -> bool {
        self.fenced.contains_key(&node)
    }

    /// The nodes a taker fences, as membership last showed them: of its
    /// region, and gone from the view, catching up (ready count 0), or
    /// back from the dead without having caught up (`distrusted`) — any
    /// of them may have been the slot's primary and may still send
    /// something late. Not one live and ready that only answered that it
    /// serves nothing (its slots are being handed back to it, and it will
    /// serve them with the count it has now), nor a `leaving` one (it
    /// serves no slot but still hands its data over).
    fn to_fence(
        &self,
        me: NodeId,
        leaving: impl Fn(NodeId) -> bool,
        distrusted: impl Fn(NodeId) -> bool,
    ) -> Vec<wire::Fence> {
        self.epochs
            .iter()
            .filter(|&(&n, &(_, count))| {
                n != me && !leaving(n) && (!self.live.contains(&n) || count == 0 || distrusted(n))
            })
            .map(|(&node, &(generation, ready))| wire::Fence {
                node,
                generation,
                ready,
            })
            .take(MAX_FENCE)
            .collect()
    }
}

impl Takeovers {
    pub(super) fn new() -> Takeovers {
        Takeovers {
            state: (0..DIGEST_BUCKETS).map(|_| AtomicU32::new(0)).collect(),
            asked: Mutex::new(HashMap::new()),
            wake: Notify::new(),
            fences: Mutex::new(Fences::default()),
        }
    }
}

/// A takeover round under way with one teacher (see [`Round`]).
pub(super) struct TakeoverRound {
    /// The slots it syncs, sorted.
    pub(super) slots: Vec<u16>,
    /// Answered true once the teacher's lattices of those slots are
    /// merged here (false: cut short by the batch limit).
    pub(super) done: oneshot::Sender<bool>,
}

impl Cluster {
    /// Whether this node may serve `slot` as its primary now: true once a
    /// takeover round finished since a view last made another node its
    /// primary. Otherwise asks for one and answers false.
    pub(super) fn took_over(&self, slot: usize) -> bool {
        if self.takeovers.state[slot].load(Ordering::Acquire) & SYNCED != 0 {
            return true;
        }
        let mut asked = self
            .takeovers
            .asked
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        if let std::collections::hash_map::Entry::Vacant(e) = asked.entry(slot as u16) {
            e.insert(Instant::now());
            self.takeovers.wake.notify_one();
        }
        false
    }

    /// True once this node took `slot` over for the view it has (see
    /// [`Cluster::took_over`]), without asking for a round.
    pub(super) fn synced_slot(&self, slot: usize) -> bool {
        self.takeovers
            .state
            .get(slot)
            .is_some_and(|s| s.load(Ordering::Acquire) & SYNCED != 0)
    }

    /// A new view: every slot whose primary it makes another node must be
    /// taken over again before this node serves it; the rounds for the
    /// slots it makes this node's start now.
    pub(super) fn takeover_view(&self, ring: &Ring) {
        let own = ring.own_region();
        let me = self.settings.node;
        for (slot, state) in self.takeovers.state.iter().enumerate() {
            if ring
                .replicas(slot, own)
                .first()
                .is_some_and(|p| p.node == me)
            {
                continue;
            }
            let v = state.load(Ordering::Acquire);
            if v & SYNCED != 0 {
                state.store(v.wrapping_add(1) & !SYNCED, Ordering::Release);
            }
        }
        self.takeovers.wake.notify_one();
    }

    /// Runs the takeover rounds the views and requests ask for.
    pub(super) async fn takeover_loop(self: Arc<Self>) {
        loop {
            self.takeovers.wake.notified().await;
            // Requests for many slots arrive at once after a view change.
            tokio::time::sleep(Duration::from_millis(2)).await;
            while self.is_serving() {
                let slots = self.slots_to_take_over();
                if slots.is_empty() {
                    break;
                }
                self.take_over(slots).await;
            }
        }
    }

    /// Slots this node must sync before serving: those its view makes it
    /// the primary of, and those requests asked for, with their versions.
    fn slots_to_take_over(&self) -> Vec<(u16, u32)> {
        let ring = self.ring.load();
        let own = ring.own_region();
        let me = self.settings.node;
        let mut asked = self
            .takeovers
            .asked
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        let mut out = Vec::new();
        for (slot, state) in self.takeovers.state.iter().enumerate() {
            let v = state.load(Ordering::Acquire);
            if v & SYNCED != 0 {
                continue;
            }
            let replicas = ring.replicas(slot, own);
            let primary = replicas.first().is_some_and(|p| p.node == me);
            let wanted = asked.contains_key(&(slot as u16));
            // An asked slot whose replicas no longer include this node
            // is nobody's business here.
            if primary || (wanted && replicas.iter().any(|r| r.node == me)) {
                out.push((slot as u16, v));
            } else if wanted {
                asked.remove(&(slot as u16));
            }
        }
        out
    }

    /// One takeover: a round with every teacher of `slots`, then each slot
    /// all of whose teachers finished is marked synced (if no new view
    /// bumped its version meanwhile); one waiting past [`TAKEOVER_LIMIT`]
    /// is marked anyway.
    async fn take_over(self: &Arc<Self>, slots: Vec<(u16, u32)>) {
        let ring = self.ring.load_full();
        let own = ring.own_region();
        let me = self.settings.node;
        let skipped = self.not_serving_peers().unwrap_or_default();
        let trusted = |n: NodeId| {
            ring.member(n).is_some_and(|m| m.ready && !m.leaving)
                && !skipped.contains(&n)
                && !self.distrusts(n)
        };
        let mut per_teacher: HashMap<NodeId, Vec<u16>> = HashMap::new();
        for &(slot, _) in &slots {
            for r in ring.replicas(usize::from(slot), own) {
                if r.node != me && trusted(r.node) && !self.unreachable(r.node) {
                    per_teacher.entry(r.node).or_default().push(slot);
                }
            }
        }
        // The nodes this one may take slots over from that may still send
        // something late, as membership last showed them: of its region,
        // and gone from the view, catching up (ready count 0), or back
        // from the dead without having caught up (distrusted). Not one
        // that only answered that it serves nothing while ready (its slots
        // are being handed back to it, and it will serve them with the
        // count it has now), nor a leaving one (it serves no slot but
        // still hands its data over).
        let fence = self
            .takeovers
            .fences
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .to_fence(
                me,
                |n| ring.member(n).is_some_and(|m| m.leaving),
                |n| self.distrusts(n),
            );
        let mut rounds = tokio::task::JoinSet::new();
        for (teacher, list) in per_teacher {
            let me = self.clone();
            let fence = fence.clone();
            rounds.spawn(async move {
                let ok = me.takeover_round(teacher, list.clone(), fence).await;
                (teacher, list, ok)
            });
        }
        let mut failed: HashSet<u16> = HashSet::new();
        while let Some(joined) = rounds.join_next().await {
            let Ok((teacher, list, ok)) = joined else {
                continue;
            };
            if !ok {
                tracing::info!(
                    "takeover: the round with {teacher} for {} slots did not finish; again",
                    list.len()
                );
                failed.extend(list);
            }
        }
        // What the old primaries' streams may still have held goes to
        // other regions before anything this node writes there
        // (`handover`).
        let ready: Vec<u16> = self
            .to_mark(&slots, &failed)
            .into_iter()
            .map(|(slot, _)| slot)
            .collect();
        self.hand_over(&ready).await;
        let late = self.mark_taken_over(slots, &failed);
        if late > 0 {
            tracing::warn!(
                "takeover: {late} slots served without a finished round after {TAKEOVER_LIMIT:?}"
            );
        }
        if !failed.is_empty() {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Which of `slots` [`Cluster::mark_taken_over`] will mark.
    fn to_mark(&self, slots: &[(u16, u32)], failed: &HashSet<u16>) -> Vec<(u16, u32)> {
        let asked = self
            .takeovers
            .asked
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        slots
            .iter()
            .copied()
            .filter(|(slot, _)| {
                !failed.contains(slot)
                    || asked
                        .get(slot)
                        .is_some_and(|first| first.elapsed() >= TAKEOVER_LIMIT)
            })
            .collect()
    }

    /// Marks `slots` synced (each at the version its round started at)
    /// but those in `failed`, unless they waited past [`TAKEOVER_LIMIT`];
    /// answers how many of these it marked.
    fn mark_taken_over(&self, slots: Vec<(u16, u32)>, failed: &HashSet<u16>) -> usize {
        let mut asked = self
            .takeovers
            .asked
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        let mut late = 0;
        for (slot, version) in slots {
            let first = *asked.entry(slot).or_insert_with(Instant::now);
            if failed.contains(&slot) {
                if first.elapsed() < TAKEOVER_LIMIT {
                    continue;
                }
                late += 1;
            }
            let _ = self.takeovers.state[usize::from(slot)].compare_exchange(
                version,
                version | SYNCED,
                Ordering::AcqRel,
                Ordering::Acquire,
            );
            asked.remove(&slot);
        }
        late
    }

    /// An anti-entropy round with `teacher` that pulls every lattice of
    /// the differing buckets among `slots`; true once they are merged here.
    async fn takeover_round(
        self: &Arc<Self>,
        teacher: NodeId,
        slots: Vec<u16>,
        fence: Vec<wire::Fence>,
    ) -> bool {
        let Some(shared) = self.shared_with(teacher) else {
            return true; // no bucket in common any more
        };
        let (done, finished) = oneshot::channel();
        let takeover = TakeoverRound { slots, done };
        let round = self
            .start_round(teacher, &shared, Some(takeover), fence)
            .await;
        let ok = matches!(
            tokio::time::timeout(ROUND_LIMIT, finished).await,
            Ok(Ok(true))
        );
        self.rounds
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&round);
        ok
    }

    /// A peer takes slots over from the nodes of `fence`: from now on
    /// nothing of theirs is merged here until membership shows them past
    /// the generation and ready count the peer saw (they restarted or
    /// caught up again) — unless it already does (the peer's view was
    /// behind). Under the fences' lock, as every merge of a peer's
    /// lattices is, so none of theirs can be half way in when the peer's
    /// round reads this node's state.
    pub(super) fn fence(&self, fence: &[wire::Fence]) {
        let mut f = self
            .takeovers
            .fences
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        for x in fence.iter().filter(|x| x.node != self.settings.node) {
            let at = (x.generation, x.ready);
            if f.fence(x.node, at) {
                tracing::info!(
                    "takeover: a peer serves slots of {}: nothing of its is merged here until it is past {at:?} (generation, ready count)",
                    x.node
                );
            }
        }
    }

    /// Membership's latest `(generation, ready count)` of the nodes of
    /// the region it sees (those it no longer sees keep their last);
    /// lifts each fence whose node restarted or caught up since.
    pub(crate) fn note_epochs(&self, epochs: HashMap<NodeId, (u64, u64)>) {
        let mut f = self
            .takeovers
            .fences
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        f.note(epochs);
    }

    /// True when a takeover fenced `peer` here.
    pub(super) fn fenced_here(&self, peer: NodeId) -> bool {
        self.takeovers
            .fences
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .refuses(peer)
    }

    /// Merges lattices `from` sent unless this node distrusts it, under
    /// the fences' lock (see [`Cluster::fence`]); None when refused.
    #[allow(clippy::type_complexity)]
    pub(super) fn merge_from(
        &self,
        from: NodeId,
        lattices: Vec<Lattice>,
        durable: Option<()>,
        arrival: Arrival,
    ) -> Option<Vec<oneshot::Receiver<Result<usize, elsa_shard::Refusal>>>> {
        self.merge_split(from, lattices, &[], durable, arrival)
            .map(|(mut waits, behind)| {
                waits.extend(behind);
                waits
            })
    }

    /// [`Cluster::merge_from`], with the answers of another region's
    /// backup's lattices apart (`Cluster::by_repairer`: what changed
    /// nothing there merged whole); `unvouched`: the slots whose lattices
    /// the sender says it does not repair (`wire::AeEntries`).
    #[allow(clippy::type_complexity)]
    pub(super) fn merge_split(
        &self,
        from: NodeId,
        lattices: Vec<Lattice>,
        unvouched: &[u32],
        durable: Option<()>,
        arrival: Arrival,
    ) -> Option<(
        Vec<oneshot::Receiver<Result<usize, elsa_shard::Refusal>>>,
        Vec<oneshot::Receiver<Result<usize, elsa_shard::Refusal>>>,
    )> {
        let f = self
            .takeovers
            .fences
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        if f.refuses(from) || self.distrusts(from) {
            return None;
        }
        let merged = if arrival == Arrival::Repair {
            // Another region's repair: what its slots' primaries send, and
            // what other replicas send, which must not overtake the
            // primaries' gossip (`units`).
            let (primary, behind) = self.by_repairer(from, lattices, unvouched);
            (
                self.merge_lattices(primary, durable, Arrival::Repair),
                self.merge_lattices(behind, durable, Arrival::Behind),
            )
        } else {
            (self.merge_lattices(lattices, durable, arrival), Vec::new())
        };
        drop(f);
        Some(merged)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fences(live: &[(NodeId, (u64, u64))]) -> Fences {
        let mut f = Fences::default();
        f.note(live.iter().copied().collect());
        f
    }

    #[test]
    fn a_fence_lifts_once_its_node_restarted_or_caught_up_again() {
        let mut f = fences(&[(2, (100, 3))]);
        assert!(f.fence(2, (100, 3)));
        assert!(f.refuses(2));
        // Gone from the view, then back catching up (count 0): still out.
        f.note(HashMap::new());
        assert!(f.refuses(2));
        f.note([(2, (100, 0))].into());
        assert!(f.refuses(2), "rejoining is not having caught up");
        // Back with the count it had (a pause nobody here noticed): out.
        f.note([(2, (100, 3))].into());
        assert!(f.refuses(2));
        f.note([(2, (100, 4))].into());
        assert!(!f.refuses(2), "caught up again");
        assert!(f.fence(2, (100, 4)));
        f.note([(2, (200, 0))].into());
        assert!(
            !f.refuses(2),
            "restarted: its recovery leaves out what was not confirmed"
        );
    }

    #[test]
    fn a_taker_behind_this_node_s_view_fences_nothing() {
        // The taker saw node 2 catching up; here it is ready since.
        let mut f = fences(&[(2, (100, 1))]);
        assert!(!f.fence(2, (100, 0)));
        assert!(!f.refuses(2));
        // A stale fence never lowers a newer one.
        assert!(f.fence(2, (100, 1)));
        assert!(!f.fence(2, (100, 0)));
        f.note([(2, (100, 1))].into());
        assert!(f.refuses(2), "still at the newer fence's count");
    }

    #[test]
    fn a_taker_fences_the_gone_the_catching_up_and_the_distrusted_only() {
        let mut f = fences(&[
            (1, (10, 1)),
            (2, (20, 1)),
            (3, (30, 0)),
            (4, (40, 2)),
            (5, (50, 2)),
            (6, (60, 1)),
        ]);
        // Node 2 is declared dead: membership no longer shows it.
        f.note(
            [
                (1, (10, 1)),
                (3, (30, 0)),
                (4, (40, 2)),
                (5, (50, 2)),
                (6, (60, 1)),
            ]
            .into(),
        );
        let mut got: Vec<(NodeId, u64, u64)> = f
            .to_fence(1, |n| n == 5, |n| n == 6)
            .into_iter()
            .map(|x| (x.node, x.generation, x.ready))
            .collect();
        got.sort_unstable();
        // 1: itself; 4: ready (a hand-back under way); 5: leaving.
        assert_eq!(got, [(2, 20, 1), (3, 30, 0), (6, 60, 1)]);
    }
}

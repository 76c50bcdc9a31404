//! What anti-entropy has proven each peer holds, bucket by bucket — the
//! only ground on which tombstones are collected — and the repair of a
//! collection whose bucket keeps differing while it is written.
//!
//! A round proves a bucket in sync up to a time only when nothing there
//! can still be missing on either side:
//!
//! - identical digests prove it up to the round's start;
//! - a differing bucket is proven up to the round's cutoff when both
//!   sides shipped every lattice of it older than the cutoff (no batch
//!   cut short by the cap), neither held back a *young typed* lattice
//!   there nor holds another region's lattice *parked* there (in no
//!   digest, merged nowhere yet: `Shard::bucket_batch_whole` lists the
//!   bucket as held), and the responder merged what the initiator
//!   shipped (one that distrusts or fences the initiator drops it, and
//!   its answer proves nothing: `AeEntries::proof`). A plain key's newer
//!   version carries everything its older ones did; a collection's does
//!   not carry an older element change — an `SREM` whose gossip frame was
//!   lost is in no later `SADD` — so a young collection may hide exactly
//!   the remove the sweep would forget (issue 41, defect 12: "nothing
//!   older than the cutoff shipped" was taken as proof, the remove was
//!   collected, and the old add came back).
//!
//! A collection written without pause is young in every round, so its
//! bucket would never be proven, and a lost element change of it never
//! repaired (defect 13). A bucket where a young typed lattice has been
//! held back in every round with a peer for [`Cluster::repair_after`] is
//! therefore shipped with its young typed lattices, whole, both ways, in
//! the next round with that peer: that repairs it and proves it. The
//! cost is one whole copy per hot collection per peer and direction about
//! every `repair_after`, and nothing for keys that go quiet.
//!
//! [`Cluster::tombstone_horizon`] is the oldest proof over every shared
//! bucket of every peer.

use super::*;

/// What this node has proven about one peer.
pub(super) struct Proofs {
    /// Per bucket, the HLC up to which the peer holds everything this
    /// node held there (and this node what the peer held).
    proven: Vec<u64>,
    /// Buckets where a young typed lattice was held back in every round
    /// with the peer since this HLC.
    held_since: HashMap<u32, u64>,
    /// The oldest of `proven` over `shared` (the shared buckets it was
    /// computed for; recomputed when the view changes them).
    min: u64,
    shared: Option<Arc<Vec<u16>>>,
}

impl Default for Proofs {
    fn default() -> Self {
        Proofs {
            proven: vec![0; elsa_shard::table::DIGEST_BUCKETS],
            held_since: HashMap::new(),
            min: 0,
            shared: None,
        }
    }
}

impl Proofs {
    fn prove(&mut self, bucket: usize, ts: u64) {
        if let Some(p) = self.proven.get_mut(bucket) {
            *p = (*p).max(ts);
        }
    }

    /// The oldest proof over `shared`, cached for that `shared`.
    fn oldest(&mut self, shared: &Arc<Vec<u16>>) -> u64 {
        if !self.shared.as_ref().is_some_and(|s| Arc::ptr_eq(s, shared)) {
            self.min = shared
                .iter()
                .map(|&b| self.proven[usize::from(b)])
                .min()
                .unwrap_or(u64::MAX);
            self.shared = Some(shared.clone());
        }
        self.min
    }
}

/// What one round found about the buckets that differed.
pub(super) struct Outcome<'a> {
    /// The buckets that differed (sorted).
    pub differ: &'a [u32],
    /// Where this node held a young typed lattice back (sorted).
    pub held: &'a [u32],
    /// Where the peer did (sorted), or `None` when its answer proves
    /// nothing (an older node, or a batch cut short by the cap).
    pub theirs: Option<&'a [u32]>,
    /// This node's batch was cut short by the cap.
    pub capped: bool,
}

impl Cluster {
    /// How long a bucket may differ with a young typed lattice held back
    /// before its collections are shipped whole: a few rounds, at least a
    /// second (well past the cutoff, so a change merely in flight by
    /// gossip has arrived by then).
    pub(super) fn repair_after(&self) -> Duration {
        (4 * self.settings.anti_entropy).max(Duration::from_secs(1))
    }

    /// The buckets among `differ` whose young typed lattices go whole in
    /// this round with `peer` (see the module doc).
    pub(super) fn whole_due(&self, peer: NodeId, differ: &[u32]) -> Vec<u32> {
        let due = self
            .hlc
            .now()
            .saturating_sub((self.repair_after().as_millis() as u64) << 16);
        let proofs = self.proofs.lock().unwrap_or_else(|e| e.into_inner());
        let Some(p) = proofs.get(&peer) else {
            return Vec::new();
        };
        differ
            .iter()
            .copied()
            .filter(|b| p.held_since.get(b).is_some_and(|&since| since <= due))
            .collect()
    }

    /// A round with `peer` over `shared` found every digest identical at
    /// `started`.
    pub(super) fn prove_identical(&self, peer: NodeId, shared: &[u16], started: u64) {
        let mut proofs = self.proofs.lock().unwrap_or_else(|e| e.into_inner());
        let p = proofs.entry(peer).or_default();
        for &b in shared {
            p.prove(usize::from(b), started);
        }
        p.held_since.clear();
        p.shared = None;
    }

    /// A round with `peer` over `shared`, started at `started` with
    /// `cutoff`, ended with `outcome` (see the module doc).
    pub(super) fn prove_round(
        &self,
        peer: NodeId,
        shared: &[u16],
        started: u64,
        cutoff: u64,
        outcome: Outcome<'_>,
    ) {
        let differs = |b: u32| outcome.differ.binary_search(&b).is_ok();
        let mut proofs = self.proofs.lock().unwrap_or_else(|e| e.into_inner());
        let p = proofs.entry(peer).or_default();
        for &b in shared {
            if !differs(u32::from(b)) {
                p.prove(usize::from(b), started);
            }
        }
        match outcome.theirs.filter(|_| !outcome.capped) {
            Some(theirs) => {
                let held = |b: &u32| {
                    outcome.held.binary_search(b).is_ok() || theirs.binary_search(b).is_ok()
                };
                let mut since = HashMap::new();
                for &b in outcome.differ {
                    if held(&b) {
                        since.insert(b, p.held_since.get(&b).copied().unwrap_or(started));
                    } else {
                        p.prove(b as usize, cutoff);
                    }
                }
                p.held_since = since;
            }
            // Nothing proven about the differing buckets; keep counting
            // how long the held ones have differed.
            None => p.held_since.retain(|b, _| differs(*b)),
        }
        p.shared = None;
    }

    /// Tombstones older than this may be collected: every peer that
    /// replicates anything with this node is proven, bucket by bucket, to
    /// hold everything this node held before it (see the module doc; the
    /// caller also applies its age limit). Nothing while this node has
    /// not caught up since it started: before its view of the cluster
    /// formed, its ring listed no other member, which made the horizon
    /// "now" — every node of a cluster restarted at once collected a
    /// deletion that another region still held as a parked part, and the
    /// write it deleted, sent again, came back (the cluster
    /// restart-differential test, seed 1, restarted whole).
    pub fn tombstone_horizon(&self) -> u64 {
        if !self.is_ready() {
            return 0;
        }
        let ring = self.ring.load();
        let mut proofs = self.proofs.lock().unwrap_or_else(|e| e.into_inner());
        let mut h = u64::MAX;
        for m in ring.members() {
            if m.node == self.settings.node {
                continue;
            }
            let oldest = match (proofs.get_mut(&m.node), self.shared_with(m.node)) {
                (Some(p), Some(shared)) => p.oldest(&shared),
                // Never a round with it yet, or no shared buckets known.
                _ => 0,
            };
            h = h.min(oldest);
        }
        h
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_oldest_proof_follows_the_shared_buckets() {
        let mut p = Proofs::default();
        p.prove(1, 50);
        p.prove(2, 70);
        let both = Arc::new(vec![1u16, 2]);
        assert_eq!(p.oldest(&both), 50);
        p.prove(1, 90);
        p.shared = None;
        assert_eq!(p.oldest(&both), 70);
        // A bucket newly shared and never proven holds everything back.
        let three = Arc::new(vec![1u16, 2, 3]);
        assert_eq!(p.oldest(&three), 0);
    }
}

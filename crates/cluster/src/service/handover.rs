//! What a slot's new primary owes other regions: the commits of the slot
//! its old primary may not have shipped them yet.
//!
//! A key's writes reach other regions through its primary's gossip
//! streams, in commit order, and the receiving region shows another
//! region's transaction only after every older part of its keys has come
//! (`elsa_shard`'s `shard/parts.rs`, *In order*). That holds while one node
//! sends a key's parts. When the primary is paused, killed or cut off from
//! the other region with frames still unacknowledged in its streams, and
//! another node of its region takes the slot over, the new primary has
//! those commits (its region's replicas confirm every acknowledged write)
//! but used to ship only the keys' latest states, by anti-entropy: the
//! other region showed a transaction that built on one still waiting in
//! the old primary's stream. `tests/nemesis_regions.rs` saw a bank off its
//! total that way (the pause case of `docs/regions.md`), and
//! `atomic_visibility::a_new_primary_ships_what_the_old_ones_stream_still_carried`
//! showed `[0, 2]` — the second of two transactions without the first —
//! in every run.
//!
//! So, before a node serves slots it took over, it pushes into its own
//! streams to every node of another region the slots' commits it logged in
//! the last [`TAIL_FOR`] (its shards' logs, `Shard::log_since`) that nodes
//! of its region now gone from its view made, in commit order, each
//! one-shard commit whole, marked `resent` (what arrived already merges as
//! a no-op). Its later writes follow in the same
//! streams. And its anti-entropy ships another region the state of a slot
//! as the slot's repairer ([`Cluster::unvouched`], `wire::AeEntries`) only
//! once it is the slot's primary, has taken it over, and the receiver
//! acknowledged those frames; before, the receiver merges such a state
//! only where it changes nothing shown (`Cluster::by_repairer`).
//!
//! Bounds: commits older than [`TAIL_FOR`], or logged before the node
//! started, or before a snapshot that removed their segment, are not
//! resent (the first two as with a restarted node's own tail, `streams`).

use super::*;
use elsa_shard::table::DIGEST_BUCKETS;
use elsa_shard::wal::codec::{decode_file_at, Logged};

/// How far back a takeover ships the slots' commits.
const TAIL_FOR: Duration = Duration::from_secs(30);
/// The most commits it ships per shard (the newest).
const TAIL_MAX: usize = 100_000;
/// How long an unacknowledged handover frame keeps this node from
/// repairing the receiver's copies of its slots: past that, the stream's
/// own rule holds repair back (`Outbox::holds_repair`).
const OWED_FOR: Duration = Duration::from_secs(20);

/// A frame a takeover pushed: (local shard, number in its stream, when).
pub(super) type Owed = (u16, u64, Instant);

impl Cluster {
    /// Pushes `slots`' commits of the last [`TAIL_FOR`] into this node's
    /// streams to every node of another region (see the module doc).
    pub(super) async fn hand_over(self: &Arc<Self>, slots: &[u16]) {
        let ring = self.ring.load_full();
        let now = Instant::now();
        let mut to: Vec<(NodeId, Arc<Ring>)> = ring
            .members()
            .iter()
            .filter(|m| m.region != self.settings.region)
            .map(|m| (m.node, ring.clone()))
            .collect();
        to.extend(self.vanished(&ring, now));
        if slots.is_empty() || to.is_empty() {
            return;
        }
        let mut wanted = vec![false; DIGEST_BUCKETS];
        for &s in slots {
            if let Some(w) = wanted.get_mut(usize::from(s)) {
                *w = true;
            }
        }
        let wanted = Arc::new(wanted);
        // Commits of nodes of this region gone from the view: what their
        // streams held is lost or stuck with them. One still in the view
        // (back from a pause, or handing its slots back to this node)
        // ships its own, as does this node; a restarted one sends its
        // last commits again itself (`streams`, the boot tail).
        let gone: Arc<HashSet<NodeId>> = Arc::new(
            self.nodes_of_region()
                .into_iter()
                .filter(|&n| n != self.settings.node && ring.member(n).is_none())
                .collect(),
        );
        {
            let mut owed = self
                .handovers_owed
                .lock()
                .unwrap_or_else(|e| e.into_inner());
            owed.retain(|_, list| {
                list.retain(|x| x.2.elapsed() < OWED_FOR);
                !list.is_empty()
            });
        }
        if gone.is_empty() {
            return;
        }
        let since = self
            .hlc
            .now()
            .saturating_sub((TAIL_FOR.as_millis() as u64) << 16);
        let mut shipped = 0;
        for (shard, inbox) in self.inboxes.iter().enumerate() {
            let (reply, rx) = oneshot::channel();
            if inbox
                .send(ShardMsg::LogSince {
                    age: TAIL_FOR,
                    reply,
                })
                .is_err()
            {
                continue;
            }
            let Ok(files) = rx.await else { continue };
            let (wanted, gone, hasher) = (wanted.clone(), gone.clone(), self.hasher);
            let keep = move |e: &LogEntry| {
                let slot =
                    crate::ring::slot_of(std::hash::BuildHasher::hash_one(&hasher, &e.key[..]));
                e.version.commit_ts >= since
                    && gone.contains(&e.version.origin)
                    && wanted.get(slot).copied().unwrap_or(false)
            };
            let entries = tokio::task::spawn_blocking(move || read_tail(&files, keep))
                .await
                .unwrap_or_default();
            if entries.is_empty() {
                continue;
            }
            for (node, view) in &to {
                let gossip = self.resent_frame(shard, &entries, view, *node);
                if gossip.lattices.is_empty() {
                    continue;
                }
                shipped += gossip.lattices.len();
                let seq = self.stream_send(shard, *node, gossip, view, now);
                self.handovers_owed
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .entry(*node)
                    .or_default()
                    .push((shard as u16, seq, now));
            }
        }
        if shipped > 0 {
            tracing::info!(
                "takeover: {} slots; sent other regions {shipped} lattices of their last {TAIL_FOR:?} again (what the old primary's streams may still have held)",
                slots.len()
            );
        }
    }

    /// Every node seen in this node's region since it started.
    fn nodes_of_region(&self) -> HashSet<NodeId> {
        self.regions_seen
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .filter(|(_, r)| **r == self.settings.region)
            .map(|(n, _)| *n)
            .collect()
    }

    /// True while `peer` has not acknowledged a frame a takeover pushed to
    /// it (for at most [`OWED_FOR`]).
    fn owes(&self, peer: NodeId) -> bool {
        let mut owed = self
            .handovers_owed
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        let Some(list) = owed.get_mut(&peer) else {
            return false;
        };
        {
            let boxes = self.outboxes.lock().unwrap_or_else(|e| e.into_inner());
            list.retain(|&(shard, seq, at)| {
                at.elapsed() < OWED_FOR
                    && boxes.get(&(shard, peer)).is_some_and(|o| o.first() <= seq)
            });
        }
        if list.is_empty() {
            owed.remove(&peer);
            return false;
        }
        true
    }

    /// The slots (sorted) of `lattices` this node does not repair for its
    /// region at `peer`: for a node of another region, those it is not
    /// the primary of, has not taken over yet, or — while `peer` has not
    /// acknowledged what a takeover pushed it — all of them. Empty for a
    /// node of this region.
    pub(super) fn unvouched(&self, peer: NodeId, lattices: &[Lattice]) -> Vec<u32> {
        if lattices.is_empty()
            || self
                .known_region(peer)
                .is_none_or(|r| r == self.settings.region)
        {
            return Vec::new();
        }
        let owes = self.owes(peer);
        let ring = self.ring.load();
        let own = ring.own_region();
        let me = self.settings.node;
        let mut out: Vec<u32> = lattices
            .iter()
            .map(|l| {
                crate::ring::slot_of(std::hash::BuildHasher::hash_one(&self.hasher, &l.key[..]))
            })
            .filter(|&slot| {
                let repairs = ring
                    .replicas(slot, own)
                    .first()
                    .is_some_and(|p| p.node == me)
                    && self.synced_slot(slot);
                owes || !repairs
            })
            .map(|slot| slot as u32)
            .collect();
        out.sort_unstable();
        out.dedup();
        out
    }
}

/// The log entries `keep` takes from `files` (each read from its offset),
/// own commits and what peers of the region sent, in commit order without
/// repeats; the newest [`TAIL_MAX`]. A file gone (a snapshot removed it)
/// or cut short is read as far as it goes.
fn read_tail(
    files: &[(std::path::PathBuf, u64)],
    keep: impl Fn(&LogEntry) -> bool,
) -> Vec<LogEntry> {
    use std::io::{Read, Seek};
    let mut out = Vec::new();
    for (path, offset) in files {
        let mut data = Vec::new();
        let read = std::fs::File::open(path).and_then(|mut f| {
            f.seek(std::io::SeekFrom::Start(*offset))?;
            f.read_to_end(&mut data)
        });
        if read.is_err() {
            continue;
        }
        let _ = decode_file_at(&data, |_, logged| {
            if let Logged::Lattices(list) | Logged::Own(list) = logged {
                out.extend(list.into_iter().filter(|e| keep(e)));
            }
        });
    }
    out.sort_by(|a, b| a.version.cmp(&b.version).then_with(|| a.key.cmp(&b.key)));
    out.dedup_by(|a, b| a.version == b.version && a.key == b.key);
    let over = out.len().saturating_sub(TAIL_MAX);
    out.drain(..over);
    out
}

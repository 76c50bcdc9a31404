//! Gossip to other regions as ordered streams that lose nothing a short
//! fault can take (issue 42).
//!
//! Each shard's epoch frames to a node of another region form a stream:
//! numbered 1, 2, … per sender start ([`wire::Gossip::seq`], `boot`), kept
//! by the sender until the receiver acknowledges them (merged durably),
//! sent again in order while they are not ([`Outbox`]), and merged by the
//! receiver strictly in order ([`Inbox`]): a frame that comes before the
//! one it waits for is dropped unacknowledged, and comes again.
//!
//! Why: the receiving region shows another region's transaction only
//! whole and after those it builds on (`elsa_shard`'s `shard/parts.rs`),
//! which needs every part of a key to arrive in the order it was
//! committed. Frames used to be dropped — a full link queue, a cut between
//! the regions (whose nodes leave each other's view, so no frame was even
//! made for them), a receiver that refused them while it caught up — and
//! anti-entropy repaired what was lost with the keys' latest states only:
//! a transfer that built on a lost one showed before it, and readers of
//! the other region saw wrong bank totals right after each such fault
//! (`tests/nemesis_regions.rs`). Now a node of another region that left
//! the view still gets frames made for it, by the last view it was in,
//! for up to [`VANISHED_FOR`], and they wait here until it is back.
//!
//! Bounded: a stream holds at most [`MAX_FRAMES`] frames and
//! [`MAX_BYTES`]; beyond, the oldest are given up. The receiver sees the
//! gap (`first` past what it merged), logs it and counts it
//! (`INFO replication` `gossip_gaps`), and anti-entropy repairs those keys
//! as before — a transaction among them may then be seen in part. A
//! sender that restarts starts a new stream: what its last frames carried
//! comes by anti-entropy too. Streams within a region are not numbered
//! (their merges show at once).

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use elsa_lattice::NodeId;
use elsa_shard::wal::codec::LogEntry;

use super::inbox::{Inbox, Take};
use super::Cluster;
use crate::ring::{slot_of, Ring};
use crate::watermark::Stream;
use crate::wire::{self, Body, Frame, Lattice};

/// Frames one stream keeps unacknowledged at most.
pub const MAX_FRAMES: usize = 8192;
/// Bytes of lattices one stream keeps unacknowledged at most.
pub const MAX_BYTES: usize = 64 << 20;
/// How long a node of another region that left the view still gets
/// frames (made by the last view it was in).
pub const VANISHED_FOR: Duration = Duration::from_secs(600);
/// Frames unacknowledged this long are sent again (all of the stream's,
/// in order).
const RESEND_AFTER: Duration = Duration::from_secs(3);
/// The most frames one stream sends at a time when it sends again.
const RESEND_BATCH: usize = 256;
/// How often streams are looked at for frames to send again.
const RESEND_TICK: Duration = Duration::from_millis(200);
/// A stream behind whose oldest frame has not been acknowledged (nor
/// given up) for this long is stuck: it no longer holds anti-entropy back
/// (see [`Outbox::holds_repair`]).
pub const STUCK_AFTER: Duration = Duration::from_secs(20);
/// A peer not heard from (no frame of any kind) for this long was
/// unreachable: cut off, stopped or down.
const HEARD_GAP: Duration = Duration::from_secs(2);

/// One frame a stream keeps.
struct Kept {
    frame: wire::Gossip,
    /// When it was made.
    made: Instant,
    bytes: usize,
    acked: bool,
    /// When it was last sent (None: not yet, or its send failed).
    sent: Option<Instant>,
}

/// The sending end of one stream: frames not acknowledged yet, in order.
#[derive(Default)]
pub struct Outbox {
    next: u64,
    kept: VecDeque<Kept>,
    bytes: usize,
    /// Frames given up (over the bounds) since the start.
    pub given_up: u64,
    /// When the oldest frame kept became the oldest (the stream's last
    /// progress).
    front_since: Option<Instant>,
}

impl Outbox {
    /// Numbers `frame` and keeps it; the frame to send now, if every
    /// earlier one has been sent (else the resend sends it in order).
    pub fn push(&mut self, mut frame: wire::Gossip, now: Instant) -> Option<wire::Gossip> {
        self.next += 1;
        frame.seq = self.next;
        let bytes = frame
            .lattices
            .iter()
            .map(|l| {
                l.key.len()
                    + l.value.as_ref().map_or(0, |v| v.len())
                    + l.typed.as_ref().map_or(0, |v| v.len())
                    + 48
            })
            .sum::<usize>()
            + 64;
        let in_order = self.kept.iter().all(|k| k.sent.is_some());
        if self.kept.is_empty() {
            self.front_since = Some(now);
        }
        self.kept.push_back(Kept {
            frame,
            made: now,
            bytes,
            acked: false,
            sent: in_order.then_some(now),
        });
        self.bytes += bytes;
        while self.kept.len() > MAX_FRAMES || (self.bytes > MAX_BYTES && self.kept.len() > 1) {
            let k = self.kept.pop_front().expect("not empty");
            self.bytes -= k.bytes;
            self.given_up += 1;
            self.front_since = Some(now);
        }
        let first = self.first();
        let last = self.kept.back_mut().expect("just pushed");
        last.frame.first = first;
        in_order.then(|| last.frame.clone())
    }

    /// The oldest frame kept (every one before it acknowledged or given
    /// up).
    pub fn first(&self) -> u64 {
        self.kept.front().map_or(self.next + 1, |k| k.frame.seq)
    }

    /// The frame numbered `seq` was merged durably.
    pub fn acked(&mut self, seq: u64) {
        self.acked_at(seq, Instant::now());
    }

    /// [`Outbox::acked`], at `now`.
    pub fn acked_at(&mut self, seq: u64, now: Instant) {
        let Some(front) = self.kept.front().map(|k| k.frame.seq) else {
            return;
        };
        if seq < front {
            return;
        }
        if let Some(k) = self.kept.get_mut((seq - front) as usize) {
            k.acked = true;
        }
        while self.kept.front().is_some_and(|k| k.acked) {
            let k = self.kept.pop_front().expect("not empty");
            self.bytes -= k.bytes;
            self.front_since = Some(now);
        }
    }

    /// The frame numbered `seq` did not leave: it goes with the resend.
    pub fn unsent(&mut self, seq: u64) {
        self.unsent_from(seq);
    }

    /// Frames from `seq` on did not leave.
    pub fn unsent_from(&mut self, seq: u64) {
        for k in self.kept.iter_mut().filter(|k| k.frame.seq >= seq) {
            k.sent = None;
        }
    }

    /// Frames to send now, in order, at most [`RESEND_BATCH`]: when the
    /// oldest unacknowledged one waits too long (or never left), every
    /// unacknowledged frame goes again from there; else those not sent
    /// yet that follow sent ones.
    pub fn resend(&mut self, now: Instant) -> Vec<wire::Gossip> {
        let stale = self.kept.iter().find(|k| !k.acked).is_some_and(|k| {
            k.sent
                .is_none_or(|at| now.saturating_duration_since(at) >= RESEND_AFTER)
        });
        if stale {
            for k in self.kept.iter_mut().filter(|k| !k.acked) {
                k.sent = None;
            }
        }
        let first = self.first();
        self.kept
            .iter_mut()
            .skip_while(|k| k.acked || k.sent.is_some())
            .filter(|k| !k.acked)
            .take(RESEND_BATCH)
            .map(|k| {
                k.sent = Some(now);
                k.frame.first = first;
                k.frame.clone()
            })
            .collect()
    }

    /// True when its oldest frame waits since longer than a resend: the
    /// stream is behind (a cut healed, a slow link).
    pub fn behind(&self, now: Instant) -> bool {
        self.kept
            .front()
            .is_some_and(|k| now.saturating_duration_since(k.made) >= RESEND_AFTER)
    }

    /// True when behind and its oldest frame has been the oldest for
    /// [`STUCK_AFTER`] while the receiver was reachable (this node heard
    /// from it all along since `reachable`): the receiver takes nothing
    /// of it (it refuses the frame, or awaits another), so only
    /// anti-entropy can still bring what the stream carries. A receiver
    /// cut off or stopped meanwhile is not stuck: once back, its stream
    /// goes first again.
    pub fn stuck(&self, now: Instant, reachable: Option<Instant>) -> bool {
        let (Some(front), Some(reachable)) = (self.front_since, reachable) else {
            return false;
        };
        self.behind(now) && now.saturating_duration_since(front.max(reachable)) >= STUCK_AFTER
    }

    /// True while anti-entropy with the receiver must wait for this
    /// stream: behind, and not stuck. Anti-entropy ships keys' latest
    /// states, which must not overtake the older parts a stream still
    /// brings in order; but a stream that makes no progress at all would
    /// hold the repair back for good, and the two nodes would never
    /// converge (each side of a round waits while its stream to the other
    /// is behind). Past [`STUCK_AFTER`] the repair goes first, as a part
    /// waiting longer than `PART_WAIT` is shown alone.
    pub fn holds_repair(&self, now: Instant, reachable: Option<Instant>) -> bool {
        self.behind(now) && !self.stuck(now, reachable)
    }

    /// How long its oldest frame has waited (zero when it keeps none).
    pub fn waited(&self, now: Instant) -> Duration {
        self.kept
            .front()
            .map_or(Duration::ZERO, |k| now.saturating_duration_since(k.made))
    }

    /// Frames made before `before` that carry lattices and are not
    /// acknowledged yet.
    pub fn unacked_before(&self, before: Instant) -> usize {
        self.kept
            .iter()
            .filter(|k| !k.acked && k.made < before && !k.frame.lattices.is_empty())
            .count()
    }

    /// Frames kept (not acknowledged yet).
    pub fn waiting(&self) -> usize {
        self.kept.len()
    }
}

impl Cluster {
    /// End of a merge epoch on local shard `shard`: ships its lattices to
    /// every other replica of their keys (one frame per peer node; an
    /// empty frame still carries the flush time, for watermarks). To
    /// another region, through the shard's stream to that node (see the
    /// module doc).
    pub fn ship_gossip(self: &Arc<Self>, shard: usize, entries: Vec<LogEntry>) {
        // Held at the least `*` ID a transaction chose and has not
        // installed yet (`id_floor`): the other regions' readers follow
        // streams up to it.
        let flushed_ts = elsa_shard::ops::streams::id_floor::flush_ts(&self.hlc);
        self.epoch.fetch_add(1, Ordering::Relaxed);
        if let Some(f) = self.flushes.get(shard) {
            f.fetch_add(1, Ordering::Relaxed);
        }
        let ring = self.ring.load_full();
        let me = self.settings.node;
        let now = Instant::now();
        let mut per_node: HashMap<NodeId, Vec<usize>> = ring
            .members()
            .iter()
            .filter(|m| m.node != me)
            .map(|m| (m.node, Vec::new()))
            .collect();
        for (i, e) in entries.iter().enumerate() {
            let hash = std::hash::BuildHasher::hash_one(&self.hasher, &e.key[..]);
            for id in ring.all_replicas(slot_of(hash)) {
                if id.node != me {
                    if let Some(v) = per_node.get_mut(&id.node) {
                        if v.last() != Some(&i) {
                            v.push(i);
                        }
                    }
                }
            }
        }
        // Nodes of other regions out of the view lately: by the last view
        // they were in.
        let mut views: HashMap<NodeId, Arc<Ring>> = HashMap::new();
        for (node, old) in self.vanished(&ring, now) {
            per_node.insert(node, self.picked_for(&entries, &old, node));
            views.insert(node, old);
        }
        self.complete_units(&entries, &mut per_node);
        for (node, picked) in per_node {
            let lattices: Vec<Lattice> =
                picked.iter().map(|&i| Lattice::from(&entries[i])).collect();
            let gossip = wire::Gossip {
                to_shard: 0,
                from_shard: shard as u32,
                flushed_ts,
                lattices,
                ..Default::default()
            };
            // Recorded whether or not it leaves: a dropped frame is never
            // acknowledged, which is what holds the watermark back.
            self.acked
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .entry((shard as u16, node))
                .or_insert_with(|| Stream::after_boot(self.boot_ts))
                .sent(flushed_ts);
            let remote = self
                .known_region(node)
                .is_some_and(|r| r != self.settings.region);
            if remote {
                let view = views.get(&node).unwrap_or(&ring);
                self.stream_send(shard, node, gossip, view, now);
            } else if !self.send(node, Frame::new(Body::Gossip(gossip)), true) {
                self.gossip_frames_dropped.fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    /// Sends `gossip` through the stream of local shard `shard` to `node`
    /// of another region: numbered, kept until acknowledged, sent now if
    /// every earlier frame has left (else with the resend, in order). A
    /// new stream starts with the boot tail (replicated by `view`).
    /// Answers the frame's number.
    pub(super) fn stream_send(
        self: &Arc<Self>,
        shard: usize,
        node: NodeId,
        mut gossip: wire::Gossip,
        view: &Ring,
        now: Instant,
    ) -> u64 {
        gossip.boot = self.boot_ts;
        let (now_out, seq) = {
            let mut boxes = self.outboxes.lock().unwrap_or_else(|e| e.into_inner());
            let outbox = match boxes.entry((shard as u16, node)) {
                std::collections::hash_map::Entry::Occupied(o) => o.into_mut(),
                std::collections::hash_map::Entry::Vacant(v) => {
                    // A new stream starts with what this node committed
                    // in its last moments before it started.
                    let outbox = v.insert(Outbox::default());
                    if let Some(tail) = self.tail_frame(shard, node, view) {
                        outbox.push(tail, now);
                        outbox.unsent(1);
                    }
                    outbox
                }
            };
            (outbox.push(gossip, now), outbox.next)
        };
        if let Some(g) = now_out {
            if !self.send(node, Frame::new(Body::Gossip(g)), true) {
                // Kept: it goes with the resend.
                let mut boxes = self.outboxes.lock().unwrap_or_else(|e| e.into_inner());
                if let Some(o) = boxes.get_mut(&(shard as u16, node)) {
                    o.unsent(seq);
                }
            }
        }
        seq
    }

    /// This node's own commits of its last moments before it started, per
    /// local shard, in commit order (recovery's tail): the first frame of
    /// each new stream to a node of another region, for up to
    /// [`VANISHED_FOR`]. A node killed loses the frames it had not had
    /// acknowledged; without them, the other region got those commits by
    /// anti-entropy only, which brings keys' latest states and never a
    /// one-shard commit whole (issue 42).
    pub fn set_boot_tail(&self, tail: Vec<Vec<LogEntry>>) {
        let tail = tail.into_iter().map(Arc::new).collect();
        *self.boot_tail.lock().unwrap_or_else(|e| e.into_inner()) = Some((tail, Instant::now()));
    }

    /// The first frame of a new stream of `shard` to `node` (replicating
    /// what `view` gives it): the tail's lattices of its keys, with the
    /// rest of every one-shard commit among them.
    fn tail_frame(&self, shard: usize, node: NodeId, view: &Ring) -> Option<wire::Gossip> {
        let mut kept = self.boot_tail.lock().unwrap_or_else(|e| e.into_inner());
        if kept
            .as_ref()
            .is_some_and(|(_, at)| at.elapsed() >= VANISHED_FOR)
        {
            *kept = None;
        }
        let entries = kept.as_ref()?.0.get(shard)?.clone();
        drop(kept);
        if entries.is_empty() {
            return None;
        }
        Some(self.resent_frame(shard, &entries, view, node))
    }

    /// A frame of local shard `shard` to `node` that sends `entries`
    /// (commits in commit order) again: those `node` replicates by
    /// `view`, with the rest of every one-shard commit among them, marked
    /// `resent` (a restarted node's tail; a takeover's, `handover`).
    pub(super) fn resent_frame(
        &self,
        shard: usize,
        entries: &[LogEntry],
        view: &Ring,
        node: NodeId,
    ) -> wire::Gossip {
        let mut frames = HashMap::from([(node, self.picked_for(entries, view, node))]);
        self.complete_units(entries, &mut frames);
        let mut picked = frames.remove(&node).unwrap_or_default();
        picked.sort_unstable();
        picked.dedup();
        wire::Gossip {
            from_shard: shard as u32,
            flushed_ts: self.boot_ts,
            lattices: picked.iter().map(|&i| Lattice::from(&entries[i])).collect(),
            boot: self.boot_ts,
            resent: true,
            ..Default::default()
        }
    }

    /// Which of `entries` `node` replicates by `view` (indexes).
    pub(super) fn picked_for(&self, entries: &[LogEntry], view: &Ring, node: NodeId) -> Vec<usize> {
        entries
            .iter()
            .enumerate()
            .filter(|(_, e)| {
                let hash = std::hash::BuildHasher::hash_one(&self.hasher, &e.key[..]);
                view.replicates(slot_of(hash), node)
            })
            .map(|(i, _)| i)
            .collect()
    }

    /// The region `node` was last seen in.
    pub(super) fn known_region(&self, node: NodeId) -> Option<String> {
        if let Some(m) = self.ring.load().member(node) {
            return Some(m.region.clone());
        }
        self.known
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(&node)
            .map(|m| m.region.clone())
    }

    /// Nodes of other regions not in `ring` that were in a view less than
    /// [`VANISHED_FOR`] ago, each with that view; remembers `ring` for
    /// those in it, and forgets the streams of nodes gone longer.
    pub(super) fn vanished(&self, ring: &Arc<Ring>, now: Instant) -> Vec<(NodeId, Arc<Ring>)> {
        let mut seen = self.last_view.lock().unwrap_or_else(|e| e.into_inner());
        for m in ring.members() {
            if m.region != self.settings.region {
                match seen.get_mut(&m.node) {
                    Some((r, at)) => {
                        if !Arc::ptr_eq(r, ring) {
                            *r = ring.clone();
                        }
                        *at = now;
                    }
                    None => {
                        seen.insert(m.node, (ring.clone(), now));
                    }
                }
            }
        }
        let mut gone = Vec::new();
        seen.retain(|node, (_, at)| {
            let keep = now.saturating_duration_since(*at) < VANISHED_FOR;
            if !keep {
                gone.push(*node);
            }
            keep
        });
        if !gone.is_empty() {
            self.outboxes
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .retain(|(_, node), _| !gone.contains(node));
        }
        seen.iter()
            .filter(|(node, _)| ring.member(**node).is_none())
            .map(|(node, (r, _))| (*node, r.clone()))
            .collect()
    }

    /// True while a stream of this node's to `peer` is behind. Anti-entropy
    /// with `peer` waits meanwhile: it ships keys' latest states only, and
    /// a part it brings ahead of the stream's older ones would let a
    /// transaction that built on them show first.
    pub(super) fn stream_behind(&self, peer: NodeId) -> bool {
        let now = Instant::now();
        let reachable = self.reachable_since(peer, now);
        self.outboxes
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .any(|((_, node), o)| *node == peer && o.holds_repair(now, reachable))
    }

    /// A frame came from `node` (see [`Cluster::reachable_since`]).
    pub(super) fn heard_from(&self, node: NodeId) {
        let now = Instant::now();
        let mut heard = self.heard.lock().unwrap_or_else(|e| e.into_inner());
        let (since, last) = heard.entry(node).or_insert((now, now));
        if now.saturating_duration_since(*last) >= HEARD_GAP {
            *since = now;
        }
        *last = now;
    }

    /// Since when this node has heard from `node` without a gap of
    /// [`HEARD_GAP`] (None: not lately).
    fn reachable_since(&self, node: NodeId, now: Instant) -> Option<Instant> {
        let heard = self.heard.lock().unwrap_or_else(|e| e.into_inner());
        heard
            .get(&node)
            .filter(|(_, last)| now.saturating_duration_since(*last) < HEARD_GAP)
            .map(|(since, _)| *since)
    }

    /// How long the oldest unacknowledged frame of this node's streams to
    /// `peer` has waited, and whether one of them is stuck (INFO).
    pub fn stream_wait(&self, peer: NodeId) -> (Duration, bool) {
        let now = Instant::now();
        let reachable = self.reachable_since(peer, now);
        let boxes = self.outboxes.lock().unwrap_or_else(|e| e.into_inner());
        boxes
            .iter()
            .filter(|((_, node), _)| *node == peer)
            .fold((Duration::ZERO, false), |(w, s), (_, o)| {
                (w.max(o.waited(now)), s || o.stuck(now, reachable))
            })
    }

    /// An acknowledgement of a numbered frame from `node`.
    pub(super) fn stream_acked(&self, node: NodeId, ack: &wire::GossipAck) {
        if ack.seq == 0 || ack.boot != self.boot_ts {
            return;
        }
        let mut boxes = self.outboxes.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(o) = boxes.get_mut(&(ack.from_shard as u16, node)) {
            o.acked(ack.seq);
        }
    }

    /// Where a numbered frame from `node` goes (see [`Inbox::take`]).
    pub(super) fn stream_take(&self, node: NodeId, g: &wire::Gossip) -> Take {
        let mut boxes = self.streams_in.lock().unwrap_or_else(|e| e.into_inner());
        let inbox = boxes.entry((node, g.from_shard)).or_default();
        let (take, gap) = Inbox::take(inbox, g.boot, g.seq, g.first);
        if gap > 0 {
            self.gossip_gaps.fetch_add(gap, Ordering::Relaxed);
            tracing::warn!(
                "node {node} gave up {gap} gossip frames of its shard {} before they reached this node (a long cut or a slow link): anti-entropy repairs their keys, and a transaction among them may be seen here in part",
                g.from_shard
            );
        }
        take
    }

    /// The numbered frame `ack.seq` of `node`'s shard `from_shard`, flushed
    /// at `ack.flushed_ts`, is merged here durably: the read horizon may
    /// move — by the frames merged in a row only ([`Inbox::merged`]).
    pub(super) fn stream_merged(&self, node: NodeId, ack: &wire::GossipAck) {
        let reached = {
            let mut boxes = self.streams_in.lock().unwrap_or_else(|e| e.into_inner());
            let inbox = boxes.entry((node, ack.from_shard)).or_default();
            Inbox::merged(inbox, ack.boot, ack.seq, ack.flushed_ts)
        };
        let Some(ts) = reached else {
            return;
        };
        {
            let mut merged = self.merged_in.lock().unwrap_or_else(|e| e.into_inner());
            let at = merged.entry((node, ack.from_shard)).or_insert(0);
            *at = (*at).max(ts);
        }
        self.refresh_read_horizon();
    }

    /// Sets what XREAD and XREADGROUP `>` may show of a stream
    /// (`elsa_shard::ops::streams::set_read_horizon`): below the least
    /// flush time merged here of every shard of every node of another
    /// region — in the view, or out of it for less than
    /// [`VANISHED_FOR`] (a cut region's unsent entries come after it heals,
    /// and must not land below what readers passed). A shard nothing came
    /// from yet holds it at 0. Every entry another region has not shipped
    /// here yet has an ID at or above its node's last flush (`*` IDs
    /// take at least their write's stamp), so none can arrive below the
    /// horizon. No bound while this node has seen no other region.
    pub(super) fn refresh_read_horizon(&self) {
        /// How long after a restart a node that knows no other region
        /// yet shows no new entry to following reads.
        const START_HOLD: std::time::Duration = std::time::Duration::from_secs(10);
        use elsa_shard::ops::streams::set_read_horizon;
        let ring = self.ring.load();
        let mine = &self.settings.region;
        let now = Instant::now();
        let mut remote: HashMap<NodeId, u16> = ring
            .members()
            .iter()
            .filter(|m| &m.region != mine)
            .map(|m| (m.node, m.shards))
            .collect();
        for (node, (r, at)) in self
            .last_view
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
        {
            if now.saturating_duration_since(*at) < VANISHED_FOR {
                if let Some(m) = r.member(*node) {
                    remote.entry(*node).or_insert(m.shards);
                }
            }
        }
        let merged = self.merged_in.lock().unwrap_or_else(|e| e.into_inner());
        let merged = &*merged;
        let least = remote
            .iter()
            .flat_map(|(&node, &shards)| {
                (0..u32::from(shards)).map(move |s| merged.get(&(node, s)).copied().unwrap_or(0))
            })
            .min();
        // No other region known: one region, no horizon — except in the
        // first seconds after a restart (a node with data), while the
        // view is still being built: showing its new entries at once
        // would let its followers pass the other regions' entries still
        // on their way.
        let booting = || {
            let booted = *self.booted.lock().unwrap_or_else(|e| e.into_inner());
            !self.settings.fresh && booted.elapsed() < START_HOLD
        };
        set_read_horizon(match least {
            None if booting() => 0,
            None => u64::MAX,
            Some(ts) => elsa_lattice::Hlc::<elsa_lattice::SystemClock>::millis(ts),
        });
    }

    /// The numbered frame `seq` from `node` could not be merged.
    pub(super) fn stream_untake(&self, node: NodeId, from_shard: u32, seq: u64) {
        let mut boxes = self.streams_in.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(inbox) = boxes.get_mut(&(node, from_shard)) {
            Inbox::untake(inbox, seq);
        }
    }

    /// Sends again, in order, the frames of every stream that waits too
    /// long for its acknowledgement.
    pub(super) async fn resend_loop(self: Arc<Self>) {
        let mut tick = tokio::time::interval(RESEND_TICK);
        loop {
            tick.tick().await;
            // (Nodes long gone stop holding it back.)
            self.refresh_read_horizon();
            let now = Instant::now();
            let due: Vec<((u16, NodeId), Vec<wire::Gossip>)> = self
                .outboxes
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .iter_mut()
                .map(|(stream, o)| (*stream, o.resend(now)))
                .filter(|(_, frames)| !frames.is_empty())
                .collect();
            for ((shard, node), frames) in due {
                let mut failed = None;
                for g in frames {
                    let seq = g.seq;
                    if failed.is_some() || !self.send(node, Frame::new(Body::Gossip(g)), true) {
                        failed.get_or_insert(seq);
                    }
                }
                // Not left: sent again from there on the next tick.
                if let Some(from) = failed {
                    let mut boxes = self.outboxes.lock().unwrap_or_else(|e| e.into_inner());
                    if let Some(o) = boxes.get_mut(&(shard, node)) {
                        o.unsent_from(from);
                    }
                }
            }
        }
    }

    /// This node's streams to other regions, for INFO: frames waiting
    /// for their acknowledgement, frames given up, and frames its peers
    /// gave up before they reached here.
    pub fn gossip_streams(&self) -> (usize, u64, u64) {
        let boxes = self.outboxes.lock().unwrap_or_else(|e| e.into_inner());
        let waiting = boxes.values().map(Outbox::waiting).sum();
        let given_up = boxes.values().map(|o| o.given_up).sum();
        (waiting, given_up, self.gossip_gaps.load(Ordering::Relaxed))
    }

    /// Waits, for at most `limit`, until every frame with lattices made
    /// before `before` to a node of another region in the view is
    /// acknowledged; the count left. A clean stop calls it, after the
    /// shards' last epoch flush: the unacknowledged frames of a node's
    /// last moments die with it, and a snapshot leaves no log tail to send
    /// them again from (`set_boot_tail`), so the other region got a
    /// one-shard commit of several keys by anti-entropy only, never whole,
    /// and kept it out of sight for the full `PART_WAIT` (the cluster
    /// collection test: a replica stopped right after a `DEL` of two
    /// keys).
    pub async fn drain_streams(&self, before: Instant, limit: Duration) -> usize {
        let deadline = Instant::now() + limit;
        loop {
            let ring = self.ring.load_full();
            let left: usize = {
                let boxes = self.outboxes.lock().unwrap_or_else(|e| e.into_inner());
                boxes
                    .iter()
                    .filter(|((_, node), _)| ring.member(*node).is_some())
                    .map(|(_, o)| o.unacked_before(before))
                    .sum()
            };
            if left == 0 || Instant::now() >= deadline {
                return left;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    /// Bytes of the frames this node's streams keep unacknowledged (INFO's
    /// `mem_not_counted_for_evict`, with the shards' gossip buffers).
    pub fn gossip_streams_bytes(&self) -> usize {
        let boxes = self.outboxes.lock().unwrap_or_else(|e| e.into_inner());
        boxes.values().map(|o| o.bytes).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(n: u64) -> wire::Gossip {
        wire::Gossip {
            flushed_ts: n,
            ..Default::default()
        }
    }

    #[test]
    fn frames_wait_for_their_acknowledgement_and_go_again_in_order() {
        let t0 = Instant::now();
        let mut o = Outbox::default();
        assert_eq!(o.push(frame(1), t0).map(|g| g.seq), Some(1));
        o.unsent(1);
        // Frame 1 did not leave: 2 waits for it, and both go in order.
        assert_eq!(o.push(frame(2), t0), None);
        let again: Vec<u64> = o.resend(t0).iter().map(|g| g.seq).collect();
        assert_eq!(again, vec![1, 2]);
        assert!(o.resend(t0).is_empty(), "just sent");
        o.acked(2);
        assert_eq!(o.waiting(), 2, "1 is not acknowledged yet");
        let later = t0 + RESEND_AFTER;
        let again: Vec<u64> = o.resend(later).iter().map(|g| g.seq).collect();
        assert_eq!(again, vec![1]);
        o.acked(1);
        assert_eq!(o.waiting(), 0);
        assert_eq!(o.first(), 3);
        assert_eq!(
            o.push(frame(3), later).map(|g| (g.seq, g.first)),
            Some((3, 3))
        );
    }

    #[test]
    fn a_backlog_goes_in_batches_in_order() {
        let t0 = Instant::now();
        let mut o = Outbox::default();
        o.push(frame(0), t0);
        o.unsent(1);
        for n in 1..600 {
            assert!(o.push(frame(n), t0).is_none(), "frame 1 has not left");
        }
        let mut sent = Vec::new();
        for _ in 0..4 {
            sent.extend(o.resend(t0).iter().map(|g| g.seq));
        }
        assert_eq!(sent, (1..=600).collect::<Vec<u64>>());
        assert!(!o.behind(t0));
        assert!(o.behind(t0 + RESEND_AFTER));
    }

    #[test]
    fn a_stream_that_makes_no_progress_stops_holding_the_repair_back() {
        let t0 = Instant::now();
        let mut o = Outbox::default();
        for n in 0..3 {
            o.push(frame(n), t0);
        }
        let up = Some(t0);
        let behind = t0 + RESEND_AFTER;
        assert!(o.holds_repair(behind, up), "behind: the stream goes first");
        // The receiver takes frame 1 later on: progress, so it still waits.
        let t1 = t0 + STUCK_AFTER - Duration::from_secs(1);
        o.acked_at(1, t1);
        assert!(o.holds_repair(t0 + STUCK_AFTER, up));
        // Then nothing more while it is reachable: stuck, the repair
        // goes first.
        let later = t1 + STUCK_AFTER;
        assert!(o.stuck(later, up));
        assert!(!o.holds_repair(later, up));
        assert_eq!(o.waited(later), later - t0);
        // Unreachable (cut off, stopped), or reachable again only lately:
        // not stuck, the stream goes first.
        assert!(!o.stuck(later, None) && o.holds_repair(later, None));
        let healed = Some(later - Duration::from_secs(1));
        assert!(!o.stuck(later, healed) && o.holds_repair(later, healed));
        // Taken again: no longer stuck; caught up: no longer behind.
        o.acked_at(2, later);
        assert!(!o.stuck(later, up) && o.holds_repair(later, up));
        o.acked_at(3, later);
        assert!(!o.behind(later) && o.waited(later).is_zero());
    }

    #[test]
    fn a_stream_over_its_bounds_gives_its_oldest_frames_up() {
        let t0 = Instant::now();
        let mut o = Outbox::default();
        for n in 0..MAX_FRAMES as u64 + 3 {
            o.push(frame(n), t0);
        }
        assert_eq!(o.waiting(), MAX_FRAMES);
        assert_eq!(o.given_up, 3);
        assert_eq!(o.first(), 4);
    }
}

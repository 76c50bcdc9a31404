//! The receiving end of one gossip stream from a node of another region
//! (`streams`): which numbered frame to merge next, and how far the frames
//! merged durably reach *in order* — what the stream read horizon may
//! count.
//!
//! Frames are taken in order, but their merges finish in any order: each
//! goes to the shards its keys live on, and a frame that carries nothing
//! for a busy shard is done before the one ahead of it that does. The
//! horizon moves only by a flush time every frame before it has reached
//! (`tests/nemesis_streams.rs`, seed 4: a node let go after a pause sent
//! its backlog at once; the empty frames behind the one with three
//! entries were merged first, the horizon passed those entries, and the
//! followers of two regions skipped them).

use std::collections::BTreeMap;

/// The receiving end of one stream.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Inbox {
    boot: u64,
    /// The frame to take next.
    next: u64,
    /// Every frame up to this one is merged durably.
    merged: u64,
    /// Frames after `merged` merged durably already: their flush times.
    done: BTreeMap<u64, u64>,
    /// Frames the sender gave up before this node took them (from, to):
    /// they count as merged, as nothing more of them comes.
    gaps: Vec<(u64, u64)>,
}

/// What to do with a numbered frame.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Take {
    /// The one awaited: merge it (and acknowledge once durable).
    Next,
    /// One merged before: merge it again (a no-op) and acknowledge.
    Again,
    /// One that comes before the one awaited: drop it (it comes again).
    Early,
}

impl Inbox {
    fn starting(boot: u64, first: u64) -> Inbox {
        Inbox {
            boot,
            next: first,
            merged: first.saturating_sub(1),
            done: BTreeMap::new(),
            gaps: Vec::new(),
        }
    }

    /// Where frame `seq` of the stream of sender start `boot` (whose
    /// oldest kept frame is `first`) goes; the second value is how many
    /// frames the sender gave up before it (a gap, 0 when none).
    pub fn take(inbox: &mut Option<Inbox>, boot: u64, seq: u64, first: u64) -> (Take, u64) {
        let ib = match inbox {
            Some(ib) if ib.boot == boot => ib,
            // A frame of the sender's previous start, late: that stream
            // is over.
            Some(ib) if boot < ib.boot => return (Take::Early, 0),
            // A new stream (the sender started again, or this node did):
            // from its oldest frame on.
            _ => inbox.insert(Inbox::starting(boot, first)),
        };
        let mut gap = 0;
        if ib.next < first {
            gap = first - ib.next;
            ib.gaps.push((ib.next, first));
            ib.next = first;
        }
        let take = match seq.cmp(&ib.next) {
            std::cmp::Ordering::Equal => {
                ib.next += 1;
                Take::Next
            }
            std::cmp::Ordering::Less => Take::Again,
            std::cmp::Ordering::Greater => Take::Early,
        };
        (take, gap)
    }

    /// Frame `seq` was taken as the next but could not be merged: await
    /// it again.
    pub fn untake(inbox: &mut Option<Inbox>, seq: u64) {
        if let Some(ib) = inbox {
            if ib.next == seq + 1 {
                ib.next = seq;
            }
        }
    }

    /// Frame `seq` of start `boot`, flushed at `flushed_ts`, is merged
    /// durably: the flush time of the newest frame that every frame before
    /// it, and it, are merged now — when that moved.
    pub fn merged(inbox: &mut Option<Inbox>, boot: u64, seq: u64, flushed_ts: u64) -> Option<u64> {
        let ib = inbox.as_mut().filter(|ib| ib.boot == boot)?;
        if seq <= ib.merged {
            return None;
        }
        ib.done.insert(seq, flushed_ts);
        let mut reached = None;
        loop {
            let n = ib.merged + 1;
            if let Some(ts) = ib.done.remove(&n) {
                ib.merged = n;
                reached = Some(ts);
            } else if let Some(i) = ib.gaps.iter().position(|&(a, b)| a <= n && n < b) {
                ib.merged = ib.gaps.swap_remove(i).1 - 1;
            } else {
                return reached;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_receiver_merges_in_order_and_sees_gaps() {
        let mut ib = None;
        assert_eq!(Inbox::take(&mut ib, 9, 1, 1), (Take::Next, 0));
        assert_eq!(Inbox::take(&mut ib, 9, 3, 1), (Take::Early, 0));
        assert_eq!(Inbox::take(&mut ib, 9, 2, 1), (Take::Next, 0));
        assert_eq!(Inbox::take(&mut ib, 9, 2, 1), (Take::Again, 0));
        // Frame 3 could not be merged: awaited again.
        assert_eq!(Inbox::take(&mut ib, 9, 3, 1), (Take::Next, 0));
        Inbox::untake(&mut ib, 3);
        assert_eq!(Inbox::take(&mut ib, 9, 4, 1), (Take::Early, 0));
        assert_eq!(Inbox::take(&mut ib, 9, 3, 1), (Take::Next, 0));
        // The sender gave frames 4..=6 up.
        assert_eq!(Inbox::take(&mut ib, 9, 7, 7), (Take::Next, 3));
        // It started again: a new stream, from its oldest frame.
        assert_eq!(Inbox::take(&mut ib, 10, 2, 1), (Take::Early, 0));
        assert_eq!(Inbox::take(&mut ib, 10, 1, 1), (Take::Next, 0));
        // A late frame of its previous start is dropped.
        assert_eq!(Inbox::take(&mut ib, 9, 8, 7), (Take::Early, 0));
        assert_eq!(Inbox::take(&mut ib, 10, 2, 1), (Take::Next, 0));
        // This node started again: whatever the sender still holds.
        let mut fresh = None;
        assert_eq!(Inbox::take(&mut fresh, 10, 5, 4), (Take::Early, 0));
        assert_eq!(Inbox::take(&mut fresh, 10, 4, 4), (Take::Next, 0));
    }

    #[test]
    fn the_horizon_moves_only_by_frames_merged_in_a_row() {
        let mut ib = None;
        for seq in 1..=4 {
            assert_eq!(Inbox::take(&mut ib, 9, seq, 1).0, Take::Next);
        }
        // 2, 3 and 4 finish before 1 (which has a busy shard to wait for).
        assert_eq!(Inbox::merged(&mut ib, 9, 3, 300), None);
        assert_eq!(Inbox::merged(&mut ib, 9, 2, 200), None);
        assert_eq!(Inbox::merged(&mut ib, 9, 4, 400), None);
        assert_eq!(Inbox::merged(&mut ib, 9, 1, 100), Some(400));
        // Merged again (a resend), or of a start that is over: no news.
        assert_eq!(Inbox::merged(&mut ib, 9, 2, 200), None);
        assert_eq!(Inbox::merged(&mut ib, 8, 5, 500), None);
        // Frames the sender gave up (6 and 7) count as merged; one taken
        // before (5) is still awaited.
        assert_eq!(Inbox::take(&mut ib, 9, 5, 5).0, Take::Next);
        assert_eq!(Inbox::take(&mut ib, 9, 8, 8), (Take::Next, 2));
        assert_eq!(Inbox::merged(&mut ib, 9, 8, 800), None, "5 is not merged");
        assert_eq!(Inbox::merged(&mut ib, 9, 5, 500), Some(800));
        // A new start begins where the sender's oldest frame is.
        assert_eq!(Inbox::take(&mut ib, 10, 3, 3).0, Take::Next);
        assert_eq!(Inbox::merged(&mut ib, 10, 3, 30), Some(30));
    }
}

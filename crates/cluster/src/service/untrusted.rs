//! Peer frames are untrusted input, even from an authenticated peer: a
//! frame whose timestamps lie beyond now + `max-clock-drift` is refused
//! whole (logged, counted) before anything in it is observed by the HLC or
//! merged. A forged commit timestamp of 2^64−2 would otherwise win every
//! merge on its key for good, and 2^63−1 would drag the node's clock there.
//!
//! A frame refused for honest skew is not lost: the sender gets no ack,
//! and anti-entropy ships the lattices again once they are no longer in
//! the future here.

use super::*;

/// Why a frame from a peer was refused.
#[derive(Debug)]
pub(crate) struct Refused(pub String);

impl std::fmt::Display for Refused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// Most anti-entropy buckets (the digest's size): a longer list is absurd.
const MAX_BUCKETS: usize = elsa_shard::table::DIGEST_BUCKETS;

impl Cluster {
    fn ts_ok(&self, what: &str, ts: u64) -> Result<(), Refused> {
        if self
            .hlc
            .plausible(ts, self.settings.max_clock_drift.as_millis() as u64)
        {
            Ok(())
        } else {
            Err(Refused(format!(
                "{what} {ts} is more than {} ms ahead of this node's clock",
                self.settings.max_clock_drift.as_millis()
            )))
        }
    }

    fn lattices_ok(&self, lattices: &[Lattice]) -> Result<(), Refused> {
        for l in lattices {
            self.ts_ok("a lattice's commit timestamp", l.commit_ts)?;
            self.ts_ok("a lattice's start timestamp", l.start_ts)?;
            if let Some(t) = &l.typed {
                self.typed_ok(t)?;
            }
        }
        Ok(())
    }

    /// A flush's floors: each a timestamp (one far ahead would delete
    /// every write until then), at most one per database.
    fn floors_ok(&self, f: Option<&wire::Floors>) -> Result<(), Refused> {
        let Some(f) = f else {
            return Ok(());
        };
        if f.dbs.len() > 256 || f.dbs.len() != f.ts.len() {
            return Err(Refused(format!(
                "flush floors: {} databases, {} timestamps",
                f.dbs.len(),
                f.ts.len()
            )));
        }
        self.ts_ok("a FLUSHALL floor", f.all)?;
        for &ts in &f.ts {
            self.ts_ok("a FLUSHDB floor", ts)?;
        }
        Ok(())
    }

    /// Function libraries: readable, and each version (a flush's floor
    /// among them) a plausible timestamp — one far ahead would outlive
    /// every later load, delete or flush.
    fn functions_ok(&self, f: &wire::Functions) -> Result<(), Refused> {
        let Some(libs) = elsa_lattice::libraries::Libraries::decode(&f.state) else {
            return Err(Refused("unreadable function libraries".into()));
        };
        self.ts_ok("a FUNCTION FLUSH floor", libs.floor().commit_ts)?;
        for (_, l) in libs.entries() {
            self.ts_ok("a function library's version", l.version.commit_ts)?;
        }
        Ok(())
    }

    /// Checks a frame's timestamps and counts before it is acted on.
    pub(crate) fn check_frame(&self, frame: &Frame) -> Result<(), Refused> {
        let Some(body) = &frame.body else {
            return Ok(());
        };
        match body {
            Body::Gossip(g) => {
                self.ts_ok("a gossip flush timestamp", g.flushed_ts)?;
                self.lattices_ok(&g.lattices)
            }
            Body::GossipAck(a) => self.ts_ok("a gossip ack timestamp", a.flushed_ts),
            Body::AeGroups(g) => {
                if g.fence.len() > super::takeover::MAX_FENCE {
                    return Err(Refused(format!("a fence of {} nodes", g.fence.len())));
                }
                if g.groups.len() > MAX_BUCKETS || g.groups.len() != g.digests.len() {
                    return Err(Refused(format!(
                        "anti-entropy groups: {} groups, {} digests",
                        g.groups.len(),
                        g.digests.len()
                    )));
                }
                self.floors_ok(g.floors.as_ref())
            }
            Body::AeBuckets(b) => {
                if b.buckets.len() > MAX_BUCKETS || b.buckets.len() != b.digests.len() {
                    return Err(Refused(format!(
                        "anti-entropy buckets: {} buckets, {} digests",
                        b.buckets.len(),
                        b.digests.len()
                    )));
                }
                self.floors_ok(b.floors.as_ref())
            }
            Body::AeEntries(e) => {
                if e.pull.len() > MAX_BUCKETS {
                    return Err(Refused(format!("a pull of {} buckets", e.pull.len())));
                }
                self.lattices_ok(&e.lattices)
            }
            Body::HandBack(h) => {
                let keys: usize = h.holds.iter().map(|x| x.holds.len()).sum();
                if keys > MAX_BUCKETS {
                    return Err(Refused(format!("a hand-back holding {keys} keys")));
                }
                Ok(())
            }
            Body::Request(r) => self.ts_ok("a request's clock", r.hlc),
            Body::Response(r) => self.ts_ok("an answer's clock", r.hlc),
            Body::Replicate(r) => self.lattices_ok(&r.lattices),
            Body::WatermarkReply(w) => self.ts_ok("a watermark", w.ts),
            Body::Flush(f) => self.floors_ok(Some(f)),
            Body::Functions(f) => self.functions_ok(f),
            _ => Ok(()),
        }
    }

    /// Checks a forwarded call's timestamps (decoded separately from its
    /// frame).
    pub(crate) fn check_call(&self, call: &Call) -> Result<(), Refused> {
        self.ts_ok("a call's start timestamp", call.start_ts)?;
        self.ts_ok("a call's commit timestamp", call.commit_ts)?;
        // A pivot batch's block moves this node's clock on by its length.
        self.ts_ok(
            "the end of a batch's block of timestamps",
            self.hlc.peek().saturating_add(call.block),
        )?;
        for c in &call.checks {
            // `until` is an expiry (wall time), not a version.
            self.ts_ok("a check's version", c.ts)?;
            for &ts in &c.order_ts {
                self.ts_ok("a check's version", ts)?;
            }
        }
        // A write's typed value, base and delta are not checked: before a
        // commit settles them they carry placeholder versions of 2^63 + n
        // (`elsa_shard::ops::pending_stamp`), and their installs
        // take the call's checked `commit_ts`.
        self.lattices_ok(&call.entries)
    }

    fn typed_ok(&self, t: &bytes::Bytes) -> Result<(), Refused> {
        // Only the newest version matters for the clock and for who wins;
        // an undecodable state merges as empty anyway.
        match elsa_lattice::KeyState::from_bytes(t.clone()) {
            Some(s) => self.ts_ok("a typed state's version", s.newest().commit_ts),
            None => Ok(()),
        }
    }

    /// Checks an answer's timestamps.
    pub(crate) fn check_answer(&self, answer: &Answer) -> Result<(), Refused> {
        self.ts_ok("an answer's timestamp", answer.ts)?;
        for s in &answer.states {
            self.ts_ok("an answer's version", s.commit_ts)?;
        }
        Ok(())
    }

    /// Logs a refused frame (at most ten lines a second, each with how many
    /// were refused so far) and counts it.
    pub(crate) fn note_refused(&self, peer: &str, why: &Refused) {
        let n = self.frames_refused.fetch_add(1, Ordering::Relaxed) + 1;
        if self.log_budget() {
            tracing::warn!("peer {peer}: frame refused: {why} ({n} refused so far)");
        }
    }

    /// Whether another warning may be logged this second (ten a second at
    /// most: a flood of bad frames or datagrams must not flood the log).
    pub(crate) fn log_budget(&self) -> bool {
        let second = elsa_shard::unix_ms() / 1000;
        let word = self.refused_log.load(Ordering::Relaxed);
        let (at, used) = (word >> 8, word & 0xff);
        let next = if at == second {
            if used >= 10 {
                return false;
            }
            word + 1
        } else {
            (second << 8) | 1
        };
        self.refused_log
            .compare_exchange(word, next, Ordering::Relaxed, Ordering::Relaxed)
            .is_ok()
    }

    /// Frames refused so far (INFO).
    pub fn frames_refused(&self) -> u64 {
        self.frames_refused.load(Ordering::Relaxed)
    }

    /// Membership datagrams dropped so far (INFO).
    pub fn datagrams_dropped(&self) -> u64 {
        self.datagrams_dropped.load(Ordering::Relaxed)
    }

    /// The counter the membership socket adds its drops to.
    pub(crate) fn datagram_counter(&self) -> Arc<AtomicU64> {
        self.datagrams_dropped.clone()
    }
}

//! Durability for one shard: its write-ahead log, and the snapshot files.
//!
//! Group commit without a lock or a log thread: while the shard handles a
//! message, the lattices it installs are *staged*; at the end of the message
//! they are sealed into one record (see [`codec`]) and the message's reply is
//! *deferred*. When the shard's inbox runs dry, the worker calls
//! [`Wal::flush`]: one `write` for every record sealed since the last flush
//! (plus one `fdatasync` under `always`), then every deferred reply is sent.
//! So a commit is acknowledged only once its record is written — fsynced
//! under `always` — and a busy shard commits many clients per syscall.
//!
//! If a write or sync fails (disk full, read-only file system), the records
//! and their replies stay queued: those clients wait, new writes are refused
//! with a clear error (nothing is applied), and the flush is retried every
//! epoch until it succeeds; then the waiting clients get their answers.

pub mod codec;
pub mod files;
pub mod latency;
pub mod segment;

use std::io;
use std::time::{Duration, Instant};

use elsa_lattice::{Ts, Version};

/// When the log is fsynced (Redis's `appendfsync` names and meanings).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Fsync {
    /// Every group of commits, before they are acknowledged.
    Always,
    /// About once a second; a crash of the OS or machine may lose the last
    /// second (a crash of the process loses nothing written).
    #[default]
    EverySec,
    /// Never explicitly; the OS decides.
    No,
}

impl std::str::FromStr for Fsync {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s.to_ascii_lowercase().as_str() {
            "always" => Ok(Fsync::Always),
            "everysec" => Ok(Fsync::EverySec),
            "no" => Ok(Fsync::No),
            _ => Err(format!(
                "unknown appendfsync '{s}' (use always, everysec or no)"
            )),
        }
    }
}

impl Fsync {
    /// The config name.
    pub fn name(self) -> &'static str {
        match self {
            Fsync::Always => "always",
            Fsync::EverySec => "everysec",
            Fsync::No => "no",
        }
    }
}

/// Where log bytes go: a file, or a fault-injecting fake in tests.
pub trait LogSink: Send {
    /// Appends all of `buf`.
    fn append(&mut self, buf: &[u8]) -> io::Result<()>;
    /// Makes everything appended so far durable.
    fn sync(&mut self) -> io::Result<()>;
    /// Cuts the sink back to `len` bytes: a failed append may have left part
    /// of a record behind, which a retry must not follow.
    fn truncate(&mut self, len: u64) -> io::Result<()>;
    /// A way to sync this sink from another thread, so fsyncs can overlap
    /// with the shard's work (None: sync inline).
    fn sync_handle(&self) -> Option<SyncFn> {
        None
    }
}

/// Syncs a sink from the syncer thread.
pub type SyncFn = Box<dyn FnMut() -> io::Result<()> + Send>;

/// A reply held back until the records before it are durable.
pub type Ack = Box<dyn FnOnce() + Send>;

/// Counters for `INFO persistence`.
#[derive(Clone, Debug, Default)]
pub struct WalStats {
    /// Bytes written to the current segment.
    pub segment_bytes: u64,
    /// Records written since start.
    pub records: u64,
    /// fsyncs since start.
    pub fsyncs: u64,
    /// Failed writes or syncs since start.
    pub errors: u64,
    /// The error that stops writes now, if any.
    pub failure: Option<String>,
    /// How long its fsyncs took (the metrics port's histogram).
    pub fsync_latency: latency::FsyncLatency,
}

/// One shard's write-ahead log.
pub struct Wal {
    sink: Box<dyn LogSink>,
    policy: Fsync,
    /// Where the frame of the message being handled starts in `buf`, and
    /// how many lattices it holds so far (see [`codec::open_frame`]).
    open: Option<usize>,
    /// What kind of lattices the open frame holds (see [`codec::Frame`]).
    open_kind: codec::Frame,
    staged_count: u32,
    buf: Vec<u8>,
    acks: Vec<Ack>,
    unsynced: bool,
    /// A failed append may have left a partial record past `segment_bytes`.
    torn: bool,
    last_sync: Instant,
    stats: WalStats,
    syncer: Option<Syncer>,
    /// Fsync durations, whichever thread syncs (see [`latency`]).
    fsync_latency: std::sync::Arc<latency::FsyncHistogram>,
}

/// Work for the syncer thread, in order.
enum SyncJob {
    /// Sync, then send these replies.
    Sync(Vec<Ack>),
    /// Send these replies once the syncs queued before them are done (they
    /// wrote nothing new: replies that read what those syncs cover).
    After(Vec<Ack>),
    /// Sync the current sink, then use this one (log rotation).
    Use(SyncFn),
    /// Sync, then say so (clean shutdown).
    Barrier(std::sync::mpsc::Sender<()>),
}

/// The thread that fsyncs for a shard. Pipelined group commit: while it
/// syncs one group, the shard goes on applying and writing the next, and
/// the next sync covers every group queued meanwhile.
struct Syncer {
    tx: std::sync::mpsc::Sender<SyncJob>,
    failure: std::sync::Arc<std::sync::Mutex<Option<String>>>,
    fsyncs: std::sync::Arc<std::sync::atomic::AtomicU64>,
    /// `Sync`/`After` jobs sent and not yet settled.
    in_flight: std::sync::Arc<std::sync::atomic::AtomicUsize>,
}

impl Syncer {
    fn start(mut sync: SyncFn, latency: std::sync::Arc<latency::FsyncHistogram>) -> Option<Syncer> {
        use std::sync::{Arc, Mutex};
        let (tx, rx) = std::sync::mpsc::channel::<SyncJob>();
        let failure = Arc::new(Mutex::new(None));
        let fsyncs = Arc::new(std::sync::atomic::AtomicU64::new(0));
        let in_flight = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let (f, n, pending) = (failure.clone(), fsyncs.clone(), in_flight.clone());
        std::thread::Builder::new()
            .name("elsa-wal-sync".into())
            .spawn(move || {
                let mut acks: Vec<Ack> = Vec::new();
                let mut dirty = false;
                // Syncs until it succeeds (holding the replies meanwhile),
                // then counts the jobs settled and answers their replies —
                // in that order, so a reply's receiver never sees its own
                // job still in flight.
                let settle = |sync: &mut SyncFn,
                              acks: &mut Vec<Ack>,
                              dirty: &mut bool,
                              taken: &mut usize| {
                    if *dirty {
                        loop {
                            let started = Instant::now();
                            match sync() {
                                Ok(()) => {
                                    latency.observe(started.elapsed());
                                    break;
                                }
                                Err(e) => {
                                    let msg = format!("write-ahead log fsync failed: {e}");
                                    let mut slot = f.lock().unwrap_or_else(|p| p.into_inner());
                                    if slot.as_deref() != Some(msg.as_str()) {
                                        tracing::error!(
                                            "{msg}; writes are refused until it succeeds"
                                        );
                                    }
                                    *slot = Some(msg);
                                    drop(slot);
                                    std::thread::sleep(Duration::from_millis(100));
                                }
                            }
                        }
                        n.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        if f.lock().unwrap_or_else(|p| p.into_inner()).take().is_some() {
                            tracing::warn!(
                                "write-ahead log fsync recovered; accepting writes again"
                            );
                        }
                        *dirty = false;
                    }
                    // (Not dirty: nothing was written since the last sync,
                    // so what these replies wait for is durable already.)
                    pending.fetch_sub(std::mem::take(taken), std::sync::atomic::Ordering::Release);
                    for ack in acks.drain(..) {
                        ack();
                    }
                };
                let mut taken = 0;
                while let Ok(first) = rx.recv() {
                    let mut next = Some(first);
                    while let Some(job) = next.take().or_else(|| rx.try_recv().ok()) {
                        match job {
                            SyncJob::Sync(more) => {
                                acks.extend(more);
                                dirty = true;
                                taken += 1;
                            }
                            SyncJob::After(more) => {
                                acks.extend(more);
                                taken += 1;
                            }
                            SyncJob::Use(new) => {
                                settle(&mut sync, &mut acks, &mut dirty, &mut taken);
                                sync = new;
                            }
                            SyncJob::Barrier(tx) => {
                                settle(&mut sync, &mut acks, &mut dirty, &mut taken);
                                let _ = tx.send(());
                            }
                        }
                    }
                    settle(&mut sync, &mut acks, &mut dirty, &mut taken);
                }
            })
            .ok()?;
        Some(Syncer {
            tx,
            failure,
            fsyncs,
            in_flight,
        })
    }
}

impl Wal {
    /// A log appending to `sink`. Syncs run on a syncer thread when the sink
    /// allows it, inline otherwise.
    pub fn new(sink: Box<dyn LogSink>, policy: Fsync) -> Wal {
        let fsync_latency = std::sync::Arc::new(latency::FsyncHistogram::default());
        let syncer = match policy {
            Fsync::No => None,
            _ => sink
                .sync_handle()
                .and_then(|sync| Syncer::start(sync, fsync_latency.clone())),
        };
        Wal {
            syncer,
            fsync_latency,
            sink,
            policy,
            open: None,
            open_kind: codec::Frame::Plain,
            staged_count: 0,
            buf: Vec::new(),
            acks: Vec::new(),
            unsynced: false,
            torn: false,
            last_sync: Instant::now(),
            stats: WalStats::default(),
        }
    }

    /// The fsync policy.
    pub fn policy(&self) -> Fsync {
        self.policy
    }

    /// Changes the fsync policy (CONFIG SET appendfsync): what is written
    /// from now on is synced as `policy` says; leaving `no`, what was
    /// written before is synced at the next flush.
    pub fn set_policy(&mut self, policy: Fsync) {
        if policy != Fsync::No && self.syncer.is_none() {
            self.syncer = self
                .sink
                .sync_handle()
                .and_then(|sync| Syncer::start(sync, self.fsync_latency.clone()));
        }
        self.policy = policy;
    }

    /// Adds one lattice to the record of the message being handled, in a
    /// frame of its `kind` (own commits, another region's lattices and
    /// parked parts each go in records of their own).
    pub fn stage(
        &mut self,
        key: &[u8],
        state: &codec::EntryState,
        start_ts: Ts,
        version: Version,
        kind: codec::Frame,
        unit: crate::record::Unit,
    ) {
        if self.open.is_some() && self.open_kind != kind {
            self.seal();
        }
        if self.open.is_none() {
            self.open = Some(codec::open_frame(&mut self.buf));
            self.open_kind = kind;
        }
        codec::encode_entry(
            &mut self.buf,
            codec::EntryRef::of(key, state, start_ts, version).with_unit(unit),
        );
        self.staged_count += 1;
    }

    /// Logs a FLUSHALL (`db` None) or FLUSHDB: everything (of `db`)
    /// committed before `floor` is deleted.
    pub fn stage_flush(&mut self, db: Option<u8>, floor: Ts) {
        self.seal();
        codec::encode_flush(&mut self.buf, db, floor);
        self.stats.records += 1;
    }

    /// Logs that the region's replicas confirmed every own record of
    /// segment `seq` that ends by byte `offset` (see [`Wal::position`]).
    pub fn stage_confirmed(&mut self, seq: u64, offset: u64) {
        self.seal();
        codec::encode_confirmed(&mut self.buf, seq, offset);
        self.stats.records += 1;
    }

    /// Logs that every own record staged so far is confirmed — records
    /// whose only copy is this node's (it has no replica to ship them to).
    pub fn stage_all_confirmed(&mut self, seq: u64) -> u64 {
        self.seal();
        let end = self.stats.segment_bytes + self.buf.len() as u64;
        self.stage_confirmed(seq, end);
        end
    }

    /// Where the current segment ends once everything flushed so far is
    /// written: the end of every record sealed before the last flush.
    pub fn position(&self) -> u64 {
        self.stats.segment_bytes
    }

    /// True when the message being handled staged something.
    pub fn has_staged(&self) -> bool {
        self.staged_count > 0
    }

    /// Ends the message being handled: its staged lattices become one record.
    pub fn seal(&mut self) {
        if let Some(at) = self.open.take() {
            codec::close_frame_of(&mut self.buf, at, self.staged_count, self.open_kind);
            self.staged_count = 0;
            self.stats.records += 1;
        }
    }

    /// Holds `ack` until everything sealed so far is durable.
    pub fn defer(&mut self, ack: Ack) {
        self.acks.push(ack);
    }

    /// True when sealed records are not written yet (the last
    /// [`Wal::flush`] failed, or none ran since they were sealed).
    pub fn unwritten(&self) -> bool {
        !self.buf.is_empty()
    }

    /// True when records or replies are waiting for [`Wal::flush`].
    pub fn pending(&self) -> bool {
        !self.buf.is_empty() || !self.acks.is_empty()
    }

    /// True when everything logged so far is as durable as the policy
    /// makes it (written; under `always`, synced too), so a reply may
    /// reveal any state the shard holds without waiting for the log.
    pub fn settled(&self) -> bool {
        self.staged_count == 0
            && self.buf.is_empty()
            && self.acks.is_empty()
            && self
                .syncer
                .as_ref()
                .is_none_or(|s| s.in_flight.load(std::sync::atomic::Ordering::Acquire) == 0)
    }

    /// The error refusing writes now, if the last write or sync failed.
    pub fn failure(&self) -> Option<String> {
        if let Some(f) = &self.stats.failure {
            return Some(f.clone());
        }
        let s = self.syncer.as_ref()?;
        s.failure.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Writes (and under `always` syncs) every sealed record, then sends the
    /// replies that waited for them. On failure keeps both for a retry.
    pub fn flush(&mut self) {
        // An open frame is never written half-made.
        self.seal();
        if self.torn {
            if let Err(e) = self.sink.truncate(self.stats.segment_bytes) {
                return self.fail("truncate after a failed write", e);
            }
            self.torn = false;
        }
        if !self.buf.is_empty() {
            if let Err(e) = self.sink.append(&self.buf) {
                // Part of the buffer may be on disk: cut it off before the
                // retry appends the whole buffer again.
                self.torn = true;
                if self.sink.truncate(self.stats.segment_bytes).is_ok() {
                    self.torn = false;
                }
                return self.fail("write", e);
            }
            self.stats.segment_bytes += self.buf.len() as u64;
            self.buf.clear();
            self.unsynced = true;
        }
        if self.stats.failure.take().is_some() {
            tracing::warn!("write-ahead log recovered; accepting writes again");
        }
        if self.policy == Fsync::Always && (self.unsynced || !self.acks.is_empty()) {
            if let Some(s) = &self.syncer {
                // The syncer answers these once their records are synced;
                // replies that wrote nothing wait for the syncs in flight.
                let in_flight = s.in_flight.load(std::sync::atomic::Ordering::Acquire);
                if self.unsynced || in_flight > 0 {
                    let acks = std::mem::take(&mut self.acks);
                    let job = if self.unsynced {
                        SyncJob::Sync(acks)
                    } else {
                        SyncJob::After(acks)
                    };
                    s.in_flight
                        .fetch_add(1, std::sync::atomic::Ordering::AcqRel);
                    if s.tx.send(job).is_ok() {
                        if self.unsynced {
                            self.last_sync = Instant::now();
                        }
                        self.unsynced = false;
                        return;
                    }
                    s.in_flight
                        .fetch_sub(1, std::sync::atomic::Ordering::AcqRel);
                    return self.fail("fsync", io::Error::other("syncer thread is gone"));
                }
            }
            if self.unsynced {
                if let Err(e) = self.sync() {
                    return self.fail("fsync", e);
                }
            }
        }
        for ack in self.acks.drain(..) {
            ack();
        }
    }

    fn sync(&mut self) -> io::Result<()> {
        let started = Instant::now();
        self.sink.sync()?;
        self.fsync_latency.observe(started.elapsed());
        self.unsynced = false;
        self.last_sync = Instant::now();
        self.stats.fsyncs += 1;
        Ok(())
    }

    fn fail(&mut self, what: &str, e: io::Error) {
        self.stats.errors += 1;
        let msg = format!("write-ahead log {what} failed: {e}");
        if self.stats.failure.as_deref() != Some(&msg) {
            tracing::error!("{msg}; writes are refused until it succeeds");
        }
        self.stats.failure = Some(msg);
    }

    /// Called every merge epoch: retries a failed flush and, under
    /// `everysec`, syncs when the last sync is a second old.
    pub fn tick(&mut self) {
        if self.pending() {
            self.flush();
        }
        if self.policy == Fsync::EverySec
            && self.unsynced
            && self.last_sync.elapsed() >= Duration::from_secs(1)
        {
            if let Some(s) = &self.syncer {
                if s.tx.send(SyncJob::Sync(Vec::new())).is_ok() {
                    self.unsynced = false;
                    self.last_sync = Instant::now();
                    return;
                }
            }
            if let Err(e) = self.sync() {
                self.fail("fsync", e);
            }
        }
    }

    /// Flushes, syncs and switches to a new sink (a new segment file).
    pub fn rotate(&mut self, sink: Box<dyn LogSink>) -> io::Result<()> {
        self.flush();
        if let Some(f) = self.failure() {
            return Err(io::Error::other(f));
        }
        match (&self.syncer, sink.sync_handle()) {
            (Some(s), Some(handle)) => {
                // The syncer syncs the old segment before switching.
                s.tx.send(SyncJob::Use(handle))
                    .map_err(|_| io::Error::other("syncer thread is gone"))?;
                self.unsynced = false;
            }
            _ => {
                if self.unsynced {
                    self.sync()?;
                }
            }
        }
        self.sink = sink;
        self.stats.segment_bytes = 0;
        Ok(())
    }

    /// Flushes and syncs everything (clean shutdown).
    pub fn close(&mut self) {
        self.flush();
        if let Some(s) = &self.syncer {
            let (tx, rx) = std::sync::mpsc::channel();
            let acks = std::mem::take(&mut self.acks);
            if s.tx.send(SyncJob::Sync(acks)).is_ok() && s.tx.send(SyncJob::Barrier(tx)).is_ok() {
                let _ = rx.recv_timeout(Duration::from_secs(30));
                self.unsynced = false;
                return;
            }
        }
        if self.unsynced {
            if let Err(e) = self.sync() {
                self.fail("fsync", e);
            }
        }
    }

    /// Counters for INFO.
    pub fn stats(&self) -> WalStats {
        let mut s = self.stats.clone();
        if let Some(sy) = &self.syncer {
            s.fsyncs += sy.fsyncs.load(std::sync::atomic::Ordering::Relaxed);
        }
        s.failure = self.failure();
        s.fsync_latency = self.fsync_latency.read();
        s
    }
}

#[cfg(test)]
mod tests;

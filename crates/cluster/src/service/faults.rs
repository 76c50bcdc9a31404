//! Fault injection (`ELSA.FAULT`, needs `fault-injection = true`): the
//! switches tests use to cut this node off from other regions, drop, delay
//! or refuse what it answers peers, act as if paused, or stop the process
//! at a chosen point of the commit path.

use super::*;

impl Cluster {
    /// Whether this node is cut off from other regions (fault injection).
    pub fn isolated(&self) -> bool {
        self.isolated.load(Ordering::Relaxed)
    }

    /// Testing: ignore (or not) the installs of multi-shard commits that
    /// other nodes coordinate — as a node that dies right after a commit's
    /// decision would.
    pub fn set_drop_installs(&self, on: bool) {
        self.drop_installs.store(on, Ordering::Relaxed);
        tracing::warn!(
            "fault injection: {} installs coordinated elsewhere",
            if on { "dropping" } else { "serving" }
        );
    }

    /// Testing: send itself `signal` (SIGKILL: die; SIGSTOP: pause) right
    /// after logging a write of a key starting with `prefix` that this
    /// node made as its primary, before shipping it to the other replicas
    /// — the window in which the write exists on one node only and the
    /// region may move on without it.
    pub fn set_crash_before_ship(&self, prefix: Option<(bytes::Bytes, i32)>) {
        *self
            .crash_before_ship
            .lock()
            .unwrap_or_else(|e| e.into_inner()) = prefix;
    }

    /// Testing: ship the next batch holding a write of a key starting
    /// with `prefix` that this node made as its primary to one replica
    /// only — the last of the key's region replicas, so not the one that
    /// takes the key over — and die (SIGKILL) as soon as that one has
    /// confirmed it: a write that reached some replicas and not others.
    pub fn set_ship_to_one(&self, prefix: Option<bytes::Bytes>) {
        *self.ship_to_one.lock().unwrap_or_else(|e| e.into_inner()) = prefix.map(|p| (p, None));
    }

    /// The one replica batch `id` (with `items`) may go to under
    /// [`Cluster::set_ship_to_one`]; arms the crash for that batch. None
    /// when the fault is off or the batch has no key with the prefix.
    pub(super) fn ship_only_to(&self, id: u64, items: &[(usize, Lattice)]) -> Option<NodeId> {
        if !self.settings.fault_injection {
            return None;
        }
        let mut fault = self.ship_to_one.lock().unwrap_or_else(|e| e.into_inner());
        let (prefix, armed) = fault.as_mut()?;
        if armed.is_some_and(|a| a != id) {
            return None;
        }
        let (slot, _) = items.iter().find(|(_, l)| l.key.starts_with(prefix))?;
        let ring = self.ring.load();
        let to = ring
            .replicas(*slot, ring.own_region())
            .iter()
            .rev()
            .find(|r| r.node != self.settings.node)?
            .node;
        *armed = Some(id);
        Some(to)
    }

    /// Dies if batch `id` is the one [`Cluster::ship_only_to`] armed.
    pub(super) fn fault_after_confirm(&self, id: u64) {
        let armed = self.ship_to_one.lock().unwrap_or_else(|e| e.into_inner());
        if armed.as_ref().is_some_and(|(_, a)| *a == Some(id)) {
            tracing::error!(
                "fault injection: SIGKILL to itself after one replica confirmed a batch"
            );
            // SAFETY: raise has no memory-safety preconditions.
            unsafe {
                libc::raise(libc::SIGKILL);
            }
        }
    }

    /// Testing: start no periodic anti-entropy round (or start them
    /// again): a write only some replicas have stays so until something
    /// else moves it.
    pub fn set_repair_paused(&self, on: bool) {
        self.repair_paused.store(on, Ordering::Relaxed);
        tracing::warn!(
            "fault injection: periodic anti-entropy {}",
            if on { "paused" } else { "running" }
        );
    }

    pub(super) fn repair_paused(&self) -> bool {
        self.repair_paused.load(Ordering::Relaxed)
    }

    /// Testing: hold every answer to a forwarded call for `ms` before
    /// sending it (0: none) — a node slow to answer, e.g. one paused
    /// between running a request and answering it.
    pub fn set_answer_delay(&self, ms: u64) {
        self.set_answer_delay_of(ms, false);
    }

    /// As [`Cluster::set_answer_delay`], for the answers to prepares only
    /// when `prepares_only` (a participant slow to vote, while its shadow
    /// holds, records and installs go at once).
    pub fn set_answer_delay_of(&self, ms: u64, prepares_only: bool) {
        self.answer_delay_ms.store(ms, Ordering::Relaxed);
        self.delay_prepares_only
            .store(prepares_only, Ordering::Relaxed);
        let which = if prepares_only { "prepares" } else { "peers" };
        tracing::warn!("fault injection: answers to {which} wait {ms} ms");
    }

    /// Testing: answer the installs of multi-shard commits coordinated
    /// elsewhere Busy without running them (or not) — as a node that is
    /// not the keys' primary any more would.
    pub fn set_busy_installs(&self, on: bool) {
        self.busy_installs.store(on, Ordering::Relaxed);
        tracing::warn!(
            "fault injection: installs {}",
            if on { "answered Busy" } else { "run" }
        );
    }

    /// The injected delay of the answer to a call of `kind`, if any.
    pub(crate) fn answer_delay(&self, kind: u32) -> Option<Duration> {
        match self.answer_delay_ms.load(Ordering::Relaxed) {
            0 => None,
            _ if kind != remote::PREPARE && self.delay_prepares_only.load(Ordering::Relaxed) => {
                None
            }
            ms => Some(Duration::from_millis(ms)),
        }
    }

    /// Testing: behave as if this process had just been paused long enough
    /// to be declared dead — what its pulse does on noticing a gap.
    pub fn simulate_pause(&self) {
        self.hlc.lapsed();
        self.serving.store(false, Ordering::SeqCst);
        self.rejoin("fault injection: as if paused");
    }

    /// Testing: skews this node's clock `ms` ahead (behind, when
    /// negative) of the real one (see `Hlc::set_offset_ms`).
    pub fn set_clock_offset(&self, ms: i64) {
        self.hlc.set_offset_ms(ms);
        // At once, not from the next pulse: the horizon would hold the
        // skewed clock's timestamps below the old reading until then.
        self.hlc.hold_physical_below(
            self.hlc.physical_ms() + super::catchup::CLOCK_LEASE.as_millis() as u64,
        );
        tracing::warn!("fault injection: clock offset {ms} ms");
    }

    /// Cuts this node off from every other region, or heals it.
    pub fn set_isolated(&self, on: bool) {
        self.isolated.store(on, Ordering::Relaxed);
        tracing::warn!(
            "fault injection: {} other regions",
            if on { "cut off from" } else { "reconnected to" }
        );
    }

    /// Drops this node's peer connections and fails its attempts to
    /// connect for `d`, as a network hiccup would, while membership gossip
    /// goes on: its peers stay live members of the view throughout.
    pub fn set_links_down(&self, d: Duration) {
        *self
            .links_down_until
            .lock()
            .unwrap_or_else(|e| e.into_inner()) = Some(Instant::now() + d);
        tracing::warn!("fault injection: peer connections down for {d:?}");
    }

    /// Testing: for `d`, the membership views this node installs leave out
    /// the other nodes of its region — as its failure detector does about
    /// a second into a cut — while the region's ownership group goes on as
    /// it was (its lease runs until the group hears otherwise).
    pub fn set_peers_forgotten(&self, d: Duration) {
        *self
            .peers_forgotten_until
            .lock()
            .unwrap_or_else(|e| e.into_inner()) = Some(Instant::now() + d);
        tracing::warn!("fault injection: the region's other nodes left out of the view for {d:?}");
    }

    /// Does the view leave out the region's other nodes (fault injection)?
    pub(crate) fn peers_forgotten(&self) -> bool {
        self.settings.fault_injection
            && self
                .peers_forgotten_until
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .is_some_and(|t| Instant::now() < t)
    }

    /// Are this node's peer connections down (fault injection)?
    pub(crate) fn links_down(&self) -> bool {
        self.settings.fault_injection
            && self
                .links_down_until
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .is_some_and(|t| Instant::now() < t)
    }

    /// Is peer address `addr` cut off by fault injection?
    pub(crate) fn cut_addr(&self, addr: SocketAddr) -> bool {
        // (Only while isolated: a scan of the nodes ever seen.)
        self.isolated()
            && self
                .known
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .values()
                .any(|m| m.peer == addr && self.other_region(&m.region))
    }

    /// Blocked by fault injection?
    pub(crate) fn cut(&self, region: &str) -> bool {
        self.isolated() && self.other_region(region)
    }

    /// Stops the process as [`Cluster::set_crash_before_ship`] asked, if a
    /// key of `entries` has the prefix. Called with a batch that is in the
    /// log and not shipped yet.
    pub(super) fn fault_before_ship(&self, entries: &[LogEntry]) {
        if !self.settings.fault_injection {
            return;
        }
        let crash = self
            .crash_before_ship
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        let Some((prefix, signal)) = crash else {
            return;
        };
        if !entries.iter().any(|e| e.key.starts_with(&prefix)) {
            return;
        }
        // A process killed now keeps the batch in its log.
        tracing::error!(
            "fault injection: signal {signal} to itself after logging a write, before shipping it"
        );
        if signal == libc::SIGSTOP {
            // Once: the test wakes it to see what it does next.
            self.set_crash_before_ship(None);
        }
        // SAFETY: raise has no memory-safety preconditions.
        unsafe {
            libc::raise(signal);
        }
    }
}

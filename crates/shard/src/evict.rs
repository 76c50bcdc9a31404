//! The memory limit as shards see it: the node's `maxmemory` settings
//! ([`MemoryLimit`], shared by every shard and changed by CONFIG SET), the
//! eviction policies of Redis 7.0, and a record's access clock (Redis's
//! 24 `lru` bits: LRU seconds, or LFU minutes and a logarithmic counter,
//! `evict.c`). Which key a shard evicts, and how, is `shard/evict.rs`.
//!
//! The server measures memory (the allocator's figure) and splits how far
//! over the limit the node is among the shards ([`MemoryLimit::set_used`]),
//! by the records each holds; a shard reads what it owes with relaxed
//! loads of its own cache line per batch, and when it owes, evicts from its
//! own table and counts what it freed.

use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicU8, Ordering::Relaxed};

/// `maxmemory-policy`, as Redis names them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum Policy {
    /// Refuse writes when over the limit.
    NoEviction = 0,
    /// Any key, least recently used first.
    AllkeysLru,
    /// Any key, least frequently used first.
    AllkeysLfu,
    /// Any key, at random.
    AllkeysRandom,
    /// Keys with a TTL, least recently used first.
    VolatileLru,
    /// Keys with a TTL, least frequently used first.
    VolatileLfu,
    /// Keys with a TTL, at random.
    VolatileRandom,
    /// Keys with a TTL, the nearest expiry first.
    VolatileTtl,
}

impl Policy {
    /// Every policy, in Redis's order (`maxmemory_policy_enum` in config.c).
    pub const ALL: [Policy; 8] = [
        Policy::VolatileLru,
        Policy::VolatileLfu,
        Policy::VolatileRandom,
        Policy::VolatileTtl,
        Policy::AllkeysLru,
        Policy::AllkeysLfu,
        Policy::AllkeysRandom,
        Policy::NoEviction,
    ];

    /// Its name in CONFIG and INFO.
    pub fn name(self) -> &'static str {
        match self {
            Policy::NoEviction => "noeviction",
            Policy::AllkeysLru => "allkeys-lru",
            Policy::AllkeysLfu => "allkeys-lfu",
            Policy::AllkeysRandom => "allkeys-random",
            Policy::VolatileLru => "volatile-lru",
            Policy::VolatileLfu => "volatile-lfu",
            Policy::VolatileRandom => "volatile-random",
            Policy::VolatileTtl => "volatile-ttl",
        }
    }

    /// The policy named `name` (any case, as Redis's enum configs).
    pub fn parse(name: &str) -> Option<Policy> {
        Policy::ALL
            .into_iter()
            .find(|p| p.name().eq_ignore_ascii_case(name))
    }

    fn from_u8(v: u8) -> Policy {
        Policy::ALL
            .into_iter()
            .find(|p| *p as u8 == v)
            .unwrap_or(Policy::NoEviction)
    }

    /// True for the LFU policies (the access clock is then a counter).
    pub fn is_lfu(self) -> bool {
        matches!(self, Policy::AllkeysLfu | Policy::VolatileLfu)
    }

    /// True when only keys with a TTL may go.
    pub fn is_volatile(self) -> bool {
        matches!(
            self,
            Policy::VolatileLru
                | Policy::VolatileLfu
                | Policy::VolatileRandom
                | Policy::VolatileTtl
        )
    }

    /// True when victims are picked at random (no pool).
    pub fn is_random(self) -> bool {
        matches!(self, Policy::AllkeysRandom | Policy::VolatileRandom)
    }
}

/// Redis's defaults (redis.conf).
pub const DEFAULT_SAMPLES: u32 = 5;
/// `lfu-log-factor`'s default.
pub const DEFAULT_LFU_LOG_FACTOR: u32 = 10;
/// `lfu-decay-time`'s default, in minutes.
pub const DEFAULT_LFU_DECAY_TIME: u32 = 1;
/// The counter a new key starts with under LFU (Redis's `LFU_INIT_VAL`), so
/// it is not evicted before it had a chance to be read.
pub const LFU_INIT_VAL: u32 = 5;

/// Most shards a node splits its excess among (the width of the stuck mask).
const MAX_SHARDS: usize = 64;

/// A stuck shard tries again every this many measurements (once a second
/// at the sampler's 10 ms while over the limit): with nothing evictable — a
/// volatile policy and no key with a TTL — a try samples the whole table.
/// Before the split it tried before every batch, and a node stuck with
/// 430,000 keys served 478 GETs a second (`redis-benchmark -P 16`; 257,000
/// with probes); probing every 100 ms still cost 30 % of a core while idle.
const PROBE_EVERY: u64 = 100;

/// One shard's part of the node's excess, on its own cache line: the shard
/// reads it before every batch, the sampler writes it every 10 ms.
#[derive(Debug, Default)]
#[repr(align(64))]
struct Share {
    /// Bytes the sampler asked this shard to free, since start.
    owed: AtomicU64,
    /// Bytes the shard freed (its estimate), since start.
    freed: AtomicU64,
    /// The records it holds that are not tombstones, as it last said: its
    /// weight when a new excess is split.
    weight: AtomicU64,
    /// Bytes of replication state it holds (gossip buffer, parked parts
    /// of other regions' transactions), as it last said.
    replication: AtomicU64,
}

/// The node's memory limit and eviction settings, and what shards and the
/// server tell each other about it. All relaxed atomics: each value is
/// read on its own, and a stale one for a moment is harmless.
///
/// Why the excess is split and not shared: with one figure every shard
/// drew on, the shard that ran first paid all of it — on a two-worker node
/// the shard of the writing connection evicted the node's whole excess
/// from its own table, hot keys included, while the other kept its cold
/// ones. Each measurement now hands the excess nobody owes yet to the
/// shards in proportion to their records, and a shard evicts what it owes
/// (Redis evicts the best key of the whole keyspace; split by size, each
/// shard's best keys go in about the same proportion).
#[derive(Debug)]
pub struct MemoryLimit {
    maxmemory: AtomicU64,
    policy: AtomicU8,
    samples: AtomicU32,
    lfu_log_factor: AtomicU32,
    lfu_decay_time: AtomicU32,
    /// Bytes over `maxmemory` at the last measurement, less what shards
    /// evicted since: 0 when under the limit (or no limit is set).
    excess: AtomicU64,
    /// Shards (bit = index mod 64) that found nothing to evict while over
    /// the limit; cleared when they evict again or the node gets under it.
    stuck: AtomicU64,
    /// Shards of this node (for "every shard is stuck").
    shards: AtomicU32,
    /// Each shard's part of the excess.
    shares: Box<[Share]>,
    /// Measurements split so far (for [`PROBE_EVERY`]).
    splits: AtomicU64,
    /// True while writes flagged `denyoom` must be refused.
    oom: AtomicBool,
    evicted: AtomicU64,
    /// Bytes of the node's streams to other regions (frames kept until
    /// acknowledged), as the node last said.
    streams: AtomicU64,
}

impl Default for MemoryLimit {
    fn default() -> Self {
        MemoryLimit {
            maxmemory: AtomicU64::new(0),
            policy: AtomicU8::new(Policy::NoEviction as u8),
            samples: AtomicU32::new(DEFAULT_SAMPLES),
            lfu_log_factor: AtomicU32::new(DEFAULT_LFU_LOG_FACTOR),
            lfu_decay_time: AtomicU32::new(DEFAULT_LFU_DECAY_TIME),
            excess: AtomicU64::new(0),
            stuck: AtomicU64::new(0),
            shards: AtomicU32::new(1),
            shares: (0..MAX_SHARDS).map(|_| Share::default()).collect(),
            splits: AtomicU64::new(0),
            oom: AtomicBool::new(false),
            evicted: AtomicU64::new(0),
            streams: AtomicU64::new(0),
        }
    }
}

impl MemoryLimit {
    /// `maxmemory` in bytes; 0 is no limit.
    pub fn maxmemory(&self) -> u64 {
        self.maxmemory.load(Relaxed)
    }

    /// Sets `maxmemory`.
    pub fn set_maxmemory(&self, bytes: u64) {
        self.maxmemory.store(bytes, Relaxed);
    }

    /// `maxmemory-policy`.
    pub fn policy(&self) -> Policy {
        Policy::from_u8(self.policy.load(Relaxed))
    }

    /// Sets `maxmemory-policy`.
    pub fn set_policy(&self, p: Policy) {
        self.policy.store(p as u8, Relaxed);
    }

    /// `maxmemory-samples`.
    pub fn samples(&self) -> u32 {
        self.samples.load(Relaxed)
    }

    /// Sets `maxmemory-samples` (at least 1).
    pub fn set_samples(&self, n: u32) {
        self.samples.store(n.max(1), Relaxed);
    }

    /// `lfu-log-factor`.
    pub fn lfu_log_factor(&self) -> u32 {
        self.lfu_log_factor.load(Relaxed)
    }

    /// Sets `lfu-log-factor`.
    pub fn set_lfu_log_factor(&self, v: u32) {
        self.lfu_log_factor.store(v, Relaxed);
    }

    /// `lfu-decay-time`, minutes.
    pub fn lfu_decay_time(&self) -> u32 {
        self.lfu_decay_time.load(Relaxed)
    }

    /// Sets `lfu-decay-time`.
    pub fn set_lfu_decay_time(&self, v: u32) {
        self.lfu_decay_time.store(v, Relaxed);
    }

    /// Keys evicted since start (INFO's `evicted_keys`).
    pub fn evicted(&self) -> u64 {
        self.evicted.load(Relaxed)
    }

    /// How many bytes the node is over its limit: the last measurement,
    /// less what shards freed since.
    pub fn excess(&self) -> u64 {
        self.excess.load(Relaxed)
    }

    /// Bytes shard `shard` still has to free (two loads of its own cache
    /// line, what a shard pays per batch).
    pub fn owed(&self, shard: usize) -> u64 {
        let s = &self.shares[shard % MAX_SHARDS];
        s.owed.load(Relaxed).saturating_sub(s.freed.load(Relaxed))
    }

    /// Shard `shard` holds `records` that are not tombstones.
    pub fn set_weight(&self, shard: usize, records: u64) {
        let w = &self.shares[shard % MAX_SHARDS].weight;
        if w.load(Relaxed) != records {
            w.store(records, Relaxed);
        }
    }

    /// Shard `shard` holds `bytes` of replication state.
    pub fn set_replication(&self, shard: usize, bytes: u64) {
        self.shares[shard % MAX_SHARDS]
            .replication
            .store(bytes, Relaxed);
    }

    /// The node's streams to other regions keep `bytes` of frames.
    pub fn set_streams(&self, bytes: u64) {
        self.streams.store(bytes, Relaxed);
    }

    /// Replication state the limit does not count (Redis's
    /// `mem_not_counted_for_evict`, its replication and AOF buffers): a
    /// region cut off for a while makes the others keep frames for it, and
    /// that must not evict the dataset.
    pub fn not_counted(&self) -> u64 {
        let n = self.shards.load(Relaxed).clamp(1, MAX_SHARDS as u32) as usize;
        self.shares[..n]
            .iter()
            .map(|s| s.replication.load(Relaxed))
            .sum::<u64>()
            + self.streams.load(Relaxed)
    }

    /// True while `denyoom` commands must be refused.
    pub fn oom(&self) -> bool {
        self.oom.load(Relaxed)
    }

    /// Tells the limit how many shards share it.
    pub fn set_shards(&self, n: usize) {
        self.shards.store(n.clamp(1, MAX_SHARDS) as u32, Relaxed);
    }

    /// The server's measurement: `used` bytes now (the allocator's figure;
    /// what [`MemoryLimit::not_counted`] reports is taken off). Publishes
    /// the excess and decides whether writes are refused: with
    /// `noeviction` as soon as the node is over, otherwise once every
    /// shard found nothing left to evict (Redis's `EVICT_FAIL`).
    pub fn set_used(&self, used: u64) {
        let used = used.saturating_sub(self.not_counted());
        let max = self.maxmemory();
        let excess = if max == 0 {
            0
        } else {
            used.saturating_sub(max)
        };
        self.excess.store(excess, Relaxed);
        if excess == 0 {
            self.stuck.store(0, Relaxed);
        }
        self.split(excess);
        let all = u64::MAX >> (64 - self.shards.load(Relaxed).clamp(1, 64));
        let refuse = excess > 0
            && (self.policy() == Policy::NoEviction || self.stuck.load(Relaxed) & all == all);
        self.oom.store(refuse, Relaxed);
    }

    /// Hands the part of `excess` no shard owes yet to the shards that can
    /// still evict, by their weights. Under the limit nothing is owed. A
    /// stuck shard's debt passes to the others, and every [`PROBE_EVERY`]
    /// measurements it is owed one byte: a probe, so it tries again now and
    /// then (not once per batch, as before the split) and rejoins the split
    /// once it finds a key again.
    fn split(&self, excess: u64) {
        let probe = self
            .splits
            .fetch_add(1, Relaxed)
            .is_multiple_of(PROBE_EVERY);
        let n = self.shards.load(Relaxed).clamp(1, MAX_SHARDS as u32) as usize;
        let stuck = self.stuck.load(Relaxed);
        let shares = &self.shares[..n];
        let able = |i: usize| stuck & (1 << i) == 0;
        let (mut outstanding, mut weights, mut count) = (0u64, 0u64, 0u64);
        for (i, s) in shares.iter().enumerate() {
            let freed = s.freed.load(Relaxed);
            if excess == 0 {
                s.owed.store(freed, Relaxed);
            } else if !able(i) {
                if probe {
                    s.owed.store(freed + 1, Relaxed);
                }
            } else {
                outstanding += s.owed.load(Relaxed).saturating_sub(freed);
                weights += s.weight.load(Relaxed);
                count += 1;
            }
        }
        let new = excess.saturating_sub(outstanding);
        if new == 0 || count == 0 {
            return;
        }
        for (_, s) in shares.iter().enumerate().filter(|(i, _)| able(*i)) {
            // Rounded up, so a small excess is never split into nothing.
            let part = if weights == 0 {
                new.div_ceil(count)
            } else {
                (u128::from(new) * u128::from(s.weight.load(Relaxed))).div_ceil(u128::from(weights))
                    as u64
            };
            // What a shard freed beyond its part is no credit: the excess
            // measured already counts it.
            let base = s.owed.load(Relaxed).max(s.freed.load(Relaxed));
            s.owed.store(base + part, Relaxed);
        }
    }

    /// A shard evicted `bytes` (its estimate of what it freed).
    pub fn freed(&self, shard: usize, keys: u64, bytes: u64) {
        self.evicted.fetch_add(keys, Relaxed);
        self.shares[shard % MAX_SHARDS]
            .freed
            .fetch_add(bytes, Relaxed);
        let _ = self
            .excess
            .fetch_update(Relaxed, Relaxed, |e| Some(e.saturating_sub(bytes)));
        self.stuck.fetch_and(!(1 << (shard % 64)), Relaxed);
    }

    /// A shard over the limit found nothing it may evict: it owes nothing
    /// until a measurement hands it a probe.
    pub fn stuck(&self, shard: usize) {
        self.stuck.fetch_or(1 << (shard % 64), Relaxed);
        let s = &self.shares[shard % MAX_SHARDS];
        s.owed.store(s.freed.load(Relaxed), Relaxed);
    }

    /// The clock settings for accesses at `now_ms`.
    pub fn clock(&self, now_ms: u64) -> AccessClock {
        AccessClock {
            lfu: self.policy().is_lfu(),
            now_ms,
            log_factor: self.lfu_log_factor(),
            decay_time: self.lfu_decay_time(),
        }
    }
}

/// How a table stamps and touches records' access clocks at one moment.
#[derive(Clone, Copy, Debug)]
pub struct AccessClock {
    /// LFU (minutes + counter) rather than LRU (seconds).
    pub lfu: bool,
    /// Now, Unix milliseconds.
    pub now_ms: u64,
    /// `lfu-log-factor`.
    pub log_factor: u32,
    /// `lfu-decay-time`, minutes.
    pub decay_time: u32,
}

impl Default for AccessClock {
    fn default() -> Self {
        AccessClock {
            lfu: false,
            now_ms: 0,
            log_factor: DEFAULT_LFU_LOG_FACTOR,
            decay_time: DEFAULT_LFU_DECAY_TIME,
        }
    }
}

/// What RESTORE asks a key's access clock to say.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Restored {
    /// IDLETIME: idle for this many seconds.
    Idle(u64),
    /// FREQ: this LFU counter.
    Freq(u8),
}

/// The 24-bit clock's range (Redis's `LRU_CLOCK_MAX`).
const CLOCK_MAX: u32 = (1 << 24) - 1;

impl AccessClock {
    /// Redis's `LRU_CLOCK()`: seconds, 24 bits.
    fn lru_now(&self) -> u32 {
        ((self.now_ms / 1000) as u32) & CLOCK_MAX
    }

    /// Redis's `LFUGetTimeInMinutes()`: minutes, 16 bits.
    fn minutes(&self) -> u32 {
        ((self.now_ms / 60_000) as u32) & 0xffff
    }

    /// The clock of a key created now.
    pub fn fresh(&self) -> u32 {
        if self.lfu {
            (self.minutes() << 8) | LFU_INIT_VAL
        } else {
            self.lru_now()
        }
    }

    /// The clock of a key accessed now whose clock was `old`; `random` is a
    /// uniform draw in [0, 1) (Redis's `updateLFU`: decay, then a
    /// logarithmic increment).
    pub fn touched(&self, old: u32, random: f64) -> u32 {
        if !self.lfu {
            return self.lru_now();
        }
        let counter = self.freq(old);
        let counter = if counter == 255 {
            255
        } else {
            let base = counter.saturating_sub(LFU_INIT_VAL) as f64;
            let p = 1.0 / (base * self.log_factor as f64 + 1.0);
            counter + u32::from(random < p)
        };
        (self.minutes() << 8) | counter
    }

    /// Redis's `LFUDecrAndReturn`: the counter of clock `access` with the
    /// decay periods since its last access taken off.
    pub fn freq(&self, access: u32) -> u32 {
        let ldt = access >> 8;
        let counter = access & 255;
        let now = self.minutes();
        let elapsed = if now >= ldt {
            now - ldt
        } else {
            65535 - ldt + now
        };
        let periods = elapsed.checked_div(self.decay_time).unwrap_or(0);
        counter.saturating_sub(periods)
    }

    /// The clock RESTORE's IDLETIME or FREQ gives a key (Redis's
    /// `objectSetLRUOrLFU`): under an LFU policy only FREQ counts, under
    /// any other only IDLETIME; None when the one that counts is absent.
    pub fn restored(&self, to: Restored) -> Option<u32> {
        match (self.lfu, to) {
            (true, Restored::Freq(f)) => Some((self.minutes() << 8) | u32::from(f)),
            (false, Restored::Idle(secs)) => {
                let now = i64::from(self.lru_now());
                let secs = i64::try_from(secs).unwrap_or(i64::MAX);
                let at = now.saturating_sub(secs);
                let at = if at < 0 {
                    (now + i64::from(CLOCK_MAX / 2)) % i64::from(CLOCK_MAX)
                } else {
                    at
                };
                Some(at as u32)
            }
            _ => None,
        }
    }

    /// Redis's `estimateObjectIdleTime`, in milliseconds.
    pub fn idle_ms(&self, access: u32) -> u64 {
        let now = self.lru_now();
        let secs = if now >= access {
            now - access
        } else {
            CLOCK_MAX - access + now
        };
        u64::from(secs) * 1000
    }

    /// What makes a key a better victim, higher first (Redis's `idle`
    /// score in `evictionPoolPopulate`).
    pub fn score(&self, policy: Policy, access: u32, expire_ms: Option<u64>) -> u64 {
        match policy {
            Policy::VolatileTtl => u64::MAX - expire_ms.unwrap_or(u64::MAX),
            p if p.is_lfu() => 255 - u64::from(self.freq(access)),
            _ => self.idle_ms(access),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn policies_round_trip_by_name() {
        for p in Policy::ALL {
            assert_eq!(Policy::parse(p.name()), Some(p));
            assert_eq!(Policy::parse(&p.name().to_uppercase()), Some(p));
            assert_eq!(Policy::from_u8(p as u8), p);
        }
        assert_eq!(Policy::parse("bogus"), None);
    }

    #[test]
    fn replication_state_is_not_counted_against_the_limit() {
        let m = MemoryLimit::default();
        m.set_shards(2);
        m.set_maxmemory(1000);
        m.set_used(1200);
        assert!(m.oom(), "noeviction refuses writes while over");
        m.set_replication(0, 150);
        m.set_replication(1, 50);
        m.set_streams(100);
        assert_eq!(m.not_counted(), 300);
        m.set_used(1200);
        assert!(!m.oom(), "a dataset of 900 is under the limit");
        assert_eq!(m.excess(), 0);
        m.set_streams(0);
        m.set_used(1200);
        assert_eq!(m.excess(), 0);
        m.set_used(1300);
        assert_eq!(m.excess(), 100);
    }

    #[test]
    fn lfu_counter_grows_logarithmically_and_decays() {
        let c = AccessClock {
            lfu: true,
            now_ms: 10 * 60_000,
            ..AccessClock::default()
        };
        let mut a = c.fresh();
        assert_eq!(c.freq(a), LFU_INIT_VAL);
        // Always-hit draws: one increment per access.
        for _ in 0..10 {
            a = c.touched(a, 0.0);
        }
        assert_eq!(c.freq(a), LFU_INIT_VAL + 10);
        // A draw of 0.5 increments only while p = 1/(base*10+1) > 0.5.
        let b = c.touched(a, 0.5);
        assert_eq!(c.freq(b), c.freq(a), "base 10: p = 1/101");
        // Three minutes later, with a decay time of one minute: 3 less.
        let later = AccessClock {
            now_ms: 13 * 60_000,
            ..c
        };
        assert_eq!(later.freq(a), LFU_INIT_VAL + 7);
        assert_eq!(later.score(Policy::AllkeysLfu, a, None), 255 - 12);
    }

    #[test]
    fn lru_idle_time_wraps_like_redis() {
        let c = AccessClock {
            now_ms: 100_000,
            ..AccessClock::default()
        };
        assert_eq!(c.idle_ms(c.fresh()), 0);
        assert_eq!(c.idle_ms(90), 10_000);
        assert_eq!(c.idle_ms(CLOCK_MAX - 5), (5 + 100) * 1000);
    }

    #[test]
    fn oom_follows_policy_and_stuck_shards() {
        let m = MemoryLimit::default();
        m.set_shards(2);
        m.set_used(1 << 30);
        assert!(!m.oom(), "no limit set");
        m.set_maxmemory(100);
        m.set_used(150);
        assert_eq!(m.excess(), 50);
        assert!(m.oom(), "noeviction refuses once over");
        m.set_policy(Policy::AllkeysLru);
        m.set_used(150);
        assert!(!m.oom(), "evicting policies first try to evict");
        m.stuck(0);
        m.set_used(150);
        assert!(!m.oom(), "one shard may still evict");
        m.stuck(1);
        m.set_used(150);
        assert!(m.oom(), "no shard can");
        m.freed(1, 2, 30);
        assert_eq!((m.excess(), m.evicted()), (20, 2));
        m.set_used(90);
        assert!(!m.oom());
        assert_eq!(m.excess(), 0);
    }

    #[test]
    fn the_excess_is_split_by_records_and_owed_until_freed() {
        let m = MemoryLimit::default();
        m.set_shards(2);
        m.set_policy(Policy::AllkeysLfu);
        m.set_maxmemory(1000);
        m.set_weight(0, 300);
        m.set_weight(1, 100);
        m.set_used(1400);
        assert_eq!((m.owed(0), m.owed(1)), (300, 100));
        // Shard 0 pays; the next measurement still sees shard 1's part,
        // which nobody else is handed.
        m.freed(0, 3, 300);
        m.set_used(1100);
        assert_eq!((m.owed(0), m.owed(1)), (0, 100));
        // More writes: only what nobody owes is split again.
        m.set_used(1500);
        assert_eq!((m.owed(0), m.owed(1)), (300, 200));
        // A shard that freed more than its part gets no credit.
        m.freed(0, 4, 400);
        m.set_used(1300);
        assert_eq!((m.owed(0), m.owed(1)), (75, 225));
        // A stuck shard's part passes to the others; now and then it gets
        // a probe (here it finds nothing again each time).
        m.stuck(1);
        assert_eq!(m.owed(1), 0, "no retry before a measurement probes it");
        let mut probes = 0;
        for _ in 0..2 * PROBE_EVERY {
            m.set_used(1300);
            assert_eq!(m.owed(0), 300);
            if m.owed(1) == 1 {
                probes += 1;
                m.stuck(1);
            }
        }
        assert_eq!(probes, 2);
        m.set_used(1300);
        while m.owed(1) == 0 {
            m.set_used(1300);
        }
        // The probe found a key: it is back in the split.
        m.freed(1, 1, 50);
        m.set_used(1700);
        assert_eq!((m.owed(0), m.owed(1)), (600, 100));
        // Under the limit nothing is owed.
        m.set_used(900);
        assert_eq!((m.owed(0), m.owed(1)), (0, 0));
        // No weights yet: an even split, rounded up.
        let m = MemoryLimit::default();
        m.set_shards(3);
        m.set_maxmemory(10);
        m.set_policy(Policy::AllkeysRandom);
        m.set_used(11);
        assert_eq!((m.owed(0), m.owed(1), m.owed(2)), (1, 1, 1));
    }
}

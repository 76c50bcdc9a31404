//! A string value that is also a counter: what a Redis string key, and a
//! hash field, hold.
//!
//! A write of the whole value (`SET`, `APPEND`, `EXPIRE`, `DEL`, a float
//! increment…) sets the *base*: a last-writer-wins register that also
//! records the per-origin increment totals it had seen (*observed*), since
//! its value already includes them. An integer increment (`INCR`,
//! `INCRBY`, `DECR`, `HINCRBY`…) only raises its origin's running total
//! (*tally*), merged per origin by version. The value shown is the base
//! plus, per origin, what that origin added since the base saw it:
//!
//! ```text
//! value = base + Σ_origin (tally[origin] − observed[origin])
//! ```
//!
//! So concurrent increments in every region all count, and a `SET`
//! resets exactly the increments it had seen: one concurrent with it (not
//! yet seen where the `SET` ran) is added on top of the new value
//! (`docs/datatypes.md`). A base that is not a number shows as itself:
//! increments concurrent with a `SET` of a non-number are dropped, as the
//! client that wrote it would expect to read what it wrote.
//!
//! Totals wrap (two's complement) — only differences of one origin's
//! totals are ever used, and those are exact whenever the increments in
//! between fit in 64 bits, which the per-command overflow check ensures.

use bytes::Bytes;

use crate::hll_parts::{HllParts, Part};
use crate::{Crdt, Elem, NodeId, Ts, Version};

/// A running total's number: an integer (counters) or a float (sorted-set
/// scores). Its `key` orders and hashes it — bits for a float, so a NaN
/// or a `-0` still has one place in the merge order.
pub trait Total: Copy + Default + std::fmt::Debug {
    /// An order-preserving key.
    fn key(self) -> u64;
}

impl Total for i64 {
    fn key(self) -> u64 {
        (self as u64) ^ (1 << 63)
    }
}

impl Total for f64 {
    fn key(self) -> u64 {
        self.to_bits()
    }
}

/// One origin's running total of increments, and the version of its last
/// change (the newer version wins a merge).
#[derive(Clone, Copy, Debug, Default)]
pub struct Tally<T = i64> {
    /// Sum of the origin's increments (an integer one wraps).
    pub total: T,
    /// The write that last changed it.
    pub version: Version,
}

impl<T: Total> Tally<T> {
    fn key(&self) -> (Version, u64) {
        (self.version, self.total.key())
    }
}

impl<T: Total> PartialEq for Tally<T> {
    fn eq(&self, other: &Self) -> bool {
        self.key() == other.key()
    }
}

impl<T: Total> Eq for Tally<T> {}

impl<T: Total> std::hash::Hash for Tally<T> {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.key().hash(state)
    }
}

/// Per origin, its [`Tally`], sorted by origin.
#[derive(Clone, Debug, Default)]
pub struct Tallies<T: Total = i64>(pub(crate) Vec<(NodeId, Tally<T>)>);

impl<T: Total> PartialEq for Tallies<T> {
    fn eq(&self, other: &Self) -> bool {
        self.0 == other.0
    }
}

impl<T: Total> Eq for Tallies<T> {}

impl<T: Total> std::hash::Hash for Tallies<T> {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.0.hash(state)
    }
}

impl<T: Total> Tallies<T> {
    /// Origin `o`'s tally (zero when it never incremented).
    pub fn get(&self, o: NodeId) -> Tally<T> {
        match self.0.binary_search_by_key(&o, |&(k, _)| k) {
            Ok(i) => self.0[i].1,
            Err(_) => Tally::default(),
        }
    }

    /// Takes `t` as origin `o`'s tally if it is newer; true if it was.
    pub fn offer(&mut self, o: NodeId, t: Tally<T>) -> bool {
        match self.0.binary_search_by_key(&o, |&(k, _)| k) {
            Ok(i) => {
                let cur = &mut self.0[i].1;
                if t.key() > cur.key() {
                    *cur = t;
                    true
                } else {
                    false
                }
            }
            Err(i) => {
                self.0.insert(i, (o, t));
                true
            }
        }
    }

    /// Every origin's tally, by origin.
    pub fn iter(&self) -> impl Iterator<Item = (NodeId, Tally<T>)> + '_ {
        self.0.iter().copied()
    }

    /// How many origins incremented.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// True when no origin ever incremented.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The newest change.
    pub(crate) fn newest(&self) -> Version {
        self.0
            .iter()
            .map(|(_, t)| t.version)
            .max()
            .unwrap_or(Version::ZERO)
    }
}

impl<T: Total> Crdt for Tallies<T> {
    fn merge(&mut self, other: Tallies<T>) -> bool {
        let mut changed = false;
        for (o, t) in other.0 {
            changed |= self.offer(o, t);
        }
        changed
    }
}

/// A string value with counter merges (see the module doc).
///
/// The *base* (last whole-value write) is its value, version and start
/// timestamp inline; its expiry and observed tallies, and the tallies
/// themselves, sit in one box that most values never need — a hash field
/// is usually written by `HSET` only, and a big hash pays for every byte
/// inline a million times (issue 13). The box is `None` exactly when all
/// it would hold is empty, so equal states compare equal.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct Counter {
    /// The base's value, or `None` when deleted (or never written).
    value: Option<Elem>,
    /// When the base's writing transaction started.
    start_ts: Ts,
    /// Who wrote the base, and when.
    version: Version,
    rare: Option<Box<Rare>>,
}

/// The parts of a [`Counter`] most values leave empty.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
struct Rare {
    /// The base's absolute expiry, Unix ms.
    expire_ms: Option<u64>,
    /// The tallies the base's value already includes.
    observed: Tallies,
    /// Every origin's running total.
    tallies: Tallies,
    /// `Some(v)` when the base is a change of the TTL alone (EXPIRE,
    /// PERSIST, GETEX) of the base written as `v`: it orders after that
    /// base and its other TTL changes, never after another write of the
    /// value, whatever the clocks say (issue 41, defect 15; as a plain
    /// string's `Current::ttl_of`).
    ttl_of: Option<Version>,
    /// The HyperLogLog parts: register-raising writes (PFADD…), per
    /// origin (`crate::hll_parts`).
    hll: HllParts,
    /// `Some(v)` when the base is a change of the TTL alone of a value
    /// held in parts made on the base written as `v` (its `ttl_of` is the
    /// newest write of that value, as for increments, so a floor below
    /// them never drops it): the parts made on `v` still show.
    hll_on: Option<Version>,
}

impl Rare {
    fn is_empty(&self) -> bool {
        self.expire_ms.is_none()
            && self.observed.is_empty()
            && self.tallies.is_empty()
            && self.ttl_of.is_none()
            && self.hll.is_empty()
            && self.hll_on.is_none()
    }
}

/// Error text Redis uses for non-integer values and overflow.
pub const ERR_NOT_INTEGER: &str = "ERR value is not an integer or out of range";
/// Error text for an increment that would overflow.
pub const ERR_OVERFLOW: &str = "ERR increment or decrement would overflow";

static NO_TALLIES: Tallies = Tallies(Vec::new());
static NO_PARTS: HllParts = HllParts(Vec::new());

/// A key with no string part (most collections) reads this one.
impl crate::sparse::Empty for Counter {
    fn empty() -> &'static Counter {
        static EMPTY: Counter = Counter {
            value: None,
            start_ts: 0,
            version: Version::ZERO,
            rare: None,
        };
        &EMPTY
    }
}

impl Counter {
    /// A counter of exactly these parts (decoding).
    pub(crate) fn from_parts(
        value: Option<Elem>,
        expire_ms: Option<u64>,
        start_ts: Ts,
        version: Version,
        observed: Tallies,
        tallies: Tallies,
    ) -> Counter {
        let rare = Rare {
            expire_ms,
            observed,
            tallies,
            ttl_of: None,
            hll: HllParts::default(),
            hll_on: None,
        };
        Counter {
            value,
            start_ts,
            version,
            // Boxed only when it holds something (as `tidy` leaves it).
            rare: (!rare.is_empty()).then(|| Box::new(rare)),
        }
    }

    /// This counter holding these HyperLogLog parts too (decoding).
    pub(crate) fn with_hll(mut self, parts: HllParts) -> Counter {
        if !parts.is_empty() {
            self.rare_mut().hll = parts;
        }
        self
    }

    /// The HyperLogLog parts (`crate::hll_parts`).
    pub fn hll_parts(&self) -> &HllParts {
        self.rare.as_ref().map_or(&NO_PARTS, |r| &r.hll)
    }

    /// This counter's base marked as the TTL change of a value held in
    /// parts made on `on` (decoding).
    pub(crate) fn with_hll_on(mut self, on: Option<Version>) -> Counter {
        if on.is_some() {
            self.rare_mut().hll_on = on;
        }
        self
    }

    /// The base the HyperLogLog parts that show were made on: the base's
    /// value's write, or what its TTL change kept.
    pub fn hll_on(&self) -> Version {
        self.rare
            .as_ref()
            .and_then(|r| r.hll_on)
            .unwrap_or_else(|| self.value_version())
    }

    /// The base's TTL-change mark for parts (`Rare::hll_on`), if any.
    pub fn hll_on_mark(&self) -> Option<Version> {
        self.rare.as_ref().and_then(|r| r.hll_on)
    }

    /// What the HyperLogLog parts made on the base show, if any did.
    fn hll_shown(&self) -> Option<Bytes> {
        let r = self.rare.as_ref()?;
        if r.hll.is_empty() {
            return None;
        }
        r.hll.show(self.hll_on())
    }

    /// The base's value, when it has one (deleted or never written: none).
    pub fn base_value(&self) -> Option<&[u8]> {
        self.value.as_deref()
    }

    /// When the base's writing transaction started.
    pub fn base_start_ts(&self) -> Ts {
        self.start_ts
    }

    /// Who wrote the base, and when.
    pub fn base_version(&self) -> Version {
        self.version
    }

    /// Every origin's running total.
    pub fn tallies(&self) -> &Tallies {
        self.rare.as_ref().map_or(&NO_TALLIES, |r| &r.tallies)
    }

    /// The tallies the base's value already includes.
    pub fn observed(&self) -> &Tallies {
        self.rare.as_ref().map_or(&NO_TALLIES, |r| &r.observed)
    }

    /// Absolute expiry of the value, if it has one.
    pub fn expire_ms(&self) -> Option<u64> {
        self.rare.as_ref().and_then(|r| r.expire_ms)
    }

    /// The base whose TTL alone this base changed, if it is such a
    /// change (see [`Counter::retime`]).
    pub fn ttl_of(&self) -> Option<Version> {
        self.rare.as_ref().and_then(|r| r.ttl_of)
    }

    /// The write of the base's value: the base itself, or the one whose
    /// TTL it changed.
    pub fn value_version(&self) -> Version {
        self.ttl_of().unwrap_or(self.version)
    }

    /// This counter marked a change of the TTL of the base written as
    /// `of` (decoding).
    pub(crate) fn with_ttl_of(mut self, of: Option<Version>) -> Counter {
        if of.is_some() {
            self.rare_mut().ttl_of = of;
        }
        self
    }

    /// True when only the base is set: no expiry, tallies or TTL mark
    /// (what a packed hash field encodes in a few bytes).
    pub(crate) fn is_plain(&self) -> bool {
        self.rare.is_none()
    }

    /// Heap bytes owned beyond the handle (memory accounting).
    pub fn heap_bytes(&self) -> usize {
        self.value.as_ref().map_or(0, Elem::heap_bytes)
            + self.rare.as_ref().map_or(0, |r| {
                std::mem::size_of::<Rare>()
                    + 32 * (r.tallies.len() + r.observed.len())
                    + r.hll.heap_bytes()
            })
    }

    fn rare_mut(&mut self) -> &mut Rare {
        self.rare.get_or_insert_with(Box::default)
    }

    /// Drops the box when it holds nothing.
    fn tidy(&mut self) {
        if self.rare.as_ref().is_some_and(|r| r.is_empty()) {
            self.rare = None;
        }
    }

    /// The merge order of bases: by the write of the base's value first,
    /// then by the base's own write — so a change of the TTL alone loses
    /// to a concurrent write of the value (issue 41, defect 15); the rest
    /// only makes it total.
    #[allow(clippy::type_complexity)]
    fn order(
        &self,
    ) -> (
        Version,
        Version,
        Ts,
        Option<&[u8]>,
        Option<u64>,
        Option<Version>,
        Option<Version>,
    ) {
        (
            self.value_version(),
            self.version,
            self.start_ts,
            self.base_value(),
            self.expire_ms(),
            self.ttl_of(),
            self.hll_on_mark(),
        )
    }

    fn expired(&self, now_ms: u64) -> bool {
        self.expire_ms().is_some_and(|at| at <= now_ms)
    }

    /// What the value gained from increments its base had not seen.
    fn unseen(&self) -> i128 {
        let observed = self.observed();
        self.tallies()
            .iter()
            .map(|(o, t)| i128::from(t.total.wrapping_sub(observed.get(o).total)))
            .sum()
    }

    /// The value at `now_ms`, or `None` when the key holds nothing (deleted
    /// or expired, and no increment since).
    pub fn value(&self, now_ms: u64) -> Option<Bytes> {
        if !self.shows(now_ms) {
            return None;
        }
        if let Some(h) = self.hll_shown() {
            return Some(h);
        }
        let unseen = self.unseen();
        match &self.value {
            // (Shown, so some origin incremented since.)
            None => Some(Bytes::from(unseen.to_string())),
            Some(v) if unseen == 0 => Some(v.to_bytes()),
            Some(v) => match parse_i64(v) {
                Some(n) => Some(Bytes::from((i128::from(n) + unseen).to_string())),
                None => Some(v.to_bytes()),
            },
        }
    }

    /// True when [`Counter::value`] at `now_ms` is `Some`, without
    /// building the value (the collector and TYPE ask this of every key).
    pub fn shows(&self, now_ms: u64) -> bool {
        !self.expired(now_ms)
            && (self.value.is_some() || self.increments_since_base() || self.hll_live())
    }

    /// Some HyperLogLog part was made on the base.
    fn hll_live(&self) -> bool {
        self.rare
            .as_ref()
            .is_some_and(|r| !r.hll.is_empty() && r.hll.any_live(self.hll_on()))
    }

    /// Some origin incremented after the base was written.
    fn increments_since_base(&self) -> bool {
        let observed = self.observed();
        self.tallies()
            .iter()
            .any(|(o, t)| t.version != observed.get(o).version)
    }

    /// Appends [`Counter::value`] at `now_ms` to `out` without a `Bytes`
    /// of its own (a whole hash's reply shares one buffer); false, and
    /// nothing appended, when it holds nothing.
    pub fn value_into(&self, now_ms: u64, out: &mut bytes::BytesMut) -> bool {
        if !self.shows(now_ms) {
            return false;
        }
        if let Some(h) = self.hll_shown() {
            out.extend_from_slice(&h);
            return true;
        }
        let unseen = self.unseen();
        match &self.value {
            Some(v) if unseen == 0 => out.extend_from_slice(v),
            Some(v) => match parse_i64(v) {
                Some(n) => out.extend_from_slice((i128::from(n) + unseen).to_string().as_bytes()),
                None => out.extend_from_slice(v),
            },
            None => out.extend_from_slice(unseen.to_string().as_bytes()),
        }
        true
    }

    /// The newest write this value holds.
    pub fn newest(&self) -> Version {
        self.version
            .max(self.tallies().newest())
            .max(self.hll_parts().newest())
    }

    /// The newest write of the value itself — its base's value or an
    /// increment, not a change of the TTL alone: what a write of another
    /// type is ordered against (`KeyState`'s change-of-type rule), so a
    /// TTL change never beats a concurrent write of the key, and
    /// [`Counter::drop_through`] (which judges the base by the same
    /// version) commutes with merging.
    pub fn written(&self) -> Version {
        self.value_version()
            .max(self.tallies().newest())
            .max(self.hll_parts().newest())
    }

    /// The delta of writing the whole value (`None` deletes): a new base
    /// that has seen every tally.
    pub fn set(
        &self,
        value: Option<Bytes>,
        expire_ms: Option<u64>,
        start_ts: Ts,
        version: Version,
    ) -> Counter {
        self.set_elem(value.map(Elem::from), expire_ms, start_ts, version)
    }

    /// [`Counter::set`] with the value already an [`Elem`] (a hash
    /// field's value, copied once from the request).
    pub fn set_elem(
        &self,
        value: Option<Elem>,
        expire_ms: Option<u64>,
        start_ts: Ts,
        version: Version,
    ) -> Counter {
        let tallies = self.tallies().clone();
        Counter::from_parts(
            value,
            expire_ms,
            start_ts,
            version,
            tallies.clone(),
            tallies,
        )
    }

    /// The delta of changing the TTL alone (EXPIRE, PERSIST, GETEX) to
    /// `expire_ms`: a base of the same value and the same observed
    /// tallies, marked as a change of the base it saw. It keeps every
    /// increment (seen or concurrent) and loses to a concurrent write of
    /// the value, whatever the clocks say — it never brings an older
    /// value back over a newer one (issue 41, defect 15).
    pub fn retime(&self, expire_ms: Option<u64>, start_ts: Ts, version: Version) -> Counter {
        let of = self.ttl_target();
        // Parts made on the base keep showing under its TTL change.
        let on = self.hll_on();
        let keep = (self.hll_live() && on != of).then_some(on);
        Counter::from_parts(
            self.value.clone(),
            expire_ms,
            start_ts,
            version,
            self.observed().clone(),
            self.tallies().clone(),
        )
        .with_ttl_of(Some(of))
        .with_hll_on(keep)
    }

    /// The write a TTL change applies to: the base's value — or, when the
    /// base holds none (the value is increments alone, `INCR` of a
    /// missing key), the newest write of the value, so that a floor below
    /// those increments (a DEL of another type before them) never drops
    /// it; a concurrent SET then wins unless it missed one of them.
    pub fn ttl_target(&self) -> Version {
        if self.value.is_some() {
            self.value_version()
        } else {
            self.written()
        }
    }

    /// The delta of `INCRBY by` at `now_ms` and the new value, or Redis's
    /// error: the value must be an integer and stay within 64 bits.
    pub fn incr_by(
        &self,
        by: i64,
        start_ts: Ts,
        version: Version,
        now_ms: u64,
    ) -> Result<(i64, Counter), &'static str> {
        let current = self.value(now_ms);
        let n = match &current {
            None => 0,
            Some(v) => parse_i64(v).ok_or(ERR_NOT_INTEGER)?,
        };
        let new = n.checked_add(by).ok_or(ERR_OVERFLOW)?;
        // Expired: the increment starts from zero, so the base is reset
        // to "nothing, having seen every tally" first (as a DEL at expiry
        // would have). Deleted or never written: the base already says
        // nothing, and a reset would only compete with a concurrent SET.
        let mut delta = if current.is_none() && self.expired(now_ms) {
            self.set(None, None, start_ts, version)
        } else {
            Counter::default()
        };
        let mine = self.tallies().get(version.origin);
        delta.rare_mut().tallies.offer(
            version.origin,
            Tally {
                total: mine.total.wrapping_add(by),
                version,
            },
        );
        Ok((new, delta))
    }

    /// The delta of a write that only raises a HyperLogLog's registers
    /// (`PFADD`, `PFMERGE`, the rewrites of `PFCOUNT`/`PFDEBUG`) and
    /// leaves `bytes`, at `now_ms`: this origin's part, made on the base
    /// it read, so it joins the parts other regions make concurrently
    /// (`crate::hll_parts`). An expired value is reset first, as
    /// [`Counter::incr_by`] resets it.
    pub fn hll_write(&self, bytes: Bytes, start_ts: Ts, version: Version, now_ms: u64) -> Counter {
        let expire = if self.expired(now_ms) {
            None
        } else {
            self.expire_ms()
        };
        self.hll_write_ttl(bytes, expire, start_ts, version, now_ms)
    }

    /// [`Counter::hll_write`] that also leaves the TTL at `expire_ms` (a
    /// transaction's `PFADD` and `EXPIRE` of one key): a change of the
    /// TTL alone besides the part, so it still undoes no concurrent
    /// `PFADD` elsewhere.
    pub fn hll_write_ttl(
        &self,
        bytes: Bytes,
        expire_ms: Option<u64>,
        start_ts: Ts,
        version: Version,
        now_ms: u64,
    ) -> Counter {
        let (mut delta, on) = if self.expired(now_ms) {
            (self.set(None, expire_ms, start_ts, version), version)
        } else if expire_ms != self.expire_ms() {
            let on = self.hll_on();
            let mut d = self.retime(expire_ms, start_ts, version);
            let r = d.rare_mut();
            r.hll_on = (r.ttl_of != Some(on)).then_some(on);
            (d, on)
        } else {
            (Counter::default(), self.hll_on())
        };
        delta
            .rare_mut()
            .hll
            .offer(version.origin, Part { on, version, bytes });
        delta
    }
}

impl Counter {
    /// Drops everything written at or below `floor` (a write of another
    /// type replaced the key then): the base if it is that old, the
    /// tallies last changed then, and what the base observed of them —
    /// each a filter on its own version, so pruning and merging commute.
    /// An origin that keeps incrementing without having seen `floor` adds
    /// its whole running total once it is newer (a concurrent change of
    /// type: `docs/datatypes.md`).
    pub fn drop_through(&mut self, floor: Version) -> bool {
        // Nothing at or below the floor and nothing to tidy: unchanged.
        // The common case (every merge trims the incoming delta, and a
        // key whose type never changed has floor ZERO), answered without
        // the copy of the value the general path compares against.
        let above = |t: &Tallies| t.0.iter().all(|(_, t)| t.version > floor);
        if self.value_version() > floor
            && self.rare.as_ref().is_none_or(|r| {
                !r.is_empty()
                    && above(&r.tallies)
                    && above(&r.observed)
                    && r.hll.iter().all(|(_, p)| p.version > floor)
            })
        {
            return false;
        }
        let before = self.clone();
        // A TTL change carries the value of the base it changed: judged
        // by that base's write.
        if self.value_version() <= floor {
            let (tallies, hll) = self
                .rare
                .take()
                .map(|r| (r.tallies, r.hll))
                .unwrap_or_default();
            *self = Counter::default();
            let r = self.rare_mut();
            r.tallies = tallies;
            r.hll = hll;
        }
        if let Some(r) = self.rare.as_mut() {
            r.tallies.0.retain(|(_, t)| t.version > floor);
            r.observed.0.retain(|(_, t)| t.version > floor);
            r.hll.retain_not(|p| p.version <= floor);
        }
        self.tidy();
        *self != before
    }
}

impl Crdt for Counter {
    fn merge(&mut self, other: Counter) -> bool {
        let mut changed = false;
        let order = other.order().cmp(&self.order());
        let theirs_win = order == std::cmp::Ordering::Greater;
        // The same base told twice: one telling may know less of what it
        // saw (a transaction record's plain value saw no increments; the
        // shard's delta of the same write did). What the write saw is
        // what either telling saw — a join, so merges stay
        // order-independent and an increment is never counted again.
        let same_base = order == std::cmp::Ordering::Equal;
        let Counter {
            value,
            start_ts,
            version,
            rare,
        } = other;
        let (expire_ms, observed, tallies, ttl_of, hll, hll_on) = match rare {
            Some(r) => (
                r.expire_ms,
                r.observed,
                r.tallies,
                r.ttl_of,
                r.hll,
                r.hll_on,
            ),
            None => (
                None,
                Tallies::default(),
                Tallies::default(),
                None,
                HllParts::default(),
                None,
            ),
        };
        if !tallies.is_empty() {
            changed |= self.rare_mut().tallies.merge(tallies);
        }
        if !hll.is_empty() {
            changed |= self.rare_mut().hll.merge(hll);
        }
        if theirs_win {
            self.value = value;
            self.start_ts = start_ts;
            self.version = version;
            let r = self.rare_mut();
            r.expire_ms = expire_ms;
            r.observed = observed;
            r.ttl_of = ttl_of;
            r.hll_on = hll_on;
            changed = true;
        } else if same_base && !observed.is_empty() {
            changed |= self.rare_mut().observed.merge(observed);
        }
        self.tidy();
        changed
    }
}

/// Redis's strict integer syntax (`string2ll`): optional `-`, no `+`, no
/// leading zeros, no spaces, at most 20 characters, within 64 bits.
pub fn parse_i64(v: &[u8]) -> Option<i64> {
    if v.is_empty() || v.len() > 20 {
        return None;
    }
    let digits = v.strip_prefix(b"-").unwrap_or(v);
    if digits.is_empty()
        || !digits.iter().all(u8::is_ascii_digit)
        || (digits[0] == b'0' && (digits.len() > 1 || v[0] == b'-'))
    {
        return None;
    }
    std::str::from_utf8(v).ok()?.parse().ok()
}

#[cfg(test)]
#[path = "counter_tests.rs"]
mod tests;

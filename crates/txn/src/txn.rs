//! Interactive transactions: the paper's write buffer (algorithm 1), read
//! buffer with read-set validation (algorithm 2) and lattice timestamp check
//! (algorithm 3), with the multi-shard commit made atomic by two phases.
//!
//! | level | reads                          | validated at commit                       |
//! |-------|--------------------------------|-------------------------------------------|
//! | RC    | latest committed, every time   | only keys one command read and wrote (INCR, APPEND…) |
//! | RR    | first read cached (read buffer)| every key read still has the read version |
//! | SI    | as RR                          | as RR, and every key written was last committed before `start_ts` |
//!
//! What each level prevents, as measured by the isolation checker, is in
//! `docs/transactions.md`.

use std::collections::HashMap;
use std::str::FromStr;

use bytes::Bytes;
use elsa_lattice::{KeyState, Ts, Version};
use elsa_shard::notify::Event;
use elsa_shard::ops::{absent_for_new, raise_if_created, Value};
use elsa_shard::{
    unix_ms, AckLevel, Check, CommitRequest, Expect, HashedKey, HoldMode, KeyOp, KeyView, Op,
    OpReply, PrepareRequest, ReadState, Refusal, SetCond, SetReply, ShardMsg, Write,
};

use crate::atomic::HoldGuard;
use crate::router::{backoff, Coordinator, Retry, ShardId};
use crate::TxnError;

/// A transaction's isolation level.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Isolation {
    /// Read committed.
    ReadCommitted,
    /// Repeatable read.
    RepeatableRead,
    /// Snapshot isolation (the default, as in the paper).
    #[default]
    Snapshot,
}

impl FromStr for Isolation {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s.to_ascii_uppercase().replace(['-', '_', ' '], "").as_str() {
            "RC" | "READCOMMITTED" => Ok(Isolation::ReadCommitted),
            "RR" | "REPEATABLEREAD" => Ok(Isolation::RepeatableRead),
            "SI" | "SNAPSHOT" | "SNAPSHOTISOLATION" => Ok(Isolation::Snapshot),
            _ => Err(format!("unknown isolation level '{s}' (use RC, RR or SI)")),
        }
    }
}

impl Isolation {
    /// The short name: RC, RR or SI.
    pub fn name(self) -> &'static str {
        match self {
            Isolation::ReadCommitted => "RC",
            Isolation::RepeatableRead => "RR",
            Isolation::Snapshot => "SI",
        }
    }
}

/// An open interactive transaction (one per connection at most).
pub struct Txn {
    /// Its isolation level.
    pub isolation: Isolation,
    /// When it began (HLC).
    pub start_ts: Ts,
    /// How far its commit travels before COMMIT answers (and what its
    /// reads may reveal).
    pub ack: AckLevel,
    /// Per key written: its hash, its value now, and its typed state as
    /// first read (what a multi-shard commit's delta starts from).
    writes: HashMap<Bytes, Buffered>,
    /// RR/SI: per key read, its hash, its state as read, and what COMMIT
    /// checks of it — decided at the read, when the key's TTL (a typed
    /// key's too) is still known: at COMMIT an expired typed key shows no
    /// TTL, and validating its version alone let it commit.
    reads: HashMap<Bytes, (u64, ReadState, Expect)>,
    /// RC only: versions of keys a single command read and then wrote
    /// (INCR, APPEND, SET NX…). Validated at commit so such commands never
    /// lose updates, even at RC, as Redis users expect of them.
    rmw: HashMap<Bytes, (u64, Expect)>,
    /// Stamps its typed writes took so far (each a later pending version:
    /// see `elsa_shard::ops::pending_stamp`).
    stamps: u64,
    /// Keeps tombstones it may validate against from being collected.
    _open: crate::router::OpenGuard,
    /// SI on a node that keeps history: the snapshot its reads are served
    /// from until it writes (see `elsa_shard::history`).
    snapshot: Option<elsa_shard::history::SnapshotGuard>,
    /// Every read so far came from the snapshot (none fell back to the
    /// latest state): with no writes, COMMIT has nothing to validate.
    from_snapshot: bool,
    /// The first of the TTLs the keys it read live had then, and the key:
    /// a read-only snapshot transaction still fails if it passed.
    first_expiry: Option<(u64, Bytes)>,
    /// The databases whose whole key set it read (KEYS, SCAN, DBSIZE,
    /// RANDOMKEY), one bit each: RR/SI validate them at commit on every
    /// shard of this node (`elsa_shard`'s `shard/keyset.rs`). Atomic so
    /// that a read taking the transaction shared can note it.
    keysets: [std::sync::atomic::AtomicU64; 4],
    /// Keyspace events its commands raised, sent once it commits.
    events: Vec<Event>,
    /// `*` stream IDs its commands chose: pinned until it commits (or is
    /// dropped), so no gossip frame promises the other regions past them.
    pins: Vec<elsa_shard::ops::streams::id_floor::IdPin>,
}

/// A key the transaction wrote.
struct Buffered {
    hash: u64,
    /// What it shows now.
    value: Option<Value>,
    /// Its typed state as first read (a multi-shard commit's delta starts
    /// from it: `Write::settle`).
    read: Option<std::sync::Arc<KeyState>>,
    /// What was first read when it held no typed state (a HyperLogLog
    /// written there settles from it: `elsa_shard::write_base`).
    plain: Option<elsa_shard::PlainRead>,
    /// The elements the deltas merged into `read` named, while only
    /// deltas were (`None` once a command wrote it whole): the commit
    /// compares those alone (`elsa_lattice::touched`).
    touched: Option<elsa_lattice::Touched>,
}

/// The view one op gets inside a transaction: each key it touches (its own,
/// and RENAME's or COPY's destination) with its base state (from the write
/// buffer, read buffer or the shard) and a slot for its new state.
struct TxnView {
    keys: Vec<ViewKey>,
    now_ms: u64,
    /// Stamps handed out so far in this transaction.
    stamps: u64,
    /// The keyspace-event classes on (`Notifier::active`), and the events
    /// the op raised: the transaction keeps them until it commits.
    notify: u32,
    events: Vec<Event>,
    /// `*` stream IDs it chose, pinned until the transaction's writes are
    /// installed (`elsa_shard::ops::streams::id_floor`).
    pins: Vec<elsa_shard::ops::streams::id_floor::IdPin>,
}

struct ViewKey {
    key: Bytes,
    hash: u64,
    base: Option<Value>,
    /// The write of `base` when it is a plain value read from the store
    /// (see `KeyView::value_version`).
    base_version: Option<Version>,
    /// The read, when the key held no typed state (see [`Buffered`]).
    plain: Option<elsa_shard::PlainRead>,
    /// `base` was taken out of the write buffer (which gets it back, or
    /// the write): the op holds the only copy, so a typed write merges in
    /// place ([`elsa_shard::ops::merge_into`]).
    owned: bool,
    write: Option<Option<Value>>,
    /// What the op's deltas named (see [`Buffered::touched`]).
    touched: Option<elsa_lattice::Touched>,
}

impl ViewKey {
    fn shown(&self) -> Option<&Value> {
        match &self.write {
            Some(w) => w.as_ref(),
            None => self.base.as_ref(),
        }
    }
}

impl KeyView for TxnView {
    fn lookup(&mut self, key: &[u8]) -> Option<Value> {
        let now = self.now_ms;
        let k = self.keys.iter().find(|k| k.key == key)?;
        match k.shown()? {
            Value::Str(c) if c.expire_ms.is_some_and(|at| at <= now) => None,
            v => Some(v.clone()),
        }
    }

    fn store(&mut self, key: &[u8], value: Option<Value>) {
        let absent = absent_for_new(self, key);
        // An op writes only keys it declared (its own, `other_keys`).
        if let Some(k) = self.keys.iter_mut().find(|k| k.key == key) {
            k.write = Some(value);
            k.touched = None;
        }
        raise_if_created(self, key, absent);
    }

    fn notifies(&self, class: u32) -> bool {
        self.notify & class != 0
    }

    fn notify(&mut self, class: u32, name: &'static str, key: &[u8]) {
        if self.notify & class != 0 {
            self.events.push(Event {
                class,
                name,
                key: Bytes::copy_from_slice(key),
            });
        }
    }

    fn merge(&mut self, key: &[u8], delta: KeyState) {
        let absent = absent_for_new(self, key);
        if let Some(k) = self.keys.iter_mut().find(|k| k.key == key) {
            let mut value = match k.write.take() {
                Some(w) => w,
                None if k.owned => k.base.take(),
                None => k.base.clone(),
            };
            if k.touched.as_mut().is_some_and(|t| !t.note(&delta)) {
                k.touched = None;
            }
            elsa_shard::ops::merge_into(&mut value, delta);
            k.write = Some(value);
        }
        raise_if_created(self, key, absent);
    }

    fn stamp(&mut self) -> (Ts, Version) {
        self.stamps += 1;
        elsa_shard::ops::pending_stamp(self.stamps)
    }

    fn now_ms(&self) -> u64 {
        self.now_ms
    }

    fn id_floor_ms(&mut self) -> u64 {
        let (ms, pin) = elsa_shard::ops::streams::id_floor::pin(self.now_ms);
        self.pins.push(pin);
        ms
    }

    fn value_version(&mut self, key: &[u8]) -> Option<Version> {
        let k = self.keys.iter().find(|k| k.key == key)?;
        match &k.write {
            // This transaction wrote it: a TTL change folds into that
            // write (or stays the change of the value it already named).
            Some(Some(Value::Str(c))) => c.ttl_of,
            Some(_) => None,
            None if k.owned => match &k.base {
                Some(Value::Str(c)) => c.ttl_of,
                _ => None,
            },
            None => k.base_version,
        }
    }
}

/// True when an op's answer and effect do not depend on the key's current
/// state (a plain SET): it needs no read, so it adds nothing to the read set.
fn is_blind(op: &Op) -> bool {
    matches!(
        op,
        Op::Set {
            cond: SetCond::Always,
            reply: SetReply::Ok,
            expiry,
            ..
        } if *expiry != elsa_shard::Expiry::Keep
    )
}

impl Txn {
    /// Begins a transaction at `isolation`.
    pub fn begin(coord: &Coordinator, isolation: Isolation, ack: AckLevel) -> Txn {
        let snapshot = match (&coord.node.snapshots, isolation) {
            (Some(s), Isolation::Snapshot) => Some(s.open_now(&coord.node.hlc)),
            _ => None,
        };
        let start_ts = match &snapshot {
            Some(s) => s.ts(),
            None => coord.node.hlc.now(),
        };
        Txn {
            snapshot,
            from_snapshot: true,
            first_expiry: None,
            _open: coord.node.open_reads.open(start_ts),
            isolation,
            start_ts,
            ack,
            writes: HashMap::new(),
            reads: HashMap::new(),
            rmw: HashMap::new(),
            stamps: 0,
            keysets: Default::default(),
            events: Vec::new(),
            pins: Vec::new(),
        }
    }

    /// Notes a whole-key-space read of database `db` (KEYS, SCAN, DBSIZE,
    /// RANDOMKEY): at RR and SI, COMMIT fails with a conflict if a key of
    /// `db` appeared or went on this node since the transaction began, as
    /// one that read a key by name fails if it changed.
    pub fn read_keyset(&self, db: u8) {
        self.keysets[db as usize / 64]
            .fetch_or(1 << (db % 64), std::sync::atomic::Ordering::Relaxed);
    }

    /// The databases whose key set it read.
    fn keyset_dbs(&self) -> Vec<u8> {
        use std::sync::atomic::Ordering::Relaxed;
        if self.keysets.iter().all(|w| w.load(Relaxed) == 0) {
            return Vec::new(); // the usual case, at every commit
        }
        (0..=255u8)
            .filter(|&db| {
                self.keysets[db as usize / 64].load(std::sync::atomic::Ordering::Relaxed)
                    & (1 << (db % 64))
                    != 0
            })
            .collect()
    }

    /// True when an op on `key` needs no shard: the transaction wrote it,
    /// or read it at RR/SI (its read buffer answers).
    pub fn buffered(&self, key: &[u8]) -> bool {
        self.writes.contains_key(key) || self.reads.contains_key(key)
    }

    /// True when the transaction has buffered writes.
    pub fn has_writes(&self) -> bool {
        !self.writes.is_empty()
    }

    /// The keys it wrote, each with its hash and the type it shows at
    /// `now_ms` as Redis's TYPE names it (`"none"` for a delete or a lapsed
    /// TTL): what a whole-key-space read inside it (KEYS, SCAN, DBSIZE,
    /// RANDOMKEY) lays over the shards' answer.
    pub fn written(&self, now_ms: u64) -> impl Iterator<Item = (&Bytes, u64, &'static str)> {
        self.writes.iter().map(move |(key, w)| {
            let kind = match &w.value {
                None => "none",
                Some(Value::Str(c)) if c.expire_ms.is_some_and(|at| at <= now_ms) => "none",
                Some(Value::Str(_)) => "string",
                Some(Value::Typed(s)) => s.kind(now_ms).name(),
            };
            (key, w.hash, kind)
        })
    }

    /// Runs one op inside the transaction: reads see its own writes, then its
    /// read buffer (RR/SI), then the shard; writes go to the write buffer.
    pub async fn apply(&mut self, coord: &Coordinator, kop: KeyOp) -> Result<OpReply, TxnError> {
        self.apply_inner(coord, kop, false).await
    }

    /// [`Txn::apply`] for a read a later write of the same command depends
    /// on (MSETNX's existence checks): validated at commit even at RC, as
    /// a command that reads and writes one key is.
    pub async fn apply_validated(
        &mut self,
        coord: &Coordinator,
        kop: KeyOp,
    ) -> Result<OpReply, TxnError> {
        self.apply_inner(coord, kop, true).await
    }

    async fn apply_inner(
        &mut self,
        coord: &Coordinator,
        kop: KeyOp,
        validate: bool,
    ) -> Result<OpReply, TxnError> {
        let notify = coord.node.notifier.active();
        // (A `new` event needs to know whether the key was there.)
        let blind = is_blind(&kop.op) && notify & elsa_shard::notify::NEW == 0;
        let others = kop
            .op
            .other_keys()
            .iter()
            .map(|k| (k.clone(), coord.hash(k)));
        let keys = std::iter::once((kop.key.clone(), kop.hash)).chain(others);
        let mut view = TxnView {
            keys: Vec::with_capacity(1 + kop.op.other_keys().len()),
            now_ms: 0,
            stamps: self.stamps,
            notify,
            events: Vec::new(),
            pins: Vec::new(),
        };
        // RC: the versions this op fetched, validated at commit if it
        // writes (its writes depend on them).
        let mut fetched = Vec::new();
        for (key, hash) in keys {
            if view.keys.iter().any(|k| k.key == key) {
                continue; // RENAME k k
            }
            let owned = self.writes.contains_key(&key);
            // A buffered key's value is taken below, once nothing can fail.
            let mut base_version = None;
            let mut plain = None;
            let base = if owned || blind {
                None
            } else if let Some((_, rs, _)) = self.reads.get(&key) {
                base_version = rs.value_version();
                plain = elsa_shard::PlainRead::of(rs);
                rs.value()
            } else {
                let hk = HashedKey {
                    key: key.clone(),
                    hash,
                };
                // Until it writes, an SI transaction reads its snapshot:
                // if it never writes, those reads are all it did, and a
                // snapshot needs no validation. Once it has written, it
                // validates every read at COMMIT anyway, and reads the
                // latest state, as before.
                let at =
                    (self.snapshot.is_some() && self.writes.is_empty()).then_some(self.start_ts);
                let rs = read(coord, hk, self.ack, at).await?;
                self.from_snapshot &= at.is_none() || rs.snapshot;
                if let Some(t) = rs.expires() {
                    if self
                        .first_expiry
                        .as_ref()
                        .is_none_or(|(first, _)| t < *first)
                    {
                        self.first_expiry = Some((t, key.clone()));
                    }
                }
                let current = rs.value();
                base_version = rs.value_version();
                plain = elsa_shard::PlainRead::of(&rs);
                if self.isolation != Isolation::ReadCommitted {
                    let expect = Expect::unchanged(&rs);
                    self.reads.insert(key.clone(), (hash, rs, expect));
                } else {
                    fetched.push((key.clone(), hash, Expect::unchanged(&rs)));
                }
                current
            };
            view.keys.push(ViewKey {
                key,
                hash,
                base,
                base_version,
                plain,
                owned,
                write: None,
                touched: Some(elsa_lattice::Touched::default()),
            });
        }
        for k in view.keys.iter_mut().filter(|k| k.owned) {
            k.base = self.writes.get_mut(&k.key).and_then(|w| w.value.take());
        }
        view.now_ms = unix_ms();
        let reply = kop.op.apply(&kop.key, &mut view);
        self.stamps = view.stamps;
        self.events.append(&mut view.events);
        self.pins.append(&mut view.pins);
        if validate || view.keys.iter().any(|k| k.write.is_some()) {
            for (key, hash, expect) in fetched {
                self.rmw.entry(key).or_insert((hash, expect));
            }
        }
        for k in view.keys {
            if k.write.is_none() && k.owned {
                if let Some(w) = self.writes.get_mut(&k.key) {
                    w.value = k.base;
                }
                continue;
            }
            if let Some(state) = k.write {
                match self.writes.get_mut(&k.key) {
                    Some(w) => {
                        w.value = state;
                        w.touched = match (w.touched.take(), k.touched) {
                            (Some(mut mine), Some(now)) => mine.absorb(now).then_some(mine),
                            _ => None,
                        };
                    }
                    None => {
                        let read = match k.base {
                            Some(Value::Typed(s)) => Some(s),
                            _ => None,
                        };
                        let hash = k.hash;
                        let value = state;
                        let plain = k.plain;
                        let b = Buffered {
                            hash,
                            value,
                            read,
                            plain,
                            touched: k.touched,
                        };
                        self.writes.insert(k.key, b);
                    }
                }
            }
        }
        Ok(reply)
    }

    /// How many keyspace events its commands raised so far: a mark for
    /// [`Txn::retell_events`].
    pub fn events_len(&self) -> usize {
        self.events.len()
    }

    /// Replaces the keyspace events raised since `mark` with what `f`
    /// makes of them: a command made of others (SORT … STORE, RESTORE)
    /// that Redis tells as one.
    pub fn retell_events(&mut self, mark: usize, f: impl FnOnce(Vec<Event>) -> Vec<Event>) {
        let told = self.events.split_off(mark.min(self.events.len()));
        let mut retold = f(told);
        self.events.append(&mut retold);
    }

    /// Commits: validates per the isolation level and installs all writes
    /// atomically; answers the commit timestamp.
    pub async fn commit(mut self, coord: &Coordinator) -> Result<Ts, TxnError> {
        let written = coord.keys_to_replicate(
            self.writes
                .iter()
                .map(|(key, w)| KeyOp {
                    key: key.clone(),
                    hash: w.hash,
                    op: Op::Del,
                })
                .collect::<Vec<_>>()
                .iter(),
            self.ack,
        );
        let events = std::mem::take(&mut self.events);
        let ts = self.commit_here(coord).await?;
        // Committed: its keyspace events go now, in the order raised
        // (before the wait for the region's replicas, as the lone
        // commands' go when the shard applies them).
        for e in &events {
            coord.node.notifier.raise(e);
        }
        coord.replicate(written).await?;
        Ok(ts)
    }

    async fn commit_here(self, coord: &Coordinator) -> Result<Ts, TxnError> {
        let validate_reads = self.isolation != Isolation::ReadCommitted;
        let keysets = if validate_reads {
            self.keyset_dbs()
        } else {
            Vec::new()
        };
        if self.writes.is_empty()
            && self.snapshot.is_some()
            && self.from_snapshot
            && keysets.is_empty()
        {
            // Read only, and only from its snapshot: it saw the state as of
            // its start, so it takes effect there and no later commit can
            // conflict with it. Expiry is the clock's, not a version: a key
            // read live that has expired since still counts as changed,
            // as everywhere else (Redis's rule for WATCH).
            return match self.first_expiry {
                Some((at, key)) if at <= unix_ms() => Err(TxnError::Conflict(key)),
                _ => Ok(self.start_ts),
            };
        }
        if self.writes.is_empty()
            && keysets.is_empty()
            && (!validate_reads || self.reads.is_empty())
        {
            return Ok(coord.node.hlc.now());
        }
        let mut per_shard: HashMap<ShardId, ShardPart> = HashMap::new();
        // Each key's hold, by position in its part (a key both read and
        // written is held once, for writing) — a map, so commit work stays
        // linear in the transaction's size.
        let mut held: HashMap<Bytes, (ShardId, usize)> = HashMap::new();
        let expected = self
            .reads
            .into_iter()
            .map(|(key, (hash, _, expect))| (key, (hash, expect)))
            .chain(self.rmw);
        for (key, (hash, expect)) in expected {
            let key = HashedKey { key, hash };
            let shard = coord.shard_of(hash);
            let part = per_shard.entry(shard).or_default();
            if !held.contains_key(&key.key) {
                held.insert(key.key.clone(), (shard, part.holds.len()));
                part.holds.push((key.clone(), HoldMode::Read));
            }
            part.checks.push(Check { key, expect });
        }
        for (
            key,
            Buffered {
                hash,
                value: state,
                read,
                plain,
                touched,
            },
        ) in self.writes
        {
            let key = HashedKey { key, hash };
            let shard = coord.shard_of(hash);
            let part = per_shard.entry(shard).or_default();
            if self.isolation == Isolation::Snapshot {
                part.checks.push(Check {
                    key: key.clone(),
                    expect: Expect::CommittedBefore(self.start_ts),
                });
            }
            match held.get(&key.key) {
                Some(&(s, i)) if s == shard => part.holds[i].1 = HoldMode::Write,
                _ => part.holds.push((key.clone(), HoldMode::Write)),
            }
            let base = elsa_shard::write_base(&state, read, plain.as_ref());
            part.writes.push(Write {
                touched: touched.map(std::sync::Arc::new),
                ..Write::new(key, state, base)
            });
        }
        if !keysets.is_empty() {
            // The key set it read: checked, under a read hold, on every
            // shard of this node (whose keys KEYS and the others list).
            let key = keyset_key();
            for i in 0..coord.node.shards() {
                let part = per_shard.entry(coord.node.local(i)).or_default();
                part.holds.push((key.clone(), HoldMode::Read));
                for &db in &keysets {
                    part.checks.push(Check {
                        key: key.clone(),
                        expect: Expect::KeysetBefore(db, self.start_ts),
                    });
                }
            }
        }
        if per_shard.len() == 1 {
            let Some((shard, part)) = per_shard.into_iter().next() else {
                return Ok(coord.node.hlc.now());
            };
            let req = CommitRequest {
                checks: part.checks,
                writes: part.writes,
                start_ts: self.start_ts,
                // A held key is waited for: a reader's hold changes
                // nothing this commit validates, and a writer's shows as
                // the conflict it is once it installed.
                wait: true,
            };
            let ack = self.ack;
            return coord
                .ask(shard, |reply| ShardMsg::Commit { req, ack, reply })
                .await?
                .map_err(TxnError::from);
        }
        commit_across(coord, per_shard, self.start_ts, self.ack).await
    }
}

#[derive(Default)]
struct ShardPart {
    holds: Vec<(HashedKey, HoldMode)>,
    checks: Vec<Check>,
    writes: Vec<Write>,
}

/// Two-phase commit across shards: prepare (hold + validate) everywhere; if
/// all agree, log the decision, pick the commit timestamp and install;
/// otherwise release. A prepare refused only as Busy (a snapshot freezes
/// multi-shard commits for its duration) or a held key is retried, not
/// reported as a conflict: a reader's hold changes nothing the commit
/// validates. Retries prepare shard by shard in order, each waiting for
/// held keys (`elsa_shard`'s waiting commits).
async fn commit_across(
    coord: &Coordinator,
    parts: HashMap<ShardId, ShardPart>,
    start_ts: Ts,
    ack: AckLevel,
) -> Result<Ts, TxnError> {
    let mut attempt = 0;
    let mut parts = parts;
    loop {
        match try_commit_across(coord, &parts, start_ts, ack, attempt > 0).await {
            Err(TxnError::Conflict(key)) if key.is_empty() && attempt < 1000 => {
                backoff(attempt.min(40)).await;
                attempt += 1;
                // Busy may also mean "not the primary (any more)".
                parts = regroup(coord, parts);
            }
            other => return other,
        }
    }
}

/// The hold key of a shard's key set, as a key to send.
fn keyset_key() -> HashedKey {
    HashedKey {
        key: Bytes::from_static(elsa_shard::KEYSET),
        hash: 0,
    }
}

/// The same parts, each key sent to the shard the current view routes it
/// to (a key set's check and hold stay on their shard: it is the shard's).
fn regroup(coord: &Coordinator, parts: HashMap<ShardId, ShardPart>) -> HashMap<ShardId, ShardPart> {
    let mut out: HashMap<ShardId, ShardPart> = HashMap::new();
    let route = |shard: ShardId, key: &HashedKey| {
        if &key.key[..] == elsa_shard::KEYSET {
            shard
        } else {
            coord.shard_of(key.hash)
        }
    };
    for (shard, part) in parts {
        for h in part.holds {
            out.entry(route(shard, &h.0)).or_default().holds.push(h);
        }
        for c in part.checks {
            out.entry(route(shard, &c.key)).or_default().checks.push(c);
        }
        for w in part.writes {
            out.entry(coord.shard_of(w.key.hash))
                .or_default()
                .writes
                .push(w);
        }
    }
    out
}

async fn try_commit_across(
    coord: &Coordinator,
    parts: &HashMap<ShardId, ShardPart>,
    start_ts: Ts,
    ack: AckLevel,
    wait: bool,
) -> Result<Ts, TxnError> {
    let txn = coord.node.next_txn();
    let mut guard = HoldGuard::new(coord, txn);
    let mut shards: Vec<&ShardId> = parts.keys().collect();
    if wait {
        // Waits ordered by shard cannot deadlock (`elsa_shard`'s waiting).
        shards.sort_unstable();
    }
    let mut waits = Vec::with_capacity(parts.len());
    let mut refused: Option<Refusal> = None;
    for shard in shards {
        let part = &parts[shard];
        let req = PrepareRequest {
            txn,
            checks: part.checks.clone(),
            holds: part.holds.clone(),
            want_states: false,
            // A held key answers Busy (retried, waiting), unless a writer
            // holds a key it checks: then, as a failed check, Conflict.
            retry_on_busy: false,
            wait,
        };
        guard.add(*shard);
        let rx = coord.start(*shard, |reply| ShardMsg::Prepare { req, ack, reply })?;
        if wait {
            if let Err(refusal) = rx.await.map_err(|_| TxnError::ShardGone)? {
                refused = Some(refusal);
                break; // the guard releases what the shards before held
            }
        } else {
            waits.push(rx);
        }
    }
    for rx in waits {
        if let Err(refusal) = rx.await.map_err(|_| TxnError::ShardGone)? {
            // A real conflict outranks Busy: report the key.
            if refused.as_ref().is_none_or(|r| *r == Refusal::Busy) {
                refused = Some(refusal);
            }
        }
    }
    if let Some(refusal) = refused {
        return Err(TxnError::from(refusal)); // guard releases every hold
    }
    coord
        .finish_commit(crate::commit::Prepared {
            txn,
            start_ts,
            holds: parts.iter().map(|(s, p)| (*s, p.holds.clone())).collect(),
            writes: parts.iter().map(|(s, p)| (*s, p.writes.clone())).collect(),
            ack,
            guard,
        })
        .await
}

/// Reads a key's state, waiting out a commit that holds it for writing (a
/// few microseconds), so a read never sees half of a multi-shard commit.
/// With `at`, as of that snapshot when the key's shard still knows it
/// (`ReadState::snapshot` says whether it did).
pub async fn read(
    coord: &Coordinator,
    key: HashedKey,
    ack: AckLevel,
    at: Option<Ts>,
) -> Result<ReadState, TxnError> {
    let mut retry = Retry::new();
    loop {
        // Routed again on every attempt: a shard that is no longer the
        // key's primary answers Busy too.
        let shard = coord.shard_of(key.hash);
        let k = key.clone();
        match coord
            .ask(shard, |reply| ShardMsg::Read {
                key: k,
                at,
                ack,
                reply,
            })
            .await?
        {
            Ok(rs) => return Ok(rs),
            Err(_) => retry.wait().await?,
        }
    }
}

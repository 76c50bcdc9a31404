//! The convergence checker: reads every replica's shard directly and
//! compares it with the acknowledged writes.

use std::collections::{BTreeMap, BTreeSet};

use elsa_cluster::ring::slot_of;
use elsa_lattice::{NodeId, Version};
use elsa_shard::table::DIGEST_BUCKETS;
use elsa_shard::wal::codec::{EntryState, LogEntry};
use elsa_shard::Current;

use crate::node::{hash_of, Ack, World};

/// A replica's state of one key: None when it holds no lattice.
type Held = Option<LogEntry>;

/// Every lattice of every shard of every node: (node, shard) → key → entry.
pub fn snapshot(world: &World) -> BTreeMap<(NodeId, u16), BTreeMap<Vec<u8>, LogEntry>> {
    let all = vec![u64::MAX; DIGEST_BUCKETS / 64];
    let mut out = BTreeMap::new();
    for (&node, disk) in &world.disks {
        for (i, shard) in disk.borrow().shards.iter().enumerate() {
            let entries = shard
                .bucket_entries(&all, usize::MAX)
                .into_iter()
                .map(|e| (e.key.to_vec(), e))
                .collect();
            out.insert((node, i as u16), entries);
        }
    }
    out
}

/// The lattice an acknowledged lone write installed.
fn lattice_of(world: &World, a: &Ack) -> LogEntry {
    LogEntry {
        key: world.keys[a.key].key.clone(),
        state: EntryState::Plain(a.value.clone().map(|value| Current {
            value,
            expire_ms: None,
            ttl_of: None,
        })),
        start_ts: a.version.commit_ts,
        version: a.version,
        unit: Default::default(),
    }
}

fn show(h: &Held) -> String {
    match h {
        None => "absent".into(),
        Some(e) => format!(
            "{}@({},{})",
            e.state
                .plain()
                .map_or("tombstone".to_string(), |c| String::from_utf8_lossy(
                    &c.value
                )
                .into_owned()),
            e.version.commit_ts,
            e.version.origin
        ),
    }
}

/// Ok when every replica of every key, in every region, holds exactly the
/// acknowledged write with the largest (commit_ts, origin) — for a delete, a
/// tombstone (or nothing, where tombstones may have been collected) — and
/// no node holds a key it does not replicate, in a shard other than its
/// own for the key's slot.
pub fn check(world: &World) -> Result<(), String> {
    if let Some(v) = world.violations.borrow().first() {
        return Err(format!("violation: {v}"));
    }
    let acks = world.acks.borrow();
    // Distinct commits have distinct versions (HLC per node, origin tie-break).
    let mut versions: BTreeSet<Version> = BTreeSet::new();
    for a in acks.iter() {
        if !versions.insert(a.version) {
            return Err(format!(
                "two acknowledged writes share version {:?}",
                a.version
            ));
        }
    }
    let mut per_key: Vec<Vec<&Ack>> = vec![Vec::new(); world.keys.len()];
    for a in acks.iter() {
        per_key[a.key].push(a);
    }
    let may_collect = world.knobs.tombstone_ttl_ms < 60_000;
    let snap = snapshot(world);
    let ring = world.rings.values().next().expect("a node");
    for (k, key) in world.keys.iter().enumerate() {
        let slot = slot_of(key.hash);
        let winner = per_key[k].iter().max_by_key(|a| a.version).copied();
        let want: Held = winner.map(|a| lattice_of(world, a));
        let mut bad = Vec::new();
        let mut states = Vec::new();
        for r in 0..ring.regions().len() {
            for id in ring.replicas(slot, r) {
                let held: Held = snap
                    .get(&(id.node, id.index))
                    .and_then(|m| m.get(&key.key[..]))
                    .cloned();
                let ok = held == want
                    || (held.is_none()
                        && may_collect
                        && want
                            .as_ref()
                            .is_some_and(|w| w.state == EntryState::Plain(None)));
                states.push(format!("n{}/{}={}", id.node, id.index, show(&held)));
                if !ok {
                    bad.push(id.node);
                }
            }
        }
        if !bad.is_empty() {
            let mut history: Vec<String> = per_key[k]
                .iter()
                .map(|a| {
                    format!(
                        "{}@({},{}) by n{} at {:?}",
                        a.value
                            .as_ref()
                            .map_or("DEL".to_string(), |v| String::from_utf8_lossy(v)
                                .into_owned()),
                        a.version.commit_ts,
                        a.version.origin,
                        a.node,
                        a.at
                    )
                })
                .collect();
            if history.len() > 6 {
                history.drain(..history.len() - 6);
            }
            return Err(format!(
                "key {k} (slot {slot}) differs on nodes {bad:?}: want {}; replicas {}; last acknowledged writes [{}]",
                show(&want),
                states.join(" "),
                history.join(", ")
            ));
        }
    }
    // Counters: every replica, in every region, counts every acknowledged
    // increment — made concurrently by each region's primary — once.
    for (c, key) in world.counters.iter().enumerate() {
        let zset = crate::node::typed_kind(c) == 3;
        if !zset && crate::node::typed_kind(c) != 0 {
            check_collection(world, &snap, ring, c, key)?;
            continue;
        }
        let incs: Vec<i64> = world
            .increments
            .borrow()
            .iter()
            .filter(|(k, _)| *k == c)
            .map(|(_, by)| *by)
            .collect();
        if incs.is_empty() {
            continue;
        }
        let want = incs.iter().sum::<i64>().to_string();
        let slot = slot_of(key.hash);
        for r in 0..ring.regions().len() {
            for id in ring.replicas(slot, r) {
                let held = snap
                    .get(&(id.node, id.index))
                    .and_then(|m| m.get(&key.key[..]));
                let got = match held.map(|e| &e.state) {
                    // A sorted set's shared member: its score, as text.
                    Some(EntryState::Typed(s)) if zset => match s.visible_collection(0) {
                        Some(elsa_lattice::Collection::ZSet(z)) => z
                            .score(b"shared")
                            .map(|v| bytes::Bytes::from((v as i64).to_string())),
                        _ => None,
                    },
                    Some(EntryState::Typed(s)) => s.visible_string(0),
                    Some(EntryState::Plain(c)) => c.as_ref().map(|c| c.value.clone()),
                    None => None,
                };
                if got.as_deref() != Some(want.as_bytes()) {
                    return Err(format!(
                        "counter {c} (slot {slot}) on n{}/{} reads {got:?}, but {} acknowledged \
                         increments sum to {want}",
                        id.node,
                        id.index,
                        incs.len()
                    ));
                }
            }
        }
    }
    for ((node, shard), entries) in &snap {
        let own = &world.rings[node];
        for e in entries.values() {
            let slot = slot_of(hash_of(&e.key));
            if !own.replicates(slot, *node) || own.own_shard(slot) != *shard {
                return Err(format!(
                    "n{node} shard {shard} holds {:?} of slot {slot}, which is not its to keep",
                    e.key
                ));
            }
        }
    }
    Ok(())
}

/// What each node holds of each key: (node, key) → (version, live), read
/// with `Shard::op_read` on the node's shard for the key's slot (cheaper
/// than a full scan, for checks made every few simulated milliseconds).
pub type Versions = BTreeMap<(NodeId, usize), (Version, bool)>;

pub fn versions(world: &World) -> Versions {
    let mut out = BTreeMap::new();
    for (&node, disk) in &world.disks {
        let ring = &world.rings[&node];
        let mut disk = disk.borrow_mut();
        for (k, key) in world.keys.iter().enumerate() {
            let shard = usize::from(ring.own_shard(slot_of(key.hash)));
            let Some(shard) = disk.shards.get_mut(shard) else {
                continue; // not booted yet
            };
            let state = shard
                .op_read(&elsa_shard::HashedKey {
                    key: key.key.clone(),
                    hash: key.hash,
                })
                .expect("no holds in the sim");
            if state.version != Version::ZERO {
                out.insert((node, k), (state.version, state.current.is_some()));
            }
        }
    }
    out
}

/// Watches every replica through the whole run: a key's version on a node
/// only ever grows (merge keeps the larger version; recovery replays
/// everything), and only a tombstone may disappear (collected).
#[derive(Default)]
pub struct Monotonic {
    seen: Versions,
}

impl Monotonic {
    /// Compares the replicas now with what they held before.
    pub fn sample(&mut self, now: std::time::Duration, held: &Versions) -> Result<(), String> {
        for (id, &(v, live)) in held {
            if let Some(&(before, _)) = self.seen.get(id) {
                if v < before {
                    return Err(format!(
                        "at {now:?} n{} holds version {v:?} (live: {live}) of key {} after it held \
                         {before:?}: a replica went back in time",
                        id.0, id.1
                    ));
                }
            }
        }
        for (id, &(before, live)) in &self.seen {
            if live && !held.contains_key(id) {
                return Err(format!(
                    "at {now:?} n{} lost the value {before:?} of key {}: only tombstones may \
                     be collected",
                    id.0, id.1
                ));
            }
        }
        // Collected tombstones stay remembered: what comes back must not
        // be older than them.
        for (id, v) in held {
            self.seen.insert(*id, *v);
        }
        Ok(())
    }
}

/// Checks every live node's watermarks (`Cluster::watermark`, what
/// `WAITREGION` answers from): each acknowledged write of that node below
/// its watermark towards a region must be on every replica of the key in
/// that region (or a later version of it).
pub fn watermarks(world: &World, now: std::time::Duration, held: &Versions) -> Result<(), String> {
    let live: Vec<(NodeId, std::rc::Rc<crate::node::Node>)> = world
        .live
        .borrow()
        .iter()
        .filter_map(|(n, w)| w.upgrade().map(|node| (*n, node)))
        .collect();
    if live.is_empty() {
        return Ok(());
    }
    let acks = world.acks.borrow();
    let may_collect = world.knobs.tombstone_ttl_ms < 60_000;
    let ring = world.rings.values().next().expect("a node");
    for (node, n) in live {
        for (r, region) in ring.regions().iter().enumerate() {
            let wm = n.watermark(region);
            let boot = world.disks[&node].borrow().boots;
            let want = world.knobs.watermarks;
            for a in acks.iter().filter(|a| {
                a.node == node
                    && a.version.commit_ts < wm
                    && (a.boot == boot || want.earlier_boots)
                    && (want.replaced
                        || held
                            .get(&(node, a.key))
                            .is_some_and(|&(v, _)| v == a.version))
            }) {
                let key = &world.keys[a.key];
                for id in ring.replicas(slot_of(key.hash), r) {
                    if id.node == node {
                        continue;
                    }
                    let there = held.get(&(id.node, a.key));
                    let ok = match there {
                        Some(&(v, _)) => v >= a.version,
                        None => may_collect,
                    };
                    if !ok {
                        return Err(format!(
                            "at {now:?} n{node} (boot {}, write made at {:?}) has a watermark towards {region} of {wm}, above its write \
                             {}@({},{}) of key {}, but n{} holds {} (n{node} holds {}); streams: {}",
                            world.disks[&node].borrow().boots,
                            a.at,
                            a.value.as_ref().map_or("DEL".to_string(), |v| {
                                String::from_utf8_lossy(v).into_owned()
                            }),
                            a.version.commit_ts,
                            a.version.origin,
                            a.key,
                            id.node,
                            there.map_or("nothing".to_string(), |(v, live)| format!(
                                "{v:?} (live: {live})"
                            )),
                            held.get(&(node, a.key)).map_or("nothing".to_string(), |(v, live)| format!(
                                "{v:?} (live: {live})"
                            )),
                            n.streams_to(id.node)
                        ));
                    }
                }
            }
        }
    }
    Ok(())
}

/// A hash, set or list every region's primary changed: on every replica,
/// every acknowledged field with its value and nothing else; every
/// acknowledged member (element) not acknowledged removed, and nothing
/// else — and a list's elements in one order on every replica.
fn check_collection(
    world: &World,
    snap: &BTreeMap<(NodeId, u16), BTreeMap<Vec<u8>, LogEntry>>,
    ring: &elsa_cluster::ring::Ring,
    c: usize,
    key: &crate::node::Key,
) -> Result<(), String> {
    use elsa_lattice::Collection;
    let want: BTreeMap<Vec<u8>, Vec<u8>> = if crate::node::typed_kind(c) == 1 {
        world
            .fields
            .borrow()
            .iter()
            .filter(|(k, _, _)| *k == c)
            .map(|(_, f, v)| (f.to_vec(), v.to_vec()))
            .collect()
    } else {
        world
            .set_members
            .borrow()
            .iter()
            .filter(|(k, _, gone)| *k == c && !gone)
            .map(|(_, m, _)| (m.to_vec(), Vec::new()))
            .collect()
    };
    let slot = slot_of(key.hash);
    // A list's order, as the first replica holds it: every other the same.
    let mut order: Option<(NodeId, Vec<Vec<u8>>)> = None;
    for r in 0..ring.regions().len() {
        for id in ring.replicas(slot, r) {
            let held = snap
                .get(&(id.node, id.index))
                .and_then(|m| m.get(&key.key[..]));
            if let Some(EntryState::Typed(s)) = held.map(|e| &e.state) {
                if let Some(Collection::List(l)) = s.visible_collection(0) {
                    let seq: Vec<Vec<u8>> = l.iter().map(|e| e.to_vec()).collect();
                    match &order {
                        None => order = Some((id.node, seq)),
                        Some((first, o)) if *o != seq => {
                            return Err(format!(
                                "list {c} (slot {slot}): n{} holds its elements in another order than n{first}",
                                id.node
                            ))
                        }
                        Some(_) => {}
                    }
                }
            }
            let got: BTreeMap<Vec<u8>, Vec<u8>> = match held.map(|e| &e.state) {
                Some(EntryState::Typed(s)) => match s.visible_collection(0) {
                    Some(Collection::Hash(h)) => {
                        h.iter().map(|(f, v)| (f.to_vec(), v.to_vec())).collect()
                    }
                    Some(Collection::Set(x)) => {
                        x.iter().map(|m| (m.to_vec(), Vec::new())).collect()
                    }
                    Some(Collection::ZSet(z)) => z
                        .iter()
                        .map(|(m, s)| (m.to_vec(), s.to_string().into_bytes()))
                        .collect(),
                    Some(Collection::List(l)) => {
                        l.iter().map(|e| (e.to_vec(), Vec::new())).collect()
                    }
                    // The simulation writes no stream.
                    Some(Collection::Stream(_)) => BTreeMap::new(),
                    None => BTreeMap::new(),
                },
                _ => BTreeMap::new(),
            };
            if got != want {
                let missing: Vec<_> = want
                    .keys()
                    .filter(|k| !got.contains_key(*k))
                    .take(3)
                    .collect();
                let extra: Vec<_> = got
                    .keys()
                    .filter(|k| !want.contains_key(*k))
                    .take(3)
                    .collect();
                return Err(format!(
                    "typed key {c} (slot {slot}) on n{}/{}: {} elements, want {} (missing e.g. {missing:?}, extra e.g. {extra:?})",
                    id.node,
                    id.index,
                    got.len(),
                    want.len()
                ));
            }
        }
    }
    Ok(())
}

//! Installing lattices: a commit's writes here, a peer's or another region's
//! merges and replicas, each checked against what the key holds (its
//! version, the collection floor, the type floor), logged, and shown to
//! the change hooks.

use std::sync::Arc;

use bytes::Bytes;
use elsa_lattice::{Collection, Crdt, KeyState, Kind, Ts, Version};

use crate::ops::Current;
use crate::record::Record;
use crate::table::Update;
use crate::wal::codec::EntryState;

use super::*;

impl Shard {
    /// Installs a state committed here unless the stored one is newer.
    pub(super) fn install(
        &mut self,
        hash: u64,
        key: &[u8],
        state: &EntryState,
        start_ts: Ts,
        version: Version,
    ) {
        self.install_from(hash, key, state, start_ts, version, Source::Local);
    }

    /// Installs a state unless the stored one is newer (merge semantics, so a
    /// lattice that arrived from a peer is never overwritten by an older one).
    pub(super) fn install_from(
        &mut self,
        hash: u64,
        key: &[u8],
        state: &EntryState,
        start_ts: Ts,
        version: Version,
        source: Source,
    ) -> bool {
        // Committed before a FLUSHALL/FLUSHDB this shard knows of: gone
        // (a typed state keeps only its parts written since).
        let trimmed;
        let state = match self.under_flush(key, state, version) {
            Some(None) => return false,
            Some(Some(t)) => {
                trimmed = t;
                &trimmed
            }
            None => state,
        };
        // A transaction delivered again from before the collection floor:
        // what it wrote is here already, or was removed and collected.
        if source.redelivered() && written_before(state, version, self.tombstone_floor) {
            return false;
        }
        // What a snapshot may still need of the version this replaces.
        let replaced = match &self.history {
            Some(h) if h.wanted() => Some(self.past_version(hash, key)),
            _ => None,
        };
        if source == Source::Local && self.gossip.holds_a_part(key) {
            // Its last write this epoch was part of a transaction of
            // several keys: shipped as it is, not folded into this one.
            self.capture_part(hash, key);
        }
        let written = match state {
            EntryState::Plain(p) => {
                if self.table.get(hash, key).is_some_and(Record::is_typed) {
                    // A plain lattice meets a typed state: it merges as a
                    // string's base that saw no increments.
                    let s = KeyState::of_string(elsa_lattice::Counter::default().set(
                        p.as_ref().map(|c| c.value.clone()),
                        p.as_ref().and_then(|c| c.expire_ms),
                        start_ts,
                        version,
                    ));
                    self.install_typed(hash, key, s, start_ts, source)
                } else {
                    self.install_plain(hash, key, p.as_ref(), start_ts, version, source)
                }
            }
            EntryState::Typed(s) => self.install_typed(hash, key, (**s).clone(), start_ts, source),
        };
        if let (true, Some(Some((value, version)))) = (written, replaced) {
            let until = self.table.get(hash, key).map_or(0, |r| r.commit_ts);
            if let Some(h) = &mut self.history {
                let past = crate::history::Past {
                    value,
                    version,
                    until,
                };
                h.keep(key, past);
            }
        }
        if written && !self.parts.is_empty() {
            self.parts_after_write(hash, key);
        }
        if written && !source.recovering() && !self.unseen {
            if let Some(hook) = &self.on_change {
                hook.changed(key);
            }
        }
        if written && source == Source::Local {
            let how = crate::gossip::Written {
                unit: self.unit,
                start_ts,
            };
            match state {
                EntryState::Plain(_) => self.gossip.record(key, how),
                EntryState::Typed(s) => self.gossip.record_delta(key, s, how),
            }
        }
        let mut frame = if self.from_region || source == Source::Remote {
            crate::wal::codec::Frame::Remote
        } else {
            crate::wal::codec::Frame::Plain
        };
        if written && matches!(source, Source::Local | Source::Remote) {
            if let Some(r) = &mut self.repl {
                // Logged as this node's own commit (left out by a recovery
                // that finds it unconfirmed) only when it is one: another
                // region's install was decided there, and dropped by a
                // restart in place it left the region showing the rest of
                // its transaction (issue 42); kept, it is what anti-entropy
                // would bring back anyway.
                if source == Source::Local {
                    frame = crate::wal::codec::Frame::Own;
                }
                r.pending.push(crate::wal::codec::LogEntry {
                    key: Bytes::copy_from_slice(key),
                    state: state.clone(),
                    start_ts,
                    version,
                    unit: self.unit,
                });
            }
        }
        if written && !source.recovering() {
            if let Some(d) = &mut self.durability {
                d.wal.stage(key, state, start_ts, version, frame, self.unit);
            }
        }
        written
    }

    /// Merges a typed state (a delta, or a whole state) into `key`; a
    /// plain lattice stored there becomes a typed one. True when the key
    /// changed.
    pub(super) fn install_typed(
        &mut self,
        hash: u64,
        key: &[u8],
        delta: KeyState,
        start_ts: Ts,
        source: Source,
    ) -> bool {
        let floor = self.tombstone_floor;
        let unit = self.unit;
        if matches!(source, Source::Peer | Source::Remote) {
            self.check_late(hash, key, &delta);
        }
        // Whether the key appeared or went, when someone asks (`keyset`).
        let now_ms = if self.keyset.tracking() { unix_ms() } else { 0 };
        let mut flipped = false;
        let written = self.table.update(hash, key, |old| match old {
            None => {
                // Collected here already (every replica had it), as a
                // tombstone would be.
                if source != Source::Local
                    && delta.newest().commit_ts < floor
                    && delta.kind(unix_ms()) == Kind::None
                {
                    return Update::Unchanged;
                }
                flipped = now_ms > 0 && keyset::typed_live(&delta, now_ms);
                Update::Put(Record::new_typed(key, Arc::new(delta), start_ts).with_unit(unit))
            }
            Some(rec) => {
                let was = now_ms > 0
                    && match rec.typed() {
                        Some(state) => keyset::typed_live(state, now_ms),
                        None => keyset::plain_live(Some(rec), now_ms),
                    };
                // The record's start and unit name the write of its newest
                // version: an older one merged now (another region's
                // transaction whose part came after a newer write here)
                // changes neither. Marked as that transaction's part, the
                // key's whole state went out by anti-entropy as a part at
                // the newer write's version — of a transaction that does
                // not exist — and the region it reached kept the key out
                // of sight for `PART_WAIT` (issue 46, defect B).
                let newer = delta.newest() > rec.version();
                let update = match rec.typed_mut() {
                    Some(state) => {
                        if !Arc::make_mut(state).merge(delta) {
                            return Update::Unchanged;
                        }
                        rec.restamp(start_ts);
                        if newer {
                            rec.set_unit(unit);
                        }
                        Update::InPlace
                    }
                    None => {
                        let mut state = rec.as_typed();
                        if !state.merge(delta) {
                            return Update::Unchanged;
                        }
                        let (start_ts, unit) = if newer {
                            (start_ts, unit)
                        } else {
                            (rec.start_ts, rec.unit())
                        };
                        Update::Put(
                            Record::new_typed(key, Arc::new(state), start_ts).with_unit(unit),
                        )
                    }
                };
                if now_ms > 0 {
                    let is = match &update {
                        Update::Put(r) => r.typed().is_some_and(|s| keyset::typed_live(s, now_ms)),
                        _ => rec.typed().is_some_and(|s| keyset::typed_live(s, now_ms)),
                    };
                    flipped = was != is;
                }
                update
            }
        });
        if flipped {
            self.keyset_changed(key);
        }
        written
    }

    /// Another region's stream entries that arrive below the read horizon
    /// (`ops::streams::late_entries`): counted and logged with who wrote
    /// them, for the checker and the operator.
    fn check_late(&self, hash: u64, key: &[u8], delta: &KeyState) {
        let Some(Collection::Stream(x)) = &delta.collection else {
            return;
        };
        let held = self.table.get(hash, key).and_then(|r| match r.typed() {
            Some(s) => match &s.collection {
                Some(Collection::Stream(h)) => Some(&**h),
                _ => None,
            },
            None => None,
        });
        let late = crate::ops::streams::late_entries(x, held);
        if !late.is_empty() {
            tracing::warn!(
                "stream {:?}: {} entries of another region arrived below the read horizon {} ms, where followers may have passed them (first {:?} written at {:?} by node {}; {})",
                String::from_utf8_lossy(key),
                late.len(),
                crate::ops::streams::read_horizon(),
                late[0].0,
                late[0].1.commit_ts >> 16,
                late[0].1.origin,
                match (self.unit, self.from_region) {
                    (crate::record::Unit::None, true) => "a lone write merged from another region",
                    (crate::record::Unit::None, false) => "a lone write shown after waiting behind a part, or from a replica of this region",
                    (crate::record::Unit::Here, _) => "part of a one-shard transaction",
                    (crate::record::Unit::Shards, _) => "part of a transaction across shards",
                }
            );
        }
    }

    /// `key` appeared or went: its database's key set changed now.
    pub(super) fn keyset_changed(&mut self, key: &[u8]) {
        if keyset::internal(key) {
            return;
        }
        let at = self.hlc.peek();
        self.keyset.changed(crate::db::db_of(key), at);
    }

    /// Installs a plain lattice over a plain one (or none) unless the
    /// stored one is newer.
    pub(super) fn install_plain(
        &mut self,
        hash: u64,
        key: &[u8],
        state: Option<&Current>,
        start_ts: Ts,
        version: Version,
        source: Source,
    ) -> bool {
        let here = source == Source::Local;
        let floor = self.tombstone_floor;
        let tracking = self.keyset.tracking();
        let now_ms = if here && !tracking { 0 } else { unix_ms() };
        let mut flipped = false;
        let written = self.table.upsert(hash, key, |old| {
            match old {
                // A lattice merge: the larger version wins — a change of
                // the TTL alone by the version of the value it changed
                // first (`Current::order`); an equal one is the same
                // state already.
                Some(old) if old.order() >= Current::order(state, version) => return None,
                // Deleting a key already deleted here needs no new lattice…
                Some(old) if here && state.is_none() && old.is_tombstone() => return None,
                // …nor does deleting a key that never existed.
                None if here && state.is_none() => return None,
                // From a peer or the log, a tombstone — or an expired value,
                // which acts as one — must be kept: it beats an older value
                // that may still arrive (replay and merges happen in any
                // order). Unless it is one this shard already collected:
                // every replica had it then.
                None if (state.is_none()
                    || state.is_some_and(|c| c.expire_ms.is_some_and(|at| at <= now_ms)))
                    && version.commit_ts < floor =>
                {
                    return None
                }
                _ => {}
            }
            if tracking {
                let is = state.is_some_and(|c| c.expire_ms.is_none_or(|at| at > now_ms));
                flipped = keyset::plain_live(old, now_ms) != is;
            }
            Some(
                Record::new_shared(
                    key,
                    state.map(|c| &c.value),
                    state.and_then(|c| c.expire_ms),
                    state.and_then(|c| c.ttl_of),
                    start_ts,
                    version,
                )
                .with_unit(self.unit),
            )
        });
        if flipped {
            self.keyset_changed(key);
        }
        written
    }
}

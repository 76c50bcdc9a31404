//! A transaction's change to a stream, as a delta (issue 46).
//!
//! A transaction (`MULTI` across shards, a script, `BEGIN … COMMIT`)
//! runs its commands on the key's state as it read it and installs what
//! they made of it (`KeyState::replace_with`). A stream used to be
//! installed whole, over a raised floor, as `COPY` installs another key's
//! stream: across regions that dropped every entry another region added
//! meanwhile and reset the groups' state — acknowledged `XADD`s lost, and
//! entries handed to two consumers of one region
//! (`tests/nemesis_streams.rs`, once its writers used transactions).
//! [`Stream::delta_to`] instead writes what changed as the commands'
//! own deltas would, each as the commit's version: entries added, deleted
//! or trimmed, the registers `XSETID` sets, and each group's changed
//! parts. Hand-written: it is the commit rule of Elsa's stream lattice.

use super::log::Side;
use super::{Consumer, Delivery, Group, Reg, Stream, StreamId};
use crate::{Crdt, Version};

impl Stream {
    /// The delta taking this stream (a key's state as a transaction read
    /// it) to `target` (what the transaction's commands made of it), each
    /// change written as `dot`. None when `target` is not this stream
    /// changed — it lacks something this holds (another key's stream put
    /// here: `COPY`, `RENAME`, `RESTORE`) — or when the delta would not
    /// show what `target` shows (then the caller installs it whole).
    pub fn delta_to(&self, target: &Stream, dot: Version) -> Option<Stream> {
        // The logs are compared chunk by chunk (`Log::diff`): the
        // transaction's copy shares every chunk its commands left alone,
        // so a commit decodes what it changed, not the whole stream (a
        // script's XADD to a stream of 10,000 events cost 3 ms).
        let diff = self.entries.diff(&target.entries);
        if !target.covers(self, &diff) {
            return None;
        }
        let mut work = self.clone();
        let mut delta = Stream::default();
        let mut take = |work: &mut Stream, d: Stream| {
            work.merge(d.clone());
            delta.merge(d);
        };
        // Entries added (an entry added and deleted by the transaction
        // shows nothing: only the count below remembers it).
        let floor = self.floor();
        let added: Vec<_> = diff
            .iter()
            .filter_map(|(id, side)| match side {
                Side::Theirs(e)
                    if target.shows(*id) && *id >= floor && !self.deleted.contains_key(id) =>
                {
                    Some((*id, crate::stream_fields::Fields::from(e.fields)))
                }
                _ => None,
            })
            .collect();
        drop(diff);
        for (id, fields) in added {
            let d = work.add(id, fields, dot);
            take(&mut work, d);
        }
        // Trimmed, then deleted: what `work` shows and `target` does not
        // (an entry it lacks, or one it deleted).
        if target.floor() > work.floor() {
            let d = work.trim_below(target.floor(), dot);
            take(&mut work, d);
        }
        let mut gone: Vec<StreamId> = work
            .entries
            .diff(&target.entries)
            .into_iter()
            .filter(|(id, side)| matches!(side, Side::Mine(_)) && work.shows(*id))
            .map(|(id, _)| id)
            .collect();
        gone.extend(
            target
                .deleted
                .keys()
                .filter(|id| work.shows(**id) && work.entries.contains(**id)),
        );
        gone.sort_unstable();
        gone.dedup();
        if !gone.is_empty() {
            let d = work.delete(&gone, dot);
            take(&mut work, d);
        }
        // The registers XSETID sets (and the count of entries added).
        if (
            target.last_id(),
            target.entries_added(),
            target.max_deleted_id(),
        ) != (work.last_id(), work.entries_added(), work.max_deleted_id())
        {
            let d = work.set_id(
                target.last_id(),
                Some(target.entries_added()),
                Some(target.max_deleted_id()),
                dot,
            );
            take(&mut work, d);
        }
        // Each group's changed parts.
        for (name, tg) in &target.groups {
            let g = match work.groups.get(name) {
                Some(wg) if wg == tg => continue,
                Some(wg) if wg.created == tg.created => changed_parts(wg, tg, dot),
                _ => restamped_group(tg, dot),
            };
            let mut d = Stream::default();
            d.groups.insert(name.clone(), g);
            d.recount();
            take(&mut work, d);
        }
        work.shows_as(target).then_some(delta)
    }

    /// Whether entry `id`, if held, shows: at or above the floor and not
    /// deleted.
    fn shows(&self, id: StreamId) -> bool {
        id >= self.floor() && !self.deleted.contains_key(&id)
    }

    /// Whether this holds everything `base` holds (a later state of it):
    /// its entries (or deleted, or trimmed here), deletes, trims and
    /// groups. `diff` is `base`'s log against this one's.
    fn covers(&self, base: &Stream, diff: &[(StreamId, Side<'_>)]) -> bool {
        let floor = self.floor();
        floor >= base.floor()
            && (self.last.version, self.last.value) >= (base.last.version, base.last.value)
            && !diff
                .iter()
                .any(|(id, side)| matches!(side, Side::Mine(_)) && *id >= floor)
            && base
                .deleted
                .keys()
                .all(|id| *id < floor || self.deleted.contains_key(id))
            && base
                .groups
                .iter()
                .all(|(n, g)| self.groups.get(n).is_some_and(|t| t.created >= g.created))
    }

    /// Whether this shows what `other` shows (DUMP's parts): the entries
    /// compared where the logs differ, and where one deleted what both
    /// hold.
    fn shows_as(&self, other: &Stream) -> bool {
        let registers = (self.last_id(), self.entries_added(), self.max_deleted_id())
            == (
                other.last_id(),
                other.entries_added(),
                other.max_deleted_id(),
            );
        if !registers || self.len() != other.len() || self.group_parts() != other.group_parts() {
            return false;
        }
        if self.floor() != other.floor() {
            // Not met after a commit's trim: compared whole.
            return self
                .entries()
                .zip(other.entries())
                .all(|((a, x), (b, y))| a == b && x.fields.bytes() == y.fields.bytes());
        }
        let entries_alike = self
            .entries
            .diff(&other.entries)
            .into_iter()
            .all(|(id, side)| match side {
                Side::Mine(_) => !self.shows(id),
                Side::Theirs(_) => !other.shows(id),
                Side::Both(a, b) => match (self.shows(id), other.shows(id)) {
                    (true, true) => a.fields.bytes() == b.fields.bytes(),
                    (mine, theirs) => mine == theirs,
                },
            });
        let deleted_alike = |a: &Stream, b: &Stream| {
            a.deleted.keys().all(|id| {
                b.deleted.contains_key(id)
                    || *id < a.floor()
                    || !(a.entries.contains(*id) && b.entries.contains(*id))
            })
        };
        entries_alike && deleted_alike(self, other) && deleted_alike(other, self)
    }
}

/// The parts of group `to` that differ from `from` (the same incarnation),
/// written as `dot`; the rest as `from` has them (merged, a no-op).
fn changed_parts(from: &Group, to: &Group, dot: Version) -> Group {
    let mut g = Group {
        created: from.created,
        destroyed: from.destroyed,
        delivered: from.delivered,
        ..Group::default()
    };
    if to.destroyed != from.destroyed {
        g.destroyed = Some(dot);
    }
    if to.delivered != from.delivered {
        let (epoch, last, read) = to.delivered;
        let epoch = if epoch == from.delivered.0 {
            epoch
        } else {
            dot
        };
        g.delivered = (epoch, last, read);
    }
    for (id, d) in &to.deliveries {
        if from.deliveries.get(id) != Some(d) {
            g.deliveries.insert(
                *id,
                Delivery {
                    version: dot,
                    ..d.clone()
                },
            );
        }
    }
    // An acknowledgement the transaction wrote, unless it delivered the
    // entry again after it (a delivery and an ack of one commit: acked).
    for (id, v) in &to.acks {
        if from.acks.get(id) != Some(v) && acked(to, *id) {
            g.acks.insert(*id, dot);
        }
    }
    for (n, c) in &to.consumers {
        let before = from.consumers.get(n);
        if before != Some(c) {
            let live = match before {
                Some(b) if b.live == c.live => c.live,
                _ => Reg {
                    version: dot,
                    value: c.live.value,
                },
            };
            g.consumers
                .insert(n.clone(), Consumer { live, ..c.clone() });
        }
    }
    g.digest = g.items_digest();
    g
}

/// Whether `g` holds `id` acknowledged (not pending).
fn acked(g: &Group, id: StreamId) -> bool {
    g.pending_in(id, id).next().is_none()
}

/// Group `g` made by the transaction (created, or created again), every
/// part written as `dot`.
fn restamped_group(g: &Group, dot: Version) -> Group {
    let mut copy = Group {
        created: dot,
        destroyed: g.destroyed.map(|_| dot),
        delivered: (dot, g.delivered.1, g.delivered.2),
        ..Group::default()
    };
    for (id, d) in &g.deliveries {
        copy.deliveries.insert(
            *id,
            Delivery {
                version: dot,
                ..d.clone()
            },
        );
    }
    for id in g.acks.keys().filter(|id| acked(g, **id)) {
        copy.acks.insert(*id, dot);
    }
    for (n, c) in &g.consumers {
        copy.consumers.insert(
            n.clone(),
            Consumer {
                live: Reg {
                    version: dot,
                    value: c.live.value,
                },
                ..c.clone()
            },
        );
    }
    copy.digest = copy.items_digest();
    copy
}

//! Another region's transactions of several keys, as their lattices
//! arrive here (issue 12, item 13: atomic visibility across regions).
//!
//! A commit of several keys reaches this region in pieces: each of the
//! writer's shards gossips its own keys, each to the nodes that replicate
//! them, in its own epoch. Shown as they come, a reader here would see
//! part of a transaction. So the shards keep such parts out of sight
//! (`Shard::op_merge` with `park`), and one node of this region installs
//! the whole transaction at once, under holds at every key's primary, with
//! its original version (`elsa_txn::unit`):
//!
//! - a commit across the writer's shards has a transaction record
//!   (`elsa_txn::record`) holding every write; the record is a key like
//!   any other, gossiped to its replicas here, and each of them installs
//!   the writes;
//! - a commit of several keys on one of the writer's shards arrives whole
//!   in that shard's gossip frame (the sender puts all of it in every
//!   frame that carries a part, see [`Cluster::complete_units`]); each
//!   node here that receives it installs it.
//!
//! Every node that receives a whole transaction installs it, not one
//! chosen node: installs go in order (`elsa_txn::unit`), and with one
//! installer per record key a chain of transfers on hot keys went back
//! and forth between installers, each waiting for the other's turn — in
//! the bank run they fell seconds behind and gave transactions up. An
//! install that finds its transaction there already changes nothing
//! (merges of the same versions). The parts wait meanwhile; the install
//! reaches its keys' backups through in-region replication. Parts whose
//! install never comes are shown alone after `elsa_shard::PART_WAIT`.

use std::collections::HashMap;

use elsa_shard::wal::codec::LogEntry;
use elsa_shard::Unit;
use elsa_txn::record::{is_record_key, Outcome};
use tokio::sync::mpsc;

use super::Cluster;
use crate::wire::Lattice;

/// How lattices being merged arrived, which decides whether parts of
/// transactions wait for the rest.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Arrival {
    /// From this region (in-region replication, gossip, anti-entropy) or
    /// a synchronous push of a whole commit (`replication = 2pc`): merged
    /// at once.
    Direct,
    /// Another region's epoch flush.
    Gossip,
    /// Another region's anti-entropy batch: parts of transactions, and
    /// records, but never a whole one-shard commit.
    Repair,
    /// Another region's node's own commits from before it restarted, sent
    /// again (`wire::Gossip::resent`): as `Gossip`, but nothing committed
    /// before a shard's collection floor is merged.
    Resent,
    /// Another region's anti-entropy from a node that is not the primary
    /// of the lattices' slots there ([`Cluster::by_repairer`]): only what
    /// would change nothing shown here merges.
    Behind,
}

impl Cluster {
    /// Hands this node's installer the transactions among `lattices` this
    /// node installs for its region (see the module doc).
    pub(super) fn find_units(&self, lattices: &[Lattice], arrival: Arrival) {
        if matches!(arrival, Arrival::Direct | Arrival::Behind) {
            return;
        }
        // A one-shard unit's writes share their start and origin (one
        // version for a commit; a version each, one start, for an `op_exec`
        // step).
        let mut here: HashMap<(u64, u32), Vec<&Lattice>> = HashMap::new();
        for l in lattices {
            if is_record_key(&l.key) {
                let Some(value) = &l.value else { continue };
                if let Ok(Outcome::Committed(writes)) = Outcome::decode(value) {
                    if !writes.is_empty() {
                        self.hand_unit(writes);
                    }
                }
            } else if matches!(arrival, Arrival::Gossip | Arrival::Resent)
                && Unit::from_code(l.unit) == Unit::Here
            {
                here.entry((l.start_ts, l.origin)).or_default().push(l);
            }
        }
        for parts in here.into_values() {
            self.hand_unit(
                parts
                    .into_iter()
                    .map(|l| LogEntry::from(l.clone()))
                    .collect(),
            );
        }
    }

    /// Remembers the region of every node in `ring` (see
    /// `Cluster::regions_seen`).
    pub(super) fn note_regions(&self, ring: &crate::ring::Ring) {
        let mut seen = self.regions_seen.lock().unwrap_or_else(|e| e.into_inner());
        for m in ring.members() {
            seen.entry(m.node).or_insert_with(|| m.region.clone());
        }
    }

    /// Takes out of `entries` (lattices a peer of this region sent) the
    /// transaction records another region committed — their origin is a
    /// node of another region — to be logged as another region's
    /// (`Shard::op_merge_foreign_records`). A record whose origin this
    /// process never saw in a view stays: taken for this region's.
    fn foreign_records(&self, entries: &mut Vec<LogEntry>) -> Vec<LogEntry> {
        if !entries.iter().any(|e| is_record_key(&e.key)) {
            return Vec::new();
        }
        let seen = self.regions_seen.lock().unwrap_or_else(|e| e.into_inner());
        let foreign = |e: &LogEntry| {
            is_record_key(&e.key)
                && seen
                    .get(&e.version.origin)
                    .is_some_and(|r| self.other_region(r))
        };
        let (out, keep): (Vec<LogEntry>, Vec<LogEntry>) =
            std::mem::take(entries).into_iter().partition(foreign);
        *entries = keep;
        out
    }

    /// Sends local shard `shard` the records of `entries` that another
    /// region committed (see [`Cluster::foreign_records`]), taken out of
    /// them; the answer to await, if there were any.
    pub(super) fn merge_foreign_records(
        &self,
        shard: u16,
        entries: &mut Vec<LogEntry>,
    ) -> Option<tokio::sync::oneshot::Receiver<Result<usize, elsa_shard::Refusal>>> {
        let foreign = self.foreign_records(entries);
        if foreign.is_empty() {
            return None;
        }
        let (reply, rx) = tokio::sync::oneshot::channel();
        let msg = elsa_shard::ShardMsg::MergeForeignRecords {
            entries: foreign,
            reply,
        };
        self.inboxes.get(usize::from(shard))?.send(msg).ok()?;
        Some(rx)
    }

    /// Another region's repair from `from`, split: lattices of slots whose
    /// primary in its region it is, and the others.
    ///
    /// This region takes another's transaction in only whole and after
    /// those it builds on, which needs a key's parts to arrive in the order
    /// they were committed: from the slot's primary there, which gossips
    /// them (`streams`) and repairs only once its stream here caught up.
    /// Another replica of the slot holds the same keys, but its own streams
    /// may catch up first: right after a cut between the regions healed,
    /// a backup shipped the latest state of the primary's keys while the
    /// primary's stream still carried the transfers they built on, and
    /// this region read the other's bank off its total for half a second
    /// (CI, stop 62). So what such a node sends merges only where it
    /// changes nothing shown here (`Shard::op_merge_behind`): the rest
    /// comes from the primary, and the round proves nothing meanwhile.
    /// The sender's own word counts too: what it says it does not repair
    /// (`unvouched` slots, sorted — it is not their primary in its view,
    /// or has not yet shipped what it owes of their old primary's streams:
    /// `handover`) goes with the others.
    pub(super) fn by_repairer(
        &self,
        from: elsa_lattice::NodeId,
        lattices: Vec<Lattice>,
        unvouched: &[u32],
    ) -> (Vec<Lattice>, Vec<Lattice>) {
        let primary = self.primary_test(from);
        lattices.into_iter().partition(|l| {
            primary(l) && {
                let hash = std::hash::BuildHasher::hash_one(&self.hasher, &l.key[..]);
                unvouched
                    .binary_search(&(crate::ring::slot_of(hash) as u32))
                    .is_err()
            }
        })
    }

    /// Whether `from` is, in this node's view, the primary of a lattice's
    /// slot in its own region.
    fn primary_test(&self, from: elsa_lattice::NodeId) -> impl Fn(&Lattice) -> bool + '_ {
        let ring = self.ring.load_full();
        let region = ring
            .member(from)
            .and_then(|m| ring.regions().iter().position(|r| *r == m.region));
        move |l: &Lattice| {
            let Some(region) = region else {
                return false;
            };
            let hash = std::hash::BuildHasher::hash_one(&self.hasher, &l.key[..]);
            ring.replicas(crate::ring::slot_of(hash), region)
                .first()
                .is_some_and(|p| p.node == from)
        }
    }

    /// `remote` for lattices from a node of `region`, else direct.
    pub(super) fn arrival(&self, region: &str, remote: Arrival) -> Arrival {
        if region == self.settings.region {
            Arrival::Direct
        } else {
            remote
        }
    }

    /// Hands the installer transactions found another way (those recovery
    /// found not installed here yet); once it is taken.
    pub fn hand_units(&self, units: Vec<Vec<LogEntry>>) {
        for u in units {
            self.hand_unit(u);
        }
    }

    fn hand_unit(&self, writes: Vec<LogEntry>) {
        if let Some(tx) = &*self.units_tx.lock().unwrap_or_else(|e| e.into_inner()) {
            let _ = tx.send(writes);
        }
    }

    /// The installer's end of the channel of whole transactions to install
    /// (taken once, by the node's coordinator task); until it is taken,
    /// none are handed out and parts wait for `PART_WAIT`.
    pub fn take_remote_units(&self) -> Option<mpsc::UnboundedReceiver<Vec<LogEntry>>> {
        let (tx, rx) = mpsc::unbounded_channel();
        let mut slot = self.units_tx.lock().unwrap_or_else(|e| e.into_inner());
        if slot.is_some() {
            return None;
        }
        *slot = Some(tx);
        Some(rx)
    }

    /// The sending side: a commit of several keys on one shard goes whole
    /// into every frame to another region that carries a part of it, so
    /// that whichever node there installs it has all of it. `frames` are
    /// indexes into `entries`, per receiving node.
    pub(super) fn complete_units(
        &self,
        entries: &[LogEntry],
        frames: &mut HashMap<elsa_lattice::NodeId, Vec<usize>>,
    ) {
        let mut here: HashMap<(u64, u32), Vec<usize>> = HashMap::new();
        for (i, e) in entries.iter().enumerate() {
            if e.unit == Unit::Here {
                here.entry(unit_of(e)).or_default().push(i);
            }
        }
        if here.is_empty() {
            return;
        }
        for (node, picked) in frames.iter_mut() {
            // A node of another region out of the view lately gets its
            // frames too (`streams`).
            let remote = self
                .known_region(*node)
                .is_some_and(|r| r != self.settings.region);
            if !remote {
                continue;
            }
            let mut have = vec![false; entries.len()];
            for &i in picked.iter() {
                have[i] = true;
            }
            let mut units: Vec<(u64, u32)> = picked
                .iter()
                .filter(|&&i| entries[i].unit == Unit::Here)
                .map(|&i| unit_of(&entries[i]))
                .collect();
            units.sort_unstable();
            units.dedup();
            for u in units {
                for &i in &here[&u] {
                    if !have[i] {
                        have[i] = true;
                        picked.push(i);
                    }
                }
            }
        }
    }
}

/// Which one-shard unit an entry belongs to: its start and origin (see
/// `find_units`).
fn unit_of(e: &LogEntry) -> (u64, u32) {
    (e.start_ts, e.version.origin)
}

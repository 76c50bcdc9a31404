//! The shard's durability half: staging lattices for its write-ahead log,
//! holding replies until their records are durable, the multi-shard
//! decision record, peer merges, snapshot dumps, and replay at startup.

use super::{Durability, Refusal, Shard, Source, ERR_WAL};
use crate::shard::unix_ms;
use crate::wal::codec::LogEntry;
use crate::wal::files::DataDir;
use crate::wal::Wal;

impl Shard {
    /// Gives the shard a write-ahead log in `dir`.
    pub fn attach_wal(&mut self, wal: Wal, dir: DataDir) {
        self.durability = Some(Durability { wal, dir });
    }

    /// Sends `value` now, or — if the message being handled wrote to the
    /// log, or the log holds records not yet durable — once they are.
    ///
    /// So no reply reveals a state the log could still lose: a value read
    /// before the write that made it is durable could otherwise vanish in a
    /// crash after the reader acted on it (a commit validated on a read of
    /// it, say, would recover without the write it read). Redis answers
    /// after its AOF write the same way. Exception: while the log is
    /// failing (disk full), reads are answered (see docs/durability.md).
    pub(super) fn respond<T: Send + 'static>(
        &mut self,
        tx: tokio::sync::oneshot::Sender<T>,
        value: T,
    ) {
        self.after_log(Box::new(move || {
            let _ = tx.send(value);
        }));
    }

    /// Runs `f` now, or once the log records before it are durable (see
    /// [`Shard::respond`]).
    fn after_log(&mut self, f: crate::wal::Ack) {
        match &mut self.durability {
            Some(d) if d.wal.has_staged() || (!d.wal.settled() && d.wal.failure().is_none()) => {
                d.wal.seal();
                d.wal.defer(f);
            }
            _ => f(),
        }
    }

    /// [`Shard::respond`] at acknowledgement level `ack`: at `region` (and
    /// `all`) the reply also waits until the other replicas of this
    /// shard's keys in the region have every commit it acknowledges or may
    /// reveal (see [`crate::repl`]). If they could not confirm it, the
    /// reply is `unconfirmed` when given (a write's truthful error), else
    /// `value` (a read: what this node holds is all there is to answer).
    pub(super) fn respond_at<T: Send + 'static>(
        &mut self,
        ack: crate::repl::AckLevel,
        tx: tokio::sync::oneshot::Sender<T>,
        value: T,
        unconfirmed: Option<T>,
    ) {
        let Some(r) = self
            .repl
            .as_ref()
            .filter(|_| ack != crate::repl::AckLevel::Local)
        else {
            return self.respond(tx, value);
        };
        let seq = r.horizon();
        if r.gate.settled_through() >= seq {
            return self.respond(tx, value);
        }
        let gate = r.gate.clone();
        self.after_log(Box::new(move || {
            gate.wait(
                seq,
                Box::new(move |ok| {
                    let v = match unconfirmed {
                        Some(u) if !ok => u,
                        _ => value,
                    };
                    let _ = tx.send(v);
                }),
            )
        }));
    }

    /// Gives the shard a replicator: from now on its commits are shipped
    /// to the other replicas of their keys in the region.
    pub fn attach_replicator(&mut self, replicator: std::sync::Arc<dyn crate::repl::Replicator>) {
        self.repl = Some(crate::repl::Repl {
            replicator,
            pending: Vec::new(),
            next: 1,
            gate: std::sync::Arc::new(crate::repl::ReplGate::default()),
        });
    }

    /// True when replies wait for a log flush (or commits for shipping).
    pub fn wal_pending(&self) -> bool {
        self.durability.as_ref().is_some_and(|d| d.wal.pending())
            || self.repl.as_ref().is_some_and(|r| !r.pending.is_empty())
    }

    /// Writes (and syncs, per policy) what the log holds, and ships what
    /// the region's other replicas need; sends the replies that waited for
    /// it. The worker calls this when the inbox runs dry.
    pub fn flush_wal(&mut self) {
        if let Some(d) = &mut self.durability {
            d.wal.flush();
        }
        let index = self.index;
        if let Some(r) = &mut self.repl {
            r.ship(index);
        }
    }

    /// Flushes and syncs the log (clean shutdown).
    pub fn close_wal(&mut self) {
        if let Some(d) = &mut self.durability {
            d.wal.close();
        }
    }

    /// Periodic log duty: retry a failed flush, `everysec` fsync.
    pub fn tick_wal(&mut self) {
        if let Some(d) = &mut self.durability {
            d.wal.tick();
        }
    }

    /// Why writes are refused now, if they are.
    pub(super) fn write_refusal(&self) -> Option<Refusal> {
        let d = self.durability.as_ref()?;
        d.wal
            .failure()
            .map(|_| Refusal::Unavailable(ERR_WAL.to_string()))
    }

    /// Replays one recovered record (no log, no gossip).
    pub fn restore(&mut self, hash: u64, entry: &LogEntry) {
        self.install_from(
            hash,
            &entry.key,
            entry.state.as_ref(),
            entry.start_ts,
            entry.version,
            Source::Recovery,
        );
    }

    /// Merges lattices received from a peer. Each is installed only if it
    /// wins the merge; those that do are logged (not gossiped back).
    pub fn op_merge(&mut self, entries: &[LogEntry]) -> Result<usize, Refusal> {
        if let Some(r) = self.write_refusal() {
            return Err(r);
        }
        let mut changed = 0;
        for e in entries {
            let hash = std::hash::BuildHasher::hash_one(self.table.hasher(), &e.key[..]);
            self.hlc.observe(e.version.commit_ts);
            changed += self.install_from(
                hash,
                &e.key,
                e.state.as_ref(),
                e.start_ts,
                e.version,
                Source::Peer,
            ) as usize;
        }
        Ok(changed)
    }

    /// Switches the log to segment `seq` and writes this shard's snapshot.
    pub fn op_dump(&mut self, seq: u64) -> Result<(String, u64), String> {
        let index = self.index;
        let Some(d) = &mut self.durability else {
            return Err("this shard has no data directory".into());
        };
        let segment = d
            .dir
            .create_segment(seq, index)
            .map_err(|e| format!("new log segment: {e}"))?;
        d.wal
            .rotate(Box::new(segment))
            .map_err(|e| format!("log rotation: {e}"))?;
        let now = unix_ms();
        let entries = self
            .table
            .iter()
            .filter(|r| r.expire_ms().is_none_or(|at| at > now))
            .map(|r| crate::wal::codec::EntryRef {
                key: r.key(),
                value: r.value(),
                expire_ms: r.expire_ms(),
                start_ts: r.start_ts,
                version: r.version(),
            });
        d.dir
            .write_snapshot(seq, index, entries)
            .map_err(|e| format!("snapshot file: {e}"))
    }
}

//! Where the region's ownership log lives: Raft's log, vote and
//! snapshot, kept in memory and — with a directory — on disk, so that a
//! restarted node neither votes twice in a term nor forgets an entry a
//! majority counted on it for. The log is small (a beat per node per
//! [`super::BEAT`], and a snapshot every [`super::SNAPSHOT_EVERY`]
//! entries), so the files are simple: the vote and the snapshot written
//! whole (temporary file, fsync, rename), the log as JSON lines appended
//! and fsynced, rewritten whole after a truncation or a purge.

// openraft's storage error is large; its API returns it, so ours do too.
#![allow(clippy::result_large_err)]

use std::collections::BTreeMap;
use std::fmt::Debug;
use std::io::{BufRead, Cursor, Write};
use std::ops::RangeBounds;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use openraft::storage::{LogFlushed, LogState, RaftLogStorage, RaftStateMachine, Snapshot};
use openraft::{
    Entry, EntryPayload, LogId, RaftLogReader, RaftSnapshotBuilder, SnapshotMeta, StorageError,
    StorageIOError, StoredMembership, Vote,
};
use serde::{Deserialize, Serialize};

use super::state::{Outcome, Owners};
use super::{Node, RaftId, TypeConfig};

type StorageResult<T> = Result<T, StorageError<RaftId>>;

fn io_error(e: impl std::error::Error + 'static) -> StorageError<RaftId> {
    StorageIOError::write_logs(&e).into()
}

/// Writes `bytes` to `path` whole: a temporary file, fsync, rename.
fn write_whole(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let tmp = path.with_extension("tmp");
    let mut f = std::fs::File::create(&tmp)?;
    f.write_all(bytes)?;
    f.sync_all()?;
    std::fs::rename(&tmp, path)?;
    if let Some(dir) = path.parent() {
        std::fs::File::open(dir)?.sync_all()?;
    }
    Ok(())
}

/// Raft's log and vote.
#[derive(Clone)]
pub struct LogStore {
    inner: Arc<Mutex<LogInner>>,
}

struct LogInner {
    dir: Option<PathBuf>,
    last_purged: Option<LogId<RaftId>>,
    log: BTreeMap<u64, Entry<TypeConfig>>,
    vote: Option<Vote<RaftId>>,
}

/// The first line of the log file: what was purged before its entries.
#[derive(Serialize, Deserialize)]
struct LogHead {
    last_purged: Option<LogId<RaftId>>,
}

impl LogInner {
    fn log_path(&self) -> Option<PathBuf> {
        self.dir.as_ref().map(|d| d.join("log.jsonl"))
    }

    /// Rewrites the log file from memory.
    fn rewrite(&self) -> std::io::Result<()> {
        let Some(path) = self.log_path() else {
            return Ok(());
        };
        let mut out = serde_json::to_vec(&LogHead {
            last_purged: self.last_purged,
        })?;
        out.push(b'\n');
        for e in self.log.values() {
            serde_json::to_writer(&mut out, e)?;
            out.push(b'\n');
        }
        write_whole(&path, &out)
    }

    /// Appends entries (already in memory) to the log file.
    fn append_file(&self, entries: &[Entry<TypeConfig>]) -> std::io::Result<()> {
        let Some(path) = self.log_path() else {
            return Ok(());
        };
        if !path.exists() {
            return self.rewrite();
        }
        let mut out = Vec::new();
        for e in entries {
            serde_json::to_writer(&mut out, e)?;
            out.push(b'\n');
        }
        let mut f = std::fs::OpenOptions::new().append(true).open(&path)?;
        f.write_all(&out)?;
        f.sync_data()
    }
}

impl LogStore {
    /// The log kept in `dir` (created if missing; None: memory only).
    /// A file that does not decode is an error, not an empty log: a node
    /// that forgot its vote could vote twice.
    pub fn open(dir: Option<&Path>) -> std::io::Result<LogStore> {
        let mut inner = LogInner {
            dir: dir.map(Path::to_path_buf),
            last_purged: None,
            log: BTreeMap::new(),
            vote: None,
        };
        if let Some(dir) = dir {
            std::fs::create_dir_all(dir)?;
            let bad = |what: &str, e: serde_json::Error| {
                std::io::Error::other(format!("{} in {}: {e}", what, dir.display()))
            };
            if let Ok(bytes) = std::fs::read(dir.join("vote.json")) {
                inner.vote = Some(serde_json::from_slice(&bytes).map_err(|e| bad("vote", e))?);
            }
            if let Ok(f) = std::fs::File::open(dir.join("log.jsonl")) {
                let mut lines = std::io::BufReader::new(f).lines();
                if let Some(head) = lines.next() {
                    let head: LogHead =
                        serde_json::from_str(&head?).map_err(|e| bad("log head", e))?;
                    inner.last_purged = head.last_purged;
                }
                for line in lines {
                    let line = line?;
                    // A torn last line (a crash while appending) was never
                    // acknowledged; the entries before it stand.
                    let Ok(e) = serde_json::from_str::<Entry<TypeConfig>>(&line) else {
                        break;
                    };
                    inner.log.insert(e.log_id.index, e);
                }
            }
        }
        Ok(LogStore {
            inner: Arc::new(Mutex::new(inner)),
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, LogInner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl RaftLogReader<TypeConfig> for LogStore {
    async fn try_get_log_entries<RB: RangeBounds<u64> + Clone + Debug + Send>(
        &mut self,
        range: RB,
    ) -> StorageResult<Vec<Entry<TypeConfig>>> {
        Ok(self
            .lock()
            .log
            .range(range)
            .map(|(_, e)| e.clone())
            .collect())
    }
}

impl RaftLogStorage<TypeConfig> for LogStore {
    type LogReader = Self;

    async fn get_log_state(&mut self) -> StorageResult<LogState<TypeConfig>> {
        let inner = self.lock();
        let last = inner
            .log
            .values()
            .next_back()
            .map(|e| e.log_id)
            .or(inner.last_purged);
        Ok(LogState {
            last_purged_log_id: inner.last_purged,
            last_log_id: last,
        })
    }

    async fn get_log_reader(&mut self) -> Self::LogReader {
        self.clone()
    }

    async fn save_vote(&mut self, vote: &Vote<RaftId>) -> StorageResult<()> {
        let mut inner = self.lock();
        if let Some(dir) = &inner.dir {
            let bytes = serde_json::to_vec(vote).map_err(io_error)?;
            write_whole(&dir.join("vote.json"), &bytes).map_err(io_error)?;
        }
        inner.vote = Some(*vote);
        Ok(())
    }

    async fn read_vote(&mut self) -> StorageResult<Option<Vote<RaftId>>> {
        Ok(self.lock().vote)
    }

    async fn append<I>(&mut self, entries: I, callback: LogFlushed<TypeConfig>) -> StorageResult<()>
    where
        I: IntoIterator<Item = Entry<TypeConfig>>,
    {
        let entries: Vec<_> = entries.into_iter().collect();
        let mut inner = self.lock();
        for e in &entries {
            inner.log.insert(e.log_id.index, e.clone());
        }
        let written = inner.append_file(&entries);
        let ok = written.is_ok();
        callback.log_io_completed(written);
        if ok {
            Ok(())
        } else {
            Err(io_error(std::io::Error::other("the log file write failed")))
        }
    }

    async fn truncate(&mut self, log_id: LogId<RaftId>) -> StorageResult<()> {
        let mut inner = self.lock();
        inner.log.split_off(&log_id.index);
        inner.rewrite().map_err(io_error)
    }

    async fn purge(&mut self, log_id: LogId<RaftId>) -> StorageResult<()> {
        let mut inner = self.lock();
        inner.last_purged = Some(log_id);
        inner.log = inner.log.split_off(&(log_id.index + 1));
        inner.rewrite().map_err(io_error)
    }
}

/// The state machine: the region's [`Owners`], shared with the node.
#[derive(Clone)]
pub struct StateStore {
    inner: Arc<Mutex<Applied>>,
    dir: Option<PathBuf>,
    /// The latest snapshot (also on disk with a directory).
    current: Arc<Mutex<Option<Arc<StoredSnapshot>>>>,
    /// Called with the new state after each batch applied.
    on_apply: Arc<dyn Fn(&Applied) + Send + Sync>,
}

/// The state with what Raft needs to know about it.
#[derive(Clone, Serialize, Deserialize)]
pub struct Applied {
    pub last_applied: Option<LogId<RaftId>>,
    pub membership: StoredMembership<RaftId, Node>,
    pub owners: Owners,
}

/// A snapshot as stored.
#[derive(Serialize, Deserialize)]
struct StoredSnapshot {
    meta: SnapshotMeta<RaftId, Node>,
    data: Vec<u8>,
}

impl StateStore {
    /// The state machine, from the snapshot in `dir` if there is one.
    pub fn open(
        dir: Option<&Path>,
        empty: Owners,
        on_apply: Arc<dyn Fn(&Applied) + Send + Sync>,
    ) -> std::io::Result<StateStore> {
        let mut current = None;
        let mut applied = Applied {
            last_applied: None,
            membership: StoredMembership::default(),
            owners: empty,
        };
        if let Some(snap) = dir.and_then(|d| std::fs::read(d.join("snapshot.json")).ok()) {
            let bad =
                |e: serde_json::Error| std::io::Error::other(format!("ownership snapshot: {e}"));
            let s: StoredSnapshot = serde_json::from_slice(&snap).map_err(bad)?;
            let owners: Owners = serde_json::from_slice(&s.data).map_err(bad)?;
            applied = Applied {
                last_applied: s.meta.last_log_id,
                membership: s.meta.last_membership.clone(),
                owners: owners.rebuilt(),
            };
            current = Some(Arc::new(s));
        } else {
            applied.owners = applied.owners.rebuilt();
        }
        on_apply(&applied);
        Ok(StateStore {
            inner: Arc::new(Mutex::new(applied)),
            dir: dir.map(Path::to_path_buf),
            current: Arc::new(Mutex::new(current)),
            on_apply,
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Applied> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn store_snapshot(&self, s: StoredSnapshot) -> StorageResult<()> {
        if let Some(dir) = &self.dir {
            let bytes = serde_json::to_vec(&s).map_err(io_error)?;
            write_whole(&dir.join("snapshot.json"), &bytes).map_err(io_error)?;
        }
        *self.current.lock().unwrap_or_else(|e| e.into_inner()) = Some(Arc::new(s));
        Ok(())
    }
}

impl RaftSnapshotBuilder<TypeConfig> for StateStore {
    async fn build_snapshot(&mut self) -> StorageResult<Snapshot<TypeConfig>> {
        let (data, meta) = {
            let a = self.lock();
            let data = serde_json::to_vec(&a.owners).map_err(io_error)?;
            let meta = SnapshotMeta {
                last_log_id: a.last_applied,
                last_membership: a.membership.clone(),
                snapshot_id: format!(
                    "{}-{}",
                    a.last_applied.map_or(0, |l| l.index),
                    elsa_shard::unix_ms()
                ),
            };
            (data, meta)
        };
        self.store_snapshot(StoredSnapshot {
            meta: meta.clone(),
            data: data.clone(),
        })?;
        Ok(Snapshot {
            meta,
            snapshot: Box::new(Cursor::new(data)),
        })
    }
}

impl RaftStateMachine<TypeConfig> for StateStore {
    type SnapshotBuilder = Self;

    async fn applied_state(
        &mut self,
    ) -> StorageResult<(Option<LogId<RaftId>>, StoredMembership<RaftId, Node>)> {
        let a = self.lock();
        Ok((a.last_applied, a.membership.clone()))
    }

    async fn apply<I>(&mut self, entries: I) -> StorageResult<Vec<Outcome>>
    where
        I: IntoIterator<Item = Entry<TypeConfig>>,
    {
        let mut out = Vec::new();
        let mut a = self.lock();
        for e in entries {
            a.last_applied = Some(e.log_id);
            out.push(match &e.payload {
                EntryPayload::Blank => Outcome::default(),
                EntryPayload::Normal(cmd) => a.owners.apply(cmd),
                EntryPayload::Membership(m) => {
                    a.membership = StoredMembership::new(Some(e.log_id), m.clone());
                    Outcome::default()
                }
            });
        }
        (self.on_apply)(&a);
        Ok(out)
    }

    async fn get_snapshot_builder(&mut self) -> Self::SnapshotBuilder {
        self.clone()
    }

    async fn begin_receiving_snapshot(&mut self) -> StorageResult<Box<Cursor<Vec<u8>>>> {
        Ok(Box::new(Cursor::new(Vec::new())))
    }

    async fn install_snapshot(
        &mut self,
        meta: &SnapshotMeta<RaftId, Node>,
        snapshot: Box<Cursor<Vec<u8>>>,
    ) -> StorageResult<()> {
        let data = snapshot.into_inner();
        let owners: Owners = serde_json::from_slice(&data)
            .map_err(|e| StorageIOError::read_snapshot(Some(meta.signature()), &e))?;
        self.store_snapshot(StoredSnapshot {
            meta: meta.clone(),
            data,
        })?;
        let mut a = self.lock();
        *a = Applied {
            last_applied: meta.last_log_id,
            membership: meta.last_membership.clone(),
            owners: owners.rebuilt(),
        };
        (self.on_apply)(&a);
        Ok(())
    }

    async fn get_current_snapshot(&mut self) -> StorageResult<Option<Snapshot<TypeConfig>>> {
        let current = self
            .current
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        Ok(current.map(|s| Snapshot {
            meta: s.meta.clone(),
            snapshot: Box::new(Cursor::new(s.data.clone())),
        }))
    }
}

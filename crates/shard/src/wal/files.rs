//! The data directory: log segments, snapshot files, the manifest, and
//! recovery from them.
//!
//! ```text
//! <data-dir>/wal/<seq>-<shard>.log     log segments (seq grows at each snapshot)
//! <data-dir>/snap/<seq>-<shard>.snap   one snapshot file per shard
//! <data-dir>/snap/MANIFEST             names the complete snapshot: its seq and files
//! ```
//!
//! A snapshot with sequence `s` holds everything logged in segments `< s`,
//! so recovery loads the manifest's files, then replays every segment `>= s`
//! (in any order: replay is a lattice merge).

use std::collections::HashMap;
use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};

use super::codec::{self, Corrupt, LogEntry, Tail};
use super::segment::Segment;

/// A node's data directory.
#[derive(Debug, Clone)]
pub struct DataDir {
    root: PathBuf,
    /// The open segments' record bytes, by file: their files run up to
    /// 1 MiB of zeros past the records (see [`Segment`]), which the size
    /// reported to operators leaves out.
    open: Arc<Mutex<HashMap<PathBuf, Weak<AtomicU64>>>>,
}

/// The manifest: which snapshot is complete.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Manifest {
    /// Its sequence number.
    pub seq: u64,
    /// Its files (names inside `snap/`).
    pub files: Vec<String>,
    /// When it was taken (Unix seconds).
    pub unix_secs: u64,
    /// Per shard, its collection floor when it was taken
    /// (`Shard::collection_floor`): recovery puts back no transaction
    /// record's write from before it. Empty in a manifest written before
    /// floors were kept (nothing is then held back).
    pub floors: Vec<elsa_lattice::Ts>,
}

impl Manifest {
    /// The collection floor recovery applies to shard `shard` of `shards`:
    /// its own when the node has as many shards as when the snapshot was
    /// taken, else the lowest (keys may have moved between shards).
    pub fn floor_of(&self, shard: usize, shards: usize) -> elsa_lattice::Ts {
        if self.floors.len() == shards {
            self.floors.get(shard).copied().unwrap_or(0)
        } else {
            self.floors.iter().copied().min().unwrap_or(0)
        }
    }
}

/// Why recovery stopped.
#[derive(Debug, thiserror::Error)]
pub enum RecoverError {
    /// A file could not be read.
    #[error("cannot read {0}: {1}")]
    Io(PathBuf, io::Error),
    /// A file is damaged other than at its end.
    #[error(
        "{0}: {1} — refusing to start rather than guess; move the file away to start without it"
    )]
    Corrupt(PathBuf, Corrupt),
    /// The manifest names a file that is missing or damaged.
    #[error("snapshot {0} is incomplete or damaged: {1}")]
    Snapshot(PathBuf, String),
}

/// Where a replayed record was read, and what kind of lattices it holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Origin {
    /// The snapshot: the state of every key when it was taken. A snapshot
    /// is taken with every shard of the node frozen (no multi-shard commit
    /// holding keys), so each transaction whose record it holds has its
    /// parts on this node in it — installed, then maybe overwritten or
    /// deleted since. Such a record's
    /// writes are never put back: its keys' states in the snapshot are
    /// newer, and a delete whose tombstone was collected before the
    /// snapshot would no longer be there to beat them (issue 41).
    Snapshot,
    /// A log segment written after the snapshot.
    Log,
    /// A log segment: this node's own commits (confirmed by its region,
    /// where it has replicas) — replayed as `Log`; the tail of them goes
    /// to other regions again after a restart.
    Own,
    /// A log segment: lattices another region sent, installed as they
    /// came ([`codec::Frame::Remote`]). A transaction record among them is
    /// another region's, whose writes go through the installer.
    Remote,
    /// A log segment: parts of other regions' transactions that were
    /// parked, not shown ([`codec::Frame::Parked`]); parked again.
    Parked,
}

/// What replay hands its caller, in the order of each file.
#[derive(Debug)]
pub enum Replayed {
    /// A record's lattices, and where the record was read.
    Lattices(Vec<LogEntry>, Origin),
    /// A FLUSHALL (`None`) or FLUSHDB of a database: everything committed
    /// before the timestamp is gone. Applied when it is read, as it was
    /// when it ran — a key written again after the flush must not merge
    /// with what it held before it (issue 41: a hash's old fields came
    /// back after kill -9) — and every lattice replayed later from before
    /// it is dropped.
    Flush(Option<u8>, elsa_lattice::Ts),
}

/// What recovery did.
#[derive(Debug, Default, Clone)]
pub struct Recovery {
    /// Snapshot sequence loaded (0 = none).
    pub snapshot_seq: u64,
    /// When that snapshot was taken (Unix seconds; 0 = none).
    pub snapshot_unix: u64,
    /// Files read.
    pub files: usize,
    /// Records replayed.
    pub records: u64,
    /// Lattices replayed.
    pub entries: u64,
    /// Bytes read.
    pub bytes: u64,
    /// Torn tails cut: file and the length it was cut to.
    pub torn: Vec<(PathBuf, usize)>,
    /// Largest sequence number seen in any file name.
    pub max_seq: u64,
    /// The latest FLUSHALL and FLUSHDBs logged: lattices committed before
    /// them are gone (the caller drops them once everything is replayed).
    pub flush_floor: crate::db::Floors,
    /// Own lattices left out: the region's replicas never confirmed them.
    pub unconfirmed: u64,
}

/// Own records (see [`codec::Logged::Own`]) not known confirmed yet, and
/// how far each (segment, shard) is confirmed. A confirmation may come in
/// a later segment of the shard than the records it covers.
#[derive(Default)]
struct Confirmations {
    /// Per (segment, shard): own records not covered yet, with where each
    /// ends in its file.
    waiting: std::collections::HashMap<(u64, usize), Vec<OwnRecord>>,
    confirmed: std::collections::HashMap<(u64, usize), u64>,
}

/// An own record and where it ends in its file.
type OwnRecord = (u64, Vec<LogEntry>);

/// Replays one file's records through `apply`, counting them in `r`.
/// With `own` (the file's segment and shard, and the confirmations seen so
/// far), own records wait for a confirmation covering them; without, they
/// are replayed like any.
fn replay(
    data: &[u8],
    r: &mut Recovery,
    apply: &mut impl FnMut(Replayed),
    origin: Origin,
    mut own: Option<(u64, usize, &mut Confirmations)>,
) -> Result<Tail, Corrupt> {
    r.bytes += data.len() as u64;
    r.files += 1;
    let mut emit = |r: &mut Recovery, item: Replayed| {
        if let Replayed::Lattices(rec, _) = &item {
            // Elsa's own keys (transaction records) are not counted.
            r.entries += rec
                .iter()
                .filter(|e| !e.key.starts_with(crate::INTERNAL_PREFIX))
                .count() as u64;
        }
        apply(item);
    };
    let replay = |rec| Replayed::Lattices(rec, origin);
    let own_rec = |rec| {
        Replayed::Lattices(
            rec,
            if origin == Origin::Log {
                Origin::Own
            } else {
                origin
            },
        )
    };
    codec::decode_file_at(data, |end, rec| {
        r.records += 1;
        match (rec, &mut own) {
            (codec::Logged::Remote(rec), _) => emit(r, Replayed::Lattices(rec, Origin::Remote)),
            (codec::Logged::Parked(rec), _) => emit(r, Replayed::Lattices(rec, Origin::Parked)),
            (codec::Logged::Lattices(rec), _) => emit(r, replay(rec)),
            (codec::Logged::Own(rec), None) => emit(r, own_rec(rec)),
            (codec::Logged::Own(rec), Some((seq, shard, c))) => {
                if c.confirmed.get(&(*seq, *shard)).is_some_and(|&o| o >= end) {
                    emit(r, own_rec(rec));
                } else {
                    c.waiting
                        .entry((*seq, *shard))
                        .or_default()
                        .push((end, rec));
                }
            }
            (codec::Logged::Confirmed { seq, offset }, Some((_, shard, c))) => {
                let at = c.confirmed.entry((seq, *shard)).or_default();
                *at = (*at).max(offset);
                if let Some(waiting) = c.waiting.get_mut(&(seq, *shard)) {
                    for (_, rec) in waiting.extract_if(.., |(end, _)| *end <= offset) {
                        emit(r, own_rec(rec));
                    }
                }
            }
            (codec::Logged::Confirmed { .. }, None) => {}
            (codec::Logged::Flush(floor), _) => {
                r.flush_floor.raise(None, floor);
                emit(r, Replayed::Flush(None, floor));
            }
            (codec::Logged::FlushDb(db, floor), _) => {
                r.flush_floor.raise(Some(db), floor);
                emit(r, Replayed::Flush(Some(db), floor));
            }
        }
    })
}

fn sync_dir(path: &Path) -> io::Result<()> {
    File::open(path)?.sync_all()
}

fn parse_name(name: &str, ext: &str) -> Option<(u64, usize)> {
    let stem = name.strip_suffix(ext)?;
    let (seq, shard) = stem.split_once('-')?;
    Some((seq.parse().ok()?, shard.parse().ok()?))
}

impl DataDir {
    /// Opens (creating if needed) a data directory.
    pub fn open(root: &Path) -> io::Result<DataDir> {
        fs::create_dir_all(root.join("wal"))?;
        fs::create_dir_all(root.join("snap"))?;
        Ok(DataDir {
            open: Arc::default(),
            root: root.to_path_buf(),
        })
    }

    /// The directory itself.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The file of log segment `seq` of shard `shard`.
    pub fn segment_path(&self, seq: u64, shard: usize) -> PathBuf {
        self.wal_dir().join(format!("{seq:010}-{shard:03}.log"))
    }

    fn wal_dir(&self) -> PathBuf {
        self.root.join("wal")
    }

    fn snap_dir(&self) -> PathBuf {
        self.root.join("snap")
    }

    /// Creates log segment `seq` for `shard` and makes its name durable;
    /// `fill_ahead` zeroes it ahead of the writes ([`Segment`] says why).
    pub fn create_segment(&self, seq: u64, shard: usize, fill_ahead: bool) -> io::Result<Segment> {
        let path = self.segment_path(seq, shard);
        let f = OpenOptions::new()
            .create(true)
            .write(true)
            .truncate(false)
            .open(&path)?;
        sync_dir(&self.wal_dir())?;
        let segment = Segment::new(f, fill_ahead)?;
        if let Ok(mut open) = self.open.lock() {
            open.retain(|_, len| len.strong_count() > 0);
            open.insert(path, Arc::downgrade(&segment.published()));
        }
        Ok(segment)
    }

    /// Log segments as (seq, shard, path), sorted.
    pub fn segments(&self) -> io::Result<Vec<(u64, usize, PathBuf)>> {
        let mut out = Vec::new();
        for entry in fs::read_dir(self.wal_dir())? {
            let entry = entry?;
            let name = entry.file_name().to_string_lossy().into_owned();
            if let Some((seq, shard)) = parse_name(&name, ".log") {
                out.push((seq, shard, entry.path()));
            }
        }
        out.sort();
        Ok(out)
    }

    /// Total bytes of log records: a closed segment's file, and an open
    /// one's records without the zeros written ahead of them.
    pub fn wal_bytes(&self) -> u64 {
        let open = self.open.lock().map(|o| o.clone()).unwrap_or_default();
        self.segments()
            .unwrap_or_default()
            .iter()
            .filter_map(|(_, _, p)| match open.get(p).and_then(Weak::upgrade) {
                Some(len) => Some(len.load(Ordering::Relaxed)),
                None => fs::metadata(p).ok().map(|m| m.len()),
            })
            .sum()
    }

    /// Writes one shard's snapshot file durably (temp file, fsync, rename);
    /// returns its name and size.
    pub fn write_snapshot<'a>(
        &self,
        seq: u64,
        shard: usize,
        entries: impl Iterator<Item = codec::EntryRef<'a>>,
    ) -> io::Result<(String, u64)> {
        let name = format!("{seq:010}-{shard:03}.snap");
        let tmp = self.snap_dir().join(format!("{name}.tmp"));
        let mut file = io::BufWriter::with_capacity(1 << 20, File::create(&tmp)?);
        let mut body = Vec::with_capacity(1 << 16);
        let mut count = 0u32;
        let mut frame = Vec::new();
        let mut size = 0u64;
        for e in entries {
            codec::encode_entry(&mut body, e);
            count += 1;
            if count == 1024 {
                codec::encode_frame(&mut frame, count, &body);
                file.write_all(&frame)?;
                size += frame.len() as u64;
                frame.clear();
                body.clear();
                count = 0;
            }
        }
        if count > 0 {
            codec::encode_frame(&mut frame, count, &body);
            file.write_all(&frame)?;
            size += frame.len() as u64;
        }
        let file = file.into_inner().map_err(|e| e.into_error())?;
        file.sync_all()?;
        fs::rename(&tmp, self.snap_dir().join(&name))?;
        Ok((name, size))
    }

    /// Makes `m` the current snapshot (temp file, fsync, rename, fsync dir),
    /// then deletes the log segments and snapshot files it supersedes.
    pub fn commit_manifest(&self, m: &Manifest) -> io::Result<()> {
        let mut text = format!("elsa-snapshot 1\nseq {}\nunix {}\n", m.seq, m.unix_secs);
        for f in &m.files {
            text.push_str(&format!("file {f}\n"));
        }
        for (i, floor) in m.floors.iter().enumerate() {
            text.push_str(&format!("floor {i} {floor}\n"));
        }
        let tmp = self.snap_dir().join("MANIFEST.tmp");
        let mut f = File::create(&tmp)?;
        f.write_all(text.as_bytes())?;
        f.sync_all()?;
        fs::rename(&tmp, self.snap_dir().join("MANIFEST"))?;
        sync_dir(&self.snap_dir())?;
        for (seq, _, path) in self.segments()? {
            if seq < m.seq {
                fs::remove_file(path)?;
            }
        }
        for entry in fs::read_dir(self.snap_dir())? {
            let entry = entry?;
            let name = entry.file_name().to_string_lossy().into_owned();
            let stale = match parse_name(&name, ".snap") {
                Some((seq, _)) => seq < m.seq,
                None => name.ends_with(".tmp"),
            };
            if stale {
                fs::remove_file(entry.path())?;
            }
        }
        sync_dir(&self.wal_dir())
    }

    /// The current manifest, if a snapshot was ever completed.
    pub fn manifest(&self) -> Result<Option<Manifest>, RecoverError> {
        let path = self.snap_dir().join("MANIFEST");
        let text = match fs::read_to_string(&path) {
            Ok(t) => t,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(RecoverError::Io(path, e)),
        };
        let bad = |why: &str| RecoverError::Snapshot(path.clone(), why.to_string());
        let mut lines = text.lines();
        if lines.next() != Some("elsa-snapshot 1") {
            return Err(bad("unknown manifest format"));
        }
        let mut m = Manifest {
            seq: 0,
            files: Vec::new(),
            unix_secs: 0,
            floors: Vec::new(),
        };
        for line in lines {
            match line.split_once(' ') {
                Some(("seq", v)) => m.seq = v.parse().map_err(|_| bad("bad seq"))?,
                Some(("unix", v)) => m.unix_secs = v.parse().map_err(|_| bad("bad time"))?,
                Some(("file", v)) => m.files.push(v.to_string()),
                Some(("floor", v)) => {
                    // `floor <shard> <ts>`, shards in order.
                    let floor = v
                        .split_once(' ')
                        .and_then(|(i, f)| Some((i.parse::<usize>().ok()?, f.parse().ok()?)))
                        .filter(|(i, _)| *i == m.floors.len())
                        .ok_or_else(|| bad("bad floor"))?
                        .1;
                    m.floors.push(floor);
                }
                _ => return Err(bad("unknown manifest line")),
            }
        }
        Ok(Some(m))
    }

    /// Loads the snapshot and replays the log, calling `apply` for each
    /// record with where it was read. Cuts torn tails of log segments (reported in the result);
    /// stops at damage anywhere else.
    ///
    /// With `drop_unconfirmed` (a node whose keys have other replicas in its
    /// region), the node's own commits that the log never says the replicas
    /// confirmed are left out: the node died (or was cut off) before they
    /// reached the region, which may have moved on without them — put back,
    /// they would appear late, behind writes made since (a list's element in
    /// its middle). Nothing acknowledged at level `region` is among them,
    /// and every one of them that did reach a replica comes back from it.
    pub fn recover(
        &self,
        drop_unconfirmed: bool,
        mut apply: impl FnMut(Replayed),
    ) -> Result<Recovery, RecoverError> {
        let mut r = Recovery::default();
        let manifest = self.manifest()?;
        if let Some(m) = &manifest {
            r.snapshot_seq = m.seq;
            r.snapshot_unix = m.unix_secs;
            r.max_seq = m.seq;
            for name in &m.files {
                let path = self.snap_dir().join(name);
                let data = fs::read(&path)
                    .map_err(|e| RecoverError::Snapshot(path.clone(), e.to_string()))?;
                let tail = replay(&data, &mut r, &mut apply, Origin::Snapshot, None)
                    .map_err(|c| RecoverError::Snapshot(path.clone(), c.to_string()))?;
                if tail != Tail::Clean {
                    return Err(RecoverError::Snapshot(path, "truncated".into()));
                }
            }
        }
        let floor = manifest.map_or(0, |m| m.seq);
        let segments = self
            .segments()
            .map_err(|e| RecoverError::Io(self.wal_dir(), e))?;
        let mut confirmations = Confirmations::default();
        for (seq, shard, path) in segments {
            r.max_seq = r.max_seq.max(seq);
            if seq < floor {
                continue; // superseded by the snapshot; deletion was interrupted
            }
            let data = fs::read(&path).map_err(|e| RecoverError::Io(path.clone(), e))?;
            let own = drop_unconfirmed.then_some((seq, shard, &mut confirmations));
            let tail = replay(&data, &mut r, &mut apply, Origin::Log, own)
                .map_err(|c| RecoverError::Corrupt(path.clone(), c))?;
            if let Tail::Torn { valid_len } = tail {
                let f = OpenOptions::new()
                    .write(true)
                    .open(&path)
                    .map_err(|e| RecoverError::Io(path.clone(), e))?;
                f.set_len(valid_len as u64)
                    .and_then(|_| f.sync_all())
                    .map_err(|e| RecoverError::Io(path.clone(), e))?;
                // Only zeros after the records: a segment zeroed ahead of
                // its writes (`Segment`) that was not closed cleanly; no
                // record was cut.
                if data[valid_len..].iter().any(|&b| b != 0) {
                    r.torn.push((path, valid_len));
                }
            }
        }
        r.unconfirmed = confirmations
            .waiting
            .values()
            .flatten()
            .map(|(_, rec)| rec.len() as u64)
            .sum();
        Ok(r)
    }
}

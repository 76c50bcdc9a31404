//! One log segment file, as the log's sink: written at its logical end,
//! into zeros written ahead of the writes.
//!
//! Why fill ahead, under every `appendfsync` policy:
//! - An `fdatasync` after an append must also write the inode, as the
//!   file's size changed — two device writes per commit group instead of
//!   one. Writing into blocks the file already has (zeros written and
//!   synced once per [`CHUNK`]) leaves the size alone, so each sync is one
//!   data write (PostgreSQL fills its WAL segments with zeros for the same
//!   reason). On this machine's virtual disk a 200-byte write plus
//!   `fdatasync` took 177-181 µs appending and 129-142 µs into zeros.
//! - Without any sync, an append past the file's end costs the kernel
//!   more than a write into blocks it has: ext4 zeroes the new page cache
//!   around each such write (`ext4_block_write_begin` →
//!   `zero_user_segments`), 8 % of the server's CPU under YCSB-A. Writing
//!   200,000 records of 150 or 1,000 bytes took 1.1–1.4 µs of system time
//!   each appending and 0.4–0.5 µs into zeros, the zeros' own writes
//!   included (`/tmp` on this machine's ext4; `docs/performance-log.md`).
//!
//! Zeros after the last record are not a record: recovery reads them as
//! the end of the segment and cuts them off (`DataDir::recover`), and a
//! segment closed cleanly is cut back to its records when dropped.

use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use super::{LogSink, SyncFn};

/// How far ahead a filled segment is zeroed (at most): one extra, larger
/// sync per chunk of log (the zeros go to the device with the next
/// `fdatasync`).
pub const CHUNK: u64 = 1 << 20;

/// A segment file and where its records end.
#[derive(Debug)]
pub struct Segment {
    file: File,
    /// Where the next record goes: the end of the records written.
    len: u64,
    /// The file's length on disk: `len` plus zeros written ahead.
    allocated: u64,
    /// Whether to zero ahead.
    fill_ahead: bool,
    /// `len`, for the data directory's report of log bytes (which leaves
    /// the zeros out: see `DataDir::wal_bytes`).
    published: Arc<AtomicU64>,
}

impl Segment {
    /// A sink writing at the end of `file` (opened without `O_APPEND`,
    /// where positioned writes would append anyway).
    pub fn new(file: File, fill_ahead: bool) -> io::Result<Segment> {
        let len = file.metadata()?.len();
        Ok(Segment {
            file,
            len,
            allocated: len,
            fill_ahead,
            published: Arc::new(AtomicU64::new(len)),
        })
    }

    /// Where the segment keeps its record bytes for others to read.
    pub(crate) fn published(&self) -> Arc<AtomicU64> {
        self.published.clone()
    }

    /// Bytes of records written (the log keeps its own count; tests ask).
    #[cfg(test)]
    fn len(&self) -> u64 {
        self.len
    }

    /// Zeros from the file's end to the chunk boundary after `end`. Where
    /// the disk has no room for them, gives back what it wrote of them: the
    /// record is then appended as without zeroing, and the disk's last
    /// bytes go to records, not to zeros.
    fn fill_past(&mut self, end: u64) {
        static ZEROS: [u8; 64 * 1024] = [0; 64 * 1024];
        let (before, target) = (self.allocated, (end / CHUNK + 1) * CHUNK);
        while self.allocated < target {
            let n = (target - self.allocated).min(ZEROS.len() as u64) as usize;
            if let Err(e) = self.file.write_all_at(&ZEROS[..n], self.allocated) {
                tracing::debug!("log segment: no room to zero ahead ({e}); appending");
                if self.file.set_len(before).is_ok() {
                    self.allocated = before;
                }
                return;
            }
            self.allocated += n as u64;
        }
    }
}

impl LogSink for Segment {
    fn append(&mut self, buf: &[u8]) -> io::Result<()> {
        let end = self.len + buf.len() as u64;
        if self.fill_ahead && end > self.allocated {
            self.fill_past(end);
        }
        self.file.write_all_at(buf, self.len)?;
        self.len = end;
        self.allocated = self.allocated.max(end);
        self.published.store(end, Ordering::Relaxed);
        Ok(())
    }

    fn sync(&mut self) -> io::Result<()> {
        self.file.sync_data()
    }

    fn truncate(&mut self, len: u64) -> io::Result<()> {
        // Cut the file too (not only `len`): the part of a failed write
        // beyond `len` must not stay behind a shorter record written next.
        self.file.set_len(len)?;
        self.len = len;
        self.allocated = len;
        self.published.store(len, Ordering::Relaxed);
        Ok(())
    }

    fn sync_handle(&self) -> Option<SyncFn> {
        let clone = self.file.try_clone().ok()?;
        Some(Box::new(move || clone.sync_data()))
    }
}

impl Drop for Segment {
    /// A segment closed cleanly (rotated at a snapshot, or at shutdown)
    /// keeps only its records. After a crash the zeros stay, and recovery
    /// cuts them.
    fn drop(&mut self) {
        if self.allocated > self.len {
            let _ = self.file.set_len(self.len);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn temp(tag: &str) -> std::path::PathBuf {
        std::env::temp_dir().join(format!("elsa-segment-{tag}-{}", std::process::id()))
    }

    fn open(path: &std::path::Path) -> File {
        std::fs::OpenOptions::new()
            .create(true)
            .read(true)
            .write(true)
            .truncate(false)
            .open(path)
            .unwrap()
    }

    #[test]
    fn filled_ahead_the_records_are_followed_by_zeros_until_dropped() {
        let path = temp("fill");
        let _ = std::fs::remove_file(&path);
        let mut s = Segment::new(open(&path), true).unwrap();
        s.append(b"first").unwrap();
        s.append(b"second").unwrap();
        let on_disk = std::fs::read(&path).unwrap();
        assert_eq!(on_disk.len() as u64, CHUNK, "zeros to the chunk's end");
        assert_eq!(&on_disk[..11], b"firstsecond");
        assert!(on_disk[11..].iter().all(|&b| b == 0));
        // A write past the zeros fills further.
        let big = vec![7u8; (2 * CHUNK) as usize];
        s.append(&big).unwrap();
        assert_eq!(s.len(), 11 + 2 * CHUNK);
        assert_eq!(std::fs::metadata(&path).unwrap().len(), 3 * CHUNK);
        // A failed write's leftovers are cut with the file.
        s.truncate(11).unwrap();
        s.append(b"!").unwrap();
        drop(s);
        assert_eq!(std::fs::read(&path).unwrap(), b"firstsecond!");
        let _ = std::fs::remove_file(&path);
    }

    #[test]
    fn not_filled_the_file_holds_only_the_records() {
        let path = temp("plain");
        let _ = std::fs::remove_file(&path);
        std::fs::write(&path, b"old").unwrap();
        let mut s = Segment::new(open(&path), false).unwrap();
        s.append(b"new").unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), b"oldnew");
        drop(s);
        let _ = std::fs::remove_file(&path);
    }
}

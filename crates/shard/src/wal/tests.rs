//! The log under injected faults: a fake disk that keeps what was synced,
//! loses or tears what was not, and fails writes on demand.

use std::sync::{Arc, Mutex};

use bytes::Bytes;
use elsa_lattice::Version;
use proptest::prelude::*;

use super::codec::{decode_file, Tail};
use super::*;

#[derive(Default)]
struct Disk {
    synced: Vec<u8>,
    unsynced: Vec<u8>,
    fail: bool,
    /// When failing, how many bytes of an append still reach the disk
    /// (a write cut short by ENOSPC).
    partial: usize,
}

#[derive(Clone, Default)]
struct FakeSink(Arc<Mutex<Disk>>);

impl LogSink for FakeSink {
    fn append(&mut self, buf: &[u8]) -> io::Result<()> {
        let mut d = self.0.lock().unwrap();
        if d.fail {
            let n = d.partial.min(buf.len());
            d.unsynced.extend_from_slice(&buf[..n]);
            return Err(io::Error::other("No space left on device"));
        }
        d.unsynced.extend_from_slice(buf);
        Ok(())
    }
    fn truncate(&mut self, len: u64) -> io::Result<()> {
        let mut d = self.0.lock().unwrap();
        let len = len as usize;
        if len <= d.synced.len() {
            d.synced.truncate(len);
            d.unsynced.clear();
        } else {
            let keep = len - d.synced.len();
            d.unsynced.truncate(keep);
        }
        Ok(())
    }
    fn sync(&mut self) -> io::Result<()> {
        let mut d = self.0.lock().unwrap();
        if d.fail {
            return Err(io::Error::other("No space left on device"));
        }
        let u = std::mem::take(&mut d.unsynced);
        d.synced.extend(u);
        Ok(())
    }
}

impl FakeSink {
    /// What a machine crash leaves: the synced bytes, then `keep` bytes of
    /// the unsynced ones, then `garbage` (a torn sector).
    fn crash(&self, keep: usize, garbage: &[u8]) -> Vec<u8> {
        let d = self.0.lock().unwrap();
        let mut out = d.synced.clone();
        out.extend_from_slice(&d.unsynced[..keep.min(d.unsynced.len())]);
        out.extend_from_slice(garbage);
        out
    }
}

fn current(v: &str) -> codec::EntryState {
    codec::EntryState::Plain(Some(crate::ops::Current {
        value: Bytes::copy_from_slice(v.as_bytes()),
        expire_ms: None,
        ttl_of: None,
    }))
}

/// Writes `n` one-entry records through the log; returns which were acked.
fn write_records(
    wal: &mut Wal,
    from: usize,
    n: usize,
    acked: &Arc<Mutex<Vec<usize>>>,
    flush_every: usize,
) {
    for i in from..from + n {
        wal.stage(
            format!("k{i}").as_bytes(),
            &current(&i.to_string()),
            1,
            Version::new(i as u64 + 1, 1),
            codec::Frame::Plain,
            Default::default(),
        );
        wal.seal();
        let acked = acked.clone();
        wal.defer(Box::new(move || acked.lock().unwrap().push(i)));
        if (i + 1) % flush_every == 0 {
            wal.flush();
        }
    }
}

fn replayed_keys(file: &[u8]) -> (Vec<usize>, Tail) {
    let mut keys = Vec::new();
    let tail = decode_file(file, |rec| {
        let super::codec::Logged::Lattices(rec) = rec else {
            return;
        };
        for e in rec {
            let k = String::from_utf8(e.key.to_vec()).unwrap();
            keys.push(k[1..].parse().unwrap());
        }
    })
    .expect("a crash never looks like mid-file corruption");
    (keys, tail)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    /// Under `always`: after any crash, every acknowledged record is
    /// recovered, and what is recovered is a prefix of what was written
    /// (a torn record is cut, never applied).
    #[test]
    fn always_keeps_every_acked_record(n in 1usize..60, flush_every in 1usize..8,
                                        keep in 0usize..2000, garbage in proptest::collection::vec(any::<u8>(), 0..12)) {
        let sink = FakeSink::default();
        let mut wal = Wal::new(Box::new(sink.clone()), Fsync::Always);
        let acked = Arc::new(Mutex::new(Vec::new()));
        write_records(&mut wal, 0, n, &acked, flush_every);
        let file = sink.crash(keep, &garbage);
        let (keys, _) = replayed_keys(&file);
        let acked = acked.lock().unwrap().clone();
        prop_assert!(keys.len() >= acked.len(), "acked {} recovered {}", acked.len(), keys.len());
        prop_assert_eq!(&keys[..acked.len()], &acked[..]);
        prop_assert_eq!(keys.clone(), (0..keys.len()).collect::<Vec<_>>(), "a prefix, in order");
    }

    /// Under `everysec`: a process crash (unsynced bytes survive in the OS)
    /// loses nothing acknowledged; a machine crash loses at most what came
    /// after the last sync, and still never applies a torn record.
    #[test]
    fn everysec_loses_only_unsynced_records(n in 1usize..60, keep in 0usize..2000) {
        let sink = FakeSink::default();
        let mut wal = Wal::new(Box::new(sink.clone()), Fsync::EverySec);
        let acked = Arc::new(Mutex::new(Vec::new()));
        write_records(&mut wal, 0, n, &acked, 1);
        let acked = acked.lock().unwrap().clone();
        prop_assert_eq!(acked.len(), n, "acked once written, before fsync");
        let (all, tail) = replayed_keys(&sink.crash(usize::MAX, &[]));
        prop_assert_eq!(tail, Tail::Clean);
        prop_assert_eq!(all.len(), n, "process crash: all kept");
        let (some, _) = replayed_keys(&sink.crash(keep, &[]));
        prop_assert_eq!(some.clone(), (0..some.len()).collect::<Vec<_>>());
    }
}

#[test]
fn a_full_disk_holds_acks_and_resumes_when_space_returns() {
    let sink = FakeSink::default();
    let mut wal = Wal::new(Box::new(sink.clone()), Fsync::Always);
    let acked = Arc::new(Mutex::new(Vec::new()));
    write_records(&mut wal, 0, 3, &acked, 3);
    assert_eq!(acked.lock().unwrap().len(), 3);
    sink.0.lock().unwrap().fail = true;
    write_records(&mut wal, 3, 2, &acked, 2);
    assert_eq!(
        acked.lock().unwrap().len(),
        3,
        "nothing acked while the disk is full"
    );
    assert!(wal.failure().unwrap().contains("No space left"));
    wal.tick();
    assert!(wal.failure().is_some(), "still failing");
    sink.0.lock().unwrap().fail = false;
    wal.tick();
    assert_eq!(wal.failure(), None);
    assert_eq!(*acked.lock().unwrap(), vec![0, 1, 2, 3, 4]);
    let (keys, tail) = replayed_keys(&sink.crash(0, &[]));
    assert_eq!(tail, Tail::Clean);
    assert_eq!(
        keys,
        vec![0, 1, 2, 3, 4],
        "the held records were written once, in order"
    );
}

#[test]
fn a_write_cut_short_by_a_full_disk_is_not_followed_by_a_duplicate() {
    let sink = FakeSink::default();
    let mut wal = Wal::new(Box::new(sink.clone()), Fsync::Always);
    let acked = Arc::new(Mutex::new(Vec::new()));
    write_records(&mut wal, 0, 2, &acked, 2);
    {
        let mut d = sink.0.lock().unwrap();
        d.fail = true;
        d.partial = 7; // ENOSPC after 7 bytes of the next record
    }
    write_records(&mut wal, 2, 1, &acked, 1);
    assert!(wal.failure().is_some());
    sink.0.lock().unwrap().fail = false;
    wal.tick();
    assert_eq!(*acked.lock().unwrap(), vec![0, 1, 2]);
    let (keys, tail) = replayed_keys(&sink.crash(usize::MAX, &[]));
    assert_eq!(
        tail,
        Tail::Clean,
        "no partial record left before the retried one"
    );
    assert_eq!(keys, vec![0, 1, 2]);
}

/// The same fake disk, but synced from the syncer thread (as a real file is).
#[derive(Clone, Default)]
struct ThreadedSink(FakeSink);

impl LogSink for ThreadedSink {
    fn append(&mut self, buf: &[u8]) -> io::Result<()> {
        self.0.append(buf)
    }
    fn sync(&mut self) -> io::Result<()> {
        self.0.sync()
    }
    fn truncate(&mut self, len: u64) -> io::Result<()> {
        self.0.truncate(len)
    }
    fn sync_handle(&self) -> Option<SyncFn> {
        let mut sink = self.0.clone();
        Some(Box::new(move || sink.sync()))
    }
}

#[test]
fn syncer_thread_acks_only_synced_records() {
    let sink = ThreadedSink::default();
    let mut wal = Wal::new(Box::new(sink.clone()), Fsync::Always);
    let acked = Arc::new(Mutex::new(Vec::new()));
    write_records(&mut wal, 0, 50, &acked, 3);
    // Whatever has been acknowledged so far must be synced already.
    let seen = acked.lock().unwrap().clone();
    let synced = sink.0 .0.lock().unwrap().synced.clone();
    let (keys, _) = replayed_keys(&synced);
    assert!(
        keys.len() >= seen.len(),
        "acked {} synced {}",
        seen.len(),
        keys.len()
    );
    wal.close();
    assert_eq!(
        *acked.lock().unwrap(),
        (0..50).collect::<Vec<_>>(),
        "close waits for every ack"
    );
    let (keys, tail) = replayed_keys(&sink.0.crash(0, &[]));
    assert_eq!(tail, Tail::Clean);
    assert_eq!(keys, (0..50).collect::<Vec<_>>());
}

#[test]
fn syncer_failure_holds_acks_and_refuses_until_fixed() {
    let sink = ThreadedSink::default();
    let mut wal = Wal::new(Box::new(sink.clone()), Fsync::Always);
    let acked = Arc::new(Mutex::new(Vec::new()));
    sink.0 .0.lock().unwrap().fail = true;
    write_records(&mut wal, 0, 1, &acked, 1);
    // The append itself fails here (the fake fails both): acks held.
    assert!(wal.failure().is_some());
    sink.0 .0.lock().unwrap().fail = false;
    wal.tick();
    wal.close();
    assert_eq!(*acked.lock().unwrap(), vec![0]);
    assert_eq!(wal.failure(), None);
}

#[test]
fn everysec_syncs_on_tick_after_a_second() {
    let sink = FakeSink::default();
    let mut wal = Wal::new(Box::new(sink.clone()), Fsync::EverySec);
    let acked = Arc::new(Mutex::new(Vec::new()));
    write_records(&mut wal, 0, 2, &acked, 1);
    wal.tick();
    assert!(sink.0.lock().unwrap().synced.is_empty(), "not yet a second");
    wal.last_sync -= Duration::from_secs(2);
    wal.tick();
    assert!(!sink.0.lock().unwrap().synced.is_empty());
    assert!(sink.0.lock().unwrap().unsynced.is_empty());
}

/// Own records (this node's commits, shipped to its region's replicas)
/// replay only where a confirmation covers them — in their segment or in
/// the shard's next one — when recovery drops unconfirmed ones; all of
/// them otherwise.
#[test]
fn recovery_leaves_out_own_records_no_confirmation_covers() {
    let dir = tempdir("own");
    let data = files::DataDir::open(&dir).unwrap();
    let stage = |wal: &mut Wal, k: &str, own: bool| {
        wal.stage(
            k.as_bytes(),
            &current(k),
            1,
            Version::new(2, 1),
            if own {
                codec::Frame::Own
            } else {
                codec::Frame::Plain
            },
            Default::default(),
        );
        wal.seal();
    };
    // Segment 1: a peer's lattice, two own ones confirmed in place, one
    // confirmed only from segment 2, one never.
    let mut wal = Wal::new(
        Box::new(data.create_segment(1, 0, true).unwrap()),
        Fsync::Always,
    );
    stage(&mut wal, "peer", false);
    stage(&mut wal, "own1", true);
    stage(&mut wal, "own2", true);
    wal.flush();
    let confirmed_in_place = wal.position();
    wal.stage_confirmed(1, confirmed_in_place);
    stage(&mut wal, "own3", true);
    wal.flush();
    let confirmed_later = wal.position();
    stage(&mut wal, "own4", true);
    wal.close();
    let mut wal = Wal::new(
        Box::new(data.create_segment(2, 0, false).unwrap()),
        Fsync::Always,
    );
    wal.stage_confirmed(1, confirmed_later);
    stage(&mut wal, "own5", true);
    wal.close();
    let keys = |drop: bool| {
        let mut got = Vec::new();
        let r = data
            .recover(drop, |item| {
                let crate::wal::files::Replayed::Lattices(rec, _) = item else {
                    return;
                };
                got.extend(
                    rec.into_iter()
                        .map(|e| String::from_utf8(e.key.to_vec()).unwrap()),
                )
            })
            .unwrap();
        got.sort();
        (got, r.unconfirmed)
    };
    assert_eq!(
        keys(true),
        (
            vec!["own1".into(), "own2".into(), "own3".into(), "peer".into()],
            2
        )
    );
    let (all, dropped) = keys(false);
    assert_eq!(all.len(), 6);
    assert_eq!(dropped, 0);
    let _ = std::fs::remove_dir_all(&dir);
}

/// A segment zeroed ahead of its writes (`appendfsync always`) and never
/// closed — the process killed — recovers every record, is cut back to
/// them, and is not reported torn (zeros are no record); a record torn
/// inside the zeros still is.
#[test]
fn a_segment_zeroed_ahead_recovers_after_a_crash() {
    let dir = tempdir("zeroed");
    let data = files::DataDir::open(&dir).unwrap();
    let mut wal = Wal::new(
        Box::new(data.create_segment(1, 0, true).unwrap()),
        Fsync::Always,
    );
    for k in ["a", "b", "c"] {
        wal.stage(
            k.as_bytes(),
            &current(k),
            1,
            Version::new(2, 1),
            codec::Frame::Plain,
            Default::default(),
        );
        wal.seal();
        wal.flush();
    }
    let records = wal.position();
    let path = data.segments().unwrap()[0].2.clone();
    assert!(std::fs::metadata(&path).unwrap().len() >= segment::CHUNK);
    // As kill -9 leaves it: no close, no drop.
    std::mem::forget(wal);
    let mut keys = Vec::new();
    let r = data
        .recover(false, |item| {
            if let crate::wal::files::Replayed::Lattices(rec, _) = item {
                keys.extend(rec.into_iter().map(|e| e.key))
            }
        })
        .unwrap();
    assert_eq!(
        keys,
        vec![Bytes::from("a"), Bytes::from("b"), Bytes::from("c")]
    );
    assert!(
        r.torn.is_empty(),
        "zeros reported as a torn record: {:?}",
        r.torn
    );
    assert_eq!(std::fs::metadata(&path).unwrap().len(), records);
    // A record cut short inside the zeros is torn, and cut off.
    let mut file = std::fs::read(&path).unwrap();
    let whole = file.clone();
    file.extend_from_slice(&whole[..10]); // a record's header, cut short
    file.resize(file.len() + 4096, 0);
    std::fs::write(&path, &file).unwrap();
    let r = data.recover(false, |_| {}).unwrap();
    assert_eq!(r.torn, vec![(path.clone(), records as usize)]);
    assert_eq!(std::fs::metadata(&path).unwrap().len(), records);
    let _ = std::fs::remove_dir_all(&dir);
}

fn tempdir(tag: &str) -> std::path::PathBuf {
    let d = std::env::temp_dir().join(format!("elsa-wal-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    d
}

#[test]
fn log_bytes_leave_out_the_zeros_written_ahead() {
    let dir = tempdir("zeros");
    let data = files::DataDir::open(&dir).unwrap();
    let mut seg = data.create_segment(1, 0, true).unwrap();
    seg.append(&[7u8; 100]).unwrap();
    let file = dir.join("wal").join(format!("{:010}-{:03}.log", 1, 0));
    assert_eq!(
        std::fs::metadata(&file).unwrap().len(),
        segment::CHUNK,
        "zeroed ahead to the chunk's end"
    );
    assert_eq!(data.wal_bytes(), 100, "the records only");
    seg.append(&[7u8; 50]).unwrap();
    assert_eq!(data.wal_bytes(), 150);
    drop(seg);
    assert_eq!(
        std::fs::metadata(&file).unwrap().len(),
        150,
        "closed: cut back to its records"
    );
    assert_eq!(data.wal_bytes(), 150, "a closed segment counts its file");
}

#[test]
fn a_manifest_keeps_each_shards_collection_floor() {
    let root = tempdir("manifest-floors");
    let dir = files::DataDir::open(&root).unwrap();
    let m = files::Manifest {
        seq: 3,
        files: vec!["0000000003-000.snap".into(), "0000000003-001.snap".into()],
        unix_secs: 7,
        floors: vec![100 << 16, 90 << 16],
    };
    dir.commit_manifest(&m).unwrap();
    let read = dir.manifest().unwrap().expect("a manifest");
    assert_eq!(read, m);
    // As many shards as then: each its own; otherwise the lowest.
    assert_eq!(read.floor_of(0, 2), 100 << 16);
    assert_eq!(read.floor_of(1, 2), 90 << 16);
    assert_eq!(read.floor_of(2, 4), 90 << 16);
    // A manifest from before floors were kept holds nothing back.
    std::fs::write(
        root.join("snap/MANIFEST"),
        "elsa-snapshot 1\nseq 3\nunix 7\nfile 0000000003-000.snap\n",
    )
    .unwrap();
    let old = dir.manifest().unwrap().expect("a manifest");
    assert_eq!(old.floor_of(0, 1), 0);
    // A damaged floor line is refused, not guessed.
    std::fs::write(
        root.join("snap/MANIFEST"),
        "elsa-snapshot 1\nseq 3\nunix 7\nfloor 1 5\n",
    )
    .unwrap();
    assert!(dir.manifest().is_err());
    let _ = std::fs::remove_dir_all(&root);
}

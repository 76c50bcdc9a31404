//! Durability, proved against the real `elsa server` process (issue 4): the
//! write-ahead log, snapshots and recovery, under `kill -9`, torn and
//! corrupt files, clean shutdown, SAVE/BGSAVE and a full disk.
//!
//! Every test owns its data dir ([`common::TestDir`]) so it can kill a
//! server and start another on the same files ([`common::Node`]).
//!
//! The crash loops run `ELSA_CRASH_CYCLES` kill -9 cycles each (default 5;
//! `ELSA_CRASH_SEED` replays a schedule). The long run:
//!
//! ```text
//! ELSA_CRASH_CYCLES=100 cargo test --release --test durability crash -- --nocapture
//! ```
//!
//! The disk-full test mounts a 4 MiB tmpfs, so it needs root; where `mount`
//! is denied it says so and passes without testing anything.

mod common;

#[path = "durability/crash.rs"]
mod crash;
#[path = "durability/diskfull.rs"]
mod diskfull;
#[path = "durability/edges.rs"]
mod edges;
#[path = "durability/resurrection.rs"]
mod resurrection;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use common::{env_or, Node, TestDir};
use redis::{Connection, Value};

/// The values of `keys` that exist, read with MGET in chunks.
fn mget_all(c: &mut Connection, keys: &[&str]) -> HashMap<String, String> {
    let mut out = HashMap::with_capacity(keys.len());
    for chunk in keys.chunks(500) {
        let values: Vec<Option<String>> = redis::cmd("MGET").arg(chunk).query(c).expect("MGET");
        for (k, v) in chunk.iter().zip(values) {
            if let Some(v) = v {
                out.insert(k.to_string(), v);
            }
        }
    }
    out
}

/// Asserts every pair is stored on `node`.
fn assert_all_present(node: &Node, pairs: &[(String, String)], when: &str) {
    let keys: Vec<&str> = pairs.iter().map(|(k, _)| k.as_str()).collect();
    let found = mget_all(&mut node.conn(), &keys);
    let missing: Vec<&String> = pairs
        .iter()
        .filter(|(k, v)| found.get(k) != Some(v))
        .map(|(k, _)| k)
        .collect();
    assert!(
        missing.is_empty(),
        "{when}: {} of {} keys missing or changed, e.g. {:?}",
        missing.len(),
        pairs.len(),
        &missing[..missing.len().min(5)]
    );
}

/// Writes `n` keys with one SET each (one log record each); returns them.
fn set_keys(c: &mut Connection, prefix: &str, n: usize) -> Vec<(String, String)> {
    (0..n)
        .map(|i| {
            let (k, v) = (
                format!("{prefix}:{i}"),
                format!("value-{i}-{}", "x".repeat(i % 50)),
            );
            let r: Value = redis::cmd("SET").arg(&k).arg(&v).query(c).expect("SET");
            assert_eq!(r, Value::Okay);
            (k, v)
        })
        .collect()
}

/// Writes keys every way a client can: SETs, MSETs and BEGIN…COMMIT
/// transactions over several keys (so over both shards of a 2-worker node).
fn write_mixed(c: &mut Connection, prefix: &str) -> Vec<(String, String)> {
    let mut pairs = set_keys(c, &format!("{prefix}:set"), 100);
    for m in 0..20 {
        let batch: Vec<(String, String)> = (0..4)
            .map(|i| (format!("{prefix}:mset:{m}:{i}"), format!("m{m}-{i}")))
            .collect();
        let mut cmd = redis::cmd("MSET");
        for (k, v) in &batch {
            cmd.arg(k).arg(v);
        }
        assert_eq!(cmd.query::<Value>(c).expect("MSET"), Value::Okay);
        pairs.extend(batch);
    }
    for t in 0..20 {
        redis::cmd("BEGIN").query::<Value>(c).expect("BEGIN");
        for i in 0..3 {
            let (k, v) = (format!("{prefix}:txn:{t}:{i}"), format!("t{t}-{i}"));
            redis::cmd("SET")
                .arg(&k)
                .arg(&v)
                .query::<Value>(c)
                .expect("SET in txn");
            pairs.push((k, v));
        }
        let ts = redis::cmd("COMMIT").query::<Value>(c).expect("COMMIT");
        assert!(matches!(ts, Value::Int(n) if n > 0), "COMMIT: {ts:?}");
    }
    pairs
}

/// A log segment on disk.
#[derive(Debug, Clone)]
struct Segment {
    seq: u64,
    shard: usize,
    path: PathBuf,
    len: u64,
}

/// `<data>/wal/<seq>-<shard>.log` files, sorted by (seq, shard).
fn segments(data: &Path) -> Vec<Segment> {
    let mut out: Vec<Segment> = std::fs::read_dir(data.join("wal"))
        .expect("read wal dir")
        .filter_map(|e| {
            let e = e.ok()?;
            let name = e.file_name().to_string_lossy().into_owned();
            let (seq, shard) = name.strip_suffix(".log")?.split_once('-')?;
            Some(Segment {
                seq: seq.parse().ok()?,
                shard: shard.parse().ok()?,
                path: e.path(),
                len: e.metadata().ok()?.len(),
            })
        })
        .collect();
    out.sort_by_key(|s| (s.seq, s.shard));
    out
}

/// The newest segment of each shard.
fn newest_segments(data: &Path) -> Vec<Segment> {
    let mut newest: HashMap<usize, Segment> = HashMap::new();
    for s in segments(data) {
        newest.insert(s.shard, s); // sorted by seq: the last one wins
    }
    let mut out: Vec<Segment> = newest.into_values().collect();
    out.sort_by_key(|s| s.shard);
    out
}

/// `snap/*.snap` file names.
fn snapshot_files(data: &Path) -> Vec<String> {
    let mut out: Vec<String> = std::fs::read_dir(data.join("snap"))
        .expect("read snap dir")
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".snap"))
        .collect();
    out.sort();
    out
}

/// `snap/MANIFEST`: its seq and the files it names.
fn manifest(data: &Path) -> Option<(u64, Vec<String>)> {
    let text = std::fs::read_to_string(data.join("snap/MANIFEST")).ok()?;
    let mut seq = None;
    let mut files = Vec::new();
    for line in text.lines() {
        match line.split_once(' ') {
            Some(("seq", v)) => seq = v.parse().ok(),
            Some(("file", f)) => files.push(f.to_string()),
            _ => {}
        }
    }
    Some((seq?, files))
}

fn info_u64(info: &HashMap<String, String>, field: &str) -> u64 {
    info.get(field)
        .unwrap_or_else(|| panic!("INFO persistence has no {field}: {info:?}"))
        .parse()
        .unwrap_or_else(|_| panic!("{field} is not a number: {info:?}"))
}

/// A record cut short by a crash (or garbage after the last record) is cut
/// off at restart, reported in the log and in INFO, and never applied;
/// everything before it is kept. Zeros after the last record are cut too,
/// but are no record: not reported (a segment is zeroed ahead of its
/// writes, so it ends so after a crash).
#[test]
fn torn_tail_is_cut_reported_and_kept_cut() {
    let dir = TestDir::new("torn");
    // What was acknowledged is written, so a kill -9 keeps it.
    let flags = ["--workers", "3", "--appendfsync", "everysec"];
    let mut node = Node::start(&dir.data(), &dir.log(), &flags);
    let pairs = set_keys(&mut node.conn(), "torn", 300);
    node.kill9();

    let mut newest = newest_segments(&dir.data());
    assert_eq!(newest.len(), 3, "one segment per shard: {newest:?}");
    for (i, seg) in newest.iter_mut().enumerate() {
        // Where the records end: the zeros written ahead follow.
        let bytes = std::fs::read(&seg.path).expect("read segment");
        let records = match elsa_shard::wal::codec::decode_file(&bytes, |_| {}) {
            Ok(elsa_shard::wal::codec::Tail::Torn { valid_len }) => valid_len as u64,
            other => panic!(
                "{}: no zeros after the records: {other:?}",
                seg.path.display()
            ),
        };
        assert!(records > 20, "{} holds no records", seg.path.display());
        assert!(seg.len > records, "zeroed ahead");
        let garbage = match i {
            // The start of a valid frame: a write cut short.
            0 => bytes[..20].to_vec(),
            // Random bytes.
            1 => (0..64).map(|_| rand::random::<u8>()).collect(),
            // Only the zeros: space written ahead that no record reached.
            _ => Vec::new(),
        };
        seg.len = records;
        use std::os::unix::fs::FileExt;
        std::fs::OpenOptions::new()
            .write(true)
            .open(&seg.path)
            .expect("open segment")
            .write_all_at(&garbage, records)
            .expect("write garbage where the next record would go");
    }

    let mut node = Node::start(&dir.data(), &dir.log(), &flags);
    let info = node.info("persistence");
    assert_eq!(info_u64(&info, "torn_tails_cut"), 2, "{info:?}");
    for seg in &newest {
        let len = std::fs::metadata(&seg.path).expect("segment").len();
        assert_eq!(
            len,
            seg.len,
            "{} cut back to its valid length",
            seg.path.display()
        );
    }
    let log = node.log_text();
    for (i, seg) in newest.iter().enumerate() {
        let name = seg.path.file_name().unwrap().to_string_lossy().into_owned();
        let warned = log
            .lines()
            .any(|l| l.contains("torn record") && l.contains(&name));
        assert_eq!(
            warned,
            i < 2,
            "a WARN line names {name} (not the zeros); log:\n{log}"
        );
    }
    assert_all_present(&node, &pairs, "after cutting torn tails");

    // The cut was made durable: the next start finds nothing to cut.
    node.kill9();
    let node = Node::start(&dir.data(), &dir.log(), &flags);
    let info = node.info("persistence");
    assert_eq!(info_u64(&info, "torn_tails_cut"), 0, "{info:?}");
    assert_all_present(&node, &pairs, "second restart");
}

/// A damaged record with valid records after it is not a torn write:
/// startup stops with an error naming the file, and the file is left as it
/// was. Moving the file away lets the node start.
#[test]
fn corruption_in_the_middle_stops_startup() {
    let dir = TestDir::new("corrupt");
    let flags = ["--workers", "1", "--appendfsync", "always"];
    let mut node = Node::start(&dir.data(), &dir.log(), &flags);
    set_keys(&mut node.conn(), "corrupt", 20);
    node.kill9();

    let seg = newest_segments(&dir.data()).pop().expect("a log segment");
    let mut bytes = std::fs::read(&seg.path).expect("read segment");
    // frame = magic, len, crc, count, key_len, key…: byte 20 is the first
    // key byte of the first of the 20 records.
    bytes[20] ^= 0xff;
    std::fs::write(&seg.path, &bytes).expect("write segment");

    let mut child = Node::command(&dir.data(), common::free_port(), &flags)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn elsa server");
    let deadline = Instant::now() + Duration::from_secs(20);
    let status = loop {
        if let Some(status) = child.try_wait().expect("try_wait") {
            break status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("elsa server started on a log corrupt in the middle");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let mut stderr = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut stderr)
        .expect("read stderr");
    assert!(!status.success(), "exit status {status}; stderr: {stderr}");
    let path = seg.path.display().to_string();
    assert!(
        stderr.contains(&path),
        "stderr names {path}; stderr: {stderr}"
    );
    assert!(
        stderr.to_lowercase().contains("corrupt"),
        "stderr says corrupt: {stderr}"
    );
    assert_eq!(
        std::fs::read(&seg.path).expect("read segment"),
        bytes,
        "the corrupt file is left untouched (nothing cut, nothing guessed)"
    );

    // As the message says: move the file away to start without it.
    std::fs::rename(&seg.path, dir.root.join("quarantined.log")).expect("move file away");
    let node = Node::start(&dir.data(), &dir.log(), &flags);
    let mut c = node.conn();
    assert_eq!(redis::cmd("DBSIZE").query::<i64>(&mut c).unwrap(), 0);
}

/// SIGTERM: the node snapshots, exits 0, and the next start loads the
/// snapshot instead of replaying the log.
#[test]
fn clean_shutdown_writes_a_snapshot() {
    let dir = TestDir::new("shutdown");
    let flags = ["--workers", "2"];
    let mut node = Node::start(&dir.data(), &dir.log(), &flags);
    let pairs = write_mixed(&mut node.conn(), "shutdown");
    assert!(
        manifest(&dir.data()).is_none(),
        "no snapshot before shutdown"
    );
    let status = node.terminate(Duration::from_secs(30));
    assert!(status.success(), "clean shutdown exits 0: {status}");

    let (seq, files) = manifest(&dir.data()).expect("snap/MANIFEST after shutdown");
    let snaps = snapshot_files(&dir.data());
    assert_eq!(snaps.len(), 2, "one snapshot file per shard: {snaps:?}");
    let mut named = files.clone();
    named.sort();
    assert_eq!(
        named, snaps,
        "the manifest names exactly the snapshot files"
    );
    // The snapshot switched every shard to a new segment (seq = the
    // snapshot's), and nothing was logged after it.
    let wal = segments(&dir.data());
    assert_eq!(wal.len(), 2, "{wal:?}");
    for s in &wal {
        assert_eq!(s.seq, seq, "segment older than the snapshot kept: {s:?}");
        assert_eq!(
            s.len, 0,
            "nothing logged after the shutdown snapshot: {s:?}"
        );
    }

    let mut node = Node::start(&dir.data(), &dir.log(), &flags);
    let info = node.info("persistence");
    // recovered_files counts every file recovery opened: the snapshot files
    // plus those empty segments (not the segments this start created).
    assert_eq!(
        info_u64(&info, "recovered_files"),
        (snaps.len() + wal.len()) as u64,
        "{info:?}"
    );
    assert_eq!(
        info_u64(&info, "recovered_lattices"),
        pairs.len() as u64,
        "{info:?}"
    );
    assert_eq!(info_u64(&info, "torn_tails_cut"), 0, "{info:?}");
    assert_all_present(&node, &pairs, "after clean shutdown");
    assert!(node.terminate(Duration::from_secs(30)).success());
}

/// SAVE snapshots and truncates the log; BGSAVE answers at once and
/// snapshots in the background; LASTSAVE follows both.
#[test]
fn save_bgsave_lastsave() {
    let dir = TestDir::new("save");
    let flags = ["--workers", "2"];
    let mut node = Node::start(&dir.data(), &dir.log(), &flags);
    let mut c = node.conn();
    let lastsave = |c: &mut Connection| redis::cmd("LASTSAVE").query::<u64>(c).unwrap();
    assert_eq!(lastsave(&mut c), 0, "never saved");
    let mut pairs = write_mixed(&mut c, "save");
    assert!(segments(&dir.data()).iter().any(|s| s.len > 0));

    assert_eq!(redis::cmd("SAVE").query::<String>(&mut c).unwrap(), "OK");
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let first = lastsave(&mut c);
    assert!(
        first > 0 && first.abs_diff(now) < 120,
        "LASTSAVE {first}, now {now}"
    );
    let (seq, files) = manifest(&dir.data()).expect("MANIFEST after SAVE");
    assert_eq!(files.len(), 2);
    let wal = segments(&dir.data());
    assert_eq!(wal.len(), 2, "only the new segments are left: {wal:?}");
    for s in &wal {
        assert_eq!(s.seq, seq, "segment from before the snapshot: {s:?}");
        assert_eq!(s.len, 0, "nothing written since SAVE: {s:?}");
    }
    let info = node.info("persistence");
    assert_eq!(info_u64(&info, "rdb_last_save_time"), first);
    assert_eq!(info["rdb_last_bgsave_status"], "ok");

    pairs.extend(set_keys(&mut c, "save:after", 50));
    assert_eq!(
        redis::cmd("BGSAVE").query::<String>(&mut c).unwrap(),
        "Background saving started"
    );
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let info = node.info("persistence");
        let newer = manifest(&dir.data()).is_some_and(|(s, _)| s > seq);
        if newer && info["rdb_bgsave_in_progress"] == "0" {
            assert_eq!(info["rdb_last_bgsave_status"], "ok", "{info:?}");
            break;
        }
        assert!(Instant::now() < deadline, "BGSAVE never finished: {info:?}");
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(lastsave(&mut c) >= first);
    let (seq2, _) = manifest(&dir.data()).unwrap();
    assert!(segments(&dir.data()).iter().all(|s| s.seq >= seq2));

    // Everything is in the snapshot: a kill -9 now replays no log.
    node.kill9();
    let node = Node::start(&dir.data(), &dir.log(), &flags);
    let info = node.info("persistence");
    assert_eq!(
        info_u64(&info, "recovered_lattices"),
        pairs.len() as u64,
        "{info:?}"
    );
    assert_all_present(&node, &pairs, "after BGSAVE and kill -9");
}

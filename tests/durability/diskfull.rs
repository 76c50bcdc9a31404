//! A full disk: the data dir is a 4 MiB tmpfs, filled up by the test. Writes
//! must be refused with MISCONF (a write already applied when the log failed
//! waits for its reply instead), INFO must say why, reads must go on, and
//! when space returns writes resume by themselves and nothing acknowledged
//! is lost.

use std::collections::HashMap;
use std::io::{BufRead, BufReader, ErrorKind, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use crate::common::{Node, TestDir};
use crate::{assert_all_present, mget_all, set_keys};

/// A tmpfs mounted for the test; unmounted on drop, also when it fails.
struct Tmpfs {
    dir: PathBuf,
}

impl Tmpfs {
    /// Mounts a tmpfs of `size` on `dir`; None (after saying why) only when
    /// this environment does not allow mounting at all.
    fn mount(dir: &Path, size: &str) -> Option<Tmpfs> {
        std::fs::create_dir_all(dir).expect("create mount point");
        let out = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(dir)
            .output()
            .expect("run mount");
        if out.status.success() {
            return Some(Tmpfs {
                dir: dir.to_path_buf(),
            });
        }
        let why = String::from_utf8_lossy(&out.stderr).to_lowercase();
        let denied = [
            "permission denied",
            "not permitted",
            "only root",
            "superuser",
        ];
        assert!(
            denied.iter().any(|d| why.contains(d)),
            "mount -t tmpfs failed for another reason than permission: {why}"
        );
        eprintln!("disk-full test skipped: this sandbox denies mount -t tmpfs: {why}");
        None
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let ok = Command::new("umount")
            .arg(&self.dir)
            .status()
            .is_ok_and(|s| s.success());
        if !ok {
            let _ = Command::new("umount").arg("-l").arg(&self.dir).status();
        }
    }
}

/// Writes zeros to `path` until the file system is full; returns the bytes
/// written.
fn fill(path: &Path) -> u64 {
    let mut f = std::fs::File::create(path).expect("create filler");
    let buf = vec![0u8; 64 * 1024];
    let mut total = 0u64;
    loop {
        match f.write(&buf) {
            Ok(0) => break,
            Ok(n) => total += n as u64,
            Err(e) if e.kind() == ErrorKind::StorageFull || e.raw_os_error() == Some(28) => break,
            Err(e) => panic!("filling the disk: {e}"),
        }
    }
    total
}

/// A raw RESP connection whose reply can be waited for, given up on, and
/// read later (the redis crate drops a connection after a read timeout).
struct Raw {
    reader: BufReader<TcpStream>,
    partial: String,
}

impl Raw {
    fn connect(port: u16) -> Raw {
        let stream = TcpStream::connect(("127.0.0.1", port)).expect("connect");
        Raw {
            reader: BufReader::new(stream),
            partial: String::new(),
        }
    }

    fn send(&mut self, args: &[&str]) {
        let mut out = format!("*{}\r\n", args.len());
        for a in args {
            out.push_str(&format!("${}\r\n{a}\r\n", a.len()));
        }
        self.reader
            .get_mut()
            .write_all(out.as_bytes())
            .expect("send");
    }

    /// The next one-line reply (`+OK`, `-MISCONF …`), or None if none came
    /// within `timeout`.
    fn reply(&mut self, timeout: Duration) -> Option<String> {
        self.reader
            .get_ref()
            .set_read_timeout(Some(timeout))
            .expect("read timeout");
        match self.reader.read_line(&mut self.partial) {
            Ok(0) => panic!("server closed the connection"),
            Ok(_) => Some(std::mem::take(&mut self.partial).trim_end().to_string()),
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => None,
            Err(e) => panic!("read reply: {e}"),
        }
    }
}

/// The reply to the write just sent, or None when it waits for a log that
/// cannot write (no reply yet and INFO shows the log failing) — not merely
/// slow.
fn reply_or_stall(conn: &mut Raw, node: &Node) -> Option<String> {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if let Some(line) = conn.reply(Duration::from_millis(200)) {
            return Some(line);
        }
        if node.info("persistence")["wal_status"] != "ok" {
            // One more look: the reply may have come meanwhile.
            return conn.reply(Duration::from_millis(200));
        }
        assert!(
            Instant::now() < deadline,
            "a write neither answered nor held"
        );
    }
}

/// A write sent while the disk was full whose reply has not come.
struct Waiting {
    conn: Raw,
    key: String,
    value: String,
}

const FLAGS: [&str; 4] = ["--workers", "2", "--appendfsync", "always"];

/// A node whose disk was full and has space again. Fields drop in order:
/// the server is killed before the tmpfs is unmounted and the dir removed.
struct AfterFullDisk {
    node: Node,
    _tmpfs: Tmpfs,
    dir: TestDir,
    /// Every acknowledged write.
    acked: Vec<(String, String)>,
    /// Every write answered MISCONF.
    refused: Vec<String>,
}

/// Fills the disk under a running node, checks how it refuses writes and
/// recovers when space returns; None where mounting is denied.
fn fill_and_free_the_disk(tag: &str) -> Option<AfterFullDisk> {
    let dir = TestDir::new(tag);
    let data = dir.data();
    let tmpfs = Tmpfs::mount(&data, "4m")?;
    let mut node = Node::start(&data, &dir.log(), &FLAGS);
    let mut acked: HashMap<String, String> = set_keys(&mut node.conn(), "before", 100)
        .into_iter()
        .collect();

    let filler = data.join("filler");
    let filled = fill(&filler);
    assert!(filled > 0, "nothing could be written to the tmpfs");

    // Write until both shards refuse: the first write on a shard whose log
    // cannot write waits (it was applied); the next ones are refused.
    let mut waiting: Vec<Waiting> = Vec::new();
    let mut refused: Vec<String> = Vec::new();
    let mut refused_in_a_row = 0;
    let mut conn = Raw::connect(node.port);
    // (Under `always` each log segment holds up to a megabyte of zeros
    // written ahead of its records, which take writes until used: 20,000
    // writes of 200 B are room for both.)
    for i in 0..20_000 {
        let key = format!("full:{i}");
        let value = format!("{i}-{}", "f".repeat(200));
        conn.send(&["SET", &key, &value]);
        match reply_or_stall(&mut conn, &node) {
            Some(line) if line == "+OK" => {
                acked.insert(key, value);
                refused_in_a_row = 0;
            }
            Some(line) if line.starts_with("-MISCONF") => {
                refused.push(key);
                refused_in_a_row += 1;
                if refused_in_a_row == 20 {
                    break;
                }
            }
            Some(other) => panic!("SET on a full disk answered {other}"),
            None => {
                waiting.push(Waiting { conn, key, value });
                conn = Raw::connect(node.port);
            }
        }
    }
    assert_eq!(
        refused_in_a_row, 20,
        "writes were never refused on a full disk"
    );
    // The first write on a shard whose log fails was applied, so it waits
    // for the disk; the ones after it are refused.
    assert!(
        (1..=2).contains(&waiting.len()),
        "one write per failed shard waits; the rest are refused: {} waited",
        waiting.len()
    );
    let waited = waiting.len();

    assert!(node.child.try_wait().unwrap().is_none(), "server died");
    let info = node.info("persistence");
    let status = &info["wal_status"];
    assert!(
        status.contains("write-ahead log") && status.to_lowercase().contains("space"),
        "INFO persistence says why writes fail: {info:?}"
    );
    assert_eq!(info["aof_last_write_status"], "err", "{info:?}");
    assert!(crate::info_u64(&info, "wal_write_errors") > 0, "{info:?}");
    // Reads go on; refused writes were not applied.
    let mut c = node.conn();
    assert_eq!(redis::cmd("PING").query::<String>(&mut c).unwrap(), "PONG");
    let before: Vec<(String, String)> = acked.clone().into_iter().collect();
    assert_all_present(&node, &before, "reads on a full disk");
    let refused_keys: Vec<&str> = refused.iter().map(String::as_str).collect();
    let applied = mget_all(&mut c, &refused_keys);
    assert!(
        applied.is_empty(),
        "refused writes were applied: {applied:?}"
    );

    // Space returns: writes resume by themselves, the waiting ones answer.
    std::fs::remove_file(&filler).expect("delete filler");
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut ok_in_a_row = 0;
    let mut n = 0;
    while ok_in_a_row < 20 {
        assert!(
            Instant::now() < deadline,
            "writes did not resume after space returned: {:?}",
            node.info("persistence")
        );
        let (key, value) = (format!("after:{n}"), format!("a{n}"));
        n += 1;
        conn.send(&["SET", &key, &value]);
        match conn.reply(Duration::from_secs(10)).as_deref() {
            Some("+OK") => {
                acked.insert(key, value);
                ok_in_a_row += 1;
            }
            Some(line) if line.starts_with("-MISCONF") => {
                refused.push(key);
                ok_in_a_row = 0;
                std::thread::sleep(Duration::from_millis(50));
            }
            other => panic!("SET after space returned: {other:?}"),
        }
    }
    for mut w in waiting {
        let line = w.conn.reply(Duration::from_secs(20));
        assert_eq!(
            line.as_deref(),
            Some("+OK"),
            "the write that waited: {}",
            w.key
        );
        acked.insert(w.key, w.value);
    }
    let info = node.info("persistence");
    assert_eq!(info["wal_status"], "ok", "{info:?}");
    assert_eq!(info["aof_last_write_status"], "ok", "{info:?}");
    let acked: Vec<(String, String)> = acked.into_iter().collect();
    assert_all_present(&node, &acked, "after space returned");
    let log = node.log_text();
    assert!(!log.contains("panicked"), "server panicked:\n{log}");
    assert!(
        log.contains("writes are refused until it succeeds")
            && log.contains("accepting writes again"),
        "the log tells the failure and the recovery:\n{log}"
    );
    println!(
        "disk full: {filled} filler bytes, {waited} writes waited for the disk, \
         {} refused, {} acknowledged",
        refused.len(),
        acked.len()
    );
    Some(AfterFullDisk {
        node,
        _tmpfs: tmpfs,
        dir,
        acked,
        refused,
    })
}

/// Checks, on a restarted node, that every acknowledged write is there and
/// no refused one is.
fn assert_kept(d: &AfterFullDisk, when: &str) {
    assert_all_present(&d.node, &d.acked, when);
    let refused: Vec<&str> = d.refused.iter().map(String::as_str).collect();
    let applied = mget_all(&mut d.node.conn(), &refused);
    assert!(
        applied.is_empty(),
        "{when}: refused writes came back: {applied:?}"
    );
}

/// Full disk, space back, clean shutdown (a snapshot), restart: intact.
#[test]
fn disk_full_refuses_writes_then_recovers() {
    let Some(mut d) = fill_and_free_the_disk("diskfull") else {
        return;
    };
    let status = d.node.terminate(Duration::from_secs(30));
    assert!(
        status.success(),
        "clean shutdown after a full disk: {status}"
    );
    d.node = Node::start(&d.dir.data(), &d.dir.log(), &FLAGS);
    assert_kept(&d, "clean restart after the disk was full");
}

/// Full disk, space back, kill -9, restart: every acknowledged write must
/// be replayed from the log.
/// (Regression: a write cut short by ENOSPC used to be re-appended whole on
/// retry, leaving a damaged record mid-segment, so restart refused to start.)
#[test]
fn disk_full_then_kill9_keeps_acknowledged_writes() {
    let Some(mut d) = fill_and_free_the_disk("diskfull-kill") else {
        return;
    };
    d.node.kill9();
    d.node = Node::start(&d.dir.data(), &d.dir.log(), &FLAGS);
    assert_kept(&d, "restart after kill -9 after the disk was full");
}

//! SLOWLOG: the node's log of commands that ran for at least
//! `slowlog-log-slower-than` µs, newest first, at most `slowlog-max-len`
//! entries, in Redis 7.0's format (`slowlog.c`).
//!
//! The log is one node-wide list behind a mutex, taken only when a command
//! is slow enough to be logged (or by SLOWLOG itself): the per-command cost
//! is reading the threshold, one relaxed load.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering::Relaxed};
use std::sync::Mutex;

use bytes::Bytes;

/// Arguments kept per entry (Redis's `SLOWLOG_ENTRY_MAX_ARGC`).
const MAX_ARGC: usize = 32;
/// Bytes kept per argument (Redis's `SLOWLOG_ENTRY_MAX_STRING`).
const MAX_STRING: usize = 128;

/// One logged command.
#[derive(Clone, Debug)]
pub struct Entry {
    pub id: u64,
    /// Unix time (s) when it was logged.
    pub time: u64,
    /// How long it ran, µs.
    pub usec: u64,
    pub args: Vec<Bytes>,
    /// Client address (`ip:port`) and name.
    pub addr: String,
    pub name: Bytes,
}

/// The slow log and its two settings (CONFIG SET changes them at once).
pub struct SlowLog {
    /// µs; negative: logging off (Redis's `slowlog-log-slower-than`).
    pub slower_than: AtomicI64,
    pub max_len: AtomicU64,
    next_id: AtomicU64,
    entries: Mutex<VecDeque<Entry>>,
}

impl SlowLog {
    pub fn new(slower_than: i64, max_len: u64) -> SlowLog {
        SlowLog {
            slower_than: AtomicI64::new(slower_than),
            max_len: AtomicU64::new(max_len),
            next_id: AtomicU64::new(0),
            entries: Mutex::new(VecDeque::new()),
        }
    }

    /// True when a command that ran `usec` µs is to be logged: the one
    /// check every command pays.
    #[inline]
    pub fn wants(&self, usec: u64) -> bool {
        let t = self.slower_than.load(Relaxed);
        t >= 0 && usec >= t as u64
    }

    /// True when commands are logged at all (the connection keeps a lone
    /// batch's arguments only then).
    #[inline]
    pub fn enabled(&self) -> bool {
        self.slower_than.load(Relaxed) >= 0
    }

    /// Logs a command (the caller checked [`Self::wants`]).
    pub fn push(&self, args: &[Bytes], usec: u64, addr: &str, name: Option<&Bytes>) {
        let entry = Entry {
            id: self.next_id.fetch_add(1, Relaxed),
            time: unix_now(),
            usec,
            args: trimmed(args),
            addr: addr.to_string(),
            name: name.cloned().unwrap_or_default(),
        };
        let max = self.max_len.load(Relaxed) as usize;
        if let Ok(mut e) = self.entries.lock() {
            e.push_front(entry);
            e.truncate(max);
        }
    }

    /// The newest `count` entries (all with `None`).
    pub fn get(&self, count: Option<usize>) -> Vec<Entry> {
        let e = self.entries.lock().map(|e| e.clone()).unwrap_or_default();
        let n = count.unwrap_or(e.len());
        e.into_iter().take(n).collect()
    }

    pub fn len(&self) -> usize {
        self.entries.lock().map_or(0, |e| e.len())
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn reset(&self) {
        if let Ok(mut e) = self.entries.lock() {
            e.clear();
        }
    }

    /// A smaller `slowlog-max-len` takes effect at once.
    pub fn set_max_len(&self, max: u64) {
        self.max_len.store(max, Relaxed);
        if let Ok(mut e) = self.entries.lock() {
            e.truncate(max as usize);
        }
    }
}

/// The arguments as Redis keeps them: at most 32 (the last one then says
/// how many more there were), each cut to 128 bytes plus how many more;
/// AUTH's and HELLO … AUTH's secrets redacted.
pub fn trimmed(args: &[Bytes]) -> Vec<Bytes> {
    let redact_from = match args.first() {
        Some(a) if a.eq_ignore_ascii_case(b"auth") => 1,
        Some(a) if a.eq_ignore_ascii_case(b"hello") => args
            .iter()
            .position(|a| a.eq_ignore_ascii_case(b"auth"))
            .map_or(usize::MAX, |i| i + 1),
        _ => usize::MAX,
    };
    let keep = args.len().min(MAX_ARGC);
    (0..keep)
        .map(|j| {
            if keep != args.len() && j == keep - 1 {
                Bytes::from(format!("... ({} more arguments)", args.len() - keep + 1))
            } else if j >= redact_from && j < redact_from + 2 {
                Bytes::from_static(b"(redacted)")
            } else if args[j].len() > MAX_STRING {
                let mut s = args[j][..MAX_STRING].to_vec();
                s.extend_from_slice(
                    format!("... ({} more bytes)", args[j].len() - MAX_STRING).as_bytes(),
                );
                Bytes::from(s)
            } else {
                args[j].clone()
            }
        })
        .collect()
}

fn unix_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// SLOWLOG HELP's lines (Redis 7.0's, between its header and footer).
pub const HELP: &[&str] = &[
    "GET [<count>]",
    "    Return top <count> entries from the slowlog (default: 10, -1 mean all).",
    "    Entries are made of:",
    "    id, timestamp, time in microseconds, arguments array, client IP and port,",
    "    client name",
    "LEN",
    "    Return the length of the slowlog.",
    "RESET",
    "    Reset the slowlog.",
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_commands_are_trimmed_as_redis() {
        let args: Vec<Bytes> = (0..40).map(|i| Bytes::from(format!("a{i}"))).collect();
        let t = trimmed(&args);
        assert_eq!(t.len(), 32);
        assert_eq!(&t[31][..], b"... (9 more arguments)");
        assert_eq!(&t[30][..], b"a30");
        let big = Bytes::from(vec![b'x'; 200]);
        let t = trimmed(&[Bytes::from("set"), Bytes::from("k"), big]);
        assert_eq!(t[2].len(), 128 + "... (72 more bytes)".len());
        assert!(t[2].ends_with(b"... (72 more bytes)"));
        let t = trimmed(&[Bytes::from("AUTH"), Bytes::from("u"), Bytes::from("p")]);
        assert_eq!(&t[1][..], b"(redacted)");
        assert_eq!(&t[2][..], b"(redacted)");
    }

    #[test]
    fn newest_first_and_bounded() {
        let log = SlowLog::new(0, 3);
        for i in 0..5 {
            assert!(log.wants(0));
            log.push(&[Bytes::from(format!("c{i}"))], i, "1.2.3.4:5", None);
        }
        let e = log.get(None);
        assert_eq!(e.iter().map(|e| e.id).collect::<Vec<_>>(), [4, 3, 2]);
        assert_eq!(log.get(Some(1)).len(), 1);
        log.set_max_len(1);
        assert_eq!(log.len(), 1);
        log.slower_than.store(-1, Relaxed);
        assert!(!log.wants(u64::MAX));
        log.reset();
        assert_eq!(log.len(), 0);
    }
}

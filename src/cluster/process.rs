//! The operating-system half of `elsa cluster`: is a recorded node process
//! still ours and alive, signalling it, a raw RESP PING, free-port checks and
//! log tails.

use std::ffi::OsStr;
use std::io::{Read, Seek, SeekFrom, Write};
use std::net::{TcpListener, TcpStream, UdpSocket};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::time::Duration;

/// Whether `pid` is a live (not zombie) process running the node whose
/// `--data-dir` is `data_dir`. A pid that now belongs to another program
/// (reused after the node died) counts as not running, so `down` never
/// signals a stranger.
pub fn is_running(pid: u32, data_dir: &Path) -> bool {
    if valid_pid(pid).is_none() {
        return false;
    }
    let proc_dir = Path::new("/proc").join(pid.to_string());
    if Path::new("/proc/self/stat").exists() {
        let Ok(stat) = std::fs::read_to_string(proc_dir.join("stat")) else {
            return false; // gone
        };
        // `pid (comm) S ...`: the state follows the last ')'.
        let state = stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.trim_start().chars().next());
        if matches!(state, Some('Z' | 'X' | 'x')) {
            return false; // exited, waiting to be reaped
        }
        return match std::fs::read(proc_dir.join("cmdline")) {
            Ok(cmdline) => cmdline_has_arg(&cmdline, data_dir.as_os_str()),
            // Not ours to read: not a node we started.
            Err(_) => false,
        };
    }
    // No procfs: all we can ask is whether the pid exists.
    signal(pid, 0)
}

/// Whether the NUL-separated `cmdline` holds `arg` as one whole argument.
fn cmdline_has_arg(cmdline: &[u8], arg: &OsStr) -> bool {
    cmdline.split(|&b| b == 0).any(|a| a == arg.as_bytes())
}

/// `pid` as a `pid_t` if it names one process: never 0 or 1, and never a
/// value that would wrap to a negative (process-group or broadcast) target.
fn valid_pid(pid: u32) -> Option<libc::pid_t> {
    let p = libc::pid_t::try_from(pid).ok()?;
    (p > 1).then_some(p)
}

/// Sends `sig` to the single process `pid`; true if it was delivered.
pub fn signal(pid: u32, sig: libc::c_int) -> bool {
    let Some(p) = valid_pid(pid) else {
        return false;
    };
    // SAFETY: kill(2) has no memory-safety preconditions; `p` > 1 so it
    // targets exactly one process.
    unsafe { libc::kill(p, sig) == 0 }
}

pub fn terminate(pid: u32) -> bool {
    signal(pid, libc::SIGTERM)
}

pub fn kill(pid: u32) -> bool {
    signal(pid, libc::SIGKILL)
}

/// Sends `PING` to `host:port` and returns the first reply line (without
/// CRLF), e.g. `+PONG`.
pub fn ping(host: &str, port: u16, timeout: Duration) -> Result<String, String> {
    let addr = format!("{host}:{port}");
    let sock: std::net::SocketAddr = addr.parse().map_err(|e| format!("{addr}: {e}"))?;
    let mut s = TcpStream::connect_timeout(&sock, timeout).map_err(|e| e.to_string())?;
    s.set_read_timeout(Some(timeout))
        .map_err(|e| e.to_string())?;
    s.set_write_timeout(Some(timeout))
        .map_err(|e| e.to_string())?;
    s.write_all(b"*1\r\n$4\r\nPING\r\n")
        .map_err(|e| e.to_string())?;
    let mut reply = Vec::with_capacity(16);
    let mut buf = [0u8; 64];
    while !reply.ends_with(b"\r\n") {
        let n = s.read(&mut buf).map_err(|e| e.to_string())?;
        if n == 0 {
            return Err("connection closed before a reply".into());
        }
        reply.extend_from_slice(&buf[..n]);
        if reply.len() > 4096 {
            return Err("reply too long".into());
        }
    }
    let line = reply.split(|&b| b == b'\r').next().unwrap_or_default();
    Ok(String::from_utf8_lossy(line).into_owned())
}

/// The text of `INFO <section>` from `host:port` (a bulk string reply).
pub fn info(host: &str, port: u16, section: &str, timeout: Duration) -> Result<String, String> {
    let addr = format!("{host}:{port}");
    let sock: std::net::SocketAddr = addr.parse().map_err(|e| format!("{addr}: {e}"))?;
    let mut s = TcpStream::connect_timeout(&sock, timeout).map_err(|e| e.to_string())?;
    s.set_read_timeout(Some(timeout))
        .map_err(|e| e.to_string())?;
    let req = format!("*2\r\n$4\r\nINFO\r\n${}\r\n{section}\r\n", section.len());
    s.write_all(req.as_bytes()).map_err(|e| e.to_string())?;
    let mut reply = Vec::with_capacity(4096);
    let mut buf = [0u8; 4096];
    loop {
        let n = s.read(&mut buf).map_err(|e| e.to_string())?;
        if n == 0 {
            return Err("connection closed before a reply".into());
        }
        reply.extend_from_slice(&buf[..n]);
        // `$<len>\r\n<body>\r\n`: done once the whole body is there.
        let text = String::from_utf8_lossy(&reply).into_owned();
        if let Some(rest) = text.strip_prefix('$') {
            if let Some((len, body)) = rest.split_once("\r\n") {
                let len: usize = len.parse().map_err(|_| format!("bad reply {text:?}"))?;
                if body.len() >= len + 2 {
                    return Ok(body[..len].to_string());
                }
            }
        } else if reply.ends_with(b"\r\n") {
            return Err(format!("unexpected reply {text:?}"));
        }
        if reply.len() > 1 << 20 {
            return Err("reply too long".into());
        }
    }
}

/// Whether `host:port` answers PING with PONG.
pub fn pongs(host: &str, port: u16, timeout: Duration) -> bool {
    matches!(ping(host, port, timeout).as_deref(), Ok("+PONG"))
}

/// Why `port` on `host` can't be used, if it can't (tried for TCP and UDP).
pub fn port_busy(host: &str, port: u16) -> Option<String> {
    if let Err(e) = TcpListener::bind((host, port)) {
        return Some(format!("tcp {host}:{port}: {e}"));
    }
    if let Err(e) = UdpSocket::bind((host, port)) {
        return Some(format!("udp {host}:{port}: {e}"));
    }
    None
}

/// The last `lines` lines of the file at `path` (reads at most its last
/// 64 KiB).
pub fn tail(path: &Path, lines: usize) -> String {
    const MAX: u64 = 64 * 1024;
    let read = || -> std::io::Result<Vec<u8>> {
        let mut f = std::fs::File::open(path)?;
        let len = f.metadata()?.len();
        f.seek(SeekFrom::Start(len.saturating_sub(MAX)))?;
        let mut v = Vec::new();
        f.read_to_end(&mut v)?;
        Ok(v)
    };
    match read() {
        Ok(bytes) => {
            let text = String::from_utf8_lossy(&bytes);
            let all: Vec<&str> = text.lines().collect();
            all[all.len().saturating_sub(lines)..].join("\n")
        }
        Err(e) => format!("(cannot read {}: {e})", path.display()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn never_signals_groups_or_init() {
        // 0, 1 and values that wrap negative would hit a process group,
        // init or every process.
        assert_eq!(valid_pid(0), None);
        assert_eq!(valid_pid(1), None);
        assert_eq!(valid_pid(u32::MAX), None);
        assert_eq!(valid_pid(1 << 31), None);
        assert_eq!(valid_pid(1234), Some(1234));
        assert!(!signal(0, 0));
        assert!(!signal(u32::MAX, 0));
    }

    #[test]
    fn cmdline_matches_whole_arguments() {
        let cmd = b"/bin/elsa\0server\0--data-dir\0/c/r1-1/data\0";
        assert!(cmdline_has_arg(cmd, OsStr::new("/c/r1-1/data")));
        assert!(!cmdline_has_arg(cmd, OsStr::new("/c/r1-1")));
        assert!(!cmdline_has_arg(cmd, OsStr::new("/c/r1-1/data/x")));
    }

    #[test]
    fn running_checks_identity() {
        let me = std::process::id();
        // This test process is alive but is not a node on that data dir.
        assert!(!is_running(me, Path::new("/nonexistent/elsa/data")));
        if Path::new("/proc/self/stat").exists() {
            let exe = std::env::current_exe().unwrap();
            let cmdline = std::fs::read("/proc/self/cmdline").unwrap();
            let arg0 = cmdline.split(|&b| b == 0).next().unwrap();
            assert!(
                is_running(me, Path::new(OsStr::from_bytes(arg0))),
                "{exe:?}"
            );
        }
    }

    #[test]
    fn tail_takes_last_lines() {
        let dir = std::env::temp_dir().join(format!("elsa-cluster-tail-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let f = dir.join("log");
        std::fs::write(&f, "a\nb\nc\nd\n").unwrap();
        assert_eq!(tail(&f, 2), "c\nd");
        assert_eq!(tail(&f, 10), "a\nb\nc\nd");
        assert!(tail(&dir.join("missing"), 2).contains("cannot read"));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn ping_fails_cleanly_on_a_closed_port() {
        // Bind then drop: nothing listens there any more.
        let port = TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        assert!(ping("127.0.0.1", port, Duration::from_millis(500)).is_err());
        assert!(!pongs("127.0.0.1", port, Duration::from_millis(500)));
    }
}

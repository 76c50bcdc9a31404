//! The raw RESP side of the differential test: encoding requests, a small
//! reply parser (RESP2 and RESP3 types, nested), a blocking connection, and
//! a compact one-line rendering of replies for reports.
//!
//! Deliberately not the `redis` crate: a client library folds distinctions
//! (simple vs bulk string, null bulk vs null array, map vs flat array) that
//! the comparison has to see.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

/// How long a reply may take before the server is declared stuck.
const READ_TIMEOUT: Duration = Duration::from_secs(10);

/// One reply, exactly as it came off the wire.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Reply {
    /// `+text`
    Simple(Vec<u8>),
    /// `-text` (also RESP3 blob errors `!`)
    Error(Vec<u8>),
    /// `:n`
    Int(i64),
    /// `$n` bulk string
    Bulk(Vec<u8>),
    /// `$-1` (RESP2 null bulk)
    NilBulk,
    /// `*-1` (RESP2 null array)
    NilArray,
    /// `_` (RESP3 null)
    Null,
    /// `*n`
    Array(Vec<Reply>),
    /// `%n` (RESP3)
    Map(Vec<(Reply, Reply)>),
    /// `~n` (RESP3)
    Set(Vec<Reply>),
    /// `>n` (RESP3)
    Push(Vec<Reply>),
    /// `,d` (RESP3), kept as text
    Double(Vec<u8>),
    /// `#t` / `#f` (RESP3)
    Bool(bool),
    /// `(n` (RESP3), kept as text
    BigNumber(Vec<u8>),
    /// `=n` (RESP3): format and text
    Verbatim(Vec<u8>, Vec<u8>),
    /// No reply: the connection failed or timed out (the text says how).
    /// Never equal to anything the server could send.
    Broken(String),
}

impl Reply {
    /// True for `-ERR …` style replies.
    pub fn is_error(&self) -> bool {
        matches!(self, Reply::Error(_))
    }

    /// A short tag for the reply's RESP type (used in signatures).
    pub fn kind(&self) -> &'static str {
        match self {
            Reply::Simple(_) => "simple",
            Reply::Error(_) => "error",
            Reply::Int(_) => "int",
            Reply::Bulk(_) => "bulk",
            Reply::NilBulk => "nil-bulk",
            Reply::NilArray => "nil-array",
            Reply::Null => "null",
            Reply::Array(_) => "array",
            Reply::Map(_) => "map",
            Reply::Set(_) => "set",
            Reply::Push(_) => "push",
            Reply::Double(_) => "double",
            Reply::Bool(_) => "bool",
            Reply::BigNumber(_) => "bignum",
            Reply::Verbatim(..) => "verbatim",
            Reply::Broken(_) => "broken",
        }
    }
}

/// Quotes bytes the way redis-cli prints them: bare when plain, otherwise
/// in double quotes with `\xNN` escapes.
pub fn quote(b: &[u8]) -> String {
    let plain = !b.is_empty()
        && b.iter()
            .all(|&c| c.is_ascii_graphic() && c != b'"' && c != b'\'' && c != b'\\');
    if plain {
        return String::from_utf8_lossy(b).into_owned();
    }
    let mut s = String::from("\"");
    for &c in b {
        match c {
            b'"' => s.push_str("\\\""),
            b'\\' => s.push_str("\\\\"),
            b'\n' => s.push_str("\\n"),
            b'\r' => s.push_str("\\r"),
            b'\t' => s.push_str("\\t"),
            c if c.is_ascii_graphic() || c == b' ' => s.push(c as char),
            c => s.push_str(&format!("\\x{c:02x}")),
        }
    }
    s.push('"');
    s
}

/// Shortens long texts in reports (a 20 kB value helps nobody).
fn clip(s: String) -> String {
    const MAX: usize = 160;
    if s.chars().count() <= MAX {
        return s;
    }
    let head: String = s.chars().take(MAX).collect();
    format!("{head}…({} chars)", s.chars().count())
}

impl std::fmt::Display for Reply {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        fn list(f: &mut std::fmt::Formatter<'_>, open: &str, items: &[Reply]) -> std::fmt::Result {
            write!(f, "{open}")?;
            for (i, r) in items.iter().enumerate() {
                if i > 0 {
                    write!(f, ", ")?;
                }
                write!(f, "{r}")?;
            }
            write!(f, "]")
        }
        match self {
            Reply::Simple(s) => write!(f, "+{}", clip(String::from_utf8_lossy(s).into_owned())),
            Reply::Error(s) => write!(f, "-{}", clip(String::from_utf8_lossy(s).into_owned())),
            Reply::Int(n) => write!(f, ":{n}"),
            Reply::Bulk(b) => write!(f, "{}", clip(quote_always(b))),
            Reply::NilBulk => write!(f, "(nil bulk $-1)"),
            Reply::NilArray => write!(f, "(nil array *-1)"),
            Reply::Null => write!(f, "(null _)"),
            Reply::Array(items) => list(f, "[", items),
            Reply::Set(items) => list(f, "~[", items),
            Reply::Push(items) => list(f, ">[", items),
            Reply::Map(pairs) => {
                write!(f, "{{")?;
                for (i, (k, v)) in pairs.iter().enumerate() {
                    if i > 0 {
                        write!(f, ", ")?;
                    }
                    write!(f, "{k}: {v}")?;
                }
                write!(f, "}}")
            }
            Reply::Double(d) => write!(f, ",{}", String::from_utf8_lossy(d)),
            Reply::Bool(b) => write!(f, "#{}", if *b { 't' } else { 'f' }),
            Reply::BigNumber(n) => write!(f, "({}", String::from_utf8_lossy(n)),
            Reply::Verbatim(fmt, text) => write!(
                f,
                "={}:{}",
                String::from_utf8_lossy(fmt),
                clip(quote_always(text))
            ),
            Reply::Broken(why) => write!(f, "<no reply: {why}>"),
        }
    }
}

/// Bulk strings are always shown quoted, so `"OK"` (bulk) and `+OK`
/// (simple) look different in a report.
fn quote_always(b: &[u8]) -> String {
    let q = quote(b);
    if q.starts_with('"') {
        q
    } else {
        format!("\"{q}\"")
    }
}

/// Encodes one request as a RESP array of bulk strings.
pub fn encode(args: &[Vec<u8>], out: &mut Vec<u8>) {
    out.extend_from_slice(format!("*{}\r\n", args.len()).as_bytes());
    for a in args {
        out.extend_from_slice(format!("${}\r\n", a.len()).as_bytes());
        out.extend_from_slice(a);
        out.extend_from_slice(b"\r\n");
    }
}

/// Why parsing stopped.
enum Parse {
    /// The buffer ends before the reply does.
    Incomplete,
    /// The bytes are not RESP.
    Bad(String),
}

/// Parses one reply from `buf[*pos..]`, advancing `pos` past it.
fn parse(buf: &[u8], pos: &mut usize) -> Result<Reply, Parse> {
    let line = |pos: &mut usize| -> Result<Vec<u8>, Parse> {
        let rest = &buf[*pos..];
        let end = rest
            .windows(2)
            .position(|w| w == b"\r\n")
            .ok_or(Parse::Incomplete)?;
        let l = rest[..end].to_vec();
        *pos += end + 2;
        Ok(l)
    };
    let number = |l: &[u8]| -> Result<i64, Parse> {
        std::str::from_utf8(l)
            .ok()
            .and_then(|s| s.parse().ok())
            .ok_or_else(|| Parse::Bad(format!("bad number {:?}", String::from_utf8_lossy(l))))
    };
    let blob = |pos: &mut usize, n: i64| -> Result<Vec<u8>, Parse> {
        let n = usize::try_from(n).map_err(|_| Parse::Bad(format!("bad length {n}")))?;
        if buf.len() < *pos + n + 2 {
            return Err(Parse::Incomplete);
        }
        if &buf[*pos + n..*pos + n + 2] != b"\r\n" {
            return Err(Parse::Bad("blob not terminated by CRLF".into()));
        }
        let b = buf[*pos..*pos + n].to_vec();
        *pos += n + 2;
        Ok(b)
    };
    let Some(&tag) = buf.get(*pos) else {
        return Err(Parse::Incomplete);
    };
    *pos += 1;
    let head = line(pos)?;
    let items = |pos: &mut usize, n: i64| -> Result<Vec<Reply>, Parse> {
        (0..n).map(|_| parse(buf, pos)).collect()
    };
    Ok(match tag {
        b'+' => Reply::Simple(head),
        b'-' => Reply::Error(head),
        b':' => Reply::Int(number(&head)?),
        b'$' => match number(&head)? {
            -1 => Reply::NilBulk,
            n => Reply::Bulk(blob(pos, n)?),
        },
        b'*' => match number(&head)? {
            -1 => Reply::NilArray,
            n => Reply::Array(items(pos, n)?),
        },
        b'~' => Reply::Set(items(pos, number(&head)?)?),
        b'>' => Reply::Push(items(pos, number(&head)?)?),
        b'%' => {
            let n = number(&head)?;
            let mut pairs = Vec::new();
            for _ in 0..n {
                let k = parse(buf, pos)?;
                let v = parse(buf, pos)?;
                pairs.push((k, v));
            }
            Reply::Map(pairs)
        }
        b'_' => Reply::Null,
        b',' => Reply::Double(head),
        b'#' => Reply::Bool(head == b"t"),
        b'(' => Reply::BigNumber(head),
        b'!' => Reply::Error(blob(pos, number(&head)?)?),
        b'=' => {
            let text = blob(pos, number(&head)?)?;
            if text.len() < 4 || text[3] != b':' {
                return Err(Parse::Bad("verbatim string without format".into()));
            }
            Reply::Verbatim(text[..3].to_vec(), text[4..].to_vec())
        }
        b'|' => {
            // An attribute map precedes the real reply; skip it.
            let n = number(&head)?;
            for _ in 0..2 * n {
                parse(buf, pos)?;
            }
            parse(buf, pos)?
        }
        other => return Err(Parse::Bad(format!("unknown reply type byte {other:#04x}"))),
    })
}

/// A blocking RESP connection to one server.
pub struct Conn {
    stream: TcpStream,
    buf: Vec<u8>,
    /// Set once the connection failed; every later read answers it.
    dead: Option<String>,
}

impl Conn {
    /// Connects to `127.0.0.1:port`.
    pub fn connect(port: u16) -> std::io::Result<Conn> {
        let stream = TcpStream::connect(("127.0.0.1", port))?;
        stream.set_read_timeout(Some(READ_TIMEOUT))?;
        stream.set_nodelay(true)?;
        Ok(Conn {
            stream,
            buf: Vec::new(),
            dead: None,
        })
    }

    /// How long a read waits before the reply counts as missing (10 s
    /// unless set): for a request an unoptimised build takes long over.
    #[allow(dead_code)]
    pub fn set_read_timeout(&mut self, d: Duration) {
        let _ = self.stream.set_read_timeout(Some(d));
    }

    /// Writes requests without reading anything.
    pub fn send(&mut self, reqs: &[Vec<Vec<u8>>]) {
        if self.dead.is_some() {
            return;
        }
        let mut out = Vec::new();
        for r in reqs {
            encode(r, &mut out);
        }
        if let Err(e) = self.stream.write_all(&out) {
            self.dead = Some(format!("write failed: {e}"));
        }
    }

    /// Reads the next reply; a failure becomes [`Reply::Broken`] (and
    /// poisons the connection, whose stream can no longer be trusted).
    pub fn read(&mut self) -> Reply {
        if let Some(why) = &self.dead {
            return Reply::Broken(why.clone());
        }
        loop {
            let mut pos = 0;
            match parse(&self.buf, &mut pos) {
                Ok(r) => {
                    self.buf.drain(..pos);
                    return r;
                }
                Err(Parse::Bad(why)) => {
                    let why = format!("protocol error: {why}");
                    self.dead = Some(why.clone());
                    return Reply::Broken(why);
                }
                Err(Parse::Incomplete) => {}
            }
            let mut chunk = [0u8; 64 * 1024];
            match self.stream.read(&mut chunk) {
                Ok(0) => {
                    self.dead = Some("connection closed".into());
                    return Reply::Broken("connection closed".into());
                }
                Ok(n) => self.buf.extend_from_slice(&chunk[..n]),
                Err(e) => {
                    let why = format!("read failed: {e}");
                    self.dead = Some(why.clone());
                    return Reply::Broken(why);
                }
            }
        }
    }

    /// The next reply if one comes within `wait`; a read that times out
    /// leaves the connection usable (for a subscriber's messages).
    #[allow(dead_code)]
    pub fn read_within(&mut self, wait: Duration) -> Option<Reply> {
        let deadline = std::time::Instant::now() + wait;
        loop {
            if self.dead.is_some() {
                return Some(self.read());
            }
            let mut pos = 0;
            match parse(&self.buf, &mut pos) {
                Ok(r) => {
                    self.buf.drain(..pos);
                    return Some(r);
                }
                Err(Parse::Bad(_)) => return Some(self.read()),
                Err(Parse::Incomplete) => {}
            }
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            if left.is_zero() {
                return None;
            }
            let _ = self.stream.set_read_timeout(Some(left));
            let mut chunk = [0u8; 64 * 1024];
            let got = self.stream.read(&mut chunk);
            let _ = self.stream.set_read_timeout(Some(READ_TIMEOUT));
            match got {
                Ok(0) => self.dead = Some("connection closed".into()),
                Ok(n) => self.buf.extend_from_slice(&chunk[..n]),
                Err(e)
                    if matches!(
                        e.kind(),
                        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                    ) => {}
                Err(e) => self.dead = Some(format!("read failed: {e}")),
            }
        }
    }

    /// One request, one reply.
    pub fn call(&mut self, args: &[&[u8]]) -> Reply {
        self.send(&[args.iter().map(|a| a.to_vec()).collect()]);
        self.read()
    }

    /// Sends `line` (arguments separated by single spaces) and renders the
    /// reply as the differential test reports it: `+OK`, `-ERR …`, `:1`,
    /// `"bulk"`, `(nil bulk $-1)`, `[…]`, `=txt:…` — errors in full (the
    /// report form clips long texts).
    // (For tests/commands.rs and tests/transactions.rs: the differential
    // test itself compares replies, it does not script them.)
    #[allow(dead_code)]
    pub fn call_line(&mut self, line: &str) -> String {
        let args: Vec<&[u8]> = line.split(' ').map(str::as_bytes).collect();
        match self.call(&args) {
            Reply::Error(e) => format!("-{}", String::from_utf8_lossy(&e)),
            r => r.to_string(),
        }
    }

    /// Runs each `(request, expected reply)` in order; the expected replies
    /// are redis-server 7.0's (the tests that use this pinned them there).
    #[allow(dead_code)]
    pub fn expect(&mut self, script: &[(&str, &str)]) {
        for (req, want) in script {
            assert_eq!(self.call_line(req), *want, "{req}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn one(bytes: &[u8]) -> Reply {
        let mut pos = 0;
        let r = parse(bytes, &mut pos).unwrap_or_else(|_| panic!("parse {bytes:?}"));
        assert_eq!(pos, bytes.len(), "consumed everything");
        r
    }

    #[test]
    fn parses_every_type() {
        assert_eq!(one(b"+OK\r\n"), Reply::Simple(b"OK".to_vec()));
        assert_eq!(one(b"$-1\r\n"), Reply::NilBulk);
        assert_eq!(one(b"*-1\r\n"), Reply::NilArray);
        assert_eq!(one(b"$0\r\n\r\n"), Reply::Bulk(Vec::new()));
        assert_eq!(
            one(b"*2\r\n:1\r\n*1\r\n$2\r\na\n\r\n"),
            Reply::Array(vec![
                Reply::Int(1),
                Reply::Array(vec![Reply::Bulk(b"a\n".to_vec())])
            ])
        );
        assert_eq!(
            one(b"%1\r\n+k\r\n_\r\n"),
            Reply::Map(vec![(Reply::Simple(b"k".to_vec()), Reply::Null)])
        );
        assert_eq!(
            one(b"=8\r\ntxt:ab\r\n\r\n"),
            Reply::Verbatim(b"txt".to_vec(), b"ab\r\n".to_vec())
        );
        let mut pos = 0;
        assert!(matches!(
            parse(b"$5\r\nab", &mut pos),
            Err(Parse::Incomplete)
        ));
    }
}

//! RESP: parsing requests (arrays of bulk strings, and inline commands) and
//! writing replies in RESP2 or RESP3.
//!
//! Check, then parse: [`parse_request`] answers `Ok(None)` when the buffer
//! holds only part of a request — a normal state, not an error. Lengths a
//! client declares are checked against [`Limits`] before anything is trusted,
//! and nothing is allocated from a declared length: the buffer grows only as
//! bytes actually arrive.

use bytes::{Buf, BufMut, Bytes, BytesMut};

/// Largest inline request or RESP header line, as in Redis.
pub const MAX_INLINE: usize = 64 * 1024;

/// Per-connection bounds on what a client may send.
#[derive(Clone, Copy, Debug)]
pub struct Limits {
    /// Most arguments in one command.
    pub max_args: usize,
    /// Longest bulk string.
    pub max_bulk: usize,
}

/// A protocol error: answered with `-ERR Protocol error: …`, then the
/// connection is closed (the stream cannot be trusted to resynchronise).
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
#[error("Protocol error: {0}")]
pub struct ProtocolError(pub String);

fn proto(msg: impl Into<String>) -> ProtocolError {
    ProtocolError(msg.into())
}

/// Finds `\r\n` from `start`; `Ok(None)` if not there yet.
fn line_end(buf: &[u8], start: usize, what: &str) -> Result<Option<usize>, ProtocolError> {
    let window = &buf[start..buf.len().min(start + MAX_INLINE + 2)];
    match window.windows(2).position(|w| w == b"\r\n") {
        Some(i) => Ok(Some(start + i)),
        None if window.len() > MAX_INLINE => Err(proto(format!("too big {what}"))),
        None => Ok(None),
    }
}

/// Parses a RESP length header (`-1`, `0`, `42`); at most 18 digits, so it
/// cannot overflow.
fn parse_len(bytes: &[u8]) -> Option<i64> {
    let (neg, digits) = match bytes.split_first() {
        Some((b'-', rest)) => (true, rest),
        _ => (false, bytes),
    };
    if digits.is_empty() || digits.len() > 18 {
        return None;
    }
    let mut n: i64 = 0;
    for &d in digits {
        if !d.is_ascii_digit() {
            return None;
        }
        n = n * 10 + (d - b'0') as i64;
    }
    Some(if neg { -n } else { n })
}

/// Parses one request from the front of `buf`. On success removes it from
/// `buf` and returns its arguments (possibly none, for an empty line).
pub fn parse_request(
    buf: &mut BytesMut,
    limits: &Limits,
) -> Result<Option<Vec<Bytes>>, ProtocolError> {
    parse_request_resuming(buf, limits, &mut None)
}

/// How far [`parse_request_resuming`] got into a request not yet complete
/// in the buffer, so the next call goes on from there instead of parsing
/// it again from its start: a request of a million arguments arriving in
/// 16 KiB reads was parsed again at every read (quadratic: `EXISTS` with 1M
/// keys took 7 s, Redis 0.8 s).
#[derive(Debug, Default)]
pub struct Partial {
    /// Arguments announced.
    count: usize,
    /// Where the next argument starts.
    pos: usize,
    /// The complete arguments so far: inline up to four (a command and
    /// its key and value or field need no allocation of their own).
    ranges: smallvec::SmallVec<[std::ops::Range<usize>; 4]>,
    /// The buffer length below which nothing new can complete.
    need: usize,
}

impl Partial {
    /// Bytes the buffer must hold before the request can progress: the
    /// caller may reserve them at once (a big value then lands in one
    /// allocation instead of being copied at every doubling).
    pub fn need(&self) -> usize {
        self.need
    }
}

/// [`parse_request`], resuming a multibulk request from `partial` (set when
/// it returns `Ok(None)` with part of one buffered; the buffer must only
/// have grown since).
///
/// This is the entry point every connection parses through, public so a
/// fuzz target (`fuzz/`) can drive it exactly as `conn.rs` does: feed
/// bytes in arbitrary splits, keep `partial` between calls.
pub fn parse_request_resuming(
    buf: &mut BytesMut,
    limits: &Limits,
    partial: &mut Option<Partial>,
) -> Result<Option<Vec<Bytes>>, ProtocolError> {
    if let Some(p) = partial.as_ref() {
        if buf.len() < p.need {
            return Ok(None);
        }
    }
    let mut state = match partial.take() {
        Some(p) => p,
        None => {
            if buf.is_empty() {
                return Ok(None);
            }
            if buf[0] != b'*' {
                return parse_inline(buf);
            }
            let Some(eol) = line_end(buf, 1, "mbulk count string")? else {
                return Ok(None);
            };
            let count = parse_len(&buf[1..eol]).ok_or_else(|| proto("invalid multibulk length"))?;
            if count > limits.max_args as i64 {
                return Err(proto("invalid multibulk length"));
            }
            let count = count.max(0) as usize;
            Partial {
                count,
                pos: eol + 2,
                // Ranges first (check), slices after (parse): nothing is
                // copied.
                ranges: smallvec::SmallVec::with_capacity(count.min(1024)),
                need: 0,
            }
        }
    };
    while state.ranges.len() < state.count {
        let pos = state.pos;
        if pos >= buf.len() {
            state.need = pos + 1;
            *partial = Some(state);
            return Ok(None);
        }
        if buf[pos] != b'$' {
            return Err(proto(format!("expected '$', got '{}'", buf[pos] as char)));
        }
        let Some(eol) = line_end(buf, pos + 1, "bulk count string")? else {
            state.need = buf.len() + 1;
            *partial = Some(state);
            return Ok(None);
        };
        let len = parse_len(&buf[pos + 1..eol]).ok_or_else(|| proto("invalid bulk length"))?;
        if len < 0 || len as u64 > limits.max_bulk as u64 {
            return Err(proto("invalid bulk length"));
        }
        let start = eol + 2;
        let end = start + len as usize;
        if buf.len() < end + 2 {
            state.need = end + 2;
            *partial = Some(state);
            return Ok(None);
        }
        if &buf[end..end + 2] != b"\r\n" {
            return Err(proto("bulk string not terminated by CRLF"));
        }
        state.ranges.push(start..end);
        state.pos = end + 2;
    }
    let mut frame = buf.split_to(state.pos).freeze();
    let mut args = Vec::with_capacity(state.ranges.len());
    let Some(last) = state.ranges.pop() else {
        return Ok(Some(args));
    };
    args.extend(state.ranges.into_iter().map(|r| frame.slice(r)));
    // The last argument is the frame itself, cut down: one reference
    // count less to take and give back per request.
    frame.truncate(last.end);
    frame.advance(last.start);
    args.push(frame);
    Ok(Some(args))
}

/// Inline commands (`PING\r\n`, as telnet and redis-cli send): split on
/// whitespace, with redis-cli style quotes.
fn parse_inline(buf: &mut BytesMut) -> Result<Option<Vec<Bytes>>, ProtocolError> {
    let end = match buf.iter().take(MAX_INLINE + 1).position(|&b| b == b'\n') {
        Some(i) => i,
        None if buf.len() > MAX_INLINE => return Err(proto("too big inline request")),
        None => return Ok(None),
    };
    let line = buf.split_to(end + 1);
    let text = line.strip_suffix(b"\n").unwrap_or(&line);
    let text = text.strip_suffix(b"\r").unwrap_or(text);
    split_args(text)
        .map(Some)
        .ok_or_else(|| proto("unbalanced quotes in request"))
}

/// Splits a line into arguments like Redis's `sdssplitargs`: whitespace
/// separated, `"…"` with escapes (`\n`, `\xHH`, …) and `'…'` literal.
pub fn split_args(line: &[u8]) -> Option<Vec<Bytes>> {
    let mut args = Vec::new();
    let mut i = 0;
    while i < line.len() {
        while i < line.len() && line[i].is_ascii_whitespace() {
            i += 1;
        }
        if i >= line.len() {
            break;
        }
        let mut cur = Vec::new();
        match line[i] {
            b'"' => {
                i += 1;
                loop {
                    match *line.get(i)? {
                        b'"' => break,
                        b'\\' if i + 1 < line.len() => {
                            let c = line[i + 1];
                            if c == b'x' && i + 3 < line.len() {
                                let hex = std::str::from_utf8(&line[i + 2..i + 4]).ok();
                                if let Some(v) = hex.and_then(|h| u8::from_str_radix(h, 16).ok()) {
                                    cur.push(v);
                                    i += 4;
                                    continue;
                                }
                            }
                            cur.push(match c {
                                b'n' => b'\n',
                                b'r' => b'\r',
                                b't' => b'\t',
                                b'b' => 8,
                                b'a' => 7,
                                other => other,
                            });
                            i += 2;
                        }
                        c => {
                            cur.push(c);
                            i += 1;
                        }
                    }
                }
                i += 1;
                if i < line.len() && !line[i].is_ascii_whitespace() {
                    return None; // closing quote must be followed by a space
                }
            }
            b'\'' => {
                i += 1;
                loop {
                    match *line.get(i)? {
                        b'\'' => break,
                        b'\\' if line.get(i + 1) == Some(&b'\'') => {
                            cur.push(b'\'');
                            i += 2;
                        }
                        c => {
                            cur.push(c);
                            i += 1;
                        }
                    }
                }
                i += 1;
                if i < line.len() && !line[i].is_ascii_whitespace() {
                    return None;
                }
            }
            _ => {
                while i < line.len() && !line[i].is_ascii_whitespace() {
                    cur.push(line[i]);
                    i += 1;
                }
            }
        }
        args.push(Bytes::from(cur));
    }
    Some(args)
}

/// Writes replies into a connection's output buffer in its protocol version.
pub struct ReplyWriter<'a> {
    /// The output buffer.
    pub out: &'a mut BytesMut,
    /// True after `HELLO 3`.
    pub resp3: bool,
}

impl ReplyWriter<'_> {
    fn int_line(&mut self, prefix: u8, n: i64) {
        self.out.put_u8(prefix);
        self.out
            .extend_from_slice(itoa::Buffer::new().format(n).as_bytes());
        self.out.extend_from_slice(b"\r\n");
    }

    /// `+status`
    pub fn simple(&mut self, s: &str) {
        self.out.put_u8(b'+');
        self.out.extend_from_slice(s.as_bytes());
        self.out.extend_from_slice(b"\r\n");
    }

    /// `-ERR …` (the message must include its prefix word, e.g. `ERR`).
    pub fn error(&mut self, msg: &str) {
        self.out.put_u8(b'-');
        // An error line cannot contain newlines; Redis replaces them too.
        for &b in msg.as_bytes() {
            self.out
                .put_u8(if b == b'\r' || b == b'\n' { b' ' } else { b });
        }
        self.out.extend_from_slice(b"\r\n");
    }

    /// `:n`
    pub fn int(&mut self, n: i64) {
        self.int_line(b':', n);
    }

    /// `$len\r\nbytes`
    pub fn bulk(&mut self, b: &[u8]) {
        self.int_line(b'$', b.len() as i64);
        self.out.extend_from_slice(b);
        self.out.extend_from_slice(b"\r\n");
    }

    /// Null bulk (`$-1` / `_`).
    pub fn nil(&mut self) {
        self.out
            .extend_from_slice(if self.resp3 { b"_\r\n" } else { b"$-1\r\n" });
    }

    /// Null array (`*-1` / `_`): EXEC after a failed WATCH.
    pub fn nil_array(&mut self) {
        self.out
            .extend_from_slice(if self.resp3 { b"_\r\n" } else { b"*-1\r\n" });
    }

    /// `*n` header.
    pub fn array(&mut self, n: usize) {
        self.int_line(b'*', n as i64);
    }

    /// `>n` push header (RESP3), or `*n` (RESP2): pub/sub messages and
    /// subscription confirmations.
    pub fn push(&mut self, n: usize) {
        self.int_line(if self.resp3 { b'>' } else { b'*' }, n as i64);
    }

    /// `%n` map header (RESP3), or `*2n` flat array (RESP2).
    pub fn map(&mut self, n: usize) {
        if self.resp3 {
            self.int_line(b'%', n as i64);
        } else {
            self.int_line(b'*', 2 * n as i64);
        }
    }

    /// Per-key answers (XREAD): `%n` (RESP3), or `*n` of pairs (RESP2),
    /// each begun by [`ReplyWriter::keyed_entry`].
    pub fn keyed(&mut self, n: usize) {
        self.int_line(if self.resp3 { b'%' } else { b'*' }, n as i64);
    }

    /// One pair of [`ReplyWriter::keyed`]: `*2` in RESP2, nothing in RESP3.
    pub fn keyed_entry(&mut self) {
        if !self.resp3 {
            self.array(2);
        }
    }

    /// `~n` set header (RESP3), or `*n` (RESP2).
    pub fn set(&mut self, n: usize) {
        self.int_line(if self.resp3 { b'~' } else { b'*' }, n as i64);
    }

    /// Long text (INFO): verbatim string in RESP3, bulk in RESP2.
    pub fn verbatim(&mut self, text: &str) {
        if self.resp3 {
            self.int_line(b'=', text.len() as i64 + 4);
            self.out.extend_from_slice(b"txt:");
            self.out.extend_from_slice(text.as_bytes());
            self.out.extend_from_slice(b"\r\n");
        } else {
            self.bulk(text.as_bytes());
        }
    }

    /// Pairs: RESP3 an array of two-element arrays, RESP2 one flat array.
    pub fn pairs(&mut self, pairs: &[(Bytes, Bytes)]) {
        if self.resp3 {
            self.array(pairs.len());
            for (k, v) in pairs {
                self.array(2);
                self.bulk(k);
                self.bulk(v);
            }
        } else {
            self.array(pairs.len() * 2);
            for (k, v) in pairs {
                self.bulk(k);
                self.bulk(v);
            }
        }
    }

    /// A score: `,d` (RESP3), a bulk string `%.17g` (RESP2), as Redis
    /// 7.0's `addReplyDouble`.
    pub fn double(&mut self, d: f64) {
        self.double_text(&elsa_shard::ops::zparse::format_g17(d));
    }

    /// A double written as `text`: RESP3 a double, RESP2 a bulk string
    /// (GEOPOS's coordinates: Redis's `addReplyHumanLongDouble`).
    pub fn double_text(&mut self, text: &str) {
        if self.resp3 {
            self.out.put_u8(b',');
            self.out.extend_from_slice(text.as_bytes());
            self.out.extend_from_slice(b"\r\n");
        } else {
            self.bulk(text.as_bytes());
        }
    }

    /// Members with scores: RESP3 an array of [member, double] pairs,
    /// RESP2 one flat array.
    pub fn scored(&mut self, pairs: &[(Bytes, f64)]) {
        if self.resp3 {
            self.array(pairs.len());
            for (m, s) in pairs {
                self.array(2);
                self.bulk(m);
                self.double(*s);
            }
        } else {
            self.array(pairs.len() * 2);
            for (m, s) in pairs {
                self.bulk(m);
                self.double(*s);
            }
        }
    }

    /// A list of bulk strings.
    pub fn bulks<'b>(&mut self, items: impl ExactSizeIterator<Item = &'b [u8]>) {
        self.array(items.len());
        for item in items {
            self.bulk(item);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const LIM: Limits = Limits {
        max_args: 1024,
        max_bulk: 1024,
    };

    proptest! {
        /// A request arriving in pieces of any size parses to the same
        /// arguments as in one piece, resuming where it stopped (and the
        /// request after it is untouched).
        #[test]
        fn parsing_resumes_across_reads(
            args in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..40), 1..30),
            cut in 1usize..50,
        ) {
            let refs: Vec<&[u8]> = args.iter().map(|a| &a[..]).collect();
            let mut wire = encode(&refs);
            wire.extend_from_slice(b"*1\r\n$4\r\nPING\r\n");
            let mut buf = BytesMut::new();
            let mut partial = None;
            let mut got = None;
            for chunk in wire.chunks(cut) {
                buf.extend_from_slice(chunk);
                if got.is_none() {
                    got = parse_request_resuming(&mut buf, &LIM, &mut partial).unwrap();
                    if got.is_none() {
                        let header_done = buf.windows(2).any(|w| w == b"\r\n");
                        prop_assert!(partial.as_ref().is_some_and(|p| p.need() > buf.len()) || !header_done);
                    }
                }
            }
            let got = got.unwrap();
            prop_assert_eq!(got.iter().map(|b| b.to_vec()).collect::<Vec<_>>(), args);
            let next = parse_request_resuming(&mut buf, &LIM, &mut partial).unwrap().unwrap();
            prop_assert_eq!(&next[0][..], b"PING");
        }
    }

    fn encode(args: &[&[u8]]) -> Vec<u8> {
        let mut v = format!("*{}\r\n", args.len()).into_bytes();
        for a in args {
            v.extend_from_slice(format!("${}\r\n", a.len()).as_bytes());
            v.extend_from_slice(a);
            v.extend_from_slice(b"\r\n");
        }
        v
    }

    #[test]
    fn parses_pipelines_and_waits_for_more() {
        let mut buf = BytesMut::new();
        let one = encode(&[b"SET", b"k", b"v"]);
        buf.extend_from_slice(&one);
        buf.extend_from_slice(&one[..5]);
        let got = parse_request(&mut buf, &LIM).unwrap().unwrap();
        assert_eq!(
            got,
            vec![Bytes::from("SET"), Bytes::from("k"), Bytes::from("v")]
        );
        assert_eq!(parse_request(&mut buf, &LIM).unwrap(), None);
        buf.extend_from_slice(&one[5..]);
        assert!(parse_request(&mut buf, &LIM).unwrap().is_some());
        assert!(buf.is_empty());
    }

    #[test]
    fn refuses_hostile_lengths_without_allocating() {
        let mut buf = BytesMut::from(&b"*99999999999\r\n"[..]);
        assert!(parse_request(&mut buf, &LIM).is_err());
        let mut buf = BytesMut::from(&b"*1\r\n$2000000000\r\n"[..]);
        assert!(parse_request(&mut buf, &LIM).is_err());
        let mut buf = BytesMut::from(&b"*1\r\n$-5\r\n"[..]);
        assert!(parse_request(&mut buf, &LIM).is_err());
        let mut buf = BytesMut::from(&b"*1\r\n$3\r\nabcXY"[..]);
        assert!(parse_request(&mut buf, &LIM).is_err());
        let mut buf = BytesMut::from(&b"*1\r\n:3\r\n"[..]);
        assert!(parse_request(&mut buf, &LIM).is_err());
    }

    #[test]
    fn inline_commands_with_quotes() {
        let mut buf = BytesMut::from(&b"SET \"a b\" 'c d' \"\\x41\\n\"\r\nPING\n"[..]);
        let got = parse_request(&mut buf, &LIM).unwrap().unwrap();
        assert_eq!(
            got,
            vec![
                Bytes::from("SET"),
                Bytes::from("a b"),
                Bytes::from("c d"),
                Bytes::from("A\n")
            ]
        );
        assert_eq!(
            parse_request(&mut buf, &LIM).unwrap().unwrap(),
            vec![Bytes::from("PING")]
        );
        let mut bad = BytesMut::from(&b"SET \"unterminated\r\n"[..]);
        assert!(parse_request(&mut bad, &LIM).is_err());
    }

    #[test]
    fn integers_format_like_redis() {
        let mut out = BytesMut::new();
        let mut w = ReplyWriter {
            out: &mut out,
            resp3: false,
        };
        w.int(i64::MIN);
        w.int(0);
        w.int(42);
        assert_eq!(&out[..], b":-9223372036854775808\r\n:0\r\n:42\r\n");
    }

    proptest! {
        #[test]
        fn never_panics_on_garbage(data in proptest::collection::vec(any::<u8>(), 0..300)) {
            let mut buf = BytesMut::from(&data[..]);
            for _ in 0..10 {
                match parse_request(&mut buf, &LIM) {
                    Ok(Some(_)) => continue,
                    _ => break,
                }
            }
        }

        #[test]
        fn roundtrips_any_args(args in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..50), 1..8),
                               split in 0usize..400) {
            let refs: Vec<&[u8]> = args.iter().map(|a| &a[..]).collect();
            let wire = encode(&refs);
            let split = split.min(wire.len());
            let mut buf = BytesMut::from(&wire[..split]);
            let first = parse_request(&mut buf, &LIM).unwrap();
            let got = match first {
                Some(g) => g,
                None => {
                    buf.extend_from_slice(&wire[split..]);
                    parse_request(&mut buf, &LIM).unwrap().unwrap()
                }
            };
            let want: Vec<Bytes> = args.into_iter().map(Bytes::from).collect();
            prop_assert_eq!(got, want);
        }
    }
}

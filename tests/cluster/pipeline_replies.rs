//! A failing pipelined batch answers exactly one reply per command, in
//! order, each failed command with its own error (issue 12, item 1).
//!
//! Two regions (`a`: two nodes, `b`: one) with `replication = 2pc`, so a
//! write is acknowledged only once the other region has it (acknowledgement
//! level `all`). Node 0 is then cut off from region `b` with `ELSA.FAULT
//! ISOLATE`: every write it coordinates commits in region `a` but cannot be
//! confirmed by `b`, so it answers an error. A pipeline of 10 SETs on
//! distinct keys (spread over both nodes and all shards of region `a`) is
//! written to node 0 in one `write`, over raw TCP, and the replies are
//! parsed one by one off the socket: exactly 10 must arrive, each `+OK` or
//! an error, and a `PING` sent afterwards on the same connection must
//! answer `+PONG` — one reply missing would leave the reader waiting, one
//! too many would be read instead of the `PONG`. A second pipeline
//! interleaves the SETs with GETs of keys written before the cut (reads are
//! not waiting for the other region), so the order of the replies shows:
//! every GET's reply must be its own key's value, at its own position.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use crate::common::cluster::Cluster;
use crate::one_at_a_time;

/// One RESP reply, as read off the socket.
#[derive(Debug, Clone, PartialEq)]
enum Reply {
    Status(String),
    Error(String),
    Int(i64),
    Bulk(Option<Vec<u8>>),
    Array(Option<Vec<Reply>>),
}

impl Reply {
    fn is_ok(&self) -> bool {
        matches!(self, Reply::Status(s) if s == "OK")
    }

    fn is_error(&self) -> bool {
        matches!(self, Reply::Error(_))
    }
}

/// A raw RESP connection: requests written as bytes, replies parsed one at
/// a time, so the test sees exactly what the server sent.
struct Raw {
    writer: TcpStream,
    reader: BufReader<TcpStream>,
}

impl Raw {
    fn connect(port: u16, timeout: Duration) -> Raw {
        let s = TcpStream::connect(("127.0.0.1", port)).expect("connect");
        s.set_read_timeout(Some(timeout)).expect("read timeout");
        s.set_write_timeout(Some(timeout)).expect("write timeout");
        s.set_nodelay(true).expect("nodelay");
        Raw {
            reader: BufReader::new(s.try_clone().expect("clone socket")),
            writer: s,
        }
    }

    /// Writes every command in one `write` call (one pipeline).
    fn send(&mut self, cmds: &[Vec<&str>]) {
        let mut buf = Vec::new();
        for c in cmds {
            buf.extend_from_slice(format!("*{}\r\n", c.len()).as_bytes());
            for a in c {
                buf.extend_from_slice(format!("${}\r\n{a}\r\n", a.len()).as_bytes());
            }
        }
        self.writer.write_all(&buf).expect("write pipeline");
    }

    fn line(&mut self) -> std::io::Result<String> {
        let mut l = String::new();
        let n = self.reader.read_line(&mut l)?;
        if n == 0 {
            return Err(std::io::Error::new(
                std::io::ErrorKind::UnexpectedEof,
                "connection closed",
            ));
        }
        assert!(l.ends_with("\r\n"), "reply line not ended by CRLF: {l:?}");
        l.truncate(l.len() - 2);
        Ok(l)
    }

    /// The next reply, or the I/O error (a timeout: nothing more came).
    fn reply(&mut self) -> std::io::Result<Reply> {
        let l = self.line()?;
        let (kind, rest) = l.split_at(1);
        let num = |s: &str| -> i64 {
            s.parse()
                .unwrap_or_else(|_| panic!("bad number in reply line {l:?}"))
        };
        Ok(match kind {
            "+" => Reply::Status(rest.to_string()),
            "-" => Reply::Error(rest.to_string()),
            ":" => Reply::Int(num(rest)),
            "$" => {
                let n = num(rest);
                if n < 0 {
                    Reply::Bulk(None)
                } else {
                    let mut b = vec![0u8; n as usize + 2];
                    self.reader.read_exact(&mut b)?;
                    assert_eq!(&b[n as usize..], b"\r\n", "bulk not ended by CRLF");
                    b.truncate(n as usize);
                    Reply::Bulk(Some(b))
                }
            }
            "*" => {
                let n = num(rest);
                if n < 0 {
                    Reply::Array(None)
                } else {
                    let mut items = Vec::with_capacity(n as usize);
                    for _ in 0..n {
                        items.push(self.reply()?);
                    }
                    Reply::Array(Some(items))
                }
            }
            _ => panic!("unexpected reply line {l:?}"),
        })
    }

    /// Reads replies until `n` arrived or none comes within the timeout;
    /// returns what arrived and the error that stopped reading, if any.
    fn replies(&mut self, n: usize) -> (Vec<Reply>, Option<std::io::Error>) {
        let mut got = Vec::with_capacity(n);
        while got.len() < n {
            match self.reply() {
                Ok(r) => got.push(r),
                Err(e) => return (got, Some(e)),
            }
        }
        (got, None)
    }

    /// `PING` on this connection must answer `+PONG`: the replies before it
    /// were exactly the ones expected.
    fn assert_pong(&mut self, what: &str) {
        self.send(&[vec!["PING"]]);
        let r = self.reply();
        assert!(
            matches!(&r, Ok(Reply::Status(s)) if s == "PONG"),
            "{what}: PING after the pipeline's replies answered {r:?} instead of +PONG \
             (the pipeline got more replies than commands)"
        );
    }
}

/// Sends `cmds` as one pipeline and reads exactly `cmds.len()` replies,
/// then checks with `PING` that no reply is left over. Returns the replies.
fn pipeline(con: &mut Raw, cmds: &[Vec<&str>], what: &str) -> Vec<Reply> {
    let started = Instant::now();
    con.send(cmds);
    let (got, stopped) = con.replies(cmds.len());
    assert!(
        stopped.is_none(),
        "{what}: {} commands pipelined, {} replies arrived in {:.1?}, then reading failed: {:?}\n\
         replies: {got:#?}",
        cmds.len(),
        got.len(),
        started.elapsed(),
        stopped
    );
    con.assert_pong(what);
    println!(
        "[pipeline_replies] {what}: {} replies in {:.1?}: {}",
        got.len(),
        started.elapsed(),
        summary(&got)
    );
    got
}

/// `OK ×3, ERR … ×7` style summary of consecutive equal replies.
fn summary(replies: &[Reply]) -> String {
    let mut out: Vec<(String, usize)> = Vec::new();
    for r in replies {
        let s = match r {
            Reply::Status(s) => s.clone(),
            Reply::Error(e) => format!("-{e}"),
            Reply::Bulk(Some(b)) => format!("\"{}\"", String::from_utf8_lossy(b)),
            other => format!("{other:?}"),
        };
        match out.last_mut() {
            Some((last, n)) if *last == s => *n += 1,
            _ => out.push((s, 1)),
        }
    }
    out.iter()
        .map(|(s, n)| format!("{s} ×{n}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Borrowed argument lists of owned commands.
fn refs(cmds: &[Vec<String>]) -> Vec<Vec<&str>> {
    cmds.iter()
        .map(|c| c.iter().map(String::as_str).collect())
        .collect()
}

#[test]
fn a_failing_pipeline_answers_one_reply_per_command_in_order() {
    let _one = one_at_a_time();
    let c = Cluster::start(&["a", "a", "b"], &["--replication", "2pc"]);
    let timeout = Duration::from_secs(60);
    let mut con = Raw::connect(c.port(0), timeout);

    let keys: Vec<String> = (0..10).map(|i| format!("pipe:{i}")).collect();
    let before: Vec<String> = (0..10).map(|i| format!("pipe:read:{i}")).collect();
    let sets = |tag: &str| -> Vec<Vec<String>> {
        keys.iter()
            .enumerate()
            .map(|(i, k)| vec!["SET".into(), k.clone(), format!("{tag}{i}")])
            .collect()
    };

    // Healthy: every SET of the pipeline is confirmed by region b.
    let healthy = sets("ok");
    let got = pipeline(&mut con, &refs(&healthy), "before the cut");
    assert!(
        got.iter().all(Reply::is_ok),
        "before the cut every SET should answer OK: {got:#?}"
    );
    let mut setup: Vec<Vec<String>> = before
        .iter()
        .enumerate()
        .map(|(i, k)| vec!["SET".into(), k.clone(), format!("before{i}")])
        .collect();
    setup.push(vec!["GET".into(), before[0].clone()]);
    let got = pipeline(&mut con, &refs(&setup), "setup");
    assert!(got[..10].iter().all(Reply::is_ok), "setup: {got:#?}");

    // Cut node 0 off from region b: its writes cannot be confirmed there.
    c.fault(0, "ISOLATE");
    let cut = Instant::now();

    // 1. Ten SETs in one write: ten replies, each OK or its own error.
    let failing = sets("cut");
    let got = pipeline(&mut con, &refs(&failing), "10 SETs after the cut");
    let errors = got.iter().filter(|r| r.is_error()).count();
    for (i, r) in got.iter().enumerate() {
        assert!(
            r.is_ok() || r.is_error(),
            "reply {i} to SET {} is neither OK nor an error: {r:?}",
            keys[i]
        );
    }
    assert!(
        errors > 0,
        "{:.1?} after ISOLATE no SET failed, so the pipeline did not exercise the failing \
         path (did node 0 already drop region b from its view?): {got:#?}",
        cut.elapsed()
    );

    // 2. SETs interleaved with GETs of keys written before the cut: each
    // GET's reply is its own key's value, at its own position.
    let mut mixed: Vec<Vec<String>> = Vec::new();
    for i in 0..10 {
        mixed.push(vec!["SET".into(), keys[i].clone(), format!("mixed{i}")]);
        mixed.push(vec!["GET".into(), before[i].clone()]);
    }
    let got = pipeline(&mut con, &refs(&mixed), "10 SETs and 10 GETs after the cut");
    let mut mixed_errors = 0;
    for i in 0..10 {
        let (set, get) = (&got[2 * i], &got[2 * i + 1]);
        assert!(
            set.is_ok() || set.is_error(),
            "reply {} to SET {} is neither OK nor an error: {set:?}\nall replies: {got:#?}",
            2 * i,
            keys[i]
        );
        mixed_errors += usize::from(set.is_error());
        let want = Reply::Bulk(Some(format!("before{i}").into_bytes()));
        assert!(
            *get == want || get.is_error(),
            "reply {} to GET {} is {get:?}, expected {want:?} (or an error): replies out of \
             order or misattributed\nall replies: {got:#?}",
            2 * i + 1,
            before[i]
        );
    }
    println!(
        "[pipeline_replies] errors: {errors} of 10 SETs, then {mixed_errors} of 10 in the mixed \
         pipeline ({:.1?} after ISOLATE)",
        cut.elapsed()
    );

    c.fault(0, "HEAL");
    // The connection is still in step after the failures.
    let got = pipeline(
        &mut con,
        &[vec!["GET", before[9].as_str()], vec!["PING"]],
        "after HEAL",
    );
    assert_eq!(
        got,
        vec![
            Reply::Bulk(Some(b"before9".to_vec())),
            Reply::Status("PONG".into())
        ]
    );
}

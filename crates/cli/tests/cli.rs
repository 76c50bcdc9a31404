//! `elsa cli` against real servers: a plain `redis-server` (the client must
//! work against Redis too, and Redis is the reference for reply shapes), and
//! a tiny scripted stand-in speaking Elsa's transaction replies (`COMMIT`
//! answering a timestamp or `CONFLICT <key>`), so the `(TX)` prompt and
//! commit output are exercised end to end without the `elsa` binary.

use std::io::{BufRead, BufReader, Write};
use std::net::{TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use clap::Parser;
use elsa_cli::{repl, run, run_script, CliArgs, Input, Scripted, Session, Status, TxState};
use redis::{ConnectionAddr, ConnectionInfo, RedisConnectionInfo};

// ---------------------------------------------------------------------------
// A real redis-server on a free loopback port, killed by PID on drop.

struct RedisServer {
    child: Child,
    port: u16,
    dir: PathBuf,
}

impl RedisServer {
    fn start() -> RedisServer {
        RedisServer::start_with(&[])
    }

    fn start_with(extra: &[&str]) -> RedisServer {
        // A port found free can be taken before redis binds it: retry.
        for _ in 0..5 {
            let port = free_port();
            let dir =
                std::env::temp_dir().join(format!("elsa-cli-test-{}-{port}", std::process::id()));
            std::fs::create_dir_all(&dir).expect("create a scratch dir for redis-server");
            let child = Command::new("redis-server")
                .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
                .args(["--save", "", "--appendonly", "no", "--daemonize", "no"])
                .args(["--loglevel", "warning", "--dir"])
                .arg(&dir)
                .args(extra)
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .unwrap_or_else(|e| {
                    panic!(
                        "cannot start redis-server ({e}): these tests need it on PATH \
                         (Debian: apt-get install redis-server)"
                    )
                });
            let mut server = RedisServer { child, port, dir };
            if server.wait_ready() {
                return server;
            }
        }
        panic!("redis-server did not come up on any of 5 free ports");
    }

    fn wait_ready(&mut self) -> bool {
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return false; // exited: most likely the port was taken
            }
            if let Ok(mut s) = TcpStream::connect(("127.0.0.1", self.port)) {
                // Any answer means it serves; with --requirepass it is NOAUTH.
                let mut answer = String::new();
                if s.write_all(b"PING\r\n").is_ok()
                    && BufReader::new(s).read_line(&mut answer).is_ok()
                    && (answer.starts_with("+PONG") || answer.starts_with("-NOAUTH"))
                {
                    return true;
                }
            }
            thread::sleep(Duration::from_millis(20));
        }
        false
    }

    fn info(&self) -> ConnectionInfo {
        info(self.port)
    }

    fn session(&self) -> Session {
        let mut s = Session::new(self.info());
        s.connect().expect("connect to redis-server");
        s
    }

    /// A second client, for checks that must not go through the CLI.
    fn direct(&self) -> redis::Connection {
        redis::Client::open(self.info())
            .and_then(|c| c.get_connection())
            .expect("direct connection to redis-server")
    }

    fn stop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.stop();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("bind an ephemeral port")
}

fn info(port: u16) -> ConnectionInfo {
    ConnectionInfo {
        addr: ConnectionAddr::Tcp("127.0.0.1".into(), port),
        redis: RedisConnectionInfo::default(),
    }
}

fn dbsize(conn: &mut redis::Connection) -> i64 {
    redis::cmd("DBSIZE").query(conn).expect("DBSIZE")
}

/// Parses flags the way `elsa cli …` would.
fn cli_args(argv: &[&str]) -> CliArgs {
    #[derive(Parser)]
    struct Wrapper {
        #[command(flatten)]
        args: CliArgs,
    }
    Wrapper::try_parse_from(std::iter::once("cli").chain(argv.iter().copied()))
        .expect("flags parse")
        .args
}

// ---------------------------------------------------------------------------
// One-shot path against Redis.

#[test]
fn set_get_del_and_nil() {
    let redis = RedisServer::start();
    let mut s = redis.session();
    assert_eq!(s.run_once("SET k v"), (Status::Ok, "OK\n".into()));
    assert_eq!(s.run_once("GET k"), (Status::Ok, "\"v\"\n".into()));
    assert_eq!(s.run_once("DEL k"), (Status::Ok, "(integer) 1\n".into()));
    assert_eq!(s.run_once("GET k"), (Status::Ok, "(nil)\n".into()));
    assert_eq!(s.run_once("ping"), (Status::Ok, "PONG\n".into()));
}

#[test]
fn quoting_reaches_the_server_byte_exact() {
    let redis = RedisServer::start();
    let mut s = redis.session();
    assert_eq!(s.run_once(r#"SET "my key" "a\x00b\n\"é""#).0, Status::Ok);
    let stored: Vec<u8> = redis::cmd("GET")
        .arg("my key")
        .query(&mut redis.direct())
        .unwrap();
    assert_eq!(stored, b"a\x00b\n\"\xc3\xa9");
    assert_eq!(
        s.run_once("GET 'my key'").1,
        "\"a\\x00b\\n\\\"\\xc3\\xa9\"\n"
    );
    assert_eq!(s.run_once("STRLEN 'my key'").1, "(integer) 7\n");
}

#[test]
fn arrays_and_several_commands_per_line() {
    let redis = RedisServer::start();
    let mut s = redis.session();
    let (status, text) = s.run_once("MSET a 1 b 2; INCR a; MGET a b nope");
    assert_eq!(status, Status::Ok);
    assert_eq!(text, "OK\n(integer) 2\n1) \"2\"\n2) \"2\"\n3) (nil)\n");
    assert_eq!(s.run_once("LRANGE nothing 0 -1").1, "(empty array)\n");
}

#[test]
fn multi_exec_with_prompt() {
    let redis = RedisServer::start();
    let mut s = redis.session();
    let label = format!("127.0.0.1:{}", redis.port);
    assert_eq!(s.prompt(), format!("{label}> "));
    assert_eq!(s.run_once("MULTI").1, "OK\n");
    assert_eq!(s.tx_state(), TxState::Multi);
    assert_eq!(s.prompt(), format!("{label}(MULTI)> "));
    assert_eq!(s.run_once("SET c 1").1, "QUEUED\n");
    assert_eq!(s.run_once("INCR c").1, "QUEUED\n");
    assert_eq!(s.run_once("HSET c f v").1, "QUEUED\n");
    let (status, text) = s.run_once("EXEC");
    assert_eq!(status, Status::Ok);
    assert_eq!(
        text,
        "1) OK\n2) (integer) 2\n3) (error) WRONGTYPE Operation against a key holding the wrong kind of value\n"
    );
    assert_eq!(s.tx_state(), TxState::None);
    assert_eq!(s.prompt(), format!("{label}> "));

    s.run_once("MULTI");
    assert_eq!(s.run_once("DISCARD").1, "OK\n");
    assert_eq!(s.tx_state(), TxState::None);
}

#[test]
fn error_replies() {
    let redis = RedisServer::start();
    let mut s = redis.session();
    s.run_once("SET s abc");
    assert_eq!(
        s.run_once("INCR s"),
        (
            Status::ErrorReply,
            "(error) ERR value is not an integer or out of range\n".into()
        )
    );
    let (status, text) = s.run_once("FROBNICATE x");
    assert_eq!(status, Status::ErrorReply);
    assert!(
        text.starts_with("(error) ERR unknown command 'FROBNICATE'"),
        "{text}"
    );

    // The transaction language is Elsa's: Redis refuses BEGIN, and the
    // prompt must not claim a transaction is open.
    let (status, text) = s.run_once("BEGIN SI");
    assert_eq!(status, Status::ErrorReply);
    assert!(
        text.starts_with("(error) ERR unknown command 'BEGIN'"),
        "{text}"
    );
    assert_eq!(s.tx_state(), TxState::None);

    // A line stops at its first error.
    let (status, text) = s.run_once("INCR s; SET after 1");
    assert_eq!(status, Status::ErrorReply);
    assert!(!text.contains("OK"), "{text}");
    assert_eq!(s.run_once("EXISTS after").1, "(integer) 0\n");
}

#[test]
fn refused_commands_are_never_sent() {
    let redis = RedisServer::start();
    let mut direct = redis.direct();
    let mut s = redis.session();
    s.run_once("SET present 1");
    let before = dbsize(&mut direct);
    let info_before: String = redis::cmd("INFO").arg("stats").query(&mut direct).unwrap();
    let processed = |info: &str| -> u64 {
        info.lines()
            .find_map(|l| l.strip_prefix("total_commands_processed:"))
            .and_then(|n| n.trim().parse().ok())
            .expect("total_commands_processed in INFO")
    };

    for line in [
        "PUT k",
        "SET onlykey",
        "MSET a 1 b",
        "BEGIN XX",
        "GET",
        "DEL",
        "SET k \"unterminated",
        "SET x 1; SET y",
    ] {
        let (status, text) = s.run_once(line);
        assert_eq!(status, Status::Refused, "{line}");
        assert!(text.starts_with("(error) "), "{line}: {text}");
    }
    assert_eq!(
        s.run_once("PUT k").1,
        "(error) PUT needs a key and a value: PUT key value\n"
    );

    let info_after: String = redis::cmd("INFO").arg("stats").query(&mut direct).unwrap();
    // Exactly one command ran between the two INFOs: the first INFO itself.
    assert_eq!(processed(&info_after), processed(&info_before) + 1);
    assert_eq!(dbsize(&mut direct), before);
    assert_eq!(s.run_once("EXISTS x a onlykey").1, "(integer) 0\n");
}

#[test]
fn script_stops_at_first_failure() {
    let redis = RedisServer::start();
    let mut s = redis.session();
    let mut out = Vec::new();
    let lines = ["SET n 1", "INCR n", "HGET n f", "INCR n"].map(String::from);
    let status = run_script(&mut s, lines, &mut out).unwrap();
    assert_eq!(status, Status::ErrorReply);
    let text = String::from_utf8(out).unwrap();
    assert!(
        text.starts_with("OK\n(integer) 2\n(error) WRONGTYPE"),
        "{text}"
    );
    assert_eq!(s.run_once("GET n").1, "\"2\"\n");
}

// ---------------------------------------------------------------------------
// The interactive loop, fed from an iterator.

#[test]
fn interactive_transcript() {
    let redis = RedisServer::start();
    let mut s = redis.session();
    let p = format!("127.0.0.1:{}", redis.port);
    let mut source = Scripted::new([
        "SET k v".into(),
        "".into(),
        "GET k".into(),
        Input::Interrupted,
        "MULTI".into(),
        "SET k w".into(),
        "EXEC".into(),
        "PUT k".into(),
        "help put".into(),
        "quit".into(),
        "SET k never".into(),
    ]);
    let mut out = Vec::new();
    repl(&mut s, &mut source, &mut out).unwrap();
    let expected = [
        format!("{p}> SET k v"),
        "OK".into(),
        format!("{p}> "),
        format!("{p}> GET k"),
        "\"v\"".into(),
        format!("{p}> ^C"),
        format!("{p}> MULTI"),
        "OK".into(),
        format!("{p}(MULTI)> SET k w"),
        "QUEUED".into(),
        format!("{p}(MULTI)> EXEC"),
        "1) OK".into(),
        format!("{p}> PUT k"),
        "(error) PUT needs a key and a value: PUT key value".into(),
        format!("{p}> help put"),
        "PUT key value".into(),
        format!("{p}> quit"),
    ]
    .join("\n")
        + "\n";
    assert_eq!(String::from_utf8(out).unwrap(), expected);
    assert_eq!(s.run_once("GET k").1, "\"w\"\n", "nothing after quit ran");
}

#[test]
fn interactive_ends_at_end_of_input() {
    let redis = RedisServer::start();
    let mut s = redis.session();
    let mut out = Vec::new();
    repl(&mut s, &mut Scripted::new(["SET a 1".into()]), &mut out).unwrap();
    assert!(String::from_utf8(out).unwrap().ends_with("OK\n"));
}

// ---------------------------------------------------------------------------
// Connections that drop, servers that go away, passwords.

fn kill_other_clients(redis: &RedisServer) {
    kill_clients(redis, None);
}

/// Closes every client connection but the one doing it, as a server
/// timeout or restart would.
fn kill_clients(redis: &RedisServer, password: Option<&str>) {
    let mut info = redis.info();
    info.redis.password = password.map(String::from);
    let mut conn = redis::Client::open(info)
        .and_then(|c| c.get_connection())
        .expect("direct connection to redis-server");
    let killed: i64 = redis::cmd("CLIENT")
        .arg(&["KILL", "TYPE", "normal", "SKIPME", "yes"])
        .query(&mut conn)
        .unwrap();
    assert!(killed >= 1);
}

#[test]
fn reconnects_and_says_so() {
    let redis = RedisServer::start();
    let mut s = redis.session();
    s.run_once("SET k v");
    kill_other_clients(&redis);
    let (status, text) = s.run_once("GET k");
    assert_eq!(status, Status::Ok);
    assert_eq!(
        text,
        format!(
            "(connection was lost; reconnected to 127.0.0.1:{})\n\"v\"\n",
            redis.port
        )
    );
}

#[test]
fn a_lost_transaction_is_not_replayed() {
    let redis = RedisServer::start();
    let mut s = redis.session();
    s.run_once("MULTI");
    kill_other_clients(&redis);
    let (status, text) = s.run_once("SET k lost");
    assert_eq!(status, Status::Unreachable);
    assert!(
        text.contains("the open transaction ended with it"),
        "{text}"
    );
    assert_eq!(s.tx_state(), TxState::None);
    assert_eq!(s.prompt(), "not connected> ");

    // The next command reconnects, says so, and finds nothing was written.
    let (status, text) = s.run_once("EXISTS k");
    assert_eq!(status, Status::Ok);
    assert_eq!(
        text,
        format!("(reconnected to 127.0.0.1:{})\n(integer) 0\n", redis.port)
    );
}

#[test]
fn server_gone() {
    let mut redis = RedisServer::start();
    let mut s = redis.session();
    redis.stop();
    let (status, text) = s.run_once("GET k");
    assert_eq!(status, Status::Unreachable);
    assert!(
        text.starts_with("(error) connection to 127.0.0.1:"),
        "{text}"
    );
    assert!(text.contains("could not connect"), "{text}");
    assert_eq!(s.prompt(), "not connected> ");
}

#[test]
fn select_survives_reconnection() {
    let redis = RedisServer::start();
    let mut s = redis.session();
    s.run_once("SELECT 3");
    assert_eq!(s.prompt(), format!("127.0.0.1:{}[3]> ", redis.port));
    s.run_once("SET in3 yes");
    kill_other_clients(&redis);
    assert!(s.run_once("GET in3").1.ends_with("\"yes\"\n"));
}

#[test]
fn password() {
    let redis = RedisServer::start_with(&["--requirepass", "s3cret"]);
    let port = redis.port.to_string();

    let mut with = Session::new(
        cli_args(&["-p", &port, "-a", "s3cret"])
            .connection_info()
            .unwrap(),
    );
    with.connect().unwrap();
    assert_eq!(with.run_once("SET k v").0, Status::Ok);
    kill_clients(&redis, Some("s3cret"));

    let mut without = Session::new(info(redis.port));
    let (status, text) = without.run_once("GET k");
    assert_eq!(status, Status::ErrorReply);
    assert!(text.starts_with("(error) NOAUTH"), "{text}");

    let mut wrong = Session::new(
        cli_args(&["-p", &port, "-a", "nope"])
            .connection_info()
            .unwrap(),
    );
    assert!(wrong.connect().is_err());
    assert_eq!(run(cli_args(&["-p", &port, "-a", "nope", "-c", "PING"])), 2);

    // The password is re-sent on reconnection.
    assert_eq!(with.run_once("GET k").0, Status::Ok);
}

// ---------------------------------------------------------------------------
// `run`: exit codes of the non-interactive paths.

#[test]
fn exit_codes_of_one_shot_runs() {
    let redis = RedisServer::start();
    let port = redis.port.to_string();
    assert_eq!(run(cli_args(&["-p", &port, "-c", "SET k 1; INCR k"])), 0);
    assert_eq!(run(cli_args(&["-p", &port, "-c", "GET"])), 1, "refused");
    assert_eq!(
        run(cli_args(&["-p", &port, "-c", "HGET k f"])),
        1,
        "error reply"
    );
    assert_eq!(
        run(cli_args(&["-p", &port, "INCR", "k"])),
        0,
        "command words"
    );
    assert_eq!(
        run(cli_args(&[
            "-u",
            &format!("redis://127.0.0.1:{port}"),
            "-c",
            "GET k"
        ])),
        0
    );
    assert_eq!(
        redis::cmd("GET")
            .arg("k")
            .query::<i64>(&mut redis.direct())
            .unwrap(),
        3
    );
    let nobody = free_port().to_string();
    assert_eq!(
        run(cli_args(&["-p", &nobody, "-c", "PING"])),
        2,
        "unreachable"
    );
}

// ---------------------------------------------------------------------------
// Elsa's transaction replies, from a scripted stand-in.

/// Answers like an Elsa node would for the transaction language: BEGIN/PUT/
/// ABORT `+OK`, GET the last PUT value, COMMIT `:42`, or `-CONFLICT hot`
/// when the transaction wrote the key `hot`. Anything else (the client
/// library's CLIENT SETINFO included) gets `-ERR unknown command`.
fn fake_elsa() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            thread::spawn(move || serve_fake(stream));
        }
    });
    port
}

fn serve_fake(stream: TcpStream) {
    let mut writer = match stream.try_clone() {
        Ok(w) => w,
        Err(_) => return,
    };
    let mut reader = BufReader::new(stream);
    let mut written: Vec<(Vec<u8>, Vec<u8>)> = Vec::new();
    while let Some(args) = read_command(&mut reader) {
        let name = String::from_utf8_lossy(&args[0]).to_ascii_uppercase();
        let reply: Vec<u8> = match name.as_str() {
            "BEGIN" | "ABORT" | "ROLLBACK" => {
                written.clear();
                b"+OK\r\n".to_vec()
            }
            "PUT" => {
                written.push((args[1].clone(), args[2].clone()));
                b"+OK\r\n".to_vec()
            }
            "GET" => match written.iter().rev().find(|(k, _)| *k == args[1]) {
                Some((_, v)) => [
                    format!("${}\r\n", v.len()).into_bytes(),
                    v.clone(),
                    b"\r\n".to_vec(),
                ]
                .concat(),
                None => b"$-1\r\n".to_vec(),
            },
            "COMMIT" => {
                let conflict = written.iter().any(|(k, _)| k == b"hot");
                written.clear();
                if conflict {
                    b"-CONFLICT hot\r\n".to_vec()
                } else {
                    b":42\r\n".to_vec()
                }
            }
            _ => format!("-ERR unknown command '{name}'\r\n").into_bytes(),
        };
        if writer.write_all(&reply).is_err() {
            return;
        }
    }
}

fn read_command(reader: &mut impl BufRead) -> Option<Vec<Vec<u8>>> {
    let mut line = String::new();
    reader.read_line(&mut line).ok()?;
    let n: usize = line.strip_prefix('*')?.trim().parse().ok()?;
    let mut args = Vec::with_capacity(n);
    for _ in 0..n {
        line.clear();
        reader.read_line(&mut line).ok()?;
        let len: usize = line.strip_prefix('$')?.trim().parse().ok()?;
        let mut buf = vec![0u8; len + 2];
        reader.read_exact(&mut buf).ok()?;
        buf.truncate(len);
        args.push(buf);
    }
    Some(args)
}

#[test]
fn elsa_transaction_transcript() {
    let port = fake_elsa();
    let mut s = Session::new(info(port));
    s.connect().unwrap();
    let p = format!("127.0.0.1:{port}");
    let mut source = Scripted::new([
        "BEGIN RR".into(),
        "PUT k \"hello world\"".into(),
        "GET k".into(),
        "COMMIT".into(),
        "BEGIN".into(),
        "PUT hot 1".into(),
        "COMMIT".into(),
        "BEGIN".into(),
        "ROLLBACK".into(),
        "BEGIN; PUT a 1".into(),
    ]);
    let mut out = Vec::new();
    repl(&mut s, &mut source, &mut out).unwrap();
    let expected = [
        format!("{p}> BEGIN RR"),
        "OK".into(),
        format!("{p}(TX)> PUT k \"hello world\""),
        "OK".into(),
        format!("{p}(TX)> GET k"),
        "\"hello world\"".into(),
        format!("{p}(TX)> COMMIT"),
        "OK (commit ts 42)".into(),
        format!("{p}> BEGIN"),
        "OK".into(),
        format!("{p}(TX)> PUT hot 1"),
        "OK".into(),
        format!("{p}(TX)> COMMIT"),
        "(error) CONFLICT hot".into(),
        "(the transaction was aborted: a concurrent one wrote that key first; nothing was written, run it again)".into(),
        format!("{p}> BEGIN"),
        "OK".into(),
        format!("{p}(TX)> ROLLBACK"),
        "OK".into(),
        format!("{p}> BEGIN; PUT a 1"),
        "OK".into(),
        "OK".into(),
        "(leaving with a transaction open: the server aborts it)".into(),
    ]
    .join("\n")
        + "\n";
    assert_eq!(String::from_utf8(out).unwrap(), expected);
}

#[test]
fn elsa_one_shot_transaction_exit_codes() {
    let port = fake_elsa().to_string();
    assert_eq!(
        run(cli_args(&["-p", &port, "-c", "BEGIN SI; PUT k v; COMMIT"])),
        0
    );
    assert_eq!(
        run(cli_args(&["-p", &port, "-c", "BEGIN; PUT hot v; COMMIT"])),
        1
    );
}

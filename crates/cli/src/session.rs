//! One client session: a connection that comes back after it drops, the
//! transaction state the prompt shows, and the path of a typed line from
//! text to printed reply.
//!
//! Owns the order of things for a line: split it ([`crate::lex`]), answer
//! the local commands (`help`, `quit`), check every command of the line
//! ([`crate::syntax`]) and send none if any is malformed, then send them in
//! order and print each reply ([`crate::reply`]), stopping at the first
//! error. Where lines come from (a terminal, a script, `-c`) is
//! [`crate::repl`](mod@crate::repl)'s business; this module only writes to a `Write`.
//!
//! Reconnecting follows redis-cli: when a command finds the connection
//! dropped and no transaction was open, the session reconnects and sends it
//! once more — a connection the server closed while idle is the usual cause,
//! and then the command never arrived. Inside `BEGIN` or `MULTI` it never
//! resends: the server dropped the transaction with the connection, and a
//! lone `PUT` replayed outside it would be wrong.

use std::io::{self, Write};
use std::time::Duration;

use redis::{Client, Cmd, Connection, ConnectionInfo, ConnectionLike, RedisError, Value};

use crate::args::label;
use crate::help;
use crate::lex::{self, Args};
use crate::reply::{error_text, format_reply};
use crate::syntax;
use crate::txstate::TxState;

/// How long to wait for a server to accept a connection.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// Commands after which the server only pushes messages, so the session
/// keeps reading until the connection ends.
const STREAMING: &[&str] = &["SUBSCRIBE", "PSUBSCRIBE", "SSUBSCRIBE", "MONITOR"];

/// How a line (or a command) ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Status {
    /// Everything was answered without an error.
    Ok,
    /// Refused locally (malformed); nothing of the line was sent.
    Refused,
    /// The server answered an error (this includes `CONFLICT`).
    ErrorReply,
    /// No server to talk to: connecting failed or the connection was lost.
    Unreachable,
    /// The user asked to leave (`quit`, `exit`).
    Quit,
}

impl Status {
    /// The process exit code `-c` and scripts end with.
    pub fn exit_code(self) -> i32 {
        match self {
            Status::Ok | Status::Quit => 0,
            Status::Refused | Status::ErrorReply => 1,
            Status::Unreachable => 2,
        }
    }
}

/// A client session with one server.
pub struct Session {
    info: ConnectionInfo,
    conn: Option<Connection>,
    tx: TxState,
    /// Once connected, a later connection is a *re*connection, worth saying.
    ever_connected: bool,
}

impl Session {
    /// A session with the server `info` names; connects on first use.
    pub fn new(info: ConnectionInfo) -> Session {
        Session {
            info,
            conn: None,
            tx: TxState::None,
            ever_connected: false,
        }
    }

    /// Connects now (if not connected), so a missing server is reported
    /// before any prompt; the error says where it tried.
    pub fn connect(&mut self) -> Result<(), String> {
        if self.conn.is_some() {
            return Ok(());
        }
        let conn =
            open(&self.info).map_err(|e| format!("could not connect to {}: {e}", self.label()))?;
        self.conn = Some(conn);
        self.ever_connected = true;
        Ok(())
    }

    /// Whether a connection is currently held.
    pub fn is_connected(&self) -> bool {
        self.conn.is_some()
    }

    /// The transaction the server is believed to hold open.
    pub fn tx_state(&self) -> TxState {
        self.tx
    }

    /// The server's name in prompts and messages, e.g. `127.0.0.1:6379`.
    pub fn label(&self) -> String {
        label(&self.info)
    }

    /// The prompt: `127.0.0.1:6379> `, `127.0.0.1:6379(TX)> `,
    /// `127.0.0.1:6379(MULTI)> `, or `not connected> `.
    pub fn prompt(&self) -> String {
        if self.conn.is_none() {
            return "not connected> ".to_string();
        }
        format!("{}{}> ", self.label(), self.tx.mark())
    }

    /// What to say when the user leaves with a transaction open.
    pub fn farewell(&self) -> Option<&'static str> {
        match self.tx {
            TxState::None => None,
            _ => Some("(leaving with a transaction open: the server aborts it)"),
        }
    }

    /// Runs one typed line and writes everything it printed to `out`.
    pub fn run_line(&mut self, line: &str, out: &mut dyn Write) -> io::Result<Status> {
        match lex::split_commands(line) {
            Ok(commands) => self.run_commands(&commands, out),
            Err(e) => {
                writeln!(out, "(error) {e}")?;
                Ok(Status::Refused)
            }
        }
    }

    /// Runs `line` and returns what it printed: the one-shot path, handy
    /// wherever output is wanted as a string.
    pub fn run_once(&mut self, line: &str) -> (Status, String) {
        let mut out = Vec::new();
        let status = self.run_line(line, &mut out).unwrap_or(Status::Unreachable);
        (status, String::from_utf8_lossy(&out).into_owned())
    }

    /// Runs already-split commands: all are checked first, and if any is
    /// malformed none is sent; then they run in order until one fails.
    pub fn run_commands(&mut self, commands: &[Args], out: &mut dyn Write) -> io::Result<Status> {
        let mut refused = false;
        for args in commands {
            if let Err(why) = syntax::check(args) {
                writeln!(out, "(error) {why}")?;
                refused = true;
            }
        }
        if refused {
            if commands.len() > 1 {
                writeln!(out, "(nothing on this line was sent)")?;
            }
            return Ok(Status::Refused);
        }
        for args in commands {
            let status = match local(args) {
                Some(Local::Quit) => Status::Quit,
                Some(Local::Help(text)) => {
                    writeln!(out, "{text}")?;
                    Status::Ok
                }
                None => self.execute(args, out)?,
            };
            out.flush()?;
            if status != Status::Ok {
                return Ok(status);
            }
        }
        Ok(Status::Ok)
    }

    /// Sends one checked command and prints its reply.
    fn execute(&mut self, args: &Args, out: &mut dyn Write) -> io::Result<Status> {
        if !self.ensure_connected(out)? {
            return Ok(Status::Unreachable);
        }
        let cmd = to_cmd(args);
        match self.request(&cmd) {
            Ok(value) => self.answer(args, value, out),
            Err(e) => self.recover(args, &cmd, e, out),
        }
    }

    fn request(&mut self, cmd: &Cmd) -> Result<Value, RedisError> {
        match self.conn.as_mut() {
            Some(conn) => conn.req_command(cmd),
            None => Err(RedisError::from(io::Error::from(
                io::ErrorKind::NotConnected,
            ))),
        }
    }

    /// Connects if needed; says so when it is a reconnection, and says why
    /// when it fails.
    fn ensure_connected(&mut self, out: &mut dyn Write) -> io::Result<bool> {
        if self.conn.is_some() {
            return Ok(true);
        }
        let again = self.ever_connected;
        match self.connect() {
            Ok(()) => {
                if again {
                    writeln!(out, "(reconnected to {})", self.label())?;
                }
                Ok(true)
            }
            Err(why) => {
                writeln!(out, "(error) {why}")?;
                Ok(false)
            }
        }
    }

    /// The connection failed under `cmd`: drop it, and resend once if that
    /// is safe (see the module docs).
    fn recover(
        &mut self,
        args: &Args,
        cmd: &Cmd,
        err: RedisError,
        out: &mut dyn Write,
    ) -> io::Result<Status> {
        self.conn = None;
        let label = self.label();
        let lost = std::mem::take(&mut self.tx);
        if lost != TxState::None {
            writeln!(out, "(error) connection to {label} lost: {err}")?;
            writeln!(
                out,
                "(the open transaction ended with it; nothing was resent — start it again)"
            )?;
            return Ok(Status::Unreachable);
        }
        if !err.is_connection_dropped() {
            writeln!(out, "(error) connection to {label} lost: {err}")?;
            return Ok(Status::Unreachable);
        }
        if let Err(why) = self.connect() {
            writeln!(out, "(error) connection to {label} lost: {err}; {why}")?;
            return Ok(Status::Unreachable);
        }
        writeln!(out, "(connection was lost; reconnected to {label})")?;
        match self.request(cmd) {
            Ok(value) => self.answer(args, value, out),
            Err(e) => {
                self.conn = None;
                writeln!(out, "(error) connection to {label} lost again: {e}")?;
                Ok(Status::Unreachable)
            }
        }
    }

    /// Prints a reply and updates what the session tracks from it.
    fn answer(&mut self, args: &Args, value: Value, out: &mut dyn Write) -> io::Result<Status> {
        let name = args.first().map(Vec::as_slice).unwrap_or_default();
        let is = |s: &str| name.eq_ignore_ascii_case(s.as_bytes());
        let error = match &value {
            Value::ServerError(e) => Some(error_text(e.code(), e.details())),
            _ => None,
        };
        self.tx = self.tx.after(name, error.is_some());
        match (&value, &error) {
            // Elsa's COMMIT answers the commit timestamp.
            (Value::Int(ts), None) if is("COMMIT") => writeln!(out, "OK (commit ts {ts})")?,
            _ => writeln!(out, "{}", format_reply(&value))?,
        }
        if let Some(text) = &error {
            if text.starts_with("CONFLICT") {
                writeln!(
                    out,
                    "(the transaction was aborted: a concurrent one wrote that key first; nothing was written, run it again)"
                )?;
            }
            return Ok(Status::ErrorReply);
        }
        self.remember(args);
        if STREAMING.iter().any(|s| is(s)) {
            return self.stream(out);
        }
        Ok(Status::Ok)
    }

    /// Keeps what a successful `SELECT` or `AUTH` changed, so a
    /// reconnection lands in the same place.
    fn remember(&mut self, args: &Args) {
        let Some(name) = args.first() else { return };
        let text = |b: &Vec<u8>| String::from_utf8_lossy(b).into_owned();
        if name.eq_ignore_ascii_case(b"SELECT") {
            if let Some(db) = args.get(1).and_then(|d| text(d).parse().ok()) {
                self.info.redis.db = db;
            }
        } else if name.eq_ignore_ascii_case(b"AUTH") {
            match args.as_slice() {
                [_, password] => self.info.redis.password = Some(text(password)),
                [_, user, password] => {
                    self.info.redis.username = Some(text(user));
                    self.info.redis.password = Some(text(password));
                }
                _ => {}
            }
        }
    }

    /// After SUBSCRIBE or MONITOR: print what the server pushes until the
    /// connection ends (Ctrl-C ends the process, as in redis-cli).
    fn stream(&mut self, out: &mut dyn Write) -> io::Result<Status> {
        writeln!(out, "Reading messages... (press Ctrl-C to quit)")?;
        out.flush()?;
        while let Some(conn) = self.conn.as_mut() {
            match conn.recv_response() {
                Ok(value) => {
                    writeln!(out, "{}", format_reply(&value))?;
                    out.flush()?;
                }
                Err(e) => {
                    self.conn = None;
                    writeln!(out, "(connection closed: {e})")?;
                    return Ok(Status::Unreachable);
                }
            }
        }
        Ok(Status::Unreachable)
    }
}

/// A command the client answers itself.
enum Local {
    Quit,
    Help(String),
}

fn local(args: &Args) -> Option<Local> {
    let name = args.first()?;
    let is = |s: &str| name.eq_ignore_ascii_case(s.as_bytes());
    if (is("quit") || is("exit")) && args.len() == 1 {
        return Some(Local::Quit);
    }
    if is("help") || is("?") {
        return Some(Local::Help(match args.get(1) {
            Some(topic) => help::command(topic),
            None => help::OVERVIEW.to_string(),
        }));
    }
    None
}

fn to_cmd(args: &Args) -> Cmd {
    let mut cmd = Cmd::new();
    for arg in args {
        cmd.arg(arg.as_slice());
    }
    cmd
}

fn open(info: &ConnectionInfo) -> Result<Connection, RedisError> {
    Client::open(info.clone())?.get_connection_with_timeout(CONNECT_TIMEOUT)
}

#[cfg(test)]
mod tests {
    use super::*;
    use redis::{ConnectionAddr, RedisConnectionInfo};

    /// A session aimed at a port nothing listens on: anything that reaches
    /// the network fails loudly, so local answers are proven local.
    fn offline() -> Session {
        let port = {
            let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            l.local_addr().unwrap().port()
        };
        Session::new(ConnectionInfo {
            addr: ConnectionAddr::Tcp("127.0.0.1".into(), port),
            redis: RedisConnectionInfo::default(),
        })
    }

    #[test]
    fn refusals_never_touch_the_network() {
        let mut s = offline();
        let (status, text) = s.run_once("PUT k");
        assert_eq!(status, Status::Refused);
        assert_eq!(text, "(error) PUT needs a key and a value: PUT key value\n");
        let (status, text) = s.run_once("SET k \"unterminated");
        assert_eq!(status, Status::Refused);
        assert!(text.starts_with("(error) unbalanced quotes"), "{text}");
        assert!(!s.is_connected());
    }

    #[test]
    fn one_bad_command_keeps_the_whole_line_local() {
        let mut s = offline();
        let (status, text) = s.run_once("BEGIN; PUT k; COMMIT");
        assert_eq!(status, Status::Refused);
        assert!(text.contains("PUT needs a key and a value"), "{text}");
        assert!(text.contains("nothing on this line was sent"), "{text}");
        assert_eq!(s.tx_state(), TxState::None);
    }

    #[test]
    fn help_and_quit_are_local() {
        let mut s = offline();
        let (status, text) = s.run_once("help");
        assert_eq!(status, Status::Ok);
        assert!(text.contains("BEGIN [RC|RR|SI]"));
        assert_eq!(s.run_once("? put").1, "PUT key value\n");
        assert_eq!(s.run_once("QUIT").0, Status::Quit);
        assert_eq!(s.run_once("exit").0, Status::Quit);
        assert!(!s.is_connected());
    }

    #[test]
    fn unreachable_server_is_reported() {
        let mut s = offline();
        let (status, text) = s.run_once("GET k");
        assert_eq!(status, Status::Unreachable);
        assert!(
            text.starts_with("(error) could not connect to 127.0.0.1:"),
            "{text}"
        );
        assert_eq!(s.prompt(), "not connected> ");
    }

    #[test]
    fn exit_codes() {
        assert_eq!(Status::Ok.exit_code(), 0);
        assert_eq!(Status::Quit.exit_code(), 0);
        assert_eq!(Status::ErrorReply.exit_code(), 1);
        assert_eq!(Status::Refused.exit_code(), 1);
        assert_eq!(Status::Unreachable.exit_code(), 2);
    }
}

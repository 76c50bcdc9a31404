//! `elsa cli`: an interactive client for Elsa's transaction language
//! (`BEGIN [RC|RR|SI]`, `PUT`, `GET`, `DELETE`, `COMMIT`, `ABORT`) and any
//! Redis command, which it passes through as is — so it works against a
//! plain Redis too. It depends on no server crate, only on a Redis client.
//!
//! Component map, in the order a line travels:
//!
//! - [`args`]: the command line (`-h -p -a -n -u -c`) and where to connect.
//! - [`repl`](mod@repl): where lines come from — the terminal (rustyline, history in
//!   `$HOME/.elsa_cli_history`), a script, or a test's iterator — and the
//!   prompt loop.
//! - [`lex`]: a line into commands and arguments (quotes, escapes, `;`).
//! - [`syntax`]: the local arity check that refuses malformed commands of
//!   known shape before they are sent; [`help`] shows the same table.
//! - [`session`]: the connection (reconnecting when it drops), sending,
//!   and what replies mean for the session.
//! - [`txstate`]: the `(TX)` / `(MULTI)` mark in the prompt.
//! - [`reply`]: replies printed as redis-cli prints them.

pub mod args;
pub mod help;
pub mod lex;
pub mod repl;
pub mod reply;
pub mod session;
pub mod syntax;
pub mod txstate;

use std::io::{self, BufRead, IsTerminal, Write};

pub use args::CliArgs;
pub use repl::{repl, run_script, Input, LineSource, Scripted, Terminal};
pub use session::{Session, Status};
pub use txstate::TxState;

/// Runs `elsa cli` with parsed flags; returns the process exit code.
///
/// With `-c` or command words, or with input piped in, it runs those and
/// exits: 0 when every command succeeded, 1 at the first error reply or
/// refused command, 2 when the server cannot be reached. On a terminal it
/// prompts until `quit`, `exit` or Ctrl-D, and exits 0.
pub fn run(args: CliArgs) -> i32 {
    let info = match args.connection_info() {
        Ok(info) => info,
        Err(e) => {
            eprintln!("elsa cli: {e}");
            return 2;
        }
    };
    let mut session = Session::new(info);
    let stdout = io::stdout();
    let mut out = stdout.lock();

    let interactive = args.command.is_none() && args.words.is_empty() && io::stdin().is_terminal();
    if let Err(why) = session.connect() {
        if !interactive {
            eprintln!("elsa cli: {why}");
            return 2;
        }
        // At a prompt the server may come up later; the next command retries.
        eprintln!("elsa cli: {why}");
    }

    let result = if !args.words.is_empty() {
        let words: Vec<Vec<u8>> = args.words.iter().map(|w| w.as_bytes().to_vec()).collect();
        session.run_commands(&[words], &mut out)
    } else if let Some(line) = &args.command {
        run_script(&mut session, [line.clone()], &mut out)
    } else if !interactive {
        let lines = io::stdin().lock().lines().map_while(|l| match l {
            Ok(line) => Some(line),
            Err(e) => {
                eprintln!("elsa cli: cannot read input: {e}");
                None
            }
        });
        run_script(&mut session, lines, &mut out)
    } else {
        let mut terminal = match Terminal::open() {
            Ok(t) => t,
            Err(e) => {
                eprintln!("elsa cli: cannot open the terminal: {e}");
                return 2;
            }
        };
        repl(&mut session, &mut terminal, &mut out).map(|()| Status::Ok)
    };
    let _ = out.flush();
    match result {
        // Quit from `-c "quit"` or a script is a clean end.
        Ok(status) => status.exit_code(),
        Err(e) => {
            eprintln!("elsa cli: cannot write output: {e}");
            1
        }
    }
}

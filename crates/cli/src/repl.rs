//! Where lines come from: the interactive loop, shared by the terminal
//! (rustyline, with history) and by tests and scripts (any iterator).
//!
//! Owns the loop — prompt, read, run, until `quit`/`exit`/Ctrl-D, Ctrl-C
//! clearing the line — and the history file. Running a line is
//! [`crate::session`]'s; this module never looks inside one.

use std::io::{self, Write};
use std::path::PathBuf;

use rustyline::error::ReadlineError;
use rustyline::DefaultEditor;

use crate::session::{Session, Status};

/// What reading a line produced.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Input {
    /// A line, without its newline.
    Line(String),
    /// Ctrl-C: drop the line being typed, prompt again.
    Interrupted,
    /// Ctrl-D or end of input: leave.
    Eof,
}

impl From<&str> for Input {
    fn from(line: &str) -> Input {
        Input::Line(line.to_string())
    }
}

/// A source of lines for [`repl`].
pub trait LineSource {
    /// Shows `prompt` (if the source has a screen) and reads one line.
    fn read_line(&mut self, prompt: &str) -> Input;

    /// Remembers a line that was run (history); nothing by default.
    fn remember(&mut self, _line: &str) {}

    /// Whether the loop should write the prompt and the line to its output,
    /// making a transcript like what a terminal shows.
    fn echoes(&self) -> bool {
        false
    }
}

/// Runs the interactive loop until the user leaves or input ends.
pub fn repl(
    session: &mut Session,
    source: &mut dyn LineSource,
    out: &mut dyn Write,
) -> io::Result<()> {
    loop {
        let prompt = session.prompt();
        let line = match source.read_line(&prompt) {
            Input::Line(line) => line,
            Input::Interrupted => {
                if source.echoes() {
                    writeln!(out, "{prompt}^C")?;
                }
                continue;
            }
            Input::Eof => break,
        };
        if source.echoes() {
            writeln!(out, "{prompt}{line}")?;
        }
        if line.trim().is_empty() {
            continue;
        }
        source.remember(&line);
        if session.run_line(&line, out)? == Status::Quit {
            break;
        }
    }
    if let Some(note) = session.farewell() {
        writeln!(out, "{note}")?;
    }
    out.flush()
}

/// Runs lines without a prompt (`-c`, piped input), stopping at the first
/// one that does not succeed — in a script of `BEGIN … COMMIT`, going on
/// after a failed step would commit half a transaction.
pub fn run_script<I>(session: &mut Session, lines: I, out: &mut dyn Write) -> io::Result<Status>
where
    I: IntoIterator<Item = String>,
{
    for line in lines {
        match session.run_line(&line, out)? {
            Status::Ok => {}
            Status::Quit => return Ok(Status::Ok),
            failed => return Ok(failed),
        }
    }
    Ok(Status::Ok)
}

/// A scripted source for tests: yields its inputs, then end of input, and
/// echoes so the output reads as a terminal transcript.
pub struct Scripted<I> {
    inputs: I,
}

impl<I: Iterator<Item = Input>> Scripted<I> {
    /// Yields `inputs` in order.
    pub fn new(inputs: impl IntoIterator<Item = Input, IntoIter = I>) -> Scripted<I> {
        Scripted {
            inputs: inputs.into_iter(),
        }
    }
}

impl<I: Iterator<Item = Input>> LineSource for Scripted<I> {
    fn read_line(&mut self, _prompt: &str) -> Input {
        self.inputs.next().unwrap_or(Input::Eof)
    }

    fn echoes(&self) -> bool {
        true
    }
}

/// The terminal: line editing and history via rustyline.
pub struct Terminal {
    editor: DefaultEditor,
    history: Option<PathBuf>,
}

impl Terminal {
    /// Opens the terminal and loads `$HOME/.elsa_cli_history` if there is
    /// one (a missing or unreadable history is no reason not to start).
    pub fn open() -> Result<Terminal, ReadlineError> {
        let mut editor = DefaultEditor::new()?;
        let history =
            std::env::var_os("HOME").map(|home| PathBuf::from(home).join(".elsa_cli_history"));
        if let Some(path) = &history {
            let _ = editor.load_history(path);
        }
        Ok(Terminal { editor, history })
    }
}

impl LineSource for Terminal {
    fn read_line(&mut self, prompt: &str) -> Input {
        match self.editor.readline(prompt) {
            Ok(line) => Input::Line(line),
            Err(ReadlineError::Interrupted) => Input::Interrupted,
            Err(ReadlineError::Eof) => Input::Eof,
            Err(e) => {
                eprintln!("elsa cli: cannot read the terminal: {e}");
                Input::Eof
            }
        }
    }

    fn remember(&mut self, line: &str) {
        // Passwords stay out of the history file, as in redis-cli; any line
        // with an AUTH word anywhere (`HELLO 3 AUTH u p`, `…; AUTH p`) is
        // skipped, at the cost of the odd innocent `SET auth 1`.
        let has_auth = line
            .split(|c: char| c.is_whitespace() || c == ';')
            .any(|w| w.eq_ignore_ascii_case("AUTH"));
        if has_auth {
            return;
        }
        let _ = self.editor.add_history_entry(line);
        // Saved at once, not on exit: SUBSCRIBE and MONITOR end with Ctrl-C,
        // which ends the process.
        if let Some(path) = &self.history {
            let _ = self.editor.save_history(path);
        }
    }
}

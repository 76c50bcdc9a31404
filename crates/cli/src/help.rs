//! What `help` and `?` print: the transaction language at a glance, and the
//! synopsis of any command in [`crate::syntax`]'s table.

use crate::syntax;

/// The overview `help` prints.
pub const OVERVIEW: &str = "\
Elsa's transaction language (anything else is sent to the server as is):
  BEGIN [RC|RR|SI]   start a transaction: read committed, repeatable read,
                     or snapshot isolation (the default)
  PUT key value      write (buffered until COMMIT)
  GET key            read; sees the transaction's own writes
  DELETE key         delete (buffered until COMMIT)
  COMMIT             validate and install every write at once; answers the
                     commit timestamp, or CONFLICT <key> when a concurrent
                     transaction got there first (nothing was written: retry)
  ABORT | ROLLBACK   drop the transaction
Redis commands work too (SET, MGET, MULTI/EXEC, ...).
The prompt shows (TX) inside BEGIN ... COMMIT and (MULTI) inside MULTI ... EXEC.

Quoting: \"double quotes\" take \\n \\t \\\" \\\\ \\xHH escapes; 'single quotes' are literal.
Several commands on one line: separate them with ; (a line with a malformed
command is not sent at all).
help COMMAND shows one command's syntax; quit, exit or Ctrl-D leaves;
Ctrl-C clears the line.";

/// What `help NAME` prints.
pub fn command(name: &[u8]) -> String {
    match syntax::lookup(name) {
        Some(spec) => spec.usage.to_string(),
        None => format!(
            "no local help for {}; the server may know (COMMAND DOCS {})",
            String::from_utf8_lossy(name),
            String::from_utf8_lossy(name)
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_and_unknown() {
        assert_eq!(command(b"put"), "PUT key value");
        assert!(command(b"FOO").starts_with("no local help for FOO"));
    }

    #[test]
    fn overview_names_the_language() {
        for word in [
            "BEGIN", "PUT", "GET", "DELETE", "COMMIT", "ABORT", "ROLLBACK",
        ] {
            assert!(OVERVIEW.contains(word), "{word}");
        }
    }
}

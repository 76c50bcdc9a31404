//! Splitting a typed line into commands and arguments, as redis-cli does.
//!
//! Owns the quoting rules only: whitespace separates arguments, `"double"`
//! quotes take the escapes `\n \r \t \b \a \" \\ \xHH`, `'single'` quotes take
//! only `\'`, and an unquoted `;` ends one command and starts the next (so a
//! whole transaction fits on one line or in one `-c`). What a command *means*
//! is [`crate::syntax`]'s business.
//!
//! Arguments are bytes, not strings: `\xHH` can spell any byte, and the
//! server stores bytes.

use std::fmt;

/// One command: its name followed by its arguments, as raw bytes.
pub type Args = Vec<Vec<u8>>;

/// Why a line could not be split.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LexError {
    /// A quote was opened and the line ended before it was closed.
    UnterminatedQuote(char),
}

impl fmt::Display for LexError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LexError::UnterminatedQuote(q) => {
                write!(f, "unbalanced quotes: a {q} was opened and never closed")
            }
        }
    }
}

impl std::error::Error for LexError {}

/// Splits `line` into commands (separated by unquoted `;`), each split into
/// arguments. Empty commands (a blank line, `;;`, a trailing `;`) are dropped.
///
/// Quoted and unquoted pieces that touch join into one argument, as in a
/// shell: `key"with space"` is the single argument `keywith space`.
pub fn split_commands(line: &str) -> Result<Vec<Args>, LexError> {
    let mut commands = Vec::new();
    let mut current: Args = Vec::new();
    let mut arg: Vec<u8> = Vec::new();
    // An argument exists once anything was written for it, even `""`.
    let mut in_arg = false;
    let bytes = line.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        let c = bytes[i];
        match c {
            b'"' => {
                i = double_quoted(bytes, i + 1, &mut arg)?;
                in_arg = true;
            }
            b'\'' => {
                i = single_quoted(bytes, i + 1, &mut arg)?;
                in_arg = true;
            }
            b';' => {
                end_arg(&mut current, &mut arg, &mut in_arg);
                if !current.is_empty() {
                    commands.push(std::mem::take(&mut current));
                }
                i += 1;
            }
            c if c.is_ascii_whitespace() => {
                end_arg(&mut current, &mut arg, &mut in_arg);
                i += 1;
            }
            c => {
                arg.push(c);
                in_arg = true;
                i += 1;
            }
        }
    }
    end_arg(&mut current, &mut arg, &mut in_arg);
    if !current.is_empty() {
        commands.push(current);
    }
    Ok(commands)
}

fn end_arg(current: &mut Args, arg: &mut Vec<u8>, in_arg: &mut bool) {
    if *in_arg {
        current.push(std::mem::take(arg));
        *in_arg = false;
    }
}

/// Reads a double-quoted piece starting just after the opening quote;
/// returns the index just after the closing quote.
fn double_quoted(bytes: &[u8], mut i: usize, out: &mut Vec<u8>) -> Result<usize, LexError> {
    while i < bytes.len() {
        match bytes[i] {
            b'"' => return Ok(i + 1),
            b'\\' => {
                let Some(&e) = bytes.get(i + 1) else {
                    return Err(LexError::UnterminatedQuote('"'));
                };
                if e == b'x' {
                    if let Some(byte) = hex_pair(bytes.get(i + 2), bytes.get(i + 3)) {
                        out.push(byte);
                        i += 4;
                        continue;
                    }
                }
                // Unknown escapes (and a malformed \x) stand for the
                // character itself, as in redis-cli.
                out.push(match e {
                    b'n' => b'\n',
                    b'r' => b'\r',
                    b't' => b'\t',
                    b'b' => 0x08,
                    b'a' => 0x07,
                    other => other,
                });
                i += 2;
            }
            c => {
                out.push(c);
                i += 1;
            }
        }
    }
    Err(LexError::UnterminatedQuote('"'))
}

/// Reads a single-quoted piece starting just after the opening quote;
/// returns the index just after the closing quote.
fn single_quoted(bytes: &[u8], mut i: usize, out: &mut Vec<u8>) -> Result<usize, LexError> {
    while i < bytes.len() {
        match (bytes[i], bytes.get(i + 1)) {
            (b'\\', Some(b'\'')) => {
                out.push(b'\'');
                i += 2;
            }
            (b'\'', _) => return Ok(i + 1),
            (c, _) => {
                out.push(c);
                i += 1;
            }
        }
    }
    Err(LexError::UnterminatedQuote('\''))
}

fn hex_pair(hi: Option<&u8>, lo: Option<&u8>) -> Option<u8> {
    let hi = (*hi? as char).to_digit(16)?;
    let lo = (*lo? as char).to_digit(16)?;
    // Two hex digits always fit in a byte.
    u8::try_from(hi * 16 + lo).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn one(line: &str) -> Vec<String> {
        let cmds = split_commands(line).unwrap();
        assert_eq!(cmds.len(), 1, "{line:?} gave {cmds:?}");
        cmds[0]
            .iter()
            .map(|a| String::from_utf8_lossy(a).into_owned())
            .collect()
    }

    #[test]
    fn whitespace_separates() {
        assert_eq!(one("  SET  k\tv  "), ["SET", "k", "v"]);
    }

    #[test]
    fn blank_lines_are_no_commands() {
        assert!(split_commands("").unwrap().is_empty());
        assert!(split_commands("   \t ").unwrap().is_empty());
        assert!(split_commands(" ; ;").unwrap().is_empty());
    }

    #[test]
    fn double_quotes_keep_spaces_and_take_escapes() {
        assert_eq!(one(r#"SET k "a b""#), ["SET", "k", "a b"]);
        assert_eq!(
            one(r#"SET k "l1\nl2\t\"q\"\\""#),
            ["SET", "k", "l1\nl2\t\"q\"\\"]
        );
    }

    #[test]
    fn hex_escapes_spell_any_byte() {
        let cmds = split_commands(r#"SET k "\x00\xffA\x41""#).unwrap();
        assert_eq!(cmds[0][2], vec![0x00, 0xff, b'A', b'A']);
    }

    #[test]
    fn malformed_hex_escape_is_literal() {
        assert_eq!(one(r#"ECHO "\xZZ""#), ["ECHO", "xZZ"]);
    }

    #[test]
    fn single_quotes_are_literal_except_quote() {
        assert_eq!(one(r"SET k 'a\nb \'c\''"), ["SET", "k", r"a\nb 'c'"]);
    }

    #[test]
    fn empty_quotes_are_an_empty_argument() {
        assert_eq!(one(r#"SET k """#), ["SET", "k", ""]);
        assert_eq!(one("SET k ''"), ["SET", "k", ""]);
    }

    #[test]
    fn touching_pieces_join() {
        assert_eq!(one(r#"SET k"ey" 'v'"al ue""#), ["SET", "key", "val ue"]);
    }

    #[test]
    fn semicolons_separate_commands_unless_quoted() {
        let cmds = split_commands(r#"BEGIN; PUT k "a;b";COMMIT;"#).unwrap();
        assert_eq!(cmds.len(), 3);
        assert_eq!(cmds[0], vec![b"BEGIN".to_vec()]);
        assert_eq!(
            cmds[1],
            vec![b"PUT".to_vec(), b"k".to_vec(), b"a;b".to_vec()]
        );
        assert_eq!(cmds[2], vec![b"COMMIT".to_vec()]);
    }

    #[test]
    fn unterminated_quotes_are_refused() {
        assert_eq!(
            split_commands(r#"SET k "abc"#),
            Err(LexError::UnterminatedQuote('"'))
        );
        assert_eq!(
            split_commands("SET k 'abc"),
            Err(LexError::UnterminatedQuote('\''))
        );
        // A backslash at the very end escapes nothing and leaves it open.
        assert_eq!(
            split_commands(r#"SET k "abc\"#),
            Err(LexError::UnterminatedQuote('"'))
        );
    }

    #[test]
    fn utf8_passes_through() {
        assert_eq!(one("SET clé \"été\""), ["SET", "clé", "été"]);
    }
}

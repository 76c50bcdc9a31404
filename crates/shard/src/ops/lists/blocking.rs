//! The blocking list commands (BLPOP BRPOP BLMPOP BLMOVE BRPOPLPUSH)
//! parsed into the command they try and how long they wait.

use bytes::Bytes;

use super::*;

/// A blocking list command (BLPOP BRPOP BLMPOP BLMOVE BRPOPLPUSH),
/// parsed: the non-blocking command that is tried (LMPOP or LMOVE), how
/// long to wait for it to find something, and whether its answer is
/// BLPOP's `[key, element]` (from LMPOP's `[key, [element]]`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Blocking {
    /// What is tried, and retried while it finds nothing.
    pub op: ListOp,
    /// Milliseconds to wait; 0 waits for ever.
    pub timeout_ms: u64,
    /// BLPOP or BRPOP: answer `[key, element]`.
    pub pair: bool,
}

/// The blocking commands' timeout error texts.
pub const ERR_TIMEOUT_FLOAT: &str = "ERR timeout is not a float or out of range";
/// A negative timeout.
pub const ERR_TIMEOUT_NEGATIVE: &str = "ERR timeout is negative";

/// Redis's `getTimeoutFromObjectOrReply` in seconds: a float, rounded up
/// to milliseconds; an infinite or huge one converts as C's cast does on
/// x86 (to LONG_MIN), so it is refused as negative, as Redis refuses it.
pub fn timeout_ms(arg: &[u8]) -> Result<u64, String> {
    let secs = crate::ops::zparse::parse_double(arg).ok_or(ERR_TIMEOUT_FLOAT)?;
    let ms = (secs * 1000.0).ceil();
    if !(0.0..9.2e18).contains(&ms) {
        return Err(ERR_TIMEOUT_NEGATIVE.into());
    }
    Ok(ms as u64)
}

impl Blocking {
    /// Parses a blocking list command (arity already checked), refusing
    /// what Redis refuses before it looks at a key, in Redis's order.
    pub fn parse(args: &[Bytes]) -> Result<Blocking, String> {
        let name = args[0].to_ascii_lowercase();
        let cmd = |words: Vec<Bytes>| ListOp::parse(words);
        let word = |w: &'static str| Bytes::from_static(w.as_bytes());
        let n = args.len();
        match &name[..] {
            b"blpop" | b"brpop" => {
                let timeout_ms = timeout_ms(&args[n - 1])?;
                let mut words = vec![word("lmpop"), Bytes::from((n - 2).to_string())];
                words.extend(args[1..n - 1].iter().cloned());
                words.push(word(if name[1] == b'l' { "left" } else { "right" }));
                Ok(Blocking {
                    op: cmd(words)?,
                    timeout_ms,
                    pair: true,
                })
            }
            b"blmpop" => {
                // LMPOP's own checks come first, then the timeout.
                let mut words = vec![word("lmpop")];
                words.extend(args[2..].iter().cloned());
                let op = cmd(words)?;
                Ok(Blocking {
                    op,
                    timeout_ms: timeout_ms(&args[1])?,
                    pair: false,
                })
            }
            b"blmove" => {
                end_of(&args[3])?;
                end_of(&args[4])?;
                let timeout_ms = timeout_ms(&args[5])?;
                let mut words = vec![word("lmove")];
                words.extend(args[1..5].iter().cloned());
                Ok(Blocking {
                    op: cmd(words)?,
                    timeout_ms,
                    pair: false,
                })
            }
            b"brpoplpush" => {
                let timeout_ms = timeout_ms(&args[3])?;
                Ok(Blocking {
                    op: cmd(vec![word("rpoplpush"), args[1].clone(), args[2].clone()])?,
                    timeout_ms,
                    pair: false,
                })
            }
            _ => Err(ERR_SYNTAX.into()),
        }
    }
}

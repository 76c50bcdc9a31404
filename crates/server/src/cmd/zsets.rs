//! Sorted-set commands. Their arguments are parsed by the shard crate's
//! `ops::zparse` (the op's wire form is its arguments, parsed again where
//! it runs); here they only become the op on the key it runs on — the
//! source of ZRANGESTORE, the first source of ZUNION and its relatives.
//! The blocking pops (BZPOPMIN BZPOPMAX BZMPOP) become the ZMPOP they try,
//! shaped to wait as the blocking list commands are (`cmd::lists`).

use bytes::Bytes;
use elsa_shard::ops::lists::timeout_ms;
use elsa_shard::ops::zsets::ZSetOp;
use elsa_shard::Op;

use super::{Args, CmdError, DataCmd, Shape};

/// Every sorted-set command.
pub fn zcmd(args: &Args) -> Result<DataCmd, CmdError> {
    let op = ZSetOp::parse(args.to_vec(), rand::random()).map_err(CmdError)?;
    Ok(DataCmd {
        ops: vec![(op.key().clone(), Op::ZSets(op))],
        shape: Shape::One,
    })
}

/// BZPOPMIN, BZPOPMAX (answered `[key, member, score]`) and BZMPOP
/// (answered as ZMPOP): the ZMPOP they try, retried by the connection
/// until it finds something or the timeout passes. Refusals come in
/// Redis 7.0's order: BZPOPMIN's timeout first; BZMPOP's ZMPOP arguments,
/// then its timeout.
pub fn bzcmd(args: &Args) -> Result<DataCmd, CmdError> {
    let word = |w: &'static str| Bytes::from_static(w.as_bytes());
    let name = args[0].to_ascii_lowercase();
    let (op, timeout_ms, pair) = if name == b"bzmpop" {
        let mut words = vec![word("zmpop")];
        words.extend(args[2..].iter().cloned());
        let op = ZSetOp::parse(words, 0).map_err(CmdError)?;
        (op, timeout_ms(&args[1]).map_err(CmdError)?, false)
    } else {
        let n = args.len();
        let timeout_ms = timeout_ms(&args[n - 1]).map_err(CmdError)?;
        let mut words = vec![word("zmpop"), Bytes::from((n - 2).to_string())];
        words.extend(args[1..n - 1].iter().cloned());
        words.push(word(if name == b"bzpopmin" { "min" } else { "max" }));
        (ZSetOp::parse(words, 0).map_err(CmdError)?, timeout_ms, true)
    };
    Ok(DataCmd {
        ops: vec![(op.key().clone(), Op::ZSets(op))],
        shape: Shape::Blocking { timeout_ms, pair },
    })
}

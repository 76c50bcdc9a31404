//! List commands. Their arguments are parsed by the shard crate's
//! `ops::lists` (the op's wire form is its arguments, parsed again where
//! it runs); here they only become the op on the key it runs on — the
//! source of LMOVE, the first key of LMPOP.

use elsa_shard::ops::lists::{Blocking, ListOp};
use elsa_shard::Op;

use super::{Args, CmdError, DataCmd, Shape};

/// Every non-blocking list command.
pub fn lcmd(args: &Args) -> Result<DataCmd, CmdError> {
    let op = ListOp::parse(args.to_vec()).map_err(CmdError)?;
    Ok(DataCmd {
        ops: vec![(op.key().clone(), Op::Lists(op))],
        shape: Shape::One,
    })
}

/// BLPOP BRPOP BLMPOP BLMOVE BRPOPLPUSH: the non-blocking command they
/// try, shaped to wait (`Shape::Blocking`): the connection retries it
/// until it finds something or the timeout passes; inside MULTI or BEGIN
/// it is tried once, as Redis runs a blocking command in a transaction.
pub fn blocking(args: &Args) -> Result<DataCmd, CmdError> {
    let b = Blocking::parse(args).map_err(CmdError)?;
    Ok(DataCmd {
        ops: vec![(b.op.key().clone(), Op::Lists(b.op))],
        shape: Shape::Blocking {
            timeout_ms: b.timeout_ms,
            pair: b.pair,
        },
    })
}

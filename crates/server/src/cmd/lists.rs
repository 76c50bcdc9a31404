//! List commands. Their arguments are parsed by the shard crate's
//! `ops::lists` (the op's wire form is its arguments, parsed again where
//! it runs); here they only become the op on the key it runs on — the
//! source of LMOVE, the first key of LMPOP.

use elsa_shard::ops::lists::ListOp;
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

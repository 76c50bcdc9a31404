//! Sorted-set commands. Their arguments are parsed by the shard crate's
//! `ops::zparse` (the op's wire form is its arguments, parsed again where
//! it runs); here they only become the op on the key it runs on — the
//! source of ZRANGESTORE, the first source of ZUNION and its relatives.

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

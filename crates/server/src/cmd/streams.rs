//! Stream commands. Their arguments are parsed by the shard crate's
//! `ops::streams` (the op's wire form is its arguments, parsed again where
//! it runs); here they only become the op on its first key, and XREAD …
//! BLOCK waits as the blocking pops do (`conn::blocking`).

use elsa_shard::ops::streams::StreamOp;
use elsa_shard::Op;

use super::{Args, CmdError, DataCmd, Shape};

/// Every stream command.
pub fn xcmd(args: &Args) -> Result<DataCmd, CmdError> {
    let op = StreamOp::parse(args.to_vec()).map_err(CmdError)?;
    let shape = match op.block_ms() {
        Some(timeout_ms) => Shape::Blocking {
            timeout_ms,
            pair: false,
        },
        None => Shape::One,
    };
    Ok(DataCmd {
        ops: vec![(op.key().clone(), Op::Streams(op))],
        shape,
    })
}

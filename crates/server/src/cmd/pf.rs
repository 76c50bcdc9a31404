//! HyperLogLog commands: PFADD, PFCOUNT, PFMERGE, PFDEBUG (the ops are
//! `elsa_shard::ops::pf`). PFSELFTEST is answered by the connection.

use elsa_shard::ops::pf::{Debug, Pf};
use elsa_shard::Op;

use super::{c_str, is, Args, CmdError, DataCmd, Shape};

fn on(key: &bytes::Bytes, pf: Pf) -> Result<DataCmd, CmdError> {
    Ok(DataCmd {
        ops: vec![(key.clone(), Op::Pf(pf))],
        shape: Shape::One,
    })
}

/// PFADD key [element …]
pub fn pfadd(args: &Args) -> Result<DataCmd, CmdError> {
    on(&args[1], Pf::Add(args[2..].to_vec()))
}

/// PFCOUNT key [key …]: runs on the first key and reads the others.
pub fn pfcount(args: &Args) -> Result<DataCmd, CmdError> {
    on(&args[1], Pf::Count(args[2..].to_vec()))
}

/// PFMERGE destkey [sourcekey …]: runs on the destination.
pub fn pfmerge(args: &Args) -> Result<DataCmd, CmdError> {
    on(&args[1], Pf::Merge(args[2..].to_vec()))
}

/// PFDEBUG GETREG|DECODE|ENCODING|TODENSE key
pub fn pfdebug(args: &Args) -> Result<DataCmd, CmdError> {
    let sub = &args[1];
    let d = if is(sub, "GETREG") {
        Debug::GetReg
    } else if is(sub, "DECODE") {
        Debug::Decode
    } else if is(sub, "ENCODING") {
        Debug::Encoding
    } else if is(sub, "TODENSE") {
        Debug::ToDense
    } else {
        return Err(CmdError(format!(
            "ERR Unknown PFDEBUG subcommand '{}'",
            String::from_utf8_lossy(c_str(sub))
        )));
    };
    on(&args[2], Pf::Debug(d))
}

//! Stream commands. Their arguments are parsed by the shard crate's
//! `ops::streams` (the op's wire form is its arguments, parsed again where
//! it runs); here they only become the op on its first key, and XREAD …
//! BLOCK waits as the blocking pops do (`conn::blocking`).

use elsa_shard::ops::streams::StreamOp;
use elsa_shard::Op;

use super::{c_str, is, Args, CmdError, DataCmd, Shape};

const XGROUP_HELP: &[&str] = &[
    "XGROUP <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
    "CREATE <key> <groupname> <id|$> [option]",
    "    Create a new consumer group. Options are:",
    "    * MKSTREAM",
    "      Create the empty stream if it does not exist.",
    "    * ENTRIESREAD entries_read",
    "      Set the group's entries_read counter (internal use).",
    "CREATECONSUMER <key> <groupname> <consumer>",
    "    Create a new consumer in the specified group.",
    "DELCONSUMER <key> <groupname> <consumer>",
    "    Remove the specified consumer.",
    "DESTROY <key> <groupname>",
    "    Remove the specified group.",
    "SETID <key> <groupname> <id|$> [ENTRIESREAD entries_read]",
    "    Set the current group ID and entries_read counter.",
    "HELP",
    "    Prints this help.",
];

const XINFO_HELP: &[&str] = &[
    "XINFO <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
    "CONSUMERS <key> <groupname>",
    "    Show consumers of <groupname>.",
    "GROUPS <key>",
    "    Show the stream consumer groups.",
    "STREAM <key> [FULL [COUNT <count>]",
    "    Show information about the stream.",
    "HELP",
    "    Prints this help.",
];

/// XGROUP and XINFO: HELP here, the rest on the key.
pub fn container(args: &Args) -> Result<DataCmd, CmdError> {
    if is(c_str(&args[1]), "HELP") {
        let lines = if is(c_str(&args[0]), "XGROUP") {
            XGROUP_HELP
        } else {
            XINFO_HELP
        };
        return Ok(DataCmd {
            ops: Vec::new(),
            shape: Shape::Help(lines),
        });
    }
    xcmd(args)
}

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

//! Introspection of one key: OBJECT (ENCODING, REFCOUNT, IDLETIME, FREQ,
//! HELP) and MEMORY (USAGE, HELP). The subcommand table in `cmd/mod.rs`
//! has already refused unknown subcommands and wrong counts, as Redis does
//! before it runs anything.

use elsa_shard::{ObjectField, Op};

use super::{c_str, int_arg, is, Args, CmdError, DataCmd, Shape};

const OBJECT_HELP: &[&str] = &[
    "OBJECT <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
    "ENCODING <key>",
    "    Return the kind of internal representation used in order to store the value",
    "    associated with a <key>.",
    "FREQ <key>",
    "    Return the access frequency index of the <key>. The returned integer is",
    "    proportional to the logarithm of the recent access frequency of the key.",
    "IDLETIME <key>",
    "    Return the idle time of the <key>, that is the approximated number of",
    "    seconds elapsed since the last access to the key.",
    "REFCOUNT <key>",
    "    Return the number of references of the value associated with the specified",
    "    <key>.",
    "HELP",
    "    Prints this help.",
];

const MEMORY_HELP: &[&str] = &[
    "MEMORY <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
    "DOCTOR",
    "    Return memory problems reports.",
    "MALLOC-STATS",
    "    Return internal statistics report from the memory allocator.",
    "PURGE",
    "    Attempt to purge dirty pages for reclamation by the allocator.",
    "STATS",
    "    Return information about the memory usage of the server.",
    "USAGE <key> [SAMPLES <count>]",
    "    Return memory in bytes used by <key> and its value. Nested values are",
    "    sampled up to <count> times (default: 5, 0 means sample all).",
    "HELP",
    "    Prints this help.",
];

fn help(lines: &'static [&'static str]) -> Result<DataCmd, CmdError> {
    Ok(DataCmd {
        ops: Vec::new(),
        shape: Shape::Help(lines),
    })
}

/// `op` on the subcommand's key. The subcommand table has checked the
/// count; a missing key is still refused rather than indexed.
fn on_key(args: &Args, container: &str, op: Op) -> Result<DataCmd, CmdError> {
    let Some(key) = args.get(2) else {
        let sub = String::from_utf8_lossy(c_str(&args[1])).to_lowercase();
        return Err(CmdError(super::wrong_arity(&format!("{container}|{sub}"))));
    };
    Ok(DataCmd {
        ops: vec![(key.clone(), op)],
        shape: Shape::One,
    })
}

/// OBJECT ENCODING|REFCOUNT|IDLETIME|FREQ key, OBJECT HELP
pub fn object(args: &Args) -> Result<DataCmd, CmdError> {
    let sub = c_str(&args[1]);
    let field = if is(sub, "ENCODING") {
        ObjectField::Encoding
    } else if is(sub, "REFCOUNT") {
        ObjectField::Refcount
    } else if is(sub, "IDLETIME") {
        ObjectField::IdleTime
    } else if is(sub, "FREQ") {
        ObjectField::Freq
    } else {
        return help(OBJECT_HELP);
    };
    on_key(args, "object", Op::Object(field))
}

/// MEMORY USAGE key [SAMPLES count], MEMORY HELP. DOCTOR, STATS,
/// MALLOC-STATS and PURGE are node-wide: `crate::memory::report` answers
/// them and sends only USAGE and HELP here.
pub fn memory(args: &Args) -> Result<DataCmd, CmdError> {
    let sub = c_str(&args[1]);
    if is(sub, "HELP") {
        return help(MEMORY_HELP);
    }
    if !is(sub, "USAGE") {
        return Err(CmdError(format!(
            "ERR MEMORY {} is not supported",
            String::from_utf8_lossy(sub).to_uppercase()
        )));
    }
    // SAMPLES bounds how much of a nested value Redis walks; a string has
    // nothing nested, so it is only checked.
    let mut i = 3;
    while i < args.len() {
        if is(c_str(&args[i]), "SAMPLES") && i + 1 < args.len() {
            if int_arg(&args[i + 1])? < 0 {
                return Err(CmdError::syntax());
            }
            i += 2;
        } else {
            return Err(CmdError::syntax());
        }
    }
    on_key(args, "memory", Op::MemoryUsage)
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::cmd::test_args as args;

    #[test]
    fn subcommands_pick_the_op() {
        let c = object(&args("OBJECT encoding k")).unwrap();
        assert_eq!(c.ops[0].1, Op::Object(ObjectField::Encoding));
        let c = object(&args("OBJECT HELP")).unwrap();
        assert!(c.ops.is_empty());
        assert_eq!(c.shape, Shape::Help(OBJECT_HELP));
        let c = memory(&args("MEMORY USAGE k SAMPLES 0 samples 5")).unwrap();
        assert_eq!(c.ops[0].1, Op::MemoryUsage);
        for line in [
            "MEMORY USAGE k SAMPLES -1",
            "MEMORY USAGE k FOO",
            "MEMORY USAGE k SAMPLES",
        ] {
            assert_eq!(
                memory(&args(line)).unwrap_err().0,
                "ERR syntax error",
                "{line}"
            );
        }
        assert_eq!(
            memory(&args("MEMORY USAGE k SAMPLES x")).unwrap_err().0,
            "ERR value is not an integer or out of range"
        );
        assert!(memory(&args("MEMORY DOCTOR")).is_err());
        assert!(
            object(&args("OBJECT ENCODING")).is_err(),
            "no panic without a key"
        );
    }
}

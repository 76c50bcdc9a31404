//! The command table: every command Elsa answers, with Redis-style metadata
//! (arity, flags, key positions) so COMMAND, the router and the transaction
//! layer can all tell what a command touches.
//!
//! Data commands turn their arguments into per-key [`Op`]s plus a [`Shape`]
//! saying how the per-key answers combine into one reply; the connection
//! decides how to run those ops (lone, in a transaction, or atomically).
//! Everything else is a [`Control`] command the connection serves itself.

mod bits;
pub mod docs;
mod docs_table;
mod hashes;
mod keys;
mod lists;
pub(crate) mod object;
mod pf;
mod sets;
mod streams;
mod strings;
mod table;
mod zsets;

use bytes::Bytes;
use elsa_shard::Op;

use table::SUBCOMMANDS;
pub use table::{lookup, spec_index, subcommands_of, COMMANDS};

/// Arguments of one request (`args[0]` is the command name).
pub type Args = [Bytes];

/// How the per-key answers of a data command become one reply.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Shape {
    /// One key: the op's answer as is.
    One,
    /// MGET: an array of the answers.
    Array,
    /// DEL / EXISTS / UNLINK over several keys: the sum.
    Sum,
    /// MSET: `+OK`.
    Ok,
    /// MOVE: its RENAMENX's answer, a missing key answering 0.
    Move,
    /// OBJECT HELP, MEMORY HELP: these lines, whatever the ops answered
    /// (they have none).
    Help(&'static [&'static str]),
    /// A blocking pop: its one op is retried until it finds something
    /// (an answer other than nil) or `timeout_ms` passes (0: never), then
    /// answered as is — or, with `pair` (BLPOP, BRPOP, BZPOPMIN,
    /// BZPOPMAX), LMPOP's `[key, [element]]` as `[key, element]` and
    /// ZMPOP's `[key, [[member, score]]]` as `[key, member, score]`.
    Blocking {
        /// How long to wait.
        timeout_ms: u64,
        /// BLPOP/BRPOP's reply.
        pair: bool,
    },
}

/// A data command, parsed: what to do to which keys.
#[derive(Clone, Debug)]
pub struct DataCmd {
    /// Ops in command order.
    pub ops: Vec<(Bytes, Op)>,
    /// How their answers combine.
    pub shape: Shape,
}

impl DataCmd {
    /// True when the command is one op on one key: it may run as a lone
    /// command (batched per shard). An op that reaches other keys (RENAME)
    /// needs them held with its own, so it runs atomically instead.
    pub fn is_single_key(&self) -> bool {
        matches!(&self.ops[..], [(_, op)] if op.other_keys().is_empty())
    }
}

/// Commands the connection serves itself.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Control {
    Ping,
    Echo,
    Hello,
    Quit,
    Select,
    Client,
    Command,
    Config,
    Info,
    Dbsize,
    Randomkey,
    Flushall,
    Flushdb,
    Swapdb,
    Scan,
    Keys,
    Auth,
    Time,
    Reset,
    Begin,
    Ack,
    Commit,
    Abort,
    LastCommit,
    Multi,
    Exec,
    Discard,
    Watch,
    Unwatch,
    Msetnx,
    Save,
    Bgsave,
    Lastsave,
    /// SORT, SORT_RO (`crate::sort`).
    Sort,
    /// WAIT numreplicas timeout (`crate::replication`).
    Wait,
    /// ROLE (this node answers as a master without replicas).
    Role,
    /// LOLWUT [VERSION v].
    Lolwut,
    /// PFSELFTEST
    PfSelfTest,
    /// DUMP
    Dump,
    /// RESTORE, RESTORE-ASKING
    Restore,
    WaitRegion,
    ElsaDigest,
    ElsaFault,
    ElsaDecommission,
    // pub/sub (`crate::pubsub::commands`)
    Subscribe,
    Unsubscribe,
    Psubscribe,
    Punsubscribe,
    Ssubscribe,
    Sunsubscribe,
    Publish,
    Spublish,
    Pubsub,
    /// EVAL, EVALSHA, EVAL_RO, EVALSHA_RO (`crate::script`).
    Eval,
    /// SCRIPT LOAD|EXISTS|FLUSH|KILL|HELP.
    Script,
    /// FUNCTION LOAD|DELETE|LIST|… (FCALL and FCALL_RO are `Eval`).
    Function,
    /// ACL SETUSER|GETUSER|… (`crate::acl`).
    Acl,
    /// SLOWLOG GET|LEN|RESET|HELP (`crate::intro`).
    Slowlog,
    /// LATENCY LATEST|HISTORY|RESET|HISTOGRAM|DOCTOR|HELP (`crate::intro`).
    Latency,
    /// MEMORY USAGE|STATS|DOCTOR|MALLOC-STATS|PURGE (`crate::memory`).
    Memory,
    /// CLUSTER KEYSLOT|SLOTS|SHARDS|NODES|INFO|MYID (`crate::cluster_cmd`).
    Cluster,
    /// MONITOR and SHUTDOWN (`crate::clients`).
    Monitor,
    Shutdown,
}

/// What kind of command a name is.
#[derive(Clone, Copy, Debug)]
pub enum Kind {
    /// Parsed into ops by this function.
    Data(fn(&Args) -> Result<DataCmd, CmdError>),
    /// Served by the connection.
    Control(Control),
}

/// One row of the command table.
#[derive(Debug)]
pub struct Spec {
    /// Lowercase name, as COMMAND reports it.
    pub name: &'static str,
    /// Redis arity: `n` exact argument count (name included), `-n` at least n.
    pub arity: i32,
    /// COMMAND flags.
    pub flags: &'static [&'static str],
    /// First key position (0 = no keys).
    pub first_key: i32,
    /// Last key position (-1 = last argument).
    pub last_key: i32,
    /// Step between keys.
    pub step: i32,
    /// How it runs.
    pub kind: Kind,
}

impl Spec {
    /// True when `argc` (name included) satisfies the arity.
    pub fn arity_ok(&self, argc: usize) -> bool {
        if self.arity >= 0 {
            argc == self.arity as usize
        } else {
            argc >= (-self.arity) as usize
        }
    }

    /// True for commands allowed before AUTH when a password is set.
    pub fn allowed_unauthenticated(&self) -> bool {
        matches!(
            self.kind,
            Kind::Control(Control::Auth | Control::Hello | Control::Quit | Control::Reset)
        )
    }

    /// True for commands that change data (COMMAND's `write` flag).
    pub fn is_write(&self) -> bool {
        self.flags.contains(&"write")
    }

    /// Redis's `may_replicate` (not among the flags COMMAND shows): a
    /// command that may change data or reach replicas although it is no
    /// write — refused from read-only scripts, paused by CLIENT PAUSE WRITE.
    pub fn may_replicate(&self) -> bool {
        matches!(
            self.name,
            "eval" | "evalsha" | "publish" | "spublish" | "fcall" | "pfcount"
        )
    }
}

/// How many databases SELECT offers (`databases`; set once at startup).
static DATABASES: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(16);

/// Sets how many databases SELECT, MOVE and COPY … DB accept.
pub fn set_databases(n: usize) {
    DATABASES.store(n.clamp(1, 256), std::sync::atomic::Ordering::Relaxed);
}

/// A database index as SELECT, MOVE and COPY … DB read it: Redis's
/// errors for a non-integer and for an index out of range.
pub fn db_index(arg: &[u8]) -> Result<u8, CmdError> {
    let n = elsa_shard::ops::parse_i64(arg).ok_or_else(CmdError::not_integer)?;
    if i32::try_from(n).is_err() {
        return Err(
            "ERR value is out of range, value must between -2147483648 and 2147483647".into(),
        );
    }
    match usize::try_from(n) {
        Ok(n) if n < DATABASES.load(std::sync::atomic::Ordering::Relaxed) => Ok(n as u8),
        _ => Err("ERR DB index is out of range".into()),
    }
}

/// Where a request names keys (Redis's `getKeysFromCommand`): the fixed
/// positions of the command table, or, for the commands whose keys follow
/// a count (`numkeys`), the positions that count gives. A count that is
/// not a number, or reaches past the arguments, gives what fits: the
/// command's own parse refuses it anyway.
pub fn key_positions(spec: &Spec, args: &Args) -> Vec<usize> {
    let counted = |at: usize, first: Vec<usize>| {
        let n = args
            .get(at)
            .and_then(|a| elsa_shard::ops::parse_i64(a))
            .and_then(|n| usize::try_from(n).ok())
            .unwrap_or(0);
        let end = (at + 1).saturating_add(n).min(args.len());
        first.into_iter().chain(at + 1..end).collect()
    };
    match spec.name {
        "zunion" | "zinter" | "zdiff" | "zintercard" | "sintercard" | "lmpop" | "zmpop" => {
            counted(1, vec![])
        }
        "zunionstore" | "zinterstore" | "zdiffstore" => counted(2, vec![1]),
        "blmpop" | "bzmpop" | "eval" | "evalsha" | "eval_ro" | "evalsha_ro" | "fcall"
        | "fcall_ro" => counted(2, vec![]),
        // The source, and each STORE/STOREDIST's key after the fifth
        // argument (Redis 7.0's key specs: the last one is written).
        "georadius" | "georadiusbymember" => {
            let mut keys = vec![1];
            let mut i = 5;
            while i < args.len() {
                if (is(&args[i], "store") || is(&args[i], "storedist")) && i + 1 < args.len() {
                    keys.push(i + 1);
                    i += 1;
                }
                i += 1;
            }
            keys
        }
        // The key, then STORE's (Redis's `sortGetKeys`: options with
        // arguments skipped).
        "sort" => {
            let mut keys = vec![1];
            let mut i = 2;
            while i < args.len() {
                let skip = if is(&args[i], "limit") {
                    2
                } else if is(&args[i], "get") || is(&args[i], "by") {
                    1
                } else if is(&args[i], "store") && i + 1 < args.len() {
                    keys.truncate(1);
                    keys.push(i + 1);
                    1
                } else {
                    0
                };
                i += skip + 1;
            }
            keys
        }
        // XREAD's keys: the first half of what follows STREAMS (Redis's
        // `xreadGetKeys`: options with an argument skipped).
        "xread" | "xreadgroup" => {
            let mut i = 1;
            while i < args.len() {
                if is(&args[i], "block") || is(&args[i], "count") {
                    i += 2;
                } else if is(&args[i], "group") {
                    i += 3;
                } else if is(&args[i], "streams") {
                    let n = (args.len() - i - 1) / 2;
                    return (i + 1..i + 1 + n).collect();
                } else {
                    i += 1;
                }
            }
            vec![]
        }
        // OBJECT ENCODING key, MEMORY USAGE key [SAMPLES n]
        "object" | "memory" | "xgroup" | "xinfo" if args.len() >= 3 => vec![2],
        _ if spec.first_key <= 0 => vec![],
        _ => {
            let last = if spec.last_key < 0 {
                args.len() as i64 + spec.last_key as i64
            } else {
                spec.last_key as i64
            };
            let step = spec.step.max(1) as usize;
            (spec.first_key as usize..=last.max(0) as usize)
                .step_by(step)
                .filter(|&i| i < args.len())
                .collect()
        }
    }
}

/// A command-level error, answered as a Redis error line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CmdError(pub String);

impl CmdError {
    /// `ERR syntax error`.
    pub fn syntax() -> CmdError {
        CmdError("ERR syntax error".into())
    }

    /// `ERR value is not an integer or out of range`.
    pub fn not_integer() -> CmdError {
        CmdError(elsa_shard::ops::ERR_NOT_INTEGER.into())
    }
}

impl From<&str> for CmdError {
    fn from(text: &str) -> CmdError {
        CmdError(text.into())
    }
}

/// The Redis error for an unknown command: the name, then the arguments,
/// each quoted and followed by a space, while the list is under 128 bytes
/// (the last one cut to what is left). Redis prints them as C strings, so
/// each stops at a NUL byte.
pub fn unknown_command(args: &Args) -> String {
    const LIST_MAX: usize = 128;
    let name = args.first().map_or(&[][..], |a| c_str(a));
    let mut list: Vec<u8> = Vec::new();
    for a in args.iter().skip(1) {
        if list.len() >= LIST_MAX {
            break;
        }
        let a = c_str(a);
        let room = LIST_MAX - list.len();
        list.push(b'\'');
        list.extend_from_slice(&a[..a.len().min(room)]);
        list.extend_from_slice(b"' ");
    }
    format!(
        "ERR unknown command '{}', with args beginning with: {}",
        String::from_utf8_lossy(&name[..name.len().min(128)]),
        String::from_utf8_lossy(&list)
    )
}

/// The Redis error for a wrong argument count.
pub fn wrong_arity(name: &str) -> String {
    format!("ERR wrong number of arguments for '{name}' command")
}

/// Redis's refusal of a container command's subcommand (unknown, or the
/// wrong number of arguments), if any.
pub fn subcommand_error(spec: &Spec, args: &Args) -> Option<String> {
    let (_, subs) = SUBCOMMANDS.iter().find(|(name, _)| *name == spec.name)?;
    // With no subcommand Redis checks only the container's own arity.
    let sub = c_str(args.get(1)?);
    let Some((sub_name, arity)) = subs.iter().find(|(name, _)| is(sub, name)) else {
        return Some(format!(
            "ERR unknown subcommand '{}'. Try {} HELP.",
            String::from_utf8_lossy(&sub[..sub.len().min(128)]),
            spec.name.to_uppercase()
        ));
    };
    let ok = if *arity >= 0 {
        args.len() == *arity as usize
    } else {
        args.len() >= (-arity) as usize
    };
    (!ok).then(|| wrong_arity(&format!("{}|{sub_name}", spec.name)))
}

/// Redis's full name of a command (`c->cmd->fullname`): `config|get` for
/// a container's subcommand, else the name.
pub fn full_name(spec: &Spec, args: &Args) -> String {
    let sub = SUBCOMMANDS
        .iter()
        .find(|(name, _)| *name == spec.name)
        .and_then(|(_, subs)| {
            let arg = args.get(1)?;
            subs.iter().find(|(name, _)| is(arg, name))
        });
    match sub {
        Some((sub, _)) => format!("{}|{sub}", spec.name),
        None => spec.name.to_string(),
    }
}

/// An argument as C code sees it: up to its first NUL byte. Redis reads
/// option names and error-message arguments that way.
pub fn c_str(b: &[u8]) -> &[u8] {
    b.iter().position(|&c| c == 0).map_or(b, |n| &b[..n])
}

/// A command of one op on the key its first argument names.
fn one(args: &Args, op: Op) -> Result<DataCmd, CmdError> {
    Ok(DataCmd {
        ops: vec![(args[1].clone(), op)],
        shape: Shape::One,
    })
}

/// HSCAN's and SSCAN's `key cursor [MATCH p] [COUNT n]`: the cursor is
/// checked now, the options only once the key is found (Redis reads them
/// after the key), so a refused option rides along in the op.
pub fn scan_args(args: &Args) -> Result<elsa_shard::ops::ScanArgs, CmdError> {
    elsa_shard::ops::scan_args_of(args).map_err(CmdError)
}

/// The arity check of a whole request: the table's, and for ZRANK and
/// ZREVRANK 7.2's optional WITHSCORE but no other extra argument (7.0's
/// arity is exactly 3, and a wrong count is refused before anything runs,
/// inside MULTI too).
pub fn arity_ok_for(spec: &Spec, args: &Args) -> bool {
    spec.arity_ok(args.len())
        && match spec.name {
            "zrank" | "zrevrank" => {
                args.len() == 3 || (args.len() == 4 && is(&args[3], "withscore"))
            }
            _ => true,
        }
}

/// Parses a whole-number argument.
pub fn int_arg(b: &[u8]) -> Result<i64, CmdError> {
    elsa_shard::ops::parse_i64(b).ok_or_else(CmdError::not_integer)
}

/// True when `arg` equals `word`, ignoring ASCII case.
pub fn is(arg: &[u8], word: &str) -> bool {
    arg.eq_ignore_ascii_case(word.as_bytes())
}

/// A command line split at spaces into arguments (unit tests of the
/// parsers).
#[cfg(test)]
pub(crate) fn test_args(s: &str) -> Vec<bytes::Bytes> {
    s.split(' ')
        .map(|a| bytes::Bytes::copy_from_slice(a.as_bytes()))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_unique_and_lowercase() {
        assert_eq!(table::BY_NAME.len(), COMMANDS.len());
        for s in COMMANDS {
            assert_eq!(s.name, s.name.to_lowercase());
        }
    }

    #[test]
    fn lookup_ignores_case() {
        assert_eq!(lookup(b"gEt").map(|s| s.name), Some("get"));
        assert!(lookup(b"nosuchcommand").is_none());
        assert!(lookup(&[0xff; 100]).is_none());
    }
}

//! COMMAND DOCS: each command's documentation as Redis 7.0 answers it
//! (`addReplyCommandDocs`). Redis's commands take theirs from the table
//! `scripts/gen_command_docs.py` generates from Redis's own
//! `src/commands/*.json` (`docs_table.rs`); Elsa's own commands have the
//! short docs written here. A container shows only the subcommands Elsa
//! has.

use super::docs_table::REDIS;
use crate::resp::ReplyWriter;

/// One command's (or subcommand's) documentation.
#[derive(Debug)]
pub struct Doc {
    /// Lowercase name; a subcommand's is `container|sub`.
    pub name: &'static str,
    pub summary: Option<&'static str>,
    pub since: Option<&'static str>,
    pub group: &'static str,
    pub complexity: Option<&'static str>,
    pub doc_flags: &'static [&'static str],
    pub deprecated_since: Option<&'static str>,
    pub replaced_by: Option<&'static str>,
    pub history: Option<&'static [(&'static str, &'static str)]>,
    pub args: Option<&'static [Arg]>,
    pub subcommands: &'static [Doc],
    /// Per key spec: its first position (0: found by a keyword search)
    /// and its flags as COMMAND GETKEYSANDFLAGS names them.
    pub key_flags: &'static [(i32, &'static [&'static str])],
}

/// One argument in a command's syntax.
#[derive(Debug)]
pub struct Arg {
    pub name: &'static str,
    /// `string`, `integer`, `key`, `pure-token`, `oneof`, `block`…
    pub kind: &'static str,
    /// Which key spec a key argument is (-1: not a key).
    pub key_spec_index: i32,
    pub token: Option<&'static str>,
    pub summary: Option<&'static str>,
    pub since: Option<&'static str>,
    pub deprecated_since: Option<&'static str>,
    pub flags: &'static [&'static str],
    /// A `oneof` or `block`'s arguments.
    pub args: &'static [Arg],
}

const fn arg(name: &'static str, kind: &'static str, flags: &'static [&'static str]) -> Arg {
    Arg {
        name,
        kind,
        key_spec_index: -1,
        token: None,
        summary: None,
        since: None,
        deprecated_since: None,
        flags,
        args: &[],
    }
}

const fn token(name: &'static str, t: &'static str) -> Arg {
    Arg {
        name,
        kind: "pure-token",
        key_spec_index: -1,
        token: Some(t),
        summary: None,
        since: None,
        deprecated_since: None,
        flags: &[],
        args: &[],
    }
}

const fn elsa(
    name: &'static str,
    summary: &'static str,
    group: &'static str,
    complexity: &'static str,
    args: Option<&'static [Arg]>,
) -> Doc {
    Doc {
        name,
        summary: Some(summary),
        since: Some("0.1.0"),
        group,
        complexity: Some(complexity),
        doc_flags: &[],
        deprecated_since: None,
        replaced_by: None,
        history: None,
        args,
        subcommands: &[],
        key_flags: &[],
    }
}

const ISOLATION: Arg = Arg {
    name: "isolation",
    kind: "oneof",
    key_spec_index: -1,
    token: None,
    summary: None,
    since: None,
    deprecated_since: None,
    flags: &["optional"],
    args: &[token("rc", "RC"), token("rr", "RR"), token("si", "SI")],
};

const ACK_LEVEL: Arg = Arg {
    name: "level",
    kind: "oneof",
    key_spec_index: -1,
    token: None,
    summary: None,
    since: None,
    deprecated_since: None,
    flags: &[],
    args: &[
        token("local", "LOCAL"),
        token("region", "REGION"),
        token("all", "ALL"),
    ],
};

const ACK_OPTION: Arg = Arg {
    name: "ack",
    kind: "block",
    key_spec_index: -1,
    token: Some("ACK"),
    summary: None,
    since: None,
    deprecated_since: None,
    flags: &["optional"],
    args: &[ACK_LEVEL],
};

const KEY: Arg = Arg {
    name: "key",
    kind: "key",
    key_spec_index: 0,
    token: None,
    summary: None,
    since: None,
    deprecated_since: None,
    flags: &[],
    args: &[],
};

/// Elsa's own commands (docs/commands.md says more).
static ELSA: &[Doc] = &[
    elsa(
        "abort",
        "Abort the interactive transaction BEGIN started: nothing it wrote is kept",
        "transactions",
        "O(N) where N is the number of keys the transaction touched",
        None,
    ),
    elsa(
        "ack",
        "Set when this connection's commits are acknowledged: logged locally, by the region's replicas, or merged by every region",
        "transactions",
        "O(1)",
        Some(&[Arg {
            flags: &["optional"],
            ..ACK_LEVEL
        }]),
    ),
    elsa(
        "begin",
        "Start an interactive transaction at an isolation level (read committed, repeatable read, snapshot isolation)",
        "transactions",
        "O(1)",
        Some(&[ISOLATION, ACK_OPTION]),
    ),
    elsa(
        "commit",
        "Commit the interactive transaction BEGIN started; answers its commit timestamp, or CONFLICT",
        "transactions",
        "O(N) where N is the number of keys the transaction touched",
        None,
    ),
    elsa(
        "delete",
        "Alias of DEL: delete keys",
        "generic",
        "O(N) where N is the number of keys that will be removed",
        Some(&[Arg {
            flags: &["multiple"],
            ..KEY
        }]),
    ),
    elsa(
        "elsa.digest",
        "A digest of this node's keys (anti-entropy, tests)",
        "server",
        "O(N) where N is the number of keys",
        None,
    ),
    elsa(
        "elsa.decommission",
        "Remove this node from its cluster: its slots drain to the other nodes first",
        "server",
        "O(1); the drain runs in the background",
        None,
    ),
    elsa(
        "elsa.fault",
        "Inject a fault (only with fault-injection on)",
        "server",
        "O(1)",
        Some(&[arg("fault", "string", &[]), arg("arg", "string", &["optional", "multiple"])]),
    ),
    elsa(
        "lastcommit",
        "The commit timestamp of this connection's last commit",
        "transactions",
        "O(1)",
        None,
    ),
    elsa(
        "put",
        "Set the string value of a key (SET without options)",
        "string",
        "O(1)",
        Some(&[KEY, arg("value", "string", &[])]),
    ),
    elsa(
        "rollback",
        "Alias of ABORT",
        "transactions",
        "O(N) where N is the number of keys the transaction touched",
        None,
    ),
    elsa(
        "waitregion",
        "Wait until this connection's last commit is merged by the other regions",
        "server",
        "O(1)",
        Some(&[
            arg("numregions", "integer", &[]),
            arg("timeout", "integer", &[]),
            arg("stream", "string", &["optional"]),
        ]),
    ),
];

/// The documentation of `name` (`get`, `config|get`), Redis's or Elsa's.
pub fn find(name: &str) -> Option<&'static Doc> {
    let top = name.split('|').next().unwrap_or(name);
    let doc = REDIS
        .binary_search_by(|d| d.name.cmp(top))
        .ok()
        .map(|i| &REDIS[i])
        .or_else(|| ELSA.iter().find(|d| d.name == top))?;
    if top.len() == name.len() {
        return Some(doc);
    }
    doc.subcommands.iter().find(|s| s.name == name)
}

/// Writes `doc` as Redis does; a container's subcommands only those
/// `has_sub` says Elsa has.
pub fn write(w: &mut ReplyWriter<'_>, doc: &Doc, has_sub: &dyn Fn(&str) -> bool) {
    let subs: Vec<&Doc> = doc.subcommands.iter().filter(|s| has_sub(s.name)).collect();
    let container = !doc.subcommands.is_empty();
    let len = 1
        + doc.summary.is_some() as usize
        + doc.since.is_some() as usize
        + doc.complexity.is_some() as usize
        + !doc.doc_flags.is_empty() as usize
        + doc.deprecated_since.is_some() as usize
        + doc.replaced_by.is_some() as usize
        + doc.history.is_some() as usize
        + doc.args.is_some() as usize
        + container as usize;
    w.map(len);
    let text = |w: &mut ReplyWriter<'_>, k: &str, v: Option<&str>| {
        if let Some(v) = v {
            w.bulk(k.as_bytes());
            w.bulk(v.as_bytes());
        }
    };
    text(w, "summary", doc.summary);
    text(w, "since", doc.since);
    text(w, "group", Some(doc.group));
    text(w, "complexity", doc.complexity);
    if !doc.doc_flags.is_empty() {
        w.bulk(b"doc_flags");
        w.set(doc.doc_flags.len());
        for f in doc.doc_flags {
            w.simple(f);
        }
    }
    text(w, "deprecated_since", doc.deprecated_since);
    text(w, "replaced_by", doc.replaced_by);
    if let Some(h) = doc.history {
        w.bulk(b"history");
        w.set(h.len());
        for (since, what) in h {
            w.array(2);
            w.bulk(since.as_bytes());
            w.bulk(what.as_bytes());
        }
    }
    if let Some(args) = doc.args {
        w.bulk(b"arguments");
        write_args(w, args);
    }
    if container {
        w.bulk(b"subcommands");
        w.map(subs.len());
        for s in subs {
            w.bulk(s.name.as_bytes());
            write(w, s, has_sub);
        }
    }
}

fn write_args(w: &mut ReplyWriter<'_>, args: &[Arg]) {
    w.array(args.len());
    for a in args {
        let nested = matches!(a.kind, "oneof" | "block");
        let len = 2
            + (a.key_spec_index != -1) as usize
            + a.token.is_some() as usize
            + a.summary.is_some() as usize
            + a.since.is_some() as usize
            + a.deprecated_since.is_some() as usize
            + !a.flags.is_empty() as usize
            + nested as usize;
        w.map(len);
        w.bulk(b"name");
        w.bulk(a.name.as_bytes());
        w.bulk(b"type");
        w.bulk(a.kind.as_bytes());
        if a.key_spec_index != -1 {
            w.bulk(b"key_spec_index");
            w.int(a.key_spec_index as i64);
        }
        for (k, v) in [
            ("token", a.token),
            ("summary", a.summary),
            ("since", a.since),
            ("deprecated_since", a.deprecated_since),
        ] {
            if let Some(v) = v {
                w.bulk(k.as_bytes());
                w.bulk(v.as_bytes());
            }
        }
        if !a.flags.is_empty() {
            w.bulk(b"flags");
            w.set(a.flags.len());
            for f in a.flags {
                w.simple(f);
            }
        }
        if nested {
            w.bulk(b"arguments");
            write_args(w, a.args);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_command_has_docs() {
        assert!(REDIS.windows(2).all(|w| w[0].name < w[1].name));
        for spec in super::super::COMMANDS {
            assert!(find(spec.name).is_some(), "no docs for {}", spec.name);
        }
        assert_eq!(find("config|get").map(|d| d.group), Some("server"));
        assert!(find("config|nosuch").is_none());
    }
}

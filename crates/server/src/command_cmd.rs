//! COMMAND's introspection subcommands beyond the table itself: DOCS
//! (`cmd::docs`), GETKEYS and GETKEYSANDFLAGS (the command table's key
//! positions, with the flags of Redis's key specs), LIST [FILTERBY MODULE
//! |ACLCAT|PATTERN], as Redis 7.0's `server.c` answers them.

use bytes::Bytes;

use crate::cmd::{self, docs, is, Spec};
use crate::conn::Conn;

impl Conn {
    /// COMMAND DOCS [command …]: every command Elsa runs, or those named
    /// (unknown names left out, as Redis).
    pub(crate) fn command_docs(&mut self, names: &[Bytes], listed: &[&'static Spec]) {
        let has_sub = |full: &str| {
            let (container, sub) = full.split_once('|').unwrap_or((full, ""));
            cmd::subcommands_of(container).is_some_and(|subs| subs.iter().any(|(s, _)| *s == sub))
        };
        let chosen: Vec<(String, &docs::Doc)> = if names.is_empty() {
            listed
                .iter()
                .filter_map(|s| Some((s.name.to_string(), docs::find(s.name)?)))
                .collect()
        } else {
            names
                .iter()
                .filter_map(|n| {
                    let name = String::from_utf8_lossy(n).to_ascii_lowercase();
                    let top = name.split('|').next().unwrap_or(&name);
                    if !listed.iter().any(|s| s.name == top) {
                        return None;
                    }
                    if name.contains('|') && !has_sub(&name) {
                        return None;
                    }
                    Some((name.clone(), docs::find(&name)?))
                })
                .collect()
        };
        let mut w = self.w();
        w.map(chosen.len());
        for (name, doc) in chosen {
            w.bulk(name.as_bytes());
            docs::write(&mut w, doc, &has_sub);
        }
    }

    /// COMMAND GETKEYS / GETKEYSANDFLAGS command [arg …]
    pub(crate) fn command_getkeys(&mut self, args: &[Bytes], with_flags: bool) {
        let req = &args[2..];
        let Some(spec) = cmd::lookup(&req[0]).filter(|s| self.command_exists(s)) else {
            return self.w().error("ERR Invalid command specified");
        };
        let full = cmd::full_name(spec, req);
        // A container with a subcommand Elsa lacks is no command to Redis.
        if cmd::subcommands_of(spec.name).is_some() && req.len() >= 2 && !full.contains('|') {
            return self.w().error("ERR Invalid command specified");
        }
        let doc = docs::find(&full);
        let movable = spec.flags.contains(&"movablekeys");
        let has_keys = spec.first_key > 0
            || movable
            || doc.is_some_and(|d| !d.key_flags.is_empty())
            || matches!(spec.name, "object" | "memory") && full.contains('|');
        if !has_keys || (full.contains('|') && doc.is_some_and(|d| d.key_flags.is_empty())) {
            return self.w().error("ERR The command has no key arguments");
        }
        let arity_ok = match subcommand_arity(spec, &full) {
            Some(a) => arity_fits(a, req.len()),
            None => cmd::arity_ok_for(spec, req),
        };
        if !arity_ok {
            return self
                .w()
                .error("ERR Invalid number of arguments specified for command");
        }
        let keys = cmd::key_positions(spec, req);
        if keys.is_empty() && !spec.flags.contains(&"no_mandatory_keys") {
            return self
                .w()
                .error("ERR Invalid arguments specified for command");
        }
        let flags_of = |pos: usize| -> Vec<&'static str> {
            let specs = doc.map_or(&[][..], |d| d.key_flags);
            // The spec whose first position is the nearest at or before
            // the key's; a keyword-found spec (0) otherwise.
            let found = specs
                .iter()
                .filter(|(begin, _)| *begin > 0 && *begin as usize <= pos)
                .max_by_key(|(begin, _)| *begin)
                .or_else(|| specs.first());
            match found {
                // GEORADIUS's STORE/STOREDIST key and SORT's STORE key
                // (found by keyword).
                Some(_)
                    if matches!(spec.name, "georadius" | "georadiusbymember" | "sort")
                        && pos > 1 =>
                {
                    vec!["OW", "update"]
                }
                // SET's flags depend on its GET option (Redis's `setGetKeys`).
                Some(_) if spec.name == "set" => {
                    if req[3..].iter().any(|a| is(a, "GET")) {
                        vec!["RW", "access", "update"]
                    } else {
                        vec!["OW", "update"]
                    }
                }
                Some((_, f)) => f.to_vec(),
                None if spec.is_write() => vec!["RW"],
                None => vec!["RO"],
            }
        };
        let mut w = self.w();
        w.array(keys.len());
        for pos in keys {
            if with_flags {
                w.array(2);
                w.bulk(&req[pos]);
                let f = flags_of(pos);
                w.set(f.len());
                for flag in f {
                    w.simple(flag);
                }
            } else {
                w.bulk(&req[pos]);
            }
        }
    }

    /// COMMAND LIST [FILTERBY MODULE name | ACLCAT category | PATTERN p]:
    /// full names, subcommands included, as Redis.
    pub(crate) fn command_list(&mut self, args: &[Bytes], listed: &[&'static Spec]) {
        enum Filter {
            None,
            Module,
            Category(u32),
            Pattern(Bytes),
        }
        let filter = match &args[2..] {
            [] => Filter::None,
            [by, kind, arg] if is(by, "FILTERBY") => {
                if is(kind, "MODULE") {
                    Filter::Module
                } else if is(kind, "ACLCAT") {
                    // An unknown category matches nothing, as Redis.
                    Filter::Category(crate::acl::category(arg).unwrap_or(0))
                } else if is(kind, "PATTERN") {
                    Filter::Pattern(arg.clone())
                } else {
                    return self.w().error("ERR syntax error");
                }
            }
            _ => return self.w().error("ERR syntax error"),
        };
        let mut names: Vec<String> = Vec::new();
        for spec in listed {
            names.push(spec.name.to_string());
            if let Some(subs) = cmd::subcommands_of(spec.name) {
                names.extend(subs.iter().map(|(s, _)| format!("{}|{s}", spec.name)));
            }
        }
        let table = &crate::acl::TABLE;
        names.retain(|n| match &filter {
            Filter::None => true,
            // Elsa has no modules.
            Filter::Module => false,
            Filter::Category(cat) => table
                .id(n.as_bytes())
                .is_some_and(|id| table.cmds[id as usize].cats & cat != 0),
            Filter::Pattern(p) => elsa_shard::glob::matches(p, n.as_bytes()),
        });
        self.w().bulks(names.iter().map(|n| n.as_bytes()));
    }
}

/// A subcommand's own arity (`full` is `container|sub`).
fn subcommand_arity(spec: &Spec, full: &str) -> Option<i32> {
    let (_, sub) = full.split_once('|')?;
    cmd::subcommands_of(spec.name)?
        .iter()
        .find(|(s, _)| *s == sub)
        .map(|(_, a)| *a)
}

fn arity_fits(arity: i32, argc: usize) -> bool {
    if arity >= 0 {
        argc == arity as usize
    } else {
        argc >= (-arity) as usize
    }
}

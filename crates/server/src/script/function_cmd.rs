//! FUNCTION LOAD|DELETE|LIST|STATS|KILL|FLUSH|DUMP|RESTORE|HELP and
//! FCALL/FCALL_RO over a connection, with Redis 7.0's replies and errors
//! (`functions.c`). The libraries are the node's (`super::library`); a
//! library's code is run on a script thread to learn what it registers
//! (`super::libload`); a call runs as a script does (`super::run`).

use bytes::Bytes;
use elsa_lattice::libraries::{Code, ALLOW_OOM, FLAG_NAMES, NO_WRITES};

use super::library::Policy;
use super::lua::Job;
use super::run::Script;
use super::{libload, BUSY};
use crate::cmd::is;
use crate::conn::Conn;

const FUNCTION_HELP: &[&str] = &[
    "FUNCTION <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
    "LOAD [REPLACE] <FUNCTION CODE>",
    "    Create a new library with the given library name and code.",
    "DELETE <LIBRARY NAME>",
    "    Delete the given library.",
    "LIST [LIBRARYNAME PATTERN] [WITHCODE]",
    "    Return general information on all the libraries:",
    "    * Library name",
    "    * The engine used to run the Library",
    "    * Library description",
    "    * Functions list",
    "    * Library code (if WITHCODE is given)",
    "    It also possible to get only function that matches a pattern using LIBRARYNAME argument.",
    "STATS",
    "    Return information about the current function running:",
    "    * Function name",
    "    * Command used to run the function",
    "    * Duration in MS that the function is running",
    "    If no function is running, return nil",
    "    In addition, returns a list of available engines.",
    "KILL",
    "    Kill the current running function.",
    "FLUSH [ASYNC|SYNC]",
    "    Delete all the libraries.",
    "    When called without the optional mode argument, the behavior is determined by the",
    "    lazyfree-lazy-user-flush configuration directive. Valid modes are:",
    "    * ASYNC: Asynchronously flush the libraries.",
    "    * SYNC: Synchronously flush the libraries.",
    "DUMP",
    "    Return a serialized payload representing the current libraries, can be restored using FUNCTION RESTORE command",
    "RESTORE <PAYLOAD> [FLUSH|APPEND|REPLACE]",
    "    Restore the libraries represented by the given payload, it is possible to give a restore policy to",
    "    control how to handle existing libraries (default APPEND):",
    "    * FLUSH: delete all existing libraries.",
    "    * APPEND: appends the restored libraries to the existing libraries. On collision, abort.",
    "    * REPLACE: appends the restored libraries to the existing libraries, On collision, replace the old",
    "      libraries with the new libraries (notice that even on this option there is a chance of failure",
    "      in case of functions name collision with another library).",
    "HELP",
    "    Prints this help.",
];

/// Redis's `addReplySubcommandSyntaxError`.
fn syntax_error(sub: &[u8]) -> String {
    let sub = String::from_utf8_lossy(&sub[..sub.len().min(128)]);
    format!("ERR unknown subcommand or wrong number of arguments for '{sub}'. Try FUNCTION HELP.")
}

impl Conn {
    /// FUNCTION and its subcommands (arity and subcommand already checked
    /// by the command table).
    pub(crate) async fn function(&mut self, args: &[Bytes]) {
        let sub = &args[1];
        let functions = self.shared.scripts.functions.clone();
        if is(sub, "LOAD") {
            self.function_load(args).await;
        } else if is(sub, "DELETE") {
            match functions.delete(&args[2]) {
                Ok(()) => self.w().simple("OK"),
                Err(e) => self.w().error(&e),
            }
        } else if is(sub, "LIST") {
            self.function_list(args);
        } else if is(sub, "STATS") {
            self.function_stats();
        } else if is(sub, "KILL") {
            match self.shared.scripts.kill(true) {
                Ok(()) => self.w().simple("OK"),
                Err(e) => self.w().error(e),
            }
        } else if is(sub, "FLUSH") {
            if args.len() > 3 {
                return self.w().error(&syntax_error(sub));
            }
            if let Some(mode) = args.get(2) {
                if !is(mode, "SYNC") && !is(mode, "ASYNC") {
                    return self
                        .w()
                        .error("ERR FUNCTION FLUSH only supports SYNC|ASYNC option");
                }
            }
            match functions.flush() {
                Ok(()) => self.w().simple("OK"),
                Err(e) => self.w().error(&e),
            }
        } else if is(sub, "DUMP") {
            let listed = functions.list();
            let payload =
                crate::dump::rdb::dump_functions(listed.iter().map(|l| l.code.code.as_ref()));
            self.w().bulk(&payload);
        } else if is(sub, "RESTORE") {
            self.function_restore(args).await;
        } else if is(sub, "HELP") {
            let mut w = self.w();
            w.array(FUNCTION_HELP.len());
            for l in FUNCTION_HELP {
                w.simple(l);
            }
        }
    }

    /// What a library's code registers, learnt on a script thread.
    async fn registered(&self, code: &Bytes) -> Result<Code, String> {
        let (reply, rx) = tokio::sync::oneshot::channel();
        let sent = self.shared.scripts.pool.send(Job::Load {
            code: code.clone(),
            reply,
        });
        let functions = match rx.await {
            Ok(r) if sent => r?,
            _ => return Err("ERR script threads are not running".into()),
        };
        Ok(Code {
            code: code.clone(),
            functions,
        })
    }

    /// FUNCTION LOAD [REPLACE] code.
    async fn function_load(&mut self, args: &[Bytes]) {
        let mut replace = false;
        let mut at = 2;
        while at < args.len() - 1 {
            if is(&args[at], "REPLACE") {
                replace = true;
                at += 1;
                continue;
            }
            return self.w().error(&format!(
                "ERR Unknown option given: {}",
                String::from_utf8_lossy(crate::cmd::c_str(&args[at]))
            ));
        }
        let Some(code) = args.get(at) else {
            return self.w().error("ERR Function code is missing");
        };
        let name = match libload::metadata(code) {
            Ok((name, _)) => name,
            Err(e) => return self.w().error(&e),
        };
        let functions = self.shared.scripts.functions.clone();
        // Redis refuses an existing library before it runs the code.
        if !replace && functions.exists(&name) {
            return self.w().error(&format!(
                "ERR Library '{}' already exists",
                String::from_utf8_lossy(&name)
            ));
        }
        let loaded = match self.registered(code).await {
            Ok(c) => functions.load(&name, c, replace),
            Err(e) => Err(e),
        };
        match loaded {
            Ok(()) => self.w().bulk(&name),
            Err(e) => self.w().error(&e),
        }
    }

    /// FUNCTION RESTORE payload [FLUSH|APPEND|REPLACE].
    async fn function_restore(&mut self, args: &[Bytes]) {
        if args.len() > 4 {
            return self.w().error(&syntax_error(&args[1]));
        }
        let policy = match args.get(3) {
            None => Policy::Append,
            Some(p) if is(p, "APPEND") => Policy::Append,
            Some(p) if is(p, "REPLACE") => Policy::Replace,
            Some(p) if is(p, "FLUSH") => Policy::Flush,
            Some(_) => return self.w().error(
                "ERR Wrong restore policy given, value should be either FLUSH, APPEND or REPLACE.",
            ),
        };
        let codes = match crate::dump::rdb::restore_functions(&args[2]) {
            Ok(c) => c,
            Err(e) => return self.w().error(&e),
        };
        let mut restored = Vec::with_capacity(codes.len());
        for code in codes {
            let checked = libload::metadata(&code).map(|(name, _)| name);
            let lib = match checked {
                Ok(name) => self.registered(&code).await.map(|c| (name, c)),
                Err(e) => Err(e),
            };
            match lib {
                Ok(l) => restored.push(l),
                Err(e) => return self.w().error(&e),
            }
        }
        match self.shared.scripts.functions.restore(restored, policy) {
            Ok(()) => self.w().simple("OK"),
            Err(e) => self.w().error(&e),
        }
    }

    /// FUNCTION LIST [LIBRARYNAME pattern] [WITHCODE].
    fn function_list(&mut self, args: &[Bytes]) {
        let mut with_code = false;
        let mut pattern: Option<Vec<u8>> = None;
        let mut i = 2;
        while i < args.len() {
            let a = &args[i];
            if !with_code && is(a, "WITHCODE") {
                with_code = true;
            } else if pattern.is_none() && is(a, "LIBRARYNAME") {
                let Some(p) = args.get(i + 1) else {
                    return self.w().error("ERR library name argument was not given");
                };
                pattern = Some(p.to_ascii_lowercase());
                i += 1;
            } else {
                return self.w().error(&format!(
                    "ERR Unknown argument {}",
                    String::from_utf8_lossy(crate::cmd::c_str(a))
                ));
            }
            i += 1;
        }
        let listed: Vec<_> = self
            .shared
            .scripts
            .functions
            .list()
            .into_iter()
            .filter(|l| {
                pattern
                    .as_ref()
                    .is_none_or(|p| elsa_shard::glob::matches(p, &l.name.to_ascii_lowercase()))
            })
            .collect();
        let mut w = self.w();
        w.array(listed.len());
        for l in &listed {
            w.map(if with_code { 4 } else { 3 });
            w.bulk(b"library_name");
            w.bulk(&l.name);
            w.bulk(b"engine");
            w.bulk(b"LUA");
            w.bulk(b"functions");
            w.array(l.code.functions.len());
            for f in &l.code.functions {
                w.map(3);
                w.bulk(b"name");
                w.bulk(&f.name);
                w.bulk(b"description");
                match &f.description {
                    Some(d) => w.bulk(d),
                    None => w.nil(),
                }
                w.bulk(b"flags");
                let flags: Vec<&str> = FLAG_NAMES
                    .iter()
                    .enumerate()
                    .filter(|(bit, _)| f.flags & (1 << bit) != 0)
                    .map(|(_, n)| *n)
                    .collect();
                w.set(flags.len());
                for n in flags {
                    w.simple(n);
                }
            }
            if with_code {
                w.bulk(b"library_code");
                w.bulk(&l.code.code);
            }
        }
    }

    /// FUNCTION STATS: the function running longest now, and the counts.
    fn function_stats(&mut self) {
        let scripts = &self.shared.scripts;
        if scripts.busy() == Some(BUSY) {
            return self.w().error(BUSY);
        }
        let running = scripts.running_function();
        let (libraries, functions) = scripts.functions.counts();
        let mut w = self.w();
        w.map(2);
        w.bulk(b"running_script");
        match running {
            None => w.nil(),
            Some((name, command, took)) => {
                w.map(3);
                w.bulk(b"name");
                w.bulk(&name);
                w.bulk(b"command");
                w.array(command.len());
                for a in &command {
                    w.bulk(a);
                }
                w.bulk(b"duration_ms");
                w.int(took.as_millis() as i64);
            }
        }
        w.bulk(b"engines");
        w.map(1);
        w.bulk(b"LUA");
        w.map(2);
        w.bulk(b"libraries_count");
        w.int(libraries as i64);
        w.bulk(b"functions_count");
        w.int(functions as i64);
    }

    /// FCALL / FCALL_RO function numkeys key… arg….
    pub(super) async fn fcall(&mut self, args: &[Bytes]) {
        let ro = args[0].to_ascii_lowercase().ends_with(b"_ro");
        let Some(f) = self.shared.scripts.functions.find(&args[1]) else {
            return self.w().error("ERR Function not found");
        };
        let Some(numkeys) = elsa_shard::ops::parse_i64(&args[2]) else {
            return self.w().error("ERR Bad number of keys provided");
        };
        let split = match super::run::key_split(args, numkeys) {
            Ok(split) => split,
            Err(e) => return self.w().error(e),
        };
        let no_writes = f.flags & NO_WRITES != 0;
        let allow_oom = f.flags & ALLOW_OOM != 0;
        if ro && !no_writes {
            return self
                .w()
                .error("ERR Can not execute a script with write flag using *_ro command.");
        }
        if !allow_oom && !no_writes && self.shared.memory.limit.oom() {
            return self.w().error(crate::memory::ERR_OOM);
        }
        let script = Script {
            sha: String::from_utf8_lossy(&f.name).into_owned(),
            body: Bytes::new(),
            keys: args[3..split].to_vec(),
            argv: args[split..].to_vec(),
            ro: ro || no_writes,
            allow_oom,
            function: Some((f, args.to_vec())),
        };
        self.run_scripted(script).await;
    }
}

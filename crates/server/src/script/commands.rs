//! SCRIPT and its subcommands (HELP, FLUSH, EXISTS, LOAD, KILL) over a
//! connection; the scripts' cache and the running scripts are the
//! parent's.

use super::*;
use crate::cmd::is;
use crate::conn::Conn;
use bytes::Bytes;

const SCRIPT_HELP: &[&str] = &[
    "SCRIPT <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
    "DEBUG (YES|SYNC|NO)",
    "    Set the debug mode for subsequent scripts executed.",
    "EXISTS <sha1> [<sha1> ...]",
    "    Return information about the existence of the scripts in the script cache.",
    "FLUSH [ASYNC|SYNC]",
    "    Flush the Lua scripts cache. Very dangerous on replicas.",
    "    When called without the optional mode argument, the behavior is determined by the",
    "    lazyfree-lazy-user-flush configuration directive. Valid modes are:",
    "    * ASYNC: Asynchronously flush the scripts cache.",
    "    * SYNC: Synchronously flush the scripts cache.",
    "KILL",
    "    Kill the currently executing Lua script.",
    "LOAD <script>",
    "    Load a script into the scripts cache without executing it.",
    "HELP",
    "    Prints this help.",
];

impl Conn {
    /// SCRIPT LOAD|EXISTS|FLUSH|KILL|HELP (arity and subcommand already
    /// checked by the command table).
    pub(crate) async fn script(&mut self, args: &[Bytes]) {
        let shared = self.shared.clone();
        let scripts = &shared.scripts;
        let sub = &args[1];
        if is(sub, "HELP") {
            let mut w = self.w();
            w.array(SCRIPT_HELP.len());
            for l in SCRIPT_HELP {
                w.simple(l);
            }
        } else if is(sub, "EXISTS") {
            let found: Vec<bool> = args[2..]
                .iter()
                .map(|sha| scripts.cache.contains(sha))
                .collect();
            let mut w = self.w();
            w.array(found.len());
            for f in found {
                w.int(f as i64);
            }
        } else if is(sub, "FLUSH") {
            match &args[2..] {
                [] => {}
                [mode] if is(mode, "SYNC") || is(mode, "ASYNC") => {}
                _ => {
                    return self
                        .w()
                        .error("ERR SCRIPT FLUSH only support SYNC|ASYNC option")
                }
            }
            scripts.cache.flush();
            self.w().simple("OK");
        } else if is(sub, "KILL") {
            if let Err(e) = scripts.kill(false) {
                return self.w().error(e);
            }
            tracing::warn!("Lua script killed by user with SCRIPT KILL.");
            self.w().simple("OK");
        } else if is(sub, "LOAD") {
            let body = args[2].clone();
            let sha = cache::sha1hex(&body);
            if !scripts.cache.contains(sha.as_bytes()) {
                let (tx, rx) = tokio::sync::oneshot::channel();
                let sent = scripts.pool.send(lua::Job::Compile {
                    body: body.clone(),
                    reply: tx,
                });
                let compiled = match rx.await {
                    Ok(r) if sent => r,
                    _ => Err("ERR script threads are not running".into()),
                };
                if let Err(e) = compiled {
                    return self.w().error(&e);
                }
                scripts.cache.insert(sha.clone(), body);
            }
            self.w().bulk(sha.as_bytes());
        } else if is(sub, "DEBUG") {
            self.w()
                .error("ERR SCRIPT DEBUG is not supported by Elsa (no Lua debugger)");
        }
    }
}

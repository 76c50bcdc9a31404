//! The ACL command, logins (AUTH, HELLO … AUTH), and the per-command hooks
//! a connection calls.

use std::sync::Arc;

use bytes::Bytes;

use super::{check, Context, Denied, Reason, TABLE};
use crate::cmd::{self, is, Spec};
use crate::conn::Conn;

const HELP: &[&str] = &[
    "ACL <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
    "CAT [<category>]",
    "    List all commands that belong to <category>, or all command categories",
    "    when no category is specified.",
    "DELUSER <username> [<username> ...]",
    "    Delete a list of users.",
    "DRYRUN <username> <command> [<arg> ...]",
    "    Returns whether the user can execute the given command without executing the command.",
    "GETUSER <username>",
    "    Get the user's details.",
    "GENPASS [<bits>]",
    "    Generate a secure 256-bit user password. The optional `bits` argument can",
    "    be used to specify a different size.",
    "LIST",
    "    Show users details in config file format.",
    "LOAD",
    "    Reload users from the ACL file.",
    "LOG [<count> | RESET]",
    "    Show the ACL log entries.",
    "SAVE",
    "    Save the current config to the ACL file.",
    "SETUSER <username> <attribute> [<attribute> ...]",
    "    Create or modify a user with the specified attributes.",
    "USERS",
    "    List all the registered usernames.",
    "WHOAMI",
    "    Return the current connection username.",
    "HELP",
    "    Print this help.",
];

impl Conn {
    /// Before each command: picks up changes to the connection's user.
    /// False when the user was deleted (or replaced by ACL LOAD): Redis
    /// closes its connections.
    #[inline]
    pub(crate) fn acl_current(&mut self) -> bool {
        let epoch = self.shared.acl.epoch();
        epoch == self.s.acl_epoch || self.acl_refresh(epoch)
    }

    fn acl_refresh(&mut self, epoch: u64) -> bool {
        self.s.acl_epoch = epoch;
        match self.shared.acl.get(&self.s.user.name) {
            Some(u) if u.serial == self.s.user.serial => {
                // A subscriber whose channels the new rules no longer
                // allow is disconnected, as Redis does.
                if !u.allchannels && self.subs.active() && !self.subscriptions_allowed(&u) {
                    tracing::info!(
                        client = self.s.id,
                        "closing connection: its ACL user may no longer use a channel it subscribed to"
                    );
                    return false;
                }
                self.s.acl_free = u.unrestricted();
                self.s.user = u;
                true
            }
            _ => {
                tracing::info!(
                    client = self.s.id,
                    user = %String::from_utf8_lossy(&self.s.user.name),
                    "closing connection: its ACL user was deleted"
                );
                // Until it closes, the connection may run nothing.
                self.s.user = Arc::new(super::User::new(b"", u64::MAX, false));
                self.s.acl_free = false;
                self.s.authed = false;
                false
            }
        }
    }

    fn subscriptions_allowed(&self, u: &super::User) -> bool {
        use crate::pubsub::Space;
        let plain = |ch: &Bytes| u.channels.iter().any(|p| elsa_shard::glob::matches(p, ch));
        let literal = |pat: &Bytes| u.channels.iter().any(|p| p[..] == pat[..]);
        self.subs.names(Some(Space::Plain)).iter().all(plain)
            && self.subs.names(Some(Space::Shard)).iter().all(plain)
            && self.subs.names(None).iter().all(literal)
    }

    /// The ACL check of a command about to run or be queued: None when
    /// allowed; else the refusal, logged. A user with every command, key
    /// and channel pays one flag test.
    #[inline]
    pub(crate) fn acl_denied(&mut self, spec: &Spec, args: &[Bytes]) -> Option<Denied> {
        if self.s.acl_free {
            return None;
        }
        let ctx = if self.s.multi.is_some() {
            Context::Multi
        } else {
            Context::Toplevel
        };
        self.acl_check_logged(spec, args, ctx)
    }

    /// Checks and logs a refusal in the given context.
    pub(crate) fn acl_check_logged(
        &mut self,
        spec: &Spec,
        args: &[Bytes],
        ctx: Context,
    ) -> Option<Denied> {
        if self.s.acl_free {
            return None;
        }
        let d = check(&self.s.user, spec, args).err()?;
        let info = self.client_info();
        self.shared
            .acl
            .log_denied(d, ctx, args, &self.s.user.name.clone(), info);
        Some(d)
    }

    fn client_info(&self) -> String {
        let mut line = self.client_line();
        line.pop();
        line
    }

    /// Logs in as `user` (AUTH, HELLO … AUTH); a failure is logged as
    /// Redis logs it (`cmd_name` is the command as the client typed it).
    pub(crate) fn login(&mut self, user: &[u8], pass: &[u8], cmd_name: &[u8]) -> bool {
        let epoch = self.shared.acl.epoch();
        match self.shared.acl.credentials(user, pass) {
            Some(u) => {
                self.s.authed = true;
                self.s.acl_free = u.unrestricted();
                self.s.user = u;
                self.s.acl_epoch = epoch;
                true
            }
            None => {
                let ctx = if self.s.multi.is_some() {
                    Context::Multi
                } else {
                    Context::Toplevel
                };
                let info = self.client_info();
                self.shared.acl.log(Reason::Auth, ctx, cmd_name, user, info);
                false
            }
        }
    }

    /// Back to the default user, logged in only if it needs no password
    /// (a new connection, RESET).
    pub(crate) fn acl_reset_user(&mut self) {
        self.s.acl_epoch = self.shared.acl.epoch();
        self.s.user = self.shared.acl.default_user();
        self.s.acl_free = self.s.user.unrestricted();
        self.s.authed = self.shared.acl.default_open();
    }

    /// AUTH [user] password.
    pub(crate) fn auth(&mut self, args: &[Bytes]) {
        let (user, pass) = match args {
            [_, pass] => {
                if self.shared.acl.default_user().nopass {
                    return self.w().error("ERR AUTH <password> called without any password configured for the default user. Are you sure your configuration is correct?");
                }
                (&b"default"[..], pass)
            }
            [_, user, pass] => (&user[..], pass),
            _ => return self.w().error("ERR syntax error"),
        };
        if self.login(user, pass, &args[0]) {
            self.w().simple("OK");
        } else {
            self.w()
                .error("WRONGPASS invalid username-password pair or user is disabled.");
        }
    }

    /// False for a command this node does not offer: ELSA.FAULT exists
    /// only with `fault-injection` on.
    #[inline]
    pub(crate) fn command_exists(&self, spec: &Spec) -> bool {
        !matches!(spec.kind, cmd::Kind::Control(cmd::Control::ElsaFault))
            || self.shared.config.cluster.fault_injection
    }

    /// ACL <subcommand> …
    pub(crate) fn acl(&mut self, args: &[Bytes]) {
        let sub = &args[1];
        let argc = args.len();
        let acl = self.shared.acl.clone();
        if is(sub, "SETUSER") && argc >= 3 {
            let name = &args[2];
            if super::user::has_spaces(name) {
                return self
                    .w()
                    .error("ERR Usernames can't contain spaces or null characters");
            }
            match acl.set_user(name, &args[3..]) {
                Ok(()) => self.w().simple("OK"),
                Err(e) => self.w().error(&e),
            }
        } else if is(sub, "DELUSER") && argc >= 3 {
            match acl.del_users(&args[2..]) {
                Ok(n) => {
                    self.w().int(n);
                    // Deleting itself: answered, then closed.
                    if !self.acl_current() {
                        self.s.closing = true;
                    }
                }
                Err(e) => self.w().error(&e),
            }
        } else if is(sub, "GETUSER") && argc == 3 {
            let Some(u) = acl.get(&args[2]) else {
                return self.w().nil();
            };
            let mut w = self.w();
            w.map(6);
            w.bulk(b"flags");
            let flags = u.flags();
            w.set(flags.len());
            for f in flags {
                w.bulk(f.as_bytes());
            }
            w.bulk(b"passwords");
            w.array(u.passwords.len());
            for p in &u.passwords {
                w.bulk(p.as_bytes());
            }
            w.bulk(b"commands");
            w.bulk(u.describe_commands().as_bytes());
            w.bulk(b"keys");
            w.bulk(u.keys_text().as_bytes());
            w.bulk(b"channels");
            w.bulk(u.channels_text().as_bytes());
            w.bulk(b"selectors");
            w.array(0);
        } else if (is(sub, "LIST") || is(sub, "USERS")) && argc == 2 {
            let lines: Vec<Vec<u8>> = if is(sub, "USERS") {
                acl.names()
            } else {
                acl.list().into_iter().map(String::into_bytes).collect()
            };
            let mut w = self.w();
            w.array(lines.len());
            for l in lines {
                w.bulk(&l);
            }
        } else if is(sub, "WHOAMI") && argc == 2 {
            let name = self.s.user.name.clone();
            self.w().bulk(&name);
        } else if acl.settings.file.is_none() && (is(sub, "LOAD") || is(sub, "SAVE")) {
            self.w().error(super::NO_FILE);
        } else if is(sub, "LOAD") && argc == 2 {
            match acl.load() {
                Ok(()) => {
                    self.w().simple("OK");
                    if !self.acl_current() {
                        self.s.closing = true;
                    }
                }
                Err(e) => self.w().error(&format!("ERR {e}")),
            }
        } else if is(sub, "SAVE") && argc == 2 {
            match acl.save() {
                Ok(()) => self.w().simple("OK"),
                Err(e) => self.w().error(&e),
            }
        } else if is(sub, "CAT") && argc == 2 {
            let mut w = self.w();
            w.array(super::categories::CATEGORIES.len());
            for c in super::categories::CATEGORIES {
                w.bulk(c.as_bytes());
            }
        } else if is(sub, "CAT") && argc == 3 {
            let Some(cat) = super::categories::category(&args[2]) else {
                let name = cmd::c_str(&args[2]);
                return self.w().error(&format!(
                    "ERR Unknown category '{}'",
                    String::from_utf8_lossy(&name[..name.len().min(128)])
                ));
            };
            let names: Vec<&str> = TABLE
                .in_category(cat)
                .map(|i| TABLE.cmds[i as usize].name)
                .collect();
            let mut w = self.w();
            w.array(names.len());
            for n in names {
                w.bulk(n.as_bytes());
            }
        } else if is(sub, "GENPASS") && (argc == 2 || argc == 3) {
            let bits = match args.get(2) {
                None => 256,
                Some(a) => match cmd::int_arg(a) {
                    Ok(n) => n,
                    Err(e) => return self.w().error(&e.0),
                },
            };
            if !(1..=4096).contains(&bits) {
                return self.w().error("ERR ACL GENPASS argument must be the number of bits for the output password, a positive number up to 4096");
            }
            let chars = (bits as usize).div_ceil(4);
            let pass: Vec<u8> = (0..chars)
                .map(|_| b"0123456789abcdef"[rand::random::<u8>() as usize & 15])
                .collect();
            self.w().bulk(&pass);
        } else if is(sub, "LOG") && (argc == 2 || argc == 3) {
            let mut count = 10i64;
            if let Some(a) = args.get(2) {
                if is(a, "RESET") {
                    acl.log.lock().unwrap_or_else(|e| e.into_inner()).reset();
                    return self.w().simple("OK");
                }
                match cmd::int_arg(a) {
                    Ok(n) => count = n.max(0),
                    Err(e) => return self.w().error(&e.0),
                }
            }
            let log = acl.log.lock().unwrap_or_else(|e| e.into_inner());
            log.write(&mut self.w(), count as usize);
        } else if is(sub, "DRYRUN") && argc >= 4 {
            self.dryrun(&args[2], &args[3..]);
        } else if is(sub, "HELP") && argc == 2 {
            let mut w = self.w();
            w.array(HELP.len());
            for l in HELP {
                w.simple(l);
            }
        } else {
            self.w().error(&format!(
                "ERR unknown subcommand or wrong number of arguments for '{}'. Try {} HELP.",
                String::from_utf8_lossy(&cmd::c_str(sub)[..cmd::c_str(sub).len().min(128)]),
                String::from_utf8_lossy(&args[0]).to_uppercase()
            ));
        }
    }

    /// ACL DRYRUN user command [args…].
    fn dryrun(&mut self, user: &Bytes, req: &[Bytes]) {
        let Some(u) = self.shared.acl.get(user) else {
            return self.w().error(&format!(
                "ERR User '{}' not found",
                String::from_utf8_lossy(cmd::c_str(user))
            ));
        };
        let not_found = || {
            format!(
                "ERR Command '{}' not found",
                String::from_utf8_lossy(cmd::c_str(&req[0]))
            )
        };
        let Some(spec) = cmd::lookup(&req[0]).filter(|s| self.command_exists(s)) else {
            return self.w().error(&not_found());
        };
        match cmd::subcommand_error(spec, req) {
            Some(e) if e.starts_with("ERR unknown subcommand") => {
                return self.w().error(&not_found())
            }
            Some(e) => return self.w().error(&e),
            None => {}
        }
        if !cmd::arity_ok_for(spec, req) {
            return self.w().error(&cmd::wrong_arity(spec.name));
        }
        match check(&u, spec, req) {
            Ok(()) => self.w().simple("OK"),
            Err(d) => {
                let text = match d {
                    Denied::Command(name) => {
                        format!("This user has no permissions to run the '{name}' command")
                    }
                    Denied::Key(i) => format!(
                        "This user has no permissions to access the '{}' key",
                        String::from_utf8_lossy(&req[i])
                    ),
                    Denied::Channel(i) => format!(
                        "This user has no permissions to access the '{}' channel",
                        String::from_utf8_lossy(&req[i])
                    ),
                };
                self.w().bulk(text.as_bytes());
            }
        }
    }
}

/// The user a connection starts with.
pub(crate) fn initial_user(acl: &super::Acl) -> (Arc<super::User>, u64, bool) {
    let epoch = acl.epoch();
    let u = acl.default_user();
    let authed = acl.default_open();
    (u, epoch, authed)
}

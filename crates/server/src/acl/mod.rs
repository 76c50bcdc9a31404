//! Users, passwords and permissions: Redis 7.0's ACL.
//!
//! - `categories`: commands as ACL sees them (Redis's table, generated
//!   into `table.rs`, plus Elsa's own), their categories and ids;
//! - `user`: a user and the rules language (`ACL SETUSER` rules, ACL LIST
//!   text);
//! - `log`: ACL LOG; `file`: the `aclfile`; `commands`: ACL, AUTH.
//!
//! The users live in one node-wide [`Acl`] behind a lock that only ACL
//! commands and logins take. A connection keeps its user as an `Arc` and
//! the registry's epoch; each command costs it one atomic load (has any
//! user changed?) and, for a user with every command, key and channel, one
//! flag test. ACL state is per node, as in Redis: every node of a cluster
//! loads the same `aclfile`; nothing is replicated.

mod categories;
mod commands;
mod file;
mod log;
#[rustfmt::skip]
mod table;
mod user;

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};

use bytes::Bytes;

pub use categories::TABLE;
/// A category's bit (MONITOR leaves `@admin` commands out; COMMAND LIST
/// FILTERBY ACLCAT).
pub use categories::{category, CATEGORIES};
pub(crate) use commands::initial_user;
pub use log::{Context, Reason};
pub use user::User;

use crate::cmd::Spec;

/// Why a command was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Denied {
    /// The command (its full name).
    Command(&'static str),
    /// The key at this argument position.
    Key(usize),
    /// The channel at this argument position.
    Channel(usize),
}

impl Denied {
    /// The `-NOPERM` line a client gets (processCommand's texts).
    pub fn message(self) -> String {
        match self {
            Denied::Command(name) => {
                format!("NOPERM this user has no permissions to run the '{name}' command")
            }
            Denied::Key(_) => {
                "NOPERM this user has no permissions to access one of the keys used as arguments"
                    .into()
            }
            Denied::Channel(_) => "NOPERM this user has no permissions to access one of the channels used as arguments".into(),
        }
    }

    /// A script's error (`getAclErrorMessage`).
    pub fn script_message(self) -> &'static str {
        match self {
            Denied::Command(_) => "can't run this command or subcommand",
            Denied::Key(_) => {
                "can't access at least one of the keys mentioned in the command arguments"
            }
            Denied::Channel(_) => "can't publish to the channel mentioned in the command",
        }
    }

    /// EXEC's reason when rules changed after queueing.
    pub fn exec_reason(self) -> &'static str {
        match self {
            Denied::Command(_) => "no permission to execute the command or subcommand",
            Denied::Key(_) => "no permission to touch the specified keys",
            Denied::Channel(_) => "no permission to access one of the channels used as arguments",
        }
    }

    fn reason(self) -> Reason {
        match self {
            Denied::Command(_) => Reason::Command,
            Denied::Key(_) => Reason::Key,
            Denied::Channel(_) => Reason::Channel,
        }
    }

    /// What ACL LOG names: the command, or the key or channel refused.
    fn object(self, args: &[Bytes]) -> &[u8] {
        match self {
            Denied::Command(name) => name.as_bytes(),
            Denied::Key(i) | Denied::Channel(i) => args.get(i).map_or(&[][..], |a| &a[..]),
        }
    }
}

/// ACL settings from the configuration.
#[derive(Debug, Clone, Default)]
pub struct Settings {
    /// `aclfile`: loaded at start, by ACL LOAD, written by ACL SAVE.
    pub file: Option<PathBuf>,
    /// `acl-pubsub-default allchannels` (Redis 7.0's default is
    /// `resetchannels`: new users reach no channel).
    pub allchannels_default: bool,
    /// `acllog-max-len`.
    pub log_max_len: usize,
    /// `protected-mode`.
    pub protected_mode: bool,
    /// `requirepass`: the default user's password.
    pub requirepass: Option<String>,
}

/// The node's users and ACL log.
pub struct Acl {
    users: RwLock<BTreeMap<Vec<u8>, Arc<User>>>,
    /// Bumped by every change to any user; connections compare it with
    /// the epoch their user snapshot was taken at.
    epoch: AtomicU64,
    /// The default user is `on` and `nopass`: no AUTH needed, and
    /// protected mode applies.
    default_open: AtomicBool,
    serial: AtomicU64,
    log: Mutex<log::Log>,
    /// INFO's acl_access_denied_{auth,cmd,key,channel}.
    denied: [AtomicU64; 4],
    /// `acllog-max-len` (CONFIG SET changes it).
    log_max_len: std::sync::atomic::AtomicUsize,
    /// The settings it was started with.
    pub settings: Settings,
}

impl Acl {
    /// The users at startup: the default user (with `requirepass` as its
    /// password), then the `aclfile` if set — an error there stops the
    /// node, as in Redis.
    pub fn new(settings: Settings) -> Result<Acl, String> {
        let mut default = User::default_user(0);
        if let Some(p) = &settings.requirepass {
            let _ = default.apply(b"resetpass", false);
            let _ = default.apply(format!(">{p}").as_bytes(), false);
        }
        let acl = Acl {
            log_max_len: settings.log_max_len.into(),
            users: RwLock::new(BTreeMap::from([(b"default".to_vec(), Arc::new(default))])),
            epoch: AtomicU64::new(0),
            default_open: AtomicBool::new(false),
            serial: AtomicU64::new(1),
            log: Mutex::new(log::Log::default()),
            denied: Default::default(),
            settings,
        };
        if acl.settings.file.is_some() {
            acl.load()?;
        }
        acl.changed();
        Ok(acl)
    }

    /// The epoch of the users' current state.
    #[inline]
    pub fn epoch(&self) -> u64 {
        self.epoch.load(Ordering::Acquire)
    }

    /// True when a new connection is logged in as `default` at once.
    pub fn default_open(&self) -> bool {
        self.default_open.load(Ordering::Acquire)
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, BTreeMap<Vec<u8>, Arc<User>>> {
        self.users.read().unwrap_or_else(|e| e.into_inner())
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, BTreeMap<Vec<u8>, Arc<User>>> {
        self.users.write().unwrap_or_else(|e| e.into_inner())
    }

    fn changed(&self) {
        let open = self
            .read()
            .get(&b"default"[..])
            .is_some_and(|u| u.nopass && u.enabled);
        self.default_open.store(open, Ordering::Release);
        self.epoch.fetch_add(1, Ordering::AcqRel);
    }

    fn next_serial(&self) -> u64 {
        self.serial.fetch_add(1, Ordering::Relaxed)
    }

    /// A user by its (case-sensitive) name.
    pub fn get(&self, name: &[u8]) -> Option<Arc<User>> {
        self.read().get(name).cloned()
    }

    /// The `default` user.
    pub fn default_user(&self) -> Arc<User> {
        self.get(b"default")
            .unwrap_or_else(|| Arc::new(User::default_user(0)))
    }

    /// The user, if `name` exists, is on, and `pass` is one of its
    /// passwords (`ACLCheckUserCredentials`).
    pub fn credentials(&self, name: &[u8], pass: &[u8]) -> Option<Arc<User>> {
        let u = self.get(name)?;
        (u.enabled && u.password_ok(pass)).then_some(u)
    }

    /// ACL SETUSER: every rule applies to a copy, which replaces the user
    /// only if all of them passed.
    pub fn set_user(&self, name: &[u8], rules: &[Bytes]) -> Result<(), String> {
        let allch = self.settings.allchannels_default;
        {
            let mut users = self.write();
            let mut u = match users.get(name) {
                Some(u) => (**u).clone(),
                None => User::new(name, self.next_serial(), allch),
            };
            for r in rules {
                if let Err(e) = u.apply(r, allch) {
                    return Err(format!(
                        "ERR Error in ACL SETUSER modifier '{}': {}",
                        String::from_utf8_lossy(crate::cmd::c_str(r)),
                        e.text()
                    ));
                }
            }
            users.insert(name.to_vec(), Arc::new(u));
        }
        self.changed();
        Ok(())
    }

    /// `acllog-max-len`.
    pub fn log_max_len(&self) -> usize {
        self.log_max_len.load(Ordering::Relaxed)
    }

    /// CONFIG SET acllog-max-len: the log keeps at most `n` entries from
    /// its next addition on (as Redis trims at the next entry).
    pub fn set_log_max_len(&self, n: usize) {
        self.log_max_len.store(n, Ordering::Relaxed);
    }

    /// ACL DELUSER: how many of the names existed.
    pub fn del_users(&self, names: &[Bytes]) -> Result<i64, String> {
        if names.iter().any(|n| &n[..] == b"default") {
            return Err("ERR The 'default' user cannot be removed".into());
        }
        let n = {
            let mut users = self.write();
            names
                .iter()
                .filter(|n| users.remove(&n[..]).is_some())
                .count()
        };
        self.changed();
        Ok(n as i64)
    }

    /// Names, in order.
    pub fn names(&self) -> Vec<Vec<u8>> {
        self.read().keys().cloned().collect()
    }

    /// `user <name> <rules>` per user, in name order.
    pub fn list(&self) -> Vec<String> {
        file::render(self.read().values().map(|u| &**u))
            .lines()
            .map(str::to_string)
            .collect()
    }

    /// ACL LOAD (and startup): the whole file or nothing. The default
    /// user keeps its identity (its connections stay); every other user
    /// is new, so connections of the old ones close.
    pub fn load(&self) -> Result<(), String> {
        let Some(path) = self.settings.file.clone() else {
            return Err(NO_FILE.into());
        };
        let text = std::fs::read_to_string(&path).map_err(|e| {
            format!(
                "Error loading ACLs, opening file '{}': {}",
                path.display(),
                io_error_text(&e)
            )
        })?;
        let allch = self.settings.allchannels_default;
        let mut loaded = file::parse(&path, &text, allch, || self.next_serial())?;
        {
            let mut users = self.write();
            let old_default = users.get(&b"default"[..]).map_or(0, |u| u.serial);
            let mut default = loaded
                .remove(&b"default"[..])
                .unwrap_or_else(|| User::default_user(0));
            default.serial = old_default;
            loaded.insert(b"default".to_vec(), default);
            *users = loaded.into_iter().map(|(k, v)| (k, Arc::new(v))).collect();
        }
        self.changed();
        Ok(())
    }

    /// ACL SAVE.
    pub fn save(&self) -> Result<(), String> {
        let Some(path) = &self.settings.file else {
            return Err(NO_FILE.into());
        };
        let text = file::render(self.read().values().map(|u| &**u));
        file::write(path, &text).map_err(|e| {
            tracing::warn!("ACL SAVE to {}: {e}", path.display());
            "ERR There was an error trying to save the ACLs. Please check the server logs for more information".to_string()
        })
    }

    /// Adds an ACL LOG entry.
    pub fn log(
        &self,
        reason: Reason,
        context: Context,
        object: &[u8],
        username: &[u8],
        client_info: String,
    ) {
        let counter = match reason {
            Reason::Auth => 0,
            Reason::Command => 1,
            Reason::Key => 2,
            Reason::Channel => 3,
        };
        self.denied[counter].fetch_add(1, Ordering::Relaxed);
        let max = self.log_max_len();
        self.log.lock().unwrap_or_else(|e| e.into_inner()).add(
            reason,
            context,
            object,
            username,
            client_info,
            max,
        );
    }

    /// INFO stats lines: refusals since start, as Redis counts them.
    pub fn info_stats(&self) -> String {
        let n = |i: usize| self.denied[i].load(Ordering::Relaxed);
        format!(
            "acl_access_denied_auth:{}\r\nacl_access_denied_cmd:{}\r\nacl_access_denied_key:{}\r\nacl_access_denied_channel:{}\r\n",
            n(0),
            n(1),
            n(2),
            n(3)
        )
    }

    /// Protected mode's verdict on a new client (its `ip:port`), logged.
    pub fn refuses(&self, peer: &str) -> bool {
        let ip = peer.parse::<std::net::SocketAddr>().ok().map(|a| a.ip());
        let refused = protected_refusal(self.settings.protected_mode, self.default_open(), ip);
        if refused {
            tracing::warn!(
                peer,
                "refused a client from outside loopback: protected mode, and the default user has no password"
            );
        }
        refused
    }

    /// Logs a refusal.
    pub fn log_denied(
        &self,
        d: Denied,
        context: Context,
        args: &[Bytes],
        username: &[u8],
        client_info: String,
    ) {
        self.log(d.reason(), context, d.object(args), username, client_info);
    }
}

const NO_FILE: &str = "ERR This Redis instance is not configured to use an ACL file. You may want to specify users via the ACL SETUSER command and then issue a CONFIG REWRITE (assuming you have a Redis configuration file set) in order to store users in the Redis configuration.";

/// `strerror` text for the common cases, as Redis prints it.
fn io_error_text(e: &std::io::Error) -> String {
    match e.kind() {
        std::io::ErrorKind::NotFound => "No such file or directory".into(),
        std::io::ErrorKind::PermissionDenied => "Permission denied".into(),
        _ => e.to_string(),
    }
}

/// Checks a request against a user (`ACLCheckAllUserCommandPerm` with one
/// selector): the command, then each key the command names (its read or
/// write access as Redis's key specs say), then each channel.
pub fn check(user: &User, spec: &Spec, args: &[Bytes]) -> Result<(), Denied> {
    let Some(id) = TABLE.of_request(spec.name, args) else {
        return if user.allcommands {
            Ok(())
        } else {
            Err(Denied::Command(spec.name))
        };
    };
    let info = TABLE.cmds[id as usize];
    if !user.allcommands && !info.no_auth && !user.commands.get(id as usize) {
        let first_ok = args.len() >= 2
            && user
                .firstargs
                .iter()
                .find(|(c, _)| *c == id)
                .is_some_and(|(_, subs)| {
                    let a = &args[if info.sub { 2 } else { 1 }.min(args.len() - 1)];
                    subs.iter().any(|s| s.as_bytes().eq_ignore_ascii_case(a))
                });
        if !first_ok {
            return Err(Denied::Command(info.name));
        }
    }
    if !user.allkeys && !info.keys.is_empty() {
        for pos in crate::cmd::key_positions(spec, args) {
            let need = key_access(spec, info, args, pos);
            let key = &args[pos];
            let ok = user
                .patterns
                .iter()
                .any(|(p, f)| f & need == need && elsa_shard::glob::matches(p, key));
            if !ok {
                return Err(Denied::Key(pos));
            }
        }
    }
    if !user.allchannels {
        let (end, pattern) = match spec.name {
            "subscribe" | "ssubscribe" => (args.len(), false),
            "psubscribe" => (args.len(), true),
            "publish" | "spublish" => (2.min(args.len()), false),
            _ => (0, false),
        };
        for (pos, ch) in args.iter().enumerate().take(end).skip(1) {
            let ok = user.channels.iter().any(|p| {
                if pattern {
                    p[..] == ch[..]
                } else {
                    elsa_shard::glob::matches(p, ch)
                }
            });
            if !ok {
                return Err(Denied::Channel(pos));
            }
        }
    }
    Ok(())
}

/// The permission bits a key at `pos` needs: its key spec's (the last one
/// starting at or before it), SET's depending on GET.
fn key_access(spec: &Spec, info: &categories::CmdInfo, args: &[Bytes], pos: usize) -> u8 {
    if spec.name == "set" {
        let get = args.iter().skip(3).any(|a| a.eq_ignore_ascii_case(b"get"));
        return if get {
            user::READ | user::WRITE
        } else {
            user::WRITE
        };
    }
    let ks = info
        .keys
        .iter()
        .rev()
        .find(|(begin, _, _)| (*begin as usize) <= pos)
        .or(info.keys.first());
    match ks {
        Some((_, r, w)) => (if *r { user::READ } else { 0 }) | (if *w { user::WRITE } else { 0 }),
        None => 0,
    }
}

/// Protected mode (Redis 7.0): with the default user open (no password),
/// a client from anywhere but the loopback address is refused.
pub fn protected_refusal(protected_mode: bool, default_open: bool, peer: Option<IpAddr>) -> bool {
    if !protected_mode || !default_open {
        return false;
    }
    // Redis compares the text with 127.0.0.1 and ::1 (not all of
    // 127.0.0.0/8); an IPv4 client of a dual-stack socket counts as its
    // IPv4 address.
    match peer.map(|p| p.to_canonical()) {
        Some(IpAddr::V4(a)) => a != std::net::Ipv4Addr::LOCALHOST,
        Some(IpAddr::V6(a)) => a != std::net::Ipv6Addr::LOCALHOST,
        None => false,
    }
}

/// What a refused client reads before the connection closes.
pub const DENIED: &str = "-DENIED Elsa is running in protected mode because protected mode is enabled and no password is set for the default user. In this mode connections are only accepted from the loopback interface. If you want to connect from external computers to Elsa you may adopt one of the following solutions: 1) Just disable protected mode by setting 'protected-mode = false' in the node's configuration file (or ELSA_PROTECTED_MODE=false, or the '--protected-mode false' flag) and restarting the node, however MAKE SURE Elsa is not publicly accessible from internet if you do so. 2) Setup an authentication password for the default user ('requirepass', or a 'default' user with a password in the 'aclfile'). NOTE: You only need to do one of the above things in order for the server to start accepting connections from the outside.\r\n";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn protected_mode_decision() {
        let lo: IpAddr = "127.0.0.1".parse().unwrap();
        let lo6: IpAddr = "::1".parse().unwrap();
        let mapped: IpAddr = "::ffff:127.0.0.1".parse().unwrap();
        let other: IpAddr = "10.200.0.2".parse().unwrap();
        let lo2: IpAddr = "127.0.0.2".parse().unwrap();
        assert!(!protected_refusal(true, true, Some(lo)));
        assert!(!protected_refusal(true, true, Some(lo6)));
        assert!(!protected_refusal(true, true, Some(mapped)));
        assert!(protected_refusal(true, true, Some(other)));
        assert!(protected_refusal(true, true, Some(lo2)));
        assert!(!protected_refusal(false, true, Some(other)));
        assert!(!protected_refusal(true, false, Some(other)));
    }

    fn args(s: &str) -> Vec<Bytes> {
        crate::cmd::test_args(s)
    }

    fn user(rules: &str) -> User {
        let mut u = User::new(b"u", 1, false);
        for r in rules.split(' ') {
            u.apply(r.as_bytes(), false).unwrap();
        }
        u
    }

    fn run(u: &User, req: &str) -> Result<(), Denied> {
        let a = args(req);
        let spec = crate::cmd::lookup(&a[0]).unwrap();
        check(u, spec, &a)
    }

    #[test]
    fn commands_keys_and_channels() {
        let u = user("on +@read +set +publish ~k* %R~r* %W~w* &ch*");
        assert_eq!(run(&u, "get k1"), Ok(()));
        assert_eq!(run(&u, "get x"), Err(Denied::Key(1)));
        assert_eq!(run(&u, "get r1"), Ok(()));
        assert_eq!(run(&u, "get w1"), Err(Denied::Key(1)));
        assert_eq!(run(&u, "set w1 v"), Ok(()));
        assert_eq!(run(&u, "set w1 v GET"), Err(Denied::Key(1)));
        assert_eq!(run(&u, "mget k1 k2 x"), Err(Denied::Key(3)));
        assert_eq!(run(&u, "del k1"), Err(Denied::Command("del")));
        assert_eq!(run(&u, "publish ch1 m"), Ok(()));
        assert_eq!(run(&u, "publish x m"), Err(Denied::Channel(1)));
        assert_eq!(run(&u, "auth a b"), Ok(()));
        let all = User::default_user(0);
        assert_eq!(run(&all, "elsa.fault isolate"), Ok(()));
        let safe = user("+@all -@dangerous ~* &*");
        assert_eq!(
            run(&safe, "elsa.fault isolate"),
            Err(Denied::Command("elsa.fault"))
        );
        assert_eq!(
            run(&safe, "config set x y"),
            Err(Denied::Command("config|set"))
        );
    }
}

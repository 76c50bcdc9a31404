//! One ACL user and Redis 7.0's rules language: applying a rule
//! (`ACLSetUser`/`ACLSetSelector`), and describing a user back as rules
//! (`ACLDescribeUser`, ACL LIST's and ACL GETUSER's text).

use sha2::{Digest, Sha256};

use super::categories::{category, CATEGORIES, TABLE};

/// A key pattern's permission bits.
pub const READ: u8 = 1;
/// Write permission.
pub const WRITE: u8 = 2;

/// Bits in a command bitmap: Redis's `USER_COMMAND_BITS_COUNT`. The last
/// one is never a command: `+@all` sets it, so a user built from `+@all`
/// is told from one built by adding commands (and ACL LIST starts with
/// `+@all` or `-@all` accordingly).
const BITS: usize = 1024;
const FUTURE: usize = BITS - 1;

/// A command bitmap.
#[derive(Clone, PartialEq, Eq)]
pub struct Bits([u64; BITS / 64]);

impl Bits {
    fn none() -> Bits {
        Bits([0; BITS / 64])
    }
    fn all() -> Bits {
        Bits([u64::MAX; BITS / 64])
    }
    /// True when command `id` is allowed.
    pub fn get(&self, id: usize) -> bool {
        self.0[id / 64] & (1 << (id % 64)) != 0
    }
    fn set(&mut self, id: usize, on: bool) {
        if on {
            self.0[id / 64] |= 1 << (id % 64);
        } else {
            self.0[id / 64] &= !(1 << (id % 64));
        }
    }
}

/// Redis's sanitize-payload flags (kept for ACL LIST; Elsa has no
/// RESTORE to sanitize).
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Sanitize {
    Unset,
    On,
    Skip,
}

/// A user: who may log in how, and what they may run, read and publish.
#[derive(Clone)]
pub struct User {
    /// Case-sensitive name.
    pub name: Vec<u8>,
    /// Distinguishes this user from a later one of the same name: its
    /// connections are closed when it is deleted or replaced by ACL LOAD.
    pub serial: u64,
    /// `on` (else `off`).
    pub enabled: bool,
    /// `nopass`: any password works.
    pub nopass: bool,
    pub sanitize: Sanitize,
    /// SHA-256 digests, hex, in the order added.
    pub passwords: Vec<String>,
    /// `allcommands` (every command, without looking at the bitmap).
    pub allcommands: bool,
    pub commands: Bits,
    /// `+cmd|arg` for a command without subcommands: allowed first
    /// arguments per command id (deprecated in Redis, kept for files).
    pub firstargs: Vec<(u16, Vec<String>)>,
    pub allkeys: bool,
    /// Key patterns with their `READ`/`WRITE` bits, in the order added.
    pub patterns: Vec<(Vec<u8>, u8)>,
    pub allchannels: bool,
    pub channels: Vec<Vec<u8>>,
}

/// Why a rule was refused (Redis's errno values in `ACLSetUser`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RuleError {
    Syntax,
    Unknown,
    AfterAllKeys,
    AfterAllChannels,
    NoSuchPassword,
    BadHash,
    SubcommandFirstArg,
    Duplicate,
}

impl RuleError {
    /// Redis's `ACLSetUserStringError` text.
    pub fn text(self) -> &'static str {
        match self {
            RuleError::Unknown => "Unknown command or category name in ACL",
            RuleError::Syntax => "Syntax error",
            RuleError::AfterAllKeys => "Adding a pattern after the * pattern (or the 'allkeys' flag) is not valid and does not have any effect. Try 'resetkeys' to start with an empty list of patterns",
            RuleError::AfterAllChannels => "Adding a pattern after the * pattern (or the 'allchannels' flag) is not valid and does not have any effect. Try 'resetchannels' to start with an empty list of channels",
            RuleError::NoSuchPassword => "The password you are trying to remove from the user does not exist",
            RuleError::BadHash => "The password hash must be exactly 64 characters and contain only lowercase hexadecimal characters",
            RuleError::SubcommandFirstArg => "Allowing first-arg of a subcommand is not supported",
            RuleError::Duplicate => "Duplicate user found. A user can only be defined once in config files",
        }
    }
}

/// The hex SHA-256 of a password, as Redis stores it.
pub fn hash_hex(pass: &[u8]) -> String {
    let d = Sha256::digest(pass);
    let mut s = String::with_capacity(64);
    for b in d {
        s.push(char::from(b"0123456789abcdef"[(b >> 4) as usize]));
        s.push(char::from(b"0123456789abcdef"[(b & 15) as usize]));
    }
    s
}

fn valid_hash(h: &[u8]) -> bool {
    h.len() == 64
        && h.iter()
            .all(|c| c.is_ascii_digit() || (b'a'..=b'f').contains(c))
}

/// Redis's `ACLStringHasSpaces`: whitespace or NUL.
pub fn has_spaces(s: &[u8]) -> bool {
    s.iter()
        .any(|&c| c == 0 || c == b' ' || (b'\t'..=b'\r').contains(&c))
}

impl User {
    /// A new user as Redis creates one: off, no passwords, no commands,
    /// no keys, and channels per `acl-pubsub-default`.
    pub fn new(name: &[u8], serial: u64, allchannels: bool) -> User {
        User {
            name: name.to_vec(),
            serial,
            enabled: false,
            nopass: false,
            sanitize: Sanitize::Unset,
            passwords: Vec::new(),
            allcommands: false,
            commands: Bits::none(),
            firstargs: Vec::new(),
            allkeys: false,
            patterns: Vec::new(),
            allchannels,
            channels: Vec::new(),
        }
    }

    /// The `default` user Redis starts with: `on nopass ~* &* +@all`.
    pub fn default_user(serial: u64) -> User {
        let mut u = User::new(b"default", serial, false);
        for r in ["+@all", "~*", "&*", "on", "nopass"] {
            let _ = u.apply(r.as_bytes(), false);
        }
        u
    }

    /// True when nothing is restricted: commands, keys and channels.
    pub fn unrestricted(&self) -> bool {
        self.allcommands && self.allkeys && self.allchannels
    }

    /// True when `pass` is one of the user's passwords, comparing SHA-256
    /// digests in constant time (or the user is `nopass`).
    pub fn password_ok(&self, pass: &[u8]) -> bool {
        if self.nopass {
            return true;
        }
        let given = hash_hex(pass);
        let mut ok = subtle::Choice::from(0);
        for p in &self.passwords {
            ok |= subtle::ConstantTimeEq::ct_eq(given.as_bytes(), p.as_bytes());
        }
        ok.into()
    }

    /// Applies one rule (`ACLSetUser`); `allchannels_default` is
    /// `acl-pubsub-default allchannels`, which `reset` follows.
    pub fn apply(&mut self, op: &[u8], allchannels_default: bool) -> Result<(), RuleError> {
        if op.is_empty() {
            return Ok(());
        }
        let is = |w: &str| op.eq_ignore_ascii_case(w.as_bytes());
        if is("on") {
            self.enabled = true;
        } else if is("off") {
            self.enabled = false;
        } else if is("skip-sanitize-payload") {
            self.sanitize = Sanitize::Skip;
        } else if is("sanitize-payload") {
            self.sanitize = Sanitize::On;
        } else if is("nopass") {
            self.nopass = true;
            self.passwords.clear();
        } else if is("resetpass") {
            self.nopass = false;
            self.passwords.clear();
        } else if op[0] == b'>' || op[0] == b'#' {
            let hash = if op[0] == b'>' {
                hash_hex(&op[1..])
            } else if valid_hash(&op[1..]) {
                String::from_utf8_lossy(&op[1..]).into_owned()
            } else {
                return Err(RuleError::BadHash);
            };
            if !self.passwords.contains(&hash) {
                self.passwords.push(hash);
            }
            self.nopass = false;
        } else if op[0] == b'<' || op[0] == b'!' {
            let hash = if op[0] == b'<' {
                hash_hex(&op[1..])
            } else if valid_hash(&op[1..]) {
                String::from_utf8_lossy(&op[1..]).into_owned()
            } else {
                return Err(RuleError::BadHash);
            };
            match self.passwords.iter().position(|p| *p == hash) {
                Some(i) => {
                    self.passwords.remove(i);
                }
                None => return Err(RuleError::NoSuchPassword),
            }
        } else if op[0] == b'(' {
            // Selectors (Redis 7.0's `(...)`) are not supported.
            return Err(RuleError::Syntax);
        } else if is("clearselectors") {
        } else if is("reset") {
            self.nopass = false;
            self.passwords.clear();
            self.allkeys = false;
            self.patterns.clear();
            self.allchannels = allchannels_default;
            self.channels.clear();
            self.enabled = false;
            self.sanitize = Sanitize::On;
            self.set_all_commands(false);
        } else {
            self.apply_selector(op)?;
        }
        Ok(())
    }

    fn set_all_commands(&mut self, on: bool) {
        self.commands = if on { Bits::all() } else { Bits::none() };
        self.allcommands = on;
        self.firstargs.clear();
    }

    fn set_bit(&mut self, id: usize, on: bool) {
        self.commands.set(id, on);
        if !on {
            self.allcommands = false;
        }
    }

    /// `ACLChangeSelectorPerm`: a command and all its subcommands.
    fn change_perm(&mut self, id: u16, on: bool) {
        self.set_bit(id as usize, on);
        self.firstargs.retain(|(c, _)| *c != id);
        for &s in &TABLE.children[id as usize] {
            self.set_bit(s as usize, on);
        }
    }

    /// `ACLSetSelectorCommandBitsForCategory`.
    fn change_category(&mut self, cat: u32, on: bool) {
        for id in TABLE.in_category(cat).collect::<Vec<_>>() {
            self.change_perm(id, on);
        }
    }

    fn apply_selector(&mut self, op: &[u8]) -> Result<(), RuleError> {
        let is = |w: &str| op.eq_ignore_ascii_case(w.as_bytes());
        if is("allkeys") || op == b"~*" {
            self.allkeys = true;
            self.patterns.clear();
        } else if is("resetkeys") {
            self.allkeys = false;
            self.patterns.clear();
        } else if is("allchannels") || op == b"&*" {
            self.allchannels = true;
            self.channels.clear();
        } else if is("resetchannels") {
            self.allchannels = false;
            self.channels.clear();
        } else if is("allcommands") || is("+@all") {
            self.set_all_commands(true);
        } else if is("nocommands") || is("-@all") {
            self.set_all_commands(false);
        } else if op[0] == b'~' || op[0] == b'%' {
            if self.allkeys {
                return Err(RuleError::AfterAllKeys);
            }
            let mut flags = 0u8;
            let mut offset = 1;
            if op[0] == b'%' {
                while offset < op.len() {
                    match op[offset].to_ascii_uppercase() {
                        b'R' if flags & READ == 0 => flags |= READ,
                        b'W' if flags & WRITE == 0 => flags |= WRITE,
                        b'~' => {
                            offset += 1;
                            break;
                        }
                        _ => return Err(RuleError::Syntax),
                    }
                    offset += 1;
                }
                if flags == 0 {
                    // Redis 7.0 accepts `%~p` and then crashes describing
                    // it; refused here.
                    return Err(RuleError::Syntax);
                }
            } else {
                flags = READ | WRITE;
            }
            let pat = &op[offset.min(op.len())..];
            if has_spaces(pat) {
                return Err(RuleError::Syntax);
            }
            match self.patterns.iter_mut().find(|(p, _)| p == pat) {
                Some((_, f)) => *f |= flags,
                None => self.patterns.push((pat.to_vec(), flags)),
            }
            self.allkeys = false;
        } else if op[0] == b'&' {
            if self.allchannels {
                return Err(RuleError::AfterAllChannels);
            }
            let pat = &op[1..];
            if has_spaces(pat) {
                return Err(RuleError::Syntax);
            }
            if !self.channels.iter().any(|c| c == pat) {
                self.channels.push(pat.to_vec());
            }
            self.allchannels = false;
        } else if op[0] == b'+' && op.get(1) != Some(&b'@') {
            let name = &op[1..];
            match name.iter().rposition(|&b| b == b'|') {
                None => {
                    let id = TABLE.lookup_rule(name).ok_or(RuleError::Unknown)?;
                    self.change_perm(id, true);
                }
                Some(bar) => {
                    let (base, sub) = (&name[..bar], &name[bar + 1..]);
                    let id = TABLE.lookup_rule(base).ok_or(RuleError::Unknown)?;
                    let info = TABLE.cmds[id as usize];
                    if info.sub {
                        return Err(RuleError::SubcommandFirstArg);
                    }
                    if sub.is_empty() {
                        return Err(RuleError::Syntax);
                    }
                    if !TABLE.children[id as usize].is_empty() {
                        let sid = TABLE.lookup_rule(name).ok_or(RuleError::Unknown)?;
                        self.change_perm(sid, true);
                    } else {
                        let sub = String::from_utf8_lossy(sub).into_owned();
                        match self.firstargs.iter_mut().find(|(c, _)| *c == id) {
                            Some((_, subs)) => {
                                if !subs.iter().any(|s| s.eq_ignore_ascii_case(&sub)) {
                                    subs.push(sub);
                                }
                            }
                            None => self.firstargs.push((id, vec![sub])),
                        }
                    }
                }
            }
        } else if op[0] == b'-' && op.get(1) != Some(&b'@') {
            let id = TABLE.lookup_rule(&op[1..]).ok_or(RuleError::Unknown)?;
            self.change_perm(id, false);
        } else if (op[0] == b'+' || op[0] == b'-') && op.get(1) == Some(&b'@') {
            let cat = category(&op[2..]).ok_or(RuleError::Unknown)?;
            self.change_category(cat, op[0] == b'+');
        } else {
            return Err(RuleError::Syntax);
        }
        Ok(())
    }

    /// The flags as ACL GETUSER lists them.
    pub fn flags(&self) -> Vec<&'static str> {
        let mut f = vec![if self.enabled { "on" } else { "off" }];
        if self.nopass {
            f.push("nopass");
        }
        match self.sanitize {
            Sanitize::Skip => f.push("skip-sanitize-payload"),
            Sanitize::On => f.push("sanitize-payload"),
            Sanitize::Unset => {}
        }
        f
    }

    /// ACL GETUSER's `keys`.
    pub fn keys_text(&self) -> String {
        if self.allkeys {
            return "~*".into();
        }
        self.patterns
            .iter()
            .map(|(p, f)| pattern_text(p, *f))
            .collect::<Vec<_>>()
            .join(" ")
    }

    /// ACL GETUSER's `channels`.
    pub fn channels_text(&self) -> String {
        if self.allchannels {
            return "&*".into();
        }
        self.channels
            .iter()
            .map(|c| format!("&{}", String::from_utf8_lossy(c)))
            .collect::<Vec<_>>()
            .join(" ")
    }

    /// The user as rules (`ACLDescribeUser`): ACL LIST without `user name `.
    pub fn describe(&self) -> String {
        let mut s = String::new();
        for f in self.flags() {
            s.push_str(f);
            s.push(' ');
        }
        for p in &self.passwords {
            s.push('#');
            s.push_str(p);
            s.push(' ');
        }
        if self.allkeys {
            s.push_str("~* ");
        } else {
            for (p, f) in &self.patterns {
                s.push_str(&pattern_text(p, *f));
                s.push(' ');
            }
        }
        if self.allchannels {
            s.push_str("&* ");
        } else {
            s.push_str("resetchannels ");
            for c in &self.channels {
                s.push('&');
                s.push_str(&String::from_utf8_lossy(c));
                s.push(' ');
            }
        }
        s.push_str(&self.describe_commands());
        s
    }

    /// The command rules (`ACLDescribeSelectorCommandRules`): `+@all` or
    /// `-@all`, then the categories that fit best, then single commands —
    /// the categories chosen by Redis's commands alone, so the text is
    /// Redis's but for rules naming Elsa's own commands.
    pub fn describe_commands(&self) -> String {
        let additive = !self.commands.get(FUTURE);
        let mut rules = String::from(if additive { "-@all " } else { "+@all " });
        let mut fake = User::new(b"", 0, false);
        fake.set_all_commands(!additive);
        let mut temp = User::new(b"", 0, false);
        temp.commands = self.commands.clone();
        let mut applied = [false; CATEGORIES.len()];
        loop {
            let mut best = None;
            let (mut mindiff, mut maxsame) = (u64::MAX, 0u64);
            for (j, done) in applied.iter().enumerate() {
                if *done {
                    continue;
                }
                let (mut on, mut off) = (0u64, 0u64);
                // Redis's commands only: Elsa's own would tip the counts
                // away from the categories Redis picks (the single rules
                // below settle them).
                for id in TABLE.in_category(1 << j) {
                    if TABLE.elsa[id as usize] {
                        continue;
                    }
                    if temp.commands.get(id as usize) {
                        on += 1;
                    } else {
                        off += 1;
                    }
                }
                let (diff, same) = if additive { (off, on) } else { (on, off) };
                if same > diff && (diff < mindiff || (diff == mindiff && same > maxsame)) {
                    best = Some(j);
                    mindiff = diff;
                    maxsame = same;
                }
            }
            let Some(j) = best else { break };
            fake.change_category(1 << j, additive);
            temp.change_category(1 << j, !additive);
            rules.push(if additive { '+' } else { '-' });
            rules.push('@');
            rules.push_str(CATEGORIES[j]);
            rules.push(' ');
            applied[j] = true;
        }
        for (id, info) in TABLE.cmds.iter().enumerate() {
            let user_bit = self.commands.get(id);
            if user_bit != fake.commands.get(id) {
                rules.push(if user_bit { '+' } else { '-' });
                rules.push_str(info.name);
                rules.push(' ');
                fake.change_perm(id as u16, user_bit);
            }
            if !user_bit {
                if let Some((_, subs)) = self.firstargs.iter().find(|(c, _)| *c as usize == id) {
                    for s in subs {
                        rules.push('+');
                        rules.push_str(info.name);
                        rules.push('|');
                        rules.push_str(s);
                        rules.push(' ');
                    }
                }
            }
        }
        rules.pop();
        rules
    }
}

fn pattern_text(p: &[u8], flags: u8) -> String {
    let prefix = match flags {
        READ => "%R~",
        WRITE => "%W~",
        _ => "~",
    };
    format!("{prefix}{}", String::from_utf8_lossy(p))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn user(rules: &str) -> User {
        let mut u = User::new(b"u", 1, false);
        for r in rules.split(' ') {
            u.apply(r.as_bytes(), false).unwrap();
        }
        u
    }

    #[test]
    fn describes_as_redis_7_0() {
        assert_eq!(User::default_user(0).describe(), "on nopass ~* &* +@all");
        assert_eq!(
            user("reset").describe(),
            "off sanitize-payload resetchannels -@all"
        );
        assert_eq!(
            user("on >p ~a* %R~b %W~c &ch +@read -get").describe(),
            format!(
                "on #{} ~a* %R~b %W~c resetchannels &ch -@all +@read -get",
                hash_hex(b"p")
            )
        );
        assert_eq!(
            user("+@all -@dangerous").describe_commands(),
            "+@all -@dangerous"
        );
        assert_eq!(user("+config|get").describe_commands(), "-@all +config|get");
        assert_eq!(user("+select|0").describe_commands(), "-@all +select|0");
    }

    #[test]
    fn rule_errors() {
        let mut u = User::new(b"u", 1, false);
        assert_eq!(u.apply(b"+nosuch", false), Err(RuleError::Unknown));
        assert_eq!(
            u.apply(b"+config|get|x", false),
            Err(RuleError::SubcommandFirstArg)
        );
        assert_eq!(u.apply(b"+get|", false), Err(RuleError::Syntax));
        assert_eq!(u.apply(b"#abc", false), Err(RuleError::BadHash));
        assert_eq!(u.apply(b"<nope", false), Err(RuleError::NoSuchPassword));
        u.apply(b"~*", false).unwrap();
        assert_eq!(u.apply(b"~a", false), Err(RuleError::AfterAllKeys));
    }

    #[test]
    fn passwords_compare_digests() {
        let u = user("on >secret");
        assert!(u.password_ok(b"secret"));
        assert!(!u.password_ok(b"Secret"));
        assert_eq!(u.passwords[0], hash_hex(b"secret"));
    }
}

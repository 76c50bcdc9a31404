//! Redis 7.0's script shebang (`evalExtractShebangFlags`): a script whose
//! first line is `#!lua [flags=f1,f2…]` declares its flags, and one
//! without is run as before 7.0. Of the flags, `no-writes` makes the
//! script read-only (its write commands are refused, and EVAL_RO may run
//! it); without it, EVAL_RO refuses the script. The line is removed before
//! the script is compiled (its newline kept, so line numbers stay).
//! `allow-oom`, `allow-stale`, `no-cluster` and `allow-cross-slot-keys`
//! are accepted and change nothing here (Elsa refuses a script's
//! `denyoom` commands over `maxmemory` whatever its flags; it has no
//! stale replicas; its scripts run on any keys, as transactions).

/// What a script's shebang declares.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Flags {
    /// The script has a shebang (no shebang: Redis's compatibility mode).
    pub declared: bool,
    /// `no-writes`.
    pub no_writes: bool,
    /// `allow-oom`.
    pub allow_oom: bool,
}

/// The flags Redis 7.0 knows (`scripts_flags_def`).
const KNOWN: &[&str] = &[
    "no-writes",
    "allow-oom",
    "allow-stale",
    "no-cluster",
    "allow-cross-slot-keys",
];

/// The script's flags and the length of its shebang line (0 without
/// one), or Redis's error reply.
pub fn parse(body: &[u8]) -> Result<(Flags, usize), String> {
    if !body.starts_with(b"#!") {
        return Ok((Flags::default(), 0));
    }
    let Some(end) = body.iter().position(|&b| b == b'\n') else {
        return Err("ERR Invalid script shebang".into());
    };
    let line = String::from_utf8_lossy(&body[..end]);
    let parts: Vec<&str> = line.split_whitespace().collect();
    let Some(engine) = parts.first() else {
        return Err("ERR Invalid engine in script shebang".into());
    };
    if *engine != "#!lua" {
        return Err(format!("ERR Unexpected engine in script shebang: {engine}"));
    }
    let mut flags = Flags {
        declared: true,
        ..Flags::default()
    };
    for p in &parts[1..] {
        let Some(list) = p.strip_prefix("flags=") else {
            return Err(format!("ERR Unknown lua shebang option: {p}"));
        };
        for f in list.split(',').filter(|f| !f.is_empty()) {
            if !KNOWN.contains(&f) {
                return Err(format!("ERR Unexpected flag in script shebang: {f}"));
            }
            flags.no_writes |= f == "no-writes";
            flags.allow_oom |= f == "allow-oom";
        }
    }
    Ok((flags, end))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shebangs_parse_as_redis() {
        assert_eq!(parse(b"return 1").unwrap(), (Flags::default(), 0));
        let (f, len) = parse(b"#!lua flags=no-writes,allow-oom\nreturn 1").unwrap();
        assert!(f.declared && f.no_writes);
        assert_eq!(len, 31);
        assert!(parse(b"#!lua\nreturn 1").unwrap().0.declared);
        assert_eq!(parse(b"#!lua").unwrap_err(), "ERR Invalid script shebang");
        assert_eq!(
            parse(b"#!python\nreturn 1").unwrap_err(),
            "ERR Unexpected engine in script shebang: #!python"
        );
        assert_eq!(
            parse(b"#!lua flags=bad\nreturn 1").unwrap_err(),
            "ERR Unexpected flag in script shebang: bad"
        );
        assert_eq!(
            parse(b"#!lua name=x\nreturn 1").unwrap_err(),
            "ERR Unknown lua shebang option: name=x"
        );
    }
}

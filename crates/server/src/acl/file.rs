//! The ACL file (`aclfile`): `user <name> <rules…>` lines, read by ACL LOAD
//! and at startup, written by ACL SAVE — Redis's format, so one file
//! serves both.

use std::collections::BTreeMap;
use std::path::Path;

use super::user::{has_spaces, User};

/// Parses a whole file into users (`ACLLoadFromFile`): all of it or, on
/// any error, the errors in one line as Redis words them. `next_serial`
/// numbers the new users.
pub fn parse(
    path: &Path,
    text: &str,
    allchannels_default: bool,
    mut next_serial: impl FnMut() -> u64,
) -> Result<BTreeMap<Vec<u8>, User>, String> {
    let name = path.display();
    let mut errors = String::new();
    let mut users: BTreeMap<Vec<u8>, User> = BTreeMap::new();
    for (i, line) in text.split('\n').enumerate() {
        let linenum = i + 1;
        let line = line.trim_matches(|c| c == ' ' || c == '\t' || c == '\r' || c == '\n');
        if line.is_empty() {
            continue;
        }
        let argv: Vec<&str> = line.split(' ').collect();
        if argv[0] != "user" || argv.len() < 2 {
            errors.push_str(&format!(
                "{name}:{linenum} should start with user keyword followed by the username. "
            ));
            continue;
        }
        let uname = argv[1].as_bytes();
        if has_spaces(uname) {
            errors.push_str(&format!(
                "'{name}:{linenum}: username '{}' contains invalid characters. ",
                argv[1]
            ));
            continue;
        }
        if users.contains_key(uname) {
            errors.push_str(&format!(
                "WARNING: Duplicate user '{}' found on line {linenum}. ",
                argv[1]
            ));
            continue;
        }
        let mut u = User::new(uname, next_serial(), allchannels_default);
        let mut syntax_error = false;
        for op in &argv[2..] {
            let op = op.trim_matches(|c| c == '\t' || c == '\r' || c == '\n');
            if let Err(e) = u.apply(op.as_bytes(), allchannels_default) {
                if e == super::user::RuleError::Unknown {
                    errors.push_str(&format!(
                        "{name}:{linenum}: Error in applying operation '{op}': {}. ",
                        e.text()
                    ));
                } else if !syntax_error {
                    errors.push_str(&format!("{name}:{linenum}: {}. ", e.text()));
                    syntax_error = true;
                }
            }
        }
        users.insert(uname.to_vec(), u);
    }
    if errors.is_empty() {
        Ok(users)
    } else {
        errors.push_str(
            "WARNING: ACL errors detected, no change to the previously active ACL rules was performed",
        );
        Err(errors)
    }
}

/// The file's text for these users (`ACLSaveToFile`), in name order.
pub fn render<'a>(users: impl Iterator<Item = &'a User>) -> String {
    let mut out = String::new();
    for u in users {
        out.push_str("user ");
        out.push_str(&String::from_utf8_lossy(&u.name));
        out.push(' ');
        out.push_str(&u.describe());
        out.push('\n');
    }
    out
}

/// Writes `text` to `path` through a temporary file and a rename, so a
/// crash leaves the old file or the new one.
pub fn write(path: &Path, text: &str) -> std::io::Result<()> {
    let tmp = path.with_extension(format!("tmp-{}", std::process::id()));
    std::fs::write(&tmp, text)?;
    std::fs::rename(&tmp, path).inspect_err(|_| {
        let _ = std::fs::remove_file(&tmp);
    })
}

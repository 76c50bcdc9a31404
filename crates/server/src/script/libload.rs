//! Function libraries on a script thread (FUNCTION LOAD, FCALL), as Redis
//! 7.0's Lua engine (`function_lua.c`): a library's code runs once, in an
//! environment offering only the load API (`redis.register_function`,
//! `redis.log`, the version; `setup.lua`), within 500 ms; the functions it
//! registers are then called by FCALL with its keys and arguments.
//!
//! FUNCTION LOAD runs the code on one thread to check it and learn what it
//! registers ([`State::check_library`]); the libraries themselves are the
//! node's (`super::library`). Each script thread loads a library again on
//! the first FCALL of one of its functions there, and again when the
//! library changed ([`State::library_function`]). So a library's Lua
//! locals are per thread (Redis has one Lua state): a function should keep
//! its state in keys, as it must in Redis for it to survive a restart or
//! reach a replica.

use std::time::{Duration, Instant};

use bytes::Bytes;
use elsa_lattice::libraries::Function as Registered0;
use mlua::{Function, Lua, Table, Value};

use super::lua::State;

/// What a library registers: a function's name, description and flags.
pub type Registered = Registered0;

/// How long a library's code may run at load (Redis's `LOAD_TIMEOUT_MS`).
const LOAD_TIMEOUT_MS: u64 = 500;

/// The error a library that runs too long at load raises.
pub const LOAD_TIMEOUT: &str = "FUNCTION LOAD timeout";

/// A function FCALL calls: its library (by name, at a version) and its
/// name (lowercase).
pub struct Target {
    pub library: Bytes,
    pub version: String,
    pub code: Bytes,
    pub name: Bytes,
}

/// While a library's code runs at load: when it must have ended.
struct LoadDeadline(Instant);

/// True when a library's code is running past its deadline (the hook's
/// check, every few thousand instructions).
pub fn past_deadline(lua: &Lua) -> bool {
    lua.app_data_ref::<LoadDeadline>()
        .is_some_and(|d| Instant::now() >= d.0)
}

/// A library's `#!<engine> name=<name>` line, as Redis reads it
/// (`functionExtractLibMetaData`): the library's name and where its code
/// starts (the line's newline, kept so that line numbers stay); errors as
/// FUNCTION LOAD answers them.
pub fn metadata(code: &[u8]) -> Result<(Bytes, usize), String> {
    if !code.starts_with(b"#!") {
        return Err("ERR Missing library metadata".into());
    }
    let Some(end) = code.iter().position(|&b| b == b'\n') else {
        return Err("ERR Invalid library metadata".into());
    };
    let parts = split_args(&code[..end]).ok_or("ERR Invalid library metadata")?;
    let Some(first) = parts.first() else {
        return Err("ERR Invalid library metadata".into());
    };
    let engine = &first[2.min(first.len())..];
    let mut name: Option<Bytes> = None;
    for part in &parts[1..] {
        if part.len() >= 5 && part[..5].eq_ignore_ascii_case(b"name=") {
            if name.is_some() {
                return Err(
                    "ERR Invalid metadata value, name argument was given multiple times".into(),
                );
            }
            name = Some(Bytes::copy_from_slice(&part[5..]));
            continue;
        }
        return Err(format!(
            "ERR Invalid metadata value given: {}",
            String::from_utf8_lossy(part)
        ));
    }
    let Some(name) = name else {
        return Err("ERR Library name was not given".into());
    };
    if name.is_empty() || !name.iter().all(|&c| c.is_ascii_alphanumeric() || c == b'_') {
        return Err("ERR Library names can only contain letters, numbers, or underscores(_) and must be at least one character long".into());
    }
    if !engine.eq_ignore_ascii_case(b"lua") {
        return Err(format!(
            "ERR Engine '{}' not found",
            String::from_utf8_lossy(engine)
        ));
    }
    Ok((name, end))
}

/// Words of a line as Redis's `sdssplitargs` reads them: separated by
/// blanks, `"…"` (with backslash escapes) and `'…'` quoting; None for an
/// unbalanced quote.
fn split_args(line: &[u8]) -> Option<Vec<Vec<u8>>> {
    let mut out = Vec::new();
    let mut i = 0;
    while i < line.len() {
        while i < line.len() && line[i].is_ascii_whitespace() {
            i += 1;
        }
        if i == line.len() {
            break;
        }
        let mut word = Vec::new();
        while i < line.len() && !line[i].is_ascii_whitespace() {
            match line[i] {
                q @ (b'"' | b'\'') => {
                    i += 1;
                    loop {
                        let c = *line.get(i)?;
                        i += 1;
                        if c == q {
                            break;
                        }
                        if c == b'\\' && q == b'"' {
                            word.push(*line.get(i)?);
                            i += 1;
                        } else {
                            word.push(c);
                        }
                    }
                }
                c => {
                    word.push(c);
                    i += 1;
                }
            }
        }
        out.push(word);
    }
    Some(out)
}

impl State {
    /// Compiles a library's code and runs it with the load API: the table
    /// of what it registered, or Redis's error reply.
    fn run_library(&mut self, code: &[u8]) -> Result<Table, String> {
        let (_, start) = metadata(code)?;
        let chunk = self.compile(
            &code[start..],
            "@user_function",
            self.libenv.clone(),
            "ERR Error compiling function",
        )?;
        self.lua.set_app_data(LoadDeadline(
            Instant::now() + Duration::from_millis(LOAD_TIMEOUT_MS),
        ));
        let ran = self.load_library.call::<(Value, Value)>(chunk);
        self.lua.remove_app_data::<LoadDeadline>();
        match ran {
            Ok((Value::Nil, Value::Table(registered))) => Ok(registered),
            // The hook's timeout, raised from Rust, is worded by mlua.
            Ok((Value::String(e), _)) if e.to_string_lossy().contains(LOAD_TIMEOUT) => Err(
                format!("ERR Error registering functions: ERR {LOAD_TIMEOUT}"),
            ),
            Ok((Value::String(e), _)) => Err(format!(
                "ERR Error registering functions: {}",
                e.to_string_lossy()
            )),
            Ok(_) => Err("ERR Error registering functions: ERR unknown error".into()),
            Err(e) => Err(format!("ERR Error registering functions: ERR {e}")),
        }
    }

    /// FUNCTION LOAD's check: what the library registers (at least one
    /// function), or the error reply. Nothing is kept on this thread.
    pub(super) fn check_library(&mut self, code: &[u8]) -> Result<Vec<Registered>, String> {
        let registered = self.run_library(code)?;
        let mut out = Vec::new();
        for entry in registered.sequence_values::<Table>() {
            let entry = entry.map_err(|e| format!("ERR {e}"))?;
            let name: mlua::LuaString = entry.raw_get(1).map_err(|e| format!("ERR {e}"))?;
            let description = match entry.raw_get::<Value>(2) {
                Ok(Value::String(d)) => Some(Bytes::copy_from_slice(&d.as_bytes())),
                _ => None,
            };
            let flags: u8 = entry.raw_get(3).unwrap_or(0);
            out.push(Registered {
                name: Bytes::copy_from_slice(&name.as_bytes()),
                description,
                flags,
            });
        }
        if out.is_empty() {
            return Err("ERR No functions registered".into());
        }
        Ok(out)
    }

    /// The callback FCALL calls, the library loaded on this thread if it
    /// is not yet, or changed since.
    pub(super) fn library_function(&mut self, t: &Target) -> Result<Function, String> {
        let str = |b: &[u8]| self.lua.create_string(b).map_err(|e| format!("ERR {e}"));
        let (lib_key, fn_key) = (str(&t.library)?, str(&t.name)?);
        let loaded = match self.libraries.raw_get::<Option<Table>>(&lib_key) {
            Ok(Some(lib)) if lib.raw_get::<String>("v").ok().as_deref() == Some(&t.version) => {
                Some(lib)
            }
            _ => None,
        };
        let lib = match loaded {
            Some(lib) => lib,
            None => {
                let registered = self.run_library(&t.code)?;
                let fns = self.lua.create_table().map_err(|e| format!("ERR {e}"))?;
                for entry in registered.sequence_values::<Table>() {
                    let entry = entry.map_err(|e| format!("ERR {e}"))?;
                    let name: mlua::LuaString = entry.raw_get(1).map_err(|e| format!("ERR {e}"))?;
                    let key = name.as_bytes().to_ascii_lowercase();
                    let f: Function = entry.raw_get(4).map_err(|e| format!("ERR {e}"))?;
                    let key = self
                        .lua
                        .create_string(&key)
                        .map_err(|e| format!("ERR {e}"))?;
                    // Of `f1` and `F1` in one library, the first (as the
                    // node's index: `super::library`).
                    if fns.raw_get::<Value>(&key).is_ok_and(|v| v.is_nil()) {
                        fns.raw_set(key, f).map_err(|e| format!("ERR {e}"))?;
                    }
                }
                let lib = self.lua.create_table().map_err(|e| format!("ERR {e}"))?;
                let set = lib
                    .raw_set("v", t.version.as_str())
                    .and_then(|_| lib.raw_set("fns", fns))
                    .and_then(|_| self.libraries.raw_set(&lib_key, &lib));
                set.map_err(|e| format!("ERR {e}"))?;
                lib
            }
        };
        let fns: Table = lib.raw_get("fns").map_err(|e| format!("ERR {e}"))?;
        match fns.raw_get::<Option<Function>>(&fn_key) {
            Ok(Some(f)) => Ok(f),
            _ => Err("ERR Function not found".into()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::metadata;

    #[test]
    fn metadata_reads_as_redis() {
        assert_eq!(
            metadata(b"#!lua name=lib\nx").unwrap(),
            (bytes::Bytes::from("lib"), 14)
        );
        assert_eq!(metadata(b"#!LUA name=\"foo\"\nx").unwrap().0, "foo");
        let err = |c: &[u8]| metadata(c).unwrap_err();
        assert_eq!(err(b"return 1"), "ERR Missing library metadata");
        assert_eq!(err(b"#!lua name=x"), "ERR Invalid library metadata");
        assert_eq!(err(b"#! name=test\n"), "ERR Engine '' not found");
        assert_eq!(
            err(b"#!lua name=test foo=bar\n"),
            "ERR Invalid metadata value given: foo=bar"
        );
        assert_eq!(err(b"#!lua\n"), "ERR Library name was not given");
        assert_eq!(
            err(b"#!lua name=foo name=bar\n"),
            "ERR Invalid metadata value, name argument was given multiple times"
        );
        assert!(err(b"#!lua name=a-b\n").starts_with("ERR Library names can only"));
    }
}

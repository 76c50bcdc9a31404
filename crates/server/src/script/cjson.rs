//! `cjson.encode` / `cjson.decode` for scripts, as Redis 7.0 bundles
//! lua-cjson 2.1.0 (`deps/lua/src/lua_cjson.c`) with its defaults: numbers
//! with 14 significant digits, `/` escaped, sparse arrays refused (more
//! than twice as many slots as items, past 10), nesting up to 1000, NaN and
//! Inf refused when encoding, JSON `null` decoded as the `cjson.null` light
//! userdata. Hand-written rather than serde_json: scripts compare the text
//! and the error messages (`Expected … but found … at character n`), which
//! only a port of the C tokenizer reproduces.
//!
//! Both answer `Ok(Ok(value))` or `Ok(Err(message))`; the caller raises the
//! message as the Lua error lua-cjson's `luaL_error` would.

use mlua::{LightUserData, Lua, Table, Value};

const MAX_DEPTH: usize = 1000;
const SPARSE_RATIO: usize = 2;
const SPARSE_SAFE: usize = 10;
const PRECISION: usize = 14;

/// lua-cjson's result: the value, or the error text to raise.
pub type Answer = Result<Value, String>;

/// `cjson.null`.
pub fn null() -> Value {
    Value::LightUserData(LightUserData(std::ptr::null_mut()))
}

fn type_name(v: &Value) -> &'static str {
    match v {
        Value::Nil => "nil",
        Value::Boolean(_) => "boolean",
        Value::LightUserData(_) | Value::UserData(_) => "userdata",
        Value::Integer(_) | Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Table(_) => "table",
        Value::Function(_) => "function",
        Value::Thread(_) => "thread",
        _ => "userdata",
    }
}

fn number(v: &Value) -> Option<f64> {
    match v {
        Value::Integer(i) => Some(*i as f64),
        Value::Number(n) => Some(*n),
        _ => None,
    }
}

/// C's `%.{p}g`.
pub fn fmt_g(x: f64, p: usize) -> String {
    if x == 0.0 {
        return if x.is_sign_negative() { "-0" } else { "0" }.into();
    }
    let sci = format!("{x:.*e}", p - 1);
    let (mant, exp) = sci.split_once('e').unwrap_or((&sci, "0"));
    let exp: i32 = exp.parse().unwrap_or(0);
    let strip = |s: &str| -> String {
        if s.contains('.') {
            s.trim_end_matches('0').trim_end_matches('.').to_string()
        } else {
            s.to_string()
        }
    };
    if exp < -4 || exp >= p as i32 {
        let sign = if exp < 0 { '-' } else { '+' };
        format!("{}e{sign}{:02}", strip(mant), exp.abs())
    } else {
        strip(&format!("{x:.*}", (p as i32 - 1 - exp).max(0) as usize))
    }
}

fn escape(out: &mut Vec<u8>, s: &[u8]) {
    out.push(b'"');
    for &c in s {
        match c {
            b'"' => out.extend_from_slice(b"\\\""),
            b'\\' => out.extend_from_slice(b"\\\\"),
            b'/' => out.extend_from_slice(b"\\/"),
            b'\x08' => out.extend_from_slice(b"\\b"),
            b'\t' => out.extend_from_slice(b"\\t"),
            b'\n' => out.extend_from_slice(b"\\n"),
            b'\x0c' => out.extend_from_slice(b"\\f"),
            b'\r' => out.extend_from_slice(b"\\r"),
            c if c < 0x20 || c == 0x7f => out.extend_from_slice(format!("\\u{c:04x}").as_bytes()),
            c => out.push(c),
        }
    }
    out.push(b'"');
}

fn encode_number(out: &mut Vec<u8>, v: &Value, n: f64) -> Result<(), String> {
    if n.is_nan() || n.is_infinite() {
        return Err(format!(
            "Cannot serialise {}: must not be NaN or Inf",
            type_name(v)
        ));
    }
    out.extend_from_slice(fmt_g(n, PRECISION).as_bytes());
    Ok(())
}

/// The array length lua-cjson sees in `t`: `Some(n > 0)` for an array,
/// `None` for an object (or an empty table).
fn array_length(t: &Table) -> Result<Option<usize>, String> {
    let (mut max, mut items) = (0usize, 0usize);
    for pair in t.clone().pairs::<Value, Value>() {
        let (k, _) = pair.map_err(|e| e.to_string())?;
        match number(&k) {
            Some(k) if k != 0.0 && k.floor() == k && k >= 1.0 => {
                max = max.max(k as usize);
                items += 1;
            }
            _ => return Ok(None),
        }
    }
    if max > items * SPARSE_RATIO && max > SPARSE_SAFE {
        return Err("Cannot serialise table: excessively sparse array".into());
    }
    Ok((max > 0).then_some(max))
}

fn encode_value(out: &mut Vec<u8>, v: &Value, depth: usize) -> Result<(), String> {
    match v {
        Value::String(s) => escape(out, &s.as_bytes()),
        Value::Integer(_) | Value::Number(_) => encode_number(out, v, number(v).unwrap_or(0.0))?,
        Value::Boolean(b) => out.extend_from_slice(if *b { b"true" } else { b"false" }),
        Value::Nil => out.extend_from_slice(b"null"),
        Value::LightUserData(p) if p.0.is_null() => out.extend_from_slice(b"null"),
        Value::Table(t) => {
            let depth = depth + 1;
            if depth > MAX_DEPTH {
                return Err(format!("Cannot serialise, excessive nesting ({depth})"));
            }
            match array_length(t)? {
                Some(len) => {
                    out.push(b'[');
                    for i in 1..=len {
                        if i > 1 {
                            out.push(b',');
                        }
                        let item: Value = t.raw_get(i).map_err(|e| e.to_string())?;
                        encode_value(out, &item, depth)?;
                    }
                    out.push(b']');
                }
                None => {
                    out.push(b'{');
                    for (i, pair) in t.clone().pairs::<Value, Value>().enumerate() {
                        let (k, item) = pair.map_err(|e| e.to_string())?;
                        if i > 0 {
                            out.push(b',');
                        }
                        match &k {
                            Value::String(s) => escape(out, &s.as_bytes()),
                            Value::Integer(_) | Value::Number(_) => {
                                out.push(b'"');
                                encode_number(out, &k, number(&k).unwrap_or(0.0))?;
                                out.push(b'"');
                            }
                            other => {
                                return Err(format!(
                                    "Cannot serialise {}: table key must be a number or string",
                                    type_name(other)
                                ))
                            }
                        }
                        out.push(b':');
                        encode_value(out, &item, depth)?;
                    }
                    out.push(b'}');
                }
            }
        }
        other => {
            return Err(format!(
                "Cannot serialise {}: type not supported",
                type_name(other)
            ))
        }
    }
    Ok(())
}

/// `cjson.encode(value)`.
pub fn encode(lua: &Lua, args: &[Value]) -> mlua::Result<Answer> {
    if args.len() != 1 {
        return Ok(Err(
            "bad argument #1 to 'encode' (expected 1 argument)".into()
        ));
    }
    let mut out = Vec::new();
    Ok(match encode_value(&mut out, &args[0], 0) {
        Ok(()) => Ok(Value::String(lua.create_string(&out)?)),
        Err(e) => Err(e),
    })
}

/// A token of lua-cjson's tokenizer.
#[derive(Debug)]
enum Tok {
    ObjBegin,
    ObjEnd,
    ArrBegin,
    ArrEnd,
    Str(Vec<u8>),
    Num(f64),
    Bool(bool),
    Null,
    Colon,
    Comma,
    End,
    /// An error, with its description.
    Error(&'static str),
}

impl Tok {
    fn name(&self) -> &'static str {
        match self {
            Tok::ObjBegin => "T_OBJ_BEGIN",
            Tok::ObjEnd => "T_OBJ_END",
            Tok::ArrBegin => "T_ARR_BEGIN",
            Tok::ArrEnd => "T_ARR_END",
            Tok::Str(_) => "T_STRING",
            Tok::Num(_) => "T_NUMBER",
            Tok::Bool(_) => "T_BOOLEAN",
            Tok::Null => "T_NULL",
            Tok::Colon => "T_COLON",
            Tok::Comma => "T_COMMA",
            Tok::End => "T_END",
            Tok::Error(what) => what,
        }
    }
}

struct Parser<'a> {
    data: &'a [u8],
    pos: usize,
    depth: usize,
}

fn hex4(b: &[u8]) -> Option<u32> {
    let s = std::str::from_utf8(b.get(..4)?).ok()?;
    u32::from_str_radix(s, 16)
        .ok()
        .filter(|_| s.bytes().all(|c| c.is_ascii_hexdigit()))
}

impl Parser<'_> {
    fn at(&self, i: usize) -> u8 {
        // The C string ends at its NUL (or the data's end).
        self.data.get(i).copied().unwrap_or(0)
    }

    /// The longest prefix C's `strtod` would take at `pos`: its value and
    /// length (0: not a number).
    fn strtod(&self) -> (f64, usize) {
        let rest = &self.data[self.pos..];
        let mut i = 0;
        if matches!(rest.first(), Some(b'+' | b'-')) {
            i += 1;
        }
        let lower: Vec<u8> = rest[i..rest.len().min(i + 8)].to_ascii_lowercase();
        let sign = if rest.first() == Some(&b'-') {
            -1.0
        } else {
            1.0
        };
        if lower.starts_with(b"infinity") {
            return (sign * f64::INFINITY, i + 8);
        }
        if lower.starts_with(b"inf") {
            return (sign * f64::INFINITY, i + 3);
        }
        if lower.starts_with(b"nan") {
            return (f64::NAN, i + 3);
        }
        if lower.starts_with(b"0x") {
            let digits = rest[i + 2..]
                .iter()
                .take_while(|c| c.is_ascii_hexdigit())
                .count();
            if digits > 0 {
                let s = std::str::from_utf8(&rest[i + 2..i + 2 + digits]).unwrap_or("0");
                let v = u64::from_str_radix(s, 16).map_or(f64::INFINITY, |v| v as f64);
                return (sign * v, i + 2 + digits);
            }
        }
        let start = i;
        let digits = |from: usize| {
            rest[from..]
                .iter()
                .take_while(|c| c.is_ascii_digit())
                .count()
        };
        let int = digits(i);
        i += int;
        let mut frac = 0;
        if rest.get(i) == Some(&b'.') {
            frac = digits(i + 1);
            if int + frac > 0 {
                i += 1 + frac;
            }
        }
        if int + frac == 0 {
            return (0.0, 0);
        }
        if matches!(rest.get(i), Some(b'e' | b'E')) {
            let mut j = i + 1;
            if matches!(rest.get(j), Some(b'+' | b'-')) {
                j += 1;
            }
            let e = digits(j);
            if e > 0 {
                i = j + e;
            }
        }
        let text = std::str::from_utf8(&rest[..i]).unwrap_or("0");
        let _ = start;
        (text.parse::<f64>().unwrap_or(0.0), i)
    }

    fn invalid_number(&self) -> bool {
        let mut p = self.pos;
        if self.at(p) == b'+' {
            return true;
        }
        if self.at(p) == b'-' {
            p += 1;
        }
        if self.at(p) == b'0' {
            let c2 = self.at(p + 1);
            return (c2 | 0x20) == b'x' || c2.is_ascii_digit();
        } else if self.at(p) <= b'9' {
            return false;
        }
        let word = self.data[p..self.data.len().min(p + 3)].to_ascii_lowercase();
        word == b"inf" || word == b"nan"
    }

    fn string(&mut self) -> Tok {
        self.pos += 1;
        let mut out = Vec::new();
        loop {
            let c = self.at(self.pos);
            if c == b'"' {
                self.pos += 1;
                return Tok::Str(out);
            }
            if c == 0 {
                return Tok::Error("unexpected end of string");
            }
            if c == b'\\' {
                let e = match self.at(self.pos + 1) {
                    b'"' => b'"',
                    b'\\' => b'\\',
                    b'/' => b'/',
                    b'b' => 8,
                    b't' => b'\t',
                    b'n' => b'\n',
                    b'f' => 12,
                    b'r' => b'\r',
                    b'u' => match self.unicode(&mut out) {
                        true => continue,
                        false => return Tok::Error("invalid unicode escape code"),
                    },
                    _ => return Tok::Error("invalid escape code"),
                };
                out.push(e);
                self.pos += 2;
                continue;
            }
            out.push(c);
            self.pos += 1;
        }
    }

    fn unicode(&mut self, out: &mut Vec<u8>) -> bool {
        let Some(mut cp) = hex4(&self.data[(self.pos + 2).min(self.data.len())..]) else {
            return false;
        };
        let mut len = 6;
        if cp & 0xF800 == 0xD800 {
            if cp & 0x400 != 0 || self.at(self.pos + 6) != b'\\' || self.at(self.pos + 7) != b'u' {
                return false;
            }
            let Some(low) = hex4(&self.data[(self.pos + 8).min(self.data.len())..]) else {
                return false;
            };
            if low & 0xFC00 != 0xDC00 {
                return false;
            }
            cp = (((cp & 0x3FF) << 10) | (low & 0x3FF)) + 0x10000;
            len = 12;
        }
        let Some(ch) = char::from_u32(cp) else {
            // A lone low surrogate: C encodes it as 3 bytes anyway.
            out.extend_from_slice(&[
                (cp >> 12) as u8 | 0xE0,
                ((cp >> 6) & 0x3F) as u8 | 0x80,
                (cp & 0x3F) as u8 | 0x80,
            ]);
            self.pos += len;
            return true;
        };
        let mut buf = [0u8; 4];
        out.extend_from_slice(ch.encode_utf8(&mut buf).as_bytes());
        self.pos += len;
        true
    }

    /// The next token and where it starts (0-based).
    fn next(&mut self) -> (Tok, usize) {
        while matches!(self.at(self.pos), b' ' | b'\t' | b'\n' | b'\r') {
            self.pos += 1;
        }
        let at = self.pos;
        let c = self.at(at);
        let single = match c {
            b'{' => Some(Tok::ObjBegin),
            b'}' => Some(Tok::ObjEnd),
            b'[' => Some(Tok::ArrBegin),
            b']' => Some(Tok::ArrEnd),
            b',' => Some(Tok::Comma),
            b':' => Some(Tok::Colon),
            0 => return (Tok::End, at),
            _ => None,
        };
        if let Some(t) = single {
            self.pos += 1;
            return (t, at);
        }
        let rest = &self.data[at..];
        let tok = if c == b'"' {
            self.string()
        } else if c == b'-' || c.is_ascii_digit() {
            self.number()
        } else if rest.starts_with(b"true") {
            self.pos += 4;
            Tok::Bool(true)
        } else if rest.starts_with(b"false") {
            self.pos += 5;
            Tok::Bool(false)
        } else if rest.starts_with(b"null") {
            self.pos += 4;
            Tok::Null
        } else if matches!(c, b'i' | b'I' | b'n' | b'N' | b'+') && self.invalid_number() {
            self.number()
        } else {
            Tok::Error("invalid token")
        };
        // An error's position is where the tokenizer stopped.
        let at = if matches!(tok, Tok::Error(_)) {
            self.pos
        } else {
            at
        };
        (tok, at)
    }

    fn number(&mut self) -> Tok {
        let (v, len) = self.strtod();
        if len == 0 {
            return Tok::Error("invalid number");
        }
        self.pos += len;
        Tok::Num(v)
    }

    fn fail<T>(&self, expected: &str, tok: &Tok, at: usize) -> Result<T, String> {
        Err(format!(
            "Expected {expected} but found {} at character {}",
            tok.name(),
            at + 1
        ))
    }

    fn descend(&mut self) -> Result<(), String> {
        self.depth += 1;
        if self.depth > MAX_DEPTH {
            return Err(format!(
                "Found too many nested data structures ({}) at character {}",
                self.depth, self.pos
            ));
        }
        Ok(())
    }

    fn value(&mut self, lua: &Lua, tok: Tok, at: usize) -> Result<Value, String> {
        let lua_err = |e: mlua::Error| e.to_string();
        Ok(match tok {
            Tok::Str(s) => Value::String(lua.create_string(&s).map_err(lua_err)?),
            Tok::Num(n) => Value::Number(n),
            Tok::Bool(b) => Value::Boolean(b),
            Tok::Null => null(),
            Tok::ObjBegin => {
                self.descend()?;
                let t = lua.create_table().map_err(lua_err)?;
                let (mut tok, mut at) = self.next();
                if !matches!(tok, Tok::ObjEnd) {
                    loop {
                        let Tok::Str(key) = tok else {
                            return self.fail("object key string", &tok, at);
                        };
                        let (colon, cat) = self.next();
                        if !matches!(colon, Tok::Colon) {
                            return self.fail("colon", &colon, cat);
                        }
                        let (vt, vat) = self.next();
                        let v = self.value(lua, vt, vat)?;
                        t.raw_set(lua.create_string(&key).map_err(lua_err)?, v)
                            .map_err(lua_err)?;
                        let (sep, sat) = self.next();
                        match sep {
                            Tok::ObjEnd => break,
                            Tok::Comma => (tok, at) = self.next(),
                            other => return self.fail("comma or object end", &other, sat),
                        }
                    }
                }
                self.depth -= 1;
                Value::Table(t)
            }
            Tok::ArrBegin => {
                self.descend()?;
                let t = lua.create_table().map_err(lua_err)?;
                let (mut tok, mut at) = self.next();
                if !matches!(tok, Tok::ArrEnd) {
                    for i in 1.. {
                        let v = self.value(lua, tok, at)?;
                        t.raw_set(i, v).map_err(lua_err)?;
                        let (sep, sat) = self.next();
                        match sep {
                            Tok::ArrEnd => break,
                            Tok::Comma => (tok, at) = self.next(),
                            other => return self.fail("comma or array end", &other, sat),
                        }
                    }
                }
                self.depth -= 1;
                Value::Table(t)
            }
            other => return self.fail("value", &other, at),
        })
    }
}

/// `cjson.decode(text)`.
pub fn decode(lua: &Lua, args: &[Value]) -> mlua::Result<Answer> {
    if args.len() != 1 {
        return Ok(Err(
            "bad argument #1 to 'decode' (expected 1 argument)".into()
        ));
    }
    let text = match &args[0] {
        Value::String(s) => s.as_bytes().to_vec(),
        Value::Integer(i) => i.to_string().into_bytes(),
        Value::Number(n) => fmt_g(*n, 14).into_bytes(),
        other => {
            return Ok(Err(format!(
                "bad argument #1 to 'decode' (string expected, got {})",
                type_name(other)
            )))
        }
    };
    if text.len() >= 2 && (text[0] == 0 || text[1] == 0) {
        return Ok(Err("JSON parser does not support UTF-16 or UTF-32".into()));
    }
    let mut p = Parser {
        data: &text,
        pos: 0,
        depth: 0,
    };
    let (tok, at) = p.next();
    let v = match p.value(lua, tok, at) {
        Ok(v) => v,
        Err(e) => return Ok(Err(e)),
    };
    let (end, at) = p.next();
    if !matches!(end, Tok::End) {
        return Ok(p.fail("the end", &end, at));
    }
    Ok(Ok(v))
}

#[cfg(test)]
mod tests {
    use super::fmt_g;

    #[test]
    fn numbers_print_as_c_does_with_14_digits() {
        assert_eq!(fmt_g(0.1, 14), "0.1");
        assert_eq!(fmt_g(3.0, 14), "3");
        assert_eq!(fmt_g(123456789012345.0, 14), "1.2345678901234e+14");
        assert_eq!(fmt_g(1e20, 14), "1e+20");
        assert_eq!(fmt_g(0.0001, 14), "0.0001");
        assert_eq!(fmt_g(0.00001, 14), "1e-05");
        assert_eq!(fmt_g(-2.5, 14), "-2.5");
    }
}

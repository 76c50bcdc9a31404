//! Conversions between Redis replies and Lua values, exactly as Redis 7.0
//! does them (`script_lua.c`):
//!
//! - a command's reply to Lua ([`to_lua`]): integer → number, bulk →
//!   string, nil bulk or nil array → false, array → table, status →
//!   `{ok=…}`, error → `{err=…}`; with `redis.setresp(3)` also null → nil,
//!   boolean → boolean, double → `{double=…}`, map → `{map={…}}`, set →
//!   `{set={…=true}}`, big number → `{big_number=…}`;
//! - a script's result to a reply ([`from_lua`]): number → integer
//!   (truncated), string → bulk, table → array up to its first nil,
//!   `{ok=…}` → status, `{err=…}` → error, true → 1, false or nil → nil
//!   (in RESP3 mode booleans stay booleans), `{double=…}`, `{map=…}`,
//!   `{set=…}`.
//!
//! A command run for a script writes its reply as RESP into a scratch
//! buffer (the same encoder every client gets); [`parse`] reads it back
//! into a [`Reply`], which is what crosses from the connection to the
//! script thread.

use bytes::BytesMut;
use mlua::{Lua, Table, Value};

use crate::resp::ReplyWriter;

/// A reply, owned: a command's answer on its way to Lua, or a script's
/// result on its way to the client.
#[derive(Clone, Debug, PartialEq)]
pub enum Reply {
    /// Nil bulk string (RESP3: null).
    Nil,
    /// Nil array (RESP2 `*-1`).
    NilArray,
    /// RESP3 null (`_`).
    Null,
    Int(i64),
    Bulk(Vec<u8>),
    Status(Vec<u8>),
    /// The whole error line, code included, without the `-`.
    Error(Vec<u8>),
    Array(Vec<Reply>),
    Map(Vec<(Reply, Reply)>),
    Set(Vec<Reply>),
    Double(f64),
    Bool(bool),
    BigNum(Vec<u8>),
}

/// Parses one RESP2/RESP3 reply (a command's whole answer).
pub fn parse(buf: &[u8]) -> Option<Reply> {
    let mut pos = 0;
    parse_at(buf, &mut pos)
}

fn line<'a>(buf: &'a [u8], pos: &mut usize) -> Option<&'a [u8]> {
    let start = *pos;
    let end = start + buf.get(start..)?.windows(2).position(|w| w == b"\r\n")?;
    *pos = end + 2;
    Some(&buf[start..end])
}

fn num(b: &[u8]) -> Option<i64> {
    std::str::from_utf8(b).ok()?.parse().ok()
}

fn parse_at(buf: &[u8], pos: &mut usize) -> Option<Reply> {
    let kind = *buf.get(*pos)?;
    *pos += 1;
    let head = line(buf, pos)?;
    Some(match kind {
        b'+' => Reply::Status(head.to_vec()),
        b'-' => Reply::Error(head.to_vec()),
        b':' => Reply::Int(num(head)?),
        b'_' => Reply::Null,
        b'#' => Reply::Bool(head == b"t"),
        b',' => Reply::Double(parse_double(head)?),
        b'(' => Reply::BigNum(head.to_vec()),
        b'$' | b'=' => {
            let n = num(head)?;
            if n < 0 {
                return Some(Reply::Nil);
            }
            let n = n as usize;
            let body = buf.get(*pos..*pos + n)?.to_vec();
            *pos += n + 2;
            // A verbatim string reaches Lua as its text (`txt:` dropped):
            // Elsa's only one is INFO-like text.
            match kind {
                b'=' if body.len() >= 4 => Reply::Bulk(body[4..].to_vec()),
                _ => Reply::Bulk(body),
            }
        }
        b'*' | b'~' | b'>' => {
            let n = num(head)?;
            if n < 0 {
                return Some(Reply::NilArray);
            }
            let items = (0..n)
                .map(|_| parse_at(buf, pos))
                .collect::<Option<Vec<_>>>()?;
            if kind == b'~' {
                Reply::Set(items)
            } else {
                Reply::Array(items)
            }
        }
        b'%' => {
            let n = num(head)?;
            let mut pairs = Vec::with_capacity(n.max(0) as usize);
            for _ in 0..n {
                let k = parse_at(buf, pos)?;
                let v = parse_at(buf, pos)?;
                pairs.push((k, v));
            }
            Reply::Map(pairs)
        }
        _ => return None,
    })
}

fn parse_double(b: &[u8]) -> Option<f64> {
    match b {
        b"inf" => Some(f64::INFINITY),
        b"-inf" => Some(f64::NEG_INFINITY),
        b"nan" => Some(f64::NAN),
        _ => std::str::from_utf8(b).ok()?.parse().ok(),
    }
}

/// The Lua error table Redis builds from an error text (`luaPushErrorBuff`):
/// `-CODE msg` keeps its code, a text without a leading `-` gets `ERR`.
pub fn error_text(err: &[u8]) -> Vec<u8> {
    let (code, msg): (&[u8], &[u8]) = match err.strip_prefix(b"-") {
        Some(rest) => match rest.iter().position(|&c| c == b' ') {
            Some(sp) => (&rest[..sp], &rest[sp + 1..]),
            None => (b"ERR", rest),
        },
        None => (b"ERR", err),
    };
    let mut msg = msg;
    while let [rest @ .., b'\r' | b'\n'] = msg {
        msg = rest;
    }
    while let [b'\r' | b'\n', rest @ ..] = msg {
        msg = rest;
    }
    let mut out = code.to_vec();
    out.push(b' ');
    out.extend_from_slice(msg);
    out
}

/// `{err = text}` as Redis's scripts see an error.
pub fn err_table(lua: &Lua, text: &[u8]) -> mlua::Result<Table> {
    let t = lua.create_table()?;
    t.raw_set("err", lua.create_string(text)?)?;
    Ok(t)
}

/// The field of an error table made from a command's error reply: the
/// error was counted in errorstats when the command answered it, and is
/// not counted again when the script raises or returns it (Redis's name;
/// scripts see it, as in Redis).
pub const COUNTED: &str = "ignore_error_stats_update";

/// `{err = text}` of a command's error reply `e` (without its `-`),
/// marked [`COUNTED`].
fn call_err_table(lua: &Lua, e: &[u8]) -> mlua::Result<Table> {
    let mut dashed = b"-".to_vec();
    dashed.extend_from_slice(e);
    let t = err_table(lua, &error_text(&dashed))?;
    t.raw_set(COUNTED, true)?;
    Ok(t)
}

/// Whether `v`, a script's result or the error it raised, is an error
/// table marked [`COUNTED`].
pub fn counted(v: &Value) -> bool {
    match v {
        Value::Table(t) => {
            matches!(t.raw_get::<Value>(COUNTED), Ok(Value::Boolean(true)))
                && (matches!(t.raw_get::<Value>("err"), Ok(Value::String(_))))
        }
        _ => false,
    }
}

/// A command's reply as the Lua value `redis.call` returns; `true` with it
/// when it is an error (which `redis.call` raises).
pub fn to_lua(lua: &Lua, r: &Reply) -> mlua::Result<(Value, bool)> {
    Ok(match r {
        Reply::Error(e) => (Value::Table(call_err_table(lua, e)?), true),
        r => (value(lua, r)?, false),
    })
}

fn value(lua: &Lua, r: &Reply) -> mlua::Result<Value> {
    Ok(match r {
        Reply::Nil | Reply::NilArray => Value::Boolean(false),
        Reply::Null => Value::Nil,
        Reply::Int(n) => Value::Number(*n as f64),
        Reply::Bulk(b) => Value::String(lua.create_string(b)?),
        Reply::Bool(b) => Value::Boolean(*b),
        Reply::Status(s) => single(lua, "ok", Value::String(lua.create_string(s)?))?,
        Reply::Error(e) => Value::Table(call_err_table(lua, e)?),
        Reply::Double(d) => single(lua, "double", Value::Number(*d))?,
        Reply::BigNum(b) => single(lua, "big_number", Value::String(lua.create_string(b)?))?,
        Reply::Array(items) => {
            let t = lua.create_table_with_capacity(items.len(), 0)?;
            for (i, item) in items.iter().enumerate() {
                t.raw_set(i + 1, value(lua, item)?)?;
            }
            Value::Table(t)
        }
        Reply::Map(pairs) => {
            let t = lua.create_table()?;
            for (k, v) in pairs {
                t.raw_set(value(lua, k)?, value(lua, v)?)?;
            }
            single(lua, "map", Value::Table(t))?
        }
        Reply::Set(items) => {
            let t = lua.create_table()?;
            for item in items {
                t.raw_set(value(lua, item)?, true)?;
            }
            single(lua, "set", Value::Table(t))?
        }
    })
}

fn single(lua: &Lua, field: &str, v: Value) -> mlua::Result<Value> {
    let t = lua.create_table()?;
    t.raw_set(field, v)?;
    Ok(Value::Table(t))
}

/// Deepest table nesting a script's result may have (Redis stops at the
/// Lua stack's limit, with this error).
const MAX_DEPTH: usize = 1000;

/// Most a script's result may hold once converted: elements, tables
/// (the slow part: each is looked up for `err`, `ok`, `map`…) and string
/// bytes. A table shared at every level (`a = {b, b}`, `b = {c, c}`…)
/// unfolds into 2^depth elements: Redis converts it until the end of time;
/// Elsa stops with [`TOO_LARGE`]. 512 MiB is `proto-max-bulk-len`'s
/// default: no reply a client could send back.
pub const MAX_RESULT_ELEMENTS: usize = 8 << 20;
pub const MAX_RESULT_TABLES: usize = 1 << 20;
pub const MAX_RESULT_BYTES: usize = 512 << 20;
/// Tables entered from inside themselves before a result is refused as
/// holding itself more than once (a chain to the depth limit takes
/// [`MAX_DEPTH`]).
const MAX_REENTRIES: usize = 4 * MAX_DEPTH;
/// Elements between two checks for SCRIPT KILL during a conversion.
const KILL_CHECK_EVERY: usize = 4096;

/// The error a result past the bounds above is answered with.
pub const TOO_LARGE: &str = "ERR the script's result is too large to reply (over 8388608 elements, 1048576 tables or 512 MiB of strings)";
/// The error a result that holds itself is answered with.
pub const HOLDS_ITSELF: &str =
    "ERR the script's result holds itself more than once (it has no finite reply)";

/// Why a conversion stopped before its end.
#[derive(Debug, PartialEq)]
pub enum Stopped {
    /// Past the bounds.
    TooLarge,
    /// A table inside itself more than once.
    HoldsItself,
    /// `killed` was set (SCRIPT KILL, or the client left).
    Killed,
}

/// The text a killed script fails with.
pub const KILLED: &str = "ERR Script killed by user with SCRIPT KILL...";

impl Stopped {
    /// The error reply for it.
    pub fn text(&self) -> &'static str {
        match self {
            Stopped::TooLarge => TOO_LARGE,
            Stopped::HoldsItself => HOLDS_ITSELF,
            Stopped::Killed => KILLED,
        }
    }
}

/// What a conversion may still spend, the tables it is inside of, and the
/// flag that ends it early.
struct Budget<'a> {
    elements: usize,
    tables: usize,
    bytes: usize,
    path: Vec<*const std::ffi::c_void>,
    reentries: usize,
    killed: &'a std::sync::atomic::AtomicBool,
}

impl Budget<'_> {
    fn element(&mut self) -> Result<(), Stopped> {
        self.elements = self.elements.checked_sub(1).ok_or(Stopped::TooLarge)?;
        if self.elements & (KILL_CHECK_EVERY - 1) == 0
            && self.killed.load(std::sync::atomic::Ordering::Relaxed)
        {
            return Err(Stopped::Killed);
        }
        Ok(())
    }

    fn bytes(&mut self, n: usize) -> Result<(), Stopped> {
        self.bytes = self.bytes.checked_sub(n).ok_or(Stopped::TooLarge)?;
        Ok(())
    }

    /// Enters table `t`. A table inside itself is followed down to the
    /// depth limit, as Redis does (`a = {b}`, `b = {a}` answers arrays
    /// nested until "reached lua stack limit"); but one that holds itself
    /// more than once unfolds exponentially: past [`MAX_REENTRIES`] tables
    /// entered from inside themselves, it is refused.
    fn enter(&mut self, t: &Table) -> Result<(), Stopped> {
        self.tables = self.tables.checked_sub(1).ok_or(Stopped::TooLarge)?;
        let p = t.to_pointer();
        if self.path.contains(&p) {
            self.reentries += 1;
            if self.reentries > MAX_REENTRIES {
                return Err(Stopped::HoldsItself);
            }
        }
        self.path.push(p);
        Ok(())
    }
}

/// A script's result as the reply its client gets. `resp3` is the
/// script's protocol (`redis.setresp`), which decides what booleans are.
/// Bounded ([`MAX_RESULT_ELEMENTS`] and the others) and ended early once `killed` is set, so
/// a run past the busy threshold can always be ended by SCRIPT KILL.
pub fn from_lua(
    v: &Value,
    resp3: bool,
    killed: &std::sync::atomic::AtomicBool,
) -> Result<Reply, Stopped> {
    let mut budget = Budget {
        elements: MAX_RESULT_ELEMENTS,
        tables: MAX_RESULT_TABLES,
        bytes: MAX_RESULT_BYTES,
        path: Vec::new(),
        reentries: 0,
        killed,
    };
    from_lua_at(v, resp3, 0, &mut budget)
}

fn from_lua_at(v: &Value, resp3: bool, depth: usize, b: &mut Budget) -> Result<Reply, Stopped> {
    if depth > MAX_DEPTH {
        return Ok(Reply::Error(b"ERR reached lua stack limit".to_vec()));
    }
    b.element()?;
    Ok(match v {
        Value::String(s) => {
            let s = s.as_bytes();
            b.bytes(s.len())?;
            Reply::Bulk(s.to_vec())
        }
        Value::Boolean(v) if resp3 => Reply::Bool(*v),
        Value::Boolean(true) => Reply::Int(1),
        Value::Boolean(false) => Reply::Nil,
        // C's `(long long)` cast: toward zero.
        Value::Number(n) => Reply::Int(c_long_long(*n)),
        Value::Integer(n) => Reply::Int(*n),
        Value::Table(t) => {
            b.enter(t)?;
            let r = table(t, resp3, depth, b)?;
            b.path.pop();
            r
        }
        _ => Reply::Nil,
    })
}

fn table(t: &Table, resp3: bool, depth: usize, b: &mut Budget) -> Result<Reply, Stopped> {
    if let Ok(Value::String(e)) = t.raw_get::<Value>("err") {
        return Ok(Reply::Error(e.as_bytes().to_vec()));
    }
    if let Ok(Value::String(s)) = t.raw_get::<Value>("ok") {
        return Ok(Reply::Status(s.as_bytes().to_vec()));
    }
    if let Ok(Value::Number(d)) = t.raw_get::<Value>("double") {
        return Ok(Reply::Double(d));
    }
    if let Ok(Value::Integer(d)) = t.raw_get::<Value>("double") {
        return Ok(Reply::Double(d as f64));
    }
    if let Ok(Value::String(s)) = t.raw_get::<Value>("big_number") {
        return Ok(Reply::BigNum(s.as_bytes().to_vec()));
    }
    if let Ok(Value::Table(m)) = t.raw_get::<Value>("map") {
        let mut pairs = Vec::new();
        for (k, v) in m.pairs::<Value, Value>().filter_map(Result::ok) {
            pairs.push((
                from_lua_at(&k, resp3, depth + 1, b)?,
                from_lua_at(&v, resp3, depth + 1, b)?,
            ));
        }
        return Ok(Reply::Map(pairs));
    }
    if let Ok(Value::Table(s)) = t.raw_get::<Value>("set") {
        let mut items = Vec::new();
        for (k, _) in s.pairs::<Value, Value>().filter_map(Result::ok) {
            items.push(from_lua_at(&k, resp3, depth + 1, b)?);
        }
        return Ok(Reply::Set(items));
    }
    let mut items = Vec::new();
    for i in 1.. {
        match t.raw_get::<Value>(i) {
            Ok(Value::Nil) | Err(_) => break,
            Ok(v) => items.push(from_lua_at(&v, resp3, depth + 1, b)?),
        }
    }
    Ok(Reply::Array(items))
}

/// Writes a reply in the client's protocol.
pub fn write(w: &mut ReplyWriter<'_>, r: &Reply) {
    match r {
        Reply::Nil | Reply::Null => w.nil(),
        Reply::NilArray => w.nil_array(),
        Reply::Int(n) => w.int(*n),
        Reply::Bulk(b) => w.bulk(b),
        Reply::Status(s) => {
            // A status line cannot hold CR or LF: Redis maps them to spaces.
            let s: Vec<u8> = s
                .iter()
                .map(|&c| if c == b'\r' || c == b'\n' { b' ' } else { c })
                .collect();
            w.simple(&String::from_utf8_lossy(&s));
        }
        Reply::Error(e) => w.error(&String::from_utf8_lossy(e)),
        Reply::Array(items) => {
            w.array(items.len());
            for i in items {
                write(w, i);
            }
        }
        Reply::Map(pairs) => {
            w.map(pairs.len());
            for (k, v) in pairs {
                write(w, k);
                write(w, v);
            }
        }
        Reply::Set(items) => {
            w.set(items.len());
            for i in items {
                write(w, i);
            }
        }
        Reply::Double(d) => w.double(*d),
        Reply::Bool(b) => raw_bool(w.out, w.resp3, *b),
        Reply::BigNum(b) => {
            if w.resp3 {
                w.out.extend_from_slice(b"(");
                w.out.extend_from_slice(b);
                w.out.extend_from_slice(b"\r\n");
            } else {
                w.bulk(b);
            }
        }
    }
}

fn raw_bool(out: &mut BytesMut, resp3: bool, b: bool) {
    out.extend_from_slice(match (resp3, b) {
        (true, true) => b"#t\r\n",
        (true, false) => b"#f\r\n",
        (false, true) => b":1\r\n",
        (false, false) => b":0\r\n",
    });
}

/// C's `(long long)` cast of a double as x86-64 does it: out of range,
/// NaN and the infinities all give `LLONG_MIN` (Rust's `as` saturates).
fn c_long_long(n: f64) -> i64 {
    if (-9.223_372_036_854_776e18..9.223_372_036_854_776e18).contains(&n) {
        n as i64
    } else {
        i64::MIN
    }
}

/// A Lua number as a command argument: C's `%.17g`, as Redis formats it
/// (`redis.call('set', k, 2.7)` stores `2.7000000000000002`).
pub fn fmt_g17(x: f64) -> String {
    if x.is_nan() {
        return if x.is_sign_negative() { "-nan" } else { "nan" }.into();
    }
    if x.is_infinite() {
        return if x > 0.0 { "inf" } else { "-inf" }.into();
    }
    if x == 0.0 {
        return if x.is_sign_negative() { "-0" } else { "0" }.into();
    }
    if x.fract() == 0.0 && x.abs() < 1e17 {
        // An integer of at most 17 digits: `%.17g` prints all of them
        // (the common case, `redis.call('sadd', k, i)`, without the
        // formatting below).
        return (x as i64).to_string();
    }
    let sci = format!("{x:.16e}");
    let (mant, exp) = sci.split_once('e').unwrap_or((&sci, "0"));
    let exp: i32 = exp.parse().unwrap_or(0);
    if !(-4..17).contains(&exp) {
        let m = strip_zeros(mant);
        let sign = if exp < 0 { '-' } else { '+' };
        format!("{m}e{sign}{:02}", exp.abs())
    } else {
        strip_zeros(&format!("{x:.*}", (16 - exp) as usize)).to_string()
    }
}

fn strip_zeros(s: &str) -> &str {
    if s.contains('.') {
        s.trim_end_matches('0').trim_end_matches('.')
    } else {
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_format_as_c_does() {
        assert_eq!(fmt_g17(2.7), "2.7000000000000002");
        assert_eq!(fmt_g17(10.0), "10");
        assert_eq!(fmt_g17(-3.0), "-3");
        assert_eq!(fmt_g17(0.5), "0.5");
        assert_eq!(fmt_g17(1e20), "1e+20");
        assert_eq!(fmt_g17(1e17), "1e+17");
        assert_eq!(fmt_g17(1e16), "10000000000000000");
        assert_eq!(fmt_g17(-99999999999999984.0), "-99999999999999984");
        assert_eq!(fmt_g17(1e-5), "1.0000000000000001e-05");
        assert_eq!(fmt_g17(123456789012345678.0), "1.2345678901234568e+17");
    }

    #[test]
    fn error_codes_are_kept_or_added() {
        assert_eq!(error_text(b"-WRONGTYPE Operation"), b"WRONGTYPE Operation");
        assert_eq!(error_text(b"-x"), b"ERR x");
        assert_eq!(error_text(b"plain text"), b"ERR plain text");
    }

    #[test]
    fn replies_parse_back() {
        let r = parse(b"*3\r\n:1\r\n$-1\r\n+OK\r\n").unwrap();
        assert_eq!(
            r,
            Reply::Array(vec![
                Reply::Int(1),
                Reply::Nil,
                Reply::Status(b"OK".to_vec())
            ])
        );
    }
}

//! `cjson.decode(text)`, as lua-cjson 2.1.0 reads JSON: a port of its
//! tokenizer (whitespace is space, tab, CR, LF; the text ends at its first
//! NUL; numbers are whatever the C library's `strtod` takes — hex,
//! `inf`, `nan(…)`, leading `+` and zeros — unless `decode_invalid_numbers`
//! is off, when those are "invalid number"/"invalid token"; `\uXXXX` with
//! surrogate pairs to UTF-8, other bytes as they are) and of its parser,
//! with its error texts and positions. JSON `null` is `cjson.null` (a NULL
//! light userdata); numbers are Lua numbers; objects and arrays are
//! tables. Nesting past the depth setting, or past the Lua stack (an
//! object needs 3 free slots, an array 2), is refused.
//!
//! The parse keeps on the Lua stack what lua-cjson's recursion keeps
//! (each open table, and each open object's key), so its stack checks fail
//! where Redis's fail; which kind each open table is, and an array's next
//! index, are in [`Open`]s.

use std::ffi::{c_char, c_int, CStr};

use mlua::ffi;

use super::super::clib::push_bytes;
use super::{fetch_config, raise, Fail, Settings};

/// A table being filled.
pub(super) enum Open {
    /// An object: its key is on the stack above it.
    Object,
    /// An array: the index of its next element.
    Array(c_int),
}

/// `cjson.decode(text)`.
pub(super) unsafe extern "C-unwind" fn decode(l: *mut ffi::lua_State) -> c_int {
    if ffi::lua_gettop(l) != 1 {
        ffi::luaL_argerror(l, 1, c"expected 1 argument".as_ptr());
    }
    let cfg = &mut *fetch_config(l);
    let mut len = 0usize;
    let p = ffi::luaL_checklstring(l, 1, &mut len);
    // The text and the NUL Lua ends every string with; it stays at stack
    // slot 1, untouched, until the end.
    let data = std::slice::from_raw_parts(p.cast::<u8>(), len + 1);
    if len >= 2 && (data[0] == 0 || data[1] == 0) {
        ffi::luaL_error(l, c"JSON parser does not support UTF-16 or UTF-32".as_ptr());
    }
    cfg.buf.clear();
    cfg.decoding.clear();
    let parsed = parse(l, &cfg.set, data, &mut cfg.buf, &mut cfg.decoding);
    cfg.trim();
    if let Err(f) = parsed {
        raise(l, f);
    }
    1
}

/// A token's kind.
#[derive(Clone, Copy, PartialEq)]
enum Tok {
    ObjBegin,
    ObjEnd,
    ArrBegin,
    ArrEnd,
    /// Its text is in the string buffer.
    Str,
    Num(f64),
    Bool(bool),
    Null,
    Colon,
    Comma,
    End,
    /// An error, and its description.
    Error(&'static CStr),
}

/// A token and where it starts (for an error: where it was found).
struct Token {
    tok: Tok,
    index: usize,
}

impl Token {
    fn name(&self) -> &'static CStr {
        match self.tok {
            Tok::ObjBegin => c"T_OBJ_BEGIN",
            Tok::ObjEnd => c"T_OBJ_END",
            Tok::ArrBegin => c"T_ARR_BEGIN",
            Tok::ArrEnd => c"T_ARR_END",
            Tok::Str => c"T_STRING",
            Tok::Num(_) => c"T_NUMBER",
            Tok::Bool(_) => c"T_BOOLEAN",
            Tok::Null => c"T_NULL",
            Tok::Colon => c"T_COLON",
            Tok::Comma => c"T_COMMA",
            Tok::End => c"T_END",
            Tok::Error(what) => what,
        }
    }

    fn expected(&self, what: &'static CStr) -> Fail {
        Fail::Expected {
            what,
            found: self.name(),
            index: self.index,
        }
    }
}

/// Appends to the string buffer, failing rather than aborting when Rust
/// memory runs out.
fn push(tmp: &mut Vec<u8>, bytes: &[u8]) -> Result<(), Fail> {
    tmp.try_reserve(bytes.len()).map_err(|_| Fail::Memory)?;
    tmp.extend_from_slice(bytes);
    Ok(())
}

fn hex_digit(c: u8) -> Option<u32> {
    (c as char).to_digit(16)
}

/// Four hex digits at `at` (stopping at the NUL).
fn hex4(data: &[u8], at: usize) -> Option<u32> {
    (0..4).try_fold(0, |v, i| Some(v << 4 | hex_digit(*data.get(at + i)?)?))
}

/// `codepoint_to_utf8`.
fn utf8(cp: u32, out: &mut [u8; 4]) -> usize {
    if cp <= 0x7f {
        out[0] = cp as u8;
        1
    } else if cp <= 0x7ff {
        out[0] = (cp >> 6) as u8 | 0xc0;
        out[1] = (cp & 0x3f) as u8 | 0x80;
        2
    } else if cp <= 0xffff {
        out[0] = (cp >> 12) as u8 | 0xe0;
        out[1] = ((cp >> 6) & 0x3f) as u8 | 0x80;
        out[2] = (cp & 0x3f) as u8 | 0x80;
        3
    } else {
        out[0] = (cp >> 18) as u8 | 0xf0;
        out[1] = ((cp >> 12) & 0x3f) as u8 | 0x80;
        out[2] = ((cp >> 6) & 0x3f) as u8 | 0x80;
        out[3] = (cp & 0x3f) as u8 | 0x80;
        4
    }
}

/// lua-cjson's tokenizer over a NUL-terminated text.
struct Lexer<'a> {
    data: &'a [u8],
    pos: usize,
    /// `decode_invalid_numbers`.
    invalid_numbers: bool,
}

impl Lexer<'_> {
    fn at(&self, i: usize) -> u8 {
        self.data.get(i).copied().unwrap_or(0)
    }

    fn error(&self, what: &'static CStr) -> Token {
        Token {
            tok: Tok::Error(what),
            index: self.pos,
        }
    }

    fn next(&mut self, tmp: &mut Vec<u8>) -> Result<Token, Fail> {
        while matches!(self.at(self.pos), b' ' | b'\t' | b'\n' | b'\r') {
            self.pos += 1;
        }
        let index = self.pos;
        let c = self.at(index);
        let single = match c {
            b'{' => Tok::ObjBegin,
            b'}' => Tok::ObjEnd,
            b'[' => Tok::ArrBegin,
            b']' => Tok::ArrEnd,
            b',' => Tok::Comma,
            b':' => Tok::Colon,
            0 => {
                return Ok(Token {
                    tok: Tok::End,
                    index,
                })
            }
            b'"' => return self.string(tmp),
            b'-' | b'0'..=b'9' => {
                if !self.invalid_numbers && self.invalid_number() {
                    return Ok(self.error(c"invalid number"));
                }
                return Ok(self.number());
            }
            b'f' | b'i' | b'I' | b'n' | b'N' | b't' | b'+' => {
                let rest = &self.data[index..];
                let word = if rest.starts_with(b"true") {
                    Some((Tok::Bool(true), 4))
                } else if rest.starts_with(b"false") {
                    Some((Tok::Bool(false), 5))
                } else if rest.starts_with(b"null") {
                    Some((Tok::Null, 4))
                } else {
                    None
                };
                if let Some((tok, len)) = word {
                    self.pos += len;
                    return Ok(Token { tok, index });
                }
                if self.invalid_numbers && self.invalid_number() {
                    return Ok(self.number());
                }
                return Ok(self.error(c"invalid token"));
            }
            _ => return Ok(self.error(c"invalid token")),
        };
        self.pos += 1;
        Ok(Token { tok: single, index })
    }

    /// `json_is_invalid_number`: a number `strtod` takes but JSON does
    /// not (`+…`, hex, leading zeros, `inf…`, `nan…`).
    fn invalid_number(&self) -> bool {
        let mut p = self.pos;
        if self.at(p) == b'+' {
            return true;
        }
        if self.at(p) == b'-' {
            p += 1;
        }
        let c = self.at(p);
        if c == b'0' {
            let c2 = self.at(p + 1);
            return (c2 | 0x20) == b'x' || c2.is_ascii_digit();
        }
        // C compares a (signed) char: bytes past 0x7f are "<= '9'" too.
        if c <= b'9' || c >= 0x80 {
            return false;
        }
        let word = [self.at(p), self.at(p + 1), self.at(p + 2)].to_ascii_lowercase();
        word == *b"inf" || word == *b"nan"
    }

    /// A number, as the C library's `strtod` reads it.
    fn number(&mut self) -> Token {
        let index = self.pos;
        let start = self.data[index..].as_ptr().cast::<c_char>();
        let mut end: *mut c_char = std::ptr::null_mut();
        // SAFETY: `data` ends with a NUL, where strtod stops at the latest.
        let (n, len) = unsafe {
            let n = libc::strtod(start, &mut end);
            (n, end.offset_from(start).max(0) as usize)
        };
        if len == 0 {
            return self.error(c"invalid number");
        }
        self.pos += len;
        Token {
            tok: Tok::Num(n),
            index,
        }
    }

    fn string(&mut self, tmp: &mut Vec<u8>) -> Result<Token, Fail> {
        let index = self.pos;
        self.pos += 1;
        tmp.clear();
        loop {
            let c = self.at(self.pos);
            if c == b'"' {
                break;
            }
            if c == 0 {
                return Ok(self.error(c"unexpected end of string"));
            }
            if c == b'\\' {
                let e = match self.at(self.pos + 1) {
                    b'"' => b'"',
                    b'\\' => b'\\',
                    b'/' => b'/',
                    b'b' => b'\x08',
                    b't' => b'\t',
                    b'n' => b'\n',
                    b'f' => b'\x0c',
                    b'r' => b'\r',
                    b'u' => {
                        if self.unicode(tmp)? {
                            continue;
                        }
                        return Ok(self.error(c"invalid unicode escape code"));
                    }
                    _ => return Ok(self.error(c"invalid escape code")),
                };
                push(tmp, &[e])?;
                self.pos += 2;
                continue;
            }
            // A run of plain bytes at once.
            let run = self.data[self.pos..]
                .iter()
                .position(|&b| matches!(b, b'"' | b'\\' | 0))
                .unwrap_or(self.data.len() - self.pos);
            push(tmp, &self.data[self.pos..self.pos + run])?;
            self.pos += run;
        }
        self.pos += 1;
        Ok(Token {
            tok: Tok::Str,
            index,
        })
    }

    /// `json_append_unicode_escape` at `\u`: false if it is not a valid
    /// escape (a bad digit, a lone or reversed surrogate).
    fn unicode(&mut self, tmp: &mut Vec<u8>) -> Result<bool, Fail> {
        let Some(mut cp) = hex4(self.data, self.pos + 2) else {
            return Ok(false);
        };
        let mut len = 6;
        if cp & 0xf800 == 0xd800 {
            if cp & 0x400 != 0 || self.at(self.pos + 6) != b'\\' || self.at(self.pos + 7) != b'u' {
                return Ok(false);
            }
            let Some(low) = hex4(self.data, self.pos + 8) else {
                return Ok(false);
            };
            if low & 0xfc00 != 0xdc00 {
                return Ok(false);
            }
            cp = (((cp & 0x3ff) << 10) | (low & 0x3ff)) + 0x10000;
            len = 12;
        }
        let mut bytes = [0u8; 4];
        let n = utf8(cp, &mut bytes);
        push(tmp, &bytes[..n])?;
        self.pos += len;
        Ok(true)
    }
}

/// `json_decode_descend`: one level deeper, if the setting and the stack
/// allow.
///
/// # Safety
/// `l` is a running C function's state.
unsafe fn descend(
    l: *mut ffi::lua_State,
    depth: &mut c_int,
    max: c_int,
    slots: c_int,
    at: usize,
) -> Result<(), Fail> {
    *depth += 1;
    if *depth <= max && ffi::lua_checkstack(l, slots) != 0 {
        return Ok(());
    }
    Err(Fail::TooDeep { depth: *depth, at })
}

/// An object's key (the token `tok`, which must be a string) and its
/// colon: pushes the key.
///
/// # Safety
/// `l` is a running C function's state with a free slot.
unsafe fn key(
    l: *mut ffi::lua_State,
    lx: &mut Lexer,
    tmp: &mut Vec<u8>,
    tok: &Token,
) -> Result<(), Fail> {
    if tok.tok != Tok::Str {
        return Err(tok.expected(c"object key string"));
    }
    push_bytes(l, tmp);
    let colon = lx.next(tmp)?;
    if colon.tok != Tok::Colon {
        return Err(colon.expected(c"colon"));
    }
    Ok(())
}

/// Parses the whole text, leaving its value on top of the stack.
///
/// # Safety
/// `l` is a running C function's state; `data` ends with a NUL.
unsafe fn parse(
    l: *mut ffi::lua_State,
    set: &Settings,
    data: &[u8],
    tmp: &mut Vec<u8>,
    open: &mut Vec<Open>,
) -> Result<(), Fail> {
    let mut lx = Lexer {
        data,
        pos: 0,
        invalid_numbers: set.decode_invalid_numbers != 0,
    };
    let mut depth: c_int = 0;
    let mut tok = lx.next(tmp)?;
    'value: loop {
        // `tok` is where a value must be.
        match tok.tok {
            Tok::Str => push_bytes(l, tmp),
            Tok::Num(n) => ffi::lua_pushnumber(l, n),
            Tok::Bool(b) => ffi::lua_pushboolean(l, c_int::from(b)),
            Tok::Null => ffi::lua_pushlightuserdata(l, std::ptr::null_mut()),
            Tok::ObjBegin => {
                // table, key, value
                descend(l, &mut depth, set.decode_max_depth, 3, lx.pos)?;
                ffi::lua_createtable(l, 0, 0);
                tok = lx.next(tmp)?;
                if tok.tok != Tok::ObjEnd {
                    open.push(Open::Object);
                    key(l, &mut lx, tmp, &tok)?;
                    tok = lx.next(tmp)?;
                    continue 'value;
                }
                depth -= 1;
            }
            Tok::ArrBegin => {
                // table, value
                descend(l, &mut depth, set.decode_max_depth, 2, lx.pos)?;
                ffi::lua_createtable(l, 0, 0);
                tok = lx.next(tmp)?;
                if tok.tok != Tok::ArrEnd {
                    open.push(Open::Array(1));
                    continue 'value;
                }
                depth -= 1;
            }
            _ => return Err(tok.expected(c"value")),
        }
        // A whole value is on top: into its table, then what follows it.
        loop {
            match open.last_mut() {
                None => break 'value,
                Some(Open::Object) => {
                    ffi::lua_rawset(l, -3);
                    tok = lx.next(tmp)?;
                    if tok.tok == Tok::ObjEnd {
                        depth -= 1;
                        open.pop();
                        continue;
                    }
                    if tok.tok != Tok::Comma {
                        return Err(tok.expected(c"comma or object end"));
                    }
                    tok = lx.next(tmp)?;
                    key(l, &mut lx, tmp, &tok)?;
                    tok = lx.next(tmp)?;
                    continue 'value;
                }
                Some(Open::Array(i)) => {
                    ffi::lua_rawseti_(l, -2, *i);
                    *i = i.wrapping_add(1);
                    tok = lx.next(tmp)?;
                    if tok.tok == Tok::ArrEnd {
                        depth -= 1;
                        open.pop();
                        continue;
                    }
                    if tok.tok != Tok::Comma {
                        return Err(tok.expected(c"comma or array end"));
                    }
                    tok = lx.next(tmp)?;
                    continue 'value;
                }
            }
        }
    }
    let end = lx.next(tmp)?;
    if end.tok != Tok::End {
        return Err(end.expected(c"the end"));
    }
    Ok(())
}

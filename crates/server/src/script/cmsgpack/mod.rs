//! The `cmsgpack` library of Redis 7.0's script environment — lua-cmsgpack
//! 0.4.0 by Salvatore Sanfilippo (`deps/lua/src/lua_cmsgpack.c`) —
//! reimplemented in Rust: `pack(…)`, `unpack(s)`, `unpack_one(s [, offset])`,
//! `unpack_limit(s, limit [, offset])`, and the strings `_NAME`, `_VERSION`,
//! `_COPYRIGHT`, `_DESCRIPTION`.
//!
//! Hand-written because no maintained crate provides Redis's script
//! libraries for mlua (and a general MessagePack crate makes other choices:
//! this one must pick Redis's encodings byte for byte). Its functions are
//! Lua C functions, as Redis's (see [`clib`](super::clib) for why), so
//! results and error texts are redis-server's, position included.
//!
//! Packing, as Redis's does it: each argument in turn, concatenated.
//! Numbers equal to their `int64_t` conversion are integers, in the
//! smallest of fixnum, 8, 16, 32, 64 bits (unsigned forms for positives);
//! others are a float when the float holds the same value (infinities too),
//! else a double. Strings are raw: fixraw (< 32 bytes), `0xd9` (≤ 255),
//! `0xda`, `0xdb`. A table is an array when its keys are exactly the
//! integers 1..n (`table_is_an_array`; so `{}` is an empty array), else a
//! map in `next` order. Tables nested 16 deep are written as nil (so
//! cycles end), as are functions and other values.
//!
//! Unpacking knows what Redis's knows: fixnums, `0xcc`–`0xd3` integers
//! (64-bit unsigned wrap to negative, as `lua_pushinteger` of them does),
//! `0xca`/`0xcb`, nil, booleans, fixraw, `0xd9`–`0xdb` strings, arrays and
//! maps; anything else (`0xc1`, bin, ext) is "Bad data format in input.",
//! and a value cut short is "Missing bytes in input.". A map's nil or NaN
//! key fails as Lua's `settable` does ("table index is nil"). Declared
//! lengths are never allocated up front: a 4 GB array declared in five
//! bytes fails on the first missing byte.
//!
//! The fixes Redis carries (CVE-2018-11218/11219): the nesting limit above,
//! and a stack check for every value (8000 slots, Lua's limit for a C
//! function): `unpack` of too many values, or nested too deep, is "stack
//! overflow (too many return values at once; use unpack_one or
//! unpack_limit instead.)", and so on, with Redis's texts.

use std::ffi::{c_int, CStr};
use std::mem::ManuallyDrop;

use mlua::{ffi, Lua, Table};

use super::clib::{c_i32, c_i64, check_bytes, push_bytes, set_c_function, stack_overflow};

/// Tables nested this deep are written as nil.
const MAX_NESTING: u32 = 16;

const TOO_MANY: &CStr = c"too many return values at once; use unpack_one or unpack_limit instead.";

// --- Encoding ------------------------------------------------------------

/// Appends the low `n` bytes of `v`, big endian.
fn put_be(out: &mut Vec<u8>, v: u64, n: usize) {
    out.extend_from_slice(&v.to_be_bytes()[8 - n..]);
}

fn put_str(out: &mut Vec<u8>, s: &[u8]) {
    let len = s.len();
    if len < 32 {
        out.push(0xa0 | len as u8);
    } else if len <= 0xff {
        out.extend_from_slice(&[0xd9, len as u8]);
    } else if len <= 0xffff {
        out.push(0xda);
        put_be(out, len as u64, 2);
    } else {
        out.push(0xdb);
        put_be(out, len as u64, 4);
    }
    out.extend_from_slice(s);
}

fn put_int(out: &mut Vec<u8>, n: i64) {
    if n >= 0 {
        match n {
            0..=127 => out.push(n as u8),
            128..=0xff => out.extend_from_slice(&[0xcc, n as u8]),
            0x100..=0xffff => {
                out.push(0xcd);
                put_be(out, n as u64, 2);
            }
            0x1_0000..=0xffff_ffff => {
                out.push(0xce);
                put_be(out, n as u64, 4);
            }
            _ => {
                out.push(0xcf);
                put_be(out, n as u64, 8);
            }
        }
    } else if n >= -32 {
        out.push(n as u8);
    } else if n >= -128 {
        out.extend_from_slice(&[0xd0, n as u8]);
    } else if n >= -32768 {
        out.push(0xd1);
        put_be(out, n as u64, 2);
    } else if n >= -2_147_483_648 {
        out.push(0xd2);
        put_be(out, n as u64, 4);
    } else {
        out.push(0xd3);
        put_be(out, n as u64, 8);
    }
}

/// A Lua number: an integer when it is one (and fits 64 bits), else a
/// float when that loses nothing, else a double.
fn put_number(out: &mut Vec<u8>, d: f64) {
    let i = c_i64(d);
    if !d.is_infinite() && i as f64 == d {
        put_int(out, i);
        return;
    }
    let f = d as f32;
    if f64::from(f) == d {
        out.push(0xca);
        out.extend_from_slice(&f.to_be_bytes());
    } else {
        out.push(0xcb);
        out.extend_from_slice(&d.to_be_bytes());
    }
}

/// An array (0x9n, 0xdc, 0xdd) or map (0x8n, 0xde, 0xdf) header.
fn put_header(out: &mut Vec<u8>, map: bool, n: u64) {
    let (fix, b16, b32) = if map {
        (0x80, 0xde, 0xdf)
    } else {
        (0x90, 0xdc, 0xdd)
    };
    if n <= 15 {
        out.push(fix | n as u8);
    } else if n <= 0xffff {
        out.push(b16);
        put_be(out, n, 2);
    } else {
        out.push(b32);
        put_be(out, n, 4);
    }
}

/// What overflowed the stack, for "stack overflow (…)".
type Overflow = &'static CStr;

/// Appends the value on top of the stack, and pops it.
///
/// # Safety
/// `l` is a running C function's state with a value on top. Raises only
/// on out-of-memory (stack overflows are returned).
unsafe fn encode(l: *mut ffi::lua_State, out: &mut Vec<u8>, level: u32) -> Result<(), Overflow> {
    let mut t = ffi::lua_type(l, -1);
    if t == ffi::LUA_TTABLE && level == MAX_NESTING {
        t = ffi::LUA_TNIL;
    }
    match t {
        ffi::LUA_TSTRING => {
            let mut len = 0usize;
            let p = ffi::lua_tolstring(l, -1, &mut len);
            put_str(out, std::slice::from_raw_parts(p.cast::<u8>(), len));
        }
        ffi::LUA_TBOOLEAN => out.push(if ffi::lua_toboolean(l, -1) != 0 {
            0xc3
        } else {
            0xc2
        }),
        ffi::LUA_TNUMBER => put_number(out, ffi::lua_tonumber(l, -1)),
        ffi::LUA_TTABLE => {
            if is_array(l)? {
                encode_array(l, out, level)?;
            } else {
                encode_map(l, out, level)?;
            }
        }
        _ => out.push(0xc0),
    }
    ffi::lua_pop(l, 1);
    Ok(())
}

/// Whether the table on top of the stack has exactly the keys 1..n.
unsafe fn is_array(l: *mut ffi::lua_State) -> Result<bool, Overflow> {
    if ffi::lua_checkstack(l, 2) == 0 {
        return Err(c"in function table_is_an_array");
    }
    let top = ffi::lua_gettop(l);
    let (mut count, mut max) = (0i32, 0i32);
    ffi::lua_pushnil(l);
    while ffi::lua_next(l, -2) != 0 {
        ffi::lua_pop(l, 1);
        let n = ffi::lua_tonumber(l, -1);
        if ffi::lua_type(l, -1) != ffi::LUA_TNUMBER
            || n <= 0.0
            || n.is_infinite()
            || f64::from(c_i32(n)) != n
        {
            ffi::lua_settop(l, top);
            return Ok(false);
        }
        if n > f64::from(max) {
            max = c_i32(n);
        }
        count = count.wrapping_add(1);
    }
    ffi::lua_settop(l, top);
    Ok(max == count)
}

unsafe fn encode_array(
    l: *mut ffi::lua_State,
    out: &mut Vec<u8>,
    level: u32,
) -> Result<(), Overflow> {
    let len = ffi::lua_objlen(l, -1);
    put_header(out, false, len as u64);
    if ffi::lua_checkstack(l, 1) == 0 {
        return Err(c"in function mp_encode_lua_table_as_array");
    }
    for j in 1..=len {
        ffi::lua_pushnumber(l, j as f64);
        ffi::lua_gettable_(l, -2);
        encode(l, out, level + 1)?;
    }
    Ok(())
}

unsafe fn encode_map(
    l: *mut ffi::lua_State,
    out: &mut Vec<u8>,
    level: u32,
) -> Result<(), Overflow> {
    if ffi::lua_checkstack(l, 3) == 0 {
        return Err(c"in function mp_encode_lua_table_as_map");
    }
    let mut len: u64 = 0;
    ffi::lua_pushnil(l);
    while ffi::lua_next(l, -2) != 0 {
        ffi::lua_pop(l, 1);
        len += 1;
    }
    put_header(out, true, len);
    ffi::lua_pushnil(l);
    while ffi::lua_next(l, -2) != 0 {
        // key value → key value key: the copy and the value are popped
        // as they are written, the key stays for `next`.
        ffi::lua_pushvalue(l, -2);
        encode(l, out, level + 1)?;
        encode(l, out, level + 1)?;
    }
    Ok(())
}

unsafe extern "C-unwind" fn mp_pack(l: *mut ffi::lua_State) -> c_int {
    let nargs = ffi::lua_gettop(l);
    if nargs == 0 {
        return ffi::luaL_argerror(l, 0, c"MessagePack pack needs input.".as_ptr());
    }
    if ffi::lua_checkstack(l, nargs) == 0 {
        return ffi::luaL_argerror(l, 0, c"Too many arguments for MessagePack pack.".as_ptr());
    }
    // Freed by hand before any error raised here (see `clib`).
    let mut out = ManuallyDrop::new(Vec::new());
    for i in 1..=nargs {
        // Each argument's encoding stays on the stack until the end, as
        // in Redis's (the stack checks count them).
        let done = if ffi::lua_checkstack(l, 1) == 0 {
            Err(c"in function mp_check")
        } else {
            ffi::lua_pushvalue(l, i);
            encode(l, &mut out, 0)
        };
        if let Err(what) = done {
            ManuallyDrop::drop(&mut out);
            stack_overflow(l, what);
        }
        push_bytes(l, &out);
        out.clear();
    }
    ManuallyDrop::drop(&mut out);
    ffi::lua_concat(l, nargs);
    1
}

// --- Decoding ------------------------------------------------------------

/// What the table being filled waits for.
#[derive(Clone, Copy, PartialEq)]
enum Want {
    /// Its next item (or its end).
    Next,
    /// The array element being decoded (its index is pushed).
    Element,
    /// The map key being decoded.
    Key,
    /// The map value being decoded (its key is pushed).
    Value,
}

/// A table being filled, on the Lua stack.
struct Open {
    map: bool,
    left: usize,
    index: u64,
    want: Want,
}

enum Fail {
    /// Not enough bytes.
    Eof,
    /// A type byte Redis's cmsgpack does not know.
    Bad,
    /// The stack would pass its limit.
    Stack(Overflow),
    /// A nil or NaN key: `lua_settable` raises the error.
    Index,
}

/// The input, and where decoding is.
struct Cursor<'a> {
    s: &'a [u8],
    at: usize,
}

impl Cursor<'_> {
    fn left(&self) -> usize {
        self.s.len() - self.at
    }

    fn need(&self, n: usize) -> Result<(), Fail> {
        if self.left() < n {
            Err(Fail::Eof)
        } else {
            Ok(())
        }
    }
}

fn be(b: &[u8]) -> u64 {
    b.iter().fold(0, |v, &c| (v << 8) | u64::from(c))
}

/// Decodes the item at the cursor: pushes it (false), or pushes a new
/// table and opens it (true).
unsafe fn item(l: *mut ffi::lua_State, c: &mut Cursor, open: &mut Vec<Open>) -> Result<bool, Fail> {
    c.need(1)?;
    if ffi::lua_checkstack(l, 1) == 0 {
        return Err(Fail::Stack(TOO_MANY));
    }
    let s = c.s;
    let p = &s[c.at..];
    // (bytes taken, table to open: map?, length)
    let (taken, table) = match p[0] {
        0xcc => {
            c.need(2)?;
            ffi::lua_pushinteger(l, i64::from(p[1]));
            (2, None)
        }
        0xd0 => {
            c.need(2)?;
            ffi::lua_pushinteger(l, i64::from(p[1] as i8));
            (2, None)
        }
        0xcd => {
            c.need(3)?;
            ffi::lua_pushinteger(l, be(&p[1..3]) as i64);
            (3, None)
        }
        0xd1 => {
            c.need(3)?;
            ffi::lua_pushinteger(l, i64::from(be(&p[1..3]) as u16 as i16));
            (3, None)
        }
        0xce => {
            c.need(5)?;
            ffi::lua_pushinteger(l, be(&p[1..5]) as i64);
            (5, None)
        }
        0xd2 => {
            c.need(5)?;
            ffi::lua_pushinteger(l, i64::from(be(&p[1..5]) as u32 as i32));
            (5, None)
        }
        0xcf => {
            c.need(9)?;
            ffi::lua_pushinteger(l, be(&p[1..9]) as i64);
            (9, None)
        }
        0xd3 => {
            c.need(9)?;
            ffi::lua_pushnumber(l, be(&p[1..9]) as i64 as f64);
            (9, None)
        }
        0xc0 => {
            ffi::lua_pushnil(l);
            (1, None)
        }
        0xc2 | 0xc3 => {
            ffi::lua_pushboolean(l, c_int::from(p[0] == 0xc3));
            (1, None)
        }
        0xca => {
            c.need(5)?;
            ffi::lua_pushnumber(l, f64::from(f32::from_bits(be(&p[1..5]) as u32)));
            (5, None)
        }
        0xcb => {
            c.need(9)?;
            ffi::lua_pushnumber(l, f64::from_bits(be(&p[1..9])));
            (9, None)
        }
        0xd9..=0xdb => {
            let head = match p[0] {
                0xd9 => 2,
                0xda => 3,
                _ => 5,
            };
            c.need(head)?;
            let len = be(&p[1..head]) as usize;
            c.need(head.saturating_add(len))?;
            push_bytes(l, &p[head..head + len]);
            (head + len, None)
        }
        0xdc | 0xde => {
            c.need(3)?;
            (3, Some((p[0] == 0xde, be(&p[1..3]) as usize)))
        }
        0xdd | 0xdf => {
            c.need(5)?;
            (5, Some((p[0] == 0xdf, be(&p[1..5]) as usize)))
        }
        b if b & 0x80 == 0 => {
            ffi::lua_pushinteger(l, i64::from(b));
            (1, None)
        }
        b if b & 0xe0 == 0xe0 => {
            ffi::lua_pushinteger(l, i64::from(b as i8));
            (1, None)
        }
        b if b & 0xe0 == 0xa0 => {
            let len = usize::from(b & 0x1f);
            c.need(1 + len)?;
            push_bytes(l, &p[1..1 + len]);
            (1 + len, None)
        }
        b if b & 0xf0 == 0x90 => (1, Some((false, usize::from(b & 0xf)))),
        b if b & 0xf0 == 0x80 => (1, Some((true, usize::from(b & 0xf)))),
        _ => return Err(Fail::Bad),
    };
    c.at += taken;
    let Some((map, len)) = table else {
        return Ok(false);
    };
    // Filled as it decodes: nothing is allocated from the declared length.
    ffi::lua_createtable(l, 0, 0);
    if !map && ffi::lua_checkstack(l, 1) == 0 {
        return Err(Fail::Stack(c"in function mp_decode_to_lua_array"));
    }
    open.push(Open {
        map,
        left: len,
        index: 1,
        want: Want::Next,
    });
    Ok(true)
}

/// `t[k] = v` for the table, key and value on top of the stack.
unsafe fn set(l: *mut ffi::lua_State) -> Result<(), Fail> {
    match ffi::lua_type(l, -2) {
        ffi::LUA_TNIL => return Err(Fail::Index),
        ffi::LUA_TNUMBER if ffi::lua_tonumber(l, -2).is_nan() => return Err(Fail::Index),
        _ => {}
    }
    ffi::lua_settable(l, -3);
    Ok(())
}

/// Decodes one value, tables and all, onto the stack. Iterative, so
/// that nesting (up to the stack's limit) costs no Rust stack.
unsafe fn value(l: *mut ffi::lua_State, c: &mut Cursor, open: &mut Vec<Open>) -> Result<(), Fail> {
    let mut opened = item(l, c, open)?;
    loop {
        if !opened {
            // The value on top is complete: give it to its table.
            let Some(top) = open.last_mut() else {
                return Ok(());
            };
            match top.want {
                Want::Key => {
                    top.want = Want::Value;
                    opened = item(l, c, open)?;
                    continue;
                }
                Want::Element | Want::Value => {
                    top.want = Want::Next;
                    set(l)?;
                }
                Want::Next => {}
            }
        }
        let Some(top) = open.last_mut() else {
            return Ok(());
        };
        if top.left == 0 {
            open.pop();
            opened = false;
            continue;
        }
        top.left -= 1;
        if top.map {
            top.want = Want::Key;
        } else {
            ffi::lua_pushnumber(l, top.index as f64);
            top.index += 1;
            top.want = Want::Element;
        }
        opened = item(l, c, open)?;
    }
}

/// Decodes up to `limit` values from `offset` of the string argument 1
/// (`limit` and `offset` 0: all of them, without the next offset).
unsafe fn unpack_full(l: *mut ffi::lua_State, limit: i64, offset: i64) -> c_int {
    let s = check_bytes(l, 1);
    let len = s.len();
    // (Redis's text shows the input's length as the limit.)
    if offset < 0 || limit < 0 {
        return ffi::luaL_error(
            l,
            c"Invalid request to unpack with offset of %d and limit of %d.".as_ptr(),
            offset as c_int,
            len as c_int,
        );
    }
    if offset as u64 > len as u64 {
        return ffi::luaL_error(
            l,
            c"Start offset %d greater than input length %d.".as_ptr(),
            offset as c_int,
            len as c_int,
        );
    }
    let all = limit == 0 && offset == 0;
    let limit = if all { i64::from(i32::MAX) } else { limit };
    let mut c = Cursor {
        s,
        at: offset as usize,
    };
    // Freed by hand before any error raised here (see `clib`).
    let mut open = ManuallyDrop::new(Vec::new());
    let mut count: c_int = 0;
    while c.left() > 0 && i64::from(count) < limit {
        if let Err(fail) = value(l, &mut c, &mut open) {
            ManuallyDrop::drop(&mut open);
            return match fail {
                Fail::Eof => ffi::luaL_error(l, c"Missing bytes in input.".as_ptr()),
                Fail::Bad => ffi::luaL_error(l, c"Bad data format in input.".as_ptr()),
                Fail::Stack(what) => stack_overflow(l, what),
                Fail::Index => {
                    ffi::lua_settable(l, -3);
                    ffi::luaL_error(l, c"table index is invalid".as_ptr())
                }
            };
        }
        count += 1;
    }
    ManuallyDrop::drop(&mut open);
    if !all {
        ffi::luaL_checkstack_(l, 1, c"in function mp_unpack_full".as_ptr());
        let next = if c.left() == 0 { -1 } else { c.at as i64 };
        ffi::lua_pushinteger(l, next);
        // The next offset comes first.
        ffi::lua_insert(l, 2);
        count += 1;
    }
    count
}

unsafe extern "C-unwind" fn mp_unpack(l: *mut ffi::lua_State) -> c_int {
    unpack_full(l, 0, 0)
}

unsafe extern "C-unwind" fn mp_unpack_one(l: *mut ffi::lua_State) -> c_int {
    let offset = ffi::luaL_optinteger(l, 2, 0);
    ffi::lua_pop(l, ffi::lua_gettop(l) - 1);
    unpack_full(l, 1, offset)
}

unsafe extern "C-unwind" fn mp_unpack_limit(l: *mut ffi::lua_State) -> c_int {
    let limit = ffi::luaL_checkinteger(l, 2);
    let offset = ffi::luaL_optinteger(l, 3, 0);
    ffi::lua_pop(l, ffi::lua_gettop(l) - 1);
    unpack_full(l, limit, offset)
}

/// The library's table, as Redis's script environment has it.
pub fn table(lua: &Lua) -> mlua::Result<Table> {
    let t = lua.create_table()?;
    set_c_function(lua, &t, "pack", mp_pack)?;
    set_c_function(lua, &t, "unpack", mp_unpack)?;
    set_c_function(lua, &t, "unpack_one", mp_unpack_one)?;
    set_c_function(lua, &t, "unpack_limit", mp_unpack_limit)?;
    t.raw_set("_NAME", "cmsgpack")?;
    t.raw_set("_VERSION", "lua-cmsgpack 0.4.0")?;
    t.raw_set("_COPYRIGHT", "Copyright (C) 2012, Salvatore Sanfilippo")?;
    t.raw_set("_DESCRIPTION", "MessagePack C implementation for Lua")?;
    Ok(t)
}

#[cfg(test)]
mod tests;

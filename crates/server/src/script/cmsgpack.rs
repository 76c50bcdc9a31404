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
mod tests {
    use super::super::clib::testing::check;

    // Expected texts captured from redis-server 7.0.15 (EVAL of
    // `PRELUDE .. "return show(pcall(function() return EXPR end))"`).
    #[test]
    fn matches_redis() {
        check(&[
            // pack: integers pick the smallest form
            (
                r#"hx(cmsgpack.pack(0, 1, 127, 128, 255, 256, 65535, 65536, 2^32 - 1, 2^32, 2^53, 2^63 - 1024))"#,
                r#"true "00017fcc80ccffcd0100cdffffce00010000ceffffffffcf0000000100000000cf0020000000000000cf7ffffffffffffc00""#,
            ),
            (
                r#"hx(cmsgpack.pack(-1, -32, -33, -128, -129, -32768, -32769, -2^31, -2^31 - 1, -2^53, -2^63))"#,
                r#"true "ffe0d0dfd080d1ff7fd18000d2ffff7fffd280000000d3ffffffff7fffffffd3ffe0000000000000d38000000000000000""#,
            ),
            // pack: non-integers: float when exact, else double; NaN and infinities
            (
                r#"hx(cmsgpack.pack(0.5, 1.5, -2.25, 0.1, 1e300, 2^63, 2^64, 1/0, -1/0, -0.0, 3.4028234663852886e38, 1e-45))"#,
                r#"true "ca3f000000ca3fc00000cac0100000cb3fb999999999999acb7e37e43c8800759cca5f000000ca5f800000ca7f800000caff80000000ca7f7fffffcb3696d601ad376ab9""#,
            ),
            (
                r#"hx(cmsgpack.pack(0/0)), hx(cmsgpack.pack(-(0/0)))"#,
                r#"true "cbfff8000000000000" "cb7ff8000000000000""#,
            ),
            // pack: strings (fixraw, d9, da, db)
            (
                r#"hx(cmsgpack.pack('')), hx(cmsgpack.pack('a')), hx(cmsgpack.pack(string.rep('x', 31)):sub(1, 4)), hx(cmsgpack.pack(string.rep('x', 32)):sub(1, 6)), hx(cmsgpack.pack(string.rep('x', 255)):sub(1, 6)), hx(cmsgpack.pack(string.rep('x', 256)):sub(1, 8)), hx(cmsgpack.pack(string.rep('x', 65535)):sub(1, 8)), hx(cmsgpack.pack(string.rep('x', 65536)):sub(1, 12)), hx(cmsgpack.pack('a\0\255'))"#,
                r#"true "a0" "a161" "bf787878" "d92078787878" "d9ff78787878" "da01007878787878" "daffff7878787878" "db0001000078787878787878" "a36100ff""#,
            ),
            // pack: nil, booleans, other values
            (
                r#"hx(cmsgpack.pack(nil)), hx(cmsgpack.pack(true, false)), hx(cmsgpack.pack(function() end)), hx(cmsgpack.pack(coroutine.create(function() end))), hx(cmsgpack.pack(nil, nil, 1))"#,
                r#"true "c0" "c3c2" "c0" "c0" "c0c001""#,
            ),
            // pack: arrays and maps
            (
                r#"hx(cmsgpack.pack({})), hx(cmsgpack.pack({1, 2, 3})), hx(cmsgpack.pack({'a', {true}, {}})), hx(cmsgpack.pack({1, 2, nil, 4})), hx(cmsgpack.pack({[1] = 1, [3] = 3})), hx(cmsgpack.pack({[2] = 'b', [1] = 'a'})), hx(cmsgpack.pack({a = 1})), hx(cmsgpack.pack({[1.5] = 1})), hx(cmsgpack.pack({[2^31] = 1})), hx(cmsgpack.pack({[-1] = 1})), hx(cmsgpack.pack({[0] = 1})), hx(cmsgpack.pack({[true] = false}))"#,
                r#"true "90" "93010203" "93a16191c390" "83010102020404" "8201010303" "92a161a162" "81a16101" "81ca3fc0000001" "81ce8000000001" "81ff01" "810001" "81c3c2""#,
            ),
            (
                r#"hx(cmsgpack.pack({1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15})), hx(cmsgpack.pack({1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16}):sub(1, 10))"#,
                r#"true "9f0102030405060708090a0b0c0d0e0f" "dc001001020304050607""#,
            ),
            (
                r#"(function() local t = {} for i = 1, 70000 do t[i] = 1 end return hx(cmsgpack.pack(t):sub(1, 7)), #cmsgpack.pack(t) end)()"#,
                r#"true "dd000111700101" 70005"#,
            ),
            (
                r#"(function() local t = {} for i = 1, 16 do t['k' .. i] = i end local s = cmsgpack.pack(t) return hx(s:sub(1, 3)), #s end)()"#,
                r#"true "de0010" 74"#,
            ),
            (
                r#"(function() local t = {} for i = 1, 70000 do t['k' .. i] = i end local s = cmsgpack.pack(t) return hx(s:sub(1, 5)), #s end)()"#,
                r#"true "df00011170" 697447"#,
            ),
            // pack: nesting past 16 levels is nil (cycles end)
            (
                r#"(function() local t = {} t[1] = t return hx(cmsgpack.pack(t)) end)()"#,
                r#"true "91919191919191919191919191919191c0""#,
            ),
            (
                r#"(function() local t = {} t.a = t return hx(cmsgpack.pack(t)) end)()"#,
                r#"true "81a16181a16181a16181a16181a16181a16181a16181a16181a16181a16181a16181a16181a16181a16181a16181a161c0""#,
            ),
            (
                r#"(function() local t = {} t[t] = 1 return hx(cmsgpack.pack(t)) end)()"#,
                r#"true "81818181818181818181818181818181c001010101010101010101010101010101""#,
            ),
            (
                r#"(function() local t = {} local c = t for i = 1, 15 do c[1] = {} c = c[1] end c[1] = 'leaf' return hx(cmsgpack.pack(t)) end)()"#,
                r#"true "91919191919191919191919191919191a46c656166""#,
            ),
            (
                r#"(function() local t = {} local c = t for i = 1, 16 do c[1] = {} c = c[1] end c[1] = 'leaf' return hx(cmsgpack.pack(t)) end)()"#,
                r#"true "91919191919191919191919191919191c0""#,
            ),
            (
                r#"(function() local t = {x = {}} local c = t.x for i = 1, 20 do c.x = {} c = c.x end return hx(cmsgpack.pack(t)) end)()"#,
                r#"true "81a17881a17881a17881a17881a17881a17881a17881a17881a17881a17881a17881a17881a17881a17881a17881a178c0""#,
            ),
            // pack: errors and limits
            (
                r#"cmsgpack.pack()"#,
                r#"false "user_script:1: bad argument #0 to 'pack' (MessagePack pack needs input.)""#,
            ),
            (
                r#"(function() local t = {} for i = 1, 4000 do t[i] = i end return #cmsgpack.pack(unpack(t)) end)()"#,
                r#"true 11618"#,
            ),
            (
                r#"(function() local t = {} for i = 1, 4001 do t[i] = i end return #cmsgpack.pack(unpack(t)) end)()"#,
                r#"false "user_script:1: bad argument #0 to 'pack' (Too many arguments for MessagePack pack.)""#,
            ),
            (
                r#"(function() local t = {} for i = 1, 3999 do t[i] = i end t[4000] = {a = 1} return #cmsgpack.pack(unpack(t)) end)()"#,
                r#"false "user_script:1: stack overflow (in function table_is_an_array)""#,
            ),
            (
                r#"(function() local t = {} for i = 1, 3998 do t[i] = i end t[3999] = {a = {b = 1}} return #cmsgpack.pack(unpack(t)) end)()"#,
                r#"false "user_script:1: stack overflow (in function mp_encode_lua_table_as_map)""#,
            ),
            (
                r#"(function() local t = {} for i = 1, 3998 do t[i] = i end t[3999] = {{1}} return #cmsgpack.pack(unpack(t)) end)()"#,
                r#"false "user_script:1: stack overflow (in function table_is_an_array)""#,
            ),
            (
                r#"(function() local t = {} for i = 1, 3999 do t[i] = i end t[3999] = {{1}} return #cmsgpack.pack(unpack(t)) end)()"#,
                r#"false "user_script:1: stack overflow (in function table_is_an_array)""#,
            ),
            (
                r#"cmsgpack:pack()"#,
                r#"true "\136\172_DESCRIPTION\217$MessagePack C implementation for Lua\164pack\192\165_NAME\168cmsgpack\166unpack\192\170_COPYRIGHT\217(Copyright (C) 2012, Salvatore Sanfilippo\168_VERSION\178lua-cmsgpack 0.4.0\170unpack_one\192\172unpack_limit\192""#,
            ),
            // unpack: every type
            (
                r#"cmsgpack.unpack('\0\1\127\204\128\204\255\205\1\0\205\255\255\206\0\1\0\0\206\255\255\255\255\207\0\0\0\1\0\0\0\0\207\255\255\255\255\255\255\255\255')"#,
                r#"true 0 1 127 128 255 256 65535 65536 4294967295 4294967296 -1"#,
            ),
            (
                r#"cmsgpack.unpack('\255\224\208\128\208\255\209\128\0\209\255\254\210\128\0\0\0\210\255\255\255\253\211\128\0\0\0\0\0\0\0\211\255\255\255\255\255\255\255\252')"#,
                r#"true -1 -32 -128 -1 -32768 -2 -2147483648 -3 -9.2233720368547758e+18 -4"#,
            ),
            (
                r#"cmsgpack.unpack('\202\63\192\0\0\203\63\185\153\153\153\153\153\154\202\127\128\0\0\203\255\248\0\0\0\0\0\0')"#,
                r#"true 1.5 0.10000000000000001 inf -nan"#,
            ),
            (
                r#"cmsgpack.unpack('\192\195\194\160\161a\217\3abc\218\0\2de\219\0\0\0\1f')"#,
                r#"true nil true false "" "a" "abc" "de" "f""#,
            ),
            (
                r#"cmsgpack.unpack('\144\145\1\147\1\2\3\220\0\2\1\2\221\0\0\0\1\7\128\129\1\2\129\161a\161b\222\0\1\1\2\223\0\0\0\1\3\4')"#,
                r#"true {} {1=1} {1=1,2=2,3=3} {1=1,2=2} {1=7} {} {1=2} {"a"="b"} {1=2} {3=4}"#,
            ),
            (
                r#"cmsgpack.unpack('\130\1\2\1\3'), cmsgpack.unpack('\129\144\1')"#,
                r#"true {1=3} {{}=1}"#,
            ),
            (
                r#"cmsgpack.unpack(cmsgpack.pack({1.5, -3, 'x', true, false, {k = {}}}))"#,
                r#"true {1=1.5,2=-3,3="x",4=true,5=false,6={"k"={}}}"#,
            ),
            (
                r#"cmsgpack.unpack(cmsgpack.pack(1, 'two', {3}))"#,
                r#"true 1 "two" {1=3}"#,
            ),
            (
                r#"cmsgpack.unpack(''), cmsgpack.unpack(12)"#,
                r#"true nil 49 50"#,
            ),
            (r#"cmsgpack.unpack('\1', '\2', '\3')"#, r#"true 1"#),
            // unpack: errors
            (
                r#"cmsgpack.unpack('\196\1a')"#,
                r#"false "user_script:1: Bad data format in input.""#,
            ),
            (
                r#"cmsgpack.unpack('\193')"#,
                r#"false "user_script:1: Bad data format in input.""#,
            ),
            (
                r#"cmsgpack.unpack('\199\1\1a')"#,
                r#"false "user_script:1: Bad data format in input.""#,
            ),
            (
                r#"cmsgpack.unpack('\212\1\1')"#,
                r#"false "user_script:1: Bad data format in input.""#,
            ),
            (
                r#"cmsgpack.unpack('\1\193')"#,
                r#"false "user_script:1: Bad data format in input.""#,
            ),
            (
                r#"cmsgpack.unpack('\204')"#,
                r#"false "user_script:1: Missing bytes in input.""#,
            ),
            (
                r#"cmsgpack.unpack('\207\1\2\3')"#,
                r#"false "user_script:1: Missing bytes in input.""#,
            ),
            (
                r#"cmsgpack.unpack('\217\5abc')"#,
                r#"false "user_script:1: Missing bytes in input.""#,
            ),
            (
                r#"cmsgpack.unpack('\219\255\255\255\255abc')"#,
                r#"false "user_script:1: Missing bytes in input.""#,
            ),
            (
                r#"cmsgpack.unpack('\221\255\255\255\255')"#,
                r#"false "user_script:1: Missing bytes in input.""#,
            ),
            (
                r#"cmsgpack.unpack('\221\255\255\255\255\1\2')"#,
                r#"false "user_script:1: Missing bytes in input.""#,
            ),
            (
                r#"cmsgpack.unpack('\223\255\255\255\255\1')"#,
                r#"false "user_script:1: Missing bytes in input.""#,
            ),
            (
                r#"cmsgpack.unpack('\147\1')"#,
                r#"false "user_script:1: Missing bytes in input.""#,
            ),
            (
                r#"cmsgpack.unpack('\129\1')"#,
                r#"false "user_script:1: Missing bytes in input.""#,
            ),
            (
                r#"cmsgpack.unpack('\147\1\193')"#,
                r#"false "user_script:1: Bad data format in input.""#,
            ),
            (
                r#"cmsgpack.unpack('\129\192\1')"#,
                r#"false "table index is nil""#,
            ),
            (
                r#"cmsgpack.unpack('\129\192')"#,
                r#"false "user_script:1: Missing bytes in input.""#,
            ),
            (
                r#"cmsgpack.unpack('\129\203\127\248\0\0\0\0\0\0\1')"#,
                r#"false "table index is NaN""#,
            ),
            (
                r#"cmsgpack.unpack('\130\1\1\192\1')"#,
                r#"false "table index is nil""#,
            ),
            (
                r#"cmsgpack.unpack({})"#,
                r#"false "user_script:1: bad argument #1 to 'unpack' (string expected, got table)""#,
            ),
            (
                r#"cmsgpack.unpack()"#,
                r#"false "user_script:1: bad argument #1 to 'unpack' (string expected, got no value)""#,
            ),
            // unpack: stack limits (8000 slots for the C function)
            (
                r#"#{cmsgpack.unpack(string.rep('\1', 7999))}"#,
                r#"true 7999"#,
            ),
            (
                r#"cmsgpack.unpack(string.rep('\1', 8000))"#,
                r#"false "user_script:1: stack overflow (too many return values at once; use unpack_one or unpack_limit instead.)""#,
            ),
            (
                r#"#{cmsgpack.unpack(string.rep('\1', 7998), 1)}"#,
                r#"true 7998"#,
            ),
            (
                r#"cmsgpack.unpack(string.rep('\1', 7999), 1)"#,
                r#"false "user_script:1: stack overflow (too many return values at once; use unpack_one or unpack_limit instead.)""#,
            ),
            (
                r#"#{cmsgpack.unpack(string.rep('\161a', 7999))}"#,
                r#"true 7999"#,
            ),
            (
                r#"#{cmsgpack.unpack(string.rep('\145', 3998) .. '\1')}"#,
                r#"true 1"#,
            ),
            (
                r#"#{cmsgpack.unpack(string.rep('\145', 3999) .. '\1')}"#,
                r#"true 1"#,
            ),
            (
                r#"cmsgpack.unpack(string.rep('\145', 4000) .. '\1')"#,
                r#"false "user_script:1: stack overflow (in function mp_decode_to_lua_array)""#,
            ),
            (
                r#"cmsgpack.unpack(string.rep('\129', 7998) .. '\1\1')"#,
                r#"false "user_script:1: stack overflow (too many return values at once; use unpack_one or unpack_limit instead.)""#,
            ),
            (
                r#"#{cmsgpack.unpack(string.rep('\129\1', 3998) .. '\1')}"#,
                r#"true 1"#,
            ),
            (
                r#"type(cmsgpack.unpack(string.rep('\129\1', 3999) .. '\1'))"#,
                r#"true "table""#,
            ),
            (
                r#"cmsgpack.unpack(string.rep('\129\1', 4000) .. '\1')"#,
                r#"false "user_script:1: stack overflow (too many return values at once; use unpack_one or unpack_limit instead.)""#,
            ),
            (
                r#"(function() local t = cmsgpack.unpack(string.rep('\145', 3000) .. '\7') for i = 1, 3000 do t = t[1] end return t end)()"#,
                r#"true 7"#,
            ),
            // unpack_one and unpack_limit: the next offset first (-1 at the end)
            (
                r#"cmsgpack.unpack_one('\1\2\3'), cmsgpack.unpack_one('\1\2\3', 2), cmsgpack.unpack_one('\1\2\3', 3), cmsgpack.unpack_one('\1\2\3', 1.9), cmsgpack.unpack_one('\1\2\3', '1'), cmsgpack.unpack_one('\1\2\3', nil)"#,
                r#"true 1 -1 -1 2 2 1 1"#,
            ),
            (
                r#"cmsgpack.unpack_one(''), cmsgpack.unpack_one('\1', 1)"#,
                r#"true -1 -1"#,
            ),
            (
                r#"cmsgpack.unpack_one('\147\1\2\3\4'), cmsgpack.unpack_one('\147\1\2\3\4', 4)"#,
                r#"true 4 -1 4"#,
            ),
            (
                r#"cmsgpack.unpack_limit('\1\2\3', 0, 0), cmsgpack.unpack_limit('\1\2\3', 0)"#,
                r#"true 1 1 2 3"#,
            ),
            (
                r#"cmsgpack.unpack_limit('\1\2\3', 2), cmsgpack.unpack_limit('\1\2\3', 2, 1), cmsgpack.unpack_limit('\1\2\3', 0, 1), cmsgpack.unpack_limit('\1\2\3', 5), cmsgpack.unpack_limit('\1\2\3', 2^32 + 1, 0), cmsgpack.unpack_limit('\1\2\3', 1, 3)"#,
                r#"true 2 -1 1 -1 -1 -1"#,
            ),
            (
                r#"cmsgpack.unpack_one('\1\2\3', 4)"#,
                r#"false "user_script:1: Start offset 4 greater than input length 3.""#,
            ),
            (
                r#"cmsgpack.unpack_one('\1\2\3', -1)"#,
                r#"false "user_script:1: Invalid request to unpack with offset of -1 and limit of 3.""#,
            ),
            (
                r#"cmsgpack.unpack_one('\1\2\3', 'x')"#,
                r#"false "user_script:1: bad argument #2 to 'unpack_one' (number expected, got string)""#,
            ),
            (
                r#"cmsgpack.unpack_one('\1\2\3', 2^40)"#,
                r#"false "user_script:1: Start offset 0 greater than input length 3.""#,
            ),
            (
                r#"cmsgpack.unpack_one('\1\2\3', 2^40 + 5)"#,
                r#"false "user_script:1: Start offset 5 greater than input length 3.""#,
            ),
            (
                r#"cmsgpack.unpack_one()"#,
                r#"false "user_script:1: bad argument #1 to 'unpack_one' (string expected, got no value)""#,
            ),
            (
                r#"cmsgpack.unpack_one({}, 1)"#,
                r#"false "user_script:1: bad argument #1 to 'unpack_one' (string expected, got table)""#,
            ),
            (
                r#"cmsgpack.unpack_one('\1\193', 1)"#,
                r#"false "user_script:1: Bad data format in input.""#,
            ),
            (
                r#"cmsgpack.unpack_one('\1\204', 1)"#,
                r#"false "user_script:1: Missing bytes in input.""#,
            ),
            (
                r#"cmsgpack.unpack_limit('\1\2\3')"#,
                r#"false "user_script:1: bad argument #2 to 'unpack_limit' (number expected, got no value)""#,
            ),
            (
                r#"cmsgpack.unpack_limit('\1\2\3', 'x')"#,
                r#"false "user_script:1: bad argument #2 to 'unpack_limit' (number expected, got string)""#,
            ),
            (
                r#"cmsgpack.unpack_limit('\1\2\3', -1, 1)"#,
                r#"false "user_script:1: Invalid request to unpack with offset of 1 and limit of 3.""#,
            ),
            (
                r#"cmsgpack.unpack_limit('\1\2\3', 1, -1)"#,
                r#"false "user_script:1: Invalid request to unpack with offset of -1 and limit of 3.""#,
            ),
            (
                r#"cmsgpack.unpack_limit('\1\2\3', 1, 4)"#,
                r#"false "user_script:1: Start offset 4 greater than input length 3.""#,
            ),
            (
                r#"cmsgpack.unpack_limit('\1\2\3', 5, 2^40)"#,
                r#"false "user_script:1: Start offset 0 greater than input length 3.""#,
            ),
            (
                r#"cmsgpack.unpack_limit('\1\2\3', -2^33, 1)"#,
                r#"false "user_script:1: Invalid request to unpack with offset of 1 and limit of 3.""#,
            ),
            (
                r#"cmsgpack.unpack_limit(nil, 1)"#,
                r#"false "user_script:1: bad argument #1 to 'unpack_limit' (string expected, got nil)""#,
            ),
            (
                r#"#{cmsgpack.unpack_limit(string.rep('\1', 8000), 7998)}"#,
                r#"true 7999"#,
            ),
            (
                r#"cmsgpack.unpack_limit(string.rep('\1', 8000), 7999)"#,
                r#"false "user_script:1: stack overflow (in function mp_unpack_full)""#,
            ),
            // metadata
            (
                r#"cmsgpack._NAME, cmsgpack._VERSION, cmsgpack._COPYRIGHT, cmsgpack._DESCRIPTION"#,
                r#"true "cmsgpack" "lua-cmsgpack 0.4.0" "Copyright (C) 2012, Salvatore Sanfilippo" "MessagePack C implementation for Lua""#,
            ),
        ]);
    }
}

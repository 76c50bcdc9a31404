//! `cjson.encode(value)`, as lua-cjson 2.1.0 writes JSON: strings with
//! `"`, `\`, `/` and control characters escaped (`\u00XX` but for `\b`,
//! `\t`, `\n`, `\f`, `\r`, and DEL as `\u007f`), other bytes as they are;
//! numbers with `%.{precision}g` (NaN and infinities refused, written, or
//! written as `null`, as set); `nil` and `cjson.null` as `null`; a table
//! as an array when every key is a positive integer — `[…]` up to its
//! largest key, holes as `null`, unless it is excessively sparse (largest
//! key past `safe` and more than `ratio` times the number of keys: an
//! error, or an object when `convert` is set) — else as an object in
//! `next` order with number keys written as strings. Tables nested past
//! the depth setting, or past the Lua stack (3 free slots needed per
//! table), are refused.
//!
//! The walk keeps on the Lua stack what lua-cjson's recursion keeps (each
//! open array's current element, each open object's key and value), so its
//! stack checks fail where Redis's fail; the open tables' positions are
//! in [`Frame`]s.

use std::ffi::{c_int, CStr};

use mlua::ffi;

use super::super::clib::{c_i32, push_bytes};
use super::{fetch_config, raise, room_left, Fail, Settings};

/// An open table.
pub(super) enum Frame {
    /// An array of `len` elements, `done` written.
    Array { len: c_int, done: c_int },
    /// An object; its current key is on the stack.
    Object { first: bool },
}

/// `cjson.encode(value)`.
pub(super) unsafe extern "C-unwind" fn encode(l: *mut ffi::lua_State) -> c_int {
    let cfg = &mut *fetch_config(l);
    if ffi::lua_gettop(l) != 1 {
        ffi::luaL_argerror(l, 1, c"expected 1 argument".as_ptr());
    }
    let limit = room_left(l, cfg.limit);
    cfg.buf.clear();
    cfg.encoding.clear();
    let walked = walk(l, &cfg.set, &mut cfg.buf, &mut cfg.encoding, limit);
    if let Err(f) = walked {
        cfg.trim();
        raise(l, f);
    }
    // `limit` kept the output within what the state can hold; a memory
    // error here leaves the buffer with the settings (freed later).
    push_bytes(l, &cfg.buf);
    cfg.trim();
    1
}

/// Writes the value on top of the stack (and pops it).
///
/// # Safety
/// `l` is a running C function's state with the value on top.
unsafe fn walk(
    l: *mut ffi::lua_State,
    set: &Settings,
    out: &mut Vec<u8>,
    frames: &mut Vec<Frame>,
    limit: usize,
) -> Result<(), Fail> {
    'value: loop {
        // The value to write is on top of the stack.
        match ffi::lua_type(l, -1) {
            ffi::LUA_TSTRING => {
                let mut len = 0usize;
                let p = ffi::lua_tolstring(l, -1, &mut len);
                string(out, std::slice::from_raw_parts(p.cast::<u8>(), len), limit)?;
                ffi::lua_pop(l, 1);
            }
            ffi::LUA_TNUMBER => {
                number(out, set, ffi::lua_tonumber(l, -1), limit)?;
                ffi::lua_pop(l, 1);
            }
            ffi::LUA_TBOOLEAN => {
                let text: &[u8] = if ffi::lua_toboolean(l, -1) != 0 {
                    b"true"
                } else {
                    b"false"
                };
                put(out, text, limit)?;
                ffi::lua_pop(l, 1);
            }
            ffi::LUA_TNIL => {
                put(out, b"null", limit)?;
                ffi::lua_pop(l, 1);
            }
            ffi::LUA_TLIGHTUSERDATA if ffi::lua_touserdata(l, -1).is_null() => {
                put(out, b"null", limit)?;
                ffi::lua_pop(l, 1);
            }
            ffi::LUA_TTABLE => {
                let depth = frames.len() as c_int + 1;
                if !(depth <= set.encode_max_depth && ffi::lua_checkstack(l, 3) != 0) {
                    return Err(Fail::Nesting(depth));
                }
                let len = array_length(l, set)?;
                if len > 0 {
                    put(out, b"[", limit)?;
                    frames.push(Frame::Array { len, done: 0 });
                } else {
                    put(out, b"{", limit)?;
                    ffi::lua_pushnil(l);
                    frames.push(Frame::Object { first: true });
                }
            }
            t => return Err(Fail::Serialise(t, c"type not supported")),
        }
        // The next value to write, or the end of open tables.
        loop {
            let Some(frame) = frames.last_mut() else {
                return Ok(());
            };
            match frame {
                Frame::Array { len, done } => {
                    if *done == *len {
                        put(out, b"]", limit)?;
                        frames.pop();
                        ffi::lua_pop(l, 1);
                        continue;
                    }
                    if *done > 0 {
                        put(out, b",", limit)?;
                    }
                    *done += 1;
                    ffi::lua_rawgeti_(l, -1, *done);
                    continue 'value;
                }
                Frame::Object { first } => {
                    // table, key
                    if ffi::lua_next(l, -2) == 0 {
                        put(out, b"}", limit)?;
                        frames.pop();
                        ffi::lua_pop(l, 1);
                        continue;
                    }
                    // table, key, value
                    if !*first {
                        put(out, b",", limit)?;
                    }
                    *first = false;
                    match ffi::lua_type(l, -2) {
                        ffi::LUA_TNUMBER => {
                            put(out, b"\"", limit)?;
                            number(out, set, ffi::lua_tonumber(l, -2), limit)?;
                            put(out, b"\":", limit)?;
                        }
                        ffi::LUA_TSTRING => {
                            let mut len = 0usize;
                            let p = ffi::lua_tolstring(l, -2, &mut len);
                            string(out, std::slice::from_raw_parts(p.cast::<u8>(), len), limit)?;
                            put(out, b":", limit)?;
                        }
                        t => {
                            return Err(Fail::Serialise(t, c"table key must be a number or string"))
                        }
                    }
                    continue 'value;
                }
            }
        }
    }
}

/// `lua_array_length`: the table on top's array length (its largest key),
/// or -1 for an object.
///
/// # Safety
/// `l` is a running C function's state with the table on top and 2 free
/// slots.
unsafe fn array_length(l: *mut ffi::lua_State, set: &Settings) -> Result<c_int, Fail> {
    let mut max: c_int = 0;
    let mut items: c_int = 0;
    ffi::lua_pushnil(l);
    while ffi::lua_next(l, -2) != 0 {
        if ffi::lua_type(l, -2) == ffi::LUA_TNUMBER {
            let k = ffi::lua_tonumber(l, -2);
            if k != 0.0 && k.floor() == k && k >= 1.0 {
                if k > f64::from(max) {
                    // C's `max = k`: past INT_MAX this is INT_MIN, so a
                    // table whose largest key is 2^31 or more (seen last)
                    // is written as an object.
                    max = c_i32(k);
                }
                items = items.wrapping_add(1);
                ffi::lua_pop(l, 1);
                continue;
            }
        }
        ffi::lua_pop(l, 2);
        return Ok(-1);
    }
    // C's int arithmetic, overflow included.
    if set.sparse_ratio > 0 && max > items.wrapping_mul(set.sparse_ratio) && max > set.sparse_safe {
        if set.sparse_convert == 0 {
            return Err(Fail::Serialise(
                ffi::LUA_TTABLE,
                c"excessively sparse array",
            ));
        }
        return Ok(-1);
    }
    Ok(max)
}

/// Makes room for `n` more bytes, never past `limit` in all; fails rather
/// than abort when Rust memory runs out.
fn reserve(out: &mut Vec<u8>, n: usize, limit: usize) -> Result<(), Fail> {
    let need = out.len().checked_add(n).ok_or(Fail::Memory)?;
    if need > limit {
        return Err(Fail::Memory);
    }
    if need > out.capacity() {
        let want = out
            .capacity()
            .saturating_mul(2)
            .clamp(need, limit.max(need));
        out.try_reserve_exact(want - out.len())
            .map_err(|_| Fail::Memory)?;
    }
    Ok(())
}

fn put(out: &mut Vec<u8>, bytes: &[u8], limit: usize) -> Result<(), Fail> {
    reserve(out, bytes.len(), limit)?;
    out.extend_from_slice(bytes);
    Ok(())
}

/// lua-cjson's escape of byte `c`, if it has one.
fn escape(c: u8) -> Option<&'static [u8]> {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    const CONTROL: [[u8; 6]; 32] = {
        let mut t = [[0u8; 6]; 32];
        let mut i = 0;
        while i < 32 {
            t[i] = [b'\\', b'u', b'0', b'0', HEX[i >> 4], HEX[i & 15]];
            i += 1;
        }
        t
    };
    Some(match c {
        b'\x08' => b"\\b",
        b'\t' => b"\\t",
        b'\n' => b"\\n",
        b'\x0c' => b"\\f",
        b'\r' => b"\\r",
        0..=0x1f => &CONTROL[c as usize],
        b'"' => b"\\\"",
        b'\\' => b"\\\\",
        b'/' => b"\\/",
        0x7f => b"\\u007f",
        _ => return None,
    })
}

/// Writes `s` as a JSON string: measured first, then written into room
/// made for exactly that.
fn string(out: &mut Vec<u8>, s: &[u8], limit: usize) -> Result<(), Fail> {
    let escaped = s
        .iter()
        .map(|&c| escape(c).map_or(1, <[u8]>::len))
        .fold(2usize, usize::saturating_add);
    reserve(out, escaped, limit)?;
    out.push(b'"');
    let mut plain = 0;
    for (i, &c) in s.iter().enumerate() {
        if let Some(e) = escape(c) {
            out.extend_from_slice(&s[plain..i]);
            out.extend_from_slice(e);
            plain = i + 1;
        }
    }
    out.extend_from_slice(&s[plain..]);
    out.push(b'"');
    Ok(())
}

/// Writes a number as lua-cjson does with these settings.
fn number(out: &mut Vec<u8>, set: &Settings, n: f64, limit: usize) -> Result<(), Fail> {
    match set.encode_invalid_numbers {
        0 if !n.is_finite() => {
            return Err(Fail::Serialise(ffi::LUA_TNUMBER, c"must not be NaN or Inf"))
        }
        // Written by printf but for NaN, which might come out as "-nan".
        1 if n.is_nan() => return put(out, b"nan", limit),
        0 | 1 => {}
        _ if !n.is_finite() => return put(out, b"null", limit),
        _ => {}
    }
    let mut buf = [0u8; 32];
    let len = fmt_g(&mut buf, n, set.encode_number_precision);
    put(out, &buf[..len], limit)
}

/// C's `%.{precision}g` (the C library's own, as lua-cjson's `fpconv`
/// calls it with a `.` decimal point) into `buf`; its length.
pub(super) fn fmt_g(buf: &mut [u8; 32], n: f64, precision: c_int) -> usize {
    const FORMAT: &CStr = c"%.*g";
    // SAFETY: snprintf writes at most `buf.len()` bytes, NUL included;
    // `%.14g` of a double takes at most 24.
    let len = unsafe {
        libc::snprintf(
            buf.as_mut_ptr().cast(),
            buf.len(),
            FORMAT.as_ptr(),
            precision,
            n,
        )
    };
    (len.max(0) as usize).min(buf.len() - 1)
}

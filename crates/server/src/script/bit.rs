//! The `bit` library of Redis 7.0's script environment — LuaBitOp 1.0.2
//! (Mike Pall; `deps/lua/src/lua_bit.c`) — reimplemented in Rust: `tobit`,
//! `bnot`, `band`, `bor`, `bxor`, `lshift`, `rshift`, `arshift`, `rol`,
//! `ror`, `bswap`, `tohex`.
//!
//! Hand-written because no maintained crate provides Redis's script
//! libraries for mlua. Its functions are Lua C functions, as Redis's (see
//! [`clib`](super::clib) for why), so results and error texts are
//! redis-server's, position included.
//!
//! Numbers become 32-bit integers as LuaBitOp makes them: `lua_tonumber`
//! (strings such as `"0x10"` convert), then the low 32 bits of the double
//! after adding 2^52+2^51 (rounding half to even, modulo 2^32); results are
//! signed. Anything else is "number expected, got …". `band`/`bor`/`bxor`
//! read their first argument, then the others from the last back, so the
//! error names the last bad one.
//!
//! `tohex(x, n)`: `n` digits (default 8, at most 8), upper case when `n` is
//! negative. With the fix Redis carries for CVE-2024-31449 (Redis 7.2.6
//! and later; 7.0.15 itself has a buffer overflow there): an `n` of
//! -2^31, whose negation overflows, counts as -(2^31-1), so 8 upper-case
//! digits.

use std::ffi::c_int;

use mlua::{ffi, Lua, Table};

use super::clib::set_c_function;

/// LuaBitOp's conversion of a Lua number to 32 bits.
fn tobit(n: f64) -> u32 {
    (n + 6_755_399_441_055_744.0).to_bits() as u32
}

/// The `n` hex digits of `b`, as `tohex` writes them.
fn tohex(mut b: u32, n: i32) -> ([u8; 8], usize) {
    let n = n.max(i32::MIN + 1); // CVE-2024-31449
    let (digits, n) = if n < 0 {
        (b"0123456789ABCDEF", -n)
    } else {
        (b"0123456789abcdef", n)
    };
    let n = n.min(8) as usize;
    let mut out = [0u8; 8];
    for slot in out[..n].iter_mut().rev() {
        *slot = digits[(b & 15) as usize];
        b >>= 4;
    }
    (out, n)
}

/// Argument `idx` as 32 bits (LuaBitOp's `barg`).
unsafe fn barg(l: *mut ffi::lua_State, idx: c_int) -> u32 {
    let b = tobit(ffi::lua_tonumber(l, idx));
    if b == 0 && ffi::lua_isnumber(l, idx) == 0 {
        ffi::luaL_typerror(l, idx, c"number".as_ptr());
    }
    b
}

/// Returns `b` as a signed 32-bit number.
unsafe fn ret(l: *mut ffi::lua_State, b: u32) -> c_int {
    ffi::lua_pushnumber(l, f64::from(b as i32));
    1
}

unsafe extern "C-unwind" fn bit_tobit(l: *mut ffi::lua_State) -> c_int {
    ret(l, barg(l, 1))
}

unsafe extern "C-unwind" fn bit_bnot(l: *mut ffi::lua_State) -> c_int {
    ret(l, !barg(l, 1))
}

/// The first argument folded with the others, from the last back.
unsafe fn fold(l: *mut ffi::lua_State, op: fn(u32, u32) -> u32) -> c_int {
    let mut b = barg(l, 1);
    let mut i = ffi::lua_gettop(l);
    while i > 1 {
        b = op(b, barg(l, i));
        i -= 1;
    }
    ret(l, b)
}

unsafe extern "C-unwind" fn bit_band(l: *mut ffi::lua_State) -> c_int {
    fold(l, |a, b| a & b)
}

unsafe extern "C-unwind" fn bit_bor(l: *mut ffi::lua_State) -> c_int {
    fold(l, |a, b| a | b)
}

unsafe extern "C-unwind" fn bit_bxor(l: *mut ffi::lua_State) -> c_int {
    fold(l, |a, b| a ^ b)
}

/// `op(x, n)` with the count taken modulo 32.
unsafe fn shift(l: *mut ffi::lua_State, op: fn(u32, u32) -> u32) -> c_int {
    let b = barg(l, 1);
    let n = barg(l, 2) & 31;
    ret(l, op(b, n))
}

unsafe extern "C-unwind" fn bit_lshift(l: *mut ffi::lua_State) -> c_int {
    shift(l, |b, n| b << n)
}

unsafe extern "C-unwind" fn bit_rshift(l: *mut ffi::lua_State) -> c_int {
    shift(l, |b, n| b >> n)
}

unsafe extern "C-unwind" fn bit_arshift(l: *mut ffi::lua_State) -> c_int {
    shift(l, |b, n| ((b as i32) >> n) as u32)
}

unsafe extern "C-unwind" fn bit_rol(l: *mut ffi::lua_State) -> c_int {
    shift(l, u32::rotate_left)
}

unsafe extern "C-unwind" fn bit_ror(l: *mut ffi::lua_State) -> c_int {
    shift(l, u32::rotate_right)
}

unsafe extern "C-unwind" fn bit_bswap(l: *mut ffi::lua_State) -> c_int {
    ret(l, barg(l, 1).swap_bytes())
}

unsafe extern "C-unwind" fn bit_tohex(l: *mut ffi::lua_State) -> c_int {
    let b = barg(l, 1);
    let n = if ffi::lua_isnone(l, 2) != 0 {
        8
    } else {
        barg(l, 2) as i32
    };
    let (digits, len) = tohex(b, n);
    ffi::lua_pushlstring_(l, digits.as_ptr().cast(), len);
    1
}

const FUNCS: [(&str, ffi::lua_CFunction); 12] = [
    ("tobit", bit_tobit),
    ("bnot", bit_bnot),
    ("band", bit_band),
    ("bor", bit_bor),
    ("bxor", bit_bxor),
    ("lshift", bit_lshift),
    ("rshift", bit_rshift),
    ("arshift", bit_arshift),
    ("rol", bit_rol),
    ("ror", bit_ror),
    ("bswap", bit_bswap),
    ("tohex", bit_tohex),
];

/// The library's table, as Redis's script environment has it.
pub fn table(lua: &Lua) -> mlua::Result<Table> {
    let t = lua.create_table()?;
    for (name, f) in FUNCS {
        set_c_function(lua, &t, name, f)?;
    }
    Ok(t)
}

#[cfg(test)]
mod tests {
    use super::super::clib::testing::check;

    // Expected texts captured from redis-server 7.0.15 (EVAL of
    // `PRELUDE .. "return show(pcall(function() return EXPR end))"`), but
    // for the CVE-2024-31449 case, which crashes 7.0.15 (answer of 7.2.6+).
    #[test]
    fn matches_redis() {
        check(&[
            // tobit: the double-add trick (round half to even, modulo 2^32), strings converted
            (
                r#"bit.tobit(0xffffffff), bit.tobit(2^32 + 7), bit.tobit(-1), bit.tobit(2^52 + 5.5), bit.tobit(-1.5), bit.tobit(2.5), bit.tobit(3.5)"#,
                r#"true -1 7 -1 3 -2 2 4"#,
            ),
            (
                r#"bit.tobit(0/0), bit.tobit(1/0), bit.tobit(-1/0), bit.tobit(2^31), bit.tobit(2^31 + 0.5), bit.tobit(-2^31 - 0.5), bit.tobit(2^51 + 0.5), bit.tobit(1e300)"#,
                r#"true 0 0 0 -2147483648 -2147483648 -2147483648 0 -2013235812"#,
            ),
            (
                r#"bit.tobit('0x10'), bit.tobit(' 12 '), bit.tobit('1e3'), bit.tobit('0'), bit.tobit(-0.0)"#,
                r#"true 16 12 1000 0 0"#,
            ),
            (
                r#"bit.tobit('x')"#,
                r#"false "user_script:1: bad argument #1 to 'tobit' (number expected, got string)""#,
            ),
            (
                r#"bit.tobit('')"#,
                r#"false "user_script:1: bad argument #1 to 'tobit' (number expected, got string)""#,
            ),
            (
                r#"bit.tobit(true)"#,
                r#"false "user_script:1: bad argument #1 to 'tobit' (number expected, got boolean)""#,
            ),
            (
                r#"bit.tobit(nil)"#,
                r#"false "user_script:1: bad argument #1 to 'tobit' (number expected, got nil)""#,
            ),
            (
                r#"bit.tobit()"#,
                r#"false "user_script:1: bad argument #1 to 'tobit' (number expected, got no value)""#,
            ),
            (
                r#"bit.tobit({})"#,
                r#"false "user_script:1: bad argument #1 to 'tobit' (number expected, got table)""#,
            ),
            (
                r#"bit.tobit(function() end)"#,
                r#"false "user_script:1: bad argument #1 to 'tobit' (number expected, got function)""#,
            ),
            // bnot, band, bor, bxor
            (
                r#"bit.bnot(0), bit.bnot(-1), bit.bnot(0x12345678), bit.bnot('7')"#,
                r#"true -1 0 -305419897 -8"#,
            ),
            (
                r#"bit.band(7), bit.band(0xff, 0x0f), bit.band(-1, 0xf0f0, '0xff'), bit.bor(1, 2, 4, 8), bit.bor(-2^31, 1), bit.bxor(1, 3, 7), bit.bxor(-1, 0x0f0f0f0f)"#,
                r#"true 7 15 240 15 -2147483647 5 -252645136"#,
            ),
            (
                r#"bit.band()"#,
                r#"false "user_script:1: bad argument #1 to 'band' (number expected, got no value)""#,
            ),
            (
                r#"bit.band(1, 'x', {})"#,
                r#"false "user_script:1: bad argument #3 to 'band' (number expected, got table)""#,
            ),
            (
                r#"bit.band(1, 'x', 3)"#,
                r#"false "user_script:1: bad argument #2 to 'band' (number expected, got string)""#,
            ),
            (
                r#"bit.bor(1, 2, nil)"#,
                r#"false "user_script:1: bad argument #3 to 'bor' (number expected, got nil)""#,
            ),
            (
                r#"bit.bxor('y', 'x')"#,
                r#"false "user_script:1: bad argument #1 to 'bxor' (number expected, got string)""#,
            ),
            (r#"bit.bor(1.5, 2.5, 3.5)"#, r#"true 6"#),
            // shifts and rotations (count modulo 32)
            (
                r#"bit.lshift(1, 0), bit.lshift(1, 31), bit.lshift(1, 32), bit.lshift(1, 33), bit.lshift(1, -1), bit.lshift(0x87654321, 4)"#,
                r#"true 1 -2147483648 1 2 -2147483648 1985229328"#,
            ),
            (
                r#"bit.rshift(-1, 28), bit.rshift(-1, 0), bit.rshift(0x87654321, 4), bit.rshift(1, -31), bit.rshift(-1, 31)"#,
                r#"true 15 -1 141972530 0 1"#,
            ),
            (
                r#"bit.arshift(-256, 4), bit.arshift(0x87654321, 4), bit.arshift(256, 4), bit.arshift(-1, 31), bit.arshift(-2^31, 33)"#,
                r#"true -16 -126462926 16 -1 -1073741824"#,
            ),
            (
                r#"bit.rol(0x12345678, 4), bit.rol(1, 0), bit.rol(1, 31), bit.rol(-1, 7), bit.rol(0x87654321, 36)"#,
                r#"true 591751041 1 -2147483648 -1 1985229336"#,
            ),
            (
                r#"bit.ror(0x12345678, 4), bit.ror(1, 32), bit.ror(1, 1), bit.ror(0x87654321, -4)"#,
                r#"true -2128394905 1 -2147483648 1985229336"#,
            ),
            (
                r#"bit.lshift(1)"#,
                r#"false "user_script:1: bad argument #2 to 'lshift' (number expected, got no value)""#,
            ),
            (
                r#"bit.rshift()"#,
                r#"false "user_script:1: bad argument #1 to 'rshift' (number expected, got no value)""#,
            ),
            (
                r#"bit.rol(1, 'z')"#,
                r#"false "user_script:1: bad argument #2 to 'rol' (number expected, got string)""#,
            ),
            (
                r#"bit.ror({}, 1)"#,
                r#"false "user_script:1: bad argument #1 to 'ror' (number expected, got table)""#,
            ),
            (
                r#"bit.arshift(1, nil)"#,
                r#"false "user_script:1: bad argument #2 to 'arshift' (number expected, got nil)""#,
            ),
            // bswap
            (
                r#"bit.bswap(0x12345678), bit.bswap(-1), bit.bswap(0), bit.bswap(0xff), bit.bswap(2^32 + 0x01020304)"#,
                r#"true 2018915346 -1 0 -16777216 67305985"#,
            ),
            (
                r#"bit.bswap()"#,
                r#"false "user_script:1: bad argument #1 to 'bswap' (number expected, got no value)""#,
            ),
            // tohex
            (
                r#"bit.tohex(255), bit.tohex(-1), bit.tohex(0), bit.tohex(0x12345678), bit.tohex(2^32 + 1), bit.tohex(1.5e10)"#,
                r#"true "000000ff" "ffffffff" "00000000" "12345678" "00000001" "7e11d600""#,
            ),
            (
                r#"bit.tohex(255, 2), bit.tohex(255, -2), bit.tohex(0x12345678, 0), bit.tohex(0xabcdef, 3), bit.tohex(0xabcdef, -3), bit.tohex(0xabcdef, 8), bit.tohex(0xabcdef, -8)"#,
                r#"true "ff" "FF" "" "def" "DEF" "00abcdef" "00ABCDEF""#,
            ),
            (
                r#"bit.tohex(1, 100), bit.tohex(1, -100), bit.tohex(1, 2^31 - 1), bit.tohex(1, -2^31 + 1), bit.tohex(1, '3'), bit.tohex(1, 2^32 + 5), bit.tohex(1, -2^32 - 3), bit.tohex(1, 8.5), bit.tohex(1, 2^32 - 1)"#,
                r#"true "00000001" "00000001" "00000001" "00000001" "001" "00001" "001" "00000001" "1""#,
            ),
            (
                r#"bit.tohex(1, nil)"#,
                r#"false "user_script:1: bad argument #2 to 'tohex' (number expected, got nil)""#,
            ),
            (
                r#"bit.tohex(1, {})"#,
                r#"false "user_script:1: bad argument #2 to 'tohex' (number expected, got table)""#,
            ),
            (
                r#"bit.tohex()"#,
                r#"false "user_script:1: bad argument #1 to 'tohex' (number expected, got no value)""#,
            ),
            (
                r#"bit.tohex('x', 2)"#,
                r#"false "user_script:1: bad argument #1 to 'tohex' (number expected, got string)""#,
            ),
            // how errors name the function
            (
                r#"bit:tohex()"#,
                r#"false "user_script:1: calling 'tohex' on bad self (number expected, got table)""#,
            ),
            (
                r#"bit:band(1)"#,
                r#"false "user_script:1: calling 'band' on bad self (number expected, got table)""#,
            ),
            (
                r#"(function() local f = bit.tohex return f() end)()"#,
                r#"false "user_script:1: bad argument #1 to 'f' (number expected, got no value)""#,
            ),
            (
                r#"(function() local t = {f = bit.bnot} return t.f() end)()"#,
                r#"false "user_script:1: bad argument #1 to 'f' (number expected, got no value)""#,
            ),
            (
                r#"pcall(bit.tohex)"#,
                r#"true false "bad argument #1 to '?' (number expected, got no value)""#,
            ),
            (
                r#"pcall(bit.band, 1, {})"#,
                r#"true false "bad argument #2 to '?' (number expected, got table)""#,
            ),
        ]);
    }

    /// CVE-2024-31449: a count of -2^31 (negating it overflows) overflowed
    /// the digit buffer of 7.0.15 (which crashes); Redis 7.2.6 and later
    /// count it as -(2^31-1): 8 upper-case digits.
    #[test]
    fn tohex_with_int_min_count_is_safe() {
        check(&[
            (r#"bit.tohex(0xabcdef, -2^31)"#, r#"true "00ABCDEF""#),
            (r#"bit.tohex(-1, 2^31)"#, r#"true "FFFFFFFF""#),
            (r#"bit.tohex(1, -2^31 + 2^32 * 5)"#, r#"true "00000001""#),
        ]);
        assert_eq!(super::tohex(0x1234, i32::MIN), (*b"00001234", 8));
        assert_eq!(super::tohex(0x1234, -4), (*b"1234\0\0\0\0", 4));
    }
}

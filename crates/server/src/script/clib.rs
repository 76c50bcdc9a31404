//! What Elsa's reimplementations of three C libraries of Redis 7.0's Lua
//! environment — [`bit`](super::bit), [`struct`](super::lstruct) and
//! [`cmsgpack`](super::cmsgpack) — share.
//!
//! They are written against Lua's C API (`mlua::ffi`), as Lua C functions,
//! the way Redis's are, and not through mlua's safe wrappers, because:
//! - their errors must be Lua's own: `luaL_argerror` names the function as
//!   the script called it (`bad argument #1 to 'tohex'`, `calling 'tohex' on
//!   bad self`, `'?'` under `pcall`) and `luaL_error` prefixes the script's
//!   position (`user_script:1: `) — the texts redis-server answers;
//! - their results go straight onto the Lua stack, so their limits are
//!   Lua's: a C function may hold 8000 stack slots (`LUAI_MAXCSTACK`), past
//!   which Redis's libraries fail with "stack overflow (…)". Through mlua,
//!   every value held in Rust would also take a slot of mlua's auxiliary
//!   reference stack, which has room for no more than that in all:
//!   `cmsgpack.unpack` returning 7 999 strings would exhaust it;
//! - argument conversions are Lua 5.1's own (`luaL_checknumber` takes
//!   `"0x10"` and `" 12 "`, `luaL_checklstring` writes numbers with `%.14g`).
//!
//! Lua raises errors with `longjmp`, which skips the Rust frames between
//! the raising call and the `pcall` without running destructors. So in
//! every function of these libraries nothing with a destructor is alive
//! across a call that may raise: the only heap buffers (`cmsgpack`'s) are
//! held in `ManuallyDrop` and freed before each error the code raises
//! itself. Only an out-of-memory error inside Lua can skip them, leaking
//! them, as Redis's C leaks its own buffers then.

use std::ffi::{c_int, CStr};

use mlua::ffi;

/// C's `(int64_t)d` (and Lua 5.1's `lua_tointeger`) as x86-64 computes it
/// (`cvttsd2si`): truncated, and INT64_MIN when NaN or out of range.
pub fn c_i64(d: f64) -> i64 {
    if !(-9_223_372_036_854_775_808.0..9_223_372_036_854_775_808.0).contains(&d) {
        i64::MIN
    } else {
        d as i64
    }
}

/// C's `(int)d` on x86-64: truncated, and INT_MIN when NaN or out of range.
pub fn c_i32(d: f64) -> i32 {
    if d.is_nan() || d >= 2_147_483_648.0 || d <= -2_147_483_649.0 {
        i32::MIN
    } else {
        d as i32
    }
}

/// C's `(uint64_t)d` / `(size_t)d` as gcc compiles it for x86-64: below
/// 2^63 (and NaN) through `cvttsd2si`, else 2^63 less, converted, with the
/// top bit flipped — so negative numbers wrap, NaN gives 2^63 and 2^64 and
/// past give 0 (as redis-server 7.0.15 answers `struct.pack('>L', …)`).
pub fn c_u64(d: f64) -> u64 {
    const TWO63: f64 = 9_223_372_036_854_775_808.0;
    if d >= TWO63 {
        (c_i64(d - TWO63) as u64) ^ (1 << 63)
    } else {
        c_i64(d) as u64
    }
}

/// The string argument `narg` (`luaL_checklstring`: a string, or a number
/// converted to one in place; else "string expected, got …").
///
/// # Safety
/// `l` is a running C function's state. The slice borrows the Lua string
/// at `narg`: it is valid while that stack slot is left alone.
pub unsafe fn check_bytes<'a>(l: *mut ffi::lua_State, narg: c_int) -> &'a [u8] {
    let mut len = 0usize;
    let p = ffi::luaL_checklstring(l, narg, &mut len);
    std::slice::from_raw_parts(p.cast::<u8>(), len)
}

/// Pushes `bytes` as a Lua string.
///
/// # Safety
/// `l` is a running C function's state with a free stack slot.
pub unsafe fn push_bytes(l: *mut ffi::lua_State, bytes: &[u8]) {
    if bytes.is_empty() {
        ffi::lua_pushlstring_(l, c"".as_ptr(), 0);
    } else {
        ffi::lua_pushlstring_(l, bytes.as_ptr().cast(), bytes.len());
    }
}

/// `luaL_checkstack`'s error: "stack overflow (what)", where the script
/// called the function.
///
/// # Safety
/// `l` is a running C function's state; nothing with a destructor may be
/// alive in the calling frames (this raises).
pub unsafe fn stack_overflow(l: *mut ffi::lua_State, what: &CStr) -> ! {
    room_to_raise(l);
    ffi::luaL_error(l, c"stack overflow (%s)".as_ptr(), what.as_ptr());
    unreachable!("luaL_error returned")
}

/// Makes room on the stack for an error's message, dropping what the
/// function pushed if the stack is full (a raise discards it anyway).
/// `luaL_error` pushes where the script called from — through the API
/// (`lua_pushlstring`) when that is no Lua line, e.g. under `pcall` — and
/// with the frame's last slot taken it wrote past the frame's top: Lua's
/// API check stops the process there (the fuzzer's `lua_script`,
/// `pcall(cmsgpack.unpack, string.rep('\145', 20000) .. '\192')`);
/// without it, it wrote into the stack's spare slots. Redis's C libraries
/// do the same; here it is not left to the spare slots.
///
/// # Safety
/// `l` is a running C function's state; what it pushed is not needed
/// any more (no pointer into it is used after this).
pub unsafe fn room_to_raise(l: *mut ffi::lua_State) {
    if ffi::lua_checkstack(l, 4) == 0 {
        ffi::lua_settop(l, 0);
    }
}

/// Sets `name` in `table` to the C function `f`.
pub fn set_c_function(
    lua: &mlua::Lua,
    table: &mlua::Table,
    name: &str,
    f: ffi::lua_CFunction,
) -> mlua::Result<()> {
    // SAFETY: the functions of these libraries are Lua C functions that
    // keep only plain frames across anything that may raise (module doc).
    let f = unsafe { lua.create_c_function(f)? };
    table.raw_set(name, f)
}

#[cfg(test)]
pub mod testing {
    //! Runs snippets as redis-server runs them in `EVAL`, on one line of a
    //! chunk named `user_script`, in a plain Lua 5.1 with the three
    //! libraries as globals.

    use mlua::Lua;

    /// Defines `show(...)`, which writes any values as one line: numbers
    /// with `%.17g`, strings quoted with `\ddd` escapes for control, quote,
    /// backslash and non-ASCII bytes, tables as `{k=v,…}` sorted by key.
    /// The expected texts in the tests were captured by running
    /// `PRELUDE .. "return show(pcall(function() return EXPR end))"` with
    /// `redis-cli EVAL … 0` against redis-server 7.0.15.
    pub const PRELUDE: &str = concat!(
        r#"local function esc(s) return (string.gsub(s, '[%c\128-\255"\\]', function(c) return string.format('\\%03d', c:byte()) end)) end "#,
        r#"local show1 show1 = function(v) local t = type(v) "#,
        r#"if t == 'string' then return '"' .. esc(v) .. '"' "#,
        r#"elseif t == 'number' then return string.format('%.17g', v) "#,
        r#"elseif t == 'table' then local ks = {} for k in pairs(v) do ks[#ks + 1] = k end "#,
        r#"table.sort(ks, function(a, b) return show1(a) < show1(b) end) local parts = {} "#,
        r#"for _, k in ipairs(ks) do parts[#parts + 1] = show1(k) .. '=' .. show1(v[k]) end "#,
        r#"return '{' .. table.concat(parts, ',') .. '}' "#,
        r#"else return tostring(v) end end "#,
        r#"local function show(...) local out = {} for i = 1, select('#', ...) do out[i] = show1((select(i, ...))) end return table.concat(out, ' ') end "#,
        r#"local function hx(s) return (string.gsub(s, '.', function(c) return string.format('%02x', c:byte()) end)) end "#,
    );

    /// A plain Lua state with `bit`, `struct` and `cmsgpack`.
    pub fn lua() -> Lua {
        let lua = Lua::new();
        let g = lua.globals();
        g.set("bit", super::super::bit::table(&lua).expect("bit"))
            .expect("set");
        g.set(
            "struct",
            super::super::lstruct::table(&lua).expect("struct"),
        )
        .expect("set");
        g.set(
            "cmsgpack",
            super::super::cmsgpack::table(&lua).expect("cmsgpack"),
        )
        .expect("set");
        lua
    }

    /// `show(pcall(function() return EXPR end))`: "true …" with the values,
    /// or "false" and the error message.
    pub fn run(lua: &Lua, expr: &str) -> String {
        let code = format!("{PRELUDE}return show(pcall(function() return {expr} end))");
        lua.load(code)
            .set_name("@user_script")
            .eval::<String>()
            .unwrap_or_else(|e| panic!("{expr}: {e}"))
    }

    /// Asserts each `(expression, expected show text)`.
    pub fn check(cases: &[(&str, &str)]) {
        let lua = lua();
        for (expr, want) in cases {
            assert_eq!(run(&lua, expr), *want, "{expr}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{c_i32, c_i64, c_u64};

    #[test]
    fn conversions_are_x86_64s() {
        assert_eq!(c_i64(-1.9), -1);
        assert_eq!(c_i64(f64::NAN), i64::MIN);
        assert_eq!(c_i64(1e19), i64::MIN);
        assert_eq!(c_i64(-9_223_372_036_854_775_808.0), i64::MIN);
        assert_eq!(c_i32(2_147_483_647.9), i32::MAX);
        assert_eq!(c_i32(2_147_483_648.0), i32::MIN);
        assert_eq!(c_i32(-2_147_483_648.5), i32::MIN);
        assert_eq!(c_u64(-1.0), u64::MAX);
        assert_eq!(c_u64(f64::NAN), 1 << 63);
        assert_eq!(c_u64(18_446_744_073_709_551_616.0), 0);
        assert_eq!(c_u64(f64::INFINITY), 0);
        assert_eq!(
            c_u64(9_223_372_036_854_775_808.0 + 4096.0),
            (1 << 63) | 4096
        );
    }
}

//! The `cjson` library of Redis 7.0's script environment — lua-cjson 2.1.0
//! by Mark Pulford (`deps/lua/src/lua_cjson.c`) — reimplemented in Rust:
//! `encode`, `decode`, the settings `encode_sparse_array`,
//! `encode_max_depth`, `decode_max_depth`, `encode_number_precision`,
//! `encode_keep_buffer`, `encode_invalid_numbers`,
//! `decode_invalid_numbers`, `new`, and `null`, `_NAME`, `_VERSION`.
//!
//! Hand-written rather than serde_json: scripts compare the text and the
//! error messages (`Expected … but found … at character n`), which only a
//! port of the C tokenizer and writer reproduces. Its functions are Lua C
//! functions, as Redis's (see [`clib`](super::clib) for why): argument
//! errors name the function as the script called it, other errors carry
//! the script's position, and the stack limits are Lua's own — `encode`
//! and `decode` keep on the Lua stack exactly what lua-cjson keeps, so
//! nesting past a C function's 8000 slots fails where Redis's fails (7998
//! arrays or 4000 objects deep when encoding, whatever the depth setting).
//! Both walk iteratively, so nesting costs no Rust stack.
//!
//! **Settings.** As in lua-cjson, each module table has its own settings,
//! in a userdata every function of that table holds as its upvalue;
//! `cjson.new()` answers a new, ordinary (writable) table with the
//! defaults. Each setter checks its arguments as lua-cjson does (at most
//! as many as it takes; integers through `luaL_checkinteger`, truncated to
//! a C int, range errors naming argument #1 whichever it was; options
//! through booleans or `luaL_checkoption`), applies them in order (an
//! error leaves the earlier ones applied) and answers the settings now in
//! force. Unlike Redis, the settings of the global `cjson` do not outlive
//! the run that made them: the Lua state is shared by every client and
//! user, so [`reset`] (called after every run) puts the defaults back —
//! in Redis one user's `cjson.encode_max_depth(1)` changes what the next
//! user's scripts answer.
//!
//! **Memory.** Nothing is sized from a length a script controls beyond
//! what the result needs: an encoded string is measured (escapes
//! included) before room is made for it, the output never grows past what
//! the Lua state could still hold as a string (its 1 GiB limit, less what
//! it uses) — past that `encode` fails with "not enough memory" before
//! allocating (CVE-2022-24834 was lua-cjson's `len * 6` overflowing) —
//! and Rust allocations are fallible. The scratch buffers (output, the
//! string being decoded, the open tables) belong to the settings
//! userdata, not to the call, so a Lua memory error that unwinds through
//! `encode`/`decode` leaks nothing; they are trimmed after each call, and
//! freed by [`reset`] and by the userdata's `__gc`, which only frees Rust
//! memory (it runs no Lua and no script can reach the userdata or its
//! metatable, so a collection at `lua_close` — SCRIPT FLUSH — has nothing
//! of a script's to run, unlike CVE-2024-46981's path).

mod decode;
mod encode;

use std::ffi::{c_char, c_int, c_void, CStr};
use std::ptr;

use mlua::{ffi, LightUserData, Lua, Table};

/// lua-cjson's settings (`json_config_t`), as C ints like its own.
#[derive(Clone, Copy)]
struct Settings {
    sparse_convert: c_int,
    sparse_ratio: c_int,
    sparse_safe: c_int,
    encode_max_depth: c_int,
    /// 0: refused, 1: written (`inf`, `nan`), 2: written as `null`.
    encode_invalid_numbers: c_int,
    encode_number_precision: c_int,
    /// Kept and answered; it changes nothing in what `encode` answers.
    encode_keep_buffer: c_int,
    decode_invalid_numbers: c_int,
    decode_max_depth: c_int,
}

/// lua-cjson 2.1.0's defaults.
const DEFAULTS: Settings = Settings {
    sparse_convert: 0,
    sparse_ratio: 2,
    sparse_safe: 10,
    encode_max_depth: 1000,
    encode_invalid_numbers: 0,
    encode_number_precision: 14,
    encode_keep_buffer: 1,
    decode_invalid_numbers: 1,
    decode_max_depth: 1000,
};

/// Scratch buffers above this capacity are freed after a call.
const KEEP: usize = 64 << 10;

/// The Lua state's memory limit (`STATE_MEMORY_LIMIT` in `lua.rs`): no
/// output longer than this could become a Lua string.
const STATE_LIMIT: usize = 1 << 30;

/// One module table's settings and its functions' scratch space: the
/// full userdata its functions hold as their first upvalue.
struct Config {
    set: Settings,
    /// Memory the Lua state may hold (its limit): an output may use what
    /// it does not.
    limit: usize,
    /// `encode`'s output; `decode`'s string token.
    buf: Vec<u8>,
    /// The tables `encode` is inside of.
    encoding: Vec<encode::Frame>,
    /// The tables `decode` is filling.
    decoding: Vec<decode::Open>,
}

impl Config {
    fn new(limit: usize) -> Config {
        Config {
            set: DEFAULTS,
            limit,
            buf: Vec::new(),
            encoding: Vec::new(),
            decoding: Vec::new(),
        }
    }

    /// Empties the scratch buffers, freeing large ones.
    fn trim(&mut self) {
        fn trim<T>(v: &mut Vec<T>) {
            if v.capacity() * std::mem::size_of::<T>() > KEEP {
                *v = Vec::new();
            } else {
                v.clear();
            }
        }
        trim(&mut self.buf);
        trim(&mut self.encoding);
        trim(&mut self.decoding);
    }
}

/// Why `encode` or `decode` stopped.
enum Fail {
    /// "Cannot serialise <type>: <reason>".
    Serialise(c_int, &'static CStr),
    /// "Cannot serialise, excessive nesting (<depth>)".
    Nesting(c_int),
    /// "Expected <what> but found <found> at character <index + 1>".
    Expected {
        what: &'static CStr,
        found: &'static CStr,
        index: usize,
    },
    /// "Found too many nested data structures (<depth>) at character <at>".
    TooDeep { depth: c_int, at: usize },
    /// The result would not fit in the Lua state, or Rust memory ran out.
    Memory,
}

/// Raises `f` as lua-cjson raises it (`luaL_error`: prefixed with where
/// the script called the function); "not enough memory" as Lua raises its
/// own.
///
/// # Safety
/// `l` is a running C function's state; nothing with a destructor may be
/// alive in the calling frames.
unsafe fn raise(l: *mut ffi::lua_State, f: Fail) -> ! {
    // Every message part is static: nothing on the stack is needed.
    super::clib::room_to_raise(l);
    match f {
        Fail::Serialise(t, reason) => {
            ffi::luaL_error(
                l,
                c"Cannot serialise %s: %s".as_ptr(),
                ffi::lua_typename(l, t),
                reason.as_ptr(),
            );
        }
        Fail::Nesting(depth) => {
            ffi::luaL_error(
                l,
                c"Cannot serialise, excessive nesting (%d)".as_ptr(),
                depth,
            );
        }
        Fail::Expected { what, found, index } => {
            ffi::luaL_error(
                l,
                c"Expected %s but found %s at character %d".as_ptr(),
                what.as_ptr(),
                found.as_ptr(),
                index.wrapping_add(1) as c_int,
            );
        }
        Fail::TooDeep { depth, at } => {
            ffi::luaL_error(
                l,
                c"Found too many nested data structures (%d) at character %d".as_ptr(),
                depth,
                at as c_int,
            );
        }
        Fail::Memory => {
            ffi::lua_pushstring_(l, c"not enough memory".as_ptr());
            ffi::lua_error(l);
        }
    }
    unreachable!("luaL_error returned")
}

/// Bytes the Lua state may still allocate, out of `limit`.
///
/// # Safety
/// `l` is a running C function's state.
unsafe fn room_left(l: *mut ffi::lua_State, limit: usize) -> usize {
    let kb = ffi::lua_gc(l, ffi::LUA_GCCOUNT, 0).max(0) as usize;
    let b = ffi::lua_gc(l, ffi::LUA_GCCOUNTB, 0).max(0) as usize;
    limit.saturating_sub(kb * 1024 + b)
}

/// The calling function's settings (its first upvalue).
///
/// # Safety
/// `l` is a running C function of this module's (a closure made by
/// [`push_module`]).
unsafe fn fetch_config(l: *mut ffi::lua_State) -> *mut Config {
    let cfg = ffi::lua_touserdata(l, ffi::lua_upvalueindex(1)).cast::<Config>();
    if cfg.is_null() {
        ffi::luaL_error(l, c"BUG: Unable to fetch CJSON configuration".as_ptr());
    }
    cfg
}

/// `json_arg_init`: at most `args` arguments, padded with nils.
///
/// # Safety
/// As [`fetch_config`]; may raise.
unsafe fn arg_init(l: *mut ffi::lua_State, args: c_int) -> *mut Config {
    if ffi::lua_gettop(l) > args {
        ffi::luaL_argerror(l, args + 1, c"found too many arguments".as_ptr());
    }
    while ffi::lua_gettop(l) < args {
        ffi::lua_pushnil(l);
    }
    fetch_config(l)
}

/// `json_integer_option`: sets `*setting` from argument `idx` unless it is
/// nil, and pushes the setting.
///
/// # Safety
/// As [`fetch_config`]; may raise.
unsafe fn integer_option(
    l: *mut ffi::lua_State,
    idx: c_int,
    setting: *mut c_int,
    min: c_int,
    max: c_int,
) -> c_int {
    if ffi::lua_isnil(l, idx) == 0 {
        // C's `int value = luaL_checkinteger(…)`: truncated to 32 bits.
        let value = ffi::luaL_checkinteger(l, idx) as c_int;
        if !(min <= value && value <= max) {
            let msg =
                ffi::lua_pushfstring(l, c"expected integer between %d and %d".as_ptr(), min, max);
            // lua-cjson names argument #1, whichever it is.
            ffi::luaL_argerror(l, 1, msg);
        }
        *setting = value;
    }
    ffi::lua_pushinteger(l, (*setting).into());
    1
}

/// `json_enum_option` (with `bool_true` 1): sets `*setting` from argument
/// `idx` (a boolean, or one of `options` by name) unless it is nil, and
/// pushes it: a boolean for 0 and 1, else the option's name.
///
/// # Safety
/// As [`fetch_config`]; may raise. `options` ends with a null pointer.
unsafe fn enum_option(
    l: *mut ffi::lua_State,
    idx: c_int,
    setting: *mut c_int,
    options: &[*const c_char],
) -> c_int {
    if ffi::lua_isnil(l, idx) == 0 {
        if ffi::lua_isboolean(l, idx) != 0 {
            *setting = ffi::lua_toboolean(l, idx);
        } else {
            *setting = ffi::luaL_checkoption(l, idx, ptr::null(), options.as_ptr());
        }
    }
    if *setting == 0 || *setting == 1 {
        ffi::lua_pushboolean(l, *setting);
    } else {
        ffi::lua_pushstring_(l, options[*setting as usize]);
    }
    1
}

/// "off", "on".
fn bool_options() -> [*const c_char; 3] {
    [c"off".as_ptr(), c"on".as_ptr(), ptr::null()]
}

/// `cjson.encode_sparse_array([convert [, ratio [, safe]]])`.
unsafe extern "C-unwind" fn encode_sparse_array(l: *mut ffi::lua_State) -> c_int {
    let cfg = arg_init(l, 3);
    let set = ptr::addr_of_mut!((*cfg).set);
    enum_option(
        l,
        1,
        ptr::addr_of_mut!((*set).sparse_convert),
        &bool_options(),
    );
    integer_option(l, 2, ptr::addr_of_mut!((*set).sparse_ratio), 0, c_int::MAX);
    integer_option(l, 3, ptr::addr_of_mut!((*set).sparse_safe), 0, c_int::MAX);
    3
}

/// `cjson.encode_max_depth([depth])`.
unsafe extern "C-unwind" fn encode_max_depth(l: *mut ffi::lua_State) -> c_int {
    let cfg = arg_init(l, 1);
    integer_option(
        l,
        1,
        ptr::addr_of_mut!((*cfg).set.encode_max_depth),
        1,
        c_int::MAX,
    )
}

/// `cjson.decode_max_depth([depth])`.
unsafe extern "C-unwind" fn decode_max_depth(l: *mut ffi::lua_State) -> c_int {
    let cfg = arg_init(l, 1);
    integer_option(
        l,
        1,
        ptr::addr_of_mut!((*cfg).set.decode_max_depth),
        1,
        c_int::MAX,
    )
}

/// `cjson.encode_number_precision([digits])`.
unsafe extern "C-unwind" fn encode_number_precision(l: *mut ffi::lua_State) -> c_int {
    let cfg = arg_init(l, 1);
    integer_option(
        l,
        1,
        ptr::addr_of_mut!((*cfg).set.encode_number_precision),
        1,
        14,
    )
}

/// `cjson.encode_keep_buffer([keep])`: kept and answered, nothing more
/// (the output buffer is Elsa's own business).
unsafe extern "C-unwind" fn encode_keep_buffer(l: *mut ffi::lua_State) -> c_int {
    let cfg = arg_init(l, 1);
    enum_option(
        l,
        1,
        ptr::addr_of_mut!((*cfg).set.encode_keep_buffer),
        &bool_options(),
    )
}

/// `cjson.encode_invalid_numbers([false|true|"off"|"on"|"null"])`.
unsafe extern "C-unwind" fn encode_invalid_numbers(l: *mut ffi::lua_State) -> c_int {
    let options = [
        c"off".as_ptr(),
        c"on".as_ptr(),
        c"null".as_ptr(),
        ptr::null(),
    ];
    let cfg = arg_init(l, 1);
    enum_option(
        l,
        1,
        ptr::addr_of_mut!((*cfg).set.encode_invalid_numbers),
        &options,
    )
}

/// `cjson.decode_invalid_numbers([false|true|"off"|"on"])`.
unsafe extern "C-unwind" fn decode_invalid_numbers(l: *mut ffi::lua_State) -> c_int {
    let cfg = arg_init(l, 1);
    enum_option(
        l,
        1,
        ptr::addr_of_mut!((*cfg).set.decode_invalid_numbers),
        &bool_options(),
    )
}

/// `cjson.new()`: a new module table with its own settings.
unsafe extern "C-unwind" fn new(l: *mut ffi::lua_State) -> c_int {
    let limit = (*fetch_config(l)).limit;
    push_module(l, limit);
    ffi::lua_pop(l, 1);
    1
}

/// The settings userdata's `__gc`: frees its buffers (and leaves it
/// valid and empty).
unsafe extern "C-unwind" fn drop_config(l: *mut ffi::lua_State) -> c_int {
    let cfg = ffi::lua_touserdata(l, 1).cast::<Config>();
    if !cfg.is_null() {
        let limit = (*cfg).limit;
        drop(ptr::replace(cfg, Config::new(limit)));
    }
    0
}

const _: () = assert!(std::mem::align_of::<Config>() <= std::mem::align_of::<f64>());

/// The functions of a module table, in lua-cjson's order (which fixes
/// the order `pairs` lists them in).
const FUNCTIONS: [(&CStr, ffi::lua_CFunction); 10] = [
    (c"encode", encode::encode),
    (c"decode", decode::decode),
    (c"encode_sparse_array", encode_sparse_array),
    (c"encode_max_depth", encode_max_depth),
    (c"decode_max_depth", decode_max_depth),
    (c"encode_number_precision", encode_number_precision),
    (c"encode_keep_buffer", encode_keep_buffer),
    (c"encode_invalid_numbers", encode_invalid_numbers),
    (c"decode_invalid_numbers", decode_invalid_numbers),
    (c"new", new),
];

/// Pushes a new module table and, above it, its settings userdata.
///
/// # Safety
/// `l` is a running C function's state with 4 free stack slots; may
/// raise (memory).
unsafe fn push_module(l: *mut ffi::lua_State, limit: usize) -> *mut Config {
    ffi::lua_createtable(l, 0, 0);
    let cfg = ffi::lua_newuserdata(l, std::mem::size_of::<Config>()).cast::<Config>();
    // Lua aligns userdata for a double or a pointer (asserted above).
    cfg.write(Config::new(limit));
    if ffi::luaL_newmetatable_(l, c"elsa.cjson.config".as_ptr()) != 0 {
        ffi::lua_pushcfunction(l, drop_config);
        ffi::lua_setfield(l, -2, c"__gc".as_ptr());
    }
    ffi::lua_setmetatable(l, -2);
    for (name, f) in FUNCTIONS {
        ffi::lua_pushvalue(l, -1);
        ffi::lua_pushcclosure(l, f, 1);
        ffi::lua_setfield(l, -3, name.as_ptr());
    }
    ffi::lua_pushlightuserdata(l, ptr::null_mut());
    ffi::lua_setfield(l, -3, c"null".as_ptr());
    ffi::lua_pushstring_(l, c"cjson".as_ptr());
    ffi::lua_setfield(l, -3, c"_NAME".as_ptr());
    ffi::lua_pushstring_(l, c"2.1.0".as_ptr());
    ffi::lua_setfield(l, -3, c"_VERSION".as_ptr());
    cfg
}

/// The settings of the state's `cjson` table (Lua app data), for [`reset`].
struct Main(*mut Config);

// SAFETY: the pointer is only used through the `Lua` it was made in, by
// whichever thread holds that `Lua`.
unsafe impl Send for Main {}

/// The module table for the global `cjson`. Its settings userdata is
/// anchored in the registry for the state's life.
pub fn table(lua: &Lua) -> mlua::Result<Table> {
    table_within(lua, STATE_LIMIT)
}

/// [`table`], for a state whose memory limit is `limit`.
fn table_within(lua: &Lua, limit: usize) -> mlua::Result<Table> {
    unsafe extern "C-unwind" fn open(l: *mut ffi::lua_State) -> c_int {
        let limit = ffi::lua_tointeger(l, 1) as usize;
        let cfg = push_module(l, limit);
        ffi::lua_setfield(l, ffi::LUA_REGISTRYINDEX, c"elsa.cjson".as_ptr());
        ffi::lua_pushlightuserdata(l, cfg.cast::<c_void>());
        2
    }
    // SAFETY: `open` only builds tables (module doc).
    let open = unsafe { lua.create_c_function(open)? };
    let (t, cfg): (Table, LightUserData) = open.call(limit)?;
    lua.set_app_data(Main(cfg.0.cast()));
    Ok(t)
}

/// Puts the global `cjson`'s settings back to lua-cjson's defaults and
/// frees its scratch buffers. Called after every run; it touches no Lua
/// memory, so it cannot fail.
pub fn reset(lua: &Lua) {
    if let Some(main) = lua.app_data_ref::<Main>() {
        // SAFETY: the userdata is anchored in the registry until the state
        // closes, Lua never moves a userdata, and no function of the module
        // is running (this is called between runs).
        unsafe {
            let cfg = &mut *main.0;
            cfg.set = DEFAULTS;
            cfg.buf = Vec::new();
            cfg.encoding = Vec::new();
            cfg.decoding = Vec::new();
        }
    }
}

#[cfg(test)]
mod tests;

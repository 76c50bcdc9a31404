//! The `struct` library of Redis 7.0's script environment — Roberto
//! Ierusalimschy's lua-struct (`deps/lua/src/lua_struct.c`) — reimplemented
//! in Rust: `struct.pack(fmt, …)`, `struct.unpack(fmt, data [, pos])`,
//! `struct.size(fmt)`.
//!
//! Hand-written because no maintained crate provides Redis's script
//! libraries for mlua. Its functions are Lua C functions, as Redis's (see
//! [`clib`](super::clib) for why), so results and error texts are
//! redis-server's, position included.
//!
//! Formats, read up to their first NUL byte, with the sizes of Redis's
//! x86-64 build: `>` big endian, `<` little endian, `!n` alignment (a power
//! of 2; `!` alone 8), space ignored; `b`/`B` (1 byte), `h`/`H` (2), `l`/`L`
//! (8), `T` (8), `in`/`In` (n bytes, default 4, at most 32) — lower case
//! signed; `f` float, `d` double; `x` a zero byte; `cn` n bytes of a string
//! (`c0`: all of it when packing, the previous number's worth when
//! unpacking); `s` a zero-terminated string. Integers pack as C converts
//! the number (`(unsigned long)n`, or `(long)n` when negative, as x86-64
//! does it: NaN and out-of-range values become 0 or 2^63); past 8 bytes,
//! they are zero padded, and unpack from 8 bytes with the sign taken as
//! x86-64 shifts do (a shift of 8n-1 bits modulo 64).
//!
//! The limits Redis added (CVE-2020-14147 and CVE-2021-32626): numbers in a
//! format beyond INT_MAX are "integral size overflow"; `unpack` checks each
//! item against the data's length ("data string too short") before reading
//! it and checks the stack for each result ("stack overflow (too many
//! results)"). Nothing is allocated from a format's numbers: `c2000000000`
//! takes that many bytes of an argument (else "string too short"), and
//! padding is at most 31 bytes per item.

use std::ffi::c_int;
use std::mem::MaybeUninit;

use mlua::{ffi, Lua, Table};

use super::clib::{c_i64, c_u64, check_bytes, push_bytes, set_c_function};

/// The largest integer option, in bytes.
const MAXINTSIZE: i32 = 32;
/// `!` without a number: the strictest alignment of x86-64's C types.
const MAXALIGN: i32 = 8;

/// The byte order and alignment in force.
#[derive(Clone, Copy)]
struct Header {
    little: bool,
    align: usize,
}

impl Header {
    fn new() -> Header {
        Header {
            little: cfg!(target_endian = "little"),
            align: 1,
        }
    }
}

/// What is wrong with a format.
#[derive(Debug, PartialEq)]
enum Bad {
    /// A number past INT_MAX.
    Overflow,
    /// An integer option larger than [`MAXINTSIZE`].
    TooLarge(i32),
    /// An alignment that is not a power of 2.
    NotPow2(i32),
    /// Not an option.
    Invalid(u8),
}

/// A format being read.
struct Format<'a> {
    s: &'a [u8],
    at: usize,
}

impl<'a> Format<'a> {
    /// The format `s`, up to its first NUL (it is a C string to lua-struct).
    fn new(s: &'a [u8]) -> Format<'a> {
        let end = s.iter().position(|&c| c == 0).unwrap_or(s.len());
        Format {
            s: &s[..end],
            at: 0,
        }
    }

    fn next_option(&mut self) -> Option<u8> {
        let c = *self.s.get(self.at)?;
        self.at += 1;
        Some(c)
    }

    /// The number written next, or `default` when there is none.
    fn number(&mut self, default: i32) -> Result<i32, Bad> {
        let mut n: Option<i32> = None;
        while let Some(&c) = self.s.get(self.at) {
            if !c.is_ascii_digit() {
                break;
            }
            let d = i32::from(c - b'0');
            let a = n.unwrap_or(0);
            if a > i32::MAX / 10 || a * 10 > i32::MAX - d {
                return Err(Bad::Overflow);
            }
            n = Some(a * 10 + d);
            self.at += 1;
        }
        Ok(n.unwrap_or(default))
    }

    /// The size of option `opt` (reading its number): 0 for the options
    /// without a size of their own (`s`, controls, invalid ones).
    fn size(&mut self, opt: u8) -> Result<usize, Bad> {
        Ok(match opt {
            b'b' | b'B' | b'x' => 1,
            b'h' | b'H' => 2,
            b'f' => 4,
            b'l' | b'L' | b'T' | b'd' => 8,
            b'c' => self.number(1)? as usize,
            b'i' | b'I' => {
                let n = self.number(4)?;
                if n > MAXINTSIZE {
                    return Err(Bad::TooLarge(n));
                }
                n as usize
            }
            _ => 0,
        })
    }

    /// Applies the control option `opt`.
    fn control(&mut self, opt: u8, h: &mut Header) -> Result<(), Bad> {
        match opt {
            b' ' => {}
            b'>' => h.little = false,
            b'<' => h.little = true,
            b'!' => {
                let a = self.number(MAXALIGN)?;
                if a <= 0 || a & (a - 1) != 0 {
                    return Err(Bad::NotPow2(a));
                }
                h.align = a as usize;
            }
            _ => return Err(Bad::Invalid(opt)),
        }
        Ok(())
    }
}

/// Padding before an item of `size` bytes at offset `at`.
fn padding(at: usize, h: &Header, opt: u8, size: usize) -> usize {
    if size == 0 || opt == b'c' {
        return 0;
    }
    let size = size.min(h.align);
    size.wrapping_sub(at & (size - 1)) & (size - 1)
}

fn is_integer_option(opt: u8) -> bool {
    matches!(
        opt,
        b'b' | b'B' | b'h' | b'H' | b'l' | b'L' | b'T' | b'i' | b'I'
    )
}

/// `n` as an integer of `size` bytes.
fn int_bytes(n: f64, little: bool, size: usize) -> [u8; MAXINTSIZE as usize] {
    let mut v = if n < 0.0 { c_i64(n) as u64 } else { c_u64(n) };
    let mut out = [0u8; MAXINTSIZE as usize];
    for k in 0..size {
        out[if little { k } else { size - 1 - k }] = v as u8;
        v >>= 8;
    }
    out
}

/// The integer in `bytes` as a Lua number.
fn int_value(bytes: &[u8], little: bool, signed: bool) -> f64 {
    let mut v: u64 = 0;
    let mut add = |c: &u8| v = (v << 8) | u64::from(*c);
    if little {
        bytes.iter().rev().for_each(&mut add);
    } else {
        bytes.iter().for_each(&mut add);
    }
    if !signed {
        return v as f64;
    }
    let mask = u64::MAX.wrapping_shl((bytes.len() as i64 * 8 - 1) as u32);
    if v & mask != 0 {
        v |= mask;
    }
    v as i64 as f64
}

/// The value, or the format error raised as lua-struct raises it.
///
/// # Safety
/// `l` is a running C function's state; nothing with a destructor may be
/// alive in the calling frames.
unsafe fn ok<T>(l: *mut ffi::lua_State, r: Result<T, Bad>) -> T {
    match r {
        Ok(v) => v,
        Err(bad) => {
            match bad {
                Bad::Overflow => ffi::luaL_error(l, c"integral size overflow".as_ptr()),
                Bad::TooLarge(n) => ffi::luaL_error(
                    l,
                    c"integral size %d is larger than limit of %d".as_ptr(),
                    n as c_int,
                    MAXINTSIZE as c_int,
                ),
                Bad::NotPow2(a) => {
                    ffi::luaL_error(l, c"alignment %d is not a power of 2".as_ptr(), a as c_int)
                }
                Bad::Invalid(c) => {
                    let msg = ffi::lua_pushfstring(
                        l,
                        c"invalid format option '%c'".as_ptr(),
                        c_int::from(c),
                    );
                    ffi::luaL_argerror(l, 1, msg)
                }
            };
            unreachable!("lua_struct's error returned")
        }
    }
}

/// Adds `bytes` to the buffer.
unsafe fn add(b: *mut ffi::luaL_Buffer, bytes: &[u8]) {
    ffi::luaL_addlstring(b, bytes.as_ptr().cast(), bytes.len());
}

unsafe extern "C-unwind" fn struct_pack(l: *mut ffi::lua_State) -> c_int {
    let mut fmt = Format::new(check_bytes(l, 1));
    let mut h = Header::new();
    let mut arg: c_int = 2;
    let mut total: usize = 0;
    // As lua-struct: a nil between the arguments and the buffer's pieces
    // (so a missing argument reads as nil).
    ffi::lua_pushnil(l);
    let mut buffer = MaybeUninit::<ffi::luaL_Buffer>::uninit();
    let b = buffer.as_mut_ptr();
    ffi::luaL_buffinit(l, b);
    while let Some(opt) = fmt.next_option() {
        let mut size = ok(l, fmt.size(opt));
        let pad = padding(total, &h, opt, size);
        total = total.wrapping_add(pad);
        for _ in 0..pad {
            ffi::luaL_addchar(b, 0);
        }
        match opt {
            _ if is_integer_option(opt) => {
                let n = ffi::luaL_checknumber(l, arg);
                arg += 1;
                add(b, &int_bytes(n, h.little, size)[..size]);
            }
            b'x' => ffi::luaL_addchar(b, 0),
            b'f' => {
                let f = ffi::luaL_checknumber(l, arg) as f32;
                arg += 1;
                add(
                    b,
                    &if h.little {
                        f.to_le_bytes()
                    } else {
                        f.to_be_bytes()
                    },
                );
            }
            b'd' => {
                let d = ffi::luaL_checknumber(l, arg);
                arg += 1;
                add(
                    b,
                    &if h.little {
                        d.to_le_bytes()
                    } else {
                        d.to_be_bytes()
                    },
                );
            }
            b'c' | b's' => {
                let s = check_bytes(l, arg);
                arg += 1;
                if size == 0 {
                    size = s.len();
                }
                if s.len() < size {
                    ffi::luaL_argerror(l, arg, c"string too short".as_ptr());
                }
                add(b, &s[..size]);
                if opt == b's' {
                    ffi::luaL_addchar(b, 0);
                    size += 1;
                }
            }
            _ => ok(l, fmt.control(opt, &mut h)),
        }
        total = total.wrapping_add(size);
    }
    ffi::luaL_pushresult(b);
    1
}

unsafe extern "C-unwind" fn struct_unpack(l: *mut ffi::lua_State) -> c_int {
    let mut fmt = Format::new(check_bytes(l, 1));
    let data = check_bytes(l, 2);
    let ld = data.len();
    // `(size_t)` of the Lua integer: negative offsets wrap (and then fail
    // the length checks).
    let mut pos = ffi::luaL_optinteger(l, 3, 1) as usize;
    if pos == 0 {
        ffi::luaL_argerror(l, 3, c"offset must be 1 or greater".as_ptr());
    }
    pos -= 1;
    let mut h = Header::new();
    let mut n: c_int = 0;
    while let Some(opt) = fmt.next_option() {
        let mut size = ok(l, fmt.size(opt));
        pos = pos.wrapping_add(padding(pos, &h, opt, size));
        if !(size <= ld && pos <= ld - size) {
            ffi::luaL_argerror(l, 2, c"data string too short".as_ptr());
        }
        // Room for the item and the final position.
        ffi::luaL_checkstack_(l, 2, c"too many results".as_ptr());
        match opt {
            _ if is_integer_option(opt) => {
                let v = int_value(&data[pos..pos + size], h.little, opt.is_ascii_lowercase());
                ffi::lua_pushnumber(l, v);
                n += 1;
            }
            b'x' => {}
            b'f' => {
                let mut four = [0u8; 4];
                four.copy_from_slice(&data[pos..pos + 4]);
                let f = if h.little {
                    f32::from_le_bytes(four)
                } else {
                    f32::from_be_bytes(four)
                };
                ffi::lua_pushnumber(l, f64::from(f));
                n += 1;
            }
            b'd' => {
                let mut eight = [0u8; 8];
                eight.copy_from_slice(&data[pos..pos + 8]);
                let d = if h.little {
                    f64::from_le_bytes(eight)
                } else {
                    f64::from_be_bytes(eight)
                };
                ffi::lua_pushnumber(l, d);
                n += 1;
            }
            b'c' => {
                if size == 0 {
                    // The length is the previous result.
                    if n == 0 || ffi::lua_isnumber(l, -1) == 0 {
                        ffi::luaL_error(l, c"format 'c0' needs a previous size".as_ptr());
                    }
                    size = c_u64(ffi::lua_tonumber(l, -1)) as usize;
                    ffi::lua_pop(l, 1);
                    n -= 1;
                    if !(size <= ld && pos <= ld - size) {
                        ffi::luaL_argerror(l, 2, c"data string too short".as_ptr());
                    }
                }
                push_bytes(l, &data[pos..pos + size]);
                n += 1;
            }
            b's' => {
                let Some(len) = data[pos..].iter().position(|&c| c == 0) else {
                    ffi::luaL_error(l, c"unfinished string in data".as_ptr());
                    unreachable!("luaL_error returned")
                };
                push_bytes(l, &data[pos..pos + len]);
                size = len + 1;
                n += 1;
            }
            _ => ok(l, fmt.control(opt, &mut h)),
        }
        pos = pos.wrapping_add(size);
    }
    ffi::lua_pushinteger(l, pos.wrapping_add(1) as ffi::lua_Integer);
    n + 1
}

unsafe extern "C-unwind" fn struct_size(l: *mut ffi::lua_State) -> c_int {
    let mut fmt = Format::new(check_bytes(l, 1));
    let mut h = Header::new();
    let mut pos: usize = 0;
    while let Some(opt) = fmt.next_option() {
        let size = ok(l, fmt.size(opt));
        pos = pos.wrapping_add(padding(pos, &h, opt, size));
        if opt == b's' {
            ffi::luaL_argerror(l, 1, c"option 's' has no fixed size".as_ptr());
        } else if opt == b'c' && size == 0 {
            ffi::luaL_argerror(l, 1, c"option 'c0' has no fixed size".as_ptr());
        }
        // Letters and digits that are no option count as nothing here.
        if !opt.is_ascii_alphanumeric() {
            ok(l, fmt.control(opt, &mut h));
        }
        pos = pos.wrapping_add(size);
    }
    ffi::lua_pushinteger(l, pos as ffi::lua_Integer);
    1
}

/// The library's table, as Redis's script environment has it.
pub fn table(lua: &Lua) -> mlua::Result<Table> {
    let t = lua.create_table()?;
    set_c_function(lua, &t, "pack", struct_pack)?;
    set_c_function(lua, &t, "unpack", struct_unpack)?;
    set_c_function(lua, &t, "size", struct_size)?;
    Ok(t)
}

#[cfg(test)]
mod tests;

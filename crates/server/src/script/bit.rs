//! Redis 7.0's `bit` Lua library (stub: filled in by the libraries work).

use mlua::{Lua, Table};

/// The library's table, as Redis's script environment has it.
pub fn table(lua: &Lua) -> mlua::Result<Table> {
    lua.create_table()
}

//! The script standard library (`stdlib/`), embedded so a shared single-file engine runs anywhere.

/// The source of a Lua stdlib module by its `require` name.
pub fn lua_module(name: &str) -> Option<&'static str> {
    let _ = name;
    None
}

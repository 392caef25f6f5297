//! The script standard library (`stdlib/`), embedded so a shared single-file engine runs anywhere.
//!
//! Each Lua module is one file under `stdlib/` returning a table of functions, documented in its
//! header comment and in `docs/writing-engines.md`. Engines load them with `require("fit")`;
//! nothing else resolves.
//!
//! ```
//! assert!(ctxhost::stdlib::lua_module("fit").is_some());
//! assert!(ctxhost::stdlib::lua_module("io").is_none());
//! ```

/// Every Lua stdlib module: its `require` name and source.
pub const LUA_MODULES: [(&str, &str); 6] = [
    ("msg", include_str!("../stdlib/msg.lua")),
    ("groups", include_str!("../stdlib/groups.lua")),
    ("tail", include_str!("../stdlib/tail.lua")),
    ("fit", include_str!("../stdlib/fit.lua")),
    ("prune", include_str!("../stdlib/prune.lua")),
    ("pin", include_str!("../stdlib/pin.lua")),
];

/// The source of a Lua stdlib module by its `require` name.
pub fn lua_module(name: &str) -> Option<&'static str> {
    LUA_MODULES
        .iter()
        .find(|(n, _)| *n == name)
        .map(|(_, src)| *src)
}

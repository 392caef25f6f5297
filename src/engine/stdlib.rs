//! The script standard library (`stdlib/`), embedded so a shared single-file engine runs anywhere.
//!
//! Each Lua module is one file under `stdlib/` returning a table of functions, documented in its
//! header comment and in `docs/writing-engines.md`. Engines load them with `require("fit")`;
//! nothing else resolves.
//!
//! Each Lua module has a Rhai twin (`stdlib/<name>.rhai`) with the same functions, arguments and
//! results: Rhai engines load it with `import "fit" as fit;`. Two differences follow from the
//! language: Rhai indices are 0-based where Lua's are 1-based, and where a Lua function returns
//! two values the Rhai one returns a map naming them (`fit::newest_first` gives
//! `#{kept, tokens}` for Lua's `kept, tokens`).
//!
//! (Both languages list the same modules: the unit test `both_languages_have_the_same_modules`.)

/// Every Lua stdlib module: its `require` name and source.
pub(crate) const LUA_MODULES: [(&str, &str); 7] = [
    ("msg", include_str!("../../stdlib/msg.lua")),
    ("groups", include_str!("../../stdlib/groups.lua")),
    ("tail", include_str!("../../stdlib/tail.lua")),
    ("fit", include_str!("../../stdlib/fit.lua")),
    ("prune", include_str!("../../stdlib/prune.lua")),
    ("pin", include_str!("../../stdlib/pin.lua")),
    ("dag", include_str!("../../stdlib/dag.lua")),
];

/// The source of a Lua stdlib module by its `require` name.
pub(crate) fn lua_module(name: &str) -> Option<&'static str> {
    LUA_MODULES
        .iter()
        .find(|(n, _)| *n == name)
        .map(|(_, src)| *src)
}

/// Every Rhai stdlib module: its `import` name and source, in the order of [`LUA_MODULES`].
pub(crate) const RHAI_MODULES: [(&str, &str); 7] = [
    ("msg", include_str!("../../stdlib/msg.rhai")),
    ("groups", include_str!("../../stdlib/groups.rhai")),
    ("tail", include_str!("../../stdlib/tail.rhai")),
    ("fit", include_str!("../../stdlib/fit.rhai")),
    ("prune", include_str!("../../stdlib/prune.rhai")),
    ("pin", include_str!("../../stdlib/pin.rhai")),
    ("dag", include_str!("../../stdlib/dag.rhai")),
];

/// The source of a Rhai stdlib module by its `import` name.
pub(crate) fn rhai_module(name: &str) -> Option<&'static str> {
    RHAI_MODULES
        .iter()
        .find(|(n, _)| *n == name)
        .map(|(_, src)| *src)
}

// The module docs' example, moved here when the module became crate-private.
#[cfg(test)]
mod example {
    use crate::engine::stdlib::{LUA_MODULES, RHAI_MODULES, lua_module, rhai_module};

    #[test]
    fn both_languages_have_the_same_modules() {
        assert!(lua_module("fit").is_some());
        assert!(lua_module("io").is_none());
        assert!(rhai_module("fit").is_some());
        assert_eq!(LUA_MODULES.len(), RHAI_MODULES.len());
    }
}

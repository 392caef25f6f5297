//! Error text that tells a Lua author what to do, as good as the Rhai adapter's: a write to a
//! host message says it is read-only and how to copy it, and a misspelt stdlib function is
//! named with its closest match (`fit.newest_frist` is not a function of `fit`; did you mean
//! `newest_first`?).

use mlua::{Lua, Table, Value};

/// What Luau says when a script writes to a frozen table.
const LUAU_READONLY: &str = "attempt to modify a readonly table";

/// The way out, appended to Luau's read-only error: which tables are frozen and how to get an
/// editable copy with the stdlib.
const READ_ONLY_HINT: &str = "messages and message lists from the host are read-only (so are \
`host` and `host.config`); edit a copy: `local c = msg.copy(m)` (with `local msg = \
require(\"msg\")`) or `msg.with_text(m, text)`; copy a list with `table.move(list, 1, #list, 1, {})`";

/// A Luau error message with the read-only hint added when it is a write to a frozen table.
pub(super) fn explain(message: String) -> String {
    if message.contains(LUAU_READONLY) && !message.contains(READ_ONLY_HINT) {
        format!("{message}: {READ_ONLY_HINT}")
    } else {
        message
    }
}

/// Makes reading a missing member of stdlib module `name` an error naming it (with the closest
/// member), instead of a `nil` that fails later as "attempt to call a nil value".
pub(super) fn strict_module(lua: &Lua, name: &str, module: &Table) -> mlua::Result<()> {
    if module.metatable().is_some() {
        return Ok(());
    }
    let name = name.to_owned();
    let index = lua.create_function(move |_, (t, key): (Table, Value)| -> mlua::Result<()> {
        let key = match &key {
            Value::String(s) => s.to_string_lossy(),
            other => format!("<{}>", other.type_name()),
        };
        let mut members = Vec::new();
        t.for_each(|k: Value, _: Value| {
            if let Value::String(s) = k {
                members.push(s.to_string_lossy());
            }
            Ok(())
        })?;
        Err(mlua::Error::runtime(missing_member(&name, &key, &members)))
    })?;
    let mt = lua.create_table()?;
    mt.raw_set("__index", index)?;
    mt.raw_set("__metatable", false)?;
    module.set_metatable(Some(mt))?;
    Ok(())
}

/// "`fit.newest_frist` is not a function of `fit`; did you mean `newest_first`?", or the
/// module's members when nothing is close.
fn missing_member(module: &str, key: &str, members: &[String]) -> String {
    let head = format!("`{module}.{key}` is not a function of `{module}`");
    match crate::contract::closest(key, members.iter().map(String::as_str)) {
        Some(c) => format!("{head}; did you mean `{c}`?"),
        None => {
            let mut sorted: Vec<&str> = members.iter().map(String::as_str).collect();
            sorted.sort_unstable();
            format!("{head} (it has: {})", sorted.join(", "))
        }
    }
}

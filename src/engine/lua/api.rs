//! The `host` global, `require` and `print` as Luau scripts see them.
//!
//! Every `host` function is an entry of [`API`]: this module registers each under
//! `host.<path>` and converts values, Lua values in as [`HostValue`]s
//! ([`values::host_value`]) and [`HostOut`]s back. The VM's [`HostScope`] (engine, caps and
//! the running lifecycle call) sits in its app data. `print` is `host.log.info`.

use mlua::{Function, IntoLua, Lua, MultiValue, Table, Value};
use serde_json::Value as Json;

use super::values::{self, Resident};
use crate::engine::api::{
    API, Args, HostError, HostFn, HostOut, HostScope, HostValue, Kept, Param, table,
};
use crate::engine::script::Budget;

const MODULE_CACHE: &str = "ctxhost.stdlib.modules";

/// Registry key of the frozen entry config (`host.config`, the factory's `ctx.config`).
pub(crate) const CONFIG_KEY: &str = "ctxhost.config";

fn rt(msg: impl Into<String>) -> mlua::Error {
    mlua::Error::runtime(msg.into())
}

/// Installs `host`, `require` and `print`; removes what reaches outside the sandbox. The VM's
/// app data must hold its [`HostScope`] and [`Resident`].
pub(crate) fn install(lua: &Lua, config: &Json) -> mlua::Result<()> {
    let globals = lua.globals();
    for name in [
        "loadstring",
        "load",
        "dofile",
        "loadfile",
        "getfenv",
        "setfenv",
        "require",
        "print",
        "io",
        "package",
        "newproxy",
    ] {
        globals.raw_set(name, Value::Nil)?;
    }

    let host = lua.create_table()?;
    for f in &API {
        let Some((last, parents)) = f.path.split_last() else {
            continue;
        };
        let mut table = host.clone();
        for part in parents {
            table = match table.raw_get::<Option<Table>>(*part)? {
                Some(t) => t,
                None => {
                    let t = lua.create_table()?;
                    table.raw_set(*part, &t)?;
                    t
                }
            };
        }
        table.raw_set(*last, host_function(lua, f)?)?;
    }
    let cfg = values::to_lua(lua, config)?;
    lua.set_named_registry_value(CONFIG_KEY, &cfg)?;
    host.raw_set("config", cfg)?;
    values::deep_freeze(lua, &host)?;
    globals.raw_set("host", host)?;

    globals.raw_set("require", lua.create_function(require)?)?;
    if let Some(info) = table::find(&["log", "info"]) {
        globals.raw_set("print", host_function(lua, info)?)?;
    }
    Ok(())
}

/// `f` as a Lua function named `host.<path>` in errors; memoized per resident message when
/// [`HostFn::per_message`].
fn host_function(lua: &Lua, f: &'static HostFn) -> mlua::Result<Function> {
    let name = format!("host.{}", f.path.join("."));
    let func = lua.create_function(move |lua, args: MultiValue| call(lua, f, &name, &args))?;
    if !f.per_message {
        return Ok(func);
    }
    let resident = lua
        .app_data_ref::<Resident>()
        .ok_or_else(|| rt("no resident state"))?;
    resident.memoized(func)
}

/// One call of `f`: the arguments converted as its params say, run, the result converted back.
fn call(lua: &Lua, f: &HostFn, name: &str, args: &MultiValue) -> mlua::Result<MultiValue> {
    let out = {
        let resident = lua
            .app_data_ref::<Resident>()
            .ok_or_else(|| rt("no resident state"))?;
        let scope = lua
            .app_data_ref::<HostScope>()
            .ok_or_else(|| rt("no host scope"))?;
        let mut budget = Budget::new(scope.limits().max_result_bytes);
        let mut values = Args::default();
        for (i, (param, slot)) in f.params.iter().zip(&mut values).enumerate() {
            let v = args.get(i).unwrap_or(&Value::Nil);
            let converted = match param {
                Param::Value(p) => {
                    values::host_value(lua, &resident, v, &mut budget).map_err(|e| e.describe(p))
                }
                Param::Fields(p, fields) => {
                    values::host_fields(lua, &resident, v, fields, &mut budget)
                        .map_err(|e| e.describe(p))
                }
                Param::Text => Ok(HostValue::Text(text_of(args.iter().skip(i)))),
            };
            *slot = converted.map_err(|e| rt(format!("{name}: {e}")))?;
        }
        scope.run(f, name, values).map_err(lua_error)?
    };
    let mut results = MultiValue::new();
    push_out(lua, out, args.front(), &mut results)?;
    Ok(results)
}

/// A failed host call as a Lua error: a host fault stays recognisable (the worker classifies it
/// as `Host`), a script error is an ordinary runtime error.
fn lua_error(e: HostError) -> mlua::Error {
    if e.is_host_fault() {
        mlua::Error::external(e)
    } else {
        rt(e.message())
    }
}

/// Appends what a host function returned to `results`; messages the script passed in
/// (`given`, the first argument) come back as its very tables.
fn push_out(
    lua: &Lua,
    out: HostOut,
    given: Option<&Value>,
    results: &mut MultiValue,
) -> mlua::Result<()> {
    let v = match out {
        HostOut::Nil => return Ok(()),
        HostOut::Count(n) => n.into_lua(lua)?,
        HostOut::Number(n) => Value::Number(n),
        HostOut::Data(j) => values::to_lua(lua, &j)?,
        HostOut::Messages(kept)
            if let (Some(Value::Table(list)), Some(indices)) = (given, given_only(&kept)) =>
        {
            // All of them the script's own (`host.fit`): gathered inside the VM.
            let resident = lua
                .app_data_ref::<Resident>()
                .ok_or_else(|| rt("no resident state"))?;
            Value::Table(resident.gather(lua, list, &indices)?)
        }
        HostOut::Messages(kept) => {
            let out = lua.create_table_with_capacity(kept.len(), 0)?;
            values::mark_array(lua, &out, kept.len())?;
            for (i, k) in kept.into_iter().enumerate() {
                let t = match (k, given) {
                    (Kept::Given(j), Some(Value::Table(list))) => list.raw_get::<Value>(j + 1)?,
                    (Kept::Given(_), _) => return Err(rt("a kept message has no list")),
                    (Kept::New(m), _) => Value::Table(
                        lua.app_data_mut::<Resident>()
                            .ok_or_else(|| rt("no resident state"))?
                            .temp_for(lua, &m)?,
                    ),
                };
                out.raw_set(i + 1, t)?;
            }
            Value::Table(out)
        }
        HostOut::Many(outs) => {
            for o in outs {
                push_out(lua, o, given, results)?;
            }
            return Ok(());
        }
        HostOut::Record(fields) => {
            for (_, o) in fields {
                push_out(lua, o, given, results)?;
            }
            return Ok(());
        }
    };
    results.push_back(v);
    Ok(())
}

/// The positions in the given list of every kept message, when each is one of the list's.
fn given_only(kept: &[Kept]) -> Option<Vec<usize>> {
    kept.iter()
        .map(|k| match k {
            Kept::Given(j) => Some(*j),
            Kept::New(_) => None,
        })
        .collect()
}

/// Lua values as `print` shows them, tab-separated.
fn text_of<'a>(args: impl Iterator<Item = &'a Value>) -> String {
    // Joined only up to the log cap: 24 arguments of 40 MB each must not become one 1 GB string
    // just to be cut. What is left unread is counted for the cut note, which fits within the
    // cap so the log does not cut the line a second time.
    let cap = crate::engine::api::LOG_CAP - crate::engine::api::LOG_NOTE_ROOM;
    let mut out = String::new();
    let mut beyond = 0usize;
    for (i, v) in args.enumerate() {
        let part = match v {
            Value::String(s) => {
                let bytes = s.as_bytes();
                let room = (cap + 4).saturating_sub(out.len());
                if bytes.len() > room {
                    beyond = beyond.saturating_add(bytes.len() - room);
                }
                String::from_utf8_lossy(&bytes[..bytes.len().min(room)]).into_owned()
            }
            Value::Integer(n) => n.to_string(),
            Value::Number(n) => n.to_string(),
            Value::Boolean(b) => b.to_string(),
            Value::Nil => "nil".to_owned(),
            other => format!("<{}>", other.type_name()),
        };
        let sep = usize::from(i > 0);
        if out.len() > cap {
            beyond = beyond.saturating_add(sep + part.len());
            continue;
        }
        if sep == 1 {
            out.push('\t');
        }
        out.push_str(&part);
    }
    crate::engine::api::cut_log_text_beyond(out, cap, beyond)
}

/// `require(name)`: only the host's stdlib, loaded as text chunks named `@stdlib/<name>.lua`
/// inside the sandbox, cached per VM.
fn require(lua: &Lua, name: mlua::LuaString) -> mlua::Result<Value> {
    let name = name.to_string_lossy();
    let cache: Table = match lua.named_registry_value::<Option<Table>>(MODULE_CACHE)? {
        Some(t) => t,
        None => {
            let t = lua.create_table()?;
            lua.set_named_registry_value(MODULE_CACHE, &t)?;
            t
        }
    };
    let cached: Value = cache.raw_get(name.as_str())?;
    if !cached.is_nil() {
        return Ok(cached);
    }
    let Some(src) = crate::engine::stdlib::lua_module(&name) else {
        let known: Vec<&str> = crate::engine::stdlib::LUA_MODULES
            .iter()
            .map(|(n, _)| *n)
            .collect();
        return Err(rt(format!(
            "module '{name}' not found: require resolves only the host stdlib (known modules: {})",
            known.join(", ")
        )));
    };
    let value: Value = lua
        .load(src)
        .set_name(format!("@stdlib/{name}.lua"))
        .set_mode(mlua::chunk::ChunkMode::Text)
        .call(())?;
    let value = match value {
        Value::Nil => Value::Boolean(true),
        Value::Table(t) => {
            super::hints::strict_module(lua, &name, &t)?;
            Value::Table(t)
        }
        other => other,
    };
    cache.raw_set(name.as_str(), &value)?;
    Ok(value)
}

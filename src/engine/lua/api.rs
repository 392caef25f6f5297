//! The `host` global, `require` and `print` as Luau scripts see them.
//!
//! Every behaviour lives in [`HostCall`]; this module only converts arguments and results. The
//! current call's `HostCall` sits in the VM's app data for the duration of a lifecycle call.

use std::sync::Arc;

use mlua::{Lua, LuaSerdeExt, MultiValue, Table, Value};
use serde_json::{Map, Value as Json};

use super::marshal::{self, PtrMap, Resident};
use crate::contract::ResultLimits;
use crate::engine::script::Budget;
use crate::host::{HostCall, LogLevel};
use crate::message::Message;

/// What `host.*` needs during one lifecycle call.
pub struct CallScope {
    /// The call.
    pub call: HostCall,
}

/// What `host.*` needs for the life of the VM.
pub struct ApiEnv {
    /// For log lines outside a call.
    pub engine_id: String,
    /// Caps applied to values scripts pass to `host.*`.
    pub limits: ResultLimits,
}

const MODULE_CACHE: &str = "ctxhost.stdlib.modules";

/// Registry key of the frozen entry config (`host.config`, the factory's `ctx.config`).
pub const CONFIG_KEY: &str = "ctxhost.config";

fn rt(msg: impl Into<String>) -> mlua::Error {
    mlua::Error::runtime(msg.into())
}

fn with_call<R>(lua: &Lua, name: &str, f: impl FnOnce(&HostCall) -> R) -> mlua::Result<R> {
    let scope = lua
        .app_data_ref::<CallScope>()
        .ok_or_else(|| rt(format!("{name} is only available inside a lifecycle call")))?;
    Ok(f(&scope.call))
}

fn byte_cap(lua: &Lua) -> usize {
    lua.app_data_ref::<ApiEnv>()
        .map(|e| e.limits.max_result_bytes)
        .unwrap_or(64 << 20)
}

fn max_messages(lua: &Lua) -> usize {
    lua.app_data_ref::<ApiEnv>()
        .map(|e| e.limits.max_result_messages)
        .unwrap_or(100_000)
}

/// Installs `host`, `require` and `print`; removes what reaches outside the sandbox.
pub fn install(lua: &Lua, config: &Json) -> mlua::Result<()> {
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
    let raw_tokens = lua.create_function(host_tokens)?;
    let tokens = lua
        .app_data_mut::<Resident>()
        .ok_or_else(|| rt("no resident state"))?
        .install_helpers(lua, raw_tokens)?;
    host.raw_set("tokens", tokens)?;
    host.raw_set("summarize", lua.create_function(host_summarize)?)?;
    host.raw_set(
        "delegateCompaction",
        lua.create_function(host_delegate_compaction)?,
    )?;
    host.raw_set("repairPairing", lua.create_function(host_repair_pairing)?)?;
    host.raw_set(
        "now",
        lua.create_function(|_, ()| {
            Ok(std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_secs_f64() * 1000.0)
                .unwrap_or(0.0))
        })?,
    )?;
    let log = lua.create_table()?;
    for (name, level) in [
        ("debug", LogLevel::Debug),
        ("info", LogLevel::Info),
        ("warn", LogLevel::Warn),
    ] {
        log.raw_set(
            name,
            lua.create_function(move |lua, args: MultiValue| {
                host_log(lua, level, &args);
                Ok(())
            })?,
        )?;
    }
    log.set_readonly(true);
    host.raw_set("log", log)?;
    let cfg = marshal::to_lua(lua, config)?;
    if let Value::Table(t) = &cfg {
        marshal::deep_freeze(t)?;
    }
    lua.set_named_registry_value(CONFIG_KEY, &cfg)?;
    host.raw_set("config", cfg)?;
    host.set_readonly(true);
    globals.raw_set("host", host)?;

    globals.raw_set("require", lua.create_function(require)?)?;
    globals.raw_set(
        "print",
        lua.create_function(|lua, args: MultiValue| {
            host_log(lua, LogLevel::Info, &args);
            Ok(())
        })?,
    )?;
    Ok(())
}

fn text_of(args: &MultiValue) -> String {
    let mut out = String::new();
    for (i, v) in args.iter().enumerate() {
        if i > 0 {
            out.push('\t');
        }
        match v {
            Value::String(s) => out.push_str(&s.to_string_lossy()),
            Value::Integer(n) => out.push_str(&n.to_string()),
            Value::Number(n) => out.push_str(&n.to_string()),
            Value::Boolean(b) => out.push_str(&b.to_string()),
            Value::Nil => out.push_str("nil"),
            other => out.push_str(&format!("<{}>", other.type_name())),
        }
    }
    out
}

fn host_log(lua: &Lua, level: LogLevel, args: &MultiValue) {
    let text = text_of(args);
    if let Some(scope) = lua.app_data_ref::<CallScope>() {
        scope.call.log(level, text);
        return;
    }
    let engine = lua
        .app_data_ref::<ApiEnv>()
        .map(|e| e.engine_id.clone())
        .unwrap_or_default();
    crate::host::log(&engine, None, level, text);
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
    let Some(src) = crate::stdlib::lua_module(&name) else {
        let known: Vec<&str> = crate::stdlib::LUA_MODULES.iter().map(|(n, _)| *n).collect();
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
    let value = if value.is_nil() {
        Value::Boolean(true)
    } else {
        value
    };
    cache.raw_set(name.as_str(), &value)?;
    Ok(value)
}

fn tokens_of_table(
    lua: &Lua,
    call: &HostCall,
    resident: &Resident,
    t: &Table,
    budget: &mut Budget,
) -> mlua::Result<u64> {
    if let Some(k) = resident.lookup(t) {
        if let Some(n) = k.tokens.get() {
            return Ok(n);
        }
        let n = call.tokens_message(&k.message);
        k.tokens.set(Some(n));
        return Ok(n);
    }
    let m = marshal::message_from(lua, resident, &Value::Table(t.clone()), budget)
        .map_err(|e| rt(format!("host.tokens: {e}")))?;
    Ok(call.tokens_message(&m))
}

/// `host.tokens(x)`: a string, one message, or a list of messages; the second value says
/// whether `x` is a resident message (whose count the Lua side may memoize).
fn host_tokens(lua: &Lua, v: Value) -> mlua::Result<(u64, bool)> {
    let scope = lua
        .app_data_ref::<CallScope>()
        .ok_or_else(|| rt("host.tokens is only available inside a lifecycle call"))?;
    let call = &scope.call;
    match &v {
        Value::String(s) => Ok((call.tokens_text(&s.to_string_lossy()), false)),
        Value::Table(t) => {
            let resident = lua
                .app_data_ref::<Resident>()
                .ok_or_else(|| rt("host.tokens: no resident messages"))?;
            let mut budget = Budget::new(byte_cap(lua));
            if resident.lookup(t).is_some() {
                return Ok((tokens_of_table(lua, call, &resident, t, &mut budget)?, true));
            }
            if t.raw_get::<Value>("role")?.is_string() {
                return Ok((
                    tokens_of_table(lua, call, &resident, t, &mut budget)?,
                    false,
                ));
            }
            let mut total = 0u64;
            for i in 1..=t.raw_len() {
                match t.raw_get::<Value>(i)? {
                    Value::Table(m) => {
                        total += tokens_of_table(lua, call, &resident, &m, &mut budget)
                            .map_err(|e| rt(format!("[{i}]: {e}")))?;
                    }
                    Value::String(s) => total += call.tokens_text(&s.to_string_lossy()),
                    other => {
                        return Err(rt(format!(
                            "host.tokens: item {i} is a {}, expected a message",
                            other.type_name()
                        )));
                    }
                }
            }
            Ok((total, false))
        }
        Value::Nil => Ok((0, false)),
        other => Err(rt(format!(
            "host.tokens expects a string, a message or a list of messages, got {}",
            other.type_name()
        ))),
    }
}

fn messages_arg(lua: &Lua, name: &str, v: &Value) -> mlua::Result<Vec<Arc<Message>>> {
    let resident = lua
        .app_data_ref::<Resident>()
        .ok_or_else(|| rt(format!("{name}: no resident messages")))?;
    let mut budget = Budget::new(byte_cap(lua));
    marshal::messages_from(lua, &resident, v, &mut budget, max_messages(lua))
        .map_err(|e| rt(format!("{name}: messages {e}")))
}

fn json_arg(lua: &Lua, name: &str, v: &Value) -> mlua::Result<Json> {
    let mut budget = Budget::new(byte_cap(lua));
    marshal::to_json(lua, v, &mut budget).map_err(|e| rt(format!("{name}: {}", e.describe(""))))
}

/// `host.summarize(messages, opts)` → `{text, tokens}`.
fn host_summarize(lua: &Lua, (messages, opts): (Value, Value)) -> mlua::Result<Table> {
    let messages = messages_arg(lua, "host.summarize", &messages)?;
    let opts = match &opts {
        Value::Nil => None,
        v => Some(json_arg(lua, "host.summarize opts", v)?),
    };
    let opts = crate::host::summarize_options(opts).map_err(rt)?;
    let out = with_call(lua, "host.summarize", |call| {
        call.summarize(&messages, &opts)
    })?
    .map_err(|e| rt(format!("host.summarize: {e}")))?;
    let t = lua.create_table()?;
    t.raw_set("text", out.text)?;
    t.raw_set("tokens", out.tokens)?;
    Ok(t)
}

/// `host.delegateCompaction(p)` → the built-in compaction's `CompactResult` as a table.
fn host_delegate_compaction(lua: &Lua, p: Table) -> mlua::Result<Value> {
    let mut map = Map::new();
    for field in crate::host::COMPACT_FIELDS {
        let v: Value = p.raw_get(field)?;
        if !v.is_nil() {
            map.insert(
                field.to_string(),
                json_arg(lua, &format!("host.delegateCompaction p.{field}"), &v)?,
            );
        }
    }
    let params = crate::host::delegate_params(map).map_err(rt)?;
    let result = with_call(lua, "host.delegateCompaction", |call| {
        call.delegate_compaction(&params)
    })?;
    marshal::to_lua(lua, &result)
}

/// `host.repairPairing(messages)` → the repaired list and the number of repairs.
fn host_repair_pairing(lua: &Lua, messages: Value) -> mlua::Result<(Table, usize)> {
    let input = messages_arg(lua, "host.repairPairing", &messages)?;
    // The tables the script passed, by message, so unchanged messages come back identical.
    let mut given: PtrMap<Table> = PtrMap::default();
    if let Value::Table(t) = &messages {
        for (i, m) in input.iter().enumerate() {
            if let Value::Table(mt) = t.raw_get::<Value>(i + 1)? {
                given.insert(Arc::as_ptr(m) as usize, mt);
            }
        }
    }
    let repaired = with_call(lua, "host.repairPairing", |call| call.repair_pairing(input))?;
    let out = lua.create_table_with_capacity(repaired.messages.len(), 0)?;
    out.set_metatable(Some(lua.array_metatable()))?;
    for (i, m) in repaired.messages.iter().enumerate() {
        let t = match given.get(&(Arc::as_ptr(m) as usize)) {
            Some(t) => t.clone(),
            None => {
                let mut resident = lua
                    .app_data_mut::<Resident>()
                    .ok_or_else(|| rt("host.repairPairing: no resident messages"))?;
                resident.temp_for(lua, m)?
            }
        };
        out.raw_set(i + 1, t)?;
    }
    Ok((out, repaired.repairs.len()))
}

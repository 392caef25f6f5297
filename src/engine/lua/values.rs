//! Moving data between the host and a Luau VM.
//!
//! Messages stay resident in the VM ([`Resident`]): a resident table maps back to the host's
//! very `Arc<Message>`; only new or copied tables are converted.
//!
//! Script values coming back are converted by [`to_json`], which (unlike mlua's serde path)
//! names the offending field and rejects NaN, infinities, non-UTF-8 strings, functions, cycles,
//! tables nested deeper than 128 levels and results over the byte cap. Values passed to `host.*`
//! become [`HostValue`]s ([`host_value`]).

use std::sync::Arc;

use mlua::serde::SerializeOptions;
use mlua::{Lua, LuaSerdeExt, Table, Value};
use serde::Serialize;
use serde_json::{Map, Value as Json};

pub(crate) use super::messages::Resident;
use super::messages::table_key;
use crate::contract::message::Message;
use crate::engine::api::HostValue;
use crate::engine::script::{self, Budget, ConvError, Nesting};

/// How host values become Lua values: `None` and `()` become `nil`, arrays get the array
/// metatable (then [`to_lua`] keeps it on the empty ones only, see [`mark_array`]).
pub(crate) fn ser_opts() -> SerializeOptions {
    SerializeOptions::new()
        .serialize_none_to_null(false)
        .serialize_unit_to_null(false)
        .set_array_metatable(true)
}

/// A host value as a Lua value.
pub(crate) fn to_lua<T: Serialize + ?Sized>(lua: &Lua, value: &T) -> mlua::Result<Value> {
    let v = lua.to_value_with(value, ser_opts())?;
    if let Value::Table(t) = &v {
        unmark_full_arrays(t, lua.array_metatable().to_pointer() as usize, false)?;
    }
    Ok(v)
}

/// Marks `t`, an array of `len` items the host made, as an array only when it is empty: the
/// mark is needed only there (an empty table goes back as `[]`, not `{}`), and a table with any
/// metatable takes the script's `t[i]` off Luau's fast path, several times slower.
pub(crate) fn mark_array(lua: &Lua, t: &Table, len: usize) -> mlua::Result<()> {
    t.set_metatable((len == 0).then(|| lua.array_metatable()))
}

/// Takes the array metatable off every non-empty array in `t` (see [`mark_array`]) and, with
/// `freeze`, makes every table read-only (one walk for both; a table already read-only is
/// left as it is, with what is inside it).
fn unmark_full_arrays(t: &Table, array_mt: usize, freeze: bool) -> mlua::Result<()> {
    if freeze && t.is_readonly() {
        return Ok(());
    }
    t.for_each(|_: Value, v: Value| {
        if let Value::Table(inner) = v {
            unmark_full_arrays(&inner, array_mt, freeze)?;
        }
        Ok(())
    })?;
    if t.raw_len() > 0 && is_array_mt(t, array_mt) {
        t.set_metatable(None)?;
    }
    if freeze {
        t.set_readonly(true);
    }
    Ok(())
}

/// Makes a table and every table inside it read-only (only the host's array marks on
/// non-empty arrays are taken off, as [`to_lua`] does; other metatables are left alone).
pub(crate) fn deep_freeze(lua: &Lua, t: &Table) -> mlua::Result<()> {
    unmark_full_arrays(t, lua.array_metatable().to_pointer() as usize, true)
}

/// A message as a frozen Lua table.
pub(crate) fn message_table(lua: &Lua, m: &Message) -> mlua::Result<Table> {
    match lua.to_value_with(m, ser_opts())? {
        Value::Table(t) => {
            deep_freeze(lua, &t)?;
            Ok(t)
        }
        other => Err(mlua::Error::runtime(format!(
            "message became a {} instead of a table",
            other.type_name()
        ))),
    }
}

// ---------------------------------------------------------------------------------------------
// Script values → JSON

fn is_array_mt(t: &Table, array_mt: usize) -> bool {
    t.metatable()
        .is_some_and(|mt| mt.to_pointer() as usize == array_mt)
}

/// Converts a script value to JSON, strictly (see the module docs).
pub(crate) fn to_json(lua: &Lua, v: &Value, budget: &mut Budget) -> Result<Json, ConvError> {
    let array_mt = lua.array_metatable().to_pointer() as usize;
    let mut stack = Nesting::default();
    conv(v, budget, &mut stack, array_mt)
}

fn conv(
    v: &Value,
    budget: &mut Budget,
    stack: &mut Nesting,
    array_mt: usize,
) -> Result<Json, ConvError> {
    budget.value()?;
    match v {
        Value::Nil => Ok(Json::Null),
        Value::Boolean(b) => Ok(Json::Bool(*b)),
        Value::Integer(i) => Ok(Json::from(*i)),
        Value::Number(n) => script::number(*n),
        Value::String(s) => {
            let bytes = s.as_bytes();
            budget.take(script::written_len(&bytes))?;
            match std::str::from_utf8(&bytes) {
                Ok(s) => Ok(Json::String(s.to_owned())),
                Err(e) => Err(ConvError::new(format!("string is not valid UTF-8 ({e})"))),
            }
        }
        Value::LightUserData(ud) if ud.0.is_null() => Ok(Json::Null),
        Value::Table(t) => table(t, budget, stack, array_mt),
        other => Err(ConvError::new(format!(
            "a {} cannot be part of a result",
            other.type_name()
        ))),
    }
}

fn table(
    t: &Table,
    budget: &mut Budget,
    stack: &mut Nesting,
    array_mt: usize,
) -> Result<Json, ConvError> {
    stack.enter(table_key(t))?;
    let out = table_inner(t, budget, stack, array_mt);
    stack.leave();
    out
}

fn table_inner(
    t: &Table,
    budget: &mut Budget,
    stack: &mut Nesting,
    array_mt: usize,
) -> Result<Json, ConvError> {
    let len = t.raw_len();
    if len > 0 || is_array_mt(t, array_mt) {
        let mut pairs = 0usize;
        let mut out = Vec::with_capacity(len);
        let mut err = None;
        // A table too big for the budget is refused before the walk, native work the
        // deadline cannot stop.
        budget.room_for(len)?;
        let walked = t.for_each(|k: Value, _: Value| {
            pairs += 1;
            if !matches!(k, Value::Integer(i) if i >= 1 && (i as usize) <= len) && err.is_none() {
                err = Some(ConvError::new(format!(
                    "table mixes array items with the key {}",
                    key_text(&k)
                )));
            }
            Ok(())
        });
        if let Err(e) = walked {
            return Err(ConvError::new(e.to_string()));
        }
        if let Some(e) = err {
            return Err(e);
        }
        if pairs != len {
            return Err(ConvError::new("array has holes (nil items)"));
        }
        for i in 1..=len {
            let v: Value = t.raw_get(i).map_err(|e| ConvError::new(e.to_string()))?;
            out.push(conv(&v, budget, stack, array_mt).map_err(|e| e.under(format!("[{i}]")))?);
        }
        return Ok(Json::Array(out));
    }
    let mut map = Map::new();
    let mut failure = None;
    // A failure stops the walk: the rest of a huge table is native work for nothing.
    let stop = || Err(mlua::Error::runtime("conversion failed"));
    let walked = t.for_each(|k: Value, v: Value| {
        let name = match &k {
            Value::String(s) => match s.to_str() {
                Ok(s) => s.to_string(),
                Err(_) => {
                    failure = Some(ConvError::new("a key is not valid UTF-8"));
                    return stop();
                }
            },
            other => {
                failure = Some(ConvError::new(format!(
                    "table mixes named fields with the key {}",
                    key_text(other)
                )));
                return stop();
            }
        };
        match conv(&v, budget, stack, array_mt) {
            Ok(j) => {
                map.insert(name, j);
                Ok(())
            }
            Err(e) => {
                failure = Some(e.under(name));
                stop()
            }
        }
    });
    if let Some(e) = failure {
        return Err(e);
    }
    if let Err(e) = walked {
        return Err(ConvError::new(e.to_string()));
    }
    Ok(Json::Object(map))
}

fn key_text(k: &Value) -> String {
    match k {
        Value::String(s) => format!("\"{}\"", s.to_string_lossy()),
        Value::Integer(i) => i.to_string(),
        Value::Number(n) => n.to_string(),
        other => format!("<{}>", other.type_name()),
    }
}

/// A script value that should be a message: the resident `Arc` for a resident table, else a
/// converted (validated) new message.
pub(crate) fn message_from(
    lua: &Lua,
    resident: &Resident,
    v: &Value,
    budget: &mut Budget,
) -> Result<Arc<Message>, String> {
    if let Value::Table(t) = v
        && let Some(k) = resident.lookup(t)
    {
        return Ok(k.message().clone());
    }
    if !matches!(v, Value::Table(_)) {
        return Err(format!("expected a message table, got {}", v.type_name()));
    }
    let json = to_json(lua, v, budget).map_err(|e| e.describe(""))?;
    crate::engine::api::message_from_json(json)
}

/// A script list of messages (a Lua array) as host messages.
pub(crate) fn messages_from(
    lua: &Lua,
    resident: &Resident,
    v: &Value,
    budget: &mut Budget,
    max: usize,
) -> Result<Vec<script::MessageRef>, String> {
    let Value::Table(t) = v else {
        return Err(format!(
            "expected a list of messages, got {}",
            v.type_name()
        ));
    };
    let len = t.raw_len();
    script::check_count(len, max)?;
    if len == 0 {
        if t.is_empty() {
            // An empty list: nothing to map (and no call into the VM to learn so).
            return Ok(Vec::new());
        }
        // A message table has named fields only: a list with items is never one.
        if resident.lookup(t).is_some() {
            return Err("expected a list of messages, got one message".into());
        }
    }
    let (ids, pure) = resident.ids_of(t).map_err(|e| e.to_string())?;
    if !pure {
        return Err(
            "expected a list of messages, but the table also has other keys or holes".into(),
        );
    }
    // Runs of context positions are one item each: a kept tail crosses back as two numbers.
    let mut out = Vec::new();
    for (i, id) in ids.into_iter().enumerate() {
        if let Some(k) = resident.known_id(id) {
            script::MessageRef::push(&mut out, resident.message_ref(k.message()));
            continue;
        }
        let item: Value = t.raw_get(i + 1).map_err(|e| e.to_string())?;
        let m = message_from(lua, resident, &item, budget).map_err(|e| script::at_index(i, e))?;
        script::MessageRef::push(&mut out, resident.message_ref(&m));
    }
    Ok(out)
}

// ---------------------------------------------------------------------------------------------
// Script values → `host` arguments

/// A script value passed to a `host` function: a resident table as its message, a list as a
/// list (resident items by identity), named fields as JSON, a string as text.
pub(crate) fn host_value(
    lua: &Lua,
    resident: &Resident,
    v: &Value,
    budget: &mut Budget,
) -> Result<HostValue, ConvError> {
    match v {
        Value::String(s) => Ok(HostValue::Text(s.to_string_lossy())),
        Value::Table(t) if let Some(held) = resident.lookup(t) => {
            Ok(HostValue::Message(held.clone()))
        }
        // The context array is passed whole, shared (`host.fit(p.messages, …)`).
        Value::Table(t) if let Some(list) = resident.context_list(t) => {
            Ok(HostValue::Resident(list))
        }
        _ => {
            let array_mt = lua.array_metatable().to_pointer() as usize;
            host_value_in(resident, v, budget, &mut Nesting::default(), array_mt)
        }
    }
}

fn host_value_in(
    resident: &Resident,
    v: &Value,
    budget: &mut Budget,
    stack: &mut Nesting,
    array_mt: usize,
) -> Result<HostValue, ConvError> {
    Ok(match v {
        Value::Nil => HostValue::Nil,
        Value::LightUserData(ud) if ud.0.is_null() => HostValue::Nil,
        Value::String(s) => HostValue::Text(s.to_string_lossy()),
        Value::Boolean(_) | Value::Integer(_) | Value::Number(_) => {
            HostValue::Data(Box::new(conv(v, budget, stack, array_mt)?))
        }
        Value::Table(t) => {
            if let Some(held) = resident.lookup(t) {
                return Ok(HostValue::Message(held.clone()));
            }
            if t.raw_len() == 0 && !is_array_mt(t, array_mt) {
                return match table(t, budget, stack, array_mt)? {
                    Json::Object(m) => Ok(HostValue::Map(Box::new(m))),
                    other => Ok(HostValue::Data(Box::new(other))),
                };
            }
            stack.enter(table_key(t))?;
            let items = list_items(resident, t, budget, stack, array_mt);
            stack.leave();
            HostValue::List(items?)
        }
        other => HostValue::Other(other.type_name()),
    })
}

/// The items of a list passed to a `host` function, resident ones found in one crossing.
fn list_items(
    resident: &Resident,
    t: &Table,
    budget: &mut Budget,
    stack: &mut Nesting,
    array_mt: usize,
) -> Result<Vec<HostValue>, ConvError> {
    let (ids, pure) = resident
        .ids_of(t)
        .map_err(|e| ConvError::new(e.to_string()))?;
    if !pure {
        return Err(ConvError::new("list has other keys or holes"));
    }
    let mut out = Vec::with_capacity(ids.len());
    for (i, id) in ids.into_iter().enumerate() {
        if let Some(held) = resident.known_id(id) {
            out.push(HostValue::Message(held.clone()));
            continue;
        }
        let item: Value = t
            .raw_get(i + 1)
            .map_err(|e| ConvError::new(e.to_string()))?;
        out.push(
            host_value_in(resident, &item, budget, stack, array_mt)
                .map_err(|e| e.under(format!("[{}]", i + 1)))?,
        );
    }
    Ok(out)
}

/// Only `fields` of a table passed to a `host` function, as a [`HostValue::Map`] (the rest of
/// the table is never read); anything but a table as [`host_value`] has it.
pub(crate) fn host_fields(
    lua: &Lua,
    resident: &Resident,
    v: &Value,
    fields: &[&str],
    budget: &mut Budget,
) -> Result<HostValue, ConvError> {
    let Value::Table(t) = v else {
        return host_value(lua, resident, v, budget);
    };
    let array_mt = lua.array_metatable().to_pointer() as usize;
    let mut map = Map::new();
    for field in fields {
        let item: Value = t
            .raw_get(*field)
            .map_err(|e| ConvError::new(e.to_string()))?;
        if !item.is_nil() {
            let j = conv(&item, budget, &mut Nesting::default(), array_mt)
                .map_err(|e| e.under((*field).to_string()))?;
            map.insert((*field).to_string(), j);
        }
    }
    Ok(HostValue::Map(Box::new(map)))
}

#[cfg(test)]
#[path = "values_tests.rs"]
mod tests;

//! Moving data between the host and a Luau VM.
//!
//! Messages stay **resident**: the session context lives in the VM as a frozen Lua array of
//! frozen message tables, updated by diff on each call, so a turn marshals only what is new.
//! A table the script returns that is one of those resident tables maps back to the host's very
//! `Arc<Message>` by identity; only new or copied tables are converted.
//!
//! Script values coming back are converted by [`to_json`], which (unlike mlua's serde path)
//! names the offending field and rejects NaN, infinities, non-UTF-8 strings, functions, cycles,
//! tables nested deeper than 128 levels and results over the byte cap.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};
use std::sync::Arc;

use mlua::serde::SerializeOptions;
use mlua::{Function, Lua, LuaSerdeExt, Table, Value};
use serde::Serialize;
use serde_json::{Map, Value as Json};

use crate::engine::script::{self, Budget, ConvError, Nesting};
use crate::host::{HeldMessage, HostValue};
use crate::message::Message;

/// How host values become Lua values: `None` and `()` become `nil`, arrays keep the array
/// metatable so `{}` round-trips as an array.
pub fn ser_opts() -> SerializeOptions {
    SerializeOptions::new()
        .serialize_none_to_null(false)
        .serialize_unit_to_null(false)
        .set_array_metatable(true)
}

/// A host value as a Lua value.
pub fn to_lua<T: Serialize + ?Sized>(lua: &Lua, value: &T) -> mlua::Result<Value> {
    lua.to_value_with(value, ser_opts())
}

/// Makes a table and every table inside it read-only (metatables are left alone).
pub fn deep_freeze(t: &Table) -> mlua::Result<()> {
    if t.is_readonly() {
        return Ok(());
    }
    t.for_each(|_: Value, v: Value| {
        if let Value::Table(inner) = v {
            deep_freeze(&inner)?;
        }
        Ok(())
    })?;
    t.set_readonly(true);
    Ok(())
}

/// A message as a frozen Lua table.
pub fn message_table(lua: &Lua, m: &Message) -> mlua::Result<Table> {
    match to_lua(lua, m)? {
        Value::Table(t) => {
            deep_freeze(&t)?;
            Ok(t)
        }
        other => Err(mlua::Error::runtime(format!(
            "message became a {} instead of a table",
            other.type_name()
        ))),
    }
}

/// Hashes pointers (already well spread) with one multiply.
#[derive(Default)]
pub struct PtrHasher(u64);

impl Hasher for PtrHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.0 = (self.0.rotate_left(8) ^ u64::from(*b)).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        }
    }
    fn write_usize(&mut self, n: usize) {
        self.0 = (n as u64)
            .wrapping_mul(0x9E37_79B9_7F4A_7C15)
            .rotate_right(29);
    }
}

/// A map keyed by pointers.
pub type PtrMap<V> = HashMap<usize, V, BuildHasherDefault<PtrHasher>>;

fn msg_key(m: &Arc<Message>) -> usize {
    Arc::as_ptr(m) as usize
}

fn table_key(t: &Table) -> usize {
    t.to_pointer() as usize
}

/// Lua helpers that run inside the VM, where touching tables is cheapest. `ids` maps each
/// resident table to its slab id; `map` turns a list into a buffer of ids (0 = not resident)
/// plus whether the list is a pure array; `memoize(f)` keeps `f`'s result per resident message
/// table (frozen, so the result cannot go stale: `host.tokens`).
const HELPERS: &str = r#"
local ids = ...
local function memoize(f)
  local memo = setmetatable({}, { __mode = "k" })
  return function(x, ...)
    if type(x) == "table" then
      local n = memo[x]
      if n ~= nil then return n end
      n = f(x, ...)
      if ids[x] ~= nil then memo[x] = n end
      return n
    end
    return f(x, ...)
  end
end
local function map(list)
  local n = rawlen(list)
  local count = 0
  for _ in next, list do count += 1 end
  local buf = buffer.create(n * 4)
  for i = 1, n do
    local id = ids[rawget(list, i)]
    if id then buffer.writeu32(buf, (i - 1) * 4, id) end
  end
  return buf, count == n
end
return memoize, map
"#;

/// The messages resident in one VM (kept in the VM's app data so `host.*` can see them).
#[derive(Debug)]
pub struct Resident {
    /// Lua table: resident message table → slab id.
    ids: Table,
    /// The `map` helper.
    map_fn: Function,
    /// The `memoize` helper.
    memoize_fn: Function,
    /// Slab of resident messages; id `n` is `slab[n - 1]`.
    slab: Vec<Option<Arc<HeldMessage>>>,
    /// Free slab ids.
    free: Vec<u32>,
    /// The context the array mirrors (kept so `Arc::ptr_eq` can skip an unchanged context).
    ctx: Option<Arc<Vec<Arc<Message>>>>,
    /// The message tables, aligned with `ctx`.
    entries: Vec<Table>,
    /// The frozen Lua array handed to scripts as `p.messages`.
    array: Option<Table>,
    /// Message `Arc` pointer → index in `entries`.
    by_msg: PtrMap<usize>,
    /// Tables marshalled outside the context (ingest, batches), adopted by the next sync.
    pending: PtrMap<(Arc<Message>, Table)>,
    /// Tables made during one call (e.g. by `host.repairPairing`); dropped when the call ends.
    temps: Vec<Table>,
}

impl Resident {
    /// An empty set of resident messages for `lua`, with its helpers compiled.
    pub fn new(lua: &Lua) -> mlua::Result<Self> {
        let ids = lua.create_table()?;
        let (memoize_fn, map_fn): (Function, Function) = lua
            .load(HELPERS)
            .set_name("=host")
            .set_mode(mlua::chunk::ChunkMode::Text)
            .call(ids.clone())?;
        Ok(Resident {
            ids,
            map_fn,
            memoize_fn,
            slab: Vec::new(),
            free: Vec::new(),
            ctx: None,
            entries: Vec::new(),
            array: None,
            by_msg: PtrMap::default(),
            pending: PtrMap::default(),
            temps: Vec::new(),
        })
    }

    /// `f` with its result kept per resident message table passed as the first argument (for
    /// [`HostFn::per_message`](crate::host::HostFn::per_message) functions).
    pub fn memoized(&self, f: Function) -> mlua::Result<Function> {
        self.memoize_fn.call(f)
    }

    fn register(&mut self, t: &Table, m: &Arc<Message>) -> mlua::Result<()> {
        let id = match self.free.pop() {
            Some(id) => id,
            None => {
                self.slab.push(None);
                u32::try_from(self.slab.len())
                    .map_err(|_| mlua::Error::runtime("too many resident messages"))?
            }
        };
        if let Some(slot) = self.slab.get_mut(id as usize - 1) {
            *slot = Some(Arc::new(HeldMessage::new(m.clone())));
        }
        self.ids.raw_set(t, id)
    }

    fn unregister(&mut self, t: &Table) {
        if let Ok(Some(id)) = self.ids.raw_get::<Option<u32>>(t) {
            let _ = self.ids.raw_set(t, Value::Nil);
            if let Some(slot) = self.slab.get_mut((id as usize).wrapping_sub(1)) {
                *slot = None;
                self.free.push(id);
            }
        }
    }

    fn known_id(&self, id: u32) -> Option<&Arc<HeldMessage>> {
        self.slab
            .get((id as usize).wrapping_sub(1))
            .and_then(Option::as_ref)
    }

    /// The host message behind a resident table, if it is one.
    pub fn lookup(&self, t: &Table) -> Option<&Arc<HeldMessage>> {
        let id = self.ids.raw_get::<Option<u32>>(t).ok()??;
        self.known_id(id)
    }

    /// The resident id of each item of the list `t` in one crossing (0 = not resident), and
    /// whether `t` is a pure array (no other keys, no holes).
    fn ids_of(&self, t: &Table) -> mlua::Result<(Vec<u32>, bool)> {
        let (buf, pure): (mlua::Buffer, bool) = self.map_fn.call(t.clone())?;
        let ids = buf
            .to_vec()
            .chunks_exact(4)
            .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect();
        Ok((ids, pure))
    }

    fn marshal(&mut self, lua: &Lua, m: &Arc<Message>) -> mlua::Result<Table> {
        let t = message_table(lua, m)?;
        self.register(&t, m)?;
        Ok(t)
    }

    /// The resident table of a host message, marshalling (and keeping) it when new.
    pub fn table_for(&mut self, lua: &Lua, m: &Arc<Message>) -> mlua::Result<Table> {
        if let Some(&i) = self.by_msg.get(&msg_key(m))
            && let Some(t) = self.entries.get(i)
        {
            return Ok(t.clone());
        }
        if let Some((_, t)) = self.pending.get(&msg_key(m)) {
            return Ok(t.clone());
        }
        let t = self.marshal(lua, m)?;
        self.pending.insert(msg_key(m), (m.clone(), t.clone()));
        Ok(t)
    }

    /// A call-scoped table for a message that is not resident (dropped at [`Resident::end_call`]).
    pub fn temp_for(&mut self, lua: &Lua, m: &Arc<Message>) -> mlua::Result<Table> {
        if let Some(&i) = self.by_msg.get(&msg_key(m))
            && let Some(t) = self.entries.get(i)
        {
            return Ok(t.clone());
        }
        let t = self.marshal(lua, m)?;
        self.temps.push(t.clone());
        Ok(t)
    }

    /// Forgets the call's temporaries (their identity mapping ends with the call).
    pub fn end_call(&mut self) {
        for t in std::mem::take(&mut self.temps) {
            self.unregister(&t);
        }
        if self.pending.len() > 100_000 {
            self.drop_pending();
        }
    }

    fn drop_pending(&mut self) {
        let pending: Vec<Table> = self.pending.drain().map(|(_, (_, t))| t).collect();
        for t in pending {
            self.unregister(&t);
        }
    }

    /// Brings the resident array in line with `ctx` and returns it.
    ///
    /// Unchanged context: nothing. Appended messages: only they are marshalled. Anything else
    /// (a compaction gives `[summary, kept…]`): the array is rebuilt, reusing every table whose
    /// message is still there, so only the new summary is marshalled.
    pub fn sync(&mut self, lua: &Lua, ctx: &Arc<Vec<Arc<Message>>>) -> mlua::Result<Table> {
        let change = match &self.array {
            Some(_) => script::context_change(self.ctx.as_ref(), ctx),
            None => script::ContextChange::Rebuilt,
        };
        if let (script::ContextChange::Same, Some(array)) = (change, &self.array) {
            return Ok(array.clone());
        }
        let n_old = self.entries.len();
        let is_prefix = matches!(change, script::ContextChange::Appended(_));
        let array = if is_prefix && let Some(array) = self.array.clone() {
            array.set_readonly(false);
            let appended = self.append(lua, &array, &ctx[n_old..]);
            array.set_readonly(true);
            appended?;
            array
        } else {
            self.rebuild(lua, ctx)?
        };
        self.drop_pending();
        self.ctx = Some(ctx.clone());
        self.array = Some(array.clone());
        Ok(array)
    }

    fn adopt(&mut self, lua: &Lua, m: &Arc<Message>) -> mlua::Result<Table> {
        if let Some((_, t)) = self.pending.remove(&msg_key(m)) {
            return Ok(t);
        }
        self.marshal(lua, m)
    }

    fn append(&mut self, lua: &Lua, array: &Table, new: &[Arc<Message>]) -> mlua::Result<()> {
        for m in new {
            let t = self.adopt(lua, m)?;
            let i = self.entries.len();
            array.raw_set(i + 1, &t)?;
            self.by_msg.insert(msg_key(m), i);
            self.entries.push(t);
        }
        Ok(())
    }

    fn rebuild(&mut self, lua: &Lua, ctx: &Arc<Vec<Arc<Message>>>) -> mlua::Result<Table> {
        let old_entries = std::mem::take(&mut self.entries);
        let old_by_msg = std::mem::take(&mut self.by_msg);
        let array = lua.create_table_with_capacity(ctx.len(), 0)?;
        array.set_metatable(Some(lua.array_metatable()))?;
        for (i, m) in ctx.iter().enumerate() {
            let reused = old_by_msg
                .get(&msg_key(m))
                .and_then(|&j| old_entries.get(j))
                .cloned();
            let t = match reused {
                Some(t) => t,
                None => self.adopt(lua, m)?,
            };
            array.raw_set(i + 1, &t)?;
            self.by_msg.insert(msg_key(m), i);
            self.entries.push(t);
        }
        // Tables of messages that left the context are forgotten.
        let kept: std::collections::HashSet<usize, BuildHasherDefault<PtrHasher>> =
            self.entries.iter().map(table_key).collect();
        for t in &old_entries {
            if !kept.contains(&table_key(t)) {
                self.unregister(t);
            }
        }
        array.set_readonly(true);
        Ok(array)
    }
}

// ---------------------------------------------------------------------------------------------
// Script values → JSON

fn is_array_mt(t: &Table, array_mt: usize) -> bool {
    t.metatable()
        .is_some_and(|mt| mt.to_pointer() as usize == array_mt)
}

/// Converts a script value to JSON, strictly (see the module docs).
pub fn to_json(lua: &Lua, v: &Value, budget: &mut Budget) -> Result<Json, ConvError> {
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
    match v {
        Value::Nil => Ok(Json::Null),
        Value::Boolean(b) => Ok(Json::Bool(*b)),
        Value::Integer(i) => Ok(Json::from(*i)),
        Value::Number(n) => script::number(*n),
        Value::String(s) => {
            let bytes = s.as_bytes();
            budget.take(bytes.len())?;
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
    let walked = t.for_each(|k: Value, v: Value| {
        if failure.is_some() {
            return Ok(());
        }
        let name = match &k {
            Value::String(s) => match s.to_str() {
                Ok(s) => s.to_string(),
                Err(_) => {
                    failure = Some(ConvError::new("a key is not valid UTF-8"));
                    return Ok(());
                }
            },
            other => {
                failure = Some(ConvError::new(format!(
                    "table mixes named fields with the key {}",
                    key_text(other)
                )));
                return Ok(());
            }
        };
        match conv(&v, budget, stack, array_mt) {
            Ok(j) => {
                map.insert(name, j);
            }
            Err(e) => failure = Some(e.under(name)),
        }
        Ok(())
    });
    if let Err(e) = walked {
        return Err(ConvError::new(e.to_string()));
    }
    match failure {
        Some(e) => Err(e),
        None => Ok(Json::Object(map)),
    }
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
pub fn message_from(
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
    crate::host::message_from_json(json)
}

/// A script list of messages (a Lua array) as host messages.
pub fn messages_from(
    lua: &Lua,
    resident: &Resident,
    v: &Value,
    budget: &mut Budget,
    max: usize,
) -> Result<Vec<Arc<Message>>, String> {
    let Value::Table(t) = v else {
        return Err(format!(
            "expected a list of messages, got {}",
            v.type_name()
        ));
    };
    if resident.lookup(t).is_some() {
        return Err("expected a list of messages, got one message".into());
    }
    let len = t.raw_len();
    script::check_count(len, max)?;
    let (ids, pure) = resident.ids_of(t).map_err(|e| e.to_string())?;
    if !pure {
        return Err(
            "expected a list of messages, but the table also has other keys or holes".into(),
        );
    }
    let mut out = Vec::with_capacity(len);
    for (i, id) in ids.into_iter().enumerate() {
        if let Some(k) = resident.known_id(id) {
            out.push(k.message().clone());
            continue;
        }
        let item: Value = t.raw_get(i + 1).map_err(|e| e.to_string())?;
        out.push(message_from(lua, resident, &item, budget).map_err(|e| script::at_index(i, e))?);
    }
    Ok(out)
}

// ---------------------------------------------------------------------------------------------
// Script values → `host` arguments

/// A script value passed to a `host` function: a resident table as its message, a list as a
/// list (resident items by identity), named fields as JSON, a string as text.
pub fn host_value(
    lua: &Lua,
    resident: &Resident,
    v: &Value,
    budget: &mut Budget,
) -> Result<HostValue, ConvError> {
    let array_mt = lua.array_metatable().to_pointer() as usize;
    host_value_in(resident, v, budget, &mut Nesting::default(), array_mt)
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
            HostValue::Data(conv(v, budget, stack, array_mt)?)
        }
        Value::Table(t) => {
            if let Some(held) = resident.lookup(t) {
                return Ok(HostValue::Message(held.clone()));
            }
            if t.raw_len() == 0 && !is_array_mt(t, array_mt) {
                return match table(t, budget, stack, array_mt)? {
                    Json::Object(m) => Ok(HostValue::Map(m)),
                    other => Ok(HostValue::Data(other)),
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
pub fn host_fields(
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
    Ok(HostValue::Map(map))
}

#[cfg(test)]
#[path = "marshal_tests.rs"]
mod tests;

//! Moving data between the host and a Rhai engine.
//!
//! Messages stay **resident**: each message the VM has seen is one `ScriptMessage` handle,
//! and the session context is one `MessageList` of them, updated by diff on each call. A
//! handle that comes back maps to the host's very `Arc<Message>` (nothing can change it); any
//! other map is converted as a new message.
//!
//! Script values are converted to JSON by [`to_json`], which names the offending field and
//! rejects NaN, infinities, functions, cycles, nesting deeper than 128 levels and results over
//! the byte cap. The engine has no Rhai size limits (they make building arrays O(N²)); this walk
//! is where result sizes are checked (memory is the meter's, see `memory`).

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use rhai::{Array, Dynamic, Map};
use serde_json::{Map as JsonMap, Value as Json};

use super::messages::{MessageList, ScriptMessage};
use crate::contract::message::Message;
use crate::engine::api::{HeldMessage, HostValue};
use crate::engine::script::{self, Budget, ConvError, Nesting};

/// The messages resident in one VM.
#[derive(Debug, Default)]
pub(crate) struct Resident {
    /// Message `Arc` pointer → its handle (a read-only `Dynamic`), for every resident message.
    by_msg: HashMap<usize, Dynamic>,
    /// The context the list mirrors (see [`script::ContextSeen`]).
    ctx: Option<script::ContextSeen>,
    /// The handles of the context, handed to scripts as `p.messages`.
    list: Option<Arc<Vec<Dynamic>>>,
    /// The context's held messages, in order, made when a `host` function is first passed
    /// `p.messages` (then shared, not converted item by item) and extended after appends.
    held: Option<Arc<Vec<Arc<HeldMessage>>>>,
    /// Messages made resident for one call only (ingest, batches, `host::repairPairing`).
    temps: Vec<Arc<Message>>,
}

fn msg_key(m: &Arc<Message>) -> usize {
    Arc::as_ptr(m) as usize
}

fn handle(m: &Arc<Message>) -> Result<Dynamic, String> {
    Ok(Dynamic::from(ScriptMessage::new(m)?).into_read_only())
}

fn list_value(list: &Arc<Vec<Dynamic>>) -> Dynamic {
    Dynamic::from(MessageList(list.clone())).into_read_only()
}

impl Resident {
    /// The handle of a host message, made resident for this call when new.
    pub(crate) fn value_for(&mut self, m: &Arc<Message>) -> Result<Dynamic, String> {
        if let Some(v) = self.by_msg.get(&msg_key(m)) {
            return Ok(v.clone());
        }
        let v = handle(m)?;
        self.by_msg.insert(msg_key(m), v.clone());
        self.temps.push(m.clone());
        Ok(v)
    }

    /// A read-only list of host messages, for one call.
    pub(crate) fn list(&mut self, messages: &[Arc<Message>]) -> Result<Dynamic, String> {
        let out = messages
            .iter()
            .map(|m| self.value_for(m))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(list_value(&Arc::new(out)))
    }

    /// The held messages of `l` when it is the context list (`p.messages`), shared: kept from
    /// call to call and extended by what was appended since (a call costs what is new, not the
    /// history). `None` for any other list.
    pub(crate) fn held_list(&mut self, l: &MessageList) -> Option<Arc<Vec<Arc<HeldMessage>>>> {
        let list = self.list.as_ref()?;
        if !Arc::ptr_eq(list, &l.0) {
            return None;
        }
        script::held_context(&mut self.held, list.len(), |i| {
            list[i]
                .read_lock::<ScriptMessage>()
                .map(|m| m.held().clone())
        })
    }

    /// Forgets the call's temporaries that did not join the context.
    pub(crate) fn end_call(&mut self) {
        if self.temps.is_empty() {
            return;
        }
        let context: HashSet<usize> = self
            .ctx
            .iter()
            .flat_map(|c| c.keys().iter().copied())
            .collect();
        for m in std::mem::take(&mut self.temps) {
            if !context.contains(&msg_key(&m)) {
                self.by_msg.remove(&msg_key(&m));
            }
        }
    }

    /// Brings the resident list in line with `ctx` and returns it (a cheap handle).
    ///
    /// Unchanged context: nothing. Appended messages: only they are made resident. Anything else
    /// (a compaction gives `[summary, kept…]`): the list is rebuilt from the handles already
    /// resident, so only the new summary is new.
    pub(crate) fn sync(&mut self, ctx: &Arc<Vec<Arc<Message>>>) -> Result<Dynamic, String> {
        let change = match &self.list {
            Some(_) => script::context_change(self.ctx.as_ref(), ctx),
            None => script::ContextChange::Rebuilt,
        };
        let mut list = match (change, self.list.take()) {
            (script::ContextChange::Same, Some(list)) => {
                let out = list_value(&list);
                self.list = Some(list);
                return Ok(out);
            }
            // The held list stays: it is a prefix of the new one (extended when asked for).
            (script::ContextChange::Appended(_), Some(list)) => list,
            _ => {
                self.held = None;
                let kept: HashSet<usize> = ctx.iter().map(msg_key).collect();
                self.by_msg.retain(|k, _| kept.contains(k));
                Arc::new(Vec::with_capacity(ctx.len()))
            }
        };
        let start = list.len();
        // A script that kept the list (in `this`) holds a reference: then this copies it once.
        let items = Arc::make_mut(&mut list);
        for m in &ctx[start..] {
            let v = match self.by_msg.get(&msg_key(m)) {
                Some(v) => v.clone(),
                None => {
                    let v = handle(m)?;
                    self.by_msg.insert(msg_key(m), v.clone());
                    v
                }
            };
            items.push(v);
        }
        script::ContextSeen::update(&mut self.ctx, ctx, change);
        let out = list_value(&list);
        self.list = Some(list);
        Ok(out)
    }
}

/// The host message behind `v`, if `v` is a message handle.
pub(crate) fn host_message(v: &Dynamic) -> Option<Arc<Message>> {
    v.read_lock::<ScriptMessage>().map(|m| m.message().clone())
}

// ---------------------------------------------------------------------------------------------
// Script values → JSON

/// Converts a script value to JSON, strictly (see the module docs).
pub(crate) fn to_json(v: &Dynamic, budget: &mut Budget) -> Result<Json, ConvError> {
    conv(v, budget, &mut Nesting::default())
}

/// The address of the value a shared `Dynamic` holds (`None` when not shared).
fn cell(d: &Dynamic) -> Option<usize> {
    if !d.is_shared() {
        return None;
    }
    d.read_lock::<Dynamic>()
        .map(|g| &*g as *const Dynamic as usize)
}

/// Converts each item of a list with `f`; an error names the item (`[i]`, counted from 1).
fn each<T>(
    items: &[Dynamic],
    mut f: impl FnMut(&Dynamic) -> Result<T, ConvError>,
) -> Result<Vec<T>, ConvError> {
    let mut out = Vec::with_capacity(items.len());
    for (i, item) in items.iter().enumerate() {
        out.push(f(item).map_err(|e| e.under(format!("[{}]", i + 1)))?);
    }
    Ok(out)
}

/// Runs `f` one nesting level down, inside the container at address `key`.
fn nested<T>(
    nest: &mut Nesting,
    key: usize,
    f: impl FnOnce(&mut Nesting) -> Result<T, ConvError>,
) -> Result<T, ConvError> {
    nest.enter(key)?;
    let out = f(nest);
    nest.leave();
    out
}

/// Runs `f` on the value a shared `Dynamic` holds, one nesting level down (a shared value can
/// hold itself).
fn inside_shared<T>(
    v: &Dynamic,
    nest: &mut Nesting,
    f: impl FnOnce(&Dynamic, &mut Nesting) -> Result<T, ConvError>,
) -> Result<T, ConvError> {
    let key = cell(v).unwrap_or(0);
    let guard = v
        .read_lock::<Dynamic>()
        .ok_or_else(|| ConvError::new("a shared value is locked"))?;
    nested(nest, key, |nest| f(&guard, nest))
}

/// A host message as JSON, its size charged to `budget` like any other result text.
fn message_json(m: &Message, budget: &mut Budget) -> Result<Json, ConvError> {
    let j = serde_json::to_value(m).map_err(|e| ConvError::new(e.to_string()))?;
    budget.take(j.to_string().len())?;
    Ok(j)
}

fn conv(v: &Dynamic, budget: &mut Budget, nest: &mut Nesting) -> Result<Json, ConvError> {
    budget.value()?;
    if let Some(m) = v.read_lock::<ScriptMessage>() {
        return message_json(m.message(), budget);
    }
    if let Some(l) = v.read_lock::<MessageList>() {
        budget.room_for(l.0.len())?;
        return each(&l.0, |item| conv(item, budget, nest)).map(Json::Array);
    }
    if v.is_shared() {
        return inside_shared(v, nest, |inner, nest| conv(inner, budget, nest));
    }
    if v.is_unit() {
        return Ok(Json::Null);
    }
    if let Ok(b) = v.as_bool() {
        return Ok(Json::Bool(b));
    }
    if let Ok(i) = v.as_int() {
        return Ok(Json::from(i));
    }
    if let Ok(f) = v.as_float() {
        return script::number(f);
    }
    if let Ok(s) = v.as_immutable_string_ref() {
        return budget.string(&s);
    }
    if let Ok(c) = v.as_char() {
        return budget.string(&c.to_string());
    }
    if let Ok(a) = v.as_array_ref() {
        budget.room_for(a.len())?;
        let key = &*a as *const Array as usize;
        return nested(nest, key, |nest| each(&a, |item| conv(item, budget, nest)))
            .map(Json::Array);
    }
    if let Ok(m) = v.as_map_ref() {
        budget.room_for(m.len())?;
        let key = &*m as *const Map as usize;
        return nested(nest, key, |nest| {
            let mut out = JsonMap::new();
            for (k, item) in m.iter() {
                let j = conv(item, budget, nest).map_err(|e| e.under(k.to_string()))?;
                out.insert(k.to_string(), j);
            }
            Ok(Json::Object(out))
        });
    }
    let what = if v.is_fnptr() {
        "a function".to_string()
    } else {
        format!("a value of type {}", v.type_name())
    };
    Err(ConvError::new(format!("{what} cannot be part of a result")))
}

// ---------------------------------------------------------------------------------------------
// Script values → `host` arguments

/// A script value passed to a `host` function: a message handle as its message, a list (array
/// or message list) as a list, a map as JSON, a string as text.
pub(crate) fn host_value(v: &Dynamic, budget: &mut Budget) -> Result<HostValue, ConvError> {
    host_value_in(v, budget, &mut Nesting::default())
}

fn host_value_in(
    v: &Dynamic,
    budget: &mut Budget,
    nest: &mut Nesting,
) -> Result<HostValue, ConvError> {
    if let Some(m) = v.read_lock::<ScriptMessage>() {
        return Ok(HostValue::Message(m.held().clone()));
    }
    if let Some(l) = v.read_lock::<MessageList>() {
        budget.room_for(l.0.len())?;
        return each(&l.0, |item| host_value_in(item, budget, nest)).map(HostValue::List);
    }
    if v.is_shared() {
        return inside_shared(v, nest, |inner, nest| host_value_in(inner, budget, nest));
    }
    if v.is_unit() {
        return Ok(HostValue::Nil);
    }
    if let Ok(s) = v.as_immutable_string_ref() {
        return Ok(HostValue::Text(s.to_string()));
    }
    if let Ok(c) = v.as_char() {
        return Ok(HostValue::Text(c.to_string()));
    }
    if let Ok(a) = v.as_array_ref() {
        budget.room_for(a.len())?;
        let key = &*a as *const Array as usize;
        return nested(nest, key, |nest| {
            each(&a, |item| host_value_in(item, budget, nest))
        })
        .map(HostValue::List);
    }
    if v.is_map() {
        return match conv(v, budget, nest)? {
            Json::Object(m) => Ok(HostValue::Map(Box::new(m))),
            other => Ok(HostValue::Data(Box::new(other))),
        };
    }
    if v.is_bool() || v.is_int() || v.is_float() {
        return conv(v, budget, nest).map(|j| HostValue::Data(Box::new(j)));
    }
    Ok(HostValue::Other(v.type_name()))
}

/// Only `fields` of a map passed to a `host` function, as a [`HostValue::Map`] (the rest of the
/// map is never read); anything but a map as itself.
pub(crate) fn host_fields(
    v: &Dynamic,
    fields: &[&str],
    budget: &mut Budget,
) -> Result<HostValue, ConvError> {
    let Ok(map) = v.as_map_ref() else {
        return host_value(v, budget);
    };
    let mut out = JsonMap::new();
    for field in fields {
        if let Some(item) = map.get(*field).filter(|item| !item.is_unit()) {
            let j = to_json(item, budget).map_err(|e| e.under((*field).to_string()))?;
            out.insert((*field).to_string(), j);
        }
    }
    Ok(HostValue::Map(Box::new(out)))
}

/// A host value (params, state, config, a compaction result) as a script value.
pub(crate) fn from_json(v: &Json) -> Result<Dynamic, String> {
    rhai::serde::to_dynamic(v).map_err(|e| e.to_string())
}

/// A script value that should be a message: the host's `Arc` for a handle, else a converted
/// (validated) new message.
pub(crate) fn message_from(v: &Dynamic, budget: &mut Budget) -> Result<Arc<Message>, String> {
    if let Some(m) = host_message(v) {
        return Ok(m);
    }
    if !v.is_map() {
        return Err(format!("expected a message map, got {}", v.type_name()));
    }
    let json = to_json(v, budget).map_err(|e| e.describe(""))?;
    crate::engine::api::message_from_json(json)
}

/// Runs `f` on the items of a script list of messages (an array or the host's list, never
/// copied), or says what is wrong with `v`.
pub(crate) fn with_items<R>(v: &Dynamic, f: impl FnOnce(&[Dynamic]) -> R) -> Result<R, String> {
    if let Some(l) = v.read_lock::<MessageList>() {
        return Ok(f(&l.0));
    }
    if v.is_map() || v.read_lock::<ScriptMessage>().is_some() {
        return Err("expected a list of messages, got one message".into());
    }
    let list = v
        .as_array_ref()
        .map_err(|_| format!("expected a list of messages, got {}", v.type_name()))?;
    Ok(f(&list))
}

/// A script list of messages as host messages.
pub(crate) fn messages_from(
    v: &Dynamic,
    budget: &mut Budget,
    max: usize,
) -> Result<Vec<Arc<Message>>, String> {
    with_items(v, |items| {
        script::check_count(items.len(), max)?;
        items
            .iter()
            .enumerate()
            .map(|(i, item)| message_from(item, budget).map_err(|e| script::at_index(i, e)))
            .collect()
    })?
}

//! Moving data between the host and a Rhai engine.
//!
//! Messages stay **resident**: each message the VM has seen is one *shared, read-only* Rhai map
//! whose inner tag is its slab id, and the session context is one shared, read-only array of
//! them, updated by diff on each call. Scripts get that array as `p.messages`; copying it (`let
//! ms = p.messages`) copies pointers, not messages.
//!
//! A value coming back maps to the host's very `Arc<Message>` when its tag names a resident
//! message **and** it is structurally identical to it ([`Resident::lookup`]). Rhai lets a script
//! copy a message and edit the copy (the copy keeps the tag), and — a Rhai gap — add a *new*
//! key to a read-only map reached through an index chain (`p.messages[0].x = 1`); existing keys
//! and arrays cannot change. So the check compares the value with the resident map and their
//! node counts with the count taken when the map was made: a copy that differs, or a resident
//! map that grew, is converted as a new message and never taken for the stored one.
//!
//! Script values are converted to JSON by [`to_json`], which names the offending field and
//! rejects NaN, infinities, functions, cycles, nesting deeper than 128 levels and results over
//! the byte cap. The engine itself has no size limits (they make building arrays O(N²)); this
//! walk is where sizes are checked.

use std::collections::HashMap;
use std::sync::Arc;

use rhai::{Array, Dynamic, Map};
use serde_json::{Map as JsonMap, Value as Json};

use crate::engine::script::{self, Budget, ConvError, Nesting};
use crate::message::Message;

/// A resident message: its shared map, the host's `Arc`, and the map's pristine node count.
#[derive(Debug)]
struct Entry {
    value: Dynamic,
    message: Arc<Message>,
    nodes: usize,
}

/// The messages resident in one VM.
#[derive(Debug, Default)]
pub struct Resident {
    /// Slab of resident messages; id `n` is `slab[n - 1]`.
    slab: Vec<Option<Entry>>,
    /// Free slab ids.
    free: Vec<u32>,
    /// Message `Arc` pointer → slab id, for every resident message.
    by_msg: HashMap<usize, u32>,
    /// The context the array mirrors (kept so `Arc::ptr_eq` can skip an unchanged context).
    ctx: Option<Arc<Vec<Arc<Message>>>>,
    /// Slab ids of the context, aligned with `ctx`.
    entries: Vec<u32>,
    /// The shared, read-only array handed to scripts as `p.messages`.
    array: Option<Dynamic>,
    /// Ids made for one call only (ingest, batches, `host::repairPairing`); freed at its end.
    temps: Vec<u32>,
}

fn msg_key(m: &Arc<Message>) -> usize {
    Arc::as_ptr(m) as usize
}

/// The address of the value a shared `Dynamic` holds (`None` when not shared).
fn cell(d: &Dynamic) -> Option<usize> {
    if !d.is_shared() {
        return None;
    }
    d.read_lock::<Dynamic>()
        .map(|g| &*g as *const Dynamic as usize)
}

impl Resident {
    /// A message as a tagged, read-only, shared map, registered under a new id.
    fn marshal(&mut self, m: &Arc<Message>) -> Result<u32, String> {
        let id = match self.free.pop() {
            Some(id) => id,
            None => {
                self.slab.push(None);
                u32::try_from(self.slab.len())
                    .ok()
                    .filter(|id| *id <= i32::MAX as u32)
                    .ok_or_else(|| "too many resident messages".to_string())?
            }
        };
        let mut value = rhai::serde::to_dynamic(&**m).map_err(|e| e.to_string())?;
        value.set_tag(id as i32);
        let nodes = nodes(&value);
        let value = value.into_read_only().into_shared();
        if let Some(slot) = self.slab.get_mut(id as usize - 1) {
            *slot = Some(Entry {
                value,
                message: m.clone(),
                nodes,
            });
        }
        self.by_msg.insert(msg_key(m), id);
        Ok(id)
    }

    fn release(&mut self, id: u32) {
        if let Some(slot) = self.slab.get_mut((id as usize).wrapping_sub(1))
            && let Some(e) = slot.take()
        {
            if self.by_msg.get(&msg_key(&e.message)) == Some(&id) {
                self.by_msg.remove(&msg_key(&e.message));
            }
            self.free.push(id);
        }
    }

    fn entry(&self, id: u32) -> Option<&Entry> {
        self.slab
            .get((id as usize).wrapping_sub(1))
            .and_then(Option::as_ref)
    }

    /// The resident value of a host message, marshalling it for this call when new.
    pub fn value_for(&mut self, m: &Arc<Message>) -> Result<Dynamic, String> {
        let id = match self.by_msg.get(&msg_key(m)) {
            Some(&id) => id,
            None => {
                let id = self.marshal(m)?;
                self.temps.push(id);
                id
            }
        };
        self.entry(id)
            .map(|e| e.value.clone())
            .ok_or_else(|| "lost a resident message".into())
    }

    /// A read-only array of host messages (resident values), for one call.
    pub fn list(&mut self, messages: &[Arc<Message>]) -> Result<Dynamic, String> {
        let mut out = Array::with_capacity(messages.len());
        for m in messages {
            out.push(self.value_for(m)?);
        }
        Ok(Dynamic::from_array(out).into_read_only())
    }

    /// Forgets the call's temporaries that did not join the context.
    pub fn end_call(&mut self) {
        if self.temps.is_empty() {
            return;
        }
        let context: std::collections::HashSet<u32> = self.entries.iter().copied().collect();
        for id in std::mem::take(&mut self.temps) {
            if !context.contains(&id) {
                self.release(id);
            }
        }
    }

    /// Brings the resident array in line with `ctx` and returns it (a cheap shared handle).
    ///
    /// Unchanged context: nothing. Appended messages: only they are marshalled. Anything else
    /// (a compaction gives `[summary, kept…]`): the array is rebuilt from the maps already
    /// resident, so only the new summary is marshalled.
    pub fn sync(&mut self, ctx: &Arc<Vec<Arc<Message>>>) -> Result<Dynamic, String> {
        let change = match &self.array {
            Some(_) => script::context_change(self.ctx.as_ref(), ctx),
            None => script::ContextChange::Rebuilt,
        };
        let (is_prefix, start) = match change {
            script::ContextChange::Same => {
                if let Some(array) = &self.array {
                    return Ok(array.clone());
                }
                (false, 0)
            }
            script::ContextChange::Appended(from) => (true, from),
            script::ContextChange::Rebuilt => (false, 0),
        };
        let mut array = match self.array.take() {
            Some(a) if is_prefix => a,
            _ => {
                let kept: std::collections::HashSet<usize> = ctx.iter().map(msg_key).collect();
                for id in std::mem::take(&mut self.entries) {
                    let gone = self
                        .entry(id)
                        .is_none_or(|e| !kept.contains(&msg_key(&e.message)));
                    if gone {
                        self.release(id);
                    }
                }
                Dynamic::from_array(Array::with_capacity(ctx.len()))
                    .into_read_only()
                    .into_shared()
            }
        };
        let mut added = Vec::with_capacity(ctx.len() - start);
        for m in &ctx[start..] {
            let id = match self.by_msg.get(&msg_key(m)) {
                Some(&id) => id,
                None => self.marshal(m)?,
            };
            self.entries.push(id);
            if let Some(e) = self.entry(id) {
                added.push(e.value.clone());
            }
        }
        {
            let mut guard = array
                .write_lock::<Array>()
                .ok_or_else(|| "the resident array is locked".to_string())?;
            guard.extend(added);
        }
        self.ctx = Some(ctx.clone());
        self.array = Some(array.clone());
        Ok(array)
    }

    /// The host message behind `v` if `v` is an unchanged resident message (see the module
    /// docs): a tag naming a resident map, the same structure, and no keys added since.
    pub fn lookup(&self, v: &Dynamic) -> Option<Arc<Message>> {
        let guard = v.read_lock::<Dynamic>()?;
        let inner: &Dynamic = &guard;
        let id = u32::try_from(inner.tag()).ok().filter(|id| *id > 0)?;
        let entry = self.entry(id)?;
        let same_cell = cell(v).is_some_and(|c| Some(c) == cell(&entry.value));
        let unchanged = if same_cell {
            nodes(inner) == entry.nodes
        } else {
            let resident = entry.value.read_lock::<Dynamic>()?;
            nodes(inner) == entry.nodes && equal(inner, &resident)
        };
        unchanged.then(|| entry.message.clone())
    }
}

/// Map entries, array items and scalars in `d`, all levels.
fn nodes(d: &Dynamic) -> usize {
    if d.is_shared() {
        return d.read_lock::<Dynamic>().map_or(1, |g| nodes(&g));
    }
    if let Ok(m) = d.as_map_ref() {
        return 1 + m.values().map(nodes).sum::<usize>();
    }
    if let Ok(a) = d.as_array_ref() {
        return 1 + a.iter().map(nodes).sum::<usize>();
    }
    1
}

/// Structural equality of two script values (maps, arrays, scalars).
fn equal(a: &Dynamic, b: &Dynamic) -> bool {
    if a.is_shared() || b.is_shared() {
        let (Some(x), Some(y)) = (a.read_lock::<Dynamic>(), b.read_lock::<Dynamic>()) else {
            return false;
        };
        return equal(&x, &y);
    }
    if let (Ok(x), Ok(y)) = (a.as_map_ref(), b.as_map_ref()) {
        return x.len() == y.len()
            && x.iter()
                .zip(y.iter())
                .all(|((ka, va), (kb, vb))| ka == kb && equal(va, vb));
    }
    if let (Ok(x), Ok(y)) = (a.as_array_ref(), b.as_array_ref()) {
        return x.len() == y.len() && x.iter().zip(y.iter()).all(|(p, q)| equal(p, q));
    }
    if let (Ok(x), Ok(y)) = (a.as_immutable_string_ref(), b.as_immutable_string_ref()) {
        return *x == *y;
    }
    if let (Ok(x), Ok(y)) = (a.as_int(), b.as_int()) {
        return x == y;
    }
    if let (Ok(x), Ok(y)) = (a.as_float(), b.as_float()) {
        return x.to_bits() == y.to_bits();
    }
    if let (Ok(x), Ok(y)) = (a.as_bool(), b.as_bool()) {
        return x == y;
    }
    a.is_unit() && b.is_unit()
}

// ---------------------------------------------------------------------------------------------
// Script values → JSON

/// Converts a script value to JSON, strictly (see the module docs).
pub fn to_json(v: &Dynamic, budget: &mut Budget) -> Result<Json, ConvError> {
    conv(v, budget, &mut Nesting::default())
}

fn conv(v: &Dynamic, budget: &mut Budget, nest: &mut Nesting) -> Result<Json, ConvError> {
    if v.is_shared() {
        let key = cell(v).unwrap_or(0);
        let guard = v
            .read_lock::<Dynamic>()
            .ok_or_else(|| ConvError::new("a shared value is locked"))?;
        nest.enter(key)?;
        let out = conv(&guard, budget, nest);
        nest.leave();
        return out;
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
        nest.enter(&*a as *const Array as usize)?;
        let mut out = Vec::with_capacity(a.len());
        for (i, item) in a.iter().enumerate() {
            match conv(item, budget, nest) {
                Ok(j) => out.push(j),
                Err(e) => {
                    nest.leave();
                    return Err(e.under(format!("[{}]", i + 1)));
                }
            }
        }
        nest.leave();
        return Ok(Json::Array(out));
    }
    if let Ok(m) = v.as_map_ref() {
        nest.enter(&*m as *const Map as usize)?;
        let mut out = JsonMap::new();
        for (k, item) in m.iter() {
            match conv(item, budget, nest) {
                Ok(j) => {
                    out.insert(k.to_string(), j);
                }
                Err(e) => {
                    nest.leave();
                    return Err(e.under(k.to_string()));
                }
            }
        }
        nest.leave();
        return Ok(Json::Object(out));
    }
    let what = if v.is_fnptr() {
        "a function".to_string()
    } else {
        format!("a value of type {}", v.type_name())
    };
    Err(ConvError::new(format!("{what} cannot be part of a result")))
}

/// A host value (params, state, config, a compaction result) as a script value.
pub fn from_json(v: &Json) -> Result<Dynamic, String> {
    rhai::serde::to_dynamic(v).map_err(|e| e.to_string())
}

/// A script value that should be a message: the resident `Arc` for an unchanged resident map,
/// else a converted (validated) new message.
pub fn message_from(
    resident: &Resident,
    v: &Dynamic,
    budget: &mut Budget,
) -> Result<Arc<Message>, String> {
    if let Some(m) = resident.lookup(v) {
        return Ok(m);
    }
    if !v.is_map() {
        return Err(format!("expected a message map, got {}", v.type_name()));
    }
    let json = to_json(v, budget).map_err(|e| e.describe(""))?;
    script::message_from_json(json)
}

/// A script list of messages as host messages.
pub fn messages_from(
    resident: &Resident,
    v: &Dynamic,
    budget: &mut Budget,
    max: usize,
) -> Result<Vec<Arc<Message>>, String> {
    if v.is_map() {
        return Err("expected a list of messages, got one message (a map)".into());
    }
    let list = v
        .as_array_ref()
        .map_err(|_| format!("expected a list of messages, got {}", v.type_name()))?;
    script::check_count(list.len(), max)?;
    list.iter()
        .enumerate()
        .map(|(i, item)| message_from(resident, item, budget).map_err(|e| script::at_index(i, e)))
        .collect()
}

//! The messages resident in one Luau VM.
//!
//! The session context lives in the VM as a frozen Lua array of frozen message tables, updated
//! by diff on each call, so a turn marshals only what is new. A table the script returns (or
//! passes to `host.*`) that is one of those resident tables maps back to the host's very
//! `Arc<Message>` by identity; only new or copied tables are converted.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};
use std::sync::Arc;

use mlua::{Function, Lua, Table, Value};

use super::values::{mark_array, message_table};
use crate::contract::message::Message;
use crate::engine::api::HeldMessage;
use crate::engine::script;

/// Hashes pointers (already well spread) with one multiply.
#[derive(Default)]
pub(super) struct PtrHasher(u64);

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
pub(super) type PtrMap<V> = HashMap<usize, V, BuildHasherDefault<PtrHasher>>;

fn msg_key(m: &Arc<Message>) -> usize {
    Arc::as_ptr(m) as usize
}

pub(super) fn table_key(t: &Table) -> usize {
    t.to_pointer() as usize
}

/// Lua helpers that run inside the VM, where touching tables is cheapest. `ids` maps each
/// resident table to its slab id; `map(list, ctx)` turns a list into a buffer of ids (0 = not
/// resident), whether the list is a pure array, and how many of its last items are the last
/// items of the context array `ctx`, in order (the newest messages a policy keeps: compared
/// by identity, not looked up, and left out of the buffer; a list with a metatable is only
/// looked up, so that no metamethod of the script's runs here); `memoize(f)` keeps the result
/// of `f`, a function of one argument, per resident message table (frozen, so the result
/// cannot go stale: `host.tokens`); `gather(list, runs, n)` makes a new list of `n` items of
/// `list` taken (raw) in runs, a buffer of u32 pairs (first index, count): a kept list without
/// one host-to-VM crossing per item (`host.fit`'s result).
const HELPERS: &str = r#"
local ids = ...
local function memoize(f)
  local memo = setmetatable({}, { __mode = "k" })
  return function(x)
    if type(x) == "table" then
      local n = memo[x]
      if n ~= nil then return n end
      n = f(x)
      if ids[x] ~= nil then memo[x] = n end
      return n
    end
    return f(x)
  end
end
local function map(list, ctx)
  local n = rawlen(list)
  local count = 0
  for _ in next, list do count += 1 end
  local tail = 0
  if ctx and getmetatable(list) == nil then
    local m = rawlen(ctx)
    local k = math.min(n, m)
    while tail < k and rawequal(list[n - tail], ctx[m - tail]) do
      tail += 1
    end
  end
  local head = n - tail
  local buf = buffer.create(head * 4)
  for i = 1, head do
    local id = rawget(ids, rawget(list, i))
    if id then buffer.writeu32(buf, (i - 1) * 4, id) end
  end
  return buf, count == n, tail
end
local function gather(list, runs, n)
  local out = table.create(n)
  local at = 1
  for r = 0, buffer.len(runs) - 8, 8 do
    local first, count = buffer.readu32(runs, r), buffer.readu32(runs, r + 4)
    table.move(list, first, first + count - 1, at, out)
    at += count
  end
  return out
end
return memoize, map, gather
"#;

/// A resident message table and its slab id.
#[derive(Debug, Clone)]
struct Entry {
    table: Table,
    id: u32,
}

/// The messages resident in one VM (kept in the VM's app data so `host.*` can see them).
#[derive(Debug)]
pub(crate) struct Resident {
    /// Lua table: resident message table → slab id.
    ids: Table,
    /// The `map` helper.
    map_fn: Function,
    /// The `memoize` helper.
    memoize_fn: Function,
    /// The `gather` helper.
    gather_fn: Function,
    /// Slab of resident messages; id `n` is `slab[n - 1]`.
    slab: Vec<Option<Arc<HeldMessage>>>,
    /// Free slab ids.
    free: Vec<u32>,
    /// The context the array mirrors (see [`script::ContextSeen`]).
    ctx: Option<script::ContextSeen>,
    /// The message tables, aligned with `ctx`.
    entries: Vec<Entry>,
    /// The frozen Lua array handed to scripts as `p.messages`.
    array: Option<Table>,
    /// Message `Arc` pointer → index in `entries`.
    by_msg: PtrMap<usize>,
    /// Tables marshalled outside the context (ingest, batches), adopted by the next sync.
    pending: PtrMap<(Arc<Message>, Entry)>,
    /// Tables made during one call (e.g. by `host.repairPairing`); dropped when the call ends.
    temps: Vec<Table>,
    /// The context's held messages, in order, made when a `host` function is first passed
    /// `p.messages` (then shared, not converted item by item) and extended after appends.
    held: parking_lot::Mutex<Option<Arc<Vec<Arc<HeldMessage>>>>>,
}

impl Resident {
    /// An empty set of resident messages for `lua`, with its helpers compiled.
    pub(crate) fn new(lua: &Lua) -> mlua::Result<Self> {
        let ids = lua.create_table()?;
        let (memoize_fn, map_fn, gather_fn): (Function, Function, Function) = lua
            .load(HELPERS)
            .set_name("=host")
            .set_mode(mlua::chunk::ChunkMode::Text)
            .call(ids.clone())?;
        Ok(Resident {
            ids,
            map_fn,
            memoize_fn,
            gather_fn,
            slab: Vec::new(),
            free: Vec::new(),
            ctx: None,
            entries: Vec::new(),
            array: None,
            by_msg: PtrMap::default(),
            pending: PtrMap::default(),
            temps: Vec::new(),
            held: parking_lot::Mutex::new(None),
        })
    }

    /// `f` with its result kept per resident message table passed as the first argument (for
    /// [`HostFn::per_message`](crate::engine::api::HostFn::per_message) functions).
    pub(crate) fn memoized(&self, f: Function) -> mlua::Result<Function> {
        self.memoize_fn.call(f)
    }

    /// The items of `list` at the 0-based `indices`, in order, as a new Lua array (raw reads,
    /// as `list[i]` with `rawget`), made inside the VM: consecutive indices are moved as one run.
    pub(crate) fn gather(&self, lua: &Lua, list: &Table, indices: &[usize]) -> mlua::Result<Table> {
        let mut runs: Vec<(u32, u32)> = Vec::new();
        for &i in indices {
            let first =
                u32::try_from(i + 1).map_err(|_| mlua::Error::runtime("index too large"))?;
            match runs.last_mut() {
                Some((start, count)) if start.checked_add(*count) == Some(first) => *count += 1,
                _ => runs.push((first, 1)),
            }
        }
        let mut bytes = Vec::with_capacity(runs.len() * 8);
        for (first, count) in runs {
            bytes.extend_from_slice(&first.to_le_bytes());
            bytes.extend_from_slice(&count.to_le_bytes());
        }
        let out: Table = self
            .gather_fn
            .call((list, lua.create_buffer(bytes)?, indices.len()))?;
        mark_array(lua, &out, indices.len())?;
        Ok(out)
    }

    fn register(&mut self, t: &Table, m: &Arc<Message>) -> mlua::Result<u32> {
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
        self.ids.raw_set(t, id)?;
        Ok(id)
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

    /// The message behind a resident id (0: none).
    pub(super) fn known_id(&self, id: u32) -> Option<&Arc<HeldMessage>> {
        self.slab
            .get((id as usize).wrapping_sub(1))
            .and_then(Option::as_ref)
    }

    /// The host message behind a resident table, if it is one.
    pub(crate) fn lookup(&self, t: &Table) -> Option<&Arc<HeldMessage>> {
        let id = self.ids.raw_get::<Option<u32>>(t).ok()??;
        self.known_id(id)
    }

    /// The resident id of each item of the list `t` in one crossing (0 = not resident), and
    /// whether `t` is a pure array (no other keys, no holes).
    pub(super) fn ids_of(&self, t: &Table) -> mlua::Result<(Vec<u32>, bool)> {
        let (buf, pure, tail): (mlua::Buffer, bool, usize) =
            self.map_fn.call((t, self.array.as_ref()))?;
        // The newest run is the context's last entries, whose ids are known here.
        let newest = self
            .entries
            .len()
            .checked_sub(tail)
            .and_then(|from| self.entries.get(from..))
            .ok_or_else(|| mlua::Error::runtime("a list has more newest items than the context"))?;
        let head = buf.to_vec();
        let mut ids = Vec::with_capacity(head.len() / 4 + tail);
        ids.extend(
            head.chunks_exact(4)
                .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]])),
        );
        ids.extend(newest.iter().map(|e| e.id));
        Ok((ids, pure))
    }

    fn marshal(&mut self, lua: &Lua, m: &Arc<Message>) -> mlua::Result<Entry> {
        let table = message_table(lua, m)?;
        let id = self.register(&table, m)?;
        Ok(Entry { table, id })
    }

    /// The resident table of a host message, marshalling (and keeping) it when new.
    pub(crate) fn table_for(&mut self, lua: &Lua, m: &Arc<Message>) -> mlua::Result<Table> {
        if let Some(&i) = self.by_msg.get(&msg_key(m))
            && let Some(e) = self.entries.get(i)
        {
            return Ok(e.table.clone());
        }
        if let Some((_, e)) = self.pending.get(&msg_key(m)) {
            return Ok(e.table.clone());
        }
        let e = self.marshal(lua, m)?;
        let t = e.table.clone();
        self.pending.insert(msg_key(m), (m.clone(), e));
        Ok(t)
    }

    /// A resident message as a result names it: its position in the context the VM mirrors
    /// when it is there (a call fed the context: the caller's own), else the message.
    pub(crate) fn message_ref(&self, m: &Arc<Message>) -> script::MessageRef {
        match self.by_msg.get(&msg_key(m)) {
            Some(&i) if self.entries.get(i).is_some() => script::MessageRef::Context(i),
            _ => script::MessageRef::New(m.clone()),
        }
    }

    /// The held messages of `t` when it is the context array (`p.messages`, frozen), shared:
    /// kept from call to call and extended by what was appended since (a call costs what is
    /// new, not the history). `None` for any other table.
    pub(crate) fn context_list(&self, t: &Table) -> Option<Arc<Vec<Arc<HeldMessage>>>> {
        if self.array.as_ref()?.to_pointer() != t.to_pointer() {
            return None;
        }
        script::held_context(&mut self.held.lock(), self.entries.len(), |i| {
            self.known_id(self.entries.get(i)?.id).cloned()
        })
    }

    /// A call-scoped table for a message that is not resident (dropped at [`Resident::end_call`]).
    pub(crate) fn temp_for(&mut self, lua: &Lua, m: &Arc<Message>) -> mlua::Result<Table> {
        if let Some(&i) = self.by_msg.get(&msg_key(m))
            && let Some(e) = self.entries.get(i)
        {
            return Ok(e.table.clone());
        }
        let e = self.marshal(lua, m)?;
        self.temps.push(e.table.clone());
        Ok(e.table)
    }

    /// Forgets the call's temporaries (their identity mapping ends with the call).
    pub(crate) fn end_call(&mut self) {
        for t in std::mem::take(&mut self.temps) {
            self.unregister(&t);
        }
        if self.pending.len() > 100_000 {
            self.drop_pending();
        }
    }

    fn drop_pending(&mut self) {
        let pending: Vec<Table> = self.pending.drain().map(|(_, (_, e))| e.table).collect();
        for t in pending {
            self.unregister(&t);
        }
    }

    /// Brings the resident array in line with `ctx` and returns it.
    ///
    /// Unchanged context: nothing. Appended messages: only they are marshalled. Anything else
    /// (a compaction gives `[summary, kept…]`): the array is rebuilt, reusing every table whose
    /// message is still there, so only the new summary is marshalled.
    pub(crate) fn sync(&mut self, lua: &Lua, ctx: &Arc<Vec<Arc<Message>>>) -> mlua::Result<Table> {
        let change = match &self.array {
            Some(_) => script::context_change(self.ctx.as_ref(), ctx),
            None => script::ContextChange::Rebuilt,
        };
        if let (script::ContextChange::Same, Some(array)) = (change, &self.array) {
            return Ok(array.clone());
        }
        let n_old = self.entries.len();
        let is_prefix = matches!(change, script::ContextChange::Appended(_));
        // An append keeps the held list (a prefix of the new one, extended when asked for).
        if !is_prefix {
            *self.held.lock() = None;
        }
        let array = if is_prefix && let Some(array) = self.array.clone() {
            array.set_readonly(false);
            // Only an array that was empty carries the array mark, to come off now.
            let appended = self.append(lua, &array, &ctx[n_old..]).and_then(|()| {
                if n_old == 0 {
                    mark_array(lua, &array, self.entries.len())
                } else {
                    Ok(())
                }
            });
            array.set_readonly(true);
            appended?;
            array
        } else {
            // Until the rebuild is done, no array is aligned with `entries` (a failed one leaves
            // them half made, and the next sync rebuilds again).
            self.array = None;
            self.rebuild(lua, ctx)?
        };
        self.drop_pending();
        script::ContextSeen::update(&mut self.ctx, ctx, change);
        self.array = Some(array.clone());
        Ok(array)
    }

    fn adopt(&mut self, lua: &Lua, m: &Arc<Message>) -> mlua::Result<Entry> {
        if let Some((_, e)) = self.pending.remove(&msg_key(m)) {
            return Ok(e);
        }
        self.marshal(lua, m)
    }

    fn append(&mut self, lua: &Lua, array: &Table, new: &[Arc<Message>]) -> mlua::Result<()> {
        for m in new {
            let e = self.adopt(lua, m)?;
            let i = self.entries.len();
            array.raw_set(i + 1, &e.table)?;
            self.by_msg.insert(msg_key(m), i);
            self.entries.push(e);
        }
        Ok(())
    }

    fn rebuild(&mut self, lua: &Lua, ctx: &Arc<Vec<Arc<Message>>>) -> mlua::Result<Table> {
        let old_entries = std::mem::take(&mut self.entries);
        let old_by_msg = std::mem::take(&mut self.by_msg);
        let array = lua.create_table_with_capacity(ctx.len(), 0)?;
        mark_array(lua, &array, ctx.len())?;
        for (i, m) in ctx.iter().enumerate() {
            let reused = old_by_msg
                .get(&msg_key(m))
                .and_then(|&j| old_entries.get(j))
                .cloned();
            let e = match reused {
                Some(e) => e,
                None => self.adopt(lua, m)?,
            };
            array.raw_set(i + 1, &e.table)?;
            self.by_msg.insert(msg_key(m), i);
            self.entries.push(e);
        }
        // Tables of messages that left the context are forgotten.
        let kept: std::collections::HashSet<usize, BuildHasherDefault<PtrHasher>> =
            self.entries.iter().map(|e| table_key(&e.table)).collect();
        for e in &old_entries {
            if !kept.contains(&table_key(&e.table)) {
                self.unregister(&e.table);
            }
        }
        array.set_readonly(true);
        Ok(array)
    }
}

//! One Luau VM: built, loaded and called on a thread of the Lua pool (see
//! [`crate::sandbox::Worker`]).
//!
//! Everything here runs on a pool thread, one call at a time. It builds the sandboxed Luau state, runs the engine's
//! chunk (and factory), and implements [`ScriptVm::invoke`]: `p` in (resident messages, state),
//! the script call under the watchdog deadline, the result converted to JSON. What the result
//! means and how failures are classified is shared ([`crate::engine::script`]).

use std::collections::HashMap;
use std::sync::Arc;

use mlua::{Function, Lua, LuaString, Table, Value, VmState};
use serde_json::{Map, Value as Json};

use super::api;
use super::fault::fault;
use super::interrupt;
use super::values::{self, Resident};
use crate::contract::Method;
use crate::contract::message::Message;
use crate::engine::api::{HostCall, HostScope};
use crate::engine::script::{
    self, Boot, Expect, Feed, Loaded, Reply, Returned, Rollbacks, ScriptVm, Site,
};
use crate::error::{EngineError, EngineErrorKind, Op};
use crate::sandbox::StopReason;

/// A live engine VM.
pub struct Vm {
    lua: Lua,
    site: Site,
    functions: HashMap<Method, (Function, Option<u32>)>,
    state: Table,
    rollbacks: Rollbacks<Function>,
    host_bytes: usize,
    /// The interrupt's fast path for this VM, entered for each call.
    fast: Option<interrupt::Fast>,
    /// The keys the host sets in every `p`, interned once (not made again per call).
    keys: ParamKeys,
}

/// The keys of `p` the host sets itself, as VM strings.
struct ParamKeys {
    message: LuaString,
    messages: LuaString,
    state: LuaString,
}

impl ParamKeys {
    fn new(lua: &Lua) -> mlua::Result<Self> {
        Ok(ParamKeys {
            message: lua.create_string("message")?,
            messages: lua.create_string("messages")?,
            state: lua.create_string("state")?,
        })
    }
}

/// A stop raised by the interrupt.
#[derive(Debug)]
struct Stopped(StopReason);

impl std::fmt::Display for Stopped {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.0 {
            StopReason::Deadline => f.write_str("script exceeded its deadline"),
            StopReason::Cancelled => f.write_str("call cancelled by the host"),
        }
    }
}

impl std::error::Error for Stopped {}

/// Builds a sandboxed Luau state: `host`, `require`, `print` installed, the rest removed, then
/// `sandbox(true)`, the interrupt (and its fast path) and the memory cap.
fn sandboxed_lua(boot: &Boot) -> mlua::Result<(Lua, Option<interrupt::Fast>)> {
    let lua = Lua::new();
    lua.set_app_data(HostScope::new(
        &boot.label,
        boot.limits.results.clone(),
        boot.signals.clone(),
    ));
    lua.set_app_data(Resident::new(&lua)?);
    api::install(&lua, &boot.config)?;
    super::guards::install(&lua)?;
    lua.sandbox(true)?;
    let signals = boot.signals.clone();
    let fast_signals = signals.clone();
    lua.set_interrupt(move |lua| match signals.check() {
        None => Ok(VmState::Continue),
        Some(reason) => {
            if signals.line().is_none() {
                let line =
                    (0..4).find_map(|level| lua.inspect_stack(level, |d| d.current_line())?);
                signals.note_line(line);
            }
            Err(mlua::Error::external(Stopped(reason)))
        }
    });
    let fast = interrupt::speed_up(&lua, fast_signals)?;
    lua.set_memory_limit(boot.limits.memory_bytes)?;
    Ok((lua, fast))
}

impl Vm {
    /// Builds the VM, runs the chunk (and factory) and reads the engine table.
    pub fn boot(source: &Arc<str>, boot: &Boot) -> Result<(Vm, Loaded), EngineError> {
        let file = boot.file.clone();
        let mut site = Site::of(boot);
        let err = |op: Op, e: &mlua::Error, kind| site.fail(op, fault(&file, e, kind));
        let (lua, fast) =
            sandboxed_lua(boot).map_err(|e| err(Op::Load, &e, EngineErrorKind::Runtime))?;
        let _entered = fast.as_ref().map(interrupt::Fast::enter);
        let chunk = lua
            .load(&**source)
            .set_name(format!("@{file}"))
            .set_mode(mlua::chunk::ChunkMode::Text)
            .into_function()
            .map_err(|e| err(Op::Load, &e, EngineErrorKind::Syntax))?;
        let guard = site.start_call();
        let top: Value = chunk
            .call(())
            .map_err(|e| err(Op::Load, &e, EngineErrorKind::Runtime))?;
        let engine = match top {
            Value::Table(t) => t,
            Value::Function(factory) => {
                let ctx = lua
                    .create_table()
                    .map_err(|e| err(Op::Factory, &e, EngineErrorKind::Factory))?;
                let fill = || -> mlua::Result<()> {
                    let config: Value = lua.named_registry_value(api::CONFIG_KEY)?;
                    ctx.raw_set("config", config)?;
                    ctx.raw_set("agentDir", boot.agent_dir.as_str())?;
                    ctx.raw_set("workspaceDir", boot.workspace_dir.as_str())?;
                    Ok(())
                };
                fill().map_err(|e| err(Op::Factory, &e, EngineErrorKind::Factory))?;
                let line = factory
                    .info()
                    .line_defined
                    .and_then(|l| u32::try_from(l).ok());
                match factory
                    .call::<Value>(ctx)
                    .map_err(|e| err(Op::Factory, &e, EngineErrorKind::Factory))?
                {
                    Value::Table(t) => t,
                    other => {
                        return Err(site.error(
                            Op::Factory,
                            EngineErrorKind::Factory,
                            format!(
                                "the factory must return the engine table, got {}",
                                other.type_name()
                            ),
                            line,
                        ));
                    }
                }
            }
            other => {
                return Err(site.error(
                    Op::Load,
                    EngineErrorKind::Contract,
                    format!(
                        "the script must return the engine table or a factory function, got {}",
                        other.type_name()
                    ),
                    None,
                ));
            }
        };
        if boot.signals.check().is_some() {
            return Err(err(
                Op::Load,
                &mlua::Error::runtime("stopped"),
                EngineErrorKind::Runtime,
            ));
        }
        drop(guard);

        let mut members = Vec::new();
        let mut lines = HashMap::new();
        let mut functions = HashMap::new();
        for pair in engine.pairs::<Value, Value>() {
            let (k, v) = pair.map_err(|e| site.contract(e.to_string(), None))?;
            let Value::String(name) = k else { continue };
            let name = name.to_string_lossy();
            let is_fn = matches!(v, Value::Function(_));
            if let Value::Function(f) = &v {
                let line = f.info().line_defined.and_then(|l| u32::try_from(l).ok());
                if let Some(l) = line {
                    lines.insert(name.clone(), l);
                }
                if let Some(m) = Method::any_from_name(&name) {
                    functions.insert(m, (f.clone(), line));
                }
            }
            members.push((name, is_fn));
        }
        members.sort();
        let info_value: Value = engine
            .raw_get("info")
            .map_err(|e| site.contract(e.to_string(), None))?;
        let info = match &info_value {
            Value::Table(_) => site.info(
                |budget| values::to_json(&lua, &info_value, budget),
                <Vm as ScriptVm>::NOUN,
            )?,
            Value::Nil => return Err(site.contract("the engine has no `info` table", None)),
            other => {
                return Err(site.contract(
                    format!("`info` must be a table, got {}", other.type_name()),
                    None,
                ));
            }
        };
        let state = lua
            .create_table()
            .map_err(|e| err(Op::Load, &e, EngineErrorKind::Runtime))?;
        let keys = ParamKeys::new(&lua).map_err(|e| err(Op::Load, &e, EngineErrorKind::Runtime))?;
        if site.name_by(&info)
            && let Some(mut scope) = lua.app_data_mut::<HostScope>()
        {
            scope.rename(&info.id);
        }
        let vm = Vm {
            keys,
            lua,
            site,
            functions,
            state,
            rollbacks: Rollbacks::default(),
            host_bytes: 0,
            fast,
        };
        Ok((
            vm,
            Loaded {
                info,
                members,
                lines,
            },
        ))
    }

    /// Calls `f` with `p` (built from `fields` and `feed`) under the deadline; the `host` API
    /// sees `call` meanwhile, and call-scoped tables are dropped afterwards.
    fn call_script(
        &mut self,
        call: &HostCall,
        method: Method,
        f: &Function,
        fields: &Map<String, Json>,
        feed: Feed,
    ) -> Result<Value, EngineError> {
        self.set_call(Some(call.clone()));
        let out = self.call_inner(call, method, f, fields, feed);
        self.set_call(None);
        out
    }

    /// What `host.*` sees as the running call.
    fn set_call(&self, call: Option<HostCall>) {
        if let Some(mut scope) = self.lua.app_data_mut::<HostScope>() {
            scope.set_call(call);
        }
    }

    fn call_inner(
        &mut self,
        call: &HostCall,
        method: Method,
        f: &Function,
        fields: &Map<String, Json>,
        feed: Feed,
    ) -> Result<Value, EngineError> {
        let op = Op::from(method);
        let site = &self.site;
        let host_err = |e: mlua::Error| site.host(op, e);
        // The host's own input does not count against the engine's memory cap.
        self.lua.set_memory_limit(0).map_err(host_err)?;
        let before = self.lua.used_memory();
        let p = params_table(&self.lua, fields).map_err(host_err)?;
        let after_params = self.lua.used_memory();
        {
            let mut res = self
                .lua
                .app_data_mut::<Resident>()
                .ok_or_else(|| host_err(mlua::Error::runtime("no resident state")))?;
            let lua = &self.lua;
            match feed {
                Feed::Nothing => {}
                Feed::One(m) => p
                    .raw_set(
                        &self.keys.message,
                        res.table_for(lua, &m).map_err(host_err)?,
                    )
                    .map_err(host_err)?,
                Feed::List(list) => p
                    .raw_set(
                        &self.keys.messages,
                        message_list(lua, &mut res, &list).map_err(host_err)?,
                    )
                    .map_err(host_err)?,
                Feed::Context => p
                    .raw_set(
                        &self.keys.messages,
                        res.sync(lua, call.context()).map_err(host_err)?,
                    )
                    .map_err(host_err)?,
            }
        }
        p.raw_set(&self.keys.state, &self.state).map_err(host_err)?;
        let after = self.lua.used_memory();
        // The cap is for the VM's whole life: what the script keeps between calls counts, what
        // the host put in does not (the resident messages it keeps, this call's params).
        self.host_bytes = self
            .host_bytes
            .saturating_add(after.saturating_sub(after_params));
        let transient = after_params.saturating_sub(before);
        let limit = self
            .site
            .limits
            .memory_bytes
            .saturating_add(self.host_bytes)
            .saturating_add(transient);
        if after > limit / 4 * 3 {
            // Near the cap: collect the garbage of earlier calls before judging what is kept.
            self.lua.gc_collect().map_err(host_err)?;
        }
        self.lua.set_memory_limit(limit).map_err(host_err)?;

        let guard = self.site.start_call();
        let result = f.call::<Value>(p);
        let stopped = self.site.signals.check();
        drop(guard);
        let file = &self.site.file;
        match result {
            Ok(v) if stopped.is_none() => Ok(v),
            Ok(_) => Err(self.site.fail(
                op,
                fault(
                    file,
                    &mlua::Error::runtime("stopped"),
                    EngineErrorKind::Runtime,
                ),
            )),
            Err(e) => Err(self
                .site
                .fail(op, fault(file, &e, EngineErrorKind::Runtime))),
        }
    }

    /// Converts what the script returned into what the host expects.
    fn convert(&mut self, value: Value, expect: Expect) -> Result<Returned, String> {
        match expect {
            Expect::Nothing => Ok(Returned::Nothing),
            Expect::Json => {
                script::json_reply(values::to_json(&self.lua, &value, &mut self.site.budget()))
            }
            Expect::Assembled => self.assembled(&value),
            Expect::Rollback => self.rollback_of(value),
        }
    }

    fn assembled(&self, v: &Value) -> Result<Returned, String> {
        let Value::Table(t) = v else {
            return Err(format!(
                "assemble must return a table, got {}",
                v.type_name()
            ));
        };
        let mut budget = self.site.budget();
        let mut fields = script::AssembledFields::default();
        let mut raw = Value::Nil;
        let mut failure = None;
        // `for_each` walks the table in one borrow of the VM (`pairs` pays a crossing per key).
        let walked = t.for_each(|k: Value, v: Value| {
            let field = result_key(&k).and_then(|key| {
                if key == "messages" {
                    raw = v;
                    return Ok(());
                }
                let j =
                    values::to_json(&self.lua, &v, &mut budget).map_err(|e| e.describe(&key))?;
                fields.insert(&key, j);
                Ok(())
            });
            field.map_err(|e| {
                failure = Some(e);
                mlua::Error::runtime("assemble result refused")
            })
        });
        if let Some(e) = failure {
            return Err(e);
        }
        walked.map_err(|e| e.to_string())?;
        if raw.is_nil() {
            return Err(crate::engine::script::result::missing_messages(
                fields.keys(),
            ));
        }
        let resident = self
            .lua
            .app_data_ref::<Resident>()
            .ok_or_else(|| "no resident state".to_string())?;
        let messages = values::messages_from(
            &self.lua,
            &resident,
            &raw,
            &mut budget,
            self.site.limits.results.max_result_messages,
        )
        .map_err(script::messages_error)?;
        Ok(Returned::Assembled(fields, messages))
    }

    /// `prepareSubagentSpawn`'s result: a returned `rollback` function is kept under a handle.
    fn rollback_of(&mut self, v: Value) -> Result<Returned, String> {
        let f = match v {
            Value::Nil => None,
            Value::Table(t) => {
                let mut rollback = None;
                for pair in t.pairs::<Value, Value>() {
                    let (k, v) = pair.map_err(|e| e.to_string())?;
                    match (&k, v) {
                        (Value::String(s), Value::Function(f)) if s == "rollback" => {
                            rollback = Some(f)
                        }
                        (Value::String(s), Value::Nil) if s == "rollback" => {}
                        _ => {
                            return Err(format!(
                                "prepareSubagentSpawn may return only nothing or {{rollback = function}}, got a table with key {}",
                                k.to_string().unwrap_or_default()
                            ));
                        }
                    }
                }
                rollback
            }
            other => {
                return Err(format!(
                    "prepareSubagentSpawn may return only nothing or {{rollback = function}}, got {}",
                    other.type_name()
                ));
            }
        };
        Ok(Returned::Rollback(f.map(|f| self.rollbacks.keep(f))))
    }

    fn end_call(&self) {
        if let Some(mut r) = self.lua.app_data_mut::<Resident>() {
            r.end_call();
        }
    }
}

impl ScriptVm for Vm {
    const NOUN: &'static str = "table";

    fn invoke(
        &mut self,
        call: &HostCall,
        method: Method,
        fields: &Map<String, Json>,
        feed: Feed,
        expect: Expect,
    ) -> Result<Option<Reply>, EngineError> {
        let Some((f, _)) = self.functions.get(&method).cloned() else {
            return Ok(None);
        };
        let _entered = self.fast.as_ref().map(interrupt::Fast::enter);
        let out = self
            .call_script(call, method, &f, fields, feed)
            .map(|v| self.convert(v, expect));
        self.end_call();
        out.map(Some)
    }

    fn rollback(&mut self, call: &HostCall, handle: u64) -> Result<(), EngineError> {
        let Some(f) = self.rollbacks.take(handle, &self.site.engine) else {
            return Ok(());
        };
        let _entered = self.fast.as_ref().map(interrupt::Fast::enter);
        let out = self.call_script(
            call,
            Method::PrepareSubagentSpawn,
            &f,
            &Map::new(),
            Feed::Nothing,
        );
        self.end_call();
        out.map(|_| ())
    }

    fn save_state(&self) -> Result<Json, EngineError> {
        values::to_json(
            &self.lua,
            &Value::Table(self.state.clone()),
            &mut self.site.budget(),
        )
        .map_err(|e| self.site.state_error(e))
    }

    fn restore_state(&mut self, state: &Json) -> Result<(), EngineError> {
        let err = |e: mlua::Error| self.site.restore_error(e);
        self.state = match self.site.restorable(state)? {
            None => self.lua.create_table().map_err(err)?,
            Some(state) => match values::to_lua(&self.lua, state).map_err(err)? {
                Value::Table(t) => t,
                _ => self.lua.create_table().map_err(err)?,
            },
        };
        Ok(())
    }
}

/// A key of `assemble`'s result table as a field name, or why it cannot be one.
fn result_key(k: &Value) -> Result<String, String> {
    match k {
        Value::String(s) => s
            .to_str()
            .map(|k| String::from(&*k))
            .map_err(|_| "a key is not valid UTF-8".to_string()),
        Value::Integer(_) | Value::Number(_) => Err(
            "assemble must return a table with named fields (`messages`, `estimatedTokens`), got a list: return { messages = ..., estimatedTokens = ... }"
                .to_string(),
        ),
        other => Err(format!(
            "assemble result has a non-string key ({})",
            other.type_name()
        )),
    }
}

/// `p` with the call's `fields`, sized for the host's own keys too (`messages`, `state`), so
/// that setting them grows nothing; text fields are set straight from the host's strings.
fn params_table(lua: &Lua, fields: &Map<String, Json>) -> mlua::Result<Table> {
    let p = lua.create_table_with_capacity(0, fields.len() + 2)?;
    for (k, v) in fields {
        match v {
            // `None` becomes nil (see `values::ser_opts`): the key is left out.
            Json::Null => {}
            Json::String(s) => p.raw_set(k.as_str(), s.as_str())?,
            other => p.raw_set(k.as_str(), values::to_lua(lua, other)?)?,
        }
    }
    Ok(p)
}

/// A list of host messages as a frozen Lua array of resident tables.
fn message_list(lua: &Lua, res: &mut Resident, messages: &[Arc<Message>]) -> mlua::Result<Table> {
    let t = lua.create_table_with_capacity(messages.len(), 0)?;
    values::mark_array(lua, &t, messages.len())?;
    for (i, m) in messages.iter().enumerate() {
        t.raw_set(i + 1, res.table_for(lua, m)?)?;
    }
    t.set_readonly(true);
    Ok(t)
}

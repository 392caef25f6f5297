//! One engine VM: built, loaded and called on its own worker thread (see [`crate::sandbox::Worker`]).
//!
//! Everything here runs on the worker. It builds the sandboxed Luau state, runs the engine's
//! chunk (and factory), and implements each lifecycle call: params in, script call under the
//! watchdog deadline, result converted and validated, errors classified into
//! [`EngineErrorKind`]s with `file:line`.

use std::collections::HashMap;
use std::sync::Arc;

use mlua::{Function, Lua, LuaSerdeExt, Table, Value, VmState};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::{Map, Value as Json, json};

use super::api::{self, ApiEnv, CallScope};
use super::marshal::{self, Budget, Resident};
use crate::contract::{
    self, AfterTurnParams, AssembleParams, AssembleResult, BootstrapParams, BootstrapResult,
    CommitTurnParams, CommitTurnResult, CompactParams, CompactResult, EngineInfo, HostParam,
    IngestBatchParams, IngestBatchResult, IngestParams, IngestResult, MaintainParams,
    MaintainResult, Method, ResultLimits, SubagentEndedParams, SubagentSpawnParams,
};
use crate::error::{EngineError, EngineErrorKind, ScriptLocation};
use crate::host::HostCall;
use crate::message::Message;
use crate::sandbox::{Limits, StopReason, StopSignals};

/// What a VM is built from.
#[derive(Clone, Debug)]
pub struct Boot {
    /// The script path as shown in errors (the chunk is named `@<file>`).
    pub file: String,
    /// The script text.
    pub source: Arc<str>,
    /// The engine's entry config (`host.config`, `ctx.config`).
    pub config: Arc<Json>,
    /// `ctx.agentDir`.
    pub agent_dir: String,
    /// `ctx.workspaceDir`.
    pub workspace_dir: String,
    /// Budgets.
    pub limits: Limits,
    /// The engine's name in errors before `info` is known.
    pub label: String,
    /// The interrupt's flags.
    pub signals: Arc<StopSignals>,
}

/// What loading found, for validation.
#[derive(Clone, Debug)]
pub struct Loaded {
    /// `info`, converted.
    pub info: EngineInfo,
    /// Top-level members and whether each is a function.
    pub members: Vec<(String, bool)>,
    /// The line where each function member is defined.
    pub lines: HashMap<String, u32>,
}

/// A live engine VM.
pub struct Vm {
    lua: Lua,
    file: String,
    engine: String,
    signals: Arc<StopSignals>,
    limits: Limits,
    info: EngineInfo,
    functions: HashMap<Method, (Function, Option<u32>)>,
    state: Table,
    rollbacks: HashMap<u64, Function>,
    next_rollback: u64,
    host_bytes: usize,
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
/// `sandbox(true)`, the interrupt and the memory cap.
fn sandboxed_lua(boot: &Boot) -> mlua::Result<Lua> {
    let lua = Lua::new();
    lua.set_app_data(ApiEnv {
        engine_id: boot.label.clone(),
        limits: boot.limits.results.clone(),
    });
    lua.set_app_data(Resident::new(&lua)?);
    api::install(&lua, &boot.config)?;
    lua.sandbox(true)?;
    let signals = boot.signals.clone();
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
    lua.set_memory_limit(boot.limits.memory_bytes)?;
    Ok(lua)
}

/// The message of an mlua error without tracebacks, and the whole text (to find lines in).
fn texts(err: &mlua::Error) -> (String, String) {
    match err {
        mlua::Error::CallbackError { traceback, cause } => {
            let (msg, full) = texts(cause);
            (msg, format!("{full}\n{traceback}"))
        }
        mlua::Error::WithContext { context, cause } => {
            let (msg, full) = texts(cause);
            (format!("{context}: {msg}"), full)
        }
        mlua::Error::RuntimeError(s) => (s.clone(), s.clone()),
        mlua::Error::SyntaxError { message, .. } => (message.clone(), message.clone()),
        mlua::Error::MemoryError(s) => (s.clone(), s.clone()),
        other => (other.to_string(), other.to_string()),
    }
}

/// The first `file:LINE` in `text`.
pub fn find_line(file: &str, text: &str) -> Option<u32> {
    let mut rest = text;
    while let Some(i) = rest.find(file) {
        let after = &rest[i + file.len()..];
        if let Some(num) = after.strip_prefix(':') {
            let digits: String = num.chars().take_while(char::is_ascii_digit).collect();
            if let Ok(n) = digits.parse() {
                return Some(n);
            }
        }
        rest = &rest[i + file.len()..];
    }
    None
}

/// The message's first line with a leading `file:LINE: ` removed.
fn clean_message(file: &str, msg: &str) -> String {
    let first = msg
        .lines()
        .find(|l| !l.trim().is_empty() && !l.starts_with("stack traceback"))
        .unwrap_or(msg)
        .trim();
    let mut s = first;
    if let Some(rest) = s.strip_prefix(file)
        && let Some(rest) = rest.strip_prefix(':')
    {
        let digits = rest.chars().take_while(char::is_ascii_digit).count();
        if let Some(r) = rest[digits..].strip_prefix(": ") {
            s = r;
        }
    }
    s.strip_prefix("runtime error: ").unwrap_or(s).to_string()
}

fn chain_has_memory(err: &mlua::Error) -> bool {
    err.chain().any(|e| {
        matches!(
            e.downcast_ref::<mlua::Error>(),
            Some(mlua::Error::MemoryError(_))
        )
    })
}

fn located(file: &str, line: Option<u32>) -> Option<ScriptLocation> {
    Some(ScriptLocation {
        file: file.to_string(),
        line,
    })
}

/// Classifies a script failure. `default` is the kind of an ordinary throw.
fn classify(
    file: &str,
    engine: &str,
    signals: &StopSignals,
    limits: &Limits,
    op: &str,
    err: &mlua::Error,
    default: EngineErrorKind,
) -> EngineError {
    let (msg, full) = texts(err);
    let line = find_line(file, &full);
    match signals.check() {
        Some(StopReason::Cancelled) => {
            return EngineError::new(op, engine, EngineErrorKind::Cancelled, "call cancelled")
                .at(located(file, signals.line().or(line)));
        }
        Some(StopReason::Deadline) => {
            return EngineError::new(
                op,
                engine,
                EngineErrorKind::Deadline,
                format!(
                    "script exceeded its deadline of {} ms and was stopped",
                    limits.deadline_ms
                ),
            )
            .at(located(file, signals.line().or(line)));
        }
        None => {}
    }
    let kind = if matches!(err, mlua::Error::SyntaxError { .. }) {
        EngineErrorKind::Syntax
    } else if chain_has_memory(err) || msg.contains("not enough memory") {
        EngineErrorKind::Memory
    } else if msg.contains("stack overflow") {
        EngineErrorKind::Limit
    } else {
        default
    };
    let mut message = clean_message(file, &msg);
    if kind == EngineErrorKind::Memory {
        message = format!(
            "engine exceeded its memory cap of {} bytes ({message})",
            limits.memory_bytes
        );
    }
    EngineError::new(op, engine, kind, message).at(located(file, line))
}

impl Vm {
    /// Builds the VM, runs the chunk (and factory) and reads the engine table.
    pub fn boot(boot: &Boot) -> Result<(Vm, Loaded), EngineError> {
        let file = boot.file.clone();
        let label = boot.label.clone();
        let err = |op: &str, e: &mlua::Error, kind| {
            classify(&file, &label, &boot.signals, &boot.limits, op, e, kind)
        };
        let lua = sandboxed_lua(boot).map_err(|e| err("load", &e, EngineErrorKind::Runtime))?;
        let chunk = lua
            .load(&*boot.source)
            .set_name(format!("@{file}"))
            .set_mode(mlua::chunk::ChunkMode::Text)
            .into_function()
            .map_err(|e| err("load", &e, EngineErrorKind::Syntax))?;
        let guard = boot.signals.start_call(boot.limits.deadline());
        let top: Value = chunk
            .call(())
            .map_err(|e| err("load", &e, EngineErrorKind::Runtime))?;
        let engine = match top {
            Value::Table(t) => t,
            Value::Function(factory) => {
                let ctx = lua
                    .create_table()
                    .map_err(|e| err("factory", &e, EngineErrorKind::Factory))?;
                let fill = || -> mlua::Result<()> {
                    let config: Value = lua.named_registry_value(api::CONFIG_KEY)?;
                    ctx.raw_set("config", config)?;
                    ctx.raw_set("agentDir", boot.agent_dir.as_str())?;
                    ctx.raw_set("workspaceDir", boot.workspace_dir.as_str())?;
                    Ok(())
                };
                fill().map_err(|e| err("factory", &e, EngineErrorKind::Factory))?;
                let line = factory
                    .info()
                    .line_defined
                    .and_then(|l| u32::try_from(l).ok());
                match factory
                    .call::<Value>(ctx)
                    .map_err(|e| err("factory", &e, EngineErrorKind::Factory))?
                {
                    Value::Table(t) => t,
                    other => {
                        return Err(EngineError::new(
                            "factory",
                            &label,
                            EngineErrorKind::Factory,
                            format!(
                                "the factory must return the engine table, got {}",
                                other.type_name()
                            ),
                        )
                        .at(located(&file, line)));
                    }
                }
            }
            other => {
                return Err(EngineError::new(
                    "load",
                    &label,
                    EngineErrorKind::Contract,
                    format!(
                        "the script must return the engine table or a factory function, got {}",
                        other.type_name()
                    ),
                )
                .at(located(&file, None)));
            }
        };
        if boot.signals.check().is_some() {
            return Err(err(
                "load",
                &mlua::Error::runtime("stopped"),
                EngineErrorKind::Runtime,
            ));
        }
        drop(guard);

        let contract_err = |m: String| {
            EngineError::new("validate", &label, EngineErrorKind::Contract, m)
                .at(located(&file, None))
        };
        let mut members = Vec::new();
        let mut lines = HashMap::new();
        let mut functions = HashMap::new();
        for pair in engine.pairs::<Value, Value>() {
            let (k, v) = pair.map_err(|e| contract_err(e.to_string()))?;
            let Value::String(name) = k else { continue };
            let name = name.to_string_lossy();
            let is_fn = matches!(v, Value::Function(_));
            if let Value::Function(f) = &v {
                let line = f.info().line_defined.and_then(|l| u32::try_from(l).ok());
                if let Some(l) = line {
                    lines.insert(name.clone(), l);
                }
                if let Some(m) = Method::from_name(&name) {
                    functions.insert(m, (f.clone(), line));
                }
            }
            members.push((name, is_fn));
        }
        members.sort();
        let info_value: Value = engine
            .raw_get("info")
            .map_err(|e| contract_err(e.to_string()))?;
        let info = match &info_value {
            Value::Table(_) => {
                let mut budget = Budget::new(1 << 20);
                let json = marshal::to_json(&lua, &info_value, &mut budget)
                    .map_err(|e| contract_err(e.describe("info")))?;
                let Json::Object(mut map) = json else {
                    return Err(contract_err("`info` must be a table of fields".into()));
                };
                for f in ["id", "name"] {
                    if map.get(f).is_none_or(Json::is_null) {
                        map.insert(f.into(), Json::String(String::new()));
                    }
                }
                marshal::typed::<EngineInfo>(&map, &json!({"id": "", "name": ""})).map_err(|e| {
                    contract_err(format!(
                        "info.{}",
                        e.trim_start_matches('`').replacen('`', "", 1)
                    ))
                })?
            }
            Value::Nil => return Err(contract_err("the engine has no `info` table".into())),
            other => {
                return Err(contract_err(format!(
                    "`info` must be a table, got {}",
                    other.type_name()
                )));
            }
        };
        if let Some(mut env) = lua.app_data_mut::<ApiEnv>() {
            env.engine_id = info.id.clone();
        }
        let state = lua
            .create_table()
            .map_err(|e| err("load", &e, EngineErrorKind::Runtime))?;
        let vm = Vm {
            lua,
            file: file.clone(),
            engine: if info.id.is_empty() {
                label.clone()
            } else {
                info.id.clone()
            },
            signals: boot.signals.clone(),
            limits: boot.limits.clone(),
            info: info.clone(),
            functions,
            state,
            rollbacks: HashMap::new(),
            next_rollback: 0,
            host_bytes: 0,
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

    fn invalid(&self, op: Method, line: Option<u32>, msg: String) -> EngineError {
        EngineError::new(
            op.as_str(),
            &self.engine,
            EngineErrorKind::InvalidResult,
            msg,
        )
        .at(located(&self.file, line))
    }

    /// One lifecycle call: `p` from `params` plus `fill`, the script call under the deadline,
    /// then `convert` on the result. `None` when the script does not define `method`.
    fn run<P: Serialize, R>(
        &mut self,
        call: &HostCall,
        method: Method,
        params: Option<&P>,
        fill: impl FnOnce(&Lua, &mut Resident, &Table) -> mlua::Result<()>,
        convert: impl FnOnce(&Vm, &Resident, Value) -> Result<R, String>,
    ) -> Result<Option<R>, EngineError> {
        let Some((f, line)) = self.functions.get(&method).cloned() else {
            return Ok(None);
        };
        self.lua.set_app_data(CallScope { call: call.clone() });
        let out = self.run_inner(method, &f, line, params, fill, convert);
        self.lua.remove_app_data::<CallScope>();
        if let Some(mut r) = self.lua.app_data_mut::<Resident>() {
            r.end_call();
        }
        out.map(Some)
    }

    fn run_inner<P: Serialize, R>(
        &mut self,
        method: Method,
        f: &Function,
        line: Option<u32>,
        params: Option<&P>,
        fill: impl FnOnce(&Lua, &mut Resident, &Table) -> mlua::Result<()>,
        convert: impl FnOnce(&Vm, &Resident, Value) -> Result<R, String>,
    ) -> Result<R, EngineError> {
        let op = method.as_str();
        let host_err = |e: mlua::Error| {
            EngineError::new(
                op,
                &self.engine,
                EngineErrorKind::Runtime,
                format!("host could not pass the params: {e}"),
            )
        };
        // The host's own input does not count against the engine's memory cap.
        self.lua.set_memory_limit(0).map_err(host_err)?;
        let before = self.lua.used_memory();
        let p = match params {
            Some(params) => match marshal::to_lua(&self.lua, params).map_err(host_err)? {
                Value::Table(t) => t,
                _ => self.lua.create_table().map_err(host_err)?,
            },
            None => self.lua.create_table().map_err(host_err)?,
        };
        {
            let mut resident = self
                .lua
                .app_data_mut::<Resident>()
                .ok_or_else(|| host_err(mlua::Error::runtime("no resident state")))?;
            fill(&self.lua, &mut resident, &p).map_err(host_err)?;
        }
        p.raw_set("state", &self.state).map_err(host_err)?;
        for (hp, key) in [
            (HostParam::SessionKey, "sessionKey"),
            (HostParam::Prompt, "prompt"),
            (HostParam::RuntimeSettings, "runtimeSettings"),
        ] {
            if !self.info.accepts(hp) {
                p.raw_set(key, Value::Nil).map_err(host_err)?;
            }
        }
        let after = self.lua.used_memory();
        self.host_bytes = self.host_bytes.saturating_add(after.saturating_sub(before));
        self.lua
            .set_memory_limit(
                after
                    .saturating_add(self.limits.memory_bytes)
                    .max(self.limits.memory_bytes.saturating_add(self.host_bytes)),
            )
            .map_err(host_err)?;

        let guard = self.signals.start_call(self.limits.deadline());
        let result = f.call::<Value>(p);
        let stopped = self.signals.check();
        drop(guard);
        let value = match result {
            Ok(v) if stopped.is_none() => v,
            Ok(_) => {
                return Err(classify(
                    &self.file,
                    &self.engine,
                    &self.signals,
                    &self.limits,
                    op,
                    &mlua::Error::runtime("stopped"),
                    EngineErrorKind::Runtime,
                ));
            }
            Err(e) => {
                return Err(classify(
                    &self.file,
                    &self.engine,
                    &self.signals,
                    &self.limits,
                    op,
                    &e,
                    EngineErrorKind::Runtime,
                ));
            }
        };
        let resident = self
            .lua
            .app_data_ref::<Resident>()
            .ok_or_else(|| host_err(mlua::Error::runtime("no resident state")))?;
        convert(self, &resident, value).map_err(|m| self.invalid(method, line, m))
    }

    fn budget(&self) -> Budget {
        Budget::new(self.limits.results.max_result_bytes)
    }

    /// The fields of a result table as JSON, except `skip`.
    fn fields(&self, v: &Value, what: Method, skip: &[&str]) -> Result<Map<String, Json>, String> {
        let Value::Table(t) = v else {
            return Err(format!("{what} must return a table, got {}", v.type_name()));
        };
        let mut budget = self.budget();
        let mut map = Map::new();
        for pair in t.pairs::<Value, Value>() {
            let (k, v) = pair.map_err(|e| e.to_string())?;
            let key = match &k {
                Value::String(s) => s
                    .to_str()
                    .map_err(|_| "a key is not valid UTF-8".to_string())?
                    .to_string(),
                other => {
                    return Err(format!(
                        "{what} result has a non-string key ({})",
                        other.type_name()
                    ));
                }
            };
            if skip.contains(&key.as_str()) {
                continue;
            }
            let j = marshal::to_json(&self.lua, &v, &mut budget).map_err(|e| e.describe(&key))?;
            map.insert(key, j);
        }
        Ok(map)
    }

    fn typed_result<T: DeserializeOwned>(
        &self,
        v: &Value,
        what: Method,
        template: Json,
    ) -> Result<T, String> {
        let map = self.fields(v, what, &[])?;
        marshal::typed(&map, &template)
    }

    /// `bootstrap`.
    pub fn bootstrap(
        &mut self,
        call: &HostCall,
        params: &BootstrapParams,
    ) -> Result<Option<BootstrapResult>, EngineError> {
        self.run(
            call,
            Method::Bootstrap,
            Some(params),
            |_, _, _| Ok(()),
            |vm, _, v| vm.typed_result(&v, Method::Bootstrap, json!({"bootstrapped": false})),
        )
    }

    /// `ingest`: `p.message` is the resident (frozen) message table.
    pub fn ingest(
        &mut self,
        call: &HostCall,
        params: &IngestParams,
    ) -> Result<Option<IngestResult>, EngineError> {
        let message = params.message.clone();
        self.run(
            call,
            Method::Ingest,
            Some(params),
            move |lua, res, p| p.raw_set("message", res.table_for(lua, &message)?),
            |vm, _, v| vm.typed_result(&v, Method::Ingest, json!({"ingested": true})),
        )
    }

    /// `ingestBatch`: `p.messages` is the batch.
    pub fn ingest_batch(
        &mut self,
        call: &HostCall,
        params: &IngestBatchParams,
    ) -> Result<Option<IngestBatchResult>, EngineError> {
        let batch = params.messages.clone();
        self.run(
            call,
            Method::IngestBatch,
            Some(params),
            move |lua, res, p| p.raw_set("messages", message_list(lua, res, &batch)?),
            |vm, _, v| vm.typed_result(&v, Method::IngestBatch, json!({"ingestedCount": 0})),
        )
    }

    /// `assemble`: `p.messages` is the resident context.
    pub fn assemble(
        &mut self,
        call: &HostCall,
        params: &AssembleParams,
    ) -> Result<Option<AssembleResult>, EngineError> {
        let ctx = call.context().clone();
        self.run(
            call,
            Method::Assemble,
            Some(params),
            move |lua, res, p| p.raw_set("messages", res.sync(lua, &ctx)?),
            |vm, res, v| vm.assemble_result(res, &v),
        )
    }

    fn assemble_result(&self, res: &Resident, v: &Value) -> Result<AssembleResult, String> {
        let limits: &ResultLimits = &self.limits.results;
        let mut map = self.fields(v, Method::Assemble, &["messages"])?;
        let Value::Table(t) = v else {
            return Err("assemble must return a table".into());
        };
        let raw: Value = t.raw_get("messages").map_err(|e| e.to_string())?;
        if raw.is_nil() {
            return Err("missing field `messages`".into());
        }
        let mut budget = self.budget();
        let messages = marshal::messages_from(
            &self.lua,
            res,
            &raw,
            &mut budget,
            limits.max_result_messages,
        )
        .map_err(|e| {
            if e.starts_with('[') {
                format!("messages{e}")
            } else {
                format!("messages: {e}")
            }
        })?;
        map.insert("messages".into(), Json::Array(Vec::new()));
        let mut r: AssembleResult =
            marshal::typed(&map, &json!({"messages": [], "estimatedTokens": 0}))?;
        r.messages = messages;
        contract::check_assemble(&r, limits)?;
        Ok(r)
    }

    /// `compact`: `p.messages` is the resident context too (an addition to the contract's
    /// params, so an engine that owns compaction can summarize without keeping its own copy).
    pub fn compact(
        &mut self,
        call: &HostCall,
        params: &CompactParams,
    ) -> Result<Option<CompactResult>, EngineError> {
        let ctx = call.context().clone();
        self.run(
            call,
            Method::Compact,
            Some(params),
            move |lua, res, p| p.raw_set("messages", res.sync(lua, &ctx)?),
            |vm, _, v| {
                let r: CompactResult =
                    vm.typed_result(&v, Method::Compact, json!({"ok": true, "compacted": false}))?;
                contract::check_compact(&r, &vm.limits.results)?;
                Ok(r)
            },
        )
    }

    /// `afterTurn`: `p.messages` is the context snapshot.
    pub fn after_turn(
        &mut self,
        call: &HostCall,
        params: &AfterTurnParams,
    ) -> Result<Option<()>, EngineError> {
        let ctx = call.context().clone();
        self.run(
            call,
            Method::AfterTurn,
            Some(params),
            move |lua, res, p| p.raw_set("messages", res.sync(lua, &ctx)?),
            |_, _, _| Ok(()),
        )
    }

    /// `commitTurn`.
    pub fn commit_turn(
        &mut self,
        call: &HostCall,
        params: &CommitTurnParams,
    ) -> Result<Option<Option<CommitTurnResult>>, EngineError> {
        let turn = params.messages.clone();
        self.run(
            call,
            Method::CommitTurn,
            Some(params),
            move |lua, res, p| p.raw_set("messages", message_list(lua, res, &turn)?),
            |vm, _, v| {
                if v.is_nil() {
                    return Ok(None);
                }
                vm.typed_result(&v, Method::CommitTurn, json!({"status": "committed"}))
                    .map(Some)
            },
        )
    }

    /// `maintain`.
    pub fn maintain(
        &mut self,
        call: &HostCall,
        params: &MaintainParams,
    ) -> Result<Option<Option<MaintainResult>>, EngineError> {
        self.run(
            call,
            Method::Maintain,
            Some(params),
            |_, _, _| Ok(()),
            |vm, _, v| {
                if v.is_nil() {
                    return Ok(None);
                }
                vm.typed_result(&v, Method::Maintain, json!({"changed": false}))
                    .map(Some)
            },
        )
    }

    /// `prepareSubagentSpawn`; a returned `rollback` function is kept under a handle.
    pub fn prepare_subagent_spawn(
        &mut self,
        call: &HostCall,
        params: &SubagentSpawnParams,
    ) -> Result<Option<Option<u64>>, EngineError> {
        let rollback = self.run(
            call,
            Method::PrepareSubagentSpawn,
            Some(params),
            |_, _, _| Ok(()),
            |_, _, v| match v {
                Value::Nil => Ok(None),
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
                    Ok(rollback)
                }
                other => Err(format!(
                    "prepareSubagentSpawn may return only nothing or {{rollback = function}}, got {}",
                    other.type_name()
                )),
            },
        )?;
        Ok(rollback.map(|r| {
            r.map(|f| {
                self.next_rollback += 1;
                self.rollbacks.insert(self.next_rollback, f);
                self.next_rollback
            })
        }))
    }

    /// Calls and forgets a rollback kept by [`Vm::prepare_subagent_spawn`].
    pub fn rollback(&mut self, call: &HostCall, handle: u64) -> Result<(), EngineError> {
        let Some(f) = self.rollbacks.remove(&handle) else {
            tracing::warn!(
                engine = self.engine,
                handle,
                "unknown subagent rollback handle"
            );
            return Ok(());
        };
        let line = f.info().line_defined.and_then(|l| u32::try_from(l).ok());
        self.lua.set_app_data(CallScope { call: call.clone() });
        let out = self.run_inner(
            Method::PrepareSubagentSpawn,
            &f,
            line,
            None::<&()>,
            |_, _, _| Ok(()),
            |_, _, _| Ok(()),
        );
        self.lua.remove_app_data::<CallScope>();
        if let Some(mut r) = self.lua.app_data_mut::<Resident>() {
            r.end_call();
        }
        out
    }

    /// `onSubagentEnded`.
    pub fn on_subagent_ended(
        &mut self,
        call: &HostCall,
        params: &SubagentEndedParams,
    ) -> Result<Option<()>, EngineError> {
        self.run(
            call,
            Method::OnSubagentEnded,
            Some(params),
            |_, _, _| Ok(()),
            |_, _, _| Ok(()),
        )
    }

    /// `dispose`.
    pub fn dispose(&mut self, call: &HostCall) -> Result<Option<()>, EngineError> {
        self.run(
            call,
            Method::Dispose,
            None::<&()>,
            |_, _, _| Ok(()),
            |_, _, _| Ok(()),
        )
    }

    /// `p.state` as JSON.
    pub fn save_state(&self) -> Result<Json, EngineError> {
        let mut budget = self.budget();
        marshal::to_json(&self.lua, &Value::Table(self.state.clone()), &mut budget).map_err(|e| {
            EngineError::new(
                "saveState",
                &self.engine,
                EngineErrorKind::InvalidResult,
                e.describe("state"),
            )
            .at(located(&self.file, None))
        })
    }

    /// Replaces `p.state` with saved JSON (`null` gives an empty state).
    pub fn restore_state(&mut self, state: &Json) -> Result<(), EngineError> {
        let err = |e: mlua::Error| {
            EngineError::new(
                "restoreState",
                &self.engine,
                EngineErrorKind::Runtime,
                e.to_string(),
            )
        };
        let table = match state {
            Json::Null => self.lua.create_table().map_err(err)?,
            Json::Object(_) => match marshal::to_lua(&self.lua, state).map_err(err)? {
                Value::Table(t) => t,
                _ => self.lua.create_table().map_err(err)?,
            },
            other => {
                return Err(EngineError::new(
                    "restoreState",
                    &self.engine,
                    EngineErrorKind::InvalidResult,
                    format!("saved state must be an object, got {other}"),
                ));
            }
        };
        self.state = table;
        Ok(())
    }
}

/// A list of host messages as a frozen Lua array of resident tables.
fn message_list(lua: &Lua, res: &mut Resident, messages: &[Arc<Message>]) -> mlua::Result<Table> {
    let t = lua.create_table_with_capacity(messages.len(), 0)?;
    t.set_metatable(Some(lua.array_metatable()))?;
    for (i, m) in messages.iter().enumerate() {
        t.raw_set(i + 1, res.table_for(lua, m)?)?;
    }
    t.set_readonly(true);
    Ok(t)
}

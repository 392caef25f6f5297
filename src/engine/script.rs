//! What every script language shares: loading and validating an engine file, the per-instance
//! worker thread and deadline plumbing, the params each lifecycle method receives, turning a
//! script's converted result into the contract's types, and classifying failures.
//!
//! A language adapter implements [`Language`] (compile a file, boot a VM) and [`ScriptVm`] (call
//! one lifecycle function with prepared params and hand back its result as JSON, or as host
//! messages for `assemble`). Everything else — [`ScriptFactory`], [`ScriptInstance`] (the
//! [`Engine`] implementation), [`Site`] (error classification), [`Budget`] / [`ConvError`] (result
//! size and shape checks) — is written once here, so Lua and Rhai engines validate, fail and report
//! identically.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::{Map, Value as Json, json};

use crate::contract::{
    self, AfterTurnParams, AssembleParams, AssembleResult, BootstrapParams, BootstrapResult,
    CommitTurnParams, CommitTurnResult, CompactParams, CompactResult, EngineInfo, HostParam,
    IngestBatchParams, IngestBatchResult, IngestParams, IngestResult, MaintainParams,
    MaintainResult, Method, Severity, SubagentEndedParams, SubagentSpawnParams,
};
use crate::engine::{Engine, EngineFactory, InstanceContext, SpawnRollback};
use crate::error::{EngineError, EngineErrorKind, Op, ScriptLocation};
use crate::host::HostCall;
use crate::message::Message;
use crate::sandbox::{Limits, StopReason, StopSignals, WatchGuard, Worker, WorkerError};

/// Deepest nesting accepted in a script value.
pub const MAX_DEPTH: usize = 128;

/// How to load a script engine (any language).
#[derive(Clone, Debug, Default)]
pub struct LoadOptions {
    /// The configured entry id; `info.id` should equal it (a warning, an error when `strict`).
    pub configured_id: Option<String>,
    /// Turn the id-mismatch warning into an error.
    pub strict: bool,
    /// The entry config (`host.config`, `ctx.config`).
    pub config: Arc<Json>,
    /// Budgets: deadline, grace, memory, operations, result caps.
    pub limits: Limits,
    /// `ctx.agentDir` for the load-time factory run.
    pub agent_dir: String,
    /// `ctx.workspaceDir` for the load-time factory run.
    pub workspace_dir: String,
    /// A caller-owned abort flag shared by every instance: while set, running calls stop with
    /// `Cancelled` (never a quarantine). The host clears it. Each instance also has its own
    /// flag, see [`ScriptInstance::cancel_flag`].
    pub cancel: Option<Arc<AtomicBool>>,
}

/// A location in a script file, for errors.
pub fn located(file: &str, line: Option<u32>) -> Option<ScriptLocation> {
    Some(ScriptLocation::new(file, line))
}

// ---------------------------------------------------------------------------------------------
// Languages and VMs

/// What a VM is booted from (the compiled program aside).
#[derive(Clone, Debug)]
pub struct Boot {
    /// The script path as shown in errors.
    pub file: String,
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
    /// The flags the VM's interrupt reads.
    pub signals: Arc<StopSignals>,
}

/// What booting a VM found, for validation.
#[derive(Clone, Debug)]
pub struct Loaded {
    /// `info`, converted.
    pub info: EngineInfo,
    /// Top-level members and whether each is a function.
    pub members: Vec<(String, bool)>,
    /// The line where each function member is defined.
    pub lines: HashMap<String, u32>,
}

/// A script language: how a file becomes a program and a program a VM.
pub trait Language: Send + Sync + std::fmt::Debug + 'static {
    /// One live VM.
    type Vm: ScriptVm;
    /// A compiled engine file, shared by every instance.
    type Program: Send + Sync + std::fmt::Debug + 'static;
    /// Worker thread name.
    const THREAD: &'static str;
    /// Worker thread stack size.
    const STACK: usize;
    /// Compiles the file once (a syntax error is reported here when the language can).
    fn compile(
        file: &str,
        source: &str,
        label: &str,
        limits: &Limits,
    ) -> Result<Self::Program, EngineError>;
    /// Builds a VM for one instance: runs the file (and factory) and reads the engine's members.
    fn boot(program: &Arc<Self::Program>, boot: &Boot) -> Result<(Self::Vm, Loaded), EngineError>;
}

/// What goes under `p.message` / `p.messages` besides the params' own fields.
#[derive(Clone, Debug)]
pub enum Feed {
    /// Nothing.
    Nothing,
    /// `p.message`: one host message.
    One(Arc<Message>),
    /// `p.messages`: a list of host messages (a batch, a turn).
    List(Vec<Arc<Message>>),
    /// `p.messages`: the session context (`call.context()`), kept resident in the VM.
    Context,
}

/// What the host wants back from a call, so the adapter converts only that.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Expect {
    /// The result is ignored (`afterTurn`, `onSubagentEnded`, `dispose`, a rollback).
    Nothing,
    /// The result as JSON (nil / `()` becomes `null`).
    Json,
    /// `assemble`: the fields as JSON except `messages`, which map back to host messages.
    Assembled,
    /// `prepareSubagentSpawn`: nothing, or a map holding only a `rollback` function.
    Rollback,
}

/// A script's result, converted.
#[derive(Debug)]
pub enum Returned {
    /// Ignored, or nil / `()`.
    Nothing,
    /// The whole result.
    Json(Json),
    /// `assemble`: the other fields, and the messages.
    Assembled(Map<String, Json>, Vec<Arc<Message>>),
    /// `prepareSubagentSpawn`: the VM's handle of the rollback function, if one was returned.
    Rollback(Option<u64>),
}

/// One call's outcome from the VM: the line of the function (for result errors) and the
/// converted result, or what is wrong with it.
#[derive(Debug)]
pub struct Reply {
    /// Where the called function is defined.
    pub line: Option<u32>,
    /// The converted result, or a message naming the field at fault.
    pub value: Result<Returned, String>,
}

/// One live VM of some language, driven by [`ScriptInstance`] on its worker thread.
pub trait ScriptVm: Send + 'static {
    /// Calls `method` with `p` = `fields` + `feed` + per-session state. `Ok(None)` when the
    /// script does not define it; `Err` for a failed call (thrown, stopped, limit).
    fn invoke(
        &mut self,
        call: &HostCall,
        method: Method,
        fields: Map<String, Json>,
        feed: Feed,
        expect: Expect,
    ) -> Result<Option<Reply>, EngineError>;
    /// Calls and forgets the rollback function behind `handle`.
    fn rollback(&mut self, call: &HostCall, handle: u64) -> Result<(), EngineError>;
    /// The per-session state as JSON.
    fn save_state(&self) -> Result<Json, EngineError>;
    /// Replaces the per-session state with saved JSON (`null` gives an empty state).
    fn restore_state(&mut self, state: &Json) -> Result<(), EngineError>;
}

// ---------------------------------------------------------------------------------------------
// Params

/// `p` for a lifecycle call: the params' fields (messages aside, they travel as a [`Feed`]),
/// without the host params the engine opted out of (`acceptedHostParams`).
pub fn params_object<P: Serialize>(
    params: &P,
    info: &EngineInfo,
) -> Result<Map<String, Json>, String> {
    let mut map = match serde_json::to_value(params).map_err(|e| e.to_string())? {
        Json::Object(m) => m,
        _ => Map::new(),
    };
    map.remove("message");
    map.remove("messages");
    for (hp, key) in [
        (HostParam::SessionKey, "sessionKey"),
        (HostParam::Prompt, "prompt"),
        (HostParam::RuntimeSettings, "runtimeSettings"),
    ] {
        if !info.accepts(hp) {
            map.remove(key);
        }
    }
    Ok(map)
}

// ---------------------------------------------------------------------------------------------
// Results

/// Deserializes `obj` into `T`; on failure, names the field at fault by trying each field
/// alone over a known-good `template`.
pub fn typed<T: DeserializeOwned>(obj: &Map<String, Json>, template: &Json) -> Result<T, String> {
    match serde_json::from_value::<T>(Json::Object(obj.clone())) {
        Ok(v) => Ok(v),
        Err(e) => {
            for (k, v) in obj {
                let mut probe = template.clone();
                if let Json::Object(m) = &mut probe {
                    m.insert(k.clone(), v.clone());
                }
                if let Err(e2) = serde_json::from_value::<T>(probe) {
                    return Err(format!("`{k}`: {e2}"));
                }
            }
            Err(e.to_string())
        }
    }
}

fn json_type(v: &Json) -> &'static str {
    match v {
        Json::Null => "nothing",
        Json::Bool(_) => "a boolean",
        Json::Number(_) => "a number",
        Json::String(_) => "a string",
        Json::Array(_) => "a list",
        Json::Object(_) => "a map",
    }
}

/// The fields of a result that must be a map (`noun`: what the language calls one).
fn object(v: Json, method: Method, noun: &str) -> Result<Map<String, Json>, String> {
    match v {
        Json::Object(m) => Ok(m),
        other => Err(format!(
            "{method} must return a {noun}, got {}",
            json_type(&other)
        )),
    }
}

/// Converts a returned script value into `T` for `method`.
fn result_of<T: DeserializeOwned>(
    r: Returned,
    method: Method,
    noun: &str,
    template: Json,
) -> Result<T, String> {
    let v = match r {
        Returned::Json(v) => v,
        Returned::Nothing => Json::Null,
        other => return Err(format!("{method}: unexpected result {other:?}")),
    };
    typed(&object(v, method, noun)?, &template)
}

/// The `info` record from a converted script value (`id` / `name` default to empty strings so
/// the shape check, not the deserializer, reports them).
pub fn info_from_json(v: Json, noun: &str) -> Result<EngineInfo, String> {
    let Json::Object(mut map) = v else {
        return Err(format!("`info` must be a {noun} of fields"));
    };
    for f in ["id", "name"] {
        if map.get(f).is_none_or(Json::is_null) {
            map.insert(f.into(), Json::String(String::new()));
        }
    }
    typed::<EngineInfo>(&map, &json!({"id": "", "name": ""}))
        .map_err(|e| format!("info.{}", e.trim_start_matches('`').replacen('`', "", 1)))
}

/// Converts a script value that should be a message (already JSON) into a host message.
pub fn message_from_json(v: Json) -> Result<Arc<Message>, String> {
    serde_json::from_value::<Message>(v)
        .map(Arc::new)
        .map_err(|e| format!("not a valid message: {e}"))
}

/// A failed conversion of one list item, prefixed with its 1-based index.
pub fn at_index(i: usize, e: impl std::fmt::Display) -> String {
    format!("[{}] {e}", i + 1)
}

/// `messages` errors as the host reports them (`messages[3] ...` or `messages: ...`).
pub fn messages_error(e: String) -> String {
    if e.starts_with('[') {
        format!("messages{e}")
    } else {
        format!("messages: {e}")
    }
}

/// The most messages one list may hold, as an error when over.
pub fn check_count(len: usize, max: usize) -> Result<(), String> {
    if len > max {
        return Err(format!("{len} messages exceed the limit of {max}"));
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// Script values → JSON: errors naming the path, and the byte budget.

/// A conversion failure: the path inside the value and what is wrong.
#[derive(Debug)]
pub struct ConvError {
    path: Vec<String>,
    message: String,
}

impl ConvError {
    /// A failure at the current value.
    pub fn new(message: impl Into<String>) -> Self {
        ConvError {
            path: Vec::new(),
            message: message.into(),
        }
    }

    /// The same failure, one level down (`name` or `[i]`).
    pub fn under(mut self, segment: String) -> Self {
        self.path.push(segment);
        self
    }

    /// `field.path: message`, with `root` as the first segment.
    pub fn describe(&self, root: &str) -> String {
        let mut p = root.to_string();
        for seg in self.path.iter().rev() {
            if seg.starts_with('[') || p.is_empty() {
                p.push_str(seg);
            } else {
                p.push('.');
                p.push_str(seg);
            }
        }
        if p.is_empty() {
            self.message.clone()
        } else {
            format!("{p}: {}", self.message)
        }
    }
}

/// Byte budget of one conversion (all strings added up), and the nesting guard.
#[derive(Debug)]
pub struct Budget {
    /// Bytes still allowed.
    pub left: usize,
    /// The cap, for messages.
    pub cap: usize,
}

impl Budget {
    /// A budget of `cap` bytes.
    pub fn new(cap: usize) -> Self {
        Budget { left: cap, cap }
    }

    /// Takes `bytes` of text from the budget.
    pub fn take(&mut self, bytes: usize) -> Result<(), ConvError> {
        if bytes > self.left {
            return Err(ConvError::new(format!(
                "the result holds more than {} bytes of text",
                self.cap
            )));
        }
        self.left -= bytes;
        Ok(())
    }

    /// A string counted against the budget.
    pub fn string(&mut self, s: &str) -> Result<Json, ConvError> {
        self.take(s.len())?;
        Ok(Json::String(s.to_owned()))
    }
}

/// Guards nesting depth and cycles: `enter` before a container, `leave` after.
#[derive(Debug, Default)]
pub struct Nesting(Vec<usize>);

impl Nesting {
    /// Enters the container identified by `key` (its address).
    pub fn enter(&mut self, key: usize) -> Result<(), ConvError> {
        if self.0.contains(&key) {
            return Err(ConvError::new("a value contains itself (cyclic)"));
        }
        if self.0.len() >= MAX_DEPTH {
            return Err(ConvError::new(format!(
                "values nested deeper than {MAX_DEPTH} levels"
            )));
        }
        self.0.push(key);
        Ok(())
    }

    /// Leaves the innermost container.
    pub fn leave(&mut self) {
        self.0.pop();
    }
}

/// A script number as JSON: NaN and infinities refused, whole floats become integers.
pub fn number(n: f64) -> Result<Json, ConvError> {
    if n.is_nan() {
        return Err(ConvError::new("number is NaN"));
    }
    if n.is_infinite() {
        return Err(ConvError::new(format!("number is {n}")));
    }
    if n.fract() == 0.0 && n.abs() <= 9_007_199_254_740_992.0 {
        return Ok(Json::from(n as i64));
    }
    Ok(serde_json::Number::from_f64(n)
        .map(Json::Number)
        .unwrap_or(Json::Null))
}

// ---------------------------------------------------------------------------------------------
// Failures

/// A script failure as the adapter saw it, before classification.
#[derive(Debug)]
pub struct Fault {
    /// The kind when no stop signal explains it (a throw: `Runtime`; `Syntax`, `Memory`,
    /// `Limit`, `Factory` as the adapter recognised them).
    pub kind: EngineErrorKind,
    /// The message, without location prefixes.
    pub message: String,
    /// 1-based line, when known.
    pub line: Option<u32>,
    /// 1-based column, when known.
    pub column: Option<u32>,
}

/// Where failures of one VM are reported: file, engine, and the signals that explain stops.
#[derive(Clone, Debug)]
pub struct Site {
    /// The script file.
    pub file: String,
    /// The engine id (or label before `info` is known).
    pub engine: String,
    /// The interrupt's flags.
    pub signals: Arc<StopSignals>,
    /// Budgets, for messages.
    pub limits: Limits,
}

impl Site {
    /// The site of a VM being booted (its engine is the label until `info` names it).
    pub fn of(boot: &Boot) -> Site {
        Site {
            file: boot.file.clone(),
            engine: boot.label.clone(),
            signals: boot.signals.clone(),
            limits: boot.limits.clone(),
        }
    }

    /// The byte budget for converting one result, state or `host` argument.
    pub fn budget(&self) -> Budget {
        Budget::new(self.limits.results.max_result_bytes)
    }

    /// Starts a call under the deadline (disarmed when the guard drops).
    pub fn start_call(&self) -> WatchGuard {
        self.signals.start_call(self.limits.deadline())
    }

    /// Classifies a failed call: a set cancel flag is `Cancelled`, a passed deadline `Deadline`
    /// (both located where the interrupt stopped), anything else the fault's own kind.
    pub fn fail(&self, op: Op, fault: Fault) -> EngineError {
        let line = self.signals.line().or(fault.line);
        match self.signals.check() {
            Some(StopReason::Cancelled) => {
                return EngineError::new(
                    op,
                    &self.engine,
                    EngineErrorKind::Cancelled,
                    "call cancelled",
                )
                .at(located(&self.file, line));
            }
            Some(StopReason::Deadline) => {
                return EngineError::new(
                    op,
                    &self.engine,
                    EngineErrorKind::Deadline,
                    format!(
                        "script exceeded its deadline of {} ms and was stopped",
                        self.limits.deadline_ms
                    ),
                )
                .at(located(&self.file, line));
            }
            None => {}
        }
        let message = match fault.kind {
            EngineErrorKind::Memory => format!(
                "engine exceeded its memory cap of {} bytes ({})",
                self.limits.memory_bytes, fault.message
            ),
            _ => fault.message,
        };
        let location = ScriptLocation::new(&self.file, fault.line).with_column(fault.column);
        EngineError::new(op, &self.engine, fault.kind, message).at(Some(location))
    }

    /// An invalid result of `op` (the function defined at `line`).
    pub fn invalid(&self, op: Method, line: Option<u32>, msg: String) -> EngineError {
        EngineError::new(op, &self.engine, EngineErrorKind::InvalidResult, msg)
            .at(located(&self.file, line))
    }

    /// The host itself could not prepare a call: a host fault, never the script's, so it is
    /// returned to the caller and quarantines nothing.
    pub fn host(&self, op: Op, e: impl std::fmt::Display) -> EngineError {
        EngineError::new(
            op,
            &self.engine,
            EngineErrorKind::Host,
            format!("host could not pass the params: {e}"),
        )
    }
}

/// A worker that gave no answer, as an engine error.
fn worker_error(
    e: WorkerError,
    op: Op,
    engine: &str,
    file: &str,
    limits: &Limits,
    cancelled: bool,
) -> EngineError {
    let (kind, msg) = match e {
        WorkerError::TimedOut if cancelled => (
            EngineErrorKind::Cancelled,
            "call cancelled; the VM did not stop and was abandoned".to_string(),
        ),
        WorkerError::TimedOut => (
            EngineErrorKind::Deadline,
            format!(
                "script did not return within its deadline plus grace ({} ms); its VM is abandoned",
                limits.deadline_ms.saturating_add(limits.grace_ms)
            ),
        ),
        WorkerError::Abandoned => (
            EngineErrorKind::Deadline,
            "the VM was abandoned after an earlier call overran its deadline".to_string(),
        ),
        // The worker only dies from a panic in host code: a host fault, not the engine's.
        WorkerError::Gone => (
            EngineErrorKind::Host,
            "the engine's worker thread stopped (a host panic)".to_string(),
        ),
    };
    EngineError::new(op, engine, kind, msg).at(located(file, None))
}

// ---------------------------------------------------------------------------------------------
// Loading

fn label_for(path: &Path, opts: &LoadOptions) -> String {
    opts.configured_id.clone().unwrap_or_else(|| {
        path.file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_else(|| "script".into())
    })
}

/// Checks what loading found against the contract; returns the warnings.
fn validate(
    loaded: &Loaded,
    file: &str,
    label: &str,
    opts: &LoadOptions,
) -> Result<Vec<String>, EngineError> {
    let findings = contract::check_engine_shape(
        &loaded.info,
        &loaded.members,
        opts.configured_id.as_deref(),
        opts.strict,
    );
    let locate = |message: &str| -> Option<u32> {
        loaded
            .lines
            .iter()
            .find(|(name, _)| message.contains(&format!("`{name}`")))
            .map(|(_, l)| *l)
    };
    let mut errors = Vec::new();
    let mut warnings = Vec::new();
    let mut first_line = None;
    for f in findings {
        let line = locate(&f.message);
        match f.severity {
            Severity::Error => {
                first_line = first_line.or(line);
                errors.push(f.message);
            }
            Severity::Warning => warnings.push(match line {
                Some(l) => format!("{file}:{l}: {}", f.message),
                None => format!("{file}: {}", f.message),
            }),
        }
    }
    if !errors.is_empty() {
        let engine = if loaded.info.id.is_empty() {
            label
        } else {
            &loaded.info.id
        };
        return Err(EngineError::new(
            crate::error::Op::Validate,
            engine,
            EngineErrorKind::Contract,
            errors.join("; "),
        )
        .at(located(file, first_line)));
    }
    Ok(warnings)
}

/// The worker thread owning one VM (empty until booted).
type VmWorker<V> = Worker<Option<V>>;

/// Starts a worker and boots a VM of `L` on it.
fn spawn_vm<L: Language>(
    program: Arc<L::Program>,
    boot: Boot,
    op: Op,
) -> Result<(VmWorker<L::Vm>, Loaded), EngineError> {
    let file = boot.file.clone();
    let label = boot.label.clone();
    let limits = boot.limits.clone();
    let cancelled = boot.signals.cancel.clone();
    let worker = Worker::spawn(L::THREAD, L::STACK, None::<L::Vm>)
        .map_err(|m| EngineError::new(op, &label, EngineErrorKind::Runtime, m))?;
    let loaded = worker
        .call(limits.hard_timeout(), move |slot: &mut Option<L::Vm>| {
            L::boot(&program, &boot).map(|(vm, loaded)| {
                *slot = Some(vm);
                loaded
            })
        })
        .map_err(|e| {
            worker_error(
                e,
                op,
                &label,
                &file,
                &limits,
                cancelled.load(Ordering::Relaxed),
            )
        })??;
    Ok((worker, loaded))
}

/// A validated engine file of language `L`.
#[derive(Debug)]
pub struct ScriptFactory<L: Language> {
    path: PathBuf,
    file: String,
    program: Arc<L::Program>,
    info: EngineInfo,
    warnings: Vec<String>,
    opts: LoadOptions,
}

/// Loads, compiles and validates an engine file of language `L` (contract §2, §3, §6): the file
/// is booted once here so that every load-time failure surfaces before any session uses it.
pub fn load<L: Language>(
    path: &Path,
    opts: &LoadOptions,
) -> Result<Arc<ScriptFactory<L>>, EngineError> {
    let label = label_for(path, opts);
    let file = path.display().to_string();
    let source = std::fs::read_to_string(path).map_err(|e| {
        EngineError::new(
            crate::error::Op::Load,
            &label,
            EngineErrorKind::MissingFile,
            format!("cannot read {file}: {e}"),
        )
        .at(located(&file, None))
    })?;
    let program = Arc::new(L::compile(&file, &source, &label, &opts.limits)?);
    let boot = Boot {
        file: file.clone(),
        config: opts.config.clone(),
        agent_dir: opts.agent_dir.clone(),
        workspace_dir: opts.workspace_dir.clone(),
        limits: opts.limits.clone(),
        label: label.clone(),
        signals: Arc::new(StopSignals::new(opts.cancel.clone())),
    };
    let (_worker, loaded) = spawn_vm::<L>(program.clone(), boot, Op::Load)?;
    let warnings = validate(&loaded, &file, &label, opts)?;
    for w in &warnings {
        tracing::warn!(engine = loaded.info.id, "{w}");
    }
    Ok(Arc::new(ScriptFactory {
        path: path.to_path_buf(),
        file,
        program,
        info: loaded.info,
        warnings,
        opts: opts.clone(),
    }))
}

impl<L: Language> ScriptFactory<L> {
    /// A fresh instance with its own VM and worker thread, typed (for
    /// [`ScriptInstance::cancel_flag`]).
    pub fn instantiate_typed(
        &self,
        cx: &InstanceContext,
    ) -> Result<ScriptInstance<L::Vm>, EngineError> {
        // The interrupt reads one cancel flag: the shared one when given, else the instance's.
        let signals = Arc::new(StopSignals::new(self.opts.cancel.clone()));
        let cancel = signals.cancel.clone();
        let label = label_for(&self.path, &self.opts);
        let boot = Boot {
            file: self.file.clone(),
            config: cx.config.clone(),
            agent_dir: cx.agent_dir.clone(),
            workspace_dir: cx.workspace_dir.clone(),
            limits: self.opts.limits.clone(),
            label: label.clone(),
            signals,
        };
        let (worker, loaded) = spawn_vm::<L>(self.program.clone(), boot, Op::Instantiate)?;
        validate(&loaded, &self.file, &label, &self.opts)?;
        let defined = Method::ALL
            .into_iter()
            .filter(|m| loaded.members.iter().any(|(n, f)| *f && n == m.as_str()))
            .collect();
        Ok(ScriptInstance {
            info: loaded.info,
            defined,
            worker,
            limits: self.opts.limits.clone(),
            file: self.file.clone(),
            cancel,
            disposed: false,
        })
    }
}

impl<L: Language> EngineFactory for ScriptFactory<L> {
    fn info(&self) -> &EngineInfo {
        &self.info
    }

    fn source(&self) -> Option<&Path> {
        Some(&self.path)
    }

    fn warnings(&self) -> &[String] {
        &self.warnings
    }

    fn instantiate(&self, cx: &InstanceContext) -> Result<Box<dyn Engine>, EngineError> {
        Ok(Box::new(self.instantiate_typed(cx)?))
    }
}

// ---------------------------------------------------------------------------------------------
// Instances

/// One script engine instance: a VM on its own worker thread, serving one session.
#[derive(Debug)]
pub struct ScriptInstance<V: ScriptVm> {
    info: EngineInfo,
    defined: Vec<Method>,
    worker: Worker<Option<V>>,
    limits: Limits,
    file: String,
    cancel: Arc<AtomicBool>,
    disposed: bool,
}

impl<V: ScriptVm> ScriptInstance<V> {
    /// The flag that aborts this instance's running call with `Cancelled` (never a quarantine).
    /// The caller sets it and clears it again once the call has returned.
    pub fn cancel_flag(&self) -> Arc<AtomicBool> {
        self.cancel.clone()
    }

    /// Whether the VM was abandoned after overrunning deadline + grace (it is never reused).
    pub fn is_abandoned(&self) -> bool {
        self.worker.is_abandoned()
    }

    /// Runs `f` on the VM under the hard timeout.
    fn on_vm<R: Send + 'static>(
        &self,
        op: Op,
        f: impl FnOnce(&mut V) -> Result<R, EngineError> + Send + 'static,
    ) -> Result<R, EngineError> {
        let engine = self.info.id.clone();

        let out =
            self.worker.call(
                self.limits.hard_timeout(),
                move |slot: &mut Option<V>| match slot {
                    Some(vm) => f(vm),
                    None => Err(EngineError::new(
                        op,
                        engine,
                        EngineErrorKind::Runtime,
                        "the engine VM is not loaded",
                    )),
                },
            );
        match out {
            Ok(r) => r,
            Err(e) => Err(worker_error(
                e,
                op,
                &self.info.id,
                &self.file,
                &self.limits,
                self.cancel.load(Ordering::Relaxed),
            )),
        }
    }

    /// One lifecycle call: params prepared here, the script called on the worker, its result
    /// converted by `convert` (with the function's line for an invalid result).
    fn lifecycle<P: Serialize, R: Send + 'static>(
        &self,
        call: &HostCall,
        method: Method,
        params: &P,
        feed: Feed,
        expect: Expect,
        convert: impl FnOnce(Returned, &Limits) -> Result<R, String> + Send + 'static,
    ) -> Result<Option<R>, EngineError> {
        if !self.defined.contains(&method) {
            return Ok(None);
        }
        let fields = params_object(params, &self.info).map_err(|e| {
            EngineError::new(
                method,
                &self.info.id,
                EngineErrorKind::Runtime,
                format!("host could not pass the params: {e}"),
            )
        })?;
        let call = call.clone();
        let limits = self.limits.clone();
        let (engine, file) = (self.info.id.clone(), self.file.clone());
        self.on_vm(method.into(), move |vm| {
            let Some(reply) = vm.invoke(&call, method, fields, feed, expect)? else {
                return Ok(None);
            };
            reply
                .value
                .and_then(|r| convert(r, &limits))
                .map(Some)
                .map_err(|m| {
                    EngineError::new(method, engine, EngineErrorKind::InvalidResult, m)
                        .at(located(&file, reply.line))
                })
        })
    }
}

/// What a language calls a map in messages (`table`, `map`); fixed per result by the adapter.
const NOUN: &str = "table or map";

impl<V: ScriptVm> Engine for ScriptInstance<V> {
    fn info(&self) -> &EngineInfo {
        &self.info
    }

    fn defines(&self, method: Method) -> bool {
        self.defined.contains(&method)
    }

    fn bootstrap(
        &mut self,
        call: &HostCall,
        params: &BootstrapParams,
    ) -> Result<BootstrapResult, EngineError> {
        self.lifecycle(
            call,
            Method::Bootstrap,
            params,
            Feed::Nothing,
            Expect::Json,
            |r, _| result_of(r, Method::Bootstrap, NOUN, json!({"bootstrapped": false})),
        )
        .map(Option::unwrap_or_default)
    }

    fn ingest(
        &mut self,
        call: &HostCall,
        params: &IngestParams,
    ) -> Result<IngestResult, EngineError> {
        let feed = Feed::One(params.message.clone());
        self.lifecycle(call, Method::Ingest, params, feed, Expect::Json, |r, _| {
            result_of(r, Method::Ingest, NOUN, json!({"ingested": true}))
        })
        .map(Option::unwrap_or_default)
    }

    fn ingest_batch(
        &mut self,
        call: &HostCall,
        params: &IngestBatchParams,
    ) -> Result<IngestBatchResult, EngineError> {
        let n = params.messages.len() as u64;
        let feed = Feed::List(params.messages.clone());
        self.lifecycle(
            call,
            Method::IngestBatch,
            params,
            feed,
            Expect::Json,
            |r, _| result_of(r, Method::IngestBatch, NOUN, json!({"ingestedCount": 0})),
        )
        .map(|r| r.unwrap_or(IngestBatchResult { ingested_count: n }))
    }

    fn assemble(
        &mut self,
        call: &HostCall,
        params: &AssembleParams,
    ) -> Result<AssembleResult, EngineError> {
        self.lifecycle(
            call,
            Method::Assemble,
            params,
            Feed::Context,
            Expect::Assembled,
            |r, limits| {
                let Returned::Assembled(mut map, messages) = r else {
                    return Err(format!("assemble: unexpected result {r:?}"));
                };
                map.insert("messages".into(), Json::Array(Vec::new()));
                let mut out: AssembleResult =
                    typed(&map, &json!({"messages": [], "estimatedTokens": 0}))?;
                out.messages = messages;
                contract::check_assemble(&out, &limits.results)?;
                Ok(out)
            },
        )?
        .ok_or_else(|| not_defined(&self.info, Method::Assemble))
    }

    fn compact(
        &mut self,
        call: &HostCall,
        params: &CompactParams,
    ) -> Result<CompactResult, EngineError> {
        // `p.messages` is the resident context too (an addition to the contract's params, so an
        // engine that owns compaction can summarize without keeping its own copy).
        self.lifecycle(
            call,
            Method::Compact,
            params,
            Feed::Context,
            Expect::Json,
            |r, limits| {
                let out: CompactResult = result_of(
                    r,
                    Method::Compact,
                    NOUN,
                    json!({"ok": true, "compacted": false}),
                )?;
                contract::check_compact(&out, &limits.results)?;
                Ok(out)
            },
        )?
        .ok_or_else(|| not_defined(&self.info, Method::Compact))
    }

    fn after_turn(&mut self, call: &HostCall, params: &AfterTurnParams) -> Result<(), EngineError> {
        self.lifecycle(
            call,
            Method::AfterTurn,
            params,
            Feed::Context,
            Expect::Nothing,
            |_, _| Ok(()),
        )
        .map(|_| ())
    }

    fn commit_turn(
        &mut self,
        call: &HostCall,
        params: &CommitTurnParams,
    ) -> Result<Option<CommitTurnResult>, EngineError> {
        let feed = Feed::List(params.messages.clone());
        self.lifecycle(
            call,
            Method::CommitTurn,
            params,
            feed,
            Expect::Json,
            |r, _| optional(r, Method::CommitTurn, json!({"status": "committed"})),
        )
        .map(Option::flatten)
    }

    fn maintain(
        &mut self,
        call: &HostCall,
        params: &MaintainParams,
    ) -> Result<Option<MaintainResult>, EngineError> {
        self.lifecycle(
            call,
            Method::Maintain,
            params,
            Feed::Nothing,
            Expect::Json,
            |r, _| optional(r, Method::Maintain, json!({"changed": false})),
        )
        .map(Option::flatten)
    }

    fn prepare_subagent_spawn(
        &mut self,
        call: &HostCall,
        params: &SubagentSpawnParams,
    ) -> Result<Option<SpawnRollback>, EngineError> {
        self.lifecycle(
            call,
            Method::PrepareSubagentSpawn,
            params,
            Feed::Nothing,
            Expect::Rollback,
            |r, _| match r {
                Returned::Rollback(h) => Ok(h.map(SpawnRollback)),
                _ => Ok(None),
            },
        )
        .map(Option::flatten)
    }

    fn rollback_subagent_spawn(
        &mut self,
        call: &HostCall,
        handle: SpawnRollback,
    ) -> Result<(), EngineError> {
        let call = call.clone();
        self.on_vm(Method::PrepareSubagentSpawn.into(), move |vm| {
            vm.rollback(&call, handle.0)
        })
    }

    fn on_subagent_ended(
        &mut self,
        call: &HostCall,
        params: &SubagentEndedParams,
    ) -> Result<(), EngineError> {
        self.lifecycle(
            call,
            Method::OnSubagentEnded,
            params,
            Feed::Nothing,
            Expect::Nothing,
            |_, _| Ok(()),
        )
        .map(|_| ())
    }

    fn dispose(&mut self, call: &HostCall) -> Result<(), EngineError> {
        if self.disposed {
            return Ok(());
        }
        self.disposed = true;
        self.lifecycle(
            call,
            Method::Dispose,
            &json!({}),
            Feed::Nothing,
            Expect::Nothing,
            |_, _| Ok(()),
        )
        .map(|_| ())
    }

    fn save_state(&mut self) -> Result<Json, EngineError> {
        self.on_vm(Op::SaveState, |vm| vm.save_state())
    }

    fn restore_state(&mut self, state: Json) -> Result<(), EngineError> {
        self.on_vm(Op::RestoreState, move |vm| vm.restore_state(&state))
    }
}

fn not_defined(info: &EngineInfo, method: Method) -> EngineError {
    EngineError::new(
        method,
        &info.id,
        EngineErrorKind::Contract,
        format!("{method} is not defined"),
    )
}

/// A result that may be nothing (`commitTurn`, `maintain`).
fn optional<T: DeserializeOwned>(
    r: Returned,
    method: Method,
    template: Json,
) -> Result<Option<T>, String> {
    match r {
        Returned::Nothing | Returned::Json(Json::Null) => Ok(None),
        r => result_of(r, method, NOUN, template).map(Some),
    }
}

// ---------------------------------------------------------------------------------------------
// `host` API arguments, as every language passes them

/// The fields of `p` that `host.delegateCompaction(p)` passes on to the built-in compaction.
pub const COMPACT_FIELDS: [&str; 8] = [
    "sessionId",
    "sessionKey",
    "tokenBudget",
    "force",
    "currentTokenCount",
    "compactionTarget",
    "customInstructions",
    "runtimeSettings",
];

/// `host.delegateCompaction(p)`: the compaction params from `p`'s [`COMPACT_FIELDS`].
pub fn delegate_params(fields: Map<String, Json>) -> Result<CompactParams, String> {
    serde_json::from_value(Json::Object(fields))
        .map_err(|e| format!("host.delegateCompaction: {e}"))
}

/// `host.summarize(messages, opts)`: the options (`None` = defaults).
pub fn summarize_options(opts: Option<Json>) -> Result<crate::host::SummarizeOptions, String> {
    match opts {
        None | Some(Json::Null) => Ok(Default::default()),
        Some(v) => serde_json::from_value(v).map_err(|e| format!("host.summarize opts: {e}")),
    }
}

// ---------------------------------------------------------------------------------------------
// Pieces every VM keeps the same way

/// Rollback functions returned by `prepareSubagentSpawn`, kept under handles until used.
#[derive(Debug)]
pub struct Rollbacks<F> {
    next: u64,
    kept: HashMap<u64, F>,
}

impl<F> Default for Rollbacks<F> {
    fn default() -> Self {
        Rollbacks {
            next: 0,
            kept: HashMap::new(),
        }
    }
}

impl<F> Rollbacks<F> {
    /// Keeps `f`; returns its handle.
    pub fn keep(&mut self, f: F) -> u64 {
        self.next += 1;
        self.kept.insert(self.next, f);
        self.next
    }

    /// Takes the function behind `handle` (an unknown handle is logged and gives `None`).
    pub fn take(&mut self, handle: u64, engine: &str) -> Option<F> {
        let f = self.kept.remove(&handle);
        if f.is_none() {
            tracing::warn!(engine, handle, "unknown subagent rollback handle");
        }
        f
    }
}

/// A whole result converted to JSON, as [`Expect::Json`] wants it.
pub fn json_reply(converted: Result<Json, ConvError>) -> Result<Returned, String> {
    match converted.map_err(|e| e.describe(""))? {
        Json::Null => Ok(Returned::Nothing),
        j => Ok(Returned::Json(j)),
    }
}

/// How the session context changed since the resident copy was made.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ContextChange {
    /// The very same context: nothing to do.
    Same,
    /// Messages appended from this index on: marshal only them.
    Appended(usize),
    /// Anything else (a compaction gives `[summary, kept…]`): rebuild, reusing what is resident.
    Rebuilt,
}

/// Compares the resident context (`old`, if any) with the call's.
pub fn context_change(
    old: Option<&Arc<Vec<Arc<Message>>>>,
    new: &Arc<Vec<Arc<Message>>>,
) -> ContextChange {
    match old {
        Some(old) if Arc::ptr_eq(old, new) => ContextChange::Same,
        Some(old)
            if old.len() <= new.len()
                && old.iter().zip(new.iter()).all(|(a, b)| Arc::ptr_eq(a, b)) =>
        {
            ContextChange::Appended(old.len())
        }
        _ => ContextChange::Rebuilt,
    }
}

impl Site {
    /// The state could not be saved (it holds something JSON cannot).
    pub fn state_error(&self, e: ConvError) -> EngineError {
        EngineError::new(
            crate::error::Op::SaveState,
            &self.engine,
            EngineErrorKind::InvalidResult,
            e.describe("state"),
        )
        .at(located(&self.file, None))
    }

    /// Checks saved state before restoring it: `Ok(None)` for an empty state, the object
    /// otherwise; the adapter converts `Err` text with [`Site::restore_error`].
    pub fn restorable<'a>(&self, state: &'a Json) -> Result<Option<&'a Json>, EngineError> {
        match state {
            Json::Null => Ok(None),
            Json::Object(_) => Ok(Some(state)),
            other => Err(EngineError::new(
                crate::error::Op::RestoreState,
                &self.engine,
                EngineErrorKind::InvalidResult,
                format!("saved state must be an object, got {other}"),
            )),
        }
    }

    /// The adapter could not turn saved state into a script value.
    pub fn restore_error(&self, e: impl std::fmt::Display) -> EngineError {
        EngineError::new(
            crate::error::Op::RestoreState,
            &self.engine,
            EngineErrorKind::Runtime,
            e.to_string(),
        )
    }
}

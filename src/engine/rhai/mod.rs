//! Rhai engines: one `.rhai` file whose top-level functions are the lifecycle methods and
//! `fn info()` (or the factory `fn create(ctx)`), compiled once to an AST and run one engine per
//! session (contract §2; the script side is `docs/rhai-api.md`).
//!
//! Loading, validation, the worker thread per instance, params, result conversion and error
//! classification are shared ([`crate::engine::script`]); this module says how a Rhai engine is
//! built and called. Each instance gets an `Engine::new_raw()` with the standard package (built
//! once, shared), the stdlib as the only importable modules, `eval` disabled, the operation,
//! call-depth and expression-depth limits, and an `on_progress` callback that reads the
//! watchdog's flag (no clock). The engine has **no size limits** (they make building arrays and
//! maps O(N²) and miss `m[k] = v`): values the host receives are checked instead
//! ([`values::to_json`] against the result caps), and memory bombs are stopped by the deadline
//! or the operation budget. Per-session state is `this` (bound with `bind_this_ptr`).

pub mod api;
pub mod messages;
pub mod values;

use std::collections::HashMap;
use std::path::Path;
use std::sync::{Arc, OnceLock};

use parking_lot::Mutex;
use rhai::packages::{Package, StandardPackage};
use rhai::{
    AST, CallFnOptions, Dynamic, Engine as RhaiEngine, EvalAltResult, FnPtr, Map, Module,
    ModuleResolver, Position, Scope, Shared,
};
use serde_json::{Map as JsonMap, Value as Json};

use crate::contract::{EngineInfo, Method};
use crate::engine::script::{
    self, Boot, Budget, Expect, Fault, Feed, Language, Loaded, Reply, Returned, Rollbacks,
    ScriptFactory, ScriptInstance, ScriptVm, Site,
};
use crate::engine::{EngineFactory, InstanceContext};
use crate::error::{EngineError, EngineErrorKind, Op};
use crate::host::HostCall;
use crate::sandbox::{Limits, StopSignals};
use api::Bridge;

pub use crate::engine::script::LoadOptions;

/// Worker thread stack: room for Rhai's recursive evaluator at the call-level limit.
const WORKER_STACK: usize = 16 << 20;

/// The Rhai language for [`script`].
#[derive(Debug)]
pub struct Rhai;

/// A compiled `.rhai` engine file.
#[derive(Debug)]
pub struct Program {
    ast: AST,
    /// Public script functions: name → (arity, line).
    functions: HashMap<String, (usize, Option<u32>)>,
}

impl Language for Rhai {
    type Vm = Vm;
    type Program = Program;
    const THREAD: &'static str = "ctxhost-rhai";
    const STACK: usize = WORKER_STACK;

    fn compile(
        file: &str,
        source: &str,
        label: &str,
        limits: &Limits,
    ) -> Result<Program, EngineError> {
        let engine = configured(limits);
        let mut ast = engine.compile(source).map_err(|e| {
            let pos = e.1;
            let message = e.0.to_string();
            site_for(file, label, limits).fail(
                Op::Load,
                Fault {
                    kind: EngineErrorKind::Syntax,
                    message,
                    line: pos_line(pos),
                    column: pos_col(pos),
                },
            )
        })?;
        ast.set_source(file);
        let lines = function_lines(source);
        let functions = ast
            .iter_functions()
            .filter(|f| f.access == rhai::FnAccess::Public)
            .map(|f| {
                let line = lines.get(f.name).copied();
                (f.name.to_string(), (f.params.len(), line))
            })
            .collect();
        Ok(Program { ast, functions })
    }

    fn boot(program: &Arc<Program>, boot: &Boot) -> Result<(Vm, Loaded), EngineError> {
        Vm::boot(program, boot)
    }
}

/// A validated Rhai engine file.
pub type RhaiFactory = ScriptFactory<Rhai>;

/// One Rhai engine instance: an engine on its own worker thread, serving one session.
pub type RhaiInstance = ScriptInstance<Vm>;

/// Loads and validates a Rhai engine file (contract §2, §3, §6).
pub fn load(path: &Path, opts: &LoadOptions) -> Result<Arc<dyn EngineFactory>, EngineError> {
    Ok(load_factory(path, opts)?)
}

/// Like [`load`], keeping the concrete type (for [`RhaiFactory::instantiate_rhai`]).
pub fn load_factory(path: &Path, opts: &LoadOptions) -> Result<Arc<RhaiFactory>, EngineError> {
    script::load::<Rhai>(path, opts)
}

impl ScriptFactory<Rhai> {
    /// A fresh instance, typed (for [`RhaiInstance::cancel_flag`]).
    pub fn instantiate_rhai(&self, cx: &InstanceContext) -> Result<RhaiInstance, EngineError> {
        self.instantiate_typed(cx)
    }
}

// ---------------------------------------------------------------------------------------------
// Engines

/// The standard package, built once and shared by every engine (a clone is a pointer copy).
fn package() -> Shared<Module> {
    static PACKAGE: OnceLock<Shared<Module>> = OnceLock::new();
    PACKAGE
        .get_or_init(|| StandardPackage::new().as_shared_module())
        .clone()
}

/// The `message` and `messages` types' functions, built once and shared by every engine.
fn message_types() -> Shared<Module> {
    static TYPES: OnceLock<Shared<Module>> = OnceLock::new();
    TYPES.get_or_init(messages::module).clone()
}

/// An engine with the package, the stdlib resolver and every limit, but no `host` module, no
/// deadline and no printing (for compiling and for building stdlib modules).
fn configured(limits: &Limits) -> RhaiEngine {
    let mut e = RhaiEngine::new_raw();
    e.register_global_module(package());
    e.register_global_module(message_types());
    e.register_type_with_name::<messages::ScriptMessage>("message");
    e.register_type_with_name::<messages::MessageList>("messages");
    e.set_module_resolver(StdlibResolver);
    e.disable_symbol("eval");
    e.set_max_call_levels(limits.max_call_levels);
    e.set_max_expr_depths(limits.max_expr_depth, limits.max_expr_depth);
    e.set_max_operations(limits.max_operations);
    e.on_print(|_| {});
    e.on_debug(|_, _, _| {});
    e
}

/// The stdlib module names (the Lua stdlib's, whose Rhai twins live in `stdlib/*.rhai`).
fn stdlib_names() -> impl Iterator<Item = &'static str> {
    crate::stdlib::RHAI_MODULES.iter().map(|(n, _)| *n)
}

/// The Rhai source of a stdlib module.
fn stdlib_source(name: &str) -> Option<&'static str> {
    crate::stdlib::rhai_module(name)
}

/// Stdlib modules compiled so far (each once per process).
fn stdlib_cache() -> &'static Mutex<HashMap<String, Shared<Module>>> {
    static CACHE: OnceLock<Mutex<HashMap<String, Shared<Module>>>> = OnceLock::new();
    CACHE.get_or_init(Default::default)
}

/// A stdlib module by name, compiled on first use with a limits-only engine.
fn stdlib_module(name: &str) -> Result<Option<Shared<Module>>, Box<EvalAltResult>> {
    if let Some(m) = stdlib_cache().lock().get(name) {
        return Ok(Some(m.clone()));
    }
    let Some(src) = stdlib_source(name) else {
        return Ok(None);
    };
    // Generous limits: the stdlib is trusted code; only its definitions run here.
    let engine = configured(&Limits::default());
    let mut ast = engine.compile(src)?;
    ast.set_source(format!("stdlib/{name}.rhai"));
    let module: Shared<Module> = Module::eval_ast_as_new(Scope::new(), &ast, &engine)?.into();
    stdlib_cache()
        .lock()
        .entry(name.to_string())
        .or_insert(module.clone());
    Ok(Some(module))
}

/// `import` resolves only the host's stdlib.
#[derive(Debug, Clone, Copy)]
struct StdlibResolver;

impl ModuleResolver for StdlibResolver {
    fn resolve(
        &self,
        _engine: &RhaiEngine,
        _source: Option<&str>,
        path: &str,
        pos: Position,
    ) -> Result<Shared<Module>, Box<EvalAltResult>> {
        match stdlib_module(path)? {
            Some(m) => Ok(m),
            None => Err(EvalAltResult::ErrorRuntime(
                format!(
                    "module '{path}' not found: import resolves only the host stdlib (known modules: {})",
                    stdlib_names().collect::<Vec<_>>().join(", ")
                )
                .into(),
                pos,
            )
            .into()),
        }
    }
}

/// The engine of one instance: [`configured`] plus `host`, the stdlib under its own names (so
/// functions reach `fit::…` after a top-level `import "fit" as fit;`), the deadline and logging.
fn instance_engine(
    limits: &Limits,
    signals: &Arc<StopSignals>,
    host: Shared<Module>,
    bridge: &Arc<Bridge>,
) -> Result<RhaiEngine, String> {
    let mut e = configured(limits);
    e.register_static_module("host", host);
    for name in stdlib_names() {
        if let Some(m) = stdlib_module(name).map_err(|e| format!("stdlib {name}: {e}"))? {
            e.register_static_module(name, m);
        }
    }
    let s = signals.clone();
    e.on_progress(move |_| s.check().map(|_| Dynamic::UNIT));
    let b = bridge.clone();
    e.on_print(move |text| {
        let engine = b.engine_id.lock().clone();
        tracing::info!(engine, "{text}");
    });
    let b = bridge.clone();
    e.on_debug(move |text, _, pos| {
        let engine = b.engine_id.lock().clone();
        tracing::debug!(engine, line = pos_line(pos), "{text}");
    });
    Ok(e)
}

// ---------------------------------------------------------------------------------------------
// Errors

fn pos_line(p: Position) -> Option<u32> {
    p.line().and_then(|l| u32::try_from(l).ok())
}

fn pos_col(p: Position) -> Option<u32> {
    p.position().and_then(|c| u32::try_from(c).ok())
}

fn site_for(file: &str, engine: &str, limits: &Limits) -> Site {
    Site {
        file: file.to_string(),
        engine: engine.to_string(),
        signals: Arc::new(StopSignals::new(None)),
        limits: limits.clone(),
    }
}

/// The text of a Rhai error without its ` (line L, position C)` suffix.
fn bare(e: &EvalAltResult) -> String {
    let text = match e {
        EvalAltResult::ErrorRuntime(v, _) if v.is_string() => v.to_string(),
        EvalAltResult::ErrorRuntime(v, _) => format!("thrown: {v}"),
        other => other.to_string(),
    };
    match text.rfind(" (line ") {
        Some(i) if text.ends_with(')') => text[..i].to_string(),
        _ => text,
    }
}

/// A Rhai failure as a [`Fault`]: the innermost error of a call chain, located at the innermost
/// known position (`default`: the kind of an ordinary throw). Rhai gives limit and termination
/// errors no position; the caller falls back to the called function's line.
fn fault(err: &EvalAltResult, limits: &Limits, default: EngineErrorKind) -> Fault {
    let mut e = err;
    let mut pos = err.position();
    while let EvalAltResult::ErrorInFunctionCall(_, _, inner, p) = e {
        if !p.is_none() {
            pos = *p;
        }
        e = inner;
    }
    if !e.position().is_none() {
        pos = e.position();
    }
    let (kind, message) = match e {
        EvalAltResult::ErrorTooManyOperations(_) => (
            EngineErrorKind::Limit,
            format!(
                "script exceeded its budget of {} operations",
                limits.max_operations
            ),
        ),
        EvalAltResult::ErrorStackOverflow(_) => (
            EngineErrorKind::Limit,
            format!(
                "stack overflow: calls nested deeper than {} levels",
                limits.max_call_levels
            ),
        ),
        EvalAltResult::ErrorDataTooLarge(..) => (EngineErrorKind::Limit, bare(e)),
        _ => (default, bare(e)),
    };
    Fault {
        kind,
        message,
        line: pos_line(pos),
        column: pos_col(pos),
    }
}

/// The line of each `fn name(` at the start of a line (Rhai's metadata has no positions).
fn function_lines(source: &str) -> HashMap<String, u32> {
    let mut out = HashMap::new();
    for (i, line) in source.lines().enumerate() {
        let t = line.trim_start();
        let t = t.strip_prefix("private ").unwrap_or(t).trim_start();
        if let Some(rest) = t.strip_prefix("fn ") {
            let name: String = rest
                .trim_start()
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_')
                .collect();
            if let Ok(n) = u32::try_from(i + 1) {
                out.entry(name).or_insert(n);
            }
        }
    }
    out
}

// ---------------------------------------------------------------------------------------------
// The VM

/// A live Rhai engine for one instance.
pub struct Vm {
    engine: RhaiEngine,
    program: Arc<Program>,
    site: Site,
    bridge: Arc<Bridge>,
    state: Dynamic,
    rollbacks: Rollbacks<FnPtr>,
}

impl Vm {
    /// Builds the engine, runs the file's top-level statements once, then `create(ctx)` or
    /// `info()`, and lists the engine's members.
    pub fn boot(program: &Arc<Program>, boot: &Boot) -> Result<(Vm, Loaded), EngineError> {
        let file = boot.file.clone();
        let label = boot.label.clone();
        let mut site = Site::of(boot);
        let bridge = Arc::new(Bridge::new(&label, boot.limits.results.clone()));
        let contract_err = |m: String, line: Option<u32>| {
            EngineError::new(
                crate::error::Op::Validate,
                &label,
                EngineErrorKind::Contract,
                m,
            )
            .at(script::located(&file, line))
        };
        let setup = |m: String| {
            EngineError::new(crate::error::Op::Load, &label, EngineErrorKind::Runtime, m)
        };
        let host = api::host_module(&bridge, &boot.config).map_err(setup)?;
        let engine = instance_engine(&boot.limits, &boot.signals, host, &bridge).map_err(setup)?;

        let mut members = Vec::new();
        let mut lines = HashMap::new();
        for (name, (arity, line)) in &program.functions {
            if let Some(l) = line {
                lines.insert(name.clone(), *l);
            }
            let wanted = match name.as_str() {
                "create" => continue,
                "info" => 0,
                n if Method::from_name(n).is_some() => 1,
                // Helpers are ordinary functions; only near-misses of member names are reported.
                n if crate::contract::closest_member(n).is_some() => *arity,
                _ => continue,
            };
            if *arity != wanted {
                return Err(contract_err(
                    format!(
                        "`{name}` must take {wanted} parameter{}, it takes {arity}",
                        if wanted == 1 { " (`p`)" } else { "s" }
                    ),
                    *line,
                ));
            }
            members.push((name.clone(), true));
        }
        members.sort();

        let guard = site.start_call();
        engine
            .run_ast_with_scope(&mut Scope::new(), &program.ast)
            .map_err(|e| site.fail(Op::Load, fault(&e, &boot.limits, EngineErrorKind::Runtime)))?;
        let call = |name: &str, args: Vec<Dynamic>, kind: EngineErrorKind, op: Op| {
            engine
                .call_fn_with_options::<Dynamic>(
                    CallFnOptions::new().eval_ast(false),
                    &mut Scope::new(),
                    &program.ast,
                    name,
                    args,
                )
                .map_err(|e| site.fail(op, fault(&e, &boot.limits, kind)))
        };
        let (info_value, what) = if program.functions.get("create").is_some_and(|f| f.0 == 1) {
            let mut ctx = Map::new();
            let config = match &*boot.config {
                Json::Null => Dynamic::from_map(Map::new()),
                c => values::from_json(c).map_err(setup)?,
            };
            ctx.insert("config".into(), config);
            ctx.insert("agentDir".into(), boot.agent_dir.clone().into());
            ctx.insert("workspaceDir".into(), boot.workspace_dir.clone().into());
            let v = call(
                "create",
                vec![Dynamic::from_map(ctx)],
                EngineErrorKind::Factory,
                Op::Factory,
            )?;
            (v, "create(ctx)")
        } else if program.functions.get("info").is_some_and(|f| f.0 == 0) {
            (
                call("info", Vec::new(), EngineErrorKind::Runtime, Op::Load)?,
                "info()",
            )
        } else {
            return Err(contract_err(
                "the engine has no `fn info()` (or `fn create(ctx)`) returning its info map".into(),
                None,
            ));
        };
        drop(guard);
        if !info_value.is_map() {
            let line = lines
                .get(if what == "info()" { "info" } else { "create" })
                .copied();
            let kind = if what == "info()" {
                EngineErrorKind::Contract
            } else {
                EngineErrorKind::Factory
            };
            return Err(EngineError::new(
                crate::error::Op::Load,
                &label,
                kind,
                format!(
                    "{what} must return the info map, got {}",
                    info_value.type_name()
                ),
            )
            .at(script::located(&file, line)));
        }
        let json = values::to_json(&info_value, &mut Budget::new(1 << 20))
            .map_err(|e| contract_err(e.describe("info"), None))?;
        let info: EngineInfo =
            script::info_from_json(json, "map").map_err(|m| contract_err(m, None))?;
        if !info.id.is_empty() {
            site.engine = info.id.clone();
            *bridge.engine_id.lock() = info.id.clone();
        }
        let vm = Vm {
            engine,
            program: program.clone(),
            site,
            bridge,
            state: Dynamic::from_map(Map::new()),
            rollbacks: Rollbacks::default(),
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

    /// Calls the script function `name` with `args` and `this` bound to the state, under the
    /// deadline, with `call` visible to `host::*`.
    fn call_script(
        &mut self,
        call: &HostCall,
        op: Op,
        name: &str,
        args: Vec<Dynamic>,
    ) -> Result<Dynamic, EngineError> {
        let fn_line = self.program.functions.get(name).and_then(|(_, line)| *line);
        *self.bridge.call.lock() = Some(call.clone());
        let guard = self.site.start_call();
        let out = self.engine.call_fn_with_options::<Dynamic>(
            CallFnOptions::new()
                .eval_ast(false)
                .rewind_scope(true)
                .bind_this_ptr(&mut self.state),
            &mut Scope::new(),
            &self.program.ast,
            name,
            args,
        );
        let stopped = self.site.signals.check();
        drop(guard);
        *self.bridge.call.lock() = None;
        match out {
            Ok(v) if stopped.is_none() => Ok(v),
            Ok(_) => Err(self.site.fail(
                op,
                Fault {
                    kind: EngineErrorKind::Runtime,
                    message: "stopped".into(),
                    line: fn_line,
                    column: None,
                },
            )),
            Err(e) => {
                let mut f = fault(&e, &self.site.limits, EngineErrorKind::Runtime);
                f.line = f.line.or(fn_line);
                Err(self.site.fail(op, f))
            }
        }
    }

    /// `p` for a call: the params' fields plus the messages.
    fn params(
        &mut self,
        call: &HostCall,
        fields: JsonMap<String, Json>,
        feed: Feed,
    ) -> Result<Dynamic, String> {
        let p = values::from_json(&Json::Object(fields))?;
        let mut map = p.try_cast::<Map>().unwrap_or_default();
        let mut res = self.bridge.resident.lock();
        match feed {
            Feed::Nothing => {}
            Feed::One(m) => {
                map.insert("message".into(), res.value_for(&m)?);
            }
            Feed::List(list) => {
                map.insert("messages".into(), res.list(&list)?);
            }
            Feed::Context => {
                map.insert("messages".into(), res.sync(call.context())?);
            }
        }
        Ok(Dynamic::from_map(map))
    }

    fn convert(&mut self, v: Dynamic, expect: Expect) -> Result<Returned, String> {
        match expect {
            Expect::Nothing => Ok(Returned::Nothing),
            Expect::Json => script::json_reply(values::to_json(&v, &mut self.site.budget())),
            Expect::Assembled => self.assembled(&v),
            Expect::Rollback => self.rollback_of(&v),
        }
    }

    fn assembled(&self, v: &Dynamic) -> Result<Returned, String> {
        let map = v
            .as_map_ref()
            .map_err(|t| format!("assemble must return a map, got {t}"))?;
        let mut budget = self.site.budget();
        let mut fields = JsonMap::new();
        for (k, item) in map.iter() {
            if k.as_str() == "messages" {
                continue;
            }
            let j = values::to_json(item, &mut budget).map_err(|e| e.describe(k))?;
            fields.insert(k.to_string(), j);
        }
        let raw = map
            .get("messages")
            .filter(|m| !m.is_unit())
            .ok_or_else(|| "missing field `messages`".to_string())?;
        let messages = values::messages_from(
            raw,
            &mut budget,
            self.site.limits.results.max_result_messages,
        )
        .map_err(script::messages_error)?;
        Ok(Returned::Assembled(fields, messages))
    }

    /// `prepareSubagentSpawn`'s result: a returned `rollback` function is kept under a handle.
    fn rollback_of(&mut self, v: &Dynamic) -> Result<Returned, String> {
        if v.is_unit() {
            return Ok(Returned::Rollback(None));
        }
        let shape = "prepareSubagentSpawn may return only nothing or #{rollback: Fn(\"name\")}";
        let map = v.as_map_ref().map_err(|t| format!("{shape}, got {t}"))?;
        let mut rollback = None;
        for (k, item) in map.iter() {
            match (k.as_str(), item.clone().try_cast::<FnPtr>()) {
                ("rollback", Some(f)) => rollback = Some(f),
                ("rollback", None) if item.is_unit() => {}
                _ => return Err(format!("{shape}, got a map with key {k}")),
            }
        }
        drop(map);
        Ok(Returned::Rollback(rollback.map(|f| self.rollbacks.keep(f))))
    }
}

impl ScriptVm for Vm {
    fn invoke(
        &mut self,
        call: &HostCall,
        method: Method,
        fields: JsonMap<String, Json>,
        feed: Feed,
        expect: Expect,
    ) -> Result<Option<Reply>, EngineError> {
        let name = method.as_str();
        let Some(&(arity, line)) = self.program.functions.get(name) else {
            return Ok(None);
        };
        if arity != 1 {
            return Ok(None);
        }
        let op = Op::from(method);
        let p = self
            .params(call, fields, feed)
            .map_err(|e| self.site.host(op, e));
        let out = p
            .and_then(|p| self.call_script(call, op, name, vec![p]))
            .map(|v| self.convert(v, expect));
        self.bridge.resident.lock().end_call();
        out.map(|value| Some(Reply { line, value }))
    }

    fn rollback(&mut self, call: &HostCall, handle: u64) -> Result<(), EngineError> {
        let Some(f) = self.rollbacks.take(handle, &self.site.engine) else {
            return Ok(());
        };
        let args: Vec<Dynamic> = f.curry().to_vec();
        let out = self.call_script(call, Method::PrepareSubagentSpawn.into(), f.fn_name(), args);
        self.bridge.resident.lock().end_call();
        out.map(|_| ())
    }

    fn save_state(&self) -> Result<Json, EngineError> {
        values::to_json(&self.state, &mut self.site.budget()).map_err(|e| self.site.state_error(e))
    }

    fn restore_state(&mut self, state: &Json) -> Result<(), EngineError> {
        self.state = match self.site.restorable(state)? {
            None => Dynamic::from_map(Map::new()),
            Some(state) => values::from_json(state).map_err(|e| self.site.restore_error(e))?,
        };
        Ok(())
    }
}

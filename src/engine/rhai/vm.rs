//! One live Rhai engine for one instance: booted from the compiled [`Program`], called with `p`
//! and `this` bound to the per-session state, its results converted for the shared layer.

use std::collections::HashMap;
use std::sync::Arc;

use rhai::{CallFnOptions, Dynamic, Engine as RhaiEngine, FnPtr, Map, Scope};
use serde_json::{Map as JsonMap, Value as Json};

use super::Program;
use super::api::{self, Bridge};
use super::engine::instance_engine;
use super::fault::fault;
use super::memory::{self, Meter};
use super::values;
use crate::contract::Method;
use crate::engine::api::HostCall;
use crate::engine::script::{
    self, Boot, Expect, Fault, Feed, Loaded, Reply, Returned, Rollbacks, ScriptVm, Site,
};
use crate::error::{EngineError, EngineErrorKind, Op};

/// A live Rhai engine for one instance.
pub struct Vm {
    engine: RhaiEngine,
    program: Arc<Program>,
    site: Site,
    bridge: Arc<Bridge>,
    state: Dynamic,
    rollbacks: Rollbacks<FnPtr>,
    /// The memory cap's account (kept state + what the current call grew).
    meter: Arc<Meter>,
}

impl Vm {
    /// Builds the engine, runs the file's top-level statements once, then `create(ctx)` or
    /// `info()`, and lists the engine's members.
    pub fn boot(program: &Arc<Program>, boot: &Boot) -> Result<(Vm, Loaded), EngineError> {
        let mut site = Site::of(boot);
        let bridge = Arc::new(Bridge::new(
            &boot.label,
            boot.limits.results.clone(),
            boot.signals.clone(),
        ));
        let setup = |m: String| site.error(Op::Load, EngineErrorKind::Runtime, m, None);
        let host = api::host_module(&bridge, &boot.config).map_err(setup)?;
        let meter = Arc::new(Meter::new(boot.limits.memory_bytes));
        let engine = instance_engine(&program.limits, &boot.signals, &meter, host, &bridge)
            .map_err(setup)?;

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
                // A pipeline hook's name (`collect`, `prune`, ...) with one parameter is the hook;
                // with any other count it is an engine's own helper, as it was before hooks.
                n if Method::any_from_name(n).is_some() && *arity != 1 => continue,
                n if Method::any_from_name(n).is_some() => 1,
                // Helpers are ordinary functions; only near-misses of member names are reported.
                n if crate::contract::closest_member(n).is_some() => *arity,
                _ => continue,
            };
            if *arity != wanted {
                return Err(site.contract(
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
        meter.start_call();
        engine
            .run_ast_with_scope(&mut Scope::new(), &program.ast)
            .map_err(|e| {
                site.fail(
                    Op::Load,
                    fault(&e, &program.limits, EngineErrorKind::Runtime),
                )
            })?;
        let call = |name: &str, args: Vec<Dynamic>, kind: EngineErrorKind, op: Op| {
            engine
                .call_fn_with_options::<Dynamic>(
                    CallFnOptions::new().eval_ast(false),
                    &mut Scope::new(),
                    &program.ast,
                    name,
                    args,
                )
                .map_err(|e| site.fail(op, fault(&e, &program.limits, kind)))
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
            return Err(site.contract(
                "the engine has no `fn info()` (or `fn create(ctx)`) returning its info map",
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
            return Err(site.error(
                Op::Load,
                kind,
                format!(
                    "{what} must return the info map, got {}",
                    info_value.type_name()
                ),
                line,
            ));
        }
        let info = site.info(
            |budget| values::to_json(&info_value, budget),
            <Vm as ScriptVm>::NOUN,
        )?;
        if site.name_by(&info) {
            bridge.scope.lock().rename(&info.id);
        }
        let vm = Vm {
            engine,
            program: program.clone(),
            site,
            bridge,
            state: Dynamic::from_map(Map::new()),
            rollbacks: Rollbacks::default(),
            meter,
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
        self.bridge.scope.lock().set_call(Some(call.clone()));
        let guard = self.site.start_call();
        self.meter.start_call();
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
        self.bridge.scope.lock().set_call(None);
        let kept = memory::held(&self.state);
        self.meter.set_kept(kept);
        match out {
            Ok(_) if stopped.is_none() && kept > self.meter.cap() => Err(self.site.fail(
                op,
                Fault {
                    kind: EngineErrorKind::Memory,
                    message: format!("the state `this` keeps {kept} bytes"),
                    line: fn_line,
                    column: None,
                },
            )),
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
                let mut f = fault(&e, &self.program.limits, EngineErrorKind::Runtime);
                f.line = f.line.or(fn_line);
                Err(self.site.fail(op, f))
            }
        }
    }

    /// `p` for a call: the params' fields plus the messages.
    fn params(
        &mut self,
        call: &HostCall,
        fields: &JsonMap<String, Json>,
        feed: Feed,
    ) -> Result<Dynamic, String> {
        let p = rhai::serde::to_dynamic(fields).map_err(|e| e.to_string())?;
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
        let mut fields = script::AssembledFields::default();
        for (k, item) in map.iter() {
            if k.as_str() == "messages" {
                continue;
            }
            let j = values::to_json(item, &mut budget).map_err(|e| e.describe(k))?;
            fields.insert(k, j);
        }
        let raw = map
            .get("messages")
            .filter(|m| !m.is_unit())
            .ok_or_else(|| crate::engine::script::result::missing_messages(fields.keys()))?;
        let messages = values::messages_from(
            raw,
            &mut budget,
            self.site.limits.results.max_result_messages,
        )
        .map_err(script::messages_error)?;
        let messages = messages.into_iter().map(script::MessageRef::New).collect();
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
    const NOUN: &'static str = "map";

    fn invoke(
        &mut self,
        call: &HostCall,
        method: Method,
        fields: &JsonMap<String, Json>,
        feed: Feed,
        expect: Expect,
    ) -> Result<Option<Reply>, EngineError> {
        let name = method.as_str();
        let Some(&(arity, _)) = self.program.functions.get(name) else {
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
        out.map(Some)
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
        self.meter.set_kept(memory::held(&self.state));
        Ok(())
    }
}

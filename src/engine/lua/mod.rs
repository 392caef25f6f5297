//! Lua (Luau) engines: one `.lua` / `.luau` file returning the engine table or a factory
//! (contract §2), loaded into a sandboxed Luau VM, validated, and run one VM per session.
//!
//! Each instance's VM lives on its own worker thread ([`crate::sandbox::Worker`]): the caller
//! sends a call and waits at most deadline + grace; a VM that overstays is abandoned and never
//! reused. Inside the VM the watchdog's flag stops runaway scripts at their next call or loop
//! iteration, the memory cap stops allocation bombs, and the session's messages stay resident
//! between calls (see [`marshal`]).

pub mod api;
pub mod marshal;
pub mod worker;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::AtomicBool;

use serde_json::Value as Json;

use crate::contract::{
    self, AfterTurnParams, AssembleParams, AssembleResult, BootstrapParams, BootstrapResult,
    CommitTurnParams, CommitTurnResult, CompactParams, CompactResult, EngineInfo,
    IngestBatchParams, IngestBatchResult, IngestParams, IngestResult, MaintainParams,
    MaintainResult, Method, Severity, SubagentEndedParams, SubagentSpawnParams,
};
use crate::engine::{Engine, EngineFactory, InstanceContext, SpawnRollback};
use crate::error::{EngineError, EngineErrorKind, ScriptLocation};
use crate::host::HostCall;
use crate::sandbox::{Limits, StopSignals, Worker, WorkerError};
use worker::{Boot, Loaded, Vm};

/// Worker thread stack: room for Luau's C recursion and the host's converters.
const WORKER_STACK: usize = 16 << 20;

/// How to load a Lua engine.
#[derive(Clone, Debug, Default)]
pub struct LoadOptions {
    /// The configured entry id; `info.id` should equal it (a warning, an error when `strict`).
    pub configured_id: Option<String>,
    /// Turn the id-mismatch warning into an error.
    pub strict: bool,
    /// The entry config (`host.config`, `ctx.config`).
    pub config: Arc<Json>,
    /// Budgets: deadline, grace, memory, result caps.
    pub limits: Limits,
    /// `ctx.agentDir` for the load-time factory run.
    pub agent_dir: String,
    /// `ctx.workspaceDir` for the load-time factory run.
    pub workspace_dir: String,
    /// A caller-owned abort flag shared by every instance: while set, running calls stop with
    /// `Cancelled` (never a quarantine). The host clears it. Each instance also has its own
    /// flag, see [`LuaEngine::cancel_flag`].
    pub cancel: Option<Arc<AtomicBool>>,
}

/// A validated Lua engine file.
#[derive(Debug)]
pub struct LuaFactory {
    path: PathBuf,
    file: String,
    source: Arc<str>,
    info: EngineInfo,
    warnings: Vec<String>,
    opts: LoadOptions,
}

fn label_for(path: &Path, opts: &LoadOptions) -> String {
    opts.configured_id.clone().unwrap_or_else(|| {
        path.file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_else(|| "lua".into())
    })
}

fn worker_error(
    e: WorkerError,
    op: &str,
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
        WorkerError::Gone => (
            EngineErrorKind::Runtime,
            "the engine's worker thread stopped".to_string(),
        ),
    };
    EngineError::new(op, engine, kind, msg).at(Some(ScriptLocation {
        file: file.to_string(),
        line: None,
    }))
}

/// Starts a worker and boots a VM on it.
fn spawn_vm(boot: Boot, op: &str) -> Result<(Worker<Option<Vm>>, Loaded), EngineError> {
    let file = boot.file.clone();
    let label = boot.label.clone();
    let limits = boot.limits.clone();
    let cancelled = boot.signals.cancel.clone();
    let worker = Worker::spawn("ctxhost-lua", WORKER_STACK, None::<Vm>)
        .map_err(|m| EngineError::new(op, &label, EngineErrorKind::Runtime, m))?;
    let loaded = worker
        .call(limits.hard_timeout(), move |slot: &mut Option<Vm>| {
            Vm::boot(&boot).map(|(vm, loaded)| {
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
                cancelled.load(std::sync::atomic::Ordering::Relaxed),
            )
        })??;
    Ok((worker, loaded))
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
            "validate",
            engine,
            EngineErrorKind::Contract,
            errors.join("; "),
        )
        .at(Some(ScriptLocation {
            file: file.to_string(),
            line: first_line,
        })));
    }
    Ok(warnings)
}

/// Loads and validates a Lua engine file (contract §2, §3, §6).
pub fn load(path: &Path, opts: &LoadOptions) -> Result<Arc<dyn EngineFactory>, EngineError> {
    Ok(load_factory(path, opts)?)
}

/// Like [`load`], keeping the concrete type (for [`LuaFactory::instantiate_lua`]).
pub fn load_factory(path: &Path, opts: &LoadOptions) -> Result<Arc<LuaFactory>, EngineError> {
    let label = label_for(path, opts);
    let file = path.display().to_string();
    let source: Arc<str> = std::fs::read_to_string(path)
        .map_err(|e| {
            EngineError::new(
                "load",
                &label,
                EngineErrorKind::MissingFile,
                format!("cannot read {file}: {e}"),
            )
            .at(Some(ScriptLocation {
                file: file.clone(),
                line: None,
            }))
        })?
        .into();
    let boot = Boot {
        file: file.clone(),
        source: source.clone(),
        config: opts.config.clone(),
        agent_dir: opts.agent_dir.clone(),
        workspace_dir: opts.workspace_dir.clone(),
        limits: opts.limits.clone(),
        label: label.clone(),
        signals: Arc::new(StopSignals::new(opts.cancel.clone())),
    };
    let (_worker, loaded) = spawn_vm(boot, "load")?;
    let warnings = validate(&loaded, &file, &label, opts)?;
    for w in &warnings {
        tracing::warn!(engine = loaded.info.id, "{w}");
    }
    Ok(Arc::new(LuaFactory {
        path: path.to_path_buf(),
        file,
        source,
        info: loaded.info,
        warnings,
        opts: opts.clone(),
    }))
}

impl LuaFactory {
    /// A fresh instance with its own VM and worker thread, typed (for [`LuaEngine::cancel_flag`]).
    pub fn instantiate_lua(&self, cx: &InstanceContext) -> Result<LuaEngine, EngineError> {
        // The interrupt reads one cancel flag: the shared one when given, else the instance's.
        let signals = Arc::new(StopSignals::new(self.opts.cancel.clone()));
        let cancel = signals.cancel.clone();
        let label = label_for(&self.path, &self.opts);
        let boot = Boot {
            file: self.file.clone(),
            source: self.source.clone(),
            config: cx.config.clone(),
            agent_dir: cx.agent_dir.clone(),
            workspace_dir: cx.workspace_dir.clone(),
            limits: self.opts.limits.clone(),
            label: label.clone(),
            signals,
        };
        let (worker, loaded) = spawn_vm(boot, "instantiate")?;
        validate(&loaded, &self.file, &label, &self.opts)?;
        let defined = Method::ALL
            .into_iter()
            .filter(|m| loaded.members.iter().any(|(n, f)| *f && n == m.as_str()))
            .collect();
        Ok(LuaEngine {
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

impl EngineFactory for LuaFactory {
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
        Ok(Box::new(self.instantiate_lua(cx)?))
    }
}

/// One Lua engine instance: a VM on its own worker thread, serving one session.
#[derive(Debug)]
pub struct LuaEngine {
    info: EngineInfo,
    defined: Vec<Method>,
    worker: Worker<Option<Vm>>,
    limits: Limits,
    file: String,
    cancel: Arc<AtomicBool>,
    disposed: bool,
}

impl LuaEngine {
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
        op: Method,
        f: impl FnOnce(&mut Vm) -> Result<R, EngineError> + Send + 'static,
    ) -> Result<R, EngineError> {
        let engine = self.info.id.clone();
        let out =
            self.worker.call(
                self.limits.hard_timeout(),
                move |slot: &mut Option<Vm>| match slot {
                    Some(vm) => f(vm),
                    None => Err(EngineError::new(
                        op.as_str(),
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
                op.as_str(),
                &self.info.id,
                &self.file,
                &self.limits,
                self.cancel.load(std::sync::atomic::Ordering::Relaxed),
            )),
        }
    }
}

impl Engine for LuaEngine {
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
        let (call, params) = (call.clone(), params.clone());
        self.on_vm(Method::Bootstrap, move |vm| vm.bootstrap(&call, &params))
            .map(Option::unwrap_or_default)
    }

    fn ingest(
        &mut self,
        call: &HostCall,
        params: &IngestParams,
    ) -> Result<IngestResult, EngineError> {
        let (call, params) = (call.clone(), params.clone());
        self.on_vm(Method::Ingest, move |vm| vm.ingest(&call, &params))
            .map(Option::unwrap_or_default)
    }

    fn ingest_batch(
        &mut self,
        call: &HostCall,
        params: &IngestBatchParams,
    ) -> Result<IngestBatchResult, EngineError> {
        let n = params.messages.len() as u64;
        let (call, params) = (call.clone(), params.clone());
        self.on_vm(Method::IngestBatch, move |vm| {
            vm.ingest_batch(&call, &params)
        })
        .map(|r| r.unwrap_or(IngestBatchResult { ingested_count: n }))
    }

    fn assemble(
        &mut self,
        call: &HostCall,
        params: &AssembleParams,
    ) -> Result<AssembleResult, EngineError> {
        let (call, params) = (call.clone(), params.clone());
        let engine = self.info.id.clone();
        self.on_vm(Method::Assemble, move |vm| {
            vm.assemble(&call, &params)?.ok_or_else(|| {
                EngineError::new(
                    "assemble",
                    engine,
                    EngineErrorKind::Contract,
                    "assemble is not defined",
                )
            })
        })
    }

    fn compact(
        &mut self,
        call: &HostCall,
        params: &CompactParams,
    ) -> Result<CompactResult, EngineError> {
        let (call, params) = (call.clone(), params.clone());
        let engine = self.info.id.clone();
        self.on_vm(Method::Compact, move |vm| {
            vm.compact(&call, &params)?.ok_or_else(|| {
                EngineError::new(
                    "compact",
                    engine,
                    EngineErrorKind::Contract,
                    "compact is not defined",
                )
            })
        })
    }

    fn after_turn(&mut self, call: &HostCall, params: &AfterTurnParams) -> Result<(), EngineError> {
        let (call, params) = (call.clone(), params.clone());
        self.on_vm(Method::AfterTurn, move |vm| vm.after_turn(&call, &params))
            .map(|_| ())
    }

    fn commit_turn(
        &mut self,
        call: &HostCall,
        params: &CommitTurnParams,
    ) -> Result<Option<CommitTurnResult>, EngineError> {
        let (call, params) = (call.clone(), params.clone());
        self.on_vm(Method::CommitTurn, move |vm| vm.commit_turn(&call, &params))
            .map(Option::flatten)
    }

    fn maintain(
        &mut self,
        call: &HostCall,
        params: &MaintainParams,
    ) -> Result<Option<MaintainResult>, EngineError> {
        let (call, params) = (call.clone(), params.clone());
        self.on_vm(Method::Maintain, move |vm| vm.maintain(&call, &params))
            .map(Option::flatten)
    }

    fn prepare_subagent_spawn(
        &mut self,
        call: &HostCall,
        params: &SubagentSpawnParams,
    ) -> Result<Option<SpawnRollback>, EngineError> {
        let (call, params) = (call.clone(), params.clone());
        self.on_vm(Method::PrepareSubagentSpawn, move |vm| {
            vm.prepare_subagent_spawn(&call, &params)
        })
        .map(|r| r.flatten().map(SpawnRollback))
    }

    fn rollback_subagent_spawn(
        &mut self,
        call: &HostCall,
        handle: SpawnRollback,
    ) -> Result<(), EngineError> {
        let call = call.clone();
        self.on_vm(Method::PrepareSubagentSpawn, move |vm| {
            vm.rollback(&call, handle.0)
        })
    }

    fn on_subagent_ended(
        &mut self,
        call: &HostCall,
        params: &SubagentEndedParams,
    ) -> Result<(), EngineError> {
        let (call, params) = (call.clone(), params.clone());
        self.on_vm(Method::OnSubagentEnded, move |vm| {
            vm.on_subagent_ended(&call, &params)
        })
        .map(|_| ())
    }

    fn dispose(&mut self, call: &HostCall) -> Result<(), EngineError> {
        if self.disposed {
            return Ok(());
        }
        self.disposed = true;
        let call = call.clone();
        self.on_vm(Method::Dispose, move |vm| vm.dispose(&call))
            .map(|_| ())
    }

    fn save_state(&mut self) -> Result<Json, EngineError> {
        self.on_vm(Method::Dispose, |vm| vm.save_state())
            .map_err(|e| EngineError {
                op: "saveState".into(),
                ..e
            })
    }

    fn restore_state(&mut self, state: Json) -> Result<(), EngineError> {
        self.on_vm(Method::Dispose, move |vm| vm.restore_state(&state))
            .map_err(|e| EngineError {
                op: "restoreState".into(),
                ..e
            })
    }
}

#[cfg(test)]
#[path = "mod_tests.rs"]
mod tests;

//! [`ProcessFactory`]: an engine loaded and validated in a child process (the shared
//! [`Factory`] over [`Spawn`]); each instance it makes runs in a child of its own.

use std::path::{Path, PathBuf};
use std::time::Duration;

use super::instance::InChild;
use super::process::{ChildProc, Stop};
use super::wire::{FromChild, ToChild};
use super::{ChildCommand, ProcessOptions};
use crate::contract::limits::HostLimits;
use crate::contract::{EngineInfo, Method};
use crate::engine::instance::{Connect, Factory};
use crate::engine::sandbox::Limits;
use crate::engine::{InstanceContext, LoadOptions};
use crate::error::{EngineError, EngineErrorKind, Op, ScriptLocation};

/// Extra grace the child's own worker waits, so that the parent's kill comes first.
const CHILD_GRACE_MARGIN_MS: u64 = 1_000;

/// Time a child gets to start and answer its first request, beside the call's own budget.
const STARTUP: Duration = Duration::from_secs(5);

/// A validated engine file whose instances run in child processes.
pub type ProcessFactory = Factory<Spawn>;

/// What starts an instance of a validated file in a child process of its own.
#[derive(Debug)]
pub struct Spawn {
    path: PathBuf,
    /// The engine's id, as the load found it.
    id: String,
    opts: LoadOptions,
    process: ProcessOptions,
}

impl ProcessFactory {
    /// Loads and validates `path` in a child (which then exits): every load-time failure
    /// surfaces here, as with an in-process engine.
    pub fn load(
        path: &Path,
        opts: &LoadOptions,
        process: &ProcessOptions,
    ) -> Result<Self, EngineError> {
        let label = opts.configured_id.clone().unwrap_or_default();
        let (mut child, reply) = start(path, opts, process, &label, Op::Load)?;
        child.kill();
        let FromChild::Loaded { info, warnings } = reply else {
            return Err(unexpected(Op::Load, &label, &reply));
        };
        for w in &warnings {
            tracing::warn!(engine = info.id, "{w}");
        }
        let spawn = Spawn {
            path: path.to_path_buf(),
            id: info.id.clone(),
            opts: opts.clone(),
            process: process.clone(),
        };
        Ok(Factory::new(path, info, warnings, spawn))
    }
}

impl Connect for Spawn {
    type Transport = InChild;

    /// A fresh child that loads the file and makes the one instance it serves.
    fn connect(
        &self,
        cx: &InstanceContext,
    ) -> Result<(EngineInfo, Vec<Method>, InChild), EngineError> {
        let (mut child, _) = start(
            &self.path,
            &self.opts,
            &self.process,
            &self.id,
            Op::Instantiate,
        )?;
        let msg = ToChild::Instantiate {
            config: (*cx.config).clone(),
            agent_dir: cx.agent_dir.clone(),
            workspace_dir: cx.workspace_dir.clone(),
            session_id: cx.session_id.clone(),
        };
        let budget = self.opts.limits.hard_timeout() + STARTUP;
        let reply = child
            .exchange(&msg, budget, None, &mut refuse)
            .map_err(|s| stopped(s, Op::Instantiate, &self.id, &self.path))?;
        match reply {
            FromChild::Instantiated {
                info,
                defined,
                noun,
                lines,
            } => {
                let cancel = cx.cancel.clone().or_else(|| self.opts.cancel.clone());
                let transport = InChild::new(
                    &info,
                    child,
                    self.opts.limits.clone(),
                    self.path.display().to_string(),
                    cancel,
                    noun,
                    lines,
                );
                Ok((info, defined, transport))
            }
            FromChild::Failed { error } => Err(error.into_error(Op::Instantiate)),
            other => Err(unexpected(Op::Instantiate, &self.id, &other)),
        }
    }
}

/// Starts a child and has it load the file.
fn start(
    path: &Path,
    opts: &LoadOptions,
    process: &ProcessOptions,
    label: &str,
    op: Op,
) -> Result<(ChildProc, FromChild), EngineError> {
    let command: &ChildCommand = &process.command;
    // A reply carries at most a result and a state within the limits, escaped as JSON.
    let max_line = opts
        .limits
        .results
        .max_result_bytes
        .saturating_mul(4)
        .saturating_add(1 << 20);
    let mut child = ChildProc::spawn(command, label, max_line)
        .map_err(|m| EngineError::new(op, label, EngineErrorKind::Host, m))?;
    let msg = ToChild::Load {
        path: path.to_path_buf(),
        configured_id: opts.configured_id.clone(),
        strict: opts.strict,
        config: (*opts.config).clone(),
        limits: HostLimits {
            script: Limits {
                // The parent kills a call stuck past deadline + grace; the child's own worker
                // must not give up on it first (it would abandon a thread in the child).
                grace_ms: opts.limits.grace_ms.saturating_add(CHILD_GRACE_MARGIN_MS),
                ..opts.limits.clone()
            },
            rhai: process.rhai.clone(),
        },
        agent_dir: opts.agent_dir.clone(),
        workspace_dir: opts.workspace_dir.clone(),
        tokenizer: process.tokenizer,
    };
    let budget = opts.limits.hard_timeout() + STARTUP;
    let reply = child
        .exchange(&msg, budget, opts.cancel.as_deref(), &mut refuse)
        .map_err(|s| stopped(s, op, label, path))?;
    match reply {
        FromChild::Failed { error } => Err(error.into_error(op)),
        reply => Ok((child, reply)),
    }
}

/// Answers a `host` request made where none may be (loading, `save_state`).
pub(super) fn refuse(
    (_, name, _): super::process::HostRequest,
) -> Result<super::wire::HostOutWire, crate::engine::api::HostError> {
    Err(crate::engine::api::HostError::script(format!(
        "{name} is only available inside a lifecycle call"
    )))
}

/// The error for a call the child never answered.
pub(super) fn stopped(stop: Stop, op: Op, engine: &str, file: &Path) -> EngineError {
    let at = Some(ScriptLocation::new(file.display().to_string(), None));
    match stop {
        Stop::TimedOut { cancelled: true } => EngineError::new(
            op,
            engine,
            EngineErrorKind::Cancelled,
            "call cancelled; the engine did not stop and its process was killed",
        )
        .at(at),
        Stop::TimedOut { cancelled: false } => EngineError::new(
            op,
            engine,
            EngineErrorKind::Deadline,
            "the call overran its deadline and grace; the engine process was killed",
        )
        .at(at),
        Stop::Died { how, out_of_memory } => {
            let kind = if out_of_memory {
                EngineErrorKind::Memory
            } else {
                EngineErrorKind::Runtime
            };
            EngineError::new(op, engine, kind, how).at(at)
        }
    }
}

/// A reply that does not answer the request: a host fault.
pub(super) fn unexpected(op: Op, engine: &str, reply: &FromChild) -> EngineError {
    let what = match reply {
        FromChild::Loaded { .. } => "loaded",
        FromChild::Instantiated { .. } => "instantiated",
        FromChild::Done { .. } => "done",
        FromChild::Assembled { .. } => "assembled",
        FromChild::Refused { .. } => "refused",
        FromChild::Undefined => "undefined",
        FromChild::Failed { .. } => "failed",
        FromChild::Host { .. } => "host",
    };
    EngineError::new(
        op,
        engine,
        EngineErrorKind::Host,
        format!("the engine process answered `{what}`, which does not answer this request"),
    )
}

//! From the configuration to a loaded engine: which engine the slot names (a script, the
//! `pipeline` of hook scripts, or none, which is `legacy`) and where its instances run (a
//! worker thread, or a child process under `host.isolation: "process"`). The engine layer
//! takes only the options; reading the config is the front door's.

use std::sync::Arc;

use crate::config::{Config, Entry, FailurePolicy};
use crate::contract::limits::Isolation;
use crate::engine::isolation::{ChildCommand, ProcessOptions};
use crate::engine::pipeline::{HookEntry, HookSpec, PipelineSpec};
use crate::engine::{EngineFactory, LoadOptions};
use crate::error::{EngineError, EngineErrorKind, Op};

/// Loads the configured entry `id` with the options its config gives (limits, strictness,
/// isolation); a process-isolated engine's children run as `child_command` (by default this
/// program, see [`ChildCommand::current_exe`]).
pub(super) fn load_entry(
    config: &Config,
    child_command: Option<&ChildCommand>,
    id: &str,
    entry: &Entry,
) -> std::result::Result<Arc<dyn EngineFactory>, EngineError> {
    if id == crate::config::PIPELINE_ID && entry.path.is_none() {
        return Ok(crate::engine::pipeline::load_with(
            &pipeline_spec(config),
            child_command,
        )?);
    }
    let Some(path) = &entry.path else {
        return Err(EngineError::new(
            Op::Load,
            id,
            EngineErrorKind::MissingFile,
            "the entry has no `path`",
        ));
    };
    let opts = LoadOptions {
        configured_id: Some(id.to_owned()),
        strict: config.host.failure_policy == FailurePolicy::Strict,
        config: Arc::new(entry.config.clone()),
        limits: config.host.limits.script.clone(),
        ..Default::default()
    };
    let path = config.resolve(path);
    match config.host.isolation {
        Isolation::Thread => crate::engine::load(&path, &opts, &config.host.limits.rhai),
        Isolation::Process => {
            let command = match child_command {
                Some(c) => c.clone(),
                None => ChildCommand::current_exe()
                    .map_err(|m| EngineError::new(Op::Load, id, EngineErrorKind::Host, m))?,
            };
            let process = ProcessOptions {
                command,
                tokenizer: config.host.tokenizer,
                rhai: config.host.limits.rhai.clone(),
            };
            crate::engine::isolation::load(&path, &opts, &process)
        }
    }
}

/// The pipeline's hooks as `host.pipeline` names them, each with its entry (its path resolved
/// against the config file's directory) and its time limit, and the host settings they load
/// under: what [`crate::engine::pipeline::load`] takes.
pub fn pipeline_spec(config: &Config) -> PipelineSpec {
    let settings = &config.host.pipeline;
    let hooks = settings
        .hooks
        .iter()
        .map(|id| HookSpec {
            id: id.clone(),
            entry: config.plugins.entries.get(id).map(|e| HookEntry {
                enabled: e.enabled,
                file: e.path.as_deref().map(|p| config.resolve(p)),
                config: e.config.clone(),
            }),
            timeout_ms: settings
                .timeouts
                .get(id)
                .copied()
                .unwrap_or(settings.timeout_ms),
        })
        .collect();
    PipelineSpec {
        hooks,
        contribution_share: settings.contribution_share,
        limits: config.host.limits.clone(),
        isolation: config.host.isolation,
        tokenizer: config.host.tokenizer,
        strict: config.host.failure_policy == FailurePolicy::Strict,
        base_dir: config.base_dir.clone(),
    }
}

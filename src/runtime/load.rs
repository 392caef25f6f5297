//! From the configuration to a loaded engine: which engine the slot names (a script, the
//! `pipeline` of hook scripts, or none, which is `legacy`) and where its instances run (a
//! worker thread, or a child process under `host.isolation: "process"`). The engine layer
//! takes only the options; reading the config is the front door's.

use std::sync::Arc;

use crate::config::{Config, Entry, FailurePolicy};
use crate::contract::limits::Isolation;
use crate::engine::isolation::{ChildCommand, ProcessOptions};
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
        return Ok(crate::engine::pipeline::load_with(config, child_command)?);
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

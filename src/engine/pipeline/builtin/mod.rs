//! The defaults of the design as built-in hooks a config switches on by name in
//! `host.pipeline.hooks` (issue 22 item 6); each is configured, like a script hook, by
//! `plugins.entries["builtin:..."].config` (optional):
//!
//! - [`TOOL_PRUNING`] (`prune`): old tool results trimmed, then cleared, in memory; the
//!   history is never rewritten ([`tool_pruning`]).
//! - [`AGENTS_REANCHOR`] (`collect`): after every compaction, the `## Session Startup` and
//!   `## Red Lines` sections of the workspace `AGENTS.md` (headings matched byte for byte) are
//!   placed before the user turn again ([`reanchor`]).
//! - [`COMPACTION`] (`compactionPlan`): the host's compaction with `maxHistoryShare` (default
//!   0.5: the summary and the messages kept take at most that share of the budget) and the
//!   strict identifier policy, its audit reported ([`compaction`]).

pub(crate) mod compaction;
pub(crate) mod reanchor;
pub(crate) mod tool_pruning;

use std::fmt::Debug;
use std::path::Path;
use std::sync::Arc;

use serde_json::{Map, Value as Json};

use crate::contract::{EngineInfo, Method};
use crate::engine::InstanceContext;
use crate::engine::api::HostCall;
use crate::error::{EngineError, EngineErrorKind, Op};

use super::hook::{Hook, HookSource};
use super::spec::PipelineSpec;

/// Old tool results pruned in memory under pressure.
pub(crate) const TOOL_PRUNING: &str = "builtin:tool-pruning";
/// `AGENTS.md`'s critical sections re-anchored after every compaction.
pub(crate) const AGENTS_REANCHOR: &str = "builtin:agents-reanchor";
/// The host's compaction under `maxHistoryShare` and the strict identifier policy.
pub(crate) const COMPACTION: &str = "builtin:compaction";
/// Every built-in hook.
pub(crate) const ALL: [&str; 3] = [TOOL_PRUNING, AGENTS_REANCHOR, COMPACTION];

/// Whether `id` names a built-in hook (rather than an entry under `plugins.entries`).
pub(crate) fn is_builtin(id: &str) -> bool {
    id.starts_with("builtin:")
}

/// ` (did you mean ...?)` for a hook id close to a built-in one, for load errors.
pub(crate) fn hint(id: &str) -> String {
    crate::contract::closest(id, ALL.iter().copied())
        .map(|c| format!(" (did you mean the built-in hook `{c}`?)"))
        .unwrap_or_default()
}

/// What one built-in hook does; an instance is a copy of the loaded one.
pub(super) trait Builtin: Clone + Send + Sync + Debug + 'static {
    /// The hook functions it defines.
    const METHODS: &'static [Method];
    /// A fresh instance for a session.
    fn start(&self, cx: &InstanceContext) -> Self {
        let _ = cx;
        self.clone()
    }
    /// One call, as a script hook's result would be; an error quarantines it for the session.
    fn call(
        &mut self,
        call: &HostCall,
        method: Method,
        fields: &Map<String, Json>,
    ) -> Result<Json, String>;
}

/// A loaded built-in hook.
#[derive(Debug)]
struct Loaded<B: Builtin> {
    info: EngineInfo,
    hook: B,
}

/// One session's instance of a built-in hook.
struct Running<B: Builtin> {
    id: String,
    hook: B,
}

impl<B: Builtin> HookSource for Loaded<B> {
    fn info(&self) -> &EngineInfo {
        &self.info
    }

    fn warnings(&self) -> &[String] {
        &[]
    }

    fn file(&self) -> Option<&Path> {
        None
    }

    fn instantiate(&self, cx: &InstanceContext) -> Result<Box<dyn Hook>, EngineError> {
        Ok(Box::new(Running {
            id: self.info.id.clone(),
            hook: self.hook.start(cx),
        }))
    }
}

impl<B: Builtin> Hook for Running<B> {
    fn defines(&self, method: Method) -> bool {
        B::METHODS.contains(&method)
    }

    fn call_hook(
        &mut self,
        call: &HostCall,
        method: Method,
        fields: &Map<String, Json>,
    ) -> Result<Option<Json>, EngineError> {
        if !self.defines(method) {
            return Ok(None);
        }
        self.hook
            .call(call, method, fields)
            .map(Some)
            .map_err(|m| EngineError::new(method, &self.id, EngineErrorKind::Runtime, m))
    }

    fn dispose(&mut self, _call: &HostCall) -> Result<(), EngineError> {
        Ok(())
    }

    fn save_state(&mut self) -> Result<Json, EngineError> {
        Ok(Json::Null)
    }

    fn restore_state(&mut self, _state: Json) -> Result<(), EngineError> {
        Ok(())
    }
}

/// Loads built-in hook `id` with its entry config (an error names a bad setting or the hooks
/// that exist).
pub(crate) fn load(
    spec: &PipelineSpec,
    id: &str,
    settings: &Json,
) -> Result<Arc<dyn HookSource>, EngineError> {
    let fail = |m: String| EngineError::new(Op::Load, id, EngineErrorKind::Contract, m);
    let info = |name: &str| EngineInfo {
        id: id.to_owned(),
        name: name.to_owned(),
        version: Some(env!("CARGO_PKG_VERSION").into()),
        owns_compaction: None,
        host_requirements: Default::default(),
        turn_maintenance_mode: None,
        accepted_host_params: None,
        transcript_semantics: None,
        extra: Default::default(),
    };
    let at = |field: &str| match field {
        "" => format!("plugins.entries[\"{id}\"].config"),
        f => format!("plugins.entries[\"{id}\"].config.{f}"),
    };
    Ok(match id {
        TOOL_PRUNING => Arc::new(Loaded {
            info: info("Tool result pruning"),
            hook: tool_pruning::ToolPruning::from_config(settings)
                .map_err(|(f, m)| fail(format!("{}: {m}", at(f))))?,
        }),
        AGENTS_REANCHOR => Arc::new(Loaded {
            info: info("AGENTS.md re-anchor after compaction"),
            hook: reanchor::Reanchor::from_config(spec, settings)
                .map_err(|(f, m)| fail(format!("{}: {m}", at(f))))?,
        }),
        COMPACTION => Arc::new(Loaded {
            info: info("Compaction (maxHistoryShare, strict identifiers)"),
            hook: compaction::Compaction::from_config(settings)
                .map_err(|(f, m)| fail(format!("{}: {m}", at(f))))?,
        }),
        _ => {
            return Err(fail(format!(
                "no built-in hook \"{id}\"{}; the built-in hooks are {}",
                match crate::contract::closest(id, ALL.iter().copied()) {
                    Some(c) => format!(" (did you mean `{c}`?)"),
                    None => String::new(),
                },
                ALL.join(", ")
            )));
        }
    })
}

/// The call's context window: the lifecycle's `tokenWindow.contextWindowTokens` when the
/// client gave one, else the host's budget for the call.
pub(super) fn window_budget(call: &HostCall, fields: &Map<String, Json>) -> u64 {
    fields
        .get("tokenWindow")
        .and_then(|w| w.get("contextWindowTokens"))
        .and_then(Json::as_u64)
        .unwrap_or(call.token_budget())
}

/// Reads an optional number setting.
pub(super) fn number(
    settings: &Json,
    field: &'static str,
) -> Result<Option<f64>, (&'static str, String)> {
    match settings.get(field) {
        None | Some(Json::Null) => Ok(None),
        Some(Json::Number(n)) => Ok(n.as_f64()),
        Some(other) => Err((
            field,
            format!(
                "must be a number, got {}",
                crate::engine::script::result::json_type(other)
            ),
        )),
    }
}

/// Reads an optional string setting.
pub(super) fn string(
    settings: &Json,
    field: &'static str,
) -> Result<Option<String>, (&'static str, String)> {
    match settings.get(field) {
        None | Some(Json::Null) => Ok(None),
        Some(Json::String(s)) => Ok(Some(s.clone())),
        Some(other) => Err((
            field,
            format!(
                "must be a string, got {}",
                crate::engine::script::result::json_type(other)
            ),
        )),
    }
}

/// Refuses settings a built-in hook does not know (naming the closest one).
pub(super) fn known(
    settings: &Json,
    fields: &[&'static str],
) -> Result<(), (&'static str, String)> {
    let Some(map) = settings.as_object() else {
        return match settings {
            Json::Null => Ok(()),
            _ => Err(("", "must be a map".into())),
        };
    };
    for k in map.keys() {
        if !fields.contains(&k.as_str()) {
            let hint = crate::contract::closest(k, fields.iter().copied())
                .map(|c| format!(" (did you mean `{c}`?)"))
                .unwrap_or_default();
            return Err((
                "",
                format!("unknown setting `{k}`{hint}; known: {}", fields.join(", ")),
            ));
        }
    }
    Ok(())
}

//! Loading the hooks `host.pipeline.hooks` names into one factory.

use std::path::Path;
use std::sync::Arc;

use serde_json::{Map, Value as Json};

use crate::config::{Config, Entry};
use crate::contract::EngineInfo;
use crate::engine::legacy::Legacy;
use crate::engine::lua::Lua;
use crate::engine::rhai::Rhai;
use crate::engine::script::{LoadOptions, ScriptFactory};
use crate::engine::{Engine, EngineFactory, InstanceContext};
use crate::error::{EngineError, EngineErrorKind, Op, ScriptLocation};

use super::PIPELINE_ID;
use super::instance::{Hook, Pipeline, Slot};

/// A loaded hook file of either language.
#[derive(Debug)]
enum HookFile {
    Lua(Arc<ScriptFactory<Lua>>),
    Rhai(Arc<ScriptFactory<Rhai>>),
}

/// One configured hook: its file, id and order.
#[derive(Debug)]
struct HookSpec {
    id: String,
    priority: f64,
    file: HookFile,
    config: Arc<Json>,
    warnings: Vec<String>,
}

/// Loads the hooks `host.pipeline.hooks` names. A hook that does not load is a load error of
/// the whole pipeline naming it (the host then answers from `legacy`), so a typo in the config
/// is never silently a smaller pipeline.
pub fn load(config: &Config) -> Result<Arc<dyn EngineFactory>, EngineError> {
    let settings = &config.host.pipeline;
    let fail = |m: String| EngineError::new(Op::Load, PIPELINE_ID, EngineErrorKind::Contract, m);
    if settings.hooks.is_empty() {
        return Err(fail("host.pipeline.hooks names no hooks".into()));
    }
    if !(settings.contribution_share.is_finite()
        && (0.0..=1.0).contains(&settings.contribution_share))
    {
        return Err(fail(
            "host.pipeline.contributionShare must be between 0 and 1".into(),
        ));
    }
    let mut specs = Vec::new();
    for id in &settings.hooks {
        let Some(entry) = config.plugins.entries.get(id) else {
            return Err(fail(format!(
                "host.pipeline.hooks names \"{id}\", which is not an entry under plugins.entries"
            )));
        };
        if specs.iter().any(|s: &HookSpec| &s.id == id) {
            return Err(fail(format!("host.pipeline.hooks names \"{id}\" twice")));
        }
        if !entry.enabled {
            tracing::warn!(hook = id, "pipeline: the hook's entry is disabled; skipped");
            continue;
        }
        specs.push(load_hook(config, id, entry)?);
    }
    // Configured order; a hook's `info.priority` moves it ahead of lower ones (a stable sort,
    // so hooks of equal priority keep the configured order).
    specs.sort_by(|a, b| b.priority.total_cmp(&a.priority));
    let owners: Vec<&str> = specs
        .iter()
        .filter(|s| hook_info(&s.file).owns_compaction())
        .map(|s| s.id.as_str())
        .collect();
    if owners.len() > 1 {
        return Err(fail(format!(
            "hooks \"{}\" and \"{}\" both claim ownsCompaction; at most one hook may own compaction",
            owners[0], owners[1]
        )));
    }
    let info = EngineInfo {
        id: PIPELINE_ID.into(),
        name: "Hook pipeline".into(),
        version: Some(env!("CARGO_PKG_VERSION").into()),
        owns_compaction: Some(!owners.is_empty()),
        host_requirements: Default::default(),
        turn_maintenance_mode: None,
        accepted_host_params: None,
        transcript_semantics: None,
        extra: Default::default(),
    };
    let warnings = specs.iter().flat_map(|s| s.warnings.clone()).collect();
    Ok(Arc::new(PipelineFactory {
        info,
        hooks: specs,
        share: settings.contribution_share,
        warnings,
    }))
}

fn hook_info(file: &HookFile) -> &EngineInfo {
    match file {
        HookFile::Lua(f) => f.info(),
        HookFile::Rhai(f) => f.info(),
    }
}

fn load_hook(config: &Config, id: &str, entry: &Entry) -> Result<HookSpec, EngineError> {
    let Some(path) = &entry.path else {
        return Err(EngineError::new(
            Op::Load,
            id,
            EngineErrorKind::MissingFile,
            "the hook's entry has no `path`",
        ));
    };
    let path = config.resolve(path);
    let settings = &config.host.pipeline;
    let mut limits = config.host.limits.script.clone();
    let timeout = settings
        .timeouts
        .get(id)
        .copied()
        .unwrap_or(settings.timeout_ms);
    limits.deadline_ms = limits.deadline_ms.min(timeout.max(1));
    let opts = LoadOptions {
        configured_id: Some(id.to_owned()),
        strict: config.host.failure_policy == crate::config::FailurePolicy::Strict,
        config: Arc::new(entry.config.clone()),
        limits,
        hook: true,
        ..Default::default()
    };
    let file = match path.extension().and_then(|e| e.to_str()) {
        Some("lua" | "luau") => HookFile::Lua(ScriptFactory::<Lua>::load(&path, &opts, ())?),
        Some("rhai") => HookFile::Rhai(ScriptFactory::<Rhai>::load(
            &path,
            &opts,
            config.host.limits.rhai.clone(),
        )?),
        _ => {
            return Err(EngineError::new(
                Op::Load,
                id,
                EngineErrorKind::Contract,
                "a hook file needs a .lua, .luau or .rhai extension",
            )
            .at(Some(ScriptLocation::new(path.display().to_string(), None))));
        }
    };
    let info = hook_info(&file);
    let priority = info
        .extra
        .get("priority")
        .and_then(Json::as_f64)
        .unwrap_or(0.0);
    let mut warnings = match &file {
        HookFile::Lua(f) => f.warnings().to_vec(),
        HookFile::Rhai(f) => f.warnings().to_vec(),
    };
    if info.id != id {
        warnings.push(format!(
            "{}: info.id \"{}\" differs from the configured hook id \"{id}\"",
            path.display(),
            info.id
        ));
    }
    Ok(HookSpec {
        id: id.to_owned(),
        priority,
        file,
        config: Arc::new(entry.config.clone()),
        warnings,
    })
}

/// The loaded pipeline: its hooks, in the order they run.
#[derive(Debug)]
pub struct PipelineFactory {
    info: EngineInfo,
    hooks: Vec<HookSpec>,
    share: f64,
    warnings: Vec<String>,
}

impl PipelineFactory {
    /// The hook ids in the order they run.
    pub fn hook_ids(&self) -> Vec<&str> {
        self.hooks.iter().map(|h| h.id.as_str()).collect()
    }
}

impl EngineFactory for PipelineFactory {
    fn info(&self) -> &EngineInfo {
        &self.info
    }

    fn source(&self) -> Option<&Path> {
        None
    }

    fn warnings(&self) -> &[String] {
        &self.warnings
    }

    fn instantiate(&self, cx: &InstanceContext) -> Result<Box<dyn Engine>, EngineError> {
        let hooks = self
            .hooks
            .iter()
            .map(|spec| {
                let hcx = InstanceContext {
                    config: spec.config.clone(),
                    ..cx.clone()
                };
                let vm: Result<Box<dyn Hook>, EngineError> = match &spec.file {
                    HookFile::Lua(f) => f.instantiate_typed(&hcx).map(|i| Box::new(i) as _),
                    HookFile::Rhai(f) => f.instantiate_typed(&hcx).map(|i| Box::new(i) as _),
                };
                let (vm, quarantined) = match vm {
                    Ok(vm) => (Some(vm), None),
                    Err(e) => {
                        tracing::warn!(hook = spec.id, "pipeline: hook quarantined: {e}");
                        (None, Some(e.to_string()))
                    }
                };
                Slot {
                    id: spec.id.clone(),
                    vm,
                    quarantined,
                }
            })
            .collect();
        Ok(Box::new(Pipeline {
            info: self.info.clone(),
            hooks,
            share: self.share,
            legacy: Legacy::default(),
            plugin_data: Map::new(),
            compaction_handled: None,
        }))
    }
}

//! Loading the hooks `host.pipeline.hooks` names into one factory: script hooks (in this
//! process or, under `host.isolation: "process"`, each instance in a child of its own) and the
//! built-in hooks (`builtin:...`); and reloading one hook alone.

use std::path::Path;
use std::sync::Arc;

use serde_json::{Map, Value};

use crate::contract::EngineInfo;
use crate::contract::limits::Isolation;
use crate::engine::isolation::{ChildCommand, ProcessFactory, ProcessOptions};
use crate::engine::legacy::Legacy;
use crate::engine::lua::Lua;
use crate::engine::rhai::Rhai;
use crate::engine::script::{LoadOptions, ScriptFactory};
use crate::engine::{Engine, EngineFactory, InstanceContext};
use crate::error::{EngineError, EngineErrorKind, Op, ScriptLocation};

use super::PIPELINE_ID;
use super::builtin;
use super::cell::{HookCell, HookStatus, HookVersion};
use super::hook::HookSource;
use super::instance::{Pipeline, Slot, order};
use super::spec::{HookEntry, HookSpec, PipelineSpec};

/// Loads the hooks `spec` names, with engine children (under process isolation) run as this
/// program (see [`load_with`]).
pub fn load(spec: &PipelineSpec) -> Result<Arc<dyn EngineFactory>, EngineError> {
    Ok(load_with(spec, None)?)
}

/// Loads the hooks `spec` names (`host.pipeline.hooks`). A hook that does not load is a load error of
/// the whole pipeline naming it (the host then answers from `legacy`), so a typo in the config
/// is never silently a smaller pipeline. Under `host.isolation: "process"` each script hook's
/// instances run in children started as `child` (by default this program).
pub fn load_with(
    spec: &PipelineSpec,
    child: Option<&ChildCommand>,
) -> Result<Arc<PipelineFactory>, EngineError> {
    let fail = |m: String| EngineError::new(Op::Load, PIPELINE_ID, EngineErrorKind::Contract, m);
    if spec.hooks.is_empty() {
        return Err(fail("host.pipeline.hooks names no hooks".into()));
    }
    if !(spec.contribution_share.is_finite() && (0.0..=1.0).contains(&spec.contribution_share)) {
        return Err(fail(
            "host.pipeline.contributionShare must be between 0 and 1".into(),
        ));
    }
    let mut cells: Vec<Arc<HookCell>> = Vec::new();
    let mut warnings = Vec::new();
    for hook in &spec.hooks {
        let id = &hook.id;
        if cells.iter().any(|c| &c.id == id) {
            return Err(fail(format!("host.pipeline.hooks names \"{id}\" twice")));
        }
        let entry = hook.entry.as_ref();
        if entry.is_none() && !builtin::is_builtin(id) {
            return Err(fail(format!(
                "host.pipeline.hooks names \"{id}\", which is not an entry under plugins.entries{}",
                builtin::hint(id)
            )));
        }
        if entry.is_some_and(|e| !e.enabled) {
            tracing::warn!(hook = id, "pipeline: the hook's entry is disabled; skipped");
            continue;
        }
        let version = load_hook(spec, child, hook)?;
        warnings.extend(version.source.warnings().iter().cloned());
        cells.push(Arc::new(HookCell::new(id, cells.len(), version)));
    }
    let owners = owners(&cells);
    if owners.len() > 1 {
        return Err(fail(two_owners(&owners)));
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
    Ok(Arc::new(PipelineFactory {
        info,
        cells,
        share: spec.contribution_share,
        warnings,
        spec: spec.clone(),
        child: child.cloned(),
    }))
}

fn owners(cells: &[Arc<HookCell>]) -> Vec<String> {
    cells
        .iter()
        .filter(|c| c.current().source.info().owns_compaction())
        .map(|c| c.id.clone())
        .collect()
}

fn two_owners(owners: &[String]) -> String {
    format!(
        "hooks \"{}\" and \"{}\" both claim ownsCompaction; at most one hook may own compaction",
        owners[0], owners[1]
    )
}

/// Loads `hook`: a built-in hook, or the file its entry names (by its extension, in this
/// process or in children as `host.isolation` says), as generation 0.
fn load_hook(
    spec: &PipelineSpec,
    child: Option<&ChildCommand>,
    hook: &HookSpec,
) -> Result<HookVersion, EngineError> {
    let id = hook.id.as_str();
    let entry = hook.entry.clone().unwrap_or_else(|| HookEntry {
        enabled: true,
        file: None,
        config: Value::Object(Map::new()),
    });
    let (source, runs_in) = if builtin::is_builtin(id) {
        (builtin::load(spec, id, &entry.config)?, "builtin")
    } else {
        let runs_in = match spec.isolation {
            Isolation::Thread => "thread",
            Isolation::Process => "process",
        };
        (load_script(spec, child, hook, &entry)?, runs_in)
    };
    Ok(HookVersion {
        source,
        config: Arc::new(entry.config),
        runs_in,
        generation: 0,
    })
}

fn load_script(
    spec: &PipelineSpec,
    child: Option<&ChildCommand>,
    hook: &HookSpec,
    entry: &HookEntry,
) -> Result<Arc<dyn HookSource>, EngineError> {
    let id = hook.id.as_str();
    let Some(path) = &entry.file else {
        return Err(EngineError::new(
            Op::Load,
            id,
            EngineErrorKind::MissingFile,
            "the hook's entry has no `path`",
        ));
    };
    let mut limits = spec.limits.script.clone();
    limits.deadline_ms = limits.deadline_ms.min(hook.timeout_ms.max(1));
    let opts = LoadOptions {
        configured_id: Some(id.to_owned()),
        strict: spec.strict,
        config: Arc::new(entry.config.clone()),
        limits,
        hook: true,
        ..Default::default()
    };
    let located = |m: &str| {
        EngineError::new(Op::Load, id, EngineErrorKind::Contract, m)
            .at(Some(ScriptLocation::new(path.display().to_string(), None)))
    };
    let ext = path.extension().and_then(|e| e.to_str());
    if !matches!(ext, Some("lua" | "luau" | "rhai")) {
        return Err(located(
            "a hook file needs a .lua, .luau or .rhai extension",
        ));
    }
    if spec.isolation == Isolation::Process {
        let command = match child {
            Some(c) => c.clone(),
            None => ChildCommand::current_exe()
                .map_err(|m| EngineError::new(Op::Load, id, EngineErrorKind::Host, m))?,
        };
        let process = ProcessOptions {
            command,
            tokenizer: spec.tokenizer,
            rhai: spec.limits.rhai.clone(),
        };
        return Ok(Arc::new(ProcessFactory::load(path, &opts, &process)?));
    }
    let source: Arc<dyn HookSource> = if ext == Some("rhai") {
        ScriptFactory::<Rhai>::load(path, &opts, spec.limits.rhai.clone())?
    } else {
        ScriptFactory::<Lua>::load(path, &opts, ())?
    };
    Ok(source)
}

/// The loaded pipeline: its hooks, each swappable alone.
#[derive(Debug)]
pub struct PipelineFactory {
    info: EngineInfo,
    cells: Vec<Arc<HookCell>>,
    share: f64,
    warnings: Vec<String>,
    /// What the hooks were loaded from (a reload of one hook reads its entry).
    spec: PipelineSpec,
    child: Option<ChildCommand>,
}

/// One hook as `doctor` and `check` show it.
#[derive(Clone, Debug, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct HookReport {
    /// The configured id.
    pub id: String,
    /// `lua`, `rhai` or `builtin`.
    pub kind: String,
    /// Where its instances run: `thread`, `process` or `builtin`.
    pub runs_in: String,
    /// The hook file, for script hooks.
    pub file: Option<std::path::PathBuf>,
    /// `info.priority` (0 when none).
    pub priority: f64,
    /// Whether it declares `ownsCompaction`.
    pub owns_compaction: bool,
    /// What its instances did so far.
    pub status: HookStatus,
}

impl PipelineFactory {
    /// The hook ids in the order they run.
    pub fn hook_ids(&self) -> Vec<&str> {
        let mut cells: Vec<&Arc<HookCell>> = self.cells.iter().collect();
        cells.sort_by(|a, b| {
            b.priority()
                .total_cmp(&a.priority())
                .then(a.index.cmp(&b.index))
        });
        cells.into_iter().map(|c| c.id.as_str()).collect()
    }

    /// Each hook, in the order they run, with its state.
    pub fn hooks(&self) -> Vec<HookReport> {
        self.hook_ids()
            .into_iter()
            .filter_map(|id| self.cells.iter().find(|c| c.id == id))
            .map(|c| {
                let v = c.current();
                let file = v.source.file().map(Path::to_path_buf);
                let kind = match file.as_deref().and_then(|f| f.extension()) {
                    None => "builtin",
                    Some(e) if e == "rhai" => "rhai",
                    Some(_) => "lua",
                };
                HookReport {
                    id: c.id.clone(),
                    kind: kind.into(),
                    runs_in: v.runs_in.into(),
                    file,
                    priority: c.priority(),
                    owns_compaction: v.source.info().owns_compaction(),
                    status: c.status(),
                }
            })
            .collect()
    }

    /// The hook files, with their ids (what `watch` follows).
    pub fn hook_files(&self) -> Vec<(String, std::path::PathBuf)> {
        self.cells
            .iter()
            .filter_map(|c| {
                let v = c.current();
                v.source.file().map(|f| (c.id.clone(), f.to_path_buf()))
            })
            .collect()
    }

    /// Loads hook `id` again from its file and, when it loads and validates, swaps it in alone:
    /// each session's instance of it follows at its next turn, with its state carried over,
    /// while the other hooks keep their instances and state. Returns the hook's new generation;
    /// on failure the running version stays.
    pub fn reload_hook(&self, id: &str) -> Result<u64, EngineError> {
        let cell = self.cells.iter().find(|c| c.id == id);
        let hook = self.spec.hooks.iter().find(|h| h.id == id);
        let (Some(cell), Some(hook)) = (cell, hook) else {
            return Err(EngineError::new(
                Op::Load,
                PIPELINE_ID,
                EngineErrorKind::Contract,
                format!("the pipeline has no hook \"{id}\""),
            ));
        };
        let version = load_hook(&self.spec, self.child.as_ref(), hook)?;
        if version.source.info().owns_compaction() != cell.current().source.info().owns_compaction()
        {
            return Err(EngineError::new(
                Op::Load,
                id,
                EngineErrorKind::Contract,
                "the new version changes info.ownsCompaction, which decides whether the host compacts; restart (or reload the whole pipeline) to apply it",
            ));
        }
        Ok(cell.swap(version))
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

    fn pipeline(&self) -> Option<&PipelineFactory> {
        Some(self)
    }

    fn instantiate(&self, cx: &InstanceContext) -> Result<Box<dyn Engine>, EngineError> {
        let mut hooks: Vec<Slot> = self.cells.iter().map(|c| Slot::start(c, cx)).collect();
        order(&mut hooks);
        Ok(Box::new(Pipeline {
            info: self.info.clone(),
            hooks,
            share: self.share,
            cx: cx.clone(),
            legacy: Legacy::default(),
            plugin_data: Map::new(),
            compaction_handled: None,
            compactions: Vec::new(),
        }))
    }
}

//! The `pipeline` engine (issue 22): many small hook scripts composed behind the one
//! [`Engine`] trait, so validation, the sandbox, limits, fallback, replay and serve work for it
//! unchanged.
//!
//! A hook file declares `info` and any of `collect`, `project`, `prune`, `compactionPlan` and
//! the observers `beforeCompaction`, `afterCompaction`, `afterAppend`. Per model call the
//! pipeline runs `collect` → `project` and maps the contributions onto the contract; only under
//! token pressure `prune` (in memory) and, at compaction, `compactionPlan`. A hook that fails is
//! logged, skipped and quarantined alone; the call is always answered.

pub mod contribution;

use std::path::Path;
use std::sync::Arc;

use serde_json::{Map, Value as Json, json};

use crate::config::{Config, Entry, PIPELINE_ID};
use crate::contract::{
    AssembleParams, AssembleResult, CompactParams, CompactResult, EngineInfo, IngestBatchParams,
    IngestBatchResult, IngestParams, IngestResult, Method,
};
use crate::engine::legacy::Legacy;
use crate::engine::lua::Lua;
use crate::engine::rhai::Rhai;
use crate::engine::script::{LoadOptions, ScriptFactory, ScriptInstance, ScriptVm};
use crate::engine::{Engine, EngineFactory, InstanceContext};
use crate::error::{EngineError, EngineErrorKind, Op, ScriptLocation};
use crate::host::HostCall;
use crate::message::Message;
use contribution::Contributions;

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

/// What the pipeline needs of a hook instance (a script instance of either language).
trait Hook: Engine {
    fn call_hook(
        &mut self,
        call: &HostCall,
        method: Method,
        fields: &Map<String, Json>,
    ) -> Result<Option<Json>, EngineError>;
}

impl<V: ScriptVm> Hook for ScriptInstance<V> {
    fn call_hook(
        &mut self,
        call: &HostCall,
        method: Method,
        fields: &Map<String, Json>,
    ) -> Result<Option<Json>, EngineError> {
        self.hook(call, method, fields)
    }
}

struct Slot {
    id: String,
    vm: Option<Box<dyn Hook>>,
    /// Why this hook no longer runs in this instance (its first failure).
    quarantined: Option<String>,
}

/// One pipeline instance serving one session: one VM per hook.
pub struct Pipeline {
    info: EngineInfo,
    hooks: Vec<Slot>,
    share: f64,
    legacy: Legacy,
    plugin_data: Map<String, Json>,
    /// The hook whose `prune` returned `compactionHandled` on this call.
    compaction_handled: Option<String>,
}

impl Pipeline {
    /// Hook ids that failed and no longer run, with their first failure.
    pub fn quarantined(&self) -> Vec<(&str, &str)> {
        self.hooks
            .iter()
            .filter_map(|h| h.quarantined.as_deref().map(|q| (h.id.as_str(), q)))
            .collect()
    }

    /// Runs `method` on every live hook defining it, in order; `each` gets the hook id and its
    /// result and may reject it (an invalid result). A failure quarantines that hook alone.
    fn run(
        &mut self,
        call: &HostCall,
        method: Method,
        fields: &Map<String, Json>,
        mut each: impl FnMut(&str, Json) -> Result<(), String>,
    ) {
        for slot in &mut self.hooks {
            let Some(vm) = &mut slot.vm else { continue };
            if !vm.defines(method) {
                continue;
            }
            let out = vm.call_hook(call, method, fields).and_then(|r| {
                each(&slot.id, r.unwrap_or(Json::Null)).map_err(|m| {
                    EngineError::new(method, &slot.id, EngineErrorKind::InvalidResult, m)
                })
            });
            if let Err(e) = out {
                tracing::warn!(
                    hook = slot.id,
                    "pipeline: hook failed and is quarantined: {e}"
                );
                slot.quarantined = Some(e.to_string());
                slot.vm = None;
            }
        }
    }

    fn lifecycle(
        &self,
        call: &HostCall,
        session_key: Option<&str>,
        model: Option<&str>,
        budget: u64,
        trigger: &str,
    ) -> Json {
        let mut l = Map::new();
        l.insert("sessionId".into(), json!(call.session_id()));
        if let Some(k) = session_key {
            l.insert("sessionKey".into(), json!(k));
        }
        l.insert("trigger".into(), json!(trigger));
        if let Some(m) = model {
            l.insert("modelId".into(), json!(m));
        }
        let estimated = call.services().tokens.messages(call.context());
        l.insert(
            "tokenWindow".into(),
            json!({"contextWindowTokens": budget, "estimatedInputTokens": estimated}),
        );
        l.insert(
            "storageCursor".into(),
            json!({"backend": "fs-jsonl", "sessionId": call.session_id(),
                   "seq": call.context().len(),
                   "entryId": call.context().last().map(|m| m.id.clone())}),
        );
        Json::Object(l)
    }
}

fn fields(pairs: impl IntoIterator<Item = (&'static str, Json)>) -> Map<String, Json> {
    pairs.into_iter().map(|(k, v)| (k.to_owned(), v)).collect()
}

fn messages_of(v: &Json) -> Result<Vec<Arc<Message>>, String> {
    serde_json::from_value::<Vec<Message>>(v.clone())
        .map(|ms| ms.into_iter().map(Arc::new).collect())
        .map_err(|e| format!("messages: {e}"))
}

fn only_keys(v: &Json, keys: &[&str], hook: Method) -> Result<(), String> {
    match v {
        Json::Null => Ok(()),
        Json::Object(m) => match m.keys().find(|k| !keys.contains(&k.as_str())) {
            Some(k) => Err(format!("{hook} returned an unknown field `{k}`")),
            None => Ok(()),
        },
        _ => Err(format!("{hook} must return a map or nothing")),
    }
}

impl Engine for Pipeline {
    fn info(&self) -> &EngineInfo {
        &self.info
    }

    fn defines(&self, method: Method) -> bool {
        method.required() || method == Method::IngestBatch
    }

    fn ingest(
        &mut self,
        call: &HostCall,
        params: &IngestParams,
    ) -> Result<IngestResult, EngineError> {
        let entry = serde_json::to_value(&*params.message).unwrap_or(Json::Null);
        let f = fields([("entries", json!([entry]))]);
        self.run(call, Method::AfterAppend, &f, |_, _| Ok(()));
        Ok(IngestResult { ingested: true })
    }

    fn ingest_batch(
        &mut self,
        call: &HostCall,
        params: &IngestBatchParams,
    ) -> Result<IngestBatchResult, EngineError> {
        let entries: Vec<Json> = params
            .messages
            .iter()
            .map(|m| serde_json::to_value(&**m).unwrap_or(Json::Null))
            .collect();
        let f = fields([("entries", Json::Array(entries))]);
        self.run(call, Method::AfterAppend, &f, |_, _| Ok(()));
        Ok(IngestBatchResult {
            ingested_count: params.messages.len() as u64,
        })
    }

    fn assemble(
        &mut self,
        call: &HostCall,
        params: &AssembleParams,
    ) -> Result<AssembleResult, EngineError> {
        self.compaction_handled = None;
        let tokens = &call.services().tokens;
        let lifecycle = self.lifecycle(
            call,
            params.session_key.as_deref(),
            params.model.as_deref(),
            params.token_budget,
            "user",
        );
        // collect
        let mut contributions = Contributions {
            plugin_data: self.plugin_data.clone(),
            ..Default::default()
        };
        let base = fields([
            ("lifecycle", lifecycle.clone()),
            ("prompt", json!(params.prompt)),
            ("pluginData", Json::Object(self.plugin_data.clone())),
        ]);
        self.run(call, Method::Collect, &base, |hook, r| {
            contributions.add(hook, &r, tokens)
        });
        // project
        let mut messages: Option<Vec<Arc<Message>>> = None;
        let mut projection: Option<Json> = None;
        let mut f = base.clone();
        f.insert("contributions".into(), contributions.as_json());
        self.run(call, Method::Project, &f, |hook, r| {
            only_keys(
                &r,
                &["messages", "projection", "contribution"],
                Method::Project,
            )?;
            if let Some(m) = r.get("messages").filter(|m| !m.is_null()) {
                messages = Some(messages_of(m)?);
            }
            if let Some(p) = r.get("projection").filter(|p| !p.is_null()) {
                projection = Some(p.clone());
            }
            if let Some(c) = r.get("contribution") {
                contributions.add(hook, c, tokens)?;
            }
            Ok(())
        });
        // the base context: legacy's (fitted to the budget), unless a hook replaced it
        let fitted = self.legacy.assemble(call, params)?;
        let mut list = messages.unwrap_or(fitted.messages);
        // prune, only under token pressure (in memory: the transcript is never rewritten)
        let budget = params.token_budget;
        let share = (budget as f64 * self.share) as u64;
        if tokens.messages(&list) + share > budget {
            let mut f = fields([
                ("lifecycle", lifecycle.clone()),
                ("tokenWindow", lifecycle["tokenWindow"].clone()),
            ]);
            f.insert(
                "pluginData".into(),
                Json::Object(contributions.plugin_data.clone()),
            );
            let mut handled = None;
            self.run(call, Method::Prune, &f, |hook, r| {
                only_keys(
                    &r,
                    &["messages", "dropped", "contribution", "compactionHandled"],
                    Method::Prune,
                )?;
                if let Some(m) = r.get("messages").filter(|m| !m.is_null()) {
                    list = messages_of(m)?;
                }
                if let Some(c) = r.get("contribution") {
                    contributions.add(hook, c, tokens)?;
                }
                if r.get("compactionHandled") == Some(&Json::Bool(true)) {
                    handled = Some(hook.to_owned());
                }
                Ok(())
            });
            self.compaction_handled = handled;
        }
        contributions.fit(share);
        self.plugin_data = contributions.plugin_data.clone();
        let addition = contributions.system_prompt_addition();
        let addition_tokens = addition.as_deref().map_or(0, |a| tokens.text(a));
        let placed = contributions.place(list.clone());
        let extra =
            (tokens.messages(&placed) + addition_tokens).saturating_sub(tokens.messages(&list));
        // The contributions are in the budget: the context makes room for them.
        let list = if tokens.messages(&list) + extra > budget {
            let (fitted, _) =
                crate::fit::fit_to_budget(&list, budget.saturating_sub(extra), tokens);
            contributions.place(fitted)
        } else {
            placed
        };
        let estimated = tokens.messages(&list) + addition_tokens;
        let mut report = contributions.report();
        if let Some(p) = projection {
            report["projection"] = p;
        }
        report["quarantined"] = json!(
            self.quarantined()
                .into_iter()
                .map(|(h, _)| h)
                .collect::<Vec<_>>()
        );
        Ok(AssembleResult {
            messages: list,
            estimated_tokens: estimated as f64,
            system_prompt_addition: addition,
            prompt_authority: None,
            context_projection: Some(json!({ "pipeline": report })),
        })
    }

    fn compact(
        &mut self,
        call: &HostCall,
        params: &CompactParams,
    ) -> Result<CompactResult, EngineError> {
        if let Some(hook) = self.compaction_handled.take()
            && !params.force
        {
            return Ok(CompactResult {
                ok: true,
                compacted: false,
                reason: Some(format!(
                    "compaction handled by the prune of hook \"{hook}\""
                )),
                result: None,
            });
        }
        let tokens = &call.services().tokens;
        let observed = fields([
            ("messageCount", json!(call.context().len())),
            ("tokenCount", json!(tokens.messages(call.context()))),
        ]);
        self.run(call, Method::BeforeCompaction, &observed, |_, _| Ok(()));
        let lifecycle = self.lifecycle(
            call,
            params.session_key.as_deref(),
            None,
            params.token_budget,
            "internal",
        );
        let f = fields([
            ("lifecycle", lifecycle.clone()),
            ("tokenWindow", lifecycle["tokenWindow"].clone()),
            ("storageCursor", lifecycle["storageCursor"].clone()),
            ("currentTokenCount", json!(params.current_token_count)),
            ("force", json!(params.force)),
        ]);
        let mut plan: Option<CompactResult> = None;
        let limits = crate::limits::Limits::default().results;
        self.run(call, Method::CompactionPlan, &f, |_, r| {
            only_keys(
                &r,
                &["plan", "messages", "contribution"],
                Method::CompactionPlan,
            )?;
            if plan.is_some() {
                return Ok(());
            }
            if let Some(p) = r.get("plan").filter(|p| !p.is_null()) {
                let out: CompactResult =
                    serde_json::from_value(p.clone()).map_err(|e| format!("plan: {e}"))?;
                crate::contract::check_compact(&out, &limits)?;
                plan = Some(out);
            }
            Ok(())
        });
        let out = match plan {
            Some(p) => p,
            None => self.legacy.compact(call, params)?,
        };
        let after = fields([
            ("messageCount", json!(call.context().len())),
            ("compacted", json!(out.compacted)),
        ]);
        self.run(call, Method::AfterCompaction, &after, |_, _| Ok(()));
        Ok(out)
    }

    fn dispose(&mut self, call: &HostCall) -> Result<(), EngineError> {
        for slot in &mut self.hooks {
            if let Some(vm) = &mut slot.vm
                && let Err(e) = vm.dispose(call)
            {
                tracing::warn!(hook = slot.id, "pipeline: dispose failed: {e}");
            }
        }
        Ok(())
    }

    fn save_state(&mut self) -> Result<Json, EngineError> {
        let mut hooks = Map::new();
        for slot in &mut self.hooks {
            if let Some(vm) = &mut slot.vm {
                hooks.insert(slot.id.clone(), vm.save_state()?);
            }
        }
        Ok(json!({"hooks": hooks, "pluginData": self.plugin_data}))
    }

    fn restore_state(&mut self, state: Json) -> Result<(), EngineError> {
        if let Some(Json::Object(d)) = state.get("pluginData") {
            self.plugin_data = d.clone();
        }
        for slot in &mut self.hooks {
            if let Some(vm) = &mut slot.vm
                && let Some(s) = state.get("hooks").and_then(|h| h.get(&slot.id))
            {
                vm.restore_state(s.clone())?;
            }
        }
        Ok(())
    }
}

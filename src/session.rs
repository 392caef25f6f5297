//! A session: one conversation's transcript, its current context, its engine instance, and the
//! turn driver that calls the engine at the contract's moments (§4, §7, §8).
//!
//! Data flows one way: the transcript store holds every entry; the session derives the context
//! (the last compaction summary plus what it kept and what came after); the turn driver calls
//! the engine; every result is validated and pairing-repaired before the model sees it. Engines
//! never write: the session appends whatever a result asks for.
//!
//! A failing engine is quarantined (for the whole host process) and the failed call is re-run
//! on `legacy`, so every turn completes; with `failurePolicy: "strict"` the error is returned.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::compaction::{self, CompactionSettings};
use crate::config::FailurePolicy;
use crate::contract::{
    self, AfterTurnParams, AssembleParams, AssembleResult, BootstrapParams, CommitTurnParams,
    CompactParams, CompactResult, CompactionTarget, ContextMode, EngineInfo, EngineSelection,
    HostParam, IngestBatchParams, IngestParams, MaintainParams, MaintainReason, Method, ModelInfo,
    Operation, PromptAuthority, ResultLimits, RuntimeDiagnostics, RuntimeInfo, RuntimeLimits,
    RuntimeSettings, SubagentEndReason, SubagentEndedParams, SubagentSpawnParams,
};
use crate::engine::legacy::{LEGACY_ID, Legacy};
use crate::engine::{Engine, EngineCell, InstanceContext, SpawnRollback};
use crate::error::{Disposition, EngineError, EngineErrorKind, Error, Op, Result};
use crate::host::{HostCall, SessionServices};
use crate::message::{Message, Role};
use crate::pairing;
use crate::quarantine::Quarantine;
use crate::summarize::Summarizer;
use crate::tokens::TokenCache;
use crate::transcript::{Store, TranscriptStore};

/// Everything a session needs that the host shares across sessions.
#[derive(Clone, Debug)]
pub struct SessionSetup {
    /// The session id.
    pub id: String,
    /// The model's context window in tokens.
    pub window: u64,
    /// The system prompt (counted against the window).
    pub system_prompt: Option<String>,
    /// The model id, for `runtimeSettings` and `assemble`'s `model`.
    pub model: Option<String>,
    /// What to do when the engine fails.
    pub failure_policy: FailurePolicy,
    /// Built-in compaction knobs.
    pub compaction: CompactionSettings,
    /// Caps on engine results.
    pub limits: ResultLimits,
    /// Counts tokens.
    pub tokens: Arc<dyn crate::tokens::TokenCounter>,
    /// Summarizes for compaction and `host.summarize`.
    pub summarizer: Arc<dyn Summarizer>,
    /// The configured engine (hot-reloadable), with its entry config.
    pub engine: Arc<EngineCell>,
    /// Where this host's engines are quarantined.
    pub quarantine: Arc<Quarantine>,
}

/// One user turn's input.
#[derive(Clone, Debug)]
pub struct TurnInput {
    /// The user's message.
    pub user: Message,
    /// Whether this is a heartbeat turn.
    pub is_heartbeat: bool,
}

/// What the model sees for a turn, with the host's measurements.
#[derive(Clone, Debug)]
pub struct Assembly {
    /// The context, pairing-repaired.
    pub messages: Vec<Arc<Message>>,
    /// Text for the system prompt.
    pub system_prompt_addition: Option<String>,
    /// The budget the engine was given.
    pub token_budget: u64,
    /// Tokens of `messages` plus `system_prompt_addition`, measured by the host.
    pub assembled_tokens: u64,
    /// What the engine said it would be.
    pub estimated_tokens: f64,
    /// The engine that produced it.
    pub engine: String,
    /// Whether `legacy` answered in place of the configured engine.
    pub fallback: bool,
    /// Pairing repairs the host made.
    pub pairing_repairs: usize,
}

/// What happened during one turn, for reports.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct TurnStats {
    /// Compactions that happened this turn (auto, overflow recovery, manual).
    pub compactions: u32,
    /// Compactions that were attempted and freed nothing.
    pub failed_compactions: u32,
    /// Pairing repairs across all assemblies of the turn.
    pub pairing_repairs: usize,
    /// Whether any call this turn fell back to `legacy`.
    pub fallback: bool,
}

/// A running session.
pub struct Session {
    id: Arc<str>,
    setup: SessionSetup,
    store: Box<dyn Store>,
    context: Arc<Vec<Arc<Message>>>,
    services: Arc<SessionServices>,
    /// The configured engine's instance, while it is healthy.
    engine: Option<Box<dyn Engine>>,
    /// The configured entry this session serves (`legacy` when none): the quarantine key.
    entry: Arc<str>,
    /// The configured engine's `info.id` (the entry id when it never loaded; `legacy` when
    /// none is configured).
    engine_id: String,
    /// A host fault discarded the instance: make a new one at the next turn boundary.
    reinstantiate: bool,
    engine_info: Option<EngineInfo>,
    legacy: Legacy,
    /// The engine generation this session's instance belongs to.
    generation: u64,
    /// The entry config of that generation.
    engine_config: Arc<Value>,
    bootstrapped: bool,
    turn_index: u64,
    pre_prompt_count: usize,
    turn_start: usize,
    stats: TurnStats,
    rollbacks: Vec<SpawnRollback>,
    warned_noop_compact: bool,
    disposed: bool,
}

impl std::fmt::Debug for Session {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Session")
            .field("id", &self.id)
            .field("engine", &self.engine_id)
            .field("messages", &self.context.len())
            .finish_non_exhaustive()
    }
}

/// The file beside a transcript that holds the engine's per-session state.
pub fn state_path(transcript: &Path) -> PathBuf {
    let mut name = transcript.file_name().unwrap_or_default().to_os_string();
    name.push(".state.json");
    transcript.with_file_name(name)
}

impl Session {
    /// Starts a new session in a new transcript file.
    pub fn create(setup: SessionSetup, file: &Path, cwd: &str) -> Result<Session> {
        let store = TranscriptStore::create(file, &setup.id, cwd)?;
        Session::with_store(setup, Box::new(store), Vec::new())
    }

    /// Reopens a session from its transcript file, restoring the engine's saved state.
    pub fn open(setup: SessionSetup, file: &Path) -> Result<Session> {
        let (store, messages, problems) = TranscriptStore::open(file)?;
        for p in &problems {
            tracing::warn!(file = %file.display(), line = p.line, "skipped transcript line: {}", p.message);
        }
        Session::with_store(setup, Box::new(store), messages)
    }

    /// Starts a session over any [`Store`] holding `messages` (what the store already has, in
    /// order): the seam for other storage backends.
    pub fn with_store(
        setup: SessionSetup,
        store: Box<dyn Store>,
        messages: Vec<Arc<Message>>,
    ) -> Result<Session> {
        let services = Arc::new(SessionServices {
            tokens: TokenCache::new(Arc::clone(&setup.tokens)),
            summarizer: Arc::clone(&setup.summarizer),
            compaction: setup.compaction.clone(),
            limits: setup.limits.clone(),
        });
        let context = Arc::new(derive_context(&messages));
        let mut session = Session {
            id: Arc::from(setup.id.as_str()),
            engine: None,
            entry: setup.engine.entry(),
            engine_id: LEGACY_ID.to_owned(),
            reinstantiate: false,
            engine_info: None,
            legacy: Legacy::default(),
            generation: setup.engine.number(),
            engine_config: Arc::clone(&setup.engine.current().config),
            bootstrapped: false,
            turn_index: 0,
            pre_prompt_count: 0,
            turn_start: 0,
            stats: TurnStats::default(),
            rollbacks: Vec::new(),
            warned_noop_compact: false,
            disposed: false,
            services,
            context,
            store,
            setup,
        };
        session.instantiate_engine()?;
        session.restore_state()?;
        Ok(session)
    }

    fn instantiate_engine(&mut self) -> Result<()> {
        let current = self.setup.engine.current();
        self.generation = current.number;
        self.engine_config = current.config;
        self.entry = current.entry;
        self.reinstantiate = false;
        let Some(choice) = current.engine else {
            self.engine_id = LEGACY_ID.to_owned();
            self.engine_info = None;
            return Ok(());
        };
        let factory = match choice {
            Ok(f) => f,
            Err(e) => {
                self.engine_id = e.engine.clone();
                return self.on_failure(e);
            }
        };
        self.engine_id = factory.info().id.clone();
        self.engine_info = Some(factory.info().clone());
        if self.setup.quarantine.contains(&self.entry) {
            return Ok(());
        }
        let cx = InstanceContext {
            config: Arc::clone(&self.engine_config),
            agent_dir: String::new(),
            workspace_dir: String::new(),
            session_id: self.setup.id.clone(),
        };
        match factory.instantiate(&cx) {
            Ok(instance) => {
                self.engine = Some(instance);
                Ok(())
            }
            Err(e) => self.on_failure(e),
        }
    }

    /// At a turn boundary: if the host reloaded the engine, retire this session's instance
    /// (state saved, `dispose` run) and continue on a new one with the state restored.
    fn sync_engine(&mut self) -> Result<()> {
        if self.reinstantiate && self.setup.engine.number() == self.generation {
            self.instantiate_engine()?;
            return self.restore_state();
        }
        if self.setup.engine.number() == self.generation {
            return Ok(());
        }
        self.save_state()?;
        self.retire_engine();
        self.bootstrapped = false;
        self.warned_noop_compact = false;
        self.instantiate_engine()?;
        self.restore_state()
    }

    fn restore_state(&mut self) -> Result<()> {
        let path = state_path(self.store.path());
        let Ok(text) = std::fs::read_to_string(&path) else {
            return Ok(());
        };
        let saved: SavedState = match serde_json::from_str(&text) {
            Ok(s) => s,
            Err(e) => {
                tracing::warn!(file = %path.display(), "ignoring unreadable engine state: {e}");
                return Ok(());
            }
        };
        if saved.engine != self.engine_id {
            return Ok(());
        }
        let Some(mut engine) = self.engine.take() else {
            return Ok(());
        };
        match engine.restore_state(saved.state) {
            Ok(()) => {
                self.engine = Some(engine);
                Ok(())
            }
            Err(e) => {
                self.engine = Some(engine);
                self.on_failure(e)
            }
        }
    }

    /// The session id.
    pub fn id(&self) -> &str {
        &self.id
    }

    /// The transcript file.
    pub fn file(&self) -> &Path {
        self.store.path()
    }

    /// Messages stored in the transcript (summaries included).
    pub fn transcript_len(&self) -> usize {
        self.store.len()
    }

    /// The configured engine's id.
    pub fn engine_id(&self) -> &str {
        &self.engine_id
    }

    /// The current context (what `assemble` receives).
    pub fn context(&self) -> &[Arc<Message>] {
        &self.context
    }

    /// The context's tokens as the host counts them.
    pub fn context_tokens(&self) -> u64 {
        self.services.tokens.messages(&self.context)
    }

    /// The configured engine's first failure, when it is quarantined.
    pub fn quarantine(&self) -> Option<EngineError> {
        self.setup.quarantine.first_failure(&self.entry)
    }

    /// The token budget for `assemble`: window − output reserve − system prompt tokens.
    pub fn token_budget(&self) -> u64 {
        let window = self.setup.window;
        let reserve = self.setup.compaction.reserve_tokens(window);
        let prompt = self
            .setup
            .system_prompt
            .as_deref()
            .map(|p| self.services.tokens.text(p))
            .unwrap_or(0);
        window.saturating_sub(reserve).saturating_sub(prompt).max(1)
    }

    /// Appends messages outside a turn (history imported before the first prompt) and
    /// ingests them.
    pub fn record(&mut self, messages: Vec<Message>) -> Result<()> {
        self.sync_engine()?;
        if messages.is_empty() {
            return Ok(());
        }
        let stored = self.append(messages)?;
        self.ingest_new(&stored, false)
    }

    // -----------------------------------------------------------------------------------------
    // The turn driver.

    /// Starts a turn: bootstrap (once), store and ingest the user message, auto-compact when a
    /// non-owning engine's context overflows, then `assemble` with overflow recovery.
    pub fn begin_turn(&mut self, input: TurnInput) -> Result<Assembly> {
        self.sync_engine()?;
        self.stats = TurnStats::default();
        self.turn_index += 1;
        self.check_requirements(Operation::AgentRun)?;
        if !self.bootstrapped {
            self.bootstrap()?;
        }
        self.pre_prompt_count = self.context.len();
        self.turn_start = self.context.len();
        let prompt = input.user.text();
        let stored = self.append(vec![input.user])?;
        self.ingest_new(&stored, input.is_heartbeat)?;

        let budget = self.token_budget();
        if !self.active_owns_compaction() {
            let tokens = self.context_tokens();
            if tokens > budget {
                self.auto_compact(budget)?;
            }
        }
        self.assemble_within_budget(budget, Some(prompt))
    }

    /// The tool loop: the model answered with tool calls and the tools answered; store and
    /// ingest those messages, auto-compact if a non-owning engine's context overflows, and
    /// `assemble` again for the next model call of the same turn.
    pub fn continue_turn(&mut self, messages: Vec<Message>) -> Result<Assembly> {
        let stored = self.append(messages)?;
        self.ingest_new(&stored, false)?;
        let budget = self.token_budget();
        if !self.active_owns_compaction() && self.context_tokens() > budget {
            self.auto_compact(budget)?;
        }
        self.assemble_within_budget(budget, None)
    }

    /// Ends a turn: store the model's messages, `ingestBatch` (or `ingest` each) **and**
    /// `afterTurn`, `commitTurn`, then `maintain`, and save the engine's state.
    pub fn end_turn(&mut self, replies: Vec<Message>) -> Result<TurnStats> {
        let stored = self.append(replies)?;
        self.ingest_new(&stored, false)?;
        let budget = self.token_budget();
        if self.defines(Method::AfterTurn) {
            let params = AfterTurnParams {
                session_id: self.id.to_string(),
                session_key: self.host_param(HostParam::SessionKey, self.id.to_string()),
                pre_prompt_message_count: self.pre_prompt_count,
                token_budget: budget,
                is_heartbeat: false,
                runtime_settings: self.runtime_settings_param(budget, None),
            };
            self.run(Method::AfterTurn, budget, |e, call| {
                e.after_turn(call, &params)
            })?;
        }
        if self.defines(Method::CommitTurn) {
            let turn: Vec<Arc<Message>> =
                self.context[self.turn_start.min(self.context.len())..].to_vec();
            let params = CommitTurnParams {
                session_id: self.id.to_string(),
                session_key: self.host_param(HostParam::SessionKey, self.id.to_string()),
                advancement_key: format!("{}:{}", self.id, self.turn_index),
                messages: turn,
            };
            self.run(Method::CommitTurn, budget, |e, call| {
                e.commit_turn(call, &params).map(|_| ())
            })?;
        }
        self.maintain(MaintainReason::Turn)?;
        self.save_state()?;
        Ok(std::mem::take(&mut self.stats))
    }

    /// `/compact`: the engine's `compact` with `force` and target `threshold`.
    pub fn compact_now(&mut self, instructions: Option<String>) -> Result<CompactResult> {
        self.sync_engine()?;
        self.check_requirements(Operation::ManualCompact)?;
        let budget = self.token_budget();
        let result =
            self.engine_compact(budget, CompactionTarget::Threshold, instructions, None)?;
        Ok(result)
    }

    /// What happened in the turn so far.
    pub fn stats(&self) -> &TurnStats {
        &self.stats
    }

    /// Prepares a subagent spawn; returns a handle for [`Session::subagent_spawn_failed`].
    pub fn prepare_subagent_spawn(
        &mut self,
        child_session_key: &str,
        context_mode: ContextMode,
        ttl_ms: Option<u64>,
    ) -> Result<Option<SpawnRollback>> {
        self.check_requirements(Operation::SubagentSpawn)?;
        if !self.defines(Method::PrepareSubagentSpawn) {
            return Ok(None);
        }
        let params = SubagentSpawnParams {
            session_id: self.id.to_string(),
            parent_session_key: self.id.to_string(),
            child_session_key: child_session_key.to_owned(),
            context_mode,
            ttl_ms,
        };
        let budget = self.token_budget();
        let handle = self.run(Method::PrepareSubagentSpawn, budget, |e, call| {
            e.prepare_subagent_spawn(call, &params)
        })?;
        if let Some(h) = handle {
            self.rollbacks.push(h);
        }
        Ok(handle)
    }

    /// The spawn prepared under `handle` failed: run the engine's rollback.
    pub fn subagent_spawn_failed(&mut self, handle: SpawnRollback) -> Result<()> {
        let Some(pos) = self.rollbacks.iter().position(|h| *h == handle) else {
            return Ok(());
        };
        self.rollbacks.swap_remove(pos);
        let budget = self.token_budget();
        // A rollback belongs to the instance that prepared it; legacy has nothing to undo.
        if let Some(mut engine) = self.engine.take() {
            let call = self.host_call(&self.engine_id.clone(), budget);
            let r = engine.rollback_subagent_spawn(&call, handle);
            self.engine = Some(engine);
            if let Err(e) = r {
                self.on_failure(e)?;
            }
        }
        Ok(())
    }

    /// A subagent ended.
    pub fn subagent_ended(
        &mut self,
        child_session_key: &str,
        reason: SubagentEndReason,
    ) -> Result<()> {
        if !self.defines(Method::OnSubagentEnded) {
            return Ok(());
        }
        let params = SubagentEndedParams {
            session_id: self.id.to_string(),
            child_session_key: child_session_key.to_owned(),
            reason,
        };
        let budget = self.token_budget();
        self.run(Method::OnSubagentEnded, budget, |e, call| {
            e.on_subagent_ended(call, &params)
        })
    }

    /// Retires the engine instance: saves its state and runs `dispose` once.
    pub fn close(&mut self) -> Result<()> {
        if self.disposed {
            return Ok(());
        }
        self.save_state()?;
        self.disposed = true;
        self.retire_engine();
        Ok(())
    }

    // -----------------------------------------------------------------------------------------

    fn bootstrap(&mut self) -> Result<()> {
        self.bootstrapped = true;
        let budget = self.token_budget();
        if self.defines(Method::Bootstrap) {
            let params = BootstrapParams {
                session_id: self.id.to_string(),
                session_key: self.host_param(HostParam::SessionKey, self.id.to_string()),
                session_file: self.store.path().display().to_string(),
                runtime_settings: self.runtime_settings_param(budget, None),
            };
            self.run(Method::Bootstrap, budget, |e, call| {
                e.bootstrap(call, &params)
            })?;
            self.maintain(MaintainReason::Bootstrap)?;
        }
        Ok(())
    }

    fn maintain(&mut self, reason: MaintainReason) -> Result<()> {
        if !self.defines(Method::Maintain) {
            return Ok(());
        }
        let budget = self.token_budget();
        let params = MaintainParams {
            session_id: self.id.to_string(),
            session_key: self.host_param(HostParam::SessionKey, self.id.to_string()),
            reason,
            runtime_settings: self.runtime_settings_param(budget, None),
        };
        self.run(Method::Maintain, budget, |e, call| {
            e.maintain(call, &params).map(|_| ())
        })
    }

    fn ingest_new(&mut self, stored: &[Arc<Message>], is_heartbeat: bool) -> Result<()> {
        if stored.is_empty() {
            return Ok(());
        }
        let budget = self.token_budget();
        let session_key = self.host_param(HostParam::SessionKey, self.id.to_string());
        if self.defines(Method::IngestBatch) {
            let params = IngestBatchParams {
                session_id: self.id.to_string(),
                session_key,
                messages: stored.to_vec(),
                is_heartbeat,
            };
            self.run(Method::IngestBatch, budget, |e, call| {
                e.ingest_batch(call, &params).map(|_| ())
            })
        } else {
            for m in stored {
                let params = IngestParams {
                    session_id: self.id.to_string(),
                    session_key: session_key.clone(),
                    message: Arc::clone(m),
                    is_heartbeat,
                };
                self.run(Method::Ingest, budget, |e, call| {
                    e.ingest(call, &params).map(|_| ())
                })?;
            }
            Ok(())
        }
    }

    /// Assemble, repair, measure; on overflow, compact through the engine (at most 3 times,
    /// stopping when one frees nothing); an engine still over budget after that has failed.
    fn assemble_within_budget(&mut self, budget: u64, prompt: Option<String>) -> Result<Assembly> {
        let mut recoveries = 0u32;
        let mut last_tokens = u64::MAX;
        let mut degraded: Option<&'static str> = None;
        loop {
            let params = AssembleParams {
                session_id: self.id.to_string(),
                session_key: self.host_param(HostParam::SessionKey, self.id.to_string()),
                token_budget: budget,
                prompt: prompt
                    .clone()
                    .and_then(|p| self.host_param(HostParam::Prompt, p)),
                model: self.setup.model.clone(),
                available_tools: None,
                runtime_settings: self.runtime_settings_param(budget, degraded),
            };
            let limits = self.setup.limits.clone();
            let (result, engine, fallback) =
                self.run_tagged(Method::Assemble, budget, |e, call| {
                    let r = e.assemble(call, &params)?;
                    contract::check_assemble(&r, &limits)
                        .map_err(|m| invalid(e.info(), Method::Assemble, m))?;
                    Ok(r)
                })?;
            let authority = result.prompt_authority;
            let from_legacy = engine == LEGACY_ID;
            let assembly = self.finish_assembly(result, budget, engine, fallback);
            let mut measured = assembly.assembled_tokens;
            if authority == Some(PromptAuthority::PreassemblyMayOverflow) {
                measured = measured.max(self.context_tokens());
            }
            // legacy fits by construction; it is the last resort and is never quarantined.
            if measured <= budget || from_legacy {
                if measured > budget {
                    tracing::warn!(
                        session = &*self.id,
                        measured,
                        budget,
                        "legacy could not fit the context"
                    );
                }
                return Ok(assembly);
            }
            let stalled = measured >= last_tokens;
            last_tokens = measured;
            if recoveries < 3 && !stalled {
                recoveries += 1;
                degraded = Some("context_overflow");
                self.engine_compact(budget, CompactionTarget::Budget, None, degraded)?;
                continue;
            }
            let err = invalid_for(
                &self.engine_id,
                Method::Assemble,
                format!(
                    "assembled context of {measured} tokens exceeds the budget of {budget} after {recoveries} compactions"
                ),
            );
            self.on_failure(err)?;
        }
    }

    fn finish_assembly(
        &mut self,
        result: AssembleResult,
        budget: u64,
        engine: String,
        fallback: bool,
    ) -> Assembly {
        let repaired = pairing::repair(result.messages);
        let tokens = &self.services.tokens;
        let addition_tokens = result
            .system_prompt_addition
            .as_deref()
            .map(|a| tokens.text(a))
            .unwrap_or(0);
        let assembled_tokens = tokens.messages(&repaired.messages) + addition_tokens;
        self.stats.pairing_repairs += repaired.repairs.len();
        Assembly {
            messages: repaired.messages,
            system_prompt_addition: result.system_prompt_addition,
            token_budget: budget,
            assembled_tokens,
            estimated_tokens: result.estimated_tokens,
            engine,
            fallback,
            pairing_repairs: repaired.repairs.len(),
        }
    }

    /// Built-in auto-compaction for engines that do not own compaction.
    fn auto_compact(&mut self, budget: u64) -> Result<()> {
        let params = self.compact_params(budget, CompactionTarget::Budget, None, None);
        let s = &self.services;
        let result = compaction::compact(
            &self.context,
            &s.tokens,
            s.summarizer.as_ref(),
            &s.compaction,
            &params,
        );
        // The built-in compaction is the host's own: a result it cannot apply is a host fault.
        self.apply_compaction(&result)
            .map_err(|e| e.into_host_error(LEGACY_ID, "built-in compaction"))
    }

    /// Runs the engine's `compact` (falling back like any call) and applies its result.
    fn engine_compact(
        &mut self,
        budget: u64,
        target: CompactionTarget,
        instructions: Option<String>,
        degraded: Option<&'static str>,
    ) -> Result<CompactResult> {
        let params = self.compact_params(budget, target, instructions, degraded);
        let limits = self.setup.limits.clone();
        let before = self.context_tokens();
        // The configured engine, and after its failure `legacy`, once: never a loop.
        for _ in 0..2 {
            let (result, engine, _) = self.run_tagged(Method::Compact, budget, |e, call| {
                let r = e.compact(call, &params)?;
                contract::check_compact(&r, &limits)
                    .map_err(|m| invalid(e.info(), Method::Compact, m))?;
                check_first_kept(&r, call.context())
                    .map_err(|m| invalid(e.info(), Method::Compact, m))?;
                Ok(r)
            })?;
            match self.apply_compaction(&result) {
                Ok(()) => {
                    if !result.compacted
                        && before > budget
                        && engine != LEGACY_ID
                        && !self.active_owns_compaction()
                        && !self.warned_noop_compact
                    {
                        self.warned_noop_compact = true;
                        tracing::warn!(
                            engine = %engine,
                            session = &*self.id,
                            "compact did nothing on an over-budget session ({before} > {budget} tokens); a non-owning engine should return host.delegateCompaction(p)"
                        );
                    }
                    return Ok(result);
                }
                Err(ApplyError::Invalid(m)) if engine != LEGACY_ID => {
                    self.on_failure(invalid_for(&engine, Method::Compact, m))?;
                }
                Err(e) => return Err(e.into_host_error(&engine, "compact")),
            }
        }
        Err(Error::Host(EngineError::new(
            Method::Compact,
            LEGACY_ID,
            EngineErrorKind::Host,
            "compaction could not be applied after falling back to legacy",
        )))
    }

    /// Appends a compaction's summary and re-derives the context. Returns what is wrong with
    /// the result when it cannot be applied.
    fn apply_compaction(&mut self, result: &CompactResult) -> std::result::Result<(), ApplyError> {
        if !result.compacted {
            self.stats.failed_compactions += 1;
            return Ok(());
        }
        let Some(outcome) = &result.result else {
            // The engine compacted its own storage; the transcript is unchanged.
            self.stats.compactions += 1;
            return Ok(());
        };
        let Some(summary) = &outcome.summary else {
            self.stats.compactions += 1;
            return Ok(());
        };
        let kept_from =
            match &outcome.first_kept_entry_id {
                Some(id) => Some(self.context.iter().position(|m| &m.id == id).ok_or_else(
                    || {
                        ApplyError::Invalid(format!(
                            "firstKeptEntryId \"{id}\" is not in the session context"
                        ))
                    },
                )?),
                None => None,
            };
        let before = self.context_tokens();
        let kept: Vec<Arc<Message>> = match kept_from {
            Some(i) => self.context[i..].to_vec(),
            None => Vec::new(),
        };
        let first_kept = outcome.first_kept_entry_id.clone().unwrap_or_default();
        let draft = compaction::summary_message(summary, before, None, &first_kept);
        let after = self.services.tokens.counter().count_message(&draft)
            + self.services.tokens.messages(&kept);
        let mut message = compaction::summary_message(summary, before, Some(after), &first_kept);
        if first_kept.is_empty()
            && let crate::message::MessageBody::CompactionSummary(s) = &mut message.body
        {
            s.first_kept_entry_id = None;
        }
        if let Some(details) = &outcome.details
            && let crate::message::MessageBody::CompactionSummary(s) = &mut message.body
        {
            s.extra.insert("details".into(), details.clone());
        }
        let stored = self.store.append(vec![message]).map_err(ApplyError::Host)?;
        let mut context = stored;
        context.extend(kept);
        self.turn_start = self.turn_start.min(context.len());
        self.context = Arc::new(context);
        if after < before {
            self.stats.compactions += 1;
        } else {
            self.stats.failed_compactions += 1;
        }
        Ok(())
    }

    fn compact_params(
        &self,
        budget: u64,
        target: CompactionTarget,
        instructions: Option<String>,
        degraded: Option<&'static str>,
    ) -> CompactParams {
        CompactParams {
            session_id: self.id.to_string(),
            session_key: self.host_param(HostParam::SessionKey, self.id.to_string()),
            token_budget: budget,
            force: true,
            current_token_count: self.context_tokens(),
            compaction_target: target,
            custom_instructions: instructions,
            runtime_settings: self.runtime_settings_param(budget, degraded),
        }
    }

    fn save_state(&mut self) -> Result<()> {
        let Some(mut engine) = self.engine.take() else {
            return Ok(());
        };
        let state = engine.save_state();
        self.engine = Some(engine);
        let state = match state {
            Ok(s) => s,
            Err(e) => return self.on_failure(e),
        };
        let path = state_path(self.store.path());
        let saved = SavedState {
            engine: self.engine_id.clone(),
            state,
        };
        let text = serde_json::to_vec_pretty(&saved).map_err(|e| {
            Error::Host(EngineError::new(
                Op::SaveState,
                self.engine_id.clone(),
                EngineErrorKind::Host,
                format!("serialize engine state: {e}"),
            ))
        })?;
        write_atomic(&path, &text)
    }

    fn append(&mut self, messages: Vec<Message>) -> Result<Vec<Arc<Message>>> {
        let stored = self.store.append(messages)?;
        Arc::make_mut(&mut self.context).extend(stored.iter().cloned());
        Ok(stored)
    }

    // -----------------------------------------------------------------------------------------
    // Calling engines, with quarantine and fallback.

    /// Whether the engine answering now defines a lifecycle method.
    pub fn defines(&self, method: Method) -> bool {
        match &self.engine {
            Some(e) => e.defines(method),
            None => self.legacy.defines(method),
        }
    }

    /// Whether the engine answering now owns compaction.
    pub fn active_owns_compaction(&self) -> bool {
        self.engine
            .as_ref()
            .is_some_and(|e| e.info().owns_compaction())
    }

    fn host_param<T>(&self, p: HostParam, value: T) -> Option<T> {
        let accepts = match &self.engine {
            Some(e) => e.info().accepts(p),
            None => true,
        };
        accepts.then_some(value)
    }

    fn runtime_settings_param(
        &self,
        budget: u64,
        degraded: Option<&str>,
    ) -> Option<RuntimeSettings> {
        let fallback = self.engine.is_none() && self.engine_id != LEGACY_ID;
        let settings = RuntimeSettings {
            schema_version: 1,
            runtime: RuntimeInfo {
                host: "ctxhost".into(),
                mode: if degraded.is_some() {
                    "degraded"
                } else if fallback {
                    "fallback"
                } else {
                    "normal"
                }
                .into(),
            },
            model: ModelInfo {
                requested: self.setup.model.clone(),
                resolved: self.setup.model.clone(),
                provider: None,
            },
            context_engine_selection: EngineSelection {
                selected_id: Some(self.engine_id.clone()),
                source: if self.engine_id != LEGACY_ID {
                    "configured"
                } else {
                    "default"
                }
                .into(),
            },
            limits: RuntimeLimits {
                prompt_token_budget: Some(budget),
                max_output_tokens: Some(self.setup.compaction.reserve_tokens(self.setup.window)),
            },
            diagnostics: RuntimeDiagnostics {
                fallback_reason: fallback.then(|| "runtime_unavailable".to_owned()),
                degraded_reason: degraded.map(str::to_owned),
            },
        };
        self.host_param(HostParam::RuntimeSettings, settings)
    }

    fn host_call(&self, engine_id: &str, budget: u64) -> HostCall {
        HostCall::new(
            Arc::from(engine_id),
            Arc::clone(&self.id),
            Arc::clone(&self.context),
            Arc::clone(&self.services),
            Arc::clone(&self.engine_config),
            budget,
        )
    }

    fn check_requirements(&self, op: Operation) -> Result<()> {
        let Some(engine) = &self.engine else {
            return Ok(());
        };
        match contract::unmet_requirements(engine.info(), op) {
            None => Ok(()),
            Some(message) => Err(Error::Engine(EngineError::new(
                crate::error::Op::Requirements(op),
                self.engine_id.clone(),
                EngineErrorKind::HostRequirement,
                message,
            ))),
        }
    }

    fn run<T>(
        &mut self,
        method: Method,
        budget: u64,
        f: impl FnMut(&mut dyn Engine, &HostCall) -> std::result::Result<T, EngineError>,
    ) -> Result<T> {
        self.run_tagged(method, budget, f).map(|(v, _, _)| v)
    }

    /// Runs a call on the configured engine; on a quarantining failure re-runs it on `legacy`.
    /// Returns the value, the engine that produced it and whether that was a fallback.
    fn run_tagged<T>(
        &mut self,
        method: Method,
        budget: u64,
        mut f: impl FnMut(&mut dyn Engine, &HostCall) -> std::result::Result<T, EngineError>,
    ) -> Result<(T, String, bool)> {
        if let Some(mut engine) = self.engine.take() {
            let call = self.host_call(&self.engine_id.clone(), budget);
            let r = f(engine.as_mut(), &call);
            self.engine = Some(engine);
            match r {
                Ok(v) => return Ok((v, self.engine_id.clone(), false)),
                Err(e) => self.on_failure(e)?,
            }
        }
        let call = self.host_call(LEGACY_ID, budget);
        // legacy is the host's own engine: its failure is a host fault, never a quarantine.
        let v = f(&mut self.legacy, &call).map_err(|e| {
            tracing::error!(op = %method, "legacy failed: {e}");
            Error::Host(e)
        })?;
        let fallback = self.engine_id != LEGACY_ID;
        self.stats.fallback |= fallback;
        Ok((v, LEGACY_ID.to_owned(), fallback))
    }

    /// Decides what a failure means: quarantine and fall back, or return the error.
    fn on_failure(&mut self, e: EngineError) -> Result<()> {
        match e.disposition() {
            Disposition::FailClosed | Disposition::Cancelled => Err(Error::Engine(e)),
            Disposition::HostFault => {
                // Not the engine's fault, so no quarantine; but the instance may be broken (a
                // dead worker): drop it and make a new one, state restored, at the next turn.
                tracing::error!(engine = %e.engine, session = &*self.id, "host fault: {e}");
                if self.engine.take().is_some() {
                    self.reinstantiate = true;
                }
                Err(Error::Host(e))
            }
            Disposition::Quarantine if self.setup.failure_policy == FailurePolicy::Strict => {
                Err(Error::Engine(e))
            }
            Disposition::Quarantine => {
                if self.setup.quarantine.record(&self.entry, &e) {
                    tracing::warn!(engine = %e.engine, session = &*self.id, "engine quarantined, falling back to legacy: {e}");
                }
                self.stats.fallback = true;
                let abandoned =
                    matches!(e.kind, EngineErrorKind::Deadline | EngineErrorKind::Memory);
                if abandoned {
                    self.engine = None;
                } else {
                    self.retire_engine();
                }
                Ok(())
            }
        }
    }

    fn retire_engine(&mut self) {
        if let Some(mut engine) = self.engine.take() {
            let call = self.host_call(&self.engine_id.clone(), self.token_budget());
            // The instance is leaving either way; a failing dispose is reported, and does not
            // quarantine the entry (after a reload that would punish the new version).
            if let Err(e) = engine.dispose(&call) {
                tracing::warn!(engine = %self.engine_id, session = &*self.id, "dispose failed: {e}");
            }
        }
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        if !self.disposed {
            self.disposed = true;
            self.retire_engine();
        }
    }
}

#[derive(Serialize, Deserialize)]
struct SavedState {
    engine: String,
    state: Value,
}

/// Why a compaction result could not be applied.
enum ApplyError {
    /// The result contradicts the session (the engine's fault).
    Invalid(String),
    /// Storing the summary failed (the host's fault).
    Host(Error),
}

impl ApplyError {
    /// The error the caller gets when this cannot be blamed on a (non-legacy) engine.
    fn into_host_error(self, engine: &str, what: &str) -> Error {
        match self {
            ApplyError::Host(e) => e,
            ApplyError::Invalid(m) => Error::Host(EngineError::new(
                Method::Compact,
                engine,
                EngineErrorKind::Host,
                format!("{what} produced a result the host cannot apply: {m}"),
            )),
        }
    }
}

fn invalid(info: &EngineInfo, method: Method, message: String) -> EngineError {
    invalid_for(&info.id, method, message)
}

fn invalid_for(engine: &str, method: Method, message: String) -> EngineError {
    EngineError::new(method, engine, EngineErrorKind::InvalidResult, message)
}

fn check_first_kept(
    r: &CompactResult,
    context: &[Arc<Message>],
) -> std::result::Result<(), String> {
    if let Some(out) = &r.result
        && let Some(id) = &out.first_kept_entry_id
        && !context.iter().any(|m| &m.id == id)
    {
        return Err(format!(
            "firstKeptEntryId \"{id}\" is not in the session context"
        ));
    }
    Ok(())
}

/// The context a transcript's entries stand for: the last compaction summary, the entries it
/// kept, and everything after it.
pub fn derive_context(entries: &[Arc<Message>]) -> Vec<Arc<Message>> {
    let Some(last) = entries
        .iter()
        .rposition(|m| m.role() == Role::CompactionSummary)
    else {
        return entries.to_vec();
    };
    let summary = &entries[last];
    let kept_from = match &summary.body {
        crate::message::MessageBody::CompactionSummary(s) => s
            .first_kept_entry_id
            .as_ref()
            .and_then(|id| entries[..last].iter().position(|m| &m.id == id)),
        _ => None,
    };
    let mut out = vec![Arc::clone(summary)];
    if let Some(i) = kept_from {
        out.extend(
            entries[i..last]
                .iter()
                .filter(|m| m.role() != Role::CompactionSummary)
                .cloned(),
        );
    }
    out.extend(entries[last + 1..].iter().cloned());
    out
}

fn write_atomic(path: &Path, bytes: &[u8]) -> Result<()> {
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(".tmp");
    let tmp = PathBuf::from(tmp);
    std::fs::write(&tmp, bytes).map_err(|e| Error::io("write engine state", &tmp, e))?;
    std::fs::rename(&tmp, path).map_err(|e| Error::io("replace engine state", path, e))
}

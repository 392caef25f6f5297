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

use std::path::Path;
use std::sync::Arc;

use serde::Serialize;
use serde_json::Value;

use crate::config::FailurePolicy;
use crate::contract::message::Message;
use crate::contract::{EngineInfo, ResultLimits};
use crate::engine::Quarantine;
use crate::engine::api::SessionServices;
use crate::engine::legacy::{LEGACY_ID, Legacy};
use crate::engine::{Engine, EngineCell, SpawnRollback};
use crate::error::{EngineError, Result};
use crate::services::compaction::CompactionSettings;
use crate::services::recall::RecallIndex;
use crate::services::summarize::Summarizer;
use crate::services::tokens::TokenCache;
use crate::store::jsonl::JsonlStore;
use crate::store::{Backend, Opened, SessionStore};
use crate::transcript::Durability;

pub(crate) mod checks;
mod client;
mod compact;
mod context;
mod dispatch;
pub(crate) mod state;
pub(crate) mod timed_summarizer;
mod turn;

pub(crate) use crate::engine::api::CallTimes;
pub use crate::engine::api::MethodTimes;
pub(crate) use checks::{check_assemble, check_compact};
pub(crate) use client::{CallExtras, ClientAssemble, SavedRecord};
pub(crate) use context::derive_context;
pub(crate) use state::state_path;

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
    /// How much engine time a turn may take.
    pub turn_budget: crate::config::TurnBudget,
    /// When transcript appends and the engine's state are forced to disk.
    pub durability: Durability,
    /// Built-in compaction knobs.
    pub compaction: CompactionSettings,
    /// Caps on engine results.
    pub limits: ResultLimits,
    /// Counts tokens.
    pub tokens: Arc<dyn crate::services::tokens::TokenCounter>,
    /// Summarizes for compaction and `host.summarize`.
    pub summarizer: Arc<dyn Summarizer>,
    /// The model behind `host.complete`, with its budgets.
    pub completions: Arc<crate::engine::api::Completions>,
    /// The configured engine (hot-reloadable), with its entry config.
    pub engine: Arc<EngineCell>,
    /// Where this host's engines are quarantined.
    pub quarantine: Arc<Quarantine>,
    /// Stops the engine's running call when set (see
    /// [`SessionSpec::cancel`](crate::runtime::SessionSpec::cancel)).
    pub cancel: Option<Arc<std::sync::atomic::AtomicBool>>,
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
    /// Ids of the messages the host put in that the engine's result left out (the current
    /// request, the newest summary; see [`crate::services::guarantee`]), so reports can tell them apart.
    pub host_added: Vec<String>,
    /// What the engine's assembly lacked and the host put back (see [`crate::services::guarantee`]).
    pub put_back: Vec<crate::services::guarantee::Violation>,
    /// What the call still lacks as sent, after those repairs (see [`crate::services::guarantee`]),
    /// judged once here so `replay`, `check` and `compare` need not judge it again.
    pub violations: Vec<crate::services::guarantee::Violation>,
    /// The engine's `contextProjection`, as it returned it (the `pipeline` engine reports
    /// there what each hook did in this call).
    pub projection: Option<serde_json::Value>,
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
    /// Time spent in the engine's lifecycle calls this turn, in ms.
    pub engine_ms: f64,
    /// Whether that time exceeded `host.turnBudget.engineMs`.
    pub slow: bool,
    /// Model calls whose assembly lacked the current request or the newest summary, which the
    /// host put back (see [`crate::services::guarantee`]).
    pub guarantee_repairs: usize,
}

/// A running session.
pub struct Session {
    id: Arc<str>,
    setup: SessionSetup,
    store: Box<dyn SessionStore>,
    /// The state the store last committed (the engine's, with a client's record), restored
    /// when the session reopens or follows a reload.
    saved: Option<Arc<Value>>,
    /// A turn ended since the last commit (counted by the next one).
    turn_ended: bool,
    /// Every change of the context goes through [`Session::set_context`] or
    /// [`Session::append`], which keep `summary_at` with it.
    context: Arc<Vec<Arc<Message>>>,
    /// Where the context's newest compaction summary is (kept with the context, so the
    /// guarantee check of every assembly does not walk the whole history to find it).
    summary_at: Option<usize>,
    /// Which context this is: a new number (from `generations`, never reused) whenever the
    /// context is replaced rather than appended to (the [`context::ContextIds`] index is
    /// built again then).
    context_generation: u64,
    /// Context generations handed out.
    generations: u64,
    /// The context's ids, for [`Session::context_holds_id`].
    context_ids: context::ContextIds,
    services: Arc<SessionServices>,
    /// Every stored message, indexed for `host.search` / `host.fetch` as it is appended.
    recall: Arc<RecallIndex>,
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
    /// The user message that started the current turn: every model call of the turn carries
    /// it, even after a compaction summarized it (see [`crate::services::guarantee`]).
    request: Option<Arc<Message>>,
    stats: TurnStats,
    rollbacks: Vec<SpawnRollback>,
    warned_noop_compact: bool,
    disposed: bool,
    /// Engine time of the turn in progress.
    turn_engine_time: std::time::Duration,
    /// Over-budget turns in a row.
    slow_strikes: u32,
    /// Per-method call times of this session's engine (and of the host's built-in compaction).
    call_times: CallTimes,
    /// The times of every summary the session's summarizer wrote, whoever asked for it.
    summary_times: Arc<parking_lot::Mutex<CallTimes>>,
    /// What the caller passed with the operation in progress, beyond what the session makes
    /// itself (see [`Session::with_extras`]).
    extras: Option<client::Extras>,
    /// A record the caller keeps with the engine's state (see [`Session::save_with_record`]).
    record: Option<SavedRecord>,
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

impl Session {
    /// Starts a new session in a new transcript file (the JSONL store).
    pub fn create(setup: SessionSetup, file: &Path, cwd: &str) -> Result<Session> {
        let opened = JsonlStore::create(file, &setup.id, cwd, setup.durability)?;
        Session::with_store(setup, opened)
    }

    /// Reopens a session from its transcript file (the JSONL store), restoring the engine's
    /// committed state; a turn a crash left uncommitted is set aside and a file a crash left
    /// empty or torn at its creation opens repaired ([`JsonlStore::open`]).
    pub fn open(setup: SessionSetup, file: &Path) -> Result<Session> {
        let opened = JsonlStore::open(file, &setup.id, setup.durability)?;
        Session::with_store(setup, opened)
    }

    /// Opens the session `setup.id` in `backend` (created empty, with `cwd`, when the backend
    /// does not hold it yet).
    pub fn in_backend(setup: SessionSetup, backend: &dyn Backend, cwd: &str) -> Result<Session> {
        let opened = backend.open(&setup.id, cwd)?;
        Session::with_store(setup, opened)
    }

    /// Starts a session over what any [`SessionStore`] opened (its committed messages and
    /// state): the seam for every storage backend and for an embedder's own.
    pub fn with_store(setup: SessionSetup, opened: Opened) -> Result<Session> {
        let Opened {
            store,
            messages,
            state,
        } = opened;
        let summary_times = Arc::new(parking_lot::Mutex::new(CallTimes::default()));
        let summarizer = setup
            .summarizer
            .for_session()
            .unwrap_or_else(|| Arc::clone(&setup.summarizer));
        let services = Arc::new(SessionServices {
            tokens: TokenCache::new(Arc::clone(&setup.tokens)),
            summarizer: Arc::new(timed_summarizer::TimedSummarizer::new(
                summarizer,
                Arc::clone(&summary_times),
            )),
            compaction: setup.compaction.clone(),
            limits: setup.limits.clone(),
            model: crate::engine::api::SessionModel::new(Arc::clone(&setup.completions)),
            host_times: Default::default(),
            cancel: setup.cancel.clone().unwrap_or_default(),
        });
        let context = Arc::new(derive_context(&messages));
        let summary_at = crate::services::guarantee::newest_summary_at(&context);
        let recall = Arc::new(RecallIndex::default());
        recall.add(&messages);
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
            request: None,
            stats: TurnStats::default(),
            rollbacks: Vec::new(),
            warned_noop_compact: false,
            disposed: false,
            turn_engine_time: std::time::Duration::ZERO,
            slow_strikes: 0,
            call_times: CallTimes::default(),
            summary_times,
            extras: None,
            record: None,
            services,
            recall,
            context,
            summary_at,
            context_generation: 0,
            generations: 0,
            context_ids: context::ContextIds::default(),
            store,
            saved: state.map(Arc::new),
            turn_ended: false,
            setup,
        };
        session.instantiate_engine()?;
        session.restore_state()?;
        Ok(session)
    }

    /// The user message that started the current turn (`None` before the first turn).
    pub fn current_request(&self) -> Option<&Arc<Message>> {
        self.request.as_ref()
    }

    /// The session id.
    pub fn id(&self) -> &str {
        &self.id
    }

    /// The transcript file, for stores that keep one (JSONL).
    pub fn file(&self) -> Option<&Path> {
        self.store.file()
    }

    /// Where the session is stored, for messages: the file, or the backend's name for it.
    pub fn location(&self) -> String {
        self.store.location()
    }

    /// Where the session stands in its store (the lifecycle context's `storageCursor`).
    pub fn storage_cursor(&self) -> crate::store::StorageCursor {
        self.store.cursor()
    }

    /// When the session was created and how many turns it committed, where the store knows.
    pub fn storage_meta(&self) -> crate::store::SessionMeta {
        self.store.meta()
    }

    /// Messages stored in the transcript (summaries included).
    pub fn transcript_len(&self) -> usize {
        self.store.len()
    }

    /// The configured engine's id.
    pub fn engine_id(&self) -> &str {
        &self.engine_id
    }

    /// The index `host.search` and `host.fetch` read: every message the session stored,
    /// compacted ones included.
    pub fn recall(&self) -> &Arc<RecallIndex> {
        &self.recall
    }

    /// The current context (what `assemble` receives).
    pub fn context(&self) -> &[Arc<Message>] {
        &self.context
    }

    /// The context's newest compaction summary, if it holds one.
    pub(crate) fn newest_summary(&self) -> Option<&Arc<Message>> {
        self.summary_at.and_then(|i| self.context.get(i))
    }

    /// Replaces the context (and finds its newest summary again).
    pub(super) fn set_context(&mut self, context: Vec<Arc<Message>>) {
        self.summary_at = crate::services::guarantee::newest_summary_at(&context);
        self.context = Arc::new(context);
        self.context_generation = self.new_generation();
    }

    /// A context generation never handed out before.
    pub(super) fn new_generation(&mut self) -> u64 {
        self.generations += 1;
        self.generations
    }

    /// Whether the current context holds a message with this id (never for an empty id):
    /// the cost of the messages appended since the last question, not of the context.
    pub(crate) fn context_holds_id(&mut self, id: &str) -> bool {
        self.context_ids
            .holds(self.context_generation, &self.context, id)
    }

    /// The context's tokens as the host counts them.
    pub fn context_tokens(&self) -> u64 {
        self.services.tokens.messages(&self.context)
    }

    /// Where this session's engine time went, per lifecycle method (`compact` includes the
    /// host's built-in compaction), with a row per summarizer (`BUILTIN_ROW`, `LLM_ROW`)
    /// for every summary written, whoever asked for it (time that is part of `compact` or of
    /// the `host.*` function that asked).
    pub fn call_times(&self) -> CallTimes {
        let mut times = self.call_times.clone();
        times.merge(&self.summary_times.lock());
        times
    }

    /// Where this session's scripts spent time in `host.*` functions (`host.summarize`,
    /// `host.tokens`, ...), per function.
    pub fn host_times(&self) -> CallTimes {
        self.services.host_times.lock().clone()
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
        let r = self
            .append(messages)
            .and_then(|stored| self.ingest_new(&stored, false));
        self.after_call(r)
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

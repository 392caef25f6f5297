//! The library's front door: a [`Host`] built from configuration that serves many sessions at
//! once. Lifecycle work runs on tokio's blocking pool, never on the async worker threads, so a
//! slow script cannot stall other sessions' I/O.
//!
//! ```no_run
//! # async fn demo() -> ctxhost::Result<()> {
//! use ctxhost::runtime::{Host, SessionSpec};
//! use ctxhost::session::TurnInput;
//! use ctxhost::contract::message::Message;
//! let host = Host::start(ctxhost::config::Config::default()).await?;
//! let session = host.create_session(SessionSpec::new("s1", "/tmp/s1.jsonl")).await?;
//! let ctx = session.begin_turn(TurnInput { user: Message::user("hi"), is_heartbeat: false }).await?;
//! // ... send ctx.messages to the model ...
//! session.end_turn(vec![Message::assistant("hello")]).await?;
//! # Ok(()) }
//! ```

mod handle;
mod load;
pub mod reload;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde_json::Value;

use crate::config::Config;
use crate::contract::LEGACY_ID;
use crate::engine::EngineCell;
use crate::engine::Quarantine;
use crate::engine::api::Completions;
use crate::engine::isolation::ChildCommand;
use crate::error::{EngineError, Error, Result};
use crate::services::llm::ModelClient;
use crate::services::summarize::Summarizer;
use crate::services::tokens::{self, TokenCounter};
use crate::session::{Session, SessionSetup};
pub use handle::SessionHandle;
use handle::blocking;
use load::load_entry;
pub use load::pipeline_spec;

/// Serves sessions with one configured engine.
#[derive(Debug)]
pub struct Host {
    config: Config,
    child_command: Option<ChildCommand>,
    tokens: Arc<dyn TokenCounter>,
    summarizer: Arc<dyn Summarizer>,
    completions: Arc<Completions>,
    quarantine: Arc<Quarantine>,
    engine: Arc<EngineCell>,
}

/// How to start a session.
#[derive(Clone, Debug)]
pub struct SessionSpec {
    /// The session id.
    pub id: String,
    /// Its transcript file.
    pub file: PathBuf,
    /// The system prompt, counted against the window.
    pub system_prompt: Option<String>,
    /// The model id.
    pub model: Option<String>,
    /// The working directory recorded in the transcript header.
    pub cwd: String,
    /// A flag the caller sets to stop the engine's running call (the script stops at its next
    /// step, a model call it waits on is dropped, the call fails as `Cancelled` and nothing is
    /// quarantined); the caller clears it before the next call. `ctxhost serve` sets it on a
    /// client's `$/cancelRequest`.
    pub cancel: Option<Arc<std::sync::atomic::AtomicBool>>,
}

impl SessionSpec {
    /// A session with no system prompt or model.
    pub fn new(id: impl Into<String>, file: impl Into<PathBuf>) -> Self {
        SessionSpec {
            id: id.into(),
            file: file.into(),
            system_prompt: None,
            model: None,
            cwd: String::new(),
            cancel: None,
        }
    }
}

/// What a [`Host`] is built from beside its configuration: the parts a config file cannot
/// name (the embedder's summarizer and model, the program engine children run as).
///
/// ```no_run
/// # fn demo() -> ctxhost::Result<()> {
/// use ctxhost::engine::isolation::ChildCommand;
/// let mut config = ctxhost::config::Config::default();
/// config.host.isolation = ctxhost::contract::limits::Isolation::Process;
/// let child = ChildCommand {
///     program: "/usr/local/bin/my-engine-child".into(),
///     args: Vec::new(),
///     env: Vec::new(),
/// };
/// let host = ctxhost::Host::builder(config).child_command(child).build()?;
/// # Ok(()) }
/// ```
#[derive(Debug)]
#[must_use]
pub struct HostBuilder {
    config: Config,
    summarizer: Option<Arc<dyn Summarizer>>,
    model: Option<Arc<dyn ModelClient>>,
    child_command: Option<ChildCommand>,
}

impl HostBuilder {
    /// The model that answers `host.complete` within `host.complete`'s budgets, and that
    /// `host.summarizer: {kind: "client"}` means (`serve` passes the client's model, asked
    /// with `llm.complete`). It is async: its futures are polled in a Tokio runtime context and
    /// dropped when the turn is cancelled.
    pub fn model(mut self, model: Option<Arc<dyn ModelClient>>) -> Self {
        self.model = model;
        self
    }

    /// The embedder's own summarizer in place of the one `host.summarizer` configures (which is
    /// then ignored). It may wrap the model: [`crate::services::llm::LlmSummarizer::with_client`]
    /// summarizes with one.
    pub fn summarizer(mut self, summarizer: Arc<dyn Summarizer>) -> Self {
        self.summarizer = Some(summarizer);
        self
    }

    /// The program `host.isolation: "process"` starts as each engine's child. By default it is
    /// this program with [`crate::engine::isolation::CHILD_ARG`], which the `ctxhost` CLI answers; an
    /// embedding program that answers it otherwise (or not at all) names its own.
    pub fn child_command(mut self, command: ChildCommand) -> Self {
        self.child_command = Some(command);
        self
    }

    /// Builds the host: picks the counter, loads the configured engine once. This blocks (BPE
    /// tables, VM boot): inside an async runtime use [`HostBuilder::start`]. An engine that
    /// fails to load is quarantined, and its sessions answer from `legacy` (or fail, when
    /// strict).
    pub fn build(self) -> Result<Host> {
        let HostBuilder {
            config,
            summarizer,
            model,
            child_command,
        } = self;
        let (summarizer, model) = match summarizer {
            Some(own) => (own, model),
            None => crate::services::llm::configured(&config.host.summarizer, model)?,
        };
        Host::from_parts(config, summarizer, model, child_command)
    }

    /// [`HostBuilder::build`] on tokio's blocking pool: building a host reads BPE tables and
    /// boots the engine's VM, which must not stall an async worker thread.
    pub async fn start(self) -> Result<Host> {
        blocking(move || self.build()).await?
    }
}

impl Host {
    /// A builder for a host with more than its configuration (see [`HostBuilder`]).
    pub fn builder(config: Config) -> HostBuilder {
        HostBuilder {
            config,
            summarizer: None,
            model: None,
            child_command: None,
        }
    }

    /// Builds a host from its configuration alone: picks the counter, loads the configured
    /// engine once. This blocks (BPE tables, VM boot): inside an async runtime use
    /// [`Host::start`]. An engine that fails to load is quarantined, and its sessions answer
    /// from `legacy` (or fail, when strict).
    pub fn new(config: Config) -> Result<Host> {
        Host::builder(config).build()
    }

    /// [`Host::new`] where `host.summarizer: {kind: "client"}` means `model` (`serve` passes
    /// the client's model, asked with `llm.complete`).
    pub fn with_client_model(config: Config, model: Option<Arc<dyn ModelClient>>) -> Result<Host> {
        Host::builder(config).model(model).build()
    }

    /// [`Host::new`] with the embedder's own summarizer in place of the one `host.summarizer`
    /// configures (which is then ignored), and no model for `host.complete`.
    pub fn with_summarizer(config: Config, summarizer: Arc<dyn Summarizer>) -> Result<Host> {
        Host::builder(config).summarizer(summarizer).build()
    }

    /// A host with the embedder's own summarizer and model client (`host.summarizer` is then
    /// ignored): `model` answers `host.complete` within `host.complete`'s budgets. Both are
    /// async (their futures are polled in a Tokio runtime context and dropped when the turn is
    /// cancelled). Either may wrap the other: [`crate::services::llm::LlmSummarizer::with_client`]
    /// summarizes with a model.
    pub fn with_parts(
        config: Config,
        summarizer: Arc<dyn Summarizer>,
        model: Option<Arc<dyn ModelClient>>,
    ) -> Result<Host> {
        Host::builder(config)
            .summarizer(summarizer)
            .model(model)
            .build()
    }

    fn from_parts(
        config: Config,
        summarizer: Arc<dyn Summarizer>,
        model: Option<Arc<dyn ModelClient>>,
        child_command: Option<ChildCommand>,
    ) -> Result<Host> {
        let completions = Arc::new(Completions::new(model, config.host.complete));
        let tokens = tokens::counter(config.host.tokenizer)?;
        let quarantine = Arc::new(Quarantine::default());
        let (entry, engine, engine_config) = match config.engine_entry() {
            None => (LEGACY_ID, None, Value::Null),
            Some((id, entry)) if !entry.enabled => {
                tracing::warn!(engine = id, "the slot names a disabled entry; using legacy");
                (LEGACY_ID, None, Value::Null)
            }
            Some((id, entry)) => {
                let loaded = load_entry(&config, child_command.as_ref(), id, entry);
                if let Err(e) = &loaded {
                    quarantine.record(id, e);
                }
                (id, Some(loaded), entry.config.clone())
            }
        };
        if let Some(id) = config.plugins.slots.context_engine.as_deref()
            && id != LEGACY_ID
            && id != crate::config::PIPELINE_ID
            && !config.plugins.entries.contains_key(id)
        {
            tracing::warn!(engine = id, "the slot names a missing entry; using legacy");
        }
        let engine = Arc::new(EngineCell::new(entry, engine, Arc::new(engine_config)));
        Ok(Host {
            config,
            child_command,
            tokens,
            summarizer,
            completions,
            quarantine,
            engine,
        })
    }

    /// [`Host::new`] on tokio's blocking pool: building a host reads BPE tables and boots the
    /// engine's VM, which must not stall an async worker thread.
    pub async fn start(config: Config) -> Result<Host> {
        blocking(move || Host::new(config)).await?
    }

    /// [`Host::with_client_model`] on tokio's blocking pool (see [`Host::start`]).
    pub async fn start_with_client_model(
        config: Config,
        model: Option<Arc<dyn ModelClient>>,
    ) -> Result<Host> {
        blocking(move || Host::with_client_model(config, model)).await?
    }

    /// The configuration the host was built from.
    pub fn config(&self) -> &Config {
        &self.config
    }

    /// Engines quarantined in this host.
    pub fn quarantine(&self) -> &Arc<Quarantine> {
        &self.quarantine
    }

    /// The configured engine's id (`legacy` when none).
    pub fn engine_id(&self) -> String {
        match &self.engine.current().engine {
            None => LEGACY_ID.to_owned(),
            Some(Ok(f)) => f.info().id.clone(),
            Some(Err(e)) => e.engine.clone(),
        }
    }

    /// The configured entry id the engine is quarantined under (`legacy` when none).
    pub fn entry_id(&self) -> String {
        self.engine.entry().to_string()
    }

    /// The current engine's first failure, when it is quarantined.
    pub fn engine_failure(&self) -> Option<EngineError> {
        self.quarantine.first_failure(&self.engine.entry())
    }

    /// The current engine, if one is configured.
    pub fn engine(&self) -> crate::engine::LoadedEngine {
        self.engine.current().engine
    }

    /// The engine cell sessions follow (for reloads).
    pub fn engine_cell(&self) -> &Arc<EngineCell> {
        &self.engine
    }

    /// Loads the configured engine file again and, when it loads and validates, swaps it in
    /// for every session's next turn and lifts its quarantine. On failure the running version
    /// stays and the error (with file:line) is returned.
    pub fn reload_engine(&self) -> Result<u64> {
        let Some((id, entry)) = self.config.engine_entry() else {
            return Err(Error::Config {
                place: "plugins.slots.contextEngine".into(),
                message: "no engine is configured in the slot, so there is nothing to reload"
                    .into(),
            });
        };
        let factory = load_entry(&self.config, self.child_command.as_ref(), id, entry)?;
        let generation = self.engine.swap(factory, Arc::new(entry.config.clone()));
        if let Some(lifted) = self.quarantine.lift(id) {
            tracing::info!(engine = id, "reload lifted the quarantine ({lifted})");
        }
        Ok(generation)
    }

    /// Reloads one hook of the `pipeline` engine from its file and, when it loads and
    /// validates, swaps it in alone: each session's instance of that hook follows at its next
    /// turn with its state carried over, and the other hooks keep their instances and state
    /// (the engine's generation does not move). On failure the running version stays and the
    /// error (with file:line) is returned. Returns the hook's new generation.
    pub fn reload_hook(&self, hook: &str) -> Result<u64> {
        let generation = self.with_pipeline(|p| Ok(p.reload_hook(hook)?))?;
        tracing::info!(hook, generation, "pipeline hook reloaded");
        Ok(generation)
    }

    /// Whether the host serves a loaded `pipeline` engine (whose hooks reload one by one).
    pub fn serves_pipeline(&self) -> bool {
        self.with_pipeline(|_| Ok(())).is_ok()
    }

    /// The hook files of the `pipeline` engine the host serves, with their hook ids (what a
    /// watcher follows); an error when the host serves no loaded pipeline.
    pub fn hook_files(&self) -> Result<Vec<(String, PathBuf)>> {
        self.with_pipeline(|p| Ok(p.hook_files()))
    }

    /// The current generation of pipeline hook `hook` (0 until it is reloaded alone).
    pub fn hook_generation(&self, hook: &str) -> Result<u64> {
        self.with_pipeline(|p| {
            p.hooks()
                .into_iter()
                .find(|h| h.id == hook)
                .map(|h| h.status.generation)
                .ok_or_else(|| Error::Config {
                    place: "host.pipeline.hooks".into(),
                    message: format!("the pipeline has no hook \"{hook}\""),
                })
        })
    }

    /// Runs `f` on the loaded `pipeline` engine the host serves.
    fn with_pipeline<T>(
        &self,
        f: impl FnOnce(&crate::engine::pipeline::PipelineFactory) -> Result<T>,
    ) -> Result<T> {
        let engine = self.engine.current().engine;
        let Some(Ok(factory)) = engine else {
            return Err(Error::Config {
                place: "plugins.slots.contextEngine".into(),
                message: "the host serves no loaded pipeline, so it has no hook to reload".into(),
            });
        };
        let Some(pipeline) = factory.pipeline() else {
            return Err(Error::Config {
                place: "plugins.slots.contextEngine".into(),
                message: format!(
                    "the host serves engine \"{}\", not the pipeline; reload the engine instead",
                    factory.info().id
                ),
            });
        };
        f(pipeline)
    }

    /// What a session of this host is built from (for driving a [`Session`] synchronously).
    pub fn session_setup(&self, spec: &SessionSpec) -> SessionSetup {
        let h = &self.config.host;
        SessionSetup {
            id: spec.id.clone(),
            window: h.window,
            system_prompt: spec.system_prompt.clone(),
            model: spec.model.clone(),
            failure_policy: h.failure_policy,
            durability: h.durability,
            turn_budget: h.turn_budget.clone(),
            compaction: h.compaction.clone(),
            limits: h.limits.script.results.clone(),
            tokens: Arc::clone(&self.tokens),
            summarizer: Arc::clone(&self.summarizer),
            completions: Arc::clone(&self.completions),
            engine: Arc::clone(&self.engine),
            quarantine: Arc::clone(&self.quarantine),
            cancel: spec.cancel.clone(),
        }
    }

    /// Starts a session in a new transcript file.
    pub async fn create_session(&self, spec: SessionSpec) -> Result<SessionHandle> {
        let setup = self.session_setup(&spec);
        let session = blocking(move || Session::create(setup, &spec.file, &spec.cwd)).await??;
        Ok(SessionHandle::new(session))
    }

    /// Reopens a session from its transcript file (engine state restored).
    pub async fn open_session(&self, spec: SessionSpec) -> Result<SessionHandle> {
        let setup = self.session_setup(&spec);
        let session = blocking(move || Session::open(setup, &spec.file)).await??;
        Ok(SessionHandle::new(session))
    }

    /// Opens the session `spec.id` in `backend` (engine state restored), creating it empty
    /// when the backend does not hold it yet; `spec.file` is not used.
    pub async fn open_in(
        &self,
        backend: Arc<dyn crate::store::Backend>,
        spec: SessionSpec,
    ) -> Result<SessionHandle> {
        let setup = self.session_setup(&spec);
        let session =
            blocking(move || Session::in_backend(setup, backend.as_ref(), &spec.cwd)).await??;
        Ok(SessionHandle::new(session))
    }
}

/// Whether a path names a file the host can load as an engine.
pub fn is_engine_file(path: &Path) -> bool {
    matches!(
        path.extension().and_then(|e| e.to_str()),
        Some("lua" | "luau" | "rhai")
    )
}

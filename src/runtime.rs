//! The library's front door: a [`Host`] built from configuration that serves many sessions at
//! once. Lifecycle work runs on tokio's blocking pool, never on the async worker threads, so a
//! slow script cannot stall other sessions' I/O.
//!
//! ```no_run
//! # async fn demo() -> ctxhost::Result<()> {
//! use ctxhost::runtime::{Host, SessionSpec};
//! use ctxhost::session::TurnInput;
//! use ctxhost::message::Message;
//! let host = Host::new(ctxhost::config::Config::default())?;
//! let session = host.create_session(SessionSpec::new("s1", "/tmp/s1.jsonl")).await?;
//! let ctx = session.begin_turn(TurnInput { user: Message::user("hi"), is_heartbeat: false }).await?;
//! // ... send ctx.messages to the model ...
//! session.end_turn(vec![Message::assistant("hello")]).await?;
//! # Ok(()) }
//! ```

use std::path::{Path, PathBuf};
use std::sync::Arc;

use parking_lot::Mutex;
use serde_json::Value;

use crate::config::Config;
use crate::contract::CompactResult;
use crate::error::{EngineError, EngineErrorKind, Error, Result};
use crate::message::Message;
use crate::quarantine::Quarantine;
use crate::reload::EngineCell;
use crate::session::{Assembly, Session, SessionSetup, TurnInput, TurnStats};
use crate::summarize::{BuiltinSummarizer, Summarizer};
use crate::tokens::{self, TokenCounter};

/// Serves sessions with one configured engine.
#[derive(Debug)]
pub struct Host {
    config: Config,
    tokens: Arc<dyn TokenCounter>,
    summarizer: Arc<dyn Summarizer>,
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
        }
    }
}

impl Host {
    /// Builds a host: picks the counter, loads the configured engine once. An engine that fails
    /// to load is quarantined, and its sessions answer from `legacy` (or fail, when strict).
    pub fn new(config: Config) -> Result<Host> {
        let tokens = tokens::counter(config.host.tokenizer)?;
        let quarantine = Arc::new(Quarantine::default());
        let (engine, engine_config) = match config.engine_entry() {
            None => (None, Value::Null),
            Some((id, entry)) if !entry.enabled => {
                tracing::warn!(engine = id, "the slot names a disabled entry; using legacy");
                (None, Value::Null)
            }
            Some((id, entry)) => {
                let loaded = match &entry.path {
                    Some(p) => crate::engine::load(id, &config.resolve(p), &entry.config, &config),
                    None => Err(EngineError::new(
                        crate::error::Op::Load,
                        id,
                        EngineErrorKind::MissingFile,
                        "the entry has no `path`",
                    )),
                };
                if let Err(e) = &loaded {
                    quarantine.record(e);
                }
                (Some(loaded), entry.config.clone())
            }
        };
        if let Some(id) = config.plugins.slots.context_engine.as_deref()
            && id != crate::engine::legacy::LEGACY_ID
            && !config.plugins.entries.contains_key(id)
        {
            tracing::warn!(engine = id, "the slot names a missing entry; using legacy");
        }
        Ok(Host {
            config,
            tokens,
            summarizer: Arc::new(BuiltinSummarizer),
            quarantine,
            engine: Arc::new(EngineCell::new(engine, Arc::new(engine_config))),
        })
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
            None => crate::engine::legacy::LEGACY_ID.to_owned(),
            Some(Ok(f)) => f.info().id.clone(),
            Some(Err(e)) => e.engine.clone(),
        }
    }

    /// The current engine, if one is configured.
    pub fn engine(&self) -> crate::reload::LoadedEngine {
        self.engine.current().engine
    }

    /// The engine cell sessions follow (for reloads).
    pub fn engine_cell(&self) -> &Arc<EngineCell> {
        &self.engine
    }

    /// Loads the configured engine file again and, when it loads and validates, swaps it in
    /// for every session's next turn and lifts its quarantine. On failure the running version
    /// stays and the error (with file:line) is returned.
    pub fn reload_engine(&self) -> std::result::Result<u64, EngineError> {
        let Some((id, entry)) = self.config.engine_entry() else {
            return Err(EngineError::new(
                crate::error::Op::Reload,
                crate::engine::legacy::LEGACY_ID,
                EngineErrorKind::Contract,
                "no engine is configured in the slot",
            ));
        };
        let path = entry.path.as_ref().ok_or_else(|| {
            EngineError::new(
                crate::error::Op::Reload,
                id,
                EngineErrorKind::MissingFile,
                "the entry has no `path`",
            )
        })?;
        let factory =
            crate::engine::load(id, &self.config.resolve(path), &entry.config, &self.config)?;
        let generation = self.engine.swap(factory, Arc::new(entry.config.clone()));
        if let Some(lifted) = self.quarantine.lift(id) {
            tracing::info!(engine = id, "reload lifted the quarantine ({lifted})");
        }
        Ok(generation)
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
            compaction: h.compaction.clone(),
            limits: h.limits.script.results.clone(),
            tokens: Arc::clone(&self.tokens),
            summarizer: Arc::clone(&self.summarizer),
            engine: Arc::clone(&self.engine),
            quarantine: Arc::clone(&self.quarantine),
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
}

/// A shared handle on a running session; calls run on the blocking pool, one at a time.
#[derive(Clone, Debug)]
pub struct SessionHandle {
    inner: Arc<Mutex<Session>>,
}

impl SessionHandle {
    fn new(session: Session) -> Self {
        SessionHandle {
            inner: Arc::new(Mutex::new(session)),
        }
    }

    /// Runs `f` on the session off the async threads.
    pub async fn with<R: Send + 'static>(
        &self,
        f: impl FnOnce(&mut Session) -> R + Send + 'static,
    ) -> Result<R> {
        let inner = Arc::clone(&self.inner);
        blocking(move || f(&mut inner.lock())).await
    }

    /// Starts a turn and returns what the model sees.
    pub async fn begin_turn(&self, input: TurnInput) -> Result<Assembly> {
        self.with(move |s| s.begin_turn(input)).await?
    }

    /// The tool loop: store the model's tool calls and the tools' results, assemble again.
    pub async fn continue_turn(&self, messages: Vec<Message>) -> Result<Assembly> {
        self.with(move |s| s.continue_turn(messages)).await?
    }

    /// Ends the turn with the model's (and tools') messages.
    pub async fn end_turn(&self, replies: Vec<Message>) -> Result<TurnStats> {
        self.with(move |s| s.end_turn(replies)).await?
    }

    /// `/compact`.
    pub async fn compact(&self, instructions: Option<String>) -> Result<CompactResult> {
        self.with(move |s| s.compact_now(instructions)).await?
    }

    /// Appends and ingests messages outside a turn.
    pub async fn record(&self, messages: Vec<Message>) -> Result<()> {
        self.with(move |s| s.record(messages)).await?
    }

    /// Saves state and retires the engine instance.
    pub async fn close(&self) -> Result<()> {
        self.with(|s| s.close()).await?
    }

    /// The transcript file.
    pub fn file(&self) -> PathBuf {
        self.inner.lock().file().to_path_buf()
    }
}

async fn blocking<R: Send + 'static>(f: impl FnOnce() -> R + Send + 'static) -> Result<R> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| Error::Session {
            session: String::new(),
            message: format!("session task failed: {e}"),
        })
}

/// Whether a path names a file the host can load as an engine.
pub fn is_engine_file(path: &Path) -> bool {
    matches!(
        path.extension().and_then(|e| e.to_str()),
        Some("lua" | "luau" | "rhai")
    )
}

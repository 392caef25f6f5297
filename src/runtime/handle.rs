//! A running session behind a shared async handle: each call runs on tokio's blocking pool,
//! one at a time, and the last handle dropped retires the engine instance off the async threads.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use parking_lot::Mutex;

use crate::contract::CompactResult;
use crate::contract::message::Message;
use crate::error::{Error, Result};
use crate::session::{Assembly, Session, TurnInput, TurnStats};

/// A shared handle on a running session; calls run on the blocking pool, one at a time.
/// Dropping the last handle retires the engine instance (`dispose`) on the blocking pool too,
/// so it never blocks an async thread.
#[derive(Clone, Debug)]
pub struct SessionHandle {
    inner: Arc<Shared>,
    file: Option<Arc<Path>>,
}

/// The session behind every clone of one handle.
#[derive(Debug)]
struct Shared {
    session: Mutex<Option<Session>>,
}

impl Drop for Shared {
    fn drop(&mut self) {
        let Some(session) = self.session.get_mut().take() else {
            return;
        };
        // Retiring runs the engine's `dispose` on its VM: keep it off the async threads.
        match tokio::runtime::Handle::try_current() {
            Ok(runtime) => drop(runtime.spawn_blocking(move || drop(session))),
            Err(_) => drop(session),
        }
    }
}

impl SessionHandle {
    pub(super) fn new(session: Session) -> Self {
        SessionHandle {
            file: session.file().map(Arc::from),
            inner: Arc::new(Shared {
                session: Mutex::new(Some(session)),
            }),
        }
    }

    /// Runs `f` on the session off the async threads.
    pub async fn with<R: Send + 'static>(
        &self,
        f: impl FnOnce(&mut Session) -> R + Send + 'static,
    ) -> Result<R> {
        let handle = self.clone();
        blocking(move || handle.with_here(f)).await?
    }

    /// [`SessionHandle::with`] on the calling thread, for a caller that may block it (a
    /// worker of a multi-thread runtime inside `tokio::task::block_in_place`): no hand-off
    /// to a blocking thread and back (two thread wake-ups per call).
    pub fn with_here<R>(&self, f: impl FnOnce(&mut Session) -> R) -> Result<R> {
        self.inner
            .session
            .lock()
            .as_mut()
            .map(f)
            .ok_or(Error::Task {
                task: "session call",
                message: "the session was dropped".into(),
            })
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

    /// The transcript file, for stores that keep one (JSONL).
    pub fn file(&self) -> Option<PathBuf> {
        self.file.as_deref().map(Path::to_path_buf)
    }
}

pub(super) async fn blocking<R: Send + 'static>(
    f: impl FnOnce() -> R + Send + 'static,
) -> Result<R> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| Error::Task {
            task: "session call",
            message: e.to_string(),
        })
}

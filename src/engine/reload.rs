//! Hot reload: the current engine of a host, swapped as a whole between turns.
//!
//! An [`EngineCell`](crate::engine::EngineCell) holds the loaded engine and a generation number. A reload loads and
//! validates the new file off the hot path and, only if that succeeds, swaps it in and bumps the
//! generation (an invalid new version leaves the old one serving). Sessions compare generations
//! at turn boundaries, never inside a turn: the old instance's state is saved, it is disposed,
//! the new instance is made and the state restored, so a turn never sees two versions.
//!
//! An [`EngineWatcher`] drives reloads from the file system: it watches the engine file's
//! directory, debounces bursts of writes, runs one reload at a time on the blocking pool and
//! reports each [`ReloadOutcome`] (the new generation, or the error with file:line while the
//! old version keeps serving).

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use notify::{EventKind, RecommendedWatcher, RecursiveMode};
use notify_debouncer_full::{
    DebounceEventResult, DebouncedEvent, Debouncer, RecommendedCache, new_debouncer,
};
use tokio::sync::mpsc;

use crate::error::{Error, Result};
use crate::runtime::Host;

// ---------------------------------------------------------------------------------------------
// The watcher: file change -> debounce -> one reload task -> outcome channel.
// ---------------------------------------------------------------------------------------------

/// How long a file must be quiet before a reload (editors write in bursts).
pub const DEFAULT_DEBOUNCE: Duration = Duration::from_millis(200);

/// The shortest debounce: below it a save's burst of writes would reload several times.
const MIN_DEBOUNCE: Duration = Duration::from_millis(5);
/// The debouncer's tick at most: a change is released within this of the debounce.
const MAX_TICK: Duration = Duration::from_millis(10);

/// One reload caused by a change of the engine file, for the author to read.
#[derive(Clone, Debug)]
pub struct ReloadOutcome {
    /// The engine file that changed.
    pub path: PathBuf,
    /// The new generation number, or why the new version was refused (with file:line when the
    /// script is at fault); on an error the previous generation keeps serving.
    pub result: Result<u64, Arc<Error>>,
    /// When the watcher first saw a change of this batch.
    pub changed_at: Instant,
    /// When the debounce released the batch (quiet for the debounce time).
    pub debounced_at: Instant,
    /// When the reload finished: the new generation is visible to every session's next turn.
    pub finished_at: Instant,
}

impl ReloadOutcome {
    /// Save-to-active latency: first change seen → new generation visible.
    pub fn since_change(&self) -> Duration {
        self.finished_at.saturating_duration_since(self.changed_at)
    }

    /// The part of the latency after the debounce: load, validate and swap.
    pub fn after_debounce(&self) -> Duration {
        self.finished_at
            .saturating_duration_since(self.debounced_at)
    }
}

/// A debounced batch of changes to the engine file, sent by the notify thread.
#[derive(Clone, Copy, Debug)]
struct Trigger {
    changed_at: Instant,
    debounced_at: Instant,
}

/// Watches one engine file and reloads it on every save, off the async threads.
///
/// The parent directory is watched, not the file: editors that save by writing a temporary
/// file and renaming it over the original replace the inode, which a watch on the file would
/// lose. Events are filtered to the engine path, debounced, and handed to a single reload task,
/// so reloads never overlap; each outcome arrives on [`EngineWatcher::next_outcome`]. Dropping
/// the watcher stops both the notify thread and the task.
///
/// ```no_run
/// # async fn demo(host: std::sync::Arc<ctxhost::runtime::Host>) -> ctxhost::Result<()> {
/// use ctxhost::engine::reload::{EngineWatcher, DEFAULT_DEBOUNCE};
/// let mut watcher = EngineWatcher::for_host(host, DEFAULT_DEBOUNCE)?;
/// while let Some(outcome) = watcher.next_outcome().await {
///     match outcome.result {
///         Ok(generation) => eprintln!("generation {generation} active"),
///         Err(e) => eprintln!("kept the running version: {e}"),
///     }
/// }
/// # Ok(()) }
/// ```
pub struct EngineWatcher {
    path: PathBuf,
    debounce: Duration,
    outcomes: mpsc::UnboundedReceiver<ReloadOutcome>,
    task: tokio::task::JoinHandle<()>,
    _debouncer: Debouncer<RecommendedWatcher, RecommendedCache>,
}

impl std::fmt::Debug for EngineWatcher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EngineWatcher")
            .field("path", &self.path)
            .field("debounce", &self.debounce)
            .finish_non_exhaustive()
    }
}

impl EngineWatcher {
    /// Watches the host's configured engine file and runs [`Host::reload_engine`] on each save.
    /// Must be called inside a tokio runtime.
    pub fn for_host(host: Arc<Host>, debounce: Duration) -> Result<EngineWatcher> {
        let config = host.config();
        let path = match config.engine_entry() {
            Some((_, entry)) if entry.enabled => entry.path.as_deref().map(|p| config.resolve(p)),
            _ => None,
        };
        let Some(path) = path else {
            return Err(Error::Config {
                place: "plugins.slots.contextEngine".into(),
                message: "no enabled engine with a `path` to watch".into(),
            });
        };
        Self::new(&path, debounce, move || host.reload_engine())
    }

    /// Watches `path` and calls `reload` (on tokio's blocking pool, one call at a time) after
    /// each debounced batch of changes. Must be called inside a tokio runtime.
    pub fn new<F>(path: &Path, debounce: Duration, reload: F) -> Result<EngineWatcher>
    where
        F: Fn() -> Result<u64> + Send + Sync + 'static,
    {
        let runtime = tokio::runtime::Handle::try_current().map_err(|e| Error::NoRuntime {
            what: "the engine watcher",
            message: e.to_string(),
        })?;
        let path = std::path::absolute(path).map_err(|e| Error::io("watch engine", path, e))?;
        let (Some(dir), Some(name)) = (path.parent(), path.file_name()) else {
            return Err(Error::io(
                "watch engine",
                &path,
                std::io::Error::other("not a file path"),
            ));
        };
        // Events carry the watched directory's path as notify resolved it; compare against the
        // canonical directory so symlinked temp dirs (macOS /var -> /private/var) still match.
        let dir = dir
            .canonicalize()
            .map_err(|e| Error::io("watch engine directory", dir, e))?;
        let target = dir.join(name);
        let literal = path.clone();

        let (trigger_tx, trigger_rx) = mpsc::unbounded_channel::<Trigger>();
        let handler = move |result: DebounceEventResult| match result {
            Ok(events) => {
                let changed_at = events
                    .iter()
                    .filter(|e| touches(e, &target, &literal))
                    .map(|e| e.time)
                    .min();
                if let Some(changed_at) = changed_at {
                    let _ = trigger_tx.send(Trigger {
                        changed_at,
                        debounced_at: Instant::now(),
                    });
                }
            }
            Err(errors) => {
                for e in errors {
                    tracing::warn!("engine watcher: {e}");
                }
            }
        };
        // The debouncer checks for quiet files every tick (by default a quarter of the
        // debounce, 50 ms at 200 ms); a finer tick keeps the latency close to the debounce.
        let debounce = debounce.max(MIN_DEBOUNCE);
        let tick = (debounce / 4).min(MAX_TICK);
        let mut debouncer = new_debouncer(debounce, Some(tick), handler)
            .map_err(|e| Error::io("watch engine directory", &dir, std::io::Error::other(e)))?;
        debouncer
            .watch(&dir, RecursiveMode::NonRecursive)
            .map_err(|e| Error::io("watch engine directory", &dir, std::io::Error::other(e)))?;

        let (outcome_tx, outcomes) = mpsc::unbounded_channel();
        let task = runtime.spawn(reload_task(
            path.clone(),
            Arc::new(reload),
            trigger_rx,
            outcome_tx,
        ));
        Ok(EngineWatcher {
            path,
            debounce,
            outcomes,
            task,
            _debouncer: debouncer,
        })
    }

    /// The watched engine file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The quiet time before a reload.
    pub fn debounce(&self) -> Duration {
        self.debounce
    }

    /// Waits for the next reload outcome (`None` once the watcher has stopped).
    pub async fn next_outcome(&mut self) -> Option<ReloadOutcome> {
        self.outcomes.recv().await
    }

    /// The next outcome if one is already waiting.
    pub fn try_next_outcome(&mut self) -> Option<ReloadOutcome> {
        self.outcomes.try_recv().ok()
    }
}

impl Drop for EngineWatcher {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Whether a debounced event concerns the engine file (access events, including our own read
/// of the file during a reload, do not).
fn touches(event: &DebouncedEvent, target: &Path, literal: &Path) -> bool {
    !matches!(event.kind, EventKind::Access(_))
        && event.paths.iter().any(|p| p == target || p == literal)
}

/// The one task that reloads: batches that arrived while a reload ran are merged into one.
async fn reload_task(
    path: PathBuf,
    reload: Arc<dyn Fn() -> Result<u64> + Send + Sync>,
    mut triggers: mpsc::UnboundedReceiver<Trigger>,
    outcomes: mpsc::UnboundedSender<ReloadOutcome>,
) {
    while let Some(mut trigger) = triggers.recv().await {
        while let Ok(more) = triggers.try_recv() {
            trigger.changed_at = trigger.changed_at.min(more.changed_at);
            trigger.debounced_at = more.debounced_at;
        }
        let reload = Arc::clone(&reload);
        let result = match tokio::task::spawn_blocking(move || reload()).await {
            Ok(r) => r.map_err(Arc::new),
            Err(e) => Err(Arc::new(Error::Task {
                task: "engine reload",
                message: e.to_string(),
            })),
        };
        // Logged at info: the outcome goes to the caller, who decides how loudly to report it.
        match &result {
            Ok(g) => tracing::info!(file = %path.display(), generation = g, "engine reloaded"),
            Err(e) => {
                tracing::info!(file = %path.display(), "reload refused, old version kept: {e}")
            }
        }
        let outcome = ReloadOutcome {
            path: path.clone(),
            result,
            changed_at: trigger.changed_at,
            debounced_at: trigger.debounced_at,
            finished_at: Instant::now(),
        };
        if outcomes.send(outcome).is_err() {
            return;
        }
    }
}

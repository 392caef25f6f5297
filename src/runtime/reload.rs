//! Hot reload: the current engine of a host, swapped as a whole between turns.
//!
//! An `EngineCell` holds the loaded engine and a generation number. A reload loads and
//! validates the new file off the hot path and, only if that succeeds, swaps it in and bumps the
//! generation (an invalid new version leaves the old one serving). Sessions compare generations
//! at turn boundaries, never inside a turn: the old instance's state is saved, it is disposed,
//! the new instance is made and the state restored, so a turn never sees two versions.
//!
//! An [`EngineWatcher`] drives reloads from the file system: it watches the engine file's
//! directory, debounces bursts of writes, runs one reload at a time on the blocking pool and
//! reports each [`ReloadOutcome`] (the new generation, or the error with file:line while the
//! old version keeps serving). For the `pipeline` engine it watches every hook file instead,
//! and a save reloads that hook alone ([`Host::reload_hook`]): the other hooks keep their
//! instances and state.

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
    /// The pipeline hook that file is, when it is one: only that hook was reloaded, and the
    /// generation is the hook's own. `None` for an engine file.
    pub hook: Option<String>,
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

/// A debounced batch of changes to one watched file, sent by the notify thread.
#[derive(Clone, Copy, Debug)]
struct Trigger {
    /// The index of the file among the watcher's targets.
    target: usize,
    changed_at: Instant,
    debounced_at: Instant,
}

/// What a reload runs: the new generation, or why the new version was refused.
pub type Reload = Arc<dyn Fn() -> Result<u64> + Send + Sync>;

/// One file an [`EngineWatcher`] follows and what a save of it reloads.
#[derive(Clone)]
pub struct WatchTarget {
    /// The file.
    pub path: PathBuf,
    /// The pipeline hook it is (`None`: the engine file).
    pub hook: Option<String>,
    /// Run (on the blocking pool, one reload at a time) after each debounced save.
    pub reload: Reload,
}

impl std::fmt::Debug for WatchTarget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WatchTarget")
            .field("path", &self.path)
            .field("hook", &self.hook)
            .finish_non_exhaustive()
    }
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
/// use ctxhost::runtime::reload::{EngineWatcher, DEFAULT_DEBOUNCE};
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
    paths: Vec<PathBuf>,
    debounce: Duration,
    outcomes: mpsc::UnboundedReceiver<ReloadOutcome>,
    task: tokio::task::JoinHandle<()>,
    _debouncer: Debouncer<RecommendedWatcher, RecommendedCache>,
}

impl std::fmt::Debug for EngineWatcher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EngineWatcher")
            .field("paths", &self.paths)
            .field("debounce", &self.debounce)
            .finish_non_exhaustive()
    }
}

impl EngineWatcher {
    /// Watches the host's configured engine file and runs [`Host::reload_engine`] on each save;
    /// for the `pipeline` engine, every hook file, each save reloading that hook alone
    /// ([`EngineWatcher::for_hooks`]). Must be called inside a tokio runtime.
    pub fn for_host(host: Arc<Host>, debounce: Duration) -> Result<EngineWatcher> {
        let config = host.config();
        let path = match config.engine_entry() {
            Some((_, entry)) if entry.enabled => entry.path.as_deref().map(|p| config.resolve(p)),
            _ => None,
        };
        if let Some(path) = path {
            return Self::new(&path, debounce, move || host.reload_engine());
        }
        if host.serves_pipeline() {
            return Self::for_hooks(host, debounce);
        }
        Err(Error::Config {
            place: "plugins.slots.contextEngine".into(),
            message: "no enabled engine with a `path` to watch".into(),
        })
    }

    /// Watches every hook file of the host's `pipeline` engine; a save of one runs
    /// [`Host::reload_hook`] for that hook alone (a version that does not load is refused and
    /// the running one stays), and the other hooks keep their instances and state. Must be
    /// called inside a tokio runtime.
    pub fn for_hooks(host: Arc<Host>, debounce: Duration) -> Result<EngineWatcher> {
        let targets: Vec<WatchTarget> = host
            .hook_files()?
            .into_iter()
            .map(|(id, path)| {
                let host = Arc::clone(&host);
                let hook = id.clone();
                WatchTarget {
                    path,
                    hook: Some(id),
                    reload: Arc::new(move || host.reload_hook(&hook)),
                }
            })
            .collect();
        if targets.is_empty() {
            return Err(Error::Config {
                place: "host.pipeline.hooks".into(),
                message: "the pipeline has no hook file to watch (only built-in hooks)".into(),
            });
        }
        Self::watching(targets, debounce)
    }

    /// Watches `path` and calls `reload` (on tokio's blocking pool, one call at a time) after
    /// each debounced batch of changes. Must be called inside a tokio runtime.
    pub fn new<F>(path: &Path, debounce: Duration, reload: F) -> Result<EngineWatcher>
    where
        F: Fn() -> Result<u64> + Send + Sync + 'static,
    {
        Self::watching(
            vec![WatchTarget {
                path: path.to_path_buf(),
                hook: None,
                reload: Arc::new(reload),
            }],
            debounce,
        )
    }

    /// Watches each target's file and runs its reload (on tokio's blocking pool, one reload at
    /// a time across all targets) after each debounced batch of changes to it. Must be called
    /// inside a tokio runtime.
    pub fn watching(targets: Vec<WatchTarget>, debounce: Duration) -> Result<EngineWatcher> {
        let runtime = tokio::runtime::Handle::try_current().map_err(|e| Error::NoRuntime {
            what: "the engine watcher",
            message: e.to_string(),
        })?;
        // Per target: the file as given (absolute) and as its canonical directory resolves it.
        let mut files: Vec<(PathBuf, PathBuf)> = Vec::new();
        let mut dirs: Vec<PathBuf> = Vec::new();
        for t in &targets {
            let path =
                std::path::absolute(&t.path).map_err(|e| Error::io("watch engine", &t.path, e))?;
            let (Some(dir), Some(name)) = (path.parent(), path.file_name()) else {
                return Err(Error::io(
                    "watch engine",
                    &path,
                    std::io::Error::other("not a file path"),
                ));
            };
            // Events carry the watched directory's path as notify resolved it; compare against
            // the canonical directory so symlinked temp dirs (macOS /var -> /private/var) still
            // match.
            let dir = dir
                .canonicalize()
                .map_err(|e| Error::io("watch engine directory", dir, e))?;
            files.push((dir.join(name), path.clone()));
            if !dirs.contains(&dir) {
                dirs.push(dir);
            }
        }
        let paths: Vec<PathBuf> = files.iter().map(|(_, literal)| literal.clone()).collect();

        let (trigger_tx, trigger_rx) = mpsc::unbounded_channel::<Trigger>();
        let handler = move |result: DebounceEventResult| match result {
            Ok(events) => {
                for (target, (canonical, literal)) in files.iter().enumerate() {
                    let changed_at = events
                        .iter()
                        .filter(|e| touches(e, canonical, literal))
                        .map(|e| e.time)
                        .min();
                    if let Some(changed_at) = changed_at {
                        let _ = trigger_tx.send(Trigger {
                            target,
                            changed_at,
                            debounced_at: Instant::now(),
                        });
                    }
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
        let first = dirs.first().cloned().unwrap_or_default();
        let mut debouncer = new_debouncer(debounce, Some(tick), handler)
            .map_err(|e| Error::io("watch engine directory", &first, std::io::Error::other(e)))?;
        for dir in &dirs {
            debouncer
                .watch(dir, RecursiveMode::NonRecursive)
                .map_err(|e| Error::io("watch engine directory", dir, std::io::Error::other(e)))?;
        }

        let (outcome_tx, outcomes) = mpsc::unbounded_channel();
        let targets: Vec<WatchTarget> = targets
            .into_iter()
            .zip(&paths)
            .map(|(t, path)| WatchTarget {
                path: path.clone(),
                ..t
            })
            .collect();
        let task = runtime.spawn(reload_task(targets, trigger_rx, outcome_tx));
        Ok(EngineWatcher {
            paths,
            debounce,
            outcomes,
            task,
            _debouncer: debouncer,
        })
    }

    /// The watched engine file (the first hook file for a pipeline).
    pub fn path(&self) -> &Path {
        self.paths.first().map_or(Path::new(""), PathBuf::as_path)
    }

    /// Every watched file: the engine file, or each hook file of a pipeline.
    pub fn paths(&self) -> &[PathBuf] {
        &self.paths
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

/// The one task that reloads: batches that arrived while a reload ran are merged into one per
/// file, and the files' reloads run one after the other.
async fn reload_task(
    targets: Vec<WatchTarget>,
    mut triggers: mpsc::UnboundedReceiver<Trigger>,
    outcomes: mpsc::UnboundedSender<ReloadOutcome>,
) {
    while let Some(first) = triggers.recv().await {
        let mut batch: std::collections::BTreeMap<usize, Trigger> =
            std::collections::BTreeMap::new();
        let mut add = |t: Trigger| {
            batch
                .entry(t.target)
                .and_modify(|b| {
                    b.changed_at = b.changed_at.min(t.changed_at);
                    b.debounced_at = t.debounced_at;
                })
                .or_insert(t);
        };
        add(first);
        while let Ok(more) = triggers.try_recv() {
            add(more);
        }
        for (index, trigger) in batch {
            let Some(target) = targets.get(index) else {
                continue;
            };
            let reload = Arc::clone(&target.reload);
            let result = match tokio::task::spawn_blocking(move || reload()).await {
                Ok(r) => r.map_err(Arc::new),
                Err(e) => Err(Arc::new(Error::Task {
                    task: "engine reload",
                    message: e.to_string(),
                })),
            };
            let path = &target.path;
            // Logged at info: the outcome goes to the caller, who decides how loudly to report.
            match (&result, &target.hook) {
                (Ok(g), None) => {
                    tracing::info!(file = %path.display(), generation = g, "engine reloaded")
                }
                (Ok(g), Some(hook)) => {
                    tracing::info!(file = %path.display(), hook, generation = g, "hook reloaded")
                }
                (Err(e), _) => {
                    tracing::info!(file = %path.display(), "reload refused, old version kept: {e}")
                }
            }
            let outcome = ReloadOutcome {
                path: path.clone(),
                hook: target.hook.clone(),
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
}

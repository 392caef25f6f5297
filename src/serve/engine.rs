//! The engine a server hosts: the config it runs with, the `info` the client sees, and the
//! watcher that reloads it when its file is saved.
//!
//! A save is noticed by a file watcher ([`crate::runtime::reload::EngineWatcher`], as `ctxhost watch`
//! uses, with `host.watch.debounceMs`), never by looking at the file before a call: a call
//! costs no file I/O. After the debounce the file is read once: the same text as the version
//! serving is no new version; a version that fails to load leaves the old one serving; one
//! that loads is taken by every session at its next call and lifts the quarantine.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;

use crate::config::Config;
use crate::contract;
use crate::error::Result;
use crate::runtime::Host;
use crate::runtime::reload::{EngineWatcher, ReloadOutcome};

use super::protocol::{self, ClientCapabilities};

/// The engine host and what the client said at `initialize`.
pub(super) struct Hosted {
    pub(super) host: Arc<Host>,
    /// Where this host's sessions are stored (`host.store`).
    pub(super) backend: Arc<dyn crate::store::Backend>,
    pub(super) capabilities: ClientCapabilities,
    /// The task that owns the engine file's watcher and reports its reloads (ended, and the
    /// watcher dropped, with the host).
    pub(super) watching: Option<tokio::task::JoinHandle<()>>,
}

impl Drop for Hosted {
    fn drop(&mut self) {
        if let Some(task) = self.watching.take() {
            task.abort();
        }
    }
}

/// The engine file's text as last loaded: a save that writes the same text again (or only
/// touches the file) is no new version.
pub(super) struct Loaded {
    path: PathBuf,
    hash: Mutex<Option<u64>>,
}

impl Loaded {
    /// The file as it is now (taken before the engine loads, so a save during the load is a
    /// change).
    pub(super) fn new(path: PathBuf) -> Loaded {
        let hash = Mutex::new(hash_of(&path));
        Loaded { path, hash }
    }

    /// Whether the file's text differs from the version loaded (taking it as loaded).
    fn changed(&self) -> bool {
        let now = hash_of(&self.path);
        let mut hash = self.hash.lock();
        if now.is_some() && now == *hash {
            return false;
        }
        *hash = now;
        true
    }
}

fn hash_of(path: &Path) -> Option<u64> {
    let bytes = std::fs::read(path).ok()?;
    let mut h = crate::services::fnv::Fnv::new();
    h.write(&bytes);
    Some(h.0)
}

/// Starts watching the engine file `loaded` names for `host` (inside a tokio runtime): each
/// debounced save reloads it when its text changed; each outcome is logged and, when
/// `report` is given, sent there. A save between `loaded` and now is reloaded at once.
pub(super) fn watch(
    host: &Arc<Host>,
    loaded: Loaded,
    debounce: Duration,
    report: Option<tokio::sync::mpsc::UnboundedSender<ReloadOutcome>>,
) -> Result<tokio::task::JoinHandle<()>> {
    let path = loaded.path.clone();
    let loaded = Arc::new(loaded);
    let reload = {
        let host = Arc::clone(host);
        let loaded = Arc::clone(&loaded);
        move || {
            if !loaded.changed() {
                return Ok(host.engine_cell().number());
            }
            host.reload_engine()
        }
    };
    let missed = {
        let host = Arc::clone(host);
        let loaded = Arc::clone(&loaded);
        move || loaded.changed().then(|| host.reload_engine())
    };
    let mut watcher = EngineWatcher::new(&path, debounce, reload)?;
    let generation = Arc::clone(host);
    Ok(tokio::spawn(async move {
        if let Ok(Some(Err(e))) = tokio::task::spawn_blocking(missed).await {
            tracing::warn!(file = %path.display(), "kept the running engine; the new version failed: {e}");
        }
        let mut last = generation.engine_cell().number();
        while let Some(outcome) = watcher.next_outcome().await {
            let file = outcome.path.display().to_string();
            match &outcome.result {
                Ok(g) if *g == last => {
                    tracing::debug!(file, "the engine file was saved unchanged")
                }
                Ok(g) => {
                    last = *g;
                    tracing::info!(
                        file,
                        generation = g,
                        "engine file changed; reloaded by the watcher"
                    )
                }
                Err(e) => {
                    tracing::warn!(file, "kept the running engine; the new version failed: {e}")
                }
            }
            if let Some(report) = &report {
                let _ = report.send(outcome);
            }
        }
    }))
}

/// Applies what differs under `serve`: a gateway runs other people's engines for other people,
/// so an engine over its turn budget `strikes` turns in a row is quarantined
/// (`host.turnBudget.onExceed: "quarantine"`) unless the config file says otherwise; `replay`
/// and `watch` keep `report`, where the author wants the figures.
pub(super) fn apply_serve_defaults(config: &mut Config) {
    if !sets_on_exceed(config) {
        config.host.turn_budget.on_exceed = crate::config::SlowEnginePolicy::Quarantine;
    }
}

/// Whether the config file the config came from names `host.turnBudget.onExceed` (the parsed
/// config cannot tell a default from a value written out).
fn sets_on_exceed(config: &Config) -> bool {
    let Some(path) = config.source.path() else {
        return false;
    };
    std::fs::read_to_string(path)
        .ok()
        .and_then(|text| json5::from_str::<serde_json::Value>(&text).ok())
        .is_some_and(|v| !v["host"]["turnBudget"]["onExceed"].is_null())
}

/// The `info` the client sees: the engine's own (or `legacy`'s when it failed to load), with
/// the transcript semantics the host provides on its behalf.
pub(super) fn engine_info(host: &Host) -> contract::EngineInfo {
    let mut info = match host.engine() {
        Some(Ok(f)) => f.info().clone(),
        Some(Err(e)) => {
            tracing::warn!("the engine failed to load; legacy answers: {e}");
            crate::engine::legacy::legacy_info()
        }
        None => crate::engine::legacy::legacy_info(),
    };
    info.transcript_semantics = Some(protocol::declared_semantics());
    info
}

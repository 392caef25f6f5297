//! The engine a server hosts: the config it runs with, the `info` the client sees, and the
//! watcher that reloads it when its file is saved.
//!
//! A save is noticed by a file watcher ([`crate::runtime::reload::EngineWatcher`], as `ctxhost watch`
//! uses, with `host.watch.debounceMs`), never by looking at the file before a call: a call
//! costs no file I/O. After the debounce the file is read once: the same text as the version
//! serving is no new version; a version that fails to load leaves the old one serving; one
//! that loads is taken by every session at its next call and lifts the quarantine. For the
//! `pipeline` engine every hook file is watched, and a save reloads that hook alone
//! ([`Host::reload_hook`]): sessions take it at their next turn with its state, and the other
//! hooks keep their instances and state.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;

use crate::config::Config;
use crate::contract;
use crate::error::Result;
use crate::runtime::Host;
use crate::runtime::reload::{EngineWatcher, Reload, ReloadOutcome, WatchTarget};

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

/// A file the server watches: the engine file, or one hook file of the pipeline.
pub(super) struct Watched {
    /// The pipeline hook the file is (`None`: the engine file).
    pub(super) hook: Option<String>,
    /// The file as loaded.
    pub(super) loaded: Loaded,
}

/// What a server with `config` watches: the engine file of the slot's entry, or, for the
/// `pipeline` engine, the file of each enabled script hook `host.pipeline.hooks` names. Taken
/// before the load, so a save during the load is a change.
pub(super) fn watched_files(config: &Config) -> Vec<Watched> {
    if let Some(path) = config
        .engine_entry()
        .and_then(|(_, e)| e.path.as_deref().map(|p| config.resolve(p)))
    {
        return vec![Watched {
            hook: None,
            loaded: Loaded::new(path),
        }];
    }
    if config.plugins.slots.context_engine.as_deref() != Some(crate::config::PIPELINE_ID) {
        return Vec::new();
    }
    config
        .host
        .pipeline
        .hooks
        .iter()
        .filter_map(|id| {
            let entry = config.plugins.entries.get(id).filter(|e| e.enabled)?;
            let path = config.resolve(entry.path.as_deref()?);
            Some(Watched {
                hook: Some(id.clone()),
                loaded: Loaded::new(path),
            })
        })
        .collect()
}

/// Reloads the engine, or hook `hook` alone.
fn reload(host: &Host, hook: Option<&str>) -> Result<u64> {
    match hook {
        Some(h) => host.reload_hook(h),
        None => host.reload_engine(),
    }
}

/// The generation serving: the engine's, or hook `hook`'s.
fn serving(host: &Host, hook: Option<&str>) -> Result<u64> {
    match hook {
        Some(h) => host.hook_generation(h),
        None => Ok(host.engine_cell().number()),
    }
}

/// Starts watching the files `watched` names for `host` (inside a tokio runtime): each
/// debounced save reloads the engine, or that hook alone, when its text changed; each outcome
/// is logged and, when `report` is given, sent there. A save between `watched` and now is
/// reloaded at once.
pub(super) fn watch(
    host: &Arc<Host>,
    watched: Vec<Watched>,
    debounce: Duration,
    report: Option<tokio::sync::mpsc::UnboundedSender<ReloadOutcome>>,
) -> Result<tokio::task::JoinHandle<()>> {
    let mut targets = Vec::new();
    let mut missed: Vec<Box<dyn FnOnce() -> Option<Result<u64>> + Send>> = Vec::new();
    for w in watched {
        let path = w.loaded.path.clone();
        let loaded = Arc::new(w.loaded);
        let reload_it: Reload = {
            let host = Arc::clone(host);
            let loaded = Arc::clone(&loaded);
            let hook = w.hook.clone();
            Arc::new(move || {
                if !loaded.changed() {
                    return serving(&host, hook.as_deref());
                }
                reload(&host, hook.as_deref())
            })
        };
        {
            let host = Arc::clone(host);
            let hook = w.hook.clone();
            missed.push(Box::new(move || {
                loaded.changed().then(|| reload(&host, hook.as_deref()))
            }));
        }
        targets.push(WatchTarget {
            path,
            hook: w.hook,
            reload: reload_it,
        });
    }
    let kinds: Vec<Option<String>> = targets.iter().map(|t| t.hook.clone()).collect();
    let mut watcher = EngineWatcher::watching(targets, debounce)?;
    let host = Arc::clone(host);
    Ok(tokio::spawn(async move {
        let at_start = tokio::task::spawn_blocking(move || {
            missed.into_iter().filter_map(|m| m()).collect::<Vec<_>>()
        })
        .await;
        for r in at_start.unwrap_or_default() {
            if let Err(e) = r {
                tracing::warn!("kept the running version; the new version failed: {e}");
            }
        }
        // The generation each file serves before any save: a reload's outcome is compared
        // with it (read after the reload, it would already be the new one).
        let mut last: std::collections::HashMap<Option<String>, u64> = kinds
            .into_iter()
            .filter_map(|hook| serving(&host, hook.as_deref()).ok().map(|g| (hook, g)))
            .collect();
        while let Some(outcome) = watcher.next_outcome().await {
            let file = outcome.path.display().to_string();
            let hook = outcome.hook.clone();
            let before = last.get(&hook).copied();
            match &outcome.result {
                Ok(g) if Some(*g) == before => {
                    tracing::debug!(file, "the file was saved unchanged")
                }
                Ok(g) => {
                    last.insert(hook.clone(), *g);
                    match hook.as_deref() {
                        Some(hook) => tracing::info!(
                            file,
                            hook,
                            generation = g,
                            "hook file changed; reloaded by the watcher"
                        ),
                        None => tracing::info!(
                            file,
                            generation = g,
                            "engine file changed; reloaded by the watcher"
                        ),
                    }
                }
                Err(e) => {
                    tracing::warn!(
                        file,
                        "kept the running version; the new version failed: {e}"
                    )
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

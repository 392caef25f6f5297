//! The engine a server hosts: the config it runs with, the `info` the client sees, and a reload
//! when the engine file changed since the last call.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::SystemTime;

use crate::config::Config;
use crate::contract;
use crate::error::Result;
use crate::runtime::Host;

use super::protocol::{self, ClientCapabilities};

/// The engine host and what the client said at `initialize`.
pub(super) struct Hosted {
    pub(super) host: Arc<Host>,
    pub(super) capabilities: ClientCapabilities,
    pub(super) engine_path: Option<PathBuf>,
    pub(super) watch: bool,
    /// The engine file's last seen modification stamp, under a lock so one reload runs at a time.
    pub(super) seen: tokio::sync::Mutex<Option<Stamp>>,
}

/// The engine file's modification time, length and content hash: a save within the file
/// system's timestamp granularity still changes the hash.
pub(super) type Stamp = (Option<SystemTime>, u64, u64);

impl Hosted {
    /// Loads the engine file again when it changed since the last call (with
    /// `host.watch.enabled`); a version that fails to load leaves the old one serving.
    pub(super) async fn refresh(&self) {
        let (true, Some(path)) = (self.watch, self.engine_path.clone()) else {
            return;
        };
        let mut seen = self.seen.lock().await;
        let now = stamp(&path);
        if seen.as_ref() == Some(&now) {
            return;
        }
        *seen = Some(now);
        let host = Arc::clone(&self.host);
        match tokio::task::spawn_blocking(move || host.reload_engine()).await {
            Ok(Ok(generation)) => {
                tracing::info!(file = %path.display(), generation, "engine reloaded")
            }
            Ok(Err(e)) => {
                tracing::warn!(file = %path.display(), "kept the running engine; the new version failed: {e}")
            }
            Err(e) => tracing::error!("engine reload did not finish: {e}"),
        }
    }
}

/// The configuration `serve` runs with: the config file (or the usual discovery), with `engine`
/// (when given) in the context-engine slot under an id made from its file name.
pub fn config_for(config: Option<&Path>, engine: Option<&Path>) -> Result<Config> {
    let mut config = crate::config::discover(config)?;
    if let Some(engine) = engine {
        let id = engine_id_from_path(engine);
        config.plugins.slots.context_engine = Some(id.clone());
        let mut entry = config.plugins.entries.remove(&id).unwrap_or_default();
        entry.path = Some(std::path::absolute(engine).unwrap_or_else(|_| engine.to_path_buf()));
        entry.enabled = true;
        config.plugins.entries.insert(id, entry);
    }
    Ok(config)
}

/// The entry id for an engine file named on the command line: the file stem with `_` as `-`
/// (`recent_turns.lua` → `recent-turns`), which is what the example engines declare as
/// `info.id`.
pub fn engine_id_from_path(path: &Path) -> String {
    path.file_stem()
        .and_then(|s| s.to_str())
        .unwrap_or("engine")
        .replace('_', "-")
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

pub(super) fn stamp(path: &Path) -> Stamp {
    let modified = std::fs::metadata(path).ok().and_then(|m| m.modified().ok());
    match std::fs::read(path) {
        Ok(bytes) => {
            let mut h = crate::session::Fnv::new();
            h.write(&bytes);
            (modified, bytes.len() as u64, h.0)
        }
        Err(_) => (modified, 0, 0),
    }
}

//! The engine a server hosts: the config it runs with, the `info` the client sees, and a reload
//! when the engine file changed since the last call.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::SystemTime;

use crate::config::Config;
use crate::contract;
use crate::runtime::Host;

use super::protocol::{self, ClientCapabilities};

/// The engine host and what the client said at `initialize`.
pub(super) struct Hosted {
    pub(super) host: Arc<Host>,
    /// Where this host's sessions are stored (`host.store`).
    pub(super) backend: Arc<dyn crate::store::Backend>,
    pub(super) capabilities: ClientCapabilities,
    pub(super) engine_path: Option<PathBuf>,
    pub(super) watch: bool,
    /// The engine file as last seen, under a lock so one reload runs at a time.
    pub(super) seen: tokio::sync::Mutex<Option<EngineFile>>,
}

/// What a file's metadata says of its version: modification and change times, length and
/// inode. The change time cannot be set back by a tool (`touch -d`), and a save by rename
/// makes a new inode. Two saves of the same length within one tick of the file system's clock
/// (a few ms) look the same: the content hash then only runs when the metadata moved.
type Meta = (Option<SystemTime>, Option<(i64, i64)>, u64, u64);

/// Tells whether the engine file changed since the last look: its metadata on every call (one
/// `stat`), its content (read and hashed) only when the metadata moved.
#[derive(Debug)]
pub(super) struct EngineFile {
    path: PathBuf,
    meta: Option<Meta>,
    hash: Option<u64>,
    /// How many times the file was read and hashed (for tests).
    pub(super) reads: u64,
}

impl EngineFile {
    /// Takes the file as it is now as the version loaded.
    pub(super) fn new(path: PathBuf) -> Self {
        let mut f = EngineFile {
            meta: meta(&path),
            hash: None,
            reads: 0,
            path,
        };
        f.hash = f.read_hash();
        f.reads = 0;
        f
    }

    /// Whether the content changed since the last call (metadata alone when it did not move).
    pub(super) fn changed(&mut self) -> bool {
        let now = meta(&self.path);
        if now == self.meta {
            return false;
        }
        self.meta = now;
        let hash = self.read_hash();
        if hash == self.hash {
            return false;
        }
        self.hash = hash;
        true
    }

    fn read_hash(&mut self) -> Option<u64> {
        self.reads += 1;
        let bytes = std::fs::read(&self.path).ok()?;
        let mut h = crate::session::Fnv::new();
        h.write(&bytes);
        Some(h.0)
    }
}

fn meta(path: &Path) -> Option<Meta> {
    let m = std::fs::metadata(path).ok()?;
    #[cfg(unix)]
    let (changed, inode) = {
        use std::os::unix::fs::MetadataExt;
        (Some((m.ctime(), m.ctime_nsec())), m.ino())
    };
    #[cfg(not(unix))]
    let (changed, inode) = (None, 0);
    Some((m.modified().ok(), changed, m.len(), inode))
}

impl Hosted {
    /// Loads the engine file again when it changed since the last call (with
    /// `host.watch.enabled`); a version that fails to load leaves the old one serving.
    pub(super) async fn refresh(&self) {
        let (true, Some(path)) = (self.watch, self.engine_path.clone()) else {
            return;
        };
        let mut seen = self.seen.lock().await;
        if !seen.as_mut().is_some_and(EngineFile::changed) {
            return;
        }
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

#[cfg(test)]
#[path = "engine_tests.rs"]
mod tests;

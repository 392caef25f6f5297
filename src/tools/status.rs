//! What a long-running ctxhost process (`serve`, `watch`) publishes about itself, so `ctxhost
//! doctor` — another process — can report it.
//!
//! Abandoned engine workers ([`crate::engine::sandbox::abandoned_workers`]) are counted per process: a
//! gateway's `serve` can hold threads stuck in native code while a `doctor` run next to it has
//! none. Each long-running process keeps `running/<pid>.json` under the state directory up to
//! date ([`StatusFile::refresh`], cheap when nothing changed) and removes it when it ends;
//! [`running`] reads the files of processes still alive.

use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use serde::{Deserialize, Serialize};

/// One running process's published status.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LiveStatus {
    /// The process id.
    pub pid: u32,
    /// The command it runs (`serve`, `watch`).
    pub command: String,
    /// When it started, in seconds since the Unix epoch.
    pub started: u64,
    /// When the file was last written, in seconds since the Unix epoch.
    pub updated: u64,
    /// Its engine workers abandoned past deadline + grace whose thread still runs.
    pub abandoned_workers: usize,
}

/// This process's status file, removed when dropped.
#[derive(Debug)]
pub struct StatusFile {
    path: PathBuf,
    status: Mutex<LiveStatus>,
}

fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

fn running_dir(state_dir: &Path) -> PathBuf {
    state_dir.join("running")
}

impl StatusFile {
    /// Publishes this process as running `command` under `state_dir`.
    pub fn create(state_dir: &Path, command: &str) -> std::io::Result<Self> {
        let dir = running_dir(state_dir);
        std::fs::create_dir_all(&dir)?;
        let pid = std::process::id();
        let file = StatusFile {
            path: dir.join(format!("{pid}.json")),
            status: Mutex::new(LiveStatus {
                pid,
                command: command.to_string(),
                started: now(),
                updated: now(),
                abandoned_workers: crate::engine::sandbox::abandoned_workers(),
            }),
        };
        file.write(&file.status.lock().clone())?;
        Ok(file)
    }

    /// Rewrites the file when the abandoned-worker count changed since the last write.
    pub fn refresh(&self) -> std::io::Result<()> {
        let abandoned = crate::engine::sandbox::abandoned_workers();
        let status = {
            let mut s = self.status.lock();
            if abandoned == s.abandoned_workers {
                return Ok(());
            }
            s.abandoned_workers = abandoned;
            s.updated = now();
            s.clone()
        };
        self.write(&status)
    }

    /// Publishes this process under `state_dir`, refreshed every two seconds while the returned
    /// file lives; `None` (with a warning) when it cannot be written: the command runs on,
    /// unpublished.
    pub fn publish(state_dir: &Path, command: &str) -> Option<Arc<StatusFile>> {
        match StatusFile::create(state_dir, command) {
            Ok(file) => {
                let file = Arc::new(file);
                file.keep_fresh(Duration::from_secs(2));
                Some(file)
            }
            Err(e) => {
                tracing::warn!(
                    "cannot publish this process's status under {}: {e}",
                    state_dir.display()
                );
                None
            }
        }
    }

    /// Refreshes the file every `every` on a thread of its own, for as long as `self` lives.
    pub fn keep_fresh(self: &Arc<Self>, every: Duration) {
        let weak = Arc::downgrade(self);
        let _ = std::thread::Builder::new()
            .name("ctxhost-status".into())
            .spawn(move || {
                loop {
                    std::thread::sleep(every);
                    match weak.upgrade() {
                        Some(file) => {
                            if let Err(e) = file.refresh() {
                                tracing::warn!("cannot update {}: {e}", file.path.display());
                            }
                        }
                        None => return,
                    }
                }
            });
    }

    fn write(&self, status: &LiveStatus) -> std::io::Result<()> {
        let tmp = self.path.with_extension("json.tmp");
        let text = serde_json::to_vec_pretty(status).map_err(std::io::Error::other)?;
        std::fs::write(&tmp, text)?;
        std::fs::rename(&tmp, &self.path)
    }
}

impl Drop for StatusFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// The published status of every process still running under `state_dir`, by pid. Files of
/// processes that died without removing theirs (a SIGKILL) are skipped and removed.
pub fn running(state_dir: &Path) -> Vec<LiveStatus> {
    let Ok(entries) = std::fs::read_dir(running_dir(state_dir)) else {
        return Vec::new();
    };
    let mut out: Vec<LiveStatus> = entries
        .flatten()
        .filter(|e| e.path().extension().is_some_and(|x| x == "json"))
        .filter_map(|e| {
            let status: LiveStatus = serde_json::from_slice(&std::fs::read(e.path()).ok()?).ok()?;
            if alive(status.pid) {
                Some(status)
            } else {
                let _ = std::fs::remove_file(e.path());
                None
            }
        })
        .collect();
    out.sort_by_key(|s| s.pid);
    out
}

/// Whether a process with this pid runs (Linux: `/proc/<pid>`; elsewhere every file counts).
fn alive(pid: u32) -> bool {
    let proc = Path::new("/proc");
    !proc.is_dir() || proc.join(pid.to_string()).exists()
}

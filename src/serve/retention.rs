//! Which sessions a server keeps open: one released after `host.serve.idleMs` without a call,
//! and the least recently used released when more than `host.serve.maxLive` are open. A released
//! session's state is saved and its engine instance (and that instance's thread) disposed; its
//! next call reopens it from what was saved.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};

use super::server::{Served, Server, Worker, WorkerSide};

/// How long a session stays open without a call, and how many stay open at once.
#[derive(Debug)]
pub(super) struct Retention {
    pub(super) idle: parking_lot::RwLock<std::time::Duration>,
    pub(super) max_live: std::sync::atomic::AtomicUsize,
    /// Calls so far (a logical clock for least recently used) and workers started.
    pub(super) calls: AtomicU64,
    pub(super) serials: AtomicU64,
}

impl Retention {
    pub(super) fn new(settings: &crate::config::ServeSettings) -> Self {
        Retention {
            idle: parking_lot::RwLock::new(std::time::Duration::from_millis(settings.idle_ms)),
            max_live: std::sync::atomic::AtomicUsize::new(settings.max_live.max(1)),
            calls: AtomicU64::new(0),
            serials: AtomicU64::new(0),
        }
    }

    pub(super) fn set(&self, settings: &crate::config::ServeSettings) {
        *self.idle.write() = std::time::Duration::from_millis(settings.idle_ms);
        self.max_live
            .store(settings.max_live.max(1), Ordering::Relaxed);
    }
}

impl Server {
    /// Asks the least recently used session other than `key` to release itself when more
    /// than `host.serve.maxLive` are open (it does so between calls, after saving).
    pub(super) fn release_beyond_max_live(&self, sessions: &HashMap<String, Worker>, key: &str) {
        if sessions.len() <= self.retention.max_live.load(Ordering::Relaxed) {
            return;
        }
        if let Some((_, w)) = sessions
            .iter()
            .filter(|(k, _)| k.as_str() != key)
            .min_by_key(|(_, w)| w.used)
        {
            w.release.notify_one();
        }
    }

    /// Closes a session no one is calling (idle, or released for another): its state is saved
    /// and its engine instance disposed. Returns whether the worker is done; a call that came
    /// in meanwhile keeps it serving (the session reopens from what was saved).
    pub(super) async fn retire(
        &self,
        worker: &mut WorkerSide,
        served: &mut Option<Served>,
    ) -> bool {
        if let Some(s) = served.take() {
            if let Err(e) = s.handle.close().await {
                tracing::warn!(session = %worker.key, "releasing the session failed: {e}");
            }
            tracing::debug!(session = %worker.key, "session released");
        }
        let mut sessions = self.sessions.lock();
        if !worker.jobs.is_empty() {
            return false;
        }
        if sessions
            .get(&worker.key)
            .is_some_and(|w| w.serial == worker.serial)
        {
            sessions.remove(&worker.key);
        }
        true
    }
}

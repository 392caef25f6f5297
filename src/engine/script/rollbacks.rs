//! Rollback functions returned by `prepareSubagentSpawn`, kept by every VM the same way.

use std::collections::HashMap;

/// Rollback functions returned by `prepareSubagentSpawn`, kept under handles until used.
#[derive(Debug)]
pub(crate) struct Rollbacks<F> {
    next: u64,
    kept: HashMap<u64, F>,
}

impl<F> Default for Rollbacks<F> {
    fn default() -> Self {
        Rollbacks {
            next: 0,
            kept: HashMap::new(),
        }
    }
}

impl<F> Rollbacks<F> {
    /// Keeps `f`; returns its handle.
    pub(crate) fn keep(&mut self, f: F) -> u64 {
        self.next += 1;
        self.kept.insert(self.next, f);
        self.next
    }

    /// Takes the function behind `handle` (an unknown handle is logged and gives `None`).
    pub(crate) fn take(&mut self, handle: u64, engine: &str) -> Option<F> {
        let f = self.kept.remove(&handle);
        if f.is_none() {
            tracing::warn!(engine, handle, "unknown subagent rollback handle");
        }
        f
    }
}

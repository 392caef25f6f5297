//! The process-wide record of quarantined engines (contract §8): once an engine fails, every
//! session of this host process answers from `legacy` until the engine is reloaded.
//!
//! Quarantines are keyed by the configured entry id (the slot's name for the engine), never by
//! the `info.id` a script declares: a reload of that entry lifts exactly what its failures set.

use std::collections::BTreeMap;

use parking_lot::Mutex;

use crate::error::EngineError;

/// Engines quarantined in this process, each with its first failure.
#[derive(Debug, Default)]
pub struct Quarantine {
    first_failures: Mutex<BTreeMap<String, EngineError>>,
}

impl Quarantine {
    /// Quarantines the configured `entry` for this failure; returns true when this is its first
    /// failure (the one kept for `doctor` and the replay summary).
    pub fn record(&self, entry: &str, failure: &EngineError) -> bool {
        let mut map = self.first_failures.lock();
        if map.contains_key(entry) {
            return false;
        }
        map.insert(entry.to_owned(), failure.clone());
        true
    }

    /// Whether an engine is quarantined.
    pub fn contains(&self, entry: &str) -> bool {
        self.first_failures.lock().contains_key(entry)
    }

    /// The first failure of a quarantined engine.
    pub fn first_failure(&self, entry: &str) -> Option<EngineError> {
        self.first_failures.lock().get(entry).cloned()
    }

    /// Lifts the quarantine (after a reload that loaded and validated).
    pub fn lift(&self, entry: &str) -> Option<EngineError> {
        self.first_failures.lock().remove(entry)
    }

    /// Every quarantined engine's first failure, by entry id.
    pub fn all(&self) -> Vec<EngineError> {
        self.first_failures.lock().values().cloned().collect()
    }
}

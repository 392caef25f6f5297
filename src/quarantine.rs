//! The process-wide record of quarantined engines (contract §8): once an engine fails, every
//! session of this host process answers from `legacy` until the engine is reloaded.

use std::collections::BTreeMap;

use parking_lot::Mutex;

use crate::error::EngineError;

/// Engines quarantined in this process, each with its first failure.
#[derive(Debug, Default)]
pub struct Quarantine {
    first_failures: Mutex<BTreeMap<String, EngineError>>,
}

impl Quarantine {
    /// Quarantines the failing engine; returns true when this is its first failure (the one
    /// kept for `doctor` and the replay summary).
    pub fn record(&self, failure: &EngineError) -> bool {
        let mut map = self.first_failures.lock();
        if map.contains_key(&failure.engine) {
            return false;
        }
        map.insert(failure.engine.clone(), failure.clone());
        true
    }

    /// Whether an engine is quarantined.
    pub fn contains(&self, engine: &str) -> bool {
        self.first_failures.lock().contains_key(engine)
    }

    /// The first failure of a quarantined engine.
    pub fn first_failure(&self, engine: &str) -> Option<EngineError> {
        self.first_failures.lock().get(engine).cloned()
    }

    /// Lifts the quarantine (after a reload that loaded and validated).
    pub fn lift(&self, engine: &str) -> Option<EngineError> {
        self.first_failures.lock().remove(engine)
    }

    /// Every quarantined engine's first failure, by engine id.
    pub fn all(&self) -> Vec<EngineError> {
        self.first_failures.lock().values().cloned().collect()
    }
}

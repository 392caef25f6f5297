//! The engine a host currently serves, swapped as a whole by hot reload: sessions compare the
//! generation number at turn boundaries and follow a new one between turns, never inside one.

use std::sync::Arc;

use parking_lot::RwLock;
use serde_json::Value;

use crate::engine::EngineFactory;
use crate::error::EngineError;

/// What a host currently serves: `None` is `legacy`; `Err` an engine that failed to load.
pub(crate) type LoadedEngine = Option<Result<Arc<dyn EngineFactory>, EngineError>>;

/// One generation of the configured engine.
#[derive(Clone, Debug)]
pub struct Generation {
    /// Bumped by every successful reload.
    pub number: u64,
    /// The configured entry id this cell serves (`legacy` when none): what its failures are
    /// quarantined under, whatever `info.id` the script declares.
    pub entry: Arc<str>,
    /// The engine.
    pub engine: LoadedEngine,
    /// Its entry config.
    pub config: Arc<Value>,
}

/// The host's current engine, shared with every session.
#[derive(Debug)]
pub struct EngineCell {
    current: RwLock<Generation>,
}

impl EngineCell {
    /// A cell serving the configured `entry`'s `engine` as generation 0.
    pub fn new(entry: &str, engine: LoadedEngine, config: Arc<Value>) -> Self {
        EngineCell {
            current: RwLock::new(Generation {
                number: 0,
                entry: Arc::from(entry),
                engine,
                config,
            }),
        }
    }

    /// The current generation (cheap: `Arc` clones).
    pub fn current(&self) -> Generation {
        self.current.read().clone()
    }

    /// The configured entry id (the quarantine key).
    pub fn entry(&self) -> Arc<str> {
        Arc::clone(&self.current.read().entry)
    }

    /// The current generation number.
    pub fn number(&self) -> u64 {
        self.current.read().number
    }

    /// Swaps in a loaded and validated engine; returns the new generation number.
    pub fn swap(&self, engine: Arc<dyn EngineFactory>, config: Arc<Value>) -> u64 {
        let mut g = self.current.write();
        g.number += 1;
        g.engine = Some(Ok(engine));
        g.config = config;
        g.number
    }
}

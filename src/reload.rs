//! Hot reload: the current engine of a host, swapped as a whole between turns.
//!
//! An [`EngineCell`] holds the loaded engine and a generation number. A reload loads and
//! validates the new file off the hot path and, only if that succeeds, swaps it in and bumps the
//! generation (an invalid new version leaves the old one serving). Sessions compare generations
//! at turn boundaries, never inside a turn: the old instance's state is saved, it is disposed,
//! the new instance is made and the state restored, so a turn never sees two versions.

use std::sync::Arc;

use parking_lot::RwLock;
use serde_json::Value;

use crate::engine::EngineFactory;
use crate::error::EngineError;

/// What a host currently serves: `None` is `legacy`; `Err` an engine that failed to load.
pub type LoadedEngine = Option<Result<Arc<dyn EngineFactory>, EngineError>>;

/// One generation of the configured engine.
#[derive(Clone, Debug)]
pub struct Generation {
    /// Bumped by every successful reload.
    pub number: u64,
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
    /// A cell serving `engine` as generation 0.
    pub fn new(engine: LoadedEngine, config: Arc<Value>) -> Self {
        EngineCell {
            current: RwLock::new(Generation {
                number: 0,
                engine,
                config,
            }),
        }
    }

    /// The current generation (cheap: `Arc` clones).
    pub fn current(&self) -> Generation {
        self.current.read().clone()
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

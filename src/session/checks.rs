//! The contract's checks of an engine's results, made once, here: every engine's `assemble`
//! and `compact` result passes through them before the session uses it, whichever engine (in
//! this process, in a child process, built in) produced it.

use crate::contract::{self, AssembleResult, CompactResult, Method, ResultLimits};
use crate::engine::Engine;
use crate::error::{EngineError, EngineErrorKind};

/// An `assemble` result held to the contract's numbers and sizes; the error names the engine
/// and where its `assemble` is written, as a failed call would.
pub fn check_assemble(
    engine: &dyn Engine,
    r: &AssembleResult,
    limits: &ResultLimits,
) -> Result<(), EngineError> {
    contract::check_assemble(r, limits).map_err(|m| refused(engine, Method::Assemble, m))
}

/// A `compact` result held to the contract's consistency and sizes (see [`check_assemble`]).
pub(crate) fn check_compact(
    engine: &dyn Engine,
    r: &CompactResult,
    limits: &ResultLimits,
) -> Result<(), EngineError> {
    contract::check_compact(r, limits).map_err(|m| refused(engine, Method::Compact, m))
}

fn refused(engine: &dyn Engine, method: Method, message: String) -> EngineError {
    EngineError::new(
        method,
        &engine.info().id,
        EngineErrorKind::InvalidResult,
        message,
    )
    .at(engine.location(method))
}

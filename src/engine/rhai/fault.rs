//! Rhai failures as the shared layer's [`Fault`]s: the innermost error of a call chain, its
//! kind (limits recognised) and its position.

use std::sync::Arc;

use rhai::{EvalAltResult, Position};

use super::api::HostFault;
use super::memory::OVER_CAP;
use crate::contract::limits::Limits;
use crate::contract::limits::RhaiLimits;
use crate::engine::sandbox::StopSignals;
use crate::engine::script::{Fault, Site};
use crate::error::EngineErrorKind;

pub(super) fn pos_line(p: Position) -> Option<u32> {
    p.line().and_then(|l| u32::try_from(l).ok())
}

pub(super) fn pos_col(p: Position) -> Option<u32> {
    p.position().and_then(|c| u32::try_from(c).ok())
}

pub(super) fn site_for(file: &str, engine: &str, limits: &Limits) -> Site {
    Site {
        file: file.to_string(),
        engine: engine.to_string(),
        signals: Arc::new(StopSignals::new(None)),
        limits: limits.clone(),
    }
}

/// The text of a Rhai error without its ` (line L, position C)` suffix.
pub(super) fn bare(e: &EvalAltResult) -> String {
    let text = match e {
        EvalAltResult::ErrorRuntime(v, _) if v.is_string() => v.to_string(),
        EvalAltResult::ErrorRuntime(v, _) if v.is::<HostFault>() => v
            .read_lock::<HostFault>()
            .map(|f| f.0.clone())
            .unwrap_or_default(),
        EvalAltResult::ErrorRuntime(v, _) => format!("thrown: {v}"),
        other => other.to_string(),
    };
    match text.rfind(" (line ") {
        Some(i) if text.ends_with(')') => text[..i].to_string(),
        _ => text,
    }
}

/// A Rhai failure as a [`Fault`]: the innermost error of a call chain, located at the innermost
/// known position (`default`: the kind of an ordinary throw). Rhai gives limit and termination
/// errors no position; the caller falls back to the called function's line.
pub(super) fn fault(err: &EvalAltResult, limits: &RhaiLimits, default: EngineErrorKind) -> Fault {
    let mut e = err;
    let mut pos = err.position();
    while let EvalAltResult::ErrorInFunctionCall(_, _, inner, p) = e {
        if !p.is_none() {
            pos = *p;
        }
        e = inner;
    }
    if !e.position().is_none() {
        pos = e.position();
    }
    let (kind, message) = match e {
        EvalAltResult::ErrorTooManyOperations(_) => (
            EngineErrorKind::Limit,
            format!(
                "script exceeded its budget of {} operations",
                limits.max_operations
            ),
        ),
        EvalAltResult::ErrorStackOverflow(_) => (
            EngineErrorKind::Limit,
            format!(
                "stack overflow: calls nested deeper than {} levels",
                limits.max_call_levels
            ),
        ),
        EvalAltResult::ErrorDataTooLarge(what, _) => (EngineErrorKind::Memory, what.clone()),
        EvalAltResult::ErrorTerminated(token, _)
            if token.is_string() && token.to_string() == OVER_CAP =>
        {
            (
                EngineErrorKind::Memory,
                "memory grown by the script passed the cap".to_string(),
            )
        }
        EvalAltResult::ErrorFunctionNotFound(sig, _) => (
            default,
            super::stdlib::missing_function(sig).unwrap_or_else(|| bare(e)),
        ),
        EvalAltResult::ErrorRuntime(v, _) if v.is::<HostFault>() => {
            (EngineErrorKind::Host, bare(e))
        }
        _ => (default, bare(e)),
    };
    Fault {
        kind,
        message,
        line: pos_line(pos),
        column: pos_col(pos),
    }
}

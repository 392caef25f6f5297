//! Which loader an engine file goes to: Lua / Luau or Rhai by its extension, and the id the
//! built-in engine reserves. (Where the instances then run — a worker thread or a child
//! process — the host picks from its config: [`crate::engine::isolation::load`] wraps this in a child.)

use std::path::Path;
use std::sync::Arc;

use super::instance::ConnectAny;
use super::script::ScriptFactory;
use super::{EngineFactory, LoadOptions, legacy, lua, rhai};
use crate::error::{EngineError, EngineErrorKind, Op, ScriptLocation};

/// Loads an engine file by its extension, for the entry `opts.configured_id` names. A failure is
/// an [`EngineError`] the host quarantines (the sessions then answer from `legacy`).
pub fn load(
    path: &Path,
    opts: &LoadOptions,
    rhai: &rhai::RhaiLimits,
) -> Result<Arc<dyn EngineFactory>, EngineError> {
    Ok(load_any(path, opts, rhai)?)
}

/// [`load`], for serving the instances' transports (an isolation child).
pub(crate) fn load_any(
    path: &Path,
    opts: &LoadOptions,
    rhai: &rhai::RhaiLimits,
) -> Result<Arc<dyn ConnectAny>, EngineError> {
    let id = opts.configured_id.as_deref().unwrap_or_default();
    let located = |kind, message: String| {
        EngineError::new(Op::Load, id, kind, message)
            .at(Some(ScriptLocation::new(path.display().to_string(), None)))
    };
    if !path.is_file() {
        return Err(located(
            EngineErrorKind::MissingFile,
            format!("no engine file at {}", path.display()),
        ));
    }
    let factory: Arc<dyn ConnectAny> = match path.extension().and_then(|e| e.to_str()) {
        Some("lua" | "luau") => ScriptFactory::<lua::Lua>::load(path, opts, ())?,
        Some("rhai") => ScriptFactory::<rhai::Rhai>::load(path, opts, rhai.clone())?,
        Some(ext) => {
            return Err(located(
                EngineErrorKind::Contract,
                format!("engines written in .{ext} files cannot be loaded by this build"),
            ));
        }
        None => {
            return Err(located(
                EngineErrorKind::Contract,
                "an engine file needs a .lua, .luau or .rhai extension".into(),
            ));
        }
    };
    if factory.info().id == legacy::LEGACY_ID {
        return Err(EngineError::new(
            Op::Validate,
            id,
            EngineErrorKind::Contract,
            format!(
                "info.id \"{}\" is reserved for the built-in engine; give the engine its own id",
                legacy::LEGACY_ID
            ),
        )
        .at(Some(ScriptLocation::new(path.display().to_string(), None))));
    }
    Ok(factory)
}

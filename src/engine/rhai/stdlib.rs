//! `import` in Rhai engines: only the host's stdlib, each module compiled once per process.

use std::collections::HashMap;
use std::sync::OnceLock;

use parking_lot::Mutex;
use rhai::{Engine as RhaiEngine, EvalAltResult, Module, ModuleResolver, Position, Scope, Shared};

use super::engine::configured;
use super::limits::RhaiLimits;

/// The stdlib module names (the Lua stdlib's, whose Rhai twins live in `stdlib/*.rhai`).
pub(super) fn stdlib_names() -> impl Iterator<Item = &'static str> {
    crate::stdlib::RHAI_MODULES.iter().map(|(n, _)| *n)
}

/// The Rhai source of a stdlib module.
pub(super) fn stdlib_source(name: &str) -> Option<&'static str> {
    crate::stdlib::rhai_module(name)
}

/// Stdlib modules compiled so far (each once per process).
pub(super) fn stdlib_cache() -> &'static Mutex<HashMap<String, Shared<Module>>> {
    static CACHE: OnceLock<Mutex<HashMap<String, Shared<Module>>>> = OnceLock::new();
    CACHE.get_or_init(Default::default)
}

/// A stdlib module by name, compiled on first use with a limits-only engine.
pub(super) fn stdlib_module(name: &str) -> Result<Option<Shared<Module>>, Box<EvalAltResult>> {
    if let Some(m) = stdlib_cache().lock().get(name) {
        return Ok(Some(m.clone()));
    }
    let Some(src) = stdlib_source(name) else {
        return Ok(None);
    };
    // Generous limits: the stdlib is trusted code; only its definitions run here.
    let engine = configured(&RhaiLimits::default());
    let mut ast = engine.compile(src)?;
    ast.set_source(format!("stdlib/{name}.rhai"));
    let module: Shared<Module> = Module::eval_ast_as_new(Scope::new(), &ast, &engine)?.into();
    stdlib_cache()
        .lock()
        .entry(name.to_string())
        .or_insert(module.clone());
    Ok(Some(module))
}

/// `import` resolves only the host's stdlib.
#[derive(Debug, Clone, Copy)]
pub(super) struct StdlibResolver;

impl ModuleResolver for StdlibResolver {
    fn resolve(
        &self,
        _engine: &RhaiEngine,
        _source: Option<&str>,
        path: &str,
        pos: Position,
    ) -> Result<Shared<Module>, Box<EvalAltResult>> {
        match stdlib_module(path)? {
            Some(m) => Ok(m),
            None => Err(EvalAltResult::ErrorRuntime(
                format!(
                    "module '{path}' not found: import resolves only the host stdlib (known modules: {})",
                    stdlib_names().collect::<Vec<_>>().join(", ")
                )
                .into(),
                pos,
            )
            .into()),
        }
    }
}

//! `import` in Rhai engines: only the host's stdlib, each module compiled once per process.

use std::collections::HashMap;
use std::sync::OnceLock;

use parking_lot::Mutex;
use rhai::{Engine as RhaiEngine, EvalAltResult, Module, ModuleResolver, Position, Scope, Shared};

use super::engine::configured;
use crate::contract::limits::RhaiLimits;

/// The stdlib module names (the Lua stdlib's, whose Rhai twins live in `stdlib/*.rhai`).
pub(super) fn stdlib_names() -> impl Iterator<Item = &'static str> {
    crate::engine::stdlib::RHAI_MODULES.iter().map(|(n, _)| *n)
}

/// The Rhai source of a stdlib module.
pub(super) fn stdlib_source(name: &str) -> Option<&'static str> {
    crate::engine::stdlib::rhai_module(name)
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

/// The public functions of a stdlib module (its `fn` definitions; `private fn` excluded).
fn module_functions(name: &str) -> Vec<&'static str> {
    let Some(src) = stdlib_source(name) else {
        return Vec::new();
    };
    let mut out: Vec<&'static str> = src
        .lines()
        .filter_map(|l| l.strip_prefix("fn "))
        .filter_map(|rest| rest.split('(').next())
        .map(str::trim)
        .filter(|n| !n.is_empty())
        .collect();
    out.sort_unstable();
    out.dedup();
    out
}

/// For Rhai's "Function not found: fit::newest_frist (array, i64)" on a stdlib module (by its
/// name, or by any alias when some module has a close function): "`fit::newest_frist` is not a
/// function of `fit`; did you mean `newest_first`?". `None` for anything else.
pub(super) fn missing_function(signature: &str) -> Option<String> {
    let called = signature.split(" (").next().unwrap_or(signature).trim();
    let (namespace, function) = called.rsplit_once("::")?;
    let head = format!("`{called}` is not a function of `{namespace}`");
    if stdlib_source(namespace).is_some() {
        let functions = module_functions(namespace);
        return Some(
            match crate::contract::closest(function, functions.iter().copied()) {
                Some(c) if c != function => format!("{head}; did you mean `{c}`?"),
                // The name exists: the arguments did not match any of its definitions.
                Some(_) => return None,
                None => format!("{head} (it has: {})", functions.join(", ")),
            },
        );
    }
    // An alias (`import "fit" as f`): the closest function of any stdlib module.
    let all: Vec<&'static str> = stdlib_names().flat_map(module_functions).collect();
    let c = crate::contract::closest(function, all.iter().copied()).filter(|c| *c != function)?;
    Some(format!("{head}; did you mean `{c}`?"))
}

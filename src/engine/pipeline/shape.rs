//! Whether a script file is a pipeline hook file or an engine file, so `ctxhost check FILE`
//! drives either without being told which.

use std::path::Path;

use crate::contract::limits::HostLimits;
use crate::contract::{Method, closest};
use crate::engine::lua::Lua;
use crate::engine::rhai::Rhai;
use crate::engine::script::{LoadOptions, load::members};

/// True when `path` is a hook file: it defines no engine method an engine must have
/// (`ingest`, `assemble`, `compact`) and defines a hook function, or a member misspelt from
/// one (`colect`). A file that does not boot is not judged a hook file (checking it as an
/// engine reports why it does not load).
pub fn is_hook_file(path: &Path, limits: &HostLimits) -> bool {
    let opts = LoadOptions {
        limits: limits.script.clone(),
        ..Default::default()
    };
    let found = match path.extension().and_then(|e| e.to_str()) {
        Some("lua" | "luau") => members::<Lua>(path, &opts, ()),
        Some("rhai") => members::<Rhai>(path, &opts, limits.rhai.clone()),
        _ => return false,
    };
    let Ok(found) = found else { return false };
    let defines = |m: Method| found.iter().any(|(n, _)| n == m.as_str());
    if Method::ALL.into_iter().any(|m| m.required() && defines(m)) {
        return false;
    }
    let names = || Method::HOOKS.iter().map(|m| m.as_str());
    found
        .iter()
        .any(|(n, _)| names().any(|h| h == n) || closest(n, names()).is_some())
}

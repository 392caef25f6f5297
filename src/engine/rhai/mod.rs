//! Rhai engines: one `.rhai` file whose top-level functions are the lifecycle methods and
//! `fn info()` (or the factory `fn create(ctx)`), compiled once to an AST and run one engine per
//! session (contract §2; the script side is `docs/rhai-api.md`).
//!
//! Loading, validation, the worker thread per instance, params, result conversion and error
//! classification are shared ([`crate::engine::script`]); this module says how a Rhai engine is
//! built and called. Each instance gets an `Engine::new_raw()` with the standard package (built
//! once, shared), the stdlib as the only importable modules, `eval` disabled, the operation,
//! call-depth and expression-depth limits, and an `on_progress` callback that reads the
//! watchdog's flag (no clock) and the memory meter. Rhai's own size limits are off (they make
//! building arrays and maps O(N²)); `host.limits.memoryBytes` is kept by a per-VM meter instead
//! ([`memory`], [`guards`]): guarded growth builtins and the state measured after each call.
//! Values the host receives are checked as well ([`values::to_json`] against the result caps).
//! Per-session state is `this` (bound with `bind_this_ptr`).

pub(crate) mod api;
mod engine;
mod fault;
mod guards;
mod memory;
pub(crate) mod messages;
mod stdlib;
pub(crate) mod values;
pub(crate) mod vm;

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;

use rhai::AST;

use crate::contract::limits::Limits;
pub(crate) use crate::contract::limits::RhaiLimits;
use crate::engine::EngineFactory;
use crate::engine::script::{self, Boot, Fault, Language, Loaded, ScriptFactory};
use crate::error::{EngineError, EngineErrorKind, Op};
use engine::configured;
use fault::{pos_col, pos_line, site_for};
pub(crate) use vm::Vm;

pub(crate) use crate::engine::script::LoadOptions;

/// The Rhai language for [`script`].
#[derive(Debug)]
pub struct Rhai;

/// A compiled `.rhai` engine file.
#[derive(Debug)]
pub struct Program {
    ast: AST,
    /// Public script functions: name → (arity, line).
    functions: HashMap<String, (usize, Option<u32>)>,
    /// The budgets every instance's engine gets.
    limits: RhaiLimits,
}

impl Language for Rhai {
    type Vm = Vm;
    type Program = Program;
    type Limits = RhaiLimits;
    const THREAD: &'static str = "ctxhost-rhai";

    fn compile(
        file: &str,
        source: &str,
        label: &str,
        limits: &Limits,
        lang: &RhaiLimits,
    ) -> Result<Program, EngineError> {
        let engine = configured(lang);
        let mut ast = engine.compile(source).map_err(|e| {
            let pos = e.1;
            let message = e.0.to_string();
            site_for(file, label, limits).fail(
                Op::Load,
                Fault {
                    kind: EngineErrorKind::Syntax,
                    message,
                    line: pos_line(pos),
                    column: pos_col(pos),
                },
            )
        })?;
        ast.set_source(file);
        let lines = function_lines(source);
        let functions = ast
            .iter_functions()
            .filter(|f| f.access == rhai::FnAccess::Public)
            .map(|f| {
                let line = lines.get(f.name).copied();
                (f.name.to_string(), (f.params.len(), line))
            })
            .collect();
        Ok(Program {
            ast,
            functions,
            limits: lang.clone(),
        })
    }

    fn boot(program: &Arc<Program>, boot: &Boot) -> Result<(Vm, Loaded), EngineError> {
        Vm::boot(program, boot)
    }
}

/// A validated Rhai engine file.
pub type RhaiFactory = ScriptFactory<Rhai>;

/// Loads and validates a Rhai engine file (contract §2, §3, §6) with Rhai's own `limits`
/// (typed: `RhaiFactory::load`).
pub fn load(
    path: &Path,
    opts: &LoadOptions,
    limits: &RhaiLimits,
) -> Result<Arc<dyn EngineFactory>, EngineError> {
    script::load::<Rhai>(path, opts, limits.clone())
}

/// The line of each `fn name(` at the start of a line (Rhai's metadata has no positions).
fn function_lines(source: &str) -> HashMap<String, u32> {
    let mut out = HashMap::new();
    for (i, line) in source.lines().enumerate() {
        let t = line.trim_start();
        let t = t.strip_prefix("private ").unwrap_or(t).trim_start();
        if let Some(rest) = t.strip_prefix("fn ") {
            let name: String = rest
                .trim_start()
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_')
                .collect();
            if let Ok(n) = u32::try_from(i + 1) {
                out.entry(name).or_insert(n);
            }
        }
    }
    out
}

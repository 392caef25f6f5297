//! Lua (Luau) engines: one `.lua` / `.luau` file returning the engine table or a factory
//! (contract §2), loaded into a sandboxed Luau VM, validated, and run one VM per session.
//!
//! Loading, validation, the worker thread per instance, params, result conversion and error
//! classification are shared with every language ([`crate::engine::script`]); this module only
//! says how a Luau VM is built (`worker`), how values cross (`marshal`), which messages
//! stay resident in it between calls (`resident`) and how the shared `host` API is registered
//! in Lua (`api`). Inside the VM the watchdog's flag stops runaway scripts at their next call
//! or loop iteration and the memory cap stops allocation bombs.

pub(crate) mod api;
mod fault;
mod guards;
mod hints;
mod interrupt;
mod messages;
pub(crate) mod values;
pub(crate) mod vm;

use std::path::Path;
use std::sync::Arc;

use crate::contract::limits::Limits;
use crate::engine::EngineFactory;
use crate::engine::script::{self, Boot, Language, Loaded, ScriptFactory};
use crate::error::EngineError;

pub(crate) use crate::engine::script::LoadOptions;

/// The Lua language for [`script`]: the program is the source text (each VM loads it).
#[derive(Debug)]
pub struct Lua;

impl Language for Lua {
    type Vm = vm::Vm;
    type Program = Arc<str>;
    type Limits = ();
    const THREAD: &'static str = "ctxhost-lua";

    fn compile(
        _file: &str,
        source: &str,
        _label: &str,
        _limits: &Limits,
        _lang: &(),
    ) -> Result<Arc<str>, EngineError> {
        Ok(source.into())
    }

    fn boot(program: &Arc<Arc<str>>, boot: &Boot) -> Result<(vm::Vm, Loaded), EngineError> {
        vm::Vm::boot(program, boot)
    }
}

/// A validated Lua engine file.
pub type LuaFactory = ScriptFactory<Lua>;

/// Loads and validates a Lua engine file (contract §2, §3, §6) (typed: `LuaFactory::load`).
pub fn load(path: &Path, opts: &LoadOptions) -> Result<Arc<dyn EngineFactory>, EngineError> {
    script::load::<Lua>(path, opts, ())
}

#[cfg(test)]
#[path = "mod_tests.rs"]
mod tests;

//! The Rhai engines: one configured with the package, the message types, the stdlib resolver
//! and every limit (for compiling and for the stdlib), and one per instance with `host`, the
//! stdlib modules, the deadline and logging on top.

use std::sync::{Arc, OnceLock};

use rhai::packages::{Package, StandardPackage};
use rhai::{Dynamic, Engine as RhaiEngine, Module, Shared};

use super::api::{Bridge, HostFault};
use super::guards;
use super::memory::{Meter, OVER_CAP};
use super::messages;
use super::stdlib::{StdlibResolver, stdlib_module, stdlib_names};
use crate::contract::limits::RhaiLimits;
use crate::engine::api::LogLevel;
use crate::engine::sandbox::StopSignals;

/// The standard package, built once and shared by every engine (a clone is a pointer copy).
pub(super) fn package() -> Shared<Module> {
    static PACKAGE: OnceLock<Shared<Module>> = OnceLock::new();
    PACKAGE
        .get_or_init(|| StandardPackage::new().as_shared_module())
        .clone()
}

/// The `message` and `messages` types' functions, built once and shared by every engine.
pub(super) fn message_types() -> Shared<Module> {
    static TYPES: OnceLock<Shared<Module>> = OnceLock::new();
    TYPES.get_or_init(messages::module).clone()
}

/// An engine with the package, the stdlib resolver and every limit, but no `host` module, no
/// deadline and no printing (for compiling and for building stdlib modules).
pub(super) fn configured(limits: &RhaiLimits) -> RhaiEngine {
    let mut e = RhaiEngine::new_raw();
    e.register_global_module(package());
    e.register_global_module(message_types());
    e.register_type_with_name::<messages::ScriptMessage>("message");
    e.register_type_with_name::<messages::MessageList>("messages");
    e.set_module_resolver(StdlibResolver);
    e.disable_symbol("eval");
    e.set_max_call_levels(limits.max_call_levels);
    e.set_max_expr_depths(limits.max_expr_depth, limits.max_expr_depth);
    e.set_max_operations(limits.max_operations);
    e.on_print(|_| {});
    e.on_debug(|_, _, _| {});
    e
}

/// The engine of one instance: [`configured`] plus `host`, the stdlib under its own names (so
/// functions reach `fit::…` after a top-level `import "fit" as fit;`), the deadline, the memory
/// cap and logging.
pub(super) fn instance_engine(
    limits: &RhaiLimits,
    signals: &Arc<StopSignals>,
    meter: &Arc<Meter>,
    host: Shared<Module>,
    bridge: &Arc<Bridge>,
) -> Result<RhaiEngine, String> {
    let mut e = configured(limits);
    // Rhai's own data-size limits walk a whole container after every change to it (building
    // one is O(N^2)); the memory cap is kept by the meter instead (see `memory`). Operators
    // resolve through the registered functions so the guarded `+=`/`+` are the ones that run.
    e.set_fast_operators(false);
    guards::register(&mut e, meter);
    e.register_static_module("host", host);
    for name in stdlib_names() {
        if let Some(m) = stdlib_module(name).map_err(|e| format!("stdlib {name}: {e}"))? {
            e.register_static_module(name, m);
        }
    }
    let s = signals.clone();
    let m = meter.clone();
    e.on_progress(move |_| {
        if m.over() {
            return Some(Dynamic::from(OVER_CAP));
        }
        s.check().map(|_| Dynamic::UNIT)
    });
    e.register_type_with_name::<HostFault>("host fault");
    e.register_fn("to_string", |f: &mut HostFault| f.0.clone());
    e.register_fn("to_debug", |f: &mut HostFault| f.0.clone());
    let b = bridge.clone();
    e.on_print(move |text| b.log(LogLevel::Info, text.to_string()));
    let b = bridge.clone();
    e.on_debug(move |text, _, _| b.log(LogLevel::Debug, text.to_string()));
    Ok(e)
}

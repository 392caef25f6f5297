//! What every script language shares: loading and validating an engine file, the per-instance
//! worker thread and deadline plumbing, the params each lifecycle method receives, turning a
//! script's converted result into the contract's types, and classifying failures.
//!
//! A language adapter implements [`Language`] (compile a file, boot a VM) and [`ScriptVm`] (call
//! one lifecycle function with prepared params and hand back its result as JSON, or as host
//! messages for `assemble`). Everything else is written once here, so Lua and Rhai engines
//! validate, fail and report identically:
//!
//! - [`load`](mod@load): reading, compiling and validating a file into a [`ScriptFactory`];
//! - [`instance`]: [`WorkerVm`](instance::WorkerVm), the transport the shared [`Instance`](crate::engine::instance::Instance)
//!   runs over ([`ScriptInstance`]);
//! - [`site`]: [`Site`], where failures are classified and located;
//! - [`convert`]: [`Budget`] / [`ConvError`], the size and shape checks of script values;
//! - [`result`]: script results as the contract's types;
//! - [`context`] and [`rollbacks`]: what every VM keeps the same way.

pub(crate) mod context;
pub(crate) mod convert;
pub(crate) mod instance;
pub(crate) mod language;
pub(crate) mod load;
pub(crate) mod result;
pub(crate) mod rollbacks;
pub(crate) mod site;

pub(crate) use context::{ContextChange, ContextSeen, context_change, held_context};
pub(crate) use convert::{Budget, ConvError, Nesting, number, written_len};
pub use instance::ScriptInstance;
pub use language::ScriptVm;
pub(crate) use language::{
    AssembledFields, Boot, Expect, Feed, Language, Loaded, MessageRef, Reply, Returned,
};
pub use load::LoadOptions;
pub(crate) use load::{ScriptFactory, load};
pub use result::info_from_json;
pub(crate) use result::{at_index, check_count, json_reply, messages_error};
pub(crate) use rollbacks::Rollbacks;
pub(crate) use site::{Fault, Site};

use crate::error::ScriptLocation;

pub(crate) use crate::contract::limits::WORKER_STACK;

/// A location in a script file, for errors.
pub(crate) fn located(file: &str, line: Option<u32>) -> Option<ScriptLocation> {
    Some(ScriptLocation::new(file, line))
}

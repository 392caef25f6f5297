//! Process isolation (`host.isolation: "process"`): each engine instance runs in a child
//! process the host kills at deadline + grace, so a call stuck in native code stops for good
//! and its memory goes back to the OS — a hard guarantee for a gateway that runs other
//! people's engines. (The default, `thread`, runs the VM on a worker thread of this process:
//! such a call is *abandoned* and its thread runs on, see `crate::sandbox`.)
//!
//! # How it works
//!
//! - One child per engine instance (one per session), plus a short-lived one that loads and
//!   validates the file when the engine is loaded. A child is the ordinary in-process VM
//!   (loaded as [`crate::engine::load`] loads it) behind [`child_main`], a loop over newline-delimited
//!   JSON on its stdin/stdout (`wire`); its stderr is the child's log, forwarded to this
//!   process's `tracing` (target `ctxhost::engine::isolation::child`).
//! - Each lifecycle call carries its params and only the context messages the child does not
//!   hold yet (the child keeps the session's context resident, as a VM does). Messages an
//!   `assemble` result keeps from the context come back as positions, so they stay the very
//!   messages of the session.
//! - `host` functions: `host.tokens` (the child counts with the configured `host.tokenizer`),
//!   `host.repairPairing`, `host.now` and `host.summarize` with the built-in summarizer run in
//!   the child. `host.complete`, `host.search`, `host.fetch`, `host.delegateCompaction`,
//!   `host.log.*` (so the per-engine log limit holds across sessions) and `host.summarize`
//!   when the host's summarizer asks a model are sent back to the parent during the call and
//!   answered from the parent's [`HostCall`](crate::engine::api::HostCall) through the same
//!   `API` table. As in process, only their waits (a model, the client's
//!   compaction) are outside the deadline: the parent's reply says how much of its time was a
//!   wait, and the rest counts against the call's deadline in the child as in the parent.
//! - Results come back as the script returned them (converted to JSON by the child's VM) and
//!   are typed by the one `Instance` and checked by the session in
//!   the parent, like any engine's: the child is never trusted with the contract.
//! - Deadline: the parent waits deadline + grace (plus the waits of the `host` requests it
//!   served for the child), then SIGKILLs and reaps the child; the call fails with kind `Deadline`
//!   (the engine is quarantined and `legacy` answers). A child that dies (crash, abort, OOM
//!   kill) fails the call with kind `Runtime` naming the exit status and its last log line
//!   (`Memory` when it died of a failed allocation). A dead child is never reused; the next
//!   instance starts a fresh one. A child limits its own address space (`RLIMIT_AS`) to
//!   [`child_address_space`] of the VM's memory cap, so a native allocation bomb cannot take
//!   the machine.
//!
//! # The child program
//!
//! By default the child is this very program started with the argument
//! [`CHILD_ARG`] (`__engine-child`): the `ctxhost` CLI answers it by calling [`child_main`].
//! A program embedding the library that turns isolation on offers the child the same way, or
//! names another program with
//! [`HostBuilder::child_command`](crate::runtime::HostBuilder::child_command):
//!
//! ```no_run
//! // First thing in `main`:
//! if std::env::args().nth(1).as_deref() == Some(ctxhost::engine::isolation::CHILD_ARG) {
//!     std::process::exit(ctxhost::engine::isolation::child_main());
//! }
//! // ... the program itself, with `host.isolation: "process"` in its config ...
//! ```

mod child;
mod factory;
mod instance;
mod process;
pub(crate) mod wire;

use std::ffi::OsString;
use std::path::PathBuf;
use std::sync::Arc;

pub use child::child_main;
pub use factory::ProcessFactory;

pub use crate::contract::limits::Isolation;
use crate::contract::limits::RhaiLimits;
use crate::engine::{EngineFactory, LoadOptions};
use crate::error::EngineError;
use crate::services::tokens::Tokenizer;

/// The argument that makes the `ctxhost` program (or an embedder's) serve as an engine child.
pub const CHILD_ARG: &str = "__engine-child";

/// The program started as an engine child, with its arguments and extra environment.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ChildCommand {
    /// The executable.
    pub program: PathBuf,
    /// Its arguments.
    pub args: Vec<OsString>,
    /// Environment variables set for it (on top of this process's).
    pub env: Vec<(OsString, OsString)>,
}

impl ChildCommand {
    /// This program with [`CHILD_ARG`], which the `ctxhost` CLI answers.
    pub fn current_exe() -> Result<Self, String> {
        let program = std::env::current_exe()
            .map_err(|e| format!("cannot find this program to start engine children: {e}"))?;
        Ok(ChildCommand {
            program,
            args: vec![CHILD_ARG.into()],
            env: Vec::new(),
        })
    }
}

/// What a process-isolated engine needs beside the ordinary load options.
#[derive(Clone, Debug)]
pub struct ProcessOptions {
    /// The child program.
    pub command: ChildCommand,
    /// The tokenizer the child counts `host.tokens` with (the host's `host.tokenizer`).
    pub tokenizer: Tokenizer,
    /// Rhai's own limits.
    pub rhai: RhaiLimits,
}

/// The address space a child may use: the VM's memory cap twice over, plus 2 GiB for the
/// program itself, its threads' stacks and allocator arenas.
pub fn child_address_space(memory_bytes: usize) -> u64 {
    (memory_bytes as u64)
        .saturating_mul(2)
        .saturating_add(2 << 30)
}

/// Loads an engine file in a child process (which validates it and exits) and returns the
/// factory whose instances each run in their own child.
pub fn load(
    path: &std::path::Path,
    opts: &LoadOptions,
    process: &ProcessOptions,
) -> Result<Arc<dyn EngineFactory>, EngineError> {
    Ok(Arc::new(ProcessFactory::load(path, opts, process)?))
}

//! The `pipeline` engine (issue 22): many small hook scripts composed behind the one
//! [`Engine`](crate::engine::Engine) trait, so validation, the sandbox, limits, fallback,
//! replay and serve work for it unchanged.
//!
//! A hook file declares `info` and any of `collect`, `project`, `prune`, `compactionPlan` and
//! the observers `beforeCompaction`, `afterCompaction`, `afterAppend`. Per model call the
//! pipeline runs `collect` → `project` and maps the contributions onto the contract; only under
//! token pressure `prune` (in memory, each hook seeing the previous one's result) and, at
//! compaction, `compactionPlan`. A hook that fails is logged, skipped and quarantined alone;
//! the call is always answered.
//!
//! - `hook`: what a hook is to the pipeline (a script of either language, in this process or
//!   in a child under `host.isolation: "process"`, or a `builtin` hook);
//! - `cell`: one configured hook, reloaded alone, and its record;
//! - `contribution`: the blocks hooks contribute, fitted and placed;
//! - `shape`: whether a file is a hook file (for `check`);
//! - `spec`: what the pipeline loads from, resolved from the config by its caller.

pub(crate) mod builtin;
pub(crate) mod cell;
pub(crate) mod contribution;
pub(crate) mod hook;
pub(crate) mod shape;
pub(crate) mod spec;

mod assemble;
mod context;
mod instance;
mod lifecycle;
mod load;

pub use cell::HookStatus;
pub use instance::Pipeline;
pub use load::{HookReport, PipelineFactory, load, load_with};
pub use shape::is_hook_file;
pub use spec::{HookEntry, HookSpec, PipelineSpec};

pub use crate::contract::PIPELINE_ID;

//! The `pipeline` engine (issue 22): many small hook scripts composed behind the one
//! [`Engine`] trait, so validation, the sandbox, limits, fallback, replay and serve work for it
//! unchanged.
//!
//! A hook file declares `info` and any of `collect`, `project`, `prune`, `compactionPlan` and
//! the observers `beforeCompaction`, `afterCompaction`, `afterAppend`. Per model call the
//! pipeline runs `collect` → `project` and maps the contributions onto the contract; only under
//! token pressure `prune` (in memory) and, at compaction, `compactionPlan`. A hook that fails is
//! logged, skipped and quarantined alone; the call is always answered.

pub mod contribution;

mod instance;
mod lifecycle;
mod load;

pub use instance::Pipeline;
pub use load::{PipelineFactory, load};

pub use crate::config::{PIPELINE_ID, PipelineSettings};

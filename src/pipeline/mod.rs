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
mod shape;

pub use instance::Pipeline;
pub use load::{PipelineFactory, load};
pub use shape::check_hook_shape;

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// The slot id that selects the pipeline.
pub const PIPELINE_ID: &str = "pipeline";

/// `host.pipeline`: which hooks run, in which order, and what their contributions may cost.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
pub struct PipelineSettings {
    /// Hook ids, each an entry under `plugins.entries`, in the order they run.
    pub hooks: Vec<String>,
    /// The share of the token budget all contributions together may take. Default 0.25.
    pub contribution_share: f64,
    /// Each hook's time limit per call, in ms. Default 5,000, never above the sandbox deadline.
    pub timeout_ms: u64,
    /// Per-hook time limits, by hook id, overriding `timeoutMs`.
    pub timeouts: BTreeMap<String, u64>,
}

impl Default for PipelineSettings {
    fn default() -> Self {
        PipelineSettings {
            hooks: Vec::new(),
            contribution_share: 0.25,
            timeout_ms: 5_000,
            timeouts: BTreeMap::new(),
        }
    }
}

//! `host.pipeline`: the settings of the `pipeline` engine of hook scripts (which hooks, in
//! which order, their time limits and the share of the budget their contributions may take).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

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

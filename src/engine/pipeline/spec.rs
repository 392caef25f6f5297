//! What the pipeline is loaded from, as plain data its caller resolves from the configuration
//! (`host.pipeline` and the hooks' entries under `plugins.entries`), so the engine layer never
//! reads the config itself.

use std::path::{Path, PathBuf};

use serde_json::Value;

use crate::contract::limits::{HostLimits, Isolation};
use crate::services::tokens::Tokenizer;

/// The pipeline's hooks and the host settings they load and run under.
#[derive(Clone, Debug, PartialEq)]
pub struct PipelineSpec {
    /// The hooks in the order `host.pipeline.hooks` names them.
    pub hooks: Vec<HookSpec>,
    /// The share of the token budget all contributions together may take (0 to 1).
    pub contribution_share: f64,
    /// Script limits; each hook's deadline is at most its [`HookSpec::timeout_ms`].
    pub limits: HostLimits,
    /// Where script hooks' instances run.
    pub isolation: Isolation,
    /// The tokenizer a process-isolated hook's child counts with.
    pub tokenizer: Tokenizer,
    /// Whether the failure policy is `strict` (an info.id that differs from the hook id fails).
    pub strict: bool,
    /// The directory a built-in hook's relative paths resolve against (the config file's).
    pub base_dir: PathBuf,
}

/// One hook as `host.pipeline.hooks` names it.
#[derive(Clone, Debug, PartialEq)]
pub struct HookSpec {
    /// The hook id: an entry id under `plugins.entries`, or a built-in hook (`builtin:...`).
    pub id: String,
    /// Its entry under `plugins.entries`, or `None` when there is none (a built-in hook needs
    /// none).
    pub entry: Option<HookEntry>,
    /// Its time limit per call, in ms (`host.pipeline.timeouts[id]`, else `timeoutMs`).
    pub timeout_ms: u64,
}

/// A hook's entry, its path resolved.
#[derive(Clone, Debug, PartialEq)]
pub struct HookEntry {
    /// A disabled hook is skipped.
    pub enabled: bool,
    /// The hook file (absolute, or relative to the working directory).
    pub file: Option<PathBuf>,
    /// Given to the hook as `ctx.config` (a built-in hook's settings).
    pub config: Value,
}

impl PipelineSpec {
    /// Resolves `path` against [`base_dir`](Self::base_dir) when it is relative.
    pub fn resolve(&self, path: &Path) -> PathBuf {
        if path.is_absolute() {
            path.to_path_buf()
        } else {
            self.base_dir.join(path)
        }
    }
}

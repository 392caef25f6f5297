//! `host`: ctxhost's own settings beside OpenClaw's `plugins` (the failure policy, the
//! tokenizer and window, limits, the turn budget, watching and what `serve` keeps open).

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use super::pipeline::PipelineSettings;
use super::store::StoreSettings;
use crate::contract::limits::{HostLimits, Isolation};
use crate::services::compaction::CompactionSettings;
use crate::services::tokens::Tokenizer;

/// What the host does when an engine fails.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum FailurePolicy {
    /// Quarantine the engine and answer from `legacy` (default).
    #[default]
    Fallback,
    /// Return the error to the caller.
    Strict,
}

/// `host`: ctxhost's settings.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
pub struct HostSettings {
    /// `fallback` (default) or `strict`.
    pub failure_policy: FailurePolicy,
    /// `estimate` (default), `o200k` or `cl100k`.
    pub tokenizer: Tokenizer,
    /// The model's context window in tokens. Default 32,000.
    pub window: u64,
    /// When transcript appends are forced to disk: `entry` (default), `turn` or `none`.
    pub durability: crate::transcript::Durability,
    /// Where sessions are kept: `{kind: "jsonl"}` (default: files under the state
    /// directory), `{kind: "sqlite", path?}` or `{kind: "postgres", url, passwordEnv?}`.
    pub store: StoreSettings,
    /// Built-in compaction.
    pub compaction: CompactionSettings,
    /// Which summarizer writes compaction summaries: `{kind: "builtin"}` (default, offline)
    /// or `{kind: "llm", baseUrl, model, ...}` (an OpenAI-compatible endpoint).
    pub summarizer: crate::services::llm::SummarizerSettings,
    /// What `host.complete` may spend, per engine: `{timeoutMs, maxOutputTokens,
    /// maxCallsPerTurn, maxTokensPerDay}`. It asks the model `host.summarizer` names (`llm`,
    /// or the `serve` client's with `client`), or the embedder's.
    pub complete: crate::services::llm::ModelLimits,
    /// Script limits: per-call deadline and grace, memory, result caps, Rhai's operations.
    pub limits: HostLimits,
    /// How much engine time one turn may take, and what happens to an engine that keeps
    /// taking more.
    pub turn_budget: TurnBudget,
    /// File watching for hot reload.
    pub watch: WatchSettings,
    /// Where `ctxhost engines install` puts engine files; relative to the config file.
    /// Default `engines` beside the config file.
    pub engines_dir: Option<PathBuf>,
    /// Where engine VMs run: `thread` (default: a worker thread in this process; a call stuck
    /// in native code past deadline + grace is abandoned) or `process` (a child process per
    /// engine instance, killed at deadline + grace; see [`crate::engine::isolation`]).
    pub isolation: Isolation,
    /// The `pipeline` engine's hooks and their budget (`plugins.slots.contextEngine:
    /// "pipeline"`).
    pub pipeline: PipelineSettings,
    /// What `ctxhost serve` keeps open (`host.serve`).
    pub serve: ServeSettings,
}
/// `host.turnBudget`: the engine time (every lifecycle call of the configured engine, summed)
/// one turn may take. A per-call deadline stops a runaway call; this catches an engine that
/// stays under the deadline yet makes every turn slow.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
pub struct TurnBudget {
    /// Engine time one turn may take, in ms. Default 1,000.
    pub engine_ms: u64,
    /// What an over-budget turn does: `report` (default: a warning and the turn marked slow)
    /// or `quarantine` (after `strikes` slow turns in a row the engine is quarantined with
    /// kind `Limit`, and `legacy` answers).
    pub on_exceed: SlowEnginePolicy,
    /// Slow turns in a row before `quarantine` acts. Default 3.
    pub strikes: u32,
}

impl Default for TurnBudget {
    fn default() -> Self {
        TurnBudget {
            engine_ms: 1_000,
            on_exceed: SlowEnginePolicy::Report,
            strikes: 3,
        }
    }
}

/// What the host does about an engine that exceeds its turn budget.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum SlowEnginePolicy {
    /// Warn and mark the turn slow.
    #[default]
    Report,
    /// Quarantine the engine after repeated slow turns.
    Quarantine,
}

/// `host.watch`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
pub struct WatchSettings {
    /// Reload engines when their file changes (`ctxhost watch` always does). Default true.
    pub enabled: bool,
    /// Quiet time after the last change before a reload, in ms. Default 200.
    pub debounce_ms: u64,
}

impl Default for WatchSettings {
    fn default() -> Self {
        WatchSettings {
            enabled: true,
            debounce_ms: 200,
        }
    }
}

/// `host.serve`: a gateway's memory follows the sessions in use, not every session ever seen.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
pub struct ServeSettings {
    /// A session no call reached for this long is released (its state saved, its engine
    /// instance disposed; the next call reopens it), in ms. Default 600,000 (ten minutes).
    pub idle_ms: u64,
    /// At most this many sessions open at once; opening one more releases the least recently
    /// used. Default 256.
    pub max_live: usize,
}

impl Default for ServeSettings {
    fn default() -> Self {
        ServeSettings {
            idle_ms: 600_000,
            max_live: 256,
        }
    }
}

impl Default for HostSettings {
    fn default() -> Self {
        HostSettings {
            failure_policy: FailurePolicy::Fallback,
            tokenizer: Tokenizer::Estimate,
            window: 32_000,
            durability: crate::transcript::Durability::default(),
            store: StoreSettings::default(),
            compaction: CompactionSettings::default(),
            summarizer: crate::services::llm::SummarizerSettings::default(),
            complete: crate::services::llm::ModelLimits::default(),
            limits: HostLimits::default(),
            turn_budget: TurnBudget::default(),
            watch: WatchSettings::default(),
            engines_dir: None,
            isolation: Isolation::Thread,
            pipeline: Default::default(),
            serve: ServeSettings::default(),
        }
    }
}

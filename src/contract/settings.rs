//! `runtimeSettings` (schemaVersion 1): read-only facts about the runtime, passed to engines as
//! a host param.

use serde::{Deserialize, Serialize};

/// Read-only facts about the runtime an engine runs in (contract §4).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RuntimeSettings {
    /// Always 1.
    pub schema_version: u32,
    /// Host and mode.
    pub runtime: RuntimeInfo,
    /// The model.
    pub model: ModelInfo,
    /// Which engine was selected and why.
    pub context_engine_selection: EngineSelection,
    /// Token limits.
    pub limits: RuntimeLimits,
    /// Why the runtime is in fallback or degraded mode.
    pub diagnostics: RuntimeDiagnostics,
}

/// `runtimeSettings.runtime`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RuntimeInfo {
    /// Always `"ctxhost"`.
    pub host: String,
    /// `normal`, `fallback` or `degraded`.
    pub mode: String,
}

/// `runtimeSettings.model`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ModelInfo {
    /// The model asked for.
    pub requested: Option<String>,
    /// The model actually used.
    pub resolved: Option<String>,
    /// Its provider.
    pub provider: Option<String>,
}

/// `runtimeSettings.contextEngineSelection`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct EngineSelection {
    /// The selected engine id.
    pub selected_id: Option<String>,
    /// `configured`, `default` or `unknown`.
    pub source: String,
}

/// `runtimeSettings.limits`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RuntimeLimits {
    /// Tokens the prompt may use.
    pub prompt_token_budget: Option<u64>,
    /// Tokens reserved for the reply.
    pub max_output_tokens: Option<u64>,
}

/// `runtimeSettings.diagnostics`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RuntimeDiagnostics {
    /// Why the runtime fell back, if it did.
    pub fallback_reason: Option<String>,
    /// Why the runtime is degraded, if it is.
    pub degraded_reason: Option<String>,
}

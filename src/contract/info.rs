//! An engine's `info` record (contract §3): its identity, the host capabilities it needs per
//! operation, when `maintain` runs, and which host params it accepts.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::contract::message::Extra;

/// The built-in engine's id (contract §9): an empty or `"legacy"` slot selects it, and no
/// configured entry or engine file may take it.
pub const LEGACY_ID: &str = "legacy";

/// The slot id that selects the `pipeline` engine of hook scripts (which needs no entry of its
/// own): reserved like [`LEGACY_ID`], and named by both the config and the engine layer.
pub const PIPELINE_ID: &str = "pipeline";

/// An operation that `hostRequirements` can gate.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum Operation {
    /// A normal turn.
    #[serde(rename = "agent-run")]
    AgentRun,
    /// `/compact`.
    #[serde(rename = "manual-compact")]
    ManualCompact,
    /// Spawning a subagent.
    #[serde(rename = "subagent-spawn")]
    SubagentSpawn,
}

/// What an engine needs the host to support for one operation.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct HostRequirement {
    /// Capability names (`bootstrap`, `assemble-before-prompt`, ...).
    #[serde(default)]
    pub required_capabilities: Vec<String>,
    /// Shown when a capability is missing.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unsupported_message: Option<String>,
}

/// The capabilities ctxhost provides (OpenClaw's embedded host's set).
pub const HOST_CAPABILITIES: [&str; 5] = [
    "bootstrap",
    "assemble-before-prompt",
    "after-turn",
    "maintain",
    "compact",
];

/// When `maintain` runs after a turn.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum TurnMaintenanceMode {
    /// Right after the turn, before the next one starts.
    Foreground,
    /// Deferred until the session is idle.
    Background,
}

/// A host-injected param an engine may opt out of (`acceptedHostParams`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum HostParam {
    /// `sessionKey`
    SessionKey,
    /// `prompt`
    Prompt,
    /// `runtimeSettings`
    RuntimeSettings,
    /// `sessionTarget`
    SessionTarget,
    /// `runtimeContext`
    RuntimeContext,
}

/// An engine's `info` record (contract §3).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct EngineInfo {
    /// Should equal the configured entry id.
    pub id: String,
    /// Human name.
    pub name: String,
    /// Shown by `doctor`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
    /// When true the host never auto-compacts for this engine (§7).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub owns_compaction: Option<bool>,
    /// Capabilities the engine needs per operation; unmet ones fail closed.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub host_requirements: BTreeMap<Operation, HostRequirement>,
    /// When `maintain` runs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub turn_maintenance_mode: Option<TurnMaintenanceMode>,
    /// Which host params the engine receives; `None` = all.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub accepted_host_params: Option<Vec<HostParam>>,
    /// OpenClaw 2026.8+ transcript semantics declaration, kept as given.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub transcript_semantics: Option<Value>,
    /// Members ctxhost does not know; reported as warnings at load.
    #[serde(flatten)]
    pub extra: Extra,
}

impl EngineInfo {
    /// Whether the engine handles all compaction itself.
    pub fn owns_compaction(&self) -> bool {
        self.owns_compaction == Some(true)
    }

    /// Whether the engine receives host param `p`.
    pub fn accepts(&self, p: HostParam) -> bool {
        self.accepted_host_params
            .as_ref()
            .is_none_or(|list| list.contains(&p))
    }
}

/// The known `info` fields, for "did you mean" on unknown ones.
pub const INFO_FIELDS: [&str; 8] = [
    "id",
    "name",
    "version",
    "ownsCompaction",
    "hostRequirements",
    "turnMaintenanceMode",
    "acceptedHostParams",
    "transcriptSemantics",
];

#[cfg(test)]
#[path = "info_tests.rs"]
mod tests;

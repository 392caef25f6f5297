//! The engine contract (ENGINE_CONTRACT.md §3, §4, §6) as plain data: `info`, every lifecycle
//! method's params and result, and the checks the host applies at load and to every result.
//!
//! This module knows no VM. The Lua and Rhai adapters convert script values into these types
//! and call the `check_*` functions here, so every language is validated by the same code.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;

use serde::{Deserialize, Deserializer, Serialize};
use serde_json::Value;

use crate::message::{Extra, Message};

/// A lifecycle method (contract §4).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum Method {
    /// Once per session per engine instance.
    Bootstrap,
    /// One message.
    Ingest,
    /// A turn's messages at once.
    IngestBatch,
    /// Build the context for the model.
    Assemble,
    /// Shrink the session.
    Compact,
    /// After each turn, with a snapshot.
    AfterTurn,
    /// Durable, idempotent turn commit.
    CommitTurn,
    /// Housekeeping after bootstrap, turns and compaction.
    Maintain,
    /// Before a subagent starts.
    PrepareSubagentSpawn,
    /// After a subagent ended.
    OnSubagentEnded,
    /// When the engine instance retires.
    Dispose,
}

impl Method {
    /// Every method, required ones first.
    pub const ALL: [Method; 11] = [
        Method::Ingest,
        Method::Assemble,
        Method::Compact,
        Method::Bootstrap,
        Method::IngestBatch,
        Method::AfterTurn,
        Method::CommitTurn,
        Method::Maintain,
        Method::PrepareSubagentSpawn,
        Method::OnSubagentEnded,
        Method::Dispose,
    ];

    /// The name scripts use.
    pub fn as_str(self) -> &'static str {
        match self {
            Method::Bootstrap => "bootstrap",
            Method::Ingest => "ingest",
            Method::IngestBatch => "ingestBatch",
            Method::Assemble => "assemble",
            Method::Compact => "compact",
            Method::AfterTurn => "afterTurn",
            Method::CommitTurn => "commitTurn",
            Method::Maintain => "maintain",
            Method::PrepareSubagentSpawn => "prepareSubagentSpawn",
            Method::OnSubagentEnded => "onSubagentEnded",
            Method::Dispose => "dispose",
        }
    }

    /// The method with this script name.
    pub fn from_name(name: &str) -> Option<Method> {
        Method::ALL.into_iter().find(|m| m.as_str() == name)
    }

    /// Whether every engine must define it.
    pub fn required(self) -> bool {
        matches!(self, Method::Ingest | Method::Assemble | Method::Compact)
    }
}

impl fmt::Display for Method {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The known top-level members of an engine besides the methods.
pub const KNOWN_MEMBERS: [&str; 1] = ["info"];

/// The closest known member name to a misspelt one, for "did you mean" messages.
pub fn closest_member(name: &str) -> Option<&'static str> {
    let candidates = Method::ALL
        .iter()
        .map(|m| m.as_str())
        .chain(KNOWN_MEMBERS.iter().copied());
    closest(name, candidates)
}

/// The closest of `candidates` to `name` (case-insensitive, Jaro-Winkler ≥ 0.8).
pub fn closest<'a>(name: &str, candidates: impl Iterator<Item = &'a str>) -> Option<&'a str> {
    let lower = name.to_lowercase();
    candidates
        .map(|c| (strsim::jaro_winkler(&lower, &c.to_lowercase()), c))
        .filter(|(score, _)| *score >= 0.8)
        .max_by(|a, b| a.0.total_cmp(&b.0))
        .map(|(_, c)| c)
}

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

/// A problem found while checking an engine at load.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct LoadFinding {
    /// Errors make the engine unusable; warnings are reported and the engine runs.
    pub severity: Severity,
    /// The message, naming the member.
    pub message: String,
}

/// How bad a finding is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum Severity {
    /// The engine cannot be used.
    Error,
    /// Reported; the engine runs.
    Warning,
}

/// Checks an engine at load: `info`, the member list, and the configured id (contract §6).
///
/// `members` are the engine's top-level names with whether each is a function.
pub fn check_engine_shape(
    info: &EngineInfo,
    members: &[(String, bool)],
    configured_id: Option<&str>,
    strict: bool,
) -> Vec<LoadFinding> {
    let mut out = Vec::new();
    let error = |m: String| LoadFinding {
        severity: Severity::Error,
        message: m,
    };
    let warning = |m: String| LoadFinding {
        severity: Severity::Warning,
        message: m,
    };
    if info.id.trim().is_empty() {
        out.push(error("info.id must be a non-empty string".into()));
    }
    if info.name.trim().is_empty() {
        out.push(error("info.name must be a non-empty string".into()));
    }
    for key in info.extra.keys() {
        let hint = closest(key, INFO_FIELDS.iter().copied())
            .map(|c| format!(" (did you mean `{c}`?)"))
            .unwrap_or_default();
        out.push(warning(format!("unknown info field `{key}`{hint}")));
    }
    for method in Method::ALL {
        let found = members.iter().find(|(n, _)| n == method.as_str());
        match found {
            None if method.required() => {
                out.push(error(format!("required function `{method}` is missing")))
            }
            Some((_, false)) => out.push(error(format!("`{method}` must be a function"))),
            _ => {}
        }
    }
    for (name, _) in members {
        if Method::from_name(name).is_some() || KNOWN_MEMBERS.contains(&name.as_str()) {
            continue;
        }
        let hint = closest_member(name)
            .map(|c| format!(" (did you mean `{c}`?)"))
            .unwrap_or_default();
        out.push(warning(format!("unknown member `{name}`{hint}")));
    }
    if let Some(cfg) = configured_id
        && !info.id.is_empty()
        && cfg != info.id
    {
        let m = format!(
            "info.id \"{}\" differs from the configured id \"{cfg}\"",
            info.id
        );
        out.push(if strict { error(m) } else { warning(m) });
    }
    out
}

/// The capabilities an operation needs that this host lacks, with the engine's message.
pub fn unmet_requirements(info: &EngineInfo, op: Operation) -> Option<String> {
    let req = info.host_requirements.get(&op)?;
    let missing: Vec<&str> = req
        .required_capabilities
        .iter()
        .map(String::as_str)
        .filter(|c| !HOST_CAPABILITIES.contains(c))
        .collect();
    if missing.is_empty() {
        return None;
    }
    let op_name = serde_json::to_value(op)
        .ok()
        .and_then(|v| v.as_str().map(str::to_owned))
        .unwrap_or_default();
    let mut msg = format!(
        "context engine \"{}\" cannot run operation \"{op_name}\" on ctxhost. Missing host capabilities: {}. Host capabilities: {}.",
        info.id,
        missing.join(", "),
        HOST_CAPABILITIES.join(", ")
    );
    if let Some(extra) = &req.unsupported_message {
        msg.push(' ');
        msg.push_str(extra);
    }
    Some(msg)
}

// ---------------------------------------------------------------------------------------------
// runtimeSettings (schemaVersion 1)

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

// ---------------------------------------------------------------------------------------------
// Params. Messages are not part of these structs: the adapters give scripts the session's
// context messages (resident in the VM) under `messages`.

/// `bootstrap` params.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct BootstrapParams {
    /// The session.
    pub session_id: String,
    /// Host param.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub session_key: Option<String>,
    /// The transcript file.
    pub session_file: String,
    /// Host param.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub runtime_settings: Option<RuntimeSettings>,
}

/// `ingest` params (the message goes alongside, under `message`).
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct IngestParams {
    /// The session.
    pub session_id: String,
    /// Host param.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub session_key: Option<String>,
    /// The message being ingested.
    pub message: Arc<Message>,
    /// Whether this is a heartbeat turn.
    pub is_heartbeat: bool,
}

/// `ingestBatch` params.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct IngestBatchParams {
    /// The session.
    pub session_id: String,
    /// Host param.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub session_key: Option<String>,
    /// The turn's new messages, in order.
    pub messages: Vec<Arc<Message>>,
    /// Whether this is a heartbeat turn.
    pub is_heartbeat: bool,
}

/// `assemble` params (the session's context goes alongside, under `messages`).
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct AssembleParams {
    /// The session.
    pub session_id: String,
    /// Host param.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub session_key: Option<String>,
    /// Tokens the assembled context (plus `systemPromptAddition`) may use.
    pub token_budget: u64,
    /// Host param: the user's prompt text for this turn.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub prompt: Option<String>,
    /// The model id.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// Tool names available this turn.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub available_tools: Option<Vec<String>>,
    /// Host param.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub runtime_settings: Option<RuntimeSettings>,
}

/// Why `compact` was called, as OpenClaw reports it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum CompactionTarget {
    /// Preflight or overflow recovery: get under the budget.
    Budget,
    /// `/compact`: compact now.
    Threshold,
}

/// `compact` params.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CompactParams {
    /// The session.
    pub session_id: String,
    /// Host param.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_key: Option<String>,
    /// The budget to get under.
    pub token_budget: u64,
    /// Compact even when under the threshold.
    pub force: bool,
    /// The session context's tokens as the host measured them.
    pub current_token_count: u64,
    /// Why compaction runs.
    pub compaction_target: CompactionTarget,
    /// User instructions from `/compact <text>`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub custom_instructions: Option<String>,
    /// Host param.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub runtime_settings: Option<RuntimeSettings>,
}

/// `afterTurn` params (the context snapshot goes alongside, under `messages`).
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct AfterTurnParams {
    /// The session.
    pub session_id: String,
    /// Host param.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub session_key: Option<String>,
    /// How many context messages there were before this turn's user message.
    pub pre_prompt_message_count: usize,
    /// The turn's budget.
    pub token_budget: u64,
    /// Whether this is a heartbeat turn.
    pub is_heartbeat: bool,
    /// Host param.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub runtime_settings: Option<RuntimeSettings>,
}

/// `commitTurn` params.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct CommitTurnParams {
    /// The session.
    pub session_id: String,
    /// Host param.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub session_key: Option<String>,
    /// A key that identifies the turn; committing it twice must be a no-op.
    pub advancement_key: String,
    /// The turn, user message to final reply.
    pub messages: Vec<Arc<Message>>,
}

/// Why `maintain` runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum MaintainReason {
    /// After bootstrap.
    Bootstrap,
    /// After a turn.
    Turn,
    /// After a compaction.
    Compaction,
}

/// `maintain` params.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct MaintainParams {
    /// The session.
    pub session_id: String,
    /// Host param.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub session_key: Option<String>,
    /// Why.
    pub reason: MaintainReason,
    /// Host param.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub runtime_settings: Option<RuntimeSettings>,
}

/// How a subagent sees its parent's context.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum ContextMode {
    /// A fresh context.
    Isolated,
    /// A copy of the parent's.
    Fork,
}

/// `prepareSubagentSpawn` params.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SubagentSpawnParams {
    /// The parent session.
    pub session_id: String,
    /// The parent's key.
    pub parent_session_key: String,
    /// The child's key.
    pub child_session_key: String,
    /// How the child sees context.
    pub context_mode: ContextMode,
    /// How long the child may live.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ttl_ms: Option<u64>,
}

/// Why a subagent ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum SubagentEndReason {
    /// Deleted by the user.
    Deleted,
    /// Finished its task.
    Completed,
    /// Removed by a sweep.
    Swept,
    /// Released by its parent.
    Released,
}

/// `onSubagentEnded` params.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SubagentEndedParams {
    /// The parent session.
    pub session_id: String,
    /// The child's key.
    pub child_session_key: String,
    /// Why it ended.
    pub reason: SubagentEndReason,
}

// ---------------------------------------------------------------------------------------------
// Results. Counts arrive from scripts as doubles: [`count`] accepts `3.0`, rejects NaN, infinities,
// negatives and fractions.

/// Deserializes a whole, non-negative count from any JSON or script number.
pub fn count<'de, D: Deserializer<'de>>(d: D) -> Result<u64, D::Error> {
    let n = f64::deserialize(d)?;
    to_count(n).map_err(serde::de::Error::custom)
}

/// Like [`count`], for optional fields.
pub fn opt_count<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u64>, D::Error> {
    match Option::<f64>::deserialize(d)? {
        None => Ok(None),
        Some(n) => to_count(n).map(Some).map_err(serde::de::Error::custom),
    }
}

/// A whole non-negative number below 2^53, or a message saying what is wrong.
pub fn to_count(n: f64) -> Result<u64, String> {
    if !n.is_finite() {
        return Err(format!("expected a whole number, got {n}"));
    }
    if n < 0.0 {
        return Err(format!("expected a non-negative number, got {n}"));
    }
    if n.fract() != 0.0 || n > 9_007_199_254_740_992.0 {
        return Err(format!("expected a whole number, got {n}"));
    }
    Ok(n as u64)
}

/// `bootstrap` result.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct BootstrapResult {
    /// Whether the engine set itself up.
    pub bootstrapped: bool,
    /// How many messages it imported.
    #[serde(default, deserialize_with = "opt_count")]
    pub imported_messages: Option<u64>,
    /// Why not, when it did not.
    #[serde(default)]
    pub reason: Option<String>,
}

/// `ingest` result.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct IngestResult {
    /// Whether the engine stored the message.
    pub ingested: bool,
}

/// `ingestBatch` result.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct IngestBatchResult {
    /// How many messages the engine stored.
    #[serde(deserialize_with = "count")]
    pub ingested_count: u64,
}

/// `assemble`'s declaration of whose numbers the pre-prompt check trusts.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PromptAuthority {
    /// The assembled context is what counts (default).
    Assembled,
    /// Check the pre-assembly estimate too.
    PreassemblyMayOverflow,
}

/// `assemble` result.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct AssembleResult {
    /// The context for the model, in order.
    pub messages: Vec<Arc<Message>>,
    /// The engine's own token estimate; the host measures too and reports the difference.
    pub estimated_tokens: f64,
    /// Text the host adds to the system prompt; counted into the budget.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub system_prompt_addition: Option<String>,
    /// Whose numbers the pre-prompt overflow check trusts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prompt_authority: Option<PromptAuthority>,
    /// OpenClaw's projection hint, kept as given.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub context_projection: Option<Value>,
}

/// The details of a compaction that happened.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CompactionOutcome {
    /// The summary; the host appends it to the transcript as a `compactionSummary`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub summary: Option<String>,
    /// The first entry kept verbatim after the summary.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub first_kept_entry_id: Option<String>,
    /// Context tokens before.
    #[serde(deserialize_with = "count")]
    pub tokens_before: u64,
    /// Context tokens after.
    #[serde(
        default,
        deserialize_with = "opt_count",
        skip_serializing_if = "Option::is_none"
    )]
    pub tokens_after: Option<u64>,
    /// Engine-specific details (read / modified files, ...).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub details: Option<Value>,
    /// A successor session id, when the engine moved the session.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_id: Option<String>,
    /// A successor session target.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_target: Option<Value>,
}

/// `compact` result.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CompactResult {
    /// False when compaction failed.
    pub ok: bool,
    /// True when the session shrank.
    pub compacted: bool,
    /// Why nothing happened, or what went wrong.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// What happened.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result: Option<CompactionOutcome>,
}

impl CompactResult {
    /// A compaction that did nothing, with the reason.
    pub fn nothing(ok: bool, reason: impl Into<String>) -> Self {
        CompactResult {
            ok,
            compacted: false,
            reason: Some(reason.into()),
            result: None,
        }
    }
}

/// `commitTurn` result.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CommitTurnResult {
    /// `committed` or `duplicate`.
    pub status: CommitStatus,
}

/// Whether a turn commit was new.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum CommitStatus {
    /// First time this key was committed.
    Committed,
    /// The key was committed before; nothing changed.
    Duplicate,
}

/// `maintain` result.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct MaintainResult {
    /// Whether anything changed.
    pub changed: bool,
    /// Transcript bytes freed.
    #[serde(default, deserialize_with = "count")]
    pub bytes_freed: u64,
    /// Entries rewritten.
    #[serde(default, deserialize_with = "count")]
    pub rewritten_entries: u64,
    /// Why nothing changed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

// ---------------------------------------------------------------------------------------------
// Result checks beyond what the types enforce.

/// Caps on what an engine may return (contract §5, configurable under `host.limits`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
pub struct ResultLimits {
    /// Most messages one result may hold. Default 100,000.
    pub max_result_messages: usize,
    /// Most bytes of text in one result (all strings added up). Default 64 MiB.
    pub max_result_bytes: usize,
    /// Most bytes in one summary or `systemPromptAddition`. Default 1 MiB.
    pub max_text_bytes: usize,
}

impl Default for ResultLimits {
    fn default() -> Self {
        ResultLimits {
            max_result_messages: 100_000,
            max_result_bytes: 64 << 20,
            max_text_bytes: 1 << 20,
        }
    }
}

/// Checks an `assemble` result's numbers and sizes; returns what is wrong.
pub fn check_assemble(r: &AssembleResult, limits: &ResultLimits) -> Result<(), String> {
    if !r.estimated_tokens.is_finite() || r.estimated_tokens < 0.0 {
        return Err(format!(
            "estimatedTokens must be a finite non-negative number, got {}",
            r.estimated_tokens
        ));
    }
    if r.messages.len() > limits.max_result_messages {
        return Err(format!(
            "{} messages exceed the limit of {}",
            r.messages.len(),
            limits.max_result_messages
        ));
    }
    if let Some(add) = &r.system_prompt_addition
        && add.len() > limits.max_text_bytes
    {
        return Err(format!(
            "systemPromptAddition of {} bytes exceeds the limit of {}",
            add.len(),
            limits.max_text_bytes
        ));
    }
    Ok(())
}

/// Checks a `compact` result for consistency; returns what is wrong.
pub fn check_compact(r: &CompactResult, limits: &ResultLimits) -> Result<(), String> {
    if r.compacted && !r.ok {
        return Err("compacted is true but ok is false".into());
    }
    if let Some(out) = &r.result
        && let Some(s) = &out.summary
        && s.len() > limits.max_text_bytes
    {
        return Err(format!(
            "summary of {} bytes exceeds the limit of {}",
            s.len(),
            limits.max_text_bytes
        ));
    }
    Ok(())
}

#[cfg(test)]
#[path = "mod_tests.rs"]
mod tests;

//! The params of each lifecycle method (contract §4), with the enums they carry.
//!
//! Messages are not part of these structs: the adapters give scripts the session's context
//! messages (resident in the VM) under `messages`.

use std::sync::Arc;

use serde::{Deserialize, Serialize};

use super::settings::RuntimeSettings;
use crate::contract::message::Message;

/// `bootstrap` params.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
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
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
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
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
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
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
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
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
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
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
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
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
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
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
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
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum ContextMode {
    /// A fresh context.
    Isolated,
    /// A copy of the parent's.
    Fork,
}

/// `prepareSubagentSpawn` params.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
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
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
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
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SubagentEndedParams {
    /// The parent session.
    pub session_id: String,
    /// The child's key.
    pub child_session_key: String,
    /// Why it ended.
    pub reason: SubagentEndReason,
}

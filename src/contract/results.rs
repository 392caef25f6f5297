//! The results of each lifecycle method (contract §4), as the host deserializes them from
//! scripts.
//!
//! Counts arrive from scripts as doubles: [`count`] accepts `3.0`, rejects NaN, infinities,
//! negatives and fractions.

use std::sync::Arc;

use serde::{Deserialize, Deserializer, Serialize};
use serde_json::Value;

use crate::contract::message::Message;

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

impl IngestBatchResult {
    /// Every message of the batch taken in: the answer of an engine that keeps no count of
    /// its own (the default `ingestBatch`, the pipeline).
    pub fn all_of(params: &super::IngestBatchParams) -> Self {
        IngestBatchResult {
            ingested_count: params.messages.len() as u64,
        }
    }
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

#[cfg(test)]
#[path = "results_tests.rs"]
mod tests;

//! Built-in compaction (contract §9): summarize everything before a cut point into one
//! `compactionSummary`, keeping the most recent `keepRecentTokens` verbatim.
//!
//! This is what `legacy` runs, what `host.delegateCompaction` runs for script engines, and what
//! the turn driver's auto-compaction runs for engines that do not own compaction. It only
//! computes a [`CompactResult`]; the session appends the summary to the transcript.

use std::sync::Arc;
use std::sync::atomic::AtomicBool;

use serde::{Deserialize, Serialize};
use serde_json::json;

use crate::contract::message::{CompactionSummaryMessage, Extra, Message, MessageBody, Role};
use crate::contract::{CompactParams, CompactResult, CompactionOutcome};
use crate::services::summarize::{IdentifierPolicy, Summarizer, SummaryRequest};
use crate::services::tokens::TokenCache;

/// Compaction knobs (OpenClaw's names and defaults).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
pub struct CompactionSettings {
    /// Recent tokens kept verbatim. Default 20,000; never more than half the turn's budget.
    pub keep_recent_tokens: u64,
    /// Output reserve: `min(reserveTokensFloor, 25% of the window)`. Default floor 20,000.
    pub reserve_tokens_floor: u64,
    /// Largest summary, in tokens. Default 4,096; never more than a quarter of the budget.
    pub max_summary_tokens: u64,
    /// Identifier handling in summaries. Default `strict`.
    pub identifier_policy: IdentifierPolicy,
}

impl Default for CompactionSettings {
    fn default() -> Self {
        CompactionSettings {
            keep_recent_tokens: 20_000,
            reserve_tokens_floor: 20_000,
            max_summary_tokens: 4_096,
            identifier_policy: IdentifierPolicy::Strict,
        }
    }
}

impl CompactionSettings {
    /// Tokens reserved for the model's output in a window.
    pub fn reserve_tokens(&self, window: u64) -> u64 {
        self.reserve_tokens_floor.min(window / 4)
    }

    /// Recent tokens to keep for a given budget.
    pub fn keep_for(&self, budget: u64) -> u64 {
        self.keep_recent_tokens.min(budget / 2)
    }

    /// The summary's token budget for a given turn budget.
    pub fn summary_tokens_for(&self, budget: u64) -> u64 {
        self.max_summary_tokens.min(budget / 4).max(32)
    }
}

/// Runs built-in compaction over a session context and says what it would append. The kept
/// part is the newest `keepRecentTokens`, less when more would leave no room for the summary.
/// The summary is waited for on this thread; setting `cancel` (the turn's cancel flag) drops
/// it, and the result is then a failed compaction.
pub fn compact(
    context: &[Arc<Message>],
    tokens: &TokenCache,
    summarizer: &dyn Summarizer,
    settings: &CompactionSettings,
    params: &CompactParams,
    cancel: &AtomicBool,
) -> CompactResult {
    let tokens_before = tokens.messages(context);
    if !params.force && tokens_before <= params.token_budget {
        return CompactResult::nothing(
            true,
            format!(
                "context is within the budget ({tokens_before} of {} tokens)",
                params.token_budget
            ),
        );
    }
    let (previous, rest) = match context.split_first() {
        Some((first, rest)) if first.role() == Role::CompactionSummary => {
            (Some(first.text()), rest)
        }
        _ => (None, context),
    };
    let offset = context.len() - rest.len();
    let keep = settings.keep_for(params.token_budget);
    let Some(cut) = cut_point(rest, keep, tokens) else {
        return CompactResult::nothing(
            true,
            format!(
                "nothing to compact: the {} messages after the last summary ({} tokens) are all within the {keep} recent tokens kept verbatim",
                rest.len(),
                tokens.messages(rest)
            ),
        );
    };
    // What is kept verbatim must leave room for the summary: a kept part that alone fills the
    // budget (a large tool result just after the cut) moves the cut forward, a message at a
    // time, never to a tool result.
    let room = params
        .token_budget
        .saturating_sub(settings.summary_tokens_for(params.token_budget));
    let mut cut = cut;
    while tokens.messages(&rest[cut..]) > room {
        match (cut + 1..rest.len()).find(|j| rest[*j].role() != Role::ToolResult) {
            Some(next) => cut = next,
            None => break,
        }
    }
    let span = &rest[..cut];
    let kept = &context[offset + cut..];
    let request = SummaryRequest {
        messages: span,
        previous_summary: previous.as_deref(),
        max_tokens: settings.summary_tokens_for(params.token_budget),
        instructions: params.custom_instructions.as_deref(),
        identifier_policy: settings.identifier_policy,
    };
    let counter = tokens.counter();
    let summary =
        match crate::services::llm::drive::summarize(summarizer, request, counter.as_ref(), cancel)
        {
            Ok(s) => s,
            Err(e) => return CompactResult::nothing(false, format!("summarizer failed: {e}")),
        };
    let first_kept = kept[0].id.clone();
    let summary_message = summary_message(&summary.text, tokens_before, None, &first_kept);
    let tokens_after = tokens.counter().count_message(&summary_message) + tokens.messages(kept);
    if tokens_after >= tokens_before {
        return CompactResult::nothing(
            true,
            format!(
                "compaction would not free tokens: {tokens_before} before, {tokens_after} after summarizing {} messages",
                span.len()
            ),
        );
    }
    CompactResult {
        ok: true,
        compacted: true,
        reason: None,
        result: Some(CompactionOutcome {
            summary: Some(summary.text),
            first_kept_entry_id: Some(first_kept),
            tokens_before,
            tokens_after: Some(tokens_after),
            details: Some(json!({
                "readFiles": summary.read_files,
                "modifiedFiles": summary.modified_files,
                "summarizedMessages": span.len(),
                "identifiersFound": summary.identifiers_found,
                "identifiersKept": summary.identifiers_kept,
                "summarizer": summary.summarizer,
                "carriedIdentifiersFound": summary.carried_found,
                "carriedIdentifiersKept": summary.carried_kept,
            })),
            session_id: None,
            session_target: None,
        }),
    }
}

/// The index in `messages` of the first message kept verbatim, walking back from the newest
/// until `keep` tokens are kept. Never a `toolResult`, so a result stays with its call. `None`
/// when nothing before the cut would be summarized.
pub fn cut_point(messages: &[Arc<Message>], keep: u64, tokens: &TokenCache) -> Option<usize> {
    let mut acc = 0u64;
    let mut reached = None;
    for (i, m) in messages.iter().enumerate().rev() {
        acc += tokens.message(m);
        if acc >= keep {
            reached = Some(i);
            break;
        }
    }
    let i = reached?;
    let valid = |j: &usize| messages[*j].role() != Role::ToolResult;
    let cut = (i..messages.len())
        .find(valid)
        .or_else(|| (0..i).rev().find(valid))?;
    (cut > 0).then_some(cut)
}

/// The `compactionSummary` message the session appends for a compaction.
pub fn summary_message(
    summary: &str,
    tokens_before: u64,
    tokens_after: Option<u64>,
    first_kept_entry_id: &str,
) -> Message {
    Message::new(MessageBody::CompactionSummary(CompactionSummaryMessage {
        summary: summary.to_owned(),
        tokens_before,
        tokens_after,
        first_kept_entry_id: Some(first_kept_entry_id.to_owned()),
        extra: Extra::new(),
    }))
}

#[cfg(test)]
#[path = "compaction_tests.rs"]
mod tests;

//! `builtin:compaction`: a `compactionPlan` hook that runs the host's compaction the way the
//! design's defaults say:
//!
//! - `maxHistoryShare` (default 0.5): after compacting, the summary and the messages kept
//!   verbatim take at most this share of the call's budget (the compaction runs against that
//!   share of the budget, `details.historyBudget`), so a compaction leaves room for the turns
//!   that follow; only the turn in progress (never summarized while it fits what compaction
//!   keeps) or a newest group (a tool call and its results, never cut apart) larger than the
//!   share on its own is kept over it (`details.withinShare: false`);
//! - `identifierPolicy` (default `strict`): UUIDs, hashes, URLs, paths and hosts of the
//!   summarized span are kept verbatim, and the plan's `details.identifierAudit` says how many
//!   were found and kept.

use serde_json::{Map, Value as Json, json};

use crate::contract::message::Role;
use crate::contract::{CompactParams, CompactResult, CompactionTarget, Method};
use crate::engine::api::HostCall;
use crate::services::compaction::compact;
use crate::services::summarize::IdentifierPolicy;

use super::{Builtin, known, number, string, window_budget};

/// The default `maxHistoryShare`.
pub(crate) const MAX_HISTORY_SHARE: f64 = 0.5;

/// The hook and its settings.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Compaction {
    max_history_share: f64,
    identifier_policy: IdentifierPolicy,
}

impl Compaction {
    /// Reads the settings; an error names the setting.
    pub(super) fn from_config(settings: &Json) -> Result<Self, (&'static str, String)> {
        known(settings, &["maxHistoryShare", "identifierPolicy"])?;
        let share = number(settings, "maxHistoryShare")?.unwrap_or(MAX_HISTORY_SHARE);
        if !(share > 0.0 && share <= 1.0) {
            return Err((
                "maxHistoryShare",
                format!("must be above 0 and at most 1, got {share}"),
            ));
        }
        let identifier_policy = match string(settings, "identifierPolicy")?.as_deref() {
            None | Some("strict") => IdentifierPolicy::Strict,
            Some("off") => IdentifierPolicy::Off,
            Some(other) => {
                return Err((
                    "identifierPolicy",
                    format!("must be \"strict\" or \"off\", got \"{other}\""),
                ));
            }
        };
        Ok(Compaction {
            max_history_share: share,
            identifier_policy,
        })
    }
}

impl Builtin for Compaction {
    const METHODS: &'static [Method] = &[Method::CompactionPlan];

    fn call(
        &mut self,
        call: &HostCall,
        _method: Method,
        fields: &Map<String, Json>,
    ) -> Result<Json, String> {
        let budget = window_budget(call, fields);
        let share = ((budget as f64 * self.max_history_share) as u64).max(1);
        let services = call.services();
        let mut settings = services.compaction.clone();
        settings.identifier_policy = self.identifier_policy;
        let mut params = CompactParams {
            session_id: call.session_id().to_owned(),
            session_key: None,
            token_budget: share,
            force: fields.get("force").and_then(Json::as_bool).unwrap_or(false),
            current_token_count: fields
                .get("currentTokenCount")
                .and_then(Json::as_u64)
                .unwrap_or_else(|| services.tokens.messages(call.context())),
            compaction_target: CompactionTarget::Budget,
            custom_instructions: fields
                .get("customInstructions")
                .and_then(Json::as_str)
                .map(str::to_owned),
            runtime_settings: None,
        };
        // The turn in progress is never summarized while it fits what compaction keeps for
        // the whole budget (the host refuses that): a budget of twice the turn keeps it.
        let context = call.context();
        let request = context.iter().rposition(|m| m.role() == Role::User);
        let mut floor = 1;
        if let Some(at) = request {
            let turn = services.tokens.messages(&context[at..]);
            if turn <= settings.keep_for(budget) {
                floor = turn.saturating_mul(2).min(budget);
                params.token_budget = params.token_budget.max(floor);
            }
        }
        // The compaction is sized for `share`; when what it keeps still comes out over (a kept
        // tool result it could not cut at, the summary message's own overhead), it runs again
        // for a budget smaller by the excess, a few times at most.
        let mut out = CompactResult::nothing(true, "not run");
        for _ in 0..4 {
            out = compact(
                call.context(),
                &services.tokens,
                services.summarizer.as_ref(),
                &settings,
                &params,
                &services.cancel,
            );
            let after = out.result.as_ref().and_then(|r| r.tokens_after);
            match after {
                Some(a) if a > share && params.token_budget.saturating_sub(a - share) >= floor => {
                    params.token_budget -= a - share;
                    params.force = true;
                }
                _ => break,
            }
        }
        if let Some(result) = &mut out.result
            && let Some(Json::Object(d)) = &mut result.details
        {
            let found = d.get("identifiersFound").cloned().unwrap_or(json!(0));
            let kept = d.get("identifiersKept").cloned().unwrap_or(json!(0));
            d.insert("maxHistoryShare".into(), json!(self.max_history_share));
            d.insert("historyBudget".into(), json!(share));
            // Over the share only when the newest group (a call and its results, never cut
            // apart) alone is larger.
            d.insert(
                "withinShare".into(),
                json!(result.tokens_after.is_some_and(|a| a <= share)),
            );
            d.insert("identifierPolicy".into(), json!(self.identifier_policy));
            d.insert(
                "identifierAudit".into(),
                json!({"found": found, "kept": kept, "allKept": found == kept}),
            );
        }
        let plan = serde_json::to_value(&out).map_err(|e| format!("plan: {e}"))?;
        Ok(json!({ "plan": plan }))
    }
}

//! `builtin:compaction`: a `compactionPlan` hook that runs the host's compaction the way the
//! design's defaults say:
//!
//! - `maxHistoryShare` (default 0.5): after compacting, the summary and the messages kept
//!   verbatim take at most this share of the call's budget (the compaction runs against that
//!   share of the budget), so a compaction leaves room for the turns that follow;
//! - `identifierPolicy` (default `strict`): UUIDs, hashes, URLs, paths and hosts of the
//!   summarized span are kept verbatim, and the plan's `details.identifierAudit` says how many
//!   were found and kept.

use serde_json::{Map, Value as Json, json};

use crate::compaction::compact;
use crate::contract::{CompactParams, CompactionTarget, Method};
use crate::host::HostCall;
use crate::summarize::IdentifierPolicy;

use super::{Builtin, known, number, string};

/// The default `maxHistoryShare`.
pub const MAX_HISTORY_SHARE: f64 = 0.5;

/// The hook and its settings.
#[derive(Clone, Debug, PartialEq)]
pub struct Compaction {
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
        let budget = fields
            .get("tokenWindow")
            .and_then(|w| w.get("contextWindowTokens"))
            .and_then(Json::as_u64)
            .unwrap_or(call.token_budget());
        let share = ((budget as f64 * self.max_history_share) as u64).max(1);
        let services = call.services();
        let params = CompactParams {
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
        let mut settings = services.compaction.clone();
        settings.identifier_policy = self.identifier_policy;
        let mut out = compact(
            call.context(),
            &services.tokens,
            services.summarizer.as_ref(),
            &settings,
            &params,
            &services.cancel,
        );
        if let Some(result) = &mut out.result
            && let Some(Json::Object(d)) = &mut result.details
        {
            let found = d.get("identifiersFound").cloned().unwrap_or(json!(0));
            let kept = d.get("identifiersKept").cloned().unwrap_or(json!(0));
            d.insert("maxHistoryShare".into(), json!(self.max_history_share));
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

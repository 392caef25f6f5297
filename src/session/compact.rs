//! Compaction as the session applies it: the built-in auto-compaction, an engine's `compact`
//! (falling back to `legacy` at most once), and appending the summary a result asks for. A
//! result that contradicts the session is the engine's fault; a summary the store cannot take
//! is the host's.

use std::sync::Arc;

use crate::contract::message::{Message, Role};
use crate::contract::{
    CompactParams, CompactResult, CompactionTarget, EngineInfo, HostParam, Method,
};
use crate::engine::legacy::LEGACY_ID;
use crate::error::{EngineError, EngineErrorKind, Error, Result};
use crate::services::compaction::{self};

use super::Session;

impl Session {
    /// Built-in auto-compaction for engines that do not own compaction.
    pub(super) fn auto_compact(&mut self, budget: u64) -> Result<()> {
        if self.engine.as_ref().is_some_and(|e| e.plans_compaction()) {
            return self
                .engine_compact(budget, CompactionTarget::Budget, None, None)
                .map(|_| ());
        }
        let started = std::time::Instant::now();
        let params = self.compact_params(budget, CompactionTarget::Budget, None, None);
        let s = &self.services;
        let result = compaction::compact(
            &self.context,
            &s.tokens,
            s.summarizer.as_ref(),
            &s.compaction,
            &params,
            &s.cancel,
        );
        // The built-in compaction is the host's own: a result it cannot apply is a host fault.
        // The built-in summary is sized for the budget by construction: no size check.
        let applied = self
            .apply_compaction(&result, None)
            .map_err(|e| e.into_host_error(LEGACY_ID, "built-in compaction"));
        // Timed as `compact` like an engine's own (reports show where compaction time goes,
        // whoever compacts); not engine time against the turn budget: the host did the work.
        self.call_times.record(Method::Compact, started.elapsed());
        applied
    }

    /// Runs the engine's `compact` (falling back like any call) and applies its result.
    pub(super) fn engine_compact(
        &mut self,
        budget: u64,
        target: CompactionTarget,
        instructions: Option<String>,
        degraded: Option<&'static str>,
    ) -> Result<CompactResult> {
        let params = self.compact_params(budget, target, instructions, degraded);
        let limits = self.setup.limits.clone();
        let before = self.context_tokens();
        let request = self.request.as_ref().map(|r| r.id.clone());
        let turn_tokens = request
            .as_ref()
            .and_then(|id| self.context.iter().position(|m| &m.id == id))
            .map_or(0, |at| self.services.tokens.messages(&self.context[at..]));
        let turn = TurnInProgress {
            request,
            turn_tokens,
            keep: self.services.compaction.keep_for(budget),
        };
        // The configured engine, and after its failure `legacy`, once: never a loop.
        for _ in 0..2 {
            let ((result, by_client), engine, _) =
                self.run_tagged(Method::Compact, budget, |e, call| {
                    let client = call.client_compaction();
                    if let Some(c) = client {
                        c.take_used();
                    }
                    let r = e.compact(call, &params)?;
                    super::check_compact(e, &r, &limits)?;
                    // The client compacted its own transcript: its entry ids are not ours.
                    let by_client = client.is_some_and(|c| c.take_used());
                    if !by_client {
                        check_first_kept(&r, call.context())
                            .map_err(|m| invalid(e.info(), Method::Compact, m))?;
                        // legacy's cut keeps these by construction (compaction::cut_point).
                        if e.info().id != LEGACY_ID {
                            check_keeps_conversation(&r, call.context(), &turn)
                                .map_err(|m| invalid(e.info(), Method::Compact, m))?;
                        }
                    }
                    Ok((r, by_client))
                })?;
            if by_client {
                // Applied by the client to the transcript it owns; its next view starts from
                // its summary (see `serve::mirror`).
                return Ok(result);
            }
            let cap = (engine != LEGACY_ID).then_some(budget);
            match self.apply_compaction(&result, cap) {
                Ok(()) => {
                    if !result.compacted
                        && before > budget
                        && engine != LEGACY_ID
                        && !self.active_owns_compaction()
                        && !self.warned_noop_compact
                    {
                        self.warned_noop_compact = true;
                        tracing::warn!(
                            engine = %engine,
                            session = &*self.id,
                            "compact did nothing on an over-budget session ({before} > {budget} tokens); a non-owning engine should return host.delegateCompaction(p)"
                        );
                    }
                    return Ok(result);
                }
                Err(ApplyError::Invalid(m)) if engine != LEGACY_ID => {
                    self.on_failure(invalid_for(&engine, Method::Compact, m))?;
                }
                Err(e) => return Err(e.into_host_error(&engine, "compact")),
            }
        }
        Err(Error::Host(EngineError::new(
            Method::Compact,
            LEGACY_ID,
            EngineErrorKind::Host,
            "compaction could not be applied after falling back to legacy",
        )))
    }

    /// Appends a compaction's summary and re-derives the context. Returns what is wrong with
    /// the result when it cannot be applied: an engine's summary bigger than the whole token
    /// `budget` (when given) could never be sent, and storing it anyway on every compaction
    /// fills the disk.
    pub(super) fn apply_compaction(
        &mut self,
        result: &CompactResult,
        budget: Option<u64>,
    ) -> std::result::Result<(), ApplyError> {
        if !result.compacted {
            self.stats.failed_compactions += 1;
            return Ok(());
        }
        let Some(outcome) = &result.result else {
            // The engine compacted its own storage; the transcript is unchanged.
            self.stats.compactions += 1;
            return Ok(());
        };
        let Some(summary) = &outcome.summary else {
            self.stats.compactions += 1;
            return Ok(());
        };
        let kept_from =
            match &outcome.first_kept_entry_id {
                Some(id) => Some(self.context.iter().position(|m| &m.id == id).ok_or_else(
                    || {
                        ApplyError::Invalid(format!(
                            "firstKeptEntryId \"{id}\" is not in the session context"
                        ))
                    },
                )?),
                None => None,
            };
        let before = self.context_tokens();
        let kept: Vec<Arc<Message>> = match kept_from {
            Some(i) => self.context[i..].to_vec(),
            None => Vec::new(),
        };
        let first_kept = outcome.first_kept_entry_id.clone().unwrap_or_default();
        let draft = compaction::summary_message(summary, before, None, &first_kept);
        let summary_tokens = self.services.tokens.counter().count_message(&draft);
        if let Some(budget) = budget
            && summary_tokens > budget
        {
            return Err(ApplyError::Invalid(format!(
                "the summary is {summary_tokens} tokens, over the whole token budget of {budget}: it could never be sent to the model"
            )));
        }
        let after = summary_tokens + self.services.tokens.messages(&kept);
        let mut message = compaction::summary_message(summary, before, Some(after), &first_kept);
        if first_kept.is_empty()
            && let crate::contract::message::MessageBody::CompactionSummary(s) = &mut message.body
        {
            s.first_kept_entry_id = None;
        }
        if let Some(details) = &outcome.details
            && let crate::contract::message::MessageBody::CompactionSummary(s) = &mut message.body
        {
            s.extra.insert("details".into(), capped_details(details));
        }
        let stored = self.store.append(vec![message]).map_err(ApplyError::Host)?;
        self.recall.add(&stored);
        let mut context = stored;
        context.extend(kept);
        self.turn_start = self.turn_start.min(context.len());
        self.set_context(context);
        if after < before {
            self.stats.compactions += 1;
        } else {
            self.stats.failed_compactions += 1;
        }
        Ok(())
    }

    pub(super) fn compact_params(
        &self,
        budget: u64,
        target: CompactionTarget,
        instructions: Option<String>,
        degraded: Option<&'static str>,
    ) -> CompactParams {
        CompactParams {
            session_id: self.id.to_string(),
            session_key: self.host_param(HostParam::SessionKey, self.id.to_string()),
            token_budget: budget,
            force: true,
            current_token_count: self.context_tokens(),
            compaction_target: target,
            custom_instructions: instructions,
            runtime_settings: self.runtime_settings_param(budget, degraded),
        }
    }
}

/// Why a compaction result could not be applied.
pub(super) enum ApplyError {
    /// The result contradicts the session (the engine's fault).
    Invalid(String),
    /// Storing the summary failed (the host's fault).
    Host(Error),
}

impl ApplyError {
    /// The error the caller gets when this cannot be blamed on a (non-legacy) engine.
    fn into_host_error(self, engine: &str, what: &str) -> Error {
        match self {
            ApplyError::Host(e) => e,
            ApplyError::Invalid(m) => Error::Host(EngineError::new(
                Method::Compact,
                engine,
                EngineErrorKind::Host,
                format!("{what} produced a result the host cannot apply: {m}"),
            )),
        }
    }
}

pub(super) fn invalid(info: &EngineInfo, method: Method, message: String) -> EngineError {
    invalid_for(&info.id, method, message)
}

pub(super) fn invalid_for(engine: &str, method: Method, message: String) -> EngineError {
    EngineError::new(method, engine, EngineErrorKind::InvalidResult, message)
}

pub(super) fn check_first_kept(
    r: &CompactResult,
    context: &[Arc<Message>],
) -> std::result::Result<(), String> {
    if let Some(out) = &r.result
        && let Some(id) = &out.first_kept_entry_id
        && !context.iter().any(|m| &m.id == id)
    {
        return Err(format!(
            "firstKeptEntryId \"{id}\" is not in the session context"
        ));
    }
    Ok(())
}

/// What a compaction in the middle of a turn must not summarize away.
pub(super) struct TurnInProgress {
    /// The id of the user message that started the current turn.
    pub request: Option<String>,
    /// The recent tokens the built-in compaction keeps verbatim at this budget: a turn larger
    /// than this may have its request summarized (the session still carries it to every model
    /// call, see [`crate::services::guarantee`]).
    pub keep: u64,
    /// The tokens of the turn from its request on.
    pub turn_tokens: u64,
}

/// A compaction that writes a summary while the model owes an answer (the context ends with
/// the request, tool results or tool calls) must keep verbatim the newest tool group — the
/// open tool calls and their results — and the turn's request, unless the turn from the
/// request on is larger than the built-in compaction keeps (then it may cut inside the turn's
/// tool loop, as `legacy` does). A summary without `firstKeptEntryId` there drops the
/// conversation in progress: the result is invalid.
pub(super) fn check_keeps_conversation(
    r: &CompactResult,
    context: &[Arc<Message>],
    turn: &TurnInProgress,
) -> std::result::Result<(), String> {
    let Some(out) = r.result.as_ref().filter(|_| r.compacted) else {
        return Ok(());
    };
    if out.summary.is_none() {
        return Ok(());
    }
    // The model owes an answer, or its tool calls await their results.
    let awaiting = context.last().is_some_and(|m| {
        matches!(m.role(), Role::User | Role::ToolResult) || m.tool_calls().next().is_some()
    });
    if !awaiting {
        return Ok(());
    }
    let Some(newest) = crate::services::fit::groups(context).pop() else {
        return Ok(());
    };
    let kept_from = out
        .first_kept_entry_id
        .as_ref()
        .and_then(|id| context.iter().position(|m| &m.id == id))
        .unwrap_or(context.len());
    let newest_group = if context[newest.start].tool_calls().next().is_some() {
        format!(
            "the open tool calls of the turn in progress (message {} and its {} results)",
            newest.start + 1,
            newest.len() - 1
        )
    } else {
        format!("the pending user request (message {})", newest.start + 1)
    };
    if kept_from > newest.start {
        let how = match &out.first_kept_entry_id {
            None => "a summary without firstKeptEntryId".to_owned(),
            Some(id) => format!("firstKeptEntryId \"{id}\""),
        };
        return Err(format!(
            "{how} drops {newest_group}; keep them verbatim: set firstKeptEntryId at or before \"{}\"",
            context[newest.start].id
        ));
    }
    if let Some(id) = &turn.request
        && let Some(at) = context.iter().position(|m| &m.id == id)
        && kept_from > at
    {
        let size = turn.turn_tokens;
        if size < turn.keep {
            return Err(format!(
                "firstKeptEntryId summarizes the current request (message {}) although its turn of {size} tokens is within the {} recent tokens compaction keeps; set firstKeptEntryId at or before \"{id}\"",
                at + 1,
                turn.keep
            ));
        }
    }
    Ok(())
}

/// The most bytes of a compaction's `details` the transcript keeps (64 KiB): an engine controls
/// them, and every byte is written to the session file for good.
pub(crate) const MAX_DETAILS_BYTES: usize = 64 << 10;

/// `details` as stored: as given when small, else a note of what was left out.
fn capped_details(details: &serde_json::Value) -> serde_json::Value {
    let size = serde_json::to_vec(details).map_or(usize::MAX, |b| b.len());
    if size <= MAX_DETAILS_BYTES {
        return details.clone();
    }
    tracing::warn!(
        "compaction details of {size} bytes exceed {MAX_DETAILS_BYTES} bytes and were not stored"
    );
    serde_json::json!({ "omitted": format!("{size} bytes of details over the {MAX_DETAILS_BYTES}-byte cap") })
}

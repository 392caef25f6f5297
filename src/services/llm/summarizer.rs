//! [`LlmSummarizer`]: asks a Chat Completions model for the summary, audits its identifiers
//! (one corrective retry naming the missing ones, then appending what is still missing), fits
//! the answer to the summary budget, keeps the per-turn and per-day budgets, and lets the
//! offline summarizer answer whenever the model cannot.

use std::fmt::Write as _;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use crate::error::{Error, Result};
use crate::services::summarize::{
    BuiltinSummarizer, IdentifierPolicy, Summarizer, Summary, SummaryFuture, SummaryRequest,
    span_facts,
};
use crate::services::tokens::TokenCounter;

#[cfg(test)]
use super::budget::DAY;
use super::budget::{self, DayLedger};
use super::client::{ApiKey, OpenAiClient};
use super::drive;
use super::error::LlmError;
use super::model::{ChatMessage, ModelAnswer, ModelClient, ModelRequest};
use super::prompt;
use super::{LlmSettings, ModelLimits};

/// The heading of the identifiers the host appends when the model left them out.
const AUDIT_HEADING: &str = "## Exact identifiers (host audit)";

/// A summarizer that asks a model behind an OpenAI-compatible Chat Completions endpoint, with
/// the offline [`BuiltinSummarizer`] answering whenever the model cannot (timeout, HTTP error,
/// refusal, empty answer, spent budget).
///
/// Each session gets its own view ([`Summarizer::for_session`]) counting that session's
/// model calls per turn; all views share the endpoint and the rolling 24-hour token budget.
#[derive(Debug)]
pub struct LlmSummarizer {
    shared: Arc<Shared>,
    turn_calls: AtomicU32,
}

/// What every session's view shares.
#[derive(Debug)]
struct Shared {
    client: Arc<dyn ModelClient>,
    endpoint: String,
    settings: ModelLimits,
    name: String,
    fallback: BuiltinSummarizer,
    day: Mutex<DayLedger>,
}

impl LlmSummarizer {
    /// A summarizer for `settings`, its API key read from the variable `apiKeyEnv` names.
    pub fn from_env(settings: &LlmSettings) -> Result<Self> {
        let key = match &settings.api_key_env {
            None => None,
            Some(var) => match std::env::var(var) {
                Ok(key) if !key.trim().is_empty() => Some(ApiKey::new(key.trim())),
                _ => {
                    return Err(Error::Config {
                        place: "host.summarizer.apiKeyEnv".into(),
                        message: format!(
                            "the environment variable {var} holds no API key; set it, or remove apiKeyEnv for a server that needs none"
                        ),
                    });
                }
            },
        };
        LlmSummarizer::new(settings, key)
    }

    /// A summarizer for `settings` with the key given (e.g. from a secrets manager).
    pub fn new(settings: &LlmSettings, key: Option<ApiKey>) -> Result<Self> {
        let bad = |key: &str, message: String| Error::Config {
            place: format!("host.summarizer.{key}"),
            message,
        };
        let url = settings.base_url.trim();
        if !(url.starts_with("http://") || url.starts_with("https://")) {
            return Err(bad(
                "baseUrl",
                format!("\"{url}\" is not an http:// or https:// URL"),
            ));
        }
        if settings.model.trim().is_empty() {
            return Err(bad("model", "names no model".into()));
        }
        let mut client = OpenAiClient::new(url, settings.model.trim(), key);
        if let Some(path) = &settings.ca_file {
            let pem = std::fs::read(path)
                .map_err(|e| bad("caFile", format!("cannot read {}: {e}", path.display())))?;
            client = client
                .trusting_only(&pem)
                .map_err(|e| bad("caFile", format!("{}: {e}", path.display())))?;
        }
        let endpoint = client.endpoint().to_owned();
        LlmSummarizer::build(Arc::new(client), endpoint, settings.limits())
    }

    /// A summarizer asking `client` (an embedder's own, or the `serve` client's model) within
    /// `limits`.
    pub fn with_client(client: Arc<dyn ModelClient>, limits: ModelLimits) -> Result<Self> {
        let endpoint = format!("model {}", client.name());
        LlmSummarizer::build(client, endpoint, limits)
    }

    fn build(client: Arc<dyn ModelClient>, endpoint: String, limits: ModelLimits) -> Result<Self> {
        check_limits(&limits, "host.summarizer")?;
        Ok(LlmSummarizer {
            shared: Arc::new(Shared {
                name: format!("llm:{}", client.name().trim()),
                client,
                endpoint,
                settings: limits,
                fallback: BuiltinSummarizer,
                day: Mutex::new(DayLedger::default()),
            }),
            turn_calls: AtomicU32::new(0),
        })
    }

    /// The model it asks, for `host.complete` to share.
    pub fn model(&self) -> Arc<dyn ModelClient> {
        Arc::clone(&self.shared.client)
    }

    /// What the summaries it writes record as their summarizer: `llm:<model>`.
    pub fn name(&self) -> &str {
        &self.shared.name
    }

    /// The URL it posts to, for messages about it.
    pub fn endpoint(&self) -> &str {
        &self.shared.endpoint
    }

    /// Prompt plus completion tokens spent in the last 24 hours (all sessions).
    pub fn tokens_spent_today(&self) -> u64 {
        self.shared.day.lock().spent(Instant::now())
    }

    /// Asks the model, audits and fits its answer; an error means the fallback answers.
    async fn with_model(
        &self,
        request: &SummaryRequest<'_>,
        counter: &dyn TokenCounter,
    ) -> std::result::Result<Summary, LlmError> {
        let s = &self.shared;
        let facts = span_facts(request);
        // The span's own identifiers and those the previous summary carried are both kept
        // (and audited); they are counted apart.
        let (own, carried) = match request.identifier_policy {
            IdentifierPolicy::Strict => (facts.identifiers, facts.carried),
            IdentifierPolicy::Off => (Vec::new(), Vec::new()),
        };
        let ids: Vec<String> = own.iter().chain(&carried).cloned().collect();
        let deadline = Instant::now() + Duration::from_millis(s.settings.timeout_ms);
        let mut conversation = prompt::messages(request, &ids);
        let mut answer = self.call(&conversation, deadline, counter).await?.text;
        let missing = missing_from(&ids, &answer);
        if !missing.is_empty() {
            conversation.push(ChatMessage::new("assistant", answer.clone()));
            conversation.push(prompt::correction(&missing));
            match self.call(&conversation, deadline, counter).await {
                Ok(fixed) if missing_from(&ids, &fixed.text).len() <= missing.len() => {
                    answer = fixed.text;
                }
                Ok(_) => tracing::info!(
                    summarizer = %s.name,
                    "the corrected summary lost more identifiers; the first answer is kept"
                ),
                Err(e) => tracing::info!(
                    summarizer = %s.name,
                    "the corrective retry for {} missing identifiers failed ({e}); the host appends them",
                    missing.len()
                ),
            }
        }
        let text = fit(&answer, &ids, request.max_tokens, counter).ok_or(LlmError::Budget {
            max_tokens: request.max_tokens,
        })?;
        let kept = |list: &[String]| list.iter().filter(|id| text.contains(id.as_str())).count();
        Ok(Summary {
            tokens: counter.count_text(&text),
            identifiers_found: own.len(),
            identifiers_kept: kept(&own),
            carried_found: carried.len(),
            carried_kept: kept(&carried),
            read_files: facts.read_files,
            modified_files: facts.modified_files,
            summarizer: s.name.clone(),
            text,
        })
    }

    /// One model call within this turn's call budget and the day's token budget.
    async fn call(
        &self,
        messages: &[ChatMessage],
        deadline: Instant,
        counter: &dyn TokenCounter,
    ) -> std::result::Result<ModelAnswer, LlmError> {
        let s = &self.shared;
        budget::take_call(&self.turn_calls, s.settings.max_calls_per_turn)?;
        let prompt_tokens: u64 = messages
            .iter()
            .map(|m| counter.count_text(&m.content))
            .sum();
        let needed = prompt_tokens + s.settings.max_output_tokens;
        // Settled below, or (when the summary is dropped mid-call) released by the guard.
        let reservation = budget::Reservation::take(&s.day, needed, s.settings.max_tokens_per_day)?;
        let left = deadline.saturating_duration_since(Instant::now());
        let result = if left.is_zero() {
            Err(LlmError::Timeout {
                endpoint: s.endpoint.clone(),
                timeout_ms: s.settings.timeout_ms,
            })
        } else {
            let request = ModelRequest {
                messages: messages.to_vec(),
                max_tokens: s.settings.max_output_tokens,
                temperature: Some(0.2),
                response_format: None,
                session: None,
                timeout: left,
            };
            // A timeout names the summary's whole limit, not what was left of it.
            drive::within(s.client.complete(request), left, &s.endpoint)
                .await
                .map_err(|e| match e {
                    LlmError::Timeout { endpoint, .. } => LlmError::Timeout {
                        endpoint,
                        timeout_ms: s.settings.timeout_ms,
                    },
                    other => other,
                })
        };
        reservation.settle(budget::used_by(&result, prompt_tokens, |t| {
            counter.count_text(t)
        }));
        result
    }
}

impl Summarizer for LlmSummarizer {
    fn summarize<'a>(
        &'a self,
        request: SummaryRequest<'a>,
        counter: &'a dyn TokenCounter,
    ) -> SummaryFuture<'a> {
        Box::pin(async move {
            match self.with_model(&request, counter).await {
                Ok(summary) => Ok(summary),
                Err(e) => {
                    tracing::warn!(
                        summarizer = %self.shared.name,
                        "the built-in summarizer answers instead of the model: {e}"
                    );
                    // The fallback is host CPU work on the script's input: under the call's
                    // deadline, even when the model's wait was not.
                    crate::sandbox::within_deadline(|| {
                        self.shared.fallback.summarize_now(&request, counter)
                    })
                }
            }
        })
    }

    fn for_session(&self) -> Option<Arc<dyn Summarizer>> {
        Some(Arc::new(LlmSummarizer {
            shared: Arc::clone(&self.shared),
            turn_calls: AtomicU32::new(0),
        }))
    }

    fn begin_turn(&self) {
        self.turn_calls.store(0, Ordering::SeqCst);
    }

    fn calls_a_model(&self) -> bool {
        true
    }
}

/// Checks the limits of a model's use, configured under `place`.
pub(super) fn check_limits(limits: &ModelLimits, place: &str) -> Result<()> {
    let bad = |key: &str, message: &str| {
        Err(Error::Config {
            place: format!("{place}.{key}"),
            message: message.into(),
        })
    };
    if limits.timeout_ms == 0 {
        return bad("timeoutMs", "must be at least 1 ms");
    }
    if limits.max_output_tokens == 0 {
        return bad("maxOutputTokens", "must be at least 1");
    }
    Ok(())
}

/// The identifiers `text` does not contain verbatim.
fn missing_from(ids: &[String], text: &str) -> Vec<String> {
    ids.iter()
        .filter(|id| !text.contains(id.as_str()))
        .cloned()
        .collect()
}

/// The answer within `max` tokens with every identifier it lacks appended: the model's lines
/// are cut from the end first, then (when the identifiers alone do not fit) identifiers are
/// left out with a note saying how many. `None` when not even the note fits.
fn fit(answer: &str, ids: &[String], max: u64, counter: &dyn TokenCounter) -> Option<String> {
    let lines: Vec<&str> = answer.lines().collect();
    let fits = |t: &String| counter.count_text(t) <= max;
    let compose = |keep: usize| {
        // A cut never ends on a heading (or blank line) whose content was cut away.
        let mut kept = &lines[..keep];
        while let [rest @ .., last] = kept
            && (last.trim().is_empty() || last.trim_start().starts_with('#'))
            && keep < lines.len()
        {
            kept = rest;
        }
        let mut prose = kept.join("\n");
        if keep < lines.len() && !kept.is_empty() {
            prose.push_str("\n(cut to the summary budget)");
        }
        let missing = missing_from(ids, &prose);
        with_identifiers(prose, &missing, missing.len())
    };
    let whole = compose(lines.len());
    if fits(&whole) {
        return Some(whole);
    }
    // The most lines that fit beside every identifier they lack (fewer lines never lack fewer).
    let best = compose(most_that_fit(lines.len(), |k| fits(&compose(k))));
    if fits(&best) {
        return Some(best).filter(|t| !t.trim().is_empty());
    }
    // Not even the identifiers fit: keep as many as fit, and say how many were left out.
    let partial = |n: usize| with_identifiers(String::new(), &ids[..n], ids.len());
    Some(partial(most_that_fit(ids.len(), |n| fits(&partial(n)))))
        .filter(|t| fits(t) && !t.trim().is_empty())
}

/// The largest `n` below `all` for which `fits(n)` holds (0 when none does), by bisection:
/// `all` itself is known not to fit.
fn most_that_fit(all: usize, fits: impl Fn(usize) -> bool) -> usize {
    let (mut lo, mut hi) = (0usize, all);
    while lo + 1 < hi {
        let mid = lo + (hi - lo) / 2;
        if fits(mid) {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    lo
}

/// `prose` followed by the host's identifier section listing `kept` of `total` identifiers.
fn with_identifiers(prose: String, kept: &[String], total: usize) -> String {
    if total == 0 {
        return prose;
    }
    let mut out = prose;
    if !out.is_empty() {
        out.push_str("\n\n");
    }
    out.push_str(AUDIT_HEADING);
    for id in kept {
        let _ = write!(out, "\n- {id}");
    }
    if kept.len() < total {
        let _ = write!(
            out,
            "\n- ({} identifiers omitted: the summary budget cannot hold them)",
            total - kept.len()
        );
    }
    out
}

#[cfg(test)]
#[path = "summarizer_tests.rs"]
mod tests;

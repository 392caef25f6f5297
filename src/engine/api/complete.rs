//! `host.complete(request)`: a script asks the host's model (contract §5.7). The host owns the
//! model, its credentials and every limit: scripts see the answer, never a key or a URL.
//!
//! - Budgets (`host.complete` in the config): calls per session turn, and prompt plus answer
//!   tokens per engine in a rolling 24 hours; `maxOutputTokens` caps each answer.
//! - Time: the wait is not counted against the script's deadline ([`outside_deadline`])
//!   and has its own limit (`timeoutMs`); a cancelled turn cancels the call.
//! - Failure: bad arguments are a script error; a model that cannot answer (none configured,
//!   a spent budget, a timeout, an HTTP error) is an answer `{error, reason}` the script can
//!   act on, so an engine that asks a model keeps running without one.
//!
//! [`outside_deadline`]: crate::sandbox::outside_deadline

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use parking_lot::Mutex;
use serde::Deserialize;
use serde_json::{Value, json};

use super::HostCall;
use super::table::{Args, Ctx};
use super::value::{HostError, HostOut};
use crate::contract::opt_count;
use crate::sandbox::StopSignals;
use crate::services::llm::budget::{self, DayLedger};
use crate::services::llm::{
    ChatMessage, LlmError, ModelAnswer, ModelClient, ModelLimits, ModelRequest, Usage,
};

/// The most messages one request may carry.
const MAX_MESSAGES: usize = 256;

/// The host's model for `host.complete` and what it may spend; one per host, shared by its
/// sessions.
#[derive(Debug)]
pub struct Completions {
    model: Option<Arc<dyn ModelClient>>,
    limits: ModelLimits,
    /// Tokens spent per engine id.
    days: Mutex<HashMap<String, DayLedger>>,
}

impl Completions {
    /// `host.complete` over `model` (none: every call answers `reason: "unavailable"`) within
    /// `limits`.
    pub fn new(model: Option<Arc<dyn ModelClient>>, limits: ModelLimits) -> Self {
        Completions {
            model,
            limits,
            days: Mutex::default(),
        }
    }

    /// Tokens engine `engine` spent in the last 24 hours.
    pub fn tokens_spent_today(&self, engine: &str) -> u64 {
        self.days
            .lock()
            .get_mut(engine)
            .map_or(0, |d| d.spent(std::time::Instant::now()))
    }
}

/// One session's view of [`Completions`]: it counts that session's calls per turn.
#[derive(Debug, Default)]
pub struct SessionModel {
    shared: Option<Arc<Completions>>,
    turn_calls: AtomicU32,
}

impl SessionModel {
    /// A session's view of `shared`.
    pub fn new(shared: Arc<Completions>) -> Self {
        SessionModel {
            shared: Some(shared),
            turn_calls: AtomicU32::new(0),
        }
    }

    /// A turn begins: the per-turn calls start again.
    pub fn begin_turn(&self) {
        self.turn_calls.store(0, Ordering::SeqCst);
    }
}

/// One message of `request.messages`.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ScriptMessage {
    role: String,
    content: String,
}

/// `host.complete(request)`: `messages` or `prompt` (with an optional `system`), and options
/// named as OpenAI's Chat Completions (camelCase).
#[derive(Clone, Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct CompleteRequest {
    #[serde(default)]
    messages: Option<Vec<ScriptMessage>>,
    #[serde(default)]
    prompt: Option<String>,
    #[serde(default)]
    system: Option<String>,
    #[serde(default, deserialize_with = "opt_count")]
    max_tokens: Option<u64>,
    #[serde(default)]
    temperature: Option<f64>,
    /// `"json"`, `{type: "json_object"}` or `{type: "json_schema", json_schema: {...}}`.
    #[serde(default)]
    response_format: Option<Value>,
    /// Shorthand for a `json_schema` response format with this schema.
    #[serde(default)]
    schema: Option<Value>,
}

/// Why a call gave no answer, as scripts read it: a stable `reason` and a message that names
/// neither the endpoint nor a key.
fn script_failure(e: &LlmError) -> (&'static str, String) {
    match e {
        LlmError::Unavailable { .. } => (
            "unavailable",
            "no model is configured (host.summarizer kind \"llm\" or \"client\" lends one)".into(),
        ),
        LlmError::CallsPerTurn { limit } => (
            "calls_per_turn",
            format!("the {limit} model calls this turn allows are spent"),
        ),
        LlmError::TokensPerDay { limit, .. } => (
            "tokens_per_day",
            format!("the engine's model budget of {limit} tokens a day is spent"),
        ),
        LlmError::Timeout { timeout_ms, .. } => (
            "timeout",
            format!("the model did not answer within {timeout_ms} ms"),
        ),
        LlmError::Cancelled => ("cancelled", "the turn was cancelled".into()),
        LlmError::Refused { .. } => ("refused", "the model refused".into()),
        LlmError::Empty { .. } => ("empty", "the model sent an empty answer".into()),
        LlmError::Http { status, .. } => ("http", format!("the model answered HTTP {status}")),
        LlmError::Unreachable { .. } => ("unreachable", "the model is unreachable".into()),
        LlmError::Malformed { .. } => ("malformed", "the model sent a malformed answer".into()),
        _ => ("failed", "the model gave no answer".into()),
    }
}

impl CompleteRequest {
    /// The chat messages, the response format, and the answer's token cap within `limits`.
    fn into_parts(
        self,
        limits: &ModelLimits,
    ) -> Result<(Vec<ChatMessage>, Option<Value>, u64), String> {
        let mut messages = Vec::new();
        if let Some(system) = self.system {
            messages.push(ChatMessage::new("system", system));
        }
        match (self.messages, self.prompt) {
            (Some(_), Some(_)) => return Err("give messages or prompt, not both".into()),
            (None, None) => return Err("needs messages or a prompt".into()),
            (None, Some(p)) => messages.push(ChatMessage::new("user", p)),
            (Some(list), None) => {
                if list.is_empty() || list.len() > MAX_MESSAGES {
                    return Err(format!("messages must hold 1 to {MAX_MESSAGES} messages"));
                }
                for m in list {
                    if !matches!(m.role.as_str(), "system" | "user" | "assistant") {
                        return Err(format!(
                            "message role \"{}\" is not system, user or assistant",
                            m.role
                        ));
                    }
                    messages.push(ChatMessage::new(m.role, m.content));
                }
            }
        }
        if let Some(t) = self.temperature
            && !(0.0..=2.0).contains(&t)
        {
            return Err(format!("temperature {t} is outside 0..2"));
        }
        let format = match (self.response_format, self.schema) {
            (Some(_), Some(_)) => return Err("give responseFormat or schema, not both".into()),
            (None, Some(schema)) => Some(json!({
                "type": "json_schema",
                "json_schema": {"name": "answer", "schema": schema, "strict": true},
            })),
            (Some(Value::String(s)), None) if s == "json" => Some(json!({"type": "json_object"})),
            (Some(Value::String(s)), None) if s == "text" => None,
            (Some(f @ Value::Object(_)), None) => Some(f),
            (Some(other), None) => {
                return Err(format!(
                    "responseFormat must be \"json\", \"text\" or an OpenAI response_format map, got {other}"
                ));
            }
            (None, None) => None,
        };
        let max = self
            .max_tokens
            .unwrap_or(limits.max_output_tokens)
            .clamp(1, limits.max_output_tokens);
        Ok((messages, format, max))
    }
}

impl HostCall {
    /// One model call for this call's engine within the session's and the engine's budgets,
    /// waited for outside the script's deadline (`signals`' clock) and cancelled with it.
    fn complete(
        &self,
        model: &SessionModel,
        messages: Vec<ChatMessage>,
        response_format: Option<Value>,
        max_tokens: u64,
        temperature: Option<f64>,
        signals: &StopSignals,
    ) -> Result<ModelAnswer, LlmError> {
        let (shared, client) = match &model.shared {
            Some(s) => match &s.model {
                Some(c) => (s, c),
                None => {
                    return Err(LlmError::Unavailable {
                        reason: "no model configured".into(),
                    });
                }
            },
            None => {
                return Err(LlmError::Unavailable {
                    reason: "no model configured".into(),
                });
            }
        };
        if signals.check().is_some() {
            // Cancelled, or past its deadline already: the script stops at its next step.
            return Err(LlmError::Cancelled);
        }
        let limits = &shared.limits;
        budget::take_call(&model.turn_calls, limits.max_calls_per_turn)?;
        let counter = self.services().tokens.counter();
        let prompt: u64 = messages
            .iter()
            .map(|m| counter.count_text(&m.content))
            .sum();
        let needed = prompt + max_tokens;
        shared
            .days
            .lock()
            .entry(self.engine_id().to_owned())
            .or_default()
            .reserve(needed, limits.max_tokens_per_day)?;
        let timeout = Duration::from_millis(limits.timeout_ms);
        let request = ModelRequest {
            messages,
            max_tokens,
            temperature,
            response_format,
            session: Some(self.session_id().to_owned()),
            timeout,
        };
        let label = format!("model {}", client.name());
        let result = crate::sandbox::outside_deadline(|| {
            crate::services::llm::drive::wait(
                client.complete(request),
                timeout,
                &signals.cancel,
                &label,
            )
        });
        let used = budget::used_by(&result, prompt, |t| counter.count_text(t));
        if let Some(day) = shared.days.lock().get_mut(self.engine_id()) {
            day.settle(needed, used);
        }
        result.map(|mut answer| {
            if answer.usage.is_none() {
                answer.usage = Some(Usage {
                    input: prompt,
                    output: counter.count_text(&answer.text),
                });
            }
            answer
        })
    }
}

/// `host.complete(request)` → `{text, usage = {input, output}, model}` (plus `json`, the
/// parsed answer, when a JSON response was asked and the answer parses), or `{error, reason}`
/// when the model gave none. Bad arguments are the script's error.
pub(super) fn complete(cx: &Ctx<'_>, [request, ..]: Args) -> Result<HostOut, HostError> {
    let call = cx.call()?;
    let request: CompleteRequest = match request.into_json() {
        Some(v @ Value::Object(_)) => {
            serde_json::from_value(v).map_err(|e| cx.script_error(format!("request: {e}")))?
        }
        _ => return Err(cx.script_error("request must be a map")),
    };
    let temperature = request.temperature;
    let model = &call.services().model;
    let limits = model.shared.as_ref().map(|s| s.limits).unwrap_or_default();
    let (messages, format, max_tokens) = request
        .into_parts(&limits)
        .map_err(|e| cx.script_error(format!("request: {e}")))?;
    let wants_json = format.is_some();
    let signals = cx.scope().signals();
    match call.complete(model, messages, format, max_tokens, temperature, signals) {
        Ok(answer) => {
            let usage = answer.usage.unwrap_or_default();
            let mut out = json!({
                "text": answer.text,
                "usage": {"input": usage.input, "output": usage.output},
                "model": answer.model,
            });
            if wants_json && let Ok(parsed) = serde_json::from_str::<Value>(&answer.text) {
                out["json"] = parsed;
            }
            Ok(HostOut::Data(out))
        }
        Err(e) => {
            let (reason, message) = script_failure(&e);
            // The host's log names the endpoint (never a key); the script's answer does not.
            // The line counts against the engine's own log limits: a script that calls an
            // unreachable model in a loop cannot flood the log through the host either.
            cx.scope().log(
                super::LogLevel::Warn,
                format!("{}: {e} (reason: {reason})", cx.name()),
            );
            Ok(HostOut::Data(json!({
                "error": format!("{}: {message}", cx.name()),
                "reason": reason,
            })))
        }
    }
}

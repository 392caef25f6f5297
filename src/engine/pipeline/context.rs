//! The lifecycle context every hook handler receives (`p.lifecycle`, issue 22 item 4), in the
//! design's field names: `sessionId`, `sessionKey`, `runId`, `trigger`, `modelId`, `provider`,
//! `tokenWindow`, `usage`, `storageCursor`, `turnNumber`, `sessionCreatedAt`. A field the host
//! cannot know is absent, never zero or empty.

use serde_json::{Map, Value as Json, json};

use crate::contract::message::{Message, MessageBody};
use crate::contract::{Method, RuntimeSettings, SessionMeta, StorageCursor};
use crate::engine::api::HostCall;

/// What one lifecycle call knows beyond the [`HostCall`].
#[derive(Clone, Copy, Debug)]
pub(super) struct CallFacts<'a> {
    /// The engine method the pipeline is serving (whose client params apply).
    pub method: Method,
    /// `sessionKey`, when given.
    pub session_key: Option<&'a str>,
    /// The model id the params name.
    pub model: Option<&'a str>,
    /// The runtime settings the host passed.
    pub settings: Option<&'a RuntimeSettings>,
    /// The call's token budget.
    pub budget: u64,
    /// `user`, `heartbeat`, `internal`, ...
    pub trigger: &'a str,
}

/// Where the session stands in its store: the store seam's cursor and metadata when a session
/// made the call ([`HostCall::storage`]); for a call no session made (a bare engine under
/// test), what the context shows, with the metadata unknown (`turnNumber` and
/// `sessionCreatedAt` absent).
fn storage(call: &HostCall) -> (StorageCursor, SessionMeta) {
    if let Some(s) = call.storage() {
        return (s.cursor.clone(), s.meta.clone());
    }
    let context = call.context();
    let cursor = StorageCursor {
        backend: "memory".into(),
        session_id: call.session_id().to_owned(),
        seq: context.len() as u64,
        entry_id: context
            .last()
            .map(|m| m.id.clone())
            .filter(|i| !i.is_empty()),
    };
    (cursor, SessionMeta::default())
}

/// `p.lifecycle` for one call.
pub(super) fn lifecycle(call: &HostCall, facts: &CallFacts<'_>) -> Json {
    let runtime = call
        .client_params(facts.method)
        .and_then(|p| p.get("runtimeContext"))
        .and_then(Json::as_object);
    let from_runtime = |key: &str| runtime.and_then(|r| r.get(key)).filter(|v| !v.is_null());
    let assistant = last_assistant(call.context());
    let from_reply = |key: &str| {
        assistant
            .and_then(|a| a.extra.get(key))
            .filter(|v| !v.is_null())
    };
    let text = |v: Option<&Json>| v.and_then(Json::as_str).map(str::to_owned);

    let mut l = Map::new();
    l.insert("sessionId".into(), json!(call.session_id()));
    if let Some(k) = facts.session_key {
        l.insert("sessionKey".into(), json!(k));
    }
    l.insert(
        "runId".into(),
        json!(text(from_runtime("runId")).unwrap_or_else(|| run_id(call))),
    );
    l.insert("trigger".into(), json!(facts.trigger));
    let model = facts
        .model
        .map(str::to_owned)
        .or_else(|| facts.settings.and_then(|s| s.model.resolved.clone()))
        .or_else(|| text(from_runtime("modelId")))
        .or_else(|| text(from_reply("model")));
    let provider = facts
        .settings
        .and_then(|s| s.model.provider.clone())
        .or_else(|| text(from_runtime("provider")))
        .or_else(|| text(from_reply("provider")));
    let mut window = Map::new();
    if let Some(m) = &model {
        l.insert("modelId".into(), json!(m));
        window.insert("modelId".into(), json!(m));
    }
    if let Some(p) = &provider {
        l.insert("provider".into(), json!(p));
        window.insert("provider".into(), json!(p));
    }
    window.insert("contextWindowTokens".into(), json!(facts.budget));
    if let Some(r) = facts.settings.and_then(|s| s.limits.max_output_tokens) {
        window.insert("reservedOutputTokens".into(), json!(r));
    }
    window.insert(
        "estimatedInputTokens".into(),
        json!(call.services().tokens.context(call.context())),
    );
    l.insert("tokenWindow".into(), Json::Object(window));
    let usage = runtime
        .and_then(|r| r.get("promptCache"))
        .and_then(|c| c.get("lastCallUsage"))
        .filter(|v| v.is_object())
        .or_else(|| from_runtime("usage").filter(|v| v.is_object()))
        .or_else(|| from_reply("usage").filter(|v| v.is_object()));
    if let Some(u) = usage {
        l.insert("usage".into(), u.clone());
    }
    let (cursor, meta) = storage(call);
    l.insert("storageCursor".into(), json!(cursor));
    // The turn this call belongs to (1 for the first), where the store counts them.
    if let Some(n) = meta.turns {
        l.insert("turnNumber".into(), json!(n + 1));
    }
    if let Some(c) = meta.created_at {
        l.insert("sessionCreatedAt".into(), json!(c));
    }
    Json::Object(l)
}

/// The run a call belongs to: the session and the stored user message that started the turn.
/// Every call of that turn (the tool loop, a compaction, a retried call the host stores nothing
/// twice for) has the same one; the next turn has another.
fn run_id(call: &HostCall) -> String {
    let request = call
        .context()
        .iter()
        .rev()
        .find(|m| matches!(m.body, MessageBody::User(_)) && !m.id.is_empty());
    match request {
        Some(m) => format!("{}:{}", call.session_id(), m.id),
        None => format!("{}:start", call.session_id()),
    }
}

fn last_assistant(
    context: &[std::sync::Arc<Message>],
) -> Option<&crate::contract::message::AssistantMessage> {
    context.iter().rev().find_map(|m| match &m.body {
        MessageBody::Assistant(a) => Some(a),
        _ => None,
    })
}

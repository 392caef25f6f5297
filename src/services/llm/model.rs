//! The model-client seam: [`ModelClient`] turns one chat request into text, usage and the
//! model's name. The OpenAI-compatible HTTP client is one implementation, the `serve` client's
//! own model (`llm.complete`) another, and an embedder may pass their own when building a
//! [`Host`](crate::Host). The LLM summarizer and `host.complete` both call models only
//! through it.
//!
//! The seam is async: [`ModelClient::complete`] returns a boxed future, so a client written
//! for Tokio (an HTTP stack, a channel to another process) fits without a thread of its own.
//! Engines run on worker threads and host functions are synchronous, so the host waits on the
//! future through `drive::wait`: the waiting thread polls it inside the context of a small
//! shared Tokio runtime (Tokio timers and sockets work), watches the turn's cancel flag and the
//! call's own time limit, and dropping the future (on cancel or timeout) is how the call is
//! cancelled. The OpenAI-compatible client closes its connection when its future is dropped.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::error::LlmError;

/// The future a [`ModelClient`] returns: the answer, or why there is none.
pub type ModelFuture = Pin<Box<dyn Future<Output = Result<ModelAnswer, LlmError>> + Send>>;

/// A chat model the host may ask for completions. Implementations must not log or return
/// their credentials (errors name the endpoint, never a key).
pub trait ModelClient: Send + Sync + fmt::Debug {
    /// The model's name as reports show it (`gpt-4o-mini`, `client`).
    fn name(&self) -> &str;

    /// Starts one completion of `request`. The future may run on any Tokio runtime thread;
    /// dropping it abandons the call (the host does when the turn is cancelled or
    /// [`ModelRequest::timeout`] passes).
    fn complete(&self, request: ModelRequest) -> ModelFuture;
}

/// One message of a chat request.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChatMessage {
    /// `system`, `user` or `assistant`.
    pub role: String,
    /// The text.
    pub content: String,
}

impl ChatMessage {
    /// A message with `role` and `content`.
    pub fn new(role: impl Into<String>, content: impl Into<String>) -> Self {
        ChatMessage {
            role: role.into(),
            content: content.into(),
        }
    }
}

/// What the model is asked.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ModelRequest {
    /// The conversation, oldest first.
    pub messages: Vec<ChatMessage>,
    /// The most tokens the answer may have.
    pub max_tokens: u64,
    /// Sampling temperature; the client's default when `None`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub temperature: Option<f64>,
    /// An OpenAI `response_format` (`{type: "json_object"}` or `{type: "json_schema",
    /// json_schema: {...}}`), passed through unchanged.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub response_format: Option<Value>,
    /// The session that asks (`host.complete`), for a client that routes by session (the
    /// `serve` client); travels as `sessionKey`.
    #[serde(rename = "sessionKey", skip_serializing_if = "Option::is_none")]
    pub session: Option<String>,
    /// How long the call may take, retries included; the host stops waiting after it.
    /// Travels as `timeoutMs`.
    #[serde(rename = "timeoutMs", serialize_with = "as_ms")]
    pub timeout: Duration,
}

fn as_ms<S: serde::Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_u64(u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// Token usage as the model reports it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Usage {
    /// Tokens of the prompt.
    pub input: u64,
    /// Tokens of the answer.
    pub output: u64,
}

/// A model's answer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ModelAnswer {
    /// The answer text, trimmed, never empty.
    pub text: String,
    /// What the model reported, when it did.
    pub usage: Option<Usage>,
    /// The model that answered (what the server said, else the client's name).
    pub model: String,
}

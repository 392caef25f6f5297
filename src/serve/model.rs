//! The client's model: with `host.summarizer: {kind: "client"}`, summaries and
//! `host.complete` ask the client `llm.complete` (when it declared the `llmComplete`
//! capability), so a model the client already pays for and holds the keys of serves the
//! engine too. ctxhost never sees those keys.
//!
//! `llm.complete` params: `{messages: [{role, content}], maxTokens, temperature?,
//! responseFormat?, timeoutMs}`; result: `{text, usage?: {input, output}, model?}`. A client
//! that has no model to lend answers the error [`NO_CLIENT_MODEL`] (or has no such method):
//! the summarizer falls back to the offline one and `host.complete` answers
//! `reason: "unavailable"`.

use std::sync::Arc;
use std::time::Duration;

use serde::Deserialize;

use crate::services::llm::{LlmError, ModelAnswer, ModelClient, ModelFuture, ModelRequest, Usage};

use super::protocol::{ClientCapabilities, code, method};
use super::rpc::Peer;

/// The JSON-RPC error code a client answers `llm.complete` with when it has no model to lend.
pub const NO_CLIENT_MODEL: i64 = -32010;

/// The client's model, asked over the connection.
#[derive(Debug)]
pub(super) struct ClientModel {
    peer: Peer,
    /// The most a request to the client may take, whatever the request asks.
    max_wait: Duration,
}

/// The model `kind: "client"` refers to, when the client said it answers `llm.complete`.
pub(super) fn client_model(
    peer: &Peer,
    capabilities: &ClientCapabilities,
    max_wait: Duration,
) -> Option<Arc<dyn ModelClient>> {
    capabilities.llm_complete.then(|| {
        Arc::new(ClientModel {
            peer: peer.clone(),
            max_wait,
        }) as Arc<dyn ModelClient>
    })
}

/// What the client answers.
#[derive(Debug, Deserialize)]
struct Answer {
    text: String,
    #[serde(default)]
    usage: Option<Usage>,
    #[serde(default)]
    model: Option<String>,
}

impl ModelClient for ClientModel {
    fn name(&self) -> &str {
        "client"
    }

    fn complete(&self, request: ModelRequest) -> ModelFuture {
        let peer = self.peer.clone();
        let wait = request.timeout.min(self.max_wait);
        Box::pin(async move {
            let params = serde_json::to_value(&request).map_err(|e| LlmError::Malformed {
                endpoint: "the client".into(),
                cause: format!("the request could not be encoded: {e}"),
            })?;
            let reply = peer.request(method::LLM_COMPLETE, params, wait).await;
            let value = match reply {
                Ok(v) => v,
                Err(e) if e.code == NO_CLIENT_MODEL || e.code == code::METHOD_NOT_FOUND => {
                    return Err(LlmError::Unavailable {
                        reason: format!("the client lends no model: {}", e.message),
                    });
                }
                Err(e) if e.message.contains("did not answer") => {
                    return Err(LlmError::Timeout {
                        endpoint: "the client".into(),
                        timeout_ms: u64::try_from(wait.as_millis()).unwrap_or(u64::MAX),
                    });
                }
                Err(e) => {
                    return Err(LlmError::Unreachable {
                        endpoint: "the client".into(),
                        cause: e.to_string(),
                    });
                }
            };
            let answer: Answer =
                serde_json::from_value(value).map_err(|e| LlmError::Malformed {
                    endpoint: "the client".into(),
                    cause: e.to_string(),
                })?;
            let text = answer.text.trim();
            if text.is_empty() {
                return Err(LlmError::Empty {
                    endpoint: "the client".into(),
                });
            }
            Ok(ModelAnswer {
                text: text.to_owned(),
                usage: answer.usage,
                model: answer
                    .model
                    .filter(|m| !m.trim().is_empty())
                    .unwrap_or_else(|| "client".into()),
            })
        })
    }
}

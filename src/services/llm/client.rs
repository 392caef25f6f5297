//! A blocking OpenAI-compatible Chat Completions client: the request and response types, one
//! deadline per use, retries with backoff on 429 and 5xx, and errors that name the endpoint
//! and never the API key.
//!
//! Each call gets an HTTP agent of its own and runs on a thread of its own. Dropping the call's
//! future (the turn was cancelled, the host stopped waiting) shuts that agent down
//! ([`ureq::Agent::shutdown`]): its socket is closed at once, the blocked read on the call's
//! thread fails, and the thread ends; no request outlives its waiter until ureq's own timeout.
//! A TCP connect in progress is the one step a shutdown cannot interrupt; it is bounded by the
//! connect timeout ([`CONNECT_TIMEOUT`], or the call's limit when shorter).
//!
//! https uses rustls with the webpki roots, or only the CAs of `caFile` when one is configured
//! (a gateway with a private CA, a local server with a self-signed certificate).

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::error::LlmError;
use super::model::{ChatMessage, ModelAnswer, ModelClient, ModelFuture, ModelRequest, Usage};

/// The most bytes of a response body read (4 MiB): a summary is a few KiB.
const MAX_BODY_BYTES: u64 = 4 << 20;

/// The most characters of an error body kept in an error message.
const MAX_ERROR_BODY_CHARS: usize = 300;

/// Attempts per call, the first included, when the server answers 429 or 5xx.
const MAX_ATTEMPTS: u32 = 4;

/// The first backoff; each retry doubles it, and a `Retry-After` replaces it.
const FIRST_BACKOFF: Duration = Duration::from_millis(200);

/// The longest single wait between attempts.
const MAX_BACKOFF: Duration = Duration::from_secs(10);

/// The longest a TCP connect may take (a shutdown cannot interrupt one in progress).
pub(super) const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// How often a backoff wait looks whether its call was abandoned.
const ABORT_POLL: Duration = Duration::from_millis(20);

/// An API key: sent only in the `Authorization` header, never printed.
#[derive(Clone, PartialEq, Eq)]
pub struct ApiKey(String);

impl ApiKey {
    /// Wraps a key (e.g. from a secrets manager) so that it cannot be printed by accident.
    pub fn new(key: impl Into<String>) -> Self {
        ApiKey(key.into())
    }

    /// The key as sent, for removing it from anything the server echoes back.
    fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for ApiKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("ApiKey(<redacted>)")
    }
}

/// The body of `POST /chat/completions`.
#[derive(Debug, Serialize)]
struct ChatRequest<'a> {
    model: &'a str,
    messages: &'a [ChatMessage],
    max_tokens: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    temperature: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    response_format: Option<&'a Value>,
    stream: bool,
}

/// The parts of a Chat Completions response the summarizer reads.
#[derive(Debug, Deserialize)]
struct ChatResponse {
    choices: Vec<Choice>,
    #[serde(default)]
    usage: Option<WireUsage>,
    #[serde(default)]
    model: Option<String>,
}

#[derive(Debug, Deserialize)]
struct Choice {
    message: AnswerMessage,
    #[serde(default)]
    finish_reason: Option<String>,
}

#[derive(Debug, Deserialize)]
struct AnswerMessage {
    /// A string, or (from some servers) a list of `{type: "text", text}` parts.
    #[serde(default)]
    content: Option<Value>,
    #[serde(default)]
    refusal: Option<String>,
}

/// Token usage as the server reports it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
struct WireUsage {
    #[serde(default)]
    prompt_tokens: u64,
    #[serde(default)]
    completion_tokens: u64,
}

/// A [`ModelClient`] for any OpenAI-compatible Chat Completions endpoint (OpenAI, a local
/// llama.cpp or vLLM server, a gateway): retries with backoff on 429 and 5xx within the
/// request's timeout; errors name the endpoint and never the key. Its calls are blocking HTTP
/// (ureq) on a thread of their own, each with an agent of its own; the future resolves when
/// the thread answers, and dropping it shuts the call's connection down.
#[derive(Clone)]
pub struct OpenAiClient {
    config: ureq::config::Config,
    endpoint: String,
    model: String,
    key: Option<ApiKey>,
}

impl fmt::Debug for OpenAiClient {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OpenAiClient")
            .field("endpoint", &self.endpoint)
            .field("model", &self.model)
            .field("key", &self.key.as_ref().map(|_| "<redacted>"))
            .finish()
    }
}

/// How one attempt ended when it gave no answer.
enum Failure {
    /// Worth another attempt (429, 5xx), after the server's `Retry-After` when it sent one.
    Retry(LlmError, Option<Duration>),
    /// Final.
    Stop(LlmError),
}

impl OpenAiClient {
    /// A client for `model` at `base_url` (`/chat/completions` appended unless present).
    pub fn new(base_url: &str, model: &str, key: Option<ApiKey>) -> Self {
        let base = base_url.trim_end_matches('/');
        let endpoint = if base.ends_with("/chat/completions") {
            base.to_owned()
        } else {
            format!("{base}/chat/completions")
        };
        OpenAiClient {
            config: OpenAiClient::agent_config(ureq::tls::TlsConfig::default()),
            endpoint,
            model: model.to_owned(),
            key,
        }
    }

    /// The same client trusting only the CA certificates in `pem` (one or more PEM
    /// `CERTIFICATE` blocks) for https, in place of the webpki roots: a gateway with a private
    /// CA, a local server with a self-signed certificate. An error says what is wrong with
    /// `pem`.
    pub fn trusting_only(mut self, pem: &[u8]) -> Result<Self, String> {
        let mut certs = Vec::new();
        for item in ureq::tls::parse_pem(pem) {
            match item {
                Ok(ureq::tls::PemItem::Certificate(c)) => certs.push(c),
                Ok(_) => {}
                Err(e) => return Err(format!("not a PEM file: {e}")),
            }
        }
        if certs.is_empty() {
            return Err("holds no PEM CERTIFICATE block".into());
        }
        let tls = ureq::tls::TlsConfig::builder()
            .root_certs(ureq::tls::RootCerts::new_with_certs(&certs))
            .build();
        self.config = OpenAiClient::agent_config(tls);
        Ok(self)
    }

    /// What every call's agent is built from.
    fn agent_config(tls: ureq::tls::TlsConfig) -> ureq::config::Config {
        ureq::Agent::config_builder()
            .http_status_as_error(false)
            .max_redirects(0)
            .timeout_connect(Some(CONNECT_TIMEOUT))
            .tls_config(tls)
            .user_agent(concat!("ctxhost/", env!("CARGO_PKG_VERSION")))
            .build()
    }

    /// The URL every request goes to.
    pub fn endpoint(&self) -> &str {
        &self.endpoint
    }

    /// Asks for a completion of `request`, retrying 429 and 5xx with backoff, all within
    /// its timeout; blocks the calling thread.
    pub fn complete_blocking(&self, request: &ModelRequest) -> Result<ModelAnswer, LlmError> {
        let agent = ureq::Agent::new_with_config(self.config.clone());
        self.run(&agent, request, &AtomicBool::new(false))
    }

    /// [`OpenAiClient::complete_blocking`] on `agent`, giving up (as [`LlmError::Cancelled`])
    /// once `abandoned` is set: the waiter has gone and shut `agent` down.
    fn run(
        &self,
        agent: &ureq::Agent,
        request: &ModelRequest,
        abandoned: &AtomicBool,
    ) -> Result<ModelAnswer, LlmError> {
        let deadline = Instant::now() + request.timeout;
        let timeout_ms = u64::try_from(request.timeout.as_millis()).unwrap_or(u64::MAX);
        let request = ChatRequest {
            model: &self.model,
            messages: &request.messages,
            max_tokens: request.max_tokens,
            temperature: request.temperature,
            response_format: request.response_format.as_ref(),
            stream: false,
        };
        let body = serde_json::to_vec(&request).map_err(|e| LlmError::Malformed {
            endpoint: self.endpoint.clone(),
            cause: format!("the request could not be encoded: {e}"),
        })?;
        let timeout = || LlmError::Timeout {
            endpoint: self.endpoint.clone(),
            timeout_ms,
        };
        let mut backoff = FIRST_BACKOFF;
        for attempt in 1..=MAX_ATTEMPTS {
            let left = deadline
                .checked_duration_since(Instant::now())
                .filter(|d| !d.is_zero())
                .ok_or_else(timeout)?;
            let outcome = self.attempt(agent, &body, left, timeout_ms);
            if abandoned.load(Ordering::SeqCst) {
                return Err(LlmError::Cancelled);
            }
            match outcome {
                Ok(answer) => return Ok(answer),
                Err(Failure::Stop(e)) => return Err(e),
                Err(Failure::Retry(e, retry_after)) => {
                    let wait = retry_after.unwrap_or(backoff).min(MAX_BACKOFF);
                    let last = attempt == MAX_ATTEMPTS;
                    if last || Instant::now() + wait >= deadline {
                        return Err(e);
                    }
                    tracing::info!(
                        endpoint = %self.endpoint,
                        attempt,
                        "retrying the model in {} ms: {e}",
                        wait.as_millis()
                    );
                    if nap(wait, abandoned) {
                        return Err(LlmError::Cancelled);
                    }
                    backoff = backoff.saturating_mul(2);
                }
            }
        }
        Err(timeout())
    }

    /// One HTTP request on `agent` within `left`.
    fn attempt(
        &self,
        agent: &ureq::Agent,
        body: &[u8],
        left: Duration,
        timeout_ms: u64,
    ) -> Result<ModelAnswer, Failure> {
        let mut request = agent
            .post(&self.endpoint)
            .config()
            .timeout_global(Some(left))
            .build()
            .header("Content-Type", "application/json")
            .header("Accept", "application/json");
        if let Some(key) = &self.key {
            request = request.header("Authorization", format!("Bearer {}", key.expose()));
        }
        let mut response = request
            .send(body)
            .map_err(|e| Failure::Stop(self.transport_error(&e, timeout_ms)))?;
        let status = response.status().as_u16();
        let retry_after = response
            .headers()
            .get("retry-after")
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.trim().parse::<u64>().ok())
            .map(Duration::from_secs);
        let text = response
            .body_mut()
            .with_config()
            .limit(MAX_BODY_BYTES)
            .read_to_string()
            .map_err(|e| Failure::Stop(self.transport_error(&e, timeout_ms)))?;
        if !(200..300).contains(&status) {
            let error = LlmError::Http {
                endpoint: self.endpoint.clone(),
                status,
                body: self.redact(&clip(&text, MAX_ERROR_BODY_CHARS)),
            };
            return Err(if status == 429 || status >= 500 {
                Failure::Retry(error, retry_after)
            } else {
                Failure::Stop(error)
            });
        }
        self.parse(&text).map_err(Failure::Stop)
    }

    /// Reads a 2xx body as a completion.
    fn parse(&self, text: &str) -> Result<ModelAnswer, LlmError> {
        let malformed = |cause: String| LlmError::Malformed {
            endpoint: self.endpoint.clone(),
            cause: self.redact(&cause),
        };
        let response: ChatResponse =
            serde_json::from_str(text).map_err(|e| malformed(e.to_string()))?;
        let choice = response
            .choices
            .into_iter()
            .next()
            .ok_or_else(|| malformed("no choices".into()))?;
        let refused = |reason: String| LlmError::Refused {
            reason: self.redact(&clip(&reason, MAX_ERROR_BODY_CHARS)),
            endpoint: self.endpoint.clone(),
        };
        if let Some(reason) = choice.message.refusal.filter(|r| !r.trim().is_empty()) {
            return Err(refused(reason));
        }
        if choice.finish_reason.as_deref() == Some("content_filter") {
            return Err(refused("finish_reason content_filter".into()));
        }
        let text = match choice.message.content {
            Some(Value::String(s)) => s,
            Some(Value::Array(parts)) => parts
                .iter()
                .filter_map(|p| p.get("text").and_then(Value::as_str))
                .collect::<Vec<_>>()
                .join(""),
            Some(Value::Null) | None => String::new(),
            Some(other) => return Err(malformed(format!("content is {other}, not text"))),
        };
        let text = text.trim();
        if text.is_empty() {
            return Err(LlmError::Empty {
                endpoint: self.endpoint.clone(),
            });
        }
        Ok(ModelAnswer {
            text: text.to_owned(),
            usage: response.usage.map(|u| Usage {
                input: u.prompt_tokens,
                output: u.completion_tokens,
            }),
            model: response
                .model
                .filter(|m| !m.trim().is_empty())
                .unwrap_or_else(|| self.model.clone()),
        })
    }

    /// A transport error as the caller should read it.
    fn transport_error(&self, e: &ureq::Error, timeout_ms: u64) -> LlmError {
        let timed_out = match e {
            ureq::Error::Timeout(_) => true,
            ureq::Error::Io(io) => io.kind() == std::io::ErrorKind::TimedOut,
            _ => false,
        };
        if timed_out {
            return LlmError::Timeout {
                endpoint: self.endpoint.clone(),
                timeout_ms,
            };
        }
        LlmError::Unreachable {
            endpoint: self.endpoint.clone(),
            cause: self.redact(&e.to_string()),
        }
    }

    /// `text` with the API key replaced, for anything a server may have echoed.
    fn redact(&self, text: &str) -> String {
        match &self.key {
            Some(key) if !key.expose().is_empty() => text.replace(key.expose(), "<redacted>"),
            _ => text.to_owned(),
        }
    }
}

impl ModelClient for OpenAiClient {
    fn name(&self) -> &str {
        &self.model
    }

    fn complete(&self, request: ModelRequest) -> ModelFuture {
        let client = self.clone();
        let endpoint = self.endpoint.clone();
        let (tx, rx) = tokio::sync::oneshot::channel();
        // ureq blocks: the request runs on a thread of its own with an agent of its own, which
        // the future shuts down when dropped, so the thread's blocked read fails at once.
        let abort = AbortOnDrop {
            agent: ureq::Agent::new_with_config(self.config.clone()),
            abandoned: Arc::new(AtomicBool::new(false)),
        };
        let (agent, abandoned) = (abort.agent.clone(), Arc::clone(&abort.abandoned));
        // The caller's subscriber sees the call's log lines (retries), as if it ran inline.
        let dispatch = tracing::dispatcher::get_default(Clone::clone);
        let spawned = std::thread::Builder::new()
            .name("ctxhost-model-http".into())
            .spawn(move || {
                tracing::dispatcher::with_default(&dispatch, || {
                    let _ = tx.send(client.run(&agent, &request, &abandoned));
                });
            });
        Box::pin(async move {
            let _abort = abort;
            if let Err(e) = spawned {
                return Err(LlmError::Unavailable {
                    reason: format!("cannot start a thread for the model call: {e}"),
                });
            }
            rx.await.unwrap_or_else(|_| {
                Err(LlmError::Unavailable {
                    reason: format!("the call to {endpoint} stopped without an answer"),
                })
            })
        })
    }
}

/// Shuts a call's agent down when the call's future is dropped (finished, cancelled or
/// abandoned at a timeout): its connection closes and its thread's blocked I/O fails.
struct AbortOnDrop {
    agent: ureq::Agent,
    abandoned: Arc<AtomicBool>,
}

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.abandoned.store(true, Ordering::SeqCst);
        // Clones share the connections: shutting one down closes the call's.
        self.agent.clone().shutdown();
    }
}

/// Sleeps `wait`, or less when `abandoned` is set meanwhile (then `true`).
fn nap(wait: Duration, abandoned: &AtomicBool) -> bool {
    let until = Instant::now() + wait;
    loop {
        if abandoned.load(Ordering::SeqCst) {
            return true;
        }
        let left = until.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return false;
        }
        std::thread::sleep(left.min(ABORT_POLL));
    }
}

/// At most `max` characters of `text`, with "…" when cut.
fn clip(text: &str, max: usize) -> String {
    match text.char_indices().nth(max) {
        Some((at, _)) => format!("{}…", &text[..at]),
        None => text.to_owned(),
    }
}

#[cfg(test)]
#[path = "client_tests.rs"]
mod tests;

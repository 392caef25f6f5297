//! Model calls: an LLM summarizer behind the [`Summarizer`] seam, for any OpenAI-compatible
//! Chat Completions endpoint (OpenAI, a local llama.cpp or vLLM server, a gateway).
//!
//! `model` is the seam: [`ModelClient`] (async, one chat request → text, usage, model), which
//! the summarizer, `host.complete` and an embedder's own client all go through; `bridge` waits
//! on one (and on a summary: [`Summarizer`] is async too) from a synchronous thread,
//! cancellable and bounded; `budget` keeps calls per turn and
//! tokens per day. `client` ([`OpenAiClient`]) speaks Chat Completions (request and response
//! types, retries with backoff on 429 and 5xx within the call's timeout); `prompt` writes what
//! the model is asked (OpenClaw's compaction sections, the previous summary folded in, the
//! transcript as data); `summarizer` holds [`LlmSummarizer`]: the identifier audit, the
//! per-turn and per-day budgets, and the fall back to the offline [`BuiltinSummarizer`]
//! whenever the model cannot answer.
//!
//! The API key is read from the environment variable the configuration names, is sent only in
//! the `Authorization` header, and never appears in a log, an error or a `Debug` output.

pub(crate) mod budget;
mod client;
pub(crate) mod drive;
mod error;
mod model;
mod prompt;
mod summarizer;

use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::error::Result;
use crate::services::summarize::{BuiltinSummarizer, Summarizer};

pub use client::{ApiKey, OpenAiClient};
pub use error::LlmError;
pub use model::{ChatMessage, ModelAnswer, ModelClient, ModelFuture, ModelRequest, Usage};
pub use summarizer::LlmSummarizer;

/// `host.summarizer`: which summarizer writes compaction summaries and answers
/// `host.summarize`. The offline `builtin` one is the default.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "camelCase")]
pub enum SummarizerSettings {
    /// The offline, deterministic summarizer (contract §9).
    #[default]
    Builtin,
    /// A model behind an OpenAI-compatible Chat Completions endpoint, with the offline
    /// summarizer as its fallback.
    Llm(LlmSettings),
    /// The model of the `serve` client (asked with `llm.complete`), with the offline
    /// summarizer as its fallback; outside `serve`, or when the client lends no model, the
    /// offline summarizer answers.
    Client(ModelLimits),
}

/// What a model may spend: per call, per turn and per day. `host.summarizer` with
/// `kind: "client"` and `host.complete` are this; `kind: "llm"` has the same four keys.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
pub struct ModelLimits {
    /// How long one use (a summary, a `host.complete` call) may wait for the model, retries
    /// included, in ms. Default 60,000.
    pub timeout_ms: u64,
    /// The most tokens the model may write per call. Default 2,048.
    pub max_output_tokens: u64,
    /// Model calls one session turn may make. Default 4.
    pub max_calls_per_turn: u32,
    /// Prompt plus completion tokens that may be spent in a rolling 24 hours. Default
    /// 2,000,000.
    pub max_tokens_per_day: u64,
}

impl Default for ModelLimits {
    fn default() -> Self {
        ModelLimits {
            timeout_ms: default_timeout_ms(),
            max_output_tokens: default_max_output_tokens(),
            max_calls_per_turn: default_max_calls_per_turn(),
            max_tokens_per_day: default_max_tokens_per_day(),
        }
    }
}

/// `host.summarizer` with `kind: "llm"`: where the model is and what it may spend.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct LlmSettings {
    /// The API base, e.g. `https://api.openai.com/v1` or `http://127.0.0.1:8080/v1`;
    /// `/chat/completions` is appended unless the URL already ends with it.
    pub base_url: String,
    /// The model name sent in each request.
    pub model: String,
    /// The environment variable holding the API key; none for servers that need no key.
    #[serde(default)]
    pub api_key_env: Option<String>,
    /// A PEM file of CA certificates to trust for an `https://` `baseUrl` *instead of* the
    /// built-in webpki roots (a gateway with a private CA, a local server with a self-signed
    /// certificate); none: the webpki roots. Read when the host starts.
    #[serde(default)]
    pub ca_file: Option<std::path::PathBuf>,
    /// How long one summary may wait for the model, retries included, in ms. Default 60,000.
    #[serde(default = "default_timeout_ms")]
    pub timeout_ms: u64,
    /// The most tokens the model may write per call (`max_tokens`). Default 2,048.
    #[serde(default = "default_max_output_tokens")]
    pub max_output_tokens: u64,
    /// Model calls one session turn may make (a corrective retry counts). Default 4.
    #[serde(default = "default_max_calls_per_turn")]
    pub max_calls_per_turn: u32,
    /// Prompt plus completion tokens all summaries may spend in a rolling 24 hours.
    /// Default 2,000,000.
    #[serde(default = "default_max_tokens_per_day")]
    pub max_tokens_per_day: u64,
}

fn default_timeout_ms() -> u64 {
    60_000
}

fn default_max_output_tokens() -> u64 {
    2_048
}

fn default_max_calls_per_turn() -> u32 {
    4
}

fn default_max_tokens_per_day() -> u64 {
    2_000_000
}

impl LlmSettings {
    /// Its limits.
    pub fn limits(&self) -> ModelLimits {
        ModelLimits {
            timeout_ms: self.timeout_ms,
            max_output_tokens: self.max_output_tokens,
            max_calls_per_turn: self.max_calls_per_turn,
            max_tokens_per_day: self.max_tokens_per_day,
        }
    }

    /// Settings for `model` at `base_url` with the default limits and no API key.
    pub fn new(base_url: impl Into<String>, model: impl Into<String>) -> Self {
        LlmSettings {
            base_url: base_url.into(),
            model: model.into(),
            api_key_env: None,
            ca_file: None,
            timeout_ms: default_timeout_ms(),
            max_output_tokens: default_max_output_tokens(),
            max_calls_per_turn: default_max_calls_per_turn(),
            max_tokens_per_day: default_max_tokens_per_day(),
        }
    }
}

/// A summarizer and the model it uses, if any.
pub type Configured = (Arc<dyn Summarizer>, Option<Arc<dyn ModelClient>>);

/// The summarizer `settings` describe, and the model it uses (which `host.complete` uses
/// too). An LLM one reads its API key from the environment now, so a missing key is reported
/// when the host starts, not mid-turn. `client` is the model `kind: "client"` means (the
/// `serve` client's); without one that kind has no model and the offline summarizer answers.
pub fn configured(
    settings: &SummarizerSettings,
    client: Option<Arc<dyn ModelClient>>,
) -> Result<Configured> {
    Ok(match settings {
        SummarizerSettings::Builtin => (Arc::new(BuiltinSummarizer), client),
        SummarizerSettings::Llm(llm) => {
            let summarizer = LlmSummarizer::from_env(llm)?;
            let model = summarizer.model();
            (Arc::new(summarizer), Some(model))
        }
        SummarizerSettings::Client(limits) => match client {
            Some(model) => (
                Arc::new(LlmSummarizer::with_client(Arc::clone(&model), *limits)?),
                Some(model),
            ),
            None => {
                tracing::info!(
                    "host.summarizer is kind \"client\" but no client model is available (not serving a client that lends one); the built-in summarizer answers"
                );
                (Arc::new(BuiltinSummarizer), None)
            }
        },
    })
}

/// Builds the summarizer `settings` describe (see [`configured`]), with no client model.
pub fn configured_summarizer(settings: &SummarizerSettings) -> Result<Arc<dyn Summarizer>> {
    Ok(configured(settings, None)?.0)
}

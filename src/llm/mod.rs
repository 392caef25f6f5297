//! Model calls: an LLM summarizer behind the [`Summarizer`] seam, for any OpenAI-compatible
//! Chat Completions endpoint (OpenAI, a local llama.cpp or vLLM server, a gateway).
//!
//! `client` speaks Chat Completions (request and response types, retries with backoff on 429
//! and 5xx, one deadline per summary); `prompt` writes what the model is asked (OpenClaw's
//! compaction sections, the previous summary folded in, the transcript as data); `summarizer`
//! holds [`LlmSummarizer`]: the identifier audit, the per-turn and per-day budgets, and the
//! fall back to the offline [`BuiltinSummarizer`] whenever the model cannot answer.
//!
//! The API key is read from the environment variable the configuration names, is sent only in
//! the `Authorization` header, and never appears in a log, an error or a `Debug` output.

mod client;
mod prompt;
mod summarizer;

use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::error::Result;
use crate::summarize::{BuiltinSummarizer, Summarizer};

pub use client::{ApiKey, LlmError};
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
    /// Settings for `model` at `base_url` with the default limits and no API key.
    pub fn new(base_url: impl Into<String>, model: impl Into<String>) -> Self {
        LlmSettings {
            base_url: base_url.into(),
            model: model.into(),
            api_key_env: None,
            timeout_ms: default_timeout_ms(),
            max_output_tokens: default_max_output_tokens(),
            max_calls_per_turn: default_max_calls_per_turn(),
            max_tokens_per_day: default_max_tokens_per_day(),
        }
    }
}

/// Builds the summarizer `settings` describe; an LLM one reads its API key from the
/// environment now, so a missing key is reported when the host starts, not mid-turn.
pub fn configured_summarizer(settings: &SummarizerSettings) -> Result<Arc<dyn Summarizer>> {
    Ok(match settings {
        SummarizerSettings::Builtin => Arc::new(BuiltinSummarizer),
        SummarizerSettings::Llm(llm) => Arc::new(LlmSummarizer::from_env(llm)?),
    })
}

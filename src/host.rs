//! The `host` API that scripts see (contract §5), written once in Rust.
//!
//! The Lua and Rhai adapters only register these functions under the names scripts use
//! (`host.tokens`, `host.summarize`, `host.delegateCompaction`, `host.repairPairing`,
//! `host.log.*`, `host.config`, `host.now`); every behaviour lives here. A [`HostCall`] is
//! made for each lifecycle call and owns (cheap `Arc`s of) everything the call may touch, so
//! an adapter can keep it in its VM for the duration of the call.

use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::compaction::{self, CompactionSettings};
use crate::contract::{CompactParams, CompactResult, ResultLimits, opt_count};
use crate::message::Message;
use crate::pairing::{self, Repaired};
use crate::summarize::{Summarizer, SummaryRequest};
use crate::tokens::TokenCache;

/// What a session shares with every call into its engine.
#[derive(Debug)]
pub struct SessionServices {
    /// Token counts, cached per message.
    pub tokens: TokenCache,
    /// The summarizer behind `host.summarize` and built-in compaction.
    pub summarizer: Arc<dyn Summarizer>,
    /// Built-in compaction settings.
    pub compaction: CompactionSettings,
    /// Caps on engine results.
    pub limits: ResultLimits,
}

/// Everything one lifecycle call may use: the session context and the host services.
#[derive(Clone, Debug)]
pub struct HostCall {
    engine_id: Arc<str>,
    session_id: Arc<str>,
    context: Arc<Vec<Arc<Message>>>,
    services: Arc<SessionServices>,
    config: Arc<Value>,
    token_budget: u64,
}

/// `host.log` levels.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LogLevel {
    /// `host.log.debug`
    Debug,
    /// `host.log.info`
    Info,
    /// `host.log.warn`
    Warn,
}

/// The most bytes of script text one log line keeps; the rest is cut (on a character boundary).
pub const LOG_CAP: usize = 64 << 10;

/// `text` cut to `cap` bytes on a character boundary, ending with how many bytes were cut, so
/// a script cannot flood the log (nor panic the host by cutting inside a character).
pub fn cut_log_text(mut text: String, cap: usize) -> String {
    if text.len() <= cap {
        return text;
    }
    let mut end = cap;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    let cut = text.len() - end;
    text.truncate(end);
    text.push_str(&format!("… ({cut} more bytes cut)"));
    text
}

/// Logs a script's line at `level`, tagged with the engine and, inside a call, the session;
/// the text is cut to [`LOG_CAP`] by [`cut_log_text`].
pub fn log(engine: &str, session: Option<&str>, level: LogLevel, text: String) {
    let text = cut_log_text(text, LOG_CAP);
    match (level, session) {
        (LogLevel::Debug, Some(session)) => tracing::debug!(engine, session, "{text}"),
        (LogLevel::Info, Some(session)) => tracing::info!(engine, session, "{text}"),
        (LogLevel::Warn, Some(session)) => tracing::warn!(engine, session, "{text}"),
        (LogLevel::Debug, None) => tracing::debug!(engine, "{text}"),
        (LogLevel::Info, None) => tracing::info!(engine, "{text}"),
        (LogLevel::Warn, None) => tracing::warn!(engine, "{text}"),
    }
}

/// Options of `host.summarize(messages, opts)`.
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SummarizeOptions {
    /// Token budget of the summary; default: the compaction summary budget for this turn.
    #[serde(default, deserialize_with = "opt_count")]
    pub max_tokens: Option<u64>,
    /// A summary to fold in.
    #[serde(default)]
    pub previous_summary: Option<String>,
    /// Extra focus.
    #[serde(default)]
    pub instructions: Option<String>,
}

/// What `host.summarize` returns to scripts.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct SummarizeOutput {
    /// The summary text.
    pub text: String,
    /// Its tokens.
    pub tokens: u64,
}

/// The fields of `p` that `host.delegateCompaction(p)` passes on to the built-in compaction.
pub const COMPACT_FIELDS: [&str; 8] = [
    "sessionId",
    "sessionKey",
    "tokenBudget",
    "force",
    "currentTokenCount",
    "compactionTarget",
    "customInstructions",
    "runtimeSettings",
];

/// `host.delegateCompaction(p)`: the compaction params from `p`'s [`COMPACT_FIELDS`].
pub fn delegate_params(fields: Map<String, Value>) -> Result<CompactParams, String> {
    serde_json::from_value(Value::Object(fields))
        .map_err(|e| format!("host.delegateCompaction: {e}"))
}

/// `host.summarize(messages, opts)`: the options (`None` = defaults).
pub fn summarize_options(opts: Option<Value>) -> Result<SummarizeOptions, String> {
    match opts {
        None | Some(Value::Null) => Ok(Default::default()),
        Some(v) => serde_json::from_value(v).map_err(|e| format!("host.summarize opts: {e}")),
    }
}

impl HostCall {
    /// A call context for one lifecycle call.
    pub fn new(
        engine_id: Arc<str>,
        session_id: Arc<str>,
        context: Arc<Vec<Arc<Message>>>,
        services: Arc<SessionServices>,
        config: Arc<Value>,
        token_budget: u64,
    ) -> Self {
        HostCall {
            engine_id,
            session_id,
            context,
            services,
            config,
            token_budget,
        }
    }

    /// The engine this call is for.
    pub fn engine_id(&self) -> &str {
        &self.engine_id
    }

    /// The session this call is for.
    pub fn session_id(&self) -> &str {
        &self.session_id
    }

    /// The session's context (what `assemble` and `afterTurn` receive as `messages`).
    pub fn context(&self) -> &Arc<Vec<Arc<Message>>> {
        &self.context
    }

    /// The session services.
    pub fn services(&self) -> &SessionServices {
        &self.services
    }

    /// `host.config`: the engine's entry config.
    pub fn config(&self) -> &Value {
        &self.config
    }

    /// The current turn's token budget.
    pub fn token_budget(&self) -> u64 {
        self.token_budget
    }

    /// `host.tokens(string)`.
    pub fn tokens_text(&self, text: &str) -> u64 {
        self.services.tokens.text(text)
    }

    /// `host.tokens(message)`: cached for stored messages.
    pub fn tokens_message(&self, message: &Arc<Message>) -> u64 {
        self.services.tokens.message(message)
    }

    /// `host.tokens(list)`.
    pub fn tokens_messages(&self, messages: &[Arc<Message>]) -> u64 {
        self.services.tokens.messages(messages)
    }

    /// `host.summarize(messages, opts)`.
    pub fn summarize(
        &self,
        messages: &[Arc<Message>],
        opts: &SummarizeOptions,
    ) -> crate::Result<SummarizeOutput> {
        let s = &self.services;
        let request = SummaryRequest {
            messages,
            previous_summary: opts.previous_summary.as_deref(),
            max_tokens: opts
                .max_tokens
                .unwrap_or_else(|| s.compaction.summary_tokens_for(self.token_budget)),
            instructions: opts.instructions.as_deref(),
            identifier_policy: s.compaction.identifier_policy,
        };
        let summary = s
            .summarizer
            .summarize(&request, s.tokens.counter().as_ref())?;
        Ok(SummarizeOutput {
            text: summary.text,
            tokens: summary.tokens,
        })
    }

    /// `host.delegateCompaction(p)`: built-in compaction of this session.
    pub fn delegate_compaction(&self, params: &CompactParams) -> CompactResult {
        let s = &self.services;
        compaction::compact(
            &self.context,
            &s.tokens,
            s.summarizer.as_ref(),
            &s.compaction,
            params,
        )
    }

    /// `host.repairPairing(messages)`.
    pub fn repair_pairing(&self, messages: Vec<Arc<Message>>) -> Repaired {
        pairing::repair(messages)
    }

    /// `host.log.debug/info/warn(msg)`, tagged with engine and session; `text` is the script's,
    /// cut by [`log`] to [`LOG_CAP`].
    pub fn log(&self, level: LogLevel, text: String) {
        log(&self.engine_id, Some(&self.session_id), level, text);
    }

    /// `host.now()`: milliseconds since the Unix epoch.
    pub fn now_ms(&self) -> f64 {
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_secs_f64() * 1000.0)
            .unwrap_or(0.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn log_text_is_cut_on_a_char_boundary_saying_how_much() {
        assert_eq!(cut_log_text("short".into(), 10), "short");
        // "€" is three bytes: a cap of 4 falls inside the second one.
        assert_eq!(cut_log_text("€€€".into(), 4), "€… (6 more bytes cut)");
        let long = "€".repeat(30_000);
        let cut = cut_log_text(long, LOG_CAP);
        assert!(cut.ends_with(&format!("… ({} more bytes cut)", 90_000 - 65_535)));
    }
}

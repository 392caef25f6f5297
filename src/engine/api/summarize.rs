//! `host.summarize(messages, opts)`: the session's summarizer (built-in or LLM) on any messages
//! the script picks → `{text, tokens}`.

use std::sync::Arc;
use std::sync::atomic::AtomicBool;

use serde::{Deserialize, Serialize};
use serde_json::json;

use super::HostCall;
use super::table::{Args, Ctx};
use super::value::{HostError, HostOut};
use crate::contract::message::Message;
use crate::contract::opt_count;
use crate::services::summarize::SummaryRequest;

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

impl HostCall {
    /// Summarizes `messages` with the session's summarizer and compaction settings, waiting
    /// on this thread; setting `cancel` drops the summary (an error).
    pub fn summarize(
        &self,
        messages: &[Arc<Message>],
        opts: &SummarizeOptions,
        cancel: &AtomicBool,
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
        let counter = s.tokens.counter();
        let summary = crate::services::llm::drive::summarize(
            s.summarizer.as_ref(),
            request,
            counter.as_ref(),
            cancel,
        )?;
        Ok(SummarizeOutput {
            text: summary.text,
            tokens: summary.tokens,
        })
    }
}

/// The most input one `host.summarize` reads (message text, tool-call names and arguments, the
/// previous summary and the instructions): the summarizer runs as one native step (no
/// interrupt), so its input bounds how long it can outlive the call's deadline.
pub(crate) const MAX_SUMMARIZE_BYTES: usize = 16 << 20;

/// The bytes of `m` a summarizer reads: its text and its tool calls (names and arguments).
fn summary_input_bytes(m: &Message) -> usize {
    m.tool_calls().fold(m.text().len(), |n, c| {
        n.saturating_add(c.name.len())
            .saturating_add(json_bytes(&c.arguments))
    })
}

/// About the bytes of `v` as JSON text (strings and keys by length, no escapes): linear in the
/// value, with no string built.
fn json_bytes(v: &serde_json::Value) -> usize {
    use serde_json::Value;
    match v {
        Value::Null | Value::Bool(_) => 5,
        Value::Number(_) => 8,
        Value::String(s) => s.len() + 2,
        Value::Array(items) => items
            .iter()
            .fold(2, |n, i| n.saturating_add(json_bytes(i) + 1)),
        Value::Object(map) => map.iter().fold(2, |n, (k, v)| {
            n.saturating_add(k.len() + 4).saturating_add(json_bytes(v))
        }),
    }
}

/// `host.summarize(messages, opts)` → `{text, tokens}`. Bad arguments are the script's fault; a
/// failing summarizer (an LLM endpoint down) is the host's.
pub(super) fn summarize(cx: &Ctx<'_>, [messages, opts, _]: Args) -> Result<HostOut, HostError> {
    let max = cx.scope().limits().max_result_messages;
    let messages = messages
        .into_messages(max)
        .map_err(|e| cx.script_error(format!("messages {e}")))?;
    let opts: SummarizeOptions = match opts.into_json() {
        None => return Err(cx.script_error("opts must be a map")),
        Some(serde_json::Value::Null) => SummarizeOptions::default(),
        Some(v) => serde_json::from_value(v).map_err(|e| cx.script_error(format!("opts: {e}")))?,
    };
    let extra = [&opts.previous_summary, &opts.instructions]
        .into_iter()
        .flatten()
        .map(String::len)
        .fold(0usize, usize::saturating_add);
    let bytes = messages
        .iter()
        .map(|m| summary_input_bytes(m))
        .fold(extra, usize::saturating_add);
    if bytes > MAX_SUMMARIZE_BYTES {
        return Err(cx.script_error(format!(
            "the input holds {bytes} bytes (message text, tool calls, previous summary and instructions), over the {} MiB one summary may read (the summarizer's work grows with its input and cannot be interrupted); summarize fewer or smaller messages",
            MAX_SUMMARIZE_BYTES >> 20
        )));
    }
    let call = cx.call()?;
    let cancel = &cx.scope().signals().cancel;
    let run = || call.summarize(&messages, &opts, cancel);
    // A model's wait is bounded by its own timeout, not the script's deadline.
    let out = if call.services().summarizer.calls_a_model() {
        crate::sandbox::outside_deadline(run)
    } else {
        run()
    }
    .map_err(|e| cx.host_error(e))?;
    Ok(HostOut::Data(
        json!({"text": out.text, "tokens": out.tokens}),
    ))
}

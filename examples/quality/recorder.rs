//! The summarizer under measurement: [`Recorder`] wraps the built-in or the LLM summarizer and
//! adds every summary it writes to the [`Stats`]: span and summary tokens, span identifiers
//! kept by kind, identifiers carried from earlier summaries, section fill, time.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Instant;

use ctxhost::contract::message::{Message, MessageBody, Role};
use ctxhost::services::summarize::{
    IdKind, SECTION_HEADINGS, Summarizer, Summary, SummaryFuture, SummaryRequest, find_identifiers,
};
use ctxhost::services::tokens::TokenCounter;
use parking_lot::Mutex;

use crate::Stats;
use crate::detail;

/// A summarizer (the built-in one or the LLM one), measured: every call's span, result and
/// time.
#[derive(Debug)]
pub(crate) struct Recorder {
    pub(crate) inner: Arc<dyn Summarizer>,
    pub(crate) stats: Mutex<Stats>,
}

/// The strings of a message that a summary could draw identifiers from.
pub(crate) fn message_text(m: &Message) -> String {
    let mut out = m.text();
    if let MessageBody::Assistant(a) = &m.body {
        for b in &a.content {
            match b {
                ctxhost::contract::message::ContentBlock::Thinking(t) => {
                    out.push('\n');
                    out.push_str(&t.thinking);
                }
                ctxhost::contract::message::ContentBlock::ToolCall(c) => {
                    walk(&c.arguments, &mut out);
                }
                _ => {}
            }
        }
    }
    out
}

fn walk(v: &serde_json::Value, out: &mut String) {
    match v {
        serde_json::Value::String(s) => {
            out.push('\n');
            out.push_str(s);
        }
        serde_json::Value::Array(a) => a.iter().for_each(|v| walk(v, out)),
        serde_json::Value::Object(o) => o.values().for_each(|v| walk(v, out)),
        _ => {}
    }
}

impl Summarizer for Recorder {
    fn summarize<'a>(
        &'a self,
        request: SummaryRequest<'a>,
        counter: &'a dyn TokenCounter,
    ) -> SummaryFuture<'a> {
        Box::pin(async move {
            let started = Instant::now();
            let summary = self.inner.summarize(request, counter).await?;
            self.record(&request, counter, &summary, started.elapsed());
            Ok(summary)
        })
    }

    fn begin_turn(&self) {
        self.inner.begin_turn();
    }
}

impl Recorder {
    /// Adds one summary to the statistics.
    fn record(
        &self,
        request: &SummaryRequest<'_>,
        counter: &dyn TokenCounter,
        summary: &Summary,
        elapsed: std::time::Duration,
    ) {
        let mut s = self.stats.lock();
        s.time += elapsed;
        s.summaries += 1;
        s.by_model += usize::from(summary.summarizer.starts_with("llm:"));
        let is_summary =
            |m: &Arc<Message>| matches!(m.role(), Role::CompactionSummary | Role::BranchSummary);
        let span: Vec<&Arc<Message>> = request.messages.iter().filter(|m| !is_summary(m)).collect();
        let span_tokens: u64 = span.iter().map(|m| counter.count_message(m)).sum();
        // A summary's own text, without the preamble a model would see around it.
        let input_tokens: u64 = request
            .messages
            .iter()
            .map(|m| {
                if is_summary(m) {
                    counter.count_text(&m.text())
                } else {
                    counter.count_message(m)
                }
            })
            .sum::<u64>()
            + request
                .previous_summary
                .map_or(0, |p| counter.count_text(p));
        if span.is_empty() {
            s.folds += 1;
            s.folds_grown += u64::from(summary.tokens > input_tokens);
        } else {
            s.span_tokens += span_tokens;
            s.summary_tokens += summary.tokens;
            s.larger += u64::from(summary.tokens > span_tokens);
        }
        // Identifiers of the span itself, then the ones carried over from earlier summaries.
        let mut own: Vec<(IdKind, String)> = Vec::new();
        let mut seen = HashSet::new();
        for m in &span {
            let text = message_text(m);
            for (k, id) in find_identifiers(&text) {
                if seen.insert(id.to_owned()) {
                    own.push((k, id.to_owned()));
                }
            }
        }
        let own_tokens: u64 = own.iter().map(|(_, id)| counter.count_text(id) + 2).sum();
        let fits = own_tokens <= request.max_tokens / 2;
        if fits {
            detail::lost(&own, own_tokens, span_tokens, request.max_tokens, summary);
        }
        for (k, id) in &own {
            let kept = summary.text.contains(id.as_str());
            if fits {
                s.ids_found += 1;
                s.ids_kept += u64::from(kept);
                let e = s.kinds.entry(*k).or_default();
                e.0 += u64::from(kept);
                e.1 += 1;
            } else {
                s.unfit_found += 1;
                s.unfit_kept += u64::from(kept);
            }
        }
        let mut carried_text: Vec<String> = request
            .messages
            .iter()
            .filter(|m| is_summary(m))
            .map(|m| m.text())
            .collect();
        carried_text.extend(request.previous_summary.map(str::to_owned));
        for text in &carried_text {
            for (_, id) in find_identifiers(text) {
                if seen.insert(id.to_owned()) {
                    s.carried_found += 1;
                    s.carried_kept += u64::from(summary.text.contains(id));
                }
            }
        }
        for (i, heading) in SECTION_HEADINGS.iter().enumerate() {
            if section_filled(&summary.text, heading) {
                s.fill[i] += 1;
                s.filled_sections += 1;
            }
        }
    }
}

/// Whether `## heading` in `text` has at least one item.
fn section_filled(text: &str, heading: &str) -> bool {
    let mut inside = false;
    for line in text.lines() {
        if let Some(h) = line.strip_prefix("## ") {
            inside = h.trim() == heading;
            continue;
        }
        if inside && line.trim_start().starts_with("- ") {
            return true;
        }
    }
    false
}

//! The built-in summarizer (contract §9): offline, deterministic, sectioned, and strict about
//! identifiers. The LLM summarizer (`crate::services::llm`) implements the same trait and falls back to it.
//!
//! [`Summarizer`] is async like [`ModelClient`](crate::services::llm::ModelClient): `summarize` returns
//! a boxed future, so a summarizer that waits on a network call (an HTTP SDK, a channel to
//! another process) needs no thread of its own, and the trait stays object-safe
//! (`Arc<dyn Summarizer>`). The host drives the future on the thread that needs the summary
//! (an engine's worker, a session call), inside the context of its model-call Tokio runtime,
//! and drops it when the turn is cancelled: that is how a summary is cancelled. The built-in
//! summarizer does all its work on the first poll.
//!
//! This module holds the public API (the [`Summarizer`] trait, its request and result, and
//! [`BuiltinSummarizer`]); the built-in summarizer's parts live in one private submodule each:
//! `sections` (the summary's sections), `text` (text helpers), `identifiers` (finding opaque
//! identifiers), `tools` (what tool calls read, modify and plan), `previous` (folding in a
//! previous summary), `extract` (the heuristics over a span) and `render` (rendering within
//! the token budget).

mod extract;
mod identifiers;
mod previous;
mod render;
mod sections;
mod text;
mod tools;

#[cfg(test)]
mod test_support;

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::contract::message::Message;
use crate::error::Result;
use crate::services::tokens::TokenCounter;

use extract::Extraction;
use render::Doc;

pub use identifiers::{IdKind, find_identifiers};
pub use sections::SECTION_HEADINGS;
pub use tools::telling_line;

/// Whether opaque identifiers of the summarized span must survive verbatim.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum IdentifierPolicy {
    /// Keep every UUID, hash, URL, path, host, IP and host:port as long as the budget allows.
    #[default]
    Strict,
    /// Identifiers get no special treatment.
    Off,
}

/// What to summarize and within what budget.
#[derive(Clone, Copy, Debug)]
pub struct SummaryRequest<'a> {
    /// The span to summarize, oldest first.
    pub messages: &'a [Arc<Message>],
    /// The summary this one replaces; its content is folded in, not lost.
    pub previous_summary: Option<&'a str>,
    /// The summary never exceeds this many tokens (by the given counter).
    pub max_tokens: u64,
    /// Extra focus from the user (`/compact <instructions>`).
    pub instructions: Option<&'a str>,
    /// Identifier handling.
    pub identifier_policy: IdentifierPolicy,
}

/// A summary and what it kept.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Summary {
    /// The summary text (Markdown sections).
    pub text: String,
    /// Its tokens by the counter it was built with.
    pub tokens: u64,
    /// Distinct identifiers found in the summarized messages themselves.
    pub identifiers_found: usize,
    /// How many of them appear verbatim in `text`.
    pub identifiers_kept: usize,
    /// Distinct identifiers carried over from previous summaries (not seen in the span).
    pub carried_found: usize,
    /// How many of them appear verbatim in `text`.
    pub carried_kept: usize,
    /// Files the span read.
    pub read_files: Vec<String>,
    /// Files the span modified.
    pub modified_files: Vec<String>,
    /// Which summarizer wrote `text` (`builtin`, `llm:<model>`), recorded in the compaction
    /// entry so a reader knows whether a model or the offline heuristics produced it.
    pub summarizer: String,
}

/// The future a [`Summarizer`] returns; it may borrow the request and the counter.
pub type SummaryFuture<'a> = Pin<Box<dyn Future<Output = Result<Summary>> + Send + 'a>>;

/// Turns a span of messages into a summary within a token budget.
pub trait Summarizer: Send + Sync + std::fmt::Debug {
    /// Starts summarizing; the summary's `tokens` (by `counter`) never exceed
    /// `request.max_tokens`. The host polls the future inside a Tokio runtime context (Tokio
    /// timers and I/O work in it) and drops it when the turn is cancelled, so a summarizer
    /// that waits on a model must stop waiting when dropped.
    fn summarize<'a>(
        &'a self,
        request: SummaryRequest<'a>,
        counter: &'a dyn TokenCounter,
    ) -> SummaryFuture<'a>;

    /// A view of this summarizer for one session, so that per-turn limits count that
    /// session's turns; `None` (the default) shares this one.
    fn for_session(&self) -> Option<Arc<dyn Summarizer>> {
        None
    }

    /// A turn of the session this summarizer serves begins: per-turn limits start again.
    fn begin_turn(&self) {}

    /// Whether it waits on a model (or anything else outside the process): a script's
    /// `host.summarize` then does not count that wait against the script's deadline (the
    /// summarizer's own timeout bounds it). Default `false`: the summary is CPU work the
    /// deadline covers.
    fn calls_a_model(&self) -> bool {
        false
    }
}

/// What the built-in extraction finds in a span, for other summarizers to audit and report.
pub(crate) struct SpanFacts {
    /// Distinct opaque identifiers of the span, in order of appearance.
    pub(crate) identifiers: Vec<String>,
    /// Identifiers the previous summary carried that the span does not name.
    pub(crate) carried: Vec<String>,
    /// Files the span read.
    pub(crate) read_files: Vec<String>,
    /// Files the span modified.
    pub(crate) modified_files: Vec<String>,
}

/// Runs the built-in extraction over a request (the same one [`BuiltinSummarizer`] keeps).
pub(crate) fn span_facts(request: &SummaryRequest<'_>) -> SpanFacts {
    let ex = Extraction::run(request);
    SpanFacts {
        read_files: ex.read_only(),
        modified_files: ex.modified.items,
        identifiers: ex.identifiers.items,
        carried: ex.carried.items,
    }
}

/// The name the built-in summarizer records in the summaries it writes.
pub const BUILTIN_NAME: &str = "builtin";

/// The offline, deterministic summarizer used when no LLM summarizer is configured (§9).
///
/// It extracts sections from the messages with plain heuristics (no model), folds the previous
/// summary in, and fits the result to the budget by trimming items, then dropping the least
/// important items, then dropping identifiers (with a note saying how many were left out).
#[derive(Clone, Copy, Debug, Default)]
pub struct BuiltinSummarizer;

impl BuiltinSummarizer {
    /// A built-in summarizer; it has no settings, so every instance behaves the same.
    pub fn new() -> Self {
        BuiltinSummarizer
    }

    /// Summarizes now, on this thread: the built-in summarizer never waits, so callers that
    /// hold one (benchmarks, the LLM summarizer's fallback) need no future.
    pub fn summarize_now(
        &self,
        request: &SummaryRequest<'_>,
        counter: &dyn TokenCounter,
    ) -> Result<Summary> {
        let ex = Extraction::run(request);
        let doc = Doc::new(&ex, request);
        let text = doc.fit(request.max_tokens, counter);
        let tokens = counter.count_text(&text);
        let own = &ex.identifiers.items;
        let kept = |ids: &mut dyn Iterator<Item = &String>| {
            ids.filter(|id| text.contains(id.as_str())).count()
        };
        let carried: Vec<&String> = ex
            .carried
            .items
            .iter()
            .filter(|id| !ex.identifiers.contains(id))
            .collect();
        Ok(Summary {
            tokens,
            identifiers_found: own.len(),
            identifiers_kept: kept(&mut own.iter()),
            carried_found: carried.len(),
            carried_kept: kept(&mut carried.into_iter()),
            read_files: ex.read_only(),
            modified_files: ex.modified.items.clone(),
            summarizer: BUILTIN_NAME.to_owned(),
            text,
        })
    }
}

impl Summarizer for BuiltinSummarizer {
    fn summarize<'a>(
        &'a self,
        request: SummaryRequest<'a>,
        counter: &'a dyn TokenCounter,
    ) -> SummaryFuture<'a> {
        Box::pin(async move { self.summarize_now(&request, counter) })
    }
}

#[cfg(test)]
#[path = "mod_tests.rs"]
mod tests;

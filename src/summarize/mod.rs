//! The built-in summarizer (contract §9): offline, deterministic, sectioned, and strict about
//! identifiers. The LLM summarizer (`crate::llm`) implements the same trait and falls back to it.
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

use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::error::Result;
use crate::message::Message;
use crate::tokens::TokenCounter;

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

/// Turns a span of messages into a summary within a token budget.
pub trait Summarizer: Send + Sync + std::fmt::Debug {
    /// Summarizes; the result's `tokens` (by `counter`) never exceed `request.max_tokens`.
    fn summarize(
        &self,
        request: &SummaryRequest<'_>,
        counter: &dyn TokenCounter,
    ) -> Result<Summary>;

    /// A view of this summarizer for one session, so that per-turn limits count that
    /// session's turns; `None` (the default) shares this one.
    fn for_session(&self) -> Option<Arc<dyn Summarizer>> {
        None
    }

    /// [`Summarizer::for_session`] for a session whose calls `cancel` stops (`ctxhost serve`'s
    /// `$/cancelRequest`): a summarizer that waits on a model stops waiting once it is set.
    /// The default ignores it.
    fn for_cancellable_session(
        &self,
        cancel: Arc<std::sync::atomic::AtomicBool>,
    ) -> Option<Arc<dyn Summarizer>> {
        let _ = cancel;
        self.for_session()
    }

    /// A turn of the session this summarizer serves begins: per-turn limits start again.
    fn begin_turn(&self) {}

    /// Whether it waits on a model: a script's `host.summarize` then does not count that wait
    /// against the script's deadline (the model's own timeout bounds it). Default `false`.
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
}

impl Summarizer for BuiltinSummarizer {
    fn summarize(
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

#[cfg(test)]
#[path = "mod_tests.rs"]
mod tests;

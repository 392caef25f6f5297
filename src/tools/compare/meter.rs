//! Tallying model calls into the figures of a row (cost, cache reuse, breaks, re-references,
//! guarantees).

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;

use serde::Serialize;

use crate::contract::message::{Message, Role};
use crate::engine::api::recall::DEFAULT_SEARCH_LIMIT;
use crate::services::guarantee::Violation;
use crate::services::recall::{RecallIndex, SearchFilter, searchable_text};
use crate::services::summarize::find_identifiers;

use super::prefix::{Block, Shape, break_cause, shared_prefix};
use super::prices::Prices;

/// Tallies one conversation's model calls (or several conversations', one after another).
#[derive(Debug)]
pub struct Meter {
    break_share: f64,
    previous: Option<(Shape, String)>,
    summaries: HashSet<String>,
    seen_text: HashSet<String>,
    history_text: String,
    last_request: Option<String>,
    /// What has been counted so far.
    pub row: Figures,
}

/// The figures of one row of the comparison (one engine, transcript and window, or a total).
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Figures {
    /// Model calls.
    pub calls: u64,
    /// Input tokens sent over all calls (systemPromptAddition and messages).
    pub input_tokens: u64,
    /// Of those, served by prefix reuse.
    pub cached_tokens: u64,
    /// Of those, not.
    pub fresh_tokens: u64,
    /// The recorded replies' tokens (the same for every engine of a transcript).
    pub output_tokens: u64,
    /// Dollars at the chosen prices.
    pub cost: f64,
    /// `cachedTokens / inputTokens` (0 without input).
    pub cache_hit_rate: f64,
    /// Calls that reused less than the break share of the previous call.
    pub cache_breaks: u64,
    /// Breaks by cause.
    pub break_causes: BTreeMap<String, u64>,
    /// Summaries the session came to hold (built-in or engine compaction).
    pub compactions: u64,
    /// Calls to the summarizer (`host.summarize` and the built-in compaction's).
    pub summarizer_calls: u64,
    /// Calls that carried no history (neither an earlier message, a summary nor an addition).
    pub no_history: u64,
    /// Calls without the current request.
    pub no_request: u64,
    /// Calls `legacy` answered in place of the engine.
    pub fallbacks: u64,
    /// Conversations whose engine ended quarantined.
    pub quarantines: u64,
    /// Identifiers requests named again (see the module docs).
    pub rerefs: u64,
    /// Of those, found in the call's context.
    pub rerefs_found: u64,
    /// Of those, not in the call's context but one `host.search` away: a search for the
    /// identifier over the session's stored messages (default limit) returns one holding it.
    pub rerefs_searchable: u64,
    /// `rerefsFound / rerefs` (1 without re-references).
    pub reref_rate: f64,
    /// `rerefsSearchable / rerefs` (0 without re-references).
    pub reref_search_rate: f64,
}

impl Figures {
    /// Adds `other`'s counts (rates and cost are recomputed by [`Figures::finish`]).
    pub fn add(&mut self, other: &Figures) {
        self.calls += other.calls;
        self.input_tokens += other.input_tokens;
        self.cached_tokens += other.cached_tokens;
        self.fresh_tokens += other.fresh_tokens;
        self.output_tokens += other.output_tokens;
        self.cache_breaks += other.cache_breaks;
        for (k, v) in &other.break_causes {
            *self.break_causes.entry(k.clone()).or_default() += v;
        }
        self.compactions += other.compactions;
        self.summarizer_calls += other.summarizer_calls;
        self.no_history += other.no_history;
        self.no_request += other.no_request;
        self.fallbacks += other.fallbacks;
        self.quarantines += other.quarantines;
        self.rerefs += other.rerefs;
        self.rerefs_found += other.rerefs_found;
        self.rerefs_searchable += other.rerefs_searchable;
    }

    /// Computes cost and rates from the counts.
    pub fn finish(&mut self, prices: &Prices) {
        self.cost = prices.cost(self.fresh_tokens, self.cached_tokens, self.output_tokens);
        self.cache_hit_rate = if self.input_tokens == 0 {
            0.0
        } else {
            self.cached_tokens as f64 / self.input_tokens as f64
        };
        self.reref_rate = if self.rerefs == 0 {
            1.0
        } else {
            self.rerefs_found as f64 / self.rerefs as f64
        };
        self.reref_search_rate = if self.rerefs == 0 {
            0.0
        } else {
            self.rerefs_searchable as f64 / self.rerefs as f64
        };
    }

    /// The figure a gate names (`cost`, `tokens`, `cached`, `fresh`, `hit`, `breaks`,
    /// `compactions`, `summarizer`, `nohistory`, `norequest`, `fallbacks`, `quarantines`,
    /// `reref`, `rerefsearch`, `calls`).
    pub fn metric(&self, name: &str) -> Option<f64> {
        Some(match name {
            "cost" => self.cost,
            "tokens" | "input" => self.input_tokens as f64,
            "cached" => self.cached_tokens as f64,
            "fresh" => self.fresh_tokens as f64,
            "hit" | "hitrate" => self.cache_hit_rate,
            "breaks" => self.cache_breaks as f64,
            "compactions" => self.compactions as f64,
            "summarizer" => self.summarizer_calls as f64,
            "nohistory" => self.no_history as f64,
            "norequest" => self.no_request as f64,
            "fallbacks" => self.fallbacks as f64,
            "quarantines" => self.quarantines as f64,
            "reref" => self.reref_rate,
            "rerefsearch" => self.reref_search_rate,
            "calls" => self.calls as f64,
            _ => return None,
        })
    }
}

/// The names [`Figures::metric`] knows, for error messages.
pub const METRICS: &str = "cost, tokens, cached, fresh, hit, breaks, compactions, summarizer, nohistory, norequest, fallbacks, quarantines, reref, rerefsearch, calls";

impl Meter {
    /// A meter counting a break below `break_share` of the previous call's tokens.
    pub fn new(break_share: f64) -> Self {
        Meter {
            break_share,
            previous: None,
            summaries: HashSet::new(),
            seen_text: HashSet::new(),
            history_text: String::new(),
            last_request: None,
            row: Figures::default(),
        }
    }

    /// Starts another conversation: the next call has no previous call and no history.
    pub fn next_conversation(&mut self) {
        self.previous = None;
        self.summaries.clear();
        self.seen_text.clear();
        self.history_text.clear();
        self.last_request = None;
    }

    /// Counts summaries of `context` the meter had not seen; returns whether there were any.
    pub fn note_summaries(&mut self, context: &[Arc<Message>]) -> bool {
        let mut any = false;
        for m in context {
            if matches!(m.role(), Role::CompactionSummary | Role::BranchSummary)
                && self.summaries.insert(m.id.clone())
            {
                self.row.compactions += 1;
                any = true;
            }
        }
        any
    }

    /// Counts one model call: its blocks, which engine answered, whether a compaction happened
    /// since the previous call, and what it lacked. Returns the call's cached tokens and, when
    /// it is a cache break, the cause.
    pub fn call(
        &mut self,
        now: Shape,
        engine: &str,
        compacted: bool,
        lacks: &[Violation],
    ) -> (u64, Option<&'static str>) {
        let total: u64 = now.iter().map(|(_, t)| t).sum();
        let mut broke = None;
        self.row.calls += 1;
        self.row.input_tokens += total;
        let cached = match &self.previous {
            None => 0,
            Some((prev, prev_engine)) => {
                let (cached, first_diff) = shared_prefix(prev, &now);
                let prev_total: u64 = prev.iter().map(|(_, t)| t).sum();
                if (cached as f64) < self.break_share * prev_total as f64 {
                    self.row.cache_breaks += 1;
                    let cause =
                        break_cause(prev, &now, first_diff, compacted, prev_engine != engine);
                    *self.row.break_causes.entry(cause.to_owned()).or_default() += 1;
                    broke = Some(cause);
                }
                cached
            }
        };
        self.row.cached_tokens += cached;
        self.row.fresh_tokens += total - cached;
        self.row.no_history += u64::from(lacks.contains(&Violation::NoHistory));
        self.row.no_request += u64::from(lacks.contains(&Violation::MissingRequest));
        self.previous = Some((now, engine.to_owned()));
        (cached, broke)
    }

    /// Counts the re-references of a turn's request (once per request), `history` being the
    /// session's context at the call (every message any call's context held is remembered,
    /// so compacted ones still count as named earlier), `sent` the call's context and
    /// `recall` the session's stored messages (what `host.search` reads).
    pub fn rerefs(
        &mut self,
        request: &Message,
        history: &[Arc<Message>],
        sent: &Shape,
        recall: &RecallIndex,
    ) {
        if self.last_request.as_deref() == Some(request.id.as_str()) {
            return;
        }
        self.last_request = Some(request.id.clone());
        for m in history {
            if m.id != request.id && self.seen_text.insert(m.id.clone()) {
                self.history_text.push_str(&m.text());
                self.history_text.push('\n');
            }
        }
        let context: String = sent
            .iter()
            .filter_map(|(b, _)| match b {
                Block::Addition(a) => Some(a.clone()),
                Block::Message(m) if m.id != request.id => Some(m.text()),
                Block::Message(_) => None,
            })
            .collect::<Vec<_>>()
            .join("\n");
        let text = request.text();
        let mut named = HashSet::new();
        for (_, id) in find_identifiers(&text) {
            if !named.insert(id) || !self.history_text.contains(id) {
                continue;
            }
            self.row.rerefs += 1;
            if context.contains(id) {
                self.row.rerefs_found += 1;
            } else {
                self.row.rerefs_searchable += u64::from(searchable(recall, id, &request.id));
            }
        }
    }
}

/// Whether `host.search(id)` (default limit) over the stored messages returns one, other than
/// the request itself, whose searchable text holds `id` verbatim.
fn searchable(recall: &RecallIndex, id: &str, request: &str) -> bool {
    let limit = usize::try_from(DEFAULT_SEARCH_LIMIT).unwrap_or(usize::MAX);
    let hits: Vec<String> = recall
        .search(id, &SearchFilter::default(), limit + 1)
        .into_iter()
        .filter(|h| h.id != request)
        .take(limit)
        .map(|h| h.id)
        .collect();
    recall
        .fetch(&hits)
        .iter()
        .any(|m| searchable_text(m).contains(id))
}

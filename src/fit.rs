//! Fitting a context to a token budget when it does not fit as it is: trim oversized tool
//! results, then drop the oldest tool groups, never splitting a call from its results.
//!
//! The built-in `legacy` engine passes the session through unchanged when it fits; this is what
//! keeps it within budget when a single message is larger than compaction can help with (a
//! 40,000-token file read in an 8,000-token window).

use std::sync::Arc;

use crate::message::{Content, ContentBlock, Message, MessageBody, Role};
use crate::tokens::TokenCache;

/// What fitting did, for diagnostics.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FitReport {
    /// Tool results whose text was trimmed.
    pub trimmed_results: usize,
    /// Messages left out, oldest first.
    pub dropped_messages: usize,
    /// Whether the newest turn itself had to be cut.
    pub cut_newest: bool,
}

/// Fits `messages` into `budget` tokens. Returns them unchanged (same `Arc`s) when they fit.
///
/// Otherwise it keeps the newest contiguous run of tool groups that fits, with tool results
/// larger than an eighth of the budget trimmed (head and tail kept), plus a leading compaction
/// summary when there is room for it. Only kept groups are trimmed, so the cost follows what is
/// kept, not the length of the session.
pub fn fit_to_budget(
    messages: &[Arc<Message>],
    budget: u64,
    tokens: &TokenCache,
) -> (Vec<Arc<Message>>, FitReport) {
    let mut report = FitReport::default();
    if tokens.messages(messages) <= budget {
        return (messages.to_vec(), report);
    }
    let cap = (budget / 8).max(64);
    let summary = messages
        .first()
        .filter(|m| m.role() == Role::CompactionSummary)
        .cloned();
    let body = &messages[usize::from(summary.is_some())..];
    let summary_tokens = summary.as_ref().map_or(0, |m| tokens.message(m));

    // Newest-first: take whole groups while they fit.
    let mut kept_rev: Vec<Vec<Arc<Message>>> = Vec::new();
    let mut used = 0u64;
    for range in groups(body).into_iter().rev() {
        let group: Vec<Arc<Message>> = body[range]
            .iter()
            .map(|m| {
                if m.role() == Role::ToolResult && tokens.message(m) > cap {
                    Arc::new(trim_message(m, cap, tokens))
                } else {
                    Arc::clone(m)
                }
            })
            .collect();
        let size = tokens.messages(&group);
        if used + size > budget {
            break;
        }
        used += size;
        kept_rev.push(group);
    }
    let kept_groups = kept_rev.len();
    let mut out: Vec<Arc<Message>> = Vec::new();
    if let Some(s) = &summary
        && kept_groups > 0
        && used + summary_tokens <= budget
    {
        out.push(Arc::clone(s));
    }
    for group in kept_rev.into_iter().rev() {
        out.extend(group);
    }
    report.trimmed_results = count_trimmed(&out, messages);
    report.dropped_messages = messages.len() - out.len();

    // The newest group alone is too big: cut its messages' text evenly.
    if kept_groups == 0 {
        report.cut_newest = true;
        let last = groups(body)
            .pop()
            .map(|r| body[r].to_vec())
            .unwrap_or_default();
        report.dropped_messages = messages.len() - last.len();
        let share = (budget / last.len().max(1) as u64).max(1);
        out = last
            .iter()
            .map(|m| {
                if tokens.message(m) > share {
                    Arc::new(trim_message(m, share, tokens))
                } else {
                    Arc::clone(m)
                }
            })
            .collect();
        // Anything still over (tool-call JSON, images) goes, oldest first.
        while tokens.messages(&out) > budget && out.len() > 1 {
            out.remove(0);
            report.dropped_messages += 1;
        }
        out = crate::pairing::repair(out).messages;
    }
    (out, report)
}

/// How many messages of `out` are trimmed copies of a message in `original` (same id, other
/// `Arc`).
fn count_trimmed(out: &[Arc<Message>], original: &[Arc<Message>]) -> usize {
    let by_id: std::collections::HashMap<&str, &Arc<Message>> =
        original.iter().map(|m| (m.id.as_str(), m)).collect();
    out.iter()
        .filter(|m| by_id.get(m.id.as_str()).is_some_and(|o| !Arc::ptr_eq(o, m)))
        .count()
}

/// Index ranges of atomic groups: an assistant message with the results that follow it, or a
/// single message.
pub fn groups(messages: &[Arc<Message>]) -> Vec<std::ops::Range<usize>> {
    let mut out = Vec::new();
    let mut i = 0;
    while i < messages.len() {
        let start = i;
        i += 1;
        if messages[start].tool_calls().next().is_some() {
            while i < messages.len() && messages[i].role() == Role::ToolResult {
                i += 1;
            }
        }
        out.push(start..i);
    }
    out
}

/// A copy of a message with its text cut to about `max_tokens`, keeping head and tail.
pub fn trim_message(m: &Message, max_tokens: u64, tokens: &TokenCache) -> Message {
    let mut copy = m.clone();
    let counter = tokens.counter();
    let trim = |s: &str, max: u64| trim_text(s, max, |t| counter.count_text(t));
    match &mut copy.body {
        MessageBody::User(u) => trim_content(&mut u.content, max_tokens, &trim),
        MessageBody::ToolResult(r) => trim_content(&mut r.content, max_tokens, &trim),
        MessageBody::Custom(c) => trim_content(&mut c.content, max_tokens, &trim),
        MessageBody::Assistant(a) => trim_blocks(&mut a.content, max_tokens, &trim),
        MessageBody::CompactionSummary(s) => s.summary = trim(&s.summary, max_tokens),
        MessageBody::BranchSummary(s) => s.summary = trim(&s.summary, max_tokens),
    }
    copy
}

fn trim_content(c: &mut Content, max: u64, trim: &impl Fn(&str, u64) -> String) {
    match c {
        Content::Text(t) => *t = trim(t, max),
        Content::Blocks(b) => trim_blocks(b, max, trim),
    }
}

fn trim_blocks(blocks: &mut [ContentBlock], max: u64, trim: &impl Fn(&str, u64) -> String) {
    let n = blocks
        .iter()
        .filter(|b| matches!(b, ContentBlock::Text(_) | ContentBlock::Thinking(_)))
        .count()
        .max(1) as u64;
    let share = (max / n).max(1);
    for b in blocks {
        match b {
            ContentBlock::Text(t) => t.text = trim(&t.text, share),
            ContentBlock::Thinking(t) => t.thinking = trim(&t.thinking, share),
            _ => {}
        }
    }
}

/// Cuts `text` to at most `max_tokens` (by `count`), keeping about two thirds from the head and
/// one third from the tail with a marker saying how much was left out.
pub fn trim_text(text: &str, max_tokens: u64, count: impl Fn(&str) -> u64) -> String {
    let total = count(text);
    if total <= max_tokens {
        return text.to_owned();
    }
    let chars: Vec<char> = text.chars().collect();
    let build = |keep: usize| -> String {
        let head = keep * 2 / 3;
        let tail = keep - head;
        let omitted = chars.len() - keep;
        let mut s: String = chars[..head].iter().collect();
        s.push_str(&format!(
            "\n[… {omitted} characters trimmed to fit the context budget …]\n"
        ));
        s.extend(&chars[chars.len() - tail..]);
        s
    };
    // Start from the proportional length and shrink by a tenth until it fits: token density
    // is nearly uniform, so this takes one or two counts instead of a binary search.
    let mut keep =
        (chars.len() as u128 * u128::from(max_tokens) / u128::from(total.max(1))) as usize;
    loop {
        let candidate = build(keep);
        if count(&candidate) <= max_tokens {
            return candidate;
        }
        if keep == 0 {
            return String::new(); // even the marker does not fit
        }
        keep = keep * 9 / 10;
    }
}

#[cfg(test)]
#[path = "fit_tests.rs"]
mod tests;

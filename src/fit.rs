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
pub fn fit_to_budget(
    messages: &[Arc<Message>],
    budget: u64,
    tokens: &TokenCache,
) -> (Vec<Arc<Message>>, FitReport) {
    let mut report = FitReport::default();
    let total = tokens.messages(messages);
    if total <= budget {
        return (messages.to_vec(), report);
    }

    // 1. Trim tool results larger than an eighth of the budget.
    let cap = (budget / 8).max(64);
    let mut out: Vec<Arc<Message>> = messages
        .iter()
        .map(|m| {
            if m.role() == Role::ToolResult && tokens.message(m) > cap {
                report.trimmed_results += 1;
                Arc::new(trim_message(m, cap, tokens))
            } else {
                Arc::clone(m)
            }
        })
        .collect();

    // 2. Drop the oldest groups (a message plus the results of its calls), keeping a leading
    //    compaction summary and always the newest group.
    let groups = groups(&out);
    let sizes: Vec<u64> = groups
        .iter()
        .map(|r| tokens.messages(&out[r.clone()]))
        .collect();
    let mut total: u64 = sizes.iter().sum();
    let keep_summary = out
        .first()
        .is_some_and(|m| m.role() == Role::CompactionSummary);
    let mut dropped = vec![false; groups.len()];
    let first_droppable = usize::from(keep_summary);
    for g in first_droppable..groups.len().saturating_sub(1) {
        if total <= budget {
            break;
        }
        dropped[g] = true;
        total -= sizes[g];
        report.dropped_messages += groups[g].len();
    }
    // Then the summary itself, if still over.
    if total > budget && keep_summary && groups.len() > 1 {
        dropped[0] = true;
        total -= sizes[0];
        report.dropped_messages += groups[0].len();
    }
    let mut kept = Vec::new();
    for (g, range) in groups.iter().enumerate() {
        if !dropped[g] {
            kept.extend(out[range.clone()].iter().cloned());
        }
    }
    out = kept;

    // 3. The newest group alone is too big: cut its messages' text evenly.
    if total > budget && !out.is_empty() {
        report.cut_newest = true;
        let n = out.len() as u64;
        let share = (budget / n).max(1);
        for m in &mut out {
            if tokens.message(m) > share {
                *m = Arc::new(trim_message(m, share, tokens));
            }
        }
        // Anything still over (tool-call JSON, images) goes, oldest first, newest message last.
        while tokens.messages(&out) > budget && out.len() > 1 {
            out.remove(0);
            report.dropped_messages += 1;
        }
        let repaired = crate::pairing::repair(out);
        out = repaired.messages;
    }
    (out, report)
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
    if count(text) <= max_tokens {
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
    // Binary search the largest kept length that fits.
    let (mut lo, mut hi) = (0usize, chars.len());
    while lo < hi {
        let mid = (lo + hi).div_ceil(2);
        if count(&build(mid)) <= max_tokens {
            lo = mid;
        } else {
            hi = mid - 1;
        }
    }
    let best = build(lo);
    if count(&best) <= max_tokens {
        best
    } else {
        // Even the marker does not fit.
        String::new()
    }
}

#[cfg(test)]
#[path = "fit_tests.rs"]
mod tests;

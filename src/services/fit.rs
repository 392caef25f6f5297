//! Fitting a context to a token budget when it does not fit as it is: the summary and the
//! current request stay (trimmed if they must), the newest turn's tool results are trimmed and
//! then stubbed oldest first, and history before the request is cut first, whole tool groups
//! at a time, never splitting a call from its results.
//!
//! The built-in `legacy` engine passes the session through unchanged when it fits; this is what
//! keeps it within budget when a single message is larger than compaction can help with (a
//! 40,000-token file read in an 8,000-token window). The session uses it too when it puts a
//! request or summary back into a script engine's assembly ([`crate::services::guarantee`]).

use std::sync::Arc;

use crate::contract::message::{Content, ContentBlock, Message, MessageBody, Role};
use crate::services::tokens::TokenCache;

/// What fitting did, for diagnostics.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct FitReport {
    /// Tool results whose text was trimmed (head and tail kept) or replaced by a one-line stub.
    pub trimmed_results: usize,
    /// Tool results of the newest turn replaced by a one-line stub, oldest first.
    pub stubbed_results: usize,
    /// Messages left out, oldest first.
    pub dropped_messages: usize,
    /// Whether the newest turn itself had to be cut (stubs, dropped groups or trimmed text).
    pub cut_newest: bool,
    /// Whether the summary had to be trimmed to a third of the budget.
    pub trimmed_summary: bool,
    /// Whether the current request had to be trimmed (head and tail kept).
    pub trimmed_request: bool,
}

/// Fits `messages` into `budget` tokens. Returns them unchanged (same `Arc`s) when they fit.
///
/// What survives, in order of precedence, so that a model can always continue: the leading
/// compaction summary (trimmed to a third of the budget if it is larger), the current request
/// (the last user message; trimmed, never dropped), the newest tool group of its turn, the
/// turn's older tool groups (results larger than an eighth of the budget trimmed head and
/// tail; then the oldest results replaced by one-line stubs, then the oldest groups dropped),
/// and last the history before the request, newest whole groups first. History is cut before
/// the summary or the request is, but never to nothing: without a summary, the newest earlier
/// group (cut to an eighth of the budget if it must be) is set aside before the turn is fitted. Only kept groups are trimmed, so the cost follows what is
/// kept, not the length of the session.
pub(crate) fn fit_to_budget(
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
        .map(|s| {
            let most = budget / 3;
            if tokens.message(s) > most {
                report.trimmed_summary = true;
                Arc::new(trim_message(s, most, tokens))
            } else {
                Arc::clone(s)
            }
        });
    let body = &messages[usize::from(summary.is_some())..];
    let mut room = budget.saturating_sub(summary.as_ref().map_or(0, |m| tokens.message(m)));

    // The current request and the rest of its turn.
    let request_at = body.iter().rposition(|m| m.role() == Role::User);
    let (history, request, turn) = match request_at {
        Some(r) => (&body[..r], Some(&body[r]), &body[r + 1..]),
        None => (body, None, &body[body.len()..]),
    };
    // Some history, when there is any and no summary carries it: the newest earlier group, cut
    // to an eighth of the budget if it must be, is set aside before the turn is fitted (a model
    // with its turn alone does not know what came before).
    let reserved: Vec<Arc<Message>> = if summary.is_none() && request.is_some() && budget / 8 >= 32
    {
        newest_history(history, budget / 8, cap, tokens)
    } else {
        Vec::new()
    };
    let reserved_tokens = tokens.messages(&reserved);
    room = room.saturating_sub(reserved_tokens);
    // The request leaves the rest of its turn at least half the room, if the turn needs it.
    let turn_wants = tokens.messages(turn).min(room / 2);
    let request = request.map(|m| {
        let most = room.saturating_sub(turn_wants).max(1);
        if tokens.message(m) > most {
            report.trimmed_request = true;
            report.cut_newest = true;
            Arc::new(trim_message(m, most, tokens))
        } else {
            Arc::clone(m)
        }
    });
    room = room.saturating_sub(request.as_ref().map_or(0, |m| tokens.message(m)));
    let (turn_kept, whole_turn) = if request.is_some() {
        fit_turn(turn, room, cap, tokens, &mut report)
    } else {
        (Vec::new(), true)
    };
    room = room.saturating_sub(tokens.messages(&turn_kept));

    // History before the request, newest whole groups first, only behind a whole turn; else
    // (or when not even the newest group fits whole) the group set aside above.
    let mut kept_rev: Vec<Vec<Arc<Message>>> = Vec::new();
    room += reserved_tokens;
    if whole_turn {
        for range in groups(history).into_iter().rev() {
            let group = trim_group(&history[range], cap, tokens);
            let size = tokens.messages(&group);
            if size > room {
                break;
            }
            room -= size;
            kept_rev.push(group);
        }
    }
    if kept_rev.is_empty() && !reserved.is_empty() {
        kept_rev.push(reserved);
    }
    let mut out: Vec<Arc<Message>> = summary.into_iter().collect();
    if request.is_none()
        && kept_rev.is_empty()
        && let Some(last) = groups(history).pop()
    {
        // No request and not even the newest group fits: cut that group's text evenly.
        report.cut_newest = true;
        out.extend(cut_evenly(&history[last], room, tokens));
    }
    out.extend(kept_rev.into_iter().rev().flatten());
    out.extend(request);
    out.extend(turn_kept);
    let out = crate::services::pairing::repair(out).messages;
    report.trimmed_results = count_trimmed(&out, messages)
        .saturating_sub(usize::from(report.trimmed_summary) + usize::from(report.trimmed_request));
    report.dropped_messages = messages.len().saturating_sub(out.len());
    (out, report)
}

/// The messages after the request, fitted into `room`: results trimmed to `cap`, then the
/// oldest results stubbed, then the oldest groups dropped, then the newest group cut evenly.
/// Returns what is kept and whether the turn is whole (no stub, no drop, no even cut).
fn fit_turn(
    turn: &[Arc<Message>],
    room: u64,
    cap: u64,
    tokens: &TokenCache,
    report: &mut FitReport,
) -> (Vec<Arc<Message>>, bool) {
    let ranges = groups(turn);
    let mut kept: Vec<Vec<Arc<Message>>> = ranges
        .iter()
        .map(|r| trim_group(&turn[r.clone()], cap, tokens))
        .collect();
    let total = |kept: &[Vec<Arc<Message>>]| kept.iter().map(|g| tokens.messages(g)).sum::<u64>();
    if total(&kept) <= room {
        return (kept.into_iter().flatten().collect(), true);
    }
    report.cut_newest = true;
    // Oldest results first (never the newest group's), inward.
    let newest = kept.len().saturating_sub(1);
    for g in 0..newest {
        for m in kept[g].iter_mut() {
            if m.role() == Role::ToolResult && !is_stub(m) {
                let stub = Arc::new(stub_result(m));
                if tokens.message(&stub) < tokens.message(m) {
                    *m = stub;
                    report.stubbed_results += 1;
                }
            }
        }
        if total(&kept) <= room {
            break;
        }
    }
    while total(&kept) > room && kept.len() > 1 {
        kept.remove(0);
    }
    if total(&kept) > room
        && let Some(last) = kept.pop()
    {
        kept.push(cut_evenly(&last, room, tokens));
    }
    (kept.into_iter().flatten().collect(), false)
}

/// The newest history of `history` (the messages before a request) within `target` tokens, for
/// a context that must carry some: the newest group that stands on its own once paired (an
/// aborted tool call without results does not), tool results trimmed to `cap` and the group
/// cut evenly if it must be; a group that cannot be cut that small (tool-call arguments larger
/// than `target`) is passed over, a few dozen groups at most; failing all that, the newest
/// earlier user message cut to `target` (head and tail kept). Empty only when there is no
/// history or not even that fits.
pub(crate) fn newest_history(
    history: &[Arc<Message>],
    target: u64,
    cap: u64,
    tokens: &TokenCache,
) -> Vec<Arc<Message>> {
    for range in groups(history).into_iter().rev().take(64) {
        let group =
            crate::services::pairing::repair(trim_group(&history[range], cap, tokens)).messages;
        if group.is_empty() {
            continue;
        }
        if tokens.messages(&group) <= target {
            return group;
        }
        let cut = cut_evenly(&group, target, tokens);
        if !cut.is_empty() && tokens.messages(&cut) <= target {
            return cut;
        }
    }
    history
        .iter()
        .rev()
        .find(|m| m.role() == Role::User)
        .map(|m| Arc::new(trim_message(m, target, tokens)))
        .filter(|m| tokens.message(m) <= target)
        .into_iter()
        .collect()
}

/// A group with its tool results larger than `cap` trimmed.
pub(crate) fn trim_group(
    group: &[Arc<Message>],
    cap: u64,
    tokens: &TokenCache,
) -> Vec<Arc<Message>> {
    group
        .iter()
        .map(|m| {
            if m.role() == Role::ToolResult && tokens.message(m) > cap {
                Arc::new(trim_message(m, cap, tokens))
            } else {
                Arc::clone(m)
            }
        })
        .collect()
}

/// A group's text cut evenly to share `room`; anything still over (tool-call JSON, images)
/// goes, oldest first, and pairing is repaired.
pub(crate) fn cut_evenly(
    group: &[Arc<Message>],
    room: u64,
    tokens: &TokenCache,
) -> Vec<Arc<Message>> {
    let mut share = (room / group.len().max(1) as u64).max(1);
    let cut = |share: u64| -> Vec<Arc<Message>> {
        group
            .iter()
            .map(|m| {
                if tokens.message(m) > share {
                    Arc::new(trim_message(m, share, tokens))
                } else {
                    Arc::clone(m)
                }
            })
            .collect()
    };
    let mut out = cut(share);
    // Each message's own overhead (role, framing) is not in its share: shrink the share by
    // what is over, a few times, before dropping whole messages.
    for _ in 0..3 {
        let total = tokens.messages(&out);
        if total <= room || share <= 16 {
            break;
        }
        share = share.saturating_sub((total - room).div_ceil(group.len().max(1) as u64) + 1);
        out = cut(share.max(16));
    }
    while tokens.messages(&out) > room && out.len() > 1 {
        out.remove(0);
    }
    crate::services::pairing::repair(out).messages
}

const STUB_PREFIX: &str = "[tool result left out to fit the context budget";

fn is_stub(m: &Message) -> bool {
    m.text().starts_with(STUB_PREFIX)
}

/// A tool result replaced by one line that says what it was: its size and its most telling
/// line (the error line of a failure, else its first line).
pub(crate) fn stub_result(m: &Message) -> Message {
    let mut copy = m.clone();
    if let MessageBody::ToolResult(r) = &mut copy.body {
        let text = r.content.joined_text();
        let gist = crate::services::summarize::telling_line(&text, r.is_error);
        let gist: String = gist.chars().take(160).collect();
        let lines = text.lines().count();
        r.content = Content::Text(format!(
            "{STUB_PREFIX}: {lines} lines; {}: {gist}]",
            if r.is_error { "error" } else { "first line" }
        ));
    }
    copy
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
pub(crate) fn groups(messages: &[Arc<Message>]) -> Vec<std::ops::Range<usize>> {
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
pub(crate) fn trim_message(m: &Message, max_tokens: u64, tokens: &TokenCache) -> Message {
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
pub(crate) fn trim_text(text: &str, max_tokens: u64, count: impl Fn(&str) -> u64) -> String {
    let total = count(text);
    if total <= max_tokens {
        return text.to_owned();
    }
    let chars: Vec<char> = text.chars().collect();
    let build = |keep: usize| -> String {
        let head = keep * 2 / 3;
        let tail = keep - head;
        let mut kept: String = chars[..head].iter().collect();
        let at = kept.len();
        kept.extend(&chars[chars.len() - tail..]);
        let omitted = total.saturating_sub(count(&kept));
        let cut = chars.len() - keep;
        kept.insert_str(
            at,
            &format!("\n[… {omitted} tokens ({cut} characters) cut to fit the context budget …]\n"),
        );
        kept
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

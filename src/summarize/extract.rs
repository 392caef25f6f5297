//! The heuristics over a span: one pass over the messages (and any previous summaries) that
//! sorts what they say into sections, identifiers and files, before any budgeting.

use std::collections::HashMap;
use std::sync::LazyLock;

use regex::Regex;
use serde_json::Value;

use crate::message::{AssistantMessage, ContentBlock, MessageBody};

use super::SummaryRequest;
use super::identifiers::scan_identifiers;
use super::previous::parse_previous;
use super::sections::{NSEC, SECS, Sec};
use super::text::{
    Ordered, is_command, is_substantive, item, prose_lines, re, sentences, strip_markers,
};
use super::tools::{
    ToolKind, classify_tool, patch_paths, path_args, shell_read_paths, todo_items, walk_strings,
};

static DECISION_RE: LazyLock<Regex> = LazyLock::new(|| {
    re(
        r"(?i)\b(?:I['’]ll|I will|let['’]s|let us|we['’]ll|we will|decided|decision|going with|instead of|I['’]m going to|we['’]re going to|opted|chose to)\b",
    )
});
static CONSTRAINT_RE: LazyLock<Regex> = LazyLock::new(|| {
    re(
        r"(?i)\b(?:must|never|always|don['’]t|do not|only|should not|shouldn['’]t|mustn['’]t|make sure)\b",
    )
});
static TODO_RE: LazyLock<Regex> = LazyLock::new(|| re(r"\b(?:TODO|FIXME)\b"));
static UNCHECKED_RE: LazyLock<Regex> =
    LazyLock::new(|| re(r"^\s*(?:[-*+]|\d{1,3}[.)])\s+\[ \]\s+(.+)$"));
static CHECKED_RE: LazyLock<Regex> = LazyLock::new(|| re(r"^\[[xX]\]\s"));
static NEXT_STEPS_RE: LazyLock<Regex> =
    LazyLock::new(|| re(r"(?i)^\s*(?:#+\s*)?(?:\*\*)?next steps?(?:\*\*)?\s*:?(?:\*\*)?\s*(.*)$"));
static LIST_ITEM_RE: LazyLock<Regex> = LazyLock::new(|| re(r"^\s*(?:[-*+]|\d{1,3}[.)])\s+\S"));

/// An assistant message that ends its turn with a text answer (not a tool call, not a failure).
fn is_final_answer(a: &AssistantMessage) -> bool {
    let has_text = a
        .content
        .iter()
        .any(|b| matches!(b, ContentBlock::Text(t) if !t.text.trim().is_empty()));
    let calls = a
        .content
        .iter()
        .any(|b| matches!(b, ContentBlock::ToolCall(_)));
    let failed = matches!(
        a.stop_reason.as_deref(),
        Some("toolUse" | "error" | "aborted")
    );
    has_text && !calls && !failed
}

/// Everything the heuristics found, before any budgeting.
#[derive(Debug)]
pub(super) struct Extraction {
    pub(super) secs: [Ordered; NSEC],
    pub(super) identifiers: Ordered,
    pub(super) read: Ordered,
    pub(super) modified: Ordered,
}

impl Extraction {
    pub(super) fn run(request: &SummaryRequest<'_>) -> Extraction {
        let mut ex = Extraction {
            secs: std::array::from_fn(|_| Ordered::default()),
            identifiers: Ordered::default(),
            read: Ordered::default(),
            modified: Ordered::default(),
        };

        // Previous summaries, oldest first: the request's, then any inside the span.
        let mut previous: Vec<&str> = request.previous_summary.into_iter().collect();
        for m in request.messages {
            match &m.body {
                MessageBody::CompactionSummary(s) => previous.push(&s.summary),
                MessageBody::BranchSummary(s) => previous.push(&s.summary),
                _ => {}
            }
        }
        let mut prev_pending = Vec::new();
        let mut prev_latest = None;
        for text in previous {
            let parsed = parse_previous(text);
            for sec in SECS {
                let items = parsed.secs[sec.idx()].iter().cloned();
                match sec {
                    Sec::Identifiers => items.for_each(|i| ex.identifiers.push(i)),
                    Sec::Pending => prev_pending.extend(items),
                    Sec::Latest => prev_latest = parsed.secs[sec.idx()].last().cloned(),
                    _ => items.for_each(|i| ex.secs[sec.idx()].push(i)),
                }
            }
            parsed.read.into_iter().for_each(|p| ex.read.push(p));
            parsed
                .modified
                .into_iter()
                .for_each(|p| ex.modified.push(p));
            scan_identifiers(text, &mut ex.identifiers);
        }

        // The span itself.
        let mut first_request: Option<String> = None;
        let mut user_turns: Vec<(usize, String)> = Vec::new();
        let mut last_final: Option<usize> = None;
        let mut call_names: HashMap<&str, &str> = HashMap::new();
        let mut todo_list: Option<Vec<String>> = None;
        let mut todo_extra: Vec<String> = Vec::new();
        let mut failures: Vec<String> = Vec::new();
        for (i, m) in request.messages.iter().enumerate() {
            match &m.body {
                MessageBody::User(u) => {
                    let text = u.content.joined_text();
                    scan_identifiers(&text, &mut ex.identifiers);
                    if text.trim().is_empty() || is_command(&text) {
                        continue;
                    }
                    if first_request.is_none() && is_substantive(&text) {
                        first_request = Some(item(&text, 240));
                    }
                    for s in sentences(&text) {
                        if CONSTRAINT_RE.is_match(&s) {
                            ex.secs[Sec::Constraints.idx()].push(item(&s, 180));
                        }
                    }
                    ex.todo_lines(&text);
                    user_turns.push((i, text));
                }
                MessageBody::Assistant(a) => {
                    for block in &a.content {
                        match block {
                            ContentBlock::Text(t) => {
                                scan_identifiers(&t.text, &mut ex.identifiers);
                                for s in sentences(&t.text) {
                                    // "Let's check the file:" announces a tool call, not a decision.
                                    if DECISION_RE.is_match(&s) && !s.ends_with(':') {
                                        ex.secs[Sec::Decisions.idx()].push(item(&s, 180));
                                    }
                                }
                                ex.todo_lines(&t.text);
                            }
                            ContentBlock::Thinking(t) => {
                                scan_identifiers(&t.thinking, &mut ex.identifiers);
                            }
                            ContentBlock::ToolCall(call) => {
                                call_names.insert(&call.id, &call.name);
                                for p in path_args(&call.arguments) {
                                    ex.identifiers.push(p);
                                }
                                walk_strings(&call.arguments, &mut |_, s| {
                                    scan_identifiers(s, &mut ex.identifiers);
                                });
                                match classify_tool(&call.name, &call.arguments) {
                                    ToolKind::Todo => {
                                        let (items, whole) = todo_items(&call.arguments);
                                        if whole {
                                            todo_list = Some(items);
                                        } else {
                                            todo_extra.extend(items);
                                        }
                                    }
                                    ToolKind::Modify => {
                                        for p in path_args(&call.arguments) {
                                            ex.modified.push(p);
                                        }
                                        walk_strings(&call.arguments, &mut |_, s| {
                                            patch_paths(s)
                                                .into_iter()
                                                .for_each(|p| ex.modified.push(p));
                                        });
                                    }
                                    ToolKind::Read => {
                                        for p in path_args(&call.arguments) {
                                            ex.read.push(p);
                                        }
                                    }
                                    ToolKind::Shell => {
                                        walk_strings(&call.arguments, &mut |key, s| {
                                            if matches!(key, Some("command" | "cmd" | "script")) {
                                                shell_read_paths(s)
                                                    .into_iter()
                                                    .for_each(|p| ex.read.push(p));
                                            }
                                        });
                                    }
                                    ToolKind::Other => {}
                                }
                            }
                            ContentBlock::Image(_) | ContentBlock::Other(_) => {}
                        }
                    }
                    if is_final_answer(a) {
                        last_final = Some(i);
                    }
                }
                MessageBody::ToolResult(r) => {
                    let text = r.content.joined_text();
                    scan_identifiers(&text, &mut ex.identifiers);
                    if r.is_error {
                        let name = if r.tool_name.is_empty() {
                            call_names
                                .get(r.tool_call_id.as_str())
                                .copied()
                                .unwrap_or("tool")
                        } else {
                            &r.tool_name
                        };
                        let first = text.lines().map(str::trim).find(|l| !l.is_empty());
                        let first = first.unwrap_or("(no error text)");
                        failures.push(item(&format!("{name}: {first}"), 160));
                    }
                }
                MessageBody::Custom(c) => {
                    scan_identifiers(&c.content.joined_text(), &mut ex.identifiers);
                    for key in ["command", "output"] {
                        if let Some(s) = c.extra.get(key).and_then(Value::as_str) {
                            scan_identifiers(s, &mut ex.identifiers);
                        }
                    }
                }
                MessageBody::CompactionSummary(_) | MessageBody::BranchSummary(_) => {}
            }
        }

        let todos = Sec::Todos.idx();
        todo_extra
            .into_iter()
            .chain(todo_list.unwrap_or_default())
            .for_each(|t| ex.secs[todos].push(t));
        failures
            .into_iter()
            .for_each(|f| ex.secs[Sec::Failures.idx()].push(f));

        // Goal: the previous summary's, else the span's first substantive request.
        if ex.secs[Sec::Goal.idx()].items.is_empty()
            && let Some(goal) = first_request
        {
            ex.secs[Sec::Goal.idx()].push(goal);
        }

        // Pending asks and the latest unresolved request. A final answer in the span settles
        // the previous summary's open asks.
        let answered = |i: usize| last_final.is_some_and(|f| f > i);
        if last_final.is_none() {
            prev_pending
                .into_iter()
                .for_each(|p| ex.secs[Sec::Pending.idx()].push(p));
        }
        for (i, text) in &user_turns {
            if !answered(*i) {
                ex.secs[Sec::Pending.idx()].push(item(text, 200));
            }
        }
        match user_turns.last() {
            Some((i, text)) if !answered(*i) => ex.secs[Sec::Latest.idx()].push(item(text, 400)),
            Some(_) => {}
            None => {
                if last_final.is_none()
                    && let Some(latest) = prev_latest
                {
                    ex.secs[Sec::Latest.idx()].push(latest);
                }
            }
        }

        // Caps: recent-most for fast-moving sections, first-most for standing rules.
        ex.keep_last(Sec::Decisions, 12);
        ex.keep_last(Sec::Todos, 12);
        ex.keep_last(Sec::Failures, 8);
        ex.keep_last(Sec::Pending, 8);
        ex.keep_first(Sec::Constraints, 16);
        ex.keep_first(Sec::Earlier, 12);
        ex
    }

    fn keep_last(&mut self, sec: Sec, n: usize) {
        let items = &mut self.secs[sec.idx()].items;
        if items.len() > n {
            items.drain(..items.len() - n);
        }
    }

    fn keep_first(&mut self, sec: Sec, n: usize) {
        self.secs[sec.idx()].items.truncate(n);
    }

    /// TODO/FIXME lines, unchecked `- [ ]` items and "next steps" lines (with their list).
    fn todo_lines(&mut self, text: &str) {
        let lines = prose_lines(text);
        let todos = Sec::Todos.idx();
        let mut i = 0;
        while i < lines.len() {
            let line = lines[i];
            if let Some(c) = UNCHECKED_RE.captures(line).and_then(|c| c.get(1)) {
                self.secs[todos].push(item(c.as_str(), 160));
            } else if let Some(c) = NEXT_STEPS_RE.captures(line) {
                let rest = c.get(1).map_or("", |m| m.as_str()).trim();
                if rest.is_empty() {
                    let mut j = i + 1;
                    let mut taken = 0;
                    while j < lines.len() && taken < 6 {
                        if lines[j].trim().is_empty() && taken == 0 {
                            j += 1;
                            continue;
                        }
                        if !LIST_ITEM_RE.is_match(lines[j]) {
                            break;
                        }
                        let text = match UNCHECKED_RE.captures(lines[j]).and_then(|c| c.get(1)) {
                            Some(open) => open.as_str(),
                            None => strip_markers(lines[j]),
                        };
                        if !CHECKED_RE.is_match(text) {
                            self.secs[todos].push(item(text, 160));
                        }
                        taken += 1;
                        j += 1;
                    }
                    i = j;
                    continue;
                }
                self.secs[todos].push(item(strip_markers(line), 160));
            } else if TODO_RE.is_match(line) {
                self.secs[todos].push(item(strip_markers(line), 160));
            }
            i += 1;
        }
    }

    /// Files read and never modified by the span (a modified file is listed once, as modified).
    pub(super) fn read_only(&self) -> Vec<String> {
        self.read
            .items
            .iter()
            .filter(|p| !self.modified.contains(p))
            .cloned()
            .collect()
    }
}

#[cfg(test)]
#[path = "extract_tests.rs"]
mod tests;

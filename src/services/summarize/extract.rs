//! The heuristics over a span: one pass over the messages (and any previous summaries) that
//! sorts what they say into sections, identifiers and files, before any budgeting.

use std::collections::HashMap;
use std::sync::LazyLock;

use regex::Regex;
use serde_json::Value;

use crate::contract::message::{AssistantMessage, ContentBlock, MessageBody};

use super::SummaryRequest;
use super::identifiers::{find_identifiers, scan_identifiers};
use super::previous::parse_previous;
use super::sections::{NSEC, SECS, Sec};
use super::text::{
    Ordered, is_command, is_substantive, item, prose_lines, re, sentences, strip_injected,
    strip_markers,
};
use super::tools::{
    ToolKind, action, classify_tool, command_line, patch_paths, path_args, shell_read_paths,
    telling_line, todo_items, walk_strings,
};

/// A sentence that records a choice outright.
static DECISION_RE: LazyLock<Regex> = LazyLock::new(|| {
    re(
        r"(?i)\b(?:decided|decision|going with|instead of|rather than|opted|chose|settled on|switched to|we['’]ll use|I['’]ll use|the fix is|the cause is|root cause)\b",
    )
});
/// A sentence that announces what comes next ("I'll run the tests", "let's check").
static ANNOUNCE_RE: LazyLock<Regex> = LazyLock::new(|| {
    re(
        r"(?i)^(?:now |next,? |then |first,? |ok(?:ay)?,? |so,? )?(?:I['’]ll|I will|let['’]s|let us|we['’]ll|we will|I['’]m going to|we['’]re going to|I need to|we need to)\b",
    )
});
/// A reason given for a choice.
static REASON_RE: LazyLock<Regex> = LazyLock::new(|| {
    re(r"(?i)\b(?:because|since|so that|to avoid|as it|as the|due to|in order to|otherwise)\b")
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
    /// The span's own identifiers, first seen first.
    pub(super) identifiers: Ordered,
    /// Identifiers carried over from previous summaries and not seen in the span.
    pub(super) carried: Ordered,
    /// Per span identifier: how often the span mentions it and when it last did.
    id_seen: HashMap<String, (u64, u64)>,
    id_seq: u64,
    pub(super) read: Ordered,
    pub(super) modified: Ordered,
}

impl Extraction {
    pub(super) fn run(request: &SummaryRequest<'_>) -> Extraction {
        let mut ex = Extraction {
            secs: std::array::from_fn(|_| Ordered::default()),
            identifiers: Ordered::default(),
            carried: Ordered::default(),
            id_seen: HashMap::new(),
            id_seq: 0,
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
        let mut prev_goals: Vec<Vec<String>> = Vec::new();
        for text in previous {
            let parsed = parse_previous(text);
            for sec in SECS {
                let items = parsed.secs[sec.idx()].iter().cloned();
                match sec {
                    Sec::Identifiers => items.for_each(|i| ex.carried.push(i)),
                    Sec::Goal => prev_goals.push(items.collect()),
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
            scan_identifiers(text, &mut ex.carried);
        }

        // The span itself.
        let mut latest_request: Option<String> = None;
        let mut last_assistant_text: Option<(usize, String)> = None;
        let mut user_turns: Vec<(usize, String)> = Vec::new();
        let mut last_final: Option<usize> = None;
        let mut call_names: HashMap<&str, &str> = HashMap::new();
        let mut todo_list: Option<Vec<String>> = None;
        let mut todo_extra: Vec<String> = Vec::new();
        let mut failures: Vec<String> = Vec::new();
        let mut calls: HashMap<&str, (usize, &str, &Value)> = HashMap::new();
        let mut done: Vec<(usize, String)> = Vec::new();
        let mut answers: Vec<(usize, String)> = Vec::new();
        for (i, m) in request.messages.iter().enumerate() {
            match &m.body {
                MessageBody::User(u) => {
                    let raw = u.content.joined_text();
                    ex.see_ids(&raw);
                    // What the user typed, without what the harness injected around it.
                    let text = strip_injected(&raw);
                    if text.trim().is_empty() || is_command(&text) {
                        continue;
                    }
                    // A standing request, not a follow-up question about it.
                    if is_substantive(&text)
                        && (!text.trim_end().ends_with('?') || latest_request.is_none())
                    {
                        latest_request = Some(item(&text, 240));
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
                                ex.see_ids(&t.text);
                                for s in sentences(&t.text) {
                                    // "I'll check the file" announces a step; a decision says
                                    // what was chosen, or why.
                                    let announced = ANNOUNCE_RE.is_match(&s);
                                    let decided = DECISION_RE.is_match(&s)
                                        || (announced && REASON_RE.is_match(&s));
                                    if decided && !s.ends_with(':') {
                                        ex.secs[Sec::Decisions.idx()].push(item(&s, 180));
                                    }
                                }
                                ex.todo_lines(&t.text);
                                if !t.text.trim().is_empty() {
                                    last_assistant_text = Some((i, t.text.clone()));
                                }
                            }
                            ContentBlock::Thinking(t) => {
                                ex.see_ids(&t.thinking);
                            }
                            ContentBlock::ToolCall(call) => {
                                call_names.insert(&call.id, &call.name);
                                calls.insert(&call.id, (i, &call.name, &call.arguments));
                                for p in path_args(&call.arguments) {
                                    ex.see_id(p);
                                }
                                let mut strings = Vec::new();
                                walk_strings(&call.arguments, &mut |_, s| strings.push(s));
                                strings.into_iter().for_each(|s| ex.see_ids(s));
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
                        let answer = a.content.iter().find_map(|b| match b {
                            ContentBlock::Text(t) => sentences(&t.text).into_iter().next(),
                            _ => None,
                        });
                        if let Some(first) = answer {
                            answers.push((i, first));
                        }
                    }
                }
                MessageBody::ToolResult(r) => {
                    let text = r.content.joined_text();
                    ex.see_ids(&text);
                    let name = if r.tool_name.is_empty() {
                        call_names
                            .get(r.tool_call_id.as_str())
                            .copied()
                            .unwrap_or("tool")
                    } else {
                        &r.tool_name
                    };
                    let call = calls.get(r.tool_call_id.as_str());
                    if r.is_error {
                        // The line that names the error, not a banner before it.
                        let line = telling_line(&text, true);
                        let label = match call.and_then(|(_, _, args)| command_line(args)) {
                            Some(cmd) => format!("{name} `{}`", item(cmd, 60)),
                            None => name.to_owned(),
                        };
                        failures.push(item(&format!("{label}: {line}"), 160));
                    } else if let Some(what) = call.and_then(|(_, name, args)| action(name, args)) {
                        done.push((i, item(&what, 160)));
                    }
                }
                MessageBody::Custom(c) => {
                    ex.see_ids(&c.content.joined_text());
                    for key in ["command", "output"] {
                        if let Some(s) = c.extra.get(key).and_then(Value::as_str) {
                            ex.see_ids(s);
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

        // Goal: the span's latest standing request, then the goals before it.
        let goal = Sec::Goal.idx();
        if let Some(latest) = latest_request {
            ex.secs[goal].push(latest);
        }
        // Newest summary first; each lists its goals newest first.
        for g in prev_goals.into_iter().rev().flatten() {
            let g = g.strip_prefix("Earlier goal: ").unwrap_or(&g).to_owned();
            if ex.secs[goal].items.len() < 3 && !ex.secs[goal].contains(&g) {
                let labelled = if ex.secs[goal].items.is_empty() {
                    g
                } else {
                    format!("Earlier goal: {g}")
                };
                ex.secs[goal].push(labelled);
            }
        }

        // Done, oldest first: an answer counts once the user moved on (or if it announces
        // nothing); what the span's last words announce is the next step.
        let n = request.messages.len();
        for (i, first) in answers {
            let moved_on = request.messages[i + 1..]
                .iter()
                .find(|m| !matches!(m.body, MessageBody::ToolResult(_)))
                .is_some_and(|m| matches!(m.body, MessageBody::User(_)));
            // "Fixed." says less than the commands and edits around it.
            let telling = first.split_whitespace().count() >= 4;
            if telling && (moved_on || (i + 1 == n && !ANNOUNCE_RE.is_match(&first))) {
                done.push((i, item(&format!("answered: {first}"), 160)));
            }
        }
        done.sort_by_key(|(i, _)| *i);
        done.into_iter()
            .for_each(|(_, d)| ex.secs[Sec::Done.idx()].push(d));
        let last_user = user_turns.last().map(|(i, _)| *i);
        // Once the user spoke again, earlier next steps and questions were taken up.
        if last_user.is_some() {
            ex.secs[Sec::Todos.idx()]
                .retain(|t| !t.starts_with("next: ") && !t.starts_with("open question: "));
        }
        if let Some((_, text)) =
            last_assistant_text.filter(|(i, _)| last_user.is_none_or(|u| *i > u))
        {
            for s in sentences(&text) {
                if ANNOUNCE_RE.is_match(&s) && !REASON_RE.is_match(&s) {
                    ex.secs[Sec::Todos.idx()].push(item(&format!("next: {s}"), 160));
                }
            }
        }
        // A question the final answer leaves to the user is open until the user answers.
        if let Some(f) = last_final.filter(|f| last_user.is_none_or(|u| *f > u))
            && let MessageBody::Assistant(a) = &request.messages[f].body
        {
            for b in &a.content {
                if let ContentBlock::Text(t) = b {
                    for s in sentences(&t.text).into_iter().filter(|s| s.ends_with('?')) {
                        ex.secs[Sec::Todos.idx()].push(item(&format!("open question: {s}"), 160));
                    }
                }
            }
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
        ex.keep_last(Sec::Done, 10);
        ex.keep_last(Sec::Todos, 12);
        ex.keep_last(Sec::Failures, 8);
        ex.keep_last(Sec::Pending, 8);
        ex.keep_first(Sec::Constraints, 16);
        ex.keep_first(Sec::Earlier, 12);
        ex
    }

    /// Counts the span's mentions of every identifier of `text`.
    fn see_ids(&mut self, text: &str) {
        for (_, id) in find_identifiers(text) {
            self.see_id(id.to_owned());
        }
    }

    fn see_id(&mut self, id: String) {
        self.id_seq += 1;
        let e = self.id_seen.entry(id.clone()).or_insert((0, 0));
        e.0 += 1;
        e.1 = self.id_seq;
        self.identifiers.push(id);
    }

    /// The span's identifiers by priority (the most recent first, each extra mention worth a
    /// twentieth of the span), then the carried-over ones not seen again, in their order.
    pub(super) fn ranked_identifiers(&self) -> Vec<String> {
        let boost = (self.id_seq / 20).max(1);
        let mut own: Vec<(u64, usize, &String)> = self
            .identifiers
            .items
            .iter()
            .enumerate()
            .map(|(first, id)| {
                let (count, last) = self.id_seen.get(id).copied().unwrap_or((1, 0));
                (last + (count.min(20) - 1) * boost, first, id)
            })
            .collect();
        own.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
        let mut out: Vec<String> = own.into_iter().map(|(_, _, id)| id.clone()).collect();
        out.extend(
            self.carried
                .items
                .iter()
                .filter(|id| !self.identifiers.contains(id))
                .cloned(),
        );
        out
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

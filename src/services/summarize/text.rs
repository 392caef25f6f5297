//! Small text helpers the summarizer's heuristics share: an ordered set, whitespace collapsing,
//! clipping, prose lines and sentences, and the regexes every part uses.

use std::collections::HashSet;
use std::sync::LazyLock;

use regex::Regex;

/// A deduplicated list in first-seen order (the set is only used for membership).
#[derive(Debug, Default)]
pub(super) struct Ordered {
    pub(super) items: Vec<String>,
    seen: HashSet<String>,
}

impl Ordered {
    pub(super) fn push(&mut self, item: String) {
        if !item.is_empty() && self.seen.insert(item.clone()) {
            self.items.push(item);
        }
    }

    /// Keeps the items `keep` accepts, in order.
    pub(super) fn retain(&mut self, keep: impl Fn(&str) -> bool) {
        let seen = &mut self.seen;
        self.items.retain(|i| {
            let k = keep(i);
            if !k {
                seen.remove(i);
            }
            k
        });
    }

    pub(super) fn contains(&self, item: &str) -> bool {
        self.seen.contains(item)
    }
}

/// Collapses all whitespace runs to single spaces and trims.
pub(super) fn collapse(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// Shortens `text` to at most `max` characters, at a word boundary when one is near, with "…".
pub(super) fn clip(text: &str, max: usize) -> String {
    if text.chars().count() <= max {
        return text.to_string();
    }
    if max == 0 {
        return String::new();
    }
    let keep = max - 1;
    let cut = text.char_indices().nth(keep).map_or(text.len(), |(i, _)| i);
    let head = &text[..cut];
    let head = match head.rfind(char::is_whitespace) {
        Some(ws) if head[..ws].chars().count() >= keep / 2 => &head[..ws],
        _ => head,
    };
    format!("{}…", head.trim_end())
}

/// Clips after collapsing whitespace: every item is one line.
pub(super) fn item(text: &str, max: usize) -> String {
    clip(&collapse(text), max)
}

/// The lines of `text` that are outside fenced code blocks.
pub(super) fn prose_lines(text: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let mut fenced = false;
    for line in text.lines() {
        let t = line.trim_start();
        if t.starts_with("```") || t.starts_with("~~~") {
            fenced = !fenced;
            continue;
        }
        if !fenced {
            out.push(line);
        }
    }
    out
}

/// Markdown list, quote and heading markers removed from the start of a line.
pub(super) fn strip_markers(line: &str) -> &str {
    let mut l = line.trim();
    loop {
        let before = l;
        for p in ["- ", "* ", "+ ", "> ", "#"] {
            if let Some(rest) = l.strip_prefix(p) {
                l = rest.trim_start();
            }
        }
        if let Some(m) = NUMBERED_RE.find(l) {
            l = l[m.end()..].trim_start();
        }
        if l == before {
            return l;
        }
    }
}

/// The sentences of the prose lines of `text`.
pub(super) fn sentences(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    for line in prose_lines(text) {
        if line.starts_with("    ") || line.starts_with('\t') {
            continue; // indented code
        }
        let line = strip_markers(line);
        let mut start = 0;
        let mut chars = line.char_indices().peekable();
        while let Some((i, c)) = chars.next() {
            if matches!(c, '.' | '!' | '?') && chars.peek().is_some_and(|(_, n)| n.is_whitespace())
            {
                let end = i + c.len_utf8();
                out.push(line[start..end].trim().to_string());
                start = end;
            }
        }
        let rest = line[start..].trim();
        if !rest.is_empty() {
            out.push(rest.to_string());
        }
    }
    out.retain(|s| !s.is_empty());
    out
}

/// `text` without the blocks a harness injects into user messages (`<ide_opened_file>…`,
/// `<system-reminder>…`, `<environment_context>…`, `<command-name>…`): tags whose name holds
/// `_` or `-`, with their content. What is left is what the user typed.
pub(super) fn strip_injected(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(open) = INJECTED_OPEN_RE.find(rest) {
        let name = rest[open.start() + 1..open.end()]
            .trim_end_matches('>')
            .split_whitespace()
            .next()
            .unwrap_or("");
        out.push_str(&rest[..open.start()]);
        let close = format!("</{name}>");
        match rest[open.end()..].find(&close) {
            Some(at) => rest = &rest[open.end() + at + close.len()..],
            None => {
                // An unclosed tag: drop the tag, keep the text after it.
                rest = &rest[open.end()..];
            }
        }
    }
    out.push_str(rest);
    out.trim().to_owned()
}

/// A harness command such as `/mode` or `/compact focus`, not a request to the model.
pub(super) fn is_command(text: &str) -> bool {
    text.split_whitespace()
        .next()
        .is_some_and(|first| COMMAND_RE.is_match(first))
}

/// A request worth calling the goal: more than an acknowledgement.
pub(super) fn is_substantive(text: &str) -> bool {
    let t = text.trim();
    !is_command(t) && (t.split_whitespace().count() >= 3 || t.chars().count() >= 16)
}

/// Compiles a regex from a literal pattern.
pub(super) fn re(pattern: &str) -> Regex {
    #[allow(clippy::expect_used)] // literal patterns, each exercised by the unit tests
    Regex::new(pattern).expect("built-in summarizer regex")
}

static INJECTED_OPEN_RE: LazyLock<Regex> =
    LazyLock::new(|| re(r"<[a-z][a-z0-9]*[_-][a-z0-9_-]*(?:\s[^>]*)?>"));
static NUMBERED_RE: LazyLock<Regex> = LazyLock::new(|| re(r"^\d{1,3}[.)]\s"));
static COMMAND_RE: LazyLock<Regex> = LazyLock::new(|| re(r"^/[A-Za-z][\w-]*$"));
/// A file name with an extension (`main.rs`, `Cargo.toml`).
pub(super) static EXT_RE: LazyLock<Regex> =
    LazyLock::new(|| re(r"^[\w.@+~-]*[\w@+~-]\.[A-Za-z][A-Za-z0-9]{0,9}$"));

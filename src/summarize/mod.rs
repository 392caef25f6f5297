//! The built-in summarizer (contract §9): offline, deterministic, sectioned, and strict about
//! identifiers. An LLM-backed summarizer can implement the same trait later.

use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::error::Result;
use crate::message::Message;
use crate::tokens::TokenCounter;

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
    /// Distinct identifiers found in the span (and the previous summary).
    pub identifiers_found: usize,
    /// How many of them appear verbatim in `text`.
    pub identifiers_kept: usize,
    /// Files the span read.
    pub read_files: Vec<String>,
    /// Files the span modified.
    pub modified_files: Vec<String>,
}

/// Turns a span of messages into a summary within a token budget.
pub trait Summarizer: Send + Sync + std::fmt::Debug {
    /// Summarizes; the result's `tokens` (by `counter`) never exceed `request.max_tokens`.
    fn summarize(
        &self,
        request: &SummaryRequest<'_>,
        counter: &dyn TokenCounter,
    ) -> Result<Summary>;
}

// ---------------------------------------------------------------------------------------------
// The built-in summarizer.
// ---------------------------------------------------------------------------------------------

use std::collections::{HashMap, HashSet};
use std::sync::LazyLock;

use regex::{Captures, Regex};
use serde_json::Value;

use crate::message::{AssistantMessage, COMPACTION_SUMMARY_PREFIX, ContentBlock, MessageBody};

/// The section headings of a built-in summary, in order, so that checks and engines can find
/// them (an extra `## Earlier context` section may follow `## Goal`).
pub const SECTION_HEADINGS: [&str; 9] = [
    "Goal",
    "Decisions",
    "Open TODOs",
    "Constraints",
    "Pending user asks",
    "Exact identifiers",
    "Files read / modified",
    "Tool failures",
    "Latest unresolved request",
];

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
        let identifiers = &ex.identifiers.items;
        let identifiers_kept = identifiers
            .iter()
            .filter(|id| text.contains(id.as_str()))
            .count();
        Ok(Summary {
            tokens,
            identifiers_found: identifiers.len(),
            identifiers_kept,
            read_files: ex.read_only(),
            modified_files: ex.modified.items.clone(),
            text,
        })
    }
}

// ----- sections ------------------------------------------------------------------------------

/// Internal sections: the nine public ones plus "Earlier context" for unsectioned old text.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Sec {
    Goal,
    Earlier,
    Decisions,
    Todos,
    Constraints,
    Pending,
    Identifiers,
    Files,
    Failures,
    Latest,
}

const NSEC: usize = 10;

const SECS: [Sec; NSEC] = [
    Sec::Goal,
    Sec::Earlier,
    Sec::Decisions,
    Sec::Todos,
    Sec::Constraints,
    Sec::Pending,
    Sec::Identifiers,
    Sec::Files,
    Sec::Failures,
    Sec::Latest,
];

const EARLIER_HEADING: &str = "Earlier context";
const FOCUS_CLIP: usize = 200;

impl Sec {
    fn idx(self) -> usize {
        self as usize
    }

    fn heading(self) -> &'static str {
        match self {
            Sec::Goal => SECTION_HEADINGS[0],
            Sec::Earlier => EARLIER_HEADING,
            Sec::Decisions => SECTION_HEADINGS[1],
            Sec::Todos => SECTION_HEADINGS[2],
            Sec::Constraints => SECTION_HEADINGS[3],
            Sec::Pending => SECTION_HEADINGS[4],
            Sec::Identifiers => SECTION_HEADINGS[5],
            Sec::Files => SECTION_HEADINGS[6],
            Sec::Failures => SECTION_HEADINGS[7],
            Sec::Latest => SECTION_HEADINGS[8],
        }
    }

    /// The longest an item of this section may be; `None` for verbatim-only sections.
    fn base_clip(self) -> Option<usize> {
        match self {
            Sec::Identifiers | Sec::Files => None,
            Sec::Goal | Sec::Earlier => Some(240),
            Sec::Decisions | Sec::Constraints => Some(180),
            Sec::Todos | Sec::Failures => Some(160),
            Sec::Pending => Some(200),
            Sec::Latest => Some(400),
        }
    }

    /// The section a heading of a previous summary (ours or an LLM's) maps to.
    fn from_heading(heading: &str) -> Option<Sec> {
        let h = heading
            .trim()
            .trim_matches(|c: char| c == '*' || c == ':')
            .to_lowercase();
        Some(match h.as_str() {
            "goal" | "goals" | "objective" | "task" => Sec::Goal,
            "earlier context" => Sec::Earlier,
            "decisions" | "key decisions" => Sec::Decisions,
            "open todos" | "todos" | "todo" | "next steps" => Sec::Todos,
            "constraints" | "constraints/rules" | "constraints & preferences" | "rules" => {
                Sec::Constraints
            }
            "pending user asks" => Sec::Pending,
            "exact identifiers" | "identifiers" => Sec::Identifiers,
            "files read / modified" | "files" => Sec::Files,
            "tool failures" => Sec::Failures,
            "latest unresolved request" | "latest unresolved user request" => Sec::Latest,
            _ => return None,
        })
    }
}

// ----- small text helpers -----------------------------------------------------------------

/// A deduplicated list in first-seen order (the set is only used for membership).
#[derive(Debug, Default)]
struct Ordered {
    items: Vec<String>,
    seen: HashSet<String>,
}

impl Ordered {
    fn push(&mut self, item: String) {
        if !item.is_empty() && self.seen.insert(item.clone()) {
            self.items.push(item);
        }
    }

    fn contains(&self, item: &str) -> bool {
        self.seen.contains(item)
    }
}

/// Collapses all whitespace runs to single spaces and trims.
fn collapse(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// Shortens `text` to at most `max` characters, at a word boundary when one is near, with "…".
fn clip(text: &str, max: usize) -> String {
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
fn item(text: &str, max: usize) -> String {
    clip(&collapse(text), max)
}

/// The lines of `text` that are outside fenced code blocks.
fn prose_lines(text: &str) -> Vec<&str> {
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
fn strip_markers(line: &str) -> &str {
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
fn sentences(text: &str) -> Vec<String> {
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

/// A harness command such as `/mode` or `/compact focus`, not a request to the model.
fn is_command(text: &str) -> bool {
    text.split_whitespace()
        .next()
        .is_some_and(|first| COMMAND_RE.is_match(first))
}

/// A request worth calling the goal: more than an acknowledgement.
fn is_substantive(text: &str) -> bool {
    let t = text.trim();
    !is_command(t) && (t.split_whitespace().count() >= 3 || t.chars().count() >= 16)
}

/// Compiles a regex from a literal pattern.
fn re(pattern: &str) -> Regex {
    #[allow(clippy::expect_used)] // literal patterns, each exercised by the unit tests
    Regex::new(pattern).expect("built-in summarizer regex")
}

static NUMBERED_RE: LazyLock<Regex> = LazyLock::new(|| re(r"^\d{1,3}[.)]\s"));
static COMMAND_RE: LazyLock<Regex> = LazyLock::new(|| re(r"^/[A-Za-z][\w-]*$"));
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
static EXT_RE: LazyLock<Regex> =
    LazyLock::new(|| re(r"^[\w.@+~-]*[\w@+~-]\.[A-Za-z][A-Za-z0-9]{0,9}$"));
static PATCH_FILE_RE: LazyLock<Regex> = LazyLock::new(|| {
    re(
        r"(?m)^(?:\*\*\* (?:Add|Update|Delete) File: |\*\*\* Move to: |\+\+\+ (?:b/)?)(\S[^\r\n]*?)\s*$",
    )
});

// ----- identifiers ---------------------------------------------------------------------------

/// One pass over text finds every identifier kind; alternatives earlier in the list win at the
/// same position, so a URL is never also split into a host and a path.
static IDENT_RE: LazyLock<Regex> = LazyLock::new(|| {
    re(r"(?x)
      (?P<url>\b(?:https?|wss?|s?ftp|ssh|git|file)://[A-Za-z0-9\-._~:/?\#\[\]@!$&()*+,;=%]+)
    | (?P<uuid>\b[0-9A-Fa-f]{8}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{12}\b)
    | (?P<ip>\b(?:(?:25[0-5]|2[0-4][0-9]|1[0-9]{2}|[1-9]?[0-9])\.){3}(?:25[0-5]|2[0-4][0-9]|1[0-9]{2}|[1-9]?[0-9])(?::[0-9]{1,5})?\b)
    | (?P<hostport>\b(?:localhost|(?:[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?\.)+[A-Za-z]{2,24}):[0-9]{2,5}\b)
    | (?P<apath>(?:~|\.{1,2})?/[A-Za-z0-9_.@+~-]+(?:/[A-Za-z0-9_.@+~-]+)*)
    | (?P<rpath>[A-Za-z0-9_@+-][A-Za-z0-9_.@+~-]*(?:/[A-Za-z0-9_.@+~-]+)*/[A-Za-z0-9_@+~-][A-Za-z0-9_.@+~-]*\.[A-Za-z][A-Za-z0-9]{0,9}\b)
    | (?P<hash>\b[0-9A-Fa-f]{7,}\b)
    | (?P<host>\b(?:[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?\.)+[A-Za-z]{2,24}\b(?:/[A-Za-z0-9\-._~/%+@]*)?)
    ")
});

/// Top-level domains that make a one-dot name a host (file extensions such as `.rs`, `.md`,
/// `.sh`, `.py` are left out on purpose).
const KNOWN_TLDS: &[&str] = &[
    "com",
    "org",
    "net",
    "io",
    "dev",
    "ai",
    "app",
    "co",
    "edu",
    "gov",
    "mil",
    "int",
    "info",
    "biz",
    "cloud",
    "internal",
    "local",
    "localhost",
    "lan",
    "corp",
    "home",
    "example",
    "invalid",
    "arpa",
    "uk",
    "de",
    "fr",
    "jp",
    "cn",
    "ru",
    "nl",
    "eu",
    "us",
    "ca",
    "au",
    "ch",
    "se",
    "it",
    "es",
    "be",
    "at",
    "dk",
    "fi",
    "br",
    "kr",
    "tw",
    "hk",
    "sg",
    "nz",
    "ie",
    "cz",
    "xyz",
    "tech",
    "site",
    "online",
    "me",
    "tv",
    "gg",
    "fm",
    "ly",
    "page",
];

/// Last labels that mean a dotted name is a file, not a host.
const FILE_EXTS: &[&str] = &[
    "rs", "ts", "tsx", "js", "jsx", "mjs", "cjs", "md", "py", "go", "sh", "json", "toml", "yaml",
    "yml", "lock", "txt", "html", "css", "scss", "c", "h", "cc", "cpp", "hpp", "java", "kt", "rb",
    "lua", "rhai", "map", "log", "xml", "svg", "png", "jpg", "jpeg", "gif", "gz", "tar", "zip",
    "wasm", "so", "dylib", "dll", "exe", "bin", "pl", "php", "swift", "sql", "csv", "jsonl", "env",
    "ini", "cfg", "conf", "pem", "key", "crt", "pdf", "bak", "tmp", "orig", "patch", "diff",
];

/// First labels that mean a dotted name is a code expression (`this.state.value`), not a host.
const CODE_RECEIVERS: &[&str] = &[
    "this", "self", "super", "process", "window", "document", "console", "os", "sys", "std",
    "math", "json", "object", "array", "string", "module", "exports", "props", "state", "ctx",
    "config", "cfg", "options", "opts", "args", "params", "req", "res", "event", "err", "error",
    "theme", "path", "fs", "util", "utils", "np", "pd", "torch", "data", "result", "value", "item",
    "obj", "node", "el", "e", "t", "s", "x", "m",
];

fn host_ok(host: &str, followed_by_paren: bool) -> bool {
    if followed_by_paren {
        return false;
    }
    let lower = host.to_ascii_lowercase();
    let labels: Vec<&str> = lower.split('.').collect();
    let (Some(first), Some(tld)) = (labels.first(), labels.last()) else {
        return false;
    };
    if CODE_RECEIVERS.contains(first) || FILE_EXTS.contains(tld) {
        return false;
    }
    if KNOWN_TLDS.contains(tld) {
        return true;
    }
    // Without a known TLD, a lowercase name needs two dots and a digit or hyphen in a label
    // (`node-3.cluster.svc`), or three dots, so that `import.meta.url` stays code.
    let marked = labels
        .iter()
        .any(|l| l.contains('-') || l.bytes().any(|b| b.is_ascii_digit()));
    host == lower && (labels.len() >= 4 || (labels.len() >= 3 && marked))
}

fn prev_char(text: &str, at: usize) -> Option<char> {
    text[..at].chars().next_back()
}

/// Removes sentence punctuation that a greedy match picked up at its end.
fn trim_trailing(s: &str) -> &str {
    let mut s = s;
    loop {
        let before = s;
        s = s.trim_end_matches(['.', ',', ';', ':', '!', '?', '\'']);
        for (open, close) in [('(', ')'), ('[', ']')] {
            if s.ends_with(close) && s.matches(open).count() < s.matches(close).count() {
                s = &s[..s.len() - 1];
            }
        }
        if s == before {
            return s;
        }
    }
}

/// The identifier a regex match stands for, if it passes its kind's checks.
fn accept_identifier<'t>(text: &'t str, caps: &Captures<'t>) -> Option<&'t str> {
    let whole = caps.get(0)?;
    let after = text[whole.end()..].chars().next();
    if let Some(m) = caps.name("url") {
        let s = trim_trailing(m.as_str());
        return (s.len() > m.as_str().find("://")? + 3).then_some(s);
    }
    if let Some(m) = caps.name("uuid").or_else(|| caps.name("ip")) {
        return Some(m.as_str());
    }
    if let Some(m) = caps.name("hostport") {
        let s = m.as_str();
        let host = s.rsplit_once(':').map_or(s, |(h, _)| h);
        return (host == "localhost" || host_ok(host, false)).then_some(s);
    }
    if let Some(m) = caps.name("apath") {
        if prev_char(text, m.start()).is_some_and(|c| c.is_alphanumeric() || c == '_') {
            return None;
        }
        let s = trim_trailing(m.as_str());
        let prefixed = s.starts_with('~') || s.starts_with('.');
        let segments = s.split('/').filter(|p| !p.is_empty()).count();
        let has_ext = s
            .rsplit('/')
            .next()
            .is_some_and(|last| EXT_RE.is_match(last));
        let ok = prefixed || segments >= 2 || has_ext;
        return (ok && s.len() > 2).then_some(s);
    }
    if let Some(m) = caps.name("rpath") {
        return Some(m.as_str());
    }
    if let Some(m) = caps.name("hash") {
        let s = m.as_str();
        let digit = s.bytes().any(|b| b.is_ascii_digit());
        let letter = s.bytes().any(|b| b.is_ascii_alphabetic());
        return (digit && letter).then_some(s);
    }
    if let Some(m) = caps.name("host") {
        let s = trim_trailing(m.as_str());
        let host = s.split('/').next().unwrap_or(s);
        return host_ok(host, after == Some('(')).then_some(s);
    }
    None
}

/// Adds every identifier of `text` to `out`, in order of appearance.
fn scan_identifiers(text: &str, out: &mut Ordered) {
    for caps in IDENT_RE.captures_iter(text) {
        if let Some(id) = accept_identifier(text, &caps)
            && !out.contains(id)
        {
            out.push(id.to_string());
        }
    }
}

/// Calls `f` on every string inside a JSON value, in document order.
fn walk_strings<'v>(value: &'v Value, f: &mut impl FnMut(Option<&str>, &'v str)) {
    fn go<'v>(value: &'v Value, key: Option<&str>, f: &mut impl FnMut(Option<&str>, &'v str)) {
        match value {
            Value::String(s) => f(key, s),
            Value::Array(items) => items.iter().for_each(|v| go(v, key, f)),
            Value::Object(map) => map.iter().for_each(|(k, v)| go(v, Some(k), f)),
            _ => {}
        }
    }
    go(value, None, f);
}

/// Argument keys whose string values are file paths.
const PATH_KEYS: &[&str] = &[
    "path",
    "file_path",
    "filePath",
    "filename",
    "file",
    "notebook_path",
    "target_file",
    "paths",
    "files",
];

fn plausible_path_value(s: &str) -> bool {
    !matches!(s, "" | "." | ".." | "./" | "/")
        && s.len() <= 512
        && !s.contains('\n')
        && !s.starts_with('{')
}

/// The paths a tool call names in its path-like arguments.
fn path_args(args: &Value) -> Vec<String> {
    let mut out = Vec::new();
    if let Value::Object(map) = args {
        for key in PATH_KEYS {
            let mut push = |v: &Value| {
                if let Some(s) = v.as_str().map(str::trim)
                    && plausible_path_value(s)
                {
                    out.push(s.to_string());
                }
            };
            match map.get(*key) {
                Some(Value::Array(items)) => items.iter().for_each(&mut push),
                Some(v) => push(v),
                None => {}
            }
        }
    }
    out
}

// ----- tools and files ---------------------------------------------------------------------

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum ToolKind {
    Todo,
    Modify,
    Read,
    Shell,
    Other,
}

/// The lowercase words of a tool name: `str_replace_based_edit_tool` → str, replace, based, …;
/// `TodoWrite` → todo, write.
fn name_words(name: &str) -> Vec<String> {
    let mut words = Vec::new();
    let mut cur = String::new();
    let mut prev_lower = false;
    for c in name.chars() {
        if !c.is_alphanumeric() {
            if !cur.is_empty() {
                words.push(std::mem::take(&mut cur));
            }
            prev_lower = false;
            continue;
        }
        if c.is_uppercase() && prev_lower && !cur.is_empty() {
            words.push(std::mem::take(&mut cur));
        }
        prev_lower = c.is_lowercase() || c.is_ascii_digit();
        cur.extend(c.to_lowercase());
    }
    if !cur.is_empty() {
        words.push(cur);
    }
    words
}

fn classify_tool(name: &str, args: &Value) -> ToolKind {
    let words = name_words(name);
    let has = |list: &[&str]| words.iter().any(|w| list.contains(&w.as_str()));
    if has(&["todo", "todos", "todowrite"]) {
        return ToolKind::Todo;
    }
    // str_replace_based_edit_tool and friends say what they do in `command`.
    if has(&["edit", "editor"])
        && let Some(cmd) = args.get("command").and_then(Value::as_str)
    {
        match cmd {
            "view" => return ToolKind::Read,
            "create" | "str_replace" | "insert" | "undo_edit" => return ToolKind::Modify,
            _ => {}
        }
    }
    if has(&[
        "write",
        "edit",
        "replace",
        "patch",
        "multiedit",
        "create",
        "insert",
        "delete",
        "move",
        "rename",
    ]) {
        ToolKind::Modify
    } else if has(&[
        "read", "cat", "view", "grep", "glob", "ls", "list", "find", "search", "open", "head",
        "tail",
    ]) {
        ToolKind::Read
    } else if has(&[
        "bash",
        "shell",
        "sh",
        "zsh",
        "exec",
        "terminal",
        "command",
        "cmd",
        "run",
        "powershell",
    ]) {
        ToolKind::Shell
    } else {
        ToolKind::Other
    }
}

/// Shell commands that only read the files they name.
const READ_COMMANDS: &[&str] = &[
    "cat",
    "head",
    "tail",
    "less",
    "more",
    "bat",
    "nl",
    "wc",
    "ls",
    "tree",
    "find",
    "grep",
    "egrep",
    "fgrep",
    "rg",
    "ag",
    "ack",
    "stat",
    "file",
    "diff",
    "view",
    "sed",
    "du",
    "md5sum",
    "sha256sum",
    "jq",
];

fn looks_like_path(t: &str) -> bool {
    !t.is_empty()
        && !t.starts_with('-')
        && !t.contains("://")
        && t != "/dev/null"
        && !t.chars().any(|c| "*?{}[]$<>()|`=\\,".contains(c))
        && t != "."
        && t != ".."
        && (t.contains('/') || EXT_RE.is_match(t))
}

/// Paths that read-like commands of a shell command line name (`cat a.rs | grep x b.rs`).
fn shell_read_paths(command: &str) -> Vec<String> {
    let mut out = Vec::new();
    for segment in command.split(['\n', ';', '|', '&']) {
        let words: Vec<&str> = segment
            .split_whitespace()
            .map(|w| w.trim_matches(|c| c == '"' || c == '\''))
            .collect();
        let mut rest = words.as_slice();
        while let Some((first, tail)) = rest.split_first() {
            let env_assignment = first.contains('=') && !first.starts_with('-');
            if env_assignment || matches!(*first, "sudo" | "time" | "command" | "xargs" | "nice") {
                rest = tail;
            } else {
                break;
            }
        }
        let Some((program, args)) = rest.split_first() else {
            continue;
        };
        let program = program.rsplit('/').next().unwrap_or(program);
        if !READ_COMMANDS.contains(&program) {
            continue;
        }
        if matches!(program, "sed") && args.iter().any(|a| a.starts_with("-i")) {
            continue;
        }
        let mut skip_pattern = matches!(
            program,
            "grep" | "egrep" | "fgrep" | "rg" | "ag" | "ack" | "jq" | "sed"
        ) && !args.iter().any(|a| *a == "-e" || *a == "-f");
        let mut skip_next = false;
        for arg in args {
            if skip_next {
                skip_next = false;
                continue;
            }
            if matches!(*arg, ">" | ">>" | "2>" | "2>>" | "&>") {
                skip_next = true;
                continue;
            }
            if arg.starts_with('-') || arg.contains('>') {
                continue;
            }
            if skip_pattern {
                skip_pattern = false;
                continue;
            }
            if looks_like_path(arg) {
                out.push((*arg).to_string());
            }
        }
    }
    out
}

/// Files named in patch text (`*** Update File: x`, `+++ b/x`).
fn patch_paths(text: &str) -> Vec<String> {
    PATCH_FILE_RE
        .captures_iter(text)
        .filter_map(|c| c.get(1))
        .map(|m| m.as_str().to_string())
        .filter(|p| p != "/dev/null")
        .collect()
}

/// Open items of a todo tool call: `(items, is_whole_list)`.
fn todo_items(args: &Value) -> (Vec<String>, bool) {
    let text_of = |v: &Value| -> Option<String> {
        ["content", "text", "title", "task", "description", "subject"]
            .iter()
            .find_map(|k| v.get(*k).and_then(Value::as_str))
            .map(|s| item(s, 160))
    };
    let list = match args {
        Value::Array(items) => Some(items),
        Value::Object(map) => ["todos", "items", "tasks"]
            .iter()
            .find_map(|k| map.get(*k).and_then(Value::as_array))
            .or_else(|| map.values().find_map(Value::as_array)),
        _ => None,
    };
    let Some(list) = list else {
        return (text_of(args).into_iter().collect(), false);
    };
    let open = list
        .iter()
        .filter_map(|v| {
            if let Some(s) = v.as_str() {
                return Some(item(s, 160));
            }
            let status = ["status", "state"]
                .iter()
                .find_map(|k| v.get(*k).and_then(Value::as_str))
                .unwrap_or("")
                .to_ascii_lowercase();
            let done = ["done", "completed", "checked"]
                .iter()
                .any(|k| v.get(*k).and_then(Value::as_bool) == Some(true));
            let closed = matches!(
                status.as_str(),
                "completed" | "complete" | "done" | "cancelled" | "canceled"
            );
            if done || closed { None } else { text_of(v) }
        })
        .collect();
    (open, true)
}

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

// ----- previous summaries ------------------------------------------------------------------

#[derive(Debug, Default)]
struct Parsed {
    secs: [Vec<String>; NSEC],
    read: Vec<String>,
    modified: Vec<String>,
}

/// Splits a previous summary into sections by `## ` heading; text outside known sections
/// becomes "Earlier context" items so that nothing is silently lost.
fn parse_previous(text: &str) -> Parsed {
    let mut parsed = Parsed::default();
    let mut current: Option<Sec> = None;
    let mut prefix: Option<String> = None;
    let mut paragraph: Vec<&str> = Vec::new();
    let mut file_tag: Option<bool> = None;
    let earlier = Sec::Earlier.idx();
    let flush = |paragraph: &mut Vec<&str>, parsed: &mut Parsed| {
        if !paragraph.is_empty() {
            parsed.secs[earlier].push(item(&paragraph.join(" "), 240));
            paragraph.clear();
        }
    };
    for raw in text.lines() {
        let line = raw.trim();
        if let Some(modified) = file_tag {
            if line.starts_with("</") {
                file_tag = None;
            } else if !line.is_empty() {
                let list = if modified {
                    &mut parsed.modified
                } else {
                    &mut parsed.read
                };
                list.push(line.to_string());
            }
            continue;
        }
        match line {
            "<read-files>" => file_tag = Some(false),
            "<modified-files>" => file_tag = Some(true),
            _ => {}
        }
        if file_tag.is_some()
            || line.starts_with(COMPACTION_SUMMARY_PREFIX)
            || line.starts_with("The following is a summary of a branch")
            || matches!(line, "<summary>" | "</summary>")
        {
            continue;
        }
        if let Some(heading) = line.strip_prefix("## ").or_else(|| line.strip_prefix("# ")) {
            flush(&mut paragraph, &mut parsed);
            match Sec::from_heading(heading) {
                Some(sec) => {
                    current = Some(sec);
                    prefix = None;
                }
                None => {
                    current = Some(Sec::Earlier);
                    prefix = Some(collapse(heading));
                }
            }
            continue;
        }
        if line.is_empty() {
            flush(&mut paragraph, &mut parsed);
            continue;
        }
        let Some(sec) = current else {
            if !line.starts_with("Focus:") {
                paragraph.push(line);
            }
            continue;
        };
        if line.starts_with("(+") && line.contains("omitted") {
            continue;
        }
        let body = strip_markers(line);
        if body.is_empty() || body == "(none)" {
            continue;
        }
        match sec {
            Sec::Files => {
                if let Some(p) = body.strip_prefix("modified: ") {
                    parsed.modified.push(p.trim().to_string());
                } else {
                    let p = body.strip_prefix("read: ").unwrap_or(body);
                    parsed.read.push(p.trim().to_string());
                }
            }
            Sec::Identifiers => {
                // Our own items are bare; an LLM's are often `quoted`.
                let id = line.trim_start_matches("- ").trim().trim_matches('`');
                if !id.is_empty() {
                    parsed.secs[sec.idx()].push(id.to_string());
                }
            }
            _ => {
                let text = match &prefix {
                    Some(p) => format!("{p}: {body}"),
                    None => body.to_string(),
                };
                let max = sec.base_clip().unwrap_or(240);
                parsed.secs[sec.idx()].push(item(&text, max));
            }
        }
    }
    flush(&mut paragraph, &mut parsed);
    parsed
}

// ----- extraction --------------------------------------------------------------------------

/// Everything the heuristics found, before any budgeting.
#[derive(Debug)]
struct Extraction {
    secs: [Ordered; NSEC],
    identifiers: Ordered,
    read: Ordered,
    modified: Ordered,
}

impl Extraction {
    fn run(request: &SummaryRequest<'_>) -> Extraction {
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
    fn read_only(&self) -> Vec<String> {
        self.read
            .items
            .iter()
            .filter(|p| !self.modified.contains(p))
            .cloned()
            .collect()
    }
}

// ----- rendering and budgeting --------------------------------------------------------------

/// The summary's content, ready to be rendered at some level of degradation.
#[derive(Debug)]
struct Doc {
    focus: Option<String>,
    secs: [Vec<String>; NSEC],
}

/// Which parts are left out of a rendering.
#[derive(Clone, Debug)]
struct Dropped {
    focus: bool,
    items: [Vec<bool>; NSEC],
}

/// One droppable part, in the order parts are given up.
#[derive(Clone, Copy, Debug)]
enum Part {
    Focus,
    Item(Sec, usize),
}

/// Clip levels tried, in order, before any item is dropped.
const CLIP_LEVELS: [Option<usize>; 3] = [None, Some(120), Some(60)];

impl Doc {
    fn new(ex: &Extraction, request: &SummaryRequest<'_>) -> Doc {
        let mut secs: [Vec<String>; NSEC] = std::array::from_fn(|i| ex.secs[i].items.clone());
        if request.identifier_policy == IdentifierPolicy::Strict {
            secs[Sec::Identifiers.idx()] = ex.identifiers.items.clone();
        }
        let files = &mut secs[Sec::Files.idx()];
        files.extend(ex.modified.items.iter().map(|p| format!("modified: {p}")));
        files.extend(ex.read_only().iter().map(|p| format!("read: {p}")));
        Doc {
            focus: request
                .instructions
                .map(|f| item(f, FOCUS_CLIP))
                .filter(|f| !f.is_empty()),
            secs,
        }
    }

    fn none_dropped(&self) -> Dropped {
        Dropped {
            focus: false,
            items: std::array::from_fn(|i| vec![false; self.secs[i].len()]),
        }
    }

    fn render(&self, level: Option<usize>, dropped: &Dropped) -> String {
        let limit = |base: Option<usize>| match (base, level) {
            (Some(b), Some(l)) => Some(b.min(l)),
            (b, _) => b,
        };
        let mut out = String::new();
        if let Some(focus) = &self.focus
            && !dropped.focus
        {
            out.push_str("Focus: ");
            out.push_str(&clip(focus, limit(Some(FOCUS_CLIP)).unwrap_or(FOCUS_CLIP)));
            out.push_str("\n\n");
        }
        for sec in SECS {
            let items = &self.secs[sec.idx()];
            let gone = &dropped.items[sec.idx()];
            let kept: Vec<&String> = items
                .iter()
                .zip(gone)
                .filter(|(_, d)| !**d)
                .map(|(i, _)| i)
                .collect();
            if sec == Sec::Earlier && kept.is_empty() {
                continue;
            }
            out.push_str("## ");
            out.push_str(sec.heading());
            out.push('\n');
            for text in kept {
                out.push_str("- ");
                match limit(sec.base_clip()) {
                    Some(max) => out.push_str(&clip(text, max)),
                    None => out.push_str(text),
                }
                out.push('\n');
            }
            if sec == Sec::Identifiers {
                let omitted = gone.iter().filter(|d| **d).count();
                if omitted > 0 {
                    out.push_str(&format!(
                        "(+{omitted} more identifiers omitted to fit the budget)\n"
                    ));
                }
            }
            out.push('\n');
        }
        out.truncate(out.trim_end().len());
        out
    }

    /// Parts in the order they are given up: detail first, identifiers late, and the goal,
    /// the latest request and the focus last.
    fn drop_order(&self) -> Vec<Part> {
        let mut order = Vec::new();
        let len = |s: Sec| self.secs[s.idx()].len();
        let oldest_first = |s: Sec, order: &mut Vec<Part>| {
            (0..len(s)).for_each(|i| order.push(Part::Item(s, i)));
        };
        let newest_first = |s: Sec, from: usize, order: &mut Vec<Part>| {
            (from..len(s))
                .rev()
                .for_each(|i| order.push(Part::Item(s, i)));
        };
        oldest_first(Sec::Decisions, &mut order);
        oldest_first(Sec::Todos, &mut order);
        oldest_first(Sec::Failures, &mut order);
        newest_first(Sec::Earlier, 0, &mut order);
        oldest_first(Sec::Pending, &mut order);
        newest_first(Sec::Constraints, 0, &mut order);
        newest_first(Sec::Files, 0, &mut order);
        newest_first(Sec::Goal, 1, &mut order);
        newest_first(Sec::Identifiers, 0, &mut order);
        oldest_first(Sec::Latest, &mut order);
        if len(Sec::Goal) > 0 {
            order.push(Part::Item(Sec::Goal, 0));
        }
        if self.focus.is_some() {
            order.push(Part::Focus);
        }
        order
    }

    fn dropped_first(&self, order: &[Part], k: usize) -> Dropped {
        let mut dropped = self.none_dropped();
        for part in &order[..k] {
            match *part {
                Part::Focus => dropped.focus = true,
                Part::Item(sec, i) => dropped.items[sec.idx()][i] = true,
            }
        }
        dropped
    }

    /// The best rendering within `max_tokens`: trim items, then drop parts in order (and let
    /// the survivors grow back if they then fit), then cut the bare skeleton to the longest
    /// prefix that fits.
    fn fit(&self, max_tokens: u64, counter: &dyn TokenCounter) -> String {
        let fits = |text: &str| counter.count_text(text) <= max_tokens;
        let none = self.none_dropped();
        for level in CLIP_LEVELS {
            let text = self.render(level, &none);
            if fits(&text) {
                return text;
            }
        }
        let level = CLIP_LEVELS[CLIP_LEVELS.len() - 1];
        let order = self.drop_order();
        let all = self.render(level, &self.dropped_first(&order, order.len()));
        if !fits(&all) {
            return longest_fitting_prefix(&all, &fits);
        }
        // fits(hi) always holds; lo never fits (k = 0 was tried above).
        let (mut lo, mut hi) = (0, order.len());
        while hi - lo > 1 {
            let mid = lo + (hi - lo) / 2;
            if fits(&self.render(level, &self.dropped_first(&order, mid))) {
                hi = mid;
            } else {
                lo = mid;
            }
        }
        // With parts dropped, the survivors may have room to be less clipped.
        let dropped = self.dropped_first(&order, hi);
        CLIP_LEVELS
            .iter()
            .map(|level| self.render(*level, &dropped))
            .find(|text| fits(text))
            .unwrap_or_else(|| self.render(level, &dropped))
    }
}

/// The longest prefix of `text` (on a character boundary) that `fits`, possibly empty.
fn longest_fitting_prefix(text: &str, fits: &impl Fn(&str) -> bool) -> String {
    let bounds: Vec<usize> = text
        .char_indices()
        .map(|(i, _)| i)
        .chain(std::iter::once(text.len()))
        .collect();
    // fits(bounds[lo]) holds (the empty prefix); find the largest such index.
    let (mut lo, mut hi) = (0, bounds.len());
    while hi - lo > 1 {
        let mid = lo + (hi - lo) / 2;
        if fits(&text[..bounds[mid]]) {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    let prefix = &text[..bounds[lo]];
    let trimmed = prefix.trim_end();
    if fits(trimmed) { trimmed } else { prefix }.to_string()
}

#[cfg(test)]
#[path = "mod_tests.rs"]
mod tests;

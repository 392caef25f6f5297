//! Finding opaque identifiers in text, each with its kind (URLs, UUIDs, hashes, paths, hosts,
//! IPs, host:port, record ids such as `mia_li_3668` or `#W2378156`, issue and PR numbers, error
//! names, backticked function names), so that a strict summary can keep them verbatim and a
//! benchmark can say which kinds survive.

use std::sync::LazyLock;

use regex_automata::meta::Regex;
use serde::Serialize;

use super::text::{EXT_RE, Ordered};

/// Each identifier kind's pattern, in priority order: at one position the earliest that matches
/// wins (leftmost-first, as an alternation of them would), so a URL is never also split into a
/// host and a path. [`find_identifiers`] searches them together with one multi-pattern DFA
/// search, which reports which pattern matched; no capture groups are resolved.
const PATTERNS: [&str; 13] = [
    // Func: a backticked name.
    r"`[A-Za-z_][A-Za-z0-9_]*(?:(?:::|\.)[A-Za-z_][A-Za-z0-9_]*)*(?:\(\))?`",
    // Url
    r"\b(?:https?|wss?|s?ftp|ssh|git|file)://[A-Za-z0-9\-._~:/?\#\[\]@!$&()*+,;=%]+",
    // Uuid
    r"\b[0-9A-Fa-f]{8}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{12}\b",
    // Ip (with a port)
    r"\b(?:(?:25[0-5]|2[0-4][0-9]|1[0-9]{2}|[1-9]?[0-9])\.){3}(?:25[0-5]|2[0-4][0-9]|1[0-9]{2}|[1-9]?[0-9])(?::[0-9]{1,5})?\b",
    // HostPort
    r"\b(?:localhost|(?:[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?\.)+[A-Za-z]{2,24}):[0-9]{2,5}\b",
    // APath: absolute, `~/` and `./` paths.
    r"(?:~|\.{1,2})?/[A-Za-z0-9_.@+~-]+(?:/[A-Za-z0-9_.@+~-]+)*",
    // RPath: `dir/file.ext`.
    r"[A-Za-z0-9_@+-][A-Za-z0-9_.@+~-]*(?:/[A-Za-z0-9_.@+~-]+)*/[A-Za-z0-9_@+~-][A-Za-z0-9_.@+~-]*\.[A-Za-z][A-Za-z0-9]{0,9}\b",
    // Record
    r"\#[A-Z]{1,3}[0-9]{4,}\b|\b[a-z][a-z0-9]*(?:_[a-z][a-z0-9]*)*_[0-9]{3,}\b",
    // Issue
    r"(?:\b[A-Za-z][\w.-]*/[\w.-]+)?\#[0-9]{1,6}\b|\b(?:GH|PR)-[0-9]{1,6}\b",
    // Error
    r"\b[A-Z][A-Za-z0-9]*(?:Error|Exception|Panic)\b|\bE[0-9]{4}\b|\bE(?:NOENT|ACCES|PERM|EXIST|NOTDIR|ISDIR|ADDRINUSE|CONNREFUSED|CONNRESET|TIMEDOUT|NOSPC|PIPE|AGAIN|BUSY|NOTEMPTY|INVAL|MFILE)\b",
    // Hash
    r"\b[0-9A-Fa-f]{7,}\b",
    // Code
    r"\b[A-Z0-9]{5,12}\b",
    // Host
    r"\b(?:[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?\.)+[A-Za-z]{2,24}\b(?:/[A-Za-z0-9\-._~/%+@]*)?",
];

/// What each of [`PATTERNS`] finds, by its index.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Found {
    Func,
    Url,
    Uuid,
    Ip,
    HostPort,
    APath,
    RPath,
    Record,
    Issue,
    Error,
    Hash,
    Code,
    Host,
}

const FOUND: [Found; 13] = [
    Found::Func,
    Found::Url,
    Found::Uuid,
    Found::Ip,
    Found::HostPort,
    Found::APath,
    Found::RPath,
    Found::Record,
    Found::Issue,
    Found::Error,
    Found::Hash,
    Found::Code,
    Found::Host,
];

/// Every identifier pattern in one multi-pattern regex.
static IDENT_RE: LazyLock<Regex> = LazyLock::new(|| {
    #[allow(clippy::expect_used)] // literal patterns, each exercised by the unit tests
    Regex::new_many(&PATTERNS).expect("built-in identifier patterns")
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

/// What kind of identifier a string is, so that benchmarks and budgets can treat kinds apart.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum IdKind {
    /// `https://…` and other URLs.
    Url,
    /// Absolute, `~`/`./` and `dir/file.ext` paths.
    Path,
    /// Hex strings of 7+ characters with a digit and a letter (git hashes, digests).
    Hash,
    /// RFC 4122 UUIDs.
    Uuid,
    /// Host names, IPs and `host:port`.
    Host,
    /// Record ids: `mia_li_3668`, `#W2378156`, `HAT136`, `8ZDL2V`.
    Record,
    /// Issue and PR numbers: `#151`, `owner/repo#12`, `GH-7`.
    Issue,
    /// Error names: `TypeError`, `ENOENT`, `E0502`.
    Error,
    /// Backticked function and symbol names: `fit_to_budget`, `Session::begin_turn()`.
    Function,
}

impl IdKind {
    /// Every kind, in report order.
    pub const ALL: [IdKind; 9] = [
        IdKind::Url,
        IdKind::Path,
        IdKind::Hash,
        IdKind::Uuid,
        IdKind::Host,
        IdKind::Record,
        IdKind::Issue,
        IdKind::Error,
        IdKind::Function,
    ];

    /// A short lowercase name for reports.
    pub fn name(self) -> &'static str {
        match self {
            IdKind::Url => "url",
            IdKind::Path => "path",
            IdKind::Hash => "hash",
            IdKind::Uuid => "uuid",
            IdKind::Host => "host",
            IdKind::Record => "record",
            IdKind::Issue => "issue",
            IdKind::Error => "error",
            IdKind::Function => "function",
        }
    }
}

/// A backticked name that looks like code: snake_case, camelCase, a path (`a::b`, `a.b`) or a
/// call (`f()`), not a plain word.
fn code_name(name: &str) -> bool {
    let bytes = name.as_bytes();
    name.contains('_')
        || name.contains("::")
        || name.contains('.')
        || name.ends_with("()")
        || bytes
            .windows(2)
            .any(|w| w[0].is_ascii_lowercase() && w[1].is_ascii_uppercase())
}

/// The identifier a match of pattern `found` over `text[start..end]` stands for, with its kind,
/// if it passes its kind's checks.
fn accept_identifier(text: &str, found: Found, start: usize, end: usize) -> Option<(IdKind, &str)> {
    let m = &text[start..end];
    let has_digit_and_letter = |s: &str| {
        s.bytes().any(|b| b.is_ascii_digit()) && s.bytes().any(|b| b.is_ascii_alphabetic())
    };
    match found {
        Found::Func => {
            let name = m.trim_matches('`');
            code_name(name).then_some((IdKind::Function, name))
        }
        Found::Url => {
            let s = trim_trailing(m);
            (s.len() > m.find("://")? + 3).then_some((IdKind::Url, s))
        }
        Found::Uuid => Some((IdKind::Uuid, m)),
        Found::Ip => Some((IdKind::Host, m)),
        Found::HostPort => {
            let host = m.rsplit_once(':').map_or(m, |(h, _)| h);
            (host == "localhost" || host_ok(host, false)).then_some((IdKind::Host, m))
        }
        Found::APath => {
            if prev_char(text, start).is_some_and(|c| c.is_alphanumeric() || c == '_') {
                return None;
            }
            let s = trim_trailing(m);
            let prefixed = s.starts_with('~') || s.starts_with('.');
            let segments = s.split('/').filter(|p| !p.is_empty()).count();
            let has_ext = s
                .rsplit('/')
                .next()
                .is_some_and(|last| EXT_RE.is_match(last));
            let ok = prefixed || segments >= 2 || has_ext;
            (ok && s.len() > 2).then_some((IdKind::Path, s))
        }
        Found::RPath => Some((IdKind::Path, m)),
        Found::Record => Some((IdKind::Record, m)),
        Found::Issue => {
            // `#123` inside a word or a colour (`#fff`) is not an issue.
            let glued = prev_char(text, start).is_some_and(|c| c.is_alphanumeric() || c == '&');
            (!glued).then_some((IdKind::Issue, m))
        }
        Found::Error => Some((IdKind::Error, m)),
        Found::Hash => has_digit_and_letter(m).then_some((IdKind::Hash, m)),
        Found::Code => has_digit_and_letter(m).then_some((IdKind::Record, m)),
        Found::Host => {
            let after = text[end..].chars().next();
            let s = trim_trailing(m);
            let host = s.split('/').next().unwrap_or(s);
            host_ok(host, after == Some('(')).then_some((IdKind::Host, s))
        }
    }
}

/// Every identifier of `text` with its kind, in order of appearance (repeats included).
pub fn find_identifiers(text: &str) -> Vec<(IdKind, &str)> {
    let mut out = Vec::new();
    let mut search = |range: std::ops::Range<usize>| {
        if range.is_empty() {
            return;
        }
        let input = regex_automata::Input::new(text).range(range);
        for m in IDENT_RE.find_iter(input) {
            if let Some(&found) = FOUND.get(m.pattern().as_usize())
                && let Some(id) = accept_identifier(text, found, m.start(), m.end())
            {
                out.push(id);
            }
        }
    };
    // The DFA treats `\b` as Unicode needs only while it reads ASCII: at a non-ASCII byte it
    // gives the search up to a slower engine, which then runs to the search's end. No identifier
    // holds whitespace, so the text is searched in stretches cut at ASCII whitespace (matches
    // and their look-around are the same: a search of a range still sees the bytes around it),
    // and only the whitespace-free stretches holding a non-ASCII byte reach the slower engine.
    let bytes = text.as_bytes();
    let mut pos = 0;
    while pos < bytes.len() {
        let Some(q) = bytes[pos..]
            .iter()
            .position(|b| !b.is_ascii())
            .map(|i| pos + i)
        else {
            search(pos..bytes.len());
            break;
        };
        let start = bytes[pos..q]
            .iter()
            .rposition(u8::is_ascii_whitespace)
            .map_or(pos, |i| pos + i);
        let end = bytes[q..]
            .iter()
            .position(u8::is_ascii_whitespace)
            .map_or(bytes.len(), |i| q + i);
        search(pos..start);
        search(start..end);
        pos = end;
    }
    out
}

/// Adds every identifier of `text` to `out`, in order of appearance.
pub(super) fn scan_identifiers(text: &str, out: &mut Ordered) {
    for (_, id) in find_identifiers(text) {
        if !out.contains(id) {
            out.push(id.to_string());
        }
    }
}

#[cfg(test)]
#[path = "identifiers_tests.rs"]
mod tests;

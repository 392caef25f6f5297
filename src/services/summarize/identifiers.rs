//! Finding opaque identifiers in text, each with its kind (URLs, UUIDs, hashes, paths, hosts,
//! IPs, host:port, record ids such as `mia_li_3668` or `#W2378156`, issue and PR numbers, error
//! names, backticked function names), so that a strict summary can keep them verbatim and a
//! benchmark can say which kinds survive.

use std::sync::LazyLock;

use regex::Captures;
use regex::Regex;
use serde::Serialize;

use super::text::{EXT_RE, Ordered, re};

/// One pass over text finds every identifier kind; alternatives earlier in the list win at the
/// same position, so a URL is never also split into a host and a path.
static IDENT_RE: LazyLock<Regex> = LazyLock::new(|| {
    re(r"(?x)
      (?P<func>`[A-Za-z_][A-Za-z0-9_]*(?:(?:::|\.)[A-Za-z_][A-Za-z0-9_]*)*(?:\(\))?`)
    | (?P<url>\b(?:https?|wss?|s?ftp|ssh|git|file)://[A-Za-z0-9\-._~:/?\#\[\]@!$&()*+,;=%]+)
    | (?P<uuid>\b[0-9A-Fa-f]{8}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{12}\b)
    | (?P<ip>\b(?:(?:25[0-5]|2[0-4][0-9]|1[0-9]{2}|[1-9]?[0-9])\.){3}(?:25[0-5]|2[0-4][0-9]|1[0-9]{2}|[1-9]?[0-9])(?::[0-9]{1,5})?\b)
    | (?P<hostport>\b(?:localhost|(?:[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?\.)+[A-Za-z]{2,24}):[0-9]{2,5}\b)
    | (?P<apath>(?:~|\.{1,2})?/[A-Za-z0-9_.@+~-]+(?:/[A-Za-z0-9_.@+~-]+)*)
    | (?P<rpath>[A-Za-z0-9_@+-][A-Za-z0-9_.@+~-]*(?:/[A-Za-z0-9_.@+~-]+)*/[A-Za-z0-9_@+~-][A-Za-z0-9_.@+~-]*\.[A-Za-z][A-Za-z0-9]{0,9}\b)
    | (?P<record>\#[A-Z]{1,3}[0-9]{4,}\b|\b[a-z][a-z0-9]*(?:_[a-z][a-z0-9]*)*_[0-9]{3,}\b)
    | (?P<issue>(?:\b[A-Za-z][\w.-]*/[\w.-]+)?\#[0-9]{1,6}\b|\b(?:GH|PR)-[0-9]{1,6}\b)
    | (?P<error>\b[A-Z][A-Za-z0-9]*(?:Error|Exception|Panic)\b|\bE[0-9]{4}\b|\bE(?:NOENT|ACCES|PERM|EXIST|NOTDIR|ISDIR|ADDRINUSE|CONNREFUSED|CONNRESET|TIMEDOUT|NOSPC|PIPE|AGAIN|BUSY|NOTEMPTY|INVAL|MFILE)\b)
    | (?P<hash>\b[0-9A-Fa-f]{7,}\b)
    | (?P<code>\b[A-Z0-9]{5,12}\b)
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

/// The identifier a regex match stands for, with its kind, if it passes its kind's checks.
fn accept_identifier<'t>(text: &'t str, caps: &Captures<'t>) -> Option<(IdKind, &'t str)> {
    let whole = caps.get(0)?;
    let after = text[whole.end()..].chars().next();
    let has_digit_and_letter = |s: &str| {
        s.bytes().any(|b| b.is_ascii_digit()) && s.bytes().any(|b| b.is_ascii_alphabetic())
    };
    if let Some(m) = caps.name("func") {
        let name = m.as_str().trim_matches('`');
        return code_name(name).then_some((IdKind::Function, name));
    }
    if let Some(m) = caps.name("url") {
        let s = trim_trailing(m.as_str());
        return (s.len() > m.as_str().find("://")? + 3).then_some((IdKind::Url, s));
    }
    if let Some(m) = caps.name("uuid") {
        return Some((IdKind::Uuid, m.as_str()));
    }
    if let Some(m) = caps.name("ip") {
        return Some((IdKind::Host, m.as_str()));
    }
    if let Some(m) = caps.name("hostport") {
        let s = m.as_str();
        let host = s.rsplit_once(':').map_or(s, |(h, _)| h);
        return (host == "localhost" || host_ok(host, false)).then_some((IdKind::Host, s));
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
        return (ok && s.len() > 2).then_some((IdKind::Path, s));
    }
    if let Some(m) = caps.name("rpath") {
        return Some((IdKind::Path, m.as_str()));
    }
    if let Some(m) = caps.name("record") {
        return Some((IdKind::Record, m.as_str()));
    }
    if let Some(m) = caps.name("issue") {
        // `#123` inside a word or a colour (`#fff`) is not an issue.
        let glued = prev_char(text, m.start()).is_some_and(|c| c.is_alphanumeric() || c == '&');
        return (!glued).then_some((IdKind::Issue, m.as_str()));
    }
    if let Some(m) = caps.name("error") {
        return Some((IdKind::Error, m.as_str()));
    }
    if let Some(m) = caps.name("hash") {
        let s = m.as_str();
        return has_digit_and_letter(s).then_some((IdKind::Hash, s));
    }
    if let Some(m) = caps.name("code") {
        let s = m.as_str();
        return has_digit_and_letter(s).then_some((IdKind::Record, s));
    }
    if let Some(m) = caps.name("host") {
        let s = trim_trailing(m.as_str());
        let host = s.split('/').next().unwrap_or(s);
        return host_ok(host, after == Some('(')).then_some((IdKind::Host, s));
    }
    None
}

/// Every identifier of `text` with its kind, in order of appearance (repeats included).
pub fn find_identifiers(text: &str) -> Vec<(IdKind, &str)> {
    IDENT_RE
        .captures_iter(text)
        .filter_map(|caps| accept_identifier(text, &caps))
        .collect()
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

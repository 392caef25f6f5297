//! Finding opaque identifiers (UUIDs, hashes, URLs, paths, hosts, IPs, host:port) in text, so
//! that a strict summary can keep them verbatim.

use std::sync::LazyLock;

use regex::Captures;
use regex::Regex;

use super::text::{EXT_RE, Ordered, re};

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
pub(super) fn scan_identifiers(text: &str, out: &mut Ordered) {
    for caps in IDENT_RE.captures_iter(text) {
        if let Some(id) = accept_identifier(text, &caps)
            && !out.contains(id)
        {
            out.push(id.to_string());
        }
    }
}

#[cfg(test)]
#[path = "identifiers_tests.rs"]
mod tests;

//! Identifier finding through the summarizer: every kind kept verbatim, plain words and code
//! left out, and `IdentifierPolicy::Off`.

use crate::services::summarize::test_support::{request, rich_span, run, say, section, user};
use crate::services::summarize::{BuiltinSummarizer, IdentifierPolicy};
use crate::services::tokens::Estimate;

#[test]
fn every_identifier_kind_survives_verbatim_under_a_generous_budget() {
    let ids = [
        "7c9e6679-7425-40de-944b-e07fc1f90ae7", // uuid (tool result)
        "3f2a9c1d",                             // hash (thinking)
        "https://docs.example.com/queue?v=2",   // url (tool result)
        "/srv/billing/src/consumer.rs",         // absolute path (tool-call argument)
        "./config/queue.toml",                  // ./ relative path (command string)
        "services/billing/Cargo.toml",          // dir/file.ext
        "mq.internal.example.com",              // host name
        "10.20.30.40:5672",                     // ip:port
        "api.example.com:8443",                 // host:port
    ];
    let mut span = rich_span();
    span.push(say(
        "Checked ../shared/notes.md, server 192.168.1.7 and db.eu-west-1.rds.amazonaws.com.",
    ));
    let prev = "## Exact identifiers\n- `req_01HZX-opaque`\n\nRelease tag deadbeef42 built.";
    let s = run(&span, Some(prev), 100_000);
    let listed = section(&s.text, "Exact identifiers");
    for id in ids.iter().chain(&[
        "../shared/notes.md",
        "192.168.1.7",
        "db.eu-west-1.rds.amazonaws.com",
        "req_01HZX-opaque",
        "deadbeef42",
    ]) {
        assert!(
            listed.iter().any(|l| l == id),
            "{id} not listed in:\n{}",
            s.text
        );
    }
    assert_eq!(s.identifiers_found, s.identifiers_kept, "{}", s.text);
    // The span's own identifiers and the carried-over ones are counted apart.
    assert_eq!(s.identifiers_found + s.carried_found, listed.len());
    // `req_01HZX-opaque`, `deadbeef42`, and the line after the blank one, which the previous
    // summary's identifier section still holds.
    assert_eq!(s.carried_found, 3, "{}", s.text);
    // The span's own come first; the previous summary's follow.
    let pos = |id: &str| listed.iter().position(|l| l == id).expect("listed");
    assert!(pos("/srv/billing/src/consumer.rs") < pos("req_01HZX-opaque"));
    assert!(pos("7c9e6679-7425-40de-944b-e07fc1f90ae7") < pos("deadbeef42"));
}

#[test]
fn plain_words_numbers_and_code_are_not_identifiers() {
    let span = [
        user(
            "Count to 1234567 and then write deadbeef. Use this.state.value, import.meta.url, chalk.dim.blue and read/write access via /mode or theme.test.ts.",
        ),
        say("Done: 20240105 items, and/or/maybe later."),
    ];
    let s = run(&span, None, 100_000);
    let listed = section(&s.text, "Exact identifiers");
    assert!(listed.is_empty(), "unexpected identifiers {listed:?}");
    assert_eq!(s.identifiers_found, 0);
}

#[test]
fn policy_off_lists_no_identifiers() {
    let span = rich_span();
    let mut req = request(&span, None, 100_000);
    req.identifier_policy = IdentifierPolicy::Off;
    let s = BuiltinSummarizer
        .summarize_now(&req, &Estimate)
        .expect("summarize");
    assert!(section(&s.text, "Exact identifiers").is_empty());
    assert!(s.identifiers_found > 0);
}

/// The identifier pass before it searched one multi-pattern DFA: the same kinds as one
/// alternation of named groups, resolved per match (`captures_iter`). Kept here as the oracle
/// the faster pass must equal.
mod oracle {
    use std::sync::LazyLock;

    use regex::{Captures, Regex};

    use super::super::{Found, PATTERNS, accept_identifier};
    use crate::services::summarize::IdKind;

    const NAMES: [&str; 13] = [
        "func", "url", "uuid", "ip", "hostport", "apath", "rpath", "record", "issue", "error",
        "hash", "code", "host",
    ];

    static ALTERNATION: LazyLock<Regex> = LazyLock::new(|| {
        let groups: Vec<String> = NAMES
            .iter()
            .zip(PATTERNS)
            .map(|(n, p)| format!("(?P<{n}>{p})"))
            .collect();
        Regex::new(&groups.join("|")).unwrap()
    });

    fn accept<'t>(text: &'t str, caps: &Captures<'t>) -> Option<(IdKind, &'t str)> {
        let (i, m) = NAMES
            .iter()
            .enumerate()
            .find_map(|(i, n)| caps.name(n).map(|m| (i, m)))?;
        accept_identifier(text, super::super::FOUND[i], m.start(), m.end())
    }

    pub(crate) fn find(text: &str) -> Vec<(IdKind, &str)> {
        ALTERNATION
            .captures_iter(text)
            .filter_map(|c| accept(text, &c))
            .collect()
    }

    /// `Found` is what the alternation's group order says.
    #[test]
    fn names_follow_the_patterns() {
        assert_eq!(super::super::FOUND[0], Found::Func);
        assert_eq!(super::super::FOUND[12], Found::Host);
    }
}

/// Every string of every shared transcript (message texts, tool arguments, results, ids): the
/// one-DFA pass finds exactly what the alternation of capture groups found, in order.
#[test]
fn the_dfa_pass_equals_the_capture_pass_on_every_shared_transcript() {
    fn strings(v: &serde_json::Value, out: &mut Vec<String>) {
        match v {
            serde_json::Value::String(s) => out.push(s.clone()),
            serde_json::Value::Array(a) => a.iter().for_each(|x| strings(x, out)),
            serde_json::Value::Object(m) => m.values().for_each(|x| strings(x, out)),
            _ => {}
        }
    }
    let shared = match std::env::var_os("CTXHOST_SHARED") {
        Some(p) => std::path::PathBuf::from(p),
        None => std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../shared"),
    };
    let dir = shared.join("data/transcripts");
    let mut texts = Vec::new();
    for entry in std::fs::read_dir(&dir).unwrap() {
        let raw = std::fs::read_to_string(entry.unwrap().path()).unwrap();
        // JSONL lines, a whole-file JSON document, or plain text: each string as the host sees it.
        match serde_json::from_str::<serde_json::Value>(&raw) {
            Ok(v) => strings(&v, &mut texts),
            Err(_) => {
                for line in raw.lines() {
                    match serde_json::from_str::<serde_json::Value>(line) {
                        Ok(v) => strings(&v, &mut texts),
                        Err(_) => texts.push(line.to_owned()),
                    }
                }
            }
        }
    }
    let mut found = 0usize;
    for t in &texts {
        let ours = super::find_identifiers(t);
        assert_eq!(ours, oracle::find(t), "in {t:?}");
        found += ours.len();
    }
    // The corpus exercises the pass (thousands of identifiers, non-ASCII text among them).
    assert!(
        found > 10_000,
        "{found} identifiers in {} texts",
        texts.len()
    );
    assert!(texts.iter().any(|t| !t.is_ascii()));
}

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

//! The span heuristics: the latest unresolved request and the sentences each section picks.

use serde_json::json;

use crate::summarize::test_support::{call, result, rich_span, run, say, section};

#[test]
fn the_latest_unresolved_request_is_detected_and_absent_once_answered() {
    let mut span = rich_span();
    let s = run(&span, None, 100_000);
    assert_eq!(
        section(&s.text, "Latest unresolved request"),
        vec!["Does it also handle dead letters?"]
    );
    assert_eq!(
        section(&s.text, "Pending user asks"),
        vec!["Does it also handle dead letters?"]
    );
    // Working on it (tool calls) does not answer it.
    span.push(call("z", "read", json!({"path":"dlq.rs"})));
    span.push(result("z", "read", "…", false));
    let s = run(&span, None, 100_000);
    assert_eq!(section(&s.text, "Latest unresolved request").len(), 1);
    span.push(say("Yes: dead letters go to the dlq exchange."));
    let s = run(&span, None, 100_000);
    assert!(
        section(&s.text, "Latest unresolved request").is_empty(),
        "{}",
        s.text
    );
    assert!(section(&s.text, "Pending user asks").is_empty());
}

#[test]
fn heuristic_sections_pick_the_right_sentences() {
    let s = run(&rich_span(), None, 100_000);
    assert_eq!(
        section(&s.text, "Goal"),
        vec![
            "Please migrate the billing service to the new queue. You must never touch the prod database directly. Only use the staging cluster."
        ]
    );
    assert_eq!(
        section(&s.text, "Constraints"),
        vec![
            "You must never touch the prod database directly.",
            "Only use the staging cluster."
        ]
    );
    let decisions = section(&s.text, "Decisions");
    assert_eq!(
        decisions,
        vec![
            "I'll start by reading the current consumer.",
            "Let's switch to the batched consumer instead of the polling loop.",
            "We decided to keep retries at 3."
        ]
    );
    assert_eq!(
        section(&s.text, "Open TODOs"),
        vec![
            "run the integration tests",
            "update the runbook",
            "TODO: drop the legacy endpoint at api.example.com:8443"
        ]
    );
    assert_eq!(
        section(&s.text, "Tool failures"),
        vec!["edit: Error: oldText not found in file"]
    );
}

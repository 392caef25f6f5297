//! The span heuristics: the latest unresolved request and the sentences each section picks.

use serde_json::json;

use crate::services::summarize::test_support::{call, result, rich_span, run, say, section, user};

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
        // "I'll start by reading …" announces a step; it is not a decision.
        vec![
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

#[test]
fn the_thread_is_carried_latest_goal_reasons_done_failures_and_next_steps() {
    let span = [
        user("Set up the billing service for customer mia_li_3668."),
        say("Done: the service is set up."),
        user("<ide_opened_file>The user opened src/billing.ts</ide_opened_file>"),
        user(
            "Now fix issue #151: the invoice total is wrong for TypeError cases in `compute_total`.",
        ),
        say("We'll use integer cents because floats lose precision. I'll run the tests."),
        call("t1", "bash", json!({"command": "npm test"})),
        result(
            "t1",
            "bash",
            "> billing@1.0.0 test\n> jest\n\nTypeError: Cannot read properties of undefined (reading 'cents')\n    at compute_total (src/billing.ts:42)",
            true,
        ),
        call(
            "e1",
            "edit",
            json!({"path": "src/billing.ts", "oldText": "a", "newText": "b"}),
        ),
        result("e1", "edit", "ok", false),
        say("Next I'll rerun the suite."),
    ];
    let s = run(&span, Some("## Goal\n- Set up billing\n"), 100_000);
    let goal = section(&s.text, "Goal");
    assert!(goal[0].starts_with("Now fix issue #151"), "{}", s.text);
    assert!(
        goal.iter().all(|g| !g.contains("ide_opened_file")),
        "{}",
        s.text
    );
    assert!(
        goal.iter().any(|g| g == "Earlier goal: Set up billing"),
        "{}",
        s.text
    );
    assert_eq!(
        section(&s.text, "Decisions"),
        vec!["We'll use integer cents because floats lose precision."]
    );
    assert_eq!(
        section(&s.text, "Done"),
        vec![
            "answered: Done: the service is set up.",
            "edited src/billing.ts"
        ]
    );
    let failures = section(&s.text, "Tool failures");
    assert_eq!(
        failures,
        vec!["bash `npm test`: TypeError: Cannot read properties of undefined (reading 'cents')"]
    );
    assert!(
        section(&s.text, "Open TODOs").contains(&"next: Next I'll rerun the suite.".into()),
        "{}",
        s.text
    );
    let ids = section(&s.text, "Exact identifiers");
    for id in [
        "mia_li_3668",
        "#151",
        "TypeError",
        "compute_total",
        "src/billing.ts",
    ] {
        assert!(ids.iter().any(|l| l == id), "{id} missing: {}", s.text);
    }
    assert_eq!(s.identifiers_found, s.identifiers_kept);
}

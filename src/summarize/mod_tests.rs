use std::sync::Arc;

use serde_json::{Value, json};

use super::*;
use crate::tokens::Estimate;

fn msg(v: Value) -> Arc<Message> {
    Arc::new(serde_json::from_value::<Message>(v).expect("message json"))
}

fn user(text: &str) -> Arc<Message> {
    msg(json!({"role":"user","content":[{"type":"text","text":text}],"timestamp":1}))
}

fn say(text: &str) -> Arc<Message> {
    msg(json!({"role":"assistant","content":[{"type":"text","text":text}],"stopReason":"stop"}))
}

fn call(id: &str, name: &str, args: Value) -> Arc<Message> {
    msg(
        json!({"role":"assistant","content":[{"type":"toolCall","id":id,"name":name,"arguments":args}],
               "stopReason":"toolUse"}),
    )
}

fn result(id: &str, name: &str, text: &str, is_error: bool) -> Arc<Message> {
    msg(json!({"role":"toolResult","toolCallId":id,"toolName":name,
               "content":[{"type":"text","text":text}],"isError":is_error}))
}

fn request<'a>(
    messages: &'a [Arc<Message>],
    previous: Option<&'a str>,
    max_tokens: u64,
) -> SummaryRequest<'a> {
    SummaryRequest {
        messages,
        previous_summary: previous,
        max_tokens,
        instructions: None,
        identifier_policy: IdentifierPolicy::Strict,
    }
}

fn run(messages: &[Arc<Message>], previous: Option<&str>, max_tokens: u64) -> Summary {
    BuiltinSummarizer
        .summarize(&request(messages, previous, max_tokens), &Estimate)
        .expect("summarize")
}

/// The `- ` items under `## heading`.
fn section(text: &str, heading: &str) -> Vec<String> {
    let mut inside = false;
    let mut out = Vec::new();
    for line in text.lines() {
        if let Some(h) = line.strip_prefix("## ") {
            inside = h == heading;
        } else if inside && let Some(item) = line.strip_prefix("- ") {
            out.push(item.to_string());
        }
    }
    out
}

/// A realistic span exercising every section.
fn rich_span() -> Vec<Arc<Message>> {
    vec![
        user(
            "Please migrate the billing service to the new queue. You must never touch the prod database directly. Only use the staging cluster.",
        ),
        msg(json!({"role":"assistant","content":[
            {"type":"thinking","thinking":"The queue lives at amqp host mq.internal.example.com; commit 3f2a9c1d is the last good one."},
            {"type":"text","text":"I'll start by reading the current consumer."},
            {"type":"toolCall","id":"c1","name":"read","arguments":{"path":"/srv/billing/src/consumer.rs"}}],
            "stopReason":"toolUse"})),
        result(
            "c1",
            "read",
            "use crate::queue; // see https://docs.example.com/queue?v=2 for details\n",
            false,
        ),
        call(
            "c2",
            "bash",
            json!({"command":"cat ./config/queue.toml | grep host && ls services/billing/Cargo.toml"}),
        ),
        result(
            "c2",
            "bash",
            "host = \"10.20.30.40:5672\"\nrequest 7c9e6679-7425-40de-944b-e07fc1f90ae7 stuck",
            false,
        ),
        call(
            "c3",
            "edit",
            json!({"file_path":"/srv/billing/src/consumer.rs","oldText":"a","newText":"b"}),
        ),
        result(
            "c3",
            "edit",
            "Error: oldText not found in file\nsecond line",
            true,
        ),
        say(
            "Let's switch to the batched consumer instead of the polling loop. We decided to keep retries at 3.\n\nNext steps:\n- run the integration tests\n- [ ] update the runbook\n\nTODO: drop the legacy endpoint at api.example.com:8443",
        ),
        user("Does it also handle dead letters?"),
    ]
}

#[test]
fn same_input_gives_byte_identical_output() {
    let span = rich_span();
    let a = run(&span, Some("## Goal\n- earlier goal"), 400);
    let b = BuiltinSummarizer::new()
        .summarize(
            &request(&span, Some("## Goal\n- earlier goal"), 400),
            &Estimate,
        )
        .expect("summarize");
    assert_eq!(a, b);
    let big_a = run(&span, None, 100_000);
    let big_b = run(&span, None, 100_000);
    assert_eq!(big_a.text, big_b.text);
}

#[test]
fn sections_appear_in_contract_order() {
    let s = run(&rich_span(), None, 100_000);
    let mut at = 0;
    for heading in SECTION_HEADINGS {
        let needle = format!("## {heading}\n");
        let pos = s.text[at..]
            .find(&needle)
            .or_else(|| {
                s.text[at..]
                    .strip_suffix(needle.trim_end())
                    .map(|p| p.len())
            })
            .unwrap_or_else(|| panic!("{heading} missing or out of order in:\n{}", s.text));
        at += pos + needle.len() - 1;
    }
}

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
    assert_eq!(s.identifiers_found, listed.len());
    // First-seen order: the previous summary first, then the span in order.
    assert_eq!(listed[0], "req_01HZX-opaque");
    let pos = |id: &str| listed.iter().position(|l| l == id).expect("listed");
    assert!(pos("/srv/billing/src/consumer.rs") < pos("7c9e6679-7425-40de-944b-e07fc1f90ae7"));
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

/// A span with many identifiers and much prose, for budget tests.
fn heavy_span() -> Vec<Arc<Message>> {
    let mut span = vec![user(
        "Goal: rebuild the ingest pipeline so that every shard reports to the coordinator.",
    )];
    for i in 0..40 {
        span.push(say(&format!(
            "I'll move shard {i} behind the coordinator instead of the old fan-out, which we decided after the outage review because the old path dropped messages under load."
        )));
        span.push(call(
            &format!("c{i}"),
            "read",
            json!({"path": format!("/data/shards/shard-{i:03}/manifest.json")}),
        ));
        span.push(result(
            &format!("c{i}"),
            "read",
            &format!(
                "owner node-{i}.cluster.internal, build {:08x}9a",
                0x1a2b_0000 + i
            ),
            false,
        ));
    }
    span
}

#[test]
fn never_exceeds_the_budget_and_says_how_many_identifiers_were_left_out() {
    let span = heavy_span();
    let full = run(&span, None, 1_000_000);
    assert!(full.identifiers_found >= 120, "{}", full.identifiers_found);
    let mut saw_note = false;
    for max in (0..=600).step_by(7) {
        let s = run(&span, None, max);
        assert!(s.tokens <= max, "{} > {max}", s.tokens);
        assert_eq!(s.tokens, Estimate.count_text(&s.text));
        let listed = section(&s.text, "Exact identifiers").len();
        if listed > 0 && listed < s.identifiers_found {
            let note = format!(
                "(+{} more identifiers omitted to fit the budget)",
                s.identifiers_found - listed
            );
            assert!(s.text.contains(&note), "budget {max}:\n{}", s.text);
            saw_note = true;
        }
        assert!(s.identifiers_kept <= s.identifiers_found);
    }
    assert!(saw_note);
    assert_eq!(run(&span, None, 0).text, "");
}

/// Counts one token per whitespace-separated word (a counter unlike the estimate).
#[derive(Debug)]
struct Words;

impl TokenCounter for Words {
    fn name(&self) -> &'static str {
        "words"
    }
    fn count_text(&self, text: &str) -> u64 {
        text.split_whitespace().count() as u64
    }
}

#[test]
fn the_budget_holds_for_any_counter() {
    let span = heavy_span();
    for max in (0..=400).step_by(13) {
        let s = BuiltinSummarizer
            .summarize(&request(&span, None, max), &Words)
            .expect("summarize");
        assert!(s.tokens <= max && Words.count_text(&s.text) <= max);
    }
}

#[test]
fn other_sections_are_shortened_before_identifiers() {
    let span = heavy_span();
    let full = run(&span, None, 1_000_000);
    let full_decisions = section(&full.text, "Decisions").len();
    assert!(full_decisions >= 10);
    // Enough for the identifiers and headings, not for the decisions as well.
    let ids_tokens = Estimate.count_text(&section(&full.text, "Exact identifiers").join("\n- "));
    let budget = ids_tokens + 150;
    assert!(budget < full.tokens);
    let s = run(&span, None, budget);
    assert!(s.tokens <= budget);
    assert_eq!(s.identifiers_kept, s.identifiers_found, "{}", s.text);
    assert!(!s.text.contains("identifiers omitted"));
    assert!(
        section(&s.text, "Decisions").len() < full_decisions,
        "{}",
        s.text
    );
    // The goal outlives the decisions.
    assert_eq!(section(&s.text, "Goal").len(), 1);
}

#[test]
fn a_previous_summary_is_folded_through_three_generations() {
    let first = [
        user(
            "Port the user-message selector to the new theme system in packages/tui/src/selector.ts.",
        ),
        call("a", "read", json!({"path":"packages/tui/src/theme.ts"})),
        result(
            "a",
            "read",
            "export const theme = load('7f3e2d1c9b');",
            false,
        ),
        say("I'll mirror the oauth selector."),
    ];
    let second = [
        user("Now also fix the flaky test at https://ci.example.com/run/991."),
        say("Fixed."),
    ];
    let third = [user("Ship it to 10.0.0.9 please."), say("Shipped.")];

    let one = run(&first, None, 2_000);
    let two = run(&second, Some(&one.text), 2_000);
    let three = run(&third, Some(&two.text), 2_000);
    let goal = section(&three.text, "Goal");
    assert_eq!(goal.len(), 1, "{}", three.text);
    assert!(goal[0].starts_with("Port the user-message selector"));
    let ids = section(&three.text, "Exact identifiers");
    for id in [
        "packages/tui/src/selector.ts",
        "packages/tui/src/theme.ts",
        "7f3e2d1c9b",
        "https://ci.example.com/run/991",
        "10.0.0.9",
    ] {
        assert!(ids.iter().any(|l| l == id), "{id} lost:\n{}", three.text);
    }
    assert_eq!(three.read_files, vec!["packages/tui/src/theme.ts"]);
    assert!(section(&three.text, "Decisions").contains(&"I'll mirror the oauth selector.".into()));
    // Folding is stable: re-folding an empty span gives the same sections.
    let again = run(&[], Some(&three.text), 2_000);
    assert_eq!(again.text, three.text);
}

#[test]
fn unsectioned_and_llm_style_previous_text_survives() {
    let prev = "The user is migrating from Postgres 12 to 16.\n\n## Progress\n### Done\n- [x] dumped the schema\n## Key Decisions\n- Use pg_upgrade --link\n## Next Steps\n1. Verify replicas";
    let s = run(
        &[user("carry on with the upgrade please")],
        Some(prev),
        5_000,
    );
    let earlier = section(&s.text, "Earlier context");
    assert!(
        earlier.contains(&"The user is migrating from Postgres 12 to 16.".into()),
        "{}",
        s.text
    );
    assert!(earlier.iter().any(|e| e.contains("dumped the schema")));
    assert!(section(&s.text, "Decisions").contains(&"Use pg_upgrade --link".into()));
    assert!(section(&s.text, "Open TODOs").contains(&"Verify replicas".into()));
    // No goal in the previous text: the span's first request becomes it.
    assert_eq!(
        section(&s.text, "Goal"),
        vec!["carry on with the upgrade please"]
    );
}

#[test]
fn files_are_classified_read_or_modified() {
    let span = [
        call("1", "read", json!({"path":"src/a.rs"})),
        call(
            "2",
            "bash",
            json!({"command":"cat src/b.rs | grep -n 'fn main' src/c.rs && sed -i 's/x/y/' src/z.rs 2>/dev/null"}),
        ),
        call("3", "Grep", json!({"pattern":"foo","path":"src/"})),
        call(
            "4",
            "edit",
            json!({"file_path":"src/a.rs","old_string":"x","new_string":"y"}),
        ),
        call("5", "write", json!({"path":"docs/new.md","content":"hi"})),
        call(
            "6",
            "apply_patch",
            json!({"input":"*** Begin Patch\n*** Update File: src/d.rs\n@@\n-a\n+b\n*** End Patch"}),
        ),
        call(
            "7",
            "str_replace_based_edit_tool",
            json!({"command":"view","path":"/etc/hosts"}),
        ),
        call(
            "8",
            "str_replace_based_edit_tool",
            json!({"command":"str_replace","path":"src/e.rs"}),
        ),
        call("9", "MultiEdit", json!({"file_path":"src/f.rs","edits":[]})),
    ];
    let s = run(&span, None, 100_000);
    assert_eq!(
        s.read_files,
        vec!["src/b.rs", "src/c.rs", "src/", "/etc/hosts"]
    );
    assert_eq!(
        s.modified_files,
        vec![
            "src/a.rs",
            "docs/new.md",
            "src/d.rs",
            "src/e.rs",
            "src/f.rs"
        ]
    );
    let files = section(&s.text, "Files read / modified");
    assert!(files.contains(&"modified: src/a.rs".into()));
    assert!(files.contains(&"read: src/b.rs".into()));
    assert!(
        !files.contains(&"read: src/a.rs".into()),
        "modified wins: {files:?}"
    );
}

#[test]
fn tool_failures_are_listed_with_their_first_line_at_most_eight() {
    let mut span = vec![
        call("x", "bash", json!({"command":"make"})),
        msg(
            json!({"role":"toolResult","toolCallId":"x","content":"\n\nmake: *** No rule to make target\nmore","isError":true}),
        ),
    ];
    for i in 0..9 {
        span.push(call(&format!("r{i}"), "read", json!({"path":"a.rs"})));
        span.push(result(
            &format!("r{i}"),
            "read",
            &format!("ENOENT {i}\nstack"),
            true,
        ));
    }
    span.push(result("ok", "read", "fine", false));
    let failures = section(&run(&span, None, 100_000).text, "Tool failures");
    assert_eq!(failures.len(), 8);
    assert_eq!(failures[0], "read: ENOENT 1");
    assert_eq!(failures[7], "read: ENOENT 8");

    let two = [span[0].clone(), span[1].clone()];
    let failures = section(&run(&two, None, 100_000).text, "Tool failures");
    assert_eq!(failures, vec!["bash: make: *** No rule to make target"]);
}

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

#[test]
fn todo_tool_calls_give_their_open_items() {
    let span = [
        call(
            "t1",
            "TodoWrite",
            json!({"todos":[{"content":"old","status":"pending"}]}),
        ),
        call(
            "t2",
            "TodoWrite",
            json!({"todos":[
            {"content":"write parser","status":"completed"},
            {"content":"wire CLI","status":"in_progress"},
            {"content":"docs","status":"pending"}]}),
        ),
    ];
    let s = run(&span, None, 100_000);
    assert_eq!(section(&s.text, "Open TODOs"), vec!["wire CLI", "docs"]);
}

#[test]
fn focus_instructions_lead_the_summary() {
    let span = rich_span();
    let mut req = request(&span, None, 100_000);
    req.instructions = Some("keep the queue details");
    let s = BuiltinSummarizer
        .summarize(&req, &Estimate)
        .expect("summarize");
    assert!(
        s.text
            .starts_with("Focus: keep the queue details\n\n## Goal\n"),
        "{}",
        s.text
    );
}

#[test]
fn long_items_are_clipped_with_an_ellipsis() {
    let long = format!("I'll {}", "refactor the module carefully ".repeat(20));
    let s = run(&[say(&long)], None, 100_000);
    let d = section(&s.text, "Decisions");
    assert_eq!(d.len(), 1);
    assert!(
        d[0].ends_with('…') && d[0].chars().count() <= 180,
        "{}",
        d[0]
    );
}

#[test]
fn policy_off_lists_no_identifiers() {
    let span = rich_span();
    let mut req = request(&span, None, 100_000);
    req.identifier_policy = IdentifierPolicy::Off;
    let s = BuiltinSummarizer
        .summarize(&req, &Estimate)
        .expect("summarize");
    assert!(section(&s.text, "Exact identifiers").is_empty());
    assert!(s.identifiers_found > 0);
}

#[test]
fn tiny_budgets_give_a_prefix_of_the_skeleton() {
    let span = rich_span();
    let s = run(&span, None, 3);
    assert!(s.tokens <= 3);
    assert!(
        "## Goal".starts_with(&s.text) || s.text.starts_with("## Goal"),
        "{}",
        s.text
    );
}

/// A sanity look at a real session: `cargo test --lib summarize -- --ignored --nocapture`
/// prints the summary of its first 200 messages, then checks the whole session's budget.
#[test]
#[ignore]
fn real_transcript_span() {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../shared/data/transcripts/pimono-large-session.jsonl");
    let text = std::fs::read_to_string(path).expect("transcript");
    let messages: Vec<Arc<Message>> = text
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|v| v["type"] == "message")
        .filter_map(|v| serde_json::from_value::<Message>(v["message"].clone()).ok())
        .map(Arc::new)
        .collect();
    assert!(messages.len() > 200);
    let s = run(&messages[..200], None, 1_500);
    println!(
        "{}\n---\nidentifiers found/kept {}/{}, tokens {}, read {}, modified {}",
        s.text,
        s.identifiers_found,
        s.identifiers_kept,
        s.tokens,
        s.read_files.len(),
        s.modified_files.len()
    );
    assert!(s.tokens <= 1_500);
    let whole = run(&messages, Some(&s.text), 1_500);
    assert!(whole.tokens <= 1_500);
    assert!(
        whole
            .text
            .contains("read packages/coding-agent/docs/theme.md")
    );
}

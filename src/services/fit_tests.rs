use super::*;
use crate::services::tokens::{Estimate, TokenCounter};
use serde_json::json;

fn cache() -> TokenCache {
    TokenCache::new(Arc::new(Estimate))
}

fn msg(v: serde_json::Value) -> Arc<Message> {
    Arc::new(serde_json::from_value(v).expect("message"))
}

fn session() -> Vec<Arc<Message>> {
    vec![
        msg(json!({"id":"s","role":"compactionSummary","summary":"earlier work","tokensBefore":9})),
        msg(json!({"id":"u1","role":"user","content":"x".repeat(400)})),
        msg(
            json!({"id":"a1","role":"assistant","content":[{"type":"toolCall","id":"c1","name":"read","arguments":{}}]}),
        ),
        msg(json!({"id":"r1","role":"toolResult","toolCallId":"c1","content":"y".repeat(40_000)})),
        msg(json!({"id":"u2","role":"user","content":"what now?"})),
    ]
}

#[test]
fn a_context_that_fits_is_returned_as_is() {
    let msgs = session();
    let (out, report) = fit_to_budget(&msgs, 1_000_000, &cache());
    assert_eq!(report, FitReport::default());
    assert!(out.iter().zip(&msgs).all(|(a, b)| Arc::ptr_eq(a, b)));
}

#[test]
fn oversized_tool_results_are_trimmed_before_anything_is_dropped() {
    let c = cache();
    let (out, report) = fit_to_budget(&session(), 2_000, &c);
    assert!(c.messages(&out) <= 2_000);
    assert_eq!(report.trimmed_results, 1);
    assert_eq!(report.dropped_messages, 0);
    let ids: Vec<_> = out.iter().map(|m| m.id.as_str()).collect();
    assert_eq!(ids, ["s", "u1", "a1", "r1", "u2"]);
    assert!(
        out[3]
            .text()
            .contains("characters) cut to fit the context budget")
    );
}

#[test]
fn oldest_groups_go_whole_and_the_summary_stays() {
    let c = cache();
    // Even trimmed, u1 (100 tokens) and the a1/r1 group (~70) cannot stay in 60.
    let (out, report) = fit_to_budget(&session(), 60, &c);
    assert!(c.messages(&out) <= 60);
    assert_eq!(report.dropped_messages, 3);
    let ids: Vec<_> = out.iter().map(|m| m.id.as_str()).collect();
    assert_eq!(ids, ["s", "u2"]);
    assert!(crate::services::pairing::is_well_paired(&out));
}

#[test]
fn the_newest_message_is_cut_when_it_alone_is_too_big() {
    let c = cache();
    let big = vec![msg(
        json!({"id":"u","role":"user","content":"z".repeat(10_000)}),
    )];
    let (out, report) = fit_to_budget(&big, 100, &c);
    assert!(report.cut_newest);
    assert!(c.messages(&out) <= 100);
    assert_eq!(out[0].id, "u");
}

#[test]
fn trim_text_never_exceeds_the_budget() {
    let text = "word ".repeat(3_000);
    for max in [0u64, 1, 5, 17, 30, 100, 1_000, 5_000] {
        let t = trim_text(&text, max, |s| Estimate.count_text(s));
        assert!(Estimate.count_text(&t) <= max, "max {max}");
    }
}

/// A session whose newest turn alone is far over the budget: a request, then twelve tool
/// groups of about 500 tokens each.
fn long_turn() -> Vec<Arc<Message>> {
    let mut v = vec![
        msg(
            json!({"id":"s","role":"compactionSummary","summary":"## Goal\n- ship it","tokensBefore":9}),
        ),
        msg(json!({"id":"u0","role":"user","content":"an older question"})),
        msg(
            json!({"id":"a0","role":"assistant","content":[{"type":"text","text":"an older answer"}]}),
        ),
        msg(json!({"id":"u1","role":"user","content":"Fix the failing build, please."})),
    ];
    for i in 0..12 {
        v.push(msg(json!({"id":format!("a{}", i + 1),"role":"assistant","content":[
            {"type":"toolCall","id":format!("c{i}"),"name":"bash","arguments":{"command":"npm test"}}]})));
        v.push(msg(json!({"id":format!("r{i}"),"role":"toolResult","toolCallId":format!("c{i}"),
            "toolName":"bash","isError":true,
            "content":format!("npm WARN banner\n{}\nError: step {i} failed", "log line\n".repeat(220))})));
    }
    v
}

#[test]
fn the_request_and_the_summary_survive_a_turn_too_big_for_the_budget() {
    let c = cache();
    for budget in [120u64, 300, 600, 1_200] {
        let (out, report) = fit_to_budget(&long_turn(), budget, &c);
        let ids: Vec<_> = out.iter().map(|m| m.id.as_str()).collect();
        assert!(c.messages(&out) <= budget, "{budget}: {ids:?}");
        assert_eq!(ids[0], "s", "{budget}: {ids:?}");
        assert!(ids.contains(&"u1"), "{budget}: {ids:?}");
        assert!(
            ids.contains(&"r11"),
            "the newest result stays: {budget}: {ids:?}"
        );
        assert!(report.cut_newest);
        // History goes before the turn is cut.
        assert!(!ids.contains(&"u0"), "{budget}: {ids:?}");
        assert!(crate::services::pairing::is_well_paired(&out));
    }
}

#[test]
fn oldest_results_of_the_turn_become_stubs_naming_their_error_line() {
    let c = cache();
    let (out, report) = fit_to_budget(&long_turn(), 1_200, &c);
    assert!(report.stubbed_results > 0, "{report:?}");
    let first = out
        .iter()
        .find(|m| m.id == "r0")
        .expect("r0 kept as a stub");
    assert!(
        first.text().contains("Error: step 0 failed"),
        "{}",
        first.text()
    );
    assert!(!first.text().contains("npm WARN"), "{}", first.text());
    // The newest result is trimmed head and tail, not stubbed.
    let last = out.iter().find(|m| m.id == "r11").expect("r11");
    assert!(last.text().contains("Error: step 11 failed"));
}

#[test]
fn a_summary_larger_than_a_third_of_the_budget_is_trimmed_not_dropped() {
    let c = cache();
    let mut msgs = session();
    msgs[0] = msg(
        json!({"id":"s","role":"compactionSummary","summary":"fact ".repeat(2_000),"tokensBefore":9}),
    );
    let (out, report) = fit_to_budget(&msgs, 300, &c);
    assert!(c.messages(&out) <= 300);
    assert!(report.trimmed_summary);
    assert_eq!(out[0].id, "s");
    assert_eq!(out.last().map(|m| m.id.as_str()), Some("u2"));
}

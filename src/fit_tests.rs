use super::*;
use crate::tokens::{Estimate, TokenCounter};
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
            .contains("characters trimmed to fit the context budget")
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
    assert!(crate::pairing::is_well_paired(&out));
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

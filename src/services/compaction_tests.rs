use super::*;
use crate::contract::CompactionTarget;
use crate::services::summarize::{Summary, SummaryFuture};
use crate::services::tokens::{Estimate, TokenCounter};
use serde_json::json;
use std::sync::atomic::AtomicBool;

/// A test summarizer: lists the ids it summarized, so tests can see the span.
#[derive(Debug)]
struct ListIds;

impl Summarizer for ListIds {
    fn summarize<'a>(
        &'a self,
        r: SummaryRequest<'a>,
        counter: &'a dyn TokenCounter,
    ) -> SummaryFuture<'a> {
        Box::pin(async move { list_ids(&r, counter) })
    }
}

fn list_ids(r: &SummaryRequest<'_>, counter: &dyn TokenCounter) -> crate::Result<Summary> {
    let mut text = r
        .previous_summary
        .map(|p| format!("[{p}] "))
        .unwrap_or_default();
    text.push_str(
        &r.messages
            .iter()
            .map(|m| m.id.as_str())
            .collect::<Vec<_>>()
            .join(","),
    );
    Ok(Summary {
        tokens: counter.count_text(&text),
        text,
        identifiers_found: 0,
        identifiers_kept: 0,
        carried_found: 0,
        carried_kept: 0,
        read_files: vec![],
        modified_files: vec![],
        summarizer: "test".into(),
    })
}

fn msg(v: serde_json::Value) -> Arc<Message> {
    Arc::new(serde_json::from_value(v).expect("message"))
}

/// user(400 chars = 100 tokens) / assistant call / result(400) per turn.
fn turns(n: usize) -> Vec<Arc<Message>> {
    let mut out = Vec::new();
    for t in 0..n {
        out.push(msg(
            json!({"id": format!("u{t}"), "role":"user","content":"u".repeat(400)}),
        ));
        out.push(msg(
            json!({"id": format!("a{t}"), "role":"assistant","content":[
            {"type":"toolCall","id": format!("c{t}"),"name":"read","arguments":{}}]}),
        ));
        out.push(msg(
            json!({"id": format!("r{t}"), "role":"toolResult","toolCallId": format!("c{t}"),
            "content":"r".repeat(400)}),
        ));
    }
    out
}

fn params(budget: u64, force: bool) -> CompactParams {
    CompactParams {
        session_id: "s".into(),
        session_key: None,
        token_budget: budget,
        force,
        current_token_count: 0,
        compaction_target: CompactionTarget::Budget,
        custom_instructions: None,
        runtime_settings: None,
    }
}

fn settings(keep: u64) -> CompactionSettings {
    CompactionSettings {
        keep_recent_tokens: keep,
        ..CompactionSettings::default()
    }
}

#[test]
fn cut_point_never_lands_on_a_tool_result() {
    let cache = TokenCache::new(Arc::new(Estimate));
    let msgs = turns(6);
    for keep in 1..1_500 {
        if let Some(cut) = cut_point(&msgs, keep, &cache) {
            assert_ne!(msgs[cut].role(), Role::ToolResult, "keep {keep}");
            assert!(cut > 0);
        }
    }
}

#[test]
fn compaction_summarizes_the_old_span_and_keeps_the_recent_one() {
    let cache = TokenCache::new(Arc::new(Estimate));
    let msgs = turns(6);
    let r = compact(
        &msgs,
        &cache,
        &ListIds,
        &settings(450),
        &params(2_000, true),
        &AtomicBool::new(false),
    );
    assert!(r.ok && r.compacted, "{r:?}");
    let out = r.result.unwrap();
    // 450 tokens back from the end: r5, a5, u5 (~205), r4, a4 (~310), u4 (~410), r3 (~510) ->
    // the cut moves forward off the result to u4.
    assert_eq!(out.first_kept_entry_id.as_deref(), Some("u4"));
    assert_eq!(
        out.summary.as_deref(),
        Some("u0,a0,r0,u1,a1,r1,u2,a2,r2,u3,a3,r3")
    );
    assert_eq!(out.tokens_before, cache.messages(&msgs));
    assert!(out.tokens_after.unwrap() < out.tokens_before);
}

#[test]
fn a_previous_summary_is_folded_in() {
    let cache = TokenCache::new(Arc::new(Estimate));
    let mut msgs = vec![msg(
        json!({"id":"s0","role":"compactionSummary","summary":"OLD","tokensBefore":1}),
    )];
    msgs.extend(turns(6));
    let r = compact(
        &msgs,
        &cache,
        &ListIds,
        &settings(450),
        &params(2_000, true),
        &AtomicBool::new(false),
    );
    let summary = r.result.unwrap().summary.unwrap();
    assert!(summary.starts_with("[OLD] u0,"), "{summary}");
}

#[test]
fn nothing_to_compact_says_why() {
    let cache = TokenCache::new(Arc::new(Estimate));
    let r = compact(
        &turns(2),
        &cache,
        &ListIds,
        &settings(20_000),
        &params(100_000, true),
        &AtomicBool::new(false),
    );
    assert!(r.ok && !r.compacted);
    assert!(r.reason.unwrap().starts_with("nothing to compact"));
}

#[test]
fn below_budget_without_force_does_nothing() {
    let cache = TokenCache::new(Arc::new(Estimate));
    let r = compact(
        &turns(6),
        &cache,
        &ListIds,
        &settings(450),
        &params(100_000, false),
        &AtomicBool::new(false),
    );
    assert!(!r.compacted);
    assert!(
        r.reason
            .unwrap()
            .starts_with("context is within the budget")
    );
}

#[test]
fn a_summary_larger_than_what_it_replaces_is_not_reported_as_success() {
    #[derive(Debug)]
    struct Verbose;
    impl Summarizer for Verbose {
        fn summarize<'a>(
            &'a self,
            _: SummaryRequest<'a>,
            c: &'a dyn TokenCounter,
        ) -> SummaryFuture<'a> {
            let text = "x".repeat(40_000);
            Box::pin(std::future::ready(Ok(Summary {
                tokens: c.count_text(&text),
                text,
                identifiers_found: 0,
                identifiers_kept: 0,
                carried_found: 0,
                carried_kept: 0,
                read_files: vec![],
                modified_files: vec![],
                summarizer: "test".into(),
            })))
        }
    }
    let cache = TokenCache::new(Arc::new(Estimate));
    let r = compact(
        &turns(6),
        &cache,
        &Verbose,
        &settings(450),
        &params(2_000, true),
        &AtomicBool::new(false),
    );
    assert!(r.ok && !r.compacted);
    assert!(
        r.reason
            .unwrap()
            .starts_with("compaction would not free tokens")
    );
}

#[test]
fn keep_and_summary_budgets_scale_with_the_turn_budget() {
    let s = CompactionSettings::default();
    assert_eq!(s.reserve_tokens(8_000), 2_000);
    assert_eq!(s.reserve_tokens(200_000), 20_000);
    assert_eq!(s.keep_for(6_000), 3_000);
    assert_eq!(s.keep_for(100_000), 20_000);
    assert_eq!(s.summary_tokens_for(6_000), 1_500);
}

#[test]
fn the_kept_part_leaves_room_for_the_summary() {
    // keep 1,000 of a 2,000 budget: walking back reaches the 1,600-token u1, which alone
    // leaves too little room for a 500-token summary, so the cut moves past it.
    let context = vec![
        msg(json!({"id":"u0","role":"user","content":"u".repeat(400)})),
        msg(json!({"id":"u1","role":"user","content":"v".repeat(6_400)})),
        msg(json!({"id":"a1","role":"assistant","content":[{"type":"text","text":"ok"}]})),
        msg(json!({"id":"u2","role":"user","content":"and now?"})),
    ];
    let cache = TokenCache::new(Arc::new(Estimate));
    let r = compact(
        &context,
        &cache,
        &ListIds,
        &settings(1_000),
        &params(2_000, true),
        &AtomicBool::new(false),
    );
    let outcome = r.result.expect("compacted");
    assert_eq!(outcome.first_kept_entry_id.as_deref(), Some("a1"));
    assert!(outcome.tokens_after.expect("after") <= 2_000);
}

//! Whole-summarizer properties: determinism, and a look at a real session.

use std::sync::Arc;

use serde_json::Value;

use super::BuiltinSummarizer;
use super::test_support::{request, rich_span, run};
use crate::contract::message::Message;
use crate::services::tokens::Estimate;

#[test]
fn same_input_gives_byte_identical_output() {
    let span = rich_span();
    let a = run(&span, Some("## Goal\n- earlier goal"), 400);
    let b = BuiltinSummarizer::new()
        .summarize_now(
            &request(&span, Some("## Goal\n- earlier goal"), 400),
            &Estimate,
        )
        .expect("summarize");
    assert_eq!(a, b);
    let big_a = run(&span, None, 100_000);
    let big_b = run(&span, None, 100_000);
    assert_eq!(big_a.text, big_b.text);
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

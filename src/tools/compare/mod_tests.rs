#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is the failure report

use super::*;
use std::sync::Arc;

use crate::contract::message::{Content, Message, MessageBody, ToolResultMessage};
use crate::services::recall::RecallIndex;

fn msg(id: &str, text: &str) -> Arc<Message> {
    let mut m = Message::user(text);
    m.id = id.to_owned();
    Arc::new(m)
}

fn blocks(items: &[(&Arc<Message>, u64)]) -> Shape {
    items
        .iter()
        .map(|(m, t)| (Block::Message(Arc::clone(m)), *t))
        .collect()
}

#[test]
fn a_context_that_only_grows_reuses_all_of_the_previous_call() {
    let (a, b, c) = (msg("a", "one"), msg("b", "two"), msg("c", "three"));
    let prev = blocks(&[(&a, 100), (&b, 50)]);
    let now = blocks(&[(&a, 100), (&b, 50), (&c, 30)]);
    assert_eq!(shared_prefix(&prev, &now), (150, 2));
    let mut meter = Meter::new(DEFAULT_BREAK_SHARE);
    meter.call(prev, "e", false, &[]);
    meter.call(now, "e", false, &[]);
    let f = &meter.row;
    assert_eq!((f.calls, f.input_tokens), (2, 330));
    assert_eq!((f.cached_tokens, f.fresh_tokens), (150, 180));
    assert_eq!(f.cache_breaks, 0);
}

#[test]
fn an_equal_copy_counts_as_identical_and_an_edited_one_breaks_the_prefix_there() {
    let a = msg("a", "one");
    let copy = Arc::new((*a).clone());
    let edited = msg("a", "one, edited");
    let b = msg("b", "two");
    let prev = blocks(&[(&a, 10), (&b, 20)]);
    assert_eq!(
        shared_prefix(&prev, &blocks(&[(&copy, 10), (&b, 20)])),
        (30, 2)
    );
    assert_eq!(
        shared_prefix(&prev, &blocks(&[(&edited, 12), (&b, 20)])),
        (0, 0)
    );
}

#[test]
fn a_changed_addition_breaks_everything_after_it_and_is_named_the_cause() {
    let a = msg("a", "one");
    let mut prev = vec![(Block::Addition("facts v1".into()), 40)];
    prev.extend(blocks(&[(&a, 100)]));
    let mut now = vec![(Block::Addition("facts v2".into()), 40)];
    now.extend(blocks(&[(&a, 100)]));
    assert_eq!(shared_prefix(&prev, &now), (0, 0));
    let mut meter = Meter::new(0.9);
    meter.call(prev, "e", false, &[]);
    meter.call(now, "e", false, &[]);
    assert_eq!(meter.row.cache_breaks, 1);
    assert_eq!(
        meter.row.break_causes.get("system-prompt-addition"),
        Some(&1)
    );
    assert_eq!(meter.row.cached_tokens, 0);
}

#[test]
fn the_break_share_decides_what_counts_as_a_break() {
    let (a, b, c) = (msg("a", "one"), msg("b", "two"), msg("c", "three"));
    let prev = blocks(&[(&a, 80), (&b, 20)]);
    // The engine left `b` out: 80 of the previous 100 tokens are reused.
    let now = blocks(&[(&a, 80), (&c, 10)]);
    let mut strict = Meter::new(0.9);
    strict.call(prev.clone(), "e", false, &[]);
    strict.call(now.clone(), "e", false, &[]);
    assert_eq!(strict.row.cache_breaks, 1);
    assert_eq!(strict.row.break_causes.get("engine-cut"), Some(&1));
    let mut lenient = Meter::new(0.5);
    lenient.call(prev, "e", false, &[]);
    lenient.call(now, "e", false, &[]);
    assert_eq!(lenient.row.cache_breaks, 0);
    assert_eq!(lenient.row.cached_tokens, 80);
}

#[test]
fn causes_name_compaction_fallback_and_a_pruned_tool_result() {
    let a = msg("a", "one");
    let tool = Arc::new(Message {
        id: "t".into(),
        ..Message::new(MessageBody::ToolResult(ToolResultMessage {
            tool_call_id: "call-1".into(),
            tool_name: "read".into(),
            content: Content::Text("a long file".into()),
            is_error: false,
            extra: Default::default(),
        }))
    });
    let b = msg("b", "two");
    let prev = blocks(&[(&a, 10), (&tool, 500), (&b, 10)]);
    let pruned = blocks(&[(&a, 10), (&b, 10)]);
    assert_eq!(
        break_cause(&prev, &pruned, 1, false, false),
        "pruned-tool-result"
    );
    assert_eq!(break_cause(&prev, &pruned, 1, true, false), "compaction");
    assert_eq!(break_cause(&prev, &pruned, 1, false, true), "fallback");
    // The first difference is not the tool result: the engine cut something else.
    let cut = blocks(&[(&tool, 500), (&b, 10)]);
    assert_eq!(break_cause(&prev, &cut, 0, false, false), "engine-cut");
}

#[test]
fn cost_applies_fresh_cached_and_output_prices_per_million() {
    let p = Prices {
        input: 3.0,
        cached_input: 0.3,
        output: 15.0,
    };
    let cost = p.cost(1_000_000, 2_000_000, 100_000);
    assert!((cost - (3.0 + 0.6 + 1.5)).abs() < 1e-9, "{cost}");
    let mut f = Figures {
        input_tokens: 3_000_000,
        cached_tokens: 2_000_000,
        fresh_tokens: 1_000_000,
        output_tokens: 100_000,
        ..Figures::default()
    };
    f.finish(&p);
    assert!((f.cost - 5.1).abs() < 1e-9);
    assert!((f.cache_hit_rate - 2.0 / 3.0).abs() < 1e-9);
    assert_eq!(f.reref_rate, 1.0);
    assert!(default_prices().contains_key(DEFAULT_MODEL));
}

#[test]
fn a_price_file_is_read_and_a_wrong_one_is_named() {
    let dir = tempfile::tempdir().unwrap();
    let good = dir.path().join("prices.json");
    std::fs::write(
        &good,
        r#"{"house": {"input": 1.0, "cachedInput": 0.1, "output": 2.0}}"#,
    )
    .unwrap();
    let table = load_prices(&good).unwrap();
    assert_eq!(table["house"].cached_input, 0.1);
    let bad = dir.path().join("bad.json");
    std::fs::write(&bad, r#"{"house": {"input": 1.0, "cached": 0.1}}"#).unwrap();
    let e = load_prices(&bad).unwrap_err().to_string();
    assert!(e.contains("bad.json:1:"), "{e}");
    assert!(e.contains("cachedInput"), "{e}");
}

#[test]
fn gates_parse_and_hold_or_fail() {
    let g = parse_gate("cost<=1.05, reref>=0.9,nohistory==0").unwrap();
    assert_eq!(g.len(), 3);
    assert_eq!(
        (g[0].metric.as_str(), g[0].op.as_str(), g[0].value),
        ("cost", "<=", 1.05)
    );
    assert!(g[0].holds(1.05) && !g[0].holds(1.06));
    assert!(g[1].holds(0.9) && !g[1].holds(0.89));
    assert!(g[2].holds(0.0) && !g[2].holds(1.0));
    assert!(parse_gate("cost").unwrap_err().contains("no comparison"));
    assert!(
        parse_gate("price<=1")
            .unwrap_err()
            .contains("no figure `price`")
    );
    assert!(
        parse_gate("cost<=cheap")
            .unwrap_err()
            .contains("not a number")
    );
    assert!(
        parse_gate("cost=>1")
            .unwrap_err()
            .contains("not a comparison")
    );
}

#[test]
fn ratios_to_a_baseline_keep_rates_absolute() {
    let row = Figures {
        cost: 2.0,
        reref_rate: 0.5,
        no_history: 3,
        ..Figures::default()
    };
    let base = Figures {
        cost: 4.0,
        reref_rate: 0.9,
        ..Figures::default()
    };
    assert_eq!(relative("cost", &row, Some(&base)), Some(0.5));
    assert_eq!(relative("reref", &row, Some(&base)), Some(0.5));
    assert_eq!(relative("nohistory", &row, Some(&base)), Some(3.0));
    assert_eq!(relative("breaks", &row, Some(&base)), Some(1.0));
    assert_eq!(relative("cost", &row, None), Some(2.0));
}

#[test]
fn a_request_naming_an_earlier_identifier_is_found_only_when_the_context_holds_it() {
    let old = msg("m1", "the bug is in src/session/turn.rs near begin_turn");
    let reply = msg("m2", "ok");
    let request = msg(
        "m3",
        "look at src/session/turn.rs again, and src/new_file.rs",
    );
    let mut meter = Meter::new(0.9);
    // The context still has the earlier message: found.
    let history = vec![Arc::clone(&old), Arc::clone(&reply), Arc::clone(&request)];
    let sent = blocks(&[(&old, 10), (&reply, 1), (&request, 10)]);
    meter.rerefs(&request, &history, &sent, &RecallIndex::default());
    assert_eq!((meter.row.rerefs, meter.row.rerefs_found), (1, 1));
    // The same request again (a later call of the turn) is not counted twice.
    meter.rerefs(&request, &history, &sent, &RecallIndex::default());
    assert_eq!(meter.row.rerefs, 1);
    // A later request whose call no longer carries the earlier message: not found, although
    // that message left the session's context (it was seen before, so it still counts).
    let later = msg("m4", "is src/session/turn.rs fixed?");
    let history = vec![Arc::clone(&later)];
    let sent = blocks(&[(&later, 5)]);
    meter.rerefs(&later, &history, &sent, &RecallIndex::default());
    assert_eq!((meter.row.rerefs, meter.row.rerefs_found), (2, 1));
}

#[test]
fn a_reference_out_of_the_context_is_one_search_away_when_a_stored_message_holds_it() {
    let old = msg(
        "m1",
        "the crash is in src/store/jsonl.rs and src/store/mod.rs",
    );
    let reply = msg("m2", "ok, src/session/turn.rs too");
    let request = msg(
        "m3",
        "did src/store/jsonl.rs, src/store/mod.rs or src/session/turn.rs change?",
    );
    // What the session stored: a message naming the first path, the reply, and the request
    // (which names all three, but is not history).
    let index = RecallIndex::default();
    index.add(&[
        msg("s1", "the crash is in src/store/jsonl.rs"),
        Arc::clone(&reply),
        Arc::clone(&request),
    ]);
    let history = vec![old, Arc::clone(&reply), Arc::clone(&request)];
    // The call sends the reply and the request: turn.rs is in the context, jsonl.rs one
    // search away, mod.rs only in the request.
    let sent = blocks(&[(&reply, 5), (&request, 10)]);
    let mut meter = Meter::new(0.9);
    meter.rerefs(&request, &history, &sent, &index);
    let f = &meter.row;
    assert_eq!((f.rerefs, f.rerefs_found, f.rerefs_searchable), (3, 1, 1));
    let mut f = f.clone();
    f.finish(&default_prices()[DEFAULT_MODEL]);
    assert!((f.reref_search_rate - 1.0 / 3.0).abs() < 1e-12);
    assert_eq!(f.metric("rerefsearch"), Some(f.reref_search_rate));
}

//! Rendering within the budget: section order, the budget for any counter, what is given up
//! first, the focus line, clipping, and tiny budgets.

use std::sync::Arc;

use serde_json::json;

use crate::contract::message::Message;
use crate::services::summarize::test_support::{
    call, request, result, rich_span, run, say, section, user,
};
use crate::services::summarize::{BuiltinSummarizer, SECTION_HEADINGS};
use crate::services::tokens::{Estimate, TokenCounter};

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
            .summarize_now(&request(&span, None, max), &Words)
            .expect("summarize");
        assert!(s.tokens <= max && Words.count_text(&s.text) <= max);
    }
}

#[test]
fn identifiers_take_at_most_half_a_tight_budget_and_the_newest_stay() {
    let span = heavy_span();
    let full = run(&span, None, 1_000_000);
    let full_decisions = section(&full.text, "Decisions").len();
    assert!(full_decisions >= 10);
    let ids_tokens = Estimate.count_text(&section(&full.text, "Exact identifiers").join("\n- "));
    // Room for the identifiers and a little more: identifiers beyond half the budget go
    // first (the oldest, least mentioned), so the thread keeps some room.
    let budget = ids_tokens + 150;
    assert!(budget < full.tokens);
    let s = run(&span, None, budget);
    assert!(s.tokens <= budget);
    assert!(s.identifiers_kept < s.identifiers_found, "{}", s.text);
    assert!(
        s.text
            .contains("more identifiers omitted to fit the budget")
    );
    assert!(!section(&s.text, "Decisions").is_empty(), "{}", s.text);
    let ids = section(&s.text, "Exact identifiers");
    assert!(
        ids.iter().any(|l| l.contains("shard-039")),
        "the newest stays: {}",
        s.text
    );
    assert!(
        !ids.iter().any(|l| l.contains("shard-000")),
        "the oldest goes: {}",
        s.text
    );
    assert_eq!(section(&s.text, "Goal").len(), 1);
    // With twice the identifiers' size, all of them fit in their half.
    let s = run(&span, None, 2 * ids_tokens + 60);
    assert_eq!(s.identifiers_kept, s.identifiers_found, "{}", s.text);
}

#[test]
fn focus_instructions_lead_the_summary() {
    let span = rich_span();
    let mut req = request(&span, None, 100_000);
    req.instructions = Some("keep the queue details");
    let s = BuiltinSummarizer
        .summarize_now(&req, &Estimate)
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
    let long = format!(
        "We decided to {}",
        "refactor the module carefully ".repeat(20)
    );
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
fn tiny_budgets_say_how_much_was_left_out_or_a_prefix_of_it() {
    let span = rich_span();
    let s = run(&span, None, 3);
    assert!(s.tokens <= 3);
    assert!(s.text.starts_with("(+"), "{}", s.text);
    // Room for the count alone: nothing but how many items had to go.
    let s = run(&span, None, 14);
    assert!(s.tokens <= 14);
    let n = s
        .text
        .strip_prefix("(+")
        .and_then(|t| t.strip_suffix(" more items omitted to fit the budget)"))
        .and_then(|n| n.parse::<usize>().ok());
    assert!(n.is_some_and(|n| n > 10), "{}", s.text);
}

/// A τ-bench leaf (airline support) as `hierarchical` writes it at a 3,000-token window: a
/// few hundred tokens of span into 64. Its record ids used to be dropped for the goal and the
/// latest request, each said in full, and a heading and a note for every section left out.
fn booking_span() -> Vec<Arc<Message>> {
    vec![
        user(
            "Hi, I'd like to book a flight from New York to Seattle for next Friday. My user ID is mia_li_3668.",
        ),
        say(
            "Thanks, I found your profile. Flights HAT136 and HAT039 are available, each with one stop; both fit your dates. How would you like to pay? You have a travel certificate and a credit card on file.",
        ),
        call("c1", "get_user_details", json!({"user_id": "mia_li_3668"})),
        result(
            "c1",
            "get_user_details",
            "{\"payment_methods\": {\"certificate_7504069\": {\"amount\": 250}, \"credit_card_4421486\": {\"brand\": \"visa\"}}, \"membership\": \"gold\"}",
            false,
        ),
        say(
            "Before I book, please note the fare rules: the basic economy fare cannot be changed or refunded after 24 hours, checked bags cost extra, and seat selection is not included. I'll charge the certificate first because it expires sooner.",
        ),
        user(
            "I don't want basic economy, and don't charge more than 500 dollars to the card. Which cabins are left on both flights?",
        ),
        call(
            "c2",
            "search_direct_flight",
            json!({"origin": "JFK", "destination": "SEA", "date": "2024-05-17"}),
        ),
        result(
            "c2",
            "search_direct_flight",
            &format!(
                "[{}]",
                (0..6)
                    .map(|i| format!(
                        "{{\"cabin\": \"economy\", \"seats\": {i}, \"price\": {}}}",
                        300 + i * 41
                    ))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
            false,
        ),
        say(
            "Economy is available on both flights at 341 and 382 dollars; I'll put it on the certificate and the card as you asked.",
        ),
        user(
            "Please use the certificate first and the rest on the card. Yes, I confirm, go ahead.",
        ),
    ]
}

#[test]
fn a_tight_leaf_keeps_its_identifiers_and_a_shorter_goal_line() {
    let span = booking_span();
    let ids = [
        "mia_li_3668",
        "HAT136",
        "HAT039",
        "certificate_7504069",
        "credit_card_4421486",
    ];
    for max in [64, 72, 90] {
        let s = run(&span, None, max);
        assert!(s.tokens <= max, "{max}: {}", s.text);
        for id in ids {
            assert!(s.text.contains(id), "{max}: lost {id}:\n{}", s.text);
        }
        assert_eq!(
            s.identifiers_kept, s.identifiers_found,
            "{max}:\n{}",
            s.text
        );
        let goal = section(&s.text, "Goal");
        assert_eq!(goal.len(), 1, "{max}: the goal line stays:\n{}", s.text);
        assert!(
            goal[0].starts_with("Please use the certificate"),
            "{}",
            goal[0]
        );
        // Sections left out whole are said in one closing line (how many items, at the
        // tightest clip levels), not a heading and a note each: every heading has an item.
        let last = s.text.lines().last().unwrap_or_default();
        assert!(
            last.starts_with("(+") && last.ends_with("omitted to fit the budget)")
                || last.starts_with("(+omitted to fit the budget: "),
            "{max}:\n{}",
            s.text
        );
        for line in s.text.lines().filter(|l| l.starts_with("## ")) {
            assert!(
                !section(&s.text, &line[3..]).is_empty(),
                "{max}: {line} is bare:\n{}",
                s.text
            );
        }
        // There, the request is the goal: said once.
        if last.ends_with("more items omitted to fit the budget)") {
            assert_eq!(
                s.text.matches("Please use the certificate").count(),
                1,
                "{}",
                s.text
            );
        }
    }
    // With room, everything is said in full, the latest request included.
    let s = run(&span, None, 1_000);
    assert!(
        !section(&s.text, "Latest unresolved request").is_empty(),
        "{}",
        s.text
    );
    assert!(!s.text.contains("omitted"), "{}", s.text);
}

#[test]
fn what_a_summary_left_out_is_not_carried_into_the_next_one() {
    let first = run(&booking_span(), None, 64);
    assert!(
        first.text.contains("omitted to fit the budget"),
        "{}",
        first.text
    );
    let next = run(
        &[user("And a hotel near the airport?")],
        Some(&first.text),
        2_000,
    );
    assert!(!next.text.contains("omitted"), "{}", next.text);
    assert!(next.text.contains("mia_li_3668"), "{}", next.text);
}

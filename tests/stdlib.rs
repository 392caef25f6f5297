//! The script stdlib (`stdlib/*.lua` and its Rhai twins `stdlib/*.rhai`) through the real
//! adapters.
//!
//! A probe engine per language (`tests/fixtures/stdlib/probe.{lua,rhai}`) calls the stdlib
//! function that `host.config.op` names on the session context and reports what it returned
//! (messages, a token count and the rest as `contextProjection`, every index 1-based). Each
//! probe runs in every language, the reports must be identical, and the report is checked for
//! the stdlib's promises: budgets never exceeded, tool groups never split, order kept, the fresh
//! tail holding the newest turn, pruning sparing the last turns.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is a failure

use crate::common;
use crate::sessions;

use std::path::PathBuf;
use std::sync::Arc;

use serde_json::{Value as Json, json};

use common::engine::{Lang, instance_of, services};
use ctxhost::HostCall;
use ctxhost::contract::AssembleParams;
use ctxhost::contract::message::Message;
use ctxhost::services::tokens::{Estimate, TokenCounter};
use ctxhost::testing::pairing;

mod dag;
mod fit;

const LANGS: &[Lang] = &[Lang::Lua, Lang::Rhai];

fn probe_file(lang: Lang) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/stdlib")
        .join(lang.file("probe"))
}

/// What a probe reported.
#[derive(Debug)]
struct Report {
    messages: Vec<Arc<Message>>,
    tokens: u64,
    data: Json,
}

fn run(lang: Lang, session: &[Arc<Message>], config: &Json) -> Report {
    let mut engine = instance_of(&probe_file(lang), config);
    let call = HostCall::new(
        Arc::from("stdlib-probe"),
        Arc::from("s"),
        Arc::new(session.to_vec()),
        services(),
        Arc::new(config.clone()),
        1_000_000,
    );
    let p = AssembleParams {
        session_id: "s".into(),
        session_key: None,
        token_budget: 1_000_000,
        prompt: None,
        model: None,
        available_tools: None,
        runtime_settings: None,
    };
    let r = engine
        .assemble(&call, &p)
        .unwrap_or_else(|e| panic!("{lang:?} probe {config}: {e}"));
    assert!(
        r.estimated_tokens.fract() == 0.0 && r.estimated_tokens >= 0.0,
        "{lang:?}: a token count is a whole number: {}",
        r.estimated_tokens
    );
    Report {
        messages: r.messages,
        tokens: r.estimated_tokens as u64,
        data: r.context_projection.unwrap_or(Json::Null),
    }
}

/// An empty Lua table and an empty Rhai array are the same report.
fn norm(j: &Json) -> Json {
    match j {
        Json::Object(m) if m.is_empty() => Json::Array(Vec::new()),
        Json::Object(m) => Json::Object(m.iter().map(|(k, v)| (k.clone(), norm(v))).collect()),
        Json::Array(a) => Json::Array(a.iter().map(norm).collect()),
        other => other.clone(),
    }
}

fn as_json(ms: &[Arc<Message>]) -> Json {
    serde_json::to_value(ms).expect("messages serialize")
}

/// Runs the probe in every language; the reports must be identical. Returns the first.
fn probe(session: &[Arc<Message>], config: Json) -> Report {
    let mut reports = LANGS
        .iter()
        .map(|&lang| (lang, run(lang, session, &config)));
    let (first_lang, first) = reports.next().expect("a language");
    for (lang, r) in reports {
        assert_eq!(
            as_json(&r.messages),
            as_json(&first.messages),
            "{lang:?} and {first_lang:?} return different messages for {config}"
        );
        assert_eq!(
            r.tokens, first.tokens,
            "{lang:?} and {first_lang:?} count differently for {config}"
        );
        assert_eq!(
            norm(&r.data),
            norm(&first.data),
            "{lang:?} and {first_lang:?} report differently for {config}"
        );
    }
    first
}

fn tokens(ms: &[Arc<Message>]) -> u64 {
    ms.iter().map(|m| Estimate.count_message(m)).sum()
}

/// Positions in `session` of the messages of `list`, which must be unchanged messages of the
/// session in their original order.
fn positions(session: &[Arc<Message>], list: &[Arc<Message>]) -> Vec<usize> {
    let mut out = Vec::new();
    let mut at = 0;
    for (i, m) in list.iter().enumerate() {
        while at < session.len() && session[at].id != m.id {
            at += 1;
        }
        assert!(
            at < session.len(),
            "message {i} ({}) is not from the session or out of order",
            m.id
        );
        assert_eq!(**m, *session[at], "message {} was changed", m.id);
        out.push(at);
        at += 1;
    }
    out
}

/// The tool groups of `session` as (first, last), 0-based, by the host's own rule.
fn host_groups(session: &[Arc<Message>]) -> Vec<(usize, usize)> {
    let mut out = Vec::new();
    let mut i = 0;
    while i < session.len() {
        let first = i;
        i += 1;
        if session[first].tool_calls().next().is_some() {
            while i < session.len() && session[i].tool_call_id().is_some() {
                i += 1;
            }
        }
        out.push((first, i - 1));
    }
    out
}

/// Checks that `list` keeps every tool group of `session` whole; returns its positions.
fn groups_whole(session: &[Arc<Message>], list: &[Arc<Message>]) -> Vec<usize> {
    let pos = positions(session, list);
    let mut kept = vec![false; session.len()];
    for &p in &pos {
        kept[p] = true;
    }
    for (first, last) in host_groups(session) {
        let any = kept[first..=last].iter().any(|k| *k);
        let all = kept[first..=last].iter().all(|k| *k);
        assert!(
            !any || all,
            "tool group {}..{} was split",
            first + 1,
            last + 1
        );
    }
    pos
}

fn strings(j: &Json) -> Vec<String> {
    j.as_array()
        .map(|a| {
            a.iter()
                .map(|v| v.as_str().unwrap_or_default().to_owned())
                .collect()
        })
        .unwrap_or_default()
}

fn numbers(j: &Json) -> Vec<u64> {
    j.as_array()
        .map(|a| a.iter().map(|v| v.as_u64().expect("a number")).collect())
        .unwrap_or_default()
}

fn bools(j: &Json) -> Vec<bool> {
    j.as_array()
        .map(|a| a.iter().map(|v| v.as_bool().expect("a bool")).collect())
        .unwrap_or_default()
}

#[test]
fn tool_groups_cover_every_message_once_and_keep_results_with_their_call() {
    let s = sessions::messages(&sessions::session(30));
    let r = probe(&s, json!({"op": "groups"}));
    let gs = strings(&r.data["toolGroups"]);
    // 30 turns: user + reply each, plus one group per odd turn.
    assert_eq!(gs.len(), 30 * 2 + 15);
    let expected: Vec<String> = host_groups(&s)
        .iter()
        .map(|(a, b)| format!("{}-{}", a + 1, b + 1))
        .collect();
    assert_eq!(gs, expected);
    let starts = numbers(&r.data["groupStart"]);
    for (first, last) in host_groups(&s) {
        for (i, start) in starts.iter().enumerate().take(last + 1).skip(first) {
            assert_eq!(*start, first as u64 + 1, "group_start of {}", i + 1);
        }
    }
    let calls = bools(&r.data["callsTools"]);
    for (i, m) in s.iter().enumerate() {
        assert_eq!(
            calls[i],
            m.tool_calls().next().is_some(),
            "calls_tools({})",
            i + 1
        );
    }
    // slice: the first three messages, unchanged.
    assert_eq!(positions(&s, &r.messages), vec![0, 1, 2]);
}

#[test]
fn orphan_results_stand_alone() {
    let s = sessions::messages(&[
        sessions::user("u1", "hi"),
        sessions::result("r0", "nope", "orphan"),
        sessions::calls("a1", &["c1", "c2"]),
        sessions::result("r1", "c1", "one"),
        sessions::result("r2", "c2", "two"),
        sessions::assistant("a2", "ok"),
    ]);
    let r = probe(&s, json!({"op": "groups"}));
    assert_eq!(strings(&r.data["toolGroups"]).join(" "), "1-1 2-2 3-5 6-6");
    assert_eq!(numbers(&r.data["groupStart"]), vec![1, 2, 3, 3, 3, 6]);
}

#[test]
fn turns_start_at_user_messages() {
    let mut raw = vec![
        json!({"id": "s0", "role": "compactionSummary", "summary": "before", "tokensBefore": 100}),
    ];
    raw.extend(sessions::session(6));
    let s = sessions::messages(&raw);
    let r = probe(&s, json!({"op": "groups"}));
    // The summary forms a leading turn; odd turn t has a user message, a call with 1 + t % 3
    // results, and a reply.
    assert_eq!(
        strings(&r.data["turns"]).join(" "),
        "1-1 2-3 4-8 9-10 11-14 15-16 17-22"
    );
    let empty = probe(&[], json!({"op": "groups"}));
    assert!(strings(&empty.data["turns"]).is_empty());
    assert!(strings(&empty.data["toolGroups"]).is_empty());
}

#[test]
fn newest_first_never_exceeds_the_budget_never_splits_a_group_and_keeps_order() {
    let s = sessions::messages(&sessions::session(40));
    let total = probe(&s, json!({"op": "total"})).tokens;
    assert_eq!(total, tokens(&s), "fit.total is the host's count");
    let mut checked = 0;
    for budget in (0..total + 200).step_by(397) {
        for reserve in [0u64, 500] {
            let r = probe(
                &s,
                json!({"op": "newest_first", "budget": budget, "reserve": reserve}),
            );
            let avail = budget.saturating_sub(reserve);
            assert!(r.tokens <= avail, "over budget: {} > {avail}", r.tokens);
            assert_eq!(
                r.tokens,
                tokens(&r.messages),
                "reported tokens are the kept messages'"
            );
            let pos = groups_whole(&s, &r.messages);
            if let (Some(&first), Some(&last)) = (pos.first(), pos.last()) {
                assert_eq!(last, s.len() - 1, "ends at the newest message");
                assert!(pos.windows(2).all(|w| w[1] == w[0] + 1), "contiguous");
                // Maximal: the next older group would not fit.
                if first > 0 {
                    let (g, _) = host_groups(&s)
                        .into_iter()
                        .find(|(a, b)| *a < first && first - 1 <= *b)
                        .expect("a group");
                    let extra = tokens(&s[g..first]);
                    assert!(r.tokens + extra > avail, "stopped early at budget {budget}");
                }
            }
            checked += 1;
        }
    }
    assert!(checked > 20, "swept {checked} budgets");
    // Everything fits: every message.
    let all = probe(&s, json!({"op": "newest_first", "budget": total}));
    assert_eq!(positions(&s, &all.messages).len(), s.len());
}

#[test]
fn newest_first_with_gaps_and_a_range() {
    let s = sessions::messages(&sessions::session(20));
    let total = tokens(&s);
    let to = s.len() - 1; // 1-based: every message but the newest
    for budget in (0..total).step_by(611) {
        let plain = probe(&s, json!({"op": "newest_first", "budget": budget}));
        let gaps = probe(
            &s,
            json!({"op": "newest_first", "budget": budget, "gaps": true}),
        );
        assert!(
            gaps.tokens <= budget && gaps.tokens >= plain.tokens,
            "gaps never takes less"
        );
        groups_whole(&s, &gaps.messages);
        let ranged = probe(
            &s,
            json!({"op": "newest_first", "budget": budget, "from": 5, "to": to}),
        );
        let pos = groups_whole(&s, &ranged.messages);
        assert!(pos.iter().all(|&p| p + 1 >= 5 && p < to), "inside 5..={to}");
        assert!(ranged.tokens <= budget);
    }
}

#[test]
fn squeeze_always_fits_and_keeps_pairing() {
    // A turn with a huge tool result, as in a 40,000-token file read.
    let mut raw = sessions::session(6);
    raw.push(sessions::user("u-big", "read the big file"));
    raw.push(sessions::calls("a-big", &["big1", "big2"]));
    raw.push(sessions::result("r-big1", "big1", &"B".repeat(160_000)));
    raw.push(sessions::result("r-big2", "big2", &"é".repeat(20_000)));
    let s = sessions::messages(&raw);
    for budget in (0..12_000u64).step_by(487) {
        let r = probe(&s, json!({"op": "squeeze", "budget": budget}));
        assert!(r.tokens <= budget, "squeeze over budget at {budget}");
        assert_eq!(r.tokens, tokens(&r.messages), "reported tokens at {budget}");
        assert!(
            pairing::is_well_paired(&r.messages),
            "pairing broken at {budget}"
        );
        if budget >= 2_000 {
            assert!(!r.messages.is_empty(), "something fits at {budget}");
        }
        // With room for it, the newest tool group is kept (trimmed copies keep their ids).
        if budget >= 4_000 {
            let last = r.messages.last().map(|m| m.id.as_str());
            assert_eq!(last, Some("r-big2"), "the newest group is kept at {budget}");
        }
    }
    // Fits already: the same messages.
    let small = &s[..2];
    let r = probe(small, json!({"op": "squeeze", "budget": 100_000}));
    assert_eq!(positions(small, &r.messages), vec![0, 1]);
}

#[test]
fn fresh_tail_holds_the_newest_user_turn_and_all_its_tool_replies() {
    for turns in 1..12 {
        let mut raw = sessions::session(turns);
        // End some sessions inside a tool loop (no final reply yet).
        if turns % 3 == 0 {
            raw.pop();
        }
        let s = sessions::messages(&raw);
        let last_user = s
            .iter()
            .rposition(|m| m.starts_turn())
            .expect("a user message")
            + 1;
        let r = probe(&s, json!({"op": "tail"}));
        let t = r.data["start"].as_u64().expect("start") as usize;
        assert_eq!(t, last_user, "the tail starts at the newest user message");
        assert_eq!(r.tokens, tokens(&s[t - 1..]), "tail.tokens");
        for min in [0usize, 1, 3, 7, 100] {
            let r = probe(&s, json!({"op": "tail", "minMessages": min}));
            let t2 = r.data["start"].as_u64().expect("start") as usize;
            assert!(t2 <= t, "stretching never drops the newest turn");
            assert!(
                s.len() - t2 + 1 >= min.min(s.len()),
                "holds at least minMessages"
            );
            assert!(
                s[t2 - 1].tool_call_id().is_none(),
                "never starts with a result"
            );
        }
    }
    // No user message at all: the newest tool group.
    let s = sessions::messages(&[
        sessions::assistant("a0", "hello"),
        sessions::calls("a1", &["c1"]),
        sessions::result("r1", "c1", "x"),
    ]);
    assert_eq!(probe(&s, json!({"op": "tail"})).data["start"], json!(2));
    // Empty: one past the end.
    let r = probe(&[], json!({"op": "tail"}));
    assert_eq!(r.data["start"], json!(1));
    assert_eq!(r.tokens, 0);
}

#[test]
fn prune_spares_the_last_turns_and_returns_untouched_messages_unchanged() {
    let s = sessions::messages(&sessions::session(24));
    for keep in [0u64, 1, 2, 5] {
        let opts =
            json!({"keepTurns": keep, "softTrimChars": 1000, "headChars": 200, "tailChars": 100});
        let r = probe(&s, json!({"op": "prune", "opts": opts}));
        assert_eq!(r.messages.len(), s.len());
        let protected = r.data["protectedFrom"].as_u64().expect("protectedFrom") as usize;
        let expected = if keep == 0 {
            s.len() + 1
        } else {
            s.iter()
                .enumerate()
                .filter(|(_, m)| m.starts_turn())
                .map(|(i, _)| i + 1)
                .rev()
                .nth(keep as usize - 1)
                .unwrap_or(1)
        };
        assert_eq!(protected, expected, "protected_from with keepTurns {keep}");
        let mut changed = 0;
        for (i, (before, after)) in s.iter().zip(&r.messages).enumerate() {
            let long = before.tool_call_id().is_some() && before.text().len() > 1000;
            if i + 1 >= protected || !long {
                assert_eq!(**after, **before, "message {} was touched", i + 1);
            } else {
                let (b, a) = (before.text(), after.text());
                assert!(
                    a.len() < b.len(),
                    "long old result {} was not trimmed",
                    i + 1
                );
                assert_eq!(a[..200], b[..200], "head kept");
                assert_eq!(a[a.len() - 100..], b[b.len() - 100..], "tail kept");
                assert!(a.contains("bytes of tool output trimmed"));
                assert_eq!(after.id, before.id, "a copy keeps the id");
                assert_eq!(after.tool_call_id(), before.tool_call_id());
                changed += 1;
            }
        }
        assert_eq!(r.data["stats"]["trimmed"], json!(changed));
        assert_eq!(r.data["stats"]["cleared"], json!(0));
        assert!(
            r.data["stats"].get("tokens").is_none(),
            "tokens only with a budget"
        );
    }
    // Hard clear to a budget: oldest first, until it fits.
    let budget = tokens(&s) / 3;
    let r = probe(
        &s,
        json!({"op": "prune", "opts": {"keepTurns": 2, "budget": budget}}),
    );
    let placeholder = r.data["placeholder"]
        .as_str()
        .expect("placeholder")
        .to_owned();
    assert_eq!(placeholder, "[Old tool result content cleared]");
    assert!(r.data["stats"]["cleared"].as_u64().expect("cleared") > 0);
    assert_eq!(r.data["stats"]["tokens"], json!(tokens(&r.messages)));
    let protected = r.data["protectedFrom"].as_u64().expect("protectedFrom") as usize;
    let mut seen_kept_old = false;
    for (before, after) in s.iter().zip(&r.messages).take(protected - 1) {
        if before.tool_call_id().is_some() {
            let is_cleared = after.text() == placeholder;
            if !is_cleared {
                seen_kept_old = true;
            }
            assert!(!(is_cleared && seen_kept_old), "clears oldest first");
        }
    }
    // hardClear clears every old result; pruning twice changes nothing more.
    let all = probe(
        &s,
        json!({"op": "prune", "opts": {"keepTurns": 1, "hardClear": true}}),
    );
    let again = probe(
        &all.messages,
        json!({"op": "prune", "opts": {"keepTurns": 1, "hardClear": true}}),
    );
    assert_eq!(again.data["stats"]["cleared"], json!(0));
    assert_eq!(again.data["stats"]["trimmed"], json!(0));
    assert_eq!(as_json(&again.messages), as_json(&all.messages));
}

#[test]
fn pin_by_id_and_by_marker_and_partition_keeps_groups_whole() {
    let mut raw = sessions::session(8);
    raw.push(sessions::user(
        "u-pin",
        "remember: the deploy host is 10.0.0.7 [pin]",
    ));
    raw.push(sessions::assistant("a-pin", "noted"));
    let s = sessions::messages(&raw);
    let r_at = s
        .iter()
        .position(|m| m.tool_call_id().is_some())
        .expect("a result");
    let r = probe(&s, json!({"op": "pin", "pinIds": [s[r_at].id.clone()]}));
    assert_eq!(r.data["marker"], json!("[pin]"));
    let pinned = bools(&r.data["pinned"]);
    assert!(pinned[s.len() - 2], "the marker pins");
    assert!(!pinned[s.len() - 1]);
    assert!(pinned[r_at], "pinned by id");
    assert_eq!(pinned.iter().filter(|p| **p).count(), 2);
    let after = bools(&r.data["afterUnpin"]);
    assert!(!after[r_at], "unpinned");
    assert!(after[s.len() - 2], "the marker still pins");
    // partition: whole groups, original order, every message once.
    let pinned_ids = strings(&r.data["pinnedIds"]);
    let rest_ids = strings(&r.data["restIds"]);
    assert_eq!(pinned_ids.len() + rest_ids.len(), s.len());
    let (g_first, g_last) = host_groups(&s)
        .into_iter()
        .find(|(a, b)| *a <= r_at && r_at <= *b)
        .expect("a group");
    let mut expected: Vec<String> = s[g_first..=g_last].iter().map(|m| m.id.clone()).collect();
    expected.push("u-pin".into());
    assert_eq!(
        pinned_ids, expected,
        "the call comes along with its results"
    );
    groups_whole(&s, &r.messages);
    let rest: Vec<Arc<Message>> = s
        .iter()
        .filter(|m| rest_ids.contains(&m.id))
        .cloned()
        .collect();
    assert_eq!(rest.len(), rest_ids.len());
    groups_whole(&s, &rest);
}

#[test]
fn msg_helpers_read_copy_and_trim_without_touching_the_original() {
    let raw = vec![
        sessions::user("u1", "hello"),
        json!({"id": "a1", "role": "assistant", "content": [
            {"type": "thinking", "thinking": "hmm"},
            {"type": "text", "text": "first"},
            {"type": "toolCall", "id": "c1", "name": "read", "arguments": {"path": "/x"}},
            {"type": "text", "text": "second"}]}),
        sessions::result("r1", "c1", &"ü".repeat(3000)),
        json!({"id": "s1", "role": "compactionSummary", "summary": "earlier", "tokensBefore": 10}),
    ];
    let s = sessions::messages(&raw);
    let maxes = [0u64, 5, 40, 100, 700, 5000];
    let r = probe(
        &s,
        json!({"op": "msg", "index": 3, "maxes": maxes,
               "strings": ["aü", "üa", "abc", "日本語のテキスト", ""], "cuts": [0, 1, 2, 3, 4, 10]}),
    );
    let d = &r.data;
    assert_eq!(
        strings(&d["texts"])[..2],
        ["hello".to_owned(), "first\nsecond".to_owned()],
        "thinking and calls excluded"
    );
    assert_eq!(strings(&d["texts"])[3], "earlier");
    assert_eq!(strings(&d["kinds"]), ["u", "a", "t", "s"]);
    assert_eq!(
        strings(&d["roles"]),
        ["user", "assistant", "toolResult", "compactionSummary"]
    );
    assert_eq!(bools(&d["hasCalls"]), [false, true, false, false]);
    assert_eq!(strings(&d["callIds"]), ["", "c1", "", ""]);
    // with_text keeps the tool call and the id; a summary's text is its summary.
    let with: Vec<Message> = serde_json::from_value(d["withText"].clone()).expect("messages");
    assert_eq!(with[0].text(), "new text 1");
    assert_eq!(with[1].text(), "new text 2");
    assert_eq!(with[1].id, "a1");
    assert_eq!(with[1].tool_calls().count(), 1);
    assert_eq!(d["withText"][3]["summary"], json!("new text 4"));
    // copy: equal; a made-up user message has no id.
    let copy: Message = serde_json::from_value(d["copy"].clone()).expect("message");
    assert_eq!(copy, *s[2]);
    assert_eq!(d["user"], json!({"role": "user", "content": "made up"}));
    // trim_text / trim: within the limit, valid UTF-8 (the strings parsed), head and tail kept.
    let long = s[2].text();
    for (i, max) in maxes.iter().enumerate() {
        let t = d["trimText"][i].as_str().expect("text");
        assert!(Estimate.count_text(t) <= *max, "trim_text over {max}");
        if Estimate.count_text(&long) > *max && !t.is_empty() {
            assert!(t.contains("bytes trimmed to fit the context budget"));
            assert!(long.starts_with(t.split('\n').next().unwrap_or_default()));
        }
        let m = &r.messages[i];
        if Estimate.count_message(&s[2]) <= *max {
            assert_eq!(**m, *s[2], "a message that fits is returned as it is");
        } else {
            assert!(Estimate.count_message(m) <= *max, "trim over {max}");
            assert_eq!(m.id, "r1");
            assert_eq!(m.tool_call_id(), Some("c1"));
        }
    }
    // head / tail never cut a character in two.
    let cuts = strings(&d["cuts"]);
    assert_eq!(cuts[..6], ["|", "a|", "a|ü", "aü|aü", "aü|aü", "aü|aü"]);
    assert_eq!(cuts[6..12], ["|", "|a", "ü|a", "üa|üa", "üa|üa", "üa|üa"]);
    assert_eq!(
        cuts[12..18],
        ["|", "a|c", "ab|bc", "abc|abc", "abc|abc", "abc|abc"]
    );
    assert_eq!(cuts[18 + 3], "日|ト");
    assert_eq!(cuts[24..], ["|", "|", "|", "|", "|", "|"]);
}

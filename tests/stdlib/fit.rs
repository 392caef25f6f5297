//! `host.fit` (stdlib `fit.newest_first` since it walks in the host) against the script walk it
//! replaced, kept in the probes as the oracle, on every shared transcript; its token counts,
//! its errors and its bounds on hostile lists, in both languages.

use std::sync::Arc;

use serde_json::{Value as Json, json};

use super::{Report, probe, run, tokens};
use crate::common;
use crate::common::engine::Lang;
use ctxhost::contract::message::{Content, ContentBlock, Message, MessageBody};
use ctxhost::services::tokens::{Tokenizer, counter};
use ctxhost::transcript::import::import;

/// The first conversation of each shared transcript (at most `cap` messages), with ids.
fn transcripts(cap: usize) -> Vec<(String, Vec<Arc<Message>>)> {
    let mut out = Vec::new();
    for path in common::shared_transcripts() {
        let imp = import(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let Some(session) = imp.sessions.into_iter().next() else {
            continue;
        };
        let messages: Vec<Arc<Message>> = session
            .messages
            .into_iter()
            .take(cap)
            .enumerate()
            .map(|(i, mut m)| {
                m.id = format!("m{i}");
                Arc::new(m)
            })
            .collect();
        if !messages.is_empty() {
            out.push((path.display().to_string(), messages));
        }
    }
    out
}

/// Budgets, reserves, gaps and ranges (1-based, as the probes take them) over a list.
fn cases(s: &[Arc<Message>]) -> Vec<Json> {
    let total = tokens(s);
    let n = s.len() as u64;
    let mut budgets = vec![0, 1, 10, 100, 1_000, total / 7, total / 3, total / 2];
    budgets.extend([total.saturating_sub(1), total, total + 1_000]);
    let mut out = Vec::new();
    for &budget in &budgets {
        for reserve in [0u64, 250] {
            for gaps in [false, true] {
                let base = json!({"budget": budget, "reserve": reserve, "gaps": gaps});
                out.push(base.clone());
                if n >= 4 {
                    let mut ranged = base.clone();
                    ranged["from"] = json!(3);
                    ranged["to"] = json!(n - 1);
                    out.push(ranged);
                    let mut upper = base;
                    upper["from"] = json!(n / 2 + 1);
                    out.push(upper);
                }
            }
        }
    }
    out
}

#[test]
fn host_fit_equals_the_script_walk_on_every_shared_transcript() {
    let (mut partial, mut holes, mut compared) = (0, 0, 0);
    for (name, s) in transcripts(300) {
        let cases = cases(&s);
        // `probe` runs both languages and requires identical reports (a few cases a call: the
        // oracle is a script loop, and the call has a deadline).
        let mut got = Vec::new();
        for chunk in cases.chunks(6) {
            let r = probe(&s, json!({"op": "fit_vs_oracle", "cases": chunk}));
            got.extend(r.data["cases"].as_array().expect("cases").iter().cloned());
        }
        assert_eq!(got.len(), cases.len());
        for (case, g) in cases.iter().zip(&got) {
            assert_eq!(g["got"], g["want"], "{name}: {case}");
            assert_eq!(g["same"], json!(true), "{name}: {case}: other messages");
            let sig = g["got"].as_str().expect("a signature");
            let kept: usize = sig.split(':').next().unwrap().parse().unwrap();
            if kept > 0 && kept < s.len() {
                partial += 1;
            }
            compared += 1;
        }
        // Gaps take more than the contiguous walk somewhere (else `gaps` went untested).
        for (k, case) in cases.iter().enumerate() {
            if case["gaps"] == json!(true) {
                continue;
            }
            let twin = cases
                .iter()
                .position(|c| {
                    c["gaps"] == json!(true)
                        && c["budget"] == case["budget"]
                        && c["reserve"] == case["reserve"]
                        && c["from"] == case["from"]
                        && c["to"] == case["to"]
                })
                .expect("a gaps twin");
            if got[k]["got"] != got[twin]["got"] {
                holes += 1;
            }
        }
    }
    assert!(compared > 300, "compared {compared} cases");
    assert!(
        partial > 50,
        "only {partial} cases kept part of a transcript"
    );
    assert!(holes > 0, "gaps never differed from the contiguous walk");
}

fn fit_in(lang: Lang, s: &[Arc<Message>], budget: Json, opts: Json) -> Report {
    run(
        lang,
        s,
        &json!({"op": "fit", "budget": budget, "opts": opts}),
    )
}

/// The keep-recent workload's rule, written out here: ceil(chars / 4) of the text blocks
/// joined by "\n", chars in code points.
fn text_chars4(m: &Message) -> u64 {
    let blocks = |bs: &[ContentBlock]| {
        let texts: Vec<&str> = bs
            .iter()
            .filter_map(|b| match b {
                ContentBlock::Text(t) => Some(t.text.as_str()),
                _ => None,
            })
            .collect();
        texts.join("\n").chars().count()
    };
    let content = |c: &Content| match c {
        Content::Text(t) => t.chars().count(),
        Content::Blocks(b) => blocks(b),
    };
    let chars = match &m.body {
        MessageBody::User(u) => content(&u.content),
        MessageBody::Assistant(a) => blocks(&a.content),
        MessageBody::ToolResult(r) => content(&r.content),
        MessageBody::Custom(c) => content(&c.content),
        MessageBody::CompactionSummary(s) => s.summary.chars().count(),
        MessageBody::BranchSummary(s) => s.summary.chars().count(),
    };
    chars.div_ceil(4) as u64
}

#[test]
fn host_fit_counts_by_the_host_an_exact_bpe_or_the_workload_rule() {
    let all = transcripts(300);
    let (_, s) = all
        .iter()
        .find(|(name, _)| name.contains("pimono-large"))
        .expect("the pi-mono transcript");
    let o200k = counter(Tokenizer::O200k).unwrap();
    let rules: [(Json, u64); 4] = [
        (json!({}), tokens(s)),
        (json!({"count": "host"}), tokens(s)),
        (
            json!({"count": "o200k_base"}),
            s.iter().map(|m| o200k.count_message(m)).sum(),
        ),
        (
            json!({"count": "textChars/4"}),
            s.iter().map(|m| text_chars4(m)).sum::<u64>(),
        ),
    ];
    assert_ne!(
        rules[2].1, rules[0].1,
        "the counts differ, so the option is seen"
    );
    assert_ne!(
        rules[3].1, rules[0].1,
        "the counts differ, so the option is seen"
    );
    for lang in [Lang::Lua, Lang::Rhai] {
        for (opts, want) in &rules {
            let r = fit_in(lang, s, json!(1_000_000_000u64), opts.clone());
            assert_eq!(r.data.get("error"), None, "{lang:?} {opts}");
            assert_eq!(
                r.messages.len(),
                s.len(),
                "{lang:?} {opts}: everything fits"
            );
            assert_eq!(r.tokens, *want, "{lang:?} {opts}");
        }
        // A budget of half the workload-rule total keeps the newest half by that rule.
        let half = rules[3].1 / 2;
        let r = fit_in(lang, s, json!(half), json!({"count": "textChars/4"}));
        assert!(
            r.tokens <= half && r.tokens > half / 2,
            "{lang:?}: {}",
            r.tokens
        );
        let kept: u64 = r.messages.iter().map(|m| text_chars4(m)).sum::<u64>();
        assert_eq!(kept, r.tokens, "{lang:?}: the kept messages' own count");
    }
}

/// The error `host.fit` gave in `lang` for these arguments.
fn error_of(lang: Lang, budget: Json, opts: Json) -> String {
    let s = crate::sessions::messages(&crate::sessions::session(3));
    let r = fit_in(lang, &s, budget, opts);
    r.data["error"]
        .as_str()
        .unwrap_or_else(|| panic!("{lang:?}: no error: {:?}", r.data))
        .to_owned()
}

#[test]
fn host_fit_names_a_bad_option_and_its_own_name() {
    let bad: [(Json, Json, &str); 7] = [
        (
            json!(100),
            json!({"rezerve": 10}),
            "unknown option `rezerve`",
        ),
        (
            json!(100),
            json!({"gaps": "yes"}),
            "opts.gaps must be a boolean",
        ),
        (
            json!(100),
            json!({"count": "words"}),
            "opts.count must be one of",
        ),
        (
            json!(100),
            json!({"reserve": "some"}),
            "opts.reserve must be a number",
        ),
        (
            json!(100),
            json!({"from": 1.5}),
            "opts.from must be a whole number",
        ),
        (json!(100), json!({"to": 100_000}), "opts.to = "),
        (
            json!("lots"),
            json!({}),
            "budget must be a number, got a string",
        ),
    ];
    for lang in [Lang::Lua, Lang::Rhai] {
        let name = match lang {
            Lang::Lua => "host.fit: ",
            _ => "host::fit: ",
        };
        for (budget, opts, want) in &bad {
            let e = error_of(lang, budget.clone(), opts.clone());
            assert!(e.contains(name), "{lang:?} {opts}: {e}");
            assert!(e.contains(want), "{lang:?} {opts}: {e}");
        }
    }
}

fn hostile(lang: Lang, n: usize, item: Json, budget: u64) -> Json {
    let s = crate::sessions::messages(&crate::sessions::session(1));
    run(
        lang,
        &s,
        &json!({"op": "fit_hostile", "n": n, "item": item, "budget": budget, "opts": {}}),
    )
    .data
}

#[test]
fn host_fit_bounds_a_hostile_list_and_names_what_is_wrong() {
    let orphan = json!({"role": "toolResult", "toolCallId": "gone", "toolName": "t",
                        "content": "r", "isError": false, "timestamp": 1});
    for lang in [Lang::Lua, Lang::Rhai] {
        // Not messages: the item is named (1-based), the newest first.
        let d = hostile(lang, 3, json!(7), 100);
        let e = d["error"].as_str().unwrap_or_default();
        assert!(
            e.contains("messages[3]") && e.contains("a number"),
            "{lang:?}: {d}"
        );
        let d = hostile(lang, 2, json!({"role": "robot"}), 100);
        let e = d["error"].as_str().unwrap_or_default();
        assert!(
            e.contains("messages[2]") && e.contains("not a valid message"),
            "{lang:?}: {d}"
        );
        // 5,000 tool results without a call: each stands alone, walked once (not once per
        // result), and all fit.
        let d = hostile(lang, 5_000, orphan.clone(), 1 << 40);
        assert_eq!(d["kept"], json!(5_000), "{lang:?}: {d}");
        assert_eq!(d.get("error"), None, "{lang:?}: {d}");
    }
}

#[test]
fn host_fit_refuses_a_list_over_the_result_cap_by_name() {
    use ctxhost::contract::ResultLimits;
    use ctxhost::testing::{HostScope, HostValue, StopSignals};
    let f = ctxhost::testing::table::find(&["fit"]).expect("host.fit is in the table");
    let limits = ResultLimits {
        max_result_messages: 10,
        ..ResultLimits::default()
    };
    let mut scope = HostScope::new("fitter", limits, Arc::new(StopSignals::new(None)));
    let s = crate::sessions::messages(&crate::sessions::session(3));
    scope.set_call(Some(ctxhost::HostCall::new(
        Arc::from("fitter"),
        Arc::from("s"),
        Arc::new(s),
        crate::common::engine::services(),
        Arc::new(json!({})),
        1_000,
    )));
    let user = json!({"role": "user", "content": "hello", "timestamp": 1});
    let Json::Object(m) = user else {
        unreachable!()
    };
    let list = |n: usize| HostValue::List(vec![HostValue::Map(Box::new(m.clone())); n]);
    let budget = || HostValue::Data(Box::new(json!(1_000)));
    let e = scope
        .run(f, "host.fit", [list(11), budget(), HostValue::Nil])
        .expect_err("over the cap");
    assert_eq!(
        e.message(),
        "host.fit: messages: 11 messages exceed the limit of 10"
    );
    scope
        .run(f, "host.fit", [list(10), budget(), HostValue::Nil])
        .expect("at the cap");
    // The context (`p.messages`, passed shared) is the host's own list: a session may hold more
    // messages than one result may carry (the engine fell back to legacy past 100,000 before).
    let context: Vec<Arc<ctxhost::testing::HeldMessage>> = (0..11)
        .map(|i| {
            Arc::new(ctxhost::testing::HeldMessage::new(Arc::new(Message::user(
                format!("message {i}"),
            ))))
        })
        .collect();
    scope
        .run(
            f,
            "host.fit",
            [
                HostValue::Resident(Arc::new(context)),
                budget(),
                HostValue::Nil,
            ],
        )
        .expect("the context over the result cap");
}

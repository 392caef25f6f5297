//! `replay`'s view of each model call: a row per call under its turn, and with `--show` /
//! `--json --contexts` the context each call sent, every message with its origin and what
//! changed against the call before.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is the failure report

use crate::bin::{ctxhost, json_lines};
use crate::common;

use common::transcript_arg as transcript;

use std::path::PathBuf;

/// A Chat Completions conversation of `turns` turns: turn 2 records a `DECISION:`, every reply
/// is long enough that an 4,000-token window drops, summarizes and compacts.
fn decision_conversation(dir: &std::path::Path, turns: usize) -> PathBuf {
    let mut messages = Vec::new();
    for t in 1..=turns {
        let text = if t == 2 {
            "DECISION: the database is postgres 16, no ORM".to_owned()
        } else {
            format!("Question {t}: what does step {t} of the migration change?")
        };
        messages.push(serde_json::json!({"role": "user", "content": text}));
        let reply = format!("Step {t} changes table t{t}. ").repeat(18);
        messages.push(serde_json::json!({"role": "assistant", "content": reply}));
    }
    let path = dir.join("decisions.json");
    std::fs::write(&path, serde_json::to_string(&messages).unwrap()).unwrap();
    path
}

#[test]
fn replay_contexts_mark_each_messages_origin_and_what_changed() {
    let dir = tempfile::tempdir().expect("tempdir");
    let source = decision_conversation(dir.path(), 40);
    let engine = common::repo_root().join("docs/examples/first_policy.lua");
    let args = [
        "replay".to_owned(),
        source.display().to_string(),
        "--engine".to_owned(),
        engine.display().to_string(),
        "--window".to_owned(),
        "4000".to_owned(),
    ];
    let arg_strs: Vec<&str> = args.iter().map(String::as_str).collect();
    let (lines, summary) = replay_json_contexts(&arg_strs);
    assert_eq!(summary["summary"]["turns"], 40);
    assert!(summary["summary"]["compactions"].as_u64() > Some(0));

    let mut origins = std::collections::BTreeSet::new();
    let (mut pinned_decision, mut summary_message, mut summarized) = (false, false, 0);
    for turn in &lines {
        for call in turn["calls"].as_array().unwrap() {
            let ctx = &call["context"];
            let messages = ctx["messages"].as_array().unwrap();
            // The view is the context the model got, counted as the host counts it.
            assert_eq!(
                messages.len() as u64,
                call["assembledMessages"].as_u64().unwrap()
            );
            let tokens: u64 = messages.iter().map(|m| m["tokens"].as_u64().unwrap()).sum();
            assert_eq!(
                tokens + ctx["systemPromptTokens"].as_u64().unwrap(),
                call["assembledTokens"].as_u64().unwrap(),
                "turn {}",
                turn["turn"]
            );
            let new = messages.iter().filter(|m| m["new"] == true).count() as u64;
            assert_eq!(ctx["new"].as_u64(), Some(new));
            assert_eq!(ctx["kept"].as_u64(), Some(messages.len() as u64 - new));
            for (i, m) in messages.iter().enumerate() {
                assert_eq!(m["index"].as_u64(), Some(i as u64));
                let origin = m["origin"].as_str().unwrap().to_owned();
                let line = m["firstLine"].as_str().unwrap();
                pinned_decision |= origin == "pinned" && line.starts_with("DECISION:");
                summary_message |= origin == "engine-made"
                    && line.starts_with("Summary of the earlier conversation:");
                origins.insert(origin);
            }
            summarized += ctx["summarized"].as_array().unwrap().len();
        }
    }
    assert!(
        pinned_decision,
        "the decision is kept by the policy's own rule: {origins:?}"
    );
    assert!(
        summary_message,
        "the running summary is a message the engine made"
    );
    assert!(
        summarized > 0,
        "compactions summarize what earlier calls sent"
    );
    assert!(
        origins.contains("summary") && origins.contains("original"),
        "{origins:?}"
    );

    // Without --contexts, no call carries its context; --show names the turns that do.
    let mut plain: Vec<&str> = args.iter().map(String::as_str).collect();
    plain.extend(["--json", "--show", "12..13"]);
    let shown = json_lines(&ctxhost(&plain));
    for t in &shown[..shown.len() - 1] {
        let has = t["calls"][0].get("context").is_some();
        let n = t["turn"].as_u64().unwrap();
        assert_eq!(has, (12..=13).contains(&n), "turn {n}");
    }

    // The human view of one turn.
    let mut human: Vec<&str> = args.iter().map(String::as_str).collect();
    human.extend(["--show", "12"]);
    let out = ctxhost(&human);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("turn 12 call 1 of 1 (first-policy)"),
        "{text}"
    );
    assert!(text.contains("against the previous call:"), "{text}");
    assert!(text.contains("systemPromptAddition: none"), "{text}");
    assert_eq!(
        text.matches("turn 13 call").count(),
        0,
        "only the turns asked for"
    );

    let bad = ctxhost(&["replay", "--show", "7..3"]);
    assert_eq!(bad.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&bad.stderr).contains("ends before it starts"));
}

#[test]
fn an_agentic_turn_has_a_row_per_model_call() {
    let dir = tempfile::tempdir().expect("tempdir");
    let traj = transcript("sweagent-marshmallow-code__marshmallow-1867.traj");
    let out = ctxhost(&[
        "replay",
        &traj,
        "--window",
        "8000",
        "--json",
        "--out",
        &dir.path().display().to_string(),
    ]);
    let lines = json_lines(&out);
    let turns = &lines[..lines.len() - 1];
    let agentic = turns
        .iter()
        .find(|t| t["modelCalls"].as_u64() > Some(5))
        .expect("a turn with a tool loop");
    let calls = agentic["calls"].as_array().unwrap();
    assert_eq!(calls.len() as u64, agentic["modelCalls"].as_u64().unwrap());
    for (i, c) in calls.iter().enumerate() {
        assert_eq!(c["call"].as_u64(), Some(i as u64 + 1));
        assert!(c.get("context").is_none(), "contexts are opt-in");
    }
    let largest = calls
        .iter()
        .map(|c| c["assembledTokens"].as_u64().unwrap())
        .max();
    assert_eq!(
        agentic["assembledTokens"].as_u64(),
        largest,
        "the turn row is its largest call"
    );
    let compactions: u64 = calls
        .iter()
        .map(|c| c["compactions"].as_u64().unwrap())
        .sum();
    assert!(compactions <= agentic["compactions"].as_u64().unwrap());

    // The table: the turn's row, then one row per call under it.
    let table = ctxhost(&["replay", &traj, "--window", "8000"]);
    let text = String::from_utf8_lossy(&table.stdout);
    for c in calls {
        let label = format!("·{}", c["call"]);
        assert!(
            text.lines()
                .any(|l| l.trim_start().starts_with(&format!("{label} "))),
            "a row for call {label}: {text}"
        );
    }
}

/// The example hooks of `scripts/hooks/` composed with a contributions' share so small that
/// blocks are dropped for the budget, at a window where the planner hook compacts.
fn composed_pipeline(dir: &std::path::Path) -> PathBuf {
    let hooks = common::repo_root().join("scripts/hooks");
    let entry = |file: &str, config: serde_json::Value| serde_json::json!({"path": hooks.join(file), "config": config});
    let config = serde_json::json!({
        "plugins": {
            "slots": {"contextEngine": "pipeline"},
            "entries": {
                "pinned-facts": entry("pinned_facts.lua", serde_json::json!({
                    "facts": ["The deploy target is staging-2.", "Never force-push main."],
                })),
                "reanchor": entry("reanchor.rhai", serde_json::json!({
                    "rules": "## Red Lines\nNever delete user data.",
                })),
                "tool-pruner": entry("tool_pruner.lua", serde_json::json!({})),
                "compaction-planner": entry("compaction_planner.rhai", serde_json::json!({})),
            },
        },
        "host": {
            "pipeline": {
                "hooks": ["pinned-facts", "reanchor", "tool-pruner", "compaction-planner"],
                "contributionShare": 0.01,
            },
        },
    });
    let path = dir.join("pipeline.json5");
    std::fs::write(&path, config.to_string()).unwrap();
    path
}

#[test]
fn replay_views_show_each_pipeline_calls_contributions_drops_and_who_summarized() {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = composed_pipeline(dir.path());
    let source = transcript("fasthooks-sample_main_transcript.jsonl");
    let config = config.display().to_string();
    let args = ["replay", &source, "--config", &config, "--window", "2000"];

    // --json --contexts: every call's pipeline report.
    let (lines, summary) = replay_json_contexts(&args);
    assert!(
        summary["summary"]["compactions"].as_u64() > Some(0),
        "{summary}"
    );
    let (mut placed, mut dropped, mut summarized) = (0, 0, 0);
    let mut compacted_turn = None;
    for turn in &lines {
        for call in turn["calls"].as_array().unwrap() {
            let p = &call["pipeline"];
            assert!(p.is_object(), "a call without its pipeline report: {call}");
            for b in p["contributions"].as_array().unwrap() {
                // By source and placement.
                if b["source"] == "pinned-facts" && b["field"] == "appendSystemPrompt" {
                    placed += 1;
                }
            }
            for b in p["dropped"].as_array().unwrap() {
                assert!(b["source"].is_string() && b["field"].is_string(), "{b}");
                if b["source"] == "pinned-facts" {
                    dropped += 1;
                }
            }
            for c in p["compactions"].as_array().unwrap() {
                assert_eq!(c["summarizedBy"], "compaction-planner", "{c}");
                assert!(c["summarizedMessages"].as_u64() > Some(0), "{c}");
                summarized += 1;
                compacted_turn.get_or_insert(turn["turn"].as_u64().unwrap());
            }
        }
    }
    assert!(placed > 0, "no pinned fact placed");
    assert!(dropped > 0, "no block dropped for the budget");
    assert!(summarized > 0, "no call reports who summarized");

    // --show: the same, for a person, on the turn of a compaction.
    let turn = compacted_turn.unwrap().to_string();
    let mut show = args.to_vec();
    show.extend(["--show", &turn]);
    let out = ctxhost(&show);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("  pipeline:"), "{text}");
    assert!(
        text.lines()
            .any(|l| l.starts_with("    + pinned-facts") && l.contains("appendSystemPrompt")),
        "{text}"
    );
    assert!(
        text.lines()
            .any(|l| l.starts_with("    - pinned-facts") && l.ends_with("(dropped for the budget)")),
        "{text}"
    );
    assert!(
        text.contains("    summarized by compaction-planner: "),
        "{text}"
    );

    // The HTML report carries each call's pipeline report and draws it.
    let html = dir.path().join("report.html");
    let html_arg = html.display().to_string();
    let mut report = args.to_vec();
    report.extend(["--report", &html_arg]);
    let out = ctxhost(&report);
    assert_eq!(out.status.code(), Some(0));
    let page = std::fs::read_to_string(&html).unwrap();
    assert!(
        page.contains("function showPipeline"),
        "the report draws it"
    );
    let data_start = page.find("id=\"replay-data\">").unwrap();
    let data = &page[data_start..];
    assert!(data.contains("\"summarizedBy\":\"compaction-planner\""));
    assert!(
        data.contains("\"dropped\":[{"),
        "a dropped block in the data"
    );
    assert!(data.contains("\"source\":\"pinned-facts\""));
}

/// `ctxhost ARGS --json --contexts`, which must succeed: its report lines and, apart, the
/// summary line that ends them.
fn replay_json_contexts(args: &[&str]) -> (Vec<serde_json::Value>, serde_json::Value) {
    let mut with_json = args.to_vec();
    with_json.extend(["--json", "--contexts"]);
    let out = ctxhost(&with_json);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut lines = json_lines(&out);
    let summary = lines.pop().unwrap();
    (lines, summary)
}

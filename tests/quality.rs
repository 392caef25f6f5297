//! Compaction a model can continue from, on real transcripts: `hierarchical` summarizes
//! single-turn agentic sessions from their tool loop, folds to a bounded depth, never echoes
//! its own instructions; the built-in summarizer fills the thread's sections and names the
//! error line of a failed tool.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is the failure report

use crate::common;

use std::path::Path;

use ctxhost::contract::message::Role;
use ctxhost::runtime::SessionSpec;
use ctxhost::session::Session;
use ctxhost::tools::replay::drive;

/// Every `systemPromptAddition` and every compaction summary text one replay produced.
fn texts(transcript: &str, window: u64, engine: Option<&str>) -> (Vec<String>, Vec<String>) {
    let engine = engine.map(|rel| common::repo_root().join(rel));
    let host = common::replay::host(window, engine.as_deref());
    let path = common::shared_dir()
        .join("data/transcripts")
        .join(transcript);
    let source = ctxhost::transcript::import(&path)
        .expect("import")
        .sessions
        .remove(0);
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("s.jsonl");
    let spec = SessionSpec::new("s", &file);
    let mut session = Session::create(host.session_setup(&spec), Path::new(&file), "").unwrap();
    let (mut additions, mut summaries) = (Vec::new(), Vec::new());
    drive(&mut session, source.messages, |s, a| {
        assert!(!a.fallback, "no call falls back to legacy");
        if let Some(text) = &a.system_prompt_addition {
            additions.push(text.clone());
        }
        for m in s.context() {
            if m.role() == Role::CompactionSummary && !summaries.contains(&m.text()) {
                summaries.push(m.text());
            }
        }
    })
    .expect("replay");
    (additions, summaries)
}

fn depths(text: &str) -> Vec<u32> {
    text.split("<summary depth=\"")
        .skip(1)
        .filter_map(|rest| rest.split('"').next()?.parse().ok())
        .collect()
}

const CODEX: &str =
    "codexsessionview-rollout-2025-11-17T15-30-28-019a93b9-f380-7600-98ff-940e6b99603c.jsonl";

#[test]
fn hierarchical_summarizes_a_single_turn_agentic_session_from_its_tool_loop() {
    for engine in ["scripts/hierarchical.lua", "scripts/hierarchical.rhai"] {
        for transcript in [CODEX, "sweagent-marshmallow-code__marshmallow-1867.traj"] {
            let (additions, _) = texts(transcript, 3_000, Some(engine));
            assert!(
                additions.iter().any(|a| a.contains("<summary depth=")),
                "{engine} left {transcript} unsummarized"
            );
        }
    }
}

#[test]
fn hierarchical_folds_to_a_bounded_depth_without_echoing_its_instructions() {
    let (additions, _) = texts(
        "pimono-before-compaction.jsonl",
        3_000,
        Some("scripts/hierarchical.lua"),
    );
    assert!(!additions.is_empty());
    let deepest = additions.iter().flat_map(|a| depths(a)).max().unwrap_or(0);
    assert!(deepest <= 3, "depth {deepest}");
    assert!(deepest >= 1, "it folded at all");
    for a in &additions {
        assert!(
            !a.contains("Focus:") && !a.contains("Condense these summaries"),
            "{a}"
        );
    }
}

#[test]
fn legacy_summaries_of_a_long_coding_session_carry_the_thread() {
    let (_, summaries) = texts("pimono-before-compaction.jsonl", 8_000, None);
    assert!(summaries.len() > 20);
    let filled = |heading: &str| {
        summaries
            .iter()
            .filter(|s| {
                s.split(&format!("## {heading}\n"))
                    .nth(1)
                    .is_some_and(|rest| rest.starts_with("- "))
            })
            .count()
    };
    // Open items are fewer: a next step or question is dropped once the user speaks again.
    for (heading, share) in [
        ("Goal", 0.9),
        ("Decisions", 0.5),
        ("Done", 0.5),
        ("Open TODOs", 0.3),
        ("Exact identifiers", 0.9),
    ] {
        let n = filled(heading);
        assert!(
            n as f64 >= share * summaries.len() as f64,
            "{heading} filled in {n} of {}",
            summaries.len()
        );
    }
    assert!(summaries.iter().all(|s| !s.contains("<ide_opened_file>")));
}

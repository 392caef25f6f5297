//! Conformance: the same engine written in Lua and in Rhai behaves identically. Every example
//! engine twin pair in `scripts/` replays every shared transcript at 8,000 and 32,000 tokens in
//! both languages; the per-turn reports (what `replay --json` prints, apart from timing) must be
//! equal, turn for turn, and neither language may fall back to `legacy`.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is the failure report

use crate::common;

use std::path::{Path, PathBuf};

use ctxhost::tools::replay::{ReplayOptions, ReplaySummary, TurnReport, replay};
use ctxhost::transcript::import;

/// Conversations replayed from files that hold many (τ-bench has 200 short ones).
const MAX_SESSIONS: usize = 24;

fn script(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("scripts")
        .join(name)
}

async fn run(engine: &Path, transcript: &Path, window: u64) -> (Vec<TurnReport>, ReplaySummary) {
    let host = common::replay::host(window, Some(engine));
    let mut imported = import(transcript).expect("import");
    imported.sessions.truncate(MAX_SESSIONS);
    let dir = tempfile::tempdir().expect("tempdir");
    let opts = ReplayOptions {
        out_dir: dir.path().to_path_buf(),
        concurrency: 2,
        // The twins must agree on every call's context, message by message.
        contexts: true,
    };
    let mut turns = Vec::new();
    let summary = replay(host, transcript, imported, &opts, |t| turns.push(t.clone()))
        .await
        .expect("replay");
    (turns, summary)
}

/// Replays both twins of `engine` over every shared transcript at `window` and compares.
async fn twins_agree(engine: &str, window: u64) {
    let lua = script(&format!("{engine}.lua"));
    let rhai = script(&format!("{engine}.rhai"));
    for transcript in common::shared_transcripts() {
        let name = transcript
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or_default()
            .to_owned();
        let (lua_turns, lua_summary) = run(&lua, &transcript, window).await;
        let (rhai_turns, rhai_summary) = run(&rhai, &transcript, window).await;
        assert_eq!(lua_summary.quarantine, None, "{engine}.lua on {name}");
        assert_eq!(rhai_summary.quarantine, None, "{engine}.rhai on {name}");
        assert_eq!(lua_turns.len(), rhai_turns.len(), "{engine} on {name}");
        // Everything but the time the engines took must agree.
        let untimed = |t: &TurnReport| TurnReport {
            engine_ms: 0.0,
            slow: false,
            ..t.clone()
        };
        for (l, r) in lua_turns.iter().zip(&rhai_turns) {
            assert_eq!(
                untimed(l),
                untimed(r),
                "{engine} on {name} at window {window}: turn {} differs",
                l.turn
            );
        }
        let strip =
            |s: &ReplaySummary| (s.turns, s.compactions, s.fallbacks, s.max_assembled_tokens);
        assert_eq!(
            strip(&lua_summary),
            strip(&rhai_summary),
            "{engine} on {name}"
        );
    }
}

each_example_engine! {
    twins_agree_at_8000 => twins_agree, 8_000;
    twins_agree_at_32000 => twins_agree, 32_000;
}

#[test]
fn every_lua_engine_has_a_rhai_twin_and_back() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts");
    let stems = |ext: &str| -> Vec<String> {
        let mut v: Vec<String> = std::fs::read_dir(&dir)
            .expect("scripts")
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|e| e == ext))
            .filter_map(|p| p.file_stem().and_then(|s| s.to_str()).map(str::to_owned))
            .collect();
        v.sort();
        v
    };
    assert_eq!(stems("lua"), stems("rhai"));
    assert_eq!(stems("lua").len(), 6);
}

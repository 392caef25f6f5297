//! Replays every shared transcript through the host at an 8,000-token window and checks what
//! the model would see: within budget, tool pairing intact, compaction happened, the transcript
//! on disk holds every original message in order plus the summaries, and summaries keep the
//! identifiers of what they replaced.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is the failure report

use crate::common;

use std::path::Path;

use common::replay::{Checked, host, replay_checked};
use ctxhost::contract::message::Message;
use ctxhost::runtime::SessionSpec;
use ctxhost::session::TurnInput;

async fn replay_all(window: u64) {
    let mut total = Checked::default();
    for path in common::shared_transcripts() {
        // τ-bench holds 200 short conversations: replay a slice that includes long ones.
        let dir = tempfile::tempdir().expect("tempdir");
        let c = replay_checked(&path, window, 40, None, None, dir.path()).await;
        assert!(c.turns > 0, "{}", path.display());
        total.turns += c.turns;
        total.compactions += c.compactions;
        total.summaries_checked += c.summaries_checked;
        let name = path
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or_default();
        eprintln!("{name}: {} turns, {} compactions", c.turns, c.compactions);
        if !name.starts_with("taubench") && !name.starts_with("fasthooks") {
            assert!(
                c.compactions > 0,
                "{name}: no compaction at window {window}"
            );
        }
    }
    assert!(total.summaries_checked > 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_shared_transcript_replays_within_budget_at_8000() {
    replay_all(8_000).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_demo_session_replays_with_compactions() {
    let demo = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/demo-session.jsonl");
    let dir = tempfile::tempdir().expect("tempdir");
    let c = replay_checked(&demo, 32_000, 1, None, None, dir.path()).await;
    assert!(c.turns >= 40, "{} turns", c.turns);
    assert!(c.compactions >= 2, "{} compactions", c.compactions);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reopened_session_continues_its_transcript() {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("s.jsonl");
    let host = host(8_000, None);
    let s = host
        .create_session(SessionSpec::new("s", &file))
        .await
        .expect("create");
    s.begin_turn(TurnInput {
        user: Message::user("first"),
        is_heartbeat: false,
    })
    .await
    .expect("turn");
    s.end_turn(vec![Message::assistant("one")])
        .await
        .expect("end");
    s.close().await.expect("close");
    drop(s);
    let s = host
        .open_session(SessionSpec::new("s", &file))
        .await
        .expect("open");
    let a = s
        .begin_turn(TurnInput {
            user: Message::user("second"),
            is_heartbeat: false,
        })
        .await
        .expect("turn");
    let texts: Vec<String> = a.messages.iter().map(|m| m.text()).collect();
    assert_eq!(texts, ["first", "one", "second"]);
}

/// Issue 24 item 4: a replay's `engineTimes` gives `compact` and the summarizer their own rows
/// whoever compacts: here `legacy`, whose compactions are the host's built-in auto-compaction
/// (before, only `assemble` and `ingest` were listed), and a script engine that does not own
/// compaction (the host compacts for it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replay_times_compaction_and_the_summarizer_whoever_compacts() {
    let path = common::shared_dir()
        .join("data/transcripts")
        .join(crate::guarantees::CODEX);
    let forgetful = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/lua/forgetful.lua");
    for engine in [None, Some(forgetful.as_path())] {
        let imported = ctxhost::transcript::import(&path).expect("import");
        let dir = tempfile::tempdir().expect("tempdir");
        let opts = ctxhost::tools::replay::ReplayOptions {
            out_dir: dir.path().to_path_buf(),
            concurrency: 1,
            contexts: false,
        };
        let summary =
            ctxhost::tools::replay::replay(host(3_000, engine), &path, imported, &opts, |_| {})
                .await
                .expect("replay");
        assert!(summary.compactions > 0, "{engine:?}: {summary:?}");
        let row = |name: &str| summary.engine_times.iter().find(|t| t.method == name);
        let compact = row("compact")
            .unwrap_or_else(|| panic!("{engine:?}: no compact row: {:?}", summary.engine_times));
        assert!(
            compact.calls >= summary.compactions,
            "{engine:?}: {compact:?} for {} compactions",
            summary.compactions
        );
        let summarizer = row(ctxhost::testing::BUILTIN_ROW)
            .unwrap_or_else(|| panic!("{engine:?}: no summarizer row: {:?}", summary.engine_times));
        assert!(
            summarizer.calls >= summary.compactions,
            "{engine:?}: {summarizer:?} for {} compactions",
            summary.compactions
        );
        assert!(
            summary.engine_times.iter().all(|t| t.calls > 0),
            "{engine:?}: {:?}",
            summary.engine_times
        );
    }
}

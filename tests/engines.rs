//! Every example engine in `scripts/`, through the real host, over every shared transcript at
//! an 8,000-token window: every model call within budget (messages plus
//! `systemPromptAddition`), tool pairing intact, no fallback, the transcript on disk complete.
//! Engine state persists across a host restart: a replay that restarts the host halfway gives
//! exactly the same contexts as one that does not.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is the failure report

use crate::common;

use std::path::{Path, PathBuf};

use common::replay::replay_checked;

const WINDOW: u64 = 8_000;

fn script(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("scripts")
        .join(name)
}

async fn engine_over_all_transcripts(name: &str) {
    let engine = script(&format!("{name}.lua"));
    for path in common::shared_transcripts() {
        let dir = tempfile::tempdir().expect("tempdir");
        // τ-bench holds 200 short conversations: a slice is enough for the engine's behaviour.
        let c = replay_checked(&path, WINDOW, 12, Some(&engine), None, dir.path()).await;
        assert!(c.turns > 0, "{name} on {}", path.display());
    }
}

/// The same replay with and without a host restart after `at` turns gives the same contexts.
async fn restart_changes_nothing(name: &str, transcript: &str, at: usize) {
    let engine = script(&format!("{name}.lua"));
    let path = common::shared_dir()
        .join("data/transcripts")
        .join(transcript);
    let a = tempfile::tempdir().expect("tempdir");
    let b = tempfile::tempdir().expect("tempdir");
    let straight = replay_checked(&path, WINDOW, 1, Some(&engine), None, a.path()).await;
    let restarted = replay_checked(&path, WINDOW, 1, Some(&engine), Some(at), b.path()).await;
    assert_eq!(straight.calls.len(), restarted.calls.len());
    for (i, (x, y)) in straight.calls.iter().zip(&restarted.calls).enumerate() {
        assert_eq!(x, y, "{name}: model call {i} differs after a restart");
    }
    let state = ctxhost::testing::state_path(&restarted.files[0]);
    let saved: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&state).expect("state file")).expect("json");
    assert_eq!(
        saved["engine"],
        name.trim_end_matches(".lua").replace('_', "-")
    );
}

each_example_engine! {
    replays_every_shared_transcript_within_budget => engine_over_all_transcripts;
    state_survives_a_host_restart => restart_changes_nothing, "pimono-large-session.jsonl", 40;
}

/// Every engine of `scripts/`, in both languages, passes `check` (its synthetic session
/// included the opening turn of tool results together over the window, issue 24 item 5).
#[test]
fn every_example_engine_passes_check() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts");
    let mut checked = 0;
    for entry in std::fs::read_dir(&dir).expect("scripts") {
        let path = entry.expect("entry").path();
        if path.extension().is_none_or(|e| e != "lua" && e != "rhai") {
            continue;
        }
        let report =
            ctxhost::tools::check::check_engine(&path, &ctxhost::config::Config::default());
        assert!(report.sound, "{}: {:#?}", path.display(), report.steps);
        assert!(
            report
                .steps
                .iter()
                .any(|s| s.step.starts_with("compact on an over-budget session"))
        );
        checked += 1;
    }
    assert_eq!(checked, 12);
}

/// A conversation of `turns` turns, each with a large tool result, through the real host.
async fn drive(
    engine: &str,
    turns: usize,
    first_user: &str,
) -> (Vec<ctxhost::session::Assembly>, tempfile::TempDir) {
    use ctxhost::contract::message::Message;
    use ctxhost::runtime::SessionSpec;
    use ctxhost::session::TurnInput;
    let dir = tempfile::tempdir().expect("tempdir");
    let host = common::replay::host(4_000, Some(&script(engine)));
    let s = host
        .create_session(SessionSpec::new("t", dir.path().join("t.jsonl")))
        .await
        .expect("session");
    let mut out = Vec::new();
    for t in 0..turns {
        let text = if t == 0 {
            first_user.to_owned()
        } else {
            format!("next step {t}")
        };
        let a = s
            .begin_turn(TurnInput {
                user: Message::user(text),
                is_heartbeat: false,
            })
            .await
            .expect("turn");
        assert!(!a.fallback && a.assembled_tokens <= a.token_budget);
        out.push(a);
        let call = format!("c{t}");
        let replies: Vec<Message> = [
            serde_json::json!({"role":"assistant","content":[
                {"type":"toolCall","id":call,"name":"read","arguments":{"path":format!("src/f{t}.rs")}}]}),
            serde_json::json!({"role":"toolResult","toolCallId":call,"toolName":"read",
                "content":[{"type":"text","text":format!("fn f{t}() {{}}\n").repeat(120)}]}),
            serde_json::json!({"role":"assistant","content":[{"type":"text","text":format!("Read src/f{t}.rs.")}]}),
        ]
        .into_iter()
        .map(|v| serde_json::from_value(v).expect("message"))
        .collect();
        s.end_turn(replies).await.expect("end turn");
    }
    s.close().await.expect("close");
    assert!(host.quarantine().all().is_empty());
    (out, dir)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pinned_facts_outlive_compaction() {
    let (calls, dir) = drive(
        "pinned_facts.lua",
        30,
        "[pin] the deploy host is build-7.internal:8443",
    )
    .await;
    let transcript = std::fs::read_to_string(dir.path().join("t.jsonl")).expect("transcript");
    let compactions = transcript
        .lines()
        .filter(|l| l.contains("\"type\":\"compaction\""))
        .count();
    assert!(compactions > 0, "the session never compacted");
    let last = calls.last().expect("calls");
    let seen = last
        .messages
        .iter()
        .any(|m| m.text().contains("build-7.internal:8443"))
        || last
            .system_prompt_addition
            .as_deref()
            .is_some_and(|a| a.contains("build-7.internal:8443"));
    assert!(
        seen,
        "the pinned fact is gone after {compactions} compactions"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hierarchical_builds_more_than_one_level() {
    let (calls, dir) = drive("hierarchical.lua", 80, "start").await;
    let addition = calls
        .last()
        .and_then(|a| a.system_prompt_addition.clone())
        .unwrap_or_default();
    assert!(addition.starts_with("Condensed history: "), "{addition}");
    let deeper = (1..10).any(|d| addition.contains(&format!("depth=\"{d}\"")));
    assert!(deeper, "{addition}");
    let state = ctxhost::testing::state_path(&dir.path().join("t.jsonl"));
    let saved: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(state).expect("state")).expect("json");
    let levels = saved["state"]["levels"].as_array().map_or(0, Vec::len);
    assert!(levels >= 2, "levels: {}", saved["state"]["levels"]);
    // Folded summaries are read as summaries: their sections carry over, and the focus line
    // that heads each one is never quoted back as a goal or an ask.
    let texts: Vec<&str> = saved["state"]["levels"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|l| l.as_array())
        .flatten()
        .filter_map(|n| n["text"].as_str())
        .collect();
    assert!(texts.len() >= 2, "{texts:?}");
    for t in texts {
        assert!(!t.contains("- Focus:") && !t.contains("## Goal -"), "{t}");
    }
}

//! Replays every shared transcript through the host at an 8,000-token window and checks what
//! the model would see: within budget, tool pairing intact, compaction happened, the transcript
//! on disk holds every original message in order plus the summaries, and summaries keep the
//! identifiers of what they replaced.

mod common;

use std::path::Path;
use std::sync::Arc;

use ctxhost::config::Config;
use ctxhost::message::{Message, MessageBody, Role};
use ctxhost::pairing::is_well_paired;
use ctxhost::replay::{model_steps, split_turns};
use ctxhost::runtime::{Host, SessionSpec};
use ctxhost::session::Assembly;
use ctxhost::session::TurnInput;
use ctxhost::transcript::{TranscriptStore, import};

#[derive(Debug, Default)]
struct Checked {
    turns: usize,
    compactions: usize,
    summaries_checked: usize,
}

fn host(window: u64) -> Arc<Host> {
    let mut config = Config::default();
    config.host.window = window;
    Arc::new(Host::new(config).expect("host"))
}

/// Replays `path` (at most `max_sessions` conversations) and checks every turn.
async fn replay_checked(path: &Path, window: u64, max_sessions: usize) -> Checked {
    let host = host(window);
    let dir = tempfile::tempdir().expect("tempdir");
    let imported = import(path).expect("import");
    assert!(imported.problems.is_empty(), "{:?}", imported.problems);
    let mut checked = Checked::default();
    for (n, source) in imported.sessions.into_iter().take(max_sessions).enumerate() {
        let file = dir.path().join(format!("s{n}.jsonl"));
        let mut spec = SessionSpec::new(format!("s{n}"), &file);
        spec.system_prompt = source.system_prompt.clone();
        let session = host.create_session(spec).await.expect("session");
        let originals = source.messages.clone();
        let (preamble, turns) = split_turns(source.messages);
        session.record(preamble).await.expect("record");
        for (t, (user, replies)) in turns.into_iter().enumerate() {
            let mut steps = model_steps(replies);
            let last = steps.pop().unwrap_or_default();
            let first = session
                .begin_turn(TurnInput {
                    user,
                    is_heartbeat: false,
                })
                .await
                .expect("begin turn");
            check_assembly(path, n, t + 1, &first);
            for step in steps {
                let a = session.continue_turn(step).await.expect("continue turn");
                check_assembly(path, n, t + 1, &a);
            }
            let stats = session.end_turn(last).await.expect("end turn");
            checked.turns += 1;
            checked.compactions += stats.compactions as usize;
        }
        session.close().await.expect("close");
        checked.summaries_checked += check_transcript_on_disk(&file, &originals);
    }
    checked
}

fn check_assembly(path: &Path, session: usize, turn: usize, a: &Assembly) {
    assert!(
        a.assembled_tokens <= a.token_budget,
        "{} session {session} turn {turn}: {} tokens over a budget of {}",
        path.display(),
        a.assembled_tokens,
        a.token_budget
    );
    assert!(
        is_well_paired(&a.messages),
        "{} session {session} turn {turn}: orphaned tool call or result",
        path.display()
    );
    assert!(!a.fallback);
}

/// The stored file holds every original message in order, plus summaries; each summary keeps
/// the UUIDs and URLs of the span it replaced or says how many identifiers it left out.
fn check_transcript_on_disk(file: &Path, originals: &[Message]) -> usize {
    let (_, stored, problems) = TranscriptStore::open(file).expect("reopen");
    assert!(problems.is_empty(), "{problems:?}");
    let bodies: Vec<&MessageBody> = stored
        .iter()
        .filter(|m| m.role() != Role::CompactionSummary)
        .map(|m| &m.body)
        .collect();
    let original_bodies: Vec<&MessageBody> = originals.iter().map(|m| &m.body).collect();
    assert_eq!(bodies.len(), original_bodies.len(), "{}", file.display());
    assert!(
        bodies == original_bodies,
        "{}: messages differ",
        file.display()
    );

    let uuid = regex::Regex::new(
        r"\b[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}\b",
    )
    .expect("regex");
    let mut checked = 0;
    let mut span_start = 0;
    for (i, m) in stored.iter().enumerate() {
        let MessageBody::CompactionSummary(s) = &m.body else {
            continue;
        };
        // The span this summary replaced: from the previous summary's kept entry to its own.
        let kept = s
            .first_kept_entry_id
            .as_ref()
            .and_then(|id| stored[..i].iter().position(|x| &x.id == id))
            .unwrap_or(i);
        let span_text: String = stored[span_start..kept]
            .iter()
            .filter(|x| x.role() != Role::CompactionSummary)
            .map(|x| serde_json::to_string(x).expect("json"))
            .collect();
        let omitted = s.summary.contains("omitted");
        for id in uuid.find_iter(&span_text) {
            assert!(
                omitted || s.summary.contains(id.as_str()),
                "{}: summary {} lost identifier {}",
                file.display(),
                m.id,
                id.as_str()
            );
        }
        span_start = kept;
        checked += 1;
    }
    checked
}

async fn replay_all(window: u64) {
    let mut total = Checked::default();
    for path in common::shared_transcripts() {
        // τ-bench holds 200 short conversations: replay a slice that includes long ones.
        let c = replay_checked(&path, window, 40).await;
        assert!(c.turns > 0, "{}", path.display());
        total.turns += c.turns;
        total.compactions += c.compactions;
        total.summaries_checked += c.summaries_checked;
        let name = path
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or_default();
        eprintln!("{name}: {c:?}");
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
    let c = replay_checked(&demo, 32_000, 1).await;
    assert!(c.turns >= 40, "{c:?}");
    assert!(c.compactions >= 2, "{c:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reopened_session_continues_its_transcript() {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("s.jsonl");
    let host = host(8_000);
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

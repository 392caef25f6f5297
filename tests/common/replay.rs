//! Replaying a transcript through a real [`Host`] and checking every model call: within budget,
//! tool pairing intact, no fallback; the transcript on disk holds every original message in
//! order plus summaries that keep the identifiers they replaced.
#![allow(dead_code)]

use std::convert::Infallible;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use ctxhost::config::{Config, Entry};
use ctxhost::contract::message::{Message, MessageBody, Role};
use ctxhost::runtime::{Host, SessionHandle, SessionSpec};
use ctxhost::session::{Assembly, TurnStats};
use ctxhost::testing::pairing::is_well_paired;
use ctxhost::tools::replay::{RecordedTurn, drive_turn, split_turns};
use ctxhost::transcript::{TranscriptStore, import};

/// A host at `window` tokens with `engine` (an engine file) in the slot, or `legacy`.
pub fn host(window: u64, engine: Option<&Path>) -> Arc<Host> {
    Arc::new(Host::new(config(window, engine)).expect("host"))
}

/// The configuration of [`host`]: `window` tokens, `engine` in the slot or `legacy`.
pub fn config(window: u64, engine: Option<&Path>) -> Config {
    let mut config = Config::default();
    config.host.window = window;
    if let Some(path) = engine {
        let id = path
            .file_stem()
            .and_then(|s| s.to_str())
            .unwrap_or("engine")
            .replace('_', "-");
        config.plugins.slots.context_engine = Some(id.clone());
        config.plugins.entries.insert(
            id,
            Entry {
                path: Some(path.to_path_buf()),
                ..Entry::default()
            },
        );
    }
    config
}

/// One model call as the model saw it: tokens and the ids of the messages.
#[derive(Clone, Debug, PartialEq)]
pub struct Call {
    pub tokens: u64,
    pub ids: Vec<String>,
    pub addition: Option<String>,
}

/// What a checked replay saw.
#[derive(Debug, Default)]
pub struct Checked {
    pub turns: usize,
    pub compactions: usize,
    pub summaries_checked: usize,
    pub calls: Vec<Call>,
    pub files: Vec<PathBuf>,
}

/// Replays `path` (at most `max_sessions` conversations) through `engine` at `window`,
/// checking every model call. With `restart_at`, the host is dropped after that many turns of
/// each conversation and a new host reopens the session from disk (engine state included).
pub async fn replay_checked(
    path: &Path,
    window: u64,
    max_sessions: usize,
    engine: Option<&Path>,
    restart_at: Option<usize>,
    dir: &Path,
) -> Checked {
    replay_checked_with(path, &config(window, engine), max_sessions, restart_at, dir).await
}

/// [`replay_checked`] with a host built from `config` (e.g. another summarizer).
pub async fn replay_checked_with(
    path: &Path,
    config: &Config,
    max_sessions: usize,
    restart_at: Option<usize>,
    dir: &Path,
) -> Checked {
    let new_host = || Arc::new(Host::new(config.clone()).expect("host"));
    let mut host = new_host();
    let imported = import(path).expect("import");
    assert!(imported.problems.is_empty(), "{:?}", imported.problems);
    let mut checked = Checked::default();
    for (n, source) in imported.sessions.into_iter().take(max_sessions).enumerate() {
        let file = dir.join(format!("s{n}.jsonl"));
        let mut spec = SessionSpec::new(format!("s{n}"), &file);
        spec.system_prompt = source.system_prompt.clone();
        let mut session = host.create_session(spec.clone()).await.expect("session");
        let originals = source.messages.clone();
        let (preamble, turns) = split_turns(source.messages);
        session.record(preamble).await.expect("record");
        for (t, recorded) in turns.into_iter().enumerate() {
            if restart_at == Some(t) {
                session.close().await.expect("close before restart");
                drop(session);
                host = new_host();
                session = host.open_session(spec.clone()).await.expect("reopen");
            }
            let (assemblies, stats) = drive_recorded(&session, recorded).await;
            for a in &assemblies {
                checked.calls.push(check_assembly(path, n, t + 1, a));
            }
            assert!(
                !stats.fallback,
                "{} session {n} turn {}: fell back",
                path.display(),
                t + 1
            );
            checked.turns += 1;
            checked.compactions += stats.compactions as usize;
        }
        session.close().await.expect("close");
        assert!(
            host.quarantine().all().is_empty(),
            "{:?}",
            host.quarantine().all()
        );
        checked.summaries_checked += check_transcript_on_disk(&file, &originals);
        checked.files.push(file);
    }
    checked
}

/// Drives one recorded turn through `session` with the library's turn driver; returns every
/// model call's assembly and the turn's stats (a session error fails the test, naming where).
pub async fn drive_recorded(
    session: &SessionHandle,
    recorded: RecordedTurn,
) -> (Vec<Assembly>, TurnStats) {
    session
        .with(move |s| {
            let mut assemblies = Vec::new();
            let driven = drive_turn(s, recorded, |_, _, a| {
                assemblies.push(a.clone());
                Ok::<(), Infallible>(())
            });
            driven.map(|d| (assemblies, d.stats))
        })
        .await
        .expect("session call")
        .unwrap_or_else(|fault| panic!("turn failed: {fault:?}"))
}

pub fn check_assembly(path: &Path, session: usize, turn: usize, a: &Assembly) -> Call {
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
    assert!(
        !a.fallback,
        "{} session {session} turn {turn}: fell back",
        path.display()
    );
    Call {
        tokens: a.assembled_tokens,
        ids: a.messages.iter().map(|m| m.id.clone()).collect(),
        addition: a.system_prompt_addition.clone(),
    }
}

/// The stored file holds every original message in order, plus summaries; each summary keeps
/// the UUIDs and URLs of the span it replaced or says how many identifiers it left out.
pub fn check_transcript_on_disk(file: &Path, originals: &[Message]) -> usize {
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

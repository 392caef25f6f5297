//! A thousand sessions at once in one process: a Lua and a Rhai engine and their hostile twins
//! (which fail on some sessions mid-run and are quarantined while the others are mid-turn).
//! Every turn completes, no canary crosses from one session into another's context or state,
//! a clean engine is never quarantined, and the memory an idle session holds is bounded.
//!
//! The workload runs in a child process (this test binary, one test) so that its resident-set
//! figures are its own, not those of the tests running beside it, once per durable session
//! backend (`each_backend!`): JSONL files, one SQLite database, and a Postgres schema of the
//! test's own (the parent makes and drops it; the child is told its name).

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is the failure report

use std::path::{Path, PathBuf};
use std::sync::Arc;

use ctxhost::config::{Config, Entry};
use ctxhost::contract::message::Message;
use ctxhost::runtime::{Host, SessionSpec};
use ctxhost::session::TurnInput;
use ctxhost::store::Backend;
use ctxhost::transcript::Durability;

use crate::common::backends::{Kind, Place};

const SESSIONS: usize = 1_000;
const TURNS: usize = 4;
/// What an idle session may hold (its messages, its engine instance and state, its store).
const IDLE_SESSION_CEILING: u64 = 1 << 20;
const INNER: &str = "CTXHOST_CONCURRENCY_INNER";
/// The Postgres schema the child keeps its sessions in (the parent's scratch schema).
const SCHEMA: &str = "CTXHOST_CONCURRENCY_SCHEMA";

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name)
}

fn host(engine: &str) -> Arc<Host> {
    let mut config = Config::default();
    config.host.window = 1_500;
    config.host.durability = Durability::None;
    config.plugins.slots.context_engine = Some("canary".into());
    config.plugins.entries.insert(
        "canary".into(),
        Entry {
            path: Some(fixture(engine)),
            ..Entry::default()
        },
    );
    Arc::new(Host::new(config).expect("host"))
}

fn resident_bytes() -> u64 {
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap_or_default();
    let pages: u64 = statm
        .split_whitespace()
        .nth(1)
        .and_then(|p| p.parse().ok())
        .unwrap_or(0);
    pages * 4096
}

/// Every canary (`canary-<session>-<turn>`) in `text` belongs to session `sid`.
fn assert_own_canaries(text: &str, sid: usize, place: &str) {
    for (at, _) in text.match_indices("canary-") {
        let rest = &text[at + "canary-".len()..];
        let owner: String = rest.chars().take_while(char::is_ascii_digit).collect();
        assert_eq!(
            owner,
            sid.to_string(),
            "session {sid}: {place} carries another session's canary"
        );
    }
}

/// One session's turns; returns the handle so the session stays open (idle) afterwards.
async fn converse(
    host: Arc<Host>,
    backend: Arc<dyn Backend>,
    sid: usize,
    hostile: bool,
) -> ctxhost::runtime::SessionHandle {
    let spec = SessionSpec::new(format!("s{sid}"), "");
    let session = host.open_in(backend, spec).await.expect("session");
    for t in 0..TURNS {
        let attack = if hostile && (sid / 4).is_multiple_of(12) && t == 2 {
            " ATTACK"
        } else {
            ""
        };
        let text = format!(
            "turn {t} canary-{sid}-{t} please go on{attack} {}",
            "word ".repeat(40 + (sid * 7 + t * 13) % 120)
        );
        let ctx = session
            .begin_turn(TurnInput {
                user: Message::user(text),
                is_heartbeat: false,
            })
            .await
            .unwrap_or_else(|e| panic!("session {sid} turn {t}: {e}"));
        assert!(
            ctx.assembled_tokens <= ctx.token_budget,
            "session {sid} turn {t}: over budget"
        );
        for m in &ctx.messages {
            assert_own_canaries(&m.text(), sid, "a message");
        }
        let addition = ctx.system_prompt_addition.clone().unwrap_or_default();
        assert_own_canaries(&addition, sid, "the systemPromptAddition");
        if !ctx.fallback {
            assert!(
                addition.starts_with(&format!("session s{sid} saw")),
                "session {sid}: the engine's state names another session: {addition}"
            );
        }
        session
            .end_turn(vec![Message::assistant(format!(
                "reply to canary-{sid}-{t}: {}",
                "done ".repeat(30)
            ))])
            .await
            .unwrap_or_else(|e| panic!("session {sid} end of turn {t}: {e}"));
    }
    session
}

each_backend! { durable:
    a_thousand_concurrent_sessions_keep_to_themselves => thousand_sessions_on;
}

fn thousand_sessions_on(place: &Place) {
    let mut child = std::process::Command::new(std::env::current_exe().expect("test binary"));
    if let Some(pg) = place.pg() {
        child
            .env(SCHEMA, &pg.schema)
            .env("CTXHOST_TEST_PG", &pg.url);
    }
    let out = child
        .args([
            "concurrency::thousand_sessions_workload",
            "--exact",
            "--ignored",
            "--nocapture",
            "--test-threads",
            "1",
        ])
        .env(INNER, place.kind.name())
        .output()
        .expect("run the workload");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "the workload failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let per_session: u64 = stdout
        .lines()
        .find_map(|l| l.split_once("idle-session-bytes=").map(|(_, v)| v))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("no figure in the workload's output:\n{stdout}"));
    assert!(
        per_session < IDLE_SESSION_CEILING,
        "an idle session holds {per_session} bytes (ceiling {IDLE_SESSION_CEILING})"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "run by a_thousand_concurrent_sessions_keep_to_themselves in its own process"]
async fn thousand_sessions_workload() {
    let Some(kind) = std::env::var(INNER).ok().and_then(|k| Kind::named(&k)) else {
        return;
    };
    let dir = tempfile::tempdir().expect("tempdir");
    let backend = match kind {
        Kind::Postgres => crate::common::backends::postgres(
            &std::env::var("CTXHOST_TEST_PG").expect("the server"),
            &std::env::var(SCHEMA).expect("the parent's schema"),
        ),
        _ => kind.open(dir.path()),
    };
    let hosts = [
        (host("lua/canary.lua"), false),
        (host("rhai/canary.rhai"), false),
        (host("lua/canary.lua"), true),
        (host("rhai/canary.rhai"), true),
    ];
    let before = resident_bytes();
    let mut tasks = tokio::task::JoinSet::new();
    for sid in 0..SESSIONS {
        let (host, hostile) = &hosts[sid % hosts.len()];
        tasks.spawn(converse(
            Arc::clone(host),
            Arc::clone(&backend),
            sid,
            *hostile,
        ));
    }
    let mut idle = Vec::with_capacity(SESSIONS);
    while let Some(done) = tasks.join_next().await {
        idle.push(done.expect("a session task panicked"));
    }
    let after = resident_bytes();
    assert_eq!(idle.len(), SESSIONS);

    for (host, hostile) in &hosts {
        let failure = host.engine_failure();
        if *hostile {
            let e = failure.unwrap_or_else(|| {
                panic!(
                    "a hostile engine is quarantined; quarantine: {:?}",
                    host.quarantine().all()
                )
            });
            assert!(e.to_string().contains("attacked"), "{e}");
        } else {
            assert!(failure.is_none(), "a clean engine failed: {failure:?}");
        }
    }
    drop(idle);
    // No message lost: every session's store holds its TURNS user messages and replies.
    for sid in (0..SESSIONS).step_by(97) {
        let stored = backend.open(&format!("s{sid}"), "").unwrap().messages;
        let messages: String = stored.iter().map(|m| m.text() + "\n").collect();
        assert_own_canaries(&messages, sid, "the store");
        for t in 0..TURNS {
            assert_eq!(
                messages.matches(&format!("canary-{sid}-{t} ")).count(),
                1,
                "session {sid} turn {t} request stored once"
            );
            assert_eq!(
                messages.matches(&format!("canary-{sid}-{t}:")).count(),
                1,
                "session {sid} turn {t} reply stored once"
            );
        }
    }
    let per_session = after.saturating_sub(before) / SESSIONS as u64;
    println!("idle-session-bytes={per_session}");
}

//! Hostile and broken engines through the whole host: every failure kind quarantines the
//! engine with the right classification, the failing call re-runs on `legacy` so every turn
//! completes, and the transcript on disk holds exactly the original messages (plus summaries).
//! The attack scripts are the adapter tests' fixtures (`tests/fixtures/lua/`, and their Rhai
//! twins under `tests/fixtures/rhai/`: the same host path for both languages).
//!
//! [`attacks`] holds the hostile engines (each one's kind, time to containment and peak memory
//! measured one at a time in a child process), [`guards`] the native-step guards and limit
//! ceilings.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is the failure report

use crate::common;
use crate::common::engine::Lang;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use ctxhost::EngineErrorKind;
use ctxhost::config::FailurePolicy;
use ctxhost::config::{Config, Entry};
use ctxhost::contract::ContextMode;
use ctxhost::contract::message::Message;
use ctxhost::runtime::{Host, SessionSpec};
use ctxhost::session::TurnInput;
use ctxhost::tools::replay::{ReplayOptions, replay};
use ctxhost::transcript::import;
use serde_json::{Value, json};

fn fixture(name: &str) -> PathBuf {
    let lang = Path::new(name)
        .extension()
        .and_then(|e| e.to_str())
        .unwrap_or("lua");
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(lang)
        .join(name)
}

/// The grace after a deadline before a stuck worker is abandoned, in these tests.
const GRACE_MS: u64 = 1_000;

fn host(script: &str, id: &str, entry_config: Value, window: u64) -> Arc<Host> {
    let mut config = Config::default();
    config.host.window = window;
    config.host.limits.script.deadline_ms = 100;
    config.host.limits.script.grace_ms = GRACE_MS;
    config.host.limits.script.memory_bytes = 64 << 20;
    config.plugins.slots.context_engine = Some(id.into());
    config.plugins.entries.insert(
        id.into(),
        Entry {
            path: Some(fixture(script)),
            config: entry_config,
            ..Entry::default()
        },
    );
    Arc::new(Host::new(config).expect("host"))
}

/// Replays the small Claude Code transcript through a host; returns the engine's first failure
/// and the engine time of the turn it failed in (its time to containment).
async fn replay_with(host: Arc<Host>, id: &str) -> (ctxhost::EngineError, f64) {
    let path = common::shared_dir().join("data/transcripts/fasthooks-sample_main_transcript.jsonl");
    let imported = import(&path).expect("import");
    let originals = imported.sessions[0].messages.clone();
    let user_turns = originals
        .iter()
        .filter(|m| m.role().as_str() == "user")
        .count() as u64;
    let dir = tempfile::tempdir().expect("tempdir");
    let opts = ReplayOptions {
        out_dir: dir.path().to_path_buf(),
        concurrency: 1,
        contexts: false,
    };
    let mut reports = Vec::new();
    let summary = replay(Arc::clone(&host), &path, imported, &opts, |t| {
        reports.push(t.clone())
    })
    .await
    .expect("the replay completes despite the engine");
    assert_eq!(summary.turns, user_turns, "every turn completes");
    assert!(reports.iter().all(|r| r.assembled_tokens <= r.token_budget));
    assert!(
        reports
            .last()
            .is_some_and(|r| r.fallback && r.quarantined && r.engine == "legacy")
    );
    let q = summary.quarantine.expect("quarantine in the summary");
    assert_eq!(q.engine, id);
    common::replay::check_transcript_on_disk(&summary.session_files[0], &originals);
    let failed_turn = reports
        .iter()
        .find(|r| r.fallback)
        .map_or(0.0, |r| r.engine_ms);
    let failure = host.quarantine().first_failure(id).expect("first failure");
    (failure, failed_turn)
}

mod attacks;
mod guards;

/// A runtime error thrown in `method` on the first turn it runs.
async fn throw_in(lang: Lang, method: &str) {
    let h = host(
        &format!("factory_engine.{lang}"),
        "thrower",
        json!({ "id": "thrower", "throwIn": method }),
        200_000,
    );
    let (e, _) = replay_with(h, "thrower").await;
    assert_eq!(e.kind, EngineErrorKind::Runtime, "{method}: {e}");
    assert_eq!(e.op, method, "{e}");
    assert!(e.message.contains(&format!("boom in {method}")), "{e}");
    assert!(
        e.location.and_then(|l| l.line).is_some(),
        "a line for {method}"
    );
}

/// A throw in each lifecycle method a replay calls, in both languages:
/// `lifecycle::$name::{lua,rhai}`.
mod lifecycle {
    use super::*;

    both_languages! { async:
        bootstrap => throw_in, "bootstrap";
        ingest_batch => throw_in, "ingestBatch";
        assemble => throw_in, "assemble";
        after_turn => throw_in, "afterTurn";
        commit_turn => throw_in, "commitTurn";
        maintain => throw_in, "maintain";
    }
}

/// Drives one session by hand for the calls a replay does not make.
async fn session_with(
    script: &str,
    method: &str,
    policy: FailurePolicy,
) -> (
    Arc<Host>,
    ctxhost::runtime::SessionHandle,
    tempfile::TempDir,
) {
    let h = host(
        script,
        "thrower",
        json!({ "id": "thrower", "throwIn": method }),
        200_000,
    );
    let dir = tempfile::tempdir().expect("tempdir");
    let mut cfg = h.config().clone();
    cfg.host.failure_policy = policy;
    let h = Arc::new(Host::new(cfg).expect("host"));
    let s = h
        .create_session(SessionSpec::new("s", dir.path().join("s.jsonl")))
        .await
        .expect("session");
    s.begin_turn(TurnInput {
        user: Message::user("hello"),
        is_heartbeat: false,
    })
    .await
    .expect("turn");
    s.end_turn(vec![Message::assistant("hi")])
        .await
        .expect("end");
    (h, s, dir)
}

both_languages! { async:
    a_throwing_compact_falls_back_to_builtin_compaction,
    subagent_hooks_failures_quarantine_and_rollback_runs,
    strict_policy_returns_the_error_and_does_not_quarantine,
    unmet_host_requirements_fail_closed_without_quarantine,
}

async fn a_throwing_compact_falls_back_to_builtin_compaction(lang: Lang) {
    let script = format!("factory_engine.{lang}");
    let (h, s, _dir) = session_with(&script, "compact", FailurePolicy::Fallback).await;
    let r = s.compact(None).await.expect("compact answered by legacy");
    assert!(r.ok, "{r:?}");
    let e = h
        .quarantine()
        .first_failure("thrower")
        .expect("quarantined");
    assert_eq!(
        (e.op.as_str(), e.kind),
        ("compact", EngineErrorKind::Runtime)
    );
}

async fn subagent_hooks_failures_quarantine_and_rollback_runs(lang: Lang) {
    let script = format!("factory_engine.{lang}");
    let (h, s, _dir) = session_with(&script, "rollback", FailurePolicy::Fallback).await;
    let handle = s
        .with(|s| s.prepare_subagent_spawn("child", ContextMode::Fork, None))
        .await
        .expect("join")
        .expect("prepare");
    let handle = handle.expect("the engine returned a rollback");
    s.with(move |s| s.subagent_spawn_failed(handle))
        .await
        .expect("join")
        .expect("rollback");
    let e = h
        .quarantine()
        .first_failure("thrower")
        .expect("the rollback threw");
    assert!(e.message.contains("boom in rollback"), "{e}");
}

async fn strict_policy_returns_the_error_and_does_not_quarantine(lang: Lang) {
    let script = format!("factory_engine.{lang}");
    let mut config = host(
        &script,
        "thrower",
        json!({ "id": "thrower", "throwIn": "afterTurn" }),
        200_000,
    )
    .config()
    .clone();
    config.host.failure_policy = FailurePolicy::Strict;
    let h = Host::new(config).expect("host");
    let dir = tempfile::tempdir().expect("tempdir");
    let s = h
        .create_session(SessionSpec::new("s", dir.path().join("s.jsonl")))
        .await
        .expect("session");
    s.begin_turn(TurnInput {
        user: Message::user("hello"),
        is_heartbeat: false,
    })
    .await
    .expect("turn");
    let err = s
        .end_turn(vec![Message::assistant("hi")])
        .await
        .expect_err("strict");
    let text = err.to_string();
    assert!(
        text.starts_with("afterTurn failed in engine \"thrower\""),
        "{text}"
    );
    assert!(text.contains(&format!("{script}:")), "{text}");
    assert!(h.quarantine().all().is_empty());
}

async fn unmet_host_requirements_fail_closed_without_quarantine(lang: Lang) {
    let dir = tempfile::tempdir().expect("tempdir");
    let script = dir.path().join(format!("needs_llm.{lang}"));
    let source = if lang == Lang::Lua {
        r#"return { info = { id = "needs-llm", name = "Needs an LLM",
             hostRequirements = { ["agent-run"] = { requiredCapabilities = { "runtime-llm-complete" },
                                                    unsupportedMessage = "Run it on OpenClaw." } } },
           ingest = function(p) return { ingested = true } end,
           assemble = function(p) return { messages = p.messages, estimatedTokens = 0 } end,
           compact = function(p) return host.delegateCompaction(p) end }"#
    } else {
        r#"fn info() {
               #{ id: "needs-llm", name: "Needs an LLM",
                  hostRequirements: #{ "agent-run": #{ requiredCapabilities: ["runtime-llm-complete"],
                                                       unsupportedMessage: "Run it on OpenClaw." } } }
           }
           fn ingest(p) { #{ ingested: true } }
           fn assemble(p) { #{ messages: p.messages, estimatedTokens: 0 } }
           fn compact(p) { host::delegateCompaction(p) }"#
    };
    std::fs::write(&script, source).expect("write");
    let mut config = Config::default();
    config.plugins.slots.context_engine = Some("needs-llm".into());
    config.plugins.entries.insert(
        "needs-llm".into(),
        Entry {
            path: Some(script),
            ..Entry::default()
        },
    );
    let h = Host::new(config).expect("host");
    let s = h
        .create_session(SessionSpec::new("s", dir.path().join("s.jsonl")))
        .await
        .expect("session");
    let err = s
        .begin_turn(TurnInput {
            user: Message::user("hi"),
            is_heartbeat: false,
        })
        .await
        .expect_err("fail closed");
    let text = err.to_string();
    assert!(
        text.contains("Missing host capabilities: runtime-llm-complete"),
        "{text}"
    );
    assert!(text.contains("Run it on OpenClaw."), "{text}");
    assert!(
        h.quarantine().all().is_empty(),
        "fail closed is never a quarantine"
    );
}

/// An engine that leaves out the current request and the newest summary: the host puts both
/// back into every model call, within the budget (see `guarantees`).
#[test]
fn the_host_puts_back_what_a_forgetful_engine_leaves_out() {
    for engine in [
        "tests/fixtures/lua/forgetful.lua",
        "tests/fixtures/rhai/forgetful.rhai",
    ] {
        let c = crate::guarantees::replay(
            crate::guarantees::CODEX,
            3_000,
            Some(&crate::guarantees::engine_path(engine)),
        );
        assert!(c.problems.is_empty(), "{engine}: {:?}", c.problems);
        assert!(c.put_back > 0, "{engine}: the host had to repair calls");
    }
}

/// One step of a tool loop: an assistant tool call and its (long) result.
fn tool_step(n: usize, lines: usize) -> Vec<Message> {
    let id = format!("call_{n}");
    let text: String = (0..lines)
        .map(|i| format!("src/parser.rs:{i}: assertion failed in parse_expr_{i}\n"))
        .collect();
    [
        json!({"role":"assistant","content":[
            {"type":"toolCall","id":id,"name":"bash","arguments":{"command":"cargo test"}}],
            "stopReason":"toolUse"}),
        json!({"role":"toolResult","toolCallId":id,"toolName":"bash",
            "content":[{"type":"text","text":text}],"isError":true}),
    ]
    .into_iter()
    .map(|v| serde_json::from_value(v).expect("message"))
    .collect()
}

both_languages! { async:
    a_compaction_that_drops_the_conversation_is_refused,
}

/// Issue 10 item 6: a summary that drops the pending request and the open tool calls (no
/// `firstKeptEntryId`, or one on the newest tool result) is an invalid result: the engine is
/// quarantined, `legacy` compacts instead, and the next model call still has the request and
/// the tool call the model must answer.
async fn a_compaction_that_drops_the_conversation_is_refused(lang: Lang) {
    for attack in ["no_first_kept", "keep_last"] {
        let h = host(
            &format!("drops_conversation.{lang}"),
            "drops-conversation",
            json!({ "attack": attack }),
            3_000,
        );
        let dir = tempfile::tempdir().expect("tempdir");
        let s = h
            .create_session(SessionSpec::new("s", dir.path().join("s.jsonl")))
            .await
            .expect("session");
        let request = "Fix the failing test in src/parser.rs";
        s.begin_turn(TurnInput {
            user: Message::user(request),
            is_heartbeat: false,
        })
        .await
        .expect("turn");
        let a = s
            .continue_turn(tool_step(1, 400))
            .await
            .expect("the tool loop goes on, on legacy");
        let e = h
            .quarantine()
            .first_failure("drops-conversation")
            .unwrap_or_else(|| panic!("{attack}: the dropping result was accepted"));
        assert_eq!(
            (e.op.as_str(), e.kind),
            ("compact", EngineErrorKind::InvalidResult),
            "{attack}: {e}"
        );
        assert!(e.message.contains("open tool calls"), "{attack}: {e}");
        assert!(
            a.messages.iter().any(|m| m.text().contains(request)),
            "{attack}: the request reaches the model"
        );
        assert!(
            a.messages
                .iter()
                .any(|m| m.tool_calls().any(|c| c.id == "call_1")),
            "{attack}: the open tool call reaches the model"
        );
        assert!(a.assembled_tokens <= a.token_budget, "{attack}");
    }
}

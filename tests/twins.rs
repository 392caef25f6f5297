//! Each example engine in `scripts/` and its Rhai twin make the same decisions: driven through
//! the real adapters call by call (ingest every message, assemble at every user message and
//! every tool call, at several budgets), the two return the same messages, `estimatedTokens`
//! and `systemPromptAddition`, and keep the same state. (`tests/conformance.rs` compares whole
//! replays through the host; this compares everything an engine returns.)

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is a failure

use crate::common;
use crate::sessions;

use std::path::PathBuf;
use std::sync::Arc;

use serde_json::{Value as Json, json};

use common::engine::{instance_of, services};
use ctxhost::HostCall;
use ctxhost::contract::message::Message;
use ctxhost::contract::{AssembleParams, CompactParams, CompactionTarget, IngestParams};
use ctxhost::testing::RecallIndex;

fn script(file: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("scripts")
        .join(file)
}

/// An empty Lua table and an empty Rhai array are the same state.
fn norm(j: &Json) -> Json {
    match j {
        Json::Object(m) if m.is_empty() => Json::Array(Vec::new()),
        Json::Object(m) => Json::Object(m.iter().map(|(k, v)| (k.clone(), norm(v))).collect()),
        Json::Array(a) => Json::Array(a.iter().map(norm).collect()),
        other => other.clone(),
    }
}

/// Assemblies that recalled stored messages (only `recall` does), so its test knows the
/// recall path was compared and not only skipped.
static RECALLED: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// Drives both twins of `engine` over `messages` at `budget`; returns the assemblies compared.
fn drive(engine: &str, config: &Json, messages: &[Arc<Message>], budget: u64) -> usize {
    let services = services();
    let mut lua = instance_of(&script(&format!("{engine}.lua")), config);
    let mut rhai = instance_of(&script(&format!("{engine}.rhai")), config);
    let mut compared = 0;
    // The stored messages behind `host.search` / `host.fetch`, appended as the session grows.
    let recall = Arc::new(RecallIndex::default());
    for k in 0..messages.len() {
        recall.add(&messages[k..=k]);
        let call = HostCall::new(
            Arc::from(engine),
            Arc::from("s"),
            Arc::new(messages[..=k].to_vec()),
            Arc::clone(&services),
            Arc::new(config.clone()),
            budget,
        )
        .with_recall(Arc::clone(&recall));
        let ip = IngestParams {
            session_id: "s".into(),
            session_key: None,
            message: Arc::clone(&messages[k]),
            is_heartbeat: false,
        };
        let a = lua.ingest(&call, &ip).expect("lua ingest");
        let b = rhai.ingest(&call, &ip).expect("rhai ingest");
        assert_eq!(a, b, "{engine}: ingest of message {k}");
        let m = &messages[k];
        if !(m.starts_turn() || m.tool_calls().next().is_some()) {
            continue;
        }
        let ap = AssembleParams {
            session_id: "s".into(),
            session_key: None,
            token_budget: budget,
            prompt: None,
            model: None,
            available_tools: None,
            runtime_settings: None,
        };
        let a = lua.assemble(&call, &ap).expect("lua assemble");
        let b = rhai.assemble(&call, &ap).expect("rhai assemble");
        let at = format!("{engine} at budget {budget}, message {k}");
        assert_eq!(
            serde_json::to_value(&a.messages).unwrap(),
            serde_json::to_value(&b.messages).unwrap(),
            "{at}: messages"
        );
        assert_eq!(
            a.estimated_tokens, b.estimated_tokens,
            "{at}: estimatedTokens"
        );
        assert_eq!(
            a.system_prompt_addition, b.system_prompt_addition,
            "{at}: systemPromptAddition"
        );
        if a.system_prompt_addition
            .as_deref()
            .is_some_and(|s| s.contains("<recalled id="))
        {
            RECALLED.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
        assert_eq!(
            norm(&lua.save_state().unwrap()),
            norm(&rhai.save_state().unwrap()),
            "{at}: state"
        );
        compared += 1;
    }
    {
        let call = HostCall::new(
            Arc::from(engine),
            Arc::from("s"),
            Arc::new(messages.to_vec()),
            Arc::clone(&services),
            Arc::new(config.clone()),
            budget,
        );
        let cp = CompactParams {
            session_id: "s".into(),
            session_key: None,
            token_budget: budget,
            force: true,
            current_token_count: 100_000,
            compaction_target: CompactionTarget::Budget,
            custom_instructions: None,
            runtime_settings: None,
        };
        let a = lua.compact(&call, &cp).expect("lua compact");
        let b = rhai.compact(&call, &cp).expect("rhai compact");
        assert_eq!(a, b, "{engine}: compact");
        if engine == "hierarchical" || engine == "recall" {
            // It condenses the context itself (in both languages), so there is something to check.
            assert!(
                a.compacted && a.result.as_ref().is_some_and(|r| r.summary.is_some()),
                "{a:?}"
            );
        }
        assert_eq!(
            norm(&lua.save_state().unwrap()),
            norm(&rhai.save_state().unwrap()),
            "{engine}: state after compact"
        );
    }
    compared
}

/// A synthetic session with pinned facts and big tool results, plus the first 300 messages of a
/// real coding session (ids assigned as the host would).
fn sessions() -> Vec<Vec<Arc<Message>>> {
    let mut raw = sessions::session(30);
    raw.insert(
        4,
        sessions::user("u-pin1", "[pin] the release branch is rel/2026-12"),
    );
    raw.insert(
        20,
        sessions::user("u-pin2", "remember [pin]: deploy host 10.0.0.7"),
    );
    let path = common::shared_dir().join("data/transcripts/pimono-large-session.jsonl");
    let imported = ctxhost::transcript::import::import(&path).expect("import");
    let real: Vec<Arc<Message>> = imported.sessions[0]
        .messages
        .iter()
        .take(300)
        .enumerate()
        .map(|(i, m)| {
            let mut m = m.clone();
            m.id = format!("e{i:05}");
            Arc::new(m)
        })
        .collect();
    vec![sessions::messages(&raw), real]
}

fn twins(engine: &str, config: Json) {
    let mut compared = 0;
    for s in sessions() {
        for budget in [2_000u64, 8_000] {
            compared += drive(engine, &config, &s, budget);
        }
    }
    assert!(compared > 100, "{engine}: compared {compared} assemblies");
}

#[test]
fn recent_turns() {
    twins("recent_turns", json!({}));
    twins("recent_turns", json!({"minTailMessages": 6}));
}

#[test]
fn delegating() {
    twins("delegating", json!({}));
}

#[test]
fn tool_pruner() {
    twins("tool_pruner", json!({}));
    twins(
        "tool_pruner",
        json!({"triggerRatio": 0.5, "keepTurns": 1, "softTrimChars": 500, "headChars": 100, "tailChars": 50}),
    );
}

#[test]
fn pinned_facts() {
    twins("pinned_facts", json!({}));
    twins(
        "pinned_facts",
        json!({"factsShare": 0.05, "summaryShare": 0.3, "maxFactChars": 20}),
    );
}

#[test]
fn hierarchical() {
    twins("hierarchical", json!({}));
    twins(
        "hierarchical",
        json!({"fanout": 2, "freshTailMessages": 3, "summaryShare": 0.3}),
    );
}

#[test]
fn recall() {
    twins("recall", json!({}));
    twins(
        "recall",
        json!({"fanout": 2, "freshTailMessages": 3, "summaryShare": 0.3, "recallShare": 0.2, "maxRecalled": 5}),
    );
    let recalled = RECALLED.load(std::sync::atomic::Ordering::Relaxed);
    assert!(recalled > 0, "no assembly recalled anything");
}

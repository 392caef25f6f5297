//! The Rhai adapter from outside: real scripts under `tests/fixtures/rhai/`, driven through the
//! `EngineFactory` / `Engine` traits with a `HostCall` over a small real session. The same cases
//! as `tests/lua_engine.rs`, plus what is particular to Rhai (operation budget, `eval`, memory
//! bombs without engine size limits, in-place edits of read-only messages).

// Test helpers outside `#[test]` functions may unwrap: a failure is a test failure.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use ctxhost::compaction::CompactionSettings;
use ctxhost::contract::{
    AfterTurnParams, AssembleParams, BootstrapParams, CommitStatus, CommitTurnParams,
    CompactParams, CompactionTarget, ContextMode, IngestBatchParams, IngestParams, MaintainParams,
    MaintainReason, Method, ResultLimits, SubagentEndReason, SubagentEndedParams,
    SubagentSpawnParams,
};
use ctxhost::engine::rhai::{LoadOptions, load, load_factory};
use ctxhost::engine::{Engine, InstanceContext};
use ctxhost::error::{Disposition, EngineError, EngineErrorKind};
use ctxhost::host::{HostCall, SessionServices};
use ctxhost::message::{Message, MessageBody};
use ctxhost::sandbox::Limits;
use ctxhost::summarize::BuiltinSummarizer;
use ctxhost::tokens::{Estimate, TokenCache};
use serde_json::{Value, json};

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/rhai")
        .join(name)
}

fn test_limits() -> Limits {
    Limits {
        deadline_ms: 150,
        grace_ms: 2000,
        memory_bytes: 32 << 20,
        ..Limits::default()
    }
}

fn opts(config: Value) -> LoadOptions {
    LoadOptions {
        config: Arc::new(config),
        limits: test_limits(),
        agent_dir: "/agent".into(),
        workspace_dir: "/work".into(),
        ..LoadOptions::default()
    }
}

fn services() -> Arc<SessionServices> {
    Arc::new(SessionServices {
        tokens: TokenCache::new(Arc::new(Estimate)),
        summarizer: Arc::new(BuiltinSummarizer::new()),
        compaction: CompactionSettings::default(),
        limits: ResultLimits::default(),
    })
}

/// A small real session: user, assistant with a tool call, its result, a reply, a new question.
fn session() -> Vec<Arc<Message>> {
    let raw = [
        json!({"id": "m1", "role": "user", "content": "Please read /etc/hosts", "timestamp": 1}),
        json!({"id": "m2", "role": "assistant", "content": [
            {"type": "text", "text": "Reading it."},
            {"type": "toolCall", "id": "call-1", "name": "read", "arguments": {"path": "/etc/hosts"}}
        ], "stopReason": "toolUse", "timestamp": 2}),
        json!({"id": "m3", "role": "toolResult", "toolCallId": "call-1", "toolName": "read",
               "content": [{"type": "text", "text": "127.0.0.1 localhost"}], "isError": false, "timestamp": 3}),
        json!({"id": "m4", "role": "assistant", "content": [{"type": "text", "text": "It maps localhost."}],
               "stopReason": "stop", "timestamp": 4}),
        json!({"id": "m5", "role": "user", "content": "Thanks. Now summarize.", "timestamp": 5}),
    ];
    raw.into_iter()
        .map(|v| Arc::new(serde_json::from_value::<Message>(v).unwrap()))
        .collect()
}

fn host_call(ctx: &[Arc<Message>], config: Value) -> HostCall {
    HostCall::new(
        "test".into(),
        "s1".into(),
        Arc::new(ctx.to_vec()),
        services(),
        Arc::new(config),
        8000,
    )
}

fn cx(config: Value) -> InstanceContext {
    InstanceContext {
        config: Arc::new(config),
        agent_dir: "/agent".into(),
        workspace_dir: "/work".into(),
        session_id: "s1".into(),
    }
}

fn instance(file: &str, config: Value) -> Box<dyn Engine> {
    let f = load(&fixture(file), &opts(config.clone())).unwrap_or_else(|e| panic!("{e}"));
    f.instantiate(&cx(config)).unwrap_or_else(|e| panic!("{e}"))
}

fn assemble_params() -> AssembleParams {
    AssembleParams {
        session_id: "s1".into(),
        session_key: Some("key".into()),
        token_budget: 8000,
        prompt: Some("Thanks".into()),
        model: None,
        available_tools: None,
        runtime_settings: None,
    }
}

fn compact_params() -> CompactParams {
    CompactParams {
        session_id: "s1".into(),
        session_key: None,
        token_budget: 8000,
        force: true,
        current_token_count: 100,
        compaction_target: CompactionTarget::Threshold,
        custom_instructions: None,
        runtime_settings: None,
    }
}

fn ingest_params(m: &Arc<Message>) -> IngestParams {
    IngestParams {
        session_id: "s1".into(),
        session_key: None,
        message: m.clone(),
        is_heartbeat: false,
    }
}

fn file_name(e: &EngineError) -> String {
    e.location
        .as_ref()
        .map(|l| l.file.clone())
        .unwrap_or_default()
}

fn line(e: &EngineError) -> Option<u32> {
    e.location.as_ref().and_then(|l| l.line)
}

fn column(e: &EngineError) -> Option<u32> {
    e.location.as_ref().and_then(|l| l.column)
}

// ---------------------------------------------------------------------------------------------
// Loading and validation

#[test]
fn loads_a_table_engine() {
    let f = load(&fixture("table_engine.rhai"), &opts(json!({}))).unwrap();
    assert_eq!(f.info().id, "table-engine");
    assert_eq!(f.info().owns_compaction, Some(false));
    assert!(f.warnings().is_empty(), "{:?}", f.warnings());
    assert_eq!(f.source(), Some(fixture("table_engine.rhai").as_path()));
    let e = f.instantiate(&cx(json!({}))).unwrap();
    assert!(e.defines(Method::AfterTurn));
    assert!(e.defines(Method::Dispose));
}

#[test]
fn loads_a_factory_engine_with_its_ctx() {
    let config = json!({"id": "from-config"});
    let mut e = instance("factory_engine.rhai", config.clone());
    assert_eq!(e.info().id, "from-config");
    assert_eq!(e.info().name, "Factory engine in /agent|/work");
    let ctx = session();
    let r = e
        .assemble(&host_call(&ctx, config), &assemble_params())
        .unwrap();
    assert_eq!(r.system_prompt_addition.as_deref(), Some("factory"));
    assert_eq!(r.messages.len(), 5);
}

#[test]
fn missing_file_is_missing_file() {
    let e = load(&fixture("nope.rhai"), &opts(json!({}))).unwrap_err();
    assert_eq!(e.kind, EngineErrorKind::MissingFile);
}

#[test]
fn syntax_error_names_file_line_and_column() {
    let e = load(&fixture("syntax_error.rhai"), &opts(json!({}))).unwrap_err();
    assert_eq!(e.kind, EngineErrorKind::Syntax, "{e}");
    assert!(file_name(&e).ends_with("syntax_error.rhai"));
    assert_eq!(line(&e), Some(4), "{e}");
    assert!(column(&e).is_some(), "{e}");
    assert!(e.to_string().contains("syntax_error.rhai:4:"), "{e}");
}

#[test]
fn runtime_error_at_load_names_file_line_and_column() {
    let e = load(&fixture("load_throws.rhai"), &opts(json!({}))).unwrap_err();
    assert_eq!(e.kind, EngineErrorKind::Runtime, "{e}");
    assert_eq!(line(&e), Some(3), "{e}");
    assert_eq!(column(&e), Some(1), "{e}");
    assert!(e.message.contains("load refuses"), "{e}");
}

#[test]
fn factory_throw_is_factory() {
    let e = load(
        &fixture("factory_engine.rhai"),
        &opts(json!({"throwIn": "factory"})),
    )
    .unwrap_err();
    assert_eq!(e.kind, EngineErrorKind::Factory, "{e}");
    assert!(e.message.contains("factory refuses"), "{e}");
    assert_eq!(line(&e), Some(4), "{e}");
}

#[test]
fn eval_is_disabled_at_compile_time() {
    let e = load(&fixture("eval.rhai"), &opts(json!({}))).unwrap_err();
    assert_eq!(e.kind, EngineErrorKind::Syntax, "{e}");
    assert_eq!(line(&e), Some(4), "{e}");
    assert!(e.message.contains("eval"), "{e}");
}

#[test]
fn a_lifecycle_function_with_the_wrong_arity_is_a_contract_error() {
    let e = load(&fixture("wrong_arity.rhai"), &opts(json!({}))).unwrap_err();
    assert_eq!(e.kind, EngineErrorKind::Contract, "{e}");
    assert!(
        e.message.contains("`assemble` must take 1 parameter"),
        "{e}"
    );
    assert_eq!(line(&e), Some(4), "{e}");
}

#[test]
fn missing_compact_is_a_contract_error() {
    let e = load(&fixture("missing_compact.rhai"), &opts(json!({}))).unwrap_err();
    assert_eq!(e.kind, EngineErrorKind::Contract);
    assert!(
        e.message.contains("required function `compact` is missing"),
        "{e}"
    );
    assert!(file_name(&e).ends_with("missing_compact.rhai"));
}

#[test]
fn afterturn_typo_is_a_warning_with_the_suggestion_and_line() {
    let f = load(&fixture("typo_afterturn.rhai"), &opts(json!({}))).unwrap();
    let w = f.warnings().join("\n");
    assert!(w.contains("unknown member `afterturn`"), "{w}");
    assert!(w.contains("did you mean `afterTurn`"), "{w}");
    assert!(w.contains("typo_afterturn.rhai:6:"), "{w}");
}

#[test]
fn bad_enum_is_a_contract_error_naming_the_field() {
    let e = load(&fixture("bad_enum.rhai"), &opts(json!({}))).unwrap_err();
    assert_eq!(e.kind, EngineErrorKind::Contract, "{e}");
    assert!(e.message.contains("turnMaintenanceMode"), "{e}");
    assert!(e.message.contains("sideways"), "{e}");
}

#[test]
fn configured_id_mismatch_warns_and_strict_fails() {
    let mut o = opts(json!({}));
    o.configured_id = Some("other".into());
    let f = load(&fixture("table_engine.rhai"), &o).unwrap();
    assert!(f.warnings().iter().any(|w| w.contains("differs")));
    o.strict = true;
    let e = load(&fixture("table_engine.rhai"), &o).unwrap_err();
    assert_eq!(e.kind, EngineErrorKind::Contract);
}

// ---------------------------------------------------------------------------------------------
// Lifecycle, state and the host API

#[test]
fn every_lifecycle_method_runs_and_state_persists_across_calls() {
    let mut e = instance("table_engine.rhai", json!({}));
    let ctx = session();
    let call = host_call(&ctx, json!({}));
    let b = e
        .bootstrap(
            &call,
            &BootstrapParams {
                session_id: "s1".into(),
                session_key: None,
                session_file: "/tmp/s1.jsonl".into(),
                runtime_settings: None,
            },
        )
        .unwrap();
    assert!(b.bootstrapped);
    assert!(e.ingest(&call, &ingest_params(&ctx[0])).unwrap().ingested);
    let batch = e
        .ingest_batch(
            &call,
            &IngestBatchParams {
                session_id: "s1".into(),
                session_key: None,
                messages: ctx[1..].to_vec(),
                is_heartbeat: false,
            },
        )
        .unwrap();
    assert_eq!(batch.ingested_count, 4);
    let r = e.assemble(&call, &assemble_params()).unwrap();
    assert_eq!(
        r.system_prompt_addition.as_deref(),
        Some("ingested=5 assembled=1 upper=ABC")
    );
    assert_eq!(r.estimated_tokens as u64, call.tokens_messages(&ctx));
    let r = e.assemble(&call, &assemble_params()).unwrap();
    assert_eq!(
        r.system_prompt_addition.as_deref(),
        Some("ingested=5 assembled=2 upper=ABC")
    );
    let c = e.compact(&call, &compact_params()).unwrap();
    assert!(c.ok);
    e.after_turn(
        &call,
        &AfterTurnParams {
            session_id: "s1".into(),
            session_key: None,
            pre_prompt_message_count: 4,
            token_budget: 8000,
            is_heartbeat: false,
            runtime_settings: None,
        },
    )
    .unwrap();
    let commit = |e: &mut Box<dyn Engine>| {
        e.commit_turn(
            &call,
            &CommitTurnParams {
                session_id: "s1".into(),
                session_key: None,
                advancement_key: "turn-1".into(),
                messages: ctx[4..].to_vec(),
            },
        )
        .unwrap()
        .unwrap()
        .status
    };
    assert_eq!(commit(&mut e), CommitStatus::Committed);
    assert_eq!(commit(&mut e), CommitStatus::Duplicate);
    let m = e
        .maintain(
            &call,
            &MaintainParams {
                session_id: "s1".into(),
                session_key: None,
                reason: MaintainReason::Turn,
                runtime_settings: None,
            },
        )
        .unwrap()
        .unwrap();
    assert_eq!(m.reason.as_deref(), Some("turn"));
    let handle = e
        .prepare_subagent_spawn(
            &call,
            &SubagentSpawnParams {
                session_id: "s1".into(),
                parent_session_key: "parent".into(),
                child_session_key: "child".into(),
                context_mode: ContextMode::Isolated,
                ttl_ms: None,
            },
        )
        .unwrap()
        .expect("a rollback handle");
    e.rollback_subagent_spawn(&call, handle).unwrap();
    e.on_subagent_ended(
        &call,
        &SubagentEndedParams {
            session_id: "s1".into(),
            child_session_key: "child".into(),
            reason: SubagentEndReason::Completed,
        },
    )
    .unwrap();
    e.dispose(&call).unwrap();
    e.dispose(&call).unwrap();
    let state = e.save_state().unwrap();
    assert_eq!(state["bootstrapped"], 1);
    assert_eq!(state["ingested"], 5);
    assert_eq!(state["lastRole"], "user");
    assert_eq!(state["afterTurn"], 5);
    assert_eq!(state["prePrompt"], 4);
    assert_eq!(state["commits"]["turn-1"], 1);
    assert_eq!(state["rolledBack"], "child");
    assert_eq!(state["ended"], "completed");
    assert_eq!(state["disposed"], 1, "dispose runs once");
}

#[test]
fn state_survives_save_new_instance_restore() {
    let ctx = session();
    let call = host_call(&ctx, json!({}));
    let mut a = instance("table_engine.rhai", json!({}));
    a.ingest(&call, &ingest_params(&ctx[0])).unwrap();
    a.ingest(&call, &ingest_params(&ctx[1])).unwrap();
    let saved = a.save_state().unwrap();
    // Through text, as a host restart would.
    let text = serde_json::to_string(&saved).unwrap();
    drop(a);
    let mut b = instance("table_engine.rhai", json!({}));
    b.restore_state(serde_json::from_str(&text).unwrap())
        .unwrap();
    let r = b.assemble(&call, &assemble_params()).unwrap();
    assert_eq!(
        r.system_prompt_addition.as_deref(),
        Some("ingested=2 assembled=1 upper=ABC")
    );
}

#[test]
fn resident_messages_map_back_to_the_same_arcs() {
    let ctx = session();
    let call = host_call(&ctx, json!({}));
    let mut e = instance("table_engine.rhai", json!({}));
    let r = e.assemble(&call, &assemble_params()).unwrap();
    assert_eq!(r.messages.len(), ctx.len());
    for (a, b) in r.messages.iter().zip(&ctx) {
        assert!(Arc::ptr_eq(a, b));
    }
    // After appending, the new context maps back too (the resident array grew by diff).
    let mut grown = ctx.clone();
    grown.push(Arc::new(
        serde_json::from_value(
            json!({"id": "m6", "role": "assistant", "content": [{"type": "text", "text": "ok"}]}),
        )
        .unwrap(),
    ));
    let r = e
        .assemble(&host_call(&grown, json!({})), &assemble_params())
        .unwrap();
    assert_eq!(r.messages.len(), 6);
    assert!(
        r.messages
            .iter()
            .zip(&grown)
            .all(|(a, b)| Arc::ptr_eq(a, b))
    );
    // After a compaction-shaped change ([summary, kept…]) the kept ones still map back.
    let summary: Arc<Message> = Arc::new(
        serde_json::from_value(json!({"id": "s", "role": "compactionSummary", "summary": "earlier", "tokensBefore": 10}))
            .unwrap(),
    );
    let compacted = vec![summary.clone(), grown[4].clone(), grown[5].clone()];
    let r = e
        .assemble(&host_call(&compacted, json!({})), &assemble_params())
        .unwrap();
    assert!(
        r.messages
            .iter()
            .zip(&compacted)
            .all(|(a, b)| Arc::ptr_eq(a, b))
    );
}

#[test]
fn copies_and_new_messages_are_converted() {
    let ctx = session();
    // A copy (`to_map()`) is converted, even when edited back to the original, as in Lua.
    let mut e = instance("table_engine.rhai", json!({"mode": "copy"}));
    let r = e
        .assemble(
            &host_call(&ctx, json!({"mode": "copy"})),
            &assemble_params(),
        )
        .unwrap();
    assert!(!Arc::ptr_eq(&r.messages[0], &ctx[0]));
    assert_eq!(*r.messages[0], *ctx[0]);

    let mut e = instance("table_engine.rhai", json!({"mode": "new"}));
    let r = e
        .assemble(&host_call(&ctx, json!({"mode": "new"})), &assemble_params())
        .unwrap();
    assert!(matches!(r.messages[0].body, MessageBody::User(_)));
    assert_eq!(r.messages[0].text(), "made up");

    let mut e = instance("table_engine.rhai", json!({"mode": "last2"}));
    let r = e
        .assemble(
            &host_call(&ctx, json!({"mode": "last2"})),
            &assemble_params(),
        )
        .unwrap();
    assert!(Arc::ptr_eq(&r.messages[0], &ctx[3]) && Arc::ptr_eq(&r.messages[1], &ctx[4]));
}

#[test]
fn host_repair_pairing_and_summarize_work_from_scripts() {
    // Orphan tool result: the repaired list drops it, the rest keep identity.
    let ctx = session();
    let orphaned = vec![ctx[0].clone(), ctx[2].clone(), ctx[3].clone()];
    let mut e = instance("table_engine.rhai", json!({"mode": "repair"}));
    let r = e
        .assemble(
            &host_call(&orphaned, json!({"mode": "repair"})),
            &assemble_params(),
        )
        .unwrap();
    assert_eq!(r.messages.len(), 2);
    assert!(Arc::ptr_eq(&r.messages[0], &ctx[0]) && Arc::ptr_eq(&r.messages[1], &ctx[3]));

    let mut e = instance("table_engine.rhai", json!({"mode": "summarize"}));
    let c = e
        .compact(
            &host_call(&ctx, json!({"mode": "summarize"})),
            &compact_params(),
        )
        .unwrap();
    assert!(c.reason.unwrap().starts_with("summarized"));
    let state = e.save_state().unwrap();
    assert!(state["summary"].as_str().is_some_and(|s| !s.is_empty()));
}

// ---------------------------------------------------------------------------------------------
// Failure kinds

fn runtime_failure(method: &str) -> EngineError {
    let config = json!({"throwIn": method});
    let mut e = instance("factory_engine.rhai", config.clone());
    let ctx = session();
    let call = host_call(&ctx, config);
    let out = match method {
        "bootstrap" => e
            .bootstrap(
                &call,
                &BootstrapParams {
                    session_id: "s1".into(),
                    session_key: None,
                    session_file: "f".into(),
                    runtime_settings: None,
                },
            )
            .map(|_| ()),
        "ingest" => e.ingest(&call, &ingest_params(&ctx[0])).map(|_| ()),
        "ingestBatch" => e
            .ingest_batch(
                &call,
                &IngestBatchParams {
                    session_id: "s1".into(),
                    session_key: None,
                    messages: ctx.clone(),
                    is_heartbeat: false,
                },
            )
            .map(|_| ()),
        "assemble" => e.assemble(&call, &assemble_params()).map(|_| ()),
        "compact" => e.compact(&call, &compact_params()).map(|_| ()),
        "afterTurn" => e.after_turn(
            &call,
            &AfterTurnParams {
                session_id: "s1".into(),
                session_key: None,
                pre_prompt_message_count: 1,
                token_budget: 8000,
                is_heartbeat: false,
                runtime_settings: None,
            },
        ),
        "commitTurn" => e
            .commit_turn(
                &call,
                &CommitTurnParams {
                    session_id: "s1".into(),
                    session_key: None,
                    advancement_key: "k".into(),
                    messages: ctx.clone(),
                },
            )
            .map(|_| ()),
        "maintain" => e
            .maintain(
                &call,
                &MaintainParams {
                    session_id: "s1".into(),
                    session_key: None,
                    reason: MaintainReason::Bootstrap,
                    runtime_settings: None,
                },
            )
            .map(|_| ()),
        "prepareSubagentSpawn" | "rollback" => {
            let p = SubagentSpawnParams {
                session_id: "s1".into(),
                parent_session_key: "p".into(),
                child_session_key: "c".into(),
                context_mode: ContextMode::Fork,
                ttl_ms: Some(1000),
            };
            e.prepare_subagent_spawn(&call, &p).and_then(|h| {
                let h = h.expect("handle");
                e.rollback_subagent_spawn(&call, h)
            })
        }
        "onSubagentEnded" => e.on_subagent_ended(
            &call,
            &SubagentEndedParams {
                session_id: "s1".into(),
                child_session_key: "c".into(),
                reason: SubagentEndReason::Swept,
            },
        ),
        "dispose" => e.dispose(&call),
        other => panic!("unknown method {other}"),
    };
    out.expect_err(method)
}

#[test]
fn runtime_error_in_each_lifecycle_method_is_runtime_with_line() {
    for method in [
        "bootstrap",
        "ingest",
        "ingestBatch",
        "assemble",
        "compact",
        "afterTurn",
        "commitTurn",
        "maintain",
        "prepareSubagentSpawn",
        "rollback",
        "onSubagentEnded",
        "dispose",
    ] {
        let e = runtime_failure(method);
        assert_eq!(e.kind, EngineErrorKind::Runtime, "{method}: {e}");
        assert_eq!(e.disposition(), Disposition::Quarantine);
        assert!(
            e.message.contains(&format!("boom in {method}")),
            "{method}: {e}"
        );
        assert!(
            file_name(&e).ends_with("factory_engine.rhai"),
            "{method}: {e}"
        );
        assert_eq!(line(&e), Some(10), "{method}: {e}");
        assert!(column(&e).is_some(), "{method}: {e}");
    }
}

fn attack_with(
    name: &str,
    limits: Limits,
) -> Result<ctxhost::contract::AssembleResult, EngineError> {
    let config = json!({"attack": name});
    let mut o = opts(config.clone());
    o.limits = limits;
    let f = load(&fixture("hostile.rhai"), &o).unwrap_or_else(|e| panic!("{e}"));
    let mut e = f.instantiate(&cx(config.clone())).unwrap();
    let ctx = session();
    e.assemble(&host_call(&ctx, config), &assemble_params())
}

fn attack(name: &str) -> EngineError {
    attack_with(name, test_limits()).expect_err(name)
}

fn assert_kind(name: &str, kind: EngineErrorKind) -> EngineError {
    let e = attack(name);
    assert_eq!(e.kind, kind, "{name}: {e}");
    assert!(file_name(&e).ends_with("hostile.rhai"), "{name}: {e}");
    e
}

#[test]
fn cpu_attacks_hit_the_deadline() {
    for name in ["loop", "try_loop", "while_true"] {
        let e = assert_kind(name, EngineErrorKind::Deadline);
        assert_eq!(e.disposition(), Disposition::Quarantine);
        assert!(e.message.contains("deadline"), "{name}: {e}");
        assert!(line(&e).is_some(), "{name}: {e}");
    }
}

#[test]
fn the_operation_budget_stops_a_loop_before_the_deadline() {
    let limits = Limits {
        deadline_ms: 20_000,
        max_operations: 200_000,
        ..test_limits()
    };
    for name in ["loop", "try_loop"] {
        let e = attack_with(name, limits.clone()).expect_err(name);
        assert_eq!(e.kind, EngineErrorKind::Limit, "{name}: {e}");
        assert!(e.message.contains("200000 operations"), "{name}: {e}");
        assert!(line(&e).is_some(), "{name}: {e}");
    }
}

#[test]
fn runaway_recursion_is_a_limit() {
    let e = assert_kind("recursion", EngineErrorKind::Limit);
    assert!(e.message.contains("stack overflow"), "{e}");
    // Rhai reports no position for limit errors: the line is the lifecycle function's.
    assert_eq!(line(&e), Some(19), "the line of assemble: {e}");
}

#[test]
fn memory_bombs_are_stopped_by_the_deadline() {
    // The engine has no size limits (they make container building O(N^2)); what stops a bomb
    // is the deadline checked at every operation. 150 ms of doubling reaches a few hundred MB.
    for name in [
        "string_doubling",
        "array_growth",
        "array_doubling",
        "map_bomb",
    ] {
        let e = assert_kind(name, EngineErrorKind::Deadline);
        assert!(line(&e).is_some(), "{name}: {e}");
    }
}

#[test]
fn memory_bombs_are_stopped_by_the_operation_budget() {
    let limits = Limits {
        deadline_ms: 20_000,
        max_operations: 1_000_000,
        ..test_limits()
    };
    for name in ["array_growth", "map_bomb"] {
        let e = attack_with(name, limits.clone()).expect_err(name);
        assert_eq!(e.kind, EngineErrorKind::Limit, "{name}: {e}");
    }
}

#[test]
fn imports_resolve_only_the_stdlib_and_eval_is_gone() {
    for name in ["import_path", "import_unknown"] {
        let e = assert_kind(name, EngineErrorKind::Runtime);
        assert!(e.message.contains("known modules: msg"), "{name}: {e}");
        assert!(line(&e).is_some(), "{name}: {e}");
    }
    for name in ["eval_fn", "eval_call"] {
        let e = assert_kind(name, EngineErrorKind::Runtime);
        assert!(e.message.contains("eval"), "{name}: {e}");
        assert!(line(&e).is_some(), "{name}: {e}");
    }
}

#[test]
fn changing_input_messages_fails_and_leaves_the_host_view_intact() {
    let before: Vec<Message> = session().iter().map(|m| (**m).clone()).collect();
    for name in [
        "overwrite_message",
        "overwrite_block",
        "overwrite_list",
        "overwrite_copy_of_list",
        "clear_message",
    ] {
        let e = assert_kind(name, EngineErrorKind::Runtime);
        assert!(e.message.contains("read-only"), "{name}: {e}");
    }
    let after: Vec<Message> = session().iter().map(|m| (**m).clone()).collect();
    assert_eq!(before, after);
}

#[test]
fn a_key_added_in_place_fails_and_a_changed_copy_is_a_new_message() {
    let ctx = session();
    // Adding a key to a host message is a write like any other: the call fails, naming the
    // way out, and the host's message is untouched.
    let e = assert_kind("add_key", EngineErrorKind::Runtime);
    assert!(e.message.contains("to_map()"), "{e}");
    assert!(
        !serde_json::to_string(&*ctx[0])
            .unwrap()
            .contains("added in place")
    );

    let config = json!({"attack": "copy_changed"});
    let mut e = instance("hostile.rhai", config.clone());
    let r = e
        .assemble(&host_call(&ctx, config), &assemble_params())
        .unwrap();
    assert!(!Arc::ptr_eq(&r.messages[0], &ctx[0]));
    assert_eq!(r.messages[0].text(), "changed copy");
    assert_eq!(ctx[0].text(), "Please read /etc/hosts");
    assert!(Arc::ptr_eq(&r.messages[1], &ctx[1]));
}

#[test]
fn bad_results_are_invalid_results_naming_the_field() {
    for (name, needle) in [
        ("malformed", "messages"),
        ("not_a_map", "must return a map"),
        ("missing_messages", "messages"),
        ("bad_message", "content"),
        ("one_message", "got one message"),
        ("deep", "deeper than 128"),
        ("wrong_type", "estimatedTokens"),
        ("nan", "estimatedTokens"),
        ("infinite", "estimatedTokens"),
        ("negative", "estimatedTokens"),
        ("oversized_text", "systemPromptAddition"),
        ("function_inside", "contextProjection.f"),
        ("unknown_field", "extraField"),
    ] {
        let e = assert_kind(name, EngineErrorKind::InvalidResult);
        assert!(e.message.contains(needle), "{name}: {e}");
        assert!(line(&e).is_some(), "{name}: the line of assemble: {e}");
    }
}

#[test]
fn oversized_results_are_capped() {
    for name in ["oversized_projection", "oversized_messages"] {
        let mut limits = test_limits();
        limits.results.max_result_bytes = 1 << 20;
        let err = attack_with(name, limits).expect_err(name);
        assert_eq!(err.kind, EngineErrorKind::InvalidResult, "{name}: {err}");
        assert!(err.message.contains("bytes"), "{name}: {err}");
    }
}

#[test]
fn thrown_maps_still_classify() {
    let e = assert_kind("error_map", EngineErrorKind::Runtime);
    assert!(e.message.contains("code"), "{e}");
}

#[test]
fn cancellation_is_cancelled_not_a_quarantine() {
    let config = json!({"attack": "loop"});
    let mut o = opts(config.clone());
    o.limits.deadline_ms = 20_000;
    let f = load_factory(&fixture("hostile.rhai"), &o).unwrap();
    let mut e = f.instantiate_rhai(&cx(config.clone())).unwrap();
    let flag = e.cancel_flag();
    let setter = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(50));
        flag.store(true, Ordering::Relaxed);
    });
    let err = e
        .assemble(&host_call(&session(), config), &assemble_params())
        .unwrap_err();
    setter.join().unwrap();
    assert_eq!(err.kind, EngineErrorKind::Cancelled, "{err}");
    assert_eq!(err.disposition(), Disposition::Cancelled);
    assert!(!e.is_abandoned());
}

#[test]
fn a_stopped_engine_is_still_usable_and_other_instances_are_unaffected() {
    let config = json!({"attack": "loop"});
    let mut e = instance("hostile.rhai", config.clone());
    let ctx = session();
    let err = e
        .assemble(&host_call(&ctx, config.clone()), &assemble_params())
        .unwrap_err();
    assert_eq!(err.kind, EngineErrorKind::Deadline);
    assert!(
        e.ingest(&host_call(&ctx, config), &ingest_params(&ctx[0]))
            .unwrap()
            .ingested
    );
    let mut other = instance("table_engine.rhai", json!({}));
    assert!(
        other
            .assemble(&host_call(&ctx, json!({})), &assemble_params())
            .is_ok()
    );
}

#[test]
fn the_stdlib_imports_and_runs() {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let f = load(&root.join("scripts/recent_turns.rhai"), &opts(json!({})))
        .unwrap_or_else(|e| panic!("{e}"));
    let mut e = f.instantiate(&cx(json!({}))).unwrap();
    let ctx = session();
    let r = e
        .assemble(&host_call(&ctx, json!({})), &assemble_params())
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(r.messages.len(), ctx.len());
    assert!(r.messages.iter().zip(&ctx).all(|(a, b)| Arc::ptr_eq(a, b)));
}

#[test]
fn message_handles_read_like_maps_and_arrays_and_refuse_writes() {
    let ctx = session();
    let mut e = instance("handles.rhai", json!({}));
    let r = e
        .assemble(&host_call(&ctx, json!({})), &assemble_params())
        .unwrap();
    let report = r.system_prompt_addition.unwrap();
    let expected = [
        "types=messages,message,array",
        "len=5,false,5",
        "last=m5,m5,true",
        "fields=assistant,toolUse,absent,true,false",
        "block=read,/etc/hosts",
        "for=[\"m1\", \"m2\", \"m3\", \"m4\", \"m5\"]",
        "extract=2,2,2,3,2",
        "filter=2,toolResult,true,false,2,m2",
        "plus=6,array",
        "acc=5,array",
        "keys=true,true,true",
        "copy=map,user,assistant",
        "merged=stop,toolUse",
        "tokens=true,true",
    ];
    assert_eq!(report.lines().collect::<Vec<_>>(), expected);
    // The handles map back to the host's messages; the appended map is a new message.
    assert_eq!(r.messages.len(), 6);
    assert!(
        r.messages[..5]
            .iter()
            .zip(&ctx)
            .all(|(a, b)| Arc::ptr_eq(a, b))
    );
    assert_eq!(r.messages[5].text(), "appended");

    for write in [
        "list_index",
        "list_push",
        "list_sort",
        "message_field",
        "message_nested",
        "message_clear",
        "message_mixin",
    ] {
        let config = json!({ "write": write });
        let mut e = instance("handles.rhai", config.clone());
        let err = e
            .assemble(&host_call(&ctx, config), &assemble_params())
            .expect_err(write);
        assert_eq!(err.kind, EngineErrorKind::Runtime, "{write}: {err}");
        assert!(line(&err).is_some(), "{write}: {err}");
        if write != "list_index" {
            assert!(err.message.contains("read-only"), "{write}: {err}");
        }
    }
    assert_eq!(ctx[1].text(), "Reading it.");
}

//! Process isolation (`host.isolation: "process"`, issue 10 item 3): engine instances in child
//! processes give exactly the contexts they give in process; a call stuck in native code is
//! killed at deadline + grace (the child is gone, no thread is abandoned) and `legacy`
//! answers; a child killed from outside fails its call cleanly and the next instance works;
//! `host.complete` / `host.search` / `host.log` are served by the parent; every lifecycle
//! method, state and rollback handles cross the boundary; memory is capped twice (the VM's
//! cap, and the child's own address-space limit).
//!
//! The child program is the library's own `ctxhost-engine-child` (`src/bin/engine_child.rs`),
//! which serves [`ctxhost::engine::isolation::child_main`].

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is the failure report

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use serde_json::{Value, json};

use ctxhost::EngineErrorKind;
use ctxhost::HostCall;
use ctxhost::config::{Config, Entry};
use ctxhost::contract::limits::{HostLimits, Isolation, Limits};
use ctxhost::contract::message::Message;
use ctxhost::contract::{
    AfterTurnParams, CommitTurnParams, ContextMode, IngestBatchParams, MaintainParams,
    MaintainReason, ResultLimits, SubagentEndReason, SubagentEndedParams, SubagentSpawnParams,
};
use ctxhost::engine::isolation::{ChildCommand, ProcessFactory, ProcessOptions};
use ctxhost::engine::{Engine, LoadOptions};
use ctxhost::runtime::{Host, SessionSpec};
use ctxhost::services::compaction::CompactionSettings;
use ctxhost::services::llm::{ModelClient, ModelLimits, OpenAiClient};
use ctxhost::services::summarize::BuiltinSummarizer;
use ctxhost::services::tokens::{Estimate, TokenCache, Tokenizer};
use ctxhost::session::{Session, TurnInput};
use ctxhost::testing::RecallIndex;
use ctxhost::testing::{Completions, SessionModel, SessionServices};
use ctxhost::tools::replay::{ReplayOptions, ReplaySummary, TurnReport, replay};
use ctxhost::transcript::import;

use crate::common;
use crate::common::engine::{
    Lang, assemble_params, compact_params, cx, host_call, ingest_params, session,
};
use crate::common::fake_model::{FakeModel, Reply};

/// The library's engine child program (`src/bin/engine_child.rs`), which cargo builds for
/// this test binary.
fn child_command() -> ChildCommand {
    crate::modes::engine_child()
}

fn process_options() -> ProcessOptions {
    ProcessOptions {
        command: child_command(),
        tokenizer: Tokenizer::Estimate,
        rhai: HostLimits::default().rhai,
    }
}

/// A host for `config` switched to process isolation, with this binary as the child.
fn isolated(mut config: Config) -> Host {
    config.host.isolation = Isolation::Process;
    Host::builder(config)
        .child_command(child_command())
        .build()
        .expect("host")
}

fn script(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("scripts")
        .join(name)
}

fn pid_alive(pid: u32) -> bool {
    Path::new(&format!("/proc/{pid}")).exists()
}

/// Loads `source` (written as `file` in `dir`) in a child process under `limits`.
fn load_isolated(dir: &Path, file: &str, source: &str, limits: Limits) -> ProcessFactory {
    let path = dir.join(file);
    std::fs::write(&path, source).unwrap();
    let opts = LoadOptions {
        limits,
        ..LoadOptions::default()
    };
    ProcessFactory::load(&path, &opts, &process_options()).unwrap_or_else(|e| panic!("{e}"))
}

/// A Lua engine whose `assemble` runs `body`.
fn lua_engine(body: &str) -> String {
    format!(
        "local M = {{ info = {{ id = \"guarded\", name = \"Guarded\" }} }}
function M.ingest(p) return {{ ingested = true }} end
function M.assemble(p)
{body}
  return {{ messages = p.messages, estimatedTokens = 0 }}
end
function M.compact(p) return host.delegateCompaction(p) end
return M
"
    )
}

// ---------------------------------------------------------------------------------------------
// Same contexts

/// Replays `transcript` through `engine` at `window`, in thread or process isolation.
async fn replay_with(
    engine: &Path,
    transcript: &Path,
    window: u64,
    mode: Isolation,
) -> (Vec<TurnReport>, ReplaySummary) {
    let config = common::replay::config(window, Some(engine));
    let host = Arc::new(match mode {
        Isolation::Process => isolated(config),
        Isolation::Thread => Host::new(config).expect("host"),
    });
    let imported = import(transcript).expect("import");
    let dir = tempfile::tempdir().expect("tempdir");
    let opts = ReplayOptions {
        out_dir: dir.path().to_path_buf(),
        concurrency: 1,
        contexts: true,
    };
    let mut turns = Vec::new();
    let summary = replay(host, transcript, imported, &opts, |t| turns.push(t.clone()))
        .await
        .expect("replay");
    (turns, summary)
}

/// Both languages of `engine`, replayed over a shared transcript with tool calls at a window
/// small enough to compact: every turn's report, every model call's context included, is the
/// same in a child process as in process.
async fn same_contexts(engine: &str) {
    let transcript = common::shared_dir()
        .join("data/transcripts")
        .join("sessionshare-general-tool-calls.jsonl");
    for ext in ["lua", "rhai"] {
        let file = script(&format!("{engine}.{ext}"));
        let (thread, thread_summary) =
            replay_with(&file, &transcript, 8_000, Isolation::Thread).await;
        let (process, process_summary) =
            replay_with(&file, &transcript, 8_000, Isolation::Process).await;
        assert_eq!(process_summary.quarantine, None, "{engine}.{ext}");
        assert_eq!(thread_summary.quarantine, None, "{engine}.{ext}");
        assert!(!thread.is_empty());
        assert_eq!(thread.len(), process.len(), "{engine}.{ext}");
        let untimed = |t: &TurnReport| TurnReport {
            engine_ms: 0.0,
            slow: false,
            ..t.clone()
        };
        for (t, p) in thread.iter().zip(&process) {
            assert_eq!(
                untimed(t),
                untimed(p),
                "{engine}.{ext}: turn {} differs",
                t.turn
            );
        }
        assert_eq!(
            (
                thread_summary.turns,
                thread_summary.compactions,
                thread_summary.fallbacks
            ),
            (
                process_summary.turns,
                process_summary.compactions,
                process_summary.fallbacks
            ),
            "{engine}.{ext}"
        );
    }
}

each_example_engine! {
    same_contexts_as_in_process => same_contexts;
}

/// Every lifecycle method, the state, dispose and a rollback handle cross the boundary: the
/// table engine (which records each call in its state) gives the same answers and ends with
/// the same state in a child as in process; the saved state restores into a fresh child.
#[test]
fn every_lifecycle_method_and_the_state_cross_the_boundary() {
    let path = Lang::Lua.fixture("table_engine");
    let opts = LoadOptions {
        config: Arc::new(json!({})),
        ..LoadOptions::default()
    };
    let process = ProcessFactory::load(&path, &opts, &process_options()).unwrap();
    let thread = ctxhost::engine::load(&path, &opts, &Default::default()).unwrap();
    let run = |e: &mut dyn Engine| -> Vec<String> {
        let ctx = session();
        let call = host_call(&ctx, json!({}));
        let mut seen = Vec::new();
        seen.push(format!(
            "{:?}",
            e.ingest(&call, &ingest_params(&ctx[0])).unwrap()
        ));
        let batch = IngestBatchParams {
            session_id: "s1".into(),
            session_key: None,
            messages: ctx[1..3].to_vec(),
            is_heartbeat: false,
        };
        seen.push(format!("{:?}", e.ingest_batch(&call, &batch).unwrap()));
        seen.push(format!(
            "{:?}",
            e.assemble(&call, &assemble_params()).unwrap()
        ));
        seen.push(format!(
            "{:?}",
            e.compact(&call, &compact_params()).unwrap()
        ));
        let after = AfterTurnParams {
            session_id: "s1".into(),
            session_key: None,
            pre_prompt_message_count: 3,
            token_budget: 8000,
            is_heartbeat: false,
            runtime_settings: None,
        };
        e.after_turn(&call, &after).unwrap();
        let commit = CommitTurnParams {
            session_id: "s1".into(),
            session_key: None,
            advancement_key: "t1".into(),
            messages: ctx[3..].to_vec(),
        };
        seen.push(format!("{:?}", e.commit_turn(&call, &commit).unwrap()));
        seen.push(format!("{:?}", e.commit_turn(&call, &commit).unwrap()));
        let maintain = MaintainParams {
            session_id: "s1".into(),
            session_key: None,
            reason: MaintainReason::Turn,
            runtime_settings: None,
        };
        seen.push(format!("{:?}", e.maintain(&call, &maintain).unwrap()));
        let spawn = SubagentSpawnParams {
            session_id: "s1".into(),
            parent_session_key: "p".into(),
            child_session_key: "c".into(),
            context_mode: ContextMode::Isolated,
            ttl_ms: None,
        };
        let handle = e.prepare_subagent_spawn(&call, &spawn).unwrap();
        assert!(handle.is_some(), "a rollback handle");
        e.rollback_subagent_spawn(&call, handle.unwrap()).unwrap();
        let ended = SubagentEndedParams {
            session_id: "s1".into(),
            child_session_key: "c".into(),
            reason: SubagentEndReason::Completed,
        };
        e.on_subagent_ended(&call, &ended).unwrap();
        e.dispose(&call).unwrap();
        seen.push(e.save_state().unwrap().to_string());
        seen
    };
    let mut in_process = thread.instantiate(&cx(json!({}))).unwrap();
    let mut in_child = process.instantiate_typed(&cx(json!({}))).unwrap();
    let expected = run(in_process.as_mut());
    let got = run(&mut in_child);
    assert_eq!(got, expected);
    let state: Value = serde_json::from_str(got.last().unwrap()).unwrap();
    assert_eq!(state["rolledBack"], json!("c"), "{state}");
    for m in ctxhost::contract::Method::ALL {
        assert_eq!(in_child.defines(m), in_process.defines(m), "{m}");
    }
    // The saved state restores into a fresh child.
    let mut fresh = process.instantiate_typed(&cx(json!({}))).unwrap();
    fresh.restore_state(state.clone()).unwrap();
    assert_eq!(fresh.save_state().unwrap(), state);
}

// ---------------------------------------------------------------------------------------------
// Stuck, killed, crashed

/// Copies ~1.6 GB in single native steps with no interrupt between: uninterruptible for far
/// longer than a 20 ms deadline plus 30 ms grace (the thread-mode run proves it).
const STUCK: &str = r#"  local s = string.rep("x", 200000000)
  for i = 1, 8 do local t = string.format("%s", s) end"#;

fn stuck_limits() -> Limits {
    Limits {
        deadline_ms: 20,
        grace_ms: 30,
        memory_bytes: 1 << 30,
        ..Limits::default()
    }
}

#[test]
fn a_call_stuck_in_native_code_is_killed_at_deadline_plus_grace() {
    let dir = tempfile::tempdir().unwrap();
    let ctx = session();
    // In process, the same body outlives deadline + grace: its VM is abandoned.
    let path = dir.path().join("stuck.lua");
    std::fs::write(&path, lua_engine(STUCK)).unwrap();
    let opts = LoadOptions {
        limits: stuck_limits(),
        ..LoadOptions::default()
    };
    let thread = ctxhost::engine::load(&path, &opts, &Default::default()).unwrap();
    let mut vm = thread.instantiate(&cx(json!({}))).unwrap();
    let e = vm
        .assemble(&host_call(&ctx, json!({})), &assemble_params())
        .expect_err("stuck");
    assert_eq!(e.kind, EngineErrorKind::Deadline, "{e}");
    assert!(
        e.message.contains("abandoned"),
        "the body is stuck in native code: {e}"
    );

    // In a child, the call fails the same way, and the child is killed and reaped.
    let factory = load_isolated(
        dir.path(),
        "stuck_child.lua",
        &lua_engine(STUCK),
        stuck_limits(),
    );
    let mut engine = factory.instantiate_typed(&cx(json!({}))).unwrap();
    let pid = engine.pid().expect("a running child");
    assert!(pid_alive(pid));
    let e = engine
        .assemble(&host_call(&ctx, json!({})), &assemble_params())
        .expect_err("stuck");
    assert_eq!(e.kind, EngineErrorKind::Deadline, "{e}");
    assert!(e.message.contains("killed"), "{e}");
    assert!(!e.message.contains("abandoned"), "{e}");
    assert_eq!(engine.pid(), None);
    assert!(
        !pid_alive(pid),
        "the child {pid} is gone (killed and reaped)"
    );
    // The instance is done for; a new one starts a fresh child.
    let again = engine
        .assemble(&host_call(&ctx, json!({})), &assemble_params())
        .expect_err("dead");
    assert!(again.message.contains("gone"), "{again}");
}

#[test]
fn a_stuck_isolated_engine_is_quarantined_and_legacy_answers() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("stuck.lua");
    std::fs::write(&path, lua_engine(STUCK)).unwrap();
    let mut config = Config::default();
    config.host.limits.script = stuck_limits();
    config.plugins.slots.context_engine = Some("guarded".into());
    config.plugins.entries.insert(
        "guarded".into(),
        Entry {
            path: Some(path),
            ..Entry::default()
        },
    );
    let host = isolated(config);
    assert_eq!(host.engine_failure(), None, "it loads");
    let spec = SessionSpec::new("s", dir.path().join("s.jsonl"));
    let mut s = Session::create(host.session_setup(&spec), &spec.file, "").unwrap();
    let assembly = s
        .begin_turn(TurnInput {
            user: Message::user("go"),
            is_heartbeat: false,
        })
        .unwrap();
    assert!(!assembly.messages.is_empty(), "legacy answered");
    s.end_turn(vec![Message::assistant("ok")]).unwrap();
    let failure = host.engine_failure().expect("quarantined");
    assert_eq!(failure.kind, EngineErrorKind::Deadline, "{failure}");
    assert!(failure.message.contains("killed"), "{failure}");
}

#[test]
fn a_child_killed_mid_call_fails_cleanly_and_the_next_instance_works() {
    let dir = tempfile::tempdir().unwrap();
    // Busy (interruptible) for up to 20 s when given 5 messages or more.
    let body = r#"  if #p.messages >= 5 then
    local t0 = os.clock()
    while os.clock() - t0 < 20 do end
  end"#;
    let limits = Limits {
        deadline_ms: 30_000,
        ..Limits::default()
    };
    let factory = load_isolated(dir.path(), "busy.lua", &lua_engine(body), limits);
    let mut engine = factory.instantiate_typed(&cx(json!({}))).unwrap();
    let pid = engine.pid().unwrap();
    let killer = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(300));
        std::process::Command::new("kill")
            .args(["-9", &pid.to_string()])
            .status()
            .unwrap()
    });
    let ctx = session();
    let e = engine
        .assemble(&host_call(&ctx, json!({})), &assemble_params())
        .expect_err("killed from outside");
    assert!(killer.join().unwrap().success());
    assert_eq!(e.kind, EngineErrorKind::Runtime, "{e}");
    assert!(e.message.contains("signal 9"), "{e}");
    assert!(!pid_alive(pid));
    // The next instance gets a fresh child and works.
    let mut next = factory.instantiate_typed(&cx(json!({}))).unwrap();
    assert_ne!(next.pid(), Some(pid));
    let r = next
        .assemble(&host_call(&ctx[..3], json!({})), &assemble_params())
        .unwrap();
    assert_eq!(r.messages.len(), 3);
    // The very context messages come back (by identity, not copies).
    assert!(r.messages.iter().zip(&ctx).all(|(a, b)| Arc::ptr_eq(a, b)));
}

#[test]
fn a_cancelled_call_stops_and_the_child_keeps_serving() {
    let dir = tempfile::tempdir().unwrap();
    let body = r#"  if #p.messages >= 5 then
    local t0 = os.clock()
    while os.clock() - t0 < 20 do end
  end"#;
    let path = dir.path().join("busy.lua");
    std::fs::write(&path, lua_engine(body)).unwrap();
    let cancel = Arc::new(AtomicBool::new(false));
    let opts = LoadOptions {
        limits: Limits {
            deadline_ms: 30_000,
            ..Limits::default()
        },
        cancel: Some(Arc::clone(&cancel)),
        ..LoadOptions::default()
    };
    let factory = ProcessFactory::load(&path, &opts, &process_options()).unwrap();
    let mut engine = factory.instantiate_typed(&cx(json!({}))).unwrap();
    let flag = Arc::clone(&cancel);
    let canceller = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(300));
        flag.store(true, Ordering::Relaxed);
    });
    let ctx = session();
    let e = engine
        .assemble(&host_call(&ctx, json!({})), &assemble_params())
        .expect_err("cancelled");
    canceller.join().unwrap();
    assert_eq!(e.kind, EngineErrorKind::Cancelled, "{e}");
    cancel.store(false, Ordering::Relaxed);
    assert!(engine.pid().is_some(), "still running");
    let r = engine
        .assemble(&host_call(&ctx[..3], json!({})), &assemble_params())
        .unwrap();
    assert_eq!(r.messages.len(), 3);
}

// ---------------------------------------------------------------------------------------------
// host.* through the parent

const ASKS: &str = r#"local M = { info = { id = "asker", name = "Asker" } }
function M.ingest(p) return { ingested = true } end
function M.assemble(p)
  host.log.info("asking the model")
  local r = host.complete({ prompt = "Capital of France?" })
  local found = host.search("localhost")
  local got = host.fetch({ found[1].id })
  local summary = host.summarize(p.messages)
  local line = (r.text or r.error) .. "|" .. #found .. "|" .. found[1].id .. "|" .. got[1].id
    .. "|" .. host.tokens(p.messages[1]) .. "|" .. tostring(summary.tokens > 0)
  return { messages = p.messages, estimatedTokens = 0, systemPromptAddition = line }
end
function M.compact(p) return host.delegateCompaction(p) end
return M
"#;

#[test]
fn host_complete_search_and_fetch_are_served_by_the_parent() {
    let dir = tempfile::tempdir().unwrap();
    let model = FakeModel::start(vec![Reply::answer("Paris")], Reply::answer("unused"));
    let client: Arc<dyn ModelClient> =
        Arc::new(OpenAiClient::new(&model.url(), "fake-model", None));
    let limits = ModelLimits {
        timeout_ms: 5_000,
        max_output_tokens: 256,
        max_calls_per_turn: 4,
        max_tokens_per_day: 1_000_000,
    };
    let services = Arc::new(SessionServices {
        tokens: TokenCache::new(Arc::new(Estimate)),
        summarizer: Arc::new(BuiltinSummarizer::new()),
        compaction: CompactionSettings::default(),
        limits: ResultLimits::default(),
        model: SessionModel::new(Arc::new(Completions::new(Some(client), limits))),
        host_times: Default::default(),
        cancel: Default::default(),
    });
    let ctx = session();
    let recall = Arc::new(RecallIndex::default());
    recall.add(&ctx);
    let call = HostCall::new(
        "asker".into(),
        "s1".into(),
        Arc::new(ctx.clone()),
        Arc::clone(&services),
        Arc::new(json!({})),
        8000,
    )
    .with_recall(recall);
    let factory = load_isolated(dir.path(), "asker.lua", ASKS, Limits::default());
    let mut engine = factory.instantiate_typed(&cx(json!({}))).unwrap();
    let (r, logged) = common::fake_model::capture(|| engine.assemble(&call, &assemble_params()));
    let r = r.unwrap_or_else(|e| panic!("{e}"));
    let line = r.system_prompt_addition.unwrap();
    let parts: Vec<&str> = line.split('|').collect();
    assert_eq!(parts[0], "Paris", "{line}");
    assert_eq!(parts[1], "2", "two messages mention localhost: {line}");
    assert!(["m3", "m4"].contains(&parts[2]), "{line}");
    assert_eq!(parts[3], parts[2], "fetched what was found: {line}");
    let tokens = services.tokens.message(&ctx[0]);
    assert_eq!(
        parts[4],
        tokens.to_string(),
        "host.tokens counts in the child alike"
    );
    assert_eq!(parts[5], "true", "{line}");
    assert_eq!(model.requests().len(), 1, "the parent asked the model");
    assert!(
        logged.contains("asking the model"),
        "host.log goes to the parent's log: {logged}"
    );
    // The parent ran (and timed) the functions it served.
    let times = services.host_times.lock().summary();
    for f in ["complete", "search", "fetch"] {
        assert!(
            times.iter().any(|t| t.method.ends_with(f) && t.calls == 1),
            "{f}: {times:?}"
        );
    }
}

/// A call whose `host.search` looks through `n` stored assistant messages that all match.
fn searchable(ctx: &[Arc<Message>], n: usize) -> HostCall {
    let recall = Arc::new(RecallIndex::default());
    let stored: Vec<Arc<Message>> = (0..n)
        .map(|i| Arc::new(Message::assistant(format!("localhost note {i}"))))
        .collect();
    recall.add(&stored);
    host_call(ctx, json!({})).with_recall(recall)
}

/// Host work the parent does for a child counts against the call's deadline, as in process: an
/// engine whose few `host.search` calls are each costly (a role filter of 10,000 names checked
/// against every one of 50,000 matches) is stopped at deadline + grace, not served for as long
/// as it asks. In Lua and Rhai.
#[test]
fn host_work_served_for_a_child_counts_against_the_deadline() {
    // Each search checks 50,000 matches against 10,000 roles: seconds for the twenty, all of
    // it in the parent (the engine's own part is one small table).
    let lua = lua_engine(
        r#"  local roles = {}
  for i = 1, 10000 do roles[i] = "user" end
  for i = 1, 20 do host.search("localhost", { roles = roles }) end"#,
    );
    let rhai = r#"fn info() { #{ id: "guarded", name: "Guarded" } }
fn ingest(p) { #{ ingested: true } }
fn assemble(p) {
    let roles = [];
    roles.pad(10000, "user");
    for i in 0..20 { host::search("localhost", #{ roles: roles }); }
    #{ messages: p.messages, estimatedTokens: 0 }
}
fn compact(p) { host::delegateCompaction(p) }
"#;
    for (file, source) in [("busy.lua", lua.as_str()), ("busy.rhai", rhai)] {
        search_past_the_deadline(file, source);
    }
}

fn search_past_the_deadline(file: &str, source: &str) {
    let dir = tempfile::tempdir().unwrap();
    let ctx = session();
    let limits = Limits {
        deadline_ms: 100,
        grace_ms: 100,
        ..Limits::default()
    };
    let path = dir.path().join(file);
    std::fs::write(&path, source).unwrap();
    let opts = LoadOptions {
        limits: limits.clone(),
        ..LoadOptions::default()
    };
    let thread = ctxhost::engine::load(&path, &opts, &Default::default()).unwrap();
    let mut vm = thread.instantiate(&cx(json!({}))).unwrap();
    let e = vm
        .assemble(&searchable(&ctx, 50_000), &assemble_params())
        .expect_err("over its deadline in process");
    assert_eq!(e.kind, EngineErrorKind::Deadline, "{file}: {e}");

    let factory = load_isolated(dir.path(), &format!("child_{file}"), source, limits);
    let mut engine = factory.instantiate_typed(&cx(json!({}))).unwrap();
    let e = engine
        .assemble(&searchable(&ctx, 50_000), &assemble_params())
        .expect_err("over its deadline in a child");
    assert_eq!(e.kind, EngineErrorKind::Deadline, "{file}: {e}");
}

// ---------------------------------------------------------------------------------------------
// Memory

#[test]
fn a_memory_bomb_in_the_child_is_stopped_and_the_child_has_an_address_space_limit() {
    let dir = tempfile::tempdir().unwrap();
    let limits = Limits {
        memory_bytes: 64 << 20,
        ..Limits::default()
    };
    let body = r#"  local s = string.rep("x", 200000000)"#;
    let factory = load_isolated(dir.path(), "bomb.lua", &lua_engine(body), limits.clone());
    let mut engine = factory.instantiate_typed(&cx(json!({}))).unwrap();
    let pid = engine.pid().unwrap();
    // The child capped its own address space when it loaded the engine.
    let table = std::fs::read_to_string(format!("/proc/{pid}/limits")).unwrap();
    let line = table
        .lines()
        .find(|l| l.starts_with("Max address space"))
        .unwrap();
    let cap = ctxhost::engine::isolation::child_address_space(limits.memory_bytes);
    assert!(line.contains(&cap.to_string()), "{line} (want {cap})");
    let e = engine
        .assemble(&host_call(&session(), json!({})), &assemble_params())
        .expect_err("refused");
    assert_eq!(e.kind, EngineErrorKind::Memory, "{e}");
}

// ---------------------------------------------------------------------------------------------
// Config

#[test]
fn host_isolation_is_validated_and_named_in_errors() {
    let ok = Config::parse(r#"{ host: { isolation: "process" } }"#, "inline").unwrap();
    assert_eq!(ok.host.isolation, Isolation::Process);
    assert_eq!(Config::default().host.isolation, Isolation::Thread);
    let e = Config::parse(r#"{ host: { isolation: "vm" } }"#, "inline")
        .expect_err("not a mode")
        .to_string();
    assert!(e.contains("host.isolation"), "{e}");
    assert!(e.contains("\"thread\" or \"process\""), "{e}");
}

//! Hostile and broken engines through the whole host: every failure kind quarantines the
//! engine with the right classification, the failing call re-runs on `legacy` so every turn
//! completes, and the transcript on disk holds exactly the original messages (plus summaries).
//! The attack scripts are the adapter tests' fixtures (`tests/fixtures/lua/`, and their Rhai
//! twins under `tests/fixtures/rhai/`: the same host path for both languages).

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is the failure report

use crate::common;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use ctxhost::EngineErrorKind;
use ctxhost::config::FailurePolicy;
use ctxhost::config::{Config, Entry};
use ctxhost::contract::ContextMode;
use ctxhost::message::Message;
use ctxhost::replay::{ReplayOptions, replay};
use ctxhost::runtime::{Host, SessionSpec};
use ctxhost::session::TurnInput;
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

fn host(script: &str, id: &str, entry_config: Value, window: u64) -> Arc<Host> {
    let mut config = Config::default();
    config.host.window = window;
    config.host.limits.script.deadline_ms = 100;
    config.host.limits.script.grace_ms = 1_000;
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

/// Replays the small Claude Code transcript through a host; returns the engine's first failure.
async fn replay_with(host: Arc<Host>, id: &str) -> ctxhost::EngineError {
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
    host.quarantine().first_failure(id).expect("first failure")
}

async fn attack(name: &str, kind: EngineErrorKind) {
    attack_in("hostile.lua", name, kind).await;
}

async fn attack_in(script: &str, name: &str, kind: EngineErrorKind) {
    let name = if name == "infinite_loop" {
        "loop"
    } else {
        name
    };
    let mut config = host(script, "hostile", json!({ "attack": name }), 200_000)
        .config()
        .clone();
    if kind == EngineErrorKind::Memory {
        // Let the memory cap, not the deadline, stop the allocation loop.
        config.host.limits.script.deadline_ms = 10_000;
    }
    let h = Arc::new(Host::new(config).expect("host"));
    let e = replay_with(h, "hostile").await;
    assert_eq!(e.kind, kind, "{name}: {e}");
    assert_eq!(e.op, "assemble", "{name}: {e}");
    let file = e
        .location
        .as_ref()
        .map(|l| l.file.clone())
        .unwrap_or_default();
    assert!(file.ends_with(script), "{name}: {e}");
}

macro_rules! attacks {
    ($($name:ident => $kind:ident),* $(,)?) => {$(
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn $name() {
            let name = stringify!($name);
            attack(name.strip_prefix("r#").unwrap_or(name), EngineErrorKind::$kind).await;
        }
    )*};
}

mod attacks {
    use super::*;

    attacks! {
        infinite_loop => Deadline,
        pcall_loop => Deadline,
        coroutine_wrap => Deadline,
        coroutine_resume => Deadline,
        pattern_bomb => Deadline,
        tostring_loop => Deadline,
        recursion => Limit,
        memory => Memory,
        string_doubling => Memory,
        io => Runtime,
        os_execute => Runtime,
        os_getenv => Runtime,
        require_path => Runtime,
        loadstring => Runtime,
        load => Runtime,
        getfenv => Runtime,
        setfenv => Runtime,
        dofile => Runtime,
        poison_string => Runtime,
        overwrite_message => Runtime,
        overwrite_block => Runtime,
        overwrite_list => Runtime,
        rawset_message => Runtime,
        malformed => InvalidResult,
        not_a_table => InvalidResult,
        missing_messages => InvalidResult,
        bad_message => InvalidResult,
        cyclic => InvalidResult,
        deep => InvalidResult,
        wrong_type => InvalidResult,
        nan => InvalidResult,
        negative => InvalidResult,
        non_utf8 => InvalidResult,
        non_utf8_message => InvalidResult,
        oversized_text => InvalidResult,
        function_inside => InvalidResult,
        error_table => Runtime,
    }
}

macro_rules! rhai_attacks {
    ($($name:ident => $kind:ident),* $(,)?) => {$(
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn $name() {
            let name = stringify!($name);
            attack_in("hostile.rhai", name, EngineErrorKind::$kind).await;
        }
    )*};
}

/// The Rhai twins: the same host path, the same classification.
mod rhai_attacks {
    use super::*;

    rhai_attacks! {
        infinite_loop => Deadline,
        try_loop => Deadline,
        while_true => Deadline,
        recursion => Limit,
        string_doubling => Memory,
        array_growth => Memory,
        array_doubling => Memory,
        map_bomb => Memory,
        import_path => Runtime,
        import_unknown => Runtime,
        eval_fn => Runtime,
        eval_call => Runtime,
        overwrite_message => Runtime,
        overwrite_block => Runtime,
        overwrite_list => Runtime,
        overwrite_copy_of_list => Runtime,
        clear_message => Runtime,
        malformed => InvalidResult,
        not_a_map => InvalidResult,
        missing_messages => InvalidResult,
        bad_message => InvalidResult,
        one_message => InvalidResult,
        deep => InvalidResult,
        wrong_type => InvalidResult,
        nan => InvalidResult,
        infinite => InvalidResult,
        negative => InvalidResult,
        oversized_text => InvalidResult,
        function_inside => InvalidResult,
        unknown_field => InvalidResult,
        error_map => Runtime,
    }
}

/// A runtime error thrown in `method` on the first turn it runs.
async fn throw_in(lang: &str, method: &str) {
    let h = host(
        &format!("factory_engine.{lang}"),
        "thrower",
        json!({ "id": "thrower", "throwIn": method }),
        200_000,
    );
    let e = replay_with(h, "thrower").await;
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
macro_rules! throw_in_each {
    ($($name:ident => $method:literal),* $(,)?) => {
        mod lifecycle {$(
            mod $name {
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn lua() {
                    super::super::throw_in("lua", $method).await;
                }
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn rhai() {
                    super::super::throw_in("rhai", $method).await;
                }
            }
        )*}
    };
}

throw_in_each!(
    bootstrap => "bootstrap",
    ingest_batch => "ingestBatch",
    assemble => "assemble",
    after_turn => "afterTurn",
    commit_turn => "commitTurn",
    maintain => "maintain",
);

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

/// The cases below in both languages: `$name::lua` and `$name::rhai`.
macro_rules! in_both_languages {
    ($($name:ident),* $(,)?) => {
        $(mod $name {
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn lua() {
                super::$name("lua").await;
            }
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn rhai() {
                super::$name("rhai").await;
            }
        })*
    };
}

in_both_languages!(
    a_throwing_compact_falls_back_to_builtin_compaction,
    subagent_hooks_failures_quarantine_and_rollback_runs,
    strict_policy_returns_the_error_and_does_not_quarantine,
    unmet_host_requirements_fail_closed_without_quarantine,
);

async fn a_throwing_compact_falls_back_to_builtin_compaction(lang: &str) {
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

async fn subagent_hooks_failures_quarantine_and_rollback_runs(lang: &str) {
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

async fn strict_policy_returns_the_error_and_does_not_quarantine(lang: &str) {
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

async fn unmet_host_requirements_fail_closed_without_quarantine(lang: &str) {
    let dir = tempfile::tempdir().expect("tempdir");
    let script = dir.path().join(format!("needs_llm.{lang}"));
    let source = if lang == "lua" {
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

in_both_languages!(a_compaction_that_drops_the_conversation_is_refused);

/// Issue 10 item 6: a summary that drops the pending request and the open tool calls (no
/// `firstKeptEntryId`, or one on the newest tool result) is an invalid result: the engine is
/// quarantined, `legacy` compacts instead, and the next model call still has the request and
/// the tool call the model must answer.
async fn a_compaction_that_drops_the_conversation_is_refused(lang: &str) {
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
// ---------------------------------------------------------------------------------------------
// Bounded resources (issue 10, items 2 and 3): Rhai's memory cap and the native-step guards.

/// Rhai memory bombs: each stopped by `host.limits.memoryBytes` (kind `Memory`), not by the
/// deadline, as in Lua.
mod rhai_memory {
    use super::*;

    rhai_attacks! {
        blob_bomb => Memory,
        array_pad => Memory,
        string_pad => Memory,
        string_plus_doubling => Memory,
        array_push_strings => Memory,
        array_insert => Memory,
        blob_doubling => Memory,
        map_doubling => Memory,
        split_bomb => Memory,
        replace_bomb => Memory,
        blob_to_array => Memory,
    }
}

/// Runs one turn of an engine written inline (`file` names its language) under `limits`;
/// returns the engine's failure, if any.
fn one_turn(
    file: &str,
    source: &str,
    limits: impl FnOnce(&mut ctxhost::config::HostLimits),
) -> Option<ctxhost::EngineError> {
    use ctxhost::session::Session;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join(file);
    std::fs::write(&path, source).unwrap();
    let mut config = Config::default();
    limits(&mut config.host.limits);
    config.plugins.slots.context_engine = Some("guarded".into());
    config.plugins.entries.insert(
        "guarded".into(),
        Entry {
            path: Some(path),
            ..Entry::default()
        },
    );
    let host = Host::new(config).unwrap();
    let spec = SessionSpec::new("s", dir.path().join("s.jsonl"));
    let mut s = Session::create(host.session_setup(&spec), &spec.file, "").unwrap();
    s.begin_turn(TurnInput {
        user: Message::user("go"),
        is_heartbeat: false,
    })
    .unwrap();
    s.end_turn(vec![Message::assistant("ok")]).unwrap();
    host.engine_failure()
}

/// A Lua engine whose `assemble` runs `body` (which may `error(...)` to report).
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

/// Native-step guards (issue 10, item 3): no single builtin outlives the deadline by much.
mod native_guards {
    use super::*;

    #[test]
    fn a_plain_find_over_a_huge_haystack_finishes_and_finds_the_same() {
        // Naively 20M x 1001 byte comparisons (minutes, no interrupt); guarded, milliseconds.
        let body = r#"  local s = string.rep("a", 20000000) .. "b"
  local i, j = string.find(s, string.rep("a", 1000) .. "b", 1, true)
  if i ~= 20000000 - 1000 + 1 or j ~= 20000001 then error("wrong: " .. tostring(i)) end
  local k = s:find(string.rep("a", 1000) .. "c", 5, true)
  if k ~= nil then error("found what is not there") end
  if s:find("b", -1, true) ~= 20000001 then error("negative init") end"#;
        let failure = one_turn("find.lua", &lua_engine(body), |l| {
            l.script.deadline_ms = 2_000;
            l.script.grace_ms = 60_000;
        });
        assert_eq!(failure, None);
    }

    #[test]
    fn a_native_sort_of_a_huge_table_is_stopped_by_the_deadline() {
        let body = r#"  local t = {}
  for i = 1, 3000000 do t[i] = (i * 7919) % 3000017 end
  table.sort(t)
  table.sort(t)"#;
        let failure = one_turn("sort.lua", &lua_engine(body), |l| {
            l.script.deadline_ms = 300;
            l.script.grace_ms = 60_000;
        })
        .expect("the sort overruns the deadline");
        assert_eq!(failure.kind, EngineErrorKind::Deadline, "{failure}");
        // Stopped by the interrupt, not abandoned after deadline + grace.
        assert!(!failure.to_string().contains("abandoned"), "{failure}");
    }

    #[test]
    fn a_small_sort_keeps_its_order_and_errors() {
        let body = r#"  local t = {}
  for i = 1, 70000 do t[i] = (i * 7919) % 70001 end
  table.sort(t)
  for i = 2, #t do if t[i - 1] > t[i] then error("unsorted at " .. i) end end
  local u = {3, 1, 2}
  table.sort(u, function(a, b) return a > b end)
  if u[1] ~= 3 or u[3] ~= 1 then error("comparator ignored") end"#;
        let failure = one_turn("order.lua", &lua_engine(body), |l| {
            l.script.deadline_ms = 5_000;
        });
        assert_eq!(failure, None);
    }

    #[test]
    fn string_rep_past_the_cap_is_refused_as_memory() {
        let body = r#"  local s = string.rep("x", 200000000)"#;
        let failure = one_turn("rep.lua", &lua_engine(body), |l| {
            l.script.memory_bytes = 64 << 20;
        })
        .expect("refused");
        assert_eq!(failure.kind, EngineErrorKind::Memory, "{failure}");
    }

    #[test]
    fn abandoned_workers_are_counted_and_refuse_new_engines_past_the_limit() {
        use ctxhost::sandbox::{Worker, abandoned_workers, admit_worker};
        use std::time::Duration;
        let before = abandoned_workers();
        let w = Worker::spawn("stuck", 1 << 20, ()).unwrap();
        let out = w.call(Duration::from_millis(20), |_| {
            std::thread::sleep(Duration::from_millis(600))
        });
        assert!(out.is_err(), "the call overran");
        assert!(w.is_abandoned());
        let during = abandoned_workers();
        assert!(during >= 1, "counted while its thread runs");
        let e = admit_worker(during - 1).expect_err("refused past the limit");
        assert!(e.contains("maxAbandonedWorkers"), "{e}");
        assert!(admit_worker(during + 100).is_ok());
        // Its thread ends with the stuck step and is no longer counted.
        let mut left = during;
        for _ in 0..100 {
            std::thread::sleep(Duration::from_millis(20));
            left = abandoned_workers();
            if left < during {
                break;
            }
        }
        assert!(left < during.max(before + 1), "{before} {during} {left}");
    }
}

/// Ceilings on Rhai's limits (issue 10, item 7): raising them is a config error naming the key,
/// never a stack overflow that aborts the host.
mod limit_ceilings {
    use super::*;
    use ctxhost::engine::rhai::limits::{MAX_CALL_LEVELS_CEILING, MAX_EXPR_DEPTH_CEILING};

    fn refused(limits: &str) -> String {
        let text = format!("{{ host: {{ limits: {limits} }} }}");
        Config::parse(&text, "test.json5")
            .expect_err("refused")
            .to_string()
    }

    #[test]
    fn limits_past_their_ceiling_are_refused_naming_the_key() {
        let e = refused("{ maxCallLevels: 100000 }");
        assert!(e.contains("host.limits.maxCallLevels"), "{e}");
        assert!(e.contains(&MAX_CALL_LEVELS_CEILING.to_string()), "{e}");
        let e = refused("{ maxExprDepth: 100000 }");
        assert!(e.contains("host.limits.maxExprDepth"), "{e}");
        assert!(e.contains(&MAX_EXPR_DEPTH_CEILING.to_string()), "{e}");
        let e = refused("{ maxExprDepth: 0 }");
        assert!(e.contains("host.limits.maxExprDepth"), "{e}");
        let e = refused("{ maxOperations: 0 }");
        assert!(e.contains("host.limits.maxOperations"), "{e}");
        let e = refused(&format!(
            "{{ maxCallLevels: {MAX_CALL_LEVELS_CEILING}, maxExprDepth: {MAX_EXPR_DEPTH_CEILING} }}"
        ));
        assert!(e.contains("worker stack"), "{e}");
        assert!(Config::parse("{ host: { limits: { maxCallLevels: 100 } } }", "t").is_ok());
    }

    #[test]
    fn the_deepest_accepted_limits_end_in_a_limit_error_not_an_abort() {
        // The most call levels the config accepts with the default expression depth, each level
        // holding a deeply nested expression: Rhai's own limit must stop it first.
        let mut levels = MAX_CALL_LEVELS_CEILING;
        let depth = 60;
        let mut limits = ctxhost::engine::rhai::RhaiLimits {
            max_call_levels: levels,
            max_expr_depth: depth + 4,
            ..Default::default()
        };
        while limits.check().is_err() {
            levels -= 1;
            limits.max_call_levels = levels;
        }
        let nested = format!("{}n{}", "(".repeat(depth / 4), ")".repeat(depth / 4));
        let source = format!(
            "fn info() {{ #{{ id: \"guarded\", name: \"Deep\" }} }}
fn ingest(p) {{ #{{ ingested: true }} }}
fn down(n) {{ let x = {nested}; 1 + down(x + 1) }}
fn assemble(p) {{ down(0); #{{ messages: p.messages, estimatedTokens: 0 }} }}
fn compact(p) {{ host::delegateCompaction(p) }}
"
        );
        let failure = one_turn("deep.rhai", &source, |l| l.rhai = limits.clone())
            .expect("the recursion is stopped");
        assert_eq!(failure.kind, EngineErrorKind::Limit, "{failure}");
    }
}

/// A Rhai engine whose `assemble` runs `body` (which may `throw` to report).
fn rhai_engine(body: &str) -> String {
    format!(
        "fn info() {{ #{{ id: \"guarded\", name: \"Guarded\" }} }}
fn ingest(p) {{ #{{ ingested: true }} }}
fn assemble(p) {{
{body}
    #{{ messages: p.messages, estimatedTokens: 0 }}
}}
fn compact(p) {{ host::delegateCompaction(p) }}
"
    )
}

/// Host calls whose cost a script controls are refused past a size, in both languages.
mod host_call_guards {
    use super::*;

    fn refused(file: &str, source: &str, says: &str) {
        // A long deadline: building the input is not what is tested.
        let failure = one_turn(file, source, |l| l.script.deadline_ms = 30_000).expect("refused");
        assert_eq!(failure.kind, EngineErrorKind::Runtime, "{failure}");
        assert!(failure.to_string().contains(says), "{failure}");
    }

    #[test]
    fn tokens_of_a_huge_text_is_refused_lua() {
        let body = r#"  host.tokens(string.rep("x", 9000000))"#;
        refused("tokens.lua", &lua_engine(body), "one count may take");
    }

    #[test]
    fn tokens_of_a_huge_text_is_refused_rhai() {
        let body = r#"    let s = "x"; s.pad(9000000, "x"); host::tokens(s);"#;
        refused("tokens.rhai", &rhai_engine(body), "one count may take");
    }

    #[test]
    fn summarize_of_a_huge_input_is_refused_lua() {
        let body = r#"  local ms = {}
  for i = 1, 20 do ms[i] = { role = "user", content = string.rep("x", 1000000) } end
  host.summarize(ms, nil)"#;
        refused("summarize.lua", &lua_engine(body), "one summary may read");
    }

    #[test]
    fn summarize_of_a_huge_input_is_refused_rhai() {
        let body = r#"    let ms = [];
    for i in 0..20 { let c = "x"; c.pad(1000000, "x"); ms.push(#{ role: "user", content: c }); }
    host::summarize(ms, ());"#;
        refused("summarize.rhai", &rhai_engine(body), "one summary may read");
    }
}

/// Rhai's sort with a comparer calls it O(n log n) times in one native step and ignores its
/// errors: the guarded sort ends at the comparer's first error, so the deadline stops it.
#[test]
fn a_rhai_sort_with_a_slow_comparer_is_stopped_by_the_deadline() {
    let body = r#"    let a = [];
    for i in 0..200000 { a.push((i * 7919) % 200003); }
    a.sort(|x, y| { let k = 0; while k < 100 { k += 1; } x - y });"#;
    let failure = one_turn("sort.rhai", &rhai_engine(body), |l| {
        l.script.deadline_ms = 1_500;
        l.script.grace_ms = 1_500;
        l.rhai.max_operations = u64::MAX;
    })
    .expect("the sort overruns the deadline");
    assert_eq!(failure.kind, EngineErrorKind::Deadline, "{failure}");
    assert!(!failure.to_string().contains("abandoned"), "{failure}");
}

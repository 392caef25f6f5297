//! `host.complete(request)` from Lua and Rhai against a fake model on 127.0.0.1: both
//! languages give the same answers, the request the model sees is what the script asked
//! (within the host's caps), the per-turn and per-day budgets hold, a model slower than the
//! script's deadline is not a deadline fault, a model slower than its own limit is a timeout
//! the script can read, a cancelled call stops, no model is a clear answer, and neither the
//! key nor the URL reaches the script or a log.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is the failure report

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use serde_json::{Value, json};

use ctxhost::HostCall;
use ctxhost::config::{Config, Entry};
use ctxhost::contract::limits::Limits;
use ctxhost::contract::message::Message;
use ctxhost::contract::{AssembleResult, ResultLimits};
use ctxhost::engine::LoadOptions;
use ctxhost::engine::{Engine, InstanceContext};
use ctxhost::runtime::{Host, SessionSpec};
use ctxhost::services::compaction::CompactionSettings;
use ctxhost::services::llm::{
    ApiKey, LlmSettings, LlmSummarizer, ModelClient, ModelLimits, OpenAiClient, SummarizerSettings,
};
use ctxhost::services::summarize::BuiltinSummarizer;
use ctxhost::services::tokens::{Estimate, TokenCache};
use ctxhost::session::{Session, TurnInput};
use ctxhost::testing::StopSignals;
use ctxhost::testing::{Completions, HostScope, HostValue, SessionModel, SessionServices};
use ctxhost::{EngineError, EngineErrorKind};

use crate::common::engine::{Lang, assemble_params, session};
use crate::common::fake_model::{FakeModel, Reply, capture};

/// An engine whose `assemble` asks `host.complete` once per request in `host.config.requests`
/// and reports every answer, one line each, in `systemPromptAddition`.
const ASKER_LUA: &str = r#"local M = { info = { id = "asker", name = "Asker" } }
local function show(r)
  if r.error then return "error|" .. r.reason .. "|" .. r.error end
  local s = "ok|" .. r.text .. "|" .. r.model .. "|" .. r.usage.input .. "|" .. r.usage.output
  if r.json then s = s .. "|json:" .. tostring(r.json.answer) end
  return s
end
function M.ingest(p) return { ingested = true } end
function M.assemble(p)
  local lines = {}
  for _, req in ipairs(host.config.requests) do
    table.insert(lines, show(host.complete(req)))
  end
  return { messages = p.messages, estimatedTokens = 0,
           systemPromptAddition = table.concat(lines, "\n") }
end
function M.compact(p) return host.delegateCompaction(p) end
return M
"#;

const ASKER_RHAI: &str = r#"fn info() { #{ id: "asker", name: "Asker" } }
fn show(r) {
    if r.error != () { return "error|" + r.reason + "|" + r.error; }
    let s = "ok|" + r.text + "|" + r.model + "|" + r.usage.input + "|" + r.usage.output;
    if r.json != () { s += "|json:" + r.json.answer; }
    s
}
fn ingest(p) { #{ ingested: true } }
fn assemble(p) {
    let out = "";
    for (req, i) in host::config.requests {
        if i > 0 { out += "\n"; }
        out += show(host::complete(req));
    }
    #{ messages: p.messages, estimatedTokens: 0, systemPromptAddition: out }
}
fn compact(p) { host::delegateCompaction(p) }
"#;

const KEY: &str = "sk-test-0123456789-very-secret";

fn limits(calls: u32, tokens_per_day: u64, timeout_ms: u64) -> ModelLimits {
    ModelLimits {
        timeout_ms,
        max_output_tokens: 256,
        max_calls_per_turn: calls,
        max_tokens_per_day: tokens_per_day,
    }
}

/// Session services whose `host.complete` asks `model` within `limits`.
fn services_with(model: Option<Arc<dyn ModelClient>>, limits: ModelLimits) -> Arc<SessionServices> {
    Arc::new(SessionServices {
        tokens: TokenCache::new(Arc::new(Estimate)),
        summarizer: Arc::new(BuiltinSummarizer::new()),
        compaction: CompactionSettings::default(),
        limits: ResultLimits::default(),
        model: SessionModel::new(Arc::new(Completions::new(model, limits))),
        host_times: Default::default(),
        cancel: Default::default(),
    })
}

fn fake_client(model: &FakeModel, key: Option<&str>) -> Arc<dyn ModelClient> {
    Arc::new(OpenAiClient::new(
        &model.url(),
        "fake-model",
        key.map(ApiKey::new),
    ))
}

fn call(services: &Arc<SessionServices>, config: &Value) -> HostCall {
    HostCall::new(
        "asker".into(),
        "s1".into(),
        Arc::new(session()),
        Arc::clone(services),
        Arc::new(config.clone()),
        8000,
    )
}

/// The asker in `lang`, written to `dir`, under a 100 ms deadline and 100 ms grace, with
/// `cancel` as its abort flag.
fn asker(
    lang: Lang,
    dir: &Path,
    config: &Value,
    cancel: Option<Arc<AtomicBool>>,
) -> Box<dyn Engine> {
    let path = dir.join(lang.file("asker"));
    let source = match lang {
        Lang::Lua => ASKER_LUA,
        Lang::Rhai => ASKER_RHAI,
    };
    std::fs::write(&path, source).unwrap();
    let opts = LoadOptions {
        config: Arc::new(config.clone()),
        limits: Limits {
            deadline_ms: 100,
            grace_ms: 100,
            ..Limits::default()
        },
        cancel,
        ..LoadOptions::default()
    };
    let factory = lang.load(&path, &opts).unwrap_or_else(|e| panic!("{e}"));
    let cx = InstanceContext {
        config: Arc::new(config.clone()),
        ..InstanceContext::default()
    };
    factory.instantiate(&cx).unwrap_or_else(|e| panic!("{e}"))
}

/// One `assemble` of the asker in `lang`: the answer lines.
fn ask(lang: Lang, services: &Arc<SessionServices>, requests: Value) -> Vec<String> {
    let dir = tempfile::tempdir().unwrap();
    let config = json!({ "requests": requests });
    let mut engine = asker(lang, dir.path(), &config, None);
    let r = engine
        .assemble(&call(services, &config), &assemble_params())
        .unwrap_or_else(|e| panic!("{lang:?}: {e}"));
    lines(&r)
}

fn lines(r: &AssembleResult) -> Vec<String> {
    r.system_prompt_addition
        .as_deref()
        .unwrap_or("")
        .lines()
        .map(str::to_owned)
        .collect()
}

#[test]
fn complete_answers_alike_in_lua_and_rhai_and_sends_what_the_script_asked() {
    let mut answers = Vec::new();
    for lang in [Lang::Lua, Lang::Rhai] {
        let model = FakeModel::start(
            vec![Reply::answer("Paris"), Reply::answer("{\"answer\": 42}")],
            Reply::answer("unused"),
        );
        let services = services_with(Some(fake_client(&model, None)), limits(4, 1_000_000, 5_000));
        let got = ask(
            lang,
            &services,
            json!([
                {"prompt": "Capital of France?", "system": "Be brief.", "maxTokens": 50, "temperature": 0.5},
                {"messages": [{"role": "user", "content": "The answer?"}, {"role": "assistant", "content": "Which?"}, {"role": "user", "content": "To everything."}],
                 "maxTokens": 100000,
                 "schema": {"type": "object", "properties": {"answer": {"type": "integer"}}, "required": ["answer"]}},
            ]),
        );
        assert_eq!(
            got,
            vec![
                "ok|Paris|fake-model|100|20".to_owned(),
                "ok|{\"answer\": 42}|fake-model|100|20|json:42".to_owned(),
            ],
            "{lang:?}"
        );
        let sent = model.requests();
        assert_eq!(sent.len(), 2);
        let first = &sent[0].body;
        assert_eq!(first["model"], "fake-model");
        assert_eq!(first["max_tokens"], 50);
        assert_eq!(first["temperature"], 0.5);
        assert_eq!(
            first["messages"],
            json!([{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Capital of France?"}])
        );
        assert!(first.get("response_format").is_none());
        let second = &sent[1].body;
        assert_eq!(second["max_tokens"], 256, "capped at maxOutputTokens");
        assert_eq!(second["messages"].as_array().unwrap().len(), 3);
        assert_eq!(second["response_format"]["type"], "json_schema");
        assert_eq!(
            second["response_format"]["json_schema"]["schema"]["required"],
            json!(["answer"])
        );
        answers.push(got);
    }
    assert_eq!(answers[0], answers[1], "Lua and Rhai differ");
}

#[test]
fn complete_budgets_per_turn_and_per_day_are_enforced_by_the_host() {
    for lang in [Lang::Lua, Lang::Rhai] {
        // Two calls a turn: the third is refused without reaching the model.
        let model = FakeModel::start(vec![], Reply::answer("yes"));
        let services = services_with(Some(fake_client(&model, None)), limits(2, 1_000_000, 5_000));
        let ask3 = json!([{"prompt": "a"}, {"prompt": "b"}, {"prompt": "c"}]);
        let got = ask(lang, &services, ask3.clone());
        assert_eq!(got[0], "ok|yes|fake-model|100|20", "{lang:?}");
        assert_eq!(got[1], "ok|yes|fake-model|100|20", "{lang:?}");
        assert!(
            got[2].starts_with("error|calls_per_turn|"),
            "{lang:?}: {got:?}"
        );
        assert!(got[2].contains("the 2 model calls this turn allows are spent"));
        assert_eq!(model.requests().len(), 2);
        // A new turn gives the calls back.
        services.model.begin_turn();
        let got = ask(lang, &services, json!([{"prompt": "d"}]));
        assert_eq!(got, vec!["ok|yes|fake-model|100|20"], "{lang:?}");

        // The day's tokens: the first call (reserving prompt + 256, using 120) fits in 300; the second's
        // reservation (prompt + 256) would not.
        let model = FakeModel::start(vec![], Reply::answer("yes"));
        let services = services_with(Some(fake_client(&model, None)), limits(10, 300, 5_000));
        let got = ask(lang, &services, json!([{"prompt": "a"}, {"prompt": "b"}]));
        assert_eq!(got[0], "ok|yes|fake-model|100|20", "{lang:?}");
        assert!(
            got[1].starts_with("error|tokens_per_day|"),
            "{lang:?}: {got:?}"
        );
        assert_eq!(
            model.requests().len(),
            1,
            "a refused call never reaches the model"
        );
    }
}

#[test]
fn complete_slower_than_the_script_deadline_is_not_a_deadline_fault() {
    // The script's deadline is 100 ms (grace 100 ms); the model answers after 700 ms.
    for lang in [Lang::Lua, Lang::Rhai] {
        let model = FakeModel::start(
            vec![],
            Reply::answer("late but fine").slow(Duration::from_millis(700)),
        );
        let services = services_with(Some(fake_client(&model, None)), limits(4, 1_000_000, 5_000));
        let got = ask(lang, &services, json!([{"prompt": "a"}, {"prompt": "b"}]));
        assert_eq!(
            got,
            vec!["ok|late but fine|fake-model|100|20"; 2],
            "{lang:?}"
        );
    }
}

#[test]
fn complete_slower_than_its_own_limit_is_a_timeout_the_script_reads() {
    for lang in [Lang::Lua, Lang::Rhai] {
        let model = FakeModel::start(
            vec![],
            Reply::answer("too late").slow(Duration::from_secs(3)),
        );
        let services = services_with(Some(fake_client(&model, None)), limits(4, 1_000_000, 300));
        let got = ask(lang, &services, json!([{"prompt": "a"}]));
        assert_eq!(got.len(), 1);
        assert!(
            got[0].starts_with("error|timeout|host"),
            "{lang:?}: {got:?}"
        );
        assert!(got[0].contains("did not answer within 300 ms"), "{got:?}");
    }
}

#[test]
fn complete_is_cancelled_with_its_turn() {
    for lang in [Lang::Lua, Lang::Rhai] {
        let model = FakeModel::start(
            vec![],
            Reply::answer("never read").slow(Duration::from_secs(20)),
        );
        let services = services_with(
            Some(fake_client(&model, None)),
            limits(4, 1_000_000, 30_000),
        );
        let dir = tempfile::tempdir().unwrap();
        let config = json!({ "requests": [{"prompt": "a"}] });
        let cancel = Arc::new(AtomicBool::new(false));
        let mut engine = asker(lang, dir.path(), &config, Some(Arc::clone(&cancel)));
        let flag = Arc::clone(&cancel);
        let canceller = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(300));
            flag.store(true, Ordering::SeqCst);
        });
        let r: Result<AssembleResult, EngineError> =
            engine.assemble(&call(&services, &config), &assemble_params());
        canceller.join().unwrap();
        let e = r.expect_err("a cancelled call gives no result");
        assert_eq!(e.kind, EngineErrorKind::Cancelled, "{lang:?}: {e}");
        cancel.store(false, Ordering::SeqCst);
    }
}

#[test]
fn complete_without_a_model_is_a_clear_answer_not_a_fault() {
    for lang in [Lang::Lua, Lang::Rhai] {
        let services = services_with(None, ModelLimits::default());
        let got = ask(lang, &services, json!([{"prompt": "a"}]));
        assert_eq!(got.len(), 1);
        assert!(
            got[0].starts_with("error|unavailable|"),
            "{lang:?}: {got:?}"
        );
        assert!(got[0].contains("no model is configured"), "{got:?}");
    }
}

#[test]
fn complete_bad_requests_are_script_errors() {
    let services = services_with(None, ModelLimits::default());
    for (request, needle) in [
        (json!({}), "needs messages or a prompt"),
        (json!({"prompt": "a", "messages": []}), "not both"),
        (
            json!({"messages": [{"role": "tool", "content": "x"}]}),
            "role \"tool\"",
        ),
        (json!({"prompt": "a", "temperature": 7}), "temperature"),
        (json!({"prompt": "a", "apiKey": "x"}), "unknown field"),
        (
            json!({"prompt": "a", "responseFormat": 3}),
            "responseFormat",
        ),
    ] {
        let e = run_complete(&services, request.clone()).expect_err("a bad request");
        assert!(!e.is_host_fault(), "{request}");
        assert!(e.message().contains(needle), "{request}: {}", e.message());
        assert!(
            e.message().starts_with("host.complete: request"),
            "{}",
            e.message()
        );
    }
}

/// `host.complete(request)` run on this thread (so a log capture sees everything).
fn run_complete(
    services: &Arc<SessionServices>,
    request: Value,
) -> Result<Value, ctxhost::testing::HostError> {
    let f = ctxhost::testing::table::find(&["complete"]).unwrap();
    let mut scope = HostScope::new(
        "asker",
        ResultLimits::default(),
        Arc::new(StopSignals::new(None)),
    );
    scope.set_call(Some(call(services, &json!({}))));
    let arg = HostValue::Data(Box::new(request));
    match scope.run(f, "host.complete", [arg, HostValue::Nil, HostValue::Nil])? {
        ctxhost::testing::HostOut::Data(v) => Ok(v),
        other => panic!("{other:?}"),
    }
}

#[test]
fn complete_never_shows_the_key_or_the_url_to_scripts_or_logs() {
    let mut echo = Reply::json(401, json!({}));
    echo.echo_auth = true;
    let model = FakeModel::start(vec![echo], Reply::answer("fine"));
    let url = model.url();
    let services = services_with(
        Some(fake_client(&model, Some(KEY))),
        limits(4, 1_000_000, 5_000),
    );
    let (answers, logs) = capture(|| {
        [
            run_complete(&services, json!({"prompt": "a"})).unwrap(),
            run_complete(&services, json!({"prompt": "b"})).unwrap(),
        ]
    });
    assert_eq!(answers[0]["reason"], "http", "{}", answers[0]);
    assert_eq!(answers[1]["text"], "fine");
    // The key went to the model, in the Authorization header only.
    let sent = model.requests();
    assert_eq!(
        sent[0].header("authorization"),
        Some(format!("Bearer {KEY}").as_str())
    );
    assert!(!sent[0].body.to_string().contains(KEY));
    for a in &answers {
        let text = a.to_string();
        assert!(!text.contains(KEY), "{text}");
        assert!(!text.contains(&url), "{text}");
        assert!(!text.contains("127.0.0.1"), "{text}");
    }
    // The host's log names the endpoint, for the operator, never the key.
    assert!(logs.contains("answered HTTP 401"), "{logs}");
    assert!(logs.contains("127.0.0.1"), "{logs}");
    assert!(!logs.contains(KEY), "{logs}");
}

/// A summarizer asking a model that answers after 700 ms (the script's deadline is 100 ms).
#[test]
fn summarize_with_a_slow_model_is_not_a_deadline_fault() {
    const GOOD: &str = "## Goal\n- Read /etc/hosts\n\n## Progress\n- It maps localhost.";
    for lang in [Lang::Lua, Lang::Rhai] {
        let model = FakeModel::start(vec![], Reply::answer(GOOD).slow(Duration::from_millis(700)));
        let llm = LlmSummarizer::new(&LlmSettings::new(model.url(), "fake-model"), None).unwrap();
        let services = Arc::new(SessionServices {
            tokens: TokenCache::new(Arc::new(Estimate)),
            summarizer: Arc::new(llm),
            compaction: CompactionSettings::default(),
            limits: ResultLimits::default(),
            model: SessionModel::default(),
            host_times: Default::default(),
            cancel: Default::default(),
        });
        let dir = tempfile::tempdir().unwrap();
        let config = json!({});
        let path = dir.path().join(lang.file("summer"));
        let source = match lang {
            Lang::Lua => {
                r#"local M = { info = { id = "summer", name = "Summer" } }
function M.ingest(p) return { ingested = true } end
function M.assemble(p)
  local s = host.summarize(p.messages, { maxTokens = 300 })
  return { messages = p.messages, estimatedTokens = 0, systemPromptAddition = s.text }
end
function M.compact(p) return host.delegateCompaction(p) end
return M
"#
            }
            Lang::Rhai => {
                r#"fn info() { #{ id: "summer", name: "Summer" } }
fn ingest(p) { #{ ingested: true } }
fn assemble(p) {
    let s = host::summarize(p.messages, #{ maxTokens: 300 });
    #{ messages: p.messages, estimatedTokens: 0, systemPromptAddition: s.text }
}
fn compact(p) { host::delegateCompaction(p) }
"#
            }
        };
        std::fs::write(&path, source).unwrap();
        let opts = LoadOptions {
            config: Arc::new(config.clone()),
            limits: Limits {
                deadline_ms: 100,
                grace_ms: 100,
                ..Limits::default()
            },
            ..LoadOptions::default()
        };
        let factory = lang.load(&path, &opts).unwrap();
        let mut engine = factory.instantiate(&InstanceContext::default()).unwrap();
        let r = engine
            .assemble(&call(&services, &config), &assemble_params())
            .unwrap_or_else(|e| panic!("{lang:?}: {e}"));
        assert!(
            r.system_prompt_addition
                .as_deref()
                .unwrap_or("")
                .starts_with(GOOD),
            "{lang:?}: the model's summary: {:?}",
            r.system_prompt_addition
        );
    }
}

/// `host.summarizer: {kind: "llm"}` in the config gives `host.complete` its model through
/// `Host` and `Session`; a new turn gives the turn's calls back.
#[test]
fn the_configured_model_serves_host_complete_through_a_session() {
    let model = FakeModel::start(vec![], Reply::answer("from the configured model"));
    let dir = tempfile::tempdir().unwrap();
    let engine = dir.path().join("asker.lua");
    std::fs::write(&engine, ASKER_LUA).unwrap();
    let mut config = Config::default();
    config.host.summarizer = SummarizerSettings::Llm(LlmSettings::new(model.url(), "fake-model"));
    config.host.complete.max_calls_per_turn = 1;
    config.plugins.slots.context_engine = Some("asker".into());
    config.plugins.entries.insert(
        "asker".into(),
        Entry {
            path: Some(engine),
            config: json!({"requests": [{"prompt": "a"}, {"prompt": "b"}]}),
            ..Entry::default()
        },
    );
    let host = Host::new(config).unwrap();
    let spec = SessionSpec::new("s", dir.path().join("s.jsonl"));
    let mut s = Session::create(host.session_setup(&spec), &spec.file, "").unwrap();
    for turn in 0..2 {
        let a = s
            .begin_turn(TurnInput {
                user: Message::user(format!("turn {turn}")),
                is_heartbeat: false,
            })
            .unwrap();
        assert!(!a.fallback, "{a:?}");
        let lines: Vec<&str> = a
            .system_prompt_addition
            .as_deref()
            .unwrap()
            .lines()
            .collect();
        assert_eq!(lines[0], "ok|from the configured model|fake-model|100|20");
        assert!(lines[1].starts_with("error|calls_per_turn|"), "{lines:?}");
        s.end_turn(vec![Message::assistant("ok")]).unwrap();
    }
    assert_eq!(model.requests().len(), 2, "one call per turn");
}

//! The harness shared by `tests/lua_engine.rs` and `tests/rhai_engine.rs`: real scripts under
//! `tests/fixtures/<lang>/`, driven through the `EngineFactory` / `Engine` traits with a
//! `HostCall` over a small real session. [`Lang`] says which adapter; the helpers and the cases
//! that are the same in both languages live here, each file keeps what is particular to it.
#![allow(dead_code)]

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use ctxhost::compaction::CompactionSettings;
use ctxhost::contract::{
    AfterTurnParams, AssembleParams, AssembleResult, BootstrapParams, CommitStatus,
    CommitTurnParams, CompactParams, CompactionTarget, ContextMode, IngestBatchParams,
    IngestParams, MaintainParams, MaintainReason, Method, ResultLimits, SubagentEndReason,
    SubagentEndedParams, SubagentSpawnParams,
};
use ctxhost::engine::lua::{LoadOptions, LuaFactory};
use ctxhost::engine::rhai::{RhaiFactory, RhaiLimits};
use ctxhost::engine::script::{ScriptInstance, ScriptVm};
use ctxhost::engine::{Engine, EngineFactory, InstanceContext};
use ctxhost::error::{Disposition, EngineError, EngineErrorKind};
use ctxhost::host::{HostCall, SessionServices};
use ctxhost::message::{Message, MessageBody};
use ctxhost::sandbox::Limits;
use ctxhost::summarize::BuiltinSummarizer;
use ctxhost::tokens::{Estimate, TokenCache};
use serde_json::{Value, json};

/// The script language under test: its fixture directory, file extension and loader.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Lang {
    Lua,
    Rhai,
}

impl Lang {
    /// The extension of an engine file, without the dot.
    pub fn ext(self) -> &'static str {
        match self {
            Lang::Lua => "lua",
            Lang::Rhai => "rhai",
        }
    }

    /// The language of an engine file, by its extension (`.rhai`, else Lua).
    pub fn of(path: &std::path::Path) -> Lang {
        if path.extension().is_some_and(|e| e == "rhai") {
            Lang::Rhai
        } else {
            Lang::Lua
        }
    }

    /// `stem` with this language's extension: `file("hostile")` is `hostile.lua` for Lua.
    pub fn file(self, stem: &str) -> String {
        format!("{stem}.{}", self.ext())
    }

    /// `tests/fixtures/<lang>/<stem>.<ext>`.
    pub fn fixture(self, stem: &str) -> PathBuf {
        PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("tests/fixtures")
            .join(self.ext())
            .join(self.file(stem))
    }

    /// `ctxhost::engine::lua::load` or `ctxhost::engine::rhai::load` (with Rhai's default
    /// limits).
    pub fn load(
        self,
        path: &std::path::Path,
        opts: &LoadOptions,
    ) -> Result<Arc<dyn EngineFactory>, EngineError> {
        self.load_with(path, opts, &RhaiLimits::default())
    }

    /// [`Lang::load`] with Rhai's own limits (Lua has none).
    pub fn load_with(
        self,
        path: &std::path::Path,
        opts: &LoadOptions,
        rhai: &RhaiLimits,
    ) -> Result<Arc<dyn EngineFactory>, EngineError> {
        match self {
            Lang::Lua => ctxhost::engine::lua::load(path, opts),
            Lang::Rhai => ctxhost::engine::rhai::load(path, opts, rhai),
        }
    }

    /// Loads the fixture `stem` with `opts`.
    pub fn load_fixture(
        self,
        stem: &str,
        opts: &LoadOptions,
    ) -> Result<Arc<dyn EngineFactory>, EngineError> {
        self.load(&self.fixture(stem), opts)
    }

    /// A fresh instance of the fixture `stem` with `config`; a load failure panics.
    pub fn instance(self, stem: &str, config: Value) -> Box<dyn Engine> {
        let f = self
            .load_fixture(stem, &opts(config.clone()))
            .unwrap_or_else(|e| panic!("{e}"));
        f.instantiate(&cx(config)).unwrap_or_else(|e| panic!("{e}"))
    }
}

/// A fresh instance of the engine file at `path` with `config` and the host's default limits
/// (not [`test_limits`]: for long, correct runs); a load failure panics naming the file.
pub fn instance_of(path: &std::path::Path, config: &Value) -> Box<dyn Engine> {
    let opts = LoadOptions {
        config: Arc::new(config.clone()),
        ..LoadOptions::default()
    };
    let name = path.display();
    let factory = Lang::of(path)
        .load(path, &opts)
        .unwrap_or_else(|e| panic!("{name}: {e}"));
    let cx = InstanceContext {
        config: Arc::new(config.clone()),
        ..InstanceContext::default()
    };
    factory
        .instantiate(&cx)
        .unwrap_or_else(|e| panic!("{name}: {e}"))
}

pub fn test_limits() -> Limits {
    Limits {
        deadline_ms: 150,
        grace_ms: 2000,
        memory_bytes: 32 << 20,
        ..Limits::default()
    }
}

pub fn opts(config: Value) -> LoadOptions {
    LoadOptions {
        config: Arc::new(config),
        limits: test_limits(),
        agent_dir: "/agent".into(),
        workspace_dir: "/work".into(),
        ..LoadOptions::default()
    }
}

pub fn services() -> Arc<SessionServices> {
    Arc::new(SessionServices {
        tokens: TokenCache::new(Arc::new(Estimate)),
        summarizer: Arc::new(BuiltinSummarizer::new()),
        compaction: CompactionSettings::default(),
        limits: ResultLimits::default(),
        model: Default::default(),
        host_times: Default::default(),
        cancel: Default::default(),
    })
}

/// A small real session: user, assistant with a tool call, its result, a reply, a new question.
pub fn session() -> Vec<Arc<Message>> {
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

pub fn host_call(ctx: &[Arc<Message>], config: Value) -> HostCall {
    HostCall::new(
        "test".into(),
        "s1".into(),
        Arc::new(ctx.to_vec()),
        services(),
        Arc::new(config),
        8000,
    )
}

pub fn cx(config: Value) -> InstanceContext {
    InstanceContext {
        config: Arc::new(config),
        agent_dir: "/agent".into(),
        workspace_dir: "/work".into(),
        session_id: "s1".into(),
        cancel: None,
    }
}

pub fn assemble_params() -> AssembleParams {
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

pub fn compact_params() -> CompactParams {
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

pub fn ingest_params(m: &Arc<Message>) -> IngestParams {
    IngestParams {
        session_id: "s1".into(),
        session_key: None,
        message: m.clone(),
        is_heartbeat: false,
    }
}

pub fn file_name(e: &EngineError) -> String {
    e.location
        .as_ref()
        .map(|l| l.file.clone())
        .unwrap_or_default()
}

pub fn line(e: &EngineError) -> Option<u32> {
    e.location.as_ref().and_then(|l| l.line)
}

pub fn column(e: &EngineError) -> Option<u32> {
    e.location.as_ref().and_then(|l| l.column)
}

// ---------------------------------------------------------------------------------------------
// Loading and validation

pub fn loads_a_table_engine(lang: Lang) {
    let f = lang.load_fixture("table_engine", &opts(json!({}))).unwrap();
    assert_eq!(f.info().id, "table-engine");
    assert_eq!(f.info().owns_compaction, Some(false));
    assert!(f.warnings().is_empty(), "{:?}", f.warnings());
    assert_eq!(f.source(), Some(lang.fixture("table_engine").as_path()));
    let e = f.instantiate(&cx(json!({}))).unwrap();
    assert!(e.defines(Method::AfterTurn));
    assert!(e.defines(Method::Dispose));
}

pub fn missing_file_is_missing_file(lang: Lang) {
    let e = lang.load_fixture("nope", &opts(json!({}))).unwrap_err();
    assert_eq!(e.kind, EngineErrorKind::MissingFile);
}

/// The syntax error in `syntax_error.<ext>`: its kind, file and line; the error, for more checks.
pub fn syntax_error_names_file_and_line(lang: Lang) -> EngineError {
    let e = lang
        .load_fixture("syntax_error", &opts(json!({})))
        .unwrap_err();
    assert_eq!(e.kind, EngineErrorKind::Syntax, "{e}");
    assert!(file_name(&e).ends_with(&lang.file("syntax_error")));
    assert_eq!(line(&e), Some(4), "{e}");
    e
}

/// The error thrown while loading `load_throws.<ext>` at line 3; the error, for more checks.
pub fn runtime_error_at_load_names_file_and_line(lang: Lang, needle: &str) -> EngineError {
    let e = lang
        .load_fixture("load_throws", &opts(json!({})))
        .unwrap_err();
    assert_eq!(e.kind, EngineErrorKind::Runtime, "{e}");
    assert_eq!(line(&e), Some(3), "{e}");
    assert!(e.message.contains(needle), "{e}");
    e
}

/// The factory of `factory_engine.<ext>` throws; the error, for the language's line check.
pub fn factory_throw_is_factory(lang: Lang) -> EngineError {
    let e = lang
        .load_fixture("factory_engine", &opts(json!({"throwIn": "factory"})))
        .unwrap_err();
    assert_eq!(e.kind, EngineErrorKind::Factory, "{e}");
    assert!(e.message.contains("factory refuses"), "{e}");
    e
}

pub fn missing_compact_is_a_contract_error(lang: Lang) {
    let e = lang
        .load_fixture("missing_compact", &opts(json!({})))
        .unwrap_err();
    assert_eq!(e.kind, EngineErrorKind::Contract);
    assert!(
        e.message.contains("required function `compact` is missing"),
        "{e}"
    );
    assert!(file_name(&e).ends_with(&lang.file("missing_compact")));
}

pub fn afterturn_typo_is_a_warning_with_the_suggestion_and_line(lang: Lang) {
    let f = lang
        .load_fixture("typo_afterturn", &opts(json!({})))
        .unwrap();
    let w = f.warnings().join("\n");
    assert!(w.contains("unknown member `afterturn`"), "{w}");
    assert!(w.contains("did you mean `afterTurn`"), "{w}");
    let at = format!("{}:6:", lang.file("typo_afterturn"));
    assert!(w.contains(&at), "{w}");
}

pub fn bad_enum_is_a_contract_error_naming_the_field(lang: Lang) {
    let e = lang.load_fixture("bad_enum", &opts(json!({}))).unwrap_err();
    assert_eq!(e.kind, EngineErrorKind::Contract, "{e}");
    assert!(e.message.contains("turnMaintenanceMode"), "{e}");
    assert!(e.message.contains("sideways"), "{e}");
}

pub fn configured_id_mismatch_warns_and_strict_fails(lang: Lang) {
    let mut o = opts(json!({}));
    o.configured_id = Some("other".into());
    let f = lang.load_fixture("table_engine", &o).unwrap();
    assert!(f.warnings().iter().any(|w| w.contains("differs")));
    o.strict = true;
    let e = lang.load_fixture("table_engine", &o).unwrap_err();
    assert_eq!(e.kind, EngineErrorKind::Contract);
}

// ---------------------------------------------------------------------------------------------
// Lifecycle, state and the host API

pub fn every_lifecycle_method_runs_and_state_persists_across_calls(lang: Lang) {
    let mut e = lang.instance("table_engine", json!({}));
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

pub fn state_survives_save_new_instance_restore(lang: Lang) {
    let ctx = session();
    let call = host_call(&ctx, json!({}));
    let mut a = lang.instance("table_engine", json!({}));
    a.ingest(&call, &ingest_params(&ctx[0])).unwrap();
    a.ingest(&call, &ingest_params(&ctx[1])).unwrap();
    let saved = a.save_state().unwrap();
    // Through text, as a host restart would.
    let text = serde_json::to_string(&saved).unwrap();
    drop(a);
    let mut b = lang.instance("table_engine", json!({}));
    b.restore_state(serde_json::from_str(&text).unwrap())
        .unwrap();
    let r = b.assemble(&call, &assemble_params()).unwrap();
    assert_eq!(
        r.system_prompt_addition.as_deref(),
        Some("ingested=2 assembled=1 upper=ABC")
    );
}

pub fn resident_messages_map_back_to_the_same_arcs(lang: Lang) {
    let ctx = session();
    let call = host_call(&ctx, json!({}));
    let mut e = lang.instance("table_engine", json!({}));
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

pub fn copies_and_new_messages_are_converted(lang: Lang) {
    let ctx = session();
    // A copy (a Lua table copy, a Rhai `to_map()`) is converted, even when edited back to the
    // original.
    let mut e = lang.instance("table_engine", json!({"mode": "copy"}));
    let r = e
        .assemble(
            &host_call(&ctx, json!({"mode": "copy"})),
            &assemble_params(),
        )
        .unwrap();
    assert!(!Arc::ptr_eq(&r.messages[0], &ctx[0]));
    assert_eq!(*r.messages[0], *ctx[0]);

    let mut e = lang.instance("table_engine", json!({"mode": "new"}));
    let r = e
        .assemble(&host_call(&ctx, json!({"mode": "new"})), &assemble_params())
        .unwrap();
    assert!(matches!(r.messages[0].body, MessageBody::User(_)));
    assert_eq!(r.messages[0].text(), "made up");

    let mut e = lang.instance("table_engine", json!({"mode": "last2"}));
    let r = e
        .assemble(
            &host_call(&ctx, json!({"mode": "last2"})),
            &assemble_params(),
        )
        .unwrap();
    assert!(Arc::ptr_eq(&r.messages[0], &ctx[3]) && Arc::ptr_eq(&r.messages[1], &ctx[4]));
}

pub fn host_repair_pairing_and_summarize_work_from_scripts(lang: Lang) {
    // Orphan tool result: the repaired list drops it, the rest keep identity.
    let ctx = session();
    let orphaned = vec![ctx[0].clone(), ctx[2].clone(), ctx[3].clone()];
    let mut e = lang.instance("table_engine", json!({"mode": "repair"}));
    let r = e
        .assemble(
            &host_call(&orphaned, json!({"mode": "repair"})),
            &assemble_params(),
        )
        .unwrap();
    assert_eq!(r.messages.len(), 2);
    assert!(Arc::ptr_eq(&r.messages[0], &ctx[0]) && Arc::ptr_eq(&r.messages[1], &ctx[3]));

    let mut e = lang.instance("table_engine", json!({"mode": "summarize"}));
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

/// `log_long.<ext>` logs 90 KB of "€" (three bytes each, so the 64 KiB log cap falls inside a
/// character) at load and from `assemble`: the host cuts each line on a character boundary, the
/// calls succeed, and a session on the engine answers from it with nothing quarantined.
pub fn a_long_multibyte_log_line_is_cut_not_a_panic(lang: Lang) {
    let ctx = session();
    let mut e = lang.instance("log_long", json!({}));
    for _ in 0..2 {
        let r = e
            .assemble(&host_call(&ctx, json!({})), &assemble_params())
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(r.messages.len(), ctx.len());
    }

    let mut config = ctxhost::config::Config::default();
    config.plugins.slots.context_engine = Some("log-long".into());
    config.plugins.entries.insert(
        "log-long".into(),
        ctxhost::config::Entry {
            path: Some(lang.fixture("log_long")),
            ..ctxhost::config::Entry::default()
        },
    );
    let host = ctxhost::runtime::Host::new(config).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let spec = ctxhost::runtime::SessionSpec::new("s1", dir.path().join("s1.jsonl"));
    let mut s = ctxhost::session::Session::create(host.session_setup(&spec), &spec.file, "/work")
        .unwrap_or_else(|e| panic!("{e}"));
    let user: Message =
        serde_json::from_value(json!({"role": "user", "content": "hi", "timestamp": 1})).unwrap();
    let a = s
        .begin_turn(ctxhost::session::TurnInput {
            user,
            is_heartbeat: false,
        })
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(a.engine, "log-long");
    assert!(!a.fallback);
    assert!(
        host.quarantine().all().is_empty(),
        "{:?}",
        host.quarantine().all()
    );
}

/// What `host_edges.<ext>` reports, line by line: the host API gives both languages the same
/// results and the same errors (function names spelled `host.x` here).
pub const HOST_EDGES: [&str; 15] = [
    "0",
    "0",
    "0",
    "true",
    "true",
    "2",
    "error: host.tokens expects a string, a message or a list of messages, got a boolean",
    "error: host.tokens: item 1 is a number, expected a message",
    "error: host.tokens: not a valid message: missing field `role`",
    "error: host.summarize: messages expected a list of messages, got nothing",
    "true",
    "error: host.summarize: opts: unknown field `bogus`",
    "true",
    "error: host.delegateCompaction: expects p, got nothing",
    "true",
];

/// The lines `host_edges.<ext>` reports, errors cut to the host's message (the language's
/// location and traceback dropped, `host::x` spelled `host.x`).
pub fn host_edges(lang: Lang) -> Vec<String> {
    let ctx = session();
    let mut e = lang.instance("host_edges", json!({}));
    let r = e
        .assemble(&host_call(&ctx, json!({})), &assemble_params())
        .unwrap_or_else(|e| panic!("{e}"));
    let text = r.system_prompt_addition.unwrap_or_default();
    text.lines()
        .map(|l| match l.strip_prefix("error: ") {
            None => l.to_string(),
            Some(rest) => {
                let at = rest.find("host").unwrap_or(0);
                let msg = rest[at..].replace("::", ".");
                let msg = msg.split(", expected one of").next().unwrap_or_default();
                format!("error: {}", msg.split(" (line ").next().unwrap_or_default())
            }
        })
        .collect()
}

/// `host.summarize` on a summarizer that fails: a host fault (`Host`, never a quarantine), not
/// the engine's.
pub fn a_failing_summarizer_is_a_host_fault(lang: Lang) {
    #[derive(Debug)]
    struct Down;
    impl ctxhost::summarize::Summarizer for Down {
        fn summarize<'a>(
            &'a self,
            _: ctxhost::summarize::SummaryRequest<'a>,
            _: &'a dyn ctxhost::tokens::TokenCounter,
        ) -> ctxhost::summarize::SummaryFuture<'a> {
            Box::pin(async { Err(ctxhost::Error::Summarize("the endpoint is down".into())) })
        }
    }
    let config = json!({"mode": "summarize"});
    let ctx = session();
    let services = Arc::new(SessionServices {
        tokens: TokenCache::new(Arc::new(Estimate)),
        summarizer: Arc::new(Down),
        compaction: CompactionSettings::default(),
        limits: ResultLimits::default(),
        model: Default::default(),
        host_times: Default::default(),
        cancel: Default::default(),
    });
    let call = HostCall::new(
        "test".into(),
        "s1".into(),
        Arc::new(ctx.clone()),
        services,
        Arc::new(config.clone()),
        8000,
    );
    let mut e = lang.instance("table_engine", config);
    let err = e.compact(&call, &compact_params()).unwrap_err();
    assert_eq!(err.kind, EngineErrorKind::Host, "{err}");
    assert_eq!(err.disposition(), Disposition::HostFault, "{err}");
    assert!(err.message.contains("the endpoint is down"), "{err}");
    assert!(err.message.contains("summarize"), "{err}");
    // The engine is fine: the next call works.
    assert!(e.assemble(&call, &assemble_params()).is_ok());
}

// ---------------------------------------------------------------------------------------------
// Failure kinds

/// Every lifecycle method, as `factory_engine.<ext>` names it in `throwIn`.
pub const LIFECYCLE_METHODS: [&str; 12] = [
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
];

/// The error of `method` on a `factory_engine.<ext>` told to throw in it.
pub fn runtime_failure(lang: Lang, method: &str) -> EngineError {
    let config = json!({"throwIn": method});
    let mut e = lang.instance("factory_engine", config.clone());
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

/// A throw in each lifecycle method is a quarantining runtime error at `expected_line` of
/// `factory_engine.<ext>`; the errors by method, for more checks.
pub fn runtime_error_in_each_lifecycle_method_is_runtime_with_line(
    lang: Lang,
    expected_line: u32,
) -> Vec<(&'static str, EngineError)> {
    let factory_file = lang.file("factory_engine");
    let mut errors = Vec::new();
    for method in LIFECYCLE_METHODS {
        let e = runtime_failure(lang, method);
        assert_eq!(e.kind, EngineErrorKind::Runtime, "{method}: {e}");
        assert_eq!(e.disposition(), Disposition::Quarantine);
        assert!(
            e.message.contains(&format!("boom in {method}")),
            "{method}: {e}"
        );
        assert!(file_name(&e).ends_with(&factory_file), "{method}: {e}");
        assert_eq!(line(&e), Some(expected_line), "{method}: {e}");
        errors.push((method, e));
    }
    errors
}

/// `assemble` of `hostile.<ext>` running the attack `name` under `limits`.
pub fn attack_with(lang: Lang, name: &str, limits: Limits) -> Result<AssembleResult, EngineError> {
    attack_under(lang, name, limits, &RhaiLimits::default())
}

/// [`attack_with`], with Rhai's own limits too.
pub fn attack_under(
    lang: Lang,
    name: &str,
    limits: Limits,
    rhai: &RhaiLimits,
) -> Result<AssembleResult, EngineError> {
    let config = json!({"attack": name});
    let mut o = opts(config.clone());
    o.limits = limits;
    let f = lang
        .load_with(&lang.fixture("hostile"), &o, rhai)
        .unwrap_or_else(|e| panic!("{e}"));
    let mut e = f.instantiate(&cx(config.clone())).unwrap();
    let ctx = session();
    e.assemble(&host_call(&ctx, config), &assemble_params())
}

/// The error of the attack `name` under the test limits.
pub fn attack(lang: Lang, name: &str) -> EngineError {
    attack_with(lang, name, test_limits()).expect_err(name)
}

/// The error of the attack `name`, checked to be of `kind` and located in `hostile.<ext>`.
pub fn assert_kind(lang: Lang, name: &str, kind: EngineErrorKind) -> EngineError {
    let e = attack(lang, name);
    assert_eq!(e.kind, kind, "{name}: {e}");
    assert!(
        file_name(&e).ends_with(&lang.file("hostile")),
        "{name}: {e}"
    );
    e
}

pub fn cpu_attacks_hit_the_deadline(lang: Lang, names: &[&str]) {
    for &name in names {
        let e = assert_kind(lang, name, EngineErrorKind::Deadline);
        assert_eq!(e.disposition(), Disposition::Quarantine);
        assert!(e.message.contains("deadline"), "{name}: {e}");
        assert!(line(&e).is_some(), "{name}: {e}");
    }
}

/// Each attack in `names` writes to the host's messages: a runtime error whose message contains
/// `needle`, and the host's view is unchanged.
pub fn changing_input_messages_fails_and_leaves_the_host_view_intact(
    lang: Lang,
    names: &[&str],
    needle: &str,
) {
    let before: Vec<Message> = session().iter().map(|m| (**m).clone()).collect();
    for &name in names {
        let e = assert_kind(lang, name, EngineErrorKind::Runtime);
        assert!(e.message.contains(needle), "{name}: {e}");
    }
    let after: Vec<Message> = session().iter().map(|m| (**m).clone()).collect();
    assert_eq!(before, after);
}

/// Each `(attack, needle)` returns a bad result: an invalid result naming `needle`, at a line.
pub fn bad_results_are_invalid_results_naming_the_field(lang: Lang, cases: &[(&str, &str)]) {
    for &(name, needle) in cases {
        let e = assert_kind(lang, name, EngineErrorKind::InvalidResult);
        assert!(e.message.contains(needle), "{name}: {e}");
        assert!(line(&e).is_some(), "{name}: the line of assemble: {e}");
    }
}

pub fn oversized_results_are_capped(lang: Lang, names: &[&str]) {
    for &name in names {
        let mut limits = test_limits();
        limits.results.max_result_bytes = 1 << 20;
        let err = attack_with(lang, name, limits).expect_err(name);
        assert_eq!(err.kind, EngineErrorKind::InvalidResult, "{name}: {err}");
        assert!(err.message.contains("bytes"), "{name}: {err}");
    }
}

pub fn cancellation_is_cancelled_not_a_quarantine(lang: Lang) {
    let config = json!({"attack": "loop"});
    let mut o = opts(config.clone());
    o.limits.deadline_ms = 20_000;
    let path = lang.fixture("hostile");
    match lang {
        Lang::Lua => {
            let f = LuaFactory::load(&path, &o, ()).unwrap();
            cancelled(f.instantiate_typed(&cx(config.clone())).unwrap(), config);
        }
        Lang::Rhai => {
            let f = RhaiFactory::load(&path, &o, RhaiLimits::default()).unwrap();
            cancelled(f.instantiate_typed(&cx(config.clone())).unwrap(), config);
        }
    }
}

/// Sets `e`'s cancel flag while it runs an endless `assemble`: cancelled, not abandoned.
fn cancelled<V: ScriptVm>(mut e: ScriptInstance<V>, config: Value) {
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

pub fn a_stopped_engine_is_still_usable_and_other_instances_are_unaffected(lang: Lang) {
    let config = json!({"attack": "loop"});
    let mut e = lang.instance("hostile", config.clone());
    let ctx = session();
    let err = e
        .assemble(&host_call(&ctx, config.clone()), &assemble_params())
        .unwrap_err();
    assert_eq!(err.kind, EngineErrorKind::Deadline);
    // The interrupt stopped it in time: the engine is not abandoned and answers the next call.
    assert!(
        e.ingest(&host_call(&ctx, config), &ingest_params(&ctx[0]))
            .unwrap()
            .ingested
    );
    let mut other = lang.instance("table_engine", json!({}));
    assert!(
        other
            .assemble(&host_call(&ctx, json!({})), &assemble_params())
            .is_ok()
    );
}

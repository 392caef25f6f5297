//! The harness shared by `tests/lua_engine.rs` and `tests/rhai_engine.rs`: real scripts under
//! `tests/fixtures/<lang>/`, driven through the `EngineFactory` / `Engine` traits with a
//! `HostCall` over a small real session. [`Lang`] says which adapter; the helpers and the cases
//! that are the same in both languages live here, each file keeps what is particular to it.
#![allow(dead_code)]

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use ctxhost::HostCall;
use ctxhost::contract::limits::Limits;
use ctxhost::contract::limits::RhaiLimits;
use ctxhost::contract::message::{Message, MessageBody};
use ctxhost::contract::{
    AfterTurnParams, AssembleParams, AssembleResult, BootstrapParams, CommitStatus,
    CommitTurnParams, CompactParams, CompactionTarget, ContextMode, IngestBatchParams,
    IngestParams, MaintainParams, MaintainReason, Method, ResultLimits, SubagentEndReason,
    SubagentEndedParams, SubagentSpawnParams,
};
use ctxhost::engine::LoadOptions;
use ctxhost::engine::{Engine, EngineFactory, InstanceContext};
use ctxhost::services::compaction::CompactionSettings;
use ctxhost::services::summarize::BuiltinSummarizer;
use ctxhost::services::tokens::{Estimate, TokenCache};
use ctxhost::testing::SessionServices;
use ctxhost::testing::lua::LuaFactory;
use ctxhost::testing::rhai::RhaiFactory;
use ctxhost::testing::{ScriptInstance, ScriptVm};
use ctxhost::{Disposition, EngineError, EngineErrorKind};
use serde_json::{Value, json};

mod calls;
mod failures;
// The cli test binary compiles this harness too and uses none of the cases.
#[allow(unused_imports)]
pub use calls::*;
#[allow(unused_imports)]
pub use failures::*;

/// The script language under test: its fixture directory, file extension and loader.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Lang {
    Lua,
    Rhai,
}

/// The language's file extension, as fixture names and messages spell it (`lua`, `rhai`).
impl std::fmt::Display for Lang {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.ext())
    }
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

    /// `ctxhost::testing::lua::load` or `ctxhost::testing::rhai::load` (with Rhai's default
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
            Lang::Lua => ctxhost::testing::lua::load(path, opts),
            Lang::Rhai => ctxhost::testing::rhai::load(path, opts, rhai),
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

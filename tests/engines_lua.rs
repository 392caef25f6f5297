//! The example engines in `scripts/`.
//!
//! The replay runs on the **real adapter** (`ctxhost::engine::lua::load`) over every shared
//! transcript at a window of 8,000 tokens: before every model call the engine assembles; the result (messages plus `systemPromptAddition`, measured by the
//! host's counter) must fit the budget and be well paired. Halfway through, the engine's state is
//! saved as JSON and the engine restarts in a fresh VM from it (a host restart). Each replay runs
//! twice and must assemble the same contexts both times (determinism). Compaction results are
//! applied as the host applies them (summary appended, context cut at `firstKeptEntryId`).
//!
//! The smaller checks below run on the test harness (`tests/lua_harness`), which lets a test
//! read `p.state` directly.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is a failure

mod common;
mod lua_harness;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use mlua::{LuaSerdeExt, Table, Value};
use serde_json::{Value as Json, json};

use ctxhost::compaction::{self, CompactionSettings};
use ctxhost::contract::{
    AssembleParams, AssembleResult, CompactParams, CompactResult, CompactionTarget, IngestParams,
    ResultLimits,
};
use ctxhost::engine::lua::{self, LoadOptions};
use ctxhost::engine::{Engine, InstanceContext};
use ctxhost::host::{HostCall, SessionServices};
use ctxhost::message::Message;
use ctxhost::pairing;
use ctxhost::summarize::BuiltinSummarizer;
use ctxhost::tokens::TokenCache;
use ctxhost::tokens::{Estimate, TokenCounter};
use lua_harness::Harness;

const WINDOW: u64 = 8_000;

const ENGINES: [&str; 5] = [
    "recent_turns.lua",
    "delegating.lua",
    "tool_pruner.lua",
    "pinned_facts.lua",
    "hierarchical.lua",
];

fn script(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("scripts")
        .join(name)
}

/// A running engine on the harness, with its resident context.
struct Run {
    h: Harness,
    engine: Table,
    state: Table,
    owns: bool,
}

impl Run {
    fn start(name: &str, state: Option<&Json>) -> Run {
        let h = Harness::new().expect("harness");
        let engine = h.load_engine(&script(name), json!({})).expect(name);
        let info: Table = engine.get("info").expect("info");
        let owns = info.get::<Option<bool>>("ownsCompaction").expect("owns") == Some(true);
        let state = match state {
            Some(s) => match h.lua.to_value(s).expect("state") {
                Value::Table(t) => t,
                _ => h.lua.create_table().expect("table"),
            },
            None => h.lua.create_table().expect("table"),
        };
        Run {
            h,
            engine,
            state,
            owns,
        }
    }

    fn list(&self, context: &[Arc<Message>]) -> Table {
        let ms: Vec<Json> = context
            .iter()
            .map(|m| serde_json::to_value(&**m).expect("json"))
            .collect();
        lua_harness::lua_messages(&self.h.lua, &ms).expect("messages")
    }

    fn call(&self, method: &str, fields: Json, messages: Option<Table>) -> Value {
        let p = self
            .h
            .params(fields, messages, &self.state)
            .expect("params");
        self.h
            .call(&self.engine, method, p)
            .unwrap_or_else(|e| panic!("{method}: {e}"))
    }

    fn ingest(&self, context: &[Arc<Message>], m: &Arc<Message>) {
        self.h.set_call(context.to_vec(), WINDOW, json!({}));
        let p = self
            .h
            .params(
                json!({"sessionId": "s", "isHeartbeat": false}),
                None,
                &self.state,
            )
            .expect("params");
        let mv = lua_harness::lua_message(&self.h.lua, &serde_json::to_value(&**m).expect("json"))
            .expect("message");
        p.set("message", mv).expect("set");
        self.h.call(&self.engine, "ingest", p).expect("ingest");
    }

    fn assemble(&self, context: &[Arc<Message>]) -> AssembleResult {
        self.h.set_call(context.to_vec(), WINDOW, json!({}));
        let v = self.call(
            "assemble",
            json!({"sessionId": "s", "tokenBudget": WINDOW}),
            Some(self.list(context)),
        );
        let j: Json = self.h.json(v).expect("json");
        serde_json::from_value(j).unwrap_or_else(|e| panic!("assemble result: {e}"))
    }

    fn compact(&self, context: &[Arc<Message>], force: bool) -> CompactResult {
        self.h.set_call(context.to_vec(), WINDOW, json!({}));
        let tokens: u64 = context.iter().map(|m| Estimate.count_message(m)).sum();
        let v = self.call(
            "compact",
            json!({"sessionId": "s", "tokenBudget": WINDOW, "force": force,
                   "currentTokenCount": tokens, "compactionTarget": "budget"}),
            None,
        );
        let j: Json = self.h.json(v).expect("json");
        serde_json::from_value(j).unwrap_or_else(|e| panic!("compact result: {e}"))
    }

    fn save(&self) -> Json {
        self.h
            .lua
            .from_value(Value::Table(self.state.clone()))
            .expect("state json")
    }
}

fn tokens(ms: &[Arc<Message>]) -> u64 {
    ms.iter().map(|m| Estimate.count_message(m)).sum()
}

/// Applies a compaction result the way the session does; returns the new context.
fn apply(context: &[Arc<Message>], r: &CompactResult, next_id: &mut u64) -> Vec<Arc<Message>> {
    let Some(out) = r.result.as_ref().filter(|_| r.compacted) else {
        return context.to_vec();
    };
    let Some(summary) = &out.summary else {
        return context.to_vec();
    };
    let first = out.first_kept_entry_id.clone().unwrap_or_default();
    let from = context
        .iter()
        .position(|m| m.id == first)
        .unwrap_or_else(|| panic!("firstKeptEntryId {first} is not in the context"));
    let mut m = compaction::summary_message(summary, out.tokens_before, None, &first);
    *next_id += 1;
    m.id = format!("c{next_id:06}");
    let mut ctx = vec![Arc::new(m)];
    ctx.extend(context[from..].iter().cloned());
    ctx
}

/// The real adapter: one engine instance per session, called as the session calls it.
struct Real {
    engine: Box<dyn Engine>,
    services: Arc<SessionServices>,
}

impl Real {
    fn start(name: &str, state: Option<Json>) -> Real {
        let factory = lua::load(&script(name), &LoadOptions::default())
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        let mut engine = factory
            .instantiate(&InstanceContext::default())
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        if let Some(s) = state {
            engine.restore_state(s).expect("restore");
        }
        let services = Arc::new(SessionServices {
            tokens: TokenCache::new(Arc::new(Estimate)),
            summarizer: Arc::new(BuiltinSummarizer::new()),
            compaction: CompactionSettings::default(),
            limits: ResultLimits::default(),
        });
        Real { engine, services }
    }

    fn call(&self, context: &[Arc<Message>]) -> HostCall {
        HostCall::new(
            Arc::from("engine"),
            Arc::from("s"),
            Arc::new(context.to_vec()),
            Arc::clone(&self.services),
            Arc::new(json!({})),
            WINDOW,
        )
    }

    fn owns(&self) -> bool {
        self.engine.info().owns_compaction()
    }

    fn ingest(&mut self, context: &[Arc<Message>], m: &Arc<Message>) {
        let call = self.call(context);
        let p = IngestParams {
            session_id: "s".into(),
            session_key: None,
            message: Arc::clone(m),
            is_heartbeat: false,
        };
        self.engine.ingest(&call, &p).expect("ingest");
    }

    fn assemble(&mut self, context: &[Arc<Message>]) -> AssembleResult {
        let call = self.call(context);
        let p = AssembleParams {
            session_id: "s".into(),
            session_key: None,
            token_budget: WINDOW,
            prompt: None,
            model: None,
            available_tools: None,
            runtime_settings: None,
        };
        self.engine
            .assemble(&call, &p)
            .unwrap_or_else(|e| panic!("assemble: {e}"))
    }

    fn compact(&mut self, context: &[Arc<Message>], force: bool) -> CompactResult {
        let call = self.call(context);
        let p = CompactParams {
            session_id: "s".into(),
            session_key: None,
            token_budget: WINDOW,
            force,
            current_token_count: tokens(context),
            compaction_target: CompactionTarget::Budget,
            custom_instructions: None,
            runtime_settings: None,
        };
        self.engine
            .compact(&call, &p)
            .unwrap_or_else(|e| panic!("compact: {e}"))
    }
}

/// Replays one session through one engine on the real adapter; returns a fingerprint of every
/// assembled context.
fn replay(name: &str, label: &str, messages: &[Message]) -> Vec<String> {
    let mut run = Real::start(name, None);
    let mut context: Vec<Arc<Message>> = Vec::new();
    let mut prints = Vec::new();
    let mut next_id = 0u64;
    let restart_at = messages.len() / 2;
    for (i, m) in messages.iter().enumerate() {
        if i == restart_at {
            let saved = run.engine.save_state().expect("save");
            run = Real::start(name, Some(saved.clone()));
            assert_eq!(
                run.engine.save_state().expect("save"),
                saved,
                "{name} {label}: state survives a restart"
            );
        }
        let is_call = m.role().as_str() == "assistant"
            && context
                .last()
                .is_some_and(|p: &Arc<Message>| matches!(p.role().as_str(), "user" | "toolResult"));
        if is_call {
            // The host's auto-compaction for engines that do not own compaction.
            if !run.owns() && tokens(&context) > WINDOW {
                let r = run.compact(&context, false);
                context = apply(&context, &r, &mut next_id);
            }
            let r = run.assemble(&context);
            let add = r
                .system_prompt_addition
                .as_deref()
                .map(|a| Estimate.count_text(a))
                .unwrap_or(0);
            let measured = tokens(&r.messages) + add;
            assert!(
                measured <= WINDOW,
                "{name} {label} message {i}: assembled {measured} tokens > {WINDOW}"
            );
            assert!(
                pairing::is_well_paired(&r.messages),
                "{name} {label} message {i}: pairing broken"
            );
            assert!(
                !r.messages.is_empty(),
                "{name} {label} message {i}: empty context from {} messages ({} tokens)",
                context.len(),
                tokens(&context)
            );
            let ids: Vec<&str> = r.messages.iter().map(|m| m.id.as_str()).collect();
            prints.push(format!(
                "{}|{}|{}",
                ids.join(","),
                measured,
                r.system_prompt_addition.unwrap_or_default().len()
            ));
        }
        let mut stored = m.clone();
        stored.id = format!("m{i:06}");
        let stored = Arc::new(stored);
        context.push(Arc::clone(&stored));
        run.ingest(&context, &stored);
    }
    prints
}

/// Every shared transcript's sessions, well paired (as the host stores them after import).
fn sessions() -> Vec<(String, Vec<Message>)> {
    let mut out = Vec::new();
    for path in common::shared_transcripts() {
        let Ok(import) = ctxhost::transcript::import::import(&path) else {
            continue;
        };
        for s in import.sessions.into_iter().take(3) {
            let arcs: Vec<Arc<Message>> = s.messages.into_iter().map(Arc::new).collect();
            let repaired = pairing::repair(arcs).messages;
            let ms: Vec<Message> = repaired.iter().map(|m| (**m).clone()).collect();
            out.push((s.name, ms));
        }
    }
    out
}

#[test]
fn every_engine_holds_the_budget_and_pairing_on_every_shared_transcript_deterministically() {
    let sessions = sessions();
    assert!(!sessions.is_empty(), "no shared transcripts found");
    for name in ENGINES {
        for (label, messages) in &sessions {
            let first = replay(name, label, messages);
            let second = replay(name, label, messages);
            assert_eq!(first, second, "{name} {label}: not deterministic");
        }
    }
}

#[test]
fn every_engine_compact_frees_tokens_on_an_over_budget_session() {
    let session = lua_harness::build::session(80);
    let context: Vec<Arc<Message>> = session
        .iter()
        .map(|j| Arc::new(serde_json::from_value::<Message>(j.clone()).expect("message")))
        .collect();
    let before = tokens(&context);
    assert!(before > WINDOW * 2, "the session is over budget: {before}");
    for name in ENGINES {
        let run = Run::start(name, None);
        // hierarchical compacts what it saw in assemble; every engine gets one assemble first.
        let _ = run.assemble(&context);
        let r = run.compact(&context, true);
        assert!(r.ok && r.compacted, "{name}: {r:?}");
        let mut next = 0;
        let after = tokens(&apply(&context, &r, &mut next));
        assert!(after < before, "{name}: {before} -> {after}");
    }
}

#[test]
fn pinned_facts_outlive_compaction() {
    let mut session = lua_harness::build::session(40);
    session.insert(
        3,
        lua_harness::build::user("u-pin", "[pin] the deploy host is build-7.internal:8443"),
    );
    let context: Vec<Arc<Message>> = session
        .iter()
        .map(|j| Arc::new(serde_json::from_value::<Message>(j.clone()).expect("message")))
        .collect();
    let run = Run::start("pinned_facts.lua", None);
    for (i, m) in context.iter().enumerate() {
        run.ingest(&context[..=i], m);
    }
    let r = run.compact(&context, true);
    let mut next = 0;
    let compacted = apply(&context, &r, &mut next);
    assert!(
        !compacted.iter().any(|m| m.id == "u-pin"),
        "the pinned message was compacted away"
    );
    let a = run.assemble(&compacted);
    let add = a.system_prompt_addition.unwrap_or_default();
    assert!(add.contains("build-7.internal:8443"), "{add}");
}

#[test]
fn hierarchical_builds_more_than_one_level_and_lists_what_it_condensed() {
    let session = lua_harness::build::session(400);
    let run = Run::start("hierarchical.lua", None);
    let mut context: Vec<Arc<Message>> = Vec::new();
    let mut addition = String::new();
    for j in &session {
        let m = Arc::new(serde_json::from_value::<Message>(j.clone()).expect("message"));
        context.push(m);
        if context.last().is_some_and(|m| m.role().as_str() == "user") {
            let r = run.assemble(&context);
            addition = r.system_prompt_addition.unwrap_or_default();
        }
    }
    assert!(addition.starts_with("Condensed history: "), "{addition}");
    assert!(
        addition.contains("depth=\"1\"") || addition.contains("depth=\"2\""),
        "{addition}"
    );
    let state = run.save();
    let levels = state["levels"].as_array().map(Vec::len).unwrap_or(0);
    assert!(levels >= 2, "levels: {}", state["levels"]);
}

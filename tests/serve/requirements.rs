//! An engine whose `hostRequirements` this host cannot meet, through `serve`: every request is
//! answered once with its id; the gated operations (`assemble` for `agent-run`, `compact` for
//! `manual-compact`, `prepareSubagentSpawn` for `subagent-spawn`) fail closed with an error
//! naming the missing capabilities (contract §8: never quarantined, `legacy` does not answer
//! in its place); the others run on the engine. The names are the engine's: an ESC in one
//! reaches the client escaped (`\u001b`), never as a control sequence a client would print.
//! In Lua and Rhai, in thread and process isolation.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is the failure report

use ctxhost::contract::limits::Isolation;
use serde_json::{Value, json};

use super::*;
use crate::common::engine::Lang;

const LUA: &str = r#"
local need = { "evil\27[2Jcap", "runtime-llm-complete" }
return { info = { id = "needs", name = "Needs",
           hostRequirements = {
             ["agent-run"] = { requiredCapabilities = need, unsupportedMessage = "Run it \27]0;owned\7elsewhere." },
             ["manual-compact"] = { requiredCapabilities = need },
             ["subagent-spawn"] = { requiredCapabilities = need } } },
         ingest = function(p) return { ingested = true } end,
         assemble = function(p) return { messages = p.messages, estimatedTokens = 0 } end,
         compact = function(p) return host.delegateCompaction(p) end,
         commitTurn = function(p) return { status = "committed" } end }
"#;

const RHAI: &str = r#"
fn info() {
    let need = ["evil\x1b[2Jcap", "runtime-llm-complete"];
    #{ id: "needs", name: "Needs",
       hostRequirements: #{
           "agent-run": #{ requiredCapabilities: need, unsupportedMessage: "Run it \x1b]0;owned\x07elsewhere." },
           "manual-compact": #{ requiredCapabilities: need },
           "subagent-spawn": #{ requiredCapabilities: need } } }
}
fn ingest(p) { #{ ingested: true } }
fn assemble(p) { #{ messages: p.messages, estimatedTokens: 0 } }
fn compact(p) { host::delegateCompaction(p) }
fn commitTurn(p) { #{ status: "committed" } }
"#;

/// The gated operation each method runs, if any.
fn gated(method: &str) -> Option<&'static str> {
    match method {
        "assemble" => Some("agent-run"),
        "compact" => Some("manual-compact"),
        "prepareSubagentSpawn" => Some("subagent-spawn"),
        _ => None,
    }
}

async fn every_request_is_answered(lang: Lang, mode: Isolation) {
    let dir = tempfile::tempdir().unwrap();
    let source = if lang == Lang::Lua { LUA } else { RHAI };
    let engine = write_engine(dir.path(), &format!("needs.{lang}"), source);
    let mut options = ServeOptions::new(dir.path().join("state"));
    options.isolation = Some(mode);
    options.child_command = Some(crate::modes::engine_child());
    let mut c = Client::start_with(options);
    let s = json!({"sessionId": "s-1", "sessionKey": "agent:main:main"});
    let with = |extra: Value| {
        let mut p = s.clone();
        p.as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        p
    };
    let requests = [
        ("initialize", json!({"engine": engine})),
        ("info", json!({})),
        ("bootstrap", s.clone()),
        ("ingest", with(json!({"message": user("hi")}))),
        (
            "ingestBatch",
            with(json!({"messages": [user("hi"), assistant("yo")]})),
        ),
        (
            "assemble",
            with(json!({"messages": [user("hi")], "tokenBudget": 1000})),
        ),
        (
            "afterTurn",
            with(
                json!({"messages": [user("hi"), assistant("yo")], "prePromptMessageCount": 0, "tokenBudget": 1000}),
            ),
        ),
        (
            "commitTurn",
            with(json!({"advancementKey": "t1", "messages": [user("hi"), assistant("yo")]})),
        ),
        ("maintain", with(json!({"reason": "turn"}))),
        ("compact", with(json!({"tokenBudget": 1000, "force": true}))),
        (
            "prepareSubagentSpawn",
            with(
                json!({"parentSessionKey": "agent:main:main", "childSessionKey": "c1", "contextMode": "isolated"}),
            ),
        ),
        (
            "onSubagentEnded",
            with(json!({"childSessionKey": "c1", "reason": "completed"})),
        ),
        (
            "assemble",
            with(
                json!({"messages": [user("hi"), assistant("yo"), user("again")], "tokenBudget": 1000}),
            ),
        ),
        ("compact", with(json!({"tokenBudget": 1000}))),
        ("dispose", s.clone()),
        ("shutdown", json!({})),
    ];
    // Sent at once, as a busy client does: every one is owed its answer.
    let mut ids = Vec::new();
    for (method, params) in &requests {
        ids.push(c.send(method, params.clone()).await);
    }
    let mut answers: Vec<Value> = Vec::new();
    while answers.len() < requests.len() {
        answers.push(c.recv().await);
    }
    let what = format!("{lang} {mode:?}");
    for ((method, _), id) in requests.iter().zip(&ids) {
        let mine: Vec<&Value> = answers.iter().filter(|a| a["id"] == *id).collect();
        assert_eq!(mine.len(), 1, "{what}: {method} (id {id}) answered once");
        let a = mine[0];
        match gated(method) {
            Some(op) => {
                let message = a["error"]["message"].as_str().unwrap_or_else(|| {
                    panic!("{what}: {method} must fail closed: {a}");
                });
                assert!(
                    message.contains(&format!("cannot run operation \"{op}\"")),
                    "{what}: {method}: {message}"
                );
                assert!(
                    message.contains(
                        "Missing host capabilities: evil\\u001b[2Jcap, runtime-llm-complete."
                    ),
                    "{what}: {method}: {message}"
                );
                assert!(
                    !message.contains('\u{1b}') && !message.contains('\u{7}'),
                    "{what}: {method}: a raw control character in {message:?}"
                );
                if op == "agent-run" {
                    assert!(
                        message.contains("Run it \\u001b]0;owned\\u0007elsewhere."),
                        "{what}: {message}"
                    );
                }
            }
            None => assert!(a.get("error").is_none(), "{what}: {method}: {a}"),
        }
    }
    // Fail closed is never a quarantine: `info` still names the engine, and a later turn is
    // refused the same way rather than answered by `legacy`.
    c.close().await;
    let mut c = Client::start(&dir.path().join("state"));
    let r = c.call("initialize", json!({"engine": engine})).await;
    assert_eq!(r["result"]["info"]["id"], "needs", "{what}: {r}");
    let r = c
        .call(
            "assemble",
            with(json!({"messages": [user("hi")], "tokenBudget": 1000})),
        )
        .await;
    assert!(
        r["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("Missing host capabilities")),
        "{what}: {r}"
    );
    c.close().await;
}

each_language_and_mode! { async:
    an_engine_whose_requirements_cannot_be_met_gets_every_request_answered => every_request_is_answered;
}

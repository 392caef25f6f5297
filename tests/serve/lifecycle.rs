//! Every lifecycle method through `serve`, with Lua and Rhai engines and OpenClaw's params
//! (`runtimeContext`, `availableTools`, subagents named only by the child).

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is the failure report

use serde_json::{Value, json};

use super::*;

/// Records every lifecycle call it gets (and what OpenClaw passed) in its state, and shows
/// the record as its system prompt addition: Lua and its Rhai twin.
fn recorder(lang: &str) -> (&'static str, &'static str) {
    match lang {
        "lua" => (
            "recorder.lua",
            r#"local M = { info = { id = "recorder", name = "Recorder", ownsCompaction = true } }
local function note(p, s) p.state.log = (p.state.log or "") .. s .. ";" end
local function cwd(p) return p.runtimeContext and p.runtimeContext.cwd or "-" end
function M.bootstrap(p) note(p, "bootstrap:" .. cwd(p)) return { bootstrapped = true, importedMessages = 0 } end
function M.maintain(p)
  note(p, "maintain:" .. p.reason .. ":" .. cwd(p))
  return { changed = false, bytesFreed = 0, rewrittenEntries = 0 }
end
function M.ingest(p) note(p, "ingest") return { ingested = true } end
function M.ingestBatch(p) note(p, "ingestBatch:" .. #p.messages) return { ingestedCount = #p.messages } end
function M.afterTurn(p) note(p, "afterTurn:" .. #p.messages .. ":" .. cwd(p)) end
function M.commitTurn(p)
  note(p, "commitTurn:" .. p.advancementKey .. ":" .. #p.messages .. ":" .. cwd(p))
  return { status = "committed" }
end
function M.prepareSubagentSpawn(p)
  note(p, "spawn:" .. p.childSessionKey .. ":" .. p.contextMode)
  p.state.lastSpawn = p.childSessionKey
  local state = p.state
  return { rollback = function() state.log = state.log .. "rollback:" .. state.lastSpawn .. ";" end }
end
function M.onSubagentEnded(p) note(p, "ended:" .. p.childSessionKey .. ":" .. p.reason) end
function M.assemble(p)
  local tools = p.availableTools and table.concat(p.availableTools, ",") or "-"
  note(p, "assemble:" .. tools .. ":" .. cwd(p))
  return { messages = p.messages, estimatedTokens = 1, systemPromptAddition = p.state.log }
end
function M.compact(p) return { ok = true, compacted = false, reason = "no" } end
return M
"#,
        ),
        _ => (
            "recorder.rhai",
            r#"fn info() { #{ id: "recorder", name: "Recorder", ownsCompaction: true } }
fn cwd(p) { if p.runtimeContext == () { "-" } else { p.runtimeContext.cwd } }
fn bootstrap(p) {
    this.log = (this.log ?? "") + `bootstrap:${cwd(p)};`;
    #{ bootstrapped: true, importedMessages: 0 }
}
fn maintain(p) {
    this.log = (this.log ?? "") + `maintain:${p.reason}:${cwd(p)};`;
    #{ changed: false, bytesFreed: 0, rewrittenEntries: 0 }
}
fn ingest(p) { this.log = (this.log ?? "") + "ingest;"; #{ ingested: true } }
fn ingestBatch(p) {
    this.log = (this.log ?? "") + `ingestBatch:${p.messages.len()};`;
    #{ ingestedCount: p.messages.len() }
}
fn afterTurn(p) { this.log = (this.log ?? "") + `afterTurn:${p.messages.len()}:${cwd(p)};`; }
fn commitTurn(p) {
    this.log = (this.log ?? "") + `commitTurn:${p.advancementKey}:${p.messages.len()}:${cwd(p)};`;
    #{ status: "committed" }
}
fn prepareSubagentSpawn(p) {
    this.log = (this.log ?? "") + `spawn:${p.childSessionKey}:${p.contextMode};`;
    this.lastSpawn = p.childSessionKey;
    #{ rollback: Fn("undo_spawn") }
}
fn undo_spawn() { this.log += `rollback:${this.lastSpawn};`; }
fn onSubagentEnded(p) { this.log = (this.log ?? "") + `ended:${p.childSessionKey}:${p.reason};`; }
fn assemble(p) {
    let tools = "-";
    if p.availableTools != () {
        tools = "";
        for t in p.availableTools {
            if tools != "" { tools += ","; }
            tools += t;
        }
    }
    this.log = (this.log ?? "") + `assemble:${tools}:${cwd(p)};`;
    #{ messages: p.messages, estimatedTokens: 1, systemPromptAddition: this.log }
}
fn compact(p) { #{ ok: true, compacted: false, reason: "no" } }
"#,
        ),
    }
}

#[tokio::test]
async fn every_lifecycle_method_reaches_lua_and_rhai_engines_with_openclaws_params() {
    for lang in ["lua", "rhai"] {
        let dir = tempfile::tempdir().unwrap();
        let (name, source) = recorder(lang);
        let (mut c, _) = Client::on_file(dir.path(), name, source).await;
        let key = json!({"sessionId": "s-1", "sessionKey": "agent:main:main"});
        let with = |extra: Value| {
            let mut p = key.clone();
            p.as_object_mut()
                .unwrap()
                .extend(extra.as_object().unwrap().clone());
            p
        };
        let rc = json!({"cwd": "/w", "currentTokenCount": 10});
        let r = c
            .ok(
                "bootstrap",
                with(json!({"sessionFile": "/s.jsonl", "runtimeContext": rc})),
            )
            .await;
        assert_eq!(r["bootstrapped"], true, "{lang}: {r}");
        let r = c
            .ok(
                "maintain",
                with(json!({"reason": "bootstrap", "runtimeContext": rc})),
            )
            .await;
        assert_eq!(r["changed"], false, "{lang}: {r}");
        let r = c
            .ok("ingestBatch", with(json!({"messages": history(1)})))
            .await;
        assert_eq!(r["ingestedCount"], 2, "{lang}: {r}");
        let r = c
            .ok(
                "assemble",
                with(json!({"messages": history(1), "tokenBudget": 10_000,
                            "availableTools": ["read", "write"], "runtimeContext": rc})),
            )
            .await;
        assert_eq!(
            r["systemPromptAddition"],
            "bootstrap:/w;maintain:bootstrap:/w;ingestBatch:2;assemble:read,write:/w;",
            "{lang}"
        );
        let r = c
            .ok(
                "afterTurn",
                with(json!({"messages": history(2), "prePromptMessageCount": 2,
                            "tokenBudget": 10_000, "runtimeContext": rc})),
            )
            .await;
        assert_eq!(r, Value::Null, "{lang}");
        let r = c
            .ok(
                "commitTurn",
                with(
                    json!({"advancementKey": "t1", "messages": [user("q"), assistant("a")],
                            "runtimeContext": rc}),
                ),
            )
            .await;
        assert_eq!(r["status"], "committed", "{lang}");
        c.ok("maintain", with(json!({"reason": "turn"}))).await;
        let r = c
            .ok(
                "prepareSubagentSpawn",
                json!({"parentSessionKey": "agent:main:main", "childSessionKey": "agent:main:sub-1",
                       "contextMode": "fork"}),
            )
            .await;
        assert!(r["rollbackId"].is_u64(), "{lang}: {r}");
        // OpenClaw names only the child: the parent is the session that spawned it.
        let r = c
            .ok(
                "onSubagentEnded",
                json!({"childSessionKey": "agent:main:sub-1", "reason": "completed"}),
            )
            .await;
        assert_eq!(r, Value::Null, "{lang}");
        // A spawn that failed after its preparation: the engine's rollback runs.
        let spawn = c
            .ok(
                "prepareSubagentSpawn",
                json!({"parentSessionKey": "agent:main:main", "childSessionKey": "agent:main:sub-2"}),
            )
            .await;
        let r = c
            .ok(
                "rollbackSubagentSpawn",
                json!({"parentSessionKey": "agent:main:main", "rollbackId": spawn["rollbackId"]}),
            )
            .await;
        assert_eq!(r, Value::Null, "{lang}");
        let r = c
            .ok(
                "assemble",
                with(json!({"messages": history(2), "tokenBudget": 10_000})),
            )
            .await;
        assert_eq!(
            r["systemPromptAddition"],
            "bootstrap:/w;maintain:bootstrap:/w;ingestBatch:2;assemble:read,write:/w;\
             ingestBatch:2;afterTurn:4:/w;commitTurn:t1:2:/w;maintain:turn:-;\
             spawn:agent:main:sub-1:fork;ended:agent:main:sub-1:completed;\
             spawn:agent:main:sub-2:isolated;rollback:agent:main:sub-2;assemble:-:-;",
            "{lang}"
        );
        c.close().await;
    }
}

#[tokio::test]
async fn an_engine_that_does_not_accept_runtime_context_does_not_get_it() {
    let dir = tempfile::tempdir().unwrap();
    let (name, source) = recorder("lua");
    let source = source.replace(
        "ownsCompaction = true",
        r#"ownsCompaction = true, acceptedHostParams = { "sessionKey" }"#,
    );
    let (mut c, _) = Client::on_file(dir.path(), name, &source).await;
    let r = c
        .ok(
            "assemble",
            json!({"sessionId": "s-1", "sessionKey": "k", "messages": history(1),
                   "tokenBudget": 10_000, "availableTools": ["read"],
                   "runtimeContext": {"cwd": "/w"}}),
        )
        .await;
    assert_eq!(r["systemPromptAddition"], "ingestBatch:2;assemble:read:-;");
    c.close().await;
}

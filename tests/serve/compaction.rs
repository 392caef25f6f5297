//! Compaction through `serve`: a script's `host.delegateCompaction(p)` runs the client's own
//! compaction when the client offers one, outside the script's deadline.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is the failure report

use std::time::Duration;

use serde_json::{Value, json};

use super::*;

/// An engine that owns compaction and compacts through `host.delegateCompaction(p)`, counting
/// its compactions in its state: Lua and its Rhai twin.
pub(super) fn delegating_owner(lang: &str) -> (&'static str, &'static str) {
    match lang {
        "lua" => (
            "owner.lua",
            r#"local M = { info = { id = "owner", name = "Owner", ownsCompaction = true } }
function M.ingest(p) return { ingested = true } end
function M.assemble(p)
  return { messages = p.messages, estimatedTokens = 1,
           systemPromptAddition = "delegated " .. (p.state.delegated or 0) }
end
function M.compact(p)
  local r = host.delegateCompaction(p)
  p.state.delegated = (p.state.delegated or 0) + 1
  return { ok = r.ok, compacted = r.compacted, reason = "asked the client", result = r.result }
end
return M
"#,
        ),
        _ => (
            "owner.rhai",
            r#"fn info() { #{ id: "owner", name: "Owner", ownsCompaction: true } }
fn ingest(p) { #{ ingested: true } }
fn assemble(p) {
    #{ messages: p.messages, estimatedTokens: 1, systemPromptAddition: `delegated ${this.delegated ?? 0}` }
}
fn compact(p) {
    let r = host::delegateCompaction(p);
    this.delegated = (this.delegated ?? 0) + 1;
    #{ ok: r.ok, compacted: r.compacted, reason: "asked the client", result: r.result }
}
"#,
        ),
    }
}

#[tokio::test]
async fn a_scripts_delegate_compaction_runs_the_clients_compaction_outside_its_deadline() {
    for lang in ["lua", "rhai"] {
        let dir = tempfile::tempdir().unwrap();
        let (name, source) = delegating_owner(lang);
        let engine = write_engine(dir.path(), name, source);
        // A deadline far shorter than the client takes to compact.
        let config = write_engine(
            dir.path(),
            "ctxhost.json5",
            "{ host: { limits: { deadlineMs: 300, graceMs: 200 } } }",
        );
        let mut c = Client::start(&dir.path().join("state"));
        c.ok(
            "initialize",
            json!({"engine": engine, "config": config,
                   "capabilities": {"delegateCompaction": true}}),
        )
        .await;
        c.ok("assemble", assemble_params(&history(2), 10_000)).await;
        let id = c
            .send(
                "compact",
                json!({"sessionId": "s-1", "sessionKey": "agent:main:main", "tokenBudget": 1000,
                       "force": true, "compactionTarget": "budget",
                       "runtimeContext": {"cwd": "/w", "currentTokenCount": 900}}),
            )
            .await;
        let ask = c.recv().await;
        assert_eq!(ask["method"], "runtime.delegateCompaction", "{lang}: {ask}");
        // The client's own params (its identity, its runtimeContext), as it sent them.
        assert_eq!(ask["params"]["sessionKey"], "agent:main:main");
        assert_eq!(ask["params"]["runtimeContext"]["cwd"], "/w");
        assert_eq!(ask["params"]["tokenBudget"], 1000);
        tokio::time::sleep(Duration::from_millis(1200)).await;
        // The client's entry ids are its own: the session neither checks nor applies them.
        let answer = json!({"ok": true, "compacted": true, "result": {
            "summary": "they talked", "firstKeptEntryId": "openclaw-entry-9",
            "tokensBefore": 900, "tokensAfter": 100, "sessionFile": "/old/path.jsonl"}});
        c.reply(&ask, &answer).await;
        let r = c.recv().await;
        assert_eq!(r["id"], id, "{lang}: {r}");
        assert_eq!(r["result"]["reason"], "asked the client", "{lang}: {r}");
        assert_eq!(r["result"]["compacted"], true);
        assert_eq!(
            r["result"]["result"]["firstKeptEntryId"],
            "openclaw-entry-9"
        );
        // Not quarantined: the engine still answers, its state counted the compaction.
        let r = c.ok("assemble", assemble_params(&history(2), 10_000)).await;
        assert_eq!(r["systemPromptAddition"], "delegated 1", "{lang}");
        c.close().await;
    }
}

#[tokio::test]
async fn without_a_client_compaction_a_scripts_delegate_compaction_is_the_built_in_one() {
    let dir = tempfile::tempdir().unwrap();
    let (name, source) = delegating_owner("lua");
    let (mut c, _) = Client::on_file(dir.path(), name, source).await;
    let long: Vec<Value> = (0..8)
        .map(|i| user(&format!("{i} {}", "word ".repeat(200))))
        .collect();
    c.ok("assemble", assemble_params(&long, 100_000)).await;
    let r = c
        .ok(
            "compact",
            json!({"sessionId": "s-1", "sessionKey": "agent:main:main", "tokenBudget": 300,
                   "force": true}),
        )
        .await;
    assert_eq!(r["reason"], "asked the client");
    assert_eq!(r["compacted"], true, "{r}");
    let r = c.ok("assemble", assemble_params(&long, 100_000)).await;
    assert_eq!(r["messages"][0]["role"], "compactionSummary");
    assert_eq!(r["systemPromptAddition"], "delegated 1");
    c.close().await;
}

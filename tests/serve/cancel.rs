//! `$/cancelRequest` for a request that waits on the client (`runtime.delegateCompaction`,
//! `llm.complete`): the wait ends at once, the request is answered -32800, the client is told
//! to stop its part, its late answer is ignored, nothing is quarantined and the session goes on.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is the failure report

use serde_json::{Value, json};

use super::compaction::delegating_owner;
use super::*;

/// Cancels request `id`, then reads the two frames that follow: the cancelled request's
/// answer, and ctxhost's `$/cancelRequest` for `ask` (in either order). Returns the answer.
async fn cancel_while_asked(c: &mut Client, id: i64, ask: &Value) -> Value {
    c.send_raw(
        &json!({"jsonrpc": "2.0", "method": "$/cancelRequest", "params": {"id": id}}).to_string(),
    )
    .await;
    let (a, b) = (c.recv().await, c.recv().await);
    let (answer, told) = if a.get("id") == Some(&json!(id)) {
        (a, b)
    } else {
        (b, a)
    };
    assert_eq!(answer["error"]["code"], -32800, "{answer}");
    assert_eq!(told["method"], "$/cancelRequest", "{told}");
    assert_eq!(
        told["params"]["id"], ask["id"],
        "the client is told to stop: {told}"
    );
    assert!(told.get("id").is_none(), "a notification: {told}");
    answer
}

#[tokio::test]
async fn a_cancel_ends_the_wait_for_the_clients_compaction_of_a_non_owning_engine() {
    let dir = tempfile::tempdir().unwrap();
    let mut c = Client::delegating(dir.path()).await;
    let first = c.ok("assemble", assemble_params(&history(2), 10_000)).await;
    assert_eq!(first["systemPromptAddition"], "v1 n=1 kept 2 of 4");
    let id = c
        .send(
            "compact",
            json!({"sessionId": "s-1", "sessionKey": "agent:main:main", "tokenBudget": 1000,
                   "force": true}),
        )
        .await;
    let ask = c.recv().await;
    assert_eq!(ask["method"], "runtime.delegateCompaction", "{ask}");
    cancel_while_asked(&mut c, id, &ask).await;
    // The client's late answer is ignored; the session goes on, on its engine.
    c.reply(
        &ask,
        &json!({"ok": true, "compacted": false, "reason": "late"}),
    )
    .await;
    let next = c.ok("assemble", assemble_params(&history(2), 10_000)).await;
    assert_eq!(next["systemPromptAddition"], "v1 n=2 kept 2 of 4", "{next}");
    c.close().await;
}

#[tokio::test]
async fn a_cancel_ends_the_wait_of_a_scripts_delegate_compaction() {
    for lang in ["lua", "rhai"] {
        let dir = tempfile::tempdir().unwrap();
        let (name, source) = delegating_owner(lang);
        let engine = write_engine(dir.path(), name, source);
        let mut c = Client::start(&dir.path().join("state"));
        c.ok(
            "initialize",
            json!({"engine": engine, "capabilities": {"delegateCompaction": true}}),
        )
        .await;
        c.ok("assemble", assemble_params(&history(2), 10_000)).await;
        let id = c
            .send(
                "compact",
                json!({"sessionId": "s-1", "sessionKey": "agent:main:main",
                       "tokenBudget": 1000, "force": true, "compactionTarget": "budget"}),
            )
            .await;
        let ask = c.recv().await;
        assert_eq!(ask["method"], "runtime.delegateCompaction", "{lang}: {ask}");
        let answer = cancel_while_asked(&mut c, id, &ask).await;
        assert!(
            !answer["error"]["message"]
                .as_str()
                .unwrap_or_default()
                .contains("before it ran"),
            "{lang}: {answer}"
        );
        c.reply(
            &ask,
            &json!({"ok": true, "compacted": true, "result": {"summary": "late", "tokensBefore": 9}}),
        )
        .await;
        // Not quarantined: the engine answers the next call.
        let next = c.ok("assemble", assemble_params(&history(2), 10_000)).await;
        let addition = next["systemPromptAddition"].as_str().unwrap_or_default();
        assert!(addition.starts_with("delegated "), "{lang}: {next}");
        c.close().await;
    }
}

#[tokio::test]
async fn a_cancel_ends_the_wait_for_a_summary_from_the_clients_model() {
    let dir = tempfile::tempdir().unwrap();
    let engine = write_engine(dir.path(), "window.lua", &window_engine("v1", 2, true));
    let config = write_engine(
        dir.path(),
        "ctxhost.json5",
        r#"{ host: { summarizer: { kind: "client" } } }"#,
    );
    let mut c = Client::start(&dir.path().join("state"));
    c.ok(
        "initialize",
        json!({"engine": engine, "config": config, "capabilities": {"llmComplete": true}}),
    )
    .await;
    c.ok("assemble", assemble_params(&history(2), 10_000)).await;
    let id = c
        .send(
            "compact",
            json!({"sessionId": "s-1", "sessionKey": "agent:main:main", "tokenBudget": 1000,
                   "force": true, "compactionTarget": "budget"}),
        )
        .await;
    let ask = c.recv().await;
    assert_eq!(ask["method"], "llm.complete", "{ask}");
    cancel_while_asked(&mut c, id, &ask).await;
    c.reply(
        &ask,
        &json!({"text": "a late summary", "usage": {"input": 1, "output": 1}}),
    )
    .await;
    let next = c.ok("assemble", assemble_params(&history(2), 10_000)).await;
    let addition = next["systemPromptAddition"].as_str().unwrap_or_default();
    assert!(addition.starts_with("v1 n=2"), "the engine goes on: {next}");
    c.close().await;
}

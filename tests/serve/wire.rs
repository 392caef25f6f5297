//! The wire as a strict JSON-RPC 2.0 server (issue 26): a request is an object, every error to
//! a frame whose id is readable carries that id, notifications are never answered, cancels
//! for unknown ids are forgotten, `shutdown` answers what came before it, params are typed;
//! and lenient where real clients are (lone surrogates, deep tool details).

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is the failure report

use serde_json::{Value, json};

use super::*;

/// Sends `line` and returns the answer, which must carry `id`.
async fn answer_to(c: &mut Client, line: &str, id: Value) -> Value {
    c.send_raw(line).await;
    let r = c.recv().await;
    assert_eq!(r["id"], id, "{line} → {r}");
    r
}

/// Nothing was answered since the last `recv`: an `info` sent now is the next answer.
async fn nothing_answered(c: &mut Client, what: &str) {
    let r = answer_to(
        c,
        r#"{"jsonrpc":"2.0","id":"probe","method":"info"}"#,
        json!("probe"),
    )
    .await;
    assert!(
        r.get("error").is_some() || r.get("result").is_some(),
        "{what}: {r}"
    );
}

#[tokio::test]
async fn positional_arrays_are_refused_and_every_error_carries_a_readable_id() {
    let dir = tempfile::tempdir().unwrap();
    let (mut c, _) = Client::on(dir.path(), &window_engine("v1", 2, true)).await;
    let r = answer_to(&mut c, r#"["2.0", 110, "info"]"#, Value::Null).await;
    assert_eq!(r["error"]["code"], -32600, "{r}");
    assert!(r.get("result").is_none(), "an array is not run: {r}");
    let r = answer_to(
        &mut c,
        r#"["2.0", 111, "dispose", {"sessionKey": "pos"}]"#,
        Value::Null,
    )
    .await;
    assert_eq!(r["error"]["code"], -32600, "{r}");
    let sessions = dir.path().join("state/sessions");
    let opened: Vec<_> = std::fs::read_dir(&sessions)
        .map(|d| d.map(|e| e.unwrap().file_name()).collect())
        .unwrap_or_default();
    assert!(opened.is_empty(), "no session was opened: {opened:?}");
    for (line, id) in [
        (r#"{"jsonrpc":"2.0","id":132,"method":5}"#, json!(132)),
        (r#"{"id":133,"method":"info"}"#, json!(133)),
        (
            r#"{"jsonrpc":"1.0","id":"old","method":"info"}"#,
            json!("old"),
        ),
        (
            r#"{"jsonrpc":"2.0","id":"no-method","params":{}}"#,
            json!("no-method"),
        ),
        (
            r#"{"jsonrpc":"2.0","id":134,"method":["info"]}"#,
            json!(134),
        ),
    ] {
        let r = answer_to(&mut c, line, id).await;
        assert_eq!(r["error"]["code"], -32600, "{line} → {r}");
    }
    let r = answer_to(
        &mut c,
        r#"{"jsonrpc":"2.0","id":{"a":1},"method":"info"}"#,
        Value::Null,
    )
    .await;
    assert_eq!(r["error"]["code"], -32600, "an object is no id: {r}");
    // Ids are echoed exactly: fractions, past i64, unicode.
    for id in [
        json!(1.5),
        json!(18446744073709551615u64),
        json!(-7),
        json!("ïd ✓"),
    ] {
        let line = json!({"jsonrpc": "2.0", "id": id, "method": "info"}).to_string();
        let r = answer_to(&mut c, &line, id.clone()).await;
        assert_eq!(r["result"]["id"], "window", "{r}");
    }
    // Params decoded after the id was read: a wrong one is answered with it.
    let line = r#"{"jsonrpc":"2.0","id":135,"method":"assemble","params":{"sessionKey":"k","messages":"str"}}"#;
    let r = answer_to(&mut c, line, json!(135)).await;
    assert_eq!(r["error"]["code"], -32602, "{r}");
    let line = r#"{"jsonrpc":"2.0","id":136,"method":"assemble","params":[1,2]}"#;
    let r = answer_to(&mut c, line, json!(136)).await;
    assert_eq!(r["error"]["code"], -32602, "positional params: {r}");
    c.close().await;
}

#[tokio::test]
async fn an_unknown_method_is_answered_with_the_closest_one() {
    let dir = tempfile::tempdir().unwrap();
    let mut c = Client::start(&dir.path().join("state"));
    let r = c.call("assembel", json!({})).await;
    assert_eq!(r["error"]["code"], -32601, "{r}");
    let message = r["error"]["message"].as_str().unwrap();
    assert!(message.contains("did you mean `assemble`"), "{message}");
    let r = c.call("committurn", json!({})).await;
    assert!(
        r["error"]["message"]
            .as_str()
            .unwrap()
            .contains("`commitTurn`"),
        "{r}"
    );
    let r = c.call("zzzz", json!({})).await;
    assert_eq!(r["error"]["code"], -32601, "{r}");
    assert!(
        !r["error"]["message"]
            .as_str()
            .unwrap()
            .contains("did you mean"),
        "{r}"
    );
    c.close().await;
}

#[tokio::test]
async fn notifications_are_never_answered_even_when_they_fail() {
    let dir = tempfile::tempdir().unwrap();
    let (mut c, _) = Client::on(dir.path(), &window_engine("v1", 2, true)).await;
    for line in [
        r#"{"jsonrpc":"2.0","method":"assemble","params":{}}"#,
        r#"{"jsonrpc":"2.0","method":"assemble","params":{"sessionKey":"k","messages":"str"}}"#,
        r#"{"jsonrpc":"2.0","method":"no/such"}"#,
        r#"{"jsonrpc":"2.0","method":5}"#,
        r#"{"method":"info"}"#,
        r#"{"jsonrpc":"2.0","method":"$/cancelRequest","params":{"id":{"x":1}}}"#,
        // A cancel is a notification whatever it carries: one sent with an id is not answered.
        r#"{"jsonrpc":"2.0","id":77,"method":"$/cancelRequest","params":{"id":5}}"#,
        // An answer to nothing ctxhost asked.
        r#"{"jsonrpc":"2.0","id":"ctxhost-999","result":1}"#,
        r#"{"jsonrpc":"2.0","result":1}"#,
    ] {
        c.send_raw(line).await;
        nothing_answered(&mut c, line).await;
    }
    c.close().await;
}

#[tokio::test]
async fn a_cancel_for_an_id_never_sent_is_forgotten_and_the_id_can_be_used_later() {
    let dir = tempfile::tempdir().unwrap();
    let (mut c, _) = Client::on(dir.path(), &window_engine("v1", 2, true)).await;
    for i in 0..2000 {
        let line =
            json!({"jsonrpc": "2.0", "method": "$/cancelRequest", "params": {"id": 5000 + i}});
        c.send_raw(&line.to_string()).await;
    }
    let line = json!({"jsonrpc": "2.0", "id": 5007, "method": "assemble",
                      "params": assemble_params(&history(1), 1000)});
    let r = answer_to(&mut c, &line.to_string(), json!(5007)).await;
    assert!(r.get("error").is_none(), "the request ran: {r}");
    assert_eq!(r["result"]["messages"].as_array().unwrap().len(), 2);
    c.close().await;
}

#[tokio::test]
async fn shutdown_answers_every_request_received_before_it() {
    let dir = tempfile::tempdir().unwrap();
    let (mut c, _) = Client::on(dir.path(), &window_engine("v1", 2, true)).await;
    let mut frames = String::new();
    for i in 0..400 {
        let frame = json!({"jsonrpc": "2.0", "id": 10_000 + i, "method": "ingest",
                           "params": {"sessionId": "s-1", "sessionKey": format!("agent:{}", i % 4),
                                      "message": user(&format!("message {i}"))}});
        frames.push_str(&frame.to_string());
        frames.push('\n');
    }
    frames.push_str(r#"{"jsonrpc":"2.0","id":"bye","method":"shutdown"}"#);
    c.send_raw(&frames).await;
    let mut answered = std::collections::BTreeSet::new();
    loop {
        let r = c.recv().await;
        if r["id"] == "bye" {
            assert_eq!(r["result"], Value::Null, "{r}");
            break;
        }
        assert_eq!(r["result"]["ingested"], true, "{r}");
        assert!(
            answered.insert(r["id"].as_i64().unwrap()),
            "answered once: {r}"
        );
    }
    assert_eq!(
        answered.len(),
        400,
        "every ingest before shutdown was answered first"
    );
    let ended = tokio::time::timeout(Duration::from_secs(10), c.server).await;
    ended
        .expect("serve stopped after shutdown")
        .unwrap()
        .unwrap();
}

/// A frame whose `details` nest `levels` objects inside a tool result.
fn deep_tool_result(levels: usize) -> Value {
    let mut details = json!({"leaf": true});
    for _ in 0..levels {
        details = json!({ "inner": details });
    }
    json!({"role": "toolResult", "toolCallId": "c1", "toolName": "probe",
           "content": [{"type": "text", "text": "deep result"}], "details": details,
           "isError": false, "timestamp": 3})
}

#[tokio::test]
async fn lone_surrogates_and_deep_tool_details_are_read_not_refused() {
    let dir = tempfile::tempdir().unwrap();
    let (mut c, _) = Client::on(dir.path(), &window_engine("v1", 4, true)).await;
    // What JavaScript's JSON.stringify writes for a string cut inside an emoji.
    let line = r#"{"jsonrpc":"2.0","id":200,"method":"ingest","params":{"sessionId":"s-1","sessionKey":"agent:main:main","message":{"role":"user","content":"cut \ud83d here","timestamp":1}}}"#;
    let r = answer_to(&mut c, line, json!(200)).await;
    assert_eq!(r["result"]["ingested"], true, "{r}");
    let calls = json!({"role": "assistant", "content": [
        {"type": "toolCall", "id": "c1", "name": "probe", "arguments": {}}], "timestamp": 2});
    for (id, levels) in [(201, 60), (202, 125), (203, 400)] {
        let view = vec![
            user("cut \u{fffd} here"),
            calls.clone(),
            deep_tool_result(levels),
        ];
        // A session each: a view that only differs in its details is the view already held.
        let mut params = assemble_params(&view, 10_000);
        params["sessionId"] = json!(format!("deep-{levels}"));
        params["sessionKey"] = json!(format!("deep-{levels}"));
        let frame = json!({"jsonrpc": "2.0", "id": id, "method": "assemble", "params": params});
        let r = answer_to(&mut c, &frame.to_string(), json!(id)).await;
        assert!(r.get("error").is_none(), "details {levels} deep: {r}");
        let out = r["result"]["messages"].as_array().unwrap();
        assert_eq!(out[0]["content"], "cut \u{fffd} here", "{r}");
        assert_eq!(out.len(), 3, "the deep tool result is in the window: {r}");
        let text = r.to_string();
        let cut = text.contains("nested deeper than 100 levels");
        assert_eq!(
            cut,
            levels > 120,
            "details {levels} deep: cut only past the parser's limit"
        );
    }
    c.close().await;
}

/// Each lifecycle method's params, one wrong at a time: a bad type is -32602 naming the param,
/// required and optional alike.
#[tokio::test]
async fn every_lifecycle_param_of_a_wrong_type_is_refused_by_name() {
    let dir = tempfile::tempdir().unwrap();
    let (mut c, _) = Client::on(dir.path(), &window_engine("v1", 2, true)).await;
    let common = [
        ("sessionId", json!(5)),
        ("sessionKey", json!([])),
        ("runtimeContext", json!("cwd")),
        ("sessionTarget", json!(7)),
    ];
    let own: Vec<(&str, Vec<(&str, Value)>)> = vec![
        ("bootstrap", vec![]),
        (
            "ingest",
            vec![("message", json!("str")), ("isHeartbeat", json!("yes"))],
        ),
        (
            "ingestBatch",
            vec![
                ("messages", json!(5)),
                ("messages", json!(["str"])),
                ("isHeartbeat", json!(1)),
            ],
        ),
        (
            "assemble",
            vec![
                ("messages", json!("str")),
                ("tokenBudget", json!("300")),
                ("tokenBudget", json!(-5)),
                ("prompt", json!(5)),
                ("model", json!(false)),
                ("availableTools", json!("read")),
                ("availableTools", json!([1])),
            ],
        ),
        (
            "compact",
            vec![
                ("tokenBudget", json!("x")),
                ("force", json!("yes")),
                ("currentTokenCount", json!({})),
                ("compactionTarget", json!(5)),
                ("compactionTarget", json!("sideways")),
                ("customInstructions", json!(5)),
            ],
        ),
        (
            "afterTurn",
            vec![
                ("messages", json!({})),
                ("prePromptMessageCount", json!("2")),
                ("tokenBudget", json!([])),
                ("isHeartbeat", json!("no")),
            ],
        ),
        (
            "commitTurn",
            vec![("advancementKey", json!(5)), ("messages", json!("x"))],
        ),
        (
            "maintain",
            vec![("reason", json!(5)), ("reason", json!("whenever"))],
        ),
        (
            "prepareSubagentSpawn",
            vec![
                ("parentSessionKey", json!(1)),
                ("childSessionKey", json!(5)),
                ("contextMode", json!("sideways")),
                ("ttlMs", json!("1")),
            ],
        ),
        (
            "onSubagentEnded",
            vec![("childSessionKey", json!(5)), ("reason", json!(3))],
        ),
        (
            "rollbackSubagentSpawn",
            vec![("parentSessionKey", json!(5)), ("rollbackId", json!("1"))],
        ),
        ("dispose", vec![]),
    ];
    let valid = |method: &str| -> Value {
        let mut p = json!({"sessionId": "s-1", "sessionKey": "agent:main:main"});
        match method {
            "ingest" => p["message"] = user("hi"),
            "commitTurn" => p["advancementKey"] = json!("a-1"),
            "prepareSubagentSpawn" | "onSubagentEnded" => p["childSessionKey"] = json!("child"),
            "rollbackSubagentSpawn" => p["rollbackId"] = json!(1),
            _ => {}
        }
        p
    };
    let mut checked = 0;
    for (method, fields) in &own {
        for (param, wrong) in common.iter().cloned().chain(fields.iter().cloned()) {
            let mut p = valid(method);
            p[param] = wrong.clone();
            let r = c.call(method, p).await;
            assert_eq!(r["error"]["code"], -32602, "{method} {param}={wrong}: {r}");
            let message = r["error"]["message"].as_str().unwrap();
            assert!(
                message.contains(param),
                "{method} {param}={wrong}: {message}"
            );
            assert!(
                message.contains("expected") || message.contains("unknown variant"),
                "{method} {param}={wrong}: names the expected type: {message}"
            );
            assert!(
                r["error"]["data"]["param"]
                    .as_str()
                    .unwrap()
                    .starts_with(param),
                "{r}"
            );
            checked += 1;
        }
    }
    assert_eq!(
        checked,
        12 * 4 + 34,
        "every param of every method was walked"
    );
    for (method, param) in [
        ("ingest", "message"),
        ("commitTurn", "advancementKey"),
        ("prepareSubagentSpawn", "childSessionKey"),
        ("onSubagentEnded", "childSessionKey"),
        ("rollbackSubagentSpawn", "rollbackId"),
    ] {
        let mut p = valid(method);
        p.as_object_mut().unwrap().remove(param);
        let r = c.call(method, p).await;
        assert_eq!(r["error"]["code"], -32602, "{method} without {param}: {r}");
        assert!(
            r["error"]["message"].as_str().unwrap().contains(param),
            "{r}"
        );
    }
    // The same params, right, still work (a fractional budget is floored, not refused).
    let mut p = assemble_params(&history(1), 1000);
    p["tokenBudget"] = json!(999.7);
    let r = c.ok("assemble", p).await;
    assert_eq!(r["messages"].as_array().unwrap().len(), 2);
    c.close().await;
}

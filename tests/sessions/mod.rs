//! Test sessions: messages built from JSON, as the host would hand them to an engine.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)] // test code: a panic is the failure report

use std::sync::Arc;

use serde_json::{Value as Json, json};

use ctxhost::contract::message::Message;

/// A user message.
pub fn user(id: &str, text: &str) -> Json {
    json!({"id": id, "role": "user", "content": text})
}

/// An assistant text reply.
pub fn assistant(id: &str, text: &str) -> Json {
    json!({"id": id, "role": "assistant", "content": [{"type": "text", "text": text}]})
}

/// An assistant message with tool calls `call_ids`.
pub fn calls(id: &str, call_ids: &[&str]) -> Json {
    let blocks: Vec<Json> = call_ids
        .iter()
        .map(|c| json!({"type": "toolCall", "id": c, "name": "read", "arguments": {"path": "/src/main.rs"}}))
        .collect();
    json!({"id": id, "role": "assistant", "content": blocks})
}

/// A tool result for `call_id`.
pub fn result(id: &str, call_id: &str, text: &str) -> Json {
    json!({"id": id, "role": "toolResult", "toolCallId": call_id, "toolName": "read",
           "content": [{"type": "text", "text": text}], "isError": false})
}

/// A deterministic session of `turns` turns; every turn is a user message, then (on odd
/// turns) an assistant calling 1–3 tools with results of varied size, then a reply.
pub fn session(turns: usize) -> Vec<Json> {
    let mut out = Vec::new();
    let mut n = 0;
    let mut id = || {
        n += 1;
        format!("m{n:05}")
    };
    for t in 0..turns {
        out.push(user(
            &id(),
            &format!(
                "turn {t}: please look at file {t} {}",
                "x".repeat(t * 7 % 90)
            ),
        ));
        if t % 2 == 1 {
            let k = 1 + t % 3;
            let call_ids: Vec<String> = (0..k).map(|c| format!("call_{t}_{c}")).collect();
            let refs: Vec<&str> = call_ids.iter().map(String::as_str).collect();
            out.push(calls(&id(), &refs));
            for (c, cid) in call_ids.iter().enumerate() {
                let size = 50 + (t * 131 + c * 977) % 6_000;
                out.push(result(
                    &id(),
                    cid,
                    &format!("output of {cid}\n{}", "y".repeat(size)),
                ));
            }
        }
        out.push(assistant(
            &id(),
            &format!("done with turn {t} {}", "z".repeat(t * 13 % 200)),
        ));
    }
    out
}

/// Host messages from JSON ones.
pub fn messages(json: &[Json]) -> Vec<Arc<Message>> {
    json.iter()
        .map(|j| Arc::new(serde_json::from_value::<Message>(j.clone()).expect("message")))
        .collect()
}

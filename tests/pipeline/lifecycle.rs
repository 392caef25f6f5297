//! The lifecycle context every handler receives (issue 22 item 4): `runId` is one per turn
//! (the same for every model call of the turn's tool loop), `provider` and `usage` come from
//! what the client gave (the newest reply), and what the host cannot know is absent.

use serde_json::{Value as Json, json};

use ctxhost::contract::message::Message;
use ctxhost::runtime::{Host, SessionSpec};
use ctxhost::session::TurnInput;

use super::{fixture, pipeline};
use crate::common;

fn message(v: Json) -> Message {
    serde_json::from_value(v).expect("a message")
}

/// `key=value` of the probe's lines in a call's system prompt addition.
fn field(addition: &Option<String>, key: &str) -> String {
    let text = addition.as_deref().expect("the probe's block");
    text.lines()
        .find_map(|l| l.strip_prefix(&format!("{key}=")))
        .unwrap_or_else(|| panic!("no {key} in {text}"))
        .to_owned()
}

#[test]
fn run_id_is_one_per_turn_and_provider_and_usage_come_from_the_newest_reply() {
    let config = pipeline(
        16_000,
        &[("lifecycle", fixture("lifecycle.lua"), json!({}))],
    );
    let dir = tempfile::tempdir().expect("tempdir");
    let calls = common::block_on(async {
        let host = Host::start(config).await.expect("host");
        let mut spec = SessionSpec::new("life", dir.path().join("life.jsonl"));
        spec.model = Some("model-x".into());
        let s = host.create_session(spec).await.expect("session");
        let first = s
            .begin_turn(TurnInput {
                user: Message::user("read the file"),
                is_heartbeat: false,
            })
            .await
            .expect("turn 1");
        let second = s
            .continue_turn(vec![
                message(json!({"role": "assistant", "stopReason": "toolUse",
                    "content": [{"type": "toolCall", "id": "c1", "name": "read", "arguments": {}}],
                    "provider": "anthropic", "model": "claude-y",
                    "usage": {"input": 120, "output": 7, "cacheRead": 0, "cacheWrite": 0, "total": 127}})),
                message(json!({"role": "toolResult", "toolCallId": "c1", "toolName": "read",
                    "content": "the file", "isError": false})),
            ])
            .await
            .expect("tool step");
        s.end_turn(vec![message(json!({"role": "assistant",
            "content": [{"type": "text", "text": "done"}],
            "provider": "openai", "usage": {"input": 300, "output": 2}}))])
            .await
            .expect("end 1");
        let third = s
            .begin_turn(TurnInput {
                user: Message::user("next"),
                is_heartbeat: false,
            })
            .await
            .expect("turn 2");
        s.close().await.expect("close");
        [first, second, third].map(|a| a.system_prompt_addition)
    });
    let [first, second, third] = &calls;
    // One run per turn: the tool loop's calls share it, the next turn has another.
    assert_eq!(field(first, "runId"), field(second, "runId"));
    assert_ne!(field(second, "runId"), field(third, "runId"));
    assert!(field(first, "runId").starts_with("life:"), "{first:?}");
    // Nothing from the client yet: absent, not zero.
    assert_eq!(field(first, "provider"), "absent");
    assert_eq!(field(first, "usage.input"), "absent");
    // The newest reply's provider and usage; the session's model names the model.
    assert_eq!(field(second, "provider"), "anthropic");
    assert_eq!(field(second, "window.provider"), "anthropic");
    assert_eq!(field(second, "usage.input"), "120");
    assert_eq!(field(third, "provider"), "openai");
    assert_eq!(field(third, "usage.input"), "300");
    // The store counts committed turns (its commit mark): the tool loop is still turn 1.
    assert_eq!(field(first, "turnNumber"), "1");
    assert_eq!(field(second, "turnNumber"), "1");
    assert_eq!(field(third, "turnNumber"), "2");
    for c in &calls {
        assert_eq!(field(c, "modelId"), "model-x");
        assert_eq!(field(c, "trigger"), "user");
        assert!(
            field(c, "sessionCreatedAt").starts_with("20"),
            "an ISO 8601 time: {c:?}"
        );
        assert_ne!(field(c, "reserved"), "absent");
        assert!(field(c, "cursor").starts_with("fs-jsonl/"), "{c:?}");
    }
}

//! Shared helpers for the summarizer's unit tests: message builders, a request and a run with
//! the estimate counter, a section reader, and a realistic span exercising every section.

use std::sync::Arc;

use serde_json::{Value, json};

use super::{BuiltinSummarizer, IdentifierPolicy, Summary, SummaryRequest};
use crate::contract::message::Message;
use crate::services::tokens::Estimate;

pub(super) fn msg(v: Value) -> Arc<Message> {
    Arc::new(serde_json::from_value::<Message>(v).expect("message json"))
}

pub(super) fn user(text: &str) -> Arc<Message> {
    msg(json!({"role":"user","content":[{"type":"text","text":text}],"timestamp":1}))
}

pub(super) fn say(text: &str) -> Arc<Message> {
    msg(json!({"role":"assistant","content":[{"type":"text","text":text}],"stopReason":"stop"}))
}

pub(super) fn call(id: &str, name: &str, args: Value) -> Arc<Message> {
    msg(
        json!({"role":"assistant","content":[{"type":"toolCall","id":id,"name":name,"arguments":args}],
               "stopReason":"toolUse"}),
    )
}

pub(super) fn result(id: &str, name: &str, text: &str, is_error: bool) -> Arc<Message> {
    msg(json!({"role":"toolResult","toolCallId":id,"toolName":name,
               "content":[{"type":"text","text":text}],"isError":is_error}))
}

pub(super) fn request<'a>(
    messages: &'a [Arc<Message>],
    previous: Option<&'a str>,
    max_tokens: u64,
) -> SummaryRequest<'a> {
    SummaryRequest {
        messages,
        previous_summary: previous,
        max_tokens,
        instructions: None,
        identifier_policy: IdentifierPolicy::Strict,
    }
}

pub(super) fn run(messages: &[Arc<Message>], previous: Option<&str>, max_tokens: u64) -> Summary {
    BuiltinSummarizer
        .summarize_now(&request(messages, previous, max_tokens), &Estimate)
        .expect("summarize")
}

/// The `- ` items under `## heading`.
pub(super) fn section(text: &str, heading: &str) -> Vec<String> {
    let mut inside = false;
    let mut out = Vec::new();
    for line in text.lines() {
        if let Some(h) = line.strip_prefix("## ") {
            inside = h == heading;
        } else if inside && let Some(item) = line.strip_prefix("- ") {
            out.push(item.to_string());
        }
    }
    out
}

/// A realistic span exercising every section.
pub(super) fn rich_span() -> Vec<Arc<Message>> {
    vec![
        user(
            "Please migrate the billing service to the new queue. You must never touch the prod database directly. Only use the staging cluster.",
        ),
        msg(json!({"role":"assistant","content":[
            {"type":"thinking","thinking":"The queue lives at amqp host mq.internal.example.com; commit 3f2a9c1d is the last good one."},
            {"type":"text","text":"I'll start by reading the current consumer."},
            {"type":"toolCall","id":"c1","name":"read","arguments":{"path":"/srv/billing/src/consumer.rs"}}],
            "stopReason":"toolUse"})),
        result(
            "c1",
            "read",
            "use crate::queue; // see https://docs.example.com/queue?v=2 for details\n",
            false,
        ),
        call(
            "c2",
            "bash",
            json!({"command":"cat ./config/queue.toml | grep host && ls services/billing/Cargo.toml"}),
        ),
        result(
            "c2",
            "bash",
            "host = \"10.20.30.40:5672\"\nrequest 7c9e6679-7425-40de-944b-e07fc1f90ae7 stuck",
            false,
        ),
        call(
            "c3",
            "edit",
            json!({"file_path":"/srv/billing/src/consumer.rs","oldText":"a","newText":"b"}),
        ),
        result(
            "c3",
            "edit",
            "Error: oldText not found in file\nsecond line",
            true,
        ),
        say(
            "Let's switch to the batched consumer instead of the polling loop. We decided to keep retries at 3.\n\nNext steps:\n- run the integration tests\n- [ ] update the runbook\n\nTODO: drop the legacy endpoint at api.example.com:8443",
        ),
        user("Does it also handle dead letters?"),
    ]
}

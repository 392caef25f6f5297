//! Claude Code session JSONL.
//!
//! One API response is split over several `assistant` lines that repeat `message.id`; they are
//! merged, in line order, into one assistant message (the response stays open across the tool
//! results that answer it, and closes at the next user input or another response). `tool_use`
//! becomes `toolCall`, `thinking` keeps its `signature` in `extra`. `tool_result` blocks become
//! one `toolResult` message each. Sidechain lines and bookkeeping lines are skipped; the
//! `compact_boundary` and its `isCompactSummary` user message are dropped and counted as one
//! compaction. `isMeta` user lines become `custom` messages of type `meta`.

use std::collections::HashMap;

use serde_json::{Map, Value};

use super::{Import, ImportedSession, inferred_stop_reason, str_field, tool_call};
use crate::contract::message::{
    AssistantMessage, Content, ContentBlock, CustomMessage, Extra, ImageBlock, Message,
    MessageBody, TextBlock, ThinkingBlock, ToolResultMessage, UserMessage,
};
use crate::transcript::{JsonLine, LineProblem, parse_iso_ms};

#[derive(Default)]
struct State {
    messages: Vec<Message>,
    /// The response id and message index of the assistant message still being assembled.
    open: Option<(String, usize)>,
    /// Tool names by call id, for the results.
    tool_names: HashMap<String, String>,
    /// A `compact_boundary` was seen and its summary message has not come yet.
    boundary_pending: bool,
}

/// Imports one Claude Code session file.
pub(super) fn import(name: String, lines: Vec<JsonLine>, out: &mut Import) -> ImportedSession {
    let mut st = State::default();
    for JsonLine { line, value } in lines {
        if value.get("isSidechain").and_then(Value::as_bool) == Some(true) {
            continue;
        }
        match str_field(&value, "type").unwrap_or_default() {
            "assistant" => {
                if let Err(message) = st.assistant(&value) {
                    out.problems.push(LineProblem { line, message });
                }
            }
            "user" => {
                if value.get("isCompactSummary").and_then(Value::as_bool) == Some(true) {
                    if !st.boundary_pending {
                        out.dropped_compactions += 1;
                    }
                    st.boundary_pending = false;
                    continue;
                }
                if let Err(message) = st.user(&value) {
                    out.problems.push(LineProblem { line, message });
                }
            }
            "system" if str_field(&value, "subtype") == Some("compact_boundary") => {
                out.dropped_compactions += 1;
                st.boundary_pending = true;
                st.open = None;
            }
            // file-history-snapshot, progress, queue-operation, other system lines, summary.
            _ => {}
        }
    }
    ImportedSession {
        name,
        system_prompt: None,
        messages: st.messages,
    }
}

impl State {
    fn assistant(&mut self, line: &Map<String, Value>) -> Result<(), String> {
        let Some(msg) = line.get("message").and_then(Value::as_object) else {
            return Err("assistant line without a message object".into());
        };
        let response_id = str_field(msg, "id").unwrap_or_default().to_owned();
        let blocks = match msg.get("content") {
            Some(Value::Array(items)) => items.iter().map(assistant_block).collect(),
            Some(Value::String(s)) => vec![ContentBlock::text(s.clone())],
            _ => Vec::new(),
        };
        for b in &blocks {
            if let ContentBlock::ToolCall(c) = b {
                self.tool_names.insert(c.id.clone(), c.name.clone());
            }
        }
        let stop = str_field(msg, "stop_reason").map(map_stop_reason);
        if let Some((open_id, idx)) = &self.open
            && !response_id.is_empty()
            && *open_id == response_id
            && let Some(Message {
                body: MessageBody::Assistant(a),
                ..
            }) = self.messages.get_mut(*idx)
        {
            a.content.extend(blocks);
            if let Some(stop) = stop {
                a.stop_reason = Some(stop);
            } else if a.stop_reason.as_deref() != Some("toolUse") {
                a.stop_reason = Some(inferred_stop_reason(&a.content));
            }
            if let Some(usage) = msg.get("usage") {
                a.extra.insert("usage".into(), usage.clone());
            }
            return Ok(());
        }
        let mut extra = Extra::new();
        for key in ["model", "usage"] {
            if let Some(v) = msg.get(key) {
                extra.insert(key.into(), v.clone());
            }
        }
        if !response_id.is_empty() {
            extra.insert("responseId".into(), response_id.clone().into());
        }
        insert_timestamp(&mut extra, line);
        let stop_reason = Some(stop.unwrap_or_else(|| inferred_stop_reason(&blocks)));
        self.messages
            .push(Message::new(MessageBody::Assistant(AssistantMessage {
                content: blocks,
                stop_reason,
                extra,
            })));
        self.open = Some((response_id, self.messages.len() - 1));
        Ok(())
    }

    fn user(&mut self, line: &Map<String, Value>) -> Result<(), String> {
        let Some(msg) = line.get("message").and_then(Value::as_object) else {
            return Err("user line without a message object".into());
        };
        let mut extra = Extra::new();
        insert_timestamp(&mut extra, line);
        let content = msg.get("content").cloned().unwrap_or(Value::Null);
        if line.get("isMeta").and_then(Value::as_bool) == Some(true) {
            self.open = None;
            self.messages
                .push(Message::new(MessageBody::Custom(CustomMessage {
                    custom_type: "meta".into(),
                    content: user_content(content),
                    exclude_from_context: false,
                    extra,
                })));
            return Ok(());
        }
        let items = match content {
            Value::Array(items) => items,
            other => {
                self.open = None;
                self.push_user(user_content(other), extra);
                return Ok(());
            }
        };
        let mut rest = Vec::new();
        let mut results = 0usize;
        for item in items {
            match item {
                Value::Object(b) if str_field(&b, "type") == Some("tool_result") => {
                    results += 1;
                    self.tool_result(b, line, &extra);
                }
                other => rest.push(other),
            }
        }
        if !rest.is_empty() || results == 0 {
            self.open = None;
            self.push_user(user_content(Value::Array(rest)), extra);
        }
        Ok(())
    }

    fn push_user(&mut self, content: Content, extra: Extra) {
        self.messages
            .push(Message::new(MessageBody::User(UserMessage {
                content,
                extra,
            })));
    }

    fn tool_result(&mut self, mut b: Map<String, Value>, line: &Map<String, Value>, base: &Extra) {
        let tool_call_id = str_field(&b, "tool_use_id").unwrap_or_default().to_owned();
        let content = match b.remove("content") {
            Some(Value::String(s)) => vec![ContentBlock::text(s)],
            Some(Value::Array(items)) => items.iter().map(user_block).collect(),
            Some(Value::Null) | None => Vec::new(),
            Some(other) => vec![ContentBlock::text(other.to_string())],
        };
        let is_error = b.get("is_error").and_then(Value::as_bool).unwrap_or(false);
        let mut extra = base.clone();
        if let Some(details) = line.get("toolUseResult") {
            extra.insert("details".into(), details.clone());
        }
        self.messages
            .push(Message::new(MessageBody::ToolResult(ToolResultMessage {
                tool_name: self
                    .tool_names
                    .get(&tool_call_id)
                    .cloned()
                    .unwrap_or_default(),
                tool_call_id,
                content: Content::Blocks(content),
                is_error,
                extra,
            })));
    }
}

/// The line's ISO `timestamp` as Unix milliseconds (pi's convention), or as-is if unparsable.
fn insert_timestamp(extra: &mut Extra, line: &Map<String, Value>) {
    if let Some(ts) = str_field(line, "timestamp") {
        let v = parse_iso_ms(ts).map_or_else(|| Value::String(ts.to_owned()), Value::from);
        extra.insert("timestamp".into(), v);
    }
}

/// Anthropic stop reasons in pi's vocabulary.
fn map_stop_reason(s: &str) -> String {
    match s {
        "end_turn" | "stop_sequence" | "pause_turn" => "stop",
        "tool_use" => "toolUse",
        "max_tokens" => "length",
        other => other,
    }
    .to_owned()
}

/// User content: a string stays a string, blocks are converted.
fn user_content(v: Value) -> Content {
    match v {
        Value::String(s) => Content::Text(s),
        Value::Array(items) => Content::Blocks(items.iter().map(user_block).collect()),
        Value::Null => Content::empty(),
        other => Content::Text(other.to_string()),
    }
}

/// An assistant block: `text`, `thinking` (signature kept), `tool_use` → `toolCall`.
fn assistant_block(v: &Value) -> ContentBlock {
    let Some(b) = v.as_object() else {
        return ContentBlock::text(v.to_string());
    };
    let mut b = b.clone();
    match str_field(&b, "type").unwrap_or_default() {
        "tool_use" => {
            b.remove("type");
            let id = take_string(&mut b, "id");
            let name = take_string(&mut b, "name");
            let arguments = b.remove("input").unwrap_or(Value::Object(Map::new()));
            tool_call(id, name, arguments, b)
        }
        "thinking" => {
            b.remove("type");
            let thinking = take_string(&mut b, "thinking");
            ContentBlock::Thinking(ThinkingBlock {
                thinking,
                extra: b.into(),
            })
        }
        _ => user_block(v),
    }
}

/// A user or tool-result block: `text`, `image` (base64 source → data + mimeType), else kept.
fn user_block(v: &Value) -> ContentBlock {
    let Some(b) = v.as_object() else {
        return ContentBlock::text(v.as_str().map_or_else(|| v.to_string(), str::to_owned));
    };
    let mut b = b.clone();
    match str_field(&b, "type").unwrap_or_default() {
        "text" if b.get("text").is_some_and(Value::is_string) => {
            b.remove("type");
            let text = take_string(&mut b, "text");
            ContentBlock::Text(TextBlock {
                text,
                extra: b.into(),
            })
        }
        "image" => {
            let base64 = b
                .get("source")
                .and_then(Value::as_object)
                .filter(|s| str_field(s, "type") == Some("base64"))
                .cloned();
            match base64 {
                Some(src) => {
                    b.remove("type");
                    b.remove("source");
                    ContentBlock::Image(ImageBlock {
                        data: str_field(&src, "data").unwrap_or_default().to_owned(),
                        mime_type: str_field(&src, "media_type").unwrap_or_default().to_owned(),
                        extra: b.into(),
                    })
                }
                None => ContentBlock::Other(b.into()),
            }
        }
        _ => ContentBlock::Other(b.into()),
    }
}

fn take_string(m: &mut Map<String, Value>, key: &str) -> String {
    match m.remove(key) {
        Some(Value::String(s)) => s,
        Some(Value::Null) | None => String::new(),
        Some(other) => other.to_string(),
    }
}

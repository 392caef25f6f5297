//! OpenAI Codex CLI rollout JSONL.
//!
//! Only `response_item`s are conversation. Consecutive `reasoning` (→ `thinking`), assistant
//! `message` (→ `text`) and `function_call` / `custom_tool_call` / `local_shell_call`
//! (→ `toolCall`) items form one assistant message, closed by a tool output or a user/developer
//! message. Tool outputs become `toolResult`s. `developer` messages and the injected
//! `<environment_context>` / `<user_instructions>` user messages become `custom` messages.
//! `session_meta.payload.instructions` is the system prompt; top-level `compacted` records are
//! dropped and counted.

use std::collections::HashMap;

use serde_json::{Map, Value};

use super::{Import, ImportedSession, inferred_stop_reason, parse_arguments, str_field, tool_call};
use crate::contract::message::{
    AssistantMessage, Content, ContentBlock, CustomMessage, Extra, Message, MessageBody, TextBlock,
    ThinkingBlock, ToolResultMessage, UserMessage,
};
use crate::transcript::{JsonLine, LineProblem, parse_iso_ms};

#[derive(Default)]
struct State {
    messages: Vec<Message>,
    /// Blocks of the assistant message being assembled, and its first item's timestamp.
    pending: Vec<ContentBlock>,
    pending_timestamp: Option<Value>,
    tool_names: HashMap<String, String>,
}

/// Imports one Codex rollout file.
pub(super) fn import(name: String, lines: Vec<JsonLine>, out: &mut Import) -> ImportedSession {
    let mut st = State::default();
    let mut system_prompt = None;
    for JsonLine { line, value } in lines {
        let payload = value.get("payload").and_then(Value::as_object);
        match str_field(&value, "type").unwrap_or_default() {
            "session_meta" => {
                if let Some(s) = payload.and_then(|p| str_field(p, "instructions"))
                    && !s.is_empty()
                {
                    system_prompt = Some(s.to_owned());
                }
            }
            "compacted" => {
                st.close();
                out.dropped_compactions += 1;
            }
            "response_item" => {
                let Some(p) = payload else {
                    out.problems.push(LineProblem {
                        line,
                        message: "response_item without a payload object".into(),
                    });
                    continue;
                };
                let timestamp = value.get("timestamp").and_then(Value::as_str).map(|t| {
                    parse_iso_ms(t).map_or_else(|| Value::String(t.to_owned()), Value::from)
                });
                if let Err(message) = st.item(p, timestamp) {
                    out.problems.push(LineProblem { line, message });
                }
            }
            // event_msg, turn_context and anything newer: UI mirrors and settings.
            _ => {}
        }
    }
    st.close();
    ImportedSession {
        name,
        system_prompt,
        messages: st.messages,
    }
}

impl State {
    fn item(&mut self, p: &Map<String, Value>, timestamp: Option<Value>) -> Result<(), String> {
        let kind = str_field(p, "type").unwrap_or_default();
        match kind {
            "reasoning" => {
                let text = p
                    .get("summary")
                    .and_then(Value::as_array)
                    .map(|items| {
                        items
                            .iter()
                            .filter_map(|s| s.get("text").and_then(Value::as_str))
                            .collect::<Vec<_>>()
                            .join("\n\n")
                    })
                    .unwrap_or_default();
                let mut extra = Extra::new();
                for key in ["encrypted_content", "id"] {
                    if let Some(v) = p.get(key).filter(|v| !v.is_null()) {
                        extra.insert(key.into(), v.clone());
                    }
                }
                if let Some(c) = p.get("content").filter(|v| !v.is_null()) {
                    extra.insert("content".into(), c.clone());
                }
                self.push_block(
                    ContentBlock::Thinking(ThinkingBlock {
                        thinking: text,
                        extra,
                    }),
                    timestamp,
                );
            }
            "function_call" | "custom_tool_call" | "local_shell_call" => {
                let id = str_field(p, "call_id")
                    .or_else(|| str_field(p, "id"))
                    .unwrap_or_default()
                    .to_owned();
                let name = match kind {
                    "local_shell_call" => "local_shell".to_owned(),
                    _ => str_field(p, "name").unwrap_or_default().to_owned(),
                };
                let arguments = match kind {
                    "function_call" => p.get("arguments"),
                    "custom_tool_call" => p.get("input"),
                    _ => p.get("action"),
                };
                let arguments = match arguments {
                    Some(Value::String(s)) => parse_arguments(s),
                    Some(v) => v.clone(),
                    None => Value::Object(Map::new()),
                };
                let mut extra = Extra::new();
                if kind != "function_call" {
                    extra.insert("codexType".into(), kind.into());
                }
                if let Some(v) = p.get("id") {
                    extra.insert("itemId".into(), v.clone());
                }
                self.tool_names.insert(id.clone(), name.clone());
                self.push_block(tool_call(id, name, arguments, extra), timestamp);
            }
            "function_call_output" | "custom_tool_call_output" => {
                self.close();
                let call_id = str_field(p, "call_id").unwrap_or_default().to_owned();
                let mut extra = Extra::new();
                if let Some(t) = timestamp {
                    extra.insert("timestamp".into(), t);
                }
                let text = match p.get("output") {
                    Some(Value::String(s)) => output_text(s, &mut extra),
                    Some(Value::Null) | None => String::new(),
                    Some(other) => other.to_string(),
                };
                self.messages
                    .push(Message::new(MessageBody::ToolResult(ToolResultMessage {
                        tool_name: self.tool_names.get(&call_id).cloned().unwrap_or_default(),
                        tool_call_id: call_id,
                        content: Content::Blocks(vec![ContentBlock::text(text)]),
                        is_error: false,
                        extra,
                    })));
            }
            "message" => {
                let role = str_field(p, "role").unwrap_or_default();
                let blocks = message_blocks(p.get("content"));
                match role {
                    "assistant" => {
                        for b in blocks {
                            self.push_block(b, timestamp.clone());
                        }
                    }
                    "user" | "developer" | "system" => {
                        self.close();
                        let text = Content::Blocks(blocks.clone()).joined_text();
                        let custom_type = match role {
                            "developer" => Some("developer"),
                            "system" => Some("system"),
                            _ => injected_kind(&text),
                        };
                        let mut extra = Extra::new();
                        if let Some(t) = timestamp {
                            extra.insert("timestamp".into(), t);
                        }
                        let content = Content::Blocks(blocks);
                        let body = match custom_type {
                            Some(t) => MessageBody::Custom(CustomMessage {
                                custom_type: t.into(),
                                content,
                                exclude_from_context: false,
                                extra,
                            }),
                            None => MessageBody::User(UserMessage { content, extra }),
                        };
                        self.messages.push(Message::new(body));
                    }
                    other => return Err(format!("message item with unknown role {other:?}")),
                }
            }
            // ghost_snapshot (undo state), web_search_call and other non-conversation items.
            _ => {}
        }
        Ok(())
    }

    fn push_block(&mut self, block: ContentBlock, timestamp: Option<Value>) {
        if self.pending.is_empty() {
            self.pending_timestamp = timestamp;
        }
        self.pending.push(block);
    }

    /// Ends the assistant message being assembled, if any.
    fn close(&mut self) {
        if self.pending.is_empty() {
            return;
        }
        let content = std::mem::take(&mut self.pending);
        let mut extra = Extra::new();
        if let Some(t) = self.pending_timestamp.take() {
            extra.insert("timestamp".into(), t);
        }
        self.messages
            .push(Message::new(MessageBody::Assistant(AssistantMessage {
                stop_reason: Some(inferred_stop_reason(&content)),
                content,
                extra,
            })));
    }
}

/// The text of a tool output; an `{"output": .., "metadata": ..}` JSON string is unwrapped and its
/// metadata kept.
fn output_text(s: &str, extra: &mut Extra) -> String {
    if let Ok(Value::Object(mut m)) = serde_json::from_str::<Value>(s)
        && let Some(Value::String(out)) = m.remove("output")
    {
        if let Some(meta) = m.remove("metadata") {
            extra.insert("metadata".into(), meta);
        }
        return out;
    }
    s.to_owned()
}

/// `input_text` / `output_text` parts → text blocks; other parts kept verbatim.
fn message_blocks(content: Option<&Value>) -> Vec<ContentBlock> {
    match content {
        Some(Value::Array(parts)) => parts
            .iter()
            .map(|part| match part.as_object() {
                Some(o)
                    if matches!(
                        str_field(o, "type"),
                        Some("input_text" | "output_text" | "text")
                    ) =>
                {
                    let mut extra = o.clone();
                    extra.remove("type");
                    let text = match extra.remove("text") {
                        Some(Value::String(s)) => s,
                        _ => String::new(),
                    };
                    ContentBlock::Text(TextBlock {
                        text,
                        extra: extra.into(),
                    })
                }
                Some(o) => ContentBlock::Other(o.clone().into()),
                None => ContentBlock::text(part.as_str().unwrap_or_default()),
            })
            .collect(),
        Some(Value::String(s)) => vec![ContentBlock::text(s.clone())],
        _ => Vec::new(),
    }
}

/// The custom type of a user message that the CLI injected rather than the person typed.
fn injected_kind(text: &str) -> Option<&'static str> {
    let t = text.trim_start();
    if t.starts_with("<environment_context>") {
        Some("environmentContext")
    } else if t.starts_with("<user_instructions>") || t.starts_with("# AGENTS.md instructions") {
        Some("userInstructions")
    } else if t.starts_with("<user_shell_command>") {
        Some("userShellCommand")
    } else {
        None
    }
}

//! OpenAI Chat Completions message arrays: τ-bench trajectory files (an array of
//! `{task_id, trial, traj, ..}`, one session each) or one plain array of chat messages.
//! The message conversion is shared with the SWE-agent importer.

use std::collections::HashMap;

use serde_json::{Map, Value};

use super::{Import, ImportedSession, inferred_stop_reason, parse_arguments, str_field, tool_call};
use crate::contract::message::{
    AssistantMessage, Content, ContentBlock, CustomMessage, Message, MessageBody, TextBlock,
    ToolResultMessage, UserMessage,
};
use crate::transcript::LineProblem;

/// Imports a Chat Completions JSON document.
pub(super) fn import(name: String, doc: Value, out: &mut Import) -> Result<(), String> {
    let Value::Array(items) = doc else {
        return Err("expected a JSON array of conversations or of chat messages".into());
    };
    let tau = items
        .first()
        .and_then(Value::as_object)
        .is_some_and(|o| o.contains_key("traj"));
    if !tau {
        let session = convert(name, &items, "", out);
        out.sessions.push(session);
        return Ok(());
    }
    for (i, item) in items.iter().enumerate() {
        let Some(o) = item.as_object() else {
            out.problems.push(LineProblem {
                line: 0,
                message: format!("element {i}: expected an object"),
            });
            continue;
        };
        let Some(traj) = o.get("traj").and_then(Value::as_array) else {
            out.problems.push(LineProblem {
                line: 0,
                message: format!("element {i}: no `traj` array"),
            });
            continue;
        };
        let name = format!(
            "task-{}-trial-{}",
            scalar(o.get("task_id")).unwrap_or_else(|| i.to_string()),
            scalar(o.get("trial")).unwrap_or_else(|| "0".into())
        );
        let where_ = format!("element {i} ({name}): ");
        let session = convert(name, traj, &where_, out);
        out.sessions.push(session);
    }
    Ok(())
}

/// A number or string as display text.
fn scalar(v: Option<&Value>) -> Option<String> {
    match v? {
        Value::String(s) => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        _ => None,
    }
}

/// Converts one chat message list. The first `system` message is the system prompt (later ones
/// become `custom` messages of type `system`). Tool messages may name their call with
/// `tool_call_id` or, as SWE-agent does, a `tool_call_ids` list: one result per id, the content
/// on the first.
pub(super) fn convert(
    name: String,
    msgs: &[Value],
    where_: &str,
    out: &mut Import,
) -> ImportedSession {
    let mut system_prompt = None;
    let mut messages = Vec::new();
    let mut tool_names: HashMap<String, String> = HashMap::new();
    for (i, m) in msgs.iter().enumerate() {
        let Some(m) = m.as_object() else {
            out.problems.push(LineProblem {
                line: 0,
                message: format!("{where_}message {i}: expected an object"),
            });
            continue;
        };
        let mut extra = m.clone();
        let role = match extra.remove("role") {
            Some(Value::String(r)) => r,
            _ => {
                out.problems.push(LineProblem {
                    line: 0,
                    message: format!("{where_}message {i}: no role"),
                });
                continue;
            }
        };
        let content = extra.remove("content").unwrap_or(Value::Null);
        match role.as_str() {
            "system" if system_prompt.is_none() => {
                system_prompt = Some(Content::Blocks(blocks(&content)).joined_text());
            }
            "system" | "developer" => {
                messages.push(Message::new(MessageBody::Custom(CustomMessage {
                    custom_type: role.clone(),
                    content: plain_content(content),
                    exclude_from_context: false,
                    extra,
                })))
            }
            "user" => messages.push(Message::new(MessageBody::User(UserMessage {
                content: plain_content(content),
                extra,
            }))),
            "assistant" => {
                let mut content_blocks = blocks(&content);
                content_blocks.retain(|b| !matches!(b, ContentBlock::Text(t) if t.text.is_empty()));
                if let Some(Value::Array(calls)) = extra.remove("tool_calls") {
                    for call in calls {
                        let block = call_block(call);
                        if let ContentBlock::ToolCall(c) = &block {
                            tool_names.insert(c.id.clone(), c.name.clone());
                        }
                        content_blocks.push(block);
                    }
                }
                messages.push(Message::new(MessageBody::Assistant(AssistantMessage {
                    stop_reason: Some(inferred_stop_reason(&content_blocks)),
                    content: content_blocks,
                    extra,
                })));
            }
            "tool" | "function" => {
                let ids: Vec<String> = match extra.remove("tool_call_ids") {
                    Some(Value::Array(ids)) => ids
                        .iter()
                        .filter_map(|v| v.as_str().map(str::to_owned))
                        .collect(),
                    _ => Vec::new(),
                };
                let ids = if ids.is_empty() {
                    match extra.remove("tool_call_id") {
                        Some(Value::String(id)) => vec![id],
                        _ => vec![String::new()],
                    }
                } else {
                    extra.remove("tool_call_id");
                    ids
                };
                let named = match extra.remove("name") {
                    Some(Value::String(n)) => Some(n),
                    _ => None,
                };
                let text = Content::Blocks(blocks(&content));
                for (k, id) in ids.iter().enumerate() {
                    let content = if k == 0 {
                        text.clone()
                    } else {
                        Content::Blocks(vec![ContentBlock::text(format!(
                            "(output reported with {})",
                            ids[0]
                        ))])
                    };
                    let tool_name = named
                        .clone()
                        .or_else(|| tool_names.get(id).cloned())
                        .unwrap_or_default();
                    messages.push(Message::new(MessageBody::ToolResult(ToolResultMessage {
                        tool_call_id: id.clone(),
                        tool_name,
                        content,
                        is_error: false,
                        extra: extra.clone(),
                    })));
                }
            }
            other => out.problems.push(LineProblem {
                line: 0,
                message: format!("{where_}message {i}: unknown role {other:?}"),
            }),
        }
    }
    ImportedSession {
        name,
        system_prompt,
        messages,
    }
}

/// `{id, type:"function", function:{name, arguments:<JSON string>}}` → a `toolCall` block.
fn call_block(call: Value) -> ContentBlock {
    let Value::Object(mut call) = call else {
        return ContentBlock::text(call.to_string());
    };
    let id = match call.remove("id") {
        Some(Value::String(s)) => s,
        _ => String::new(),
    };
    if str_field(&call, "type") == Some("function") {
        call.remove("type");
    }
    let mut function = match call.remove("function") {
        Some(Value::Object(f)) => f,
        _ => Map::new(),
    };
    let name = match function.remove("name") {
        Some(Value::String(s)) => s,
        _ => String::new(),
    };
    let arguments = match function.remove("arguments") {
        Some(Value::String(s)) => parse_arguments(&s),
        Some(v) => v,
        None => Value::Object(Map::new()),
    };
    tool_call(id, name, arguments, call)
}

/// Content for user-side messages: a string stays a string.
fn plain_content(v: Value) -> Content {
    match v {
        Value::String(s) => Content::Text(s),
        other => Content::Blocks(blocks(&other)),
    }
}

/// Chat content (string, null, or parts) as blocks; non-text parts are kept verbatim.
fn blocks(v: &Value) -> Vec<ContentBlock> {
    match v {
        Value::String(s) => vec![ContentBlock::text(s.clone())],
        Value::Array(parts) => parts
            .iter()
            .map(|p| match p.as_object() {
                Some(o) if str_field(o, "type") == Some("text") => {
                    let mut extra = o.clone();
                    extra.remove("type");
                    let text = match extra.remove("text") {
                        Some(Value::String(s)) => s,
                        _ => String::new(),
                    };
                    ContentBlock::Text(TextBlock { text, extra })
                }
                Some(o) => ContentBlock::Other(o.clone()),
                None => ContentBlock::text(p.as_str().unwrap_or_default()),
            })
            .collect(),
        Value::Null => Vec::new(),
        other => vec![ContentBlock::text(other.to_string())],
    }
}

//! OpenAI Chat Completions message arrays: τ-bench trajectory files (an array of
//! `{task_id, trial, traj, ..}`, one session each) or one plain array of chat messages.
//! The message conversion is shared with the SWE-agent importer.

use std::collections::HashMap;
use std::path::Path;

use serde_json::{Map, Value};

use super::{
    Format, Import, ImportedSession, inferred_stop_reason, parse_arguments, str_field, tool_call,
};
use crate::contract::message::{
    AssistantMessage, Content, ContentBlock, CustomMessage, Extra, Message, MessageBody, TextBlock,
    ToolResultMessage, UserMessage,
};
use crate::transcript::{LineProblem, MAX_TRANSCRIPT_BYTES};

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
        conversation(i, item, out);
    }
    Ok(())
}

/// Imports a Chat Completions array from its bytes as they are parsed: each element is converted
/// and dropped before the next is read, so the whole document is never held as JSON values
/// beside the messages (a 200,000-message array is 120 MB of text, several times that as
/// values). What it makes is what [`import`] makes of the parsed document.
pub(super) fn import_array(
    name: String,
    bytes: &[u8],
    out: &mut Import,
) -> Result<(), serde_json::Error> {
    use serde::de::Deserializer as _;
    let mut de = serde_json::Deserializer::from_slice(bytes);
    let session = de.deserialize_seq(Elements {
        name,
        out,
        detecting: false,
    })?;
    de.end()?;
    if let Some(s) = session {
        out.sessions.push(s);
    }
    Ok(())
}

/// Imports the file at `path` when it is a Chat Completions array, read from the file as it
/// is parsed: the file's bytes are never held whole beside the messages made of them (at
/// 200,000 messages that was 117 MB more at the import, the replay's peak). `None` when the
/// file is not a regular file within [`MAX_TRANSCRIPT_BYTES`] holding one JSON array whose
/// first element detection takes for a chat message or a τ-bench conversation, or when it
/// cannot be read: the caller then reads it whole and detects its format, so what is imported,
/// and every error, is what that path gives. What it makes is what [`import_array`] makes of
/// the file's bytes.
pub(super) fn import_array_file(path: &Path, name: String) -> Option<Import> {
    use serde::de::Deserializer as _;
    use std::io::{BufRead, Read};
    let file = std::fs::File::open(path).ok()?;
    let meta = file.metadata().ok()?;
    if !meta.is_file() || meta.len() > MAX_TRANSCRIPT_BYTES {
        return None;
    }
    let mut reader = std::io::BufReader::with_capacity(1 << 20, file.take(MAX_TRANSCRIPT_BYTES));
    // What detection skips: a byte-order mark, then whitespace; an array must come next.
    if reader.fill_buf().ok()?.starts_with(b"\xEF\xBB\xBF") {
        reader.consume(3);
    }
    loop {
        let buf = reader.fill_buf().ok()?;
        let blank = buf.iter().take_while(|b| b.is_ascii_whitespace()).count();
        match buf.get(blank) {
            Some(b'[') => break,
            Some(_) => return None,
            None if buf.is_empty() => return None,
            None => reader.consume(blank),
        }
    }
    let mut out = Import::empty(Format::ChatCompletions);
    let mut de = serde_json::Deserializer::from_reader(reader);
    let session = de
        .deserialize_seq(Elements {
            name,
            out: &mut out,
            detecting: true,
        })
        .ok()?;
    de.end().ok()?;
    if let Some(s) = session {
        out.sessions.push(s);
    }
    out.problems.sort_by_key(|p| p.line);
    Some(out)
}

/// The elements of the top-level array, handled as [`import`] handles them: τ-bench
/// conversations (sessions pushed as they come) or one plain list of chat messages (its session
/// returned at the end).
struct Elements<'o> {
    name: String,
    out: &'o mut Import,
    /// The format is not known yet: an array whose first element detection would not take
    /// for Chat Completions is an error here (see [`import_array_file`]).
    detecting: bool,
}

impl<'de> serde::de::Visitor<'de> for Elements<'_> {
    type Value = Option<ImportedSession>;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a JSON array of conversations or of chat messages")
    }

    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
        let Some(first) = seq.next_element::<Value>()? else {
            if self.detecting {
                return Err(serde::de::Error::custom("an empty array"));
            }
            return Ok(Some(Converter::new("").finish(self.name)));
        };
        if self.detecting && super::detect::array_format(std::slice::from_ref(&first)).is_none() {
            return Err(serde::de::Error::custom("not a Chat Completions array"));
        }
        let tau = first.as_object().is_some_and(|o| o.contains_key("traj"));
        if !tau {
            let mut c = Converter::new("");
            c.push(first, self.out);
            while let Some(item) = seq.next_element::<Value>()? {
                c.push(item, self.out);
            }
            return Ok(Some(c.finish(self.name)));
        }
        let mut i = 0;
        let mut next = Some(first);
        while let Some(item) = next {
            conversation(i, &item, self.out);
            i += 1;
            next = seq.next_element::<Value>()?;
        }
        Ok(None)
    }
}

/// One τ-bench element (`{task_id, trial, traj}`) as a session, or a problem.
fn conversation(i: usize, item: &Value, out: &mut Import) {
    let Some(o) = item.as_object() else {
        out.problems.push(LineProblem {
            line: 0,
            message: format!("element {i}: expected an object"),
        });
        return;
    };
    let Some(traj) = o.get("traj").and_then(Value::as_array) else {
        out.problems.push(LineProblem {
            line: 0,
            message: format!("element {i}: no `traj` array"),
        });
        return;
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
    let mut c = Converter::new(where_);
    for m in msgs {
        c.push(m.clone(), out);
    }
    c.finish(name)
}

/// A chat message list converted one message at a time (see [`convert`]), so a large array
/// can be read as it is parsed, each message's JSON dropped once converted.
pub(super) struct Converter<'w> {
    where_: &'w str,
    index: usize,
    system_prompt: Option<String>,
    messages: Vec<Message>,
    tool_names: HashMap<String, String>,
}

impl<'w> Converter<'w> {
    pub(super) fn new(where_: &'w str) -> Self {
        Converter {
            where_,
            index: 0,
            system_prompt: None,
            messages: Vec::new(),
            tool_names: HashMap::new(),
        }
    }

    /// The session of the messages pushed so far.
    pub(super) fn finish(self, name: String) -> ImportedSession {
        ImportedSession {
            name,
            system_prompt: self.system_prompt,
            messages: self.messages,
        }
    }

    /// Converts the next message of the list.
    pub(super) fn push(&mut self, m: Value, out: &mut Import) {
        let (i, where_) = (self.index, self.where_);
        self.index += 1;
        let Value::Object(mut extra) = m else {
            out.problems.push(LineProblem {
                line: 0,
                message: format!("{where_}message {i}: expected an object"),
            });
            return;
        };
        let messages = &mut self.messages;
        let tool_names = &mut self.tool_names;
        let role = match extra.remove("role") {
            Some(Value::String(r)) => r,
            _ => {
                out.problems.push(LineProblem {
                    line: 0,
                    message: format!("{where_}message {i}: no role"),
                });
                return;
            }
        };
        let content = extra.remove("content").unwrap_or(Value::Null);
        match role.as_str() {
            "system" if self.system_prompt.is_none() => {
                self.system_prompt = Some(Content::Blocks(blocks(content)).joined_text());
            }
            "system" | "developer" => {
                messages.push(Message::new(MessageBody::Custom(CustomMessage {
                    custom_type: role.clone(),
                    content: plain_content(content),
                    exclude_from_context: false,
                    extra: tight(extra),
                })))
            }
            "user" => messages.push(Message::new(MessageBody::User(UserMessage {
                content: plain_content(content),
                extra: tight(extra),
            }))),
            "assistant" => {
                let mut content_blocks = blocks(content);
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
                // Pushing the calls left room for more blocks; the message keeps its blocks
                // for the whole replay, so without the room.
                content_blocks.shrink_to_fit();
                messages.push(Message::new(MessageBody::Assistant(AssistantMessage {
                    stop_reason: Some(inferred_stop_reason(&content_blocks)),
                    content: content_blocks,
                    extra: tight(extra),
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
                let extra = tight(extra);
                let mut text = Some(Content::Blocks(blocks(content)));
                for id in &ids {
                    let content = match text.take() {
                        Some(text) => text,
                        None => Content::Blocks(vec![ContentBlock::text(format!(
                            "(output reported with {})",
                            ids[0]
                        ))]),
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
    tool_call(id, name, arguments, tight(call))
}

/// `map` without the room its removed fields took: an object's map keeps its capacity when
/// fields are taken out, and a 200,000-message import would hold that room for every message
/// (tens of MB of empty maps) for as long as the messages live.
fn tight(map: Map<String, Value>) -> Extra {
    if map.is_empty() {
        return Extra::new();
    }
    let mut out = Map::with_capacity(map.len());
    out.extend(map);
    Extra::from(out)
}

/// Content for user-side messages: a string stays a string.
fn plain_content(v: Value) -> Content {
    match v {
        Value::String(s) => Content::Text(s),
        other => Content::Blocks(blocks(other)),
    }
}

/// Chat content (string, null, or parts) as blocks; non-text parts are kept verbatim.
fn blocks(v: Value) -> Vec<ContentBlock> {
    match v {
        Value::String(s) => vec![ContentBlock::text(s)],
        Value::Array(parts) => parts
            .into_iter()
            .map(|p| match p {
                Value::Object(mut extra) if str_field(&extra, "type") == Some("text") => {
                    extra.remove("type");
                    let text = match extra.remove("text") {
                        Some(Value::String(s)) => s,
                        _ => String::new(),
                    };
                    let extra = tight(extra);
                    ContentBlock::Text(TextBlock { text, extra })
                }
                Value::Object(o) => ContentBlock::Other(o.into()),
                other => ContentBlock::text(other.as_str().unwrap_or_default()),
            })
            .collect(),
        Value::Null => Vec::new(),
        other => vec![ContentBlock::text(other.to_string())],
    }
}

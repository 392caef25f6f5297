//! The transcript's message model: OpenClaw's `AgentMessage` JSON shape.
//!
//! The host owns every message. Each stored message carries a stable entry `id`
//! assigned by the transcript store; fields the host does not know are kept in
//! `extra` maps and written back unchanged, so a round trip never drops data.
//!
//! ```
//! use ctxhost::contract::message::{Message, Role};
//! let m: Message = serde_json::from_str(
//!     r#"{"id":"00000001","role":"user","content":"hi","timestamp":1}"#).unwrap();
//! assert_eq!(m.role(), Role::User);
//! assert_eq!(serde_json::to_value(&m).unwrap()["timestamp"], 1);
//! ```

use serde::de::Error as _;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::{Map, Value};

/// Fields a known type does not model, kept so that nothing is lost on a round trip: a JSON
/// object's unknown keys, in their order. Almost every message and block has none, so an empty
/// set is one null pointer (8 bytes in the struct, no allocation) instead of a map's 72 bytes:
/// at 200,000 messages that is tens of megabytes. It reads as a [`Map`] (`Deref`); writing
/// through it (`DerefMut`) makes the map when there is none.
#[derive(Clone, Default)]
pub struct Extra(Option<Box<Map<String, Value>>>);

/// The map an empty [`Extra`] reads as.
static NO_FIELDS: std::sync::LazyLock<Map<String, Value>> = std::sync::LazyLock::new(Map::new);

impl Extra {
    /// No fields (no allocation).
    pub const fn new() -> Self {
        Extra(None)
    }

    /// The fields as an owned map (empty when there are none).
    pub fn into_map(self) -> Map<String, Value> {
        self.0.map(|m| *m).unwrap_or_default()
    }
}

impl From<Map<String, Value>> for Extra {
    /// Keeps `map`'s keys in their order; an empty map is held as none.
    fn from(map: Map<String, Value>) -> Self {
        if map.is_empty() {
            Extra(None)
        } else {
            Extra(Some(Box::new(map)))
        }
    }
}

impl std::ops::Deref for Extra {
    type Target = Map<String, Value>;

    fn deref(&self) -> &Map<String, Value> {
        self.0.as_deref().unwrap_or(&NO_FIELDS)
    }
}

impl std::ops::DerefMut for Extra {
    fn deref_mut(&mut self) -> &mut Map<String, Value> {
        self.0.get_or_insert_with(Box::default)
    }
}

impl PartialEq for Extra {
    /// Equal when they hold the same fields in the same order (an empty map equals none).
    fn eq(&self, other: &Self) -> bool {
        **self == **other
    }
}

impl std::fmt::Debug for Extra {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Debug::fmt(&**self, f)
    }
}

impl Serialize for Extra {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        (**self).serialize(s)
    }
}

impl<'de> Deserialize<'de> for Extra {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        Map::deserialize(d).map(Extra::from)
    }
}

/// The text that introduces a compaction summary when it is sent to a model (contract §1).
pub const COMPACTION_SUMMARY_PREFIX: &str =
    "The conversation history before this point was compacted into the following summary:";

/// One message of a session, with its host-assigned transcript entry id.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Message {
    /// Stable transcript entry id; empty only for messages an engine made up in `assemble`.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub id: String,
    /// The role-specific payload.
    #[serde(flatten)]
    pub body: MessageBody,
}

/// The role-tagged payload of a message, as OpenClaw writes it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "role", rename_all = "camelCase")]
pub enum MessageBody {
    /// A person's input.
    User(UserMessage),
    /// A model's reply: text, thinking and tool calls.
    Assistant(AssistantMessage),
    /// The answer to one tool call.
    ToolResult(ToolResultMessage),
    /// A summary that stands for everything before `firstKeptEntryId`.
    CompactionSummary(CompactionSummaryMessage),
    /// A summary of an abandoned branch.
    BranchSummary(BranchSummaryMessage),
    /// Anything an extension adds (bash executions, hook output, ...).
    Custom(CustomMessage),
}

/// The role of a message, for cheap matching.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum Role {
    /// `user`
    User,
    /// `assistant`
    Assistant,
    /// `toolResult`
    ToolResult,
    /// `compactionSummary`
    CompactionSummary,
    /// `branchSummary`
    BranchSummary,
    /// `custom`
    Custom,
}

impl Role {
    /// The wire name, as scripts see it.
    pub fn as_str(self) -> &'static str {
        match self {
            Role::User => "user",
            Role::Assistant => "assistant",
            Role::ToolResult => "toolResult",
            Role::CompactionSummary => "compactionSummary",
            Role::BranchSummary => "branchSummary",
            Role::Custom => "custom",
        }
    }
}

/// A user message.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct UserMessage {
    /// A plain string or `text` / `image` blocks.
    pub content: Content,
    /// Unmodelled fields (`timestamp`, ...).
    #[serde(flatten)]
    pub extra: Extra,
}

/// An assistant message.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AssistantMessage {
    /// `text`, `thinking` and `toolCall` blocks.
    #[serde(default)]
    pub content: Vec<ContentBlock>,
    /// Why the model stopped (`stop`, `toolUse`, `aborted`, `error`, `length`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stop_reason: Option<String>,
    /// Unmodelled fields (`model`, `provider`, `usage`, `timestamp`, ...).
    #[serde(flatten)]
    pub extra: Extra,
}

/// The result of one tool call.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ToolResultMessage {
    /// The `id` of the `toolCall` block this answers.
    pub tool_call_id: String,
    /// The tool's name, when the source recorded it.
    #[serde(default)]
    pub tool_name: String,
    /// `text` / `image` blocks (a plain string is accepted on input).
    pub content: Content,
    /// Whether the tool reported a failure.
    #[serde(default)]
    pub is_error: bool,
    /// Unmodelled fields (`details`, `timestamp`, ...).
    #[serde(flatten)]
    pub extra: Extra,
}

/// A compaction summary standing for everything before `first_kept_entry_id`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CompactionSummaryMessage {
    /// The summary text.
    pub summary: String,
    /// Context tokens before the compaction.
    #[serde(default)]
    pub tokens_before: u64,
    /// Context tokens right after it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tokens_after: Option<u64>,
    /// The first entry the compaction kept verbatim.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub first_kept_entry_id: Option<String>,
    /// Unmodelled fields (`details`, `timestamp`, ...).
    #[serde(flatten)]
    pub extra: Extra,
}

/// A summary of a branch the conversation left.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct BranchSummaryMessage {
    /// The summary text.
    pub summary: String,
    /// The entry the branch started from.
    #[serde(default)]
    pub from_id: String,
    /// Unmodelled fields.
    #[serde(flatten)]
    pub extra: Extra,
}

/// An extension's message.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CustomMessage {
    /// What kind of custom message this is (`bashExecution`, ...).
    pub custom_type: String,
    /// A plain string or blocks.
    #[serde(default = "Content::empty")]
    pub content: Content,
    /// When true the message is stored but never sent to a model.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub exclude_from_context: bool,
    /// Unmodelled fields.
    #[serde(flatten)]
    pub extra: Extra,
}

/// Message content: a plain string or a list of blocks.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Content {
    /// A plain string.
    Text(String),
    /// Typed blocks.
    Blocks(Vec<ContentBlock>),
}

impl Content {
    /// Empty content, for optional fields.
    pub fn empty() -> Self {
        Content::Text(String::new())
    }

    /// The blocks, with a plain string seen as one text block.
    pub fn blocks(&self) -> std::borrow::Cow<'_, [ContentBlock]> {
        match self {
            Content::Text(t) => std::borrow::Cow::Owned(vec![ContentBlock::text(t.clone())]),
            Content::Blocks(b) => std::borrow::Cow::Borrowed(b),
        }
    }

    /// All text of the content joined by newlines (images and other blocks left out).
    pub fn joined_text(&self) -> String {
        match self {
            Content::Text(t) => t.clone(),
            Content::Blocks(blocks) => join_block_text(blocks),
        }
    }
}

fn join_block_text(blocks: &[ContentBlock]) -> String {
    let mut out = String::new();
    for b in blocks {
        if let ContentBlock::Text(t) = b {
            if !out.is_empty() {
                out.push('\n');
            }
            out.push_str(&t.text);
        }
    }
    out
}

/// One content block. Blocks of a type the host does not know are kept as raw JSON.
#[derive(Clone, Debug, PartialEq)]
pub enum ContentBlock {
    /// `{"type":"text","text":..}`
    Text(TextBlock),
    /// `{"type":"thinking","thinking":..}`
    Thinking(ThinkingBlock),
    /// `{"type":"image","data":..,"mimeType":..}`
    Image(ImageBlock),
    /// `{"type":"toolCall","id":..,"name":..,"arguments":{..}}`; boxed, so that every other
    /// block (a text block is 32 bytes) does not take a tool call's size (136).
    ToolCall(Box<ToolCallBlock>),
    /// Any other block, kept verbatim (it must still be a JSON object).
    Other(Extra),
}

impl ContentBlock {
    /// A text block.
    pub fn text(text: impl Into<String>) -> Self {
        ContentBlock::Text(TextBlock {
            text: text.into(),
            extra: Extra::new(),
        })
    }
}

/// A text block.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TextBlock {
    /// The text.
    pub text: String,
    /// Unmodelled fields.
    #[serde(flatten)]
    pub extra: Extra,
}

/// A thinking block.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ThinkingBlock {
    /// The model's reasoning text.
    #[serde(default)]
    pub thinking: String,
    /// Unmodelled fields (`signature`, ...).
    #[serde(flatten)]
    pub extra: Extra,
}

/// An image block.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ImageBlock {
    /// Base64 data (may be empty when the source left it out).
    #[serde(default)]
    pub data: String,
    /// The media type.
    #[serde(default)]
    pub mime_type: String,
    /// Unmodelled fields.
    #[serde(flatten)]
    pub extra: Extra,
}

/// A tool call inside an assistant message.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ToolCallBlock {
    /// The call id that the matching `toolResult` names.
    pub id: String,
    /// The tool's name.
    pub name: String,
    /// The arguments object.
    #[serde(default)]
    pub arguments: Value,
    /// Unmodelled fields.
    #[serde(flatten)]
    pub extra: Extra,
}

#[derive(Serialize)]
#[serde(tag = "type", rename_all = "camelCase")]
enum TaggedRef<'a> {
    Text(&'a TextBlock),
    Thinking(&'a ThinkingBlock),
    Image(&'a ImageBlock),
    ToolCall(&'a ToolCallBlock),
}

#[derive(Deserialize)]
#[serde(tag = "type", rename_all = "camelCase")]
enum Tagged {
    Text(TextBlock),
    Thinking(ThinkingBlock),
    Image(ImageBlock),
    ToolCall(ToolCallBlock),
}

impl Serialize for ContentBlock {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            ContentBlock::Text(b) => TaggedRef::Text(b).serialize(s),
            ContentBlock::Thinking(b) => TaggedRef::Thinking(b).serialize(s),
            ContentBlock::Image(b) => TaggedRef::Image(b).serialize(s),
            ContentBlock::ToolCall(b) => TaggedRef::ToolCall(b).serialize(s),
            ContentBlock::Other(m) => m.serialize(s),
        }
    }
}

impl<'de> Deserialize<'de> for ContentBlock {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let map = Map::<String, Value>::deserialize(d)?;
        let known = matches!(
            map.get("type").and_then(Value::as_str),
            Some("text" | "thinking" | "image" | "toolCall")
        );
        if !known {
            return Ok(ContentBlock::Other(Extra::from(map)));
        }
        let tagged = Tagged::deserialize(Value::Object(map)).map_err(D::Error::custom)?;
        Ok(match tagged {
            Tagged::Text(b) => ContentBlock::Text(b),
            Tagged::Thinking(b) => ContentBlock::Thinking(b),
            Tagged::Image(b) => ContentBlock::Image(b),
            Tagged::ToolCall(b) => ContentBlock::ToolCall(Box::new(b)),
        })
    }
}

impl Message {
    /// A message with the given body and no id yet (the store assigns one).
    pub fn new(body: MessageBody) -> Self {
        Message {
            id: String::new(),
            body,
        }
    }

    /// A plain-text user message.
    pub fn user(text: impl Into<String>) -> Self {
        Message::new(MessageBody::User(UserMessage {
            content: Content::Text(text.into()),
            extra: Extra::new(),
        }))
    }

    /// A plain-text assistant message.
    pub fn assistant(text: impl Into<String>) -> Self {
        Message::new(MessageBody::Assistant(AssistantMessage {
            content: vec![ContentBlock::text(text)],
            stop_reason: Some("stop".into()),
            extra: Extra::new(),
        }))
    }

    /// The role.
    pub fn role(&self) -> Role {
        match &self.body {
            MessageBody::User(_) => Role::User,
            MessageBody::Assistant(_) => Role::Assistant,
            MessageBody::ToolResult(_) => Role::ToolResult,
            MessageBody::CompactionSummary(_) => Role::CompactionSummary,
            MessageBody::BranchSummary(_) => Role::BranchSummary,
            MessageBody::Custom(_) => Role::Custom,
        }
    }

    /// The tool calls this message makes (only assistant messages make any).
    pub fn tool_calls(&self) -> impl Iterator<Item = &ToolCallBlock> {
        let blocks: &[ContentBlock] = match &self.body {
            MessageBody::Assistant(a) => &a.content,
            _ => &[],
        };
        blocks.iter().filter_map(|b| match b {
            ContentBlock::ToolCall(c) => Some(&**c),
            _ => None,
        })
    }

    /// The call id a tool result answers.
    pub fn tool_call_id(&self) -> Option<&str> {
        match &self.body {
            MessageBody::ToolResult(r) => Some(&r.tool_call_id),
            _ => None,
        }
    }

    /// Whether this message is stored but never sent to a model.
    pub fn excluded_from_context(&self) -> bool {
        matches!(&self.body, MessageBody::Custom(c) if c.exclude_from_context)
    }

    /// The plain text a reader would see: text blocks, summaries and custom content.
    /// Thinking, images and tool calls are left out.
    pub fn text(&self) -> String {
        match &self.body {
            MessageBody::User(u) => u.content.joined_text(),
            MessageBody::Assistant(a) => join_block_text(&a.content),
            MessageBody::ToolResult(r) => r.content.joined_text(),
            MessageBody::CompactionSummary(s) => s.summary.clone(),
            MessageBody::BranchSummary(s) => s.summary.clone(),
            MessageBody::Custom(c) => c.content.joined_text(),
        }
    }

    /// Whether this is a real user turn start: a user message (tool results are their own role).
    pub fn starts_turn(&self) -> bool {
        self.role() == Role::User
    }

    /// The text a model receives for the summary roles, which are sent as user messages.
    pub fn model_text_for_summary(&self) -> Option<String> {
        match &self.body {
            MessageBody::CompactionSummary(s) => Some(format!(
                "{COMPACTION_SUMMARY_PREFIX}\n<summary>\n{}\n</summary>",
                s.summary
            )),
            MessageBody::BranchSummary(s) => Some(format!(
                "The following is a summary of a branch that this conversation came back from:\n<summary>\n{}\n</summary>",
                s.summary
            )),
            _ => None,
        }
    }
}

#[cfg(test)]
#[path = "message_tests.rs"]
mod tests;

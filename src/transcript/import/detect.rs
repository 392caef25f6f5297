//! Format detection by content: the top-level JSON shape, or the first conclusive JSONL line.

use serde::de::IgnoredAny;
use serde_json::{Map, Value};

use super::Format;

/// How many non-blank JSONL lines detection looks at before giving up.
const MAX_SNIFF_LINES: usize = 64;

/// Detects a transcript's format from its bytes, or `None` when no format matches.
pub fn detect_format(bytes: &[u8]) -> Option<Format> {
    let bytes = bytes.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(bytes);
    let start = bytes.iter().position(|b| !b.is_ascii_whitespace())?;
    if bytes[start] == b'[' || bytes[start] == b'{' {
        // A whole-file JSON document. A one-line JSONL file also parses as one; it falls
        // through to the line rules unless it has a document shape.
        match shape(bytes) {
            Some(Shape::Array(first)) => return array_format(first.as_slice()),
            Some(Shape::Object {
                history_array: true,
            }) => return Some(Format::SweAgent),
            _ => {}
        }
    }
    bytes
        .split(|&b| b == b'\n')
        .filter(|l| !l.iter().all(u8::is_ascii_whitespace))
        .take(MAX_SNIFF_LINES)
        .filter_map(|l| match serde_json::from_slice::<Value>(l) {
            Ok(Value::Object(m)) => Some(m),
            _ => None,
        })
        .find_map(|m| line_format(&m))
}

/// What detection needs of a whole-file JSON document: an array's first element, or whether an
/// object's `history` (the last, should the key repeat) is an array.
enum Shape {
    Array(Option<Value>),
    Object { history_array: bool },
}

/// The shape of `bytes` as one JSON document, `None` when they are not one. The document is
/// checked whole but only its first element (or `history`'s kind) is kept: detecting a 120 MB
/// array makes no copy of it.
fn shape(bytes: &[u8]) -> Option<Shape> {
    use serde::de::Deserializer as _;
    let mut de = serde_json::Deserializer::from_slice(bytes);
    let shape = de.deserialize_any(ShapeOf).ok()?;
    de.end().ok()?;
    shape
}

/// Visits a whole document for its [`Shape`] (`None`: neither an array nor an object).
struct ShapeOf;

impl<'de> serde::de::Visitor<'de> for ShapeOf {
    type Value = Option<Shape>;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a JSON document")
    }

    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
        let first = seq.next_element::<Value>()?;
        while seq.next_element::<IgnoredAny>()?.is_some() {}
        Ok(Some(Shape::Array(first)))
    }

    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut history_array = false;
        while let Some(key) = map.next_key::<std::borrow::Cow<'de, str>>()? {
            if key == "history" {
                history_array = map.next_value::<IsArray>()?.0;
            } else {
                map.next_value::<IgnoredAny>()?;
            }
        }
        Ok(Some(Shape::Object { history_array }))
    }

    fn visit_bool<E>(self, _: bool) -> Result<Self::Value, E> {
        Ok(None)
    }
    fn visit_i64<E>(self, _: i64) -> Result<Self::Value, E> {
        Ok(None)
    }
    fn visit_u64<E>(self, _: u64) -> Result<Self::Value, E> {
        Ok(None)
    }
    fn visit_f64<E>(self, _: f64) -> Result<Self::Value, E> {
        Ok(None)
    }
    fn visit_str<E>(self, _: &str) -> Result<Self::Value, E> {
        Ok(None)
    }
    fn visit_unit<E>(self) -> Result<Self::Value, E> {
        Ok(None)
    }
}

/// Whether a JSON value is an array (its contents checked and dropped).
struct IsArray(bool);

impl<'de> serde::Deserialize<'de> for IsArray {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(Kind).map(IsArray)
    }
}

/// Visits any JSON value, answering whether it was an array.
struct Kind;

impl<'de> serde::de::Visitor<'de> for Kind {
    type Value = bool;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a JSON value")
    }
    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<bool, A::Error> {
        while seq.next_element::<IgnoredAny>()?.is_some() {}
        Ok(true)
    }
    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<bool, A::Error> {
        while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
        Ok(false)
    }
    fn visit_bool<E>(self, _: bool) -> Result<bool, E> {
        Ok(false)
    }
    fn visit_i64<E>(self, _: i64) -> Result<bool, E> {
        Ok(false)
    }
    fn visit_u64<E>(self, _: u64) -> Result<bool, E> {
        Ok(false)
    }
    fn visit_f64<E>(self, _: f64) -> Result<bool, E> {
        Ok(false)
    }
    fn visit_str<E>(self, _: &str) -> Result<bool, E> {
        Ok(false)
    }
    fn visit_unit<E>(self) -> Result<bool, E> {
        Ok(false)
    }
}

/// τ-bench arrays hold `{task_id, trial, traj}`; a plain chat array holds `{role, ...}`.
pub(super) fn array_format(items: &[Value]) -> Option<Format> {
    let first = items.first()?.as_object()?;
    if first.get("traj").is_some_and(Value::is_array)
        || first.get("role").is_some_and(Value::is_string)
    {
        Some(Format::ChatCompletions)
    } else {
        None
    }
}

/// The format one JSONL line proves, if any.
fn line_format(m: &Map<String, Value>) -> Option<Format> {
    let kind = m.get("type").and_then(Value::as_str)?;
    let has = |k: &str| m.contains_key(k);
    match kind {
        "session" if has("id") || has("version") => Some(Format::PiSession),
        "session_meta" | "response_item" | "turn_context" | "event_msg" | "compacted"
            if m.get("payload").is_some_and(Value::is_object) =>
        {
            Some(Format::CodexRollout)
        }
        "user"
        | "assistant"
        | "system"
        | "summary"
        | "file-history-snapshot"
        | "progress"
        | "queue-operation"
            if has("uuid") || has("sessionId") || has("leafUuid") || has("messageId") =>
        {
            Some(Format::ClaudeCode)
        }
        "queue-operation" if has("operation") => Some(Format::ClaudeCode),
        // A pi file whose header was lost: message entries with an `AgentMessage` inside.
        "message"
        | "compaction"
        | "model_change"
        | "thinking_level_change"
        | "branch_summary"
        | "custom_message" => Some(Format::PiSession),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn detects_by_content() {
        let pi = b"{\"type\":\"session\",\"version\":3,\"id\":\"x\"}\n";
        assert_eq!(detect_format(pi), Some(Format::PiSession));
        let claude = b"garbage\n{\"type\":\"file-history-snapshot\",\"messageId\":\"m\"}\n";
        assert_eq!(detect_format(claude), Some(Format::ClaudeCode));
        let codex =
            b"{\"type\":\"session_meta\",\"payload\":{}}\n{\"type\":\"event_msg\",\"payload\":{}}";
        assert_eq!(detect_format(codex), Some(Format::CodexRollout));
        assert_eq!(
            detect_format(b"[{\"task_id\":1,\"trial\":0,\"traj\":[]}]"),
            Some(Format::ChatCompletions)
        );
        assert_eq!(
            detect_format(b" [{\"role\":\"user\",\"content\":\"hi\"}]"),
            Some(Format::ChatCompletions)
        );
        assert_eq!(
            detect_format(b"{\"history\":[],\"trajectory\":[]}"),
            Some(Format::SweAgent)
        );
        assert_eq!(detect_format(b"{\"hello\":1}\n"), None);
        assert_eq!(detect_format(b"[1,2]"), None);
        assert_eq!(detect_format(b""), None);
        assert_eq!(detect_format(b"# markdown\n"), None);
    }
}

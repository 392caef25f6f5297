//! Format detection by content: the top-level JSON shape, or the first conclusive JSONL line.

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
        if let Ok(doc) = serde_json::from_slice::<Value>(bytes) {
            match &doc {
                Value::Array(items) => return array_format(items),
                Value::Object(m) if m.get("history").is_some_and(Value::is_array) => {
                    return Some(Format::SweAgent);
                }
                _ => {}
            }
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

/// τ-bench arrays hold `{task_id, trial, traj}`; a plain chat array holds `{role, ...}`.
fn array_format(items: &[Value]) -> Option<Format> {
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

//! What a conversation left on disk: the client messages its transcript stores, and which
//! window a kill hit (between a transcript append and the state write that accounts for it).

use super::*;

/// The identity of a message the client sent: its text blocks and tool call ids (every one
/// the client sends is different).
pub(crate) fn key_of(m: &Value) -> String {
    let mut out = String::new();
    match &m["content"] {
        Value::String(s) => out.push_str(s),
        Value::Array(blocks) => {
            for b in blocks {
                if let Some(t) = b["text"].as_str() {
                    out.push_str(t);
                }
                if b["type"] == "toolCall" {
                    out.push_str("toolCall ");
                    out.push_str(b["id"].as_str().unwrap_or_default());
                }
            }
        }
        _ => {}
    }
    out
}

pub(crate) fn is_summary(m: &Value) -> bool {
    m["role"] == "compactionSummary"
}

/// The client messages a transcript stores, in order (summaries aside).
pub(super) fn stored(transcript: &Path) -> Vec<String> {
    std::fs::read_to_string(transcript)
        .unwrap()
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|e| e["type"] == "message" && !is_summary(&e["message"]))
        .map(|e| key_of(&e["message"]))
        .collect()
}

/// The transcript of the conversation `session_id` (its header names it).
pub(super) fn transcript_of(state: &Path, session_id: &str) -> PathBuf {
    let dirs: Vec<PathBuf> = std::fs::read_dir(state.join("sessions"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    dirs.iter()
        .map(|d| d.join("transcript.jsonl"))
        .find(|t| {
            std::fs::read_to_string(t)
                .ok()
                .and_then(|s| {
                    serde_json::from_str::<Value>(s.lines().next().unwrap_or_default()).ok()
                })
                .is_some_and(|h| h["id"] == session_id)
        })
        .unwrap_or_else(|| panic!("no transcript names {session_id} in {dirs:?}"))
}

/// What a kill left of the session `session_id` on disk: whether it came between a transcript
/// append and the commit that accounts for it (the windows a retry must not store twice; the
/// store sets such messages aside when the session reopens).
pub(super) fn left_behind(state: &Path, session_id: &str) -> &'static str {
    let Ok(dirs) = std::fs::read_dir(state.join("sessions")) else {
        return "no session yet";
    };
    let Some(transcript) = dirs
        .filter_map(|e| e.ok().map(|e| e.path().join("transcript.jsonl")))
        .find(|t| {
            let text = std::fs::read_to_string(t).unwrap_or_default();
            serde_json::from_str::<Value>(text.lines().next().unwrap_or_default())
                .is_ok_and(|h| h["id"] == session_id)
                || (text.is_empty()
                    && t.parent()
                        .and_then(|d| d.file_name())
                        .is_some_and(|n| n.to_string_lossy().starts_with(session_id)))
        })
    else {
        return "no session yet";
    };
    let text = std::fs::read_to_string(&transcript).unwrap_or_default();
    if text.is_empty() {
        return "an empty transcript";
    }
    let messages: Vec<Value> = text
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|e| e["type"] == "message" || e["type"] == "compaction")
        .collect();
    let torn = !text.ends_with('\n');
    // As the next open reads it: the commit journal's newest record when the state file is
    // behind it (the state file catches up only when a session closes).
    let saved = ctxhost::testing::committed_document(&transcript);
    // The commit mark's count (an earlier ctxhost's state said `stored`).
    let accounted = match &saved {
        None => 0,
        Some(v) => v["commit"]["entries"]
            .as_u64()
            .or(v["stored"].as_u64())
            .unwrap_or(0) as usize,
    };
    if torn {
        "a torn transcript line"
    } else if messages.len() <= accounted {
        "transcript and state agree"
    } else if saved.is_none() {
        "messages stored before the first state save"
    } else if messages[accounted..]
        .iter()
        .any(|e| e["type"] == "compaction")
    {
        "a summary stored after the last state save"
    } else {
        "messages stored after the last state save"
    }
}

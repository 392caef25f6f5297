//! pi-coding-agent / OpenClaw session JSONL (v1 and v3), including ctxhost's own store.
//!
//! Message entries are imported as they are (`bashExecution` becomes a `custom` message, see
//! [`pi_message_body`]). The source's `compaction` entries are dropped and counted. When v3
//! entries form a tree, only the active path (from the last entry back to the root) is imported.

use std::collections::{HashMap, HashSet};

use serde_json::Value;

use super::{Import, ImportedSession, str_field};
use crate::contract::message::Message;
use crate::transcript::store::{entry_to_body, pi_message_body};
use crate::transcript::{JsonLine, LineProblem};

/// Imports one pi session file.
pub(super) fn import(name: String, lines: Vec<JsonLine>, out: &mut Import) -> ImportedSession {
    let entries: Vec<JsonLine> = lines
        .into_iter()
        .filter(|l| str_field(&l.value, "type") != Some("session"))
        .collect();
    let on_path = active_path(&entries, &mut out.problems);
    let mut messages = Vec::new();
    let mut off_path = 0usize;
    for JsonLine { line, value } in entries {
        if on_path
            .path
            .as_ref()
            .is_some_and(|set| !set.contains(&line))
        {
            off_path += 1;
            continue;
        }
        let kind = str_field(&value, "type").unwrap_or_default();
        if kind == "compaction" {
            out.dropped_compactions += 1;
            continue;
        }
        let body = if kind.is_empty() && value.contains_key("role") {
            // A bare AgentMessage line (some exporters write messages without an envelope).
            pi_message_body(value).map(Some)
        } else {
            entry_to_body(value)
        };
        match body {
            Ok(Some(body)) => messages.push(Message::new(body)),
            Ok(None) => {}
            Err(message) => out.problems.push(LineProblem { line, message }),
        }
    }
    if on_path.damaged && off_path > 0 {
        out.problems.push(LineProblem {
            line: 0,
            message: format!(
                "{off_path} entries are not on the active branch and were skipped (the entry ids or parentIds above are damaged)"
            ),
        });
    }
    ImportedSession {
        name,
        system_prompt: None,
        messages,
    }
}

/// The active branch of a v3 file, and whether damaged ids shaped it.
struct ActivePath {
    /// The lines on the active branch; `None` when every entry is imported.
    path: Option<HashSet<usize>>,
    /// Duplicate ids or a `parentId` cycle were found (reported as problems).
    damaged: bool,
}

/// The lines on the active branch, or `None` when the entries do not branch (v1, or a linear
/// v3 file), in which case every entry is imported. Duplicate ids and `parentId` cycles are
/// reported in `problems`: they decide which entries the branch skips.
fn active_path(entries: &[JsonLine], problems: &mut Vec<LineProblem>) -> ActivePath {
    let mut by_id: HashMap<&str, (usize, Option<&str>)> = HashMap::new();
    let mut branches = false;
    let mut damaged = false;
    let mut prev: Option<&str> = None;
    let mut last = None;
    for e in entries {
        let Some(id) = str_field(&e.value, "id") else {
            continue;
        };
        let parent = e.value.get("parentId").and_then(Value::as_str);
        if parent != prev {
            branches = true;
        }
        if let Some((earlier, _)) = by_id.insert(id, (e.line, parent)) {
            damaged = true;
            problems.push(LineProblem {
                line: e.line,
                message: format!(
                    "duplicate entry id \"{id}\" (first on line {earlier}); the later entry wins"
                ),
            });
        }
        prev = Some(id);
        last = Some(id);
    }
    if !branches {
        return ActivePath {
            path: None,
            damaged,
        };
    }
    let mut path = HashSet::new();
    let mut cursor = last;
    while let Some(id) = cursor {
        let Some(&(line, parent)) = by_id.get(id) else {
            break;
        };
        if !path.insert(line) {
            damaged = true;
            problems.push(LineProblem {
                line,
                message: format!(
                    "parentId cycle through entry \"{id}\"; the active branch stops here"
                ),
            });
            break;
        }
        cursor = parent;
    }
    // Entries without ids (none in a well-formed v3 file) stay in.
    for e in entries {
        if !e.value.contains_key("id") {
            path.insert(e.line);
        }
    }
    ActivePath {
        path: Some(path),
        damaged,
    }
}

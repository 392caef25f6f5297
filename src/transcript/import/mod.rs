//! Importers for sessions recorded by other agents, with format detection by content.
//!
//! Every importer produces [`ImportedSession`]s of [`Message`]s without ids (the
//! [`TranscriptStore`](super::TranscriptStore) assigns them on append). Malformed JSONL lines are
//! reported in [`Import::problems`] and skipped; everything else is imported. Compactions
//! recorded by the source agent are dropped and counted: ctxhost replays with its own.
//!
//! Mapping choices common to all formats: tool results always carry block content; an
//! assistant message whose source recorded no stop reason gets `toolUse` when it calls tools and
//! `stop` otherwise; source fields without a place in the model stay in `extra`.

mod chat;
mod claude;
mod codex;
mod detect;
mod pi;
mod swe;

use std::path::Path;

use serde_json::{Map, Value};

use super::LineProblem;
use crate::contract::message::{ContentBlock, Extra, Message, ToolCallBlock};
use crate::error::{Error, Result};

pub use detect::detect_format;

/// A transcript format ctxhost can import.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Format {
    /// pi-coding-agent / OpenClaw session JSONL (v1 or v3), including ctxhost's own store.
    PiSession,
    /// Claude Code session JSONL (`~/.claude/projects/...`).
    ClaudeCode,
    /// OpenAI Codex CLI rollout JSONL.
    CodexRollout,
    /// OpenAI Chat Completions message arrays (τ-bench trajectories, or one plain array).
    ChatCompletions,
    /// SWE-agent `.traj` JSON.
    SweAgent,
}

impl Format {
    /// Every format, in the order detection reports them.
    pub const ALL: [Format; 5] = [
        Format::PiSession,
        Format::ClaudeCode,
        Format::CodexRollout,
        Format::ChatCompletions,
        Format::SweAgent,
    ];

    /// A human-readable name, for messages and the CLI.
    pub fn name(self) -> &'static str {
        match self {
            Format::PiSession => "pi session JSONL",
            Format::ClaudeCode => "Claude Code JSONL",
            Format::CodexRollout => "Codex rollout JSONL",
            Format::ChatCompletions => "OpenAI Chat Completions JSON",
            Format::SweAgent => "SWE-agent .traj",
        }
    }
}

impl std::fmt::Display for Format {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// One conversation read from a file, ready to be appended to a new store.
#[derive(Clone, Debug, PartialEq)]
pub struct ImportedSession {
    /// A display name: the file stem, or `task-<id>-trial-<n>` for τ-bench entries.
    pub name: String,
    /// The system prompt, when the source recorded one.
    pub system_prompt: Option<String>,
    /// The messages in conversation order, without ids.
    pub messages: Vec<Message>,
}

/// Everything read from one file.
#[derive(Clone, Debug, PartialEq)]
pub struct Import {
    /// The detected (or requested) format.
    pub format: Format,
    /// The conversations; most formats hold exactly one.
    pub sessions: Vec<ImportedSession>,
    /// Lines (or array elements, with line 0) that could not be read and were skipped.
    pub problems: Vec<LineProblem>,
    /// Compactions recorded by the source agent that were left out.
    pub dropped_compactions: usize,
    /// Lines kept with a repair (invalid UTF-8 replaced), with what was repaired.
    pub warnings: Vec<LineProblem>,
}

/// Reads a transcript file, detecting its format from its content.
pub fn import(path: &Path) -> Result<Import> {
    // A Chat Completions array is read as it is parsed, without the file's bytes in memory
    // beside the messages made of them; anything else (and any array that does not read
    // cleanly that way) is read whole, detected and imported as before.
    if let Some(imported) = chat::import_array_file(path, session_name(path)) {
        return Ok(imported);
    }
    let bytes = crate::transcript::read_capped(path)?;
    if bytes.iter().all(u8::is_ascii_whitespace) {
        return Err(Error::Transcript {
            path: path.to_path_buf(),
            line: 0,
            message: "the file is empty".into(),
        });
    }
    let Some(format) = detect_format(&bytes) else {
        let tried: Vec<&str> = Format::ALL.iter().map(|f| f.name()).collect();
        return Err(Error::Transcript {
            path: path.to_path_buf(),
            line: 0,
            message: format!(
                "not a recognised transcript format (tried: {})",
                tried.join(", ")
            ),
        });
    };
    import_bytes(path, &bytes, format)
}

/// Reads a transcript file as the given format, skipping detection.
pub fn import_as(path: &Path, format: Format) -> Result<Import> {
    let bytes = crate::transcript::read_capped(path)?;
    import_bytes(path, &bytes, format)
}

/// Reads transcript bytes as the given format; `path` names the sessions and errors.
pub fn import_bytes(path: &Path, bytes: &[u8], format: Format) -> Result<Import> {
    let name = session_name(path);
    let mut out = Import::empty(format);
    match format {
        Format::PiSession | Format::ClaudeCode | Format::CodexRollout => {
            let parsed = super::read_json_lines(bytes);
            out.problems = parsed.problems;
            out.warnings = parsed.warnings;
            let session = match format {
                Format::PiSession => pi::import(name, parsed.lines, &mut out),
                Format::ClaudeCode => claude::import(name, parsed.lines, &mut out),
                _ => codex::import(name, parsed.lines, &mut out),
            };
            out.sessions.push(session);
        }
        Format::ChatCompletions
            if bytes
                .strip_prefix(b"\xEF\xBB\xBF")
                .unwrap_or(bytes)
                .iter()
                .find(|b| !b.is_ascii_whitespace())
                == Some(&b'[') =>
        {
            let bytes = bytes.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(bytes);
            chat::import_array(name, bytes, &mut out).map_err(|e| Error::Transcript {
                path: path.to_path_buf(),
                line: e.line(),
                message: format!("invalid JSON for {}: {e}", format.name()),
            })?;
        }
        Format::ChatCompletions | Format::SweAgent => {
            let bytes = bytes.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(bytes);
            let doc: Value = serde_json::from_slice(bytes).map_err(|e| Error::Transcript {
                path: path.to_path_buf(),
                line: e.line(),
                message: format!("invalid JSON for {}: {e}", format.name()),
            })?;
            let result = if format == Format::SweAgent {
                swe::import(name, doc, &mut out)
            } else {
                chat::import(name, doc, &mut out)
            };
            result.map_err(|message| Error::Transcript {
                path: path.to_path_buf(),
                line: 0,
                message,
            })?;
        }
    }
    out.problems.sort_by_key(|p| p.line);
    Ok(out)
}

/// The name of a file's session: its stem (`session` when it has none).
fn session_name(path: &Path) -> String {
    path.file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_else(|| "session".to_owned())
}

impl Import {
    /// Nothing imported yet, in `format`.
    fn empty(format: Format) -> Self {
        Import {
            format,
            sessions: Vec::new(),
            problems: Vec::new(),
            dropped_compactions: 0,
            warnings: Vec::new(),
        }
    }
}

/// Parses a tool call's JSON-string arguments; keeps `{"raw": s}` when they are not JSON.
pub(crate) fn parse_arguments(s: &str) -> Value {
    match serde_json::from_str::<Value>(s) {
        Ok(v) => v,
        Err(_) => {
            let mut m = Map::new();
            m.insert("raw".into(), Value::String(s.to_owned()));
            Value::Object(m)
        }
    }
}

/// A tool-call block.
pub(crate) fn tool_call(
    id: String,
    name: String,
    arguments: Value,
    extra: impl Into<Extra>,
) -> ContentBlock {
    ContentBlock::ToolCall(Box::new(ToolCallBlock {
        id,
        name,
        arguments,
        extra: extra.into(),
    }))
}

/// `toolUse` when the blocks call a tool, else `stop`: for sources that record no stop reason.
pub(crate) fn inferred_stop_reason(blocks: &[ContentBlock]) -> String {
    if blocks
        .iter()
        .any(|b| matches!(b, ContentBlock::ToolCall(_)))
    {
        "toolUse".into()
    } else {
        "stop".into()
    }
}

/// A string field of a JSON object.
pub(crate) fn str_field<'a>(m: &'a Map<String, Value>, key: &str) -> Option<&'a str> {
    m.get(key).and_then(Value::as_str)
}

#[cfg(test)]
#[path = "tests.rs"]
mod tests;

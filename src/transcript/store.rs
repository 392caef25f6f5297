//! ctxhost's own session file: append-only JSONL in the pi/OpenClaw v3 session format.
//!
//! ```text
//! {"type":"session","version":3,"id":"<session id>","timestamp":"<ISO>","cwd":"<dir>"}
//! {"type":"message","id":"00000001","parentId":null,"timestamp":"<ISO>","message":{"role":"user",..}}
//! {"type":"compaction","id":"00000002","parentId":"00000001","timestamp":"<ISO>","summary":..,"firstKeptEntryId":..,"tokensBefore":..}
//! ```
//!
//! The store never rewrites earlier bytes. A torn or malformed line is reported as a
//! [`LineProblem`] and skipped; every other line is kept. Entries that carry no message
//! (`model_change`, `thinking_level_change`, `custom` without a role, ...) are skipped on read
//! and left in the file. pi v1 files (no entry ids) open read-only, with ids derived from the
//! 0-based line index.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde_json::{Map, Value, json};

use super::{JsonLine, LineProblem, iso_now, read_json_lines};
use crate::contract::message::{
    BranchSummaryMessage, CompactionSummaryMessage, Content, CustomMessage, Extra, Message,
    MessageBody,
};
use crate::error::{Error, Result};

/// The session format version this store writes.
pub const SESSION_VERSION: u64 = 3;

/// An open session file that messages are appended to.
#[derive(Debug)]
pub struct TranscriptStore {
    path: PathBuf,
    session_id: String,
    version: u64,
    /// `None` when the file is read-only (not a v3 file).
    file: Option<File>,
    /// The numeric value of the next entry id.
    next_id: u64,
    /// The id of the last entry in the file, the `parentId` of the next one.
    last_id: Option<String>,
    /// Messages in the file.
    len: usize,
    /// The file ends without a newline (a torn line); the next append writes one first.
    needs_newline: bool,
    /// When appended entries are forced to disk.
    durability: Durability,
    /// The header's `timestamp`: when the session was created.
    created_at: Option<String>,
}

/// When appended entries are forced to disk (`fsync`). Every mode writes each append through
/// to the OS at once, so a killed process loses nothing; they differ on power loss.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum Durability {
    /// Every append is synced before it returns (default: nothing acknowledged is lost).
    #[default]
    Entry,
    /// Synced once per turn, at its end: a power loss may lose the turn in progress.
    Turn,
    /// Never synced: for replays into a temporary directory.
    None,
}

impl TranscriptStore {
    /// Creates a new v3 session file with its header; refuses to overwrite an existing file.
    pub fn create(path: impl AsRef<Path>, session_id: &str, cwd: &str) -> Result<Self> {
        let path = path.as_ref().to_path_buf();
        let mut file = OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&path)
            .map_err(|e| Error::io("create transcript", &path, e))?;
        let created_at = iso_now();
        let header = json!({
            "type": "session",
            "version": SESSION_VERSION,
            "id": session_id,
            "timestamp": created_at,
            "cwd": cwd,
        });
        let mut line = serde_json::to_string(&header).map_err(|e| Error::Transcript {
            path: path.clone(),
            line: 1,
            message: format!("cannot encode header: {e}"),
        })?;
        line.push('\n');
        file.write_all(line.as_bytes())
            .and_then(|()| file.flush())
            .and_then(|()| file.sync_all())
            .map_err(|e| Error::io("write transcript header", &path, e))?;
        sync_parent_dir(&path);
        Ok(TranscriptStore {
            path,
            session_id: session_id.to_owned(),
            version: SESSION_VERSION,
            file: Some(file),
            next_id: 1,
            last_id: None,
            len: 0,
            needs_newline: false,
            durability: Durability::default(),
            created_at: Some(created_at),
        })
    }

    /// [`open`](Self::open), first repairing a file a crash left torn at its creation: one with
    /// no readable line and no line break (zero bytes, or part of the header: [`create`]
    /// syncs the header line before any message can follow it, so such a file never held a
    /// message) is replaced by a fresh header for `session_id`. Any other file opens as it is.
    ///
    /// [`create`]: Self::create
    pub fn open_repairing(
        path: impl AsRef<Path>,
        session_id: &str,
        cwd: &str,
    ) -> Result<(Self, Vec<Arc<Message>>, Vec<LineProblem>)> {
        let path = path.as_ref();
        let bytes = super::read_capped(path)?;
        if !bytes.contains(&b'\n') && read_json_lines(&bytes).lines.is_empty() {
            tracing::warn!(
                file = %path.display(),
                bytes = bytes.len(),
                "the transcript holds no complete line (a crash while it was created): its header is written anew"
            );
            let mut tmp = path.as_os_str().to_owned();
            tmp.push(".repair");
            let tmp = PathBuf::from(tmp);
            let _ = std::fs::remove_file(&tmp);
            drop(TranscriptStore::create(&tmp, session_id, cwd)?);
            std::fs::rename(&tmp, path).map_err(|e| Error::io("repair transcript", path, e))?;
            sync_parent_dir(path);
        }
        Self::open(path)
    }

    /// Opens a session file and reads every message entry in file order, with ids, plus the
    /// lines that could not be read. v3 files open for appending; older files read-only.
    pub fn open(path: impl AsRef<Path>) -> Result<(Self, Vec<Arc<Message>>, Vec<LineProblem>)> {
        let path = path.as_ref().to_path_buf();
        let bytes = super::read_capped(&path)?;
        let parsed = read_json_lines(&bytes);
        for w in &parsed.warnings {
            tracing::warn!(file = %path.display(), line = w.line, "{}", w.message);
        }
        let mut problems = parsed.problems;
        let mut lines = parsed.lines.into_iter();

        let header = match lines.next() {
            Some(h) if h.value.get("type").and_then(Value::as_str) == Some("session") => h,
            Some(h) => {
                return Err(Error::Transcript {
                    path,
                    line: h.line,
                    message: "expected a session header ({\"type\":\"session\",...})".into(),
                });
            }
            None => {
                return Err(Error::Transcript {
                    path,
                    line: 0,
                    message: "no session header: the file holds no readable line".into(),
                });
            }
        };
        let session_id = header
            .value
            .get("id")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned();
        let version = header
            .value
            .get("version")
            .and_then(Value::as_u64)
            .unwrap_or(1);
        let created_at = header
            .value
            .get("timestamp")
            .and_then(Value::as_str)
            .map(str::to_owned);

        let mut messages = Vec::new();
        let mut max_id: u64 = 0;
        let mut last_id = None;
        for JsonLine { line, value } in lines {
            let id = match value.get("id").and_then(Value::as_str) {
                Some(id) => id.to_owned(),
                None => line_index_id(line),
            };
            if let Ok(n) = u64::from_str_radix(&id, 16) {
                max_id = max_id.max(n);
            }
            last_id = Some(id.clone());
            match entry_to_body(value) {
                Ok(Some(body)) => messages.push(Arc::new(Message { id, body })),
                Ok(None) => {}
                Err(message) => problems.push(LineProblem { line, message }),
            }
        }
        problems.sort_by_key(|p| p.line);

        let file = if version == SESSION_VERSION {
            Some(
                OpenOptions::new()
                    .append(true)
                    .open(&path)
                    .map_err(|e| Error::io("open transcript for append", &path, e))?,
            )
        } else {
            None
        };
        let store = TranscriptStore {
            path,
            session_id,
            version,
            file,
            next_id: max_id.saturating_add(1),
            last_id,
            len: messages.len(),
            needs_newline: parsed.missing_final_newline,
            durability: Durability::default(),
            created_at,
        };
        Ok((store, messages, problems))
    }

    /// Appends messages as new entries, each with a fresh id chained to the previous entry, and
    /// writes them through to the OS (and with [`Durability::Entry`], to disk) before it returns.
    /// Returns the stored messages.
    pub fn append(&mut self, messages: Vec<Message>) -> Result<Vec<Arc<Message>>> {
        let mut next_id = self.next_id;
        let stored: Vec<Arc<Message>> = messages
            .into_iter()
            .map(|mut m| {
                m.id = format!("{next_id:08x}");
                next_id = next_id.saturating_add(1);
                Arc::new(m)
            })
            .collect();
        // Ids are consumed even if the write fails, so a partly written entry is never reused.
        let consumed = next_id;
        let written = self.write_entries(stored);
        self.next_id = self.next_id.max(consumed);
        written
    }

    /// Appends messages that were stored elsewhere, keeping their ids (`ctxhost store
    /// migrate`); an id that is not after the ones already here is refused.
    pub fn append_stored(&mut self, messages: &[Arc<Message>]) -> Result<Vec<Arc<Message>>> {
        let mut next = self.next_id;
        for m in messages {
            match u64::from_str_radix(&m.id, 16) {
                Ok(n) if n >= next => next = n.saturating_add(1),
                _ => {
                    return Err(Error::Transcript {
                        path: self.path.clone(),
                        line: 0,
                        message: format!(
                            "cannot copy message \"{}\": its id is not a hex number after {:08x}",
                            m.id,
                            next.saturating_sub(1)
                        ),
                    });
                }
            }
        }
        let written =
            self.write_entries(messages.iter().map(|m| Arc::new((**m).clone())).collect());
        self.next_id = self.next_id.max(next);
        written
    }

    /// Writes messages (ids already given) as entries chained to the previous one, through to
    /// the OS and, with [`Durability::Entry`], to disk.
    fn write_entries(&mut self, mut stored: Vec<Arc<Message>>) -> Result<Vec<Arc<Message>>> {
        if stored.is_empty() {
            return Ok(Vec::new());
        }
        let Some(file) = self.file.as_mut() else {
            return Err(Error::Transcript {
                path: self.path.clone(),
                line: 0,
                message: format!(
                    "read-only: session format version {} (only version {SESSION_VERSION} files \
                     are appended to; import it into a new store instead)",
                    self.version
                ),
            });
        };
        let mut buf = String::new();
        if self.needs_newline {
            buf.push('\n');
        }
        let mut parent = self.last_id.clone();
        for message in &mut stored {
            let message = Arc::make_mut(message);
            let timestamp = iso_now();
            let entry = message_to_entry(message, parent.as_deref(), &timestamp).map_err(|e| {
                Error::Transcript {
                    path: self.path.clone(),
                    line: 0,
                    message: format!("cannot encode message {}: {e}", message.id),
                }
            })?;
            buf.push_str(&entry);
            buf.push('\n');
            parent = Some(message.id.clone());
        }
        let written = file
            .write_all(buf.as_bytes())
            .and_then(|()| file.flush())
            .and_then(|()| match self.durability {
                Durability::Entry => file.sync_data(),
                Durability::Turn | Durability::None => Ok(()),
            });
        if let Err(e) = written {
            // The file may now end in a partial line: separate whatever comes next from it.
            self.needs_newline = true;
            return Err(Error::io("append to transcript", &self.path, e));
        }
        self.needs_newline = false;
        self.last_id = parent;
        self.len += stored.len();
        Ok(stored)
    }

    /// The file's length in bytes as written so far (what a commit mark accounts for).
    pub fn byte_len(&self) -> Result<u64> {
        let meta = match &self.file {
            Some(f) => f.metadata(),
            None => std::fs::metadata(&self.path),
        };
        meta.map(|m| m.len())
            .map_err(|e| Error::io("measure transcript", &self.path, e))
    }

    /// When the session was created (the header's `timestamp`), if the header says.
    pub fn created_at(&self) -> Option<&str> {
        self.created_at.as_deref()
    }

    /// Sets when appends are forced to disk.
    pub fn set_durability(&mut self, durability: Durability) {
        self.durability = durability;
    }

    /// Forces what was appended to disk, unless durability is `none`.
    pub fn sync(&mut self) -> Result<()> {
        match (&self.file, self.durability) {
            (Some(file), Durability::Entry | Durability::Turn) => file
                .sync_data()
                .map_err(|e| Error::io("sync transcript", &self.path, e)),
            _ => Ok(()),
        }
    }

    /// The session file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The session id from the header.
    pub fn session_id(&self) -> &str {
        &self.session_id
    }

    /// The number of messages in the file.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the file holds no message yet.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The header's format version (3 for files this store writes, 1 for legacy pi files).
    pub fn version(&self) -> u64 {
        self.version
    }

    /// Whether [`TranscriptStore::append`] is refused (files older than v3 open read-only).
    pub fn is_read_only(&self) -> bool {
        self.file.is_none()
    }
}

/// The id given to an entry that has none (pi v1): `{:08x}` of its 0-based line index.
fn line_index_id(line: usize) -> String {
    format!("{:08x}", line.saturating_sub(1))
}

/// Best effort: make the new file's directory entry durable.
fn sync_parent_dir(path: &Path) {
    if let Some(dir) = path.parent() {
        let dir = if dir.as_os_str().is_empty() {
            Path::new(".")
        } else {
            dir
        };
        if let Ok(d) = File::open(dir) {
            let _ = d.sync_all();
        }
    }
}

/// Serializes one message as a v3 entry line (without the newline). Summaries without a
/// `timestamp` get the entry's, so the returned message equals what a reader will see.
fn message_to_entry(
    message: &mut Message,
    parent: Option<&str>,
    now: &str,
) -> serde_json::Result<String> {
    let mut entry = Map::new();
    let (kind, timestamp) = match &mut message.body {
        MessageBody::CompactionSummary(c) => ("compaction", summary_fields(&mut c.extra, now)),
        MessageBody::BranchSummary(b) => ("branch_summary", summary_fields(&mut b.extra, now)),
        _ => ("message", now.to_owned()),
    };
    entry.insert("type".into(), kind.into());
    entry.insert("id".into(), message.id.clone().into());
    entry.insert(
        "parentId".into(),
        parent.map_or(Value::Null, |p| p.to_owned().into()),
    );
    entry.insert("timestamp".into(), timestamp.into());
    let payload = serde_json::to_value(&message.body)?;
    match kind {
        "message" => {
            entry.insert("message".into(), payload);
        }
        _ => {
            if let Value::Object(fields) = payload {
                for (k, v) in fields {
                    if k != "role" && !entry.contains_key(&k) {
                        entry.insert(k, v);
                    }
                }
            }
        }
    }
    serde_json::to_string(&Value::Object(entry))
}

/// The entry timestamp of a summary: its own `timestamp` string, else `now` (recorded in it).
fn summary_fields(extra: &mut Extra, now: &str) -> String {
    match extra.get("timestamp").and_then(Value::as_str) {
        Some(t) => t.to_owned(),
        None => {
            extra.insert("timestamp".into(), now.to_owned().into());
            now.to_owned()
        }
    }
}

/// Converts one session entry into a message body: `Ok(None)` for entries that carry no
/// message, `Err` with a reason for entries that should but cannot be read.
pub(crate) fn entry_to_body(mut entry: Map<String, Value>) -> Result<Option<MessageBody>, String> {
    let kind = entry
        .get("type")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned();
    match kind.as_str() {
        "message" => match entry.remove("message") {
            Some(Value::Object(m)) => pi_message_body(m).map(Some),
            Some(other) => Err(format!(
                "message entry holds {} instead of an object",
                crate::contract::client::kind_of(&other)
            )),
            None => Err("message entry without a message".into()),
        },
        "compaction" => {
            strip_envelope(&mut entry);
            if !entry.contains_key("firstKeptEntryId")
                && let Some(index) = entry.get("firstKeptEntryIndex").and_then(Value::as_u64)
            {
                entry.insert("firstKeptEntryId".into(), format!("{index:08x}").into());
            }
            serde_json::from_value::<CompactionSummaryMessage>(Value::Object(entry))
                .map(|c| Some(MessageBody::CompactionSummary(c)))
                .map_err(|e| format!("bad compaction entry: {e}"))
        }
        "branch_summary" => {
            strip_envelope(&mut entry);
            serde_json::from_value::<BranchSummaryMessage>(Value::Object(entry))
                .map(|b| Some(MessageBody::BranchSummary(b)))
                .map_err(|e| format!("bad branch_summary entry: {e}"))
        }
        "custom_message" => {
            strip_envelope(&mut entry);
            entry.insert("role".into(), "custom".into());
            pi_message_body(entry).map(Some)
        }
        "custom" if entry.contains_key("role") => {
            strip_envelope(&mut entry);
            pi_message_body(entry).map(Some)
        }
        "" => Err("entry without a type".into()),
        _ => Ok(None),
    }
}

/// Removes the fields that belong to the entry, not to the message.
fn strip_envelope(entry: &mut Map<String, Value>) {
    entry.remove("type");
    entry.remove("id");
    entry.remove("parentId");
}

/// Reads a pi/OpenClaw `AgentMessage` object. `bashExecution` becomes a `custom` message
/// (`"$ <command>\n<output>"`), the legacy `hookMessage` a `custom` one; nothing is dropped.
pub(crate) fn pi_message_body(mut m: Map<String, Value>) -> Result<MessageBody, String> {
    let role = m
        .get("role")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned();
    match role.as_str() {
        "bashExecution" => {
            m.remove("role");
            let command = m.get("command").and_then(Value::as_str).unwrap_or_default();
            let output = m.get("output").and_then(Value::as_str).unwrap_or_default();
            let content = Content::Text(format!("$ {command}\n{output}"));
            let exclude_from_context = match m.remove("excludeFromContext") {
                Some(Value::Bool(b)) => b,
                Some(other) => {
                    m.insert("excludeFromContext".into(), other);
                    false
                }
                None => false,
            };
            Ok(MessageBody::Custom(CustomMessage {
                custom_type: "bashExecution".into(),
                content,
                exclude_from_context,
                extra: m.into(),
            }))
        }
        "" => Err("message without a role".into()),
        _ => {
            if role == "hookMessage" {
                m.insert("role".into(), "custom".into());
            }
            serde_json::from_value::<MessageBody>(Value::Object(m))
                .map_err(|e| format!("bad {role} message: {e}"))
        }
    }
}

#[cfg(test)]
#[path = "store_tests.rs"]
mod tests;

//! The default store: one directory per session under the state directory, holding the
//! append-only transcript and the state beside it.
//!
//! ```text
//! <state dir>/sessions/<id slug>-<sha256>/transcript.jsonl             the session's entries
//! <state dir>/sessions/<id slug>-<sha256>/transcript.jsonl.state.json  the committed state and
//!                                                                       the commit mark
//! ```
//!
//! A commit syncs the transcript, then replaces the state file atomically; the state file's
//! `commit` mark says how many bytes of the transcript (and messages) it accounts for. Bytes a
//! crash left after the mark belong to a turn that never committed: at the next open they are
//! moved to `transcript.jsonl.uncommitted` (kept, never deleted) and the transcript ends at the
//! mark again, so the session opens as it was before that turn. A state file without a mark
//! (written by an earlier ctxhost) accounts for the whole transcript.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::{Backend, Commit, Opened, SessionMeta, SessionStore, SessionSummary, StorageCursor};
use crate::contract::message::Message;
use crate::error::{Error, Result};
use crate::transcript::{Durability, TranscriptStore};

const KIND: &str = "fs-jsonl";

/// The state file's key for the commit mark (removed before the state is handed out).
const MARK_KEY: &str = "commit";

/// What the last commit accounted for.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Mark {
    /// Transcript bytes.
    bytes: u64,
    /// Messages.
    entries: u64,
    /// Turns committed.
    turns: u64,
}

/// The file beside a transcript that holds the session's committed state.
pub fn state_path(transcript: &Path) -> PathBuf {
    beside(transcript, ".state.json")
}

fn beside(transcript: &Path, suffix: &str) -> PathBuf {
    let mut name = transcript.file_name().unwrap_or_default().to_os_string();
    name.push(suffix);
    transcript.with_file_name(name)
}

/// One session's transcript file and its state file.
#[derive(Debug)]
pub struct JsonlStore {
    transcript: TranscriptStore,
    state_file: PathBuf,
    durability: Durability,
    /// The state as last committed (without the mark), to keep it when a commit brings none
    /// and to skip writing one that did not change.
    state: Option<Value>,
    mark: Option<Mark>,
    created_at: Option<String>,
    last_id: Option<String>,
}

impl JsonlStore {
    /// Starts a new session file; refuses to overwrite an existing one.
    pub fn create(
        file: &Path,
        session_id: &str,
        cwd: &str,
        durability: Durability,
    ) -> Result<Opened> {
        let mut transcript = TranscriptStore::create(file, session_id, cwd)?;
        transcript.set_durability(durability);
        let mut store = JsonlStore {
            state_file: state_path(file),
            transcript,
            durability,
            state: None,
            mark: None,
            created_at: Some(crate::transcript::iso_now()),
            last_id: None,
        };
        // A mark from the start: a crash in the first turn leaves nothing half-committed.
        store.write_state()?;
        Ok(Opened {
            store: Box::new(store),
            messages: Vec::new(),
            state: None,
        })
    }

    /// Opens a session file and its committed state; bytes after the commit mark are moved
    /// aside first (see the module doc), and a file a crash left torn at its creation is
    /// repaired ([`TranscriptStore::open_repairing`]).
    pub fn open(file: &Path, session_id: &str, durability: Durability) -> Result<Opened> {
        let state_file = state_path(file);
        let (state, mark) = read_state(&state_file);
        if let Some(mark) = mark {
            set_aside_uncommitted(file, mark.bytes)?;
        }
        let (mut transcript, messages, problems) =
            TranscriptStore::open_repairing(file, session_id, "")?;
        transcript.set_durability(durability);
        for p in &problems {
            tracing::warn!(file = %file.display(), line = p.line, "skipped transcript line: {}", p.message);
        }
        let store = JsonlStore {
            state_file,
            created_at: transcript.created_at().map(str::to_owned),
            last_id: messages.last().map(|m| m.id.clone()),
            transcript,
            durability,
            state: state.clone(),
            mark,
        };
        Ok(Opened {
            store: Box::new(store),
            messages,
            state,
        })
    }

    fn write_state(&mut self) -> Result<()> {
        let bytes = self.transcript.byte_len()?;
        let mark = Mark {
            bytes,
            entries: self.transcript.len() as u64,
            turns: self.mark.map_or(0, |m| m.turns),
        };
        self.write_state_with(mark)
    }

    fn write_state_with(&mut self, mark: Mark) -> Result<()> {
        let mut doc = match &self.state {
            Some(Value::Object(o)) => o.clone(),
            Some(other) => {
                let mut o = serde_json::Map::new();
                o.insert("value".into(), other.clone());
                o
            }
            None => serde_json::Map::new(),
        };
        doc.insert(
            MARK_KEY.into(),
            serde_json::to_value(mark).unwrap_or(Value::Null),
        );
        let text = serde_json::to_vec_pretty(&Value::Object(doc)).map_err(|e| Error::Store {
            backend: KIND,
            op: "encode state",
            session: Some(self.transcript.session_id().to_owned()),
            message: e.to_string(),
        })?;
        write_atomic(&self.state_file, &text, self.durability != Durability::None)?;
        self.mark = Some(mark);
        Ok(())
    }
}

impl SessionStore for JsonlStore {
    fn append(&mut self, messages: Vec<Message>) -> Result<Vec<Arc<Message>>> {
        let stored = self.transcript.append(messages)?;
        if let Some(last) = stored.last() {
            self.last_id = Some(last.id.clone());
        }
        Ok(stored)
    }

    fn commit(&mut self, commit: Commit<'_>) -> Result<()> {
        let entries = self.transcript.len() as u64;
        let unchanged_state = commit.state.is_none() || commit.state == self.state.as_ref();
        let old = self.mark.unwrap_or_default();
        if unchanged_state && !commit.turn_ended && self.mark.is_some_and(|m| m.entries == entries)
        {
            return Ok(());
        }
        self.transcript.sync()?;
        if let Some(state) = commit.state {
            self.state = Some(state.clone());
        }
        let mark = Mark {
            bytes: self.transcript.byte_len()?,
            entries,
            turns: old.turns + u64::from(commit.turn_ended),
        };
        self.write_state_with(mark)
    }

    fn len(&self) -> usize {
        self.transcript.len()
    }

    fn cursor(&self) -> StorageCursor {
        StorageCursor {
            backend: KIND.into(),
            session_id: self.transcript.session_id().to_owned(),
            seq: self.transcript.len() as u64,
            entry_id: self.last_id.clone(),
        }
    }

    fn meta(&self) -> SessionMeta {
        SessionMeta {
            created_at: self.created_at.clone(),
            turns: self.mark.map(|m| m.turns),
        }
    }

    fn location(&self) -> String {
        self.transcript.path().display().to_string()
    }

    fn file(&self) -> Option<&Path> {
        Some(self.transcript.path())
    }
}

/// The committed state and its mark; a missing or unreadable file is no state (reported).
fn read_state(path: &Path) -> (Option<Value>, Option<Mark>) {
    let Ok(text) = std::fs::read(path) else {
        return (None, None);
    };
    match serde_json::from_slice::<Value>(&text) {
        Ok(Value::Object(mut doc)) => {
            let mark = doc
                .remove(MARK_KEY)
                .and_then(|m| serde_json::from_value::<Mark>(m).ok());
            let state = (!doc.is_empty()).then_some(Value::Object(doc));
            (state, mark)
        }
        Ok(_) | Err(_) => {
            tracing::warn!(file = %path.display(), "ignoring an unreadable session state");
            (None, None)
        }
    }
}

/// Moves the transcript's bytes after `committed` (a turn that never committed) to
/// `<transcript>.uncommitted` and cuts the transcript there. A transcript shorter than the mark
/// (replaced by hand) is left as it is, with a warning.
fn set_aside_uncommitted(file: &Path, committed: u64) -> Result<()> {
    use std::io::{Read, Seek, SeekFrom, Write};
    let Ok(meta) = std::fs::metadata(file) else {
        return Ok(());
    };
    let len = meta.len();
    if len == committed {
        return Ok(());
    }
    if len < committed {
        tracing::warn!(
            file = %file.display(),
            bytes = len,
            committed,
            "the transcript is shorter than its last commit: it was replaced or cut by hand; reading it as it is"
        );
        return Ok(());
    }
    let mut f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(file)
        .map_err(|e| Error::io("open transcript", file, e))?;
    let mut tail = Vec::new();
    f.seek(SeekFrom::Start(committed))
        .and_then(|_| f.read_to_end(&mut tail))
        .map_err(|e| Error::io("read uncommitted transcript bytes", file, e))?;
    let aside = beside(file, ".uncommitted");
    let mut out = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&aside)
        .map_err(|e| Error::io("keep uncommitted transcript bytes", &aside, e))?;
    out.write_all(&tail)
        .and_then(|()| {
            if tail.ends_with(b"\n") {
                Ok(())
            } else {
                out.write_all(b"\n")
            }
        })
        .and_then(|()| out.sync_all())
        .map_err(|e| Error::io("keep uncommitted transcript bytes", &aside, e))?;
    f.set_len(committed)
        .and_then(|()| f.sync_all())
        .map_err(|e| Error::io("cut the transcript at its last commit", file, e))?;
    tracing::warn!(
        file = %file.display(),
        bytes = tail.len(),
        kept = %aside.display(),
        "a turn that never committed (a crash) was set aside; the session continues from its last commit"
    );
    Ok(())
}

/// Replaces `path` with `bytes` so that a reader sees the old state or the new, never a mix:
/// written to a temporary file, synced, renamed over, and the directory synced (the rename is
/// durable only then). With `durable` false the two syncs are skipped (replays into a scratch
/// directory).
pub(crate) fn write_atomic(path: &Path, bytes: &[u8], durable: bool) -> Result<()> {
    use std::io::Write;
    let tmp = beside(path, ".tmp");
    let mut file =
        std::fs::File::create(&tmp).map_err(|e| Error::io("write session state", &tmp, e))?;
    file.write_all(bytes)
        .and_then(|()| if durable { file.sync_all() } else { Ok(()) })
        .map_err(|e| Error::io("write session state", &tmp, e))?;
    drop(file);
    std::fs::rename(&tmp, path).map_err(|e| Error::io("replace session state", path, e))?;
    if durable
        && let Some(dir) = path.parent()
        && let Ok(dir) = std::fs::File::open(if dir.as_os_str().is_empty() {
            Path::new(".")
        } else {
            dir
        })
    {
        dir.sync_all()
            .map_err(|e| Error::io("sync session state directory", path, e))?;
    }
    Ok(())
}

/// Sessions kept as files under a state directory (`ctxhost serve`'s layout).
#[derive(Debug)]
pub struct JsonlBackend {
    state_dir: PathBuf,
    durability: Durability,
}

impl JsonlBackend {
    /// Sessions under `state_dir/sessions`.
    pub fn new(state_dir: impl Into<PathBuf>, durability: Durability) -> Self {
        JsonlBackend {
            state_dir: state_dir.into(),
            durability,
        }
    }

    /// The directory of the conversation `id`: a readable slug plus the SHA-256 of the whole
    /// id, so distinct conversations never share a directory (whatever names others choose)
    /// and no id can climb out of the state directory.
    pub fn session_dir(&self, id: &str) -> PathBuf {
        self.state_dir
            .join("sessions")
            .join(format!("{}-{}", slug(id, 48), digest(id)))
    }

    /// Where an earlier ctxhost kept the session keyed `key` (a 32-bit hash: two keys could
    /// share it). Read once, when the conversation has no directory of its own yet, and moved.
    fn legacy_session_dir(&self, key: &str) -> PathBuf {
        let mut h = crate::session::Fnv::new();
        h.write(key.as_bytes());
        self.state_dir
            .join("sessions")
            .join(format!("{}-{:08x}", slug(key, 64), h.0 as u32))
    }

    /// The directory of the conversation `id`, taking over the directory an earlier ctxhost
    /// kept under the same name when its transcript says it holds this very conversation. A
    /// directory kept under a `sessionKey` another conversation shares stays where it is,
    /// untouched: a new `sessionId` starts empty.
    pub fn open_session_dir(&self, id: &str) -> Result<PathBuf> {
        let dir = self.session_dir(id);
        let io = |e| Error::io("create session directory", &dir, e);
        if !dir.exists() {
            let old = self.legacy_session_dir(id);
            if header_id(&old.join("transcript.jsonl")).as_deref() == Some(id) {
                tracing::info!(from = %old.display(), to = %dir.display(), "moving a session an earlier ctxhost kept");
                std::fs::rename(&old, &dir).map_err(io)?;
            }
        }
        std::fs::create_dir_all(&dir).map_err(io)?;
        Ok(dir)
    }
}

impl Backend for JsonlBackend {
    fn kind(&self) -> &'static str {
        KIND
    }

    fn open(&self, id: &str, cwd: &str) -> Result<Opened> {
        let file = self.open_session_dir(id)?.join("transcript.jsonl");
        if file.exists() {
            JsonlStore::open(&file, id, self.durability)
        } else {
            JsonlStore::create(&file, id, cwd, self.durability)
        }
    }

    fn sessions(&self) -> Result<Vec<SessionSummary>> {
        let dir = self.state_dir.join("sessions");
        let Ok(entries) = std::fs::read_dir(&dir) else {
            return Ok(Vec::new());
        };
        let mut out = Vec::new();
        for entry in entries.flatten() {
            let file = entry.path().join("transcript.jsonl");
            let Some(id) = header_id(&file) else {
                continue;
            };
            let (_, mark) = read_state(&state_path(&file));
            let messages = match mark {
                Some(m) => m.entries,
                None => match TranscriptStore::open(&file) {
                    Ok((_, messages, _)) => messages.len() as u64,
                    Err(_) => continue,
                },
            };
            out.push(SessionSummary {
                id,
                messages,
                meta: SessionMeta {
                    created_at: None,
                    turns: mark.map(|m| m.turns),
                },
            });
        }
        out.sort_by(|a, b| a.id.cmp(&b.id));
        Ok(out)
    }

    fn import(
        &self,
        id: &str,
        messages: &[Arc<Message>],
        state: Option<&Value>,
        meta: &SessionMeta,
    ) -> Result<bool> {
        let file = self.open_session_dir(id)?.join("transcript.jsonl");
        if file.exists() {
            let opened = JsonlStore::open(&file, id, self.durability)?;
            if !super::may_import(KIND, id, &opened.messages, messages)? {
                return Ok(false);
            }
            // An empty session (created, never written) is replaced by the copy.
            drop(opened);
            std::fs::remove_file(&file)
                .map_err(|e| Error::io("replace empty transcript", &file, e))?;
        }
        let mut transcript = TranscriptStore::create(&file, id, "")?;
        transcript.set_durability(self.durability);
        transcript.append_stored(messages)?;
        let mut store = JsonlStore {
            state_file: state_path(&file),
            transcript,
            durability: self.durability,
            state: state.cloned(),
            mark: None,
            created_at: meta.created_at.clone(),
            last_id: messages.last().map(|m| m.id.clone()),
        };
        store.transcript.sync()?;
        let mark = Mark {
            bytes: store.transcript.byte_len()?,
            entries: messages.len() as u64,
            turns: meta.turns.unwrap_or(0),
        };
        store.write_state_with(mark)?;
        Ok(true)
    }

    fn size_bytes(&self) -> Option<u64> {
        fn walk(dir: &Path) -> u64 {
            std::fs::read_dir(dir)
                .into_iter()
                .flatten()
                .flatten()
                .map(|e| match e.metadata() {
                    Ok(m) if m.is_dir() => walk(&e.path()),
                    Ok(m) => m.len(),
                    Err(_) => 0,
                })
                .sum()
        }
        Some(walk(&self.state_dir.join("sessions")))
    }
}

/// The SHA-256 of `s`, in hex: names on disk that no chosen id can collide with.
pub fn digest(s: &str) -> String {
    ring::digest::digest(&ring::digest::SHA256, s.as_bytes())
        .as_ref()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// `s` with every character but `[A-Za-z0-9_-]` replaced by `_`, cut at `max` characters:
/// readable in a directory listing, never a path separator.
pub fn slug(s: &str, max: usize) -> String {
    s.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                c
            } else {
                '_'
            }
        })
        .take(max)
        .collect()
}

/// The session id a transcript's header names.
pub fn header_id(transcript: &Path) -> Option<String> {
    use std::io::{BufRead, Read};
    let file = std::fs::File::open(transcript).ok()?;
    let mut line = String::new();
    std::io::BufReader::new(file)
        .take(1 << 16)
        .read_line(&mut line)
        .ok()?;
    let header: serde_json::Value = serde_json::from_str(&line).ok()?;
    header.get("id")?.as_str().map(str::to_owned)
}

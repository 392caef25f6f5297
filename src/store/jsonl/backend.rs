//! Many JSONL sessions under one state directory (`ctxhost serve`'s layout), each opened by
//! id, and the names on disk that no chosen id can collide with.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde_json::Value;

use super::{JsonlStore, KIND, Mark, read_committed};
use crate::contract::message::Message;
use crate::error::{Error, Result};
use crate::store::{Backend, Opened, SessionMeta, SessionSummary};
use crate::transcript::{Durability, TranscriptStore};

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

impl JsonlBackend {
    /// Copies the state directory's sessions (and serve's names beside them) to `dest`, which
    /// must not exist, while they may be written: per session the state and journal first and
    /// the transcript last. A transcript only grows, so the copy holds every byte the copied
    /// commit accounts for; bytes of a commit made during the copy are set aside when the copy
    /// is opened, as after a crash.
    fn copy_to(&self, dest: &Path) -> Result<()> {
        if dest.exists() {
            return Err(Error::Store {
                backend: KIND,
                op: "back up",
                session: None,
                message: format!("{} exists; nothing was written", dest.display()),
            });
        }
        for sub in ["names", "subagents"] {
            copy_flat(&self.state_dir.join(sub), &dest.join(sub), |_| true)?;
        }
        let sessions = self.state_dir.join("sessions");
        let entries = match std::fs::read_dir(&sessions) {
            Ok(e) => e,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return std::fs::create_dir_all(dest.join("sessions"))
                    .map_err(|e| Error::io("create backup directory", dest, e));
            }
            Err(e) => return Err(Error::io("list sessions", &sessions, e)),
        };
        for entry in entries {
            let entry = entry.map_err(|e| Error::io("list sessions", &sessions, e))?;
            if !entry.path().is_dir() {
                continue;
            }
            let to = dest.join("sessions").join(entry.file_name());
            let not_transcript = |n: &str| n != "transcript.jsonl" && !n.ends_with(".tmp");
            copy_flat(&entry.path(), &to, not_transcript)?;
            copy_flat(&entry.path(), &to, |n| n == "transcript.jsonl")?;
        }
        Ok(())
    }
}

/// Copies the files of `from` (not its directories) whose names `keep` to `to`, creating it;
/// a missing `from` copies nothing.
fn copy_flat(from: &Path, to: &Path, keep: impl Fn(&str) -> bool) -> Result<()> {
    let entries = match std::fs::read_dir(from) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(Error::io("read for backup", from, e)),
    };
    std::fs::create_dir_all(to).map_err(|e| Error::io("create backup directory", to, e))?;
    for entry in entries {
        let entry = entry.map_err(|e| Error::io("read for backup", from, e))?;
        let name = entry.file_name();
        if !entry.path().is_file() || !keep(&name.to_string_lossy()) {
            continue;
        }
        std::fs::copy(entry.path(), to.join(&name))
            .map_err(|e| Error::io("copy for backup", entry.path(), e))?;
    }
    Ok(())
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
            let mark = read_committed(&file).mark;
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
                    turns: mark.map(|m: Mark| m.turns),
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
            if !crate::store::may_import(KIND, id, &opened.messages, messages)? {
                return Ok(false);
            }
            // An empty session (created, never written) is replaced by the copy.
            drop(opened);
            std::fs::remove_file(&file)
                .map_err(|e| Error::io("replace empty transcript", &file, e))?;
        }
        JsonlStore::import(&file, id, messages, state, meta, self.durability)?;
        Ok(true)
    }

    fn location(&self) -> String {
        self.state_dir.join("sessions").display().to_string()
    }

    fn backup(&self, dest: &Path) -> Result<()> {
        self.copy_to(dest)
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

//! The default store: one directory per session under the state directory, holding the
//! append-only transcript, the committed state beside it and a two-slot commit journal.
//!
//! ```text
//! <state dir>/sessions/<id slug>-<sha256>/transcript.jsonl             the session's entries
//! <state dir>/sessions/<id slug>-<sha256>/transcript.jsonl.state.json  the committed state and
//!                                                                       its commit mark
//! <state dir>/sessions/<id slug>-<sha256>/transcript.jsonl.commit-0|1  the commit journal
//! ```
//!
//! Appends are written through to the OS at once and synced by the commit that makes them
//! part of the session. A commit writes one record into the journal (the state with its mark,
//! plus the transcript bytes written since the transcript was last synced) and syncs that one
//! file, and that is all it writes: the journal is what survives a crash or a power loss. The
//! state file is brought up to the last commit when the session closes or its store is
//! dropped ([`SessionStore::flush`]), and from the journal by the next open after a crash, so
//! a reader of the state file sees the last commit of a session no one has open; while a
//! session is open the journal's newest record is ahead of it. So a call's writes cost one
//! durable sync and no other file write; every 16 KiB of transcript a commit syncs the
//! transcript too, which keeps records small (`journal`). Under `durability: "none"` there is
//! no journal, and every commit replaces the state file as before.
//!
//! The mark says how many bytes of the transcript (and messages, and turns) the commit
//! accounts for. Bytes a crash left after the mark belong to a turn that never committed: at
//! the next open they are moved to `transcript.jsonl.uncommitted` (kept, never deleted) and
//! the transcript ends at the mark again, so the session opens as it was before that turn.
//! Bytes a power loss took from the transcript are written back from the journal. A state file
//! without a mark (written by an earlier ctxhost) accounts for the whole transcript.

mod backend;
mod committed;
mod journal;

pub use backend::{JsonlBackend, digest, header_id, slug};
pub use committed::committed_document;
use committed::read_committed;

use std::borrow::Cow;
use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use super::{Commit, Opened, SessionMeta, SessionStore, StorageCursor};
use crate::contract::message::Message;
use crate::error::{Error, Result};
use crate::transcript::{Durability, TranscriptStore};

const KIND: &str = "fs-jsonl";

/// The state file's key for the commit mark (removed before the state is handed out).
const MARK_KEY: &str = "commit";

/// Transcript bytes a commit leaves unsynced at most (carried in its journal record instead).
const UNSYNCED_MAX: u64 = 16 << 10;

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
    /// The commit's number (its journal record's); 0 in marks written before the journal.
    #[serde(default)]
    seq: u64,
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

/// One session's transcript file, its state file and its commit journal.
#[derive(Debug)]
pub struct JsonlStore {
    transcript: TranscriptStore,
    state_file: PathBuf,
    durability: Durability,
    /// The state as last committed (without the mark), to keep it when a commit brings none
    /// and to skip writing one that did not change.
    state: Option<Arc<Value>>,
    mark: Option<Mark>,
    /// Transcript bytes known to be on disk (synced); the journal carries those after them.
    synced: u64,
    /// Both journal slots exist with their directory entries synced.
    slots: bool,
    /// The state file is older than the last commit (the journal holds it): replaced by
    /// [`SessionStore::flush`].
    behind: bool,
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
        transcript.set_durability(appends(durability));
        let durable = durability != Durability::None;
        if durable {
            // Made durable by the state file's directory sync below.
            journal::reset(file)?;
        } else {
            journal::remove(file);
        }
        let mut store = JsonlStore {
            state_file: state_path(file),
            synced: transcript.byte_len()?,
            created_at: transcript.created_at().map(str::to_owned),
            transcript,
            durability,
            state: None,
            mark: None,
            slots: durable,
            behind: false,
            last_id: None,
        };
        // A mark from the start: a crash in the first turn leaves nothing half-committed.
        let mark = store.mark_now(0)?;
        let doc = store.encode(None, mark)?;
        write_atomic(&store.state_file, &doc, durable)?;
        store.mark = Some(mark);
        Ok(Opened {
            store: Box::new(store),
            messages: Vec::new(),
            state: None,
        })
    }

    /// Opens a session file and its committed state: the transcript is first brought to what
    /// the last commit accounts for (bytes a power loss took are written back from the
    /// journal, bytes after the mark are moved aside; see the module doc), and a file a crash
    /// left torn at its creation is repaired ([`TranscriptStore::open_repairing`]).
    pub fn open(file: &Path, session_id: &str, durability: Durability) -> Result<Opened> {
        let committed = read_committed(file);
        if let Some(record) = &committed.redo {
            journal::redo(file, record)?;
        }
        if committed.from_journal
            && let Some(record) = &committed.redo
        {
            // The state file missed the last commit (a power loss): give readers the journal's.
            write_atomic(&state_path(file), &record.state, false)?;
        }
        if let Some(mark) = committed.mark {
            set_aside_uncommitted(file, mark.bytes)?;
        }
        let (mut transcript, messages, problems) =
            TranscriptStore::open_repairing(file, session_id, "")?;
        transcript.set_durability(appends(durability));
        for p in &problems {
            tracing::warn!(file = %file.display(), line = p.line, "skipped transcript line: {}", p.message);
        }
        let store = JsonlStore {
            state_file: state_path(file),
            created_at: transcript.created_at().map(str::to_owned),
            last_id: messages.last().map(|m| m.id.clone()),
            synced: transcript.byte_len()?,
            slots: journal::slots_exist(file),
            behind: false,
            transcript,
            durability,
            state: committed.state.clone().map(Arc::new),
            mark: committed.mark,
        };
        Ok(Opened {
            store: Box::new(store),
            messages,
            state: committed.state,
        })
    }

    /// Writes a whole session stored elsewhere into a new file `file` (ids kept), synced and
    /// committed before it returns.
    pub(super) fn import(
        file: &Path,
        id: &str,
        messages: &[Arc<Message>],
        state: Option<&Value>,
        meta: &SessionMeta,
        durability: Durability,
    ) -> Result<()> {
        let mut transcript = TranscriptStore::create(file, id, "")?;
        transcript.set_durability(durability);
        transcript.append_stored(messages)?;
        transcript.sync()?;
        journal::remove(file);
        let store = JsonlStore {
            state_file: state_path(file),
            synced: transcript.byte_len()?,
            transcript,
            durability,
            state: state.cloned().map(Arc::new),
            mark: None,
            slots: false,
            behind: false,
            created_at: meta.created_at.clone(),
            last_id: messages.last().map(|m| m.id.clone()),
        };
        let mark = store.mark_now(meta.turns.unwrap_or(0))?;
        let doc = store.encode(store.state.as_deref(), mark)?;
        write_atomic(&store.state_file, &doc, durability != Durability::None)
    }

    /// A mark for the transcript as it is now.
    fn mark_now(&self, turns: u64) -> Result<Mark> {
        Ok(Mark {
            bytes: self.transcript.byte_len()?,
            entries: self.transcript.len() as u64,
            turns,
            seq: self.mark.map_or(0, |m| m.seq),
        })
    }

    /// The state file's text: `state` (an object; anything else under `value`) with `mark`.
    fn encode(&self, state: Option<&Value>, mark: Mark) -> Result<Vec<u8>> {
        #[derive(Serialize)]
        struct Doc<'a> {
            #[serde(flatten)]
            state: &'a Map<String, Value>,
            commit: Mark,
        }
        let state = state_fields(state);
        let doc = Doc {
            state: &state,
            commit: mark,
        };
        let fail = |e: serde_json::Error| Error::Store {
            backend: KIND,
            op: "encode state",
            session: Some(self.transcript.session_id().to_owned()),
            message: e.to_string(),
        };
        // Sized first: a buffer grown by doubling holds the old and the new copy at once, which
        // for a state near the result cap is most of the peak memory of a commit.
        let mut size = ByteCount(0);
        serde_json::to_writer_pretty(&mut size, &doc).map_err(fail)?;
        let mut out = Vec::with_capacity(size.0);
        serde_json::to_writer_pretty(&mut out, &doc).map_err(fail)?;
        Ok(out)
    }

    /// The transcript's bytes from `from` to `to` (what a journal record carries), read back
    /// from the OS's cache (no handle is kept: a gateway holds thousands of sessions).
    fn transcript_bytes(&self, from: u64, to: u64) -> Result<Vec<u8>> {
        let path = self.transcript.path();
        let io = |e| Error::io("read transcript for the commit journal", path, e);
        let mut reader = std::fs::File::open(path).map_err(io)?;
        let mut bytes = Vec::with_capacity(to.saturating_sub(from) as usize);
        reader
            .seek(SeekFrom::Start(from))
            .and_then(|_| reader.take(to.saturating_sub(from)).read_to_end(&mut bytes))
            .map_err(io)?;
        Ok(bytes)
    }

    /// Writes the journal record of commit `mark` with the state document `doc`: one synced
    /// file (plus the transcript when its unsynced bytes passed [`UNSYNCED_MAX`], and once the
    /// directory, when the slots are new).
    fn journal(&mut self, mark: Mark, doc: &[u8]) -> Result<()> {
        let file = self.transcript.path().to_path_buf();
        if mark.bytes.saturating_sub(self.synced) > UNSYNCED_MAX {
            self.transcript.sync()?;
            self.synced = mark.bytes;
        }
        if !self.slots {
            journal::reset(&file)?;
            sync_dir(&file)?;
            self.slots = true;
        }
        let tail = self.transcript_bytes(self.synced, mark.bytes)?;
        journal::write(&file, mark.seq, doc, self.synced, &tail)
    }
}

/// Counts the bytes written to it (to size a buffer before writing into it).
struct ByteCount(usize);

impl std::io::Write for ByteCount {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0 += buf.len();
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// How the transcript's appends are synced under the store's `durability`: never one by one
/// (a commit makes them durable; bytes after the last commit are set aside anyway).
fn appends(durability: Durability) -> Durability {
    match durability {
        Durability::None => Durability::None,
        Durability::Entry | Durability::Turn => Durability::Turn,
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
        let unchanged_state =
            commit.state.is_none() || commit.state.map(|s| &**s) == self.state.as_deref();
        let old = self.mark.unwrap_or_default();
        if unchanged_state && !commit.turn_ended && self.mark.is_some_and(|m| m.entries == entries)
        {
            return Ok(());
        }
        let state = match commit.state {
            Some(s) if !unchanged_state => Some(&**s),
            _ => self.state.as_deref(),
        };
        let mark = Mark {
            bytes: self.transcript.byte_len()?,
            entries,
            turns: old.turns + u64::from(commit.turn_ended),
            seq: old.seq + 1,
        };
        let doc = self.encode(state, mark)?;
        if self.durability == Durability::None {
            // No journal: the state file is the commit.
            write_atomic(&self.state_file, &doc, false)?;
        } else {
            // The journal holds the commit; the state file catches up when the session closes
            // (or from the journal at the next open), off the call's path.
            self.journal(mark, &doc)?;
            self.behind = true;
        }
        drop(doc);
        if let Some(s) = commit.state
            && !unchanged_state
        {
            self.state = Some(Arc::clone(s));
        }
        self.mark = Some(mark);
        Ok(())
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

    fn flush(&mut self) -> Result<()> {
        if !self.behind {
            return Ok(());
        }
        let Some(mark) = self.mark else {
            return Ok(());
        };
        let doc = self.encode(self.state.as_deref(), mark)?;
        // Not synced: the journal already holds this commit durably.
        write_atomic(&self.state_file, &doc, false)?;
        self.behind = false;
        Ok(())
    }
}

impl Drop for JsonlStore {
    /// The state file catches up with the last commit (a session dropped without closing).
    fn drop(&mut self) {
        if let Err(e) = self.flush() {
            tracing::warn!(file = %self.state_file.display(), "the state file was not brought up to the last commit (the commit journal holds it): {e}");
        }
    }
}

/// The state's fields as the state file holds them beside the commit mark: an object's own,
/// any other value under `value`, none for no state.
fn state_fields(state: Option<&Value>) -> Cow<'_, Map<String, Value>> {
    match state {
        Some(Value::Object(o)) => Cow::Borrowed(o),
        Some(other) => Cow::Owned(Map::from_iter([("value".to_owned(), other.clone())])),
        None => Cow::Owned(Map::new()),
    }
}

/// Moves the transcript's bytes after `committed` (a turn that never committed) to
/// `<transcript>.uncommitted` and cuts the transcript there. A transcript shorter than the mark
/// (replaced by hand) is left as it is, with a warning.
fn set_aside_uncommitted(file: &Path, committed: u64) -> Result<()> {
    use std::io::Write;
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
/// written to a temporary file, renamed over, and with `durable` the file synced before the
/// rename and the directory after it (the rename is durable only then). Without `durable`
/// nothing is synced (a commit's journal is what survives a power loss; replays into a scratch
/// directory need nothing).
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
    if durable {
        sync_dir(path)?;
    }
    Ok(())
}

/// Syncs the directory holding `path`, so the names created or renamed in it survive a power
/// loss.
fn sync_dir(path: &Path) -> Result<()> {
    let Some(dir) = path.parent() else {
        return Ok(());
    };
    let dir = if dir.as_os_str().is_empty() {
        Path::new(".")
    } else {
        dir
    };
    std::fs::File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(|e| Error::io("sync session directory", dir, e))
}

//! Which conversation a call belongs to. OpenClaw's `sessionId` names a conversation; its
//! `sessionKey` (`agent:main:main`, a channel peer) routes and survives a reset (`/new`,
//! `/reset`): a `sessionId` seen for the first time is a new, empty conversation even when its
//! key is known. A call that names only a key (`prepareSubagentSpawn`'s parent, a `dispose`)
//! belongs to the conversation last seen under that key, and a successor a compaction reported
//! (`result.sessionTarget.sessionId`, else `result.sessionId`) continues the conversation that
//! compacted.
//!
//! What is known is kept under the state directory, so the next client process (every
//! `openclaw agent --local` run is one) finds the same conversations:
//!
//! ```text
//! <state dir>/names/key-<sha256 of the key>   the conversation last seen under the key
//! <state dir>/names/id-<sha256 of the id>     the conversation a successor id continues
//! ```

use crate::store::jsonl::digest;
use std::collections::HashMap;
use std::path::{Path, PathBuf};

use parking_lot::Mutex;

use crate::contract::client::ClientCall;

/// How many names a server keeps in memory: a gateway sees every session it ever served, and
/// the disk has them all anyway.
const KNOWN_NAMES: usize = 65_536;

/// A conversation's identity: the `sessionId` that started it.
pub(super) type Conversation = String;

/// The names a server has learnt: keys to conversations, successor ids to conversations.
pub(super) struct Names {
    dir: PathBuf,
    /// What was read or written, so a call reads the disk only for a name not seen yet (at
    /// most [`KNOWN_NAMES`]; past that it starts afresh and names are read again as needed).
    known: Mutex<HashMap<PathBuf, Option<String>>>,
}

impl Names {
    /// The names kept under `state_dir`.
    pub(super) fn new(state_dir: &Path) -> Self {
        Names {
            dir: state_dir.join("names"),
            known: Mutex::new(HashMap::new()),
        }
    }

    /// The conversation `call` belongs to, noting what it teaches (the key's conversation is
    /// now the one named by its id). `None`: the call names no conversation.
    pub(super) fn conversation(&self, call: &ClientCall) -> Option<Conversation> {
        let (id, key, _) = call.session();
        let (parent_id, parent_key) = match call {
            ClientCall::PrepareSubagentSpawn(p) => {
                (p.parent_session_id.as_ref(), p.parent_session_key.as_ref())
            }
            ClientCall::RollbackSubagentSpawn(p) => {
                (p.parent_session_id.as_ref(), p.parent_session_key.as_ref())
            }
            _ => (None, None),
        };
        let id = non_empty(id.as_ref()).or(non_empty(parent_id));
        let key = non_empty(key.as_ref()).or(non_empty(parent_key));
        match (id, key) {
            (Some(id), key) => {
                let conversation = self.successor_of(id).unwrap_or_else(|| id.to_owned());
                if let Some(key) = key {
                    self.remember(&self.key_file(key), &conversation);
                }
                Some(conversation)
            }
            (None, Some(key)) => Some(
                self.read(&self.key_file(key))
                    .unwrap_or_else(|| key.to_owned()),
            ),
            (None, None) => None,
        }
    }

    /// Notes that `successor` (an id a compaction reported) continues `conversation`.
    pub(super) fn continue_as(&self, successor: &str, conversation: &str) {
        if successor.is_empty() || successor == conversation {
            return;
        }
        self.remember(&self.id_file(successor), conversation);
    }

    fn successor_of(&self, id: &str) -> Option<String> {
        self.read(&self.id_file(id))
    }

    fn key_file(&self, key: &str) -> PathBuf {
        self.dir.join(format!("key-{}", digest(key)))
    }

    fn id_file(&self, id: &str) -> PathBuf {
        self.dir.join(format!("id-{}", digest(id)))
    }

    fn read(&self, file: &Path) -> Option<String> {
        if let Some(v) = self.known.lock().get(file) {
            return v.clone();
        }
        let v = std::fs::read_to_string(file).ok().filter(|s| !s.is_empty());
        self.note(file, v.clone());
        v
    }

    /// Writes `value` for `file` unless it is already what is known (a write per change, not
    /// per call). A failed write is reported: the name is then known to this process only.
    fn remember(&self, file: &Path, value: &str) {
        if self.read(file).as_deref() == Some(value) {
            return;
        }
        self.note(file, Some(value.to_owned()));
        let written = std::fs::create_dir_all(&self.dir).and_then(|()| {
            let tmp = file.with_extension("tmp");
            std::fs::write(&tmp, value)?;
            std::fs::rename(&tmp, file)
        });
        if let Err(e) = written {
            tracing::warn!(file = %file.display(), "cannot note a session name: {e}");
        }
    }

    /// Keeps `value` as what `file` holds.
    fn note(&self, file: &Path, value: Option<String>) {
        let mut known = self.known.lock();
        if known.len() >= KNOWN_NAMES {
            known.clear();
        }
        known.insert(file.to_owned(), value);
    }
}

fn non_empty(s: Option<&String>) -> Option<&str> {
    s.map(String::as_str).filter(|s| !s.is_empty())
}

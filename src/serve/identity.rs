//! Which conversation a call belongs to. OpenClaw's `sessionId` names a conversation; its
//! `sessionKey` (`agent:main:main`, a channel peer) routes and survives a reset (`/new`,
//! `/reset`): a `sessionId` seen for the first time is a new, empty conversation even when its
//! key is known. A call that names only a key (`prepareSubagentSpawn`'s parent, a `dispose`)
//! belongs to the conversation last seen under that key, and a successor a compaction reported
//! (`result.sessionTarget.sessionId`, else `result.sessionId`) continues the conversation that
//! compacted.
//!
//! A reset can also keep the `sessionId`: OpenClaw's `sessions.reset` (what `/new` and `/reset`
//! do in 2026.9.6) resets in place and changes only the session's `lifecycleRevision`, which is
//! absent before the first reset. A run's `bootstrap`, `maintain` and `afterTurn` carry it as
//! `sessionTarget.expectedLifecycleRevision` (its other calls leave it out), so one whose revision
//! differs from the one the conversation's last such call carried starts a new, empty
//! conversation under the same id, and every later call naming the id belongs to it; a
//! successor id's revision is followed the same way (its first lifecycle continues the
//! conversation that compacted, a reset of it starts `<successor>#<revision>`). The first
//! revision a conversation shows is taken as its own (sessions created with one from the
//! start). A conversation's first run has no `bootstrap` (there is no session file yet): its
//! `afterTurn` records the revision when it carries a `sessionTarget`; when it carries none, a
//! reset before the conversation's first `bootstrap` is not told apart.
//!
//! What is known is kept under the state directory, so the next client process (every
//! `openclaw agent --local` run is one) finds the same conversations:
//!
//! ```text
//! <state dir>/names/key-<sha256 of the key>    the conversation last seen under the key
//! <state dir>/names/id-<sha256 of the id>      the conversation a successor id continues
//! <state dir>/names/life-<sha256 of the id>    the revision the id's calls last carried,
//!                                              and the conversation it names
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
                let conversation = self.lifecycle_of(id, self.successor_of(id), call);
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

    /// The conversation of the id's current lifecycle, noting the revision a call's
    /// `sessionTarget` carries: a revision other than the one last seen is a reset in place, and
    /// starts the conversation `<id>#<revision>`. `continued` is the conversation a successor id
    /// continues: its first lifecycle is that conversation, and a reset of it starts afresh too.
    fn lifecycle_of(&self, id: &str, continued: Option<String>, call: &ClientCall) -> Conversation {
        let file = self.life_file(id);
        let recorded = self.read(&file);
        let recorded = recorded.as_deref().and_then(|r| r.split_once('\n'));
        let origin = continued.unwrap_or_else(|| id.to_owned());
        let Some(revision) = lifecycle_revision(call) else {
            return recorded.map_or(origin, |(_, c)| c.to_owned());
        };
        match recorded {
            None => {
                self.remember(&file, &format!("{revision}\n{origin}"));
                origin
            }
            // The same lifecycle, or a call that leaves the revision out after one was seen.
            Some((r, conversation)) if r == revision || revision.is_empty() => {
                conversation.to_owned()
            }
            Some((_, _)) => {
                let conversation = format!("{id}#{revision}");
                tracing::info!(
                    session = id,
                    revision,
                    "the client reset the session in place (a new lifecycle revision): a new, empty conversation"
                );
                self.remember(&file, &format!("{revision}\n{conversation}"));
                conversation
            }
        }
    }

    fn key_file(&self, key: &str) -> PathBuf {
        self.dir.join(format!("key-{}", digest(key)))
    }

    fn id_file(&self, id: &str) -> PathBuf {
        self.dir.join(format!("id-{}", digest(id)))
    }

    fn life_file(&self, id: &str) -> PathBuf {
        self.dir.join(format!("life-{}", digest(id)))
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

/// The lifecycle revision a call teaches (`""`: never reset), `None` when the call does not say:
/// a first run's `afterTurn` is the only call that can show the revision a reset then changes.
fn lifecycle_revision(call: &ClientCall) -> Option<String> {
    let target = call.session().2.session_target;
    let revision = match call {
        ClientCall::Bootstrap(_) => target.and_then(|t| t.get("expectedLifecycleRevision")),
        ClientCall::AfterTurn(_) | ClientCall::Maintain(_) => {
            target?.get("expectedLifecycleRevision")
        }
        _ => return None,
    };
    let revision = revision
        .and_then(serde_json::Value::as_str)
        .unwrap_or_default();
    Some(revision.replace(['\n', '\r'], " "))
}

fn non_empty(s: Option<&String>) -> Option<&str> {
    s.map(String::as_str).filter(|s| !s.is_empty())
}

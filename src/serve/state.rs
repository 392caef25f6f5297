//! What a served session keeps beside its entries, so the next client process (every
//! `openclaw agent --local` run is one) continues where the last left off. Sessions are kept
//! in the host's store (`host.store`; by default [`JsonlBackend`] under the state directory):
//!
//! ```text
//! <state dir>/sessions/<id slug>-<sha256>/transcript.jsonl             the mirrored messages
//!                                                                       and summaries
//! <state dir>/sessions/<id slug>-<sha256>/transcript.jsonl.state.json  the engine's `p.state`,
//!                                                                       the mirror and the
//!                                                                       commitTurn record
//! ```
//!
//! The engine's state and the [`BridgeRecord`] are committed with the messages the call
//! stored, after every call ([`crate::store::SessionStore::commit`]): a crash leaves all of
//! them as they were or all as they are, so a turn is never recorded as committed while the
//! state the engine's `commitTurn` left is lost (or the reverse), and the mirror never misses
//! a stored message.

use std::collections::VecDeque;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::session::ClientMirror;
use crate::store::jsonl::JsonlBackend;
use crate::transcript::Durability;

/// How many `advancementKey`s a session remembers (the oldest are forgotten first).
pub const COMMIT_RECORD_LEN: usize = 4096;

/// The environment variable naming the state directory (overridden by `--state-dir`).
pub const STATE_DIR_ENV: &str = "CTXHOST_STATE_DIR";

/// The default state directory: `$CTXHOST_STATE_DIR`, else `$XDG_STATE_HOME/ctxhost`, else
/// `~/.local/state/ctxhost`.
pub fn default_state_dir() -> Option<PathBuf> {
    let env = |k: &str| {
        std::env::var_os(k)
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
    };
    env(STATE_DIR_ENV)
        .or_else(|| env("XDG_STATE_HOME").map(|d| d.join("ctxhost")))
        .or_else(|| env("HOME").map(|h| h.join(".local/state/ctxhost")))
}

/// The directory of the conversation `id` (the JSONL store's layout:
/// [`JsonlBackend::session_dir`]).
pub fn session_dir(state_dir: &Path, id: &str) -> PathBuf {
    JsonlBackend::new(state_dir, Durability::default()).session_dir(id)
}

/// Where the parent of a subagent is noted: OpenClaw's `onSubagentEnded` names only the child,
/// possibly in a later client process than the one that prepared the spawn.
fn subagent_file(state_dir: &Path, child: &str) -> PathBuf {
    state_dir
        .join("subagents")
        .join(crate::store::jsonl::digest(child))
}

/// Notes `parent` (a conversation) as the one that prepared the spawn of `child` (a key).
pub fn note_subagent(state_dir: &Path, child: &str, parent: &str) -> std::io::Result<()> {
    let file = subagent_file(state_dir, child);
    if let Some(dir) = file.parent() {
        std::fs::create_dir_all(dir)?;
    }
    std::fs::write(file, parent)
}

/// The session that prepared the spawn of `child`, if one did.
pub fn subagent_parent(state_dir: &Path, child: &str) -> Option<String> {
    std::fs::read_to_string(subagent_file(state_dir, child))
        .ok()
        .filter(|p| !p.is_empty())
}

/// Forgets the parent of `child` (it ended).
pub fn forget_subagent(state_dir: &Path, child: &str) {
    let _ = std::fs::remove_file(subagent_file(state_dir, child));
}

/// The bridge's record of one session: the mirror of the client's transcript and the turns
/// already committed.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct BridgeRecord {
    /// How much of the client's transcript is mirrored.
    pub mirror: ClientMirror,
    /// `advancementKey`s committed, oldest first.
    pub committed: VecDeque<String>,
}

impl BridgeRecord {
    /// Where an earlier ctxhost kept the record, beside the state (read once, when the
    /// state has no record yet).
    pub fn path(dir: &Path) -> PathBuf {
        dir.join("bridge.json")
    }

    /// Reads a record an earlier ctxhost kept in its own file; a missing file is an empty
    /// record, an unreadable one is reported and replaced by an empty one (the mirror then
    /// starts again from the client's view).
    pub fn load(dir: &Path) -> BridgeRecord {
        let path = Self::path(dir);
        match std::fs::read(&path) {
            Ok(bytes) => serde_json::from_slice(&bytes).unwrap_or_else(|e| {
                tracing::warn!(file = %path.display(), "ignoring an unreadable bridge record: {e}");
                BridgeRecord::default()
            }),
            Err(_) => BridgeRecord::default(),
        }
    }

    /// Whether `key` was committed.
    pub fn is_committed(&self, key: &str) -> bool {
        self.committed.iter().any(|k| k == key)
    }

    /// Records `key` as committed.
    pub fn commit(&mut self, key: &str) {
        if self.is_committed(key) {
            return;
        }
        self.committed.push_back(key.to_owned());
        while self.committed.len() > COMMIT_RECORD_LEN {
            self.committed.pop_front();
        }
    }
}

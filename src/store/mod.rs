//! Where sessions are kept: one seam, [`SessionStore`], for everything a session keeps (its
//! entries, the engine's state with a client's record inside it, and its metadata), and one
//! for the place that holds many sessions, [`Backend`].
//!
//! A turn's writes commit together: entries appended since the last [`SessionStore::commit`]
//! and the state passed to it become visible at once, so after a crash a session opens either
//! before the turn or after it, on every backend.
//!
//! - [`jsonl`]: the default, the pi/OpenClaw v3 session file plus `transcript.jsonl.state.json`
//!   beside it (files an earlier ctxhost wrote open unchanged).
//! - [`sqlite`]: one SQLite database file for every session of a state directory.
//! - [`memory`]: nothing on disk, for embedders and tests.
//! - [`postgres`]: a database shared by many `ctxhost serve` processes, each session served by
//!   one of them at a time under a lease with a fencing token.
//!
//! [`open_backend`] opens the one `host.store` names.
//!
//! [`crate::session::Session`] appends through its store and commits after every call it
//! makes durable (with `host.durability: "turn"`, at the end of each turn); `ctxhost serve`
//! opens its sessions through a [`Backend`].

pub mod jsonl;
pub mod memory;
mod pending;
pub mod postgres;
pub mod sqlite;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::contract::message::Message;
pub use crate::contract::{SessionMeta, StorageCursor};
use crate::error::Result;

/// What one commit makes durable together with the entries appended since the last one.
#[derive(Clone, Copy, Debug, Default)]
pub struct Commit<'a> {
    /// The session's state (the engine's `p.state` and a client's record), or `None` to keep
    /// the committed one. Shared, not copied: a store keeps the committed state to write it
    /// again with a commit that brings none, and the session keeps it too.
    pub state: Option<&'a Arc<Value>>,
    /// Whether a turn ended with this commit (counted in [`SessionMeta::turns`]).
    pub turn_ended: bool,
}

/// A session as a store opened it: its store, what it holds, and its committed state.
#[derive(Debug)]
pub struct Opened {
    /// Where the session's next writes go.
    pub store: Box<dyn SessionStore>,
    /// Every committed message, in order, with the ids the store gave them.
    pub messages: Vec<Arc<Message>>,
    /// The state the last commit carried, if any.
    pub state: Option<Value>,
}

/// One session's storage. The session appends what a turn adds and commits at the turn's end;
/// nothing else writes to it.
pub trait SessionStore: Send + std::fmt::Debug {
    /// Appends messages as new entries with fresh ids and returns them as stored. They are
    /// part of the session from now on, and durable once [`commit`](Self::commit) returns.
    /// On an error nothing of this call counts as stored.
    fn append(&mut self, messages: Vec<Message>) -> Result<Vec<Arc<Message>>>;

    /// Makes everything appended since the last commit durable together with `commit.state`:
    /// after a crash the session opens as it was before this commit or as it is after it.
    fn commit(&mut self, commit: Commit<'_>) -> Result<()>;

    /// How many messages the store holds, committed or not.
    fn len(&self) -> usize;

    /// Whether the store holds no message.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Where the session stands, for the lifecycle context's `storageCursor`.
    fn cursor(&self) -> StorageCursor;

    /// When the session was created and how many turns it committed, where known.
    fn meta(&self) -> SessionMeta {
        SessionMeta::default()
    }

    /// A name for the session's storage in messages and in the lifecycle context's
    /// `sessionFile`: the file for JSONL, `memory:<id>` in memory.
    fn location(&self) -> String;

    /// The transcript file, for backends that keep one (tools that read it as JSONL).
    fn file(&self) -> Option<&Path> {
        None
    }

    /// Brings what is read outside the store up to the last commit: the JSONL store's state
    /// file, which a commit leaves to its journal (replaced here, off the call's path). Called
    /// when a session closes (and by the JSONL store when it is dropped); the commits are
    /// durable without it.
    fn flush(&mut self) -> Result<()> {
        Ok(())
    }
}

/// Something a [`Backend`] lists: one session it holds.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SessionSummary {
    /// The session id.
    pub id: String,
    /// Committed messages.
    pub messages: u64,
    /// When it was created and how many turns it committed, where known.
    #[serde(flatten)]
    pub meta: SessionMeta,
}

/// A place that holds many sessions, each opened by id.
pub trait Backend: Send + Sync + std::fmt::Debug {
    /// `fs-jsonl`, `memory` or `postgres`.
    fn kind(&self) -> &'static str;

    /// Opens the session `id`, creating it (empty, with `cwd` recorded where the backend
    /// records one) when it does not exist yet.
    fn open(&self, id: &str, cwd: &str) -> Result<Opened>;

    /// Every session the backend holds, for `doctor` and `store migrate`.
    fn sessions(&self) -> Result<Vec<SessionSummary>>;

    /// Copies a whole session into this backend as it was stored elsewhere (ids kept), in one
    /// commit: afterwards the session is there entirely or not at all. A session already
    /// holding exactly these messages is left as it is (`Ok(false)`); one holding others is
    /// refused.
    fn import(
        &self,
        id: &str,
        messages: &[Arc<Message>],
        state: Option<&Value>,
        meta: &SessionMeta,
    ) -> Result<bool>;

    /// Bytes the backend occupies, when it can tell cheaply (for `doctor`).
    fn size_bytes(&self) -> Option<u64> {
        None
    }

    /// Where the backend keeps its sessions, for `doctor` and messages (a directory, a
    /// database file, a server without its password).
    fn location(&self) -> String {
        self.kind().to_owned()
    }

    /// Writes a consistent copy of every session to `dest` (which must not exist yet) while
    /// sessions keep being served (`ctxhost store backup`).
    fn backup(&self, dest: &Path) -> Result<()> {
        Err(crate::error::Error::Store {
            backend: self.kind(),
            op: "back up",
            session: None,
            message: format!(
                "this backend cannot write a backup to {}; use the database's own tools",
                dest.display()
            ),
        })
    }
}

/// Opens the backend `host.store` names for the sessions of `state_dir` (JSONL files under it,
/// or `ctxhost.db` in it for SQLite unless `path` says otherwise), with `host.durability`.
pub fn open_backend(config: &crate::config::Config, state_dir: &Path) -> Result<Arc<dyn Backend>> {
    use crate::config::StoreSettings;
    let durability = config.host.durability;
    match &config.host.store {
        StoreSettings::Jsonl => Ok(Arc::new(jsonl::JsonlBackend::new(state_dir, durability))),
        StoreSettings::Sqlite(s) => {
            let path = sqlite_path(config, s, state_dir);
            Ok(Arc::new(sqlite::SqliteBackend::open(&path, durability)?))
        }
        StoreSettings::Postgres(p) => {
            let mut options = postgres::PgOptions::new(p.url.clone());
            options.password_env = p.password_env.clone();
            if let Some(schema) = &p.schema {
                options.schema = schema.clone();
            }
            let (lease, wait) = p.lease_and_wait_ms();
            options.lease = std::time::Duration::from_millis(lease);
            options.lease_wait = std::time::Duration::from_millis(wait);
            Ok(Arc::new(postgres::PgBackend::connect(options)?))
        }
    }
}

/// The database file of `host.store: {kind: "sqlite"}`: `path` relative to the config file,
/// else `ctxhost.db` in the state directory.
pub fn sqlite_path(
    config: &crate::config::Config,
    settings: &crate::config::SqliteSettings,
    state_dir: &Path,
) -> PathBuf {
    match &settings.path {
        Some(p) => config.resolve(p),
        None => state_dir.join("ctxhost.db"),
    }
}

/// Whether [`Backend::import`] should copy `incoming` into a session holding `existing`:
/// yes into an empty one, no (already copied) when they are the same messages, and an error
/// when it holds others, so nothing is overwritten.
fn may_import(
    backend: &'static str,
    id: &str,
    existing: &[Arc<Message>],
    incoming: &[Arc<Message>],
) -> Result<bool> {
    if existing.is_empty() {
        return Ok(true);
    }
    if messages_digest(existing) == messages_digest(incoming) {
        return Ok(false);
    }
    Err(crate::error::Error::Store {
        backend,
        op: "import session",
        session: Some(id.to_owned()),
        message: format!(
            "it already holds {} other messages; nothing was copied",
            existing.len()
        ),
    })
}

/// A digest of a session's messages (ids and bodies, in order), so a copy can be checked
/// against its source without comparing them field by field.
pub fn messages_digest(messages: &[Arc<Message>]) -> String {
    let mut ctx = ring::digest::Context::new(&ring::digest::SHA256);
    for m in messages {
        ctx.update(m.id.as_bytes());
        ctx.update(b"\0");
        // A message always serializes (plain data); an unencodable one would hash as empty.
        ctx.update(&serde_json::to_vec(&m.body).unwrap_or_default());
        ctx.update(b"\n");
    }
    ctx.finish()
        .as_ref()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

#[cfg(test)]
#[path = "store_tests.rs"]
mod tests;

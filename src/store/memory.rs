//! Sessions kept in memory only: for embedders that persist elsewhere and for tests. A commit
//! is what a crash would keep, so a test can "crash" a session by dropping it uncommitted and
//! opening it again.

use std::collections::BTreeMap;
use std::sync::Arc;

use parking_lot::Mutex;
use serde_json::Value;

use super::pending::Pending;
use super::{Backend, Commit, Opened, SessionMeta, SessionStore, SessionSummary, StorageCursor};
use crate::contract::message::Message;
use crate::error::Result;

const KIND: &str = "memory";

/// What one session has committed.
#[derive(Clone, Debug, Default)]
struct Committed {
    messages: Vec<Arc<Message>>,
    state: Option<Value>,
    meta: SessionMeta,
    next_id: u64,
}

/// Sessions in memory, shared by every store opened from it.
#[derive(Debug, Default)]
pub struct MemoryBackend {
    sessions: Arc<Mutex<BTreeMap<String, Committed>>>,
}

impl MemoryBackend {
    /// An empty backend.
    pub fn new() -> Self {
        Self::default()
    }
}

/// One session's store over a [`MemoryBackend`]: appends wait in `pending` until a commit.
#[derive(Debug)]
pub struct MemoryStore {
    id: String,
    sessions: Arc<Mutex<BTreeMap<String, Committed>>>,
    pending: Pending,
    meta: SessionMeta,
}

impl Backend for MemoryBackend {
    fn kind(&self) -> &'static str {
        KIND
    }

    fn open(&self, id: &str, _cwd: &str) -> Result<Opened> {
        let mut sessions = self.sessions.lock();
        let committed = sessions.entry(id.to_owned()).or_insert_with(|| Committed {
            meta: SessionMeta {
                created_at: Some(crate::transcript::iso_now()),
                turns: Some(0),
            },
            next_id: 1,
            ..Committed::default()
        });
        let store = MemoryStore {
            id: id.to_owned(),
            sessions: Arc::clone(&self.sessions),
            pending: Pending::after(&committed.messages, committed.next_id),
            meta: committed.meta.clone(),
        };
        Ok(Opened {
            store: Box::new(store),
            messages: committed.messages.clone(),
            state: committed.state.clone(),
        })
    }

    fn sessions(&self) -> Result<Vec<SessionSummary>> {
        Ok(self
            .sessions
            .lock()
            .iter()
            .map(|(id, c)| SessionSummary {
                id: id.clone(),
                messages: c.messages.len() as u64,
                meta: c.meta.clone(),
            })
            .collect())
    }

    fn import(
        &self,
        id: &str,
        messages: &[Arc<Message>],
        state: Option<&Value>,
        meta: &SessionMeta,
    ) -> Result<bool> {
        let mut sessions = self.sessions.lock();
        if let Some(existing) = sessions.get(id)
            && !super::may_import(KIND, id, &existing.messages, messages)?
        {
            return Ok(false);
        }
        let next_id = messages
            .iter()
            .filter_map(|m| u64::from_str_radix(&m.id, 16).ok())
            .max()
            .unwrap_or(0)
            + 1;
        sessions.insert(
            id.to_owned(),
            Committed {
                messages: messages.to_vec(),
                state: state.cloned(),
                meta: meta.clone(),
                next_id,
            },
        );
        Ok(true)
    }
}

impl SessionStore for MemoryStore {
    fn append(&mut self, messages: Vec<Message>) -> Result<Vec<Arc<Message>>> {
        Ok(self.pending.stamp(messages))
    }

    fn commit(&mut self, commit: Commit<'_>) -> Result<()> {
        let mut sessions = self.sessions.lock();
        let c = sessions.entry(self.id.clone()).or_default();
        c.messages.truncate(self.pending.committed_len());
        c.next_id = self.pending.next_id();
        c.messages.extend(self.pending.committed());
        if let Some(state) = commit.state {
            c.state = Some(Value::clone(state));
        }
        if commit.turn_ended {
            self.meta.turns = Some(self.meta.turns.unwrap_or(0) + 1);
        }
        c.meta = self.meta.clone();
        Ok(())
    }

    fn len(&self) -> usize {
        self.pending.len()
    }

    fn cursor(&self) -> StorageCursor {
        self.pending.cursor(KIND, &self.id)
    }

    fn meta(&self) -> SessionMeta {
        self.meta.clone()
    }

    fn location(&self) -> String {
        format!("memory:{}", self.id)
    }
}

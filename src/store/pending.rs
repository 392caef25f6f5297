//! The part of a session store that is the same on every backend that commits in batches
//! (memory, SQLite, Postgres): appended messages are numbered in the session's id sequence and
//! held until a commit writes them, and the session's length and cursor count them already.

use std::sync::Arc;

use crate::contract::StorageCursor;
use crate::contract::message::Message;

/// Messages appended since the last commit, after the ones committed before them.
#[derive(Debug)]
pub(crate) struct Pending {
    /// How many messages the backend holds committed.
    committed: usize,
    messages: Vec<Arc<Message>>,
    /// The number the next appended message's id is made of.
    next_id: u64,
    last_id: Option<String>,
}

impl Pending {
    /// Nothing pending after `committed` (what the backend read), numbering from `next_id`
    /// (at least 1: a backend that never stored a number starts the sequence).
    pub(crate) fn after(committed: &[Arc<Message>], next_id: u64) -> Self {
        Pending {
            committed: committed.len(),
            messages: Vec::new(),
            next_id: next_id.max(1),
            last_id: committed.last().map(|m| m.id.clone()),
        }
    }

    /// Gives `messages` the session's next ids (eight hex digits, as the JSONL store's entries
    /// have) and holds them until the commit; returns them as the session keeps them.
    pub(crate) fn stamp(&mut self, messages: Vec<Message>) -> Vec<Arc<Message>> {
        let mut stored = Vec::with_capacity(messages.len());
        for mut m in messages {
            m.id = format!("{:08x}", self.next_id);
            self.next_id += 1;
            let m = Arc::new(m);
            self.last_id = Some(m.id.clone());
            stored.push(Arc::clone(&m));
            self.messages.push(m);
        }
        stored
    }

    /// What the next commit writes, in order.
    pub(crate) fn messages(&self) -> &[Arc<Message>] {
        &self.messages
    }

    /// Whether nothing waits for a commit.
    pub(crate) fn is_empty(&self) -> bool {
        self.messages.is_empty()
    }

    /// How many messages the backend held committed before these.
    pub(crate) fn committed_len(&self) -> usize {
        self.committed
    }

    /// The session's length, pending messages included.
    pub(crate) fn len(&self) -> usize {
        self.committed + self.messages.len()
    }

    /// The number the next appended message's id is made of (what a commit stores so that a
    /// reopened session goes on numbering where it stopped).
    pub(crate) fn next_id(&self) -> u64 {
        self.next_id
    }

    /// Called once the backend has written what [`Self::messages`] holds: they count as
    /// committed from now on. Returns them (the memory backend keeps them).
    pub(crate) fn committed(&mut self) -> Vec<Arc<Message>> {
        self.committed += self.messages.len();
        std::mem::take(&mut self.messages)
    }

    /// Where the session stands, pending messages included.
    pub(crate) fn cursor(&self, backend: &str, session_id: &str) -> StorageCursor {
        StorageCursor {
            backend: backend.into(),
            session_id: session_id.to_owned(),
            seq: self.len() as u64,
            entry_id: self.last_id.clone(),
        }
    }
}

//! The engine's per-session state (`p.state` / `this`), committed to the session's store with
//! the entries a call appended (one [`crate::store::SessionStore::commit`]: a crash leaves both
//! as they were or both as they are) and restored when the session reopens or follows a reload.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::error::{EngineError, EngineErrorKind, Error, Op, Result};
use crate::store::Commit;

use super::Session;
use crate::transcript::Durability;

/// The file beside a transcript that holds the engine's per-session state (JSONL store).
pub fn state_path(transcript: &Path) -> PathBuf {
    crate::store::jsonl::state_path(transcript)
}

impl Session {
    pub(super) fn restore_state(&mut self) -> Result<()> {
        let Some(doc) = self.saved.clone() else {
            return Ok(());
        };
        let saved: SavedState = match SavedState::deserialize(&*doc) {
            Ok(s) => s,
            Err(e) => {
                tracing::warn!(session = &*self.id, location = %self.store.location(), "ignoring unreadable engine state: {e}");
                return Ok(());
            }
        };
        if self.record.is_none() {
            self.record = saved.client.map(|value| super::SavedRecord {
                value,
                entries: saved.stored,
            });
        }
        if saved.engine != self.engine_id {
            return Ok(());
        }
        let Some(mut engine) = self.engine.take() else {
            return Ok(());
        };
        match engine.restore_state(saved.state) {
            Ok(()) => {
                self.engine = Some(engine);
                Ok(())
            }
            Err(e) => {
                self.engine = Some(engine);
                self.on_failure(e)
            }
        }
    }

    /// Commits what the session appended since its last commit together with the engine's
    /// state and the caller's record (one [`crate::store::SessionStore::commit`], so the three
    /// never disagree after a crash). A turn that ended since the last commit is counted.
    pub(super) fn save_state(&mut self) -> Result<()> {
        let turn_ended = std::mem::take(&mut self.turn_ended);
        let (engine_id, state) = match self.engine.take() {
            Some(mut engine) => {
                let state = engine.save_state();
                self.engine = Some(engine);
                match state {
                    Ok(s) => (self.engine_id.clone(), s),
                    Err(e) => {
                        self.commit_entries(turn_ended)?;
                        return self.on_failure(e);
                    }
                }
            }
            // No instance (quarantined, or legacy): the saved state stays as it is, and only
            // a caller's record has anything new to write.
            None if self.record.is_none() => return self.commit_entries(turn_ended),
            None => match self
                .saved
                .as_ref()
                .and_then(|v| SavedState::deserialize(&**v).ok())
            {
                Some(old) => (old.engine, old.state),
                None => (self.engine_id.clone(), Value::Null),
            },
        };
        let mut doc = Map::new();
        doc.insert("engine".into(), Value::String(engine_id));
        doc.insert("state".into(), state);
        if let Some(record) = &self.record {
            doc.insert("client".into(), record.value.clone());
            // How many entries the record accounts for (the commit holds them all; a state an
            // earlier ctxhost saved could account for fewer).
            if let Some(n) = record.entries {
                doc.insert("stored".into(), Value::from(n));
            }
        }
        let doc = Arc::new(Value::Object(doc));
        // The cap counts the state as written (escaped JSON: a control character is six
        // bytes), and measuring stops at it rather than build a huge file only to refuse it.
        let cap = self.setup.limits.max_result_bytes;
        let mut text = CappedWriter::new(cap);
        if let Err(e) = serde_json::to_writer_pretty(&mut text, &*doc) {
            if text.over {
                self.commit_entries(turn_ended)?;
                let e = EngineError::new(
                    Op::SaveState,
                    self.engine_id.clone(),
                    EngineErrorKind::Limit,
                    format!("the engine state is over {cap} bytes as written (escaped JSON)"),
                );
                return self.on_failure(e);
            }
            return Err(Error::Host(EngineError::new(
                Op::SaveState,
                self.engine_id.clone(),
                EngineErrorKind::Host,
                format!("serialize engine state: {e}"),
            )));
        }
        let committed = self.store.commit(Commit {
            state: Some(&doc),
            turn_ended,
        });
        if committed.is_err() {
            self.turn_ended |= turn_ended;
        }
        committed?;
        self.saved = Some(doc);
        Ok(())
    }

    /// Brings what the store leaves to be read outside it (the JSONL state file, which a
    /// commit leaves to its journal) up to the last commit. The commits are durable without
    /// it; closing the session does it too.
    pub fn flush_store(&mut self) -> Result<()> {
        self.store.flush()
    }

    /// Commits the entries appended since the last commit, keeping the committed state.
    pub(super) fn commit_entries(&mut self, turn_ended: bool) -> Result<()> {
        let committed = self.store.commit(Commit {
            state: None,
            turn_ended,
        });
        if committed.is_err() {
            self.turn_ended |= turn_ended;
        }
        committed
    }

    /// After a call outside a turn's end: with `durability: entry` what the call appended is
    /// committed now (whether the call succeeded or not: what was stored stays stored); with
    /// `turn` (and `none`, which keeps nothing across a crash anyway) it waits for the turn's
    /// end. The call's own error comes first.
    pub(super) fn after_call<R>(&mut self, r: Result<R>) -> Result<R> {
        if self.setup.durability != Durability::Entry {
            return r;
        }
        let committed = self.commit_entries(false);
        let r = r?;
        committed.map(|()| r)
    }
}

/// Counts bytes written and refuses to go past `cap` (the write fails and `over` is set).
struct CappedWriter {
    len: usize,
    cap: usize,
    over: bool,
}

impl CappedWriter {
    fn new(cap: usize) -> Self {
        CappedWriter {
            len: 0,
            cap,
            over: false,
        }
    }
}

impl std::io::Write for CappedWriter {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        if self.len.saturating_add(buf.len()) > self.cap {
            self.over = true;
            return Err(std::io::Error::other("over the state cap"));
        }
        self.len += buf.len();
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[derive(Serialize, Deserialize)]
struct SavedState {
    engine: String,
    state: Value,
    /// What a caller keeps with the session (`ctxhost serve`: the mirror of its client's
    /// transcript and the `commitTurn` record), saved in the same write as the state.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    client: Option<Value>,
    /// How many transcript messages `client` accounts for ([`super::SavedRecord::entries`];
    /// an earlier ctxhost wrote it too, before a commit kept entries and state together).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    stored: Option<usize>,
}

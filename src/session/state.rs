//! The engine's per-session state (`p.state` / `this`), saved beside the transcript after each
//! turn and restored when the session reopens or follows a reload.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::error::{EngineError, EngineErrorKind, Error, Op, Result};

use super::Session;
use crate::transcript::Durability;

/// The file beside a transcript that holds the engine's per-session state.
pub fn state_path(transcript: &Path) -> PathBuf {
    let mut name = transcript.file_name().unwrap_or_default().to_os_string();
    name.push(".state.json");
    transcript.with_file_name(name)
}

impl Session {
    pub(super) fn restore_state(&mut self) -> Result<()> {
        let path = state_path(self.store.path());
        let Ok(text) = std::fs::read_to_string(&path) else {
            return Ok(());
        };
        let saved: SavedState = match serde_json::from_str(&text) {
            Ok(s) => s,
            Err(e) => {
                tracing::warn!(file = %path.display(), "ignoring unreadable engine state: {e}");
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

    /// Saves the engine's state, and the caller's record with it (one atomic write, so the
    /// two never disagree after a crash).
    pub(super) fn save_state(&mut self) -> Result<()> {
        let path = state_path(self.store.path());
        let (engine_id, state) = match self.engine.take() {
            Some(mut engine) => {
                let state = engine.save_state();
                self.engine = Some(engine);
                match state {
                    Ok(s) => (self.engine_id.clone(), s),
                    Err(e) => return self.on_failure(e),
                }
            }
            // No instance (quarantined, or legacy): the saved state stays as it is, and only
            // a caller's record has anything new to write.
            None if self.record.is_none() => return Ok(()),
            None => match std::fs::read(&path)
                .ok()
                .and_then(|b| serde_json::from_slice::<SavedState>(&b).ok())
            {
                Some(old) => (old.engine, old.state),
                None => (self.engine_id.clone(), Value::Null),
            },
        };
        let saved = SavedState {
            engine: engine_id,
            state,
            client: self.record.as_ref().map(|r| r.value.clone()),
            stored: self.record.as_ref().and_then(|r| r.entries),
        };
        // The cap counts the state as written (escaped JSON: a control character is six
        // bytes), and writing stops at it rather than build a huge file only to refuse it.
        let cap = self.setup.limits.max_result_bytes;
        let mut text = CappedWriter::new(cap);
        if let Err(e) = serde_json::to_writer_pretty(&mut text, &saved) {
            if text.over {
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
        let text = text.bytes;
        // The state is saved after every call of a served session: an unchanged state costs a
        // read, not a write and two syncs.
        if std::fs::read(&path).is_ok_and(|old| old == text) {
            return Ok(());
        }
        crate::store::jsonl::write_atomic(&path, &text, self.setup.durability != Durability::None)
    }
}

/// A buffer that refuses to grow past `cap` bytes (the write fails and `over` is set).
struct CappedWriter {
    bytes: Vec<u8>,
    cap: usize,
    over: bool,
}

impl CappedWriter {
    fn new(cap: usize) -> Self {
        CappedWriter {
            bytes: Vec::new(),
            cap,
            over: false,
        }
    }
}

impl std::io::Write for CappedWriter {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        if self.bytes.len().saturating_add(buf.len()) > self.cap {
            self.over = true;
            return Err(std::io::Error::other("over the state cap"));
        }
        self.bytes.extend_from_slice(buf);
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
    /// How many transcript messages `client` accounts for ([`super::SavedRecord::entries`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    stored: Option<usize>,
}

//! The engine's per-session state (`p.state` / `this`), saved beside the transcript after each
//! turn and restored when the session reopens or follows a reload.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::error::{EngineError, EngineErrorKind, Error, Op, Result};

use super::Session;

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

    pub(super) fn save_state(&mut self) -> Result<()> {
        let Some(mut engine) = self.engine.take() else {
            return Ok(());
        };
        let state = engine.save_state();
        self.engine = Some(engine);
        let state = match state {
            Ok(s) => s,
            Err(e) => return self.on_failure(e),
        };
        let path = state_path(self.store.path());
        let saved = SavedState {
            engine: self.engine_id.clone(),
            state,
        };
        let text = serde_json::to_vec_pretty(&saved).map_err(|e| {
            Error::Host(EngineError::new(
                Op::SaveState,
                self.engine_id.clone(),
                EngineErrorKind::Host,
                format!("serialize engine state: {e}"),
            ))
        })?;
        write_atomic(&path, &text)
    }
}

#[derive(Serialize, Deserialize)]
struct SavedState {
    engine: String,
    state: Value,
}

fn write_atomic(path: &Path, bytes: &[u8]) -> Result<()> {
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(".tmp");
    let tmp = PathBuf::from(tmp);
    std::fs::write(&tmp, bytes).map_err(|e| Error::io("write engine state", &tmp, e))?;
    std::fs::rename(&tmp, path).map_err(|e| Error::io("replace engine state", path, e))
}

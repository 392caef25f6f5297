//! What the last commit of a transcript left, as the next open reads it: the state file, or
//! the journal's newest record when the state file is behind it.

use std::path::Path;

use serde_json::Value;

use super::{MARK_KEY, Mark, journal, state_fields, state_path};

/// What the last commit of a transcript left: its state and mark (from the state file, or
/// from the journal when that is newer), and the journal record to check the transcript
/// against.
pub(super) struct Committed {
    pub(super) state: Option<Value>,
    pub(super) mark: Option<Mark>,
    pub(super) redo: Option<journal::Record>,
    /// The state file missed the newest commit; the journal's record stands for it.
    pub(super) from_journal: bool,
}

pub(super) fn read_committed(transcript: &Path) -> Committed {
    let (state, mark) = read_state(&state_path(transcript));
    let file_seq = mark.map_or(0, |m| m.seq);
    let Some(record) = journal::newest(transcript) else {
        return Committed {
            state,
            mark,
            redo: None,
            from_journal: false,
        };
    };
    if record.seq == file_seq && mark.is_some() {
        return Committed {
            state,
            mark,
            redo: Some(record),
            from_journal: false,
        };
    }
    if record.seq > file_seq || mark.is_none() {
        match parse_state(&record.state) {
            Some((state, Some(mark))) if mark.seq == record.seq => {
                return Committed {
                    state,
                    mark: Some(mark),
                    redo: Some(record),
                    from_journal: true,
                };
            }
            _ => tracing::warn!(
                file = %transcript.display(),
                "ignoring a commit journal record whose state does not read"
            ),
        }
    }
    // An older record (the store ran without syncs since) stands for nothing.
    Committed {
        state,
        mark,
        redo: None,
        from_journal: false,
    }
}

/// The state document the last commit of `transcript` holds, with its mark under `commit`, as
/// the next open reads it: the journal's newest record when the state file is behind it (a
/// session still open, or one a crash ended), else the state file. `None` when neither holds
/// one (a state file an earlier ctxhost wrote has no mark). For readers outside the store
/// (tests that look at what a kill left).
pub fn committed_document(transcript: &Path) -> Option<Value> {
    let committed = read_committed(transcript);
    if committed.state.is_none() && committed.mark.is_none() {
        return None;
    }
    let mut doc = state_fields(committed.state.as_ref()).into_owned();
    if let Some(mark) = committed.mark {
        doc.insert(MARK_KEY.into(), serde_json::to_value(mark).ok()?);
    }
    Some(Value::Object(doc))
}

/// The committed state and its mark; a missing or unreadable file is no state (reported).
fn read_state(path: &Path) -> (Option<Value>, Option<Mark>) {
    let Ok(text) = std::fs::read(path) else {
        return (None, None);
    };
    parse_state(&text).unwrap_or_else(|| {
        tracing::warn!(file = %path.display(), "ignoring an unreadable session state");
        (None, None)
    })
}

fn parse_state(text: &[u8]) -> Option<(Option<Value>, Option<Mark>)> {
    match serde_json::from_slice::<Value>(text) {
        Ok(Value::Object(mut doc)) => {
            let mark = doc
                .remove(MARK_KEY)
                .and_then(|m| serde_json::from_value::<Mark>(m).ok());
            let state = (!doc.is_empty()).then_some(Value::Object(doc));
            Some((state, mark))
        }
        Ok(_) | Err(_) => None,
    }
}

//! SWE-agent `.traj`: the `history` array is the session (chat messages with OpenAI
//! `tool_calls`; tool messages name their calls in a `tool_call_ids` list). `trajectory`, which
//! repeats the prompt at every step, is ignored.

use serde_json::Value;

use super::{Import, chat};

/// Imports one SWE-agent trajectory.
pub(super) fn import(name: String, doc: Value, out: &mut Import) -> Result<(), String> {
    let Some(history) = doc.get("history").and_then(Value::as_array) else {
        return Err("expected an object with a `history` array".into());
    };
    let session = chat::convert(name, history, "history: ", out);
    out.sessions.push(session);
    Ok(())
}

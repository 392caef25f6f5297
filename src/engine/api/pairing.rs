//! `host.repairPairing(messages)`: tool-call pairing repaired as the host repairs the assembled
//! context (see [`crate::services::pairing`]); messages that survive come back as the very values passed.

use std::sync::Arc;

use super::HostCall;
use super::table::{Args, Ctx};
use super::value::{self, HostError, HostOut};
use crate::contract::message::Message;
use crate::services::pairing::{self, Repaired};

impl HostCall {
    /// Repairs tool pairing in `messages`.
    pub fn repair_pairing(&self, messages: Vec<Arc<Message>>) -> Repaired {
        pairing::repair(messages)
    }
}

/// `host.repairPairing(messages)` → the repaired list (kept messages as the script's own
/// values) and the number of repairs.
pub(super) fn repair(cx: &Ctx<'_>, [messages, ..]: Args) -> Result<HostOut, HostError> {
    let max = cx.scope().limits().max_result_messages;
    let input = messages
        .into_messages(max)
        .map_err(|e| cx.script_error(format!("messages {e}")))?;
    let repaired = cx.call()?.repair_pairing(input.clone());
    let repairs = u64::try_from(repaired.repairs.len()).unwrap_or(u64::MAX);
    Ok(HostOut::Many(vec![
        HostOut::Messages(value::kept(&input, repaired.messages)),
        HostOut::Count(repairs),
    ]))
}
